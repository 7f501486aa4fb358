"""ONNX files as real tools write them: PyTorch's exporters (the default dynamo one, with its
external data file, and the TorchScript one), with and without constant folding, for
LSTM/GRU/RNN stacks and cells (unrolled by the dynamo exporter); recurrent nodes inside
subgraphs and functions; weights computed from constants; and graphs built to exhaust a
reader."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import helper, numpy_helper

import rnnport
from rnnport import RNN, Spec
from rnnport.cli import main

BATCH, TIME, INPUT = 2, 5, 3

MODULES = {
    "lstm_2layer_bidirectional": lambda: torch.nn.LSTM(INPUT, 4, num_layers=2,
                                                       bidirectional=True, batch_first=True),
    "gru_2layer": lambda: torch.nn.GRU(INPUT, 4, num_layers=2, batch_first=True),
    "gru_bidirectional": lambda: torch.nn.GRU(INPUT, 3, bidirectional=True, batch_first=True),
    "rnn_relu_2layer": lambda: torch.nn.RNN(INPUT, 4, num_layers=2, nonlinearity="relu",
                                            batch_first=True),
}


def _export(module: torch.nn.Module, path: Path, exporter: str, folded: bool) -> None:
    _export_args(module, (torch.randn(BATCH, TIME, INPUT),), path, exporter, folded)


def _torch_forward(module: torch.nn.Module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module(torch.from_numpy(x))[0].numpy()


@pytest.mark.slow
@pytest.mark.parametrize("folded", [True, False], ids=["folded", "unfolded"])
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_pytorch_exports_read_from_the_path(tmp_path: Path, name: str, exporter: str,
                                            folded: bool) -> None:
    torch.manual_seed(3)
    module = MODULES[name]().eval()
    path = tmp_path / "m.onnx"
    _export(module, path, exporter, folded)
    if exporter == "dynamo":
        assert (tmp_path / "m.onnx.data").is_file()  # weights beside the model, by default
    model = rnnport.read(path)
    x = np.random.default_rng(0).uniform(-1, 1, (3, 7, INPUT)).astype(np.float32)
    y, _ = model.forward(x)
    np.testing.assert_allclose(y, _torch_forward(module, x), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_the_command_line_converts_a_default_export(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    module = MODULES["lstm_2layer_bidirectional"]().eval()
    _export(module, tmp_path / "m.onnx", "dynamo", True)
    assert main(["convert", str(tmp_path / "m.onnx"), str(tmp_path / "m.pt"), "--verify",
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"stage 1, rnnport reading \S+m.pt back: max \|Δ\| = \S+ .* ok", out)
    assert re.search(r"stage 2, PyTorch loading m.pt into nn.LSTM: max \|Δ\| = \S+ .* ok", out)
    back = rnnport.read(tmp_path / "m.pt")
    assert back == rnnport.read(module)


CELLS = {
    "lstm": (lambda: torch.nn.LSTMCell(INPUT, 4), lambda: (torch.randn(BATCH, INPUT), (
        torch.randn(BATCH, 4), torch.randn(BATCH, 4)))),
    "gru": (lambda: torch.nn.GRUCell(INPUT, 4), lambda: (torch.randn(BATCH, INPUT),
                                                         torch.randn(BATCH, 4))),
    "gru_square_no_bias": (lambda: torch.nn.GRUCell(4, 4, bias=False),
                           lambda: (torch.randn(BATCH, 4), torch.randn(BATCH, 4))),
    "rnn_relu": (lambda: torch.nn.RNNCell(INPUT, 4, nonlinearity="relu"),
                 lambda: (torch.randn(BATCH, INPUT), torch.randn(BATCH, 4))),
}


def _export_args(module: torch.nn.Module, args: tuple[Any, ...], path: Path, exporter: str,
                 folded: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(module, args, path, optimize=folded, verbose=False)
        else:
            torch.onnx.export(module, args, path, dynamo=False, do_constant_folding=folded)


def _step(cell: torch.nn.Module, x: np.ndarray, state: Any) -> np.ndarray:
    with torch.no_grad():
        out = cell(torch.from_numpy(x), state)
    return (out[0] if isinstance(out, tuple) else out).numpy()


@pytest.mark.slow
@pytest.mark.parametrize("folded", [True, False], ids=["folded", "unfolded"])
@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_exported_cells_read_and_step_as_pytorch(tmp_path: Path, name: str, exporter: str,
                                                  folded: bool) -> None:
    torch.manual_seed(5)
    build, args = CELLS[name]
    cell = build().eval()
    path = tmp_path / "cell.onnx"
    _export_args(cell, args(), path, exporter, folded)
    model = rnnport.read(path)
    assert model == rnnport.read(cell)  # the very arrays
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, (3, cell.input_size)).astype(np.float32)
    h = rng.uniform(-1, 1, (3, cell.hidden_size)).astype(np.float32)
    c = rng.uniform(-1, 1, (3, cell.hidden_size)).astype(np.float32)
    lstm = name == "lstm"
    y, _ = model.forward(x[:, None], state=(h[None], c[None]) if lstm else h[None])
    want = _step(cell, x, (torch.from_numpy(h), torch.from_numpy(c)) if lstm else
                 torch.from_numpy(h))
    np.testing.assert_allclose(y[:, 0], want, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_a_cell_exported_without_its_state_is_refused_with_the_way_out(tmp_path: Path) -> None:
    cell = torch.nn.LSTMCell(INPUT, 4)
    _export_args(cell, (torch.randn(BATCH, INPUT),), tmp_path / "cell.onnx", "dynamo", True)
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=r"weight_hh is not in the file.*torch.onnx.export\(cell, \(x, "):
        rnnport.read(tmp_path / "cell.onnx")


class _Streaming(torch.nn.Module):
    """A projection, an LSTMCell stepped with its state, and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.pre, self.cell, self.head = (torch.nn.Linear(6, 3), torch.nn.LSTMCell(3, 4),
                                          torch.nn.Linear(4, 2))

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> Any:
        h, c = self.cell(torch.relu(self.pre(x)), (h, c))
        return self.head(h), h, c


class _Tagger(torch.nn.Module):
    """An embedding, a 2-layer bidirectional nn.RNN and a head."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 3)
        self.rnn = torch.nn.RNN(3, 4, 2, bidirectional=True, batch_first=True)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.head(self.rnn(self.embed(tokens))[0]), -1)


@pytest.mark.slow
def test_unrolled_networks_inside_larger_models_are_found(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    torch.manual_seed(6)
    streaming, tagger = _Streaming().eval(), _Tagger().eval()
    _export_args(streaming, (torch.randn(2, 6), torch.randn(2, 4), torch.randn(2, 4)),
                 tmp_path / "streaming.onnx", "dynamo", True)
    _export_args(tagger, (torch.randint(0, 10, (2, 5)),), tmp_path / "tagger.onnx", "dynamo",
                 True)
    assert rnnport.read(tmp_path / "streaming.onnx") == rnnport.read(streaming.cell)
    assert rnnport.read(tmp_path / "tagger.onnx") == rnnport.read(tagger.rnn)
    assert main(["convert", str(tmp_path / "tagger.onnx"), str(tmp_path / "rnn.pt"),
                 "--verify", "-q"]) == 0
    assert "max |Δ|" in capsys.readouterr().out
    assert rnnport.read(tmp_path / "rnn.pt") == rnnport.read(tagger.rnn)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["cell", "sequence"])
def test_a_graph_that_computes_something_else_is_refused(tmp_path: Path, source: str) -> None:
    """The matrices look right, but an activation was changed: the check catches it."""
    torch.manual_seed(8)
    path = tmp_path / "m.onnx"
    if source == "cell":
        _export_args(CELLS["lstm"][0](), CELLS["lstm"][1](), path, "dynamo", True)
        changed, to = "Sigmoid", "Tanh"
    else:
        _export(MODULES["rnn_relu_2layer"](), path, "dynamo", True)
        changed, to = "Relu", "Tanh"
    proto = onnx.load(path)
    next(node for node in proto.graph.node if node.op_type == changed).op_type = to
    onnx.save(proto, path)
    with pytest.raises(rnnport.UnsupportedFeatureError, match="computes no value equal to"):
        rnnport.read(path)


# -- graphs built by hand ---------------------------------------------------------------------


def _value(name: str, shape: Any) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, shape)


def _lstm_arrays(model: RNN) -> dict[str, np.ndarray]:
    """W, R, B of a one-layer LSTM in ONNX's layout, from rnnport's own writer."""
    proto = rnnport.write(model, "onnx")
    node = next(n for n in proto.graph.node if n.op_type == "LSTM")
    stored = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    return dict(zip("WRB", (stored[name] for name in node.input[1:4]), strict=True))


MODEL = RNN.random(Spec("lstm", 3, 4), seed=7)


def test_an_lstm_inside_an_if_branch_is_found_and_named_by_its_path() -> None:
    arrays = _lstm_arrays(MODEL)
    lstm = helper.make_node("LSTM", ["x", "W", "R", "B"], ["", "h"], name="inner_lstm",
                            hidden_size=4)
    then_graph = helper.make_graph([lstm], "then", [], [_value("h", None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["h2"])], "else", [],
                              [_value("h2", None)])
    branch = helper.make_node("If", ["cond"], ["out"], name="choose", then_branch=then_graph,
                              else_branch=other)
    graph = helper.make_graph(
        [branch], "g", [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
                        _value("x", [5, 1, 3])], [_value("out", None)],
        [numpy_helper.from_array(value, name) for name, value in arrays.items()])
    model = helper.make_model(graph)
    assert rnnport.read(model) == rnnport.read(rnnport.write(MODEL, "onnx"))
    twice = helper.make_model(helper.make_graph(
        [branch, helper.make_node("LSTM", ["x", "W", "R", "B"], ["", "h3"], name="outer",
                                  hidden_size=4)],
        "g", list(graph.input), [_value("out", None), _value("h3", None)],
        list(graph.initializer)))
    with pytest.raises(rnnport.AmbiguousSourceError,
                       match=r"ONNX If node 'choose' then_branch: ONNX LSTM node 'inner_lstm'"):
        rnnport.read(twice)
    assert rnnport.read(twice, node="inner_lstm") == rnnport.read(model)


@pytest.mark.parametrize("time_major", [True, False])
def test_a_stack_inside_an_if_branch_is_one_network(time_major: bool) -> None:
    """The glue between its layers is checked by running the branch, with the main graph's
    inputs it takes from the scope around it."""
    model = RNN.random(Spec("gru", 3, 4, num_layers=3, bidirectional=True), seed=1)
    written = rnnport.write(model, "onnx", time_major=time_major).graph
    then_graph = helper.make_graph(list(written.node), "then", [], [written.output[0]])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["y2"])], "else", [],
                              [_value("y2", None)])
    branch = helper.make_node("If", ["cond"], ["out"], then_branch=then_graph,
                              else_branch=other)
    graph = helper.make_graph(
        [branch], "g", [helper.make_tensor_value_info("cond", onnx.TensorProto.BOOL, []),
                        *written.input], [_value("out", None)], list(written.initializer))
    assert rnnport.read(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 17)])) == model


def test_an_lstm_inside_a_function_takes_its_weights_from_the_call() -> None:
    arrays = _lstm_arrays(MODEL)
    body = helper.make_node("LSTM", ["x", "w", "r", "b"], ["", "h"], hidden_size=4)
    function = helper.make_function("local", "Encoder", ["x", "w", "r", "b"], ["h"], [body],
                                    [helper.make_opsetid("", 17)])
    call = helper.make_node("Encoder", ["x", "W", "R", "B"], ["h"], domain="local")
    graph = helper.make_graph([call], "g", [_value("x", [5, 1, 3])], [_value("h", None)],
                              [numpy_helper.from_array(v, k) for k, v in arrays.items()])
    model = helper.make_model(graph, functions=[function],
                              opset_imports=[helper.make_opsetid("", 17),
                                             helper.make_opsetid("local", 1)])
    assert rnnport.read(model) == rnnport.read(rnnport.write(MODEL, "onnx"))


def _computed(nodes: list[onnx.NodeProto], stored: dict[str, np.ndarray],
              weight: str = "W") -> onnx.ModelProto:
    """An LSTM whose ``weight`` input is computed by ``nodes`` from ``stored`` constants."""
    arrays = _lstm_arrays(MODEL)
    inputs = {"W": "W", "R": "R", "B": "B"}
    inputs[weight] = "computed"
    initializers = {**{k: v for k, v in arrays.items() if k != weight}, **stored}
    lstm = helper.make_node("LSTM", ["x", inputs["W"], inputs["R"], inputs["B"]], ["y"],
                            hidden_size=4)
    graph = helper.make_graph([*nodes, lstm], "g", [_value("x", [5, 1, 3])],
                              [_value("y", None)],
                              [numpy_helper.from_array(np.asarray(v), k)
                               for k, v in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_weights_computed_from_constants_are_folded() -> None:
    W = _lstm_arrays(MODEL)["W"]  # (1, 16, 3): rebuilt from transposed gate blocks
    blocks = np.split(W[0].T.copy(), 4, axis=1)
    nodes = [helper.make_node("Concat", ["g0", "g1", "g2", "g3"], ["cat"], axis=1),
             helper.make_node("Transpose", ["cat"], ["t"], perm=[1, 0]),
             helper.make_node("Shape", ["t"], ["shape"]),
             helper.make_node("Gather", ["shape", "zero"], ["rows"], axis=0),
             helper.make_node("Unsqueeze", ["rows", "zero"], ["rows1"]),
             helper.make_node("Concat", ["one", "rows1", "minus"], ["target"], axis=0),
             helper.make_node("Reshape", ["t", "target"], ["computed"])]
    constants = {f"g{i}": block for i, block in enumerate(blocks)}
    constants.update(zero=np.array(0, np.int64), one=np.array([1], np.int64),
                     minus=np.array([-1], np.int64))
    assert rnnport.read(_computed(nodes, constants)) == rnnport.read(
        rnnport.write(MODEL, "onnx"))


def test_other_operators_on_weights_are_refused_by_name() -> None:
    W = _lstm_arrays(MODEL)["W"]
    model = _computed([helper.make_node("Mul", ["half", "two"], ["computed"])],
                      {"half": W / 2, "two": np.array(2.0, np.float32)})
    with pytest.raises(rnnport.UnsupportedFeatureError, match="Mul of float32 and float32"):
        rnnport.read(model)
    model = _computed([helper.make_node("Sqrt", ["sq"], ["computed"])], {"sq": W * W})
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match="computed by Sqrt at run time.*offline optimiser"):
        rnnport.read(model)


def test_graphs_built_to_exhaust_the_reader_are_refused() -> None:
    W = _lstm_arrays(MODEL)["W"]
    deep = [helper.make_node("Identity", ["w0" if i == 0 else f"i{i - 1}"], [f"i{i}"])
            for i in range(1500)]
    deep.append(helper.make_node("Identity", ["i1499"], ["computed"]))
    with pytest.raises(rnnport.FormatError, match="more than 200 nested nodes"):
        rnnport.read(_computed(deep, {"w0": W}))
    huge = [helper.make_node("Expand", ["w0", "shape"], ["computed"])]
    with pytest.raises(rnnport.FormatError, match="limit 'expansion'"):
        rnnport.read(_computed(huge, {"w0": W, "shape": np.array([10**6, 10**6, 16, 3])}))
    gathered = [helper.make_node("Gather", ["w0", "many"], ["computed"], axis=0)]
    with pytest.raises(rnnport.FormatError, match="limit 'expansion'"):
        rnnport.read(_computed(gathered, {"w0": W, "many": np.zeros(10**6, np.int64)}))
    shared = [helper.make_node("Concat", ["w0"] * 400, ["computed"], axis=0)]
    with pytest.raises(rnnport.FormatError, match="limit 'expansion'"):
        rnnport.read(_computed(shared, {"w0": np.tile(W, (1, 1000, 1))}))


def test_a_graph_of_matrices_that_is_no_recurrent_network_says_so() -> None:
    """Two layers of one width, fed by two inputs: the shape of a cell step, but a plain
    sum of products; nothing is read, and the error says what was tried."""
    rng = np.random.default_rng(9)
    stored = {name: rng.standard_normal(shape).astype(np.float32)
              for name, shape in (("A", (3, 4)), ("B", (4, 4)))}
    nodes = [helper.make_node("MatMul", ["x", "A"], ["xa"]),
             helper.make_node("MatMul", ["h", "B"], ["hb"]),
             helper.make_node("Add", ["xa", "hb"], ["y"])]
    graph = helper.make_graph(nodes, "sum", [_value("x", [2, 3]), _value("h", [2, 4])],
                              [_value("y", [2, 4])],
                              [numpy_helper.from_array(v, k) for k, v in stored.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=r"as one step of a recurrent cell does, but computes none.*"
                             r"as an RNN\(tanh\) 3→4 \(no bias\): the graph computes no value equal"):
        rnnport.read(model)
    mlp = helper.make_model(helper.make_graph(
        nodes[:1], "mlp", [_value("x", [2, 3])], [_value("xa", [2, 4])],
        [numpy_helper.from_array(stored["A"], "A")]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(rnnport.FormatError, match="has no LSTM, GRU or RNN node.*nor computes"):
        rnnport.read(mlp)


def test_running_a_graph_to_check_it_cannot_exhaust_memory() -> None:
    rng = np.random.default_rng(10)
    stored = {"A": rng.standard_normal((3, 4)).astype(np.float32),
              "B": rng.standard_normal((4, 4)).astype(np.float32),
              "huge": np.array([1 << 30, 2, 4], np.int64)}
    nodes = [helper.make_node("MatMul", ["x", "A"], ["xa"]),
             helper.make_node("MatMul", ["h", "B"], ["hb"]),
             helper.make_node("Add", ["xa", "hb"], ["sum"]),
             helper.make_node("Expand", ["sum", "huge"], ["y"])]
    graph = helper.make_graph(nodes, "hostile", [_value("x", [2, 3]), _value("h", [2, 4])],
                              [_value("y", None)],
                              [numpy_helper.from_array(v, k) for k, v in stored.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(rnnport.FormatError, match="limit 'expansion'"):
        rnnport.read(model)


class _TwoCells(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = torch.nn.GRUCell(3, 4), torch.nn.GRUCell(4, 4)

    def forward(self, x: torch.Tensor, h1: torch.Tensor, h2: torch.Tensor) -> Any:
        h1 = self.first(x, h1)
        return h1, self.second(h1, h2)


class _Looped(torch.nn.Module):
    """An LSTMCell stepped in a Python loop, after a LayerNorm the check cannot run."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.cell = torch.nn.LayerNorm(3), torch.nn.LSTMCell(3, 4)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        for t in range(x.shape[0]):
            h, c = self.cell(x[t], (h, c))
        return h


class _ComputedState(torch.nn.Module):
    """An nn.RNN whose h0 the model computes from another input."""

    def __init__(self) -> None:
        super().__init__()
        self.init, self.rnn = torch.nn.Linear(2, 4), torch.nn.RNN(3, 4)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.rnn(x, torch.tanh(self.init(z))[None])[0]


@pytest.mark.slow
def test_unrolled_cells_in_loops_and_behind_other_layers_are_read(tmp_path: Path) -> None:
    torch.manual_seed(11)
    looped, computed = _Looped().eval(), _ComputedState().eval()
    _export_args(looped, (torch.randn(4, 2, 3), torch.randn(2, 4), torch.randn(2, 4)),
                 tmp_path / "looped.onnx", "dynamo", True)
    _export_args(computed, (torch.randn(5, 2, 3), torch.randn(2, 2)), tmp_path / "computed.onnx",
                 "dynamo", True)
    assert rnnport.read(tmp_path / "looped.onnx") == rnnport.read(looped.cell)
    assert rnnport.read(tmp_path / "computed.onnx") == rnnport.read(computed.rnn)


@pytest.mark.slow
def test_several_unrolled_networks_are_listed_and_node_picks_one(tmp_path: Path) -> None:
    torch.manual_seed(12)
    cells = _TwoCells().eval()
    path = tmp_path / "two.onnx"
    _export_args(cells, (torch.randn(2, 3), torch.randn(2, 4), torch.randn(2, 4)), path,
                 "dynamo", True)
    with pytest.raises(rnnport.AmbiguousSourceError, match=r"computes 2 recurrent networks") \
            as error:
        rnnport.read(path)
    names = re.findall(r"node='([^']+)'", str(error.value))
    assert [rnnport.read(path, node=name) for name in names] == [
        rnnport.read(cells.first), rnnport.read(cells.second)]
    choices = rnnport.formats.get("onnx").networks(path)  # what inspect lists
    assert choices is not None and [value for value, _ in choices.entries] == names
    with pytest.raises(rnnport.FormatError, match="names none of the nodes"):
        rnnport.read(path, node="nowhere")


@pytest.mark.slow
def test_an_rnn_exported_with_one_step_says_why_it_cannot_be_read(tmp_path: Path) -> None:
    _export_args(torch.nn.RNN(3, 4), (torch.randn(1, 2, 3),), tmp_path / "one.onnx", "dynamo",
                 True)
    with pytest.raises(rnnport.FormatError, match="single time step.*weight_hh is not in the "
                                                  "file: export it with two or more steps"):
        rnnport.read(tmp_path / "one.onnx")


def test_declared_sizes_alone_neither_raise_the_budget_nor_allocate() -> None:
    """A tensor that declares a huge shape but stores nothing adds nothing to the memory
    budget; a Split promising millions of outputs is refused before listing them; a scalar
    sliced is a clear error."""
    W = _lstm_arrays(MODEL)["W"]
    empty = onnx.TensorProto(name="empty", data_type=onnx.TensorProto.FLOAT, dims=[10**12])
    model = _computed([helper.make_node("Expand", ["w0", "shape"], ["computed"])],
                      {"w0": W, "shape": np.array([4 * 10**6, 16, 3])})
    model.graph.initializer.append(empty)
    with pytest.raises(rnnport.FormatError, match="limit 'expansion'"):
        rnnport.read(model)
    split = [helper.make_node("Split", ["w0"], ["computed"], axis=0, num_outputs=10**7)]
    with pytest.raises(rnnport.FormatError, match="num_outputs=10000000 but the node has 1 "
                                                  "outputs"):
        rnnport.read(_computed(split, {"w0": W}))
    sliced = [helper.make_node("Slice", ["scalar", "zero", "one"], ["computed"])]
    with pytest.raises(rnnport.FormatError, match="the graph is malformed"):
        rnnport.read(_computed(sliced, {"scalar": np.float32(1), "zero": np.array([0]),
                                        "one": np.array([1])}))
    with pytest.raises(rnnport.FormatError, match=r"node=\[1\]; expected the name"):
        rnnport.read(_computed([helper.make_node("Identity", ["w0"], ["computed"])],
                               {"w0": W}), node=[1])


def test_function_calls_cannot_multiply_a_small_file_into_millions_of_nodes() -> None:
    body = [helper.make_node("Identity", ["a" if i == 0 else f"b{i - 1}"], [f"b{i}"])
            for i in range(2000)]
    function = helper.make_function("local", "f", ["a"], ["b1999"], body,
                                    [helper.make_opsetid("", 17)])
    calls = [helper.make_node("f", ["x"], [f"y{i}"], domain="local") for i in range(400)]
    graph = helper.make_graph(calls, "g", [_value("x", [2])], [_value("y0", None)])
    model = helper.make_model(graph, functions=[function], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
    with pytest.raises(rnnport.LimitError, match="taking the nodes of") as error:
        rnnport.read(model)  # the work limit, relative to the file's size, stops it first
    assert error.value.limit == "work"
    with rnnport.limits(work=1e6), pytest.raises(rnnport.FormatError,
                                                 match="more than 500,000 nodes"):
        rnnport.read(model)  # however far the limit is raised


def test_declared_shapes_of_an_unrolled_graph_are_checked_before_feeding_it() -> None:
    rng = np.random.default_rng(13)
    nodes = [helper.make_node("Identity", ["x0"], ["x"]),
             helper.make_node("MatMul", ["x", "A"], ["xa"]),
             helper.make_node("MatMul", ["h", "B"], ["hb"]),
             helper.make_node("Add", ["xa", "hb"], ["sum"]),
             helper.make_node("Tanh", ["sum"], ["y"])]
    graph = helper.make_graph(
        nodes, "cell", [_value("x0", [2, 3]), _value("h", [2, 4])], [_value("y", [2, 4])],
        [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
         for name, shape in (("A", (3, 4)), ("B", (4, 4)))],
        value_info=[_value("x", [10**8, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(rnnport.FormatError, match=r"values of shape \(100000000, 3\)"):
        rnnport.read(model)
