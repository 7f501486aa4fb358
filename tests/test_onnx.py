"""ONNX: graphs rnnport writes run in ONNX Runtime; files from PyTorch's exporter read back."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from golden_cases import flatten_state, load, names
from onnx import helper, numpy_helper

import rnnport
from rnnport import RNN, Spec
from rnnport.cli import main
from rnnport.errors import AmbiguousSourceError, FormatError, UnsupportedFeatureError
from rnnport.formats.onnx import run_reference


def state_feeds(model: rnnport.Model, state: Any) -> dict[str, np.ndarray]:
    if state is None:
        return {}
    parts = [state] if isinstance(model, RNN) else list(state)
    suffix = (lambda i: "") if isinstance(model, RNN) else (lambda i: f"_{i}")
    feeds = {}
    for index, part in enumerate(parts):
        h, c = (part if isinstance(part, tuple) else (part, None))
        feeds[f"initial_h{suffix(index)}"] = np.asarray(h, np.float32)
        if c is not None:
            feeds[f"initial_c{suffix(index)}"] = np.asarray(c, np.float32)
    return feeds


def onnx_state(model: rnnport.Model, out: dict[str, np.ndarray]) -> list[np.ndarray]:
    parts = [model] if isinstance(model, RNN) else list(model.parts)
    suffix = (lambda i: "") if isinstance(model, RNN) else (lambda i: f"_{i}")
    found = []
    for index, part in enumerate(parts):
        found.append(out[f"h_n{suffix(index)}"])
        if part.spec.cell == "lstm":
            found.append(out[f"c_n{suffix(index)}"])
    return found


@pytest.mark.parametrize("name", names())
def test_golden_cases_run_in_onnx_runtime(name: str) -> None:
    case = load(name)
    model = case.read()
    specs = model.specs if isinstance(model, rnnport.Stack) else [model.spec]
    if any(spec.proj_size for spec in specs):
        with pytest.raises(UnsupportedFeatureError, match="cannot hold an LSTM projection"):
            rnnport.write(model, "onnx")
        return
    feeds = state_feeds(model, case.initial_state(model))
    proto = rnnport.write(model, "onnx", lengths=case.lengths is not None,
                          initial_state=bool(feeds))
    if case.lengths is not None:
        feeds["sequence_lens"] = case.lengths.astype(np.int32)
    out = run_reference(proto, case.arrays["x"], **feeds)
    mask = case.valid_mask()
    np.testing.assert_allclose(np.where(mask, out["y"], 0), np.where(mask, case.arrays["y"], 0),
                               atol=1e-5, rtol=0)
    for got, want in zip(onnx_state(model, out), flatten_state(case.final_state(model)),
                         strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("name", ["torch_lstm_bi_2layer", "keras_stack_lstm_gru", "torch_gru"])
def test_defaults_are_full_length_and_zero_state(name: str) -> None:
    model = load(name).read()
    x = load(name).arrays["x"]
    proto = rnnport.write(model, "onnx")
    assert [value.name for value in proto.graph.input] == ["x"]
    plain = run_reference(proto, x)
    zeros = {k: np.zeros_like(v) for k, v in state_feeds(model, model.forward(x)[1]).items()}
    fed = run_reference(rnnport.write(model, "onnx", lengths=True, initial_state=True), x,
                        sequence_lens=np.full(x.shape[0], x.shape[1], np.int32), **zeros)
    for key in plain:
        np.testing.assert_array_equal(plain[key], fed[key])
    np.testing.assert_allclose(plain["y"], model.forward(x)[0], atol=1e-5)


def test_time_major_interface() -> None:
    model = RNN.random(Spec("gru", 3, 4, bidirectional=True))
    x = np.random.default_rng(0).uniform(-1, 1, (5, 2, 3)).astype(np.float32)
    out = run_reference(rnnport.write(model, "onnx", time_major=True), x)
    np.testing.assert_allclose(out["y"], model.forward(x, time_major=True)[0], atol=1e-6)


def test_file_is_saved_atomically_and_reads_back(tmp_path: Path) -> None:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, peepholes=True))
    target = tmp_path / "model.onnx"
    rnnport.write(model, "onnx", path=target)
    assert [p.name for p in tmp_path.iterdir()] == ["model.onnx"]
    assert rnnport.read(target) == model
    assert rnnport.read(str(target), "onnx") == model


def test_opset_must_be_14_or_later() -> None:
    for opset in (13, "17"):
        with pytest.raises(FormatError, match="expected 14 or later"):
            rnnport.write(RNN.random(Spec("gru", 3, 4)), "onnx", opset=opset)
    assert rnnport.write(RNN.random(Spec("gru", 3, 4)), "onnx", opset=14).opset_import[0].version == 14


def test_projection_is_refused() -> None:
    with pytest.raises(UnsupportedFeatureError, match="cannot hold an LSTM projection"):
        rnnport.write(RNN.random(Spec("lstm", 3, 4, proj_size=2)), "onnx")


# -- files from PyTorch's own exporter ------------------------------------------------------

TORCH_MODULES = {
    "lstm": lambda: torch.nn.LSTM(4, 5, batch_first=True),
    "lstm_bi_2layer": lambda: torch.nn.LSTM(4, 5, num_layers=2, bidirectional=True,
                                            batch_first=True),
    "gru_2layer": lambda: torch.nn.GRU(4, 5, num_layers=2, batch_first=True),
    "gru_bi": lambda: torch.nn.GRU(4, 5, bidirectional=True, batch_first=True),
    "rnn_relu_bi_3layer": lambda: torch.nn.RNN(4, 5, num_layers=3, nonlinearity="relu",
                                               bidirectional=True, batch_first=True),
}


def torch_export(module: torch.nn.Module, x: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracer notes
        torch.onnx.export(module, (torch.from_numpy(x),), buffer, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return buffer.getvalue()


@pytest.mark.parametrize("name", sorted(TORCH_MODULES))
def test_pytorch_exported_models_read_back(name: str, tmp_path: Path) -> None:
    torch.manual_seed(3)
    module = TORCH_MODULES[name]().eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.uniform_(-0.5, 0.5)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 6, 4)).astype(np.float32)
    path = tmp_path / f"{name}.onnx"
    path.write_bytes(torch_export(module, x))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = session.run(["y"], {"x": x})[0]
    model = rnnport.read(path)
    assert model == rnnport.read(module)
    np.testing.assert_allclose(model.forward(x)[0], expected, atol=1e-5, rtol=0)


# -- round trips and bad input --------------------------------------------------------------

@pytest.mark.parametrize("spec", [
    Spec("lstm", 3, 4, num_layers=3, bidirectional=True),
    Spec("lstm", 3, 4, peepholes=True, bidirectional=True, bias=False),
    Spec("gru", 3, 4, reset_after=False, num_layers=2),
    Spec("gru", 3, 4, bidirectional=True),
    Spec("rnn_relu", 3, 4, num_layers=2, bidirectional=True),
], ids=lambda s: s.describe())
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_round_trip_is_bit_exact(spec: Spec, dtype: type) -> None:
    model = RNN.random(spec, seed=2, dtype=dtype)
    proto = rnnport.write(model, "onnx")
    assert rnnport.read(proto) == model
    assert rnnport.read(proto.graph, "onnx") == model
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    tolerance = 1e-5 if dtype != np.float16 else 1e-3
    np.testing.assert_allclose(run_reference(proto, x)["y"], model.forward(x)[0], atol=tolerance)


def lstm_node_model(**attributes: Any) -> onnx.ModelProto:
    model = rnnport.write(RNN.random(Spec("lstm", 3, 4)), "onnx")
    node = next(n for n in model.graph.node if n.op_type == "LSTM")
    for key, value in attributes.items():
        node.attribute.append(helper.make_attribute(key, value))
    return model


def test_activations_the_runtime_cannot_compute() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"ONNX LSTM node '.*': activations="
                       r"\['Gelu', 'Tanh', 'Tanh'\]; 'Gelu' is not one of the functions"):
        rnnport.read(lstm_node_model(activations=["Gelu", "Tanh", "Tanh"]))


def test_activation_parameters_are_consumed_in_order() -> None:
    model = lstm_node_model(activations=["HardSigmoid", "LeakyRelu", "ScaledTanh"],
                            activation_alpha=[0.3, 0.05, 0.8], activation_beta=[0.4])
    assert rnnport.read(model).spec.activations == (
        ("HardSigmoid", 0.3, 0.4), ("LeakyRelu", 0.05, 0.0), ("ScaledTanh", 0.8, 1.0))


@pytest.mark.parametrize("cell, activations", [
    ("lstm", [("HardSigmoid", 0.3, 0.4), ("Softsign",), ("ScaledTanh", 0.8, 1.3)]),
    ("lstm", [("Sigmoid",), ("Elu", 0.7), ("LeakyRelu", 0.05)]),
    ("lstm", [("Affine", 0.5, 0.1), ("Relu",), ("ThresholdedRelu", 0.2)]),
    ("gru", [("HardSigmoid",), ("Softplus",)]),
    ("gru", [("Affine", 0.3, 0.2), ("ScaledTanh", 1.1, 0.9)]),
], ids=str)
def test_alternative_activations_match_onnx_runtime(cell: str, activations: list) -> None:
    spec = Spec(cell, 3, 4, activations=activations, bidirectional=True)
    model = RNN.random(spec, seed=1, scale=1.0)
    proto = rnnport.write(model, "onnx")
    assert rnnport.read(proto) == model
    x = np.random.default_rng(0).uniform(-2, 2, (3, 6, 3)).astype(np.float32)
    out = run_reference(rnnport.write(model, "onnx", lengths=True), x,
                        sequence_lens=np.array([6, 3, 5], np.int32))
    y, _ = model.forward(x, lengths=[6, 3, 5])
    np.testing.assert_allclose(out["y"], y, atol=1e-5, rtol=0)
    default = RNN(spec.replace(activations=()), model.params)
    assert not np.allclose(default.forward(x)[0], y, atol=1e-3)


def test_clip_and_input_forget_attributes_are_read() -> None:
    spec = rnnport.read(lstm_node_model(clip=0.3, input_forget=1)).spec
    assert spec.gate_clip == 0.3 and spec.input_forget


@pytest.mark.parametrize("spec", [
    Spec("lstm", 3, 4, gate_clip=0.7, bidirectional=True),
    Spec("lstm", 3, 4, gate_clip=0.7, peepholes=True),
    Spec("lstm", 3, 4, input_forget=True, peepholes=True, bidirectional=True),
    Spec("lstm", 3, 4, input_forget=True, gate_clip=0.5, num_layers=2),
    Spec("gru", 3, 4, gate_clip=0.6),
    Spec("gru", 3, 4, gate_clip=0.6, reset_after=False, bidirectional=True),
    Spec("rnn_tanh", 3, 4, gate_clip=0.4),
    Spec("rnn_relu", 3, 4, gate_clip=0.4),
], ids=lambda s: s.describe())
def test_gate_clip_and_input_forget_match_onnx_runtime(spec: Spec) -> None:
    model = RNN.random(spec, seed=1, scale=1.5)  # large weights so the clip bites
    x = np.random.default_rng(0).uniform(-2, 2, (3, 6, 3)).astype(np.float32)
    proto = rnnport.write(model, "onnx")
    assert rnnport.read(proto) == model
    _matches_onnx_runtime(model, x, states=False)
    unclipped = RNN(spec.replace(gate_clip=None, input_forget=False), model.params)
    assert not np.allclose(unclipped.forward(x)[0], model.forward(x)[0], atol=1e-3)


def _matches_onnx_runtime(model: RNN, x: np.ndarray, *, states: bool) -> None:
    """ONNX Runtime running ``model`` written as ONNX gives its y (and final states), over
    full lengths (the graph without a lengths input) and uneven ones."""
    for lengths in (None, np.array([6, 3, 5])):
        proto = rnnport.write(model, "onnx", lengths=lengths is not None)
        out = run_reference(proto, x, sequence_lens=None if lengths is None
                            else lengths.astype(np.int32))
        y, state = model.forward(x, lengths=lengths)
        np.testing.assert_allclose(out["y"], y, atol=1e-5, rtol=0)
        if states:
            for got, want in zip(onnx_state(model, out), flatten_state(state), strict=True):
                np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


@pytest.mark.parametrize("spec", [
    Spec("lstm", 3, 4, reverse=True, num_layers=2),
    Spec("lstm", 3, 4, reverse=True, peepholes=True),
    Spec("gru", 3, 4, reverse=True),
    Spec("gru", 3, 4, reverse=True, reset_after=False),
    Spec("rnn_relu", 3, 4, reverse=True),
], ids=lambda s: s.describe())
def test_reverse_networks_match_onnx_runtime(spec: Spec) -> None:
    """direction="reverse": each sequence from its last valid step, outputs in time order."""
    model = RNN.random(spec, seed=2)
    x = np.random.default_rng(1).uniform(-1, 1, (3, 6, 3)).astype(np.float32)
    proto = rnnport.write(model, "onnx")
    assert {a.s for n in proto.graph.node if n.op_type in ("LSTM", "GRU", "RNN")
            for a in n.attribute if a.name == "direction"} == {b"reverse"}
    assert rnnport.read(proto) == model
    _matches_onnx_runtime(model, x, states=True)
    forward = RNN(spec.replace(reverse=False), model.params)
    assert not np.allclose(forward.forward(x)[0], model.forward(x)[0], atol=1e-3)


def test_graph_without_rnn_node() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["a"], ["b"])], "g",
                              [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])])
    with pytest.raises(FormatError, match=r"has no LSTM, GRU or RNN node \(its operators: Relu\)"):
        rnnport.read(helper.make_model(graph), "onnx")


_RNG = np.random.default_rng(0)
# A graph that looks like one step of an unrolled nn.RNN (a 3-D input, a product, Tanh); and
# what onnxruntime.quantization.quantize_dynamic makes of a network's MatMul.
UNREAD_GRAPHS = {
    "one step": ([helper.make_node("Squeeze", ["x", "axis"], ["x0"]),
                  helper.make_node("MatMul", ["x0", "W"], ["xw"]),
                  helper.make_node("Add", ["xw", "b"], ["z"])], [1, 2, 3],
                 [numpy_helper.from_array(np.array([0]), "axis"),
                  numpy_helper.from_array(_RNG.random((3, 4), np.float32), "W"),
                  numpy_helper.from_array(_RNG.random(4, np.float32), "b")], FormatError,
                 r"An nn.RNN, or a cell stepped in a loop, exported with a single time step "
                 r"never multiplies its state.*export it with two or more steps \(for nn.RNN, "
                 "PyTorch's TorchScript exporter"),
    "quantized": ([helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "scale", "zero"]),
                   helper.make_node("MatMulInteger", ["xq", "W", "zero", "W_zero"], ["product"]),
                   helper.make_node("Cast", ["product"], ["real"], to=onnx.TensorProto.FLOAT),
                   helper.make_node("Mul", ["real", "scale"], ["z"])], [2, 3],
                  [numpy_helper.from_array(_RNG.integers(-9, 9, (3, 4)).astype(np.int8), "W"),
                   numpy_helper.from_array(np.array(0, np.int8), "W_zero")],
                  UnsupportedFeatureError,
                  r"ONNX Runtime's quantized matrix products \(MatMulInteger\), as onnxruntime."
                  r"quantization.quantize_dynamic writes.*read the float model the quantizer "
                  "was given"),
}


@pytest.mark.parametrize("name", sorted(UNREAD_GRAPHS))
def test_graphs_that_hold_no_network_rnnport_reads_say_why(name: str) -> None:
    nodes, shape, tensors, error, why = UNREAD_GRAPHS[name]
    model = helper.make_model(helper.make_graph(
        [*nodes, helper.make_node("Tanh", ["z"], ["y"])], "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], tensors))
    with pytest.raises(error, match=why):
        rnnport.read(model)


def test_weights_fed_at_run_time() -> None:
    value = lambda name, shape: helper.make_tensor_value_info(  # noqa: E731
        name, onnx.TensorProto.FLOAT, shape)
    node = helper.make_node("GRU", ["x", "W", "R"], ["y"], hidden_size=4)
    graph = helper.make_graph([node], "g", [value("x", [5, 1, 3]), value("W", [1, 12, 3])],
                              [value("y", None)],
                              [numpy_helper.from_array(np.zeros((1, 12, 4), np.float32), "R")])
    with pytest.raises(UnsupportedFeatureError, match="'W' is a graph input fed at run time"):
        rnnport.read(helper.make_model(graph))


def test_several_networks_ask_for_a_node() -> None:
    first = rnnport.write(RNN.random(Spec("lstm", 3, 4)), "onnx")
    second = rnnport.write(RNN.random(Spec("gru", 3, 2), seed=5), "onnx")
    merged = onnx.compose.merge_models(
        first, second, io_map=[], prefix1="a_", prefix2="b_")
    with pytest.raises(AmbiguousSourceError, match="holds 2 separate recurrent networks"):
        rnnport.read(merged)
    gru = next(n for n in merged.graph.node if n.op_type == "GRU")
    assert rnnport.read(merged, node=gru.name).spec == Spec("gru", 3, 2)


def _glued(proto: onnx.ModelProto, *nodes: Any) -> onnx.ModelProto:
    """``proto`` (two layers written by rnnport) with ``nodes`` between the first layer's
    glue and the second layer, which takes the last one's output."""
    second = [node for node in proto.graph.node if node.op_type in ("LSTM", "GRU", "RNN")][1]
    name = second.input[0]
    for node in nodes:
        node.input[0] = name
        name = node.output[0]
    second.input[0] = name
    position = list(proto.graph.node).index(second)
    for offset, node in enumerate(nodes):
        proto.graph.node.insert(position + offset, node)
    return proto


def test_glue_that_hands_the_output_on_unchanged_joins_layers() -> None:
    model = RNN.random(Spec("gru", 3, 4, num_layers=2, bidirectional=True), seed=2)
    proto = _glued(rnnport.write(model, "onnx", time_major=True),
                   helper.make_node("Dropout", ["?"], ["dropped"]),
                   helper.make_node("Identity", ["?"], ["same"]))
    assert rnnport.read(proto) == model


def test_glue_that_moves_the_output_leaves_two_networks() -> None:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True), seed=3)
    proto = _glued(rnnport.write(model, "onnx", time_major=True),
                   helper.make_node("Transpose", ["?"], ["swapped"], perm=[1, 0, 2]))
    with pytest.raises(AmbiguousSourceError, match=r"2 separate recurrent networks .*the nodes "
                       r"between them rearrange its Y \(a stack's next layer takes Y \[T, D, B, "
                       r"H\] as X \[T, B, D·H\]"):
        rnnport.read(proto)
    first = next(node for node in proto.graph.node if node.op_type == "LSTM")
    assert rnnport.read(proto, node=first.name) == model.layers()[0]


def test_a_state_that_does_not_fit_the_node_is_refused() -> None:
    proto = rnnport.write(RNN.random(Spec("gru", 3, 4), seed=4), "onnx")
    node = next(node for node in proto.graph.node if node.op_type == "GRU")
    while len(node.input) < 6:
        node.input.append("")
    node.input[5] = "h0"
    proto.graph.initializer.append(numpy_helper.from_array(np.zeros((2, 1, 4), np.float32), "h0"))
    with pytest.raises(FormatError, match=r"initial_h \[2, batch, 4\]; expected \[1, batch, 4\] "
                       r"\(1 direction\(s\), hidden_size=4\)\. The node's state does not fit"):
        rnnport.read(proto)


def test_truncated_file(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    rnnport.write(RNN.random(Spec("lstm", 3, 4)), "onnx", path=target)
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError, match="not a readable ONNX model"):
        rnnport.read(target)
    assert target.read_bytes() == data[: len(data) // 2]


def test_malformed_graphs_get_rnnport_errors() -> None:
    import onnx

    def model() -> onnx.ModelProto:
        return rnnport.write(RNN.random(rnnport.Spec("lstm", 2, 3)), "onnx")

    def lstm(proto: onnx.ModelProto) -> onnx.NodeProto:
        return next(n for n in proto.graph.node if n.op_type == "LSTM")

    def replace(proto: onnx.ModelProto, node: onnx.NodeProto) -> onnx.ModelProto:
        """The LSTM's W initializer computed by ``node`` instead."""
        name = lstm(proto).input[1]
        kept = [t for t in proto.graph.initializer if t.name != name]
        del proto.graph.initializer[:]
        proto.graph.initializer.extend(kept)
        proto.graph.node.insert(0, node)
        return proto

    truncated = model()
    weights = next(t for t in truncated.graph.initializer if t.name == lstm(truncated).input[1])
    weights.raw_data = onnx.numpy_helper.to_array(weights).tobytes()[:7]
    cyclic = model()
    name = lstm(cyclic).input[1]
    replace(cyclic, onnx.helper.make_node("Identity", [name], [name]))
    untyped = model()
    name = lstm(untyped).input[1]
    untyped.graph.initializer.append(onnx.numpy_helper.from_array(
        np.zeros((1, 12, 2), np.float32), "source"))
    replace(untyped, onnx.helper.make_node("Cast", ["source"], [name]))
    clipped = model()
    lstm(clipped).attribute.append(onnx.helper.make_attribute("clip", "x"))
    for proto, message in ((truncated, "cannot be read"), (cyclic, "computed from itself"),
                           (untyped, "not an ONNX tensor type"),
                           (clipped, "attribute 'clip' is 'x'; expected a float")):
        with pytest.raises(rnnport.FormatError, match=message):
            rnnport.read(proto, "onnx")


# -- the interface: required inputs only, nothing ONNX Runtime warns about ------------------

INTERFACE_MODELS = {
    "lstm_bi_2layer_peepholes": lambda: RNN.random(Spec("lstm", 3, 4, num_layers=2,
                                                        bidirectional=True, peepholes=True), seed=1),
    "gru_bi_2layer": lambda: RNN.random(Spec("gru", 3, 4, num_layers=2, bidirectional=True),
                                        seed=2),
    "gru_reset_before": lambda: RNN.random(Spec("gru", 3, 5, reset_after=False), seed=3),
    "rnn_relu_bi_3layer": lambda: RNN.random(Spec("rnn_relu", 3, 4, num_layers=3,
                                                  bidirectional=True), seed=4),
    "rnn_tanh": lambda: RNN.random(Spec("rnn_tanh", 3, 4), seed=5),
    "stack_lstm_gru": lambda: rnnport.Stack([
        RNN.random(Spec("lstm", 3, 4), seed=6),
        RNN.random(Spec("gru", 4, 5, bidirectional=True), seed=7)]),
}
INTERFACES = [{}, {"lengths": True}, {"initial_state": True},
              {"lengths": True, "initial_state": True},
              {"lengths": True, "initial_state": True, "time_major": True}]
# Creates a session per model with ONNX Runtime's default logging (warnings and above, on
# stderr, where a fresh process prints them), runs it on the saved feeds, saves the outputs.
SESSIONS = """
import json, sys
import numpy as np
import onnxruntime
for job in json.loads(sys.argv[1]):
    session = onnxruntime.InferenceSession(job["model"], providers=["CPUExecutionProvider"])
    feeds = dict(np.load(job["feeds"]))
    names = [output.name for output in session.get_outputs()]
    np.savez(job["out"], **dict(zip(names, session.run(None, feeds))))
"""


def _run_in_fresh_process(jobs: list[dict[str, str]]) -> str:
    """Run ``jobs`` (model, feeds, out paths) in a new Python process; its stderr."""
    done = subprocess.run([sys.executable, "-c", SESSIONS, json.dumps(jobs)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stderr


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if "[W:" in line or "[E:" in line or "initializer" in line.lower()
            or "warning" in line.lower()]


def _interface_feeds(model: rnnport.Model, options: dict[str, bool], x: np.ndarray,
                     lengths: np.ndarray, state: Any) -> dict[str, np.ndarray]:
    feeds = {"x": x.transpose(1, 0, 2) if options.get("time_major") else x}
    if options.get("lengths"):
        feeds["sequence_lens"] = lengths.astype(np.int32)
    if options.get("initial_state"):
        feeds.update(state_feeds(model, state))
    return feeds


def _random_state(model: rnnport.Model, batch: int, rng: np.random.Generator) -> Any:
    def one(part: RNN) -> Any:
        spec = part.spec
        stacked = spec.num_layers * spec.num_directions
        h = rng.uniform(-1, 1, (stacked, batch, spec.output_size)).astype(np.float32)
        if spec.cell != "lstm":
            return h
        return h, rng.uniform(-1, 1, (stacked, batch, spec.hidden_size)).astype(np.float32)

    return one(model) if isinstance(model, RNN) else [one(part) for part in model.parts]


def test_written_models_load_without_warnings_and_match_forward(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    x = rng.uniform(-1, 1, (3, 6, 3)).astype(np.float32)
    lengths = np.array([6, 2, 4])
    jobs, expected = [], []
    for name, build in INTERFACE_MODELS.items():
        model = build()
        state = _random_state(model, x.shape[0], rng)
        for index, options in enumerate(INTERFACES):
            proto = rnnport.write(model, "onnx", **options)
            inputs = [value.name for value in proto.graph.input]
            feeds = _interface_feeds(model, options, x, lengths, state)
            assert sorted(inputs) == sorted(feeds)
            assert not set(inputs) & {tensor.name for tensor in proto.graph.initializer}
            assert rnnport.read(proto) == model
            stem = tmp_path / f"{name}_{index}"
            rnnport.write(model, "onnx", path=f"{stem}.onnx", **options)
            np.savez(f"{stem}_feeds.npz", **feeds)
            jobs.append({"model": f"{stem}.onnx", "feeds": f"{stem}_feeds.npz",
                         "out": f"{stem}_out.npz"})
            y, final = model.forward(
                x, state=state if options.get("initial_state") else None,
                lengths=lengths if options.get("lengths") else None)
            expected.append((f"{name} {options}", model, options, y, final))
    stderr = _run_in_fresh_process(jobs)
    assert _warnings(stderr) == [], stderr
    for job, (label, model, options, y, final) in zip(jobs, expected, strict=True):
        out = dict(np.load(job["out"]))
        got = out["y"].transpose(1, 0, 2) if options.get("time_major") else out["y"]
        np.testing.assert_allclose(got, y, atol=1e-5, rtol=0, err_msg=label)
        for got_state, want in zip(onnx_state(model, out), flatten_state(final), strict=True):
            np.testing.assert_allclose(got_state, want, atol=1e-5, rtol=0, err_msg=label)


def _legacy(model: rnnport.Model, batch: int, steps: int) -> onnx.ModelProto:
    """A graph as rnnport wrote them before: the optional inputs are also initializers
    holding their defaults (full length, zero state)."""
    proto = rnnport.write(model, "onnx", lengths=True, initial_state=True)
    for value in proto.graph.input[1:]:
        shape = [dim.dim_value or batch for dim in value.type.tensor_type.shape.dim]
        default = np.full(shape, steps, np.int32) if value.name == "sequence_lens" \
            else np.zeros(shape, np.float32)
        proto.graph.initializer.append(numpy_helper.from_array(default, value.name))
    return proto


def test_the_warning_check_sees_initializers_among_the_inputs(tmp_path: Path) -> None:
    """The check above is not blind: a graph like those rnnport wrote before warns once per
    initializer that is also an input, and still reads back as the same network."""
    model = INTERFACE_MODELS["lstm_bi_2layer_peepholes"]()
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    proto = _legacy(model, *x.shape[:2])
    assert rnnport.read(proto) == model
    (tmp_path / "legacy.onnx").write_bytes(proto.SerializeToString())
    np.savez(tmp_path / "feeds.npz", x=x)
    stderr = _run_in_fresh_process([{"model": str(tmp_path / "legacy.onnx"),
                                     "feeds": str(tmp_path / "feeds.npz"),
                                     "out": str(tmp_path / "out.npz")}])
    found = _warnings(stderr)
    assert len(found) == 3 and all("appears in graph inputs" in line for line in found), stderr
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], model.forward(x)[0],
                               atol=1e-5, rtol=0)


@pytest.mark.parametrize("option", ["lengths", "initial_state", "time_major"])
def test_interface_options_are_true_or_false(option: str) -> None:
    with pytest.raises(FormatError, match=rf"write\(fmt='onnx'\): {option}=1; expected True "
                                          "or False"):
        rnnport.write(RNN.random(Spec("gru", 3, 4)), "onnx", **{option: 1})


# -- framework_forward: ONNX Runtime running a source file ---------------------------------

def _framework_forward(source: Any, model: rnnport.Model, x: np.ndarray) -> Any:
    run = rnnport.formats.get("onnx").framework_forward
    assert run is not None
    return run(source, model, x)


@pytest.mark.parametrize("options", INTERFACES, ids=str)
@pytest.mark.parametrize("name", ["lstm_bi_2layer_peepholes", "stack_lstm_gru"])
def test_framework_forward_runs_a_written_file(tmp_path: Path, name: str,
                                               options: dict[str, bool]) -> None:
    model = INTERFACE_MODELS[name]()
    path = tmp_path / "m.onnx"
    rnnport.write(model, "onnx", path=path, **options)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 7, 3)).astype(np.float32)
    found = _framework_forward(path, rnnport.read(path), x)
    assert not isinstance(found, str), found
    label, y = found
    assert label == "ONNX Runtime running m.onnx"
    np.testing.assert_allclose(y, model.forward(x)[0], atol=1e-5, rtol=0)
    assert _framework_forward(str(path), model, x[:, :3])[1].shape == (2, 3, model.output_size)


def test_framework_forward_runs_a_pytorch_export(tmp_path: Path) -> None:
    torch.manual_seed(4)
    module = TORCH_MODULES["lstm_bi_2layer"]().eval()
    x = np.random.default_rng(1).uniform(-1, 1, (2, 6, 4)).astype(np.float32)
    path = tmp_path / "exported.onnx"
    path.write_bytes(torch_export(module, x))
    model = rnnport.read(path)
    found = _framework_forward(path, model, x)
    assert not isinstance(found, str), found
    with torch.no_grad():
        want = module(torch.from_numpy(x))[0].numpy()
    np.testing.assert_allclose(found[1], want, atol=1e-5, rtol=0)
    np.testing.assert_allclose(found[1], model.forward(x)[0], atol=1e-5, rtol=0)
    # The exporter fixed the example's shape: another length cannot run.
    assert _framework_forward(path, model, x[:, :4]) == (
        "the graph's input 'x' is declared [2, 6, 4], which holds the check's input (batch, "
        "time, input) = (2, 4, 4) neither batch-first nor time-major: no framework check")


def test_framework_forward_says_why_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = RNN.random(Spec("lstm", 3, 4), seed=1)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    proto = rnnport.write(model, "onnx", initial_state=True)
    assert _framework_forward(proto, model, x) == (
        "only an .onnx file holds a model ONNX Runtime can run: no framework check")
    # An input it cannot build: the state under another name.
    renamed = rnnport.write(model, "onnx", initial_state=True)
    for node in renamed.graph.node:
        node.input[:] = ["h0" if name == "initial_h" else name for name in node.input]
    renamed.graph.input[1].name = "h0"
    (tmp_path / "renamed.onnx").write_bytes(renamed.SerializeToString())
    assert _framework_forward(tmp_path / "renamed.onnx", model, x) == (
        "the graph takes 2 inputs besides lengths and rnnport's states ('x', 'h0'); expected "
        "one, the sequence x: no framework check")
    # A head after the network: its output is not the network's.
    headed = rnnport.write(model, "onnx")
    headed.graph.node.append(helper.make_node("Relu", ["y"], ["head"]))
    headed.graph.output.insert(0, helper.make_tensor_value_info("head", onnx.TensorProto.FLOAT,
                                                                None))
    (tmp_path / "headed.onnx").write_bytes(headed.SerializeToString())
    found = _framework_forward(tmp_path / "headed.onnx", model, x)
    assert found.startswith("the graph computes more than the network read (other computing "
                            "nodes: ONNX Relu node")
    merged = onnx.compose.merge_models(proto, rnnport.write(model, "onnx"), io_map=[],
                                       prefix1="a_", prefix2="b_")
    (tmp_path / "merged.onnx").write_bytes(merged.SerializeToString())
    assert _framework_forward(tmp_path / "merged.onnx", model, x) == (
        "the graph holds several recurrent networks: no framework check")
    path = tmp_path / "m.onnx"
    rnnport.write(model, "onnx", path=path)
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None
                        if name == "onnxruntime" else find_spec(name, *args))
    assert _framework_forward(path, model, x) == ("ONNX Runtime is not installed: no "
                                                  "framework check")


def test_convert_verify_runs_onnx_files_in_onnx_runtime(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = RNN.random(Spec("gru", 3, 4, num_layers=2, bidirectional=True), seed=5)
    rnnport.write(model, "onnx", path=tmp_path / "m.onnx", lengths=True, initial_state=True)
    assert main(["convert", str(tmp_path / "m.onnx"), str(tmp_path / "m.pt"), "--verify",
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"source, ONNX Runtime running m.onnx: max \|Δ\| = \S+ .*ok$", out, re.M), out
    # …and the ONNX file a conversion writes.
    assert main(["convert", str(tmp_path / "m.pt"), str(tmp_path / "out.onnx"), "--verify",
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"ONNX Runtime running out.onnx: max \|Δ\| = \S+ .*ok$", out, re.M), out
