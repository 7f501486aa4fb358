"""``explain`` for a terminal: the legend, every array's table, the rules and the counts,
in plain text or with ANSI colours."""

from __future__ import annotations

from ..gates import CANONICAL, gate_family
from .blocks import block_text, gate_text
from .layout import BufferMap, Layout
from .style import ansi, elided, table_grid
from .trace import BR, BW, KIND_TAGS, SUM, R, TracedArray, W

__all__ = ["WIDTH", "render_buffer", "render_origins", "render_text"]

WIDTH = 120


def render_text(layout: Layout, color: bool, width: int = WIDTH) -> str:
    """The whole explanation as text; ANSI colours when ``color``."""
    spec = layout.spec
    letters = CANONICAL[gate_family(spec.cell)]
    lines = [f"rnnport explain — {layout.title}", ""]
    if layout.scope:
        lines += [layout.scope, ""]
    lines += _legend_text(layout, letters, color)
    for heading, fmt, arrays in (("SOURCE", layout.source, layout.source_arrays),
                                 ("TARGET", layout.target, layout.target_arrays)):
        total = sum(array.size for array in arrays)
        flat = " — one 1-D buffer, segments in buffer order" if any(
            a.offset is not None for a in arrays) else ""
        part = "layer 0, forward: " if layout.network is not None else ""
        lines += [f"{heading}: {fmt} ({part}{total} parameters){flat}", ""]
        for array in arrays:
            lines.append(f"  {array.heading()}")
            lines += [f"    {note}" for note in array.notes]
            lines += _table_text(array, color, width, elided(layout.spec))
            lines.append("")
    for buffer in layout.buffers:
        lines += render_buffer(layout, buffer)
    lines += [f"RULES: {layout.source} → {layout.target} (what rnnport.convert does)"]
    lines += [f"  {number}. {rule}" for number, rule in enumerate(layout.rules, 1)]
    scope = " — layer 0, forward direction" if layout.network else ""
    lines += ["", f"PARAMETER COUNTS (rnnport.param_count){scope}"]
    for count in layout.counts:
        lines.append(f"  {count.fmt}: {count.total} = {count.formula}  ({count.detail})")
    canonical = spec.num_params()
    lines.append(f"  canonical model (both biases): {canonical} = G·H·(I + H + 2)")
    if layout.network_counts:
        lines.append(f"  the whole {layout.whole.describe()}:")
        lines += [f"    {fmt}: {total}" for fmt, total in layout.network_counts]
        lines.append(f"    canonical model (both biases): {layout.whole.num_params()}")
    return "\n".join(lines) + "\n"


BLOCK_HEAD = ("offsets", "size", "layer", "direction", "block", "gates (first offset)")


def render_buffer(layout: Layout, buffer: BufferMap) -> list[str]:
    """One flat buffer's block map: every block of the whole network, in buffer order."""
    rows = [BLOCK_HEAD] + [(f"[{block.start}, {block.stop})", str(block.size), *block_text(block),
                            gate_text(block)) for block in buffer.blocks]
    widths = [max(len(row[column]) for row in rows) for column in range(len(BLOCK_HEAD) - 1)]
    lines = [f"BUFFER BLOCKS: {buffer.fmt}, the whole {layout.whole.describe()} — one buffer of "
             f"{buffer.size} elements: {buffer.summary} (each block found where the writer put "
             "its elements)", ""]
    for row in rows:
        cells = [f"{row[0]:<{widths[0]}}", f"{row[1]:>{widths[1]}}",
                 *(f"{text:<{width}}" for text, width in zip(row[2:-1], widths[2:], strict=True))]
        lines.append(("  " + "  ".join(cells) + "  " + row[-1]).rstrip())
    return [*lines, ""]


def _legend_text(layout: Layout, letters: str, color: bool) -> list[str]:
    g = letters[0]  # the examples name the cell's first gate
    lines = ["LEGEND: each cell names the canonical parameter it holds",
             f"  W{g}[u,c]  input weight W_{g} (H×I): gate {g}, unit u (row), input c (column)",
             f"  R{g}[u,c]  recurrent weight R_{g} (H×H): gate {g}, unit u, h column c",
             f"  bW{g}[u]   input-side bias    bR{g}[u]  recurrent-side bias",
             f"  b{g}[u]    one stored bias = bW{g}[u] + bR{g}[u]    zero  a slot holding zeros",
             "  colour = gate; shade = kind (W light, R medium, bW full, bR dark, b darkest);"
             " underlined = recurrent side"]
    names = {letter: layout.gate_names[letter] for letter in letters}
    name_width = max(len(name) for name in names.values())
    for letter in letters:
        name = names[letter]
        samples = [f"{KIND_TAGS[kind]}{letter}[{'u,c' if kind in (W, R) else 'u'}]"
                   for kind in (W, R, BW, BR, SUM)]
        cells = [(ansi(f" {s} ", letter, kind) if color else f" {s} ")
                 for s, kind in zip(samples, (W, R, BW, BR, SUM), strict=True)]
        lines.append(f"  {letter}  {name:<{name_width}}  " + " ".join(cells))
    lines.append("")
    return lines


def _table_text(array: TracedArray, color: bool, width: int, elide: bool) -> list[str]:
    """Cells are `` label `` blocks side by side; ``│`` and ``─`` mark where the kind or gate
    of whole columns / rows changes. Wide tables continue below in chunks of whole groups."""
    grid = table_grid(array, elide)
    cell = max([len(label) for label, *_ in grid.labels.values()] +
               [len(str(col)) for col in grid.cols if col is not None] + [1]) + 2
    headers = {row: array.row_header(row) for row in grid.rows if row is not None}
    indent = " " * 4 + " " * max([len(h) for h in headers.values()] + [1]) + " "
    room = width - len(indent)
    chunks: list[list[int]] = [[]]
    used = 0
    for group in dict.fromkeys(grid.col_groups):
        positions = [p for p, g in enumerate(grid.col_groups) if g == group]
        if chunks[-1] and used + 1 + len(positions) * cell > room:
            chunks.append([])
            used = 0
        used += 1 if chunks[-1] else 0
        for position in positions:
            size = cell if grid.cols[position] is not None else 2
            if chunks[-1] and used + size > room:
                chunks.append([])
                used = 0
            chunks[-1].append(position)
            used += size
    lines = []
    for chunk in chunks:
        def boundary(index: int, chunk: list[int] = chunk) -> str:
            if index == 0 or grid.col_groups[chunk[index]] == grid.col_groups[chunk[index - 1]]:
                return ""
            return "│"

        head = indent + "".join(boundary(i) + (" …" if grid.cols[p] is None else
                                                f" {grid.cols[p]!s:<{cell - 1}}")
                                for i, p in enumerate(chunk))
        lines.append(head.rstrip())
        for row_index, row in enumerate(grid.rows):
            if row_index and grid.row_groups[row_index] != grid.row_groups[row_index - 1]:
                lines.append(indent + "─" * (len(head) - len(indent)))
            text = f"{'⋮' if row is None else headers[row]:>{len(indent) - 1}} "
            for index, position in enumerate(chunk):
                col = grid.cols[position]
                text += boundary(index)
                if row is None or col is None:
                    text += " …" if col is None else f" {'…':<{cell - 1}}"
                    continue
                label, kind, letter, _ = grid.labels[(row, col)]
                padded = f" {label:<{cell - 2}} "
                text += ansi(padded, letter, kind) if color else padded
            lines.append(text.rstrip())
    return lines


def render_origins(layout: Layout) -> list[str]:
    """Each target block, in storage order, with where it came from in the source."""
    flat = any(origin.offset is not None for origin in layout.origins)
    head = "offset" if flat else "array"
    where = {id(origin): (str(origin.offset) if flat else f"{origin.array}{origin.where}")
             for origin in layout.origins}
    width = max([len(head), *(len(text) for text in where.values())])
    lines = [f"  {head:>{width}}  {'size':>4}  {layout.target + ' block':<16} "
             f"from {layout.source}"]
    for origin in layout.origins:
        lines.append(f"  {where[id(origin)]:>{width}}  {origin.size:>4}  {origin.block:<16} "
                     f"{origin.source}")
    return lines
