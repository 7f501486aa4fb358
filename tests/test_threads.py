"""``forward(threads=...)``: the BLAS thread counts in effect, and numbers that do not depend
on them, nor on whether a bidirectional layer's directions run at once or in turn."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import pytest

from rnnport import RNN, Spec, runtime
from rnnport.errors import StateError
from rnnport.model import stack

SPECS = [
    Spec("lstm", 5, 6, num_layers=2, bidirectional=True),
    Spec("lstm", 5, 6, proj_size=3, bidirectional=True),
    Spec("lstm", 5, 6, peepholes=True, cell_clip=0.3, gate_clip=0.6, bidirectional=True),
    Spec("lstm", 5, 6, layer_norm=True, bidirectional=True),
    Spec("gru", 5, 6, num_layers=2, bidirectional=True),
    Spec("gru", 5, 6, reset_after=False, bidirectional=True),
    Spec("rnn_relu", 5, 6, bidirectional=True),
    Spec("lstm", 5, 6, num_layers=2),
]


def _data(batch: int = 4, steps: int = 7, size: int = 5) -> np.ndarray:
    return np.random.default_rng(8).uniform(-1, 1, (batch, steps, size)).astype(np.float32)


def _same(a: Any, b: Any) -> None:
    for left, right in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,),
                           strict=True):
        np.testing.assert_array_equal(left, right)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
@pytest.mark.parametrize("lengths", [None, np.array([7, 3, 0, 5])], ids=["full", "lengths"])
def test_numbers_do_not_depend_on_threads_or_concurrency(
        spec: Spec, lengths: np.ndarray | None, monkeypatch: pytest.MonkeyPatch) -> None:
    rnn = RNN.random(spec, seed=2, scale=0.7)
    x = _data()
    y, state = rnn.forward(x, lengths=lengths, threads=1)  # everything in one thread
    # The projections of both directions at once, then the steps of both at once.
    for projection, step in ((0, 10**12), (10**12, 0)):
        monkeypatch.setattr(runtime, "CONCURRENT_MIN_PROJECTION", projection)
        monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", step)
        for threads in (1, 2, 3, None):
            y_t, state_t = rnn.forward(x, lengths=lengths, threads=threads)
            np.testing.assert_array_equal(y_t, y)
            _same(state_t, state)


@pytest.mark.parametrize("spec", [s for s in SPECS if not s.bidirectional]
                         + [Spec("gru", 5, 6, reset_after=False), Spec("rnn_tanh", 5, 6)],
                         ids=lambda s: s.describe())
@pytest.mark.parametrize("lengths", [None, np.array([7, 3, 0, 5, 1])], ids=["full", "lengths"])
def test_a_batch_run_in_two_halves_gives_the_whole_batch_numbers(
        spec: Spec, lengths: np.ndarray | None, monkeypatch: pytest.MonkeyPatch) -> None:
    rnn = RNN.random(spec, seed=5, scale=0.7)
    x = _data(batch=5)
    y, _ = rnn.forward(x, lengths=lengths, threads=1)
    monkeypatch.setattr(runtime, "SPLIT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 1)
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    y_1, state_1 = rnn.forward(x, lengths=lengths, threads=1)  # the halves in turn
    # Sequences are independent; rows of a product are the same sums whatever the batch.
    np.testing.assert_allclose(y_1, y, rtol=1e-6, atol=1e-7)
    for threads in (2, None):  # the halves at once
        y_t, state_t = rnn.forward(x, lengths=lengths, threads=threads)
        np.testing.assert_array_equal(y_t, y_1)
        _same(state_t, state_1)


def test_the_callers_floating_point_settings_hold_in_the_second_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """NumPy's error state is per thread: the half of the batch run in a second thread
    raises under the caller's invalid="raise" as it does in one thread."""
    monkeypatch.setattr(runtime, "SPLIT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "SPLIT_MIN_BATCH", 1)
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "_cores", lambda: 2)
    rnn = RNN.random(Spec("lstm", 5, 6), seed=5)
    x = _data(batch=4)
    # In the second half of the batch: inf − inf in its input projection, invalid on any
    # BLAS (an inf alone makes a NaN only where a kernel multiplies it by a padding zero).
    x[3, 2, :2] = np.inf, -np.inf
    started = []
    monkeypatch.setattr(threading.Thread, "start", _recording(threading.Thread.start, started))
    for threads in (1, 2):
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError, match="invalid"):
            rnn.forward(x, threads=threads)
    assert started  # the second half ran in a thread
    for threads in (1, 2):  # the np.seterrcall handler too
        called: list[str] = []
        previous = np.seterrcall(_appending_to(called))
        try:
            with np.errstate(invalid="call"):
                rnn.forward(x, threads=threads)
        finally:
            np.seterrcall(previous)
        assert called and set(called) == {"invalid value"}


def _appending_to(called: list[str]) -> Any:
    return lambda kind, flag: called.append(kind)


def _recording(start: Any, started: list[bool]) -> Any:
    def recorded(self: threading.Thread) -> None:
        started.append(True)
        start(self)

    return recorded


def test_a_stack_passes_threads_on(monkeypatch: pytest.MonkeyPatch) -> None:
    model = stack([RNN.random(Spec("lstm", 5, 6, bidirectional=True), seed=1),
                   RNN.random(Spec("gru", 12, 4), seed=2)])
    x = _data()
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    y, _ = model.forward(x, threads=1)
    np.testing.assert_array_equal(model.forward(x, threads=2)[0], y)


class _Spy:
    """Records, for each product, whether it is an input projection (a 2-D ``numpy.matmul``)
    or a per-step product (``numpy.dot`` per direction, or a stacked ``numpy.matmul``), the
    BLAS thread count in effect and the Python thread it ran in."""

    def __init__(self, matmul: Any, dot: Any, library: Any) -> None:
        self.matmul, self.dot, self.library = matmul, dot, library
        self.calls: list[tuple[str, int, str]] = []
        self.lock = threading.Lock()

    def record(self, kind: str) -> None:
        with self.lock:
            self.calls.append((kind, self.library.get_num_threads(),
                               threading.current_thread().name))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.record("projection" if np.ndim(args[0]) == 2 else "step")
        return self.matmul(*args, **kwargs)

    def step(self, *args: Any, **kwargs: Any) -> Any:
        self.record("step")
        return self.dot(*args, **kwargs)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    pytest.importorskip("threadpoolctl")
    libraries = runtime._blas()
    if not libraries:
        pytest.skip("threadpoolctl finds no BLAS library in this process")
    found = _Spy(np.matmul, np.dot, libraries[0])
    monkeypatch.setattr(np, "matmul", found)
    monkeypatch.setattr(np, "dot", found.step)
    return found


def test_the_requested_count_is_in_effect_during_the_products(
        spy: _Spy, monkeypatch: pytest.MonkeyPatch) -> None:
    library = spy.library
    before = library.get_num_threads()
    bidirectional = RNN.random(Spec("lstm", 5, 6, num_layers=2, bidirectional=True), seed=3)
    one_way = RNN.random(Spec("gru", 5, 6, num_layers=2), seed=3)
    x = _data()
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "PROJECTION_BLOCK_WORK", 1)  # 16 blocks of rows each
    monkeypatch.setattr(runtime, "PROJECTION_BLOCK_ROWS", 1)
    main, other = threading.current_thread().name, "rnnport-recurrence"
    for threads in (1, 2, 3):
        spy.calls.clear()
        one_way.forward(x, threads=threads)
        # The input projections' blocks (2-D) run in up to `threads` Python threads, on one
        # BLAS thread each; the per-step products (3-D) on one, in this thread.
        assert {(name, count) for kind, count, name in spy.calls if kind == "projection"} == (
            {(main, 1)} if threads == 1 else {(main, 1), (other, 1)})
        assert {(name, count) for kind, count, name in spy.calls if kind == "step"} == {
            (main, 1)}
        assert library.get_num_threads() == before  # put back after the call
    # Directions at once, one in a second Python thread, one BLAS thread each.
    spy.calls.clear()
    bidirectional.forward(x, threads=4)
    assert {count for _, count, _ in spy.calls} == {1}
    for kind in ("projection", "step"):
        assert {name for n, _, name in spy.calls if n == kind} == {
            threading.current_thread().name, "rnnport-recurrence"}
    spy.calls.clear()
    bidirectional.forward(x, threads=1)
    assert {count for _, count, _ in spy.calls} == {1}
    assert {name for _, _, name in spy.calls} == {threading.current_thread().name}
    # One row (one step of one sequence): the projection is a matrix-vector product.
    spy.calls.clear()
    one_way.forward(x[:1, :1], threads=2)
    assert {count for _, count, _ in spy.calls} == {1}
    # rnnport's choice: as many Python threads for the projections' blocks as the BLAS
    # is set to, every product on one BLAS thread.
    library.set_num_threads(2)
    try:
        spy.calls.clear()
        one_way.forward(x)
        assert {(name, count) for kind, count, name in spy.calls if kind == "projection"} == {
            (main, 1), (other, 1)}
        assert {count for kind, count, _ in spy.calls if kind == "step"} == {1}
        assert library.get_num_threads() == 2
    finally:
        library.set_num_threads(before)


def test_projections_run_in_blocks_of_rows_fixed_by_their_shape() -> None:
    for rows, depth, width in ((1, 5, 18), (28, 5, 18), (500, 640, 1280), (1600, 512, 1536),
                               (3200, 256, 1536), (10**6, 64, 256), (5, 10**4, 10**4)):
        blocks = runtime._row_blocks(rows, depth, width)
        assert blocks[0].start == 0 and blocks[-1].stop == rows
        assert all(a.stop == b.start for a, b in itertools.pairwise(blocks))
        assert all(block.stop > block.start for block in blocks)
        assert len(blocks) <= min(runtime.PROJECTION_BLOCKS, rows)  # never more than rows
        assert len(blocks) & (len(blocks) - 1) == 0  # a power of two: even shares of threads
        if len(blocks) > 1:  # each block worth its thread and its repacking of the weights
            smallest = min(block.stop - block.start for block in blocks)
            assert smallest >= runtime.PROJECTION_BLOCK_ROWS
            assert smallest * depth * width >= runtime.PROJECTION_BLOCK_WORK * 0.99
    assert len(runtime._row_blocks(28, 5, 18)) == 1
    assert len(runtime._row_blocks(5, 10**4, 10**4)) == 1  # far too few rows to share
    assert len(runtime._row_blocks(500, 640, 1280)) == 1  # under a block's rows
    assert len(runtime._row_blocks(1600, 512, 1536)) == 1  # under two blocks' rows
    assert len(runtime._row_blocks(3200, 640, 1280)) == 2  # 3 blocks' worth of rows
    assert len(runtime._row_blocks(6400, 640, 1280)) == 4  # 6 blocks' worth of rows
    assert len(runtime._row_blocks(10**6, 64, 256)) == runtime.PROJECTION_BLOCKS


@pytest.mark.parametrize("block_work", [1 << 23, 1 << 12], ids=["one block", "many blocks"])
def test_a_projection_gives_the_same_numbers_for_every_count(
        block_work: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenBLAS's own threads can change the last bits of some rows of a product (its
    Haswell kernels, chosen on AMD Zen 5, did for this network's first projection on two
    threads); rnnport's blocks, fixed by shape and each on one BLAS thread, cannot."""
    monkeypatch.setattr(runtime, "PROJECTION_BLOCK_WORK", block_work)
    monkeypatch.setattr(runtime, "PROJECTION_BLOCK_ROWS", 1)
    rnn = RNN.random(Spec("gru", 16, 48, num_layers=2), seed=3)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 80, 16)).astype(np.float32)
    y, state = rnn.forward(x, threads=1)
    for threads in (2, 3, None):
        y_t, state_t = rnn.forward(x, threads=threads)
        np.testing.assert_array_equal(y_t, y)
        np.testing.assert_array_equal(state_t, state)


def test_a_blas_set_to_one_thread_keeps_rnnport_in_one_thread(
        spy: _Spy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    before = spy.library.get_num_threads()
    spy.library.set_num_threads(1)  # as OPENBLAS_NUM_THREADS=1, or a Dask worker, sets it
    try:
        RNN.random(Spec("lstm", 5, 6, bidirectional=True), seed=3).forward(_data())
        assert {count for _, count, _ in spy.calls} == {1}
        assert {name for _, _, name in spy.calls} == {threading.current_thread().name}
    finally:
        spy.library.set_num_threads(before)


def test_large_projections_run_at_once_before_steps_in_one_thread(
        spy: _Spy, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_PROJECTION", 0)
    RNN.random(Spec("lstm", 5, 6, bidirectional=True), seed=3).forward(_data(), threads=2)
    main, other = threading.current_thread().name, "rnnport-recurrence"
    assert {(name, count) for kind, count, name in spy.calls if kind == "projection"} == {
        (main, 1), (other, 1)}
    assert {(name, count) for kind, count, name in spy.calls if kind == "step"} == {(main, 1)}


def test_small_layers_keep_their_directions_in_one_thread(spy: _Spy) -> None:
    RNN.random(Spec("lstm", 5, 6, bidirectional=True), seed=3).forward(_data(), threads=2)
    assert {name for _, _, name in spy.calls} == {threading.current_thread().name}


def test_an_error_in_the_second_direction_reaches_the_caller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "_cores", lambda: 2)
    monkeypatch.setattr(runtime, "_blas", lambda: (_FakeLibrary(),))
    loop = runtime._LOOPS["lstm"]

    def failing(layer: Any, *args: Any) -> None:
        if layer.backward == (True,):
            raise FloatingPointError("the backward direction failed")
        loop(layer, *args)

    monkeypatch.setitem(runtime._LOOPS, "lstm", failing)
    rnn = RNN.random(Spec("lstm", 5, 6, bidirectional=True), seed=3)
    with pytest.raises(FloatingPointError, match="backward direction"):
        rnn.forward(_data())


class _FakeLibrary:
    def __init__(self) -> None:
        self.count = 2

    def get_num_threads(self) -> int:
        return self.count

    def set_num_threads(self, count: int) -> None:
        self.count = count


def test_without_threadpoolctl_threads_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    rnn = RNN.random(Spec("lstm", 5, 6, num_layers=2, bidirectional=True), seed=4)
    x = _data()
    y, _ = rnn.forward(x, threads=1)
    monkeypatch.setattr(runtime, "_blas", lambda: ())
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    for threads in (None, 1, 2):
        np.testing.assert_array_equal(rnn.forward(x, threads=threads)[0], y)


@pytest.mark.parametrize("threads", [0, -1, 1.5, "2", True])
def test_a_bad_thread_count_is_refused(threads: Any) -> None:
    rnn = RNN.random(Spec("gru", 5, 6), seed=4)
    with pytest.raises(StateError, match=r"threads=.*expected None \(rnnport chooses\) or a whole"):
        rnn.forward(_data(), threads=threads)


def test_a_large_matrix_vector_step_gives_the_same_numbers_for_every_count() -> None:
    # Batch 1: each step is a matrix-vector product, which a threaded BLAS may split along
    # its sums (OpenBLAS does at this size); the steps therefore always use one thread.
    rnn = RNN.random(Spec("rnn_tanh", 30, 700), seed=1, scale=0.5)
    x = np.random.default_rng(1).standard_normal((1, 20, 30)).astype(np.float32)
    y, _ = rnn.forward(x, threads=1)
    for threads in (2, 4, None):
        np.testing.assert_array_equal(rnn.forward(x, threads=threads)[0], y)


def test_threads_reach_the_numpy_engine_on_the_cpu_device_too() -> None:
    model = RNN.random(Spec("gru", 3, 4))
    x = np.zeros((2, 3, 3), np.float32)
    for device in (None, "cpu"):
        with pytest.raises(StateError, match="threads=0"):
            model.forward(x, device=device, threads=0)
        assert np.array_equal(model.forward(x, device=device, threads=1)[0], model.forward(x)[0])


def test_jobs_at_once_report_the_first_failure_by_order_after_every_thread_stopped() -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def work(index: int) -> None:
        with lock:
            ran.append(index)
        if index in (3, 5):
            raise (KeyboardInterrupt if index == 3 else ValueError)(f"job {index}")

    with pytest.raises(KeyboardInterrupt, match="job 3"):
        runtime._at_once(work, [(index,) for index in range(8)], 3)
    # Thread 0 runs 0, 3 (fails, stops); thread 1 runs 1, 4, 7; thread 2 runs 2, 5 (fails).
    assert sorted(ran) == [0, 1, 2, 3, 4, 5, 7]
    assert threading.active_count() == 1 or all(
        thread.name != "rnnport-recurrence" for thread in threading.enumerate())
