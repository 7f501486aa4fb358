"""Hostile TF1 checkpoints: small files built to exhaust memory or time, or to reach NumPy
with a shape it refuses. Each is an rnnport error, raised before the work is done.

The files are built here byte by byte (with the writer's own helpers, CRCs kept right), so
each test holds exactly one thing wrong.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport.errors import FormatError
from rnnport.formats import tf1
from rnnport.io import _proto, tensorbundle
from rnnport.io.crc32c import crc32c, mask

FLOAT, STRING, BFLOAT16 = 1, 7, 14  # TensorFlow DataType codes
EMPTY_CRC = mask(crc32c(b""))


def _refused(call: Callable[[], Any]) -> tuple[str, int]:
    """The FormatError ``call`` raises, and the bytes allocated at its peak meanwhile."""
    tracemalloc.start()
    try:
        with pytest.raises(FormatError) as caught:
            call()
        return str(caught.value), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _header() -> bytes:
    """A BundleHeaderProto: one shard, little-endian, version 1."""
    return (_proto.key(1, 0) + _proto.varint(1) + _proto.key(3, 2) + _proto.varint(2)
            + _proto.key(1, 0) + _proto.varint(1))


def _checkpoint(prefix: Path, data: bytes,
                entries: list[tuple[str, int, tuple[int, ...], int, int, int]]) -> Path:
    """A one-shard checkpoint whose index lists ``entries`` as given: (name, dtype code,
    shape, offset, size, masked CRC), however they relate to ``data``."""
    rows = [(name.encode(), tensorbundle._entry_proto(code, shape, offset, size, crc))
            for name, code, shape, offset, size, crc in sorted(entries)]
    Path(f"{prefix}.index").write_bytes(tensorbundle._index(rows))
    Path(f"{prefix}.data-00000-of-00001").write_bytes(data)
    return prefix


def _table(prefix: Path, data_block: bytes, handles: list[tuple[int, int]]) -> None:
    """An index of one data block (``data_block``, with its trailer) and an index block
    listing ``handles`` (offset, size) as its data blocks."""
    meta = tensorbundle._with_trailer(tensorbundle._block([], 1))
    index = tensorbundle._with_trailer(tensorbundle._block(
        [(f"k{number:06d}".encode(), tensorbundle._handle(*handle))
         for number, handle in enumerate(handles)], 16))
    trailer = tensorbundle._TRAILER
    footer = (tensorbundle._handle(len(data_block), len(meta) - trailer)
              + tensorbundle._handle(len(data_block) + len(meta), len(index) - trailer))
    footer = footer.ljust(tensorbundle._FOOTER - 8, b"\0") + tensorbundle._MAGIC.to_bytes(8, "little")
    Path(f"{prefix}.index").write_bytes(data_block + meta + index + footer)


# -- 1. a layer number far past the layers held ---------------------------------------------


@pytest.mark.parametrize("layer", ["99999999", "99999999999"])
def test_a_stray_layer_number_is_bounded_by_the_variables_held(tmp_path: Path,
                                                                layer: str) -> None:
    # A 600-byte checkpoint whose second cell claims to be layer 10⁸ (or 10¹¹): neither
    # listing the networks nor reading may loop to it or size anything by it.
    arrays = {f"rnn/multi_rnn_cell/cell_{k}/lstm_cell/{name}": np.ones(shape, np.float32)
              for k in ("0", layer) for name, shape in (("kernel", (3, 8)), ("bias", (8,)))}
    prefix = tmp_path / "m.ckpt"
    tensorbundle.write_bundle(prefix, arrays)
    expected = (f"names layer {int(layer)}, but only 4 cell variables are held in all"
                if len(layer) <= 9 else "no network has that many layers")
    for call in (lambda: tf1.networks(str(prefix)), lambda: rnnport.read(prefix, fmt="tf1"),
                 lambda: tf1.notes(str(prefix)), lambda: rnnport.read(arrays, fmt="tf1")):
        message, peak = _refused(call)
        assert expected in message
        assert peak < 1 << 20


def test_a_small_gap_in_the_layers_is_still_named_as_missing(tmp_path: Path) -> None:
    arrays = {f"rnn/multi_rnn_cell/cell_{k}/lstm_cell/{name}": np.ones(shape, np.float32)
              for k in (0, 2) for name, shape in (("kernel", (3, 8)), ("bias", (8,)))}
    tensorbundle.write_bundle(tmp_path / "m.ckpt", arrays)
    assert tf1.networks(str(tmp_path / "m.ckpt"))[0]["layers"] == 3
    with pytest.raises(FormatError, match=r"lacks layer 1; the checkpoint is incomplete"):
        rnnport.read(tmp_path / "m.ckpt", fmt="tf1")


# -- 2. index entries pointing at one data block again and again ------------------------------


def test_a_data_block_listed_again_is_refused_before_it_is_parsed_again(tmp_path: Path) -> None:
    # 200 tensors in one data block, listed 300 times by the index block: reading each
    # listing would parse and checksum the block 300 times (a 1.3 MB index of 50,000
    # listings does not finish).
    raw = np.zeros(1, np.float32).tobytes()
    rows = [(b"", _header())] + [
        (f"v{n:04d}".encode(), tensorbundle._entry_proto(FLOAT, (1,), 4 * n, 4, mask(crc32c(raw))))
        for n in range(200)]
    block = tensorbundle._with_trailer(tensorbundle._block(rows, 16))
    prefix = tmp_path / "m.ckpt"
    _table(prefix, block, [(0, len(block) - tensorbundle._TRAILER)] * 300)
    Path(f"{prefix}.data-00000-of-00001").write_bytes(raw * 200)
    start = time.perf_counter()
    with pytest.raises(FormatError, match=r"m\.ckpt\.index: index entry 1 points at bytes 0\.\."
                                          r".*expected each data block after the previous one"):
        tensorbundle.Bundle(prefix)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("keys", [[b"b", b"a"], [b"a", b"a"]], ids=["descending", "repeated"])
def test_keys_out_of_order_are_refused(tmp_path: Path, keys: list[bytes]) -> None:
    # A repeated name would silently shadow the first; TensorFlow writes each key once, in order.
    raw = np.zeros(1, np.float32).tobytes()
    rows = [(b"", _header())] + [
        (key, tensorbundle._entry_proto(FLOAT, (1,), 0, 4, mask(crc32c(raw)))) for key in keys]
    block = tensorbundle._with_trailer(tensorbundle._block(rows, 1))
    _table(tmp_path / "m", block, [(0, len(block) - tensorbundle._TRAILER)])
    Path(tmp_path / "m.data-00000-of-00001").write_bytes(raw)
    with pytest.raises(FormatError, match=rf"in data block 0, key '{keys[1].decode()}' follows "
                                          rf"'{keys[0].decode()}'; expected keys in strictly "
                                          "increasing order"):
        tensorbundle.Bundle(tmp_path / "m")


# -- 3. entries sharing the same bytes --------------------------------------------------------


def test_entries_overlapping_in_the_data_shard_are_refused_by_name(tmp_path: Path) -> None:
    # 300 entries over the same 256 KiB (CRCs right), and one past the end of the shard
    # named last, so that reading every tensor would materialise 75 MiB before failing.
    raw = np.arange(1 << 16, dtype=np.float32).tobytes()
    crc = mask(crc32c(raw))
    entries = [(f"v{k:03d}", FLOAT, (1 << 16,), 0, len(raw), crc) for k in range(300)]
    prefix = _checkpoint(tmp_path / "m.ckpt", raw,
                         [*entries, ("zzz", FLOAT, (1 << 16,), 4, len(raw), crc)])
    message, peak = _refused(lambda: tensorbundle.read_bundle(prefix))
    assert peak < 2 << 20
    assert message.startswith(
        f"{prefix}.index: tensors 'v000' (bytes 0..262144) and 'v001' (bytes 0..262144) overlap "
        f"in {prefix}.data-00000-of-00001; expected every tensor's bytes apart")


def test_a_partial_overlap_is_refused_and_empty_or_adjacent_entries_are_not(
        tmp_path: Path) -> None:
    raw = np.arange(4, dtype=np.float32).tobytes()
    crc = mask(crc32c(raw[:8]))
    _checkpoint(tmp_path / "m", raw, [("a", FLOAT, (2,), 0, 8, crc),
                                      ("b", FLOAT, (2,), 4, 8, mask(crc32c(raw[4:12])))])
    with pytest.raises(FormatError, match=r"tensors 'a' \(bytes 0\.\.8\) and 'b' \(bytes "
                                          r"4\.\.12\) overlap"):
        tensorbundle.Bundle(tmp_path / "m")
    # Apart, touching, or empty (TensorFlow gives an empty tensor the offset of the next).
    _checkpoint(tmp_path / "n", raw, [("a", FLOAT, (2,), 0, 8, crc),
                                      ("b", FLOAT, (2,), 8, 8, mask(crc32c(raw[8:]))),
                                      ("c", FLOAT, (0, 3), 8, 0, EMPTY_CRC),
                                      ("d", FLOAT, (0,), 8, 0, EMPTY_CRC)])
    back = tensorbundle.read_bundle(tmp_path / "n")
    np.testing.assert_array_equal(back["b"], [2, 3])
    assert back["c"].shape == (0, 3)


def test_tf1_layers_sharing_one_kernel_are_refused(tmp_path: Path) -> None:
    # A 300-layer MultiRNNCell whose kernels are all the same bytes in the shard.
    kernel = np.arange(5 * 8, dtype=np.float32).reshape(5, 8).tobytes()
    bias = np.zeros(8, np.float32).tobytes()
    data = kernel + bias
    entries = []
    for layer in range(300):
        scope = f"rnn/multi_rnn_cell/cell_{layer}/basic_rnn_cell"
        entries += [(f"{scope}/kernel", FLOAT, (5, 8), 0, len(kernel), mask(crc32c(kernel))),
                    (f"{scope}/bias", FLOAT, (8,), len(kernel), len(bias), mask(crc32c(bias)))]
    prefix = _checkpoint(tmp_path / "m.ckpt", data, entries)
    message, peak = _refused(lambda: rnnport.read(prefix, fmt="tf1"))
    assert "overlap in" in message
    assert peak < 2 << 20


# -- 4. shapes NumPy refuses ----------------------------------------------------------------


@pytest.mark.parametrize(("code", "shape", "size", "message"), [
    (FLOAT, (1,) * 71, 4, r"tensor 't': its shape has 71 dimensions; expected at most 32 "),
    (FLOAT, (1 << 62, 0), 0, r"tensor 't': shape \[4611686018427387904, 0\] spans "
                             r"18,446,744,073,709,551,616 bytes without its zero dimension"),
    (BFLOAT16, (1 << 61, 0), 0, r"shape \[2305843009213693952, 0\] spans "
                                r"9,223,372,036,854,775,808 bytes"),
    (STRING, (1 << 62, 0), 0, r"without its zero dimension\(s\); expected at most "
                              r"9,223,372,036,854,775,807"),
    (FLOAT, (1 << 62,), 4, r"the index gives 4 bytes, but shape \[4611686018427387904\] of "
                           r"float32 needs 18,446,744,073,709,551,616"),
    (STRING, (1000,), 4, r"shape \[1000\] holds 1,000 strings, but the index gives 4 bytes"),
], ids=["rank-71", "huge-empty", "huge-empty-bfloat16", "huge-empty-string", "huge",
        "strings"])
def test_shapes_are_checked_before_any_array_is_made(tmp_path: Path, code: int,
                                                     shape: tuple[int, ...], size: int,
                                                     message: str) -> None:
    data = np.ones(1, np.float32).tobytes()[:size]
    _checkpoint(tmp_path / "m", data, [("t", code, shape, 0, size, mask(crc32c(data)))])
    bundle = tensorbundle.Bundle(tmp_path / "m")
    with pytest.raises(FormatError, match=message):
        bundle.read("t")


def test_more_dimensions_than_tensorflow_allows_are_refused_in_the_index(
        tmp_path: Path) -> None:
    data = np.ones(1, np.float32).tobytes()
    _checkpoint(tmp_path / "m", data, [("t", FLOAT, (1,) * 300, 0, 4, mask(crc32c(data)))])
    with pytest.raises(FormatError, match=r"tensor 't' has 300 dimensions; expected at most "
                                          r"254, as many as TensorFlow allows"):
        tensorbundle.Bundle(tmp_path / "m")


def test_shapes_within_the_bounds_still_read(tmp_path: Path) -> None:
    data = np.arange(2, dtype=np.float32).tobytes()
    _checkpoint(tmp_path / "m", data, [
        ("deep", FLOAT, (1,) * 31 + (2,), 0, 8, mask(crc32c(data))),
        ("wide_empty", FLOAT, (1 << 40, 0), 8, 0, EMPTY_CRC)])
    back = tensorbundle.read_bundle(tmp_path / "m")
    np.testing.assert_array_equal(back["deep"].ravel(), [0, 1])
    assert back["deep"].ndim == 32
    assert back["wide_empty"].shape == (1 << 40, 0)


def test_many_empty_strings_are_charged_as_the_objects_they_become(tmp_path: Path) -> None:
    """A string tensor of a million empty strings is about a megabyte on disk and some
    fifty as Python objects: refused under the default expansion limit, read under a
    raised one."""
    from rnnport import budget

    value = np.empty(1_000_000, dtype=object)
    value[:] = [b""] * value.size
    tensorbundle.write_bundle(tmp_path / "b", {"s": value})
    read = tensorbundle.Bundle._raw
    reads: list[str] = []

    def recorded(self: Any, entry: Any, where: str, checked: bool) -> bytearray:
        reads.append(entry.name)
        return read(self, entry, where, checked)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tensorbundle.Bundle, "_raw", recorded)
        with pytest.raises(rnnport.LimitError, match="expansion") as refused:
            tensorbundle.Bundle(tmp_path / "b").read("s")
    assert "1,000,000 strings" in str(refused.value)
    assert not reads  # refused from the index, before its bytes were read
    with budget.limits(expansion=64):
        assert tensorbundle.Bundle(tmp_path / "b").read("s").shape == (1_000_000,)
