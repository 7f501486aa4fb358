"""Generate golden TFLite (LiteRT) files: Keras 3 models through TensorFlow's converter.

    .venv/bin/python tools/golden_tflite_keras3.py [--out tests/golden/tflite_keras3]
                                                   [--case NAME ...] [--list]

The Keras 3 part of ``tools/golden_tflite.py`` (whose helpers it shares): everything is made
by the real Keras 3.15 on TensorFlow 2.21, in a process without ``TF_USE_LEGACY_KERAS`` (it
is removed before TensorFlow is imported, so ``keras`` is Keras 3), and run by the real
LiteRT interpreter (``ai-edge-litert``). ``rnnport`` is not imported.

Models are converted with ``tf.lite.TFLiteConverter.from_keras_model`` and its default
settings. Keras 3 layers do not become TFLite's fused LSTM operator: every LSTM, GRU and
SimpleRNN is a ``WHILE`` loop whose body computes one step from builtins (an LSTM's loop
carries h and c; a GRU's body splits the recurrent product with ``STRIDED_SLICE``), with
``TRANSPOSE`` to time-major around it and ``REVERSE_V2`` for a backward direction. Every
``Input`` carries ``batch_size=2`` (fixed shapes), except these cases:

* ``lstm_open_flex``: no batch size. The converter then cannot lower the TensorList ops
  and advises ``SELECT_TF_OPS``; with it the loop's output is a TensorList built by Flex
  operators (``FlexTensorListReserve``, ``FlexTensorListSetItem``, ``FlexTensorListStack``).
  The LiteRT interpreter installed has no Flex delegate: the file is checked against Keras.
* ``gru_saved_model_variables``: the model saved with ``tf.saved_model.save`` and converted
  with ``from_saved_model``: the weights stay resource variables (``VAR_HANDLE``,
  ``READ_VARIABLE``) with no initializer, so the file does not hold them; LiteRT fails on it
  (recorded in ``meta``).
* ``lstm_dropout`` (dropout 0.2): Keras 3's seed generator becomes a resource variable
  initialized by a ``CALL_ONCE`` subgraph and assigned at each invocation, feeding nothing.
* ``gru_stateful`` (``stateful=True``): the state is a resource variable (zeros from the
  ``CALL_ONCE`` initializer, assigned after the loop); ``y_litert`` is the first invocation.
* ``lstm_mixed_float16`` (``dtype="mixed_float16"``): the converter's defaults fail on the
  float16 loop; with ``SELECT_TF_OPS`` its body is Flex operators on float16 values, which
  the LiteRT installed cannot run (no ``y_litert``).

Weights: every variable is random (uniform, ±0.6) and every value in a case is distinct,
biases included, so a swapped gate or a dropped bias cannot pass. Inputs are uniform ±1.
Seeds: CRC32 of the case name. Names are short (model ``m``), to keep the files small.

Files, per case ``<name>``: as ``tools/golden_tflite.py`` writes them (the converter's
``<name>.tflite``; ``<name>.npz`` holding ``x``, ``y_keras``, ``y_litert`` and
``weights/{layer}/{k}``), with these differences. ``y_litert`` is absent where LiteRT
cannot run the file. ``weights/`` holds the recurrent layers' arrays alone. ``litert/{index}``
(``conv_lstm_dense``: Conv1D, the LSTM, Dense; ``gru_encoder_decoder``) holds every float
tensor of rank 2 and 3 in the main subgraph as LiteRT computed it
(``experimental_preserve_all_tensors``), by tensor index: the recurrent networks' own
inputs, outputs and final states among them. ``meta`` is shorter:
``case``, ``description``, ``versions`` (tensorflow, keras, ai_edge_litert, numpy),
``layers`` (one per recurrent layer, in order: ``name``, ``class``, ``inner`` for a
Bidirectional, ``units``, ``activation``, ``recurrent_activation``, ``reset_after``), ``ops``
(the main subgraph's operators, by name), ``subgraphs`` (their number), ``litert`` (``"ran"``,
or the start of LiteRT's error) and ``tolerance``. The Flex operators' options name the
function TensorFlow traced, numbered by what the process traced before: making one case
alone changes a few bytes of ``lstm_open_flex.tflite``.

``MANIFEST.json`` lists every case with its description, its files and their SHA-256.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.pop("TF_USE_LEGACY_KERAS", None)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import golden_manifest
import numpy as np
from golden_tflite import _distinct_uniform, _operator_names

BATCH, TIME, INPUT = 2, 5, 3
TOLERANCE = 1e-5
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "tflite_keras3"


def _model(keras: Any, layers: list[Any], batch: int | None = BATCH) -> Any:
    inputs = keras.Input(shape=(TIME, INPUT), batch_size=batch, name="x")
    value = inputs
    for layer in layers:
        value = layer(value)
    return keras.Model(inputs, value, name="m")


def _one(cell: str, units: int = 4, **kwargs: Any) -> Callable[[Any], Any]:
    def build(keras: Any) -> Any:
        layer = getattr(keras.layers, cell)(units, return_sequences=True, name=cell.lower(),
                                            **kwargs)
        return _model(keras, [layer])
    return build


def _lstm_last(keras: Any) -> Any:
    return _model(keras, [keras.layers.LSTM(4, name="lstm")])


def _bi_lstm(keras: Any) -> Any:
    return _model(keras, [keras.layers.Bidirectional(
        keras.layers.LSTM(3, return_sequences=True, name="lstm"), name="bi")])


def _stacked_gru_lstm(keras: Any) -> Any:
    return _model(keras, [keras.layers.GRU(4, return_sequences=True, name="gru"),
                          keras.layers.LSTM(3, return_sequences=True, name="lstm")])


def _conv_lstm_dense(keras: Any) -> Any:
    return _model(keras, [keras.layers.Conv1D(4, 2, padding="same", name="conv"),
                          keras.layers.LSTM(4, return_sequences=True, name="lstm"),
                          keras.layers.Dense(2, name="dense")])


def _encoder_decoder(keras: Any) -> Any:
    inputs = keras.Input(shape=(TIME, INPUT), batch_size=BATCH, name="x")
    _, state = keras.layers.GRU(3, return_state=True, name="encoder")(inputs)
    outputs = keras.layers.GRU(3, return_sequences=True, name="decoder")(
        inputs, initial_state=state)
    return keras.Model(inputs, outputs, name="m")


def _lstm_open(keras: Any) -> Any:
    return _model(keras, [keras.layers.LSTM(4, return_sequences=True, name="lstm")], None)


def _lstm_dropout(keras: Any) -> Any:
    return _model(keras, [keras.layers.LSTM(4, return_sequences=True, dropout=0.2,
                                            recurrent_dropout=0.2, name="lstm")])


def _flip_go_backwards(keras: Any) -> Any:
    flip = keras.layers.Lambda(lambda t: keras.ops.flip(t, axis=1), name="flip")
    return _model(keras, [flip, keras.layers.LSTM(3, go_backwards=True, return_sequences=True,
                                                  name="lstm")])


def _bi_gru_sum(keras: Any) -> Any:
    return _model(keras, [keras.layers.Bidirectional(
        keras.layers.GRU(3, return_sequences=True, name="gru"), merge_mode="sum", name="bi")])


def _bi_gru_last(keras: Any) -> Any:
    return _model(keras, [keras.layers.Bidirectional(keras.layers.GRU(3, name="gru"),
                                                     name="bi")])


def _bi_halves_differ(keras: Any) -> Any:
    layers = keras.layers
    return _model(keras, [layers.Bidirectional(
        layers.LSTM(3, return_sequences=True, name="lstm"),
        backward_layer=layers.LSTM(3, activation="relu", go_backwards=True,
                                   return_sequences=True, name="relu_lstm"), name="bi")])


# name -> (builder, description, how it is converted: "" from_keras_model with its defaults,
# "select" with SELECT_TF_OPS, "saved_model" through tf.saved_model.save and from_saved_model)
CASES: dict[str, tuple[Callable[[Any], Any], str, str]] = {
    "lstm": (_one("LSTM"), "LSTM(4), return_sequences=True: a WHILE loop carrying h and c", ""),
    "lstm_last": (_lstm_last, "LSTM(4), return_sequences=False", ""),
    "gru": (_one("GRU"), "GRU(4) (reset_after=True), return_sequences=True: STRIDED_SLICE of "
            "the recurrent product", ""),
    "gru_reset_before": (_one("GRU", reset_after=False), "GRU(4, reset_after=False), "
                         "return_sequences=True", ""),
    "simple_rnn": (_one("SimpleRNN"), "SimpleRNN(4, tanh), return_sequences=True", ""),
    "bi_lstm": (_bi_lstm, "Bidirectional(LSTM(3, return_sequences=True)): two loops, the "
                "backward one between REVERSE_V2s, joined by CONCATENATION", ""),
    "stacked_gru_lstm": (_stacked_gru_lstm, "GRU(4) then LSTM(3), both return_sequences: "
                         "two loops, the sequence left time-major between them", ""),
    "conv_lstm_dense": (_conv_lstm_dense, "Conv1D(4, 2, same) → LSTM(4, return_sequences) → "
                        "Dense(2): operators around the recurrent network", ""),
    "gru_encoder_decoder": (_encoder_decoder, "GRU(3, return_state=True) whose final state "
                            "starts GRU(3, return_sequences=True) on the same input: the "
                            "encoder's loop keeps no output sequence", ""),
    "gru_linear": (_one("GRU", activation="linear"), "GRU(4, activation='linear'): no "
                   "candidate function", ""),
    "simple_rnn_linear": (_one("SimpleRNN", activation="linear"), "SimpleRNN(4, "
                          "activation='linear'): no canonical cell", ""),
    "lstm_open_flex": (_lstm_open, "LSTM(4), open batch, SELECT_TF_OPS: Flex TensorList ops "
                       "around the loop", "select"),
    "gru_saved_model_variables": (_one("GRU"), "GRU(4) through tf.saved_model.save and "
                                  "from_saved_model: the weights are resource variables "
                                  "nothing initializes", "saved_model"),
    "lstm_dropout": (_lstm_dropout, "LSTM(4, dropout=0.2, recurrent_dropout=0.2): a seed "
                     "generator variable, CALL_ONCE initializer", ""),
    "gru_stateful": (_one("GRU", stateful=True), "GRU(4, stateful=True): the state in a "
                     "resource variable, CALL_ONCE initializer", ""),
    "lstm_go_backwards": (_one("LSTM", 3, go_backwards=True), "LSTM(3, go_backwards=True), "
                          "return_sequences=True: the outputs in reversed time order", ""),
    "gru_go_backwards_last": (lambda keras: _model(keras, [keras.layers.GRU(
        3, go_backwards=True, name="gru")]), "GRU(3, go_backwards=True), "
        "return_sequences=False: the state after the first step", ""),
    "lstm_flip_go_backwards": (_flip_go_backwards, "Lambda(ops.flip) then LSTM(3, "
                               "go_backwards=True, return_sequences=True): the two reversals "
                               "cancel", ""),
    "bi_gru_sum": (_bi_gru_sum, "Bidirectional(GRU(3, return_sequences=True), "
                   "merge_mode='sum'): two loops joined by ADD", ""),
    "bi_gru_last": (_bi_gru_last, "Bidirectional(GRU(3)), return_sequences=False: each "
                    "loop's last step (the backward one's at time 0), joined by "
                    "CONCATENATION", ""),
    "bi_halves_differ": (_bi_halves_differ, "Bidirectional(LSTM(3), backward_layer=LSTM(3, "
                         "activation='relu', go_backwards=True)): the directions compute "
                         "different cells", ""),
    "lstm_silu": (_one("LSTM", 3, activation="silu"), "LSTM(3, activation='silu'): "
                  "x·sigmoid(x), no cell rnnport reads", ""),
    "lstm_mixed_float16": (_one("LSTM", 3, dtype="mixed_float16"), "LSTM(3, "
                           "dtype='mixed_float16'), SELECT_TF_OPS (the converter's default "
                           "fails on it): a loop computing in float16 with Flex operators; "
                           "LiteRT has no Flex delegate", "select"),
}
AROUND = {"conv_lstm_dense", "gru_encoder_decoder"}  # cases saving LiteRT's tensors


def _convert(tf: Any, model: Any, how: str) -> bytes:
    if how == "saved_model":
        with tempfile.TemporaryDirectory() as folder:
            tf.saved_model.save(model, folder)
            return bytes(tf.lite.TFLiteConverter.from_saved_model(folder).convert())
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if how == "select":
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS,
                                               tf.lite.OpsSet.SELECT_TF_OPS]
    return bytes(converter.convert())


def _litert(content: bytes, x: np.ndarray,
            around: bool) -> tuple[np.ndarray | None, dict[str, np.ndarray], str]:
    """LiteRT's output for ``x``, its float tensors of rank 2 and 3 (``around``), or its
    error."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        interpreter = Interpreter(model_content=content, experimental_preserve_all_tensors=around)
        interpreter.allocate_tensors()
        inputs = interpreter.get_input_details()
        if len(inputs) != 1:
            raise SystemExit(f"the converted model takes {len(inputs)} inputs, expected one")
        if list(inputs[0]["shape"]) != list(x.shape):
            interpreter.resize_tensor_input(inputs[0]["index"], list(x.shape))
            interpreter.allocate_tensors()
        interpreter.set_tensor(inputs[0]["index"], x)
        interpreter.invoke()
    except RuntimeError as error:
        return None, {}, str(error).splitlines()[0][:240]
    y = np.array(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
    tensors = {}
    if around:
        for detail in interpreter.get_tensor_details():
            if np.dtype(detail["dtype"]) == np.float32 and len(detail["shape"]) in (2, 3):
                try:
                    value = np.array(interpreter.get_tensor(detail["index"]))
                except ValueError:  # a tensor LiteRT kept no data for
                    continue
                tensors[f"litert/{detail['index']}"] = value
    return y, tensors, "ran"


def _recurrent(model: Any) -> list[Any]:
    return [layer for layer in model.layers
            if hasattr(layer, "cell") or hasattr(layer, "forward_layer")]


def _layer_entry(layer: Any) -> dict[str, Any]:
    inner = getattr(layer, "forward_layer", layer)
    cell = inner.cell
    entry: dict[str, Any] = {"name": layer.name, "class": type(layer).__name__,
                             "units": cell.units}
    if inner is not layer:
        entry["inner"] = type(inner).__name__
    for name in ("activation", "recurrent_activation"):
        if hasattr(cell, name):
            entry[name] = getattr(cell, name).__name__
    if hasattr(cell, "reset_after"):
        entry["reset_after"] = bool(cell.reset_after)
    return entry


def make_case(name: str, out: Path) -> dict[str, Any]:
    import keras
    import tensorflow as tf
    from ai_edge_litert import __version__ as litert_version

    if keras.__version__.split(".")[0] != "3":
        raise SystemExit(f"keras {keras.__version__} loaded; expected Keras 3 (is "
                         "TF_USE_LEGACY_KERAS set?)")
    builder, description, how = CASES[name]
    seed = zlib.crc32(name.encode())
    rng = np.random.default_rng(seed)
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed & 0x7FFFFFFF)
    model = builder(keras)
    used: set[float] = set()
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([_distinct_uniform(rng, w.shape, used) for w in weights])
    x = rng.uniform(-1, 1, size=(BATCH, TIME, INPUT)).astype(np.float32)
    y_keras = np.asarray(model(x, training=False))
    for layer in _recurrent(model):
        if getattr(layer, "stateful", False):
            # The initializer the converter writes gives the state variable its value at
            # conversion: zeros, as Keras started from.
            layer.reset_state()
    content = _convert(tf, model, how)
    y_litert, tensors, ran = _litert(content, x, name in AROUND)
    arrays: dict[str, np.ndarray] = {"x": x, "y_keras": y_keras, **tensors}
    error = None
    if y_litert is not None:
        error = float(np.max(np.abs(y_litert - y_keras)))
        if error > TOLERANCE:
            raise SystemExit(f"{name}: LiteRT and Keras differ by {error:g} (more than "
                             f"{TOLERANCE:g})")
        arrays["y_litert"] = y_litert
    elif how == "":
        raise SystemExit(f"{name}: LiteRT cannot run the converted model: {ran}")
    layers = []
    for layer in _recurrent(model):
        layers.append(_layer_entry(layer))
        for k, value in enumerate(layer.get_weights()):
            arrays[f"weights/{layer.name}/{k}"] = value

    from tensorflow.lite.python import schema_py_generated as schema

    names = _operator_names()
    decoded = schema.Model.GetRootAsModel(content, 0)
    codes = []
    for index in range(decoded.OperatorCodesLength()):
        code = decoded.OperatorCodes(index)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        codes.append(code.CustomCode().decode() if code.CustomCode() else names[builtin])
    graph = decoded.Subgraphs(0)
    meta = {
        "case": name, "description": description,
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__,
                     "ai_edge_litert": litert_version, "numpy": np.__version__},
        "layers": layers, "subgraphs": decoded.SubgraphsLength(),
        "ops": [codes[graph.Operators(i).OpcodeIndex()] for i in range(graph.OperatorsLength())],
        "litert": ran, "max_litert_keras_difference": error, "tolerance": TOLERANCE,
    }
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    (out / f"{name}.tflite").write_bytes(content)
    np.savez_compressed(out / f"{name}.npz", **arrays)
    return meta


def _made(name: str, out: Path) -> golden_manifest.Made:
    meta = make_case(name, out)
    difference = meta["max_litert_keras_difference"]
    return ({"description": meta["description"], "ops": meta["ops"], "litert": meta["litert"]},
            [f"{name}.tflite", f"{name}.npz"],
            f"{' '.join(meta['ops'])}  (LiteRT: "
            f"{meta['litert'] if difference is None else f'vs Keras {difference:.2g}'})",
            meta["versions"])


def main(argv: list[str] | None = None) -> int:
    return golden_manifest.main(argv, description=__doc__.splitlines()[0],
                                default_out=DEFAULT_OUT,
                                cases={name: text for name, (_, text, _) in CASES.items()},
                                generator="tools/golden_tflite_keras3.py", make=_made)


if __name__ == "__main__":
    sys.exit(main())
