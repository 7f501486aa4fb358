"""Atomic file output: write to a temporary file beside the target, then rename.

What a write guarantees, crash (even ``kill -9``) and concurrent writers included:

* A reader never sees a half-written file: each file is written to a temporary
  ``.NAME.XXXXXXXX.partial`` in the target's folder, flushed to disk, then renamed in.
* A failure leaves any previous file intact, and removes every temporary it made. A
  process killed mid-write leaves its temporary behind; the next write to the same target
  removes it. Each writer holds an exclusive ``flock`` on its temporary until it is done,
  and only temporaries nobody holds are removed (where ``flock`` is missing, those older
  than :data:`STALE_AFTER` seconds), so a live writer's temporary is never touched.
* Replacing is decided at the rename, not only before the write. Within
  :func:`replacing` ``(False)`` a target is only ever created: the rename cannot replace a
  file (a hard link, else ``renameat2(RENAME_NOREPLACE)``, else an ``O_EXCL`` claim), so
  of two processes creating one file, exactly one succeeds and the other's write is a
  :class:`~rnnport.errors.FormatError` that leaves the winner's file alone. Within
  ``replacing(True)`` a target is replaced (``os.replace``). Outside both (a writer called
  directly, not through ``rnnport.write``, ``rnnport.convert`` or the command line), a
  target that exists when the write begins is replaced, and a new one is created as with
  ``replacing(False)``: a file that appears meanwhile is never overwritten.
* The operating system's errors (a NUL byte in a path, a name too long, a folder that is
  read-only, a full disk, a failed rename) are FormatErrors that name the path and the
  system's reason, and say that nothing was written. A full disk (``ENOSPC``), a file larger
  than the process may write (``EFBIG``, ``ulimit -f``) and a used-up quota (``EDQUOT``) are
  named as such, with the bytes the file needed at least and those free. Every writer
  writes through the same file object (:class:`_Output`), which counts what it was asked to
  write and hands every write to the system with Python's own calls, so that a failed write
  keeps its reason whatever library writes the bytes (NumPy's ``tofile``, used on real
  files, reports a short write without it: "N requested and M written").
* A package folder (a :class:`~.packages.Package` a format declares: an output whose name
  ends in its suffix, written as a folder holding its marker file) is written the same way
  by :func:`atomic_write_folder`: filled in a temporary folder ``.NAME.XXXXXXXX.partial``
  (locked as a temporary file is, and removed as stale as one is), then renamed in whole.
  Replacing one swaps the two folders in one step (``renameat2(RENAME_EXCHANGE)``;
  elsewhere the old one is renamed aside, the new one in, and the old one back should that
  fail), then removes the old one. Only a package folder
  (or a file) is ever replaced: never any other folder.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import shlex
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import FormatError
from .packages import Package

try:
    import fcntl
except ImportError:  # pragma: no cover - a system without flock
    fcntl = None  # type: ignore[assignment]

__all__ = ["NUMPY_ARCHIVE", "STALE_AFTER", "atomic_write", "atomic_write_all",
           "atomic_write_folder", "check_outputs", "check_target", "folder_lock",
           "overwrite_setting", "remove_stale_temporaries", "remove_stale_temporaries_in",
           "replaces", "replacing", "save_archive", "save_npy", "shown", "swept",
           "system_error"]

NUMPY_ARCHIVE = ".npz"  # the suffix of numpy.savez's archives, by which readers tell them

STALE_AFTER = 3600.0  # seconds: a temporary this old is abandoned, where flock is missing
_SUFFIX = ".partial"
_LETTERS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # the random part of a temporary's name
_RANDOM = 8
# Errors by which a file system says it has no hard links (the commit then renames).
_NO_LINKS = frozenset(code for code in (
    errno.EPERM, errno.ENOTSUP, getattr(errno, "EOPNOTSUPP", errno.ENOTSUP), errno.EXDEV,
    errno.EMLINK, errno.ENOSYS, errno.EINVAL) if code is not None)


@dataclass(frozen=True)
class _Replacing:
    overwrite: bool
    how: str
    protected: frozenset[Path] = frozenset()  # real paths of the files the read opened


_REPLACING: ContextVar[_Replacing | None] = ContextVar("rnnport_replacing", default=None)
_SWEPT: ContextVar[bool] = ContextVar("rnnport_swept", default=False)  # see swept()


@contextlib.contextmanager
def replacing(overwrite: bool, how: str = "pass overwrite=True",
              protected: Sequence[Path] = ()) -> Iterator[None]:
    """Within the block, writes replace existing targets only when ``overwrite``; ``how``
    says, in the error for a target that appeared meanwhile, how to allow replacing it.
    No write in the block, of any file a format writes, may be one of ``protected`` (the
    files a conversion's read opened): checked before any of its files is written."""
    token = _REPLACING.set(_Replacing(bool(overwrite), how,
                                      frozenset(path.resolve() for path in protected)))
    try:
        yield
    finally:
        _REPLACING.reset(token)


def overwrite_setting() -> bool | None:
    """What the innermost :func:`replacing` block says; ``None`` outside any."""
    setting = _REPLACING.get()
    return None if setting is None else setting.overwrite


def replaces(target: Path) -> bool:
    """Whether a write to ``target`` that starts now may replace a file there (see the
    module docstring: what :func:`replacing` says, else whether one exists now)."""
    setting = overwrite_setting()
    return os.path.lexists(target) if setting is None else setting


def shown(path: str | os.PathLike[str]) -> str:
    """A path for a message: as written, but a NUL byte escaped, and a name thousands of
    characters long cut in the middle (with its length)."""
    text = os.fspath(path)
    text = text if isinstance(text, str) else os.fsdecode(text)
    if "\0" in text:
        text = text.replace("\0", "\\x00")
    if len(text) > 200:
        return f"{text[:80]}…{text[-60:]} ({len(text):,} characters)"
    return text


def system_error(path: str | os.PathLike[str], doing: str, error: OSError | ValueError,
                 fix: str, *, needed: int = 0, descriptor: int | None = None) -> FormatError:
    """The FormatError for an operating-system error while ``doing`` something to
    ``path``: the system's reason kept, and ``fix`` said. For a full disk, a file too large
    or a used-up quota, ``needed`` (the bytes the file needs at least, when known) and the
    open ``descriptor`` of the partly written file (to tell the space free) say more."""
    if isinstance(error, ValueError):  # Python refuses a NUL byte before the system sees it
        reason = f"the system says: {error}: the path contains a NUL byte, which no file name " \
                 "may hold"
        fix = "remove the NUL byte (\\x00) from the path"
    else:
        reason = f"the system says: {error.strerror or error}"
        if error.errno == errno.ENAMETOOLONG:
            fix = (f"choose a shorter name (writing adds {len(_SUFFIX) + _RANDOM + 2} "
                   "characters to it for a moment)")
        elif error.errno in _NO_ROOM:
            reason, fix = _no_room(error, needed, descriptor)
        elif error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            fix = "choose a folder you can write to"
    return FormatError(f"{shown(path)}: cannot {doing}; {reason}. "
                       f"{fix[:1].upper()}{fix[1:]}. Nothing was written.")


# Errors by which the system says a file does not fit: what each means, and what to do.
_NO_ROOM = {
    errno.ENOSPC: ("the disk is full (ENOSPC: {reason})", "free some space or choose another "
                                                          "folder"),
    errno.EFBIG: ("the file is larger than this process may write (EFBIG: {reason}; the "
                  "limit here is {limit})", "raise the limit (ulimit -f) or write a smaller model"),
    **({errno.EDQUOT: ("the disk quota is used up (EDQUOT: {reason})",
                       "free some of your space or choose another folder")}
       if hasattr(errno, "EDQUOT") else {}),
}


def _no_room(error: OSError, needed: int, descriptor: int | None) -> tuple[str, str]:
    """What a full disk, a file too large or a used-up quota says: the reason, with the
    bytes the file needs at least and those free where known, and the fix."""
    what, fix = _NO_ROOM[error.errno or 0]
    limit = "unknown"
    with contextlib.suppress(ImportError, OSError, ValueError, AttributeError):
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        limit = "no limit" if soft == resource.RLIM_INFINITY else f"{soft:,} bytes"
    reason = what.format(reason=error.strerror or error, limit=limit)
    free = None
    if descriptor is not None and error.errno == errno.ENOSPC:
        with contextlib.suppress(OSError, AttributeError):
            space, held = os.fstatvfs(descriptor), os.fstat(descriptor)
            # What was free before this write: the partly written file's blocks count.
            free = space.f_bavail * space.f_frsize + held.st_blocks * 512
    if needed:
        reason += f": the file needs at least {needed:,} bytes"
        if free is not None:
            reason += f", and {free:,} were free there"
    return reason, fix


class _Output(io.BufferedIOBase):
    """The file a writer fills: the temporary's buffered file, seekable, whose furthest byte
    asked for is counted (``needed``: what a full disk's message says the file needs at
    least). NumPy does not take it for a real file (``numpy.lib.format.isfileobj``), so
    ``numpy.save`` writes through :meth:`write` too, and a failed write keeps its reason."""

    def __init__(self, file: io.BufferedWriter) -> None:
        super().__init__()
        self._file = file
        self.needed = 0

    def write(self, data: Any) -> int:
        size = memoryview(data).nbytes
        self.needed = max(self.needed, self._file.tell() + size)
        return self._file.write(data)

    def tell(self) -> int:
        return self._file.tell()

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        return self._file.seek(offset, whence)

    def flush(self) -> None:
        self._file.flush()

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True


def check_target(path: str | os.PathLike[str], *, package: Package | None = None) -> Path:
    """``path`` as a file that can be written: its folder exists and it is not a folder
    (with ``package``, the path of such a package folder, which may replace one)."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        if "\0" in str(target):
            raise ValueError("embedded null byte")
        folder_exists, is_folder = folder.is_dir(), target.is_dir()
    except (OSError, ValueError) as error:
        raise system_error(target, "be written", error, "choose another output path") from None
    if not folder_exists:
        raise FormatError(f"{target}: the folder {folder} does not exist; create it first "
                          f"(mkdir -p {shlex.quote(str(folder))}) or choose another output "
                          "path. Nothing was written.")
    if is_folder and package is not None and not package.holds(target):
        raise FormatError(package.refusal(str(target)))
    if is_folder and package is None:
        raise FormatError(f"{target}: is a folder; expected a file path. Nothing was written.")
    return target


def _holds(folder: Path, paths: Iterable[Path]) -> Path | None:
    """The first of ``paths`` (real paths) inside the folder ``folder`` names, if any."""
    try:
        resolved = folder.resolve()
    except (OSError, ValueError, RuntimeError):
        return None
    return next((path for path in paths if resolved in path.parents), None)


def check_outputs(outputs: Sequence[Path], inputs: Sequence[Path], overwrite: bool,
                  how: str, package: Package | None = None) -> None:
    """Before any work: every output can be written, is none of the inputs (nor, for a
    package folder, holds one), and replaces nothing unless ``overwrite``; ``how`` says how
    to allow that (``pass --force``). An output ``package`` names is a package folder, which
    may replace one there. (The write itself
    enforces ``overwrite=False`` again when it renames: see :func:`replacing`.)"""
    for path in outputs:
        check_target(path, package=package if package is not None and package.names(path)
                     else None)
    usable = []
    for path in inputs:  # an input the system cannot name cannot be an output either
        try:
            usable.append((path.resolve(), path.exists(), path))
        except (OSError, ValueError):
            continue
    sources = {resolved for resolved, _, _ in usable}
    existing = [path for _, exists, path in usable if exists]
    for path in outputs:
        try:
            is_input = path.resolve() in sources or (path.exists() and any(
                os.path.samefile(path, source) for source in existing))
            exists = os.path.lexists(path)
        except OSError as error:
            raise system_error(path, "be written", error, "choose another output path") \
                from None
        if is_input:
            raise FormatError(f"{path}: is the input file; rnnport never writes over its input. "
                              "Choose another output path. Nothing was written.")
        held = _holds(path, sources) if package is not None and package.names(path) \
            and exists else None
        if held is not None:
            raise FormatError(f"{path}: holds the input file {held}; rnnport never writes over "
                              "its input. Choose another output path. Nothing was written.")
        if exists and not overwrite:
            raise FormatError(f"{path}: exists; {how} to replace it. Nothing was written.")


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], Any], *,
                 replace: bool | None = None) -> Path:
    """Call ``write(file)`` on a temporary file in ``path``'s folder, then rename it to
    ``path``; ``replace`` (``None``: as :func:`replacing` says) whether that may replace a
    file there."""
    return atomic_write_all([(path, write)], replace=None if replace is None else [replace])[0]


def atomic_write_all(
    files: Sequence[tuple[str | os.PathLike[str], Callable[[BinaryIO], Any]]], *,
    replace: Sequence[bool] | None = None,
) -> list[Path]:
    """Write several files that belong together: each to a temporary file first, in order,
    then rename them all in the same order (``replace``: for each, whether its rename may
    replace a file; ``None``: as :func:`replacing` says). The targets' stale temporaries
    are removed first (:func:`remove_stale_temporaries`, a look through the folder), unless
    the caller swept the folder itself (:func:`swept`).

    A failure removes every temporary file, and every file this call had already created;
    a file it had already *replaced* stays replaced (a caller whose files must change
    together, as a checkpoint's do, names the new ones apart from the old; see
    :func:`rnnport.io.tensorbundle.write_bundle`)."""
    targets = [check_target(path) for path, _ in files]
    _check_protected(targets)
    replacing_each = list(replace) if replace is not None else [replaces(t) for t in targets]
    temporaries: list[_Temporary] = []
    created: list[tuple[Path, os.stat_result]] = []
    try:
        for target, (_, write) in zip(targets, files, strict=True):
            if not _SWEPT.get():
                remove_stale_temporaries(target)
            temporary = _Temporary.create(target)
            temporaries.append(temporary)
            temporary.fill(write)
        for temporary, target, may_replace in zip(temporaries, targets, replacing_each,
                                                  strict=True):
            temporary.commit(may_replace)
            if not may_replace:
                created.append((target, temporary.status))
        _sync_folders(targets)
    except BaseException:
        for temporary in temporaries:
            temporary.discard()
        for target, status in created:
            _remove_if_same(target, status)
        raise
    finally:
        for temporary in temporaries:
            temporary.close()
    return targets


def _check_protected(targets: Sequence[Path], folder: bool = False) -> None:
    """Refuse, before anything is written, a target that is a file the read opened (or,
    with ``folder``, a package folder that holds one)."""
    setting = _REPLACING.get()
    if setting is None or not setting.protected:
        return
    for target in targets:
        try:
            resolved = target.resolve()
            same = resolved in setting.protected or (target.exists() and any(
                os.path.samefile(target, source) for source in setting.protected
                if source.exists()))
        except (OSError, ValueError):
            continue
        if same or (folder and _holds(target, setting.protected) is not None):
            raise FormatError(f"{shown(target)}: is (or holds) a file the read of this "
                              "conversion opened; rnnport never writes over its input. Choose "
                              "another output path. Nothing was written.")


def atomic_write_folder(path: str | os.PathLike[str], fill: Callable[[Path], Any],
                        package: Package, *, replace: bool | None = None) -> Path:
    """Call ``fill(folder)`` on a new temporary folder beside ``path``, then rename it to
    ``path``: a ``package`` folder (see the module docstring); ``replace`` (``None``: as
    :func:`replacing` says) whether that may replace such a folder or a file there."""
    target = check_target(path, package=package)
    _check_protected([target], folder=True)
    may_replace = replaces(target) if replace is None else replace
    if not _SWEPT.get():
        remove_stale_temporaries(target)
    temporary = _TemporaryFolder.create(target, package)
    try:
        try:
            fill(temporary.path)
        except OSError as error:
            raise system_error(target, "be written", error, "choose another output path") \
                from None
        temporary.commit(may_replace)
        _sync_folders([target])
    except BaseException:
        temporary.discard()
        raise
    finally:
        temporary.close()
    return target


def _create_locked(target: Path, make: Callable[[Path], int], what: str) -> tuple[Path, int]:
    """A new temporary ``what`` (file or folder) beside ``target`` under a random name,
    made and opened by ``make`` (FileExistsError: the name is taken), and locked. Another
    write's clean-up may take it for an abandoned one between its creation and the lock:
    then it is gone, and another name is tried."""
    folder = target.parent if str(target.parent) else Path(".")
    for _ in range(100):
        name = "".join(secrets.choice(_LETTERS) for _ in range(_RANDOM))
        path = folder / f".{target.name}.{name}{_SUFFIX}"
        try:
            descriptor = make(path)
        except FileExistsError:
            continue
        except OSError as error:
            raise system_error(target, f"create a {what} in {shown(folder)}", error,
                               "choose a folder you can write to") from None
        if fcntl is not None:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            try:
                same = _same_file(os.lstat(path), os.fstat(descriptor))
            except OSError:
                same = False
            if not same:
                os.close(descriptor)
                continue
        return path, descriptor
    raise FormatError(f"{shown(target)}: cannot create a temporary {what} in {shown(folder)}; "
                      "expected one of 100 random names to be free. Nothing was written.")


def _appeared(target: Path, what: str) -> FormatError:
    """The error for an output another process created while rnnport wrote it (``what``:
    "a file", "one")."""
    setting = _REPLACING.get()
    how = setting.how if setting is not None else "pass overwrite=True"
    return FormatError(
        f"{shown(target)}: appeared while rnnport was writing it; expected to create it "
        f"(nothing is replaced without overwrite), got {what} another process wrote "
        f"meanwhile, which is left as it is. {how[:1].upper()}{how[1:]} to replace it. "
        "Nothing was written.")


class _TemporaryFolder:
    """One locked temporary folder beside its target (a package folder being written)."""

    def __init__(self, target: Path, package: Package, path: Path, descriptor: int) -> None:
        self.target, self.package, self.path, self.descriptor = target, package, path, descriptor
        self.status = os.fstat(descriptor)
        self.committed = False

    @classmethod
    def create(cls, target: Path, package: Package) -> _TemporaryFolder:
        def make(path: Path) -> int:
            os.mkdir(path, 0o777)
            try:
                return os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
                               | getattr(os, "O_CLOEXEC", 0))
            except FileNotFoundError:  # removed before the open: another name is tried
                raise FileExistsError(path) from None

        path, descriptor = _create_locked(target, make, "folder")
        return cls(target, package, path, descriptor)

    def commit(self, may_replace: bool) -> None:
        """Rename the folder to the target: replacing a package folder or a file there
        only when ``may_replace``, in one step where the system can swap two names."""
        try:
            try:
                _rename_folder_no_replace(self.path, self.target)
            except FileExistsError:
                if not may_replace:
                    raise _appeared(self.target, "one") from None
                self._swap()
        except OSError as error:
            raise system_error(self.target, "be renamed into place", error,
                               "check the folder and try again") from None
        self.committed = True

    def _swap(self) -> None:
        if stat.S_ISDIR(os.lstat(self.target).st_mode) and not self.package.holds(self.target):
            raise FormatError(self.package.refusal(shown(self.target)))
        if _renameat2(self.path, self.target, _RENAME_EXCHANGE):
            old = self.path  # the old package now lies under the temporary's name
        else:
            folder = self.target.parent if str(self.target.parent) else Path(".")
            old = folder / (f".{self.target.name}."
                            f"{''.join(secrets.choice(_LETTERS) for _ in range(_RANDOM))}{_SUFFIX}")
            os.rename(self.target, old)
            try:
                os.rename(self.path, self.target)
            except BaseException:
                os.rename(old, self.target)
                raise
        self.committed = True
        _remove_tree(old)

    def discard(self) -> None:
        if not self.committed:
            with contextlib.suppress(OSError):
                if _same_file(os.lstat(self.path), self.status):
                    _remove_tree(self.path)

    def close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


def _remove_tree(path: Path) -> None:
    """Remove a file or a folder and all it holds (links are removed, never followed)."""
    import shutil

    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def _rename_folder_no_replace(source: Path, target: Path) -> None:
    """Rename the folder ``source`` to ``target``, raising FileExistsError rather than
    replacing anything there: ``renameat2(RENAME_NOREPLACE)``; where the system has none,
    a claim of the name with ``mkdir``, then a rename over the empty claim."""
    if _renameat2(source, target, _RENAME_NOREPLACE):
        return
    os.mkdir(target)
    try:
        os.rename(source, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.rmdir(target)
        raise


class _Temporary:
    """One locked temporary file beside its target."""

    def __init__(self, target: Path, path: Path, descriptor: int) -> None:
        self.target, self.path, self.descriptor = target, path, descriptor
        self.status = os.fstat(descriptor)
        self.committed = False

    @classmethod
    def create(cls, target: Path) -> _Temporary:
        def make(path: Path) -> int:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                           | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0), 0o666)

        path, descriptor = _create_locked(target, make, "file")
        return cls(target, path, descriptor)

    def fill(self, write: Callable[[BinaryIO], Any]) -> None:
        file = os.fdopen(self.descriptor, "wb", closefd=False)
        output = _Output(file)
        try:
            with file:
                write(output)  # type: ignore[arg-type]  # a BinaryIO in all a writer uses
                file.flush()
                os.fsync(self.descriptor)
        except OSError as error:
            raise system_error(self.target, "be written", error, "choose another output path",
                               needed=output.needed, descriptor=self.descriptor) from None
        self.status = os.fstat(self.descriptor)

    def commit(self, may_replace: bool) -> None:
        if fcntl is None:  # some systems cannot rename an open file; there is no lock to keep
            self.close()
        try:
            if may_replace:
                os.replace(self.path, self.target)
            else:
                _rename_no_replace(self.path, self.target)
        except FileExistsError:
            raise _appeared(self.target, "a file") from None
        except OSError as error:
            raise system_error(self.target, "be renamed into place", error,
                               "check the folder and try again") from None
        self.committed = True

    def discard(self) -> None:
        if not self.committed:
            with contextlib.suppress(OSError):
                if _same_file(os.lstat(self.path), self.status):
                    os.unlink(self.path)

    def close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


def _same_file(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_ino, one.st_dev) == (other.st_ino, other.st_dev)


def _remove_if_same(path: Path, status: os.stat_result) -> None:
    """Remove ``path`` if it is still the file ``status`` describes (one this call made)."""
    with contextlib.suppress(OSError):
        if _same_file(os.lstat(path), status):
            os.unlink(path)


def _rename_no_replace(source: Path, target: Path) -> None:
    """Rename ``source`` to ``target``, raising FileExistsError rather than replacing a file
    there: a hard link then an unlink; where the file system has no hard links,
    ``renameat2(RENAME_NOREPLACE)``; else a claim of the name with ``O_EXCL``, then a rename
    over the claim (a reader may see the empty claim for that instant)."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise
    except (OSError, NotImplementedError, AttributeError) as error:
        if isinstance(error, OSError) and error.errno not in _NO_LINKS:
            raise
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(source)
        return
    if _renameat2(source, target, _RENAME_NOREPLACE):
        return
    claim = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.close(claim)
    try:
        os.replace(source, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(target)
        raise


_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2  # renameat2's flags (linux/fs.h)


def _renameat2(source: Path, target: Path, flags: int) -> bool:
    """``renameat2(source, target, flags)``: ``RENAME_NOREPLACE`` or ``RENAME_EXCHANGE``;
    False where the system or the file system has no such call."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        call = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_current_folder = -100
    if call(at_current_folder, os.fsencode(source), at_current_folder, os.fsencode(target),
            flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    if code == errno.EEXIST:
        raise FileExistsError(code, os.strerror(code), str(target))
    raise OSError(code, os.strerror(code), str(target))


def _sync_folders(targets: Sequence[Path]) -> None:
    """Flush the renames to disk, where a folder can be opened for that."""
    for folder in {target.parent if str(target.parent) else Path(".") for target in targets}:
        with contextlib.suppress(OSError, AttributeError):
            descriptor = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)


def remove_stale_temporaries(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries of earlier writes to ``target`` that were killed before they
    finished: the files (and a package write's folders) named ``.NAME.XXXXXXXX.partial``
    beside it that no live writer holds locked (where ``flock`` is missing: older than
    :data:`STALE_AFTER`). Returns those removed; anything that cannot be looked at is left
    alone."""
    target = Path(target)
    return remove_stale_temporaries_in(target.parent if str(target.parent) else Path("."),
                                       {target.name})


@contextlib.contextmanager
def swept() -> Iterator[None]:
    """Writes in the block skip looking for stale temporaries: the caller, writing many
    files into one folder, removed them with :func:`remove_stale_temporaries_in` first (a
    look through the folder for each file would make many files cost their square)."""
    token = _SWEPT.set(True)
    try:
        yield
    finally:
        _SWEPT.reset(token)


def remove_stale_temporaries_in(folder: str | os.PathLike[str],
                                names: Iterable[str]) -> list[Path]:
    """:func:`remove_stale_temporaries` for every target of ``names`` in ``folder``, in one
    look through the folder."""
    folder = Path(folder)
    wanted = set(names)
    pattern = re.compile(r"\.(.+)\." + f"[{_LETTERS}]{{{_RANDOM}}}" + re.escape(_SUFFIX))
    removed: list[Path] = []
    try:
        stale = [entry.name for entry in os.scandir(folder)
                 if (found := pattern.fullmatch(entry.name)) and found[1] in wanted]
    except OSError:
        return removed
    for name in stale:
        if _remove_if_abandoned(folder / name):
            removed.append(folder / name)
    return removed


def _remove_if_abandoned(path: Path) -> bool:
    if fcntl is None:
        try:
            status = os.lstat(path)
            if (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)) and \
                    time.time() - status.st_mtime > STALE_AFTER:
                _remove_tree(path)
                return True
        except OSError:
            pass
        return False
    try:
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                             | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        status = os.fstat(descriptor)
        if not (stat.S_ISREG(status.st_mode) or stat.S_ISDIR(status.st_mode)):
            return False
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live writer holds it
        if not _same_file(os.lstat(path), status):
            return False
        if stat.S_ISDIR(status.st_mode):
            _remove_tree(path)
        else:
            os.unlink(path)
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)


_HELD = threading.local()  # folder → how many times this thread holds its lock


@contextlib.contextmanager
def folder_lock(folder: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` for the block, so that writers of files
    that must change together there (a checkpoint and its folder's state file) take turns.
    Re-entrant in one thread; a no-op where the folder cannot be opened or there is no
    ``flock``. The lock is the kernel's: a killed writer releases it."""
    key = os.path.realpath(folder or ".")
    held: dict[str, int] = _HELD.__dict__.setdefault("counts", {})
    if held.get(key) or fcntl is None:
        held[key] = held.get(key, 0) + 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    try:
        descriptor = os.open(key, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        descriptor = -1
    try:
        if descriptor >= 0:
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX)
            except OSError:
                pass
        held[key] = 1
        try:
            yield
        finally:
            held[key] = 0
    finally:
        if descriptor >= 0:
            os.close(descriptor)


def save_npy(path: str | os.PathLike[str], array: np.ndarray) -> Path:
    """Save one array as ``.npy`` atomically (the name is used as given)."""
    return atomic_write(path, lambda file: np.save(file, array, allow_pickle=False))


def save_archive(path: str | os.PathLike[str], arrays: Mapping[str, np.ndarray],
                 where: str) -> Path:
    """Save ``arrays`` as one NumPy archive (``numpy.savez``), atomically; ``path`` must end
    in :data:`NUMPY_ARCHIVE`."""
    if Path(path).suffix.lower() != NUMPY_ARCHIVE:
        raise FormatError(f"{where}: {str(path)!r} should end in {NUMPY_ARCHIVE}, the suffix of "
                          "NumPy's archives, by which numpy.load and rnnport tell them. Nothing "
                          "was written.")
    return atomic_write(path, lambda file: np.savez(file, allow_pickle=False, **arrays))
