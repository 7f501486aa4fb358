"""A bounds-checked FlatBuffers reader, NumPy and the standard library only.

The wire format (little-endian throughout), in the part a reader needs
-----------------------------------------------------------------------
* The buffer starts with a ``uoffset`` (uint32) to the root *table*, optionally followed
  by a 4-byte file identifier (``TFL3`` for TFLite).
* A ``uoffset`` stored at position ``p`` points to ``p + value``: always forward. A value
  of 0 would point at the offset itself and is refused (so no object can contain itself).
* A *table* at position ``t`` starts with an ``soffset`` (int32) ``s``; its *vtable* is at
  ``t - s``: uint16 vtable size in bytes (at least 4, even), uint16 inline size of the
  table in bytes, then one uint16 per field: the field's position relative to ``t``, or 0
  when the field is absent (its default applies). Field ``i`` of the schema is vtable slot
  ``4 + 2 i``; a slot past the vtable's end is absent too (a file from an older schema).
* A scalar or a *struct* (a fixed-size record) is stored inline at ``t + field offset``; a
  table, vector or string field holds a ``uoffset`` to it.
* A *vector* is a uint32 element count followed by the elements: scalars or structs inline,
  tables and strings as one ``uoffset`` each (relative to that element's own position).
* A *string* is a uint32 byte count, the UTF-8 bytes and a terminating NUL.
* A *union* is two fields: a uint8 type (0: none) in slot ``i`` and a ``uoffset`` to the
  table in slot ``i + 1``.

Limits (what keeps a damaged or hostile buffer from costing more than its size)
--------------------------------------------------------------------------------
* Every position is checked against the buffer before it is read; a vector's declared
  length against the bytes present before anything is allocated or sliced; a field's
  width against the table's inline size; a vtable's size against the buffer.
* Tables nested at most :data:`MAX_DEPTH` deep.
* A *visit budget*: each table, vector, string and vector element read costs one unit, and
  a buffer allows what the ``work`` limit (:mod:`rnnport.budget`) gives its size (4 units
  per byte, plus 4,096, unless raised), so many tables pointing at one shared vector (a
  legal file shares nothing big) cannot multiply the work.
* Vectors decoded into Python numbers (:meth:`Table.values`) are decoded once per buffer,
  however many tables point at them, and each is charged against the ``expansion`` limit
  (:data:`VALUE_BYTES` a value) before it is built; :meth:`FlatBuffer.once` gives a decoder
  the same memo for the tables it decodes.

Every malformed buffer raises :class:`~rnnport.errors.FormatError` naming where, e.g.
``model.tflite: subgraphs[0].operators[3].inputs: vector of 2,147,483,648 int32 runs
past the end of the 1,204-byte file``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from .. import budget
from ..errors import FormatError

T = TypeVar("T")

__all__ = ["MAX_DEPTH", "VALUE_BYTES", "FlatBuffer", "Table", "slot"]

MAX_DEPTH = 64
VALUE_BYTES = 32  # a Python number and its place in a tuple

_SCALARS = {"bool": "<B", "int8": "<b", "uint8": "<B", "int16": "<h", "uint16": "<H",
            "int32": "<i", "uint32": "<I", "int64": "<q", "uint64": "<Q", "float32": "<f",
            "float64": "<d"}


def slot(field_index: int) -> int:
    """The vtable slot (byte offset in the vtable) of the schema's ``field_index``-th field."""
    return 4 + 2 * field_index


class FlatBuffer:
    """One buffer being read: the bytes, the name errors give it, the budget left."""

    def __init__(self, data: bytes | bytearray | memoryview, *, source: str = "<bytes>",
                 identifier: bytes | None = None) -> None:
        self.data = memoryview(data).cast("B")
        self.size = len(self.data)
        self.source = source
        self.budget = budget.allowance("work", self.size)
        self.built = 0  # bytes of Python values decoded, against the expansion limit
        self.allowed = budget.allowance("expansion", self.size)
        self.decoded: dict[Hashable, Any] = {}  # what was decoded once, by where it lies
        if self.size < 8:
            raise self.error("", f"{self.size} bytes are too few for a FlatBuffer; expected at least "
                                 "8 (a root offset and a file identifier)")
        if identifier is not None and bytes(self.data[4:8]) != identifier:
            raise self.error("", f"the file identifier is {bytes(self.data[4:8])!r}, expected "
                                 f"{identifier!r}; this is not that kind of FlatBuffer (or it is "
                                 "damaged)")

    def error(self, where: str, what: str) -> FormatError:
        return FormatError(f"{self.source}: {where}: {what}" if where else f"{self.source}: {what}")

    def charge(self, units: int, where: str) -> None:
        self.budget -= units
        if self.budget < 0:
            raise budget.exceeded(f"{self.source}: {where}" if where else self.source,
                                  "reading this FlatBuffer takes more visits per byte than "
                                  "reading each object once would (many references to one "
                                  "shared object?)", "work", self.size)

    def grow(self, count: int, where: str, what: str) -> None:
        """Count ``count`` bytes of values about to be decoded against the ``expansion``
        limit."""
        self.built += count
        if self.built > self.allowed:
            raise budget.exceeded(f"{self.source}: {where}" if where else self.source,
                                  f"decoding {what} would bring what this FlatBuffer's values "
                                  f"take to {self.built:,} bytes", "expansion", self.size,
                                  self.built)

    def once(self, key: Hashable, make: Callable[[], T]) -> T:
        """``make()``, called once per ``key`` (an object's kind and position): an object
        many tables point at is decoded, and charged, once."""
        if key in self.decoded:
            found: T = self.decoded[key]
            return found
        made = self.decoded[key] = make()
        return made

    def need(self, position: int, width: int, where: str, what: str) -> None:
        if position < 0 or width < 0 or position + width > self.size:
            raise self.error(where, f"{what} at byte {position:,} runs past the end of the "
                                    f"{self.size:,}-byte file")

    def scalar(self, position: int, kind: str, where: str, what: str) -> int | float:
        fmt = _SCALARS[kind]
        self.need(position, struct.calcsize(fmt), where, what)
        value: int | float = struct.unpack_from(fmt, self.data, position)[0]
        return value

    def follow(self, position: int, where: str) -> int:
        """The position a ``uoffset`` stored at ``position`` points to."""
        offset = int(self.scalar(position, "uint32", where, "an offset"))
        if offset == 0 or offset >= 1 << 31:
            raise self.error(where, f"an offset of {offset:,} at byte {position:,}; expected 1 to "
                                    "2^31-1 (an offset points forward, never at itself)")
        target = position + offset
        if target >= self.size:
            raise self.error(where, f"an offset at byte {position:,} points to byte {target:,}, past "
                                    f"the end of the {self.size:,}-byte file")
        return target

    def root(self, where: str = "root table") -> Table:
        return self.table_at(self.follow(0, where), where, depth=0)

    def table_at(self, position: int, where: str, depth: int) -> Table:
        if depth > MAX_DEPTH:
            raise self.error(where, f"tables nested more than {MAX_DEPTH} deep")
        self.charge(1, where)
        vtable = position - int(self.scalar(position, "int32", where, "a table"))
        if not 0 <= vtable <= self.size - 4:
            raise self.error(where, f"the table at byte {position:,} has its vtable at byte {vtable:,}, "
                                    f"outside the {self.size:,}-byte file")
        vtable_size = int(self.scalar(vtable, "uint16", where, "a vtable"))
        table_size = int(self.scalar(vtable + 2, "uint16", where, "a vtable"))
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > self.size:
            raise self.error(where, f"the vtable at byte {vtable:,} declares {vtable_size:,} bytes; "
                                    "expected an even size of at least 4 that fits in the "
                                    f"{self.size:,}-byte file")
        if table_size < 4 or position + table_size > self.size:
            raise self.error(where, f"the table at byte {position:,} declares {table_size:,} inline "
                                    f"bytes; expected at least 4, within the {self.size:,}-byte file")
        return Table(self, position, vtable, vtable_size, table_size, where, depth)


@dataclass(frozen=True)
class Table:
    """A table inside a :class:`FlatBuffer`; fields are read by vtable slot (:func:`slot`)."""

    buffer: FlatBuffer
    position: int
    vtable: int
    vtable_size: int
    table_size: int
    where: str
    depth: int

    def _here(self, name: str) -> str:
        return f"{self.where}.{name}" if self.where else name

    def field(self, vtable_slot: int, width: int, name: str) -> int:
        """The absolute position of a field, or 0 when the field is absent."""
        if vtable_slot + 2 > self.vtable_size:
            return 0
        offset = int(self.buffer.scalar(self.vtable + vtable_slot, "uint16", self.where, "a vtable"))
        if offset == 0:
            return 0
        if offset < 4 or offset + width > self.table_size:
            raise self.buffer.error(self._here(name), f"the field's {width} bytes at table offset "
                                    f"{offset:,} lie outside the table's {self.table_size:,} "
                                    "inline bytes")
        return self.position + offset

    def scalar(self, vtable_slot: int, kind: str, name: str, default: int | float = 0) -> int | float:
        width = struct.calcsize(_SCALARS[kind])
        position = self.field(vtable_slot, width, name)
        if not position:
            return default
        value = self.buffer.scalar(position, kind, self._here(name), kind)
        return bool(value) if kind == "bool" else value

    def integer(self, vtable_slot: int, kind: str, name: str, default: int = 0) -> int:
        return int(self.scalar(vtable_slot, kind, name, default))

    def number(self, vtable_slot: int, name: str, default: float = 0.0) -> float:
        return float(self.scalar(vtable_slot, "float32", name, default))

    def flag(self, vtable_slot: int, name: str, default: bool = False) -> bool:
        return bool(self.scalar(vtable_slot, "bool", name, default))

    def struct(self, vtable_slot: int, size: int, name: str) -> memoryview | None:
        position = self.field(vtable_slot, size, name)
        return self.buffer.data[position:position + size] if position else None

    def _target(self, vtable_slot: int, name: str) -> int:
        position = self.field(vtable_slot, 4, name)
        return self.buffer.follow(position, self._here(name)) if position else 0

    def table(self, vtable_slot: int, name: str) -> Table | None:
        target = self._target(vtable_slot, name)
        return self.buffer.table_at(target, self._here(name), self.depth + 1) if target else None

    def _vector(self, vtable_slot: int, width: int, type_name: str, name: str) -> tuple[int, int] | None:
        target = self._target(vtable_slot, name)
        if not target:
            return None
        where = self._here(name)
        count = int(self.buffer.scalar(target, "uint32", where, "a vector's length"))
        start = target + 4
        if count * width > self.buffer.size - start:
            raise self.buffer.error(where, f"vector of {count:,} {type_name} runs past the end of the "
                                           f"{self.buffer.size:,}-byte file")
        self.buffer.charge(1 + count, where)
        return start, count

    def vector(self, vtable_slot: int, dtype: str, name: str) -> np.ndarray | None:
        """A vector of scalars (``dtype`` a little-endian NumPy type such as ``"<i4"``), as a
        read-only array viewing the buffer; ``None`` when the field is absent."""
        width = np.dtype(dtype).itemsize
        found = self._vector(vtable_slot, width, np.dtype(dtype).name, name)
        if found is None:
            return None
        start, count = found
        array = np.frombuffer(self.buffer.data, dtype=dtype, count=count, offset=start)
        array.flags.writeable = False
        return array

    def values(self, vtable_slot: int, dtype: str, name: str, most: tuple[int, str] | None = None
               ) -> tuple[Any, ...] | None:
        """A vector of scalars as a tuple of Python numbers (``None`` when absent), decoded
        once however many tables point at it, and charged against the ``expansion`` limit
        before it is built; ``most``: (the most values it may hold, what they are)."""
        target = self._target(vtable_slot, name)
        if not target:
            return None
        buffer = self.buffer

        def make() -> tuple[Any, ...]:
            array = self.vector(vtable_slot, dtype, name)
            assert array is not None
            if most is not None and len(array) > most[0]:
                raise buffer.error(self._here(name), f"{len(array):,} {most[1]}; expected at "
                                                     f"most {most[0]}")
            buffer.grow(VALUE_BYTES * len(array), self._here(name),
                        f"a vector of {len(array):,} values")
            return tuple(array.tolist())

        buffer.charge(1, self._here(name))
        return buffer.once(("values", target, dtype, most), make)

    def bytes_vector(self, vtable_slot: int, name: str) -> memoryview | None:
        """A vector of bytes as a slice of the buffer (no copy)."""
        found = self._vector(vtable_slot, 1, "bytes", name)
        if found is None:
            return None
        start, count = found
        return self.buffer.data[start:start + count]

    def tables(self, vtable_slot: int, name: str) -> list[Table]:
        """A vector of tables (empty when the field is absent)."""
        found = self._vector(vtable_slot, 4, "tables", name)
        if found is None:
            return []
        start, count = found
        return [self.buffer.table_at(self.buffer.follow(start + 4 * i, f"{self._here(name)}[{i}]"),
                                     f"{self._here(name)}[{i}]", self.depth + 1)
                for i in range(count)]

    def string(self, vtable_slot: int, name: str) -> str | None:
        target = self._target(vtable_slot, name)
        return read_string(self.buffer, target, self._here(name)) if target else None

    def strings(self, vtable_slot: int, name: str) -> list[str]:
        found = self._vector(vtable_slot, 4, "strings", name)
        if found is None:
            return []
        start, count = found
        return [read_string(self.buffer, self.buffer.follow(start + 4 * i, f"{self._here(name)}[{i}]"),
                            f"{self._here(name)}[{i}]") for i in range(count)]

    def union(self, type_slot: int, value_slot: int, name: str) -> tuple[int, Table | None]:
        """A union's type (0: none) and its table (``None`` for type 0 or a missing value)."""
        kind = self.integer(type_slot, "uint8", f"{name}_type")
        if kind == 0:
            return 0, None
        return kind, self.table(value_slot, name)


def read_string(buffer: FlatBuffer, position: int, where: str) -> str:
    length = int(buffer.scalar(position, "uint32", where, "a string's length"))
    start = position + 4
    if length + 1 > buffer.size - start:
        raise buffer.error(where, f"a string of {length:,} bytes (and its NUL) runs past the end of "
                                  f"the {buffer.size:,}-byte file")
    buffer.charge(1 + length // 16, where)
    if buffer.data[start + length] != 0:
        raise buffer.error(where, "a string without its terminating NUL byte")
    try:
        return bytes(buffer.data[start:start + length]).decode("utf-8")
    except UnicodeDecodeError as error:
        raise buffer.error(where, f"a string that is not UTF-8 ({error.reason} at byte "
                                  f"{error.start})") from None
