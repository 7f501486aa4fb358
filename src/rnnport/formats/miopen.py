"""ROCm MIOpen's flat weight buffer.

The container is cuDNN's (see :mod:`rnnport.formats.cudnn`: all matrices of all
pseudo-layers, then all biases; matrices ``(H, in)`` row-major). Only the gate order
differs: MIOpen's LSTM stores ``i f o c`` (= ``i f o g``). GRU is ``r z n`` as in cuDNN
(ONNX Runtime's ROCm provider maps ONNX ``z r h`` to MIOpen linLayerIDs 1, 0, 2, as it
does for cuDNN); a simple RNN has one block. MIOpen has no LSTM projection and no
single-bias modes: ``bias_mode`` is ``"double"`` or ``"none"``.

Reading takes the same options as ``cudnn``.
"""

from __future__ import annotations

from .cudnn import READ_OPTIONS, WRITE_OPTIONS, FlatFormat

DESCRIPTION = "the flat ROCm MIOpen weight buffer"
EXTRA = None
FEATURES: frozenset[str] = frozenset()
ORDERS = {"lstm": "ifog", "gru": "rzn", "rnn": "h"}

_MIOPEN = FlatFormat("miopen", ORDERS, FEATURES, ("double", "none"))
read = _MIOPEN.read
write = _MIOPEN.write
param_count = _MIOPEN.param_count
sniff = _MIOPEN.sniff

__all__ = ["READ_OPTIONS", "WRITE_OPTIONS", "param_count", "read", "sniff", "write"]
