"""The ONNX recurrent operators' layout facts, shared by the reader and the writer."""

from __future__ import annotations

__all__ = ["OPS", "ORDERS", "PEEPHOLE_ORDER"]

ORDERS = {"lstm": "iofg", "gru": "zrn", "rnn": "h"}
PEEPHOLE_ORDER = "iof"  # ONNX P; rnnport keeps weight_peephole rows as i, f, o
OPS = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}
