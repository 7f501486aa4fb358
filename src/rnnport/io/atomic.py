"""Atomic file output: write to a temporary file beside the target, then rename.

A reader never sees a half-written file, and a failure leaves any previous file intact.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import FormatError

__all__ = ["NUMPY_ARCHIVE", "atomic_write", "atomic_write_all", "check_outputs", "check_target",
           "file_mode", "save_archive", "save_npy"]

NUMPY_ARCHIVE = ".npz"  # the suffix of numpy.savez's archives, by which readers tell them


def check_target(path: str | os.PathLike[str]) -> Path:
    """``path`` as a file that can be written: its folder exists and it is not a folder."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise FormatError(f"{target}: the folder {folder} does not exist; create it first "
                          f"(mkdir -p {shlex.quote(str(folder))}) or choose another output "
                          "path. Nothing was written.")
    if target.is_dir():
        raise FormatError(f"{target}: is a folder; expected a file path. Nothing was written.")
    return target


def check_outputs(outputs: Sequence[Path], inputs: Sequence[Path], overwrite: bool,
                  how: str) -> None:
    """Before any work: every output can be written, is none of the inputs, and replaces
    nothing unless ``overwrite``; ``how`` says how to allow that (``pass --force``)."""
    sources = {path.resolve() for path in inputs}
    existing = [path for path in inputs if path.exists()]
    for path in outputs:
        check_target(path)
        if path.resolve() in sources or (path.exists() and any(
                os.path.samefile(path, source) for source in existing)):
            raise FormatError(f"{path}: is the input file; rnnport never writes over its input. "
                              "Choose another output path. Nothing was written.")
        if os.path.lexists(path) and not overwrite:
            raise FormatError(f"{path}: exists; {how} to replace it. Nothing was written.")


def atomic_write(path: str | os.PathLike[str], write: Callable[[BinaryIO], Any]) -> Path:
    """Call ``write(file)`` on a temporary file in ``path``'s folder, then rename it to ``path``."""
    return atomic_write_all([(path, write)])[0]


def atomic_write_all(
    files: Sequence[tuple[str | os.PathLike[str], Callable[[BinaryIO], Any]]],
) -> list[Path]:
    """Write several files that belong together (a checkpoint's data and index): each to a
    temporary file first, in order, then rename them all in the same order. A failure
    leaves none of them half-written and removes every temporary file."""
    targets = [check_target(path) for path, _ in files]
    temporaries: list[str] = []
    try:
        for target, (_, write) in zip(targets, files, strict=True):
            folder = target.parent if str(target.parent) else Path(".")
            try:
                handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.",
                                                     suffix=".partial", dir=folder)
            except OSError as error:
                raise FormatError(f"{target}: cannot create a file in {folder} "
                                  f"({error.strerror or error}); choose a folder you can write "
                                  "to. Nothing was written.") from None
            temporaries.append(temporary)
            os.chmod(temporary, file_mode())
            with os.fdopen(handle, "wb") as file:
                write(file)
                file.flush()
                os.fsync(file.fileno())
        for temporary, target in zip(temporaries, targets, strict=True):
            os.replace(temporary, target)
    except BaseException:
        for temporary in temporaries:
            try:
                os.unlink(temporary)
            except FileNotFoundError:
                pass
        raise
    return targets


def file_mode() -> int:
    """The mode ``open()`` would give a new file (0o666 less the umask); mkstemp's is 0o600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


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
