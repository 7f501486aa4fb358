"""Tracing: which canonical parameter every element of a native array holds.

An :class:`~rnnport.RNN` is built whose every element holds its own code (1, 2, 3, … —
integers are exact in float64, and below 2**24 in float32: :func:`code_dtype` picks the
widest dtype both formats hold), written to a format and read back as
:func:`rnnport.convert` would, and every element of every native array is decoded back to
the canonical element whose code it holds. The two biases are traced in two passes (pass A:
codes in ``bias_ih``, zeros in ``bias_hh``; pass B the other way round), so a format that
keeps one bias shows the sum ``bW + bR``, and a slot filled with zeros shows ``zero``, never
a number that happens to be a sum of two codes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import RnnportError
from ..formats import NamedArray, get
from ..gates import CANONICAL, gate_family
from ..model import RNN
from ..spec import Spec

__all__ = [
    "BR",
    "BW",
    "GATE_NAMES",
    "KIND_NAMES",
    "KIND_TAGS",
    "SUM",
    "ZERO",
    "Codebook",
    "R",
    "Region",
    "TracedArray",
    "W",
    "code_dtype",
    "coded_models",
    "gates_of",
    "kinds_of",
    "runs",
    "trace",
]

# Kinds of element, by what they hold.
ZERO, W, R, BW, BR, SUM = range(6)
KIND_TAGS = ("zero", "W", "R", "bW", "bR", "b")
KIND_NAMES = {
    W: "input weights W",
    R: "recurrent weights R",
    BW: "input-side bias bW",
    BR: "recurrent-side bias bR",
    SUM: "one bias per gate, the sum bW + bR",
    ZERO: "zeros (holds no parameter)",
}
GATE_NAMES = {"i": "input", "f": "forget", "g": "cell candidate", "o": "output",
              "r": "reset", "z": "update", "n": "candidate", "h": "the single block"}


# -- the code book: code → canonical element ------------------------------------------------


@dataclass(frozen=True, eq=False)
class Codebook:
    """Code ``c`` (1-based) names one canonical element; index 0 means "no element"."""

    letters: str
    hidden: int
    kind: np.ndarray
    gate: np.ndarray
    unit: np.ndarray
    column: np.ndarray
    layer: np.ndarray  # the layer and direction of each code's element (-1 for index 0)
    direction: np.ndarray

    def label(self, first: int, second: int) -> str:
        if first and second:
            a, b = self._one(first), self._one(second)
            if self.gate[first] == self.gate[second] and self.unit[first] == self.unit[second]:
                return f"b{self.letters[self.gate[first]]}[{self.unit[first]}]"
            return f"{a}+{b}"  # not produced by any registered format
        if first or second:
            return self._one(first or second)
        return "zero"

    def _one(self, code: int) -> str:
        kind, letter, unit = int(self.kind[code]), self.letters[self.gate[code]], self.unit[code]
        if kind in (W, R):
            return f"{KIND_TAGS[kind]}{letter}[{unit},{self.column[code]}]"
        return f"{KIND_TAGS[kind]}{letter}[{unit}]"

    def describe(self, first: int, second: int) -> str:
        """A sentence for a tooltip."""
        kind = int(kinds_of(self, np.array(first), np.array(second)))
        if kind == ZERO:
            return "zero: this slot holds no parameter"
        code = first or second
        letter = self.letters[self.gate[code]]
        text = f"{self.label(first, second)}: {KIND_NAMES[kind]}, gate {letter} " \
               f"({GATE_NAMES[letter]}), unit {self.unit[code]}"
        if kind in (W, R):
            text += f", {'input' if kind == W else 'h'} column {self.column[code]}"
        return text


def kinds_of(book: Codebook, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The kind each element holds, from its two codes."""
    kf, ks = book.kind[first], book.kind[second]
    return np.select([(kf == W) | (kf == R), (kf == BW) & (ks == BR), kf == BW, ks == BR],
                     [kf, SUM, BW, BR], ZERO)


def gates_of(book: Codebook, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The gate (index into the canonical letters) each element belongs to."""
    return np.where(first > 0, book.gate[first], book.gate[second])


# The largest integer code each dtype holds exactly (2**mantissa bits).
_EXACT = {"float64": 2**53, "float32": 2**24, "float16": 2**11}


def code_dtype(spec: Spec, formats: Sequence[str]) -> np.dtype:
    """The widest float dtype every one of ``formats`` stores as it is that holds each of the
    codes of a network of ``spec`` exactly."""
    codes = spec.num_params() + 1
    for name, limit in _EXACT.items():
        if all(get(fmt).holds_dtype(name) for fmt in formats):
            if codes > limit:
                break
            return np.dtype(name)
    raise RnnportError(f"explain: no dtype that {' and '.join(dict.fromkeys(formats))} store "
                       f"holds the {codes:,} trace codes of this network exactly; expected a "
                       "smaller network (input_size, hidden_size, num_layers).")


def coded_models(spec: Spec, dtype: Any = np.float64) -> tuple[Codebook, RNN, RNN]:
    """The code book and the two tracing models (pass A: bias_ih coded; pass B: bias_hh) of a
    network of ``spec``, every layer and direction of it.

    Codes run in storage order: layer by layer, forward before backward, and in each
    ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``. So layer 0's forward direction
    holds the same codes in a one-layer network as in a deeper or bidirectional one, and one
    code book decodes both.
    """
    letters = CANONICAL[gate_family(spec.cell)]
    hidden = spec.hidden_size
    kinds = {"weight_ih": W, "weight_hh": R, "bias_ih": BW, "bias_hh": BR}
    keys = ("kind", "gate", "unit", "column", "layer", "direction")
    tables = {key: [np.array([ZERO if key == "kind" else -1])] for key in keys}
    pass_a: list[list[dict[str, np.ndarray]]] = []
    pass_b: list[list[dict[str, np.ndarray]]] = []
    start = 1
    for layer in range(spec.num_layers):
        shapes = spec.param_shapes(layer)
        pass_a.append([])
        pass_b.append([])
        for direction in range(spec.num_directions):
            coded: dict[str, np.ndarray] = {}
            for name, kind in kinds.items():
                shape = shapes[name]
                size = int(np.prod(shape))
                coded[name] = np.arange(start, start + size, dtype=np.float64).reshape(shape)
                rows = np.arange(shape[0]).repeat(size // shape[0])
                tables["kind"].append(np.full(size, kind))
                tables["gate"].append(rows // hidden)
                tables["unit"].append(rows % hidden)
                tables["column"].append(np.tile(np.arange(shape[1]), shape[0]) if len(shape) == 2
                                        else np.full(size, -1))
                tables["layer"].append(np.full(size, layer))
                tables["direction"].append(np.full(size, direction))
                start += size
            zeros = np.zeros_like(coded["bias_ih"])
            pass_a[-1].append({**coded, "bias_hh": zeros})
            pass_b[-1].append({**coded, "bias_ih": zeros})
    book = Codebook(letters, hidden, *(np.concatenate(tables[key]).astype(np.int64)
                                       for key in keys))
    return book, RNN(spec, pass_a).astype(dtype), RNN(spec, pass_b).astype(dtype)


def decode(book: Codebook, pass_a: np.ndarray, pass_b: np.ndarray,
           where: str) -> tuple[np.ndarray, np.ndarray]:
    """Codes held by each element: (weight or input-side bias code, recurrent-side bias code)."""
    codes = []
    for values in (pass_a, pass_b):
        values = np.asarray(values, dtype=np.float64)
        ints = np.rint(values).astype(np.int64)
        if not (np.array_equal(ints, values) and (ints >= 0).all() and
                (ints < book.kind.size).all()):
            raise RnnportError(f"explain: {where} holds values that are not trace codes; the "
                               "format changed the numbers (a bug in explain or the format).")
        codes.append(ints)
    first, second = codes
    kind_a, kind_b = book.kind[first], book.kind[second]
    weight = (kind_a == W) | (kind_a == R)
    consistent = (np.isin(kind_a, [ZERO, W, R, BW]) & np.isin(kind_b, [ZERO, W, R, BR])
                  & (~weight | (second == first))
                  & (((kind_b != W) & (kind_b != R)) | (second == first)))
    if not consistent.all():
        raise RnnportError(f"explain: {where}: the two bias passes disagree (a bug in explain "
                           "or the format).")
    return first, np.where(weight, 0, second)


def trace(book: Codebook, pass_a: Sequence[NamedArray], pass_b: Sequence[NamedArray],
          where: str) -> list[TracedArray]:
    """Decode the arrays of one format's two native objects, traced in pass A and pass B."""
    out = []
    for array_a, array_b in zip(pass_a, pass_b, strict=True):
        first, second = decode(book, array_a.array, array_b.array, f"{where} {array_a.name}")
        out.append(TracedArray(array_a.name, tuple(array_a.array.shape), first, second, book,
                               array_a.offset, array_a.notes))
    return out


# -- traced arrays -----------------------------------------------------------------------


@dataclass(frozen=True)
class Region:
    """A block of a 2-D view holding one kind, and how its gate blocks lie."""

    rows: tuple[int, int]
    cols: tuple[int, int]
    kind: int
    orientation: str | None  # "rows": units along rows (y = W·x); "columns": x @ W; None: vector
    order: str  # canonical letters of the gate blocks, in storage order
    regular: bool
    axis: int = -1  # the view's axis along which the gate blocks follow (-1: none)

    def gate_block(self, gate: str, hidden: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (rows, cols) of gate ``gate``'s block in the 2-D view."""
        start = self.order.index(gate) * hidden
        bounds = [self.rows, self.cols]
        first = bounds[self.axis][0]
        bounds[self.axis] = (first + start, first + start + hidden)
        return bounds[0], bounds[1]


@dataclass(frozen=True, eq=False)
class TracedArray:
    """One native array (or one segment of a flat buffer), decoded element by element.

    ``first`` holds, per element, the code of the weight or input-side bias it carries and
    ``second`` the code of the recurrent-side bias (0: none); both have the native shape.
    ``offset`` is the first element's position in a flat buffer (cuDNN, MIOpen), else None.
    """

    name: str
    shape: tuple[int, ...]
    first: np.ndarray = field(repr=False)
    second: np.ndarray = field(repr=False)
    book: Codebook = field(repr=False)
    offset: int | None = None
    notes: tuple[str, ...] = ()  # what the format says about this array

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def labels(self) -> np.ndarray:
        """Every element's label (``Wi[1,0]``, ``bRz[2]``, ``bo[0]``, ``zero``), native shape."""
        out = np.empty(self.shape, dtype=object)
        for index in np.ndindex(*self.shape):
            out[index] = self.book.label(int(self.first[index]), int(self.second[index]))
        return out

    def kinds(self) -> np.ndarray:
        """Every element's kind as a tag: ``W``, ``R``, ``bW``, ``bR``, ``b``, ``zero``."""
        return np.array(KIND_TAGS, dtype=object)[kinds_of(self.book, self.first, self.second)]

    # -- 2-D view: (rows, columns), 1-D arrays as one row ---------------------------------

    def view(self, values: np.ndarray) -> np.ndarray:
        """``values`` (native shape) as the 2-D view."""
        return values.reshape(1, -1) if values.ndim <= 1 else values.reshape(-1, values.shape[-1])

    def view_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per element of the view: kind, gate, unit and column (of a weight)."""
        book = self.book
        first, second = self.view(self.first), self.view(self.second)
        code = np.where(first > 0, first, second)
        return (kinds_of(book, first, second), gates_of(book, first, second), book.unit[code],
                book.column[first])

    def regions(self) -> list[Region]:
        kinds, gates, units, columns = self.view_parts()
        out = []
        for rows, cols in split(kinds, (0, kinds.shape[0]), (0, kinds.shape[1])):
            block = (slice(*rows), slice(*cols))
            out.append(analyse(rows, cols, int(kinds[block][0, 0]), gates[block], units[block],
                               columns[block], self.book.letters, self.book.hidden))
        return out

    def span(self, region: Region) -> str:
        """The region as a NumPy index of the native array (empty for the whole array)."""
        return self.span_of(region.rows, region.cols)

    def span_of(self, rows: tuple[int, int], columns: tuple[int, int]) -> str:
        """A block of the view as a NumPy index of the native array (empty: the whole)."""
        view_rows = 1 if len(self.shape) <= 1 else int(np.prod(self.shape[:-1]))
        whole_rows = rows == (0, view_rows)
        whole_cols = columns == (0, self.shape[-1] if self.shape else 1)
        if whole_rows and whole_cols:
            return ""
        cols = slice_text(columns, whole_cols)
        if len(self.shape) <= 1:
            return f"[{cols}]"
        rows_text = slice_text(rows, whole_rows and view_rows > 1)
        lead = "0, " * (len(self.shape) - 2) if all(n == 1 for n in self.shape[:-2]) else ""
        return f"[{lead}{rows_text}, {cols}]"

    def row_header(self, row: int) -> str:
        columns = self.shape[-1] if self.shape else 1
        if self.offset is not None:
            return f"@{self.offset + row * columns}"
        if len(self.shape) <= 1:
            return ""
        return ",".join(str(int(i)) for i in np.unravel_index(row, self.shape[:-1]))

    def heading(self) -> str:
        shape = "(" + ", ".join(map(str, self.shape)) + ("," if len(self.shape) == 1 else "") + ")"
        where = f" at [{self.offset}, {self.offset + self.size})" if self.offset is not None else ""
        return f"{self.name} {shape}{where}"


def slice_text(bounds: tuple[int, int], whole: bool) -> str:
    start, stop = bounds
    if whole:
        return ":"
    return str(start) if stop == start + 1 else f"{start}:{stop}"


def runs(keys: Sequence[bytes]) -> list[tuple[int, int]]:
    """(start, stop) of each run of equal neighbours."""
    found, start = [], 0
    for index in range(1, len(keys) + 1):
        if index == len(keys) or keys[index] != keys[start]:
            found.append((start, index))
            start = index
    return found


def split(kinds: np.ndarray, rows: tuple[int, int],
          cols: tuple[int, int]) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """Blocks of one kind: split along the axis with fewer runs of identical lines, recurse."""
    block = kinds[rows[0]:rows[1], cols[0]:cols[1]]
    if (block == block[0, 0]).all():
        yield rows, cols
        return
    row_runs = runs([line.tobytes() for line in block])
    col_runs = runs([line.tobytes() for line in block.T])
    if len(row_runs) > 1 and (len(col_runs) == 1 or len(row_runs) <= len(col_runs)):
        for start, stop in row_runs:
            yield from split(kinds, (rows[0] + start, rows[0] + stop), cols)
    else:
        for start, stop in col_runs:
            yield from split(kinds, rows, (cols[0] + start, cols[0] + stop))


def analyse(rows: tuple[int, int], cols: tuple[int, int], kind: int, gates: np.ndarray,
            units: np.ndarray, columns: np.ndarray, letters: str, hidden: int) -> Region:
    if kind == ZERO:
        return Region(rows, cols, kind, None, "", True)

    def constant(values: np.ndarray, axis: int) -> bool:
        return bool((values == np.take(values, [0], axis=axis)).all())

    weight = kind in (W, R)
    if not weight and (gates.shape[0] == 1 or gates.shape[1] == 1):
        orientation, axis = None, 1 if gates.shape[0] == 1 else 0
    elif constant(gates, 1) and constant(units, 1) and constant(columns, 0):
        orientation, axis = "rows", 0
    elif constant(gates, 0) and constant(units, 0) and constant(columns, 1):
        orientation, axis = "columns", 1
    else:
        return Region(rows, cols, kind, None, "", False)
    gate_line = np.take(gates, 0, axis=1 - axis)
    unit_line = np.take(units, 0, axis=1 - axis)
    order, regular = "", True
    for start, stop in runs([bytes([g]) for g in gate_line]):
        order += letters[gate_line[start]]
        regular &= bool(np.array_equal(unit_line[start:stop], np.arange(hidden)))
    regular &= len(set(order)) == len(order)
    if weight:
        column_line = np.take(columns, 0, axis=axis)
        regular &= bool(np.array_equal(column_line, np.arange(column_line.size)))
    return Region(rows, cols, kind, orientation, order, regular, axis)


