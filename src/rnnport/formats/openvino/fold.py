"""A small, bounded evaluator of IR graphs in NumPy: how a reader finds the arrays a
recurrent layer takes, and checks what the layers around it do.

Each value carries, beside its array, the graph inputs and recurrent layers it is computed
from (``origins``: none for a constant, nor for what ``ShapeOf`` takes of an input, which
reads sizes, not numbers), the narrower float type a lossless ``Convert`` widened it from
(``stored``: an ``f16`` constant converted to ``f32`` is stored as float16), and the first
arithmetic layer on its path (``computed``: weights a graph multiplies or adds are not the
constants it stores, as in a compressed model).

A recurrent layer (``LSTMSequence`` …) is not run: its outputs are distinct numbers of the
shape its input gives (``Y [B, D, T, H]``, ``Ho``, ``Co [B, D, H]``), so what the layers
after it do to them can be checked exactly. Operations it does not know are refused by
name. Layers are evaluated without recursion, once each, and every one counts against the
``work`` limit and every array it builds against the ``expansion`` limit, before it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ...errors import FormatError, LimitError
from .ir import ELEMENT_TYPES, Graph, Layer

__all__ = ["ARITHMETIC", "SEQUENCES", "SHAPING", "Evaluator", "Value", "directions"]

# The recurrent layers: cell family by operation type.
SEQUENCES = {"LSTMSequence": "lstm", "GRUSequence": "gru", "RNNSequence": "rnn"}
# Operations that move, reshape or describe data (notes do not list them).
SHAPING = {"Parameter", "Const", "Constant", "Result", "ShapeOf", "Convert", "Transpose",
           "Reshape", "Squeeze", "Unsqueeze", "Concat", "Gather", "Broadcast", "Split",
           "VariadicSplit", "Slice"}
ARITHMETIC = {"Add", "Subtract", "Multiply", "Divide", "MatMul", "Relu", "Sigmoid", "Tanh"}


@dataclass(frozen=True)
class Value:
    """An evaluated output (see the module docstring)."""

    array: np.ndarray
    origins: frozenset[str] = frozenset()
    stored: np.dtype | None = None
    computed: str | None = None


def directions(layer: Layer) -> int:
    return 2 if layer.data.get("direction") == "bidirectional" else 1


class Evaluator:
    """Evaluates outputs of ``graph``, with ``feeds`` (arrays) for its ``Parameter`` layers
    by id; results are kept, so each layer is evaluated once."""

    def __init__(self, graph: Graph, feeds: Mapping[str, np.ndarray]) -> None:
        self.graph = graph
        self.feeds = dict(feeds)
        self.values: dict[str, list[Value]] = {}
        self.next_number = 1  # the recurrent layers' outputs are numbers from here on

    def __call__(self, layer: Layer, index: int = 0) -> Value:
        """Output ``index`` of ``layer``."""
        pending, waiting = [layer], {layer.id}
        while pending:
            current = pending[-1]
            if current.id in self.values:
                waiting.discard(pending.pop().id)
                continue
            needed = [self.graph.producer(current, index) for index in _needed(current)]
            missing = list({producer.id: producer for producer, _ in needed
                            if producer.id not in self.values}.values())
            if missing:
                if any(producer.id in waiting for producer in missing):
                    raise FormatError(f"{self.graph.where}: the graph has a cycle through "
                                      f"{current.label()}; expected layers that feed each "
                                      "other in one direction. The file is damaged.")
                pending.extend(missing)
                waiting.update(producer.id for producer in missing)
                continue
            self.graph.work.charge(1 + len(needed), "layers evaluated")
            inputs = [self.values[producer.id][output] for producer, output in needed]
            self.values[current.id] = self._evaluate(current, inputs)
            waiting.discard(pending.pop().id)
        outputs = self.values[layer.id]
        if not 0 <= index < len(outputs):
            raise FormatError(f"{self.graph.where}: {layer.label()} has no output {index}.")
        return outputs[index]

    def _evaluate(self, layer: Layer, inputs: list[Value]) -> list[Value]:
        where = f"{self.graph.where}, {layer.label()}"
        if layer.type in ("Const", "Constant"):
            return [Value(self.graph.constant(layer))]
        if layer.type == "Parameter":
            if layer.id not in self.feeds:
                raise FormatError(f"{where}: a graph input with no value to evaluate it with.")
            return [Value(self.feeds[layer.id], frozenset({layer.id}))]
        if layer.type in SEQUENCES:
            return self._recurrent(layer, inputs[0], where)
        operation = OPERATIONS.get(layer.type)
        if operation is None:
            raise FormatError(f"{where}: rnnport does not evaluate {layer.type} layers "
                              f"(it evaluates {', '.join(sorted({*SHAPING, *ARITHMETIC}))}); "
                              "the values it computes cannot be checked.")
        origins = frozenset().union(*(value.origins for value in inputs))
        computed = next((value.computed for value in inputs if value.computed), None)
        if layer.type in ARITHMETIC:
            computed = computed or layer.label()
        stored = inputs[0].stored if inputs and layer.type in KEEPS_STORAGE else None
        arrays = [value.array for value in inputs]
        try:
            results = operation(layer, arrays, self._charge(where))
        except (FormatError, LimitError):
            raise
        except (ValueError, IndexError, TypeError, OverflowError, MemoryError) as error:
            raise FormatError(f"{where}: cannot be evaluated on inputs of shapes "
                              f"{[list(array.shape) for array in arrays]} ({error}); the "
                              "file is damaged, or its layers do not fit together.") from None
        if layer.type == "ShapeOf":
            origins = frozenset()
        if layer.type == "Convert" and inputs[0].array.dtype.kind == "f" and \
                results[0].dtype.kind == "f" and \
                results[0].dtype.itemsize > inputs[0].array.dtype.itemsize:
            stored = inputs[0].stored or inputs[0].array.dtype
        return [Value(result, origins, stored, computed) for result in results]

    def _charge(self, where: str) -> Callable[[tuple[int, ...], np.dtype], None]:
        def charge(shape: tuple[int, ...], dtype: np.dtype) -> None:
            if any(dim < 0 for dim in shape):
                raise FormatError(f"{where}: a negative dimension in {list(shape)}.")
            count = int(np.prod(shape, dtype=object)) if shape else 1
            self.graph.arrays.charge(count * np.dtype(dtype).itemsize, "an evaluated array")
        return charge

    def _recurrent(self, layer: Layer, x: Value, where: str) -> list[Value]:
        hidden = layer.data.get("hidden_size", "")
        if x.array.ndim != 3 or not hidden.isdigit() or not 0 < int(hidden) <= 1 << 24:
            raise FormatError(f"{where}: X of shape {list(x.array.shape)} and hidden_size="
                              f"{hidden!r}; expected X [batch, time, input] and a positive "
                              "hidden_size.")
        batch, time, _ = x.array.shape
        count = directions(layer)
        shapes = [(batch, count, time, int(hidden)), (batch, count, int(hidden))]
        if layer.type == "LSTMSequence":
            shapes.append(shapes[1])
        outputs = []
        for shape in shapes:
            self._charge(where)(shape, np.dtype(np.float64))
            size = int(np.prod(shape))
            numbers = np.arange(self.next_number, self.next_number + size, dtype=np.float64)
            self.next_number += size
            outputs.append(Value(numbers.reshape(shape), x.origins | {layer.id}))
        return outputs


def _needed(layer: Layer) -> range:
    """The inputs evaluating ``layer`` takes: a recurrent layer's X alone."""
    return range(1 if layer.type in SEQUENCES else len(layer.inputs))


# -- the operations -------------------------------------------------------------------------

Charge = Callable[[tuple[int, ...], np.dtype], None]
KEEPS_STORAGE = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Gather", "Split",
                 "VariadicSplit", "Slice", "Concat", "Broadcast"}


def _integers(array: np.ndarray, what: str) -> list[int]:
    if array.dtype.kind not in "iu" or array.ndim > 1:
        raise ValueError(f"{what} of dtype {array.dtype} and shape {list(array.shape)}; "
                         "expected integers in at most one dimension")
    return [int(item) for item in array.reshape(-1)]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} for rank {rank}")
    return axis % max(rank, 1)


def _convert(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    kind = layer.data.get("destination_type", "")
    dtype = ELEMENT_TYPES.get(kind)
    if dtype is None:
        raise ValueError(f"destination_type {kind!r} is none of {', '.join(ELEMENT_TYPES)}")
    charge(arrays[0].shape, dtype)
    return [arrays[0].astype(dtype.newbyteorder("="))]


def _transpose(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data = arrays[0]
    order = _integers(arrays[1], "perm") if len(arrays) > 1 else []
    moved = np.transpose(data, order or None)
    charge(moved.shape, moved.dtype)
    return [moved.copy()]


def _reshape(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data, target = arrays[0], _integers(arrays[1], "shape")
    if layer.data.get("special_zero", "false").lower() == "true":
        target = [data.shape[index] if size == 0 and index < data.ndim else size
                  for index, size in enumerate(target)]
    return [data.reshape(target)]


def _squeeze(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data = arrays[0]
    if len(arrays) < 2:
        return [np.squeeze(data)]
    axes = tuple(_axis(axis, data.ndim) for axis in _integers(arrays[1], "axes"))
    return [np.squeeze(data, axis=axes)]


def _unsqueeze(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data = arrays[0]
    axes = _integers(arrays[1], "axes")
    rank = data.ndim + len(axes)
    return [np.expand_dims(data, tuple(_axis(axis, rank) for axis in axes))]


def _concat(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    axis = int(layer.data.get("axis", "0"))
    if not arrays:
        raise ValueError("no inputs")
    # one array may feed every input: the result can be far larger than the arrays it takes
    charge((sum(array.size for array in arrays),), np.result_type(*arrays))
    return [np.concatenate(arrays, axis=_axis(axis, arrays[0].ndim))]


def _gather(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data, indices = arrays[0], arrays[1]
    axis = _axis(_integers(arrays[2], "axis")[0] if len(arrays) > 2 else 0, data.ndim)
    if layer.data.get("batch_dims", "0") != "0" or indices.dtype.kind not in "iu":
        raise ValueError("batch_dims other than 0, or indices that are not integers")
    size = data.shape[axis]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise ValueError(f"indices outside [-{size}, {size})")
    charge(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)
    return [np.take(data, np.where(indices < 0, indices + size, indices), axis=axis)]


def _broadcast(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data, target = arrays[0], tuple(_integers(arrays[1], "target_shape"))
    mode = layer.data.get("mode", "numpy")
    if mode == "bidirectional":
        target = np.broadcast_shapes(data.shape, target)
    elif mode != "numpy":
        raise ValueError(f"mode {mode!r}; rnnport evaluates 'numpy' and 'bidirectional'")
    charge(target, data.dtype)
    return [np.broadcast_to(data, target).copy()]


def _split(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data = arrays[0]
    axis = _axis(_integers(arrays[1], "axis")[0], data.ndim)
    charge(data.shape, data.dtype)
    if layer.type == "Split":
        parts = int(layer.data.get("num_splits", "0"))
        if parts <= 0 or data.shape[axis] % parts:
            raise ValueError(f"num_splits={parts} for a dimension of {data.shape[axis]}")
        return [part.copy() for part in np.split(data, parts, axis=axis)]
    lengths = _integers(arrays[2], "split_lengths")
    if lengths.count(-1) == 1:
        lengths[lengths.index(-1)] = data.shape[axis] - sum(n for n in lengths if n != -1)
    if sum(lengths) != data.shape[axis] or any(n < 0 for n in lengths):
        raise ValueError(f"split_lengths {lengths} for a dimension of {data.shape[axis]}")
    bounds = np.cumsum(lengths)[:-1]
    return [part.copy() for part in np.split(data, bounds, axis=axis)]


def _slice(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    data = arrays[0]
    starts, stops, steps = (_integers(array, name) for array, name in
                            zip(arrays[1:4], ("start", "stop", "step"), strict=True))
    axes = _integers(arrays[4], "axes") if len(arrays) > 4 else list(range(len(starts)))
    if not len(starts) == len(stops) == len(steps) == len(axes) or 0 in steps:
        raise ValueError("start, stop, step and axes of different lengths, or a zero step")
    index = [slice(None)] * data.ndim
    for start, stop, step, axis in zip(starts, stops, steps, axes, strict=True):
        index[_axis(axis, data.ndim)] = slice(start, stop, step)
    part = data[tuple(index)]
    charge(part.shape, part.dtype)
    return [part.copy()]


def _shape_of(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    dtype = np.int32 if layer.data.get("output_type") == "i32" else np.int64
    return [np.array(arrays[0].shape, dtype=dtype)]


def _elementwise(function: Callable[..., np.ndarray]) -> Callable[..., list[np.ndarray]]:
    def operation(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
        charge(np.broadcast_shapes(*(array.shape for array in arrays)), arrays[0].dtype)
        with np.errstate(all="ignore"):
            return [np.asarray(function(*arrays)).astype(arrays[0].dtype, copy=False)]
    return operation


def _matmul(layer: Layer, arrays: list[np.ndarray], charge: Charge) -> list[np.ndarray]:
    first, second = arrays
    if layer.data.get("transpose_a", "false").lower() == "true":
        first = np.swapaxes(first, -1, -2)
    if layer.data.get("transpose_b", "false").lower() == "true":
        second = np.swapaxes(second, -1, -2)
    if first.ndim < 2 or second.ndim < 2 or first.shape[-1] != second.shape[-2]:
        raise ValueError(f"matrices of shapes {list(first.shape)} and {list(second.shape)}")
    batch = np.broadcast_shapes(first.shape[:-2], second.shape[:-2])
    charge((*batch, first.shape[-2], second.shape[-1]), first.dtype)
    return [np.matmul(first, second)]


OPERATIONS: dict[str, Callable[[Layer, list[np.ndarray], Charge], list[np.ndarray]]] = {
    "Result": lambda layer, arrays, charge: arrays[:1],
    "ShapeOf": _shape_of, "Convert": _convert, "Transpose": _transpose, "Reshape": _reshape,
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Concat": _concat, "Gather": _gather,
    "Broadcast": _broadcast, "Split": _split, "VariadicSplit": _split, "Slice": _slice,
    "Add": _elementwise(np.add), "Subtract": _elementwise(np.subtract),
    "Multiply": _elementwise(np.multiply), "Divide": _elementwise(np.divide),
    "Relu": _elementwise(lambda a: np.maximum(a, 0)),
    "Sigmoid": _elementwise(lambda a: 1 / (1 + np.exp(-a))), "Tanh": _elementwise(np.tanh),
    "MatMul": _matmul,
}
