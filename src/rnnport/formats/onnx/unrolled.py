"""Recurrent networks a graph computes step by step, with elementary operators instead of
an ``LSTM``, ``GRU`` or ``RNN`` node: what PyTorch's default (dynamo) exporter writes for
``nn.RNN`` (unrolled over the example's time steps) and for ``nn.LSTMCell``, ``nn.GRUCell``
and ``nn.RNNCell`` (one step).

**Finding the weights.** A *linear* is ``MatMul(a, K)``, plus an ``Add`` of a 1-D constant
when one follows, or ``Gemm(a, B, C)`` (``alpha = beta = 1``, no ``transA``), with ``K``,
``B`` and ``C`` constants (see :mod:`.graph` for what counts as one).

* *A sequence* (``nn.RNN``): each layer and direction multiplies its whole input by one
  matrix ``W`` (I, H) and each step's state by one matrix ``U`` (H, H), so a matrix that
  several linears share is a ``U``. Each of its steps adds the product to that step's slice
  of the input's product and applies ``Tanh`` or ``Relu``; following the slice back through
  the slicing nodes reaches the direction's ``W``, and a slice with a negative step on the
  way marks the backward direction. Layers are told apart by what their ``W`` multiplies
  (the graph's input, or the layer before's joined outputs), in the graph's order.
* *One step* (a cell): two linears of one width G·H, one of the input ``x``, one of the
  state ``h`` (both graph inputs); G = 4, 3 or 1 says LSTM, GRU or simple RNN, computed as
  PyTorch's cells compute them.

**Checking them.** Shapes do not prove that a graph computes the network its weights
suggest, so the reader runs the graph in NumPy on random inputs (the operators it can run
are :data:`RUN_OPS`; others are skipped, with what depends on them) and requires one of its
values to equal rnnport's output for the network read, within :data:`TOLERANCE`;
otherwise it refuses. The weights are the stored constants, transposed back: bit-exact.

**Refused, with the reason:** a cell exported without its state (PyTorch folds the zero
state's product into a constant, so ``weight_hh`` is not in the file), a sequence of one
time step (no state is ever multiplied), unrolled LSTM or GRU steps, anything else the
check does not confirm.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import FormatError, RnnportError, UnsupportedFeatureError
from ...model import RNN, Model
from ...spec import Spec
from .graph import FOLDABLE, Scope, fold

__all__ = ["RUN_OPS", "TOLERANCE", "read"]

RUN_OPS = (*FOLDABLE, "Constant", "MatMul", "Gemm", "Sigmoid", "Tanh", "Relu", "Neg",
           "SplitToSequence", "SequenceAt")
TOLERANCE = 1e-4  # of the largest output value, at least 1: float32 in both
MAX_FED = 1 << 22  # values fed to the graph's inputs when running it
PASS_OPS = {"Squeeze", "Unsqueeze", "Reshape", "Identity", "Cast", "Slice", "Gather",
            "Transpose"}
ACTIVATIONS = {"Tanh": "tanh", "Relu": "relu"}
CELLS = {4: "lstm", 3: "gru", 1: "rnn"}
EXPORT_WITH_STATE = ("export the cell with its state as an input, e.g. torch.onnx.export("
                     "cell, (x, (h, c)), path) for an LSTMCell or (x, h) for the others")


@dataclass
class Linear:
    """``data · kernel + bias`` as the graph computes it."""

    node: Any
    data: str  # the name multiplied
    key: str  # the matrix's name: the same for every use of one matrix
    kernel: np.ndarray  # (in, out), MatMul's orientation
    bias: np.ndarray | None
    output: str  # the name holding the result (after the bias)


def read(scope: Scope) -> Model | None:
    """The network ``scope`` computes step by step, checked against rnnport's forward pass;
    None when the graph multiplies nothing the way a recurrent network does."""
    linears = _linears(scope)
    if not linears:
        return None
    uses = Counter(linear.key for linear in linears)
    if any(count > 1 for count in uses.values()):
        return _sequence(scope, linears, uses)
    return _step(scope, linears)


# -- linears ----------------------------------------------------------------------------------


def _constant(scope: Scope, name: str) -> np.ndarray | None:
    if not name:
        return None
    try:
        return scope.value(name, scope.path or "ONNX graph")
    except RnnportError:
        return None


def _linears(scope: Scope) -> list[Linear]:
    consumers = _consumers(scope)
    found = []
    for node in scope.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("MatMul", "Gemm") \
                or len(node.input) < 2 or not node.output:
            continue
        attributes = _attributes(node)
        if node.op_type == "Gemm" and (attributes.get("alpha", 1.0) != 1.0 or
                                       attributes.get("beta", 1.0) != 1.0 or
                                       attributes.get("transA", 0)):
            continue
        matrix = _constant(scope, node.input[1])
        if matrix is None or matrix.ndim != 2 or matrix.dtype.kind != "f" or \
                _constant(scope, node.input[0]) is not None:
            continue
        kernel = matrix.T if attributes.get("transB", 0) else matrix
        bias, output = None, node.output[0]
        if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
            bias = _constant(scope, node.input[2])
            if bias is None or bias.shape not in ((kernel.shape[1],), (1, kernel.shape[1])):
                continue
            bias = bias.reshape(-1)
        else:
            after = consumers.get(output, [])
            if len(after) == 1 and after[0].op_type == "Add":
                other = next((name for name in after[0].input if name != output), "")
                value = _constant(scope, other)
                if value is not None and value.shape == (kernel.shape[1],):
                    bias, output = value, after[0].output[0]
        key = _origin(scope, node.input[1])[0]  # through the Transpose an exporter may add
        found.append(Linear(node, node.input[0], key, kernel, bias, output))
    return found


def _attributes(node: Any) -> dict[str, Any]:
    from onnx import helper

    return {attribute.name: helper.get_attribute_value(attribute)
            for attribute in node.attribute}


def _consumers(scope: Scope) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for node in scope.nodes:
        for name in node.input:
            out.setdefault(name, []).append(node)
    return out


def _origin(scope: Scope, name: str) -> tuple[str, list[Any]]:
    """Follow ``name`` back through :data:`PASS_OPS` (their data input): the name reached
    and the nodes passed."""
    passed = []
    while name in scope.producers and scope.producers[name].op_type in PASS_OPS:
        node = scope.producers[name]
        passed.append(node)
        name = node.input[0]
    return name, passed


def _flips(scope: Scope, nodes: Sequence[Any]) -> bool:
    """Whether a Slice among ``nodes`` reverses an axis (a negative step)."""
    for node in nodes:
        if node.op_type == "Slice" and len(node.input) > 4:
            steps = _constant(scope, node.input[4])
            if steps is not None and steps.dtype.kind in "iu" and (steps < 0).any():
                return True
    return False


# -- a sequence (nn.RNN, unrolled) -------------------------------------------------------------


def _refuse(where: str, what: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{where}: the graph multiplies states by a constant at several steps, as an unrolled "
        f"recurrent network does, but {what}. rnnport reads the unrolled simple RNNs that "
        "PyTorch's exporter writes for nn.RNN; for another network, export it with "
        "torch.onnx.export(..., dynamo=False), which writes RNN nodes, or read the PyTorch "
        "weights themselves (the state_dict).")


def _sequence(scope: Scope, linears: list[Linear], uses: Counter[str]) -> Model:
    where = f"{scope.loaded.where}{f', {scope.path}' if scope.path else ''}"
    consumers = _consumers(scope)
    by_output = {linear.output: linear for linear in linears}
    # (W, U's first linear, nonlinearity, backward) per layer and direction
    found: list[tuple[Linear, Linear, str, bool]] = []
    for key in (key for key, count in uses.items() if count > 1):
        steps = [linear for linear in linears if linear.key == key]
        rows, columns = steps[0].kernel.shape
        if columns != rows:
            gates = columns / rows
            raise _refuse(where, f"its recurrent matrix {key!r} is {steps[0].kernel.shape}, "
                          f"{gates:g} gate blocks wide (an unrolled LSTM or GRU), and rnnport "
                          "reads unrolled simple RNNs only")
        owners = set()
        for step in steps:
            joins = consumers.get(step.output, [])
            if len(joins) != 1 or joins[0].op_type != "Add":
                raise _refuse(where, f"{step.output!r} is not added to the step's input")
            join = joins[0]
            after = consumers.get(join.output[0], [])
            if len(after) != 1 or after[0].op_type not in ACTIVATIONS:
                raise _refuse(where, f"{join.output[0]!r} goes on to "
                              f"{[node.op_type for node in after]}, not to one Tanh or Relu")
            step_input = next((name for name in join.input if name != step.output), "")
            origin, passed = _origin(scope, step_input)
            if origin not in by_output or uses[by_output[origin].key] != 1:
                raise _refuse(where, f"the step input {step_input!r} is not a slice of one "
                              "product of the layer's input")
            owners.add((id(by_output[origin]), after[0].op_type, _flips(scope, passed)))
        if len(owners) != 1:
            raise _refuse(where, f"the steps that multiply by {key!r} take their inputs from "
                          "different products, or apply different activations")
        (owner, activation, backward), = owners
        weight = next(linear for linear in linears if id(linear) == owner)
        found.append((weight, steps[0], ACTIVATIONS[activation], backward))
    position = {id(node): index for index, node in enumerate(scope.nodes)}
    found.sort(key=lambda item: position[id(item[0].node)])
    layers: dict[str, list[tuple[Linear, Linear, str, bool]]] = {}
    for item in found:
        layers.setdefault(item[0].data, []).append(item)
    directions = {len(group) for group in layers.values()}
    nonlinearities = {item[2] for item in found}
    if len(directions) != 1 or len(nonlinearities) != 1:
        raise _refuse(where, "its layers differ in their directions or activations")
    count = directions.pop()
    ordered = []
    for group in layers.values():
        flags = sorted(item[3] for item in group)
        if flags != [False, True][:count]:
            raise _refuse(where, "a layer runs backward alone")
        ordered.append(sorted(group, key=lambda item: item[3]))
    first = ordered[0][0][0]
    hidden = ordered[0][0][1].kernel.shape[0]
    spec = Spec(cell=f"rnn_{nonlinearities.pop()}", input_size=first.kernel.shape[0],
                hidden_size=hidden, num_layers=len(ordered), bidirectional=count == 2,
                bias=any(item[0].bias is not None or item[1].bias is not None
                         for item in found))
    params = []
    for layer, group in enumerate(ordered):
        entries = []
        for weight, recurrent, _, _ in group:
            if weight.kernel.shape != (spec.layer_input_size(layer), hidden) or \
                    recurrent.kernel.shape != (hidden, hidden):
                raise _refuse(where, f"layer {layer}'s matrices are {weight.kernel.shape} and "
                              f"{recurrent.kernel.shape}, which do not chain")
            entries.append(_params(weight, recurrent, spec.bias))
        params.append(entries)
    model = _build(spec, params, where)
    _check_sequence(scope, model, first, where)
    return model


def _params(weight: Linear, recurrent: Linear, bias: bool) -> dict[str, np.ndarray]:
    named = {"weight_ih": np.ascontiguousarray(weight.kernel.T),
             "weight_hh": np.ascontiguousarray(recurrent.kernel.T)}
    if bias:
        for name, linear in (("bias_ih", weight), ("bias_hh", recurrent)):
            named[name] = linear.bias if linear.bias is not None else \
                np.zeros(linear.kernel.shape[1], linear.kernel.dtype)
    return named


def _build(spec: Spec, params: list[list[dict[str, np.ndarray]]], where: str) -> RNN:
    dtypes = {array.dtype for layer in params for entry in layer for array in entry.values()}
    if len(dtypes) != 1:
        raise FormatError(f"{where}: the network's constants are of several dtypes "
                          f"({', '.join(sorted(map(str, dtypes)))}); expected one.")
    return RNN(spec, params, copy=True)


# -- one step (a cell) -----------------------------------------------------------------------


def _step(scope: Scope, linears: list[Linear]) -> Model | None:
    where = f"{scope.loaded.where}{f', {scope.path}' if scope.path else ''}"
    fed = [linear for linear in linears if _origin(scope, linear.data)[0] in scope.inputs]
    candidates = []  # (input's linear, state's linear): the state is a graph input
    for state in fed:
        hidden, width = state.kernel.shape
        if not hidden or width % hidden or width // hidden not in CELLS:
            continue
        candidates += [(data, state) for data in linears
                       if data is not state and data.kernel.shape[1] == width]
    if not candidates:
        if _folded_state(scope, fed):
            raise UnsupportedFeatureError(
                f"{where}: one step of a recurrent cell whose state was folded away: exported "
                "without a state, h = 0, so PyTorch's exporter computed h·weight_hh + bias_hh "
                "once, into a constant, and weight_hh is not in the file. Nothing can bring it "
                f"back; {EXPORT_WITH_STATE}, or read the cell's state_dict.")
        return None
    values = run(scope, _feeds(scope, where), where)
    problems = []
    for data, state in candidates:
        hidden, width = state.kernel.shape
        family = CELLS[width // hidden]
        cells = [f"rnn_{name}" for name in ACTIVATIONS.values()] if family == "rnn" else \
            [family]
        for cell in cells:
            spec = Spec(cell=cell, input_size=data.kernel.shape[0], hidden_size=hidden,
                        bias=data.bias is not None or state.bias is not None)
            model = _build(spec, [[_params(data, state, spec.bias)]], where)
            try:
                _check_step(scope, values, model, data, state)
                return model
            except _Mismatch as error:
                problems.append(f"as {spec.describe(article=True)}: {error}")
    shown = "; ".join(problems[:4]) + ("; …" if len(problems) > 4 else "")
    raise UnsupportedFeatureError(
        f"{where}: the graph multiplies a state it is fed and another value by constants of "
        "one width, as one step of a recurrent cell does, but computes none of the cells "
        f"rnnport knows with them ({shown}). rnnport reads PyTorch's LSTMCell, GRUCell and "
        "RNNCell as its exporter writes them.")


def _folded_state(scope: Scope, linears: list[Linear]) -> bool:
    """Whether one linear of a graph input meets a 2-D constant of its width: a cell
    exported without its state, whose state product was folded."""
    if len(linears) != 1:
        return False
    consumers = _consumers(scope)
    linear = linears[0]
    width = linear.kernel.shape[1]
    for node in consumers.get(linear.output, []):
        if node.op_type != "Add":
            continue
        other = next((name for name in node.input if name != linear.output), "")
        value = _constant(scope, other)
        if value is not None and value.ndim == 2 and value.shape[1] == width:
            return True
    return False


# -- checking: run the graph in NumPy ---------------------------------------------------------


class _Mismatch(Exception):
    """The graph computed other numbers than the network read."""


def _check_step(scope: Scope, values: Mapping[str, np.ndarray], model: RNN, data: Linear,
                state: Linear) -> None:
    """One step of ``model`` from what the graph's run fed the two linears (and, for an
    LSTM, a graph input of the state's shape as c) is among the run's values."""
    x, h = values.get(data.data), values.get(state.data)
    spec = model.spec
    if not isinstance(x, np.ndarray) or not isinstance(h, np.ndarray) or x.ndim != 2 or \
            h.shape != (x.shape[0], spec.hidden_size):
        raise _Mismatch("the run does not give the step's input and state as 2-D values")
    states: list[Any] = [h[None]]
    if spec.cell == "lstm":
        own = _origin(scope, state.data)[0]
        states = [(h[None], value[None]) for name, value in values.items()
                  if name in scope.inputs and name != own and np.shape(value) == h.shape]
        if not states:
            raise _Mismatch("no other graph input has the state's shape, for c")
    closest = np.inf
    for state_in in states:
        y, _ = model.forward(x[:, None, :], state=state_in)
        closest = min(closest, _closest(values, y[:, 0]))
        if closest == 0.0 or closest <= TOLERANCE * _scale(y):
            return
    raise _Mismatch(_differs("the next state h", closest))


def _check_sequence(scope: Scope, model: RNN, first: Linear, where: str) -> None:
    """``model`` run on what the graph's run fed its first layer (time-major, as PyTorch's
    exporter multiplies it), from a graph input of the state's shape if there is one, gives
    an output among the run's values."""
    values = run(scope, _feeds(scope, where), where)
    spec = model.spec
    x = values.get(first.data)
    if not isinstance(x, np.ndarray) or x.ndim != 3:
        raise _refuse(where, "running it does not give the first layer's input as 3-D values")
    shape = (spec.num_layers * spec.num_directions, x.shape[1], spec.hidden_size)
    states: list[np.ndarray | None] = [value for name, value in values.items()
                                       if name in scope.inputs and np.shape(value) == shape]
    closest = np.inf
    for state in [*states[:4], None]:
        y, _ = model.forward(x, state=state, time_major=True)
        closest = min(closest, _closest(values, y))
        if closest <= TOLERANCE * _scale(y):
            return
    raise _refuse(where, f"it does not compute the network its matrices describe "
                  f"({spec.describe(article=True)}): {_differs('the output y', closest)}")


def _feeds(scope: Scope, where: str) -> dict[str, np.ndarray]:
    """Random values for the graph's inputs fed at run time (a named size taken as 2)."""
    rng = np.random.default_rng(0)
    feeds, total = {}, 0
    for value in scope.loaded.graph.input:
        if value.name in scope.initializers:
            continue
        tensor = value.type.tensor_type
        dims = tuple(dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else 2
                     for dim in tensor.shape.dim)
        total += int(np.prod(dims, dtype=np.float64))
        if total > MAX_FED:
            raise FormatError(f"{where}: the graph's inputs (up to {value.name!r}, {dims}) "
                              f"take more than {MAX_FED:,} values; too large to check the "
                              "network it computes by running it.")
        if tensor.elem_type in (1, 10, 11):  # float, float16, double
            feeds[value.name] = rng.uniform(-1, 1, dims).astype(np.float32)
        else:
            feeds[value.name] = np.zeros(dims, np.int64)
    return feeds


def _scale(expected: np.ndarray) -> float:
    return max(1.0, float(np.max(np.abs(expected), initial=0.0)))


def _closest(values: Mapping[str, np.ndarray], expected: np.ndarray) -> float:
    """The smallest largest difference between ``expected`` and a value of its shape."""
    closest = np.inf
    for value in values.values():
        if isinstance(value, np.ndarray) and value.shape == expected.shape and \
                value.dtype.kind == "f":
            closest = min(closest, float(np.max(np.abs(value - expected), initial=0.0)))
    return closest


def _differs(what: str, closest: float) -> str:
    found = "no value of its shape" if closest == np.inf else \
        f"the closest differs by {closest:.2g}"
    return f"the graph computes no value equal to {what} ({found})"


# Operators run here beyond the folding ones: float arithmetic and the network's own.
def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
          attributes: Mapping[str, Any]) -> np.ndarray:
    if attributes.get("transA", 0):
        a = a.T
    if attributes.get("transB", 0):
        b = b.T
    out = float(attributes.get("alpha", 1.0)) * (a @ b)
    return out if c is None else out + float(attributes.get("beta", 1.0)) * c


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "MatMul": np.matmul, "Sigmoid": _sigmoid, "Tanh": np.tanh,
    "Relu": lambda x: np.maximum(x, 0), "Neg": np.negative,
}


def run(scope: Scope, feeds: Mapping[str, np.ndarray], where: str) -> dict[str, Any]:
    """Every value of ``scope`` that :data:`RUN_OPS` compute from ``feeds`` and the
    constants, in the graph's order; a node of another operator, and what depends on it, is
    skipped. Values may take as much memory as the folding budget allows."""
    values: dict[str, Any] = dict(feeds)  # arrays, and lists for ONNX sequences
    budget = scope.loaded.budget + sum(int(value.nbytes) for value in feeds.values())
    for node in scope.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in RUN_OPS:
            continue
        arguments: list[Any] = []
        for name in node.input:
            if not name:
                arguments.append(None)
            elif name in values:
                arguments.append(values[name])
            elif name not in scope.producers:
                arguments.append(_constant(scope, name))
            else:
                arguments.append(None)
        if any(argument is None and name for argument, name in zip(arguments, node.input,
                                                                   strict=True)):
            continue  # an input the run could not compute
        label = scope.label(node)
        try:
            with np.errstate(all="ignore"):
                outputs = _compute(scope, node, arguments, where, label, budget)
        except FormatError as error:
            if "exhaust memory" in str(error):
                raise
            continue
        except RnnportError:
            continue
        except (ValueError, TypeError, IndexError, AttributeError, ZeroDivisionError):
            continue  # shapes that do not fit: the value is simply not there
        for name, value in outputs.items():
            budget -= sum(int(item.nbytes) for item in (value if isinstance(value, list)
                                                        else [value]))
            if budget < 0:
                raise FormatError(f"{where}: running the graph to check the network it "
                                  "computes takes more memory than its stored tensors, four "
                                  "times over; the graph is built to exhaust memory.")
            values[name] = value
    return values


def _fits(shape: tuple[int, ...], budget: int, where: str) -> None:
    """Refuse, before computing it, a result larger than the run may still take."""
    if int(np.prod(shape, dtype=np.float64)) * 8 > budget:
        raise FormatError(f"{where}: running the graph to check the network it computes would "
                          f"make a value of shape {shape}, more memory than its stored tensors, "
                          "four times over; the graph is built to exhaust memory.")


def _split_to_sequence(arguments: list[Any], attributes: Mapping[str, Any]) -> list[np.ndarray]:
    data = arguments[0]
    axis = int(attributes.get("axis", 0)) % max(data.ndim, 1)
    split = arguments[1] if len(arguments) > 1 else None
    if split is None:  # pieces of one, the axis dropped unless keepdims
        pieces = np.split(data, data.shape[axis], axis=axis)
        return pieces if attributes.get("keepdims", 1) else [np.squeeze(p, axis) for p in pieces]
    sizes = [int(split)] * -(-data.shape[axis] // int(split)) if np.ndim(split) == 0 else \
        [int(size) for size in split]
    return np.split(data, np.cumsum(sizes)[:-1], axis=axis)


def _compute(scope: Scope, node: Any, arguments: list[Any], where: str,
             label: str, budget: int) -> dict[str, Any]:
    op = node.op_type
    if op == "SplitToSequence":
        return {node.output[0]: _split_to_sequence(arguments, _attributes(node))}
    if op == "SequenceAt":
        return {node.output[0]: arguments[0][int(arguments[1])]}
    if op == "Constant":
        value = _constant(scope, node.output[0])
        return {} if value is None else {node.output[0]: value}
    if op == "Gemm":
        a, b, *rest = arguments
        _fits((a.shape[1] if _attributes(node).get("transA", 0) else a.shape[0],
               b.shape[0] if _attributes(node).get("transB", 0) else b.shape[1]), budget, where)
        return {node.output[0]: _gemm(a, b, rest[0] if rest else None, _attributes(node))}
    if op in ELEMENTWISE and (op not in FOLDABLE or any(
            argument is not None and argument.dtype.kind == "f" for argument in arguments)):
        operands = [a for a in arguments if a is not None]
        if op == "MatMul":
            a, b = (np.atleast_2d(operand) for operand in operands)
            _fits((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]),
                  budget, where)
        else:
            _fits(np.broadcast_shapes(*(operand.shape for operand in operands)), budget, where)
        return {node.output[0]: np.asarray(ELEMENTWISE[op](*operands))}
    return {name: fold(node, arguments, name, where, label, budget)
            for name in node.output if name}
