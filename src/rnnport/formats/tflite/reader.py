"""Reading a ``.tflite`` model's recurrent operators as canonical networks (NumPy only).

The layout read is the package's docstring (:mod:`rnnport.formats.tflite`); the file is
decoded by :mod:`rnnport.io.tflite_schema`, and nothing here imports TensorFlow, LiteRT or
the ``flatbuffers`` runtime.

How a graph becomes networks: every recurrent operator of the main subgraph (subgraph 0) is
one *unit*; the converter's Bidirectional pattern (a forward op and a REVERSE_V2 → op →
REVERSE_V2 op on the same input, joined by a CONCATENATION on the last axis) is one
bidirectional unit. A unit whose input is another unit's output (directly, or through
shape-keeping DEQUANTIZE/RESHAPE glue) continues that unit's network when it is the only
unit reading it; :func:`rnnport.model.stack` then merges the layers. Weights are the
constants a unit's inputs hold, directly or through DEQUANTIZE (float16 → float32, exact).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import budget
from ...activations import DEFAULTS
from ...errors import FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...io import jsontext
from ...io import tflite_schema as tfl
from ...io.pickled import preview
from ...model import RNN, Model, stack
from ...spec import Spec
from .._common import close_matches, describe, is_path, listed
from .._protocol import Choices
from .loops import Constant, LoopCell, Recogniser
from .variables import READ_VARIABLE, Variables

__all__ = ["READ_OPTIONS", "fixed_input", "load", "network_ends", "networks", "notes",
           "parameter_arrays", "read", "read_with_notes"]

READ_OPTIONS = frozenset({"node", "dequantize", "cell_clip"})
LOOPS = "rnnport.loops"  # the writer's Metadata entry describing its WHILE loops

ADD = 0
CONCATENATION = 2
DEQUANTIZE = 6
MUL = 18
DIV = 42
FILL = 94
RESHAPE = 22
TRANSPOSE = 39
REVERSE_V2 = 105
WHILE = 119
# A Bidirectional layer's merge of its directions other than CONCATENATION (merge_mode), and
# what it computes of the forward and backward y.
MERGES = {ADD: "sum", MUL: "mul"}
MERGED = {"sum": "forward + backward", "ave": "(forward + backward) / 2",
          "mul": "forward * backward"}
LAST_STEP = "its last step alone (return_sequences=False: the state at time 0)"
# Ops a value passes through unchanged between two recurrent ops (when its shape is kept).
GLUE = frozenset({DEQUANTIZE, RESHAPE})
RECURRENT = frozenset({tfl.UNIDIRECTIONAL_SEQUENCE_LSTM, tfl.BIDIRECTIONAL_SEQUENCE_LSTM,
                       tfl.UNIDIRECTIONAL_SEQUENCE_RNN, tfl.BIDIRECTIONAL_SEQUENCE_RNN,
                       tfl.LSTM, tfl.RNN})
LSTM_OPS = frozenset({tfl.UNIDIRECTIONAL_SEQUENCE_LSTM, tfl.BIDIRECTIONAL_SEQUENCE_LSTM,
                      tfl.LSTM})
STEP_OPS = frozenset({tfl.LSTM, tfl.RNN})  # one time step per invocation
# The fused activation (schema ActivationFunctionType) → the canonical form. LiteRT's LSTM
# applies it to the candidate g and to the cell state before the output gate; its RNN to
# the new state. NONE leaves the LSTM's output scratch unwritten (ApplyActivationToVector
# returns at once), RELU_N1_TO_1, RELU6 and SIGN_BIT have no canonical equivalent.
LSTM_ACTIVATIONS: dict[int, tuple[str, ...]] = {4: (), 1: ("Sigmoid", "Relu", "Relu")}
RNN_CELLS: dict[int, str] = {4: "rnn_tanh", 1: "rnn_relu"}

# BIDIRECTIONAL_SEQUENCE_LSTM's 48 inputs: each direction's 17 weights in LSTM_INPUTS order
# (1-17 forward, 18-34 backward), then the states, the auxiliary input and its weights.
BI_LSTM_STATES = ((35, 36), (37, 38))
BI_LSTM_AUX = (39, *range(40, 48))
# BIDIRECTIONAL_SEQUENCE_RNN's 12: input, then per direction weights, recurrent, bias, state.
BI_RNN_AUX = (9, 10, 11)


# -- the file ------------------------------------------------------------------------------


@dataclass
class _File:
    model: tfl.Model
    where: str
    graph: tfl.SubGraph
    producer: dict[int, int] = field(default_factory=dict)  # tensor → operator writing it
    readers: dict[int, list[int]] = field(default_factory=dict)  # tensor → operators reading it
    loops: dict[int, dict[str, Any]] = field(default_factory=dict)  # WHILE operator → its cell
    origins: dict[int, int] = field(default_factory=dict)  # _origin's answers, computed once
    index: int = 0  # the subgraph
    size: int = 0  # the file's bytes, which the resource limits are relative to
    subgraphs: dict[int, _File] = field(default_factory=dict)  # loop bodies, indexed once
    # Other WHILE operators: the cell each computes (read permissively, for the structure),
    # or why it is none; and how a recognised loop's unit sits in the graph.
    recognised: dict[int, LoopCell | RnnportError] = field(default_factory=dict)
    loop_time_major: dict[int, bool] = field(default_factory=dict)  # its input is time-major
    loop_output_major: dict[int, bool] = field(default_factory=dict)  # its output is
    found_variables: Variables | None = None  # the model's resource variables, found once

    def code(self, operator: int) -> int:
        return self.model.operator_code(self.graph.operators[operator])

    def op_name(self, operator: int) -> str:
        return self.model.operator_codes[self.graph.operators[operator].opcode_index].name

    def label(self, operator: int) -> str:
        return f"operator {operator} ({self.op_name(operator)})"

    def tensor_name(self, tensor: int) -> str:
        return self.graph.tensors[tensor].name

    def variables(self) -> Variables:
        if self.found_variables is None:
            self.found_variables = Variables.of(self.model)
        return self.found_variables


def load(source: Any) -> _File:
    """The decoded model with its main subgraph's producers and readers indexed."""
    if isinstance(source, tfl.Model):
        model = source
    elif is_path(source):
        model = tfl.read_model(source)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        model = tfl.decode_model(source, source="TFLite bytes")
    else:
        raise FormatError(f"read(fmt='tflite'): expected a .tflite path, its bytes or an "
                          f"rnnport.io.tflite_schema.Model; got {describe(source)}.")
    where = os.fspath(source) if is_path(source) else model.source
    if not model.subgraphs:
        raise FormatError(f"{where}: the model has no subgraph; expected at least the main one.")
    file = _indexed(model, where, 0)
    file.size = _size(source, model)
    file.loops = _loops(model, where)
    # Each loop once, permissively (quantized weights dequantized): a read replays the
    # constants a recognised loop's cell was built from with its own options (_one_direction).
    constants = _constants(file, {"dequantize": True}, _Reading(size=file.size))
    recogniser = Recogniser(model, constants, where, file.size)
    for index in range(len(file.graph.operators)):
        if file.code(index) == WHILE and index not in file.loops:
            try:
                file.recognised[index] = recogniser(index)
            except LimitError:
                raise
            except RnnportError as error:
                file.recognised[index] = error
    return file


def _size(source: Any, model: tfl.Model) -> int:
    """The bytes of the file read; for a decoded model, what its buffers, operators and
    tensors would take written out (about 16 bytes per index, 64 per table)."""
    if is_path(source):
        return os.path.getsize(source)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return len(source)
    return sum(len(buffer.data) for buffer in model.buffers) + sum(
        64 * (len(graph.operators) + len(graph.tensors)) +
        16 * sum(len(op.inputs) + len(op.outputs) for op in graph.operators)
        for graph in model.subgraphs)


def _indexed(model: tfl.Model, where: str, index: int) -> _File:
    """Subgraph ``index`` with its producers and readers indexed."""
    file = _File(model, where, model.subgraphs[index], index=index)
    for k, operator in enumerate(file.graph.operators):
        for tensor in operator.outputs:
            file.producer.setdefault(tensor, k)
        for tensor in operator.inputs:
            if tensor >= 0:
                file.readers.setdefault(tensor, []).append(k)
    return file


def _constants(file: _File, options: Mapping[str, Any], reading: _Reading) -> Constant:
    """What a loop body's constants are read with: :func:`_constant` on its subgraph."""
    bodies = file.subgraphs

    def constant(subgraph: int, tensor: int, what: str) -> np.ndarray:
        if subgraph == file.index:
            return _constant(file, tensor, what, options, reading)
        if subgraph not in bodies:
            bodies[subgraph] = _indexed(file.model, file.where, subgraph)
        return _constant(bodies[subgraph], tensor, what, options, reading)

    return constant


def _cell(file: _File, operator: int) -> LoopCell | None:
    """The cell a WHILE operator computes, when rnnport recognised one."""
    found = file.recognised.get(operator)
    return found if isinstance(found, LoopCell) else None


def _loops(model: tfl.Model, where: str) -> dict[int, dict[str, Any]]:
    """The WHILE loops rnnport's writer described in the ``rnnport.loops`` metadata entry
    (a JSON ``{"version": 1, "loops": [...]}``), by operator index in the main subgraph."""
    entries = [entry for entry in model.metadata if entry.name == LOOPS]
    if not entries:
        return {}
    index = entries[0].buffer
    expected = '{"version": 1, "loops": [{"operator": k, …}, …]}. The file is damaged.'
    try:
        described = jsontext.loads(model.buffers[index].data,
                                   f"{where}: the {LOOPS!r} metadata", max_depth=8)
    except jsontext.JSONTextError as error:
        raise FormatError(f"{where}: the {LOOPS!r} metadata (buffer {index}) is not the JSON "
                          f"rnnport writes ({error.problem}); expected {expected}") from None
    loops = described.get("loops") if isinstance(described, dict) else None
    if not isinstance(described, dict) or described.get("version") != 1 or \
            not isinstance(loops, list) or not all(
                isinstance(loop, dict) and type(loop.get("operator")) is int for loop in loops):
        raise FormatError(f"{where}: the {LOOPS!r} metadata (buffer {index}) holds "
                          f"{preview(described)}; expected {expected}")
    result = {loop["operator"]: loop for loop in loops}
    count = len(model.subgraphs[0].operators)
    for operator, loop in result.items():
        codes = model.subgraphs[0].operators
        if not 0 <= operator < count or model.operator_code(codes[operator]) != WHILE:
            raise FormatError(f"{where}: the {LOOPS!r} metadata describes operator {operator}; "
                              "expected a WHILE operator of the main subgraph. The file is "
                              "damaged.")
        members = loop.get("operators", [operator])
        if not isinstance(members, list) or operator not in members or \
                not all(isinstance(k, int) and 0 <= k < count for k in members):
            raise FormatError(f"{where}: the {LOOPS!r} metadata lists operators {preview(members)} "
                              f"for operator {operator}; expected main-subgraph operator "
                              "indices including the WHILE. The file is damaged.")
    return result


def _sequence(file: _File, operator: int) -> tuple[int, int]:
    """(input, output) positions of a unit op's sequence: rnnport's GRU loop values are
    ``(t, steps, x, h, y)``, a recognised loop's are where :class:`~.loops.Recogniser` found
    them; every fused op reads input 0 and writes output 0."""
    cell = _cell(file, operator)
    if cell is not None:
        return cell.sequence, cell.output
    return (2, 4) if operator in file.loops else (0, 0)


def _origin(file: _File, tensor: int) -> int:
    """The tensor ``tensor`` carries unchanged: past DEQUANTIZE and shape-keeping RESHAPE
    (memoized: a long chain of glue asked about at every step stays linear)."""
    passed = []
    for _ in range(len(file.graph.operators) + 1):  # a cycle of glue is damage
        passed.append(tensor)
        if tensor in file.origins:
            tensor = file.origins[tensor]
            break
        operator = file.producer.get(tensor)
        if operator is None or file.code(operator) not in GLUE:
            break
        inputs = file.graph.operators[operator].inputs
        if not inputs or inputs[0] < 0 or \
                file.graph.tensors[inputs[0]].shape != file.graph.tensors[tensor].shape:
            break
        tensor = inputs[0]
    else:
        raise FormatError(f"{file.where}: the operators form a cycle through tensor "
                          f"{file.tensor_name(tensor)!r}; expected a graph without cycles. The "
                          "file is damaged.")
    file.origins.update(dict.fromkeys(passed, tensor))
    return tensor


def _input(operator: tfl.Operator, position: int) -> int:
    return operator.inputs[position] if position < len(operator.inputs) else -1


# -- constants -------------------------------------------------------------------------------


@dataclass
class _Reading:
    """What reading one network found that notes() reports."""

    dequantized: list[str] = field(default_factory=list)
    remarks: list[str] = field(default_factory=list)
    # Every constant read as a parameter, once: (subgraph, tensor) →
    # (tensor name, values as float32); what explain shows as the file's arrays.
    arrays: dict[tuple[int, int], tuple[str, np.ndarray]] = field(default_factory=dict)
    size: int = 0  # the file's bytes, which the expansion limit is relative to
    # The float32 values built from stored ones (float16 widened, integers dequantized),
    # once per buffer read alike however many tensors name it, and the bytes they took.
    built: dict[tuple[Any, ...], np.ndarray] = field(default_factory=dict)
    spent: int = 0

    def widened(self, key: tuple[Any, ...], count: int, where: str,
                make: Callable[[], np.ndarray]) -> np.ndarray:
        """``make()``, once per ``key``, after charging ``count`` bytes against the
        ``expansion`` limit."""
        found = self.built.get(key)
        if found is None:
            self.spent += count
            if self.spent > budget.allowance("expansion", self.size):
                raise budget.exceeded(where, f"its constants read as float32 would take "
                                      f"{self.spent:,} bytes", "expansion", self.size,
                                      self.spent)
            found = self.built[key] = make()
        return found


def _constant(file: _File, tensor: int, what: str, options: Mapping[str, Any],
              reading: _Reading, depth: int = 0) -> np.ndarray:
    """The float32 values of constant ``tensor``, directly or through DEQUANTIZE."""
    info = file.graph.tensors[tensor]
    if len(file.model.buffers[info.buffer].data):
        if info.quantization is not None and info.quantization.quantized:
            return _dequantize(file, tensor, what, options, reading)
        array = tfl.tensor_array(file.model, tensor, subgraph=file.index)
        if array.dtype.kind != "f":
            raise FormatError(f"{file.where}: {what} (tensor {info.name!r}) is {info.type_name}; "
                              "expected float weights.")
        values = array if array.dtype == np.float32 else reading.widened(  # float16: exact
            ("float", info.buffer, info.type, info.shape), 4 * array.size, file.where,
            lambda: np.asarray(array, dtype=np.float32))
        reading.arrays.setdefault((file.index, tensor), (_named(file, info.name), values))
        return values
    operator = file.producer.get(tensor)
    if operator is not None and file.code(operator) == DEQUANTIZE and depth < 4:
        inputs = file.graph.operators[operator].inputs
        if inputs and inputs[0] >= 0:
            return _constant(file, inputs[0], what, options, reading, depth + 1)
    made = f"computed at run time by {file.label(operator)}" if operator is not None else \
        ("a variable" if info.is_variable else "a graph input or an empty buffer")
    raise UnsupportedFeatureError(
        f"{file.where}: {what} (tensor {info.name!r}) is {made}; expected a constant weight "
        "(a buffer, or a DEQUANTIZE of one), which rnnport reads.")


def _named(file: _File, name: str) -> str:
    return f"subgraphs[{file.index}]/{name}" if file.index else name


def _dequantize(file: _File, tensor: int, what: str, options: Mapping[str, Any],
                reading: _Reading) -> np.ndarray:
    info = file.graph.tensors[tensor]
    q = info.quantization
    assert q is not None
    if not options.get("dequantize"):
        raise UnsupportedFeatureError(
            f"{file.where}: {what} (tensor {info.name!r}) holds quantized {info.type_name} "
            f"weights (scale {list(q.scale)[:3]}, zero point {list(q.zero_point)[:3]}); rnnport "
            "reads weights exactly and dequantizing changes the numbers. Pass dequantize=True "
            "to read them as scale·(q − zero_point) in float32 (rnnport inspect then says so).")
    if q.details_type or not q.scale:
        raise UnsupportedFeatureError(f"{file.where}: {what} (tensor {info.name!r}) uses custom "
                                      "quantization details; expected a scale and zero point.")
    stored = tfl.tensor_array(file.model, tensor, subgraph=file.index, raw=True)
    if info.type_name not in ("INT8", "UINT8", "INT16", "INT32"):
        raise UnsupportedFeatureError(f"{file.where}: {what} (tensor {info.name!r}) is quantized "
                                      f"{info.type_name}; rnnport dequantizes INT8, UINT8, INT16 "
                                      "and INT32 weights.")
    scale = np.asarray(q.scale, dtype=np.float32)
    zero = np.asarray(q.zero_point or (0,), dtype=np.int64)
    if scale.size > 1:  # per channel, along quantized_dimension
        axis = q.quantized_dimension
        if not 0 <= axis < stored.ndim or stored.shape[axis] != scale.size or \
                zero.size not in (1, scale.size):
            raise FormatError(f"{file.where}: {what} (tensor {info.name!r}) has {scale.size} "
                              f"scales along dimension {axis} of shape {list(stored.shape)}; "
                              "expected one per channel. The file is damaged.")
        shape = [1] * stored.ndim
        shape[axis] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape if zero.size > 1 else [1])
    elif zero.size != 1:
        raise FormatError(f"{file.where}: {what} (tensor {info.name!r}): one scale but "
                          f"{zero.size} zero points; expected one. The file is damaged.")
    if _named(file, info.name) not in reading.dequantized:
        reading.dequantized.append(_named(file, info.name))
    values = reading.widened(  # the int64 differences, then the float32 values
        ("dequantized", info.buffer, info.type, info.shape, id(q)), 16 * stored.size,
        file.where, lambda: (scale * (stored.astype(np.int64) - zero).astype(np.float32)
                             ).astype(np.float32))
    reading.arrays.setdefault((file.index, tensor), (_named(file, info.name), values))
    return values


def _state(file: _File, operator: int, position: int, what: str, reading: _Reading) -> None:
    """Accept an initial-state input that starts from zeros; refuse a nonzero constant (a
    buffer, a DEQUANTIZE or FILL of one, or a resource variable's first value)."""
    tensor = _input(file.graph.operators[operator], position)
    if tensor < 0:
        return
    model = file.model
    info = file.graph.tensors[tensor]
    subgraph, stored, source, variable = file.index, tensor, "", None
    producer = file.producer.get(tensor)
    code = file.code(producer) if producer is not None else None
    inputs = file.graph.operators[producer].inputs if producer is not None else ()
    if not len(model.buffers[info.buffer].data) and code in (DEQUANTIZE, FILL) and \
            len(inputs) == (1 if code == DEQUANTIZE else 2) and inputs[-1] >= 0 and \
            len(model.buffers[file.graph.tensors[inputs[-1]].buffer].data):
        # A float16 (or quantized) constant widened at run time, or a FILL of a constant
        # (the converter's zeros for an open batch).
        stored, source = inputs[-1], "" if code == DEQUANTIZE else " (a FILL of a constant)"
    elif code == READ_VARIABLE and inputs and inputs[0] >= 0:
        variables = file.variables()
        variable = variables.handles.get((file.index, inputs[0]))
        if variable is not None and variable in variables.initial:
            subgraph, stored = variables.initial[variable]
        source = f" (resource variable {variables.describe(variable)})" if variable else \
            " (a resource variable)"
    held = model.subgraphs[subgraph].tensors[stored]
    if len(model.buffers[held.buffer].data):
        if held.quantization is not None and held.quantization.quantized:
            zero = np.asarray(held.quantization.zero_point or (0,), dtype=np.int64).reshape(-1)
            raw = tfl.tensor_array(model, stored, subgraph=subgraph, raw=True)
            if zero.size != 1 and (raw.ndim == 0 or zero.size != raw.shape[-1]):
                raise FormatError(f"{file.where}: {file.label(operator)}: the initial {what} "
                                  f"(tensor {held.name!r}) has {zero.size} zero points for "
                                  f"shape {list(raw.shape)}; expected one, or one per unit. "
                                  "The file is damaged.")
            values = raw.astype(np.int64) - zero
        else:
            values = tfl.tensor_array(model, stored, subgraph=subgraph)
        if np.any(values != 0):
            raise UnsupportedFeatureError(
                f"{file.where}: {file.label(operator)}: the initial {what} (input {position}, "
                f"tensor {held.name!r}{source}) is a nonzero constant; the canonical network "
                "starts from zeros and takes an initial state per call instead "
                "(model.forward(x, state=...)). Nothing was read.")
        if variable is None:
            return
    if variable is not None:
        again = " and assigns again after each invocation (a stateful layer: LiteRT carries " \
            "the state from one invocation to the next)" if variable in \
            file.variables().assigned else ""
        first = "zeros at first" if variable in file.variables().initial else \
            "no value until something assigns it"
        reading.remarks.append(
            f"{file.label(operator)} takes its initial {what} from resource variable "
            f"{file.variables().names.get(variable, variable[1])!r} ({first}), which the file "
            f"reads at run time{again}; the canonical network starts each forward() from "
            "zeros unless forward(x, state=...) is given one.")
    elif info.is_variable:
        reading.remarks.append(
            f"{file.label(operator)} keeps its state in variable tensors that LiteRT carries "
            "from one invocation to the next (zeros after allocation); the canonical network "
            "starts each forward() from zeros.")
    elif tensor in file.producer or tensor in file.graph.inputs:
        reading.remarks.append(
            f"{file.label(operator)} takes its initial {what} from tensor {info.name!r}{source} "
            "at run time; the canonical network starts from zeros unless forward(x, state=...) "
            "is given one.")


# -- one direction of one op ---------------------------------------------------------------


@dataclass
class _Direction:
    """One direction's canonical parameters and the Spec fields it implies."""

    params: dict[str, np.ndarray]
    fields: dict[str, Any]


def _checked(array: np.ndarray, shape: tuple[int, ...], what: str, file: _File,
             operator: int) -> np.ndarray:
    if array.shape != shape:
        raise FormatError(f"{file.where}: {file.label(operator)}: {what} has shape "
                          f"{list(array.shape)}; expected {list(shape)} (from the forget gate's "
                          "input weights). The file is damaged.")
    return array


def _lstm_direction(file: _File, operator: int, slots: Mapping[str, int],
                    options: Mapping[str, Any], reading: _Reading) -> _Direction:
    """An LSTM direction whose inputs sit at ``slots`` (LSTM_INPUTS name → input position).

    TFLite: per-gate (H, I) and (H, H_out) weights, (H,) biases, gates i f c o (canonical
    i f g o). Canonical: weight_ih (4H, I) rows i f g o, bias_ih (4H,) and bias_hh zeros
    (TFLite stores one bias). CIFG (no input gate): TFLite computes i = 1 − f, the
    canonical input_forget f = 1 − i; the forget gate's weights go into the canonical input
    gate negated, since σ(−a) = 1 − σ(a), and the canonical forget slot holds zeros.
    """
    op = file.graph.operators[operator]
    label = file.label(operator)

    def tensor(name: str) -> int:
        return _input(op, slots[name]) if name in slots else -1

    def get(name: str) -> np.ndarray:
        index = tensor(name)
        if index < 0:
            raise FormatError(f"{file.where}: {label}: input {slots[name]} ({name}) is left out; "
                              "expected a constant. The file is damaged.")
        return _constant(file, index, f"{label} input {slots[name]} ({name})", options, reading)

    forget = get("input_to_forget_weights")
    if forget.ndim != 2:
        raise FormatError(f"{file.where}: {label}: input_to_forget_weights has shape "
                          f"{list(forget.shape)}; expected (hidden, input).")
    hidden, inputs = forget.shape
    recurrent_forget = get("recurrent_to_forget_weights")
    if recurrent_forget.ndim != 2 or recurrent_forget.shape[0] != hidden:
        raise FormatError(f"{file.where}: {label}: recurrent_to_forget_weights has shape "
                          f"{list(recurrent_forget.shape)}; expected ({hidden}, output).")
    out = recurrent_forget.shape[1]
    cifg = tensor("input_to_input_weights") < 0
    if cifg != (tensor("recurrent_to_input_weights") < 0):
        raise FormatError(f"{file.where}: {label}: only one of input_to_input_weights and "
                          "recurrent_to_input_weights is given; expected both (or neither: CIFG).")
    gates = {}
    for gate, letter in (("input", "i"), ("forget", "f"), ("cell", "g"), ("output", "o")):
        if gate == "input" and cifg:
            continue
        gates[letter] = (
            _checked(get(f"input_to_{gate}_weights"), (hidden, inputs), f"input_to_{gate}_weights",
                     file, operator),
            _checked(get(f"recurrent_to_{gate}_weights"), (hidden, out),
                     f"recurrent_to_{gate}_weights", file, operator),
            _checked(get(f"{gate}_gate_bias"), (hidden,), f"{gate}_gate_bias", file, operator))
    peephole_names = ("cell_to_input_weights", "cell_to_forget_weights", "cell_to_output_weights")
    present = [tensor(name) >= 0 for name in peephole_names]
    peepholes = present[1] or present[2]
    if peepholes and not (present[1] and present[2] and (present[0] or cifg)):
        raise FormatError(f"{file.where}: {label}: peephole weights only for some gates "
                          f"({', '.join(n for n, p in zip(peephole_names, present, strict=True) if p)}"
                          "); expected all of them (the input gate's left out under CIFG).")
    peephole = {letter: _checked(get(name), (hidden,), name, file, operator)
                for letter, name, given in zip("ifo", peephole_names, present, strict=True)
                if given and peepholes and not (cifg and letter == "i")}
    norms = {letter: tensor(f"{gate}_layer_norm_coefficients") >= 0
             for gate, letter in (("input", "i"), ("forget", "f"), ("cell", "g"), ("output", "o"))}
    layer_norm = any(norms.values())
    if layer_norm and not all(given for letter, given in norms.items() if letter != "i" or
                              not cifg):
        missing = [letter for letter, given in norms.items() if not given]
        raise FormatError(f"{file.where}: {label}: layer-norm coefficients for some gates only "
                          f"(none for {', '.join(missing)}); expected all of them (the input "
                          "gate's left out under CIFG).")
    norm = {letter: _checked(get(f"{gate}_layer_norm_coefficients"), (hidden,),
                             f"{gate}_layer_norm_coefficients", file, operator)
            for gate, letter in (("input", "i"), ("forget", "f"), ("cell", "g"), ("output", "o"))
            if layer_norm and norms[letter] and not (cifg and letter == "i")}
    if cifg:
        if layer_norm:  # LN(−a)·k − b = −(LN(a)·k + b): the negated gate keeps k
            norm["i"], norm["f"] = norm["f"], np.zeros_like(norm["f"])
        w_f, r_f, b_f = gates["f"]
        zero_w, zero_r, zero_b = (np.zeros_like(w_f), np.zeros_like(r_f), np.zeros_like(b_f))
        gates["i"] = (-w_f, -r_f, -b_f)
        gates["f"] = (zero_w, zero_r, zero_b)
        if peepholes:
            peephole["i"] = -peephole["f"]
            peephole["f"] = np.zeros_like(peephole["f"])
        reading.remarks.append(
            f"{label} is CIFG (no input gate: LiteRT computes i = 1 − f); the canonical "
            "input_forget LSTM computes f = 1 − i, so the forget gate's weights, biases "
            "and peephole are held negated in the canonical input gate (σ(−a) = 1 − σ(a)) and "
            "the canonical forget gate's are zeros, unused.")
    order = "ifgo"
    params = {
        "weight_ih": np.concatenate([gates[g][0] for g in order]),
        "weight_hh": np.concatenate([gates[g][1] for g in order]),
        "bias_ih": np.concatenate([gates[g][2] for g in order]),
        "bias_hh": np.zeros(4 * hidden, dtype=np.float32),
    }
    proj_size = 0
    if tensor("projection_weights") >= 0:
        params["weight_hr"] = _checked(get("projection_weights"), (out, hidden),
                                       "projection_weights", file, operator)
        proj_size = out
        if tensor("projection_bias") >= 0:
            params["bias_hr"] = _checked(get("projection_bias"), (out,), "projection_bias",
                                         file, operator)
    elif out != hidden:
        raise FormatError(f"{file.where}: {label}: recurrent weights ({hidden}, {out}) without "
                          "projection_weights; expected (hidden, hidden).")
    if peepholes:
        params["weight_peephole"] = np.stack([peephole[g] for g in "ifo"])
    if layer_norm:
        params["weight_ln"] = np.stack([norm[g] for g in "ifgo"])
    return _Direction(params, {"cell": "lstm", "input_size": inputs, "hidden_size": hidden,
                               "proj_size": proj_size, "peepholes": peepholes,
                               "input_forget": cifg, "layer_norm": layer_norm,
                               "proj_bias": "bias_hr" in params})


def _rnn_direction(file: _File, operator: int, positions: tuple[int, int, int],
                   options: Mapping[str, Any], reading: _Reading) -> _Direction:
    """An RNN direction: input weights (H, I), recurrent (H, H), one bias (H,) at
    ``positions``; canonical weight_ih, weight_hh, bias_ih and bias_hh zeros."""
    op = file.graph.operators[operator]
    label = file.label(operator)
    arrays = []
    for position, name in zip(positions, ("input weights", "recurrent weights", "bias"),
                              strict=True):
        index = _input(op, position)
        if index < 0:
            raise FormatError(f"{file.where}: {label}: input {position} ({name}) is left out; "
                              "expected a constant. The file is damaged.")
        arrays.append(_constant(file, index, f"{label} input {position} ({name})", options,
                                reading))
    weights, recurrent, bias = arrays
    if weights.ndim != 2:
        raise FormatError(f"{file.where}: {label}: input weights have shape "
                          f"{list(weights.shape)}; expected (hidden, input).")
    hidden, inputs = weights.shape
    _checked(recurrent, (hidden, hidden), "recurrent weights", file, operator)
    _checked(bias, (hidden,), "bias", file, operator)
    return _Direction({"weight_ih": weights, "weight_hh": recurrent, "bias_ih": bias,
                       "bias_hh": np.zeros(hidden, dtype=np.float32)},
                      {"input_size": inputs, "hidden_size": hidden})


def _lstm_options(file: _File, operator: int) -> dict[str, Any]:
    """The Spec fields an LSTM op's options give: cell_clip and activations (others refused)."""
    options = file.graph.operators[operator].builtin_options
    label = file.label(operator)
    expected: type[tfl.UnidirectionalSequenceLSTMOptions | tfl.BidirectionalSequenceLSTMOptions
                   | tfl.LSTMOptions] = {
        tfl.UNIDIRECTIONAL_SEQUENCE_LSTM: tfl.UnidirectionalSequenceLSTMOptions,
        tfl.BIDIRECTIONAL_SEQUENCE_LSTM: tfl.BidirectionalSequenceLSTMOptions,
                tfl.LSTM: tfl.LSTMOptions}[file.code(operator)]
    if options is None:
        options = expected()
    if not isinstance(options, (tfl.UnidirectionalSequenceLSTMOptions,
                                tfl.BidirectionalSequenceLSTMOptions, tfl.LSTMOptions)) or \
            not isinstance(options, expected):
        raise FormatError(f"{file.where}: {label}: builtin options of union type "
                          f"{file.graph.operators[operator].builtin_options_type}; expected "
                          f"{expected.__name__}. The file is damaged.")
    if isinstance(options, tfl.LSTMOptions) and options.kernel_type != 0:
        raise UnsupportedFeatureError(
            f"{file.where}: {label}: kernel_type BASIC (the 4-input LSTM with one concatenated "
            "weight matrix and a fixed cell clip of 8 bits); rnnport reads the FULL kernel. "
            "Nothing was read.")
    if isinstance(options, tfl.UnidirectionalSequenceLSTMOptions) and \
            options.diagonal_recurrent_tensors:
        raise UnsupportedFeatureError(
            f"{file.where}: {label}: diagonal_recurrent_tensors (the recurrent weights are "
            "diagonals: h's units do not mix); the canonical LSTM has full recurrent matrices. "
            "Nothing was read.")
    if options.proj_clip > 0:
        raise UnsupportedFeatureError(
            f"{file.where}: {label}: proj_clip={options.proj_clip:g} (the projected output is "
            "clipped); the canonical LSTM has no projection clip, so the numbers would change. "
            "Nothing was read.")
    activation = options.fused_activation_function
    if activation not in LSTM_ACTIVATIONS:
        name = tfl.ACTIVATIONS.get(activation, str(activation))
        raise UnsupportedFeatureError(
            f"{file.where}: {label}: fused activation {name}; the canonical LSTM applies TANH "
            "or RELU as the candidate and output activations (NONE leaves LiteRT's output "
            "undefined; RELU_N1_TO_1, RELU6 and SIGN_BIT have no canonical equivalent). "
            "Nothing was read.")
    return {"cell_clip": float(options.cell_clip) if options.cell_clip > 0 else None,
            "activations": LSTM_ACTIVATIONS[activation]}


def _rnn_cell(file: _File, operator: int) -> str:
    options = file.graph.operators[operator].builtin_options
    activation = getattr(options, "fused_activation_function", 0)
    if activation not in RNN_CELLS:
        name = tfl.ACTIVATIONS.get(activation, str(activation))
        raise UnsupportedFeatureError(
            f"{file.where}: {file.label(operator)}: fused activation {name}; the canonical "
            "simple RNN is rnn_tanh (TANH) or rnn_relu (RELU). Nothing was read.")
    return RNN_CELLS[activation]


def _time_major(file: _File, operator: int) -> bool:
    if operator in file.loop_time_major:
        return file.loop_time_major[operator]
    if file.code(operator) in STEP_OPS:
        return False
    return bool(getattr(file.graph.operators[operator].builtin_options, "time_major",
                        file.code(operator) == tfl.BIDIRECTIONAL_SEQUENCE_LSTM))


def _one_direction(file: _File, operator: int, options: Mapping[str, Any],
                   reading: _Reading) -> _Direction:
    """A unidirectional op's (or one-step op's) direction, with its Spec fields."""
    code = file.code(operator)
    if operator in file.loops:
        return _loop_direction(file, operator, reading)
    cell = _cell(file, operator)
    if cell is not None:
        # The body was evaluated at load with quantized weights dequantized; its constants,
        # read again in the same order with this read's options, refuse quantized ones as
        # evaluating it again would, and record what was read.
        constant = _constants(file, options, reading)
        for subgraph, tensor, what in cell.reads:
            constant(subgraph, tensor, what)
        reading.remarks.extend(cell.remarks)
        for position, what in zip(cell.states, ("state h", "cell state c"), strict=False):
            _state(file, operator, position, what, reading)
        return _Direction(cell.params, cell.fields)
    if code in LSTM_OPS:
        fields = _lstm_options(file, operator)
        direction = _lstm_direction(file, operator, {n: k for k, n in enumerate(tfl.LSTM_INPUTS)},
                                    options, reading)
        _state(file, operator, 18, "output state h", reading)
        _state(file, operator, 19, "cell state c", reading)
    else:
        fields = {"cell": _rnn_cell(file, operator)}
        direction = _rnn_direction(file, operator, (1, 2, 3), options, reading)
        _state(file, operator, 4, "hidden state h", reading)
    direction.fields.update(fields)
    return direction


def _loop_direction(file: _File, operator: int, reading: _Reading) -> _Direction:
    """A GRU WHILE loop rnnport's writer described (``rnnport.loops``): its body's weight
    tensors, checked against the described sizes. The body keeps both canonical biases; a
    reset-before GRU's ``weight_hh`` (and ``bias_hh``) is two tensors, rows r z then n."""
    loop = file.loops[operator]
    label = file.label(operator)
    hidden, inputs, body = loop.get("hidden_size"), loop.get("input_size"), loop.get("body")
    reset_after, bias = loop.get("reset_after"), loop.get("bias")
    sizes = [v for v in (hidden, inputs, body)
             if isinstance(v, int) and not isinstance(v, bool) and v > 0]
    if loop.get("cell") != "gru" or len(sizes) != 3 or sizes[2] >= len(file.model.subgraphs) \
            or not isinstance(reset_after, bool) or not isinstance(bias, bool) or \
            not isinstance(loop.get("tensors"), dict):
        described = ", ".join(f"{preview(k)}: {preview(v)}" for k, v in list(loop.items())[:12]
                              if k != "tensors")
        raise FormatError(f"{file.where}: {label}: the {LOOPS!r} metadata describes it as "
                          f"{{{described}}}; expected a "
                          "GRU (cell, positive hidden_size, input_size and body subgraph, "
                          "reset_after and bias flags, tensors). The file is damaged.")
    assert isinstance(hidden, int) and isinstance(inputs, int) and isinstance(body, int)
    source = file.graph.operators[operator].inputs[2]
    if file.graph.tensors[source].shape[-1:] != (inputs,):
        raise FormatError(f"{file.where}: {label}: its input {file.tensor_name(source)!r} has "
                          f"shape {list(file.graph.tensors[source].shape)}; expected "
                          f"(batch, time, {inputs}) as the loop's description says. The file "
                          "is damaged.")
    rows = [3 * hidden] if reset_after else [2 * hidden, hidden]
    expected: dict[str, list[tuple[int, ...]]] = {
        "weight_ih": [(3 * hidden, inputs)], "weight_hh": [(k, hidden) for k in rows]}
    if bias:
        expected.update(bias_ih=[(3 * hidden,)], bias_hh=[(k,) for k in rows])
    graph = file.model.subgraphs[body]
    params = {}
    for name, shapes in expected.items():
        tensors = loop["tensors"].get(name)
        if not isinstance(tensors, list) or len(tensors) != len(shapes) or \
                not all(isinstance(t, int) and 0 <= t < len(graph.tensors) for t in tensors):
            raise FormatError(f"{file.where}: {label}: the {LOOPS!r} metadata gives {name} as "
                              f"tensors {preview(tensors)}; expected {len(shapes)} tensor index(es) of "
                              f"subgraph {body}. The file is damaged.")
        pieces = []
        for tensor, shape in zip(tensors, shapes, strict=True):
            array = tfl.tensor_array(file.model, tensor, subgraph=body)
            if array.shape != shape or array.dtype != np.float32:
                raise FormatError(
                    f"{file.where}: {label}: {name} (subgraph {body} tensor "
                    f"{graph.tensors[tensor].name!r}) is {array.dtype} {list(array.shape)}; "
                    f"expected float32 {list(shape)} (a GRU of hidden size {hidden}, input "
                    f"size {inputs}). The file is damaged.")
            pieces.append(array)
            reading.arrays.setdefault(
                (body, tensor), (f"subgraphs[{body}]/{graph.tensors[tensor].name}", array))
        params[name] = np.concatenate(pieces, axis=0)
    return _Direction(params, {"cell": "gru", "input_size": inputs, "hidden_size": hidden,
                               "reset_after": reset_after, "bias": bias})


def _bidirectional_op(file: _File, operator: int, options: Mapping[str, Any],
                      reading: _Reading) -> list[_Direction]:
    op = file.graph.operators[operator]
    label = file.label(operator)
    code = file.code(operator)
    aux = BI_LSTM_AUX if code == tfl.BIDIRECTIONAL_SEQUENCE_LSTM else BI_RNN_AUX
    given = [position for position in aux if _input(op, position) >= 0]
    if given:
        raise UnsupportedFeatureError(
            f"{file.where}: {label}: an auxiliary input (inputs {', '.join(map(str, given))}: "
            "a second input sequence, or the stacked layers' cross-linked form); the canonical "
            "bidirectional layer reads one input. Nothing was read.")
    directions = []
    if code == tfl.BIDIRECTIONAL_SEQUENCE_LSTM:
        fields = _lstm_options(file, operator)
        for index, name in enumerate(("forward", "backward")):
            slots = {n: 17 * index + k for k, n in enumerate(tfl.LSTM_INPUTS[1:18], start=1)}
            direction = _lstm_direction(file, operator, slots, options, reading)
            direction.fields.update(fields)
            _state(file, operator, BI_LSTM_STATES[index][0], f"{name} output state h", reading)
            _state(file, operator, BI_LSTM_STATES[index][1], f"{name} cell state c", reading)
            directions.append(direction)
    else:
        cell = _rnn_cell(file, operator)
        for index, name in enumerate(("forward", "backward")):
            base = 1 + 4 * index
            direction = _rnn_direction(file, operator, (base, base + 1, base + 2), options,
                                       reading)
            direction.fields["cell"] = cell
            _state(file, operator, base + 3, f"{name} hidden state h", reading)
            directions.append(direction)
    return directions


# -- units and networks ------------------------------------------------------------------------


@dataclass
class _Unit:
    """One layer: a recurrent op, a reversed op (REVERSE_V2 → op → REVERSE_V2), the
    converter's Bidirectional pattern, or a fused bidirectional op."""

    recurrent: tuple[int, ...]  # the recurrent ops: forward first
    operators: tuple[int, ...]  # every op the unit consists of
    input: int  # the tensor it reads (its origin)
    output: int  # the tensor it writes (-1: two outputs kept apart)
    reverse: bool = False  # one direction, run backwards (outputs in time order)
    bidirectional: bool = False
    notes: tuple[str, ...] = ()  # what reading the unit tells the reader
    backwards: str = ""  # a reverse loop whose outputs the file keeps in reversed order: how
    problem: str = ""  # why reading it is refused
    merged: str = ""  # one direction of a Bidirectional whose outputs are not concatenated


def _integers(file: _File, operator: int) -> list[int] | None:
    """The integer constant an operator with one output takes as its second input (a
    REVERSE_V2's axes, a TRANSPOSE's permutation), else None."""
    op = file.graph.operators[operator]
    if len(op.inputs) != 2 or op.inputs[1] < 0 or len(op.outputs) != 1:
        return None
    info = file.graph.tensors[op.inputs[1]]
    if not len(file.model.buffers[info.buffer].data) or info.type_name not in ("INT32", "INT64"):
        return None
    try:
        return [int(v) for v in tfl.tensor_array(file.model, op.inputs[1]).reshape(-1)]
    except RnnportError:
        return None


def _reverse_axis(file: _File, operator: int) -> int | None:
    """The one axis a REVERSE_V2 reverses (a constant), else None."""
    axes = _integers(file, operator)
    rank = len(file.graph.tensors[file.graph.operators[operator].outputs[0]].shape)
    if axes is None or len(axes) != 1 or not -rank <= axes[0] < rank:
        return None
    return axes[0] % rank


def _reversed_around(file: _File, operator: int) -> tuple[int, int, tuple[int, int]] | None:
    """(input, output, the two REVERSE_V2 ops) when ``operator`` reads a REVERSE_V2 of its
    input on the time axis and only a REVERSE_V2 on the time axis reads its output."""
    op = file.graph.operators[operator]
    time_axis = 0 if _time_major(file, operator) else 1
    at_input, at_output = _sequence(file, operator)
    before = file.producer.get(_origin(file, op.inputs[at_input])) \
        if len(op.inputs) > at_input and op.inputs[at_input] >= 0 else None
    if before is None or file.code(before) != REVERSE_V2 or \
            _reverse_axis(file, before) != time_axis or \
            len(op.outputs) != (5 if operator in file.loops else 1):
        return None
    after = file.readers.get(op.outputs[at_output], [])
    if len(after) != 1 or file.code(after[0]) != REVERSE_V2 or \
            _reverse_axis(file, after[0]) != time_axis or \
            file.graph.operators[after[0]].inputs[0] != op.outputs[at_output]:
        return None
    source = file.graph.operators[before].inputs[0]
    return _origin(file, source), file.graph.operators[after[0]].outputs[0], (before, after[0])


def _last_axis_concat(file: _File, operator: int, inputs: tuple[int, ...]) -> bool:
    """Whether CONCATENATION ``operator`` joins ``inputs`` along their last axis (from the
    static shapes: the options table is not decoded)."""
    op = file.graph.operators[operator]
    if len(op.inputs) != len(inputs) or len(op.outputs) != 1:
        return False
    shapes = [file.graph.tensors[t].shape for t in op.inputs]
    result = file.graph.tensors[op.outputs[0]].shape
    if any(len(shape) != len(result) or not shape for shape in shapes) or \
            [_origin(file, t) for t in op.inputs] != list(inputs):
        return False
    return all(shape[:-1] == result[:-1] for shape in shapes) and \
        sum(shape[-1] for shape in shapes) == result[-1]


def _transposed(file: _File, operator: int | None) -> bool:
    """Whether ``operator`` is a TRANSPOSE swapping the first two of three axes."""
    return operator is not None and file.code(operator) == TRANSPOSE and \
        _integers(file, operator) == [1, 0, 2]


def _swaps_batch_and_time(file: _File, operator: int | None) -> bool:
    """Whether ``operator`` turns a sequence batch-major ↔ time-major: a TRANSPOSE of the
    first two of three axes, or (batch 1) a RESHAPE between (1, T, I) and (T, 1, I)."""
    if operator is None:
        return False
    if file.code(operator) == TRANSPOSE:
        return _integers(file, operator) == [1, 0, 2]
    op = file.graph.operators[operator]
    if file.code(operator) != RESHAPE or not op.inputs or op.inputs[0] < 0 or \
            len(op.outputs) != 1:
        return False
    before = file.graph.tensors[op.inputs[0]].signature
    after = file.graph.tensors[op.outputs[0]].signature
    return len(before) == 3 and len(after) == 3 and 1 in (before[0], before[1]) and \
        (before[1], before[0], before[2]) == after


def _loop_unit(file: _File, operator: int, cell: LoopCell) -> _Unit:
    """A recognised loop's unit: the converter reverses a backward direction's sequence
    (REVERSE_V2 on its time axis) and turns a batch-major sequence time-major (TRANSPOSE,
    or RESHAPE for batch 1) in front of the loop, and undoes both behind it. Between two
    loops it leaves the sequence time-major: the next loop reads the output as it is. With
    SELECT_TF_OPS the output is a TensorList, stacked (FlexTensorListStack) behind the loop
    into a time-major sequence. The operators computing only the loop's initial states and
    list (zeros of the input's batch: SHAPE, STRIDED_SLICE, PACK, FILL; the list's
    FlexTensorListReserve) belong to the unit."""
    op = file.graph.operators[operator]
    members = [operator]
    notes: list[str] = []
    tensor, reverse = op.inputs[cell.sequence], False
    before = file.producer.get(tensor)
    if before is not None and file.code(before) == REVERSE_V2 and \
            _reverse_axis(file, before) == cell.time_axis:
        members.append(before)
        tensor, reverse = file.graph.operators[before].inputs[0], True
    before = file.producer.get(tensor)
    time_major = cell.time_axis == 0
    if time_major and _swaps_batch_and_time(file, before):
        assert before is not None
        members.append(before)
        tensor, time_major = file.graph.operators[before].inputs[0], False
    if reverse:
        tensor, reverse, flipped = _flipped_before(file, operator, cell, tensor, time_major,
                                                   members)
        if flipped:
            notes.append(f"{file.label(operator)} reads tensor {file.tensor_name(tensor)!r} "
                         "reversed in time twice on the way (a time flip before the layer, "
                         "such as Lambda(ops.flip), and its go_backwards=True cancel): the "
                         "network runs forward over that tensor, and its y is in that tensor's "
                         "time order.")
    file.loop_time_major[operator] = time_major
    members.extend(_only_feeding(file, [t for k, t in enumerate(op.inputs)
                                        if k != cell.sequence], members))
    if cell.output < 0:
        return _Unit((operator,), tuple(sorted(members)), _origin(file, tensor), -1,
                     reverse=reverse, notes=(
                         *notes, f"{file.label(operator)} gives its final state alone (the "
                         "converter dropped the output sequence nothing read: an encoder's "
                         "return_state); no tensor of the file holds the network's y."))
    output = op.outputs[cell.output]
    output_major = cell.time_axis == 0
    if cell.listed:
        stacks = file.readers.get(output, [])
        if len(stacks) != 1 or file.op_name(stacks[0]) != "FlexTensorListStack" or \
                len(file.graph.tensors[file.graph.operators[stacks[0]].outputs[0]].shape) != 3:
            notes.append(f"{file.label(operator)} keeps its outputs in a TensorList that "
                         f"{listed(file.label(k) for k in stacks) or 'nothing'} reads, not "
                         "stacked into one tensor by a FlexTensorListStack alone; no tensor of "
                         "the file holds the network's y.")
            return _Unit((operator,), tuple(sorted(members)), _origin(file, tensor), -1,
                         reverse=reverse, notes=tuple(notes))
        members.append(stacks[0])
        if cell.listed == "last step":  # return_sequences=False: the last step alone
            return _Unit((operator,), tuple(sorted(members)), _origin(file, tensor), -1,
                         reverse=reverse, backwards=LAST_STEP if reverse else "")
        output, output_major = file.graph.operators[stacks[0]].outputs[0], True
    steps = file.graph.tensors[op.inputs[cell.sequence]].signature[cell.time_axis]
    kept = file.graph.tensors[output].signature[0 if cell.listed else cell.time_axis]
    if steps is not None and kept is not None and kept != steps:
        # The converter keeps only what a return_sequences=False layer returns.
        return _Unit((operator,), tuple(sorted(members)), _origin(file, tensor), -1,
                     reverse=reverse, backwards=LAST_STEP if reverse else "")
    undone = not reverse  # the time order put back (the converter: TRANSPOSE, then REVERSE)
    for _ in range(2):
        after = file.readers.get(output, [])
        if len(after) != 1:
            break
        if output_major and _swaps_batch_and_time(file, after[0]):
            output_major = False
        elif not undone and file.code(after[0]) == REVERSE_V2 and \
                _reverse_axis(file, after[0]) == (0 if output_major else 1):
            undone = True
        else:
            break
        members.append(after[0])
        output = file.graph.operators[after[0]].outputs[0]
    if not undone:
        notes.append(f"{file.label(operator)} runs backwards (go_backwards) and the file "
                     "keeps its outputs in that reversed order; the canonical reverse network "
                     "gives y in time order (flip it on the time axis to compare).")
        output = -1
    file.loop_output_major[operator] = output_major
    return _Unit((operator,), tuple(sorted(members)), _origin(file, tensor), output,
                 reverse=reverse, notes=tuple(notes),
                 backwards="" if undone else "its outputs in that reversed order")


def _flipped_before(file: _File, operator: int, cell: LoopCell, tensor: int, time_major: bool,
                    members: list[int]) -> tuple[int, bool, bool]:
    """(the sequence, whether the loop reads it reversed, whether a flip was undone): a
    reversed loop whose sequence was itself reversed on the time axis just before, on a path
    no other operator reads from (``Lambda(ops.flip)`` before a ``go_backwards=True`` layer),
    reads the tensor before that flip in its own order."""
    before = file.producer.get(tensor)
    passed = [file.graph.operators[operator].inputs[cell.sequence]]
    passed.extend(file.graph.operators[k].outputs[0] for k in members[1:])
    if before is None or file.code(before) != REVERSE_V2 or \
            _reverse_axis(file, before) != (0 if time_major else 1) or \
            any(len(file.readers.get(t, [])) != 1 for t in (*passed, tensor)):
        return tensor, True, False
    members.append(before)
    return file.graph.operators[before].inputs[0], False, True


def _only_feeding(file: _File, tensors: list[int], members: list[int]) -> list[int]:
    """The operators that compute ``tensors`` and whose outputs nothing but ``members`` and
    these operators reads (and no graph output is), recurrent ones excepted (an encoder's
    final state is another network). An operator read by two others is found once both are
    (a few passes: the converter's chains are short)."""
    found, added = set(members), list[int]()
    for _ in range(4):
        pending, before = [file.producer.get(t) for t in tensors], len(added)
        while pending:
            k = pending.pop()
            if k is None or (k in found and k not in added):
                continue
            outputs = file.graph.operators[k].outputs
            if k not in found:
                if not outputs or file.code(k) in RECURRENT or file.code(k) == WHILE or any(
                        t in file.graph.outputs or
                        any(r not in found for r in file.readers.get(t, [])) for t in outputs):
                    continue
                found.add(k)
                added.append(k)
            pending.extend(file.producer.get(t) for t in file.graph.operators[k].inputs
                           if t >= 0 and file.producer.get(t) not in added)
        if len(added) == before:
            break
    return added


def _units(file: _File) -> list[_Unit]:
    recurrent = [index for index, op in enumerate(file.graph.operators)
                 if file.code(index) in RECURRENT or index in file.loops]
    singles: list[_Unit] = []
    units: list[_Unit] = []
    for index, cell in file.recognised.items():
        if isinstance(cell, LoopCell):
            singles.append(_loop_unit(file, index, cell))
    for index in recurrent:
        op = file.graph.operators[index]
        at_input, at_output = _sequence(file, index)
        if len(op.inputs) <= at_input or op.inputs[at_input] < 0 or len(op.outputs) <= at_output:
            raise FormatError(f"{file.where}: {file.label(index)} has no input or output "
                              "tensor; expected both. The file is damaged.")
        if file.code(index) in (tfl.BIDIRECTIONAL_SEQUENCE_LSTM, tfl.BIDIRECTIONAL_SEQUENCE_RNN):
            output = op.outputs[0] if len(op.outputs) == 1 else -1
            operators: tuple[int, ...] = (index,)
            if output < 0:
                pair = tuple(op.outputs[:2])
                joins = [k for k in file.readers.get(pair[0], [])
                         if file.code(k) == CONCATENATION and _last_axis_concat(file, k, pair)]
                if joins:
                    output, operators = file.graph.operators[joins[0]].outputs[0], (index,
                                                                                     joins[0])
            units.append(_Unit((index,), operators, _origin(file, op.inputs[0]), output,
                               bidirectional=True))
            continue
        around = _reversed_around(file, index)
        members = tuple(file.loops[index].get("operators", [index])) if index in file.loops \
            else (index,)
        if around is not None:
            source, output, (before, after) = around
            singles.append(_Unit((index,), (before, *members, after), source, output,
                                 reverse=True))
        else:
            singles.append(_Unit((index,), members, _origin(file, op.inputs[at_input]),
                                 op.outputs[at_output]))
    # The converter's Bidirectional: CONCATENATION(forward, reversed) on the last axis.
    by_output = {unit.output: unit for unit in singles}
    paired: set[int] = set()
    for index in range(len(file.graph.operators)):
        if file.code(index) != CONCATENATION:
            continue
        op = file.graph.operators[index]
        if len(op.inputs) != 2:
            continue
        first = by_output.get(_origin(file, op.inputs[0]))
        second = by_output.get(_origin(file, op.inputs[1]))
        if first is None or second is None:
            continue
        forward, backward = first, second
        if forward.reverse or not backward.reverse or forward.input != backward.input or \
                (file.code(forward.recurrent[0]) in LSTM_OPS) != \
                (file.code(backward.recurrent[0]) in LSTM_OPS) or \
                file.code(forward.recurrent[0]) in STEP_OPS or \
                _time_major(file, forward.recurrent[0]) != \
                _time_major(file, backward.recurrent[0]) or \
                not _last_axis_concat(file, index, (forward.output, backward.output)) or \
                id(forward) in paired or id(backward) in paired:
            continue
        paired.update((id(forward), id(backward)))
        units.append(_Unit((forward.recurrent[0], backward.recurrent[0]),
                           (*forward.operators, *backward.operators, index), forward.input,
                           op.outputs[0], bidirectional=True))
    alone = [unit for unit in singles if id(unit) not in paired]
    _merges(file, alone)
    for unit in alone:
        # A Bidirectional's backward direction puts its outputs back in time order, or (with
        # return_sequences=False) keeps its last step beside the forward direction's.
        if unit.backwards == LAST_STEP and any(
                other.input == unit.input and not other.reverse and other.output < 0
                for other in alone):
            unit.notes = (*unit.notes, (
                f"{file.label(unit.recurrent[0])} runs backwards beside a forward loop over "
                "the same input, whose last steps alone the file keeps (a Bidirectional layer "
                "with return_sequences=False): this direction's is the state at time 0, y[:, 0] "
                "of the reverse network."))
        elif unit.backwards:
            unit.problem = (
                f"{file.where}: {file.label(unit.recurrent[0])}: go_backwards=True outside a "
                "Bidirectional layer: the loop runs over the sequence reversed in time and the "
                f"file keeps {unit.backwards}, which no other format does. Nothing was read. "
                "Reverse the time axis of x yourself and convert a layer built with "
                "go_backwards=False.")
    units.extend(alone)
    return sorted(units, key=lambda unit: min(unit.operators))


def _merges(file: _File, singles: list[_Unit]) -> None:
    """Name the merge of a Bidirectional layer's directions that the converter joins other
    than by CONCATENATION (merge_mode 'sum': ADD, 'ave': ADD then MUL by 0.5 or DIV by 2,
    'mul': MUL) in both units' ``merged`` and ``notes``."""
    by_output = {unit.output: unit for unit in singles if unit.output >= 0}
    for index in range(len(file.graph.operators)):
        if file.code(index) not in MERGES:
            continue
        op = file.graph.operators[index]
        pair = [unit for t in op.inputs[:2] if (unit := by_output.get(_origin(file, t)))] \
            if len(op.inputs) == 2 else []
        if len(pair) != 2:
            continue
        forward, backward = sorted(pair, key=lambda unit: unit.reverse)
        if forward.reverse or not backward.reverse or forward.input != backward.input or \
                forward.merged or backward.merged:
            continue
        mode = MERGES[file.code(index)]
        after = file.readers.get(op.outputs[0], []) if len(op.outputs) == 1 else []
        if mode == "sum" and len(after) == 1 and _halves(file, after[0], op.outputs[0]):
            mode = "ave"
        how = f"{file.label(index)}: merge_mode={mode!r}"
        operators = f"operators {forward.recurrent[0]} and {backward.recurrent[0]}"
        for unit, role in ((forward, "forward"), (backward, "backward")):
            unit.merged = f"the {role} direction of a Bidirectional layer merged by {how}"
            unit.notes = (*unit.notes, (
                f"{file.label(unit.recurrent[0])} is the {role} direction of a Bidirectional "
                f"layer ({operators}) whose outputs {how} combines; rnnport's bidirectional "
                "network concatenates them (merge_mode='concat'): read the other direction "
                f"with node= too and combine their y as {MERGED[mode]}."))


def _halves(file: _File, operator: int, tensor: int) -> bool:
    """Whether ``operator`` multiplies ``tensor`` by 0.5 or divides it by 2."""
    op = file.graph.operators[operator]
    code = file.code(operator)
    if code not in (MUL, DIV) or len(op.inputs) != 2 or op.inputs[0] != tensor or \
            op.inputs[1] < 0:
        return False
    try:
        value = tfl.tensor_array(file.model, op.inputs[1]).reshape(-1)
    except RnnportError:
        return False
    return value.size == 1 and float(value[0]) == (0.5 if code == MUL else 2.0)


def _chains(file: _File) -> list[list[_Unit]]:
    """The networks: chains of units, each reading the one before it."""
    units = _units(file)
    by_output = {unit.output: unit for unit in units if unit.output >= 0}
    followers: dict[int, list[_Unit]] = {}
    for unit in units:
        before = by_output.get(unit.input)
        if before is not None:
            followers.setdefault(id(before), []).append(unit)
    continues = {id(unit) for group in followers.values() if len(group) == 1 for unit in group}
    chains = []
    for unit in units:
        if id(unit) in continues:
            continue
        chain = [unit]
        while len(followers.get(id(chain[-1]), [])) == 1 and len(chain) <= len(units):
            chain.append(followers[id(chain[-1])][0])
        chains.append(chain)
    return chains


def _describe(file: _File, chain: list[_Unit]) -> str:
    layers = []
    for unit in chain:
        names = "+".join(file.op_name(k) for k in unit.recurrent)
        shape = " as a bidirectional layer" if unit.bidirectional and len(unit.recurrent) == 2 \
            else " reversed" if unit.reverse else ""
        if unit.merged:
            shape += f" ({unit.merged})"
        elif unit.problem:
            shape += " (go_backwards=True outside a Bidirectional: refused)"
        layers.append(f"{names} (operator{'s' if len(unit.recurrent) > 1 else ''} "
                      f"{', '.join(map(str, unit.recurrent))}){shape}")
    output = chain[-1].output
    tail = f" → tensor {file.tensor_name(output)!r}" if output >= 0 else ""
    return f"{len(chain)} layer(s): {' → '.join(layers)}{tail}"


def _chain_value(chain: list[_Unit]) -> str:
    return str(chain[0].recurrent[0])


def _no_network(file: _File) -> RnnportError:
    ops = [file.op_name(k) for k in range(len(file.graph.operators))]
    reasons = [found for found in file.recognised.values() if isinstance(found, RnnportError)]
    if reasons:
        return reasons[0]
    return FormatError(f"{file.where}: no recurrent operator in the main subgraph; expected "
                       "UNIDIRECTIONAL_SEQUENCE_LSTM/RNN, BIDIRECTIONAL_SEQUENCE_LSTM/RNN, LSTM "
                       f"or RNN. Its operators: {listed(dict.fromkeys(ops)) or 'none'}.")


def _choose(file: _File, options: Mapping[str, Any]) -> tuple[list[_Unit], list[list[_Unit]]]:
    chains = _chains(file)
    if not chains:
        raise _no_network(file)
    listing = "\n".join(f"  - node={_chain_value(c)!r}: {_describe(file, c)}" for c in chains)
    node = options.get("node")
    if node is None:
        if len(chains) == 1:
            return chains[0], chains
        raise FormatError(f"{file.where}: holds {len(chains)} recurrent networks; pass node= "
                          f"(an operator index or an output tensor's name) to pick one:\n"
                          f"{listing}")
    if isinstance(node, bool) or not isinstance(node, (int, str)):
        raise FormatError(f"read(fmt='tflite'): node={node!r}; expected an operator index (int) "
                          "or a tensor name (str).")
    text = str(node)
    for chain in chains:
        indices = {str(k) for unit in chain for k in unit.operators}
        names = {file.tensor_name(unit.output) for unit in chain if unit.output >= 0}
        if text in indices or (isinstance(node, str) and node in names):
            return chain, chains
    candidates = [file.tensor_name(unit.output) for chain in chains for unit in chain
                  if unit.output >= 0]
    raise FormatError(f"{file.where}: node={node!r} is no operator or output tensor of a "
                      f"recurrent network.{close_matches(text, candidates)} The networks here:\n"
                      f"{listing}")


def _layer(file: _File, unit: _Unit, options: Mapping[str, Any], reading: _Reading) -> RNN:
    if unit.problem:
        raise UnsupportedFeatureError(unit.problem)
    if len(unit.recurrent) == 1 and unit.bidirectional:
        directions = _bidirectional_op(file, unit.recurrent[0], options, reading)
    else:
        directions = [_one_direction(file, k, options, reading) for k in unit.recurrent]
    labels = ", ".join(file.label(k) for k in unit.recurrent)
    if len(directions) == 2 and directions[0].fields != directions[1].fields:
        forward, backward = (d.fields for d in directions)
        differ = sorted(k for k in {*forward, *backward} if forward.get(k) != backward.get(k))
        raise UnsupportedFeatureError(
            f"{file.where}: {labels}: the two directions differ in "
            + "; ".join(f"{k} (forward {_field(k, forward)}, backward "
                        f"{_field(k, backward)})" for k in differ)
            + "; the canonical bidirectional layer has one cell and shape for both. Nothing "
            "was read.")
    fields = dict(directions[0].fields)
    if fields.get("cell") == "lstm" and "cell_clip" in options and \
            options["cell_clip"] != fields.get("cell_clip"):
        stored, told = fields.get("cell_clip"), options["cell_clip"]
        fields["cell_clip"] = told
        bound = min(v for v in (stored, told) if v)
        reading.remarks.append(
            f"cell_clip={told!r}: {labels} "
            + (f"clips its cell state at ±{stored:g}" if stored else "does not clip its cell "
               "state") + f", read {'without a clip' if told is None else f'with ±{told:g}'} "
            f"as told; the outputs equal LiteRT's only while no step's |c| exceeds {bound:g}.")
    elif fields.get("cell_clip"):
        reading.remarks.append(
            f"{labels} clips its cell state at ±{fields['cell_clip']:g} (TensorFlow's converter "
            "sets 10 for every Keras LSTM), read as Spec.cell_clip; formats without a cell clip "
            "(torch, onnx, keras) refuse it. Read with cell_clip=None to drop it: the outputs "
            "stay the same while no step's |c| reaches it.")
    if fields.get("cell") != "lstm":
        fields = {k: v for k, v in fields.items()
                  if k in ("cell", "input_size", "hidden_size", "reset_after", "bias",
                           "activations")}
    spec = Spec(num_layers=1, bidirectional=unit.bidirectional, reverse=unit.reverse, **fields)
    reading.remarks.extend(unit.notes)
    for k in unit.recurrent:
        if file.code(k) in STEP_OPS:
            reading.remarks.append(
                f"{file.label(k)} computes one time step per invocation, carrying its state in "
                "variable tensors; the canonical network's forward() on a (batch, time, input) "
                "sequence equals that many invocations.")
    if unit.bidirectional and unit.output < 0:
        reading.remarks.append(
            f"{labels} keeps the forward and backward outputs apart (merge_outputs false); "
            "the canonical network's y concatenates them on the last axis, forward first.")
    return RNN(spec, [[d.params for d in directions]], copy=False)


def _field(key: str, fields: Mapping[str, Any]) -> str:
    """A direction's Spec field as a refusal shows it (activations by name)."""
    value = fields.get(key)
    if key == "activations":
        return "/".join(name for name, _, _ in value) if value else \
            "/".join(DEFAULTS.get(fields.get("cell", ""), ("the defaults",)))
    return repr(value)


def read_with_notes(source: Any, **options: Any) -> tuple[Model, list[str]]:
    """The chosen network and what notes() says about it."""
    model, out, _ = _read_all(source, **options)
    return model, out


def parameter_arrays(source: Any, **options: Any) -> list[tuple[str, np.ndarray]]:
    """The constant tensors reading ``source`` takes parameters from, in the file's order:
    (tensor name — a loop body's prefixed ``subgraphs[k]/`` —, values as float32)."""
    return _read_all(source, **options)[2]


def _read_all(source: Any, **options: Any) -> tuple[Model, list[str], list[tuple[str, np.ndarray]]]:
    dequantize = options.get("dequantize", False)
    if not isinstance(dequantize, bool):
        raise FormatError(f"read(fmt='tflite'): dequantize={dequantize!r}; expected True or False.")
    clip = options.get("cell_clip")
    if clip is not None and (isinstance(clip, bool) or not isinstance(clip, (int, float)) or
                             not 0 < clip < float("inf")):
        raise FormatError(f"read(fmt='tflite'): cell_clip={clip!r}; expected None (no clip) or "
                          "a positive number, to replace the clip the file's LSTMs store.")
    file = load(source)
    chain, chains = _choose(file, options)
    reading = _Reading(size=file.size)
    layers, total = [], 0
    for unit in chain:
        layers.append(_layer(file, unit, options, reading))
        # Loops sharing one body share its constants: the network can hold far more
        # parameters than the file stores.
        total += sum(int(array.nbytes) for _, _, _, array in layers[-1].arrays())
        if total > budget.allowance("expansion", file.size):
            raise budget.exceeded(
                file.where, f"the network's first {len(layers)} layer(s) hold {total:,} bytes "
                "of parameters", "expansion", file.size, total)
    takes, gives = _majors(file, chain)
    if takes or gives:
        reading.remarks.append(
            f"the network {'reads x' if takes else ''}{' and ' if takes and gives else ''}"
            f"{'gives y' if gives else ''} time-major in the file, (time, batch, features); "
            "forward(x, time_major=True) takes and gives both that way.")
    try:
        model = stack(layers)
    except RnnportError as error:
        raise FormatError(f"{file.where}: the chained operators do not fit together ({error}); "
                          "pick one with node=.") from None
    out = list(dict.fromkeys(reading.remarks))
    if reading.dequantized:
        out.append(f"dequantized (dequantize=True): {listed(reading.dequantized)} held quantized "
                   "integers, read as scale·(q − zero_point) in float32; the numbers differ from "
                   "what LiteRT's integer kernels compute.")
    out.extend(f"another recurrent network, node={_chain_value(c)!r} ({_describe(file, c)}); "
               "not read." for c in chains if c is not chain)
    used = {k for unit in chain for k in unit.operators}
    recurrent_elsewhere = {k for c in chains if c is not chain for unit in c for k in unit.operators}
    weights = {k for k in range(len(file.graph.operators)) if file.code(k) == DEQUANTIZE and
               all(len(file.model.buffers[file.graph.tensors[t].buffer].data)
                   for t in file.graph.operators[k].inputs if t >= 0)}
    accounted = used | recurrent_elsewhere | weights
    rest = [k for k in range(len(file.graph.operators)) if k not in accounted]
    feeding = _feeding_outputs(file)
    if any(k in feeding for k in rest):
        out.append(f"other operators: {listed(file.label(k) for k in rest if k in feeding)}; "
                   "not part of the network, not read.")
    if any(k not in feeding for k in rest):
        idle = [k for k in rest if k not in feeding]
        handles = file.variables().handles
        names = dict.fromkeys(repr(file.variables().names[handles[0, t]]) for k in idle
                              for t in file.graph.operators[k].inputs if (0, t) in handles)
        kept = f", keeping resource variable(s) {listed(names)} from one invocation to the " \
            "next (such as a stateful layer's state or Keras 3's dropout seed generator)" \
            if names else ""
        out.append(f"operators that feed none of the file's outputs: "
                   f"{listed(file.label(k) for k in idle)}{kept}; not read.")
    return model, out, [reading.arrays[key] for key in sorted(reading.arrays)]


def _feeding_outputs(file: _File) -> set[int]:
    """The main subgraph's operators some output of the file is computed from."""
    found: set[int] = set()
    pending = list(file.graph.outputs)
    seen: set[int] = set()
    while pending:
        tensor = pending.pop()
        if tensor in seen or tensor < 0:
            continue
        seen.add(tensor)
        operator = file.producer.get(tensor)
        if operator is not None and operator not in found:
            found.add(operator)
            pending.extend(file.graph.operators[operator].inputs)
    return found


def read(source: Any, **options: Any) -> Model:
    """The recurrent network a TFLite model holds (see the package's docstring)."""
    return read_with_notes(source, **options)[0]


def _majors(file: _File, chain: list[_Unit]) -> tuple[bool, bool]:
    """Whether the chain reads its x, and gives its y, time-major."""
    first, last = chain[0].recurrent[0], chain[-1].recurrent[0]
    gives = file.loop_output_major[last] if last in file.loop_output_major else \
        _time_major(file, last)
    return _time_major(file, first), gives


def network_ends(source: Any) -> tuple[int, int, bool, bool]:
    """The main-subgraph tensors holding the network's ``x`` and ``y`` (``y`` -1: none; the
    two directions kept apart, or outputs in reversed time order), and whether each is
    time-major."""
    file = load(source)
    chain = _choose(file, {})[0]
    return (chain[0].input, chain[-1].output, *_majors(file, chain))


def fixed_input(source: Any) -> tuple[int, int] | None:
    """(batch, time) of the network's input where the file fixes both (no -1 in its
    shape_signature), as the converter's files do; else None."""
    file = load(source)
    chain = _choose(file, {})[0]
    tensor = file.graph.tensors[chain[0].input]
    if len(tensor.shape) != 3 or None in tensor.signature[:2]:
        return None
    batch, time = (1, 0) if _majors(file, chain)[0] else (0, 1)
    return tensor.shape[batch], tensor.shape[time]


def networks(source: Any) -> Choices:
    """The networks ``node=`` picks from: the first recurrent operator's index of each."""
    file = load(source)
    return Choices("node", tuple((_chain_value(c), _describe(file, c)) for c in _chains(file)))


def notes(source: Any, **options: Any) -> list[str]:
    """What a read of ``source`` leaves out or assumes, one sentence each."""
    return read_with_notes(source, **options)[1]
