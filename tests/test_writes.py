"""Writes that survive crashes and races: a killed writer's temporary is cleaned up by the
next write (a live writer's is not), ``overwrite=False`` holds at the rename, a checkpoint
changes all at once for readers and crashes alike, and the system's errors are
FormatErrors that keep the system's reason."""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError
from rnnport.io import tensorbundle

MODEL = RNN.random(Spec("lstm", 3, 4), seed=1)
OTHER = RNN.random(Spec("lstm", 3, 4), seed=2)
# What a checkpoint holds of each (one bias, the sum of the two).
SAVED, OTHER_SAVED = (rnnport.read(rnnport.write(model, "tf1"), "tf1") for model in (MODEL, OTHER))
SOURCE = str(Path(rnnport.__file__).parents[1])

# Run in a child process: ``gate(ready)`` makes every file written wait, once its bytes are
# written, until the file ``ready + '.go'`` exists, after touching ``ready``; ``checked(path)``
# touches ``path`` once the outputs were checked (before any file is written).
PRELUDE = """
import os, sys, time
from pathlib import Path
import rnnport
from rnnport import RNN, Spec
from rnnport.io import atomic

MODEL = RNN.random(Spec("lstm", 3, 4), seed=1)
OTHER = RNN.random(Spec("lstm", 3, 4), seed=2)


def wait_for(path):
    while not Path(path).exists():
        time.sleep(0.01)


def gate(ready):
    original = atomic.atomic_write_all

    def gated(files, **options):
        def held(write):
            def inner(file):
                write(file)
                file.flush()
                Path(ready).touch()
                wait_for(ready + ".go")
            return inner
        return original([(path, held(write)) for path, write in files], **options)

    atomic.atomic_write_all = gated


def checked(path):
    original = atomic.check_outputs

    def check(*arguments):
        original(*arguments)
        Path(path).touch()

    atomic.check_outputs = check
"""


def _child(tmp_path: Path, name: str, body: str) -> subprocess.Popen[str]:
    script = tmp_path / f"{name}.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": SOURCE}
    return subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def _wait_for(path: Path, child: subprocess.Popen[str]) -> None:
    """Until ``path`` exists; the child's error if it ended first."""
    deadline = time.monotonic() + 60
    while not path.exists():
        if child.poll() is not None:
            raise AssertionError(f"the child ended ({child.returncode}): {child.stderr.read()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def _partials(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".partial"))


# -- a killed writer's temporary --------------------------------------------------------------


def test_the_next_write_removes_a_killed_writers_temporary_but_not_a_live_ones(
        tmp_path: Path) -> None:
    target = tmp_path / "m.npz"
    killed = _child(tmp_path, "killed", f"""
        gate({str(tmp_path / 'killed')!r})
        rnnport.write(MODEL, "npz", path={str(target)!r})
        """)
    live = _child(tmp_path, "live", f"""
        gate({str(tmp_path / 'live')!r})
        rnnport.write(OTHER, "npz", path={str(target)!r}, overwrite=True)
        print("wrote")
        """)
    try:
        _wait_for(tmp_path / "killed", killed)
        _wait_for(tmp_path / "live", live)
        killed.kill()
        killed.wait()
        assert len(_partials(tmp_path)) == 2
        rnnport.write(MODEL, "npz", path=target)
        assert rnnport.read(target) == MODEL
        (remaining,) = _partials(tmp_path)  # the live writer's, still locked
        (tmp_path / "live.go").touch()
        assert live.wait(timeout=60) == 0, live.stderr.read()
        assert live.stdout.read().strip() == "wrote"
        assert not (tmp_path / remaining).exists()
        assert rnnport.read(target) == OTHER
    finally:
        for child in (killed, live):
            child.kill()
            child.wait()
    stale = _child(tmp_path, "stale", f"""
        gate({str(tmp_path / 'stale')!r})
        rnnport.write(OTHER, "npz", path={str(target)!r}, overwrite=True)
        """)
    _wait_for(tmp_path / "stale", stale)
    stale.kill()
    stale.wait()
    assert _partials(tmp_path)
    rnnport.convert(MODEL, "npz", path=target, overwrite=True)
    assert not _partials(tmp_path)


def test_only_temporaries_of_that_target_are_removed(tmp_path: Path) -> None:
    others = [".m.npz.partial", ".m.npz.abcdefgh.partial.keep", ".mm.npz.abcdefgh.partial",
              "m.npz.abcdefgh.partial", ".m.npz.abcdefghi.partial", ".m.npzz.abcdefgh.partial"]
    for name in [*others, ".m.npz.abcdefgh.partial"]:
        (tmp_path / name).write_bytes(b"x")
    rnnport.write(MODEL, "npz", path=tmp_path / "m.npz")
    assert sorted(os.listdir(tmp_path)) == sorted([*others, "m.npz"])


# -- overwrite=False at the rename ----------------------------------------------------------


@pytest.mark.parametrize(("fmt", "name"), [("npz", "m.npz"), ("tf1", "m.ckpt")])
def test_two_writers_creating_one_file_never_both_succeed(tmp_path: Path, fmt: str,
                                                          name: str) -> None:
    """Both pass the check that the file is new before either writes; the rename decides."""
    target = tmp_path / name
    children = [_child(tmp_path, f"writer{number}", f"""
        gate({str(tmp_path / f'ready{number}')!r})
        checked({str(tmp_path / f'checked{number}')!r})
        try:
            rnnport.write({model}, {fmt!r}, path={str(target)!r})
        except rnnport.FormatError as error:
            print(error)
            sys.exit(3)
        print("wrote")
        """) for number, model in enumerate(("MODEL", "OTHER"))]
    try:
        for number, child in enumerate(children):
            _wait_for(tmp_path / f"checked{number}", child)
        for number in range(2):
            (tmp_path / f"ready{number}.go").touch()
        codes = [child.wait(timeout=60) for child in children]
        outputs = [child.stdout.read() for child in children]
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert sorted(codes) == [0, 3], outputs
    winner = codes.index(0)
    assert "appeared while rnnport was writing it" in outputs[1 - winner]
    assert "Pass overwrite=True to replace it. Nothing was written." in outputs[1 - winner]
    assert rnnport.read(target) == ((MODEL, OTHER) if fmt == "npz" else (SAVED, OTHER_SAVED))[winner]
    assert not _partials(tmp_path)
    if fmt == "tf1":  # the loser left none of its data files
        assert sorted(p.name for p in tmp_path.glob("m.ckpt*")) == [
            "m.ckpt.data-00000-of-00001", "m.ckpt.index"]


# -- a checkpoint changes all at once -------------------------------------------------------


def test_an_overwrite_that_fails_at_the_index_leaves_the_old_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prefix = tmp_path / "m[1].ckpt"
    rnnport.write(MODEL, "tf1", path=prefix)
    real_replace = os.replace

    def failing(source: str, target: str, *arguments: object, **options: object) -> None:
        if str(target).endswith(".index"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(FormatError, match=r"m\[1\]\.ckpt\.index: cannot be renamed into place; "
                                          r"the system says: Input/output error\."):
        rnnport.write(OTHER, "tf1", path=prefix, overwrite=True)
    monkeypatch.undo()
    assert rnnport.read(prefix) == SAVED
    assert sorted(os.listdir(tmp_path)) == [
        "checkpoint", "m[1].ckpt.data-00000-of-00001", "m[1].ckpt.index"]


def test_a_writer_killed_before_the_index_leaves_the_old_checkpoint(tmp_path: Path) -> None:
    prefix = tmp_path / "m.ckpt"
    rnnport.write(MODEL, "tf1", path=prefix)
    child = _child(tmp_path, "killed", f"""
        real = os.replace

        def stalled(source, target, *arguments, **options):
            if str(target).endswith(".index"):
                Path({str(tmp_path / 'at-index')!r}).touch()
                time.sleep(60)
            real(source, target, *arguments, **options)

        os.replace = stalled
        rnnport.write(OTHER, "tf1", path={str(prefix)!r}, overwrite=True)
        """)
    try:
        _wait_for(tmp_path / "at-index", child)
    finally:
        child.kill()
        child.wait()
    assert len(list(tmp_path.glob("m.ckpt.data-*"))) == 3  # the new data is in, not indexed
    assert rnnport.read(prefix) == SAVED
    rnnport.write(OTHER, "tf1", path=prefix, overwrite=True)  # cleans up what was left
    assert rnnport.read(prefix) == OTHER_SAVED
    assert sorted(p.name for p in tmp_path.glob("*m.ckpt*")) == [
        "m.ckpt.data-00000-of-00002", "m.ckpt.data-00001-of-00002", "m.ckpt.index"]


def test_data_files_the_index_does_not_name_are_removed_by_the_next_write(
        tmp_path: Path) -> None:
    prefix = tmp_path / "m[1].ckpt"
    rnnport.write(MODEL, "tf1", path=prefix)
    kept = ["m1.ckpt.data-00000-of-00002", "m[1].ckpt.data-00000-of-00002.bak",
            "m[1].ckpt.data-0000-of-00002", "mx1].ckpt.data-00000-of-00003"]
    for name in [*kept, "m[1].ckpt.data-00000-of-00002", "m[1].ckpt.data-00003-of-00007"]:
        (tmp_path / name).write_bytes(b"left over")
    rnnport.write(OTHER, "tf1", path=prefix, overwrite=True)
    assert rnnport.read(prefix) == OTHER_SAVED
    assert sorted(os.listdir(tmp_path)) == sorted([
        *kept, "checkpoint", "m[1].ckpt.index", "m[1].ckpt.data-00000-of-00002",
        "m[1].ckpt.data-00001-of-00002"])
    rnnport.write(MODEL, "tf1", path=prefix, overwrite=True)
    assert rnnport.read(prefix) == SAVED
    assert sorted(os.listdir(tmp_path)) == sorted([
        *kept, "checkpoint", "m[1].ckpt.index", "m[1].ckpt.data-00000-of-00001"])


def test_the_two_shard_layout_is_a_checkpoint_tensorflow_reads(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow")
    arrays = {f"v{number}": np.arange(number * 3, dtype=np.float32) + number
              for number in range(5)}
    tensorbundle.write_bundle(tmp_path / "m", {name: -value for name, value in arrays.items()})
    written = tensorbundle.write_bundle(tmp_path / "m", arrays)
    assert [path.name for path in written] == [
        "m.index", "m.data-00000-of-00002", "m.data-00001-of-00002"]
    assert all(path.stat().st_size for path in written)  # the tensors are split between them
    reader = tf.train.load_checkpoint(str(tmp_path / "m"))
    for name, value in arrays.items():
        np.testing.assert_array_equal(reader.get_tensor(name), value)
    assert tensorbundle.read_bundle(tmp_path / "m").keys() == arrays.keys()


def test_readers_racing_overwrites_see_one_checkpoint_or_the_other(tmp_path: Path) -> None:
    prefix = tmp_path / "m.ckpt"
    rnnport.write(MODEL, "tf1", path=prefix)
    writer = _child(tmp_path, "writer", f"""
        count = 0
        while not Path({str(tmp_path / 'stop')!r}).exists():
            rnnport.write((MODEL, OTHER)[count % 2], "tf1", path={str(prefix)!r},
                          overwrite=True)
            count += 1
            Path({str(tmp_path / 'count')!r}).write_text(str(count))
        print(count)
        """)
    try:
        _wait_for(tmp_path / "count", writer)
        seen = []
        while len(seen) < 300 or _count(tmp_path / "count") < 30:
            seen.append(rnnport.read(prefix, "tf1"))
        (tmp_path / "stop").touch()
        assert writer.wait(timeout=60) == 0, writer.stderr.read()
        writes = int(writer.stdout.read())
    finally:
        writer.kill()
        writer.wait()
    assert writes >= 30  # the reads overlapped many writes
    assert all(model in (SAVED, OTHER_SAVED) for model in seen)
    assert SAVED in seen and OTHER_SAVED in seen


def _count(path: Path) -> int:
    text = path.read_text()  # "" while the writer is rewriting it
    return int(text) if text else 0


# -- the system's errors ----------------------------------------------------------------------


def test_paths_no_file_can_have_are_format_errors_with_the_reason(tmp_path: Path) -> None:
    long_name = tmp_path / ("x" * 5000)
    too_long = os.strerror(errno.ENAMETOOLONG)
    for fmt in ("npz", "tf1"):
        with pytest.raises(FormatError, match=r"a\\x00b\.npz.*: cannot be written; the system "
                                              "says: embedded null byte: the path contains a "
                                              "NUL byte.*Nothing was written"):
            rnnport.write(MODEL, fmt, path=tmp_path / "a\0b.npz")
        with pytest.raises(FormatError, match=f"5,0.. characters.*: cannot be written; the "
                                              f"system says: {too_long}.*Nothing was written"):
            rnnport.write(MODEL, fmt, path=long_name)
    with pytest.raises(FormatError, match="read: .* cannot be read; the system says: embedded "
                                          "null byte: the path contains a NUL byte"):
        rnnport.read(tmp_path / "a\0b.npz")
    with pytest.raises(FormatError, match=f"convert: .* the system says: {too_long}"):
        rnnport.convert(long_name, "npz", path=tmp_path / "out.npz")
    assert not os.listdir(tmp_path)


def test_a_refusing_folder_a_full_disk_and_a_failed_rename_are_format_errors(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "m.npz"
    rnnport.write(MODEL, "npz", path=target)
    before = target.read_bytes()

    def full(file: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    from rnnport.io.atomic import atomic_write

    with pytest.raises(FormatError, match=r"m\.npz: cannot be written; the disk is full \(ENOSPC: "
                                          r"No space left on device\)\. Free some space .* "
                                          r"Nothing was written\.$"):
        atomic_write(target, full)
    assert target.read_bytes() == before and not _partials(tmp_path)

    real_replace, real_link = os.replace, os.link

    def broken(*arguments: object, **options: object) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "replace", broken)
    monkeypatch.setattr(os, "link", broken)
    with pytest.raises(FormatError, match="m.npz: cannot be renamed into place; the system says: "
                                          "Input/output error.*Nothing was written"):
        rnnport.write(OTHER, "npz", path=target, overwrite=True)
    with pytest.raises(FormatError, match="new.npz: cannot be renamed into place; the system "
                                          "says: Input/output error.*Nothing was written"):
        rnnport.write(OTHER, "npz", path=tmp_path / "new.npz")
    monkeypatch.setattr(os, "replace", real_replace)
    monkeypatch.setattr(os, "link", real_link)
    assert target.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["m.npz"]

    folder = tmp_path / "read-only"
    folder.mkdir()
    if os.geteuid() == 0:  # root writes anywhere: the folder refuses by stand-in
        real_open = os.open

        def refusing(path: str, *arguments: object, **options: object) -> int:
            if str(path).endswith(".partial"):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
            return real_open(path, *arguments, **options)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "open", refusing)
    else:
        folder.chmod(0o555)
    try:
        with pytest.raises(FormatError, match=f"cannot create a file in {folder}; the system "
                                              "says: Permission denied. Choose a folder you "
                                              "can write to. Nothing was written."):
            rnnport.write(MODEL, "tf1", path=folder / "m.ckpt")
    finally:
        folder.chmod(0o755)
    assert not os.listdir(folder)


# -- a full disk, a file too large: every writer, the real system's errors -------------------

# Run in a child process: every format written over an existing file of a smaller model
# into FOLDER, where the files do not fit (a tiny file system, or a limit on file sizes);
# prints one line per writer (its error, or "wrote"), then whether the folder's files are as
# they were.
FULL = """
import os, sys, resource
from pathlib import Path
import rnnport
from rnnport import RNN, Spec

folder, limit = Path(sys.argv[1]), int(sys.argv[2])
small, big = RNN.random(Spec("lstm", 4, 4), seed=1), RNN.random(Spec("lstm", 48, 48), seed=2)
TARGETS = [("npz", "m.npz"), ("torch", "m.pt"), ("torch", "m.safetensors"), ("keras", "m.keras"),
           ("keras", "m.weights.h5"), ("tf1", "m.ckpt"), ("tf2", "t2"), ("onnx", "m.onnx"),
           ("tflite", "m.tflite"), ("flax", "m.msgpack"), ("cudnn", "m.npy"),
           ("tfgraph", "m.pb")]
for fmt, name in TARGETS:
    rnnport.write(small, fmt, path=folder / name)
before = {path.name: path.read_bytes() for path in folder.iterdir()}
if limit:  # EFBIG: no file may grow past the limit (Python ignores SIGXFSZ)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
else:  # ENOSPC: the rest of the file system filled
    filler = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(filler, bytes(4096))
    except OSError:
        os.close(filler)
for fmt, name in TARGETS:
    try:
        rnnport.write(big, fmt, path=folder / name, overwrite=True)
        print(fmt, name, "wrote")
    except Exception as error:
        print(fmt, name, type(error).__name__, " ".join(str(error).split()))
after = {path.name: path.read_bytes() for path in folder.iterdir() if path.name != "filler"}
print("as they were" if after == before else f"changed: {sorted(set(after) ^ set(before))}")
"""


def _full_writes(folder: Path, command: list[str], limit: int) -> list[str]:
    """Every writer's outcome in FULL, run by ``command`` (a prefix), over old files in
    ``folder`` that must stay as they were."""
    script = folder.parent / "full.py"
    script.write_text(FULL)
    done = subprocess.run([*command, sys.executable, str(script), str(folder), str(limit)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": SOURCE}, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    *lines, last = done.stdout.splitlines()
    assert len(lines) == 12 and last == "as they were", done.stdout
    return lines


def _two_numbers(lines: list[str], pattern: str) -> list[tuple[int, int]]:
    """Each writer's line matches ``pattern`` (``fmt name FormatError message``); the
    numbers of the pattern's two groups, in order."""
    out = []
    for line in lines:
        found = re.fullmatch(r"(\S+) (\S+) FormatError (.*): cannot be written; " + pattern, line)
        assert found, line
        out.append((int(found[4].replace(",", "")), int(found[5].replace(",", ""))))
    return out


def test_every_writer_says_a_file_larger_than_the_process_may_write(tmp_path: Path) -> None:
    """RLIMIT_FSIZE (ulimit -f): the system's EFBIG reaches the message from every writer,
    NumPy's .npy writer included (its tofile said "N requested and M written")."""
    pytest.importorskip("resource")
    folder = tmp_path / "out"
    folder.mkdir()
    lines = _full_writes(folder, [], 24_000)
    for limit, needed in _two_numbers(lines, (
            r"the file is larger than this process may write \(EFBIG: File too large; the "
            r"limit here is ([0-9,]+) bytes\): the file needs at least ([0-9,]+) bytes\. Raise "
            r"the limit \(ulimit -f\) or write a smaller model\. Nothing was written\.")):
        assert limit == 24_000 < needed
    assert rnnport.read(folder / "m.npz") == RNN.random(Spec("lstm", 4, 4), seed=1)


def test_every_writer_says_the_disk_is_full_and_keeps_the_old_file(tmp_path: Path) -> None:
    """A real full disk: a 256 KiB tmpfs in a mount namespace of its own (skipped where the
    system does not allow one)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        pytest.skip("needs Linux's unshare to mount a small file system")
    folder = tmp_path / "tiny"
    folder.mkdir()
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                            f"mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(folder))}"],
                           capture_output=True, timeout=60, check=False)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({probe.stderr.decode().strip()[:200]})")
    script = tmp_path / "in-tiny.sh"
    script.write_text(f'mount -t tmpfs -o size=256k tmpfs {shlex.quote(str(folder))} && '
                      f'exec "$@"\n')
    lines = _full_writes(folder, ["unshare", "--user", "--map-root-user", "--mount", "sh",
                                  str(script)], 0)
    for needed, free in _two_numbers(lines, (
            r"the disk is full \(ENOSPC: No space left on device\): the file needs at least "
            r"([0-9,]+) bytes, and ([0-9,]+) were free there\. Free some space or choose another "
            r"folder\. Nothing was written\.")):
        assert needed > free
