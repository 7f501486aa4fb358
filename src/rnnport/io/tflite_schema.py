"""TFLite (LiteRT) model files, decoded with NumPy and the standard library alone.

A ``.tflite`` file is a FlatBuffer (read by :mod:`rnnport.io.flatbuffer`) whose root is a
``Model`` table and whose file identifier is ``TFL3``. This module decodes the part of
TensorFlow's ``tensorflow/lite/schema/schema.fbs`` that recurrent models need into frozen
dataclasses. Every table's field order (its vtable slots) and every enum value below is
copied from the schema as LiteRT 2.3 generates it (``ai_edge_litert.schema_py_generated``,
a superset of TensorFlow 2.21's copy); a test compares them.

=========================  ==========================================================
table (field: type)        decoded into
=========================  ==========================================================
``Model``                  :class:`Model`: ``version`` (uint32), ``operator_codes``,
                           ``subgraphs``, ``description`` (string), ``buffers``,
                           ``metadata`` (name and buffer index; field 7)
``OperatorCode``           :class:`OperatorCode`: ``deprecated_builtin_code`` (int8),
                           ``custom_code``, ``version``, ``builtin_code`` (int32). The
                           operator is ``max(builtin_code, deprecated_builtin_code)``:
                           files before schema v3a hold codes < 127 only in the int8
                           field, newer ones write the int8 field as at most 127
                           (``PLACEHOLDER_FOR_GREATER_OP_CODES``).
``SubGraph``               :class:`SubGraph`: ``tensors``, ``inputs``, ``outputs``,
                           ``operators``, ``name``
``Tensor``                 :class:`Tensor`: ``shape``, ``type`` (:data:`TENSOR_TYPES`),
                           ``buffer`` (index into ``Model.buffers``; 0 is the empty
                           sentinel buffer), ``name``, ``quantization``, ``is_variable``,
                           ``sparsity`` (only whether present), ``shape_signature`` (-1:
                           a dimension unknown until run time)
``QuantizationParameters`` :class:`Quantization`: ``min``, ``max``, ``scale``,
                           ``zero_point``, ``quantized_dimension`` (``details``: only
                           its union type)
``Operator``               :class:`Operator`: ``opcode_index``, ``inputs`` (-1: an
                           optional input left out), ``outputs``, ``builtin_options``
                           (a union, :data:`BUILTIN_OPTIONS`), ``intermediates``; custom
                           options only as a byte count
``Buffer``                 :class:`Buffer`: ``data`` (bytes), or ``offset`` and ``size``
                           for models over 2 GB, whose data follows the FlatBuffer in
                           the file (``offset`` counted from the start of the file; an
                           offset of 0 or 1 means none)
options tables             :class:`LSTMOptions`, :class:`UnidirectionalSequenceLSTMOptions`,
                           :class:`BidirectionalSequenceLSTMOptions`,
                           :class:`SequenceRNNOptions`,
                           :class:`BidirectionalSequenceRNNOptions`, :class:`RNNOptions`;
                           any other options table is kept as :class:`OtherOptions`,
                           with the fields of those in :data:`PLAIN_OPTIONS` (WHILE's
                           subgraphs, GATHER's axis, FULLY_CONNECTED's activation …)
=========================  ==========================================================

Not decoded (skipped, as FlatBuffers skips fields it does not know): signature defs,
sparsity details, variant tensors, external buffer groups, ``builtin_options_2``, custom
options' contents, debug metadata. A missing field has the schema's default.

Limits are :mod:`rnnport.io.flatbuffer`'s (offsets, vectors, depth, a visit budget, vectors
of numbers decoded once and charged against the ``expansion`` limit), plus: a ``Tensor``,
``Operator`` or ``QuantizationParameters`` table that many others point at decoded once (a
file can point every tensor at one quantization table holding megabytes of scales), at
most :data:`MAX_RANK` dimensions, every index (an operator's opcode, a tensor's buffer, an
operator's or subgraph's tensor) checked against what it indexes, and an external buffer's
offset and size checked against the file. :func:`tensor_array` checks a tensor's type and
shape against its buffer's byte count before anything is allocated. Every malformed file
raises :class:`~rnnport.errors.FormatError` naming where, e.g. ``model.tflite:
subgraphs[0].operators[3].inputs: vector of 2,147,483,648 int32 runs past the end of the
1,204-byte file``.

The fused LSTM's 24 inputs (:data:`LSTM_INPUTS`)
-----------------------------------------------
``LSTM`` and ``UNIDIRECTIONAL_SEQUENCE_LSTM`` take the same inputs, in this order
(``tensorflow/lite/kernels/lstm_shared.h``); ``-1`` leaves an optional one out (the
input-gate tensors for CIFG, peepholes, projection, layer norm). Weights are ``(hidden,
input)`` and ``(hidden, hidden)`` per gate (rows are output units), biases ``(hidden,)``:

    0 input, 1-4 input_to_{input,forget,cell,output}_weights,
    5-8 recurrent_to_{input,forget,cell,output}_weights,
    9-11 cell_to_{input,forget,output}_weights (peepholes),
    12-15 {input,forget,cell,output}_gate_bias, 16 projection_weights,
    17 projection_bias, 18 output_state (h), 19 cell_state (c),
    20-23 {input,forget,cell,output}_layer_norm_coefficients

    i = σ(W_i x + R_i h + P_i ⊙ c + b_i)      f = σ(W_f x + R_f h + P_f ⊙ c + b_f)
    g = act(W_c x + R_c h + b_c)               c' = f ⊙ c + i ⊙ g   (clipped to cell_clip)
    o = σ(W_o x + R_o h + P_o ⊙ c' + b_o)      h' = o ⊙ act(c')     (projected, clipped)

``UNIDIRECTIONAL_SEQUENCE_RNN`` and ``RNN`` take :data:`RNN_INPUTS`: ``input, input_weights
(hidden, input), recurrent_weights (hidden, hidden), bias, hidden_state``; ``h' =
act(W x + R h + b)``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from types import MappingProxyType

import numpy as np

from ..errors import DTypeError, FormatError, UnsupportedFeatureError
from .flatbuffer import FlatBuffer, Table, slot
from .inputs import read_file

__all__ = [
    "ACTIVATIONS",
    "BIDIRECTIONAL_SEQUENCE_LSTM",
    "BIDIRECTIONAL_SEQUENCE_RNN",
    "BUILTIN_OPERATORS",
    "BUILTIN_OPTIONS",
    "FIELDS",
    "FILE_IDENTIFIER",
    "LSTM",
    "LSTM_INPUTS",
    "LSTM_KERNEL_TYPES",
    "MAX_RANK",
    "PLAIN_OPTIONS",
    "RNN",
    "RNN_INPUTS",
    "TENSOR_TYPES",
    "UNIDIRECTIONAL_SEQUENCE_LSTM",
    "UNIDIRECTIONAL_SEQUENCE_RNN",
    "BidirectionalSequenceLSTMOptions",
    "BidirectionalSequenceRNNOptions",
    "Buffer",
    "LSTMOptions",
    "Metadata",
    "Model",
    "Operator",
    "OperatorCode",
    "OtherOptions",
    "Quantization",
    "RNNOptions",
    "SequenceRNNOptions",
    "SubGraph",
    "Tensor",
    "UnidirectionalSequenceLSTMOptions",
    "decode_model",
    "operator_name",
    "read_model",
    "tensor_array",
]

FILE_IDENTIFIER = b"TFL3"
MAX_RANK = 254

# -- enums, as schema.fbs numbers them -------------------------------------------------------------

# BuiltinOperator: every value TensorFlow 2.21's schema defines.
BUILTIN_OPERATORS: dict[int, str] = {
    0: "ADD", 1: "AVERAGE_POOL_2D", 2: "CONCATENATION", 3: "CONV_2D", 4: "DEPTHWISE_CONV_2D",
    5: "DEPTH_TO_SPACE", 6: "DEQUANTIZE", 7: "EMBEDDING_LOOKUP", 8: "FLOOR", 9: "FULLY_CONNECTED",
    10: "HASHTABLE_LOOKUP", 11: "L2_NORMALIZATION", 12: "L2_POOL_2D",
    13: "LOCAL_RESPONSE_NORMALIZATION", 14: "LOGISTIC", 15: "LSH_PROJECTION", 16: "LSTM",
    17: "MAX_POOL_2D", 18: "MUL", 19: "RELU", 20: "RELU_N1_TO_1", 21: "RELU6", 22: "RESHAPE",
    23: "RESIZE_BILINEAR", 24: "RNN", 25: "SOFTMAX", 26: "SPACE_TO_DEPTH", 27: "SVDF", 28: "TANH",
    29: "CONCAT_EMBEDDINGS", 30: "SKIP_GRAM", 31: "CALL", 32: "CUSTOM", 33: "EMBEDDING_LOOKUP_SPARSE",
    34: "PAD", 35: "UNIDIRECTIONAL_SEQUENCE_RNN", 36: "GATHER", 37: "BATCH_TO_SPACE_ND",
    38: "SPACE_TO_BATCH_ND", 39: "TRANSPOSE", 40: "MEAN", 41: "SUB", 42: "DIV", 43: "SQUEEZE",
    44: "UNIDIRECTIONAL_SEQUENCE_LSTM", 45: "STRIDED_SLICE", 46: "BIDIRECTIONAL_SEQUENCE_RNN",
    47: "EXP", 48: "TOPK_V2", 49: "SPLIT", 50: "LOG_SOFTMAX", 51: "DELEGATE",
    52: "BIDIRECTIONAL_SEQUENCE_LSTM", 53: "CAST", 54: "PRELU", 55: "MAXIMUM", 56: "ARG_MAX",
    57: "MINIMUM", 58: "LESS", 59: "NEG", 60: "PADV2", 61: "GREATER", 62: "GREATER_EQUAL",
    63: "LESS_EQUAL", 64: "SELECT", 65: "SLICE", 66: "SIN", 67: "TRANSPOSE_CONV",
    68: "SPARSE_TO_DENSE", 69: "TILE", 70: "EXPAND_DIMS", 71: "EQUAL", 72: "NOT_EQUAL", 73: "LOG",
    74: "SUM", 75: "SQRT", 76: "RSQRT", 77: "SHAPE", 78: "POW", 79: "ARG_MIN", 80: "FAKE_QUANT",
    81: "REDUCE_PROD", 82: "REDUCE_MAX", 83: "PACK", 84: "LOGICAL_OR", 85: "ONE_HOT",
    86: "LOGICAL_AND", 87: "LOGICAL_NOT", 88: "UNPACK", 89: "REDUCE_MIN", 90: "FLOOR_DIV",
    91: "REDUCE_ANY", 92: "SQUARE", 93: "ZEROS_LIKE", 94: "FILL", 95: "FLOOR_MOD", 96: "RANGE",
    97: "RESIZE_NEAREST_NEIGHBOR", 98: "LEAKY_RELU", 99: "SQUARED_DIFFERENCE", 100: "MIRROR_PAD",
    101: "ABS", 102: "SPLIT_V", 103: "UNIQUE", 104: "CEIL", 105: "REVERSE_V2", 106: "ADD_N",
    107: "GATHER_ND", 108: "COS", 109: "WHERE", 110: "RANK", 111: "ELU", 112: "REVERSE_SEQUENCE",
    113: "MATRIX_DIAG", 114: "QUANTIZE", 115: "MATRIX_SET_DIAG", 116: "ROUND", 117: "HARD_SWISH",
    118: "IF", 119: "WHILE", 120: "NON_MAX_SUPPRESSION_V4", 121: "NON_MAX_SUPPRESSION_V5",
    122: "SCATTER_ND", 123: "SELECT_V2", 124: "DENSIFY", 125: "SEGMENT_SUM", 126: "BATCH_MATMUL",
    127: "PLACEHOLDER_FOR_GREATER_OP_CODES", 128: "CUMSUM", 129: "CALL_ONCE", 130: "BROADCAST_TO",
    131: "RFFT2D", 132: "CONV_3D", 133: "IMAG", 134: "REAL", 135: "COMPLEX_ABS", 136: "HASHTABLE",
    137: "HASHTABLE_FIND", 138: "HASHTABLE_IMPORT", 139: "HASHTABLE_SIZE", 140: "REDUCE_ALL",
    141: "CONV_3D_TRANSPOSE", 142: "VAR_HANDLE", 143: "READ_VARIABLE", 144: "ASSIGN_VARIABLE",
    145: "BROADCAST_ARGS", 146: "RANDOM_STANDARD_NORMAL", 147: "BUCKETIZE", 148: "RANDOM_UNIFORM",
    149: "MULTINOMIAL", 150: "GELU", 151: "DYNAMIC_UPDATE_SLICE", 152: "RELU_0_TO_1",
    153: "UNSORTED_SEGMENT_PROD", 154: "UNSORTED_SEGMENT_MAX", 155: "UNSORTED_SEGMENT_SUM",
    156: "ATAN2", 157: "UNSORTED_SEGMENT_MIN", 158: "SIGN", 159: "BITCAST", 160: "BITWISE_XOR",
    161: "RIGHT_SHIFT", 162: "STABLEHLO_LOGISTIC", 163: "STABLEHLO_ADD", 164: "STABLEHLO_DIVIDE",
    165: "STABLEHLO_MULTIPLY", 166: "STABLEHLO_MAXIMUM", 167: "STABLEHLO_RESHAPE",
    168: "STABLEHLO_CLAMP", 169: "STABLEHLO_CONCATENATE", 170: "STABLEHLO_BROADCAST_IN_DIM",
    171: "STABLEHLO_CONVOLUTION", 172: "STABLEHLO_SLICE", 173: "STABLEHLO_CUSTOM_CALL",
    174: "STABLEHLO_REDUCE", 175: "STABLEHLO_ABS", 176: "STABLEHLO_AND", 177: "STABLEHLO_COSINE",
    178: "STABLEHLO_EXPONENTIAL", 179: "STABLEHLO_FLOOR", 180: "STABLEHLO_LOG",
    181: "STABLEHLO_MINIMUM", 182: "STABLEHLO_NEGATE", 183: "STABLEHLO_OR", 184: "STABLEHLO_POWER",
    185: "STABLEHLO_REMAINDER", 186: "STABLEHLO_RSQRT", 187: "STABLEHLO_SELECT",
    188: "STABLEHLO_SUBTRACT", 189: "STABLEHLO_TANH", 190: "STABLEHLO_SCATTER",
    191: "STABLEHLO_COMPARE", 192: "STABLEHLO_CONVERT", 193: "STABLEHLO_DYNAMIC_SLICE",
    194: "STABLEHLO_DYNAMIC_UPDATE_SLICE", 195: "STABLEHLO_PAD", 196: "STABLEHLO_IOTA",
    197: "STABLEHLO_DOT_GENERAL", 198: "STABLEHLO_REDUCE_WINDOW", 199: "STABLEHLO_SORT",
    200: "STABLEHLO_WHILE", 201: "STABLEHLO_GATHER", 202: "STABLEHLO_TRANSPOSE", 203: "DILATE",
    204: "STABLEHLO_RNG_BIT_GENERATOR", 205: "REDUCE_WINDOW", 206: "STABLEHLO_COMPOSITE",
    207: "STABLEHLO_SHIFT_LEFT", 208: "STABLEHLO_CBRT", 209: "STABLEHLO_CASE",
}
LSTM = 16
RNN = 24
UNIDIRECTIONAL_SEQUENCE_RNN = 35
BIDIRECTIONAL_SEQUENCE_RNN = 46
BIDIRECTIONAL_SEQUENCE_LSTM = 52
UNIDIRECTIONAL_SEQUENCE_LSTM = 44

# TensorType -> (name, NumPy dtype or None where NumPy has no plain equivalent).
TENSOR_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("FLOAT32", "<f4"), 1: ("FLOAT16", "<f2"), 2: ("INT32", "<i4"), 3: ("UINT8", "u1"),
    4: ("INT64", "<i8"), 5: ("STRING", None), 6: ("BOOL", "?"), 7: ("INT16", "<i2"),
    8: ("COMPLEX64", "<c8"), 9: ("INT8", "i1"), 10: ("FLOAT64", "<f8"), 11: ("COMPLEX128", "<c16"),
    12: ("UINT64", "<u8"), 13: ("RESOURCE", None), 14: ("VARIANT", None), 15: ("UINT32", "<u4"),
    16: ("UINT16", "<u2"), 17: ("INT4", None), 18: ("BFLOAT16", None), 19: ("INT2", None),
    20: ("UINT4", None), 21: ("FLOAT8_E4M3FN", None), 22: ("FLOAT8_E5M2", None),
}
# Integer types that hold quantized values when the tensor has a scale.
_QUANTIZABLE = {"INT8", "UINT8", "INT16", "INT32", "INT64", "INT4", "UINT4", "INT2"}

ACTIVATIONS: dict[int, str] = {0: "NONE", 1: "RELU", 2: "RELU_N1_TO_1", 3: "RELU6", 4: "TANH",
                               5: "SIGN_BIT"}
LSTM_KERNEL_TYPES: dict[int, str] = {0: "FULL", 1: "BASIC"}

# BuiltinOptions union members this module decodes (type number -> table name).
BUILTIN_OPTIONS: dict[int, str] = {
    7: "RNNOptions", 14: "LSTMOptions", 31: "SequenceRNNOptions",
    69: "BidirectionalSequenceLSTMOptions", 70: "BidirectionalSequenceRNNOptions",
    71: "UnidirectionalSequenceLSTMOptions",
}

LSTM_INPUTS: tuple[str, ...] = (
    "input",
    "input_to_input_weights", "input_to_forget_weights", "input_to_cell_weights",
    "input_to_output_weights",
    "recurrent_to_input_weights", "recurrent_to_forget_weights", "recurrent_to_cell_weights",
    "recurrent_to_output_weights",
    "cell_to_input_weights", "cell_to_forget_weights", "cell_to_output_weights",
    "input_gate_bias", "forget_gate_bias", "cell_gate_bias", "output_gate_bias",
    "projection_weights", "projection_bias",
    "output_state", "cell_state",
    "input_layer_norm_coefficients", "forget_layer_norm_coefficients",
    "cell_layer_norm_coefficients", "output_layer_norm_coefficients",
)
RNN_INPUTS: tuple[str, ...] = ("input", "input_weights", "recurrent_weights", "bias", "hidden_state")

# -- tables: field name -> index in the schema (vtable slot 4 + 2 * index) ---------------------------

FIELDS: dict[str, dict[str, int]] = {
    "Model": {"version": 0, "operator_codes": 1, "subgraphs": 2, "description": 3, "buffers": 4,
              "metadata_buffer": 5, "metadata": 6, "signature_defs": 7},
    "OperatorCode": {"deprecated_builtin_code": 0, "custom_code": 1, "version": 2, "builtin_code": 3},
    "SubGraph": {"tensors": 0, "inputs": 1, "outputs": 2, "operators": 3, "name": 4},
    "Tensor": {"shape": 0, "type": 1, "buffer": 2, "name": 3, "quantization": 4, "is_variable": 5,
               "sparsity": 6, "shape_signature": 7, "has_rank": 8},
    "QuantizationParameters": {"min": 0, "max": 1, "scale": 2, "zero_point": 3, "details_type": 4,
                               "details": 5, "quantized_dimension": 6},
    "Operator": {"opcode_index": 0, "inputs": 1, "outputs": 2, "builtin_options_type": 3,
                 "builtin_options": 4, "custom_options": 5, "custom_options_format": 6,
                 "mutating_variable_inputs": 7, "intermediates": 8},
    "Buffer": {"data": 0, "offset": 1, "size": 2},
    "Metadata": {"name": 0, "buffer": 1},
    "LSTMOptions": {"fused_activation_function": 0, "cell_clip": 1, "proj_clip": 2, "kernel_type": 3,
                    "asymmetric_quantize_inputs": 4},
    "UnidirectionalSequenceLSTMOptions": {"fused_activation_function": 0, "cell_clip": 1,
                                          "proj_clip": 2, "time_major": 3,
                                          "asymmetric_quantize_inputs": 4,
                                          "diagonal_recurrent_tensors": 5},
    "BidirectionalSequenceLSTMOptions": {"fused_activation_function": 0, "cell_clip": 1,
                                         "proj_clip": 2, "merge_outputs": 3, "time_major": 4,
                                         "asymmetric_quantize_inputs": 5},
    "SequenceRNNOptions": {"time_major": 0, "fused_activation_function": 1,
                           "asymmetric_quantize_inputs": 2},
    "BidirectionalSequenceRNNOptions": {"time_major": 0, "fused_activation_function": 1,
                                        "merge_outputs": 2, "asymmetric_quantize_inputs": 3},
    "RNNOptions": {"fused_activation_function": 0, "asymmetric_quantize_inputs": 1},
}

# The options tables of plain builtins (decoded as OtherOptions.values, and written by
# rnnport's writer): table -> (BuiltinOptions union number, {field: (index, scalar kind)}),
# from schema.fbs (LiteRT 2.3's schema_py_generated).
PLAIN_OPTIONS: dict[str, tuple[int, dict[str, tuple[int, str]]]] = {
    "FullyConnectedOptions": (8, {"fused_activation_function": (0, "int8"),
                                  "weights_format": (1, "int8"), "keep_num_dims": (2, "bool")}),
    "ConcatenationOptions": (10, {"axis": (0, "int32"), "fused_activation_function": (1, "int8")}),
    "AddOptions": (11, {"fused_activation_function": (0, "int8")}),
    "ReshapeOptions": (17, {}),
    "MulOptions": (21, {"fused_activation_function": (0, "int8")}),
    "GatherOptions": (23, {"axis": (0, "int32"), "batch_dims": (1, "int32")}),
    "SubOptions": (28, {"fused_activation_function": (0, "int8")}),
    "StridedSliceOptions": (32, {"begin_mask": (0, "int32"), "end_mask": (1, "int32"),
                                 "ellipsis_mask": (2, "int32"), "new_axis_mask": (3, "int32"),
                                 "shrink_axis_mask": (4, "int32"), "offset": (5, "bool")}),
    "SplitOptions": (35, {"num_splits": (0, "int32")}),
    "SplitVOptions": (79, {"num_splits": (0, "int32")}),
    "LessOptions": (41, {}),
    "ShapeOptions": (55, {"out_type": (0, "int8")}),
    "PackOptions": (59, {"values_count": (0, "int32"), "axis": (1, "int32")}),
    "FillOptions": (68, {}),
    "ReverseV2Options": (81, {}),
    "WhileOptions": (93, {"cond_subgraph_index": (0, "int32"), "body_subgraph_index": (1, "int32")}),
    "DynamicUpdateSliceOptions": (117, {}),
    # Resource variables (decoded, never written): a CALL_ONCE's initializer subgraph, and a
    # VAR_HANDLE's variable, which handles in other subgraphs name alike.
    "CallOnceOptions": (103, {"init_subgraph_index": (0, "int32")}),
    "VarHandleOptions": (111, {"container": (0, "string"), "shared_name": (1, "string")}),
}
_PLAIN_BY_NUMBER = {number: fields for number, fields in PLAIN_OPTIONS.values()}


def _at(table_name: str, field_name: str) -> int:
    return slot(FIELDS[table_name][field_name])


def operator_name(code: int) -> str:
    return BUILTIN_OPERATORS.get(code, f"BUILTIN_{code}")


# -- the decoded model ------------------------------------------------------------------------------

@dataclass(frozen=True)
class LSTMOptions:
    fused_activation_function: int = 0
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    kernel_type: int = 0
    asymmetric_quantize_inputs: bool = False


@dataclass(frozen=True)
class UnidirectionalSequenceLSTMOptions:
    fused_activation_function: int = 0
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    time_major: bool = False
    asymmetric_quantize_inputs: bool = False
    diagonal_recurrent_tensors: bool = False


@dataclass(frozen=True)
class BidirectionalSequenceLSTMOptions:
    fused_activation_function: int = 0
    cell_clip: float = 0.0
    proj_clip: float = 0.0
    merge_outputs: bool = False
    time_major: bool = True
    asymmetric_quantize_inputs: bool = False


@dataclass(frozen=True)
class SequenceRNNOptions:
    time_major: bool = False
    fused_activation_function: int = 0
    asymmetric_quantize_inputs: bool = False


@dataclass(frozen=True)
class BidirectionalSequenceRNNOptions:
    time_major: bool = False
    fused_activation_function: int = 0
    merge_outputs: bool = False
    asymmetric_quantize_inputs: bool = False


@dataclass(frozen=True)
class RNNOptions:
    fused_activation_function: int = 0
    asymmetric_quantize_inputs: bool = False


@dataclass(frozen=True)
class OtherOptions:
    """Another builtin options table: its union type number and, for the tables in
    :data:`PLAIN_OPTIONS`, its fields' values (absent fields at the schema's default, 0)."""

    type: int
    values: Mapping[str, int | str] = field(default_factory=lambda: MappingProxyType({}), compare=False)


Options = (LSTMOptions | UnidirectionalSequenceLSTMOptions | BidirectionalSequenceLSTMOptions
           | SequenceRNNOptions | BidirectionalSequenceRNNOptions | RNNOptions | OtherOptions)
_OPTION_CLASSES: dict[int, type] = {
    7: RNNOptions, 14: LSTMOptions, 31: SequenceRNNOptions, 69: BidirectionalSequenceLSTMOptions,
    70: BidirectionalSequenceRNNOptions, 71: UnidirectionalSequenceLSTMOptions,
}


@dataclass(frozen=True)
class OperatorCode:
    builtin_code: int  # max(builtin_code, deprecated_builtin_code) as stored
    custom_code: str | None = None
    version: int = 1
    deprecated_builtin_code: int = 0

    @property
    def name(self) -> str:
        return self.custom_code if self.builtin_code == 32 and self.custom_code else \
            operator_name(self.builtin_code)


@dataclass(frozen=True)
class Quantization:
    min: tuple[float, ...] = ()
    max: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    quantized_dimension: int = 0
    details_type: int = 0

    @property
    def quantized(self) -> bool:
        return bool(self.scale) or self.details_type != 0


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    type: int
    buffer: int
    quantization: Quantization | None = None
    is_variable: bool = False
    shape_signature: tuple[int, ...] | None = None
    has_sparsity: bool = False

    @property
    def type_name(self) -> str:
        return TENSOR_TYPES.get(self.type, (f"TensorType {self.type}", None))[0]

    @property
    def signature(self) -> tuple[int | None, ...]:
        """The shape with ``None`` where ``shape_signature`` says -1 (known only at run time)."""
        if self.shape_signature is None or len(self.shape_signature) != len(self.shape):
            return self.shape
        return tuple(None if s == -1 else d for d, s in zip(self.shape, self.shape_signature, strict=True))


@dataclass(frozen=True)
class Operator:
    opcode_index: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    builtin_options_type: int = 0
    builtin_options: Options | None = None
    intermediates: tuple[int, ...] = ()
    custom_options_bytes: int = 0


@dataclass(frozen=True)
class SubGraph:
    tensors: tuple[Tensor, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    operators: tuple[Operator, ...]
    name: str | None = None


@dataclass(frozen=True, eq=False)
class Buffer:
    """A buffer's bytes (a read-only view of the file) and, for data stored after the
    FlatBuffer, where it was (``offset`` from the start of the file, ``size``)."""

    data: memoryview = field(repr=False)
    offset: int = 0
    size: int = 0


@dataclass(frozen=True)
class Metadata:
    name: str | None
    buffer: int


@dataclass(frozen=True)
class Model:
    version: int
    operator_codes: tuple[OperatorCode, ...]
    subgraphs: tuple[SubGraph, ...]
    buffers: tuple[Buffer, ...] = field(repr=False)
    description: str | None = None
    metadata: tuple[Metadata, ...] = ()
    source: str = "<bytes>"

    def operator_code(self, operator: Operator) -> int:
        return self.operator_codes[operator.opcode_index].builtin_code

    def operator_names(self, subgraph: int = 0) -> list[str]:
        return [self.operator_codes[op.opcode_index].name for op in self.subgraphs[subgraph].operators]


# -- decoding ---------------------------------------------------------------------------------------

def _ints(table: Table, table_name: str, field_name: str, dtype: str = "<i4") -> tuple[int, ...]:
    return table.values(_at(table_name, field_name), dtype, field_name) or ()


def _floats(table: Table, table_name: str, field_name: str) -> tuple[float, ...]:
    return table.values(_at(table_name, field_name), "<f4", field_name) or ()


def _decode_options(table: Table, kind: int) -> Options:
    cls = _OPTION_CLASSES.get(kind)
    if cls is None:
        plain = _PLAIN_BY_NUMBER.get(kind, {})
        return OtherOptions(kind, MappingProxyType({
            name: (table.string(slot(index), name) or "") if kind_name == "string" else
            table.integer(slot(index), kind_name, name)
            for name, (index, kind_name) in plain.items()}))
    table_name = BUILTIN_OPTIONS[kind]
    values: dict[str, int | float | bool] = {}
    for option in fields(cls):  # the dataclass's defaults are the schema's
        name, default = option.name, option.default
        if isinstance(default, bool):
            values[name] = table.flag(_at(table_name, name), name, default)
        elif isinstance(default, float):
            values[name] = table.number(_at(table_name, name), name, default)
        else:  # an int8 enum: an activation or the kernel type
            assert isinstance(default, int)
            values[name] = table.integer(_at(table_name, name), "int8", name, default)
    options: Options = cls(**values)
    return options


def _decode_quantization(table: Table) -> Quantization:
    t = "QuantizationParameters"
    return Quantization(
        min=_floats(table, t, "min"), max=_floats(table, t, "max"), scale=_floats(table, t, "scale"),
        zero_point=_ints(table, t, "zero_point", "<i8"),
        quantized_dimension=table.integer(_at(t, "quantized_dimension"), "int32", "quantized_dimension"),
        details_type=table.integer(_at(t, "details_type"), "uint8", "details_type"))


def _decode_tensor(table: Table, buffer_count: int) -> Tensor:
    t = "Tensor"
    rank = (MAX_RANK, "dimensions")
    shape: tuple[int, ...] = table.values(_at(t, "shape"), "<i4", "shape", rank) or ()
    signature = table.values(_at(t, "shape_signature"), "<i4", "shape_signature", rank)
    if any(d < 0 for d in shape):
        raise table.buffer.error(f"{table.where}.shape", f"a negative dimension in {list(shape)}; "
                                 "expected sizes of 0 or more (-1 belongs in shape_signature)")
    if signature is not None and any(d < -1 for d in signature):
        raise table.buffer.error(f"{table.where}.shape_signature", f"{list(signature)}; expected "
                                 "sizes of 0 or more, or -1 for a dimension known only at run time")
    buffer = table.integer(_at(t, "buffer"), "uint32", "buffer")
    if buffer >= buffer_count:  # LiteRT refuses it too; every reader indexes Model.buffers
        raise table.buffer.error(f"{table.where}.buffer", f"buffer index {buffer:,}; expected below "
                                 f"{buffer_count:,} (the model's buffers; even buffer 0, the empty "
                                 "sentinel, must be listed)")
    quantization = table.table(_at(t, "quantization"), "quantization")
    tensor_name = table.string(_at(t, "name"), "name")
    return Tensor(
        name=tensor_name or "", shape=shape, buffer=buffer,
        type=table.integer(_at(t, "type"), "int8", "type"),
        quantization=None if quantization is None else table.buffer.once(
            ("quantization", quantization.position), lambda: _decode_quantization(quantization)),
        is_variable=table.flag(_at(t, "is_variable"), "is_variable"), shape_signature=signature,
        has_sparsity=table.field(_at(t, "sparsity"), 4, "sparsity") != 0)


def _check_indices(table: Table, name: str, indices: tuple[int, ...], count: int, what: str,
                   optional: bool = False) -> None:
    low = -1 if optional else 0
    for index in indices:
        if not low <= index < count:
            raise table.buffer.error(f"{table.where}.{name}", f"index {index:,}; expected "
                                     f"{'-1 (left out) or ' if optional else ''}0 to {count - 1:,} "
                                     f"({count:,} {what})")


def _decode_operator(table: Table, opcode_count: int, tensor_count: int) -> Operator:
    t = "Operator"
    opcode_index = table.integer(_at(t, "opcode_index"), "uint32", "opcode_index")
    _check_indices(table, "opcode_index", (opcode_index,), opcode_count, "operator codes")
    inputs, outputs = _ints(table, t, "inputs"), _ints(table, t, "outputs")
    intermediates = _ints(table, t, "intermediates")
    _check_indices(table, "inputs", inputs, tensor_count, "tensors", optional=True)
    _check_indices(table, "outputs", outputs, tensor_count, "tensors")
    _check_indices(table, "intermediates", intermediates, tensor_count, "tensors")
    kind, options_table = table.union(_at(t, "builtin_options_type"), _at(t, "builtin_options"),
                                      "builtin_options")
    custom = table.bytes_vector(_at(t, "custom_options"), "custom_options")
    return Operator(opcode_index=opcode_index, inputs=inputs, outputs=outputs, builtin_options_type=kind,
                    builtin_options=None if options_table is None else _decode_options(options_table, kind),
                    intermediates=intermediates, custom_options_bytes=0 if custom is None else len(custom))


def _decode_subgraph(table: Table, opcode_count: int, buffer_count: int) -> SubGraph:
    t = "SubGraph"
    once = table.buffer.once
    tensors = tuple(once(("tensor", x.position, buffer_count), partial(_decode_tensor, x, buffer_count))
                    for x in table.tables(_at(t, "tensors"), "tensors"))
    inputs, outputs = _ints(table, t, "inputs"), _ints(table, t, "outputs")
    _check_indices(table, "inputs", inputs, len(tensors), "tensors")
    _check_indices(table, "outputs", outputs, len(tensors), "tensors")
    operators = tuple(once(("operator", x.position, opcode_count, len(tensors)),
                           partial(_decode_operator, x, opcode_count, len(tensors)))
                      for x in table.tables(_at(t, "operators"), "operators"))
    return SubGraph(tensors=tensors, inputs=inputs, outputs=outputs, operators=operators,
                    name=table.string(_at(t, "name"), "name"))


def _decode_buffer(table: Table) -> Buffer:
    t = "Buffer"
    data = table.bytes_vector(_at(t, "data"), "data")
    offset = table.integer(_at(t, "offset"), "uint64", "offset")
    size = table.integer(_at(t, "size"), "uint64", "size")
    if offset > 1:
        file = table.buffer
        if size > file.size or offset > file.size - size:
            raise file.error(f"{table.where}", f"data of {size:,} bytes at byte {offset:,} (stored after "
                                               f"the FlatBuffer) runs past the end of the "
                                               f"{file.size:,}-byte file")
        if data is not None and len(data):
            raise file.error(f"{table.where}", "both data and an offset; expected one of them")
        data = file.data[offset:offset + size]
    return Buffer(data=data if data is not None else memoryview(b""), offset=offset, size=size)


def decode_model(data: bytes | bytearray | memoryview, *, source: str = "<bytes>") -> Model:
    """Decode a ``.tflite`` file's bytes (see the module's docstring for what is read)."""
    if isinstance(data, memoryview):
        data = data.toreadonly()
    elif isinstance(data, bytearray):
        data = bytes(data)  # a view of a bytearray would change with it
    buffer = FlatBuffer(data, source=source, identifier=FILE_IDENTIFIER)
    root = buffer.root("Model")
    root = Table(root.buffer, root.position, root.vtable, root.vtable_size, root.table_size, "", 0)
    t = "Model"
    opcodes = []
    for code in root.tables(_at(t, "operator_codes"), "operator_codes"):
        deprecated = code.integer(_at("OperatorCode", "deprecated_builtin_code"), "int8",
                                  "deprecated_builtin_code")
        builtin = code.integer(_at("OperatorCode", "builtin_code"), "int32", "builtin_code")
        opcodes.append(OperatorCode(
            builtin_code=max(builtin, deprecated),
            custom_code=code.string(_at("OperatorCode", "custom_code"), "custom_code"),
            version=code.integer(_at("OperatorCode", "version"), "int32", "version", 1),
            deprecated_builtin_code=deprecated))
    buffers = tuple(_decode_buffer(b) for b in root.tables(_at(t, "buffers"), "buffers"))
    subgraphs = tuple(_decode_subgraph(g, len(opcodes), len(buffers))
                      for g in root.tables(_at(t, "subgraphs"), "subgraphs"))
    metadata = []
    for entry in root.tables(_at(t, "metadata"), "metadata"):
        index = entry.integer(_at("Metadata", "buffer"), "uint32", "buffer")
        _check_indices(entry, "buffer", (index,), len(buffers), "buffers")
        metadata.append(Metadata(entry.string(_at("Metadata", "name"), "name"), index))
    return Model(version=root.integer(_at(t, "version"), "uint32", "version"),
                 operator_codes=tuple(opcodes), subgraphs=subgraphs, buffers=buffers,
                 description=root.string(_at(t, "description"), "description"),
                 metadata=tuple(metadata), source=source)


def read_model(path: str | os.PathLike[str]) -> Model:
    """Read and decode a ``.tflite`` file."""
    path = Path(path)
    data = read_file(path, str(path))
    return decode_model(data, source=str(path))


def tensor_array(model: Model, tensor: Tensor | int, *, subgraph: int = 0, raw: bool = False) -> np.ndarray:
    """A constant tensor's values, shape ``tensor.shape``, read-only (a view of the file).

    Quantized tensors (a scale, or an integer type with quantization details) and types with
    no plain NumPy equivalent are refused (:class:`~rnnport.errors.DTypeError`) unless
    ``raw=True``, which returns the stored integers as they are (``INT4``, ``UINT4``,
    ``INT2`` and ``BFLOAT16`` then come back as their bytes, ``uint8``/``uint16``).
    """
    graph = model.subgraphs[subgraph]
    if isinstance(tensor, int):
        tensor = graph.tensors[tensor]
    where = f"{model.source}: subgraphs[{subgraph}] tensor '{tensor.name}'"
    type_name, dtype = TENSOR_TYPES.get(tensor.type, (f"TensorType {tensor.type}", None))
    data = model.buffers[tensor.buffer].data
    if not len(data):
        raise FormatError(f"{where}: has no data (buffer {tensor.buffer} is empty); expected a "
                          "constant: this tensor is computed at run time")
    quantized = tensor.quantization is not None and tensor.quantization.quantized
    if quantized and not raw:
        q = tensor.quantization
        assert q is not None
        raise DTypeError(f"{where}: holds quantized {type_name} values (scale {list(q.scale)[:4]}, "
                         f"zero point {list(q.zero_point)[:4]}); expected float values. The numbers "
                         "would change in dequantizing: ask for raw=True to get the stored integers.")
    if dtype is None:
        if not raw or type_name in ("STRING", "RESOURCE", "VARIANT"):
            raise DTypeError(f"{where}: is {type_name}, which has no NumPy equivalent"
                             + ("" if type_name in ("STRING", "RESOURCE", "VARIANT")
                                else "; ask for raw=True to get its bytes"))
    numpy_type = dtype or ("<u2" if type_name == "BFLOAT16" else "u1")
    if raw and type_name in ("INT4", "UINT4", "INT2"):
        return np.frombuffer(data, dtype="u1")
    count = 1
    for dim in tensor.shape:
        count *= dim
    itemsize = np.dtype(numpy_type).itemsize
    if count * itemsize != len(data):
        raise FormatError(f"{where}: {type_name} {list(tensor.shape)} needs {count * itemsize:,} bytes, "
                          f"its buffer {tensor.buffer} holds {len(data):,}")
    if tensor.has_sparsity:
        raise UnsupportedFeatureError(f"{where}: is stored sparse; expected a dense tensor")
    array = np.frombuffer(data, dtype=numpy_type).reshape(tensor.shape)
    array.flags.writeable = False
    return array
