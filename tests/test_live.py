"""Live round trips against real Keras 3 and PyTorch objects, and the cuDNN buffer layout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np
import pytest
import torch
from torch import nn

import rnnport

pytestmark = pytest.mark.slow  # live framework checks

BATCH, TIME, INPUT = 3, 7, 5
TOLERANCE = 1e-5


def _inputs(seed: int, width: int = INPUT) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (BATCH, TIME, width)).astype(np.float32)


def _close(got: Any, want: Any) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=TOLERANCE, rtol=TOLERANCE)


def _randomize_keras(layer: Any, rng: np.random.Generator) -> None:
    layer.set_weights([rng.uniform(-0.5, 0.5, w.shape).astype(np.float32)
                       for w in layer.get_weights()])


def _randomize_torch(module: nn.Module, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.uniform_(-0.5, 0.5)
    return module.eval()


def _run_torch(modules: list[nn.Module], x: np.ndarray) -> np.ndarray:
    y = torch.from_numpy(x)
    with torch.no_grad():
        for module in modules:
            y, _ = module(y)
    return y.numpy()


def _run_keras(layers: list[Any], x: np.ndarray) -> np.ndarray:
    y: Any = x
    for layer in layers:
        y = layer(y)
    return keras.ops.convert_to_numpy(y)


# -- Keras → torch ----------------------------------------------------------------------

KerasFactory = Callable[[], list[Any]]

KERAS_CASES: dict[str, tuple[KerasFactory, str]] = {
    "lstm": (lambda: [keras.layers.LSTM(6, return_sequences=True)], "rnn"),
    "gru": (lambda: [keras.layers.GRU(6, reset_after=True, return_sequences=True)], "rnn"),
    "simple_tanh": (lambda: [keras.layers.SimpleRNN(6, activation="tanh",
                                                    return_sequences=True)], "rnn"),
    "simple_relu": (lambda: [keras.layers.SimpleRNN(6, activation="relu",
                                                    return_sequences=True)], "rnn"),
    "bi_lstm": (lambda: [keras.layers.Bidirectional(
        keras.layers.LSTM(6, return_sequences=True))], "rnn"),
    "bi_gru": (lambda: [keras.layers.Bidirectional(
        keras.layers.GRU(4, reset_after=True, return_sequences=True))], "rnn"),
    "lstm6_lstm6": (lambda: [keras.layers.LSTM(6, return_sequences=True),
                             keras.layers.LSTM(6, return_sequences=True)], "rnn"),
    "lstm7_gru4": (lambda: [keras.layers.LSTM(7, return_sequences=True),
                            keras.layers.GRU(4, reset_after=True, return_sequences=True)],
                   "stack"),
}


@pytest.mark.parametrize("name", sorted(KERAS_CASES))
def test_keras_layers_run_identically_as_torch_modules(name: str) -> None:
    factory, kind = KERAS_CASES[name]
    layers = factory()
    x = _inputs(1)
    rng = np.random.default_rng(2)
    _run_keras(layers, x)
    for layer in layers:
        _randomize_keras(layer, rng)
    expected = _run_keras(layers, x)

    model = rnnport.read(layers if len(layers) > 1 else layers[0])
    if kind == "stack":
        assert isinstance(model, rnnport.Stack) and len(model.parts) == 2
        modules = rnnport.write(model, "torch", per_part=True, module=True, batch_first=True)
    else:
        assert isinstance(model, rnnport.RNN) and model.spec.num_layers == len(layers)
        modules = [rnnport.write(model, "torch", module=True, batch_first=True)]
    assert all(isinstance(m, nn.Module) for m in modules)

    _close(_run_torch(modules, x), expected)
    y, _ = model.forward(x)
    _close(y, expected)


# -- torch → Keras ----------------------------------------------------------------------

TorchFactory = Callable[[], nn.Module]

TORCH_CASES: dict[str, TorchFactory] = {
    "lstm": lambda: nn.LSTM(INPUT, 6, batch_first=True),
    "gru": lambda: nn.GRU(INPUT, 6, batch_first=True),
    "rnn_tanh": lambda: nn.RNN(INPUT, 6, nonlinearity="tanh", batch_first=True),
    "rnn_relu": lambda: nn.RNN(INPUT, 6, nonlinearity="relu", batch_first=True),
    "bi_lstm": lambda: nn.LSTM(INPUT, 6, bidirectional=True, batch_first=True),
    "bi_gru": lambda: nn.GRU(INPUT, 4, bidirectional=True, batch_first=True),
    "bi_rnn_relu": lambda: nn.RNN(INPUT, 5, nonlinearity="relu", bidirectional=True,
                                  batch_first=True),
    "lstm_2layer": lambda: nn.LSTM(INPUT, 6, num_layers=2, batch_first=True),
    "gru_2layer": lambda: nn.GRU(INPUT, 6, num_layers=2, batch_first=True),
    "rnn_tanh_2layer": lambda: nn.RNN(INPUT, 6, num_layers=2, batch_first=True),
    "bi_lstm_2layer": lambda: nn.LSTM(INPUT, 6, num_layers=2, bidirectional=True,
                                      batch_first=True),
    "bi_gru_2layer": lambda: nn.GRU(INPUT, 4, num_layers=2, bidirectional=True,
                                    batch_first=True),
}


def _keras_layer(spec: rnnport.Spec) -> Any:
    units = spec.hidden_size
    if spec.cell == "lstm":
        inner = keras.layers.LSTM(units, return_sequences=True)
    elif spec.cell == "gru":
        inner = keras.layers.GRU(units, reset_after=True, return_sequences=True)
    else:
        inner = keras.layers.SimpleRNN(units, activation=spec.nonlinearity,
                                       return_sequences=True)
    return keras.layers.Bidirectional(inner) if spec.bidirectional else inner


@pytest.mark.parametrize("name", sorted(TORCH_CASES))
def test_torch_modules_run_identically_as_keras_layers(name: str) -> None:
    module = _randomize_torch(TORCH_CASES[name](), seed=3)
    x = _inputs(4)
    expected = _run_torch([module], x)

    model = rnnport.read(module)
    assert isinstance(model, rnnport.RNN)
    spec = model.spec
    written = rnnport.write(model, "keras")
    per_layer = written if spec.num_layers > 1 else [written]
    assert len(per_layer) == spec.num_layers == module.num_layers

    layers = [_keras_layer(spec) for _ in range(spec.num_layers)]
    _run_keras(layers, x)
    for layer, arrays in zip(layers, per_layer, strict=True):
        assert [w.shape for w in layer.get_weights()] == [a.shape for a in arrays]
        layer.set_weights(arrays)
    _close(_run_keras(layers, x), expected)
    y, _ = model.forward(x)
    _close(y, expected)


# -- cuDNN flat buffer ------------------------------------------------------------------


def _expected_cudnn(module: nn.Module) -> tuple[np.ndarray, int]:
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    projected = getattr(module, "proj_size", 0) > 0
    suffixes = ["", "_reverse"] if module.bidirectional else [""]
    pseudo = [f"_l{k}{s}" for k in range(module.num_layers) for s in suffixes]
    names = ["weight_ih", "weight_hh", *(["weight_hr"] if projected else [])]
    matrices = [state[n + p].reshape(-1) for p in pseudo for n in names]
    biases = [state[n + p] for p in pseudo for n in ("bias_ih", "bias_hh")]
    stop = sum(m.size for m in matrices)
    return np.concatenate(matrices + biases), stop


CUDNN_CASES: dict[str, tuple[TorchFactory, int | None, int | None]] = {
    "bi_lstm_2layer": (lambda: nn.LSTM(10, 20, num_layers=2, bidirectional=True),
                       15040, 14400),
    "gru_2layer": (lambda: nn.GRU(10, 20, num_layers=2), None, None),
    "lstm_proj_2layer": (lambda: nn.LSTM(10, 20, num_layers=2, proj_size=8), None, None),
    "bi_lstm_proj": (lambda: nn.LSTM(6, 12, bidirectional=True, proj_size=5), None, None),
}


@pytest.mark.parametrize("name", sorted(CUDNN_CASES))
def test_cudnn_buffer_puts_all_matrices_before_all_biases(name: str) -> None:
    factory, size, matrix_stop = CUDNN_CASES[name]
    module = _randomize_torch(factory(), seed=5)
    expected, stop = _expected_cudnn(module)
    buffer = rnnport.write(rnnport.read(module), "cudnn")
    assert buffer.ndim == 1 and buffer.dtype == np.float32
    assert buffer.shape == expected.shape
    assert np.array_equal(buffer, expected)
    if size is not None:
        assert buffer.size == size and stop == matrix_stop
    assert rnnport.param_count(rnnport.read(module), "cudnn") == expected.size


def test_cudnn_layout_of_the_reference_example_by_offset() -> None:
    module = _randomize_torch(nn.LSTM(10, 20, num_layers=2, bidirectional=True), seed=6)
    buffer = rnnport.write(rnnport.read(module), "cudnn")
    state = {k: v.detach().numpy() for k, v in module.state_dict().items()}
    assert buffer.size == 15040
    assert np.array_equal(buffer[0:800], state["weight_ih_l0"].reshape(-1))
    assert np.array_equal(buffer[800:2400], state["weight_hh_l0"].reshape(-1))
    assert np.array_equal(buffer[2400:3200], state["weight_ih_l0_reverse"].reshape(-1))
    assert np.array_equal(buffer[4800:8000], state["weight_ih_l1"].reshape(-1))
    assert np.array_equal(buffer[12800:14400], state["weight_hh_l1_reverse"].reshape(-1))
    assert np.array_equal(buffer[14400:14480], state["bias_ih_l0"])
    assert np.array_equal(buffer[14480:14560], state["bias_hh_l0"])
    assert np.array_equal(buffer[14560:14640], state["bias_ih_l0_reverse"])
    assert np.array_equal(buffer[14960:15040], state["bias_hh_l1_reverse"])


def test_cudnn_buffer_reads_back_to_the_same_module_weights() -> None:
    module = _randomize_torch(nn.GRU(10, 20, num_layers=2, bidirectional=True), seed=7)
    model = rnnport.read(module)
    buffer = rnnport.write(model, "cudnn")
    again = rnnport.read(buffer, "cudnn", cell="gru", input_size=10, hidden_size=20,
                         num_layers=2, bidirectional=True)
    assert again == model


# -- variable lengths -------------------------------------------------------------------


def test_packed_bidirectional_gru_matches_forward_with_lengths() -> None:
    module = _randomize_torch(nn.GRU(INPUT, 6, bidirectional=True, batch_first=True), seed=8)
    x = _inputs(9)
    lengths = np.array([4, TIME, 2], dtype=np.int64)
    packed = nn.utils.rnn.pack_padded_sequence(torch.from_numpy(x), torch.from_numpy(lengths),
                                               batch_first=True, enforce_sorted=False)
    with torch.no_grad():
        out, h_n = module(packed)
    padded, out_lengths = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                           total_length=TIME)
    assert out_lengths.tolist() == lengths.tolist()

    y, h = rnnport.read(module).forward(x, lengths=lengths)
    assert y.shape == (BATCH, TIME, 12) and h.shape == (2, BATCH, 6)
    _close(y, padded.numpy())
    _close(h, h_n.numpy())
    for b, n in enumerate(lengths):
        assert not y[b, n:].any()
