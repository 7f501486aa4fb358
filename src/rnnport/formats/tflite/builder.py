"""Building a ``.tflite`` FlatBuffer: subgraphs of tensors and builtin operators.

The tables and their field slots are :data:`rnnport.io.tflite_schema.FIELDS`' (the
``Model``, ``SubGraph``, ``Tensor``, ``Operator``, ``OperatorCode`` and ``Buffer`` tables
and the recurrent options tables) and, for the options tables of the plain builtins,
:data:`rnnport.io.tflite_schema.PLAIN_OPTIONS` (:data:`OPTIONS` here; a test compares them
with LiteRT's ``schema_py_generated``). Buffer 0 is the empty sentinel every non-constant
tensor points at; constant data is aligned to 16 bytes, as the converter aligns it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...io.tflite_schema import BUILTIN_OPTIONS, FIELDS, PLAIN_OPTIONS, TENSOR_TYPES

__all__ = ["OPTIONS", "Graph", "ModelBuilder", "options_number"]

# The recurrent options tables' scalar kinds (their field indices are tflite_schema.FIELDS').
_RECURRENT_KINDS = {"fused_activation_function": "int8", "cell_clip": "float32",
                    "proj_clip": "float32", "time_major": "bool", "merge_outputs": "bool",
                    "asymmetric_quantize_inputs": "bool", "diagonal_recurrent_tensors": "bool"}
_DTYPE_TYPES = {np.dtype(dtype): number for number, (_, dtype) in TENSOR_TYPES.items()
                if dtype is not None}
_PREPEND = {"int8": "PrependInt8Slot", "int32": "PrependInt32Slot",
            "uint32": "PrependUint32Slot", "bool": "PrependBoolSlot",
            "float32": "PrependFloat32Slot"}
SCHEMA_VERSION = 3
OPTIONS = PLAIN_OPTIONS


def options_number(table: str) -> int:
    """The BuiltinOptions union number of options table ``table``."""
    for number, name in BUILTIN_OPTIONS.items():
        if name == table:
            return number
    return OPTIONS[table][0]


def _fields(table: str) -> dict[str, tuple[int, str]]:
    if table in OPTIONS:
        return OPTIONS[table][1]
    return {name: (index, _RECURRENT_KINDS[name]) for name, index in FIELDS[table].items()}


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    type: int
    buffer: int
    signature: tuple[int, ...] | None
    variable: bool


@dataclass
class _Operator:
    code: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    options: tuple[str, dict[str, Any]] | None


@dataclass
class Graph:
    """One subgraph; tensors are referred to by index."""

    model: ModelBuilder
    name: str
    tensors: list[_Tensor] = field(default_factory=list)
    operators: list[_Operator] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)

    def tensor(self, name: str, shape: Sequence[int], dtype: Any = np.float32, *,
               signature: Sequence[int] | None = None, variable: bool = False,
               data: np.ndarray | None = None) -> int:
        buffer = 0 if data is None else self.model.buffer(data)
        sig = None if signature is None or tuple(signature) == tuple(shape) else tuple(signature)
        self.tensors.append(_Tensor(f"{name}" if name else f"t{len(self.tensors)}",
                                    tuple(int(d) for d in shape), _DTYPE_TYPES[np.dtype(dtype)],
                                    buffer, sig, variable))
        return len(self.tensors) - 1

    def const(self, name: str, value: Any, dtype: Any = np.float32) -> int:
        array = np.array(value, dtype=dtype, order="C")  # keeps a scalar 0-d
        return self.tensor(name, array.shape, array.dtype, data=array)

    def like(self, name: str, source: int, shape: Sequence[int] | None = None,
             signature: Sequence[int] | None = None, dtype: Any = None) -> int:
        """A new run-time tensor with ``source``'s type (and shape unless given)."""
        base = self.tensors[source]
        kind = np.dtype(TENSOR_TYPES[base.type][1]) if dtype is None else np.dtype(dtype)
        if shape is None:
            shape, signature = base.shape, base.signature
        return self.tensor(name, shape, kind, signature=signature)

    def op(self, code: int, inputs: Sequence[int], outputs: Sequence[int],
           options: tuple[str, dict[str, Any]] | None = None) -> None:
        self.model.opcode(code)
        self.operators.append(_Operator(code, tuple(inputs), tuple(outputs), options))


class ModelBuilder:
    """The whole model: buffers, operator codes, subgraphs (0 is the main one)."""

    def __init__(self, description: str) -> None:
        self.description = description
        self.buffers: list[bytes] = [b""]
        self.codes: list[int] = []
        self.graphs: list[Graph] = []
        self.metadata: list[tuple[str, int]] = []  # (name, buffer index)

    def add_metadata(self, name: str, data: bytes) -> None:
        """A ``Metadata`` entry: ``name`` and a buffer holding ``data``."""
        self.metadata.append((name, self.buffer(np.frombuffer(data, dtype=np.uint8))))

    def graph(self, name: str) -> Graph:
        graph = Graph(self, name)
        self.graphs.append(graph)
        return graph

    def buffer(self, data: np.ndarray) -> int:
        self.buffers.append(np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<")).tobytes())
        return len(self.buffers) - 1

    def opcode(self, code: int) -> int:
        if code not in self.codes:
            self.codes.append(code)
        return self.codes.index(code)

    def finish(self, flatbuffers: Any) -> bytes:
        """The FlatBuffer, built with the ``flatbuffers`` runtime."""
        b = flatbuffers.Builder(1024 + sum(len(data) for data in self.buffers))

        def ints(values: Sequence[int], dtype: Any = np.int32) -> int:
            result: int = b.CreateNumpyVector(np.asarray(values, dtype=dtype))
            return result

        def offsets(items: Sequence[int]) -> int:
            b.StartVector(4, len(items), 4)
            for item in reversed(items):
                b.PrependUOffsetTRelative(item)
            result: int = b.EndVector()
            return result

        def table(name: str, values: dict[str, Any]) -> int:
            """An options table of scalars, each written even where it equals the default."""
            layout = _fields(name)
            b.StartObject(1 + max((index for index, _ in layout.values()), default=-1))
            for key, value in values.items():
                index, kind = layout[key]
                getattr(b, _PREPEND[kind])(index, value, None)
            result: int = b.EndObject()
            return result

        buffer_tables = []
        for data in self.buffers:
            if data:
                b.StartVector(1, len(data), 16)
                b.head = b.head - len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                vector = b.EndVector()  # StartVector recorded the element count
                buffer_tables.append(_plain(b, FIELDS["Buffer"], {"data": ("offset", vector)}))
            else:
                buffer_tables.append(_plain(b, FIELDS["Buffer"], {}))
        code_tables = [_plain(b, FIELDS["OperatorCode"], {
            "deprecated_builtin_code": ("int8", min(code, 127)), "version": ("int32", 1),
            "builtin_code": ("int32", code)}) for code in self.codes]
        graph_tables = []
        for graph in self.graphs:
            tensor_tables = []
            for tensor in graph.tensors:
                name = b.CreateString(tensor.name)
                shape = ints(tensor.shape)
                signature = None if tensor.signature is None else ints(tensor.signature)
                values: dict[str, Any] = {"shape": ("offset", shape), "type": ("int8", tensor.type),
                                          "buffer": ("int32", tensor.buffer),
                                          "name": ("offset", name)}
                if tensor.variable:
                    values["is_variable"] = ("bool", True)
                if signature is not None:
                    values["shape_signature"] = ("offset", signature)
                tensor_tables.append(_plain(b, FIELDS["Tensor"], values))
            operator_tables = []
            for operator in graph.operators:
                inputs, outputs = ints(operator.inputs), ints(operator.outputs)
                values = {"opcode_index": ("int32", self.codes.index(operator.code)),
                          "inputs": ("offset", inputs), "outputs": ("offset", outputs)}
                if operator.options is not None:
                    options_name, options_values = operator.options
                    built = table(options_name, options_values)
                    values["builtin_options_type"] = ("int8", options_number(options_name))
                    values["builtin_options"] = ("offset", built)
                operator_tables.append(_plain(b, FIELDS["Operator"], values))
            tensors, operators = offsets(tensor_tables), offsets(operator_tables)
            inputs, outputs = ints(graph.inputs), ints(graph.outputs)
            name = b.CreateString(graph.name)
            graph_tables.append(_plain(b, FIELDS["SubGraph"], {
                "tensors": ("offset", tensors), "inputs": ("offset", inputs),
                "outputs": ("offset", outputs), "operators": ("offset", operators),
                "name": ("offset", name)}))
        codes, graphs = offsets(code_tables), offsets(graph_tables)
        buffers = offsets(buffer_tables)
        description = b.CreateString(self.description)
        values = {"version": ("int32", SCHEMA_VERSION), "operator_codes": ("offset", codes),
                  "subgraphs": ("offset", graphs), "description": ("offset", description),
                  "buffers": ("offset", buffers)}
        if self.metadata:
            entries = [_plain(b, FIELDS["Metadata"], {"name": ("offset", b.CreateString(name)),
                                                      "buffer": ("uint32", index)})
                       for name, index in self.metadata]
            values["metadata"] = ("offset", offsets(entries))
        root = _plain(b, FIELDS["Model"], values)
        b.Finish(root, file_identifier=b"TFL3")
        return bytes(b.Output())


def _plain(b: Any, fields: dict[str, int], values: dict[str, tuple[str, Any]]) -> int:
    """A table whose values are ``(kind, value)``: ``"offset"`` or a scalar kind."""
    b.StartObject(1 + max(fields.values()))
    for key, (kind, value) in values.items():
        if kind == "offset":
            b.PrependUOffsetTRelativeSlot(fields[key], value, 0)
        else:
            getattr(b, _PREPEND[kind])(fields[key], value, None)
    result: int = b.EndObject()
    return result
