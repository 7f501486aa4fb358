"""Golden cases from real Keras 3 and PyTorch: rnnport's NumPy forward must match them."""

from __future__ import annotations

import numpy as np
import pytest
from golden_cases import flatten_state, load, names

import rnnport


@pytest.mark.parametrize("name", names())
def test_forward_matches_framework(name: str) -> None:
    case = load(name)
    model = case.read()
    x = case.arrays["x"]
    y, state = model.forward(x, state=case.initial_state(model), lengths=case.lengths)
    tolerance = case.meta["tolerance"]
    mask = case.valid_mask()
    expected = case.arrays["y"]
    assert y.shape == expected.shape
    assert y.dtype == np.dtype(case.meta["dtype"])
    np.testing.assert_allclose(np.where(mask, y, 0), np.where(mask, expected, 0),
                               atol=tolerance, rtol=0)
    for got, want in zip(flatten_state(state), flatten_state(case.final_state(model)), strict=True):
        np.testing.assert_allclose(got, want, atol=tolerance, rtol=0)


@pytest.mark.parametrize("name", names())
def test_format_is_told_from_the_weights(name: str) -> None:
    case = load(name)
    assert rnnport.read(case.native(), **case.meta["read_options"]) == case.read()


@pytest.mark.parametrize("name", names())
def test_native_round_trip_is_bit_exact(name: str) -> None:
    case = load(name)
    model = case.read()
    written = rnnport.write(model, case.framework)
    native = case.native()
    if case.framework == "torch":
        assert written.keys() == native.keys()
        pairs = [(written[k], native[k]) for k in native]
    else:
        pairs = list(zip(flatten_state(written), flatten_state(native), strict=True))
    for got, want in pairs:
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_golden_set_covers_every_cell_and_variant() -> None:
    specs = []
    for name in names():
        model = load(name).read()
        specs.extend(model.specs if isinstance(model, rnnport.Stack) else [model.spec])
    cells = {(s.cell, s.reset_after) for s in specs}
    assert cells >= {("lstm", True), ("gru", True), ("gru", False), ("rnn_tanh", True),
                     ("rnn_relu", True)}
    assert any(s.proj_size for s in specs) and any(not s.bias for s in specs)
    assert any(s.bidirectional and s.num_layers > 1 for s in specs)
    assert any(isinstance(load(n).read(), rnnport.Stack) for n in names("keras"))
