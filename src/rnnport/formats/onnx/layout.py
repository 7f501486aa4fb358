"""The ONNX recurrent operators' layout facts, shared by the reader and the writer."""

from __future__ import annotations

from typing import Any

__all__ = ["OPS", "ORDERS", "PEEPHOLE_ORDER", "QUANTIZED", "family"]

ORDERS = {"lstm": "iofg", "gru": "zrn", "rnn": "h"}
PEEPHOLE_ORDER = "iof"  # ONNX P; rnnport keeps weight_peephole rows as i, f, o
OPS = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}
# Recurrent operators of other domains: ONNX Runtime's quantized LSTM (see .quantized).
QUANTIZED = {("com.microsoft", "DynamicQuantizeLSTM"): "lstm"}


def family(node: Any) -> str | None:
    """``lstm``, ``gru`` or ``rnn`` for a recurrent node, else None."""
    if node.domain in ("", "ai.onnx"):
        return OPS.get(node.op_type)
    return QUANTIZED.get((node.domain, node.op_type))
