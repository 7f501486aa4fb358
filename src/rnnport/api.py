"""The public verbs over the format registry: ``read``, ``write``, ``convert``,
``param_count``, and :class:`Conversion`, the checked plan that ``convert`` and the command
line both carry out."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import budget
from .errors import FormatError, UnknownOptionError, UnsupportedFeatureError
from .formats import get, info, input_files, output_files, part_path, resolve, split_options
from .formats._protocol import missing_feature
from .model import RNN, Model, Stack, shared_with_caller

__all__ = ["Conversion", "convert", "param_count", "per_part_paths", "read", "write"]


def read(source: Any, fmt: str | None = None, **options: Any) -> Model:
    """Read a network from ``source`` into the canonical model.

    ``fmt`` is one of :func:`rnnport.formats`; when omitted it is told from the source (a
    framework object's type, a state_dict's keys, a list of Keras arrays, a file's name).
    Returns an :class:`~rnnport.RNN`, or a :class:`~rnnport.Stack` when layers differ in
    size or cell.
    """
    if fmt is None and isinstance(source, (RNN, Stack)):
        if options:
            raise UnknownOptionError(f"read: options {sorted(options)} do not apply to an "
                                     "rnnport model, which is already canonical.")
        return source
    check_source(source, "read")
    return _within_limits(get(resolve(source, fmt)).read(source, **options), source)


def _within_limits(model: Model, source: Any) -> Model:
    """``model``, after checking that the network a file describes stays within the
    ``expansion`` limit for the file's size: the bound every format's reader shares (each
    also refuses, before allocating, what its own structure could multiply)."""
    if not isinstance(source, (str, os.PathLike)):
        return model
    try:
        files = {path.resolve() for path in input_files(source)}  # formats may name one twice
        size = sum(path.stat().st_size for path in files if path.is_file())
    except (OSError, ValueError):
        return model
    needed = model.num_params() * np.dtype(model.dtype).itemsize
    if needed > budget.allowance("expansion", size):
        raise budget.exceeded(str(source), f"the network it describes has "
                              f"{model.num_params():,} parameters ({needed:,} bytes)",
                              "expansion", size, needed)
    return model


def write(model: Model, fmt: str, path: Any = None, *, overwrite: bool = False,
          **options: Any) -> Any:
    """Write ``model`` in format ``fmt``; returns the format's native object and, when
    ``path`` is given, also saves it there (atomically). An existing file is replaced only
    with ``overwrite=True``; without it, a file another process creates there meanwhile is
    never replaced either (the write is then a FormatError). See :mod:`rnnport.io.atomic`.

    A :class:`~rnnport.Stack` written with ``per_part=True`` to a format that holds one
    network gives a list, one native object per part; with ``path`` each part is saved
    beside it as ``.part0``, ``.part1`` … before the suffix (:func:`per_part_paths`)."""
    if not isinstance(model, (RNN, Stack)):
        raise FormatError(f"write: expected an rnnport.RNN or Stack (from rnnport.read), got "
                          f"{type(model).__name__}.")
    name = info(fmt).name
    if per_part_paths(name, model, path, options):
        return write_parts(name, model, path, overwrite, None, "pass overwrite=True", options)
    check_path("write", path, name, overwrite, None, "pass overwrite=True")
    with replacing(path, overwrite, "pass overwrite=True"):
        return get(name).write(model, path=path, **options)


def convert(source: Any, to: str, *, fmt: str | None = None, path: Any = None,
            overwrite: bool = False, **options: Any) -> Any:
    """``write(read(source, fmt), to, path)``; each option goes to the side that takes it.
    ``path`` is never the source file, and replaces a file only with ``overwrite=True``."""
    if fmt is None and isinstance(source, (RNN, Stack)):
        return write(source, to, path=path, overwrite=overwrite, **options)
    conversion = Conversion.plan(source, to, fmt=fmt, path=path, overwrite=overwrite,
                                 options=options)
    return conversion.write(conversion.read())


def param_count(model: Model, fmt: str | None = None, **options: Any) -> int:
    """Parameters as format ``fmt`` stores them (``None``: the canonical count).

    A Keras GRU 4→5 stores 150 with reset_after=False and 165 with reset_after=True; a
    Keras LSTM stores one bias where the canonical model (and cuDNN) keep two.
    """
    if not isinstance(model, (RNN, Stack)):
        raise FormatError(f"param_count: expected an rnnport.RNN or Stack (from rnnport.read), "
                          f"got {type(model).__name__}.")
    if fmt is None:
        return model.num_params()
    return get(info(fmt).name).param_count(model, **options)


@dataclass(frozen=True)
class Conversion:
    """One conversion, planned and checked before any work: both formats known, every
    option assigned to the side that takes it, and the output files writable, none of them
    the source's."""

    source: Any
    source_format: str
    target_format: str
    path: Any
    read_options: dict[str, Any]
    write_options: dict[str, Any]
    overwrite: bool = False
    how: str = "pass overwrite=True"
    # The files the read opened, as the reader opened them (rnnport.io.inputs): no output may
    # be one of them, whatever the formats declare.
    opened: list[Path] = field(default_factory=list)

    @classmethod
    def plan(cls, source: Any, to: str, *, fmt: str | None = None, path: Any = None,
             overwrite: bool = False, options: dict[str, Any] | None = None,
             how: str = "pass overwrite=True") -> Conversion:
        """Check everything ``convert`` would do; ``how`` says how to allow replacing an
        existing output."""
        check_source(source, "convert")
        source_format = resolve(source, fmt)
        target_format = info(to).name
        where = f"convert({source_format} → {target_format})"
        read_options, write_options = split_options(source_format, target_format,
                                                    options or {}, where)
        if not write_options.get("per_part"):  # else the parts' files, once they are known
            check_path(where, path, target_format, overwrite, source, how)
        return cls(source, source_format, target_format, path, read_options, write_options,
                   overwrite, how)

    def read(self) -> Model:
        """The source, read; writers may hand out views of the arrays the caller passed. The
        files the read opens are recorded in ``opened``."""
        from .io import inputs

        with inputs.recording() as opened:
            model = _within_limits(get(self.source_format).read(self.source,
                                                                **self.read_options),
                                   self.source)
        self.opened[:] = opened
        shared_with_caller(model, self.source)
        return model

    def write(self, model: Model) -> Any:
        """``model`` in the target format, saved when the plan has a path (one file per
        part for a stack written with ``per_part=True``)."""
        if per_part_paths(self.target_format, model, self.path, self.write_options):
            return write_parts(self.target_format, model, self.path, self.overwrite,
                               self.source, self.how, self.write_options, self.opened)
        check_path(f"convert({self.source_format} → {self.target_format})", self.path,
                   self.target_format, self.overwrite, self.source, self.how, self.opened)
        try:
            with replacing(self.path, self.overwrite, self.how, self.opened):
                return get(self.target_format).write(model, path=self.path, **self.write_options)
        except UnsupportedFeatureError as error:
            raise self.with_remedy(error, model) from None

    def with_remedy(self, error: UnsupportedFeatureError,
                    model: Model) -> UnsupportedFeatureError:
        """``error`` (the target refusing a feature), with how the source format reads the
        network without that feature, where it can."""
        target, source = get(self.target_format), get(self.source_format)
        for part in (model.parts if isinstance(model, Stack) else [model]):
            missing = missing_feature(part.spec, target.holds(part.spec))
            if missing is not None and missing[0] in source.drops:
                return UnsupportedFeatureError(f"{error} The {source.name} source can leave it "
                                               f"out: {source.drops[missing[0]]}.")
        return error

    def output_files(self, model: Model | None = None) -> list[Path]:
        """The files the write (of ``model``, when it goes one file per part) creates; none
        without a path."""
        if self.path is None:
            return []
        paths = (per_part_paths(self.target_format, model, self.path, self.write_options)
                 if model is not None else []) or [Path(self.path)]
        return [file for path in paths for file in output_files(self.target_format, path)]


def per_part_paths(fmt: str, model: Model, path: Any, options: dict[str, Any]) -> list[Path]:
    """The paths a stack's parts go to when they are written one file each (``per_part``
    asked, a path given, a stack of several parts); otherwise none."""
    if not (options.get("per_part") and path is not None and isinstance(model, Stack)
            and isinstance(path, (str, os.PathLike))):
        return []
    return [part_path(fmt, path, index) for index in range(len(model.parts))]


def write_parts(fmt: str, model: Model, path: Any, overwrite: bool, source: Any, how: str,
                options: dict[str, Any], opened: Sequence[Path] = ()) -> list[Any]:
    """Each part of a stack in its own file: every output checked, and every part written
    in memory, before the first file is saved, so a part the format cannot hold leaves no
    file behind."""
    assert isinstance(model, Stack)
    paths = per_part_paths(fmt, model, path, options)
    from .io.atomic import check_outputs

    check_outputs([file for part in paths for file in output_files(fmt, part)],
                  [*input_files(source), *opened], overwrite, how, get(fmt).package)
    declared = get(fmt)
    for part in model.parts:
        declared.write(part, **options)
    with replacing(path, overwrite, how, opened):
        return [declared.write(part, path=part_file, **options)
                for part, part_file in zip(model.parts, paths, strict=True)]


def check_path(where: str, path: Any, fmt: str, overwrite: bool, source: Any,
               how: str, opened: Sequence[Path] = ()) -> None:
    """Before any work: ``path`` names files that can be written, none of them the source's
    (those its format declares, and ``opened``: those a read opened) or (unless
    ``overwrite``) an existing file; ``how`` says how to allow replacing one."""
    if path is None:
        return
    if not isinstance(path, (str, os.PathLike)):
        raise FormatError(f"{where}: path={path!r}; expected a file name (str or os.PathLike), "
                          "or None to only return the native object.")
    from .io.atomic import check_outputs  # only when saving: tempfile and shutil come with it

    check_outputs(output_files(fmt, path), [*input_files(source), *opened], overwrite, how,
                  get(fmt).package)


def replacing(path: Any, overwrite: bool, how: str,
              opened: Sequence[Path] = ()) -> AbstractContextManager[None]:
    """The block in which a format saves to ``path``: its files replace existing ones only
    when ``overwrite`` (checked again as each file is renamed into place, so a file another
    process creates meanwhile is never replaced), and never one of ``opened`` (the files
    the read opened, checked before each write starts); ``how`` says how to allow that."""
    if path is None:
        return contextlib.nullcontext()
    from .io import atomic

    return atomic.replacing(overwrite, how, opened)


def check_source(source: Any, where: str) -> None:
    """A source path that no file can have (a NUL byte, a name too long) or that cannot be
    looked at is a FormatError with the system's reason, before any format opens it."""
    if not isinstance(source, (str, os.PathLike)):
        return
    text = os.fsdecode(os.fspath(source))
    try:
        if "\0" in text:
            raise ValueError("embedded null byte")
        mode = os.stat(text).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return  # told by the format search, which also tries the path as a prefix
    except (OSError, ValueError) as error:
        from .io.atomic import shown

        if isinstance(error, ValueError):
            reason = f"{error}: the path contains a NUL byte, which no file name may hold"
            fix = "Remove the NUL byte (\\x00) from the path"
        else:
            reason, fix = error.strerror or str(error), "Check the path"
        raise FormatError(f"{where}: {shown(text)} cannot be read; the system says: {reason}. "
                          f"{fix}.") from None
    from .io.inputs import kind_of_file

    kind = kind_of_file(mode)
    if kind is not None and kind != "a folder":  # a folder holds a checkpoint or SavedModel
        raise FormatError(f"{where}: {text} is {kind}, not a file; rnnport reads regular files "
                          "(and folders holding a checkpoint or a SavedModel): a pipe or a "
                          "device could block the read for ever. Give the path of the file.")
