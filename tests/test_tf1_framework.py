"""TF1's ``framework_forward``: real TensorFlow restoring a checkpoint (written by rnnport or
by TensorFlow) into the TF1 graph its names describe, with ``Saver``, and running it in a
process of its own; against rnnport's forward and TensorFlow's golden outputs. The numbers
come from the checkpoint, not from the model handed in. Where it cannot run, a sentence."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.formats import get, tf1
from rnnport.io import tensorbundle

GOLDEN = Path(__file__).parent / "golden"
TOLERANCE = 1e-5
slow = pytest.mark.slow  # each run starts TensorFlow in a process of its own (~5 s)


def _forward(source: Any, model: rnnport.Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    run = get("tf1").framework_forward
    assert run is not None
    return run(source, model, x)


def _run(source: Any, model: rnnport.Model, x: np.ndarray) -> tuple[str, np.ndarray]:
    found = _forward(source, model, x)
    assert not isinstance(found, str), found
    return found


def _x(width: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (3, 7, width)).astype(dtype)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=TOLERANCE,
                               rtol=0)


def _written(tmp_path: Path, model: rnnport.Model, **options: Any) -> tuple[Path, rnnport.Model]:
    """``model`` written as a checkpoint in a folder of its own, and read back from the
    folder with the options TensorFlow's graph would be built with."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    rnnport.write(model, "tf1", path=folder / "model.ckpt", **options)
    told = {key: value for key, value in options.items()
            if key in ("forget_bias", "cell_clip", "activation")}
    return folder, rnnport.read(folder, "tf1", **told)


CASES = {
    "lstm_cell_peepholes_projection_clip": (
        lambda: RNN.random(Spec("lstm", 4, 6, proj_size=3, peepholes=True, cell_clip=0.4),
                           seed=2, scale=1.5),
        {"cell_clip": 0.4, "forget_bias": 0.3}, "LSTMCell"),
    "lstm_block_cell_peepholes": (
        lambda: RNN.random(Spec("lstm", 4, 5, peepholes=True), seed=3),
        {"cell": "LSTMBlockCell"}, "LSTMCell"),  # saved under LSTMCell's names: built as one
    "basic_lstm_cell_float64": (
        lambda: RNN.random(Spec("lstm", 4, 5), seed=4, dtype=np.float64),
        {"cell": "BasicLSTMCell", "forget_bias": 0.0}, "BasicLSTMCell"),
    "cudnn_lstm_stack_bidirectional_under_an_outer_scope": (
        lambda: RNN.random(Spec("lstm", 6, 4, num_layers=2, bidirectional=True), seed=1,
                           scale=0.6),  # two biases per gate, summed into one
        {"cell": "CudnnCompatibleLSTMCell", "scope": "layer/stack_bidirectional_rnn"},
        "CudnnCompatibleLSTMCell"),
    "gru_cell_multi_at_the_top_level": (
        lambda: RNN.random(Spec("gru", 4, 5, num_layers=2, reset_after=False), seed=5),
        {"scope": ""}, "GRUCell"),
    "cudnn_gru_bidirectional": (
        lambda: RNN.random(Spec("gru", 4, 5, bidirectional=True), seed=6),
        {"structure": "bidirectional"}, "CudnnCompatibleGRUCell"),
    "basic_rnn_cell_relu": (
        lambda: RNN.random(Spec("rnn_relu", 4, 5), seed=7), {"activation": "relu"},
        "BasicRNNCell"),
    "gru_then_lstm_multi": (
        lambda: rnnport.stack([RNN.random(Spec("gru", 4, 5, reset_after=False), seed=8),
                               RNN.random(Spec("lstm", 5, 3), seed=9)]), {}, "GRUCell, LSTMCell"),
}


@slow
@pytest.mark.parametrize("name", list(CASES))
def test_tensorflow_runs_the_checkpoint_rnnport_wrote_like_rnnport(tmp_path: Path,
                                                                   name: str) -> None:
    make, options, cells = CASES[name]
    model = make()
    folder, back = _written(tmp_path, model, **options)
    x = _x(model.input_size, dtype=model.dtype)
    label, y = _run(folder, back, x)
    assert label.startswith("TensorFlow restoring model.ckpt into ") and f"({cells})" in label
    _close(y, back.forward(x)[0])
    _close(y, model.forward(x)[0])


@slow
def test_the_numbers_come_from_the_checkpoint_not_from_the_model_given(tmp_path: Path) -> None:
    spec = Spec("lstm", 4, 5, num_layers=2)
    folder, back = _written(tmp_path, RNN.random(spec, seed=1))
    (tmp_path / "other").mkdir()
    rnnport.write(RNN.random(spec, seed=2), "tf1", path=tmp_path / "other" / "model.ckpt")
    other = rnnport.read(tmp_path / "other")  # same shape, same forget_bias, other weights
    x = _x(4)
    _, y = _run(folder, other, x)
    _close(y, back.forward(x)[0])
    assert np.max(np.abs(other.forward(x)[0] - y)) > 1e-2  # a wrong model would show


def _golden(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


@slow
@pytest.mark.parametrize("name", ["tf1_two_networks", "tf1_lstm_cell_peephole_proj_clip",
                                  "tf1_stack_bidirectional_cudnn_lstm", "tf1_sharded"])
def test_tensorflow_runs_checkpoints_tensorflow_saved(name: str) -> None:
    meta, arrays = _golden(name)
    prefix = GOLDEN / meta["checkpoint"]
    model = rnnport.read(prefix, "tf1", **meta["read_options"])
    x = np.swapaxes(arrays["x"], 0, 1) if meta["time_major"] else arrays["x"]
    _, y = _run(prefix, model, x)
    _close(y, model.forward(x)[0])
    if "lengths" not in arrays and "h0/0/0" not in arrays:  # as the golden case was run
        _close(y, arrays["y"])


def test_a_dict_of_variables_is_no_checkpoint_to_restore() -> None:
    model = RNN.random(Spec("lstm", 3, 4))
    assert _forward(rnnport.write(model, "tf1"), model, _x(3)) == (
        "the source is a dict of variables, no checkpoint TensorFlow can restore: no framework "
        "check")


def test_without_tf_keras_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, back = _written(tmp_path, RNN.random(Spec("gru", 3, 4)))
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *rest: None if name == "tf_keras" else find_spec(name, *rest))
    assert _forward(folder, back, _x(3)) == (
        "tf_keras is not installed (TF1 cells run in TensorFlow with tf_keras): no framework check")


def test_a_model_that_is_not_the_checkpoints_network_is_named(tmp_path: Path) -> None:
    folder, back = _written(tmp_path, RNN.random(Spec("lstm", 3, 4)))
    wider = RNN.random(Spec("lstm", 3, 6))
    found = _forward(folder, wider, _x(3))
    assert found == (f"{folder}/model.ckpt: rnn/lstm_cell/: LSTMCell with input size 3, 4 units; "
                     "layer 0 of the model is an LSTM 3→6: no framework check")
    deeper = RNN.random(Spec("lstm", 3, 4, num_layers=2))
    assert "is not the model's 2 layer(s): no framework check" in str(
        _forward(folder, deeper, _x(3)))
    assert _forward(folder, back, np.zeros((2, 7, 5), np.float32)) == (
        "x has shape (2, 7, 5); TensorFlow is run on (batch, time, 3): no framework check")


def test_a_forget_bias_that_reading_cannot_have_left_is_refused(tmp_path: Path) -> None:
    model = RNN.random(Spec("lstm", 3, 4), seed=3)  # bias_ih's forget block: random numbers
    folder, _ = _written(tmp_path, model)
    assert _forward(folder, model, _x(3)) == (
        "layer 0: bias_ih's forget block is not one number, as reading a checkpoint leaves it "
        "(forget_bias there, zeros elsewhere), so the forget_bias TensorFlow should add is "
        "unknown: no framework check")


def _two_alike(tmp_path: Path) -> tuple[Path, RNN, RNN]:
    """A checkpoint holding two networks of one shape, under the scopes a and b."""
    spec = Spec("gru", 3, 4)
    first, second = RNN.random(spec, seed=1), RNN.random(spec, seed=2)
    arrays = {**rnnport.write(first, "tf1", scope="a"), **rnnport.write(second, "tf1", scope="b")}
    tensorbundle.write_bundle(tmp_path / "two.ckpt", arrays)
    return tmp_path / "two.ckpt", first, second


def test_of_networks_alike_none_holding_the_model_none_is_picked(tmp_path: Path) -> None:
    prefix, _, _ = _two_alike(tmp_path)
    stranger = RNN.random(Spec("gru", 3, 4), seed=3)
    assert _forward(prefix, stranger, _x(3)) == (
        f"{prefix}: holds 2 networks like the model (scope='a': one dynamic_rnn cell of "
        "CudnnCompatibleGRUCell (1 layer); scope='b': one dynamic_rnn cell of "
        "CudnnCompatibleGRUCell (1 layer)) and none holds its arrays alone: no framework check")


@slow
def test_of_networks_alike_the_one_holding_the_model_is_run(tmp_path: Path) -> None:
    prefix, _, _ = _two_alike(tmp_path)
    second = rnnport.read(prefix, "tf1", scope="b")
    x = _x(3)
    _, y = _run(prefix, second, x)
    _close(y, second.forward(x)[0])
    assert np.max(np.abs(rnnport.read(prefix, "tf1", scope="a").forward(x)[0] - y)) > 1e-2


@slow
def test_a_graph_tensorflow_cannot_restore_is_told_in_one_line(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    folder, back = _written(tmp_path, RNN.random(Spec("gru", 3, 4)))
    monkeypatch.setattr(tf1, "_framework_plan", lambda variables, model: (
        tf1._networks(variables.names, variables.where)[0],
        [{"cls": "GRUCell", "kwargs": {"num_units": 4}}]))  # not the checkpoint's GRU
    assert _forward(folder, back, _x(3)) == (
        "TensorFlow could not run the checkpoint (NotFoundError: Key rnn/gru_cell/candidate/bias "
        "not found in checkpoint): no framework check")
