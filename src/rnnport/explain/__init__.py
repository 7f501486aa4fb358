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

Nothing is written by hand: the layouts are **traced** (:mod:`.trace`). An
:class:`~rnnport.RNN` (float64, or float32 where a format holds only that) is built whose
every element holds its own code, written to the source format with :func:`rnnport.write`,
read back with :func:`rnnport.read` and written to the target format — exactly what
:func:`rnnport.convert` does — and every element of every native array is decoded back to
the canonical element whose code it holds. What each format calls its arrays and gates, and
what it must be told, comes from its declaration in the registry (:mod:`rnnport.formats`). A
number a framework adds at run time and never saves (TF1's ``forget_bias``) is traced at its
neutral value; a further trace at its default finds where it goes. Gate orders,
orientations, offsets and counts in the text are read off the decoded tables
(:mod:`.rules`); :mod:`.terminal` and :mod:`.page` draw them.

A GRU is reset-after unless ``reset_before=True`` asks for the other GRU (refused, naming the
formats that hold it, where a format's declared ``features`` lack ``reset_before``; a format
declaring ``reset_after=False`` refuses the reset-after GRU the same way). For a
network of several layers or two directions the tables show layer 0's forward direction, and
the whole network is traced as well: a format that writes one 1-D buffer gets its block map
(:mod:`.blocks`), every layer × direction × matrix / bias at the offsets where the writer put
its codes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..api import param_count, read, write
from ..errors import SpecError
from ..formats import NamedArray, get, info
from ..gates import CANONICAL, gate_family
from ..model import RNN, one_network
from ..spec import Spec
from .blocks import buffer_map, is_flat, relocate
from .layout import Block, BufferMap, Count, Layout, Origin
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
from .trace import Codebook, TracedArray, code_dtype, coded_models, trace

__all__ = ["Block", "BufferMap", "Count", "Explanation", "Origin", "TracedArray", "explain"]

CELL_NAMES = {"lstm": "lstm", "gru": "gru", "rnn": "rnn_tanh", "rnn_tanh": "rnn_tanh",
              "rnn_relu": "rnn_relu"}
MAX_SIZE = 64  # per side: every element of the layer is traced and drawn
MAX_LAYERS = 8


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
            hidden_size: int = 3, reset_before: bool = False, num_layers: int = 1,
            bidirectional: bool = False) -> Explanation:
    """Trace where every parameter of a ``cell`` layer sits in ``source`` and ``target``.

    ``cell`` is ``"lstm"``, ``"gru"`` or ``"rnn"`` (also ``"rnn_tanh"``, ``"rnn_relu"``);
    ``source`` and ``target`` are names from :func:`rnnport.formats`. A GRU is the reset-after
    GRU (which formats declaring ``reset_after=False`` refuse), or with ``reset_before=True``
    the reset-before GRU,
    ``n = tanh(W_n x + R_n(r∘h) + bW_n + bR_n)``, which only some formats hold (their
    declared ``features`` include ``reset_before``; the others are refused with an error
    naming those that do).

    The tables show one layer, one direction, with both biases. With ``num_layers`` > 1 or
    ``bidirectional``, they show layer 0's forward direction of that network, and every
    format that writes it as one flat buffer also gets its block map
    (:attr:`Explanation.buffers`): the offsets of every layer × direction × matrix / bias,
    found where the writer put each element.
    """
    if not isinstance(cell, str) or cell.lower() not in CELL_NAMES:
        raise SpecError(f"explain: cell={cell!r}; expected one of "
                        f"{', '.join(map(repr, CELL_NAMES))}.")
    for name, size, most in (("input_size", input_size, MAX_SIZE),
                             ("hidden_size", hidden_size, MAX_SIZE),
                             ("num_layers", num_layers, MAX_LAYERS)):
        if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= most:
            raise SpecError(f"explain: {name}={size!r}; expected 1 to {most}. The tables "
                            "draw every element, so small networks show the layout best.")
    for name, flag in (("reset_before", reset_before), ("bidirectional", bidirectional)):
        if not isinstance(flag, bool):
            raise SpecError(f"explain: {name}={flag!r}; expected True or False.")
    if reset_before and CELL_NAMES[cell.lower()] != "gru":
        raise SpecError(f"explain: reset_before=True with cell={cell!r}; only a GRU has a "
                        "reset gate. Pass cell='gru', or drop reset_before=True.")
    source, target = info(source).name, info(target).name
    network = Spec(CELL_NAMES[cell.lower()], input_size, hidden_size, num_layers=num_layers,
                   bidirectional=bidirectional, reset_after=not reset_before)
    for fmt in dict.fromkeys((source, target)):
        get(fmt).check_features(network, "explain", f"So {fmt} has no layout of it to show")
    spec = network.replace(num_layers=1, bidirectional=False)
    dtype = code_dtype(network, (source, target))
    book, model_a, model_b = coded_models(spec, dtype)
    read_source, write_source = options_for(source, spec)
    write_target = options_for(target, spec)[1]
    native_a, native_b = (write(model, source, **write_source) for model in (model_a, model_b))
    read_a, read_b = (one_network(read(native, source, **read_source), f"explain ({source})")
                      for native in (native_a, native_b))
    named_source = [get(source).explain_arrays(native, spec) for native in (native_a, native_b)]
    named_target = [native_arrays(model, target, write_target) for model in (read_a, read_b)]
    buffers: list[BufferMap] = []
    network_counts: list[tuple[str, int]] = []
    if network != spec:
        whole_book, written = _whole_network(network, source, target, dtype)
        named = {source: named_source, target: named_target}
        counted = RNN.random(network, dtype=dtype)
        for fmt, pass_a, pass_b in written:
            network_counts.append((fmt, param_count(counted, fmt,
                                                    **options_for(fmt, network)[1])))
            if is_flat(pass_a):
                buffers.append(buffer_map(fmt, whole_book, network, pass_a, pass_b))
                whole = [get(fmt).explain_arrays(native, network) for native in (pass_a, pass_b)]
                # The tables take each array's offset from pass A.
                named[fmt] = [relocate(fmt, named[fmt], whole), named[fmt][1]]
        named_source, named_target = named[source], named[target]
    source_arrays = annotate(source, trace(book, named_source[0], named_source[1], source))
    target_arrays = annotate(target, trace(book, named_target[0], named_target[1], target))
    biases = ("bias_ih", "bias_hh")
    hub = trace(book, [NamedArray(name, read_a.parameter(0, 0, name)) for name in biases],
                [NamedArray(name, read_b.parameter(0, 0, name)) for name in biases], "canonical")
    found = rules(spec, source, target, source_arrays, target_arrays, hub,
                  {buffer.fmt: buffer.size for buffer in buffers})
    found += constant_rules(spec, source, target, native_a, read_a,
                            {named.name: named.offset for named in named_target[0]
                             if named.offset is not None})
    counts = tuple(count(fmt, arrays, model_a, spec) for fmt, arrays in
                   ((source, source_arrays), (target, target_arrays)))
    if source == target:
        counts = counts[:1]
        network_counts = network_counts[:1]
    return Explanation(spec, source, target, tuple(source_arrays), tuple(target_arrays),
                       tuple(found), counts,
                       gate_names(source, target, CANONICAL[gate_family(spec.cell)]),
                       tuple(origins(source, source_arrays, target_arrays)),
                       network if network != spec else None, tuple(buffers),
                       tuple(network_counts))


def _whole_network(network: Spec, source: str, target: str,
                   dtype: np.dtype) -> tuple[Codebook, list[tuple[str, Any, Any]]]:
    """The whole network, coded: its code book, and (format, pass A, pass B) as ``source``
    writes it and as ``target`` writes what was read back from that (as
    :func:`rnnport.convert` does)."""
    book, model_a, model_b = coded_models(network, dtype)
    read_options, source_options = options_for(source, network)
    target_options = options_for(target, network)[1]
    written = [write(model, source, **source_options) for model in (model_a, model_b)]
    out = [(source, *written)]
    if target != source:
        converted = [write(one_network(read(native, source, **read_options),
                                       f"explain ({source})"), target, **target_options)
                     for native in written]
        out.append((target, *converted))
    return book, out
