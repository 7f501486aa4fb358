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
an RNN with ``Relu`` is ``rnn_relu``. ONNX cannot hold an LSTM projection, and its
``clip`` (every pre-activation clipped before its activation) is rnnport's ``gate_clip``,
not TF1's cell clip; ``input_forget=1`` is ``Spec.input_forget`` (``f = 1 − i``).

Writing builds a whole graph: input ``x`` ``(batch, time, input)`` (``time_major=True``:
``(time, batch, input)``), optional inputs ``sequence_lens`` (int32 ``(batch,)``),
``initial_h`` and ``initial_c`` shaped like ``forward``'s state (defaults: full length,
zeros), outputs ``y`` shaped like ``forward``'s ``y``, ``h_n`` and, for LSTM, ``c_n``. The
glue between layers (``Y [T, D, B, H]`` → ``[T, B, D·H]``) is ordinary graph nodes. A
``Stack`` is written whole, with one state input and output per part (``initial_h_0``,
``h_n_0``, …). The graph computes in float32 (ONNX Runtime's CPU kernels for these
operators run float32 only); float16 and float64 weights are stored in their own precision
and cast in the graph, so reading the file back gives them unchanged.

Reading finds the RNN nodes of a graph, takes W/R/B/P from initializers or Constant nodes
(through Cast/Identity), and follows chains of nodes joined by reshaping glue (as
PyTorch's exporter writes a stacked RNN) into one network; ``node=`` picks one chain when
a graph holds several. ``activations`` (with ``activation_alpha``/``activation_beta``,
consumed in order by the functions that take them) become ``Spec.activations``. Anything
that changes the numbers and the runtime cannot compute (a function ONNX does not name,
different functions per direction, weights fed at run time) raises an error naming the
node and the attribute. A graph with no recurrent node may compute one step by step, as
PyTorch's default exporter writes ``nn.RNN`` and the cells: :mod:`.unrolled` reads those,
checking them by running the graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._common import is_path, require
from .._protocol import Format, NamedArray, Suffix
from .graph import external_files, is_proto, load, scopes
from .layout import OPS
from .reader import notes, read
from .writer import write

__all__ = ["FORMAT", "run_reference"]

READ_OPTIONS = frozenset({"node", "inputs"})
WRITE_OPTIONS = frozenset({"time_major", "opset"})


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
            notes = ("axis 0 is ONNX's direction axis D (1 here: forward only)",) \
                if array.shape and array.shape[0] == 1 else ()
            out.append(NamedArray(input_name, array, None, notes))
    return out


def run_reference(proto: Any, x: np.ndarray, **feeds: Any) -> Mapping[str, np.ndarray]:
    """Run a written model in ONNX Runtime (CPU); used by tests and ``convert --verify``."""
    onnxruntime = require("onnxruntime", extra="onnx", purpose="running ONNX models")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the optional inputs' defaults are meant to be overridable
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {"x": np.asarray(x, np.float32),
              **{k: v for k, v in feeds.items() if v is not None}}
    return dict(zip(names, session.run(None, inputs), strict=True))


FORMAT = Format(
    "onnx", sniff=sniff, reader=read, writer=write, read_options=READ_OPTIONS,
    write_options=WRITE_OPTIONS,
    features=frozenset({"peepholes", "reset_before", "gate_clip", "input_forget", "activations",
                        "reverse"}),
    extra="onnx", modules=("onnx",), suffixes=(Suffix(".onnx", "an ONNX model"),),
    input_files=external_files,
    gate_names={"g": "c", "n": "h"},
    explain_arrays=explain_arrays, notes=notes,
    names={"peepholes": "P", "gate_clip": "clip", "input_forget": "input_forget=1",
           "reverse": "direction=reverse",
           "activations": "activations", "reset_before": "linear_before_reset=0",
           "reset_after": "linear_before_reset=1"},
    layout_notes=("ONNX arrays start with a direction axis D: W [D, G·H, I], R [D, G·H, H], "
                  "B [D, 2·G·H] (here D = 1).",))
