"""The command line: in-process through main(argv), and once through the console script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rnnport.cli import main


def test_demo_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("yes, bit for bit") == 2
    assert "W_r (3×2)        kernel[:, 3:6]ᵀ" in out
    assert "all checks passed" in out


def test_demo_with_a_missing_reference_is_a_one_line_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["demo", "--reference", str(tmp_path / "absent.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rnnport demo:") and "absent.json" in err and "Traceback" not in err


def test_formats_lists_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    import rnnport

    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == rnnport.formats()


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["no-such-command"]) == 2


def test_console_script_runs_the_demo() -> None:
    script = Path(sys.executable).parent / "rnnport"
    command = [str(script)] if script.exists() else [shutil.which("rnnport") or "rnnport"]
    result = subprocess.run([*command, "demo"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "all checks passed" in result.stdout
