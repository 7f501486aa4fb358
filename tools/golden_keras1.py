"""Generate golden Keras 1 HDF5 files: Keras 1.2's layout written with h5py, run by tf_keras
through its own legacy converter of Keras 1 weights.

    .venv/bin/python tools/golden_keras1.py [--out tests/golden/keras1] [--case NAME ...] [--list]

Run it with the test environment's Python (TensorFlow 2.21, ``tf_keras`` 2.21 and h5py
installed); ``rnnport`` is not imported. Keras 1 itself does not install beside TensorFlow 2,
so the files are written the way Keras 1.2.2's ``save_model`` / ``save_weights`` wrote them
(``keras/engine/topology.py`` ``save_weights_to_hdf5_group``, ``keras/models.py``
``save_model``), with h5py:

* whole-model files (``save_model``, from Keras 1.0.7): root attributes ``keras_version``
  (``b"1.2.2"``; ``b"1.1.2"`` in the ``gru`` case) and ``model_config`` (Keras 1's schema:
  ``output_dim``, ``inner_activation``, ``consume_less``, ``input_dim``, ``input_length``, a
  Sequential's config a bare list of layers, a Model's layers with ``inbound_nodes``
  ``[[["input_1", 0, 0]]]``), no ``backend`` (Keras 2 added it), and ``/model_weights``
  holding the layers as below (no ``training_config``: the model was not compiled);
* weights-only files (``save_weights``): the layers at the root, nothing else (no
  ``keras_version``: every Keras 1 file without one is a weights file);
* each layer a group listed in ``layer_names``, its ``weight_names`` the variables' names in
  ``trainable_weights`` order: the layer's name and the weight's, ``lstm_1_W_i`` (Theano) or
  ``lstm_1_W_i:0`` (TensorFlow). An LSTM holds ``W_i U_i b_i W_c U_c b_c W_f U_f b_f W_o U_o
  b_o`` (gates i c f o), a GRU ``W_z U_z b_z W_r U_r b_r W_h U_h b_h``, a SimpleRNN and any
  ``consume_less="gpu"`` layer fused ``W (I, G·H)``, ``U (H, G·H)``, ``b (G·H,)`` (gates
  i f c o, z r h). A Bidirectional layer holds its forward layer's weights then its backward
  layer's, named ``forward_lstm_1_W_i`` … ``backward_lstm_1_W_i`` ….

**The reference.** For each recurrent layer, tf_keras builds the equivalent Keras 2 layer
(``activation`` and ``recurrent_activation`` as Keras 1's ``activation`` and
``inner_activation``; a GRU with ``reset_after=False``; ``return_sequences=True``), hands the
file's arrays, in file order, to
``tf_keras.src.saving.legacy.hdf5_format.preprocess_weights_for_loading(layer, arrays,
original_keras_version="1", original_backend=...)`` (what ``load_weights`` does with a Keras 1
file), ``set_weights`` the result and runs the recurrent stack on ``x``. ``TF_USE_LEGACY_KERAS=1``
is set before TensorFlow is imported.

Weights: every array is random (uniform ±0.6) and every value in a case distinct, biases
included, so that a swapped gate or a dropped bias cannot pass. Inputs are uniform ±1,
batch 2. Seeds: CRC32 of the case name.

Files, per case ``<name>``
--------------------------
``<name>.h5``
    The Keras 1 file.
``<name>.npz`` (plain arrays, ``allow_pickle=False``): ``x`` the input ``(batch, time,
input)`` float32; ``y`` tf_keras's output of the recurrent stack for ``x``, every step
``(batch, time, D·H)``; ``meta`` a 0-d unicode JSON object: ``case``, ``description``,
``versions``, ``keras_version`` (on the file's root, or null), ``weights_only``,
``layers`` (the recurrent layers' names, in order), ``others`` (the other layers' names),
``tolerance``.

``MANIFEST.json`` lists every case with its description, its files and their SHA-256.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import golden_manifest
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "golden" / "keras1"
BATCH = 2
TOLERANCE = 1e-5
GATES = {"LSTM": "icfo", "GRU": "zrh", "SimpleRNN": ""}  # Keras 1's per-gate arrays, in order
FUSED = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1}

# A recurrent layer: class, output_dim, consume_less, inner_activation, activation, wrapped in
# a Bidirectional.
Layer = tuple[str, int, str, str, str, bool]

# name → (description, layers, input size, time steps, keras_version, backend, a Model (not a
# Sequential), weights only, units of a Dense layer after the stack (or 0))
CASES: dict[str, tuple[str, list[Layer], int, int, str | None, str, bool, bool, int]] = {
    "lstm": ("Sequential: LSTM(output_dim=8), consume_less='cpu', the hard_sigmoid default; "
             "TensorFlow names (lstm_1_W_i:0)", [("LSTM", 8, "cpu", "hard_sigmoid", "tanh", False)],
             4, 6, "1.2.2", "tensorflow", False, False, 0),
    "gru": ("Sequential: GRU(output_dim=9), consume_less='mem'; Theano names, keras_version "
            "1.1.2", [("GRU", 9, "mem", "hard_sigmoid", "tanh", False)],
            5, 6, "1.1.2", "theano", False, False, 0),
    "simplernn": ("Sequential: SimpleRNN(output_dim=10, activation='tanh') → Dense(3)",
                  [("SimpleRNN", 10, "cpu", "hard_sigmoid", "tanh", False)],
                  4, 5, "1.2.2", "tensorflow", False, False, 3),
    "bidirectional_lstm": ("Model: Input → Bidirectional(LSTM(output_dim=8, "
                           "inner_activation='sigmoid')) → Dense(2); Theano-style names "
                           "forward_lstm_1_W_i …", [("LSTM", 8, "cpu", "sigmoid", "tanh", True)],
                           4, 6, "1.2.2", "theano", True, False, 2),
    "gpu_stack": ("Sequential: LSTM(output_dim=8, consume_less='gpu') → GRU(output_dim=8, "
                  "consume_less='gpu'): fused W, U, b",
                  [("LSTM", 8, "gpu", "hard_sigmoid", "tanh", False),
                   ("GRU", 8, "gpu", "hard_sigmoid", "tanh", False)],
                  5, 5, "1.2.2", "tensorflow", False, False, 0),
    "weights_bidirectional_gru": ("save_weights: Bidirectional(GRU(output_dim=8)) → Dense(3), "
                                  "no config and no keras_version (hard_sigmoid gates, "
                                  "Keras 1's default)",
                                  [("GRU", 8, "cpu", "hard_sigmoid", "tanh", True)],
                                  4, 6, None, "tensorflow", False, True, 3),
}


def _names(layers: list[Layer], dense: int, functional: bool) -> list[str]:
    """Keras 1's layer names: the class in lower case, numbered from 1 per class."""
    counts: dict[str, int] = {}
    out = []
    classes = [("input" if functional else None)] + \
        [("bidirectional" if wrapped else cls.lower()) for cls, *_, wrapped in layers] + \
        (["dense"] if dense else [])
    for cls in classes:
        if cls is None:
            continue
        counts[cls] = counts.get(cls, 0) + 1
        out.append(f"{cls}_{counts[cls]}")
    return out


def _direction(rng: np.random.Generator, used: set[float], layer: Layer, inputs: int,
               prefix: str, suffix: str) -> list[tuple[str, np.ndarray]]:
    cls, units, consume_less, *_ = layer
    if consume_less == "gpu" or cls == "SimpleRNN":
        columns = FUSED[cls] * units
        return [(f"{prefix}_{name}{suffix}", golden_manifest.distinct_uniform(rng, shape, used))
                for name, shape in (("W", (inputs, columns)), ("U", (units, columns)),
                                    ("b", (columns,)))]
    out = []
    for gate in GATES[cls]:
        for name, shape in (("W", (inputs, units)), ("U", (units, units)), ("b", (units,))):
            out.append((f"{prefix}_{name}_{gate}{suffix}",
                        golden_manifest.distinct_uniform(rng, shape, used)))
    return out


def _layer_config(layer: Layer, name: str, input_shape: list[Any] | None,
                  input_dim: int | None) -> dict[str, Any]:
    """Keras 1.2.2's ``get_config``: ``input_dim`` is set once the layer is built, so a
    wrapped layer (never built itself) has none."""
    cls, units, consume_less, inner_activation, activation, _ = layer
    config: dict[str, Any] = {"name": name, "trainable": True}
    if input_shape is not None:
        config.update(batch_input_shape=input_shape, input_dtype="float32")
    config.update(return_sequences=True, go_backwards=False, stateful=False, unroll=False,
                  consume_less=consume_less, input_dim=input_dim, input_length=None,
                  output_dim=units,
                  init="glorot_uniform",
                  inner_init="orthogonal", activation=activation, W_regularizer=None,
                  U_regularizer=None, b_regularizer=None, dropout_W=0.0, dropout_U=0.0)
    if cls != "SimpleRNN":
        config["inner_activation"] = inner_activation
    if cls == "LSTM":
        config["forget_bias_init"] = "one"
    return {"class_name": cls, "config": config}


def _keras2_layer(keras: Any, layer: Layer) -> Any:
    cls, units, _, inner_activation, activation, wrapped = layer
    if cls == "SimpleRNN":
        made = keras.layers.SimpleRNN(units, activation=activation, return_sequences=True)
    elif cls == "GRU":
        made = keras.layers.GRU(units, activation=activation, reset_after=False,
                                recurrent_activation=inner_activation, return_sequences=True)
    else:
        made = keras.layers.LSTM(units, activation=activation,
                                 recurrent_activation=inner_activation, return_sequences=True)
    return keras.layers.Bidirectional(made) if wrapped else made


def make(name: str, out: Path) -> golden_manifest.Made:
    import h5py
    import tensorflow as tf
    import tf_keras as keras
    from tf_keras.src.saving.legacy.hdf5_format import preprocess_weights_for_loading

    (description, layers, inputs, steps, version, backend, functional, weights_only,
     dense) = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    used: set[float] = set()
    suffix = ":0" if backend == "tensorflow" else ""
    names = _names(layers, dense, functional)
    recurrent_names = [n for n in names if not n.startswith(("input", "dense"))]
    x = rng.uniform(-1, 1, size=(BATCH, steps, inputs)).astype(np.float32)

    keras.backend.clear_session()
    stack_input = keras.Input((steps, inputs))
    outputs = stack_input
    stored: dict[str, list[tuple[str, np.ndarray]]] = {}
    entries: list[dict[str, Any]] = []
    size = inputs
    wrapped_count: dict[str, int] = {}  # a wrapped layer is numbered among its own class
    for layer, layer_name in zip(layers, recurrent_names, strict=True):
        wrapped = layer[5]
        inner_name = layer_name
        if wrapped:
            wrapped_count[layer[0]] = wrapped_count.get(layer[0], 0) + 1
            inner_name = f"{layer[0].lower()}_{wrapped_count[layer[0]]}"
        prefixes = [f"forward_{inner_name}", f"backward_{inner_name}"] if wrapped else [inner_name]
        arrays = [item for prefix in prefixes
                  for item in _direction(rng, used, layer, size, prefix, suffix)]
        stored[layer_name] = arrays
        built = _keras2_layer(keras, layer)
        outputs = built(outputs)
        built.set_weights(preprocess_weights_for_loading(
            built, [array for _, array in arrays], original_keras_version="1",
            original_backend=backend))
        input_shape = [None, steps, inputs] if not entries and not functional else None
        entry = _layer_config(layer, inner_name, None if wrapped else input_shape,
                              None if wrapped else size)
        if wrapped:
            entry = {"class_name": "Bidirectional", "config": {
                "name": layer_name, "trainable": True, "layer": entry, "merge_mode": "concat"}}
            if input_shape is not None:
                entry["config"].update(batch_input_shape=input_shape, input_dtype="float32")
        entries.append(entry)
        size = layer[1] * (2 if wrapped else 1)
    y = keras.Model(stack_input, outputs).predict(x, verbose=0)
    if dense:
        stored[names[-1]] = [(f"{names[-1]}_{key}{suffix}",
                              golden_manifest.distinct_uniform(rng, shape, used))
                             for key, shape in (("W", (size, dense)), ("b", (dense,)))]
        entries.append({"class_name": "Dense", "config": {
            "name": names[-1], "trainable": True, "output_dim": dense, "init": "glorot_uniform",
            "activation": "linear", "W_regularizer": None, "b_regularizer": None, "bias": True,
            "input_dim": size}})
    if functional:
        stored = {names[0]: [], **stored}
        entries.insert(0, {"class_name": "InputLayer", "config": {
            "batch_input_shape": [None, steps, inputs], "input_dtype": "float32",
            "sparse": False, "name": names[0]}})
        for index, entry in enumerate(entries):
            entry["name"] = names[index]
            entry["inbound_nodes"] = [[[names[index - 1], 0, 0]]] if index else []
        model_config = {"class_name": "Model", "config": {
            "name": "model_1", "layers": entries, "input_layers": [[names[0], 0, 0]],
            "output_layers": [[names[-1], 0, 0]]}}
    else:
        model_config = {"class_name": "Sequential", "config": entries}

    path = out / f"{name}.h5"
    with h5py.File(path, "w") as h5:
        if weights_only:
            root = h5
        else:
            if version is not None:
                h5.attrs["keras_version"] = version.encode()
            h5.attrs["model_config"] = json.dumps(model_config).encode()
            root = h5.create_group("model_weights")
        root.attrs["layer_names"] = [layer_name.encode() for layer_name in stored]
        for layer_name, arrays in stored.items():
            group = root.create_group(layer_name)
            group.attrs["weight_names"] = [weight.encode() for weight, _ in arrays]
            for weight, array in arrays:
                group.create_dataset(weight, data=array, track_times=False)

    meta = {"case": name, "description": description,
            "versions": _versions(h5py, tf, keras), "keras_version": version,
            "weights_only": weights_only, "layers": recurrent_names,
            "others": [n for n in names if n not in recurrent_names], "tolerance": TOLERANCE}
    np.savez(out / f"{name}.npz", x=x, y=np.asarray(y, np.float32),
             meta=np.array(json.dumps(meta)))
    facts = {"description": description, "layers": recurrent_names}
    return (facts, [f"{name}.h5", f"{name}.npz"], f"{len(recurrent_names)} recurrent layer(s), "
            f"y {tuple(np.shape(y))}", meta["versions"])


def _versions(h5py: Any, tf: Any, keras: Any) -> dict[str, str]:
    return {"tensorflow": tf.__version__, "tf_keras": keras.__version__,
            "h5py": h5py.__version__, "numpy": np.__version__,
            "keras_layout": "1.2.2"}


def main(argv: list[str] | None = None) -> int:
    return golden_manifest.main(
        argv, description=__doc__.splitlines()[0], default_out=DEFAULT_OUT,
        cases={name: case[0] for name, case in CASES.items()},
        generator="tools/golden_keras1.py", make=make)


if __name__ == "__main__":
    sys.exit(main())
