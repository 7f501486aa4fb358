"""PaddlePaddle inference models (``paddle.jit.save``, ``paddle.static.save_inference_model``):
a program and its parameters, read without PaddlePaddle.

**The program.** Paddle 3 writes the PIR program as JSON (``model.json``): ``{"base_code":
{"magic": "pir", "version": …}, "program": {"regions": [{"blocks": [{"ops": […]}]}]}}``.
An op is ``{"#": name, "I": [{"%": value id}], "O": [{"%": id, "TT": type}], "A": [{"N":
attribute, "AT": {"#": kind, "D": value}}], "OA": […]}``; names are compressed by dialect
(``1.rnn`` is ``pd_op.rnn``, ``0.combine`` is ``builtin.combine``), a parameter is the op
``p`` with its name last in ``A``, its type ``{"#": "0.t_dtensor", "D": [{"#": "0.t_f32"},
dims, …]}`` and ``OA`` starting with its ``persistable`` flag. Value id 0 is no value.
Before PIR, a program was a ``ProgramDesc`` protobuf (``model.pdmodel``, framework.proto:
``blocks`` 1 → ``vars`` 3 {``name`` 1, ``type`` 2 {``lod_tensor`` 3 {``tensor`` 1
{``data_type`` 1, ``dims`` 2}}}, ``persistable`` 3}, ``ops`` 4 {``inputs`` 1 / ``outputs`` 2
{``parameter`` 1, ``arguments`` 2}, ``type`` 3, ``attrs`` 4 {``name`` 1, ``i`` 3, ``s`` 5,
``b`` 10}}).

**The network** is the ``rnn`` operator (what ``paddle.nn.LSTM/GRU/SimpleRNN`` runs): attributes
``mode`` (``LSTM``, ``GRU``, ``RNN_TANH``, ``RNN_RELU``), ``is_bidirec``, ``input_size``,
``hidden_size``, ``num_layers``; inputs ``Input`` (time-major ``(T, B, I)``: a batch-major
layer transposes before and after it), ``PreState``, ``WeightList``, ``SequenceLength``.
``WeightList`` holds cuDNN's order: every cell's ``weight_ih, weight_hh`` (cell = layer·D +
direction), then every cell's ``bias_ih, bias_hh``; the arrays are those of the state dict
(:mod:`.state`). A projected LSTM does not run as this operator (paddle steps its cells in
ops of their own), and is refused by name, as is a program without an ``rnn`` operator.
``rnn`` operators inside control flow (the blocks of an ``if``'s branches or a ``while``'s
body; a ``ProgramDesc``'s blocks after the first) are found too, numbered in program order
(``op=``); their parameters are the program's own.

**The parameters** (``model.pdiparams``, beside the program, same stem) are the program's
persistable variables, sorted by name, one record each, as ``DenseTensor`` serializes
itself (paddle/fluid/framework/lod_tensor.cc, tensor_util.cc)::

    uint32 version (0) · uint64 lod levels · per level: uint64 bytes, offsets
    uint32 version (0) · int32 n · TensorDesc protobuf (n bytes: data_type 1, dims 2)
    the elements, little-endian (FP16 4, FP32 5, FP64 6, BF16 22 → float32)

Every record is checked against the program's declaration of that variable (dtype and
dims) before its bytes are read, each length against the bytes that remain, and the
arrays made are charged to the ``expansion`` limit.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...io import jsontext
from ...io._proto import ProtoError, fields, read_varint
from ...io.inputs import open_file, read_file

__all__ = ["PROGRAM_SUFFIXES", "Program", "RnnOp", "load_program", "parameters"]

PROGRAM_SUFFIXES = (".json", ".pdmodel")
PARAMS_SUFFIX = ".pdiparams"
MAX_PROGRAM = 256 << 20
# framework.proto's VarType codes and PIR's type names of the dense dtypes a parameter or
# buffer may have (an embedding's int64 position ids, a quantized layer's int8 weights): the
# floats are read, the others sized and passed over.
DTYPES = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32",
          6: "float64", 20: "uint8", 21: "int8", 22: "bfloat16", 23: "complex64",
          24: "complex128", 32: "float8_e4m3fn", 33: "float8_e5m2"}
PIR_DTYPES = {"0.t_bool": "bool", "0.t_i16": "int16", "0.t_i32": "int32", "0.t_i64": "int64",
              "0.t_f16": "float16", "0.t_f32": "float32", "0.t_f64": "float64",
              "0.t_ui8": "uint8", "0.t_i8": "int8", "0.t_bf16": "bfloat16",
              "0.t_c64": "complex64", "0.t_c128": "complex128",
              "0.t_f8e4m3fn": "float8_e4m3fn", "0.t_f8e5m2": "float8_e5m2"}
ITEMSIZES = {"bool": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "float32": 4,
             "float64": 8, "uint8": 1, "int8": 1, "bfloat16": 2, "complex64": 8,
             "complex128": 16, "float8_e4m3fn": 1, "float8_e5m2": 1}
FLOATS = ("float16", "float32", "float64", "bfloat16")
MAX_DIMS = 32
MAX_LOD_LEVELS = 16
MAX_DESC = 1 << 16
# Ops that move a network's input, state and outputs around: not other layers.
PLUMBING = frozenset({"data", "feed", "fetch", "combine", "split", "transpose", "transpose2",
                      "shape", "shape64", "slice", "full", "full_int_array", "full_with_tensor",
                      "fill_constant", "stack", "parameter", "p", "scale", "assign",
                      "assign_value", "assign_value_", "yield", "cf_yield"})


@dataclass(frozen=True)
class Variable:
    """A persistable variable the program declares: its dtype and dims."""

    name: str
    dtype: str
    dims: tuple[int, ...]


@dataclass(frozen=True)
class RnnOp:
    """One ``rnn`` operator: its attributes, and the names ``WeightList`` lists."""

    index: int
    mode: str
    bidirectional: bool
    input_size: int
    hidden_size: int
    num_layers: int
    weights: tuple[str, ...]
    time_major: bool | None  # None: its input comes from neither the feed nor a transpose
    nested: bool = False     # inside a control-flow op's block (an if's branch, a loop's body)

    def describe(self) -> str:
        return (f"rnn operator {self.index} (mode {self.mode}, {self.num_layers} layer(s), "
                f"{'bidirectional' if self.bidirectional else 'forward'})")


@dataclass
class Program:
    """What rnnport reads of a program: its persistable variables, its rnn operators, the
    other operators' names, and the shape its input is fed in."""

    where: str
    kind: str  # "PIR JSON" or "ProgramDesc"
    variables: dict[str, Variable] = field(default_factory=dict)
    rnns: list[RnnOp] = field(default_factory=list)
    others: dict[str, int] = field(default_factory=dict)  # op name → count
    inputs: list[tuple[str, tuple[int, ...]]] = field(default_factory=list)
    nested: int = 0  # blocks or regions of control-flow ops (loops, conditions)


def load_program(path: Path, where: str) -> Program:
    """The program at ``path`` (``.json``: PIR, else a ``ProgramDesc``), told by its bytes."""
    data = read_file(path, where, limit=MAX_PROGRAM)
    if path.suffix.lower() == ".json" or data.lstrip()[:1] in (b"{", b"["):
        return _pir(jsontext.loads(data, where, size=len(data)), where)
    return _program_desc(data, where)


# -- PIR JSON ---------------------------------------------------------------------------------


def _fail(where: str, what: str) -> FormatError:
    return FormatError(f"{where}: {what}; expected a program paddle.jit.save wrote. The file is "
                       "damaged, or is no PaddlePaddle program.")


def _attributes(op: Mapping[str, Any], where: str) -> dict[str, Any]:
    out = {}
    listing = op.get("A", [])
    if not isinstance(listing, list):
        raise _fail(where, f"an op's attributes are {type(listing).__name__}")
    for entry in listing:
        if isinstance(entry, dict) and isinstance(entry.get("N"), str) and \
                isinstance(entry.get("AT"), dict):
            out[entry["N"]] = entry["AT"].get("D")
    return out


def _ids(values: Any, where: str) -> list[int]:
    if isinstance(values, dict):
        values = [values]
    if not isinstance(values, list):
        raise _fail(where, f"an op's values are {type(values).__name__}")
    out = []
    for value in values:
        ident = value.get("%") if isinstance(value, dict) else None
        if not isinstance(ident, int) or isinstance(ident, bool):
            raise _fail(where, f"a value without an id ({str(value)[:80]})")
        out.append(ident)
    return out


def _short(name: str) -> str:
    """An op's name without its dialect (``1.rnn`` → ``rnn``, ``pd_op.rnn`` → ``rnn``)."""
    return name.split(".", 1)[1] if "." in name else name


def _pir(document: Any, where: str) -> Program:
    base = document.get("base_code") if isinstance(document, dict) else None
    if not isinstance(base, dict) or base.get("magic") != "pir":
        raise _fail(where, "no base_code with magic 'pir'")
    regions = document.get("program", {}).get("regions") \
        if isinstance(document.get("program"), dict) else None
    try:
        ops = regions[0]["blocks"][0]["ops"]  # type: ignore[index]
    except (TypeError, KeyError, IndexError):
        raise _fail(where, "no program.regions[0].blocks[0].ops") from None
    if not isinstance(ops, list):
        raise _fail(where, "the ops are no list")
    program = Program(where, "PIR JSON")
    producers: dict[int, tuple[str, Any]] = {}  # value id → (op short name, what)
    _pir_ops(program, ops, producers, where, 0)
    return program


def _pir_ops(program: Program, ops: Any, producers: dict[int, tuple[str, Any]], where: str,
             depth: int) -> None:
    """Read the ops of one block: ``depth`` 0 the program's own, deeper those of the blocks
    of control-flow ops (an ``if``'s branches, a ``while``'s body), read in program order."""
    if not isinstance(ops, list):
        raise _fail(where, "the ops are no list")
    for op in ops:
        if not isinstance(op, dict) or not isinstance(op.get("#"), str):
            raise _fail(where, "an op without a name")
        name, short = op["#"], _short(op["#"])
        outputs = _ids(op.get("O", []), where)
        inputs = _ids(op.get("I", []), where)
        if name == "p":
            program.variables.update(_pir_parameter(op, outputs, producers, where))
            continue
        attributes = _attributes(op, where)
        for ident in outputs:
            producers[ident] = (short, inputs)
        if short == "data":
            shape = attributes.get("shape")
            program.inputs.append((str(attributes.get("name")), tuple(
                dim for dim in shape if isinstance(dim, int)) if isinstance(shape, list) else ()))
        if name in ("1.rnn", "pd_op.rnn"):
            program.rnns.append(_pir_rnn(len(program.rnns), attributes, inputs, producers,
                                         where, depth > 0))
        elif short not in PLUMBING:
            program.others[short] = program.others.get(short, 0) + 1
        regions = op.get("regions") or []
        if not isinstance(regions, list):
            raise _fail(where, f"op {name!r} has regions of type {type(regions).__name__}")
        for region in regions:
            program.nested += 1
            blocks = region.get("blocks") if isinstance(region, dict) else None
            if not isinstance(blocks, list):
                raise _fail(where, f"a region of op {name!r} without a list of blocks")
            for block in blocks:
                if not isinstance(block, dict):
                    raise _fail(where, f"a block of op {name!r} that is no object")
                _pir_ops(program, block.get("ops", []), producers, where, depth + 1)


def _pir_parameter(op: Mapping[str, Any], outputs: list[int],
                   producers: dict[int, tuple[str, Any]], where: str) -> dict[str, Variable]:
    listing = op.get("A")
    name = listing[-1] if isinstance(listing, list) and listing else None
    try:
        kind, dims = op["O"]["TT"]["D"][0]["#"], op["O"]["TT"]["D"][1]
    except (TypeError, KeyError, IndexError):
        raise _fail(where, f"parameter {str(name)[:80]!r} without a dense tensor type") from None
    if not isinstance(name, str) or len(outputs) != 1 or not isinstance(dims, list) or \
            not all(isinstance(dim, int) and 0 <= dim < 2**40 for dim in dims) or \
            len(dims) > MAX_DIMS:
        raise _fail(where, f"parameter {str(name)[:80]!r} with dims {str(dims)[:80]}")
    producers[outputs[0]] = ("p", name)
    flags = op.get("OA")
    persistable = flags[0] if isinstance(flags, list) and flags and \
        isinstance(flags[0], int) else not name.endswith("__non_persistable")
    if not persistable:
        return {}
    return {name: Variable(name, PIR_DTYPES.get(kind, kind), tuple(dims))}


def _pir_rnn(index: int, attributes: Mapping[str, Any], inputs: list[int],
             producers: Mapping[int, tuple[str, Any]], where: str, nested: bool) -> RnnOp:
    if len(inputs) < 3:
        raise _fail(where, f"rnn operator {index} with {len(inputs)} inputs")
    kind, listed_ids = producers.get(inputs[2], ("", None))
    if kind != "combine" or not isinstance(listed_ids, list):
        raise _fail(where, f"rnn operator {index}'s WeightList is not a list of parameters")
    names = []
    for ident in listed_ids:
        source, name = producers.get(ident, ("", None))
        if source != "p" or not isinstance(name, str):
            raise UnsupportedFeatureError(
                f"{where}: rnn operator {index}'s WeightList holds a computed value, not a "
                "parameter; rnnport reads the weights a program stores, not ones it computes.")
        names.append(name)
    source, feeding = producers.get(inputs[0], ("", None))
    time_major = False if source in ("transpose", "transpose2") and isinstance(feeding, list) \
        and feeding and producers.get(feeding[0], ("",))[0] == "data" else \
        True if source == "data" else None
    return _rnn_op(index, attributes, tuple(names), time_major, where, nested)


def _rnn_op(index: int, attributes: Mapping[str, Any], weights: tuple[str, ...],
            time_major: bool | None, where: str, nested: bool) -> RnnOp:
    def number(name: str) -> int:
        value = attributes.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 2**31:
            raise _fail(where, f"rnn operator {index}'s {name} is {str(value)[:40]}")
        return value
    mode = attributes.get("mode")
    if mode not in ("LSTM", "GRU", "RNN_TANH", "RNN_RELU"):
        raise FormatError(f"{where}: rnn operator {index} runs mode {str(mode)[:40]!r}; expected "
                          "LSTM, GRU, RNN_TANH or RNN_RELU (paddle.nn.LSTM, GRU, SimpleRNN).")
    bidirectional = attributes.get("is_bidirec")
    if not isinstance(bidirectional, (bool, int)):
        raise _fail(where, f"rnn operator {index}'s is_bidirec is {str(bidirectional)[:40]}")
    return RnnOp(index, mode, bool(bidirectional), number("input_size"), number("hidden_size"),
                 number("num_layers"), weights, time_major, nested)


# -- ProgramDesc (.pdmodel) --------------------------------------------------------------------


def _message(data: bytes, where: str) -> list[tuple[int, int | bytes]]:
    try:
        return list(fields(data))
    except ProtoError as error:
        raise _fail(where, f"a damaged protobuf ({error})") from None


def _text(value: int | bytes, where: str) -> str:
    if not isinstance(value, bytes):
        raise _fail(where, "a number where a name belongs")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(where, "a name that is not UTF-8") from None


def _program_desc(data: bytes, where: str) -> Program:
    blocks = [value for number, value in _message(data, where) if number == 1]
    if not blocks or not isinstance(blocks[0], bytes):
        raise _fail(where, "a ProgramDesc without blocks")
    program = Program(where, "ProgramDesc")
    program.nested = len(blocks) - 1
    feeds: set[str] = set()
    transposed: dict[str, str] = {}  # output → input of a transpose2
    for depth, block in enumerate(blocks):  # block 0 the program's; the others control flow's
        if not isinstance(block, bytes):
            raise _fail(where, "a block that is no message")
        for number, value in _message(block, where):
            if number == 3 and isinstance(value, bytes):
                variable = _var_desc(value, where)
                if variable is not None:
                    program.variables[variable.name] = variable
            elif number == 4 and isinstance(value, bytes):
                kind, inputs, outputs, attributes = _op_desc(value, where)
                if kind == "feed":
                    feeds.update(name for names in outputs.values() for name in names)
                    program.inputs.extend((name, ()) for names in outputs.values()
                                          for name in names)
                elif kind == "transpose2" and inputs.get("X") and outputs.get("Out"):
                    transposed[outputs["Out"][0]] = inputs["X"][0]
                if kind == "rnn":
                    source = (inputs.get("Input") or [""])[0]
                    time_major = True if source in feeds else \
                        False if transposed.get(source) in feeds else None
                    program.rnns.append(_rnn_op(len(program.rnns), attributes,
                                                tuple(inputs.get("WeightList", [])),
                                                time_major, where, depth > 0))
                elif kind not in PLUMBING:
                    program.others[kind] = program.others.get(kind, 0) + 1
    return program


def _var_desc(data: bytes, where: str) -> Variable | None:
    name, persistable, tensor = "", False, b""
    for number, value in _message(data, where):
        if number == 1:
            name = _text(value, where)
        elif number == 3:
            persistable = bool(value)
        elif number == 2 and isinstance(value, bytes):
            for inner, kind in _message(value, where):
                if inner == 3 and isinstance(kind, bytes):  # lod_tensor
                    tensor = next((described for field_number, described in
                                   _message(kind, where) if field_number == 1
                                   and isinstance(described, bytes)), b"")
    if not persistable or not tensor:
        return None
    dtype, dims = _tensor_desc(tensor, where, name)
    return Variable(name, dtype, dims)


def _op_desc(data: bytes, where: str) -> tuple[str, dict[str, list[str]], dict[str, list[str]],
                                               dict[str, Any]]:
    kind = ""
    inputs: dict[str, list[str]] = {}
    outputs: dict[str, list[str]] = {}
    attributes: dict[str, Any] = {}
    for number, value in _message(data, where):
        if number == 3:
            kind = _text(value, where)
        elif number in (1, 2) and isinstance(value, bytes):
            parameter, arguments = "", []
            for inner, item in _message(value, where):
                if inner == 1:
                    parameter = _text(item, where)
                elif inner == 2:
                    arguments.append(_text(item, where))
            (inputs if number == 1 else outputs)[parameter] = arguments
        elif number == 4 and isinstance(value, bytes):
            name, found = "", None  # type: tuple[str, Any]
            for inner, item in _message(value, where):
                if inner == 1:
                    name = _text(item, where)
                elif inner in (3, 10) and isinstance(item, int):  # i, b
                    found = item - (1 << 64) if inner == 3 and item >= 1 << 63 else \
                        (bool(item) if inner == 10 else item)
                elif inner == 5:
                    found = _text(item, where)
            attributes[name] = found
    return kind, inputs, outputs, attributes


def _tensor_desc(data: bytes | memoryview, where: str, name: str) -> tuple[str, tuple[int, ...]]:
    code: int | None = None
    dims: list[int] = []
    for number, value in _message(bytes(data), where):
        if number == 1 and isinstance(value, int):
            code = value
        elif number == 2:
            if isinstance(value, bytes):  # packed
                position = 0
                while position < len(value):
                    try:
                        dim, position = read_varint(value, position)
                    except ProtoError as error:
                        raise _fail(where, f"{name!r}: damaged dims ({error})") from None
                    dims.append(dim)
            else:
                dims.append(value)
        if len(dims) > MAX_DIMS:
            raise _fail(where, f"{name!r} with more than {MAX_DIMS} dims")
    dims = [dim - (1 << 64) if dim >= 1 << 63 else dim for dim in dims]
    return DTYPES.get(code, f"data type {code}") if code is not None else "no data type", \
        tuple(dims)


# -- the parameters ---------------------------------------------------------------------------


def parameters(program: Program, path: Path, wanted: set[str], where: str,
               ) -> dict[str, np.ndarray]:
    """The arrays of the persistable variables ``wanted`` from the ``.pdiparams`` file at
    ``path``, which holds every persistable variable of ``program``, sorted by name."""
    missing = sorted(wanted - set(program.variables))
    if missing:
        raise FormatError(f"{program.where}: the network uses {missing[0]!r}, which the program "
                          "declares as no persistable variable; the program is damaged.")
    shown = f"{where} ({path.name})"
    out: dict[str, np.ndarray] = {}
    with open_file(path, shown, inside=path.parent, name=path.name) as file:
        size = file.seek(0, 2)
        file.seek(0)
        spent = 0
        allowed = budget.allowance("expansion", size)
        for name in sorted(program.variables):
            declared = program.variables[name]
            dtype, dims = _record_header(file, size, f"{shown}, {name!r}")
            if (dtype, dims) != (declared.dtype, declared.dims):
                raise FormatError(
                    f"{shown}, {name!r}: a {dtype} record of dims {list(dims)}, but the program "
                    f"declares {declared.dtype} {list(declared.dims)}; the parameters file is "
                    "damaged, or belongs to another program.")
            if dtype not in FLOATS and name in wanted:
                raise FormatError(f"{shown}, {name!r}: {dtype} values; expected float "
                                  "weights (FP16, FP32, FP64 or BF16).")
            itemsize = ITEMSIZES.get(dtype)
            if itemsize is None:
                raise FormatError(f"{shown}, {name!r}: {dtype}, which rnnport cannot size, so "
                                  "the parameters after it cannot be found; expected one of "
                                  f"{', '.join(ITEMSIZES)}.")
            count = math.prod(dims)
            nbytes = count * itemsize
            if nbytes > size - file.tell():
                raise FormatError(f"{shown}, {name!r}: {list(dims)} {dtype} takes {nbytes:,} "
                                  f"bytes, but {size - file.tell():,} remain. The file is "
                                  "truncated or damaged; nothing was read.")
            if name not in wanted:
                file.seek(nbytes, 1)
                continue
            spent += count * (4 if dtype == "bfloat16" else itemsize)
            if spent > allowed:
                raise budget.exceeded(shown, f"the network's arrays take {spent:,} bytes",
                                      "expansion", size, spent)
            raw = file.read(nbytes)
            stored = np.frombuffer(raw, dtype="<u2" if dtype == "bfloat16" else
                                   np.dtype(dtype).newbyteorder("<"), count=count)
            array = (stored.astype(np.uint32) << 16).view(np.float32) \
                if dtype == "bfloat16" else stored.astype(np.dtype(dtype))
            out[name] = array.reshape(dims)
        if file.tell() != size:
            raise FormatError(f"{shown}: {size - file.tell():,} bytes follow the program's "
                              f"{len(program.variables)} parameters; the file belongs to another "
                              "program, or is damaged.")
    return out


def _record_header(file: Any, size: int, where: str) -> tuple[str, tuple[int, ...]]:
    def take(count: int) -> bytes:
        chunk = file.read(count) if count <= size - file.tell() else b""
        if len(chunk) != count:
            raise FormatError(f"{where}: the record ends early ({count:,} bytes wanted, "
                              f"{size - file.tell():,} remain). The file is truncated or "
                              "damaged.")
        return bytes(chunk)
    version, levels = struct.unpack("<IQ", take(12))
    if version != 0 or levels > MAX_LOD_LEVELS:
        raise FormatError(f"{where}: a tensor record of version {version} with {levels:,} LoD "
                          "levels; expected version 0, a few levels. The file is damaged or no "
                          "paddle parameters file.")
    for _ in range(levels):
        (length,) = struct.unpack("<Q", take(8))
        if length > size - file.tell():
            raise FormatError(f"{where}: a LoD level of {length:,} bytes, past the file's end.")
        file.seek(length, 1)
    version, length = struct.unpack("<Ii", take(8))
    if version != 0 or not 0 < length <= MAX_DESC:
        raise FormatError(f"{where}: a tensor of version {version} described in {length:,} "
                          f"bytes; expected version 0 and 1 to {MAX_DESC:,} bytes. The file is "
                          "damaged.")
    dtype, dims = _tensor_desc(take(length), where, where)
    if any(dim < 0 or dim >= 2**40 for dim in dims):
        raise FormatError(f"{where}: dims {list(dims)}; expected sizes from 0 to 2⁴⁰.")
    return dtype, dims
