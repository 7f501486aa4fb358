"""Hostile inputs: small files (and calls) built to exhaust memory or time, or to get an
exception other than an rnnport error out of a reader.

Each :class:`Case` has a ``build`` that writes its files into a folder (in the test's
process) and either an ``attack`` (run by :func:`child` in a process of its own, under a
memory cap, with the folder as its working directory) or the ``argv`` of an ``rnnport``
command. ``tests/test_hostile.py`` runs every case; ``tools/fuzz.py`` borrows the builders
of zip members, bombs and checkpoint indexes for its structure-aware mutations.

Zip members are written by :func:`zip_archive` from what a header declares, so a member can
be compressed with any method and declare sizes that lie. The bombs are built without
compressing gigabytes: a bzip2 stream is made of blocks, and one block of zeros, repeated
bit for bit with the stream's checksum recomputed, inflates as far as wanted (3 GB from
18 KB with 100 KB blocks, built in a fraction of a second). An LZMA stream cannot be
spliced, so :func:`lzma_zeros` compresses for real (about ten seconds for 3 GB; its result
is kept for the process).
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import os
import struct
import sys
import threading
import traceback
import tracemalloc
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from rnnport.io.crc32c import _apply as _gf2_apply  # a GF(2) matrix times a vector

BOMB_SIZE = 3_000_000_000  # what each bomb inflates to: past the children's memory cap
MEMORY_CAP = 3 << 30       # RLIMIT_DATA of a child: the interpreter, its imports and the read
TIMEOUT = 60.0             # seconds a child may take

STORED, DEFLATED, BZIP2, LZMA = 0, 8, 12, 14  # zip compression methods

# -- a caller deep in its own recursion --------------------------------------------------------


def deep_call(headroom: int, call: Callable[[], Any]) -> Any:
    """``call()`` made with only ``headroom`` frames left below the recursion limit: what a
    read called deep in a caller's recursion has. Recursion a file controls shows up as a
    RecursionError here and not at the top of a test."""
    def depth() -> int:
        frame, count = sys._getframe(), 0
        while frame is not None:
            frame, count = frame.f_back, count + 1  # type: ignore[assignment]
        return count

    def down(level: int) -> Any:
        return call() if level <= 1 else down(level - 1)

    return down(max(sys.getrecursionlimit() - headroom - depth(), 1))


@contextmanager
def peak_allocated() -> Iterator[list[int]]:
    """The peak bytes Python and NumPy allocated inside, in the list yielded."""
    found: list[int] = []
    tracemalloc.start()
    try:
        yield found
    finally:
        found.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()


# -- zip archives written from their headers --------------------------------------------------


@dataclass
class Member:
    """One zip member as its headers declare it: ``raw`` is what is stored (compressed by
    ``method``); ``size`` and ``crc`` describe the content it inflates to."""

    name: str
    raw: bytes
    method: int = STORED
    size: int | None = None  # default: len(raw), right for stored members
    crc: int | None = None   # default: CRC-32 of raw
    compressed: int | None = None  # the compressed size declared (default len(raw))
    at: int | None = None  # where the central directory says it is (default: where it is)


_VERSION = {STORED: 20, DEFLATED: 20, BZIP2: 46, LZMA: 63}


def zip_archive(members: Sequence[Member]) -> bytes:
    """A zip archive of ``members``, each header saying what the member declares (sizes
    past 4 GiB are not needed here and not written)."""
    out = bytearray()
    central = bytearray()
    for member in members:
        name = member.name.encode()
        size = len(member.raw) if member.size is None else member.size
        crc = zlib.crc32(member.raw) if member.crc is None else member.crc
        compressed = len(member.raw) if member.compressed is None else member.compressed
        version = _VERSION.get(member.method, 20)
        flags = 0x02 if member.method == LZMA else 0  # LZMA: an end-of-stream marker follows
        fields = (version, flags, member.method, 0, 0x21, crc & 0xFFFFFFFF,
                  compressed & 0xFFFFFFFF, size & 0xFFFFFFFF, len(name))
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, *fields, 0) + name + member.raw
        central += struct.pack("<IH", 0x02014B50, version) + struct.pack(
            "<HHHHHIIIHH", *fields, 0) + struct.pack(
            "<HHHII", 0, 0, 0, 0, offset if member.at is None else member.at) + name
    start = len(out)
    out += central
    out += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(members), len(members),
                       len(central), start, 0)
    return bytes(out)


def overlapping_npz(count: int, size: int) -> bytes:
    """An ``.npz`` whose ``count`` stored members overlap: each member's data is an ``.npy``
    header and then everything after it in the file (the next members' headers, down to
    ``size`` bytes of array data at the end that every member shares), so each is a valid
    uint8 array, and reading them all reads about ``count × size`` bytes from a file of
    little more than ``size``. Laid out first, then filled in from the end, each member's
    CRC-32 computed over what follows its local header."""
    names = [f"x{index}.npy".encode() for index in range(count)]
    npy = len(npy_header((1 << 40,)))  # every header here: 128 bytes
    starts = []  # where each member's local header starts
    position = 0
    for name in names:
        starts.append(position)
        position += 30 + len(name) + npy
    end = position + size
    out = bytearray(end)
    out[position:] = np.arange(size, dtype=np.uint8).tobytes()
    entries = []
    for index in reversed(range(count)):
        data = starts[index] + 30 + len(names[index])
        header = npy_header((end - data - npy,))
        assert len(header) == npy
        out[data:data + npy] = header
        crc, length = zlib.crc32(memoryview(out)[data:]), end - data
        out[starts[index]:data] = struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, STORED, 0, 0x21, crc, length, length,
            len(names[index]), 0) + names[index]
        entries.append((names[index], crc, length, starts[index]))
    central = bytearray()
    for name, crc, length, offset in reversed(entries):
        central += struct.pack("<IH", 0x02014B50, 20) + struct.pack(
            "<HHHHHIIIHH", 20, 0, STORED, 0, 0x21, crc, length, length, len(name), 0) + \
            struct.pack("<HHHII", 0, 0, 0, 0, offset) + name
    return bytes(out + central) + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count,
                                              len(central), end, 0)


def zip_members(data: bytes) -> list[tuple[str, bytes]]:
    """Every member of an archive as (name, content)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return [(info.filename, archive.read(info)) for info in archive.infolist()]


def compressed(content: bytes, method: int) -> bytes:
    """``content`` as a zip member compressed with ``method`` stores it."""
    if method == DEFLATED:
        deflate = zlib.compressobj(9, zlib.DEFLATED, -15)
        return deflate.compress(content) + deflate.flush()
    if method == BZIP2:
        return bz2.compress(content)
    if method == LZMA:
        encoder, header = _lzma_encoder()
        return header + encoder.compress(content) + encoder.flush()
    return content


def _lzma_encoder() -> tuple[Any, bytes]:
    """A raw LZMA1 encoder and the 4-byte version and property header zip puts before its
    stream (APPNOTE 5.8.8)."""
    options = {"id": lzma.FILTER_LZMA1, "preset": 0, "mode": lzma.MODE_FAST, "nice_len": 273}
    properties = lzma._encode_filter_properties(options)  # type: ignore[attr-defined]
    encoder = lzma.LZMACompressor(lzma.FORMAT_RAW, filters=[options])
    return encoder, struct.pack("<BBH", 9, 4, len(properties)) + properties


# -- bombs ------------------------------------------------------------------------------------


def crc32_zeros(crc: int, count: int) -> int:
    """``zlib.crc32(bytes(count), crc)`` in log(count) steps (zlib's crc32_combine): the
    register times x^(8·count) modulo the CRC polynomial, by repeated squaring."""
    register = crc ^ 0xFFFFFFFF
    operator = [0xEDB88320] + [1 << row for row in range(31)]  # one zero bit
    for _ in range(3):  # eight zero bits: one byte
        operator = [_gf2_apply(operator, operator[row]) for row in range(32)]
    while count:
        if count & 1:
            register = _gf2_apply(operator, register)
        count >>= 1
        if count:
            operator = [_gf2_apply(operator, operator[row]) for row in range(32)]
    return register ^ 0xFFFFFFFF


_BLOCK_MAGIC = format(0x314159265359, "048b")  # π: a bzip2 block starts
_END_MAGIC = format(0x177245385090, "048b")    # √π: the stream ends


@lru_cache(maxsize=8)
def bzip2_bomb(prefix: bytes, size: int = BOMB_SIZE, level: int = 1) -> tuple[bytes, int, int]:
    """A bzip2 stream of ``prefix`` and then zeros, at least ``size`` bytes in all; returns
    (stream, its exact inflated size, the CRC-32 of what it inflates to).

    bzip2 compresses block by block, each block bit-aligned and with its own CRC, the
    stream's CRC being a rotate-and-xor of the blocks'. Compressing a little more than
    three blocks' worth after the prefix gives a block of zeros alone; that block is
    repeated as often as ``size`` needs."""
    encoder = bz2.BZ2Compressor(level)
    parts = [encoder.compress(prefix)]
    zeros = bytes(4 << 20)
    per_block = level * 100_000 // 5 * 259  # what RLE shrinks to a full block, about
    for _ in range(-(-(len(prefix) + 3 * per_block + per_block // 2) // len(zeros))):
        parts.append(encoder.compress(zeros))
    stream = b"".join([*parts, encoder.flush()])
    bits = format(int.from_bytes(stream, "big"), f"0{8 * len(stream)}b")
    starts = []
    at = bits.find(_BLOCK_MAGIC, 32)
    while at >= 0:
        starts.append(at)
        at = bits.find(_BLOCK_MAGIC, at + 48)
    end = bits.find(_END_MAGIC, starts[-1])
    blocks = [bits[a:b] for a, b in zip(starts, [*starts[1:], end], strict=True)]
    zero = blocks[-2]  # the last full block, before the partial one
    if blocks[-3] != zero:
        raise AssertionError("bzip2_bomb: no block of zeros alone; compress more zeros")
    head = blocks[:-3]

    def joined(body: list[str]) -> bytes:
        crc = 0
        for block in body:
            crc = (((crc << 1) | (crc >> 31)) & 0xFFFFFFFF) ^ int(block[48:80], 2)
        text = "".join(body) + _END_MAGIC + format(crc, "032b")
        text += "0" * (-len(text) % 8)
        return stream[:4] + int(text, 2).to_bytes(len(text) // 8, "big")

    head_content = bz2.decompress(joined(head)) if head else b""
    zero_size = len(bz2.decompress(joined([zero])))
    count = -(-(size - len(head_content)) // zero_size)
    total = len(head_content) + count * zero_size
    return joined([*head, *[zero] * count]), total, \
        crc32_zeros(zlib.crc32(head_content), total - len(head_content))


_LZMA_LOCK = threading.Lock()


@lru_cache(maxsize=2)
def _lzma_zeros(size: int) -> bytes:
    encoder, header = _lzma_encoder()
    parts = [header]
    zeros = bytes(64 << 20)
    left = size
    while left:
        piece = zeros[:min(left, len(zeros))]
        parts.append(encoder.compress(piece))
        left -= len(piece)
    parts.append(encoder.flush())
    return b"".join(parts)


def lzma_zeros(size: int = BOMB_SIZE) -> bytes:
    """A zip member's LZMA data that inflates to ``size`` zeros (about 450 KB for 3 GB;
    compressed for real, once per process, safely from several threads)."""
    with _LZMA_LOCK:
        return _lzma_zeros(size)


def bomb_member(name: str, prefix: bytes, method: int, *, declared: int | None = None) -> Member:
    """A member named ``name`` that inflates to ``prefix`` and zeros, BOMB_SIZE in all
    (with LZMA zeros alone, one stream serving every bomb), declaring its true size unless
    ``declared`` says otherwise."""
    if method == BZIP2:
        raw, size, crc = bzip2_bomb(prefix)
    else:
        raw, size, crc = lzma_zeros(), BOMB_SIZE, crc32_zeros(0, BOMB_SIZE)
    return Member(name, raw, method, size if declared is None else declared, crc)


def npy_header(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    """An ``.npy`` header (format 1.0) for an array of ``shape``."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return out.getvalue()


# -- TensorBundle (TF1 checkpoint) indexes ----------------------------------------------------

FLOAT = 1  # TensorFlow's DT_FLOAT
_FOOTER_MAGIC = 0xDB4775248B80FB57


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def _masked_crc32c(data: bytes) -> int:
    from rnnport.io.crc32c import crc32c, mask

    return int(mask(crc32c(data)))


def bundle_entry(shape: Sequence[int], offset: int, size: int, crc: int,
                 code: int = FLOAT) -> bytes:
    """A BundleEntryProto: dtype 1, shape 2 (dims 2, each with size 1), offset 4, size 5,
    masked CRC-32C 6."""
    dims = b"".join(_key(2, 2) + varint(len(dim)) + dim
                    for dim in (_key(1, 0) + varint(d) if d else b"" for d in shape))
    return (_key(1, 0) + varint(code) + _key(2, 2) + varint(len(dims)) + dims
            + _key(4, 0) + varint(offset) + _key(5, 0) + varint(size)
            + _key(6, 5) + crc.to_bytes(4, "little"))


def _block(rows: Sequence[tuple[bytes, bytes]]) -> bytes:
    """A LevelDB table block of ``rows`` (no shared prefixes, one restart point), with its
    trailer: compression type 0 and the masked CRC-32C."""
    out = bytearray()
    for key, value in rows:
        out += varint(0) + varint(len(key)) + varint(len(value)) + key + value
    out += (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    return bytes(out) + b"\0" + _masked_crc32c(bytes(out) + b"\0").to_bytes(4, "little")


def bundle_index(entries: Sequence[tuple[str, bytes]], listings: int = 1) -> bytes:
    """A checkpoint index: the header (one shard, little-endian, version 1) and ``entries``
    (name, BundleEntryProto, taken in sorted order) in one data block, which the index block
    lists ``listings`` times."""
    header = _key(1, 0) + varint(1) + _key(3, 2) + varint(2) + _key(1, 0) + varint(1)
    rows = [(b"", header), *sorted((name.encode(), value) for name, value in entries)]
    data = _block(rows)
    meta = _block([])
    handle = varint(0) + varint(len(data) - 5)
    last = rows[-1][0]
    index = _block([(last + b"\xff" + f"{n:08d}".encode(), handle) for n in range(listings)]
                   if listings > 1 else [(last, handle)])
    footer = varint(len(data)) + varint(len(meta) - 5) + varint(len(data) + len(meta)) + \
        varint(len(index) - 5)
    return data + meta + index + footer.ljust(40, b"\0") + _FOOTER_MAGIC.to_bytes(8, "little")


def write_bundle(prefix: Path, arrays: dict[str, np.ndarray], listings: int = 1) -> None:
    """A one-shard checkpoint of ``arrays`` (float32), laid out in name order."""
    data = bytearray()
    entries = []
    for name in sorted(arrays):
        raw = np.ascontiguousarray(arrays[name], np.float32).tobytes()
        entries.append((name, bundle_entry(arrays[name].shape, len(data), len(raw),
                                           _masked_crc32c(raw))))
        data += raw
    Path(f"{prefix}.index").write_bytes(bundle_index(entries, listings))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(data))


def _rnn_cells(layers: Sequence[int], input_size: int, hidden: int) -> dict[str, np.ndarray]:
    """The kernels and biases of a TF1 MultiRNNCell of BasicRNNCells numbered ``layers``."""
    rng = np.random.default_rng(0)
    arrays = {}
    for layer in layers:
        width = (input_size if layer == 0 else hidden) + hidden
        scope = f"rnn/multi_rnn_cell/cell_{layer}/basic_rnn_cell"
        arrays[f"{scope}/kernel"] = rng.standard_normal((width, hidden)).astype(np.float32)
        arrays[f"{scope}/bias"] = rng.standard_normal(hidden).astype(np.float32)
    return arrays


# -- TF2 object graphs ------------------------------------------------------------------------


def tf2_checkpoint(prefix: Path, root: Any, arrays: dict[str, np.ndarray]) -> None:
    """A TF2 checkpoint of ``arrays`` whose object graph is the tree of
    :class:`rnnport.formats.tf2.writer._Node` under ``root`` (nodes numbered breadth first)."""
    from rnnport.formats.tf2 import writer
    from rnnport.io import tensorbundle, tfproto

    graph = np.empty((), dtype=object)
    graph[()] = writer.encode_object_graph(writer._numbered(root))
    tensorbundle.write_bundle(prefix, {**arrays, tfproto.OBJECT_GRAPH_KEY: graph})


def tf2_chain(prefix: Path, length: int) -> None:
    """A checkpoint whose object graph is one chain of ``length`` objects, each the child
    ``x`` of the one before, the last holding a variable: the objects' paths take the
    square of the chain's length."""
    from rnnport.formats.tf2.writer import _Node

    key = "x/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    node = _Node(variable=("kernel", key))
    for _ in range(length):
        node = _Node([("x", node)])
    tf2_checkpoint(prefix, node, {key: np.ones((2, 2), np.float32)})


def tf2_shared_layers(prefix: Path, layers: int, hidden: int) -> None:
    """A checkpoint of ``layers`` Keras LSTM layers (``hidden`` → ``hidden``) whose object
    graph names the same three stored tensors for every one of them."""
    from rnnport.formats.tf2.writer import _Node

    rng = np.random.default_rng(3)
    stored = {f"shared/{name}/.ATTRIBUTES/VARIABLE_VALUE": rng.standard_normal(shape).astype(
        np.float32) for name, shape in (("kernel", (hidden, 4 * hidden)),
                                        ("recurrent_kernel", (hidden, 4 * hidden)),
                                        ("bias", (4 * hidden,)))}
    root = _Node()
    for index in range(layers):
        cell = _Node([(name, _Node(variable=(f"lstm_{index}/{name}",
                                             f"shared/{name}/.ATTRIBUTES/VARIABLE_VALUE")))
                      for name in ("kernel", "recurrent_kernel", "bias")])
        root.children.append((f"layer_with_weights-{index}", _Node([("cell", cell)])))
    tf2_checkpoint(prefix, root, stored)


# -- TFLite models ----------------------------------------------------------------------------


def tflite_shared_quantization(tensors: int, scales: int) -> bytes:
    """A ``.tflite`` model whose one subgraph holds ``tensors`` int8 tensors, every one
    pointing at the same QuantizationParameters table of ``scales`` scales (built with
    LiteRT's generated schema code, one table written once and referenced from each)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    builder = flatbuffers.Builder(1024)
    scale = builder.CreateNumpyVector(np.linspace(0.5, 1.5, scales, dtype=np.float32))
    schema.QuantizationParametersStart(builder)
    schema.QuantizationParametersAddScale(builder, scale)
    quantization = schema.QuantizationParametersEnd(builder)
    schema.TensorStartShapeVector(builder, 1)
    builder.PrependInt32(scales)
    shape = builder.EndVector()
    made = []
    for _ in range(tensors):
        schema.TensorStart(builder)
        schema.TensorAddShape(builder, shape)
        schema.TensorAddType(builder, 9)  # INT8
        schema.TensorAddQuantization(builder, quantization)
        made.append(schema.TensorEnd(builder))
    schema.SubGraphStartTensorsVector(builder, len(made))
    for tensor in reversed(made):
        builder.PrependUOffsetTRelative(tensor)
    listed = builder.EndVector()
    schema.SubGraphStart(builder)
    schema.SubGraphAddTensors(builder, listed)
    subgraph = schema.SubGraphEnd(builder)
    schema.BufferStart(builder)
    empty = schema.BufferEnd(builder)
    schema.ModelStartBuffersVector(builder, 1)
    builder.PrependUOffsetTRelative(empty)
    buffers = builder.EndVector()
    schema.ModelStartSubgraphsVector(builder, 1)
    builder.PrependUOffsetTRelative(subgraph)
    subgraphs = builder.EndVector()
    schema.ModelStart(builder)
    schema.ModelAddVersion(builder, 3)
    schema.ModelAddSubgraphs(builder, subgraphs)
    schema.ModelAddBuffers(builder, buffers)
    builder.Finish(schema.ModelEnd(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


# -- ONNX graphs ------------------------------------------------------------------------------


def onnx_lstm(weight: str = "W", nodes: Sequence[Any] = (), tensors: Sequence[Any] = (),
              hidden: int = 2, inputs: int = 3, **attributes: Any) -> Any:
    """A ModelProto of one LSTM node fed ``weight`` as W (an initializer "W" of random
    values unless ``tensors`` or ``nodes`` give it), ``nodes`` in front of it."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    given = {tensor.name for tensor in tensors} | {name for node in nodes for name in node.output}
    stored = [*tensors, numpy_helper.from_array(
        rng.standard_normal((1, 4 * hidden, hidden)).astype(np.float32), "R")]
    if weight == "W" and "W" not in given:
        stored.append(numpy_helper.from_array(
            rng.standard_normal((1, 4 * hidden, inputs)).astype(np.float32), "W"))
    node = helper.make_node("LSTM", ["x", weight, "R"], ["y"], hidden_size=hidden, **attributes)
    graph = helper.make_graph(
        [*nodes, node], "hostile",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], stored)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def identity_chain(source: str, count: int, prefix: str = "i") -> list[Any]:
    """``count`` Identity nodes in a chain from ``source``; the last one's output is
    ``f"{prefix}{count - 1}"``."""
    from onnx import helper

    return [helper.make_node("Identity", [source if n == 0 else f"{prefix}{n - 1}"],
                             [f"{prefix}{n}"]) for n in range(count)]


def _save_onnx(model: Any, path: Path) -> None:
    path.write_bytes(model.SerializeToString())


# -- the cases --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One hostile input: ``build(folder)`` writes it; ``attack(folder)`` (in the child)
    reads, converts or runs it, or ``argv`` is an ``rnnport`` command run there."""

    name: str
    build: Callable[[Path], None]
    attack: Callable[[Path], Any] | None = None
    argv: tuple[str, ...] = ()
    reads: bool = False      # a model is as good an answer as an error (work must stay bounded)
    limit: str | None = None  # the LimitError's limit the case must end in
    unchanged: tuple[str, ...] = ()  # files the attack must leave as they were


CASES: dict[str, Case] = {}


def case(name: str, build: Callable[[Path], None], attack: Callable[[Path], Any] | None = None,
         **details: Any) -> None:
    CASES[name] = Case(name, build, attack, **details)


def _nothing(folder: Path) -> None:
    pass


def _random_rnn(cell: str = "lstm", input_size: int = 3, hidden: int = 4, **spec: Any) -> Any:
    import rnnport

    return rnnport.RNN.random(rnnport.Spec(cell, input_size, hidden, **spec), seed=7)


# 1. a conversion over its own source

CHECKPOINT = "m[1].ckpt"  # brackets: a glob pattern that matches nothing, not the prefix


def _tf1_checkpoint(folder: Path) -> None:
    import rnnport

    rnnport.write(_random_rnn(), "tf1", path=folder / CHECKPOINT)


def _convert_onto(target: str) -> Callable[[Path], Any]:
    def attack(folder: Path) -> Any:
        import rnnport

        return rnnport.convert(CHECKPOINT, "onnx", path=target, overwrite=True)
    return attack


for _part in ("data-00000-of-00001", "index"):
    case(f"tf1-convert-onto-its-own-{_part.split('-')[0]}", _tf1_checkpoint,
         _convert_onto(f"{CHECKPOINT}.{_part}"),
         unchanged=(f"{CHECKPOINT}.index", f"{CHECKPOINT}.data-00000-of-00001"))
case("cli-convert-onto-its-own-data", _tf1_checkpoint,
     argv=("convert", CHECKPOINT, f"{CHECKPOINT}.data-00000-of-00001", "--to", "onnx", "--force"),
     unchanged=(f"{CHECKPOINT}.index", f"{CHECKPOINT}.data-00000-of-00001"))


# 2. zip bombs of another codec

def _keras_bomb(folder: Path, method: int, name: str = "bomb.keras") -> None:
    import rnnport

    rnnport.write(_random_rnn(), "keras", path=folder / "small.keras")
    members = []
    for member, content in zip_members((folder / "small.keras").read_bytes()):
        members.append(bomb_member(member, content, method) if member == "model.weights.h5"
                       else Member(member, content))
    (folder / name).write_bytes(zip_archive(members))
    (folder / "small.keras").unlink()


BOMBED_ARRAY = "part0/layer0/forward/weight_ih.npy"


def _npz_bomb(folder: Path, method: int, *, lying: bool = False) -> None:
    import rnnport

    rnnport.write(_random_rnn(), "npz", path=folder / "small.npz")
    header = npy_header((BOMB_SIZE - 128,))
    members = []
    for member, content in zip_members((folder / "small.npz").read_bytes()):
        members.append(
            bomb_member(member, header, method, declared=len(content) if lying else None)
            if member == BOMBED_ARRAY else Member(member, content))
    (folder / "bomb.npz").write_bytes(zip_archive(members))
    (folder / "small.npz").unlink()


def _read(name: str, **options: Any) -> Callable[[Path], Any]:
    def attack(folder: Path) -> Any:
        import rnnport

        return rnnport.read(name, **options)
    return attack


case("keras-bzip2-bomb", lambda f: _keras_bomb(f, BZIP2), _read("bomb.keras"))
case("keras-lzma-bomb", lambda f: _keras_bomb(f, LZMA), _read("bomb.keras"))
case("npz-bzip2-bomb", lambda f: _npz_bomb(f, BZIP2), _read("bomb.npz"))
case("npz-lzma-bomb", lambda f: _npz_bomb(f, LZMA), _read("bomb.npz"))
case("npz-bzip2-bomb-declaring-its-array-size", lambda f: _npz_bomb(f, BZIP2, lying=True),
     _read("bomb.npz"))
case("cli-inspect-keras-bzip2-bomb", lambda f: _keras_bomb(f, BZIP2),
     argv=("inspect", "bomb.keras"))
case("cli-inspect-npz-bzip2-bomb", lambda f: _npz_bomb(f, BZIP2), argv=("inspect", "bomb.npz"))


# 3. pickles whose lists repeat one list at every level

def _shared_lists(folder: Path, width: int, depth: int, name: str = "shared.pt") -> None:
    import torch

    import rnnport

    state = {key: torch.from_numpy(np.array(value))
             for key, value in rnnport.write(_random_rnn(), "torch").items()}
    nested: Any = [0.5] * width
    for _ in range(depth - 1):
        nested = [nested] * width  # one list, referenced width times: the pickle stays small
    state["weight_ih_l0"] = nested
    torch.save(state, folder / name)


case("torch-shared-lists-100^5", lambda f: _shared_lists(f, 100, 5), _read("shared.pt"))
case("torch-shared-lists-1000^6", lambda f: _shared_lists(f, 1000, 6), _read("shared.pt"))
case("cli-inspect-torch-shared-lists", lambda f: _shared_lists(f, 100, 5),
     argv=("inspect", "shared.pt"))


# 4. TensorBundle indexes

def _far_layer(folder: Path) -> None:
    write_bundle(folder / "m.ckpt", _rnn_cells([0, 99_999_999_999], 3, 4))


def _listed_again(folder: Path) -> None:
    write_bundle(folder / "m.ckpt", _rnn_cells(range(100), 1, 1), listings=50_000)


def _overlapping(folder: Path) -> None:
    hidden = 256
    kernel = np.arange(2 * hidden * hidden, dtype=np.float32).tobytes()
    bias = np.zeros(hidden, np.float32).tobytes()
    entries = []
    for layer in range(300):  # every layer's kernel is the same 512 KiB of the shard
        scope = f"rnn/multi_rnn_cell/cell_{layer}/basic_rnn_cell"
        entries += [(f"{scope}/kernel", bundle_entry((2 * hidden, hidden), 0, len(kernel),
                                                     _masked_crc32c(kernel))),
                    (f"{scope}/bias", bundle_entry((hidden,), len(kernel), len(bias),
                                                   _masked_crc32c(bias)))]
    (folder / "m.ckpt.index").write_bytes(bundle_index(entries))
    (folder / "m.ckpt.data-00000-of-00001").write_bytes(kernel + bias)


def _odd_shape(shape: tuple[int, ...], size: int) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        raw = np.ones(max(size // 4, 0), np.float32).tobytes()[:size]
        bias = np.zeros(16, np.float32).tobytes()
        entries = [("rnn/lstm_cell/bias", bundle_entry((16,), 0, len(bias),
                                                       _masked_crc32c(bias))),
                   ("rnn/lstm_cell/kernel", bundle_entry(shape, len(bias), len(raw),
                                                         _masked_crc32c(raw)))]
        (folder / "m.ckpt.index").write_bytes(bundle_index(entries))
        (folder / "m.ckpt.data-00000-of-00001").write_bytes(bias + raw)
    return build


_TF1 = _read("m.ckpt", fmt="tf1")
case("tf1-layer-99999999999", _far_layer, _TF1)
case("tf1-one-data-block-listed-50000-times", _listed_again, _TF1)
case("tf1-300-overlapping-kernels", _overlapping, _TF1)
case("tf1-71-dimensions", _odd_shape((1,) * 71, 4), _TF1)
case("tf1-2^62-elements", _odd_shape((1 << 62,), 4), _TF1)
case("tf1-2^62-by-0-elements", _odd_shape((1 << 62, 0), 0), _TF1)
def _stacked(fmt: str, name: str) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        import rnnport

        rnnport.write(_random_rnn("rnn_tanh", 1, 1, num_layers=5000), fmt, path=folder / name)
    return build


case("tf1-5000-layers", _stacked("tf1", "m.ckpt"), _TF1, reads=True)


# 5. ONNX graphs

def _onnx(make: Callable[[], Any]) -> Callable[[Path], None]:
    return lambda folder: _save_onnx(make(), folder / "m.onnx")


def _deep_chain() -> Any:
    from onnx import numpy_helper

    weight = np.random.default_rng(1).standard_normal((1, 8, 3)).astype(np.float32)
    return onnx_lstm("i1499", identity_chain("w0", 1500), [numpy_helper.from_array(weight, "w0")])


def _cast_of_strings() -> Any:
    from onnx import TensorProto, helper

    text = helper.make_tensor("text", TensorProto.STRING, [1, 8, 3], [b"1.5"] * 24)
    return onnx_lstm("W", [helper.make_node("Cast", ["text"], ["W"], to=TensorProto.FLOAT)],
                     [text])


def _negative_dimension() -> Any:
    from onnx import TensorProto

    data = np.zeros(24, np.float32).tobytes()
    return onnx_lstm(tensors=[TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1, 8, -1],
                                          raw_data=data)])


def _one_tensor_many_nodes(chained: bool) -> Callable[[], Any]:
    """W is (1, 8, 2¹⁷), 4 MiB: the stored tensor added 400 times over, in a chain (each
    node adding it to the one before) or side by side (each node adding it to itself, a
    Sum of the 400 results giving W)."""
    def make() -> Any:
        from onnx import helper, numpy_helper

        inputs = 1 << 17
        big = numpy_helper.from_array(np.full((1, 8, inputs), 0.001, np.float32), "big")
        nodes = [helper.make_node("Add", ["big" if n == 0 or not chained else f"a{n - 1}", "big"],
                                  [f"a{n}"]) for n in range(400)]
        if not chained:
            nodes.append(helper.make_node("Sum", [f"a{n}" for n in range(400)], ["a399s"]))
        return onnx_lstm("a399" if chained else "a399s", nodes, [big], inputs=inputs)
    return make


_ONNX = _read("m.onnx")
case("onnx-identity-chain-1500", _onnx(_deep_chain), _ONNX)
case("onnx-cast-of-strings", _onnx(_cast_of_strings), _ONNX)
case("onnx-negative-dimension", _onnx(_negative_dimension), _ONNX)
case("onnx-400-chained-nodes-sharing-a-4mib-tensor", _onnx(_one_tensor_many_nodes(True)), _ONNX)
case("onnx-400-side-by-side-nodes-sharing-a-4mib-tensor", _onnx(_one_tensor_many_nodes(False)),
     _ONNX)
case("onnx-million-activations", _onnx(lambda: onnx_lstm(activations=["Sigmoid"] * 1_000_000)),
     _ONNX)
case("onnx-5000-layers", _stacked("onnx", "m.onnx"), _ONNX, reads=True)


# 6. Keras configs naming one weight group for 300 layers

def _keras_shared_group(folder: Path, *, links: bool) -> None:
    """An LSTM 432 → 432 (6 MiB of weights) saved once; its config lists it 300 times,
    under its own name (all finding its group), or under 300 names whose groups are hard
    links to its group."""
    import h5py

    import rnnport

    rnnport.write(_random_rnn("lstm", 432, 432), "keras", path=folder / "small.keras")
    members = dict(zip_members((folder / "small.keras").read_bytes()))
    config = json.loads(members["config.json"])
    layers = config["config"]["layers"]
    recurrent = layers[1]
    copies = []
    for number in range(300):
        copy = json.loads(json.dumps(recurrent))
        if links and number:
            copy["config"]["name"] = f"lstm_{number}"
        copies.append(copy)
    config["config"]["layers"] = [layers[0], *copies]
    members["config.json"] = json.dumps(config).encode()
    if links:
        weights = folder / "weights.h5"
        weights.write_bytes(members["model.weights.h5"])
        with h5py.File(weights, "r+") as h5:
            del h5["layers/lstm/vars"]  # no recorded name: config names find groups by key
            for number in range(1, 300):
                h5[f"layers/lstm_{number}"] = h5["layers/lstm"]
        members["model.weights.h5"] = weights.read_bytes()
        weights.unlink()
    (folder / "shared.keras").write_bytes(
        zip_archive([Member(name, content) for name, content in members.items()]))
    (folder / "small.keras").unlink()


case("keras-300-layers-one-weight-group", lambda f: _keras_shared_group(f, links=False),
     _read("shared.keras"))
case("keras-300-layers-hard-linked-groups", lambda f: _keras_shared_group(f, links=True),
     _read("shared.keras"))


# 7. arguments

def _forward(x: Callable[[], Any]) -> Callable[[Path], Any]:
    return lambda folder: _random_rnn().forward(x())


case("forward-ragged-list", _nothing, _forward(lambda: [[[0.0, 0.0, 0.0], [0.0, 0.0]]]))
case("forward-broadcast-billion-steps", _nothing,
     _forward(lambda: np.broadcast_to(np.zeros(3, np.float32), (1, 10**9, 3))))
case("random-billion-layers", _nothing, lambda folder: _random_rnn(num_layers=10**9))


def _cudnn_buffer(folder: Path) -> None:
    import rnnport

    np.save(folder / "buffer.npy", rnnport.write(_random_rnn(), "cudnn"))


case("cli-convert-billion-layers", _cudnn_buffer,
     argv=("convert", "buffer.npy", "out.onnx", "--from", "cudnn", "-O", "cell=lstm",
           "-O", "input_size=3", "-O", "hidden_size=4", "-O", "num_layers=1000000000"))


# 8. a lowered limit

def _lowered(name: str) -> Callable[[Path], Any]:
    def attack(folder: Path) -> Any:
        import rnnport

        rnnport.read(name)  # reads within the default limits
        with rnnport.limits(expansion=0.001):
            return rnnport.read(name)
    return attack


def _large(fmt: str, name: str) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        import rnnport

        # 25 MiB of parameters: past 0.001 × the file's size + 16 MiB, and well within the
        # default 4 × the file's size + 16 MiB.
        rnnport.write(_random_rnn("lstm", 512, 1024), fmt, path=folder / name)
    return build


case("limit-expansion-onnx", _large("onnx", "big.onnx"), _lowered("big.onnx"), limit="expansion")
case("limit-expansion-flax", _large("flax", "big.msgpack"), _lowered("big.msgpack"),
     limit="expansion")


# 9. names no file system holds, and a child process that stops

def _state_naming(name: str) -> Callable[[Path], None]:
    """A checkpoint folder whose ``checkpoint`` state file names ``name`` as the newest."""
    def build(folder: Path) -> None:
        _tf1_checkpoint(folder)
        (folder / "checkpoint").write_text(f'model_checkpoint_path: "{name}"\n'
                                           f'all_model_checkpoint_paths: "{name}"\n')
    return build


# 250 characters: a name a file may have, but not with its shards' suffix.
case("tf1-state-file-names-a-name-too-long", _state_naming("m" * 250), _read("."))
case("tf2-state-file-names-a-name-too-long", _state_naming("m" * 250), _read(".", fmt="tf2"))
case("cli-inspect-state-file-naming-a-name-too-long", _state_naming("m" * 4000),
     argv=("inspect", "."))


def _stopping_hdf5_child(folder: Path) -> Any:
    """The HDF5 reader's child stops itself (SIGSTOP) before it reads anything."""
    import rnnport
    from rnnport.io import hdf5

    rnnport.write(_random_rnn(), "keras", path=folder / "m.weights.h5")
    (folder / "stop.py").write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n")
    hdf5.CHILD = folder / "stop.py"
    with rnnport.limits(seconds=TIMEOUT * 2):  # noticed as stopped long before
        return rnnport.read(folder / "m.weights.h5")


case("hdf5-reader-child-stopped", _nothing, _stopping_hdf5_child)


# 10. containers sharing, chaining and repeating what they hold (each past the memory cap
# when read as it was before its fix)

def _overlap(folder: Path) -> None:
    import rnnport

    (folder / "overlap.npz").write_bytes(overlapping_npz(2200, 1_400_000))  # 3.6 GB read
    rnnport.write(_random_rnn(), "npz", path=folder / "m.npz")


def _run_inputs(folder: Path) -> Any:
    """``rnnport run``'s corpus run over ``overlap.npz``: its failure, raised."""
    import rnnport
    from rnnport import corpus

    summary = corpus.run(folder / "m.npz", [folder / "overlap.npz"], folder / "out", jobs=0)
    error = summary.results[0].error or ""
    if error == "ran out of memory" or error.startswith("internal error"):
        raise MemoryError(error) if "memory" in error else RuntimeError(error)
    raise rnnport.FormatError(error)


def _write(name: str, make: Callable[[], Any]) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        made = make()
        (folder / name).write_bytes(made if isinstance(made, bytes) else made.SerializeToString())
    return build


def _empty_maps(count: int) -> bytes:
    """A Flax checkpoint's params: an array of ``count`` empty maps (one byte each)."""
    return b"\x81\xa6params\xdd" + count.to_bytes(4, "big") + b"\x80" * count


case("npz-2200-overlapping-members", _overlap, _read("overlap.npz"))
case("run-npz-2200-overlapping-members", _overlap, _run_inputs)
case("tflite-1000-tensors-sharing-a-32mb-quantization-table",
     _write("q.tflite", lambda: tflite_shared_quantization(1000, 8_000_000)), _read("q.tflite"),
     limit="expansion")
case("tf2-object-graph-chain-of-60000", lambda folder: tf2_chain(folder / "ckpt", 60_000),
     _read("ckpt", fmt="tf2"), limit="expansion")
case("tf2-2000-layers-sharing-2mb-of-tensors",
     lambda folder: tf2_shared_layers(folder / "ckpt", 2000, 256), _read("ckpt", fmt="tf2"),
     limit="expansion")
case("flax-20-million-empty-maps", _write("maps.msgpack", lambda: _empty_maps(20_000_000)),
     _read("maps.msgpack"), limit="expansion")


# 11. graphs that share, call themselves, nest, repeat: ONNX and TensorFlow's protobufs
#
# The builders are used by tests/test_hostile_graphs.py (small sizes, in the test's process)
# and by tools/fuzz.py; the cases below run them at the sizes the crafted files had.


def _pb_field(number: int, payload: bytes) -> bytes:
    return _key(number, 2) + varint(len(payload)) + payload


def onnx_lstm_chain(layers: int, hidden: int, state_depth: int = 0) -> Any:
    """``layers`` LSTM nodes in a chain (each Squeezed into the next), all taking the one
    initializer "W" (1, 4·hidden, hidden) as both W and R: one stored tensor, shared. With
    ``state_depth``, each also takes as initial_h the end of one chain of that many
    Identity nodes from the input h0."""
    from onnx import TensorProto, helper, numpy_helper

    weight = np.random.default_rng(0).standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    nodes = identity_chain("h0", state_depth, prefix="i") if state_depth else []
    state = ["", "", f"i{state_depth - 1}"] if state_depth else []
    previous = "x"
    for layer in range(layers):
        nodes += [helper.make_node("LSTM", [previous, "W", "W", *state], [f"y{layer}"],
                                   hidden_size=hidden),
                  helper.make_node("Squeeze", [f"y{layer}", "axis"], [f"s{layer}"])]
        previous = f"s{layer}"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, hidden])]
    if state_depth:
        inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [1, 1, hidden]))
    graph = helper.make_graph(
        nodes, "chain", inputs, [helper.make_tensor_value_info(previous, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "W"),
         numpy_helper.from_array(np.array([1], np.int64), "axis")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnx_calling(chain: Sequence[str], back: bool) -> Any:
    """Model-local functions ``chain[0]`` → ``chain[1]`` → …, each calling the next; with
    ``back`` the last calls the first again (``["f"]``: a function calling itself)."""
    from onnx import TensorProto, helper

    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    functions = []
    for index, name in enumerate(chain):
        callee = chain[index + 1] if index + 1 < len(chain) else (chain[0] if back else "")
        body = [helper.make_node(callee, ["a"], ["b"], domain="local") if callee else
                helper.make_node("Identity", ["a"], ["b"])]
        functions.append(helper.make_function("local", name, ["a"], ["b"], body, opsets))
    graph = helper.make_graph([helper.make_node(chain[0], ["x"], ["y"], domain="local")], "calls",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, functions=functions, opset_imports=opsets)


def onnx_products(count: int, width: int = 16, filler: int = 0) -> Any:
    """``count`` MatMul → Tanh steps in a chain from input x, all by one matrix (every pair
    of products meets another), then ``filler`` Neg nodes after x: no recurrent network."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, previous = [], "x"
    for step in range(count):
        nodes += [helper.make_node("MatMul", [previous, "K"], [f"m{step}"]),
                  helper.make_node("Tanh", [f"m{step}"], [f"t{step}"])]
        previous = f"t{step}"
    nodes += [helper.make_node("Neg", ["x" if n == 0 else f"n{n - 1}"], [f"n{n}"])
              for n in range(filler)]
    matrix = np.random.default_rng(0).standard_normal((width, width)).astype(np.float32)
    graph = helper.make_graph(
        nodes, "products", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, width])],
        [helper.make_tensor_value_info(previous, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(matrix, "K")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnx_cell_loops(count: int) -> Any:
    """An RNN cell (3 → 4) stepped once from a state input h, and ``count`` more times from
    zeros (the state's product folded away), each a loop of its own over a step of X."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    tensors = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("W", (3, 4)), ("R", (4, 4)), ("b", (4,)))]
    nodes = [helper.make_node("MatMul", ["h", "R"], ["hr"])]
    for step in range(count + 1):
        tensors.append(numpy_helper.from_array(np.array(step, np.int64), f"i{step}"))
        nodes += [helper.make_node("Gather", ["X", f"i{step}"], [f"x{step}"]),
                  helper.make_node("MatMul", [f"x{step}", "W"], [f"xw{step}"]),
                  helper.make_node("Add", [f"xw{step}", "b"], [f"xb{step}"])]
        nodes += [helper.make_node("Add", ["xb0", "hr"], ["s0"]),
                  helper.make_node("Tanh", ["s0"], ["y0"])] if step == 0 else \
            [helper.make_node("Tanh", [f"xb{step}"], [f"y{step}"])]
    graph = helper.make_graph(
        nodes, "loops", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [count + 1, 2, 3]),
                         helper.make_tensor_value_info("h", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)], tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def graphdef_empty_strings(count: int) -> bytes:
    """A GraphDef of one node whose input list is ``count`` empty strings (two bytes each)."""
    node = _pb_field(1, b"n") + _pb_field(2, b"NoOp") + b"\x1a\x00" * count
    return _pb_field(1, node)


def graphdef_split_nesting(levels: int, payload: int) -> bytes:
    """A GraphDef node whose attribute nests ``levels`` function references (AttrValue.func
    → NameAttrList.attr → AttrValue …) over a ``payload``-byte string, each level's func
    message given in two pieces, the second holding all the rest (protobuf merges them)."""
    value = _pb_field(2, b"\0" * payload)  # AttrValue.s
    for _ in range(levels):
        rest = _pb_field(2, _pb_field(1, b"k") + _pb_field(2, value))  # NameAttrList.attr
        value = _pb_field(10, _pb_field(1, b"f")) + _pb_field(10, rest)  # func, in two pieces
    node = _pb_field(1, b"n") + _pb_field(2, b"NoOp") + _pb_field(5, _pb_field(1, b"deep")
                                                                   + _pb_field(2, value))
    return _pb_field(1, node)


def graphdef_filled_consts(count: int, side: int) -> bytes:
    """``count`` TF1 kernel Consts of shape (side, side) each storing one float_val, which
    TensorFlow repeats to fill the shape."""
    dims = b"".join(_pb_field(2, _key(1, 0) + varint(side)) for _ in range(2))
    tensor = _key(1, 0) + varint(1) + _pb_field(2, dims) + _key(5, 5) + struct.pack("<f", 0.5)
    nodes = b""
    for index in range(count):
        node = (_pb_field(1, f"rnn/cell_{index}/lstm_cell/kernel".encode()) + _pb_field(2, b"Const")
                + _pb_field(5, _pb_field(1, b"value") + _pb_field(2, _pb_field(8, tensor))))
        nodes += _pb_field(1, node)
    return nodes


def graphdef_cell_steps(count: int) -> bytes:
    """``count`` TF1 LSTM cells (a kernel Const each) and as many cell steps (an AddV2 of a
    Split's gate f and a scalar, as LSTMCell adds its forget bias), each under its own
    cell's scope: every step must be matched to its cell."""
    from rnnport.io import tfproto_encode as encode

    nodes = [encode.node_def("split", "Split", ["axis", "x"], {"num_split": encode.attr_int(4)}),
             encode.node_def("bias", "Const", [], {"value": encode.attr_tensor(np.float32(1))})]
    kernel = encode.attr_tensor(np.zeros(1, np.float32))
    for index in range(count):
        nodes += [encode.node_def(f"rnn/cell_{index}/lstm_cell/kernel", "Const", [],
                                  {"value": kernel}),
                  encode.node_def(f"rnn/while/rnn/cell_{index}/lstm_cell/add", "AddV2",
                                  ["split:2", "bias"])]
    return encode.graph_def(nodes)


case("onnx-400-lstm-nodes-sharing-one-4mib-w", _write("m.onnx", lambda: onnx_lstm_chain(400, 512)),
     _ONNX, limit="expansion")
case("onnx-function-calling-itself", _write("m.onnx", lambda: onnx_calling(["f"], back=True)),
     _ONNX)
case("onnx-8000-products-by-one-matrix", _write("m.onnx", lambda: onnx_products(8000)), _ONNX)
case("onnx-cell-in-3000-loops", _write("m.onnx", lambda: onnx_cell_loops(3000)), _ONNX,
     limit="work")
case("onnx-300-layers-from-one-state-20000-deep", _write("m.onnx", lambda: onnx_lstm_chain(
    300, 2, state_depth=20_000)), _ONNX, limit="work")
_GRAPH = _read("m.pb")
case("tfgraph-2-million-empty-inputs", _write("m.pb", lambda: graphdef_empty_strings(2_000_000)),
     _GRAPH)
case("tfgraph-func-split-in-two-at-30-levels", _write("m.pb", lambda: graphdef_split_nesting(
    30, 4 << 20)), _GRAPH)
case("tfgraph-60-consts-filled-from-one-float", _write("m.pb", lambda: graphdef_filled_consts(
    60, 4096)), _GRAPH, limit="expansion")
case("tfgraph-3000-cells-3000-steps", _write("m.pb", lambda: graphdef_cell_steps(3000)), _GRAPH)


# -- the child --------------------------------------------------------------------------------


def mentions_memory(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from or during, is a MemoryError."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, MemoryError):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


RESULT = "HOSTILE-RESULT "


def child(name: str) -> None:
    """Run case ``name``'s attack in the working directory; print what it ended in, one
    line for people and one ``RESULT`` line of JSON."""
    import rnnport

    result: dict[str, Any]
    try:
        value = CASES[name].attack(Path.cwd())  # type: ignore[misc]
        result = {"outcome": "returned", "type": type(value).__name__, "message": repr(value)}
    except rnnport.RnnportError as error:
        result = {"outcome": "rnnport", "type": type(error).__name__,
                  "message": str(error), "memory": mentions_memory(error),
                  "limit": getattr(error, "limit", None)}
    except BaseException as error:
        result = {"outcome": "other", "type": type(error).__name__, "message": str(error)[:2000],
                  "traceback": traceback.format_exc(limit=-12)}
    first = result["message"].split("\n")[0]
    print(f"{name}: {result['type']}: {first[:600]}", flush=True)
    print(RESULT + json.dumps(result), flush=True)


def prelude(cap: int = MEMORY_CAP) -> str:
    """Python that caps the process's data size (RLIMIT_DATA: the address space limit would
    break some frameworks' imports), keeping the hard limit, so that children of its own
    (the HDF5 reader's) can set theirs."""
    return ("import resource\n"
            "_, hard = resource.getrlimit(resource.RLIMIT_DATA)\n"
            f"resource.setrlimit(resource.RLIMIT_DATA, ({cap}, hard))\n")


def child_command(case_: Case) -> list[str]:
    """The command that runs ``case_`` in a capped process (in the case's folder)."""
    if case_.argv:  # as `python -m rnnport COMMAND -q ARGS…` would run it
        code = (prelude() + "import runpy, sys\nsys.argv = ['rnnport', *sys.argv[1:]]\n"
                "runpy.run_module('rnnport', run_name='__main__', alter_sys=True)\n")
        return [sys.executable, "-c", code, case_.argv[0], "-q", *case_.argv[1:]]
    code = (prelude() + "import sys\n"
            f"sys.path.insert(0, {os.fspath(Path(__file__).parent)!r})\n"
            "import hostile_cases\nhostile_cases.child(sys.argv[1])\n")
    return [sys.executable, "-c", code, case_.name]
