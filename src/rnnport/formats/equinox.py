"""Equinox (JAX): ``eqx.nn.LSTMCell`` and ``eqx.nn.GRUCell`` modules and their arrays.

Fields (PyTorch's orientation: ``W @ x``; gates stacked by rows)::

    LSTMCell   weight_ih (4H, I)  weight_hh (4H, H)  bias (4H,) or None     gates i f g o
               lin = W_ih x + W_hh h + bias;  c' = f∘c + i∘g;  h' = o∘tanh(c')
    GRUCell    weight_ih (3H, I)  weight_hh (3H, H)  bias (3H,), bias_n (H,) or None
               r, z = σ(rows r, z of W_ih x + bias + W_hh h)
               n = tanh(W_in x + bias_n' + r∘(W_hn h + bias_n)), h' = n + z∘(h − n)
               (bias_n' the n rows of bias) → the reset-after GRU

→ canonical ``weight_ih``, ``weight_hh`` as they are; an LSTM's ``bias`` is ``bias_ih``
(``bias_hh`` zeros: Equinox keeps one LSTM bias, the sum); a GRU's ``bias`` is ``bias_ih``
and ``bias_n`` the n rows of ``bias_hh`` (its r and z rows summed into ``bias``: exact in
function). ``use_bias=False`` leaves both out: a network without biases. Equinox has no
simple RNN cell (refused by name) and no layer-norm, projection or peephole LSTM.

A source is a cell, a mapping of those fields (arrays; ``None`` for a left-out bias), a
list of either for a stack (each layer reading the one before's output), and for a
bidirectional layer a mapping ``{"forward": cell, "backward": cell}`` — Equinox has no
bidirectional wrapper; rnnport's reading of such a pair is the canonical layer (the
backward cell run from each sequence's end, outputs concatenated). Reading arrays needs no
JAX; a cell object is read through its attributes.

Writing gives the same structure with NumPy arrays (``{"weight_ih": …, …}``, a list for
several layers, ``{"forward": …, "backward": …}`` for a bidirectional one); ``module=True``
gives the Equinox cells themselves (``eqx.nn.LSTMCell`` / ``GRUCell`` with those arrays).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import FormatError
from ..gates import CANONICAL, block
from ..model import RNN, Model, stack
from ..spec import Spec
from ._common import describe, require, to_numpy
from ._protocol import Format

__all__ = ["FORMAT", "read", "sniff", "write"]

FIELDS = ("weight_ih", "weight_hh", "bias", "bias_n")
SIDES = ("forward", "backward")


def _is_cell(value: Any) -> bool:
    return type(value).__module__.startswith("equinox") and hasattr(value, "weight_ih") and \
        hasattr(value, "weight_hh")


def _fields(source: Any, where: str) -> dict[str, np.ndarray | None]:
    if _is_cell(source):
        values = {name: getattr(source, name, None) for name in FIELDS}
    elif isinstance(source, Mapping):
        unknown = sorted(set(map(str, source)) - set(FIELDS))
        if unknown:
            raise FormatError(f"{where}: keys {unknown}; expected an Equinox cell's fields "
                              f"({', '.join(FIELDS)}).")
        values = {name: source.get(name) for name in FIELDS}
    else:
        raise FormatError(f"{where}: expected an eqx.nn.LSTMCell or GRUCell, or a mapping of "
                          f"its fields; got {describe(source)}.")
    out: dict[str, np.ndarray | None] = {}
    for name, value in values.items():
        if value is None:
            out[name] = None
            continue
        array = to_numpy(value, f"{where}.{name}")
        if array.dtype.kind != "f":
            raise FormatError(f"{where}.{name}: {array.dtype} values; expected floats.")
        out[name] = array
    return out


def _cell(source: Any, where: str) -> RNN:
    fields = _fields(source, where)
    weight_ih, weight_hh = fields["weight_ih"], fields["weight_hh"]
    if weight_ih is None or weight_hh is None or weight_ih.ndim != 2 or weight_hh.ndim != 2:
        raise FormatError(f"{where}: weight_ih and weight_hh must be 2-D arrays; got "
                          f"{None if weight_ih is None else list(weight_ih.shape)} and "
                          f"{None if weight_hh is None else list(weight_hh.shape)}.")
    hidden = weight_hh.shape[1]
    rows = weight_hh.shape[0]
    if rows not in (3 * hidden, 4 * hidden) or weight_ih.shape[0] != rows:
        raise FormatError(f"{where}: weight_ih {list(weight_ih.shape)} and weight_hh "
                          f"{list(weight_hh.shape)}; expected (4H, I) and (4H, H) for an "
                          "LSTMCell or (3H, I) and (3H, H) for a GRUCell.")
    cell = "lstm" if rows == 4 * hidden else "gru"
    bias, bias_n = fields["bias"], fields["bias_n"]
    if cell == "lstm" and bias_n is not None:
        raise FormatError(f"{where}: an LSTMCell's arrays with a bias_n; only a GRUCell has one.")
    spec = Spec(cell, weight_ih.shape[1], hidden, bias=bias is not None)
    params = {"weight_ih": weight_ih, "weight_hh": weight_hh}
    if bias is not None:
        if bias.shape != (rows,) or (cell == "gru" and (bias_n is None or bias_n.shape != (hidden,))):
            raise FormatError(f"{where}: bias {list(bias.shape)}"
                              + (f" and bias_n {None if bias_n is None else list(bias_n.shape)}"
                                 if cell == "gru" else "")
                              + f"; expected ({rows},)" + (f" and ({hidden},)" if cell == "gru"
                                                           else "") + ".")
        recurrent = np.zeros_like(bias)
        if cell == "gru":
            assert bias_n is not None
            recurrent[2 * hidden:] = bias_n
        params.update(bias_ih=bias, bias_hh=recurrent)
    elif bias_n is not None:
        raise FormatError(f"{where}: a bias_n without a bias; Equinox keeps both or neither.")
    return RNN(spec, [[params]], copy=False)


def _layer(source: Any, where: str) -> RNN:
    if isinstance(source, Mapping) and set(map(str, source)) == set(SIDES):
        directions = [_cell(source[side], f"{where}[{side!r}]") for side in SIDES]
        if directions[0].spec != directions[1].spec:
            raise FormatError(f"{where}: the forward ({directions[0].spec.describe()}) and "
                              f"backward ({directions[1].spec.describe()}) cells differ; a "
                              "bidirectional layer has one shape for both.")
        return RNN(directions[0].spec.replace(bidirectional=True),
                   [[d.params[0][0] for d in directions]], copy=False)
    return _cell(source, where)


def read(source: Any, **options: Any) -> Model:
    """The network an Equinox source holds (see the module's docstring)."""
    if isinstance(source, (list, tuple)):
        if not source:
            raise FormatError("read(fmt='equinox'): an empty list; expected cells.")
        return stack([_layer(item, f"read(fmt='equinox') item {k}")
                      for k, item in enumerate(source)])
    return _layer(source, "read(fmt='equinox')")


def sniff(source: Any) -> bool:
    """Equinox cells (or a list of them); a mapping of fields is told by ``fmt='equinox'``
    (PyTorch's cells use the same weight names)."""
    if isinstance(source, (list, tuple)) and source:
        return all(_is_cell(item) for item in source)
    return _is_cell(source)


def _arrays(layer: RNN, direction: int) -> dict[str, np.ndarray | None]:
    spec, named = layer.spec, layer.params[0][direction]
    out: dict[str, np.ndarray | None] = {"weight_ih": np.array(named["weight_ih"]),
                                         "weight_hh": np.array(named["weight_hh"])}
    if not spec.bias:
        return {**out, "bias": None, **({"bias_n": None} if spec.cell == "gru" else {})}
    bias_ih, bias_hh = np.asarray(named["bias_ih"]), np.asarray(named["bias_hh"])
    if spec.cell == "lstm":
        return {**out, "bias": bias_ih + bias_hh}
    candidate = block(bias_hh, CANONICAL["gru"], "n")
    summed = bias_ih + np.concatenate([bias_hh[:2 * spec.hidden_size], np.zeros_like(candidate)])
    return {**out, "bias": summed, "bias_n": np.array(candidate)}


def write(model: Model, path: Any = None, **options: Any) -> Any:
    """The fields of each cell (see the module's docstring); ``module=True``: the cells."""
    if path is not None:
        raise FormatError("write(fmt='equinox'): path=; Equinox cells are Python objects, "
                          "saved with eqx.tree_serialise_leaves by their owner. Write the "
                          "arrays (or the cells, module=True) and save them there.")
    layers = model.layers()
    built = []
    for layer in layers:
        arrays = [_arrays(layer, d) for d in range(layer.spec.num_directions)]
        if options.get("module"):
            arrays = [_module(layer.spec, fields) for fields in arrays]
        built.append(dict(zip(SIDES, arrays, strict=True)) if layer.spec.bidirectional
                     else arrays[0])
    return built[0] if len(built) == 1 else built


def _module(spec: Spec, fields: Mapping[str, np.ndarray | None]) -> Any:
    equinox = require("equinox", extra="equinox", purpose="write(fmt='equinox', module=True)")
    import jax
    import jax.numpy as jnp

    kind = equinox.nn.LSTMCell if spec.cell == "lstm" else equinox.nn.GRUCell
    cell = kind(spec.input_size, spec.hidden_size, use_bias=spec.bias, key=jax.random.key(0))
    names = [name for name, value in fields.items() if value is not None]
    return equinox.tree_at(lambda c: [getattr(c, name) for name in names], cell,
                           [jnp.asarray(fields[name]) for name in names])


def _param_count(model: Model, **options: Any) -> int:
    total = 0
    for layer in model.layers():
        for direction in range(layer.spec.num_directions):
            total += sum(a.size for a in _arrays(layer, direction).values() if a is not None)
    return total


FORMAT = Format(
    "equinox", sniff=sniff, reader=read, writer=write, counter=_param_count,
    write_options=frozenset({"module"}), features=frozenset(), cells=frozenset({"lstm", "gru"}),
    one_bias=frozenset({"lstm", "gru"}), extra="equinox", modules=("equinox", "jax"),
    layout_notes=("Equinox keeps PyTorch's orientation (W @ x, gates stacked by rows: LSTM "
                  "i f g o, GRU r z n) with one bias per cell, and a GRU's recurrent "
                  "candidate bias apart as bias_n.",),
    names={"reset_after": "GRUCell"})
