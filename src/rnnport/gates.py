"""Gate orders as data.

Every format names its gate order once, as a string of gate letters; every
permutation is derived from two such names. The canonical letters are cuDNN's:

========  =========================  ===========================================
cell      canonical (cuDNN, PyTorch)  letters
========  =========================  ===========================================
lstm      ``ifgo``                    input, forget, cell candidate (g), output
gru       ``rzn``                     reset, update (z), candidate (n)
rnn       ``h``                       the single block
========  =========================  ===========================================

Formats that call the LSTM candidate ``c`` or ``j`` (Keras, ONNX, TF1) or the GRU
candidate ``h`` (Keras, ONNX) are written here with the canonical letters, so
Keras GRU ``z r h`` is ``"zrn"`` and TF1 LSTM ``i j f o`` is ``"igfo"``.

Blocks are ``hidden_size`` long and stacked along one axis of an array; nothing
outside this module slices gate blocks by hand.
"""

from __future__ import annotations

import numpy as np

from .copying import copy_into

__all__ = [
    "CANONICAL",
    "GateOrder",
    "block",
    "block_range",
    "gate_count",
    "gate_family",
    "permutation",
    "reorder",
    "transposed",
]

CANONICAL: dict[str, str] = {"lstm": "ifgo", "gru": "rzn", "rnn": "h"}

GateOrder = str


def gate_family(cell: str) -> str:
    """``"rnn_tanh"``/``"rnn_relu"`` share the ``"rnn"`` gate family; others are their own."""
    return "rnn" if cell.startswith("rnn") else cell


def gate_count(cell: str) -> int:
    """Number of gate blocks G: LSTM 4, GRU 3, simple RNN 1."""
    return len(CANONICAL[gate_family(cell)])


def permutation(source: GateOrder, target: GateOrder) -> tuple[int, ...]:
    """Indices into ``source``'s blocks that give ``target``'s order.

    >>> permutation("zrn", "rzn")
    (1, 0, 2)
    """
    if sorted(source) != sorted(target) or len(set(source)) != len(source):
        raise ValueError(f"gate orders {source!r} and {target!r} do not name the same gates")
    return tuple(source.index(letter) for letter in target)


def reorder(
    array: np.ndarray, source: GateOrder, target: GateOrder, *, axis: int = 0,
    out: np.ndarray | None = None, copy: bool = True,
) -> np.ndarray:
    """``array`` with its gate blocks along ``axis`` moved from ``source`` to ``target`` order.

    Writes into ``out`` (same shape, C-contiguous) when given. Otherwise returns a new
    array in ``array``'s memory order (a transposed view gives a transposed result), or,
    with ``copy=False`` and orders that agree, ``array`` itself. ``array.shape[axis]``
    must be a multiple of the number of gates.
    """
    perm = permutation(source, target)
    axis = axis % array.ndim
    size = array.shape[axis]
    gates = len(perm)
    hidden = size // gates
    if size != hidden * gates:
        raise ValueError(f"axis {axis} of length {size} does not split into {gates} gate blocks")
    identity = perm == tuple(range(gates))
    if out is None:
        if identity and not copy:
            return array
        if array.ndim == 2 and not array.flags.c_contiguous and array.T.flags.c_contiguous:
            # Work on the contiguous transpose, so each block is one contiguous copy.
            return reorder(array.T, source, target, axis=1 - axis).T
        out = np.empty(array.shape, dtype=array.dtype)
    elif out.shape != array.shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous with shape {array.shape}")
    if identity:
        copy_into(out, array)
        return out
    if axis == 0:
        for index, taken in enumerate(perm):
            copy_into(out[index * hidden:(index + 1) * hidden],
                      array[taken * hidden:(taken + 1) * hidden])
        return out
    split_shape = (*array.shape[:axis], gates, hidden, *array.shape[axis + 1:])
    np.take(array.reshape(split_shape), perm, axis=axis, out=out.reshape(split_shape))
    return out


def transposed(rows: np.ndarray, source: GateOrder | None = None, target: GateOrder | None = None,
               *, out: np.ndarray | None = None) -> np.ndarray:
    """Canonical-style rows ``(G·H, N)`` as a C-contiguous kernel ``(N, G·H)`` (Keras, TF1),
    gate blocks moved from ``source`` to ``target`` order when given: blocks reordered as
    rows (contiguous copies, none when the orders agree), then one tiled transpose into
    ``out`` (which may be a row range of a larger kernel)."""
    if source is not None and target is not None:
        rows = reorder(rows, source, target, copy=False)
    if out is None:
        out = np.empty(rows.shape[::-1], dtype=rows.dtype)
    copy_into(out, rows.T)
    return out


def block_range(order: GateOrder, gate: str, hidden: int) -> tuple[int, int]:
    """``(start, stop)`` of gate ``gate``'s block in an axis stored in ``order``."""
    start = order.index(gate) * hidden
    return start, start + hidden


def block(array: np.ndarray, order: GateOrder, gate: str, *, axis: int = 0) -> np.ndarray:
    """A view of gate ``gate``'s block of ``array`` along ``axis``, in a format stored in ``order``."""
    axis = axis % array.ndim
    index: list[slice] = [slice(None)] * array.ndim
    index[axis] = slice(*block_range(order, gate, array.shape[axis] // len(order)))
    return array[tuple(index)]
