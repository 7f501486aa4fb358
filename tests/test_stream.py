"""``RNN.stream`` and ``Stack.stream``: chunk after chunk, the same numbers as ``forward`` over
the whole sequence (the reference: one call, a structurally different path through the
buffers and the state), for every cell and option, chunk size and float dtype; resets of
chosen rows; refusals and the messages users see."""

from __future__ import annotations

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec, Stack
from rnnport.errors import DTypeError, ShapeError, StateError, UnsupportedFeatureError

STEPS = 15
CHUNKS = (1, 2, 7, STEPS)

SPECS = [
    Spec("lstm", 3, 4, num_layers=2),
    Spec("lstm", 3, 5, proj_size=2),
    Spec("lstm", 3, 5, proj_size=2, proj_bias=True),
    Spec("lstm", 3, 4, peepholes=True, cell_clip=0.3),
    Spec("lstm", 3, 4, peepholes=True, gate_clip=0.5, input_forget=True),
    Spec("lstm", 3, 4, layer_norm=True),
    Spec("lstm", 3, 4, peepholes=True, layer_norm=True, gate_clip=0.7),
    Spec("lstm", 3, 4, activations=(("HardSigmoid", 0.2, 0.5), ("LeakyRelu", 0.1, 0.0),
                                    ("Softsign", 0.0, 0.0))),
    Spec("lstm", 3, 4, bias=False),
    Spec("gru", 3, 4, num_layers=2),
    Spec("gru", 3, 4, bias=False),
    Spec("gru", 3, 4, reset_after=False),
    Spec("gru", 3, 4, gate_clip=0.5, reset_after=False),
    Spec("gru", 3, 4, activations=(("Sigmoid", 0.0, 0.0), ("ScaledTanh", 1.5, 0.5))),
    Spec("rnn_tanh", 3, 4, num_layers=2, gate_clip=0.4),
    Spec("rnn_relu", 3, 4),
    Spec("rnn_tanh", 3, 4, bias=False),
]


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


def _same_state(a: object, b: object) -> bool:
    if isinstance(a, (tuple, list)):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(
            _same_state(x, y) for x, y in zip(a, b, strict=True))
    return _same(np.asarray(a), np.asarray(b))


def _streamed(model: rnnport.Model, x: np.ndarray, chunk: int, state: object = None,
              time_major: bool = False) -> tuple[np.ndarray, object]:
    axis = 0 if time_major else 1
    stream = model.stream(x.shape[1 - axis], state=state, time_major=time_major)
    pieces = [stream(x[:, start:start + chunk] if axis else x[start:start + chunk])
              for start in range(0, x.shape[axis], chunk)]
    return np.concatenate(pieces, axis=axis), stream.state


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("spec", SPECS, ids=lambda spec: spec.describe())
def test_chunks_are_forward_bit_for_bit(spec: Spec, dtype: type) -> None:
    net = RNN.random(spec, seed=3, dtype=dtype, scale=0.9)
    rng = np.random.default_rng(1)
    for batch in (1, 3, 5):  # one row, rows, and a lean layer's unit-major steps (4 and more)
        x = rng.standard_normal((batch, STEPS, spec.input_size)).astype(dtype)
        y, state = net.forward(x)
        for chunk in CHUNKS:
            streamed, final = _streamed(net, x, chunk)
            assert _same(streamed, y), (batch, chunk)
            assert _same_state(final, state), (batch, chunk)


def test_float16_weights_stream_in_float32() -> None:
    net = RNN.random(Spec("gru", 3, 4), dtype=np.float16)
    x = np.random.default_rng(2).standard_normal((2, 9, 3)).astype(np.float16)
    y, state = net.forward(x)
    streamed, final = _streamed(net, x, 2)
    assert streamed.dtype == np.float32 and _same(streamed, y) and _same_state(final, state)


def test_time_major_and_initial_state() -> None:
    net = RNN.random(Spec("lstm", 3, 4, num_layers=2, proj_size=3), seed=4)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((STEPS, 2, 3)).astype(np.float32)
    start = (rng.standard_normal((2, 2, 3)).astype(np.float32),
             rng.standard_normal((2, 2, 4)).astype(np.float32))
    y, state = net.forward(x, state=start, time_major=True)
    streamed, final = _streamed(net, x, 4, state=start, time_major=True)
    assert _same(streamed, y) and _same_state(final, state)


def test_stack_streams_part_after_part() -> None:
    stack = Stack([RNN.random(Spec("lstm", 3, 5, peepholes=True), seed=1),
                   RNN.random(Spec("gru", 5, 4, reset_after=False), seed=2)])
    x = np.random.default_rng(4).standard_normal((2, STEPS, 3)).astype(np.float32)
    y, states = stack.forward(x)
    for chunk in (1, 7):
        streamed, finals = _streamed(stack, x, chunk)
        assert _same(streamed, y) and _same_state(finals, states)


def test_large_batch_runs_in_forwards_pieces() -> None:
    # batch 32 × 128 × 512 multiply-adds per step: forward splits the batch in two halves.
    net = RNN.random(Spec("lstm", 8, 128), seed=5)
    x = np.random.default_rng(5).standard_normal((64, 3, 8)).astype(np.float32)
    y, state = net.forward(x, threads=1)
    streamed, final = _streamed(net, x, 1)
    assert _same(streamed, y) and _same_state(final, state)


def test_reset_rows_restarts_one_slot() -> None:
    net = RNN.random(Spec("lstm", 3, 4), seed=6)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 10, 3)).astype(np.float32)
    stream = net.stream(3)
    stream(x[:, :6])
    stream.reset(1)  # slot 1 starts a new sequence at step 6; slots 0 and 2 go on
    tail = stream(x[:, 6:])
    whole, _ = net.forward(x)
    fresh, _ = net.forward(x[1:2, 6:])
    assert _same(tail[[0, 2]], whole[[0, 2], 6:]) and _same(tail[1:2], fresh)

    given = (rng.standard_normal((1, 2, 4)).astype(np.float32),
             rng.standard_normal((1, 2, 4)).astype(np.float32))
    stream.reset([0, 2], state=given)
    out = stream(x[:, :4])
    expected, _ = net.forward(x[[0, 2], :4], state=given)
    assert _same(out[[0, 2]], expected)
    stream.reset(np.array([False, True, False]))
    assert not stream.state[0][:, 1].any() and stream.state[0][:, 0].any()
    stream.reset()
    assert not any(part.any() for part in stream.state)


def test_state_is_a_copy() -> None:
    stream = RNN.random(Spec("gru", 3, 4)).stream(1)
    stream(np.ones((1, 2, 3), np.float32))
    state = stream.state
    state[...] = 7
    assert not (stream.state == 7).any()


def test_chunk_dtype_cast_and_lists() -> None:
    net = RNN.random(Spec("rnn_tanh", 3, 4))
    x = np.random.default_rng(7).standard_normal((1, 5, 3))
    y, _ = net.forward(x)
    assert _same(net.stream(1)(x), y)                 # float64 chunk, float32 network
    assert _same(net.stream(1)(x.tolist()), y)


def test_refusals_say_why_and_what_to_do() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"RNN\.stream: the network is "
                       r"bidirectional; expected a one-way network, because .* backward "
                       r"direction starts at the sequence's end\. Run forward"):
        RNN.random(Spec("lstm", 3, 4, bidirectional=True)).stream()
    with pytest.raises(UnsupportedFeatureError, match="reverse"):
        RNN.random(Spec("gru", 3, 4, reverse=True)).stream()
    stack = Stack([RNN.random(Spec("lstm", 3, 5)),
                   RNN.random(Spec("gru", 5, 4, bidirectional=True))])
    with pytest.raises(UnsupportedFeatureError, match=r"Stack\.stream: part 1 of the stack is "
                       "bidirectional"):
        stack.stream()
    net = RNN.random(Spec("lstm", 3, 4))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ShapeError, match=r"batch_size=.*expected a whole number ≥ 1"):
            net.stream(bad)  # type: ignore[arg-type]


def test_chunk_errors_are_clear() -> None:
    stream = RNN.random(Spec("lstm", 3, 4)).stream(2)
    with pytest.raises(ShapeError) as caught:
        stream(np.zeros((3, 1, 3), np.float32))
    assert str(caught.value) == (
        "stream(x_chunk): x_chunk has shape (3, 1, 3); expected (batch, steps, input) = "
        "(2, steps ≥ 1, 3) because the stream was made with batch_size=2 for a network of "
        "input_size 3. A stream serves the same 2 slots at every call: pass a chunk for each "
        "(reset a slot when a new sequence starts in it), or make a stream with batch_size=3.")
    with pytest.raises(ShapeError, match="at least one step"):
        stream(np.zeros((2, 0, 3), np.float32))
    with pytest.raises(ShapeError, match=r"expected \(batch, steps, input\)"):
        stream(np.zeros((2, 1, 5), np.float32))
    with pytest.raises(ShapeError, match=r"x_chunk\[None\]"):
        RNN.random(Spec("lstm", 3, 4)).stream(1)(np.zeros((4, 3), np.float32))
    with pytest.raises(DTypeError, match=r"dtype complex128; .*x_chunk.astype\(numpy.float32\)"):
        stream(np.zeros((2, 1, 3), complex))


def test_reset_errors_change_nothing() -> None:
    net = RNN.random(Spec("lstm", 3, 4))
    stream = net.stream(2)
    stream(np.ones((2, 3, 3), np.float32))
    before = stream.state
    with pytest.raises(StateError, match=r"rows holds 2; expected slots 0 ≤ row < 2"):
        stream.reset(2)
    with pytest.raises(StateError, match="twice"):
        stream.reset([1, 1])
    with pytest.raises(StateError, match=r"stream\.reset: h has shape \(1, 2, 4\); "
                       r"expected \(1, 1, 4\)"):
        stream.reset(0, state=(np.zeros((1, 2, 4)), np.zeros((1, 1, 4))))
    with pytest.raises(StateError, match="one entry per part"):
        Stack([net, RNN.random(Spec("gru", 4, 2))]).stream(2).reset(state=[None])
    assert _same_state(stream.state, before)


@pytest.mark.parametrize("spec", [Spec("lstm", 3, 4), Spec("gru", 3, 4, num_layers=2),
                                  Spec("lstm", 3, 4, peepholes=True)],
                         ids=lambda spec: spec.describe())
def test_saturated_gates_stream_whatever_np_seterr_says(spec: Spec) -> None:
    # e^x overflows to inf in saturated gates: its exact limit, as forward computes it.
    net = RNN.random(spec, seed=5)
    x = np.random.default_rng(5).standard_normal((1, 6, 3)).astype(np.float32) * 1e4
    y, _ = net.forward(x)
    for chunk in (1, 3):
        with np.errstate(all="raise"):
            streamed, _ = _streamed(net, x, chunk)
        assert _same(streamed, y) and np.isfinite(streamed).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_workload_s_size_one_step_at_a_time(dtype: type) -> None:
    # Products large enough for OpenBLAS's matrix kernels over the whole sequence; a one-row
    # input projection would run as a matrix-vector product with other sums (see _one_row).
    net = RNN.random(Spec("lstm", 128, 128), seed=8, dtype=dtype)
    x = np.random.default_rng(8).standard_normal((1, 40, 128)).astype(dtype)
    y, state = net.forward(x)
    for chunk in (1, 7):
        streamed, final = _streamed(net, x, chunk)
        assert _same(streamed, y) and _same_state(final, state)
    # forward one step at a time, its state passed back in, computes the same too
    steps, carried = [], None
    for t in range(x.shape[1]):
        out, carried = net.forward(x[:, t:t + 1], state=carried)
        steps.append(out)
    assert _same(np.concatenate(steps, axis=1), y) and _same_state(carried, state)


# -- engines: the same API through ONNX Runtime (I/O binding) and PyTorch --------------------

ENGINE_SPECS = [
    Spec("lstm", 3, 4, num_layers=2),
    Spec("gru", 3, 4),
    Spec("rnn_tanh", 3, 4, num_layers=2),
]
ENGINES = ["onnxruntime", "torch"]


def _engine(name: str) -> str:
    pytest.importorskip("onnxruntime" if name == "onnxruntime" else "torch")
    return name


def _close_state(a: object, b: object) -> bool:
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(  # type: ignore[arg-type]
            _close_state(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[call-overload]
    return np.asarray(a).dtype == np.asarray(b).dtype and np.allclose(a, b, atol=1e-5, rtol=0)


def _engine_streamed(model: rnnport.Model, x: np.ndarray, chunk: int, engine: str,
                     **options: object) -> tuple[np.ndarray, object]:
    stream = model.stream(x.shape[0], engine=engine, **options)  # type: ignore[arg-type]
    pieces = [stream(x[:, start:start + chunk]) for start in range(0, x.shape[1], chunk)]
    return np.concatenate(pieces, axis=1), stream.state


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("spec", ENGINE_SPECS, ids=lambda spec: spec.describe())
def test_engine_streams_match_the_numpy_stream(spec: Spec, engine: str) -> None:
    engine = _engine(engine)
    net = RNN.random(spec, seed=9, scale=0.9)
    x = np.random.default_rng(9).standard_normal((2, 10, 3)).astype(np.float32)
    for chunk in (1, 3):
        expected, final = _streamed(net, x, chunk)
        streamed, state = _engine_streamed(net, x, chunk, engine)
        assert streamed.dtype == np.float32 and streamed.shape == expected.shape
        assert np.allclose(streamed, expected, atol=1e-5, rtol=0), chunk
        assert _close_state(state, final), chunk


@pytest.mark.parametrize("engine", ENGINES)
def test_engine_stack_state_reset_and_time_major(engine: str) -> None:
    engine = _engine(engine)
    stack = Stack([RNN.random(Spec("lstm", 3, 5), seed=1),
                   RNN.random(Spec("gru", 5, 4), seed=2)])
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 8, 3)).astype(np.float32)
    start = [(rng.standard_normal((1, 3, 5)).astype(np.float32),
              rng.standard_normal((1, 3, 5)).astype(np.float32)), None]
    expected, final = _streamed(stack, x, 3, state=start)
    streamed, state = _engine_streamed(stack, x, 3, engine, state=start)
    assert np.allclose(streamed, expected, atol=1e-5, rtol=0) and _close_state(state, final)

    stream = stack.stream(3, engine=engine, time_major=True)
    numpy_stream = stack.stream(3, time_major=True)
    xt = np.ascontiguousarray(x.transpose(1, 0, 2))
    for mine, theirs in ((stream, numpy_stream),):
        mine(xt[:5]), theirs(xt[:5])
        mine.reset([1]), theirs.reset([1])
        assert np.allclose(mine(xt[5:]), theirs(xt[5:]), atol=1e-5, rtol=0)
        assert _close_state(mine.state, theirs.state)
    stream.reset()
    assert not any(np.asarray(part).any() for entry in stream.state
                   for part in (entry if isinstance(entry, tuple) else (entry,)))


@pytest.mark.parametrize("spec", ENGINE_SPECS, ids=lambda spec: spec.describe())
def test_torch_stream_computes_what_the_module_does(spec: Spec) -> None:
    # The stream calls the module's operator directly; the module itself is the reference.
    torch = pytest.importorskip("torch")
    net = RNN.random(spec, seed=11, scale=0.9)
    x = np.random.default_rng(11).standard_normal((10, 2, 3)).astype(np.float32)
    stream = net.stream(2, engine="torch", time_major=True)
    module = rnnport.write(net, "torch", module=True, batch_first=False)
    state = None
    for chunk in (x[:1], x[1:4], x[4:5], x[5:]):
        with torch.inference_mode():
            y, state = module(torch.from_numpy(np.ascontiguousarray(chunk)), state)
        assert _same(stream(chunk), y.numpy())
    final = stream.state
    for mine, theirs in zip(final if isinstance(final, tuple) else (final,),
                            state if isinstance(state, tuple) else (state,), strict=True):
        assert _same(mine, theirs.numpy())


def test_onnxruntime_stream_binds_its_buffers() -> None:
    _engine("onnxruntime")
    stream = RNN.random(Spec("lstm", 3, 4)).stream(1, engine="onnxruntime")
    step = stream._steps[0][1]  # type: ignore[attr-defined]
    assert type(step).__name__ == "_Bound"
    x = np.ones((1, 2, 3), np.float32)
    first = stream(x)
    assert not np.array_equal(stream(x), first)  # the state moved on through the binding
    assert len(step.bound) == 1


def test_engine_stream_falls_back_as_forward_does() -> None:
    _engine("onnxruntime")
    net = RNN.random(Spec("lstm", 3, 4), dtype=np.float64)  # ORT computes float32 only
    x = np.random.default_rng(11).standard_normal((1, 6, 3))
    with pytest.warns(rnnport.errors.EngineFallbackWarning,
                      match=r"RNN\.stream\(engine='onnxruntime'\).*float64.*NumPy runtime"):
        stream = net.stream(1, engine="onnxruntime")
    expected, final = _streamed(net, x, 2)
    pieces = [stream(x[:, start:start + 2]) for start in range(0, 6, 2)]
    assert _same(np.concatenate(pieces, axis=1), expected) and _same_state(stream.state, final)
    stack = Stack([RNN.random(Spec("lstm", 3, 4)), RNN.random(Spec("lstm", 4, 2,
                                                                    layer_norm=True))])
    with pytest.warns(rnnport.errors.EngineFallbackWarning, match="layer"):
        mixed = stack.stream(2, engine="onnxruntime")
    x32 = x.astype(np.float32).repeat(2, axis=0)
    assert np.allclose(mixed(x32), stack.stream(2)(x32), atol=1e-5, rtol=0)
    mixed.reset(0)
    assert not mixed.state[1][0][:, 0].any() and mixed.state[1][0][:, 1].any()


def test_engine_stream_refusals() -> None:
    net = RNN.random(Spec("lstm", 3, 4))
    with pytest.raises(rnnport.errors.UnknownOptionError, match=r"RNN\.stream: engine='auto'"):
        net.stream(engine="auto")
    with pytest.raises(rnnport.errors.UnknownOptionError, match=r"RNN\.stream: unknown engine"):
        net.stream(engine="onnxrt")
    with pytest.raises(UnsupportedFeatureError, match="bidirectional"):
        RNN.random(Spec("lstm", 3, 4, bidirectional=True)).stream(engine="torch")
