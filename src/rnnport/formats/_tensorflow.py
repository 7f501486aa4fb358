"""Running TensorFlow in a process of its own, for the TensorFlow formats' framework checks.

TensorFlow is never imported into rnnport's process: its TF1 cells need ``tf_keras`` with
``TF_USE_LEGACY_KERAS=1`` set before TensorFlow starts, which must not leak into a process
that may also hold Keras 3, and importing it costs seconds and hundreds of megabytes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..io import processes

__all__ = ["TIME_LIMIT", "job_main", "run_job", "tf_keras_unavailable"]

# Seconds: a check that takes longer says so rather than hang the caller (one whose process
# is stopped says so after a second: rnnport.io.processes).
TIME_LIMIT = 300


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
    """Run ``python COMMAND JOB.json`` in a fresh folder holding ``x.npy``; the job (``job``,
    what ``prepare(folder)`` adds, and the paths ``x`` and ``y``) is its JSON argument, and
    the program saves ``y.npy``. Returns ``y``, or a sentence saying why there is none
    (``what`` names what TensorFlow was to run)."""
    with tempfile.TemporaryDirectory(prefix="rnnport-tensorflow-") as temporary:
        folder = Path(temporary)
        np.save(folder / "x.npy", np.ascontiguousarray(x), allow_pickle=False)
        full = {**job, **(prepare(folder) if prepare is not None else {}),
                "x": str(folder / "x.npy"), "y": str(folder / "y.npy")}
        (folder / "job.json").write_text(json.dumps(full))
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding rnnport
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "",
                       "PYTHONPATH": os.pathsep.join(filter(None, [
                           package_root, os.environ.get("PYTHONPATH")]))}
        if legacy_keras:
            environment["TF_USE_LEGACY_KERAS"] = "1"
        try:
            done = processes.run([sys.executable, *command, str(folder / "job.json")],
                                 cwd=folder, env=environment, timeout=TIME_LIMIT)
        except processes.Overdue as overdue:
            return f"TensorFlow's process {overdue} and was ended"
        if done.returncode != 0 or not (folder / "y.npy").is_file():
            lines = [line.strip() for line in done.stderr.decode("utf-8", "replace").splitlines()
                     if line.strip()]
            why = lines[-1][:500] if lines else f"exit status {done.returncode}"
            return f"TensorFlow could not run {what} ({why})"
        return np.load(folder / "y.npy", allow_pickle=False)


def job_main(argv: list[str], run: Callable[[dict[str, Any]], np.ndarray]) -> int:
    """The command line of a program :func:`run_job` starts: ``JOB.json`` in (its argument),
    ``run(job)`` saved to the job's ``y``."""
    with open(argv[0]) as file:
        job = json.load(file)
    np.save(job["y"], run(job), allow_pickle=False)
    return 0
