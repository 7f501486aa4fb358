"""Reading an ONNX model's constants: where the recurrent nodes are, and what their weights
hold, without running the graph.

**Scopes.** The recurrent nodes may sit in the main graph, in the bodies of ``If``
(``then_branch`` / ``else_branch``), ``Loop`` and ``Scan`` nodes (``body``), and in model-local
functions. Each such graph is a :class:`Scope`; a name it does not define comes from the
scope around it (ONNX's outer-scope references), and a function's inputs are the values its
caller passes.

**Values.** A weight is an initializer, a ``Constant`` node, a graph input given in
``inputs=`` (or with an initializer of the same name, its default), or the result of a
named set of shape and slicing operators applied to such values, computed here with
NumPy: ``Identity``, ``Cast``, ``Unsqueeze``, ``Squeeze``, ``Slice``, ``Concat``, ``Split``,
``Reshape``, ``Transpose``, ``Gather``, ``Shape``, ``Expand``, and ``Add`` / ``Sub`` / ``Mul`` /
``Div`` of integers (the arithmetic on sizes) — what PyTorch's exporters write without
constant folding. Arithmetic on floats would compute new numbers and is refused. Any
other operator is refused by name, with the way out: fold the graph first (ONNX Runtime's
offline optimiser, ``onnxruntime.SessionOptions.optimized_model_filepath``).

**External data.** A tensor whose bytes live in another file (ONNX external data, what
PyTorch's exporter writes by default beside ``m.onnx`` as ``m.onnx.data``) is read from the
model's own folder only: the location must be a relative path inside that folder (no
absolute path, no ``..``, no link leading out), and its offset and length must lie inside
the file and match the tensor's shape. Nothing else is opened.

**Budgets.** A hostile graph cannot make the reader allocate or recurse without bound:
stored tensors are decoded once, however many nodes, scopes and function calls read them,
and computed values are cached; every array decoded, every new array folding makes (a view
of an array already held costs nothing, a copy costs its size, however a NumPy operation
hid it) and every recurrent node's weights copied into the network read are charged,
before they are made, against what the ``expansion`` limit (:mod:`rnnport.budget`) allows
for the bytes the model's stored tensors hold: four times them, plus 16 MiB, unless raised
with ``rnnport.limits(expansion=…)``; folding the graph offline, which stores the weights
as tensors, also raises it. The nodes of every scope (each function call's body again),
the values followed and the nodes run to check an unrolled network count against the
``work`` limit, relative to the model's size. Values are followed with an explicit stack,
never Python recursion, and one computed through more than :data:`MAX_DEPTH` nested nodes
is refused; scopes nest at most :data:`MAX_SCOPE_DEPTH` deep, a scope's path names only
the innermost few, and a function that calls itself is refused. A tensor declaring a
negative dimension, or holding strings, is refused before it is decoded.
"""

from __future__ import annotations

import math
import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ... import budget
from ...budget import Meter
from ...errors import FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...io.inputs import checked, open_file, read_file
from .._common import describe, require

__all__ = ["FOLDABLE", "MAX_DEPTH", "MAX_SCOPE_DEPTH", "BudgetError", "Loaded", "Scope",
           "attributes", "exhausted", "external_files", "fold", "is_proto", "load", "scopes"]

FOLDABLE = ("Identity", "Cast", "Unsqueeze", "Squeeze", "Slice", "Concat", "Split", "Reshape",
            "Transpose", "Gather", "Shape", "Expand", "Add", "Sub", "Mul", "Div")
MAX_DEPTH = 200
MAX_NODES = 500_000  # nodes in all scopes, each function call's body counted again
MAX_SCOPE_DEPTH = 64  # subgraphs and function calls inside one another
TRAIL = 3  # the innermost scopes a scope's path names
EXTERNAL = 1  # TensorProto.EXTERNAL
STRING = 8  # TensorProto.STRING
# A Constant node's numeric attributes and their AttributeProto types: FLOAT, FLOATS, INT, INTS.
CONSTANT_TYPES = {"value_float": 1, "value_floats": 6, "value_int": 2, "value_ints": 7}


class BudgetError(LimitError):
    """Computing a value would take more memory than a model of this size justifies."""


def exhausted(where: str, what: str, stored: int | None = None,
              needed: int | None = None) -> BudgetError:
    """The error for ``what`` (“the result would be …”) past the ``expansion`` limit, for a
    model whose tensors store ``stored`` bytes (when known), ``needed`` bytes in all."""
    error = budget.exceeded(where, f"{what}, more memory than the values computed from a "
                            "graph may take", "expansion", stored, needed)
    return BudgetError(f"{error} A real model whose weights are computed this way also reads "
                       "once its constants are folded offline (ONNX Runtime's SessionOptions."
                       "optimized_model_filepath), which stores them as tensors.", error.limit)


@dataclass
class Loaded:
    """A model (or a bare graph) and the folder its external data may come from."""

    graph: Any
    functions: dict[tuple[str, str], Any]  # (domain, name) → FunctionProto
    folder: Path | None
    where: str
    budget: int = 0  # bytes computed values may still take
    limit: int = 0  # the budget, in all
    stored: int = 0  # bytes the model's tensors store, of which the budget is made
    opsets: list[Any] = field(default_factory=list)  # the model's opset_import
    size: int = 0  # the serialized model's bytes, which the work limit is relative to
    work: Meter = field(init=False)
    # id(TensorProto) → the tensor (kept, so that its id stays its own) and its array
    decoded: dict[int, tuple[Any, np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work = Meter("work", self.size, self.where, "steps (nodes of every scope "
                                 "and function call, values followed, nodes run to check a "
                                 "network)")


def load(source: Any) -> Loaded:
    """``source`` (a ModelProto, a GraphProto or a path) as a :class:`Loaded`."""
    onnx = require("onnx", extra="onnx", purpose="read(fmt='onnx')")
    folder, size = None, 0
    if is_proto(source, "ModelProto"):
        model, where = source, "ONNX model"
    elif is_proto(source, "GraphProto"):
        loaded = Loaded(source, {}, None, "ONNX graph", size=source.ByteSize())
        loaded.stored = _stored_bytes(source, {}, None)
        loaded.budget = loaded.limit = budget.allowance("expansion", loaded.stored)
        return loaded
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not os.path.lexists(path):
            raise FormatError(f"{path}: no such file; expected an .onnx model.")
        data = read_file(path, str(path))
        try:
            model = onnx.load_model_from_string(data)
        except Exception as error:  # protobuf raises its own DecodeError types
            raise FormatError(f"{path}: not a readable ONNX model ({type(error).__name__}: "
                              f"{error}); the file may be truncated or not ONNX.") from None
        folder, where = path.resolve().parent, str(path)
        size = len(data)
    else:
        raise FormatError(f"read(fmt='onnx'): expected an onnx.ModelProto, a GraphProto or a "
                          f"path to an .onnx file, got {describe(source)}.")
    functions = {(function.domain, function.name): function for function in model.functions}
    loaded = Loaded(model.graph, functions, folder, where, opsets=list(model.opset_import),
                    size=size if folder is not None else model.ByteSize())
    loaded.stored = _stored_bytes(model.graph, functions, folder)
    loaded.budget = loaded.limit = budget.allowance("expansion", loaded.stored)
    return loaded


def is_proto(source: Any, name: str) -> bool:
    return type(source).__name__ == name and hasattr(source, "SerializeToString")


def _stored_bytes(graph: Any, functions: Mapping[tuple[str, str], Any], folder: Path | None) -> int:
    """The bytes the model's tensors store: what they hold inline, and for external data
    what they declare, up to the size of the file named (a declared shape alone stores
    nothing); a Constant node's list of numbers counts as a tensor."""
    stored = 0
    for tensor in _tensors(graph, functions, lists=True):
        if type(tensor).__name__ == "AttributeProto":  # value_floats, value_ints
            stored += tensor.ByteSize()
        elif tensor.data_location == EXTERNAL or len(tensor.external_data):
            declared = math.prod(max(int(dim), 0) for dim in tensor.dims) * 8
            stored += min(declared, _external_size(tensor, folder))
        else:
            stored += tensor.ByteSize()
    return stored


def _external_size(tensor: Any, folder: Path | None) -> int:
    """The size of the file a tensor's external data names, if it lies in ``folder``."""
    location = next((entry.value for entry in tensor.external_data
                     if entry.key == "location"), "")
    if folder is None or not location or os.path.isabs(location) or ".." in Path(location).parts:
        return 0
    try:
        return (folder / location).stat().st_size
    except (OSError, ValueError):
        return 0


def _tensors(graph: Any, functions: Mapping[tuple[str, str], Any],
             lists: bool = False) -> Iterator[Any]:
    """The tensors the model stores (initializers, attributes), and with ``lists`` the
    Constant nodes' numeric attributes too."""
    pending = [graph]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield from current.initializer
        for node in current.node:
            yield from _stored(node, lists)
            for attribute in node.attribute:
                if attribute.HasField("g"):
                    pending.append(attribute.g)
                pending.extend(attribute.graphs)
    for function in functions.values():
        for node in function.node:
            yield from _stored(node, lists)


def _stored(node: Any, lists: bool) -> Iterator[Any]:
    for attribute in node.attribute:
        if attribute.HasField("t"):
            yield attribute.t
        elif lists and node.op_type == "Constant" and attribute.name in CONSTANT_TYPES:
            yield attribute


# -- scopes ----------------------------------------------------------------------------------


@dataclass(eq=False)
class Scope:
    """One graph (or function body) whose nodes may hold recurrent layers, and how the
    names it uses get their values."""

    loaded: Loaded
    nodes: list[Any]
    path: str  # "" for the main graph; "If 'cond' then_branch", "function 'f'" …
    parent: Scope | None = None
    depth: int = 0  # scopes around it
    trail: tuple[str, ...] = ()  # the innermost few pieces of its path
    function: tuple[str, str] | None = None  # (domain, name) of the function it is a call of
    initializers: dict[str, Any] = field(default_factory=dict)
    inputs: set[str] = field(default_factory=set)  # names fed at run time
    bindings: dict[str, str] = field(default_factory=dict)  # function input → caller's name
    given: Mapping[str, Any] = field(default_factory=dict)  # the main graph's inputs=
    cache: dict[str, np.ndarray] = field(default_factory=dict)
    not_constant: set[str] = field(default_factory=set)  # names :meth:`constant` found none for
    producers: dict[str, Any] = field(init=False)
    _consumers: dict[str, list[Any]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.producers = {name: node for node in self.nodes for name in node.output if name}

    @property
    def consumers(self) -> dict[str, list[Any]]:
        """Name → the nodes that take it, in graph order."""
        if self._consumers is None:
            self._consumers = {}
            for node in self.nodes:
                for name in node.input:
                    self._consumers.setdefault(name, []).append(node)
        return self._consumers

    def label(self, node: Any) -> str:
        own = _own_label(node)
        return f"{self.path}: {own}" if self.path else own

    def inner(self, piece: str, **fields: Any) -> tuple[str, int, tuple[str, ...]]:
        """The path, depth and trail of a scope ``piece`` inside this one: a path names the
        innermost :data:`TRAIL` scopes and how many are around them, so that a path never
        repeats the whole nesting (a function called inside a function inside … would cost
        the square of its depth)."""
        trail = (*self.trail, piece)[-TRAIL:]
        depth = self.depth + 1
        out = f"… ({depth - TRAIL} scopes out): " if depth > TRAIL else ""
        return out + ": ".join(trail), depth, trail

    # -- values ----------------------------------------------------------------------------

    def value(self, name: str, where: str) -> np.ndarray:
        """The constant ``name`` holds, or an error saying why it is not one."""
        if name in self.cache:
            return self.cache[name]
        # An explicit stack, not recursion: how deeply a graph nests its nodes must never
        # meet Python's recursion limit, wherever the caller's own stack stands.
        stack: list[_Pending] = []
        open_at: dict[tuple[int, str], int] = {}  # (scope, name) on the stack → its index
        value = self._open(name, where, stack, open_at)
        while stack:
            top = stack[-1]
            if len(top.got) < len(top.wants):
                scope, wanted = top.wants[len(top.got)]
                if not wanted:  # an omitted optional input
                    top.got.append(None)
                elif wanted in scope.cache:
                    top.got.append(scope.cache[wanted])
                else:
                    found = scope._open(wanted, where, stack, open_at)
                    if found is not None:
                        top.got.append(found)
                continue
            stack.pop()
            del open_at[(id(top.scope), top.name)]
            value = top.finish(top.got)
            top.scope.cache[top.name] = value
            if stack:
                stack[-1].got.append(value)
        if value is None:  # unreachable: the walk ends with the value asked for
            raise FormatError(f"{where}: {name!r} could not be computed; the graph is malformed.")
        return value

    def constant(self, name: str) -> np.ndarray | None:
        """The constant ``name`` holds, or None when it holds none (remembered, so asking
        again costs nothing). A graph built to exhaust memory still raises."""
        if not name or name in self.not_constant:
            return None
        try:
            return self.value(name, self.path or "ONNX graph")
        except LimitError:  # a BudgetError, or the work limit
            raise
        except RnnportError:
            self.not_constant.add(name)
            return None

    def _open(self, name: str, where: str, stack: list[_Pending],
              open_at: dict[tuple[int, str], int]) -> np.ndarray | None:
        """``name``'s value when it needs no other value (cached too); otherwise None, with
        what it waits for pushed on ``stack``."""
        key = (id(self), name)
        if key in open_at:
            cycle = [entry.name for entry in stack[open_at[key]:]]
            raise FormatError(f"{where}: {name!r} is computed from itself (a cycle of "
                              f"{' → '.join(map(repr, [*cycle, name]))}); expected every value "
                              "to come from earlier ones, so the graph is malformed. Re-export "
                              "the model.")
        if len(stack) > MAX_DEPTH:
            raise FormatError(f"{where}: {name!r} is computed through more than {MAX_DEPTH} "
                              f"nested nodes (it was reached through {stack[0].name!r}); no "
                              "exporter writes that, so the graph is damaged or built to break "
                              "a reader. Fold the graph's constants offline (ONNX Runtime's "
                              "SessionOptions.optimized_model_filepath), which stores the "
                              "weights as tensors.")
        found = self._lookup(name, where)
        if isinstance(found, _Pending):
            open_at[key] = len(stack)
            stack.append(found)
            return None
        self.cache[name] = found
        return found

    def _lookup(self, name: str, where: str) -> np.ndarray | _Pending:
        """``name``'s value, or what it waits for and how it is made from that."""
        if name in self.bindings and self.parent is not None:  # what the caller passes
            return _Pending(self, name, [(self.parent, self.bindings[name])], _only)
        if name in self.given:
            return _given(self.given[name], name, where)
        if name in self.initializers:  # also the default of a graph input of that name
            return self._tensor(self.initializers[name], where)
        if name in self.inputs:
            inputs = ", ".join(sorted(self.inputs))
            raise UnsupportedFeatureError(
                f"{where}: {name!r} is a graph input fed at run time, not a constant; rnnport "
                "reads weights stored in the file. Pass its value to read, e.g. "
                f"rnnport.read(path, inputs={{{name!r}: array}}) (-O 'inputs={{\"{name}\": "
                "[...]}' on the command line), or fold it into an initializer first. The "
                f"graph's inputs: {inputs}.")
        node = self.producers.get(name)
        if node is None:
            if self.parent is not None:  # an outer-scope value
                return _Pending(self, name, [(self.parent, name)], _only)
            raise FormatError(f"{where}: {name!r} is produced by no node, initializer or input "
                              "of the graph; the graph is malformed.")
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            return self._constant(node, where)
        if node.op_type not in FOLDABLE or node.domain not in ("", "ai.onnx"):
            raise UnsupportedFeatureError(
                f"{where}: {name!r} is computed by {node.op_type} at run time, not a constant; "
                f"rnnport computes weights only through {', '.join(FOLDABLE)} of constants. "
                "Fold the graph's constants first, e.g. with ONNX Runtime's offline optimiser "
                "(SessionOptions.optimized_model_filepath, graph_optimization_level "
                "ORT_ENABLE_BASIC).")

        def finish(arguments: list[np.ndarray | None]) -> np.ndarray:
            value = fold(node, arguments, name, where, self.label(node), self.loaded.budget)
            self._spend(value, arguments, where)
            return value

        return _Pending(self, name, [(self, item) for item in node.input], finish)

    def lineage(self, name: str, nodes: set[int], tensors: set[int],
                seen: set[tuple[int, str]]) -> None:
        """Add the nodes (by id) and initializers (by id) that ``name``'s value comes from,
        the way :meth:`value` would follow them, without computing anything; ``seen`` (the
        names followed, shared between calls) keeps every name followed once."""
        pending: list[tuple[Scope, str]] = [(self, name)]
        while pending:
            scope, current = pending.pop()
            if (id(scope), current) in seen or not current:
                continue
            seen.add((id(scope), current))
            if current in scope.bindings and scope.parent is not None:
                pending.append((scope.parent, scope.bindings[current]))
            elif current in scope.given:
                continue
            elif current in scope.initializers:
                tensors.add(id(scope.initializers[current]))
            elif current in scope.inputs:
                continue
            elif current in scope.producers:
                node = scope.producers[current]
                nodes.add(id(node))
                if node.op_type != "Shape":  # a shape, not the values behind it
                    pending.extend((scope, item) for item in node.input)
            elif scope.parent is not None:
                pending.append((scope.parent, current))

    def charge(self, size: int, where: str, what: str = "") -> None:
        """Count ``size`` bytes about to be computed from the constants against the budget;
        ``what`` names what they are, when not values folded (decoded tensors, a network's
        copies): its refusal is then the plain limit error, not the advice to fold."""
        if not what:
            self._spend(np.empty(0, np.uint8), [], where, size)
            return
        self.loaded.budget -= size
        if self.loaded.budget < 0:
            spent = self.loaded.limit - self.loaded.budget
            raise budget.exceeded(where, f"{what} would come to {spent:,} bytes with the other "
                                  "arrays read", "expansion", self.loaded.stored, spent)

    def _spend(self, value: np.ndarray, arguments: list[np.ndarray | None], where: str,
               size: int | None = None) -> None:
        """Count ``value``'s bytes (or ``size``, for one about to be made) against the budget
        unless it is a view of an argument. Whether it is one is asked of its memory, not of
        ``value.base``: NumPy hands back a view of a fresh copy (a transposed array
        reshaped), which costs its size."""
        if any(argument is not None and np.may_share_memory(value, argument)
               for argument in arguments):
            return
        self.loaded.budget -= int(value.nbytes) if size is None else size
        if self.loaded.budget < 0:
            spent = self.loaded.limit - self.loaded.budget
            raise exhausted(where, f"the arrays computed from the graph's constants would come "
                            f"to {spent:,} bytes", self.loaded.stored, spent)

    def _constant(self, node: Any, where: str) -> np.ndarray:
        for attribute in node.attribute:
            if attribute.name == "value":
                return self._tensor(attribute.t, where)
            if attribute.name in CONSTANT_TYPES and attribute.type != CONSTANT_TYPES[attribute.name]:
                raise FormatError(f"{where}: {self.label(node)} has attribute "
                                  f"{attribute.name!r} of attribute type {attribute.type}; "
                                  f"expected {CONSTANT_TYPES[attribute.name]} (ONNX's "
                                  f"{attribute.name[6:].upper()}). The model is damaged.")
            if attribute.name in ("value_float", "value_int"):
                return np.array(attribute.f if attribute.name == "value_float" else attribute.i,
                                dtype=np.float32 if attribute.name == "value_float" else np.int64)
            if attribute.name in ("value_floats", "value_ints"):
                # Straight from the stored list, without a Python list of it; int64 takes
                # more room than the varints stored, so it is paid for first.
                stored = attribute.floats if attribute.name == "value_floats" else attribute.ints
                kind = np.dtype(np.float32 if attribute.name == "value_floats" else np.int64)
                self._spend(np.empty(0, kind), [], where, len(stored) * kind.itemsize)
                return np.fromiter(stored, dtype=kind, count=len(stored))
        raise UnsupportedFeatureError(f"{where}: {self.label(node)} holds no numeric value "
                                      "(a sparse or string constant); rnnport reads dense "
                                      "numeric weights.")

    def _tensor(self, tensor: Any, where: str) -> np.ndarray:
        """A stored tensor's array, decoded once however many nodes, scopes and function
        calls read it, and paid for before it is decoded."""
        from onnx import numpy_helper

        done = self.loaded.decoded.get(id(tensor))
        if done is not None and done[0] is tensor:
            return done[1]
        self.charge(_check_tensor(tensor, where), where, f"decoding tensor {_shown(tensor.name)!r}")
        stored = tensor
        if tensor.data_location == EXTERNAL or len(tensor.external_data):
            tensor = _with_external_data(tensor, self.loaded, where)
        try:
            array = numpy_helper.to_array(tensor)
        except MemoryError:
            raise
        except Exception as error:  # onnx raises what NumPy and protobuf raise
            raise FormatError(f"{where}: tensor {tensor.name!r} cannot be read ({error}); its "
                              "data does not match its type and shape.") from None
        if array.dtype.name == "bfloat16":  # the top half of a float32: widening is exact
            array = array.astype(np.float32)
        self.loaded.decoded[id(stored)] = (stored, array)
        return array


@dataclass(eq=False)
class _Pending:
    """A value being computed: the values it ``wants`` first ((scope, name), "" for an
    omitted input), those it ``got`` so far, and how to ``finish`` it from them."""

    scope: Scope
    name: str
    wants: list[tuple[Scope, str]]
    finish: Callable[[list[np.ndarray | None]], np.ndarray]
    got: list[np.ndarray | None] = field(default_factory=list)


def _only(got: list[np.ndarray | None]) -> np.ndarray:
    """The one value a name passed on from another scope waits for."""
    (value,) = got
    if value is None:  # never: names passed on are never empty
        raise FormatError("ONNX graph: a value passed between scopes is missing.")
    return value


def _own_label(node: Any) -> str:
    name = node.name or next((output for output in node.output if output), "")
    return f"ONNX {_shown(node.op_type)} node {_shown(name)!r}"


def _shown(text: Any) -> str:
    """A name from the file for a message, cut short past 80 characters: a label is
    repeated in the path of every scope inside its node."""
    text = text if isinstance(text, str) else repr(text)  # protobuf's bytes for bad UTF-8
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text):,} characters)"


def _check_tensor(tensor: Any, where: str) -> int:
    """Refuse, before decoding it, a tensor no weight can be: a negative dimension, strings;
    else the bytes decoding it takes (bfloat16 is widened to float32)."""
    from onnx import helper

    dims = [int(dim) for dim in tensor.dims]
    if any(dim < 0 for dim in dims):
        raise FormatError(f"{where}: tensor {tensor.name!r} declares shape {dims}; expected "
                          "sizes of 0 or more (a stored tensor's shape is fixed; -1 is no "
                          "size). The model is damaged; re-export it.")
    if tensor.data_type == STRING:
        raise FormatError(f"{where}: tensor {tensor.name!r} holds strings (ONNX STRING) of "
                          f"shape {dims}; expected numbers, since weights are stored as "
                          "floating-point tensors (or integers, for sizes and indices). This "
                          "is no recurrent network's weight: check which tensor the node is "
                          "fed, or re-export the model.")
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type))
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{where}: tensor {tensor.name!r} has data type {tensor.data_type}, "
                          "which is no ONNX tensor type; expected a numeric one. The model is "
                          "damaged; re-export it.") from None
    return math.prod(dims) * (dtype.itemsize + (4 if dtype.name == "bfloat16" else 0))


def scopes(loaded: Loaded, given: Mapping[str, Any]) -> list[Scope]:
    """The main graph and every graph inside it (subgraphs, called functions) that holds
    nodes, outermost first. Every scope's nodes are counted against the ``work`` limit as
    they are taken (a function called many times counts each time); scopes nest at most
    :data:`MAX_SCOPE_DEPTH` deep, and a function that calls itself, directly or through
    others, is refused (its calls would never end)."""
    main = _graph_scope(loaded, loaded.graph, None, "")
    main.given = given
    unknown = sorted(set(given) - main.inputs)
    if unknown:
        raise FormatError(f"read(fmt='onnx'): inputs= names {', '.join(map(repr, unknown))}, "
                          "which are no inputs of the graph; its inputs: "
                          f"{', '.join(sorted(main.inputs)) or 'none'}.")
    out: list[Scope] = []
    pending = deque([main])
    calls, nodes = 0, len(main.nodes)
    loaded.work.charge(len(main.nodes), "taking the graph's nodes")

    def count(more: int, inside: Scope, node: Any) -> None:  # before a scope's nodes are taken
        nonlocal nodes
        nodes += more
        if nodes > MAX_NODES:
            raise FormatError(f"{loaded.where}: more than {MAX_NODES:,} nodes, counting those of "
                              "subgraphs and of every function call; the model is built to "
                              "break a reader.")
        if inside.depth >= MAX_SCOPE_DEPTH:
            raise FormatError(f"{inside.label(node)}: a subgraph or function call nested "
                              f"{inside.depth + 1} scopes deep; expected at most "
                              f"{MAX_SCOPE_DEPTH} (exporters nest a few), so the model is "
                              "damaged or built to break a reader.")
        loaded.work.charge(1 + more, f"taking the nodes of {inside.label(node)}'s scope")

    while pending:
        scope = pending.popleft()
        out.append(scope)
        for node in scope.nodes:
            for attribute in node.attribute:
                graphs = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
                for graph in graphs:
                    count(len(graph.node), scope, node)
                    piece = f"{_own_label(node)} {_shown(attribute.name)}"
                    pending.append(_graph_scope(loaded, graph, scope, piece))
            key = (node.domain, node.op_type)
            function = loaded.functions.get(key)
            if function is not None:
                calls += 1
                if calls > 10_000:
                    raise FormatError(f"{loaded.where}: more than 10,000 function calls, "
                                      "counting nested ones; the model is built to break a "
                                      "reader.")
                _refuse_recursion(scope, node, key)
                count(len(function.node), scope, node)
                bindings = {formal: actual for formal, actual in zip(function.input, node.input,
                                                                      strict=False) if actual}
                path, depth, trail = scope.inner(
                    f"{_own_label(node)} (function {_shown(function.name)!r})")
                body = Scope(loaded, list(function.node), path, scope, depth, trail, key,
                             bindings=bindings)
                body.inputs = set(function.input) - set(bindings)
                pending.append(body)
    return out


def _refuse_recursion(scope: Scope, node: Any, key: tuple[str, str]) -> None:
    """Refuse a call of function ``key`` made inside a call of that function."""
    chain: list[tuple[str, str]] = []
    around: Scope | None = scope
    while around is not None:  # at most MAX_SCOPE_DEPTH scopes
        if around.function is not None:
            chain.append(around.function)
            if around.function == key:
                calls = " → ".join(repr(_shown(name)) for _, name in [*reversed(chain), key])
                raise FormatError(
                    f"{scope.label(node)}: function {_shown(key[1])!r} calls itself ({calls}); "
                    "expected functions that call others without coming back (ONNX functions "
                    "are expanded where they are called, and this expansion would never end), "
                    "so the model is damaged or built to break a reader.")
        around = around.parent


def _graph_scope(loaded: Loaded, graph: Any, parent: Scope | None, piece: str) -> Scope:
    path, depth, trail = ("", 0, ()) if parent is None else parent.inner(piece)
    scope = Scope(loaded, list(graph.node), path, parent, depth, trail)
    scope.initializers = {tensor.name: tensor for tensor in graph.initializer}
    scope.inputs = {value.name for value in graph.input}
    return scope


def _given(value: Any, name: str, where: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except (ValueError, TypeError) as error:
        raise FormatError(f"{where}: inputs[{name!r}] is not one rectangular array "
                          f"({error}).") from None
    if array.dtype.kind not in "fiu":
        raise FormatError(f"{where}: inputs[{name!r}] has dtype {array.dtype}; expected numbers.")
    return array


# -- external data -----------------------------------------------------------------------------


def external_files(path: Path) -> list[Path]:
    """The files beside the model at ``path`` that its tensors keep their data in (what a
    read opens, so that no write replaces them); none when it is no readable model."""
    if path.suffix.lower() != ".onnx" or not path.is_file():
        return []
    try:
        loaded = load(path)
    except (ImportError, FormatError):  # onnx missing (MissingDependencyError), or no model
        return []
    found = {entry.value for tensor in _tensors(loaded.graph, loaded.functions)
             for entry in tensor.external_data if entry.key == "location"}
    return [path.parent / location for location in sorted(found)
            if location and not Path(location).is_absolute()]


def _with_external_data(tensor: Any, loaded: Loaded, where: str) -> Any:
    """A copy of ``tensor`` holding the bytes its external-data entries point at, read from
    the model's folder only, every offset and length checked."""
    from onnx import helper

    name = tensor.name
    if loaded.folder is None:
        raise UnsupportedFeatureError(
            f"{where}: tensor {name!r} keeps its data in another file (ONNX external data), and "
            "this model was given as an object, not a path, so its folder is unknown. Read it "
            "from its path (rnnport then reads the data files beside it), or load them first: "
            "onnx.load(path) does.")
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location", "")
    relative = Path(location)
    if not location or relative.is_absolute() or ".." in relative.parts or \
            location.startswith(("/", "\\")) or ":" in location:
        raise FormatError(f"{where}: tensor {name!r} points at external data {location!r}; "
                          "rnnport reads only files named relative to the model's own folder, "
                          "without '..'. Nothing was read.")
    path = loaded.folder / relative
    resolved = checked(path, f"{where}: tensor {name!r}'s external data", inside=loaded.folder,
                       name=location)
    size = resolved.stat().st_size
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else size - offset
    except ValueError:
        raise FormatError(f"{where}: tensor {name!r}'s external data has offset "
                          f"{entries.get('offset')!r} and length {entries.get('length')!r}; "
                          "expected whole numbers.") from None
    if offset < 0 or length < 0 or offset + length > size:
        raise FormatError(f"{where}: tensor {name!r} asks for bytes {offset} to "
                          f"{offset + length} of {location!r}, which holds {size}; the model "
                          "and its data file do not belong together.")
    try:
        itemsize = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{where}: tensor {name!r} has data type {tensor.data_type}, not a "
                          "numeric ONNX type.") from None
    count = 1
    for dim in tensor.dims:
        count *= int(dim)
    if count < 0 or count * itemsize != length:
        raise FormatError(f"{where}: tensor {name!r} has shape {list(tensor.dims)} "
                          f"({count * itemsize} bytes), but its external data is {length} "
                          "bytes long; the model and its data file do not belong together.")
    with open_file(resolved, where) as file:
        file.seek(offset)
        data = file.read(length)
    copy = type(tensor)()
    copy.CopyFrom(tensor)
    del copy.external_data[:]
    copy.data_location = 0
    copy.raw_data = data
    return copy


def attributes(node: Any, where: str) -> dict[str, Any]:
    """A node's attributes by name, strings decoded; one that cannot be read is a
    FormatError naming it."""
    from onnx import helper

    out = {}
    for attribute in node.attribute:
        try:
            value = helper.get_attribute_value(attribute)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, list) and any(isinstance(item, bytes) for item in value):
                value = [item.decode("utf-8") if isinstance(item, bytes) else item
                         for item in value]
        except MemoryError:
            raise
        except Exception as error:  # an unknown attribute type, text that is not UTF-8
            raise FormatError(f"{where}: attribute {attribute.name!r} cannot be read "
                              f"({type(error).__name__}: {error}); the model is damaged.") \
                from None
        out[attribute.name] = value
    return out


# -- folding -------------------------------------------------------------------------------------


@dataclass
class _Call:
    """One foldable node being computed: its attributes, constant inputs and output name."""

    op: str
    attributes: dict[str, Any]
    arguments: list[np.ndarray | None]
    outputs: list[str]
    name: str
    where: str
    limit: int  # bytes the result may take

    def data(self, index: int = 0) -> np.ndarray:
        found = self.arguments[index] if len(self.arguments) > index else None
        if found is None:
            raise FormatError(f"{self.where}: {self.op} lacks input {index}; the graph is "
                              "malformed.")
        return found

    def optional(self, index: int) -> np.ndarray | None:
        return self.arguments[index] if len(self.arguments) > index else None

    def ints(self, index: int, what: str) -> list[int]:
        return _ints(self.data(index), what, self.where)

    def fits(self, shape: tuple[int, ...], dtype: np.dtype) -> tuple[int, ...]:
        """``shape``, after checking a result of it stays within the budget."""
        count = 1
        for dim in shape:
            if dim < 0:
                raise FormatError(f"{self.where}: a negative size in {shape}; the graph is "
                                  "malformed.")
            count *= dim
        if count * dtype.itemsize > self.limit:
            raise exhausted(self.where, f"the result would be {shape} of {dtype}",
                            needed=count * dtype.itemsize)
        return shape


def _ints(value: np.ndarray | None, what: str, where: str) -> list[int]:
    if value is None:
        raise FormatError(f"{where}: {what} is missing.")
    if value.dtype.kind not in "iu" or value.ndim > 1 or value.size > 64:
        raise FormatError(f"{where}: {what} is {value.dtype} of shape {value.shape}; expected "
                          "at most 64 integers.")
    return [int(item) for item in value.reshape(-1)]


def _identity(call: _Call) -> np.ndarray:
    return call.data()


def _cast(call: _Call) -> np.ndarray:
    from onnx import helper

    data, to = call.data(), call.attributes.get("to")
    try:
        target = np.dtype(helper.tensor_dtype_to_np_dtype(to))
    except (KeyError, TypeError, ValueError):
        raise FormatError(f"{call.where}: Cast to={to!r} is not an ONNX tensor type; the graph "
                          "is malformed.") from None
    # A float→float cast only sets the graph's compute precision: keep the weights as
    # stored, so a round trip gives them back unchanged.
    if data.dtype.kind == "f" and target.kind == "f":
        return data
    if data.dtype.kind not in "fiub" or target.kind not in "fiub":
        # Strings (NumPy's object or str arrays) would be parsed as numbers by astype, which
        # raises its own errors on text and is no weight's way into a graph.
        found = "strings" if data.dtype.kind in "OSU" else str(data.dtype)
        wanted = "strings (ONNX STRING)" if target.kind in "OSU" else str(target)
        raise FormatError(f"{call.where}: Cast of {found} to {wanted}; expected a cast between "
                          "numeric types (booleans, integers, floats), as exporters write for "
                          "weights and sizes. The graph does not compute numeric weights here; "
                          "check which value the node is fed, or re-export the model.")
    call.fits(data.shape, target)  # int8 → int64 takes eight times the room
    return data.astype(target)


def _axes(call: _Call) -> list[int] | None:
    axes = call.attributes.get("axes")  # opset < 13: an attribute; later an input
    if axes is None and call.optional(1) is not None:
        return call.ints(1, "axes")
    return None if axes is None else [int(axis) for axis in axes]


def _unsqueeze(call: _Call) -> np.ndarray:
    data, axes = call.data(), _axes(call)
    if axes is None:
        raise FormatError(f"{call.where}: Unsqueeze without axes; the graph is malformed.")
    rank = data.ndim + len(axes)
    return np.expand_dims(data, tuple(sorted(axis % rank for axis in axes)))


def _squeeze(call: _Call) -> np.ndarray:
    data, axes = call.data(), _axes(call)
    if axes is None:
        return np.squeeze(data)
    return np.squeeze(data, axis=tuple(axis % max(data.ndim, 1) for axis in axes))


def _transpose(call: _Call) -> np.ndarray:
    perm = call.attributes.get("perm")
    return np.transpose(call.data(), None if perm is None else [int(p) for p in perm])


def _reshape(call: _Call) -> np.ndarray:
    data, shape = call.data(), call.ints(1, "shape")
    if not call.attributes.get("allowzero", 0):  # 0 keeps the input's size there
        shape = [data.shape[i] if dim == 0 and i < data.ndim else dim
                 for i, dim in enumerate(shape)]
    return data.reshape(shape)


def _concat(call: _Call) -> np.ndarray:
    parts = [part for part in call.arguments if part is not None]
    axis = int(call.attributes.get("axis", 0))
    if parts:
        total = sum(part.shape[axis % max(part.ndim, 1)] for part in parts if part.ndim)
        shape = list(parts[0].shape)
        if shape:
            shape[axis % len(shape)] = total
        call.fits(tuple(shape), parts[0].dtype)
    return np.concatenate(parts, axis=axis)


def _gather(call: _Call) -> np.ndarray:
    data, indices = call.data(), call.data(1)
    if indices.dtype.kind not in "iu":
        raise FormatError(f"{call.where}: Gather indices of dtype {indices.dtype}; expected "
                          "integers.")
    axis = int(call.attributes.get("axis", 0)) % max(data.ndim, 1)
    size = data.shape[axis]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise FormatError(f"{call.where}: Gather indices outside [-{size}, {size}).")
    call.fits((*data.shape[:axis], *indices.shape, *data.shape[axis + 1:]), data.dtype)
    return np.take(data, indices.astype(np.int64) % max(size, 1), axis=axis)


def _slice(call: _Call) -> np.ndarray:
    data, attributes = call.data(), call.attributes
    if "starts" in attributes:  # opset 1–9: attributes
        starts, ends = list(attributes["starts"]), list(attributes["ends"])
        axes = list(attributes.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = call.ints(1, "starts"), call.ints(2, "ends")
        axes = call.ints(3, "axes") if call.optional(3) is not None else list(range(len(starts)))
        steps = call.ints(4, "steps") if call.optional(4) is not None else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps) or 0 in steps:
        raise FormatError(f"{call.where}: Slice starts, ends, axes and steps disagree.")
    index: list[slice] = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        index[axis % data.ndim] = slice(start, end, step)
    return data[tuple(index)]


def _split(call: _Call) -> np.ndarray:
    data = call.data()
    axis = int(call.attributes.get("axis", 0)) % max(data.ndim, 1)
    if "split" in call.attributes:
        sizes = [int(size) for size in call.attributes["split"]]
    elif call.optional(1) is not None:
        sizes = call.ints(1, "split")
    else:
        count = int(call.attributes.get("num_outputs", len(call.outputs)))
        if count != len(call.outputs):
            raise FormatError(f"{call.where}: Split num_outputs={count} but the node has "
                              f"{len(call.outputs)} outputs; the graph is malformed.")
        whole = data.shape[axis]
        chunk = -(-whole // count) if count > 0 else 0
        sizes = [min(chunk, max(whole - i * chunk, 0)) for i in range(max(count, 0))]
    if sum(sizes) != data.shape[axis] or len(sizes) != len(call.outputs) or \
            min(sizes, default=0) < 0:
        raise FormatError(f"{call.where}: Split sizes {sizes[:8]} do not divide axis {axis} of "
                          f"shape {data.shape} into {len(call.outputs)} outputs.")
    starts = np.cumsum([0, *sizes])
    position = call.outputs.index(call.name)
    index: list[slice] = [slice(None)] * data.ndim
    index[axis] = slice(int(starts[position]), int(starts[position + 1]))
    return data[tuple(index)]


def _shape(call: _Call) -> np.ndarray:
    shape = call.data().shape
    start = int(call.attributes.get("start", 0))
    end = call.attributes.get("end")
    return np.array(shape[start:None if end is None else int(end)], dtype=np.int64)


def _expand(call: _Call) -> np.ndarray:
    data, shape = call.data(), call.ints(1, "shape")
    target = call.fits(np.broadcast_shapes(data.shape, tuple(shape)), data.dtype)
    return np.array(np.broadcast_to(data, target))


def _arithmetic(call: _Call) -> np.ndarray:
    """Add, Sub, Mul, Div of integers: the arithmetic exporters do on sizes. On floats it
    would compute new numbers, which is the runtime's work, not a reader's."""
    first, second = call.data(), call.data(1)
    if first.dtype.kind not in "iu" or second.dtype.kind not in "iu":
        raise UnsupportedFeatureError(
            f"{call.where}: {call.op} of {first.dtype} and {second.dtype}; rnnport folds "
            "arithmetic on integer sizes only, not on weights. Fold the graph's constants "
            "first (ONNX Runtime's offline optimiser).")
    call.fits(np.broadcast_shapes(first.shape, second.shape), first.dtype)
    if call.op == "Div":
        if not second.all():
            raise FormatError(f"{call.where}: integer division by zero.")
        quotient = np.abs(first) // np.abs(second)  # ONNX truncates toward zero
        return (quotient * np.sign(first) * np.sign(second)).astype(first.dtype)
    operation = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply}[call.op]
    return operation(first, second)


_FOLDERS = {"Identity": _identity, "Cast": _cast, "Unsqueeze": _unsqueeze,
            "Squeeze": _squeeze, "Slice": _slice, "Concat": _concat, "Split": _split,
            "Reshape": _reshape, "Transpose": _transpose, "Gather": _gather, "Shape": _shape,
            "Expand": _expand, "Add": _arithmetic, "Sub": _arithmetic, "Mul": _arithmetic,
            "Div": _arithmetic}


def fold(node: Any, arguments: list[np.ndarray | None], name: str, where: str, label: str,
          limit: int) -> np.ndarray:
    """The output ``name`` of ``node`` (one of :data:`FOLDABLE`) from constant inputs."""
    call = _Call(node.op_type, attributes(node, label), arguments, list(node.output), name,
                 f"{where}, computing {name!r} ({label})", limit)
    try:
        return _FOLDERS[node.op_type](call)
    except RnnportError:
        raise
    except (ValueError, IndexError, TypeError, ArithmeticError) as error:  # AxisError is both
        raise FormatError(f"{call.where}: {error}; the graph is malformed.") from None
