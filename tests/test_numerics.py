"""Numerics under stress, against PyTorch: very long sequences, saturating gates, float16
weights, zero-length and length-1 sequences, batch 1 and batch 0."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import rnnport
from rnnport import RNN, Spec

CELLS = [Spec("lstm", 4, 8, bidirectional=True), Spec("gru", 4, 8, bidirectional=True),
         Spec("rnn_tanh", 4, 8, bidirectional=True), Spec("rnn_relu", 4, 8)]


def _torch_forward(model: RNN, x: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
    module = rnnport.write(model, "torch", module=True, batch_first=True)
    inputs = torch.from_numpy(np.ascontiguousarray(x, dtype=model.dtype))
    with torch.inference_mode():
        if lengths is None:
            return module(inputs)[0].numpy()
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            inputs, torch.as_tensor(lengths), batch_first=True, enforce_sorted=False)
        out, _ = module(packed)
        return torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                      total_length=x.shape[1])[0].numpy()


def _within_float32_expectations(model: RNN, x: np.ndarray, y: np.ndarray) -> None:
    """rnnport's float32 error against float64 (PyTorch) is of the order of PyTorch's own
    float32 error. Steep gates amplify rounding, and the two engines add biases and
    products in different orders, so the errors differ by a small factor, not more."""
    exact = _torch_forward(model.astype(np.float64), x.astype(np.float64))
    ours = np.abs(y - exact).max()
    theirs = np.abs(_torch_forward(model, x) - exact).max()
    assert ours <= max(10 * theirs, 1e-5), (ours, theirs)


def _quiet_forward(model: RNN, x: np.ndarray, **kwargs):
    """Forward with every NumPy floating-point warning turned into an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return model.forward(x, **kwargs)


@pytest.mark.parametrize("spec", CELLS, ids=lambda s: s.describe())
def test_ten_thousand_steps_stay_finite_and_track_pytorch(spec: Spec) -> None:
    model = RNN.random(spec, seed=1, scale=0.4 if spec.cell == "rnn_relu" else None)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 10_000, 4)).astype(np.float32)
    y, _ = _quiet_forward(model, x)
    assert np.isfinite(y).all()
    if spec.cell != "rnn_relu":
        assert np.abs(y).max() <= 1.0
    _within_float32_expectations(model, x, y)


@pytest.mark.parametrize("spec", CELLS[:3], ids=lambda s: s.describe())
def test_saturating_gates_stay_bounded_without_warnings(spec: Spec) -> None:
    model = RNN.random(spec, seed=3, scale=60.0)
    x = np.random.default_rng(4).uniform(-3, 3, (3, 50, 4)).astype(np.float32)
    y, _ = _quiet_forward(model, x)
    assert np.isfinite(y).all() and np.abs(y).max() <= 1.0
    _within_float32_expectations(model, x, y)


@pytest.mark.parametrize("spec", CELLS, ids=lambda s: s.describe())
def test_float16_weights_match_pytorch_in_float32(spec: Spec) -> None:
    half = RNN.random(spec, seed=5, dtype=np.float16)
    x = np.random.default_rng(6).uniform(-1, 1, (2, 30, 4)).astype(np.float32)
    y, _ = half.forward(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, _torch_forward(half.astype(np.float32), x), atol=1e-5, rtol=0)


@pytest.mark.parametrize("spec", CELLS, ids=lambda s: s.describe())
def test_zero_and_one_step_sequences_against_packed_pytorch(spec: Spec) -> None:
    model = RNN.random(spec, seed=7)
    x = np.random.default_rng(8).uniform(-1, 1, (4, 6, 4)).astype(np.float32)
    lengths = np.array([1, 6, 1, 3])
    y, _ = model.forward(x, lengths=lengths)
    np.testing.assert_allclose(y, _torch_forward(model, x, lengths), atol=1e-5, rtol=0)
    y0, state = model.forward(x, lengths=[0, 6, 1, 0])
    assert not y0[0].any() and not y0[3].any()
    h = state[0] if spec.cell == "lstm" else state
    assert not h[:, [0, 3]].any()  # zero initial state, never advanced


@pytest.mark.parametrize("spec", CELLS, ids=lambda s: s.describe())
@pytest.mark.parametrize("batch", [0, 1])
def test_batch_of_one_and_of_none(spec: Spec, batch: int) -> None:
    model = RNN.random(spec, seed=9)
    x = np.random.default_rng(10).uniform(-1, 1, (batch, 5, 4)).astype(np.float32)
    y, _ = model.forward(x, lengths=np.full(batch, 3))
    assert y.shape == (batch, 5, spec.num_directions * 8)
    if batch:
        np.testing.assert_allclose(y, _torch_forward(model, x, np.full(batch, 3)), atol=1e-5,
                                   rtol=0)
