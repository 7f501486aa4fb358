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
    E  `import rnnport` in a fresh interpreter (no framework may be imported)

Usage: ``make bench``, or ``python bench/bench.py [--repeat N] [--only A,B] [--json PATH]
[--compare OLD.json] [--markdown]``. The results go to ``bench/results/`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

import rnnport

HERE = Path(__file__).resolve().parent
TOLERANCE = 1e-4  # float32 engines summing in different orders over hundreds of steps
TARGETS = {"A": 2.0, "B": 1.25, "C": 1.25}  # rnnport time / ONNX Runtime time, at most
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


def rnnport_runner(rnn: rnnport.RNN, x: np.ndarray) -> tuple[Callable[[], Any],
                                                             Callable[[], np.ndarray]]:
    def call() -> Any:
        return rnn.forward(x)

    return call, lambda: call()[0]


ENGINES = {"rnnport": rnnport_runner, "torch": torch_runner, "onnxruntime": onnxruntime_runner}


def run_forward(workload: Forward, repeat: int, rounds: int, ceiling: float) -> dict[str, Any]:
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
    ratio = times["rnnport"]["vs_onnxruntime"]
    return {"title": workload.title, "spec": workload.spec.describe(), "batch": workload.batch,
            "steps": workload.steps, "gflop": flops / 1e9, "max_abs_diff_vs_torch": agreement,
            "engines": times, "target_vs_onnxruntime": TARGETS[workload.name],
            "met": ratio <= TARGETS[workload.name]}


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
    probe = IMPORT_PROBE.format(frameworks=FRAMEWORKS)
    samples, imported = [], set()
    for _ in range(max(repeat, 5)):
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                              check=True)
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
    ceiling = results["ceiling"]
    lines.append("")
    lines.append(f"Ceiling: a {ceiling['size']}² float32 NumPy matrix product ran at "
                 f"{ceiling['gflops']:.0f} GFLOP/s on {results['machine']['cpus']} cores "
                 f"({results['machine']['processor']}).")
    return "\n".join(lines)


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
    parser.add_argument("--only", default="A,B,C,D,E", help="workloads to run, e.g. A,C")
    parser.add_argument("--json", type=Path, help="where to write the results "
                        "(default bench/results/<time>.json)")
    parser.add_argument("--compare", type=Path, help="an earlier results file to set these against")
    parser.add_argument("--markdown", action="store_true", help="print only the Markdown table")
    args = parser.parse_args(argv)
    chosen = [name.strip().upper() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - {*FORWARDS, "D", "E"})
    if unknown:
        parser.error(f"--only: unknown workload(s) {', '.join(unknown)}; expected some of A,B,C,D,E")
    if args.repeat < 1 or args.rounds < 1:
        parser.error("--repeat and --rounds: expected at least 1")

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
                                                   results["ceiling"]["gflops"])
    if "D" in chosen:
        print("running D: conversion …", file=sys.stderr, flush=True)
        results["conversion"] = run_conversion(args.repeat, args.rounds)

    path = args.json or HERE / "results" / f"{results['when'].replace(':', '')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(table(results))
    if args.compare:
        print(compare(results, json.loads(args.compare.read_text())))
    if not args.markdown:
        missed = [name for name, entry in {**results["forward"],
                                           **{k: results[k] for k in ("conversion", "import")
                                              if k in results}}.items() if not entry["met"]]
        print(f"\nResults: {path}")
        print("Targets missed: " + (", ".join(missed) if missed else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
