"""What the terminal and HTML renderings share: colours by gate and kind, and which
rows and columns of an array's table are shown."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..spec import Spec
from .trace import BR, BW, SUM, ZERO, R, TracedArray, W, runs

__all__ = ["ELIDE_ABOVE", "Grid", "ansi", "css", "dark", "elided", "shade", "table_grid"]

GATE_COLORS = {"i": "#1f77b4", "f": "#2ca02c", "g": "#ff7f0e", "o": "#9467bd",
               "r": "#d62728", "z": "#17becf", "n": "#bcbd22", "h": "#1f77b4"}
# Shade per kind: (mix with white, mix with black).
KIND_SHADES = {W: (0.6, 0.0), R: (0.3, 0.0), BW: (0.0, 0.0), BR: (0.0, 0.35), SUM: (0.0, 0.6)}
ELIDE_ABOVE = 8  # sizes above this elide the middle of long runs of similar rows/columns


def hex_rgb(color: str) -> tuple[int, int, int]:
    """``#1f77b4`` → (31, 119, 180)."""
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def shade(gate: str, kind: int) -> tuple[int, int, int]:
    """The colour of an element: its gate's colour, lighter or darker by kind."""
    if kind == ZERO:
        return (235, 235, 235)
    white, black = KIND_SHADES[kind]
    red, green, blue = (round((value + (255 - value) * white) * (1 - black))
                        for value in hex_rgb(GATE_COLORS[gate]))
    return red, green, blue


def dark(color: tuple[int, int, int]) -> bool:
    """Whether white text reads better than black on ``color``."""
    red, green, blue = color
    return 0.299 * red + 0.587 * green + 0.114 * blue < 140


def xterm(color: tuple[int, int, int]) -> int:
    """The nearest colour of the 256-colour terminal palette's 6×6×6 cube."""
    levels = np.array([0, 95, 135, 175, 215, 255])
    index = [int(np.abs(levels - value).argmin()) for value in color]
    return 16 + 36 * index[0] + 6 * index[1] + index[2]


def ansi(text: str, gate: str, kind: int) -> str:
    """``text`` coloured for a terminal."""
    color = shade(gate, kind)
    foreground = 244 if kind == ZERO else (231 if dark(color) else 16)
    style = {R: "4;", BR: "4;", SUM: "1;"}.get(kind, "")  # underlined: recurrent side
    return f"\x1b[{style}48;5;{xterm(color)};38;5;{foreground}m{text}\x1b[0m"


def css(color: tuple[int, int, int]) -> str:
    """``#rrggbb``."""
    return "#{:02x}{:02x}{:02x}".format(*color)


# -- shared table geometry ----------------------------------------------------------------


@dataclass
class Grid:
    """What a table shows: indices of the 2-D view (None: an elided stretch)."""

    rows: list[int | None]
    cols: list[int | None]
    row_groups: list[int]  # group number per shown row (None rows share the neighbour's)
    col_groups: list[int]
    labels: dict[tuple[int, int], tuple[str, int, str, str]]  # label, kind, gate letter, title


def elided(spec: Spec) -> bool:
    """Whether tables of a network of ``spec`` elide long runs."""
    return max(spec.input_size, spec.hidden_size) > ELIDE_ABOVE


def table_grid(array: TracedArray, elide: bool) -> Grid:
    """The rows and columns of ``array``'s table, grouped where kind or gate changes; with
    ``elide``, long runs keep their first two and last lines."""
    kinds, gates, _, _ = array.view_parts()
    first, second = array.view(array.first), array.view(array.second)
    book = array.book

    def shown(keys: list[bytes]) -> tuple[list[int | None], list[int]]:
        indices: list[int | None] = []
        groups: list[int] = []
        for group, (start, stop) in enumerate(runs(keys)):
            run: list[int | None] = list(range(start, stop))
            if elide and stop - start > ELIDE_ABOVE:
                run = [start, start + 1, None, stop - 1]
            indices.extend(run)
            groups.extend([group] * len(run))
        return indices, groups

    rows, row_groups = shown([kinds[i].tobytes() + gates[i].tobytes()
                              for i in range(kinds.shape[0])])
    cols, col_groups = shown([kinds[:, j].tobytes() + gates[:, j].tobytes()
                              for j in range(kinds.shape[1])])
    labels = {}
    for row in rows:
        for col in cols:
            if row is None or col is None:
                continue
            f, s = int(first[row, col]), int(second[row, col])
            kind = int(kinds[row, col])
            letter = book.letters[gates[row, col]] if kind != ZERO else ""
            title = book.describe(f, s)
            if array.offset is not None:
                title += f"; buffer offset {array.offset + row * kinds.shape[1] + col}"
            labels[(row, col)] = (book.label(f, s), kind, letter, title)
    return Grid(rows, cols, row_groups, col_groups, labels)
