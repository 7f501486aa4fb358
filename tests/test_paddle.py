"""PaddlePaddle: the golden files paddle itself saved (``tools/golden_paddle.py``) read without
paddle and compute paddle's recorded outputs; what rnnport writes, paddle restores and runs
to the same numbers; damaged and hostile files are rnnport errors."""

from __future__ import annotations

import json
import pickle
import shutil
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError, RnnportError, UnsupportedFeatureError
from rnnport.formats import get
from rnnport.formats.paddle import layer_for
from rnnport.formats.paddle.state import unpickled

GOLDEN = Path(__file__).parent / "golden" / "paddle"
CASES = sorted(json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"])


def _case(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = dict(data)
    return json.loads(str(arrays.pop("meta"))), arrays


def _options(meta: dict[str, Any]) -> dict[str, Any]:
    return {"activation": meta["layer"]["activation"]} if "activation" in meta["layer"] else {}


@pytest.fixture(scope="module")
def paddle() -> Iterator[Any]:
    """PaddlePaddle, a test dependency: missing, the live tests fail."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import paddle

    yield paddle


# -- golden files, read without paddle ---------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_golden_files_compute_what_paddle_computed(name: str) -> None:
    meta, expected = _case(name)
    models = []
    for file in meta["files"]:
        path = GOLDEN / file
        options = _options(meta) if path.suffix == ".pdparams" else {}
        models.append(rnnport.read(path, **options))
        if path.suffix in (".json", ".pdmodel"):  # the model by its prefix, and its params file
            assert rnnport.read(path.with_suffix("")) == models[-1]
            assert rnnport.read(path.with_suffix(".pdiparams")) == models[-1]
    assert all(model == models[0] for model in models[1:])  # every file the same network
    y, state = models[0].forward(expected["x"], time_major=meta["time_major"])
    np.testing.assert_allclose(y, expected["y"], atol=meta["tolerance"], rtol=0)
    h = state[0] if isinstance(state, tuple) else state
    np.testing.assert_allclose(h, expected["h"], atol=meta["tolerance"], rtol=0)
    if "c" in expected:
        np.testing.assert_allclose(state[1], expected["c"], atol=meta["tolerance"], rtol=0)


@pytest.mark.parametrize("name", [name for name in CASES if name != "gru_static"])
def test_written_state_dicts_are_paddles_own_bit_for_bit(name: str, tmp_path: Path) -> None:
    meta, _ = _case(name)
    source = GOLDEN / name / "model.pdparams"
    model = rnnport.read(source, **_options(meta))
    written = rnnport.write(model, "paddle", path=tmp_path / "m.pdparams")
    data = source.read_bytes()
    theirs = unpickled(data, "golden", len(data))
    theirs.pop("StructuredToParameterName@@")
    assert list(written) == list(theirs)  # the same keys, in paddle's order
    for key, value in written.items():
        expected = theirs[key].array(key)
        assert value.dtype == expected.dtype and np.array_equal(value, expected), key
    assert rnnport.read(tmp_path / "m.pdparams", **_options(meta)) == model


def test_a_projected_lstm_reads_its_cells_not_the_shifted_copies() -> None:
    model = rnnport.read(GOLDEN / "lstm_proj" / "model.pdparams")
    assert model.spec.proj_size == 3 and model.spec.hidden_size == 8
    notes = get("paddle").source_notes(GOLDEN / "lstm_proj" / "model.pdparams")
    assert any("stored twice" in note and "checked equal" in note for note in notes)


def test_swapping_two_gates_changes_the_output() -> None:
    _, expected = _case("lstm_bi_2layer")
    data = (GOLDEN / "lstm_bi_2layer" / "model.pdparams").read_bytes()
    state = {key: value.array(key) for key, value in unpickled(data, "g", len(data)).items()
             if key != "StructuredToParameterName@@"}
    swapped = {key: (np.concatenate([value[8:16], value[:8], value[16:]])
                     if key.startswith("0.cell_fw.weight_ih") else value)
               for key, value in state.items() if ".cell" in key}
    y, _ = rnnport.read(swapped, "paddle").forward(expected["x"])
    assert np.abs(y - expected["y"]).max() > 1e-2


def test_programs_say_what_they_hold_beside_the_network() -> None:
    notes = get("paddle").source_notes(GOLDEN / "gru_time_major" / "inference.json")
    assert any("time-major" in note for note in notes)
    assert get("paddle").fixed_input is not None
    assert get("paddle").fixed_input(GOLDEN / "gru_time_major" / "inference.json") == (2, 7)
    assert get("paddle").fixed_input(GOLDEN / "gru" / "inference.json") == (2, 6)


def test_a_state_dict_with_two_networks_needs_prefix() -> None:
    one = rnnport.write(RNN.random(Spec("gru", 3, 4)), "paddle")
    two = rnnport.write(RNN.random(Spec("lstm", 3, 4), seed=1), "paddle")
    both = {**{f"encoder.{k}": v for k, v in one.items()},
            **{f"decoder.{k}": v for k, v in two.items()}, "head.weight": np.ones(3)}
    with pytest.raises(rnnport.AmbiguousSourceError, match="'encoder.', 'decoder.'"):
        rnnport.read(both, "paddle")
    assert rnnport.read(both, "paddle", prefix="decoder").spec.cell == "lstm"
    notes = get("paddle").source_notes(both, prefix="encoder.")
    assert any("'decoder.'" in note for note in notes)
    assert any("head.weight" in note for note in notes)


def test_reading_imports_no_framework() -> None:
    paths = [str(path) for path in sorted(GOLDEN.glob("*/*"))
             if path.suffix in (".pdparams", ".json", ".pdmodel")]
    script = ("import sys, rnnport\n"
              f"for path in {paths!r}:\n"
              "    rnnport.read(path, activation='relu' if 'relu' in path else None)\n"
              "print([m for m in ('paddle', 'torch', 'tensorflow') if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


# -- what rnnport writes, run by paddle ------------------------------------------------------


SPECS = {
    "lstm_bi_2layer": Spec("lstm", 4, 6, num_layers=2, bidirectional=True),
    "lstm_proj_bi": Spec("lstm", 5, 6, bidirectional=True, proj_size=2),
    "gru_2layer": Spec("gru", 3, 5, num_layers=2),
    "rnn_relu_bi": Spec("rnn_relu", 4, 5, bidirectional=True),
    "gru_no_bias": Spec("gru", 3, 4, bias=False),
}


def test_paddle_restores_and_runs_what_rnnport_writes(paddle: Any, tmp_path: Path) -> None:
    x = np.random.default_rng(3).uniform(-1, 1, (2, 6, 5)).astype(np.float32)
    for name, spec in SPECS.items():
        model = RNN.random(spec, seed=len(name))
        path = rnnport.write(model, "paddle", path=tmp_path / f"{name}.pdparams") and \
            tmp_path / f"{name}.pdparams"
        layer = layer_for(spec)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a bias-free network's other names: skipped
            missing, unexpected = layer.set_state_dict(paddle.load(str(path)))
        assert (missing, unexpected) == (([], []) if spec.bias else
                                         ([k for k in missing if ".cell" not in k],
                                          [k for k in unexpected if ".cell" not in k])), name
        layer.eval()
        inputs = x[..., :spec.input_size]
        y, _ = layer(paddle.to_tensor(inputs))
        want, _ = model.forward(inputs)
        np.testing.assert_allclose(np.asarray(y.numpy()), want, atol=1e-5, rtol=0,
                                   err_msg=name)
        label, theirs = get("paddle").framework_forward(path, model, inputs)  # type: ignore[misc]
        np.testing.assert_allclose(theirs, want, atol=1e-5, rtol=0, err_msg=label)
    _, expected = _case("gru_time_major")
    label, y = get("paddle").framework_forward(  # type: ignore[misc]
        GOLDEN / "gru_time_major" / "inference.json", rnnport.read(GOLDEN / "gru_time_major"
                                                                  / "inference.json"),
        np.ascontiguousarray(expected["x"].transpose(1, 0, 2)))
    np.testing.assert_allclose(y.transpose(1, 0, 2), expected["y"], atol=1e-5, rtol=0)


# -- damaged and hostile files ---------------------------------------------------------------


class _Shell:
    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("this pickle calls print",))


def test_a_pickle_that_imports_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "evil.pdparams"
    path.write_bytes(pickle.dumps({"0.cell.weight_ih": _Shell(), "0.cell.weight_hh": _Shell()},
                                  protocol=4))
    with pytest.raises(FormatError, match="builtins.print"):
        rnnport.read(path)


def test_older_pickle_protocols_and_big_array_slices_read(tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 4))
    state = rnnport.write(model, "paddle")
    for protocol in (2, 3):
        path = tmp_path / f"p{protocol}.pdparams"
        path.write_bytes(pickle.dumps(state, protocol=protocol))
        assert rnnport.read(path) == model
    sliced = dict(state)
    whole = sliced.pop("0.cell.weight_ih")
    flat = whole.ravel()
    sliced["0.cell.weight_ih@@.0"], sliced["0.cell.weight_ih@@.1"] = flat[:20], flat[20:]
    sliced["UnpackBigParamInfor@@"] = {"0.cell.weight_ih": {
        "OriginShape": whole.shape, "slices": ["0.cell.weight_ih@@.0", "0.cell.weight_ih@@.1"]}}
    (tmp_path / "sliced.pdparams").write_bytes(pickle.dumps(sliced, protocol=2))
    assert rnnport.read(tmp_path / "sliced.pdparams") == model


def test_a_network_without_biases_is_written_as_paddles_bias_free_layer(paddle: Any) -> None:
    spec = Spec("gru", 3, 4, bias=False)
    written = rnnport.write(RNN.random(spec), "paddle")
    made = paddle.nn.GRU(3, 4, bias_ih_attr=False, bias_hh_attr=False)  # built, never run
    assert list(written) == list(made.state_dict())
    assert not np.any(written["0.cell.bias_ih"]) and not np.any(written["0.cell.bias_hh"])
    assert rnnport.read(written, "paddle").spec.bias is False


def test_copies_that_disagree_are_refused() -> None:
    state = dict(rnnport.write(RNN.random(Spec("lstm", 3, 4)), "paddle"))
    state["weight_hh_l0"] = state["weight_hh_l0"] + 1
    with pytest.raises(FormatError, match="'weight_hh_l0' and '0.cell.weight_hh'.*different"):
        rnnport.read(state, "paddle")


def _copy(name: str, tmp_path: Path) -> Path:
    shutil.copytree(GOLDEN / name, tmp_path / name)
    return tmp_path / name


def test_damaged_parameters_files_are_rnnport_errors(tmp_path: Path) -> None:
    folder = _copy("lstm_bi_2layer", tmp_path)
    params = folder / "inference.pdiparams"
    data = params.read_bytes()
    for damaged, match in [
        (data[:-7], "truncated|remain"),
        (data + b"\0" * 8, "bytes follow"),
        (data[:12] + struct.pack("<Ii", 0, 1 << 30) + data[20:], "described in"),
        (data.replace(b"\x08\x05\x10\x20", b"\x08\x05\x10\x7f", 1), "declares"),
        (struct.pack("<IQ", 0, 1 << 40) + data[12:], "LoD levels"),
    ]:
        params.write_bytes(damaged)
        with pytest.raises(RnnportError, match=match):
            rnnport.read(folder / "inference.json")
    params.unlink()
    with pytest.raises(FormatError, match="no such file"):
        rnnport.read(folder / "inference.json")


def test_damaged_programs_are_rnnport_errors(tmp_path: Path) -> None:
    folder = _copy("gru", tmp_path)
    program = folder / "inference.json"
    text = program.read_text()
    for damaged, error in [
        (text.replace('"D":8},"N":"hidden_size"', '"D":-3},"N":"hidden_size"'), FormatError),
        (text.replace('"D":"GRU"', '"D":"LSTM_PEEPHOLE"'), FormatError),
        (text.replace('"1.rnn"', '"1.relu"'), UnsupportedFeatureError),
        (text.replace('"magic":"pir"', '"magic":"nope"'), FormatError),
        ("[" * 100_000, FormatError),
    ]:
        program.write_text(damaged)
        with pytest.raises(error):
            rnnport.read(program, "paddle")
    static = _copy("gru_static", tmp_path)
    data = (static / "inference.pdmodel").read_bytes()
    (static / "inference.pdmodel").write_bytes(data[: len(data) // 2])
    with pytest.raises(FormatError):
        rnnport.read(static / "inference.pdmodel")


def test_an_array_whose_shape_lies_is_refused(tmp_path: Path) -> None:
    state = {"0.cell.weight_ih": np.zeros((4, 4), np.float32),
             "0.cell.weight_hh": np.zeros((4, 1), np.float32)}
    data = pickle.dumps(state, protocol=4)
    path = tmp_path / "big.pdparams"
    path.write_bytes(data.replace(b"K\x04K\x04\x86", b"J\x00\x00\x00\x40K\x04\x86"))
    with pytest.raises(FormatError, match=r"shape \(1073741824, 4\).* holds 64 bytes"):
        rnnport.read(path)
