"""Batch runs over many feature files: ``rnnport.corpus.run`` and ``rnnport run INPUTS --out``.

Every output is checked against ``model.forward`` of its input, computed here in the test
process: the same NumPy engine, so the numbers must agree bit for bit."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec, corpus
from rnnport.cli import main

RNG = np.random.default_rng(7)


def _model_file(folder: Path, spec: Spec) -> Path:
    path = folder / "model.npz"
    rnnport.write(RNN.random(spec, seed=3), "npz", path=path)
    return path


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    return _model_file(tmp_path, Spec("lstm", 5, 6, num_layers=2, bidirectional=True))


def _features(shape: tuple[int, ...]) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A folder of feature files: one sequence, a batch, archives (one with lengths), nested."""
    folder = tmp_path / "data"
    (folder / "deep" / "er").mkdir(parents=True)
    np.save(folder / "one.npy", _features((9, 5)))
    np.save(folder / "batch.npy", _features((3, 7, 5)))
    np.savez(folder / "pair.npz", left=_features((2, 4, 5)), right=_features((6, 5)))
    np.savez(folder / "deep" / "padded.npz", x=_features((3, 8, 5)), lengths=np.array([8, 2, 5]))
    np.save(folder / "deep" / "er" / "last.npy", _features((1, 3, 5)))
    (folder / "notes.txt").write_text("not a feature file")
    np.save(folder / ".hidden.npy", _features((2, 5)))
    return folder


def _expected(model: rnnport.Model, source: Path) -> dict[str, np.ndarray]:
    """What an input's output must hold, from forward() in this process."""
    if source.suffix == ".npy":
        x = np.load(source)
        y = model.forward(x[None] if x.ndim == 2 else x)[0]
        return {"": y[0] if x.ndim == 2 else y}
    with np.load(source) as archive:
        arrays = {key: archive[key] for key in archive.files}
    lengths = arrays.pop("lengths", None)
    out = {key: (model.forward(x[None], lengths=lengths)[0][0] if x.ndim == 2
                 else model.forward(x, lengths=lengths)[0]) for key, x in arrays.items()}
    return out if lengths is None else {**out, "lengths": lengths}


def _saved(path: Path) -> dict[str, np.ndarray]:
    if path.suffix == ".npy":
        return {"": np.load(path)}
    with np.load(path) as archive:
        return {key: archive[key] for key in archive.files}


def _assert_matches(model_path: Path, inputs: Path, out: Path) -> None:
    model = rnnport.read(model_path)
    sources = sorted(path for path in inputs.rglob("*") if path.suffix in (".npy", ".npz")
                     and not path.name.startswith("."))
    assert sources
    for source in sources:
        want, got = _expected(model, source), _saved(out / source.relative_to(inputs))
        assert got.keys() == want.keys(), source
        for key in want:
            assert got[key].dtype == want[key].dtype
            np.testing.assert_array_equal(got[key], want[key], err_msg=f"{source} {key}")


def _stats(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(path.relative_to(folder)): (path.stat().st_ino, path.stat().st_mtime_ns)
            for path in folder.rglob("*") if path.is_file()}


def test_a_pool_run_writes_forward_of_every_input_then_a_second_run_skips_all(
        model_file: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    summary = corpus.run(model_file, [data], out, jobs=2)
    assert (summary.done, summary.skipped, summary.failed) == (5, 0, 0), summary.lines()
    assert [result.name for result in summary.results] == [
        str(data / name) for name in ("batch.npy", "deep/er/last.npy", "deep/padded.npz",
                                      "one.npy", "pair.npz")]
    assert summary.sequences == 3 + 1 + 3 + 1 + 3 and summary.frames == 21 + 3 + 15 + 9 + 14
    assert all(result.loads == 1 for result in summary.results)  # the model, once per worker
    assert len({result.worker for result in summary.results}) <= 2
    assert os.getpid() not in {result.worker for result in summary.results}
    _assert_matches(model_file, data, out)
    assert not (out / "notes.txt").exists() and not (out / ".hidden.npy").exists()
    before = _stats(out)
    again = corpus.run(model_file, [data], out, jobs=2)
    assert (again.done, again.skipped, again.failed) == (0, 5, 0)
    assert again.frames == 0 and _stats(out) == before  # nothing rewritten
    forced = corpus.run(model_file, [data / "one.npy"], out, jobs=0, force=True)
    assert forced.done == 1 and _stats(out)["one.npy"] != before["one.npy"]


def test_pool_workers_start_with_one_blas_thread(model_file: Path) -> None:
    job = corpus._Job(str(model_file), None, {}, None, None, False)
    outside = {name: os.environ.get(name) for name in corpus.ONE_BLAS_THREAD}
    with corpus._pool(job, 2) as pool:  # whenever the pool starts its workers
        futures = [pool.submit(os.getenv, name) for name in list(corpus.ONE_BLAS_THREAD) * 4]
        assert {future.result() for future in futures} == {"1"}
    assert {name: os.environ.get(name) for name in corpus.ONE_BLAS_THREAD} == outside


def _poisoned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, victims: str | None) -> None:
    """Pool workers (spawned, so no monkeypatch reaches them) die outright on the files
    whose names match ``victims`` (a glob), or as they start (None): a sitecustomize on
    their PYTHONPATH."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import fnmatch, os\n"
        "from pathlib import Path\n"
        "from rnnport import corpus\n"
        "_compute = corpus._compute_and_write\n"
        "def _dying(model, task, job):\n"
        f"    if fnmatch.fnmatch(Path(task.source).name, {victims!r}):\n"
        "        os._exit(9)\n"
        "    return _compute(model, task, job)\n"
        "corpus._compute_and_write = _dying\n"
        + ("" if victims else "corpus._start_worker = lambda *args: os._exit(9)\n"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))


def _reported(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every file the run reports, as it reports it."""
    names: list[str] = []
    report = corpus._Progress.__call__

    def recorded(self: corpus._Progress, result: corpus.FileResult) -> None:
        names.append(Path(result.source).name)
        report(self, result)

    monkeypatch.setattr(corpus._Progress, "__call__", recorded)
    return names


@pytest.mark.parametrize("victims", ["f05.npy", "f0[4-6].npy"])
def test_a_file_that_kills_its_pool_worker_fails_alone(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, many: Path, tmp_path: Path,
        victims: str) -> None:
    """... also beside others that do (the files in flight run again one at a time), and
    leaves no temporary of the writes its death cut short."""
    _poisoned(monkeypatch, tmp_path, victims)
    reported = _reported(monkeypatch)
    summary = corpus.run(model_file, [many], tmp_path / "out", jobs=2)
    killers = sorted(path.name for path in many.glob(victims))
    assert (summary.done, summary.failed) == (24 - len(killers), len(killers)), summary.lines()
    assert sorted(Path(failure.source).name for failure in summary.failures) == killers
    assert all(failure.error.startswith("its worker process died (BrokenProcessPool: ")
               for failure in summary.failures)
    assert sorted(reported) == sorted(path.name for path in many.iterdir())  # each once
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == sorted(
        set(reported) - set(killers))  # no .partial left
    for name in killers:
        (many / name).unlink()
    _assert_matches(model_file, many, tmp_path / "out")


def test_only_failed_starts_in_a_row_end_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pools scripted to fail to start twice, then run a file while another kills its
    worker, then fail to start twice more: no three in a row, so every file is run."""
    tasks = [corpus.Task(f"/in/{name}.npy", f"/out/{name}.npy", f"{name}.npy")
             for name in "abcdef"]
    error = corpus.BrokenProcessPool("a worker died")
    calls: list[tuple[int, bool]] = []

    def done(task: corpus.Task) -> corpus.FileResult:
        return corpus.FileResult(task.name, task.source, task.output, "done", 1, 1, 0.1)

    def scripted(waiting: list[corpus.Task], job: Any, workers: int, ahead: int,
                 report: Any, results: list[corpus.FileResult], probe: bool = False) -> Any:
        calls.append((workers, probe))
        step = len(calls)
        if step == 1:  # the first pool breaks with four files in flight
            return [waiting.pop() for _ in range(4)], error
        if step in (2, 3, 5, 6):
            return None, error  # its worker could not start
        if step == 4:  # runs a, then b kills its worker
            corpus._report(done(waiting.pop()), report, results)
            return [waiting.pop()], error
        while waiting:  # the rest run
            corpus._report(done(waiting.pop()), report, results)
        return None

    monkeypatch.setattr(corpus, "_run_pool", scripted)
    job = corpus._Job("/m.npz", None, {}, None, None, False)
    results = corpus._run_local(tasks, job, 2, lambda result: None)
    assert sorted((result.name, result.status) for result in results) == [
        ("a.npy", "done"), ("b.npy", "failed"), ("c.npy", "done"), ("d.npy", "done"),
        ("e.npy", "done"), ("f.npy", "done")]
    assert calls == [(2, False)] + [(1, True)] * 6 + [(2, False)]


def test_pool_workers_that_cannot_start_end_the_run(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, many: Path, tmp_path: Path) -> None:
    _poisoned(monkeypatch, tmp_path, None)
    started = []
    pool = corpus._pool
    monkeypatch.setattr(corpus, "_pool", lambda *args: started.append(1) or pool(*args))
    summary = corpus.run(model_file, [many], tmp_path / "out", jobs=2)
    assert (summary.done, summary.failed) == (0, 24)
    assert len(started) == 1 + corpus.GIVE_UP_AFTER  # the first pool, then pools of one
    assert sum(failure.error.startswith("not run: worker processes could not start")
               for failure in summary.failures) >= 24 - 4  # all but those in flight
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_command_line_runs_files_and_folders_and_reports_a_summary(
        capsys: pytest.CaptureFixture[str], model_file: Path, data: Path,
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main(["run", str(model_file), str(data / "one.npy"), str(data / "deep"), "--out",
                 str(out), "--jobs", "1"]) == 0
    captured = capsys.readouterr()
    assert sorted(_stats(out)) == ["er/last.npy", "one.npy", "padded.npz"]
    assert "3 files: 3 done, 0 skipped, 0 failed" in captured.out
    assert "5 sequences, 27 frames in" in captured.out and "frames/s" in captured.out
    # One line per file as it is done (in whatever order the pool finishes them), on stderr
    # (not a terminal).
    assert re.search(rf"^\[[123]/3\] {re.escape(str(data / 'one.npy'))}: 1 sequence, 9 frames$",
                     captured.err, re.MULTILINE), captured.err
    assert main(["run", str(model_file), str(data / "deep"), str(data / "one.npy"), "--out",
                 str(out), "-q"]) == 0
    captured = capsys.readouterr()
    assert "3 skipped (their outputs exist; --force redoes them)" in captured.out
    assert captured.err == ""


def test_a_bad_file_is_reported_by_name_and_the_others_are_done(
        capsys: pytest.CaptureFixture[str], model_file: Path, data: Path,
        tmp_path: Path) -> None:
    np.save(data / "wide.npy", _features((2, 4, 9)))       # the wrong input size
    (data / "cut.npy").write_bytes(np.lib.format.magic(1, 0) + b"\x10\x00{'descr'")  # damaged
    np.save(data / "flat.npy", _features((12,)))            # 1-D
    np.savez(data / "only.npz", lengths=np.array([3]))       # lengths and nothing else
    out = tmp_path / "out"
    assert main(["run", str(model_file), str(data), str(tmp_path / "absent.npy"), "--out",
                 str(out), "--jobs", "0", "-q"]) == 1
    text = capsys.readouterr().out
    assert "10 files: 5 done, 0 skipped, 5 failed" in text
    failed = {line.split(": ")[1] for line in text.splitlines() if line.startswith("failed: ")}
    assert failed == {str(data / name) for name in ("wide.npy", "cut.npy", "flat.npy",
                                                    "only.npz")} | {str(tmp_path / "absent.npy")}
    assert "input_size is 5" in text
    assert "wide.npy: shape (2, 4, 9); expected 5 features per frame" in text
    assert "expected (time, input) for one sequence or (batch, time, input)" in text
    assert "not a readable .npy array" in text and "no such file" in text
    for name in ("wide.npy", "cut.npy", "flat.npy", "only.npz"):
        assert not (out / name).exists()
    for name in ("wide.npy", "cut.npy", "flat.npy", "only.npz"):
        (data / name).unlink()
    _assert_matches(model_file, data, out)


def test_what_forward_refuses_in_a_file_names_the_file_and_array_once(
        capsys: pytest.CaptureFixture[str], model_file: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folder = Path("bad")
    folder.mkdir()
    np.savez(folder / "mixed.npz", x=_features((2, 4, 5)), z=_features((2, 4, 3)))
    np.savez(folder / "long.npz", x=_features((2, 4, 5)), lengths=np.array([9, 1]))
    (folder / "broken.npz").write_bytes(b"PK\x03\x04 not really")
    np.save(folder / "one.npy", _features((4, 5)))
    assert main(["run", str(model_file), "bad", "--out", "out", "--jobs", "0", "-q"]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("failed")]
    assert lines == [
        "failed: bad/broken.npz: not a readable NumPy archive (BadZipFile: File is not a zip "
        "file); the file is truncated or damaged.",
        "failed: bad/long.npz, array 'x': lengths[0] = 9; expected 0 ≤ length ≤ 4 (the number "
        "of time steps of the input).",
        "failed: bad/mixed.npz, array 'z': shape (2, 4, 3); expected 5 features per frame (its "
        "last axis): the model's input_size is 5."]
    summary = corpus.run(model_file, [folder / "one.npy"], "again", jobs=0)
    assert summary.lines()[:2] == [
        "1 file: 1 done, 0 skipped, 0 failed",
        f"1 sequence, 4 frames in {summary.elapsed:.2f} s ({summary.frames_per_second:,.0f} "
        "frames/s)"]


def test_an_output_written_since_the_run_was_planned_counts_as_done(
        model_file: Path, data: Path, tmp_path: Path) -> None:
    """Dask runs a task again when its worker dies, with the files the task wrote before
    the death: those count as done by the run, with their inputs' counts, unwritten."""
    out = tmp_path / "out"
    first = {result.output: result for result in corpus.run(model_file, [data], out, jobs=0).results}
    before = _stats(out)
    job = corpus._Job(str(model_file), None, {}, None, None, False)
    for task in corpus.plan([data], out):
        result = corpus._process(task, job)
        assert (result.status, result.sequences, result.frames) == (
            "done", first[task.output].sequences, first[task.output].frames)
    assert _stats(out) == before
    (data / "pair.npz").unlink()  # an input gone since cannot be counted: skipped
    gone = corpus.Task(str(data / "pair.npz"), str(out / "pair.npz"), "pair.npz")
    assert corpus._process(gone, job).status == "skipped"
    np.savez(tmp_path / "odd.npz", x=_features((2, 4, 5)), lengths=np.array([1.5, np.nan]))
    (out / "odd.npz").write_bytes(b"")  # lengths forward refuses: not counted, skipped
    odd = corpus.Task(str(tmp_path / "odd.npz"), str(out / "odd.npz"), "odd.npz")
    assert corpus._process(odd, job).status == "skipped"


def test_run_refuses_an_output_folder_that_is_a_file_and_lengths_that_are_not_counts(
        model_file: Path, data: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    with pytest.raises(rnnport.FormatError, match="output folder .* is a file"):
        corpus.run(model_file, [data], tmp_path / "afile", jobs=0)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(rnnport.FormatError, match="output folder .* is a file"):
        corpus.run(model_file, [data], tmp_path / "dangling", jobs=0)
    for lengths in (np.array([1.5, 2.0]), np.array([[1, 2]]), np.array([-1, 2])):
        with pytest.raises(rnnport.FormatError, match="one whole number ≥ 0 per sequence"):
            corpus.run(model_file, [data], tmp_path / "out", jobs=0, lengths=lengths)
    assert not (tmp_path / "out").exists()


def test_a_run_interrupted_mid_write_leaves_no_partial_output_and_a_rerun_completes(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, data: Path, tmp_path: Path) -> None:
    from rnnport.io.atomic import atomic_write

    writes = []

    def save_half_then_interrupt(path: str, array: np.ndarray) -> Path:
        def write(file: object) -> None:
            writes.append(path)
            if len(writes) == 2:
                file.write(b"\x93NUMPY half of it")  # type: ignore[attr-defined]
                raise KeyboardInterrupt
            np.save(file, array, allow_pickle=False)  # type: ignore[arg-type]

        return atomic_write(path, write)

    monkeypatch.setattr(corpus, "save_npy", save_half_then_interrupt)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        corpus.run(model_file, [data], out, jobs=0)
    assert sorted(_stats(out)) == ["batch.npy"]  # the first file; the second was cut short
    monkeypatch.undo()
    summary = corpus.run(model_file, [data], out, jobs=0)
    assert (summary.done, summary.skipped) == (4, 1)
    _assert_matches(model_file, data, out)
    assert not [path for path in out.rglob("*") if path.name.startswith(".")]


def test_a_killed_run_leaves_complete_outputs_only_and_a_rerun_does_the_rest(
        tmp_path: Path) -> None:
    model_file = _model_file(tmp_path, Spec("gru", 16, 48, num_layers=2, bidirectional=True))
    data = tmp_path / "data"
    data.mkdir()
    count = 24
    for index in range(count):
        np.save(data / f"{index:02}.npy", RNG.uniform(-1, 1, (2, 80, 16)).astype(np.float32))
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "rnnport", "run", str(model_file),
                                str(data), "--out", str(out), "--jobs", "1", "-q"],
                               start_new_session=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        while len(list(out.glob("*.npy"))) < 2 and process.poll() is None:
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)  # the command and its worker, wherever they are
        process.wait()
    finished = sorted(path.name for path in out.glob("*.npy"))
    assert 2 <= len(finished) < count
    summary = corpus.run(model_file, [data], out, jobs=0)
    assert (summary.done, summary.skipped, summary.failed) == (count - len(finished),
                                                               len(finished), 0)
    _assert_matches(model_file, data, out)  # those written before the kill are whole too
    assert not [path for path in out.iterdir() if path.name.startswith(".")]


def test_lengths_and_layout_flags_apply_as_in_the_one_file_form(
        capsys: pytest.CaptureFixture[str], model_file: Path, tmp_path: Path) -> None:
    model = rnnport.read(model_file)
    data = tmp_path / "data"
    data.mkdir()
    x = _features((6, 2, 5))  # (time, batch, input)
    np.save(data / "x.npy", x)
    np.save(tmp_path / "lengths.npy", np.array([6, 3]))
    out = tmp_path / "out"
    assert main(["run", str(model_file), str(data), "--out", str(out), "--lengths",
                 str(tmp_path / "lengths.npy"), "--jobs", "0", "-q"]) == 1
    assert "it looks time-major" in capsys.readouterr().out
    assert main(["run", str(model_file), str(data), "--out", str(out), "--lengths",
                 str(tmp_path / "lengths.npy"), "--time-major", "--jobs", "0", "-q"]) == 0
    want, _ = model.forward(x, lengths=np.array([6, 3]), time_major=True)
    np.testing.assert_array_equal(np.load(out / "x.npy"), want)
    assert "2 sequences, 9 frames" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [
    (["--out", "o"], "--out DIR needs INPUTS"),
    (["a.npy", "--input", "x.npy"], "INPUTS go with --out DIR, not --input"),
    (["--input", "x.npy", "--jobs", "2"], "--jobs go with --out DIR"),
    (["--input", "x.npy", "--jobs", "2", "--dask", "local"], "--jobs and --dask go with --out"),
    (["a.npy", "--out", "o", "--dask", "local", "--jobs", "0"],
     "--jobs 0 runs in this process, without Dask; with --dask, --jobs is the number of Dask "
     "workers"),
    (["a.npy", "--out", "o", "--output", "y.npy"], "--output goes with --input"),
])
def test_the_two_forms_of_run_do_not_mix(capsys: pytest.CaptureFixture[str], argv: list[str],
                                         message: str) -> None:
    assert main(["run", "m.npz", *argv]) == 2
    assert message in capsys.readouterr().err


def test_plans_refuse_shared_outputs_and_writing_over_inputs(data: Path, tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    np.save(tmp_path / "other" / "one.npy", _features((2, 5)))
    with pytest.raises(rnnport.FormatError, match="more than one input.*their folders rather"):
        corpus.plan([data / "one.npy", tmp_path / "other" / "one.npy"], tmp_path / "out")
    with pytest.raises(rnnport.FormatError, match="more than one input") as refused:
        corpus.plan([data, tmp_path / "other"], tmp_path / "out")  # folders already
    assert "rather than the files" not in str(refused.value)
    with pytest.raises(rnnport.FormatError, match="is an input file"):
        corpus.plan([data / "one.npy"], data)
    (tmp_path / "empty").mkdir()
    with pytest.raises(rnnport.FormatError, match="no input files found"):
        corpus.plan([tmp_path / "empty"], tmp_path / "out")
    # An output folder inside the input folder is not searched for inputs.
    tasks = corpus.plan([data], data / "out")
    assert [Path(task.output).relative_to(data / "out").as_posix() for task in tasks] == [
        "batch.npy", "deep/er/last.npy", "deep/padded.npz", "one.npy", "pair.npz"]


def test_dask_without_dask_installed_names_the_extra(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, model_file: Path,
        data: Path, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "dask", None)
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(rnnport.MissingDependencyError, match=r"'dask' extra.*rnnport\[dask\]"):
        corpus.run(model_file, [data], tmp_path / "out", dask="local")
    assert main(["run", str(model_file), str(data), "--out", str(tmp_path / "out"), "--dask",
                 "local"]) == 1
    assert "pip install 'rnnport[dask]'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_dask_local_cluster_writes_every_output_once(model_file: Path, data: Path,
                                                       tmp_path: Path) -> None:
    """... and takes any free port, with no warning, where another cluster holds Dask's
    default port 8787."""
    pytest.importorskip("distributed")
    out = tmp_path / "out"
    with socket.socket() as taken, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(OSError):  # already taken, by another cluster
            taken.bind(("", 8787))
            taken.listen()
        summary = corpus.run(model_file, [data], out, jobs=2, dask="local")
    assert not [str(warning.message) for warning in caught if "8787" in str(warning.message)]
    assert (summary.done, summary.skipped, summary.failed) == (5, 0, 0), summary.lines()
    assert sorted(result.output for result in summary.results) == sorted(
        {result.output for result in summary.results})
    assert all(result.loads == 1 for result in summary.results)  # one model read per worker
    assert len({result.worker for result in summary.results}) <= 2
    assert os.getpid() not in {result.worker for result in summary.results}
    _assert_matches(model_file, data, out)
    before = _stats(out)
    again = corpus.run(model_file, [data], out, jobs=2, dask="local")
    assert (again.done, again.skipped) == (0, 5) and _stats(out) == before


def test_the_dask_worker_config_adds_to_the_environment_in_effect() -> None:
    """... less the malloc trim threshold, which Dask unsets for a None."""
    dask = pytest.importorskip("dask")
    nanny = pytest.importorskip("distributed.nanny")
    key = "distributed.nanny.pre-spawn-environ"
    assert dask.config.get(key)["MALLOC_TRIM_THRESHOLD_"]  # Dask's default, loaded
    with dask.config.set({key: {"MALLOC_TRIM_THRESHOLD_": 65536, "OPENBLAS_NUM_THREADS": 4,
                                "SOMETHING_ELSE": "kept"}}):
        config = corpus.dask_worker_config()
    assert config[key] == {"MALLOC_TRIM_THRESHOLD_": None, "SOMETHING_ELSE": "kept",
                           **corpus.ONE_BLAS_THREAD}
    assert config["distributed.worker.profile.enabled"] is False
    with dask.config.set(config), _environment_without("MALLOC_TRIM_THRESHOLD_",
                                                       *corpus.ONE_BLAS_THREAD):
        assert nanny._get_env_variables(key) == {"SOMETHING_ELSE": "kept",
                                                 **corpus.ONE_BLAS_THREAD}


@contextlib.contextmanager
def _environment_without(*names: str) -> Iterator[None]:
    before = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(before)


def _recording_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record: str,
                    victim: str | None = None) -> Path:
    """A sitecustomize on the PYTHONPATH of the processes started from here: each records
    ``record`` (a Python expression) in a JSON file of the folder returned, named by its
    process id, as it starts (no ``victim``) or as it runs each file, dying on the first
    try of the file named ``victim``."""
    seen = tmp_path / "seen"
    seen.mkdir()
    hook = tmp_path / "hook"
    hook.mkdir()
    if victim is None:
        code = (f"with open(os.path.join({str(seen)!r}, f'{{os.getpid()}}.json'), 'w') as file:\n"
                f"    json.dump({record}, file)\n")
    else:
        code = ("from pathlib import Path\n"
                "from rnnport import corpus\n"
                "_compute = corpus._compute_and_write\n"
                "def _recorded(model, task, job):\n"
                "    import dask\n"
                "    name = Path(task.source).name\n"
                f"    with open(os.path.join({str(seen)!r}, f'{{os.getpid()}}-{{name}}.json'),"
                " 'w') as file:\n"
                f"        json.dump({record}, file)\n"
                f"    marker = os.path.join({str(seen)!r}, 'died')\n"
                f"    if name == {victim!r} and not os.path.exists(marker):\n"
                "        open(marker, 'w').close()\n"
                "        os._exit(9)\n"
                "    return _compute(model, task, job)\n"
                "corpus._compute_and_write = _recorded\n")
    (hook / "sitecustomize.py").write_text("import json, os\n" + code)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))
    return seen


def test_a_local_dask_run_leaves_this_process_environment_as_it_was(
        model_file: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dask's nannies set their workers' pre-spawn environment in the process that starts
    them, PYTHONHASHSEED and __DASK_PARENT_PID too. The workers get one BLAS thread,
    whatever this process has, and no malloc trim threshold."""
    pytest.importorskip("distributed")
    names = ["MALLOC_TRIM_THRESHOLD_", "PYTHONHASHSEED", "__DASK_PARENT_PID",
             *corpus.ONE_BLAS_THREAD]
    seen = _recording_site(tmp_path, monkeypatch,
                           f"{{name: os.environ.get(name) for name in {names!r}}}")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    summary = corpus.run(model_file, [data], tmp_path / "out", jobs=2, dask="local")
    left = {name: os.environ.get(name) for name in names}
    assert summary.done == 5
    assert left == {**dict.fromkeys(names), "OMP_NUM_THREADS": "3"}
    for worker in {result.worker for result in summary.results}:
        environment = json.loads((seen / f"{worker}.json").read_text())
        assert environment == {**dict.fromkeys(names), **corpus.ONE_BLAS_THREAD,
                               "PYTHONHASHSEED": environment["PYTHONHASHSEED"],
                               "__DASK_PARENT_PID": environment["__DASK_PARENT_PID"]}


def test_a_worker_started_again_after_its_death_has_the_same_dask_settings(
        model_file: Path, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The configuration a nanny starts its worker with again is read then: it must still
    be the run's."""
    pytest.importorskip("distributed")
    keys = [key for key in corpus.DASK_WORKER_CONFIG if key != "distributed.nanny.pre-spawn-environ"]
    seen = _recording_site(tmp_path, monkeypatch, f"[dask.config.get(key) for key in {keys!r}]",
                           victim="one.npy")
    summary = corpus.run(model_file, [data], tmp_path / "out", jobs=1, dask="local")
    assert summary.done == 5, summary.lines()
    records = {path.name: json.loads(path.read_text()) for path in seen.glob("*.json")}
    assert len({name.split("-")[0] for name in records}) == 2  # the first worker, and the next
    expected = [corpus.DASK_WORKER_CONFIG[key] for key in keys]
    assert all(values == expected for values in records.values()), records


def _on_dask_in_process(distributed: Any, model_file: Path, inputs: Path,
                        out: Path) -> corpus.Summary:
    """``corpus.run`` on a one-worker Dask cluster in this process (its workers see what
    the test patches)."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0", silence_logs=40) as cluster:
        return corpus.run(model_file, [inputs], out, dask=cluster.scheduler_address)


def _dies_on(monkeypatch: pytest.MonkeyPatch, victim: str) -> None:
    """A Dask task raises, as a dying worker's does, on the file named ``victim`` (the
    in-process workers of a ``processes=False`` cluster see the patch)."""
    task = corpus._dask_task

    def dying(one: corpus.Task, job: Any) -> corpus.FileResult:
        if Path(one.source).name == victim:
            raise RuntimeError("the worker was killed")
        return task(one, job)

    monkeypatch.setattr(corpus, "_dask_task", dying)


def test_a_dask_task_that_dies_is_a_failed_file_and_the_rest_run(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, data: Path, tmp_path: Path) -> None:
    """A task that ends in an error of Dask's (here: raised outside rnnport's own handling,
    as a worker's death is) fails its file alone, with what Dask reported."""
    distributed = pytest.importorskip("distributed")
    victim = "batch.npy"
    _dies_on(monkeypatch, victim)
    summary = _on_dask_in_process(distributed, model_file, data, tmp_path / "out")
    assert (summary.done, summary.failed) == (4, 1), summary.lines()
    (failure,) = summary.failures
    assert Path(failure.source).name == victim
    assert failure.error == "its worker process died (RuntimeError: the worker was killed)"


@pytest.fixture
def many(tmp_path: Path) -> Path:
    """A folder of 24 small feature files."""
    folder = tmp_path / "many"
    folder.mkdir()
    for index in range(24):
        np.save(folder / f"f{index:02d}.npy", _features((2, 3, 5)))
    return folder


def _recording_groups(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The file names of every group handed to a Dask task."""
    groups: list[list[str]] = []
    cut = corpus._Groups.next

    def recorded(self: Any) -> list[corpus.Task]:
        group = cut(self)
        if group:
            groups.append([Path(task.source).name for task in group])
        return group

    monkeypatch.setattr(corpus._Groups, "next", recorded)
    return groups


def test_small_files_run_on_dask_in_groups_once_their_time_is_known(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, many: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    groups = _recording_groups(monkeypatch)
    monkeypatch.setattr(corpus, "GROUP_SECONDS", 60.0)  # every file is small beside it
    monkeypatch.setattr(corpus, "GROUP_FILES", 5)
    summary = _on_dask_in_process(distributed, model_file, many, tmp_path / "out")
    assert (summary.done, summary.failed) == (24, 0), summary.lines()
    assert sorted(result.output for result in summary.results) == sorted(
        {result.output for result in summary.results})
    _assert_matches(model_file, many, tmp_path / "out")
    # One file a task while no time is known (two in flight for the one worker), then
    # groups of at most GROUP_FILES, never more than half of what is left per worker.
    sizes = [len(group) for group in groups]
    assert sizes[:2] == [1, 1] and sum(sizes) == 24
    assert len(sizes) < 24 and max(sizes) == 5 and sizes[-1] == 1


def test_a_dask_group_that_dies_runs_its_files_again_one_a_task(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, many: Path, tmp_path: Path) -> None:
    """Only the file that kills its worker fails; the others of its group, written before
    the death or not, are run again alone and counted as done."""
    distributed = pytest.importorskip("distributed")
    groups = _recording_groups(monkeypatch)
    monkeypatch.setattr(corpus, "GROUP_SECONDS", 60.0)
    monkeypatch.setattr(corpus, "GROUP_FILES", 4)
    victim = "f11.npy"
    _dies_on(monkeypatch, victim)
    summary = _on_dask_in_process(distributed, model_file, many, tmp_path / "out")
    (fated,) = [group for group in groups if victim in group]
    assert len(fated) > 1 and fated.index(victim) > 0  # a file of its group ran before it
    assert (summary.done, summary.failed) == (23, 1), summary.lines()
    (failure,) = summary.failures
    assert Path(failure.source).name == victim
    assert failure.error == "its worker process died (RuntimeError: the worker was killed)"
    assert not (tmp_path / "out" / victim).exists()
    assert sorted(result.output for result in summary.results) == sorted(
        {result.output for result in summary.results})
    again = corpus.run(model_file, [many], tmp_path / "out", jobs=0)  # resumed: the rest
    assert (again.done, again.skipped) == (1, 23)
    _assert_matches(model_file, many, tmp_path / "out")


def test_groups_follow_the_recent_files_times() -> None:
    tasks = [corpus.Task(f"/in/{index}.npy", f"/out/{index}.npy", f"{index}.npy")
             for index in range(400)]
    groups = corpus._Groups(tasks, workers=2)
    assert len(groups.next()) == 1  # no time known yet

    def finished(seconds: float) -> None:
        groups.timed_by(corpus.FileResult("x", "x", "x", "done", 1, 1, seconds))

    for _ in range(corpus.RECENT):
        finished(0.001)
    assert len(groups.next()) == corpus.GROUP_FILES  # small files: as many as allowed
    for _ in range(corpus.RECENT):
        finished(0.1)  # larger files now: the old times no longer count
    assert len(groups.next()) == round(corpus.GROUP_SECONDS / 0.1)
    groups.timed_by(corpus.FileResult("x", "x", "x", "failed", seconds=50.0))  # not timed
    assert len(groups.next()) == round(corpus.GROUP_SECONDS / 0.1)
    for seconds, size in [(0.6 * corpus.GROUP_SECONDS, 2), (0.4 * corpus.GROUP_SECONDS, 2),
                          (3 * corpus.GROUP_SECONDS, 1), (0.0, corpus.GROUP_FILES),
                          (1e-320, corpus.GROUP_FILES)]:
        groups.recent.clear()
        groups.waiting = list(reversed(tasks))
        finished(seconds)
        assert len(groups.next()) == size, seconds  # the nearest count, 1 at least
    groups.waiting = groups.waiting[:6]
    assert len(groups.next()) == 1  # never so many that a worker lacks two groups of it


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_one_line_redrawn_on_a_terminal_with_failures_on_their_own_lines() -> None:
    screen = _Terminal()
    progress = corpus._Progress(screen, 3)
    progress(corpus.FileResult("a.npy", "a.npy", "o/a.npy", "done", 2, 10))
    progress(corpus.FileResult("b.npy", "b.npy", "o/b.npy", "failed", error="a bad shape"))
    progress(corpus.FileResult("c.npy", "c.npy", "o/c.npy", "done", 1, 5))
    progress.close()
    text = screen.getvalue()
    assert "\r\x1b[K[2/3] b.npy: FAILED: a bad shape\n" in text  # the bar cleared first
    assert "\r[################........] 2/3 files, 1 failed" in text
    assert "\r[########################] 3/3 files, 1 failed" in text
    assert text.count("\n") == 2 and text.endswith("\x1b[K\n")


def test_an_output_that_would_be_the_model_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "out").mkdir()
    model = tmp_path / "out" / "m.npz"
    rnnport.write(rnnport.RNN.random(rnnport.Spec("gru", 3, 4)), "npz", path=model)
    before = model.read_bytes()
    np.savez(tmp_path / "in" / "m.npz", x=np.zeros((1, 2, 3), np.float32))
    with pytest.raises(rnnport.FormatError, match="is an input file \\(or the model's\\)"):
        corpus.run(model, [tmp_path / "in" / "m.npz"], tmp_path / "out", jobs=0, force=True)
    assert model.read_bytes() == before


def test_a_rerun_removes_what_a_writer_killed_after_finishing_its_output_left(
        model_file: Path, data: Path, tmp_path: Path) -> None:
    """A writer killed between linking its output in and unlinking its temporary leaves
    both: the output is complete and skipped, and its temporary is removed all the same."""
    out = tmp_path / "out"
    corpus.run(model_file, [data], out, jobs=0)
    leftover = out / ".one.npy.abcdefgh.partial"
    os.link(out / "one.npy", leftover)
    summary = corpus.run(model_file, [data], out, jobs=0)
    assert (summary.done, summary.skipped) == (0, 5)
    assert not leftover.exists()
    assert not [path for path in out.rglob(".*")]


def test_a_run_sweeps_each_output_folder_once_for_killed_writers_leftovers(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, data: Path, tmp_path: Path) -> None:
    """What a killed run's writers left is removed, with one look through each output folder
    rather than one per file written."""
    from rnnport.io import atomic

    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".one.npy.abcdefgh.partial"
    stale.write_bytes(b"half")
    other = out / ".notes.txt.abcdefgh.partial"  # no output of this run: left alone
    other.write_bytes(b"half")
    looks = []
    real = atomic.os.scandir

    def counting(path: object) -> object:
        looks.append(str(path))
        return real(path)

    monkeypatch.setattr(atomic.os, "scandir", counting)
    summary = corpus.run(model_file, [data], out, jobs=0)
    assert summary.done == 5 and not stale.exists() and other.exists()
    outputs = [look for look in looks if look.startswith(str(out))]
    assert len(outputs) == len(set(outputs)) == 3  # out, out/deep, out/deep/er: once each


# -- deadlines -----------------------------------------------------------------------------------


def _stops_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, victim: str,
              once: bool = False) -> None:
    """Worker processes stop themselves (SIGSTOP) on the file named ``victim``, each time
    (or the first time only)."""
    hook = tmp_path / "stopping"
    hook.mkdir()
    marker = tmp_path / "stopped-once"
    (hook / "sitecustomize.py").write_text(
        "import os, signal\n"
        "from pathlib import Path\n"
        "from rnnport import corpus\n"
        "_compute = corpus._compute_and_write\n"
        "def _stopping(model, task, job):\n"
        f"    if Path(task.source).name == {victim!r}:\n"
        f"        if {once!r} and Path({str(marker)!r}).exists():\n"
        "            return _compute(model, task, job)\n"
        f"        Path({str(marker)!r}).touch()\n"
        "        os.kill(os.getpid(), signal.SIGSTOP)\n"
        "    return _compute(model, task, job)\n"
        "corpus._compute_and_write = _stopping\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(hook), *filter(None, [os.environ.get("PYTHONPATH")])]))


def test_a_stopped_pool_worker_is_ended_and_its_file_fails_alone(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, many: Path, tmp_path: Path) -> None:
    """A worker stopped mid-file (SIGSTOP) is noticed within seconds, not waited for: it is
    killed, the files in flight beside it run again, and the file fails alone."""
    victim = "f05.npy"
    _stops_on(monkeypatch, tmp_path, victim)
    start = time.monotonic()
    summary = corpus.run(model_file, [many], tmp_path / "out", jobs=2)
    assert time.monotonic() - start < 60
    assert (summary.done, summary.failed) == (23, 1), summary.lines()
    (failure,) = summary.failures
    assert Path(failure.source).name == victim
    assert re.fullmatch(r"not finished: the worker process \(pid \d+\) was stopped \(SIGSTOP, "
                        r"Ctrl-Z or a debugger\) for 1 s and was ended", failure.error or "")
    (many / victim).unlink()
    _assert_matches(model_file, many, tmp_path / "out")


def test_a_stopped_local_dask_worker_is_killed_and_its_task_runs_elsewhere(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, data: Path, tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    _stops_on(monkeypatch, tmp_path, "one.npy", once=True)
    start = time.monotonic()
    summary = corpus.run(model_file, [data], tmp_path / "out", jobs=2, dask="local")
    assert time.monotonic() - start < 60
    assert (summary.done, summary.failed) == (5, 0), summary.lines()
    assert (tmp_path / "stopped-once").exists()
    # Run again by another worker (not here, after the deadline): the stopped one was seen.
    assert os.getpid() not in {result.worker for result in summary.results}
    _assert_matches(model_file, data, tmp_path / "out")


def test_the_deadline_follows_the_work() -> None:
    """A pool may go without a result for STALL_FACTOR times a worker's start and the
    longest group in flight after another as long, at least STALL_FLOOR seconds."""
    pace = corpus._Pace(read_seconds=2.0, per_byte=1e-6)
    assert pace.allowed([]) == max(corpus.STALL_FLOOR,
                                   corpus.STALL_FACTOR * (corpus.WORKER_START + 2.0))
    big = corpus.Task(__file__, "/out/x", "x")  # this file: some kilobytes
    size = Path(__file__).stat().st_size
    assert pace.allowed([[big], [big, big]]) == pytest.approx(max(
        corpus.STALL_FLOOR, corpus.STALL_FACTOR * (corpus.WORKER_START + 2.0 + 4 * size * 1e-6)))
    slow = corpus._Pace(read_seconds=0.0, per_byte=1.0)  # a second a byte
    assert slow.allowed([[big]]) == pytest.approx(
        corpus.STALL_FACTOR * (corpus.WORKER_START + 2 * size))


def test_a_dask_task_that_gives_no_result_runs_here(
        monkeypatch: pytest.MonkeyPatch, model_file: Path, data: Path, tmp_path: Path) -> None:
    """A task that never ends (as on a stopped worker) is given up after its deadline,
    and its files run in this process (here: the test's main thread; the in-process
    cluster's workers are threads)."""
    distributed = pytest.importorskip("distributed")
    import threading

    monkeypatch.setattr(corpus, "STALL_FLOOR", 1.0)
    monkeypatch.setattr(corpus, "STALL_FACTOR", 1.0)
    monkeypatch.setattr(corpus, "WORKER_START", 0.0)
    released = threading.Event()
    task, process = corpus._dask_task, corpus._process
    here: list[str] = []

    def stuck(one: corpus.Task, job: Any) -> corpus.FileResult:
        if Path(one.source).name == "one.npy":
            released.wait(60)
        return task(one, job)

    def recorded(one: corpus.Task, job: Any) -> corpus.FileResult:
        if threading.current_thread() is threading.main_thread():
            here.append(Path(one.source).name)
            released.set()  # the stuck task may end now: nobody waits for it
        return process(one, job)

    monkeypatch.setattr(corpus, "_dask_task", stuck)
    monkeypatch.setattr(corpus, "_process", recorded)
    start = time.monotonic()
    try:
        summary = _on_dask_in_process(distributed, model_file, data, tmp_path / "out")
    finally:
        released.set()
    assert time.monotonic() - start < 30
    assert (summary.done, summary.failed) == (5, 0), summary.lines()
    assert "one.npy" in here
    _assert_matches(model_file, data, tmp_path / "out")
