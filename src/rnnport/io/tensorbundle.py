"""TensorFlow checkpoints (the TensorBundle format), read and written with NumPy alone.

A checkpoint ``PREFIX`` is two kinds of file:

* ``PREFIX.index``: a LevelDB-style sorted table mapping each tensor name to a
  ``BundleEntryProto`` (dtype, shape, shard, offset, size, masked CRC-32C); the empty
  key holds a ``BundleHeaderProto`` (number of shards, byte order, version).
* ``PREFIX.data-SSSSS-of-NNNNN``: the tensors' raw bytes, one file per shard.

Every block of the table and every tensor is checked against its CRC-32C, so a damaged
file is reported (naming the file and the entry) instead of yielding wrong numbers.
Tensors are read one at a time, when asked for: an optimizer's slots in the same
checkpoint cost nothing.

What a TensorFlow writer guarantees is checked before it is relied on, so a hostile
index costs no more time or memory than its files' sizes:

* the table's keys are strictly increasing, and its data blocks lie one after another,
  each read (and checksummed) once;
* no two tensors' bytes overlap in a data shard, so reading every tensor once
  materialises at most the shards' bytes;
* a shape has at most :data:`MAX_RANK` dimensions when read (254 in the index, as
  TensorFlow allows), and its elements fill exactly the entry's bytes (an empty tensor's
  other dimensions too must describe an array NumPy can make).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import math
import os
import re
import stat
import sys
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np

from .. import budget
from ..errors import DTypeError, FormatError, UnsupportedFeatureError
from . import _proto, checkpoint_state, inputs
from .atomic import atomic_write_all, check_target, folder_lock, overwrite_setting, replaces
from .crc32c import crc32c, mask, unmask

__all__ = ["MAX_RANK", "Bundle", "Entry", "bundle_files", "checkpoint_prefix", "is_data_file",
           "output_prefix", "read_bundle", "write_bundle"]

_MAGIC = 0xDB4775248B80FB57
_DATA_NAME = re.compile(r"\.data-\d{5}-of-\d{5}$")
_ATTEMPTS = 5  # reads of an index replaced while it is read, before giving up
_FOOTER = 48
_TRAILER = 5
# TensorFlow's TensorShape holds at most 254 dimensions; an index claiming more is damaged.
_TF_MAX_RANK = 254
# A recurrent weight has one to three dimensions; 32 is generous for any other tensor a
# checkpoint beside it holds, and below NumPy's own limit (64; 32 before NumPy 2).
MAX_RANK = 32

# TensorFlow DataType enum → NumPy dtype ("bfloat16" and "string" are decoded specially).
_DTYPES: dict[int, str] = {
    1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 7: "string",
    8: "complex64", 9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 18: "complex128",
    19: "float16", 22: "uint32", 23: "uint64",
}
_TF_NAMES = {1: "float", 2: "double", 7: "string", 14: "bfloat16", 19: "half"}
_CODES = {np.dtype(name): code for code, name in _DTYPES.items()
          if name not in ("string", "bfloat16")}


def _tf_name(code: int) -> str:
    return _TF_NAMES.get(code, _DTYPES.get(code, f"DataType {code}"))


@dataclass(frozen=True)
class Entry:
    """Where one tensor lives and what it should look like."""

    name: str
    dtype_code: int
    shape: tuple[int, ...]
    shard: int
    offset: int
    size: int
    crc: int  # masked CRC-32C of the tensor's bytes
    sliced: bool

    @property
    def dtype(self) -> str:
        """NumPy's name for the stored type (``"bfloat16"`` and ``"string"`` included)."""
        return _DTYPES.get(self.dtype_code, _tf_name(self.dtype_code))


def is_data_file(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is named as a checkpoint's data shard, ``PREFIX.data-00000-of-00001``."""
    return _DATA_NAME.search(Path(path).name) is not None


def checkpoint_prefix(path: str | os.PathLike[str]) -> Path:
    """The prefix a path names: itself, ``X.index`` → ``X``, a folder → its latest checkpoint."""
    return checkpoint_location(path)[0]


def checkpoint_location(path: str | os.PathLike[str]) -> tuple[Path, Path | None]:
    """The prefix a path names (see :func:`checkpoint_prefix`), and the folder its files must
    stay in when a file in that folder named it (its ``checkpoint`` state file, or the one
    index there), else None."""
    path = Path(path)
    if not str(path).endswith(".index") and not is_data_file(path) and _is_folder(path):
        return _latest_in(path), path
    return _prefix_of(path), None


def _prefix_of(path: Path) -> Path:
    text = str(path)
    if text.endswith(".index"):
        return Path(text[: -len(".index")])
    if is_data_file(path):
        return path.with_name(path.name.rsplit(".data-", 1)[0])
    return path


def _is_folder(path: Path) -> bool:
    """Whether ``path`` is a folder; False for a name no file can have (a NUL byte, too
    long), which the write or read that uses it then reports with the system's reason."""
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def output_prefix(path: str | os.PathLike[str]) -> Path:
    """The prefix a checkpoint is written at: ``path``, less an ``.index`` or data-file
    suffix. A folder is refused: writing must not pick a name inside it."""
    if _is_folder(Path(path)):
        raise FormatError(f"{path} is a folder; pass a checkpoint prefix inside it, e.g. "
                          f"{Path(path) / 'model.ckpt'}. Nothing was written.")
    return checkpoint_prefix(path)


def bundle_files(prefix: str | os.PathLike[str]) -> list[Path]:
    """The files :func:`write_bundle` writes at a new ``prefix``: the index and one data
    shard (writing over a checkpoint alternates between one and two data shards)."""
    return [Path(f"{prefix}.index"), _data_path(Path(prefix), 0, 1)]


def _latest_in(folder: Path) -> Path:
    """The checkpoint the folder's state file names newest, else its only checkpoint."""
    state = checkpoint_state.read_state(
        folder, f"Pass a checkpoint prefix instead of the folder ({folder / 'NAME'} for "
                f"{folder / 'NAME.index'}).")
    if state is not None and state.model_checkpoint_path is not None:
        # Only the name counts: the checkpoint is looked for in this folder, never where
        # the file says (TensorFlow writes absolute paths that go stale on a copy, and a
        # hostile one could point anywhere).
        value = state.model_checkpoint_path
        name = re.split(r"[\\/]", value)[-1]
        if name in ("", ".", ".."):
            raise FormatError(f"{folder / checkpoint_state.STATE_FILE}: model_checkpoint_path "
                              f"names no checkpoint ({value!r}); pass the prefix.")
        # Its longest file's name (a data shard's) must be one a file system can hold.
        inputs.check_name(f"{folder / checkpoint_state.STATE_FILE}, model_checkpoint_path",
                          name, adds=_data_path(Path(name), 0, 1).name[len(name):])
        return folder / name
    indexes = sorted(folder.glob("*.index"))
    if len(indexes) == 1:
        return Path(str(indexes[0])[: -len(".index")])
    if not indexes:
        raise FormatError(f"{folder}: a folder with no checkpoint in it (no 'checkpoint' file and "
                          "no *.index file); pass the checkpoint prefix, e.g. folder/model.ckpt.")
    names = ", ".join(str(p)[: -len(".index")] for p in indexes)
    raise FormatError(f"{folder}: holds several checkpoints ({names}) and no 'checkpoint' file "
                      "naming the latest; pass one prefix.")


def _data_path(prefix: Path, shard: int, shards: int) -> Path:
    return prefix.with_name(f"{prefix.name}.data-{shard:05d}-of-{shards:05d}")


def _identity(path: Path) -> tuple[int, ...]:
    """What tells one version of a file from the next (a rename in gives a new inode);
    ``()`` when it is gone."""
    try:
        status = os.stat(path)
    except OSError:
        return ()
    return status.st_ino, status.st_dev, status.st_mtime_ns, status.st_size


def _read_index(path: Path, inside: Path | None) -> tuple[tuple[int, ...], _Table]:
    """The index file's identity and table, both of the one file that was opened (checked
    and recorded as every input is: inside ``inside`` when a file there named it)."""
    try:
        file = path.open("rb")
    except FileNotFoundError:
        raise
    except OSError as error:
        raise FormatError(f"{path}: cannot be opened; the system says: "
                          f"{error.strerror or error}. Check its permissions.") from None
    with file:
        # (A writer may replace the index meanwhile: the caller reads it again then.)
        inputs.note(path, str(path), inside=inside, name=path.name if inside else None)
        status = os.fstat(file.fileno())
        data = file.read()
    return (status.st_ino, status.st_dev, status.st_mtime_ns, status.st_size), _Table(path, data)


# What a data shard's path holds when it is no plain file, by its file type.
_NOT_A_FILE = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
               (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))
_MISSING = "is missing"


def _open_data(path: Path, inside: Path | None) -> io.FileIO | str:
    """A data shard opened for reading, or why it cannot be read, as the error says it
    ("is missing", "is a FIFO (named pipe), not a file" …; told when a tensor in it is
    read). Anything but a plain file is refused, unopened (a FIFO would block)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return _MISSING
    except OSError as error:
        if error.errno == errno.ENOTDIR:
            return _MISSING  # a file stands where a folder on its path should be
        if error.errno == errno.ELOOP:
            return "is a loop of symbolic links, not a file"
        if error.errno in (errno.EISDIR, errno.ENXIO):  # ENXIO: a socket (or a lone device)
            return _not_a_file(path)
        raise FormatError(f"{path}: cannot be opened ({error.strerror or error}); expected a "
                          "data shard rnnport can read. Check its permissions.") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        return _not_a_file(path, mode)
    try:  # a shard a checkpoint state file named must stay in its folder; recorded
        inputs.note(path, str(path), inside=inside, name=path.name if inside else None)
    except FormatError:
        os.close(descriptor)
        if not os.path.lexists(path):  # removed since it was opened: by a writer that
            return _MISSING            # replaced the index first (read again, see _load)
        raise
    except BaseException:
        os.close(descriptor)
        raise
    return os.fdopen(descriptor, "rb", buffering=0)


def _not_a_file(path: Path, mode: int | None = None) -> str:
    """Why a path that is no plain file cannot be read ("is a FIFO (named pipe), not a
    file" …)."""
    if mode is None:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return _MISSING
    kind = next((kind for test, kind in _NOT_A_FILE if test(mode)), None)
    return "is not a plain file" if kind is None else f"is {kind}, not a file"


def _close_all(files: dict[int, io.FileIO | str]) -> None:
    for file in files.values():
        if not isinstance(file, str):
            file.close()
    files.clear()


# -- reading ----------------------------------------------------------------------------------

class Bundle(Mapping[str, Entry]):
    """The index of a checkpoint: ``bundle[name]`` is the :class:`Entry`, ``read(name)`` the array."""

    def __init__(self, prefix: str | os.PathLike[str], inside: Path | None = None) -> None:
        """The checkpoint at ``prefix`` (a prefix, its index, a data shard or a folder); its
        files must stay inside ``inside`` (a folder named them, e.g. a SavedModel's) or, for
        a folder, inside that folder."""
        self.prefix, named_in = checkpoint_location(prefix)
        self.inside = inside if inside is not None else named_in
        self.index_path = Path(f"{self.prefix}.index")
        if not inputs.is_file(self.index_path, str(self.prefix)):
            raise FormatError(
                f"{self.prefix}: no checkpoint here; expected the index file {self.index_path} "
                "(a TensorFlow checkpoint is PREFIX.index plus PREFIX.data-*). Pass the prefix "
                "(e.g. model.ckpt-1000), the .index file or the folder.")
        self._files: dict[int, io.FileIO | str] = {}
        self._seen: tuple[int, ...] = ()
        self.generation = 0  # how many times the index was read again after a rewrite
        weakref.finalize(self, _close_all, self._files)
        self._load()

    def _load(self) -> None:
        """Read the index and open the data shards it names, as one snapshot: the index is
        read again if it was replaced before its shards were open (a writer replaces the
        index only after the data it names is in place, and then removes the old shards;
        open files keep the bytes they name)."""
        for attempt in range(_ATTEMPTS):
            _close_all(self._files)
            try:
                self._seen, table = _read_index(self.index_path, self.inside)
            except FileNotFoundError:
                if attempt + 1 < _ATTEMPTS:
                    continue
                raise FormatError(f"{self.index_path}: disappeared while it was read; expected "
                                  "the checkpoint to stay in place. Read it again.") from None
            self._parse(table)
            for shard in sorted({entry.shard for entry in self._entries.values()}):
                self._files[shard] = _open_data(self.data_path(shard), self.inside)
            if _identity(self.index_path) == self._seen:
                return

    def _changed(self) -> bool:
        """Whether the index file was replaced since this snapshot was read."""
        return _identity(self.index_path) != self._seen

    def _parse(self, table: _Table) -> None:
        header: dict[int, int] | None = None
        entries: dict[str, Entry] = {}
        for raw_key, value in table.items():
            if raw_key == b"":
                header = table.header(value)
                continue
            if raw_key.startswith(b"\0"):
                continue  # the slices of a partitioned variable; its own entry says so
            name = raw_key.decode("utf-8", errors="replace")
            entries[name] = table.entry(name, value)
        if header is None:
            raise FormatError(f"{self.index_path}: the header entry is missing; this is not a "
                              "TensorFlow checkpoint index (or it is damaged).")
        self.shards = header.get(1, 1) or 1
        self.big_endian = header.get(2, 0) == 1
        self._entries = entries
        stored: dict[int, list[Entry]] = {}
        for entry in entries.values():
            if not 0 <= entry.shard < self.shards:
                raise FormatError(
                    f"{self.index_path}: entry {entry.name!r} names shard {entry.shard}, but the "
                    f"header says there are {self.shards}; the index is damaged.")
            stored.setdefault(entry.shard, []).append(entry)
        for shard, listed in stored.items():
            self._check_apart(shard, listed)

    def _check_apart(self, shard: int, listed: list[Entry]) -> None:
        """Refuse two entries whose bytes overlap in one shard: TensorFlow writes each
        tensor once, after the one before, so overlapping entries are damage, or a small
        file built to make reading every tensor materialise the same bytes again and again.
        (An entry running past the end of its shard is reported, by name, when read.)"""
        spans = sorted((entry.offset, entry.offset + entry.size, entry.name) for entry in listed
                       if entry.offset >= 0 and entry.size > 0)
        furthest: tuple[int, int, str] | None = None  # the span reaching furthest so far
        for span in spans:
            if furthest is not None and span[0] < furthest[1]:
                raise FormatError(
                    f"{self.index_path}: tensors {furthest[2]!r} (bytes {furthest[0]}.."
                    f"{furthest[1]}) and {span[2]!r} (bytes {span[0]}..{span[1]}) overlap in "
                    f"{self.data_path(shard)}; expected every tensor's bytes apart (TensorFlow "
                    "writes each tensor once, after the previous one). The index is damaged or "
                    "built to make reading repeat the same bytes; re-save the checkpoint.")
            if furthest is None or span[1] > furthest[1]:
                furthest = span

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def data_path(self, shard: int) -> Path:
        return _data_path(self.prefix, shard, self.shards)

    def read(self, name: str) -> np.ndarray:
        """The tensor ``name``, checked against its CRC (bfloat16 comes back as float32).

        A data shard found missing, short or failing its CRC while the index was replaced
        since this bundle read it (the checkpoint was written again meanwhile, by a writer
        that replaces data in place) makes the bundle read the index again and retry, a few
        times, instead of failing."""
        for attempt in range(_ATTEMPTS):
            try:
                return self._read(name)
            except FormatError:
                if attempt + 1 == _ATTEMPTS or not self._changed():
                    raise
                self._load()
                self.generation += 1
        raise AssertionError("unreachable")  # the loop returns or raises

    def _read(self, name: str) -> np.ndarray:
        if name not in self._entries:
            raise FormatError(f"{self.prefix}: no tensor named {name!r} in this checkpoint.")
        entry = self._entries[name]
        where = f"{self.prefix}: tensor {name!r}"
        if entry.sliced:
            raise UnsupportedFeatureError(
                f"{where} is saved in slices (a partitioned variable); rnnport reads whole "
                "tensors only. Re-save it unpartitioned.")
        if entry.dtype_code not in _DTYPES:
            raise DTypeError(f"{where} has TensorFlow type {_tf_name(entry.dtype_code)}, which "
                             "holds no plain numbers; it cannot be read as an array.")
        count = _check_shape(entry, where)
        raw = self._raw(entry, where, checked=entry.dtype != "string")
        if entry.dtype == "string":
            return _strings(raw, count, entry.crc, f"{where} in {self.data_path(entry.shard)}"
                            ).reshape(entry.shape)
        order: Literal[">", "<"] = ">" if self.big_endian else "<"
        if entry.dtype == "bfloat16":
            half = np.frombuffer(raw, dtype=f"{order}u2").astype(np.uint32)
            return (half << 16).view(np.float32).reshape(entry.shape)
        stored = np.dtype(entry.dtype).newbyteorder(order)
        array = np.frombuffer(raw, dtype=stored)  # writable: it views the fresh bytearray
        if not stored.isnative:
            array = array.astype(stored.newbyteorder("="))
        return array.reshape(entry.shape)

    def _raw(self, entry: Entry, where: str, checked: bool) -> bytearray:
        path = self.data_path(entry.shard)
        file = self._files.get(entry.shard, _MISSING)
        if isinstance(file, str):
            raise FormatError(
                f"{where}: its data file {path} {file} (shard {entry.shard + 1} of "
                f"{self.shards}); copy every {self.prefix.name}.data-* file with the index.")
        file_size = os.fstat(file.fileno()).st_size
        if entry.offset < 0 or entry.size < 0 or entry.offset + entry.size > file_size:
            raise FormatError(
                f"{where}: bytes {entry.offset}..{entry.offset + entry.size} lie beyond the end of "
                f"{path} ({file_size} bytes); the data file is truncated or belongs to another "
                "checkpoint.")
        raw = bytearray(entry.size)
        file.seek(entry.offset)
        if entry.size and file.readinto(raw) != entry.size:
            raise FormatError(f"{where}: {path} ended early while reading it.")
        if checked and crc32c(raw) != unmask(entry.crc):
            raise FormatError(
                f"{where}: its bytes in {path} fail their CRC-32C check; the data file is damaged "
                "(or was overwritten by another checkpoint). Nothing was read from it.")
        return raw

    def arrays(self, names: list[str] | None = None) -> dict[str, np.ndarray]:
        """Several tensors (``None``: all), every one from the same version of the
        checkpoint: if reading one made the bundle read a replaced index, all are read
        again."""
        for _ in range(_ATTEMPTS):
            generation = self.generation
            out = {name: self.read(name) for name in (list(self) if names is None else names)}
            if self.generation == generation:
                return out
        raise FormatError(f"{self.prefix}: the checkpoint was written again while it was read, "
                          f"{_ATTEMPTS} times; expected it to stay the same for a moment. Read it "
                          "again once its writer is done.")

    def close(self) -> None:
        """Close the data files (also done when the bundle is garbage-collected)."""
        _close_all(self._files)


def _check_shape(entry: Entry, where: str) -> int:
    """The element count of ``entry``'s shape, once the shape is known to fit the entry's
    bytes and NumPy: checked before any array (or byte buffer) is made from it."""
    shape = entry.shape
    if len(shape) > MAX_RANK:
        raise FormatError(
            f"{where}: its shape has {len(shape)} dimensions; expected at most {MAX_RANK} (a "
            "recurrent weight has one to three). The index is damaged, or this tensor is not "
            "one rnnport reads; read the checkpoint's other tensors by name.")
    count = math.prod(shape)
    # The array's item size: what is read is made into objects (strings), float32 (bfloat16)
    # or the stored type.
    itemsize = np.dtype({"string": "object", "bfloat16": "float32"}.get(entry.dtype,
                                                                          entry.dtype)).itemsize
    if entry.dtype == "string":
        if count > entry.size:  # each string takes at least its one-byte length
            raise FormatError(
                f"{where}: shape {_shown(shape)} holds {count:,} strings, but the index gives "
                f"{entry.size:,} bytes, less than one byte each; expected at least {count:,}. "
                "The index is damaged; re-save the checkpoint.")
        # Each string becomes a Python object of about _STRING_OBJECT bytes beyond its text:
        # charged against the expansion limit before a byte is read (empty strings cost one
        # byte each here).
        needed = count * _STRING_OBJECT + entry.size
        if needed > budget.allowance("expansion", entry.size):
            raise budget.exceeded(where, f"its {count:,} strings would take about {needed:,} "
                                         "bytes as Python objects", "expansion",
                                  size=entry.size, needed=needed)
    else:
        stored = 2 if entry.dtype == "bfloat16" else itemsize
        if entry.size != count * stored:
            raise FormatError(
                f"{where}: the index gives {entry.size:,} bytes, but shape {_shown(shape)} of "
                f"{entry.dtype} needs {count * stored:,}; the index is damaged. Re-save the "
                "checkpoint.")
    # An empty tensor's bytes bound none of its other dimensions; NumPy still refuses a
    # shape whose non-zero dimensions span more bytes than an address can count.
    extent = math.prod(dim for dim in shape if dim) * itemsize
    if extent > sys.maxsize:
        raise FormatError(
            f"{where}: shape {_shown(shape)} spans {extent:,} bytes without its zero "
            f"dimension(s); expected at most {sys.maxsize:,} (what NumPy can address). The "
            "index is damaged; re-save the checkpoint.")
    return count


def _shown(shape: tuple[int, ...]) -> str:
    """A shape as a message shows it: at most eight dimensions, then how many in all."""
    if len(shape) <= 8:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:8]))}, … ({len(shape)} dimensions)]"


_STRING_OBJECT = 48  # a bytes object's header, and its slot in the object array


def _strings(raw: bytearray, count: int, stored: int, where: str) -> np.ndarray:
    """Decode a string tensor: varint lengths, a masked CRC of them, then the bytes.

    Its CRC covers each length as a little-endian uint32 (uint64 past 4 GiB), not as the
    varint written, then the length checksum and the bytes. (_check_shape has refused more
    strings than bytes, and more than the ``expansion`` limit allows as Python objects.)
    """
    try:
        position, lengths, crc = 0, [], 0
        for _ in range(count):
            length, position = _proto.read_varint(raw, position)
            lengths.append(length)
            crc = crc32c(length.to_bytes(4 if length < 1 << 32 else 8, "little"), crc)
        crc = crc32c(raw[position:position + 4], crc)
        position += 4
        values = []
        for length in lengths:
            if position + length > len(raw):
                raise _proto.ProtoError("a string runs past the end of the tensor")
            values.append(bytes(raw[position:position + length]))
            crc = crc32c(values[-1], crc)
            position += length
    except _proto.ProtoError as error:
        raise FormatError(f"{where}: the string tensor is malformed ({error}).") from None
    if crc != unmask(stored) or position != len(raw):
        raise FormatError(f"{where}: the string tensor fails its CRC-32C check; the data file is "
                          "damaged.")
    out = np.empty(count, dtype=object)
    out[:] = values
    return out


class _Table:
    """A LevelDB table without compression, as TensorFlow's BundleWriter writes it."""

    def __init__(self, path: Path, data: bytes | None = None) -> None:
        self.path = path
        self.data = path.read_bytes() if data is None else data
        if len(self.data) < _FOOTER:
            raise FormatError(f"{path}: {len(self.data)} bytes, shorter than a table footer "
                              f"({_FOOTER}); the index file is truncated or not a checkpoint index.")
        footer = self.data[-_FOOTER:]
        if int.from_bytes(footer[-8:], "little") != _MAGIC:
            raise FormatError(f"{path}: the last 8 bytes are not the table magic number; the index "
                              "file is truncated, damaged, or not a TensorFlow checkpoint index.")
        try:
            meta_offset, position = _proto.read_varint(footer, 0)
            meta_size, position = _proto.read_varint(footer, position)
            self.meta_handle = (meta_offset, meta_size)
            self.index_handle = self._handle(footer, position)
        except _proto.ProtoError as error:
            raise FormatError(f"{path}: the table footer is malformed ({error}).") from None

    def _handle(self, data: bytes, position: int) -> tuple[int, int]:
        offset, position = _proto.read_varint(data, position)
        size, _ = _proto.read_varint(data, position)
        return offset, size

    def block(self, handle: tuple[int, int], what: str) -> bytes:
        offset, size = handle
        end = offset + size + _TRAILER
        if end > len(self.data) - _FOOTER:
            raise FormatError(f"{self.path}: the {what} (bytes {offset}..{end}) runs past the end "
                              f"of the table ({len(self.data)} bytes); the index file is truncated.")
        contents = self.data[offset:offset + size + 1]  # the block and its compression type
        stored = int.from_bytes(self.data[offset + size + 1:end], "little")
        if crc32c(contents) != unmask(stored):
            raise FormatError(f"{self.path}: the {what} fails its CRC-32C check; the index file is "
                              "damaged.")
        if contents[-1] != 0:
            raise FormatError(f"{self.path}: the {what} is compressed (type {contents[-1]}); "
                              "TensorFlow writes checkpoint indexes uncompressed.")
        return contents[:-1]

    def _entries(self, block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
        if len(block) < 4:
            raise FormatError(f"{self.path}: the {what} is too short to be a table block.")
        restarts = int.from_bytes(block[-4:], "little")
        end = len(block) - 4 - 4 * restarts
        if restarts < 1 or end < 0:
            raise FormatError(f"{self.path}: the {what} has a bad restart count ({restarts}).")
        position, previous = 0, b""
        try:
            while position < end:
                shared, position = _proto.read_varint(block, position)
                own, position = _proto.read_varint(block, position)
                size, position = _proto.read_varint(block, position)
                if shared > len(previous) or position + own + size > end:
                    raise _proto.ProtoError("an entry runs past the end of its block")
                key = previous[:shared] + block[position:position + own]
                position += own
                yield key, block[position:position + size]
                position += size
                previous = key
        except _proto.ProtoError as error:
            raise FormatError(f"{self.path}: the {what} is malformed ({error}).") from None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every key and value, in order. TensorFlow's table writer puts the data blocks one
        after another and their keys in increasing order; both are checked, so that no block
        is read (and checksummed, and parsed) twice: an index whose entries all point at one
        large block would otherwise cost their number times its size."""
        self.block(self.meta_handle, "metaindex block")  # unused, but a damaged one is damage
        index = self.block(self.index_handle, "index block")
        previous_end, previous_key = 0, None
        for number, (_, handle) in enumerate(self._entries(index, "index block")):
            try:
                location = self._handle(handle, 0)
            except _proto.ProtoError as error:
                raise FormatError(f"{self.path}: index entry {number} is malformed ({error}).") \
                    from None
            if location[0] < previous_end:
                raise FormatError(
                    f"{self.path}: index entry {number} points at bytes {location[0]}.."
                    f"{location[0] + location[1] + _TRAILER}, inside or before data block "
                    f"{number - 1} (which ends at byte {previous_end}); expected each data block "
                    "after the previous one, as TensorFlow writes them. The index file is damaged "
                    "or built to make reading repeat work; re-save the checkpoint.")
            what = f"data block {number}"
            for key, value in self._entries(self.block(location, what), what):
                if previous_key is not None and key <= previous_key:
                    raise FormatError(
                        f"{self.path}: in {what}, key {_key_shown(key)} follows "
                        f"{_key_shown(previous_key)}; expected keys in strictly increasing order, "
                        "as TensorFlow writes them (each tensor once). The index file is damaged; "
                        "re-save the checkpoint.")
                previous_key = key
                yield key, value
            previous_end = location[0] + location[1] + _TRAILER

    def header(self, value: bytes) -> dict[int, int]:
        """The BundleHeaderProto's integer fields (num_shards 1, endianness 2)."""
        try:
            return {number: v for number, v in _proto.fields(value) if isinstance(v, int)}
        except _proto.ProtoError as error:
            raise FormatError(f"{self.path}: the header record is malformed ({error}).") from None

    def entry(self, name: str, value: bytes) -> Entry:
        fields: dict[int, int | bytes] = {}
        dims: list[int] = []
        sliced = False
        try:
            for number, item in _proto.fields(value):
                if number == 2 and isinstance(item, bytes):
                    for shape_field, dim in _proto.fields(item):
                        if shape_field == 2 and isinstance(dim, bytes):
                            size = dict((n, v) for n, v in _proto.fields(dim)).get(1, 0)
                            dims.append(_signed(size) if isinstance(size, int) else -1)
                        elif shape_field == 3 and dim:
                            dims.append(-1)
                elif number == 7:
                    sliced = True
                else:
                    fields[number] = item
        except _proto.ProtoError as error:
            raise FormatError(f"{self.path}: the entry of tensor {name!r} is malformed "
                              f"({error}).") from None

        def integer(number: int) -> int:
            value = fields.get(number, 0)
            return _signed(value) if isinstance(value, int) else -1

        if len(dims) > _TF_MAX_RANK:
            raise FormatError(
                f"{self.path}: tensor {name!r} has {len(dims)} dimensions; expected at most "
                f"{_TF_MAX_RANK}, as many as TensorFlow allows. The index is damaged; re-save "
                "the checkpoint.")
        if any(d < 0 for d in dims):
            raise FormatError(f"{self.path}: tensor {name!r} has an unknown or negative shape "
                              f"{_shown(tuple(dims))}; the index is damaged.")
        return Entry(name, integer(1), tuple(dims), integer(3), integer(4), integer(5),
                     integer(6), sliced)


def _key_shown(key: bytes) -> str:
    """A table key for a message: its name, cut to 80 characters."""
    text = key.lstrip(b"\0").decode("utf-8", errors="replace")
    return repr(text if len(text) <= 80 else f"{text[:80]}…")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def read_bundle(prefix: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every tensor of a checkpoint as ``{name: array}``."""
    return Bundle(prefix).arrays()


# -- writing ----------------------------------------------------------------------------------

def _block(entries: list[tuple[bytes, bytes]], interval: int) -> bytes:
    out = bytearray()
    restarts: list[int] = []
    previous = b""
    for number, (key, value) in enumerate(entries):
        shared = 0
        if number % interval == 0:
            restarts.append(len(out))
        else:
            limit = min(len(previous), len(key))
            while shared < limit and previous[shared] == key[shared]:
                shared += 1
        out += _proto.varint(shared) + _proto.varint(len(key) - shared) + _proto.varint(len(value))
        out += key[shared:] + value
        previous = key
    restarts = restarts or [0]
    for start in restarts:
        out += start.to_bytes(4, "little")
    out += len(restarts).to_bytes(4, "little")
    return bytes(out)


def _with_trailer(block: bytes) -> bytes:
    return block + b"\0" + mask(crc32c(block + b"\0")).to_bytes(4, "little")


def _handle(offset: int, size: int) -> bytes:
    return _proto.varint(offset) + _proto.varint(size)


def _entry_proto(code: int, shape: tuple[int, ...], offset: int, size: int, crc: int,
                 shard: int = 0) -> bytes:
    """A BundleEntryProto: dtype 1, shape 2, shard_id 3, offset 4, size 5, crc32c 6."""
    shape_proto = b"".join(
        _proto.key(2, 2) + _proto.varint(len(dim)) + dim
        for dim in (_proto.key(1, 0) + _proto.varint(d) if d else b"" for d in shape))
    out = _proto.key(1, 0) + _proto.varint(code)
    out += _proto.key(2, 2) + _proto.varint(len(shape_proto)) + shape_proto
    if shard:
        out += _proto.key(3, 0) + _proto.varint(shard)
    if offset:
        out += _proto.key(4, 0) + _proto.varint(offset)
    if size:
        out += _proto.key(5, 0) + _proto.varint(size)
    return out + _proto.key(6, 5) + crc.to_bytes(4, "little")


def _index(entries: list[tuple[bytes, bytes]], shards: int = 1) -> bytes:
    """The index table: the BundleHeaderProto (num_shards 1, endianness 2 left at little,
    version 3) under the empty key, then each tensor's entry, keys in increasing order."""
    header = _proto.key(1, 0) + _proto.varint(shards)
    header += _proto.key(3, 2) + _proto.varint(2) + _proto.key(1, 0) + _proto.varint(1)
    data_block = _with_trailer(_block([(b"", header), *entries], 16))
    meta_block = _with_trailer(_block([], 1))
    last_key = entries[-1][0] if entries else b""
    index_block = _with_trailer(_block([(last_key, _handle(0, len(data_block) - _TRAILER))], 1))
    meta_at = len(data_block)
    index_at = meta_at + len(meta_block)
    footer = _handle(meta_at, len(meta_block) - _TRAILER) + _handle(index_at,
                                                                      len(index_block) - _TRAILER)
    footer = footer.ljust(_FOOTER - 8, b"\0") + _MAGIC.to_bytes(8, "little")
    return data_block + meta_block + index_block + footer


_STRING = 7  # DataType DT_STRING


def _string_bytes(values: list[bytes]) -> tuple[bytes, int]:
    """A string tensor's bytes and masked CRC, as :func:`_strings` reads them: varint
    lengths, the masked CRC-32C of the lengths (each as a little-endian uint32, uint64 past
    4 GiB), then the bytes; the entry's CRC covers the lengths, that checksum and the bytes."""
    crc = 0
    for value in values:
        crc = crc32c(len(value).to_bytes(4 if len(value) < 1 << 32 else 8, "little"), crc)
    checksum = mask(crc).to_bytes(4, "little")
    crc = crc32c(checksum, crc)
    for value in values:
        crc = crc32c(value, crc)
    return b"".join(_proto.varint(len(value)) for value in values) + checksum + \
        b"".join(values), mask(crc)


def write_bundle(prefix: str | os.PathLike[str], arrays: Mapping[str, np.ndarray]) -> list[Path]:
    """Write ``arrays`` as a checkpoint that ``tf.train.load_checkpoint`` reads (an object
    array of ``bytes`` is a string tensor); returns the index, then the data shards.

    The checkpoint changes all at once, a crash (even ``kill -9``) and concurrent readers
    included: a reader sees the old checkpoint or the new one, never a mix, and a writer
    stopped at any point leaves one of the two readable.

    * A new prefix gets one data shard, ``PREFIX.data-00000-of-00001``. Over an existing
      checkpoint, the data goes under shard names disjoint from those its index names:
      two shards (``-00000-of-00002``, ``-00001-of-00002``, the tensors split between them)
      after a one-shard checkpoint, else one.
    * The data files are renamed in first, never replacing a file; the index is renamed in
      last, in one step that switches readers from the old checkpoint to the new one; then
      the old data files go. Each file is written to a temporary beside it first (see
      :mod:`rnnport.io.atomic`).
    * Before writing, any ``PREFIX.data-NNNNN-of-NNNNN`` file that the current index does
      not name (the leftover of a writer stopped early) is removed, unless replacing is
      off (:func:`~rnnport.io.atomic.replacing` ``(False)``: nothing is removed then).
    * Writers take turns per folder (:func:`~rnnport.io.atomic.folder_lock`), so two
      writers of one prefix never interleave; a reader (:class:`Bundle`) opens the data
      files its index names right after reading it, and reads the index again when it
      was replaced meanwhile.
    """
    prefix = Path(prefix)
    names = list(arrays)
    for name in names:
        if not isinstance(name, str) or not name:
            raise FormatError(f"{prefix}: tensor names must be non-empty strings; got {name!r}.")
    tensors = []
    for name in sorted(names, key=lambda n: n.encode("utf-8")):
        try:
            array = np.asarray(arrays[name])
        except ValueError as error:
            raise FormatError(f"{prefix}: tensor {name!r} is not one rectangular array "
                              f"({error}).") from None
        if array.dtype == object and all(isinstance(item, bytes) for item in array.flat):
            tensors.append((name, _STRING, array))  # a DT_STRING tensor (an object graph)
            continue
        dtype = array.dtype.newbyteorder("=") if array.dtype.byteorder != "|" else array.dtype
        if dtype not in _CODES:
            raise DTypeError(f"{prefix}: tensor {name!r} has dtype {array.dtype}, which a "
                             "checkpoint cannot hold; use a float, integer or bool array.")
        tensors.append((name, _CODES[dtype], np.asarray(array, dtype=dtype.newbyteorder("<"), order="C")))
    index_path = check_target(Path(f"{prefix}.index"))
    with folder_lock(prefix.parent if str(prefix.parent) else Path(".")):
        setting = overwrite_setting()
        replace_index = replaces(index_path)
        current = _shard_count(index_path)
        if current is None and index_path.exists() and _layout(prefix, 1)[0].exists():
            current = 1  # an index that cannot be read: its data may be the one-shard files
        if setting is not False and (current is not None or not index_path.exists()):
            # Leftovers the current index does not name; with an index that cannot be read
            # and no one-shard data, nothing is certain: all stays until the new index is in.
            _remove_data_files(prefix, keep=_layout(prefix, current))
        shards = 2 if current == 1 else 1
        data_paths = _layout(prefix, shards)
        entries: dict[bytes, bytes] = {}

        def write_shard(shard: int, file: BinaryIO) -> None:
            offset = 0
            for number, (name, code, array) in enumerate(tensors):
                if number * shards // len(tensors) != shard:
                    continue
                if code == _STRING:
                    raw, crc = _string_bytes(list(array.flat))
                else:
                    raw = array.reshape(-1).view(np.uint8).tobytes()
                    crc = mask(crc32c(raw))
                file.write(raw)
                entries[name.encode("utf-8")] = _entry_proto(code, array.shape, offset,
                                                             len(raw), crc, shard)
                offset += len(raw)

        def write_index(file: BinaryIO) -> None:
            file.write(_index(sorted(entries.items()), shards))

        atomic_write_all([*((path, functools.partial(write_shard, shard))
                            for shard, path in enumerate(data_paths)), (index_path, write_index)],
                         replace=[*(False for _ in data_paths), replace_index])
        if setting is not False:
            _remove_data_files(prefix, keep=data_paths)
    return [index_path, *data_paths]


def _layout(prefix: Path, shards: int | None) -> list[Path]:
    """The data files of a checkpoint of ``shards`` shards (``None``: none)."""
    count = shards or 0
    return [_data_path(prefix, shard, count) for shard in range(count)]


def _shard_count(index_path: Path) -> int | None:
    """How many data shards the index at ``index_path`` names; ``None`` when there is no
    index there, or none that can be read."""
    try:
        table = _Table(index_path)
        for key, value in table.items():
            return (table.header(value).get(1, 1) or 1) if key == b"" else None
    except (OSError, FormatError):
        pass
    return None


def _remove_data_files(prefix: Path, keep: list[Path]) -> None:
    """Remove every ``PREFIX.data-NNNNN-of-NNNNN`` file but ``keep`` (nothing else: the
    prefix is matched as a name, not as a pattern)."""
    folder = prefix.parent if str(prefix.parent) else Path(".")
    pattern = re.compile(re.escape(prefix.name) + r"\.data-[0-9]{5}-of-[0-9]{5}")
    kept = {path.name for path in keep}
    try:
        names = [entry.name for entry in os.scandir(folder)
                 if pattern.fullmatch(entry.name) and entry.name not in kept]
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):  # a folder, say: not one of ours
            os.unlink(folder / name)
