"""Waits on other processes have deadlines, and a stopped process is not waited for: the
HDF5 reader's child and TensorFlow's checks (``forward``'s helper: test_helper.py; the
corpus's workers: test_corpus.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError, LimitError
from rnnport.io import processes

pytestmark = pytest.mark.skipif(not Path(f"/proc/{os.getpid()}/stat").exists(),
                                reason="a stopped process is told by /proc (Linux)")

STOP_ITSELF = "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n"


def test_a_stopped_hdf5_reader_is_ended_within_seconds(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnport.io import hdf5

    rnnport.write(RNN.random(Spec("gru", 3, 4), seed=1), "keras", path=tmp_path / "m.weights.h5")
    child = tmp_path / "child.py"
    child.write_text(STOP_ITSELF)
    monkeypatch.setattr(hdf5, "CHILD", child)
    start = time.monotonic()
    with rnnport.limits(seconds=60), pytest.raises(
            FormatError, match=r"m\.weights\.h5: the process reading this file with the HDF5 "
                               r"library was stopped \(SIGSTOP, Ctrl-Z or a debugger\) for 1 s "
                               r"and was ended; nothing was read") as caught:
        rnnport.read(tmp_path / "m.weights.h5")
    assert time.monotonic() - start < 20  # not the 60 s the file may take
    assert not isinstance(caught.value, LimitError)  # not the file's doing


def test_a_stopped_tensorflow_check_says_so_within_seconds(tmp_path: Path) -> None:
    from rnnport.formats import _tensorflow

    start = time.monotonic()
    why = _tensorflow.run_job(["-c", STOP_ITSELF], {}, np.zeros((1, 2, 3), np.float32), "x")
    assert time.monotonic() - start < 20
    assert isinstance(why, str) and why == (
        "TensorFlow's process was stopped (SIGSTOP, Ctrl-Z or a debugger) for 1 s and was "
        "ended")


def test_a_child_past_its_deadline_is_killed_and_collected() -> None:
    code = "import sys, time\nsys.stdout.write(sys.stdin.read())\nsys.stdout.flush()\ntime.sleep(60)"
    start = time.monotonic()
    with pytest.raises(processes.Overdue, match=r"^gave no answer within 0\.5 s$") as caught:
        processes.run([sys.executable, "-c", code], input=b"x" * 100_000, timeout=0.5)
    assert time.monotonic() - start < 10 and not caught.value.stopped
    done = processes.run([sys.executable, "-c", code.replace("60", "0")],
                         input=b"x" * 100_000, timeout=30)
    assert done.returncode == 0 and done.stdout == b"x" * 100_000


def test_a_child_stopped_then_resumed_within_the_grace_is_waited_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[bytes]] = []
    popen = subprocess.Popen

    def recorded(*arguments: Any, **options: Any) -> subprocess.Popen[bytes]:
        started.append(popen(*arguments, **options))
        return started[-1]

    monkeypatch.setattr(processes.subprocess, "Popen", recorded)
    outcome: list[Any] = []
    code = "import sys\n" + STOP_ITSELF + "sys.stdout.write('resumed')\n"
    waiting = threading.Thread(target=lambda: outcome.append(
        processes.run([sys.executable, "-c", code], timeout=30)))
    waiting.start()
    deadline = time.monotonic() + 20
    while not started or processes.state(started[0].pid) != "T":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(processes.STOPPED_GRACE / 2)
    os.kill(started[0].pid, signal.SIGCONT)
    waiting.join(30)
    assert outcome and outcome[0].stdout == b"resumed"


def test_the_clock_leaves_out_time_this_process_did_not_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(processes.time, "monotonic", lambda: now[0])
    clock = processes.Clock()
    for step in (0.1, 0.1, 3600.0, 0.1):  # stopped for an hour between two looks
        now[0] += step
        clock.elapsed()
    assert clock.total == pytest.approx(0.1 + 0.1 + 1.0 + 0.1)


def test_the_state_of_a_process() -> None:
    assert processes.state(os.getpid()) == "R"
    assert processes.state(2**22 + 12345) is None  # no such process
    child = subprocess.Popen([sys.executable, "-c", STOP_ITSELF])
    try:
        deadline = time.monotonic() + 20
        while processes.state(child.pid) != "T":
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()


def test_input_larger_than_a_pipe_reaches_a_slow_reader() -> None:
    """The input goes on while the child reads it slowly, over several looks at it."""
    code = ("import sys, time\ntime.sleep(0.3)\ndata = sys.stdin.buffer.read()\n"
            "sys.stdout.write(str(len(data)))\n")
    done = processes.run([sys.executable, "-c", code], input=b"x" * (3 << 20), timeout=60)
    assert done.stdout == str(3 << 20).encode()
