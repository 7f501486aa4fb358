"""Keras 1 (1.0–1.2, 2015–2017) layers in HDF5 files: each gate's arrays apart, Keras 1's
config schema. Read only; rnnport writes Keras 2/3 files.

A Keras 1 file has the legacy HDF5 layout of :mod:`rnnport.formats.keras.files`: from
``model.save`` (Keras ≥ 1.0.7) root attributes ``keras_version``, ``model_config`` (and
``training_config``), the layers under ``/model_weights``; from ``save_weights`` the layers at
the root and no ``keras_version``. Keras 1 writes no ``backend`` attribute. ``layer_names``
and ``weight_names`` as in Keras 2. What differs is inside each recurrent layer.

**Weights.** A layer's ``weight_names`` are its variables' names, ``<layer>_<weight>``
(``lstm_1_W_i`` from Theano, ``lstm_1_W_i:0`` from TensorFlow, ``lstm_1_W_i_1:0`` where
TensorFlow made a name unique in its graph), in ``trainable_weights`` order::

    LSTM        W_i U_i b_i  W_c U_c b_c  W_f U_f b_f  W_o U_o b_o    (gates i c f o!)
    GRU         W_z U_z b_z  W_r U_r b_r  W_h U_h b_h                  (reset-before)
    SimpleRNN   W U b
    consume_less="gpu" (LSTM, GRU)   W U b, fused

    W_g (I, H), U_g (H, H), b_g (H,) per gate; fused W (I, G·H), U (H, G·H), b (G·H,) with
    the gate blocks in Keras 2's order, i f c o and z r h (Keras 1.2.2 ``recurrent.py``
    slices ``z[:, :output_dim]`` as i, then f, c, o; tf_keras's legacy converter passes
    the fused arrays through unchanged).

A ``Bidirectional`` layer holds its forward layer's arrays then its backward layer's, named
after the wrapped layers, ``forward_lstm_1_W_i`` … ``backward_lstm_1_W_i`` …. Reading finds
each array by its name (not its position) and fuses the gates into Keras 2's
``kernel (I, G·H)``, ``recurrent_kernel (H, G·H)``, ``bias (G·H,)``: an LSTM's as
``[W_i W_f W_c W_o]`` (exactly what tf_keras's ``preprocess_weights_for_loading`` does with
``original_keras_version="1"``).

**Config.** ``output_dim`` is Keras 2's ``units``, ``inner_activation`` its
``recurrent_activation`` (Keras 1's default ``hard_sigmoid``, ``clip(0.2·x + 0.5, 0, 1)`` as
in Keras 2), ``activation`` defaults to ``tanh``; a GRU is reset-before, every layer has a
bias; ``consume_less`` (``cpu``, ``mem``, ``gpu``) changes only how the weights are kept.
A Sequential's config is a bare list of layers; a Model's layers carry ``inbound_nodes``
``[[["input_1", 0, 0]]]``. A ``Bidirectional`` wraps ``layer`` with ``merge_mode``.

**Telling a Keras 1 file.** ``keras_version`` ``1.x`` on the root, or, without one, the
weight names: Keras 2 names end in ``kernel``, ``recurrent_kernel``, ``bias``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import FormatError, ShapeError, UnsupportedFeatureError
from . import layers as keras_layers

__all__ = ["CONSUME_LESS", "is_keras1", "is_recurrent", "layer_arrays", "layer_config"]

CONSUME_LESS = ("cpu", "mem", "gpu")
# The gates of Keras 1's per-gate arrays (LSTM, GRU), in Keras 2's order of gate blocks.
GATE_ORDERS = {"cfio": "ifco", "hrz": "zrh"}
# TensorFlow makes a variable's name unique in its graph with a suffix, lstm_1_W_i_1:0 (a
# model built twice in one session, e.g. loaded again before it is saved); Theano does not.
NAME = re.compile(r"(?P<prefix>.+)_(?P<kind>[WUb])(?:_(?P<gate>[a-z]))?"
                  r"(?:(?:_[0-9]{1,9})?:[0-9]{1,9})?")
RECURRENT = {*keras_layers.LAYER_CELLS}


def _parse(name: str) -> re.Match[str] | None:
    return NAME.fullmatch(name.rsplit("/", 1)[-1])


def is_recurrent(weight_names: Sequence[str]) -> bool:
    """Whether ``weight_names`` are a Keras 1 recurrent layer's: every one Keras 1's
    ``<layer>_W…``, ``_U…`` or ``_b…``, with a recurrent ``U`` among them."""
    found = [_parse(name) for name in weight_names]
    return bool(found) and all(found) and any(m is not None and m["kind"] == "U" for m in found)


def is_keras1(version: Any, weight_names: Sequence[str]) -> bool:
    """Whether a recurrent layer is Keras 1's: by the root's ``keras_version``, or, when the
    file has none, by its weight names."""
    parsed = keras_layers.keras_version(version)
    if parsed is not None:
        return parsed[0] == 1
    return is_recurrent(weight_names)


def layer_arrays(paths: Sequence[str], arrays: Sequence[np.ndarray],
                 location: str) -> tuple[list[np.ndarray], list[str]]:
    """One Keras 1 layer's arrays (stored at ``paths``) as Keras 2's ``kernel``,
    ``recurrent_kernel``, ``bias`` per direction (forward, then backward), with a
    description of where each came from."""
    parsed = [_parse(path) for path in paths]
    unnamed = [path for path, match in zip(paths, parsed, strict=True) if match is None]
    if unnamed or not paths:
        raise FormatError(
            f"{location}: a Keras 1 layer whose weights are named {list(paths) or 'nothing'}; "
            "expected Keras 1's names <layer>_W_i, <layer>_U_i, <layer>_b_i … (or fused "
            "<layer>_W, _U, _b), which say which gate each array holds. The file may be "
            "damaged.")
    directions: dict[str, dict[tuple[str, str], tuple[np.ndarray, str]]] = {}
    for path, match, array in zip(paths, parsed, arrays, strict=True):
        assert match is not None
        key = (match["kind"], match["gate"] or "")
        direction = directions.setdefault(match["prefix"], {})
        if key in direction:
            raise FormatError(f"{location}: {path} and {direction[key][1]} both hold "
                              f"{match['prefix']}'s {''.join(key)}; expected each weight once.")
        direction[key] = (array, path)
    prefixes = list(directions)
    if len(prefixes) == 2:
        sides = sorted(prefixes, key=lambda prefix: not prefix.startswith("forward_"))
        if not (sides[0].startswith("forward_") and sides[1].startswith("backward_")):
            raise FormatError(
                f"{location}: weights of two layers, {prefixes[0]!r} and {prefixes[1]!r}; "
                "expected one layer's, or a Bidirectional's forward_<layer>_… and "
                "backward_<layer>_… arrays.")
        prefixes = sides
    elif len(prefixes) != 1:
        raise FormatError(f"{location}: weights of {len(prefixes)} layers "
                          f"({', '.join(map(repr, prefixes))}); expected one layer's, or a "
                          "Bidirectional's two (forward_…, backward_…).")
    out: list[np.ndarray] = []
    described: list[str] = []
    for prefix in prefixes:
        fused, where = _direction(directions[prefix], f"{location}, {prefix}")
        out.extend(fused)
        described.extend(where)
    return out, described


def _direction(weights: Mapping[tuple[str, str], tuple[np.ndarray, str]],
               location: str) -> tuple[list[np.ndarray], list[str]]:
    letters = "".join(sorted({gate for _, gate in weights}))
    if set(weights) != {(kind, gate) for kind in "WUb" for gate in letters or [""]} or \
            (letters and letters not in GATE_ORDERS):
        found = ", ".join(f"{kind}_{gate}" if gate else kind for kind, gate in sorted(weights))
        raise FormatError(
            f"{location}: weights {found}; expected a Keras 1 LSTM's W, U, b for gates i, c, "
            "f, o (12 arrays), a GRU's for z, r, h (9), or fused W, U, b (a SimpleRNN or a "
            "consume_less='gpu' layer). The file may be damaged.")
    if not letters:
        return ([weights[(kind, "")][0] for kind in "WUb"],
                [weights[(kind, "")][1] for kind in "WUb"])
    order = GATE_ORDERS[letters]
    _check_gates(weights, order, location)
    fused, where = [], []
    for kind in "WUb":
        fused.append(np.concatenate([weights[(kind, gate)][0] for gate in order], axis=-1))
        first = weights[(kind, order[0])][1]
        match = _parse(first)
        assert match is not None
        folder = first[:len(first) - len(first.rsplit("/", 1)[-1])]
        where.append(f"{folder}{match['prefix']}_{kind}_{{{','.join(order)}}}")
    return fused, where


def _check_gates(weights: Mapping[tuple[str, str], tuple[np.ndarray, str]], order: str,
                 location: str) -> None:
    """Every gate's W (I, H), U (H, H), b (H,) of one float dtype, before they are fused."""
    first = weights[("U", order[0])][0]
    hidden = first.shape[0] if first.ndim == 2 else 0
    inputs_array = weights[("W", order[0])][0]
    inputs = inputs_array.shape[0] if inputs_array.ndim == 2 else 0
    dtype = first.dtype
    problems = []
    for gate in order:
        for kind, shape in (("W", (inputs, hidden)), ("U", (hidden, hidden)), ("b", (hidden,))):
            array, path = weights[(kind, gate)]
            if array.shape != shape or not hidden or not inputs:
                problems.append(f"{location}: {path} {array.shape}; expected "
                                f"{shape if hidden and inputs else '(I, H), (H, H), (H,)'}")
            elif array.dtype != dtype or array.dtype.kind != "f":
                problems.append(f"{location}: {path} is {array.dtype}; expected floats of one "
                                f"dtype ({dtype}) in every gate")
    if problems:
        raise ShapeError(problems, hint="A Keras 1 layer with H units and I inputs keeps each "
                         "gate's W (I, H), U (H, H) and b (H,). The file may be damaged.")


def layer_config(class_name: str, config: Mapping[str, Any], location: str) -> dict[str, Any]:
    """A Keras 1 layer config (LSTM, GRU, SimpleRNN or a Bidirectional of one) in Keras 2's
    schema, as :mod:`rnnport.formats.keras.layers` reads it."""
    if class_name in keras_layers.WRAPPERS:
        inner = config.get("layer")
        if not isinstance(inner, Mapping) or inner.get("class_name") not in RECURRENT:
            raise FormatError(f"{location}: a Bidirectional layer whose config.layer is not an "
                              "LSTM, GRU or SimpleRNN config; the file may be damaged.")
        inner_class = str(inner["class_name"])
        raw = inner.get("config")
        return {**config, "merge_mode": config.get("merge_mode", "concat"),
                "layer": {"class_name": inner_class,
                          "config": layer_config(inner_class, raw if isinstance(raw, Mapping)
                                                 else {}, f"{location}, {inner_class}")}}
    consume_less = config.get("consume_less", "cpu")
    if consume_less not in CONSUME_LESS:
        raise UnsupportedFeatureError(
            f"{location}: consume_less={consume_less!r}; expected one of "
            f"{', '.join(map(repr, CONSUME_LESS))} (the values Keras 1 knows). The file may be "
            "damaged.")
    converted = {key: value for key, value in config.items()
                 if key not in ("output_dim", "inner_activation", "consume_less")}
    converted["units"] = config.get("output_dim", config.get("units"))
    converted["activation"] = config.get("activation", "tanh")
    converted["use_bias"] = True
    if class_name != "SimpleRNN":
        converted["recurrent_activation"] = config.get("inner_activation", "hard_sigmoid")
    if class_name == "GRU":
        converted["reset_after"] = False
    return converted
