"""`make bench` keeps working: its pieces run on tiny workloads (no timing is asserted)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnport

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "bench" / "bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("bench", None)


def test_forward_workload_checks_agreement_and_reports_ratios(bench) -> None:
    tiny = bench.Forward("A", "tiny", rnnport.Spec("lstm", 3, 4, num_layers=2, bidirectional=True),
                         2, 5)
    result = bench.run_forward(tiny, repeat=1, rounds=1, ceiling=100.0)
    assert set(result["engines"]) == {"rnnport", "torch", "onnxruntime", "rnnport:onnxruntime",
                                      "rnnport:torch"}
    assert result["engines"]["onnxruntime"]["vs_onnxruntime"] == 1.0
    engines = result["engines"]
    for engine in bench.THROUGH:
        assert np.isfinite(engines[engine]["overhead"]) and engines[engine]["overhead"] > -1
    assert not any("slowdown" in timing for timing in engines.values())
    assert max(result["max_abs_diff_vs_torch"].values()) <= bench.TOLERANCE
    assert tiny.flops() == 2 * 2 * 5 * 2 * 16 * ((3 + 4) + (8 + 4))


def test_overhead_is_the_median_ratio_of_calls_timed_in_pairs(bench, monkeypatch) -> None:
    # A clock that each call moves on: through takes 1.1 (2.2 on every third call), direct 1.
    clock = [0.0]
    calls = {"through": 0}
    monkeypatch.setattr(bench.time, "perf_counter", lambda: clock[0])

    def through() -> None:
        calls["through"] += 1
        clock[0] += 2.2 if calls["through"] % 3 == 0 else 1.1

    def direct() -> None:
        clock[0] += 1.0

    assert bench.overhead(through, direct, pairs=5) == pytest.approx(0.1)
    assert calls["through"] == 6  # one untimed call first


def test_forward_workload_refuses_engines_that_disagree(bench, monkeypatch) -> None:
    def wrong(rnn, x):
        return (lambda: None), (lambda: rnn.forward(x)[0] + 1.0)

    monkeypatch.setitem(bench.ENGINES, "rnnport", wrong)
    tiny = bench.Forward("C", "tiny", rnnport.Spec("gru", 3, 4), 2, 5)
    with pytest.raises(SystemExit, match="disagree"):
        bench.run_forward(tiny, repeat=1, rounds=1, ceiling=100.0)


def test_main_writes_json_with_the_import_time(bench, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run.json"
    assert bench.main(["--only", "E", "--repeat", "1", "--rounds", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert results["import"]["frameworks_imported"] == []
    assert np.isfinite(results["import"]["median_ms"])
    printed = capsys.readouterr().out
    assert "E: `import rnnport`" in printed
    # which path was measured: threadpoolctl (a required dependency) and the helper process
    assert results["path"]["threadpoolctl"] and "Path: threadpoolctl " in printed


def test_contention_times_every_engine_beside_a_busy_process(bench, monkeypatch) -> None:
    started = []
    real = bench.subprocess.Popen

    def spy(command, *args, **kwargs):
        started.append(command)
        return real(command, *args, **kwargs)

    monkeypatch.setattr(bench.subprocess, "Popen", spy)
    tiny = bench.Forward("C", "tiny", rnnport.Spec("gru", 3, 4), 2, 5)
    result = bench.run_forward(tiny, repeat=1, rounds=1, ceiling=100.0, contention=True)
    assert len(started) == 1 and "while True" in started[0][-1]
    for timing in result["engines"].values():
        assert timing["slowdown"] == pytest.approx(timing["busy_s"] / timing["median_s"])
    lines = "\n".join(bench._engine_lines({"forward": {"C": result}}))
    assert "competing CPU-bound process" in lines and "rnnport:torch" in lines


def test_streaming_checks_the_final_states_and_reports_per_step_times(bench) -> None:
    result = bench.run_streaming(steps=3, rounds=1)
    assert set(result["us_per_step"]) == {"rnnport", "rnnport:stream", "rnnport:onnxruntime",
                                          "rnnport:torch", "onnxruntime", "torch"}
    assert all(value > 0 for value in result["us_per_step"].values())
    # the stream grid: every stream and runtime, 1 and 64 streams, 1 and 10 steps a call
    assert set(result["streams"]) == {"1x1", "1x10", "64x1", "64x10"}
    for grid in result["streams"].values():
        assert set(grid["us_per_call"]) == set(bench.STREAMS)
        assert set(grid["vs_onnxruntime"]) == set(bench.STREAMS) - {"onnxruntime"}
        assert all(value > 0 for value in grid["vs_onnxruntime"].values())
    lines = "\n".join(bench._engine_lines({"forward": {}, "streaming": result}))
    assert "64 streams × 10 steps: stream:numpy" in lines


def test_corpus_throughput_runs_one_and_two_workers(bench) -> None:
    result = bench.run_corpus(files=2, rounds=2, spec=rnnport.Spec("gru", 3, 4),
                              frames=(2, 5))
    for label in ("pool-1", "pool-2", "dask-1", "dask-2"):
        assert result[label]["frames_per_second"] > 0
        # Every setting ran once a round; the best round counts.
        assert len(result[label]["samples_s"]) == 2
        assert result[label]["seconds"] == min(result[label]["samples_s"])
        assert result[label]["frames_per_second"] == pytest.approx(2 * 2 * 5 / min(
            result[label]["samples_s"]))
    assert result["dask_speedup"] == pytest.approx(
        result["dask-2"]["frames_per_second"] / result["dask-1"]["frames_per_second"])
    assert "Dask, 1 worker" in bench.table({"forward": {}, "corpus": result,
                                            "ceiling": {"size": 1, "gflops": 1.0},
                                            "machine": {"cpus": 2, "processor": "x"}})
