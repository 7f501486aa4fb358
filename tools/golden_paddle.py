"""Generate golden PaddlePaddle files with PaddlePaddle's own tools.

    .venv/bin/python tools/golden_paddle.py [--out tests/golden/paddle] [--case NAME ...] [--list]

PaddlePaddle 3.3.1 (CPU, from PyPI, a test dependency) builds each ``paddle.nn.LSTM`` /
``GRU`` / ``SimpleRNN``, and writes its state dict with ``paddle.save`` (``model.pdparams``)
and the layer with ``paddle.jit.save`` (``inference.json``, the PIR program, with
``inference.pdiparams``); the older ``ProgramDesc`` (``inference.pdmodel``) comes from
``paddle.static.save_inference_model`` in a process of its own started with
``FLAGS_enable_pir_api=0`` (``paddle.jit.save`` fails with that flag). The script never
imports ``rnnport``.

Weights: every parameter is random (uniform ±0.6), every value distinct, biases included;
inputs uniform ±1, batch 2. Seeds: CRC32 of the case name.

Files, per case ``<name>``: ``<name>/model.pdparams`` and, where the case has one,
``<name>/inference.json`` or ``<name>/inference.pdmodel`` with ``inference.pdiparams``;
``<name>.npz`` (plain arrays): ``meta`` (a JSON object: ``case``, ``description``,
``layer`` — the class and its arguments —, ``files``, ``time_major``, ``versions``,
``tolerance``), ``x`` (the input, time-major where the layer is) and paddle's own outputs
for it: ``y`` (in the layer's major order), ``h`` ((L·D, batch, H_out)) and, for an LSTM,
``c``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import golden_manifest
import numpy as np
from golden_manifest import Made

REPO_ROOT = Path(__file__).resolve().parent.parent
BATCH = 2
TOLERANCE = 1e-5

# name → (description, class, arguments, time steps, what is saved)
CASES: dict[str, tuple[str, str, dict[str, Any], int, tuple[str, ...]]] = {
    "lstm_bi_2layer": ("a 2-layer bidirectional LSTM", "LSTM",
                       {"input_size": 4, "hidden_size": 8, "num_layers": 2,
                        "direction": "bidirect"}, 5, ("pdparams", "jit")),
    "gru": ("a GRU", "GRU", {"input_size": 5, "hidden_size": 8}, 6, ("pdparams", "jit")),
    "rnn_relu": ("a relu SimpleRNN, 2 layers", "SimpleRNN",
                 {"input_size": 4, "hidden_size": 8, "num_layers": 2, "activation": "relu"},
                 5, ("pdparams", "jit")),
    "gru_time_major": ("a time-major bidirectional GRU", "GRU",
                       {"input_size": 4, "hidden_size": 8, "direction": "bidirectional",
                        "time_major": True}, 7, ("pdparams", "jit")),
    "lstm_proj": ("an LSTM with proj_size=3 (the PyTorch-named copies shift onto other "
                  "parameters)", "LSTM",
                  {"input_size": 4, "hidden_size": 8, "proj_size": 3}, 5, ("pdparams",)),
    "gru_static": ("a GRU saved by paddle.static.save_inference_model as a .pdmodel "
                   "ProgramDesc", "GRU", {"input_size": 4, "hidden_size": 8}, 5, ("pdmodel",)),
}


def _versions() -> dict[str, str]:
    import paddle

    return {"paddlepaddle": paddle.__version__, "numpy": np.__version__,
            "python": sys.version.split()[0]}


def _random_parameters(layer: Any, name: str) -> dict[str, np.ndarray]:
    """Every parameter of ``layer`` set to distinct random values; returns them by name."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    used: set[float] = set()
    values = {}
    for key, parameter in layer.named_parameters():
        value = golden_manifest.distinct_uniform(rng, tuple(parameter.shape), used)
        parameter.set_value(value)
        values[key] = value
    return values


def _states(state: Any) -> dict[str, np.ndarray]:
    if isinstance(state, (list, tuple)):
        return {"h": np.asarray(state[0].numpy()), "c": np.asarray(state[1].numpy())}
    return {"h": np.asarray(state.numpy())}


def _make_dynamic(name: str, out: Path) -> Made:
    import paddle

    _, cls, arguments, time, saved = CASES[name]
    paddle.seed(0)
    layer = getattr(paddle.nn, cls)(**arguments)
    _random_parameters(layer, name)
    layer.eval()
    time_major = bool(arguments.get("time_major"))
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    shape = (time, BATCH, arguments["input_size"]) if time_major else \
        (BATCH, time, arguments["input_size"])
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    y, state = layer(paddle.to_tensor(x))
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    if "pdparams" in saved:
        paddle.save(layer.state_dict(), str(folder / "model.pdparams"))
        files.append(f"{name}/model.pdparams")
    if "jit" in saved:
        spec_shape = [time, None, arguments["input_size"]] if time_major else \
            [None, time, arguments["input_size"]]
        paddle.jit.save(layer, str(folder / "inference"),
                        input_spec=[paddle.static.InputSpec(spec_shape, "float32", "x")])
        files += [f"{name}/inference.json", f"{name}/inference.pdiparams"]
    return _record(name, out, x, {"y": np.asarray(y.numpy()), **_states(state)}, files,
                   time_major)


def _record(name: str, out: Path, x: np.ndarray, outputs: dict[str, np.ndarray],
            files: list[str], time_major: bool) -> Made:
    description, cls, arguments, _, _ = CASES[name]
    versions = _versions()
    meta = {"case": name, "description": description,
            "layer": {"class": cls, **arguments}, "files": files, "time_major": time_major,
            "versions": versions, "tolerance": TOLERANCE}
    np.savez(out / f"{name}.npz", meta=np.array(json.dumps(meta, sort_keys=True)), x=x,
             **outputs)
    return meta, [*files, f"{name}.npz"], f"{description}: {', '.join(files)}", versions


def _make_static(name: str, out: Path) -> Made:
    """In this process (``FLAGS_enable_pir_api=0``): a static program of the layer, run by
    the executor and saved by ``save_inference_model``."""
    import paddle

    _, cls, arguments, time, _ = CASES[name]
    paddle.enable_static()
    paddle.seed(0)
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        x_var = paddle.static.data("x", [None, time, arguments["input_size"]], "float32")
        layer = getattr(paddle.nn, cls)(**arguments)
        y_var, h_var = layer(x_var)
    executor = paddle.static.Executor(paddle.CPUPlace())
    executor.run(startup)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    used: set[float] = set()
    scope = paddle.static.global_scope()
    for parameter in main.all_parameters():
        value = golden_manifest.distinct_uniform(rng, tuple(parameter.shape), used)
        scope.find_var(parameter.name).get_tensor().set(value, paddle.CPUPlace())
    x = np.random.default_rng(zlib.crc32(name.encode()) + 1).uniform(
        -1, 1, (BATCH, time, arguments["input_size"])).astype(np.float32)
    test_program = main.clone(for_test=True)
    y, h = executor.run(test_program, feed={"x": x}, fetch_list=[y_var, h_var])
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    paddle.static.save_inference_model(str(folder / "inference"), [x_var], [y_var], executor,
                                       program=test_program)
    return _record(name, out, x, {"y": np.asarray(y), "h": np.asarray(h)},
                   [f"{name}/inference.pdmodel", f"{name}/inference.pdiparams"], False)


def make(name: str, out: Path) -> Made:
    if "pdmodel" in CASES[name][4]:
        done = subprocess.run([sys.executable, __file__, "--static", name, str(out)],
                              env={**os.environ, "FLAGS_enable_pir_api": "0"}, check=True,
                              capture_output=True, text=True)
        return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
    return _make_dynamic(name, out)


def main(argv: list[str] | None = None) -> int:
    warnings.simplefilter("ignore")
    if argv is None and sys.argv[1:2] == ["--static"]:
        print(json.dumps(_make_static(sys.argv[2], Path(sys.argv[3]))))
        return 0
    return golden_manifest.main(
        argv, description=__doc__.splitlines()[0], default_out=REPO_ROOT / "tests/golden/paddle",
        cases={name: case[0] for name, case in CASES.items()}, generator="tools/golden_paddle.py",
        make=make)


if __name__ == "__main__":
    sys.exit(main())
