"""Copies between memory layouts, at close to memory speed.

A Keras kernel ``(I, G·H)`` is the transpose of cuDNN's ``(G·H, I)`` rows, so converting
one into the other moves every element to a new place. NumPy copies a transposed view
element by element, striding through memory, at a tenth of a plain copy's speed;
:func:`copy_into` cuts the matrix into 64 × 64 tiles and moves whole rows of tiles in
three passes that each read or write contiguous runs, about five times faster, and
large matrices split their rows between threads (NumPy's copies release the GIL).

:func:`writable_view` gives write access to memory that a read-only view came from,
when that memory is one of the caller's own writable arrays: :func:`rnnport.convert`
hands back views of its source instead of copies where the layouts agree.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["copy_into", "writable_view"]

TILE = 64
_MIN_TILED = 1 << 16  # below this many elements a plain strided copy is as fast
_MIN_THREADED = 1 << 20
_THREADS = min(4, os.cpu_count() or 1)
_POOL: list[Any] = []  # one thread pool, made on first use


def copy_into(destination: np.ndarray, source: np.ndarray) -> None:
    """``destination[...] = source``, tiled when ``source`` is a transposed matrix (its
    columns contiguous: a Keras kernel's transpose, or a row block of one) and
    ``destination`` is C-contiguous (the Keras → cuDNN case)."""
    if (source.ndim == 2 and source.size >= _MIN_TILED and destination.flags.c_contiguous
            and source.strides[0] == source.itemsize and source.strides[1] != source.itemsize
            and destination.shape == source.shape):
        _transpose_threaded(destination, source.T)
    else:
        np.copyto(destination, source)


def _transpose_threaded(destination: np.ndarray, rows_source: np.ndarray) -> None:
    rows = destination.shape[0]
    parts = min(_THREADS, rows // TILE) if destination.size >= _MIN_THREADED else 1
    if parts < 2:
        _transpose_into(destination, rows_source)
        return
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(_THREADS, thread_name_prefix="rnnport-copy"))
    bounds = [rows * part // parts // TILE * TILE for part in range(parts)] + [rows]
    jobs = [_POOL[0].submit(_transpose_into, destination[start:stop], rows_source[:, start:stop])
            for start, stop in itertools.pairwise(bounds)]
    for job in jobs:
        job.result()


def _transpose_into(destination: np.ndarray, rows_source: np.ndarray) -> None:
    """``destination (m, n) = rows_source.T`` with ``rows_source (n, m)``'s rows contiguous."""
    m, n = destination.shape
    full = n - n % TILE
    tiles = full // TILE
    buffers: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for start in range(0, m, TILE):
        stop = min(m, start + TILE)
        height = stop - start
        if tiles:
            if height not in buffers:
                buffers[height] = (np.empty((tiles, TILE, height), destination.dtype),
                                   np.empty((tiles, height, TILE), destination.dtype))
            gathered, turned = buffers[height]
            # gathered[c, q, p] = source[c·TILE + q, start + p]: runs of `height` along p
            np.copyto(gathered, rows_source[:full, start:stop].reshape(tiles, TILE, height))
            # turned[c, p, q]: 64 × 64 transposes that stay in the cache
            np.copyto(turned, gathered.transpose(0, 2, 1))
            # destination[start + p, c·TILE + q]: runs of TILE along q
            np.copyto(destination[start:stop, :full].reshape(height, tiles, TILE),
                      turned.transpose(1, 0, 2))
        if full < n:
            np.copyto(destination[start:stop, full:], rows_source[full:, start:stop].T)


def writable_view(array: np.ndarray, owners: Sequence[np.ndarray]) -> np.ndarray | None:
    """A writable view of the memory ``array`` (a view, possibly read-only) looks at, when
    that memory belongs to one of ``owners`` (arrays that own their data) and the owner is
    writable; else None. NumPy points every view straight at the owner, so the owners must
    be named: a read-only view in between would not show."""
    root = array.base
    if not isinstance(root, np.ndarray) or not any(root is owner for owner in owners):
        return None
    if root.base is not None or not root.flags.writeable or not root.flags.c_contiguous:
        return None
    offset = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    return np.ndarray(array.shape, array.dtype, buffer=root, offset=offset,
                      strides=array.strides)
