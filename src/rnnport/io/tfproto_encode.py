"""TensorFlow's protocol buffers, written with the standard library: the ``GraphDef``,
``NodeDef``, ``AttrValue``, ``TensorProto`` and ``FunctionDef`` a frozen graph needs.

The field numbers are those :data:`rnnport.io.tfproto.FIELDS` reads (TensorFlow 2.21's
descriptors). Every function returns a serialized message as ``bytes``; map fields are
written with their keys sorted, so equal inputs give equal bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ._proto import key, varint

__all__ = ["DATA_TYPES", "attr_bool", "attr_func", "attr_int", "attr_shape",
           "attr_string", "attr_tensor", "attr_type", "attr_types", "function_def", "graph_def",
           "node_def", "shape_proto", "tensor_proto"]

# NumPy dtype → TensorFlow DataType number (types.proto).
DATA_TYPES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
              np.dtype(np.int64): 9, np.dtype(np.bool_): 10, np.dtype(np.float16): 19}


def _bytes_field(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


def _string_field(number: int, text: str) -> bytes:
    return _bytes_field(number, text.encode("utf-8"))


def shape_proto(shape: Sequence[int] | None) -> bytes:
    """A ``TensorShapeProto``: dim (2) each with size (1); -1 unknown; None unknown rank (3)."""
    if shape is None:
        return _varint_field(3, 1)
    return b"".join(_bytes_field(2, _varint_field(1, int(size)) if size else b"")
                    for size in shape)


def tensor_proto(array: np.ndarray) -> bytes:
    """A ``TensorProto``: dtype (1), tensor_shape (2), tensor_content (4, little-endian)."""
    array = np.asarray(array)
    code = DATA_TYPES.get(array.dtype.newbyteorder("="))
    if code is None:
        raise TypeError(f"tensor_proto: dtype {array.dtype} has no TensorFlow DataType here")
    little = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
    return (_varint_field(1, code) + _bytes_field(2, shape_proto(array.shape))
            + _bytes_field(4, little.tobytes()))


# AttrValue: list 1, s 2, i 3, f 4, b 5, type 6, shape 7, tensor 8, func 10.
def attr_string(value: str | bytes) -> bytes:
    return _bytes_field(2, value.encode("utf-8") if isinstance(value, str) else value)


def attr_int(value: int) -> bytes:
    return _varint_field(3, value)


def attr_bool(value: bool) -> bytes:
    return _varint_field(5, int(value))


def attr_type(dtype: np.dtype | int) -> bytes:
    return _varint_field(6, dtype if isinstance(dtype, int) else DATA_TYPES[np.dtype(dtype)])


def attr_types(dtypes: Sequence[np.dtype | int]) -> bytes:
    """A list of types (ListValue.type, 6, packed)."""
    packed = b"".join(varint(d if isinstance(d, int) else DATA_TYPES[np.dtype(d)])
                      for d in dtypes)
    return _bytes_field(1, _bytes_field(6, packed) if packed else b"")


def attr_shape(shape: Sequence[int] | None) -> bytes:
    return _bytes_field(7, shape_proto(shape))


def attr_tensor(array: np.ndarray) -> bytes:
    return _bytes_field(8, tensor_proto(array))


def attr_func(name: str) -> bytes:
    """A function reference (NameAttrList: name 1)."""
    return _bytes_field(10, _string_field(1, name))


def _map(number: int, entries: Mapping[str, bytes], message: bool = True) -> bytes:
    return b"".join(_bytes_field(number, _string_field(1, name) + (
        _bytes_field(2, value) if message else _string_field(2, value.decode("utf-8"))))
        for name, value in sorted(entries.items()))


def node_def(name: str, op: str, inputs: Sequence[str] = (),
             attrs: Mapping[str, bytes] | None = None) -> bytes:
    """A ``NodeDef``: name 1, op 2, input 3 (repeated), attr 5 (map of AttrValue bytes)."""
    return (_string_field(1, name) + _string_field(2, op)
            + b"".join(_string_field(3, item) for item in inputs) + _map(5, attrs or {}))


def function_def(name: str, inputs: Sequence[tuple[str, int]], outputs: Sequence[tuple[str, int]],
                 nodes: Sequence[bytes], returns: Mapping[str, str]) -> bytes:
    """A ``FunctionDef``: signature 1 (an OpDef: name 1, input_arg 2, output_arg 3, each an
    ArgDef: name 1, type 3), node_def 3, ret 4 (output name → tensor)."""
    def arg(item: tuple[str, int]) -> bytes:
        return _string_field(1, item[0]) + _varint_field(3, item[1])

    signature = (_string_field(1, name) + b"".join(_bytes_field(2, arg(i)) for i in inputs)
                 + b"".join(_bytes_field(3, arg(o)) for o in outputs))
    return (_bytes_field(1, signature) + b"".join(_bytes_field(3, node) for node in nodes)
            + _map(4, {k: v.encode("utf-8") for k, v in returns.items()}, message=False))


def graph_def(nodes: Sequence[bytes], functions: Sequence[bytes] = (), producer: int = 1882) -> bytes:
    """A ``GraphDef``: node 1, library 2 (function 1), versions 4 (producer 1)."""
    library = b"".join(_bytes_field(1, function) for function in functions)
    return (b"".join(_bytes_field(1, node) for node in nodes)
            + (_bytes_field(2, library) if library else b"")
            + _bytes_field(4, _varint_field(1, producer)))
