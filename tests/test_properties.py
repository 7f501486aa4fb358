"""Property tests: random specs × every format pair → bit-exact round trips, equal outputs."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import UnsupportedFeatureError
from rnnport.formats import get

FORMATS = rnnport.formats()
TOLERANCE = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-12}


@st.composite
def models(draw: Any) -> RNN:
    cell = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    hidden = draw(st.integers(1, 5))
    spec = Spec(
        cell=cell,
        input_size=draw(st.integers(1, 5)),
        hidden_size=hidden,
        num_layers=draw(st.integers(1, 3)),
        bidirectional=draw(st.booleans()),
        proj_size=draw(st.integers(0, hidden - 1)) if cell == "lstm" and hidden > 1 else 0,
        reset_after=draw(st.booleans()) if cell == "gru" else True,
        bias=draw(st.booleans()),
    )
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    return RNN.random(spec, seed=draw(st.integers(0, 2**32 - 1)), dtype=dtype)


def read_options(fmt: str, spec: Spec) -> dict[str, Any]:
    """What each format needs told because its native object does not record it."""
    if fmt == "keras":
        return {"activation": spec.nonlinearity, **(
            {"reset_after": spec.reset_after} if spec.cell == "gru" and not spec.bias else {})}
    if fmt == "torch":
        return {"nonlinearity": spec.nonlinearity} if spec.cell.startswith("rnn") else {}
    if fmt in ("onnx", "npz"):
        return {}
    if fmt == "tf1":
        return {"activation": spec.nonlinearity} if spec.cell.startswith("rnn") else {}
    if fmt in ("cudnn", "miopen"):
        return dict(cell=spec.cell, input_size=spec.input_size, hidden_size=spec.hidden_size,
                    num_layers=spec.num_layers, bidirectional=spec.bidirectional,
                    proj_size=spec.proj_size, bias_mode="double" if spec.bias else "none")
    raise AssertionError(fmt)


def write_options(fmt: str, spec: Spec) -> dict[str, Any]:
    """TF1 checkpoints do not store a BasicRNNCell's activation: the writer is told it."""
    if fmt == "tf1" and spec.cell.startswith("rnn"):
        return {"activation": spec.nonlinearity}
    return {}


def write(model: RNN, fmt: str) -> Any:
    return rnnport.write(model, fmt, **write_options(fmt, model.spec))


def through(model: RNN, fmt: str) -> RNN:
    return rnnport.read(write(model, fmt), fmt, **read_options(fmt, model.spec))


def holds(fmt: str, spec: Spec) -> bool:
    features = get(fmt).FEATURES
    return ((not spec.proj_size or "projection" in features)
            and (spec.cell != "gru" or spec.reset_after or "reset_before" in features))


def single_bias(fmt: str, spec: Spec) -> bool:
    """Whether ``fmt`` keeps one bias where the model has two (so a trip sums them).

    TF1 cells always save biases (zeros for a bias-free model, less the forget bias), and
    even CudnnCompatibleGRUCell sums the gates' two biases.
    """
    if fmt == "tf1":
        return True
    return fmt == "keras" and spec.bias and not (spec.cell == "gru" and spec.reset_after)


def leaves(native: Any) -> list[np.ndarray]:
    if hasattr(native, "graph"):  # an onnx.ModelProto: its stored tensors, in graph order
        from onnx import numpy_helper

        return [numpy_helper.to_array(tensor) for tensor in native.graph.initializer]
    if isinstance(native, dict):
        return [native[k] for k in sorted(native)]
    if isinstance(native, np.ndarray):
        return [native]
    return [leaf for item in native for leaf in leaves(item)]


def assert_same_native(a: Any, b: Any) -> None:
    for x, y in zip(leaves(a), leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        if x.dtype.kind == "U":  # the npz container's JSON header
            assert x == y
            continue
        assert np.array_equal(x.view(f"u{x.itemsize}"), y.view(f"u{y.itemsize}"))


settings.register_profile("rnnport", max_examples=150, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rnnport")


@given(models())
def test_each_format_round_trips_or_says_why_not(model: RNN) -> None:
    for fmt in FORMATS:
        if not holds(fmt, model.spec):
            try:
                write(model, fmt)
            except UnsupportedFeatureError:
                continue
            raise AssertionError(f"{fmt} accepted {model.spec}")
        back = through(model, fmt)
        if single_bias(fmt, model.spec):
            # One stored bias: the trip sums the two slots; a second trip changes nothing.
            assert through(back, fmt) == back
            assert_same_native(write(back, fmt), write(model, fmt))
        else:
            assert back == model, fmt


@given(models(), st.sampled_from(FORMATS), st.sampled_from(FORMATS))
def test_every_format_pair_keeps_the_function(model: RNN, first: str, second: str) -> None:
    if not (holds(first, model.spec) and holds(second, model.spec)):
        return
    via_first = through(model, first)
    via_both = through(via_first, second)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4, model.spec.input_size))
    y_model, _ = model.forward(x)
    y_both, _ = via_both.forward(x)
    np.testing.assert_allclose(y_both, y_model, atol=TOLERANCE[model.dtype.type], rtol=0)
    # What the second format stores survives the trip unchanged.
    assert_same_native(write(via_both, second), write(via_first, second))
    if not single_bias(first, model.spec) and not single_bias(second, model.spec):
        assert via_both == model
