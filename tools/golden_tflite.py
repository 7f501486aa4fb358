"""Generate golden TFLite (LiteRT) files: tf_keras models through TensorFlow's converter.

    .venv/bin/python tools/golden_tflite.py [--out tests/golden/tflite] [--case NAME ...] [--list]

Everything here is made by the real TensorFlow 2.21 with ``tf_keras`` (Keras 2) and run by
the real LiteRT interpreter (``ai-edge-litert``), for rnnport's TFLite reading to be
checked against. ``main`` sets ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported, so
``tf.keras`` is ``tf_keras`` and Keras 3 never loads (``tools/golden_tflite_keras3.py``, the
Keras 3 part, imports this module's helpers without it). ``rnnport`` is not imported.

Models are converted with ``tf.lite.TFLiteConverter.from_keras_model`` and its default
settings (float32; Keras LSTMs fused into ``UNIDIRECTIONAL_SEQUENCE_LSTM``; SimpleRNN and
GRU layers become ``WHILE`` loops over a body subgraph, with ``TRANSPOSE`` to time-major
around them and ``REVERSE_V2`` for a backward direction). The models' ``Input`` layers
carry ``batch_size=2``, so the signature the converter traces is ``(2, time, 3)`` and
every shape in the file is fixed. Quantized cases add ``converter.optimizations =
[tf.lite.Optimize.DEFAULT]``: ``lstm_float16`` with ``target_spec.supported_types =
[tf.float16]`` (FLOAT16 weights turned into float32 by ``DEQUANTIZE`` operators in front
of the LSTM); ``gru_dynamic_int8`` alone (dynamic range: the converter leaves tensors under
1024 elements and the fused LSTM's weights in float32, so a 40-unit GRU's recurrent weights
are the INT8 ones); ``lstm_int8`` with a representative dataset of 16 random batches (INT8
weights, INT32 biases, int8 activations behind ``QUANTIZE`` / ``DEQUANTIZE``). LiteRT's
integer kernels differ from the float model, so those cases carry a looser tolerance.

Weights: every variable is random (uniform, ±0.6) and every value in a case is distinct,
biases included (never Keras's zero or one initial biases), so a swapped gate or a dropped
bias cannot pass. Inputs are uniform ±1. Seeds: CRC32 of the case name.

Files, per case ``<name>``
--------------------------
``<name>.tflite``
    The converter's output, as written.
``<name>.npz`` (plain arrays, ``allow_pickle=False``):

``x``
    The input, ``(batch, time, input)``, float32.
``y_litert``
    The LiteRT interpreter's output for ``x``.
``y_keras``
    The Keras model's own output for ``x``.
``weights/{layer}/{k}``
    The ``k``-th array of ``get_weights()`` of the Keras layer named ``layer`` (for a
    Bidirectional: forward kernel, recurrent kernel, bias, then the backward ones).
``meta``
    0-d unicode array holding a JSON object: ``case``, ``description``, ``versions``
    (tensorflow, tf_keras, ai_edge_litert, numpy), ``quantized`` (``float16``,
    ``dynamic``, ``int8``, or false),
    ``layers`` (one per Keras layer: ``name``, ``class``, ``inner`` for a Bidirectional,
    ``units``, ``config``: the layer's ``get_config()`` reduced to JSON-able values),
    ``weights`` (layer -> the names of its ``get_weights()`` arrays, in order, and their
    shapes), ``ops`` (the operator codes the ``.tflite`` holds, as names, one per operator
    in execution order, from TensorFlow's own generated schema), ``operator_codes`` (the
    file's distinct operator codes), ``tensors`` (index -> name, shape, type of the main
    subgraph's tensors), ``inputs`` and ``outputs`` (the subgraph's tensor indices),
    ``interpreter_inputs`` and ``interpreter_outputs`` (what LiteRT reports: name, shape,
    dtype) and ``tolerance`` (how close ``y_litert`` is to ``y_keras``).

``MANIFEST.json`` lists every case with its description, its files and their SHA-256.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import golden_manifest
import numpy as np

BATCH, INPUT = 2, 3
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "tflite"


_distinct_uniform = golden_manifest.distinct_uniform


def _randomize(model: Any, rng: np.random.Generator) -> None:
    used: set[float] = set()
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([_distinct_uniform(rng, w.shape, used) for w in weights])


def _lstm(tf: Any, time: int, units: int = 4, **kwargs: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(time, INPUT), batch_size=BATCH, name="x")
    return keras.Model(inputs, keras.layers.LSTM(units, name="lstm", **kwargs)(inputs))


def _lstm_sequences(tf: Any) -> Any:
    return _lstm(tf, 5, return_sequences=True)


def _lstm_last(tf: Any) -> Any:
    return _lstm(tf, 6, return_sequences=False)


def _bi_lstm(tf: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(5, INPUT), batch_size=BATCH, name="x")
    layer = keras.layers.Bidirectional(keras.layers.LSTM(4, return_sequences=True, name="lstm"),
                                       name="bi_lstm")
    return keras.Model(inputs, layer(inputs))


def _simple_rnn(tf: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(6, INPUT), batch_size=BATCH, name="x")
    layer = keras.layers.SimpleRNN(5, activation="tanh", return_sequences=True, name="rnn")
    return keras.Model(inputs, layer(inputs))


def _gru(tf: Any, time: int = 6, units: int = 4, **kwargs: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(time, INPUT), batch_size=BATCH, name="x")
    return keras.Model(inputs, keras.layers.GRU(units, name="gru", **kwargs)(inputs))


def _gru_sequences(tf: Any) -> Any:
    return _gru(tf, return_sequences=True)


def _gru_reset_before(tf: Any) -> Any:
    return _gru(tf, return_sequences=True, reset_after=False)


def _gru_last(tf: Any) -> Any:
    return _gru(tf, 5, return_sequences=False)


def _simple_rnn_relu(tf: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(5, INPUT), batch_size=BATCH, name="x")
    layer = keras.layers.SimpleRNN(4, activation="relu", return_sequences=True, name="rnn")
    return keras.Model(inputs, layer(inputs))


def _bi_gru(tf: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(5, INPUT), batch_size=BATCH, name="x")
    layer = keras.layers.Bidirectional(keras.layers.GRU(4, return_sequences=True, name="gru"),
                                       name="bi_gru")
    return keras.Model(inputs, layer(inputs))


def _stacked(tf: Any, cell: str) -> Any:
    """Two layers of ``cell`` ("LSTM", "GRU"), 5 then 4 units, named ``lstm_1``, ``lstm_2`` …"""
    keras = tf.keras
    layer = getattr(keras.layers, cell)
    inputs = keras.Input(shape=(5, INPUT), batch_size=BATCH, name="x")
    hidden = layer(5, return_sequences=True, name=f"{cell.lower()}_1")(inputs)
    return keras.Model(inputs, layer(4, return_sequences=True, name=f"{cell.lower()}_2")(hidden))


def _stacked_lstm(tf: Any) -> Any:
    return _stacked(tf, "LSTM")


def _float16(tf: Any) -> Any:
    return _lstm(tf, 5, return_sequences=True)


def _stacked_gru(tf: Any) -> Any:
    return _stacked(tf, "GRU")


def _gru_go_backwards(tf: Any) -> Any:
    return _gru(tf, 5, return_sequences=True, go_backwards=True)


def _gru_batch1(tf: Any) -> Any:
    keras = tf.keras
    inputs = keras.Input(shape=(5, INPUT), batch_size=1, name="x")
    return keras.Model(inputs, keras.layers.GRU(4, return_sequences=True, name="gru")(inputs))


def _gru_wide(tf: Any) -> Any:
    return _gru(tf, 5, 40, return_sequences=True)


def _lstm_wide(tf: Any) -> Any:
    return _lstm(tf, 5, 16, return_sequences=True)


# name -> (builder, description, quantization: "" none, "float16", "dynamic" (int8 weights,
# Optimize.DEFAULT alone) or "int8" (Optimize.DEFAULT with a representative dataset))
CASES: dict[str, tuple[Callable[[Any], Any], str, str]] = {
    "lstm_sequences": (_lstm_sequences, "LSTM(4), return_sequences=True, time 5", ""),
    "lstm_last": (_lstm_last, "LSTM(4), return_sequences=False, time 6", ""),
    "bi_lstm": (_bi_lstm, "Bidirectional(LSTM(4, return_sequences=True)), merge concat, time 5",
                ""),
    "simple_rnn": (_simple_rnn, "SimpleRNN(5, tanh), return_sequences=True, time 6", ""),
    "stacked_lstm": (_stacked_lstm, "LSTM(5) then LSTM(4), both return_sequences, time 5", ""),
    "lstm_float16": (_float16, "LSTM(4) converted with Optimize.DEFAULT and supported_types "
                     "float16: FLOAT16 weights behind DEQUANTIZE ops, time 5", "float16"),
    "simple_rnn_relu": (_simple_rnn_relu, "SimpleRNN(4, relu), return_sequences=True, time 5",
                        ""),
    "gru_sequences": (_gru_sequences, "GRU(4) (reset_after=True), return_sequences=True, time 6: "
                      "a WHILE loop", ""),
    "gru_reset_before": (_gru_reset_before, "GRU(4, reset_after=False), return_sequences=True, "
                         "time 6: a WHILE loop", ""),
    "gru_last": (_gru_last, "GRU(4), return_sequences=False, time 5: a WHILE loop", ""),
    "bi_gru": (_bi_gru, "Bidirectional(GRU(4, return_sequences=True)), time 5: two WHILE loops",
               ""),
    "stacked_gru": (_stacked_gru, "GRU(5) then GRU(4), both return_sequences, time 5: two "
                    "WHILE loops, the sequence left time-major between them", ""),
    "gru_go_backwards": (_gru_go_backwards, "GRU(4, go_backwards=True, return_sequences=True), "
                         "time 5: the outputs in reversed time order", ""),
    "gru_batch1": (_gru_batch1, "GRU(4), batch 1, time 5: RESHAPE in place of TRANSPOSE", ""),
    "gru_dynamic_int8": (_gru_wide, "GRU(40), return_sequences=True, time 5, Optimize.DEFAULT: "
                         "the recurrent weights (120×40) stored INT8 with a scale", "dynamic"),
    "lstm_int8": (_lstm_wide, "LSTM(16), return_sequences=True, time 5, Optimize.DEFAULT with a "
                  "representative dataset: INT8 weights, INT32 biases, int8 activations between "
                  "QUANTIZE and DEQUANTIZE", "int8"),
}


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)


def _weight_names(layer: Any) -> list[str]:
    return [w.name for w in layer.weights]


def _operator_names() -> dict[int, str]:
    from tensorflow.lite.python import schema_py_generated as schema

    return {value: name for name, value in vars(schema.BuiltinOperator).items()
            if not name.startswith("_") and isinstance(value, int)}


def _describe_file(content: bytes) -> dict[str, Any]:
    from tensorflow.lite.python import schema_py_generated as schema

    names = _operator_names()
    types = {value: name for name, value in vars(schema.TensorType).items()
             if not name.startswith("_") and isinstance(value, int)}
    model = schema.Model.GetRootAsModel(content, 0)
    codes = []
    for index in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(index)
        codes.append(names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())])
    graph = model.Subgraphs(0)
    ops = [codes[graph.Operators(i).OpcodeIndex()] for i in range(graph.OperatorsLength())]
    tensors = {}
    for index in range(graph.TensorsLength()):
        tensor = graph.Tensors(index)
        tensors[str(index)] = {"name": tensor.Name().decode(), "shape": tensor.ShapeAsNumpy().tolist()
                               if tensor.ShapeLength() else [], "type": types[tensor.Type()]}
    return {"operator_codes": codes, "ops": ops, "tensors": tensors,
            "subgraphs": model.SubgraphsLength(),
            "inputs": graph.InputsAsNumpy().tolist(), "outputs": graph.OutputsAsNumpy().tolist()}


def make_case(name: str, out: Path) -> dict[str, Any]:
    import tensorflow as tf
    from ai_edge_litert import __version__ as litert_version
    from ai_edge_litert.interpreter import Interpreter

    builder, description, quantize = CASES[name]
    rng_data = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    tf.keras.backend.clear_session()
    tf.random.set_seed(zlib.crc32(name.encode()) & 0x7FFFFFFF)
    model = builder(tf)
    _randomize(model, rng)
    time = int(model.input_shape[1])
    batch = int(model.input_shape[0])
    x = rng.uniform(-1, 1, size=(batch, time, INPUT)).astype(np.float32)
    y_keras = model(x).numpy()

    # The Input layers carry batch_size=2, so the signature from_keras_model traces is
    # (2, time, 3): every shape in the file is fixed (checked below).
    content = _convert_keras(tf, model, quantize, rng_data, time)

    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    inputs, outputs = interpreter.get_input_details(), interpreter.get_output_details()
    if len(inputs) != 1 or list(inputs[0]["shape"]) != [batch, time, INPUT]:
        raise SystemExit(f"{name}: the converted model's input is {inputs}, expected one of shape "
                         f"{[batch, time, INPUT]}")
    interpreter.set_tensor(inputs[0]["index"], x)
    interpreter.invoke()
    y_litert = interpreter.get_tensor(outputs[0]["index"]).copy()
    error = float(np.max(np.abs(y_litert - y_keras)))
    tolerance = {"": 1e-5, "float16": 1e-2, "dynamic": 5e-2, "int8": 0.1}[quantize]
    if error > tolerance:
        raise SystemExit(f"{name}: LiteRT and Keras differ by {error:g} (more than {tolerance:g})")

    arrays: dict[str, np.ndarray] = {"x": x, "y_litert": y_litert, "y_keras": y_keras}
    layers, weights = [], {}
    for layer in model.layers[1:]:
        config = layer.get_config()
        entry: dict[str, Any] = {"name": layer.name, "class": type(layer).__name__,
                                 "config": _jsonable(config)}
        if hasattr(layer, "forward_layer"):
            entry["inner"] = type(layer.forward_layer).__name__
            entry["units"] = layer.forward_layer.units
        else:
            entry["units"] = getattr(layer, "units", None)
        layers.append(entry)
        values = layer.get_weights()
        weights[layer.name] = [{"name": n, "shape": list(v.shape)}
                               for n, v in zip(_weight_names(layer), values, strict=True)]
        for k, value in enumerate(values):
            arrays[f"weights/{layer.name}/{k}"] = value

    import tf_keras

    meta = {
        "case": name, "description": description, "quantized": quantize,
        "versions": {"tensorflow": tf.__version__, "tf_keras": tf_keras.__version__,
                     "ai_edge_litert": litert_version, "numpy": np.__version__},
        "layers": layers, "weights": weights, **_describe_file(content),
        "interpreter_inputs": [{"name": d["name"], "shape": d["shape"].tolist(),
                                "dtype": np.dtype(d["dtype"]).name} for d in inputs],
        "interpreter_outputs": [{"name": d["name"], "shape": d["shape"].tolist(),
                                 "dtype": np.dtype(d["dtype"]).name} for d in outputs],
        "max_litert_keras_difference": error, "tolerance": tolerance,
    }
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    (out / f"{name}.tflite").write_bytes(content)
    np.savez(out / f"{name}.npz", **arrays)
    return meta


def _convert_keras(tf: Any, model: Any, quantize: str, rng: np.random.Generator,
                   time: int) -> bytes:
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if quantize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantize == "float16":
        converter.target_spec.supported_types = [tf.float16]
    if quantize == "int8":
        samples = [rng.uniform(-1, 1, size=(BATCH, time, INPUT)).astype(np.float32)
                   for _ in range(16)]
        converter.representative_dataset = lambda: ([sample] for sample in samples)
    return bytes(converter.convert())


def _made(name: str, out: Path) -> golden_manifest.Made:
    meta = make_case(name, out)
    return ({"description": meta["description"], "ops": meta["ops"]},
            [f"{name}.tflite", f"{name}.npz"],
            f"{' '.join(meta['ops'])}  (LiteRT vs Keras {meta['max_litert_keras_difference']:.2g})",
            meta["versions"])


def main(argv: list[str] | None = None) -> int:
    if "tensorflow" in sys.modules:
        raise SystemExit("golden_tflite: TensorFlow was imported before TF_USE_LEGACY_KERAS=1 "
                         "could be set; run this script on its own")
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    return golden_manifest.main(argv, description=__doc__.splitlines()[0],
                                default_out=DEFAULT_OUT,
                                cases={name: text for name, (_, text, _) in CASES.items()},
                                generator="tools/golden_tflite.py", make=_made)


if __name__ == "__main__":
    sys.exit(main())
