"""Writing a network as an ML Program: a ``.mlpackage`` folder of MIL ``lstm`` / ``rnn``
operations, as coremltools writes one.

**The package**: ``Manifest.json`` (two items: the ``Model`` file and the weights folder, the
first the root), ``Data/com.apple.CoreML/model.mlmodel`` and
``Data/com.apple.CoreML/weights/weight.bin``. The folder is written beside the target under a
temporary name and renamed into place whole, so a reader never sees half a package.

**The program** (function ``main``): input ``input`` ``(T, B, I)`` (time first, both of any
size); the zero initial state ``(B, D·H)`` made from the input's shape (``shape``,
``slice_by_index``, ``concat``, ``fill``); one ``lstm`` or ``rnn`` operation per network
layer with ``output_sequence`` set, each taking the one before's sequence output (a reverse
layer's through a ``reverse`` along axis 0, which puts its outputs back in time order);
output the last one's sequence ``(T, B, D·H)``. Weights are ``const`` operations in ``weight.bin``:
``weight_ih (4H, I)``, ``weight_hh (4H, H)``, ``bias (4H,)`` (the two canonical biases
summed) in MIL's gate order i f o g, peepholes ``(3H,)`` i f o, ``*_back`` for a
bidirectional LSTM's backward direction. Float32 weights: specification version 6 (opset
``CoreML5``, iOS 15); float16: version 8 (``CoreML7``, iOS 17, whose ``lstm`` takes float16),
with a float16 input and output.

**The weights file** (coremltools' ``MILBlob`` storage, version 2): a 64-byte header (the
number of blobs, u32; the version, u32), then per blob, 64-byte aligned, a 64-byte record
(``0xDEADBEEF``; data type 1 float16, 2 float32; size in bytes, u64; the data's offset, u64)
and the data.
"""

from __future__ import annotations

import json
import os
import struct
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ...errors import FormatError, UnsupportedFeatureError
from ...gates import CANONICAL, reorder
from ...io._proto import varint
from ...io.atomic import atomic_write_folder
from ...io.packages import Package
from ...model import RNN, Model, Stack
from ...spec import Spec
from .._common import sum_exact
from .fields import put_bytes, put_varint

__all__ = ["WEIGHTS", "CoreMLPackage", "encode_package", "save_package"]

WEIGHTS = "@model_path/weights/weight.bin"
MODEL_ITEM, WEIGHTS_ITEM = "com.apple.CoreML/model.mlmodel", "com.apple.CoreML/weights"
BLOB_SENTINEL, BLOB_VERSION, ALIGN = 0xDEADBEEF, 2, 64
# MIL.proto's data types, and the blob file's.
FLOAT16, FLOAT32, INT32, STRING, BOOL = 10, 11, 23, 2, 1
BLOB_TYPES = {FLOAT16: 1, FLOAT32: 2}
ARRAY_TYPES = {FLOAT16: 65552, FLOAT32: 65568}  # ArrayFeatureType's FLOAT16, FLOAT32
VERSIONS = {FLOAT32: (6, "CoreML5"), FLOAT16: (8, "CoreML7")}
MIL_ACTIVATIONS = {"Sigmoid": "sigmoid", "Tanh": "tanh", "Relu": "relu"}
MIL_ORDER = "ifog"


class CoreMLPackage(NamedTuple):
    """An ML Program package in memory: the ``Model`` bytes and its ``weight.bin``."""

    spec: bytes
    weights: bytes


# -- MIL.proto -------------------------------------------------------------------------------


def _tensor_type(dtype: int, shape: Sequence[int | None]) -> bytes:
    """A ``ValueType`` holding a ``TensorType``; None is a dimension of unknown size."""
    dims = b"".join(put_bytes(3, put_bytes(2, b"") if size is None
                              else put_bytes(1, put_varint(1, size))) for size in shape)
    return put_bytes(1, put_varint(1, dtype) + put_varint(2, len(shape)) + dims)


def _entry(number: int, key: str, value: bytes) -> bytes:
    return put_bytes(number, put_bytes(1, key.encode()) + put_bytes(2, value))


def _immediate(dtype: int, shape: Sequence[int], tensor: bytes) -> bytes:
    return put_bytes(2, _tensor_type(dtype, shape)) + put_bytes(3, put_bytes(1, tensor))


def _string(text: str) -> bytes:
    return _immediate(STRING, (), put_bytes(4, put_bytes(1, text.encode())))


class _Program:
    """The operations of one block, and the blobs of the weights file, as they are added."""

    def __init__(self) -> None:
        self.ops: list[bytes] = []
        self.blobs = bytearray(ALIGN)
        self.count = 0

    def op(self, kind: str, name: str, inputs: dict[str, str | Sequence[str]],
           outputs: Sequence[tuple[str, int, Sequence[int | None]]],
           val: bytes | None = None) -> None:
        body = put_bytes(1, kind.encode())
        for key, bound in inputs.items():
            names = [bound] if isinstance(bound, str) else list(bound)
            body += _entry(2, key, b"".join(put_bytes(1, put_bytes(1, item.encode()))
                                            for item in names))
        for output, dtype, shape in outputs:
            body += put_bytes(3, put_bytes(1, output.encode()) + put_bytes(2, _tensor_type(dtype,
                                                                                          shape)))
        body += _entry(5, "name", _string(name))
        if val is not None:
            body += _entry(5, "val", val)
        self.ops.append(put_bytes(3, body))

    def const(self, name: str, value: np.ndarray | str | bool | Sequence[int]) -> str:
        """A ``const`` operation named ``name``: float arrays in the weights file."""
        if isinstance(value, np.ndarray):
            dtype = FLOAT16 if value.dtype == np.float16 else FLOAT32
            val = put_bytes(2, _tensor_type(dtype, value.shape)) + put_bytes(
                5, put_bytes(1, WEIGHTS.encode()) + put_varint(2, self._blob(value, dtype)))
            shape: Sequence[int] = value.shape
        elif isinstance(value, str):
            dtype, shape, val = STRING, (), _string(value)
        elif isinstance(value, bool):
            dtype, shape = BOOL, ()
            val = _immediate(BOOL, (), put_bytes(3, put_bytes(1, varint(int(value)))))
        else:
            dtype, shape = INT32, (len(value),)
            val = _immediate(INT32, shape, put_bytes(2, put_bytes(
                1, b"".join(varint(item) for item in value))))
        self.op("const", name, {}, [(name, dtype, shape)], val)
        return name

    def _blob(self, array: np.ndarray, dtype: int) -> int:
        data = array.astype("<f2" if dtype == FLOAT16 else "<f4").tobytes()
        offset = len(self.blobs)
        record = struct.pack("<IIQQ", BLOB_SENTINEL, BLOB_TYPES[dtype], len(data),
                             offset + ALIGN)
        self.blobs += record.ljust(ALIGN, b"\0") + data
        self.blobs += b"\0" * (-len(self.blobs) % ALIGN)
        self.count += 1
        return offset

    def weights(self) -> bytes:
        self.blobs[:8] = struct.pack("<II", self.count, BLOB_VERSION)
        return bytes(self.blobs)


# -- the network -----------------------------------------------------------------------------


def _refuse(spec: Spec) -> None:
    if spec.cell == "gru":
        raise UnsupportedFeatureError(
            "coreml: a GRU into an ML Program (.mlpackage): MIL's gru operation (one bias, "
            "o = act(W_io x + r∘(W_ho h) + b)) is neither canonical GRU. Write a reset-before "
            "GRU to a NeuralNetwork .mlmodel (its gru layer), or the network to ONNX.")
    if spec.cell != "lstm" and spec.bidirectional:
        raise UnsupportedFeatureError(
            "coreml: a bidirectional simple RNN into an ML Program (.mlpackage): MIL's rnn "
            "runs forward or reverse. Write it to a NeuralNetwork .mlmodel instead.")
    if spec.input_forget:
        raise UnsupportedFeatureError(
            "coreml: coupled input and forget gates into an ML Program (.mlpackage): MIL's "
            "lstm has none. Write them to a NeuralNetwork .mlmodel (coupledInputAndForgetGate).")
    names = [name for name, _, _ in spec.activations]
    if any(name not in MIL_ACTIVATIONS for name in names):
        raise UnsupportedFeatureError(
            f"coreml: the activations {', '.join(names)} into an ML Program (.mlpackage): "
            "rnnport writes MIL's sigmoid, tanh and relu, which take no parameters. Write "
            "them to a NeuralNetwork .mlmodel (ActivationParams) instead.")


def _layer(program: _Program, spec: Spec, directions: list[dict[str, np.ndarray]], index: int,
           x: str, zeros: str, dtype: int) -> str:
    cell = "lstm" if spec.cell == "lstm" else "rnn"
    name = f"{cell}_{index}"
    order = MIL_ORDER if cell == "lstm" else "h"
    canonical = CANONICAL["lstm" if cell == "lstm" else "rnn"]
    inputs: dict[str, str | Sequence[str]] = {"x": x, "initial_h": zeros}
    if cell == "lstm":
        inputs["initial_c"] = zeros
    for named, suffix in zip(directions, ("", "_back"), strict=False):
        for key in ("weight_ih", "weight_hh"):
            inputs[key + suffix] = program.const(f"{name}_{key}{suffix}",
                                                 reorder(named[key], canonical, order))
        if spec.bias:
            rows = named["weight_ih"].shape[0]
            zero = np.zeros(rows, named["weight_ih"].dtype)
            bias = sum_exact(named.get("bias_ih", zero), named.get("bias_hh", zero))
            inputs["bias" + suffix] = program.const(f"{name}_bias{suffix}",
                                                    reorder(bias, canonical, order))
        if spec.peepholes:
            inputs["peephole" + suffix] = program.const(
                f"{name}_peephole{suffix}", np.ascontiguousarray(named["weight_peephole"]
                                                                 ).reshape(-1))
    direction = "bidirectional" if spec.bidirectional else \
        "reverse" if spec.reverse else "forward"
    inputs["direction"] = program.const(f"{name}_direction", direction)
    inputs["output_sequence"] = program.const(f"{name}_output_sequence", True)
    names = [MIL_ACTIVATIONS[item[0]] for item in spec.activations]
    if cell == "lstm":
        for key, chosen in zip(("recurrent_activation", "cell_activation", "activation"),
                               names or ["sigmoid", "tanh", "tanh"], strict=True):
            inputs[key] = program.const(f"{name}_{key}", chosen)
        if spec.cell_clip is not None:
            clip = np.array(spec.cell_clip, np.float16 if dtype == FLOAT16 else np.float32)
            inputs["clip"] = program.const(f"{name}_clip", clip)
    else:
        inputs["activation"] = program.const(f"{name}_activation",
                                             "tanh" if spec.cell == "rnn_tanh" else "relu")
    width = spec.num_directions * spec.hidden_size
    outputs = [(f"{name}_y", dtype, (None, None, width)), (f"{name}_h", dtype, (None, width))]
    if cell == "lstm":
        outputs.append((f"{name}_c", dtype, (None, width)))
    program.op(cell, name, inputs, outputs)
    if not spec.reverse:
        return f"{name}_y"
    # a reverse operation outputs its steps in the order it ran them: back to time order
    program.op("reverse", f"{name}_y_time_order",
               {"x": f"{name}_y", "axes": program.const(f"{name}_time_axis", [0])},
               [(f"{name}_y_time_order", dtype, (None, None, width))])
    return f"{name}_y_time_order"


def _zeros(program: _Program, width: int, dtype: int, made: dict[int, str]) -> str:
    """The zero state ``(B, width)``, B taken from the input's shape; one per width."""
    if width not in made:
        if not made:
            program.op("shape", "input_shape", {"x": "input"}, [("input_shape", INT32, (3,))])
            begin, end = program.const("batch_begin", [1]), program.const("batch_end", [2])
            program.op("slice_by_index", "batch", {"x": "input_shape", "begin": begin,
                                                   "end": end}, [("batch", INT32, (1,))])
        name = f"zeros_{width}"
        values = ["batch", program.const(f"{name}_width", [width])]
        axis = f"{name}_axis"
        program.op("const", axis, {}, [(axis, INT32, ())],
                   _immediate(INT32, (), put_bytes(2, put_bytes(1, varint(0)))))
        program.op("concat", f"{name}_shape", {"values": values, "axis": axis},
                   [(f"{name}_shape", INT32, (2,))])
        value = program.const(f"{name}_value",
                              np.zeros((), np.float16 if dtype == FLOAT16 else np.float32))
        program.op("fill", name, {"shape": f"{name}_shape", "value": value},
                   [(name, dtype, (None, width))])
        made[width] = name
    return made[width]


def _feature(name: str, size: int, dtype: int, ranged: bool) -> bytes:
    """A ``FeatureDescription``: a multi-array; the input's ranges ``(1…, 1…, size)``."""
    array = put_varint(2, ARRAY_TYPES[dtype])
    if ranged:
        sizes = b"".join(put_bytes(1, put_varint(1, low) + put_varint(2, high))
                         for low, high in ((1, -1), (1, -1), (size, size)))
        array = put_bytes(1, varint(1) + varint(1) + varint(size)) + array + put_bytes(31, sizes)
    return put_bytes(1, name.encode()) + put_bytes(3, put_bytes(5, array))


def encode_package(model: Model) -> CoreMLPackage:
    """The ``Model`` bytes and the weights file of ``model`` as an ML Program."""
    parts: tuple[RNN, ...] = model.parts if isinstance(model, Stack) else (model,)
    for part in parts:
        _refuse(part.spec)
    dtype = FLOAT16 if all(array.dtype == np.float16 for part in parts
                           for layer in part.params for named in layer
                           for array in named.values()) else FLOAT32
    if dtype == FLOAT32 and any(array.dtype != np.float32 for part in parts
                                for layer in part.params for named in layer
                                for array in named.values()):
        raise FormatError("coreml: an ML Program holds float32 or float16 weights, one kind "
                          "for the whole network; cast the model (model.astype('float32')).")
    program, made = _Program(), {}  # type: ignore[var-annotated]
    x, index = "input", 0
    for part in parts:
        spec = part.spec
        for layer, directions in enumerate(part.params):
            layer_spec = spec.replace(num_layers=1, input_size=spec.layer_input_size(layer))
            zeros = _zeros(program, layer_spec.num_directions * spec.hidden_size, dtype, made)
            x = _layer(program, layer_spec, [dict(named) for named in directions], index, x,
                       zeros, dtype)
            index += 1
    first, last = parts[0].spec, parts[-1].spec
    version, opset = VERSIONS[dtype]
    block = put_bytes(2, x.encode()) + b"".join(program.ops)
    function = (put_bytes(1, put_bytes(1, b"input") + put_bytes(
                    2, _tensor_type(dtype, (None, None, first.input_size))))
                + put_bytes(2, opset.encode()) + _entry(3, opset, block))
    ml_program = put_varint(1, 1) + _entry(2, "main", function)
    description = (put_bytes(1, _feature("input", first.input_size, dtype, True))
                   + put_bytes(10, _feature(x, last.num_directions * last.hidden_size, dtype,
                                            False)))
    spec_bytes = put_varint(1, version) + put_bytes(2, description) + put_bytes(502, ml_program)
    return CoreMLPackage(spec_bytes, program.weights())


def manifest() -> bytes:
    """``Manifest.json`` as coremltools writes it (new identifiers each time)."""
    model, weights = str(uuid.uuid4()).upper(), str(uuid.uuid4()).upper()
    items = {weights: {"author": "com.apple.CoreML", "description": "CoreML Model Weights",
                       "name": "weights", "path": WEIGHTS_ITEM},
             model: {"author": "com.apple.CoreML", "description": "CoreML Model Specification",
                     "name": "model.mlmodel", "path": MODEL_ITEM}}
    return json.dumps({"fileFormatVersion": "1.0.0", "itemInfoEntries": items,
                       "rootModelIdentifier": model}, indent=4).encode()


# An ML Program is written as a folder: NAME.mlpackage holding Manifest.json.
PACKAGE = Package(".mlpackage", "Manifest.json")


def save_package(package: CoreMLPackage, path: Path) -> None:
    """Write the package folder under a temporary name beside ``path``, then rename it in
    (:func:`~rnnport.io.atomic.atomic_write_folder`): replacing a package there only where
    :func:`~rnnport.io.atomic.replaces` allows, and never a folder that is no package."""

    def fill(folder: Path) -> None:
        data = folder / "Data"
        (data / WEIGHTS_ITEM).mkdir(parents=True)
        for name, content in ((data / WEIGHTS_ITEM / "weight.bin", package.weights),
                              (data / MODEL_ITEM, package.spec),
                              (folder / "Manifest.json", manifest())):
            with open(name, "wb") as file:
                file.write(content)
                file.flush()
                os.fsync(file.fileno())

    atomic_write_folder(path, fill, PACKAGE)
