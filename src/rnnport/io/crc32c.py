"""CRC-32C (Castagnoli), as TensorFlow's checkpoints and LevelDB tables use it, in NumPy.

The standard library has only the IEEE CRC-32, and a byte loop in Python runs at a few
MB/s. A CRC without its initial and final inversion is linear over GF(2), so a buffer is
cut into many equal chunks whose registers advance together, one byte column per NumPy
step, and the chunk registers are then merged pairwise: ``raw(A ‖ B) = shift(raw(A),
len(B)) ⊕ raw(B)``, where ``shift`` (feeding zero bytes) is a 32×32 bit matrix applied
through four 256-entry tables.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

__all__ = ["crc32c", "mask", "unmask"]

_POLYNOMIAL = 0x82F63B78  # reflected Castagnoli polynomial
_MASK_DELTA = 0xA282EAD8
_CHUNKS = 1 << 16  # registers advanced side by side


def _byte_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLYNOMIAL), table >> 1)
    return table.astype(np.uint32)


_TABLE = _byte_table()
_TABLE_LIST = [int(v) for v in _TABLE]


def _raw_bytes(register: int, data: bytes | memoryview) -> int:
    """Advance ``register`` over ``data`` one byte at a time (short inputs)."""
    table = _TABLE_LIST
    for byte in bytes(data):
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    return register


# -- the zero-byte shift as a linear map ----------------------------------------------------

def _apply(columns: tuple[int, ...], value: int) -> int:
    out = 0
    bit = 0
    while value:
        if value & 1:
            out ^= columns[bit]
        value >>= 1
        bit += 1
    return out


def _compose(outer: tuple[int, ...], inner: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(_apply(outer, column) for column in inner)


@lru_cache(maxsize=64)
def _shift_columns(length: int) -> tuple[int, ...]:
    """Images of the 32 unit registers after ``length`` zero bytes."""
    if length == 0:
        return tuple(1 << bit for bit in range(32))
    if length == 1:
        return tuple(_raw_bytes(1 << bit, b"\0") for bit in range(32))
    half = _shift_columns(length // 2)
    whole = _compose(half, half)
    return _compose(_shift_columns(1), whole) if length % 2 else whole


@lru_cache(maxsize=64)
def _shift_tables(length: int) -> np.ndarray:
    """(4, 256) tables: shift(register) = ⊕_k tables[k][byte k of register]."""
    columns = _shift_columns(length)
    tables = np.zeros((4, 256), dtype=np.uint32)
    for k in range(4):
        for value in range(256):
            tables[k, value] = _apply(columns, value << (8 * k))
    return tables


def _shift(registers: np.ndarray, length: int) -> np.ndarray:
    tables = _shift_tables(length)
    return (tables[0][registers & 0xFF] ^ tables[1][(registers >> 8) & 0xFF]
            ^ tables[2][(registers >> 16) & 0xFF] ^ tables[3][registers >> 24])


def _raw_chunks(data: np.ndarray, width: int) -> int:
    """The raw (zero-start) CRC of ``data``, whose length is a multiple of ``width``."""
    rows = data.reshape(-1, width)
    registers = np.zeros(rows.shape[0], dtype=np.uint32)
    index = np.empty(rows.shape[0], dtype=np.uint32)
    for column in range(width):
        np.bitwise_xor(registers, rows[:, column], out=index)
        np.bitwise_and(index, 0xFF, out=index)
        registers >>= 8
        registers ^= _TABLE[index]
    length = width
    while registers.shape[0] > 1:
        if registers.shape[0] % 2:  # a zero chunk in front changes nothing in a raw CRC
            registers = np.concatenate([np.zeros(1, dtype=np.uint32), registers])
        registers = _shift(registers[0::2], length) ^ registers[1::2]
        length *= 2
    return int(registers[0])


def crc32c(data: bytes | bytearray | memoryview | np.ndarray, value: int = 0) -> int:
    """CRC-32C of ``data``, continuing from ``value`` (the CRC of what came before)."""
    view = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else None
    array = (np.frombuffer(view, dtype=np.uint8) if view is not None
             else np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    size = array.shape[0]
    register = value ^ 0xFFFFFFFF
    if size < 4096:
        return _raw_bytes(register, array.tobytes()) ^ 0xFFFFFFFF
    # A power of two, so the merge tables (for width·2^k bytes) serve every size.
    width = 1 << max(4, (size // _CHUNKS - 1).bit_length())
    body = size - size % width
    raw = _raw_chunks(array[:body], width)
    register = _apply(_shift_columns(body), register) ^ raw  # one register: no table
    return _raw_bytes(register, array[body:].tobytes()) ^ 0xFFFFFFFF


def mask(crc: int) -> int:
    """LevelDB's masked CRC, stored so that a CRC of data holding CRCs stays strong."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + _MASK_DELTA) & 0xFFFFFFFF


def unmask(masked: int) -> int:
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF
