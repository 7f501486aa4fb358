"""TF2 object-based checkpoints and SavedModels: read without TensorFlow, written for tf_keras.

Expected values come from TensorFlow 2.21 with tf_keras (the golden files of
``tools/golden_tf2.py``) and from tf_keras itself restoring what rnnport writes, in a
process of its own (``TF_USE_LEGACY_KERAS=1``); a missing TensorFlow fails those tests.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import AmbiguousSourceError, FormatError, RnnportError
from rnnport.formats import get
from rnnport.io import tensorbundle, tfproto

sys.path.insert(0, str(Path(__file__).parent))
import golden_cases

TF2 = Path(__file__).parent / "golden" / "tf2"
FORMAT = "tf2"


def _cases(*kinds: str) -> list[dict[str, Any]]:
    manifest = json.loads((TF2 / "MANIFEST.json").read_text())
    return [case for case in manifest["cases"] if case["kind"] in kinds]


def _load(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(TF2 / case["npz"], allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


RECURRENT = {"LSTM", "GRU", "SimpleRNN", "CuDNNLSTM", "CuDNNGRU", "Bidirectional"}


@pytest.mark.parametrize("case", _cases("tf2_checkpoint", "savedmodel"),
                         ids=lambda case: case["name"])
def test_golden_files_read_and_run_as_tensorflow_did(case: dict[str, Any]) -> None:
    meta, arrays = _load(case)
    source = TF2 / case["source"]
    assert rnnport.formats.sniff(str(source)) == FORMAT
    model = rnnport.read(str(source), **meta["read_options"])
    recurrent = [layer for layer in meta["layers"] if layer["class"] in RECURRENT]
    assert len(model.layers()) == len(recurrent)
    y, state = model.forward(arrays["x"])
    # A Dense after the stack: compare the last recurrent layer's output, every step.
    last = recurrent[-1]["name"]
    expected = arrays["y"] if len(recurrent) == len(meta["layers"]) else \
        arrays[f"layer_output/{last}"]
    if expected.ndim == 2:  # return_sequences=False: the last step
        y = y[:, -1]
    np.testing.assert_allclose(y, expected, atol=meta["tolerance"], rtol=0)
    if len(recurrent) == 1 and f"h_n/{last}" in arrays:
        h = state[0] if isinstance(state, tuple) else state
        np.testing.assert_allclose(h, arrays[f"h_n/{last}"], atol=meta["tolerance"], rtol=0)
        if f"c_n/{last}" in arrays:
            np.testing.assert_allclose(state[1], arrays[f"c_n/{last}"],
                                       atol=meta["tolerance"], rtol=0)


def test_the_weights_read_are_the_keras_arrays() -> None:
    (case,) = [c for c in _cases("tf2_checkpoint") if c["name"] == "tf2_ckpt_bi_lstm"]
    _, arrays = _load(case)
    model = rnnport.read(str(TF2 / case["source"]))
    written = rnnport.write(model, "keras")
    expected = [arrays[f"weights/bidirectional/{k}"] for k in range(6)]
    for got, want in zip(written, expected, strict=True):
        np.testing.assert_array_equal(got, want)


def test_simple_rnn_activation_is_an_option() -> None:
    source = str(TF2 / "tf2_ckpt_simplernn_relu" / "ckpt")
    assert rnnport.read(source).spec.cell == "rnn_tanh"
    assert rnnport.read(source, activation="relu").spec.cell == "rnn_relu"


def test_savedmodel_metadata_decides_the_cell() -> None:
    model = rnnport.read(str(TF2 / "tf2_savedmodel_keras_bi_gru" / "saved_model"))
    assert model.spec.cell == "gru" and model.spec.bidirectional and model.spec.reset_after
    with pytest.raises(FormatError, match="contradicts the layer's config"):
        rnnport.read(str(TF2 / "tf2_savedmodel_keras_bi_gru" / "saved_model"), activation="relu")


def test_optimizer_checkpoint_notes_and_folder() -> None:
    folder = TF2 / "tf2_checkpoint_optimizer"
    model = rnnport.read(str(folder))  # the folder's checkpoint state names ckpt-1
    assert model.spec.cell == "lstm" and model.spec.hidden_size == 3
    notes = " ".join(get(FORMAT).source_notes(str(folder / "ckpt-1")))
    assert "model/layer_with_weights-1" in notes and "not recurrent" in notes
    assert "OPTIMIZER_SLOT" in notes and "save_counter" in notes


def test_separate_stacks_are_listed_and_picked(tmp_path: Path) -> None:
    # Two LSTMs whose sizes do not chain: two networks.
    first = RNN.random(Spec(cell="lstm", input_size=3, hidden_size=4), seed=1)
    second = RNN.random(Spec(cell="gru", input_size=5, hidden_size=2), seed=2)
    native = {**rnnport.write(first, FORMAT)}
    for key, value in rnnport.write(second, FORMAT).items():
        native[key.replace("layer_with_weights-0", "layer_with_weights-1")] = value
    choices = get(FORMAT).networks(native)  # type: ignore[misc]
    assert choices.option == "layer"
    assert [value for value, _ in choices.entries] == ["layer_with_weights-0",
                                                       "layer_with_weights-1"]
    with pytest.raises(AmbiguousSourceError, match="layer="):
        rnnport.read(native, FORMAT)
    assert rnnport.read(native, FORMAT, layer="layer_with_weights-1").spec.cell == "gru"
    with pytest.raises(FormatError, match="no recurrent layer 'layer_with_weights-7'"):
        rnnport.read(native, FORMAT, layer="layer_with_weights-7")


@pytest.mark.parametrize("spec", [
    Spec(cell="lstm", input_size=3, hidden_size=4, num_layers=2, bidirectional=True, bias=False),
    Spec(cell="gru", input_size=2, hidden_size=3, num_layers=2),
    Spec(cell="gru", input_size=2, hidden_size=3, reset_after=False, bias=False),
    Spec(cell="rnn_relu", input_size=4, hidden_size=2, bidirectional=True, bias=False),
], ids=lambda spec: spec.describe())
def test_round_trips_are_exact(spec: Spec, tmp_path: Path) -> None:
    model = RNN.random(spec, seed=7)
    options = get(FORMAT).read_options_for(spec)
    assert rnnport.read(rnnport.write(model, FORMAT), FORMAT, **options) == model
    prefix = tmp_path / "ckpt"
    rnnport.write(model, FORMAT, path=prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint", "ckpt.data-00000-of-00001", "ckpt.index"]
    assert rnnport.read(str(tmp_path), **options) == model
    assert rnnport.formats.sniff(str(prefix)) == FORMAT


def test_written_object_graph_is_what_tf_keras_writes(tmp_path: Path) -> None:
    """Node by node, the graph of the golden save_weights checkpoint of a Bidirectional LSTM."""
    golden = TF2 / "tf2_ckpt_bi_lstm" / "ckpt"
    model = rnnport.read(str(golden))
    rnnport.write(model, FORMAT, path=tmp_path / "ckpt")
    ours = tfproto.read_object_graph(tmp_path / "ckpt")
    theirs = tfproto.read_object_graph(golden)
    assert ours == theirs
    for key in tensorbundle.Bundle(golden):
        if key != tfproto.OBJECT_GRAPH_KEY:
            np.testing.assert_array_equal(tensorbundle.Bundle(tmp_path / "ckpt").read(key),
                                          tensorbundle.Bundle(golden).read(key))


def test_tf1_refuses_object_based_checkpoints() -> None:
    source = str(TF2 / "tf2_ckpt_lstm" / "ckpt")
    assert not get("tf1").sniff(source)
    assert not get("tf1").sniff(str(TF2 / "tf2_savedmodel_keras_lstm" / "saved_model"))
    with pytest.raises(FormatError, match="fmt='tf2'"):
        rnnport.read(source, "tf1")


# -- damage ------------------------------------------------------------------------------------


def _copy(tmp_path: Path, name: str = "tf2_ckpt_lstm") -> Path:
    shutil.copytree(TF2 / name, tmp_path / name)
    return tmp_path / name / "ckpt"


def test_truncated_index_is_an_error(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    index = Path(f"{prefix}.index")
    index.write_bytes(index.read_bytes()[:-30])
    with pytest.raises(RnnportError):
        rnnport.read(str(prefix), FORMAT)


def test_object_graph_pointing_out_of_range_is_an_error(tmp_path: Path) -> None:
    golden = TF2 / "tf2_ckpt_lstm" / "ckpt"
    bundle = tensorbundle.Bundle(golden)
    arrays = {key: bundle.read(key) for key in bundle}
    graph = arrays[tfproto.OBJECT_GRAPH_KEY].reshape(-1)[0]
    # The root's first child reference names node 1: make it 99.
    marker = b"\x08\x01\x12\x14layer_with_weights-0"
    assert marker in graph
    damaged = np.empty((), dtype=object)
    damaged[()] = graph.replace(marker, b"\x08\x63" + marker[2:], 1)
    arrays[tfproto.OBJECT_GRAPH_KEY] = damaged
    tensorbundle.write_bundle(tmp_path / "ckpt", arrays)
    with pytest.raises(FormatError, match="names node 99"):
        rnnport.read(str(tmp_path / "ckpt"), FORMAT)


def test_damaged_data_and_metadata_are_errors(tmp_path: Path) -> None:
    prefix = _copy(tmp_path)
    data = Path(f"{prefix}.data-00000-of-00001")
    raw = bytearray(data.read_bytes())
    raw[5] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="CRC"):
        rnnport.read(str(prefix), FORMAT)
    folder = tmp_path / "saved"
    shutil.copytree(TF2 / "tf2_savedmodel_keras_lstm" / "saved_model", folder)
    (folder / "keras_metadata.pb").write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(FormatError):
        rnnport.read(str(folder), FORMAT)


def test_string_tensor_round_trips_through_the_bundle(tmp_path: Path) -> None:
    value = np.empty((), dtype=object)
    value[()] = b"\x00\x01graph" * 40
    tensorbundle.write_bundle(tmp_path / "b", {"s": value, "x": np.arange(3.0)})
    assert tensorbundle.Bundle(tmp_path / "b").read("s").reshape(-1)[0] == value[()]
    assert struct.calcsize("<I") == 4


def test_reading_imports_no_tensorflow() -> None:
    code = textwrap.dedent(f"""
        import sys, rnnport
        rnnport.read({str(TF2 / 'tf2_ckpt_bi_lstm' / 'ckpt')!r})
        rnnport.read({str(TF2 / 'tf2_savedmodel_keras_bi_gru' / 'saved_model')!r})
        rnnport.read({str(TF2 / 'tf2_savedmodel_module_lstm' / 'saved_model')!r})
        loaded = [m for m in ("tensorflow", "tf_keras", "keras", "torch", "google.protobuf")
                  if m in sys.modules]
        assert not loaded, loaded
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


# -- tf_keras restoring what rnnport writes ----------------------------------------------------

_RESTORE = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import numpy as np
    import tf_keras as keras
    for job in json.load(open(sys.argv[1])):
        built = [keras.Input(shape=(None, job["input_size"]), dtype=job["dtype"])]
        for layer in job["layers"]:
            cls = getattr(keras.layers, layer["class"])
            made = cls(**layer["config"], return_sequences=True, dtype=job["dtype"])
            if layer["bidirectional"]:
                made = keras.layers.Bidirectional(made, dtype=job["dtype"])
            built.append(made)
        model = keras.Sequential(built)
        model.set_weights([np.full(w.shape, np.nan, w.dtype) for w in model.get_weights()])
        model.load_weights(job["checkpoint"]).assert_existing_objects_matched()
        np.save(job["y"], np.asarray(model(np.load(job["x"]))))
""")


def _keras_layers(case: golden_cases.Case) -> list[dict[str, Any]]:
    """The Keras 2 layers of a golden Keras case, from its meta alone (not from rnnport)."""
    out = []
    for layer in case.meta["layers"]:
        cls = layer["inner"] or layer["class"]
        config = {key: value for key, value in layer["config"].items()
                  if key in ("units", "activation", "recurrent_activation", "use_bias",
                             "reset_after")}
        out.append({"class": cls, "config": config, "bidirectional": layer["bidirectional"]})
    return out


@pytest.mark.slow
def test_tf_keras_load_weights_restores_what_rnnport_writes(tmp_path: Path) -> None:
    jobs, expected = [], {}
    for name in golden_cases.names("keras_"):
        case = golden_cases.load(name)
        model = case.read()
        folder = tmp_path / name
        folder.mkdir()
        rnnport.write(model, FORMAT, path=folder / "ckpt")
        x = case.arrays["x"]
        np.save(folder / "x.npy", x)
        jobs.append({"checkpoint": str(folder / "ckpt"), "x": str(folder / "x.npy"),
                     "y": str(folder / "y.npy"), "dtype": case.meta["dtype"],
                     "input_size": int(x.shape[-1]), "layers": _keras_layers(case)})
        plain = case.lengths is None and "h0/0" not in case.arrays
        # Keras's own y where it ran the whole sequences from zero states; rnnport's
        # (checked against that y elsewhere) where it ran masks or initial states.
        expected[name] = (case.arrays["y"] if plain else model.forward(x)[0],
                          case.meta["tolerance"])
    (tmp_path / "jobs.json").write_text(json.dumps(jobs))
    (tmp_path / "restore.py").write_text(_RESTORE)
    done = subprocess.run([sys.executable, str(tmp_path / "restore.py"),
                           str(tmp_path / "jobs.json")], capture_output=True, text=True,
                          env={**os.environ, "TF_USE_LEGACY_KERAS": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for name, (y, tolerance) in expected.items():
        got = np.load(tmp_path / name / "y.npy")
        if y.ndim == 2:
            got = got[:, -1]
        np.testing.assert_allclose(got, y, atol=tolerance, rtol=0, err_msg=name)


@pytest.mark.slow
def test_framework_forward_runs_checkpoints_and_savedmodels(tmp_path: Path) -> None:
    declared = get(FORMAT)
    assert declared.framework_forward is not None
    for name, source in (("tf2_ckpt_gru_reset_before", "tf2_ckpt_gru_reset_before/ckpt"),
                         ("tf2_savedmodel_keras_bi_gru", "tf2_savedmodel_keras_bi_gru/saved_model"),
                         ("tf2_checkpoint_optimizer", "tf2_checkpoint_optimizer/ckpt-1")):
        (case,) = [c for c in _cases("tf2_checkpoint", "savedmodel") if c["name"] == name]
        _, arrays = _load(case)
        model = rnnport.read(str(TF2 / source))
        result = declared.framework_forward(str(TF2 / source), model, arrays["x"])
        assert not isinstance(result, str), result
        np.testing.assert_allclose(result[1], model.forward(arrays["x"])[0], atol=1e-5, rtol=0)
    module = str(TF2 / "tf2_savedmodel_module_lstm" / "saved_model")
    reason = declared.framework_forward(module, rnnport.read(module),
                                        np.zeros((1, 2, 3), np.float32))
    assert isinstance(reason, str) and "keras_metadata.pb" in reason


def test_tf1_savedmodel_exports_are_read_by_the_tf1_rules(tmp_path: Path) -> None:
    """SavedModelBuilder: no object graph; the variables bundle holds TF1 names."""
    model = RNN.random(Spec(cell="lstm", input_size=3, hidden_size=2), seed=3)
    folder = tmp_path / "export"
    (folder / "variables").mkdir(parents=True)
    (folder / "saved_model.pb").write_bytes(b"")
    tensorbundle.write_bundle(folder / "variables" / "variables", rnnport.write(model, "tf1"))
    assert rnnport.formats.sniff(str(folder)) == FORMAT
    assert rnnport.read(str(folder)) == rnnport.read(rnnport.write(model, "tf1"), "tf1")
    assert rnnport.read(str(folder), forget_bias=0.0).spec.cell == "lstm"
    with pytest.raises(FormatError, match="TF1 SavedModel"):
        rnnport.read(str(folder), layer="x")
