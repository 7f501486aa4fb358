"""Write legacy Keras HDF5 files with tf_keras, and what tf_keras computes from them.

Run as ``python tests/tf_keras_writer.py OUT_DIR`` (tests/test_keras_files.py does, in a
separate process: tf_keras needs ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported,
and Keras 3 must not be loaded in the same process). Never imports rnnport: the expected
values come from tf_keras alone.

Writes into OUT_DIR:

* ``legacy_stack.h5`` (``model.save``) and ``legacy_stack_weights.h5`` (``save_weights``):
  Sequential LSTM(4) → Dropout → Bidirectional(GRU(3)) → Dense(2)
* ``legacy_functional.h5``: Functional GRU(3, reset_after=False) → SimpleRNN(2, relu) → Dense
* ``cudnn_lstm.h5`` / ``cudnn_lstm_weights.h5``: CuDNNLSTM(4); ``cudnn_gru.h5``: CuDNNGRU(3);
  ``cudnn_bigru.h5``: Bidirectional(CuDNNGRU(3)) → Dense(2)
* ``legacy_activations.h5`` (``model.save``): LSTM(4, activation="relu",
  recurrent_activation="hard_sigmoid") → GRU(3, activation="linear",
  recurrent_activation="hard_sigmoid") → Dense(2); tf_keras's hard_sigmoid is Keras 2's,
  clip(0.2·x + 0.5, 0, 1)
* ``old_keras_weights.h5`` (``save_weights``): LSTM(4) → GRU(3, reset_after=False), both
  with recurrent_activation="hard_sigmoid", the file's ``keras_version`` set to ``2.2.4``: what
  Keras before 2.3 wrote with its default gates; ``old_tf_keras_weights.h5`` the same with
  ``2.2.4-tf`` (tf.keras in TensorFlow 1.13 to 2.1, whose default changed at 2.0)
* ``expected.npz``: ``x`` and, per file stem, the recurrent stack's output on ``x``.
  CuDNN layers have no CPU kernel, so their outputs come from tf_keras's own conversion:
  a plain LSTM / GRU(reset_after=True) twin loads the CuDNN file (``load_weights`` converts
  through ``hdf5_format._convert_rnn_weights``) and runs. ``params_<stem>`` is the flat
  buffer the CuDNN layer itself hands to ``CudnnRNNV3`` (the raw op is swapped for a
  recorder while the layer runs once).
"""

from __future__ import annotations

import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import warnings

import h5py
import numpy as np
import tensorflow as tf
import tf_keras as keras

warnings.filterwarnings("ignore")

INPUT = 3


def randomize(model: keras.Model, rng: np.random.Generator) -> None:
    """Distinct random weights everywhere (biases included), never constants."""
    model.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype(np.float32)
                       for w in model.get_weights()])


def sequential(*layers: keras.layers.Layer) -> keras.Model:
    return keras.Sequential([keras.layers.InputLayer(input_shape=(None, INPUT)), *layers])


def run_layers(layers: list[keras.layers.Layer], x: np.ndarray) -> np.ndarray:
    y = tf.constant(x)
    for layer in layers:
        y = layer(y)
    return np.asarray(y)


def recorded_params(layer: keras.layers.Layer, x: np.ndarray) -> np.ndarray:
    """Run a CuDNN layer once with CudnnRNNV3 replaced by a recorder; return its params."""
    from tf_keras.src.layers.rnn import cudnn_lstm

    raw_ops = cudnn_lstm.tf.raw_ops  # the module both CuDNN layers call
    original = raw_ops.CudnnRNNV3
    seen: list[np.ndarray] = []

    def recorder(**args):  # type: ignore[no-untyped-def]
        seen.append(args["params"].numpy())
        inputs = args["input"]
        outputs = tf.zeros((tf.shape(inputs)[0], tf.shape(inputs)[1], layer.units))
        return outputs, args["input_h"], args["input_c"], None, None

    raw_ops.CudnnRNNV3 = recorder
    try:
        layer(tf.constant(x))
    finally:
        raw_ops.CudnnRNNV3 = original
    assert len(seen) == 1, len(seen)
    return seen[0]


def main(out: str) -> None:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 5, INPUT)).astype(np.float32)
    expected: dict[str, np.ndarray] = {"x": x}

    model = sequential(keras.layers.LSTM(4, return_sequences=True, name="lstm"),
                       keras.layers.Dropout(0.5, name="dropout"),
                       keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True),
                                                  name="bidirectional"),
                       keras.layers.Dense(2, name="dense"))
    randomize(model, rng)
    model.save(os.path.join(out, "legacy_stack.h5"))
    model.save_weights(os.path.join(out, "legacy_stack_weights.h5"))
    expected["legacy_stack"] = run_layers(model.layers[:3], x)

    inputs = keras.Input((None, INPUT), name="x")
    hidden = keras.layers.GRU(3, reset_after=False, return_sequences=True, name="g")(inputs)
    hidden = keras.layers.SimpleRNN(2, activation="relu", return_sequences=True, name="s")(hidden)
    functional = keras.Model(inputs, keras.layers.Dense(1, name="head")(hidden))
    randomize(functional, rng)
    functional.save(os.path.join(out, "legacy_functional.h5"))
    expected["legacy_functional"] = run_layers(
        [functional.get_layer("g"), functional.get_layer("s")], x)

    cudnn_cases = {
        "cudnn_lstm": (lambda: tf.compat.v1.keras.layers.CuDNNLSTM(4, return_sequences=True),
                       lambda: keras.layers.LSTM(4, return_sequences=True), False),
        "cudnn_gru": (lambda: tf.compat.v1.keras.layers.CuDNNGRU(3, return_sequences=True),
                      lambda: keras.layers.GRU(3, reset_after=True, return_sequences=True),
                      False),
        "cudnn_bigru": (lambda: tf.compat.v1.keras.layers.CuDNNGRU(3, return_sequences=True),
                        lambda: keras.layers.GRU(3, reset_after=True, return_sequences=True),
                        True),
    }
    for stem, (make_cudnn, make_plain, bidirectional) in cudnn_cases.items():
        cudnn_layer, plain_layer = make_cudnn(), make_plain()
        if bidirectional:
            cudnn = sequential(keras.layers.Bidirectional(cudnn_layer), keras.layers.Dense(2))
            twin = sequential(keras.layers.Bidirectional(plain_layer), keras.layers.Dense(2))
        else:
            cudnn, twin = sequential(cudnn_layer), sequential(plain_layer)
        randomize(cudnn, rng)
        path = os.path.join(out, f"{stem}.h5")
        cudnn.save(path)
        if stem == "cudnn_lstm":
            cudnn.save_weights(os.path.join(out, "cudnn_lstm_weights.h5"))
        twin.load_weights(path)  # tf_keras converts the CuDNN arrays here
        expected[stem] = run_layers(twin.layers[:1], x)
        if not bidirectional:
            expected[f"params_{stem}"] = recorded_params(cudnn_layer, x)

    model = sequential(keras.layers.LSTM(4, activation="relu", recurrent_activation="hard_sigmoid",
                                         return_sequences=True, name="lstm"),
                       keras.layers.GRU(3, activation="linear", recurrent_activation="hard_sigmoid",
                                        return_sequences=True, name="gru"),
                       keras.layers.Dense(2, name="dense"))
    randomize(model, rng)
    model.save(os.path.join(out, "legacy_activations.h5"))
    expected["legacy_activations"] = run_layers(model.layers[:2], x)

    model = sequential(keras.layers.LSTM(4, recurrent_activation="hard_sigmoid",
                                         return_sequences=True, name="lstm"),
                       keras.layers.GRU(3, recurrent_activation="hard_sigmoid", reset_after=False,
                                        return_sequences=True, name="gru"))
    randomize(model, rng)
    for stem, version in (("old_keras_weights", "2.2.4"), ("old_tf_keras_weights", "2.2.4-tf")):
        path = os.path.join(out, f"{stem}.h5")
        model.save_weights(path)
        with h5py.File(path, "r+") as h5:  # what the older Keras wrote in the file
            h5.attrs["keras_version"] = np.bytes_(version)
    expected["old_keras_weights"] = run_layers(model.layers, x)

    np.savez(os.path.join(out, "expected.npz"), **expected)


if __name__ == "__main__":
    main(sys.argv[1])
