"""Keras activations: every one Keras offers that the runtime computes is read from layers,
configs and files, and written back into ``.keras`` files that Keras 3 runs the same;
hard_sigmoid is Keras 2's or Keras 3's as the source says; the rest are refused by name."""

from __future__ import annotations

from pathlib import Path

import keras
import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec

INPUT = 3
PAIRS = [("relu", "hard_sigmoid"), ("linear", "sigmoid"), ("softsign", "softplus"),
         ("elu", "tanh"), ("tanh", "hard_sigmoid")]


def _x() -> np.ndarray:
    return np.random.default_rng(0).uniform(-1.5, 1.5, (2, 6, INPUT)).astype(np.float32)


def _layer(cls: type, activation: str, recurrent: str, bidirectional: bool) -> keras.layers.Layer:
    layer = cls(4, activation=activation, recurrent_activation=recurrent, return_sequences=True)
    if bidirectional:
        layer = keras.layers.Bidirectional(layer)
    layer(_x())  # built
    rng = np.random.default_rng(1)
    layer.set_weights([rng.uniform(-0.9, 0.9, w.shape).astype(np.float32)
                       for w in layer.get_weights()])
    return layer


@pytest.mark.parametrize("bidirectional", [False, True], ids=["one", "bi"])
@pytest.mark.parametrize(("activation", "recurrent"), PAIRS)
@pytest.mark.parametrize("cls", [keras.layers.LSTM, keras.layers.GRU], ids=["lstm", "gru"])
def test_keras3_layers_read_and_write_back_with_their_activations(
        tmp_path: Path, cls: type, activation: str, recurrent: str, bidirectional: bool) -> None:
    layer = _layer(cls, activation, recurrent, bidirectional)
    x = _x()
    want = keras.ops.convert_to_numpy(layer(x))
    model = rnnport.read(layer)
    np.testing.assert_allclose(model.forward(x)[0], want, atol=1e-5, rtol=0)
    saved = keras.Sequential([keras.Input((None, INPUT)), layer])
    saved.save(tmp_path / "keras.keras")
    assert rnnport.read(tmp_path / "keras.keras") == model
    rnnport.write(model, "keras", path=tmp_path / "ours.keras")
    loaded = keras.saving.load_model(tmp_path / "ours.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), want, atol=1e-5, rtol=0)
    arrays = rnnport.write(model, "keras")
    options = rnnport.formats.get("keras").read_options_for(model.spec)
    assert rnnport.read(arrays, "keras", **options) == model


def test_hard_sigmoid_for_bare_arrays_asks_which_keras() -> None:
    layer = _layer(keras.layers.LSTM, "tanh", "hard_sigmoid", False)
    arrays = layer.get_weights()
    with pytest.raises(rnnport.FormatError, match="0.2·x \\+ 0.5.*relu6.*keras_version="):
        rnnport.read(arrays, recurrent_activation="hard_sigmoid")
    keras3 = rnnport.read(arrays, recurrent_activation="hard_sigmoid", keras_version=3)
    assert keras3 == rnnport.read(layer)
    keras2 = rnnport.read(arrays, recurrent_activation="hard_sigmoid", keras_version="2.2.4")
    assert keras2.spec.activations[0] == ("HardSigmoid", 0.2, 0.5)
    assert not np.allclose(keras2.forward(_x())[0], keras3.forward(_x())[0], atol=1e-3)


def test_a_keras2_hard_sigmoid_has_no_keras3_file(tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", INPUT, 4, activations=[("HardSigmoid", 0.2, 0.5), "Tanh"]))
    with pytest.raises(rnnport.UnsupportedFeatureError, match="Keras 3 does not have"):
        rnnport.write(model, "keras", path=tmp_path / "m.keras")
    assert not (tmp_path / "m.keras").exists()
    arrays = rnnport.write(model, "keras")  # a Keras 2 layer takes these
    assert rnnport.read(arrays, recurrent_activation="hard_sigmoid", keras_version=2) == model


def test_activations_keras_has_no_name_for_or_rnnport_cannot_compute_are_refused() -> None:
    with pytest.raises(rnnport.UnsupportedFeatureError, match="recurrent_activation='gelu'"):
        rnnport.read(_layer(keras.layers.GRU, "tanh", "gelu", False))
    with pytest.raises(rnnport.UnsupportedFeatureError, match="the keras format cannot hold "
                       "non-default activations"):
        rnnport.write(RNN.random(Spec("lstm", INPUT, 4, activations=["Sigmoid", "Tanh", "Relu"])),
                      "keras")
    simple = keras.layers.SimpleRNN(4, activation="sigmoid")
    simple(_x())
    with pytest.raises(rnnport.UnsupportedFeatureError, match="SimpleRNN activation 'sigmoid'"):
        rnnport.read(simple)


def test_weights_alone_take_the_gates_their_keras_version_defaulted_to() -> None:
    """As a weights-only file from Keras 2.2 does: get_weights() with keras_version=."""
    arrays = rnnport.write(RNN.random(Spec("gru", INPUT, 4), seed=4), "keras")
    for version in ("2.2.0", b"2.2.4"):
        assert rnnport.read(arrays, "keras", keras_version=version).spec.activations[0] == (
            "HardSigmoid", 0.2, 0.5)
    assert not rnnport.read(arrays, "keras", keras_version="2.3.1").spec.activations
    with pytest.raises(rnnport.FormatError, match="keras_version='banana'; expected a Keras"):
        rnnport.read(arrays, "keras", keras_version="banana")
