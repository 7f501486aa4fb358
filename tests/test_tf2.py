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
from rnnport import RNN, Spec, cli
from rnnport.errors import AmbiguousSourceError, FormatError, RnnportError, UnsupportedFeatureError
from rnnport.formats import get
from rnnport.io import tensorbundle, tfproto

sys.path.insert(0, str(Path(__file__).parent))
import golden_cases

TF2 = Path(__file__).parent / "golden" / "tf2"
FORMAT = "tf2"
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"


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


# -- what a checkpoint does not record, layer= lists, refusals (review findings) --------------


def _stacked(*models: RNN) -> dict[str, Any]:
    """One checkpoint dict holding ``models`` as layer_with_weights-0, -1, … (one each)."""
    native: dict[str, Any] = {}
    for k, model in enumerate(models):
        for key, value in rnnport.write(model, FORMAT).items():
            native[key.replace("layer_with_weights-0", f"layer_with_weights-{k}")] = value
    return native


def _as_written(model: RNN, **options: Any) -> RNN:
    """``model`` as a checkpoint keeps it (Keras sums an LSTM's or SimpleRNN's two biases)."""
    read = rnnport.read(rnnport.write(model, FORMAT), FORMAT, **options)
    assert isinstance(read, RNN)
    return read


def test_notes_say_go_backwards_and_merge_mode_are_assumed() -> None:
    bidirectional = RNN.random(Spec(cell="lstm", input_size=3, hidden_size=2,
                                    bidirectional=True), seed=1)
    notes = " ".join(get(FORMAT).source_notes(rnnport.write(bidirectional, FORMAT)))
    assert "layer_with_weights-0: go_backwards=False assumed" in notes
    assert "layer_with_weights-0: Bidirectional, merge_mode='concat' assumed" in notes
    plain = _stacked(RNN.random(Spec(cell="gru", input_size=3, hidden_size=2), seed=2),
                     RNN.random(Spec(cell="rnn_tanh", input_size=2, hidden_size=2), seed=3))
    notes = " ".join(get(FORMAT).source_notes(plain))
    assert "layer_with_weights-0: go_backwards=False assumed" in notes
    assert "layer_with_weights-1: go_backwards=False assumed" in notes
    assert "merge_mode" not in notes
    doc = rnnport.formats.tf2.__doc__ or ""
    assert "``go_backwards=False`` and ``merge_mode='concat'`` are assumed" in doc
    # Keras metadata records both: nothing is assumed there.
    saved = " ".join(get(FORMAT).source_notes(str(TF2 / "tf2_savedmodel_keras_bi_gru" /
                                                   "saved_model")))
    assert "go_backwards" not in saved and "merge_mode" not in saved


def test_layer_lists_pick_layers_that_chain_in_order(tmp_path: Path) -> None:
    first = RNN.random(Spec(cell="lstm", input_size=3, hidden_size=4), seed=1)
    second = RNN.random(Spec(cell="gru", input_size=4, hidden_size=5), seed=2)
    third = RNN.random(Spec(cell="rnn_tanh", input_size=5, hidden_size=6), seed=3)
    native = _stacked(first, second, third)
    both = rnnport.read(native, FORMAT, layer=["layer_with_weights-0", "layer_with_weights-1"])
    first, third = _as_written(first), _as_written(third)
    assert both == rnnport.stack([first, second])
    assert rnnport.read(native, FORMAT, layer=["layer_with_weights-1"]) == second
    assert rnnport.read(native, FORMAT, layer=("layer_with_weights-1",
                                               "layer_with_weights-2")) == \
        rnnport.stack([second, third])
    with pytest.raises(FormatError, match="expected the layers in the model's order"):
        rnnport.read(native, FORMAT, layer=["layer_with_weights-1", "layer_with_weights-0"])
    with pytest.raises(FormatError, match=r"does not form one stack: layer_with_weights-0 "
                                          r"outputs 4 values per step and layer_with_weights-2 "
                                          r"takes 5"):
        rnnport.read(native, FORMAT, layer=["layer_with_weights-0", "layer_with_weights-2"])
    with pytest.raises(FormatError, match="names a layer twice"):
        rnnport.read(native, FORMAT, layer=["layer_with_weights-0", "layer_with_weights-0"])
    with pytest.raises(FormatError, match="no recurrent layer 'nope'"):
        rnnport.read(native, FORMAT, layer=["layer_with_weights-0", "nope"])
    notes = " ".join(get(FORMAT).source_notes(native, layer=["layer_with_weights-1"]))
    assert "layer_with_weights-0: LSTM(4), recurrent, in the stack of the layers read" in notes
    # The command line passes a list: --layer repeated.
    prefix = tmp_path / "ckpt"
    rnnport.write(rnnport.stack([first, second, third]), FORMAT, path=prefix)
    out = tmp_path / "two" / "ckpt"
    out.parent.mkdir()
    assert cli.main(["convert", str(prefix), str(out), "--to", FORMAT, "--layer",
                     "layer_with_weights-1", "--layer", "layer_with_weights-2"]) == 0
    assert rnnport.read(str(out)) == rnnport.stack([second, third])


def test_conv_lstm_checkpoints_are_refused_by_name() -> None:
    lstm = RNN.random(Spec(cell="lstm", input_size=3, hidden_size=2), seed=1)
    native = _stacked(lstm)
    conv = {key.replace("layer_with_weights-0", "layer_with_weights-1"): value
            for key, value in native.items()}
    conv["layer_with_weights-1/cell/kernel" + VALUE] = np.zeros((3, 3, 1, 8), np.float32)
    conv["layer_with_weights-1/cell/recurrent_kernel" + VALUE] = np.zeros((3, 3, 2, 8),
                                                                          np.float32)
    conv["layer_with_weights-1/cell/bias" + VALUE] = np.zeros((8,), np.float32)
    only = {key: value for key, value in conv.items() if "layer_with_weights-1" in key}
    with pytest.raises(UnsupportedFeatureError,
                       match=r"layer_with_weights-1: ConvLSTM2D layers are not supported"):
        rnnport.read(only, FORMAT)
    one_d = {**only, "layer_with_weights-1/cell/recurrent_kernel" + VALUE:
             np.zeros((3, 2, 8), np.float32)}
    with pytest.raises(UnsupportedFeatureError, match="ConvLSTM1D layers"):
        rnnport.read(one_d, FORMAT)
    both = {**native, **only}
    with pytest.raises(AmbiguousSourceError, match=r"ConvLSTM2D\(2\)"):
        rnnport.read(both, FORMAT)
    assert rnnport.read(both, FORMAT, layer="layer_with_weights-0") == _as_written(lstm)
    with pytest.raises(UnsupportedFeatureError,
                       match=r"pass layer= \(e.g. layer='layer_with_weights-0'\)"):
        rnnport.read(both, FORMAT, layer="layer_with_weights-1")


def test_saved_model_pb_is_decoded(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    shutil.copytree(TF2 / "tf2_savedmodel_keras_lstm" / "saved_model", folder)
    graph = folder / "saved_model.pb"
    graph.write_bytes(graph.read_bytes()[:len(graph.read_bytes()) // 2])
    with pytest.raises(FormatError, match="saved_model.pb"):
        rnnport.read(str(folder), FORMAT)


def test_keras_metadata_without_layers_is_noted(tmp_path: Path) -> None:
    folder = tmp_path / "saved"
    shutil.copytree(TF2 / "tf2_savedmodel_keras_lstm" / "saved_model", folder)
    (folder / "keras_metadata.pb").write_bytes(b"")  # a SavedMetadata with no nodes
    assert rnnport.read(str(folder)) == rnnport.read(str(TF2 / "tf2_savedmodel_keras_lstm" /
                                                         "saved_model"))
    notes = " ".join(get(FORMAT).source_notes(str(folder)))
    assert "keras_metadata.pb: holds no Keras layers" in notes
    assert "activation='tanh'" in notes and "go_backwards=False assumed" in notes


def test_checkpoint_hard_sigmoid_is_keras_2_without_keras_version() -> None:
    gru = RNN.random(Spec(cell="gru", input_size=3, hidden_size=2), seed=4)
    native = rnnport.write(gru, FORMAT)
    read = rnnport.read(native, FORMAT, recurrent_activation="hard_sigmoid")
    assert read.spec.activations[0] == ("HardSigmoid", 0.2, 0.5)  # Keras 2's
    assert rnnport.read(native, FORMAT, recurrent_activation="hard_sigmoid",
                        keras_version=3).spec.activations[0] == ("HardSigmoid", 1 / 6, 0.5)
    assert rnnport.read(native, FORMAT) == gru  # sigmoid, as tf.keras's default


def test_relu_simple_rnn_needs_its_activation_read_back(tmp_path: Path) -> None:
    model = RNN.random(Spec(cell="rnn_relu", input_size=3, hidden_size=2), seed=5)
    rnnport.write(model, FORMAT, path=tmp_path / "ckpt")
    assert rnnport.read(str(tmp_path / "ckpt")).spec.cell == "rnn_tanh"  # not recorded
    assert get(FORMAT).read_back_options(model) == {"activation": "relu"}
    assert rnnport.read(str(tmp_path / "ckpt"), **get(FORMAT).read_back_options(model)) == \
        _as_written(model, activation="relu")
    notes = " ".join(get(FORMAT).source_notes(str(tmp_path / "ckpt")))
    assert "records no activations: Keras's defaults assumed, activation='tanh'" in notes


_MAKE = textwrap.dedent("""
    import os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    import numpy as np
    import tf_keras as keras
    L = keras.layers
    rng = np.random.default_rng(0)
    out = sys.argv[1]
    x = rng.standard_normal((2, 5, 3)).astype("float32")
    np.save(f"{out}/x.npy", x)

    def save(name, layers, shape=(None, 3)):
        model = keras.Sequential([keras.Input(shape), *layers])
        model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.5
                           for w in model.get_weights()])
        os.makedirs(f"{out}/{name}")
        model.save_weights(f"{out}/{name}/ckpt")
        model.save(f"{out}/{name}/saved")
        if len(shape) == 2:
            np.save(f"{out}/{name}/y.npy", model(x).numpy())

    save("backwards", [L.LSTM(4, return_sequences=True, go_backwards=True)])
    save("sum", [L.Bidirectional(L.LSTM(4, return_sequences=True), merge_mode="sum")])
    save("conv", [L.ConvLSTM2D(2, (3, 3), padding="same", return_sequences=True)],
         shape=(None, 4, 4, 1))
    save("dense_first", [L.TimeDistributed(L.Dense(3)), L.LSTM(4, return_sequences=True)])
    save("dense_between", [L.LSTM(4, return_sequences=True), L.Dense(4),
                           L.GRU(5, return_sequences=True)])
""")


@pytest.fixture(scope="module")
def keras_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Small models tf_keras saves (save_weights and model.save), in one TensorFlow process."""
    folder = tmp_path_factory.mktemp("keras_files")
    (folder / "make.py").write_text(_MAKE)
    done = subprocess.run([sys.executable, str(folder / "make.py"), str(folder)],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TF_USE_LEGACY_KERAS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.mark.slow
def test_what_tf_keras_checkpoints_leave_out_is_noted_or_refused(keras_files: Path) -> None:
    x = np.load(keras_files / "x.npy")
    # go_backwards: the checkpoint reads as a forward LSTM (other numbers), and notes say so.
    backwards = str(keras_files / "backwards" / "ckpt")
    y = np.asarray(rnnport.read(backwards).forward(x)[0])
    assert np.abs(y - np.load(keras_files / "backwards" / "y.npy")).max() > 1e-2
    assert "go_backwards=False assumed" in " ".join(get(FORMAT).source_notes(backwards))
    with pytest.raises(UnsupportedFeatureError, match="go_backwards=True outside a Bidirectional"):
        rnnport.read(str(keras_files / "backwards" / "saved"))
    # merge_mode='sum': read as concat, and notes say so.
    summed = str(keras_files / "sum" / "ckpt")
    assert rnnport.read(summed).output_size == 8
    assert "merge_mode='concat' assumed" in " ".join(get(FORMAT).source_notes(summed))
    with pytest.raises(UnsupportedFeatureError, match="merge_mode='sum'"):
        rnnport.read(str(keras_files / "sum" / "saved"))
    for source in ("ckpt", "saved"):
        with pytest.raises(UnsupportedFeatureError, match="ConvLSTM2D layers are not supported"):
            rnnport.read(str(keras_files / "conv" / source))


@pytest.mark.slow
def test_framework_forward_runs_the_stack_read_not_the_whole_model(keras_files: Path) -> None:
    declared = get(FORMAT)
    assert declared.framework_forward is not None
    x = np.random.default_rng(1).uniform(-1, 1, (2, 6, 4)).astype(np.float32)
    # Each kind of file twice, each choice of layers once: a run of TensorFlow costs seconds.
    for name, options, source in (
            ("dense_first", {}, "saved"),
            ("dense_between", {"layer": "layer_with_weights-0"}, "ckpt"),
            ("dense_between", {"layer": "layer_with_weights-2"}, "saved"),
            ("dense_between", {"layer": ["layer_with_weights-0", "layer_with_weights-2"]}, "ckpt")):
        path = str(keras_files / name / source)
        model = rnnport.read(path, **options)
        given = x[..., :model.input_size]
        result = declared.framework_forward(path, model, given)
        assert not isinstance(result, str), (name, options, result)
        assert "set_weights" in result[0], result[0]
        np.testing.assert_allclose(result[1], model.forward(given)[0], atol=1e-5, rtol=0,
                                   err_msg=f"{name} {source} {options}")


def test_a_checkpoint_name_with_brackets_is_protected_from_its_own_conversion(
        tmp_path: Path) -> None:
    """``m[1].ckpt``: the data shard is found by escaping the glob's brackets, so a
    conversion onto the source's own data file is refused even with overwrite=True."""
    import rnnport

    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4), seed=1)
    prefix = tmp_path / "m[1].ckpt"
    rnnport.write(model, "tf2", path=prefix)
    data = next(tmp_path.glob("*.data-*"))
    assert data in rnnport.formats.get("tf2").input_files(prefix)
    before = data.read_bytes()
    with pytest.raises(rnnport.RnnportError, match="source|input|itself"):
        rnnport.convert(prefix, "onnx", fmt="tf2", path=data, overwrite=True)
    assert data.read_bytes() == before
