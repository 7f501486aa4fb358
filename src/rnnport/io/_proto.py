"""The few protocol-buffer wire rules a TensorFlow checkpoint index needs, both ways.

Decoding yields ``(field number, value)`` pairs: an ``int`` for varint and fixed-width
fields, ``bytes`` for length-delimited ones. Malformed input raises ``ProtoError``; the
caller adds where it was.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["ProtoError", "fields", "key", "read_varint", "varint"]


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
