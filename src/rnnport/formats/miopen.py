"""ROCm MIOpen's flat weight buffer.

The container is cuDNN's (see :mod:`rnnport.formats.cudnn`: all matrices of all
pseudo-layers, then all biases; matrices ``(H, in)`` row-major). Only the gate order
differs: MIOpen's LSTM stores ``i f o c`` (= ``i f o g``). GRU is ``r z n`` as in cuDNN
(ONNX Runtime's ROCm provider maps ONNX ``z r h`` to MIOpen linLayerIDs 1, 0, 2, as it
does for cuDNN); a simple RNN has one block. MIOpen has no LSTM projection and no
single-bias modes: ``bias_mode`` is ``"double"`` or ``"none"``.

Reading takes the same options as ``cudnn``. A ``.npy`` file is told to be a cuDNN buffer;
read an MIOpen one with ``fmt="miopen"`` (``--from miopen``, and ``--to miopen`` to write one).
"""

from __future__ import annotations

from .cudnn import FlatFormat

__all__ = ["FORMAT"]

ORDERS = {"lstm": "ifog", "gru": "rzn", "rnn": "h"}

FORMAT = FlatFormat("miopen", ORDERS, frozenset(), ("double", "none"),
                    sniffs_files=False).declaration(
    gate_names={"g": "c"}, what="a flat buffer saved with numpy.save", layout_notes=(),
    names={"reset_after": "miopenGRU"})
