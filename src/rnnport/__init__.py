"""rnnport: move trained LSTM, GRU and simple RNN layers exactly between Keras, cuDNN
buffers, PyTorch, ONNX and TF1 checkpoints, and run them with NumPy alone.

>>> import rnnport
>>> rnn = rnnport.read(keras_layer)                  # doctest: +SKIP
>>> buffer = rnnport.write(rnn, "cudnn")             # doctest: +SKIP
>>> y, (h, c) = rnn.forward(x)                       # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from . import errors, formats
from .api import convert, param_count, read, write
from .budget import limits
from .errors import (
    AmbiguousSourceError,
    DTypeError,
    FormatError,
    LimitError,
    MissingDependencyError,
    RnnportError,
    ShapeError,
    SpecError,
    StateError,
    UnknownFormatError,
    UnknownOptionError,
    UnsupportedFeatureError,
)
from .model import RNN, Model, Stack, stack
from .spec import Spec

__all__ = [
    "RNN",
    "AmbiguousSourceError",
    "DTypeError",
    "FormatError",
    "LimitError",
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
    "limits",
    "param_count",
    "read",
    "stack",
    "write",
]


def __getattr__(name: str) -> Any:
    """``__version__``, read from the installed package's metadata when first asked for."""
    if name == "__version__":
        from ._version import package_version

        return package_version()
    raise AttributeError(f"module 'rnnport' has no attribute {name!r}")
