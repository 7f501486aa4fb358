"""Checkpoints written by real TensorFlow 1.x cells read and run like TensorFlow ran them.

The cases come from ``tools/golden_tf1.py`` (graph mode, ``tf.compat.v1`` cells through
``tf_keras``, the LSTMBlockCell kernel for LSTMBlockCell and CudnnCompatibleLSTMCell).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport.formats import get, tf1
from rnnport.io import tensorbundle

GOLDEN = Path(__file__).parent / "golden"


def _load(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


def _names(kind: str = "network") -> list[str]:
    manifest = json.loads((GOLDEN / "MANIFEST.json").read_text())
    names = [n for n in manifest["cases"] if n.startswith("tf1_")]
    return [n for n in names if (_load(n)[0].get("kind", "network") == kind)]


def _states(model: rnnport.Model, arrays: dict[str, np.ndarray], kind: str) -> Any:
    """Per-layer, per-direction TF states regrouped as ``forward`` takes and returns them."""
    if f"h{kind}/0/0" not in arrays:
        return None
    parts = model.parts if isinstance(model, rnnport.Stack) else (model,)
    out, first = [], 0
    for part in parts:
        keys = [(layer, d) for layer in range(first, first + part.spec.num_layers)
                for d in range(part.spec.num_directions)]
        h = np.stack([arrays[f"h{kind}/{layer}/{d}"] for layer, d in keys])
        if part.spec.cell == "lstm":
            out.append((h, np.stack([arrays[f"c{kind}/{layer}/{d}"] for layer, d in keys])))
        else:
            out.append(h)
        first += part.spec.num_layers
    return out if isinstance(model, rnnport.Stack) else out[0]


def _flat(state: Any) -> list[np.ndarray]:
    if isinstance(state, np.ndarray):
        return [state]
    return [leaf for item in state for leaf in _flat(item)]


@pytest.mark.parametrize("name", _names())
def test_tensorflow_checkpoints_run_like_tensorflow(name: str) -> None:
    meta, arrays = _load(name)
    model = rnnport.read(GOLDEN / meta["checkpoint"], **meta["read_options"])
    assert model.dtype == np.dtype(meta["dtype"])
    assert sum(p.spec.num_layers for p in getattr(model, "parts", [model])) == meta["num_layers"]
    y, state = model.forward(arrays["x"], state=_states(model, arrays, "0"),
                             lengths=arrays.get("lengths"), time_major=meta["time_major"])
    tolerance = meta["tolerance"]
    np.testing.assert_allclose(y, arrays["y"], atol=tolerance, rtol=tolerance)
    for got, want in zip(_flat(state), _flat(_states(model, arrays, "_n")), strict=True):
        np.testing.assert_allclose(got, want, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name", _names())
def test_tensorflow_checkpoints_write_back_the_same_variables(name: str) -> None:
    """Read, then write with the cells, scope and structure found: every array comes back."""
    meta, _ = _load(name)
    prefix = GOLDEN / meta["checkpoint"]
    model = rnnport.read(prefix, **meta["read_options"])
    (network,) = [n for n in tf1.networks(prefix)
                  if n["scope"] == meta["read_options"].get("scope", n["scope"])
                  or n["scope"].startswith(meta["read_options"].get("scope", "") + "/")]
    classes = [cell["class"] for cell in meta["cells"]]
    if network["bidirectional"] and len(classes) == 2 * network["layers"]:
        classes = classes[::2]
    assert [CELL_SCOPES[c] for c in classes] == [CELL_SCOPES[c] for c in network["cells"]]
    options = {k: v for k, v in meta["read_options"].items() if k != "scope"}
    written = rnnport.write(model, "tf1", cell=classes, scope=network["scope"],
                            structure=network["structure"], **options)
    saved = tensorbundle.Bundle(prefix)
    for key, value in written.items():
        assert key in saved, (key, sorted(saved))
        stored = saved.read(key)
        assert stored.dtype == value.dtype and np.array_equal(stored, value), key


CELL_SCOPES = {name: cell.scope for name, cell in tf1.CELLS.items()}


def test_tensor_dtypes_as_tensorflow_saved_them() -> None:
    (name,) = _names("tensors")
    meta, arrays = _load(name)
    bundle = tensorbundle.Bundle(GOLDEN / meta["checkpoint"])
    for key, value in arrays.items():
        tensor = key.split("/", 1)[1]
        got = bundle.read(tensor)
        assert got.shape == value.shape and got.dtype == value.dtype, tensor
        assert np.array_equal(got, value), tensor
    for tensor, strings in meta.get("strings", {}).items():
        assert [s.decode() for s in bundle.read(tensor).ravel()] == strings


def test_a_sharded_checkpoint_reads_from_every_shard(tmp_path: Path) -> None:
    meta, _ = _load("tf1_sharded")
    prefix = GOLDEN / meta["checkpoint"]
    bundle = tensorbundle.Bundle(prefix)
    assert bundle.shards == 2
    assert {entry.shard for entry in bundle.values()} == {0, 1}
    for file in prefix.parent.iterdir():
        if not file.name.endswith("00001-of-00002"):
            (tmp_path / file.name).write_bytes(file.read_bytes())
    with pytest.raises(rnnport.FormatError, match=r"data-00001-of-00002 is missing \(shard 2 of "
                                                  r"2\)"):
        rnnport.read(tmp_path / prefix.name, **meta["read_options"])


def test_reading_a_checkpoint_imports_no_framework() -> None:
    meta, _ = _load("tf1_stack_bidirectional_cudnn_lstm")
    code = (
        "import sys, numpy as np, rnnport\n"
        f"m = rnnport.read({str(GOLDEN / meta['checkpoint'])!r}, **{meta['read_options']!r})\n"
        "m.forward(np.zeros((4, 2, m.input_size), np.float32), time_major=True)\n"
        "loaded = [n for n in ('tensorflow', 'tf_keras', 'keras', 'torch', 'onnx', 'jax')"
        " if n in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


OTHER_FORMATS = ("torch", "keras", "cudnn", "onnx")


@pytest.mark.parametrize("name", _names())
def test_tensorflow_checkpoints_through_every_other_format_and_back(name: str) -> None:
    """TF1 → torch / keras / cudnn / onnx → TF1: TensorFlow's outputs, every time it fits."""
    meta, arrays = _load(name)
    model = rnnport.read(GOLDEN / meta["checkpoint"], **meta["read_options"])
    options = {k: v for k, v in meta["read_options"].items() if k != "scope"}
    parts = model.parts if isinstance(model, rnnport.Stack) else (model,)
    converted = 0
    for fmt in OTHER_FORMATS:
        try:
            back_parts = [_through(part, fmt) for part in parts]
        except rnnport.UnsupportedFeatureError as error:
            assert any(word in str(error) for word in ("peepholes", "projection", "clip",
                                                       "reset-before")), (fmt, str(error))
            continue
        again = rnnport.read(rnnport.write(rnnport.stack(back_parts), "tf1", **options), "tf1",
                             **options)
        y, _ = again.forward(arrays["x"], state=_states(again, arrays, "0"),
                             lengths=arrays.get("lengths"), time_major=meta["time_major"])
        np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"] * 3, rtol=1e-5,
                                   err_msg=f"{name} via {fmt}")
        converted += 1
    # peepholes + projection + cell clip together fit no other format
    assert converted or name == "tf1_lstm_cell_peephole_proj_clip"


def _through(part: rnnport.RNN, fmt: str) -> rnnport.RNN:
    declared = get(fmt)
    return rnnport.read(rnnport.write(part, fmt, **declared.write_options_for(part.spec)), fmt,
                        **declared.read_options_for(part.spec))
