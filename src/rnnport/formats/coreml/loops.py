"""The recurrent cell a Core ML loop computes: a NeuralNetwork ``loop`` layer or an ML
Program ``while_loop``, as coremltools writes a PyTorch GRU (Core ML has no reset-after
GRU) or a TensorFlow Keras layer, read by evaluating one step symbolically
(:mod:`.._loops`).

**What coremltools writes** for a PyTorch GRU (both kinds alike)::

    counter = 0                      buffer = zeros (T+1, B, H)   row 0: the initial state
    while counter < T:
        x  = squeeze(gather(sequence, counter, axis 0))           sequence (T, B, I)
        h  = squeeze(gather(buffer, counter, axis 0))
        h' = the cell's step, from linear / innerProduct, add, mul, sub, sigmoid, tanh …
        counter' = counter + 1
        buffer'  = scatter(buffer, counter', expand_dims(h'), axis 0)   update, or add to 0
    y = buffer[1:T+1]                (T, B, H), time first

and for a Keras layer (TensorFlow's ``while`` loop: the states carried apart, the outputs
in a TensorList of ``T`` items, written at the counter; ``x`` a row of the sequence's list)::

    counter = 0    list = zeros (T, B, H)    h = zeros (B, H)    (c = zeros (B, H))
    while counter < T:
        x = row counter of the sequence
        h', c' = the cell's step, from matmuls of the Keras kernels, the bias, a split of
                 the gates …
        list' = list with row counter set to h';  counter' = counter + 1
    y = list

Each operation is one :class:`Node`; ``loop`` layers and ``while_loop`` operations become a
:class:`Loop` (its loop values: where each starts, its value in the body and after it).
:func:`recognise` checks the counter (a constant 0, plus a constant 1 per step), the
condition (``less`` than a constant ``T``), the buffer or list (a constant of zeros, or a
list made of ``T`` items, written one row per step with the new state), the states (zeros
at first), and the step: the new state must be a canonical cell (a simple RNN; a GRU, reset
after as PyTorch's and Keras's, or before; an LSTM) with the weights and biases the body
holds, bit for bit. A ``branch`` in the body is allowed only on the condition coremltools
gives the branch that grows a TensorList (the counter reaching the list's length), which a
loop stopping at that length never runs, with no ``elseBranch`` and writing nothing else
the loop reads. A ``loop`` layer's ``maxLoopIterations`` must be 0 or at least ``T``, and
it takes no input (an input would set its most steps); its body holds no ``loop``,
``loopBreak`` or ``loopContinue`` layer, and its condition network writes no blob the body
or the network before it reads. A loop value starts as the blob its copy read where the
copy stands, whatever the network writes into that blob later. In an ML Program, a
``cast`` passes values only to fp32, or to fp16 in a step whose weights are float16; an
option that is no number of the kind its operation takes (an axis, a mask, a
``transpose_x``) makes the operation one the evaluation cannot follow. Anything else is
refused naming what does not fit; an operation the evaluation cannot follow is named with
its layer or output.

A loop runs exactly the ``T`` steps its file fixes (the length of the sequence it was
converted with), where ``forward`` runs every step of the sequence it is given; a float16
ML Program computes its step in float16, where rnnport computes in float32 from the same
weights. ``rnnport.notes`` says both.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...io._proto import ProtoError, packed_varints
from ...model import RNN
from ...spec import Spec
from .._common import listed
from .._loops import (
    Act,
    Const,
    Mul,
    Opaque,
    Sub,
    Sum,
    Sym,
    Term,
    Unsupported,
    Var,
    add,
    match,
    parts,
    rows,
    scalar,
    unmatched,
)
from .fields import (
    FIELDS,
    LAYER_TYPES,
    Message,
    flag,
    float32,
    last,
    message,
    number_of,
    sub,
    weights,
)

__all__ = ["Loop", "LoopCell", "Node", "loop_model", "loop_notes", "nn_layer", "nn_loop",
           "recognise", "signed", "varints"]

LAYER = FIELDS["NeuralNetworkLayer"]
SCATTER_MODES = {0: "update", 1: "add"}  # ScatterMode's SCATTER_UPDATE, SCATTER_ADD
MAX_NODES = 1 << 16  # operations of one loop body: a cell needs a few dozen

# Node kinds: "dense" (data: weight (out, in), bias or None), "add", "mul", "sub" (two
# inputs), "act" (data: sigmoid, tanh, relu), "neg" (0 − v), "scale" (data: a float32 scalar;
# v·a), "shift" (v + a), "pass" (squeeze, expand_dims, copy, cast: the same values),
# "gather" / "scatter" (data: (axis, mode)), "less", "const" (data: the values), "rows"
# (data: (start, stop, step) along axis 0), "text" (a constant that is no number: an
# operation's option), "control" (a loop, a loopBreak, a loopContinue: refused), "branch"
# (data: the layers of its elseBranch, the names its ifBranch writes), "other" (data: what
# it is).


@dataclass(frozen=True)
class Node:
    """One operation: its kind (above), a label for messages, input and output names."""

    kind: str
    label: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    data: Any = None


@dataclass
class Loop:
    """A loop: its label, loop values (the name inside the body, the name of the value it
    starts as, the name of its new value after the body), condition and body."""

    label: str
    variables: list[tuple[str, str, str]]
    condition: list[Node]
    condition_variables: list[str]  # each loop value's name inside the condition
    condition_output: str
    body: list[Node]
    # The operation outside the loop giving a name, as the loop sees it (reader None) or
    # as an operation outside that ``outer`` gave (a copy) sees it.
    outer: Callable[[str, Node | None], Node | None]
    final: list[str]  # the names outside holding each loop value after the loop
    limit: int = 0  # the most steps the loop runs whatever its condition (0: no limit)


@dataclass
class LoopCell:
    """What a recognised loop computes and where its sequence enters and leaves."""

    fields: dict[str, Any]  # Spec fields
    params: dict[str, np.ndarray]  # canonical weight_ih, weight_hh (bias_ih, bias_hh)
    sequence: str  # the name of the sequence the loop reads (time first)
    output: str  # the name of the loop value holding the output rows (after the loop)
    steps: int
    first_row: int = 1  # the output's first row: 1 after a buffer's initial state, else 0


# -- symbolic values of the loop's machinery ------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Outer(Sym):
    name: str  # a value computed outside the loop


@dataclass(frozen=True, eq=False)
class _Scatter(Sym):
    data: Sym
    index: Sym
    update: Sym
    axis: int
    mode: str


@dataclass(frozen=True, eq=False)
class _Less(Sym):
    a: Sym
    b: Sym


@dataclass(frozen=True, eq=False)
class _AtLeast(Sym):
    a: Sym
    b: Sym


@dataclass(frozen=True, eq=False)
class _Shape(Sym):
    of: Sym


@dataclass(frozen=True, eq=False)
class _Length(Sym):
    of: Sym  # the first dimension of a value


class _Evaluation:
    """The values of one run of a node list, from the loop values' roles (``loop<k>``)."""

    def __init__(self, loop: Loop, roles: dict[str, Sym], constant: Callable[[str], Sym]
                 ) -> None:
        self.loop, self.env, self.constant = loop, dict(roles), constant
        self.loop_values = {id(value): k for k, value in enumerate(roles.values())}
        self.sequences: dict[str, Var] = {}  # outer name → x
        self.states: dict[int, Var] = {}  # loop value → h
        self.indices: list[Sym] = []  # what every gather of x or h was indexed with
        self.branches: list[tuple[Node, Sym]] = []  # branch layers and their conditions
        self.unfollowed: dict[int, str] = {}  # the opaque values the nodes made

    def value(self, name: str) -> Sym:
        if name not in self.env:
            self.env[name] = self.constant(name)
        return self.env[name]

    def run(self, nodes: list[Node]) -> None:
        if len(nodes) > MAX_NODES:
            raise UnsupportedFeatureError(
                f"{self.loop.label}: {len(nodes):,} operations in one step; expected a "
                "recurrent cell's few dozen.")
        for node in nodes:
            if node.kind == "split" and len(node.inputs) == 1:
                self._split(node)
                continue
            if node.kind == "branch" and len(node.inputs) == 1:
                self.branches.append((node, self.value(node.inputs[0])))
                continue
            if node.kind in ("control", "branch"):  # a branch not on one condition value
                raise UnsupportedFeatureError(
                    f"{self.loop.label}: holds {node.label}, control flow rnnport does not "
                    "follow; rnnport reads loops as coremltools writes them for a recurrent "
                    "layer, one step per run of the body. Nothing was read.")
            result = self._node(node)
            if isinstance(result, Opaque) and node.kind != "text" and not any(
                    isinstance(self.env.get(name), Opaque) for name in node.inputs):
                self.unfollowed.setdefault(id(result), result.what)  # where it starts
            for name in node.outputs[:1]:
                self.env[name] = result
            for name in node.outputs[1:]:
                self.env[name] = Opaque(node.label)

    def _split(self, node: Node) -> None:
        """Rows of an affine value along its features (a step's values are (batch,
        features), so axis 1 or -1), into equal parts or parts of the sizes given."""
        axis, sizes = node.data
        value = self.value(node.inputs[0])
        total = value.terms[0].weight.shape[0] if isinstance(value, Sum) and value.terms else 0
        if not sizes and total % max(len(node.outputs), 1) == 0:
            sizes = [total // max(len(node.outputs), 1)] * len(node.outputs)
        if axis not in (1, -1) or len(sizes) != len(node.outputs) or sum(sizes) != total:
            for name in node.outputs:
                self.env[name] = Opaque(f"{node.label} (not along the features)")
            return
        start = 0
        for name, size in zip(node.outputs, sizes, strict=True):
            self.env[name] = rows(value, range(start, start + size), total, node.label)
            start += size

    def _node(self, node: Node) -> Sym:
        kind = node.kind
        args = [self.value(name) for name in node.inputs]
        if kind == "const":
            return Const(np.asarray(node.data), node.outputs[0] if node.outputs else "")
        if kind == "pass" and len(args) == 1:
            return args[0]
        if kind in ("other", "text") or any(isinstance(arg, _Scatter) for arg in args):
            return Opaque(f"{node.label}{f' ({node.data})' if node.data else ''}")
        if kind == "dense" and len(args) == 1:
            weight, bias = node.data
            if isinstance(args[0], (Sum, Const, Opaque)):
                return Opaque(f"{node.label} (a product of a sum or a constant)")
            return Sum(terms=(Term(args[0], weight, bias),))
        if kind in ("add", "mul", "sub") and len(args) == 2:
            a, b = args
            return add(a, b) if kind == "add" else Mul(a, b) if kind == "mul" else Sub(a, b)
        if kind == "act" and len(args) == 1:
            return Act(node.data, args[0])
        if kind == "neg" and len(args) == 1:
            return Sub(Const(np.zeros((), np.float32), node.label), args[0])
        if kind == "shift" and len(args) == 1:
            return add(args[0], Const(np.asarray(node.data, np.float32), node.label))
        if kind == "scale" and len(args) == 1:
            return Mul(args[0], Const(np.asarray(node.data, np.float32), node.label))
        if kind == "less" and len(args) == 2:
            return _Less(args[0], args[1])
        if kind == "at_least" and len(args) == 2:
            return _AtLeast(args[0], args[1])
        if kind == "shape" and len(args) == 1:
            return _Shape(args[0])
        if kind == "length" and len(args) == 1 and isinstance(args[0], _Shape):
            return _Length(args[0].of)
        if kind == "less" and len(args) == 1 and node.data is not None:  # v < alpha
            return _Less(args[0], Const(np.asarray(node.data), node.label))
        if kind == "gather" and len(args) == 2:
            return self._gather(node, *args)
        if kind == "scatter" and len(args) == 3:
            axis, mode = node.data
            return _Scatter(args[0], args[1], args[2], axis, mode)
        return Opaque(node.label)

    def _gather(self, node: Node, data: Sym, index: Sym) -> Sym:
        """A row of the sequence (x) or of a loop value (h: the state buffer) at an index."""
        axis, _ = node.data
        if axis != 0:
            return Opaque(f"{node.label} (along axis {axis})")
        if isinstance(data, _Outer):
            self.indices.append(index)
            return self.sequences.setdefault(data.name, Var("x"))
        k = self.loop_values.get(id(data))
        if k is not None:
            self.indices.append(index)
            return self.states.setdefault(k, Var("h"))
        return Opaque(f"{node.label} (of a computed value)")


def _followed(labels: Any) -> str:
    """What a refusal adds of the operations the evaluation could not follow."""
    found = list(dict.fromkeys(labels))
    return f" (it could not follow {listed(found)})" if found else ""


def _unread(value: Sym | None, loop: Loop) -> list[str]:
    """The operation ``value`` comes from, where it is one the evaluation cannot follow."""
    if isinstance(value, Opaque):
        return [value.what]
    node = loop.outer(value.name, None) if isinstance(value, _Outer) else None
    return [node.label] if node is not None and node.kind in ("other", "text") else []


def _opaque(values: list[Sym]) -> list[str]:
    """What the evaluation could not follow, among what ``values`` are built from."""
    return list(dict.fromkeys(value.what for value in parts(values)
                              if isinstance(value, Opaque)))


def _scalar(value: Sym) -> float | None:
    return scalar(value.values) if isinstance(value, Const) else None


def _constant(loop: Loop, name: str, follow: bool = True) -> np.ndarray | None:
    """The values of the constant outside the loop that ``name`` is (through copies, each
    read where it stands: a name written again after its copy keeps the copied value)."""
    seen = 0
    node = loop.outer(name, None)
    while node is not None and node.kind == "pass" and follow and seen < 64:
        seen += 1
        node = loop.outer(node.inputs[0], node) if node.inputs else None
    return np.asarray(node.data) if node is not None and node.kind == "const" else None


def recognise(loop: Loop) -> LoopCell:
    """The cell ``loop`` computes (see the module's docstring); UnsupportedFeatureError
    naming what does not fit."""
    label = loop.label

    def outside(name: str) -> Sym:
        values = _constant(loop, name)
        if values is not None:
            return Const(values.astype(np.float32) if values.dtype.kind == "f" else values,
                         name)
        return _Outer(name)

    names = [inside for inside, _, _ in loop.variables]
    roles: dict[str, Sym] = {inside: Var(f"loop{k}") for k, inside in enumerate(names)}
    step = _Evaluation(loop, roles, outside)
    step.run(loop.body)
    new = [step.value(after) for _, _, after in loop.variables]
    starts = [_constant(loop, start) for _, start, _ in loop.variables]
    role_values = list(roles.values())

    counters = [k for k, value in enumerate(new)
                if isinstance(value, Sum) and not value.terms and len(value.others) == 1
                and value.others[0] is role_values[k] and len(value.consts) == 1
                and scalar(value.consts[0]) == 1
                and starts[k] is not None and scalar(starts[k]) == 0]  # type: ignore[arg-type]
    buffers = [k for k, value in enumerate(new) if isinstance(value, _Scatter)]
    if len(counters) != 1 or len(buffers) != 1:
        starting = [node.label for _, start, _ in loop.variables
                    if (node := loop.outer(start, None)) is not None and
                    node.kind in ("other", "text")]
        raise UnsupportedFeatureError(
            f"{label}: its {len(new)} loop values are not a step counter (starting at 0, "
            "adding 1 per step) and a buffer of states written one row per step"
            f"{_followed([*step.unfollowed.values(), *starting])}; rnnport reads "
            "loops as coremltools writes them for a recurrent layer (a PyTorch GRU, a Keras "
            "LSTM). Nothing was read.")
    counter, buffer = counters[0], buffers[0]
    scatter = new[buffer]
    assert isinstance(scatter, _Scatter)
    # A PyTorch GRU's buffer holds the initial state and then each step's (row counter + 1);
    # a Keras layer's list holds each step's (row counter), its states carried apart.
    after = scatter.index is new[counter]
    states = [k for k in range(len(new)) if k not in (counter, buffer) and
              new[k] is not role_values[k]]
    start = starts[buffer]
    what = f"its buffer of states ({names[buffer]})"
    if start is None or start.ndim != 3 or start.shape[0] < 1 + after:
        raise UnsupportedFeatureError(
            f"{label}: {what} starts as "
            f"{'a computed value' if start is None else f'a constant {list(start.shape)}'}; "
            f"expected a constant ({'T + 1' if after else 'T'}, batch, hidden), as coremltools "
            "writes for a network with no initial state given. Nothing was read.")
    steps, hidden = start.shape[0] - after, start.shape[2]
    if 0 < loop.limit < steps:
        raise UnsupportedFeatureError(
            f"{label}: it runs at most {loop.limit} steps (maxLoopIterations), and its buffer "
            f"of states holds {steps}; rnnport reads a loop that runs every step of the "
            "sequence. Nothing was read.")
    if scatter.data is not role_values[buffer] or scatter.axis != 0 or \
            scatter.mode not in ("update", "add") or not (
                after or scatter.index is role_values[counter]):
        raise UnsupportedFeatureError(
            f"{label}: its body writes {what} other than one row per step (scatter mode "
            f"{scatter.mode}, axis {scatter.axis}){_followed(step.unfollowed.values())}; "
            "rnnport reads a loop that writes the new "
            "state at row counter (or counter + 1, after the initial state). Nothing was read.")
    if (after and states) or len(states) > 2:
        raise UnsupportedFeatureError(
            f"{label}: it carries {len(states)} states beside its counter and its buffer "
            f"({listed(names[k] for k in states)}); rnnport reads loops carrying a simple "
            "RNN's or a GRU's h, or an LSTM's h and c. Nothing was read.")
    for k in states:
        initial = starts[k]
        if initial is None or initial.shape != start.shape[1:]:
            raise UnsupportedFeatureError(
                f"{label}: its state {names[k]} starts as "
                f"{'a computed value' if initial is None else f'a constant {list(initial.shape)}'}"
                f"; expected a constant {list(start.shape[1:])} of zeros. Nothing was read.")
    if np.any(start != 0) or any(np.any(starts[k] != 0) for k in states):
        raise UnsupportedFeatureError(
            f"{label}: {what} or its states start with values other than zeros: an initial "
            "state the file fixes, which rnnport's networks do not hold (forward(state=…) "
            "gives one). Nothing was read.")
    if not after:  # evaluate again, the states as h (the one the list keeps) and c
        kept = [k for k in states if new[k] is scatter.update]
        if len(kept) != 1:
            raise UnsupportedFeatureError(
                f"{label}: its body writes into {what} a value that is not one of its states "
                f"({listed(names[k] for k in states) or 'none'}); rnnport reads a loop whose "
                "output at each step is the new state h. Nothing was read.")
        ordered = kept + [k for k in states if k not in kept]
        roles = dict(roles)
        for k, name in zip(ordered, ("h", "c"), strict=False):
            roles[names[k]] = Var(name)
        step = _Evaluation(loop, roles, outside)
        step.run(loop.body)
        role_values = list(roles.values())
        new_states = tuple(step.value(loop.variables[k][2]) for k in ordered)
    if len(step.sequences) != 1 or not set(step.states) <= ({buffer} if after else set()) \
            or any(index is not role_values[counter] for index in step.indices):
        raise UnsupportedFeatureError(
            f"{label}: its body reads {len(step.sequences)} sequences "
            f"({listed(step.sequences) or 'none'}), or rows of its loop values, or rows at an "
            f"index other than the step counter{_followed(step.unfollowed.values())}; rnnport "
            "reads a loop that takes the row of one sequence (and of a buffer holding the "
            "initial state) at the counter. Nothing was read.")
    if after:
        new_states = (scatter.update,)
    _check_branches(loop, step, role_values, counter, buffer)
    _check_side_effects(loop)
    sequence = next(iter(step.sequences))
    _check_condition(loop, role_values, counter, steps)
    matched = match(new_states, hidden)
    if isinstance(matched, Unsupported):
        raise UnsupportedFeatureError(f"{label}: its body computes {matched}. Nothing was read.")
    if matched is None:
        unfollowed = list(dict.fromkeys([*step.unfollowed.values(),
                                         *_opaque(list(new_states))]))
        raise UnsupportedFeatureError(
            f"{label}: its body computes a step that is neither a simple RNN (tanh or relu), "
            f"a GRU nor an LSTM as rnnport defines them; "
            f"{unmatched(new_states, unfollowed)}. Nothing was read.")
    fields, params, has_bias = dict(matched[0]), dict(matched[1]), matched[2]
    if params["weight_hh"].shape != (params["weight_ih"].shape[0], hidden):
        raise FormatError(f"{label}: recurrent weights {list(params['weight_hh'].shape)} for "
                          f"hidden size {hidden}; the sizes disagree. The file is damaged.")
    if not has_bias:
        params = {k: v for k, v in params.items() if not k.startswith("bias")}
    fields.update(input_size=params["weight_ih"].shape[1], hidden_size=hidden, bias=has_bias)
    return LoopCell(fields, params, sequence, loop.final[buffer], steps,
                    first_row=int(after))


def _check_branches(loop: Loop, step: _Evaluation, roles: list[Sym], counter: int,
                    buffer: int) -> None:
    """A ``branch`` in the body (coremltools' growing TensorList) must run only when the
    counter reaches the buffer's length, which a loop stopping before (its condition is
    checked) never does: what it would compute is then never computed."""
    for node, condition in step.branches:
        if not (isinstance(condition, _AtLeast) and condition.a is roles[counter] and
                isinstance(condition.b, _Length) and condition.b.of is roles[buffer]):
            raise UnsupportedFeatureError(
                f"{loop.label}: its body holds {node.label}, which runs on a condition other "
                "than the step counter reaching the length of its buffer of states; rnnport "
                "reads the branch coremltools writes to grow that buffer, which a loop "
                "stopping at its length never runs. Nothing was read.")
        otherwise, written = node.data if node.data is not None else (0, ())
        clash = sorted(set(written) & (_seen(loop) - {loop.variables[buffer][0]}))
        if otherwise or clash:
            found = f"{otherwise} layers run otherwise (elseBranch)" if otherwise else \
                f"layers writing {listed(clash)}"
            raise UnsupportedFeatureError(
                f"{loop.label}: its body holds {node.label}, with {found}; rnnport reads the "
                "branch coremltools writes to grow the buffer of states, which writes nothing "
                "else the loop reads and has no elseBranch. Nothing was read.")


def _seen(loop: Loop) -> set[str]:
    """The names the loop's values, its body and condition, and the network before it
    could read or give: every name outside the loop's own operations' inner values."""
    names = {name for node in (*loop.body, *loop.condition) for name in node.inputs}
    names.update(inside for inside, _, _ in loop.variables)
    names.update(name for node in (*loop.body, *loop.condition) for name in node.outputs
                 if loop.outer(name, None) is not None)
    return names


def _check_side_effects(loop: Loop) -> None:
    """The condition computes only its own values: one writing a value the loop or the
    network before it holds changes what the body reads, unseen by the step."""
    body_reads = {name for node in loop.body for name in node.inputs}
    loop_values = {inside for inside, _, _ in loop.variables}
    for node in loop.condition:
        clash = [name for name in node.outputs if name in body_reads or name in loop_values
                 or loop.outer(name, None) is not None]
        if clash:
            raise UnsupportedFeatureError(
                f"{loop.label}: its condition holds {node.label}, which writes "
                f"{listed(clash)}, a value the body or the network before the loop reads; "
                "rnnport reads a condition that only compares the step counter. Nothing was "
                "read.")


def _check_condition(loop: Loop, roles: list[Sym], counter: int, steps: int) -> None:
    check = _Evaluation(loop, {inside: roles[k] for k, inside in
                               enumerate(loop.condition_variables)},
                        lambda name: Const(values, name) if (values := _constant(loop, name))
                        is not None else _Outer(name))
    check.run(loop.condition)
    if check.branches:
        raise UnsupportedFeatureError(
            f"{loop.label}: its condition holds {listed(node.label for node, _ in check.branches)}"
            "; rnnport reads a condition that only compares the step counter. Nothing was "
            "read.")
    condition = check.value(loop.condition_output)
    bound = _scalar(condition.b) if isinstance(condition, _Less) else None
    if not isinstance(condition, _Less) or condition.a is not roles[counter] or bound != steps:
        found = f"stops after {bound:g} steps" if bound is not None else \
            "is not the step counter compared (less than) with a constant" + _followed(
                [*check.unfollowed.values(), *_unread(condition.b if isinstance(
                    condition, _Less) else None, loop)])
        raise UnsupportedFeatureError(
            f"{loop.label}: its condition {found}, and its buffer of states holds {steps} "
            "steps; rnnport reads a loop that runs every step of the sequence. Nothing was "
            "read.")


# -- NeuralNetwork loop layers ----------------------------------------------------------------


def signed(value: int) -> int:
    """An int64 field's value (varints carry negative numbers in two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _nn_node(raw: int | bytes, where: str, meter: budget.Meter, weights_too: bool) -> Node:
    """One NeuralNetworkLayer as a :class:`Node` (``weights_too``: decode innerProduct
    and batchedMatmul weights; outside a loop they are not needed)."""
    if not isinstance(raw, bytes):
        raise FormatError(f"{where}: a layer is a number; expected a message. The file is "
                          "damaged.")
    layer = message(raw, where)
    name = _name(last(layer, LAYER["name"], b""), where)
    kinds = [number for number in layer if number >= 100]
    kind = kinds[-1] if kinds else 0
    type_name = LAYER_TYPES.get(kind, f"layer type {kind}")
    label = f"{where}: layer {name} ({type_name})"
    inputs = tuple(_name(value, where) for value in layer.get(LAYER["input"], []))
    outputs = tuple(_name(value, where) for value in layer.get(LAYER["output"], []))
    body = message(sub(layer, kind, label, type_name) or b"", label) if kind else {}

    def node(kind_name: str, data: Any = None) -> Node:
        return Node(kind_name, f"layer {name} ({type_name})", inputs, outputs, data)

    if type_name in ("copy", "squeeze", "expandDims"):
        return node("pass")
    if type_name == "loadConstantND":
        numbers = FIELDS["LoadConstantNDLayerParams"]
        shape = varints(body.get(numbers["shape"], []), label)
        if any(not 0 < size < 2**31 for size in shape) or len(shape) > 5:
            raise FormatError(f"{label}: shape {shape}; expected up to 5 positive sizes. The "
                              "file is damaged.")
        count = math.prod(shape)
        return node("const", weights(sub(body, numbers["data"], label, "data"), count,
                                     f"{label} data", meter).reshape(shape))
    if type_name == "activation":
        chosen = [number for number in body]
        names = {number: key for key, number in FIELDS["ActivationParams"].items()}
        function = names.get(chosen[-1], "") if len(chosen) == 1 else ""
        if function in ("sigmoid", "tanh", "ReLU"):
            return node("act", function.lower())
        if function == "linear":
            params = message(sub(body, chosen[-1], label, "linear") or b"", label)
            alpha, beta = (float32(params, number, label, what)
                           for number, what in ((1, "alpha"), (2, "beta")))
            if beta == 0 and alpha in (1.0, -1.0):
                return node("pass" if alpha == 1 else "neg")
            return node("other", f"linear {alpha:g}·x + {beta:g}")
        return node("other", function or "no function")
    if type_name in ("add", "multiply", "addBroadcastable", "multiplyBroadcastable",
                     "subtractBroadcastable"):
        operation = {"add": "add", "multiply": "mul", "addBroadcastable": "add",
                     "multiplyBroadcastable": "mul", "subtractBroadcastable": "sub"}[type_name]
        if len(inputs) == 2:
            return node(operation)
        if len(inputs) == 1 and type_name in ("add", "multiply"):  # v + alpha, v · alpha
            alpha = float32(body, 1, label, "alpha")
            return node("shift" if operation == "add" else "scale", np.float32(alpha))
        return node("other", f"{len(inputs)} inputs")
    if type_name == "innerProduct" and weights_too:
        return _inner_product(body, label, meter, node)
    if type_name == "batchedMatmul" and weights_too and len(inputs) == 1:
        return _batched_matmul(body, label, meter, node)
    if type_name == "gather":
        return node("gather", (signed(number_of(body, 1, label, "axis")), ""))
    if type_name == "scatter":
        mode = number_of(body, 2, label, "mode")
        return node("scatter", (signed(number_of(body, 1, label, "axis")),
                                SCATTER_MODES.get(mode, f"mode {mode}")))
    if type_name == "splitND":
        numbers = FIELDS["SplitNDLayerParams"]
        sizes = varints(body.get(numbers["splitSizes"], []), label)
        return node("split", (signed(number_of(body, numbers["axis"], label, "axis")), sizes))
    if type_name == "getShape":
        return node("shape")
    if type_name == "sliceStatic" and len(inputs) == 1:
        numbers = FIELDS["SliceStaticLayerParams"]
        found = {key: varints(body.get(numbers[key], []), label)
                 for key in ("beginIds", "beginMasks", "endIds", "endMasks", "strides",
                             "squeezeMasks")}
        if found["beginIds"] == [0] and found["endIds"] == [1] and \
                found["strides"] in ([], [1]) and not any(found["beginMasks"]) and \
                not any(found["endMasks"]) and not any(found["squeezeMasks"]):
            return node("length")  # the first dimension of a shape
        return node("other")
    if type_name == "greaterEqual" and len(inputs) == 2:
        return node("at_least")
    if type_name == "branch":  # (layers of its elseBranch, names its ifBranch writes)
        layers = FIELDS["NeuralNetwork"]["layers"]
        taken, otherwise = (message(sub(body, number, label, what) or b"", label).get(layers, [])
                            for number, what in ((1, "ifBranch"), (2, "elseBranch")))
        written = tuple(_name(value, where) for raw in taken
                        for value in (message(raw, label) if isinstance(raw, bytes) else {})
                        .get(LAYER["output"], []))
        return node("branch", (len(otherwise), written))
    if type_name in ("loop", "loopBreak", "loopContinue"):
        return node("control")
    if type_name == "lessThan":
        return node("less", np.float32(float32(body, 2, label, "alpha"))
                    if len(inputs) == 1 else None)
    if type_name == "slice":
        numbers = FIELDS["SliceLayerParams"]
        values = [signed(number_of(body, numbers[key], label, key))
                  for key in ("startIndex", "endIndex", "stride", "axis")]
        if values[3] == 0:  # CHANNEL_AXIS: axis -3, the time axis of (T, B, H)
            return node("rows", tuple(values[:3]))
        return node("other", f"slice along axis {values[3]}")
    return node("other")


def varints(values: list[int | bytes], where: str) -> list[int]:
    """The numbers of a repeated integer field, packed (bytes of varints) or not, as their
    raw 64-bit values."""
    try:
        return [int(number) for value in values for number in (
            packed_varints(memoryview(value)) if isinstance(value, bytes) else [value])]
    except ProtoError as error:
        raise FormatError(f"{where}: a packed list of numbers is damaged ({error}).") from None


def _inner_product(body: Message, label: str, meter: budget.Meter,
                   node: Callable[[str, Any], Node]) -> Node:
    numbers = FIELDS["InnerProductLayerParams"]
    if numbers["int8DynamicQuantize"] in body:
        return node("other", "int8 dynamic quantization")
    return _dense(body, numbers, label, meter, node, ("inputChannels", "outputChannels"))


def _batched_matmul(body: Message, label: str, meter: budget.Meter,
                    node: Callable[[str, Any], Node]) -> Node:
    """``x @ W (+ b)``, ``W`` (weightMatrixFirstDimension = in, second = out), which Core ML
    stores out-major, (out, in): the weight as it lies."""
    numbers = FIELDS["BatchedMatMulLayerParams"]
    if numbers["int8DynamicQuantize"] in body or flag(body, numbers["transposeA"], label, "") \
            or flag(body, numbers["transposeB"], label, ""):
        return node("other", "transposed or quantized")
    return _dense(body, numbers, label, meter, node,
                  ("weightMatrixFirstDimension", "weightMatrixSecondDimension"))


def _dense(body: Message, numbers: dict[str, int], label: str, meter: budget.Meter,
           node: Callable[[str, Any], Node], sizes: tuple[str, str]) -> Node:
    """A ``dense`` node of an innerProduct's or a batchedMatmul's weight ``(out, in)``, as it
    lies, and its bias (None without one), each charged before it is decoded."""
    inputs, outputs = (number_of(body, numbers[key], label, key) for key in sizes)
    if not 0 < inputs < 2**31 or not 0 < outputs < 2**31:
        raise FormatError(f"{label}: {sizes[0]} {inputs} and {sizes[1]} {outputs}; expected "
                          "positive sizes. The file is damaged.")
    weight = weights(sub(body, numbers["weights"], label, "weights"), inputs * outputs,
                     f"{label} weights", meter).reshape(outputs, inputs)
    bias = weights(sub(body, numbers["bias"], label, "bias"), outputs, f"{label} bias", meter) \
        if flag(body, numbers["hasBias"], label, "hasBias") else None
    return node("dense", (weight, bias))


def _name(value: int | bytes, where: str) -> str:
    if not isinstance(value, bytes):
        raise FormatError(f"{where}: a name is a number; expected a string. The file is damaged.")
    return value.decode("utf-8", "replace")


def nn_layer(raw: int | bytes, where: str, meter: budget.Meter) -> Node:
    """A layer outside a loop as a :class:`Node` (its weights not decoded)."""
    return _nn_node(raw, where, meter, False)


def nn_loop(params: Message, label: str, outer: Callable[[str, Node | None], Node | None],
            where: str, meter: budget.Meter, inputs: tuple[str, ...] = ()) -> Loop:
    """The :class:`Loop` of a ``loop`` layer (its ``LoopLayerParams``, its ``inputs``);
    ``outer`` gives the layer of its network that last wrote a blob before it, or before
    a layer ``outer`` gave (where its loop values start)."""
    numbers = FIELDS["LoopLayerParams"]
    if inputs:
        raise UnsupportedFeatureError(
            f"{label}: takes its most steps from {listed(inputs)}, a value the network "
            "computes; rnnport reads loops whose length the file fixes, as coremltools "
            "writes them. Nothing was read.")
    limit = number_of(params, numbers["maxLoopIterations"], label, "maxLoopIterations")

    def network(number: int, what: str) -> list[Node]:
        found = message(sub(params, number, label, what) or b"", label)
        return [_nn_node(layer, where, meter, True)
                for layer in found.get(FIELDS["NeuralNetwork"]["layers"], [])]

    body = network(numbers["bodyNetwork"], "bodyNetwork")
    condition = network(numbers["conditionNetwork"], "conditionNetwork")
    condition_var = _name(last(params, numbers["conditionVar"], b""), label)
    if not condition or not condition_var:
        raise UnsupportedFeatureError(
            f"{label}: no condition network (it runs maxLoopIterations times); rnnport reads "
            "loops whose condition compares a step counter with the sequence's length, as "
            "coremltools writes them. Nothing was read.")
    # Loop values: the blobs of the network the body writes again.
    variables = list(dict.fromkeys(name for node in body for name in node.outputs
                                   if outer(name, None) is not None))
    return Loop(label, [(name, name, name) for name in variables], condition, variables,
                condition_var, body, outer, variables, limit)


def loop_notes(label: str, cell: LoopCell) -> list[str]:
    """What a recognised loop does that the network read from it does not say."""
    out = [f"{label} runs {cell.steps} steps, the length of the sequence it was converted "
           "with: Core ML runs exactly that many, forward every step of the x it is given"]
    if cell.params["weight_ih"].dtype == np.float16:
        out.append(f"{label} computes its step in float16 in Core ML; rnnport computes it in "
                   "float32 from the same float16 weights, so outputs can differ by float16 "
                   "rounding")
    return out


def loop_model(spec: Spec, cell: LoopCell) -> RNN:
    """The one-layer network of a recognised loop; float16 when its weights are (and its
    biases float16 values)."""
    params = cell.params
    half = all(params[name].dtype == np.float16 for name in ("weight_ih", "weight_hh")) and \
        all(np.array_equal(array.astype(np.float16).astype(array.dtype), array)
            for array in params.values())
    dtype = np.float16 if half else np.float32
    return RNN(spec, [[{name: array.astype(dtype) for name, array in params.items()}]])
