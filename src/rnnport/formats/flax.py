"""Flax (JAX): the parameters of ``flax.linen`` and ``flax.nnx`` recurrent cells.

Sources: a nested mapping of arrays — a dict, a ``FrozenDict``, linen ``variables`` (the
``params`` collection is used), an NNX ``State`` or its ``to_pure_dict()`` — a ``.msgpack``
checkpoint (``flax.serialization.to_bytes``) or its bytes, decoded by
:mod:`rnnport.formats._msgpack`; an NNX module (its ``Param`` state, and its cells' ``gate_fn``
and ``activation_fn``); or a bound linen module (``module.bind(variables)``, what
``write(..., module=True)`` returns). A pytree of NumPy arrays and a ``.msgpack`` file
read without JAX or Flax; a module source imports nothing either, it is read through its
attributes.

Cells (a ``Dense`` kernel is ``(in, out)``, ``y = x @ kernel``: canonical ``W = kernel.T``)::

    linen LSTMCell, OptimizedLSTMCell; nnx LSTMCell (nnx names ``if`` ``if_``):
        ii if ig io   kernels (I, H), no bias         → weight_ih rows i f g o
        hi hf hg ho   kernels (H, H), bias (H,) each  → weight_hh, bias_hh; bias_ih zeros
        i = gate(x·ii + h·hi + b_hi) …   c' = f∘c + i∘g   h' = o∘act(c')
    nnx OptimizedLSTMCell: dense_i kernel (I, 4H); dense_h kernel (H, 4H), bias (4H,);
        columns i f g o
    linen GRUCell: ir iz in kernels (I, H) with bias; hr hz kernels (H, H) without; hn (H, H)
        with bias: n = act(x·in + b_in + r∘(h·hn + b_hn)), h' = (1 − z)∘n + z∘h
        → the reset-after GRU: bias_ih = [b_ir; b_iz; b_in], bias_hh = [0; 0; b_hn]
    nnx GRUCell: dense_i kernel (I, 3H), bias (3H,); dense_h kernel (H, 3H) without bias;
        columns r z n (no recurrent candidate bias)
    SimpleCell (linen i, h; nnx dense_i, dense_h): i kernel (I, H) with bias, h kernel
        (H, H): h' = act(x·i + b + h·h) → rnn_tanh (tanh) or rnn_relu (relu)

``MGUCell`` and ``ConvLSTMCell`` are refused by name. Wrappers: ``nn.RNN`` / ``nnx.RNN``
keep their cell under ``cell``; ``nn.Bidirectional`` / ``nnx.Bidirectional`` under
``forward_rnn`` and ``backward_rnn`` (outputs concatenated, forward first: the canonical
bidirectional layer). Every layer of a tree, in the order of its scope names (``RNN_0``,
``RNN_1``, ``layers_0`` … numbers compared as numbers; an NNX ``Sequential``'s ``layers``
0, 1 …), is one stack when each reads the one before's output; otherwise ``scope=`` (a
``/``-joined path) picks one network. A number is ASCII digits, as Flax writes them: a
scope named with other digits (``layers_٣``) is a name, and says no order. Two keys that
read as one string (``1`` and ``"1"``) and a scope name of more than :data:`MAX_SCOPE`
characters are refused; the tree is walked without recursion, at most :data:`MAX_DEPTH`
levels deep.

What parameters do not record: ``gate_fn`` and ``activation_fn`` (options, by name:
:data:`FUNCTIONS`; default sigmoid and tanh, said in ``notes``); a module source gives its
own, and a function rnnport has no name for is refused unless the option names it.
``nn.RNN(reverse=True)``, a ``SimpleCell``'s ``residual=True`` and a ``Bidirectional``'s
``merge_fn`` other than concatenation are refused on a module source and assumed absent on
a pytree (said in ``notes``).

Writing gives the linen tree ``{"params": …}`` of NumPy arrays (``api="nnx"``: the NNX pure
dict) for an ``nn.RNN`` (``nnx.RNN``) of the network's cell, an ``nn.Bidirectional`` of two,
or an ``nn.Sequential`` (``nnx.Sequential``) of layers, and with ``module=True`` that module
itself holding the parameters (a bound linen module, or an NNX module): call it on ``(batch,
time, input)``. ``cell="OptimizedLSTMCell"`` picks that LSTM cell. Flax keeps one LSTM and
one simple-RNN bias (the sum), a GRU's input-side biases summed with the recurrent r and z
ones, and ``b_hn`` apart (the nnx ``GRUCell`` has no ``b_hn``: a network with one is
refused there). Flax cells always carry biases: a network without them gets zeros.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, UnknownOptionError, UnsupportedFeatureError
from ..gates import CANONICAL, block
from ..io.atomic import atomic_write, check_target
from ..io.inputs import read_file
from ..model import RNN, Model, stack
from ..spec import Spec
from ._common import close_matches, describe, is_path, listed, require, to_numpy
from ._protocol import Choices, Format, NamedArray, Suffix

__all__ = ["FORMAT", "FUNCTIONS", "read", "sniff", "write"]

READ_OPTIONS = frozenset({"scope", "gate_fn", "activation_fn"})
WRITE_OPTIONS = frozenset({"api", "cell", "module"})
SUFFIX = ".msgpack"

# Flax's activation functions (jax.nn's, which flax.linen re-exports) that a canonical
# network computes: name → the canonical activation.
FUNCTIONS: dict[str, tuple[str, float, float]] = {
    "sigmoid": ("Sigmoid", 0.0, 0.0), "tanh": ("Tanh", 0.0, 0.0), "relu": ("Relu", 0.0, 0.0),
    "hard_sigmoid": ("HardSigmoid", 1 / 6, 0.5), "soft_sign": ("Softsign", 0.0, 0.0),
    "softplus": ("Softplus", 0.0, 0.0), "elu": ("Elu", 1.0, 0.0),
    "leaky_relu": ("LeakyRelu", 0.01, 0.0),
}
NAMES = {value: name for name, value in FUNCTIONS.items()}

LSTM_INPUT = ("ii", "if", "ig", "io")
LSTM_RECURRENT = ("hi", "hf", "hg", "ho")
GRU_KEYS = frozenset({"ir", "iz", "in", "hr", "hz", "hn"})
REFUSED = {frozenset({"if", "hf", "in", "hn"}): "MGUCell (the minimal gated unit)"}
WRAPPERS = ("cell", "forward_rnn", "backward_rnn")
MAX_DEPTH = 64
MAX_SCOPE = 4096  # characters of one scope's name: Flax names modules like RNN_0


# -- what a tree holds -----------------------------------------------------------------------


def _pure(value: Any) -> Any:
    if hasattr(value, "to_pure_dict") and type(value).__module__.startswith("flax"):
        from flax import nnx  # an NNX State: flax is installed

        return nnx.to_pure_dict(value)
    return value


def _plain(value: Any, where: str) -> Any:
    """A nested mapping of arrays as plain dicts of NumPy arrays: FrozenDicts, NNX States
    (Variables' ``.value``) and jax arrays included; lists become dicts keyed by index. A
    subtree reached twice (shared) is converted once. Walked without recursion, at most
    :data:`MAX_DEPTH` levels deep; two keys that read as one string (``1`` and ``"1"``) are
    refused rather than one dropped."""
    done: dict[int, tuple[Any, Any]] = {}  # id → (the subtree, kept alive; its conversion)
    value = _pure(value)
    if not isinstance(value, (Mapping, list, tuple)):
        return _leaf(value, where)
    top: dict[str, Any] = {}
    # Subtrees being converted: (the original, its conversion, its items left, where).
    pending = [(value, top, iter(_items(value)), where)]
    while pending:
        original, converted, items, here = pending[-1]
        entry = next(items, None)
        if entry is None:
            done[id(original)] = (original, converted)
            pending.pop()
            continue
        key, item = entry
        name = str(key)
        inner = f"{here}/{name[:60]}{'…' if len(name) > 60 else ''}"
        if name in converted:
            raise FormatError(f"{inner}: two keys read as {name[:60]!r} (Flax's keys are "
                              "strings); expected each key once.")
        if id(item) in done:
            converted[name] = done[id(item)][1]
            continue
        item = _pure(item)
        if isinstance(item, (Mapping, list, tuple)):
            if len(pending) >= MAX_DEPTH:
                raise FormatError(f"{inner}: nested more than {MAX_DEPTH} levels; expected a "
                                  "Flax parameter tree.")
            converted[name] = {}
            pending.append((item, converted[name], iter(_items(item)), inner))
        else:
            converted[name] = _leaf(item, inner)
    return top


def _items(value: Any) -> Any:
    return value.items() if isinstance(value, Mapping) else enumerate(value)


def _leaf(value: Any, where: str) -> Any:
    if hasattr(value, "value") and not isinstance(value, np.ndarray) and \
            type(value).__module__.startswith("flax"):
        value = value.value
    return to_numpy(value, where)


def _natural(key: str) -> tuple[Any, ...]:
    """A scope's sort key: its runs of ASCII digits (the numbers Flax writes, ``layers_10``)
    compared as numbers, the rest as text. Other digits (``layers_٣``, ``²``) are text: Flax
    writes none, and Python's ``int`` would read some of them and not others."""
    parts = re.split(r"([0-9]+)", key)
    return tuple((len(part.lstrip("0")), part.lstrip("0")) if index % 2 else part
                 for index, part in enumerate(parts))


def _cell_kind(node: Mapping[str, Any]) -> str | None:
    """Which cell layout a mapping's keys are, or None."""
    keys = frozenset(node)
    if keys >= {"ii", "hi", "hf", "hg", "ho", "ig", "io"} and ("if" in keys or "if_" in keys):
        return "lstm"
    if keys == GRU_KEYS:
        return "gru"
    if keys == {"i", "h"}:
        return "simple"
    if keys == {"dense_i", "dense_h"}:
        return "dense"
    for refused, name in REFUSED.items():
        if keys == refused:
            return f"refused:{name}"
    return None


def _layers(tree: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(scope path, node) of every layer: a cell (under ``cell`` or bare) or a
    bidirectional pair, in scope order (walked without recursion; a tree :func:`_plain`
    made is at most :data:`MAX_DEPTH` deep)."""
    found = []
    pending: list[tuple[str, Mapping[str, Any]]] = [("", tree)]
    while pending:
        path, node = pending.pop()
        if ("forward_rnn" in node and "backward_rnn" in node) or _cell_kind(node) is not None:
            found.append((path, node))
            continue
        scopes = [key for key in node if isinstance(node[key], Mapping)]
        for key in scopes:
            if len(key) > MAX_SCOPE:
                raise FormatError(f"{path or 'the tree'}: holds a scope named with {len(key):,} "
                                  f"characters ({key[:40]!r}…); expected a Flax module's name "
                                  f"(at most {MAX_SCOPE:,}).")
        pending.extend((f"{path}/{key}" if path else key, node[key])
                       for key in reversed(sorted(scopes, key=_natural)))
    return found


def _cell_of(node: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """The cell mapping under an RNN wrapper (``cell``), or the node itself."""
    if _cell_kind(node) is not None:
        return node
    if set(node) == {"cell"} and isinstance(node["cell"], Mapping):
        return node["cell"]
    raise FormatError(f"{where}: holds {sorted(node)}; expected a Flax cell's parameters "
                      "(ii … ho, ir … hn, i and h, or dense_i and dense_h), or an RNN wrapper "
                      "holding one under 'cell'.")


# -- reading one cell ------------------------------------------------------------------------


def _array(node: Mapping[str, Any], key: str, field: str, where: str) -> np.ndarray:
    if key not in node or not isinstance(node[key], Mapping) or field not in node[key]:
        raise FormatError(f"{where}: no {key}/{field}; expected it in this cell's parameters "
                          f"(found {sorted(node)}).")
    array = np.asarray(node[key][field])
    if array.dtype.kind != "f":
        raise FormatError(f"{where}/{key}/{field}: {array.dtype} values; expected floats.")
    return array


def _shaped(array: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    if array.shape != shape:
        raise FormatError(f"{what}: shape {list(array.shape)}; expected {list(shape)} (from "
                          "the other parameters of the cell). The parameters disagree.")
    return array


def _read_cell(node: Mapping[str, Any], where: str, functions: tuple[str, str]) -> RNN:
    """One direction of one layer as a one-layer network."""
    kind = _cell_kind(node)
    if kind is not None and kind.startswith("refused:"):
        raise UnsupportedFeatureError(f"{where}: a Flax {kind.split(':', 1)[1]}; rnnport reads "
                                      "LSTMCell, OptimizedLSTMCell, GRUCell and SimpleCell.")
    gate, act = functions
    if kind == "lstm":
        forget = "if" if "if" in node else "if_"
        names = ("ii", forget, "ig", "io")
        kernels = [_array(node, k, "kernel", where) for k in names]
        recurrent = [_array(node, k, "kernel", where) for k in LSTM_RECURRENT]
        biases = [_array(node, k, "bias", where) for k in LSTM_RECURRENT]
        inputs, hidden = kernels[0].shape if kernels[0].ndim == 2 else (0, 0)
        weight_ih = np.concatenate([_shaped(k, (inputs, hidden), f"{where}/{n}/kernel").T
                                    for k, n in zip(kernels, names, strict=True)])
        weight_hh = np.concatenate([_shaped(k, (hidden, hidden), f"{where}/{n}/kernel").T
                                    for k, n in zip(recurrent, LSTM_RECURRENT, strict=True)])
        bias_hh = np.concatenate([_shaped(b, (hidden,), f"{where}/{n}/bias")
                                  for b, n in zip(biases, LSTM_RECURRENT, strict=True)])
        cell, bias_ih = "lstm", np.zeros_like(bias_hh)
    elif kind == "gru":
        kernels = [_array(node, k, "kernel", where) for k in ("ir", "iz", "in")]
        inputs, hidden = kernels[0].shape if kernels[0].ndim == 2 else (0, 0)
        weight_ih = np.concatenate([_shaped(k, (inputs, hidden), f"{where}/{n}/kernel").T
                                    for k, n in zip(kernels, ("ir", "iz", "in"), strict=True)])
        weight_hh = np.concatenate([_shaped(_array(node, k, "kernel", where), (hidden, hidden),
                                            f"{where}/{k}/kernel").T for k in ("hr", "hz", "hn")])
        bias_ih = np.concatenate([_shaped(_array(node, k, "bias", where), (hidden,),
                                          f"{where}/{k}/bias") for k in ("ir", "iz", "in")])
        for key in ("hr", "hz"):
            if "bias" in node[key]:
                raise FormatError(f"{where}/{key}: a bias; a Flax GRUCell's {key} has none.")
        bias_hh = np.concatenate([np.zeros(2 * hidden, bias_ih.dtype),
                                  _shaped(_array(node, "hn", "bias", where), (hidden,),
                                          f"{where}/hn/bias")])
        cell = "gru"
    else:  # a SimpleCell (i, h) or an NNX dense_i / dense_h pair
        first, second = ("i", "h") if kind == "simple" else ("dense_i", "dense_h")
        kernel_i = _array(node, first, "kernel", where)
        kernel_h = _array(node, second, "kernel", where)
        if kernel_i.ndim != 2 or kernel_h.ndim != 2 or kernel_h.shape[1] % kernel_h.shape[0]:
            raise FormatError(f"{where}: kernels {list(kernel_i.shape)} and "
                              f"{list(kernel_h.shape)}; expected (input, G·H) and (H, G·H).")
        hidden = kernel_h.shape[0]
        gates = kernel_h.shape[1] // hidden
        inputs = kernel_i.shape[0]
        _shaped(kernel_i, (inputs, gates * hidden), f"{where}/{first}/kernel")
        weight_ih, weight_hh = kernel_i.T, kernel_h.T
        zeros = np.zeros(gates * hidden, kernel_i.dtype)
        if gates == 4:  # nnx OptimizedLSTMCell: the bias is on the recurrent side
            cell, bias_ih = "lstm", zeros
            bias_hh = _shaped(_array(node, second, "bias", where), (4 * hidden,),
                              f"{where}/{second}/bias")
        elif gates in (1, 3):  # SimpleCell, nnx GRUCell: the bias is on the input side
            cell = "gru" if gates == 3 else "rnn"
            bias_ih = _shaped(_array(node, first, "bias", where), (gates * hidden,),
                              f"{where}/{first}/bias")
            bias_hh = zeros
        else:
            raise FormatError(f"{where}: {second}/kernel is {list(kernel_h.shape)}, {gates} "
                              "blocks of the hidden size; expected 1 (SimpleCell), 3 (GRUCell) "
                              "or 4 (OptimizedLSTMCell).")
    params = {"weight_ih": weight_ih, "weight_hh": weight_hh, "bias_ih": bias_ih,
              "bias_hh": bias_hh}
    if cell == "rnn":
        if act not in ("tanh", "relu"):
            raise UnsupportedFeatureError(
                f"{where}: a SimpleCell with activation_fn {act!r}; the canonical simple RNN is "
                "tanh or relu. Nothing was read.")
        return RNN(Spec(f"rnn_{act}", inputs, hidden), [[params]], copy=False)
    activations: tuple[tuple[str, float, float], ...] = ()
    if (gate, act) != ("sigmoid", "tanh"):
        activations = (FUNCTIONS[gate], FUNCTIONS[act]) + \
            ((FUNCTIONS[act],) if cell == "lstm" else ())
    return RNN(Spec(cell, inputs, hidden, activations=activations), [[params]], copy=False)


def _read_layer(path: str, node: Mapping[str, Any], where: str,
                functions: tuple[str, str]) -> RNN:
    label = f"{where}: {path or 'the tree'}"
    if "forward_rnn" in node and "backward_rnn" in node:
        extra = sorted(set(node) - {"forward_rnn", "backward_rnn"})
        if extra:
            raise FormatError(f"{label}: holds {extra} beside forward_rnn and backward_rnn; "
                              "expected a Bidirectional's two RNNs alone.")
        directions = [_read_cell(_cell_of(node[side], f"{label}/{side}"), f"{label}/{side}",
                                 functions) for side in ("forward_rnn", "backward_rnn")]
        if directions[0].spec != directions[1].spec:
            raise FormatError(f"{label}: the forward ({directions[0].spec.describe()}) and "
                              f"backward ({directions[1].spec.describe()}) cells differ; the "
                              "canonical bidirectional layer has one shape for both.")
        spec = directions[0].spec.replace(bidirectional=True)
        return RNN(spec, [[d.params[0][0] for d in directions]], copy=False)
    return _read_cell(_cell_of(node, label), label, functions)


def _functions(options: Mapping[str, Any]) -> tuple[str, str]:
    chosen = []
    for option, default in (("gate_fn", "sigmoid"), ("activation_fn", "tanh")):
        value = options.get(option, default)
        if value is None:
            value = default
        if value not in FUNCTIONS:
            raise UnknownOptionError(
                f"read(fmt='flax'): {option}={value!r}; expected one of "
                f"{listed(FUNCTIONS)} (the names of jax.nn's functions)."
                f"{close_matches(str(value), FUNCTIONS)}")
        chosen.append(value)
    return chosen[0], chosen[1]


# -- sources ---------------------------------------------------------------------------------


def _is_module(value: Any) -> bool:
    return type(value).__module__.startswith(("flax.nnx", "flax.linen")) and \
        not isinstance(value, Mapping)


def _function_name(function: Any, where: str) -> str:
    name = getattr(function, "__name__", None)
    module = getattr(function, "__module__", "") or ""
    if name in FUNCTIONS and module.startswith(("jax", "flax")):
        return str(name)
    raise UnsupportedFeatureError(
        f"{where}: {function!r}, a function rnnport has no name for; expected one of jax.nn's "
        f"{listed(FUNCTIONS)}. The numbers would change: pass gate_fn= / activation_fn= naming "
        "what it computes if it is one of those.")


def _module_tree(module: Any, options: dict[str, Any]) -> Any:
    """A module's parameters, and (unless told) its cells' functions into ``options``."""
    if type(module).__module__.startswith("flax.linen"):
        variables = getattr(module, "variables", None)
        if not variables:
            raise FormatError(f"read(fmt='flax'): an unbound {type(module).__name__}; linen "
                              "modules hold no parameters. Pass module.bind(variables), or the "
                              "variables (the 'params' tree) themselves.")
        tree = variables
    else:
        from flax import nnx  # an NNX module: flax is installed

        tree = nnx.state(module, nnx.Param)
    cells = _module_cells(module)
    where = f"read(fmt='flax') of a {type(module).__name__}"
    for attribute, option in (("gate_fn", "gate_fn"), ("activation_fn", "activation_fn")):
        if option in options:
            continue
        names = {_function_name(getattr(cell, attribute), f"{where}: {attribute}")
                 for cell in cells if hasattr(cell, attribute)}
        if len(names) > 1:
            raise UnsupportedFeatureError(f"{where}: its cells use different {attribute}s "
                                          f"({listed(sorted(names))}); read them one by one.")
        if names:
            options[option] = names.pop()
    for cell in cells:
        if getattr(cell, "residual", False):
            raise UnsupportedFeatureError(f"{where}: a SimpleCell with residual=True (h' adds "
                                          "h); the canonical simple RNN has no residual.")
    parts = _module_parts(module)
    backward = {id(getattr(part, "backward_rnn", None)) for part in parts}
    for wrapper in parts:
        if hasattr(wrapper, "cell") and getattr(wrapper, "reverse", False) is True and \
                id(wrapper) not in backward:
            raise UnsupportedFeatureError(f"{where}: an RNN with reverse=True; rnnport reads "
                                          "forward RNNs and Bidirectional pairs.")
        merge = getattr(wrapper, "merge_fn", None)
        if merge is not None and getattr(merge, "__name__", "") != "_concatenate":
            raise UnsupportedFeatureError(f"{where}: a Bidirectional with merge_fn {merge!r}; "
                                          "the canonical layer concatenates the directions.")
    return tree


def _module_parts(module: Any) -> list[Any]:
    """The module and its submodules (attributes and list items), each once, depth first."""
    found: list[Any] = []
    seen: set[int] = set()
    pending = [(module, 0)]
    while pending:
        part, depth = pending.pop()
        if id(part) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(part))
        found.append(part)
        values = list(vars(part).values()) if hasattr(part, "__dict__") else []
        items = [item for value in values
                 for item in (value if isinstance(value, (list, tuple)) else [value])]
        pending.extend((item, depth + 1) for item in reversed(items) if _is_module(item))
    return found


def _module_cells(module: Any) -> list[Any]:
    return [part for part in _module_parts(module) if hasattr(part, "gate_fn") or
            type(part).__name__ == "SimpleCell"]


ORBAX_MARKERS = ("_CHECKPOINT_METADATA", "_METADATA", "manifest.ocdbt")


def _is_orbax(path: Path) -> bool:
    return path.is_dir() and any((path / marker).exists() for marker in ORBAX_MARKERS)


def _tree(source: Any, options: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The source's parameter tree as plain dicts, and how to name it in errors."""
    if is_path(source) and _is_orbax(Path(source)):
        raise UnsupportedFeatureError(
            f"{source}: an Orbax checkpoint folder (TensorStore / OCDBT files); rnnport reads "
            "Flax parameters as a tree or a flax.serialization .msgpack, not Orbax's storage. "
            "Restore it with orbax.checkpoint (e.g. ocp.StandardCheckpointer().restore(path)) "
            "and pass the tree, or save it with flax.serialization.to_bytes.")
    if is_path(source):
        from . import _msgpack as msgpack

        path = Path(source)
        data = read_file(path, str(path))
        return _plain(msgpack.decode(data, source=str(path)), str(path)), str(path)
    if isinstance(source, (bytes, bytearray, memoryview)):
        from . import _msgpack as msgpack

        return _plain(msgpack.decode(source, source="Flax msgpack bytes"),
                      "msgpack"), "Flax msgpack bytes"
    if _is_module(source):
        return _plain(_module_tree(source, options), "module"), f"a {type(source).__name__}"
    if isinstance(source, Mapping) or hasattr(source, "to_pure_dict"):
        return _plain(source, "tree"), "the parameter tree"
    raise FormatError(f"read(fmt='flax'): expected a Flax parameter tree (a nested dict of "
                      f"arrays), a .msgpack file or its bytes, or a Flax module; got "
                      f"{describe(source)}.")


def _root(tree: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``params`` collection of linen ``variables``, or the tree itself."""
    return tree["params"] if set(tree) == {"params"} and isinstance(tree["params"], Mapping) \
        else tree


def _all_layers(tree: Mapping[str, Any], where: str) -> list[tuple[str, Any]]:
    """Every layer of the tree (:func:`_layers`), or an error saying there is none."""
    root = _root(tree)
    layers = _layers(root)
    if not layers:
        raise FormatError(f"{where}: no Flax recurrent cell in the tree; expected one of "
                          "LSTMCell (ii … ho), GRUCell (ir … hn), SimpleCell (i, h) or an NNX "
                          f"cell (dense_i, dense_h). Its top-level keys: {listed(sorted(root))}.")
    return layers


def _choose(tree: Mapping[str, Any], where: str, options: Mapping[str, Any],
            functions: tuple[str, str]) -> list[tuple[str, RNN]]:
    layers = _all_layers(tree, where)
    scope = options.get("scope")
    if scope is not None:
        chosen = [(path, node) for path, node in layers
                  if path == scope or path.startswith(f"{scope}/")]
        if not chosen:
            raise FormatError(f"{where}: scope={scope!r} holds no layer; the layers: "
                              f"{listed(path or '(the top)' for path, _ in layers)}."
                              f"{close_matches(str(scope), [p for p, _ in layers])}")
        layers = chosen
    return [(path, _read_layer(path, node, where, functions)) for path, node in layers]


def read(source: Any, **options: Any) -> Model:
    """The network a Flax source holds (see the module's docstring)."""
    options = dict(options)
    tree, where = _tree(source, options)
    functions = _functions(options)
    layers = _choose(tree, where, options, functions)
    if len(layers) == 1:
        return layers[0][1]
    return stack([model for _, model in _ordered(layers, where)])


def _chains(layers: list[tuple[str, RNN]]) -> bool:
    return all(first.spec.num_directions * first.spec.output_size == second.spec.input_size
               for (_, first), (_, second) in pairwise(layers))


def _stem(path: str) -> str:
    """A layer's scope without its number (and an RNN's ``cell``): ``RNN_0/cell`` → ``RNN_``,
    ``layers/1`` → ``layers/``."""
    path = path[:-len("/cell")] if path.endswith("/cell") else path
    return re.sub(r"[0-9]+$", "", path.rsplit("/", 1)[-1]) + "@" + path.rpartition("/")[0]


MAX_ORDERED = 6  # layers whose order is worked out from their sizes (6! = 720 orders)


def _ordered(layers: list[tuple[str, RNN]], where: str) -> list[tuple[str, RNN]]:
    """The layers in the order they run. Numbered scopes of one kind (``RNN_0``, ``RNN_1``;
    ``layers_0`` …) say it; scopes of different kinds (linen's compact names ``GRUCell_0``,
    ``LSTMCell_0``) do not, and the order is the one way their sizes chain — or refused."""
    listing = listed(path or "(the top)" for path, _ in layers)
    if len({_stem(path) for path, _ in layers}) == 1:
        if _chains(layers):
            return layers
        raise FormatError(f"{where}: the layers {listing} do not chain (each one's output "
                          "feeding the next one's input); pass scope= to pick one.")
    if len(layers) <= MAX_ORDERED:
        from itertools import permutations

        orders = [list(order) for order in permutations(layers) if _chains(list(order))]
        if len(orders) == 1:
            return orders[0]
    raise FormatError(f"{where}: the scope names of the layers {listing} do not say the order "
                      "they run in, and their sizes do not settle it; pass scope= to read one "
                      "network at a time.")


def networks(source: Any) -> Choices:
    tree, _ = _tree(source, {})
    layers = _layers(_root(tree))
    return Choices("scope", tuple((path, "a Flax layer") for path, _ in layers if path))


def notes(source: Any, **options: Any) -> list[str]:
    out = []
    if not _is_module(source):
        given = [name for name in ("gate_fn", "activation_fn") if options.get(name)]
        if len(given) < 2:
            out.append("gate_fn and activation_fn are not stored in Flax parameters: read as "
                       f"{options.get('gate_fn') or 'sigmoid'} and "
                       f"{options.get('activation_fn') or 'tanh'} (the cells' defaults); pass "
                       "gate_fn= / activation_fn= if the model was built with others.")
        out.append("an RNN's reverse, a SimpleCell's residual and a Bidirectional's merge_fn "
                   "are not stored either: read as forward, no residual, concatenation.")
    return out


def sniff(source: Any) -> bool:
    if _is_module(source):
        return True
    if is_path(source):
        return os.fspath(source).lower().endswith(SUFFIX) or _is_orbax(Path(source))
    return _holds_cell(source, set())


def _holds_cell(value: Any, seen: set[int]) -> bool:
    """Whether a nested mapping holds a Flax cell, from its keys alone (no leaf is
    converted: sniffing a state_dict of tensors must not copy them); depth first, without
    recursion, at most :data:`MAX_DEPTH` levels."""
    pending = [(value, 0)]
    while pending:
        value, depth = pending.pop()
        if depth > MAX_DEPTH or id(value) in seen:
            continue
        seen.add(id(value))
        value = _pure(value)
        if not isinstance(value, Mapping):
            continue
        node = {str(key): item for key, item in value.items()}
        if _cell_kind(node) is not None or {"forward_rnn", "backward_rnn"} <= set(node):
            return True
        pending.extend((item, depth + 1) for item in reversed(node.values())
                       if isinstance(item, Mapping) or hasattr(item, "to_pure_dict"))
    return False


# -- writing ---------------------------------------------------------------------------------


def _dense(kernel: np.ndarray, bias: np.ndarray | None = None) -> dict[str, np.ndarray]:
    out = {"kernel": np.ascontiguousarray(kernel)}
    if bias is not None:
        out["bias"] = np.ascontiguousarray(bias)
    return out


def _cell_tree(layer: RNN, direction: int, api: str, lstm_cell: str,
               where: str) -> dict[str, Any]:
    spec = layer.spec
    named = {k: np.asarray(v) for k, v in layer.params[0][direction].items()}
    zeros = np.zeros(spec.gate_count * spec.hidden_size, dtype=layer.dtype)
    bias_ih, bias_hh = (named["bias_ih"], named["bias_hh"]) if spec.bias else (zeros, zeros)
    order = CANONICAL["lstm" if spec.cell == "lstm" else "gru" if spec.cell == "gru" else "rnn"]
    w, r = named["weight_ih"], named["weight_hh"]
    if spec.cell == "lstm":
        bias = bias_ih + bias_hh
        if api == "nnx" and lstm_cell == "OptimizedLSTMCell":
            return {"dense_i": _dense(w.T), "dense_h": _dense(r.T, bias)}
        forget = "if_" if api == "nnx" else "if"
        tree = {name: _dense(block(w, order, gate).T)
                for name, gate in zip(("ii", forget, "ig", "io"), "ifgo", strict=True)}
        tree.update({name: _dense(block(r, order, gate).T, block(bias, order, gate))
                     for name, gate in zip(LSTM_RECURRENT, "ifgo", strict=True)})
        return tree
    if spec.cell == "gru":
        hidden = spec.hidden_size
        candidate = block(bias_hh, order, "n")
        input_side = bias_ih + np.concatenate([bias_hh[:2 * hidden], np.zeros_like(candidate)])
        if api == "nnx":
            if np.any(candidate):
                raise UnsupportedFeatureError(
                    f"{where}: the nnx GRUCell has no recurrent candidate bias, and this GRU's "
                    "bias_hh for n is nonzero (it acts inside r∘(…)). Write api='linen', whose "
                    "GRUCell keeps it (hn's bias).")
            return {"dense_i": _dense(w.T, input_side), "dense_h": _dense(r.T)}
        tree = {name: _dense(block(w, order, gate).T, block(input_side, order, gate))
                for name, gate in zip(("ir", "iz", "in"), "rzn", strict=True)}
        tree.update({"hr": _dense(block(r, order, "r").T), "hz": _dense(block(r, order, "z").T),
                     "hn": _dense(block(r, order, "n").T, candidate)})
        return tree
    first, second = ("i", "h") if api == "linen" else ("dense_i", "dense_h")
    return {first: _dense(w.T, bias_ih + bias_hh), second: _dense(r.T)}


def _layer_tree(layer: RNN, api: str, lstm_cell: str, where: str) -> dict[str, Any]:
    if layer.spec.bidirectional:
        return {side: {"cell": _cell_tree(layer, d, api, lstm_cell, where)}
                for d, side in enumerate(("forward_rnn", "backward_rnn"))}
    return {"cell": _cell_tree(layer, 0, api, lstm_cell, where)}


def _check(model: Model, options: Mapping[str, Any]) -> tuple[str, str]:
    api, cell = options.get("api", "linen"), options.get("cell", "LSTMCell")
    if api not in ("linen", "nnx"):
        raise FormatError(f"write(fmt='flax'): api={api!r}; expected 'linen' or 'nnx'.")
    if cell not in ("LSTMCell", "OptimizedLSTMCell"):
        raise FormatError(f"write(fmt='flax'): cell={cell!r}; expected 'LSTMCell' or "
                          "'OptimizedLSTMCell' (the LSTM cell to write; GRUs and simple RNNs "
                          "have one cell each).")
    for index, layer in enumerate(model.layers()):
        if layer.spec.activations:
            names = [NAMES.get(activation) for activation in layer.spec.activations]
            lstm = layer.spec.cell == "lstm"
            if None in names or (lstm and names[1] != names[2]):
                raise UnsupportedFeatureError(
                    f"write(fmt='flax') layer {index}: activations {layer.spec.activations}; a "
                    "Flax cell takes one gate_fn and one activation_fn (an LSTM's candidate and "
                    f"output share it), from {listed(FUNCTIONS)}.")
    return api, cell


def write(model: Model, path: str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """The parameter tree (see the module's docstring); ``module=True``: the Flax module
    holding it; ``path`` saves the tree as a ``.msgpack`` checkpoint."""
    api, lstm_cell = _check(model, options)
    layers = model.layers()
    where = "write(fmt='flax')"
    trees = [_layer_tree(layer, api, lstm_cell, f"{where} layer {k}")
             for k, layer in enumerate(layers)]
    if len(trees) == 1:
        body: dict[str, Any] = trees[0]
    elif api == "linen":
        body = {f"layers_{k}": tree for k, tree in enumerate(trees)}
    else:
        body = {"layers": {k: tree for k, tree in enumerate(trees)}}
    tree = {"params": body} if api == "linen" else body
    if path is not None:
        target = check_target(path)
        if target.suffix.lower() != SUFFIX:
            raise FormatError(f"{where}: path {str(target)!r} ends in {target.suffix!r}; "
                              f"expected {SUFFIX!r} (flax.serialization's msgpack). Nothing was "
                              "written.")
        from . import _msgpack as msgpack

        data = msgpack.encode_flax(tree)
        atomic_write(target, lambda handle: handle.write(data))
    if options.get("module"):
        return _module(model, tree, api, lstm_cell)
    return tree


def _module(model: Model, tree: Mapping[str, Any], api: str, lstm_cell: str) -> Any:
    require("flax", extra="flax", purpose="write(fmt='flax', module=True)")
    import jax
    import jax.numpy as jnp

    layers = model.layers()
    first = layers[0].spec

    def functions(spec: Spec) -> dict[str, Any]:
        """The cell's own gate and activation functions (each layer of a stack its own)."""
        if not spec.activations:
            return {"gate_fn": jax.nn.sigmoid, "activation_fn": jnp.tanh}
        names = [NAMES[a] for a in spec.activations]
        return {"gate_fn": getattr(jax.nn, names[0]), "activation_fn": getattr(jax.nn, names[1])}
    if api == "linen":
        import flax.linen as nn

        def linen_cell(spec: Spec) -> Any:
            if spec.cell == "lstm":
                kind = nn.OptimizedLSTMCell if lstm_cell == "OptimizedLSTMCell" else nn.LSTMCell
                return kind(spec.hidden_size, **functions(spec))
            if spec.cell == "gru":
                return nn.GRUCell(spec.hidden_size, **functions(spec))
            return nn.SimpleCell(spec.hidden_size, activation_fn=getattr(jax.nn, spec.nonlinearity))

        def linen_layer(spec: Spec) -> Any:
            if spec.bidirectional:
                return nn.Bidirectional(nn.RNN(linen_cell(spec)), nn.RNN(linen_cell(spec)))
            return nn.RNN(linen_cell(spec))

        built = linen_layer(first) if len(layers) == 1 else \
            nn.Sequential([linen_layer(layer.spec) for layer in layers])
        return built.bind(jax.tree_util.tree_map(jnp.asarray, dict(tree)))
    from flax import nnx

    rngs = nnx.Rngs(0)

    def nnx_cell(spec: Spec, inputs: int) -> Any:
        if spec.cell == "lstm":
            kind = nnx.OptimizedLSTMCell if lstm_cell == "OptimizedLSTMCell" else nnx.LSTMCell
            return kind(inputs, spec.hidden_size, rngs=rngs, **functions(spec))
        if spec.cell == "gru":
            return nnx.GRUCell(inputs, spec.hidden_size, rngs=rngs, **functions(spec))
        return nnx.SimpleCell(inputs, spec.hidden_size, rngs=rngs,
                              activation_fn=getattr(jax.nn, spec.nonlinearity))

    def nnx_layer(spec: Spec) -> Any:
        if spec.bidirectional:
            return nnx.Bidirectional(nnx.RNN(nnx_cell(spec, spec.input_size)),
                                     nnx.RNN(nnx_cell(spec, spec.input_size)), rngs=rngs)
        return nnx.RNN(nnx_cell(spec, spec.input_size))

    built = nnx_layer(first) if len(layers) == 1 else \
        nnx.Sequential(*[nnx_layer(layer.spec) for layer in layers])
    state = nnx.state(built, nnx.Param)
    nnx.replace_by_pure_dict(state, jax.tree_util.tree_map(jnp.asarray, dict(tree)))
    nnx.update(built, state)
    return built


def _flat(tree: Mapping[str, Any], path: str = "") -> list[tuple[str, np.ndarray]]:
    out: list[tuple[str, np.ndarray]] = []
    for key, value in tree.items():
        name = f"{path}/{key}" if path else str(key)
        out.extend(_flat(value, name) if isinstance(value, Mapping) else [(name, value)])
    return out


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """Every array of a written tree, named by its ``/``-joined path."""
    return [NamedArray(name, np.asarray(array)) for name, array in _flat(native)]


def param_count(model: Model, **options: Any) -> int:
    """Parameters as Flax stores them: one LSTM or simple-RNN bias, a GRU's two."""
    return sum(np.asarray(array).size for _, array in _flat(write(model, **options)))


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """Flax restoring the ``.msgpack`` file ``source`` (``flax.serialization.msgpack_restore``)
    into the linen module of ``model``'s structure, and running it on ``x``; or why not."""
    import importlib.util

    if not (is_path(source) and os.fspath(source).lower().endswith(SUFFIX)):
        return "only a .msgpack file holds parameters Flax restores: no framework check"
    if importlib.util.find_spec("flax") is None:
        return "Flax is not installed: no framework check"
    import flax.serialization
    import jax.numpy as jnp

    try:
        tree = flax.serialization.msgpack_restore(Path(source).read_bytes())
        module = _module(model, tree, "linen", "LSTMCell")
        y = np.asarray(module(jnp.asarray(x)))
    except Exception as error:  # Flax's and JAX's errors have no common base
        return f"Flax cannot run {os.fspath(source)} ({str(error).splitlines()[0][:200]}): " \
            "no framework check"
    return f"Flax restoring {os.fspath(source)} into a linen module", y


def _holds_activations(spec: Spec) -> bool:
    names = [NAMES.get(activation) for activation in spec.activations]
    return None not in names and (spec.cell != "lstm" or names[1] == names[2])


def read_options_for(spec: Spec) -> dict[str, Any]:
    """Parameters do not record the cells' functions."""
    if spec.cell == "rnn_relu":
        return {"activation_fn": "relu"}
    if not spec.activations:
        return {}
    names = [NAMES[activation] for activation in spec.activations]
    return {"gate_fn": names[0], "activation_fn": names[1]}


FORMAT = Format(
    "flax", sniff=sniff, reader=read, writer=write, counter=param_count,
    explain_arrays=explain_arrays,
    read_options=READ_OPTIONS, write_options=WRITE_OPTIONS,
    one_bias=frozenset({"lstm", "gru", "rnn"}), always_bias=True,
    extra="flax", modules=("flax", "jax"),
    suffixes=(Suffix(SUFFIX, "a Flax msgpack checkpoint (flax.serialization.to_bytes)"),),
    read_options_for=read_options_for, activations=_holds_activations,
    layout_notes=("Flax keeps one Dense per gate (linen LSTMCell ii … ho, GRUCell ir … hn) or "
                  "one per side (nnx dense_i, dense_h), kernels (in, out): y = x @ kernel.",),
    networks=networks, notes=notes, framework_forward=framework_forward,
    names={"activations": "gate_fn / activation_fn", "reset_after": "GRUCell"})
