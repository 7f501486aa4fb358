"""Generate golden Keras 3 SavedModels: ``model.export(dir)`` and ``tf.saved_model.save``.

    .venv/bin/python tools/golden_keras3.py [--out tests/golden/keras3] [--case NAME ...] [--list]

Everything here is made by the real Keras 3.15 on TensorFlow 2.21, for the ``tf2`` reader's
Keras 3 part (``src/rnnport/formats/tf2/keras3.py``) to be checked against. Keras 3 must
load, so ``TF_USE_LEGACY_KERAS`` is removed from the environment before TensorFlow is
imported (with it set, ``tf.keras`` would be Keras 2; ``tools/golden_tf2.py`` sets it, so
the two generators run in processes of their own). ``rnnport`` is not imported.

Each model is built from ``keras.Input`` and Keras 3 layers, its variables set to random
values, and saved with its own ``model.export(dir)`` (the default
``format="tf_saved_model"``), except ``keras3_saved_model``, saved with
``tf.saved_model.save(model, dir)``. ``keras3_cudnn`` is exported as on a machine with a
GPU: Keras 3 then writes ``CudnnRNNV3`` ops for its LSTM and (reset-after) GRU layers
instead of loops. The generator makes Keras believe a GPU is there
(``keras.src.backend.tensorflow.rnn._is_gpu_available`` returns True while the model is
traced; TensorFlow is a CUDA build, so Keras takes the same path as on a GPU); the op has no
CPU kernel, so that model's outputs are Keras's own CPU outputs of the same model, computed
before the export. ``keras3_jax`` is exported from Keras 3's JAX backend
(``KERAS_BACKEND=jax``, in a process of its own, ``--jax-case``): jax2tf writes the whole
computation as one ``XlaCallModule`` op, which rnnport refuses by name.

Weights: every variable is random (uniform, ±0.6) and every value in a case is distinct,
biases included (never Keras's zero or one initial biases), so a swapped gate or a dropped
bias cannot pass. Inputs are uniform ±1; batch 2, time 6. Seeds: CRC32 of the case name.
Names are Keras's, reset per case (``keras.backend.clear_session()``).

Files, per case ``<name>``
--------------------------
``<name>/``
    The SavedModel folder as Keras and TensorFlow wrote it (``saved_model.pb``,
    ``fingerprint.pb``, ``variables/variables.index`` and ``.data-00000-of-00001``; the empty
    ``assets/`` folder is not kept).
``<name>.npz`` (plain arrays, ``allow_pickle=False``):

``x``
    The model's input, ``(batch, time, input)``, float32.
``y/{k}``
    The model's outputs for ``x``, in order (Keras's ``model(x)``).
``input/{path}``, ``output/{path}``
    The input and output of each recurrent layer (its Keras ``layer.path``, ``/`` kept in the
    key) for ``x``: Keras's own values, from ``keras.Model(model.inputs, [layer.input,
    layer.output])``. The output is ``(batch, time, units)`` (or ``2·units`` for a
    Bidirectional), or ``(batch, units)`` for ``return_sequences=False``.
``weights/{path}/{k}``
    ``layer.get_weights()[k]`` of each recurrent layer (a Bidirectional: forward kernel,
    recurrent kernel, bias, then the backward ones).
``meta``
    0-d unicode array holding a JSON object: ``case``, ``description``, ``container``
    (``export`` or ``saved_model``), ``versions`` (keras, tensorflow, numpy, the Keras
    backend), ``layers`` (one
    per layer with weights, in the model's order: ``path``, ``class``, ``inner`` for a
    Bidirectional, ``config``: the recurrent settings of its ``get_config()``
    (``units``, ``activation``, ``recurrent_activation``, ``use_bias``, ``reset_after``,
    ``go_backwards``, ``return_sequences``, ``unroll``, ``merge_mode``) and ``variables``:
    the Keras paths of its variables), ``recurrent`` (the paths of the recurrent layers),
    ``stacks`` (the recurrent layers that chain, each taking the previous one's whole output,
    in call order) and ``tolerance``.

``MANIFEST.json`` lists every case with its description, its files and their SHA-256.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.pop("TF_USE_LEGACY_KERAS", None)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ["KERAS_BACKEND"] = "tensorflow"

import golden_manifest
import numpy as np
from make_golden import REPO_ROOT, write_npz

DEFAULT_OUT = REPO_ROOT / "tests" / "golden" / "keras3"
BATCH, TIME, BOUND, TOLERANCE = 2, 6, 0.6, 1e-5
RECURRENT = ("LSTM", "GRU", "SimpleRNN", "Bidirectional")
CONFIG_KEYS = ("units", "activation", "recurrent_activation", "use_bias", "reset_after",
               "go_backwards", "return_sequences", "unroll", "merge_mode")


# -- the models (keras is passed in: it is imported only when a case is made) -------------

def _lstm(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([keras.Input((None, 4)),
                              layers.LSTM(5, return_sequences=True, name="encoder")])
    return model, [["sequential/encoder"]]


def _branches(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    inputs = keras.Input((None, 3))
    outputs = [layers.GRU(4, return_sequences=True, name="gru")(inputs),
               layers.GRU(3, reset_after=False, return_sequences=True,
                          name="gru_reset_before")(inputs),
               layers.SimpleRNN(4, name="simple")(inputs)]
    return keras.Model(inputs, outputs), [["gru"], ["gru_reset_before"], ["simple"]]


def _stack_lstm_gru(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([keras.Input((None, 3)), layers.LSTM(5, return_sequences=True),
                              layers.GRU(3, return_sequences=True)])
    return model, [["sequential/lstm", "sequential/gru"]]


def _stack_bidirectional(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    inputs = keras.Input((None, 3))
    hidden = layers.Bidirectional(layers.GRU(3, return_sequences=True), name="lower")(inputs)
    outputs = layers.Bidirectional(layers.LSTM(2, return_sequences=True), name="upper")(hidden)
    return keras.Model(inputs, outputs, name="tagger"), [["lower", "upper"]]


def _conv_lstm_dense(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    inputs = keras.Input((None, 3))
    hidden = layers.Conv1D(4, 3, padding="same", name="features")(inputs)
    hidden = layers.LSTM(5, return_sequences=True, name="encoder")(hidden)
    outputs = layers.Dense(2, name="head")(hidden)
    return keras.Model(inputs, outputs), [["encoder"]]


def _activations(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([
        keras.Input((None, 3)),
        layers.LSTM(4, activation="relu", recurrent_activation="hard_sigmoid",
                    return_sequences=True, name="relu_lstm"),
        layers.GRU(3, activation="softsign", use_bias=False, reset_after=False,
                   return_sequences=True, name="softsign_gru"),
        layers.SimpleRNN(2, activation="relu", return_sequences=True, name="relu_rnn")])
    return model, [["sequential/relu_lstm", "sequential/softsign_gru", "sequential/relu_rnn"]]


def _cudnn(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([keras.Input((None, 3)), layers.LSTM(4, return_sequences=True),
                              layers.Bidirectional(layers.GRU(3, return_sequences=True))])
    return model, [["sequential/lstm", "sequential/bidirectional"]]


def _saved_model(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([keras.Input((None, 3)), layers.GRU(4, return_sequences=True),
                              layers.Dense(2)])
    return model, [["sequential/gru"]]


def _refused(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    inputs = keras.Input((TIME, 3))
    outputs = [
        layers.LSTM(2, go_backwards=True, return_sequences=True, name="backwards")(inputs),
        layers.Bidirectional(layers.GRU(2, return_sequences=True), merge_mode="sum",
                             name="summed")(inputs),
        layers.LSTM(2, activation="gelu", return_sequences=True, name="gelu")(inputs),
        layers.SimpleRNN(2, activation="sigmoid", return_sequences=True, name="sigmoid")(inputs),
        layers.LSTM(2, unroll=True, return_sequences=True, name="unrolled")(inputs),
        layers.LSTM(2, return_sequences=True, name="masked")(layers.Masking(0.0)(inputs)),
    ]
    return keras.Model(inputs, outputs, name="branches"), [
        ["backwards"], ["summed"], ["gelu"], ["sigmoid"], ["unrolled"], ["masked"]]


def _lookalikes(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    inputs = keras.Input((TIME, 3))
    flipped = layers.Lambda(lambda t: keras.ops.flip(t, axis=1), name="flip")(inputs)
    outputs = [
        layers.SimpleRNN(2, activation="relu6", return_sequences=True, name="relu6_rnn")(inputs),
        layers.LSTM(2, recurrent_activation="relu6", return_sequences=True,
                    name="relu6_gates")(inputs),
        layers.SimpleRNN(2, activation=lambda t: keras.activations.relu(t, max_value=4.0),
                         return_sequences=True, name="capped")(inputs),
        layers.LSTM(2, activation="silu", return_sequences=True, name="silu")(inputs),
        layers.LSTM(2, go_backwards=True, return_sequences=True, name="unflipped")(flipped),
        layers.LSTM(2, dtype="mixed_float16", return_sequences=True, name="mixed")(inputs),
        layers.GRU(2, dtype="mixed_bfloat16", return_sequences=True, name="mixed_bf16")(inputs),
        layers.LSTM(2, dtype="float16", return_sequences=True, name="half")(inputs),
    ]
    return keras.Model(inputs, outputs, name="lookalikes"), [
        [name] for name in ("relu6_rnn", "relu6_gates", "capped", "silu", "unflipped", "mixed",
                            "mixed_bf16", "half")]


def _no_recurrent(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([keras.Input((None, 3)), layers.Conv1D(2, 2), layers.Dense(2)])
    return model, []


def _stacked_cells(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    inputs = keras.Input((TIME, 3))
    outputs = layers.RNN([layers.SimpleRNNCell(2), layers.SimpleRNNCell(2)],
                         return_sequences=True, name="cells")(inputs)
    return keras.Model(inputs, outputs, name="more"), [["cells"]]


def _jax(keras: Any) -> tuple[Any, list[list[str]]]:
    layers = keras.layers
    model = keras.Sequential([keras.Input((None, 3)), layers.LSTM(2, return_sequences=True)])
    return model, []


Builder = Callable[[Any], tuple[Any, list[list[str]]]]
CASES: dict[str, tuple[Builder, str, str]] = {
    "keras3_lstm": (_lstm, "export", "Sequential([Input((None, 4)), LSTM(5, "
                    "return_sequences=True, name='encoder')]).export(dir)."),
    "keras3_branches": (_branches, "export", "Functional, three recurrent layers on one Input: "
                        "GRU(4, name='gru') (reset_after=True, bias (2, 12)), GRU(3, "
                        "reset_after=False, name='gru_reset_before') (bias (9,)), SimpleRNN(4, "
                        "name='simple') (tanh, return_sequences=False: the last step); "
                        "three networks, exported."),
    "keras3_stack_lstm_gru": (_stack_lstm_gru, "export", "Sequential LSTM(5) then GRU(3), "
                              "return_sequences=True, exported: one stack."),
    "keras3_stack_bidirectional": (_stack_bidirectional, "export", "Functional 'tagger': "
                                   "Bidirectional(GRU(3), name='lower') then "
                                   "Bidirectional(LSTM(2), name='upper'), exported."),
    "keras3_conv_lstm_dense": (_conv_lstm_dense, "export", "Functional: Conv1D(4, 3, "
                               "padding='same', name='features') -> LSTM(5, name='encoder') -> "
                               "Dense(2, name='head'), exported; the LSTM's input is the "
                               "Conv1D's output."),
    "keras3_activations": (_activations, "export", "Sequential LSTM(4, activation='relu', "
                           "recurrent_activation='hard_sigmoid') -> GRU(3, "
                           "activation='softsign', use_bias=False, reset_after=False) -> "
                           "SimpleRNN(2, activation='relu'), exported: what no variable "
                           "records."),
    "keras3_cudnn": (_cudnn, "export", "Sequential LSTM(4) -> Bidirectional(GRU(3)), exported "
                     "as on a GPU machine: CudnnRNNV3 ops instead of loops; outputs from Keras "
                     "on the CPU."),
    "keras3_saved_model": (_saved_model, "saved_model", "Sequential GRU(4) -> Dense(2) saved "
                           "with tf.saved_model.save(model, dir) (Keras 3 objects under "
                           "_layers/…)."),
    "keras3_refused": (_refused, "export", "Functional 'branches', six recurrent layers on one "
                       "Input((6, 3)): LSTM go_backwards=True; Bidirectional(GRU) "
                       "merge_mode='sum'; LSTM activation='gelu'; SimpleRNN "
                       "activation='sigmoid'; LSTM unroll=True; Masking(0.0) -> LSTM."),
    "keras3_lookalikes": (_lookalikes, "export", "Functional 'lookalikes', recurrent layers on "
                          "one Input((6, 3)) computing what rnnport does not, though it agrees "
                          "with what rnnport does near 0, or in other precision: SimpleRNN "
                          "activation='relu6'; LSTM recurrent_activation='relu6'; SimpleRNN "
                          "activation relu(max_value=4) (a lambda, name='capped'); LSTM "
                          "activation='silu'; Lambda(ops.flip) -> LSTM go_backwards=True "
                          "(name='unflipped'), which the flip cancels: readable; LSTM "
                          "dtype='mixed_float16'; GRU dtype='mixed_bfloat16'; LSTM "
                          "dtype='float16' (float16 variables)."),
    "keras3_stacked_cells": (_stacked_cells, "export", "Functional 'more' on Input((6, 3)): "
                             "RNN([SimpleRNNCell(2), SimpleRNNCell(2)], name='cells'): one loop "
                             "stepping two cells (StackedRNNCells)."),
    "keras3_jax": (_jax, "export", "Sequential LSTM(2), exported from Keras 3's JAX backend "
                   "(KERAS_BACKEND=jax, in a process of its own): the serving function is one "
                   "XlaCallModule op holding StableHLO, and the variables have no paths."),
    "keras3_no_recurrent": (_no_recurrent, "export", "Sequential Conv1D(2, 2) -> Dense(2), "
                            "exported: no recurrent layer, for the refusal to say what it "
                            "holds."),
}
JAX_CASES = frozenset({"keras3_jax"})


# -- making a case -------------------------------------------------------------------------

def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _layer_entry(layer: Any) -> dict[str, Any]:
    config = layer.get_config()
    inner = getattr(layer, "forward_layer", None)
    if inner is not None:
        merged = {**inner.get_config(), "merge_mode": config.get("merge_mode")}
    else:
        merged = config
    entry = {"path": layer.path, "class": type(layer).__name__,
             "config": _jsonable({key: merged[key] for key in CONFIG_KEYS if key in merged}),
             "variables": [variable.path for variable in layer.weights]}
    if inner is not None:
        entry["inner"] = type(inner).__name__
    return entry


def _randomize(model: Any, rng: np.random.Generator) -> None:
    used: set[float] = set()
    for layer in model.layers:
        values = layer.get_weights()
        if values:
            layer.set_weights([_distinct(rng, v, used) for v in values])


def _distinct(rng: np.random.Generator, like: np.ndarray, used: set[float]) -> np.ndarray:
    """Uniform values of ``like``'s shape and dtype, none repeated in the case (float16
    values from a few thousand: drawn again where the rounding repeats one)."""
    while True:
        values = rng.uniform(-BOUND, BOUND, like.shape).astype(like.dtype)
        if like.dtype == np.float32:  # as before: the cases made so far keep their values
            return values
        flat = {float(v) for v in values.ravel()}
        if len(flat) == values.size and not flat & used and 0.0 not in flat:
            used |= flat
            return values


def _save(tf: Any, keras: Any, model: Any, container: str, folder: Path, gpu: bool) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
    original = rnn._is_gpu_available
    if gpu:
        rnn._is_gpu_available = lambda: True
    try:
        if container == "export":
            model.export(str(folder), verbose=False)
        else:
            tf.saved_model.save(model, str(folder))
    finally:
        rnn._is_gpu_available = original
    assets = folder / "assets"
    if assets.is_dir() and not any(assets.iterdir()):
        assets.rmdir()
    if gpu and "CudnnRNNV3" not in (folder / "saved_model.pb").read_bytes().decode("latin-1"):
        raise SystemExit(f"{folder.name}: no CudnnRNNV3 op in the export; Keras did not take "
                         "its GPU path")


def make_case(name: str, out: Path) -> dict[str, Any]:
    if name in JAX_CASES and os.environ.get("KERAS_BACKEND") != "jax":
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--jax-case", name,
                               str(out)], check=True, capture_output=True, text=True)
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))
    import keras
    import tensorflow as tf

    if keras.__version__.split(".")[0] != "3":
        raise SystemExit(f"Keras {keras.__version__} loaded; Keras 3 is needed (is "
                         "TF_USE_LEGACY_KERAS set?)")
    builder, container, description = CASES[name]
    keras.backend.clear_session()
    seed = zlib.crc32(name.encode())
    keras.utils.set_random_seed(seed & 0x7FFFFFFF)
    rng = np.random.default_rng(seed)
    model, stacks = builder(keras)
    _randomize(model, rng)
    x = rng.uniform(-1, 1, (BATCH, TIME, model.inputs[0].shape[-1])).astype(np.float32)
    if name == "keras3_refused":
        x[1, -2:] = 0.0  # two masked steps for the Masking branch
    outputs = model(x)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    arrays: dict[str, np.ndarray] = {f"y/{k}": np.asarray(y) for k, y in enumerate(outputs)}
    arrays["x"] = x
    recurrent = [layer for layer in model.layers if type(layer).__name__ in RECURRENT]
    for layer in recurrent:
        # A masked layer's input is [inputs, mask] in Keras 3: the inputs are the first.
        taken = layer.input[0] if isinstance(layer.input, (list, tuple)) else layer.input
        arrays[f"input/{layer.path}"] = np.asarray(keras.Model(model.inputs, taken)(x))
        arrays[f"output/{layer.path}"] = np.asarray(keras.Model(model.inputs, layer.output)(x))
        for j, weight in enumerate(layer.get_weights()):
            arrays[f"weights/{layer.path}/{j}"] = weight
    folder = out / name
    _save(tf, keras, model, container, folder, gpu=name == "keras3_cudnn")
    meta = {"case": name, "description": description, "container": container,
            "versions": {"keras": keras.__version__, "tensorflow": tf.__version__,
                         "numpy": np.__version__, "backend": keras.backend.backend()},
            "layers": [_layer_entry(layer) for layer in model.layers if layer.weights],
            "recurrent": [layer.path for layer in recurrent], "stacks": stacks,
            "tolerance": TOLERANCE}
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    write_npz(out / f"{name}.npz", arrays)
    meta["files"] = [f"{name}.npz", *sorted(str(p.relative_to(out)) for p in folder.rglob("*")
                                            if p.is_file())]
    return meta


def _made(name: str, out: Path) -> golden_manifest.Made:
    meta = make_case(name, out)
    size = sum((out / file).stat().st_size for file in meta["files"])
    return ({"description": meta["description"], "container": meta["container"],
             "source": name, "stacks": meta["stacks"]}, meta["files"],
            f"{meta['container']}, {size:,} bytes", meta["versions"])


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    if arguments[:1] == ["--jax-case"]:  # the JAX backend's case, in a process of its own
        os.environ["KERAS_BACKEND"] = "jax"  # before Keras is imported (make_case imports it)
        print(json.dumps(make_case(arguments[1], Path(arguments[2]))))
        return 0
    return golden_manifest.main(argv, description=(__doc__ or "").splitlines()[0],
                                default_out=DEFAULT_OUT,
                                cases={name: text for name, (_, _, text) in CASES.items()},
                                generator="tools/golden_keras3.py", make=_made)


if __name__ == "__main__":
    sys.exit(main())
