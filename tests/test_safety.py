"""Safe by default: no pickled code runs, archives stay inside themselves, no network, no
file written over an input or (without overwrite=True / --force) over an existing one, and
a file that breaks the HDF5 library breaks only the child process that reads it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import (
    AmbiguousSourceError,
    DTypeError,
    FormatError,
    LimitError,
    RnnportError,
    UnsupportedFeatureError,
)

MODEL = RNN.random(Spec("lstm", 3, 4, bidirectional=True), seed=5)


class Touch:
    """Unpickling this creates the file ``path``: proof that pickled code ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.path,))


def test_pickled_code_is_never_run(tmp_path: Path) -> None:
    import torch

    marker = tmp_path / "ran"
    torch.save({"weight_ih_l0": Touch(marker)}, tmp_path / "evil.pt")
    np.savez(tmp_path / "evil.npz", rnnport=np.array([Touch(marker)], dtype=object))
    with pytest.raises(FormatError, match="never runs pickled code"):
        rnnport.read(tmp_path / "evil.pt")
    with pytest.raises(DTypeError, match="rnnport never unpickles"):
        rnnport.read(tmp_path / "evil.npz")
    assert not marker.exists()


def _with_member(source: Path, target: Path, name: str, data: bytes) -> Path:
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w") as new:
        for info in old.infolist():
            new.writestr(info, old.read(info.filename))
        new.writestr(zipfile.ZipInfo(name), data)
    return target


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".keras"])
@pytest.mark.parametrize("member", ["../evil.npy", "/tmp/evil.npy", "C:/evil.npy"])
def test_archive_members_stay_inside_the_archive(tmp_path: Path, suffix: str,
                                                 member: str) -> None:
    fmt = {".npz": "npz", ".pt": "torch", ".keras": "keras"}[suffix]
    rnnport.write(MODEL, fmt, path=tmp_path / f"good{suffix}")
    evil = _with_member(tmp_path / f"good{suffix}", tmp_path / f"evil{suffix}", member, b"x")
    with pytest.raises(FormatError, match=r"has a path that leaves the archive's folder"):
        rnnport.read(evil)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"good{suffix}",
                                                                 f"evil{suffix}"])


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".keras"])
def test_a_member_declaring_more_than_it_stores_is_refused(tmp_path: Path, suffix: str) -> None:
    fmt = {".npz": "npz", ".pt": "torch", ".keras": "keras"}[suffix]
    rnnport.write(MODEL, fmt, path=tmp_path / f"m{suffix}")
    data = bytearray((tmp_path / f"m{suffix}").read_bytes())
    at = data.index(b"PK\x01\x02")  # the first central directory entry: its declared size
    data[at + 24:at + 28] = (2**32 - 2).to_bytes(4, "little")
    (tmp_path / f"big{suffix}").write_bytes(bytes(data))
    with pytest.raises(FormatError, match=r"declares 4,294,967,294 bytes"):
        rnnport.read(tmp_path / f"big{suffix}")


def test_an_npy_header_cannot_ask_for_more_than_the_file_holds(tmp_path: Path) -> None:
    rnnport.write(MODEL, "npz", path=tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as old, \
            zipfile.ZipFile(tmp_path / "huge.npz", "w") as new:
        for info in old.infolist():
            data = old.read(info.filename)
            if info.filename != "rnnport.npy":
                data = data.replace(b"'shape': (", b"'shape': (100000000000, ", 1)
            new.writestr(info, data)
    with pytest.raises(FormatError, match=r"the header gives shape \(100000000000, .* but "
                                          r"[\d,]+ follow it"):
        rnnport.read(tmp_path / "huge.npz")


def test_a_torch_tensor_larger_than_its_file_is_refused(tmp_path: Path) -> None:
    import torch

    state = rnnport.write(RNN.random(Spec("rnn_tanh", 2, 3), seed=1), "torch")
    tensors = {k: torch.from_numpy(v) for k, v in state.items()}
    tensors["weight_ih_l0"] = torch.zeros(1).as_strided((3, 2), (0, 0))
    torch.save(tensors, tmp_path / "repeat.pt")
    tensors["weight_ih_l0"] = torch.zeros(1).as_strided((2**20, 2**20), (0, 0))
    torch.save(tensors, tmp_path / "huge.pt")
    assert rnnport.read(tmp_path / "repeat.pt").params[0][0]["weight_ih"].shape == (3, 2)
    with pytest.raises(LimitError, match=r"huge.pt, weight_ih_l0: tensor float32 "
                                         r"\(1048576, 1048576\) would take 4,398,046,511,104 "
                                         r"bytes.*past the limit 'expansion'"):
        rnnport.read(tmp_path / "huge.pt")
    # Many keys sharing one stored tensor: only the network read is ever made.
    big = torch.arange(60_000, dtype=torch.float32).reshape(-1, 1)
    shared = {f"layer{i}.{name}_l0": big[:4 * (i + 1)] for i in range(40)
              for name in ("weight_ih", "weight_hh")}
    torch.save(shared, tmp_path / "shared.pt")
    with pytest.raises(AmbiguousSourceError, match="holds 40 RNNs"):
        rnnport.read(tmp_path / "shared.pt")
    assert rnnport.read(tmp_path / "shared.pt", prefix="layer0").spec.hidden_size == 1


def test_json_nested_past_the_recursion_limit_is_a_format_error(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    rnnport.write(MODEL, "keras", path=tmp_path / "m.keras")
    with zipfile.ZipFile(tmp_path / "m.keras") as old, \
            zipfile.ZipFile(tmp_path / "deep.keras", "w") as new:
        for info in old.infolist():
            new.writestr(info, deep if info.filename == "config.json" else old.read(info))
    np.savez(tmp_path / "deep.npz", rnnport=np.array(deep))
    with pytest.raises(FormatError, match="config.json: not valid JSON"):
        rnnport.read(tmp_path / "deep.keras")
    with pytest.raises(FormatError, match="is not rnnport's JSON header"):
        rnnport.read(tmp_path / "deep.npz")


def _external(folder: Path, location: str = "weights.bin") -> tuple[Path, Any]:
    """An ONNX model saved in ``folder`` with its weights in an external data file."""
    import onnx

    folder.mkdir(parents=True, exist_ok=True)
    model = rnnport.write(MODEL, "onnx")
    onnx.save_model(model, folder / "m.onnx", save_as_external_data=True,
                    all_tensors_to_one_file=True, location=location, size_threshold=0)
    return folder / "m.onnx", onnx.load(folder / "m.onnx", load_external_data=False)


def _relocate(path: Path, proto: Any, **entries: str) -> None:
    """Point every external tensor of ``proto`` at other ``entries`` and save it at ``path``."""
    for tensor in proto.graph.initializer:
        for entry in tensor.external_data:
            if entry.key in entries:
                entry.value = entries[entry.key]
    path.write_bytes(proto.SerializeToString())


def test_onnx_external_data_is_read_from_the_models_folder_only(tmp_path: Path) -> None:
    path, proto = _external(tmp_path / "model")
    assert rnnport.read(path) == MODEL
    with pytest.raises(UnsupportedFeatureError, match="given as an object, not a path"):
        rnnport.read(proto)
    outside = tmp_path / "secret.bin"
    outside.write_bytes((tmp_path / "model" / "weights.bin").read_bytes())
    (tmp_path / "model" / "link.bin").symlink_to(outside)
    for location, message in (("../secret.bin", "without '..'"),
                              (str(outside), "without '..'"),
                              ("link.bin", "'link.bin' leads out of"),
                              ("missing.bin", "missing.bin: no such file in .*; copy the file")):
        _relocate(path, proto, location=location)
        with pytest.raises(FormatError, match=message):
            rnnport.read(path)
    _relocate(path, proto, location="weights.bin", offset="1000000")
    with pytest.raises(FormatError, match="asks for bytes 1000000 to"):
        rnnport.read(path)
    _relocate(path, proto, location="weights.bin", offset="0", length="7")
    with pytest.raises(FormatError, match="external data is 7 bytes long"):
        rnnport.read(path)


READ_EVERY_FORMAT = """
import sys, socket
from pathlib import Path
events = []
def hook(event, args):
    if event.startswith(("socket.", "urllib.", "http.")) or event == "ftplib.connect":
        events.append(event)
sys.addaudithook(hook)
import rnnport
for path in sys.argv[1:]:
    rnnport.read(path)
print(sorted(set(events)))
"""


def test_reading_every_file_format_opens_no_socket(tmp_path: Path) -> None:
    paths = []
    for name, fmt in (("m.npz", "npz"), ("m.keras", "keras"), ("m.weights.h5", "keras"),
                      ("m.onnx", "onnx"), ("m.pt", "torch"), ("m.safetensors", "torch"),
                      ("m.ckpt", "tf1")):
        rnnport.write(MODEL, fmt, path=tmp_path / name)
        paths.append(str(tmp_path / name))
    done = subprocess.run([sys.executable, "-c", READ_EVERY_FORMAT, *paths],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize(("fmt", "name"), [("npz", "m.npz"), ("tf1", "m.ckpt"),
                                           ("keras", "m.keras"), ("torch", "m.pt")])
def test_write_refuses_to_replace_a_file_unless_told(tmp_path: Path, fmt: str, name: str) -> None:
    first = rnnport.write(MODEL, fmt, path=tmp_path / name)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    other = RNN.random(MODEL.spec, seed=6)
    with pytest.raises(FormatError, match=r"exists; pass overwrite=True to replace it\. "
                                          "Nothing was written"):
        rnnport.write(other, fmt, path=tmp_path / name)
    with pytest.raises(FormatError, match=r"exists; pass overwrite=True"):
        rnnport.convert(other, fmt, path=tmp_path / name)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files
    rnnport.write(other, fmt, path=tmp_path / name, overwrite=True)
    assert rnnport.read(tmp_path / "m.ckpt" if fmt == "tf1" else tmp_path / name) == \
        rnnport.read(rnnport.write(other, fmt), fmt) != rnnport.read(first, fmt)


def test_convert_never_writes_over_its_source(tmp_path: Path) -> None:
    rnnport.write(MODEL, "npz", path=tmp_path / "m.npz")
    rnnport.write(MODEL, "tf1", path=tmp_path / "m.ckpt")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FormatError, match="is the input file; rnnport never writes over"):
        rnnport.convert(tmp_path / "m.npz", "npz", path=tmp_path / "m.npz", overwrite=True)
    with pytest.raises(FormatError, match="is the input file"):
        rnnport.convert(tmp_path / "m.ckpt", "tf1", path=tmp_path / "m.ckpt", overwrite=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_checkpoint_named_like_a_pattern_is_still_protected(tmp_path: Path) -> None:
    """``[1]`` in a prefix is a name, not a glob class: its data shard is the input."""
    rnnport.write(MODEL, "tf1", path=tmp_path / "m[1].ckpt")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FormatError, match="is the input file"):
        rnnport.convert(tmp_path / "m[1].ckpt", "onnx", overwrite=True,
                        path=tmp_path / "m[1].ckpt.data-00000-of-00001")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def _fake_child(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "child.py"
    script.write_text(body)
    return script


@pytest.mark.parametrize(("body", "message"), [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", r"crashed \(SIGSEGV\)"),
    ("import time\ntime.sleep(60)\n", "did not finish reading the file within 1 s"),
    ("import sys\nsys.stdout.buffer.write(b'garbage, not an answer')\n", "answer is malformed"),
    ("raise SystemExit('boom')\n", r"failed \(boom\)"),
])
def test_an_hdf5_file_that_breaks_the_library_is_only_a_format_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, message: str) -> None:
    from rnnport.io import hdf5

    rnnport.write(MODEL, "keras", path=tmp_path / "m.weights.h5")
    monkeypatch.setattr(hdf5, "CHILD", _fake_child(tmp_path, body))
    with rnnport.limits(seconds=1), pytest.raises(FormatError, match=message):
        rnnport.read(tmp_path / "m.weights.h5")


def test_the_hdf5_child_refuses_datasets_larger_than_the_file(tmp_path: Path) -> None:
    import h5py

    with h5py.File(tmp_path / "sparse.weights.h5", "w") as h5:
        # Chunked, never written: a few hundred bytes on disk that read as 4 GB of fill.
        h5.create_dataset("layers/lstm/cell/vars/0", shape=(2**15, 2**15), dtype="f4",
                          chunks=(64, 64))
    with pytest.raises(FormatError, match=r"declares 4,294,967,296 bytes, more than the file "
                                          r"can hold"):
        rnnport.read(tmp_path / "sparse.weights.h5")


def test_errors_from_every_reader_are_rnnport_errors(tmp_path: Path) -> None:
    """One representative damage per file kind (tools/fuzz.py tries thousands)."""
    for name, fmt in (("m.npz", "npz"), ("m.keras", "keras"), ("m.weights.h5", "keras"),
                      ("m.onnx", "onnx"), ("m.pt", "torch"), ("m.safetensors", "torch")):
        rnnport.write(MODEL, fmt, path=tmp_path / name)
        data = (tmp_path / name).read_bytes()
        damaged = tmp_path / f"bad-{name}"
        damaged.write_bytes(data[:40] + bytes(reversed(data[40:200])) + data[200:])
        with pytest.raises(RnnportError):
            rnnport.read(damaged, fmt)


def test_a_checkpoint_file_cannot_send_the_read_elsewhere(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    rnnport.write(MODEL, "tf1", path=tmp_path / "elsewhere" / "w.ckpt")
    folder = tmp_path / "folder"
    folder.mkdir()
    for named in (str(tmp_path / "elsewhere" / "w.ckpt"), "../elsewhere/w.ckpt"):
        (folder / "checkpoint").write_text(f'model_checkpoint_path: "{named}"\n')
        with pytest.raises(FormatError, match=r"folder/w\.ckpt"):  # looked for here only
            rnnport.read(folder)
    rnnport.write(MODEL, "tf1", path=folder / "w.ckpt")  # the same name, in the folder: read
    assert rnnport.read(folder) == rnnport.read(tmp_path / "elsewhere" / "w.ckpt")


def test_the_hdf5_child_loads_no_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnport.io import hdf5

    recorded = tmp_path / "environment.json"
    child = _fake_child(tmp_path, "import json, os, sys\n"
                        f"open({str(recorded)!r}, 'w').write(json.dumps(dict(os.environ)))\n")
    monkeypatch.setattr(hdf5, "CHILD", child)
    monkeypatch.setenv("HDF5_PLUGIN_PATH", str(tmp_path))
    rnnport.write(MODEL, "keras", path=tmp_path / "m.weights.h5")
    with pytest.raises(FormatError):
        rnnport.read(tmp_path / "m.weights.h5")
    environment = json.loads(recorded.read_text())
    assert "HDF5_PLUGIN_PATH" not in environment
    assert environment["HDF5_PLUGIN_PRELOAD"] == "::"


@pytest.mark.parametrize(("header", "message"), [
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (-4, -4), }", "non-negative sizes"),
    ("{'descr': '|S0', 'fortran_order': False, 'shape': (3,), }", "not a plain numeric"),
    ("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "not a plain"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 1" + "0" * 30 + "), }",
     "follow it"),
    ("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", "not a readable .npy"),
])
def test_odd_npy_headers_are_rnnport_errors(tmp_path: Path, header: str, message: str) -> None:
    raw = header.encode()
    raw += b" " * (-(len(raw) + 11) % 64) + b"\n"
    data = b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + bytes(64)
    with zipfile.ZipFile(tmp_path / "odd.npz", "w") as archive:
        archive.writestr("rnnport.npy", data)
    with pytest.raises(RnnportError, match=message):
        rnnport.read(tmp_path / "odd.npz")


def test_an_archive_holding_a_name_twice_is_refused(tmp_path: Path) -> None:
    rnnport.write(MODEL, "npz", path=tmp_path / "m.npz")
    with zipfile.ZipFile(tmp_path / "m.npz") as archive:
        first = archive.namelist()[0]
        data = archive.read(first)
    with pytest.warns(UserWarning, match="Duplicate name"):
        _with_member(tmp_path / "m.npz", tmp_path / "twice.npz", first, data)
    with pytest.raises(FormatError, match="more than once"):
        rnnport.read(tmp_path / "twice.npz")


def test_inputs_are_protected_however_they_are_named(tmp_path: Path) -> None:
    rnnport.write(MODEL, "tf1", path=tmp_path / "w.pt")  # a checkpoint whose prefix ends in .pt
    rnnport.write(MODEL, "torch", path=tmp_path / "a.pt")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FormatError, match="is the input file"):
        rnnport.convert(tmp_path / "w.pt", "tf1", fmt="tf1", path=tmp_path / "w.pt",
                        overwrite=True)
    with pytest.raises(FormatError, match="is the input file"):
        rnnport.convert([tmp_path / "a.pt"], "torch", fmt="torch", path=tmp_path / "a.pt",
                        overwrite=True)
    (tmp_path / "link.npz").symlink_to(tmp_path / "missing.npz")  # dangling: still there
    with pytest.raises(FormatError, match="exists; pass overwrite=True"):
        rnnport.write(MODEL, "npz", path=tmp_path / "link.npz")
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.name != "link.npz"} == before


@pytest.mark.parametrize("method", [zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA])
def test_a_zip_member_in_another_codec_is_refused_before_it_expands(tmp_path: Path,
                                                                    method: int) -> None:
    """A small .npz whose member is bzip2 or lzma: refused by its method, whatever its
    declared size, before a byte is decompressed."""
    import rnnport

    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        archive.writestr("x.npy", b"\0" * 1_000_000)
    with pytest.raises(rnnport.FormatError, match="compressed with zip method"):
        rnnport.read(path, "npz")


def test_the_network_a_file_describes_is_bounded_by_the_file_size(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every format shares one bound: the parameters read from a file may take at most what
    the expansion limit allows for its size (a compressed archive of zeros claiming a large
    network is refused, and says how to read it anyway). An archive's members are charged
    before any is read; without that check, the shared bound still refuses the network."""
    spec = rnnport.Spec("lstm", 256, 512, num_layers=4)
    zeros = rnnport.RNN(spec, [[{name: np.zeros(shape, np.float32) for name, shape
                                 in spec.param_shapes(layer).items()}]
                                  for layer in range(spec.num_layers)])
    arrays = rnnport.write(zeros, "npz")
    np.savez_compressed(tmp_path / "zeros.npz", **arrays)
    size = (tmp_path / "zeros.npz").stat().st_size
    assert size * 100 < zeros.num_params() * 4  # deflate shrinks zeros a thousandfold
    with pytest.raises(rnnport.LimitError, match=r"zeros.npz: its 17 member\(s\) inflate to "):
        rnnport.read(tmp_path / "zeros.npz")
    with monkeypatch.context() as patched:
        patched.setattr("rnnport.formats.npz.check_sizes", lambda *args: None)
        with pytest.raises(rnnport.LimitError, match="the network it describes has") as error:
            rnnport.read(tmp_path / "zeros.npz")
    assert error.value.limit == "expansion"
    with rnnport.limits(expansion=64):
        assert rnnport.read(tmp_path / "zeros.npz") == zeros


def _suggested(error: BaseException) -> float:
    found = re.search(r"rnnport\.limits\(expansion=([0-9.e+]+)\)", str(error))
    assert found, str(error)
    return float(found[1])


@pytest.mark.parametrize("fmt", ["keras", "npz"])
def test_the_value_a_refusal_suggests_allows_the_file(tmp_path: Path, fmt: str) -> None:
    """A deflated archive of zeros claiming a large network: refused, and the limit the
    message suggests reads it at the first retry."""
    zeros = rnnport.RNN.random(rnnport.Spec("lstm", 8, 1500), scale=0.0)
    plain = tmp_path / ("plain.keras" if fmt == "keras" else "plain.npz")
    rnnport.write(zeros, fmt, path=plain)
    packed = tmp_path / ("packed.keras" if fmt == "keras" else "packed.npz")
    with zipfile.ZipFile(plain) as source, \
            zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
    with pytest.raises(rnnport.LimitError) as error:
        rnnport.read(packed)
    with rnnport.limits(expansion=_suggested(error.value)):
        assert rnnport.read(packed) == rnnport.read(plain)


def test_a_limit_raised_beyond_any_size_allows_everything(tmp_path: Path) -> None:
    rnnport.write(MODEL, "npz", path=tmp_path / "m.npz")
    with rnnport.limits(expansion=1e308, work=1e308, elements=1e308, seconds=1e308):
        assert rnnport.read(tmp_path / "m.npz") == MODEL


@pytest.mark.parametrize("name", ["fifo.tflite", "fifo.msgpack", "fifo.npz", "fifo.onnx"])
def test_a_fifo_named_like_a_model_is_refused_without_blocking(tmp_path: Path,
                                                               name: str) -> None:
    os.mkfifo(tmp_path / name)
    done = subprocess.run([sys.executable, "-c", "import sys, rnnport\n"
                           "try:\n    rnnport.read(sys.argv[1])\n"
                           "except rnnport.RnnportError as error:\n    print('refused', error)\n",
                           str(tmp_path / name)], capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("refused"), done.stdout + done.stderr
