"""ONNX Runtime's quantized LSTM: ``com.microsoft.DynamicQuantizeLSTM``, what
``onnxruntime.quantization.quantize_dynamic`` writes for an ``LSTM`` node.

Its inputs are the ``LSTM`` operator's (``X, W, R, B, sequence_lens, initial_h, initial_c,
P``, same attributes, no ``layout``: ``X`` is ``[T, B, I]``) followed by four more, and its
weights are integers laid out the other way round::

    W             [D, I, 4·H]    int8 or uint8, gates i o f c along the last axis
    R             [D, H, 4·H]    int8 or uint8
    W_scale       [D] (one per direction) or [D, 4·H] (per channel: one per column)
    W_zero_point  the shape of W_scale, W's type
    R_scale, R_zero_point        likewise for R

so that ``W[d]`` of the ``LSTM`` operator is ``(W_scale[d] · (W_q[d] − W_zero_point[d]))ᵀ``.
ONNX Runtime computes it with integers: on every step it quantizes ``x`` and ``h`` to
uint8 too, multiplies integers and rescales, so its outputs differ from those of a float
LSTM with the dequantized weights by the quantization error. That error is ONNX Runtime's
rounding of ``x`` and ``h``, and it grows with the input's width and range, the weights'
size and the number of steps. Measured against rnnport's forward with the dequantized
weights (``tools/onnx_quantized_error.py``: ``nn.LSTM`` initialised as PyTorch does,
weights uniform in ±1/√H; inputs N(0, 1) and uniform ±1; I 16 to 256, H 32 to 256, 20 to
400 steps; one and two directions; scales per tensor and per channel): at most
:data:`ERROR` (2.8e-2, I = 256, H = 64, 400 steps; 1.3e-3 on the golden cases); with
weights three times that size, up to 0.13. An LSTM's outputs lie in (−1, 1).

rnnport reads weights exactly, and dequantizing changes the numbers: a node of this
operator is refused by name unless ``dequantize=True``, which reads
``scale·(q − zero_point)`` in float32 (each factor exact, one rounding) and makes
``notes`` (``rnnport inspect``) say so. ``B`` and ``P`` are floats, read as stored.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import FormatError, UnsupportedFeatureError
from .graph import Scope

__all__ = ["DOMAIN", "ERROR", "NOTE", "OP", "note", "weights"]

DOMAIN, OP = "com.microsoft", "DynamicQuantizeLSTM"
SCALES = {"W": (8, 9), "R": (10, 11)}  # the input positions of each weight's scale, zero point
POSITIONS = {"W": 1, "R": 2}
INTEGERS = (np.dtype(np.int8), np.dtype(np.uint8))


def weights(scope: Scope, node: Any, where: str,
            dequantize: bool) -> tuple[np.ndarray, np.ndarray]:
    """W ``[D, 4·H, I]`` and R ``[D, 4·H, H]`` of a DynamicQuantizeLSTM node, dequantized
    and in the ``LSTM`` operator's orientation. Refused without ``dequantize``."""
    inputs = list(node.input) + [""] * 12
    if not dequantize:
        stored = scope.constant(inputs[1])
        kind = f"{stored.dtype} " if stored is not None else ""
        raise UnsupportedFeatureError(
            f"{where}: ONNX Runtime's quantized LSTM ({DOMAIN}.{OP}) holds W and R as "
            f"{kind}integers with scales and zero points; rnnport reads weights exactly and "
            "dequantizing changes the numbers. Pass dequantize=True to read them as "
            "scale·(q − zero_point) in float32 (rnnport inspect then says so), or read the "
            "float model the quantizer was given.")
    out = []
    for what, position in POSITIONS.items():
        scale_at, zero_at = SCALES[what]
        missing = [name for name, index in ((what, position), (f"{what}_scale", scale_at),
                                            (f"{what}_zero_point", zero_at)) if not inputs[index]]
        if missing:
            raise FormatError(f"{where}: {', '.join(missing)} not given; expected W, R and "
                              "each one's scale and zero point, which the operator requires. "
                              "The model is damaged.")
        quantized = scope.value(inputs[position], f"{where}, {what}")
        scale = scope.value(inputs[scale_at], f"{where}, {what}_scale")
        zero = scope.value(inputs[zero_at], f"{where}, {what}_zero_point")
        out.append(_dequantized(scope, where, what, quantized, scale, zero))
    return out[0], out[1]


NOTE = "dequantized (dequantize=True)"
# ONNX Runtime's output against the dequantized network's, largest measured on LSTMs of
# PyTorch's initial weight size (see the module's docstring).
ERROR = 3e-2


def note(where: str, node: Any, dequantize: bool) -> str:
    """What ``notes`` says of a DynamicQuantizeLSTM node of the network."""
    names = ", ".join(repr(name) for name in node.input[1:3])
    if not dequantize:
        return (f"{where} is ONNX Runtime's quantized LSTM ({DOMAIN}.{OP}): its W and R "
                f"({names}) hold integers; reading it needs dequantize=True.")
    return (f"{NOTE}: the W and R of {where} ({names}) held quantized integers, read as "
            "scale·(q − zero_point) in float32; the numbers differ from what ONNX Runtime "
            "computes, which also quantizes x and h on every step (by up to about "
            f"{ERROR:g} on LSTMs with weights of the size PyTorch initialises, more with "
            "larger weights, wider inputs or longer sequences).")


def _dequantized(scope: Scope, where: str, what: str, quantized: np.ndarray, scale: np.ndarray,
                 zero: np.ndarray) -> np.ndarray:
    """``scale·(q − zero_point)`` as float32, ``[D, 4·H, in]``."""
    problems = []
    if quantized.dtype not in INTEGERS or quantized.ndim != 3:
        problems.append(f"{what} is {quantized.dtype} of shape {list(quantized.shape)}; expected "
                        "int8 or uint8 of shape [directions, in, 4·hidden]")
    else:
        directions, columns = quantized.shape[0], quantized.shape[2]
        if scale.dtype != np.float32 or scale.shape not in ((directions,),
                                                            (directions, columns)):
            problems.append(f"{what}_scale is {scale.dtype} of shape {list(scale.shape)}; "
                            f"expected float32 of shape [{directions}] (one per direction) or "
                            f"[{directions}, {columns}] (one per column)")
        if zero.dtype != quantized.dtype or zero.shape != scale.shape:
            problems.append(f"{what}_zero_point is {zero.dtype} of shape {list(zero.shape)}; "
                            f"expected {quantized.dtype} of {what}_scale's shape "
                            f"{list(scale.shape)}")
    if problems:
        raise FormatError(f"{where}: " + "; ".join(problems) + f" ({DOMAIN}.{OP}). The model "
                          "is damaged.")
    # One float32 array of W's size, computed in place: paid for before it is made.
    scope.charge(4 * quantized.size, where)
    if scale.ndim == 1:  # one scale per direction
        scale, zero = scale[:, None, None], zero[:, None, None]
    else:  # per channel: one per column of [in, 4·H]
        scale, zero = scale[:, None, :], zero[:, None, :]
    # Integers of at most 8 bits, and their differences, are exact in float32: one rounding.
    values = quantized.astype(np.float32)
    values -= zero.astype(np.float32)
    values *= scale
    return values.transpose(0, 2, 1)
