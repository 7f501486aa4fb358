"""ONNX files as today's tools write them, read against the tools' own outputs (golden files
from ``tools/golden_onnx.py``): a CRNN stepping two LSTMCells in Python loops (PyTorch's
default and TorchScript exporters), ONNX Runtime's quantized DynamicQuantizeLSTM, and
PyTorch's default exporter on nn.LSTM / nn.GRU / nn.RNN."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport.cli import main
from rnnport.formats.onnx.reader import notes

GOLDEN = Path(__file__).parent / "golden" / "onnx"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"]
PAIRED = sorted(name for name in MANIFEST if "_cells_" in name)
QUANTIZED = sorted(name for name in MANIFEST if name.startswith("qlstm"))
DEFAULT = sorted(name for name in MANIFEST if name.startswith("torch_default"))
APART = sorted(name for name in MANIFEST if name.startswith("apart_"))


def _case(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return arrays, json.loads(str(arrays["meta"]))


def _weights(arrays: dict[str, np.ndarray], owner: str) -> dict[str, np.ndarray]:
    """The PyTorch parameters of one cell or module, as its state_dict names them."""
    prefix = f"weights/{owner}/"
    return {key[len(prefix):]: value for key, value in arrays.items() if key.startswith(prefix)}


def _inspect(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["inspect", *args]) == 0
    return capsys.readouterr().out


def test_the_golden_set_is_the_generators() -> None:
    for name, case in MANIFEST.items():
        _, meta = _case(name)
        assert meta["case"] == name and set(case["files"]) == set(meta["files"])
        assert all((GOLDEN / file).is_file() for file in case["files"])


@pytest.mark.parametrize("name", PAIRED)
def test_cells_over_a_sequence_and_its_reverse_read_as_one_bidirectional_network(
        name: str) -> None:
    arrays, meta = _case(name)
    path = GOLDEN / f"{name}.onnx"
    model = rnnport.read(path)
    cells = [_weights(arrays, cell) for cell in meta["cells"]]  # layer by layer, forward first
    assert model == rnnport.read({f"{key}_l{index // 2}{'_reverse' if index % 2 else ''}": value
                                  for index, cell in enumerate(cells)
                                  for key, value in cell.items()}, "torch")
    y, _ = model.forward(arrays["x"], time_major=meta["time_major"])
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)
    # node= picks each cell alone, by the names notes() gives
    found = notes(path)
    assert f"{model.spec.describe(article=True)} (" in found[0]
    names = re.findall(r"node='([^']+)'", found[1])
    assert [rnnport.read(path, node=node) for node in names] == [
        rnnport.read(cell, "torch") for cell in cells]


def test_a_layer_of_paired_cells_fed_to_another_stacks_and_the_first_reads_alone() -> None:
    path = GOLDEN / "lstm_cells_two_layers_dynamo.onnx"
    both, first = rnnport.read(path), rnnport.read(path, node="node_cat")
    assert both.spec.num_layers == 2 and first.spec.num_layers == 1
    assert first == both.layers()[0]
    assert rnnport.read(path, node="node_cat_1") == both


def test_inspect_says_how_the_cells_were_read(capsys: pytest.CaptureFixture[str]) -> None:
    out = _inspect(capsys, str(GOLDEN / "crnn_cells_dynamo.onnx"))
    assert "bidirectional LSTM 3→4\n" in out
    assert "the graph computes a bidirectional LSTM 3→4 (two cells, one stepped over the " \
           "sequence and one over it reversed, joined by 'node_cat') step by step" in out
    assert re.search(r"-O node=\S+ reads the forward one alone, -O node=\S+ the backward", out)


def test_a_cell_of_the_pair_alone_steps_as_pytorch() -> None:
    arrays, meta = _case("crnn_cells_torchscript")
    forward = rnnport.read(GOLDEN / "crnn_cells_torchscript.onnx", node="/fw_1/Gemm")
    y, _ = forward.forward(arrays["x"], time_major=True)
    np.testing.assert_allclose(y, arrays["y"][..., :4], atol=meta["tolerance"], rtol=0)


@pytest.mark.parametrize("name", QUANTIZED)
def test_dynamic_quantize_lstm_reads_dequantized(name: str) -> None:
    arrays, meta = _case(name)
    assert meta["read_options"] == {"dequantize": True}
    model = rnnport.read(GOLDEN / f"{name}.onnx", dequantize=True)
    # bit-exact: the float LSTM the generator built from scale·(q − zero_point)
    assert model == rnnport.read(GOLDEN / f"{name}_dequantized.onnx")
    y, _ = model.forward(arrays["x"], time_major=True)
    np.testing.assert_allclose(y, arrays["y_dequantized"], atol=1e-5, rtol=0)
    # ONNX Runtime's integer kernels: within the quantization error the generator states
    assert meta["tolerance"] == 5e-3
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)


@pytest.mark.parametrize("name", ["qlstm", "qlstm_bidirectional_per_channel"])
def test_dynamic_quantize_lstm_is_refused_by_name_without_dequantize(name: str) -> None:
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=r"quantized LSTM \(com\.microsoft\.DynamicQuantizeLSTM\) holds W "
                             r"and R as int8 integers.*Pass dequantize=True"):
        rnnport.read(GOLDEN / f"{name}.onnx")


def test_inspect_says_the_numbers_changed(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(GOLDEN / "qlstm_bidirectional_per_channel.onnx")
    out = _inspect(capsys, path, "-O", "dequantize=true")
    assert "bidirectional LSTM 4→5\n" in out
    assert re.search(r"dequantized \(-O dequantize=true\): the W and R of ONNX "
                     r"DynamicQuantizeLSTM node '\S+' \('\S+', '\S+'\) held quantized "
                     r"integers, read as scale·\(q − zero_point\) in float32; the numbers "
                     "differ", out)
    assert re.search(r"quantizes x and h on every step \(by up to about 0\.03 on LSTMs with "
                     r"weights of the size PyTorch initialises", out)
    assert main(["inspect", path]) == 1
    assert "Pass -O dequantize=true" in capsys.readouterr().err


def test_dequantize_takes_true_or_false() -> None:
    with pytest.raises(rnnport.FormatError, match=r"dequantize='yes'; expected True or False"):
        rnnport.read(GOLDEN / "qlstm.onnx", dequantize="yes")
    assert rnnport.read(GOLDEN / "torch_default_lstm.onnx", dequantize=True) == \
        rnnport.read(GOLDEN / "torch_default_lstm.onnx")


@pytest.mark.parametrize("name", DEFAULT)
def test_default_exports_of_the_modules_read_exactly(name: str) -> None:
    arrays, meta = _case(name)
    model = rnnport.read(GOLDEN / f"{name}.onnx")
    assert model == rnnport.read(_weights(arrays, name.rsplit("_", 1)[1]), "torch",
                                 **({"nonlinearity": "tanh"} if name.endswith("rnn") else {}))
    y, _ = model.forward(arrays["x"], time_major=meta["time_major"])
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)


# What the second module takes of the first's batch-first output y, as the cases' models do.
GLUES = {"interleave": lambda y: y.reshape(*y.shape[:2], 2, -1).transpose(0, 1, 3, 2).reshape(
    y.shape), "swap": lambda y: y.transpose(1, 0, 2)}


@pytest.mark.parametrize("name", APART)
def test_a_node_taking_another_ones_output_but_not_as_its_next_layer_is_read_alone(
        name: str) -> None:
    arrays, meta = _case(name)
    path = GOLDEN / f"{name}.onnx"
    why = r"starts from a state computed from '[^']+', an output of that node \(as a decoder" \
        if meta["glue"] == "state" else r"the nodes between them rearrange its Y"
    with pytest.raises(rnnport.AmbiguousSourceError,
                       match=rf"holds 2 separate recurrent networks .*{why}.*not the next layer "
                             "of a stack, so each is read as a network of its own"):
        rnnport.read(path)
    (first_node, _), (second_node, _) = rnnport.formats.get("onnx").networks(path).entries
    first, second = rnnport.read(path, node=first_node), rnnport.read(path, node=second_node)
    assert first == rnnport.read(_weights(arrays, "first"), "torch")
    assert second == rnnport.read(_weights(arrays, "second"), "torch")
    # each read alone, and joined as the model joins them, gives ONNX Runtime's output
    y, state = first.forward(arrays["x"])
    if meta["glue"] == "state":
        z, _ = second.forward(y, state=state)
    else:
        z, _ = second.forward(GLUES[meta["glue"]](y))
    np.testing.assert_allclose(z, arrays["y"], atol=meta["tolerance"], rtol=0)


@pytest.mark.parametrize("name", ["projected_lstm_dynamo", "projected_lstm_two_layers_dynamo"])
def test_the_default_exporters_projected_lstm_is_refused_by_name(name: str) -> None:
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=r"initial_c \[1, batch, 5\]; expected \[1, batch, 2\] \(hidden_size"
                             r"=2\)\. This is what PyTorch's default \(dynamo\) exporter writes "
                             r"for nn\.LSTM\(hidden_size=5, proj_size=2\): ONNX's LSTM cannot "
                             r"hold an LSTM projection.*Read the PyTorch weights"):
        rnnport.read(GOLDEN / f"{name}.onnx")


@pytest.mark.parametrize(("name", "why"), [
    ("loop_gru_twice_dynamo", r"it applies the cell 2 times to one step's input 'select_\d+' \(as "
                              r"h = cell\(x, cell\(x, h\)\) does\)"),
    ("loop_gru_zoneout_dynamo", r"step 2 takes a state \('\w+'\) that is none of the steps' "
                                r"outputs \(the loop computes something between its steps"),
    ("loop_lstm_learned_state_dynamo", r"its first step does not start from zeros, nor from a "
                                       r"state the graph holds: the exporter folded"),
])
def test_a_cell_loop_that_is_not_its_cells_network_is_refused(name: str, why: str) -> None:
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=rf"the graph steps an? \w+ 3→4.*, but {why}.*that is not the "
                             "network its cell makes"):
        rnnport.read(GOLDEN / f"{name}.onnx")


@pytest.mark.parametrize("name", ["loop_gru_learned_state_dynamo",
                                  "loop_lstm_learned_state_torchscript"])
def test_a_cell_loop_from_a_learned_state_is_read_and_the_state_noted(name: str) -> None:
    arrays, meta = _case(name)
    path = GOLDEN / f"{name}.onnx"
    model = rnnport.read(path)
    assert model == rnnport.read(_weights(arrays, "cell"), "torch")
    found = notes(path)
    assert re.search(r"the loop starts from .+, a state that is not zeros .* pass that state as "
                     "forward's state=", found[1])
    batch = arrays["x"].shape[0]
    h, c = (np.broadcast_to(arrays[f"weights/{name}0"], (1, batch, 4)) for name in "hc")
    y, _ = model.forward(arrays["x"], state=(h, c) if model.spec.cell == "lstm" else h)
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)


def test_one_cell_stepped_both_ways_is_a_bidirectional_network_with_its_weights_twice() -> None:
    arrays, meta = _case("loop_gru_both_directions_dynamo")
    path = GOLDEN / "loop_gru_both_directions_dynamo.onnx"
    model = rnnport.read(path)
    cell = rnnport.read(_weights(arrays, "cell"), "torch")
    assert model.spec == cell.spec.replace(bidirectional=True)
    for direction in model.params[0]:  # the very arrays, both ways
        assert direction.keys() == cell.params[0][0].keys()
        assert all(np.array_equal(direction[key], cell.params[0][0][key]) for key in direction)
    y, _ = model.forward(arrays["x"])
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)
    assert "one cell stepped over the sequence and over it reversed" in notes(path)[0]
    assert rnnport.read(path, node=re.findall(r"node='([^']+)'", notes(path)[1])[0]) == cell


def test_a_cell_whose_input_and_state_are_of_one_size_is_read_once() -> None:
    arrays, meta = _case("loop_rnn_square_dynamo")  # stepped: the state's product feeds back
    path = GOLDEN / "loop_rnn_square_dynamo.onnx"
    assert len(rnnport.formats.get("onnx").networks(path).entries) == 1
    model = rnnport.read(path)
    assert model == rnnport.read(_weights(arrays, "cell"), "torch", nonlinearity="tanh")
    y, _ = model.forward(arrays["x"])
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)
    arrays, meta = _case("square_lstm_step_dynamo")  # one step: x comes first, as in (x, (h, c))
    model = rnnport.read(GOLDEN / "square_lstm_step_dynamo.onnx")
    assert model == rnnport.read(_weights(arrays, "cell"), "torch")
    y, _ = model.forward(arrays["x"][:, None], state=(arrays["h"][None], arrays["c"][None]))
    np.testing.assert_allclose(y[:, 0], arrays["y"], atol=meta["tolerance"], rtol=0)


def test_cells_over_a_sequence_and_its_reverse_not_joined_as_one_network_say_why() -> None:
    arrays, meta = _case("loop_gru_pair_added_dynamo")
    path = GOLDEN / "loop_gru_pair_added_dynamo.onnx"
    why = (r"step over a sequence and over it reversed, but are read apart: the graph adds "
           r"them, where a bidirectional network's y joins them forward half first")
    with pytest.raises(rnnport.AmbiguousSourceError, match=why):
        rnnport.read(path)
    (first, _), (second, _) = rnnport.formats.get("onnx").networks(path).entries
    assert re.search(why, notes(path, node=first)[-1])
    forward, backward = (rnnport.read(path, node=node) for node in (first, second))
    assert forward == rnnport.read(_weights(arrays, "forward_cell"), "torch")
    assert backward == rnnport.read(_weights(arrays, "backward_cell"), "torch")
    y = forward.forward(arrays["x"])[0] + backward.forward(arrays["x"][:, ::-1])[0][:, ::-1]
    np.testing.assert_allclose(y, arrays["y"], atol=meta["tolerance"], rtol=0)
