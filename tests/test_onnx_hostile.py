"""Hand-crafted hostile ONNX files: each must end in an rnnport error that says where, what
was expected, what was found and what to do, early, never in a Python or NumPy exception,
a hang, or memory out of proportion to the file. Every file is built here with
``onnx.helper``, small."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
import pytest
from hostile_cases import peak_allocated
from onnx import TensorProto, helper, numpy_helper

import rnnport
from rnnport.formats.onnx.graph import MAX_DEPTH, BudgetError

HIDDEN, INPUT = 2, 3
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def _model(weight: str = "W", nodes: Sequence[Any] = (), tensors: Sequence[Any] = (),
           op: str = "LSTM", hidden: int = HIDDEN, inputs: int = INPUT,
           **attributes: Any) -> onnx.ModelProto:
    """One recurrent node fed ``weight`` as W (an initializer "W" of random values unless
    ``tensors`` or ``nodes`` give "W"), ``nodes`` in front of it."""
    rng = np.random.default_rng(0)
    gates = GATES[op] * hidden
    given = {tensor.name for tensor in tensors} | {name for node in nodes for name in node.output}
    stored = [*tensors, numpy_helper.from_array(
        rng.standard_normal((1, gates, hidden)).astype(np.float32), "R")]
    if weight == "W" and "W" not in given:
        stored.append(numpy_helper.from_array(
            rng.standard_normal((1, gates, inputs)).astype(np.float32), "W"))
    node = helper.make_node(op, ["x", weight, "R"], ["y"], hidden_size=hidden, **attributes)
    graph = helper.make_graph(
        [*nodes, node], "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], stored)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _identities(source: str, count: int) -> list[Any]:
    """``count`` Identity nodes in a chain from ``source``; the last one's output is
    ``f"i{count - 1}"``."""
    return [helper.make_node("Identity", [source if i == 0 else f"i{i - 1}"], [f"i{i}"])
            for i in range(count)]


def _frames() -> int:
    frame, count = sys._getframe(), 0
    while frame is not None:
        frame, count = frame.f_back, count + 1  # type: ignore[assignment]
    return count


@contextmanager
def _stack_left(frames: int) -> Iterator[None]:
    """Python's recursion limit set ``frames`` above the current depth: what a caller deep
    in its own stack (a notebook, a web handler) leaves the reader."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(_frames() + frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


# -- 1. deep chains of producers ----------------------------------------------------------------


def test_deep_chains_are_walked_without_recursion() -> None:
    """A chain as deep as the reader follows reads with little of Python's stack left (it
    used to take three frames a node: RecursionError); a deeper one is a FormatError that
    says how deep, from where, and how to fold the graph."""
    rng = np.random.default_rng(1)
    weight = rng.standard_normal((1, 4 * HIDDEN, INPUT)).astype(np.float32)
    stored = [numpy_helper.from_array(weight, "w0")]
    within = _model(f"i{MAX_DEPTH - 1}", _identities("w0", MAX_DEPTH), stored)
    with _stack_left(150):
        read = rnnport.read(within)
    np.testing.assert_array_equal(read.params[0][0]["weight_ih"][:HIDDEN], weight[0, :HIDDEN])

    deep = _model("i1499", _identities("w0", 1500), stored)
    with _stack_left(150), pytest.raises(rnnport.FormatError) as error:
        rnnport.read(deep)
    message = str(error.value)
    assert f"ONNX LSTM node 'y', W: 'i1298' is computed through more than {MAX_DEPTH} nested " \
           "nodes (it was reached through 'i1499')" in message
    assert "Fold the graph's constants offline" in message


def test_a_cycle_is_named_in_order() -> None:
    nodes = [helper.make_node("Identity", ["b"], ["a"]), helper.make_node("Identity", ["a"], ["b"])]
    with pytest.raises(rnnport.FormatError, match=r"'a' is computed from itself \(a cycle of "
                                                  r"'a' → 'b' → 'a'\).*Re-export"):
        rnnport.read(_model("a", nodes))


# -- 2. strings where numbers belong ------------------------------------------------------------


def _strings(name: str) -> Any:
    return helper.make_tensor(name, TensorProto.STRING, [1, 4 * HIDDEN, INPUT],
                              [b"1.5"] * (4 * HIDDEN * INPUT))


def test_string_tensors_are_refused_before_numpy_sees_them() -> None:
    """A STRING tensor, cast, reshaped or stored as W itself, is a FormatError naming it;
    NumPy's astype would parse or refuse the text with its own ValueError."""
    cast = [helper.make_node("Cast", ["text"], ["W"], to=TensorProto.FLOAT)]
    constant = [helper.make_node("Constant", [], ["W"], value=_strings("text"))]
    for model in (_model("W", cast, [_strings("text")]), _model("W", tensors=[_strings("W")]),
                  _model("W", constant)):
        with pytest.raises(rnnport.FormatError,
                           match=r"ONNX LSTM node 'y', W: tensor '(text|W)' holds strings "
                                 r"\(ONNX STRING\) of shape \[1, 8, 3\]; expected numbers"):
            rnnport.read(model)


def test_a_cast_to_strings_is_refused() -> None:
    cast = [helper.make_node("Cast", ["w0"], ["W"], to=TensorProto.STRING)]
    stored = [numpy_helper.from_array(np.zeros((1, 4 * HIDDEN, INPUT), np.float32), "w0")]
    with pytest.raises(rnnport.FormatError, match=r"Cast of float32 to strings \(ONNX STRING\); "
                                                  "expected a cast between numeric types"):
        rnnport.read(_model("W", cast, stored))


# -- 3. negative dimensions ---------------------------------------------------------------------


@pytest.mark.parametrize("dims", [[1, 8, -1], [-1, 8, 3], [1, -8, -3]], ids=str)
def test_a_negative_dimension_is_refused(dims: list[int]) -> None:
    """NumPy's reshape reads -1 as "whatever is left", which accepted [1, 8, -1]."""
    data = np.zeros(4 * HIDDEN * INPUT, np.float32)
    for stored in (TensorProto(name="W", data_type=TensorProto.FLOAT, dims=dims,
                               raw_data=data.tobytes()),
                   TensorProto(name="W", data_type=TensorProto.FLOAT, dims=dims,
                               float_data=data.tolist())):
        with pytest.raises(rnnport.FormatError,
                           match=rf"ONNX LSTM node 'y', W: tensor 'W' declares shape "
                                 rf"\[{', '.join(map(str, dims))}\]; expected sizes of 0 or more"):
            rnnport.read(_model(tensors=[stored]))


# -- 4. folding that copies without bound -------------------------------------------------------

SIDE = 512  # a 1 MiB float32 matrix: the budget is 4 MiB + 16 MiB


def _square() -> list[Any]:
    return [numpy_helper.from_array(np.zeros((SIDE, SIDE), np.float32), "big"),
            numpy_helper.from_array(np.array([-1], np.int64), "flat"),
            numpy_helper.from_array(np.array([SIDE, SIDE], np.int64), "square")]


def test_copies_hidden_behind_views_count_against_the_budget() -> None:
    """Reshaping a transposed matrix copies it, and NumPy hands back a view of the copy:
    66 such steps in a chain, each 1 MiB, used to pass uncounted."""
    nodes, previous = [], "big"
    for step in range(66):
        nodes += [helper.make_node("Transpose", [previous], [f"t{step}"], perm=[1, 0]),
                  helper.make_node("Reshape", [f"t{step}", "flat"], [f"f{step}"]),
                  helper.make_node("Reshape", [f"f{step}", "square"], [f"r{step}"])]
        previous = f"r{step}"
    model = _model(previous, nodes, _square())
    with peak_allocated() as peak, pytest.raises(BudgetError) as error:
        rnnport.read(model)
    assert peak[0] < 40 << 20
    message = str(error.value)
    assert "ONNX LSTM node 'y', W: the arrays computed from the graph's constants would come " \
           "to" in message
    assert "past the limit 'expansion', 4 bytes per byte of the file" in message
    assert "--limit expansion=16" in message and "folded offline" in message
    assert error.value.limit == "expansion"
    with rnnport.limits(expansion=16), pytest.raises(rnnport.FormatError) as raised:
        rnnport.read(model)  # raised, the graph is folded, and its W found not to fit the node
    assert not isinstance(raised.value, BudgetError) and "expected (1, 8, input)" in str(raised.value)


def test_many_nodes_sharing_one_tensor_count_against_the_budget() -> None:
    """400 nodes each copying the one stored matrix, gathered by a Concat: refused once the
    copies reach the budget, not after all 400 are made."""
    transposed = helper.make_node("Transpose", ["big"], ["t"], perm=[1, 0])
    copies = [helper.make_node("Reshape", ["t", "flat"], [f"c{i}"]) for i in range(400)]
    gathered = helper.make_node("Concat", [f"c{i}" for i in range(400)], ["W"], axis=0)
    model = _model("W", [transposed, *copies, gathered], _square())
    with peak_allocated() as peak, pytest.raises(BudgetError, match="limit 'expansion'"):
        rnnport.read(model)
    assert peak[0] < 40 << 20


def test_views_and_the_same_array_cost_nothing() -> None:
    """The budget counts new memory only: an Identity or a float cast hands on the array it
    is given, so 150 of them in front of a 4 MiB W (a 32 MiB budget) cost nothing."""
    weight = np.random.default_rng(2).standard_normal((1, 4 * 256, 1024)).astype(np.float32)
    nodes = [helper.make_node("Cast" if i % 2 else "Identity",
                              ["w0" if i == 0 else f"i{i - 1}"], [f"i{i}"],
                              **({"to": TensorProto.FLOAT} if i % 2 else {}))
             for i in range(150)]
    model = _model("i149", nodes, [numpy_helper.from_array(weight, "w0")], hidden=256,
                   inputs=1024)
    read = rnnport.read(model)
    assert read.spec.input_size == 1024


# -- 5. attribute lists of the wrong length -----------------------------------------------------


def test_a_million_activations_are_refused_before_they_are_read() -> None:
    model = _model(activations=["Sigmoid"] * 1_000_000)
    started = time.perf_counter()
    with pytest.raises(rnnport.FormatError,
                       match=r"ONNX LSTM node 'y': attribute 'activations' lists 1,000,000 "
                             r"functions; expected 3 \(LSTM takes 3 per direction, 1 "
                             r"direction\).*drop the attribute"):
        rnnport.read(model)
    assert time.perf_counter() - started < 5  # it took 21 s, popping the list from the front


@pytest.mark.parametrize("op, attributes, message", [
    ("GRU", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Tanh"]},
     r"'activations' lists 3 functions; expected 4 \(GRU takes 2 per direction, 2 directions\)"),
    ("RNN", {"activations": ["Tanh", "Tanh"]},
     r"'activations' lists 2 functions; expected 1 \(RNN takes 1 per direction"),
    ("LSTM", {"activation_alpha": [0.5] * 100_000},
     r"'activation_alpha' holds 100,000 values; expected at most 3, one for each activation"),
    ("LSTM", {"activations": ["Sigmoid", "Tanh", "Tanh"], "activation_beta": [0.5] * 4},
     r"'activation_beta' holds 4 values; expected at most 3"),
], ids=["gru-bidirectional", "rnn", "alpha", "beta"])
def test_activation_lists_must_fit_the_cell(op: str, attributes: dict[str, Any],
                                            message: str) -> None:
    with pytest.raises(rnnport.FormatError, match=rf"ONNX {op} node 'y': attribute {message}"):
        rnnport.read(_model(op=op, **attributes))


# -- 6. ONNX Runtime's quantized LSTM, damaged ---------------------------------------------------


def _quantized(weight: np.ndarray, scale: np.ndarray, zero: np.ndarray,
               inputs: Sequence[str] = ("x", "W", "R", "", "", "", "", "", "W_scale",
                                        "W_zero_point", "R_scale", "R_zero_point")
               ) -> onnx.ModelProto:
    """A com.microsoft DynamicQuantizeLSTM node with ``weight``, ``scale`` and ``zero`` as W
    and its scale and zero point (R well-formed)."""
    rng = np.random.default_rng(0)
    tensors = [numpy_helper.from_array(weight, "W"),
               numpy_helper.from_array(scale, "W_scale"),
               numpy_helper.from_array(zero, "W_zero_point"),
               numpy_helper.from_array(rng.integers(-128, 128, (1, HIDDEN, 4 * HIDDEN),
                                                    dtype=np.int8), "R"),
               numpy_helper.from_array(np.array([0.01], np.float32), "R_scale"),
               numpy_helper.from_array(np.array([3], np.int8), "R_zero_point")]
    node = helper.make_node("DynamicQuantizeLSTM", list(inputs), ["y"], domain="com.microsoft",
                            hidden_size=HIDDEN)
    graph = helper.make_graph(
        [node], "quantized", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            [5, 1, INPUT])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.microsoft", 1)])


WEIGHT = np.arange(INPUT * 4 * HIDDEN, dtype=np.int8).reshape(1, INPUT, 4 * HIDDEN)


def test_a_well_formed_quantized_lstm_reads_with_dequantize() -> None:
    model = rnnport.read(_quantized(WEIGHT, np.array([0.5], np.float32), np.array([2], np.int8)),
                         dequantize=True)
    assert model.spec == rnnport.Spec("lstm", INPUT, HIDDEN, bias=False)


@pytest.mark.parametrize("weight, scale, zero, message", [
    (WEIGHT.astype(np.int16), np.array([0.5], np.float32), np.array([2], np.int16),
     r"W is int16 of shape \[1, 3, 8\]; expected int8 or uint8 of shape \[directions, in, "
     r"4·hidden\]"),
    (WEIGHT, np.array([0.5, 0.5, 0.5], np.float32), np.array([2, 2, 2], np.int8),
     r"W_scale is float32 of shape \[3\]; expected float32 of shape \[1\] \(one per "
     r"direction\) or \[1, 8\] \(one per column\)"),
    (WEIGHT, np.array([0.5], np.float32), np.array([2], np.uint8),
     r"W_zero_point is uint8 of shape \[1\]; expected int8 of W_scale's shape \[1\]"),
    (WEIGHT, np.array([0.5], np.float64), np.array([2], np.int8),
     r"W_scale is float64 of shape \[1\]; expected float32"),
    (WEIGHT[0], np.array([0.5], np.float32), np.array([2], np.int8),
     r"W is int8 of shape \[3, 8\]; expected int8 or uint8 of shape \[directions"),
], ids=["int16", "scales", "zero-type", "scale-type", "rank"])
def test_a_damaged_quantized_lstm_is_refused(weight: np.ndarray, scale: np.ndarray,
                                             zero: np.ndarray, message: str) -> None:
    with pytest.raises(rnnport.FormatError, match=rf"DynamicQuantizeLSTM node 'y': {message}.*"
                                                  r"The model is damaged"):
        rnnport.read(_quantized(weight, scale, zero), dequantize=True)


def test_a_quantized_lstm_without_its_scales_is_refused() -> None:
    model = _quantized(WEIGHT, np.array([0.5], np.float32), np.array([2], np.int8),
                       inputs=("x", "W", "R", "", "", "", "", "", "", "", "R_scale",
                               "R_zero_point"))
    with pytest.raises(rnnport.FormatError, match=r"W_scale, W_zero_point not given; expected "
                                                  r"W, R and each one's scale and zero point"):
        rnnport.read(model, dequantize=True)
    with pytest.raises(rnnport.UnsupportedFeatureError, match=r"com\.microsoft\."
                                                              r"DynamicQuantizeLSTM"):
        rnnport.read(model)


def test_dequantizing_is_paid_for_before_it_is_done() -> None:
    weight = np.zeros((1, 250_000, 4 * HIDDEN), np.int8)  # 2 MB: 8 MB as float32
    model = _quantized(weight, np.array([0.5], np.float32), np.array([0], np.int8))
    with rnnport.limits(expansion=1.0), pytest.raises(BudgetError, match="expansion"), \
            peak_allocated() as peak:
        rnnport.read(model, dequantize=True)
    assert peak[0] < 6_000_000  # the int8 array read, never the float32 one


def test_a_huge_constant_of_shape_is_refused_before_the_check_makes_it() -> None:
    """The check that runs an unrolled cell's graph makes ConstantOfShape's zeros (a zero
    state for the batch given), paid for first."""
    rng = np.random.default_rng(0)
    tensors = [numpy_helper.from_array(rng.standard_normal((INPUT, 8)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal((HIDDEN, 8)).astype(np.float32), "R"),
               numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "huge")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["xw"]),
             helper.make_node("MatMul", ["h", "R"], ["hr"]),
             helper.make_node("Add", ["xw", "hr"], ["gates"]),
             helper.make_node("Tanh", ["gates"], ["y"]),
             helper.make_node("ConstantOfShape", ["huge"], ["zeros"]),
             helper.make_node("Add", ["y", "zeros"], ["padded"])]  # near the step: run
    graph = helper.make_graph(
        nodes, "cell", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, INPUT]),
                        helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("zeros", TensorProto.FLOAT, None)], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with peak_allocated() as peak, pytest.raises(BudgetError, match=r"would make a value of shape "
                                                           r"\(1048576, 1048576\)"):
        rnnport.read(model)
    assert peak[0] < 50_000_000
