"""The ``onnxruntime`` engine: ``forward(engine="onnxruntime")`` runs a network in ONNX
Runtime (CPU) (see :mod:`rnnport.formats.running`).

The network is written once as a time-major graph taking every optional input
(``write(model, "onnx", time_major=True, lengths=True, initial_state=True)``), and one
``InferenceSession`` is built from it; each call feeds ``x`` ``(time, batch, I)`` float32,
``sequence_lens`` int32 ``(batch,)`` (full lengths when none are given), ``initial_h`` and
``initial_c`` in rnnport's own state layout ``(L·D, batch, ·)`` (zeros when none is given),
and takes ``y`` ``(time, batch, D·H_out)``, ``h_n`` and ``c_n``. A batch-first input is
transposed here rather than in the graph: the same one copy either way.

The graph computes in float32 (ONNX Runtime's CPU kernels for these operators run float32
only), as rnnport's runtime does for float16 and float32 weights; a float64 network, which
rnnport runs in float64, falls back to NumPy. ONNX Runtime leaves a sequence of length 0 with
a zero final state; :mod:`~rnnport.formats.running` gives it its initial state, as rnnport does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import UnsupportedFeatureError
from ...model import RNN
from .._common import require
from .._protocol import Engine, Runner
from .writer import write

__all__ = ["ENGINE", "build"]


def build(model: RNN, device: str) -> Runner:
    """``model`` written once into an ONNX Runtime session on the CPU, and how to run it."""
    onnxruntime = require("onnxruntime", extra="onnx", purpose="forward(engine='onnxruntime')")
    if model.dtype == np.float64:
        raise UnsupportedFeatureError(
            "forward(engine='onnxruntime'): ONNX Runtime computes LSTM, GRU and RNN nodes in "
            "float32 only, and this network's float64 weights run in float64. Cast it first "
            "(model.astype('float32')) to run it in ONNX Runtime.")
    proto = write(model, time_major=True, lengths=True, initial_state=True)
    settings = onnxruntime.SessionOptions()
    settings.log_severity_level = 3
    session = onnxruntime.InferenceSession(proto.SerializeToString(), sess_options=settings,
                                           providers=["CPUExecutionProvider"])
    lstm = model.spec.cell == "lstm"
    names = [output.name for output in session.get_outputs()]
    # The session's own run, without the Python wrapper's checks of every feed's name and
    # type on each call (the feeds are built here, always the same names and types).
    inner = getattr(session, "_sess", None)
    run = (lambda feeds: inner.run(names, feeds, None)) if inner is not None and hasattr(
        inner, "run") else (lambda feeds: session.run(names, feeds))
    full_lengths = np.zeros(0, np.int32)  # the last full-length sequence_lens fed

    def runner(inputs: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
               lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        nonlocal full_lengths
        steps, batch = inputs.shape[:2]
        if lengths is None:
            sequence_lens = full_lengths  # one read: another thread may replace it meanwhile
            if sequence_lens.shape[0] != batch or sequence_lens[0] != steps:
                sequence_lens = full_lengths = np.full(batch, steps, np.int32)
        else:
            sequence_lens = lengths.astype(np.int32)
        feeds: dict[str, Any] = {
            "x": np.ascontiguousarray(inputs),
            "sequence_lens": sequence_lens,
            "initial_h": np.ascontiguousarray(h0),
        }
        if lstm:
            feeds["initial_c"] = np.ascontiguousarray(c0)
            y, h_n, c_n = run(feeds)
            return y, h_n, c_n
        y, h_n = run(feeds)
        return y, h_n, None

    return runner


ENGINE = Engine("onnxruntime", modules=("onnxruntime", "onnx"), extra="onnx", build=build)
