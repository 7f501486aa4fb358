"""Crafted attacks, each run in a process of its own under a memory cap and a timeout: every
read, conversion, call and command must end in an rnnport error (or, for the cases marked
``reads``, a model), never another exception, a MemoryError, a crash or a stall.

The cases are in ``hostile_cases.py``: each builds a small hostile file in ``tmp_path``
(a zip bomb, a pickle of shared lists, a checkpoint index, an ONNX graph, a Keras config),
then a child process capped at ``MEMORY_CAP`` bytes of data (``RLIMIT_DATA``) reads it. One
process per case, so that one case running out of memory hides no other; each child prints
the type and first line of what it ended in.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_cases import CASES, RESULT, TIMEOUT, Case, child_command, lzma_zeros

# The LZMA bombs compress 3 GB for real (about ten seconds, the GIL released): started when
# the module's first test starts, and run last, the other cases go on meanwhile.
ORDER = sorted(CASES, key=lambda name: "lzma" in name)


@pytest.fixture(scope="module", autouse=True)
def _lzma_in_the_background() -> Iterator[None]:
    thread = threading.Thread(target=lzma_zeros, daemon=True)
    thread.start()
    yield
    thread.join()


def _digests(folder: Path, names: tuple[str, ...]) -> dict[str, str]:
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in names}


def _run(case: Case, folder: Path) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(child_command(case), cwd=folder, capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired as stalled:
        pytest.fail(f"{case.name}: no answer within {TIMEOUT:g} s; output so far:\n"
                    f"{stalled.stdout!r}\n{stalled.stderr!r}")


def _check_command(case: Case, done: subprocess.CompletedProcess[str]) -> None:
    print(f"{case.name}: exit {done.returncode}: {done.stderr.strip()[:600]}")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one error line, got:\n{done.stderr[-3000:]}"
    command = case.argv[0]
    assert lines[0].startswith(f"rnnport {command}: "), lines[0]
    assert "ran out of memory" not in lines[0] and "internal error" not in lines[0], lines[0]
    assert done.returncode in (1, 3), (done.returncode, lines[0])


def _check_attack(case: Case, done: subprocess.CompletedProcess[str]) -> None:
    results = [line[len(RESULT):] for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and results, (
        f"{case.name}: the child ended with exit status {done.returncode} and no result "
        f"(a crash, or memory out outside Python):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    result = json.loads(results[-1])
    print(f"{case.name}: {result['type']}: {(result['message'].splitlines() or [''])[0][:600]}")
    if result["outcome"] == "other":
        pytest.fail(f"{case.name}: {result['type']} escaped, not an rnnport error: "
                    f"{result['message'][:1000]}\n{result['traceback']}")
    if result["outcome"] == "returned":
        assert case.reads, f"{case.name}: returned {result['message'][:300]}; expected an " \
                           "rnnport error"
        return
    assert not result["memory"], f"{case.name}: a MemoryError became {result['type']}: " \
                                 f"{result['message'][:1000]}"
    if case.limit is not None:
        assert result["type"] == "LimitError" and result["limit"] == case.limit, \
            f"{case.name}: expected a LimitError of limit {case.limit!r}, got " \
            f"{result['type']} (limit {result['limit']!r}): {result['message'][:1000]}"


@pytest.mark.parametrize("name", ORDER)
def test_a_hostile_input_ends_in_an_rnnport_error(tmp_path: Path, name: str) -> None:
    case = CASES[name]
    case.build(tmp_path)
    before = _digests(tmp_path, case.unchanged)
    done = _run(case, tmp_path)
    if case.argv:
        _check_command(case, done)
    else:
        _check_attack(case, done)
    assert _digests(tmp_path, case.unchanged) == before, f"{name}: a source file changed"
