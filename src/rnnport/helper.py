"""A helper process that runs one of a layer's two independent pieces (a bidirectional
layer's backward direction, or the second half of a one-way layer's batch) beside the
calling process (Linux).

A layer's step is one matrix product and a dozen elementwise operations. Two Python
threads, one per piece, pass the interpreter lock between them at each operation, so at
batch 1 the second core waits more than it works, and at larger batches each operation
waits its turn. A second process shares no lock with this one: the second piece runs
there, first step to last, while the first runs here, and the two meet once per layer.

* One helper per process, started by the first call that would use it. It starts in the
  background: that call runs its directions in threads, and the calls after it use the
  helper once it has said it is ready. It is ``python -c`` running :func:`serve`, with
  one BLAS thread, and talks to this process over a socket pair. A piece's input and its
  outputs pass through one shared memory file (``memfd``) mapped by both, replaced by a
  larger one when a call needs more.
* It receives a layer direction's parameters once (its canonical arrays, which it
  prepares exactly as :mod:`rnnport.runtime` does here) and forgets them when the
  network is collected.
* It computes with the same code and the same BLAS calls as the thread that would run
  that piece here, so the numbers are bit for bit those of ``forward(threads=1)``.
* It ends when this process closes its end of the socket (at exit, or when it is
  killed). If it fails, is killed, or this call is interrupted, the direction is computed
  here (or the call ends) and the helper is shut down; a helper that failed to start is
  not started again in this process.
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
import weakref
from collections.abc import Callable
from itertools import count
from mmap import mmap
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["Job", "available", "job", "serve", "shut_down", "wait_until_ready"]

_HEADER = struct.Struct("<Q")
_ALIGN = 64
_SINGLE_THREADED = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                    "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def available() -> bool:
    """Whether this platform can run a helper: shared memory files and descriptor passing
    (Linux), and an interpreter to start."""
    return (hasattr(os, "memfd_create") and hasattr(socket, "send_fds")
            and bool(sys.executable))


# -- framing: one pickled message after its length ---------------------------------------


def _send(sock: socket.socket, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    sock.sendall(_HEADER.pack(len(data)) + data)


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
            offset += -(-items * dtype.itemsize // _ALIGN) * _ALIGN
        return out

    def close(self) -> None:
        with contextlib.suppress(BufferError):  # views still alive: the mapping stays
            self.map.close()
        os.close(self.fd)


def _layout(steps: int, batch: int, width: int, out_size: int, hidden: int,
            cell: bool) -> list[tuple[int, ...]]:
    """The arena's arrays for one layer: inputs, h0, c0, the h history, the final cell."""
    return [(steps, batch, width), (1, batch, out_size), (1, batch, hidden if cell else 0),
            (steps + 1, 1, batch, out_size), (1, batch, hidden if cell else 0)]


def _bytes(dtype: np.dtype, shapes: list[tuple[int, ...]]) -> int:
    return sum(-(-int(np.prod(shape)) * dtype.itemsize // _ALIGN) * _ALIGN for shape in shapes)


# -- this process's side -------------------------------------------------------------------


class _Helper:
    """The running helper process, seen from here."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.ready = False
        self.lock = threading.Lock()
        self.tokens: weakref.WeakKeyDictionary[Any, dict[int, int]] = \
            weakref.WeakKeyDictionary()
        self.forgotten: list[int] = []
        self.arena: _Arena | None = None
        mine, theirs = socket.socketpair()
        self.sock = mine
        package = str(Path(__file__).resolve().parent.parent)
        # The runtime's entry point hands serve() the two functions it runs.
        code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "from rnnport.runtime import serve_helper; serve_helper(int(sys.argv[2]))")
        environment = {**os.environ, **dict.fromkeys(_SINGLE_THREADED, "1")}
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-c", code, package, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=environment, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            theirs.close()

    def is_ready(self) -> bool:
        """Whether the helper has said it is ready (a look, never a wait)."""
        if not self.ready and select.select([self.sock], [], [], 0)[0]:
            if _receive(self.sock) != ("ready",):
                raise EOFError("the helper did not start")
            self.ready = True
        return self.ready

    def wait_ready(self, timeout: float) -> bool:
        if not self.ready and select.select([self.sock], [], [], timeout)[0]:
            return self.is_ready()
        return self.ready

    def token(self, layer: Any, direction: int) -> int:
        """The helper's name for ``layer``'s ``direction``, its parameters sent once."""
        tokens = self.tokens.get(layer)
        if tokens is None:
            tokens = self.tokens[layer] = {}
            weakref.finalize(layer, self.forgotten.extend, tokens.values())
        token = tokens.get(direction)
        if token is None:
            token = next(_TOKENS)
            spec, directions, dtype = layer.source
            _send(self.sock, ("layer", token, spec, dict(directions[direction]), dtype.str,
                              layer.backward[direction]))
            tokens[direction] = token
        return token

    def arena_for(self, size: int) -> _Arena:
        if self.arena is None or self.arena.size < size:
            if self.arena is not None:
                self.arena.close()
            self.arena = _Arena(1 << max(size - 1, 1 << 16).bit_length())
            _send(self.sock, ("arena", self.arena.size))
            socket.send_fds(self.sock, [b"F"], [self.arena.fd])
        return self.arena

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        try:
            self.process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.arena is not None:
            self.arena.close()
            self.arena = None


_TOKENS = count(1)
_STATE_LOCK = threading.Lock()
_HELPER: _Helper | None = None
_FAILED = False  # a helper failed to start in this process: none is started again


def _current() -> _Helper | None:
    """The ready helper of this process, or None (starting one if there is none)."""
    global _HELPER, _FAILED
    with _STATE_LOCK:
        helper = _HELPER
        if helper is not None and helper.pid != os.getpid():  # inherited through fork()
            helper = _HELPER = None
        if helper is None:
            if _FAILED or not available():
                return None
            try:
                helper = _HELPER = _Helper()
            except OSError:
                _FAILED = True
                return None
            return None  # ready from a later call on
    try:
        return helper if helper.is_ready() else None
    except (OSError, EOFError, pickle.UnpicklingError):
        _FAILED = True
        shut_down()
        return None


def shut_down() -> None:
    """End this process's helper, if any (a new one may start on a later call)."""
    global _HELPER
    with _STATE_LOCK:
        helper, _HELPER = _HELPER, None
    if helper is not None and helper.pid == os.getpid():
        helper.close()


atexit.register(shut_down)


def wait_until_ready(timeout: float = 30.0) -> bool:
    """Start this process's helper if needed and wait for it (tests, benchmarks)."""
    if _current() is not None:
        return True
    helper = _HELPER
    return helper is not None and helper.wait_ready(timeout) and _current() is not None


class Job:
    """One piece of a layer, running in the helper."""

    def __init__(self, helper: _Helper, arrays: list[np.ndarray]) -> None:
        self.helper, self.arrays = helper, arrays

    def finish(self, history: np.ndarray, cell: np.ndarray | None) -> bool:
        """Wait for the helper; copy its h history ``(T+1, b, H_out)`` and final cell
        ``(b, H)`` into ``history`` and ``cell``. False if it failed (the helper is then
        shut down, and the caller computes the direction itself)."""
        helper = self.helper
        try:
            reply = _receive(helper.sock)
            if reply != ("done",):
                raise EOFError(f"the helper failed: {reply!r}")
            history[...] = self.arrays[3][:, 0]
            if cell is not None:
                cell[...] = self.arrays[4][0]
            return True
        except (OSError, EOFError, pickle.UnpicklingError):
            shut_down()
            return False
        except BaseException:  # interrupted while the helper works: it cannot be reused
            shut_down()
            raise
        finally:
            self.arrays = []
            helper.lock.release()

    def abandon(self) -> None:
        """This call ends without waiting (an exception here): the helper is shut down."""
        self.arrays = []
        self.helper.lock.release()
        shut_down()


def job(layer: Any, direction: int, inputs: np.ndarray, h0: np.ndarray,
        c0: np.ndarray | None) -> Job | None:
    """Start ``layer``'s ``direction`` in the helper over ``inputs`` (T, b, I), the piece's
    sequences, from ``h0`` (b, H_out) and ``c0`` (b, H) or None; None when no helper is
    ready or it is busy with another call (the caller computes the piece itself)."""
    helper = _current()
    if helper is None or not helper.lock.acquire(blocking=False):
        return None
    try:
        steps, batch, width = inputs.shape
        shapes = _layout(steps, batch, width, layer.out_size, layer.hidden, c0 is not None)
        token = helper.token(layer, direction)
        if helper.forgotten:
            forgotten, helper.forgotten[:] = list(helper.forgotten), []
            _send(helper.sock, ("forget", forgotten))
        arena = helper.arena_for(_bytes(inputs.dtype, shapes))
        arrays = arena.arrays(inputs.dtype, *shapes)
        arrays[0][...] = inputs
        arrays[1][0] = h0
        if c0 is not None:
            arrays[2][0] = c0
        _send(helper.sock, ("run", token, steps, batch, width, inputs.dtype.str, c0 is not None))
    except (OSError, EOFError):
        helper.lock.release()
        shut_down()
        return None
    except BaseException:
        helper.lock.release()
        shut_down()
        raise
    return Job(helper, arrays)


# -- the helper's side ---------------------------------------------------------------------


def serve(fd: int, prepare: Callable[[Any, dict[str, np.ndarray], np.dtype, bool], Any],
          run: Callable[[Any, np.ndarray, np.ndarray, np.ndarray | None], None]) -> None:
    """The helper's loop: layers, arenas and runs from the socket ``fd`` until it closes.
    ``prepare(spec, params, dtype, backward)`` makes a layer direction from its canonical
    parameters; ``run(layer, inputs, history, cell)`` runs it (the runtime's
    :func:`~rnnport.runtime.helper_layer` and :func:`~rnnport.runtime.run_direction`)."""
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
        kind = message[0]
        if kind == "layer":
            _, token, spec, params, dtype, backward = message
            layers[token] = prepare(spec, params, np.dtype(dtype), backward)
        elif kind == "forget":
            for token in message[1]:
                layers.pop(token, None)
        elif kind == "arena":
            _, fds, _, _ = socket.recv_fds(sock, 1, 1)
            if arena is not None:
                arena.close()
            arena = _Arena(message[1], fds[0])
        elif kind == "run":
            _, token, steps, batch, width, dtype, has_cell = message
            try:
                layer = layers[token]
                assert arena is not None
                shapes = _layout(steps, batch, width, layer.out_size, layer.hidden, has_cell)
                inputs, h0, c0, history, cell = arena.arrays(np.dtype(dtype), *shapes)
                history[0] = h0
                if has_cell:
                    cell[...] = c0
                run(layer, inputs, history, cell if has_cell else None)
            except Exception as error:  # reported; the caller computes the direction
                _send(sock, ("error", f"{type(error).__name__}: {error}"))
            else:
                _send(sock, ("done",))
