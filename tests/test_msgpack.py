"""The MessagePack reader against the real ``msgpack`` package and Flax's own writer, and
hostile input: every failure is a FormatError, quickly and without large memory."""

from __future__ import annotations

import math
import random
import struct
import sys
import time
import tracemalloc
from typing import Any

import msgpack
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import rnnport
from rnnport.errors import FormatError, LimitError, MissingDependencyError, UnsupportedFeatureError
from rnnport.formats import _msgpack as reader
from rnnport.formats._msgpack import Ext, decode, encode_flax


def _reference(data: bytes) -> Any:
    """What the msgpack package reads, with its ExtType as ours."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False, ext_hook=Ext)


def _same(found: Any, expected: Any) -> bool:
    """Equal values of the same types all the way down (so 1 is not True and not 1.0); ext
    type -1, which msgpack reads as its Timestamp, is the same bytes."""
    if isinstance(expected, msgpack.Timestamp):
        return isinstance(found, Ext) and found.code == -1 and found.data == expected.to_bytes()
    if type(found) is not type(expected):
        return False
    if isinstance(expected, dict):
        return (list(found) == list(expected)
                and all(type(a) is type(b) for a, b in zip(found, expected, strict=True))
                and all(_same(found[key], expected[key]) for key in expected))
    if isinstance(expected, list):
        return len(found) == len(expected) and all(map(_same, found, expected))
    if isinstance(expected, np.ndarray):
        return (found.dtype == expected.dtype and found.shape == expected.shape
                and found.tobytes() == expected.tobytes())
    if isinstance(expected, np.generic):
        return found.dtype == expected.dtype and found.tobytes() == expected.tobytes()
    if isinstance(expected, float) and math.isnan(expected):
        return math.isnan(found)
    return bool(found == expected)


def _pack(value: Any, **options: Any) -> bytes:
    data: bytes = msgpack.packb(value, use_bin_type=True, **options)
    return data


def _flax_ndarray(shape: Any, dtype_name: Any, content: Any, code: int = 1) -> bytes:
    """Flax's ndarray ext, written by hand (so any part of it can be wrong)."""
    return _pack(msgpack.ExtType(code, _pack([shape, dtype_name, content])))


def _raises(data: bytes, *pieces: str, **options: Any) -> str:
    with pytest.raises(FormatError) as caught:
        decode(data, source="t.msgpack", **options)
    message = str(caught.value)
    assert message.startswith("t.msgpack: "), message
    for piece in pieces:
        assert piece in message, message
    return message


# -- every type, against msgpack ------------------------------------------------------------------

_EDGES: list[Any] = [
    None, True, False,
    0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
    -1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63,
    0.0, -0.0, 1.5, 1e300, float("inf"), float("-inf"), float("nan"),
    "", "a", "é" * 15, "x" * 31, "x" * 32, "x" * 255, "x" * 256, "x" * 65535, "x" * 65536,
    b"", b"\x00", b"\xff" * 255, b"\xff" * 256, b"\x01" * 65535, b"\x01" * 65536,
    [], [None] * 15, [None] * 16, list(range(65535)), [0] * 65536,
    {}, {str(i): i for i in range(15)}, {str(i): i for i in range(16)}, {i: None for i in range(65536)},
    {b"k": 1, 2: "v", "s": [b"x"]},
    *[msgpack.ExtType(code, b"\x07" * length) for code, length in
      ((5, 1), (100, 4), (0, 8), (127, 16), (9, 2), (0, 0), (3, 3), (4, 255), (6, 256), (7, 65536))],
]


def test_every_type_and_width_reads_as_msgpack_reads_it() -> None:
    first_bytes = set()
    for value in _EDGES:
        for options in ({}, {"use_single_float": True}):
            try:
                data = _pack(value, **options)
            except OverflowError:  # 1e300 has no float32
                continue
            first_bytes.add(data[0])
            expected = _reference(data)
            assert _same(decode(data, flax=False), expected), (value, data[:8])
    # The edges reach every format msgpack writes: all first bytes but the reserved 0xc1.
    families = [range(0x00, 0x80), range(0xE0, 0x100), range(0x80, 0x90), range(0x90, 0xA0),
                range(0xA0, 0xC0), *(range(byte, byte + 1) for byte in range(0xC0, 0xE0) if byte != 0xC1)]
    missing = [f"{family.start:#x}" for family in families if not first_bytes.intersection(family)]
    assert not missing


def test_encodings_msgpack_never_chooses_read_too() -> None:
    # Wider headers than needed are legal MessagePack.
    cases = {
        b"\xcc\x05": 5, b"\xcd\x00\x05": 5, b"\xcf" + b"\x00" * 7 + b"\x05": 5, b"\xd0\x05": 5,
        b"\xd3" + b"\xff" * 8: -1, b"\xd9\x01a": "a", b"\xdb\x00\x00\x00\x01a": "a",
        b"\xc6\x00\x00\x00\x01a": b"a", b"\xdc\x00\x01\xc0": [None], b"\xdd\x00\x00\x00\x00": [],
        b"\xde\x00\x01\x01\x02": {1: 2}, b"\xdf\x00\x00\x00\x01\xa1k\x90": {"k": []},
        b"\xc7\x01\x05x": Ext(5, b"x"), b"\xc8\x00\x00\x07": Ext(7, b""),
        b"\xc9\x00\x00\x00\x02\xfeab": Ext(-2, b"ab"), b"\xd4\x80\x00": Ext(-128, b"\x00"),
        b"\xca\x3f\xc0\x00\x00": 1.5,
    }
    for data, expected in cases.items():
        assert _same(decode(data), expected), data
        assert _same(_reference(data), expected), data


_SCALARS = (st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
            | st.floats(allow_nan=False) | st.text(max_size=40) | st.binary(max_size=40)
            | st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=20)))
_KEYS = st.text(max_size=8) | st.integers(-2**63, 2**64 - 1) | st.binary(max_size=8)
_TREES = st.recursive(_SCALARS, lambda children: st.lists(children, max_size=6)
                      | st.dictionaries(_KEYS, children, max_size=6), max_leaves=40)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_TREES, st.booleans())
def test_random_trees_read_as_msgpack_reads_them(tree: Any, single_float: bool) -> None:
    try:
        data = _pack(tree, use_single_float=single_float)
    except OverflowError:  # a float beyond float32's range
        assume(False)
    assert _same(decode(data, flax=False), _reference(data))


@settings(max_examples=200, deadline=None)
@given(_TREES, st.data())
def test_damaged_trees_raise_format_error_or_read_as_msgpack_does(tree: Any, draw: Any) -> None:
    data = bytearray(_pack(tree))
    for _ in range(draw.draw(st.integers(1, 3))):
        data[draw.draw(st.integers(0, len(data) - 1))] = draw.draw(st.integers(0, 255))
    try:
        found = decode(bytes(data), flax=False)
    except FormatError:
        return
    try:
        expected = _reference(bytes(data))
    except ValueError as error:  # ext type -1 is msgpack's timestamp, not a plain ext to it
        assume("timestamp" not in str(error))
        raise
    assert _same(found, expected)


# -- Flax's own files ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def flax_serialization() -> Any:
    import flax.serialization

    return flax.serialization


def _numbers(dtype: Any, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    return rng.standard_normal(shape).astype(dtype)


def test_flax_state_dicts_read_as_flax_reads_them(flax_serialization: Any) -> None:
    import ml_dtypes
    rng = np.random.default_rng(5)
    dtypes = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", ml_dtypes.bfloat16]
    state = {
        "params": {f"layer_{i}": {"kernel": _numbers(dtype, (3, 2 + i % 3), rng),
                                  "bias": _numbers(dtype, (2 + i % 3,), rng)}
                   for i, dtype in enumerate(dtypes)},
        "batch_stats": {"empty": np.zeros((0, 4), np.float32), "scalar": np.array(2.5, np.float64),
                        "cube": _numbers("float32", (2, 3, 4), rng)},
        "step": np.int64(12), "lr": np.float32(0.25), "z": 1 - 2j, "name": "lstm", "n": 3,
        "x": 0.5, "flag": True, "none": None, "raw": b"\x00\x01", "layers": [np.ones(2), 7],
    }
    data = flax_serialization.to_bytes(state)
    found = decode(data, source="state.msgpack")
    expected = flax_serialization.msgpack_restore(data)
    assert _same(found, expected)
    kernel = found["params"]["layer_12"]["kernel"]
    assert kernel.dtype == ml_dtypes.bfloat16 and kernel.shape == (3, 2)
    assert type(found["step"]) is np.int64 and type(found["lr"]) is np.float32
    for layer in found["params"].values():
        assert not layer["kernel"].flags.writeable and layer["kernel"].flags.aligned


def test_flax_chunked_arrays_are_put_back_together(flax_serialization: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flax_serialization, "MAX_CHUNK_SIZE", 64)
    rng = np.random.default_rng(9)
    big = rng.standard_normal((10, 7)).astype(np.float32)  # 280 bytes: 5 chunks of 16 floats
    state = {"params": {"big": big, "small": np.arange(4, dtype=np.int32),
                        "deep": {"wide": rng.integers(0, 9, (3, 50)).astype(np.uint8)}}}
    data = flax_serialization.to_bytes(state)
    assert data.count(reader.CHUNKED_ARRAY_KEY.encode()) == 2  # Flax really chunked both
    found = decode(data)
    assert _same(found, flax_serialization.msgpack_restore(data))
    assert np.array_equal(found["params"]["big"], big) and not found["params"]["big"].flags.writeable
    # A chunked array at the top; and inside a list, where Flax leaves the dict alone.
    top = flax_serialization.msgpack_serialize(big)
    assert _same(decode(top), big)
    chunked = decode(top, flax=False)
    assert isinstance(chunked, dict) and len(chunked["chunks"]) == 5
    in_list = _pack([chunked], default=lambda ext: msgpack.ExtType(
        ext.code, ext.data) if isinstance(ext, Ext) else ext)
    assert isinstance(decode(in_list)[0], dict)
    assert _same(decode(in_list), flax_serialization.msgpack_restore(in_list))


def test_encode_flax_writes_what_flax_writes(flax_serialization: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import ml_dtypes
    rng = np.random.default_rng(11)
    dtypes = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
              "float16", "float32", "float64", ml_dtypes.bfloat16]
    tree = {
        "params": {f"cell_{i}": {"kernel": _numbers(dtype, (4, 3), rng), "bias": _numbers(dtype, (3,), rng)}
                   for i, dtype in enumerate(dtypes)},
        "ints": [0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1,
                 -1, -32, -33, -128, -129, -32768, -32769, -2**31, -2**31 - 1, -2**63],
        "texts": ("", "x" * 31, "x" * 32, "é" * 200, "y" * 70000), "raw": [b"", b"\x00" * 300],
        7: {"deep": {"deeper": np.zeros((0, 3), np.float32)}}, "none": None, "yes": True, "x": -0.5,
        "z": 2 + 3j, "step": np.int32(4), "lr": np.float32(0.5), "wide": {str(i): i for i in range(20)},
        "big_ext": np.arange(70000, dtype=np.uint8), "fix": np.arange(2, dtype=np.int64)[:1],
    }
    assert encode_flax(tree) == flax_serialization.to_bytes(tree)
    # Big arrays are chunked as Flax chunks them (a lower limit on both sides here).
    monkeypatch.setattr(flax_serialization, "MAX_CHUNK_SIZE", 64)
    monkeypatch.setattr(reader, "MAX_CHUNK_SIZE", 64)
    chunky: dict[str, Any] = {"w": rng.standard_normal((9, 5)).astype(np.float32),
                              "v": [np.arange(40, dtype=np.int16)]}
    data = encode_flax(chunky)
    assert reader.CHUNKED_ARRAY_KEY.encode() in data and data == flax_serialization.to_bytes(chunky)
    assert _same(decode(data), {"w": chunky["w"], "v": {"0": chunky["v"][0]}})


def test_encode_flax_round_trips_and_refuses_what_decode_cannot_read() -> None:
    tree = {"params": {"kernel": np.arange(12, dtype=">f4").reshape(3, 4), "n": np.uint16(3)}}
    found = decode(encode_flax(tree))
    assert found["params"]["kernel"].dtype == np.dtype("<f4")
    assert np.array_equal(found["params"]["kernel"], tree["params"]["kernel"])
    assert type(found["params"]["n"]) is np.uint16
    cases: list[tuple[Any, str]] = [
        ({"a": {1, 2}}, "a: a set"), ({"a": np.zeros(2, np.complex64)}, "dtype complex64"),
        ({"a": np.array(["s"])}, "dtype <U1"), ({1: 0, "1": 1}, "not distinct"),
        ({"n": 2**64}, "the integer 18446744073709551616"), ({"f": np.float64}, "a type"),
    ]
    for value, piece in cases:
        with pytest.raises(UnsupportedFeatureError, match=piece):
            encode_flax(value)
    nested: Any = 0
    for _ in range(reader.MAX_DEPTH):
        nested = [nested]
    assert decode(encode_flax(nested)) == decode(_pack(_state_dict_of_lists(nested)))
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    for value in ([nested], cycle):
        with pytest.raises(UnsupportedFeatureError, match="nested more than 64 deep"):
            encode_flax(value)


def _state_dict_of_lists(value: Any) -> Any:
    """Flax's state dict of nested lists, the slow obvious way."""
    if isinstance(value, list):
        return {str(i): _state_dict_of_lists(item) for i, item in enumerate(value)}
    return value


def _chunked(**changes: Any) -> bytes:
    piece = msgpack.ExtType(1, _pack([[4], "float32", b"\x00" * 16]))
    value = {reader.CHUNKED_ARRAY_KEY: True, "shape": {"0": 2, "1": 4},
             "chunks": {"0": piece, "1": piece}}
    value.update(changes)
    return _pack({"w": {k: v for k, v in value.items() if v is not ...}})


def test_chunked_arrays_that_do_not_add_up_are_refused() -> None:
    assert decode(_chunked())["w"].shape == (2, 4)
    _raises(_chunked(shape={"0": 3, "1": 4}), "byte 3 (at w)", "12 elements", "got 8")
    _raises(_chunked(shape={"0": 2, "2": 4}), "'shape'", "keyed '0', '1'")
    _raises(_chunked(chunks={}), "without chunks")
    _raises(_chunked(chunks={"0": 1, "1": 2}), "chunk 0 is an int")
    other = msgpack.ExtType(1, _pack([[4], "int32", b"\x00" * 16]))
    _raises(_chunked(chunks={"0": msgpack.ExtType(1, _pack([[4], "float32", b"\x00" * 16])),
                             "1": other}), "chunk 1", "int32", "one dtype")
    flat = msgpack.ExtType(1, _pack([[2, 2], "float32", b"\x00" * 16]))
    _raises(_chunked(chunks={"0": flat, "1": flat}), "chunk 0", "shape [2, 2]")
    _raises(_chunked(extra=1), "'extra'")
    _raises(_chunked(shape=...), "expected exactly")
    _raises(_chunked(**{reader.CHUNKED_ARRAY_KEY: 1}), "marker 1")


# -- Flax's ext types, written wrong ----------------------------------------------------------------

def test_an_ndarray_whose_bytes_disagree_with_its_shape_is_refused() -> None:
    message = _raises(_pack({"kernel": msgpack.ExtType(1, _pack([[2, 3], "float32", b"\x00" * 20]))}),
                      "needs 24 bytes")
    assert message == ("t.msgpack: byte 11 (at kernel) (in the payload of the ndarray ext at byte 8): "
                       "an ndarray of shape [2, 3] and dtype float32 needs 24 bytes; expected exactly "
                       "that many, got 20, so the data is damaged.")
    _raises(_flax_ndarray([2, 3], "float32", b"\x00" * 28), "got 28")
    assert decode(_flax_ndarray([2, 3], "float32", b"\x00" * 24)).shape == (2, 3)


@pytest.mark.parametrize("name", ["complex64", "object", "float8_e4m3fn", "S4", "<f4", "", "int4"])
def test_dtypes_that_are_not_plain_numbers_are_refused(name: str) -> None:
    _raises(_flax_ndarray([1], name, b"\x00" * 8), f"dtype {name!r}", "expected one of bool, int8")


def test_other_malformed_flax_ext_payloads_are_refused() -> None:
    _raises(_flax_ndarray([-1], "int8", b""), "ints of at least 0")
    _raises(_flax_ndarray([True], "int8", b"\x00"), "ints of at least 0")
    _raises(_flax_ndarray([1] * 33, "int8", b"\x00"), "33 dimensions")
    _raises(_flax_ndarray([0, 2**40, 2**40], "int8", b""), "below 2**59")
    assert decode(_flax_ndarray([0, 2**20, 2**20], "int8", b"")).shape == (0, 2**20, 2**20)
    _raises(_flax_ndarray([1], 7, b"\x00"), "dtype name of type int")
    _raises(_flax_ndarray([1], "int8", [0]), "contents of type list")
    _raises(_pack(msgpack.ExtType(1, _pack([[1], "int8"]))), "a list of 2 objects")
    _raises(_pack(msgpack.ExtType(1, _pack([[1], "int8", b"\x00"]) + b"\x00")), "1 more byte follows")
    _raises(_pack(msgpack.ExtType(1, b"\xdd\xff\xff\xff\xff")), "4,294,967,295 elements")
    _raises(_flax_ndarray([2], "bool", b"\x01\x02"), "other than 0 and 1")
    assert decode(_flax_ndarray([2], "bool", b"\x01\x00")).tolist() == [True, False]
    _raises(_flax_ndarray([1], "float32", b"\x00" * 4, code=3), "NumPy scalar of shape [1]")
    assert type(decode(_flax_ndarray([], "float32", b"\x00" * 4, code=3))) is np.float32
    _raises(_pack(msgpack.ExtType(2, _pack([1.0]))), "[real, imaginary]")
    _raises(_pack(msgpack.ExtType(2, _pack([1.0, "x"]))), "[real, imaginary]")
    assert decode(_pack(msgpack.ExtType(2, _pack([1.0, 2])))) == 1 + 2j
    # Without Flax's meaning the same bytes are plain ext objects.
    assert decode(_flax_ndarray([9], "nonsense", b""), flax=False) == Ext(1, _pack([[9], "nonsense", b""]))


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _flax_ndarray([2], "bfloat16", b"\x80\x3f\x00\x40")
    import ml_dtypes  # noqa: F401  bfloat16 needs it
    assert decode(data).astype(np.float32).tolist() == [1.0, 2.0]
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    with pytest.raises(MissingDependencyError, match="pip install ml_dtypes"):
        decode(data)


def test_arrays_are_read_only_copies_of_the_input() -> None:
    data = bytearray(_flax_ndarray([3], "int32", struct.pack("<3i", 1, 2, 3)))
    array = decode(data)
    data[-4:] = b"\xff" * 4
    assert array.tolist() == [1, 2, 3] and not array.flags.writeable
    with pytest.raises(ValueError):
        array[0] = 5


def test_decoded_array_bytes_are_limited_by_the_input_size(monkeypatch: pytest.MonkeyPatch) -> None:
    data = _pack({"a": msgpack.ExtType(1, _pack([[40], "uint8", b"\x00" * 40])),
                  "b": msgpack.ExtType(1, _pack([[40], "uint8", b"\x00" * 40]))})
    decode(data)
    monkeypatch.setattr(reader, "ARRAY_BYTES_PER_INPUT_BYTE", 0.5)  # limit: len(data) // 2
    _raises(data, "at b", "come to 80 bytes", f"at most {len(data) // 2}")


# -- hostile input ------------------------------------------------------------------------------

def _sample() -> bytes:
    inner = _pack([[2, 2], "float32", struct.pack("<4f", 1, 2, 3, 4)])
    return _pack({"params": {"kernel": msgpack.ExtType(1, inner), "name": "cell", "n": -300,
                             "list": [1.5, None, True, b"\x00\x01", {"k": 2**40}]},
                  "step": msgpack.ExtType(3, _pack([[], "int64", b"\x05" + b"\x00" * 7])),
                  "c": msgpack.ExtType(2, _pack([1.0, -1.0]))})


def test_truncated_at_every_byte() -> None:
    sample = _sample()
    assert decode(sample)["params"]["kernel"].tolist() == [[1, 2], [3, 4]]
    for end in range(len(sample)):
        _raises(sample[:end], "truncated")


def test_random_damage_raises_only_format_errors_quickly() -> None:
    sample = _sample()
    rng = random.Random(3)
    started = time.monotonic()
    outcomes = set()
    for _ in range(3000):
        data = bytearray(sample)
        for _ in range(rng.randint(1, 3)):
            position = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[position] ^= 1 << rng.randrange(8)
            else:
                data[position:position + 4] = rng.choice([b"\xff\xff\xff\xff", b"\xdd\xff\xff\xff",
                                                          b"\xdf\x7f\xff\xff", b"\xc1"])
        try:
            decode(bytes(data))
            outcomes.add("read")
        except FormatError:
            outcomes.add("refused")
    assert outcomes == {"read", "refused"}
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("header", [b"\xdd", b"\xdf", b"\xdb", b"\xc6", b"\xc9"])
def test_lengths_claiming_two_to_the_32_cost_nothing(header: bytes) -> None:
    data = header + b"\xff\xff\xff\xff" + b"\x01" * 64
    tracemalloc.start()
    try:
        _raises(data, "byte 0", "4,294,967,29", "truncated or damaged")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_counts_are_checked_against_what_open_containers_still_owe() -> None:
    # The first of 15 elements claims 65,535 more: that fits the bytes left on its own, but
    # not with the 14 elements after it.
    message = _raises(b"\x9f\xdc\xff\xff" + b"\xc0" * (65535 + 13),
                      "byte 1 (at [0])", "an array16 declaring 65,535 elements")
    assert "65,548 bytes are left, 14 of them owed" in message
    assert decode(b"\x9f\xdc\xff\xff" + b"\xc0" * (65535 + 14)) == [[None] * 65535] + [None] * 14
    assert decode(b"\x92" + b"\xdc\x00\x02\xc0\xc0" * 2) == [[None, None]] * 2
    _raises(b"\x92\xa3abc", "byte 5", "the input ends here", "owe 1")


@pytest.mark.parametrize("empty", [b"\x80", b"\xa0", b"\xca\0\0\0\0"],
                         ids=["maps", "strings", "floats"])
def test_a_million_small_objects_stop_at_the_expansion_limit(empty: bytes) -> None:
    """A million empty maps are 1 MB of input and 72 MB as dicts in a list: refused once what
    they take passes 4 × (the input + 4 MiB), before it is built."""
    count = 1_000_000
    data = b"\xdd" + count.to_bytes(4, "big") + empty * count
    with pytest.raises(LimitError) as error:
        decode(data, source="many.msgpack")
    assert error.value.limit == "expansion"
    assert str(error.value).startswith("many.msgpack: its objects would take more than ")
    few = b"\xdd" + (50_000).to_bytes(4, "big") + empty * 50_000
    assert len(decode(few)) == 50_000  # within the limit
    with rnnport.limits(expansion=1e-3), pytest.raises(LimitError):
        decode(few)


def test_a_hundred_thousand_levels_of_nesting_raise_format_error() -> None:
    for opening in (b"\x91", b"\x81\xa1k", b"\xdc\x00\x01", b"\x81\x00"):
        data = opening * 100_000 + b"\xc0"
        try:
            message = _raises(data, "nested more than 64 deep", f"byte {64 * len(opening):,}")
        except RecursionError:  # pragma: no cover - the failure this test is for
            pytest.fail("RecursionError")
        assert len(message) < 400
    deepest = b"\x91" * reader.MAX_DEPTH + b"\xc0"
    assert _same(decode(deepest), _reference(deepest))
    inside_ext = _pack(msgpack.ExtType(1, b"\x91" * 100_000 + b"\xc0"))
    _raises(inside_ext, "nested more than 64 deep", "ndarray ext at byte 0")


def test_duplicate_keys_are_refused() -> None:
    _raises(b"\x82\xa1a\x01\xa1a\x02", "byte 4", "the key 'a' a second time in the map at byte 0")
    _raises(_pack({"p": [1, {}]})[:-1] + b"\x82\x05\xc0\x05\xc0", "at p[1]", "the key 5 a second time")
    assert decode(b"\x82\xa1a\x01\xc4\x01a\x02") == {"a": 1, b"a": 2}  # str and bytes differ


@pytest.mark.parametrize(("key", "kind"), [(b"\xc0", "NoneType"), (b"\xc3", "bool"),
                                           (b"\xcb" + b"\x00" * 8, "float"), (b"\x90", "list"),
                                           (b"\x80", "dict"), (b"\xd4\x05\x00", "Ext")])
def test_keys_other_than_str_int_bytes_are_refused(key: bytes, kind: str) -> None:
    _raises(b"\x81" + key + b"\x01", f"a map key of type {kind}")


def test_trailing_bytes_are_refused() -> None:
    sample = _sample()
    _raises(sample + b"\xc0", f"byte {len(sample):,}", "1 more byte follows")
    _raises(b"\xc0\xc0\xc0", "byte 1", "2 more bytes follow")


def test_reserved_byte_bad_utf8_and_wrong_input_types_are_refused() -> None:
    _raises(b"\x91\xc1", "byte 1 (at [0])", "0xc1", "reserves")
    _raises(b"\xa2\xc3\x28", "not UTF-8")
    _raises(b"", "byte 0", "the input ends here")
    with pytest.raises(FormatError, match="expected MessagePack as bytes, got str"):
        decode("\x90")  # type: ignore[arg-type]
