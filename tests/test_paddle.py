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
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError, RnnportError, UnsupportedFeatureError
from rnnport.formats import get
from rnnport.formats.paddle.state import unpickled

GOLDEN = Path(__file__).parent / "golden" / "paddle"
ALL_CASES = sorted(json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"])
MODEL = "crnn_branch"  # a model around its networks: read by op= and prefix= (its own test)
CASES = [name for name in ALL_CASES if name != MODEL]


def _case(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = dict(data)
    return json.loads(str(arrays.pop("meta"))), arrays


def _options(meta: dict[str, Any]) -> dict[str, Any]:
    return {"activation": meta["layer"]["activation"]} if "activation" in meta["layer"] else {}


# Paddle runs in a process of its own: imported after TensorFlow (which other tests of the
# same worker may have loaded) it crashes the process. Missing, the live tests fail.
_PADDLE = """
import json, sys
import numpy as np
from rnnport.formats.paddle._run import layer_for, quiet
from rnnport.spec import Spec

jobs = json.load(open(sys.argv[1]))
done = {}
with quiet():
    import paddle

    for job in jobs["restore"]:
        layer = layer_for(Spec(**job["spec"]))
        missing, unexpected = layer.set_state_dict(paddle.load(job["path"]))
        layer.eval()
        y, _ = layer(paddle.to_tensor(np.load(job["x"])))
        np.save(job["y"], y.numpy())
        done[job["path"]] = [list(missing), list(unexpected)]
    built = paddle.nn.GRU(3, 4, bias_ih_attr=False, bias_hh_attr=False)  # built, never run
    done["bias_free_keys"] = list(built.state_dict())
json.dump(done, open(jobs["out"], "w"))
"""


def _in_paddle(jobs: dict[str, Any], folder: Path) -> dict[str, Any]:
    (folder / "jobs.json").write_text(json.dumps({**jobs, "out": str(folder / "done.json")}))
    subprocess.run([sys.executable, "-c", _PADDLE, str(folder / "jobs.json")], check=True,
                   capture_output=True, timeout=300)
    return dict(json.loads((folder / "done.json").read_text()))


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


def test_a_folder_holding_one_inference_model_reads_as_that_model(tmp_path: Path) -> None:
    """As models ship (inference.pdmodel and inference.pdiparams in a folder of their own)."""
    folder = GOLDEN / "gru"
    assert get("paddle").sniff(folder)
    assert rnnport.read(folder) == rnnport.read(folder / "inference.json")
    assert {path.name for path in get("paddle").input_files(folder)} == {
        "inference.json", "inference.pdiparams"}
    twice = tmp_path / "two"
    twice.mkdir()
    for stem in ("a", "b"):  # two models: which one is meant is not guessed
        for ending in (".json", ".pdiparams"):
            shutil.copyfile(folder / f"inference{ending}", twice / f"{stem}{ending}")
    assert not get("paddle").sniff(twice)
    assert rnnport.read(twice / "a.json") == rnnport.read(folder)


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


def test_a_model_around_its_network_reads_it_inside_control_flow_and_a_checkpoint() -> None:
    """A Linear and an int64 buffer before, an if around the LSTM (a GRU in the other
    branch), a head after; the checkpoint {"model": state_dict, "epoch": 1} keeps its tensors
    as (name, array) tuples; its optimizer state beside it is told apart."""
    meta, expected = _case(MODEL)
    folder = GOLDEN / MODEL
    program = rnnport.read(folder / "inference.json", op=0)
    y, (h, c) = program.forward(expected["x"])
    for mine, theirs in ((y, "y"), (h, "h"), (c, "c")):
        np.testing.assert_allclose(mine, expected[theirs], atol=meta["tolerance"], rtol=0)
    assert rnnport.read(folder / "inference.json", op=1).spec.cell == "gru"
    notes = get("paddle").source_notes(folder / "inference.json", op=0)
    assert any("runs inside a control-flow block" in note for note in notes), notes
    assert any("if ×1" in note for note in notes), notes
    checkpoint = folder / "model.pdparams"
    with pytest.raises(rnnport.AmbiguousSourceError, match="'model.neck.encoder.lstm.'"):
        rnnport.read(checkpoint)
    assert rnnport.read(checkpoint, prefix="model.neck.encoder.lstm.") == program
    notes = get("paddle").source_notes(checkpoint, prefix="model.neck.encoder.lstm")
    assert any("model.steps" in note and "epoch" in note for note in notes), notes
    with pytest.raises(FormatError, match="an optimizer's state .* read the .pdparams"):
        rnnport.read(folder / "model.pdopt", "paddle")


def test_bfloat16_state_dicts_read_exactly(tmp_path: Path) -> None:
    """paddle.save writes a bfloat16 tensor as the uint16 array of its bits."""
    model = rnnport.read(GOLDEN / "gru" / "model.pdparams")
    state = rnnport.write(model, "paddle")
    bits = {key: (value.view(np.uint32) >> 16).astype(np.uint16) for key, value in state.items()}
    path = tmp_path / "bf16.pdparams"
    path.write_bytes(pickle.dumps(bits, protocol=4))
    read = rnnport.read(path)
    for key, value in read.params[0][0].items():
        widened = (bits[f"0.cell.{key}"].astype(np.uint32) << 16).view(np.float32)
        assert read.dtype == np.float32 and np.array_equal(value, widened), key
    notes = get("paddle").source_notes(path)
    assert any("stored as bfloat16" in note for note in notes), notes
    tensor = tmp_path / "tensor.pdparams"
    tensor.write_bytes(pickle.dumps(_Tensor("lstm_cell_0.w_0", bits["weight_ih_l0"]), protocol=4))
    with pytest.raises(FormatError, match="one tensor \\('lstm_cell_0.w_0'\\), as "
                       "paddle.save\\(tensor, path\\) writes"):
        rnnport.read(tensor)


class _Tensor:
    """A tensor as paddle.save pickles one outside a state dict: builtins.tuple of
    (name, array)."""

    def __init__(self, name: str, array: np.ndarray) -> None:
        self.name, self.array = name, array

    def __reduce__(self) -> tuple[Any, ...]:
        return (tuple, ((self.name, self.array),))


def test_reading_imports_no_framework() -> None:
    paths = [str(path) for path in sorted(GOLDEN.glob("*/*"))
             if path.suffix in (".pdparams", ".json", ".pdmodel") and path.parent.name != MODEL]
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


def test_paddle_restores_and_runs_what_rnnport_writes(tmp_path: Path) -> None:
    """``set_state_dict(paddle.load(path))`` into the layer paddle builds for the spec, run
    there; and a bias-free network in the layout of paddle's own bias-free layer."""
    x = np.random.default_rng(3).uniform(-1, 1, (2, 6, 5)).astype(np.float32)
    models, restore = {}, []
    for name, spec in SPECS.items():
        models[name] = model = RNN.random(spec, seed=len(name))
        path = tmp_path / f"{name}.pdparams"
        rnnport.write(model, "paddle", path=path)
        np.save(tmp_path / f"{name}_x.npy", x[..., :spec.input_size])
        restore.append({"path": str(path), "x": str(tmp_path / f"{name}_x.npy"),
                        "y": str(tmp_path / f"{name}_y.npy"),
                        "spec": {"cell": spec.cell, "input_size": spec.input_size,
                                 "hidden_size": spec.hidden_size, "num_layers": spec.num_layers,
                                 "bidirectional": spec.bidirectional,
                                 "proj_size": spec.proj_size}})
    done = _in_paddle({"restore": restore}, tmp_path)
    for name, spec in SPECS.items():
        model, path = models[name], str(tmp_path / f"{name}.pdparams")
        missing, unexpected = done[path]
        assert (missing, unexpected) == (([], []) if spec.bias else
                                         ([k for k in missing if ".cell" not in k],
                                          [k for k in unexpected if ".cell" not in k])), name
        want, _ = model.forward(x[..., :spec.input_size])
        np.testing.assert_allclose(np.load(tmp_path / f"{name}_y.npy"), want, atol=1e-5,
                                   rtol=0, err_msg=name)
    # The network without biases: paddle's own bias-free layer has these keys.
    written = rnnport.write(RNN.random(Spec("gru", 3, 4, bias=False)), "paddle")
    assert list(written) == done["bias_free_keys"]
    assert not np.any(written["0.cell.bias_ih"]) and not np.any(written["0.cell.bias_hh"])
    assert rnnport.read(written, "paddle").spec.bias is False


def test_convert_verify_runs_paddle_in_a_process_of_its_own(tmp_path: Path) -> None:
    """The framework check: a written .pdparams and a time-major inference model."""
    x = np.random.default_rng(4).uniform(-1, 1, (2, 6, 4)).astype(np.float32)
    model = RNN.random(SPECS["lstm_bi_2layer"], seed=5)
    rnnport.write(model, "paddle", path=tmp_path / "m.pdparams")
    label, theirs = get("paddle").framework_forward(  # type: ignore[misc]
        tmp_path / "m.pdparams", model, x)
    assert "paddle.load of m.pdparams" in label
    np.testing.assert_allclose(theirs, model.forward(x)[0], atol=1e-5, rtol=0)
    _, expected = _case("gru_time_major")
    label, y = get("paddle").framework_forward(  # type: ignore[misc]
        GOLDEN / "gru_time_major" / "inference.json", rnnport.read(GOLDEN / "gru_time_major"
                                                                  / "inference.json"),
        np.ascontiguousarray(expected["x"].transpose(1, 0, 2)))
    np.testing.assert_allclose(y.transpose(1, 0, 2), expected["y"], atol=1e-5, rtol=0)
    # A checkpoint: the network's keys under "model." inside it, found there by paddle too.
    checkpoint = GOLDEN / MODEL / "model.pdparams"
    network = rnnport.read(checkpoint, prefix="model.neck.encoder.lstm.")
    _, expected = _case(MODEL)
    label, y = get("paddle").framework_forward(  # type: ignore[misc]
        checkpoint, network, expected["x"])
    assert "paddle.load of model.pdparams" in label
    np.testing.assert_allclose(y, expected["y"], atol=1e-5, rtol=0)


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
