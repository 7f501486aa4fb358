"""Layout copies and memory sharing: fast paths give the same arrays as plain NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.copying import copy_into, writable_view


@pytest.mark.parametrize("shape", [(64, 64), (1024, 1100), (70, 3000), (3000, 70), (2000, 640),
                                   (5, 40000)])
def test_tiled_transpose_equals_numpy(shape: tuple[int, int]) -> None:
    rows = np.random.default_rng(0).standard_normal(shape[::-1]).astype(np.float32)
    out = np.empty(shape, np.float32)
    copy_into(out, rows.T)  # tiled (and threaded for the larger ones)
    np.testing.assert_array_equal(out, rows.T)


def test_copy_into_other_layouts_is_a_plain_copy() -> None:
    source = np.arange(24.0).reshape(4, 6)[:, ::2]
    out = np.empty((4, 3))
    copy_into(out, source)
    np.testing.assert_array_equal(out, source)


def test_writable_view_only_of_writable_memory() -> None:
    base = np.arange(10.0)
    view = base[2:6]
    view.flags.writeable = False
    again = writable_view(view, [base])
    assert again is not None and again.flags.writeable and np.shares_memory(again, base)
    again[0] = -1
    assert base[2] == -1
    base.flags.writeable = False
    assert writable_view(base[2:6], [base]) is None
    assert writable_view(np.arange(4.0)[1:], [base]) is None  # memory no caller offered
    assert writable_view(np.arange(3.0), [base]) is None  # owns its memory: nothing to share


SPEC = Spec("lstm", 6, 5, num_layers=2, bidirectional=True)
SHAPE = dict(cell="lstm", input_size=6, hidden_size=5, num_layers=2, bidirectional=True)


def test_read_shares_a_buffer_read_only_and_leaves_it_writable() -> None:
    buffer = rnnport.write(RNN.random(SPEC), "cudnn")
    model = rnnport.read(buffer, "cudnn", **SHAPE)
    weight = model.params[1][1]["weight_ih"]
    assert np.shares_memory(weight, buffer) and not weight.flags.writeable
    assert buffer.flags.writeable


def test_read_leaves_the_callers_arrays_writable() -> None:
    weights = rnnport.write(RNN.random(Spec("lstm", 3, 4)), "keras")
    model = rnnport.read(weights, "keras")
    assert all(array.flags.writeable for array in weights)
    assert np.shares_memory(model.params[0][0]["weight_ih"], weights[0])
    assert all(array.flags.c_contiguous for array in weights)


def test_convert_returns_views_of_its_source_where_layouts_agree() -> None:
    buffer = rnnport.write(RNN.random(SPEC, seed=2), "cudnn")
    state = rnnport.convert(buffer, "torch", fmt="cudnn", **SHAPE)
    assert all(np.shares_memory(array, buffer) and array.flags.writeable
               for array in state.values())
    assert rnnport.read(state, "torch") == rnnport.read(buffer, "cudnn", **SHAPE)


def test_write_never_hands_out_a_models_own_memory() -> None:
    buffer = rnnport.write(RNN.random(SPEC, seed=2), "cudnn")
    model = rnnport.read(buffer, "cudnn", **SHAPE)
    state = rnnport.write(model, "torch")
    assert not any(np.shares_memory(array, buffer) for array in state.values())
    assert all(array.flags.writeable for array in state.values())


def test_keras_to_cudnn_to_torch_is_exact_for_a_large_stack() -> None:
    """The tiled, threaded transpose on matrices big enough to take it."""
    spec = Spec("lstm", 700, 300, num_layers=2)
    model = RNN.random(spec, seed=4)
    weights = rnnport.write(model, "keras")
    buffer = rnnport.convert(weights, "cudnn", fmt="keras")
    state = rnnport.convert(buffer, "torch", fmt="cudnn", cell="lstm", input_size=700,
                            hidden_size=300, num_layers=2)
    for layer, (kernel, recurrent, _) in enumerate(weights):
        np.testing.assert_array_equal(state[f"weight_ih_l{layer}"], kernel.T)
        np.testing.assert_array_equal(state[f"weight_hh_l{layer}"], recurrent.T)
    x = np.random.default_rng(1).standard_normal((2, 3, 700)).astype(np.float32)
    np.testing.assert_allclose(rnnport.read(state, "torch").forward(x)[0], model.forward(x)[0],
                               atol=1e-5)


@pytest.mark.parametrize("target, name", [
    ("torch", "model.safetensors"), ("torch", "model.pt"), ("npz", "model.npz"),
    ("tf1", "model.ckpt"), ("keras", "model.keras"), ("keras", "model.weights.h5"),
    ("onnx", "model.onnx"), ("cudnn", "model.npy"),
])
def test_files_written_from_views_hold_the_same_numbers(tmp_path, target: str,
                                                        name: str) -> None:
    """A model read from Keras arrays holds transposed views; every file writer must store
    their values, not their raw memory."""
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2), seed=6)
    weights = rnnport.write(model, "keras")
    path = tmp_path / name
    rnnport.convert(weights, target, fmt="keras", path=path)
    options = ({"cell": "lstm", "input_size": 3, "hidden_size": 4, "num_layers": 2}
               if target == "cudnn" else {})
    source = np.load(path) if target == "cudnn" else (str(path) if target == "tf1" else path)
    back = rnnport.read(source, target, **options)
    x = np.random.default_rng(3).standard_normal((2, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(back.forward(x)[0], model.forward(x)[0], atol=1e-6)


def test_torch_state_dicts_are_c_contiguous_whatever_the_source() -> None:
    weights = rnnport.write(RNN.random(Spec("gru", 3, 4)), "keras")
    for state in (rnnport.convert(weights, "torch", fmt="keras"),
                  rnnport.write(rnnport.read(weights, "keras"), "torch")):
        assert all(array.flags.c_contiguous and array.flags.writeable for array in state.values())


def test_convert_never_opens_memory_a_model_holds_or_the_caller_gave_read_only() -> None:
    held = RNN.random(Spec("lstm", 4, 3))
    p = held.params[0][0]
    state = rnnport.convert([p["weight_ih"].T, p["weight_hh"].T, p["bias_hh"]], "torch")
    for array in state.values():
        array[...] = 42
    assert not np.any(p["weight_ih"] == 42) and not np.any(p["bias_hh"] == 42)
    buffer = rnnport.write(RNN.random(SPEC), "cudnn")
    read_only = buffer.view()
    read_only.flags.writeable = False
    state = rnnport.convert(read_only, "torch", fmt="cudnn", **SHAPE)
    assert not any(np.shares_memory(array, buffer) for array in state.values())


def test_tiled_copy_of_a_row_block_of_a_transposed_matrix() -> None:
    rows = np.random.default_rng(1).standard_normal((700, 1200)).astype(np.float32)
    source = rows.T[300:900]  # columns contiguous, rows 1200 apart: still tiled
    out = np.empty(source.shape, np.float32)
    copy_into(out, source)
    np.testing.assert_array_equal(out, source)
