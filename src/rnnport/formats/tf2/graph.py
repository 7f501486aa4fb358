"""A SavedModel's function library, followed and evaluated with NumPy (no TensorFlow).

A traced ``tf.function`` is a ``FunctionDef`` in ``saved_model.pb``'s
``meta_graphs[0].graph_def.library``: its ``signature`` lists the arguments (the call's
inputs, then the *captured* inputs: the variables it reads, as ``DT_RESOURCE`` handles),
``node_def`` the operations and ``ret`` the outputs by output argument name. An input of a
node inside a function is written ``arg`` (an argument) or ``node:output_arg:k`` (output
``k`` of the node's output argument ``output_arg``: ``split:output:2``, ``while:output:3``,
``MatMul:product:0``); ``^node`` is a control dependency. Which variable each captured
input holds is in the object graph: ``SavedObjectGraph.concrete_functions[name]
.bound_inputs`` lists the node ids of the captured objects, matched to the function's last
arguments in order. Inside, a variable is read with ``ReadVariableOp(handle)``, and handles
pass into called functions as arguments:

``While`` / ``StatelessWhile``
    ``body`` and ``cond`` take the loop's inputs as their arguments, in order; ``body``
    returns the next values in the same order (its ``ret`` by its output arguments), which
    are the loop's outputs after the last step.
``PartitionedCall`` / ``StatefulPartitionedCall``
    ``f`` takes the inputs as its arguments; its outputs are the call's.

:class:`Library` indexes the functions once, maps every resource argument to the variable
it holds (through the calls, from the functions the object graph binds), and follows a
tensor back or forward through operations that only move data (:meth:`Library.back`,
:meth:`Library.forward`). :class:`Evaluator` computes a function's tensors with NumPy for
the operations a Keras layer's step is made of (matrix products, elementwise arithmetic and
activations, splits, slices, reshapes, concatenations, selections), given values for the
arguments it depends on and the variables' arrays; any other operation on the way is
refused by name (:class:`Unevaluable`). Both count their steps against the ``work`` limit
and the arrays they build against ``expansion`` (:mod:`rnnport.budget`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError, RnnportError
from ...io import tfproto

__all__ = ["CALLS", "LAYOUT", "Evaluator", "Library", "Ref", "Unevaluable", "attr_int",
           "attr_ints", "attr_text", "attr_type"]

# Ops that call functions → the attributes naming them; a While's body and cond take its
# inputs one to one, a call's function its inputs.
CALLS = {"While": ("body", "cond"), "StatelessWhile": ("body", "cond"),
         "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",)}
LOOPS = frozenset({"While", "StatelessWhile"})
PASS = frozenset({"Identity", "Snapshot", "StopGradient", "PreventGradient"})
# Ops that move a sequence's data without changing it (the time axis may move or flip).
LAYOUT = frozenset({*PASS, "Transpose", "ReverseV2", "ReverseSequence"})
MAX_STEPS_BACK = 10_000  # a chain of Identities longer than this is damage, not a graph
MAX_PIECES = 1 << 16  # outputs of one Split or Unpack: a cell has a handful


@dataclass(frozen=True)
class Ref:
    """A tensor inside function ``function``: output ``index`` of node ``node`` (its
    output argument ``output``), or argument ``node`` when ``output`` is ``None``."""

    function: str
    node: str
    output: str | None = None
    index: int = 0

    @property
    def is_argument(self) -> bool:
        return self.output is None

    def describe(self) -> str:
        if self.output is None:
            return f"argument {self.node!r} of {self.function}"
        return f"{self.node}:{self.output}:{self.index} in {self.function}"


class Unevaluable(RnnportError):
    """An operation :class:`Evaluator` does not compute (``op``) on the way to a value."""

    def __init__(self, op: str, node: str, why: str = "") -> None:
        super().__init__(f"{node} ({op}){f': {why}' if why else ''}")
        self.op, self.node, self.why = op, node, why


def attr_int(node: tfproto.NodeDef, name: str, default: int) -> int:
    attr = node.attr.get(name)
    return int(attr.value) if attr is not None and attr.kind in ("i", "type") else default  # type: ignore[arg-type]


def attr_type(node: tfproto.NodeDef, name: str) -> int | None:
    attr = node.attr.get(name)
    return int(attr.value) if attr is not None and attr.kind == "type" else None  # type: ignore[arg-type]


def attr_text(node: tfproto.NodeDef, name: str, default: str = "") -> str:
    attr = node.attr.get(name)
    if attr is None or attr.kind != "s":
        return default
    return bytes(attr.value).decode("utf-8", "replace")  # type: ignore[arg-type]


def attr_ints(node: tfproto.NodeDef, name: str) -> tuple[int, ...]:
    attr = node.attr.get(name)
    if attr is None or attr.kind != "list" or not isinstance(attr.value, tfproto.AttrList):
        return ()
    return tuple(int(v) for v in attr.value.i)


def _called(node: tfproto.NodeDef, key: str) -> str | None:
    attr = node.attr.get(key)
    return attr.value.name if attr is not None and isinstance(attr.value, tfproto.NameAttrList) \
        else None


class Library:
    """The functions of a SavedModel's graph (see the module docstring). ``bound`` is the
    object graph's ``bound_inputs`` (function → captured node ids); ``size`` the file's size,
    which the ``work`` limit is relative to."""

    def __init__(self, graph: tfproto.GraphDef, bound: Mapping[str, tuple[int, ...]],
                 where: str, size: int) -> None:
        self.where, self.size = where, size
        self.allowed = budget.allowance("work", size)
        self.spent = 0
        self.functions = {f.signature.name: f for f in graph.library.function}
        self.nodes: dict[str, dict[str, tfproto.NodeDef]] = {}
        self.arguments: dict[str, dict[str, int]] = {}
        self.returns: dict[str, list[str]] = {}
        self.callers: dict[str, list[tuple[str, tfproto.NodeDef, str]]] = {}
        self._consumers: dict[str, dict[str, list[tuple[tfproto.NodeDef, int, Ref]]]] = {}
        for name, function in self.functions.items():
            self.charge(1 + len(function.node_def))
            self.nodes[name] = {node.name: node for node in function.node_def}
            self.arguments[name] = {arg.name: k for k, arg in
                                    enumerate(function.signature.input_arg)}
            self.returns[name] = [function.ret.get(arg.name, "")
                                  for arg in function.signature.output_arg]
        for name in self.functions:
            for node in self.nodes[name].values():
                for key in CALLS.get(node.op, ()):
                    callee = _called(node, key)
                    if callee is not None:
                        self.callers.setdefault(callee, []).append((name, node, key))
        self.resources: dict[tuple[str, str], int] = {}
        self._bind(bound)

    def charge(self, units: int) -> None:
        self.spent += units
        if self.spent > self.allowed:
            raise budget.exceeded(
                self.where, f"following its functions has taken {self.spent:,} steps (nodes "
                "indexed, tensors followed, operations evaluated) and is not done", "work",
                self.size)

    # -- references --------------------------------------------------------------------

    def ref(self, function: str, text: str) -> Ref | None:
        """The tensor an input string names inside ``function`` (None: a control input)."""
        if text.startswith("^"):
            return None
        pieces = text.split(":")
        if len(pieces) == 1:
            return Ref(function, text)
        if len(pieces) == 3 and pieces[2].isdigit() and len(pieces[2]) <= 9:
            return Ref(function, pieces[0], pieces[1], int(pieces[2]))
        if len(pieces) == 2 and pieces[1].isdigit() and len(pieces[1]) <= 9:
            return Ref(function, pieces[0], "", int(pieces[1]))
        raise FormatError(f"{self.where}: {function}: input {text[:80]!r}; expected 'node:"
                          "output:index' or an argument name. The graph is damaged.")

    def node(self, ref: Ref) -> tfproto.NodeDef | None:
        return None if ref.is_argument else self.nodes.get(ref.function, {}).get(ref.node)

    def inputs(self, function: str, node: tfproto.NodeDef) -> list[Ref]:
        """A node's data inputs (control inputs left out)."""
        out = []
        for text in node.input:
            found = self.ref(function, text)
            if found is not None:
                out.append(found)
        return out

    def consumers(self, ref: Ref) -> list[tuple[tfproto.NodeDef, int]]:
        """The nodes that take tensor ``ref`` (and at which input); a Ref whose output
        argument is ``""`` (unknown) stands for its node's output ``index`` of any name."""
        found = self._consumers.get(ref.function)
        if found is None:
            found = {}
            for node in self.nodes.get(ref.function, {}).values():
                self.charge(1 + len(node.input))
                for position, text in enumerate(node.input):
                    taken = self.ref(ref.function, text)
                    if taken is not None:
                        found.setdefault(taken.node, []).append((node, position, taken))
            self._consumers[ref.function] = found
        return [(node, position) for node, position, taken in found.get(ref.node, [])
                if taken.is_argument == ref.is_argument and taken.index == ref.index
                and (not ref.output or taken.output == ref.output)]

    # -- variables ---------------------------------------------------------------------

    def _bind(self, bound: Mapping[str, tuple[int, ...]]) -> None:
        """Fill ``resources``: (function, argument) → the object graph node id of the variable
        it holds, from the bound inputs and on through every call; an argument two calls
        bind to different variables holds none."""
        out = self.resources
        conflicting: set[tuple[str, str]] = set()
        queue: deque[str] = deque()
        for name, ids in bound.items():
            function = self.functions.get(name)
            if function is None or not ids:
                continue
            arguments = function.signature.input_arg
            if len(ids) > len(arguments):
                raise FormatError(f"{self.where}: function {name} binds {len(ids)} captured "
                                  f"inputs but takes {len(arguments)} arguments; the SavedModel "
                                  "is damaged.")
            for arg, node_id in zip(arguments[len(arguments) - len(ids):], ids, strict=True):
                out[name, arg.name] = node_id
            queue.append(name)
        seen: set[str] = set()
        while queue:
            name = queue.popleft()
            if name in seen:
                continue
            seen.add(name)
            for node in self.nodes.get(name, {}).values():
                keys = CALLS.get(node.op, ())
                if not keys:
                    continue
                self.charge(1 + len(node.input))
                for position, text in enumerate(node.input):
                    ref = self.ref(name, text)
                    held = self.variable(ref) if ref is not None else None
                    if held is None:
                        continue
                    for key in keys:
                        callee = _called(node, key)
                        if callee is None or callee not in self.functions:
                            continue
                        arguments = self.functions[callee].signature.input_arg
                        if position >= len(arguments):
                            continue
                        slot = (callee, arguments[position].name)
                        if slot in conflicting or out.get(slot) == held:
                            continue
                        if slot in out:  # two calls pass different variables: neither holds
                            conflicting.add(slot)
                            del out[slot]
                            continue
                        out[slot] = held
                        queue.append(callee)
                        seen.discard(callee)

    def variable(self, ref: Ref) -> int | None:
        """The variable (object graph node id) a resource tensor holds, past Identities."""
        for _ in range(MAX_STEPS_BACK):
            if ref.is_argument:
                return self.resources.get((ref.function, ref.node))
            node = self.node(ref)
            if node is None or node.op not in PASS or not node.input:
                return None
            found = self.ref(ref.function, node.input[0])
            if found is None:
                return None
            ref = found
        return None

    def read_variables(self, function: str, refs: list[Ref]) -> set[int]:
        """The variables the values ``refs`` depend on read (``ReadVariableOp`` of them, in
        ``function`` alone)."""
        out: set[int] = set()
        for ref in self.slice(refs):
            node = self.node(ref)
            if node is not None and node.op == "ReadVariableOp" and node.input:
                source = self.ref(ref.function, node.input[0])
                held = self.variable(source) if source is not None else None
                if held is not None:
                    out.add(held)
        return out

    def slice(self, refs: list[Ref]) -> Iterator[Ref]:
        """Every node (as a Ref to its output 0) and argument ``refs`` depend on, within
        their function, once each."""
        seen: set[tuple[str, str]] = set()
        stack = list(refs)
        while stack:
            ref = stack.pop()
            key = (ref.function, ref.node)
            if key in seen:
                continue
            seen.add(key)
            self.charge(1)
            yield Ref(ref.function, ref.node, None if ref.is_argument else "", 0)
            node = self.node(ref)
            if node is not None:
                stack.extend(self.inputs(ref.function, node))

    # -- following sequences -----------------------------------------------------------

    def constant(self, ref: Ref) -> np.ndarray | None:
        """The value of a ``Const`` (past Identities), else None."""
        for _ in range(MAX_STEPS_BACK):
            node = self.node(ref)
            if node is None:
                return None
            if node.op in PASS and node.input:
                found = self.ref(ref.function, node.input[0])
                if found is None:
                    return None
                ref = found
                continue
            if node.op != "Const":
                return None
            value = node.attr.get("value")
            if value is None or not isinstance(value.value, tfproto.TensorValue) or \
                    value.value.size > 1 << 16:
                return None
            try:
                return value.value.numpy()
            except RnnportError:
                return None
        return None

    def _axes(self, ref: Ref, rank_hint: int) -> list[int] | None:
        value = self.constant(ref)
        if value is None or value.dtype.kind not in "iu" or value.ndim > 1:
            return None
        return [int(v) % rank_hint if rank_hint else int(v) for v in np.ravel(value)]

    def back(self, ref: Ref, time_axis: int, rank: int = 3) -> tuple[Ref, int, int]:
        """Follow ``ref`` (a sequence with its time axis at ``time_axis``) back through
        operations that only move its data (:data:`LAYOUT`) and out of called functions
        to the tensor it came from: (that tensor, its time axis, how many times the time
        order was reversed on the way)."""
        flips = 0
        for _ in range(MAX_STEPS_BACK):
            self.charge(1)
            if ref.is_argument:
                outer = self._argument_source(ref)
                if outer is None:
                    return ref, time_axis, flips
                ref = outer
                continue
            node = self.node(ref)
            if node is None:
                return ref, time_axis, flips
            if node.op in CALLS and node.op not in LOOPS:
                inner = self._call_result(ref, node)
                if inner is None:
                    return ref, time_axis, flips
                ref = inner
                continue
            if node.op not in LAYOUT or not node.input:
                return ref, time_axis, flips
            inputs = self.inputs(ref.function, node)
            if node.op == "Transpose":
                perm = self._axes(inputs[1], rank) if len(inputs) > 1 else None
                if perm is None or sorted(perm) != list(range(len(perm))) or \
                        time_axis >= len(perm):
                    return ref, time_axis, flips
                time_axis = perm[time_axis]
            elif node.op == "ReverseV2":
                axes = self._axes(inputs[1], rank) if len(inputs) > 1 else None
                if axes is None:
                    return ref, time_axis, flips
                flips += axes.count(time_axis)
            elif node.op == "ReverseSequence":
                if attr_int(node, "seq_dim", -1) != time_axis:
                    return ref, time_axis, flips
                flips += 1
            ref = inputs[0]
        raise FormatError(f"{self.where}: {ref.describe()}: a chain of more than "
                          f"{MAX_STEPS_BACK:,} operations that only pass data on; the graph is "
                          "damaged.")

    def _argument_source(self, ref: Ref) -> Ref | None:
        """A called function's argument → the caller's input (one caller, not a loop)."""
        callers = [(outer, node) for outer, node, key in self.callers.get(ref.function, [])
                   if node.op not in LOOPS]
        position = self.arguments.get(ref.function, {}).get(ref.node)
        if len(callers) != 1 or position is None:
            return None
        outer, node = callers[0]
        inputs = self.inputs(outer, node)
        return inputs[position] if position < len(inputs) else None

    def _call_result(self, ref: Ref, node: tfproto.NodeDef) -> Ref | None:
        """A call's output → the callee's returned tensor."""
        callee = _called(node, "f")
        if callee is None or callee not in self.returns or ref.index >= len(
                self.returns[callee]):
            return None
        return self.ref(callee, self.returns[callee][ref.index])

    def forward(self, ref: Ref, time_axis: int, rank: int = 3,
                limit: int = 64) -> list[tuple[tfproto.NodeDef, int, str, int, int, Ref]]:
        """Where a sequence goes: every consumer past :data:`LAYOUT` operations (and into
        called functions), as (consumer node, its input position, its function, the time
        axis there, reversals on the way, the tensor it takes); at most ``limit``."""
        out: list[tuple[tfproto.NodeDef, int, str, int, int, Ref]] = []
        queue = deque([(ref, time_axis, 0)])
        visited = 0
        while queue and len(out) < limit and visited < 4 * limit:
            ref, axis, flips = queue.popleft()
            visited += 1
            self.charge(1)
            for node, position in self.consumers(ref):
                inputs = self.inputs(ref.function, node)
                follow: tuple[int, int] | None = None
                if node.op in PASS:
                    follow = (axis, flips)
                elif node.op == "Transpose" and position == 0 and len(inputs) > 1:
                    perm = self._axes(inputs[1], rank)
                    if perm is not None and sorted(perm) == list(range(len(perm))) and \
                            axis in perm:
                        follow = (perm.index(axis), flips)
                elif node.op == "ReverseV2" and position == 0 and len(inputs) > 1:
                    axes = self._axes(inputs[1], rank)
                    if axes is not None:
                        follow = (axis, flips + axes.count(axis))
                elif node.op == "ReverseSequence" and position == 0 and \
                        attr_int(node, "seq_dim", -1) == axis:
                    follow = (axis, flips + 1)
                elif node.op == "StridedSlice" and position == 0 and axis >= 0 and \
                        self._last_step(ref.function, node, inputs, axis):
                    follow = (-1, flips)  # Keras's outputs[-1]: the time axis is gone
                elif node.op in CALLS and node.op not in LOOPS:
                    callee = _called(node, "f")
                    arguments = self.functions[callee].signature.input_arg \
                        if callee in self.functions else ()
                    if len(self.callers.get(callee or "", [])) == 1 and position < len(arguments):
                        queue.append((Ref(callee or "", arguments[position].name), axis, flips))
                        continue
                if follow is not None:
                    queue.append((Ref(ref.function, node.name, "", 0), *follow))
                else:
                    out.append((node, position, ref.function, axis, flips, ref))
            if ref.function and self._returned(ref) is not None:
                for outer, call, position in self._returned(ref) or []:
                    queue.append((Ref(outer, call.name, "output", position), axis, flips))
        return out

    def _returned(self, ref: Ref) -> list[tuple[str, tfproto.NodeDef, int]] | None:
        """The callers' outputs a function's tensor is returned as (not from loops)."""
        positions = []
        for k, returned in enumerate(self.returns.get(ref.function, [])):
            taken = self.ref(ref.function, returned) if returned else None
            if taken is not None and taken.node == ref.node and taken.index == ref.index and \
                    taken.is_argument == ref.is_argument and (
                        not ref.output or taken.output == ref.output):
                positions.append(k)
        if not positions:
            return None
        return [(outer, node, position) for outer, node, key in
                self.callers.get(ref.function, []) if node.op not in LOOPS
                for position in positions]

    def _last_step(self, function: str, node: tfproto.NodeDef, inputs: list[Ref],
                   axis: int) -> bool:
        """Whether a StridedSlice takes the last step along ``axis`` and all of every other
        axis it names (``outputs[-1]``)."""
        if len(inputs) < 4 or attr_int(node, "ellipsis_mask", 0) or \
                attr_int(node, "new_axis_mask", 0):
            return False
        begin = self.constant(inputs[1])
        if begin is None or begin.ndim != 1 or len(begin) <= axis:
            return False
        shrink, begins, ends = (attr_int(node, name, 0) for name in (
            "shrink_axis_mask", "begin_mask", "end_mask"))
        return int(begin[axis]) == -1 and shrink == 1 << axis and all(
            begins >> k & 1 and ends >> k & 1 for k in range(len(begin)) if k != axis)


# -- evaluation ----------------------------------------------------------------------------

def _floats(value: np.ndarray) -> np.ndarray:
    return value.astype(np.float64) if value.dtype.kind == "f" else value


def _strided_slice(node: tfproto.NodeDef, x: np.ndarray, begin: np.ndarray, end: np.ndarray,
                   strides: np.ndarray) -> np.ndarray:
    """TensorFlow's StridedSlice with its five masks, as a NumPy index."""
    masks = {name: attr_int(node, name, 0) for name in (
        "begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")}
    if not (begin.ndim == end.ndim == strides.ndim == 1) or not \
            len(begin) == len(end) == len(strides):
        raise ValueError("begin, end and strides of different lengths")
    if bin(masks["ellipsis_mask"]).count("1") > 1:
        raise ValueError("more than one ellipsis")
    index: list[Any] = []
    for k in range(len(begin)):
        bit = 1 << k
        if masks["ellipsis_mask"] & bit:
            index.append(Ellipsis)
        elif masks["new_axis_mask"] & bit:
            index.append(None)
        elif masks["shrink_axis_mask"] & bit:
            index.append(int(begin[k]))
        else:
            if int(strides[k]) == 0:
                raise ValueError("a stride of 0")
            index.append(slice(None if masks["begin_mask"] & bit else int(begin[k]),
                               None if masks["end_mask"] & bit else int(end[k]),
                               int(strides[k])))
    return x[tuple(index)]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _elu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


def _selu(x: np.ndarray) -> np.ndarray:
    return 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0)))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


# Elementwise ops of one input: NumPy's float64 version.
UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Neg": np.negative, "Abs": np.abs, "Sign": np.sign, "Exp": np.exp, "Log": np.log,
    "Log1p": np.log1p, "Expm1": np.expm1, "Sqrt": np.sqrt, "Rsqrt": lambda x: 1 / np.sqrt(x),
    "Square": np.square, "Reciprocal": np.reciprocal, "Inv": np.reciprocal,
    "Sigmoid": _sigmoid, "Tanh": np.tanh, "Relu": lambda x: np.maximum(x, 0),
    "Relu6": lambda x: np.clip(x, 0, 6), "Elu": _elu, "Selu": _selu, "Softplus": _softplus,
    "Softsign": lambda x: x / (1 + np.abs(x)), "Erf": _erf, "Erfc": lambda x: 1 - _erf(x),
    "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.round, "LogicalNot": np.logical_not, "ZerosLike": np.zeros_like,
    "OnesLike": np.ones_like, "Sin": np.sin, "Cos": np.cos,
}
BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "AddV2": np.add, "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "RealDiv": np.true_divide, "Div": np.true_divide, "DivNoNan":
        lambda a, b: np.where(b == 0, 0, a / np.where(b == 0, 1, b)),
    "Maximum": np.maximum, "Minimum": np.minimum, "Pow": np.power,
    "SquaredDifference": lambda a, b: np.square(a - b), "FloorDiv": np.floor_divide,
    "Greater": np.greater, "GreaterEqual": np.greater_equal, "Less": np.less,
    "LessEqual": np.less_equal, "Equal": np.equal, "NotEqual": np.not_equal,
    "LogicalAnd": np.logical_and, "LogicalOr": np.logical_or,
}
# Ops whose value is one of the activations a Keras layer applies (for refusals to name).
ACTIVATION_OPS = frozenset({"Sigmoid", "Tanh", "Relu", "Relu6", "Elu", "Selu", "Softplus",
                            "Softsign", "Erf", "Erfc", "Exp", "LeakyRelu", "Log", "Sin", "Cos",
                            "Square", "Sqrt", "Abs", "Sign", "Floor", "Round", "Ceil"})
_DTYPES = {tfproto.DT_FLOAT: np.float64, tfproto.DT_DOUBLE: np.float64,
           tfproto.DT_HALF: np.float64, tfproto.DT_BFLOAT16: np.float64, 3: np.int32,
           9: np.int64, tfproto.DT_BOOL: np.bool_}


class Evaluator:
    """Values of one function's tensors, computed with NumPy (see the module docstring).
    ``feeds`` gives the values of arguments and of tensors (a ``TensorListGetItem``'s item,
    say) to take as given; ``variable(node_id)`` a variable's array. Floats are computed in
    float64. ``limit`` bounds the bytes the values built may take."""

    def __init__(self, library: Library, function: str, feeds: Mapping[Ref, np.ndarray],
                 variable: Callable[[int], np.ndarray], limit: int) -> None:
        self.library, self.function = library, function
        self.feeds = {(ref.node, ref.output is None, ref.index if ref.output is not None else 0):
                      value for ref, value in feeds.items()}
        self.variable = variable
        self.limit, self.used = limit, 0
        self.values: dict[str, list[np.ndarray]] = {}

    def __call__(self, ref: Ref) -> np.ndarray:
        if ref.is_argument:
            return self._argument(ref)
        fed = self.feeds.get((ref.node, False, ref.index))
        if fed is not None:
            return fed
        self._evaluate(ref.node)
        outputs = self.values[ref.node]
        if ref.index >= len(outputs):
            raise FormatError(f"{self.library.where}: {ref.describe()}: the node has "
                              f"{len(outputs)} output(s); the graph is damaged.")
        return outputs[ref.index]

    def _argument(self, ref: Ref) -> np.ndarray:
        fed = self.feeds.get((ref.node, True, 0))
        if fed is not None:
            return fed
        raise Unevaluable("argument", ref.node, "a value the loop carries that the step does "
                          "not say")

    def _evaluate(self, name: str) -> None:
        """Evaluate node ``name`` and what it depends on, depth first without recursion."""
        stack = [name]
        while stack:
            current = stack[-1]
            if current in self.values:
                stack.pop()
                continue
            node = self.library.nodes.get(self.function, {}).get(current)
            if node is None:
                raise FormatError(f"{self.library.where}: {self.function}: no node "
                                  f"{current!r}, which another takes as input; the graph is "
                                  "damaged.")
            if len(stack) > MAX_STEPS_BACK:
                raise FormatError(f"{self.library.where}: {self.function}: operations nested "
                                  f"more than {MAX_STEPS_BACK:,} deep; the graph is damaged.")
            pending = [] if node.op == "ReadVariableOp" else [
                ref.node for ref in self.library.inputs(self.function, node)
                if not ref.is_argument and ref.node not in self.values
                and (ref.node, False, ref.index) not in self.feeds]
            if pending:
                stack.extend(pending)
                continue
            self.library.charge(1 + len(node.input))
            # A variable's read takes its handle, which is no value.
            inputs = [] if node.op == "ReadVariableOp" else [
                self(ref) for ref in self.library.inputs(self.function, node)]
            try:
                outputs = self._compute(node, inputs)
            except RnnportError:
                raise
            except (ValueError, IndexError, TypeError, OverflowError, MemoryError) as error:
                raise FormatError(f"{self.library.where}: {self.function}: node {node.name!r} "
                                  f"({node.op}) cannot be computed on the values it gets "
                                  f"({type(error).__name__}: {str(error)[:120]}); the graph "
                                  "is damaged.") from None
            for value in outputs:
                self.used += value.nbytes
            if self.used > self.limit:
                raise budget.exceeded(self.library.where, "evaluating a loop's step would "
                                      f"build {self.used:,} bytes of values", "expansion",
                                      self.library.size)
            self.values[current] = outputs
            stack.pop()

    def _room(self, shape: tuple[int, ...]) -> None:
        """Refuse a value of ``shape`` before it is built when it would pass the limit."""
        if math.prod(shape) * 8 > self.limit - self.used:
            raise budget.exceeded(self.library.where, "evaluating a loop's step would build a "
                                  f"value of shape {list(shape)}", "expansion", self.library.size)

    def _shape(self, dims: np.ndarray) -> tuple[int, ...]:
        shape = tuple(int(d) for d in np.ravel(dims))
        if any(d < 0 for d in shape) or math.prod(shape) * 8 > self.limit:
            raise ValueError(f"shape {list(shape)}")
        return shape

    def _compute(self, node: tfproto.NodeDef, inputs: list[np.ndarray]) -> list[np.ndarray]:
        op = node.op
        if op == "Const":
            value = node.attr.get("value")
            if value is None or not isinstance(value.value, tfproto.TensorValue):
                raise ValueError("a Const without a tensor")
            if value.value.size * 8 > self.limit:
                raise ValueError(f"a constant of {value.value.size:,} elements")
            try:
                return [_floats(np.asarray(value.value.numpy()))]
            except RnnportError as error:
                raise Unevaluable(op, node.name, str(error)) from None
        if op in PASS:
            return [inputs[0]]
        if op == "IdentityN":
            return list(inputs)
        if op == "ReadVariableOp":
            held = self.library.variable(self.library.inputs(self.function, node)[0])
            if held is None:
                raise Unevaluable(op, node.name, "reads a resource that is no saved variable")
            return [_floats(np.asarray(self.variable(held)))]
        if op in UNARY:
            with np.errstate(all="ignore"):
                return [UNARY[op](inputs[0])]
        if op in BINARY:
            self._room(np.broadcast_shapes(inputs[0].shape, inputs[1].shape))
            with np.errstate(all="ignore"):
                return [BINARY[op](inputs[0], inputs[1])]
        if op == "AddN":
            return [sum(inputs[1:], inputs[0])]
        if op == "LeakyRelu":
            alpha = node.attr.get("alpha")
            slope = float(alpha.value) if alpha is not None and alpha.kind == "f" else 0.2  # type: ignore[arg-type]
            return [np.where(inputs[0] > 0, inputs[0], slope * inputs[0])]
        if op == "ClipByValue":
            return [np.minimum(np.maximum(inputs[0], inputs[1]), inputs[2])]
        if op == "Cast":
            target = _DTYPES.get(attr_type(node, "DstT") or 0)
            if target is None:
                raise Unevaluable(op, node.name, "a cast to a type the step does not compute in")
            return [inputs[0].astype(target)]
        if op in ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "BatchMatMul"):
            first, second = inputs[0], inputs[1]
            flags = ("transpose_a", "transpose_b") if op == "MatMul" else ("adj_x", "adj_y")
            if _flag(node, flags[0]):
                first = np.swapaxes(first, -1, -2)
            if _flag(node, flags[1]):
                second = np.swapaxes(second, -1, -2)
            if first.ndim < 2 or second.ndim < 2:
                raise ValueError("a matrix product of fewer than two dimensions")
            self._room((*np.broadcast_shapes(first.shape[:-2], second.shape[:-2]),
                        first.shape[-2], second.shape[-1]))
            return [np.matmul(first, second)]
        if op == "BiasAdd":
            if attr_text(node, "data_format", "NHWC") != "NHWC":
                raise Unevaluable(op, node.name, "data_format NCHW")
            return [inputs[0] + inputs[1]]
        if op == "Split":
            count = attr_int(node, "num_split", 1)
            if not 1 <= count <= MAX_PIECES:
                raise ValueError(f"num_split {count}")
            return list(np.split(inputs[1], count, axis=int(inputs[0])))
        if op == "SplitV":
            if inputs[1].size > MAX_PIECES:
                raise ValueError(f"{inputs[1].size} pieces")
            sizes = [int(s) for s in np.ravel(inputs[1])]
            axis = int(inputs[2])
            if sizes.count(-1) == 1:
                sizes[sizes.index(-1)] = inputs[0].shape[axis] - (sum(sizes) + 1)
            return list(np.split(inputs[0], np.cumsum(sizes)[:-1], axis=axis))
        if op == "StridedSlice":
            return [_strided_slice(node, inputs[0], inputs[1], inputs[2], inputs[3])]
        if op == "Slice":
            begin = [int(b) for b in np.ravel(inputs[1])]
            size = [int(s) for s in np.ravel(inputs[2])]
            index = tuple(slice(b, None if s == -1 else b + s) for b, s in zip(begin, size, strict=True))
            return [inputs[0][index]]
        if op == "Squeeze":
            dims = attr_ints(node, "squeeze_dims")
            return [np.squeeze(inputs[0], axis=dims or None)]
        if op == "ExpandDims":
            return [np.expand_dims(inputs[0], int(inputs[1]))]
        if op == "Reshape":
            return [inputs[0].reshape(tuple(int(d) for d in np.ravel(inputs[1])))]
        if op == "ConcatV2":
            return [np.concatenate(inputs[:-1], axis=int(inputs[-1]))]
        if op == "Pack":
            return [np.stack(inputs, axis=attr_int(node, "axis", 0))]
        if op == "Unpack":
            axis = attr_int(node, "axis", 0)
            if inputs[0].shape[axis] > MAX_PIECES:
                raise ValueError(f"{inputs[0].shape[axis]} pieces")
            return [np.take(inputs[0], k, axis=axis) for k in range(inputs[0].shape[axis])]
        if op == "Transpose":
            return [np.transpose(inputs[0], [int(p) for p in np.ravel(inputs[1])])]
        if op == "Tile":
            multiples = self._shape(inputs[1])
            if math.prod(multiples) * inputs[0].size * 8 > self.limit:
                raise ValueError(f"a tile of {list(multiples)}")
            return [np.tile(inputs[0], multiples)]
        if op == "Fill":
            return [np.full(self._shape(inputs[0]), inputs[1])]
        if op == "Shape":
            return [np.asarray(inputs[0].shape, dtype=np.int64 if attr_type(node, "out_type")
                               == 9 else np.int32)]
        if op in ("Select", "SelectV2"):
            self._room(np.broadcast_shapes(*(value.shape for value in inputs[1:])))
            condition = inputs[0]
            if op == "Select" and condition.ndim == 1 and inputs[1].ndim > 1:
                condition = condition.reshape(-1, *[1] * (inputs[1].ndim - 1))
            return [np.where(condition, inputs[1], inputs[2])]
        if op == "GatherV2":
            return [np.take(inputs[0], inputs[1].astype(np.int64), axis=int(inputs[2]))]
        raise Unevaluable(op, node.name)


def _flag(node: tfproto.NodeDef, name: str) -> bool:
    attr = node.attr.get(name)
    return bool(attr.value) if attr is not None and attr.kind == "b" else False
