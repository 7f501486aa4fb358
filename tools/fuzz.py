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
    python tools/fuzz.py --structure 1 --cases 2000 --jobs 2   # structure-aware cases alone

Seeds: the TF1 golden checkpoints as TensorFlow wrote them, the TF2 checkpoints, SavedModels
and frozen graphs in ``tests/golden/tf2``, the Keras 3 exports in ``tests/golden/keras3``,
the files in ``tests/golden/files`` (legacy Keras
HDF5 saved by tf_keras, ``torch.save`` and safetensors files), the Keras 1 HDF5 files in
``tests/golden/keras1`` and ``tests/golden/keras1_real``, the ``.tflite`` files
TensorFlow's converter wrote in ``tests/golden/tflite``, the Flax ``.msgpack`` checkpoints
in ``tests/golden/jax``, the ``.onnx`` files PyTorch's exporters and ONNX Runtime's quantizer
wrote in ``tests/golden/onnx``, the ncnn ``.param`` files (with their ``.bin``) pnnx wrote in
``tests/golden/ncnn``, the OpenVINO IRs (``.xml`` with its ``.bin``) ``openvino.save_model``
wrote in ``tests/golden/openvino``, the ``.pdparams`` files and inference models (a program with its
``.pdiparams``) PaddlePaddle saved in ``tests/golden/paddle``, the TensorFlow.js layers models
(``model.json`` and its shards) TensorFlow.js's converter wrote in ``tests/golden/tfjs``, the
Core ML ``.mlmodel`` files and ``.mlpackage`` folders coremltools wrote in
``tests/golden/coreml``, and
golden Keras and PyTorch cases saved by rnnport in every file form a registered format writes
(each file name ending it declares; names that give the same bytes, such as .pth beside .pt,
make one seed). Case ``k`` mutates seed ``k mod n`` with a generator seeded by ``(seed, k)``,
so ``--seed`` and the case number reproduce any input.
Mutations: bit flips, random and boundary-value bytes and integers, truncation, deleted,
repeated and spliced ranges, and format-aware ones that keep the container's checksums right
so the damage reaches the parser underneath (zip members rewritten with fresh CRC-32s, JSON
values replaced, checkpoint index blocks re-checksummed), and a FlatBuffer's aligned words
(offsets, vector lengths) rewritten to point out of range, at themselves or elsewhere.

Structure-aware mutations (``--structure SHARE`` of the cases, 0.2 by default, drawn apart
from each case's own generator) rebuild a container whole around one hostile part: a zip
member re-compressed with bzip2 or LZMA, a bzip2 bomb of it inflating to 64 MiB … 3 GB, or
sizes and CRCs that lie; a ``torch.save`` state_dict whose value is one list repeated at
every level, a list holding itself or one tensor listed 100,000 times; a checkpoint index
with 2⁶² or 71 dimensions, its data block listed 50,000 times, every entry over the same
bytes or 5,000 more layers; msgpack counts far past the bytes, maps nested 200,000 deep;
ONNX dimensions huge or negative, Identity chains 3,000 deep, 400 nodes over one tensor, a
million activations, a local function calling itself, 2,000 products by one matrix, a cell
stepped in 1,000 loops; frozen graphs with a million empty strings, messages split in
pieces at every level of a deep nesting, Consts of 4096² filled from one float, 2,000 cells
with their steps; FlatBuffer vector lengths made huge or one vector shared by every offset;
safetensors offsets shared and shapes huge; a ``checkpoint`` state file naming a checkpoint
longer than a file name or a path may be, under hundreds of folders, by escaped bytes, or
listed 200,000 times (TensorFlow 2 checkpoints are seeds twice: read by their prefix, and
by their folder, through that file); zip members said to lie where another does, or
``.npz`` members each holding the ones after it; a million to twenty million empty msgpack
maps, or keys of digits ``int`` reads otherwise (``layers_٣``, ``²``) or that read as one
string; a thousand TFLite tensors sharing one quantization table of 8 million scales, or a
loop body thousands of operations deep; TF2 object graphs that are one chain of 60,000
objects, that name one layer's tensors for 2,000 layers, or that number layers with other
digits; ML Program consts turned into strings, empty or two-item integer tensors, NaN or
infinite floats, or one-item masks; JSON values NaN, ``1e999``, 60 digits long or holding a
key twice. The builders are those of ``tests/hostile_cases.py`` and ``tests/tflite_edits.py``.

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
import re
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
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
sys.path.insert(0, str(ROOT / "tests"))  # golden_cases, and hostile_cases' zip and index builders

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

# Keras 3 SavedModels of tests/golden/keras3 made seeds: a loop, a bidirectional stack, cuDNN
# ops and tf.saved_model.save's objects (each read takes a graph analysis: a few, not all).
KERAS3_SEEDS = ("keras3_lstm", "keras3_stack_bidirectional", "keras3_cudnn", "keras3_saved_model")


def make_seeds(folder: Path, only: set[str]) -> list[Seed]:
    """Write every seed under ``folder``; each seed gets a folder of its own."""
    from golden_cases import Case

    import rnnport
    from rnnport import formats
    from rnnport.errors import UnsupportedFeatureError

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
            if (target / "checkpoint").is_file():  # its folder, read through its state file
                seeds.append(Seed(f"{case['name']}_folder", fmt, target, ".", {}))
    exported = json.loads((GOLDEN / "keras3" / "MANIFEST.json").read_text())
    for name in KERAS3_SEEDS:  # Keras 3's model.export and tf.saved_model.save wrote them
        readable = [stack[0] for stack in exported["cases"][name]["stacks"]]
        fmt = formats.sniff(GOLDEN / "keras3" / name)
        if fmt in only and readable:
            target = folder / name
            shutil.copytree(GOLDEN / "keras3" / name, target)
            seeds.append(Seed(name, fmt, target, ".", {"layer": readable[0]}))
    converted = sorted((GOLDEN / "tflite").glob("*.tflite"))  # TensorFlow's converter wrote them
    saved = sorted((GOLDEN / "jax").glob("*.msgpack"))  # flax.serialization wrote them
    exported = sorted((GOLDEN / "onnx").glob("*.onnx"))  # PyTorch's exporters, ORT's quantizer
    trained = sorted(path for path in (GOLDEN / "torch_files").glob("*/*") if path.is_file())
    pickled = sorted((GOLDEN / "paddle").glob("*/model.pdparams"))  # paddle.save wrote them
    keras1 = sorted((GOLDEN / "keras1").glob("*.h5"))  # Keras 1.2's layout, h5py wrote them
    keras1 += sorted((GOLDEN / "keras1_real").glob("*.h5"))  # Keras 1.2.2 wrote them
    built = sorted((GOLDEN / "coreml").glob("*.mlmodel"))  # coremltools wrote them
    for path in [*sorted((GOLDEN / "files").iterdir()), *converted, *saved, *exported,
                 *trained, *pickled, *keras1, *built]:
        fmt = formats.sniff(path)
        if fmt in only:
            target = folder / f"framework_{path.parent.name}_{path.name.replace('.', '_')}"
            target.mkdir()
            shutil.copyfile(path, target / path.name)
            seeds.append(Seed(target.name, fmt, target, path.name, _quantized(path)))
    pairs = [(param, param.with_suffix(".bin"))  # pnnx wrote them
             for param in sorted((GOLDEN / "ncnn").glob("*.ncnn.param"))]
    pairs += [(xml, xml.with_suffix(".bin"))  # openvino.save_model wrote them
              for xml in sorted((GOLDEN / "openvino").glob("*.xml"))]
    for path, beside in pairs:  # a file read with the one beside it
        fmt = formats.sniff(path)
        if fmt in only:
            target = folder / f"framework_{path.parent.name}_{path.name.replace('.', '_')}"
            target.mkdir()
            shutil.copyfile(path, target / path.name)
            shutil.copyfile(beside, target / beside.name)
            seeds.append(Seed(target.name, fmt, target, path.name, {}))
    for program in sorted((GOLDEN / "paddle").glob("*/inference.*")):  # a program, its params
        fmt = formats.sniff(program)
        if program.suffix in (".json", ".pdmodel") and fmt in only:
            target = folder / f"framework_paddle_{program.parent.name}"
            shutil.copytree(program.parent, target)
            seeds.append(Seed(target.name, fmt, target, program.name, {}))
    for path in sorted((GOLDEN / "tfjs").glob("*/model.json")):  # TensorFlow.js's converter
        fmt = formats.sniff(path)
        if fmt in only:
            target = folder / f"framework_tfjs_{path.parent.name}"
            shutil.copytree(path.parent, target)
            seeds.append(Seed(target.name, fmt, target, path.name, {}))
    for path in sorted((GOLDEN / "coreml").glob("*.mlpackage")):  # coremltools' packages
        if "coreml" in only:
            target = folder / f"framework_coreml_{path.stem}"
            shutil.copytree(path, target / path.name)
            seeds.append(Seed(target.name, "coreml", target, path.name, {}))
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
            content = (fmt, tuple(sorted(path.read_bytes() for path in target.rglob("*")
                                         if path.is_file())))
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
        except rnnport.UnsupportedFeatureError:
            continue  # a golden file kept to be refused (a go_backwards TFLite loop alone,
            # a projected LSTM's malformed export)
        readable.append(seed)
    return readable


def _quantized(path: Path) -> dict[str, Any]:
    """The options a converted golden file with integer weights is read with (its .npz
    beside it says whether the converter quantized it, or names the options)."""
    meta = path.with_suffix(".npz")
    if path.suffix not in (".tflite", ".onnx") or not meta.exists():
        return {}
    with np.load(meta, allow_pickle=False) as data:
        facts = json.loads(str(data["meta"]))
    if path.suffix == ".onnx":
        return dict(facts.get("read_options", {}))
    return {"dequantize": True} if facts.get("quantized") in ("dynamic", "int8") else {}


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


WEIRD_JSON: tuple[Any, ...] = (None, True, -1, 0, 2**31, 2**63, 10**30, 10**60, 1e308, -0.5,
                               float("nan"), float("-inf"), "", "x" * 40, [], {}, [None],
                               {"class_name": None}, "float16", "layers_٣", "²",
                               [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]], "NESTED", "TWICE", "HUGE")


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
    encoded = encoded.replace('"TWICE"', '{"name": "a", "name": "b"}', 1)  # a key twice
    encoded = encoded.replace('"HUGE"', "1e999", 1)  # past a float: json.loads reads inf
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


# -- structure-aware mutations ----------------------------------------------------------------
# Each reads the container it knows and rewrites it whole, so that the checksums, offsets
# and framing stay right and the hostile part reaches the check that should refuse it: a
# count or a size far past what the file holds, one object referenced from everywhere, a
# chain deeper than any exporter writes. None when the file is not that container.

HUGE = (2**31 - 1, 2**31, 2**32 - 1, 2**40, 2**62, 2**63 - 1)


def mutate_archive(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A zip member re-compressed with bzip2 or LZMA (its own content, or a bomb of it and
    zeros inflating to 64 MiB … 3 GB), declaring sizes or a CRC that lie, or said by the
    central directory to lie where the first member does; or, for an ``.npz``, members each
    holding the ones after it (their bytes read over and over: up to 3.6 GB from 1.8 MB)."""
    from hostile_cases import (
        BZIP2,
        DEFLATED,
        LZMA,
        STORED,
        Member,
        bzip2_bomb,
        compressed,
        overlapping_npz,
        zip_archive,
        zip_members,
    )

    try:
        members = zip_members(data)
    except Exception:  # not a zip that zipfile reads: no structured mutation
        return None
    if not members:
        return None
    chosen = rng.randrange(len(members))
    action = rng.choice(("codec", "bomb", "size", "compressed size", "crc", "overlap"))
    if action == "overlap" and all(name.endswith(".npy") for name, _ in members):
        count, size = rng.choice(((40, 1 << 16), (2200, 1_400_000)))
        return overlapping_npz(count, size), "zip member overlap"
    if action == "overlap":  # a member other than the first, said to lie where the first does
        if len(members) == 1:
            members.append((f"{members[0][0]}.again", members[0][1]))
        chosen = max(chosen, 1)
    out = []
    for number, (name, content) in enumerate(members):
        member = Member(name, compressed(content, DEFLATED), DEFLATED, len(content),
                        zlib.crc32(content))
        if number == chosen:
            if action == "codec":
                method = rng.choice((BZIP2, LZMA))
                member = Member(name, compressed(content, method), method, len(content),
                                zlib.crc32(content))
            elif action == "bomb":
                raw, size, crc = bzip2_bomb(content, rng.choice((64 << 20, 1 << 30, 3 << 30)))
                member = Member(name, raw, BZIP2, size, crc)
            elif action == "size":  # stored or deflated, claiming another size
                method = rng.choice((STORED, DEFLATED))
                member = Member(name, compressed(content, method), method,
                                rng.choice((0, 1, len(content) // 2, len(content) + 1,
                                            len(content) * 1033, *HUGE)) % 2**32,
                                zlib.crc32(content))
            elif action == "compressed size":
                member.compressed = rng.choice((0, len(member.raw) // 2, len(member.raw) + 1,
                                                2**32 - 1))
            elif action == "overlap":
                member.at = 0
            else:
                member.crc = zlib.crc32(content) ^ (1 << rng.randrange(32))
        out.append(member)
    return zip_archive(out), f"zip member {action}"


def mutate_pickle(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A ``torch.save`` state_dict with one value replaced by lists that share references:
    one list repeated at every level (width^depth numbers from a few KB), a list holding
    itself, one tensor listed a hundred thousand times, or lists nested 150 deep."""
    if data[:2] != b"PK":
        return None
    try:
        import torch

        state = torch.load(io.BytesIO(data), weights_only=True)
    except Exception:
        return None
    if not isinstance(state, dict) or not state:
        return None
    key = rng.choice(sorted(state, key=str))
    action = rng.choice(("shared", "itself", "one tensor", "deep"))
    value: Any
    if action == "shared":
        width, depth = rng.choice(((100, 5), (1000, 6), (10, 12), (4, 40)))
        value = [0.5] * width
        for _ in range(depth - 1):
            value = [value] * width
    elif action == "itself":
        value = []
        value.append(value)
    elif action == "one tensor":
        value = [state[key]] * 100_000
    else:
        value = [1.0]
        for _ in range(150):  # torch.save's pickler recurses through Python per level
            value = [value]
    state[key] = value
    out = io.BytesIO()
    torch.save(state, out)
    return out.getvalue(), f"pickle {action}"


def mutate_bundle(rng: random.Random, index: Path) -> tuple[bytes, str] | None:
    """A checkpoint index rewritten from its entries: one entry with 2⁶² (or 71) dimensions,
    its data block listed 1,000 … 50,000 times, every entry over the same bytes, or 5,000
    more layers (or one numbered 10¹¹) pointing at one entry's bytes."""
    from hostile_cases import bundle_entry, bundle_index

    from rnnport.errors import RnnportError
    from rnnport.io import tensorbundle

    try:
        bundle = tensorbundle.Bundle(index.with_suffix(""))
        entries = {name: bundle[name] for name in bundle}
    except (RnnportError, OSError):
        return None
    if not entries or any(getattr(entry, "shard", 0) for entry in entries.values()):
        return None
    rows = {name: (tuple(e.shape), e.offset, e.size, e.crc, e.dtype_code)
            for name, e in entries.items()}
    name = rng.choice(sorted(rows))
    shape, offset, size, crc, code = rows[name]
    action = rng.choice(("dimensions", "listings", "overlap", "layers"))
    listings = 1
    if action == "dimensions":
        rows[name] = (rng.choice(((1 << 62,), (1 << 62, 0), (1 << 31, 1 << 31), (1,) * 71,
                                  (*shape, 1 << 40))), offset, size, crc, code)
    elif action == "listings":
        listings = rng.choice((1_000, 50_000))
    elif action == "overlap":
        rows = {other: (shape, offset, size, crc, code) for other in rows}
    else:
        match = re.search(r"cell_(\d+)", name)
        stem = name[:match.start()] if match else "rnn/multi_rnn_cell/"
        tail = name[match.end():] if match else "/basic_rnn_cell/" + name.rsplit("/", 1)[-1]
        held = [int(number) for key in rows for number in re.findall(r"cell_(\d+)", key)]
        after = max(held, default=-1) + 1
        numbers = [99_999_999_999] if rng.random() < 0.3 else range(after, after + 5000)
        for number in numbers:
            rows[f"{stem}cell_{number}{tail}"] = (shape, offset, size, crc, code)
    built = [(key, bundle_entry(row[0], row[1], row[2], row[3], row[4]))
             for key, row in rows.items()]
    return bundle_index(built, listings), f"index {action}"


def _msgpack_nodes(data: bytes) -> list[tuple[int, int, int, int]]:
    """(start, end, header, width) of each msgpack value: where it starts and ends, the
    length of its header, and the width of the header's count (0: fixed in the type byte)."""
    nodes: list[tuple[int, int, int, int]] = []
    pending: list[tuple[int, int]] = []  # (node index, children still to come)
    position = 0
    fixed = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8,
             0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
    while position < len(data) and len(nodes) < 100_000:
        byte = data[position]
        children, header, width, body = 0, 1, 0, 0
        if byte <= 0x7F or byte >= 0xE0:
            pass
        elif 0x80 <= byte <= 0x8F:
            children = 2 * (byte & 0x0F)
        elif 0x90 <= byte <= 0x9F:
            children = byte & 0x0F
        elif 0xA0 <= byte <= 0xBF:
            body = byte & 0x1F
        elif byte in fixed:
            body = fixed[byte]
        elif byte in (0xC4, 0xC5, 0xC6, 0xD9, 0xDA, 0xDB, 0xC7, 0xC8, 0xC9):
            width = {0xC4: 1, 0xD9: 1, 0xC7: 1, 0xC5: 2, 0xDA: 2, 0xC8: 2}.get(byte, 4)
            body = int.from_bytes(data[position + 1:position + 1 + width], "big")
            header = 1 + width + (1 if byte in (0xC7, 0xC8, 0xC9) else 0)
        elif byte in (0xDC, 0xDD, 0xDE, 0xDF):
            width = 2 if byte in (0xDC, 0xDE) else 4
            children = int.from_bytes(data[position + 1:position + 1 + width], "big")
            children *= 2 if byte in (0xDE, 0xDF) else 1
            header = 1 + width
        else:
            return nodes
        nodes.append((position, -1, header, width))
        position += header + body
        if children:
            pending.append((len(nodes) - 1, children))
            continue
        nodes[-1] = (*nodes[-1][:1], position, *nodes[-1][2:])
        while pending:  # close the containers this value completes
            index, left = pending.pop()
            if left > 1:
                pending.append((index, left - 1))
                break
            nodes[index] = (nodes[index][0], position, *nodes[index][2:])
    return [node for node in nodes if node[1] >= 0]


def mutate_msgpack(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A msgpack array's, map's, string's or binary's count set far past the bytes present,
    or one value replaced by maps (or arrays) nested 10,000 … 200,000 deep, by an array
    declaring 2³² − 1 elements, by 1 … 20 million empty maps, or by a map whose keys are
    digits Python's int reads differently (``layers_٣``, ``²``, 5,000 digits) or that read
    as one string (1 and "1")."""
    nodes = _msgpack_nodes(data)
    counted = [node for node in nodes if node[3]]
    actions = ("deep", "wide", "empty maps", "keys")
    action = rng.choice(("count", *actions)) if counted else rng.choice(actions)
    if not nodes:
        return None
    if action == "count":
        start, _, _, width = rng.choice(counted)
        value = rng.choice((2**(8 * width) - 1, 2**(8 * width - 1), len(data))) % 2**(8 * width)
        return data[:start + 1] + value.to_bytes(width, "big") + data[start + 1 + width:], \
            "msgpack count"
    start, end, _, _ = rng.choice(nodes[1:] or nodes)
    if action == "deep":
        depth = rng.choice((10_000, 200_000))
        nested = (b"\x81\xa1k" if rng.random() < 0.5 else b"\x91") * depth + b"\xc0"
    elif action == "empty maps":
        count = rng.choice((1_000_000, 20_000_000))
        nested = b"\xdd" + count.to_bytes(4, "big") + b"\x80" * count
    elif action == "keys":
        value = data[start:end]
        keys = rng.choice(((b"\xa9layers_\xd9\xa3", b"\xa8layers_3"), (b"\xa2\xc2\xb2",),
                           (b"\xda\x13\x88" + b"7" * 5000,), (b"\x01", b"\xa11")))
        nested = bytes([0x80 | len(keys)]) + b"".join(key + value for key in keys)
    else:
        nested = b"\xdd\xff\xff\xff\xff" + b"\xc0" * 16
    return data[:start] + nested + data[end:], f"msgpack {action}"


def mutate_onnx(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """An ONNX model with a tensor's dimensions made huge, negative or 71 of them, an
    Identity chain 150 … 3,000 deep in front of a recurrent node's weight, 400 nodes each
    computing from one stored tensor, a million activations, a local function that calls
    itself (directly or through another) called from the graph, 2,000 products by one
    matrix beside the network, every one meeting the next, or a cell stepped in 1,000
    loops of one step each beside it."""
    try:
        import onnx
        from hostile_cases import identity_chain, onnx_calling, onnx_cell_loops, onnx_products
        from onnx import helper

        model = onnx.load_from_string(data)
    except Exception:
        return None
    graph = model.graph
    recurrent = [node for node in graph.node if node.op_type in ("LSTM", "GRU", "RNN")]
    stored = list(graph.initializer)
    action = rng.choice(("dimensions", "chain", "fan", "activations", "recursion", "products",
                         "loops"))
    if action == "dimensions" and stored:
        tensor = rng.choice(stored)
        dims = rng.choice(([1 << 62], [1 << 31, 1 << 31], [-1, *tensor.dims[1:]], [1] * 71,
                           [*tensor.dims[:-1], -1], [0, 1 << 62]))
        del tensor.dims[:]
        tensor.dims.extend(dims)
    elif action in ("chain", "fan") and recurrent:
        node = rng.choice(recurrent)
        slot = rng.randrange(1, min(3, len(node.input)))
        source = node.input[slot]
        if action == "chain":
            depth = rng.choice((150, 3000))
            nodes = identity_chain(source, depth, prefix="fuzz_i")
            node.input[slot] = f"fuzz_i{depth - 1}"
        else:
            nodes = [helper.make_node("Add", [source, source], [f"fuzz_a{n}"]) for n in range(400)]
            nodes.append(helper.make_node("Max", [f"fuzz_a{n}" for n in range(400)], ["fuzz_m"]))
            node.input[slot] = "fuzz_m"
        position = list(graph.node).index(node)
        everything = [*graph.node[:position], *nodes, *graph.node[position:]]
        del graph.node[:]
        graph.node.extend(everything)
    elif action == "activations" and recurrent:
        node = rng.choice(recurrent)
        kept = [attribute for attribute in node.attribute if attribute.name != "activations"]
        del node.attribute[:]
        node.attribute.extend([*kept, helper.make_attribute("activations",
                                                            ["Sigmoid"] * 1_000_000)])
    elif action == "recursion" and graph.input:
        calling = onnx_calling(rng.choice((["fuzz_f"], ["fuzz_f", "fuzz_g"])), back=True)
        call = calling.graph.node[0]
        call.input[0], call.output[0] = graph.input[0].name, "fuzz_called"
        graph.node.append(call)
        model.functions.extend(calling.functions)
        model.opset_import.extend(op for op in calling.opset_import if op.domain == "local")
    elif action in ("products", "loops") and graph.input:
        beside = (onnx_products(2000) if action == "products" else onnx_cell_loops(1000)).graph
        renamed = {"x": graph.input[0].name}  # the products multiply the model's own input
        for node in beside.node:
            node.input[:] = [renamed.get(name, f"fuzz_{name}") for name in node.input]
            node.output[:] = [f"fuzz_{name}" for name in node.output]
        for tensor in [*beside.initializer, *beside.input]:
            tensor.name = f"fuzz_{tensor.name}"
        graph.node.extend(beside.node)
        graph.initializer.extend(beside.initializer)
        graph.input.extend(value for value in beside.input if value.name != "fuzz_x")
    else:
        return None
    return model.SerializeToString(), f"onnx {action}"


def mutate_graphdef(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    """A frozen graph (a GraphDef) with nodes added that a protobuf merges into it: one
    whose input list is 100,000 or a million empty strings, one whose attribute nests 30
    or 40 function references each given in two pieces over a 1 MiB string, 60 kernel
    Consts of shape 4096² each filled from one float, or 2,000 TF1 cells each with its
    cell's step."""
    from hostile_cases import (
        graphdef_cell_steps,
        graphdef_empty_strings,
        graphdef_filled_consts,
        graphdef_split_nesting,
    )

    action = rng.choice(("empty strings", "split nesting", "filled consts", "cell steps"))
    if action == "empty strings":
        added = graphdef_empty_strings(rng.choice((100_000, 1_000_000)))
    elif action == "split nesting":
        added = graphdef_split_nesting(rng.choice((30, 40)), 1 << 20)
    elif action == "filled consts":
        added = graphdef_filled_consts(60, 4096)
    else:
        added = graphdef_cell_steps(2000)
    return data + added, f"graphdef {action}"


def mutate_flatbuffer_vectors(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """In a FlatBuffer, a vector's (or string's) length found by following an offset made
    huge, or many offsets turned to point at one vector (every table sharing it)."""
    words = len(data) // 4
    targets: dict[int, list[int]] = {}  # what forward offsets point at → where they are
    for position in range(0, 4 * words, 4):
        value = int.from_bytes(data[position:position + 4], "little")
        target = position + value
        if 0 < value and target % 4 == 0 and target + 4 <= len(data):
            length = int.from_bytes(data[target:target + 4], "little")
            if 0 < length and target + 4 + length <= len(data):
                targets.setdefault(target, []).append(position)
    if not targets:
        return None
    out = bytearray(data)
    if rng.random() < 0.6:
        target = rng.choice(sorted(targets))
        out[target:target + 4] = rng.choice((2**31 - 1, 2**32 - 1, 2**28, len(data),
                                             len(data) // 4)).to_bytes(4, "little")
        return bytes(out), "flatbuffer vector length"
    largest = max(targets, key=lambda t: int.from_bytes(data[t:t + 4], "little"))
    for positions in targets.values():
        for position in positions:
            if position < largest and rng.random() < 0.5:
                out[position:position + 4] = (largest - position).to_bytes(4, "little")
    return bytes(out), "flatbuffer shared vector"


def mutate_safetensors(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A safetensors header whose tensors all point at the same bytes, claim shapes of 2⁶²
    elements, or whose length prefix is huge."""
    if len(data) < 8:
        return None
    length = int.from_bytes(data[:8], "little")
    try:
        header = json.loads(data[8:8 + length])
    except (ValueError, UnicodeDecodeError):
        return None
    tensors = [key for key, value in header.items() if isinstance(value, dict)
               and "data_offsets" in value]
    if not tensors:
        return None
    action = rng.choice(("shared", "shape", "length"))
    if action == "length":
        return rng.choice(HUGE).to_bytes(8, "little") + data[8:], "safetensors length"
    chosen = header[rng.choice(tensors)]
    for key in tensors:
        if action == "shared":
            header[key]["data_offsets"] = list(chosen["data_offsets"])
        elif rng.random() < 0.5:
            header[key]["shape"] = rng.choice(([1 << 62], [1 << 31, 1 << 31], [1] * 71))
    encoded = json.dumps(header).encode()
    return len(encoded).to_bytes(8, "little") + encoded + data[8 + length:], \
        f"safetensors {action}"


def mutate_state(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A ``checkpoint`` state file naming a checkpoint no file system holds, or in a way a
    reader must bound: names of 200 to 5,000 characters, hundreds of folders deep, escaped
    bytes, or one path listed 200,000 times."""
    found = re.search(rb'model_checkpoint_path: "([^"]*)"', data)
    if found is None:
        return None
    name = found[1]
    kind = rng.choice(["long", "deep", "escaped", "listed"])
    if kind == "long":
        length = rng.choice([200, 236, 240, 250, 255, 256, 300, 4095, 4096, 5000])
        name, how = (name * length)[:length] or b"m" * length, f"a name of {length}"
    elif kind == "deep":
        depth = rng.choice([100, 300, 2000])
        name, how = b"d/" * depth + name, f"{depth} folders deep"
    elif kind == "escaped":
        escape = rng.choice([b"\\000", b"\\377", b"\\303\\251", b"\\n", b"\\\""])
        name, how = name + escape * rng.choice([1, 100, 300]), f"escapes {escape.decode()}"
    else:
        line = b'all_model_checkpoint_paths: "' + name + b'"\n'
        return data + line * 200_000, "one path listed 200,000 times"
    return data[:found.start(1)] + name + data[found.end(1):], f"state file names {how}"


def mutate_tflite(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A ``.tflite`` whose thousand tensors point at one quantization table of up to 8
    million scales, or whose loop body passes a state through a chain of 240 … 5,000
    RESHAPEs (the evaluator's depth); else a FlatBuffer vector mutation."""
    from hostile_cases import tflite_shared_quantization
    from tflite_edits import deep_loop_body

    action = rng.random()
    if action < 0.2:
        scales = rng.choice((100_000, 8_000_000))
        return tflite_shared_quantization(1000, scales), "flatbuffer shared quantization"
    if action < 0.4:
        deep = deep_loop_body(data, rng.choice((240, 300, 5000)))
        if deep is not None:
            return deep, "flatbuffer deep loop body"
    return mutate_flatbuffer_vectors(rng, data)


def mutate_program(rng: random.Random, data: bytes) -> tuple[bytes, str] | None:
    """A Core ML ML Program whose const (in its main block or a block of a ``while_loop``)
    holds a value of another kind: a string, an empty or two-item integer tensor, a NaN or
    an infinite float, or a bool mask of one item."""
    try:
        from coremltools.proto import Model_pb2

        spec = Model_pb2.Model.FromString(data)
    except Exception:
        return None
    if not spec.HasField("mlProgram"):
        return None
    consts = []
    pending = [block for function in spec.mlProgram.functions.values()
               for block in function.block_specializations.values()]
    while pending:
        block = pending.pop()
        for op in block.operations:
            pending.extend(op.blocks)
            if op.type == "const" and "val" in op.attributes and \
                    op.attributes["val"].HasField("immediateValue"):
                consts.append(op.attributes["val"])
    if not consts:
        return None
    value = rng.choice(consts)
    action = rng.choice(("string", "empty", "pair", "nan", "inf", "mask"))
    tensor, declared = value.immediateValue.tensor, value.type.tensorType
    tensor.Clear()
    declared.ClearField("dimensions")
    sizes = {"empty": [0], "pair": [2], "mask": [1]}.get(action, [])
    for size in sizes:
        declared.dimensions.add().constant.size = size
    declared.rank = len(sizes)
    if action == "string":
        declared.dataType = 21  # MIL's codes: 21 string, 9 int32, 1 bool, 5 fp32
        tensor.strings.values.append("x")
    elif action in ("empty", "pair"):
        declared.dataType = 9
        tensor.ints.SetInParent()
        tensor.ints.values.extend([1, 0] if action == "pair" else [])
    elif action == "mask":
        declared.dataType = 1
        tensor.bools.values.append(True)
    else:
        declared.dataType = 5
        tensor.floats.values.append(float("nan") if action == "nan" else float("inf"))
    return spec.SerializeToString(), f"ML Program const {action}"


def mutate_object_graph(rng: random.Random, index: Path) -> tuple[bytes, str, dict[str, bytes]] | None:
    """A TF2 checkpoint (its index and data shard rewritten) whose object graph is one chain
    of 6,000 … 60,000 objects, names its recurrent kernel and bias for 300 … 2,000 layers,
    or numbers its layers with digits other than ASCII (``layer_with_weights-٠``)."""
    from hostile_cases import tf2_checkpoint

    from rnnport.errors import RnnportError
    from rnnport.formats.tf2.writer import _Node
    from rnnport.io import tensorbundle, tfproto

    try:
        bundle = tensorbundle.Bundle(index.with_suffix(""))
        if tfproto.OBJECT_GRAPH_KEY not in bundle or bundle.shards != 1:
            return None
        arrays = {name: bundle.read(name) for name in bundle if name != tfproto.OBJECT_GRAPH_KEY}
        graph = tfproto.read_object_graph(bundle)
    except (RnnportError, OSError):
        return None
    values = [(node_id, attribute.checkpoint_key) for node_id, node in enumerate(graph.nodes)
              for attribute in node.attributes if attribute.name == "VARIABLE_VALUE"
              and attribute.checkpoint_key in arrays]
    if not values:
        return None
    action = rng.choice(("chain", "shared", "digits"))
    if action == "chain":
        root = _Node(variable=("x", values[0][1]))
        for _ in range(rng.choice((6_000, 60_000))):
            root = _Node([("x", root)])
    elif action == "shared":
        keys = {key.split("/.ATTRIBUTES/")[0].rsplit("/", 1)[-1]: key for _, key in values}
        root = _Node([(f"layer_with_weights-{k}", _Node([("cell", _Node([
            (name, _Node(variable=(name, key))) for name, key in keys.items()]))]))
            for k in range(rng.choice((300, 2000)))])
    else:
        nodes = [_Node() for _ in graph.nodes]
        for node, decoded in zip(nodes, graph.nodes, strict=True):
            node.children = [(child.local_name.replace("-0", "-\u0660").replace("-1", "-\u0661"),
                              nodes[child.node_id]) for child in decoded.children
                             if 0 <= child.node_id < len(nodes)]
            node.variable = next(((a.full_name, a.checkpoint_key) for a in decoded.attributes
                                  if a.name == "VARIABLE_VALUE"), None)
        root = nodes[0]
    with tempfile.TemporaryDirectory() as folder:
        prefix = Path(folder) / index.stem
        tf2_checkpoint(prefix, root, arrays)
        data = Path(f"{prefix}.data-00000-of-00001").read_bytes()
        return Path(f"{prefix}.index").read_bytes(), f"object graph {action}", \
            {f"{index.stem}.data-00000-of-00001": data}


def mutate_structure(rng: random.Random, target: Path, data: bytes
                     ) -> tuple[bytes, str] | tuple[bytes, str, dict[str, bytes]] | None:
    """One structure-aware mutation of ``target`` (its bytes ``data``), by what it is; a
    third item, where there is one, gives other files of the seed rewritten with it."""
    if target.name == "checkpoint":
        return mutate_state(rng, data)
    if data[:2] == b"PK":
        if target.suffix in (".pt", ".pth") and rng.random() < 0.5:
            return mutate_pickle(rng, data)
        return mutate_archive(rng, data)
    if target.suffix == ".index":
        if rng.random() < 0.5:
            found = mutate_object_graph(rng, target)
            if found is not None:
                return found
        return mutate_bundle(rng, target)
    if data[4:8] == b"TFL3":
        return mutate_tflite(rng, data)
    if target.suffix == ".msgpack":
        return mutate_msgpack(rng, data)
    if target.suffix == ".onnx":
        return mutate_onnx(rng, data)
    if target.suffix == ".pb" and target.name not in ("saved_model.pb", "keras_metadata.pb",
                                                      "fingerprint.pb"):
        return mutate_graphdef(rng, data)  # a frozen graph
    if target.suffix == ".safetensors":
        return mutate_safetensors(rng, data)
    if target.suffix == ".mlmodel":
        return mutate_program(rng, data)
    return None


def mutate(rng: random.Random, seed: Seed, all_seeds: list[Seed], folder: Path,
           structure: bool = False) -> str:
    """Copy ``seed`` into ``folder`` with one file mutated; returns what was done. With
    ``structure``, the mutation is structure-aware where one applies to the file."""
    files = seed.files()
    target = rng.choice(files)
    data = target.read_bytes()
    mutated: bytes | None = None
    how = "bytes"
    rewritten: dict[Path, bytes] = {}  # other files a structure-aware mutation rewrote
    if structure:
        for candidate in sorted(files, key=lambda path: path != target):
            found = mutate_structure(rng, candidate, candidate.read_bytes())
            if found is not None:
                target, mutated, how = candidate, found[0], f"structure: {found[1]}"
                extra: dict[str, bytes] = found[2] if len(found) == 3 else {}
                rewritten = {candidate.with_name(name): content  # beside the file mutated
                             for name, content in extra.items()}
                break
    kind = rng.random()
    if mutated is not None:
        pass
    elif kind < 0.4 and data[:2] == b"PK":
        mutated, how = mutate_zip(rng, data), "zip member"
    elif kind < 0.4 and target.suffix == ".index":
        mutated, how = mutate_index(rng, data), "index block"
    elif kind < 0.4 and data[4:8] == b"TFL3":
        mutated, how = mutate_flatbuffer(rng, data), "flatbuffer word"
    elif kind < 0.4 and target.suffix == ".json":
        mutated, how = mutate_json(rng, data), "JSON value"
    elif kind < 0.5:
        others = [path for other in all_seeds if other.fmt == seed.fmt and other is not seed
                  for path in other.files() if path.suffix == target.suffix]
        if others:
            mutated, how = _splice(rng, data, rng.choice(others).read_bytes()), "splice"
    if mutated is None:
        mutated, how = mutate_bytes(rng, data), "bytes"
    for path in files:  # where they were in the seed's folder (a SavedModel's variables/)
        copy = folder / path.relative_to(seed.folder)
        copy.parent.mkdir(parents=True, exist_ok=True)
        if path == target:
            copy.write_bytes(mutated)
        elif path in rewritten:
            copy.write_bytes(rewritten[path])
        else:
            shutil.copyfile(path, copy)
    return f"{how} of {target.name}"


# -- one case ---------------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that ``except Exception`` cannot swallow it."""


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def structured(seed_value: int, case: int, share: float) -> bool:
    """Whether case ``case`` gets a structure-aware mutation (drawn apart from the case's
    own generator, so that the byte-level cases stay what they were)."""
    return random.Random(f"{seed_value}:{case}:structure").random() < share


def run_case(seeds: list[Seed], seed_value: int, case: int, scratch: Path,
             timeout: float, verbose: bool = False, structure: float = 0.0) -> dict[str, Any]:
    """Mutate, read, run; the outcome is ``model``, ``error`` or ``FAIL``."""
    import rnnport

    rng = random.Random(f"{seed_value}:{case}")
    seed = seeds[case % len(seeds)]
    folder = scratch / f"case-{case}"
    folder.mkdir()
    result: dict[str, Any] = {"case": case, "seed": seed.name, "fmt": seed.fmt}
    try:
        result["mutation"] = mutate(rng, seed, seeds, folder,
                                    structured(seed_value, case, structure))
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
        from hostile_cases import mentions_memory

        if mentions_memory(error):
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
            print(json.dumps(run_case(seeds, job["seed"], case, scratch, job["timeout"],
                                      structure=job["structure"])), flush=True)
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
             "memory": args.memory, "structure": args.structure} for j in range(args.jobs)]
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
    mutations = Counter(r["mutation"].split(" of ")[0] for r in results if "mutation" in r)
    return {"cases": len(results), "failures": failures, "mutations": dict(mutations),
            "formats": {fmt: dict(sorted(counts.items())) for fmt, counts in by_format.items()}}


def keep(failures: list[dict[str, Any]], seeds: list[Seed], seed_value: int, folder: Path,
         structure: float) -> None:
    """Save each failing input again (mutations are deterministic) under ``folder``."""
    for failure in failures:
        case = failure["case"]
        target = folder / f"seed{seed_value}-case{case}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        mutate(random.Random(f"{seed_value}:{case}"), seeds[case % len(seeds)], seeds, target,
               structured(seed_value, case, structure))
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
    parser.add_argument("--structure", type=float, default=0.2, metavar="SHARE",
                        help="share of cases given a structure-aware mutation where one applies "
                        "(zip codecs, bombs and lying sizes; shared pickled lists; checkpoint "
                        "dimensions, listings and overlaps; msgpack counts and nesting; ONNX "
                        "dimensions, chains and fan-outs; FlatBuffer vector lengths; safetensors "
                        "offsets): default 0.2, 1 for those alone, 0 for byte mutations alone; "
                        "rerun a case with the same value")
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
                                          verbose=True, structure=args.structure), indent=2))
            return 0
        started = time.time()
        results = parent(args, seeds)
        report = summary(results, seeds)
        report.update(seed=args.seed, seconds=round(time.time() - started, 1),
                      seeds=[seed.name for seed in seeds])
        if args.keep and report["failures"]:
            keep(report["failures"], seeds, args.seed, args.keep, args.structure)
    print(f"fuzz: seed {args.seed}, {report['cases']} cases over {len(seeds)} seed inputs "
          f"in {report['seconds']} s")
    for fmt, counts in sorted(report["formats"].items()):
        print(f"  {fmt:6} " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    structure = sum(n for how, n in report["mutations"].items() if how.startswith("structure:"))
    print(f"  structure-aware mutations: {structure} of {report['cases']} cases")
    for failure in report["failures"]:
        print(f"FAIL case {failure['case']} ({failure.get('seed', '?')}, "
              f"{failure.get('mutation', '?')}): {failure['detail']}")
        print(f"  rerun: python tools/fuzz.py --seed {args.seed} --case {failure['case']}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
