"""rnnport: move trained LSTM, GRU and simple RNN layers exactly between Keras, cuDNN
buffers, PyTorch, ONNX and TF1 checkpoints, and run them with NumPy alone.

>>> import rnnport
>>> rnn = rnnport.read(keras_layer)                  # doctest: +SKIP
>>> buffer = rnnport.write(rnn, "cudnn")             # doctest: +SKIP
>>> y, (h, c) = rnn.forward(x)                       # doctest: +SKIP
"""

from __future__ import annotations

import os
from typing import Any

from . import errors
from .errors import (
    AmbiguousSourceError,
    DTypeError,
    FormatError,
    MissingDependencyError,
    RnnportError,
    ShapeError,
    SpecError,
    StateError,
    UnknownFormatError,
    UnknownOptionError,
    UnsupportedFeatureError,
)
from .formats import formats
from .formats import get as _format_module
from .formats import info as _format_info
from .formats import sniff as _sniff
from .model import RNN, Model, Stack, stack
from .model import shared_with_caller as _shared_with_caller
from .spec import Spec

__version__ = "0.1.0"

__all__ = [
    "RNN",
    "AmbiguousSourceError",
    "DTypeError",
    "FormatError",
    "MissingDependencyError",
    "Model",
    "RnnportError",
    "ShapeError",
    "Spec",
    "SpecError",
    "Stack",
    "StateError",
    "UnknownFormatError",
    "UnknownOptionError",
    "UnsupportedFeatureError",
    "convert",
    "errors",
    "formats",
    "param_count",
    "read",
    "stack",
    "write",
]


def read(source: Any, fmt: str | None = None, **options: Any) -> Model:
    """Read a network from ``source`` into the canonical model.

    ``fmt`` is one of :func:`formats`; when omitted it is told from the source (a framework
    object's type, a state_dict's keys, a list of Keras arrays). Returns an :class:`RNN`,
    or a :class:`Stack` when layers differ in size or cell.
    """
    if fmt is None and isinstance(source, (RNN, Stack)):
        if options:
            raise UnknownOptionError(f"read: options {sorted(options)} do not apply to an "
                                     "rnnport model, which is already canonical.")
        return source
    name = _sniff(source) if fmt is None else _format_info(fmt).name
    return _format_module(name).read(source, **options)


def write(model: Model, fmt: str, path: Any = None, *, overwrite: bool = False,
          **options: Any) -> Any:
    """Write ``model`` in format ``fmt``; returns the format's native object and, when
    ``path`` is given, also saves it there (atomically). An existing file is replaced only
    with ``overwrite=True``."""
    if not isinstance(model, (RNN, Stack)):
        raise FormatError(f"write: expected an rnnport.RNN or Stack (from rnnport.read), got "
                          f"{type(model).__name__}.")
    module = _format_module(fmt)
    _check_path("write", path, fmt, overwrite, None)
    return module.write(model, path=path, **options)


def convert(source: Any, to: str, *, fmt: str | None = None, path: Any = None,
            overwrite: bool = False, **options: Any) -> Any:
    """``write(read(source, fmt), to, path)``; each option goes to the side that takes it.
    ``path`` is never the source file, and replaces a file only with ``overwrite=True``."""
    if fmt is None and isinstance(source, (RNN, Stack)):
        return write(source, to, path=path, overwrite=overwrite, **options)
    source_name = _sniff(source) if fmt is None else _format_info(fmt).name
    reader, writer = _format_module(source_name), _format_module(to)
    read_options = {k: v for k, v in options.items() if k in reader.READ_OPTIONS}
    write_options = {k: v for k, v in options.items() if k in writer.WRITE_OPTIONS}
    unknown = sorted(set(options) - set(read_options) - set(write_options))
    if unknown:
        known = sorted(reader.READ_OPTIONS | writer.WRITE_OPTIONS)
        raise UnknownOptionError(
            f"convert({source_name} → {to}): unknown option(s) {', '.join(unknown)}; reading "
            f"{source_name} and writing {to} take: {', '.join(known) or 'none'}.")
    _check_path(f"convert({source_name} → {to})", path, to, overwrite, source)
    model = reader.read(source, **read_options)
    _shared_with_caller(model, source)  # the writer may return views of the source's arrays
    return writer.write(model, path=path, **write_options)


def _check_path(where: str, path: Any, fmt: str, overwrite: bool, source: Any) -> None:
    """Before any work: ``path`` names files that can be written, none of them the source's
    or (unless ``overwrite``) an existing file."""
    if path is None:
        return
    if not isinstance(path, (str, os.PathLike)):
        raise FormatError(f"{where}: path={path!r}; expected a file name (str or os.PathLike), "
                          "or None to only return the native object.")
    from .io.atomic import check_outputs, input_files, output_files

    check_outputs(output_files(path, _format_info(fmt).name), input_files(source), overwrite,
                  "pass overwrite=True")


def param_count(model: Model, fmt: str | None = None, **options: Any) -> int:
    """Parameters as format ``fmt`` stores them (``None``: the canonical count).

    A Keras GRU 4→5 stores 150 with reset_after=False and 165 with reset_after=True; a
    Keras LSTM stores one bias where the canonical model (and cuDNN) keep two.
    """
    if fmt is None:
        return model.num_params()
    return int(_format_module(fmt).param_count(model, **options))
