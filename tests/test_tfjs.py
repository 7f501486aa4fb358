"""TensorFlow.js layers models: the converter's golden files (``tools/golden_tfjs.py``) read
against what TF.js computed from them, what rnnport writes run by ``@tensorflow/tfjs`` itself
(Node.js, ``tests/js``: a missing runtime fails), weights matched by name, and damaged,
lying or hostile files refused with rnnport errors."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.cli import main
from rnnport.errors import FormatError, RnnportError, UnsupportedFeatureError
from rnnport.formats import get
from rnnport.formats.tfjs import TfjsRun, run_in_tfjs
from rnnport.gates import CANONICAL, reorder

GOLDEN = Path(__file__).parent / "golden" / "tfjs"
NODE_MODULES = Path(__file__).parent / "js" / "node_modules"
CASES = sorted(json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"])
TOLERANCE = 1e-5


def _case(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = dict(data)
    return arrays, json.loads(str(arrays.pop("meta")))


def _copy(name: str, folder: Path) -> Path:
    shutil.copytree(GOLDEN / name, folder / name)
    return folder / name / "model.json"


def _edit(path: Path, change: Any) -> Path:
    document = json.loads(path.read_text())
    change(document)
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def tfjs() -> Path:
    """The ``node_modules`` folder holding ``@tensorflow/tfjs``; its absence fails the test."""
    if shutil.which("node") is None:
        pytest.fail("Node.js is missing: install it (Debian: apt-get install nodejs); the tfjs "
                    "format's tests run what rnnport writes in TensorFlow.js.")
    if not (NODE_MODULES / "@tensorflow" / "tfjs" / "package.json").is_file():
        pytest.fail("@tensorflow/tfjs is missing: run `npm ci --prefix tests/js` (make test "
                    "does); the tfjs format's tests run what rnnport writes in TensorFlow.js.")
    return NODE_MODULES


# -- the converter's files ------------------------------------------------------------------


@pytest.mark.parametrize("name", CASES)
def test_golden_files_read_as_tfjs_computed_and_round_trip(tmp_path: Path, name: str) -> None:
    arrays, meta = _case(name)
    path = GOLDEN / name / "model.json"
    assert rnnport.formats.sniff(path) == "tfjs" and rnnport.formats.sniff(path.parent) == "tfjs"
    model = rnnport.read(path)
    assert model.input_size == arrays["x"].shape[2]
    x = arrays["x"]
    y, _ = model.forward(x)
    # TF.js's output where it runs the model; Keras's for the GRU TF.js refuses.
    reference = arrays["y_keras"] if meta["tfjs_error"] else arrays["y_tfjs"]
    if name == "simplernn_relu":  # sample 1's last two steps are masked (notes say so)
        y, reference = y[:, :-2], reference[:, :-2]
    np.testing.assert_allclose(y, reference, atol=TOLERANCE, rtol=0)
    if meta["quantized"] is None:  # the arrays are the Keras layers' own, bit for bit
        weights = [[arrays[f"weights/{layer}/{k}"] for k in range(6)
                    if f"weights/{layer}/{k}" in arrays] for layer in meta["layers"]]
        layers = [rnnport.read(found, "keras", **get("keras").read_options_for(layer.spec))
                  for found, layer in zip(weights, model.layers(), strict=True)]
        assert (rnnport.stack(layers) if len(layers) > 1 else layers[0]) == model
    if meta["tfjs_error"] and name.startswith("keras3_"):  # TF.js 4.22 reads no Keras 3 config
        assert "InputLayer" in meta["tfjs_error"]
    elif meta["tfjs_error"]:
        assert "reset_after" in meta["tfjs_error"]
        with pytest.raises(UnsupportedFeatureError, match="tfjs format cannot hold a "
                           "reset-after GRU"):
            rnnport.write(model, "tfjs")
        return
    written = tmp_path / "out" / "model.json"
    written.parent.mkdir()
    native = rnnport.write(model, "tfjs", path=written)
    assert rnnport.read(written) == model == rnnport.read(native, "tfjs")
    assert sorted(p.name for p in written.parent.iterdir()) == ["group1-shard1of1.bin",
                                                                 "model.json"]


def test_a_swapped_gate_would_not_pass() -> None:
    arrays, _ = _case("lstm_dense")
    model = rnnport.read(GOLDEN / "lstm_dense" / "model.json")
    named = dict(model.params[0][0])
    named["weight_ih"] = reorder(named["weight_ih"], CANONICAL["lstm"], "fig" + "o")
    swapped = RNN(model.spec, [[named]])
    assert np.abs(swapped.forward(arrays["x"])[0] - arrays["y_tfjs"]).max() > 1e-3


def test_notes_name_what_is_left_out_and_how_weights_were_read() -> None:
    notes = get("tfjs").source_notes
    dense = notes(GOLDEN / "lstm_dense" / "model.json")
    assert any(note.startswith("layer 'head' (Dense): not recurrent") for note in dense), dense
    quantized = notes(GOLDEN / "lstm_hard_sigmoid_uint8" / "model.json")
    assert any("stored quantized (uint8), read dequantized" in note for note in quantized)
    masked = notes(GOLDEN / "simplernn_relu" / "model.json")
    assert any("(Masking)" in note and "mask_value=0.0" in note for note in masked)
    refused = notes(GOLDEN / "gru_reset_after" / "model.json")
    assert any("TF.js cannot load it" in note for note in refused), refused
    assert notes(GOLDEN / "gru_reset_before" / "model.json") == []


def test_files_beside_model_json() -> None:
    declared = get("tfjs")
    folder = GOLDEN / "bi_stack_sharded"
    assert declared.input_files(folder / "model.json") == [
        folder / f"group1-shard{k}of4.bin" for k in range(1, 5)]
    assert declared.output_files(Path("out/model.json")) == [
        Path("out/model.json"), Path("out/group1-shard1of1.bin")]
    assert declared.output_files(Path("enc.json"))[1] == Path("enc.group1-shard1of1.bin")


def test_weights_are_matched_by_name_not_by_their_place(tmp_path: Path) -> None:
    """The manifest in reverse, its bytes rewritten to match: the same network."""
    path = _copy("lstm_dense", tmp_path)
    document = json.loads(path.read_text())
    (group,) = document["weightsManifest"]
    data = (path.parent / group["paths"][0]).read_bytes()
    pieces, offset = [], 0
    for entry in group["weights"]:
        size = 4 * int(np.prod(entry["shape"]))
        pieces.append(data[offset:offset + size])
        offset += size
    group["weights"].reverse()
    (path.parent / group["paths"][0]).write_bytes(b"".join(reversed(pieces)))
    path.write_text(json.dumps(document))
    assert rnnport.read(path) == rnnport.read(GOLDEN / "lstm_dense" / "model.json")


def test_reading_imports_no_framework_and_starts_no_process() -> None:
    script = (
        "import sys, subprocess\n"
        "started = []\n"
        "subprocess.Popen = lambda *a, **k: started.append(a)\n"
        "import rnnport\n"
        f"for case in {CASES!r}:\n"
        f"    rnnport.read({str(GOLDEN)!r} + '/' + case + '/model.json')\n"
        "frameworks = ('tensorflow', 'tensorflowjs', 'keras', 'tf_keras', 'torch', 'h5py', 'jax')\n"
        "print([m for m in frameworks if m in sys.modules], started)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[] []"


# -- TF.js running what rnnport writes ---------------------------------------------------------


def test_tfjs_runs_what_rnnport_writes(tmp_path: Path, tfjs: Path) -> None:
    converted = rnnport.read(GOLDEN / "bi_stack_sharded" / "model.json")
    models = {
        "converted_bi_stack": converted,
        "lstm_2_layer_bidirectional": RNN.random(Spec("lstm", 5, 8, num_layers=2,
                                                      bidirectional=True), seed=1),
        "simple_rnn_relu_stack": RNN.random(Spec("rnn_relu", 4, 12, num_layers=2), seed=2),
        "activations_then_biasless_gru": rnnport.stack([
            RNN.random(Spec("lstm", 6, 9, activations=[("HardSigmoid", 0.2, 0.5),
                                                       ("Softsign", 0, 0), ("Softsign", 0, 0)]),
                       seed=3),
            RNN.random(Spec("gru", 9, 10, reset_after=False, bias=False, bidirectional=True),
                       seed=4)]),
    }
    runs = []
    for index, (name, model) in enumerate(models.items()):
        path = tmp_path / name / "model.json"
        path.parent.mkdir()
        rnnport.write(model, "tfjs", path=path)
        x = np.random.default_rng(index).uniform(-1, 1, (2, 6, model.input_size))
        runs.append(TfjsRun(path, x.astype(np.float32)))
    # TF.js's own refusal of the converter's reset-after GRU, in the same Node.js process
    _, meta = _case("gru_reset_after")
    runs.append(TfjsRun(GOLDEN / "gru_reset_after" / "model.json",
                        np.zeros((1, 5, 4), np.float32)))
    answer = run_in_tfjs(runs, node_path=tfjs)
    assert not isinstance(answer, str), answer
    version, results = answer
    assert version == "4.22.0"
    for (name, model), run, y in zip(models.items(), runs, results, strict=False):
        assert not isinstance(y, str), f"{name}: {y}"
        np.testing.assert_allclose(y, model.forward(run.x)[0], atol=TOLERANCE, rtol=0,
                                   err_msg=name)
    assert results[-1] == meta["tfjs_error"]


def test_convert_verify_runs_source_and_output_in_tfjs(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path, tfjs: Path) -> None:
    """The source's stack alone (its Dense head left out) and the file written, both in TF.js."""
    monkeypatch.setenv("NODE_PATH", str(tfjs))
    destination = tmp_path / "model.json"
    assert main(["convert", str(GOLDEN / "lstm_dense" / "model.json"), str(destination),
                 "--verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert "stage 2, TF.js 4.22.0 (Node.js) loading model.json's weights" in out
    assert "source, TF.js 4.22.0 (Node.js)" in out
    assert out.count(" ok") == 3, out


@pytest.mark.parametrize("name", ["keras3_archive", "keras3_h5"])
def test_keras3_conversions_read_by_their_names_and_verify_in_tfjs(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        tfjs: Path, name: str) -> None:
    """The converter names a Keras 3 model's weights by its archive paths
    (``layers/bidirectional/forward_layer/cell/vars/0``) or under the Sequential's name
    (``sequential/bidirectional/forward_lstm/lstm_cell/kernel``, the Bidirectional's layers
    named ``forward_lstm`` in the config itself); TF.js gets the stack's weights under its
    variables' names, and nothing else."""
    path = GOLDEN / name / "model.json"
    notes = get("tfjs").source_notes(path)
    assert len(notes) == 1 and notes[0].startswith("layer 'dense") and \
        notes[0].endswith("(Dense): not recurrent; not read (rnnport reads the recurrent "
                          "layers)."), notes
    monkeypatch.setenv("NODE_PATH", str(tfjs))
    assert main(["convert", str(path), str(tmp_path / "out.npz"), "--verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert "source, TF.js 4.22.0 (Node.js) loading model.json's weights" in out
    assert out.count(" ok") == 2, out


def test_without_tfjs_verify_says_why_not(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no node
    model = rnnport.read(GOLDEN / "gru_reset_before" / "model.json")
    found = get("tfjs").framework_forward(GOLDEN / "gru_reset_before" / "model.json", model,
                                          np.zeros((1, 5, 4), np.float32))
    assert isinstance(found, str) and found.startswith("Node.js is not installed")
    assert "npm install @tensorflow/tfjs@4.22.0" in found


# -- refusals ---------------------------------------------------------------------------------


def test_what_tfjs_cannot_hold_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedFeatureError) as raised:
        rnnport.write(RNN.random(Spec("gru", 2, 3)), "tfjs")
    message = str(raised.value)
    assert message.startswith("write(fmt='tfjs'): the tfjs format cannot hold a reset-after GRU")
    assert "Formats that hold it: keras" in message and "onnx" in message
    with pytest.raises(UnsupportedFeatureError, match=r"model.astype\('float32'\)"):
        rnnport.write(RNN.random(Spec("lstm", 2, 3), dtype=np.float64), "tfjs")
    keras3 = Spec("gru", 2, 3, reset_after=False,
                  activations=[("HardSigmoid", 1 / 6, 0.5), ("Tanh", 0, 0)])
    with pytest.raises(UnsupportedFeatureError, match="non-default activations"):
        rnnport.write(RNN.random(keras3), "tfjs")
    with pytest.raises(UnsupportedFeatureError, match="LSTM projection"):
        rnnport.write(RNN.random(Spec("lstm", 2, 4, proj_size=2)), "tfjs")
    with pytest.raises(FormatError, match="expected a path ending in .json"):
        rnnport.write(RNN.random(Spec("lstm", 2, 3)), "tfjs", path="model.bin")


def _bidirectional_sum(document: dict[str, Any]) -> None:
    layers = document["modelTopology"]["model_config"]["config"]["layers"]
    layers[1]["config"]["merge_mode"] = "sum"


def _graph_model(document: dict[str, Any]) -> None:
    document["format"] = "graph-model"


def _quantized_int4(document: dict[str, Any]) -> None:
    document["weightsManifest"][0]["weights"][0]["quantization"] = {"dtype": "int4"}


def _string_first(document: dict[str, Any]) -> None:
    document["weightsManifest"][0]["weights"].insert(
        0, {"name": "vocabulary", "shape": [2], "dtype": "string"})


@pytest.mark.parametrize(("case", "change", "error", "match"), [
    ("bi_stack_sharded", _bidirectional_sum, UnsupportedFeatureError, "merge_mode='sum'"),
    ("gru_reset_before", _graph_model, UnsupportedFeatureError, "a TensorFlow.js graph model"),
    ("gru_reset_before", _quantized_int4, UnsupportedFeatureError,
     "uint8, uint16 and float16 quantization"),
    ("gru_reset_before", _string_first, UnsupportedFeatureError, "after a string weight"),
])
def test_constructs_rnnport_does_not_read_are_refused_by_name(
        tmp_path: Path, case: str, change: Any, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        rnnport.read(_edit(_copy(case, tmp_path), change), "tfjs")


def _weights(document: dict[str, Any]) -> list[dict[str, Any]]:
    return [entry for group in document["weightsManifest"] for entry in group["weights"]]


def _set(index: int, key: str, value: Any) -> Any:
    def change(document: dict[str, Any]) -> None:
        _weights(document)[index][key] = value
    return change


def _path(value: str) -> Any:
    def change(document: dict[str, Any]) -> None:
        document["weightsManifest"][0]["paths"] = [value]
    return change


def _duplicate(document: dict[str, Any]) -> None:
    weights = document["weightsManifest"][0]["weights"]
    weights[1]["name"] = weights[0]["name"]


def _stray(document: dict[str, Any]) -> None:
    _weights(document)[0]["name"] = "gru/gru_cell/kernel/moment"


@pytest.mark.parametrize(("change", "match"), [
    (_set(0, "shape", [100_000, 100_000]), "expansion"),  # lying: 40 GB of float32
    (_set(0, "shape", [4, 31]), "holds 1,800 bytes; expected 1,816"),
    (_set(0, "shape", [-4, 30]), "expected a list of at most 8 sizes"),
    (_set(0, "dtype", "float64"), "dtype 'float64'; expected one of"),
    (_set(0, "name", "gru/gru_cell/kernel_renamed"), "are named under it but are none of"),
    (_set(0, "name", "other/kernel"), "no weight named gru/\\[<cell>/\\]kernel"),
    (_path("../group1-shard1of1.bin"), "without '..'"),
    (_path("/etc/passwd"), "relative to the folder"),
    (_path("missing.bin"), "no such file"),
    (_duplicate, "a second time"),
    (_stray, "are named under it but are none of"),
])
def test_damaged_and_lying_files_are_rnnport_errors(tmp_path: Path, change: Any,
                                                    match: str) -> None:
    path = _copy("gru_reset_before", tmp_path)
    document = json.loads(path.read_text())
    for entry in _weights(document):  # the converter's names: gru_N/gru_cell/…
        entry["name"] = "gru/" + entry["name"].split("/", 1)[1]
    document["modelTopology"]["model_config"]["config"]["layers"][0]["config"]["name"] = "gru"
    path.write_text(json.dumps(document))
    with pytest.raises(RnnportError, match=match):
        rnnport.read(_edit(path, change), "tfjs")


def test_truncated_shards_links_out_and_deep_json_are_rnnport_errors(tmp_path: Path) -> None:
    path = _copy("bi_stack_sharded", tmp_path)
    shard = path.parent / "group1-shard3of4.bin"
    shard.write_bytes(shard.read_bytes()[:-7])
    with pytest.raises(FormatError, match="A shard is truncated"):
        rnnport.read(path)
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 2048)
    shard.unlink()
    shard.symlink_to(outside)
    with pytest.raises(FormatError, match="leads out of"):
        rnnport.read(path)
    path.write_text('{"modelTopology": ' + "[" * 5000 + "]" * 5000 + "}")
    with pytest.raises(FormatError, match="not valid JSON"):
        rnnport.read(path, "tfjs")
    os.remove(path)
    assert not get("tfjs").sniff(path.parent)
