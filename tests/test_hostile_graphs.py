"""Crafted graphs that share, call themselves, nest and repeat: ONNX models and TensorFlow's
protobufs (frozen graphs), each small, built here with the builders of ``hostile_cases``.
Each must end in a model or an rnnport error, within the budgets of :mod:`rnnport.budget`
(what it builds paid for before it is built, what it walks counted as it is walked), and
never in RecursionError, ValueError or memory out of proportion to the file.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from hostile_cases import (
    deep_call,
    graphdef_cell_steps,
    graphdef_empty_strings,
    graphdef_filled_consts,
    graphdef_split_nesting,
    onnx_calling,
    onnx_cell_loops,
    onnx_lstm_chain,
    onnx_products,
    peak_allocated,
)
from onnx import TensorProto, helper, numpy_helper

import rnnport
from rnnport.formats.onnx.graph import MAX_SCOPE_DEPTH
from rnnport.io import tfproto
from rnnport.io import tfproto_encode as encode

# -- ONNX: one stored tensor shared by many nodes -------------------------------------------------


def test_lstm_nodes_sharing_one_initializer_are_paid_for_before_their_copies() -> None:
    """200 LSTM nodes take one stored 256 KiB W as W and R: 100 MiB of layers were built
    before any limit was asked (the last round's 4 MB → 3.3 GB); each node's copies are
    charged first now, and the shared W is decoded once."""
    model = onnx_lstm_chain(200, 128)
    with rnnport.limits(expansion=1), peak_allocated() as peak, \
            pytest.raises(rnnport.LimitError, match=r"ONNX LSTM node 'y\d+'.*limit 'expansion'") \
            as error:
        rnnport.read(model)
    assert error.value.limit == "expansion"
    assert peak[0] < 12 << 20


def test_a_shared_initializer_is_decoded_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three layers, six uses of one stored W: decoded once, and the network reads."""
    decoded: list[str] = []
    original = numpy_helper.to_array

    def counted(tensor: Any, *args: Any, **kwargs: Any) -> np.ndarray:
        decoded.append(tensor.name)
        return original(tensor, *args, **kwargs)

    monkeypatch.setattr(numpy_helper, "to_array", counted)
    model = rnnport.read(onnx_lstm_chain(3, 4))
    assert isinstance(model, rnnport.RNN) and model.spec.num_layers == 3
    assert decoded.count("W") == 1


def test_following_each_layers_state_back_is_counted_against_the_work_limit() -> None:
    """100 chained LSTM nodes all starting from one state at the end of 6,000 Identity
    nodes: telling an encoder's state handed to its decoder apart followed the chain once
    per node (the file's 170 KB read 600,000 nodes); each node followed now counts."""
    model = onnx_lstm_chain(100, 2, state_depth=6000)
    with pytest.raises(rnnport.LimitError, match="following a state back") as error:
        rnnport.read(model)
    assert error.value.limit == "work"
    read = rnnport.read(onnx_lstm_chain(3, 2, state_depth=10))
    assert isinstance(read, rnnport.RNN) and read.spec.num_layers == 3


# -- ONNX: functions that call themselves, scopes nested deep -----------------------------------


@pytest.mark.parametrize("chain", [["f"], ["f", "g"], ["f", "g", "h"]], ids=len)
def test_a_function_calling_itself_is_refused(chain: list[str]) -> None:
    """A 122-byte model whose local function calls itself made 10,000 scopes whose paths
    grew with the nesting: 2.7 GB before the call count stopped it."""
    calls = " → ".join(repr(name) for name in [*chain, chain[0]])
    with peak_allocated() as peak, pytest.raises(rnnport.FormatError) as error:
        rnnport.read(onnx_calling(chain, back=True))
    assert f"function {chain[0]!r} calls itself ({calls}); expected functions that call " \
           "others without coming back" in str(error.value)
    assert peak[0] < 8 << 20


def test_scopes_nest_to_a_bound_and_their_paths_do_not_grow_with_it() -> None:
    names = [f"f{index}" for index in range(MAX_SCOPE_DEPTH + 5)]
    with pytest.raises(rnnport.FormatError, match=rf"nested {MAX_SCOPE_DEPTH + 1} scopes deep; "
                                                  rf"expected at most {MAX_SCOPE_DEPTH}") as error:
        rnnport.read(onnx_calling(names, back=False))
    message = str(error.value)
    assert f"… ({MAX_SCOPE_DEPTH - 3} scopes out): " in message and len(message) < 800


def test_nested_loop_bodies_read_deep_in_the_callers_stack() -> None:
    """An LSTM in a Loop body inside 30 nested If branches reads with 100 frames of
    Python's stack left: no walk over a file's nesting recurses."""
    rng = np.random.default_rng(3)
    tensors = [numpy_helper.from_array(rng.standard_normal((1, 8, 3)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal((1, 8, 2)).astype(np.float32), "R")]
    inner = helper.make_graph([helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=2)],
                              "body", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                         None)], tensors)
    empty = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "empty", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, None)])
    for level in range(30):
        node = helper.make_node("If", ["c"], [f"o{level}"], then_branch=inner, else_branch=empty)
        inner = helper.make_graph([node], f"level{level}", [], [helper.make_tensor_value_info(
            f"o{level}", TensorProto.FLOAT, None)])
    graph = helper.make_graph(list(inner.node), "main",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3]),
                               helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                              [helper.make_tensor_value_info("o29", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    read = deep_call(100, lambda: rnnport.read(model))
    assert read.spec == rnnport.Spec("lstm", 3, 2, bias=False)


# -- ONNX: the check of an unrolled network ------------------------------------------------------


def test_pairing_products_does_not_try_every_pair() -> None:
    """3,000 MatMul → Tanh steps by one matrix, every product meeting the next: pairing
    them tried all 9 million pairs (0.4 MB: 32 s)."""
    model = onnx_products(3000)
    started = time.perf_counter()
    with pytest.raises(rnnport.UnsupportedFeatureError, match="computes none of the cells"):
        rnnport.read(model)
    assert time.perf_counter() - started < 3


def test_a_step_is_checked_without_running_the_whole_graph() -> None:
    """64 candidate cells beside 20,000 nodes that follow the input: each candidate's check
    ran every node of the graph (0.45 MB: 13 s); now the nodes near its products."""
    rng = np.random.default_rng(4)
    tensors, nodes = [], []
    for pair in range(64):
        tensors += [numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32),
                                            f"W{pair}"),
                    numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32),
                                            f"R{pair}")]
        nodes += [helper.make_node("MatMul", ["x", f"W{pair}"], [f"xw{pair}"]),
                  helper.make_node("MatMul", ["h", f"R{pair}"], [f"hr{pair}"]),
                  helper.make_node("Add", [f"xw{pair}", f"hr{pair}"], [f"s{pair}"]),
                  helper.make_node("Sigmoid", [f"s{pair}"], [f"y{pair}"])]
    nodes += [helper.make_node("Neg", ["x" if n == 0 else f"n{n - 1}"], [f"n{n}"])
              for n in range(20_000)]
    graph = helper.make_graph(
        nodes, "candidates", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                              helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    started = time.perf_counter()
    with pytest.raises(rnnport.UnsupportedFeatureError, match="computes none of the cells"):
        rnnport.read(model)
    assert time.perf_counter() - started < 4


def test_running_a_graph_is_counted_against_the_work_limit() -> None:
    with rnnport.limits(work=0.05), pytest.raises(rnnport.LimitError) as error:
        rnnport.read(onnx_products(200))
    assert error.value.limit == "work"
    assert "steps (nodes of every scope and function call" in str(error.value)


def test_a_cell_in_many_loops_is_checked_within_the_work_limit() -> None:
    """A cell stepped from zeros 500 times, each step a loop of its own: the check over the
    whole sequence looked for every loop's first state, and compared every loop's last
    output, among all the graph's values (57 KB: 7 s; 3,000 steps: minutes)."""
    model = onnx_cell_loops(500)
    started = time.perf_counter()
    with pytest.raises(rnnport.LimitError) as error:
        rnnport.read(model)
    assert error.value.limit == "work"
    assert time.perf_counter() - started < 3
    with rnnport.limits(work=1e6), pytest.raises(rnnport.UnsupportedFeatureError,
                                                 match=r"in 11 loops \(of 1, 1, 1, 1, 1, 1, 1, 1, …"):
        rnnport.read(onnx_cell_loops(10))


# -- protobuf: repetition, merged pieces, nesting ------------------------------------------------


def test_a_million_empty_strings_cost_their_bytes_not_a_million_objects() -> None:
    """One node's input list of 20,000 empty strings (40 KB): each kept as a tuple of a
    memoryview and two numbers while the message was read (6 MB here; 1.5 GB from 10 MB)."""
    data = graphdef_empty_strings(20_000)
    with peak_allocated() as peak:
        graph = tfproto.decode_graph_def(data)
    assert graph.node[0].input == ("",) * 20_000
    assert peak[0] < 2 << 20


def test_empty_messages_share_one_object() -> None:
    graph = tfproto.decode_graph_def(b"\x0a\x00" * 1000)
    assert len(graph.node) == 1000 and len({id(node) for node in graph.node}) == 1
    assert graph.node[0] == tfproto.NodeDef("", "")


def test_decoded_messages_are_paid_for_as_they_are_built() -> None:
    with rnnport.limits(expansion=0.001), pytest.raises(rnnport.LimitError) as error:
        tfproto.decode_graph_def(graphdef_empty_strings(50_000), where="m.pb")
    assert error.value.limit == "expansion"
    assert "m.pb: reading it would take" in str(error.value)
    assert "bytes of decoded messages (an estimate; decoded messages may take 4 times" in \
        str(error.value)


def test_a_message_given_in_pieces_is_not_copied_at_every_level() -> None:
    """A function reference nested 30 deep, each level's message in two pieces over a 4 MiB
    string: every level joined its pieces into a copy of all the rest (120 MiB)."""
    data = graphdef_split_nesting(30, 4 << 20)
    with peak_allocated() as peak:
        graph = tfproto.decode_graph_def(data)
    value = graph.node[0].attr["deep"]
    for _ in range(30):
        assert isinstance(value.value, tfproto.NameAttrList) and value.value.name == "f"
        value = value.value.attr["k"]
    assert value.value == b"\0" * (4 << 20)
    assert peak[0] < 24 << 20


def test_nesting_never_meets_the_callers_stack() -> None:
    """A frozen graph whose one node nests 30 function references (90 messages, within
    protobuf's 100) reads with 100 frames of Python's stack left; it was "nested too deep
    for the Python stack that is left"."""
    rnn = rnnport.RNN.random(rnnport.Spec("gru", 3, 4), seed=5)
    frozen = bytes(rnnport.write(rnn, "tfgraph")) + graphdef_split_nesting(30, 8)
    read = deep_call(100, lambda: rnnport.read(frozen, fmt="tfgraph"))
    assert read.spec.hidden_size == 4


# -- frozen graphs: Consts, cells, sizes --------------------------------------------------------


def test_consts_filled_from_one_float_are_paid_for_before_they_are_filled() -> None:
    """16 kernels of shape (2048, 2048), each storing one float that TensorFlow repeats:
    16 MiB each, 256 MiB from 1 KB (3.9 GB from 3 KB with 60 of 4096²)."""
    data = graphdef_filled_consts(16, 2048)
    with peak_allocated() as peak, pytest.raises(rnnport.LimitError) as error:
        rnnport.read(data, fmt="tfgraph")
    assert error.value.limit == "expansion"
    assert "bytes of Const arrays (GraphDef bytes: node[1] ('rnn/cell_1/lstm_cell/kernel'" \
           in str(error.value)
    assert peak[0] < 40 << 20


def test_a_const_is_decoded_once() -> None:
    value = tfproto.decode_tensor_value(encode.tensor_proto(np.arange(6, dtype=np.float32)))
    assert value.numpy() is value.numpy()


def test_cell_steps_are_matched_without_trying_every_cell() -> None:
    """1,500 cells and 1,500 steps: each step was matched against every cell (0.75 MB of
    3,000 each: 14 s)."""
    data = graphdef_cell_steps(1500)
    started = time.perf_counter()
    with pytest.raises(rnnport.AmbiguousSourceError, match=r"holds 1500 recurrent networks") \
            as error:
        rnnport.read(data, fmt="tfgraph")
    assert time.perf_counter() - started < 2.5
    assert "… and 1,480 more" in str(error.value)


def _cudnn_graph(dims: bytes) -> bytes:
    """A CudnnRNN node whose input_h is a Fill of the Const (or Pack of Consts) ``dims``
    gives (node bytes): its shape solves the buffer's."""
    params = np.random.default_rng(0).standard_normal(144).astype(np.float32)
    nodes = [encode.node_def("x", "Placeholder", [], {"dtype": encode.attr_type(np.float32)}),
             encode.node_def("params", "Const", [], {"value": encode.attr_tensor(params)}),
             encode.node_def("h", "Fill", ["dims", "value"]),
             encode.node_def("rnn", "CudnnRNN", ["x", "h", "h", "params"],
                             {"rnn_mode": encode.attr_string("lstm")})]
    return encode.graph_def(nodes) + dims


def _const(name: str, tensor: bytes) -> bytes:
    return encode.graph_def([encode.node_def(name, "Const", [],
                                             {"value": encode._bytes_field(8, tensor)})])


PACK = encode.graph_def([encode.node_def("dims", "Pack", ["d", "d", "d"])])


@pytest.mark.parametrize("dims", [
    _const("dims", encode.tensor_proto(np.array([np.nan, 1, 4], np.float32))),
    _const("dims", encode.tensor_proto(np.array([np.inf, 1, 4], np.float64))),
    _const("d", b"\x08\x07\x12\x00\x42\x03abc") + PACK,  # a string: DT_STRING, 'abc'
    _const("d", encode.tensor_proto(np.array([1, 2], np.int32))) + PACK,
], ids=["nan", "inf", "string", "vector"])
def test_sizes_from_consts_that_are_no_integers_tell_nothing(dims: bytes) -> None:
    """int() of NaN, inf, text or a vector raised ValueError, OverflowError or TypeError."""
    with pytest.raises(rnnport.AmbiguousSourceError, match=r"144 elements fit \d+ lstm networks"):
        rnnport.read(_cudnn_graph(dims), fmt="tfgraph")
