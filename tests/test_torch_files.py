"""PyTorch files as hubs, trainers and exporters write them (tools/golden_torch_files.py),
read by their bytes, without PyTorch, wherever the weights sit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import formats
from rnnport.cli import main
from rnnport.errors import AmbiguousSourceError, FormatError

GOLDEN = Path(__file__).parent / "golden" / "torch_files"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())
CASES = sorted(MANIFEST["cases"])
CELLS = {"LSTM": "lstm", "GRU": "gru", "LSTMCell": "lstm", "GRUCell": "gru"}


def _case(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


def _cell(module: dict[str, Any]) -> str:
    if module["class"] in CELLS:
        return CELLS[module["class"]]
    return f"rnn_{module['nonlinearity']}"


@pytest.mark.parametrize("name", CASES)
def test_every_network_reads_by_its_key_path_and_computes_what_pytorch_did(name: str) -> None:
    meta, arrays = _case(name)
    path = GOLDEN / meta["file"]
    assert formats.sniff(path) == "torch"  # by the bytes: .bin, .ckpt, .tar, .pkl, no suffix
    several = len(meta["networks"]) > 1
    for network in meta["networks"]:
        module = network["module"]
        # A state_dict does not record a simple RNN's relu; a .pt2 graph does.
        options = {"nonlinearity": module["nonlinearity"]} \
            if module["class"] == "RNN" and meta["kind"] != "pt2" else {}
        for prefix in {network["prefix"], network["prefix"].rstrip("."), network["inner"]}:
            if prefix == network["inner"] and (several or not prefix):
                continue  # an inner prefix picks one network only where it is unique
            model = rnnport.read(path, prefix=prefix, **options) if several or prefix else \
                rnnport.read(path, **options)
            spec = model.spec
            assert (spec.cell, spec.input_size, spec.hidden_size, spec.num_layers,
                    spec.bidirectional, spec.proj_size, spec.bias) == (
                _cell(module), module["input_size"], module["hidden_size"],
                module["num_layers"], module["bidirectional"], module["proj_size"],
                module["bias"]), prefix
            y, _ = model.astype("float32").forward(arrays[network["x"]])
            np.testing.assert_allclose(y, arrays[network["y"]], atol=meta["tolerance"], rtol=0)
    listed = formats.get("torch").networks(path)  # type: ignore[misc]
    assert [value for value, _ in listed.entries] == [n["prefix"] for n in meta["networks"]]


def test_several_networks_need_prefix_and_name_the_paths() -> None:
    meta, _ = _case("seq2seq_weights")
    with pytest.raises(AmbiguousSourceError, match=r"holds 2 RNNs, with key prefixes "
                       r"'net.encoder.rnn.', 'net.decoder.rnn.'; pass prefix="):
        rnnport.read(GOLDEN / meta["file"])
    with pytest.raises(FormatError, match=r"no RNN with prefix 'decoder'; prefixes found: "
                                          r"'net.encoder.rnn.', 'net.decoder.rnn.'"):
        rnnport.read(GOLDEN / meta["file"], prefix="decoder")


def test_inspect_names_the_file_kind_what_sits_beside_and_the_key_paths(
        capsys: pytest.CaptureFixture[str]) -> None:
    meta, _ = _case("lightning_ckpt")
    assert main(["inspect", str(GOLDEN / meta["file"])]) == 0
    out = capsys.readouterr().out
    assert "a torch.save file, read without PyTorch" in out
    assert "its 'state_dict' entry read as the state_dict; beside it 'epoch'" in out
    assert "'optimizer_states'" in out and "module 'model.fc'" in out
    meta, _ = _case("pt2_rnn_relu")
    assert main(["inspect", str(GOLDEN / meta["file"])]) == 0
    out = capsys.readouterr().out
    assert "node 'rnn_relu' (aten.rnn_relu.input)" in out and "relu" in out


def test_an_explicit_fmt_is_never_overruled_by_a_name(tmp_path: Path) -> None:
    meta, _ = _case("hub_bin")
    for name in ("weights.h5", "model.onnx", "plain"):
        shutil.copy(GOLDEN / meta["file"], tmp_path / name)
        assert rnnport.read(tmp_path / name, fmt="torch") == rnnport.read(GOLDEN / meta["file"])


def test_a_graph_computes_what_names_cannot_tell() -> None:
    relu, _ = _case("pt2_rnn_relu")
    assert rnnport.read(GOLDEN / relu["file"]).spec.cell == "rnn_relu"
    with pytest.raises(FormatError, match="nonlinearity='tanh' contradicts node 'rnn_relu'"):
        rnnport.read(GOLDEN / relu["file"], nonlinearity="tanh")
    deepspeed, _ = _case("deepspeed_module")  # a state_dict: the option tells
    assert rnnport.read(GOLDEN / deepspeed["file"], nonlinearity="relu").spec.cell == "rnn_relu"


def test_reading_pytorch_files_imports_neither_torch_nor_safetensors() -> None:
    files = [str(GOLDEN / _case(name)[0]["file"]) for name in
             ("hub_bin", "legacy_pt", "bf16_safetensors", "pt2_lstm", "pt2_old_layout",
              "lightning_ckpt")]
    code = ("import sys, rnnport\n"
            f"for path in {files!r}:\n"
            "    rnnport.read(path).forward(__import__('numpy').zeros((1, 2, 3), 'float32'))\n"
            "    rnnport.formats.get('torch').source_notes(path)\n"
            "found = sorted(m for m in ('torch', 'safetensors') if m in sys.modules)\n"
            "print(found)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


@pytest.mark.parametrize("name", ["lightning_ckpt", "legacy_pt", "bf16_safetensors", "pt2_lstm",
                                  "pt2_old_layout"])
def test_pytorch_itself_loading_the_file_computes_the_same(name: str) -> None:
    pytest.importorskip("torch")
    meta, _ = _case(name)
    path = GOLDEN / meta["file"]
    model = rnnport.read(path)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 4, model.spec.input_size)).astype(np.float32)
    found = formats.get("torch").framework_forward(path, model, x)  # type: ignore[misc]
    assert not isinstance(found, str), found
    label, y = found
    assert label.startswith(f"PyTorch loading {path.name}")
    np.testing.assert_allclose(model.astype("float32").forward(x)[0], y, atol=1e-5)


def test_files_written_without_pytorch_load_in_pytorch(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4, num_layers=2, bidirectional=True,
                                            proj_size=2), seed=5)
    for name in ("pytorch_model.bin", "m.pt", "weights", "m.safetensors"):
        rnnport.write(model, "torch", path=tmp_path / name)
        loaded = safetensors_torch.load_file(tmp_path / name) if name.endswith(".safetensors") \
            else torch.load(tmp_path / name, weights_only=True)
        assert {key: value.numpy().tolist() for key, value in loaded.items()} == \
            {key: value.tolist() for key, value in rnnport.write(model, "torch").items()}
        assert rnnport.read(tmp_path / name) == model


def test_numpy_arrays_in_a_checkpoint_read_as_its_tensors(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.GRU(3, 4)
    state = {key: value.numpy() for key, value in module.state_dict().items()}
    state["weight_ih_l0"] = np.asfortranarray(state["weight_ih_l0"]).astype(">f4")  # any layout
    for protocol in (2, 5):  # protocol 5 pickles arrays through numpy's _frombuffer
        torch.save({"model": state, "step": np.int64(5)}, tmp_path / "arrays.pt",
                   pickle_protocol=protocol)
        assert rnnport.read(tmp_path / "arrays.pt") == rnnport.read(module)
    state["weight_hh_l0"] = np.array([object()] * 48, dtype=object).reshape(12, 4)
    torch.save(state, tmp_path / "objects.pt")
    with pytest.raises(FormatError, match="weight_hh_l0: .*an object array"):
        rnnport.read(tmp_path / "objects.pt")


@pytest.mark.parametrize("protocol", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("zipped", [True, False])
def test_every_pickle_protocol_torch_save_takes_reads(tmp_path: Path, protocol: int,
                                                      zipped: bool) -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.LSTM(3, 4, bidirectional=True)
    torch.save({"net": module.state_dict()}, tmp_path / "m.pt", pickle_protocol=protocol,
               _use_new_zipfile_serialization=zipped)
    assert rnnport.read(tmp_path / "m.pt") == rnnport.read(module)


def test_a_pt2_archive_is_read_not_written(tmp_path: Path) -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4))
    with pytest.raises(FormatError, match="rnnport reads .pt2 files but does not write them"):
        rnnport.write(model, "torch", path=tmp_path / "m.pt2")
    assert list(tmp_path.iterdir()) == []


def test_a_file_saved_without_crc32s_reads_as_pytorch_reads_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.GRU(3, 4, num_layers=2)
    torch.serialization.set_crc32_options(False)  # records written with CRC 0, for speed
    try:
        torch.save(module.state_dict(), tmp_path / "fast.pt")
    finally:
        torch.serialization.set_crc32_options(True)
    assert rnnport.read(tmp_path / "fast.pt") == rnnport.read(module)


def test_tensors_of_every_dtype_beside_the_network_leave_it_readable(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    module = torch.nn.LSTM(3, 4)
    state = dict(module.state_dict())
    for dtype in (torch.uint16, torch.uint64, torch.float8_e5m2, torch.int8, torch.complex64,
                  torch.bool):  # the newer dtypes pickle through torch.storage.UntypedStorage
        state[f"extra_{str(dtype)[6:]}"] = torch.ones(3).to(dtype)
    torch.save(state, tmp_path / "mixed.pt")
    assert rnnport.read(tmp_path / "mixed.pt") == rnnport.read(module)
    state["weight_hh_l0"] = torch.zeros(16, 4, dtype=torch.int8)
    torch.save(state, tmp_path / "int8.pt")
    with pytest.raises(rnnport.errors.DTypeError,
                       match=r"int8.pt, weight_hh_l0: int8 weights; expected float16"):
        rnnport.read(tmp_path / "int8.pt")


def test_a_bin_file_is_pytorchs_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    """pytorch_model.bin is a torch.save zip; other formats' weights files end in .bin too."""
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4), seed=2)
    rnnport.write(model, "torch", path=tmp_path / "pytorch_model.bin")
    assert rnnport.formats.sniff(tmp_path / "pytorch_model.bin") == "torch"
    rnnport.write(model, "openvino", path=tmp_path / "model.xml")
    assert rnnport.formats.sniff(tmp_path / "model.bin") == "openvino"  # the IR's constants
    (tmp_path / "weights.bin").write_bytes(np.arange(12, dtype=np.float32).tobytes())
    with pytest.raises(rnnport.FormatError, match="cannot tell the format"):
        rnnport.read(tmp_path / "weights.bin")
