"""The helper process that runs one of a layer's two pieces (a backward direction, or half
of a one-way layer's batch): it gives the numbers of ``threads=1`` bit for bit, and a
helper that dies, fails or is interrupted costs nothing but its speed."""

from __future__ import annotations

import contextlib
import gc
import os
import resource
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rnnport import RNN, Spec, helper, runtime
from rnnport.errors import HelperFallbackWarning

pytestmark = pytest.mark.skipif(not helper.available(), reason="the helper needs Linux")


@pytest.fixture
def used(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every layer qualifies for the helper (a one-way layer's batch of 2 or more splits in
    halves); the outcome of each helper job is recorded."""
    monkeypatch.setattr(runtime, "HELPER_MIN_WORK", 0)
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 1)
    monkeypatch.setattr(runtime, "SPLIT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "_cores", lambda: 2)
    monkeypatch.setattr(helper, "_FAILED", False)  # each test may end helpers of its own
    monkeypatch.setattr(helper, "_ENDS", 0)
    outcomes: list[bool] = []
    finish = helper.Job.finish

    def recorded(self: helper.Job, *args: Any) -> bool:
        outcomes.append(finish(self, *args))
        return outcomes[-1]

    monkeypatch.setattr(helper.Job, "finish", recorded)
    assert helper.wait_until_ready(60), "the helper process did not start"
    return outcomes


SPECS = {
    "LSTM": Spec("lstm", 7, 9, num_layers=2, bidirectional=True),
    "LSTM peepholes and projection": Spec("lstm", 7, 9, num_layers=2, bidirectional=True,
                                          peepholes=True, proj_size=4),
    "GRU reset after": Spec("gru", 7, 9, num_layers=2, bidirectional=True),
    "GRU reset before": Spec("gru", 7, 9, num_layers=2, bidirectional=True,
                             reset_after=False),
    "RNN": Spec("rnn_tanh", 7, 9, num_layers=3, bidirectional=True),
    "one-way LSTM, batch halves": Spec("lstm", 7, 9, num_layers=2, proj_size=4),
    "one-way reverse GRU, batch halves": Spec("gru", 7, 9, num_layers=2, reverse=True),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(SPECS))
def test_the_helper_gives_the_numbers_of_one_thread(used: list[bool], name: str,
                                                    dtype: type) -> None:
    net = RNN.random(SPECS[name], seed=5, dtype=dtype)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 11, 7)).astype(dtype)
    state = net.forward(x[:, :4], threads=1)[1]  # a state that is not zeros
    alone = net.forward(x, state=state, threads=1)
    assert not used  # threads=1 never uses it
    beside = net.forward(x, state=state, threads=2)
    assert used and all(used)
    np.testing.assert_array_equal(beside[0], alone[0])
    for got, expected in zip(beside[1] if isinstance(beside[1], tuple) else [beside[1]],
                             alone[1] if isinstance(alone[1], tuple) else [alone[1]],
                             strict=True):
        np.testing.assert_array_equal(got, expected)


def test_lengths_and_a_single_piece_stay_here(used: list[bool]) -> None:
    net = RNN.random(SPECS["LSTM"], seed=1)
    x = np.random.default_rng(2).standard_normal((3, 8, 7)).astype(np.float32)
    net.forward(x, lengths=[8, 5, 2], threads=2)
    RNN.random(Spec("gru", 7, 9, num_layers=2), seed=1).forward(x[:1], threads=2)
    assert not used


def test_a_killed_helper_costs_only_speed(used: list[bool]) -> None:
    net = RNN.random(SPECS["GRU reset after"], seed=3)
    x = np.random.default_rng(4).standard_normal((2, 9, 7)).astype(np.float32)
    expected = net.forward(x, threads=1)[0]
    running = helper._HELPER
    assert running is not None
    running.process.kill()
    running.process.wait()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert not any(used)  # no job succeeded: the directions ran here
    assert helper._HELPER is not running  # shut down; this call or a later one starts another
    assert helper.wait_until_ready(60)
    used.clear()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True]


def _lstm_case(steps: int) -> tuple[RNN, np.ndarray, np.ndarray]:
    """A bidirectional LSTM, an input of ``steps`` steps and its output with one thread."""
    net = RNN.random(SPECS["LSTM"], seed=3)
    x = np.random.default_rng(4).standard_normal((2, steps, 7)).astype(np.float32)
    return net, x, net.forward(x, threads=1)[0]


def test_an_interrupt_here_during_a_job_shuts_the_helper_down(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, expected = _lstm_case(9)
    loop = runtime._LOOPS["lstm"]

    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setitem(runtime._LOOPS, "lstm", interrupted)
    with pytest.raises(KeyboardInterrupt):
        net.forward(x, threads=2)
    assert helper._HELPER is None  # its reply would be read by the next call: not reused
    monkeypatch.setitem(runtime._LOOPS, "lstm", loop)
    assert helper.wait_until_ready(60)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)


def test_an_error_here_during_a_job_waits_for_the_helper_and_keeps_it(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, expected = _lstm_case(9)
    loop = runtime._LOOPS["lstm"]

    def failing(*args: Any) -> None:
        raise MemoryError("no room for the step's buffers")

    monkeypatch.setitem(runtime._LOOPS, "lstm", failing)  # here only: the helper has its own
    running = helper._HELPER
    with pytest.raises(MemoryError, match="no room"):
        net.forward(x, threads=2)
    assert used == [True]  # its piece was waited for (and not used)
    assert helper._HELPER is running and not running.broken
    monkeypatch.setitem(runtime._LOOPS, "lstm", loop)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True, True]


def test_the_callers_floating_point_settings_hold_in_the_helper(used: list[bool]) -> None:
    """np.seterr's settings apply to the helper's piece as to the caller's: infinite
    inputs in the helper's half of the batch raise under invalid="raise" (the piece is run
    again here, and raises here), and the helper stays for later calls. Saturated gates
    (e^x overflowing or underflowing) never raise."""
    net = RNN.random(SPECS["one-way LSTM, batch halves"], seed=3)
    x = np.random.default_rng(4).standard_normal((4, 9, 7)).astype(np.float32)
    expected = net.forward(x, threads=1)[0]
    bad = x.copy()
    # The second half of the batch, the helper's: inf − inf in its input projection,
    # invalid on any BLAS (an inf alone makes a NaN only where a kernel multiplies it by
    # a padding zero).
    bad[3, 4, :2] = np.inf, -np.inf
    running = helper._HELPER
    with np.errstate(invalid="raise"):
        with pytest.raises(FloatingPointError, match="invalid value"):
            net.forward(bad, threads=1)
        with pytest.raises(FloatingPointError, match="invalid value"):
            net.forward(bad, threads=2)
    assert used == [False]  # the first layer's helper piece raised there, then here
    assert helper._HELPER is running
    used.clear()
    with np.errstate(all="raise"):
        saturated = x * 1e4
        np.testing.assert_array_equal(net.forward(saturated, threads=2)[0],
                                      net.forward(saturated, threads=1)[0])
        np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True, True, True]  # not marked as a layer it cannot take
    # Warnings and the np.seterrcall handler act here, where the helper's piece runs again.
    used.clear()
    with pytest.warns(RuntimeWarning, match="invalid value"):
        warned = net.forward(bad, threads=2)[0]
    with pytest.warns(RuntimeWarning, match="invalid value"):
        np.testing.assert_array_equal(warned, net.forward(bad, threads=1)[0])
    called: list[str] = []
    previous = np.seterrcall(lambda kind, flag: called.append(kind))
    try:
        with np.errstate(invalid="call"):
            net.forward(bad, threads=2)
    finally:
        np.seterrcall(previous)
    assert called and set(called) == {"invalid value"}
    assert False in used and helper._HELPER is running
    used.clear()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True]


def test_a_collected_network_is_forgotten(used: list[bool]) -> None:
    x = np.random.default_rng(4).standard_normal((1, 6, 7)).astype(np.float32)
    net = RNN.random(SPECS["RNN"], seed=3)
    net.forward(x, threads=2)
    running = helper._HELPER
    assert running is not None
    sent = len(running.tokens)
    assert sent >= 3  # one per layer
    del net
    gc.collect()
    assert len(running.tokens) == sent - 3 and len(running.forgotten) == 3
    other = RNN.random(SPECS["RNN"], seed=4)
    other.forward(x, threads=2)
    assert running.forgotten == []  # told to the helper with the next job
    assert all(used)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_starts_its_own_helper(used: list[bool]) -> None:
    net = RNN.random(SPECS["LSTM"], seed=8)
    x = np.random.default_rng(9).standard_normal((2, 7, 7)).astype(np.float32)
    expected = net.forward(x, threads=1)[0]
    net.forward(x, threads=2)
    parent_helper = helper._HELPER
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: must not talk to the parent's helper
        code = 1
        try:
            os.close(read)
            first = net.forward(x, threads=2)[0]
            ok = helper._HELPER is not parent_helper and np.array_equal(first, expected)
            code = 0 if ok else 1
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        assert answer.read() == b"\x00"
    os.waitpid(pid, 0)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)  # still usable here


def test_the_helper_starts_from_a_plain_interpreter() -> None:
    """The helper finds rnnport wherever this process found it (no installation needed)."""
    assert helper.available()
    assert sys.executable
    assert helper.wait_until_ready(60)


def test_a_helper_killed_during_a_job_costs_only_speed(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, expected = _lstm_case(40)
    loop = runtime._LOOPS["lstm"]

    def killing(*args: Any) -> None:
        running = helper._HELPER
        if running is not None:
            running.process.kill()
        loop(*args)

    monkeypatch.setitem(runtime._LOOPS, "lstm", killing)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)


def test_threads_calling_as_the_helper_becomes_ready_agree(used: list[bool]) -> None:
    """The first calls after a start read its "ready" one at a time (under its lock)."""
    net = RNN.random(SPECS["LSTM"], seed=21)
    x = np.random.default_rng(22).standard_normal((2, 12, 7)).astype(np.float32)
    expected = net.forward(x, threads=1)[0]
    helper.shut_down()
    outcomes: list[Any] = []

    def call() -> None:
        try:
            outcomes.append(np.array_equal(net.forward(x, threads=2)[0], expected))
        except BaseException as error:  # reported below
            outcomes.append(error)

    for _ in range(3):
        threads = [threading.Thread(target=call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), "a call hangs"
    assert outcomes == [True] * 24


def test_a_process_with_many_open_files_still_uses_it(used: list[bool]) -> None:
    """Descriptors above 1023 (where select() stops) are polled."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"at most {hard} open files here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    helper.shut_down()  # a new one, its socket above 1023
    spare = [os.open(os.devnull, os.O_RDONLY)]
    while spare[-1] < 1030:  # every number below taken: the next socket lands above
        spare.append(os.open(os.devnull, os.O_RDONLY))
    try:
        assert helper.wait_until_ready(60)
        running = helper._HELPER
        assert running is not None and running.sock.fileno() > 1023
        net, x, expected = _lstm_case(9)
        np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
        assert used and all(used)
    finally:
        for descriptor in spare:
            os.close(descriptor)
        helper.shut_down()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_helper_never_imports_from_the_working_directory(
        used: list[bool], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    (tmp_path / "pickle.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                        "raise ImportError('planted')\n")
    monkeypatch.chdir(tmp_path)
    helper.shut_down()
    assert helper.wait_until_ready(60)
    net, x, expected = _lstm_case(9)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used and all(used)
    assert not marker.exists()


@dataclass(frozen=True)
class _ElsewhereSpec(Spec):
    """A Spec the helper cannot rebuild: its class lives in this test module, which the
    helper process cannot import."""


def test_a_layer_the_helper_cannot_take_runs_here_and_the_helper_stays(
        used: list[bool]) -> None:
    def local_spec() -> Spec:
        @dataclass(frozen=True)
        class LocalSpec(Spec):  # cannot even be pickled here
            pass
        return LocalSpec("lstm", 7, 9, num_layers=2, bidirectional=True)

    x = np.random.default_rng(4).standard_normal((2, 9, 7)).astype(np.float32)
    running = helper._HELPER
    for spec in (local_spec(), _ElsewhereSpec("lstm", 7, 9, num_layers=2, bidirectional=True)):
        net = RNN.random(spec, seed=3)
        expected = net.forward(x, threads=1)[0]
        used.clear()
        for _ in range(3):
            np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
        assert not any(used)  # at most an error reply, then never sent again
        assert helper._HELPER is running and running is not None and not running.broken
    used.clear()
    net, x, expected = _lstm_case(9)  # other layers still use it
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used and all(used)


def test_a_large_arena_is_given_up_after_its_call(used: list[bool],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helper, "ARENA_KEPT", 1 << 10)
    net, x, expected = _lstm_case(30)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    running = helper._HELPER
    assert used and all(used) and running is not None and running.arena is None
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)  # and a new one


def test_helpers_that_keep_dying_are_given_up(used: list[bool]) -> None:
    net, x, expected = _lstm_case(9)
    for _ in range(helper.GIVE_UP_AFTER):
        assert helper.wait_until_ready(60)
        running = helper._HELPER
        assert running is not None
        running.process.kill()
        running.process.wait()
        np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert helper._FAILED and helper._HELPER is None
    assert not helper.wait_until_ready(1)
    used.clear()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert not used


def test_an_interrupt_as_a_job_starts_leaves_no_lock_held(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, expected = _lstm_case(9)
    start = helper.Job.__init__

    def interrupted(self: helper.Job, *args: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(helper.Job, "__init__", interrupted)
    with pytest.raises(KeyboardInterrupt):  # not a RuntimeError about the lock
        net.forward(x, threads=2)
    monkeypatch.setattr(helper.Job, "__init__", start)
    assert helper._HELPER is None  # shut down, its lock let go
    assert helper.wait_until_ready(60)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)


def test_a_job_dropped_unfinished_lets_the_helper_go(used: list[bool]) -> None:
    net, x, expected = _lstm_case(9)
    layer = runtime._prepared(net)[0]
    inputs = np.ascontiguousarray(x.transpose(1, 0, 2))
    running = helper._HELPER
    started = helper.job(layer, 1, inputs, np.zeros((2, 9), np.float32),
                         np.zeros((2, 9), np.float32))
    assert started is not None and running is not None and running.lock.locked()
    del started  # as an interrupt between starting it and waiting for it does
    gc.collect()
    assert not running.lock.locked() and running.broken and helper._HELPER is None
    assert helper.wait_until_ready(60)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)


def test_an_error_reply_gives_up_a_large_arena_too(used: list[bool],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helper, "ARENA_KEPT", 1 << 10)
    net = RNN.random(_ElsewhereSpec("lstm", 7, 9, bidirectional=True), seed=3)
    x = np.random.default_rng(4).standard_normal((2, 30, 7)).astype(np.float32)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], net.forward(x, threads=1)[0])
    running = helper._HELPER
    assert used == [False] and running is not None and running.arena is None


def test_threads_racing_to_start_it_start_one(used: list[bool],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    helper.shut_down()
    starts: list[int] = []
    spawn = helper.subprocess.Popen

    def counted(*args: Any, **kwargs: Any) -> Any:
        starts.append(1)
        return spawn(*args, **kwargs)

    monkeypatch.setattr(helper.subprocess, "Popen", counted)
    barrier = threading.Barrier(8)

    def start() -> None:
        barrier.wait()
        helper._current()

    threads = [threading.Thread(target=start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert starts == [1]
    assert helper.wait_until_ready(60)


def test_without_a_ready_helper_small_steps_run_together(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer that would use the helper but finds none runs as it would without one: at
    batch 1 both directions step together, one loop for both."""
    monkeypatch.setattr(helper, "job", lambda *args: None)
    loop = runtime._LOOPS["lstm"]
    directions: list[int] = []

    def recorded(layer: Any, projected: np.ndarray, *args: Any) -> None:
        directions.append(projected.shape[0])
        loop(layer, projected, *args)

    monkeypatch.setitem(runtime._LOOPS, "lstm", recorded)
    net = RNN.random(Spec("lstm", 7, 9, bidirectional=True), seed=3)
    x = np.random.default_rng(4).standard_normal((1, 9, 7)).astype(np.float32)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], net.forward(x, threads=1)[0])
    assert directions == [2, 2]


@contextlib.contextmanager
def _stopped(running: Any) -> Iterator[None]:
    """``running`` (the helper) stopped (SIGSTOP) for the block; let go after it, if alive."""
    os.kill(running.process.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.kill(running.process.pid, signal.SIGCONT)


def test_a_stopped_helper_is_not_waited_for(used: list[bool]) -> None:
    """A helper stopped (SIGSTOP) while it holds a job is noticed within seconds: it is
    ended, with a warning, and its piece runs here; the next helper is used as before."""
    net, x, expected = _lstm_case(9)
    running = helper._HELPER
    assert running is not None
    start = time.monotonic()
    with _stopped(running), pytest.warns(
            HelperFallbackWarning, match=r"\(pid \d+\) was stopped \(SIGSTOP, Ctrl-Z or a "
                                         r"debugger\) for 1 s and was ended; the piece ran in "
                                         r"this process"):
        got = net.forward(x, threads=2)[0]
    waited = time.monotonic() - start
    np.testing.assert_array_equal(got, expected)
    assert waited < helper.REPLY_FLOOR  # noticed as stopped, before the deadline
    assert used == [False] and running.broken and running.process.poll() is not None
    assert helper._HELPER is not running
    assert helper.wait_until_ready(60)
    used.clear()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True]


def test_a_helper_that_never_answers_misses_a_deadline_of_its_work(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper that runs but never answers (here: its replies never come, as if it were
    stuck) is waited for REPLY_FACTOR times this process's piece, at least REPLY_FLOOR."""
    monkeypatch.setattr(helper, "REPLY_FLOOR", 0.5)
    net, x, expected = _lstm_case(9)
    running = helper._HELPER
    assert running is not None
    monkeypatch.setattr(running, "poll", lambda timeout: time.sleep(timeout) or False)
    start = time.monotonic()
    with pytest.warns(HelperFallbackWarning, match=r"gave no answer within 0\.5 s and was ended"):
        got = net.forward(x, threads=2)[0]
    assert time.monotonic() - start < 5
    np.testing.assert_array_equal(got, expected)
    assert used == [False] and running.broken


def test_a_message_to_a_stopped_helper_has_a_deadline(
        used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer's parameters larger than the socket's buffer, sent to a stopped helper: the
    send gives up after its deadline, and the layer runs here."""
    monkeypatch.setattr(helper, "REPLY_FLOOR", 0.5)
    running = helper._HELPER
    assert running is not None
    net = RNN.random(Spec("lstm", 7, 300, bidirectional=True), seed=3)  # 1.4 MB a direction
    x = np.random.default_rng(4).standard_normal((2, 5, 7)).astype(np.float32)
    expected = net.forward(x, threads=1)[0]
    start = time.monotonic()
    with _stopped(running), pytest.warns(
            HelperFallbackWarning, match=r"took no message within 0\.5 s \(plus 1 s per 100 MB\) "
                                         r"and was ended"):
        got = net.forward(x, threads=2)[0]
    waited = time.monotonic() - start
    np.testing.assert_array_equal(got, expected)
    assert waited < 10 and running.broken and not used


# -- lockstep: a batch-1 LSTM's steps shared by both processes --------------------------------

LOCKSTEP_SPECS = {
    "bidirectional": Spec("lstm", 7, 10, num_layers=2, bidirectional=True),
    "one-way": Spec("lstm", 7, 10, num_layers=2),
    "reverse, no bias": Spec("lstm", 7, 12, reverse=True, bias=False),
}


@pytest.fixture
def lockstep(used: list[bool], monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Every batch-1 LSTM runs in halves and in lockstep (on a machine whose other tasks
    are not counted); what each lockstep call returned is recorded."""
    if not runtime.ORDERED_STORES:
        pytest.skip("lockstep runs where stores are seen in order (x86)")
    monkeypatch.setattr(runtime, "HALVES_MIN_BYTES", 0)
    monkeypatch.setattr(runtime, "_contended", lambda: False)
    calls: list[bool] = []
    run = runtime._lockstep

    def recorded(*args: Any) -> bool:
        calls.append(run(*args))
        return calls[-1]

    monkeypatch.setattr(runtime, "_lockstep", recorded)
    return calls


def _one_sequence(name: str = "bidirectional", steps: int = 13, dtype: type = np.float32
                  ) -> tuple[RNN, np.ndarray, Any, tuple[np.ndarray, Any]]:
    """A network, one sequence, a state that is not zeros, and forward with one thread."""
    net = RNN.random(LOCKSTEP_SPECS[name], seed=7, dtype=dtype)
    x = np.random.default_rng(8).standard_normal((1, steps, 7)).astype(dtype)
    state = net.forward(x[:, :3], threads=1)[1]
    return net, x, state, net.forward(x, state=state, threads=1)


def _assert_same(got: tuple[np.ndarray, Any], expected: tuple[np.ndarray, Any]) -> None:
    np.testing.assert_array_equal(got[0], expected[0])
    for a, b in zip(got[1], expected[1], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(LOCKSTEP_SPECS))
def test_lockstep_gives_the_numbers_of_one_thread(lockstep: list[bool], used: list[bool],
                                                  name: str, dtype: type) -> None:
    net, x, state, expected = _one_sequence(name, dtype=dtype)
    assert not lockstep  # threads=1 never uses it
    _assert_same(net.forward(x, state=state, threads=2), expected)
    layers = LOCKSTEP_SPECS[name].num_layers
    assert lockstep == [True] * layers and used == [True] * layers


def test_lockstep_waits_for_a_busy_machine(lockstep: list[bool], used: list[bool],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """With another task running beside this process, each process takes a direction of
    its own (the same numbers): a partner kept off its core would hold up every step."""
    monkeypatch.setattr(runtime, "_contended", lambda: True)
    net, x, state, expected = _one_sequence()
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert not lockstep and used == [True, True]


def test_lockstep_at_a_real_size_and_two_blas_threads_gives_one_threads_bits(
        lockstep: list[bool], used: list[bool]) -> None:
    """Hidden 378 in float32 (2.3 MB a direction): with the BLAS at two threads when the
    call starts, the check of the halves runs on one, as the steps do (on two, OpenBLAS
    splits this matrix-vector product and its halves agree where one thread's do not)."""
    import threadpoolctl

    for hidden in (378, 386, 320):
        net = RNN.random(Spec("lstm", 4, hidden), seed=1)
        x = np.random.default_rng(2).standard_normal((1, 200, 4)).astype(np.float32)
        expected = net.forward(x, threads=1)
        with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
            got = net.forward(x)
        _assert_same(got, expected)
    assert True in lockstep  # hidden 320's halves agree: it ran in lockstep


def test_halves_that_disagree_never_run_in_lockstep(lockstep: list[bool],
                                                    used: list[bool]) -> None:
    net, x, state, expected = _one_sequence()
    for layer in runtime._prepared(net):
        layer.agree = False  # as the check finds for some sizes (hidden 100 in float32)
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert not lockstep and used == [True, True]  # each process a direction


def test_a_helper_stopped_in_its_projection_and_let_go_writes_nothing(
        lockstep: list[bool], used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    """Given up while stopped, the helper is ended before this process computes its
    part: let go (SIGCONT) while this process runs the rest, it could otherwise add its
    bias to the rows this process projected, or write into the rows it computes."""
    net, x, state, expected = _one_sequence(steps=40)
    start = helper.lockstep
    stopped: list[Any] = []

    def stop_at_once(*args: Any) -> Any:
        job = start(*args)
        if job is not None and not stopped:
            os.kill(job.helper.process.pid, signal.SIGSTOP)
            stopped.append(job.helper)
        return job

    alone = runtime._alone
    ended_first: list[bool] = []

    def let_go_first(*args: Any) -> None:
        ended_first.append(stopped[0].process.poll() is not None)
        with contextlib.suppress(OSError):  # ended: nothing to let go
            os.kill(stopped[0].process.pid, signal.SIGCONT)
        time.sleep(0.2)  # a helper still alive would run now
        alone(*args)

    monkeypatch.setattr(helper, "lockstep", stop_at_once)
    monkeypatch.setattr(runtime, "_alone", let_go_first)
    with pytest.warns(HelperFallbackWarning, match=r"was stopped"):
        got = net.forward(x, state=state, threads=2)
    _assert_same(got, expected)
    assert ended_first == [True]


def test_lockstep_needs_stores_seen_in_order(lockstep: list[bool], used: list[bool],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Where other cores may see stores out of order (Arm), a process could see its
    partner's tick before the h it wrote: each process takes a direction of its own."""
    monkeypatch.setattr(runtime, "ORDERED_STORES", False)
    net, x, state, expected = _one_sequence()
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert not lockstep and used == [True, True]


def _at_tick(monkeypatch: pytest.MonkeyPatch, tick: int, act: Any) -> list[tuple[int, int]]:
    """``act(helper)`` once, when this process reaches ``tick`` (it then waits for the
    helper, seen no further than ``tick - 1`` until then, however far ahead it runs);
    returns the list that then receives (the tick waited for, the helper's tick after
    ``act``)."""
    wait, steps = helper.LockstepJob.wait, runtime.lockstep_steps
    done: list[tuple[int, int]] = []

    def waiting(self: helper.LockstepJob, at: int) -> None:
        if at >= tick and not done:
            act(self.helper)
            done.append((at, int(self.arrays[3][1][0])))
        wait(self, at)

    class Behind:
        """The helper's tick as this process reads it in its steps."""

        def __init__(self, real: np.ndarray) -> None:
            self.real = real

        def __getitem__(self, index: int) -> int:
            return int(self.real[index]) if done else min(int(self.real[index]), tick - 1)

    def stepping(directions: Any, part: int, projected: Any, history: Any, cells: Any,
                 ticks: np.ndarray, *rest: Any) -> None:
        seen = [ticks[0], Behind(ticks[1]), ticks[2], ticks[3]] if part == 0 else ticks
        steps(directions, part, projected, history, cells, seen, *rest)

    monkeypatch.setattr(helper.LockstepJob, "wait", waiting)
    monkeypatch.setattr(runtime, "lockstep_steps", stepping)
    return done


def test_a_helper_killed_in_lockstep_costs_only_speed(lockstep: list[bool], used: list[bool],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, state, expected = _one_sequence(steps=40)

    def kill(running: Any) -> None:
        running.process.kill()
        running.process.wait()

    _at_tick(monkeypatch, 20, kill)
    with pytest.warns(HelperFallbackWarning, match=r"\(pid \d+\) exited and was ended; the piece "
                                                    r"ran in this process"):
        got = net.forward(x, state=state, threads=2)
    _assert_same(got, expected)
    assert lockstep[0] is True and not used  # given up: no reply read
    assert helper.wait_until_ready(60)
    lockstep.clear()
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert lockstep == [True, True]


ROW_LOCKSTEP_SPECS = {
    "one-way GRU": Spec("gru", 7, 64, num_layers=2),
    "one-way reverse LSTM, no bias": Spec("lstm", 7, 64, reverse=True, bias=False),
}


@pytest.fixture
def row_lockstep(lockstep: list[bool], monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Batches of more than one sequence run in lockstep too, as one piece (up to 31
    sequences): small layers' products (hidden 64) in blocks of 32 rows of Rᵀ."""
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 16)
    monkeypatch.setattr(runtime, "_unit_width",
                        lambda hidden, rows, depth: 32 if rows >= runtime.CHUNK_MIN_ROWS else None)
    return lockstep


def _sequences(name: str, batch: int, steps: int = 13, dtype: type = np.float32
               ) -> tuple[RNN, np.ndarray, Any, tuple[np.ndarray, Any]]:
    """As :func:`_one_sequence`, ``batch`` sequences of a ROW_LOCKSTEP_SPECS network."""
    net = RNN.random(ROW_LOCKSTEP_SPECS[name], seed=7, dtype=dtype)
    x = np.random.default_rng(8).standard_normal((batch, steps, 7)).astype(dtype)
    state = net.forward(x[:, :3], threads=1)[1]
    return net, x, state, net.forward(x, state=state, threads=1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [4, 9])
@pytest.mark.parametrize("name", list(ROW_LOCKSTEP_SPECS))
def test_lockstep_of_many_sequences_gives_the_numbers_of_one_thread(
        row_lockstep: list[bool], used: list[bool], name: str, batch: int, dtype: type) -> None:
    """A one-way LSTM or GRU at more than one sequence, its batch one piece, runs half the
    units in each process and gives the bits of one thread."""
    net, x, state, expected = _sequences(name, batch, dtype=dtype)
    _assert_same(net.forward(x, state=state, threads=2), expected)
    layers = ROW_LOCKSTEP_SPECS[name].num_layers
    assert row_lockstep == [True] * layers and used == [True] * layers


def test_lockstep_of_many_sequences_keeps_its_bounds(row_lockstep: list[bool], used: list[bool],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Bidirectional layers (a direction in each process), a batch in halves (a half in
    each process) and sequences with lengths run as before, with the same numbers."""
    net = RNN.random(Spec("lstm", 7, 64, bidirectional=True), seed=7)
    x = np.random.default_rng(8).standard_normal((9, 13, 7)).astype(np.float32)
    _assert_same(net.forward(x, threads=2), net.forward(x, threads=1))
    assert not row_lockstep and used == [True]
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 4)
    net, x, state, expected = _sequences("one-way GRU", 9)
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert not row_lockstep and used == [True] * 3  # a half of the batch there, a layer each
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 16)
    lengths = np.array([13, 5, 13, 2, 13, 13, 7, 13, 13])
    _assert_same(net.forward(x, state=state, lengths=lengths, threads=2),
                 net.forward(x, state=state, lengths=lengths, threads=1))
    assert not row_lockstep


@pytest.mark.parametrize("tick", [0, 20, 35])
@pytest.mark.parametrize("name", list(ROW_LOCKSTEP_SPECS))
def test_a_helper_killed_in_lockstep_of_many_sequences_costs_only_speed(
        row_lockstep: list[bool], used: list[bool], monkeypatch: pytest.MonkeyPatch, name: str,
        tick: int) -> None:
    """Killed as its job starts (before its first step) or during the steps, the helper's
    half of the rest runs here from the last step both finished: an LSTM's c from the
    rows this process keeps in turn (runtime._CELL_RING). (This process may first wait
    for the helper at a layer's last step, and the helper may finish that step as it is
    killed: its half is then done, and nothing runs here.)"""
    net, x, state, expected = _sequences(name, 9, steps=40)

    def kill(running: Any) -> None:
        running.process.kill()
        running.process.wait()

    killed: list[tuple[int, int]] = []
    if tick:
        killed = _at_tick(monkeypatch, tick, kill)
    else:
        start = helper.lockstep

        def killed_at_once(*args: Any) -> Any:
            job = start(*args)
            if job is not None:
                kill(job.helper)
            return job

        monkeypatch.setattr(helper, "lockstep", killed_at_once)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = net.forward(x, state=state, threads=2)
    _assert_same(got, expected)
    assert row_lockstep[0] is True
    assert killed or not tick
    finished = bool(killed) and killed[0][1] >= 41  # tick 41: its half of all 40 steps done
    assert finished or any(issubclass(w.category, HelperFallbackWarning)
                           and "exited and was ended" in str(w.message) for w in caught)


@pytest.mark.parametrize("batch", [1, 9])
def test_a_helper_that_runs_on_as_it_is_given_up_costs_only_speed(
        row_lockstep: list[bool], used: list[bool], monkeypatch: pytest.MonkeyPatch,
        batch: int) -> None:
    """A helper found stopped may run on for a moment before it is ended, a step or two past
    this process's last one: the rest runs here from the last step both finished."""
    if batch == 1:
        net, x, state, expected = _one_sequence(steps=40)
    else:
        net, x, state, expected = _sequences("one-way GRU", batch, steps=40)
    _at_tick(monkeypatch, 20, lambda running: os.kill(running.process.pid, signal.SIGSTOP))
    kill = helper._Helper.kill

    def late(self: Any) -> None:  # let go a moment after this process gave up on it
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            time.sleep(0.3)
        kill(self)

    monkeypatch.setattr(helper._Helper, "kill", late)
    with pytest.warns(HelperFallbackWarning, match=r"was stopped"):
        got = net.forward(x, state=state, threads=2)
    _assert_same(got, expected)


def test_a_helper_stopped_in_lockstep_is_not_waited_for(
        lockstep: list[bool], used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, state, expected = _one_sequence(steps=40)
    stopped: list[Any] = []

    def stop(running: Any) -> None:
        os.kill(running.process.pid, signal.SIGSTOP)
        stopped.append(running)

    _at_tick(monkeypatch, 30, stop)
    start = time.monotonic()
    with pytest.warns(HelperFallbackWarning, match=r"was stopped \(SIGSTOP, Ctrl-Z or a "
                                                    r"debugger\) for 1 s and was ended"):
        got = net.forward(x, state=state, threads=2)
    assert time.monotonic() - start < helper.REPLY_FLOOR
    _assert_same(got, expected)
    assert stopped[0].broken and stopped[0].process.poll() is not None


def test_a_helper_that_cannot_take_its_part_says_so(lockstep: list[bool], used: list[bool],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The helper reports an error in its part (here: a layer it never received): this
    process runs the rest of the layer, and the layer runs here from then on; the helper
    stays."""
    net, x, state, expected = _one_sequence()
    token = helper._Helper.token
    monkeypatch.setattr(helper._Helper, "token",
                        lambda self, layer, direction: token(self, layer, direction) + 10_000)
    running = helper._HELPER
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert lockstep[0] is True and used[0] is False
    assert helper._HELPER is running and not running.broken


def test_an_error_here_in_lockstep_stops_the_helper_and_keeps_it(
        lockstep: list[bool], used: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, state, expected = _one_sequence()

    def failing(*args: Any, **named: Any) -> None:
        raise MemoryError("no room for the step's buffers")

    steps = runtime.lockstep_steps
    monkeypatch.setattr(runtime, "lockstep_steps", failing)  # here only
    running = helper._HELPER
    with pytest.raises(MemoryError, match="no room"):
        net.forward(x, state=state, threads=2)
    assert used == [False]  # told to stop, it said so
    assert helper._HELPER is running and not running.broken
    monkeypatch.setattr(runtime, "lockstep_steps", steps)
    _assert_same(net.forward(x, state=state, threads=2), expected)


def test_an_interrupt_in_lockstep_shuts_the_helper_down(
        lockstep: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, state, expected = _one_sequence()

    def interrupted(*args: Any, **named: Any) -> None:
        raise KeyboardInterrupt

    steps = runtime.lockstep_steps
    monkeypatch.setattr(runtime, "lockstep_steps", interrupted)
    with pytest.raises(KeyboardInterrupt):
        net.forward(x, state=state, threads=2)
    assert helper._HELPER is None
    monkeypatch.setattr(runtime, "lockstep_steps", steps)
    assert helper.wait_until_ready(60)
    _assert_same(net.forward(x, state=state, threads=2), expected)


def test_floating_point_settings_hold_in_lockstep(lockstep: list[bool], used: list[bool]) -> None:
    """Infinite inputs under invalid="raise" raise, whichever process meets them first;
    the helper stays."""
    net, x, state, _ = _one_sequence()
    bad = x.copy()
    bad[0, 5, :2] = [np.inf, -np.inf]
    running = helper._HELPER
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        net.forward(bad, state=state, threads=2)
    assert used == [False]  # the lockstep job was started, then told to stop
    assert helper._HELPER is running and not running.broken


@pytest.mark.parametrize("batch", [7, 16])
@pytest.mark.parametrize(("cell", "hidden"), [("lstm", 100), ("gru", 66), ("gru", 130)])
def test_lockstep_halves_in_blocks_of_uneven_widths_give_the_numbers_of_one_thread(
        lockstep: list[bool], used: list[bool], monkeypatch: pytest.MonkeyPatch,
        cell: str, hidden: int, batch: int) -> None:
    """The blocks a unit-major product runs in, as the runtime chooses them for its bound
    (here at most 37 rows: each half of a gate's 50 or 65 units in two blocks, the last
    narrower, or its 33 units in one), are the same in the whole step and in each
    process's half of it."""
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 64)  # the batch one piece
    monkeypatch.setattr(runtime, "SMALL_PRODUCT", 37 * hidden * batch)
    net = RNN.random(Spec(cell, 5, hidden), seed=3)
    x = np.random.default_rng(1).standard_normal((batch, 9, 5)).astype(np.float32)
    layer = runtime._prepared(net)[0]
    assert runtime._row_halves(layer, batch) == 37
    widths = {cut.stop - cut.start for cut in runtime._unit_blocks(hidden, len(layer.blocks), 37)}
    assert max(widths) <= 37 and any(width % 16 for width in widths)
    state = net.forward(x[:, :3], threads=1)[1]
    expected = net.forward(x, state=state, threads=1)
    _assert_same(net.forward(x, state=state, threads=2), expected)
    assert lockstep == [True] and used == [True]


def test_the_thread_knows_the_cpu_it_runs_on() -> None:
    cpu = helper._running_on()
    if os.path.exists("/proc/thread-self/stat"):
        assert cpu in os.sched_getaffinity(0)
    else:
        assert cpu is None


@pytest.mark.skipif(not os.path.exists("/proc/thread-self/stat"),
                    reason="reads the calling thread's CPU in /proc")
def test_the_helper_is_kept_off_the_callers_cpu(used: list[bool],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each job keeps the helper to the CPUs the calling thread may use but the one it runs
    on (on a busy machine Linux would wake it there); a thread kept to one CPU leaves the
    helper that one."""
    net, x, expected = _lstm_case(9)
    allowed = os.sched_getaffinity(0)
    running = helper._HELPER
    assert running is not None
    for cpu in sorted(allowed)[:2]:
        monkeypatch.setattr(helper, "_running_on", lambda cpu=cpu: cpu)
        used.clear()
        np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
        assert used == [True, True]
        assert os.sched_getaffinity(running.process.pid) == (allowed - {cpu} or allowed)
    one = min(allowed)
    real = os.sched_getaffinity
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {one} if pid == 0 else real(pid))
    monkeypatch.setattr(helper, "_running_on", lambda: one)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert real(running.process.pid) == {one}


def test_a_helper_whose_cpus_cannot_be_set_still_runs(used: list[bool],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    net, x, expected = _lstm_case(9)

    def refused(pid: int, cpus: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setaffinity", refused)
    monkeypatch.setattr(helper._HELPER, "cpus", None)
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True]
    monkeypatch.setattr(helper, "_running_on", lambda: None)  # no /proc: nothing is tried
    used.clear()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True]


def test_an_ended_helpers_cpus_are_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once its process has been reaped, the helper's pid may belong to another process."""
    calls: list[tuple[int, Any]] = []
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: calls.append((pid, cpus)))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2})
    monkeypatch.setattr(helper, "_running_on", lambda: 1)
    ended = SimpleNamespace(process=SimpleNamespace(pid=4321, returncode=0), cpus=None)
    helper._apart(ended)  # type: ignore[arg-type]
    assert calls == []
    running = SimpleNamespace(process=SimpleNamespace(pid=4321, returncode=None), cpus=None)
    helper._apart(running)  # type: ignore[arg-type]
    helper._apart(running)  # type: ignore[arg-type]  # the same CPUs: set once
    assert calls == [(4321, {0, 2})]


class _AskAt:
    """A helper's ticks (see rnnport.helper._ticks) whose request for the rest shows once
    the helper has done ``step`` steps."""

    def __init__(self, step: int) -> None:
        self.step = step
        self.done = np.zeros(1, np.int64)

    def __getitem__(self, index: int) -> Any:
        if index == 1:
            return self.done
        assert index == 2
        return [int(self.done[0] >= self.step)]


TAKE_OVER_SPECS = {
    "LSTM": Spec("lstm", 7, 9),
    "LSTM peepholes, projection, clips": Spec("lstm", 7, 9, peepholes=True, proj_size=4,
                                              cell_clip=0.5),
    "GRU reset after": Spec("gru", 7, 9),
    "GRU reset before": Spec("gru", 7, 9, reset_after=False),
    "RNN": Spec("rnn_tanh", 7, 9),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("name", list(TAKE_OVER_SPECS))
def test_a_helpers_piece_taken_over_at_any_stretch_gives_the_same_numbers(
        name: str, batch: int, dtype: type) -> None:
    """The helper's steps run in stretches (a stretch a step here: 11 steps); stopped
    after any of them, the rest run by the caller from the arrays it left give the bits of
    the whole piece run at once."""
    spec = TAKE_OVER_SPECS[name]
    net = RNN.random(spec, seed=2, dtype=dtype)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((batch, 11, 7)).astype(dtype)
    state = net.forward(x[:, :3], threads=1)[1]
    y, expected_state = net.forward(x, state=state, threads=1)
    h0, c0 = (state if isinstance(state, tuple) else (state, None))
    layer = runtime._prepared(net)[0]
    inputs = np.ascontiguousarray(x.transpose(1, 0, 2))
    assert runtime._stretches(11) == [(s, s + 1) for s in range(11)]
    for stop in (0, 1, 6, 10, 11):
        history = np.empty((12, 1, batch, spec.output_size), dtype)
        history[0] = h0
        cell = np.array(c0 if c0 is not None else np.empty((1, batch, 0), dtype), copy=True)
        projected = np.empty((1, 11, batch, layer.width), dtype)
        done = runtime.run_direction(layer, inputs, history, None if c0 is None else cell,
                                     projected, _AskAt(stop))
        assert done == stop
        if done < 11:
            runtime._take_over(layer, 0)(done, [inputs, None, None, history, cell, projected])
        np.testing.assert_array_equal(history[1:, 0].transpose(1, 0, 2), y)
        if c0 is not None:
            np.testing.assert_array_equal(cell, expected_state[1])


def _ask_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every helper job of a piece carries the caller's request for the rest from its start
    (set in the arena before the job is sent): the helper stops before its first step."""
    start = helper._start

    def asking(kind: Any, layer: Any, directions: Any, begin: Any) -> Any:
        def begun(running: Any, tokens: list[int]) -> Any:
            message, arrays = begin(running, tokens)
            if message[0] == "run":
                helper._ticks(arrays[6])[2][0] = 1
            return message, arrays

        return start(kind, layer, directions, begun)

    monkeypatch.setattr(helper, "_start", asking)


@pytest.mark.parametrize("name", list(SPECS))
def test_the_caller_takes_over_a_helper_that_falls_behind(
        used: list[bool], monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """Asked for the rest from the start, the helper stops before its first step and the
    caller runs its piece from the helper's own input side: the numbers of one thread."""
    taken: list[int] = []
    take_over = runtime._take_over

    def counted(*args: Any) -> Any:
        run = take_over(*args)

        def recorded(first: int, arrays: list[np.ndarray]) -> None:
            taken.append(first)
            run(first, arrays)

        return recorded

    _ask_at_once(monkeypatch)
    monkeypatch.setattr(runtime, "_take_over", counted)
    monkeypatch.setattr(runtime, "_wants_the_rest", lambda job, steps: True)
    net = RNN.random(SPECS[name], seed=5)
    x = np.random.default_rng(6).standard_normal((3, 11, 7)).astype(np.float32)
    state = net.forward(x[:, :4], threads=1)[1]
    alone = net.forward(x, state=state, threads=1)
    beside = net.forward(x, state=state, threads=2)
    assert used and all(used)
    assert taken and set(taken) == {0}
    _assert_same(beside, alone)


def test_the_caller_asks_for_the_rest_only_where_more_than_a_stretch_is_left() -> None:
    class Progress:
        def __init__(self, done: int) -> None:
            self.done = done

        def steps_done(self) -> int:
            return self.done

    assert runtime._stretches(200)[0] == (0, 13)
    assert runtime._wants_the_rest(Progress(186), 200)
    assert not runtime._wants_the_rest(Progress(187), 200)
    assert not runtime._wants_the_rest(Progress(200), 200)
    assert runtime._wants_the_rest(Progress(0), 3)
    assert not runtime._wants_the_rest(Progress(2), 3)


@pytest.mark.parametrize("error", [FloatingPointError("invalid value"), MemoryError(),
                                   KeyboardInterrupt()])
def test_an_error_in_the_steps_taken_over_is_the_callers_and_the_helper_stays(
        used: list[bool], monkeypatch: pytest.MonkeyPatch, error: BaseException) -> None:
    net, x, expected = _lstm_case(9)

    def failing(layer: Any, direction: int) -> Any:
        def take_over(first: int, arrays: list[np.ndarray]) -> None:
            raise error

        return take_over

    running = helper._HELPER
    with monkeypatch.context() as patched:
        _ask_at_once(patched)
        patched.setattr(runtime, "_wants_the_rest", lambda job, steps: True)
        patched.setattr(runtime, "_take_over", failing)
        with pytest.raises(type(error)):
            net.forward(x, threads=2)
    assert helper._HELPER is running and running is not None and not running.broken
    assert not running.lock.locked()
    used.clear()
    np.testing.assert_array_equal(net.forward(x, threads=2)[0], expected)
    assert used == [True, True]
