"""ONNX: ``LSTM`` / ``GRU`` / ``RNN`` operator nodes, one node per layer.

Per node (``D`` directions, index 0 forward, 1 reverse)::

    X   [T, B, I]            ([B, T, I] with layout=1)
    W   [D, G·H, I]          gates stacked by rows: LSTM i o f c, GRU z r h, RNN one block
    R   [D, G·H, H]
    B   [D, 2·G·H]           input-side biases, then recurrent-side biases (optional)
    P   [D, 3·H]             LSTM peepholes p_i, p_o, p_f (optional)
    sequence_lens [B] int32, initial_h [D, B, H], initial_c [D, B, H]   (optional)
    Y   [T, D, B, H]         a direction axis, not PyTorch's [T, B, D·H]
    Y_h [D, B, H], Y_c [D, B, H]

W and R are cuDNN's orientation; only the gate order differs. GRU ``linear_before_reset=1``
is the reset-after GRU (cuDNN, PyTorch), ``0`` (the ONNX default) the reset-before one.
``activations`` default to Sigmoid/Tanh/Tanh (LSTM), Sigmoid/Tanh (GRU), Tanh (RNN);
an RNN with ``Relu`` is ``rnn_relu``. ONNX cannot hold an LSTM projection (PyTorch's default
exporter writes ``nn.LSTM(proj_size=P)`` as a node of ``hidden_size=P`` with its weights
cut and an ``initial_c`` of the real size, which ONNX Runtime refuses to run: refused by
name, as is any ``initial_h``/``initial_c`` whose shape is not ``[D, batch, H]``), and its
``clip`` (every pre-activation clipped before its activation) is rnnport's ``gate_clip``,
not TF1's cell clip; ``input_forget=1`` is ``Spec.input_forget`` (``f = 1 − i``).

Writing builds a whole graph. Its inputs:

* ``x`` ``(batch, time, input)``, float32 (``time_major=True``: ``(time, batch, input)``);
* with ``lengths=True``, ``sequence_lens`` int32 ``(batch,)``: sequence ``b`` is valid for
  its first ``sequence_lens[b]`` steps (at most ``time``), as ``forward``'s ``lengths``;
* with ``initial_state=True``, ``initial_h`` and, for LSTM, ``initial_c``, float32, shaped
  like ``forward``'s state: ``(layers·D, batch, H_out)`` and ``(layers·D, batch, H)``, index
  ``layer·D + direction``; each node takes its layer's slice.

Every input it declares is required, and none is also an initializer (ONNX Runtime warns
about each initializer listed among the inputs). By default the graph takes ``x`` alone
and the recurrent nodes' ``sequence_lens``, ``initial_h`` and ``initial_c`` are left empty,
which ONNX defines as full length and zero state: ``session.run(None, {"x": x})``. The
outputs are ``y`` shaped like ``forward``'s ``y``, ``h_n`` and, for LSTM, ``c_n`` shaped like
its state. The glue between layers (``Y [T, D, B, H]`` → ``[T, B, D·H]``) is ordinary graph
nodes. A ``Stack`` is written whole, with one ``sequence_lens`` for all parts and one state
input and output per part (``initial_h_0``, ``h_n_0``, …). The graph computes in float32
(ONNX Runtime's CPU kernels for these operators run float32 only); float16 and float64
weights are stored in their own precision and cast in the graph, so reading the file back
gives them unchanged. ``opset`` (default 17, at least 14) is the operator set declared.
Files from earlier rnnport versions, whose optional inputs were also initializers holding
the defaults, read the same.

Reading finds the RNN nodes of a graph, takes W/R/B/P from initializers or Constant nodes
(through Cast/Identity), and follows chains of nodes joined by reshaping glue (as
PyTorch's exporter writes a stacked RNN) into one network; ``node=`` picks one chain when
a graph holds several. A node is the next layer of the one whose ``Y`` it takes only when
the glue hands ``Y [T, D, B, H]`` on as ``X [T, B, D·H]`` (checked by running it on
distinct numbers: a glue that swaps batch and time or interleaves the directions does not)
and its initial state is not computed from a recurrent node's outputs (a decoder started
from an encoder's final state); otherwise each is a network of its own, and the listing
says why. Those runs, and the nodes followed back from a state, count against the ``work``
limit, and a run past a limit is refused, not read as networks apart. ``activations``
(with ``activation_alpha``/``activation_beta``, consumed in order by the functions that
take them) become ``Spec.activations``. Anything that changes the numbers and the runtime
cannot compute (a function ONNX does not name, different functions per direction, weights
fed at run time) raises an error naming the node and the attribute. A graph with no
recurrent node may compute one step by step, as PyTorch's exporters write ``nn.RNN`` and
the cells (a cell stepped in a Python loop, two cells over a sequence and over it reversed
joined as one bidirectional network): :mod:`.unrolled` reads those, checking them by
running the graph.

ONNX Runtime's quantized LSTM, ``com.microsoft.DynamicQuantizeLSTM`` (what
``onnxruntime.quantization.quantize_dynamic`` makes of an ``LSTM`` node: int8 or uint8 ``W
[D, I, 4·H]`` and ``R [D, H, 4·H]`` with scales and zero points per direction or per
column; :mod:`.quantized`), is a recurrent node too. Reading it changes the numbers, so it
is refused by name unless ``dequantize=True``, which reads ``scale·(q − zero_point)`` in
float32; ``notes`` (``rnnport inspect``) then says so.

Running: ``framework_forward`` (``convert --verify`` from an ``.onnx`` file) runs the source
file in ONNX Runtime, feeding ``x`` in the layout its declared shape names, full lengths to
an integer ``(batch,)`` input and zeros to rnnport's state inputs; a graph that computes
more than the network (a head, a second network), takes other inputs or holds a quantized
LSTM (ONNX Runtime computes it with integers) is not checked.
The ``onnxruntime`` engine (:mod:`.engine`, ``forward(engine="onnxruntime")``) runs any
network this format holds in an ONNX Runtime session written once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._common import is_path
from .._protocol import Choices, Format, NamedArray, Suffix
from .engine import ENGINE
from .graph import external_files, is_proto, load, scopes
from .layout import OPS
from .reader import networks, notes, read
from .session import framework_forward, run_reference
from .writer import write

__all__ = ["FORMAT", "run_reference"]

READ_OPTIONS = frozenset({"node", "inputs", "dequantize"})
WRITE_OPTIONS = frozenset({"time_major", "opset", "lengths", "initial_state"})


def sniff(source: Any) -> bool:
    if is_proto(source, "ModelProto") or is_proto(source, "GraphProto"):
        return True
    return is_path(source) and Path(source).suffix.lower() == ".onnx"


def explain_arrays(native: Any, spec: Any) -> list[NamedArray]:
    """W, R and B (and P) of the model's first recurrent node, as the graph stores them."""
    scope = scopes(load(native), {})[0]
    node = next(node for node in scope.nodes if node.op_type in OPS)
    out = []
    for input_name, name in zip(("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c",
                                 "P"), node.input, strict=False):
        if input_name in ("W", "R", "B", "P") and name:
            array = scope.value(name, scope.label(node))
            notes = ("axis 0 is ONNX's direction axis D (a bidirectional node's forward "
                     "direction is index 0, its reverse index 1)",) if array.shape else ()
            out.append(NamedArray(input_name, array, None, notes))
    return out


def choices(source: Any) -> Choices:
    """The separate recurrent networks of a model, each picked by one of its nodes."""
    return Choices("node", tuple(networks(source)))


FORMAT = Format(
    "onnx", sniff=sniff, reader=read, writer=write, read_options=READ_OPTIONS,
    write_options=WRITE_OPTIONS,
    features=frozenset({"peepholes", "reset_before", "gate_clip", "input_forget", "activations",
                        "reverse"}),
    extra="onnx", modules=("onnx",), suffixes=(Suffix(".onnx", "an ONNX model"),),
    input_files=external_files,
    gate_names={"g": "c", "n": "h"},
    explain_arrays=explain_arrays, notes=notes, framework_forward=framework_forward,
    networks=choices, engines=(ENGINE,),
    names={"peepholes": "P", "gate_clip": "clip", "input_forget": "input_forget=1",
           "reverse": "direction=reverse",
           "activations": "activations", "reset_before": "linear_before_reset=0",
           "reset_after": "linear_before_reset=1"},
    layout_notes=("ONNX arrays start with a direction axis D: W [D, G·H, I], R [D, G·H, H], "
                  "B [D, 2·G·H] (D = 2 for a bidirectional node, forward first; one node per "
                  "layer).",))
