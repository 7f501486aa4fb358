"""PyTorch cells (nn.LSTMCell, nn.GRUCell, nn.RNNCell), as streaming models step them: read
from modules, state_dicts with any prefix and files; written back as cells; stepping the
cell by hand gives what ``forward`` gives. TorchScript archives are refused with the way out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import rnnport
from rnnport import RNN, Spec

INPUT, HIDDEN, BATCH, TIME = 3, 5, 2, 6

CELLS: dict[str, Callable[[], torch.nn.Module]] = {
    "lstm": lambda: torch.nn.LSTMCell(INPUT, HIDDEN),
    "lstm_no_bias": lambda: torch.nn.LSTMCell(INPUT, HIDDEN, bias=False),
    "gru": lambda: torch.nn.GRUCell(INPUT, HIDDEN),
    "rnn_tanh": lambda: torch.nn.RNNCell(INPUT, HIDDEN),
    "rnn_relu": lambda: torch.nn.RNNCell(INPUT, HIDDEN, nonlinearity="relu"),
}


def _stepped(cell: torch.nn.Module, x: np.ndarray) -> tuple[np.ndarray, Any]:
    """The cell run over time the way a streaming model runs it: one call per step."""
    state: Any = None
    outputs = []
    with torch.no_grad():
        for t in range(x.shape[1]):
            state = cell(torch.from_numpy(x[:, t]), state)
            outputs.append((state[0] if isinstance(state, tuple) else state).numpy())
    return np.stack(outputs, axis=1), state


@pytest.mark.parametrize("name", sorted(CELLS))
def test_a_cell_reads_as_one_layer_and_runs_like_pytorch_stepping_it(name: str) -> None:
    torch.manual_seed(1)
    cell = CELLS[name]()
    model = rnnport.read(cell)
    assert isinstance(model, RNN) and model.spec.num_layers == 1
    x = np.random.default_rng(2).uniform(-1, 1, (BATCH, TIME, INPUT)).astype(np.float32)
    want, state = _stepped(cell, x)
    y, final = model.forward(x)
    np.testing.assert_allclose(y, want, atol=1e-6, rtol=0)
    if isinstance(state, tuple):
        np.testing.assert_allclose(final[1][0], state[1].numpy(), atol=1e-6, rtol=0)


@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_state_dicts_with_a_prefix_and_files_read_and_write_back(name: str,
                                                                      tmp_path: Path) -> None:
    torch.manual_seed(3)
    cell = CELLS[name]()
    model = rnnport.read(cell)
    options = {"nonlinearity": model.spec.nonlinearity} if name.startswith("rnn") else {}
    prefixed = {f"decoder.step.{key}": value for key, value in cell.state_dict().items()}
    assert rnnport.read(prefixed, **options) == model
    torch.save(prefixed, tmp_path / "cell.pt")
    assert rnnport.read(tmp_path / "cell.pt", **options) == model
    written = rnnport.write(model, "torch", as_cell=True)
    assert sorted(written) == sorted(cell.state_dict())
    module = rnnport.write(model, "torch", as_cell=True, module=True)
    assert type(module) is type(cell) and rnnport.read(module) == model
    x = np.random.default_rng(4).uniform(-1, 1, (BATCH, TIME, INPUT)).astype(np.float32)
    np.testing.assert_array_equal(_stepped(module, x)[0], _stepped(cell, x)[0])


def test_a_dict_holding_a_network_and_a_cell_asks_which() -> None:
    network = torch.nn.LSTM(INPUT, HIDDEN)
    cell = torch.nn.GRUCell(INPUT, HIDDEN)
    state = {**{f"encoder.{k}": v for k, v in network.state_dict().items()},
             **{f"decoder.{k}": v for k, v in cell.state_dict().items()}}
    with pytest.raises(rnnport.AmbiguousSourceError, match="'encoder.', 'decoder.'"):
        rnnport.read(state)
    assert rnnport.read(state, prefix="decoder.") == rnnport.read(cell)
    assert rnnport.read(state, prefix="encoder.") == rnnport.read(network)


def test_only_one_layer_one_direction_writes_as_a_cell() -> None:
    for spec in (Spec("lstm", 3, 4, num_layers=2), Spec("gru", 3, 4, bidirectional=True),
                 Spec("lstm", 3, 4, proj_size=2)):
        with pytest.raises(rnnport.UnsupportedFeatureError, match="a PyTorch cell is one layer"):
            rnnport.write(RNN.random(spec), "torch", as_cell=True)
    with pytest.raises(rnnport.FormatError, match="does not apply to a cell"):
        rnnport.write(RNN.random(Spec("gru", 3, 4)), "torch", as_cell=True, module=True,
                      batch_first=True)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit is deprecated
def test_a_torchscript_archive_is_refused_with_the_way_out(tmp_path: Path) -> None:
    scripted = torch.jit.script(torch.nn.LSTM(INPUT, HIDDEN))
    torch.jit.save(scripted, tmp_path / "scripted.pt")
    with pytest.raises(rnnport.UnsupportedFeatureError,
                       match=r"a TorchScript archive \(torch.jit.save\).*torch.jit.load\(path\)"
                             r"\.state_dict\(\)"):
        rnnport.read(tmp_path / "scripted.pt")
