"""The cell a ``WHILE`` loop computes, found by evaluating its body symbolically.

TensorFlow's converter has fused operators for LSTMs only: a Keras ``SimpleRNN`` or ``GRU``
(and any ``tf.while_loop`` recurrence) becomes a ``WHILE`` operator whose body subgraph
computes one step from builtins. rnnport reads such a loop without running it: each body
tensor the new state depends on becomes a symbolic value, and the value of the new state
must be one of the canonical cells, term by term, with the weights taken from the
constants the body holds. Nothing is guessed from names or operator counts.

The values: the loop's state ``h``; ``x``, the step's input (a ``GATHER`` of the sequence
at the step counter); affine terms ``W·s + b`` (``FULLY_CONNECTED`` of ``s`` with constant
weights ``(out, in)`` and an optional constant bias); sums of terms, products and constant
vectors (``ADD``); ``SPLIT`` / ``SPLIT_V`` of a sum along the feature axis (the rows of
each term's weights and bias); ``MUL``, ``SUB``; ``LOGISTIC``, ``TANH``, ``RELU``.
Shape-keeping ``RESHAPE``/``SQUEEZE``/``EXPAND_DIMS`` and ``DEQUANTIZE`` of constants pass
values through. Any other operator on the way makes the value opaque, and a state built
from an opaque value is refused with the operators named.

The cells recognised (canonical gate order in brackets)::

    simple RNN   h' = act(W x + bW + R h + bR)                        act: tanh, relu
    GRU          z = σ(W_z x + bW_z + R_z h + bR_z)      r likewise    [r z n]
                 n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))             (reset after)
                 n = tanh(W_n x + bW_n + R_n (r∘h) + bR_n)             (reset before)
                 h' = z∘h + (1 − z)∘n,  or  h' = n + z∘(h − n)

Biases the body leaves out are zeros; a cell with no bias at all is read with
``bias=False``. The loop itself is checked too: the step counter the input is gathered
with starts at a constant 0 and adds 1 per step, the condition compares counters with
``LESS`` (joined by ``LOGICAL_AND``), and the output sequence is built from the new state.
An LSTM written as a loop (two states) is refused by name.

**Cost.** A file may hold thousands of ``WHILE`` operators sharing one large body. A
:class:`Recogniser` serves one read of a file: it indexes each subgraph once, evaluates each
body once for the operands that decide the value (which body inputs hold the state, the
sequence and the step counter) and matches each value once per hidden size, whatever the
number of loops naming it. The nodes evaluated, the operators indexed and the tensors
visited count against the ``work`` limit (:mod:`rnnport.budget`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...io import tflite_schema as tfl

__all__ = ["ConstantRead", "LoopCell", "Recogniser"]

ADD, CONCATENATION, DEQUANTIZE, FULLY_CONNECTED, GATHER = 0, 2, 6, 9, 36
LOGISTIC, MUL, RELU, RESHAPE, TANH, SUB, SQUEEZE = 14, 18, 19, 22, 28, 41, 43
SPLIT, EXPAND_DIMS, LESS, LOGICAL_AND, SPLIT_V, WHILE = 49, 70, 58, 86, 102, 119
ACTIVATION_OPS = {LOGISTIC: "sigmoid", TANH: "tanh", RELU: "relu"}
FUSED = {1: "relu", 4: "tanh"}  # a fused activation (ActivationFunctionType) → its function
PASS_THROUGH = frozenset({RESHAPE, SQUEEZE, EXPAND_DIMS})
MAX_DEPTH = 256  # nested values in one step: far more than any cell needs
MAX_PARTS = 64  # terms of one sum (ADD(s, s) doubles them: a chain must not grow unbounded)

# (subgraph, tensor, what) → the constant's float32 values (the reader's: it dequantizes
# when asked and records what it read).
Constant = Callable[[int, int, str], np.ndarray]
ConstantRead = tuple[int, int, str]  # a call of a Constant: (subgraph, tensor, what)


# -- symbolic values -----------------------------------------------------------------------


class Sym:
    """A value of the step; compared by identity (one object per body tensor)."""


@dataclass(frozen=True, eq=False)
class Var(Sym):
    name: str  # "x" (the step's input) or "h" (the state)


@dataclass(frozen=True, eq=False)
class Const(Sym):
    values: np.ndarray
    tensor: int  # in the body subgraph


@dataclass(frozen=True, eq=False)
class Term:
    """``weight · source + bias`` along the feature axis."""

    source: Sym
    weight: np.ndarray  # (out, in)
    bias: np.ndarray | None  # (out,)


@dataclass(frozen=True, eq=False)
class Sum(Sym):
    terms: tuple[Term, ...] = ()
    others: tuple[Sym, ...] = ()
    consts: tuple[np.ndarray, ...] = ()


@dataclass(frozen=True, eq=False)
class Act(Sym):
    fn: str
    arg: Sym


@dataclass(frozen=True, eq=False)
class Mul(Sym):
    a: Sym
    b: Sym


@dataclass(frozen=True, eq=False)
class Sub(Sym):
    a: Sym
    b: Sym


@dataclass(frozen=True, eq=False)
class Opaque(Sym):
    what: str  # the operator or tensor that made it


@dataclass
class LoopCell:
    """What a recognised loop computes, and where its sequence and state enter and leave."""

    fields: dict[str, Any]  # Spec fields: cell, input_size, hidden_size, reset_after, bias
    params: dict[str, np.ndarray]  # weight_ih, weight_hh, bias_ih, bias_hh (canonical)
    sequence: int  # the WHILE input holding the sequence (and the output position of y)
    output: int  # the WHILE output holding the output sequence
    state: int  # the WHILE input holding the initial state
    time_axis: int  # the sequence's time axis (0: time-major, as the converter writes)
    remarks: list[str] = field(default_factory=list)
    # The constants the body's value was built from, in the order they were read: a reader
    # reads them again with its own options instead of evaluating the body again.
    reads: tuple[ConstantRead, ...] = ()


# -- evaluating the body -------------------------------------------------------------------


@dataclass
class _Indexed:
    """One subgraph's operators by the tensors they write, and its GATHERs by their inputs."""

    first: dict[int, tuple[int, int]]  # tensor → (operator, output position) first writing it
    writers: dict[int, list[int]]  # tensor → the operators writing it, each once, in order
    gathers: dict[tuple[int, ...], list[int]]  # a GATHER's two inputs → those GATHERs


class _Body:
    def __init__(self, model: tfl.Model, index: int, indexed: _Indexed, roles: dict[int, Sym],
                 counter: int, constant: Constant, where: str,
                 charge: Callable[[int], None]) -> None:
        self.model, self.index, self.where = model, index, where
        self.graph = model.subgraphs[index]
        self.roles, self.counter, self.constant = roles, counter, constant
        self.sequence = next((v for v in roles.values() if isinstance(v, Var) and
                              v.name == "sequence"), None)
        self.producer = indexed.first
        self.charge = charge
        self.memo: dict[int, Sym] = {}
        self.opaque: list[str] = []

    def code(self, operator: int) -> int:
        return self.model.operator_code(self.graph.operators[operator])

    def name(self, operator: int) -> str:
        return self.model.operator_codes[self.graph.operators[operator].opcode_index].name

    def is_constant(self, tensor: int) -> bool:
        return tensor >= 0 and bool(len(self.model.buffers[self.graph.tensors[tensor].buffer].data))

    def raw(self, tensor: int) -> np.ndarray:
        return tfl.tensor_array(self.model, tensor, subgraph=self.index)

    def value(self, tensor: int, depth: int = 0) -> Sym:
        if tensor in self.memo:
            return self.memo[tensor]
        if depth > MAX_DEPTH:
            raise UnsupportedFeatureError(
                f"{self.where}: the loop body (subgraph {self.index}) nests more than "
                f"{MAX_DEPTH} operations in one step; expected a recurrent cell's few.")
        self.charge(1)
        result = self._compute(tensor, depth + 1)
        if isinstance(result, Opaque):
            self.opaque.append(result.what)
        self.memo[tensor] = result
        return result

    def _compute(self, tensor: int, depth: int) -> Sym:
        if tensor in self.roles:
            return self.roles[tensor]
        info = self.graph.tensors[tensor]
        if self.is_constant(tensor):
            if info.type_name not in ("FLOAT32", "FLOAT16") or \
                    (info.quantization is not None and info.quantization.quantized):
                return Opaque(f"constant {info.name!r} ({info.type_name})")
            return Const(np.asarray(self.raw(tensor), dtype=np.float32), tensor)
        made = self.producer.get(tensor)
        if made is None:
            return Opaque(f"tensor {info.name!r}")
        operator, position = made
        op = self.graph.operators[operator]
        code, inputs = self.code(operator), op.inputs
        options = getattr(op.builtin_options, "values", {})

        def arg(k: int) -> Sym:
            return self.value(inputs[k], depth) if k < len(inputs) and inputs[k] >= 0 else \
                Opaque(f"{self.name(operator)} without input {k}")

        if code == DEQUANTIZE and inputs and self.is_constant(inputs[0]):
            return Const(self.constant(self.index, tensor, f"loop body (subgraph {self.index}) "
                                       f"tensor {info.name!r}"), tensor)
        if code in PASS_THROUGH and inputs and inputs[0] >= 0 and \
                self.graph.tensors[inputs[0]].shape == info.shape:
            return arg(0)
        if code == GATHER and len(inputs) == 2 and inputs[1] == self.counter and \
                self.roles.get(inputs[0]) is self.sequence and options.get("batch_dims", 0) == 0:
            return Var("x")  # the step's input
        if code == FULLY_CONNECTED:
            return self._dense(operator, options, depth)
        if code in ACTIVATION_OPS and len(inputs) == 1:
            return Act(ACTIVATION_OPS[code], arg(0))
        if code in (ADD, MUL, SUB) and len(inputs) == 2:
            fused = options.get("fused_activation_function", 0)
            if fused and fused not in FUSED:
                return Opaque(f"{self.name(operator)} with fused activation "
                              f"{tfl.ACTIVATIONS.get(fused, fused)}")
            a, b = arg(0), arg(1)
            result: Sym = _add(a, b) if code == ADD else Mul(a, b) if code == MUL else Sub(a, b)
            return Act(FUSED[fused], result) if fused else result
        if code in (SPLIT, SPLIT_V):
            return self._split(operator, position, depth)
        return Opaque(f"operator {operator} ({self.name(operator)})")

    def _dense(self, operator: int, options: Any, depth: int) -> Sym:
        op = self.graph.operators[operator]
        inputs = op.inputs
        label = f"loop body (subgraph {self.index}) operator {operator} (FULLY_CONNECTED)"
        if len(inputs) < 2 or inputs[0] < 0 or inputs[1] < 0 or \
                options.get("weights_format", 0) != 0:
            return Opaque(f"operator {operator} (FULLY_CONNECTED, not plain weights)")
        source = self.value(inputs[0], depth)
        if isinstance(source, (Sum, Const, Opaque)):
            return Opaque(f"operator {operator} (FULLY_CONNECTED of a sum or a constant)")
        weight = self.constant(self.index, inputs[1], f"{label} weights")
        bias = self.constant(self.index, inputs[2], f"{label} bias") \
            if len(inputs) > 2 and inputs[2] >= 0 else None
        if weight.ndim != 2 or (bias is not None and bias.shape != weight.shape[:1]):
            raise FormatError(f"{self.where}: {label}: weights {list(weight.shape)} and bias "
                              f"{None if bias is None else list(bias.shape)}; expected (out, in) "
                              "and (out,). The file is damaged.")
        fused = options.get("fused_activation_function", 0)
        value: Sym = Sum(terms=(Term(source, weight, bias),))
        if fused:
            if fused not in FUSED:
                return Opaque(f"operator {operator} (FULLY_CONNECTED with fused activation "
                              f"{tfl.ACTIVATIONS.get(fused, fused)})")
            value = Act(FUSED[fused], value)
        return value

    def _split(self, operator: int, position: int, depth: int) -> Sym:
        op = self.graph.operators[operator]
        code, inputs = self.code(operator), op.inputs
        value_at, axis_at = (1, 0) if code == SPLIT else (0, 2)
        axis = _integer(self.model, self.index, inputs[axis_at]) \
            if len(inputs) > max(value_at, axis_at) else None
        rank = len(self.graph.tensors[inputs[value_at]].shape) if axis is not None else 0
        if axis is None or rank == 0 or axis % rank != rank - 1:
            return Opaque(f"operator {operator} ({self.name(operator)} not on the feature axis)")
        value = self.value(inputs[value_at], depth)
        widths = [self.graph.tensors[t].shape[-1] if self.graph.tensors[t].shape else 0
                  for t in op.outputs]
        if not isinstance(value, Sum) or value.others:
            return Opaque(f"operator {operator} ({self.name(operator)} of a non-affine value)")
        start = sum(widths[:position])
        rows = slice(start, start + widths[position])
        total = sum(widths)
        if any(t.weight.shape[0] != total for t in value.terms) or \
                any(c.shape not in ((), (1,), (total,)) for c in value.consts):
            return Opaque(f"operator {operator} ({self.name(operator)}: the sizes disagree)")
        return Sum(terms=tuple(Term(t.source, t.weight[rows], None if t.bias is None else
                                    t.bias[rows]) for t in value.terms),
                   consts=tuple(c if c.ndim == 0 or c.shape == (1,) else c[rows]
                                for c in value.consts))


def _add(a: Sym, b: Sym) -> Sym:
    terms: list[Term] = []
    others: list[Sym] = []
    consts: list[np.ndarray] = []
    for part in (a, b):
        if isinstance(part, Sum):
            terms.extend(part.terms)
            others.extend(part.others)
            consts.extend(part.consts)
        elif isinstance(part, Const):
            consts.append(part.values)
        else:
            others.append(part)
    if len(terms) + len(others) + len(consts) > MAX_PARTS:
        return Opaque(f"a sum of more than {MAX_PARTS} parts")
    return Sum(tuple(terms), tuple(others), tuple(consts))


# -- matching the cells --------------------------------------------------------------------


class _NoMatch(Exception):
    pass


def _need(condition: bool) -> None:
    if not condition:
        raise _NoMatch()


def _affine(value: Sym, sources: dict[str, Callable[[Sym], bool]],
            hidden: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    """{source: (weight, bias)} of an affine value whose terms read exactly ``sources``
    (each a test of a term's source); loose constant vectors join a side without a bias."""
    _need(isinstance(value, Sum) and not value.others)
    assert isinstance(value, Sum)
    found: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
    for term in value.terms:
        names = [name for name, test in sources.items() if test(term.source)]
        _need(len(names) == 1 and names[0] not in found and term.weight.shape[0] == hidden)
        found[names[0]] = (term.weight, term.bias)
    _need(set(found) == set(sources))
    if value.consts:
        loose = np.zeros(hidden, dtype=np.float32)
        for const in value.consts:
            _need(const.shape in ((), (1,), (hidden,)))
            loose = loose + const
        open_sides = [name for name, (_, bias) in found.items() if bias is None]
        _need(bool(open_sides))
        weight, _ = found[open_sides[-1]]
        found[open_sides[-1]] = (weight, loose.astype(np.float32))
    return found


def _is(name: str) -> Callable[[Sym], bool]:
    return lambda value: isinstance(value, Var) and value.name == name


def _gate(value: Sym, fn: str, hidden: int) -> dict[str, tuple[np.ndarray, np.ndarray | None]]:
    _need(isinstance(value, Act) and value.fn == fn)
    assert isinstance(value, Act)
    return _affine(value.arg, {"x": _is("x"), "h": _is("h")}, hidden)


def _one(value: Sym, number: float) -> bool:
    return isinstance(value, Const) and value.values.size == 1 and \
        float(value.values.reshape(-1)[0]) == number


def _mix(value: Sym) -> tuple[Sym, Sym]:
    """(z, n) of ``z∘h + (1 − z)∘n`` or ``n + z∘(h − n)``, in any order of the operands."""
    _need(isinstance(value, Sum) and not value.terms and not value.consts and
          len(value.others) == 2)
    assert isinstance(value, Sum)
    first, second = value.others
    for a, b in ((first, second), (second, first)):
        # z∘h + (1 − z)∘n
        if isinstance(a, Mul) and isinstance(b, Mul):
            for z, h in ((a.a, a.b), (a.b, a.a)):
                if not _is("h")(h):
                    continue
                for one_minus, n in ((b.a, b.b), (b.b, b.a)):
                    if isinstance(one_minus, Sub) and _one(one_minus.a, 1.0) and one_minus.b is z:
                        return z, n
        # n + z∘(h − n)
        if isinstance(b, Mul):
            for z, difference in ((b.a, b.b), (b.b, b.a)):
                if isinstance(difference, Sub) and _is("h")(difference.a) and difference.b is a:
                    return z, a
    raise _NoMatch()


def _bias(found: dict[str, tuple[np.ndarray, np.ndarray | None]], side: str,
          hidden: int) -> np.ndarray:
    bias = found[side][1]
    return np.zeros(hidden, np.float32) if bias is None else np.asarray(bias, np.float32)


def _gru(new: Sym, hidden: int) -> tuple[dict[str, Any], dict[str, np.ndarray], bool]:
    z_value, n_value = _mix(new)
    z = _gate(z_value, "sigmoid", hidden)
    _need(isinstance(n_value, Act) and n_value.fn == "tanh")
    assert isinstance(n_value, Act)
    inner = n_value.arg
    _need(isinstance(inner, Sum))
    assert isinstance(inner, Sum)
    if len(inner.others) == 1 and isinstance(inner.others[0], Mul):  # reset after
        product = inner.others[0]
        for r_value, recurrent in ((product.a, product.b), (product.b, product.a)):
            try:
                r = _gate(r_value, "sigmoid", hidden)
                n_h = _affine(recurrent, {"h": _is("h")}, hidden)
                n_x = _affine(Sum(inner.terms, (), inner.consts), {"x": _is("x")}, hidden)
                break
            except _NoMatch:
                continue
        else:
            raise _NoMatch()
        reset_after = True
        n = {"x": n_x["x"], "h": n_h["h"]}
    else:  # reset before: R_n (r∘h)
        holder: list[Sym] = []

        def reset_h(value: Sym) -> bool:
            if isinstance(value, Mul) and (_is("h")(value.a) or _is("h")(value.b)):
                holder.append(value.b if _is("h")(value.a) else value.a)
                return True
            return False

        n_found = _affine(inner, {"x": _is("x"), "rh": reset_h}, hidden)
        _need(len(holder) == 1)
        r = _gate(holder[0], "sigmoid", hidden)
        reset_after = False
        n = {"x": n_found["x"], "h": n_found["rh"]}
    gates = (r, z, n)
    widths = {g["x"][0].shape[1:] for g in gates}
    _need(len(widths) == 1 and all(g["h"][0].shape == (hidden, hidden) for g in gates))
    params = {"weight_ih": np.concatenate([g["x"][0] for g in gates]),
              "weight_hh": np.concatenate([g["h"][0] for g in gates]),
              "bias_ih": np.concatenate([_bias(g, "x", hidden) for g in gates]),
              "bias_hh": np.concatenate([_bias(g, "h", hidden) for g in gates])}
    has_bias = any(g[side][1] is not None for g in gates for side in ("x", "h"))
    return {"cell": "gru", "reset_after": reset_after}, params, has_bias


def _simple(new: Sym, hidden: int) -> tuple[dict[str, Any], dict[str, np.ndarray], bool]:
    _need(isinstance(new, Act) and new.fn in ("tanh", "relu"))
    assert isinstance(new, Act)
    found = _gate(new, new.fn, hidden)
    _need(found["h"][0].shape == (hidden, hidden))
    params = {"weight_ih": found["x"][0], "weight_hh": found["h"][0],
              "bias_ih": _bias(found, "x", hidden), "bias_hh": _bias(found, "h", hidden)}
    has_bias = any(found[side][1] is not None for side in ("x", "h"))
    return {"cell": f"rnn_{new.fn}"}, params, has_bias


# -- the loop ------------------------------------------------------------------------------


@dataclass
class _Evaluation:
    """A body's value for one choice of state, sequence and counter inputs."""

    new: Sym  # the new state
    opaque: list[str]  # what the evaluation could not follow
    reads: tuple[ConstantRead, ...]  # the constants read, in order


Matched = tuple[dict[str, Any], dict[str, np.ndarray], bool] | None
EvaluationKey = tuple[int, int, int, int]  # body subgraph, state, sequence, counter positions


class Recogniser:
    """The cells a model's ``WHILE`` operators compute (see the module's docstring), for one
    read of the file: ``recogniser(operator)``. ``size`` is the file's size in bytes, which
    the ``work`` limit is relative to; ``constant`` reads a body's constants (a reader's,
    which records what it read)."""

    def __init__(self, model: tfl.Model, constant: Constant, where: str, size: int) -> None:
        self.model, self.constant, self.where, self.size = model, constant, where, size
        self.allowed = budget.allowance("work", size)
        self.spent = 0
        self.indexed: dict[int, _Indexed] = {}
        self.evaluations: dict[EvaluationKey, _Evaluation | RnnportError] = {}
        self.matches: dict[tuple[EvaluationKey, int], Matched] = {}
        self.ancestry: dict[tuple[int, int], set[int]] = {}
        self.evaluated = 0  # bodies evaluated (each key once)

    def charge(self, units: int) -> None:
        """Count ``units`` steps against the ``work`` limit."""
        self.spent += units
        if self.spent > self.allowed:
            raise budget.exceeded(
                self.where, f"recognising its WHILE loops has taken {self.spent:,} steps (loop "
                "body operations evaluated, operators indexed, tensors visited) and is not "
                "done", "work", self.size)

    def index(self, subgraph: int) -> _Indexed:
        """Subgraph ``subgraph``'s operators by the tensors they write, indexed once."""
        found = self.indexed.get(subgraph)
        if found is None:
            graph = self.model.subgraphs[subgraph]
            self.charge(len(graph.operators) + sum(len(op.outputs) for op in graph.operators))
            found = _Indexed({}, {}, {})
            for k, op in enumerate(graph.operators):
                for position, tensor in enumerate(op.outputs):
                    found.first.setdefault(tensor, (k, position))
                    writers = found.writers.setdefault(tensor, [])
                    if not writers or writers[-1] != k:
                        writers.append(k)
                if self.model.operator_code(op) == GATHER and len(op.inputs) == 2:
                    found.gathers.setdefault(tuple(op.inputs), []).append(k)
            self.indexed[subgraph] = found
        return found

    def last_writer(self, subgraph: int, tensor: int) -> tfl.Operator | None:
        writers = self.index(subgraph).writers.get(tensor)
        return self.model.subgraphs[subgraph].operators[writers[-1]] if writers else None

    def ancestors(self, subgraph: int, tensor: int) -> set[int]:
        """``tensor`` and every tensor it is computed from in ``subgraph`` (each visit charged
        to the work budget)."""
        key = (subgraph, tensor)
        if key not in self.ancestry:
            found: set[int] = set()
            pending = [tensor]
            while pending:
                self.charge(1)
                current = pending.pop()
                if current in found:
                    continue
                found.add(current)
                op = self.last_writer(subgraph, current)
                if op is not None:
                    pending.extend(t for t in op.inputs if t >= 0)
            self.ancestry[key] = found
        return self.ancestry[key]

    def __call__(self, operator: int) -> LoopCell:
        """The cell WHILE ``operator`` of the main subgraph computes;
        :class:`UnsupportedFeatureError` naming what does not fit."""
        model, where = self.model, self.where
        main = model.subgraphs[0]
        op = main.operators[operator]
        label = f"{where}: operator {operator} (WHILE)"
        values = getattr(op.builtin_options, "values", {})
        cond, body = values.get("cond_subgraph_index", -1), values.get("body_subgraph_index", -1)
        count = len(model.subgraphs)
        if not (0 < cond < count and 0 < body < count) or cond == body:
            raise FormatError(f"{label}: condition subgraph {cond} and body subgraph {body}; "
                              f"expected two different subgraphs of 1 to {count - 1}. The file "
                              "is damaged.")
        graph = model.subgraphs[body]
        n = len(op.inputs)
        self.charge(n)
        if len(graph.inputs) != n or len(graph.outputs) != n or len(op.outputs) != n or \
                len(model.subgraphs[cond].inputs) != n or -1 in op.inputs:
            raise FormatError(f"{label}: {n} loop values, body subgraph {body} takes "
                              f"{len(graph.inputs)} and gives {len(graph.outputs)}; expected the "
                              "same number everywhere. The file is damaged.")
        tensors = [main.tensors[t] for t in op.inputs]
        floats = [k for k, t in enumerate(tensors) if t.type_name == "FLOAT32"]
        carried = [k for k in floats if graph.outputs[k] == graph.inputs[k]]
        changed = [k for k in floats if graph.outputs[k] != graph.inputs[k]]
        states = [k for k in changed if len(tensors[k].shape) == 2]
        outputs = [k for k in changed if len(tensors[k].shape) == 3]
        sequences = [k for k in carried if len(tensors[k].shape) == 3]
        if len(states) > 1:
            raise UnsupportedFeatureError(
                f"{label}: its body carries {len(states)} states (loop values "
                f"{[f'{tensors[k].name!r} {list(tensors[k].shape)}' for k in states]}): an "
                "LSTM's h and c, stacked cells in one loop, or a mask's; rnnport reads loops "
                "carrying one state (LSTMs from TFLite's fused LSTM operators, which the "
                "converter writes for Keras LSTM layers).")
        if len(states) != 1 or len(outputs) != 1 or len(sequences) != 1:
            raise UnsupportedFeatureError(
                f"{label}: loop values {[f'{t.type_name}{list(t.shape)}' for t in tensors]}; "
                "rnnport reads a loop carrying one state (batch, hidden), one input sequence "
                "and one output sequence, as a converted SimpleRNN or GRU does.")
        state, output, sequence = states[0], outputs[0], sequences[0]
        counters = [k for k, t in enumerate(tensors) if t.type_name in ("INT32", "INT64") and
                    not t.shape and self._counts_up(op, body, k)]
        gathers: list[int] = []
        for counter in counters:
            gathers = self.index(body).gathers.get((graph.inputs[sequence],
                                                    graph.inputs[counter]), [])
            if gathers:
                break
        else:
            raise UnsupportedFeatureError(
                f"{label}: its body reads the sequence with no GATHER at a step counter that "
                "starts at 0 and adds 1 per step; rnnport reads loops that visit every step in "
                "order (as a converted SimpleRNN or GRU does).")
        time_axis = int(getattr(graph.operators[gathers[0]].builtin_options, "values",
                                {}).get("axis", 0)) % 3
        remarks: list[str] = []
        self._check_condition(operator, cond, body, counters, sequence, time_axis, label,
                              remarks)
        hidden = tensors[state].shape[1]
        inputs = tensors[sequence].shape[2 if time_axis != 2 else 1]
        key = (body, state, sequence, counter)
        evaluation = self._evaluate(key)
        if graph.outputs[state] not in self.ancestors(body, graph.outputs[output]):
            raise UnsupportedFeatureError(
                f"{label}: its output sequence (loop value {output}) is not built from the new "
                "state; rnnport reads loops whose output at each step is the state.")
        matched = self._match(key, hidden, evaluation.new)
        if matched is None:
            unknown = ", ".join(dict.fromkeys(evaluation.opaque)) or "none"
            raise UnsupportedFeatureError(
                f"{label}: its body (subgraph {body}) computes a step that is neither a simple "
                "RNN (tanh or relu) nor a GRU (sigmoid gates, tanh candidate) as rnnport "
                f"defines them; operations it could not follow: {unknown}. Nothing was read.")
        fields, params, has_bias = dict(matched[0]), dict(matched[1]), matched[2]
        if params["weight_ih"].shape != (params["weight_hh"].shape[0], inputs) or \
                params["weight_hh"].shape[1] != hidden:
            raise FormatError(f"{label}: weights {list(params['weight_ih'].shape)} and "
                              f"{list(params['weight_hh'].shape)} for input size {inputs} and "
                              f"hidden size {hidden}; the sizes disagree. The file is damaged.")
        if not has_bias:
            params = {k: v for k, v in params.items() if not k.startswith("bias")}
        fields.update(input_size=inputs, hidden_size=hidden, bias=has_bias)
        return LoopCell(fields, params, sequence, output, state, time_axis, remarks,
                        evaluation.reads)

    def _evaluate(self, key: EvaluationKey) -> _Evaluation:
        """The body's new state for ``key``'s inputs, evaluated once (an error, once too)."""
        found = self.evaluations.get(key)
        if found is None:
            body, state, sequence, counter = key
            graph = self.model.subgraphs[body]
            reads: list[ConstantRead] = []

            def constant(subgraph: int, tensor: int, what: str) -> np.ndarray:
                reads.append((subgraph, tensor, what))
                return self.constant(subgraph, tensor, what)

            roles: dict[int, Sym] = {graph.inputs[state]: Var("h"),
                                     graph.inputs[sequence]: Var("sequence")}
            evaluation = _Body(self.model, body, self.index(body), roles,
                               graph.inputs[counter], constant, self.where, self.charge)
            self.evaluated += 1
            try:
                new = evaluation.value(graph.outputs[state])
            except LimitError:
                raise
            except RnnportError as error:
                found = error
            else:
                found = _Evaluation(new, evaluation.opaque, tuple(reads))
            self.evaluations[key] = found
        if isinstance(found, RnnportError):
            raise type(found)(*found.args) from None
        return found

    def _match(self, key: EvaluationKey, hidden: int, new: Sym) -> Matched:
        """The cell ``new`` is, with ``hidden`` units: its fields, parameters and whether
        it has a bias; None when it is no cell rnnport reads. Matched once per key."""
        if (key, hidden) not in self.matches:
            matched: Matched = None
            for matcher in (_simple, _gru):
                try:
                    matched = matcher(new, hidden)
                    break
                except _NoMatch:
                    continue
            self.matches[key, hidden] = matched
        return self.matches[key, hidden]

    def _counts_up(self, op: tfl.Operator, body: int, k: int) -> bool:
        """Whether loop value ``k`` starts at a constant 0 and the body adds a constant 1."""
        model, graph = self.model, self.model.subgraphs[body]
        if _integer(model, 0, op.inputs[k]) != 0:
            return False
        producer = self.index(body).writers.get(graph.outputs[k], [])
        if len(producer) != 1:
            return False
        adding = graph.operators[producer[0]]
        if model.operator_code(adding) != ADD or len(adding.inputs) != 2 or \
                graph.inputs[k] not in adding.inputs:
            return False
        other = [t for t in adding.inputs if t != graph.inputs[k]]
        return bool(other) and _integer(model, body, other[0]) == 1

    def _check_condition(self, operator: int, cond: int, body: int, counters: list[int],
                         sequence: int, time_axis: int, label: str,
                         remarks: list[str]) -> None:
        """The condition must be LESS(counter, bound) or a LOGICAL_AND of such, every bound
        at least the sequence's length: a constant, or a loop value the body passes on
        unchanged whose initial value is a constant or is computed from the sequence's
        shape."""
        model = self.model
        graph = model.subgraphs[cond]
        main = model.subgraphs[0]
        loop = main.operators[operator]
        passed = [k for k in range(len(loop.inputs))
                  if model.subgraphs[body].outputs[k] == model.subgraphs[body].inputs[k]]
        sequence_tensor = main.tensors[loop.inputs[sequence]]
        steps = sequence_tensor.signature[time_axis]  # None: known at run time
        if len(graph.outputs) != 1:
            raise FormatError(f"{label}: condition subgraph {cond} has {len(graph.outputs)} "
                              "outputs; expected one. The file is damaged.")

        def refuse(why: str) -> UnsupportedFeatureError:
            return UnsupportedFeatureError(
                f"{label}: its condition (subgraph {cond}) {why}; the canonical network runs "
                "every step of the sequence, so the numbers could differ. Nothing was read.")

        pending, seen = [graph.outputs[0]], 0
        while pending:
            seen += 1
            tensor = pending.pop()
            op = self.last_writer(cond, tensor)
            code = model.operator_code(op) if op is not None else None
            if seen > 64 or op is None or code not in (LESS, LOGICAL_AND) or len(op.inputs) != 2:
                raise refuse("is not a comparison of step counters (LESS, joined by LOGICAL_AND)")
            if code == LOGICAL_AND:
                pending.extend(op.inputs)
                continue
            left, right = op.inputs
            if left not in [graph.inputs[k] for k in counters]:
                raise refuse(f"compares {graph.tensors[left].name!r}, which is no step counter")
            if right in graph.inputs:  # a loop value: the body must pass it on unchanged
                k = list(graph.inputs).index(right)
                if k not in passed or k in counters:
                    raise refuse(f"compares the counter with loop value {k}, which changes from "
                                 "step to step")
                bound = _integer(model, 0, loop.inputs[k])
                initial = loop.inputs[k]
                if bound is None and not self._from_shape(initial, loop.inputs[sequence]):
                    raise refuse(f"stops at loop value {k} ({main.tensors[initial].name!r}), "
                                 "which is computed from something other than the sequence's "
                                 "shape")
                if bound is None:
                    remarks.append(f"{label.split(': ', 1)[-1]} runs as many steps as the "
                                   "sequence's shape says, read as running every step.")
                    continue
            elif len(model.buffers[graph.tensors[right].buffer].data):
                bound = _integer(model, cond, right)
            else:
                raise refuse(f"compares the counter with {graph.tensors[right].name!r}, which "
                             "is neither a constant nor a loop value")
            if bound is None or steps is None or bound < steps:
                raise refuse(f"stops after {'an unreadable number of' if bound is None else bound}"
                             f" steps, and the sequence has "
                             f"{'a length known only at run time' if steps is None else steps}")

    def _from_shape(self, tensor: int, sequence: int) -> bool:
        """Whether ``tensor`` is computed (in the main subgraph) from a SHAPE (an integer
        result of a float input) of ``sequence`` or of a tensor ``sequence`` is computed
        from."""
        graph = self.model.subgraphs[0]
        behind, computed = self.ancestors(0, sequence), self.ancestors(0, tensor)
        integers = ("INT32", "INT64")
        writers = self.index(0).writers
        operators = {k for t in computed for k in writers.get(t, ())}
        self.charge(len(operators))
        return any(
            op.inputs and op.inputs[0] in behind and len(op.outputs) == 1 and
            graph.tensors[op.outputs[0]].type_name in integers and
            graph.tensors[op.inputs[0]].type_name not in integers
            for op in (graph.operators[k] for k in operators))


def _integer(model: tfl.Model, subgraph: int, tensor: int) -> int | None:
    """The value of a one-element integer constant, else None."""
    if tensor < 0:
        return None
    info = model.subgraphs[subgraph].tensors[tensor]
    if info.type_name not in ("INT32", "INT64") or not len(model.buffers[info.buffer].data) or \
            math.prod(info.shape) != 1:  # decided before decoding: one tensor, many loops
        return None
    try:
        values = np.asarray(tfl.tensor_array(model, tensor, subgraph=subgraph)).reshape(-1)
    except RnnportError:
        return None
    return int(values[0]) if values.size == 1 else None
