"""TensorFlow's protocol buffers, decoded with NumPy and the standard library alone.

What a TF2 checkpoint, a SavedModel folder and a frozen graph hold besides raw tensors is
protocol buffers. This module reads the messages rnnport needs from them into frozen
dataclasses, without TensorFlow or protobuf installed:

========================  ===================================  ===============================
message                   where it is                          decoded by
========================  ===================================  ===============================
``TensorProto``           ``Const`` nodes' ``value`` attr       :func:`decode_tensor` (an array),
                                                               :func:`decode_tensor_value`
``TensorShapeProto``      attrs, variables                     :func:`decode_shape`
``AttrValue``             every node's ``attr`` map            :func:`decode_attr_value`
``NodeDef``               graphs and functions                 :func:`decode_node_def`
``GraphDef``              a frozen graph ``.pb``; a            :func:`decode_graph_def`,
                          MetaGraphDef's ``graph_def``          :func:`read_graph_def`
``SavedModel``            ``saved_model.pb``                   :func:`decode_saved_model`,
                                                               :func:`read_saved_model`
``MetaGraphDef``          a SavedModel's ``meta_graphs``        :func:`decode_meta_graph_def`
``SavedObjectGraph``      a MetaGraphDef's ``object_graph_def`` :func:`decode_saved_object_graph`
``TrackableObjectGraph``  a TF2 checkpoint's                   :func:`decode_object_graph`,
                          ``_CHECKPOINTABLE_OBJECT_GRAPH``      :func:`read_object_graph`,
                          string tensor                        :func:`checkpoint_keys`
``SavedMetadata``         Keras 2's ``keras_metadata.pb``       :func:`decode_saved_metadata`,
                                                               :func:`read_saved_metadata`
========================  ===================================  ===============================

Every field number and type is written down in :data:`FIELDS` (copied from TensorFlow
2.21's own descriptors; a test compares them). Only the fields listed there are read;
every other field is skipped, as protobuf skips fields it does not know, so files from
newer TensorFlow versions read too.

The wire format, in the part these messages use
------------------------------------------------
A message is a sequence of fields, each a *tag* (a varint: ``number << 3 | wire type``)
and a value: wire type 0 a varint (int32, int64, uint32, uint64, bool, enum; a negative
int32 or int64 takes ten bytes, two's complement in 64 bits), 1 eight little-endian bytes
(double), 5 four (float), 2 a varint length and that many bytes (string, bytes, an
embedded message, or a *packed* repeated scalar: the values back to back). Groups (wire
types 3 and 4) belong to proto2 and are skipped whole. The rules a reader must keep:

* A repeated scalar may come packed (one wire-type-2 field) or unpacked (one field per
  value), or as a mix of both; all are legal and mean the concatenation, in order.
* A singular scalar or string given more than once: the last one counts. A singular
  *message* given more than once: the pieces merge (as if concatenated).
* A ``oneof`` (``AttrValue``'s value, ``SavedObject``'s kind): the member given last
  counts, and a message member merges only the pieces after any other member.
* A map (``NodeDef.attr``) is a repeated entry message with a ``key`` (1) and a
  ``value`` (2); a key given twice: the last entry counts.
* Fields may come in any order; a missing field has its zero value (0, ``""``, empty).
* A known field with the wrong wire type is refused here as damage (protobuf's own
  parsers would keep it as an unknown field and read the zero value instead).

``TensorProto``, the one message that holds numbers
---------------------------------------------------
``dtype`` (a ``DataType``, :data:`DATA_TYPES`) and ``tensor_shape`` (absent: a scalar)
say what it holds. The values are either ``tensor_content``, the raw little-endian
array, which must hold exactly ``elements × item size`` bytes, or one typed list
(``float_val``, ``double_val``, ``int_val`` for int32/int16/int8/uint8/uint16,
``int64_val``, ``uint32_val``, ``uint64_val``, ``bool_val``, ``string_val``,
``scomplex_val``/``dcomplex_val`` as (real, imaginary) pairs, and ``half_val`` for half
*and* bfloat16: int32s whose low 16 bits are the bit pattern). When ``tensor_content`` is
not empty the typed lists are ignored. A typed list shorter than the shape is filled by
repeating its last value (an empty one: zeros); a longer one is cut to the shape, as
TensorFlow does. bfloat16 comes back as float32 (exactly), strings as ``bytes`` objects.

Limits (what keeps a damaged or hostile file from costing more than its size)
------------------------------------------------------------------------------
* Input of at most :data:`MAX_MESSAGE_BYTES` (protobuf's own limit, 2 GiB - 1); every
  length is checked against the bytes left before anything is sliced.
* Messages nested at most :data:`MAX_DEPTH` deep (protobuf's default recursion limit),
  counted across ``AttrValue`` lists and function attributes alike. Nesting never takes
  Python's stack: the messages that can nest are built by generators kept on an explicit
  stack, so how deep a file nests, and where the caller's own stack stands, never meet
  Python's recursion limit.
* At most :data:`MAX_ITEMS` elements in one repeated message or string field, and shapes
  of at most :data:`MAX_RANK` dimensions (TensorFlow's own limit).
* Memory in proportion to the input, counted as it is built: a field's occurrence is kept
  as one 8-byte number until its value is asked for; a message given in many pieces is read
  piece by piece, never joined into a copy; empty messages of one kind share one object;
  a name is cut short where it is repeated in the place of the messages under it. Every
  message built is charged to the read's ``expansion`` limit (:mod:`rnnport.budget`) as
  CPython lays it out, about: 64 bytes a message, 8 a field value, 56 a string's object, a
  tensor's place and array. Decoded messages may take :data:`DECODE_SCALE` times what the
  limit allows for arrays (real graphs take about 8 bytes a byte of input); past that the
  decode is a :class:`~rnnport.errors.LimitError` that names the limit.
* Strings must be UTF-8 (proto3's rule); varints at most ten bytes (64 bits).
* :func:`checkpoint_keys`'s object paths come to at most :data:`MAX_PATH_CHARS`
  characters in all (each path repeats its parent's, so a deep chain would cost its square).
* A tensor's ``tensor_content`` must match its declared shape before anything is
  allocated; the fill of a short typed list is built only when :meth:`TensorValue.numpy`
  is asked for it, and only up to ``max_fill_bytes`` (:data:`MAX_FILL_BYTES`, 64 MiB, by
  default) and what the reader's ``meter`` has left, so a shape alone never decides how
  much memory is taken; the array is made once and kept, however many nodes read it. A
  shape whose sizes, zeros aside, multiply to 2**59 or more is refused (NumPy could not
  shape it).
* Decoded values are views into the input where they can be (``tensor_content``, packed
  floats): a :class:`TensorValue` kept alive keeps the input's bytes alive.

Every malformed input raises :class:`~rnnport.errors.FormatError` naming where it was,
e.g. ``saved_model.pb: meta_graphs[0].graph_def.node[12] ('rnn/kernel').attr['value']
.tensor: ...``. Tensors of types that hold no plain numbers (``DT_RESOURCE``,
``DT_VARIANT``, quantized and 8-bit float types) decode as :class:`TensorValue` like any
other, and only :meth:`TensorValue.numpy` refuses them (a
:class:`~rnnport.errors.DTypeError`), so one such node does not make a whole graph
unreadable.
"""

from __future__ import annotations

import math
import os
import struct
import sys
from array import array
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import GeneratorType, MappingProxyType
from typing import Any, NamedTuple, TypeVar

import numpy as np

from ..budget import Meter
from ..errors import DTypeError, FormatError, UnsupportedFeatureError
from . import _proto, inputs

__all__ = [
    "DATA_TYPES", "FIELDS", "MAX_DEPTH", "MAX_FILL_BYTES", "MAX_ITEMS", "MAX_MESSAGE_BYTES",
    "MAX_PATH_CHARS", "MAX_RANK", "OBJECT_GRAPH_KEY", "ArgDef", "AttrList", "AttrValue",
    "CapturedTensor", "Field",
    "FunctionDef", "FunctionDefLibrary", "GraphDef", "MetaGraphDef", "MetaInfoDef", "NameAttrList",
    "NodeDef", "ObjectReference", "OpDef", "SavedBareConcreteFunction", "SavedConstant",
    "SavedFunction", "SavedMetadata", "SavedMetadataNode", "SavedModel", "SavedObject",
    "SavedObjectGraph", "SavedResource", "SavedUserObject", "SavedVariable", "SaverDef",
    "SerializedTensor", "SlotVariableReference", "TensorValue", "TrackableObject",
    "TrackableObjectGraph", "VersionDef", "checkpoint_keys", "decode_attr_value",
    "decode_graph_def", "decode_meta_graph_def", "decode_node_def", "decode_object_graph",
    "decode_saved_metadata", "decode_saved_model", "decode_saved_object_graph", "decode_shape",
    "decode_tensor", "decode_tensor_value", "dtype_name", "read_graph_def", "read_object_graph",
    "read_saved_metadata", "read_saved_model",
]

MAX_MESSAGE_BYTES = (1 << 31) - 1
MAX_DEPTH = 100
MAX_ITEMS = 1 << 24
MAX_RANK = 254
MAX_FILL_BYTES = 1 << 26
MAX_PATH_CHARS = 1 << 26  # all of checkpoint_keys's object paths together
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"

T = TypeVar("T")
Bytes = bytes | bytearray | memoryview


# -- the schema: field numbers and types, as TensorFlow's descriptors give them ----------------

@dataclass(frozen=True)
class Field:
    """One field of a message: its number, protobuf's name of its type, whether repeated."""

    number: int
    type: str  # "int32", "int64", "uint32", "uint64", "bool", "enum", "float", "double",
    #            "string", "bytes" or "message"
    repeated: bool = False


def _f(number: int, type_name: str) -> Field:
    return Field(number, type_name)


def _r(number: int, type_name: str) -> Field:
    return Field(number, type_name, repeated=True)


_MAP_OF_MESSAGES = {"key": _f(1, "string"), "value": _f(2, "message")}
_MAP_OF_STRINGS = {"key": _f(1, "string"), "value": _f(2, "string")}
_VERSION_DEF = {"producer": _f(1, "int32"), "min_consumer": _f(2, "int32"),
                "bad_consumers": _r(3, "int32")}
_OBJECT_REFERENCE = "tensorflow.TrackableObjectGraph.TrackableObject.ObjectReference"
_SLOT_REFERENCE = "tensorflow.TrackableObjectGraph.TrackableObject.SlotVariableReference"

# Keyed by the message's full name in TensorFlow; SavedMetadata's messages (whose package
# name depends on which copy of the layers library wrote them) go by their short names.
FIELDS: dict[str, dict[str, Field]] = {
    "tensorflow.TensorProto": {
        "dtype": _f(1, "enum"), "tensor_shape": _f(2, "message"), "tensor_content": _f(4, "bytes"),
        "float_val": _r(5, "float"), "double_val": _r(6, "double"), "int_val": _r(7, "int32"),
        "string_val": _r(8, "bytes"), "scomplex_val": _r(9, "float"), "int64_val": _r(10, "int64"),
        "bool_val": _r(11, "bool"), "dcomplex_val": _r(12, "double"), "half_val": _r(13, "int32"),
        "uint32_val": _r(16, "uint32"), "uint64_val": _r(17, "uint64"),
    },
    "tensorflow.TensorShapeProto": {"dim": _r(2, "message"), "unknown_rank": _f(3, "bool")},
    "tensorflow.TensorShapeProto.Dim": {"size": _f(1, "int64"), "name": _f(2, "string")},
    "tensorflow.AttrValue": {
        "list": _f(1, "message"), "s": _f(2, "bytes"), "i": _f(3, "int64"), "f": _f(4, "float"),
        "b": _f(5, "bool"), "type": _f(6, "enum"), "shape": _f(7, "message"),
        "tensor": _f(8, "message"), "placeholder": _f(9, "string"), "func": _f(10, "message"),
    },
    "tensorflow.AttrValue.ListValue": {
        "s": _r(2, "bytes"), "i": _r(3, "int64"), "f": _r(4, "float"), "b": _r(5, "bool"),
        "type": _r(6, "enum"), "shape": _r(7, "message"), "tensor": _r(8, "message"),
        "func": _r(9, "message"),
    },
    "tensorflow.NameAttrList": {"name": _f(1, "string"), "attr": _r(2, "message")},
    "tensorflow.NameAttrList.AttrEntry": _MAP_OF_MESSAGES,
    "tensorflow.NodeDef": {
        "name": _f(1, "string"), "op": _f(2, "string"), "input": _r(3, "string"),
        "device": _f(4, "string"), "attr": _r(5, "message"),
    },
    "tensorflow.NodeDef.AttrEntry": _MAP_OF_MESSAGES,
    "tensorflow.VersionDef": _VERSION_DEF,
    "tensorflow.GraphDef": {
        "node": _r(1, "message"), "library": _f(2, "message"), "version": _f(3, "int32"),
        "versions": _f(4, "message"),
    },
    "tensorflow.FunctionDefLibrary": {"function": _r(1, "message")},
    "tensorflow.FunctionDef": {
        "signature": _f(1, "message"), "node_def": _r(3, "message"), "ret": _r(4, "message"),
        "attr": _r(5, "message"), "control_ret": _r(6, "message"),
    },
    "tensorflow.FunctionDef.AttrEntry": _MAP_OF_MESSAGES,
    "tensorflow.FunctionDef.RetEntry": _MAP_OF_STRINGS,
    "tensorflow.FunctionDef.ControlRetEntry": _MAP_OF_STRINGS,
    "tensorflow.OpDef": {
        "name": _f(1, "string"), "input_arg": _r(2, "message"), "output_arg": _r(3, "message"),
    },
    "tensorflow.OpDef.ArgDef": {
        "name": _f(1, "string"), "type": _f(3, "enum"), "type_attr": _f(4, "string"),
        "number_attr": _f(5, "string"), "type_list_attr": _f(6, "string"), "is_ref": _f(16, "bool"),
    },
    "tensorflow.SavedModel": {
        "saved_model_schema_version": _f(1, "int64"), "meta_graphs": _r(2, "message"),
    },
    "tensorflow.MetaGraphDef": {
        "meta_info_def": _f(1, "message"), "graph_def": _f(2, "message"),
        "saver_def": _f(3, "message"), "signature_def": _r(5, "message"),
        "object_graph_def": _f(7, "message"),
    },
    "tensorflow.MetaGraphDef.MetaInfoDef": {
        "meta_graph_version": _f(1, "string"), "tags": _r(4, "string"),
        "tensorflow_version": _f(5, "string"), "tensorflow_git_version": _f(6, "string"),
    },
    "tensorflow.MetaGraphDef.SignatureDefEntry": _MAP_OF_MESSAGES,
    "tensorflow.SaverDef": {
        "filename_tensor_name": _f(1, "string"), "save_tensor_name": _f(2, "string"),
        "restore_op_name": _f(3, "string"), "max_to_keep": _f(4, "int32"), "sharded": _f(5, "bool"),
        "keep_checkpoint_every_n_hours": _f(6, "float"), "version": _f(7, "enum"),
    },
    "tensorflow.SavedObjectGraph": {"nodes": _r(1, "message"), "concrete_functions": _r(2, "message")},
    "tensorflow.SavedObjectGraph.ConcreteFunctionsEntry": _MAP_OF_MESSAGES,
    "tensorflow.SavedConcreteFunction": {"bound_inputs": _r(2, "int32")},
    "tensorflow.SavedObject": {
        "children": _r(1, "message"), "slot_variables": _r(3, "message"),
        "user_object": _f(4, "message"), "asset": _f(5, "message"), "function": _f(6, "message"),
        "variable": _f(7, "message"), "bare_concrete_function": _f(8, "message"),
        "constant": _f(9, "message"), "resource": _f(10, "message"),
        "captured_tensor": _f(12, "message"), "registered_name": _f(13, "string"),
        "dependencies": _r(15, "message"),
    },
    _OBJECT_REFERENCE: {"node_id": _f(1, "int32"), "local_name": _f(2, "string")},
    _SLOT_REFERENCE: {
        "original_variable_node_id": _f(1, "int32"), "slot_name": _f(2, "string"),
        "slot_variable_node_id": _f(3, "int32"),
    },
    "tensorflow.SavedUserObject": {
        "identifier": _f(1, "string"), "version": _f(2, "message"), "metadata": _f(3, "string"),
    },
    "tensorflow.SavedAsset": {"asset_file_def_index": _f(1, "int32")},
    "tensorflow.SavedFunction": {"concrete_functions": _r(1, "string")},
    "tensorflow.SavedVariable": {
        "dtype": _f(1, "enum"), "shape": _f(2, "message"), "trainable": _f(3, "bool"),
        "synchronization": _f(4, "enum"), "aggregation": _f(5, "enum"), "name": _f(6, "string"),
        "device": _f(7, "string"),
    },
    "tensorflow.SavedBareConcreteFunction": {
        "concrete_function_name": _f(1, "string"), "argument_keywords": _r(2, "string"),
        "allowed_positional_arguments": _f(3, "int64"),
    },
    "tensorflow.SavedConstant": {"operation": _f(1, "string")},
    "tensorflow.SavedResource": {"device": _f(1, "string")},
    "tensorflow.CapturedTensor": {"name": _f(1, "string"), "concrete_function": _f(2, "string")},
    "tensorflow.TrackableObjectGraph": {"nodes": _r(1, "message")},
    "tensorflow.TrackableObjectGraph.TrackableObject": {
        "children": _r(1, "message"), "attributes": _r(2, "message"),
        "slot_variables": _r(3, "message"), "registered_saver": _f(4, "message"),
        "has_checkpoint_values": _f(5, "message"),
    },
    "tensorflow.TrackableObjectGraph.TrackableObject.SerializedTensor": {
        "name": _f(1, "string"), "full_name": _f(2, "string"), "checkpoint_key": _f(3, "string"),
    },
    "tensorflow.RegisteredSaver": {"name": _f(1, "string"), "object_name": _f(2, "string")},
    "google.protobuf.BoolValue": {"value": _f(1, "bool")},
    "SavedMetadata": {"nodes": _r(1, "message")},
    "SavedMetadata.SavedObject": {
        "node_id": _f(2, "int32"), "node_path": _f(3, "string"), "identifier": _f(4, "string"),
        "metadata": _f(5, "string"), "version": _f(6, "message"),
    },
    "SavedMetadata.VersionDef": _VERSION_DEF,
}

# TensorFlow's DataType enum (types.proto); each has a "_REF" twin 100 higher.
_BASE_TYPES = [
    "DT_INVALID", "DT_FLOAT", "DT_DOUBLE", "DT_INT32", "DT_UINT8", "DT_INT16", "DT_INT8",
    "DT_STRING", "DT_COMPLEX64", "DT_INT64", "DT_BOOL", "DT_QINT8", "DT_QUINT8", "DT_QINT32",
    "DT_BFLOAT16", "DT_QINT16", "DT_QUINT16", "DT_UINT16", "DT_COMPLEX128", "DT_HALF",
    "DT_RESOURCE", "DT_VARIANT", "DT_UINT32", "DT_UINT64", "DT_FLOAT8_E5M2", "DT_FLOAT8_E4M3FN",
    "DT_FLOAT8_E4M3FNUZ", "DT_FLOAT8_E4M3B11FNUZ", "DT_FLOAT8_E5M2FNUZ", "DT_INT4", "DT_UINT4",
    "DT_INT2", "DT_UINT2", "DT_FLOAT4_E2M1FN",
]
DATA_TYPES: dict[int, str] = {
    **dict(enumerate(_BASE_TYPES)),
    **{code + 100: f"{name}_REF" for code, name in enumerate(_BASE_TYPES) if code},
}
DT_FLOAT, DT_DOUBLE, DT_STRING, DT_BOOL, DT_BFLOAT16, DT_HALF = 1, 2, 7, 10, 14, 19


@dataclass(frozen=True)
class _Numbers:
    """How one DataType's values are stored: its typed list and its little-endian item."""

    values_field: str
    stored: str  # NumPy's dtype of one stored item ("O" for strings)
    pairs: bool = False  # complex numbers come as (real, imaginary) pairs of the list's floats


_NUMBERS: dict[int, _Numbers] = {
    1: _Numbers("float_val", "<f4"), 2: _Numbers("double_val", "<f8"),
    3: _Numbers("int_val", "<i4"), 4: _Numbers("int_val", "u1"), 5: _Numbers("int_val", "<i2"),
    6: _Numbers("int_val", "i1"), 7: _Numbers("string_val", "O"),
    8: _Numbers("scomplex_val", "<c8", pairs=True), 9: _Numbers("int64_val", "<i8"),
    10: _Numbers("bool_val", "u1"), 14: _Numbers("half_val", "<u2"),
    17: _Numbers("int_val", "<u2"), 18: _Numbers("dcomplex_val", "<c16", pairs=True),
    19: _Numbers("half_val", "<f2"), 22: _Numbers("uint32_val", "<u4"),
    23: _Numbers("uint64_val", "<u8"),
}
_WHY_NOT: dict[str, str] = {
    "DT_RESOURCE": "a handle to a resource (a variable's value is in the checkpoint, not here)",
    "DT_VARIANT": "a variant (a TensorList, dataset or other opaque object)",
}


def dtype_name(code: int) -> str:
    """TensorFlow's name of a DataType value: ``1`` → ``"DT_FLOAT"``."""
    return DATA_TYPES.get(code, f"DataType {code}")


def _numpy_dtype(code: int) -> np.dtype:
    """The dtype :meth:`TensorValue.numpy` returns for ``code`` (native byte order)."""
    if code == DT_BFLOAT16:
        return np.dtype(np.float32)
    if code == DT_BOOL:
        return np.dtype(np.bool_)
    return np.dtype(_NUMBERS[code].stored).newbyteorder("=")


# -- the decoded messages --------------------------------------------------------------------

Shape = tuple[int, ...] | None  # None: unknown rank; -1: an unknown dimension


@dataclass(frozen=True, eq=False, slots=True)
class TensorValue:
    """A ``TensorProto``: its type and shape now, its values on :meth:`numpy`.

    ``dtype`` is TensorFlow's DataType number (:func:`dtype_name` names it); ``shape`` is
    fully known. ``where`` says where the tensor was, for messages. The array is made on the
    first :meth:`numpy` and kept: a tensor many nodes read is decoded (and paid for) once.
    """

    dtype: int
    shape: tuple[int, ...]
    where: str
    _content: memoryview | None = field(default=None, repr=False)
    _values: np.ndarray | None = field(default=None, repr=False)
    _array: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __eq__(self, other: object) -> bool:
        """Equal when of the same type and shape and stored alike (the place aside)."""
        if not isinstance(other, TensorValue):
            return NotImplemented
        return (self.dtype, self.shape, self._stored()) == (other.dtype, other.shape, other._stored())

    __hash__ = None  # type: ignore[assignment]

    def _stored(self) -> tuple[str, object]:
        if self._content is not None:
            return "content", self._content.tobytes()
        if self._values is None:
            return "nothing", None
        if self._values.dtype.kind == "O":
            return "values", tuple(self._values)
        return "values", (self._values.dtype.str, self._values.tobytes())

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def stored_bytes(self) -> int:
        """The bytes the input holds for the values (``tensor_content``, or the typed list)."""
        if self._content is not None:
            return self._content.nbytes
        return 0 if self._values is None else int(self._values.nbytes)

    def allocates(self) -> int:
        """The bytes :meth:`numpy` would allocate beyond what the input holds (its peak): a
        short typed list's fill, bfloat16 widened, bools made; 0 for a view of the input, or
        once the array is made."""
        if self._array is not None or self.dtype not in _NUMBERS:
            return 0
        count = self.size
        if self._content is not None:
            return count * {DT_BFLOAT16: 8, DT_BOOL: 1}.get(self.dtype, 0)
        stored = 0 if self._values is None else len(self._values)
        return 0 if stored >= count else count * _numpy_dtype(self.dtype).itemsize

    def numpy(self, *, max_fill_bytes: int = MAX_FILL_BYTES, meter: Meter | None = None
              ) -> np.ndarray:
        """The values as a read-only array of ``shape``, made on the first call and kept.

        float32/float64/half/int*/uint*/bool/complex keep their type; bfloat16 becomes
        float32 (exactly); strings become an object array of ``bytes``. A typed list shorter
        than the shape is filled by repeating its last value; that fill may take at most
        ``max_fill_bytes``. What the array takes beyond the input (:meth:`allocates`) is
        charged to ``meter``, a read's budget, before it is made. Types that hold no plain
        numbers raise :class:`~rnnport.errors.DTypeError`.
        """
        if self._array is not None:
            return self._array
        numbers = _NUMBERS.get(self.dtype)
        if numbers is None:
            name = self.dtype_name
            why = _WHY_NOT.get(name.removesuffix("_REF"), "values NumPy has no type for")
            raise DTypeError(f"{self.where}: a tensor of type {name}, which holds {why}; expected "
                             "a float, integer, bool or string tensor. It cannot be read as an "
                             "array.")
        count = self.size
        if self._content is not None and self.dtype == DT_STRING:
            raise UnsupportedFeatureError(
                f"{self.where}: a string tensor stored in tensor_content; TensorFlow writes "
                "string tensors in string_val, the only form rnnport reads.")
        if self._content is not None:
            self._charge(meter)
            array = np.frombuffer(self._content, dtype=numbers.stored)
            array = _native(array, self.dtype)
        else:
            assert self._values is not None
            stored = self._values
            if len(stored) >= count:
                array = stored[:count]
            else:
                out_dtype = _numpy_dtype(self.dtype)
                need = count * out_dtype.itemsize
                if need > max_fill_bytes:
                    raise FormatError(
                        f"{self.where}: shape {list(self.shape)} holds {count:,} elements but only "
                        f"{len(stored):,} are stored; TensorFlow repeats the last to fill the "
                        f"rest, which would take {need:,} bytes, more than the {max_fill_bytes:,} "
                        "allowed. The file is damaged or built to exhaust memory; if it is "
                        "genuine, pass a larger max_fill_bytes.")
                self._charge(meter)
                array = np.empty(count, dtype=out_dtype)
                array[:len(stored)] = stored
                if len(stored):
                    array[len(stored):] = stored[-1]
                elif out_dtype.kind == "O":
                    array[:] = b""
                else:
                    array[:] = 0
        array = array.reshape(self.shape)
        array.flags.writeable = False
        object.__setattr__(self, "_array", array)
        return array

    def _charge(self, meter: Meter | None) -> None:
        if meter is not None:
            meter.charge(self.allocates(), f"{self.where}: a tensor of shape {list(self.shape)}")


def _native(array: np.ndarray, code: int) -> np.ndarray:
    """Stored little-endian items as the array :meth:`TensorValue.numpy` promises."""
    if code == DT_BFLOAT16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    if code == DT_BOOL:
        return array != 0
    if code == DT_HALF and array.dtype == np.uint16:
        return array.view(np.float16)
    if array.dtype != object and not array.dtype.isnative:
        return array.astype(array.dtype.newbyteorder("="))
    return array


@dataclass(frozen=True, slots=True)
class NameAttrList:
    """A function and its attributes (an ``AttrValue``'s ``func``)."""

    name: str
    attr: Mapping[str, AttrValue]


@dataclass(frozen=True, slots=True)
class AttrList:
    """An ``AttrValue``'s ``list``: every kind of list at once, most of them empty."""

    s: tuple[bytes, ...] = ()
    i: tuple[int, ...] = ()
    f: tuple[float, ...] = ()
    b: tuple[bool, ...] = ()
    type: tuple[int, ...] = ()
    shape: tuple[Shape, ...] = ()
    tensor: tuple[TensorValue, ...] = ()
    func: tuple[NameAttrList, ...] = ()


AttrKind = str  # "s", "i", "f", "b", "type", "shape", "tensor", "list", "func", "placeholder" or ""


@dataclass(frozen=True, slots=True)
class AttrValue:
    """One attribute: ``kind`` is the name of the oneof member set (``""`` for none), and
    ``value`` its value: ``bytes`` (s), ``int`` (i, type: a DataType number), ``float`` (f),
    ``bool`` (b), a shape tuple or ``None`` (shape), :class:`TensorValue` (tensor),
    :class:`AttrList` (list), :class:`NameAttrList` (func) or ``str`` (placeholder)."""

    kind: AttrKind
    value: bytes | int | float | bool | Shape | TensorValue | AttrList | NameAttrList | str | None


@dataclass(frozen=True, slots=True)
class NodeDef:
    name: str
    op: str
    input: tuple[str, ...] = ()
    device: str = ""
    attr: Mapping[str, AttrValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VersionDef:
    producer: int = 0
    min_consumer: int = 0
    bad_consumers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ArgDef:
    name: str
    type: int = 0
    type_attr: str = ""
    number_attr: str = ""
    type_list_attr: str = ""
    is_ref: bool = False


@dataclass(frozen=True, slots=True)
class OpDef:
    """A function's signature: its name and its arguments (the rest of an OpDef is skipped)."""

    name: str
    input_arg: tuple[ArgDef, ...] = ()
    output_arg: tuple[ArgDef, ...] = ()


@dataclass(frozen=True, slots=True)
class FunctionDef:
    signature: OpDef
    attr: Mapping[str, AttrValue] = field(default_factory=dict)
    node_def: tuple[NodeDef, ...] = ()
    ret: Mapping[str, str] = field(default_factory=dict)
    control_ret: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FunctionDefLibrary:
    function: tuple[FunctionDef, ...] = ()


@dataclass(frozen=True, slots=True)
class GraphDef:
    node: tuple[NodeDef, ...] = ()
    versions: VersionDef | None = None
    library: FunctionDefLibrary = FunctionDefLibrary()
    version: int = 0  # deprecated by TensorFlow in favour of versions

    def all_nodes(self) -> Iterator[tuple[str, NodeDef]]:
        """Every node with the function that holds it: ``("", node)`` for the graph's own,
        ``(function name, node)`` for the nodes inside the library's functions."""
        for node in self.node:
            yield "", node
        for function in self.library.function:
            for node in function.node_def:
                yield function.signature.name, node


@dataclass(frozen=True, slots=True)
class MetaInfoDef:
    meta_graph_version: str = ""
    tags: tuple[str, ...] = ()
    tensorflow_version: str = ""
    tensorflow_git_version: str = ""


@dataclass(frozen=True, slots=True)
class SaverDef:
    filename_tensor_name: str = ""
    save_tensor_name: str = ""
    restore_op_name: str = ""
    max_to_keep: int = 0
    sharded: bool = False
    keep_checkpoint_every_n_hours: float = 0.0
    version: int = 0  # 0 and 1: the old V1 checkpoint format, 2: the TensorBundle (V2)


@dataclass(frozen=True, slots=True)
class ObjectReference:
    node_id: int
    local_name: str


@dataclass(frozen=True, slots=True)
class SlotVariableReference:
    original_variable_node_id: int
    slot_name: str
    slot_variable_node_id: int


@dataclass(frozen=True, slots=True)
class SavedUserObject:
    identifier: str
    version: VersionDef | None = None
    metadata: str = ""


@dataclass(frozen=True, slots=True)
class SavedVariable:
    name: str
    dtype: int = 0
    shape: Shape = ()
    trainable: bool = False
    synchronization: int = 0
    aggregation: int = 0
    device: str = ""


@dataclass(frozen=True, slots=True)
class SavedFunction:
    concrete_functions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SavedBareConcreteFunction:
    concrete_function_name: str
    argument_keywords: tuple[str, ...] = ()
    allowed_positional_arguments: int = 0


@dataclass(frozen=True, slots=True)
class SavedConstant:
    operation: str


@dataclass(frozen=True, slots=True)
class SavedResource:
    device: str = ""


@dataclass(frozen=True, slots=True)
class CapturedTensor:
    name: str
    concrete_function: str = ""


SavedKind = str  # "user_object", "asset", "function", "variable", "bare_concrete_function",
#                  "constant", "resource", "captured_tensor" or "" (none set)


@dataclass(frozen=True, slots=True)
class SavedObject:
    """One node of a SavedModel's object graph. ``kind`` names which of the kind fields is
    set; the others are ``None`` (``asset`` is the asset file's index)."""

    children: tuple[ObjectReference, ...] = ()
    dependencies: tuple[ObjectReference, ...] = ()
    slot_variables: tuple[SlotVariableReference, ...] = ()
    kind: SavedKind = ""
    user_object: SavedUserObject | None = None
    asset: int | None = None
    function: SavedFunction | None = None
    variable: SavedVariable | None = None
    bare_concrete_function: SavedBareConcreteFunction | None = None
    constant: SavedConstant | None = None
    resource: SavedResource | None = None
    captured_tensor: CapturedTensor | None = None
    registered_name: str = ""


@dataclass(frozen=True, slots=True)
class SavedObjectGraph:
    """``nodes[0]`` is the root; ``concrete_functions`` the names of the traced functions
    (sorted); ``bound_inputs`` each one's captured inputs, the ids of the nodes (variables,
    resources, constants) that its last inputs take, in order."""

    nodes: tuple[SavedObject, ...] = ()
    concrete_functions: tuple[str, ...] = ()
    bound_inputs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class MetaGraphDef:
    """One graph of a SavedModel; ``signature_def`` holds the signatures' names only (sorted),
    ``object_graph_def`` is ``None`` in SavedModels written before TF2."""

    meta_info_def: MetaInfoDef = MetaInfoDef()
    graph_def: GraphDef = GraphDef()
    saver_def: SaverDef | None = None
    signature_def: tuple[str, ...] = ()
    object_graph_def: SavedObjectGraph | None = None


@dataclass(frozen=True, slots=True)
class SavedModel:
    saved_model_schema_version: int = 0
    meta_graphs: tuple[MetaGraphDef, ...] = ()


@dataclass(frozen=True, slots=True)
class SerializedTensor:
    """One value an object saves: ``name`` (``VARIABLE_VALUE`` for a variable's value),
    ``full_name`` (the variable's graph name) and the bundle's ``checkpoint_key``."""

    name: str
    full_name: str = ""
    checkpoint_key: str = ""


@dataclass(frozen=True, slots=True)
class TrackableObject:
    children: tuple[ObjectReference, ...] = ()
    attributes: tuple[SerializedTensor, ...] = ()
    slot_variables: tuple[SlotVariableReference, ...] = ()
    registered_saver: str = ""  # the saver's name, when a registered saver wrote the object
    has_checkpoint_values: bool | None = None  # None: not recorded (older checkpoints)


@dataclass(frozen=True, slots=True)
class TrackableObjectGraph:
    """A TF2 checkpoint's object graph; ``nodes[0]`` is the root (the saved object)."""

    nodes: tuple[TrackableObject, ...] = ()


@dataclass(frozen=True, slots=True)
class SavedMetadataNode:
    """One layer's or model's entry in Keras 2's ``keras_metadata.pb``: its node in the
    SavedModel's object graph, its path (``root.layer-0``), the class identifier
    (``_tf_keras_layer``) and its metadata, a JSON string (parsing it is the caller's)."""

    node_id: int = 0
    node_path: str = ""
    identifier: str = ""
    metadata: str = ""
    version: VersionDef | None = None


@dataclass(frozen=True, slots=True)
class SavedMetadata:
    nodes: tuple[SavedMetadataNode, ...] = ()


# -- reading fields ------------------------------------------------------------------------------

_WIRE_OF = {"int32": 0, "int64": 0, "uint32": 0, "uint64": 0, "bool": 0, "enum": 0,
            "double": 1, "float": 5, "string": 2, "bytes": 2, "message": 2}
_FIXED_DTYPE = {"float": "<f4", "double": "<f8"}


# What decoding costs in memory, estimated as CPython lays the objects out (see the module
# docstring's limits): a message's object (its own fields, a dict entry, a tuple's slot), a
# field's value (a slot) and a string's or bytes' object beyond its characters.
MESSAGE_COST, VALUE_COST, STRING_COST = 64, 8, 56
VIEW_COST = 192  # a tensor's array or memoryview object, beyond what it holds
DECODE_SCALE = 4  # decoded messages may take this many times the arrays' 'expansion' allowance


@dataclass(frozen=True)
class _Known:
    name: str
    field: Field
    wire: int
    packable: bool
    cost: int  # of one occurrence


_KNOWN: dict[str, dict[int, _Known]] = {
    message: {f.number: _Known(name, f, _WIRE_OF[f.type],
                               f.repeated and f.type not in ("string", "bytes", "message"),
                               STRING_COST if f.type in ("string", "bytes") else VALUE_COST)
              for name, f in fields.items()}
    for message, fields in FIELDS.items()
}
# The meter of the decode under way (see _decode): every message built is charged to it.
_METER: ContextVar[Meter | None] = ContextVar("rnnport_tfproto_meter", default=None)


def _spend(units: int, where: str) -> None:
    meter = _METER.get()
    if meter is not None:
        meter.charge(units, f"at {where}")

# A message as its builder gets it: one piece of the input, or the pieces a message given
# more than once is merged from (read one after the other, as if concatenated, never joined).
Message = memoryview | tuple[memoryview, ...]
_PIECE_SHIFT = 32  # an occurrence: (piece << 32 | position) << 3 | wire; positions < 2**31
_LISTED = 32  # occurrences of a field kept in a list before an array of 8-byte numbers takes them
_POSITION_MASK = (1 << _PIECE_SHIFT) - 1


class _Fields:
    """The known fields of one message, found in one pass, read by name with their types.

    Each occurrence of a field is kept as one number (which piece, where its value starts,
    its wire type) in an array of 8-byte integers, and its value is read from the input
    only when asked for: a million two-byte fields cost 8 MB here, not a million objects.
    The number's order is the fields' order in the message."""

    __slots__ = ("depth", "found", "pieces", "schema", "where")

    def __init__(self, message: str, data: Message, where: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            raise FormatError(
                f"{where}: messages nested more than {MAX_DEPTH} deep; expected at most {MAX_DEPTH} "
                "(protobuf's own limit, which TensorFlow's graphs stay far below), so the file is "
                "damaged or built to exhaust the stack.")
        self.schema, self.where, self.depth = message, where, depth
        self.pieces = pieces = (data,) if isinstance(data, memoryview) else data
        known = _KNOWN[message]
        found: dict[str, list[int] | array[int]] = {}
        cost = MESSAGE_COST
        meter = _METER.get()
        left = sys.maxsize if meter is None else meter.left
        try:
            for index, piece in enumerate(pieces):
                base = index << _PIECE_SHIFT
                position, end = 0, len(piece)
                while position < end:  # every field: the hot loop, its common cases inline
                    byte = piece[position]
                    if 8 <= byte < 0x80:
                        number, wire, position = byte >> 3, byte & 7, position + 1
                    else:
                        number, wire, position = _proto.tag_at(piece, position)
                    start = position
                    byte = piece[position] if position < end else 0x80
                    if byte < 0x80 and wire == _proto.WIRE_LEN and position + 1 + byte <= end:
                        position += 1 + byte  # a short string or message, inline
                    elif byte < 0x80 and wire == _proto.WIRE_VARINT:
                        position += 1
                    else:
                        position = _proto.skip(piece, position, wire, number)
                    spec = known.get(number)
                    if spec is None:
                        continue  # a field this reader does not need, or a newer one
                    if wire != spec.wire and not (spec.packable and wire == _proto.WIRE_LEN):
                        raise FormatError(
                            f"{_join(where, depth, spec.name)}: field {number} comes as a "
                            f"{_proto.WIRE_NAMES[wire]} value; expected "
                            f"{_proto.WIRE_NAMES[spec.wire]} (it is a {spec.field.type}), so "
                            "the data is damaged or not this message.")
                    cost += spec.cost
                    if cost > left:  # refused before the rest is read
                        meter.charge(cost, f"at {where}")  # type: ignore[union-attr]
                    bucket = found.get(spec.name)
                    if bucket is None:
                        found[spec.name] = [(base | start) << 3 | wire]
                    elif len(bucket) < _LISTED:
                        bucket.append((base | start) << 3 | wire)
                    elif len(bucket) < MAX_ITEMS:
                        if len(bucket) == _LISTED:  # many: 8 bytes each from here on
                            bucket = found[spec.name] = array("q", bucket)
                        bucket.append((base | start) << 3 | wire)
                    else:
                        raise FormatError(
                            f"{_join(where, depth, spec.name)}: more than {MAX_ITEMS:,} "
                            f"entries; expected at most {MAX_ITEMS:,}, so the data is "
                            "damaged or built to exhaust memory.")
        except _proto.ProtoError as error:
            raise FormatError(f"{where}: {error}; the data is truncated or damaged.") from None
        self.found = found
        if meter is not None:
            meter.charge(cost, f"at {where}")

    def child(self, piece: str) -> str:
        return _join(self.where, self.depth, piece)

    def _type(self, name: str) -> str:
        return FIELDS[self.schema][name].type

    def has(self, name: str) -> bool:
        return name in self.found

    def count(self, name: str) -> int:
        """How many times field ``name`` occurs (a packed piece counts once)."""
        return len(self.found.get(name, ()))

    def _value(self, occurrence: int) -> int | memoryview:
        piece = self.pieces[occurrence >> (_PIECE_SHIFT + 3)]
        position, wire = (occurrence >> 3) & _POSITION_MASK, occurrence & 7
        byte = piece[position]
        if byte < 0x80 and wire == _proto.WIRE_LEN:  # a short string or message, inline
            return piece[position + 1:position + 1 + byte]
        return _proto.value_at(piece, position, wire)

    def _values(self, name: str) -> Iterator[int | memoryview]:
        value = self._value
        for occurrence in self.found.get(name, ()):
            yield value(occurrence)

    def _last(self, name: str) -> int | memoryview | None:
        occurrences = self.found.get(name)
        return self._value(occurrences[-1]) if occurrences else None

    def integer(self, name: str) -> int:
        value = self._last(name)
        return _as_integer(value, self._type(name)) if isinstance(value, int) else 0

    def flag(self, name: str) -> bool:
        return bool(self._last(name))

    def real(self, name: str) -> float:
        value = self._last(name)
        if not isinstance(value, int):
            return 0.0
        if self._type(name) == "float":
            return float(struct.unpack("<f", value.to_bytes(4, "little"))[0])
        return float(struct.unpack("<d", value.to_bytes(8, "little"))[0])

    def view(self, name: str) -> memoryview:
        value = self._last(name)
        return value if isinstance(value, memoryview) else memoryview(b"")

    def text(self, name: str) -> str:
        return _utf8(self.view(name), self.child(name))

    def message(self, name: str, after: int = -1) -> Message | None:
        """A singular message field: its pieces after position ``after`` (see
        :meth:`last_of`), to be read as one message."""
        pieces = tuple(value for occurrence in self.found.get(name, ())
                       if occurrence >> 3 > after
                       and isinstance(value := self._value(occurrence), memoryview))
        if not pieces:
            return None
        return pieces[0] if len(pieces) == 1 else pieces

    def messages(self, name: str) -> Iterator[memoryview]:
        """A repeated message (or string) field's values, one at a time."""
        value = self._value
        for occurrence in self.found.get(name, ()):
            if occurrence & 7 == _proto.WIRE_LEN:
                yield value(occurrence)  # type: ignore[misc]

    def texts(self, name: str) -> tuple[str, ...]:
        out = []
        for value in self.messages(name):
            try:
                out.append(str(value, "utf-8"))
            except UnicodeDecodeError:
                _utf8(value, self.child(f"{name}[{len(out)}]"))  # raises, saying where
        return tuple(out)

    def blobs(self, name: str) -> tuple[bytes, ...]:
        return tuple(bytes(value) for value in self.messages(name))

    def numbers(self, name: str) -> np.ndarray:
        """A repeated scalar field, packed pieces and single values alike, in order."""
        type_name = self._type(name)
        fixed = _FIXED_DTYPE.get(type_name)
        if name not in self.found:
            return _as_integers(_singles([], fixed), type_name) if fixed is None else _singles([], fixed)
        pieces: list[np.ndarray] = []
        singles: list[int] = []
        try:
            for value in self._values(name):
                if isinstance(value, int):
                    singles.append(value)
                    continue
                if singles:
                    pieces.append(_singles(singles, fixed))
                    singles = []
                pieces.append(_proto.packed_varints(value) if fixed is None
                              else _proto.fixed_array(value, fixed))
        except _proto.ProtoError as error:
            raise FormatError(f"{self.child(name)}: {error}; the data is truncated or "
                              "damaged.") from None
        if singles or not pieces:
            pieces.append(_singles(singles, fixed))
        raw = pieces[0] if len(pieces) == 1 else np.concatenate(pieces)
        return _as_integers(raw, type_name) if fixed is None else raw

    def last_of(self, names: tuple[str, ...]) -> tuple[str, int]:
        """The oneof member given last (``""`` for none) and the position of the last field
        of any other member: a message member merges only the pieces after it."""
        last = {name: self.found[name][-1] >> 3 for name in names if name in self.found}
        if not last:
            return "", -1
        winner = max(last, key=last.__getitem__)
        # The winner's own fields before another member's last one are cut off by it.
        others = [position for name in names if name != winner and name in self.found
                  for position in (self.found[name][-1] >> 3,)]
        return winner, max(others, default=-1)


def _shown(text: str) -> str:
    """``text`` quoted for a message, cut short past 80 characters: a name repeated in the
    place of every message under it must not cost its length each time."""
    return repr(text) if len(text) <= 80 else f"{text[:60]!r}… ({len(text):,} characters)"


def _join(where: str, depth: int, piece: str) -> str:
    """Where a part of a message is: ``saved_model.pb: meta_graphs[0].graph_def``."""
    return f"{where}: {piece}" if depth == 0 else f"{where}.{piece}"


def _singles(values: list[int], fixed: str | None) -> np.ndarray:
    if fixed is None:
        return np.array(values, dtype=np.uint64)
    return np.array(values, dtype="<u4" if fixed == "<f4" else "<u8").view(fixed)


def _as_integer(value: int, type_name: str) -> int:
    if type_name in ("int32", "enum"):
        value &= 0xFFFFFFFF
        return value - (1 << 32) if value >= 1 << 31 else value
    if type_name == "int64":
        return value - (1 << 64) if value >= 1 << 63 else value
    if type_name == "uint32":
        return value & 0xFFFFFFFF
    return value


def _as_integers(raw: np.ndarray, type_name: str) -> np.ndarray:
    if type_name in ("int32", "enum"):
        return raw.astype(np.uint32).view(np.int32)
    if type_name == "int64":
        return raw.view(np.int64)
    if type_name == "uint32":
        return raw.astype(np.uint32)
    if type_name == "bool":
        return raw != 0
    return raw


def _utf8(data: memoryview, where: str) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as error:
        raise FormatError(f"{where}: not UTF-8 text (byte {error.start}); protobuf strings must "
                          "be UTF-8, so the data is damaged.") from None


# -- building messages without recursion ---------------------------------------------------------
#
# The messages that may nest without bound (an AttrValue's list holds functions whose
# attributes are AttrValues, a graph's library holds functions holding nodes) are built by
# generators: a builder yields a _Build for each message inside it and is sent what that
# built, and _run keeps the builders waiting on an explicit stack. However deep the input
# nests, and wherever the caller's own stack stands, Python's stack holds a few frames
# (MAX_DEPTH still bounds the nesting, as protobuf's parsers do). The other messages hold no
# such nesting and are built by plain functions.

Builder = Callable[[Message, str, int], Any]  # a plain builder's result, or a generator
Building = Generator["_Build", Any, T]


class _Build(NamedTuple):
    """A message a builder needs built: by ``build`` from ``data``, at ``where`` and
    ``depth``."""

    build: Builder
    data: Message
    where: str
    depth: int


def _run(build: Builder, data: Message, where: str, depth: int) -> Any:
    """``build(data, where, depth)``, run with every message it nests built on an explicit
    stack."""
    first = build(data, where, depth)
    if not isinstance(first, GeneratorType):
        return first
    stack: list[Generator[_Build, Any, Any]] = [first]
    value: Any = None
    while stack:
        try:
            request = stack[-1].send(value)
        except StopIteration as done:
            stack.pop()
            value = done.value
            continue
        made = request.build(request.data, request.where, request.depth)
        if isinstance(made, GeneratorType):
            stack.append(made)
            value = None
        else:
            value = made
    return value


def _repeated(fields: _Fields, name: str, build: Callable[[Message, str, int], T]) -> tuple[T, ...]:
    """A repeated message field whose messages hold no unbounded nesting."""
    return tuple(_empty(build) if not piece and build is not _tensor else
                 build(piece, fields.child(f"{name}[{index}]"), fields.depth + 1)
                 for index, piece in enumerate(fields.messages(name)))


def _nested(fields: _Fields, name: str,
            build: Callable[[Message, str, int], Building[T]]) -> Building[tuple[T, ...]]:
    """A repeated message field built by ``build``, a generator builder (through :func:`_run`)."""
    out = []
    for index, piece in enumerate(fields.messages(name)):
        out.append(_empty(build) if not piece else
                   (yield _Build(build, piece, fields.child(f"{name}[{index}]"), fields.depth + 1)))
    return tuple(out)


_EMPTY: dict[Builder, Any] = {}  # each builder's message of no fields, built once (immutable)


def _empty(build: Builder) -> Any:
    """What ``build`` makes of an empty message: one object shared by every empty message
    of its kind (a million empty entries cost a million slots, not a million objects); not
    for a tensor, which keeps where it was."""
    found = _EMPTY.get(build)
    if found is None:
        found = _EMPTY[build] = _run(build, memoryview(b""), "", 0)
    return found


def _optional(fields: _Fields, name: str, build: Callable[[Message, str, int], T],
              after: int = -1) -> T | None:
    piece = fields.message(name, after)
    return None if piece is None else build(piece, fields.child(name), fields.depth + 1)


def _entries(fields: _Fields, name: str, entry: str) -> Iterator[tuple[str, _Fields, str]]:
    """A map field's entries: ``(key, entry fields, where)``; a key given again replaces the
    entry before (the caller's dict keeps the last)."""
    for index, piece in enumerate(fields.messages(name)):
        entry_fields = _Fields(entry, piece, fields.child(f"{name} entry {index}"), fields.depth + 1)
        key = entry_fields.text("key")
        yield key, entry_fields, fields.child(f"{name}[{_shown(key)}]")


def _map(fields: _Fields, name: str, entry: str,
         value: Callable[[_Fields, str], T]) -> Mapping[str, T]:
    """A map field: ``{key: value(entry fields, where)}``, the last entry of a key counting
    (an empty one is one shared, immutable mapping)."""
    out = {key: value(entry_fields, where)
           for key, entry_fields, where in _entries(fields, name, entry)}
    return out if out else _NO_ENTRIES


def _attr_map(fields: _Fields, name: str, entry: str) -> Building[Mapping[str, AttrValue]]:
    """A map of ``AttrValue`` (a node's, a function's, a function reference's attributes)."""
    out: dict[str, AttrValue] = {}
    for key, entry_fields, where in _entries(fields, name, entry):
        piece = entry_fields.message("value")
        out[key] = yield _Build(_attr_value, piece if piece is not None else memoryview(b""),
                                where, entry_fields.depth + 1)
    return out if out else _NO_ATTRS


_NO_ENTRIES: Mapping[str, Any] = MappingProxyType({})  # shared by every empty map: immutable
_NO_ATTRS: Mapping[str, AttrValue] = _NO_ENTRIES


# -- the messages, one builder each (data, where, depth) -------------------------------------------

def _shape(data: Message, where: str, depth: int) -> Shape:
    """A shape as attributes and variables carry it: sizes below -1 are symbolic dimensions
    (grappler writes them into ``_input_shapes``/``_output_shapes``), read as -1, unknown."""
    sizes = _tensor_shape(data, where, depth, symbolic=True)
    return None if sizes is None else tuple(max(size, -1) for size in sizes)


def _tensor_shape(data: Message, where: str, depth: int, *, symbolic: bool = False) -> Shape:
    """A ``TensorProto``'s shape: sizes below -1 are damage (a tensor's values fill it)."""
    fields = _Fields("tensorflow.TensorShapeProto", data, where, depth)
    if fields.count("dim") > MAX_RANK:
        raise FormatError(f"{where}: {fields.count('dim'):,} dimensions; expected at most "
                          f"{MAX_RANK} (TensorFlow's limit), so the data is damaged.")
    sizes = tuple(_Fields("tensorflow.TensorShapeProto.Dim", dim, fields.child(f"dim[{index}]"),
                          depth + 1).integer("size")
                  for index, dim in enumerate(fields.messages("dim")))
    if fields.flag("unknown_rank"):
        return None
    if not symbolic and any(size < -1 for size in sizes):
        raise FormatError(f"{where}: dimension sizes {list(sizes)}; expected sizes of at least 0 "
                          "(or -1 for unknown), so the data is damaged.")
    return sizes


def _tensor(data: Message, where: str, depth: int) -> TensorValue:
    fields = _Fields("tensorflow.TensorProto", data, where, depth)
    _spend(len(where), where)  # the tensor keeps it
    code = fields.integer("dtype")
    piece = fields.message("tensor_shape")
    shape = () if piece is None else _tensor_shape(piece, _join(where, depth, "tensor_shape"),
                                                   depth + 1)
    if shape is None or any(size < 0 for size in shape):
        raise FormatError(f"{where}: a tensor of shape {shape!r}; expected a fully known shape "
                          "(a tensor's values fill it), so the data is damaged.")
    if math.prod(max(size, 1) for size in shape) >= 1 << 59:
        # NumPy cannot shape even an empty array so: its dimensions' sizes, zeros aside,
        # must multiply to an addressable number of bytes.
        raise FormatError(f"{where}: a tensor of shape {list(shape)}; expected dimensions whose "
                          "product (zeros aside) is below 2**59, so the data is damaged.")
    numbers = _NUMBERS.get(code)
    if numbers is None:
        return TensorValue(code, shape, where)  # refused by numpy(), not here: see the module doc
    count = math.prod(shape)
    content = fields.view("tensor_content")
    if len(content):
        if code != DT_STRING:
            itemsize = np.dtype(numbers.stored).itemsize
            if len(content) != count * itemsize:
                raise FormatError(
                    f"{where}: tensor_content holds {len(content):,} bytes, but shape "
                    f"{list(shape)} of {dtype_name(code)} needs {count * itemsize:,} "
                    f"({count:,} × {itemsize}); the data is damaged.")
        _spend(VIEW_COST, where)
        return TensorValue(code, shape, where, _content=content)
    values: np.ndarray
    if code == DT_STRING:
        values = np.empty(fields.count("string_val"), dtype=object)
        values[:] = fields.blobs("string_val")
    else:
        raw = fields.numbers(numbers.values_field)
        if numbers.pairs:
            raw = raw[: len(raw) // 2 * 2].astype(raw.dtype.newbyteorder("="))
            values = raw.view(np.complex64 if raw.dtype.itemsize == 4 else np.complex128)
        elif numbers.values_field == "half_val":
            values = _native(raw.astype(np.uint16), code)  # the low 16 bits are the pattern
        elif code == DT_BOOL:
            values = raw.astype(np.bool_)
        else:
            values = _native(raw.astype(np.dtype(numbers.stored).newbyteorder("=")), code)
    _spend(VIEW_COST + values.nbytes, where)
    values.flags.writeable = False
    return TensorValue(code, shape, where, _values=values)


_ATTR_KINDS = ("list", "s", "i", "f", "b", "type", "shape", "tensor", "placeholder", "func")


def _attr_value(data: Message, where: str, depth: int) -> Building[AttrValue]:
    fields = _Fields("tensorflow.AttrValue", data, where, depth)
    kind, after = fields.last_of(_ATTR_KINDS)
    value: bytes | int | float | bool | Shape | TensorValue | AttrList | NameAttrList | str | None
    if kind == "":
        value = None
    elif kind == "s":
        value = bytes(fields.view("s"))
    elif kind in ("i", "type"):
        value = fields.integer(kind)
    elif kind == "f":
        value = fields.real("f")
    elif kind == "b":
        value = fields.flag("b")
    elif kind == "placeholder":
        value = fields.text("placeholder")
    else:
        build = {"list": _attr_list, "shape": _shape, "tensor": _tensor,
                 "func": _name_attr_list}[kind]
        piece = fields.message(kind, after)
        value = yield _Build(build, piece if piece is not None else memoryview(b""),
                             _join(where, depth, kind), depth + 1)
    return AttrValue(kind, value)


def _attr_list(data: Message, where: str, depth: int) -> Building[AttrList]:
    fields = _Fields("tensorflow.AttrValue.ListValue", data, where, depth)
    return AttrList(
        s=fields.blobs("s"),
        i=tuple(fields.numbers("i").tolist()),
        f=tuple(fields.numbers("f").tolist()),
        b=tuple(fields.numbers("b").tolist()),
        type=tuple(fields.numbers("type").tolist()),
        shape=_repeated(fields, "shape", _shape),
        tensor=_repeated(fields, "tensor", _tensor),
        func=(yield from _nested(fields, "func", _name_attr_list)),
    )


def _string_entry(entry: _Fields, where: str) -> str:
    return entry.text("value")


def _name_attr_list(data: Message, where: str, depth: int) -> Building[NameAttrList]:
    fields = _Fields("tensorflow.NameAttrList", data, where, depth)
    name = fields.text("name")
    return NameAttrList(name, (yield from _attr_map(fields, "attr",
                                                    "tensorflow.NameAttrList.AttrEntry")))


def _node_def(data: Message, where: str, depth: int) -> Building[NodeDef]:
    fields = _Fields("tensorflow.NodeDef", data, where, depth)
    name = fields.text("name")
    if name:
        fields.where = f"{where} ({_shown(name)})"
    return NodeDef(name, fields.text("op"), fields.texts("input"), fields.text("device"),
                   (yield from _attr_map(fields, "attr", "tensorflow.NodeDef.AttrEntry")))


def _version_def(data: Message, where: str, depth: int,
                 message: str = "tensorflow.VersionDef") -> VersionDef:
    fields = _Fields(message, data, where, depth)
    return VersionDef(fields.integer("producer"), fields.integer("min_consumer"),
                      tuple(fields.numbers("bad_consumers").tolist()))


def _arg_def(data: Message, where: str, depth: int) -> ArgDef:
    fields = _Fields("tensorflow.OpDef.ArgDef", data, where, depth)
    return ArgDef(fields.text("name"), fields.integer("type"), fields.text("type_attr"),
                  fields.text("number_attr"), fields.text("type_list_attr"), fields.flag("is_ref"))


def _op_def(data: Message, where: str, depth: int) -> OpDef:
    fields = _Fields("tensorflow.OpDef", data, where, depth)
    return OpDef(fields.text("name"), _repeated(fields, "input_arg", _arg_def),
                 _repeated(fields, "output_arg", _arg_def))


def _function_def(data: Message, where: str, depth: int) -> Building[FunctionDef]:
    fields = _Fields("tensorflow.FunctionDef", data, where, depth)
    signature = _optional(fields, "signature", _op_def) or OpDef("")
    if signature.name:
        fields.where = f"{where} ({_shown(signature.name)})"
    return FunctionDef(
        signature,
        (yield from _attr_map(fields, "attr", "tensorflow.FunctionDef.AttrEntry")),
        (yield from _nested(fields, "node_def", _node_def)),
        _map(fields, "ret", "tensorflow.FunctionDef.RetEntry", _string_entry),
        _map(fields, "control_ret", "tensorflow.FunctionDef.ControlRetEntry", _string_entry),
    )


def _library(data: Message, where: str, depth: int) -> Building[FunctionDefLibrary]:
    fields = _Fields("tensorflow.FunctionDefLibrary", data, where, depth)
    return FunctionDefLibrary((yield from _nested(fields, "function", _function_def)))


def _graph_def(data: Message, where: str, depth: int) -> Building[GraphDef]:
    fields = _Fields("tensorflow.GraphDef", data, where, depth)
    nodes = yield from _nested(fields, "node", _node_def)
    piece = fields.message("library")
    library = FunctionDefLibrary() if piece is None else \
        (yield _Build(_library, piece, fields.child("library"), depth + 1))
    return GraphDef(nodes, _optional(fields, "versions", _version_def), library,
                    fields.integer("version"))


def _meta_info_def(data: Message, where: str, depth: int) -> MetaInfoDef:
    fields = _Fields("tensorflow.MetaGraphDef.MetaInfoDef", data, where, depth)
    return MetaInfoDef(fields.text("meta_graph_version"), fields.texts("tags"),
                       fields.text("tensorflow_version"), fields.text("tensorflow_git_version"))


def _saver_def(data: Message, where: str, depth: int) -> SaverDef:
    fields = _Fields("tensorflow.SaverDef", data, where, depth)
    return SaverDef(fields.text("filename_tensor_name"), fields.text("save_tensor_name"),
                    fields.text("restore_op_name"), fields.integer("max_to_keep"),
                    fields.flag("sharded"), fields.real("keep_checkpoint_every_n_hours"),
                    fields.integer("version"))


def _keys(fields: _Fields, name: str, entry: str) -> tuple[str, ...]:
    """The keys, sorted, of a map whose values this reader does not need (a map has no order
    on the wire that means anything)."""
    return tuple(sorted(_map(fields, name, entry,
                             lambda entry_fields, where: entry_fields.message("value"))))


def _meta_graph_def(data: Message, where: str, depth: int) -> Building[MetaGraphDef]:
    fields = _Fields("tensorflow.MetaGraphDef", data, where, depth)
    piece = fields.message("graph_def")
    graph = GraphDef() if piece is None else \
        (yield _Build(_graph_def, piece, fields.child("graph_def"), depth + 1))
    return MetaGraphDef(
        _optional(fields, "meta_info_def", _meta_info_def) or MetaInfoDef(),
        graph,
        _optional(fields, "saver_def", _saver_def),
        _keys(fields, "signature_def", "tensorflow.MetaGraphDef.SignatureDefEntry"),
        _optional(fields, "object_graph_def", _saved_object_graph),
    )


def _saved_model(data: Message, where: str, depth: int) -> Building[SavedModel]:
    fields = _Fields("tensorflow.SavedModel", data, where, depth)
    return SavedModel(fields.integer("saved_model_schema_version"),
                      (yield from _nested(fields, "meta_graphs", _meta_graph_def)))


def _object_reference(data: Message, where: str, depth: int) -> ObjectReference:
    fields = _Fields(_OBJECT_REFERENCE, data, where, depth)
    return ObjectReference(fields.integer("node_id"), fields.text("local_name"))


def _slot_reference(data: Message, where: str, depth: int) -> SlotVariableReference:
    fields = _Fields(_SLOT_REFERENCE, data, where, depth)
    return SlotVariableReference(fields.integer("original_variable_node_id"),
                                 fields.text("slot_name"), fields.integer("slot_variable_node_id"))


def _user_object(data: Message, where: str, depth: int) -> SavedUserObject:
    fields = _Fields("tensorflow.SavedUserObject", data, where, depth)
    return SavedUserObject(fields.text("identifier"), _optional(fields, "version", _version_def),
                           fields.text("metadata"))


def _variable(data: Message, where: str, depth: int) -> SavedVariable:
    fields = _Fields("tensorflow.SavedVariable", data, where, depth)
    shape = _optional(fields, "shape", _shape)
    return SavedVariable(fields.text("name"), fields.integer("dtype"),
                         () if not fields.has("shape") else shape, fields.flag("trainable"),
                         fields.integer("synchronization"), fields.integer("aggregation"),
                         fields.text("device"))


def _function(data: Message, where: str, depth: int) -> SavedFunction:
    return SavedFunction(_Fields("tensorflow.SavedFunction", data, where, depth)
                         .texts("concrete_functions"))


def _bare_function(data: Message, where: str, depth: int) -> SavedBareConcreteFunction:
    fields = _Fields("tensorflow.SavedBareConcreteFunction", data, where, depth)
    return SavedBareConcreteFunction(fields.text("concrete_function_name"),
                                     fields.texts("argument_keywords"),
                                     fields.integer("allowed_positional_arguments"))


def _constant(data: Message, where: str, depth: int) -> SavedConstant:
    return SavedConstant(_Fields("tensorflow.SavedConstant", data, where, depth).text("operation"))


def _resource(data: Message, where: str, depth: int) -> SavedResource:
    return SavedResource(_Fields("tensorflow.SavedResource", data, where, depth).text("device"))


def _asset(data: Message, where: str, depth: int) -> int:
    return _Fields("tensorflow.SavedAsset", data, where, depth).integer("asset_file_def_index")


def _captured(data: Message, where: str, depth: int) -> CapturedTensor:
    fields = _Fields("tensorflow.CapturedTensor", data, where, depth)
    return CapturedTensor(fields.text("name"), fields.text("concrete_function"))


_SAVED_KINDS: dict[str, Callable[[Message, str, int], object]] = {
    "user_object": _user_object, "asset": _asset, "function": _function, "variable": _variable,
    "bare_concrete_function": _bare_function, "constant": _constant, "resource": _resource,
    "captured_tensor": _captured,
}


def _saved_object(data: Message, where: str, depth: int) -> SavedObject:
    fields = _Fields("tensorflow.SavedObject", data, where, depth)
    kind, after = fields.last_of(tuple(_SAVED_KINDS))
    kinds: dict[str, object] = {}
    if kind:
        piece = fields.message(kind, after)
        kinds[kind] = _SAVED_KINDS[kind](piece if piece is not None else memoryview(b""),
                                         _join(where, depth, kind), depth + 1)
    return SavedObject(
        children=_repeated(fields, "children", _object_reference),
        dependencies=_repeated(fields, "dependencies", _object_reference),
        slot_variables=_repeated(fields, "slot_variables", _slot_reference),
        kind=kind, registered_name=fields.text("registered_name"), **kinds)  # type: ignore[arg-type]


def _bound_inputs(entry: _Fields, where: str) -> tuple[int, ...]:
    piece = entry.message("value")
    fields = _Fields("tensorflow.SavedConcreteFunction",
                     piece if piece is not None else memoryview(b""), where, entry.depth + 1)
    return tuple(int(value) for value in fields.numbers("bound_inputs"))


def _saved_object_graph(data: Message, where: str, depth: int) -> SavedObjectGraph:
    fields = _Fields("tensorflow.SavedObjectGraph", data, where, depth)
    bound = _map(fields, "concrete_functions",
                 "tensorflow.SavedObjectGraph.ConcreteFunctionsEntry", _bound_inputs)
    return SavedObjectGraph(_repeated(fields, "nodes", _saved_object), tuple(sorted(bound)),
                            bound)


def _serialized_tensor(data: Message, where: str, depth: int) -> SerializedTensor:
    fields = _Fields("tensorflow.TrackableObjectGraph.TrackableObject.SerializedTensor", data, where,
                     depth)
    return SerializedTensor(fields.text("name"), fields.text("full_name"),
                            fields.text("checkpoint_key"))


def _trackable_object(data: Message, where: str, depth: int) -> TrackableObject:
    fields = _Fields("tensorflow.TrackableObjectGraph.TrackableObject", data, where, depth)
    saver = fields.message("registered_saver")
    has_values = fields.message("has_checkpoint_values")
    return TrackableObject(
        _repeated(fields, "children", _object_reference),
        _repeated(fields, "attributes", _serialized_tensor),
        _repeated(fields, "slot_variables", _slot_reference),
        "" if saver is None else _Fields("tensorflow.RegisteredSaver", saver,
                                         fields.child("registered_saver"), depth + 1).text("name"),
        None if has_values is None else _Fields("google.protobuf.BoolValue", has_values,
                                                _join(where, depth, "has_checkpoint_values"),
                                                depth + 1).flag("value"),
    )


def _object_graph(data: Message, where: str, depth: int) -> TrackableObjectGraph:
    fields = _Fields("tensorflow.TrackableObjectGraph", data, where, depth)
    return TrackableObjectGraph(_repeated(fields, "nodes", _trackable_object))


def _metadata_node(data: Message, where: str, depth: int) -> SavedMetadataNode:
    fields = _Fields("SavedMetadata.SavedObject", data, where, depth)
    piece = fields.message("version")
    return SavedMetadataNode(
        fields.integer("node_id"), fields.text("node_path"), fields.text("identifier"),
        fields.text("metadata"),
        None if piece is None else _version_def(piece, _join(where, depth, "version"), depth + 1,
                                                "SavedMetadata.VersionDef"))


def _saved_metadata(data: Message, where: str, depth: int) -> SavedMetadata:
    fields = _Fields("SavedMetadata", data, where, depth)
    return SavedMetadata(_repeated(fields, "nodes", _metadata_node))


# -- the public decoders ---------------------------------------------------------------------------

def _decode(build: Callable[[Message, str, int], T], data: Bytes, where: str) -> T:
    """``build``'s message from ``data``: a plain builder's."""
    result: T = _decoded(build, data, where)
    return result


def _decode_nested(build: Callable[[Message, str, int], Building[T]], data: Bytes,
                   where: str) -> T:
    """``build``'s message from ``data``: a generator builder's."""
    result: T = _decoded(build, data, where)
    return result


def _decoded(build: Builder, data: Bytes, where: str) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise FormatError(f"{where}: expected the serialized message as bytes, got "
                          f"{type(data).__name__}.")
    raw = data if isinstance(data, bytes) else bytes(data)  # a copy the caller cannot change
    if len(raw) > MAX_MESSAGE_BYTES:
        raise FormatError(f"{where}: {len(raw):,} bytes; expected at most {MAX_MESSAGE_BYTES:,} "
                          "(protobuf's limit for one message).")
    meter = Meter("expansion", len(raw), where, "bytes of decoded messages (an estimate; "
                  f"decoded messages may take {DECODE_SCALE} times what the limit allows)",
                  scale=DECODE_SCALE)
    token = _METER.set(meter)
    try:
        return _run(build, memoryview(raw), where, 0)
    finally:
        _METER.reset(token)


def decode_tensor_value(data: Bytes, *, where: str = "TensorProto") -> TensorValue:
    """A serialized ``TensorProto`` as a :class:`TensorValue` (type and shape; values on
    :meth:`~TensorValue.numpy`)."""
    return _decode(_tensor, data, where)


def decode_tensor(data: Bytes, *, where: str = "TensorProto",
                  max_fill_bytes: int = MAX_FILL_BYTES) -> np.ndarray:
    """A serialized ``TensorProto`` as a read-only NumPy array (see :meth:`TensorValue.numpy`)."""
    return decode_tensor_value(data, where=where).numpy(max_fill_bytes=max_fill_bytes)


def decode_shape(data: Bytes, *, where: str = "TensorShapeProto") -> Shape:
    """A serialized ``TensorShapeProto``: a tuple of sizes (-1 unknown, as are grappler's
    symbolic sizes below -1), ``None`` for unknown rank."""
    return _decode(_shape, data, where)


def decode_attr_value(data: Bytes, *, where: str = "AttrValue") -> AttrValue:
    return _decode_nested(_attr_value, data, where)


def decode_node_def(data: Bytes, *, where: str = "NodeDef") -> NodeDef:
    return _decode_nested(_node_def, data, where)


def decode_graph_def(data: Bytes, *, where: str = "GraphDef") -> GraphDef:
    """A serialized ``GraphDef`` (a frozen graph's ``.pb`` file) with its function library."""
    return _decode_nested(_graph_def, data, where)


def decode_meta_graph_def(data: Bytes, *, where: str = "MetaGraphDef") -> MetaGraphDef:
    return _decode_nested(_meta_graph_def, data, where)


def decode_saved_model(data: Bytes, *, where: str = "SavedModel") -> SavedModel:
    """A serialized ``SavedModel`` (the ``saved_model.pb`` of a SavedModel folder)."""
    return _decode_nested(_saved_model, data, where)


def decode_saved_object_graph(data: Bytes, *, where: str = "SavedObjectGraph") -> SavedObjectGraph:
    return _decode(_saved_object_graph, data, where)


def decode_object_graph(data: Bytes, *, where: str = "TrackableObjectGraph") -> TrackableObjectGraph:
    """A serialized ``TrackableObjectGraph`` (a TF2 checkpoint's object graph)."""
    return _decode(_object_graph, data, where)


def decode_saved_metadata(data: Bytes, *, where: str = "SavedMetadata") -> SavedMetadata:
    """A serialized Keras 2 ``SavedMetadata`` (``keras_metadata.pb``); each node's metadata
    stays a JSON string."""
    return _decode(_saved_metadata, data, where)


# -- files -----------------------------------------------------------------------------------------

def _read(path: Path, what: str) -> bytes:
    if not os.path.lexists(path):
        raise FormatError(f"{path}: no such file; expected {what}.")
    # protobuf's limit for one message: a larger file is no such message
    return inputs.read_file(path, str(path), limit=MAX_MESSAGE_BYTES)


def read_graph_def(path: str | os.PathLike[str]) -> GraphDef:
    """The ``GraphDef`` in a binary ``.pb`` file (a frozen graph)."""
    path = Path(path)
    return decode_graph_def(_read(path, "a binary GraphDef (.pb)"), where=str(path))


def read_saved_model(path: str | os.PathLike[str]) -> SavedModel:
    """The ``SavedModel`` of a SavedModel folder (or of its ``saved_model.pb`` file)."""
    path = Path(path)
    if path.is_dir():
        if not (path / "saved_model.pb").is_file() and (path / "saved_model.pbtxt").is_file():
            raise UnsupportedFeatureError(
                f"{path / 'saved_model.pbtxt'}: a SavedModel in protobuf's text format; rnnport "
                "reads the binary saved_model.pb only. Re-save it with as_text=False.")
        path = path / "saved_model.pb"
    return decode_saved_model(_read(path, "a SavedModel's saved_model.pb"), where=str(path))


def read_saved_metadata(path: str | os.PathLike[str]) -> SavedMetadata:
    """The ``SavedMetadata`` in a file (Keras 2 writes it as ``keras_metadata.pb``)."""
    path = Path(path)
    return decode_saved_metadata(_read(path, "a SavedMetadata file"), where=str(path))


def read_object_graph(checkpoint: object) -> TrackableObjectGraph:
    """The object graph of a TF2 checkpoint: a :class:`~rnnport.io.tensorbundle.Bundle`, or
    anything ``Bundle`` opens (a prefix, its ``.index`` file, a folder)."""
    from .tensorbundle import Bundle

    bundle = checkpoint if isinstance(checkpoint, Bundle) else Bundle(checkpoint)  # type: ignore[arg-type]
    where = f"{bundle.prefix}: tensor {OBJECT_GRAPH_KEY!r}"
    if OBJECT_GRAPH_KEY not in bundle:
        raise FormatError(f"{bundle.prefix}: no {OBJECT_GRAPH_KEY} tensor; expected one in an "
                          "object-based checkpoint (tf.train.Checkpoint, Model.save_weights), so "
                          "this is a name-based checkpoint (tf.compat.v1.train.Saver).")
    entry = bundle[OBJECT_GRAPH_KEY]
    if entry.dtype != "string" or entry.shape != ():
        raise FormatError(f"{where}: a {entry.dtype} tensor of shape {list(entry.shape)}; expected "
                          "one string (the serialized object graph), so the checkpoint is damaged.")
    value = bundle.read(OBJECT_GRAPH_KEY).reshape(-1)[0]
    return decode_object_graph(value, where=where)


# -- the object graph as paths ------------------------------------------------------------------

def _escape(local_name: str) -> str:
    # TensorFlow's own escaping in checkpoint keys, so that a path is its key's prefix.
    return local_name.replace(".", "..").replace("/", ".S")


def checkpoint_keys(graph: TrackableObjectGraph, *, where: str = OBJECT_GRAPH_KEY,
                    charge: Callable[[int], None] | None = None) -> dict[str, str]:
    """``{object path: checkpoint key}`` for every value the checkpoint saves.

    A path joins the (escaped) local names from the root, node 0, breadth first in the
    order children are listed: the path TensorFlow names the checkpoint key after, so a
    variable's path is its key less ``/.ATTRIBUTES/VARIABLE_VALUE``
    (``layer_with_weights-0/cell/kernel``). A node reached twice (shared, or in a cycle)
    keeps its first path. A value other than ``VARIABLE_VALUE`` is
    ``PATH/.ATTRIBUTES/NAME``; optimizer slots are
    ``VARIABLE_PATH/.OPTIMIZER_SLOT/OPTIMIZER_PATH/SLOT_NAME``, as TensorFlow names them.
    A child or slot naming a node that does not exist raises :class:`FormatError`
    (``where`` starts its message). ``charge``, where given, is called with each path's
    length before the path is built, in place of the :data:`MAX_PATH_CHARS` bound (a
    reader's own budget for the paths, which raises past it).
    """
    nodes = graph.nodes
    if not nodes:
        return {}

    def node_at(node_id: int, what: str) -> int:
        if not 0 <= node_id < len(nodes):
            raise FormatError(f"{where}: {what} names node {node_id}; expected one of "
                              f"0..{len(nodes) - 1}, so the object graph is damaged.")
        return node_id

    paths: dict[int, str] = {0: ""}
    left = MAX_PATH_CHARS

    def remember(node_id: int, path: str) -> None:
        # Each path repeats its parent's, so a long chain of nodes would cost the square of
        # its length: the paths' total is bounded before it is kept.
        nonlocal left
        if charge is not None:
            charge(len(path))
            paths[node_id] = path
            return
        left -= len(path)
        if left < 0:
            raise FormatError(f"{where}: the object paths come to more than {MAX_PATH_CHARS:,} "
                              "characters (a chain of nodes nested very deep); the object graph "
                              "is damaged or built to exhaust memory.")
        paths[node_id] = path

    queue = deque([0])
    while queue:
        parent = queue.popleft()
        for index, child in enumerate(nodes[parent].children):
            node_id = node_at(child.node_id, f"nodes[{parent}].children[{index}]")
            if node_id not in paths:
                prefix = paths[parent]
                remember(node_id, f"{prefix}/{_escape(child.local_name)}" if prefix
                         else _escape(child.local_name))
                queue.append(node_id)
    for optimizer in list(paths):
        for index, slot in enumerate(nodes[optimizer].slot_variables):
            what = f"nodes[{optimizer}].slot_variables[{index}]"
            original = node_at(slot.original_variable_node_id, what)
            slot_id = node_at(slot.slot_variable_node_id, what)
            if slot_id not in paths and original in paths:
                remember(slot_id, f"{paths[original]}/.OPTIMIZER_SLOT/{paths[optimizer]}/"
                                  f"{_escape(slot.slot_name)}")
    keys: dict[str, str] = {}
    for node_id, path in paths.items():
        for attribute in nodes[node_id].attributes:
            if attribute.name == "VARIABLE_VALUE" and path:
                keys[path] = attribute.checkpoint_key
            else:
                name = f".ATTRIBUTES/{_escape(attribute.name)}"
                keys[f"{path}/{name}" if path else name] = attribute.checkpoint_key
    return keys
