"""The cell a ``WHILE`` loop computes, found by evaluating its body symbolically.

TensorFlow's converter has fused operators for tf_keras LSTMs only: a tf_keras ``SimpleRNN``
or ``GRU``, every Keras 3 recurrent layer (LSTMs included) and any ``tf.while_loop``
recurrence become a ``WHILE`` operator whose body subgraph computes one step from builtins.
rnnport reads such a loop without running it: each body tensor the new state depends on
becomes a symbolic value, and the values of the new states must be one of the canonical
cells, term by term, with the weights taken from the constants the body holds. Nothing is
guessed from names or operator counts.

The values: the loop's states ``h`` (and ``c``); ``x``, the step's input (a ``GATHER`` of
the sequence at the step counter); affine terms ``W·s + b`` (``FULLY_CONNECTED`` of ``s``
with constant weights ``(out, in)`` and an optional constant bias); sums of terms, products
and constant vectors (``ADD``); ``SPLIT`` / ``SPLIT_V`` of a sum along the feature axis, and
``STRIDED_SLICE`` of one with constant bounds that takes every other axis whole (the rows
of each term's weights and bias); ``MUL``, ``SUB``; ``LOGISTIC``, ``TANH``, ``RELU``.
``RESHAPE``/``SQUEEZE``/``EXPAND_DIMS`` that keep each row of features (a batch of 1
squeezed away) and ``DEQUANTIZE`` of constants pass values through. Any other operator on
the way makes the value opaque, and a state built from an opaque value is refused with the
operators named.

The cells recognised (canonical gate order in brackets; σ, act: sigmoid, tanh, relu, or
none: the identity, Keras's ``activation="linear"``)::

    simple RNN   h' = act(W x + bW + R h + bR)                        act: tanh, relu
    GRU          z = σ(W_z x + bW_z + R_z h + bR_z)      r likewise    [r z n]
                 n = act(W_n x + bW_n + r∘(R_n h + bR_n))              (reset after)
                 n = act(W_n x + bW_n + R_n (r∘h) + bR_n)              (reset before)
                 h' = z∘h + (1 − z)∘n,  or  h' = n + z∘(h − n)
    LSTM         i, f, o = σ(W x + bW + R h + bR)  g = act_g(…)        [i f g o]
                 c' = f∘c + i∘g,  h' = o∘act_h(c')                     (two states)

Gate and candidate functions other than the defaults (σ; tanh) are read as
``Spec.activations`` (the identity as ``Affine`` 1, 0); gates applying different functions,
and a simple RNN of another function, are refused naming them. Biases the body leaves out
are zeros; a cell with no bias at all is read with ``bias=False``; a bias added to the sum
of both products (Keras 3's LSTM) is the recurrent side's, as the keras format reads it.

The loop itself is checked too: the step counter the input is gathered with starts at a
constant 0 and adds 1 per step, the condition compares counters with ``LESS`` (joined by
``LOGICAL_AND``), and the output sequence is built from the new ``h`` (with two states,
``h`` is the one the output is built from whose new value ``c'`` is not built from); a loop
may keep no output sequence (the converter drops one nothing reads). With
``SELECT_TF_OPS`` the output is a TensorList: the body must set the item at the step
counter to ``h'`` (``FlexTensorListSetItem``) of a list reserved for as many items as the
sequence has steps (``FlexTensorListReserve``), or item 0 of a one-item list (the last step
alone); other Flex operators are named in the refusal. A body whose new values read
resource variables (``READ_VARIABLE``: weights kept as variables) is refused, saying when
nothing in the file initializes them, so that the weights are not in the file at all.

**Cost.** A file may hold thousands of ``WHILE`` operators sharing one large body. A
:class:`Recogniser` serves one read of a file: it indexes each subgraph once, evaluates each
body once for the operands that decide the value (which body inputs hold the states, the
sequence and the step counter) and matches each value once per hidden size, whatever the
number of loops naming it. The nodes evaluated, the operators indexed and the tensors
visited count against the ``work`` limit (:mod:`rnnport.budget`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...io import tflite_schema as tfl
from .._loops import (
    Act,
    Const,
    Matched,
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
    rows,
    unmatched,
)
from .variables import READ_VARIABLE, Variables

__all__ = ["ConstantRead", "LoopCell", "Recogniser"]

ADD, CONCATENATION, DEQUANTIZE, FULLY_CONNECTED, GATHER = 0, 2, 6, 9, 36
LOGISTIC, MUL, RELU, RESHAPE, TANH, SUB, SQUEEZE = 14, 18, 19, 22, 28, 41, 43
SPLIT, EXPAND_DIMS, LESS, LOGICAL_AND, SPLIT_V, WHILE = 49, 70, 58, 86, 102, 119
STRIDED_SLICE = 45
ACTIVATION_OPS = {LOGISTIC: "sigmoid", TANH: "tanh", RELU: "relu"}
FUSED = {1: "relu", 4: "tanh"}  # a fused activation (ActivationFunctionType) → its function
PASS_THROUGH = frozenset({RESHAPE, SQUEEZE, EXPAND_DIMS})
HALF_TYPES = frozenset({"FLOAT16", "BFLOAT16"})  # loop values of a half-precision layer
MAX_DEPTH = 256  # nested values in one step: far more than any cell needs

# (subgraph, tensor, what) → the constant's float32 values (the reader's: it dequantizes
# when asked and records what it read).
Constant = Callable[[int, int, str], np.ndarray]
ConstantRead = tuple[int, int, str]  # a call of a Constant: (subgraph, tensor, what)
# A body tensor's value being computed: it yields the tensors whose values it needs, is sent
# each value, and returns its own.
Needs = Generator[int, Any, "Sym"]



@dataclass
class LoopCell:
    """What a recognised loop computes, and where its sequence and state enter and leave."""

    fields: dict[str, Any]  # Spec fields: cell, input_size, hidden_size, bias, reset_after,
    # activations
    params: dict[str, np.ndarray]  # weight_ih, weight_hh, bias_ih, bias_hh (canonical)
    sequence: int  # the WHILE input holding the sequence (and the output position of y)
    output: int  # the WHILE output holding the output sequence (or its TensorList; -1: none)
    states: tuple[int, ...]  # the WHILE inputs holding the initial h (and an LSTM's c)
    time_axis: int  # the sequence's time axis (0: time-major, as the converter writes)
    # The output is a TensorList (Flex ops) of "every step", or of the "last step" alone
    # (return_sequences=False: one item, set at each step); "" a tensor.
    listed: str = ""
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

    def value(self, tensor: int) -> Sym:
        """The value of ``tensor``, with the values it is computed from, without recursion:
        each computation is a generator that yields the tensors whose values it needs
        (:data:`Needs`), and a stack of them stands in for the call stack, so the stack a
        body takes is the same wherever ``read`` is called from."""
        if tensor in self.memo:
            return self.memo[tensor]
        self.charge(1)
        pending: list[tuple[int, Needs]] = [(tensor, self._compute(tensor))]
        answer: Sym | None = None
        while True:
            current, computation = pending[-1]
            try:
                wanted = computation.send(answer)
            except StopIteration as done:
                result: Sym = done.value
                if isinstance(result, Opaque):
                    self.opaque.append(result.what)
                self.memo[current] = answer = result
                pending.pop()
                if not pending:
                    return result
                continue
            answer = self.memo.get(wanted)
            if answer is None:
                if len(pending) > MAX_DEPTH:
                    raise UnsupportedFeatureError(
                        f"{self.where}: the loop body (subgraph {self.index}) nests more than "
                        f"{MAX_DEPTH} operations in one step; expected a recurrent cell's few.")
                self.charge(1)
                pending.append((wanted, self._compute(wanted)))

    def _compute(self, tensor: int) -> Needs:
        if tensor in self.roles:
            return self.roles[tensor]
        info = self.graph.tensors[tensor]
        if self.is_constant(tensor):
            if info.type_name not in ("FLOAT32", "FLOAT16") or \
                    (info.quantization is not None and info.quantization.quantized):
                return Opaque(f"constant {info.name!r} ({info.type_name})")
            if math.prod(info.shape) > 1:  # a vector: a bias, read (and recorded) as one
                return Const(self.constant(self.index, tensor, f"loop body (subgraph "
                                           f"{self.index}) constant {info.name!r}"), tensor)
            return Const(np.asarray(self.raw(tensor), dtype=np.float32), tensor)
        made = self.producer.get(tensor)
        if made is None:
            return Opaque(f"tensor {info.name!r}")
        operator, position = made
        op = self.graph.operators[operator]
        code, inputs = self.code(operator), op.inputs
        options = getattr(op.builtin_options, "values", {})

        def arg(k: int) -> Needs:
            if k < len(inputs) and inputs[k] >= 0:
                found: Sym = yield inputs[k]
                return found
            return Opaque(f"{self.name(operator)} without input {k}")

        if code == DEQUANTIZE and inputs and self.is_constant(inputs[0]):
            return Const(self.constant(self.index, tensor, f"loop body (subgraph {self.index}) "
                                       f"tensor {info.name!r}"), tensor)
        if code in PASS_THROUGH and inputs and inputs[0] >= 0 and \
                _same_rows(self.graph.tensors[inputs[0]].signature, info.signature):
            return (yield from arg(0))
        if code == GATHER and len(inputs) == 2 and inputs[1] == self.counter and \
                self.roles.get(inputs[0]) is self.sequence and options.get("batch_dims", 0) == 0:
            return Var("x")  # the step's input
        if code == FULLY_CONNECTED:
            return (yield from self._dense(operator, options))
        if code in ACTIVATION_OPS and len(inputs) == 1:
            return Act(ACTIVATION_OPS[code], (yield from arg(0)))
        if code in (ADD, MUL, SUB) and len(inputs) == 2:
            fused = options.get("fused_activation_function", 0)
            if fused and fused not in FUSED:
                return Opaque(f"{self.name(operator)} with fused activation "
                              f"{tfl.ACTIVATIONS.get(fused, fused)}")
            a = yield from arg(0)
            b = yield from arg(1)
            result: Sym = add(a, b) if code == ADD else Mul(a, b) if code == MUL else Sub(a, b)
            return Act(FUSED[fused], result) if fused else result
        if code in (SPLIT, SPLIT_V):
            return (yield from self._split(operator, position))
        if code == STRIDED_SLICE:
            return (yield from self._strided(operator, options))
        return Opaque(f"operator {operator} ({self.name(operator)})")

    def _dense(self, operator: int, options: Any) -> Needs:
        op = self.graph.operators[operator]
        inputs = op.inputs
        label = f"loop body (subgraph {self.index}) operator {operator} (FULLY_CONNECTED)"
        if len(inputs) < 2 or inputs[0] < 0 or inputs[1] < 0 or \
                options.get("weights_format", 0) != 0:
            return Opaque(f"operator {operator} (FULLY_CONNECTED, not plain weights)")
        source: Sym = yield inputs[0]
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

    def _split(self, operator: int, position: int) -> Needs:
        op = self.graph.operators[operator]
        code, inputs = self.code(operator), op.inputs
        value_at, axis_at = (1, 0) if code == SPLIT else (0, 2)
        axis = _integer(self.model, self.index, inputs[axis_at]) \
            if len(inputs) > max(value_at, axis_at) else None
        rank = len(self.graph.tensors[inputs[value_at]].shape) if axis is not None else 0
        if axis is None or rank == 0 or axis % rank != rank - 1:
            return Opaque(f"operator {operator} ({self.name(operator)} not on the feature axis)")
        value: Sym = yield inputs[value_at]
        widths = [self.graph.tensors[t].shape[-1] if self.graph.tensors[t].shape else 0
                  for t in op.outputs]
        start = sum(widths[:position])
        return rows(value, range(start, start + widths[position]), sum(widths),
                    f"operator {operator} ({self.name(operator)})")

    def _strided(self, operator: int, options: Any) -> Needs:
        """A STRIDED_SLICE of a value along its feature (last) axis alone: every other axis
        taken whole, with constant begin, end and strides (Keras 3 GRUs split the recurrent
        product so)."""
        inputs = self.graph.operators[operator].inputs
        label = f"operator {operator} (STRIDED_SLICE"
        masked = [name for name in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask",
                                    "offset") if options.get(name, 0)]
        if len(inputs) != 4 or min(inputs) < 0 or masked:
            return Opaque(f"{label} with {', '.join(masked) or 'other inputs'})")
        shape = self.graph.tensors[inputs[0]].signature
        begin, end, strides = (_integers(self.model, self.index, t) for t in inputs[1:])
        rank = len(shape)
        if begin is None or end is None or strides is None or rank == 0 or \
                not len(begin) == len(end) == len(strides) == rank or 0 in strides:
            return Opaque(f"{label} with bounds that are no constants of the value's rank)")
        bounds = [(None if options.get("begin_mask", 0) >> axis & 1 else begin[axis],
                   None if options.get("end_mask", 0) >> axis & 1 else end[axis], strides[axis])
                  for axis in range(rank)]
        for axis, (first, last, step) in enumerate(bounds[:-1]):
            size = shape[axis]
            whole = slice(first, last, step).indices(size) == (0, size, 1) if size is not None \
                else step == 1 and first in (None, 0) and last is None
            if not whole:
                return Opaque(f"{label} of axis {axis}, not only of the feature axis)")
        width = shape[-1]
        if width is None:
            return Opaque(f"{label} of a feature axis of unknown width)")
        value: Sym = yield inputs[0]
        return rows(value, range(*slice(*bounds[-1]).indices(width)), width,
                    f"operator {operator} ({self.name(operator)})")

# -- the loop ------------------------------------------------------------------------------


@dataclass
class _Evaluation:
    """A body's value for one choice of state, sequence and counter inputs."""

    new: tuple[Sym, ...]  # the new states: h (and an LSTM's c)
    opaque: list[str]  # what the evaluation could not follow
    reads: tuple[ConstantRead, ...]  # the constants read, in order


# body subgraph, state positions (h first), sequence and counter positions
EvaluationKey = tuple[int, tuple[int, ...], int, int]


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
        self.matches: dict[tuple[EvaluationKey, int], Matched | Unsupported | None] = {}
        self.variables: Variables | None = None  # the model's, found when a loop reads one
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
        halves = sorted({t.type_name.lower() for t in tensors if t.type_name in HALF_TYPES})
        if halves:
            half = halves[0]
            raise UnsupportedFeatureError(
                f"{label}: its loop values are {half} (loop values "
                f"{[f'{t.type_name}{list(t.shape)}' for t in tensors]}): Keras computed the "
                f"layer in {half} (a dtype policy such as 'mixed_{half}' or '{half}'), and "
                f"rnnport computes in float32; the outputs would differ by {half}'s rounding, "
                "not agree within 1e-5. Nothing was read. Convert a model built with the "
                "float32 dtype policy (keras.config.set_dtype_policy('float32'), or "
                "dtype='float32' on the layer) and the same weights.")
        floats = [k for k, t in enumerate(tensors) if t.type_name == "FLOAT32"]
        changed = [k for k in range(n) if graph.outputs[k] != graph.inputs[k]]
        self._check_variables(op, body, [k for k in changed if k in floats], label)
        states = [k for k in changed if k in floats and len(tensors[k].shape) == 2]
        outputs = [k for k in changed if (k in floats and len(tensors[k].shape) == 3) or
                   tensors[k].type_name == "VARIANT"]
        sequences = [k for k in floats if k not in changed and len(tensors[k].shape) == 3]
        if len(states) > 2:
            raise UnsupportedFeatureError(
                f"{label}: its body carries {len(states)} states (loop values "
                f"{[f'{tensors[k].name!r} {list(tensors[k].shape)}' for k in states]}): stacked "
                "cells in one loop, or a mask's; rnnport reads loops carrying one state (a "
                "simple RNN's or a GRU's h) or two (an LSTM's h and c).")
        if not states or len(outputs) > 1 or len(sequences) != 1:
            flex = sorted({name for name in model.operator_names(body) if name.startswith("Flex")})
            raise UnsupportedFeatureError(
                f"{label}: loop values {[f'{t.type_name}{list(t.shape)}' for t in tensors]}; "
                "rnnport reads a loop carrying one or two states (batch, hidden), one input "
                "sequence and at most one output sequence (a tensor, or a TensorList of the "
                "steps), as a converted SimpleRNN, GRU or LSTM does."
                + (f" Its body uses the Flex (SELECT_TF_OPS) operators {', '.join(flex)}."
                   if flex else ""))
        # No output sequence: the converter dropped it, the final state alone being used
        # (an encoder's return_state).
        output, sequence = (outputs or [-1])[0], sequences[0]
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
                "order (as a converted SimpleRNN, GRU or LSTM does).")
        time_axis = int(getattr(graph.operators[gathers[0]].builtin_options, "values",
                                {}).get("axis", 0)) % 3
        remarks: list[str] = []
        self._check_condition(operator, cond, body, counters, sequence, time_axis, label,
                              remarks)
        states = self._ordered(body, states, output, label)
        hidden = tensors[states[0]].shape[1]
        inputs = tensors[sequence].shape[2 if time_axis != 2 else 1]
        key = (body, tuple(states), sequence, counter)
        evaluation = self._evaluate(key)
        listed = ""
        if output < 0:
            pass
        elif tensors[output].type_name == "VARIANT":
            listed = self._check_list(op, body, output, states[0], counters, sequence,
                                      time_axis, label)
            remarks.append(f"{label.split(': ', 1)[-1]} builds its output ({listed}) in a "
                           "TensorList with Flex (SELECT_TF_OPS) operators (FlexTensorListReserve,"
                           " FlexTensorListSetItem, FlexTensorListStack), read as what they "
                           "stack; LiteRT runs the file only with its Flex delegate.")
        elif graph.outputs[states[0]] not in self.ancestors(body, graph.outputs[output]):
            raise UnsupportedFeatureError(
                f"{label}: its output sequence (loop value {output}) is not built from the new "
                "state; rnnport reads loops whose output at each step is the state.")
        matched = self._match(key, hidden, evaluation.new)
        if isinstance(matched, Unsupported):
            raise UnsupportedFeatureError(f"{label}: its body (subgraph {body}) computes "
                                          f"{matched}. Nothing was read.")
        if matched is None:
            raise UnsupportedFeatureError(
                f"{label}: its body (subgraph {body}) computes a step that is neither a simple "
                "RNN (tanh or relu), a GRU nor an LSTM as rnnport defines them; "
                f"{unmatched(evaluation.new, evaluation.opaque)}. Nothing was read.")
        fields, params, has_bias = dict(matched[0]), dict(matched[1]), matched[2]
        if params["weight_ih"].shape != (params["weight_hh"].shape[0], inputs) or \
                params["weight_hh"].shape[1] != hidden:
            raise FormatError(f"{label}: weights {list(params['weight_ih'].shape)} and "
                              f"{list(params['weight_hh'].shape)} for input size {inputs} and "
                              f"hidden size {hidden}; the sizes disagree. The file is damaged.")
        if not has_bias:
            params = {k: v for k, v in params.items() if not k.startswith("bias")}
        fields.update(input_size=inputs, hidden_size=hidden, bias=has_bias)
        return LoopCell(fields, params, sequence, output, tuple(states), time_axis,
                        listed=listed, remarks=remarks,
                        reads=evaluation.reads)

    def _ordered(self, body: int, states: list[int], output: int, label: str) -> list[int]:
        """The state positions, h first: the state the output is built from (any, with no
        output) whose new value no other state's is built from (an LSTM's h' = o∘act(c'),
        not c')."""
        if len(states) == 1:
            return states
        graph = self.model.subgraphs[body]
        built = self.ancestors(body, graph.outputs[output]) if output >= 0 else \
            {graph.outputs[k] for k in states}
        latest = [k for k in states if graph.outputs[k] in built and not any(
            graph.outputs[k] in self.ancestors(body, graph.outputs[j]) for j in states if j != k)]
        if len(latest) != 1:
            raise UnsupportedFeatureError(
                f"{label}: its output sequence (loop value {output}) is built from "
                f"{'none' if not latest else 'each'} of its {len(states)} states (loop values "
                f"{', '.join(map(str, states))}) alone; rnnport reads loops whose output at each "
                "step is the state h (an LSTM's c feeds h).")
        return [latest[0], *(k for k in states if k != latest[0])]

    def _check_list(self, op: tfl.Operator, body: int, output: int, state: int,
                    counters: list[int], sequence: int, time_axis: int, label: str) -> str:
        """What a TensorList output (SELECT_TF_OPS) holds: "every step" when the body sets
        item ``counter`` to the new state (FlexTensorListSetItem) and the list starts
        reserved (FlexTensorListReserve) for as many items as the sequence has steps; the
        "last step" when it sets item 0 of a one-item list."""
        model, graph = self.model, self.model.subgraphs[body]
        writer = self.last_writer(body, graph.outputs[output])
        name = model.operator_codes[writer.opcode_index].name if writer is not None else "none"
        at = writer.inputs[1] if writer is not None and len(writer.inputs) == 3 else -1
        held = "every step" if at in [graph.inputs[k] for k in counters] else \
            "last step" if at >= 0 and _integer(model, body, at) == 0 else ""
        if writer is None or name != "FlexTensorListSetItem" or not held or \
                writer.inputs[0] != graph.inputs[output] or writer.inputs[2] != graph.outputs[state]:
            raise UnsupportedFeatureError(
                f"{label}: its output (loop value {output}) is a TensorList its body writes with "
                f"{name}; rnnport reads a list whose item at the step counter (or item 0, the "
                "last step) is set to the new state (FlexTensorListSetItem), as TensorFlow's "
                "converter writes with SELECT_TF_OPS. Nothing was read.")
        main = model.subgraphs[0]
        reserve = self.last_writer(0, op.inputs[output])
        name = model.operator_codes[reserve.opcode_index].name if reserve is not None else \
            f"tensor {main.tensors[op.inputs[output]].name!r}"
        steps = main.tensors[op.inputs[sequence]].signature[time_axis]
        count = reserve.inputs[1] if reserve is not None and len(reserve.inputs) > 1 else -1
        items = _integer(model, 0, count) if count >= 0 else None
        if name != "FlexTensorListReserve" or count < 0 or not (
                items == 1 if held == "last step" else
                (steps is not None and items == steps) or
                (items is None and self._from_shape(count, op.inputs[sequence]))):
            raise UnsupportedFeatureError(
                f"{label}: its output list starts as {name}"
                f"{'' if items is None else f' of {items} items'}; rnnport reads a list "
                "reserved (FlexTensorListReserve) for as many items as the sequence has steps "
                "(a constant, or the sequence's shape), or for one, the last step, so that "
                "stacking it gives what the loop computed. Nothing was read.")
        return held

    def _check_variables(self, op: tfl.Operator, body: int, changed: list[int],
                         label: str) -> None:
        """Refuse a body whose new values read resource variables (weights kept as
        variables), saying whether the file holds their values at all."""
        model, graph = self.model, self.model.subgraphs[body]
        resources = {graph.inputs[k]: k for k, t in enumerate(op.inputs)
                     if model.subgraphs[0].tensors[t].type_name == "RESOURCE"}
        if not resources:
            return
        self.charge(len(graph.operators))
        built: set[int] = set().union(*(self.ancestors(body, graph.outputs[k]) for k in changed))
        read = [resources[o.inputs[0]] for o in graph.operators
                if model.operator_code(o) == READ_VARIABLE and o.inputs and
                o.inputs[0] in resources and o.outputs and o.outputs[0] in built]
        if not read:
            return
        if self.variables is None:
            self.charge(sum(len(g.operators) for g in model.subgraphs))
            self.variables = Variables.of(model)
        variables = self.variables
        keys = [variables.handles.get((0, op.inputs[k])) for k in dict.fromkeys(read)]
        names = ", ".join(repr(variables.names[key]) if key is not None else
                          repr(model.subgraphs[0].tensors[op.inputs[k]].name)
                          for k, key in zip(dict.fromkeys(read), keys, strict=True))
        if any(key is None or key not in variables.initial for key in keys):
            raise UnsupportedFeatureError(
                f"{label}: its body reads its weights from resource variables ({names}) that "
                "nothing in the file assigns (no CALL_ONCE initializer sets them): the weights "
                "are not in the file. TensorFlow's from_saved_model writes such a file for a "
                "tf.saved_model.save folder, and LiteRT cannot run it either (its READ_VARIABLE "
                "fails). Convert the Keras model with tf.lite.TFLiteConverter.from_keras_model, "
                "which stores the weights as constants. Nothing was read.")
        subgraphs = sorted({variables.initializers[key] for key in keys if key is not None})
        raise UnsupportedFeatureError(
            f"{label}: its body reads its weights from resource variables ({names}) that the "
            f"file's CALL_ONCE initializer (subgraph {', '.join(map(str, subgraphs))}) sets; "
            "rnnport reads a loop's weights from the constants its body holds, as "
            "tf.lite.TFLiteConverter.from_keras_model writes them. Nothing was read.")

    def _evaluate(self, key: EvaluationKey) -> _Evaluation:
        """The body's new states for ``key``'s inputs, evaluated once (an error, once too)."""
        found = self.evaluations.get(key)
        if found is None:
            body, states, sequence, counter = key
            graph = self.model.subgraphs[body]
            reads: list[ConstantRead] = []

            def constant(subgraph: int, tensor: int, what: str) -> np.ndarray:
                reads.append((subgraph, tensor, what))
                return self.constant(subgraph, tensor, what)

            roles: dict[int, Sym] = {graph.inputs[k]: Var(name)
                                     for k, name in zip(states, ("h", "c"), strict=False)}
            roles[graph.inputs[sequence]] = Var("sequence")
            evaluation = _Body(self.model, body, self.index(body), roles,
                               graph.inputs[counter], constant, self.where, self.charge)
            self.evaluated += 1
            try:
                new = tuple(evaluation.value(graph.outputs[k]) for k in states)
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

    def _match(self, key: EvaluationKey, hidden: int,
               new: tuple[Sym, ...]) -> Matched | Unsupported | None:
        """The cell ``new`` is, with ``hidden`` units: its fields, parameters and whether
        it has a bias; what keeps it from the canonical cell; or None when it is no cell
        rnnport reads. Matched once per key."""
        if (key, hidden) not in self.matches:
            self.matches[key, hidden] = match(new, hidden)
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


def _same_rows(before: tuple[int | None, ...], after: tuple[int | None, ...]) -> bool:
    """Whether a reshape from ``before`` to ``after`` keeps each row of features: the same
    feature (last) axis, and as many rows (a batch of 1 squeezed away, or put back)."""
    if before == after:
        return True
    if not before or not after or before[-1] != after[-1] or None in before or None in after:
        return False
    return math.prod(before[:-1]) == math.prod(after[:-1])  # type: ignore[arg-type]


def _integers(model: tfl.Model, subgraph: int, tensor: int) -> list[int] | None:
    """The values of a small integer constant vector (at most 8: a slice's bounds), else
    None."""
    info = model.subgraphs[subgraph].tensors[tensor]
    if info.type_name not in ("INT32", "INT64") or not len(model.buffers[info.buffer].data) or \
            len(info.shape) > 1 or math.prod(info.shape) > 8:
        return None
    try:
        return [int(v) for v in np.asarray(tfl.tensor_array(model, tensor,
                                                            subgraph=subgraph)).reshape(-1)]
    except RnnportError:
        return None


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
