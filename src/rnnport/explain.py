"""Layout tables: where every parameter of a recurrent layer sits in two formats, and why.

``explain(cell, source, target)`` answers "why do my converted weights not match?" with the
tables people otherwise draw by hand: every element of the source format's arrays and of
the target format's arrays, labelled and coloured by gate and by kind, the rules in words
that take one to the other, and the parameter count of each format with its formula.

Each element is labelled with the canonical parameter it holds (cuDNN/PyTorch orientation
and gate letters, see :mod:`rnnport.gates`)::

    Wi[1,0]   input weight W_i (H, I): gate i, unit (row) 1, input (column) 0
    Rz[2,1]   recurrent weight R_z (H, H): gate z, unit 2, h column 1
    bWf[0]    input-side bias of gate f, unit 0
    bRn[1]    recurrent-side bias of gate n, unit 1
    bo[0]     one stored bias per gate, bW_o[0] + bR_o[0] (Keras LSTM, TF1 cells)
    zero      a slot that holds zeros (the other slot of a one-bias format)

Nothing is written by hand: the layouts are **traced**. A float64 :class:`~rnnport.RNN` is
built whose every element holds its own code (1, 2, 3, … — integers are exact in float64),
written to the source format with :func:`rnnport.write`, read back with
:func:`rnnport.read` and written to the target format — exactly what
:func:`rnnport.convert` does — and every element of every native array is decoded back
to the canonical element whose code it holds. The two biases are traced in two passes
(pass A: codes in ``bias_ih``, zeros in ``bias_hh``; pass B the other way round), so a
format that keeps one bias shows the sum ``bW + bR`` as ``b…`` and a slot filled with
zeros as ``zero``, never a number that happens to be a sum of two codes. TF1 LSTM cells
are traced with ``forget_bias=0``; a further trace with ``forget_bias=1`` finds where
TensorFlow's default forget bias goes. Gate orders, orientations, offsets and counts in
the text are read off the decoded tables.
"""

from __future__ import annotations

import html
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import param_count as _param_count
from . import read as _read
from . import write as _write
from .errors import RnnportError, SpecError
from .formats import info as _format_info
from .formats._common import require
from .gates import CANONICAL, gate_family
from .model import RNN
from .spec import Spec

__all__ = ["Count", "Explanation", "TracedArray", "explain"]

CELL_NAMES = {"lstm": "lstm", "gru": "gru", "rnn": "rnn_tanh", "rnn_tanh": "rnn_tanh",
              "rnn_relu": "rnn_relu"}

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
# What the formats call the gates whose canonical letter differs (names only, not layouts).
GATE_ALIASES: dict[str, dict[str, str]] = {
    "keras": {"g": "c", "n": "h"},
    "onnx": {"g": "c", "n": "h"},
    "tf1": {"g": "j", "z": "u"},
    "miopen": {"g": "c"},
}
GATE_COLORS = {"i": "#1f77b4", "f": "#2ca02c", "g": "#ff7f0e", "o": "#9467bd",
               "r": "#d62728", "z": "#17becf", "n": "#bcbd22", "h": "#1f77b4"}
# Shade per kind: (mix with white, mix with black).
KIND_SHADES = {W: (0.6, 0.0), R: (0.3, 0.0), BW: (0.0, 0.0), BR: (0.0, 0.35), SUM: (0.0, 0.6)}
ELIDE_ABOVE = 8  # sizes above this elide the middle of long runs of similar rows/columns
WIDTH = 120


# -- the code book: code → canonical element ------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Codebook:
    """Code ``c`` (1-based) names one canonical element; index 0 means "no element"."""

    letters: str
    hidden: int
    kind: np.ndarray
    gate: np.ndarray
    unit: np.ndarray
    column: np.ndarray

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
        kind = int(_kinds(self, np.array(first), np.array(second)))
        if kind == ZERO:
            return "zero: this slot holds no parameter"
        code = first or second
        letter = self.letters[self.gate[code]]
        text = f"{self.label(first, second)}: {KIND_NAMES[kind]}, gate {letter} " \
               f"({GATE_NAMES[letter]}), unit {self.unit[code]}"
        if kind in (W, R):
            text += f", {'input' if kind == W else 'h'} column {self.column[code]}"
        return text


def _kinds(book: _Codebook, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    kf, ks = book.kind[first], book.kind[second]
    return np.select([(kf == W) | (kf == R), (kf == BW) & (ks == BR), kf == BW, ks == BR],
                     [kf, SUM, BW, BR], ZERO)


def _gates(book: _Codebook, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    return np.where(first > 0, book.gate[first], book.gate[second])


def _coded_models(spec: Spec) -> tuple[_Codebook, RNN, RNN]:
    """The code book and the two tracing models (pass A: bias_ih coded; pass B: bias_hh)."""
    letters = CANONICAL[gate_family(spec.cell)]
    hidden = spec.hidden_size
    shapes = spec.param_shapes(0)
    kinds = {"weight_ih": W, "weight_hh": R, "bias_ih": BW, "bias_hh": BR}
    tables = {name: [np.array([-1])] for name in ("gate", "unit", "column")}
    tables["kind"] = [np.array([ZERO])]
    coded: dict[str, np.ndarray] = {}
    start = 1
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
        start += size
    book = _Codebook(letters, hidden, *(np.concatenate(tables[key]).astype(np.int64)
                                        for key in ("kind", "gate", "unit", "column")))
    zeros = np.zeros_like(coded["bias_ih"])
    pass_a = {**coded, "bias_hh": zeros}
    pass_b = {**coded, "bias_ih": zeros}
    return book, RNN(spec, [[pass_a]]), RNN(spec, [[pass_b]])


def _decode(book: _Codebook, pass_a: np.ndarray, pass_b: np.ndarray,
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


# -- traced arrays -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Region:
    """A block of a 2-D view holding one kind, and how its gate blocks lie."""

    rows: tuple[int, int]
    cols: tuple[int, int]
    kind: int
    orientation: str | None  # "rows": units along rows (y = W·x); "columns": x @ W; None: vector
    order: str  # canonical letters of the gate blocks, in storage order
    regular: bool


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
    book: _Codebook = field(repr=False)
    offset: int | None = None

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
        return np.array(KIND_TAGS, dtype=object)[_kinds(self.book, self.first, self.second)]

    # -- 2-D view: (rows, columns), 1-D arrays as one row ---------------------------------

    def _view(self, values: np.ndarray) -> np.ndarray:
        return values.reshape(1, -1) if values.ndim <= 1 else values.reshape(-1, values.shape[-1])

    def _view_parts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        book = self.book
        first, second = self._view(self.first), self._view(self.second)
        code = np.where(first > 0, first, second)
        return (_kinds(book, first, second), _gates(book, first, second), book.unit[code],
                book.column[first])

    def regions(self) -> list[_Region]:
        kinds, gates, units, columns = self._view_parts()
        out = []
        for rows, cols in _split(kinds, (0, kinds.shape[0]), (0, kinds.shape[1])):
            block = (slice(*rows), slice(*cols))
            out.append(_analyse(rows, cols, int(kinds[block][0, 0]), gates[block], units[block],
                                columns[block], self.book.letters, self.book.hidden))
        return out

    def span(self, region: _Region) -> str:
        """The region as a NumPy index of the native array (empty for the whole array)."""
        view_rows = 1 if len(self.shape) <= 1 else int(np.prod(self.shape[:-1]))
        whole_rows = region.rows == (0, view_rows)
        whole_cols = region.cols == (0, self.shape[-1] if self.shape else 1)
        if whole_rows and whole_cols:
            return ""
        cols = _slice_text(region.cols, whole_cols)
        if len(self.shape) <= 1:
            return f"[{cols}]"
        rows = _slice_text(region.rows, whole_rows and view_rows > 1)
        lead = "0, " * (len(self.shape) - 2) if all(n == 1 for n in self.shape[:-2]) else ""
        return f"[{lead}{rows}, {cols}]"

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


def _slice_text(bounds: tuple[int, int], whole: bool) -> str:
    start, stop = bounds
    if whole:
        return ":"
    return str(start) if stop == start + 1 else f"{start}:{stop}"


def _runs(keys: Sequence[bytes]) -> list[tuple[int, int]]:
    runs, start = [], 0
    for index in range(1, len(keys) + 1):
        if index == len(keys) or keys[index] != keys[start]:
            runs.append((start, index))
            start = index
    return runs


def _split(kinds: np.ndarray, rows: tuple[int, int],
           cols: tuple[int, int]) -> Iterator[tuple[tuple[int, int], tuple[int, int]]]:
    """Blocks of one kind: split along the axis with fewer runs of identical lines, recurse."""
    block = kinds[rows[0]:rows[1], cols[0]:cols[1]]
    if (block == block[0, 0]).all():
        yield rows, cols
        return
    row_runs = _runs([line.tobytes() for line in block])
    col_runs = _runs([line.tobytes() for line in block.T])
    if len(row_runs) > 1 and (len(col_runs) == 1 or len(row_runs) <= len(col_runs)):
        for start, stop in row_runs:
            yield from _split(kinds, (rows[0] + start, rows[0] + stop), cols)
    else:
        for start, stop in col_runs:
            yield from _split(kinds, rows, (cols[0] + start, cols[0] + stop))


def _analyse(rows: tuple[int, int], cols: tuple[int, int], kind: int, gates: np.ndarray,
             units: np.ndarray, columns: np.ndarray, letters: str, hidden: int) -> _Region:
    if kind == ZERO:
        return _Region(rows, cols, kind, None, "", True)

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
        return _Region(rows, cols, kind, None, "", False)
    gate_line = np.take(gates, 0, axis=1 - axis)
    unit_line = np.take(units, 0, axis=1 - axis)
    order, regular = "", True
    for start, stop in _runs([bytes([g]) for g in gate_line]):
        order += letters[gate_line[start]]
        regular &= bool(np.array_equal(unit_line[start:stop], np.arange(hidden)))
    regular &= len(set(order)) == len(order)
    if weight:
        column_line = np.take(columns, 0, axis=axis)
        regular &= bool(np.array_equal(column_line, np.arange(column_line.size)))
    return _Region(rows, cols, kind, orientation, order, regular)


# -- native arrays of each format ---------------------------------------------------------


def _native_arrays(fmt: str, native: Any, spec: Spec) -> list[tuple[str, np.ndarray, int | None]]:
    """``(name, array, offset)`` for every array a format's native object holds."""
    if fmt in ("cudnn", "miopen"):
        from .formats.cudnn import layout

        buffer = np.asarray(native)
        return [(segment.name, buffer[segment.offset:segment.stop].reshape(segment.shape),
                 segment.offset) for segment in layout(spec)]
    if fmt == "keras":
        names = ("kernel", "recurrent_kernel", "bias")
        return [(name, np.asarray(array), None) for name, array in zip(names, native, strict=False)]
    if fmt == "onnx":
        return _onnx_arrays(native)
    # Any other format: its float arrays (metadata such as a JSON header is not a parameter).
    if isinstance(native, dict):
        named = [(str(name), np.asarray(array)) for name, array in native.items()]
    elif isinstance(native, (list, tuple)):
        named = [(f"array {index}", np.asarray(array)) for index, array in enumerate(native)]
    else:
        named = [("buffer", np.asarray(native))]
    return [(name, array, 0 if name == "buffer" and array.ndim == 1 else None)
            for name, array in named if array.dtype.kind == "f"]


def _onnx_arrays(proto: Any) -> list[tuple[str, np.ndarray, int | None]]:
    numpy_helper = require("onnx.numpy_helper", extra="onnx", purpose="explain with ONNX")
    graph = proto.graph
    initializers = {tensor.name: tensor for tensor in graph.initializer}
    producers = {output: node for node in graph.node for output in node.output}
    node = next(node for node in graph.node if node.op_type in ("LSTM", "GRU", "RNN"))
    out: list[tuple[str, np.ndarray, int | None]] = []
    for input_name, name in zip(("X", "W", "R", "B"), node.input, strict=False):
        if input_name == "X" or not name:
            continue
        while name not in initializers and name in producers and \
                producers[name].op_type in ("Cast", "Identity"):
            name = producers[name].input[0]
        out.append((input_name, numpy_helper.to_array(initializers[name]), None))
    return out


def _options(fmt: str, spec: Spec, forget_bias: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """(read options, write options) that say what a format's arrays cannot."""
    read: dict[str, Any] = {}
    write: dict[str, Any] = {}
    if fmt in ("cudnn", "miopen"):
        read = {"cell": spec.cell, "input_size": spec.input_size, "hidden_size": spec.hidden_size}
    relu = spec.cell == "rnn_relu"
    if fmt == "keras" and relu:
        read["activation"] = "relu"
    if fmt == "torch" and relu:
        read["nonlinearity"] = "relu"
    if fmt == "tf1":
        if spec.cell == "lstm":
            read["forget_bias"] = write["forget_bias"] = forget_bias
        if relu:
            read["activation"] = write["activation"] = "relu"
    return read, write


def _traced(book: _Codebook, fmt: str, natives: Sequence[Any], spec: Spec) -> list[TracedArray]:
    pass_a, pass_b = (_native_arrays(fmt, native, spec) for native in natives)
    out = []
    for (name, array_a, offset), (_, array_b, _) in zip(pass_a, pass_b, strict=True):
        first, second = _decode(book, array_a, array_b, f"{fmt} {name}")
        out.append(TracedArray(name, tuple(array_a.shape), first, second, book, offset))
    return out


# -- the explanation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Count:
    """Parameters as one format stores them, with the formula."""

    fmt: str
    total: int
    formula: str
    detail: str


@dataclass(frozen=True, eq=False)
class Explanation:
    """The traced layouts of one cell in two formats; render with :meth:`text` or :meth:`html`."""

    spec: Spec
    source: str
    target: str
    source_arrays: tuple[TracedArray, ...]
    target_arrays: tuple[TracedArray, ...]
    rules: tuple[str, ...]
    counts: tuple[Count, ...]

    @property
    def cell(self) -> str:
        return self.spec.cell

    @property
    def title(self) -> str:
        return (f"{self.spec.describe()}, input_size {self.spec.input_size}, hidden_size "
                f"{self.spec.hidden_size}: {self.source} → {self.target}")

    def text(self, color: bool = False, width: int = WIDTH) -> str:
        """The tables, legend, rules and counts for a terminal; ANSI colours when ``color``."""
        return _render_text(self, color, width)

    def html(self) -> str:
        """A standalone HTML5 page (inline CSS, no scripts, no external resources)."""
        return _render_html(self)

    def __str__(self) -> str:
        return self.text(color=False)


MAX_SIZE = 64  # per side: every element of the layer is traced and drawn


def explain(cell: str, source: str, target: str, *, input_size: int = 2,
            hidden_size: int = 3) -> Explanation:
    """Trace where every parameter of a ``cell`` layer sits in ``source`` and ``target``.

    ``cell`` is ``"lstm"``, ``"gru"`` (the reset-after GRU every registered format holds) or
    ``"rnn"`` (also ``"rnn_tanh"``, ``"rnn_relu"``); ``source`` and ``target`` are names from
    :func:`rnnport.formats`. The layer is one layer, one direction, with both biases.
    """
    if not isinstance(cell, str) or cell.lower() not in CELL_NAMES:
        raise SpecError(f"explain: cell={cell!r}; expected one of "
                        f"{', '.join(map(repr, CELL_NAMES))}.")
    for name, size in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
            raise SpecError(f"explain: {name}={size!r}; expected 1 to {MAX_SIZE}. The tables "
                            "draw every element, so small sizes show the layout best.")
    source, target = _format_info(source).name, _format_info(target).name
    if "onnx" in (source, target):
        require("onnx", extra="onnx", purpose="explain with the onnx format")
    spec = Spec(CELL_NAMES[cell.lower()], input_size, hidden_size)
    book, model_a, model_b = _coded_models(spec)
    read_source, write_source = _options(source, spec, 0.0)
    _, write_target = _options(target, spec, 0.0)
    source_natives = tuple(_write(model, source, **write_source) for model in (model_a, model_b))
    canonical = tuple(_read(native, source, **read_source) for native in source_natives)
    target_natives = tuple(_write(model, target, **write_target) for model in canonical)
    source_arrays = _traced(book, source, source_natives, spec)
    target_arrays = _traced(book, target, target_natives, spec)
    hub = _traced(book, "canonical", tuple(
        {name: model.parameter(0, 0, name) for name in ("bias_ih", "bias_hh")}
        for model in canonical), spec)
    rules = _rules(spec, source, target, source_arrays, target_arrays, hub)
    rules += _forget_bias_rules(spec, source, target, source_natives[0], canonical[0])
    counts = tuple(_count(fmt, arrays, model_a, spec) for fmt, arrays in
                   ((source, source_arrays), (target, target_arrays)))
    if source == target:
        counts = counts[:1]
    return Explanation(spec, source, target, tuple(source_arrays), tuple(target_arrays),
                       tuple(rules), counts)


# -- rules in words -----------------------------------------------------------------------


def _letters(fmt: str, order: str) -> str:
    aliases = GATE_ALIASES.get(fmt, {})
    return " ".join(aliases.get(letter, letter) for letter in order)


def _order_text(fmt: str, order: str) -> str:
    native = _letters(fmt, order)
    canonical = " ".join(order)
    return native if native == canonical else f"{native} (canonical {canonical})"


def _region_note(fmt: str, array: TracedArray, region: _Region) -> str:
    span = array.span(region)
    where = f"{span} " if span else ""
    if region.kind == ZERO:
        return f"{where}zeros (holds no parameter)"
    if not region.regular:
        return f"{where}{KIND_NAMES[region.kind]}: irregular layout"
    hidden = array.book.hidden
    blocks = f"gate blocks {_order_text(fmt, region.order)}, {hidden} units each"
    other, product = ("inputs", "W·x") if region.kind == W else ("h", "R·h")
    if region.orientation == "rows":
        layout = f"rows: {blocks}; columns: {other} ({product})"
    elif region.orientation == "columns":
        layout = f"rows: {other}; columns: {blocks} (transposed: {product[-1]} @ {product[0]})"
    else:
        layout = blocks
    return f"{where}{KIND_NAMES[region.kind]} — {layout}"


def _array_notes(fmt: str, array: TracedArray) -> list[str]:
    notes = [_region_note(fmt, array, region) for region in array.regions()]
    if fmt == "onnx" and array.shape and array.shape[0] == 1:
        notes.append("axis 0 is ONNX's direction axis D (1 here: forward only)")
    return notes


def _permutation_text(source: str, target: str) -> str:
    if source == target:
        return "same order"
    moved = [index for index, (a, b) in enumerate(zip(source, target, strict=True)) if a != b]
    if len(moved) == 2:
        return f"blocks {moved[0]} and {moved[1]} swap"
    return "target blocks = source blocks " + " ".join(str(source.index(g)) for g in target)


def _rules(spec: Spec, source: str, target: str, source_arrays: list[TracedArray],
           target_arrays: list[TracedArray], hub: list[TracedArray]) -> list[str]:
    rules: list[str] = []
    pieces = [(array, region) for array in source_arrays for region in array.regions()]
    summed_targets: dict[str, list[str]] = {}
    zero_targets: list[str] = []
    for array in target_arrays:
        for region in array.regions():
            name = f"{target} {array.name}{array.span(region)}"
            if region.kind == ZERO:
                zero_targets.append(name)
                continue
            gates = set(region.order)
            kinds = {region.kind}
            found = [(a, r) for a, r in pieces if r.kind in kinds and gates & set(r.order)]
            summed = False
            if region.kind == SUM and not found:
                found = [(a, r) for a, r in pieces if r.kind in (BW, BR) and gates & set(r.order)]
                summed = True
            if region.kind == SUM:
                summed_targets.setdefault(name, []).extend(sorted(gates, key=region.order.index))
            rules.append(_copy_rule(source, target, name, region, found, summed))
    source_sums = [(a, r) for a, r in pieces if r.kind == SUM]
    if source_sums:
        gates = "".join(dict.fromkeys(g for _, r in source_sums for g in r.order))
        slots = [f"{array.name}" for array in hub for r in array.regions() if r.kind == SUM]
        zeros = [f"{array.name}{array.span(r)}" for array in hub for r in array.regions()
                 if r.kind == ZERO]
        side = {"bias_hh": "recurrent-side", "bias_ih": "input-side"}
        rules.append(
            f"{source} keeps one bias for gates {_letters(source, gates)}: the sum bW + bR. "
            f"Reading it puts the sum in the canonical {', '.join(side[s] + ' bias ' + s for s in slots)}"
            f" and zeros in {', '.join(zeros)} — the same function, exactly.")
    if zero_targets:
        where = ", ".join(summed_targets) or "the other slot"
        rules.append(f"{'; '.join(zero_targets)}: zeros — {source} has one bias per gate where "
                     f"{target} has two; the sum goes to {where}.")
    elif summed_targets and not source_sums:
        for name, gates in summed_targets.items():
            rules.append(f"{name}: {target} keeps one bias for gates "
                         f"{_letters(target, ''.join(gates))}, so writing adds bW + bR (exact "
                         "in function; the two cannot be told apart again).")
    for fmt, arrays in ((source, source_arrays), (target, target_arrays)):
        if any(array.offset is not None for array in arrays):
            rules.append(_flat_rule(fmt, arrays))
    if spec.cell == "gru":
        rules.append("GRU here is reset-after: n = tanh(W_n x + bW_n + r∘(R_n h + bR_n)) "
                     "(cuDNN, PyTorch, Keras reset_after=True, ONNX linear_before_reset=1, TF1 "
                     "CudnnCompatibleGRUCell). A reset-before GRU is a different function.")
    if "onnx" in (source, target):
        rules.append("ONNX arrays start with a direction axis D: W [D, G·H, I], R [D, G·H, H], "
                     "B [D, 2·G·H] (here D = 1).")
    return list(dict.fromkeys(rules))


def _copy_rule(source: str, target: str, name: str, region: _Region,
               found: list[tuple[TracedArray, _Region]], summed: bool) -> str:
    kind = KIND_TAGS[region.kind]
    if not found:
        return f"{name} ({kind}): not found in {source} (a bug in explain)."
    wanted = set(region.order)
    parts = []
    order = ""
    seen = set()
    for array, piece in found:
        subset = "".join(g for g in piece.order if g in wanted)
        label = f"{array.name}{array.span(piece)}"
        details = [KIND_TAGS[piece.kind]] if summed else []
        if set(piece.order) != set(subset):
            details.append(f"blocks {_letters(source, subset)}")
        if details:
            label += f" ({', '.join(details)})"
        parts.append(label)
        if not summed or piece.kind == BW:
            order += "".join(g for g in subset if g not in seen)
            seen.update(subset)
    steps = []
    if summed:
        steps.append("summed element-wise")
    orientations = {piece.orientation for _, piece in found}
    if region.orientation is not None and orientations - {None}:
        transposed = any(o not in (None, region.orientation) for o in orientations)
        steps.append("transposed" if transposed else "not transposed")
    if len({array.name for array, _ in found}) > 1 and not summed:
        steps.append("concatenated")
    if len(region.order) > 1 or len(order) > 1:
        if order == region.order:
            steps.append(f"gate order {_letters(source, order)} kept" if source == target else
                         f"gate blocks {_letters(source, order)} → {_letters(target, region.order)}"
                         " (same order)")
        else:
            steps.append(f"gate blocks {_letters(source, order)} → "
                         f"{_letters(target, region.order)} ({_permutation_text(order, region.order)})")
    return f"{name} ({kind}) ← {source} {' + '.join(parts)}: {'; '.join(steps) or 'copied'}."


def _flat_rule(fmt: str, arrays: list[TracedArray]) -> str:
    total = sum(array.size for array in arrays)
    pieces = []
    for array in arrays:
        columns = array.shape[-1] if len(array.shape) == 2 else 1
        offset = array.offset or 0
        blocks = []
        for region in array.regions():
            start = offset + region.rows[0] * columns + region.cols[0]
            if region.kind == ZERO:
                blocks.append(f"zeros@{start}")
                continue
            step = array.book.hidden * (columns if region.orientation == "rows" else 1)
            for index, gate in enumerate(region.order):
                blocks.append(f"{KIND_TAGS[region.kind]}_{gate}@{start + index * step}")
        shape = f" (each {array.book.hidden}×{columns}, row-major)" if len(array.shape) == 2 else ""
        pieces.append(f"{array.name} [{offset}, {offset + array.size}): "
                      f"{' '.join(blocks)}{shape}")
    api = (" cuDNN's linLayerID k is the k-th matrix (and bias) of a pseudo-layer in this order."
           if fmt == "cudnn" else "")
    return (f"{fmt} flat buffer, {total} elements: all matrices first, then all biases; offsets — "
            + "; ".join(pieces) + "." + api)


def _forget_bias_rules(spec: Spec, source: str, target: str, source_native: Any,
                       canonical: RNN) -> list[str]:
    """Where TF1's forget_bias (1.0 by default, never saved) goes, found by a second trace."""
    if spec.cell != "lstm" or "tf1" not in (source, target):
        return []
    rules = []
    _, write_target = _options(target, spec, 0.0)
    _, write_target_one = _options(target, spec, 1.0)
    baseline = _native_arrays(target, _write(canonical, target, **write_target), spec)
    if source == "tf1":
        read_one, _ = _options(source, spec, 1.0)
        folded = _read(source_native, source, **read_one)
        shifted = _native_arrays(target, _write(folded, target, **write_target_one), spec)
        changes = _differences(baseline, shifted)
        effect = (f"reading with forget_bias=1.0 {changes}" if target != "tf1" else
                  f"reading and writing back with the same forget_bias=1.0: {changes}")
        rules.append("TF1 LSTM cells add forget_bias (default 1.0, never saved) to gate f at run "
                     "time; these tables trace forget_bias=0. With the default, " + effect + ".")
    else:
        shifted = _native_arrays(target, _write(canonical, target, **write_target_one), spec)
        rules.append("TF1 LSTM cells add forget_bias (default 1.0, never saved) to gate f at run "
                     "time; these tables trace forget_bias=0. Writing for forget_bias=1.0 "
                     f"{_differences(baseline, shifted)}, so TensorFlow adds it back.")
    return rules


def _differences(before: list[tuple[str, np.ndarray, int | None]],
                 after: list[tuple[str, np.ndarray, int | None]]) -> str:
    changes = []
    for (name, old, offset), (_, new, _) in zip(before, after, strict=True):
        delta = np.asarray(new, np.float64) - np.asarray(old, np.float64)
        if not delta.any():
            continue
        flat = np.flatnonzero(delta.reshape(-1))
        values = sorted({float(v) for v in delta.reshape(-1)[flat]})
        amount = ", ".join(f"{v:+g}" for v in values)
        start, stop = int(flat[0]), int(flat[-1]) + 1
        lead = np.unravel_index(start, delta.shape)[:-1]
        same_line = np.unravel_index(stop - 1, delta.shape)[:-1] == lead
        if stop - start == flat.size and same_line:
            first = start % delta.shape[-1]
            index = "".join(f"{int(i)}, " for i in lead) + f"{first}:{first + stop - start}"
            where = f"{name}[{index}]"
            if offset is not None:
                where += f" (buffer [{offset + start}, {offset + stop}))"
        else:
            where = f"{name} (flat elements {flat.tolist()})"
        changes.append(f"adds {amount} to {where}")
    return "; ".join(changes) if changes else "changes nothing (the two cancel, bit-exact)"


# -- counts -------------------------------------------------------------------------------


def _count(fmt: str, arrays: list[TracedArray], model: RNN, spec: Spec) -> Count:
    total = sum(array.size for array in arrays)
    expected = _param_count(model, fmt, **_options(fmt, spec, 0.0)[1])
    if total != expected:
        raise RnnportError(f"explain: traced {total} elements in {fmt}, but param_count says "
                           f"{expected} (a bug in explain or the format).")
    tags = np.concatenate([array.kinds().reshape(-1) for array in arrays]) if arrays else np.array([])
    weights = int(np.isin(tags, ["W", "R"]).sum())
    biases = total - weights
    gates, hidden, inputs = spec.gate_count, spec.hidden_size, spec.input_size
    if biases == 0:
        formula = f"G·H·(I + H) = {gates}·{hidden}·({inputs} + {hidden})"
    elif biases % (gates * hidden) == 0:
        per_gate = biases // (gates * hidden)
        formula = (f"G·H·(I + H + {per_gate}) = {gates}·{hidden}·({inputs} + {hidden} + "
                   f"{per_gate})")
    else:
        blocks = biases // hidden
        formula = (f"G·H·(I + H) + {blocks}·H = {gates}·{hidden}·({inputs} + {hidden}) + "
                   f"{blocks}·{hidden}")
    kinds = {tag: int((tags == tag).sum()) for tag in KIND_TAGS if (tags == tag).any()}
    detail = ", ".join(f"{tag} {number}" for tag, number in kinds.items())
    detail += f"; G={gates} gates, H={hidden}, I={inputs}"
    if spec.cell == "gru" and fmt in ("keras", "tf1"):
        before = RNN.random(spec.replace(reset_after=False), dtype=np.float64)
        detail += (f"; a reset-before GRU (Keras reset_after=False, TF1 GRUCell) keeps one bias: "
                   f"{_param_count(before, fmt)}")
    return Count(fmt, total, formula, detail)


# -- colours ------------------------------------------------------------------------------


def _rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _shade(gate: str, kind: int) -> tuple[int, int, int]:
    if kind == ZERO:
        return (235, 235, 235)
    white, black = KIND_SHADES[kind]
    red, green, blue = (round((value + (255 - value) * white) * (1 - black))
                        for value in _rgb(GATE_COLORS[gate]))
    return red, green, blue


def _dark(rgb: tuple[int, int, int]) -> bool:
    red, green, blue = rgb
    return 0.299 * red + 0.587 * green + 0.114 * blue < 140


def _xterm(rgb: tuple[int, int, int]) -> int:
    levels = np.array([0, 95, 135, 175, 215, 255])
    index = [int(np.abs(levels - value).argmin()) for value in rgb]
    return 16 + 36 * index[0] + 6 * index[1] + index[2]


def _ansi(text: str, gate: str, kind: int) -> str:
    rgb = _shade(gate, kind)
    foreground = 244 if kind == ZERO else (231 if _dark(rgb) else 16)
    style = {R: "4;", BR: "4;", SUM: "1;"}.get(kind, "")  # underlined: recurrent side
    return f"\x1b[{style}48;5;{_xterm(rgb)};38;5;{foreground}m{text}\x1b[0m"


def _css(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


# -- shared table geometry ----------------------------------------------------------------


@dataclass
class _Grid:
    """What a table shows: indices of the 2-D view (None: an elided stretch)."""

    rows: list[int | None]
    cols: list[int | None]
    row_groups: list[int]  # group number per shown row (None rows share the neighbour's)
    col_groups: list[int]
    labels: dict[tuple[int, int], tuple[str, int, str, str]]  # label, kind, gate letter, title


def _grid(array: TracedArray, elide: bool) -> _Grid:
    kinds, gates, _, _ = array._view_parts()
    first, second = array._view(array.first), array._view(array.second)
    book = array.book

    def shown(keys: list[bytes]) -> tuple[list[int | None], list[int]]:
        indices: list[int | None] = []
        groups: list[int] = []
        for group, (start, stop) in enumerate(_runs(keys)):
            run: list[int | None] = list(range(start, stop))
            if elide and stop - start > ELIDE_ABOVE:
                run = [start, start + 1, None, stop - 1]
            indices.extend(run)
            groups.extend([group] * len(run))
        return indices, groups

    rows, row_groups = shown([kinds[i].tobytes() + gates[i].tobytes() for i in range(kinds.shape[0])])
    cols, col_groups = shown([kinds[:, j].tobytes() + gates[:, j].tobytes()
                              for j in range(kinds.shape[1])])
    labels = {}
    for row in rows:
        for col in cols:
            if row is None or col is None:
                continue
            f, s = int(first[row, col]), int(second[row, col])
            kind = int(kinds[row, col])
            letter = book.letters[gates[row, col]] if kind != ZERO else ""
            title = book.describe(f, s)
            if array.offset is not None:
                title += f"; buffer offset {array.offset + row * kinds.shape[1] + col}"
            labels[(row, col)] = (book.label(f, s), kind, letter, title)
    return _Grid(rows, cols, row_groups, col_groups, labels)


def _elide(explanation: Explanation) -> bool:
    return max(explanation.spec.input_size, explanation.spec.hidden_size) > ELIDE_ABOVE


# -- text -----------------------------------------------------------------------------------


def _render_text(explanation: Explanation, color: bool, width: int) -> str:
    spec = explanation.spec
    letters = CANONICAL[gate_family(spec.cell)]
    lines = [f"rnnport explain — {explanation.title}", ""]
    lines += _legend_text(explanation, letters, color)
    for heading, fmt, arrays in (("SOURCE", explanation.source, explanation.source_arrays),
                                 ("TARGET", explanation.target, explanation.target_arrays)):
        total = sum(array.size for array in arrays)
        flat = " — one 1-D buffer, segments in buffer order" if any(
            a.offset is not None for a in arrays) else ""
        lines += [f"{heading}: {fmt} ({total} parameters){flat}", ""]
        for array in arrays:
            lines.append(f"  {array.heading()}")
            lines += [f"    {note}" for note in _array_notes(fmt, array)]
            lines += _table_text(array, color, width, _elide(explanation))
            lines.append("")
    lines += [f"RULES: {explanation.source} → {explanation.target} (what rnnport.convert does)"]
    lines += [f"  {number}. {rule}" for number, rule in enumerate(explanation.rules, 1)]
    lines += ["", "PARAMETER COUNTS (rnnport.param_count)"]
    for count in explanation.counts:
        lines.append(f"  {count.fmt}: {count.total} = {count.formula}  ({count.detail})")
    canonical = spec.num_params()
    lines.append(f"  canonical model (both biases): {canonical} = G·H·(I + H + 2)")
    return "\n".join(lines) + "\n"


def _legend_text(explanation: Explanation, letters: str, color: bool) -> list[str]:
    g = letters[0]  # the examples name the cell's first gate
    lines = ["LEGEND: each cell names the canonical (cuDNN/PyTorch) parameter it holds",
             f"  W{g}[u,c]  input weight W_{g} (H×I): gate {g}, unit u (row), input c (column)",
             f"  R{g}[u,c]  recurrent weight R_{g} (H×H): gate {g}, unit u, h column c",
             f"  bW{g}[u]   input-side bias    bR{g}[u]  recurrent-side bias",
             f"  b{g}[u]    one stored bias = bW{g}[u] + bR{g}[u]    zero  a slot holding zeros",
             "  colour = gate; shade = kind (W light, R medium, bW full, bR dark, b darkest);"
             " underlined = recurrent side"]
    names = {letter: _gate_name(explanation, letter) for letter in letters}
    name_width = max(len(name) for name in names.values())
    for letter in letters:
        name = names[letter]
        samples = [f"{KIND_TAGS[kind]}{letter}[{'u,c' if kind in (W, R) else 'u'}]"
                   for kind in (W, R, BW, BR, SUM)]
        cells = [(_ansi(f" {s} ", letter, kind) if color else f" {s} ")
                 for s, kind in zip(samples, (W, R, BW, BR, SUM), strict=True)]
        lines.append(f"  {letter}  {name:<{name_width}}  " + " ".join(cells))
    lines.append("")
    return lines


def _gate_name(explanation: Explanation, letter: str) -> str:
    """``cell candidate (keras c, tf1 j)``: the gate's name and what the two formats call it."""
    aliases = [f"{fmt} {GATE_ALIASES[fmt][letter]}" for fmt in
               dict.fromkeys((explanation.source, explanation.target))
               if letter in GATE_ALIASES.get(fmt, {})]
    return GATE_NAMES[letter] + (f" ({', '.join(aliases)})" if aliases else "")


def _table_text(array: TracedArray, color: bool, width: int, elide: bool) -> list[str]:
    """Cells are `` label `` blocks side by side; ``│`` and ``─`` mark where the kind or gate
    of whole columns / rows changes. Wide tables continue below in chunks of whole groups."""
    grid = _grid(array, elide)
    cell = max([len(label) for label, *_ in grid.labels.values()] +
               [len(str(col)) for col in grid.cols if col is not None] + [1]) + 2
    headers = {row: array.row_header(row) for row in grid.rows if row is not None}
    indent = " " * 4 + " " * max([len(h) for h in headers.values()] + [1]) + " "
    room = width - len(indent)
    chunks: list[list[int]] = [[]]
    used = 0
    for group in dict.fromkeys(grid.col_groups):
        positions = [p for p, g in enumerate(grid.col_groups) if g == group]
        if chunks[-1] and used + 1 + len(positions) * cell > room:
            chunks.append([])
            used = 0
        used += 1 if chunks[-1] else 0
        for position in positions:
            size = cell if grid.cols[position] is not None else 2
            if chunks[-1] and used + size > room:
                chunks.append([])
                used = 0
            chunks[-1].append(position)
            used += size
    lines = []
    for chunk in chunks:
        def boundary(index: int, chunk: list[int] = chunk) -> str:
            if index == 0 or grid.col_groups[chunk[index]] == grid.col_groups[chunk[index - 1]]:
                return ""
            return "│"

        head = indent + "".join(boundary(i) + (" …" if grid.cols[p] is None else
                                                f" {grid.cols[p]!s:<{cell - 1}}")
                                for i, p in enumerate(chunk))
        lines.append(head.rstrip())
        for row_index, row in enumerate(grid.rows):
            if row_index and grid.row_groups[row_index] != grid.row_groups[row_index - 1]:
                lines.append(indent + "─" * (len(head) - len(indent)))
            text = f"{'⋮' if row is None else headers[row]:>{len(indent) - 1}} "
            for index, position in enumerate(chunk):
                col = grid.cols[position]
                text += boundary(index)
                if row is None or col is None:
                    text += " …" if col is None else f" {'…':<{cell - 1}}"
                    continue
                label, kind, letter, _ = grid.labels[(row, col)]
                padded = f" {label:<{cell - 2}} "
                text += _ansi(padded, letter, kind) if color else padded
            lines.append(text.rstrip())
    return lines


# -- HTML -----------------------------------------------------------------------------------

_BORDERS = {W: "1px solid rgba(0,0,0,.35)", R: "2px dashed #222", BW: "2px dotted #000",
            BR: "3px double #000", SUM: "3px solid #000", ZERO: "1px dotted #aaa"}
_BORDER_WORDS = {W: "thin solid", R: "dashed", BW: "dotted", BR: "double", SUM: "thick solid",
                 ZERO: "grey dotted"}


def _render_html(explanation: Explanation) -> str:
    spec = explanation.spec
    letters = CANONICAL[gate_family(spec.cell)]
    esc = html.escape
    css = ["body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em 2em;"
           "color:#111;line-height:1.4}",
           "h1{font-size:1.4em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}"
           "h3{font-family:ui-monospace,monospace;font-size:1em;margin:1.2em 0 .2em}",
           "p.note{margin:.1em 0 .1em 1em;color:#333;font-size:.92em}",
           "table.arr,table.legend{border-collapse:separate;border-spacing:2px;"
           "font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;margin:.4em 0 .8em}",
           "table.arr td,table.legend td{padding:2px 5px;white-space:nowrap}",
           "table.arr th{font-weight:normal;color:#777;padding:0 4px;font-size:11px}",
           "td.gap{padding:0 3px!important;background:none!important;border:none!important}",
           "tr.gap td{height:4px;padding:0!important}",
           "td.el{color:#999;text-align:center}",
           "table.counts td,table.counts th{padding:2px 10px;text-align:left}",
           "ol.rules li{margin:.25em 0}"]
    css.append(f".k0{{background:#ebebeb;color:#999;border:{_BORDERS[ZERO]}}}")
    for letter in letters:
        for kind in (W, R, BW, BR, SUM):
            rgb = _shade(letter, kind)
            css.append(f".g{letter}.k{KIND_TAGS[kind]}{{background:{_css(rgb)};"
                       f"color:{'#fff' if _dark(rgb) else '#000'};border:{_BORDERS[kind]}}}")
    body = [f"<h1>rnnport explain — {esc(explanation.title)}</h1>"]
    body += _legend_html(explanation, letters)
    for heading, fmt, arrays in (("Source", explanation.source, explanation.source_arrays),
                                 ("Target", explanation.target, explanation.target_arrays)):
        total = sum(array.size for array in arrays)
        body.append(f"<section class=\"{heading.lower()}\"><h2>{heading}: {esc(fmt)} "
                    f"({total} parameters)</h2>")
        for array in arrays:
            body.append(f"<h3>{esc(array.heading())}</h3>")
            body += [f"<p class=\"note\">{esc(note)}</p>" for note in _array_notes(fmt, array)]
            body.append(_table_html(array, _elide(explanation)))
        body.append("</section>")
    body.append(f"<section class=\"rules\"><h2>Rules: {esc(explanation.source)} → "
                f"{esc(explanation.target)}</h2><ol class=\"rules\">")
    body += [f"<li>{esc(rule)}</li>" for rule in explanation.rules]
    body.append("</ol></section>")
    body.append("<section class=\"counts\"><h2>Parameter counts</h2><table class=\"counts\">"
                "<tr><th>format</th><th>parameters</th><th>formula</th><th>by kind</th></tr>")
    for count in explanation.counts:
        body.append(f"<tr><td>{esc(count.fmt)}</td><td>{count.total}</td>"
                    f"<td>{esc(count.formula)}</td><td>{esc(count.detail)}</td></tr>")
    body.append(f"<tr><td>canonical</td><td>{spec.num_params()}</td><td>G·H·(I + H + 2)</td>"
                "<td>both biases</td></tr></table></section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>rnnport explain: {esc(explanation.title)}</title>\n"
            "<style>\n" + "\n".join(css) + "\n</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def _legend_html(explanation: Explanation, letters: str) -> list[str]:
    esc = html.escape
    g = letters[0]
    out = ["<section class=\"legend\"><h2>Legend</h2>",
           "<p>Each cell names the canonical (cuDNN/PyTorch) parameter it holds: "
           f"<code>W{g}[u,c]</code> input weight W<sub>{g}</sub> (H×I), unit u, input c; "
           f"<code>R{g}[u,c]</code> recurrent weight (H×H); <code>bW{g}[u]</code> input-side "
           f"bias; <code>bR{g}[u]</code> recurrent-side bias; <code>b{g}[u]</code> one stored "
           "bias = bW + bR; <code>zero</code> a slot holding zeros. Colour: the gate; shade and "
           "border: the kind (" + ", ".join(f"{KIND_TAGS[k]} {_BORDER_WORDS[k]}"
                                              for k in (W, R, BW, BR, SUM, ZERO)) +
           "). Hover a cell for a description.</p>",
           "<table class=\"legend\"><tr><th>gate</th>"
           + "".join(f"<th>{esc(KIND_NAMES[k])}</th>" for k in (W, R, BW, BR, SUM)) + "</tr>"]
    for letter in letters:
        name = f"{letter} {_gate_name(explanation, letter)}"
        out.append(f"<tr><th>{esc(name)}</th>" + "".join(
            f"<td class=\"g{letter} k{KIND_TAGS[kind]}\">{KIND_TAGS[kind]}{letter}"
            f"[{'u,c' if kind in (W, R) else 'u'}]</td>" for kind in (W, R, BW, BR, SUM))
            + "</tr>")
    out.append("<tr><th>none</th><td class=\"k0\">zero</td></tr></table></section>")
    return out


def _table_html(array: TracedArray, elide: bool) -> str:
    grid = _grid(array, elide)
    esc = html.escape

    def gap(groups: list[int], position: int) -> bool:
        return position > 0 and groups[position] != groups[position - 1]

    head = ["<tr><th></th>"]
    for position, col in enumerate(grid.cols):
        if gap(grid.col_groups, position):
            head.append("<td class=\"gap\"></td>")
        head.append(f"<th>{'…' if col is None else col}</th>")
    head.append("</tr>")
    rows = ["".join(head)]
    width = len(grid.cols) + len(set(grid.col_groups))
    for row_index, row in enumerate(grid.rows):
        if gap(grid.row_groups, row_index):
            rows.append(f"<tr class=\"gap\"><td colspan=\"{width}\"></td></tr>")
        cells = [f"<th>{'⋮' if row is None else esc(array.row_header(row))}</th>"]
        for position, col in enumerate(grid.cols):
            if gap(grid.col_groups, position):
                cells.append("<td class=\"gap\"></td>")
            if row is None or col is None:
                cells.append("<td class=\"el\">…</td>")
                continue
            label, kind, letter, title = grid.labels[(row, col)]
            classes = f"g{letter} k{KIND_TAGS[kind]}" if kind != ZERO else "k0"
            cells.append(f"<td class=\"{classes}\" title=\"{esc(title)}\">{esc(label)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class=\"arr\" data-name=\"{esc(array.name)}\">" + "".join(rows) + "</table>"
