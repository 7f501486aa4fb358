"""``explain`` as a standalone HTML5 page: inline CSS, no scripts, no external resources;
every element a cell with a tooltip."""

from __future__ import annotations

import html

from ..gates import CANONICAL, gate_family
from .blocks import block_text, gate_text
from .layout import BufferMap, Layout
from .style import css, dark, elided, shade, table_grid
from .terminal import BLOCK_HEAD
from .trace import BR, BW, KIND_NAMES, KIND_TAGS, SUM, ZERO, R, TracedArray, W

__all__ = ["render_html"]

_BORDERS = {W: "1px solid rgba(0,0,0,.35)", R: "2px dashed #222", BW: "2px dotted #000",
            BR: "3px double #000", SUM: "3px solid #000", ZERO: "1px dotted #aaa"}
_BORDER_WORDS = {W: "thin solid", R: "dashed", BW: "dotted", BR: "double", SUM: "thick solid",
                 ZERO: "grey dotted"}


def render_html(layout: Layout) -> str:
    """The whole explanation as one page."""
    spec = layout.spec
    letters = CANONICAL[gate_family(spec.cell)]
    esc = html.escape
    rules = ["body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em 2em;"
           "color:#111;line-height:1.4}",
           "h1{font-size:1.4em}h2{margin-top:1.6em;border-bottom:1px solid #ccc}"
           "h3{font-family:ui-monospace,monospace;font-size:1em;margin:1.2em 0 .2em}",
           "p.note{margin:.1em 0 .1em 1em;color:#333;font-size:.92em}",
           "table.arr,table.legend{border-collapse:separate;border-spacing:2px;"
           "font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;margin:.4em 0 .8em}",
           "table.arr td,table.legend td{padding:2px 5px;white-space:nowrap}",
           "table.arr th{font-weight:normal;color:#777;padding:0 4px;font-size:11px}",
           "td.gap{padding:0 3px!important;background:none!important;border:none!important}",
           "tr.gap td{height:4px;padding:0!important}",
           "td.el{color:#999;text-align:center}",
           "table.counts td,table.counts th,table.blocks td,table.blocks th{padding:2px 10px;"
           "text-align:left;vertical-align:top}",
           "table.blocks{border-collapse:collapse;font-family:ui-monospace,Menlo,Consolas,"
           "monospace;font-size:12px}table.blocks td{white-space:nowrap}",
           "table.blocks td.num{text-align:right}",
           "ol.rules li{margin:.25em 0}",
           # A wide table scrolls inside its own box; the page itself never gets wider than
           # the window, and long words in the text wrap.
           "body{overflow-wrap:break-word}",
           "div.scroll{overflow-x:auto;max-width:100%}"]
    rules.append(f".k0{{background:#ebebeb;color:#999;border:{_BORDERS[ZERO]}}}")
    for letter in letters:
        for kind in (W, R, BW, BR, SUM):
            color = shade(letter, kind)
            rules.append(f".g{letter}.k{KIND_TAGS[kind]}{{background:{css(color)};"
                         f"color:{'#fff' if dark(color) else '#000'};border:{_BORDERS[kind]}}}")
    body = [f"<h1>rnnport explain — {esc(layout.title)}</h1>"]
    if layout.scope:
        body.append(f"<p class=\"scope\">{esc(layout.scope)}</p>")
    body += _legend_html(layout, letters)
    for heading, fmt, arrays in (("Source", layout.source, layout.source_arrays),
                                 ("Target", layout.target, layout.target_arrays)):
        total = sum(array.size for array in arrays)
        part = "layer 0, forward: " if layout.network is not None else ""
        body.append(f"<section class=\"{heading.lower()}\"><h2>{heading}: {esc(fmt)} "
                    f"({part}{total} parameters)</h2>")
        for array in arrays:
            body.append(f"<h3>{esc(array.heading())}</h3>")
            body += [f"<p class=\"note\">{esc(note)}</p>" for note in array.notes]
            body.append(_scroll(_table_html(array, elided(layout.spec))))
        body.append("</section>")
    for buffer in layout.buffers:
        body += _buffer_html(layout, buffer)
    body.append(f"<section class=\"rules\"><h2>Rules: {esc(layout.source)} → "
                f"{esc(layout.target)}</h2><ol class=\"rules\">")
    body += [f"<li>{esc(rule)}</li>" for rule in layout.rules]
    body.append("</ol></section>")
    scope = " (layer 0, forward direction)" if layout.network else ""
    body.append(f"<section class=\"counts\"><h2>Parameter counts{scope}</h2>"
                "<div class=\"scroll\"><table class=\"counts\">"
                "<tr><th>format</th><th>parameters</th><th>formula</th><th>by kind</th></tr>")
    for count in layout.counts:
        body.append(f"<tr><td>{esc(count.fmt)}</td><td>{count.total}</td>"
                    f"<td>{esc(count.formula)}</td><td>{esc(count.detail)}</td></tr>")
    body.append(f"<tr><td>canonical</td><td>{spec.num_params()}</td><td>G·H·(I + H + 2)</td>"
                "<td>both biases</td></tr></table></div>")
    if layout.network_counts:
        body.append(f"<p>The whole {esc(layout.whole.describe())}: " + "; ".join(
            f"{esc(fmt)} {total}" for fmt, total in layout.network_counts)
            + f"; canonical model (both biases) {layout.whole.num_params()}.</p>")
    body.append("</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>rnnport explain: {esc(layout.title)}</title>\n"
            "<style>\n" + "\n".join(rules) + "\n</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


def _legend_html(layout: Layout, letters: str) -> list[str]:
    esc = html.escape
    g = letters[0]
    out = ["<section class=\"legend\"><h2>Legend</h2>",
           "<p>Each cell names the canonical parameter it holds: "
           f"<code>W{g}[u,c]</code> input weight W<sub>{g}</sub> (H×I), unit u, input c; "
           f"<code>R{g}[u,c]</code> recurrent weight (H×H); <code>bW{g}[u]</code> input-side "
           f"bias; <code>bR{g}[u]</code> recurrent-side bias; <code>b{g}[u]</code> one stored "
           "bias = bW + bR; <code>zero</code> a slot holding zeros. Colour: the gate; shade and "
           "border: the kind (" + ", ".join(f"{KIND_TAGS[k]} {_BORDER_WORDS[k]}"
                                              for k in (W, R, BW, BR, SUM, ZERO)) +
           "). Hover a cell for a description.</p>",
           "<div class=\"scroll\"><table class=\"legend\"><tr><th>gate</th>"
           + "".join(f"<th>{esc(KIND_NAMES[k])}</th>" for k in (W, R, BW, BR, SUM)) + "</tr>"]
    for letter in letters:
        name = f"{letter} {layout.gate_names[letter]}"
        out.append(f"<tr><th>{esc(name)}</th>" + "".join(
            f"<td class=\"g{letter} k{KIND_TAGS[kind]}\">{KIND_TAGS[kind]}{letter}"
            f"[{'u,c' if kind in (W, R) else 'u'}]</td>" for kind in (W, R, BW, BR, SUM))
            + "</tr>")
    out.append("<tr><th>none</th><td class=\"k0\">zero</td></tr></table></div></section>")
    return out


def _scroll(table: str) -> str:
    """``table`` in a box of its own that scrolls sideways when the table is wider."""
    return f"<div class=\"scroll\">{table}</div>"


def _buffer_html(layout: Layout, buffer: BufferMap) -> list[str]:
    """One flat buffer's block map as a table, in buffer order."""
    esc = html.escape
    out = [f"<section class=\"buffer\"><h2>Buffer blocks: {esc(buffer.fmt)}</h2>",
           f"<p>The whole {esc(layout.whole.describe())}: one buffer of {buffer.size} elements; "
           f"{esc(buffer.summary)}. Each block was found where the writer put its elements.</p>",
           "<div class=\"scroll\"><table class=\"blocks\"><tr>"
           + "".join(f"<th>{esc(head)}</th>" for head in BLOCK_HEAD) + "</tr>"]
    for block in buffer.blocks:
        letter = block.gates[0][0] if block.gates else ""
        kind = f"g{letter} k{KIND_TAGS[block.kind]}" if block.kind != ZERO else "k0"
        layer, direction, what = block_text(block)
        out.append(f"<tr><td>[{block.start}, {block.stop})</td><td class=\"num\">{block.size}"
                   f"</td><td>{layer}</td><td>{direction}</td><td class=\"{kind}\">{esc(what)}"
                   f"</td><td>{esc(gate_text(block))}</td></tr>")
    out.append("</table></div></section>")
    return out


def _table_html(array: TracedArray, elide: bool) -> str:
    grid = table_grid(array, elide)
    esc = html.escape

    def gap(groups: list[int], position: int) -> bool:
        return position > 0 and groups[position] != groups[position - 1]

    head = ["<tr><th></th>"]
    for position, col in enumerate(grid.cols):
        if gap(grid.col_groups, position):
            head.append("<td class=\"gap\"></td>")
        head.append(f"<th>{'…' if col is None else col}</th>")
    head.append("</tr>")
    rows = ["".join(head)]
    width = len(grid.cols) + len(set(grid.col_groups))
    for row_index, row in enumerate(grid.rows):
        if gap(grid.row_groups, row_index):
            rows.append(f"<tr class=\"gap\"><td colspan=\"{width}\"></td></tr>")
        cells = [f"<th>{'⋮' if row is None else esc(array.row_header(row))}</th>"]
        for position, col in enumerate(grid.cols):
            if gap(grid.col_groups, position):
                cells.append("<td class=\"gap\"></td>")
            if row is None or col is None:
                cells.append("<td class=\"el\">…</td>")
                continue
            label, kind, letter, title = grid.labels[(row, col)]
            classes = f"g{letter} k{KIND_TAGS[kind]}" if kind != ZERO else "k0"
            cells.append(f"<td class=\"{classes}\" title=\"{esc(title)}\">{esc(label)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table class=\"arr\" data-name=\"{esc(array.name)}\">" + "".join(rows) + "</table>"
