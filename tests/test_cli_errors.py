"""The command line's promise: whatever happens, one line on stderr and a documented exit
code; the traceback only with ``--debug``; resource limits raised with ``--limit``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport import cli
from rnnport.cli import EXIT_CODES, main

SPEC = rnnport.Spec("gru", 3, 4)


@pytest.fixture()
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.npz"
    rnnport.write(rnnport.RNN.random(SPEC, seed=4), "npz", path=path)
    return path


def _one_line(err: str, command: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"rnnport {command}: ") and "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(("error", "code", "words"), [
    (TypeError("an operand was None"), 70, "internal error (TypeError: an operand was None)"),
    (RecursionError("maximum recursion depth exceeded"), 70, "Rerun with --debug"),
    (AssertionError(), 70, "internal error (AssertionError); this is a bug"),
    (ValueError("a\n  long\tmessage " + "x" * 400), 70, "(ValueError: a long message xxx"),
    (MemoryError(), 3, "ran out of memory"),
    (KeyboardInterrupt(), 130, "interrupted"),
    (rnnport.FormatError("m.npz: damaged"), 1, "m.npz: damaged"),
    (PermissionError(13, "Permission denied", "out.onnx"), 1, "Permission denied"),
])
def test_any_failure_is_one_line_and_its_exit_code(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], model_file: Path,
        error: BaseException, code: int, words: str) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise error

    monkeypatch.setattr(cli, "_inspect", fail)
    assert main(["inspect", str(model_file)]) == code
    assert words in _one_line(capsys.readouterr().err, "inspect")
    assert code in EXIT_CODES


def test_debug_shows_the_traceback(monkeypatch: pytest.MonkeyPatch, model_file: Path) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise TypeError("an operand was None")

    monkeypatch.setattr(cli, "_inspect", fail)
    with pytest.raises(TypeError, match="an operand was None"):
        main(["inspect", str(model_file), "--debug"])


def test_a_limit_hit_exits_3_and_says_how_to_raise_it_on_the_command_line(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((2, 50, 3), np.float32))
    model = tmp_path / "m.npz"
    rnnport.write(rnnport.RNN.random(SPEC), "npz", path=model)
    out = tmp_path / "y.npy"
    assert main(["run", str(model), "--input", str(x), "--output", str(out), "--quiet",
                 "--limit", "elements=100"]) == 3
    line = _one_line(capsys.readouterr().err, "run")
    assert "would need 2,300 values" in line and "past the limit 'elements'" in line
    assert "--limit elements=5000" in line  # enough for this call
    assert "rnnport.limits" not in line and not out.exists()
    assert main(["run", str(model), "--input", str(x), "--output", str(out),
                 "--limit", "elements=1e6", "--quiet"]) == 0
    assert np.load(out).shape == (2, 50, 4)


@pytest.mark.parametrize("argument", ["foo=3", "elements=-1", "elements=nan", "elements",
                                      "seconds=inf"])
def test_a_bad_limit_is_a_usage_error(capsys: pytest.CaptureFixture[str], model_file: Path,
                                      argument: str) -> None:
    assert main(["inspect", str(model_file), "--limit", argument]) == 2
    err = capsys.readouterr().err
    assert "argument --limit" in err and "Traceback" not in err


def test_limits_given_on_the_command_line_last_for_the_command_only(
        monkeypatch: pytest.MonkeyPatch, model_file: Path) -> None:
    seen = {}

    def record(*args: object, **kwargs: object) -> int:
        seen.update(rnnport.budget.current())
        return 0

    monkeypatch.setattr(cli, "_inspect", record)
    assert main(["--limit", "work=9", "inspect", str(model_file)]) == 0
    assert seen["work"] == 9 and seen["seconds"] == 20
    assert main(["inspect", str(model_file), "--limit", "seconds=5", "--limit", "work=2"]) == 0
    assert seen["work"] == 2 and seen["seconds"] == 5
    assert rnnport.budget.current() == {name: limit.default
                                        for name, limit in rnnport.budget.LIMITS.items()}


def test_help_lists_the_exit_codes_and_the_limits() -> None:
    done = subprocess.run([sys.executable, "-m", "rnnport", "--help"], capture_output=True,
                          text=True, check=True)
    for code, meaning in EXIT_CODES.items():
        assert f"{code:<4} {meaning}" in done.stdout
    for name in rnnport.budget.LIMITS:
        assert name in done.stdout


def test_the_console_never_prints_a_traceback_for_hostile_arguments(tmp_path: Path) -> None:
    """Through the real entry point: a billion layers asked for, a file that is not there,
    a file that is not a model."""
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04" + b"\xff" * 60)
    for argv in (["explain", "lstm", "--from", "torch", "--to", "onnx", "--layers",
                  "1000000000"],
                 ["inspect", str(tmp_path / "missing.pt")],
                 ["inspect", str(tmp_path / "junk.pt")]):
        done = subprocess.run([sys.executable, "-m", "rnnport", *argv], capture_output=True,
                              text=True, check=False, timeout=120)
        assert done.returncode in (1, 2, 3), done.stderr
        assert "Traceback" not in done.stderr and done.stderr.strip(), done.stderr
