"""``rnnport.io.tfproto``: TensorFlow's protos decoded without TensorFlow.

Expected values come from TensorFlow itself: protos built with its own Python classes and
files it wrote (a SavedModel, TF2 checkpoints, a Keras 2 SavedModel), compared field by field
with what protobuf parses; tensors against ``tf.io.parse_tensor``, which runs TensorFlow's
C++ ``Tensor::FromProto`` (the padding rule included). Damaged inputs are hand-encoded, so
those tests run without TensorFlow.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rnnport.errors import DTypeError, FormatError, RnnportError, UnsupportedFeatureError
from rnnport.io import _proto, tfproto
from rnnport.io.tensorbundle import Bundle, write_bundle

# -- a tiny encoder, for the damaged inputs (no TensorFlow needed) ------------------------------


def field(number: int, value: int | bytes, wire: int | None = None) -> bytes:
    """One field: an int as a varint, bytes as length-delimited (or ``wire`` forced)."""
    if isinstance(value, int):
        return _proto.key(number, 0 if wire is None else wire) + _proto.varint(value)
    return _proto.key(number, 2 if wire is None else wire) + _proto.varint(len(value)) + value


def tensor_bytes(dtype: int, shape: tuple[int, ...], *fields: bytes) -> bytes:
    dims = b"".join(field(2, field(1, size)) for size in shape)
    return field(1, dtype) + field(2, dims) + b"".join(fields)


def node_bytes(name: str, op: str, **attrs: bytes) -> bytes:
    entries = b"".join(field(5, field(1, key.encode()) + field(2, value))
                       for key, value in attrs.items())
    return field(1, name.encode()) + field(2, op.encode()) + entries


SMALL_NODE = node_bytes(
    "rnn/kernel", "Const",
    dtype=field(6, 1),
    value=field(8, tensor_bytes(1, (2, 2), field(4, struct.pack("<4f", 1, 2, 3, 4)))),
    shape=field(7, field(2, field(1, 2)) + field(2, field(1, (1 << 64) - 1))),
    strides=field(1, field(3, b"\x01\x02")))


def test_a_hand_made_node_reads() -> None:
    node = tfproto.decode_node_def(SMALL_NODE)
    assert (node.name, node.op) == ("rnn/kernel", "Const")
    assert node.attr["dtype"] == tfproto.AttrValue("type", 1)
    assert node.attr["shape"] == tfproto.AttrValue("shape", (2, -1))
    assert node.attr["strides"].value == tfproto.AttrList(i=(1, 2))
    value = node.attr["value"].value
    assert isinstance(value, tfproto.TensorValue) and value.dtype_name == "DT_FLOAT"
    array = value.numpy()
    np.testing.assert_array_equal(array, [[1, 2], [3, 4]])
    assert array.dtype == np.float32 and not array.flags.writeable


def test_unknown_fields_and_groups_are_skipped() -> None:
    unknown = field(99, 7) + field(98, b"later") + _proto.key(97, 5) + b"\0\0\0\0" \
        + _proto.key(96, 3) + field(1, 5) + _proto.key(95, 3) + _proto.key(95, 4) + _proto.key(96, 4)
    assert tfproto.decode_node_def(unknown + SMALL_NODE + unknown) == tfproto.decode_node_def(SMALL_NODE)


def test_packed_and_unpacked_repeated_scalars_mix() -> None:
    floats = b"".join(_proto.key(5, 5) + struct.pack("<f", v) for v in (1.5, 2.5)) \
        + field(5, struct.pack("<2f", 3.5, 4.5)) + _proto.key(5, 5) + struct.pack("<f", 5.5)
    np.testing.assert_array_equal(tfproto.decode_tensor(tensor_bytes(1, (5,), floats)),
                                  [1.5, 2.5, 3.5, 4.5, 5.5])
    negative = (1 << 64) - 3  # -3 as protobuf writes an int32: ten bytes
    ints = field(7, 1) + field(7, _proto.varint(300) + _proto.varint(negative)) + field(7, negative)
    np.testing.assert_array_equal(tfproto.decode_tensor(tensor_bytes(3, (4,), ints)), [1, 300, -3, -3])
    many = np.random.default_rng(0).integers(-(1 << 62), 1 << 62, 50_000)
    packed = b"".join(_proto.varint(int(v)) for v in many)
    np.testing.assert_array_equal(tfproto.decode_tensor(tensor_bytes(9, (50_000,), field(10, packed))),
                                  many)


def _raises(data: bytes, decode: Any = tfproto.decode_node_def, match: str | None = None) -> str:
    with pytest.raises(FormatError, match=match) as error:
        decode(data)
    return str(error.value)


def test_truncated_at_every_byte_is_an_error_or_a_shorter_message() -> None:
    for end in range(len(SMALL_NODE)):
        try:
            node = tfproto.decode_node_def(SMALL_NODE[:end])
        except FormatError as error:
            assert str(error).startswith("NodeDef")
        else:
            for attr in node.attr.values():
                if isinstance(attr.value, tfproto.TensorValue):
                    attr.value.numpy()


def test_random_damage_gives_only_rnnport_errors() -> None:
    rng = np.random.default_rng(1)
    graph = field(1, SMALL_NODE) + field(1, node_bytes("x", "Identity", T=field(6, 1)))
    for _ in range(3000):
        data = bytearray(graph)
        for _ in range(int(rng.integers(1, 4))):
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
        try:
            for _, node in tfproto.decode_graph_def(bytes(data)).all_nodes():
                for attr in node.attr.values():
                    if isinstance(attr.value, tfproto.TensorValue):
                        attr.value.numpy()
        except RnnportError:
            pass


@pytest.mark.parametrize(("data", "match"), [
    (field(1, 5) + SMALL_NODE, r"NodeDef: name: field 1 comes as a varint value; expected "
                               r"length-delimited \(it is a string\)"),
    (SMALL_NODE + field(3, 12), r"NodeDef: input: field 3 comes as a varint"),
    (node_bytes("n", "Const", value=field(8, field(1, b"x"))),
     r"NodeDef \('n'\): attr\['value'\]\.tensor\.dtype: field 1 comes as a length-delimited"),
    (field(1, b"x") + _proto.key(2, 2) + _proto.varint(1 << 40) + b"abcd",
     r"NodeDef: a length-delimited field of 1,099,511,627,776 bytes runs past the end of its "
     r"record \(4 bytes left\); the data is truncated or damaged\."),
    (field(1, b"x") + _proto.key(4, 0) + b"\xff" * 11, r"does not fit in 64 bits"),
    (_proto.key(4, 0) + b"\x80", r"a varint runs past the end"),
    (b"\x00\x01", r"a field numbered 0"),
    (_proto.key(5, 6) + b"\x00", r"wire type 6, which protobuf does not define"),
    (_proto.key(5, 4), r"an end-group tag for field 5 without its start"),
    (_proto.key(9, 3) + field(1, 1), r"group 9 has no end-group tag"),
    (field(1, b"\xff\xfe"), r"NodeDef: name: not UTF-8 text"),
    # Below -1 is damage in a tensor's shape; in an attribute's, grappler's symbolic size.
    (node_bytes("n", "Const", x=field(8, field(2, field(2, field(1, (1 << 64) - 5))))),
     r"attr\['x'\]\.tensor\.tensor_shape: dimension sizes \[-5\]"),
    (node_bytes("n", "Const", x=field(7, field(2, b"") * 255)), r"255 dimensions; expected at most 254"),
    (node_bytes("n", "Const", x=field(1, field(3, b"\x80"))),
     r"attr\['x'\]\.list\.i: a packed varint runs past the end of its field"),
    (node_bytes("n", "Const", x=field(1, field(4, b"\0\0\0"))),
     r"attr\['x'\]\.list\.f: a packed field of 3 bytes is not a whole number of 4-byte values"),
])
def test_damaged_messages_name_where(data: bytes, match: str) -> None:
    _raises(data, match=match)


def test_deep_nesting_stops_at_the_limit_quickly() -> None:
    inner = b""
    for _ in range(2_500):  # AttrValue.list.func.attr[a].value: four messages a round, 10,000 deep
        entry = field(1, b"a") + field(2, inner)
        inner = field(1, field(9, field(1, b"f") + field(2, entry)))
    start = time.perf_counter()
    message = _raises(inner, tfproto.decode_attr_value, match=r"messages nested more than 100 deep")
    assert message.startswith("AttrValue: list.func[0].attr['a'].list.func[0]")
    assert time.perf_counter() - start < 1.0


def test_a_huge_declared_tensor_is_refused_before_allocating() -> None:
    tracemalloc.start()
    try:
        start = time.perf_counter()
        message = _raises(tensor_bytes(1, (1 << 40,), field(4, b"\0\0\x80?")), tfproto.decode_tensor)
        assert "tensor_content holds 4 bytes, but shape [1099511627776] of DT_FLOAT needs " \
               "4,398,046,511,104 (1,099,511,627,776 × 4); the data is damaged." in message
        # One stored value, repeated by the proto's rule: built only on request, within a bound.
        value = tfproto.decode_tensor_value(tensor_bytes(1, (1 << 40,), field(5, b"\0\0\x80?")))
        assert value.shape == (1 << 40,)
        with pytest.raises(FormatError, match=r"1,099,511,627,776 elements but only 1 are stored; "
                                              r"TensorFlow repeats the last.*max_fill_bytes"):
            value.numpy()
        _raises(tensor_bytes(1, (1 << 31,) * 300, field(5, b"")), tfproto.decode_tensor,
                match="300 dimensions")
        _raises(tensor_bytes(1, (0, 1 << 40, 1 << 40)), tfproto.decode_tensor,
                match=r"shape \[0, 1099511627776, 1099511627776\]; expected dimensions whose product")
        assert time.perf_counter() - start < 1.0
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()


def test_the_fill_rule_and_its_bound() -> None:
    two = tensor_bytes(3, (2, 3), field(7, _proto.varint(7) + _proto.varint(8)))
    np.testing.assert_array_equal(tfproto.decode_tensor(two), [[7, 8, 8], [8, 8, 8]])
    np.testing.assert_array_equal(tfproto.decode_tensor(tensor_bytes(3, (2,))), [0, 0])
    np.testing.assert_array_equal(tfproto.decode_tensor(tensor_bytes(7, (3,), field(8, b"s"))),
                                  np.array([b"s"] * 3, dtype=object))
    assert list(tfproto.decode_tensor(tensor_bytes(7, (2,)))) == [b"", b""]
    with pytest.raises(FormatError, match="max_fill_bytes"):
        tfproto.decode_tensor(two, max_fill_bytes=16)
    assert tfproto.decode_tensor(two, max_fill_bytes=24).shape == (2, 3)


def test_types_without_numbers_are_refused_by_name_only_when_read() -> None:
    graph = field(1, node_bytes("h", "Const", value=field(8, tensor_bytes(20, ())))) \
        + field(1, node_bytes("v", "Const", value=field(8, tensor_bytes(21, (2,))))) \
        + field(1, node_bytes("q", "Const", value=field(8, tensor_bytes(11, (1,), field(7, 3)))))
    nodes = tfproto.decode_graph_def(graph).node
    for node, pattern in zip(nodes, ["DT_RESOURCE, which holds a handle to a resource",
                                     "DT_VARIANT, which holds a variant",
                                     "DT_QINT8, which holds values NumPy has no type for"], strict=True):
        value = node.attr["value"].value
        assert isinstance(value, tfproto.TensorValue)
        with pytest.raises(DTypeError, match=rf"GraphDef: node\[\d\] \('{node.name}'\)\.attr\['value'\]"
                                             rf"\.tensor: a tensor of type {pattern}"):
            value.numpy()
    with pytest.raises(UnsupportedFeatureError, match="string tensor stored in tensor_content"):
        tfproto.decode_tensor(tensor_bytes(7, (1,), field(4, b"\x01a")))


def test_checkpoint_keys_guard_against_cycles_shared_nodes_and_bad_ids() -> None:
    def obj(children: tuple[tuple[int, str], ...] = (), attrs: tuple[str, ...] = ()) -> bytes:
        out = b"".join(field(1, field(1, node_id) + field(2, name.encode())) for node_id, name in children)
        return out + b"".join(field(2, field(1, b"VARIABLE_VALUE") + field(3, key.encode()))
                              for key in attrs)

    graph = field(1, obj(((1, "a"), (2, "b")))) + field(1, obj(((0, "up"), (2, "shared")))) \
        + field(1, obj(((1, "back"),), ("b/.ATTRIBUTES/VARIABLE_VALUE",)))
    assert tfproto.checkpoint_keys(tfproto.decode_object_graph(graph)) == {
        "b": "b/.ATTRIBUTES/VARIABLE_VALUE"}
    bad = tfproto.decode_object_graph(field(1, obj(((5, "x"),))))
    with pytest.raises(FormatError, match=r"^ckpt: nodes\[0\]\.children\[0\] names node 5; "
                                          r"expected one of 0\.\.0"):
        tfproto.checkpoint_keys(bad, where="ckpt")


def test_checkpoint_keys_bound_the_paths_of_a_deep_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    # Node i's one child is node i + 1: the paths' total grows as the chain's length squared.
    chain = b"".join(field(1, field(1, field(1, index + 1) + field(2, b"abcdefgh")))
                     for index in range(2000)) + field(1, b"")
    graph = tfproto.decode_object_graph(chain)
    assert tfproto.checkpoint_keys(graph) == {}  # well inside the budget: no values saved
    monkeypatch.setattr(tfproto, "MAX_PATH_CHARS", 100_000)
    with pytest.raises(FormatError, match=r"^ckpt: the object paths come to more than 100,000 "
                                          r"characters"):
        tfproto.checkpoint_keys(graph, where="ckpt")


def test_inputs_that_are_not_bytes_or_too_big(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="expected the serialized message as bytes, got str"):
        tfproto.decode_graph_def("node")  # type: ignore[arg-type]
    with pytest.raises(FormatError, match="no such file"):
        tfproto.read_graph_def(tmp_path / "missing.pb")
    (tmp_path / "saved_model.pbtxt").write_text("saved_model_schema_version: 1")
    with pytest.raises(UnsupportedFeatureError, match="text format"):
        tfproto.read_saved_model(tmp_path)
    write_bundle(tmp_path / "names", {"rnn/kernel": np.zeros(2, np.float32)})
    with pytest.raises(FormatError, match="no _CHECKPOINTABLE_OBJECT_GRAPH tensor.*name-based"):
        tfproto.read_object_graph(tmp_path / "names")


def test_reading_imports_no_framework_or_protobuf() -> None:
    script = ("import sys, rnnport.io.tfproto as t\n"
              f"t.decode_graph_def({field(1, SMALL_NODE)!r})\n"
              "print([m for m in sys.modules if m.split('.')[0] in "
              "('tensorflow', 'google', 'keras', 'tf_keras', 'torch')])")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -- against TensorFlow ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tf() -> Any:
    return pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def pb(tf: Any) -> SimpleNamespace:
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, tensor_pb2, types_pb2
    from tensorflow.core.protobuf import (
        meta_graph_pb2,
        saved_model_pb2,
        saved_object_graph_pb2,
        trackable_object_graph_pb2,
    )
    try:
        from tf_keras.protobuf import saved_metadata_pb2
    except ImportError:
        saved_metadata_pb2 = None
    return SimpleNamespace(attr_value=attr_value_pb2, graph=graph_pb2, node_def=node_def_pb2,
                           tensor=tensor_pb2, types=types_pb2, meta_graph=meta_graph_pb2,
                           saved_model=saved_model_pb2, saved_object_graph=saved_object_graph_pb2,
                           trackable=trackable_object_graph_pb2, saved_metadata=saved_metadata_pb2)


def test_field_numbers_and_types_match_tensorflow(pb: SimpleNamespace) -> None:
    from google.protobuf import descriptor_pool
    from google.protobuf.descriptor import FieldDescriptor

    types = {getattr(FieldDescriptor, name): name[5:].lower()
             for name in dir(FieldDescriptor) if name.startswith("TYPE_")}
    keras_package = None
    if pb.saved_metadata is not None:
        keras_package = pb.saved_metadata.SavedMetadata.DESCRIPTOR.full_name.rsplit(".", 1)[0]
    checked = 0
    for message, fields in tfproto.FIELDS.items():
        if message.startswith("SavedMetadata"):
            if keras_package is None:
                continue
            name = f"{keras_package}.{message.split('.', 1)[1] if '.' in message else message}"
            descriptor = pb.saved_metadata.DESCRIPTOR.pool.FindMessageTypeByName(name)
        else:
            descriptor = descriptor_pool.Default().FindMessageTypeByName(message)
        for name, ours in fields.items():
            theirs = descriptor.fields_by_name[name]
            repeated = theirs.is_repeated if hasattr(theirs, "is_repeated") \
                else theirs.label == FieldDescriptor.LABEL_REPEATED
            assert (theirs.number, types[theirs.type], repeated) == \
                (ours.number, ours.type, ours.repeated), f"{message}.{name}"
            checked += 1
    assert checked > 150
    assert {value.number: value.name for value in pb.types.DataType.DESCRIPTOR.values} == \
        tfproto.DATA_TYPES


def _shape(proto: Any) -> tuple[int, ...] | None:
    return None if proto.unknown_rank else tuple(dim.size for dim in proto.dim)


def _expected(tf: Any, proto: Any) -> np.ndarray:
    """What TensorFlow's C++ makes of a TensorProto (Tensor::FromProto)."""
    array = tf.io.parse_tensor(proto.SerializeToString(), out_type=tf.dtypes.as_dtype(proto.dtype))
    array = np.asarray(array.numpy(), dtype=object if proto.dtype == 7 else None)
    return array.astype(np.float32) if proto.dtype == tfproto.DT_BFLOAT16 else array


def _same_tensor(tf: Any, ours: tfproto.TensorValue, theirs: Any) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == _shape(theirs.tensor_shape)
    if theirs.dtype not in (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 17, 18, 19, 22, 23):
        with pytest.raises(DTypeError):
            ours.numpy()
        return
    got, want = ours.numpy(), _expected(tf, theirs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def _same_attr(tf: Any, ours: tfproto.AttrValue, theirs: Any) -> None:
    kind = theirs.WhichOneof("value") or ""
    assert ours.kind == kind
    if kind in ("s", "i", "f", "b", "type", "placeholder"):
        assert ours.value == getattr(theirs, kind) and type(ours.value) is type(getattr(theirs, kind))
    elif kind == "shape":
        assert ours.value == _shape(theirs.shape)
    elif kind == "tensor":
        assert isinstance(ours.value, tfproto.TensorValue)
        _same_tensor(tf, ours.value, theirs.tensor)
    elif kind == "func":
        assert isinstance(ours.value, tfproto.NameAttrList)
        _same_func(tf, ours.value, theirs.func)
    elif kind == "list":
        ours_list, theirs_list = ours.value, theirs.list
        assert isinstance(ours_list, tfproto.AttrList)
        for name in ("s", "i", "f", "b", "type"):
            assert list(getattr(ours_list, name)) == list(getattr(theirs_list, name)), name
        assert list(ours_list.shape) == [_shape(shape) for shape in theirs_list.shape]
        assert len(ours_list.tensor) == len(theirs_list.tensor)
        for ours_tensor, theirs_tensor in zip(ours_list.tensor, theirs_list.tensor, strict=True):
            _same_tensor(tf, ours_tensor, theirs_tensor)
        assert len(ours_list.func) == len(theirs_list.func)
        for ours_func, theirs_func in zip(ours_list.func, theirs_list.func, strict=True):
            _same_func(tf, ours_func, theirs_func)


def _same_attrs(tf: Any, ours: Any, theirs: Any) -> None:
    assert set(ours) == set(theirs)
    for key in theirs:
        _same_attr(tf, ours[key], theirs[key])


def _same_func(tf: Any, ours: tfproto.NameAttrList, theirs: Any) -> None:
    assert ours.name == theirs.name
    _same_attrs(tf, ours.attr, theirs.attr)


def _same_node(tf: Any, ours: tfproto.NodeDef, theirs: Any) -> None:
    assert (ours.name, ours.op, ours.input, ours.device) == \
        (theirs.name, theirs.op, tuple(theirs.input), theirs.device)
    _same_attrs(tf, ours.attr, theirs.attr)


def _same_version(ours: tfproto.VersionDef | None, theirs: Any, present: bool) -> None:
    if not present:
        assert ours is None
        return
    assert ours == tfproto.VersionDef(theirs.producer, theirs.min_consumer, tuple(theirs.bad_consumers))


def _same_args(ours: tuple[tfproto.ArgDef, ...], theirs: Any) -> None:
    assert ours == tuple(tfproto.ArgDef(arg.name, arg.type, arg.type_attr, arg.number_attr,
                                        arg.type_list_attr, arg.is_ref) for arg in theirs)


def _same_graph(tf: Any, ours: tfproto.GraphDef, theirs: Any) -> int:
    assert len(ours.node) == len(theirs.node)
    for ours_node, theirs_node in zip(ours.node, theirs.node, strict=True):
        _same_node(tf, ours_node, theirs_node)
    _same_version(ours.versions, theirs.versions, theirs.HasField("versions"))
    assert ours.version == theirs.version
    assert len(ours.library.function) == len(theirs.library.function)
    for ours_function, theirs_function in zip(ours.library.function, theirs.library.function,
                                              strict=True):
        signature = theirs_function.signature
        assert ours_function.signature.name == signature.name
        _same_args(ours_function.signature.input_arg, signature.input_arg)
        _same_args(ours_function.signature.output_arg, signature.output_arg)
        _same_attrs(tf, ours_function.attr, theirs_function.attr)
        assert ours_function.ret == dict(theirs_function.ret)
        assert ours_function.control_ret == dict(theirs_function.control_ret)
        assert len(ours_function.node_def) == len(theirs_function.node_def)
        for ours_node, theirs_node in zip(ours_function.node_def, theirs_function.node_def, strict=True):
            _same_node(tf, ours_node, theirs_node)
    return sum(1 for _ in ours.all_nodes())


DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
          "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "string"]


def _values(tf: Any, name: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(len(name))
    count = int(np.prod(shape))
    if name == "string":
        return np.array([bytes(rng.integers(0, 256, i % 4)) for i in range(count)],
                        dtype=object).reshape(shape)
    if name == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    dtype = tf.dtypes.as_dtype(name)
    if dtype.is_complex:
        return (rng.normal(size=shape) + 1j * rng.normal(size=shape)).astype(dtype.as_numpy_dtype)
    if dtype.is_integer:
        return rng.integers(dtype.min, dtype.max, shape, dtype=np.int64, endpoint=True).astype(
            dtype.as_numpy_dtype) if dtype.size < 8 else rng.integers(
            dtype.min, dtype.max, shape, dtype=dtype.as_numpy_dtype)
    return tf.constant(rng.normal(size=shape) * 100, dtype=dtype).numpy()


@pytest.mark.parametrize("name", DTYPES)
def test_tensors_of_every_type_as_tensorflow_makes_them(tf: Any, pb: SimpleNamespace, name: str) -> None:
    for shape in [(2, 3), (), (0, 4), (5,)]:
        values = _values(tf, name, shape)
        proto = tf.make_tensor_proto(values, dtype=tf.dtypes.as_dtype(name))
        ours = tfproto.decode_tensor_value(proto.SerializeToString())
        _same_tensor(tf, ours, proto)
        reference = tf.make_ndarray(proto)
        np.testing.assert_array_equal(ours.numpy(), reference.astype(np.float32)
                                      if name == "bfloat16" else reference)
        if name != "string":  # the raw form too, whatever make_tensor_proto chose
            raw = pb.tensor.TensorProto(dtype=proto.dtype, tensor_shape=proto.tensor_shape,
                                        tensor_content=np.ascontiguousarray(values).tobytes())
            _same_tensor(tf, tfproto.decode_tensor_value(raw.SerializeToString()), raw)


def _unpacked(proto: Any, field_name: str) -> bytes:
    """``proto`` serialized with its typed list written one field per value."""
    spec = tfproto.FIELDS["tensorflow.TensorProto"][field_name]
    rest = type(proto)()
    rest.CopyFrom(proto)
    rest.ClearField(field_name)
    out = rest.SerializeToString()
    for value in getattr(proto, field_name):
        if spec.type == "float":
            out += _proto.key(spec.number, 5) + struct.pack("<f", value)
        elif spec.type == "double":
            out += _proto.key(spec.number, 1) + struct.pack("<d", value)
        elif spec.type == "bytes":
            out += field(spec.number, value)
        else:
            out += _proto.key(spec.number, 0) + _proto.varint(int(value))
    return out


@pytest.mark.parametrize("name", DTYPES)
def test_typed_value_fields_and_the_padding_rule(tf: Any, pb: SimpleNamespace, name: str) -> None:
    dtype = tf.dtypes.as_dtype(name)
    values = _values(tf, name, (4,))
    if name in ("float16", "bfloat16"):
        # The bit patterns as TensorFlow's own writer stores them: int32s, sign-extended or not.
        bits = tf.bitcast(tf.constant(values, dtype), tf.uint16).numpy().astype(np.int64)
        typed = {"half_val": [int(b) - (1 << 16) if b & 0x8000 and i % 2 else int(b)
                              for i, b in enumerate(bits)]}
    elif name in ("complex64", "complex128"):
        pairs = [part for value in values for part in (value.real, value.imag)]
        typed = {"scomplex_val" if name == "complex64" else "dcomplex_val": pairs}
    else:
        field_name = {"float32": "float_val", "float64": "double_val", "int64": "int64_val",
                      "bool": "bool_val", "string": "string_val", "uint32": "uint32_val",
                      "uint64": "uint64_val"}.get(name, "int_val")
        typed = {field_name: values.tolist()}
    (field_name, listed), = typed.items()
    per_value = 2 if name.startswith("complex") else 1
    for shape, keep in [((4,), 4), ((2, 3), 4), ((2, 2), 1), ((3,), 0), ((2,), 4), ((), 1)]:
        proto = pb.tensor.TensorProto(dtype=dtype.as_datatype_enum,
                                      tensor_shape=tf.TensorShape(shape).as_proto())
        getattr(proto, field_name).extend(listed[:keep * per_value])
        _same_tensor(tf, tfproto.decode_tensor_value(proto.SerializeToString()), proto)
        # The same values unpacked, one field each (legal on the wire; protobuf reads both).
        unpacked = _unpacked(proto, field_name)
        reparsed = pb.tensor.TensorProto.FromString(unpacked)
        assert reparsed == proto
        np.testing.assert_array_equal(tfproto.decode_tensor(unpacked), _expected(tf, reparsed))


def test_every_kind_of_attr_value(tf: Any, pb: SimpleNamespace) -> None:
    AttrValue = pb.attr_value.AttrValue
    tensor = tf.make_tensor_proto(np.arange(6, dtype=np.float32).reshape(2, 3))
    shape = tf.TensorShape([None, 3]).as_proto()
    func = pb.attr_value.NameAttrList(name="f", attr={"T": AttrValue(type=1),
                                                     "inner": AttrValue(list=AttrValue.ListValue(i=[1]))})
    values = [
        AttrValue(), AttrValue(s=b"\x00bytes\xff"), AttrValue(i=-(1 << 40)), AttrValue(f=0.1),
        AttrValue(b=True), AttrValue(type=14), AttrValue(shape=shape),
        AttrValue(shape=tf.TensorShape(None).as_proto()), AttrValue(tensor=tensor),
        AttrValue(placeholder="T"), AttrValue(func=func), AttrValue(list=AttrValue.ListValue()),
        AttrValue(list=AttrValue.ListValue(
            s=[b"a", b""], i=[-1, 1 << 40, 3], f=[0.5, -1e30], b=[True, False], type=[1, 19],
            shape=[shape, tf.TensorShape([]).as_proto()], tensor=[tensor, tensor], func=[func])),
    ]
    for value in values:
        _same_attr(tf, tfproto.decode_attr_value(value.SerializeToString()), value)
    assert tfproto.decode_shape(shape.SerializeToString()) == (-1, 3)
    assert tfproto.decode_shape(tf.TensorShape(None).as_proto().SerializeToString()) is None
    # A oneof: the member given last counts; a message given twice merges.
    first, second = AttrValue(list=AttrValue.ListValue(i=[1])), AttrValue(list=AttrValue.ListValue(i=[2]))
    for pieces in [(first, second), (AttrValue(s=b"x"), AttrValue(i=3)), (first, AttrValue(i=3), second),
                   (AttrValue(i=3), AttrValue(s=b"y"))]:
        data = b"".join(piece.SerializeToString() for piece in pieces)
        _same_attr(tf, tfproto.decode_attr_value(data), AttrValue.FromString(data))
    node = pb.node_def.NodeDef(name="n", attr={"a": AttrValue(i=1)})
    again = pb.node_def.NodeDef(attr={"a": AttrValue(i=2)})
    data = node.SerializeToString() + again.SerializeToString()
    _same_node(tf, tfproto.decode_node_def(data), pb.node_def.NodeDef.FromString(data))


def test_a_frozen_style_graph(tf: Any, pb: SimpleNamespace) -> None:
    with tf.Graph().as_default() as graph:
        x = tf.compat.v1.placeholder(tf.float32, [None, 4, 3], name="x")
        weights = {name: tf.constant(np.random.default_rng(0).normal(size=size).astype(np.float32),
                                     name=f"rnn/lstm_cell/{name}")
                   for name, size in [("kernel", (5, 8)), ("bias", (8,)), ("wci", (2,)),
                                      ("wcf", (2,)), ("wco", (2,))]}
        zeros = tf.zeros([3, 2], name="zeros")
        tf.raw_ops.BlockLSTM(seq_len_max=tf.constant(4, tf.int64), x=tf.transpose(x, [1, 0, 2]),
                             cs_prev=zeros, h_prev=zeros, w=weights["kernel"], wci=weights["wci"],
                             wcf=weights["wcf"], wco=weights["wco"], b=weights["bias"], forget_bias=1.0,
                             cell_clip=3.0, use_peephole=True, name="rnn/BlockLSTM")
        tf.concat([tf.constant(["a", "bc"]), tf.constant([b"\xff"])], 0, name="strings")
        tf.constant(0.0, shape=[64, 64], name="filled")
    theirs = graph.as_graph_def()
    data = theirs.SerializeToString()
    ours = tfproto.decode_graph_def(data)
    assert _same_graph(tf, ours, theirs) == len(theirs.node)
    block = next(node for node in ours.node if node.op == "BlockLSTM")
    assert (block.attr["forget_bias"].value, block.attr["cell_clip"].value,
            block.attr["use_peephole"].value) == (1.0, 3.0, True)
    # Every prefix: a graph of fewer nodes, or an error.
    small = pb.graph.GraphDef(node=theirs.node[:3]).SerializeToString()
    for end in range(len(small)):
        try:
            tfproto.decode_graph_def(small[:end])
        except FormatError:
            pass


def test_a_saved_model_of_a_module(tf: Any, pb: SimpleNamespace, tmp_path: Path) -> None:
    class Inner(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.kernel = tf.Variable(np.arange(6, dtype=np.float32).reshape(2, 3), name="kernel")

    class Outer(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Inner()
            self.bias = tf.Variable(np.ones(2, np.float64), trainable=False, name="bias")
            self.table = [self.inner, {"step": tf.Variable(3, name="step")}]

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
        def __call__(self, x: Any) -> Any:
            return tf.matmul(x, self.inner.kernel, transpose_b=True)

    tf.saved_model.save(Outer(), str(tmp_path / "model"))
    data = (tmp_path / "model" / "saved_model.pb").read_bytes()
    theirs = pb.saved_model.SavedModel.FromString(data)
    ours = tfproto.read_saved_model(tmp_path / "model")
    assert {"user_object", "variable", "function", "bare_concrete_function"} <= \
        _same_saved_model(tf, ours, theirs)
    meta = theirs.meta_graphs[0]
    assert tfproto.decode_meta_graph_def(meta.SerializeToString()) == ours.meta_graphs[0]
    assert tfproto.decode_saved_object_graph(meta.object_graph_def.SerializeToString()) == \
        ours.meta_graphs[0].object_graph_def
    variables = {node.variable.name: node.variable for node in ours.meta_graphs[0].object_graph_def.nodes
                 if node.kind == "variable" and node.variable is not None}
    assert variables["kernel"] == tfproto.SavedVariable("kernel", 1, (2, 3), True, 0, 0, "")
    assert variables["bias"].dtype == 2 and not variables["bias"].trainable
    assert variables["step"].shape == ()
    bound = ours.meta_graphs[0].object_graph_def.bound_inputs
    assert bound == {name: tuple(function.bound_inputs) for name, function in
                     meta.object_graph_def.concrete_functions.items()}
    assert any(bound.values())  # __call__ captures the kernel
    with pytest.raises(FormatError, match=r"^saved_model\.pb: a length-delimited field of [\d,]+ "
                                          r"bytes runs past the end of its record"):
        tfproto.decode_saved_model(data[:len(data) // 2], where="saved_model.pb")


def _same_saved_model(tf: Any, ours: tfproto.SavedModel, theirs: Any) -> set[str]:
    """Every field compared; the kinds of objects seen returned."""
    kinds: set[str] = set()
    assert ours.saved_model_schema_version == theirs.saved_model_schema_version
    assert len(ours.meta_graphs) == len(theirs.meta_graphs)
    for meta, their_meta in zip(ours.meta_graphs, theirs.meta_graphs, strict=True):
        info = their_meta.meta_info_def
        assert meta.meta_info_def == tfproto.MetaInfoDef(
            info.meta_graph_version, tuple(info.tags), info.tensorflow_version, info.tensorflow_git_version)
        _same_graph(tf, meta.graph_def, their_meta.graph_def)
        saver = their_meta.saver_def
        assert meta.saver_def == (tfproto.SaverDef(
            saver.filename_tensor_name, saver.save_tensor_name, saver.restore_op_name, saver.max_to_keep,
            saver.sharded, saver.keep_checkpoint_every_n_hours, saver.version)
            if their_meta.HasField("saver_def") else None)
        assert sorted(meta.signature_def) == sorted(their_meta.signature_def)
        assert meta.object_graph_def is not None and their_meta.HasField("object_graph_def")
        kinds |= _same_object_graph(meta.object_graph_def, their_meta.object_graph_def)
    return kinds


def _references(theirs: Any) -> tuple[tfproto.ObjectReference, ...]:
    return tuple(tfproto.ObjectReference(ref.node_id, ref.local_name) for ref in theirs)


def _slots(theirs: Any) -> tuple[tfproto.SlotVariableReference, ...]:
    return tuple(tfproto.SlotVariableReference(slot.original_variable_node_id, slot.slot_name,
                                               slot.slot_variable_node_id) for slot in theirs)


def _same_object_graph(ours: tfproto.SavedObjectGraph, theirs: Any) -> set[str]:
    assert sorted(ours.concrete_functions) == sorted(theirs.concrete_functions)
    assert len(ours.nodes) == len(theirs.nodes)
    kinds = set()
    for node, their_node in zip(ours.nodes, theirs.nodes, strict=True):
        assert node.children == _references(their_node.children)
        assert node.dependencies == _references(their_node.dependencies)
        assert node.slot_variables == _slots(their_node.slot_variables)
        assert node.registered_name == their_node.registered_name
        kind = their_node.WhichOneof("kind") or ""
        kinds.add(kind)
        assert node.kind == kind
        value = getattr(their_node, kind) if kind else None
        expected: object = None
        if kind == "user_object":
            expected = tfproto.SavedUserObject(
                value.identifier, tfproto.VersionDef(value.version.producer, value.version.min_consumer,
                                                     tuple(value.version.bad_consumers))
                if value.HasField("version") else None, value.metadata)
        elif kind == "variable":
            expected = tfproto.SavedVariable(value.name, value.dtype, _shape(value.shape), value.trainable,
                                             value.synchronization, value.aggregation, value.device)
        elif kind == "function":
            expected = tfproto.SavedFunction(tuple(value.concrete_functions))
        elif kind == "bare_concrete_function":
            expected = tfproto.SavedBareConcreteFunction(
                value.concrete_function_name, tuple(value.argument_keywords),
                value.allowed_positional_arguments)
        elif kind == "constant":
            expected = tfproto.SavedConstant(value.operation)
        elif kind == "resource":
            expected = tfproto.SavedResource(value.device)
        elif kind == "asset":
            expected = value.asset_file_def_index
        elif kind == "captured_tensor":
            expected = tfproto.CapturedTensor(value.name, value.concrete_function)
        for name in ("user_object", "variable", "function", "bare_concrete_function", "constant",
                     "resource", "asset", "captured_tensor"):
            assert getattr(node, name) == (expected if name == kind else None), name
    return kinds


def _same_trackable(ours: tfproto.TrackableObjectGraph, theirs: Any) -> None:
    assert len(ours.nodes) == len(theirs.nodes)
    for node, their_node in zip(ours.nodes, theirs.nodes, strict=True):
        assert node.children == _references(their_node.children)
        assert node.slot_variables == _slots(their_node.slot_variables)
        assert node.attributes == tuple(tfproto.SerializedTensor(a.name, a.full_name, a.checkpoint_key)
                                        for a in their_node.attributes)
        assert node.registered_saver == their_node.registered_saver.name
        assert node.has_checkpoint_values == (their_node.has_checkpoint_values.value
                                              if their_node.HasField("has_checkpoint_values") else None)


def _keys_match_the_bundle(bundle: Bundle, keys: dict[str, str]) -> None:
    assert sorted(keys.values()) == sorted(name for name in bundle if name != tfproto.OBJECT_GRAPH_KEY)
    for path, key in keys.items():
        assert key in (f"{path}/.ATTRIBUTES/VARIABLE_VALUE", path), (path, key)


def test_a_tf2_checkpoint_and_its_object_paths(tf: Any, pb: SimpleNamespace, tmp_path: Path) -> None:
    tf_keras = pytest.importorskip("tf_keras")
    module = tf.Module()
    module.kernel = tf.Variable(np.ones((2, 3), np.float32), name="kernel")
    module.same = module.kernel  # one variable, two paths
    variable = tf.Variable(np.arange(4.0), name="v")
    optimizer = tf_keras.optimizers.legacy.Adam()
    optimizer.apply_gradients([(tf.ones(4, tf.float64), variable)])
    prefix = tf.train.Checkpoint(v=variable, module=module, opt=optimizer).write(str(tmp_path / "c"))
    bundle = Bundle(prefix)
    stored = bundle.read(tfproto.OBJECT_GRAPH_KEY).reshape(-1)[0]
    ours = tfproto.read_object_graph(bundle)
    _same_trackable(ours, pb.trackable.TrackableObjectGraph.FromString(stored))
    keys = tfproto.checkpoint_keys(ours)
    _keys_match_the_bundle(bundle, keys)
    assert keys["v"] == "v/.ATTRIBUTES/VARIABLE_VALUE"
    assert keys["module/kernel"] == "module/kernel/.ATTRIBUTES/VARIABLE_VALUE"
    assert "module/same" not in keys
    assert keys["v/.OPTIMIZER_SLOT/opt/m"] == "v/.OPTIMIZER_SLOT/opt/m/.ATTRIBUTES/VARIABLE_VALUE"
    np.testing.assert_array_equal(bundle.read(keys["v"]), variable.numpy())
    for end in range(len(stored)):  # every prefix of a real object graph
        try:
            tfproto.checkpoint_keys(tfproto.decode_object_graph(stored[:end]))
        except FormatError:
            pass

    # Keras 2: save_weights in the TF format, and model.save's SavedModel with keras_metadata.pb.
    model = tf_keras.Sequential([tf_keras.layers.LSTM(4, input_shape=(None, 3))])
    model.save_weights(str(tmp_path / "weights" / "ckpt"))
    bundle = Bundle(tmp_path / "weights" / "ckpt")
    keys = tfproto.checkpoint_keys(tfproto.read_object_graph(bundle))
    _keys_match_the_bundle(bundle, keys)
    np.testing.assert_array_equal(bundle.read(keys["layer_with_weights-0/cell/kernel"]),
                                  model.layers[0].cell.kernel.numpy())
    model.save(str(tmp_path / "keras"), save_format="tf")
    data = (tmp_path / "keras" / "saved_model.pb").read_bytes()
    _same_saved_model(tf, tfproto.decode_saved_model(data), pb.saved_model.SavedModel.FromString(data))
    if pb.saved_metadata is not None:
        raw = (tmp_path / "keras" / "keras_metadata.pb").read_bytes()
        theirs = pb.saved_metadata.SavedMetadata.FromString(raw)
        ours_metadata = tfproto.read_saved_metadata(tmp_path / "keras" / "keras_metadata.pb")
        assert ours_metadata.nodes == tuple(tfproto.SavedMetadataNode(
            node.node_id, node.node_path, node.identifier, node.metadata,
            tfproto.VersionDef(node.version.producer, node.version.min_consumer,
                               tuple(node.version.bad_consumers)) if node.HasField("version") else None)
            for node in theirs.nodes)
        assert any(node.identifier == "_tf_keras_rnn_layer" and '"class_name": "LSTM"' in node.metadata
                   for node in ours_metadata.nodes)


def test_errors_name_the_path_to_the_damage(tf: Any, pb: SimpleNamespace) -> None:
    good = tf.make_tensor_proto(np.zeros((2, 2), np.float32))
    bad = pb.tensor.TensorProto()
    bad.CopyFrom(good)
    bad.tensor_content = good.tensor_content[:-1]
    graph = pb.graph.GraphDef(node=[pb.node_def.NodeDef(name=f"n{i}", op="NoOp") for i in range(12)]
                              + [pb.node_def.NodeDef(name="rnn/kernel", op="Const",
                                                     attr={"value": pb.attr_value.AttrValue(tensor=bad)})])
    model = pb.saved_model.SavedModel(meta_graphs=[pb.meta_graph.MetaGraphDef(graph_def=graph)])
    with pytest.raises(FormatError) as error:
        tfproto.decode_saved_model(model.SerializeToString(), where="saved_model.pb")
    assert str(error.value) == (
        "saved_model.pb: meta_graphs[0].graph_def.node[12] ('rnn/kernel').attr['value'].tensor: "
        "tensor_content holds 15 bytes, but shape [2, 2] of DT_FLOAT needs 16 (4 × 4); the data is "
        "damaged.")
