"""Property tests: random specs × every format pair → bit-exact round trips, equal outputs,
or an error naming the feature the format lacks, exactly as the conversion matrix says."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import UnsupportedFeatureError
from rnnport.formats import get, sums_biases
from rnnport.formats._protocol import features_of

FORMATS = rnnport.formats()
TOLERANCE = {np.float16: 2e-3, np.float32: 2e-5, np.float64: 1e-12}
ACTIVATIONS = {"lstm": (("HardSigmoid", 0.3, 0.4), ("Tanh", 0, 0), ("Softsign", 0, 0)),
               "gru": (("Sigmoid", 0, 0), ("ScaledTanh", 1.5, 0.7))}
# How an UnsupportedFeatureError names each feature (written here, not taken from rnnport).
NAMES = {"projection": "projection", "peepholes": "peepholes", "cell_clip": "cell clip",
         "gate_clip": "gate clip", "input_forget": "coupled input and forget gates",
         "reset_after": "reset-after GRU",
         "activations": "non-default activations", "reset_before": "reset-before GRU",
         "reverse": "reverse-only network", "proj_bias": "projection bias",
         "layer_norm": "layer-norm LSTM", "simple_rnn": "simple RNN",
         "relu_rnn": "simple RNN with relu"}


@st.composite
def models(draw: Any) -> RNN:
    cell = draw(st.sampled_from(["lstm", "gru", "rnn_tanh", "rnn_relu"]))
    hidden = draw(st.integers(1, 5))
    lstm = cell == "lstm"
    extras = draw(st.booleans())  # half the specs use none of the optional features
    bidirectional = draw(st.booleans())
    proj_size = draw(st.integers(0, hidden - 1)) if lstm and hidden > 1 else 0
    spec = Spec(
        cell=cell,
        input_size=draw(st.integers(1, 5)),
        hidden_size=hidden,
        num_layers=draw(st.integers(1, 3)),
        bidirectional=bidirectional,
        reverse=extras and not bidirectional and draw(st.booleans()),
        proj_size=proj_size,
        proj_bias=extras and proj_size > 0 and draw(st.booleans()),
        layer_norm=extras and lstm and draw(st.booleans()),
        reset_after=draw(st.booleans()) if cell == "gru" else True,
        bias=draw(st.booleans()),
        peepholes=extras and lstm and draw(st.booleans()),
        cell_clip=draw(st.sampled_from([None, 0.5, 3.0])) if extras and lstm else None,
        gate_clip=draw(st.sampled_from([None, 2.0])) if extras else None,
        input_forget=extras and lstm and draw(st.booleans()),
        activations=draw(st.sampled_from([(), ACTIVATIONS[cell]]))
        if extras and cell in ACTIVATIONS else (),
    )
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    return RNN.random(spec, seed=draw(st.integers(0, 2**32 - 1)), dtype=dtype)


def read_options(fmt: str, spec: Spec) -> dict[str, Any]:
    """What each format needs told because its native object does not record it."""
    return get(fmt).read_options_for(spec)


def write_options(fmt: str, spec: Spec) -> dict[str, Any]:
    """What each format's writer must be told, as a framework's graph would be (a TF1
    checkpoint stores neither a BasicRNNCell's activation nor a cell clip)."""
    return get(fmt).write_options_for(spec)


def write(model: RNN, fmt: str) -> Any:
    return rnnport.write(model, fmt, **write_options(fmt, model.spec))


def through(model: RNN, fmt: str) -> RNN:
    return rnnport.read(write(model, fmt), fmt, **read_options(fmt, model.spec))


def used(spec: Spec) -> list[str]:
    """The optional features ``spec`` uses, found from its fields."""
    return [feature for feature, on in (
        ("projection", spec.proj_size > 0), ("peepholes", spec.peepholes),
        ("cell_clip", spec.cell_clip is not None), ("gate_clip", spec.gate_clip is not None),
        ("input_forget", spec.input_forget), ("activations", bool(spec.activations)),
        ("reset_before", spec.cell == "gru" and not spec.reset_after),
        ("reset_after", spec.cell == "gru" and spec.reset_after),
        ("reverse", spec.reverse), ("proj_bias", spec.proj_bias),
        ("layer_norm", spec.layer_norm), ("simple_rnn", spec.cell.startswith("rnn")),
        ("relu_rnn", spec.cell == "rnn_relu")) if on]


def lacks(fmt: str, spec: Spec) -> list[str]:
    return [feature for feature in used(spec) if feature not in get(fmt).holds(spec)]


def holds(fmt: str, spec: Spec) -> bool:
    return not lacks(fmt, spec)


def holds_dtype(fmt: str, model: RNN) -> bool:
    """Whether ``fmt`` stores ``model``'s dtype (``Format.dtypes``; None: every float)."""
    declared = get(fmt).dtypes
    return declared is None or model.dtype.name in declared


def assert_dtype_refused(model: RNN, fmt: str) -> None:
    """Writing ``model`` as ``fmt`` fails with an error naming its dtype and the cast."""
    try:
        write(model, fmt)
    except UnsupportedFeatureError as error:
        assert model.dtype.name in str(error) and ".astype(" in str(error), error
        assert fmt in str(error) and "cannot hold" in str(error), error
        return
    raise AssertionError(f"{fmt} accepted {model.dtype} weights")


def as_read(model: RNN, back: RNN) -> RNN:
    """``model`` in the dtype a format read it back in (float16 widens to float32 exactly
    in a format that stores no float16)."""
    return model if back.dtype == model.dtype else model.astype(back.dtype)


def single_bias(fmt: str, spec: Spec) -> bool:
    """Whether ``fmt`` keeps one bias where the model has two (so a trip sums them), or
    saves zero biases for a bias-free model (TF1). The round-trip tests check the claim:
    where it is False, the arrays must come back bit-equal."""
    return sums_biases(fmt, spec)


def assert_refused(model: RNN, fmt: str) -> None:
    """Writing ``model`` as ``fmt`` fails with an error naming a feature ``fmt`` lacks."""
    try:
        write(model, fmt)
    except UnsupportedFeatureError as error:
        assert any(NAMES[feature] in str(error) for feature in lacks(fmt, model.spec)), error
        assert fmt in str(error) and "cannot hold" in str(error), error
        return
    raise AssertionError(f"{fmt} accepted {model.spec}")


def leaves(native: Any) -> list[np.ndarray]:
    if isinstance(native, (bytes, bytearray)):  # a serialized file (a .tflite FlatBuffer)
        return [np.frombuffer(native, dtype=np.uint8)]
    if hasattr(native, "graph"):  # an onnx.ModelProto: its stored tensors, in graph order
        from onnx import numpy_helper

        return [numpy_helper.to_array(tensor) for tensor in native.graph.initializer]
    if isinstance(native, dict):  # nested for a Flax tree; None for a bias left out
        return [leaf for k in sorted(native, key=str) for leaf in leaves(native[k])]
    if native is None:
        return []
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


settings.register_profile("rnnport", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rnnport")


@given(models())
def test_each_format_round_trips_or_says_why_not(model: RNN) -> None:
    for fmt in FORMATS:
        if not holds_dtype(fmt, model):
            assert_dtype_refused(model, fmt)
            continue
        if not holds(fmt, model.spec):
            assert_refused(model, fmt)
            continue
        back = through(model, fmt)
        if single_bias(fmt, model.spec):
            # One stored bias: the trip sums the two slots; a second trip changes nothing.
            assert through(back, fmt) == back
            assert_same_native(write(back, fmt), write(model, fmt))
        else:
            assert back == as_read(model, back), fmt
            assert_same_native(write(back, fmt), write(model, fmt))


@given(models(), st.sampled_from(FORMATS), st.sampled_from(FORMATS))
def test_every_format_pair_keeps_the_function(model: RNN, first: str, second: str) -> None:
    """read(write(A)) → write(B) → read(B): the same outputs, bit-equal arrays unless a bias
    had to be summed; or an error naming the feature (or dtype) A or B cannot hold."""
    if not holds_dtype(first, model):
        assert_dtype_refused(model, first)
        return
    if not holds(first, model.spec):
        assert_refused(model, first)
        return
    via_first = through(model, first)
    if not holds_dtype(second, via_first):
        assert_dtype_refused(via_first, second)
        return
    if not holds(second, model.spec):
        assert_refused(via_first, second)
        return
    via_both = through(via_first, second)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 4, model.spec.input_size))
    y_model, _ = model.forward(x)
    y_both, _ = via_both.forward(x)
    np.testing.assert_allclose(y_both, y_model, atol=TOLERANCE[model.dtype.type], rtol=0)
    # What the second format stores survives the trip unchanged.
    assert_same_native(write(via_both, second), write(via_first, second))
    if not single_bias(first, model.spec) and not single_bias(second, model.spec):
        assert via_both == as_read(model, via_both)
    elif model.spec.bias:  # a summing format really does sum: the two slots become one
        assert via_both != model or not np.any(model.params[0][0]["bias_hh"])


def test_the_matrix_says_what_the_pairs_do() -> None:
    """Each matrix cell against the formats' behaviour on one network per feature."""
    from rnnport.formats import FEATURE_CODES, matrix

    for row in matrix():
        for pair in row:
            for feature in FEATURE_CODES:
                spec = _spec_using(feature)
                model = RNN.random(spec, seed=1)
                # The network may use other features than this one (a GRU is reset-after):
                # any of them the pair refuses refuses it.
                refused = any(used in pair.refused for used, _, _ in features_of(spec))
                can_start = holds(pair.source, spec)
                if not can_start:
                    continue
                via = through(model, pair.source)
                if refused:
                    assert_refused(via, pair.target)
                else:
                    through(via, pair.target)
            for kind, spec in (("lstm", Spec("lstm", 2, 3)), ("gru", Spec("gru", 2, 3)),
                               ("gru_reset_before", Spec("gru", 2, 3, reset_after=False)),
                               ("rnn", Spec("rnn_tanh", 2, 3))):
                if not holds(pair.source, spec) or not holds(pair.target, spec):
                    continue
                model = RNN.random(spec, seed=2)
                via = through(through(model, pair.source), pair.target)
                summed = single_bias(pair.source, spec) or single_bias(pair.target, spec)
                assert (via != model) == summed, (pair, kind)
                assert (kind in pair.summed) == (summed and not single_bias(pair.source, spec))


def _spec_using(feature: str) -> Spec:
    return {"projection": Spec("lstm", 2, 3, proj_size=2),
            "peepholes": Spec("lstm", 2, 3, peepholes=True),
            "cell_clip": Spec("lstm", 2, 3, cell_clip=1.0),
            "gate_clip": Spec("gru", 2, 3, gate_clip=1.0),
            "input_forget": Spec("lstm", 2, 3, input_forget=True),
            "activations": Spec("gru", 2, 3, activations=ACTIVATIONS["gru"]),
            "reset_before": Spec("gru", 2, 3, reset_after=False),
            "reset_after": Spec("gru", 2, 3),
            "reverse": Spec("gru", 2, 3, reverse=True),
            "proj_bias": Spec("lstm", 2, 3, proj_size=2, proj_bias=True),
            "layer_norm": Spec("lstm", 2, 3, layer_norm=True),
            "simple_rnn": Spec("rnn_tanh", 2, 3),
            "relu_rnn": Spec("rnn_relu", 2, 3)}[feature]
