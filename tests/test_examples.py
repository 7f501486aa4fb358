"""The documented examples run as the docs say."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_acoustic_model_example_runs_with_numpy_alone() -> None:
    done = subprocess.run([sys.executable, str(EXAMPLES / "acoustic_model.py")],
                          capture_output=True, text=True, timeout=120, check=True)
    out = done.stdout
    assert "3-layer bidirectional LSTM 120→32" in out
    assert "features (50, 2, 120) -> outputs (50, 2, 64)" in out
    assert "frameworks imported: none" in out
    error = float(re.search(r"largest difference from TensorFlow's own output: (\S+)", out)[1])
    assert error < 1e-5
