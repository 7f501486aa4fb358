"""Pickles and PyTorch files built to run code, exhaust memory or time, or read outside
their data: every one is an rnnport error, and nothing runs (rnnport.io.pickled)."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport.errors import FormatError, LimitError, RnnportError
from rnnport.io.pickled import Global, Opaque, Unhashed, unpickle


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


def _torch_zip(path: Path, data: bytes, storages: dict[str, bytes] | None = None,
               method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", method) as archive:
        archive.writestr("archive/data.pkl", data)
        for key, raw in (storages or {}).items():
            archive.writestr(f"archive/data/{key}", raw)
        archive.writestr("archive/version", "3\n")
    return path


def _tensor(key: str, numel: int, offset: int, size: tuple[int, ...],
            stride: tuple[int, ...]) -> bytes:
    """``torch._utils._rebuild_tensor_v2`` of a float32 storage, as torch.save pickles it."""
    def ints(values: tuple[int, ...]) -> bytes:
        return b"(" + b"".join(b"J" + struct.pack("<i", value) for value in values) + b"t"
    return (b"ctorch._utils\n_rebuild_tensor_v2\n((" + _text("storage") + b"ctorch\nFloatStorage\n"
            + _text(key) + _text("cpu") + b"J" + struct.pack("<i", numel) + b"tQ"
            + b"J" + struct.pack("<i", offset) + ints(size) + ints(stride)
            + b"\x89ccollections\nOrderedDict\n)Rt" + b"R")


def _state(*items: tuple[str, bytes]) -> bytes:
    return b"\x80\x02}(" + b"".join(_text(name) + value for name, value in items) + b"u."


MARK = "rnnport-hostile-marker"

# Each pickle would run code if Python's unpickler loaded it.
RUNNING = {
    "GLOBAL+REDUCE": f"cos\nsystem\n(S'touch {MARK}'\ntR.".encode(),
    "STACK_GLOBAL": b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c" + bytes([6 + len(MARK)])
                    + f"touch {MARK}".encode() + b"\x85R.",
    "INST": f"(S'touch {MARK}'\nios\nsystem\n.".encode(),
    "OBJ": f"(cos\nsystem\nS'touch {MARK}'\no.".encode(),
    "NEWOBJ": b"\x80\x02cbuiltins\nexec\n(S'open(\"" + MARK.encode() + b"\", \"w\")'\nt\x81.",
    "NEWOBJ_EX": b"\x80\x04cbuiltins\nexec\n(S'open(\"" + MARK.encode() + b"\", \"w\")'\nt}\x92.",
    "BUILD": b"\x80\x02cbuiltins\nobject\n)R}S'__setstate__'\ncbuiltins\nexec\nsb.",
    "import": b"\x80\x02cthis\nd\n.",
    "getattr chain": b"\x80\x02cbuiltins\ngetattr\ncos\nsystem\nS'__call__'\n\x86R"
                     b"(S'touch " + MARK.encode() + b"'\ntR.",
}


@pytest.mark.parametrize("name", RUNNING)
def test_pickles_that_would_run_code_run_nothing(tmp_path: Path, name: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = _torch_zip(tmp_path / "evil.pt", RUNNING[name])
    rnnport.formats.sniff(path)  # the format modules themselves, imported once
    before = set(sys.modules)
    with pytest.raises(FormatError, match="no recurrent weights found, and the file pickles "
                                          "Python objects rnnport does not build"):
        rnnport.read(path)
    assert not (tmp_path / MARK).exists()
    assert {module for module in set(sys.modules) - before
            if not module.startswith(("rnnport", "encodings"))} == set()
    value, _ = unpickle(RUNNING[name], "test")
    assert isinstance(value, (Opaque, Global))


@pytest.mark.parametrize(("data", "what"), [
    (b"\x80\x02\x82\x01.", "extension code"),
    (b"\x80\x02\x84\x01\x00\x00\x00.", "extension code"),
    (b"\x80\x05\x97.", "out-of-band buffer"),
    (b"\x80\x02X\x03\x00\x00\x00abcQ.", "persistent id"),
    (b"\x80\x06N.", "pickle protocol 6"),
    (b"\x80\x02X\xff\xff\xff\xffabc.", "declares 4,294,967,295 bytes"),
    (b"\x80\x02\x8b\x00\x00\x00\x10ab.", "declares 268,435,456 bytes"),
    (b"I" + b"9" * 100_000 + b"\n.", "not a whole number"),
    (b"\x80\x02h\x05.", "memo entry 5 is used before it is stored"),
    (b"\x80\x02N", "ends before its STOP"),
    (b"\x80\x02Nt.", "since a MARK, and there is none"),
    (b"\x80\x02N(NNu.", r"SETITEM\(S\) on a NoneType"),
    (b"\x80\x02\xff.", "no pickle opcode"),
    (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n(NK\x00))\x89NtR.", "not over a storage"),
])
def test_damaged_and_hostile_opcodes_are_format_errors(tmp_path: Path, data: bytes,
                                                        what: str) -> None:
    with pytest.raises(FormatError, match=what):
        rnnport.read(_torch_zip(tmp_path / "bad.pt", data))


def test_deep_nesting_costs_no_stack_and_shared_references_cost_nothing(tmp_path: Path) -> None:
    depth = 200_000  # one byte an opcode: lists inside lists, far past Python's recursion limit
    deep = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    with pytest.raises(FormatError, match="no RNN weights found"):
        rnnport.read(_torch_zip(tmp_path / "deep.pt", deep))
    # One dict referred to 100,000 times: built once, walked once.
    shared = b"\x80\x02]}q\x00" + b"a" + b"h\x00a" * 100_000 + b"."
    with pytest.raises(FormatError, match="no RNN weights found"):
        rnnport.read(_torch_zip(tmp_path / "shared.pt", shared))


def test_keys_that_could_collide_are_kept_apart_unhashed() -> None:
    prime = 2**61 - 1  # every multiple hashes to 0
    data = b"\x80\x02}(" + b"".join(b"\x8a\x0a" + (k * prime).to_bytes(10, "little", signed=True)
                                    + b"N" for k in range(1, 2001)) + b"u."
    value, _ = unpickle(data, "test")
    assert len(value) == 2000 and all(isinstance(key, Unhashed) for key in value)
    value, _ = unpickle(b"\x80\x02}(K\x07NX\x01\x00\x00\x00aNG?\xf0\x00\x00\x00\x00\x00\x00Nu.",
                        "test")
    assert [type(key) for key in value] == [int, str, Unhashed]  # a float key is boxed
    # Tuples hash predictably (pairs can be solved for any hash): every tuple key is boxed.
    value, _ = unpickle(b"\x80\x02}(K\x01K\x02\x86NK\x03K\x04\x86Nu.", "test")
    assert all(isinstance(key, Unhashed) for key in value) and len(value) == 2


def test_the_work_limit_stops_a_pickle_that_expands_from_a_small_file(tmp_path: Path) -> None:
    data = b"\x80\x02" + b"N0" * 3_000_000 + b"N."  # 6 MB of opcodes, a few KB deflated
    path = _torch_zip(tmp_path / "busy.pt", data, method=zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 50_000
    with pytest.raises(LimitError, match="the pickle takes more than") as error:
        rnnport.read(path)
    assert error.value.limit == "work"


def test_storages_that_lie_are_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    weights = np.arange(16, dtype=np.float32).tobytes()
    big = _state(("weight_ih_l0", _tensor("0", 10**9, 0, (4, 4), (4, 1))),
                 ("weight_hh_l0", _tensor("1", 4, 0, (4, 1), (1, 1))))
    with pytest.raises(FormatError, match=r"storage '0' declares 1,000,000,000 float32 elements"):
        rnnport.read(_torch_zip(tmp_path / "big.pt", big, {"0": weights, "1": weights}))
    outside = _state(("weight_ih_l0", _tensor("0", 16, 10, (4, 4), (4, 1))),
                     ("weight_hh_l0", _tensor("1", 16, 0, (4, 1), (1, 1))))
    with pytest.raises(FormatError, match="reads past its storage's 16 elements"):
        rnnport.read(_torch_zip(tmp_path / "outside.pt", outside, {"0": weights, "1": weights}))
    missing = _state(("weight_ih_l0", _tensor("7", 16, 0, (4, 4), (4, 1))))
    with pytest.raises(FormatError, match="has no member 'archive/data/7'"):
        rnnport.read(_torch_zip(tmp_path / "missing.pt", missing, {"0": weights}))


def test_a_stride_of_zero_cannot_build_past_the_expansion_limit(tmp_path: Path) -> None:
    one = np.ones(1, np.float32).tobytes()
    repeated = _state(("weight_ih_l0", _tensor("0", 1, 0, (40_000, 40_000), (0, 0))),
                      ("weight_hh_l0", _tensor("0", 1, 0, (40_000, 10_000), (0, 0))))
    with pytest.raises(LimitError, match="would take 6,400,000,000 bytes") as error:
        rnnport.read(_torch_zip(tmp_path / "repeat.pt", repeated, {"0": one}))
    assert error.value.limit == "expansion"


def test_damaged_legacy_files_are_format_errors(tmp_path: Path) -> None:
    golden = Path(__file__).parent / "golden" / "torch_files" / "legacy_pt" / "old.pt"
    data = golden.read_bytes()
    for cut in (20, len(data) // 2, len(data) - 3):
        (tmp_path / "cut.pt").write_bytes(data[:cut])
        with pytest.raises(RnnportError, match="truncated|damaged|ends before"):
            rnnport.read(tmp_path / "cut.pt", fmt="torch")
    # The first storage's recorded element count, changed: refused before reading it.
    keys_end = data.index(b"]q\x00") if b"]q\x00" in data else None
    assert keys_end is not None
    start = data.index(b".", keys_end) + 1
    changed = data[:start] + struct.pack("<q", 10**12) + data[start + 8:]
    (tmp_path / "count.pt").write_bytes(changed)
    with pytest.raises(FormatError, match="is recorded with 1,000,000,000,000 elements"):
        rnnport.read(tmp_path / "count.pt")


def _safetensors(path: Path, header: object, data: bytes = b"") -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)
    return path


@pytest.mark.parametrize(("header", "data", "what"), [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12), "share bytes"),
    ({"a": {"dtype": "F32", "shape": [10**9], "data_offsets": [0, 4 * 10**9]}}, bytes(8),
     "in 8 bytes of data"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(8), "bytes \\[0, 4\\)"),
    ({"a": {"dtype": "XX", "shape": [2], "data_offsets": [0, 8]}}, bytes(8), "dtype 'XX'"),
    ({"a": [1, 2]}, b"", "expected dtype, shape and data_offsets"),
])
def test_hostile_safetensors_headers_are_format_errors(tmp_path: Path, header: object,
                                                        data: bytes, what: str) -> None:
    with pytest.raises(FormatError, match=what):
        rnnport.read(_safetensors(tmp_path / "bad.safetensors", header, data))


def test_a_deeply_nested_safetensors_header_is_a_format_error(tmp_path: Path) -> None:
    raw = b"{" + b'"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    (tmp_path / "deep.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    with pytest.raises(FormatError, match="header"):
        rnnport.read(tmp_path / "deep.safetensors")


def test_reading_a_hostile_file_imports_nothing_it_names(tmp_path: Path) -> None:
    path = _torch_zip(tmp_path / "imports.pt", b"\x80\x02cantigravity\nx\n)R.")
    code = ("import sys, rnnport\n"
            f"try:\n    rnnport.read({str(path)!r})\nexcept rnnport.errors.FormatError:\n"
            "    pass\nprint('antigravity' in sys.modules, 'webbrowser' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stdout.strip() == "False False"


BIG = b"\x8b" + struct.pack("<i", 2000) + b"\x01" * 2000  # LONG4: an integer of 4,800 digits


def _dag(levels: int) -> bytes:
    """``L_k = (L_{k-1}, L_{k-1})`` built through the memo: seven bytes a level, a value
    whose ``str`` would be 2^levels parts long."""
    out = b")q\x000"
    for level in range(1, levels + 1):
        out += b"h%ch%c\x86q%c0" % (level - 1, level - 1, level)
    return out + b"h" + bytes([levels])


@pytest.mark.parametrize(("data", "error"), [
    # a key (and a storage key, a size) whose str() would never end
    (b"\x80\x02}(" + _dag(40) + b"Nu.", "no RNN weights found"),
    (_state(("weight_ih_l0", b"ctorch._utils\n_rebuild_tensor_v2\n((" + _text("storage")
             + b"ctorch\nFloatStorage\n" + _dag(40) + _text("cpu") + b"K\x01tQK\x00)\x29\x89}tR")),
     "storage .* of 1 elements"),
    # integers too long for str(), as a device, a size and an offset
    (b"\x80\x02}(" + _text("a") + b"ctorch\ndevice\n" + BIG + b"\x85Ru.", "torch.device called"),
    (_state(("weight_ih_l0", _tensor("0", 4, 0, (4,), (1,)).replace(b"J\x04\x00\x00\x00tQ",
                                                                    BIG + b"tQ", 1))),
     "of <an integer of"),
    # text a builder cannot encode
    (b"\x80\x02}(" + _text("a") + b"c_codecs\nencode\n" + _text("\u1234") + _text("latin1")
     + b"\x86Ru.", "_codecs.encode called"),
    # a tensor subclass rebuilt by itself, nested 5,000 deep
    (_state(("weight_ih_l0", b"ctorch._tensor\n_rebuild_from_type_v2\nq\x000)"
             + b"q\x010h\x00Nh\x01\x87" * 5000 + b"q\x010h\x00h\x01R")), "never runs pickled code"),
    # strides and sizes whose bytes overflow
    (_state(("weight_ih_l0", _tensor("0", 4, 0, (4, 1), (1, 1)).replace(
        b"(J\x01\x00\x00\x00J\x01\x00\x00\x00t", b"(J\x01\x00\x00\x00\x8a\x08"
        + struct.pack("<q", 2**61) + b"t"))), "a tensor's stride is"),
    # a NumPy dtype code that is a tuple a million deep (hashing it crashed Python)
    (_state(("weight_ih_l0", b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(K\x00tC"
             b"\x01bt\x81(K\x01(K\x01tcnumpy\ndtype\n()" + b"\x85" * 1_000_000
             + b"K\x00K\x01tR\x89C\x04\x00\x00\x00\x00tb")), "expansion"),
])
def test_values_built_to_break_messages_hashing_or_builders_are_rnnport_errors(
        tmp_path: Path, data: bytes, error: str) -> None:
    path = _torch_zip(tmp_path / "bad.pt", data, {"0": bytes(16)})
    code = ("import sys, rnnport\n"
            f"try:\n    rnnport.read({str(path)!r})\n"
            "except rnnport.RnnportError as error:\n    print(str(error)[:3000])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert re.search(error, done.stdout), done.stdout


def test_builders_that_copy_are_charged_for_what_they_copy(tmp_path: Path) -> None:
    # torch.Size over one 20,000-item list, called 4,000 times through the memo: 44 KB that
    # would build 80 million items.
    data = (b"\x80\x02]q\x02ctorch\nSize\nq\x000]q\x03(" + b"N" * 20_000 + b"e\x85q\x010"
            + b"h\x00h\x01Ra" * 4000 + b".")
    with pytest.raises(LimitError, match="the pickle takes more than"):
        rnnport.read(_torch_zip(tmp_path / "copies.pt", data))
    # 400,000 empty lists from 800 KB: 50 bytes of objects each
    with pytest.raises(LimitError, match="builds more than") as error:
        rnnport.read(_torch_zip(tmp_path / "lists.pt", b"\x80\x02]" + b"]a" * 400_000 + b"."))
    assert error.value.limit == "expansion"


def test_one_pickled_numpy_array_used_everywhere_is_charged_each_time(tmp_path: Path) -> None:
    hidden = 128
    array = (b"cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n(K\x00tC\x01bt\x81"
             b"(K\x01(M" + struct.pack("<H", 4 * hidden) + b"M" + struct.pack("<H", hidden)
             + b"tcnumpy\ndtype\n(X\x02\x00\x00\x00f4K\x00K\x01tR(K\x03X\x01\x00\x00\x00<NNNJ"
             b"\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb\x89B" + struct.pack("<I", 16 * hidden**2)
             + bytes(16 * hidden**2) + b"tbq\x07")
    layers = b"".join(_text(f"{name}_l{layer}") + b"h\x07" for layer in range(1, 300)
                      for name in ("weight_ih", "weight_hh"))
    data = b"\x80\x02}(" + _text("weight_ih_l0") + array + _text("weight_hh_l0") + b"h\x07" + \
        layers + b"u."
    path = _torch_zip(tmp_path / "numpy.pt", data)
    assert path.stat().st_size < 2_000_000
    with pytest.raises(LimitError, match="NumPy array") as error:
        rnnport.read(path)
    assert error.value.limit == "expansion"


def test_pt2_json_of_the_wrong_types_is_a_format_error(tmp_path: Path) -> None:
    golden = Path(__file__).parent / "golden" / "torch_files" / "pt2_lstm" / "model.pt2"
    with zipfile.ZipFile(golden) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    program = next(name for name in members if name.endswith("models/model.json"))
    weights = next(name for name in members if name.endswith("model_weights_config.json"))
    for member, change, refused in [
            (program, lambda doc: doc["graph_module"]["graph"]["nodes"][2]
             .update(target=["torch.ops.aten.lstm.input"]), False),  # no node: read by names
            (program, lambda doc: doc["graph_module"]["graph"]["nodes"][2].update(inputs=5),
             True),
            (weights, lambda doc: next(iter(doc["config"].values()))["tensor_meta"]
             .update(dtype=[7]), True)]:
        document = json.loads(members[member])
        change(document)
        with zipfile.ZipFile(tmp_path / "bad.pt2", "w") as archive:
            for name, raw in members.items():
                archive.writestr(name, json.dumps(document) if name == member else raw)
        if refused:
            with pytest.raises(FormatError):
                rnnport.read(tmp_path / "bad.pt2")
        else:
            assert rnnport.read(tmp_path / "bad.pt2").spec.num_layers == 2
