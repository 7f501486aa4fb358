"""Batch inference: one model run over many feature files, in parallel, resumably.

>>> from rnnport import corpus
>>> summary = corpus.run("model.pt", ["features/"], "out/", jobs=4)   # doctest: +SKIP
>>> summary.done, summary.skipped, summary.failed, summary.frames_per_second  # doctest: +SKIP

**Inputs** are ``.npy`` files and ``.npz`` archives (:data:`FEATURE_SUFFIXES`), and
folders, which stand for the feature files inside them (recursively, in sorted order;
hidden names, the model's own files and anything under ``out_dir`` left out):

* a ``.npy`` file holds one array: ``(time, I)`` for one sequence, or ``(batch, time, I)``
  (``(time, batch, I)`` with ``time_major=True``). Its output, at the same relative name
  under ``out_dir``, is ``y`` alone: ``(time, D·H_out)``, or ``(batch, time, D·H_out)`` in
  the input's major order.
* an archive holds several arrays, each run on its own; its output is an archive with the
  same keys, each holding that array's ``y``. A member named ``lengths`` (:data:`LENGTHS`,
  one integer per sequence) is not run: it gives the valid lengths of every other member
  of that archive (each then has that many sequences), and is copied to the output as it
  is, so the output says which frames are valid. Outputs past a sequence's length are
  zero, as :meth:`rnnport.RNN.forward` makes them. An archive is read as
  :mod:`rnnport.io.archive` reads one: members that overlap are refused, and what its
  members inflate to must stay within the ``expansion`` limit for its size.
* ``lengths=`` applies to every array of every input that has no ``lengths`` member of its
  own, as ``rnnport run --lengths`` does for one input; 3-D input whose lengths fit only
  its time axis is refused as a sign of time-major input, unless ``time_major`` is given.

A file given by name goes to ``out_dir / its name``; a file found in a folder goes to
``out_dir / its path relative to that folder``. Two inputs that would share an output, or
an output that is an input, are refused before any work.

**Resuming**: every output is written atomically (:mod:`rnnport.io.atomic`: a temporary
beside it, then a rename), so an output that exists is complete. It is skipped, unless
``force=True`` (then it is replaced). A run that is interrupted, even killed, leaves each
output either complete or absent (a killed writer may leave a hidden ``.NAME.*.partial``
temporary, which the next run removes); running the same command again does the rest.

**Parallelism**: ``jobs`` worker processes (default: the CPUs this process may use),
started with ``spawn`` and with ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` and
``MKL_NUM_THREADS`` set to 1 (:data:`ONE_BLAS_THREAD`) before NumPy loads in them: one
process per core scales better than one process whose BLAS spreads small recurrent
products over every core. Each worker reads the model once. ``jobs=0`` runs everything in
the calling process, with its BLAS as it is.

**Dask**: ``dask="local"`` starts a ``distributed.LocalCluster`` of ``jobs`` worker
processes with one thread each (:func:`local_cluster`); ``dask="tcp://host:8786"`` uses
the scheduler there. Each file is a task at first; once finished files tell how long one
takes, small files go in groups of about :data:`GROUP_SECONDS` a task (smaller as the
files left run out), two groups per worker thread in flight; a task whose worker dies has
its files run again one a task. Each worker process reads the model once (a cache per
process, keyed by the model's path and read options) and writes its outputs itself, so the
model, the inputs and ``out_dir`` must be on a file system every worker sees at the same
absolute paths. The local cluster's workers get :func:`dask_worker_config`: one BLAS
thread (``distributed.nanny.pre-spawn-environ``, before NumPy loads; also Dask's default
for any cluster), no statistical profiler, no ``MALLOC_TRIM_THRESHOLD_``, and fewer
wake-ups of every Dask process. Results come back with their futures (``as_completed(...,
with_results=True)``), no round trip per task. Needs the ``dask`` extra (``pip install
'rnnport[dask]'``).

**Failures**: a file that cannot be read or run (a bad shape, a damaged file) is reported
with its name and the reason, and the others go on; :attr:`Summary.failed` counts them. A
file that kills its worker process (out of memory, say) fails alone: the files in flight
beside it run again one at a time (up to twice the workers, in series), and the rest go
on in a new pool (on Dask, a task whose worker dies has its files run again one a task).
Where workers cannot start at all, :data:`GIVE_UP_AFTER` failed starts in a row end the
run: the files left fail as not run.

**Deadlines**: no wait on a worker is without end. A pool (or a Dask cluster) that gives no
result for :data:`STALL_FACTOR` times what its files in flight are expected to take (a
worker's start, the model's read as long as it took here, and each file's frames at the
model's pace here, measured once on a short input), and never less than
:data:`STALL_FLOOR` seconds, is taken for stuck; so is a pool whose worker is seen stopped
(``SIGSTOP``) for a second (:mod:`rnnport.io.processes`). A stuck pool's workers are
killed, and its files in flight go on as after a worker's death: one at a time, where a file
stuck again alone fails, its worker process "ended". On Dask, the files of the tasks that
gave no result run in this process instead. A pool being shut down waits for its workers
as long, then kills them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

import numpy as np

from . import api, budget, errors, formats, runtime
from .errors import FormatError, MissingDependencyError, RnnportError, ShapeError, brief
from .io import processes
from .io.archive import check_sizes, load_npy, open_zip, read_member, read_npy
from .io.atomic import (
    NUMPY_ARCHIVE,
    remove_stale_temporaries_in,
    replacing,
    save_archive,
    save_npy,
    shown,
    swept,
)
from .model import Model

__all__ = ["DASK_WORKER_CONFIG", "FEATURE_SUFFIXES", "LENGTHS", "ONE_BLAS_THREAD", "FileResult",
           "Summary", "dask_worker_config", "default_jobs", "local_cluster", "plan", "run"]

FEATURE_SUFFIXES = (".npy", NUMPY_ARCHIVE)
LENGTHS = "lengths"  # the archive member that holds the valid length of each sequence
ONE_BLAS_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
# Dask settings for workers that run files: one BLAS thread each (set before NumPy loads),
# and no statistical profiler (a thread that samples the running task's stack every 10 ms,
# taking the interpreter lock from it; a few per cent of a busy core). Every Dask process
# also wakes less often: its event loop's health check ("tick", 20 ms by default), its
# system monitor (500 ms) and the memory checks of workers and nannies (100 ms) took, on
# an idle two-worker cluster, 2.5 % of a core in each worker and 6.6 % in the process
# holding the scheduler and the nannies; with these settings 0.4 % and 1.3 %. Where
# workers and scheduler share the cores, that is taken from the files. The environment
# here replaces Dask's whole pre-spawn environment: dask_worker_config() adds it to the
# one in effect instead.
_PRE_SPAWN = "distributed.nanny.pre-spawn-environ"
DASK_WORKER_CONFIG = {_PRE_SPAWN: ONE_BLAS_THREAD,
                      "distributed.worker.profile.enabled": False,
                      "distributed.admin.tick.interval": "200ms",
                      "distributed.admin.system-monitor.interval": "2s",
                      "distributed.worker.memory.monitor-interval": "500ms"}
# Dask's default pre-spawn environment sets MALLOC_TRIM_THRESHOLD_=65536. Any such setting
# stops glibc from raising its threshold for mapping large blocks afresh, so each array of
# 128 KiB or more that a forward allocates (tens of MB a file) is mapped, faulted in page by
# page and unmapped again: a file took 15-20 % longer. None unsets it (Dask's way), leaving
# glibc's own adaptive thresholds, as in any other process.
_UNSET_FOR_WORKERS = ("MALLOC_TRIM_THRESHOLD_",)
_SET_BY_NANNIES = ("PYTHONHASHSEED", "__DASK_PARENT_PID")  # in the process starting them


def dask_worker_config() -> dict[str, Any]:
    """:data:`DASK_WORKER_CONFIG` for ``dask.config.set``: its environment added to the
    pre-spawn environment in effect (Dask's own default holds more than the BLAS threads),
    with ``MALLOC_TRIM_THRESHOLD_`` unset (Dask's default of 65536 made each file 15-20 %
    slower; unset, glibc adapts its thresholds as in any other process). Needs the
    ``dask`` extra."""
    import dask
    import distributed  # noqa: F401  # loads Dask's defaults for its workers

    environ = dict(dask.config.get(_PRE_SPAWN, {}) or {})
    return {**DASK_WORKER_CONFIG,
            _PRE_SPAWN: {**environ, **ONE_BLAS_THREAD, **dict.fromkeys(_UNSET_FOR_WORKERS)}}


Status = Literal["done", "skipped", "failed"]


@dataclass(frozen=True)
class Task:
    """One input file and where its output goes (absolute paths); ``name`` is how
    messages show it."""

    source: str
    output: str
    name: str


@dataclass(frozen=True)
class FileResult:
    """What happened to one input: ``status`` is ``"done"`` (by this run: an output that
    appeared after the run was planned counts too), ``"skipped"`` (its output existed
    when the run was planned) or ``"failed"`` (``error`` says why). ``sequences`` and ``frames`` count what
    was run (frames: valid time steps, summed over sequences). ``worker`` is the process
    that ran it and ``loads`` how many times that process had read the model by then."""

    name: str
    source: str
    output: str
    status: Status
    sequences: int = 0
    frames: int = 0
    seconds: float = 0.0
    error: str = ""
    worker: int = 0
    loads: int = 0


@dataclass(frozen=True)
class Summary:
    """The outcome of :func:`run`: one :class:`FileResult` per input, in input order, and
    the run's wall-clock ``elapsed`` seconds."""

    results: tuple[FileResult, ...]
    elapsed: float

    def _count(self, status: Status) -> int:
        return sum(result.status == status for result in self.results)

    @property
    def done(self) -> int:
        return self._count("done")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def failed(self) -> int:
        return self._count("failed")

    @property
    def failures(self) -> list[FileResult]:
        return [result for result in self.results if result.status == "failed"]

    @property
    def sequences(self) -> int:
        return sum(result.sequences for result in self.results)

    @property
    def frames(self) -> int:
        return sum(result.frames for result in self.results)

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def ok(self) -> bool:
        """No input failed."""
        return self.failed == 0

    def lines(self, redo: str = "force=True") -> list[str]:
        """The summary as text: counts, then each failure; ``redo`` says how to redo the
        skipped files (``--force`` on the command line)."""
        skipped = f"{self.skipped} skipped (their outputs exist; {redo} redoes them)" \
            if self.skipped else "0 skipped"
        lines = [f"{_plural(len(self.results), 'file')}: {self.done} done, {skipped}, "
                 f"{self.failed} failed",
                 f"{_plural(self.sequences, 'sequence')}, {_plural(self.frames, 'frame')} in "
                 f"{self.elapsed:.2f} s ({self.frames_per_second:,.0f} frames/s)"]
        lines += [f"failed: {_failure(result)}" for result in self.failures]
        return lines


# A pool or a cluster that gives no result for STALL_FACTOR times what its files in flight
# are expected to take, and at least STALL_FLOOR seconds, is taken for stuck; a worker's
# start is expected to take WORKER_START seconds (a spawned interpreter importing NumPy and
# rnnport) plus the model's read. See _Pace.
STALL_FACTOR = 8.0
STALL_FLOOR = 30.0
WORKER_START = 5.0
_PACE_STEPS = 32  # time steps of the input that measures the model's pace


@dataclass(frozen=True)
class _Pace:
    """How long a run's work is expected to take: a worker's start (the model's read here,
    ``read_seconds``), and a file's run (``per_byte``: seconds per byte of input, one
    sequence at a time, the slowest way, as measured here)."""

    read_seconds: float = 0.0
    per_byte: float = 0.0

    @classmethod
    def measure(cls, model: Model, read_seconds: float) -> _Pace:
        """The pace of ``model``, read in ``read_seconds``: one sequence of
        :data:`_PACE_STEPS` steps of float32 zeros run here, in one thread."""
        x = np.zeros((1, _PACE_STEPS, model.input_size), np.float32)
        start = time.perf_counter()
        model.forward(x, threads=1)
        took = time.perf_counter() - start
        return cls(read_seconds, took / x.nbytes)

    def allowed(self, groups: Iterable[Sequence[Task]]) -> float:
        """Seconds a pool or cluster running ``groups`` of files (in flight; a group runs
        in one task) may go without a result: a worker's start, then the longest group
        after another as long."""
        longest = max((sum(_size(task.source) for task in group) for group in groups),
                      default=0) * self.per_byte
        return max(STALL_FLOOR,
                   STALL_FACTOR * (WORKER_START + self.read_seconds + 2 * longest))


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:  # fails when it is read
        return 0


class _Stalled(BrokenProcessPool):
    """The workers gave no result within their deadline (see :class:`_Pace`), or one was
    seen stopped: its message ends a sentence ("… was stopped (SIGSTOP …) for 1 s and was
    ended")."""


class _Stall:
    """Whether a wait for results has gone on too long: no result for what the files in
    flight should take (:meth:`_Pace.allowed`), or a worker process seen stopped."""

    def __init__(self, pace: _Pace) -> None:
        self.pace = pace
        self.clock = processes.Clock()
        self.watches: dict[int, processes.Watch] = {}
        self.stopped: int | None = None  # the worker found stopped, if that is why

    def progress(self) -> None:
        """A result came: the wait starts again."""
        self.clock = processes.Clock()

    def why(self, groups: Iterable[Sequence[Task]], pids: Iterable[int] = ()) -> str | None:
        """None while the wait may go on; else why it should not."""
        waited = self.clock.elapsed()
        for pid in pids:
            watch = self.watches.setdefault(pid, processes.Watch(pid, float("inf")))
            stopped = watch.overdue()
            if stopped is not None:
                self.stopped = pid
                del self.watches[pid]
                return f"the worker process (pid {pid}) {stopped} and was ended"
        allowed = self.pace.allowed(groups)
        if waited >= allowed:
            return (f"the worker processes gave no result within "
                    f"{processes.seconds(allowed)} s (stuck?) and were ended")
        return None


@dataclass(frozen=True)
class _Job:
    """What every worker needs to run a file: the model to read and how to run it (and,
    for the process waiting on them, how long that takes)."""

    model_path: str
    fmt: str | None
    options: Mapping[str, Any]
    time_major: bool | None
    lengths: np.ndarray | None
    force: bool
    limits: Mapping[str, float] = field(default_factory=dict)
    version: tuple[tuple[str, int, int], ...] = ()  # the model's files: name, size, mtime
    pace: _Pace = _Pace()

    @property
    def key(self) -> tuple[str, str | None, str, tuple[tuple[str, int, int], ...]]:
        """What a cached model is kept under: a changed model file is read again."""
        return self.model_path, self.fmt, repr(sorted(self.options.items())), self.version


def default_jobs() -> int:
    """The CPUs this process may run on (as the runtime counts them)."""
    return runtime._cores()


# -- planning ----------------------------------------------------------------------------------


def _is_feature_file(name: str) -> bool:
    return name.lower().endswith(FEATURE_SUFFIXES)


def plan(inputs: Iterable[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
         exclude: Iterable[str | os.PathLike[str]] = ()) -> list[Task]:
    """The tasks for ``inputs`` (files and folders, see the module docstring) writing under
    ``out_dir``; ``exclude`` are files a folder's expansion leaves out (the model's own).
    Raises :class:`~rnnport.errors.FormatError` when no input is found, when two inputs
    would write one output, or when an output would be an input."""
    out = Path(out_dir).absolute()
    skip = {os.path.realpath(path) for path in exclude}
    tasks: list[Task] = []
    named: set[Task] = set()  # files given by name, not found in a folder
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            found = _folder_files(path, out, skip)
            tasks += [Task(str(file.absolute()), str(out / relative), str(path / relative))
                      for relative, file in found]
        else:  # a missing or unreadable file fails on its own, with its name
            task = Task(str(path.absolute()), str(out / path.name), str(path))
            tasks.append(task)
            named.add(task)
    unique = list(dict.fromkeys(tasks))
    if not unique:
        raise FormatError(f"run: no input files found; expected {' or '.join(FEATURE_SUFFIXES)} "
                          "files, or folders that hold some.")
    _check_outputs(unique, skip, named)
    return unique


def _folder_files(folder: Path, out: Path, skip: set[str]) -> list[tuple[Path, Path]]:
    """(path relative to ``folder``, path) of each feature file under it, sorted."""
    found = []
    out_real = os.path.realpath(out)
    for root, folders, files in os.walk(folder):
        if os.path.realpath(root) == out_real:
            folders[:] = []
            continue
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in files:
            path = Path(root) / name
            if name.startswith(".") or not _is_feature_file(name) \
                    or os.path.realpath(path) in skip:
                continue
            found.append((path.relative_to(folder), path))
    return sorted(found, key=lambda item: item[0].parts)


def _check_outputs(tasks: Sequence[Task], protected: set[str],
                   named: set[Task] | None = None) -> None:
    """Each output written by one input, and none of them an input or a ``protected`` file
    (the model's own; resolved paths). ``named``: the tasks of files given by name (their
    outputs are named after the file alone)."""
    by_output: dict[str, list[Task]] = {}
    for task in tasks:
        by_output.setdefault(os.path.realpath(task.output), []).append(task)
    shared = [group for group in by_output.values() if len(group) > 1]
    if shared:
        listed = "; ".join(" and ".join(task.name for task in group[:3]) + f" → {group[0].output}"
                           for group in shared[:3])
        by_name = any(task in (named or ()) for group in shared for task in group)
        raise FormatError(f"run: {len(shared)} output(s) would be written by more than "
                          f"one input ({listed}); expected one input per output name. Give those "
                          "inputs in separate runs, each with its own output folder"
                          f"{', or their folders rather than the files' if by_name else ''}. "
                          "Nothing was written.")
    sources = {os.path.realpath(task.source) for task in tasks} | protected
    clashing = [task for task in tasks if os.path.realpath(task.output) in sources]
    if clashing:
        raise FormatError(f"{shown(clashing[0].output)}: is an input file (or the model's); "
                          "rnnport never writes over its input. Choose another output folder. "
                          "Nothing was written.")


# -- one file ----------------------------------------------------------------------------------

_MODELS: dict[tuple[Any, ...], Model] = {}  # this process's models
_READS = {"count": 0}  # how many times this process has read a model
_WORKER: dict[str, _Job] = {}


def _model(job: _Job) -> tuple[Model, int]:
    """The model of ``job``, read once per process; and how many models this process has
    read so far."""
    model = _MODELS.get(job.key)
    if model is None:
        with budget.limits(**job.limits):
            model = _MODELS[job.key] = api.read(job.model_path, job.fmt, **job.options)
        _READS["count"] += 1
    return model, _READS["count"]


def _read_arrays(source: str, where: str) -> dict[str | None, np.ndarray]:
    """The arrays of an input file: ``{None: x}`` for ``.npy``, member → array for an archive."""
    if source.lower().endswith(NUMPY_ARCHIVE):
        if not os.path.isfile(source):
            raise FormatError(f"{where}: no such file.")
        arrays: dict[str | None, np.ndarray] = {}
        with open_zip(source, "NumPy archive", where) as archive:
            names = archive.namelist()
            for name in names:
                if not name.endswith(".npy"):
                    raise FormatError(f"{where}: member {name!r} is not a .npy array; expected an "
                                      "archive written by numpy.savez.")
            check_sizes(archive, names, where, os.path.getsize(source))
            for name in names:
                arrays[name[:-len(".npy")]] = read_npy(read_member(archive, name, where),
                                                       f"{where}, array {name[:-4]!r}")
        if not arrays:
            raise FormatError(f"{where}: the archive holds no arrays.")
        return arrays
    if source.lower().endswith(".npy"):
        return {None: load_npy(source, where)}
    raise FormatError(f"{where}: not a feature file; expected a name ending in "
                      f"{' or '.join(FEATURE_SUFFIXES)}.")


def _run_array(model: Model, x: np.ndarray, lengths: np.ndarray | None,
               time_major: bool | None, where: str) -> tuple[np.ndarray, int, int]:
    """``y`` for one array, and the sequences and frames it held."""
    if x.ndim == 2:
        if lengths is not None and lengths.shape != (1,):
            raise ShapeError(f"{where}: one sequence {x.shape} (time, input); expected one "
                             f"length for it, got lengths of shape {lengths.shape}.")
        y, _ = _forward(model, x[None], lengths, False, where, x.shape)
        return (y[0], *_counts(x, lengths, False))
    if x.ndim != 3:
        raise ShapeError(f"{where}: shape {x.shape}; expected (time, input) for one sequence or "
                         "(batch, time, input).")
    if time_major is None and lengths is not None and lengths.ndim == 1 \
            and lengths.shape[0] == x.shape[1] != x.shape[0]:
        raise ShapeError(f"{where}: shape {x.shape} reads as (batch {x.shape[0]}, time "
                         f"{x.shape[1]}, input {x.shape[2]}), but the lengths have "
                         f"{lengths.shape[0]} entries, the size of axis 1: it looks time-major. "
                         "Say which it is: --time-major or --batch-first (time_major=True "
                         "or False).")
    major = bool(time_major)
    y, _ = _forward(model, x, lengths, major, where, x.shape)
    return (y, *_counts(x, lengths, major))


def _forward(model: Model, x: np.ndarray, lengths: np.ndarray | None, time_major: bool,
             where: str, shape: tuple[int, ...]) -> tuple[np.ndarray, Any]:
    """``model.forward`` on one array (of ``shape`` as the file holds it); what it refuses
    names the file and array (``where``) rather than forward's ``x``."""
    size = model.input_size
    if x.shape[-1] != size:
        raise ShapeError(f"{where}: shape {shape}; expected {size} features per frame (its last "
                         f"axis): the model's input_size is {size}.")
    try:
        return model.forward(x, lengths=lengths, time_major=time_major)
    except (ShapeError, errors.DTypeError, errors.StateError, errors.LimitError) as error:
        text = " ".join(str(error).split()).removeprefix("forward: ")
        if text.startswith("x "):  # forward's name for its input
            text = f"the array {text[2:]}"
        if isinstance(error, errors.LimitError):
            raise errors.LimitError(f"{where}: {text}", error.limit) from None
        raise type(error)(f"{where}: {text}") from None


def _process(task: Task, job: _Job) -> FileResult:
    """Run one file and write its output; every failure becomes a failed result."""
    start = time.perf_counter()
    pid = os.getpid()
    if not job.force and os.path.lexists(task.output):
        return _written_since(task, job, pid, 0)
    loads = 0
    try:
        model, loads = _model(job)
        start = time.perf_counter()  # the file's own time: a first file's excludes the read
        with budget.limits(**job.limits):
            sequences, frames = _compute_and_write(model, task, job)
    except Exception as error:  # one file's failure, whatever it is, must not stop the rest
        if not job.force and os.path.lexists(task.output):
            # A failed write removes what it made, so another writer finished this output.
            return _written_since(task, job, pid, loads)
        return FileResult(task.name, task.source, task.output, "failed",
                          seconds=time.perf_counter() - start, error=_describe(error),
                          worker=pid, loads=loads)
    return FileResult(task.name, task.source, task.output, "done", sequences, frames,
                      time.perf_counter() - start, worker=pid, loads=loads)


def _written_since(task: Task, job: _Job, pid: int, loads: int) -> FileResult:
    """The result of a file whose output exists though the run planned it (it was absent
    then): another attempt of this run wrote it (Dask runs a task again when its worker
    dies, with the files written before the death), or another run did. Done, with the
    counts of its input; skipped if the input cannot be read now."""
    try:
        arrays, _, lengths = _inputs(task, job)
        counts = []
        for x in arrays.values():
            batch, steps = (1, x.shape[0]) if x.ndim == 2 else \
                (x.shape[1], x.shape[0]) if job.time_major else x.shape[:2]
            runtime._check_lengths(lengths, batch, steps)  # as forward checked them
            counts.append(_counts(x, lengths, bool(job.time_major)))
    except Exception:  # counting only: the output is there all the same
        return FileResult(task.name, task.source, task.output, "skipped", worker=pid,
                          loads=loads)
    return FileResult(task.name, task.source, task.output, "done",
                      sum(count for count, _ in counts), sum(frames for _, frames in counts),
                      worker=pid, loads=loads)


def _counts(x: np.ndarray, lengths: np.ndarray | None, time_major: bool) -> tuple[int, int]:
    """The sequences and frames (valid time steps) of one array as it runs."""
    if x.ndim == 2:
        return 1, x.shape[0] if lengths is None else int(min(int(lengths[0]), x.shape[0]))
    batch, steps = (x.shape[1], x.shape[0]) if time_major else (x.shape[0], x.shape[1])
    frames = batch * steps if lengths is None else int(
        np.minimum(np.asarray(lengths, np.int64), steps).sum())
    return batch, frames


def _inputs(task: Task, job: _Job) -> tuple[dict[str | None, np.ndarray], np.ndarray | None,
                                             np.ndarray | None]:
    """A file's arrays to run, its own lengths (an archive's :data:`LENGTHS` member), and
    the lengths that apply to it (its own, else the run's)."""
    arrays = _read_arrays(task.source, task.name)
    own = arrays.pop(LENGTHS, None) if None not in arrays else None
    return arrays, own, own if own is not None else job.lengths


def _compute_and_write(model: Model, task: Task, job: _Job) -> tuple[int, int]:
    arrays, own, lengths = _inputs(task, job)
    outputs: dict[str, np.ndarray] = {}
    sequences = frames = 0
    for key, x in arrays.items():
        where = task.name if key is None else f"{task.name}, array {key!r}"
        y, count, valid = _run_array(model, x, lengths, job.time_major, where)
        outputs["" if key is None else key] = y
        sequences += count
        frames += valid
    if not outputs:
        raise FormatError(f"{task.name}: the archive holds only {LENGTHS!r}; expected feature "
                          "arrays beside it.")
    Path(task.output).parent.mkdir(parents=True, exist_ok=True)
    with replacing(job.force, "pass --force"), swept():  # run() swept the folders once
        if None in arrays:
            save_npy(task.output, outputs[""])
        else:
            if own is not None:
                outputs[LENGTHS] = own
            save_archive(task.output, outputs, task.name)
    return sequences, frames


def _sweep(tasks: Sequence[Task]) -> None:
    """Remove what killed writers left for these outputs: one look through each folder
    (the writes themselves then skip theirs, which would look through it once per file)."""
    by_folder: dict[str, set[str]] = {}
    for task in tasks:
        by_folder.setdefault(os.path.dirname(task.output), set()).add(os.path.basename(task.output))
    for folder, names in by_folder.items():
        remove_stale_temporaries_in(folder, names)


def _describe(error: BaseException) -> str:
    if isinstance(error, (RnnportError, OSError)):
        return " ".join(str(error).split())
    if isinstance(error, MemoryError):
        return "ran out of memory"
    return f"internal error ({brief(error, 300)})"


# -- local process pool --------------------------------------------------------------------------


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in ``os.environ`` for the block: processes started in it inherit them."""
    with _restoring(values):
        os.environ.update(values)
        yield


@contextlib.contextmanager
def _restoring(names: Iterable[str]) -> Iterator[None]:
    """The variables ``names`` of ``os.environ`` as they were before the block, after it."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _start_worker(job: _Job, parent: int) -> None:
    """A pool worker's start: Ctrl-C is the parent's to handle (it lets the files in
    progress finish), the worker ends when its parent is gone, and the model is read."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER["job"] = job
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    _model(job)


def _watch_parent(parent: int) -> None:
    # A killed parent cannot stop its pool; its idle workers would wait forever.
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)


def _pool_task(task: Task) -> FileResult:
    return _process(task, _WORKER["job"])


class _OneBlasThreadProcess(multiprocessing.get_context("spawn").Process):  # type: ignore[misc]
    """A spawned process started with :data:`ONE_BLAS_THREAD` in its environment, whenever
    its pool starts it."""

    def start(self) -> None:
        with _STARTING, _environment(ONE_BLAS_THREAD):  # threads starting workers: in turn
            super().start()


_STARTING = threading.Lock()


class _OneBlasThreadContext(type(multiprocessing.get_context("spawn"))):  # type: ignore[misc]
    Process = _OneBlasThreadProcess


def _pool(job: _Job, jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` spawned workers, each started with one BLAS thread."""
    return ProcessPoolExecutor(jobs, mp_context=_OneBlasThreadContext(),
                               initializer=_start_worker, initargs=(job, os.getpid()))


# In a pool, two files per worker in flight: the next at hand for each. A worker that dies
# (killed, out of memory) breaks its whole pool and fails every file in flight there;
# those files run again one at a time in a pool of one worker, so that only a file that
# kills its worker alone fails (the others, written before the death or not, are computed
# again and counted done), and the rest go on in a new pool. Each pool of one first runs
# an empty task: a worker that cannot start at all (the model unreadable there, say) is
# told apart from a file that kills it; after GIVE_UP_AFTER such pools in a row the files
# left fail as not run.
GIVE_UP_AFTER = 3
_BREAK_SETTLES = 10.0  # seconds for a broken pool's futures to fail, at most


def _run_local(tasks: Sequence[Task], job: _Job, jobs: int,
               report: Callable[[FileResult], None]) -> list[FileResult]:
    results: list[FileResult] = []
    waiting = list(reversed(tasks))  # popped from the end: the first file first
    again = dataclasses.replace(job, force=True)
    unstarted = 0  # pools of one in a row whose worker could not start

    while waiting:
        broken = _run_pool(waiting, job, min(jobs, len(waiting)), 2, report, results)
        if broken is None:
            break
        suspects = (broken[0] or [])[::-1]  # popped from the end: the first file first
        _sweep(suspects)  # what the pool's killed writers left (its processes are gone)
        while suspects:
            alone = _run_pool(suspects, again, 1, 1, report, results, probe=True)
            if alone is None:  # the files ran
                unstarted = 0
                continue
            lost, error = alone
            if lost is None:  # its worker could not even start
                unstarted += 1
                if unstarted >= GIVE_UP_AFTER:
                    for task in suspects[::-1] + waiting[::-1]:
                        _report(_not_run(task, error), report, results)
                    return results
                continue
            unstarted = 0
            for task in lost:  # the one file in flight killed its worker
                _report(_died(task, error), report, results)
            _sweep(lost)
    return results


def _run_pool(waiting: list[Task], job: _Job, workers: int, ahead: int,
              report: Callable[[FileResult], None], results: list[FileResult],
              probe: bool = False) -> tuple[list[Task] | None, BaseException] | None:
    """Run files popped from ``waiting`` in a new pool of ``workers``, ``ahead`` a worker
    in flight, until none is left (None) or the pool breaks: then the files in flight, and
    the error. With ``probe``, an empty task runs first: if it breaks the pool, the files
    are None (the worker could not start)."""
    executor = _pool(job, workers)
    stall = _Stall(job.pace)
    running: dict[Future[FileResult], Task] = {}
    try:
        if probe:
            started = executor.submit(int)
            try:
                while not wait([started], timeout=processes.POLL).done:
                    why = stall.why([], _workers(executor))
                    if why is not None:
                        raise _Stalled(why)
                started.result()
            except BrokenProcessPool as error:
                _shut_down(executor, stall, [], kill=isinstance(error, _Stalled))
                return None, error
        broken = _feed(executor, waiting, running, ahead * workers, report, results, stall)
    except BaseException:
        _shut_down(executor, stall, running.values(), cancel=True)  # the files in progress finish
        raise
    _shut_down(executor, stall, [], kill=isinstance(broken and broken[1], _Stalled))
    return broken


def _workers(executor: ProcessPoolExecutor) -> list[int]:
    """The process ids of the pool's workers (the pool does not say them otherwise)."""
    return list(getattr(executor, "_processes", None) or {})


def _shut_down(executor: ProcessPoolExecutor, stall: _Stall, tasks: Iterable[Task], *,
               cancel: bool = False, kill: bool = False) -> None:
    """Shut the pool down: its workers end after the files they run (``tasks``; none
    started after this with ``cancel``), waited for as long as those should take (see
    :class:`_Stall`: a worker seen stopped never ends by itself), then killed; at once
    with ``kill``."""
    workers = dict(getattr(executor, "_processes", None) or {})
    manager = getattr(executor, "_executor_manager_thread", None)
    executor.shutdown(wait=False, cancel_futures=cancel)
    stall.progress()
    groups = [[task] for task in tasks]
    while not kill and any(worker.is_alive() for worker in workers.values()):
        if stall.why(groups, [pid for pid, worker in workers.items() if worker.is_alive()]):
            break
        time.sleep(processes.POLL)
    for worker in workers.values():
        if worker.is_alive():
            with contextlib.suppress(OSError, ValueError):
                worker.kill()
    for worker in workers.values():
        worker.join(_BREAK_SETTLES)
    if manager is not None:
        manager.join(_BREAK_SETTLES)


def _feed(executor: ProcessPoolExecutor, waiting: list[Task],
          running: dict[Future[FileResult], Task], ahead: int,
          report: Callable[[FileResult], None], results: list[FileResult], stall: _Stall
          ) -> tuple[list[Task] | None, BaseException] | None:
    while waiting or running:
        while waiting and len(running) < ahead:
            task = waiting.pop()
            try:
                running[executor.submit(_pool_task, task)] = task
            except BrokenProcessPool as broke:  # broke since the last look
                waiting.append(task)  # not started: it goes on in the next pool
                if not running:  # nothing of this pool's left to blame
                    return [], broke
                break
        finished, _ = wait(running, timeout=processes.POLL, return_when=FIRST_COMPLETED)
        breaks: list[BaseException] = [
            failure for failure in (future.exception() for future in finished)
            if isinstance(failure, BrokenProcessPool)]
        if finished:
            stall.progress()
        elif (why := stall.why([[task] for task in running.values()],
                               _workers(executor))) is not None:
            for worker in (getattr(executor, "_processes", None) or {}).values():
                with contextlib.suppress(OSError, ValueError):
                    worker.kill()  # the pool breaks: the files in flight go on as below
            breaks = [_Stalled(why)]
        if breaks:
            # A broken pool fails every file in flight (a future added as it broke might
            # never end: after a while, it counts as lost with them).
            wait(running, timeout=_BREAK_SETTLES)
            lost = []
            for future, task in running.items():
                if future.done() and not isinstance(future.exception(), BrokenProcessPool):
                    _report(_result(future, task), report, results)  # done before the break
                else:
                    lost.append(task)
            return lost, breaks[0]
        for future in finished:
            _report(_result(future, running.pop(future)), report, results)
    return None


def _report(result: FileResult, report: Callable[[FileResult], None],
            results: list[FileResult]) -> None:
    report(result)
    results.append(result)


def _result(future: Future[FileResult], task: Task) -> FileResult:
    try:
        return future.result()
    except Exception as error:  # the worker itself died (killed, out of memory)
        return _died(task, error)


def _not_run(task: Task, error: BaseException) -> FileResult:
    return FileResult(task.name, task.source, task.output, "failed",
                      error=f"not run: worker processes could not start, {GIVE_UP_AFTER} times "
                            f"({error if isinstance(error, _Stalled) else brief(error)})")


def _died(task: Task, error: BaseException) -> FileResult:
    return FileResult(task.name, task.source, task.output, "failed",
                      error=f"not finished: {error}" if isinstance(error, _Stalled)
                      else f"its worker process died ({brief(error)})")


# -- Dask ----------------------------------------------------------------------------------------


# A Dask task runs a group of files: one file each while their time is unknown, then as
# many as take about GROUP_SECONDS by the last RECENT files' times (at most GROUP_FILES,
# and never so many that a worker is left without two groups of what remains), so that
# each task's own cost to the scheduler, the client and the worker (a few milliseconds of
# CPU, taken from the files where they share the cores) stays small beside its computing
# even for many small files: on two workers, 32 files of 0.15 s cost the process holding
# scheduler and client 0.43 s of CPU with groups of a quarter second, 0.34 s with groups
# of a second (0.16 s with DASK_WORKER_CONFIG as well). (A process pool's cost per task
# is a fraction of a millisecond: a file a task there.)
GROUP_SECONDS = 1.0
GROUP_FILES = 64
RECENT = 16  # finished files whose mean time sizes the next group


def _dask_task(task: Task, job: _Job) -> FileResult:
    # One file of a group: apart from _dask_group so that tests can stand in for a file's
    # run on workers in the same process.
    return _process(task, job)


def _dask_group(tasks: list[Task], job: _Job) -> list[FileResult]:
    return [_dask_task(task, job) for task in tasks]


class _Groups:
    """The files still to submit, cut into groups as the times of the last
    :data:`RECENT` finished files say."""

    def __init__(self, tasks: Sequence[Task], workers: int) -> None:
        self.waiting = list(reversed(tasks))  # popped from the end: the first file first
        self.workers = workers
        self.recent: deque[float] = deque(maxlen=RECENT)

    def timed_by(self, result: FileResult) -> None:
        if result.status == "done":
            self.recent.append(result.seconds)

    def next(self) -> list[Task]:
        size = 1
        if self.recent:
            each = sum(self.recent) / len(self.recent)
            size = (GROUP_FILES if each * GROUP_FILES <= GROUP_SECONDS
                    else round(GROUP_SECONDS / each))
            size = max(1, min(size, GROUP_FILES, len(self.waiting) // (2 * self.workers)))
        return [self.waiting.pop() for _ in range(min(size, len(self.waiting)))]


@contextlib.contextmanager
def local_cluster(workers: int) -> Iterator[Any]:
    """A ``distributed.LocalCluster`` of ``workers`` worker processes of one thread each,
    as ``dask="local"`` runs files on, closed after the block. Its workers get
    :func:`dask_worker_config`, kept set while the cluster runs (a nanny that starts a
    worker again after its death reads it then), and one BLAS thread even where this
    process has more set (Dask takes a variable set here over its configuration), as a
    pool's workers do. Its HTTP server takes any free port (Dask's default, 8787, held by
    another cluster, would move with a warning) and serves no dashboard. A nanny sets its
    workers' pre-spawn environment in this process too (and ``PYTHONHASHSEED``,
    ``__DASK_PARENT_PID``): it is put back as it was once the cluster is closed. Needs the
    ``dask`` extra."""
    import dask
    from distributed import LocalCluster

    config = dask_worker_config()
    with _restoring([*config[_PRE_SPAWN], *_SET_BY_NANNIES]), dask.config.set(config):
        with _environment(ONE_BLAS_THREAD):
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=":0", scheduler_kwargs={"dashboard": False},
                                   silence_logs=40)
        with cluster:
            yield cluster


def _require_dask(address: str) -> None:
    try:
        import dask  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as error:
        raise MissingDependencyError(
            f"running on Dask ({address}) needs the packages dask and distributed, which are "
            f"not installed ({error}); install the 'dask' extra: pip install 'rnnport[dask]' "
            "(pip install -e '.[dask]' in a clone). Nothing was run.") from None


def _nanny_workers(cluster: Any) -> list[int]:
    """The process ids of a local cluster's workers (none for a cluster elsewhere)."""
    if cluster is None:
        return []
    with contextlib.suppress(Exception):  # the cluster's own thread may change it meanwhile
        return [pid for pid in (getattr(worker, "pid", None)
                                for worker in list(cluster.workers.values())) if pid]
    return []


def _run_dask(tasks: Sequence[Task], job: _Job, address: str, jobs: int,
              report: Callable[[FileResult], None]) -> list[FileResult]:
    from distributed import Client
    from distributed import as_completed as completed

    with contextlib.ExitStack() as stack:
        cluster = None
        if address == "local":
            cluster = stack.enter_context(local_cluster(jobs))
            client = stack.enter_context(Client(cluster))
        else:
            client = stack.enter_context(Client(address))
        groups = _Groups(tasks, jobs)
        running: dict[str, tuple[Any, list[Task]]] = {}
        # A task that dies (its worker killed, after Dask's own retries) has its files run
        # again one a task: only a file that kills its worker fails. Those the dead task
        # wrote are computed again, to be counted.
        again = dataclasses.replace(job, force=True)
        counted = [0.0]  # when a scheduler elsewhere was last asked for its workers

        def submit(group: list[Task], how: _Job = job) -> Any:
            future = client.submit(_dask_group, group, how, pure=False)
            running[future.key] = (future, group)
            return future

        def top_up() -> list[Any]:
            """Two groups per worker thread in flight: each worker has its next one at hand.
            A scheduler elsewhere is asked for its threads now and then (workers come and
            go)."""
            if address != "local" and time.monotonic() - counted[0] > 1.0:
                counted[0] = time.monotonic()
                groups.workers = max(sum(client.nthreads().values()), 1)
            added = []
            while len(running) < 2 * groups.workers:
                group = groups.next()
                if not group:
                    break
                added.append(submit(group))
            return added

        results: list[FileResult] = []
        stall = _Stall(job.pace)
        try:
            # Results come with their futures: no round trip to the scheduler per group.
            finished = completed(top_up(), with_results=True, raise_errors=False)
            while not finished.is_empty():
                if not finished.has_ready():
                    why = stall.why([group for _, group in running.values()],
                                    _nanny_workers(cluster))
                    if why is None:
                        time.sleep(processes.POLL)
                        continue
                    if stall.stopped is not None:
                        # A local worker stopped: killed, its tasks go to the others (Dask
                        # runs a dead worker's tasks again) and its nanny starts another.
                        with contextlib.suppress(OSError):
                            os.kill(stall.stopped, signal.SIGKILL)
                        stall.stopped = None
                        stall.progress()
                        continue
                    # No result for too long (stuck workers, or a scheduler elsewhere that
                    # runs nothing): the files of the tasks in flight run here instead.
                    stuck = list(running.values())
                    running.clear()
                    client.cancel([future for future, _ in stuck])
                    for _, group in stuck:
                        for task in group:
                            _report(_process(task, again), report, results)
                    stall.progress()
                    for following in top_up():
                        finished.add(following)
                    continue
                future, outcome = next(finished)
                stall.progress()
                if future.key not in running:  # given up above, and run here
                    continue
                _, group = running.pop(future.key)
                done: list[FileResult] = []
                if isinstance(outcome, list):
                    done = outcome
                elif len(group) > 1:
                    _sweep(group)  # what its killed writer left
                    for task in group:
                        finished.add(submit([task], again))
                else:  # a worker that died: (type, error, traceback), or the cancellation
                    done = [_died(group[0], outcome[1] if isinstance(outcome, tuple)
                                  else outcome)]
                for result in done:
                    groups.timed_by(result)
                    _report(result, report, results)
                for following in top_up():
                    finished.add(following)
        except BaseException:
            client.cancel([future for future, _ in running.values()])
            raise
        finally:
            _MODELS.pop(again.key, None)  # read here if files ran here
        return results


# -- progress ------------------------------------------------------------------------------------


class _Progress:
    """Progress on ``stream``: one line redrawn in place on a terminal, else a line per file."""

    def __init__(self, stream: TextIO | None, total: int) -> None:
        self.stream, self.total = stream, total
        self.tty = bool(stream is not None and stream.isatty())
        self.count = self.failed = self.frames = 0
        self.start = time.perf_counter()

    def say(self, text: str) -> None:
        if self.stream is not None:
            self._clear()
            print(text, file=self.stream, flush=True)

    def __call__(self, result: FileResult) -> None:
        self.count += 1
        self.frames += result.frames
        self.failed += result.status == "failed"
        if self.stream is None:
            return
        if result.status == "failed" or not self.tty:
            what = {"done": f"{_plural(result.sequences, 'sequence')}, "
                            f"{_plural(result.frames, 'frame')}",
                    "skipped": "skipped, its output exists",
                    "failed": f"FAILED: {result.error}"}[result.status]
            self.say(f"[{self.count}/{self.total}] {result.name}: {what}")
        if self.tty:
            self._draw()

    def _draw(self) -> None:
        if self.stream is None:
            return
        width = 24
        filled = width * self.count // max(self.total, 1)
        rate = self.frames / max(time.perf_counter() - self.start, 1e-9)
        failed = f", {self.failed} failed" if self.failed else ""
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.count}/{self.total} "
                          f"files{failed}, {rate:,.0f} frames/s\x1b[K")
        self.stream.flush()

    def _clear(self) -> None:
        if self.tty and self.stream is not None and self.count:
            self.stream.write("\r\x1b[K")

    def close(self) -> None:
        if self.tty and self.stream is not None and self.count:
            self.stream.write("\n")
            self.stream.flush()


def _version(model_file: str) -> tuple[tuple[str, int, int], ...]:
    found = []
    for path in formats.input_files(model_file):
        with contextlib.suppress(OSError):
            status = path.stat()
            found.append((str(path), status.st_size, status.st_mtime_ns))
    return tuple(found)


def _check_lengths(lengths: np.ndarray) -> None:
    """Lengths given for every input: one whole number per sequence, checked once (each
    input's own count of sequences is checked with it)."""
    if lengths.ndim != 1 or not runtime.whole_numbers(lengths) or (
            lengths.size and lengths.min() < 0):
        raise FormatError(f"run: the lengths (--lengths, lengths=) are {lengths.dtype} of shape "
                          f"{lengths.shape}; expected one whole number ≥ 0 per sequence, a 1-D "
                          "array of integers. Nothing was run.")


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _failure(result: FileResult) -> str:
    """A failed file's name and error, the name once (most errors start with it)."""
    error = result.error or "failed"
    return error if error.startswith(f"{result.name}:") or error.startswith(
        f"{result.name}, ") else f"{result.name}: {error}"


# -- the run -------------------------------------------------------------------------------------


def run(model_path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]],
        out_dir: str | os.PathLike[str], *, fmt: str | None = None,
        options: Mapping[str, Any] | None = None, jobs: int | None = None,
        dask: str | None = None, force: bool = False, time_major: bool | None = None,
        lengths: Any = None, progress: TextIO | None = None) -> Summary:
    """Run the model at ``model_path`` over every input and write one output per input
    under ``out_dir`` (see the module docstring for inputs, outputs and resuming).

    ``fmt`` and ``options`` read the model as :func:`rnnport.read` does (each worker reads
    it again). ``jobs``: worker processes (default :func:`default_jobs`; 0 runs in this
    process); ``dask``: ``"local"`` or a scheduler's address, to run on Dask instead.
    ``force`` redoes inputs whose outputs exist. ``time_major`` reads 3-D inputs as
    ``(time, batch, I)`` (None: ``(batch, time, I)``, refusing lengths that fit only the
    time axis); ``lengths`` (one per sequence) applies to inputs without their own.
    ``progress``: where progress goes (``sys.stderr``; None: nowhere).

    Returns a :class:`Summary`; a file that fails is counted there, not raised. Raises
    before any work when the model cannot be read or the inputs cannot be planned, and
    :class:`~rnnport.errors.MissingDependencyError` for ``dask`` without the ``dask`` extra.
    """
    start = time.perf_counter()
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0):
        raise FormatError(f"run: jobs={jobs!r}; expected a whole number of worker "
                          "processes, 1 or more (0: in this process).")
    jobs = default_jobs() if jobs is None else jobs
    if dask is not None:
        if jobs == 0:
            raise FormatError("run: jobs=0 runs in this process, without Dask; with dask=, jobs "
                              "is the number of Dask workers: 1 or more.")
        _require_dask(dask)
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):  # a dangling link too
        raise FormatError(f"{shown(out_dir)}: the output folder (--out, out_dir) is a file; "
                          "expected a folder for the outputs (made if missing). Choose another, "
                          "or move the file away.")
    if lengths is not None:
        _check_lengths(np.asarray(lengths))
    model_file = os.path.abspath(model_path)
    tasks = plan(inputs, out_dir, exclude=formats.input_files(model_file))
    job = _Job(model_file, fmt, dict(options or {}), time_major,
               None if lengths is None else np.asarray(lengths), force, budget.current(),
               _version(model_file))
    reading = time.perf_counter()
    model = api.read(model_file, fmt, **job.options)  # one that cannot be read stops everything
    if jobs:  # how long the workers' files should take (see _Pace)
        job = dataclasses.replace(job, pace=_Pace.measure(model, time.perf_counter() - reading))
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    todo = [task for task in tasks if force or not os.path.lexists(task.output)]
    # Finished outputs too: a writer killed between linking its output in and unlinking
    # its temporary (see rnnport.io.atomic) leaves both, and a finished output is never
    # written again.
    _sweep(tasks)
    waiting = set(todo)
    done: dict[Task, FileResult] = {
        task: FileResult(task.name, task.source, task.output, "skipped")
        for task in tasks if task not in waiting}
    reporter = _Progress(progress, len(todo))
    if done:
        reporter.say(f"skipping {len(done)} of {len(tasks)} files: their outputs exist in "
                     f"{out_dir}")
    by_source = {(task.source, task.output): task for task in todo}
    try:
        if not todo:
            results: list[FileResult] = []
        elif dask is not None:
            reporter.say(f"running {_plural(len(todo), 'file')} on Dask ({dask}) …")
            results = _run_dask(todo, job, dask, min(jobs, len(todo)), reporter)
        elif jobs == 0:
            results = []
            try:
                for task in todo:
                    _report(_process(task, job), reporter, results)
            finally:
                _MODELS.pop(job.key, None)
        else:
            workers = min(jobs, len(todo))
            reporter.say(f"running {_plural(len(todo), 'file')} in {workers} worker process"
                         f"{'es' if workers > 1 else ''} …")
            results = _run_local(todo, job, workers, reporter)
    finally:
        reporter.close()
    for result in results:
        done[by_source[(result.source, result.output)]] = result
    return Summary(tuple(done[task] for task in tasks), time.perf_counter() - start)

