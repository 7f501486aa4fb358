"""Keras (Keras 3, tf.keras 2.x) layers: layer objects and ``get_weights()`` lists.

One Keras layer direction holds, in ``get_weights()`` order::

    kernel            (I, G·H)    columns in gate blocks; x @ kernel
    recurrent_kernel  (H, G·H)
    bias              LSTM (4H,), SimpleRNN (H,), GRU reset_after=False (3H,),
                      GRU reset_after=True (2, 3H): row 0 input side, row 1 recurrent side;
                      absent when use_bias=False

Gate orders (columns): LSTM ``i f c o`` (= canonical ``i f g o``), GRU ``z r h``
(canonical ``r z n`` reversed in its first two blocks), SimpleRNN one block. The
matrices are the transposes of cuDNN's ``(G·H, in)``.

Nesting: one layer's list; a ``Bidirectional`` layer's list is the forward layer's
arrays then the backward layer's; a stack is a list of such lists. ``write`` gives the
same nesting: a flat list for a one-layer network, a list of per-layer lists otherwise.

Biases: Keras LSTM, SimpleRNN and reset-before GRU keep one bias. Reading puts it in the
recurrent-side slot (``bias_hh``) with zeros in ``bias_ih`` — where TensorFlow put it
when it handed a Keras LSTM to cuDNN; writing sums the two slots (exact in function,
and bit-exact when one slot is zero). A reset-after GRU keeps both.

What weights cannot tell comes as options with Keras's defaults: ``activation="tanh"``,
``recurrent_activation="sigmoid"`` (LSTM and GRU gates), ``reset_after=True`` (a GRU with
no bias). Layer objects are read through ``get_config()``/``get_weights()``; Keras itself
is never imported. Keras cannot hold a projection, peepholes or a cell clip.

Activations: an LSTM's ``recurrent_activation`` drives its gates and ``activation`` both
its candidate and its output (rnnport's activations f, g, h = recurrent, activation,
activation); a GRU's, its gates and its candidate. rnnport computes Keras's ``sigmoid``,
``tanh``, ``relu``, ``linear``, ``softsign``, ``softplus``, ``elu`` and ``hard_sigmoid``, which
is two functions: Keras 2 and tf.keras compute ``clip(0.2·x + 0.5, 0, 1)``, Keras 3
``relu6(x + 3) / 6``. Which one a layer used comes from the file's ``keras_version`` (or, for a
layer object, from calling its function); for bare arrays ``keras_version=`` says it. Keras
before 2.3 (and tf.keras in TensorFlow 1.x) defaulted ``recurrent_activation`` to
``hard_sigmoid``. A SimpleRNN's activation is its cell: ``tanh`` or ``relu``.

Legacy ``CuDNNLSTM`` / ``CuDNNGRU`` (tf.keras 1.x/2.x, ``tf.compat.v1.keras.layers``) keep
``kernel (I, G·H)``, ``recurrent_kernel (H, G·H)`` and one ``bias (2·G·H,)`` = input-side
then recurrent-side, gate blocks in Keras order (``i f c o`` / ``z r h``; a CuDNNGRU is a
reset-after GRU). Each gate's ``(I, H)`` column block is cuDNN's ``(H, I)`` matrix stored
row-major and read back as ``(I, H)`` *without transposing*: ``W_g = block.reshape(H, I)``
(for the square recurrent blocks, ``R_g = block`` itself, where a plain LSTM stores
``R_g.T``). Source: tf_keras 2.21 ``layers/rnn/cudnn_lstm.py`` / ``cudnn_gru.py``
``_process_batch``, which pass ``kernel[:, block]`` to ``gru_lstm_utils.canonical_to_params``
(``tf.reshape(w, (-1,))``, no transpose) and on to ``CudnnRNNV3``; and
``saving/legacy/hdf5_format.py`` ``_convert_rnn_weights``, which turns a CuDNN block into a
plain one with ``kernel.T.reshape(kernel.shape, order="F")`` (the same rule) and sums the
two LSTM biases.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...activations import Activation
from ...errors import FormatError, ShapeError, UnsupportedFeatureError
from ...gates import CANONICAL, gate_family, reorder, transposed
from ...model import RNN, Model, as_float_array, stack
from ...spec import Spec
from .._common import combine_biases, describe, to_numpy

__all__ = [
    "KERAS_ACTIVATIONS",
    "LAYER_CELLS",
    "PASSIVE_LAYERS",
    "WRAPPERS",
    "bidirectional_options",
    "check_version_option",
    "default_gates",
    "holds_activations",
    "is_cudnn_weights",
    "keras_major",
    "keras_names",
    "keras_version",
    "layer_options",
    "leaves",
    "read",
    "read_configured",
    "read_cudnn_weights",
    "read_weights",
    "sniff",
    "stack_layers",
    "write",
]

ORDERS = {"lstm": "ifgo", "gru": "zrn", "rnn": "h"}
LAYER_CELLS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "rnn"}
CUDNN_CELLS = {"CuDNNLSTM": "lstm", "CuDNNGRU": "gru"}
RNN_LAYERS = {**LAYER_CELLS, **CUDNN_CELLS}
WRAPPERS = {"Bidirectional"}
PASSIVE_LAYERS = {"InputLayer", "Masking", "Dropout", "SpatialDropout1D", "GaussianNoise",
                  "GaussianDropout", "AlphaDropout", "ActivityRegularization"}
MODEL_CLASSES = {"Sequential", "Functional", "Model"}
GATE_COUNT_CELLS = {4: "lstm", 3: "gru", 1: "rnn"}

# Keras's activation functions that rnnport computes, as ONNX functions (name, alpha, beta).
KERAS_ACTIVATIONS: dict[str, Activation] = {
    "sigmoid": ("Sigmoid", 0.0, 0.0), "tanh": ("Tanh", 0.0, 0.0), "relu": ("Relu", 0.0, 0.0),
    "linear": ("Affine", 1.0, 0.0), "softsign": ("Softsign", 0.0, 0.0),
    "softplus": ("Softplus", 0.0, 0.0), "elu": ("Elu", 1.0, 0.0)}
# hard_sigmoid by Keras major version: clip(0.2·x + 0.5, 0, 1); relu6(x + 3) / 6.
HARD_SIGMOID: dict[int, Activation] = {2: ("HardSigmoid", 0.2, 0.5),
                                       3: ("HardSigmoid", 1 / 6, 0.5)}


def keras_version(version: Any) -> tuple[int, int, bool] | None:
    """``(major, minor, tf.keras)`` of a ``keras_version`` (``"2.2.4-tf"``, ``"3.4.1"``, ``3``,
    ``b"2.1.6"``); None when it is none."""
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    text = "" if version is None else str(version).strip()
    match = re.match(r"(\d{1,4})(?:\.(\d{1,4}))?", text)
    return None if match is None else (int(match[1]), int(match[2] or 0), "tf" in text)


def keras_major(version: Any) -> int | None:
    """2 or 3 from a ``keras_version`` (2 for Keras 1, whose hard_sigmoid is Keras 2's);
    None if unknown."""
    parsed = keras_version(version)
    if parsed is not None and parsed[0] == 1:
        return 2
    return parsed[0] if parsed is not None and parsed[0] in (2, 3) else None


def check_version_option(options: Mapping[str, Any], location: str) -> None:
    """Refuse a ``keras_version=`` that names no version."""
    given = options.get("keras_version")
    if given is not None and keras_version(given) is None:
        raise FormatError(f"{location}: keras_version={given!r}; expected a Keras version such "
                          "as '2.2.4', '2.2.4-tf' or 3.")


def default_gates(arrays: Sequence[Any], options: Mapping[str, Any],
                  location: str) -> dict[str, Any]:
    """The options for the gate activation one direction's arrays do not record: the default
    of the Keras that ``keras_version`` names, ``hard_sigmoid`` before Keras 2.3 (none for a
    simple RNN, a CuDNN layer, a newer Keras, or when ``recurrent_activation`` is given)."""
    shape = tuple(np.shape(arrays[1])) if len(arrays) > 1 else ()
    gates = shape[1] // shape[0] if len(shape) == 2 and shape[0] else 0
    parsed = keras_version(options.get("keras_version"))
    if "recurrent_activation" in options or gates not in (3, 4) or \
            is_cudnn_weights(arrays) or parsed is None or parsed[:2] >= (2, 3):
        return {}
    version = options["keras_version"]
    if parsed[2]:
        raise FormatError(
            f"{location}: weights alone from tf.keras {version} (TensorFlow 1.x to 2.1), whose "
            "LSTM and GRU gates defaulted to hard_sigmoid in TensorFlow 1.x and to sigmoid from "
            "2.0 on, and nothing says which. Pass recurrent_activation='hard_sigmoid' or "
            "'sigmoid' (what the model was built with).")
    return {"recurrent_activation": "hard_sigmoid", "keras_version": "2"}


def _same(first: Activation, second: Activation) -> bool:
    """Equal as stored in float32 (an ONNX file keeps alpha and beta so)."""
    return first[0] == second[0] and all(np.float32(a) == np.float32(b)
                                         for a, b in zip(first[1:], second[1:], strict=True))


def keras_names(activation: Activation) -> dict[int | None, str]:
    """What each Keras calls ``activation``: ``{None: name}`` when every Keras does,
    ``{2: "hard_sigmoid"}`` for a function only one has; empty when none does."""
    for name, function in KERAS_ACTIVATIONS.items():
        if _same(activation, function):
            return {None: name}
    return {major: "hard_sigmoid" for major, function in HARD_SIGMOID.items()
            if _same(activation, function)}


def _keras_activation(name: Any, options: Mapping[str, Any], option: str,
                      location: str) -> Activation:
    """The ONNX function for Keras activation ``name`` (the value of option ``option``)."""
    name = _activation_name(name)
    if name in KERAS_ACTIVATIONS:
        return KERAS_ACTIVATIONS[name]
    if name == "hard_sigmoid":
        major = keras_major(options.get("keras_version"))
        if major is None:
            raise FormatError(
                f"{location}: {option}='hard_sigmoid' is clip(0.2·x + 0.5, 0, 1) in Keras 2 and "
                "tf.keras but relu6(x + 3) / 6 in Keras 3, and nothing says which Keras this "
                "came from; pass keras_version= (e.g. '2.2.4' or 3).")
        return HARD_SIGMOID[major]
    raise UnsupportedFeatureError(
        f"{location}: {option}={name!r}; rnnport computes the Keras activations "
        f"{', '.join([*KERAS_ACTIVATIONS, 'hard_sigmoid'])} in LSTM and GRU layers. Rebuild "
        "the layer with one of them, or convert with the framework itself.")


def holds_activations(spec: Spec) -> bool:
    """Whether one Keras layer computes ``spec``'s activations: each has a Keras name, an
    LSTM's candidate and output share one, and no Keras 2 hard_sigmoid meets a Keras 3 one."""
    names = [keras_names(activation) for activation in spec.activations]
    if not all(names):
        return False
    if len({major for found in names for major in found if major is not None}) > 1:
        return False
    return spec.cell != "lstm" or _same(spec.activations[1], spec.activations[2])


def _class_name(value: Any) -> str:
    return type(value).__name__


def _is_layer(value: Any) -> bool:
    return (hasattr(value, "get_weights") and hasattr(value, "get_config")
            and _class_name(value) in {*RNN_LAYERS, *WRAPPERS})


def _is_model(value: Any) -> bool:
    return _class_name(value) in MODEL_CLASSES and hasattr(value, "layers") and \
        type(value).__module__.startswith(("keras", "tf_keras", "tensorflow"))


def _is_array(value: Any) -> bool:
    return isinstance(value, np.ndarray) or (
        hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, (list, tuple)))


def sniff(source: Any) -> bool:
    """Whether ``source`` is a Keras layer or model, or a (nested) list of layers or arrays."""
    if _is_layer(source) or _is_model(source):
        return True
    if isinstance(source, (list, tuple)) and source:
        return all(_is_array(item) or _is_layer(item) or isinstance(item, (list, tuple))
                   for item in source)
    return False


# -- read ------------------------------------------------------------------------------


def read(source: Any, **options: Any) -> Model:
    """Layer objects, a model, or ``get_weights()`` lists (see the module docstring)."""
    check_version_option(options, "read(fmt='keras')")
    if "layer" in options:
        raise FormatError(
            "read(fmt='keras'): option layer= picks layers inside a Keras model file (.keras, "
            f".h5, .weights.h5); got {describe(source)}. Pass the layer objects (or their "
            "get_weights() lists) you want instead.")
    if _is_model(source):
        return _read_model(source, options)
    if _is_layer(source):
        return _read_layer(source, options, "keras layer")
    if isinstance(source, (list, tuple)) and source:
        if all(_is_array(item) for item in source):
            return read_weights(list(source), options, "keras weights")
        if all(isinstance(item, (list, tuple)) or _is_layer(item) for item in source):
            parts = []
            for index, item in enumerate(source):
                location = f"keras stack, layer {index}"
                if _is_layer(item):
                    parts.append(_read_layer(item, options, location))
                elif item and all(_is_array(a) for a in item):
                    parts.append(read_weights(list(item), options, location))
                else:
                    raise FormatError(f"{location}: expected a Keras layer or its get_weights() "
                                      f"list of arrays, got {describe(item)}.")
            return stack_layers(parts)
    raise FormatError(
        f"read(fmt='keras'): expected a Keras LSTM/GRU/SimpleRNN/Bidirectional layer, a list of "
        f"them, a get_weights() list of arrays, or a list of such lists; got {describe(source)}.")


def stack_layers(parts: list[Model]) -> Model:
    try:
        return stack(parts)
    except ShapeError as error:
        raise ShapeError(error.problems, hint="In a Keras stack each layer takes the previous "
                         "layer's output (units, or 2·units after Bidirectional).") from None


def _read_model(model: Any, options: dict[str, Any]) -> Model:
    layers = list(model.layers)
    recurrent = [layer for layer in layers if _is_layer(layer)]
    others = [layer for layer in layers
              if not _is_layer(layer) and _class_name(layer) not in PASSIVE_LAYERS]
    name = getattr(model, "name", _class_name(model))
    if not recurrent:
        raise FormatError(f"keras model {name!r}: no LSTM/GRU/SimpleRNN/Bidirectional layer found.")
    if others:
        listing = ", ".join(f"{getattr(x, 'name', '?')} ({_class_name(x)})" for x in others)
        raise UnsupportedFeatureError(
            f"keras model {name!r}: holds layers rnnport does not convert ({listing}); reading "
            "the model whole would leave them out. Pass the recurrent layers themselves, e.g. "
            f"rnnport.read([model.get_layer({getattr(recurrent[0], 'name', 'lstm')!r}), ...]).")
    return stack_layers([_read_layer(layer, options, f"keras model {name!r}, layer "
                                               f"{getattr(layer, 'name', '?')!r}")
                   for layer in recurrent])


def _activation_name(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        config = value.get("config")
        if isinstance(config, Mapping) and "name" in config:
            return str(config["name"])
        return str(value.get("class_name"))
    return getattr(value, "__name__", str(value))


def layer_options(cls: str, config: Mapping[str, Any], location: str,
                  *, backward: bool, keras_version: Any = None) -> dict[str, Any]:
    """Check a Keras RNN layer's config (class ``cls``) for what changes the numbers; return
    read options. ``keras_version`` says which Keras wrote it (for ``hard_sigmoid``)."""
    activation = _activation_name(config.get("activation", "tanh"))
    recurrent_activation = _activation_name(config.get("recurrent_activation", "sigmoid"))
    if cls == "SimpleRNN":
        if activation not in ("tanh", "relu"):
            raise UnsupportedFeatureError(
                f"{location}: SimpleRNN activation {activation!r}; rnnport computes 'tanh' and "
                "'relu' for a simple RNN (the activations cuDNN, PyTorch and ONNX share).")
    elif cls in CUDNN_CELLS:
        pass  # CuDNN layers have fixed activations
    else:
        known = {"keras_version": keras_version}
        for option, name in (("activation", activation),
                             ("recurrent_activation", recurrent_activation)):
            _keras_activation(name, known, option, location)
    if bool(config.get("go_backwards", False)) != backward:
        raise UnsupportedFeatureError(
            f"{location}: go_backwards={config.get('go_backwards')!r} outside a Bidirectional "
            "layer returns the sequence reversed, which no other format does. Reverse the time "
            "axis of x yourself and read the layer with go_backwards=False.")
    options: dict[str, Any] = {}
    if cls == "SimpleRNN":
        options["activation"] = activation
    if cls in LAYER_CELLS and cls != "SimpleRNN":
        options.update(activation=activation, recurrent_activation=recurrent_activation)
        if "hard_sigmoid" in (activation, recurrent_activation):
            options["keras_version"] = keras_version
    if cls == "GRU":
        options["reset_after"] = bool(config.get("reset_after", True))
    if cls == "CuDNNGRU":
        options["reset_after"] = True
    return options


def _probed_version(layer: Any, options: Mapping[str, Any]) -> Any:
    """Which Keras ``layer`` belongs to, as far as ``hard_sigmoid`` matters: the option, or
    the module of its hard_sigmoid (Keras 3 keeps it in ``keras.src.activations.activations``,
    tf_keras and Keras 2 elsewhere), or what it computes at 1 (Keras 2: 0.7; Keras 3: 4/6)."""
    if options.get("keras_version") is not None:
        return options["keras_version"]
    for attribute in ("recurrent_activation", "activation"):
        function = getattr(layer, attribute, None)
        if not (callable(function) and getattr(function, "__name__", None) == "hard_sigmoid"):
            continue
        module = str(getattr(function, "__module__", ""))
        if module.startswith("keras.src.activations.activations"):
            return 3
        if module.startswith(("tf_keras.", "keras.", "tensorflow.")):
            return 2
        try:
            value = float(np.asarray(to_numpy(function([1.0]))).reshape(-1)[0])
        except Exception:  # a framework's function that takes only its own tensors
            return None
        return 2 if abs(value - 0.7) < 1e-4 else 3 if abs(value - 4 / 6) < 1e-4 else None
    return None


def _read_layer(layer: Any, options: dict[str, Any], location: str) -> Model:
    cls = _class_name(layer)
    location = f"{location} {getattr(layer, 'name', cls)!r} ({cls})"
    config = layer.get_config()
    if cls in WRAPPERS:
        forward_layer, backward_layer = layer.forward_layer, layer.backward_layer
        inner = _class_name(forward_layer)
        configured = bidirectional_options(
            config, (inner, forward_layer.get_config()),
            (_class_name(backward_layer), backward_layer.get_config()), location,
            keras_version=_probed_version(forward_layer, options))
        weights = [*forward_layer.get_weights(), *backward_layer.get_weights()]
    else:
        inner = cls
        configured = layer_options(cls, config, location, backward=False,
                                   keras_version=_probed_version(layer, options))
        weights = layer.get_weights()
    if not weights:
        raise FormatError(f"{location}: the layer has no weights yet; build it first (call it on "
                          "an input, or layer.build(input_shape)).")
    return read_configured(inner, weights, options, configured, location)


def bidirectional_options(config: Mapping[str, Any], forward: tuple[str, Mapping[str, Any]],
                          backward: tuple[str, Mapping[str, Any]], location: str, *,
                          keras_version: Any = None) -> dict[str, Any]:
    """Check a Bidirectional layer's config and its two layers' (class, config) pairs."""
    merge_mode = config.get("merge_mode", "concat")
    if merge_mode != "concat":
        raise UnsupportedFeatureError(
            f"{location}: merge_mode={merge_mode!r}; rnnport's bidirectional output "
            "concatenates forward and backward (merge_mode='concat', as cuDNN, PyTorch and "
            "ONNX do). To convert the weights anyway, read layer.get_weights() and combine "
            "the two halves of the output yourself.")
    forward_class, backward_class = forward[0], backward[0]
    forward_options = layer_options(forward_class, forward[1], f"{location}, forward",
                                    backward=False, keras_version=keras_version)
    backward_options = layer_options(backward_class, backward[1], f"{location}, backward",
                                     backward=True, keras_version=keras_version)
    if forward_options != backward_options or forward_class != backward_class:
        raise UnsupportedFeatureError(
            f"{location}: forward and backward layers differ ({forward_class} "
            f"{forward_options} vs {backward_class} {backward_options}); a "
            "bidirectional network in rnnport has one cell for both directions.")
    return forward_options


def read_configured(cls: str, weights: list[Any], options: Mapping[str, Any],
                    configured: Mapping[str, Any], location: str) -> RNN:
    """One Keras layer of class ``cls`` (the inner class of a Bidirectional) from its arrays
    (forward then backward) and the read options its config gave (:func:`layer_options`)."""
    for key, value in options.items():
        if key in configured and configured[key] != value:
            raise FormatError(f"{location}: option {key}={value!r} contradicts the layer's "
                              f"config ({key}={configured[key]!r}); drop the option.")
    merged = {**options, **configured}
    if cls in CUDNN_CELLS:
        return read_cudnn_weights(weights, CUDNN_CELLS[cls], merged, location)
    return read_weights(weights, merged, location)


def _halves(arrays: list[Any], location: str) -> list[list[Any]]:
    count = len(arrays)
    if count in (2, 3):
        return [arrays]
    if count in (4, 6):
        return [arrays[:count // 2], arrays[count // 2:]]
    raise FormatError(
        f"{location}: {count} arrays; expected 3 (kernel, recurrent_kernel, bias) or 2 "
        "without bias for one layer, or 6 / 4 for a Bidirectional layer (forward arrays "
        "then backward arrays). For a stack, pass a list of per-layer lists.")


def is_cudnn_weights(arrays: Sequence[Any]) -> bool:
    """Whether one direction's arrays have a CuDNNLSTM/CuDNNGRU bias ``(2·G·H,)``."""
    if len(arrays) != 3:
        return False
    shapes = [tuple(np.shape(a)) for a in arrays]
    return (len(shapes[1]) == 2 and len(shapes[2]) == 1 and shapes[1][0] > 0
            and shapes[2][0] == 2 * shapes[1][1] and shapes[1][1] // shapes[1][0] in (3, 4))


def read_cudnn_weights(arrays: list[Any], family: str, options: Mapping[str, Any],
                       location: str) -> RNN:
    """A CuDNNLSTM / CuDNNGRU layer (``family`` "lstm" or "gru") from its arrays."""
    halves = _halves([to_numpy(a) for a in arrays], location)
    names = ("forward", "backward")
    found = [_cudnn_direction(half, family, options,
                              f"{location}, {names[d]}" if len(halves) == 2 else location)
             for d, half in enumerate(halves)]
    spec = found[0][0]
    if len(found) == 2 and found[1][0] != spec:
        raise ShapeError(f"{location}: forward is {spec.describe(article=True)} but backward "
                         f"is {found[1][0].describe(article=True)}; expected the same shapes in "
                         "both directions.")
    spec = spec.replace(bidirectional=len(found) == 2)
    return RNN(spec, [[params for _, params in found]], copy=False)


def _cudnn_direction(arrays: list[np.ndarray], family: str, options: Mapping[str, Any],
                     location: str) -> tuple[Spec, dict[str, np.ndarray]]:
    names = ("kernel", "recurrent_kernel", "bias")
    arrays = [as_float_array(a, f"{location}, {names[i]}") for i, a in enumerate(arrays)]
    cls = {"lstm": "CuDNNLSTM", "gru": "CuDNNGRU"}[family]
    gates = len(ORDERS[family])
    if len(arrays) != 3:
        raise FormatError(f"{location}: {len(arrays)} arrays; a {cls} layer keeps 3 (kernel, "
                          "recurrent_kernel, bias) per direction.")
    kernel, recurrent, bias = arrays
    hidden = recurrent.shape[0] if recurrent.ndim == 2 else 0
    columns = gates * hidden
    problems = []
    if kernel.ndim != 2 or kernel.shape[1] != columns or not hidden:
        problems.append(f"kernel {kernel.shape}; expected (I, {columns or 'G·H'})")
    if recurrent.shape != (hidden, columns) or not hidden:
        problems.append(f"recurrent_kernel {recurrent.shape}; expected (H, {gates}·H)")
    if bias.shape != (2 * columns,):
        problems.append(f"bias {bias.shape}; expected ({2 * columns},) = input-side then "
                        "recurrent-side biases")
    if problems:
        raise ShapeError([f"{location}: {p}" for p in problems],
                         hint=f"A {cls} layer with H units keeps kernel (I, {gates}·H), "
                              f"recurrent_kernel (H, {gates}·H) and bias ({2 * gates}·H,).")
    for option, fixed in (("activation", "tanh"), ("recurrent_activation", "sigmoid")):
        if options.get(option, fixed) != fixed:
            raise UnsupportedFeatureError(f"{location}: {option}={options[option]!r}; a {cls} "
                                          f"computes {fixed}.")
    if not options.get("reset_after", True):
        raise FormatError(f"{location}: option reset_after=False, but a {cls} is a reset-after "
                          "GRU; drop the option.")
    inputs = kernel.shape[0]
    order, canonical = ORDERS[family], CANONICAL[family]
    # cuDNN wants each gate's (H, in) matrix row-major; the CuDNN layers hand it the bytes of
    # their (in, H) column block unchanged, so the block re-read as (H, in) is cuDNN's matrix.
    # Split the columns into (gates, H) and bring the gate axis first; each (in, H) block,
    # made contiguous, is then re-read as (H, in).
    weight_ih = np.ascontiguousarray(kernel.reshape(inputs, gates, hidden).transpose(1, 0, 2))
    weight_hh = np.ascontiguousarray(recurrent.reshape(hidden, gates, hidden).transpose(1, 0, 2))
    input_bias, recurrent_bias = bias.reshape(2, columns)
    params = {
        "weight_ih": reorder(weight_ih.reshape(columns, inputs), order, canonical, copy=False),
        "weight_hh": reorder(weight_hh.reshape(columns, hidden), order, canonical, copy=False),
        "bias_ih": reorder(input_bias, order, canonical),
        "bias_hh": reorder(recurrent_bias, order, canonical),
    }
    spec = Spec(cell=family, input_size=inputs, hidden_size=hidden, reset_after=True, bias=True)
    return spec, params


def read_weights(arrays: list[Any], options: Mapping[str, Any], location: str) -> RNN:
    """One layer's ``get_weights()`` arrays (a Bidirectional's: forward, then backward). A
    CuDNNLSTM/CuDNNGRU's are told by their bias (2·G·H: input-side then recurrent-side);
    ``cudnn_layer=`` True or False says so instead."""
    arrays = [to_numpy(a) for a in arrays]
    cudnn = options.get("cudnn_layer")
    if cudnn not in (None, True, False):
        raise FormatError(f"{location}: cudnn_layer={cudnn!r}; expected True or False.")
    first = arrays[:3] if len(arrays) in (3, 6) else arrays
    if cudnn or (cudnn is None and is_cudnn_weights(first)):
        shape = tuple(np.shape(first[1])) if len(first) > 1 else ()
        gates = shape[1] // shape[0] if len(shape) == 2 and shape[0] else 0
        if gates not in (3, 4):
            raise ShapeError(f"{location}: recurrent_kernel {shape}; a CuDNNLSTM's is (H, 4·H) "
                             "and a CuDNNGRU's (H, 3·H).")
        return read_cudnn_weights(arrays, GATE_COUNT_CELLS[gates], options, location)
    options = {**options, **default_gates(first, options, location)}
    halves = _halves(arrays, location)
    names = ("forward", "backward")
    found = [_direction(half, options, f"{location}, {names[d]}" if len(halves) == 2 else location)
             for d, half in enumerate(halves)]
    specs = [spec for spec, _ in found]
    if len(specs) == 2 and specs[0] != specs[1]:
        raise ShapeError(f"{location}: forward is {specs[0].describe(article=True)} but backward "
                         f"is {specs[1].describe(article=True)}; expected the same shapes in both "
                         "directions.")
    spec = specs[0].replace(bidirectional=len(halves) == 2)
    return RNN(spec, [[params for _, params in found]], copy=False)


def _direction(arrays: list[np.ndarray], options: Mapping[str, Any],
               location: str) -> tuple[Spec, dict[str, np.ndarray]]:
    names = ("kernel", "recurrent_kernel", "bias")
    arrays = [as_float_array(a, f"{location}, {names[i]}") for i, a in enumerate(arrays)]
    kernel, recurrent = arrays[0], arrays[1]
    if kernel.ndim != 2 or recurrent.ndim != 2:
        raise ShapeError(f"{location}: kernel {kernel.shape} and recurrent_kernel "
                         f"{recurrent.shape}; expected 2-D arrays (I, G·H) and (H, G·H).")
    hidden, columns = recurrent.shape
    gates = columns // hidden if hidden and columns % hidden == 0 else 0
    if gates not in GATE_COUNT_CELLS:
        raise ShapeError(
            f"{location}: recurrent_kernel {recurrent.shape}; expected (H, G·H) with G = 4 "
            "(LSTM), 3 (GRU) or 1 (SimpleRNN).")
    if kernel.shape[1] != columns:
        raise ShapeError(f"{location}: kernel {kernel.shape} and recurrent_kernel "
                         f"{recurrent.shape}; expected the same number of columns ({columns} = "
                         f"{gates} gates × {hidden} units).")
    family = GATE_COUNT_CELLS[gates]
    activation = options.get("activation", "tanh")
    activations: tuple[Activation, ...] = ()
    if family == "rnn":
        if options.get("recurrent_activation") is not None:
            raise FormatError(f"{location}: recurrent_activation= applies to LSTM and GRU "
                              "layers; a SimpleRNN has no gates. Drop the option.")
        if activation not in ("tanh", "relu"):
            raise UnsupportedFeatureError(f"{location}: activation={activation!r}; a simple RNN "
                                          "computes 'tanh' or 'relu'.")
        cell = f"rnn_{activation}"
    else:
        cell = family
        candidate = _keras_activation(activation, options, "activation", location)
        gate = _keras_activation(options.get("recurrent_activation", "sigmoid"), options,
                                 "recurrent_activation", location)
        activations = (gate, candidate, candidate) if family == "lstm" else (gate, candidate)
    reset_after = True
    bias = arrays[2] if len(arrays) == 3 else None
    if options.get("reset_after") not in (None, True, False):
        raise FormatError(f"{location}: reset_after={options['reset_after']!r}; expected True "
                          "or False.")
    if family == "gru":
        if bias is None:
            reset_after = bool(options.get("reset_after", True))
        elif bias.shape == (2, columns):
            reset_after = True
        elif bias.shape == (columns,):
            reset_after = False
        else:
            raise ShapeError(f"{location}: GRU bias {bias.shape}; expected (2, {columns}) for "
                             f"reset_after=True or ({columns},) for reset_after=False.")
        if "reset_after" in options and bool(options["reset_after"]) != reset_after:
            raise FormatError(f"{location}: option reset_after={options['reset_after']!r}, but "
                              f"the bias shape {bias.shape if bias is not None else None} means "
                              f"reset_after={reset_after}; drop the option.")
    elif bias is not None and bias.shape != (columns,):
        cudnn = (" A bias of twice that is a CuDNNLSTM's or CuDNNGRU's (input-side, then "
                 "recurrent-side biases): read it with cudnn_layer=True."
                 if bias.shape == (2 * columns,) and gates in (3, 4) else "")
        raise ShapeError(f"{location}: bias {bias.shape}; expected ({columns},) "
                         f"({gates} gates × {hidden} units).{cudnn}")
    spec = Spec(cell=cell, input_size=kernel.shape[0], hidden_size=hidden,
                reset_after=reset_after, bias=bias is not None, activations=activations)
    order, canonical = ORDERS[family], CANONICAL[family]
    params = {
        # Views where the gate orders agree (an LSTM's kernel.T), else one block copy.
        "weight_ih": reorder(kernel.T, order, canonical, copy=False),
        "weight_hh": reorder(recurrent.T, order, canonical, copy=False),
    }
    if bias is not None:
        if bias.ndim == 2:
            params["bias_ih"] = reorder(bias[0], order, canonical, copy=False)
            params["bias_hh"] = reorder(bias[1], order, canonical, copy=False)
        else:
            params["bias_hh"] = reorder(bias, order, canonical, copy=False)
            params["bias_ih"] = np.zeros_like(params["bias_hh"])
    return spec, params


# -- write -----------------------------------------------------------------------------


def write(model: Model) -> list[list[np.ndarray]]:
    """One ``get_weights()`` list per layer of ``model``."""
    out = []
    for index, layer in enumerate(model.layers()):
        arrays: list[np.ndarray] = []
        for direction, named in enumerate(layer.params[0]):
            arrays.extend(_direction_arrays(layer.spec, named, f"layer {index}, "
                                            f"{('forward', 'backward')[direction]}"))
        out.append(arrays)
    return out


def _direction_arrays(spec: Spec, named: Mapping[str, np.ndarray], location: str) -> list[Any]:
    family = gate_family(spec.cell)
    order, canonical = ORDERS[family], CANONICAL[family]
    arrays = [transposed(named["weight_ih"], canonical, order),
              transposed(named["weight_hh"], canonical, order)]
    if spec.bias:
        if spec.cell == "gru" and spec.reset_after:
            arrays.append(np.stack([reorder(named["bias_ih"], canonical, order),
                                    reorder(named["bias_hh"], canonical, order)]))
        else:
            single = combine_biases(spec, named, "hh", f"write(fmt='keras') {location}", "keras")
            arrays.append(reorder(single, canonical, order))
    return arrays


def leaves(nested: Sequence[Any]) -> list[Any]:
    """The arrays of a nested list, in order."""
    out = []
    for item in nested:
        out.extend(leaves(item) if isinstance(item, (list, tuple)) else [item])
    return out
