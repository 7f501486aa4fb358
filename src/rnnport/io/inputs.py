"""The files a read opens, checked, opened and recorded in one place.

Every reader opens its files through :func:`open_file` or :func:`read_file`, or, for a
library that opens a path itself (zipfile, the HDF5 child process), takes the path from
:func:`checked`. Each of them:

* refuses anything but a regular file, saying what it is: a folder, a FIFO (which would
  block the read for ever), a device, a socket;
* for a file that another file names (a checkpoint's index and shards named by its
  ``checkpoint`` state file, a SavedModel's variables, ONNX external data: ``inside`` the
  folder it was named from), refuses a name that is absolute, holds a drive, a NUL byte or
  ``..``, or is longer than a file system allows (:data:`NAME_MAX` bytes a part, with what
  the reader appends to it; looked up, it would fail), and a file whose real path lies
  outside that folder (a link leading out);
* records the file's real path in the read being recorded (:func:`recording`), so that no
  output of a conversion can replace any file its read opened, whatever the format: the
  record is what the reader really opened, not what a format says it will.

A file is opened with ``O_NONBLOCK`` and checked on its open descriptor, so a regular
file swapped for a FIFO between the check and the open is refused too. A reader that asks
whether a file is there (:func:`is_file`) learns it, or gets an error that says why the
system could not look (a name too long, a folder it may not search).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import BinaryIO

from ..errors import FormatError
from .atomic import shown

__all__ = ["NAME_MAX", "check_name", "checked", "is_file", "kind_of_file", "note", "open_file",
           "opened", "read_file", "recording"]

NAME_MAX = 255  # bytes in one part of a path: the limit of Linux's file systems, and most others

_RECORD: contextvars.ContextVar[list[Path] | None] = contextvars.ContextVar(
    "rnnport_opened", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[Path]]:
    """Within the block, every file a read opens is appended (by its real path) to the list
    yielded; blocks nest, each keeping its own list and adding to the outer one."""
    outer = _RECORD.get()
    record: list[Path] = []
    token = _RECORD.set(record)
    try:
        yield record
    finally:
        _RECORD.reset(token)
        if outer is not None:
            outer.extend(record)


def opened() -> list[Path]:
    """The files recorded so far in the innermost :func:`recording` block (none outside)."""
    return list(_RECORD.get() or [])


def _record(path: Path) -> None:
    record = _RECORD.get()
    if record is not None and path not in record:
        record.append(path)


def kind_of_file(mode: int) -> str | None:
    """What a file of ``mode`` is when it is no regular file ("a FIFO (named pipe)" …), or
    None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a character device" if stat.S_ISCHR(mode) else "a block device"
            if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "no regular file")


def _not_regular(where: str, path: str | os.PathLike[str], kind: str) -> FormatError:
    subject = "" if os.fspath(path) in where else f"{os.fspath(path)} "
    return FormatError(f"{where}: {subject}is {kind}, not a file; rnnport reads regular files "
                       "only (a pipe or a device could block the read for ever, or never end). "
                       "Give the path of the file itself.")


def _named_check(where: str, name: str, adds: str = "") -> None:
    """Refuse a file name, written in another file, that could lead out of its folder, or
    that no file can have (with ``adds``, what the reader appends to it)."""
    parts = PurePath(name.replace("\\", "/")).parts
    if not name or PurePath(name).is_absolute() or name.startswith(("/", "\\")) or \
            ".." in parts or ":" in name:
        raise FormatError(f"{where}: names the file {_preview(name)}; rnnport reads only files "
                          "named relative to the folder of the file naming them, without '..' "
                          "or a drive. Nothing was read.")
    check_name(where, name, adds=adds)


def check_name(where: str, name: str, *, adds: str = "") -> None:
    """Refuse a file name that another file gives (``name``; ``adds``: what the reader
    appends to it, a suffix) when a part of it is longer than :data:`NAME_MAX` bytes: the
    system would refuse to look it up (ENAMETOOLONG)."""
    parts = (name + adds).replace("\\", "/").split("/")
    longest = max(len(os.fsencode(part)) for part in parts)
    if longest > NAME_MAX:
        with_suffix = f" with the {adds!r} the reader adds" if adds else ""
        raise FormatError(f"{where}: names the file {_preview(name)}, a name of {longest:,} "
                          f"bytes{with_suffix}; expected at most {NAME_MAX} (because no file "
                          "system holds longer names). The file naming it is damaged or built "
                          "to break a reader. Nothing was read.")


def _preview(name: str) -> str:
    """``name`` for a message: quoted, and cut in the middle when long."""
    return repr(name) if len(name) <= 80 else f"{name[:40]!r}…{name[-20:]!r}"


def note(path: str | os.PathLike[str], where: str, *, inside: Path | None = None,
         name: str | None = None, descriptor: int | None = None, record: bool = True) -> Path:
    """Check and record a file a reader opened by itself (``descriptor``: the open file,
    which must be the one the path now names): its real path, inside ``inside`` when given
    (see the module docstring). Returns the real path."""
    text = os.fspath(path)
    shown = name if name is not None else text
    if "\0" in text:
        raise FormatError(f"{where}: the file name {shown!r} holds a NUL byte, which no file "
                          "name may; the file naming it is damaged.")
    if inside is not None and name is not None:
        _named_check(where, name)
    try:
        resolved = Path(text).resolve(strict=True)
        status = os.stat(resolved)
    except FileNotFoundError:
        beside = f" in {inside}; copy the file there, beside the file naming it" \
            if inside is not None else ""
        subject = "" if shown in where else f"{shown}: "
        raise FormatError(f"{where}: {subject}no such file{beside}.") from None
    except (OSError, RuntimeError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        subject = "" if shown in where else f"{shown} "
        raise FormatError(f"{where}: {subject}cannot be read; the system says: {reason}.") \
            from None
    if inside is not None:
        try:
            folder = inside.resolve(strict=True)
        except (OSError, RuntimeError):
            raise FormatError(f"{where}: the folder {inside} cannot be read.") from None
        if folder not in resolved.parents:
            raise FormatError(f"{where}: the file {shown!r} leads out of {inside} (a link, or a "
                              "path outside it); rnnport reads only files inside the folder "
                              "of the file naming them. Nothing was read.")
    if descriptor is not None:
        opened_status = os.fstat(descriptor)
        if (opened_status.st_dev, opened_status.st_ino) != (status.st_dev, status.st_ino):
            raise FormatError(f"{where}: {shown} was replaced while it was opened; read it "
                              "again.")
    kind = kind_of_file(status.st_mode)
    if kind is not None:
        raise _not_regular(where, shown, kind)
    if record:
        _record(resolved)
    return resolved


def checked(path: str | os.PathLike[str], where: str, *, inside: Path | None = None,
            name: str | None = None, record: bool = True) -> Path:
    """``path`` as the real path of a regular file a read may open, recorded (unless
    ``record`` is False: a file a write may update in place, such as a folder's checkpoint
    state, which keeps what it lists). With ``inside``, ``path`` was named by another file
    (``name``: the name as written there), and must stay inside the folder ``inside``; see
    the module docstring."""
    return note(path, where, inside=inside, name=name, record=record)


def open_file(path: str | os.PathLike[str], where: str, *, inside: Path | None = None,
              name: str | None = None, record: bool = True) -> BinaryIO:
    """The file at ``path``, checked as :func:`checked` says, open for reading."""
    resolved = checked(path, where, inside=inside, name=name, record=record)
    try:
        descriptor = os.open(resolved, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except OSError as error:
        raise FormatError(f"{where}: {resolved} cannot be opened; the system says: "
                          f"{error.strerror or error}.") from None
    try:
        kind = kind_of_file(os.fstat(descriptor).st_mode)
        if kind is not None:  # swapped since the check
            raise _not_regular(where, resolved, kind)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def head(path: str | os.PathLike[str], size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file at ``path`` (links followed), or None
    for anything else (a folder, a FIFO or a device, which could block or never end) and a
    file that cannot be read: what a format's ``sniff`` looks at. It is opened without
    blocking and checked open; nothing is recorded (a look, not a read)."""
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
                             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            return None
        with os.fdopen(descriptor, "rb") as file:
            return file.read(size)
    except OSError:
        return None


def is_file(path: str | os.PathLike[str], where: str) -> bool:
    """Whether ``path`` is a regular file (links followed), as ``Path.is_file`` says; but a
    path the system cannot look up for another reason than its absence (a name too long, a
    folder it may not search) is a FormatError that says why, not an OSError."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        if error.errno == errno.ELOOP:  # a loop of links: no file (as Path.is_file says)
            return False
        raise FormatError(f"{where}: {shown(path)} cannot be looked up; the system says: "
                          f"{error.strerror or error}. Check the path.") from None
    except ValueError:  # a NUL byte
        raise FormatError(f"{where}: the path {shown(path)} holds a NUL byte, which no file "
                          "name may.") from None


def read_file(path: str | os.PathLike[str], where: str, *, inside: Path | None = None,
              name: str | None = None, limit: int | None = None, record: bool = True) -> bytes:
    """The bytes of the file at ``path`` (checked as :func:`checked` says); refused before
    reading when it holds more than ``limit`` bytes."""
    with open_file(path, where, inside=inside, name=name, record=record) as file:
        size = os.fstat(file.fileno()).st_size
        if limit is not None and size > limit:
            raise FormatError(f"{where}: {os.fspath(path)} holds {size:,} bytes; expected at most "
                              f"{limit:,} for what it is. The file is damaged or built to exhaust "
                              "memory; nothing was read.")
        return file.read()
