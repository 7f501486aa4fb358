"""The per-step product in blocks of columns (OpenBLAS's small-matrix kernels) computes the
same network as one product of all the columns, for every cell and option, with lengths,
in threads and in the helper process."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

from rnnport import RNN, Spec, runtime

SPECS = {
    "LSTM": Spec("lstm", 6, 12, num_layers=2, bidirectional=True),
    "LSTM peepholes, projection": Spec("lstm", 6, 12, num_layers=2, peepholes=True,
                                       proj_size=5),
    "LSTM layer norm, clips": Spec("lstm", 6, 12, layer_norm=True, cell_clip=0.5),
    "GRU reset after": Spec("gru", 6, 12, num_layers=2, bidirectional=True),
    "GRU reset before": Spec("gru", 6, 12, num_layers=2, reset_after=False),
    "GRU no bias": Spec("gru", 6, 12, bias=False),
}


def _forward(net: RNN, x: np.ndarray, **options: object) -> np.ndarray:
    return net.forward(x, **options)[0]  # type: ignore[arg-type]


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Products of 12 units in blocks of 4 columns; the widths chosen are recorded."""
    monkeypatch.setattr(runtime, "CHUNK_MIN_WIDTH", 1)
    monkeypatch.setattr(runtime, "SMALL_PRODUCT", 4 * 12 * 4)  # rows·depth·4 at 4 rows
    chosen: list[int] = []

    def recorded(width: Callable[[int, int, int], int | None]
                 ) -> Callable[[int, int, int], int | None]:
        def chose(hidden: int, rows: int, depth: int) -> int | None:
            chosen.append(width(hidden, rows, depth) or 0)
            return chosen[-1] or None
        return chose

    # Sequence-major steps' blocks of columns, unit-major steps' blocks of rows of Rᵀ.
    for name in ("_chunk_width", "_unit_width"):
        monkeypatch.setattr(runtime, name, recorded(getattr(runtime, name)))
    return chosen


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(SPECS))
def test_blocks_compute_the_same_network(blocks: list[int], monkeypatch: pytest.MonkeyPatch,
                                         name: str, dtype: type) -> None:
    net = RNN.random(SPECS[name], seed=11, dtype=dtype)
    x = np.random.default_rng(12).standard_normal((4, 9, 6)).astype(dtype)
    lengths = np.array([9, 6, 6, 1])
    in_blocks = [_forward(net, x, threads=1), _forward(net, x, lengths=lengths, threads=1)]
    assert blocks and all(0 < width < 12 and 12 % width == 0 for width in blocks)
    monkeypatch.setattr(runtime, "CHUNK_MIN_ROWS", 1 << 30)  # one product of all columns
    whole = [_forward(net, x, threads=1), _forward(net, x, lengths=lengths, threads=1)]
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for got, expected in zip(in_blocks, whole, strict=True):
        np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)


def test_blocks_give_the_same_bits_in_threads_and_alone(blocks: list[int],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "CONCURRENT_MIN_STEP_WORK", 0)
    monkeypatch.setattr(runtime, "HELPER_MIN_WORK", 1 << 62)  # threads, not the helper
    net = RNN.random(SPECS["LSTM"], seed=13)
    x = np.random.default_rng(14).standard_normal((4, 9, 6)).astype(np.float32)
    np.testing.assert_array_equal(_forward(net, x, threads=2), _forward(net, x, threads=1))
    assert blocks


@pytest.mark.parametrize(("hidden", "rows", "depth", "expected"), [
    (320, 16, 320, 160),   # 16·320·160 = 819,200 multiply-adds
    (512, 16, 512, 64),    # 128 and 256 would pass 1,000,000
    (128, 16, 128, 128),   # the whole gate fits
    (320, 1, 320, None),   # a matrix-vector product: whole
    (320, 3, 320, None),
    (97, 16, 97, 97),      # a prime: a block per gate
    (320, 512, 320, None),  # no block of 32 columns fits
])
def test_the_block_width(hidden: int, rows: int, depth: int, expected: int | None) -> None:
    assert runtime._chunk_width(hidden, rows, depth) == expected


@pytest.mark.parametrize(("hidden", "rows", "depth", "expected"), [
    (512, 16, 512, 122),   # 122·16·512 = 999,424 multiply-adds
    (320, 16, 320, 195),
    (128, 16, 128, 128),   # at most the units
    (320, 3, 320, None),   # below four sequences: whole
    (2048, 16, 2048, None),  # no block of 32 rows fits
])
def test_the_unit_major_block_width(hidden: int, rows: int, depth: int,
                                    expected: int | None) -> None:
    assert runtime._unit_width(hidden, rows, depth) == expected


@pytest.mark.parametrize(("hidden", "gates", "widest", "widths"), [
    (512, 3, 122, [96, 96, 64] * 6),   # each half of each gate: 256 rows in 3 blocks
    (320, 4, 195, [160] * 8),
    (64, 3, 48, [32] * 6),
    (100, 4, 30, [25, 25] * 8),        # 50 rows a half: two blocks of 25 (32 > 30)
    (97, 3, 40, [33, 33, 31] * 3),     # odd: the gate's units in one span
    (128, 4, 200, [128] * 4),          # a gate fits: a block a gate
    (64, 4, 256, [256]),               # everything at once
])
def test_unit_major_blocks_tile_each_half_of_each_gate(hidden: int, gates: int, widest: int,
                                                       widths: list[int]) -> None:
    cuts = runtime._unit_blocks(hidden, gates, widest)
    assert [cut.stop - cut.start for cut in cuts] == widths
    assert cuts[0].start == 0 and cuts[-1].stop == gates * hidden
    assert all(a.stop == b.start for a, b in itertools.pairwise(cuts))
    assert all(cut.stop - cut.start <= widest for cut in cuts)
    if hidden % 2 == 0 and widest < hidden:  # no block crosses a half of a gate's units
        half = hidden // 2
        assert all(cut.start // half == (cut.stop - 1) // half for cut in cuts)


def test_unit_major_blocks_are_made_once_whatever_the_batch() -> None:
    """The blocks of Rᵀ are kept per set of blocks, not per width: the widths of many batch
    sizes give the same blocks, which are made (and held in memory) once."""
    layer = runtime._prepared(RNN.random(Spec("gru", 8, 512)))[0]
    made = {batch: runtime._Units(layer, batch, np.dtype(np.float32)).weights[0]
            for batch in range(4, 62)}
    distinct = {tuple((rows.start, rows.stop) for rows, _ in blocks) for blocks in made.values()}
    assert len(layer.unit_blocked) == len(distinct) <= 12
    same = [blocks for blocks in made.values() if len(blocks) == len(made[16])
            and all(a[0] == b[0] for a, b in zip(blocks, made[16], strict=True))]
    assert len(same) > 1 and all(b[1] is a[1] for blocks in same
                                 for a, b in zip(made[16], blocks, strict=True))
