"""A bounds-checked MessagePack reader for Flax checkpoints, NumPy and the standard library only.

``flax.serialization.to_bytes`` (and ``msgpack_serialize``) writes a state dict as one
MessagePack object; :func:`decode` reads it back without Flax, JAX or ``msgpack`` installed,
into what ``flax.serialization.msgpack_restore`` returns.

The wire format (big-endian throughout)
---------------------------------------
One object is a first byte, maybe a fixed-width header, then its payload:

==================  ================  ==========================================================
first byte          type              what follows
==================  ================  ==========================================================
``0x00``–``0x7f``   positive fixint   nothing: the byte is the value (0 to 127)
``0xe0``–``0xff``   negative fixint   nothing: the byte is the value as an int8 (-32 to -1)
``0xc0``            nil               nothing (``None``)
``0xc2``/``0xc3``   false/true        nothing
``0xcc``–``0xcf``   uint 8/16/32/64   the value
``0xd0``–``0xd3``   int 8/16/32/64    the value, two's complement
``0xca``/``0xcb``   float 32/64       the IEEE 754 value (both come back as Python ``float``)
``0xa0``–``0xbf``   fixstr            ``byte & 0x1f`` bytes of UTF-8
``0xd9``–``0xdb``   str 8/16/32       a uint8/16/32 byte count, then that many bytes of UTF-8
``0xc4``–``0xc6``   bin 8/16/32       a uint8/16/32 byte count, then the bytes (``bytes``)
``0x90``–``0x9f``   fixarray          ``byte & 0x0f`` objects (a ``list``)
``0xdc``/``0xdd``   array 16/32       a uint16/32 count, then that many objects
``0x80``–``0x8f``   fixmap            ``byte & 0x0f`` key, value pairs (a ``dict``)
``0xde``/``0xdf``   map 16/32         a uint16/32 count, then that many key, value pairs
``0xd4``–``0xd8``   fixext 1/2/4/8/16 an int8 type code, then 1/2/4/8/16 bytes
``0xc7``–``0xc9``   ext 8/16/32       a uint8/16/32 byte count, an int8 type code, the bytes
``0xc1``            (never used)      refused
==================  ================  ==========================================================

An ext becomes :class:`Ext` ``(code, data)``, except Flax's three (``flax/serialization.py``,
``_MsgpackExtType``), which :func:`decode` reads unless ``flax=False``:

* code 1, an *ndarray*: the payload is itself MessagePack, ``[shape, dtype name, raw
  bytes]``: a list of sizes, a string such as ``"float32"`` (``ndarray.dtype.name``) and
  the array's bytes in C order (little-endian: Flax writes the machine's order, and every
  machine Flax runs on is little-endian). It becomes a read-only NumPy array. Only
  numbers are read: ``bool``, ``int8``–``int64``, ``uint8``–``uint64``, ``float16``,
  ``float32``, ``float64`` and ``bfloat16`` (which needs ``ml_dtypes``, as JAX does). As
  Flax reads it, a string may come as str or bin in the payload.
* code 2, a Python ``complex``: the payload is MessagePack ``[real, imaginary]``.
* code 3, a NumPy scalar (``np.float32(1.0)``): the payload is a code-1 array of shape
  ``[]``; it becomes that NumPy scalar.

Flax splits an array of more than ``MAX_CHUNK_SIZE`` bytes (1 GiB) into flat pieces:
``{"__msgpack_chunked_array__": True, "shape": {"0": size, ...}, "chunks": {"0": array,
...}}`` (Flax's ``_chunk``; a list in place of either dict is read too). :func:`decode`
puts such an array back together where ``msgpack_restore`` does: at the top, or as a
value in a dict reached from the top through dicts only (never inside a list).

Limits (what keeps a damaged or hostile input from costing more than its size)
--------------------------------------------------------------------------------
* Every length and count is checked against the bytes left before anything is sliced or
  allocated, and the objects that the open arrays and maps still owe, counted together,
  may never outnumber the bytes left (each takes at least one byte): so a header
  claiming 2**32 elements costs nothing, and no input makes more objects than it has bytes.
* What the objects take is charged against the ``expansion`` limit (:mod:`rnnport.budget`)
  before each is built: a map or an array :data:`OBJECT_BYTES` and :data:`ITEM_BYTES` per
  entry, a string or bytes :data:`OBJECT_BYTES` and its length, a float or an integer
  outside the fixint range :data:`OBJECT_BYTES` (Flax arrays count apart, below), so that a
  few megabytes of empty maps (one byte each, 64 as a ``dict``) cannot build gigabytes.
* Arrays and maps nested at most :data:`MAX_DEPTH` deep, read without recursion (so
  hostile nesting raises :class:`~rnnport.errors.FormatError`, never ``RecursionError``).
* Map keys must be ``str``, ``int`` or ``bytes``, each at most once per map (readers
  disagree on which copy of a repeated key wins); strings must be UTF-8; nothing may
  follow the top-level object.
* A Flax array has at most :data:`MAX_RANK` dimensions and exactly ``size × item size``
  bytes; sizes whose product, zeros aside, reaches 2**59 are refused (NumPy could not
  shape even an empty array so). ``bool`` arrays must hold only 0 and 1.
* Decoded Flax arrays together hold at most :data:`ARRAY_BYTES_PER_INPUT_BYTE` bytes per
  byte of input. Each array is a copy of its bytes (aligned, and it keeps no reference to
  the input); putting a chunked array back together copies its pieces once more, so what
  :func:`decode` allocates peaks near twice the input's size (once more for an input that
  is not ``bytes``, which is copied first so that the caller cannot change it meanwhile).
* A chunked array must have the three keys above, a non-empty list of one-dimensional
  arrays of one dtype, and as many elements in all as its shape says.

No code is run and nothing but these types is built: no pickle, no ``eval``, no class
named by the data. Every malformed input raises :class:`~rnnport.errors.FormatError`
naming the byte where it was found and the keys leading there, e.g.
``params.msgpack: byte 1,093 (at params/Dense_0/kernel) (in the payload of the ndarray ext
at byte 1,088): an ndarray of shape [4, 8] and dtype float32 needs 128 bytes; expected
exactly that many, got 124, so the data is damaged.``

Writing
-------
:func:`encode_flax` writes what ``flax.serialization.to_bytes`` writes for a tree of dicts,
lists and tuples whose leaves are NumPy arrays and scalars (of the dtypes above), Python
scalars, strings and bytes, byte for byte: dict keys become strings and lists and tuples
dicts keyed ``"0"``, ``"1"``, … (Flax's state dict), integers take the shortest form, floats
64 bits, and arrays of more than :data:`MAX_CHUNK_SIZE` bytes are chunked. Anything else
(other types, other dtypes, deeper than :data:`MAX_DEPTH`) raises
:class:`~rnnport.errors.UnsupportedFeatureError` before anything is returned.
"""

from __future__ import annotations

import importlib
import math
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import budget
from ..errors import FormatError, MissingDependencyError, UnsupportedFeatureError

__all__ = ["ARRAY_BYTES_PER_INPUT_BYTE", "CHUNKED_ARRAY_KEY", "MAX_CHUNK_SIZE", "MAX_DEPTH", "MAX_RANK",
           "Ext", "decode", "encode_flax"]

MAX_DEPTH = 64
OBJECT_BYTES = 64  # what a map, array, string or bytes object is charged, beside its items
ITEM_BYTES = 8  # what each entry of a map or array is charged beside
MAX_RANK = 32  # NumPy 1's limit (NumPy 2 allows 64); no checkpoint comes near it
ARRAY_BYTES_PER_INPUT_BYTE = 1.0
CHUNKED_ARRAY_KEY = "__msgpack_chunked_array__"
MAX_CHUNK_SIZE = 1 << 30  # flax.serialization.MAX_CHUNK_SIZE: larger arrays are written in pieces

EXT_NDARRAY = 1
EXT_COMPLEX = 2
EXT_NUMPY_SCALAR = 3

Bytes = bytes | bytearray | memoryview


@dataclass(frozen=True)
class Ext:
    """A MessagePack extension object that :func:`decode` does not interpret."""

    code: int  # -128 to 127; negative codes are MessagePack's own (-1: timestamp)
    data: bytes


def decode(data: Bytes, *, source: str = "<bytes>", flax: bool = True) -> Any:
    """The one MessagePack object in ``data``: ``None``, ``bool``, ``int``, ``float``,
    ``str``, ``bytes``, ``list``, ``dict`` or :class:`Ext`, nested.

    With ``flax`` (the default) Flax's ext codes 1 to 3 become read-only NumPy arrays,
    ``complex`` numbers and NumPy scalars, and Flax's chunked arrays are put back together,
    as ``flax.serialization.msgpack_restore`` does; with ``flax=False`` every ext is an
    :class:`Ext`. ``source`` names the input in error messages. Malformed input raises
    :class:`~rnnport.errors.FormatError`; a ``bfloat16`` array without ``ml_dtypes``
    installed, :class:`~rnnport.errors.MissingDependencyError`.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise FormatError(f"{source}: expected MessagePack as bytes, got {type(data).__name__}.")
    raw = data if isinstance(data, bytes) else bytes(data)  # a copy the caller cannot change
    limits = _ArrayBudget(int(ARRAY_BYTES_PER_INPUT_BYTE * len(raw)), len(raw), source)
    reader = _Reader(memoryview(raw), 0, len(raw), source, limits, flax=flax, raw_strings=False,
                     context="", size=len(raw))
    value = reader.read()
    if flax and reader.chunked_at:  # a walk of the whole tree only when something is chunked
        value = _unchunk_tree(value, reader.chunked_at, source)
    return value


# -- the first byte of every object ------------------------------------------------------------------

# kind, argument: for fixed kinds the count or length in the byte; for the others the width
# of the header field that holds it.
_KINDS: list[tuple[str, int]] = [("reserved", 0)] * 256
for _byte in range(0x00, 0x80):
    _KINDS[_byte] = ("int", _byte)
for _byte in range(0xE0, 0x100):
    _KINDS[_byte] = ("int", _byte - 0x100)
for _byte in range(0x80, 0x90):
    _KINDS[_byte] = ("fixmap", _byte & 0x0F)
for _byte in range(0x90, 0xA0):
    _KINDS[_byte] = ("fixarray", _byte & 0x0F)
for _byte in range(0xA0, 0xC0):
    _KINDS[_byte] = ("fixstr", _byte & 0x1F)
_KINDS[0xC0] = ("nil", 0)
_KINDS[0xC2] = ("false", 0)
_KINDS[0xC3] = ("true", 0)
for _byte, _kind in ((0xC4, ("bin", 1)), (0xC5, ("bin", 2)), (0xC6, ("bin", 4)),
                     (0xC7, ("ext", 1)), (0xC8, ("ext", 2)), (0xC9, ("ext", 4)),
                     (0xCA, ("float", 4)), (0xCB, ("float", 8)),
                     (0xCC, ("uint", 1)), (0xCD, ("uint", 2)), (0xCE, ("uint", 4)), (0xCF, ("uint", 8)),
                     (0xD0, ("sint", 1)), (0xD1, ("sint", 2)), (0xD2, ("sint", 4)), (0xD3, ("sint", 8)),
                     (0xD4, ("fixext", 1)), (0xD5, ("fixext", 2)), (0xD6, ("fixext", 4)),
                     (0xD7, ("fixext", 8)), (0xD8, ("fixext", 16)),
                     (0xD9, ("str", 1)), (0xDA, ("str", 2)), (0xDB, ("str", 4)),
                     (0xDC, ("array", 2)), (0xDD, ("array", 4)), (0xDE, ("map", 2)), (0xDF, ("map", 4))):
    _KINDS[_byte] = _kind
del _byte, _kind

_NAMES = {0xC4: "bin8", 0xC5: "bin16", 0xC6: "bin32", 0xC7: "ext8", 0xC8: "ext16", 0xC9: "ext32",
          0xD4: "fixext1", 0xD5: "fixext2", 0xD6: "fixext4", 0xD7: "fixext8", 0xD8: "fixext16",
          0xD9: "str8", 0xDA: "str16", 0xDB: "str32", 0xDC: "array16", 0xDD: "array32",
          0xDE: "map16", 0xDF: "map32", 0xCA: "float32", 0xCB: "float64", 0xCC: "uint8",
          0xCD: "uint16", 0xCE: "uint32", 0xCF: "uint64", 0xD0: "int8", 0xD1: "int16",
          0xD2: "int32", 0xD3: "int64"}

_UNSIGNED = {1: struct.Struct(">B"), 2: struct.Struct(">H"), 4: struct.Struct(">I"), 8: struct.Struct(">Q")}
_SIGNED = {1: struct.Struct(">b"), 2: struct.Struct(">h"), 4: struct.Struct(">i"), 8: struct.Struct(">q")}
_FLOATS = {4: struct.Struct(">f"), 8: struct.Struct(">d")}

_DTYPES = {"bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
           "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8",
           "float16": "<f2", "float32": "<f4", "float64": "<f8"}


def _a(byte: int) -> str:
    """The name of an object's type after its article: ``an array32``, ``a fixmap``."""
    name = _NAMES.get(byte, _KINDS[byte][0])
    return f"an {name}" if name[0] in "aeio" else f"a {name}"


class _ArrayBudget:
    """Bytes that Flax arrays may still take, and what the other objects built take against
    the ``expansion`` limit, shared by the readers of one input."""

    def __init__(self, limit: int, size: int, source: str) -> None:
        self.limit = limit
        self.used = 0
        self.size, self.source = size, source
        self.built = 0
        self.allowed = budget.allowance("expansion", size)

    def build(self, amount: int) -> None:
        self.built += amount
        if self.built > self.allowed:
            raise budget.exceeded(self.source, f"its objects would take more than "
                                  f"{self.allowed:,} bytes (maps, arrays, strings and numbers "
                                  "decoded so far)", "expansion", self.size)


class _Frame:
    """An array or map being read: what it holds so far and how many objects it still owes."""

    __slots__ = ("has_key", "is_map", "items", "key", "left", "offset")

    def __init__(self, is_map: bool, left: int, offset: int) -> None:
        self.is_map = is_map
        self.items: Any = {} if is_map else []
        self.left = left  # entries (pairs, for a map) still to come
        self.offset = offset
        self.has_key = False
        self.key: Any = None


def _path(stack: list[_Frame]) -> str:
    """The keys and indices leading to the object being read (a key: to its map)."""
    parts = []
    for frame in stack:
        if frame.is_map:
            if not frame.has_key:
                break
            parts.append(str(frame.key)[:40])
        else:
            parts.append(f"[{len(frame.items)}]")
    return _join(parts)


def _join(parts: list[str]) -> str:
    if len(parts) > 12:  # hostile nesting: the ends tell enough
        parts = [*parts[:4], "…", *parts[-6:]]
    return "/".join(part for part in parts if part).replace("/[", "[")


class _Reader:
    """One MessagePack object spanning ``data[start:end]``; positions are the input's."""

    def __init__(self, data: memoryview, start: int, end: int, source: str, limits: _ArrayBudget, *,
                 flax: bool, raw_strings: bool, context: str, size: int, path: str = "") -> None:
        self.data = data
        self.start = start
        self.end = end
        self.source = source
        self.limits = limits
        self.flax = flax
        self.raw_strings = raw_strings  # strings as bytes, as Flax reads an ndarray's payload
        self.context = context
        self.size = size  # the whole input's, for messages
        self.outer_path = path
        self.stack: list[_Frame] = []
        self.chunked_at: dict[int, int] = {}  # id(dict) -> its byte, for Flax's chunked arrays

    # -- errors ----------------------------------------------------------------------------------

    def where(self, offset: int) -> str:
        path = _join([self.outer_path, _path(self.stack)])
        text = f"{self.source}: byte {offset:,}"
        if path:
            text += f" (at {path})"
        if self.context:
            text += f" ({self.context})"
        return text

    def error(self, offset: int, what: str) -> FormatError:
        return FormatError(f"{self.where(offset)}: {what}")

    def need(self, position: int, width: int, offset: int, what: str) -> None:
        left = self.end - position
        if width > left:
            scope = ("the ext payload" if self.context
                     else f"the {self.size:,}-byte input")
            raise self.error(offset, f"{what} needs {width:,} bytes at byte {position:,}; expected at "
                                     f"most the {max(left, 0):,} left of {scope}, so it is "
                                     "truncated or damaged.")

    # -- the loop ----------------------------------------------------------------------------------

    def read(self) -> Any:
        data, end, stack = self.data, self.end, self.stack
        position = self.start
        owed = 1  # objects that must still come: the top-level one, then what containers declare
        while True:
            offset = position
            if position >= end:
                raise self.error(offset, "the input ends here; expected another object (the "
                                         f"containers open still owe {owed:,}), so it is truncated.")
            byte = data[position]
            position += 1
            owed -= 1
            kind, argument = _KINDS[byte]
            value: Any
            if kind == "int":
                value = argument
            elif kind == "nil":
                value = None
            elif kind == "false":
                value = False
            elif kind == "true":
                value = True
            elif kind in ("uint", "sint", "float"):
                self.need(position, argument, offset, f"{_a(byte)}")
                self.limits.build(OBJECT_BYTES)
                table = _UNSIGNED if kind == "uint" else _SIGNED if kind == "sint" else _FLOATS
                value = table[argument].unpack_from(data, position)[0]
                position += argument
            elif kind in ("fixstr", "str", "bin"):
                length, position = self.length(kind, argument, position, offset, byte)
                self.need(position, length, offset, f"{_a(byte)} of {length:,} bytes")
                self.limits.build(OBJECT_BYTES + length)
                value = bytes(data[position:position + length])
                position += length
                if kind != "bin" and not self.raw_strings:
                    try:
                        value = value.decode("utf-8")
                    except UnicodeDecodeError as error:
                        raise self.error(offset, f"a string that is not UTF-8 ({error.reason} at its "
                                                 f"byte {error.start}); expected UTF-8 text (binary "
                                                 "data is written as bin), so it is damaged.") from None
            elif kind in ("fixext", "ext"):
                if kind == "ext":
                    length, position = self.length(kind, argument, position, offset, byte)
                else:
                    length = argument
                self.need(position, 1 + length, offset, f"{_a(byte)} of {length:,} bytes")
                code = _SIGNED[1].unpack_from(data, position)[0]
                position += 1
                value = self.ext(code, position, position + length, offset)
                position += length
            elif kind in ("fixarray", "fixmap", "array", "map"):
                count, position = self.length(kind, argument, position, offset, byte)
                is_map = kind.endswith("map")
                if len(stack) >= MAX_DEPTH:
                    raise self.error(offset, f"arrays and maps nested more than {MAX_DEPTH} deep; "
                                             f"expected at most {MAX_DEPTH} (a checkpoint nests a few "
                                             "levels), so the data is damaged or built to exhaust "
                                             "the stack.")
                objects = 2 * count if is_map else count
                if owed + objects > end - position:
                    what = f"{count:,} key, value pairs" if is_map else f"{count:,} elements"
                    raise self.error(offset, f"{_a(byte)} declaring {what}; expected at most "
                                             f"{max(end - position - owed, 0):,} objects (each takes "
                                             f"at least one byte: {end - position:,} bytes are left, "
                                             f"{owed:,} of them owed to the containers already "
                                             "open), so it is truncated or damaged.")
                self.limits.build(OBJECT_BYTES + ITEM_BYTES * objects)
                if count:
                    owed += objects
                    stack.append(_Frame(is_map, count, offset))
                    continue
                value = {} if is_map else []
            else:
                raise self.error(offset, f"byte 0x{byte:02x}, which MessagePack reserves and never "
                                         "writes; expected the first byte of an object, so the data "
                                         "is damaged or not MessagePack.")
            # Hand the value to the containers it completes.
            while stack:
                frame = stack[-1]
                if frame.is_map and not frame.has_key:
                    self.check_key(value, frame, offset)
                    frame.key, frame.has_key = value, True
                    break
                if frame.is_map:
                    frame.items[frame.key] = value
                    frame.key, frame.has_key = None, False
                else:
                    frame.items.append(value)
                frame.left -= 1
                if frame.left:
                    break
                stack.pop()
                value = frame.items
                if frame.is_map and self.flax and CHUNKED_ARRAY_KEY in value:
                    self.chunked_at[id(value)] = frame.offset
            else:
                if position != end:
                    left = end - position
                    extra = f"{left:,} more byte" + ("s follow" if left > 1 else " follows")
                    raise self.error(position, f"{extra} the top-level "
                                               f"object (bytes {self.start:,} to {position - 1:,}); "
                                               "expected the input to end with it (MessagePack "
                                               "holds one object here), so it is damaged or "
                                               "several inputs run together.")
                return value

    def length(self, kind: str, argument: int, position: int, offset: int, byte: int) -> tuple[int, int]:
        """A count or length and the position after its header."""
        if kind.startswith("fix"):
            return argument, position
        self.need(position, argument, offset, f"the header of {_a(byte)}")
        return _UNSIGNED[argument].unpack_from(self.data, position)[0], position + argument

    def check_key(self, key: Any, frame: _Frame, offset: int) -> None:
        if type(key) not in (str, int, bytes):
            raise self.error(offset, f"a map key of type {_kind_of(key)}; expected str, int or bytes "
                                     "(the keys of a state dict), so the data is damaged or not a "
                                     "checkpoint.")
        if key in frame.items:
            raise self.error(offset, f"the key {key!r} a second time in the map at byte "
                                     f"{frame.offset:,}; expected each key once (readers disagree on "
                                     "which copy wins), so the data is damaged or crafted.")

    # -- ext ---------------------------------------------------------------------------------------

    def ext(self, code: int, start: int, end: int, offset: int) -> Any:
        if not self.flax or code not in (EXT_NDARRAY, EXT_COMPLEX, EXT_NUMPY_SCALAR):
            self.limits.build(OBJECT_BYTES + end - start)
            return Ext(code, bytes(self.data[start:end]))
        name = {EXT_NDARRAY: "ndarray", EXT_COMPLEX: "complex", EXT_NUMPY_SCALAR: "NumPy scalar"}[code]
        path = _join([self.outer_path, _path(self.stack)])
        inner = _Reader(self.data, start, end, self.source, self.limits, flax=False,
                        raw_strings=code != EXT_COMPLEX, size=self.size, path=path,
                        context=f"in the payload of the {name} ext at byte {offset:,}")
        value = inner.read()
        here = inner.where(start)
        if code == EXT_COMPLEX:
            if (not isinstance(value, list) or len(value) != 2
                    or any(type(part) not in (int, float) for part in value)):
                raise FormatError(f"{here}: {_describe(value)}; expected [real, imaginary], two "
                                  "numbers (Flax's complex), so the data is damaged.")
            return complex(value[0], value[1])
        array = self.ndarray(value, here)
        if code == EXT_NUMPY_SCALAR:
            if array.ndim:
                raise FormatError(f"{here}: a NumPy scalar of shape {list(array.shape)}; expected "
                                  "shape [] (Flax writes a scalar as a 0-d array), so the data is "
                                  "damaged.")
            return array[()]
        return array

    def ndarray(self, value: Any, here: str) -> np.ndarray:
        if not isinstance(value, list) or len(value) != 3:
            raise FormatError(f"{here}: {_describe(value)}; expected [shape, dtype name, bytes] "
                              "(Flax's ndarray), so the data is damaged.")
        shape, dtype_name, content = value
        sizes = _shape(shape, here, "an ndarray's shape")
        if not isinstance(dtype_name, bytes):
            raise FormatError(f"{here}: a dtype name of type {_kind_of(dtype_name)}; expected a "
                              "string such as 'float32', so the data is damaged.")
        dtype = _dtype(dtype_name.decode("ascii", "replace"), here)
        if not isinstance(content, bytes):
            raise FormatError(f"{here}: an ndarray's contents of type {_kind_of(content)}; expected "
                              "bytes, so the data is damaged.")
        needed = math.prod(sizes) * dtype.itemsize
        if len(content) != needed:
            raise FormatError(f"{here}: an ndarray of shape {list(sizes)} and dtype {dtype.name} "
                              f"needs {needed:,} bytes; expected exactly that many, got "
                              f"{len(content):,}, so the data is damaged.")
        self.limits.used += needed
        if self.limits.used > self.limits.limit:
            raise FormatError(f"{here}: the arrays decoded so far come to {self.limits.used:,} "
                              f"bytes; expected at most {self.limits.limit:,} "
                              f"({ARRAY_BYTES_PER_INPUT_BYTE:g} per byte of input: arrays are "
                              "stored raw), so the data is damaged or crafted.")
        array = np.frombuffer(content, dtype=dtype).reshape(sizes)
        if dtype.kind == "b" and needed and int(np.frombuffer(content, dtype=np.uint8).max()) > 1:
            raise FormatError(f"{here}: a bool ndarray holding bytes other than 0 and 1; expected "
                              "only 0 (False) and 1 (True), so the data is damaged.")
        return array  # read-only: a view of an immutable bytes object


def _kind_of(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "ndarray"
    return type(value).__name__


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return f"a list of {len(value)} objects"
    name = _kind_of(value)
    return f"an {name}" if name[0] in "aeiouAEIOU" else f"a {name}"


def _shape(value: Any, here: str, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(type(size) is not int or size < 0 for size in value):
        raise FormatError(f"{here}: {what} is {_describe(value)}; expected a list of sizes (ints of "
                          "at least 0), so the data is damaged.")
    if len(value) > MAX_RANK:
        raise FormatError(f"{here}: {what} has {len(value):,} dimensions; expected at most {MAX_RANK}, "
                          "so the data is damaged.")
    if math.prod(max(size, 1) for size in value) >= 1 << 59:
        # NumPy cannot shape even an empty array so: its sizes, zeros aside, must multiply to
        # an addressable number of bytes.
        raise FormatError(f"{here}: {what} is {value}; expected sizes whose product (zeros "
                          "aside) is below 2**59, so the data is damaged.")
    return tuple(value)


def _dtype(name: str, here: str) -> np.dtype[Any]:
    if name in _DTYPES:
        return np.dtype(_DTYPES[name])
    if name == "bfloat16":
        try:
            ml_dtypes = importlib.import_module("ml_dtypes")
        except ImportError as error:
            raise MissingDependencyError(
                f"{here}: a bfloat16 ndarray needs 'ml_dtypes', which is not installed ({error}). "
                "Install it with `pip install ml_dtypes` (JAX installs it too).") from error
        return np.dtype(ml_dtypes.bfloat16)
    known = ", ".join([*_DTYPES, "bfloat16"])
    raise FormatError(f"{here}: an ndarray of dtype {name!r}; expected one of {known} (numbers "
                      "only), so the checkpoint holds something rnnport does not read, or is "
                      "damaged.")


# -- Flax's chunked arrays ---------------------------------------------------------------------------

def _unchunk_tree(root: Any, chunked_at: dict[int, int], source: str) -> Any:
    """Put chunked arrays back together where ``flax.serialization`` does: the top-level
    object, and values of dicts reached from it through dicts alone."""
    if not isinstance(root, dict):
        return root
    if CHUNKED_ARRAY_KEY in root:
        return _unchunk(root, chunked_at, source, "")
    todo: list[tuple[dict[Any, Any], str]] = [(root, "")]
    while todo:
        parent, path = todo.pop()
        for key, value in list(parent.items()):
            if not isinstance(value, dict):
                continue
            child_path = f"{path}/{key}" if path else str(key)
            if CHUNKED_ARRAY_KEY in value:
                parent[key] = _unchunk(value, chunked_at, source, child_path)
            else:
                todo.append((value, child_path))
    return root


def _indexed(value: Any, here: str, what: str) -> list[Any]:
    """Flax's ``_tuple_to_dict`` form, ``{"0": a, "1": b, ...}``, as a list (a list is kept)."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and set(value) == {str(index) for index in range(len(value))}:
        return [value[str(index)] for index in range(len(value))]
    keys = list(value)[:8] if isinstance(value, dict) else None
    found = f"a dict with keys {keys}" if keys is not None else _describe(value)
    raise FormatError(f"{here}: its {what!r} is {found}; expected a dict keyed '0', '1', … (or a "
                      "list), so the data is damaged.")


def _unchunk(chunked: dict[Any, Any], chunked_at: dict[int, int], source: str, path: str) -> np.ndarray:
    offset = chunked_at.get(id(chunked))
    here = source + (f": byte {offset:,}" if offset is not None else "") + (f" (at {path})" if path else "")
    here += ": a chunked array"
    if set(chunked) != {CHUNKED_ARRAY_KEY, "shape", "chunks"} or chunked[CHUNKED_ARRAY_KEY] is not True:
        raise FormatError(f"{here} with keys {sorted(map(repr, chunked))} and marker "
                          f"{chunked.get(CHUNKED_ARRAY_KEY)!r}; expected exactly "
                          f"{CHUNKED_ARRAY_KEY!r}: True, 'shape' and 'chunks' (Flax's _chunk), so "
                          "the data is damaged.")
    sizes = _shape(_indexed(chunked["shape"], here, "shape"), here, "its shape")
    chunks = _indexed(chunked["chunks"], here, "chunks")
    if not chunks:
        raise FormatError(f"{here} without chunks; expected at least one (Flax chunks only arrays "
                          "of more than MAX_CHUNK_SIZE bytes), so the data is damaged.")
    for index, chunk in enumerate(chunks):
        if not isinstance(chunk, np.ndarray) or chunk.ndim != 1 or chunk.dtype != chunks[0].dtype:
            found = (f"an ndarray of shape {list(chunk.shape)} and dtype {chunk.dtype}"
                     if isinstance(chunk, np.ndarray) else _describe(chunk))
            raise FormatError(f"{here}: chunk {index} is {found}; expected one-dimensional "
                              "ndarrays of one dtype, so the data is damaged.")
    total = sum(chunk.size for chunk in chunks)
    if total != math.prod(sizes):
        raise FormatError(f"{here} of shape {list(sizes)} ({math.prod(sizes):,} elements); expected "
                          f"chunks holding that many elements, got {total:,}, so the data is damaged.")
    array = np.concatenate(chunks).reshape(sizes)
    array.flags.writeable = False
    return array


# -- writing, as flax.serialization.to_bytes does ------------------------------------------------------

def encode_flax(tree: Any) -> bytes:
    """``tree`` as ``flax.serialization.to_bytes(tree)`` writes it (see the module's
    docstring); :func:`decode` reads it back with dicts in place of lists and tuples."""
    out = bytearray()
    _write(out, tree, "", 0)
    return bytes(out)


def _unsupported(where: str, what: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"encode_flax: {where or 'the tree'}: {what}")


def _header(out: bytearray, length: int, fixed: tuple[int, int] | None, codes: tuple[int, int, int],
            where: str, what: str) -> None:
    """A str, bin, array or map header: the fixed form (``fixed``: its first byte and the
    count it must stay below) if it fits, else the 8-, 16- or 32-bit one (``codes``; 0 where
    the type has no 8-bit form), as msgpack chooses."""
    if fixed is not None and length < fixed[1]:
        out.append(fixed[0] | length)
    elif codes[0] and length < 1 << 8:
        out += bytes((codes[0], length))
    elif length < 1 << 16:
        out.append(codes[1])
        out += _UNSIGNED[2].pack(length)
    elif length < 1 << 32:
        out.append(codes[2])
        out += _UNSIGNED[4].pack(length)
    else:
        raise _unsupported(where, f"{what} of {length:,}; expected fewer than 2**32 (MessagePack's "
                                  "limit).")


def _write_int(out: bytearray, value: int, where: str) -> None:
    if -32 <= value < 0x80:
        out.append(value & 0xFF)
    elif 0 <= value < 1 << 64:
        width = 1 if value < 1 << 8 else 2 if value < 1 << 16 else 4 if value < 1 << 32 else 8
        out.append({1: 0xCC, 2: 0xCD, 4: 0xCE, 8: 0xCF}[width])
        out += _UNSIGNED[width].pack(value)
    elif -(1 << 63) <= value < 0:
        width = (1 if value >= -(1 << 7) else 2 if value >= -(1 << 15) else 4 if value >= -(1 << 31)
                 else 8)
        out.append({1: 0xD0, 2: 0xD1, 4: 0xD2, 8: 0xD3}[width])
        out += _SIGNED[width].pack(value)
    else:
        raise _unsupported(where, f"the integer {value}; expected -2**63 to 2**64-1 (MessagePack's "
                                  "range).")


def _write_bytes(out: bytearray, value: bytes, where: str) -> None:
    _header(out, len(value), None, (0xC4, 0xC5, 0xC6), where, "bytes")
    out += value


def _write_ext(out: bytearray, code: int, payload: bytes, where: str) -> None:
    fixed = {1: 0xD4, 2: 0xD5, 4: 0xD6, 8: 0xD7, 16: 0xD8}.get(len(payload))
    if fixed is not None:
        out.append(fixed)
    else:
        _header(out, len(payload), None, (0xC7, 0xC8, 0xC9), where, "an ext payload")
    out.append(code)
    out += payload


def _array_payload(array: np.ndarray, where: str) -> bytes:
    """Flax's ``_ndarray_to_bytes``: MessagePack ``[shape, dtype name, C-order bytes]``."""
    name = array.dtype.name
    if name not in _DTYPES and name != "bfloat16":
        raise _unsupported(where, f"an array of dtype {array.dtype}; expected one of "
                                  f"{', '.join([*_DTYPES, 'bfloat16'])} (what decode reads). Cast it "
                                  "first.")
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    payload = bytearray(b"\x93")
    _header(payload, array.ndim, (0x90, 16), (0, 0xDC, 0xDD), where, "dimensions")
    for size in array.shape:
        _write_int(payload, size, where)
    _header(payload, len(name), (0xA0, 32), (0xD9, 0xDA, 0xDB), where, "a dtype name")
    payload += name.encode("ascii")
    _write_bytes(payload, array.tobytes("C"), where)
    return bytes(payload)


def _write(out: bytearray, value: Any, where: str, depth: int) -> None:
    if isinstance(value, np.ndarray) and value.nbytes > MAX_CHUNK_SIZE:
        # flax.serialization._chunk: flat pieces of at most MAX_CHUNK_SIZE bytes.
        step = max(1, int(MAX_CHUNK_SIZE / value.dtype.itemsize))
        flat = value.reshape(-1)
        value = {CHUNKED_ARRAY_KEY: True, "shape": list(value.shape),
                 "chunks": [flat[start:start + step] for start in range(0, flat.size, step)]}
    if value is None:
        out.append(0xC0)
    elif value is True or value is False:
        out.append(0xC3 if value else 0xC2)
    elif type(value) is int:
        _write_int(out, value, where)
    elif type(value) is float:
        out.append(0xCB)
        out += _FLOATS[8].pack(value)
    elif type(value) is complex:
        pair = b"\x92\xcb" + _FLOATS[8].pack(value.real) + b"\xcb" + _FLOATS[8].pack(value.imag)
        _write_ext(out, EXT_COMPLEX, pair, where)
    elif type(value) is str:
        text = value.encode("utf-8")
        _header(out, len(text), (0xA0, 32), (0xD9, 0xDA, 0xDB), where, "a string")
        out += text
    elif type(value) is bytes:
        _write_bytes(out, value, where)
    elif isinstance(value, np.ndarray):
        _write_ext(out, EXT_NDARRAY, _array_payload(value, where), where)
    elif isinstance(value, np.generic):
        _write_ext(out, EXT_NUMPY_SCALAR, _array_payload(np.asarray(value), where), where)
    elif isinstance(value, (dict, list, tuple)):
        if depth >= MAX_DEPTH:
            raise _unsupported(where, f"dicts and lists nested more than {MAX_DEPTH} deep; expected "
                                      f"at most {MAX_DEPTH} (what decode reads; is there a cycle?).")
        # Flax's state dict: string keys; a list or a tuple is a dict keyed "0", "1", ...
        items = list(value.items() if isinstance(value, dict) else enumerate(value))
        keys = [str(key) for key, _ in items]
        if len(set(keys)) != len(keys):
            raise _unsupported(where, f"keys {[key for key, _ in items][:8]} that are not distinct "
                                      "as strings; expected keys that are (Flax writes keys as "
                                      "strings).")
        _header(out, len(items), (0x80, 16), (0, 0xDE, 0xDF), where, "a dict's length")
        for key, (_, item) in zip(keys, items, strict=True):
            _write(out, key, where, depth + 1)
            _write(out, item, f"{where}/{key}" if where else key, depth + 1)
    else:
        raise _unsupported(where, f"a {type(value).__name__}; expected dicts, lists and tuples of "
                                  "NumPy arrays and scalars, None, bool, int, float, complex, str "
                                  "or bytes.")
