"""Generate golden recurrent-layer test cases with the real Keras 3, PyTorch and TF1 cells.

Each case is written to ``<out>/<case>.npz`` (default ``tests/golden``), and the
list of cases with the framework versions to ``<out>/MANIFEST.json``.  The
script never imports ``rnnport``; it only records what the frameworks compute.
The TF1 cases (``tf1_*``, TensorBundle checkpoints under ``<out>/tf1/``) are
made by ``tools/golden_tf1.py`` in a subprocess, which documents their format.
``--only keras|torch|tf1|files`` (repeatable) regenerates only those cases; the
manifest always lists every case. ``files`` writes ``<out>/files/``: legacy Keras HDF5
files saved by tf_keras and ``torch.save`` / safetensors files of golden PyTorch cases,
the framework-made seeds of ``tools/fuzz.py``.

Keys of every ``.npz`` file (all plain arrays, loadable with
``allow_pickle=False``):

``meta``
    0-d unicode array holding a JSON object with ``case``, ``framework``
    (``"keras"`` or ``"torch"``), ``framework_version``, ``description``,
    ``read_options`` (options a weights-only reader cannot infer, e.g.
    ``{"activation": "relu"}``, ``{"reset_after": false}``,
    ``{"nonlinearity": "relu"}``), ``dtype``, ``compare`` (``"all"`` or
    ``"valid"``: only steps ``t < lengths[b]`` are meaningful) and
    ``tolerance``.  Keras cases add ``stack`` and ``layers`` (one entry per
    Keras layer: ``class``, ``inner``, ``units``, ``bidirectional`` and the
    JSON-able ``config`` subset); torch cases add ``module`` (``mode``,
    ``input_size``, ``hidden_size``, ``num_layers``, ``bidirectional``,
    ``proj_size``, ``bias``).
``weights/{i}/{k}``
    Keras only: ``layers[i].get_weights()[k]`` (a Bidirectional layer lists
    its forward arrays, then its backward arrays).
``state_dict/{name}``
    Torch only: every entry of ``module.state_dict()``.
``x``
    Input, ``(batch, time, input)``, batch-major.
``lengths``
    Optional ``(batch,)`` int64 valid lengths of a variable-length case.
``h0``, ``c0``, ``h_n``, ``c_n``
    Torch: initial (optional) and final states exactly as PyTorch lays them
    out, ``(num_layers * directions, batch, H)``, index ``layer * D + dir``.
``h0/{i}``, ``c0/{i}``, ``h_n/{i}``, ``c_n/{i}``
    Keras: the same per Keras layer ``i``, shape ``(D_i, batch, units_i)``
    with the forward direction first; ``c*`` only for LSTM layers.
``y``
    Output sequence of the last layer, ``(batch, time, D * H_out)``; for
    packed torch cases the padded steps are zero.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import json
import os
import subprocess
import sys
import warnings
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["KERAS_BACKEND"] = "tensorflow"

REPO_ROOT = Path(__file__).resolve().parent.parent
BATCH = 3
CONFIG_KEYS = ("units", "activation", "recurrent_activation", "use_bias", "reset_after")
TORCH_MODULE_KEYS = (
    "mode", "input_size", "hidden_size", "num_layers", "bidirectional", "proj_size", "bias",
)
FRAMEWORKS = ("keras", "torch", "tf1", "files")
# Files the frameworks saved themselves: seeds for tools/fuzz.py (see write_files).
LEGACY_FILES = ("legacy_stack.h5", "legacy_stack_weights.h5", "legacy_functional.h5",
                "cudnn_bigru.h5")
TORCH_FILES = ("torch_lstm_proj_bi_2layer", "torch_gru_bi_3layer")
Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class KLayer:
    kind: str
    units: int
    bi: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KerasCase:
    name: str
    description: str
    layers: tuple[KLayer, ...]
    input_size: int
    time: int = 6
    masked: bool = False
    initial_state: bool = False
    dtype: str = "float32"


@dataclass(frozen=True)
class TorchCase:
    name: str
    description: str
    mode: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    proj_size: int = 0
    bias: bool = True
    time: int = 6
    packed: bool = False
    initial_state: bool = False
    dtype: str = "float32"


def _k(kind: str, units: int, bi: bool = False, **kwargs: Any) -> KLayer:
    return KLayer(kind, units, bi, kwargs)


KERAS_CASES: tuple[KerasCase, ...] = (
    KerasCase("keras_lstm", "Single LSTM layer.", (_k("LSTM", 5),), 4),
    KerasCase("keras_lstm_nobias", "LSTM without bias.", (_k("LSTM", 5, use_bias=False),), 3),
    KerasCase("keras_gru_reset_after", "GRU with reset_after=True (default).",
              (_k("GRU", 4),), 5),
    KerasCase("keras_gru_reset_before", "GRU with reset_after=False.",
              (_k("GRU", 6, reset_after=False),), 4, time=7),
    KerasCase("keras_gru_nobias_reset_after", "GRU without bias, reset_after=True.",
              (_k("GRU", 5, use_bias=False),), 3),
    KerasCase("keras_gru_nobias_reset_before", "GRU without bias, reset_after=False.",
              (_k("GRU", 5, use_bias=False, reset_after=False),), 3),
    KerasCase("keras_simplernn_tanh", "SimpleRNN with tanh activation.",
              (_k("SimpleRNN", 6),), 4),
    KerasCase("keras_simplernn_relu", "SimpleRNN with relu activation.",
              (_k("SimpleRNN", 5, activation="relu"),), 4),
    KerasCase("keras_bi_lstm", "Bidirectional LSTM, concat merge.",
              (_k("LSTM", 5, bi=True),), 4),
    KerasCase("keras_bi_gru", "Bidirectional GRU, concat merge.", (_k("GRU", 4, bi=True),), 5),
    KerasCase("keras_bi_simplernn", "Bidirectional SimpleRNN, concat merge.",
              (_k("SimpleRNN", 6, bi=True),), 3),
    KerasCase("keras_stack_lstm_same", "Two stacked LSTM(5) layers.",
              (_k("LSTM", 5), _k("LSTM", 5)), 4),
    KerasCase("keras_stack_lstm_shrinking", "LSTM(7) followed by LSTM(4).",
              (_k("LSTM", 7), _k("LSTM", 4)), 5),
    KerasCase("keras_stack_lstm_gru", "LSTM(6) followed by GRU(5).",
              (_k("LSTM", 6), _k("GRU", 5)), 4),
    KerasCase("keras_stack_bi_lstm", "Two stacked Bidirectional LSTM(5) layers.",
              (_k("LSTM", 5, bi=True), _k("LSTM", 5, bi=True)), 3),
    KerasCase("keras_stack_mixed_bi", "Bidirectional GRU(4) followed by LSTM(6).",
              (_k("GRU", 4, bi=True), _k("LSTM", 6)), 5),
    KerasCase("keras_lstm_initial_state", "LSTM run from a given initial state.",
              (_k("LSTM", 5),), 4, initial_state=True),
    KerasCase("keras_bi_gru_initial_state", "Bidirectional GRU from given initial states.",
              (_k("GRU", 4, bi=True),), 3, initial_state=True),
    KerasCase("keras_stack_initial_state", "LSTM(5) then GRU(4), both from initial states.",
              (_k("LSTM", 5), _k("GRU", 4)), 4, initial_state=True),
    KerasCase("keras_lstm_mask", "LSTM over right-padded sequences with a mask.",
              (_k("LSTM", 5),), 4, masked=True),
    KerasCase("keras_gru_reset_before_mask", "GRU reset_after=False with a mask.",
              (_k("GRU", 5, reset_after=False),), 4, masked=True),
    KerasCase("keras_bi_lstm_mask", "Bidirectional LSTM with a mask.",
              (_k("LSTM", 4, bi=True),), 5, masked=True),
    KerasCase("keras_stack_bi_gru_mask", "Two stacked Bidirectional GRUs with a mask.",
              (_k("GRU", 4, bi=True), _k("GRU", 5, bi=True)), 3, time=7, masked=True),
    KerasCase("keras_lstm_float64", "LSTM computed in float64.",
              (_k("LSTM", 5),), 4, dtype="float64"),
)

TORCH_CASES: tuple[TorchCase, ...] = (
    TorchCase("torch_lstm", "Single-layer LSTM.", "LSTM", 4, 5),
    TorchCase("torch_lstm_proj", "LSTM with proj_size=3.", "LSTM", 4, 6, proj_size=3),
    TorchCase("torch_gru", "Single-layer GRU.", "GRU", 5, 4),
    TorchCase("torch_rnn_tanh", "Elman RNN with tanh.", "RNN_TANH", 3, 6),
    TorchCase("torch_rnn_relu", "Elman RNN with relu.", "RNN_RELU", 4, 5),
    TorchCase("torch_lstm_nobias", "LSTM without biases.", "LSTM", 3, 5, bias=False),
    TorchCase("torch_gru_nobias", "GRU without biases.", "GRU", 4, 5, bias=False),
    TorchCase("torch_lstm_bi_2layer", "Two-layer bidirectional LSTM.", "LSTM", 4, 5,
              num_layers=2, bidirectional=True),
    TorchCase("torch_gru_bi_3layer", "Three-layer bidirectional GRU.", "GRU", 3, 4,
              num_layers=3, bidirectional=True),
    TorchCase("torch_rnn_bi_2layer_relu", "Two-layer bidirectional relu RNN.", "RNN_RELU",
              5, 4, num_layers=2, bidirectional=True),
    TorchCase("torch_lstm_proj_bi_2layer", "Two-layer bidirectional LSTM with proj_size=3.",
              "LSTM", 4, 6, num_layers=2, bidirectional=True, proj_size=3),
    TorchCase("torch_gru_initial_state", "Two-layer GRU from a given h0.", "GRU", 4, 5,
              num_layers=2, initial_state=True),
    TorchCase("torch_lstm_bi_initial_state", "Two-layer bidirectional LSTM from h0 and c0.",
              "LSTM", 3, 4, num_layers=2, bidirectional=True, initial_state=True),
    TorchCase("torch_lstm_proj_initial_state", "LSTM with proj_size=3 from h0 and c0.",
              "LSTM", 4, 6, proj_size=3, initial_state=True),
    TorchCase("torch_lstm_packed", "Two-layer bidirectional LSTM over packed sequences.",
              "LSTM", 4, 5, num_layers=2, bidirectional=True, packed=True),
    TorchCase("torch_gru_packed", "Two-layer GRU over packed sequences from a given h0.",
              "GRU", 3, 5, num_layers=2, packed=True, initial_state=True, time=7),
    TorchCase("torch_rnn_packed", "Bidirectional tanh RNN over packed sequences.", "RNN_TANH",
              4, 6, bidirectional=True, packed=True),
    TorchCase("torch_lstm_proj_bi_packed", "Two-layer bidirectional LSTM, proj_size=3, packed.",
              "LSTM", 5, 6, num_layers=2, bidirectional=True, proj_size=3, packed=True),
    TorchCase("torch_lstm_float64", "LSTM computed in float64.", "LSTM", 4, 5, dtype="float64"),
)


def case_rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def uniform(
    rng: np.random.Generator, shape: Sequence[int], dtype: str, bound: float = 0.6
) -> np.ndarray:
    return rng.uniform(-bound, bound, tuple(shape)).astype(dtype)


def make_lengths(time: int) -> np.ndarray:
    return np.array([3, time, 1], dtype=np.int64)


def tolerance(dtype: str) -> float:
    return 1e-10 if dtype == "float64" else 1e-5


def write_npz(path: Path, arrays: Arrays) -> int:
    """Write an ``.npz`` with fixed timestamps so reruns give identical bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for key, value in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, np.asarray(value), allow_pickle=False)
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, buf.getvalue())
    return path.stat().st_size


def meta_array(meta: dict[str, Any]) -> np.ndarray:
    return np.array(json.dumps(meta, sort_keys=True))


def keras_layer_info(layer: Any) -> dict[str, Any]:
    bi = type(layer).__name__ == "Bidirectional"
    inner = layer.forward_layer if bi else layer
    config = inner.get_config()
    return {
        "class": type(layer).__name__,
        "inner": type(inner).__name__ if bi else None,
        "units": int(inner.units),
        "bidirectional": bi,
        "config": {k: config[k] for k in CONFIG_KEYS if k in config},
    }


def keras_read_options(specs: Sequence[KLayer]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for spec in specs:
        if spec.kind == "SimpleRNN" and spec.kwargs.get("activation", "tanh") != "tanh":
            options["activation"] = spec.kwargs["activation"]
        if spec.kind == "GRU" and not spec.kwargs.get("use_bias", True):
            options["reset_after"] = bool(spec.kwargs.get("reset_after", True))
    return options


def build_keras_layer(spec: KLayer, input_dim: int, time: int, dtype: str) -> Any:
    import keras

    cls = getattr(keras.layers, spec.kind)
    layer = cls(spec.units, return_sequences=True, return_state=True, dtype=dtype, **spec.kwargs)
    if spec.bi:
        layer = keras.layers.Bidirectional(layer, merge_mode="concat", dtype=dtype)
    layer.build((BATCH, time, input_dim))
    return layer


def randomize_keras(layer: Any, rng: np.random.Generator) -> list[np.ndarray]:
    weights = [uniform(rng, w.shape, str(w.dtype)) for w in layer.get_weights()]
    layer.set_weights(weights)
    return layer.get_weights()


def keras_state_list(h0: np.ndarray, c0: np.ndarray | None) -> list[np.ndarray]:
    states: list[np.ndarray] = []
    for d in range(h0.shape[0]):
        states.append(h0[d])
        if c0 is not None:
            states.append(c0[d])
    return states


def split_keras_states(states: Sequence[Any], dirs: int, lstm: bool) -> Arrays:
    per_dir = 2 if lstm else 1
    arrays = [np.asarray(s) for s in states]
    out = {"h": np.stack([arrays[d * per_dir] for d in range(dirs)])}
    if lstm:
        out["c"] = np.stack([arrays[d * per_dir + 1] for d in range(dirs)])
    return out


def run_keras_case(case: KerasCase) -> Arrays:
    import keras

    rng = case_rng(case.name)
    x = uniform(rng, (BATCH, case.time, case.input_size), case.dtype, bound=1.0)
    arrays: Arrays = {"x": x}
    mask = None
    if case.masked:
        lengths = make_lengths(case.time)
        arrays["lengths"] = lengths
        mask = np.arange(case.time)[None, :] < lengths[:, None]
    infos: list[dict[str, Any]] = []
    seq: Any = x
    for i, spec in enumerate(case.layers):
        layer = build_keras_layer(spec, seq.shape[-1], case.time, case.dtype)
        for k, w in enumerate(randomize_keras(layer, rng)):
            arrays[f"weights/{i}/{k}"] = w
        infos.append(keras_layer_info(layer))
        dirs, lstm = (2 if spec.bi else 1), spec.kind == "LSTM"
        kwargs: dict[str, Any] = {}
        if mask is not None:
            kwargs["mask"] = mask
        if case.initial_state:
            h0 = uniform(rng, (dirs, BATCH, spec.units), case.dtype)
            c0 = uniform(rng, (dirs, BATCH, spec.units), case.dtype) if lstm else None
            arrays[f"h0/{i}"] = h0
            if c0 is not None:
                arrays[f"c0/{i}"] = c0
            kwargs["initial_state"] = keras_state_list(h0, c0)
        outputs = layer(seq, **kwargs)
        seq = outputs[0]
        final = split_keras_states(outputs[1:], dirs, lstm)
        arrays[f"h_n/{i}"] = final["h"]
        if lstm:
            arrays[f"c_n/{i}"] = final["c"]
    arrays["y"] = np.asarray(seq)
    arrays["meta"] = meta_array({
        "case": case.name,
        "framework": "keras",
        "framework_version": keras.__version__,
        "description": case.description,
        "read_options": keras_read_options(case.layers),
        "stack": len(case.layers) > 1,
        "layers": infos,
        "dtype": case.dtype,
        "compare": "valid" if case.masked else "all",
        "tolerance": tolerance(case.dtype),
    })
    return arrays


def build_torch_module(case: TorchCase) -> Any:
    import torch

    keys = ("input_size", "hidden_size", "num_layers", "bias", "bidirectional")
    common = {key: getattr(case, key) for key in keys}
    if case.mode == "LSTM":
        module = torch.nn.LSTM(proj_size=case.proj_size, batch_first=True, **common)
    elif case.mode == "GRU":
        module = torch.nn.GRU(batch_first=True, **common)
    else:
        nonlinearity = "relu" if case.mode == "RNN_RELU" else "tanh"
        module = torch.nn.RNN(nonlinearity=nonlinearity, batch_first=True, **common)
    return module.double() if case.dtype == "float64" else module


def randomize_torch(module: Any, rng: np.random.Generator) -> None:
    import torch

    with torch.no_grad():
        for param in module.parameters():
            values = rng.uniform(-0.6, 0.6, tuple(param.shape))
            param.copy_(torch.from_numpy(values).to(param.dtype))


def torch_module_meta(case: TorchCase) -> dict[str, Any]:
    return {key: getattr(case, key) for key in TORCH_MODULE_KEYS}


def torch_forward(module: Any, case: TorchCase, arrays: Arrays) -> tuple[Any, Any]:
    import torch
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    x = torch.from_numpy(arrays["x"])
    state: Any = None
    if "h0" in arrays:
        h0 = torch.from_numpy(arrays["h0"])
        state = (h0, torch.from_numpy(arrays["c0"])) if case.mode == "LSTM" else h0
    if not case.packed:
        return module(x, state)
    lengths = torch.from_numpy(arrays["lengths"])
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, final = module(packed, state)
    y, _ = pad_packed_sequence(out, batch_first=True, total_length=case.time)
    return y, final


def run_torch_case(case: TorchCase) -> Arrays:
    import torch

    warnings.filterwarnings("ignore", message="LSTM with projections is not supported")
    torch.manual_seed(0)
    rng = case_rng(case.name)
    module = build_torch_module(case)
    randomize_torch(module, rng)
    dirs = 2 if case.bidirectional else 1
    h_out = case.proj_size or case.hidden_size
    arrays: Arrays = {"x": uniform(rng, (BATCH, case.time, case.input_size), case.dtype, 1.0)}
    if case.packed:
        arrays["lengths"] = make_lengths(case.time)
    if case.initial_state:
        layers = case.num_layers * dirs
        arrays["h0"] = uniform(rng, (layers, BATCH, h_out), case.dtype)
        if case.mode == "LSTM":
            arrays["c0"] = uniform(rng, (layers, BATCH, case.hidden_size), case.dtype)
    with torch.no_grad():
        y, final = torch_forward(module, case, arrays)
    h_n, c_n = final if case.mode == "LSTM" else (final, None)
    arrays["h_n"] = h_n.numpy()
    if c_n is not None:
        arrays["c_n"] = c_n.numpy()
    arrays["y"] = y.numpy()
    for name, value in module.state_dict().items():
        arrays[f"state_dict/{name}"] = value.numpy()
    read_options = {"nonlinearity": "relu"} if case.mode == "RNN_RELU" else {}
    arrays["meta"] = meta_array({
        "case": case.name,
        "framework": "torch",
        "framework_version": torch.__version__,
        "description": case.description,
        "read_options": read_options,
        "module": torch_module_meta(case),
        "dtype": case.dtype,
        "compare": "all",
        "tolerance": tolerance(case.dtype),
    })
    return arrays


def versions() -> dict[str, str]:
    import keras
    import tensorflow as tf
    import torch

    return {
        "keras": keras.__version__,
        "tensorflow": tf.__version__,
        "torch": torch.__version__,
        "tf_keras": importlib.metadata.version("tf_keras"),
        "numpy": np.__version__,
    }


def write_manifest(out: Path, names: Sequence[str]) -> None:
    manifest = {"generator": "tools/make_golden.py", "versions": versions(), "cases": list(names)}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")


def run_tf1(out: Path, generate: bool) -> list[str]:
    """Run ``tools/golden_tf1.py`` in its own process; returns the TF1 case names.

    TF1 cells need ``tf_keras`` with ``TF_USE_LEGACY_KERAS=1`` set before TensorFlow
    is imported, which must not happen in this (Keras 3) process.
    """
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    cmd = [sys.executable, str(REPO_ROOT / "tools" / "golden_tf1.py"), "--out", str(out)]
    result = subprocess.run(cmd + (["--example"] if generate else ["--list"]), env=env, check=True,
                            stdout=subprocess.PIPE, text=True)
    lines = result.stdout.splitlines()
    for line in lines[:-1]:
        print(line)
    return list(json.loads(lines[-1]))


def write_files(out: Path) -> None:
    """``<out>/files/``: model files as the frameworks save them, for ``tools/fuzz.py``.

    Legacy Keras HDF5 files from ``tests/tf_keras_writer.py`` (tf_keras, its own process),
    and ``torch.save`` / safetensors files of golden PyTorch cases' state_dicts.
    """
    import tempfile

    import torch
    from safetensors.torch import save_file

    files = out / "files"
    files.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
        subprocess.run([sys.executable, str(REPO_ROOT / "tests" / "tf_keras_writer.py"), folder],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        for name in LEGACY_FILES:
            (files / name).write_bytes((Path(folder) / name).read_bytes())
            print(f"wrote {files / name}")
    for name in TORCH_FILES:
        with np.load(out / f"{name}.npz", allow_pickle=False) as data:
            state = {key.split("/", 1)[1]: torch.from_numpy(data[key].copy())
                     for key in data.files if key.startswith("state_dict/")}
        torch.save(state, files / f"{name}.pt")
        save_file(state, str(files / f"{name}.safetensors"))
        print(f"wrote {files / name}.pt and .safetensors")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "golden",
                        help="output directory (default: tests/golden)")
    parser.add_argument("--only", action="append", choices=FRAMEWORKS,
                        help="only regenerate these cases (repeatable; default: all)")
    args = parser.parse_args(argv)
    out: Path = args.out
    only = set(args.only or FRAMEWORKS)
    jobs = [(run_keras_case, c) for c in KERAS_CASES] + [(run_torch_case, c) for c in TORCH_CASES]
    for runner, case in jobs:
        if case.name.split("_")[0] not in only:
            continue
        path = out / f"{case.name}.npz"
        print(f"wrote {path} ({write_npz(path, runner(case))} bytes)")
    names = [case.name for _, case in jobs] + run_tf1(out, generate="tf1" in only)
    if "files" in only:
        write_files(out)
    write_manifest(out, names)
    print(f"wrote {out / 'MANIFEST.json'} ({len(names)} cases)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
