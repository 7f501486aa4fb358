"""The reference example: real Keras weights and the exact buffer cuDNN received."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport.demo import Reference, check_reference, load_reference, source_arrays

SHARED = Path(__file__).resolve().parents[2] / "shared" / "examples" / "keras_cudnn_reference.json"


def bits(array: np.ndarray) -> np.ndarray:
    return np.asarray(array).view(f"u{np.asarray(array).itemsize}")


@pytest.fixture(scope="module")
def reference() -> Reference:
    return load_reference(SHARED if SHARED.exists() else None)


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_keras_to_cudnn_is_the_reference_buffer(reference: Reference, name: str) -> None:
    case = reference.cases[name]
    buffer = rnnport.convert(source_arrays(reference, name), "cudnn", fmt="keras")
    expected = np.asarray(case["cudnn_params"], dtype=np.float32)
    assert buffer.dtype == np.float32 and buffer.shape == expected.shape
    assert np.array_equal(bits(buffer), bits(expected))


@pytest.mark.parametrize("name", ["gru", "lstm"])
def test_cudnn_reference_back_to_keras_is_bit_exact(reference: Reference, name: str) -> None:
    case = reference.cases[name]
    cell = "gru" if name == "gru" else "lstm"
    buffer = np.asarray(case["cudnn_params"], dtype=np.float32)
    back = rnnport.convert(buffer, "keras", fmt="cudnn", cell=cell,
                           input_size=case["input_size"], hidden_size=case["hidden_size"])
    for got, want in zip(back, source_arrays(reference, name), strict=True):
        assert got.shape == want.shape and np.array_equal(bits(got), bits(want))


def test_bundled_reference_is_the_shared_one() -> None:
    if not SHARED.exists():
        pytest.skip("../shared is not beside this checkout")
    assert load_reference(None) == load_reference(SHARED)


def test_demo_checks_pass(reference: Reference) -> None:
    results = check_reference(reference)
    assert [r.name for r in results] == ["gru", "lstm"]
    assert all(r.buffer_matches and r.round_trip_matches for r in results)


def test_keras_gru_parameter_counts() -> None:
    for reset_after, expected in ((False, 150), (True, 165)):
        spec = rnnport.Spec("gru", input_size=4, hidden_size=5, reset_after=reset_after)
        rnn = rnnport.RNN.random(spec)
        assert rnnport.param_count(rnn, "keras") == expected
    lstm = rnnport.RNN.random(rnnport.Spec("lstm", 4, 5))
    assert rnnport.param_count(lstm, "keras") == 4 * (5 * (4 + 5) + 5)
    assert lstm.num_params() == rnnport.param_count(lstm, "cudnn") == 4 * (5 * (4 + 5) + 10)
    assert rnnport.param_count(lstm, "cudnn", bias_mode="single_input") == 4 * (5 * 9 + 5)
    assert rnnport.param_count(lstm, "torch") == lstm.num_params()


def test_a_reference_that_does_not_match_is_reported_not_raised(tmp_path: Path) -> None:
    import io
    import json

    from rnnport.demo import run_demo

    data = json.loads((SHARED if SHARED.exists() else Path(rnnport.__file__).parent / "data" /
                       "reference.json").read_text())
    data["lstm"]["cudnn_params"] = data["lstm"]["cudnn_params"][:-3]
    data["gru"]["cudnn_params"][0] += 1.0
    path = tmp_path / "reference.json"
    path.write_text(json.dumps(data))
    out = io.StringIO()
    assert run_demo(path, out) == 1
    text = out.getvalue()
    assert "buffer equals the reference: NO (62/63 float32 values)" in text
    assert "buffer equals the reference: NO (84 values where the reference has 81)" in text
    assert text.rstrip().endswith("MISMATCH: see above")
