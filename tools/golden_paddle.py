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

The ``crnn_branch`` case is a model as packages ship them rather than a bare layer: a
``Linear`` ``pre`` and an int64 buffer ``steps`` before the network, the bidirectional LSTM
``neck.encoder.lstm`` run inside an ``if`` (a ``paddle.nn.GRU`` ``alt`` in the other branch,
so the PIR program holds its two ``rnn`` operators in the ``if``'s blocks), a ``Linear``
``head`` after; ``paddle.jit.save`` writes it, and ``paddle.save`` a training checkpoint
``{"model": state_dict, "epoch": 1}`` (its tensors pickled as ``(name, array)`` tuples),
with the optimizer's state beside it (``model.pdopt``). ``x`` is the LSTM's input (what
``pre`` and the buffer make of the model's input), ``y``, ``h``, ``c`` the LSTM's outputs.
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
    "crnn_branch": ("a model: Linear, an int64 buffer, then a bidirectional LSTM "
                    "(neck.encoder.lstm) inside an if (a GRU in the else branch), a Linear head; "
                    "jit.save, and a paddle.save checkpoint {'model': state_dict, 'epoch': 1}",
                    "LSTM", {"input_size": 6, "hidden_size": 5, "direction": "bidirect"}, 5,
                    ("composite",)),
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


def _make_composite(name: str, out: Path) -> Made:
    """The ``crnn_branch`` model (module docstring)."""
    import paddle

    _, _, arguments, time, _ = CASES[name]

    class Encoder(paddle.nn.Layer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.lstm = paddle.nn.LSTM(**arguments)

    class Neck(paddle.nn.Layer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = Encoder()

    class Model(paddle.nn.Layer):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.pre = paddle.nn.Linear(4, arguments["input_size"])
            self.register_buffer("steps", paddle.arange(time, dtype="int64"), persistable=True)
            self.neck = Neck()
            self.alt = paddle.nn.GRU(arguments["input_size"], arguments["hidden_size"],
                                     direction="bidirect")
            self.head = paddle.nn.Linear(2 * arguments["hidden_size"], 3)

        def features(self, x: Any) -> Any:
            return self.pre(x) + 0.01 * paddle.cast(self.steps, "float32").unsqueeze(-1)

        def forward(self, x: Any) -> Any:
            features = self.features(x)
            if paddle.mean(features) > -100.0:
                y = self.neck.encoder.lstm(features)[0]
            else:
                y = self.alt(features)[0]
            return self.head(y)

    paddle.seed(0)
    model = Model()
    _random_parameters(model, name)
    optimizer = paddle.optimizer.Adam(parameters=model.parameters())
    rng = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    inputs = rng.uniform(-1, 1, (BATCH, time, 4)).astype(np.float32)
    model(paddle.to_tensor(inputs)).mean().backward()  # the optimizer gets its moments
    optimizer.step()
    optimizer.clear_grad()
    model.eval()
    x = np.asarray(model.features(paddle.to_tensor(inputs)).numpy())
    y, state = model.neck.encoder.lstm(paddle.to_tensor(x))
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    paddle.save({"model": model.state_dict(), "epoch": 1}, str(folder / "model.pdparams"))
    paddle.save(optimizer.state_dict(), str(folder / "model.pdopt"))
    paddle.jit.save(model, str(folder / "inference"),
                    input_spec=[paddle.static.InputSpec([None, time, 4], "float32", "x")])
    files = [f"{name}/model.pdparams", f"{name}/model.pdopt", f"{name}/inference.json",
             f"{name}/inference.pdiparams"]
    return _record(name, out, x, {"y": np.asarray(y.numpy()), **_states(state)}, files, False)


def make(name: str, out: Path) -> Made:
    if "composite" in CASES[name][4]:
        return _make_composite(name, out)
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
