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
    return _Session(onnxruntime, session, model.spec.cell == "lstm")


class _Session:
    """The network's session, and how ``forward`` runs it (a :data:`Runner`); ``stream``
    gives a stream's step over it."""

    def __init__(self, onnxruntime: Any, session: Any, lstm: bool) -> None:
        self.onnxruntime, self.session, self.lstm = onnxruntime, session, lstm
        self.names = [output.name for output in session.get_outputs()]
        # The session's own run, without the Python wrapper's checks of every feed's name
        # and type on each call (the feeds are built here, always the same names and types).
        inner = getattr(session, "_sess", None)
        self.inner = inner if inner is not None and hasattr(inner, "run") and hasattr(
            inner, "run_with_iobinding") else None
        self.full_lengths = np.zeros(0, np.int32)  # the last full-length sequence_lens fed

    def run(self, feeds: dict[str, Any]) -> list[np.ndarray]:
        if self.inner is not None:
            return list(self.inner.run(self.names, feeds, None))
        return list(self.session.run(self.names, feeds))

    def __call__(self, inputs: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
                 lengths: np.ndarray | None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        steps, batch = inputs.shape[:2]
        if lengths is None:
            sequence_lens = self.full_lengths  # one read: another thread may replace it
            if sequence_lens.shape[0] != batch or sequence_lens[0] != steps:
                sequence_lens = self.full_lengths = np.full(batch, steps, np.int32)
        else:
            sequence_lens = lengths.astype(np.int32)
        feeds: dict[str, Any] = {
            "x": np.ascontiguousarray(inputs),
            "sequence_lens": sequence_lens,
            "initial_h": np.ascontiguousarray(h0),
        }
        if self.lstm:
            feeds["initial_c"] = np.ascontiguousarray(c0)
            y, h_n, c_n = self.run(feeds)
            return y, h_n, c_n
        y, h_n = self.run(feeds)
        return y, h_n, None

    def stream(self, h: np.ndarray, c: np.ndarray | None) -> _Bound:
        """A stream's step, its state carried in ``h`` (and ``c``), float32 C-contiguous."""
        return _Bound(self, h, c)


class _Bound:
    """A stream's step through I/O binding: per chunk length, one binding of the session's
    inputs and outputs to OrtValues over arrays planned once — ``x`` and ``sequence_lens``
    in, ``y`` out, ``initial_h``/``initial_c`` over the stream's state and the final state
    into a second pair that each step copies back. A step copies the chunk in, runs, and
    moves the state on: no allocation, no feed dictionary."""

    KEPT = 8  # chunk lengths whose bindings are kept (the least recently used goes first)

    def __init__(self, owner: _Session, h: np.ndarray, c: np.ndarray | None) -> None:
        self.owner, self.h, self.c = owner, h, c
        self.h_n = np.empty_like(h)
        self.c_n = None if c is None else np.empty_like(c)
        # chunk length → (binding, x, y, what else the OrtValues point into)
        self.bound: dict[int, tuple[Any, np.ndarray, np.ndarray, Any]] = {}
        self.run = owner.inner.run_with_iobinding if owner.inner is not None else None

    def _bind(self, steps: int, size: int) -> tuple[Any, np.ndarray, np.ndarray, Any]:
        if len(self.bound) >= self.KEPT:
            del self.bound[next(iter(self.bound))]
        ort, session = self.owner.onnxruntime, self.owner.session
        batch = self.h.shape[1]
        x = np.zeros((steps, batch, size), np.float32)
        lengths = np.full(batch, steps, np.int32)
        # The graph's y is (T, batch, D·H_out); one direction here.
        y = np.zeros((steps, batch, self.h.shape[2]), np.float32)
        binding = session.io_binding()
        value = ort.OrtValue.ortvalue_from_numpy
        binding.bind_ortvalue_input("x", value(x))
        binding.bind_ortvalue_input("sequence_lens", value(lengths))
        binding.bind_ortvalue_input("initial_h", value(self.h))
        outputs = [value(y), value(self.h_n)]
        if self.c is not None and self.c_n is not None:
            binding.bind_ortvalue_input("initial_c", value(self.c))
            outputs.append(value(self.c_n))
        for name, output in zip(self.owner.names, outputs, strict=True):
            binding.bind_ortvalue_output(name, output)
        # The arrays stay alive with the entry: the OrtValues only point at their memory.
        entry = self.bound[steps] = (binding, x, y, (lengths, outputs))
        return entry

    def __call__(self, inputs: np.ndarray) -> np.ndarray:
        steps = inputs.shape[0]
        entry = self.bound.get(steps)
        if entry is None:
            entry = self._bind(steps, inputs.shape[2])
        binding, x, y, _ = entry
        np.copyto(x, inputs)
        if self.run is not None:
            self.run(binding._iobinding, None)
        else:
            self.owner.session.run_with_iobinding(binding)
        np.copyto(self.h, self.h_n)
        if self.c is not None and self.c_n is not None:
            np.copyto(self.c, self.c_n)
        return y


ENGINE = Engine("onnxruntime", modules=("onnxruntime", "onnx"), extra="onnx", build=build)
