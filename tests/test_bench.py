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
    assert set(result["engines"]) == {"rnnport", "torch", "onnxruntime"}
    assert result["engines"]["onnxruntime"]["vs_onnxruntime"] == 1.0
    assert max(result["max_abs_diff_vs_torch"].values()) <= bench.TOLERANCE
    assert tiny.flops() == 2 * 2 * 5 * 2 * 16 * ((3 + 4) + (8 + 4))


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
    assert "E: `import rnnport`" in capsys.readouterr().out
