"""``forward(engine=...)``: ONNX Runtime and PyTorch running rnnport's networks give the
NumPy path's results (a structurally different implementation: the frameworks' own
kernels), fall back to NumPy with a warning where they cannot, build once per network, and
``auto`` measures, then keeps its choice."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec, Stack
from rnnport.errors import (
    DeviceError,
    EngineFallbackWarning,
    MissingDependencyError,
    UnknownOptionError,
)
from rnnport.formats import running

onnxruntime = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

ENGINES = ("onnxruntime", "torch")
# (spec, dtype, engines that run it themselves; the others fall back)
CASES = [
    (Spec("lstm", 3, 5), "float32", ENGINES),
    (Spec("gru", 3, 5), "float32", ENGINES),
    (Spec("rnn_tanh", 3, 5), "float32", ENGINES),
    (Spec("rnn_relu", 3, 5), "float32", ENGINES),
    (Spec("lstm", 3, 5, bidirectional=True), "float32", ENGINES),
    (Spec("gru", 3, 4, num_layers=3, bidirectional=True), "float32", ENGINES),
    (Spec("lstm", 3, 4, num_layers=3), "float32", ENGINES),
    (Spec("rnn_relu", 3, 4, num_layers=2, bidirectional=True), "float32", ENGINES),
    (Spec("lstm", 3, 5, proj_size=2, num_layers=2, bidirectional=True), "float32", ("torch",)),
    (Spec("lstm", 3, 5, num_layers=2, bidirectional=True), "float64", ("torch",)),
    (Spec("gru", 3, 5, bidirectional=True), "float16", ENGINES),
    (Spec("lstm", 3, 4, peepholes=True, bidirectional=True), "float32", ("onnxruntime",)),
    (Spec("gru", 3, 4, reset_after=False, num_layers=2), "float32", ("onnxruntime",)),
    (Spec("lstm", 3, 4, layer_norm=True), "float32", ()),
]


def _id(case: tuple[Spec, str, tuple[str, ...]]) -> str:
    return f"{case[0].describe()} {case[1]}"


def _inputs(batch: int = 4, steps: int = 6, size: int = 3, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (batch, steps, size)).astype(np.float32)


def _state(model: RNN, batch: int, seed: int = 2) -> Any:
    spec = model.spec
    rows = spec.num_layers * spec.num_directions
    rng = np.random.default_rng(seed)
    h = rng.uniform(-1, 1, (rows, batch, spec.output_size)).astype(np.float32)
    if spec.cell != "lstm":
        return h
    return h, rng.uniform(-1, 1, (rows, batch, spec.hidden_size)).astype(np.float32)


def _flat(result: tuple[np.ndarray, Any]) -> list[np.ndarray]:
    """y and every state array, in order (a Stack's per-part states flattened)."""
    y, state = result
    out = [y]

    def walk(value: Any) -> None:
        if isinstance(value, np.ndarray):
            out.append(value)
        else:
            for item in value:
                walk(item)

    walk(state)
    return out


def _same_structure(got: tuple[np.ndarray, Any], expected: tuple[np.ndarray, Any]) -> None:
    assert type(got[1]) is type(expected[1])
    for a, b in zip(_flat(got), _flat(expected), strict=True):
        assert isinstance(a, np.ndarray)
        assert a.shape == b.shape and a.dtype == b.dtype


def _agrees(got: tuple[np.ndarray, Any], expected: tuple[np.ndarray, Any]) -> None:
    _same_structure(got, expected)
    assert got[0].flags.c_contiguous
    for a, b in zip(_flat(got), _flat(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def _exact(got: tuple[np.ndarray, Any], expected: tuple[np.ndarray, Any]) -> None:
    _same_structure(got, expected)
    for a, b in zip(_flat(got), _flat(expected), strict=True):
        assert np.array_equal(a, b)


CALLS = {
    "plain": {},
    "lengths": {"lengths": np.array([6, 2, 0, 5])},
    "state": {"state": True},
    "all, time-major": {"lengths": np.array([3, 6, 1, 0]), "state": True, "time_major": True},
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_each_engine_gives_the_numpy_results(case: tuple[Spec, str, tuple[str, ...]],
                                             engine: str) -> None:
    spec, dtype, runs = case
    model = RNN.random(spec, seed=3, scale=0.6).astype(dtype)
    x = _inputs()
    for name, call in CALLS.items():
        options = dict(call)
        if options.pop("state", False):
            options["state"] = _state(model, x.shape[0])
        data = x.transpose(1, 0, 2).copy() if options.get("time_major") else x
        expected = model.forward(data, **options)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = model.forward(data, engine=engine, **options)
        fallbacks = [w for w in caught if issubclass(w.category, EngineFallbackWarning)]
        if engine in runs:
            assert not fallbacks, name
            _agrees(got, expected)
        else:
            assert len(fallbacks) == 1, name
            assert f"engine={engine!r}" in str(fallbacks[0].message)
            _exact(got, expected)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stack_runs_each_part_in_the_engine(engine: str) -> None:
    model = Stack([RNN.random(Spec("lstm", 3, 5, bidirectional=True), seed=1),
                   RNN.random(Spec("gru", 10, 4, num_layers=2), seed=2)])
    x = _inputs()
    lengths = np.array([6, 1, 3, 4])
    state = [_state(part, x.shape[0], seed=index) for index, part in enumerate(model.parts)]
    for options in ({}, {"lengths": lengths, "state": state}):
        _agrees(model.forward(x, engine=engine, **options), model.forward(x, **options))


def test_fallback_says_why_and_gives_the_numpy_numbers_exactly() -> None:
    model = RNN.random(Spec("lstm", 3, 5, proj_size=2), seed=4)
    x = _inputs()
    with pytest.warns(EngineFallbackWarning, match="projection") as caught:
        got = model.forward(x, engine="onnxruntime")
    assert "NumPy runtime runs it instead" in str(caught[0].message)
    _exact(got, model.forward(x))
    double = RNN.random(Spec("gru", 3, 5), seed=4).astype("float64")
    with pytest.warns(EngineFallbackWarning, match="float32 only"):
        got = double.forward(x, engine="onnxruntime")
    _exact(got, double.forward(x))
    reset_before = RNN.random(Spec("gru", 3, 5, reset_after=False), seed=4)
    with pytest.warns(EngineFallbackWarning, match="reset-before GRU"):
        got = reset_before.forward(x, engine="torch")
    _exact(got, reset_before.forward(x))


def test_the_session_is_built_once_per_network(monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    session_class = onnxruntime.InferenceSession

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return session_class(*args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", counting)
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True), seed=5)
    x = _inputs()
    model.forward(x, engine="onnxruntime")
    model.forward(x[:2, :3], engine="onnxruntime", lengths=np.array([3, 1]))
    model.forward(x.transpose(1, 0, 2), _state(model, 4), engine="onnxruntime", time_major=True)
    assert len(built) == 1
    RNN.random(model.spec, seed=6).forward(x, engine="onnxruntime")
    assert len(built) == 2


def test_the_module_is_built_once_per_network_and_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnport.formats import torch as torch_format

    built = []
    to_module = torch_format.to_module

    def counting(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return to_module(*args, **kwargs)

    monkeypatch.setattr(torch_format, "to_module", counting)
    model = RNN.random(Spec("gru", 3, 4, bidirectional=True), seed=5)
    x = _inputs()
    model.forward(x, engine="torch")
    model.forward(x, engine="torch", lengths=np.array([6, 1, 2, 3]), state=_state(model, 4))
    model.forward(x.transpose(1, 0, 2), engine="torch", time_major=True)
    assert len(built) == 1
    model.forward(x, engine="torch", device="cpu")  # another device argument: its own module
    model.forward(x, engine="torch", device="cpu")
    assert len(built) == 2


def test_an_unknown_engine_is_answered_with_the_known_ones() -> None:
    model = RNN.random(Spec("gru", 3, 4))
    with pytest.raises(UnknownOptionError) as caught:
        model.forward(_inputs(), engine="onnx")
    for name in ("'numpy'", "'onnxruntime'", "'torch'", "'auto'"):
        assert name in str(caught.value)
    with pytest.raises(UnknownOptionError, match="unknown engine"):
        rnnport.formats.engine("tensorrt")
    assert rnnport.formats.engines() == ["numpy", "torch", "onnxruntime", "auto"]


def test_device_errors() -> None:
    model = RNN.random(Spec("lstm", 3, 4))
    x = _inputs()
    for engine in ("numpy", "onnxruntime"):
        with pytest.raises(DeviceError, match=rf"engine='{engine}'.*CPU only"):
            model.forward(x, engine=engine, device="cuda")
    for engine in ("numpy", "onnxruntime", "torch", "auto"):  # as any engine spells the CPU
        _agrees(model.forward(x, engine=engine, device="CPU"), model.forward(x))
    with pytest.raises(DeviceError, match="PyTorch refuses it"):
        model.forward(x, engine="torch", device="no-such-device")
    with pytest.raises(DeviceError, match="meta device holds shapes, not values"):
        model.forward(x, engine="torch", device="meta")
    if torch.cuda.is_available():
        _agrees(model.forward(x, engine="torch", device="cuda", lengths=np.array([6, 1, 0, 2])),
                model.forward(x, lengths=np.array([6, 1, 0, 2])))
        _agrees(model.forward(x, engine="auto", device="cuda"), model.forward(x))
    else:
        with pytest.raises(DeviceError, match="device='cuda'"):
            model.forward(x, engine="torch", device="cuda")
        with pytest.raises(DeviceError, match="no installed engine"):
            model.forward(x, engine="auto", device="cuda")


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else find_spec(name, *args))
    model = RNN.random(Spec("lstm", 3, 4), seed=7)
    with pytest.raises(MissingDependencyError, match=r"rnnport\[torch\]"):
        model.forward(_inputs(), engine="torch")
    model.forward(_inputs(), engine="auto")  # auto leaves out what is not installed
    assert set(running.chosen(model).values()) <= {"numpy", "onnxruntime"}


def test_auto_measures_once_then_keeps_its_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    model = RNN.random(Spec("lstm", 3, 8, num_layers=2, bidirectional=True), seed=8)
    x = _inputs(batch=5, steps=7)
    _agrees(model.forward(x, engine="auto"), model.forward(x))
    choices = running.chosen(model)
    assert next(iter(choices.values())) in ("numpy", *ENGINES)
    (shape_class,) = choices
    assert (shape_class.batch, shape_class.steps, shape_class.lengths) == (8, 8, False)

    def no_timing() -> float:
        raise AssertionError("auto timed the engines again")

    monkeypatch.setattr(running.time, "perf_counter", no_timing)
    # The same shape class (batch and time rounding up to 8, no lengths): the remembered engine runs.
    _agrees(model.forward(x[:, :6], engine="auto"), model.forward(x[:, :6]))
    assert running.chosen(model) == choices


def test_auto_times_only_engines_that_compute_the_network_exactly() -> None:
    model = RNN.random(Spec("lstm", 3, 4, peepholes=True), seed=9)  # PyTorch has no peepholes
    with warnings.catch_warnings():
        warnings.simplefilter("error", EngineFallbackWarning)
        got = model.forward(_inputs(), engine="auto")
    _agrees(got, model.forward(_inputs()))
    assert set(running.chosen(model).values()) <= {"numpy", "onnxruntime"}
