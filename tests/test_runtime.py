"""The NumPy runtime: semantics checked by structurally different paths."""

from __future__ import annotations

import itertools
import sys
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.activations import PARAMETERS, SIGMOID, TANH, function, kernel
from rnnport.gates import CANONICAL, reorder

SPECS = [
    Spec("lstm", 3, 4, num_layers=2, bidirectional=True),
    Spec("lstm", 3, 5, proj_size=2, bidirectional=True),
    Spec("gru", 3, 4, num_layers=2, bidirectional=True),
    Spec("gru", 3, 4, reset_after=False, bidirectional=True),
    Spec("rnn_tanh", 3, 4, num_layers=2),
    Spec("rnn_relu", 3, 4, bidirectional=True),
    Spec("lstm", 3, 4, peepholes=True, cell_clip=0.3),
    Spec("lstm", 3, 4, peepholes=True, gate_clip=0.5, input_forget=True, bidirectional=True),
    Spec("gru", 3, 4, gate_clip=0.5, reset_after=False),
]


def inputs(batch: int = 3, steps: int = 6, size: int = 3, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (batch, steps, size)).astype(np.float32)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_lengths_equal_running_each_sequence_cut_to_its_length(spec: Spec) -> None:
    rnn = RNN.random(spec, seed=3, scale=0.6)
    x = inputs()
    lengths = np.array([4, 6, 1])
    y, state = rnn.forward(x, lengths=lengths)
    h_all = state[0] if spec.cell == "lstm" else state
    for b, length in enumerate(lengths):
        y_b, state_b = rnn.forward(x[b:b + 1, :length])
        np.testing.assert_allclose(y[b, :length], y_b[0], atol=1e-6)
        assert not y[b, length:].any()
        h_b = state_b[0] if spec.cell == "lstm" else state_b
        np.testing.assert_allclose(h_all[:, b], h_b[:, 0], atol=1e-6)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_time_major_is_the_transpose(spec: Spec) -> None:
    rnn = RNN.random(spec, seed=4)
    x = inputs()
    y, _ = rnn.forward(x)
    y_t, _ = rnn.forward(x.transpose(1, 0, 2), time_major=True)
    np.testing.assert_array_equal(y_t.transpose(1, 0, 2), y)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_initial_state_continues_a_sequence(spec: Spec) -> None:
    if spec.bidirectional:
        spec = spec.replace(bidirectional=False)
    rnn = RNN.random(spec, seed=5, scale=0.6)
    x = inputs(steps=8)
    y_full, _ = rnn.forward(x)
    _, state = rnn.forward(x[:, :5])
    y_rest, _ = rnn.forward(x[:, 5:], state=state)
    np.testing.assert_allclose(y_rest, y_full[:, 5:], atol=1e-6)


def test_swapping_two_gates_changes_the_output() -> None:
    spec = Spec("lstm", 3, 4)
    rnn = RNN.random(spec, seed=6, scale=0.8)
    x = inputs()
    params = {k: np.array(v) for k, v in rnn.params[0][0].items()}
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        params[name] = reorder(params[name], CANONICAL["lstm"], "figo")
    swapped = RNN(spec, [[params]])
    assert not np.allclose(rnn.forward(x)[0], swapped.forward(x)[0], atol=1e-3)
    gru = RNN.random(Spec("gru", 3, 4), seed=6, scale=0.8)
    params = {k: reorder(np.array(v), "rzn", "zrn") for k, v in gru.params[0][0].items()}
    assert not np.allclose(gru.forward(x)[0], RNN(gru.spec, [[params]]).forward(x)[0], atol=1e-3)


def test_reset_before_and_after_are_different_functions() -> None:
    after = RNN.random(Spec("gru", 3, 4), seed=7, scale=0.8)
    before = RNN(after.spec.replace(reset_after=False), after.params)
    x = inputs()
    assert not np.allclose(after.forward(x)[0], before.forward(x)[0], atol=1e-3)


def test_one_step_lstm_by_hand() -> None:
    spec = Spec("lstm", 2, 3)
    rnn = RNN.random(spec, seed=8, scale=0.7, dtype=np.float64)
    p = rnn.params[0][0]
    x = np.random.default_rng(2).uniform(-1, 1, (1, 1, 2))
    pre = p["weight_ih"] @ x[0, 0] + p["bias_ih"] + p["bias_hh"]
    i, _f, g, o = np.split(pre, 4)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    c = sig(i) * np.tanh(g)
    h = sig(o) * np.tanh(c)
    y, (_h_n, c_n) = rnn.forward(x)
    np.testing.assert_allclose(y[0, 0], h, atol=1e-12)
    np.testing.assert_allclose(c_n[0, 0], c, atol=1e-12)


def test_float16_weights_compute_in_float32_and_float64_stays() -> None:
    spec = Spec("gru", 3, 4)
    half = RNN.random(spec, dtype=np.float16)
    assert half.dtype == np.float16 and half.forward(inputs())[0].dtype == np.float32
    double = RNN.random(spec, dtype=np.float64)
    assert double.forward(inputs())[0].dtype == np.float64
    np.testing.assert_allclose(half.forward(inputs())[0],
                               half.astype(np.float32).forward(inputs())[0], atol=0)


def test_empty_batch_and_zero_lengths() -> None:
    rnn = RNN.random(Spec("lstm", 3, 4, bidirectional=True))
    y, (h, _c) = rnn.forward(np.zeros((0, 5, 3), np.float32))
    assert y.shape == (0, 5, 8) and h.shape == (2, 0, 4)
    x = inputs(batch=2)
    h0 = np.random.default_rng(0).normal(size=(2, 2, 4)).astype(np.float32)
    y, (h, _) = rnn.forward(x, state=(h0, np.zeros_like(h0)), lengths=[0, 6])
    assert not y[0].any()
    np.testing.assert_array_equal(h[:, 0], h0[:, 0])


def test_stack_forward_chains_parts() -> None:
    lower = RNN.random(Spec("lstm", 3, 5, bidirectional=True), seed=1)
    upper = RNN.random(Spec("gru", 10, 4), seed=2)
    model = rnnport.stack([lower, upper])
    assert isinstance(model, rnnport.Stack)
    x = inputs()
    y, states = model.forward(x)
    y_lower, state_lower = lower.forward(x)
    y_upper, state_upper = upper.forward(y_lower)
    np.testing.assert_array_equal(y, y_upper)
    np.testing.assert_array_equal(states[1], state_upper)
    np.testing.assert_array_equal(states[0][0], state_lower[0])


def test_compatible_layers_merge_into_one_network() -> None:
    first = RNN.random(Spec("lstm", 3, 5, bidirectional=True), seed=1)
    second = RNN.random(Spec("lstm", 10, 5, bidirectional=True), seed=2)
    merged = rnnport.stack([first, second])
    assert isinstance(merged, RNN) and merged.spec.num_layers == 2
    x = inputs()
    np.testing.assert_array_equal(merged.forward(x)[0], second.forward(first.forward(x)[0])[0])
    assert merged.layers() == [first, second]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_lengths_with_initial_state_keep_each_final_state(spec: Spec) -> None:
    """Packed steps: unsorted lengths with ties, an initial state, and the cell state too."""
    rnn = RNN.random(spec, seed=5, scale=0.6)
    x = inputs(batch=5, steps=7)
    lengths = np.array([3, 7, 0, 3, 5])
    rng = np.random.default_rng(4)
    rows = spec.num_layers * spec.num_directions
    h0 = rng.normal(size=(rows, 5, spec.output_size)).astype(np.float32)
    c0 = rng.normal(size=(rows, 5, spec.hidden_size)).astype(np.float32)
    state = (h0, c0) if spec.cell == "lstm" else h0
    y, final = rnn.forward(x, state=state, lengths=lengths)
    for b, length in enumerate(lengths):
        part = (h0[:, b:b + 1], c0[:, b:b + 1]) if spec.cell == "lstm" else h0[:, b:b + 1]
        y_b, final_b = rnn.forward(x[b:b + 1, :length], state=part)
        np.testing.assert_allclose(y[b, :length], y_b[0], atol=1e-6)
        assert not y[b, length:].any()
        for got, want in zip(final if spec.cell == "lstm" else [final],
                             final_b if spec.cell == "lstm" else [final_b], strict=True):
            np.testing.assert_allclose(got[:, b], want[:, 0], atol=1e-6)


def test_zero_steps_return_the_initial_state() -> None:
    rnn = RNN.random(Spec("gru", 3, 4, num_layers=2, bidirectional=True))
    h0 = np.random.default_rng(1).normal(size=(4, 2, 4)).astype(np.float32)
    y, h = rnn.forward(np.zeros((2, 0, 3), np.float32), state=h0)
    assert y.shape == (2, 0, 8)
    np.testing.assert_array_equal(h, h0)


@pytest.mark.parametrize("name", sorted(PARAMETERS))
def test_each_activation_kernel_matches_its_definition(name: str) -> None:
    """The runtime's in-place kernels (scale folded in) against the plain functions, over
    a range that saturates."""
    activation = (name, 0.7, 0.2)
    x = np.linspace(-120, 120, 2001).astype(np.float64)
    # σ through tanh: a different formula from the kernel's exp.
    reference = (lambda v: 0.5 * (1 + np.tanh(v / 2))) if name == "Sigmoid" else function(activation)
    want = reference(x)
    for k in [kernel(activation)]:
        values = x * k.scale
        with np.errstate(over="ignore"):
            k.prescaled(values)
            out = np.empty_like(x)
            k.into(x, out)
        np.testing.assert_allclose(values, want, atol=1e-15, err_msg=repr(k))
        np.testing.assert_allclose(out, want, atol=1e-15, err_msg=repr(k))


def test_a_network_that_cannot_be_weakly_referenced_is_never_mistaken_for_another() -> None:
    """The prepared-layer cache is keyed by id: a network it cannot watch die is not cached,
    so a later one at the same id gets its own weights."""
    from collections import namedtuple

    from rnnport.runtime import run

    Plain = namedtuple("Plain", "spec dtype params")
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4, 3)).astype(np.float32)
    results = []
    for seed in (1, 2):
        model = RNN.random(Spec("gru", 3, 4), seed=seed)
        results.append(run(Plain(model.spec, model.dtype, model.params), x)[0])
        np.testing.assert_array_equal(results[-1], model.forward(x)[0])
    assert not np.array_equal(results[0], results[1])


# -- arguments checked at the boundary -----------------------------------------------------


def test_a_ragged_input_is_a_shape_error() -> None:
    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4))
    with pytest.raises(rnnport.ShapeError, match="x cannot be an array"):
        model.forward([[[1.0, 2.0, 3.0]], [[1.0, 2.0]]])


def test_a_wrong_input_shape_suggests_a_batch_axis_only_where_one_is_missing() -> None:
    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4))
    with pytest.raises(rnnport.ShapeError, match=r"shape \(5, 3\);.*Add a batch axis"):
        model.forward(np.zeros((5, 3), np.float32))
    for shape in ((2, 5, 4), (1, 2, 5, 3), (5, 4)):
        with pytest.raises(rnnport.ShapeError, match="input_size is 3") as refused:
            model.forward(np.zeros(shape, np.float32))
        assert "batch axis" not in str(refused.value)


def test_a_broadcast_view_too_large_to_run_at_once_is_refused_before_any_copy() -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4))
    x = np.broadcast_to(np.zeros(3, np.float32), (1, 10**9, 3))  # 12 bytes of real memory
    with pytest.raises(rnnport.LimitError, match="run it in pieces along time") as error:
        model.forward(x)
    assert error.value.limit == "elements"


def test_the_elements_limit_can_be_raised_for_a_call_and_only_there() -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4))
    x = np.zeros((2, 5, 3), np.float32)
    with rnnport.limits(elements=100), pytest.raises(rnnport.LimitError, match="elements=500\\b"):
        model.forward(x)
    with rnnport.limits(elements=10_000):
        assert model.forward(x)[0].shape == (2, 5, 4)
    assert model.forward(x)[0].shape == (2, 5, 4)


def test_random_weights_for_a_billion_layers_are_refused() -> None:
    with pytest.raises(rnnport.LimitError, match="parameters to draw in memory.*'elements'"):
        rnnport.RNN.random(rnnport.Spec("lstm", 3, 4, num_layers=10**9))


def test_stacking_builds_each_merged_network_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each merge used to build (and check) the network so far again: quadratic work in the
    number of layers. Counted, not timed: one network built for one run of layers."""
    layers = [rnnport.RNN.random(rnnport.Spec("gru", 3 if k == 0 else 4, 4), seed=k)
              for k in range(50)] + [rnnport.RNN.random(rnnport.Spec("lstm", 4, 2), seed=9)]
    built = []
    original = rnnport.RNN.__init__

    def counting(self: rnnport.RNN, spec: rnnport.Spec, *args: object, **kwargs: object) -> None:
        built.append(spec.num_layers)
        original(self, spec, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rnnport.RNN, "__init__", counting)
    model = rnnport.stack(layers)
    assert [spec.num_layers for spec in model.specs] == [50, 1]  # type: ignore[union-attr]
    assert built == [50]


def test_a_flat_buffer_claiming_a_billion_layers_is_sized_without_listing_them() -> None:
    buffer = rnnport.write(rnnport.RNN.random(rnnport.Spec("gru", 3, 4)), "cudnn")
    with pytest.raises(rnnport.ShapeError, match="999999999 × "):
        rnnport.read(buffer, "cudnn", cell="gru", input_size=3, hidden_size=4,
                     num_layers=10**9)


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_saturated_gates_run_whatever_np_seterr_says(cell: str) -> None:
    """e^x overflowing to inf or underflowing to 0 gives a gate's exact limit: the runtime
    runs through it even where the caller's np.seterr says raise, with the same numbers."""
    net = RNN.random(Spec(cell, 5, 6, num_layers=2, bidirectional=True), seed=3)
    x = np.random.default_rng(4).standard_normal((2, 7, 5)).astype(np.float32) * 1e4
    quiet = net.forward(x, threads=1)
    with np.errstate(all="raise"):
        loud = net.forward(x, threads=1)
    np.testing.assert_array_equal(loud[0], quiet[0])
    assert np.isfinite(loud[0]).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_sigmoid_and_tanh_kernels_give_the_bits_of_their_plain_formulas(dtype: type) -> None:
    """The kernels' in-place passes (a 0-d one, division) give, bit for bit, 1 / (1 + e^v)
    and NumPy's tanh, saturated and subnormal values included."""
    info = np.finfo(dtype)
    values = np.concatenate([
        np.random.default_rng(1).uniform(-120, 120, 20_000),
        np.random.default_rng(2).uniform(-800, 800, 20_000),
        [0.0, -0.0, info.tiny, -info.tiny, info.smallest_subnormal, info.max, -info.max,
         np.inf, -np.inf]]).astype(dtype)
    with np.errstate(over="ignore", under="ignore"):
        sigmoid = values.copy()
        SIGMOID.prescaled(sigmoid)
        np.testing.assert_array_equal(sigmoid, np.reciprocal(np.exp(values) + dtype(1)))
        candidate = values.copy()
        TANH.prescaled(candidate)
        np.testing.assert_array_equal(candidate, np.tanh(values))
        direct = np.empty_like(values)
        TANH.into(values, direct)
        np.testing.assert_array_equal(direct, np.tanh(values))
    assert sigmoid.dtype == candidate.dtype == dtype


LEAN_SPECS = [
    Spec("lstm", 3, 5, num_layers=2),
    Spec("lstm", 3, 4, bidirectional=True, bias=False),
    Spec("gru", 3, 4, num_layers=2, bidirectional=True),
    Spec("gru", 3, 4, reset_after=False, bidirectional=True),
    Spec("gru", 3, 4, bias=False),
    Spec("rnn_tanh", 3, 4, bidirectional=True),
    Spec("rnn_relu", 3, 4, num_layers=2),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", LEAN_SPECS, ids=lambda s: s.describe())
def test_batch_one_steps_compute_the_general_steps_bits(
        spec: Spec, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """At batch 1 a layer without options steps through runtime._lean_cell, forward and
    streamed; the general steps (forced here) compute the same bits."""
    from rnnport import runtime

    net = RNN.random(spec, seed=6, dtype=dtype, scale=0.9)
    x = np.random.default_rng(6).standard_normal((1, 9, 3)).astype(dtype)

    def both() -> list[object]:
        y, state = net.forward(x)
        found = [y, state]
        if not spec.bidirectional:
            stream = net.stream(1)
            found += [np.concatenate([stream(x[:, t:t + 1]) for t in range(9)], axis=1),
                      stream.state]
        return found

    lean = both()
    monkeypatch.setattr(runtime, "_lean", lambda layer: False)
    general = both()
    for mine, theirs in zip(lean, general, strict=True):
        for a, b in zip(mine if isinstance(mine, tuple) else (mine,),
                        theirs if isinstance(theirs, tuple) else (theirs,), strict=True):
            assert a.dtype == b.dtype == dtype
            np.testing.assert_array_equal(a, b)


HALVES_SPECS = [Spec("lstm", 3, 64, num_layers=2, bidirectional=True),
                Spec("lstm", 3, 320, reverse=True, bias=False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", HALVES_SPECS, ids=lambda s: s.describe())
def test_half_steps_give_the_whole_steps_bits(spec: Spec, dtype: type,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two half steps (one per half of the units, as the two processes of a lockstep layer
    run them) over a sequence from a state that is not zeros give the bits of the whole
    lean step, for layers whose check (runtime._halves_agree, made to apply to small
    layers here) says they agree, as it does for these."""
    from rnnport import runtime

    monkeypatch.setattr(runtime, "HALVES_MIN_BYTES", 0)
    net = RNN.random(spec, seed=8, dtype=dtype, scale=0.9)
    layer = runtime._prepared(net)[0]
    assert runtime._halves(layer)
    rng = np.random.default_rng(8)
    inputs = rng.standard_normal((11, 1, 3)).astype(dtype)
    directions, hidden = layer.directions, layer.hidden
    projected = runtime._project(layer, inputs, None, slice(0, directions), slice(0, 1))
    start = rng.standard_normal((2, directions, 1, hidden)).astype(dtype)
    history = np.zeros((12, directions, 1, hidden), dtype)
    cells = np.zeros_like(history)
    history[0], cells[0] = start
    runtime._alone([(layer, d) for d in range(directions)],
                   [projected[d:d + 1] for d in range(directions)], history, cells, 0, 0)
    expected = np.zeros_like(history)
    expected[0] = start[0]
    cell = start[1].copy()
    runtime._lean_loop(layer, projected, expected, cell)
    np.testing.assert_array_equal(history, expected)
    np.testing.assert_array_equal(cells[-1], cell)


ROW_HALVES_SPECS = [Spec("lstm", 5, 64, num_layers=2), Spec("lstm", 5, 128, bias=False),
                    Spec("gru", 5, 64, reverse=True), Spec("gru", 5, 128, bias=False)]


@pytest.mark.parametrize("batch", [4, 8, 9])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", ROW_HALVES_SPECS, ids=lambda s: s.describe())
def test_half_rows_steps_give_the_pieces_bits(spec: Spec, dtype: type, batch: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """At more than one sequence, two half steps (one per half of the units) give the bits
    of the layer's unit-major steps run whole, as runtime._run_layer runs them, for LSTMs
    and GRUs. Small layers made to qualify: their products in blocks of at most 48 rows of
    Rᵀ (each half of a gate's 64 or 128 units in blocks of 32)."""
    from rnnport import runtime

    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    net = RNN.random(spec, seed=8, dtype=dtype, scale=0.9)
    layer = runtime._prepared(net)[0]
    pieces = runtime._lockstep_pieces(layer, batch)
    monkeypatch.setattr(runtime, "SMALL_PRODUCT", 48 * spec.hidden_size * batch)
    chunk = runtime._row_halves(layer, batch)
    assert chunk == 48 and len(pieces) == 1
    rng = np.random.default_rng(8)
    inputs = rng.standard_normal((11, batch, 5)).astype(dtype)
    directions, hidden = layer.directions, layer.hidden
    projected = [np.empty((1, 11, after - first, layer.width), dtype)
                 for _, first, after in pieces]
    for piece, out in zip(pieces, projected, strict=True):
        runtime._project_piece(layer, piece[0], inputs, piece, out)
    start = rng.standard_normal((2, directions, batch, hidden)).astype(dtype)
    lstm = spec.cell == "lstm"
    history = np.zeros((12, directions, batch, hidden), dtype)
    cells = np.zeros((runtime._CELL_RING, directions, batch, hidden if lstm else 0), dtype)
    history[0] = start[0]
    if lstm:
        cells[0] = start[1]
    runtime._alone([(layer, d) for d in range(directions)], projected, history, cells, chunk, 0)
    expected = np.zeros_like(history)
    expected[0] = start[0]
    cell = start[1].copy() if lstm else None
    for (d, first, after), source in zip(pieces, projected, strict=True):
        rows = slice(first, after)
        runtime._gated_loop(layer.direction(d), source, expected[:, d:d + 1, rows],
                            None if cell is None else cell[d:d + 1, rows], None, None)
    np.testing.assert_array_equal(history, expected)
    if lstm:
        np.testing.assert_array_equal(cells[11 % runtime._CELL_RING], cell)


UNIT_SPECS = [Spec("lstm", 3, 6, num_layers=2), Spec("lstm", 3, 5, bidirectional=True, bias=False),
              Spec("gru", 3, 6, bidirectional=True), Spec("gru", 3, 5, bias=False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", UNIT_SPECS, ids=lambda s: s.describe())
def test_unit_major_steps_compute_what_sequence_major_steps_do(
        spec: Spec, dtype: type, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lean LSTM or GRU at four sequences or more steps unit-major (h, c and the gates as
    (units, sequences), the product Rᵀ h): within a product's rounding of the
    sequence-major steps, both directions in one loop, with an initial state and with
    lengths that leave fewer than four sequences running (and none), each final state
    where its sequence ends; and at three sequences it does not run."""
    from rnnport import runtime

    net = RNN.random(spec, seed=9, dtype=dtype, scale=0.8)
    rng = np.random.default_rng(9)
    x = rng.standard_normal((6, 9, 3)).astype(dtype)
    directions = 2 if spec.bidirectional else 1
    shape = (spec.num_layers * directions, 6, spec.hidden_size)
    start: Any = rng.standard_normal(shape).astype(dtype)
    if spec.cell == "lstm":
        start = (start, rng.standard_normal(shape).astype(dtype))
    ran: list[int] = []
    unit_loop = runtime._unit_loop

    def counted(*args: Any) -> None:
        ran.append(args[2].shape[2])
        unit_loop(*args)

    monkeypatch.setattr(runtime, "_unit_loop", counted)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {"rtol": 1e-12}
    for lengths in (None, np.array([9, 2, 9, 5, 1, 0])):
        y, state = net.forward(x, state=start, lengths=lengths, threads=1)
        assert ran == [6] * spec.num_layers
        ran.clear()
        with monkeypatch.context() as sequence_major:
            sequence_major.setattr(runtime, "_unit_major", lambda layer, batch: False)
            y_rows, state_rows = net.forward(x, state=start, lengths=lengths, threads=1)
        assert not ran
        np.testing.assert_allclose(y, y_rows, **tolerance)
        for got, want in zip(state if spec.cell == "lstm" else [state],
                             state_rows if spec.cell == "lstm" else [state_rows], strict=True):
            np.testing.assert_allclose(got, want, **tolerance)
    net.forward(x[:3], threads=1)
    assert not ran


def test_a_batch_runs_in_halves_of_its_units_only_as_one_piece(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-way lean layer runs its steps in halves of its units where its batch runs as
    one piece, unit-major: a batch in two halves (a GRU of hidden 512 at 32 sequences) runs
    each half whole in a process of its own, and so do other layers."""
    from rnnport import runtime

    layer = runtime._prepared(RNN.random(Spec("gru", 8, 512)))[0]
    assert len(runtime._lockstep_pieces(layer, 16)) == 1 and runtime._row_halves(layer, 16) == 122
    assert len(runtime._lockstep_pieces(layer, 32)) == 2 and runtime._row_halves(layer, 32) is None
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    assert runtime._row_halves(layer, 3) is None  # below unit-major's four sequences
    for other in (Spec("gru", 8, 512, bidirectional=True), Spec("gru", 8, 512, reset_after=False),
                  Spec("lstm", 8, 512, peepholes=True)):
        assert runtime._row_halves(runtime._prepared(RNN.random(other))[0], 16) is None


class _RefusedAdvice:
    """``mmap`` as a kernel without transparent huge pages has it: the advice is refused."""

    MAP_PRIVATE, MAP_ANONYMOUS, MADV_HUGEPAGE = 0, 0, 0

    class mmap:  # the name the runtime calls
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        def madvise(self, *args: Any) -> None:
            raise OSError(22, "Invalid argument")


@pytest.mark.parametrize("advice", ["as here", "refused", "absent"])
def test_step_weights_placed_for_huge_pages_are_exact_separate_copies(
        advice: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The weights a step reads are copied into one mapping advised for huge pages where
    the kernel takes the advice and they hold enough: each copy C-contiguous, equal to its
    array, writable, 64-byte aligned, apart from the others. Where the advice is refused
    or does not exist, and for small arrays, they are the arrays made C-contiguous (an
    array already so is kept)."""
    from rnnport import runtime

    if advice == "refused":
        monkeypatch.setattr(runtime, "mmap", _RefusedAdvice)
    elif advice == "absent":
        monkeypatch.setattr(runtime, "_HUGE_PAGES", False)
    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((700, 300)).astype(np.float32),
              rng.standard_normal((300, 333)).T,  # a transposed view
              rng.standard_normal(5).astype(np.float32)[::2]]
    copies = runtime._resident(arrays)
    mapped = not np.shares_memory(copies[0], arrays[0])
    assert mapped == (advice == "as here" and runtime._HUGE_PAGES
                      and sys.platform.startswith("linux"))
    for array, copy in zip(arrays, copies, strict=True):
        assert copy.flags.c_contiguous and copy.flags.writeable
        assert copy.dtype == array.dtype and copy.shape == array.shape
        np.testing.assert_array_equal(copy, array)
        assert mapped or np.shares_memory(copy, array) == array.flags.c_contiguous
        assert not mapped or copy.ctypes.data % 64 == 0
    spans = sorted((copy.ctypes.data, copy.ctypes.data + copy.nbytes) for copy in copies)
    assert all(end <= start for (_, end), (start, _) in itertools.pairwise(spans))
    small = runtime._resident([arrays[2]])[0]  # below HUGE_MIN_BYTES: an ordinary copy
    np.testing.assert_array_equal(small, arrays[2])


def test_a_network_computes_the_same_bits_with_its_weights_in_huge_pages_or_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the step weights lie changes no number: batch 1 (one matrix-vector product a
    step) and unit-major blocks alike."""
    from rnnport import runtime

    monkeypatch.setattr(runtime, "HUGE_MIN_BYTES", 1)  # every layer, however small
    spec = Spec("lstm", 7, 160, num_layers=2, bidirectional=True)
    x = np.random.default_rng(6).standard_normal((5, 9, 7)).astype(np.float32)
    results = []
    for huge in (True, False):
        monkeypatch.setattr(runtime, "_HUGE_PAGES", huge and runtime._HUGE_PAGES)
        net = RNN.random(spec, seed=6)  # a network of its own: prepared afresh
        results.append([net.forward(x[:1], threads=1), net.forward(x, threads=1)])
    for (y_huge, state_huge), (y, state) in zip(*results, strict=True):
        np.testing.assert_array_equal(y_huge, y)
        for got, want in zip(state_huge, state, strict=True):
            np.testing.assert_array_equal(got, want)
