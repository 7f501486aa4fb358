"""Zip archives from anywhere (.keras, .npz, PyTorch .pt), opened and read defensively.

Members are read into memory by name and never extracted. An archive is refused before
anything is read when a member's name leaves the archive's folder (absolute, a drive, or
through ``..``), or when a member declares more bytes than it could hold: stored members
must declare what they store, compressed ones at most :data:`RATIO` times it (deflate's
largest expansion), every member must lie inside the file, and only stored and deflated
members are read (:data:`CODECS`: bzip2 and lzma expand a block at once, without a bound).
No two members may overlap: each member's local header and data lie apart from every
other's (a zip writer writes each member once, after the one before), so that members
whose data holds the members after it cannot make reading them all read the file's bytes
again and again. :func:`check_sizes` charges what members will inflate to against the
``expansion`` limit before any is read. Every failure of zipfile itself (bad headers, CRC
mismatches, unknown compression, encryption) becomes a
:class:`~rnnport.errors.FormatError` naming the file and the member.
"""

from __future__ import annotations

import collections
import io
import os
import re
import struct
import zipfile
import zlib
from itertools import pairwise
from typing import Any

import numpy as np

from .. import budget
from ..errors import DTypeError, FormatError
from . import inputs

__all__ = ["RATIO", "check_sizes", "load_npy", "member_data", "open_zip", "read_member",
           "read_npy", "zip_names"]

RATIO = 1032
# The zip methods read: stored and deflate (zipfile's deflate reader stops at the declared
# size); bzip2 and lzma decompress a whole block at once, whatever it expands to.
CODECS = frozenset({zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED})
_METHODS = {zipfile.ZIP_BZIP2: "bzip2", zipfile.ZIP_LZMA: "lzma", 93: "zstandard"}
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError,
               NotImplementedError, RuntimeError, KeyError, IndexError, TypeError,
               UnicodeDecodeError, struct.error, zlib.error, OverflowError)


def zip_names(path: str | os.PathLike[str]) -> list[str] | None:
    """The member names of the zip archive at ``path``, or None when it is not one zipfile
    can read: a cheap look for telling formats apart (nothing is read but the directory)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.namelist()
    except _ZIP_ERRORS:
        return None


def open_zip(path: str | os.PathLike[str] | bytes, what: str, where: str | None = None
             ) -> zipfile.ZipFile:
    """``path`` (or an archive's bytes, e.g. a member of another archive) as a checked
    ZipFile; ``what`` names the expected kind of file in messages, which start with
    ``where`` (default: the path)."""
    source: io.BytesIO | str | os.PathLike[str]
    if isinstance(path, bytes):
        size, where, source = len(path), where or "an archive in memory", io.BytesIO(path)
    else:
        where = os.fspath(path) if where is None else where
        source = inputs.checked(path, where)  # a regular file, recorded as read
        size = os.path.getsize(source)
    try:
        archive = zipfile.ZipFile(source)
        infos = archive.infolist()
    except _ZIP_ERRORS as error:
        raise FormatError(f"{where}: not a readable {what} ({type(error).__name__}: {error}); "
                          "the file is truncated or damaged.") from None
    try:
        counts = collections.Counter(info.filename for info in infos)
        if len(counts) != len(infos):
            twice = sorted(name for name, count in counts.items() if count > 1)
            raise FormatError(f"{where}: the archive holds {', '.join(map(repr, twice[:3]))} "
                              "more than once; which copy counts is ambiguous, so the file is "
                              "refused.")
        for info in infos:
            _check(where, info, size)
        _check_apart(where, archive, infos)
    except BaseException:
        archive.close()
        raise
    return archive


def _check(where: str, info: zipfile.ZipInfo, size: int) -> None:
    name = info.filename
    parts = re.split(r"[\\/]", name)
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or ".." in parts:
        raise FormatError(
            f"{where}: archive member {name!r} has a path that leaves the archive's folder "
            "(absolute, or through '..'); no framework writes one. Refusing to read the "
            "file; nothing was extracted.")
    if info.compress_type not in CODECS:
        raise FormatError(
            f"{where}: archive member {name!r} is compressed with zip method "
            f"{info.compress_type} ({_METHODS.get(info.compress_type, 'unknown')}); expected "
            "stored or deflate, the only ones the frameworks write (other codecs "
            "expand without a bound while being read). Nothing was read.")
    stored = info.compress_type == zipfile.ZIP_STORED
    if info.compress_size > size or info.header_offset > size or (
            info.file_size != info.compress_size if stored
            else info.file_size > RATIO * info.compress_size + 64):
        raise FormatError(
            f"{where}: archive member {name!r} declares {info.file_size:,} bytes, stored in "
            f"{info.compress_size:,} of a {size:,}-byte file; that cannot be (the archive is "
            "damaged, or built to exhaust memory). Nothing was read.")


def _check_apart(where: str, archive: zipfile.ZipFile, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse members whose bytes (local header, name, extra field and data) overlap."""
    file: Any = archive.fp
    spans = []
    for info in infos:
        try:
            file.seek(info.header_offset)
            header = file.read(30)
        except (OSError, ValueError) as error:
            raise FormatError(f"{where}: archive member {info.filename!r} cannot be read "
                              f"({type(error).__name__}: {error}); the file is damaged.") from None
        if len(header) < 30 or header[:4] != b"PK\x03\x04":
            raise FormatError(f"{where}: archive member {info.filename!r} has no local header "
                              f"at byte {info.header_offset:,}; the file is truncated or damaged.")
        name_length, extra_length = struct.unpack("<HH", header[26:30])
        spans.append((info.header_offset,
                      info.header_offset + 30 + name_length + extra_length + info.compress_size,
                      info.filename))
    spans.sort()
    for (start, end, name), (after, _, other) in pairwise(spans):
        if after < end:
            raise FormatError(
                f"{where}: archive members {name!r} (bytes {start:,} to {end:,}) and {other!r} "
                f"(from byte {after:,}) overlap; expected each member's bytes apart (a zip "
                "writer writes each member once, after the one before). The archive is damaged "
                "or built to make reading its members read the same bytes again and again; "
                "nothing was read.")


def check_sizes(archive: zipfile.ZipFile, names: list[str], where: str, size: int) -> None:
    """Refuse, before any is read, members ``names`` whose declared sizes together pass
    what the ``expansion`` limit allows for an archive of ``size`` bytes (deflate stores up
    to :data:`RATIO` times more than it takes)."""
    total = sum(archive.getinfo(name).file_size for name in names)
    if total > budget.allowance("expansion", size):
        raise budget.exceeded(where, f"its {len(names):,} member(s) inflate to {total:,} bytes",
                              "expansion", size, total)


def read_member(archive: zipfile.ZipFile, name: str, where: str,
                limit: int | None = None, length: int | None = None,
                crc: bool = True) -> bytes:
    """The bytes of member ``name`` (checked by :func:`open_zip`), CRC verified; refused
    before reading when it declares more than ``limit`` bytes. With ``length``, its first
    ``length`` bytes at most, read (and decompressed) no further. ``crc=False`` reads a
    stored member's bytes as they lie in the file, without checking the CRC the archive
    records (PyTorch can write 0 there, and does not check it either)."""
    info = archive.getinfo(name)
    size = info.file_size
    if limit is not None and size > limit:
        raise FormatError(f"{where}: archive member {name!r} declares {size:,} bytes; expected "
                          f"at most {limit:,} for what it holds. The file is damaged or built "
                          "to exhaust memory; nothing was read.")
    try:
        if not crc and info.compress_type == zipfile.ZIP_STORED:
            return bytes(_stored(archive, info, where,
                                 size if length is None else min(length, size)))
        if length is not None and length < size:
            with archive.open(name) as stream:
                return stream.read(length)
        return archive.read(name)
    except _ZIP_ERRORS as error:
        raise FormatError(f"{where}: archive member {name!r} cannot be read "
                          f"({type(error).__name__}: {error}); the file is truncated or "
                          "damaged.") from None


def member_data(archive: zipfile.ZipFile, name: str, where: str, length: int) -> bytearray:
    """The first ``length`` bytes of member ``name``, in a new ``bytearray`` NumPy can use as
    it is: a stored member's bytes read straight into it, as they lie in the file (its CRC,
    which PyTorch may leave 0, is not checked); a deflated member's decompressed no further
    than ``length``, CRC checked when read whole."""
    if archive.getinfo(name).compress_type != zipfile.ZIP_STORED:
        return bytearray(read_member(archive, name, where, length=length))
    try:
        return _stored(archive, archive.getinfo(name), where,
                       min(length, archive.getinfo(name).file_size))
    except _ZIP_ERRORS as error:
        raise FormatError(f"{where}: archive member {name!r} cannot be read "
                          f"({type(error).__name__}: {error}); the file is truncated or "
                          "damaged.") from None


def _stored(archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str,
            count: int) -> bytearray:
    """The first ``count`` bytes of stored member ``info``, from behind its local header."""
    file: Any = archive.fp
    if file is None:
        raise ValueError("the archive is closed")
    file.seek(info.header_offset)
    header = file.read(30)
    if len(header) < 30 or header[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile("its local header is missing")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    file.seek(info.header_offset + 30 + name_length + extra_length)
    data = bytearray(count)
    got = file.readinto(data)
    if got is None or got < count:
        raise FormatError(f"{where}: archive member {info.filename!r} holds {got or 0:,} of "
                          f"its {count:,} bytes; the file is truncated.")
    return data


def load_npy(path: str | os.PathLike[str], where: str) -> np.ndarray:
    """The array of the ``.npy`` file at ``path``, read as :func:`read_npy` reads bytes."""
    return read_npy(inputs.read_file(path, where), where)


def read_npy(data: bytes, where: str) -> np.ndarray:
    """An ``.npy`` file's array from its bytes, never unpickling, size checked against them."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
        elif version in ((2, 0), (3, 0)):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        else:
            raise ValueError(f"format version {version}")
    except MemoryError:
        raise
    except Exception as error:  # NumPy parses the header with ast and tokenize
        raise FormatError(f"{where}: not a readable .npy array ({type(error).__name__}: "
                          f"{error}); the file is damaged.") from None
    if dtype.hasobject:
        raise DTypeError(f"{where}: an array of Python objects, which only unpickling could "
                         "load; rnnport never unpickles. Save plain numeric arrays.")
    if dtype.kind not in "biufcSU" or dtype.names is not None or dtype.subdtype is not None \
            or dtype.itemsize == 0:
        raise DTypeError(f"{where}: dtype {dtype} is not a plain numeric or text dtype; "
                         "rnnport reads no other.")
    if len(shape) > 32 or not all(isinstance(dim, int) and dim >= 0 for dim in shape):
        raise FormatError(f"{where}: the header gives shape {shape!r}; expected at most 32 "
                          "non-negative sizes. The file is damaged.")
    count = 1
    for dim in shape:
        count *= dim
    start = stream.tell()
    if count * dtype.itemsize != len(data) - start or (count == 0 and any(
            dim > 2**40 for dim in shape)):
        raise FormatError(f"{where}: the header gives shape {shape} of {dtype} "
                          f"({count * dtype.itemsize:,} bytes), but {len(data) - start:,} "
                          "follow it; the file is truncated or damaged.")
    array = np.frombuffer(bytearray(memoryview(data)[start:]), dtype=dtype)
    if dtype.kind == "U" and array.size and \
            int(array.view(dtype.byteorder.replace("|", "=") + "u4").max()) > 0x10FFFF:
        raise FormatError(f"{where}: a text array holding a code point past U+10FFFF, which no "
                          "text has; the file is damaged.")
    try:
        return array.reshape(shape[::-1]).transpose() if fortran else array.reshape(shape)
    except ValueError as error:  # a shape NumPy itself cannot make
        raise FormatError(f"{where}: shape {shape} of {dtype} cannot be built ({error}); the "
                          "file is damaged.") from None
