"""Waiting on another process: every wait has a deadline, and a stopped process is noticed.

rnnport starts processes of its own: the HDF5 reader's child (:mod:`rnnport.io.hdf5`),
TensorFlow for a framework check, the corpus's pool workers and ``forward``'s helper
(:mod:`rnnport.helper`). Any of them can stop answering: killed, stopped (``SIGSTOP``, a
terminal's Ctrl-Z sent to its group alone, a debugger), or stuck. No wait on one is
without end:

* each wait has a deadline derived from the work it waits for (a small multiple of the
  time that work is expected to take, never less than a few seconds), measured on a
  :class:`Clock` that leaves out the time this process itself was stopped (a terminal's
  Ctrl-Z stops a command and its children together: after ``fg``, the wait goes on);
* a process seen stopped (state ``T`` in ``/proc/PID/stat``, on Linux) at every look for
  :data:`STOPPED_GRACE` seconds has missed its deadline already (:class:`Watch`);
* a process past its deadline is killed, and the caller recovers: it runs the work itself
  (``forward``'s helper, a corpus's files), or says why there is no result (a framework
  check), or raises an rnnport error where the work cannot run here (the HDF5 library,
  kept out of this process on purpose).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["POLL", "STOPPED_GRACE", "Clock", "Overdue", "Watch", "run", "seconds", "state"]

POLL = 0.1  # seconds between looks at a process that has not answered yet
STOPPED_GRACE = 1.0  # seconds a process may be seen stopped before it counts as overdue
_LONGEST_STEP = 1.0  # seconds of one step of a Clock, at most (see Clock)
_REAPED_WITHIN = 5.0  # seconds for a killed process to be gone


def state(pid: int) -> str | None:
    """The process ``pid``'s state letter (``R`` running, ``S`` sleeping, ``T`` stopped,
    ``Z`` exited …), or None where it cannot be known (no ``/proc``, no such process)."""
    try:
        text = Path(f"/proc/{int(pid)}/stat").read_bytes()
    except (OSError, ValueError):
        return None
    # "PID (NAME) STATE …": the name may hold spaces and parentheses; the state follows
    # the last ")".
    _, _, rest = text.rpartition(b")")
    fields = rest.split()
    return fields[0].decode("ascii", "replace") if fields else None


class Clock:
    """Seconds waited, counted in steps of at most :data:`_LONGEST_STEP` (one call of
    :meth:`elapsed` per :data:`POLL` or so): a step longer than that is time this process
    did not run (it was stopped, or the machine suspended), which no deadline counts."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.total = 0.0

    def elapsed(self) -> float:
        now = time.monotonic()
        self.total += min(max(now - self.last, 0.0), _LONGEST_STEP)
        self.last = now
        return self.total


class Watch:
    """One process's deadline: ``allowed`` seconds on a :class:`Clock` from now, or less
    when the process is seen stopped for :data:`STOPPED_GRACE` seconds."""

    def __init__(self, pid: int, allowed: float) -> None:
        self.pid, self.allowed = pid, allowed
        self.clock = Clock()
        self.stopped_since: float | None = None
        self.stopped = False  # whether it was found overdue for being stopped

    def left(self) -> float:
        """Seconds left before the deadline (0 when it has passed)."""
        return max(self.allowed - self.clock.total, 0.0)

    def overdue(self) -> str | None:
        """None while the process may still answer; else why it is overdue (a sentence's
        end: "was stopped (SIGSTOP or a debugger) for 1 s", "gave no answer within 20 s")."""
        now = self.clock.elapsed()
        if state(self.pid) == "T":
            if self.stopped_since is None:
                self.stopped_since = now
            if now - self.stopped_since >= STOPPED_GRACE:
                self.stopped = True
                return f"was stopped (SIGSTOP, Ctrl-Z or a debugger) for {seconds(STOPPED_GRACE)} s"
        else:
            self.stopped_since = None
        if now >= self.allowed:
            return f"gave no answer within {seconds(self.allowed)} s"
        return None


def seconds(value: float) -> str:
    """``value`` seconds for a message: "0.5", "5", "300", "1,200"."""
    return f"{value:,.0f}" if value >= 10 else f"{value:.2g}"


class Overdue(Exception):
    """A process :func:`run` waited for missed its deadline and was killed; the message
    says how ("was stopped … for 1 s", "gave no answer within 20 s"), ``stopped`` whether
    it was found stopped."""

    def __init__(self, why: str, stopped: bool) -> None:
        super().__init__(why)
        self.stopped = stopped


def run(command: Sequence[str], *, timeout: float, input: bytes | None = None,
        env: Mapping[str, str] | None = None, cwd: str | os.PathLike[str] | None = None
        ) -> subprocess.CompletedProcess[bytes]:
    """``subprocess.run(command, input=input, capture_output=True)``, waited for at most
    ``timeout`` seconds (on a :class:`Clock`) and less when the process is seen stopped
    (see :class:`Watch`): then it is killed and :class:`Overdue` raised. ``input`` goes to
    its standard input from a thread of its own (``communicate()``, called again after a
    timeout, would not send the rest of it)."""
    feed = os.pipe() if input else None
    try:
        process = subprocess.Popen(
            list(command), stdin=feed[0] if feed else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd)
    except BaseException:
        if feed:
            os.close(feed[1])
        raise
    finally:
        if feed:
            os.close(feed[0])
    if feed and input:
        threading.Thread(target=_write_all, args=(feed[1], input), daemon=True,
                         name="rnnport-child-input").start()
    watch = Watch(process.pid, timeout)
    try:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=POLL)
                break
            except subprocess.TimeoutExpired:
                why = watch.overdue()
                if why is not None:
                    raise Overdue(why, watch.stopped) from None
    except BaseException:
        _kill(process)
        raise
    return subprocess.CompletedProcess(list(command), process.returncode, stdout, stderr)


def _write_all(descriptor: int, data: bytes) -> None:
    """``data`` into the pipe ``descriptor``, then closed (early if the reader is gone)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(descriptor, view[:1 << 20]):]
    except OSError:  # the process ended (or was killed) without reading it all
        pass
    finally:
        os.close(descriptor)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """Kill ``process`` (a stopped one too: SIGKILL needs no SIGCONT) and collect it."""
    with contextlib.suppress(OSError):
        process.kill()
    with contextlib.suppress(subprocess.TimeoutExpired, OSError, ValueError):
        process.communicate(timeout=_REAPED_WITHIN)
