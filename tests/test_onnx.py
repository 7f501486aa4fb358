"""ONNX: graphs rnnport writes run in ONNX Runtime; files from PyTorch's exporter read back."""

from __future__ import annotations

import io
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
    proto = rnnport.write(model, "onnx")
    feeds = state_feeds(model, case.initial_state(model))
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
    plain = run_reference(proto, x)
    zeros = {k: np.zeros_like(v) for k, v in state_feeds(model, model.forward(x)[1]).items()}
    fed = run_reference(proto, x, sequence_lens=np.full(x.shape[0], x.shape[1], np.int32),
                        **zeros)
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
    out = run_reference(proto, x, sequence_lens=np.array([6, 3, 5], np.int32))
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
    _matches_onnx_runtime(model, proto, x, states=False)
    unclipped = RNN(spec.replace(gate_clip=None, input_forget=False), model.params)
    assert not np.allclose(unclipped.forward(x)[0], model.forward(x)[0], atol=1e-3)


def _matches_onnx_runtime(model: RNN, proto: Any, x: np.ndarray, *, states: bool) -> None:
    """ONNX Runtime running ``proto`` gives ``model``'s y (and final states), over full and
    uneven lengths."""
    for lengths in (None, np.array([6, 3, 5])):
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
    _matches_onnx_runtime(model, proto, x, states=True)
    forward = RNN(spec.replace(reverse=False), model.params)
    assert not np.allclose(forward.forward(x)[0], model.forward(x)[0], atol=1e-3)


def test_graph_without_rnn_node() -> None:
    graph = helper.make_graph([helper.make_node("Relu", ["a"], ["b"])], "g",
                              [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("b", onnx.TensorProto.FLOAT, [1])])
    with pytest.raises(FormatError, match=r"has no LSTM, GRU or RNN node \(its operators: Relu\)"):
        rnnport.read(helper.make_model(graph), "onnx")


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
