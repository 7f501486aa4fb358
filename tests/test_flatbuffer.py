"""Hostile input for the FlatBuffer reader and the TFLite decoder: every failure is an
rnnport error, quickly and without large memory."""

from __future__ import annotations

import random
import struct
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from rnnport.errors import RnnportError
from rnnport.io import flatbuffer, tflite_schema

GOLDEN = Path(__file__).parent / "golden" / "tflite"
SMALL = (GOLDEN / "lstm_sequences.tflite").read_bytes()


def _decode(data: bytes) -> None:
    model = tflite_schema.decode_model(data, source="m.tflite")
    for s, graph in enumerate(model.subgraphs):
        for t in range(len(graph.tensors)):
            try:
                tflite_schema.tensor_array(model, t, subgraph=s)
            except RnnportError:
                pass


def test_truncated_at_every_byte() -> None:
    for end in range(len(SMALL)):
        with pytest.raises(RnnportError):
            _decode(SMALL[:end])


def test_random_mutations_raise_only_rnnport_errors() -> None:
    rng = random.Random(17)
    started = time.monotonic()
    for _ in range(3000):
        data = bytearray(SMALL)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.5:
                data[position] ^= 1 << rng.randrange(8)
            elif position + 4 <= len(data):
                value = rng.choice([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, len(data), 0xFFFF])
                data[position:position + 4] = struct.pack("<I", value)
        try:
            _decode(bytes(data))
        except RnnportError:
            pass
    assert time.monotonic() - started < 15


def _file(*words: int, tail: bytes = b"") -> bytes:
    return struct.pack(f"<{len(words)}I", *words) + tail


def test_root_offset_out_of_range() -> None:
    with pytest.raises(RnnportError, match=r"points to byte 1,000,000, past the end of the 12-byte file"):
        flatbuffer.FlatBuffer(_file(1_000_000, 0, 0)).root()


def test_vtable_outside_the_file() -> None:
    # root -> table at 8 whose soffset puts its vtable at 8 - (-4000)
    data = _file(8, 0) + struct.pack("<i", -4000) + b"\0" * 4
    with pytest.raises(RnnportError, match=r"vtable at byte 4,008, outside the 16-byte file"):
        flatbuffer.FlatBuffer(data).root()


def test_vtable_with_an_odd_or_huge_size() -> None:
    data = _file(12, 0) + struct.pack("<HH", 5000, 8) + struct.pack("<i", 4) + b"\0" * 4
    with pytest.raises(RnnportError, match="declares 5,000 bytes"):
        flatbuffer.FlatBuffer(data).root()


def _table_with_offset_field(offset: int) -> bytes:
    # 0: root uoffset -> 12; 4: identifier; 8: vtable (size 6, table 8, field 0 at +4); 12: table
    vtable = struct.pack("<HHH", 6, 8, 4) + b"\0\0"
    return _file(12) + b"TFL3" + vtable[:4] + struct.pack("<i", 12 - 8) + struct.pack("<I", offset)


def test_a_table_that_references_itself() -> None:
    data = bytearray(_table_with_offset_field(0))
    data[8:14] = struct.pack("<HHH", 6, 8, 4)
    data[12:16] = struct.pack("<i", 12 - 8)
    data += b"\0" * 2
    buffer = flatbuffer.FlatBuffer(bytes(data))
    table = flatbuffer.Table(buffer, 12, 8, 6, 8, "t", 0)
    with pytest.raises(RnnportError, match=r"t.child: an offset of 0 .* never at itself"):
        table.table(flatbuffer.slot(0), "child")


def test_a_vector_claiming_2_to_the_31_elements() -> None:
    content = _vector_model(1 << 31)
    tracemalloc.start()
    with pytest.raises(RnnportError, match=r"vector of 2,147,483,648 int32 runs past the end of the"):
        tflite_schema.decode_model(content, source="model.tflite")
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()


def _vector_model(count: int) -> bytes:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    builder = flatbuffers.Builder(0)
    schema.SubGraphStartInputsVector(builder, 2)
    builder.PrependInt32(0)
    builder.PrependInt32(0)
    inputs = builder.EndVector()
    schema.SubGraphStart(builder)
    schema.SubGraphAddInputs(builder, inputs)
    graph = schema.SubGraphEnd(builder)
    schema.ModelStartSubgraphsVector(builder, 1)
    builder.PrependUOffsetTRelative(graph)
    graphs = builder.EndVector()
    schema.ModelStart(builder)
    schema.ModelAddSubgraphs(builder, graphs)
    builder.Finish(schema.ModelEnd(builder), file_identifier=b"TFL3")
    data = bytearray(builder.Output())
    marker = struct.pack("<Iii", 2, 0, 0)
    position = data.find(marker)
    data[position:position + 4] = struct.pack("<I", count)
    return bytes(data)


def test_the_example_message() -> None:
    with pytest.raises(RnnportError, match=r"^model.tflite: subgraphs\[0\].inputs: vector of 2,147,483,648 "
                                           r"int32 runs past the end of the [\d,]+-byte file$"):
        tflite_schema.decode_model(_vector_model(1 << 31), source="model.tflite")


def test_many_tables_sharing_one_vector_exhaust_the_budget() -> None:
    # N buffers, all pointing at one data vector of M bytes: N*M reads from N*4 + M bytes.
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    builder = flatbuffers.Builder(0)
    data = builder.CreateNumpyVector(np.arange(20_000, dtype=np.uint8))
    schema.BufferStart(builder)
    schema.BufferAddData(builder, data)
    buffer = schema.BufferEnd(builder)
    schema.ModelStartBuffersVector(builder, 5000)
    for _ in range(5000):
        builder.PrependUOffsetTRelative(buffer)
    buffers = builder.EndVector()
    schema.ModelStart(builder)
    schema.ModelAddBuffers(builder, buffers)
    builder.Finish(schema.ModelEnd(builder), file_identifier=b"TFL3")
    started = time.monotonic()
    with pytest.raises(RnnportError, match="visits per byte"):
        tflite_schema.decode_model(bytes(builder.Output()))
    assert time.monotonic() - started < 5


def test_deeply_nested_tables_stop_at_the_depth_limit() -> None:
    # A chain of tables, each field 0 pointing forward to the next, far deeper than MAX_DEPTH.
    depth = flatbuffer.MAX_DEPTH + 10
    parts = bytearray(_file(8, 0))
    vtable_at = len(parts)
    parts += struct.pack("<HHH", 6, 8, 4) + b"\0\0"
    for _ in range(depth):
        position = len(parts)
        parts += struct.pack("<i", position - vtable_at) + struct.pack("<I", 4)  # the next table
    parts[0:4] = struct.pack("<I", 16)
    buffer = flatbuffer.FlatBuffer(bytes(parts) + b"\0" * 8)
    table = buffer.root("t")
    with pytest.raises(RnnportError, match=f"nested more than {flatbuffer.MAX_DEPTH} deep"):
        for _ in range(depth):
            child = table.table(flatbuffer.slot(0), "next")
            assert child is not None
            table = child
