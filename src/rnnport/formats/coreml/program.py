"""ML Program models: the MIL ``lstm`` and ``rnn`` operations and ``while_loop`` s of a
``Model.mlProgram``, as coremltools writes them by default (``.mlpackage`` folders).

**The package**: ``Manifest.json`` names, by ``rootModelIdentifier``, the item whose
``path`` (under ``Data/``) is the ``Model`` protocol buffer; the weights lie in
``weights/weight.bin`` beside it, which the program names ``@model_path/weights/weight.bin``.
Nothing outside the package is opened.

**The program** (Apple's ``MIL.proto``): ``functions`` (a map; ``main``, or the only one),
each with ``block_specializations[opset]``, a block of ``operations``: ``type``,
``inputs`` (a map of name → ``Argument``: a binding to a value name, or a value),
``outputs`` (named types) and ``attributes`` (a ``const``'s value is ``attributes["val"]``).
A ``Value`` is immediate (``TensorValue``: floats, ints, bools, strings, or raw bytes) or a
``blobFileValue`` (file name, offset). In ``weight.bin`` the value's offset points at a
64-byte record: ``0xDEADBEEF``, the data type (1 float16, 2 float32), the size in bytes
(u64) and the data's offset (u64).

**The operations** (coremltools' iOS15 opset)::

    lstm   x (T, B, I), initial_h / initial_c (B, H), weight_ih (4H, I), weight_hh (4H, H),
           bias (4H,) one per gate, peephole (3H,) rows i f o; *_back for the backward
           direction; direction forward | reverse | bidirectional; output_sequence;
           recurrent_activation (gates i f o), cell_activation (the cell gate g),
           activation (applied to c'); clip: the cell state's clip.
           Rows are in gate order i f o g (canonical i f g o).
    rnn    weight_ih (H, I), weight_hh (H, H), bias (H,); activation tanh or relu.

Activations sigmoid, tanh and relu are read (MIL gives the others no parameters here).
A ``direction="reverse"`` operation outputs its steps in the order it ran them (the output
after the last step first: coremltools' tests expect PyTorch's output for the flipped
sequence, unflipped), so it reads as ``Spec.reverse`` (time-ordered ``y``) when a
``reverse`` along axis 0 alone follows it (the network goes on from that output), or when it
outputs its last step alone; otherwise it is refused by name. ``gru`` is refused by name
(its documented equation, ``o = act(W_io x + r∘(W_ho h) + b)`` with one bias, is neither
canonical GRU: coremltools issues 1123 and 1124). A recurrent operation whose ``x`` is the
sequence output of the one before continues its network.

**Loops.** coremltools writes a PyTorch GRU (Core ML has no reset-after GRU) and a
TensorFlow Keras layer (from a SavedModel) as a ``while_loop``: its ``blocks`` (a ``Block``
holds input names, output names and operations) are the condition, ``less(counter, T)``,
and the body, over a counter from 0 and either a buffer of ``T + 1`` rows starting as zeros
(PyTorch: the body ``gather`` s row ``counter`` of the sequence and of the buffer, ``x`` and
``h``, and ``scatter`` s ``h'`` into row ``counter + 1``; ``slice_by_index`` takes rows 1 to
``T`` after the loop, the next layer's sequence in a multi-layer GRU) or, for Keras, the
states ``h`` (and ``c``) starting as zeros and a TensorList of ``T`` items (``make_list``)
whose item ``counter`` is set to ``h'`` (``list_write``), ``x`` being item ``counter`` of the
sequence's list (``list_read``). rnnport evaluates the body symbolically (:mod:`.loops`)
through ``linear``, ``matmul`` with a constant ``y``, ``add``, ``mul``, ``sub``, ``sigmoid``,
``tanh``, ``relu``, ``split`` of the features, ``squeeze``, ``expand_dims``, ``cast`` (to
fp32, or to fp16 in a step of float16 weights; a cast to another type is refused naming it),
``identity`` and ``const`` (numbers; a string where a number belongs, an axis that is no
whole number or a flag that is no bool makes its operation one rnnport cannot follow), and
reads a canonical simple RNN, GRU (reset after, or before)
or LSTM with the weights ``(out, in)`` as the body holds them, bit for bit (PyTorch's two
biases apart; Keras's one bias as the recurrent one); float16 ones
(``compute_precision=FLOAT16``) as float16, computed in float32 (the program computes its
step in float16; ``rnnport.notes`` says so, and that the loop runs exactly its ``T`` steps).
Another operation on the way, another step or condition, or a buffer or state that starts
other than as zeros is refused by name.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...gates import CANONICAL, reorder
from ...io import jsontext
from ...io.inputs import open_file, read_file
from ...model import RNN, Model, stack
from ...spec import Spec
from .._common import listed
from .fields import Message, last, message
from .loops import Loop, LoopCell, Node, loop_model, loop_notes, recognise, varints

__all__ = ["Block", "Operation", "flattened", "networks", "notes", "operations", "package_model",
           "read_program"]

MANIFEST_BYTES = 1 << 20
BLOB_SENTINEL = 0xDEADBEEF
BLOB_TYPES = {1: "<f2", 2: "<f4"}
TENSOR_TYPES = {10: "<f2", 11: "<f4"}
MODEL_PATH = "@model_path/"
MAX_NESTING = 16  # blocks inside blocks: a while_loop's body nests one
ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu"}
LSTM_ORDER = "ifog"


@dataclass(frozen=True)
class Operation:
    """One MIL operation: its type, input bindings (name → raw ``Argument``), output names
    and attributes (name → raw ``Value``)."""

    type: str
    inputs: dict[str, bytes]
    outputs: tuple[str, ...]
    attributes: dict[str, bytes]
    blocks: tuple[Block, ...] = ()  # a while_loop's condition and body

    @property
    def label(self) -> str:
        return f"{self.type} {self.outputs[0] if self.outputs else '(no output)'}"


@dataclass(frozen=True)
class Block:
    """A block of operations nested in one: its input names, output names, operations."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    operations: tuple[Operation, ...]


def _text(value: int | bytes, where: str) -> str:
    if not isinstance(value, bytes):
        raise FormatError(f"{where}: a name is a number; expected a string. The file is damaged.")
    return value.decode("utf-8", "replace")


def _inner(found: Message, number: int, where: str) -> Message:
    """The fields of a message-typed field (empty when absent or not a message)."""
    value = last(found, number, b"")
    return message(value if isinstance(value, bytes) else b"", where)


def _number(found: Message, number: int) -> int:
    value = last(found, number, 0)
    return value if isinstance(value, int) else 0


def _map(found: Message, number: int, where: str) -> dict[str, bytes]:
    """A protobuf map field (entries: key 1, value 2) of string keys and message values."""
    out: dict[str, bytes] = {}
    for entry in found.get(number, []):
        if not isinstance(entry, bytes):
            raise FormatError(f"{where}: a map entry is a number; expected a message.")
        fields = message(entry, where)
        value = last(fields, 2, b"")
        if not isinstance(value, bytes):
            raise FormatError(f"{where}: a map value is a number; expected a message.")
        out[_text(last(fields, 1, b""), where)] = value
    return out


def operations(program: bytes, where: str) -> list[Operation]:
    """The operations of the program's ``main`` function (or its only one), in order."""
    functions = _map(message(program, where), 2, where)
    if not functions:
        raise FormatError(f"{where}: an ML Program without functions; the file is damaged.")
    if "main" not in functions and len(functions) > 1:
        raise FormatError(f"{where}: an ML Program with functions {listed(functions)} and no "
                          "main; rnnport reads one function.")
    function = message(functions.get("main", next(iter(functions.values()))), where)
    opset = _text(last(function, 2, b""), where)
    blocks = _map(function, 3, where)
    if opset not in blocks:
        raise FormatError(f"{where}: no block for the function's opset {opset!r}; the file is "
                          "damaged.")
    return list(_block(blocks[opset], where, 0).operations)


def _block(raw: bytes, where: str, depth: int) -> Block:
    """A ``Block``: inputs (named value types), output names and operations, each with the
    blocks nested in it."""
    if depth > MAX_NESTING:
        raise FormatError(f"{where}: blocks nested deeper than {MAX_NESTING}; expected an ML "
                          "Program's few. The file is damaged or hostile.")
    found = message(raw, where)
    ops = []
    for item in found.get(3, []):
        if not isinstance(item, bytes):
            raise FormatError(f"{where}: an operation is a number; expected a message.")
        op = message(item, where)
        outputs = tuple(_text(last(message(value, where), 1, b""), where)
                        for value in op.get(3, []) if isinstance(value, bytes))
        nested = tuple(_block(value, where, depth + 1) for value in op.get(4, [])
                       if isinstance(value, bytes))
        ops.append(Operation(_text(last(op, 1, b""), where), _map(op, 2, where), outputs,
                             _map(op, 5, where), nested))
    names = tuple(_text(last(message(value, where), 1, b""), where)
                  for value in found.get(1, []) if isinstance(value, bytes))
    return Block(names, tuple(_text(value, where) for value in found.get(2, [])), tuple(ops))


def flattened(ops: list[Operation] | tuple[Operation, ...]) -> list[Operation]:
    """``ops`` and every operation nested in their blocks, in order."""
    out: list[Operation] = []
    pending = list(reversed(ops))
    while pending:
        op = pending.pop()
        out.append(op)
        for block in reversed(op.blocks):
            pending.extend(reversed(block.operations))
    return out


class _Values:
    """The constants of a program, decoded on demand (weights from ``weight.bin``)."""

    def __init__(self, ops: list[Operation], folder: Path | None, where: str,
                 meter: budget.Meter) -> None:
        self.where, self.folder, self.meter = where, folder, meter
        self.producers = {name: op for op in ops for name in op.outputs}
        self.decoded: dict[tuple[tuple[str, ...], str], Any] = {}
        self.flips = _flips(ops, self.producers, where)

    def argument(self, op: Operation, name: str) -> Any:
        """The value bound to input ``name`` of ``op`` (None when not bound), decoded once."""
        key = (op.outputs, name)
        if key not in self.decoded:
            self.decoded[key] = self._argument(op, name)
        return self.decoded[key]

    def text(self, op: Operation, name: str, default: str) -> str:
        """A string option (``default`` where not bound); FormatError where it is none."""
        found = self.argument(op, name)
        if found is None:
            return default
        if not isinstance(found, str):
            raise FormatError(f"{self.where}: {op.label} {name} is {_shown(np.asarray(found))}"
                              "; expected a string. The file is damaged.")
        return found

    def flag(self, op: Operation, name: str) -> bool:
        """A bool option (False where not bound); FormatError where it is none."""
        try:
            return _flag(self.argument(op, name), name)
        except UnsupportedFeatureError as error:
            raise FormatError(f"{self.where}: {op.label} {error}; expected a bool. The file is "
                              "damaged.") from None

    def _argument(self, op: Operation, name: str) -> Any:
        raw = op.inputs.get(name)
        if raw is None:
            return None
        bindings = message(raw, self.where).get(1, [])
        if len(bindings) != 1 or not isinstance(bindings[0], bytes):
            raise FormatError(f"{self.where}: {op.label} input {name} binds {len(bindings)} "
                              "values; expected one.")
        binding = message(bindings[0], self.where)
        if 2 in binding:
            value = last(binding, 2, b"")
            return self.value(value if isinstance(value, bytes) else b"", f"{op.label} {name}")
        source = _text(last(binding, 1, b""), self.where)
        producer = self.producers.get(source)
        if producer is None or producer.type != "const" or "val" not in producer.attributes:
            made = "a program input" if producer is None else f"a {producer.type} operation"
            raise UnsupportedFeatureError(
                f"{self.where}: {op.label} takes {name} from {source}, {made}; expected a "
                "const (rnnport reads weights the program holds, not ones it computes).")
        return self.value(producer.attributes["val"], f"{op.label} {name}")

    def value(self, raw: bytes, what: str) -> Any:
        found = message(raw, self.where)
        dtype, shape = self._type(found, what)
        if 5 in found:
            blob = _inner(found, 5, self.where)
            return self._blob(_text(last(blob, 1, b""), self.where), _number(blob, 2), dtype,
                              shape, what)
        immediate = _inner(found, 3, self.where)
        tensor = _inner(immediate, 1, self.where)
        count = math.prod(shape)
        if 4 in tensor:  # strings
            values = _inner(tensor, 4, self.where)
            return _text(last(values, 1, b""), self.where)
        if 2 in tensor:  # ints (int32; negative ones as 64-bit two's complement)
            values = _inner(tensor, 2, self.where)
            self.meter.charge(4 * count, what)
            ints = varints(values.get(1, []), f"{self.where}: {what}")
            array = np.array([number - (1 << 64) if number >= 1 << 63 else number
                              for number in ints], dtype=np.int64)
            if array.size != count:
                raise FormatError(f"{self.where}: {what} holds {array.size} values; its type "
                                  f"declares {count}. The file is damaged.")
            return array.reshape(shape)
        if 3 in tensor:  # bools
            values = _inner(tensor, 3, self.where)
            raw_bools = last(values, 1, 0)
            if shape:  # a mask: one per axis
                flags = list(raw_bools) if isinstance(raw_bools, bytes) else \
                    [item for item in values.get(1, []) if isinstance(item, int)]
                if len(flags) != count:
                    raise FormatError(f"{self.where}: {what} holds {len(flags)} values; its "
                                      f"type declares {count}. The file is damaged.")
                return np.array(flags, dtype=bool).reshape(shape)
            return bool(raw_bools[0] if isinstance(raw_bools, bytes) and raw_bools else raw_bools)
        self.meter.charge(4 * count, what)
        if 1 in tensor:  # floats
            values = _inner(tensor, 1, self.where)
            packed = last(values, 1, b"")
            array = _frombuffer(packed, "<f4", what, self.where) if isinstance(packed, bytes) \
                else np.array([int(item) for item in values.get(1, [])],
                              np.uint32).view(np.float32)
        elif 7 in tensor and dtype is not None:  # raw bytes of the declared type
            values = _inner(tensor, 7, self.where)
            packed = last(values, 1, b"")
            array = _frombuffer(packed if isinstance(packed, bytes) else b"", dtype, what,
                                self.where)
        else:
            raise UnsupportedFeatureError(f"{self.where}: {what} is not a float tensor, a "
                                          "string or a bool; rnnport reads those.")
        if array.size != count:
            raise FormatError(f"{self.where}: {what} holds {array.size} values; its type "
                              f"declares {count}. The file is damaged.")
        return array.reshape(shape).astype(array.dtype.newbyteorder("="))

    def _type(self, found: Message, what: str) -> tuple[str | None, tuple[int, ...]]:
        value_type = _inner(found, 2, self.where)
        tensor = _inner(value_type, 1, self.where)
        code = _number(tensor, 1)
        shape = []
        for raw in tensor.get(3, []):
            constant = message(raw, self.where) if isinstance(raw, bytes) else {}
            if 1 not in constant:
                raise FormatError(f"{self.where}: {what} has a dimension of unknown size; "
                                  "expected a constant's fixed shape.")
            size = _number(_inner(constant, 1, self.where), 1)
            if not 0 <= size < 2**31:
                raise FormatError(f"{self.where}: {what} has a dimension of {size}; the file "
                                  "is damaged.")
            shape.append(size)
        return TENSOR_TYPES.get(code), tuple(shape)

    def _blob(self, name: str, offset: int, dtype: str | None, shape: tuple[int, ...],
              what: str) -> np.ndarray:
        if self.folder is None:
            raise FormatError(f"{self.where}: {what} lies in {name}, outside the model's "
                              "bytes; read the .mlpackage folder (or the .mlmodel inside it) "
                              "instead.")
        if not name.startswith(MODEL_PATH):
            raise FormatError(f"{self.where}: {what} lies in {name!r}; expected a file under "
                              f"{MODEL_PATH} (the model's own folder).")
        count = math.prod(shape)
        self.meter.charge(4 * count, what)
        path = self.folder / name[len(MODEL_PATH):]
        with open_file(path, f"{self.where}: {what}", inside=self.folder,
                       name=name[len(MODEL_PATH):]) as file:
            size = os.fstat(file.fileno()).st_size
            if not 0 <= offset <= size - 64:
                raise FormatError(f"{self.where}: {what} at offset {offset:,} of {name}, which "
                                  f"holds {size:,} bytes; the file is damaged.")
            file.seek(offset)
            sentinel, kind, length, start = struct.unpack("<IIQQ", file.read(24))
            if sentinel != BLOB_SENTINEL:
                raise FormatError(f"{self.where}: {what}: no blob record at offset {offset:,} "
                                  f"of {name} (0x{sentinel:08X}, expected 0xDEADBEEF).")
            if kind not in BLOB_TYPES:
                raise UnsupportedFeatureError(
                    f"{self.where}: {what} is stored as blob type {kind}; rnnport reads "
                    "float16 (1) and float32 (2) weights (a palettized or quantized model "
                    "computes other numbers; convert from the float source).")
            blob_dtype = BLOB_TYPES[kind]
            if length != count * np.dtype(blob_dtype).itemsize or start + length > size:
                raise FormatError(f"{self.where}: {what}: a blob of {length:,} bytes at "
                                  f"{start:,} in {name} ({size:,} bytes); expected {count:,} "
                                  "values inside the file. The file is damaged or its sizes lie.")
            file.seek(start)
            data = file.read(length)
        return np.frombuffer(data, blob_dtype).reshape(shape).astype(
            np.dtype(blob_dtype).newbyteorder("="))


def _frombuffer(data: bytes, dtype: str, what: str, where: str) -> np.ndarray:
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise FormatError(f"{where}: {what} holds {len(data):,} bytes, not a whole number of "
                          f"{width}-byte values; the file is damaged.")
    return np.frombuffer(data, dtype)


def _bound(op: Operation, name: str, where: str) -> Message:
    """The one binding of input ``name`` (empty when not bound)."""
    return _inner(message(op.inputs.get(name, b""), where), 1, where)


def _ints(op: Operation, name: str, producers: dict[str, Operation], where: str
          ) -> list[int] | None:
    """The int32 values bound to input ``name`` of ``op``, immediate or a ``const``'s (None
    when they are something else)."""
    binding = _bound(op, name, where)
    value = last(binding, 2, b"")
    if 2 not in binding:
        producer = producers.get(_text(last(binding, 1, b""), where))
        if producer is None or producer.type != "const":
            return None
        value = producer.attributes.get("val", b"")
    tensor = _inner(_inner(message(value if isinstance(value, bytes) else b"", where), 3,
                           where), 1, where)
    if 2 not in tensor:
        return None
    raw = varints(_inner(tensor, 2, where).get(1, []), f"{where}: {op.label} {name}")
    return [number - 2**64 if number >= 2**63 else number for number in raw]


def _flips(ops: list[Operation], producers: dict[str, Operation], where: str
           ) -> dict[str, str]:
    """Value name → the output of the ``reverse`` that flips it along axis 0 (time) alone:
    what puts a ``direction="reverse"`` operation's outputs (in the order it ran them, the
    output after the last step first: coremltools' tests expect PyTorch's output for the
    flipped sequence, unflipped) back in time order."""
    out: dict[str, str] = {}
    for op in ops:
        if op.type == "reverse" and op.outputs and _ints(op, "axes", producers, where) in (
                [0], [-3]):
            out.setdefault(_text(last(_bound(op, "x", where), 1, b""), where), op.outputs[0])
    return out


def _output(op: Operation, values: _Values) -> str:
    """The name of a recurrent operation's sequence output in time order."""
    return values.flips.get(op.outputs[0], op.outputs[0]) \
        if values.text(op, "direction", "forward") == "reverse" else op.outputs[0]


def notes(program: bytes, where: str, folder: Path | None = None, size: int = 0) -> list[str]:
    """The operations beside the recurrent ones, by type, and what its loops do that the
    network read from them does not say (``folder``, ``size``: as :func:`read_program`)."""
    ops = operations(program, where)
    counts: dict[str, int] = {}
    for op in ops:
        if op.type not in ("const", "lstm", "rnn", "while_loop"):
            counts[op.type] = counts.get(op.type, 0) + 1
    out = ["other operations of the ML Program beside the network: "
           + listed(f"{count} {kind}" for kind, count in counts.items())] if counts else []
    if any(op.type == "while_loop" for op in ops):
        meter = budget.Meter("expansion", size, where, "bytes of weights decoded")
        out.extend(note for unit in _units(ops, _Values(flattened(ops), folder, where, meter),
                                           where)
                   if isinstance(unit.loop, LoopCell)
                   for note in loop_notes(_describe(unit), unit.loop))
    return out


def package_model(folder: Path, where: str) -> Path:
    """The ``Model`` file of a ``.mlpackage`` folder, as its ``Manifest.json`` names it."""
    text = read_file(folder / "Manifest.json", where, inside=folder, name="Manifest.json",
                     limit=MANIFEST_BYTES)
    manifest = jsontext.loads(text, f"{where}: Manifest.json", size=len(text))
    entries = manifest.get("itemInfoEntries") if isinstance(manifest, dict) else None
    root = manifest.get("rootModelIdentifier") if isinstance(manifest, dict) else None
    item = entries.get(root) if isinstance(entries, dict) and isinstance(root, str) else None
    path = item.get("path") if isinstance(item, dict) else None
    if not isinstance(path, str):
        raise FormatError(f"{where}: Manifest.json names no root model (rootModelIdentifier "
                          "and its itemInfoEntries path); expected a Core ML package's "
                          "manifest.")
    return folder / "Data" / path


def _spec(op: Operation, values: _Values, where: str, cell_clip: Any) -> tuple[Spec, Any]:
    direction = values.text(op, "direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise FormatError(f"{where}: {op.label} direction {direction!r}; expected forward, "
                          "reverse or bidirectional.")
    if direction == "reverse" and values.flag(op, "output_sequence") \
            and op.outputs[0] not in values.flips:
        raise UnsupportedFeatureError(
            f"{where}: {op.label} runs in reverse with output_sequence and gives its outputs "
            "in the order it ran them (the output after the last step first); no reverse "
            "along axis 0 puts them back in time order, and rnnport's reverse networks give "
            "y in time order (as ONNX's direction=\"reverse\"). Add reverse(x, axes=[0]) "
            "after it, or flip the time axis of x yourself and read a forward operation.")
    weight_ih = values.argument(op, "weight_ih")
    weight_hh = values.argument(op, "weight_hh")
    if not isinstance(weight_ih, np.ndarray) or not isinstance(weight_hh, np.ndarray) \
            or weight_ih.ndim != 2 or weight_hh.ndim != 2 or weight_ih.dtype.kind != "f" \
            or weight_hh.dtype.kind != "f":
        raise FormatError(f"{where}: {op.label} needs weight_ih and weight_hh matrices.")
    hidden, inputs = weight_hh.shape[1], weight_ih.shape[1]
    names = []
    for key in (("recurrent_activation", "cell_activation", "activation") if op.type == "lstm"
                else ("activation",)):
        name = values.text(op, key, "sigmoid" if key == "recurrent_activation" else "tanh")
        if name not in ACTIVATIONS:
            raise UnsupportedFeatureError(
                f"{where}: {op.label} {key}={name!r}; rnnport reads {listed(ACTIVATIONS)} "
                "(MIL gives the others no parameters here).")
        names.append(ACTIVATIONS[name])
    if op.type == "rnn":
        if direction == "bidirectional":
            raise UnsupportedFeatureError(f"{where}: a bidirectional rnn operation; MIL's rnn "
                                          "runs forward or reverse.")
        return Spec("rnn_tanh" if names[0] == "Tanh" else "rnn_relu", inputs, hidden,
                    bias=values.argument(op, "bias") is not None,
                    reverse=direction == "reverse"), weight_ih
    clip = values.argument(op, "clip")
    found = None if clip is None else np.asarray(clip)
    if found is not None and (found.size != 1 or found.dtype.kind != "f"):
        raise FormatError(f"{where}: {op.label} clip is {_shown(found)}; expected one float. "
                          "The file is damaged.")
    clip_value = None if found is None else float(found.reshape(-1)[0])
    if cell_clip != "file":
        clip_value = None if cell_clip is None else float(cell_clip)
    activations = tuple((name, 0.0, 0.0) for name in names)
    return Spec("lstm", inputs, hidden, bidirectional=direction == "bidirectional",
                reverse=direction == "reverse", bias=values.argument(op, "bias") is not None,
                peepholes=values.argument(op, "peephole") is not None, cell_clip=clip_value,
                activations=() if names == ["Sigmoid", "Tanh", "Tanh"] else activations
                ), weight_ih


def _layer(op: Operation, values: _Values, where: str, cell_clip: Any) -> RNN:
    spec, _ = _spec(op, values, where, cell_clip)
    order = LSTM_ORDER if spec.cell == "lstm" else "h"
    canonical = CANONICAL["lstm" if spec.cell == "lstm" else "rnn"]
    directions = []
    for suffix in ("", "_back")[:spec.num_directions]:
        rows = len(order) * spec.hidden_size
        sizes: dict[str, tuple[int, ...]] = {"weight_ih" + suffix: (rows, spec.input_size),
                 "weight_hh" + suffix: (rows, spec.hidden_size)}
        if spec.bias:
            sizes["bias" + suffix] = (rows,)
        if spec.peepholes:
            sizes["peephole" + suffix] = (3 * spec.hidden_size,)
        for key, shape in sizes.items():
            found = np.asarray(values.argument(op, key))
            if (found.shape if len(shape) == 2 else (found.size,)) != shape or \
                    found.dtype.kind != "f":
                raise FormatError(f"{where}: {op.label} {key} is {list(found.shape)}; expected "
                                  f"{list(shape)} ({len(order)} gates of {spec.hidden_size}). "
                                  "The file is damaged.")
        named = {"weight_ih": reorder(values.argument(op, "weight_ih" + suffix), order, canonical),
                 "weight_hh": reorder(values.argument(op, "weight_hh" + suffix), order, canonical)}
        if spec.bias:
            bias = values.argument(op, "bias" + suffix)
            named["bias_ih"] = reorder(np.asarray(bias).reshape(-1), order, canonical)
            named["bias_hh"] = np.zeros_like(named["bias_ih"])
        if spec.peepholes:
            named["weight_peephole"] = np.asarray(values.argument(op, "peephole" + suffix)
                                                  ).reshape(3, spec.hidden_size)
        directions.append(named)
    kinds = {array.dtype for named in directions for array in named.values()}
    dtype = np.float16 if kinds == {np.dtype(np.float16)} else np.float32
    return RNN(spec, [[{key: array.astype(dtype, copy=False) for key, array in named.items()}
                       for named in directions]], copy=False)


@dataclass(frozen=True)
class _Unit:
    """A recurrent operation: ``lstm``, ``rnn``, or a ``while_loop`` and its cell (or why
    it is none); the sequence it reads and the one it gives ("": none)."""

    op: Operation
    sequence: str
    output: str
    loop: LoopCell | UnsupportedFeatureError | None = None


def _units(ops: list[Operation], values: _Values, where: str) -> list[_Unit]:
    units = []
    top = {name: op for op in ops for name in op.outputs}  # MIL names each value once
    nodes: dict[str, Node] = {}

    def outer(name: str, reader: Node | None = None) -> Node | None:
        if name not in nodes and name in top:  # MIL names each value once: any reader's
            nodes[name] = _node(top[name], values, where)
        return nodes.get(name)

    slices: dict[str, list[Operation]] = {}
    for op in ops:
        if op.type == "slice_by_index":
            slices.setdefault(_names(op, "x", where)[0] if _names(op, "x", where) else "",
                              []).append(op)
    for op in ops:
        if op.type in ("lstm", "rnn"):
            source = _inner(message(op.inputs.get("x", b""), where), 1, where)
            units.append(_Unit(op, _text(last(source, 1, b""), where),
                               _output(op, values) if values.flag(op, "output_sequence")
                               else ""))
        elif op.type == "while_loop":
            try:
                cell = recognise(_loop(op, outer, values, where))
            except UnsupportedFeatureError as refusal:
                units.append(_Unit(op, "", "", refusal))
                continue
            output = ""
            for item in slices.get(cell.output, []):  # the rows the steps wrote: buffer[1:T+1]
                rows = outer(item.outputs[0]) if item.outputs else None
                if rows is not None and rows.kind == "rows" and \
                        rows.data in ((1, cell.steps + 1, 1), (1, None, 1)):
                    output = item.outputs[0]
                    break
            units.append(_Unit(op, cell.sequence, output, cell))
    return units


def _chains(units: list[_Unit]) -> list[list[_Unit]]:
    """The recurrent operations grouped into networks: one continues the one before when
    it reads that one's sequence output."""
    chains: list[list[_Unit]] = []
    for unit in units:
        if chains and chains[-1][-1].output and unit.sequence == chains[-1][-1].output:
            chains[-1].append(unit)
            continue
        chains.append([unit])
    return chains


def _describe(unit: _Unit) -> str:
    return unit.op.label if unit.op.type != "while_loop" else f"{unit.op.label} (while_loop)"


def networks(program: bytes, where: str) -> list[tuple[str, str]]:
    """Each network's first output name and its operations, for ``layer=``."""
    ops = operations(program, where)
    values = _Values(flattened(ops), None, where,
                     budget.Meter("expansion", len(program), where, "bytes"))
    return [(chain[0].op.outputs[0], " → ".join(_describe(unit) for unit in chain))
            for chain in _chains(_units(ops, values, where))]


def _unit_model(unit: _Unit, values: _Values, where: str, cell_clip: Any) -> RNN:
    if isinstance(unit.loop, UnsupportedFeatureError):
        raise UnsupportedFeatureError(*unit.loop.args) from None
    if unit.loop is not None:
        return loop_model(Spec(**unit.loop.fields), unit.loop)
    return _layer(unit.op, values, where, cell_clip)


def read_program(program: bytes, folder: Path | None, where: str, size: int,
                 cell_clip: Any = "file", layer: str | None = None) -> Model:
    """The recurrent network of an ML Program (``folder``: where its weights' files lie)."""
    ops = operations(program, where)
    meter = budget.Meter("expansion", size, where, "bytes of weights decoded")
    values = _Values(flattened(ops), folder, where, meter)
    units = _units(ops, values, where)
    if not units:
        refused = [op for op in ops if op.type == "gru"]
        if refused:
            raise UnsupportedFeatureError(
                f"{where}: an ML Program with {listed(op.label for op in refused)}: MIL's gru "
                "(one bias, o = act(W_io x + r∘(W_ho h) + b)) is neither canonical GRU; "
                "rnnport does not read it. Read the source network itself, or convert it to "
                "ONNX.")
        raise FormatError(f"{where}: an ML Program with no lstm, rnn or while_loop operation; "
                          f"found {listed(sorted({op.type for op in ops}))}.")
    chains = _chains(units)
    if layer is not None:
        chains = [chain for chain in chains if any(unit.op.outputs[0] == layer
                                                   for unit in chain)]
        if not chains:
            raise FormatError(f"{where}: no lstm, rnn or while_loop operation whose output is "
                              f"{layer!r}.")
    if len(chains) > 1:
        raise FormatError(f"{where}: holds {len(chains)} recurrent networks; pass layer= with "
                          f"the output name of one of their operations (e.g. "
                          f"layer={chains[0][0].op.outputs[0]!r}).")
    return stack([_unit_model(unit, values, where, cell_clip) for unit in chains[0]])


# -- while_loop ------------------------------------------------------------------------------

PASSING = frozenset({"squeeze", "expand_dims", "identity"})
FLOATS = ("fp16", "fp32")  # the types a cast in a step may take (as the weights allow)
ELEMENTWISE = {"add": "add", "mul": "mul", "sub": "sub", "less": "less"}


def _names(op: Operation, name: str, where: str) -> list[str]:
    """The value names bound to input ``name`` (a loop's ``loop_vars`` binds several)."""
    raw = op.inputs.get(name)
    if raw is None:
        return []
    out = []
    for binding in message(raw, where).get(1, []):
        fields = message(binding, where) if isinstance(binding, bytes) else {}
        out.append(_text(last(fields, 1, b""), where) if 1 in fields else "")
    return out


def _node(op: Operation, values: _Values, where: str) -> Node:
    """One MIL operation as a loop :class:`Node`."""
    label = op.label

    def node(kind: str, names: tuple[str, ...], data: Any = None) -> Node:
        return Node(kind, label, names, op.outputs, data)

    def one(name: str) -> str:
        bound = _names(op, name, where)
        return bound[0] if len(bound) == 1 else ""

    try:
        if op.type == "const" and "val" in op.attributes:
            found = values.value(op.attributes["val"], label)
            if np.asarray(found).dtype.kind not in "fiub":
                return node("text", (), "not a number")
            return node("const", (), found)
        if op.type in PASSING:
            return node("pass", (one("x"),))
        if op.type == "cast":
            dtype = values.argument(op, "dtype")
            if not isinstance(dtype, str) or dtype not in FLOATS:
                return node("other", (), f"to {dtype if isinstance(dtype, str) else 'a type not named'}")
            return node("pass", (one("x"),), dtype)
        if op.type in ("sigmoid", "tanh", "relu"):
            return node("act", (one("x"),), op.type)
        if op.type in ELEMENTWISE:
            return node(ELEMENTWISE[op.type], (one("x"), one("y")))
        if op.type == "linear":
            weight, bias = values.argument(op, "weight"), values.argument(op, "bias")
            if isinstance(weight, np.ndarray) and weight.ndim == 2 and (
                    bias is None or (isinstance(bias, np.ndarray) and
                                     bias.shape == weight.shape[:1])):
                return node("dense", (one("x"),), (weight, bias))
        if op.type == "matmul" and not _flag(values.argument(op, "transpose_x"), "transpose_x"):
            weight = values.argument(op, "y")  # x @ y: y (in, out), or (out, in) transposed
            if isinstance(weight, np.ndarray) and weight.ndim == 2 and weight.dtype.kind == "f":
                weight = weight if _flag(values.argument(op, "transpose_y"), "transpose_y") \
                    else weight.T
                return node("dense", (one("x"),), (np.ascontiguousarray(weight), None))
        if op.type == "gather":
            return node("gather", (one("x"), one("indices")),
                        (_integer(values.argument(op, "axis"), "axis", 0), ""))
        if op.type == "scatter":
            mode = values.argument(op, "mode")
            if mode is not None and not isinstance(mode, str):
                raise UnsupportedFeatureError(f"mode is {_shown(np.asarray(mode))}, not a string")
            return node("scatter", (one("data"), one("indices"), one("updates")),
                        (_integer(values.argument(op, "axis"), "axis", 0), mode or "add"))
        if op.type == "slice_by_index":
            return _rows(op, values, node, one("x"))
        if op.type == "split":
            sizes = values.argument(op, "split_sizes")
            return node("split", (one("x"),), (
                _integer(values.argument(op, "axis"), "axis", 0),
                [] if sizes is None else _integers(sizes, "split_sizes")))
        if op.type == "list_read":  # a TensorList's item: a row of a (length, …) value
            return node("gather", (one("ls"), one("index")), (0, ""))
        if op.type == "list_write":
            return node("scatter", (one("ls"), one("index"), one("value")), (0, "update"))
        if op.type == "make_list":
            return _new_list(op, values, where, node)
    except UnsupportedFeatureError as refusal:  # weights the program computes
        return node("other", (), str(refusal).split(": ", 1)[-1][:200])
    return node("other", ())


def _integers(value: Any, what: str) -> list[int]:
    """The whole numbers ``value`` holds (an operation's axes, sizes, bounds);
    UnsupportedFeatureError (the operation is then one the loop reader cannot follow)
    where it holds anything else."""
    array = np.asarray(value)
    if array.dtype.kind not in "iub" and not (
            array.dtype.kind == "f" and np.all(np.isfinite(array)) and
            np.all(array == np.round(array))):
        raise UnsupportedFeatureError(f"{what} is {_shown(array)}, not whole numbers")
    if array.size and np.max(np.abs(array.astype(np.float64))) >= 2**62:
        raise UnsupportedFeatureError(f"{what} is {_shown(array)}, out of range")
    return [int(number) for number in array.reshape(-1)]


def _integer(value: Any, what: str, default: int) -> int:
    """One whole number (``default`` where not bound); see :func:`_integers`."""
    if value is None:
        return default
    found = _integers(value, what)
    if len(found) != 1:
        raise UnsupportedFeatureError(f"{what} is {_shown(np.asarray(value))}, not one number")
    return found[0]


def _flag(value: Any, what: str) -> bool:
    """A bool (False where not bound); see :func:`_integers`."""
    if value is None:
        return False
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "bi":
        raise UnsupportedFeatureError(f"{what} is {_shown(array)}, not one bool")
    return bool(array.reshape(-1)[0])


def _shown(array: np.ndarray) -> str:
    return f"{array.size} values of type {array.dtype}" if array.size != 1 else \
        repr(array.reshape(-1)[0].item())[:40]


def _new_list(op: Operation, values: _Values, where: str, node: Any) -> Node:
    """A ``make_list`` of a constant length and item shape: its items are zeros until
    written (a list's unwritten items read as zeros)."""
    sizes = []
    for name in [*_names(op, "init_length", where)[:1], *_names(op, "elem_shape", where)]:
        producer = values.producers.get(name)
        value = values.value(producer.attributes["val"], op.label) if producer is not None \
            and producer.type == "const" and "val" in producer.attributes else None
        if not isinstance(value, np.ndarray) or value.size != 1 or value.dtype.kind != "i" \
                or not 0 < int(value.reshape(-1)[0]) < 2**31:
            return node("other", (), "a length or item shape that is no positive constant")
        sizes.append(int(value.reshape(-1)[0]))
    if len(sizes) < 2 or len(sizes) > 5:
        return node("other", (), f"{len(sizes) - 1} item dimensions")
    values.meter.charge(4 * math.prod(sizes), op.label)
    return node("const", (), np.zeros(sizes, np.float32))


def _rows(op: Operation, values: _Values, node: Any, source: str) -> Node:
    """A ``slice_by_index`` taking rows of the first axis (every other axis whole) as
    (start, stop, step); ``stop`` None where the end is masked (the last row)."""
    keys = ("begin", "end", "stride", "begin_mask", "end_mask", "squeeze_mask")
    begin, end, stride, begin_mask, end_mask, squeeze = (
        None if value is None else np.array(_integers(value, key), dtype=np.int64)
        for key, value in ((key, values.argument(op, key)) for key in keys))
    if begin is None or end is None or begin.size < 1:
        return node("other", ())
    for key, value in zip(keys[1:], (end, stride, begin_mask, end_mask, squeeze), strict=True):
        if value is not None and value.size != begin.size:
            raise FormatError(f"{values.where}: {op.label} has {key} of {value.size} values "
                              f"and begin of {begin.size}; expected one per axis. The file is "
                              "damaged.")
    if squeeze is not None and squeeze.any():
        return node("other", ())
    whole = all((begin_mask is not None and begin_mask[k]) or begin[k] == 0
                for k in range(1, begin.size)) and \
        all(end_mask is not None and end_mask[k] for k in range(1, end.size))
    step = 1 if stride is None else int(stride[0])
    if not whole or (stride is not None and np.any(stride[1:] != 1)):
        return node("other", ())
    start = 0 if begin_mask is not None and begin_mask[0] else int(begin[0])
    stop = None if end_mask is not None and end_mask[0] else int(end[0])
    return node("rows", (source,), (start, stop, step))


def _loop(op: Operation, outer: Callable[[str, Node | None], Node | None], values: _Values,
          where: str) -> Loop:
    """The :class:`Loop` of a ``while_loop`` operation (``outer``: the operation of its
    block giving a value, as a :class:`Node`: where its loop values start)."""
    label = f"{where}: {op.label} (while_loop)"
    if len(op.blocks) != 2:
        raise FormatError(f"{label}: {len(op.blocks)} blocks; expected a condition and a "
                          "body. The file is damaged.")
    condition, body = op.blocks
    starts = _names(op, "loop_vars", where)
    if not (len(starts) == len(body.inputs) == len(body.outputs) == len(condition.inputs)
            == len(op.outputs)) or len(condition.outputs) != 1:
        raise FormatError(f"{label}: {len(starts)} loop values, a body of {len(body.inputs)} "
                          f"inputs and {len(body.outputs)} outputs, a condition of "
                          f"{len(condition.inputs)} inputs; expected the same number "
                          "everywhere. The file is damaged.")
    steps = [_node(item, values, where) for item in body.operations]
    if not any(item.kind == "dense" and item.data[0].dtype == np.float16 for item in steps):
        # a float32 step: a cast to fp16 rounds its values
        steps = [Node("other", item.label, (), item.outputs, "to fp16 in a float32 step")
                 if item.kind == "pass" and item.data == "fp16" else item for item in steps]
    return Loop(label, list(zip(body.inputs, starts, body.outputs, strict=True)),
                [_node(item, values, where) for item in condition.operations],
                list(condition.inputs), condition.outputs[0], steps, outer,
                list(op.outputs))
