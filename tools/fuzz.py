"""Fuzz rnnport's file readers with mutated and truncated golden files.

Every reader of a file that may come from anywhere (TF1 TensorBundle checkpoints, Keras
``.keras`` / ``.weights.h5`` files, ONNX, rnnport's ``.npz``, PyTorch ``.pt`` and
``.safetensors``) must, for any bytes, either return a model that runs or raise an
``rnnport`` error. Anything else fails the run: another exception type, a crash of the
process, a read that does not finish within ``--timeout`` seconds, or one that needs more
than ``--memory`` MiB beyond what the process held before it.

    python tools/fuzz.py                         # 60 s over every format, random seed
    python tools/fuzz.py --cases 3000 --seed 1   # a fixed set of cases
    python tools/fuzz.py --only tf1 --seconds 600 --jobs 2 --keep fuzz-failures
    python tools/fuzz.py --seed 1 --case 1234    # rerun one case in this process, verbosely

Seeds: the TF1 golden checkpoints as TensorFlow wrote them, the TF2 checkpoints, SavedModels
and frozen graphs in ``tests/golden/tf2``, the files in ``tests/golden/files`` (legacy Keras
HDF5 saved by tf_keras, ``torch.save`` and safetensors files), the ``.tflite`` files
TensorFlow's converter wrote in ``tests/golden/tflite``, the Flax ``.msgpack`` checkpoints
in ``tests/golden/jax``, and golden Keras and PyTorch cases saved by rnnport in every file
form a registered format writes (each file name ending it declares; names that give the same
bytes, such as .pth beside .pt, make one seed). Case ``k`` mutates seed ``k mod n`` with a
generator seeded by ``(seed, k)``, so ``--seed`` and the case number reproduce any input.
Mutations: bit flips, random and boundary-value bytes and integers, truncation, deleted,
repeated and spliced ranges, and format-aware ones that keep the container's checksums right
so the damage reaches the parser underneath (zip members rewritten with fresh CRC-32s, JSON
values replaced, checkpoint index blocks re-checksummed), and a FlatBuffer's aligned words
(offsets, vector lengths) rewritten to point out of range, at themselves or elsewhere.

Cases run in worker processes with a data-size limit (``RLIMIT_DATA``) and a per-case
alarm; the parent notices a worker that dies or stops answering, reports the case and
starts a new worker after it. Exit status 0 when every case passed, 1 otherwise; with
``--keep DIR`` each failing input is saved there. ``--json FILE`` writes the summary.
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import json
import random
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"

# Golden cases (tests/golden/<name>.npz) saved in every file form that can hold them.
GOLDEN_CASES = ("keras_bi_lstm", "keras_stack_lstm_gru", "keras_gru_reset_before",
                "keras_simplernn_relu", "keras_lstm_float64", "torch_lstm_proj_bi_2layer",
                "torch_gru_bi_3layer", "torch_rnn_relu", "torch_lstm_nobias")


def file_forms() -> list[tuple[str, str]]:
    """(suffix, format) for every file name ending a registered format writes."""
    from rnnport import formats

    return [(suffix.text, name) for name in formats.formats()
            for suffix in formats.get(name).suffixes if suffix.writes]


def file_formats() -> list[str]:
    """The formats that read files: every one with a file form, and those that read the
    folders and prefixes TensorFlow 2 writes (the golden ones tell which)."""
    from rnnport import formats

    manifest = json.loads((GOLDEN / "tf2" / "MANIFEST.json").read_text())
    tensorflow = [formats.sniff(GOLDEN / "tf2" / case["source"]) for case in manifest["cases"]]
    return list(dict.fromkeys([*(name for _, name in file_forms()), *tensorflow]))

INTERESTING = (0, 1, 2, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF,
               0x80000000, 0xFFFFFFFF, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1)


@dataclass
class Seed:
    """One readable input: files in ``folder``, read as ``read(folder / entry, fmt, **options)``."""

    name: str
    fmt: str
    folder: Path
    entry: str
    options: dict[str, Any]

    def files(self) -> list[Path]:
        return sorted(path for path in self.folder.rglob("*") if path.is_file())

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "fmt": self.fmt, "folder": str(self.folder),
                "entry": self.entry, "options": self.options}


# -- seeds ------------------------------------------------------------------------------------


def make_seeds(folder: Path, only: set[str]) -> list[Seed]:
    """Write every seed under ``folder``; each seed gets a folder of its own."""
    import rnnport
    from rnnport import formats
    from rnnport.errors import UnsupportedFeatureError

    sys.path.insert(0, str(ROOT / "tests"))
    from golden_cases import Case

    seeds: list[Seed] = []
    for npz in sorted(GOLDEN.glob("*.npz")):  # checkpoints the framework itself saved
        meta = json.loads(str(np.load(npz, allow_pickle=False)["meta"]))
        if "checkpoint" not in meta or "read_options" not in meta:
            continue  # a case without a saved file, or one holding tensors, not a network
        prefix = GOLDEN / meta["checkpoint"]
        fmt = formats.sniff(prefix)
        if fmt in only:
            target = folder / npz.stem
            shutil.copytree(prefix.parent, target)
            seeds.append(Seed(npz.stem, fmt, target, prefix.name, meta["read_options"]))
    manifest = json.loads((GOLDEN / "tf2" / "MANIFEST.json").read_text())
    for case in manifest["cases"]:  # TensorFlow 2's containers, as TensorFlow wrote them
        source = GOLDEN / "tf2" / case["source"]
        fmt = formats.sniff(source)
        if fmt in only:
            target = folder / case["name"]
            shutil.copytree(GOLDEN / "tf2" / case["name"], target)
            seeds.append(Seed(case["name"], fmt, target,
                              str(source.relative_to(GOLDEN / "tf2" / case["name"])), {}))
    converted = sorted((GOLDEN / "tflite").glob("*.tflite"))  # TensorFlow's converter wrote them
    saved = sorted((GOLDEN / "jax").glob("*.msgpack"))  # flax.serialization wrote them
    for path in [*sorted((GOLDEN / "files").iterdir()), *converted, *saved]:  # the frameworks' own
        fmt = formats.sniff(path)
        if fmt in only:
            target = folder / f"framework_{path.name.replace('.', '_')}"
            target.mkdir()
            shutil.copyfile(path, target / path.name)
            seeds.append(Seed(target.name, fmt, target, path.name, _quantized(path)))
    for name in GOLDEN_CASES:
        with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
            arrays = dict(data)
        case = Case(name, json.loads(str(arrays["meta"])), arrays)
        model = case.read()
        spec = (model.parts[0] if isinstance(model, rnnport.Stack) else model).spec
        written: set[tuple[str, tuple[bytes, ...]]] = set()  # one seed per format and content
        for suffix, fmt in file_forms():
            if fmt not in only:
                continue
            target = folder / f"{name}_{fmt}{suffix.replace('.', '_')}"
            target.mkdir()
            declared = formats.get(fmt)
            try:
                rnnport.write(model, fmt, path=target / f"model{suffix}",
                              **declared.write_options_for(spec))
            except UnsupportedFeatureError:
                shutil.rmtree(target)
                continue
            content = (fmt, tuple(sorted(path.read_bytes() for path in target.iterdir())))
            if content in written:  # another name for the same file (.pth beside .pt)
                shutil.rmtree(target)
                continue
            written.add(content)
            options = declared.read_options_for(spec)
            seeds.append(Seed(target.name, fmt, target, f"model{suffix}", options))
    readable = []
    for seed in seeds:  # a seed that does not read as it is would test less
        try:
            rnnport.read(seed.folder / seed.entry, seed.fmt, **seed.options)
        except rnnport.AmbiguousSourceError:
            continue  # a weights file of mixed layers needs layer=[…] in the model's order
        readable.append(seed)
    return readable


def _quantized(path: Path) -> dict[str, Any]:
    """The options a converted golden file with integer weights is read with (its .npz
    beside it says whether the converter quantized it)."""
    meta = path.with_suffix(".npz")
    if path.suffix != ".tflite" or not meta.exists():
        return {}
    with np.load(meta, allow_pickle=False) as data:
        return {"dequantize": True} if json.loads(str(data["meta"])).get("quantized") in \
            ("dynamic", "int8") else {}


# -- mutations --------------------------------------------------------------------------------


def _bitflip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        position = rng.randrange(len(out))
        out[position] ^= 1 << rng.randrange(8)
    return bytes(out)


def _bytes(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        out[rng.randrange(len(out))] = rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))
    return bytes(out)


def _integer(rng: random.Random, data: bytes) -> bytes:
    width = rng.choice((1, 2, 4, 8))
    value = rng.choice((*INTERESTING, len(data), len(data) + 1, rng.randrange(len(data) + 1)))
    if rng.random() < 0.3:
        value = -value
    raw = (value % (1 << 8 * width)).to_bytes(width, rng.choice(("little", "big")))
    position = rng.randrange(max(1, len(data) - width + 1))
    return data[:position] + raw + data[position + width:]


def _truncate(rng: random.Random, data: bytes) -> bytes:
    if rng.random() < 0.5:
        return data[:rng.randrange(len(data))]
    return data[:max(0, len(data) - rng.randint(1, 64))]


def _range(rng: random.Random, data: bytes) -> tuple[int, int]:
    start = rng.randrange(len(data))
    return start, min(len(data), start + rng.choice((1, 4, 16, 64, 256, 4096)))


def _delete(rng: random.Random, data: bytes) -> bytes:
    start, end = _range(rng, data)
    return data[:start] + data[end:]


def _repeat(rng: random.Random, data: bytes) -> bytes:
    start, end = _range(rng, data)
    return data[:end] + data[start:end] * rng.randint(1, 4) + data[end:]


def _zero(rng: random.Random, data: bytes) -> bytes:
    start, end = _range(rng, data)
    return data[:start] + bytes(end - start) + data[end:]


BYTE_MUTATIONS: tuple[Callable[[random.Random, bytes], bytes], ...] = (
    _bitflip, _bytes, _integer, _truncate, _delete, _repeat, _zero)


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
    return rng.choice(BYTE_MUTATIONS)(rng, data)


def _splice(rng: random.Random, data: bytes, other: bytes) -> bytes:
    if not data or not other:
        return data + other
    start, end = _range(rng, data)
    begin = rng.randrange(len(other))
    return data[:start] + other[begin:begin + (end - start)] + data[end:]


WEIRD_JSON: tuple[Any, ...] = (None, True, -1, 0, 2**31, 2**63, 10**30, 1e308, -0.5, "",
                               "x" * 40, [], {}, [None], {"class_name": None}, "float16",
                               [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]], "NESTED")


def _json_nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _json_nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _json_nodes(item, (*path, index))


def mutate_json(rng: random.Random, data: bytes) -> bytes | None:
    """Replace one value of a JSON document (or drop a key), keeping it valid JSON."""
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    nodes = list(_json_nodes(document))[1:]
    if not nodes:
        return None
    path = rng.choice(nodes)
    parent = document
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and rng.random() < 0.25:
        del parent[path[-1]]
    else:
        parent[path[-1]] = rng.choice(WEIRD_JSON)
    encoded = json.dumps(document)
    if '"NESTED"' in encoded:  # deeper than Python's recursion limit, built as text
        encoded = encoded.replace('"NESTED"', "[" * 5000 + "]" * 5000, 1)
    return encoded.encode()


def mutate_zip(rng: random.Random, data: bytes) -> bytes | None:
    """Mutate one member of a zip archive and rebuild it with correct CRC-32s."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = [(info, archive.read(info)) for info in archive.infolist()]
    except Exception:  # a zip that zipfile itself cannot list: no structured mutation
        return None
    if not members:
        return None
    chosen = rng.randrange(len(members))
    action = rng.random()
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for number, (info, content) in enumerate(members):
            name = info.filename
            if number == chosen:
                if action < 0.08:
                    continue  # a missing member
                if action < 0.16:
                    name = rng.choice(("../" + name, "/" + name, name + "/", name.upper(),
                                       "a/../../" + name))
                elif name.endswith(".json") and action < 0.6:
                    content = mutate_json(rng, content) or mutate_bytes(rng, content)
                else:
                    content = mutate_bytes(rng, content)
            entry = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = info.compress_type
            archive.writestr(entry, content)
        if action > 0.95:
            archive.writestr(zipfile.ZipInfo(members[chosen][0].filename + ".extra"), b"x")
    return out.getvalue()


def mutate_index(rng: random.Random, data: bytes) -> bytes | None:
    """Mutate inside one block of a checkpoint index and fix the block's CRC-32C."""
    from rnnport.io import _proto
    from rnnport.io.crc32c import crc32c, mask

    if len(data) < 48:
        return None
    try:
        footer = data[-48:]
        _, position = _proto.read_varint(footer, 0)
        _, position = _proto.read_varint(footer, position)
        index_offset, position = _proto.read_varint(footer, position)
        index_size, _ = _proto.read_varint(footer, position)
    except _proto.ProtoError:
        return None
    blocks = [(index_offset, index_size)]
    block = data[index_offset:index_offset + index_size]
    restarts = int.from_bytes(block[-4:], "little") if len(block) >= 4 else 0
    position, end = 0, len(block) - 4 - 4 * restarts
    try:  # the data blocks' handles, from the index block's entries
        while 0 <= position < end:
            _, position = _proto.read_varint(block, position)
            own, position = _proto.read_varint(block, position)
            size, position = _proto.read_varint(block, position)
            offset, after = _proto.read_varint(block, position + own)
            length, _ = _proto.read_varint(block, after)
            blocks.append((offset, length))
            position += own + size
    except _proto.ProtoError:
        pass
    offset, size = rng.choice(blocks)
    if size == 0 or offset + size + 5 > len(data):
        return None
    content = mutate_bytes(rng, data[offset:offset + size])
    trailer = b"\0" + mask(crc32c(content + b"\0")).to_bytes(4, "little")
    return data[:offset] + content + trailer + data[offset + size + 5:]


def mutate_flatbuffer(rng: random.Random, data: bytes) -> bytes | None:
    """Rewrite one aligned 32-bit word of a FlatBuffer (an offset, a vector's length or a
    vtable entry, most likely): out of range, pointing back at itself or at another word,
    a huge length, or zero."""
    words = len(data) // 4
    if words < 3:
        return None
    position = 4 * rng.randrange(words)
    value = rng.choice((len(data), len(data) + 4, 2**31 - 1, 2**31, 2**32 - 4, 0, 4,
                        -position, 4 * rng.randrange(words) - position, 2**28))
    return data[:position] + (value % 2**32).to_bytes(4, "little") + data[position + 4:]


def mutate(rng: random.Random, seed: Seed, all_seeds: list[Seed], folder: Path) -> str:
    """Copy ``seed`` into ``folder`` with one file mutated; returns what was done."""
    files = seed.files()
    target = rng.choice(files)
    data = target.read_bytes()
    kind = rng.random()
    mutated: bytes | None = None
    how = "bytes"
    if kind < 0.4 and data[:2] == b"PK":
        mutated, how = mutate_zip(rng, data), "zip member"
    elif kind < 0.4 and target.suffix == ".index":
        mutated, how = mutate_index(rng, data), "index block"
    elif kind < 0.4 and data[4:8] == b"TFL3":
        mutated, how = mutate_flatbuffer(rng, data), "flatbuffer word"
    elif kind < 0.5:
        others = [path for other in all_seeds if other.fmt == seed.fmt and other is not seed
                  for path in other.files() if path.suffix == target.suffix]
        if others:
            mutated, how = _splice(rng, data, rng.choice(others).read_bytes()), "splice"
    if mutated is None:
        mutated, how = mutate_bytes(rng, data), "bytes"
    for path in files:
        if path == target:
            (folder / path.name).write_bytes(mutated)
        else:
            shutil.copyfile(path, folder / path.name)
    return f"{how} of {target.name}"


# -- one case ---------------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that ``except Exception`` cannot swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _mentions_memory(error: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def run_case(seeds: list[Seed], seed_value: int, case: int, scratch: Path,
             timeout: float, verbose: bool = False) -> dict[str, Any]:
    """Mutate, read, run; the outcome is ``model``, ``error`` or ``FAIL``."""
    import rnnport

    rng = random.Random(f"{seed_value}:{case}")
    seed = seeds[case % len(seeds)]
    folder = scratch / f"case-{case}"
    folder.mkdir()
    result: dict[str, Any] = {"case": case, "seed": seed.name, "fmt": seed.fmt}
    try:
        result["mutation"] = mutate(rng, seed, seeds, folder)
        if verbose:
            print(f"case {case}: {seed.name}, {result['mutation']}", file=sys.stderr, flush=True)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        # Native code the alarm cannot interrupt: show where it is stuck, then exit.
        faulthandler.dump_traceback_later(2 * timeout, exit=True)
        try:
            model = rnnport.read(folder / seed.entry, seed.fmt, **seed.options)
            first = model.parts[0] if isinstance(model, rnnport.Stack) else model
            x = np.linspace(-1, 1, 2 * 3 * first.spec.input_size).reshape(2, 3, -1)
            model.forward(x.astype(first.dtype))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            faulthandler.cancel_dump_traceback_later()
        result["outcome"] = "model"
    except Hang:
        result.update(outcome="FAIL", detail=f"no answer within {timeout:g} s")
    except rnnport.RnnportError as error:
        if _mentions_memory(error):
            result.update(outcome="FAIL", detail=f"a MemoryError became {error!r}")
        else:
            result.update(outcome="error", error=type(error).__name__)
            if verbose:
                result["detail"] = str(error)
    except Exception as error:
        result.update(outcome="FAIL", detail=f"{type(error).__name__}: {error}"[:500],
                      traceback=traceback.format_exc(limit=12))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return result


# -- worker and parent ------------------------------------------------------------------------


def worker(job: dict[str, Any]) -> None:
    """Run cases ``start, start + step, ...`` and print one JSON line before and after each."""
    import importlib

    from rnnport import formats

    seeds = [Seed(**{**s, "folder": Path(s["folder"])}) for s in job["seeds"]]
    for fmt in {seed.fmt for seed in seeds}:  # every reader's framework, before the limit
        for module in formats.get(fmt).modules:
            importlib.import_module(module)
    from rnnport.io._hdf5_child import data_size  # imports h5py, as the worker does anyway

    limit = data_size() + job["memory"] * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.getrlimit(resource.RLIMIT_DATA)[1]))
    signal.signal(signal.SIGALRM, _alarm)
    # NumPy's warnings on weights a mutation made infinite, torch's on odd pickle protocols.
    warnings.simplefilter("ignore")
    scratch = Path(tempfile.mkdtemp(prefix="rnnport-fuzz-"))
    try:
        case = job["start"]
        while case < job["stop"] and time.time() < job["deadline"]:
            print(json.dumps({"start": case}), flush=True)
            print(json.dumps(run_case(seeds, job["seed"], case, scratch, job["timeout"])),
                  flush=True)
            case += job["step"]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_worker(job: dict[str, Any], results: list[dict[str, Any]], grace: float) -> int | None:
    """Run one worker until it finishes; returns the case it died on (or None)."""
    process = subprocess.Popen([sys.executable, __file__, "--worker", json.dumps(job)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    current = None
    try:
        while True:
            ready, _, _ = select.select([process.stdout], [], [], job["timeout"] + grace)
            if not ready:
                process.kill()
                process.wait()
                if current is None:
                    raise SystemExit("fuzz: a worker started no case; is the environment set up?")
                results.append({"case": current, "outcome": "FAIL",
                                "detail": "the worker stopped answering (a hang in native code)"})
                return current
            line = process.stdout.readline()
            if not line:
                break
            message = json.loads(line)
            if "start" in message:
                current = message["start"]
            else:
                results.append(message)
                current = None
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    if current is not None:
        results.append({"case": current, "outcome": "FAIL",
                        "detail": f"the worker died (exit status {process.returncode})"})
        return current
    if process.returncode:
        raise SystemExit(f"fuzz: a worker failed outside any case (exit {process.returncode})")
    return None


def parent(args: argparse.Namespace, seeds: list[Seed]) -> list[dict[str, Any]]:
    deadline = time.time() + args.seconds if args.cases is None else float("inf")
    stop = args.cases if args.cases is not None else 2**62
    jobs = [{"seeds": [seed.to_json() for seed in seeds], "seed": args.seed, "start": j,
             "stop": stop, "step": args.jobs, "deadline": deadline, "timeout": args.timeout,
             "memory": args.memory} for j in range(args.jobs)]
    results: list[dict[str, Any]] = []

    def drive(job: dict[str, Any]) -> None:
        while True:  # after a crash or hang, a fresh worker goes on with the next case
            died = _run_worker(job, results, grace=30.0)
            if died is None:
                return
            job = {**job, "start": died + job["step"]}

    threads = [threading.Thread(target=drive, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results, key=lambda r: r["case"])


def summary(results: list[dict[str, Any]], seeds: list[Seed]) -> dict[str, Any]:
    by_format: dict[str, Counter[str]] = {}
    for result in results:
        fmt = result.get("fmt") or seeds[result["case"] % len(seeds)].fmt
        outcome = result["outcome"]
        if outcome == "error":
            outcome = f"error:{result['error']}"
        by_format.setdefault(fmt, Counter())[outcome] += 1
    failures = [r for r in results if r["outcome"] == "FAIL"]
    return {"cases": len(results), "failures": failures,
            "formats": {fmt: dict(sorted(counts.items())) for fmt, counts in by_format.items()}}


def keep(failures: list[dict[str, Any]], seeds: list[Seed], seed_value: int, folder: Path) -> None:
    """Save each failing input again (mutations are deterministic) under ``folder``."""
    for failure in failures:
        case = failure["case"]
        target = folder / f"seed{seed_value}-case{case}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        mutate(random.Random(f"{seed_value}:{case}"), seeds[case % len(seeds)], seeds, target)
        (target / "FAILURE.json").write_text(json.dumps(failure, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Fuzz rnnport's file readers with mutated golden files.",
        epilog="Exit status 0: every case returned a model or raised an rnnport error.")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="run this long (default 60; ignored with --cases)")
    parser.add_argument("--cases", type=int, help="run exactly this many cases")
    parser.add_argument("--seed", type=int, help="mutation seed (default: random, printed)")
    parser.add_argument("--case", type=int, action="append",
                        help="rerun this case in this process and print what happened")
    parser.add_argument("--only", action="append", choices=file_formats(),
                        help="fuzz only this format's reader (repeatable)")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--timeout", type=float, default=40.0,
                        help="seconds one read may take (default 40; the HDF5 reader itself "
                        "gives up after 20)")
    parser.add_argument("--memory", type=int, default=512,
                        help="MiB one worker may allocate beyond its imports (default 512)")
    parser.add_argument("--keep", type=Path, help="save failing inputs in this folder")
    parser.add_argument("--json", type=Path, help="write the summary here as JSON")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(json.loads(args.worker))
        return 0
    if args.seed is None:
        args.seed = random.randrange(2**31)
    only = set(args.only or file_formats())
    with tempfile.TemporaryDirectory(prefix="rnnport-fuzz-seeds-") as folder:
        seeds = make_seeds(Path(folder), only)
        if args.case:
            signal.signal(signal.SIGALRM, _alarm)
            for case in args.case:
                print(json.dumps(run_case(seeds, args.seed, case, Path(folder), args.timeout,
                                          verbose=True), indent=2))
            return 0
        started = time.time()
        results = parent(args, seeds)
        report = summary(results, seeds)
        report.update(seed=args.seed, seconds=round(time.time() - started, 1),
                      seeds=[seed.name for seed in seeds])
        if args.keep and report["failures"]:
            keep(report["failures"], seeds, args.seed, args.keep)
    print(f"fuzz: seed {args.seed}, {report['cases']} cases over {len(seeds)} seed inputs "
          f"in {report['seconds']} s")
    for fmt, counts in sorted(report["formats"].items()):
        print(f"  {fmt:6} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    for failure in report["failures"]:
        print(f"FAIL case {failure['case']} ({failure.get('seed', '?')}, "
              f"{failure.get('mutation', '?')}): {failure['detail']}")
        print(f"  rerun: python tools/fuzz.py --seed {args.seed} --case {failure['case']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
