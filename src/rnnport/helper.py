"""A helper process that runs one of a layer's two independent pieces (a bidirectional
layer's backward direction, or the second half of a one-way layer's batch) beside the
calling process (Linux).

A layer's step is one matrix product and a dozen elementwise operations. Two Python
threads, one per piece, pass the interpreter lock between them at each operation, so at
batch 1 the second core waits more than it works, and at larger batches each operation
waits its turn. A second process shares no lock with this one: the second piece runs
there, first step to last, while the first runs here, and the two meet once per layer.

* One helper per process, started by the first call that would use it. It starts in the
  background: that call runs its pieces as it would without a helper (in two threads
  for large steps, else together in the calling thread), and the calls after it use the
  helper once it has said it is ready. It is ``python -c`` running :func:`serve` in its
  own session (a terminal's Ctrl-C is this process's), with one BLAS thread and rnnport's
  own folder first on its path (never the working directory). It talks to this process
  over a socket pair; a piece's input and outputs pass through one shared memory file
  (``memfd``) mapped by both, replaced by a larger one when a call needs more and given
  up after a call that needed more than :data:`ARENA_KEPT`.
* It receives a layer direction's parameters once (its canonical arrays, which it
  prepares exactly as :mod:`rnnport.runtime` does here). When the network is collected,
  the next job tells it to forget them.
* It computes with the same code and the same BLAS calls as the thread that would run
  that piece here, so the numbers are bit for bit those of ``forward(threads=1)``.
* One call at a time uses it (a lock; a call finding it busy runs its pieces itself).
* Each job keeps it off the CPU of the thread that gives it the job (:func:`_apart`), so
  that on a busy machine the two pieces do not share one core. Its piece's steps run in
  stretches, and a caller that finished its own piece while more than a stretch of the
  helper's is left takes over the rest (:meth:`Job.ask_for_the_rest`): the helper stops
  between two stretches and the caller runs the remaining steps from the helper's arrays,
  the same operations, so a helper slowed by another program costs less.
* What goes wrong costs speed, never numbers: a layer the helper cannot take (parameters
  that do not pickle, an error it reports) runs here from then on; a helper that dies or
  stops answering, or a call interrupted while it works, makes the helper shut down (it is
  killed) before anyone else can use it, and the piece runs here; after
  :data:`GIVE_UP_AFTER` such ends, or a failed start, no helper starts again in this
  process. It ends when this process shuts it down or exits (it reads the end of its
  socket); a child made by ``fork()`` drops its copy of it and starts its own if needed.
* No wait on it is without end (:mod:`rnnport.io.processes`). Its piece's result is waited
  for at most :data:`REPLY_FACTOR` times as long as this process took for its own piece
  (the same work), and never less than :data:`REPLY_FLOOR` seconds; a helper seen stopped
  (``SIGSTOP``) for a second is not waited for longer. A message to it may take
  :data:`REPLY_FLOOR` seconds, plus one per 100 MB. A helper that misses its deadline is
  shut down, and its piece runs here, with a :class:`~rnnport.errors.HelperFallbackWarning`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from itertools import count
from mmap import mmap
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from .errors import HelperFallbackWarning
from .io import processes

__all__ = ["ARENA_KEPT", "GIVE_UP_AFTER", "LOCKSTEP_NAP", "LOCKSTEP_SPINS", "LOCKSTEP_STALL",
           "REPLY_FACTOR", "REPLY_FLOOR", "Job", "LockstepJob", "Stopped", "available", "job",
           "lockstep", "serve", "shut_down", "wait_until_ready"]

_HEADER = struct.Struct("<Q")
_LARGEST_MESSAGE = 1 << 34  # a layer direction's parameters: far below
_ALIGN = 64
_SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def available() -> bool:
    """Whether this platform can run a helper: shared memory files and descriptor passing
    (Linux), and an interpreter to start."""
    return (hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
            and bool(sys.executable))


# -- framing: one pickled message after its length ---------------------------------------


def _frame(message: Any) -> bytes:
    """``message`` pickled, after its length."""
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(data)) + data


def _send(sock: socket.socket, message: Any) -> None:
    _send_bytes(sock, _frame(message))


def _send_bytes(sock: socket.socket, data: bytes) -> None:
    """``data`` sent whole; on this process's side of the socket (which has a timeout: see
    :meth:`_Helper.__init__`), within :data:`REPLY_FLOOR` seconds plus one per 100 MB."""
    if sock.gettimeout() is not None:
        sock.settimeout(REPLY_FLOOR + len(data) / _SEND_RATE)
    sock.sendall(data)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    buffer = bytearray(size)
    view, got = memoryview(buffer), 0
    while got < size:
        read = sock.recv_into(view[got:])
        if not read:
            raise EOFError("the helper's socket closed")
        got += read
    return bytes(buffer)


def _receive(sock: socket.socket) -> Any:
    (size,) = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    if size > _LARGEST_MESSAGE:  # out of step (a read cut short): the helper is unusable
        raise EOFError(f"the helper's socket is out of step (a message of {size} bytes)")
    # Only this process and its helper hold the two ends of the socket pair.
    return pickle.loads(_receive_exactly(sock, size))


class _Arena:
    """A shared memory file mapped in this process; arrays at 64-byte-aligned offsets."""

    def __init__(self, size: int, fd: int | None = None) -> None:
        if fd is None:
            fd = os.memfd_create("rnnport-helper", os.MFD_CLOEXEC)
            os.ftruncate(fd, size)
        self.fd, self.size = fd, size
        self.map = mmap(fd, size)

    def arrays(self, dtype: np.dtype, *shapes: tuple[int, ...]) -> list[np.ndarray]:
        out, offset = [], 0
        for shape in shapes:
            items = int(np.prod(shape))
            out.append(np.frombuffer(self.map, dtype=dtype, count=items,
                                     offset=offset).reshape(shape))
            offset += _aligned(shape, dtype)
        return out

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # views still alive: the mapping stays
            self.map.close()
        os.close(self.fd)


def _layout(steps: int, batch: int, width: int, out_size: int, hidden: int, gates: int,
            cell: bool, dtype: np.dtype) -> list[tuple[int, ...]]:
    """The arena's arrays for one layer direction: inputs, h0, c0, the h history, the cell
    state (updated in place: the final one at the end), the input side (1, T, b, G·H)
    and the ticks (:func:`_ticks`: the second the steps the helper has done, the third
    this process's request to take over the rest; see :meth:`Job.ask_for_the_rest`)."""
    return [(steps, batch, width), (1, batch, out_size), (1, batch, hidden if cell else 0),
            (steps + 1, 1, batch, out_size), (1, batch, hidden if cell else 0),
            (1, steps, batch, gates), _ticks_shape(dtype)]


def _lockstep_layout(steps: int, batch: int, width: int, pieces: list[tuple[int, int, int]],
                     directions: int, gates: int, hidden: int, cell_rows: int, cell: bool,
                     dtype: np.dtype) -> list[tuple[int, ...]]:
    """The arena's arrays for a lockstep layer: inputs, each piece's input side (pieces
    as (direction, first row, row after)), the h history, ``cell_rows`` rows of c (empty
    without a cell state), and the ticks (four int64 counters, a cache line each)."""
    return [(steps, batch, width), *[(1, steps, after - first, gates) for _, first, after in pieces],
            (steps + 1, directions, batch, hidden),
            (cell_rows, directions, batch, hidden if cell else 0), _ticks_shape(dtype)]


def _ticks_shape(dtype: np.dtype) -> tuple[int]:
    """The shape of the ticks' arena bytes (:func:`_ticks`) as an array of ``dtype``."""
    return (4 * _ALIGN // dtype.itemsize,)


def _ticks(raw: np.ndarray) -> np.ndarray:
    """The ticks (4, 1) in their arena bytes: the steps each process has done (plus one),
    this process's request to stop, and the helper's word that it stopped."""
    return raw.view(np.int64).reshape(4, _ALIGN // 8)[:, :1]


def _bytes(dtype: np.dtype, shapes: list[tuple[int, ...]]) -> int:
    return sum(_aligned(shape, dtype) for shape in shapes)


def _aligned(shape: tuple[int, ...], dtype: np.dtype) -> int:
    """The bytes an array of ``shape`` takes in the arena, rounded up to 64."""
    return -(-int(np.prod(shape)) * dtype.itemsize // _ALIGN) * _ALIGN


# -- this process's side -------------------------------------------------------------------

# A call whose arena exceeded this many bytes gives it up afterwards: a long input's shared
# memory is not kept for the life of the process.
ARENA_KEPT = 64 << 20
# Helpers that died or were shut down on an error, after which none starts again.
GIVE_UP_AFTER = 3
_UNUSABLE = -1  # a layer direction the helper cannot take: it runs here
# The helper's piece is the same work as this process's: its result is waited for at most
# REPLY_FACTOR times as long as this process's piece took, and at least REPLY_FLOOR
# seconds (a busy machine may keep the helper off its core for a moment). A message to it
# takes at most REPLY_FLOOR seconds plus one per _SEND_RATE bytes.
REPLY_FACTOR = 4.0
REPLY_FLOOR = 5.0
_SEND_RATE = 100e6


class _Helper:
    """The running helper process, seen from here. ``lock`` is held by the one call using
    it; everything that reads or writes the socket holds it."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ready = False
        self.broken = False
        self.lock = threading.Lock()
        self.closing = threading.Lock()  # close() from two threads closes once
        self.tokens: weakref.WeakKeyDictionary[Any, dict[int, int]] = \
            weakref.WeakKeyDictionary()
        self.forgotten: list[int] = []
        self.arena: _Arena | None = None
        self.cpus: set[int] | None = None  # the CPUs it was last kept to (see _apart)
        mine, theirs = socket.socketpair()
        # The helper imports rnnport from where this process did, ahead of everything else
        # (``-c`` would put the working directory first); the runtime's entry point hands
        # serve() the two functions it runs.
        code = ("import sys\n"
                "if getattr(sys.flags, 'safe_path', False): sys.path.insert(0, sys.argv[1])\n"
                "else: sys.path[0] = sys.argv[1]\n"
                "from rnnport.runtime import serve_helper; serve_helper(int(sys.argv[2]))")
        environment = {**os.environ, **dict.fromkeys(_SINGLE_THREADED, "1")}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, str(Path(__file__).resolve().parent.parent),
                 str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=environment, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        # Every read and write here has a deadline (a helper stopped while this process
        # writes to it would otherwise block the write once the socket's buffer is full);
        # waits for a piece's result poll first (see Job.finish).
        mine.settimeout(REPLY_FLOOR)
        self.sock = mine

    def poll(self, timeout: float) -> bool:
        """Whether a message is waiting (``poll``: any descriptor number works)."""
        waiting = select.poll()
        waiting.register(self.sock, select.POLLIN)
        return bool(waiting.poll(max(0, int(timeout * 1000))))

    def is_ready(self, timeout: float = 0.0) -> bool:
        """Whether the helper has said it is ready, waiting at most ``timeout`` seconds.
        The caller holds ``lock``."""
        if not self.ready and self.poll(timeout):
            if _receive(self.sock) != ("ready",):
                raise EOFError("the helper did not start")
            self.ready = True
        return self.ready

    def token(self, layer: Any, direction: int) -> int:
        """The helper's name for ``layer``'s ``direction``, its parameters sent once;
        :data:`_UNUSABLE` for a direction it cannot take."""
        tokens = self.tokens.get(layer)
        if tokens is None:
            tokens = self.tokens[layer] = {}
            weakref.finalize(layer, self.forgotten.extend, tokens.values())
        token = tokens.get(direction)
        if token is None:
            spec, directions, dtype = layer.source
            token = next(_TOKENS)
            message = ("layer", token, spec, dict(directions[direction]), dtype.str,
                       layer.backward[direction])
            try:
                framed = _frame(message)
            except Exception:  # e.g. a Spec of a class defined in a function: runs here
                token = _UNUSABLE
            else:
                _send_bytes(self.sock, framed)
            tokens[direction] = token
        return token

    def mark_unusable(self, layer: Any, direction: int) -> None:
        tokens = self.tokens.get(layer)
        if tokens is not None:
            tokens[direction] = _UNUSABLE

    def arena_for(self, size: int) -> _Arena:
        if self.arena is None or self.arena.size < size:
            self.drop_arena()
            arena = _Arena(1 << max(size - 1, 1 << 16).bit_length())
            try:
                _send(self.sock, ("arena", arena.size))
                socket.send_fds(self.sock, [b"F"], [arena.fd])
            except BaseException:
                arena.close()
                raise
            self.arena = arena
        return self.arena

    def drop_arena(self) -> None:
        """Unmap the arena here and tell the helper to unmap it too (its memory is freed)."""
        if self.arena is not None:
            arena, self.arena = self.arena, None
            arena.close()
            _send(self.sock, ("arena", 0))

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.process.kill()

    def close(self) -> None:
        """End the helper now (it may be in the middle of a job nobody will read)."""
        with self.closing:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):  # collected later if not
                self.process.wait(REPLY_FLOOR)
            arena, self.arena = self.arena, None
            if arena is not None:
                with contextlib.suppress(OSError):
                    arena.close()


_TOKENS = count(1)
_STATE_LOCK = threading.Lock()
_HELPER: _Helper | None = None
_ENDS = 0  # helpers shut down after a failure
_FAILED = False  # no helper starts again in this process
_STARTING = False  # a thread is starting one


def _current() -> _Helper | None:
    """This process's helper, started if there is none (None where none can run, or while
    another thread starts one)."""
    global _HELPER, _FAILED, _STARTING
    with _STATE_LOCK:
        if _HELPER is not None or _FAILED or _STARTING or not available():
            return _HELPER
        _STARTING = True
    try:
        started = _Helper()  # not under the lock: a fork() meanwhile must not inherit it
    except Exception:
        with _STATE_LOCK:
            _FAILED, _STARTING = True, False
        return None
    with _STATE_LOCK:
        _STARTING = False
        if _FAILED:
            spare: _Helper | None = started
        else:
            _HELPER, spare = started, None
        helper = _HELPER
    if spare is not None:
        spare.close()
    return helper


def _end(helper: _Helper, failed: bool) -> None:
    """Shut ``helper`` down: called with its lock held, so that no other call uses it in
    between; ``failed`` counts towards :data:`GIVE_UP_AFTER`."""
    global _HELPER, _ENDS, _FAILED
    failed = failed and not helper.broken  # counted once
    helper.broken = True
    with _STATE_LOCK:
        if _HELPER is helper:
            _HELPER = None
        if failed:
            _ENDS += 1
            _FAILED = _FAILED or _ENDS >= GIVE_UP_AFTER
    helper.close()


def shut_down() -> None:
    """End this process's helper, if any (a later call may start another)."""
    global _HELPER
    with _STATE_LOCK:
        helper, _HELPER = _HELPER, None
    if helper is not None and helper.pid == os.getpid():
        # After the call using it, if any (not for ever: a call interrupted at the wrong
        # moment may have left the lock taken).
        taken = helper.lock.acquire(timeout=5)
        helper.broken = True
        if not taken:  # the call using it fails over to running its piece itself
            helper.kill()
            return
        try:
            helper.close()
        finally:
            helper.lock.release()


def _after_fork_in_child() -> None:
    """A child of ``fork()`` drops its copy of the parent's helper (closing its copy of the
    socket, so the helper still sees the parent's end close) and gets fresh locks."""
    global _HELPER, _STATE_LOCK, _STARTING
    _STATE_LOCK = threading.Lock()
    _STARTING = False
    helper, _HELPER = _HELPER, None
    if helper is not None:
        helper.lock = threading.Lock()
        helper.broken = True
        with contextlib.suppress(OSError):
            helper.sock.close()
        arena, helper.arena = helper.arena, None
        if arena is not None:
            with contextlib.suppress(OSError):
                arena.close()


atexit.register(shut_down)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def wait_until_ready(timeout: float = 30.0) -> bool:
    """Start this process's helper if needed and wait until one is ready (tests,
    benchmarks); False if none can run. A helper that dies before it is ready is replaced,
    up to :data:`GIVE_UP_AFTER` times."""
    deadline = time.monotonic() + timeout
    while True:
        helper = _current()
        left = deadline - time.monotonic()
        if helper is None or left <= 0 or not helper.lock.acquire(timeout=left):
            return False
        try:
            if not helper.broken and helper.is_ready(max(deadline - time.monotonic(), 0)):
                return True
            if not helper.broken:  # still starting at the deadline
                return False
        except (OSError, EOFError, pickle.UnpicklingError, ValueError):
            _end(helper, failed=True)  # died before it was ready: another may start
        except BaseException:  # interrupted mid-message: the stream is out of step
            _end(helper, failed=False)
            raise
        finally:
            helper.lock.release()


def _dropped(helper: _Helper, failed: bool = False) -> None:
    """Shut ``helper`` down and let its lock go: a job abandoned, or collected without
    :meth:`Job.finish` or :meth:`Job.abandon` (an interrupt at the wrong moment)."""
    try:
        _end(helper, failed)
    finally:
        helper.lock.release()


class Job:
    """One piece of a layer, running in the helper; the helper's lock is held until
    :meth:`finish` or :meth:`abandon`, or until the job is collected unfinished."""

    def __init__(self, helper: _Helper, layer: Any, directions: tuple[int, ...],
                 arrays: list[Any]) -> None:
        self.helper, self.layer, self.directions, self.arrays = helper, layer, directions, arrays
        self.started = time.monotonic()
        self.unfinished = weakref.finalize(self, _dropped, helper)

    def steps_done(self) -> int:
        """The steps the helper has finished so far (a "run" job; read as it goes on)."""
        return int(_ticks(self.arrays[6])[1][0])

    def ask_for_the_rest(self) -> None:
        """Ask the helper to stop at its next pause between steps (see
        :func:`rnnport.runtime.run_direction`) and leave the steps after it to this
        process: :meth:`finish`'s ``take_over`` then runs them."""
        _ticks(self.arrays[6])[2][0] = 1

    def finish(self, history: np.ndarray | None, cell: np.ndarray | None,
               take_over: Callable[[int, list[np.ndarray]], None] | None = None) -> bool:
        """Wait for the helper (see the module docstring for how long); copy its h history
        ``(T+1, b, H_out)`` and final cell ``(b, H)`` into ``history`` and ``cell`` (if
        given). Where it stopped after ``s`` steps as :meth:`ask_for_the_rest` asked,
        ``take_over(s, arrays)`` first runs the steps from ``s`` here, on the job's arrays
        (see :func:`_layout`), which the helper leaves as they were after step ``s``.
        False if it failed (the caller then computes the piece itself)."""
        helper = self.helper
        if not self.unfinished.detach():  # already ended
            return False
        try:
            reply = self._reply()
            if reply is None:
                return False
            done = reply == ("done",)
            if (take_over is not None and isinstance(reply, tuple) and len(reply) == 2
                    and reply[0] == "handed" and type(reply[1]) is int
                    and 0 <= reply[1] < len(self.arrays[3])):
                # The helper waits for its next message: what this raises (np.seterr,
                # memory, an interrupt) is this process's, and the helper stays.
                take_over(reply[1], self.arrays)
                done = True
            if done and history is not None:
                history[...] = self.arrays[3][:, 0]
                if cell is not None:
                    cell[...] = self.arrays[4][0]
            elif not done and not (isinstance(reply, tuple)
                                   and reply[:1] in (("raised",), ("stopped",), ("handed",))):
                # An error it reported (its memory, a layer it could not rebuild): this layer
                # direction runs here from now on; the helper stays. ("raised": these inputs
                # meet a condition the caller's np.seterr acts on, here; nothing to mark.
                # "handed" with nothing to take it over: the piece runs here.)
                for direction in self.directions:
                    helper.mark_unusable(self.layer, direction)
            self.arrays = []
            if helper.arena is not None and helper.arena.size > ARENA_KEPT:
                try:
                    helper.drop_arena()
                except (OSError, ValueError):
                    _end(helper, failed=True)
            return done
        finally:
            self.arrays = []
            helper.lock.release()

    def _reply(self) -> Any:
        """The helper's reply to the job, or None where it failed to give one in time (it
        is then shut down, with a warning where it was overdue). The caller holds the
        lock; an interrupt shuts the helper down (its reply would be read late)."""
        helper = self.helper
        try:
            own = time.monotonic() - self.started  # this process's piece, the same work
            overdue = _await_reply(helper, max(REPLY_FLOOR, REPLY_FACTOR * own))
            if overdue is not None:
                self.arrays = []
                _end(helper, failed=True)
                _warn(helper, overdue)
                return None
            return _receive(helper.sock)
        except (OSError, EOFError, pickle.UnpicklingError, ValueError):
            self.arrays = []
            _end(helper, failed=True)
            return None
        except BaseException:
            self.arrays = []
            _end(helper, failed=False)
            raise

    def abandon(self) -> None:
        """The call ends without waiting (an interrupt here): the helper is shut down."""
        if self.unfinished.detach():
            self.arrays = []
            _dropped(self.helper)


class Stopped(Exception):
    """The helper stopped in the middle of a lockstep layer (see :class:`LockstepJob`)."""


# A lockstep wait spins this many times (a few hundred microseconds: the other process's
# step is under way) before it sleeps between looks, LOCKSTEP_NAP seconds at a time.
LOCKSTEP_SPINS = 2000
LOCKSTEP_NAP = 1e-4


def _reached(counter: np.ndarray, tick: int, stopped: Callable[[int], bool]) -> bool:
    """Wait until ``counter[0]`` reaches ``tick``: :data:`LOCKSTEP_SPINS` looks, then a
    look every :data:`LOCKSTEP_NAP` seconds, asking ``stopped(naps)`` before each nap;
    False as soon as it says to stop waiting."""
    for _ in range(LOCKSTEP_SPINS):
        if counter[0] >= tick:
            return True
    naps = 0
    while counter[0] < tick:
        naps += 1
        if stopped(naps):
            return False
        time.sleep(LOCKSTEP_NAP)
    return True


class LockstepJob(Job):
    """A layer whose steps this process and the helper run together, half the units each
    (:func:`rnnport.runtime.lockstep_steps`); ``arrays`` are the pieces' input sides (a
    list), the h history, the rows of c and the ticks, in the arena (see :func:`lockstep`)."""

    lost: str | None = None  # why the helper was given up (stopped, dead, overdue)

    def wait(self, tick: int) -> None:
        """Return once the helper has done ``tick``; raise :class:`Stopped` if it stopped
        (it says so, it died, or it was stopped or kept this process waiting for
        :data:`REPLY_FLOOR` seconds at one step)."""
        said = self.arrays[3][3]
        watch: list[processes.Watch] = []

        def stopped(naps: int) -> bool:
            if said[0]:
                return True
            if naps % 16:  # the process's state (a file in /proc) every 16th look
                return False
            if not watch:
                watch.append(processes.Watch(self.helper.process.pid, REPLY_FLOOR))
            overdue = watch[0].overdue()
            if overdue is None and self.helper.process.poll() is not None:
                overdue = "exited"
            if overdue is None:
                return False
            # Ended before the caller goes on alone: a helper that ran again (a SIGCONT)
            # would write into the rows the caller is computing.
            self.lost = overdue
            self.helper.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.helper.process.wait(REPLY_FLOOR)
            return True

        if not _reached(self.arrays[3][1], tick, stopped):
            raise Stopped

    def stop(self) -> bool:
        """End the job: the helper is asked to stop (if it has not finished) and its reply
        read; a helper given up is shut down. True if it did its part."""
        self.arrays[3][2][0] = 1
        if self.lost is None:
            return self.finish(None, None)
        if self.unfinished.detach():
            try:
                self.arrays = []
                _end(self.helper, failed=True)
                _warn(self.helper, self.lost)
            finally:
                self.helper.lock.release()
        return False


def _warn(helper: _Helper, overdue: str) -> None:
    """Say that ``helper`` was ended for missing a deadline (``overdue`` says how)."""
    warnings.warn(f"forward: the helper process that runs one of a layer's two pieces beside "
                  f"this one (pid {helper.process.pid}) {overdue} and was ended; the piece ran "
                  "in this process instead (the same numbers, more slowly)."
                  + (" No helper starts again in this process." if _FAILED else ""),
                  HelperFallbackWarning, stacklevel=_callers_level())


def _callers_level() -> int:
    """The ``stacklevel`` of the first frame outside rnnport, for a warning raised from the
    caller of this function: the line that called ``forward``."""
    package = os.path.dirname(__file__) + os.sep
    frame: FrameType | None = sys._getframe(2)
    level = 2
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _await_reply(helper: _Helper, allowed: float) -> str | None:
    """Wait until the helper's reply is waiting, at most ``allowed`` seconds (less when
    it is seen stopped): None then, else why it is overdue."""
    watch = processes.Watch(helper.process.pid, allowed)
    while not helper.poll(min(processes.POLL, watch.left())):
        why = watch.overdue()
        if why is not None:
            return why
    return None


def job(layer: Any, direction: int, inputs: np.ndarray, h0: np.ndarray,
        c0: np.ndarray | None) -> Job | None:
    """Start ``layer``'s ``direction`` in the helper over ``inputs`` (T, b, I), the piece's
    sequences, from ``h0`` (b, H_out) and ``c0`` (b, H) or None. None when there is no
    ready helper, another call is using it, or it cannot take this layer: the caller
    computes the piece itself. Only an interrupt (``KeyboardInterrupt`` …) is raised.

    The inputs reach the helper in the direction's step order (a backward direction's
    reversed in time as they are copied), so that its projection reads them as they lie."""

    def begin(helper: _Helper, tokens: list[int]) -> tuple[tuple[Any, ...], list[np.ndarray]]:
        steps, batch, width = inputs.shape
        shapes = _layout(steps, batch, width, layer.out_size, layer.hidden, layer.width,
                         c0 is not None, inputs.dtype)
        arrays = helper.arena_for(_bytes(inputs.dtype, shapes)).arrays(inputs.dtype, *shapes)
        arrays[0][...] = inputs[::-1] if layer.backward[direction] else inputs
        arrays[1][0] = h0
        if c0 is not None:
            arrays[2][0] = c0
        _ticks(arrays[6])[:] = 0
        return (("run", tokens[0], steps, batch, width, inputs.dtype.str, c0 is not None),
                arrays)

    return _start(Job, layer, (direction,), begin)


def lockstep(layer: Any, inputs: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
             pieces: list[tuple[int, int, int]], chunk: int, cell_rows: int
             ) -> LockstepJob | None:
    """Start a layer's steps in lockstep (:func:`rnnport.runtime.lockstep_steps`): every
    direction of ``layer`` over ``inputs`` (T, B, I) from ``h0`` and ``c0`` (D, B, H; None
    for a GRU), its input side projected in ``pieces`` (direction, first row, row after),
    its products in chunks of ``chunk`` columns (more than one sequence).
    The job's arrays are the arena's input sides (a list: (1, T, b, G·H) a piece), the h
    history (T+1, D, B, H) and ``cell_rows`` rows of c (D, B, H; empty for a GRU), their
    first rows set here, and ticks (4, 1), zero. None as for :func:`job`."""

    def begin(helper: _Helper, tokens: list[int]) -> tuple[tuple[Any, ...], list[Any]]:
        steps, batch, width = inputs.shape
        shapes = _lockstep_layout(steps, batch, width, pieces, layer.directions, layer.width,
                                  layer.hidden, cell_rows, c0 is not None, inputs.dtype)
        arena = helper.arena_for(_bytes(inputs.dtype, shapes))
        source, *projected, history, cells, raw = arena.arrays(inputs.dtype, *shapes)
        ticks = _ticks(raw)
        ticks[...] = 0
        source[...] = inputs
        history[0] = h0
        if c0 is not None:
            cells[0] = c0
        return (("lockstep", tokens, steps, batch, width, pieces, chunk, layer.width,
                 layer.hidden, cell_rows, c0 is not None, inputs.dtype.str),
                [projected, history, cells, ticks])

    return _start(LockstepJob, layer, tuple(range(layer.directions)), begin)


_Begin = Callable[[_Helper, list[int]], tuple[tuple[Any, ...], list[Any]]]


def _running_on() -> int | None:
    """The CPU the calling thread last ran on (Linux's ``/proc``), or None."""
    try:
        with open("/proc/thread-self/stat", "rb") as status:
            return int(status.read(4096).rsplit(b")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def _apart(helper: _Helper) -> None:
    """Keep the helper off the CPU the calling thread runs on, for the job it is given:
    the CPUs the thread may use but that one (all of them if it has only that one).

    On a machine with a task of another program running beside this one, all CPUs are
    busy when a job starts, and Linux wakes the helper on the CPU of the thread that woke
    it: the two halves of the work then share one core while the other program has the
    other to itself. (On 2 cores beside one busy process, a GRU of 512 units at 32
    sequences took as long as on one thread, 175 ms against 83 ms when idle; kept apart,
    130–140 ms.) On an idle machine the helper runs on another CPU anyway. Where the
    affinity cannot be read or set (not Linux, a sandbox), nothing changes."""
    cpu = _running_on()
    if cpu is None or helper.process.returncode is not None:  # ended: its pid may be reused
        return
    try:
        allowed = os.sched_getaffinity(0)
        chosen = (allowed - {cpu}) or allowed
        if chosen != helper.cpus:
            os.sched_setaffinity(helper.process.pid, chosen)
            helper.cpus = chosen
    except (AttributeError, OSError):
        pass


def _start(kind: type[Job], layer: Any, directions: tuple[int, ...], begin: _Begin) -> Any:
    """A job of ``kind`` for ``layer``'s ``directions``: ``begin(helper, tokens)`` fills the
    arena and returns the message (the caller's ``np.seterr`` is added to it) and the job's
    arrays. None when there is no ready helper, another call is using it, or it cannot take
    one of the directions."""
    helper = _current()
    if helper is None or not helper.lock.acquire(blocking=False):
        return None
    started: Job | None = None
    try:
        if not helper.broken and helper.is_ready():
            tokens = [helper.token(layer, direction) for direction in directions]
            if _UNUSABLE not in tokens:
                forgotten = []
                while helper.forgotten:  # pop by pop: a finalizer may add to it meanwhile
                    forgotten.append(helper.forgotten.pop())
                if forgotten:
                    _send(helper.sock, ("forget", forgotten))
                _apart(helper)
                message, arrays = begin(helper, tokens)
                # The caller's np.seterr, every condition it does not ignore made "raise":
                # the helper reports it, and the piece runs again here, where it warns,
                # calls, logs or raises as the caller's settings say.
                errors = {condition: "ignore" if action == "ignore" else "raise"
                          for condition, action in np.geterr().items()}
                _send(helper.sock, (*message, errors))
                started = kind(helper, layer, directions, arrays)  # holds the lock from here
    except Exception as error:  # a dead helper (OSError, EOFError …) or anything unexpected
        _dropped(helper, failed=True)
        if isinstance(error, TimeoutError):  # a message it did not take (stopped, stuck)
            _warn(helper, f"took no message within {processes.seconds(REPLY_FLOOR)} s (plus 1 s "
                          "per 100 MB)")
        return None
    except BaseException:  # interrupted: whatever was sent, the helper cannot be trusted
        if started is None:
            _dropped(helper)
        else:
            started.abandon()
        raise
    if started is None:
        helper.lock.release()
    return started


# -- the helper's side ---------------------------------------------------------------------


# (layer, inputs, h history, cell state or None, input side, ticks) -> the steps done
_Run = Callable[[Any, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray, np.ndarray], int]
_Lockstep = Callable[[list[Any], np.ndarray, list[np.ndarray], np.ndarray, np.ndarray,
                      np.ndarray, Callable[[int], None], list[tuple[int, int, int]], int], None]


def serve(fd: int, prepare: Callable[[Any, dict[str, np.ndarray], np.dtype, bool], Any],
          run: _Run, lockstep: _Lockstep) -> None:
    """The helper's loop: layers, arenas and runs from the socket ``fd`` until it closes.
    ``prepare(spec, params, dtype, backward)`` makes a layer direction from its canonical
    parameters; ``run(layer, inputs, history, cell, projected, ticks)`` runs it (and
    returns the steps it did);
    ``lockstep(layers, inputs, projected, history, cells, ticks, wait, pieces, chunk)`` runs
    its part of a lockstep layer (the runtime's :func:`~rnnport.runtime.helper_layer`,
    :func:`~rnnport.runtime.run_direction` and :func:`~rnnport.runtime.lockstep_helper`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the caller's
    sock = socket.socket(fileno=fd)
    layers: dict[int, Any] = {}
    arena: _Arena | None = None
    _send(sock, ("ready",))
    while True:
        try:
            message = _receive(sock)
        except (EOFError, OSError):
            return
        except Exception:  # a layer whose parameters this process cannot rebuild: skipped,
            continue       # and its runs answer with an error
        kind = message[0]
        if kind == "layer":
            _, token, spec, params, dtype, backward = message
            try:
                layers[token] = prepare(spec, params, np.dtype(dtype), backward)
            except Exception:  # its runs answer with an error
                layers.pop(token, None)
        elif kind == "forget":
            for token in message[1]:
                layers.pop(token, None)
        elif kind == "arena":
            if arena is not None:
                arena.close()
                arena = None
            if message[1]:  # a new one (0: only give up the old)
                _, fds, _, _ = socket.recv_fds(sock, 1, 1)
                arena = _Arena(message[1], fds[0])
        elif kind == "run":
            _send(sock, _run_one(message, layers, arena, run))
        elif kind == "lockstep":
            _send(sock, _run_lockstep(message, layers, arena, lockstep, sock))


def _run_one(message: tuple[Any, ...], layers: dict[int, Any], arena: _Arena | None,
             run: _Run) -> tuple[Any, ...]:
    """One "run" message's reply: ("done",), or ("handed", s) where the caller asked to
    take over and the helper stopped after ``s`` steps; its views of the arena end here,
    so that the arena can be unmapped when it is replaced."""
    _, token, steps, batch, width, dtype, has_cell, errors = message
    try:
        layer = layers[token]
        if arena is None:
            raise RuntimeError("no arena was sent")
        shapes = _layout(steps, batch, width, layer.out_size, layer.hidden, layer.width,
                         has_cell, np.dtype(dtype))
        inputs, h0, c0, history, cell, projected, raw = arena.arrays(np.dtype(dtype), *shapes)
        history[0] = h0
        if has_cell:
            cell[...] = c0
        with np.errstate(**errors):  # what the caller does not ignore raises
            done = run(layer, inputs, history, cell if has_cell else None, projected,
                       _ticks(raw))
    except FloatingPointError as error:  # the caller computes the piece: its settings act
        return ("raised", str(error))    # there (a warning, a call, the error)
    except Exception as error:  # reported; the caller computes the piece
        return ("error", f"{type(error).__name__}: {error}")
    return ("done",) if done == steps else ("handed", done)


class _Told(Exception):
    """The caller asked the helper to stop its part of a lockstep layer, or went away."""


# A lockstep wait in the helper gives up when the caller has not moved for this long (it
# was stopped, or is stuck): the caller, if it goes on, finishes the layer alone.
LOCKSTEP_STALL = 60.0


def _run_lockstep(message: tuple[Any, ...], layers: dict[int, Any], arena: _Arena | None,
                  lockstep: _Lockstep, sock: socket.socket) -> tuple[str, ...]:
    """One "lockstep" message's reply. Whatever ends its part early, the helper says so in
    the ticks first, so that the caller stops waiting for it."""
    (_, tokens, steps, batch, width, pieces, chunk, gates, hidden, cell_rows, cell, dtype,
     errors) = message
    if arena is None:
        return ("error", "RuntimeError: no arena was sent")
    try:
        dtype = np.dtype(dtype)
        shapes = _lockstep_layout(steps, batch, width, pieces, len(tokens), gates, hidden,
                                  cell_rows, cell, dtype)
        inputs, *projected, history, cells, raw = arena.arrays(dtype, *shapes)
        ticks = _ticks(raw)
    except Exception as error:  # out of step with the caller: it gives up on the helper
        return ("error", f"{type(error).__name__}: {error}")
    caller, asked = ticks[0], ticks[2]
    watching = select.poll()
    watching.register(sock, select.POLLIN)  # the caller sends nothing meanwhile: an end

    def wait(tick: int) -> None:
        since = time.monotonic()
        if not _reached(caller, tick, lambda _: bool(
                asked[0] or watching.poll(0) or time.monotonic() - since > LOCKSTEP_STALL)):
            raise _Told

    try:
        parts = [layers[token] for token in tokens]
        with np.errstate(**errors):  # what the caller does not ignore raises
            lockstep(parts, inputs, projected, history, cells, ticks, wait, pieces, chunk)
    except _Told:
        reply: tuple[str, ...] = ("stopped",)
    except FloatingPointError as error:  # the caller computes the rest: its settings act
        reply = ("raised", str(error))
    except Exception as error:  # reported; the caller computes the rest
        reply = ("error", f"{type(error).__name__}: {error}")
    else:
        return ("done",)
    ticks[3][0] = 1
    return reply
