"""Block maps: where every layer × direction × matrix / bias of a whole network lies in a
format's flat buffer.

The whole network is coded as the tables are (:func:`.trace.coded_models`: every element
holds its own code, the biases in two passes), written to the source format, read back and
written to the target format, as :func:`rnnport.convert` does. A format whose written object
is one 1-D buffer is then decoded position by position: each run of positions holding one
parameter of one layer and direction is a :class:`~.layout.Block`, with the first offset of
each gate block in it; a run holding no parameter is a block of zeros. The offsets are where
the writer put the codes — no layout formula is consulted — so they show what the writer
does, whatever its documentation says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import RnnportError
from ..formats import NamedArray
from ..gates import gate_count
from ..spec import Spec
from .layout import Block, BufferMap
from .trace import BR, BW, KIND_TAGS, SUM, ZERO, Codebook, R, W, decode, gates_of, kinds_of, runs

__all__ = ["DIRECTIONS", "block_text", "buffer_map", "gate_text", "is_flat", "relocate"]

DIRECTIONS = ("forward", "backward")
# The canonical parameter each kind of run holds.
PARAMETERS = {W: "weight_ih", R: "weight_hh", BW: "bias_ih", BR: "bias_hh", SUM: "bias_ih + bias_hh"}


def is_flat(native: Any) -> bool:
    """Whether a format's written object is one 1-D buffer."""
    return isinstance(native, np.ndarray) and native.ndim == 1


def buffer_map(fmt: str, book: Codebook, spec: Spec, pass_a: np.ndarray,
               pass_b: np.ndarray) -> BufferMap:
    """The blocks of ``fmt``'s buffer of a network of ``spec``, decoded from the two buffers
    the writer produced for the two tracing passes."""
    first, second = decode(book, np.asarray(pass_a), np.asarray(pass_b), f"{fmt} buffer")
    kinds = kinds_of(book, first, second)
    codes = np.where(first > 0, first, second)
    gates = gates_of(book, first, second)
    layers = np.where(kinds == ZERO, -1, book.layer[codes])
    directions = np.where(kinds == ZERO, -1, book.direction[codes])
    keys = [bytes([kind, layer + 1, direction + 1])
            for kind, layer, direction in zip(kinds.tolist(), layers.tolist(),
                                              directions.tolist(), strict=True)]
    blocks = []
    for start, stop in runs(keys):
        kind, layer, direction = int(kinds[start]), int(layers[start]), int(directions[start])
        gate_runs = [] if kind == ZERO else [
            (book.letters[gates[start + offset]], start + offset)
            for offset, _ in runs([bytes([g]) for g in gates[start:stop].tolist()])]
        letters = "".join(letter for letter, _ in gate_runs)
        blocks.append(Block(start, stop, kind, layer, direction,
                            _parameter(spec, kind, layer, letters), tuple(gate_runs)))
    return BufferMap(fmt, int(first.size), tuple(blocks))


def _parameter(spec: Spec, kind: int, layer: int, letters: str) -> str:
    """``weight_ih (15×4)``; a run holding some gates of it names them (a format that sums
    some gates' biases and keeps others apart leaves zeros between them)."""
    if kind == ZERO:
        return "zeros"
    name = PARAMETERS[kind]
    shape = spec.param_shapes(layer)["bias_ih" if kind == SUM else name]
    part = "" if len(letters) == gate_count(spec.cell) else \
        f", gate{'s' if len(letters) > 1 else ''} {' '.join(letters)}"
    return f"{name} ({'×'.join(map(str, shape))}){part}"


def block_text(block: Block) -> tuple[str, str, str]:
    """(layer, direction, what) of a block for a table: ``0``, ``forward``, ``W weight_ih
    (15×4)``; zeros have no layer nor direction."""
    if block.kind == ZERO:
        return "", "", "zeros (holds no parameter)"
    return (str(block.layer), DIRECTIONS[block.direction],
            f"{KIND_TAGS[block.kind]} {block.name}")


def gate_text(block: Block) -> str:
    """``W_i@0 W_f@20 …``: each gate block's first offset, in buffer order."""
    return " ".join(f"{KIND_TAGS[block.kind]}_{letter}@{start}" for letter, start in block.gates)


def relocate(fmt: str, single: Sequence[Sequence[NamedArray]],
             whole: Sequence[Sequence[NamedArray]]) -> list[NamedArray]:
    """The one-layer arrays ``single`` (pass A, pass B) of a flat format, each at the offset
    where the same values lie in the whole network's buffer, ``whole`` (pass A, pass B).

    Layer 0's forward direction holds the same codes in both networks, so each one-layer
    segment is the first segment of the whole buffer with its name and exactly its values in
    both passes (a slot of zeros: the first of its name holding zeros, which is layer 0's
    forward one since pseudo-layers follow each other in order)."""
    used: set[int] = set()
    out = []
    for one_a, one_b in zip(*single, strict=True):
        if one_a.offset is None:
            out.append(one_a)
            continue
        match = next((index for index, (all_a, all_b) in enumerate(zip(*whole, strict=True))
                      if index not in used and all_a.name == one_a.name
                      and np.array_equal(all_a.array, one_a.array)
                      and np.array_equal(all_b.array, one_b.array)), None)
        if match is None:
            raise RnnportError(f"explain: {fmt} {one_a.name} of layer 0 was not found in the "
                               "whole network's buffer (a bug in explain or the format).")
        used.add(match)
        out.append(dataclasses.replace(one_a, offset=whole[0][match].offset))
    return out
