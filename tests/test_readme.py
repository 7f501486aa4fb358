"""The README's code runs as written.

Its ``python`` blocks run in order in one namespace, and the commands of its ``sh`` blocks
run where they stand in the text, in a temporary folder that holds a copy of ``examples/``
(the README speaks from the root of a clone), a link to ``tests/`` (whose golden files it
reads) and a link to this environment as ``.venv``.
Lines that set up an environment (``make``, ``pip install``, activating ``.venv``) are what
this test environment already did, and are the only lines not run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SET_UP = ("make ", "pip ", ". .venv/bin/activate")


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, language, code) of each fenced block."""
    return [(text.count("\n", 0, match.start()) + 2, match[1], match[2])
            for match in BLOCK.finditer(text)]


def commands(code: str) -> list[str]:
    """The shell commands of an ``sh`` block: continuation lines joined, comments and the
    set-up lines left out."""
    joined = re.sub(r"\\\n\s*", "", code)
    found = []
    for line in joined.splitlines():
        command = re.split(r"\s+#", line, maxsplit=1)[0].strip()
        if command and not command.startswith("#") and not command.startswith(SET_UP):
            found.append(command)
    return found


def test_the_block_reader_finds_code_and_leaves_out_set_up_only() -> None:
    text = "x\n```python\na = 1\n```\n```sh\nmake demo  # set up\nrnnport formats \\\n" \
           "    --matrix   # a comment\n```\n"
    assert [(line, lang) for line, lang, _ in blocks(text)] == [(3, "python"), (6, "sh")]
    assert commands(blocks(text)[1][2]) == ["rnnport formats --matrix"]


@pytest.mark.slow
def test_readme_code_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = blocks(text)
    assert sum(lang == "python" for _, lang, _ in found) >= 4
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    (tmp_path / "tests").symlink_to(ROOT / "tests")  # golden files the README reads, never writes
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    monkeypatch.chdir(tmp_path)
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                   f"{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    namespace: dict[str, object] = {"__name__": "__readme__"}
    ran = 0
    for line, lang, code in found:
        if lang == "python":
            try:
                exec(compile(code, f"README.md, block at line {line}", "exec"), namespace)
            except Exception as error:  # the README's own words fail: say which block
                pytest.fail(f"README.md, python block at line {line}: {type(error).__name__}: "
                            f"{error}")
            ran += 1
        elif lang == "sh":
            for command in commands(code):
                result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=environment,
                                        capture_output=True, text=True, timeout=600,
                                        check=False)
                assert result.returncode == 0, (
                    f"README.md, sh block at line {line}: `{command}` exited "
                    f"{result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
                ran += 1
    assert ran >= 15
