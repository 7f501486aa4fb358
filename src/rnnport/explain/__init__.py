"""Layout tables: where every parameter of a recurrent layer sits in two formats, and why.

``explain(cell, source, target)`` answers "why do my converted weights not match?" with the
tables people otherwise draw by hand: every element of the source format's arrays and of
the target format's arrays, labelled and coloured by gate and by kind, the rules in words
that take one to the other, and the parameter count of each format with its formula.

Each element is labelled with the canonical parameter it holds (cuDNN/PyTorch orientation
and gate letters, see :mod:`rnnport.gates`)::

    Wi[1,0]   input weight W_i (H, I): gate i, unit (row) 1, input (column) 0
    Rz[2,1]   recurrent weight R_z (H, H): gate z, unit 2, h column 1
    bWf[0]    input-side bias of gate f, unit 0
    bRn[1]    recurrent-side bias of gate n, unit 1
    bo[0]     one stored bias per gate, bW_o[0] + bR_o[0] (Keras LSTM, TF1 cells)
    zero      a slot that holds zeros (the other slot of a one-bias format)

Nothing is written by hand: the layouts are **traced** (:mod:`.trace`). A float64
:class:`~rnnport.RNN` is built whose every element holds its own code, written to the
source format with :func:`rnnport.write`, read back with :func:`rnnport.read` and written
to the target format — exactly what :func:`rnnport.convert` does — and every element of
every native array is decoded back to the canonical element whose code it holds. What
each format calls its arrays and gates, and what it must be told, comes from its
declaration in the registry (:mod:`rnnport.formats`). A number a framework adds at run
time and never saves (TF1's ``forget_bias``) is traced at its neutral value; a further
trace at its default finds where it goes. Gate orders, orientations, offsets and counts in
the text are read off the decoded tables (:mod:`.rules`); :mod:`.terminal` and :mod:`.page`
draw them.
"""

from __future__ import annotations

from ..api import read, write
from ..errors import SpecError
from ..formats import NamedArray, get, info
from ..gates import CANONICAL, gate_family
from ..model import one_network
from ..spec import Spec
from .layout import Count, Layout, Origin
from .page import render_html
from .rules import (
    annotate,
    constant_rules,
    count,
    gate_names,
    native_arrays,
    options_for,
    origins,
    rules,
)
from .terminal import WIDTH, render_origins, render_text
from .trace import TracedArray, coded_models, trace

__all__ = ["Count", "Explanation", "Origin", "TracedArray", "explain"]

CELL_NAMES = {"lstm": "lstm", "gru": "gru", "rnn": "rnn_tanh", "rnn_tanh": "rnn_tanh",
              "rnn_relu": "rnn_relu"}
MAX_SIZE = 64  # per side: every element of the layer is traced and drawn


class Explanation(Layout):
    """The traced layouts of one cell in two formats; render with :meth:`text` or :meth:`html`."""

    def text(self, color: bool = False, width: int = WIDTH) -> str:
        """The tables, legend, rules and counts for a terminal; ANSI colours when ``color``."""
        return render_text(self, color, width)

    def html(self) -> str:
        """A standalone HTML5 page (inline CSS, no scripts, no external resources)."""
        return render_html(self)

    def origin_table(self) -> str:
        """Each block of the target, in storage order, and where it came from in the source."""
        return "\n".join(render_origins(self)) + "\n"

    def __str__(self) -> str:
        return self.text(color=False)


def explain(cell: str, source: str, target: str, *, input_size: int = 2,
            hidden_size: int = 3) -> Explanation:
    """Trace where every parameter of a ``cell`` layer sits in ``source`` and ``target``.

    ``cell`` is ``"lstm"``, ``"gru"`` (the reset-after GRU every registered format holds) or
    ``"rnn"`` (also ``"rnn_tanh"``, ``"rnn_relu"``); ``source`` and ``target`` are names from
    :func:`rnnport.formats`. The layer is one layer, one direction, with both biases.
    """
    if not isinstance(cell, str) or cell.lower() not in CELL_NAMES:
        raise SpecError(f"explain: cell={cell!r}; expected one of "
                        f"{', '.join(map(repr, CELL_NAMES))}.")
    for name, size in (("input_size", input_size), ("hidden_size", hidden_size)):
        if not isinstance(size, int) or not 1 <= size <= MAX_SIZE:
            raise SpecError(f"explain: {name}={size!r}; expected 1 to {MAX_SIZE}. The tables "
                            "draw every element, so small sizes show the layout best.")
    source, target = info(source).name, info(target).name
    spec = Spec(CELL_NAMES[cell.lower()], input_size, hidden_size)
    book, model_a, model_b = coded_models(spec)
    read_source, write_source = options_for(source, spec)
    write_target = options_for(target, spec)[1]
    native_a, native_b = (write(model, source, **write_source) for model in (model_a, model_b))
    read_a, read_b = (one_network(read(native, source, **read_source), f"explain ({source})")
                      for native in (native_a, native_b))
    source_arrays = annotate(source, trace(book, get(source).explain_arrays(native_a, spec),
                                           get(source).explain_arrays(native_b, spec), source))
    target_arrays = annotate(target, trace(book, native_arrays(read_a, target, write_target),
                                           native_arrays(read_b, target, write_target), target))
    biases = ("bias_ih", "bias_hh")
    hub = trace(book, [NamedArray(name, read_a.parameter(0, 0, name)) for name in biases],
                [NamedArray(name, read_b.parameter(0, 0, name)) for name in biases], "canonical")
    found = rules(spec, source, target, source_arrays, target_arrays, hub)
    found += constant_rules(spec, source, target, native_a, read_a)
    counts = tuple(count(fmt, arrays, model_a, spec) for fmt, arrays in
                   ((source, source_arrays), (target, target_arrays)))
    if source == target:
        counts = counts[:1]
    return Explanation(spec, source, target, tuple(source_arrays), tuple(target_arrays),
                       tuple(found), counts,
                       gate_names(source, target, CANONICAL[gate_family(spec.cell)]),
                       tuple(origins(source, source_arrays, target_arrays)))


