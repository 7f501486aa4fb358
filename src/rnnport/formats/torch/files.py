"""PyTorch's files, told apart by their bytes and read without PyTorch.

=====================  ===========================================================
what the bytes say     what it is
=====================  ===========================================================
a zip holding          ``torch.save`` since PyTorch 1.6 (any name: ``.pt``, ``.pth``,
``<root>/data.pkl``    ``.bin``, ``.ckpt``, ``.tar``, none). ``data.pkl`` is a pickle
                       whose tensors name their storages by persistent id
                       ``('storage', torch.FloatStorage, key, location, numel)``;
                       storage ``key`` is the member ``<root>/data/<key>``, raw
                       little-endian numbers (``<root>/byteorder`` may say ``big``).
                       With ``<root>/code/`` or ``constants.pkl`` it is a TorchScript
                       archive: a module as code, refused.
a zip holding          ``torch.export.save`` (``.pt2``): ``archive_format`` is ``pt2``;
``archive_format``     see :mod:`.pt2`.
pickles starting with  ``torch.save`` before PyTorch 1.6 (or with
the magic number       ``_use_new_zipfile_serialization=False``): four pickles — the
``0x1950a86a20f9469c`` magic number, the protocol version 1001, the system info (byte
``fc6c``               order), the object, whose storages are named
                       ``('storage', type, key, location, numel, view)`` — then the list
                       of storage keys, then each storage in that order: its element
                       count (int64) and its little-endian bytes.
8 bytes ``n``, then    safetensors: a JSON header of ``n`` bytes, ``{name: {"dtype",
``{``                  "shape", "data_offsets": [begin, end]}, "__metadata__": {…}}``,
                       then the data; offsets count from the end of the header.
=====================  ===========================================================

Every pickle is run by :mod:`rnnport.io.pickled` (nothing imported or called, globals
other than PyTorch's tensor builders and the containers kept as names), and every tensor
is a :class:`~.tensors.TensorRef`, read only when a network needs it. Declared sizes are
checked against the file before anything is allocated: a storage larger than its member or
record, a safetensors range outside the data or overlapping another one, a header longer
than the file.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import mmap
import os
import struct
import tarfile
import zipfile
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...errors import FormatError, UnsupportedFeatureError
from ...io import jsontext
from ...io.archive import open_zip, zip_names
from ...io.inputs import checked, open_file
from ...io.pickled import preview, unpickle
from .pt2 import read_pt2
from .tensors import (
    DTYPES,
    DType,
    Ledger,
    Loaded,
    Storage,
    TensorRef,
    builders,
    pickle_state_dict,
    read_zip_tree,
    storage_id,
    zip_root,
)

__all__ = ["KINDS", "kind_of", "opened", "other_zip", "safetensors_bytes", "write_zip"]

# Legacy torch.save's first pickle: the magic number 0x1950a86a20f9469cfc6c, as LONG1
# (protocol 2, the default) or as text (protocols 0 and 1).
MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
LEGACY_MAGIC = (b"\x8a\x0a" + MAGIC_NUMBER.to_bytes(10, "little"), b"L%d" % MAGIC_NUMBER)
LEGACY_PROTOCOL = 1001
SAFETENSORS_HEADER_MOST = 100 << 20  # the safetensors library's own limit
SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                      "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8",
                      "U8": "uint8", "U16": "uint16", "U32": "uint32", "U64": "uint64",
                      "BOOL": "bool", "C64": "complex64", "F8_E4M3": "float8_e4m3fn",
                      "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu"}
KINDS = {"zip": "a torch.save file", "legacy": "a legacy torch.save file (before PyTorch 1.6)",
         "safetensors": "a safetensors file", "pt2": "a torch.export .pt2 archive",
         "torchscript": "a TorchScript archive (torch.jit.save)",
         "tar": "a torch.save tar archive (PyTorch 0.1–0.3)"}


def kind_of(path: str | os.PathLike[str]) -> str | None:
    """Which PyTorch file ``path`` is by its bytes (a key of :data:`KINDS`), or None. Only
    a regular file is opened (a FIFO or a device would block or never end)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as file:
            head = file.read(512)
            size = os.fstat(file.fileno()).st_size
    except OSError:
        return None
    if head.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        return _zip_kind(path)
    if any(magic in head[:32] for magic in LEGACY_MAGIC):
        return "legacy"
    if len(head) >= 9 and head[8:9] == b"{":
        length = struct.unpack("<Q", head[:8])[0]
        if 2 <= length <= size - 8:
            return "safetensors"
    if len(head) == 512 and head[257:262] == b"ustar" and _tar_kind(path):
        return "tar"
    return None


def _zip_kind(path: str | os.PathLike[str]) -> str | None:
    names = zip_names(path)
    if names is None:
        return None
    if any(name.rsplit("/", 1)[-1] == "archive_format" for name in names) or \
            any(name.endswith("serialized_exported_program.json") for name in names):
        return "pt2"
    if zip_root(names) is None:
        return None
    if any("/code/" in name or name.endswith("/constants.pkl") for name in names):
        return "torchscript"
    return "zip"


def other_zip(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a readable zip that is no PyTorch file (a ``.keras`` renamed)."""
    return bool(zip_names(path)) and _zip_kind(path) is None


def _tar_kind(path: str | os.PathLike[str]) -> bool:
    try:
        with tarfile.open(path, "r:") as archive:
            names = {member.name for member in itertools.islice(archive, 8)}
    except (tarfile.TarError, OSError, ValueError, EOFError, struct.error):
        return False
    return {"storages", "tensors", "pickle"} <= names or "sys_info" in names


@contextlib.contextmanager
def opened(path: str | os.PathLike[str], where: str | None = None) -> Iterator[Loaded]:
    """The PyTorch file at ``path``, told apart by its bytes, open while the block runs
    (its tensors read from the file when asked)."""
    where = os.fspath(path) if where is None else where
    path = checked(path, where)  # a regular file, recorded as read
    kind = kind_of(path)
    size = os.path.getsize(path)
    if kind is None:
        with open_file(path, where) as file:
            head = file.read(16)
        raise FormatError(
            f"{where}: not a PyTorch file; expected a torch.save zip (a member "
            "<name>/data.pkl), a legacy torch.save pickle (it starts with PyTorch's magic "
            "number), a safetensors file (an 8-byte header length, then JSON) or a "
            f".pt2 archive, and it starts with {head!r}. The file may be truncated or damaged, "
            "or of another format (pass fmt=).")
    if kind == "torchscript":
        raise UnsupportedFeatureError(
            f"{where}: a TorchScript archive (torch.jit.save), whose module is code that would "
            "have to run to be loaded; rnnport reads state_dicts and never runs a file's code. "
            "Where you trust the file, take its weights out once: "
            "torch.save(torch.jit.load(path).state_dict(), 'weights.pt'), and read that.")
    if kind == "tar":
        raise UnsupportedFeatureError(
            f"{where}: a torch.save tar archive, the format of PyTorch 0.1 to 0.3, which "
            "rnnport does not read. Where you trust the file, re-save it with any PyTorch "
            "that loads it: torch.save(torch.load(path, map_location='cpu', "
            "weights_only=False), 'weights.pt').")
    if kind == "zip":
        with open_zip(path, "PyTorch file", where) as archive:
            yield _read_zip(archive, where, size)
    elif kind == "legacy":
        with open_file(path, where) as file, _mapped(file, size) as data:
            yield _read_legacy(data, where, size)
    elif kind == "safetensors":
        with open_file(path, where) as file:
            yield _read_safetensors(file, where, size)
    else:
        with open_zip(path, ".pt2 archive", where) as archive:
            yield read_pt2(archive, where, size)


@contextlib.contextmanager
def _mapped(file: Any, size: int) -> Iterator[Any]:
    data = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    try:
        yield data
    finally:
        if isinstance(data, mmap.mmap):
            data.close()


# -- torch.save zips ----------------------------------------------------------------------


def _read_zip(archive: zipfile.ZipFile, where: str, size: int) -> Loaded:
    root = zip_root(archive.namelist())
    if root is None:  # kind_of saw one; the archive changed since
        raise FormatError(f"{where}: no data.pkl in the archive; not a torch.save file.")
    ledger = Ledger(where, size)
    return Loaded(read_zip_tree(archive, root, where, size, ledger), "zip", where, size)


# -- legacy torch.save ------------------------------------------------------------------------


def _read_legacy(data: Any, where: str, size: int) -> Loaded:
    ledger = Ledger(where, size)
    known = builders(where, ledger)
    magic, position = unpickle(data, f"{where}, magic number", size=size)
    if magic != MAGIC_NUMBER:
        raise FormatError(f"{where}: its first pickle is {preview(magic)}, not PyTorch's "
                          "magic number; the file is damaged.")
    protocol, position = unpickle(data, f"{where}, protocol", size=size, start=position)
    if protocol != LEGACY_PROTOCOL:
        raise FormatError(f"{where}: legacy protocol version {preview(protocol)}; expected "
                          f"{LEGACY_PROTOCOL}, the only one PyTorch wrote.")
    info, position = unpickle(data, f"{where}, system info", size=size, start=position)
    big_endian = isinstance(info, dict) and info.get("little_endian") is False
    roots: dict[str, tuple[DType, int]] = {}
    made: dict[str, Storage] = {}
    records: dict[str, int] = {}  # root key → the offset of its bytes, once found

    def load(key: str) -> Any:
        def read(need: int) -> bytes:
            return data[records[key]:records[key] + need]  # a copy: the map is closed after
        return read

    def persistent(pid: Any) -> Any:
        if isinstance(pid, tuple) and pid and pid[0] in ("module", b"module"):
            return None  # a whole module's source code, saved beside it: not data
        dtype, key, numel, view = storage_id(pid, where)
        if key not in roots:
            roots[key] = (dtype, numel)
        elif roots[key] != (dtype, numel):
            raise FormatError(f"{where}: storage {key!r} is named twice with different types "
                              "or sizes; the file is damaged.")
        if view is None:
            if key not in made:
                made[key] = Storage(key, dtype, numel, load(key), ledger,
                                    big_endian=big_endian)
            return made[key]
        if not (isinstance(view, tuple) and len(view) == 3 and isinstance(view[1], int)
                and isinstance(view[2], int) and 0 <= view[1] and 0 <= view[2]
                and view[1] + view[2] <= numel):
            raise FormatError(f"{where}: storage view {preview(view)} of {key!r} "
                              f"({numel:,} elements); expected (key, offset, size) inside it. "
                              "The file is damaged.")
        view_key = view[0] if isinstance(view[0], str) else preview(view[0])
        if view_key not in made:
            made[view_key] = Storage(view_key, dtype, view[2], load(key), ledger,
                                     byte_offset=view[1] * dtype.itemsize,
                                     big_endian=big_endian)
        return made[view_key]

    tree, position = unpickle(data, where, known=known, persistent=persistent, size=size,
                              start=position)
    keys, position = unpickle(data, f"{where}, storage list", size=size, start=position)
    if not isinstance(keys, list) or not all(
            isinstance(key, str) or (isinstance(key, int) and 0 <= key < 2**63) for key in keys):
        raise FormatError(f"{where}: the storage list is {type(keys).__name__}; expected a "
                          "list of keys. The file is damaged.")
    for key in map(str, keys):
        if key not in roots:
            raise FormatError(f"{where}: the storage list names {key!r}, which no tensor uses; "
                              "the file is damaged.")
        if position + 8 > size:
            break
        count = struct.unpack("<q", bytes(data[position:position + 8]))[0]
        if big_endian:
            count = struct.unpack(">q", bytes(data[position:position + 8]))[0]
        dtype, numel = roots[key]
        if count != numel or position + 8 + count * dtype.itemsize > size:
            raise FormatError(
                f"{where}: storage {key!r} is recorded with {count:,} elements at byte "
                f"{position + 8:,}; expected {numel:,} {dtype.name} elements inside the file's "
                f"{size:,} bytes. The file is truncated or damaged; nothing was read.")
        records[key] = position + 8
        position += 8 + count * dtype.itemsize
    missing = [key for key in roots if key not in records]
    if missing:
        raise FormatError(f"{where}: storages {', '.join(map(repr, missing[:3]))} are not in "
                          "the file; it is truncated or damaged.")
    return Loaded(tree, "legacy", where, size)


# -- safetensors ---------------------------------------------------------------------------


def _read_safetensors(file: Any, where: str, size: int) -> Loaded:
    length = struct.unpack("<Q", file.read(8))[0]
    if not 2 <= length <= min(size - 8, SAFETENSORS_HEADER_MOST):
        raise FormatError(f"{where}: a safetensors header of {length:,} bytes in a {size:,}-byte "
                          "file; the file is truncated or damaged.")
    raw = file.read(length)
    try:  # written by serde_json, which writes no NaN
        header = jsontext.loads(raw, where, size=size, max_bytes=SAFETENSORS_HEADER_MOST)
    except jsontext.JSONTextError as error:
        raise FormatError(f"{where}: the safetensors header is not JSON ({error.problem}); the "
                          "file is damaged.") from None
    if not isinstance(header, dict):
        raise FormatError(f"{where}: the safetensors header is a {type(header).__name__}; "
                          "expected a JSON object.")
    start, available = 8 + length, size - 8 - length
    ledger = Ledger(where, size)
    tree: dict[str, Any] = {}
    spans = []
    metadata = header.pop("__metadata__", None)
    for name, entry in header.items():
        spot = f"{where}, tensor {name!r}"
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{spot}: header entry {preview(entry)}; expected dtype, shape "
                              "and data_offsets.")
        dtype_name = SAFETENSORS_DTYPES.get(entry["dtype"]) if isinstance(entry["dtype"], str) \
            else None
        shape, offsets = entry["shape"], entry["data_offsets"]
        if dtype_name is None or not isinstance(shape, list) or len(shape) > 64 or not all(
                isinstance(dim, int) and not isinstance(dim, bool) and 0 <= dim < 2**62
                for dim in shape) or not isinstance(offsets, list) or len(offsets) != 2 or not all(
                isinstance(at, int) and not isinstance(at, bool) for at in offsets):
            raise FormatError(f"{spot}: dtype {preview(entry['dtype'])}, shape "
                              f"{preview(shape)}, data_offsets {preview(offsets)}; expected "
                              f"one of {', '.join(SAFETENSORS_DTYPES)}, whole sizes and "
                              "[begin, end].")
        dtype = DTYPES[dtype_name]
        begin, end = offsets
        count = math.prod(shape)
        if not 0 <= begin <= end <= available or end - begin != count * dtype.itemsize:
            raise FormatError(
                f"{spot}: bytes [{begin:,}, {end:,}) for {count:,} {dtype_name} elements "
                f"({count * dtype.itemsize:,} bytes) in {available:,} bytes of data; the file is "
                "truncated or damaged, or built to read outside its data.")
        spans.append((begin, end, name))

        def read(need: int, at: int = start + begin) -> bytes:
            file.seek(at)
            return file.read(need)

        strides = tuple(math.prod(shape[axis + 1:]) for axis in range(len(shape)))
        tree[name] = TensorRef(Storage(name, dtype, count, read, ledger), 0, tuple(shape),
                               strides, dtype)
    spans.sort()
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise FormatError(f"{where}: tensors {first!r} and {second!r} share bytes; a "
                              "safetensors file stores each tensor once. The file is damaged "
                              "or built to exhaust memory.")
    metadata = metadata if isinstance(metadata, dict) else {}
    for alias, stored in metadata.items():  # safetensors' save_model drops tied copies
        if isinstance(stored, str) and stored in tree and alias not in header:
            tree[alias] = tree[stored]
    return Loaded(tree, "safetensors", where, size, metadata=metadata)


# -- writing, without PyTorch -------------------------------------------------------------

ALIGNMENT = 64  # torch.save aligns each storage's bytes to 64 within the file
NUMPY_SAFETENSORS = {"float32": "F32", "float64": "F64", "float16": "F16"}


def write_zip(file: Any, state: Mapping[str, np.ndarray], root: str) -> None:
    """``state`` (name → float array) as ``torch.save`` writes a state_dict, into the open
    binary ``file``: a stored zip under ``root/`` with ``data.pkl``, ``byteorder``, one
    member per storage at a 64-byte boundary, and ``version``."""
    data, storages = pickle_state_dict(state)
    root = "".join(char if char.isalnum() or char in "._-" else "_" for char in root) or "archive"
    members = [("data.pkl", data), (".format_version", b"1"), (".storage_alignment", b"64"),
               ("byteorder", b"little"),
               *((f"data/{index}", array.tobytes()) for index, array in enumerate(storages)),
               ("version", b"3\n")]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members:
            info = zipfile.ZipInfo(f"{root}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            header = file.tell() + 30 + len(info.filename.encode())
            padding = -(header + 4) % ALIGNMENT
            info.extra = b"FB" + struct.pack("<H", padding) + b"Z" * padding
            archive.writestr(info, content)


def safetensors_bytes(state: Mapping[str, np.ndarray]) -> bytes:
    """``state`` (name → float array) as a safetensors file: the header (padded with spaces
    to 8 bytes, metadata ``format: pt``), then each array's little-endian bytes."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    chunks, offset = [], 0
    for name, value in state.items():
        array = np.require(value, requirements="C")
        raw = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": NUMPY_SAFETENSORS[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)
