"""The protocol-buffer wire rules TensorFlow's files need: a checkpoint index (both ways)
and, read only, the graphs and object graphs of ``io/tfproto.py``.

:func:`fields` yields ``(field number, value)`` pairs: an ``int`` for varint and
fixed-width fields, ``bytes`` for length-delimited ones. For messages read field by field
without copies (``io/tfproto.py``): :func:`tag_at` reads a tag, :func:`skip` steps over a
value (a group whole) and :func:`value_at` reads one where it starts (a ``memoryview``
slice instead of a copy); :func:`packed_varints` and :func:`fixed_array` decode packed
repeated fields with NumPy. Malformed input raises ``ProtoError``; the caller adds where
it was.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

__all__ = ["MAX_FIELD_NUMBER", "WIRE_END_GROUP", "WIRE_FIXED32", "WIRE_FIXED64", "WIRE_LEN",
           "WIRE_NAMES", "WIRE_START_GROUP", "WIRE_VARINT", "ProtoError", "fields", "fixed_array",
           "key", "packed_varints", "read_varint", "skip", "tag_at", "value_at", "varint"]


class ProtoError(ValueError):
    pass


def read_varint(data: bytes | bytearray | memoryview, position: int) -> tuple[int, int]:
    """The varint at ``position`` and the position after it."""
    result = shift = 0
    while True:
        if position >= len(data):
            raise ProtoError("a varint runs past the end of its record")
        byte = data[position]
        position += 1
        if shift == 63 and byte > 1:
            raise ProtoError("a varint does not fit in 64 bits")
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def fields(data: bytes | memoryview) -> Iterator[tuple[int, int | bytes]]:
    position = 0
    value: int | bytes
    while position < len(data):
        tag, position = read_varint(data, position)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise ProtoError("a field numbered 0")
        if wire == 0:
            value, position = read_varint(data, position)
        elif wire == 1 or wire == 5:
            width = 8 if wire == 1 else 4
            if position + width > len(data):
                raise ProtoError("a fixed-width field runs past the end of its record")
            value = int.from_bytes(data[position:position + width], "little")
            position += width
        elif wire == 2:
            length, position = read_varint(data, position)
            if position + length > len(data):
                raise ProtoError("a length-delimited field runs past the end of its record")
            value = bytes(data[position:position + length])
            position += length
        else:
            raise ProtoError(f"wire type {wire} (groups are not used by checkpoints)")
        yield number, value


def varint(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1  # two's complement, as protobuf encodes negative int64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


# -- the rest of the wire format, for messages read field by field (TensorFlow's graphs) ----------

WIRE_VARINT, WIRE_FIXED64, WIRE_LEN, WIRE_START_GROUP, WIRE_END_GROUP, WIRE_FIXED32 = range(6)
WIRE_NAMES = {WIRE_VARINT: "varint", WIRE_FIXED64: "64-bit", WIRE_LEN: "length-delimited",
              WIRE_START_GROUP: "start-group", WIRE_END_GROUP: "end-group", WIRE_FIXED32: "32-bit"}
MAX_FIELD_NUMBER = (1 << 29) - 1
# Groups are proto2's and no TensorFlow message has one; an unknown one is still skipped, as
# protobuf does, but only this deep (each level is a start tag in the input, so a bound).
MAX_GROUP_DEPTH = 100
# Packed varints are decoded this many bytes at a time, so the temporary arrays stay small.
_VARINT_CHUNK = 1 << 20


def _tag(data: memoryview, position: int) -> tuple[int, int, int]:
    byte = data[position]
    if byte < 0x80:  # most tags are one byte
        tag, position = byte, position + 1
    else:
        tag, position = read_varint(data, position)
    number, wire = tag >> 3, tag & 7
    if not 0 < number <= MAX_FIELD_NUMBER:
        raise ProtoError(f"a field numbered {number} (field numbers run from 1 to {MAX_FIELD_NUMBER})")
    return number, wire, position


def _skip_group(data: memoryview, position: int, number: int) -> int:
    """The position after the end-group tag that closes group ``number``."""
    open_groups = [number]
    while open_groups:
        if position >= len(data):
            raise ProtoError(f"group {open_groups[-1]} has no end-group tag before the end of its record")
        inner, wire, position = _tag(data, position)
        if wire == WIRE_START_GROUP:
            if len(open_groups) >= MAX_GROUP_DEPTH:
                raise ProtoError(f"groups nested deeper than {MAX_GROUP_DEPTH} levels")
            open_groups.append(inner)
        elif wire == WIRE_END_GROUP:
            if inner != open_groups[-1]:
                raise ProtoError(f"an end-group tag for field {inner} closes group {open_groups[-1]}")
            open_groups.pop()
        else:
            position = _skip_value(data, position, wire)
    return position


def _skip_value(data: memoryview, position: int, wire: int) -> int:
    if wire == WIRE_VARINT:
        return read_varint(data, position)[1]
    if wire == WIRE_FIXED64 or wire == WIRE_FIXED32:
        position += 8 if wire == WIRE_FIXED64 else 4
        if position > len(data):
            raise ProtoError("a fixed-width field runs past the end of its record")
        return position
    if wire == WIRE_LEN:
        length, position = read_varint(data, position)
        if length > len(data) - position:
            raise ProtoError(f"a length-delimited field of {length:,} bytes runs past the end of its "
                             f"record ({len(data) - position:,} bytes left)")
        return position + length
    raise ProtoError(f"wire type {wire}, which protobuf does not define")


def tag_at(data: memoryview, position: int) -> tuple[int, int, int]:
    """The field number and wire type of the tag at ``position``, and the position after it."""
    if position >= len(data):
        raise ProtoError("a tag runs past the end of its record")
    return _tag(data, position)


def skip(data: memoryview, position: int, wire: int, number: int) -> int:
    """The position after the value of wire type ``wire`` (of field ``number``) that starts
    at ``position``: a group is skipped whole; an end-group tag without its start, wire
    types 6 and 7, and a value running past the end raise ``ProtoError``."""
    if wire == WIRE_LEN or wire == WIRE_VARINT:
        byte = data[position] if position < len(data) else 0x80
        if byte < 0x80:  # a one-byte length or value, the usual case, inline
            length, position = byte, position + 1
        else:
            length, position = read_varint(data, position)
        if wire == WIRE_VARINT:
            return position
        if length > len(data) - position:
            raise ProtoError(f"a length-delimited field of {length:,} bytes runs past the end "
                             f"of its record ({len(data) - position:,} bytes left)")
        return position + length
    if wire == WIRE_START_GROUP:
        return _skip_group(data, position, number)
    if wire == WIRE_END_GROUP:
        raise ProtoError(f"an end-group tag for field {number} without its start")
    return _skip_value(data, position, wire)


def value_at(data: memoryview, position: int, wire: int) -> int | memoryview:
    """The value of wire type ``wire`` (not a group) starting at ``position``, which
    a scan found and checked (:func:`skip`): an ``int`` (the raw bits, unsigned) for varint and
    fixed-width fields, a ``memoryview`` slice of ``data`` (no copy) for length-delimited ones."""
    if wire == WIRE_VARINT:
        return read_varint(data, position)[0]
    if wire == WIRE_LEN:
        length, position = read_varint(data, position)
        return data[position:position + length]
    width = 8 if wire == WIRE_FIXED64 else 4
    return int.from_bytes(data[position:position + width], "little")


def packed_varints(data: memoryview) -> np.ndarray:
    """The varints of a packed repeated field, as ``uint64`` (the raw bits, like ``read_varint``)."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size == 0 or int(raw.max()) < 0x80:
        return raw.astype(np.uint64)  # every value one byte: the common case of small numbers
    ends = np.flatnonzero(raw < 0x80)
    if ends.size == 0 or ends[-1] != raw.size - 1:
        raise ProtoError("a packed varint runs past the end of its field")
    out = np.empty(ends.size, dtype=np.uint64)
    first = 0
    for chunk_start in range(0, ends.size, _VARINT_CHUNK):
        chunk_ends = ends[chunk_start:chunk_start + _VARINT_CHUNK]
        starts = np.empty_like(chunk_ends)
        starts[0] = first
        starts[1:] = chunk_ends[:-1] + 1
        lengths = chunk_ends - starts + 1
        if int(lengths.max()) > 10:
            raise ProtoError("a packed varint longer than 10 bytes (more than 64 bits)")
        piece = raw[first:int(chunk_ends[-1]) + 1]
        offsets = np.arange(piece.size) - np.repeat(starts - first, lengths)
        if np.any((offsets == 9) & (piece > 1)):
            raise ProtoError("a packed varint does not fit in 64 bits")
        payload = (piece & 0x7F).astype(np.uint64) << (7 * offsets).astype(np.uint64)
        out[chunk_start:chunk_start + chunk_ends.size] = np.bitwise_or.reduceat(payload, starts - first)
        first = int(chunk_ends[-1]) + 1
    return out


def fixed_array(data: memoryview, dtype: str) -> np.ndarray:
    """A packed repeated fixed-width field as a read-only array viewing ``data`` (``dtype``
    little-endian, e.g. ``"<f4"``)."""
    width = np.dtype(dtype).itemsize
    if len(data) % width:
        raise ProtoError(f"a packed field of {len(data)} bytes is not a whole number of "
                         f"{width}-byte values")
    return np.frombuffer(data, dtype=dtype)
