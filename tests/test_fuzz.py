"""A bounded pass of tools/fuzz.py (``make fuzz`` runs a longer one with a random seed).

A fixed seed and case count, so every run tries the same inputs: each file reader gets
mutated and truncated golden files and must return a model or raise an rnnport error,
without crashing, hanging or allocating beyond the file's size. One case in twenty gets a
structure-aware mutation (a zip bomb, shared pickled lists, a checkpoint index of huge
counts, a deep msgpack or ONNX chain …).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import rnnport

TOOL = Path(__file__).resolve().parent.parent / "tools" / "fuzz.py"


def _tensorflow_folders() -> set[str]:
    """The formats of the golden TensorFlow 2 containers (folders and prefixes)."""
    golden = Path(__file__).parent / "golden" / "tf2"
    manifest = json.loads((golden / "MANIFEST.json").read_text())
    return {rnnport.formats.sniff(golden / case["source"]) for case in manifest["cases"]}
# Every registered format that reads files (a suffix it reads, or TensorFlow's prefixes and
# folders; the others read objects and arrays alone) must be reached.
FORMATS = {name for name in rnnport.formats()
           if rnnport.formats.get(name).suffixes or name in _tensorflow_folders()}


@pytest.mark.slow
def test_every_file_reader_survives_mutated_golden_files(tmp_path: Path) -> None:
    report = tmp_path / "fuzz.json"
    done = subprocess.run([sys.executable, str(TOOL), "--cases", "1400", "--seed", "20261121",
                           "--jobs", "2", "--structure", "0.1", "--json", str(report),
                           "--keep", str(tmp_path / "k")],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    summary = json.loads(report.read_text())
    assert summary["cases"] == 1400 and not summary["failures"]
    assert set(summary["formats"]) == FORMATS
    structure = {how for how in summary["mutations"] if how.startswith("structure:")}
    assert sum(summary["mutations"][how] for how in structure) >= 40, summary["mutations"]
    for family in ("zip member", "index", "msgpack", "onnx", "flatbuffer"):
        assert any(how.startswith(f"structure: {family}") for how in structure), \
            (family, sorted(structure))
    for fmt, outcomes in summary["formats"].items():
        # Mutations both break files (rnnport errors) and leave some readable: the pass
        # reaches past the first check of every reader.
        assert outcomes.get("model", 0) > 0, (fmt, outcomes)
        assert sum(n for k, n in outcomes.items() if k.startswith("error:")) > 0, (fmt, outcomes)


@pytest.mark.parametrize(("fault", "reported"), [
    ("raise IndexError('planted')", "IndexError: planted"),
    ("os.kill(os.getpid(), signal.SIGSEGV)", "the worker died (exit status -11)"),
])
def test_the_fuzzer_reports_a_reader_that_breaks_its_promise(tmp_path: Path, fault: str,
                                                            reported: str) -> None:
    """A fault planted in a reader where it would return a model (an exception rnnport does
    not define, or a crash) is found, reported with the case that reproduces it, and the
    run goes on with the next case."""
    (tmp_path / "sitecustomize.py").write_text(
        "import dataclasses, importlib, os, signal, sys\n"
        "npz = importlib.import_module('rnnport.formats.npz')\n"
        "original = npz.FORMAT.reader\n"
        "def read(source, **options):\n"
        "    original(source, **options)\n"
        f"    {fault}\n"
        "if '--worker' in sys.argv:  # the workers' reader only, not the seeds' check\n"
        "    npz.FORMAT = dataclasses.replace(npz.FORMAT, reader=read)\n")
    environment = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([sys.executable, str(TOOL), "--cases", "60", "--seed", "1",
                           "--only", "npz", "--json", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=600, env=environment)
    assert done.returncode == 1, done.stdout + done.stderr[-2000:]
    summary = json.loads((tmp_path / "r.json").read_text())
    assert summary["cases"] == 60
    assert summary["failures"] and all(reported in f["detail"] for f in summary["failures"])
    assert "rerun: python tools/fuzz.py --seed 1 --case" in done.stdout
