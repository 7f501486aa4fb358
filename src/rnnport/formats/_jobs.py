"""Running a framework in a process of its own, for the framework checks of ``--verify``.

Some frameworks must never be imported into rnnport's process: TensorFlow's TF1 cells need
settings made before it starts, PaddlePaddle crashes when it is imported after TensorFlow,
and each costs seconds and hundreds of megabytes. A check writes ``x`` and a JSON job into a
fresh folder, runs ``python -m <program> JOB.json`` there (waited for with a deadline, see
:mod:`rnnport.io.processes`), and reads back the ``y`` the program saved.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..io import processes

__all__ = ["TIME_LIMIT", "job_main", "run_job"]

# Seconds: a check that takes longer says so rather than hang the caller (one whose process
# is stopped says so after a second: rnnport.io.processes).
TIME_LIMIT = 300


def run_job(command: list[str], job: Mapping[str, Any], x: np.ndarray, what: str, *,
            runtime: str, environment: Mapping[str, str] | None = None,
            prepare: Callable[[Path], Mapping[str, Any]] | None = None) -> np.ndarray | str:
    """Run ``python COMMAND JOB.json`` in a fresh folder holding ``x.npy``; the job (``job``,
    what ``prepare(folder)`` adds, and the paths ``x`` and ``y``) is its JSON argument, and
    the program saves ``y.npy``. ``environment`` is added to this process's. Returns ``y``,
    or a sentence saying why there is none (``runtime`` names the framework, ``what`` what
    it was to run; a program that refuses says why on the last line of its standard error)."""
    with tempfile.TemporaryDirectory(prefix="rnnport-framework-") as temporary:
        folder = Path(temporary)
        np.save(folder / "x.npy", np.ascontiguousarray(x), allow_pickle=False)
        full = {**job, **(prepare(folder) if prepare is not None else {}),
                "x": str(folder / "x.npy"), "y": str(folder / "y.npy")}
        (folder / "job.json").write_text(json.dumps(full))
        package_root = str(Path(__file__).resolve().parents[2])  # the folder holding rnnport
        settings = {**os.environ, **(environment or {}),
                    "PYTHONPATH": os.pathsep.join(filter(None, [
                        package_root, os.environ.get("PYTHONPATH")]))}
        try:
            done = processes.run([sys.executable, *command, str(folder / "job.json")],
                                 cwd=folder, env=settings, timeout=TIME_LIMIT)
        except processes.Overdue as overdue:
            return f"{runtime}'s process {overdue} and was ended"
        if done.returncode != 0 or not (folder / "y.npy").is_file():
            lines = [line.strip() for line in done.stderr.decode("utf-8", "replace").splitlines()
                     if line.strip()]
            why = lines[-1][:500] if lines else f"exit status {done.returncode}"
            return f"{runtime} could not run {what} ({why})"
        return np.load(folder / "y.npy", allow_pickle=False)


def job_main(argv: list[str], run: Callable[[dict[str, Any]], np.ndarray]) -> int:
    """The command line of a program :func:`run_job` starts: ``JOB.json`` in (its argument),
    ``run(job)`` saved to the job's ``y``."""
    with open(argv[0]) as file:
        job = json.load(file)
    np.save(job["y"], run(job), allow_pickle=False)
    return 0
