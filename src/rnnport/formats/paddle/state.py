"""PaddlePaddle state dicts: where a ``paddle.nn.LSTM/GRU/SimpleRNN`` keeps its arrays, and
the ``.pdparams`` pickle ``paddle.save`` writes them in.

**Keys.** A paddle recurrent network (``RNNBase``) is a list of layers, each an ``RNN``
wrapper around one cell (``{k}.cell.…``) or a ``BiRNN`` around two (``{k}.cell_fw.…``,
``{k}.cell_bw.…``), so its state dict names every parameter by its cell::

    {k}.cell.weight_ih     (G·H, I_k)      gates stacked by rows: LSTM i f g o, GRU r z c
    {k}.cell.weight_hh     (G·H, H_out)
    {k}.cell.bias_ih       (G·H,)
    {k}.cell.bias_hh       (G·H,)
    {k}.cell.weight_ho     (H, P)          LSTM with proj_size > 0: h' = h·weight_ho

``RNNBase`` also sets PyTorch's names on itself (``weight_ih_l{k}``, ``bias_hh_l{k}_reverse``
…), so ``state_dict()`` — and a ``.pdparams`` file — holds each parameter twice. It attaches
those names by zipping the list ``weight_ih, weight_hh, bias_ih, bias_hh`` per layer and
direction (without a bias whose ``bias_*_attr`` is False) with the cells' parameters in
order: with a projection, or without a bias, the names shift onto other parameters (paddle
3.3's ``weight_ih_l0_reverse`` of a projected LSTM is the forward cell's ``weight_ho``).
A layer made with ``bias_ih_attr=False, bias_hh_attr=False`` still has bias parameters,
constant zeros; no bias among those names, and zero biases, read as a network without
biases (and such a network is written so).
The cells' names are the structure; :func:`find` reads them, and checks that every copy
under the other names holds what that zip attaches to it (a file whose copies disagree is
refused: which one paddle restores depends on ``set_state_dict``'s order). A dict with the
other names alone reads as PyTorch's layout, which it is. ``paddle.save`` also stores
``StructuredToParameterName@@`` (key → the parameter's program name, ``lstm_cell_0.w_0``)
and, for an array past 2³⁰ bytes written with pickle protocol 2 or 3, its slices as
``key@@.0``, ``key@@.1`` … listed under ``UnpackBigParamInfor@@``; both are read.

**The file.** ``paddle.save(layer.state_dict(), path)`` pickles a plain dict of NumPy arrays
(protocol 4 by default, 2 to 4 allowed; NumPy reconstructs each array from its shape, dtype
and bytes). It is read by rnnport's pickle machine (:mod:`rnnport.io.pickled`), which builds
those arrays and plain containers and imports or calls nothing else: any other global the
pickle names is refused by name. Written files are the same plain dict, in the keys' order
``state_dict()`` gives (the other names first, then the cells'), protocol 4.
"""

from __future__ import annotations

import math
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import FormatError
from ...io.pickled import Builder, Global, Opaque, globals_named, preview, unpickle
from ...model import RNN
from ...spec import Spec
from .._common import layer_number, listed, to_numpy
from ..torch.tensors import Ledger, NumpyArray, numpy_builders

__all__ = ["CELL_NAMES", "NAME_TABLE", "Network", "find", "pickle_dict", "read_network",
           "state_dict", "unpickled"]

CELL_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_ho")
FLAT_NAMES = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
NAME_TABLE = "StructuredToParameterName@@"
SLICES = "UnpackBigParamInfor@@"
CELL_KEY = re.compile(r"^(?P<prefix>(?:.*\.)?)(?P<layer>[0-9]+)\.(?P<cell>cell|cell_fw|cell_bw)\."
                      r"(?P<name>weight_ih|weight_hh|bias_ih|bias_hh|weight_ho)$")
FLAT_KEY = re.compile(r"^(?P<prefix>(?:.*\.)?)(?P<name>weight_ih|weight_hh|bias_ih|bias_hh)"
                      r"_l(?P<layer>[0-9]+)(?P<reverse>_reverse)?$")
GATE_CELLS = {4: "lstm", 3: "gru", 1: "rnn"}
MAX_NESTING = 8  # dicts inside dicts a checkpoint wraps its state dict in
# Paddle names the mode of its rnn operator; a SimpleRNN's activation is part of it.
MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


@dataclass(eq=False)
class Network:
    """One network's keys under ``prefix``: its cells' values by (layer, direction) → name,
    and the copies under PyTorch's names."""

    prefix: str
    cells: dict[tuple[int, int], dict[str, tuple[str, Any]]] = field(default_factory=dict)
    flat: dict[tuple[int, int], dict[str, tuple[str, Any]]] = field(default_factory=dict)
    wrappers: set[str] = field(default_factory=set)  # cell, or cell_fw / cell_bw

    def keys(self) -> list[str]:
        return [key for group in (self.cells, self.flat) for named in group.values()
                for key, _ in named.values()]

    def describe(self) -> str:
        entries = self.cells or self.flat
        layers = 1 + max(layer for layer, _ in entries)
        directions = 1 + max(direction for _, direction in entries)
        return f"{layers} layer(s), {directions} direction(s)"


def flat_items(state: Mapping[Any, Any], prefix: str = "",
               depth: int = 0) -> Iterator[tuple[Any, Any]]:
    """``state``'s items, a dict inside it (a checkpoint's ``{"model": state_dict, "epoch":
    3}``) entered with its key and a dot before its own keys (``model.0.cell.weight_ih``);
    paddle.save's tables (keys ending ``@@``) and dicts nested deeper than 8 left as they are."""
    for key, value in state.items():
        if isinstance(key, str) and isinstance(value, Mapping) and value and \
                not key.endswith("@@") and depth < MAX_NESTING and \
                all(isinstance(inner, str) for inner in value):
            yield from flat_items(value, f"{prefix}{key}.", depth + 1)
        else:
            yield (f"{prefix}{key}" if prefix and isinstance(key, str) else key), value


def find(state: Mapping[Any, Any], where: str) -> list[Network]:
    """Every network whose keys ``state`` holds (a dict inside it too, see
    :func:`flat_items`), in the order of their first keys."""
    found: dict[str, Network] = {}
    for key, value in flat_items(state):
        if not isinstance(key, str):
            continue
        cell = CELL_KEY.match(key)
        if cell is not None:
            network = found.setdefault(cell["prefix"], Network(cell["prefix"]))
            slot = (layer_number(cell["layer"], where), int(cell["cell"] == "cell_bw"))
            network.cells.setdefault(slot, {})[cell["name"]] = (key, value)
            network.wrappers.add(cell["cell"])
            continue
        flat = FLAT_KEY.match(key)
        if flat is not None:
            network = found.setdefault(flat["prefix"], Network(flat["prefix"]))
            slot = (layer_number(flat["layer"], where), int(bool(flat["reverse"])))
            network.flat.setdefault(slot, {})[flat["name"]] = (key, value)
    return list(found.values())


def _array(key: str, value: Any, where: str, widened: list[str] | None = None) -> np.ndarray:
    """``value`` as a float array (bfloat16 bits widened to float32, ``key`` then added to
    ``widened``)."""
    if _tensor(value):  # a tensor in a nested dict: (its name, its array)
        value = value[1]
    if isinstance(value, NumpyArray):
        array = value.array(f"{where}, {key!r}")
    elif isinstance(value, (Opaque, Global)):
        made = value.made_by if isinstance(value, Opaque) else value
        raise FormatError(f"{where}, {key!r}: an object the pickle makes by calling "
                          f"{preview(made)[1:-1]}, which rnnport never does; expected a NumPy "
                          "array, as paddle.save writes. Save the state dict with paddle.save.")
    else:
        array = to_numpy(value, f"{where}, {key!r}")
    if array.dtype == np.uint16:  # paddle.save's bfloat16: NumPy has none, so its bits
        if widened is not None:
            widened.append(key)
        return (array.astype(np.uint32) << 16).view(np.float32)
    if array.dtype.kind != "f" or array.dtype.itemsize not in (2, 4, 8):
        raise FormatError(f"{where}, {key!r}: {array.dtype} values; expected float16, float32 "
                          "or float64 weights, or bfloat16 (which paddle.save writes as uint16 "
                          "bits).")
    return array


def _check_slots(entries: Mapping[tuple[int, int], Any], where: str, naming: str) -> None:
    layers = 1 + max(layer for layer, _ in entries)
    directions = 1 + max(direction for _, direction in entries)
    missing = [(layer, direction) for layer in range(min(layers, 1 + len(entries)))
               for direction in range(directions) if (layer, direction) not in entries]
    if missing or len(entries) != layers * directions:
        shown = listed(naming.format(layer=layer, direction=direction)
                       for layer, direction in missing[:9])
        raise FormatError(f"{where}: missing {shown or 'layers'}; expected layers "
                          f"0…{layers - 1} with {directions} direction(s) each.")


def _aliases(network: Network, layers: int, directions: int) -> list[tuple[str, str]]:
    """(PyTorch-named key, the cell key paddle attaches it to): the zip ``RNNBase``
    makes of the names it sets with its cells' parameters (see the module docstring)."""
    names = [network.flat[(layer, direction)][name][0]
             for layer in range(layers) for direction in range(directions)
             if (layer, direction) in network.flat
             for name in FLAT_NAMES if name in network.flat[(layer, direction)]]
    params = [network.cells[(layer, direction)][name][0]
              for layer in range(layers) for direction in range(directions)
              for name in CELL_NAMES if name in network.cells[(layer, direction)]]
    return list(zip(names, params, strict=False))


def read_network(network: Network, activation: str, where: str,
                 mode: str | None = None) -> tuple[RNN, list[str]]:
    """The network ``network``'s keys hold, and what reading it noticed (the copies under
    PyTorch's names). ``activation`` is a SimpleRNN's; ``mode`` what a program says."""
    located = f"{where}{f' (prefix {network.prefix!r})' if network.prefix else ''}"
    found: list[str] = []
    if {"cell", "cell_fw"} <= network.wrappers or {"cell", "cell_bw"} <= network.wrappers:
        raise FormatError(f"{located}: holds both '{{k}}.cell.' and '{{k}}.cell_fw.' keys; "
                          "expected one direction's cells (cell) or two (cell_fw, cell_bw).")
    source = network.cells or network.flat
    naming = ("{layer}.cell_bw.weight_ih" if network.cells else "weight_ih_l{layer}_reverse")
    _check_slots(source, located, naming)
    layers = 1 + max(layer for layer, _ in source)
    directions = 1 + max(direction for _, direction in source)
    widened: list[str] = []
    arrays = {slot: {name: _array(key, value, located, widened)
                     for name, (key, value) in named.items()}
              for slot, named in source.items()}
    if widened:
        found.append(f"{len(widened)} array(s) stored as bfloat16 (uint16 bits, as paddle.save "
                     f"writes bfloat16: {listed(map(repr, widened))}), read as float32, which "
                     "holds every bfloat16 value exactly.")
    if network.cells and network.flat:
        copies = _aliases(network, layers, directions)
        values = {key: value for named in network.flat.values() for key, value in named.values()}
        cell_values = {key: arrays[slot][name] for slot, named in network.cells.items()
                       for name, (key, _) in named.items()}
        for alias, param in copies:
            copy = _array(alias, values[alias], located)
            if copy.shape != cell_values[param].shape or copy.dtype != cell_values[param].dtype \
                    or not np.array_equal(copy, cell_values[param], equal_nan=True):
                raise FormatError(
                    f"{located}: {alias!r} and {param!r} name one parameter (paddle's RNN "
                    f"layers attach {alias!r} to it), but hold different values "
                    f"({copy.dtype} {copy.shape} and {cell_values[param].dtype} "
                    f"{cell_values[param].shape}); which one paddle restores depends on the "
                    "order set_state_dict meets them. Delete the stale copy and save again.")
        if len(copies) != len(values):
            unused = sorted(set(values) - {alias for alias, _ in copies})
            raise FormatError(f"{located}: {listed(map(repr, unused))} name no parameter of "
                              "the cells (an RNN layer sets one such name per cell parameter); "
                              "the file is damaged, or mixes two networks under one prefix.")
        found.append(f"every parameter is stored twice, under its cell's name "
                     f"({network.cells[(0, 0)]['weight_ih'][0]!r}) and the name paddle's RNN "
                     f"layer sets on itself ({copies[0][0]!r}); the {len(copies)} copies were "
                     "checked equal, and read once.")
    first = arrays[(0, 0)]
    for required in ("weight_ih", "weight_hh"):
        if required not in first:
            raise FormatError(f"{located}: missing {required} of layer 0.")
    weight_ih, weight_hh = first["weight_ih"], first["weight_hh"]
    projection = first.get("weight_ho")
    if weight_ih.ndim != 2 or weight_hh.ndim != 2 or (projection is not None
                                                      and projection.ndim != 2):
        raise FormatError(f"{located}: weight_ih {weight_ih.shape} and weight_hh "
                          f"{weight_hh.shape}; expected 2-D (G·H, I) and (G·H, H_out).")
    hidden = projection.shape[0] if projection is not None else weight_hh.shape[1]
    gates = weight_hh.shape[0] // hidden if hidden and weight_hh.shape[0] % hidden == 0 else 0
    if gates not in GATE_CELLS:
        raise FormatError(f"{located}: weight_hh {weight_hh.shape}; expected (G·H, H_out) with "
                          "G = 4 (LSTM), 3 (GRU) or 1 (SimpleRNN).")
    cell = GATE_CELLS[gates]
    if mode is not None and not MODES[mode].startswith(cell):
        raise FormatError(f"{located}: the program's rnn operator runs mode {mode!r}, but "
                          f"weight_hh {weight_hh.shape} holds {gates} gate(s); the model is "
                          "damaged.")
    if cell == "rnn":
        cell = MODES[mode] if mode is not None else f"rnn_{activation}"
    biased = any(name in named for named in arrays.values() for name in ("bias_ih", "bias_hh"))
    if biased and network.cells and network.flat and not any(
            name.startswith("bias") for named in network.flat.values() for name in named) and \
            not any(np.any(named[name]) for named in arrays.values()
                    for name in ("bias_ih", "bias_hh") if name in named):
        biased = False  # bias_ih_attr=bias_hh_attr=False: no bias names, constant zeros
    params = []
    for layer in range(layers):
        row = []
        for direction in range(directions):
            named = arrays[(layer, direction)]
            canonical: dict[str, np.ndarray] = {name: named[name] for name in
                                                ("weight_ih", "weight_hh") if name in named}
            if biased:
                zeros = np.zeros(weight_hh.shape[0], dtype=weight_hh.dtype)
                canonical.update({name: named.get(name, zeros) for name in ("bias_ih", "bias_hh")})
            if "weight_ho" in named:
                canonical["weight_hr"] = np.ascontiguousarray(named["weight_ho"].T)
            row.append(canonical)
        params.append(row)
    spec = Spec(cell=cell, input_size=weight_ih.shape[1], hidden_size=hidden, num_layers=layers,
                bidirectional=directions == 2,
                proj_size=projection.shape[1] if projection is not None else 0, bias=biased)
    return RNN(spec, params, copy=False), found


# -- the file -----------------------------------------------------------------------------


def unpickled(data: bytes, where: str, size: int) -> dict[Any, Any]:
    """The dict a ``.pdparams`` pickle holds, its arrays as :class:`NumpyArray` records (not
    yet made), big arrays' slices joined."""
    ledger = Ledger(where, size)
    known = globals_named({**numpy_builders(ledger),
                           "builtins.tuple": Builder("builtins.tuple", _tuple)})
    tree, _ = unpickle(data, where, known=known, size=size)
    if _tensor(tree):
        raise FormatError(f"{where}: the pickle holds one tensor ({tree[0]!r}), as "
                          "paddle.save(tensor, path) writes; expected a dict of arrays, as "
                          "paddle.save(layer.state_dict(), path) writes.")
    if not isinstance(tree, dict):
        raise FormatError(f"{where}: the pickle holds {preview(tree)}; expected a dict of arrays, "
                          "as paddle.save(layer.state_dict(), path) writes.")
    if SLICES in tree:
        tree = _joined(tree, where, ledger)
    return tree


def _tuple(items: Any = ()) -> tuple[Any, ...]:
    """``builtins.tuple``, which paddle.save calls to pickle a tensor inside a nested
    structure as ``(name, array)``: of a list or tuple only."""
    if not isinstance(items, (list, tuple)):
        raise FormatError(f"builtins.tuple of {preview(items)}; expected a list or tuple.")
    return tuple(items)


def _tensor(value: Any) -> bool:
    """Whether ``value`` is a tensor as paddle.save pickles one outside a state dict:
    ``(name, array)``."""
    return isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and \
        isinstance(value[1], NumpyArray)


def _joined(tree: dict[Any, Any], where: str, ledger: Ledger) -> dict[Any, Any]:
    """``tree`` with each array paddle.save cut into slices (``UnpackBigParamInfor@@``) whole
    again: ``{key: {"OriginShape": shape, "slices": [key@@.0, …]}}``."""
    table = tree[SLICES]
    if not isinstance(table, dict):
        raise FormatError(f"{where}: {SLICES} holds {preview(table)}; expected a dict.")
    out = {key: value for key, value in tree.items() if key != SLICES}
    for key, entry in table.items():
        shape = entry.get("OriginShape") if isinstance(entry, dict) else None
        slices = entry.get("slices") if isinstance(entry, dict) else None
        if not isinstance(key, str) or not isinstance(shape, (tuple, list)) or \
                not isinstance(slices, (tuple, list)) or not slices or \
                not all(isinstance(name, str) and isinstance(out.get(name), NumpyArray)
                        for name in slices):
            raise FormatError(f"{where}: {SLICES} entry {preview(key)} is {preview(entry)}; "
                              "expected {'OriginShape': shape, 'slices': [names of arrays "
                              "the file holds]}. The file is damaged.")
        parts = [out.pop(name).array(f"{where}, {name!r}") for name in slices]
        if any(part.ndim != 1 or part.dtype != parts[0].dtype for part in parts) or \
                not all(isinstance(dim, int) and 0 <= dim < 2**40 for dim in shape) or \
                sum(part.size for part in parts) != math.prod(shape):
            raise FormatError(f"{where}: the slices of {key!r} do not make shape "
                              f"{preview(shape)}; the file is damaged.")
        ledger.charge(sum(part.nbytes for part in parts), f"array {key!r}")
        out[key] = np.concatenate(parts).reshape(tuple(shape))
    return out


def state_dict(model: RNN) -> dict[str, np.ndarray]:
    """``model`` as the state dict of the ``paddle.nn.LSTM/GRU/SimpleRNN`` that computes it
    (for a network without biases, the layer made with ``bias_ih_attr=False,
    bias_hh_attr=False``: constant zero biases, no PyTorch names for them), keys in the
    order ``state_dict()`` gives them, the PyTorch-named copies attached as paddle attaches
    them."""
    spec = model.spec
    zeros = np.zeros(spec.gate_count * spec.hidden_size, dtype=model.dtype)
    wrappers = ("cell_fw", "cell_bw") if spec.bidirectional else ("cell",)
    cells: list[tuple[str, np.ndarray]] = []
    flat_names: list[str] = []
    for layer in range(spec.num_layers):
        for direction, wrapper in enumerate(wrappers):
            named = model.params[layer][direction]
            values = {"weight_ih": named["weight_ih"], "weight_hh": named["weight_hh"],
                      "bias_ih": named.get("bias_ih", zeros),
                      "bias_hh": named.get("bias_hh", zeros)}
            if spec.proj_size:
                values["weight_ho"] = named["weight_hr"].T
            cells += [(f"{layer}.{wrapper}.{name}", np.ascontiguousarray(value))
                      for name, value in values.items()]
            suffix = "_reverse" if direction else ""
            flat_names += [f"{name}_l{layer}{suffix}"
                           for name in (FLAT_NAMES if spec.bias else FLAT_NAMES[:2])]
    flat = [(name, value) for name, (_, value) in zip(flat_names, cells, strict=False)]
    return dict(flat + cells)


def _text(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return b"X" + struct.pack("<I", len(encoded)) + encoded


def _int(value: int) -> bytes:
    return b"J" + struct.pack("<i", value) if value >= 256 else b"K" + bytes([value])


def pickle_dict(state: Mapping[str, np.ndarray]) -> bytes:
    """``state`` pickled as ``paddle.save`` pickles a state dict: a dict of NumPy arrays,
    each ``numpy._core.multiarray._reconstruct`` and its state (protocol 4, no framing)."""
    out = [b"\x80\x04}("]
    for key, value in state.items():
        array = np.ascontiguousarray(value)
        code = {"float16": "f2", "float32": "f4", "float64": "f8"}[array.dtype.name]
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        out += [_text(key), b"cnumpy._core.multiarray\n_reconstruct\n",
                b"cnumpy\nndarray\n", b"K\x00\x85C\x01b\x87R",
                b"(K\x01(", *(_int(dim) for dim in array.shape), b"t",
                b"cnumpy\ndtype\n", _text(code), b"\x89\x88\x87R",
                b"(K\x03X\x01\x00\x00\x00<NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb",
                b"\x89", b"\x8e" + struct.pack("<Q", len(raw)) + raw, b"tb"]
    out.append(b"u.")
    return b"".join(out)
