"""Running TensorFlow in a process of its own, for the TensorFlow formats' framework checks.

TensorFlow is never imported into rnnport's process: its TF1 cells need ``tf_keras`` with
``TF_USE_LEGACY_KERAS=1`` set before TensorFlow starts, which must not leak into a process
that may also hold Keras 3, and importing it costs seconds and hundreds of megabytes.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import _jobs
from ._jobs import TIME_LIMIT, job_main

__all__ = ["TIME_LIMIT", "job_main", "run_job", "tf_keras_unavailable"]


def tf_keras_unavailable(x: np.ndarray, input_size: int, runs: str) -> str | None:
    """Why TensorFlow with ``tf_keras`` cannot run ``x``, ending ``: no framework check`` (a
    package missing, or ``x`` not ``(batch, time, input_size)``); None when it can. ``runs``
    names what would run there (``"TF1 cells"``)."""
    missing = [name for name in ("tensorflow", "tf_keras") if importlib.util.find_spec(name) is None]
    if missing:
        return (f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
                f"({runs} run in TensorFlow with tf_keras): no framework check")
    shape = np.shape(x)
    if len(shape) != 3 or shape[2] != input_size:
        return (f"x has shape {shape}; TensorFlow is run on (batch, time, {input_size}): "
                "no framework check")
    return None


def run_job(command: list[str], job: Mapping[str, Any], x: np.ndarray, what: str, *,
            legacy_keras: bool = True,
            prepare: Callable[[Path], Mapping[str, Any]] | None = None) -> np.ndarray | str:
    """:func:`rnnport.formats._jobs.run_job` for TensorFlow: its log quiet, no GPU, and
    (``legacy_keras``) ``TF_USE_LEGACY_KERAS=1``."""
    environment = {"TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}
    if legacy_keras:
        environment["TF_USE_LEGACY_KERAS"] = "1"
    return _jobs.run_job(command, job, x, what, runtime="TensorFlow", environment=environment,
                         prepare=prepare)
