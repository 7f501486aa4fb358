"""rnnport's speed against PyTorch and ONNX Runtime on the CPU, all measured in one run.

Every forward workload builds one network with random weights, hands identical weights
to each engine (PyTorch through ``write(fmt="torch")``, ONNX Runtime through
``write(fmt="onnx")``), checks that the outputs agree, then times each engine: one
warm-up call, then ``--repeat`` calls, reporting the median. The ratio column is
``time / ONNX Runtime's time`` from the same run, and GFLOP/s is set against the best of
several large NumPy matrix products measured in the same run (the machine's practical
ceiling for this BLAS).

Workloads::

    A  6-layer bidirectional LSTM, input 120, hidden 320, batch 1 x 500 steps
    B  the same network, batch 16 x 200 steps
    C  2-layer GRU, input 256, hidden 512, batch 32 x 100 steps
    D  conversion of a ~100M-parameter stacked LSTM: Keras weights -> cuDNN buffer ->
       PyTorch state_dict, against a plain NumPy copy of the same bytes
    E  `import rnnport` in a fresh interpreter, bytecode cached (no framework may be imported)
    S  streaming: an LSTM 128->128, batch 1, one step per call, the state carried; then
       rnnport's streams (``rnn.stream(engine=...)``: NumPy, onnxruntime, torch) and the
       runtimes called directly, for calls of 1 and 10 steps, 1 and 64 streams at once
    F  corpus throughput: `rnnport run` over many feature files, one worker against two
       (a process pool, and the Dask workers of a local cluster)

Each forward workload (A, B, C) times rnnport's NumPy engine, rnnport's ``onnxruntime``
and ``torch`` engines (``forward(engine=...)``) and the two runtimes called directly: an
engine's overhead is its time over its runtime's, called directly on the same network
(the median ratio of calls timed in pairs, one right after the other).
Then (unless ``--no-contention``) every engine runs again beside one competing CPU-bound
process, and the slowdown against its idle time is reported.

Usage: ``make bench``, or ``python bench/bench.py [--repeat N] [--only A,B] [--json PATH]
[--compare OLD.json] [--markdown] [--no-contention]``. The results go to
``bench/results/`` as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

import rnnport

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-4  # float32 engines summing in different orders over hundreds of steps
TARGETS = {"A": 1.5, "B": 1.25, "C": 1.25}  # rnnport time / ONNX Runtime time, at most
ENGINE_OVERHEAD_TARGET = 0.10  # an engine through rnnport, over its runtime called directly
CONTENTION_TARGET = 2.0  # time beside one competing process / idle time, at most
# S, one stream of one step per call, over ONNX Runtime called directly (timed in pairs)
STREAM_TARGETS = {"stream:numpy": 0.8, "stream:onnxruntime": 1.1}
CORPUS_TARGET = 1.8  # two workers' throughput / one worker's, at least
COPY_TARGET = 0.5  # conversion bandwidth / plain copy bandwidth, at least
IMPORT_TARGET_MS = 150.0
FRAMEWORKS = ("torch", "tensorflow", "keras", "onnx", "onnxruntime", "jax", "h5py")


@dataclass(frozen=True)
class Forward:
    """A forward workload: a network shape and an input shape."""

    name: str
    title: str
    spec: rnnport.Spec
    batch: int
    steps: int

    def flops(self) -> float:
        """Multiply-adds x 2 of the input and recurrent products (elementwise work left out)."""
        spec = self.spec
        total = 0
        for layer in range(spec.num_layers):
            width = spec.layer_input_size(layer)
            per_step = spec.gate_count * spec.hidden_size * (width + spec.output_size)
            total += spec.num_directions * per_step
        return 2.0 * total * self.batch * self.steps


ACOUSTIC = rnnport.Spec(cell="lstm", input_size=120, hidden_size=320, num_layers=6,
                        bidirectional=True)
FORWARDS = {
    "A": Forward("A", "6-layer bi-LSTM 120→320, batch 1 × 500", ACOUSTIC, 1, 500),
    "B": Forward("B", "6-layer bi-LSTM 120→320, batch 16 × 200", ACOUSTIC, 16, 200),
    "C": Forward("C", "2-layer GRU 256→512, batch 32 × 100",
                 rnnport.Spec(cell="gru", input_size=256, hidden_size=512, num_layers=2), 32, 100),
}
# 12 layers x (4·1024·(1024 + 1024) + 4·1024) Keras parameters = 100.7M.
CONVERSION = rnnport.Spec(cell="lstm", input_size=1024, hidden_size=1024, num_layers=12)


def timed(call: Callable[[], Any], repeat: int, warmup: int = 1) -> list[float]:
    """Seconds taken by each of ``repeat`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


# -- the machine's ceiling -------------------------------------------------------------------


def matmul_ceiling(repeat: int) -> dict[str, Any]:
    """GFLOP/s of a large float32 NumPy matrix product (the best of ``repeat``)."""
    size = 2048
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    out = np.empty_like(a)
    times = timed(lambda: np.matmul(a, b, out=out), max(repeat, 3))
    return {"size": size, "gflops": 2.0 * size**3 / min(times) / 1e9}


# -- forward workloads --------------------------------------------------------------------


def torch_runner(rnn: rnnport.RNN, x: np.ndarray) -> tuple[Callable[[], Any], Callable[[], np.ndarray]]:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    module = rnnport.write(rnn, "torch", module=True, batch_first=True)
    inputs = torch.from_numpy(x)

    def call() -> Any:
        with torch.inference_mode():
            return module(inputs)

    return call, lambda: call()[0].numpy()


def onnxruntime_runner(rnn: rnnport.RNN, x: np.ndarray) -> tuple[Callable[[], Any],
                                                                Callable[[], np.ndarray]]:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = os.cpu_count() or 1
    session = onnxruntime.InferenceSession(rnnport.write(rnn, "onnx").SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    output = session.get_outputs()[0].name

    def call() -> Any:
        return session.run([output], {"x": x})

    return call, lambda: call()[0]


def rnnport_runner(rnn: rnnport.RNN, x: np.ndarray, engine: str = "numpy"
                   ) -> tuple[Callable[[], Any], Callable[[], np.ndarray]]:
    def call() -> Any:
        return rnn.forward(x, engine=engine)

    return call, lambda: call()[0]


ENGINES = {"rnnport": rnnport_runner, "torch": torch_runner, "onnxruntime": onnxruntime_runner,
           "rnnport:onnxruntime": lambda rnn, x: rnnport_runner(rnn, x, "onnxruntime"),
           "rnnport:torch": lambda rnn, x: rnnport_runner(rnn, x, "torch")}
# Each engine through rnnport, and its runtime called directly.
THROUGH = {"rnnport:onnxruntime": "onnxruntime", "rnnport:torch": "torch"}


def overhead(through: Callable[[], Any], direct: Callable[[], Any], pairs: int) -> float:
    """An engine's time through rnnport over its runtime's called directly, less one: the
    median of ``pairs`` ratios, each of one call of either, one right after the other, so
    that a slow spell of a shared machine falls on both sides of a ratio alike (from the
    rounds of :func:`run_forward`, where an engine's calls run together, it swung by
    ±10 %)."""
    through(), direct()
    ratios = []
    for _ in range(pairs):
        ratios.append(timed(through, 1, warmup=0)[0] / timed(direct, 1, warmup=0)[0])
    return statistics.median(ratios) - 1.0


@contextlib.contextmanager
def competing_process() -> Iterator[None]:
    """One CPU-bound process beside the block (a busy machine, as users have)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)  # scheduled and spinning
        yield
    finally:
        spinner.kill()
        spinner.wait()


def run_forward(workload: Forward, repeat: int, rounds: int, ceiling: float,
                contention: bool = False) -> dict[str, Any]:
    rnn = rnnport.RNN.random(workload.spec, seed=1)
    x = np.random.default_rng(2).standard_normal(
        (workload.batch, workload.steps, workload.spec.input_size), dtype=np.float32)
    runners = {name: make(rnn, x) for name, make in ENGINES.items()}
    outputs = {name: output() for name, (_, output) in runners.items()}
    reference = outputs["torch"]
    agreement = {name: float(np.max(np.abs(out - reference))) for name, out in outputs.items()}
    worst = max(agreement.values())
    if not worst <= TOLERANCE:
        raise SystemExit(f"bench {workload.name}: the engines disagree (max |Δ| against PyTorch "
                         f"{agreement}); expected at most {TOLERANCE}. Not timing a wrong answer.")
    flops = workload.flops()
    samples: dict[str, list[float]] = {name: [] for name in runners}
    # Rounds, each engine in turn, so that a slow spell of a shared machine falls on all.
    for _ in range(rounds):
        for name, (call, _) in runners.items():
            samples[name] += timed(call, repeat)
    times = {}
    for name, taken in samples.items():
        seconds = statistics.median(taken)
        times[name] = {"median_s": seconds, "samples_s": taken, "gflops": flops / seconds / 1e9,
                       "ceiling_fraction": flops / seconds / 1e9 / ceiling}
    reference_time = times["onnxruntime"]["median_s"]
    for entry in times.values():
        entry["vs_onnxruntime"] = entry["median_s"] / reference_time
    for name, direct in THROUGH.items():
        times[name]["overhead"] = overhead(runners[name][0], runners[direct][0],
                                           repeat * rounds)
    if contention:
        with competing_process():
            for name, (call, _) in runners.items():
                busy = statistics.median(timed(call, repeat))
                times[name]["busy_s"] = busy
                times[name]["slowdown"] = busy / times[name]["median_s"]
    ratio = times["rnnport"]["vs_onnxruntime"]
    return {"title": workload.title, "spec": workload.spec.describe(), "batch": workload.batch,
            "steps": workload.steps, "gflop": flops / 1e9, "max_abs_diff_vs_torch": agreement,
            "engines": times, "target_vs_onnxruntime": TARGETS[workload.name],
            "met": ratio <= TARGETS[workload.name]}


# -- streaming ---------------------------------------------------------------------------------

STREAMING = rnnport.Spec(cell="lstm", input_size=128, hidden_size=128)


def run_streaming(steps: int, rounds: int) -> dict[str, Any]:
    """Microseconds per step, one step per call with the state carried, for rnnport's
    engines and the runtimes called directly; every engine must end in the same state."""
    import onnxruntime
    import torch

    rnn = rnnport.RNN.random(STREAMING, seed=5)
    xs = np.random.default_rng(6).standard_normal((steps, 1, 1, STREAMING.input_size),
                                                  dtype=np.float32)
    zeros = np.zeros((1, 1, STREAMING.hidden_size), np.float32)

    def through(engine: str) -> Callable[[], Any]:
        def call() -> Any:
            state: Any = (zeros, zeros)
            for x in xs:
                _, state = rnn.forward(x, state=state, engine=engine)
            return state[0]
        return call

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1  # one step of a small network: threads only cost
    session = onnxruntime.InferenceSession(
        rnnport.write(rnn, "onnx", initial_state=True, time_major=True).SerializeToString(),
        options, providers=["CPUExecutionProvider"])
    module = rnnport.write(rnn, "torch", module=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as for ONNX Runtime (the engine shares the setting)
    direct_onnxruntime, direct_torch = _called_directly(session, module, xs, zeros)

    def stream() -> Any:
        streamed = rnn.stream(1, time_major=True)
        for x in xs:
            streamed(x)
        return streamed.state[0]

    calls = {"rnnport": through("numpy"), "rnnport:stream": stream,
             "rnnport:onnxruntime": through("onnxruntime"),
             "rnnport:torch": through("torch"), "onnxruntime": direct_onnxruntime,
             "torch": direct_torch}
    finals = {name: np.asarray(call()) for name, call in calls.items()}
    worst = max(float(np.max(np.abs(final - finals["rnnport"]))) for final in finals.values())
    if not worst <= TOLERANCE:
        raise SystemExit(f"bench S: the engines' final states disagree by {worst}; expected at "
                         f"most {TOLERANCE}. Not timing a wrong answer.")
    samples: dict[str, list[float]] = {name: [] for name in calls}
    try:
        for _ in range(rounds):
            for name, call in calls.items():
                samples[name] += timed(call, 1, warmup=0)
        time_major = rnnport.write(rnn, "torch", module=True, batch_first=False)
        streams = {f"{batch}x{chunk}": stream_grid(rnn, session, time_major, batch, chunk,
                                                    max(1, steps // (10 if batch > 1 else 1)
                                                        // chunk), rounds)
                   for batch, chunk in STREAM_GRID}
    finally:
        torch.set_num_threads(threads)
    per_step = {name: statistics.median(taken) / steps * 1e6 for name, taken in samples.items()}
    return {"title": f"LSTM {STREAMING.input_size}→{STREAMING.hidden_size}, batch 1, one step "
                     "per call", "steps": steps, "us_per_step": per_step,
            "vs_onnxruntime": per_step["rnnport"] / per_step["onnxruntime"],
            "stream_vs_onnxruntime": per_step["rnnport:stream"] / per_step["onnxruntime"],
            "streams": streams}


def _called_directly(session: Any, module: Any, xs: np.ndarray, zeros: np.ndarray
                     ) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """ONNX Runtime's ``session`` and PyTorch's ``module`` (time-major, taking and giving
    the state) run on each chunk of ``xs`` from ``zeros``, the state fed back by the caller:
    each a call that returns the final ``h``."""
    import torch

    inputs = [entry.name for entry in session.get_inputs()]
    outputs = [entry.name for entry in session.get_outputs()]

    def direct_onnxruntime() -> Any:
        h = c = zeros
        for x in xs:
            _, h, c = session.run(outputs, dict(zip(inputs, (x, h, c), strict=True)))
        return h

    def direct_torch() -> Any:
        state = (torch.from_numpy(zeros), torch.from_numpy(zeros))
        with torch.inference_mode():
            for x in xs:
                _, state = module(torch.from_numpy(x), state)
        return state[0].numpy()

    return direct_onnxruntime, direct_torch


# (streams served in one batch, steps per call) of the stream grid
STREAM_GRID = ((1, 1), (1, 10), (64, 1), (64, 10))
# each stream against ONNX Runtime called directly, the state fed back by the caller
STREAMS = ("stream:numpy", "stream:onnxruntime", "stream:torch", "onnxruntime", "torch")


def stream_grid(rnn: rnnport.RNN, session: Any, module: Any, batch: int, chunk: int,
                calls: int, rounds: int) -> dict[str, Any]:
    """Microseconds per call of ``chunk`` steps for ``batch`` streams at once: rnnport's
    streams (NumPy, and through each engine) and the runtimes called directly with the
    state fed back, timed in rounds; and each one's time over ONNX Runtime's called
    directly, the median ratio of calls timed in pairs (:func:`overhead`). A sample runs
    ``calls`` calls; every one must end in the same state. ``session`` and ``module``
    (``batch_first=False``) are time-major, taking and giving the state."""

    xs = np.random.default_rng(7).standard_normal((calls, chunk, batch, STREAMING.input_size),
                                                  dtype=np.float32)
    zeros = np.zeros((1, batch, STREAMING.hidden_size), np.float32)
    direct_onnxruntime, direct_torch = _called_directly(session, module, xs, zeros)

    def streamed(engine: str) -> Callable[[], Any]:
        stream = rnn.stream(batch, time_major=True, engine=engine)

        def call() -> Any:
            stream.reset()
            for x in xs:
                stream(x)
            return stream.state[0]
        return call

    calls_of = {"stream:numpy": streamed("numpy"), "stream:onnxruntime": streamed("onnxruntime"),
                "stream:torch": streamed("torch"), "onnxruntime": direct_onnxruntime,
                "torch": direct_torch}
    finals = {name: np.asarray(call()) for name, call in calls_of.items()}
    worst = max(float(np.max(np.abs(final - finals["onnxruntime"])))
                for final in finals.values())
    if not worst <= TOLERANCE:
        raise SystemExit(f"bench S ({batch} streams × {chunk} steps): the streams' final states "
                         f"disagree by {worst}; expected at most {TOLERANCE}.")
    samples: dict[str, list[float]] = {name: [] for name in calls_of}
    for _ in range(rounds):
        for name, call in calls_of.items():
            samples[name] += timed(call, 1, warmup=0)
    direct = calls_of["onnxruntime"]
    return {"batch": batch, "chunk": chunk, "calls": calls,
            "us_per_call": {name: statistics.median(taken) / calls * 1e6
                            for name, taken in samples.items()},
            "vs_onnxruntime": {name: overhead(call, direct, rounds) + 1.0
                               for name, call in calls_of.items() if name != "onnxruntime"}}


# -- corpus throughput ---------------------------------------------------------------------------

CORPUS = rnnport.Spec(cell="lstm", input_size=120, hidden_size=320, num_layers=2,
                      bidirectional=True)


def run_corpus(files: int, rounds: int, spec: rnnport.Spec = CORPUS,
               frames: tuple[int, int] = (8, 200)) -> dict[str, Any]:
    """Frames per second of ``rnnport run`` over ``files`` feature files: in a pool of one
    and of two worker processes (start-up included), and on the Dask workers of a local
    cluster (one worker, and two; one BLAS thread each, as ``--dask local`` starts them).
    Each round runs every setting once, one after the other, so that a slow spell of a
    shared machine falls on all of them; the best round of each counts. A cluster is
    started for its measurement alone and closed after it, so that no idle cluster takes
    its share of the cores; before the timing, every worker has read the model (as on a
    cluster kept up between runs), which is not timed."""
    import tempfile

    from rnnport import corpus

    rng = np.random.default_rng(7)
    results: dict[str, Any] = {"title": f"{files} files of {frames[0]} × {frames[1]} frames, "
                                        f"{spec.describe()}", "files": files}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        rnnport.write(rnnport.RNN.random(spec, seed=8), "npz", path=root / "model.npz")
        (root / "in").mkdir()
        for index in range(files):
            np.save(root / "in" / f"f{index:03d}.npy",
                    rng.standard_normal((*frames, spec.input_size), dtype=np.float32))
        settings = {"pool-1": 1, "pool-2": 2, "dask-1": 1, "dask-2": 2}
        seconds: dict[str, list[float]] = {label: [] for label in settings}
        total = 0
        for round_ in range(rounds):
            for label, workers in settings.items():
                with contextlib.ExitStack() as stack:
                    how: dict[str, Any] = {"jobs": workers}
                    if label.startswith("dask"):
                        how["dask"] = stack.enter_context(_warm_cluster(workers, root))
                    start = time.perf_counter()
                    summary = corpus.run(root / "model.npz", [root / "in"],
                                         root / f"out-{label}-{round_}", **how)
                    seconds[label].append(time.perf_counter() - start)
                if summary.done != files:
                    raise SystemExit(f"bench F ({label}): {summary.done} of {files} files done.")
                total = summary.frames
        for label, taken in seconds.items():
            results[label] = {"seconds": min(taken), "samples_s": taken,
                              "frames_per_second": total / min(taken)}
    results["pool_speedup"] = (results["pool-2"]["frames_per_second"]
                               / results["pool-1"]["frames_per_second"])
    results["dask_speedup"] = (results["dask-2"]["frames_per_second"]
                               / results["dask-1"]["frames_per_second"])
    results["target_speedup"] = CORPUS_TARGET
    results["met"] = results["dask_speedup"] >= CORPUS_TARGET
    return results


@contextlib.contextmanager
def _warm_cluster(workers: int, root: Path) -> Iterator[str]:
    """The address of a local cluster of ``workers`` one-thread workers, started as
    ``--dask local`` starts it, each of which has read the model at ``root``."""
    from rnnport import corpus

    with corpus.local_cluster(workers) as cluster:
        warm = [*sorted((root / "in").iterdir())][:2 * workers]
        for _ in range(5):
            summary = corpus.run(root / "model.npz", warm, root / "warm", force=True,
                                 dask=cluster.scheduler_address, jobs=workers)
            if len({result.worker for result in summary.results}) == workers:
                break
        else:
            raise SystemExit(f"bench F: not every one of {workers} Dask workers got a file in "
                             "5 tries.")
        yield cluster.scheduler_address


# -- conversion -------------------------------------------------------------------------------


def run_conversion(repeat: int, rounds: int) -> dict[str, Any]:
    spec = CONVERSION
    rnn = rnnport.RNN.random(spec, seed=3)
    keras_weights = rnnport.write(rnn, "keras")
    arrays = [array for layer in keras_weights for array in layer]
    nbytes = sum(array.nbytes for array in arrays)
    shape = {"cell": spec.cell, "input_size": spec.input_size, "hidden_size": spec.hidden_size,
             "num_layers": spec.num_layers}

    def convert() -> dict[str, np.ndarray]:
        buffer = rnnport.convert(keras_weights, "cudnn", fmt="keras")
        return rnnport.convert(buffer, "torch", fmt="cudnn", **shape)

    state = convert()
    for layer, (kernel, recurrent_kernel, bias) in enumerate(keras_weights):
        # Keras LSTM gates i f c o are PyTorch's i f g o; Keras keeps one bias.
        exact = (np.array_equal(state[f"weight_ih_l{layer}"], kernel.T)
                 and np.array_equal(state[f"weight_hh_l{layer}"], recurrent_kernel.T)
                 and np.array_equal(state[f"bias_ih_l{layer}"] + state[f"bias_hh_l{layer}"], bias))
        if not exact:
            raise SystemExit(f"bench D: layer {layer} differs after keras → cudnn → torch.")
    del state
    convert_samples: list[float] = []
    copy_samples: list[float] = []
    for _ in range(rounds):
        convert_samples += timed(convert, repeat)
        copy_samples += timed(lambda: [array.copy() for array in arrays], repeat)
    convert_s, copy_s = statistics.median(convert_samples), statistics.median(copy_samples)
    fraction = copy_s / convert_s
    return {"title": "keras → cudnn → torch, 12-layer LSTM 1024→1024",
            "params": int(sum(array.size for array in arrays)), "bytes": nbytes,
            "convert_s": convert_s, "convert_samples_s": convert_samples,
            "copy_s": copy_s, "copy_samples_s": copy_samples,
            "convert_gb_s": nbytes / convert_s / 1e9, "copy_gb_s": nbytes / copy_s / 1e9,
            "fraction_of_copy": fraction, "target_fraction": COPY_TARGET,
            "met": fraction >= COPY_TARGET}


# -- import time -----------------------------------------------------------------------------

IMPORT_PROBE = """
import sys, time
start = time.perf_counter()
import rnnport
elapsed = time.perf_counter() - start
frameworks = sorted(set(sys.modules) & set({frameworks!r}))
print(elapsed, ",".join(frameworks))
"""


def run_import(repeat: int) -> dict[str, Any]:
    """``import rnnport`` in fresh interpreters, as an installed copy imports: with its
    compiled bytecode cached (an installer writes it; ``PYTHONDONTWRITEBYTECODE``, set in
    some shells and containers, would leave an editable install compiling its modules at
    every import, ~30 ms here). One untimed run first writes it."""
    probe = IMPORT_PROBE.format(frameworks=FRAMEWORKS)
    environment = {name: value for name, value in os.environ.items()
                   if name != "PYTHONDONTWRITEBYTECODE"}
    samples, imported = [], set()
    for attempt in range(max(repeat, 5) + 1):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True, env=environment)
        if attempt == 0:
            continue
        seconds, _, names = done.stdout.strip().partition(" ")
        samples.append(float(seconds))
        imported.update(filter(None, names.split(",")))
    median_ms = statistics.median(samples) * 1e3
    return {"median_ms": median_ms, "samples_ms": [s * 1e3 for s in samples],
            "frameworks_imported": sorted(imported), "target_ms": IMPORT_TARGET_MS,
            "met": median_ms <= IMPORT_TARGET_MS and not imported}


# -- reporting ---------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    import onnxruntime
    import torch

    return {"python": platform.python_version(), "platform": platform.platform(),
            "processor": _cpu_name(), "cpus": os.cpu_count(), "numpy": np.__version__,
            "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
            "rnnport": rnnport.__version__}


def runtime_path() -> dict[str, Any]:
    """Which path rnnport's NumPy runtime took in this process: whether ``threadpoolctl``
    is there to set the BLAS's thread count (without it: one Python thread, no helper
    process), the BLAS libraries it found, and whether a helper process can start and did."""
    from rnnport import helper, runtime

    try:
        from importlib.metadata import version

        threadpoolctl = version("threadpoolctl")
    except Exception:  # not installed: the slow path a bare install used to take
        threadpoolctl = None
    libraries = [{"api": library.controller.internal_api, "version": library.controller.version,
                  "threads": library.get_num_threads()} for library in runtime._blas()]
    return {"threadpoolctl": threadpoolctl, "blas": libraries,
            "helper_available": helper.available() and bool(libraries),
            "helper_started": helper._HELPER is not None}


def describe_path(path: dict[str, Any]) -> str:
    """One line saying which path was measured."""
    if path["threadpoolctl"] is None:
        return ("Path: threadpoolctl missing — one Python thread, the BLAS as configured, "
                "no helper process (not the installed path).")
    blas = ", ".join(f"{library['api']} {library['version']} ({library['threads']} threads)"
                     for library in path["blas"]) or "no BLAS found"
    helper = ("helper process used" if path["helper_started"] else
              "helper process available, not started" if path["helper_available"] else
              "no helper process on this platform")
    return f"Path: threadpoolctl {path['threadpoolctl']}, {blas}; {helper}."


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def table(results: dict[str, Any]) -> str:
    """The results as a Markdown table (the README's benchmark section)."""
    lines = ["| workload | rnnport | PyTorch | ONNX Runtime | rnnport / ORT (target) |",
             "|---|---|---|---|---|"]
    for name, entry in results["forward"].items():
        engines = entry["engines"]
        cells = [f"{engines[e]['median_s'] * 1e3:.0f} ms ({engines[e]['gflops']:.0f} GFLOP/s)"
                 for e in ("rnnport", "torch", "onnxruntime")]
        lines.append(f"| {name}: {entry['title']} | {' | '.join(cells)} | "
                     f"{engines['rnnport']['vs_onnxruntime']:.2f}× (≤ {entry['target_vs_onnxruntime']}×) |")
    if "streaming" in results:
        s = results["streaming"]["us_per_step"]
        lines.append(f"| S: {results['streaming']['title']} | {s['rnnport']:.0f} µs/step | "
                     f"{s['torch']:.0f} µs/step | {s['onnxruntime']:.0f} µs/step | "
                     f"{results['streaming']['vs_onnxruntime']:.2f}× |")
        if "rnnport:stream" in s:
            # The target's ratio: calls timed in pairs (the stream grid's 1 × 1), steadier on
            # a shared machine than the medians' ratio.
            one = results["streaming"].get("streams", {}).get("1x1")
            ratio = (f"{one['vs_onnxruntime']['stream:numpy']:.2f}× in pairs" if one else
                     f"{results['streaming']['stream_vs_onnxruntime']:.2f}×")
            lines.append(f"| S through `rnn.stream(1)` | {s['rnnport:stream']:.0f} µs/step | "
                         f"| {s['onnxruntime']:.0f} µs/step | "
                         f"{ratio} (≤ {STREAM_TARGETS['stream:numpy']}×) |")
    if "conversion" in results:
        d = results["conversion"]
        lines.append(f"| D: {d['title']}, {d['params'] / 1e6:.0f}M params | "
                     f"{d['convert_s'] * 1e3:.0f} ms ({d['convert_gb_s']:.1f} GB/s) | | "
                     f"copy {d['copy_s'] * 1e3:.0f} ms ({d['copy_gb_s']:.1f} GB/s) | "
                     f"{d['fraction_of_copy']:.0%} of copy (≥ {d['target_fraction']:.0%}) |")
    if "import" in results:
        e = results["import"]
        lines.append(f"| E: `import rnnport` | {e['median_ms']:.0f} ms | | | "
                     f"≤ {e['target_ms']:.0f} ms |")
    lines += _engine_lines(results)
    if "corpus" in results:
        f = results["corpus"]
        lines += ["", f"Corpus (F: {f['title']}), frames per second, best of the rounds:",
                  f"  pool of 1: {f['pool-1']['frames_per_second']:,.0f}; pool of 2: "
                  f"{f['pool-2']['frames_per_second']:,.0f} ({f['pool_speedup']:.2f}×, start-up "
                  "included)",
                  f"  Dask, 1 worker: {f['dask-1']['frames_per_second']:,.0f}; 2 workers: "
                  f"{f['dask-2']['frames_per_second']:,.0f} ({f['dask_speedup']:.2f}×, target "
                  f"≥ {f['target_speedup']}×)"]
    ceiling = results["ceiling"]
    lines.append("")
    lines.append(f"Ceiling: a {ceiling['size']}² float32 NumPy matrix product ran at "
                 f"{ceiling['gflops']:.0f} GFLOP/s on {results['machine']['cpus']} cores "
                 f"({results['machine']['processor']}).")
    return "\n".join(lines)


def _engine_lines(results: dict[str, Any]) -> list[str]:
    """rnnport's engines against their runtimes called directly, and every engine's
    slowdown beside a competing process."""
    forward = results["forward"]
    if not forward and "streaming" not in results:
        return []
    lines = ["", f"Engines through rnnport against the runtime called directly (overhead, "
                 f"target < {ENGINE_OVERHEAD_TARGET:.0%}):"]
    for name, entry in forward.items():
        engines = entry["engines"]
        parts = [f"{engine} {engines[engine]['median_s'] * 1e3:.0f} ms "
                 f"({engines[engine]['overhead']:+.0%})" for engine in THROUGH if engine in engines]
        lines.append(f"  {name}: " + "; ".join(parts))
    if "streaming" in results:
        s = results["streaming"]["us_per_step"]
        lines.append("  S: " + "; ".join(f"{engine} {s[engine]:.0f} µs/step "
                                         f"({s[engine] / s[direct] - 1:+.0%})"
                                         for engine, direct in THROUGH.items()))
    if "streaming" in results and "streams" in results["streaming"]:
        lines += ["", "S streamed (µs per call; time / ONNX Runtime called directly, timed in "
                      "pairs; ≤ "
                      + ", ≤ ".join(f"{target}× for {name}" for name, target in STREAM_TARGETS.items())
                      + ", at 1×1):"]
        for grid in results["streaming"]["streams"].values():
            cells = [f"{name} {grid['us_per_call'][name]:.0f}"
                     + (f" ({grid['vs_onnxruntime'][name]:.2f}×)"
                        if name in grid["vs_onnxruntime"] else "") for name in STREAMS]
            lines.append(f"  {grid['batch']} stream{'s' if grid['batch'] > 1 else ''} × "
                         f"{grid['chunk']} step{'s' if grid['chunk'] > 1 else ''}: "
                         + "; ".join(cells))
    if any("slowdown" in engine for entry in forward.values()
           for engine in entry["engines"].values()):
        lines += ["", f"Beside one competing CPU-bound process (time / idle time; target for "
                      f"rnnport's NumPy engine ≤ {CONTENTION_TARGET}×):"]
        for name, entry in forward.items():
            lines.append(f"  {name}: " + "; ".join(
                f"{engine} {timing['slowdown']:.2f}×"
                for engine, timing in entry["engines"].items() if "slowdown" in timing))
    return lines


def compare(results: dict[str, Any], old: dict[str, Any]) -> str:
    lines = ["", "Against the earlier run (new / old time):"]
    for name, entry in results["forward"].items():
        previous = old.get("forward", {}).get(name)
        if previous:
            for engine, timing in entry["engines"].items():
                before = previous["engines"].get(engine, {}).get("median_s")
                if before:
                    lines.append(f"  {name} {engine:12} {timing['median_s'] / before:.2f}×")
    if "conversion" in results and "conversion" in old:
        ratio = results["conversion"]["convert_s"] / old["conversion"]["convert_s"]
        lines.append(f"  D convert      {ratio:.2f}×")
    if "import" in results and "import" in old:
        lines.append(f"  E import       {results['import']['median_ms'] / old['import']['median_ms']:.2f}×")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--repeat", type=int, default=5,
                        help="timed calls per engine and round, after one warm-up (default 5)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds over all engines; medians pool every round (default 3)")
    parser.add_argument("--only", default="A,B,C,D,E,S,F", help="workloads to run, e.g. A,C")
    parser.add_argument("--no-contention", dest="contention", action="store_false",
                        help="skip timing the forward workloads beside a competing process")
    parser.add_argument("--files", type=int, default=64,
                        help="feature files in the corpus workload F (default 64: a corpus "
                        "holds thousands; far fewer weighs start-up and tail too much)")
    parser.add_argument("--json", type=Path, help="where to write the results "
                        "(default bench/results/<time>.json)")
    parser.add_argument("--compare", type=Path, help="an earlier results file to set these against")
    parser.add_argument("--markdown", action="store_true", help="print only the Markdown table")
    args = parser.parse_args(argv)
    chosen = [name.strip().upper() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - {*FORWARDS, "D", "E", "S", "F"})
    if unknown:
        parser.error(f"--only: unknown workload(s) {', '.join(unknown)}; expected some of "
                     "A,B,C,D,E,S,F")
    if args.repeat < 1 or args.rounds < 1:
        parser.error("--repeat and --rounds: expected at least 1")
    if args.files < 2:
        parser.error(f"--files {args.files}: expected at least 2 (one for each of two workers)")

    results: dict[str, Any] = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                               "machine": machine(), "repeat": args.repeat,
                               "rounds": args.rounds}
    # Import time first, before this process has warmed the page cache any further.
    if "E" in chosen:
        results["import"] = run_import(args.repeat)
    results["ceiling"] = matmul_ceiling(args.repeat)
    results["forward"] = {}
    for name in chosen:
        if name in FORWARDS:
            print(f"running {name}: {FORWARDS[name].title} …", file=sys.stderr, flush=True)
            results["forward"][name] = run_forward(FORWARDS[name], args.repeat, args.rounds,
                                                   results["ceiling"]["gflops"], args.contention)
    if "S" in chosen:
        print("running S: streaming …", file=sys.stderr, flush=True)
        results["streaming"] = run_streaming(500, args.rounds * args.repeat)
    if "D" in chosen:
        print("running D: conversion …", file=sys.stderr, flush=True)
        results["conversion"] = run_conversion(args.repeat, args.rounds)
    if "F" in chosen:
        print("running F: corpus …", file=sys.stderr, flush=True)
        results["corpus"] = run_corpus(args.files, args.rounds)

    results["path"] = runtime_path()  # after the work: whether a helper process started
    path = args.json or HERE / "results" / f"{results['when'].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    print(describe_path(results["path"]))
    if args.compare:
        print(compare(results, json.loads(args.compare.read_text())))
    if not args.markdown:
        missed = [name for name, entry in {**results["forward"],
                                           **{k: results[k] for k in ("conversion", "import",
                                                                      "corpus")
                                              if k in results}}.items() if not entry["met"]]
        missed += [f"{name} {engine} overhead" for name, entry in results["forward"].items()
                   for engine in THROUGH
                   if entry["engines"][engine]["overhead"] > ENGINE_OVERHEAD_TARGET]
        missed += [f"{name} rnnport under contention" for name, entry in results["forward"].items()
                   if entry["engines"]["rnnport"].get("slowdown", 0.0) > CONTENTION_TARGET]
        one = results.get("streaming", {}).get("streams", {}).get("1x1")
        missed += [f"S {name} ({one['vs_onnxruntime'][name]:.2f}× > {target}×)"
                   for name, target in STREAM_TARGETS.items()
                   if one is not None and one["vs_onnxruntime"][name] > target]
        print(f"\nResults: {path}")
        print("Targets missed: " + (", ".join(missed) if missed else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
