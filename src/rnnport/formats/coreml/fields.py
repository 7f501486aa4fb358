"""The field numbers of Apple's ``Model.proto`` and ``NeuralNetwork.proto`` that rnnport
reads and writes, and the protocol-buffer plumbing for them (NumPy and the wire format).

``FIELDS`` names each message's fields as the ``.proto`` files do; a test checks every
number against the descriptors coremltools ships. :func:`message` splits one message into
its fields; :func:`weights` decodes a ``WeightParams``; the ``put_*`` functions encode.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import numpy as np

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...io._proto import ProtoError, fields, key, varint

__all__ = ["ACTIVATIONS", "FIELDS", "LAYER_TYPES", "Message", "message", "put_bytes",
           "put_float", "put_varint", "weights"]

FIELDS: dict[str, dict[str, int]] = {
    "Model": {"specificationVersion": 1, "description": 2, "pipelineClassifier": 200,
              "pipelineRegressor": 201, "pipeline": 202, "neuralNetworkRegressor": 303,
              "neuralNetworkClassifier": 403, "neuralNetwork": 500, "mlProgram": 502},
    "ModelDescription": {"input": 1, "output": 10},
    "FeatureDescription": {"name": 1, "type": 3},
    "FeatureType": {"multiArrayType": 5},
    "ArrayFeatureType": {"shape": 1, "dataType": 2, "shapeRange": 31},
    "ArrayFeatureType.ShapeRange": {"sizeRanges": 1},
    "SizeRange": {"lowerBound": 1, "upperBound": 2},
    "Pipeline": {"models": 1, "names": 2},
    "PipelineClassifier": {"pipeline": 1},
    "PipelineRegressor": {"pipeline": 1},
    "NeuralNetwork": {"layers": 1, "arrayInputShapeMapping": 5},
    "NeuralNetworkClassifier": {"layers": 1},
    "NeuralNetworkRegressor": {"layers": 1},
    "NeuralNetworkLayer": {"name": 1, "input": 2, "output": 3, "simpleRecurrent": 400,
                           "gru": 410, "uniDirectionalLSTM": 420, "biDirectionalLSTM": 430,
                           "concat": 320, "loop": 615, "reverse": 960, "slice": 350},
    "ConcatLayerParams": {"sequenceConcat": 100},
    "ReverseLayerParams": {"reverseDim": 1},
    "UniDirectionalLSTMLayerParams": {"inputVectorSize": 1, "outputVectorSize": 2,
                                      "activations": 10, "params": 15, "weightParams": 20,
                                      "reverseInput": 100},
    "BiDirectionalLSTMLayerParams": {"inputVectorSize": 1, "outputVectorSize": 2,
                                     "activationsForwardLSTM": 10,
                                     "activationsBackwardLSTM": 11, "params": 15,
                                     "weightParams": 20},
    "LSTMParams": {"sequenceOutput": 10, "hasBiasVectors": 20, "forgetBias": 30,
                   "hasPeepholeVectors": 40, "coupledInputAndForgetGate": 50,
                   "cellClipThreshold": 60},
    "LSTMWeightParams": {"inputGateWeightMatrix": 1, "forgetGateWeightMatrix": 2,
                         "blockInputWeightMatrix": 3, "outputGateWeightMatrix": 4,
                         "inputGateRecursionMatrix": 20, "forgetGateRecursionMatrix": 21,
                         "blockInputRecursionMatrix": 22, "outputGateRecursionMatrix": 23,
                         "inputGateBiasVector": 40, "forgetGateBiasVector": 41,
                         "blockInputBiasVector": 42, "outputGateBiasVector": 43,
                         "inputGatePeepholeVector": 60, "forgetGatePeepholeVector": 61,
                         "outputGatePeepholeVector": 62},
    "GRULayerParams": {"inputVectorSize": 1, "outputVectorSize": 2, "activations": 10,
                       "sequenceOutput": 15, "hasBiasVectors": 20,
                       "updateGateWeightMatrix": 30, "resetGateWeightMatrix": 31,
                       "outputGateWeightMatrix": 32, "updateGateRecursionMatrix": 50,
                       "resetGateRecursionMatrix": 51, "outputGateRecursionMatrix": 52,
                       "updateGateBiasVector": 70, "resetGateBiasVector": 71,
                       "outputGateBiasVector": 72, "reverseInput": 100},
    "SimpleRecurrentLayerParams": {"inputVectorSize": 1, "outputVectorSize": 2,
                                   "activation": 10, "sequenceOutput": 15,
                                   "hasBiasVector": 20, "weightMatrix": 30,
                                   "recursionMatrix": 31, "biasVector": 32,
                                   "reverseInput": 100},
    "WeightParams": {"floatValue": 1, "float16Value": 2, "rawValue": 30, "int8RawValue": 31,
                     "quantization": 40},
    "ActivationParams": {"linear": 5, "ReLU": 10, "leakyReLU": 15, "thresholdedReLU": 20,
                         "PReLU": 25, "tanh": 30, "scaledTanh": 31, "sigmoid": 40,
                         "sigmoidHard": 41, "ELU": 50, "softsign": 60, "softplus": 70,
                         "parametricSoftplus": 71},
    "ActivationLinear": {"alpha": 1, "beta": 2},
    "ActivationScaledTanh": {"alpha": 1, "beta": 2},
    "ActivationSigmoidHard": {"alpha": 1, "beta": 2},
    "ActivationLeakyReLU": {"alpha": 1},
    "ActivationThresholdedReLU": {"alpha": 1},
    "ActivationELU": {"alpha": 1},
    "LoopLayerParams": {"maxLoopIterations": 1, "conditionVar": 2, "conditionNetwork": 3,
                        "bodyNetwork": 4},
    "InnerProductLayerParams": {"inputChannels": 1, "outputChannels": 2, "hasBias": 10,
                                "weights": 20, "bias": 21, "int8DynamicQuantize": 22},
    "BatchedMatMulLayerParams": {"transposeA": 1, "transposeB": 2,
                                 "weightMatrixFirstDimension": 5,
                                 "weightMatrixSecondDimension": 6, "hasBias": 7, "weights": 8,
                                 "bias": 9, "int8DynamicQuantize": 10},
    "AddLayerParams": {"alpha": 1},
    "MultiplyLayerParams": {"alpha": 1},
    "GatherLayerParams": {"axis": 1},
    "ScatterLayerParams": {"axis": 1, "mode": 2},
    "LoadConstantNDLayerParams": {"shape": 1, "data": 2},
    "LessThanLayerParams": {"alpha": 2},
    "SliceLayerParams": {"startIndex": 1, "endIndex": 2, "stride": 3, "axis": 4},
    "SplitNDLayerParams": {"axis": 1, "numSplits": 2, "splitSizes": 3},
    "SliceStaticLayerParams": {"beginIds": 1, "beginMasks": 2, "endIds": 3, "endMasks": 4,
                               "strides": 5, "squeezeMasks": 6},
}

# ActivationParams' choices → the ONNX name rnnport's Spec uses, and which of (alpha, beta)
# the Core ML message carries. PReLU and parametricSoftplus hold per-channel arrays, and
# thresholdedReLU keeps x at x = alpha where ONNX gives 0: none of them is here.
ACTIVATIONS: dict[str, tuple[str, tuple[str, ...]]] = {
    "linear": ("Affine", ("alpha", "beta")), "ReLU": ("Relu", ()),
    "leakyReLU": ("LeakyRelu", ("alpha",)),
    "tanh": ("Tanh", ()), "scaledTanh": ("ScaledTanh", ("alpha", "beta")),
    "sigmoid": ("Sigmoid", ()), "sigmoidHard": ("HardSigmoid", ("alpha", "beta")),
    "ELU": ("Elu", ("alpha",)), "softsign": ("Softsign", ()), "softplus": ("Softplus", ()),
}

# NeuralNetworkLayer's choices (its ``layer`` oneof), by field number, for ``notes``.
LAYER_TYPES: dict[int, str] = {
    100: "convolution", 120: "pooling", 130: "activation", 140: "innerProduct",
    150: "embedding", 160: "batchnorm", 165: "mvn", 170: "l2normalize", 175: "softmax",
    180: "lrn", 190: "crop", 200: "padding", 210: "upsample", 211: "resizeBilinear",
    212: "cropResize", 220: "unary", 230: "add", 231: "multiply", 240: "average", 245: "scale",
    250: "bias", 260: "max", 261: "min", 270: "dot", 280: "reduce", 290: "loadConstant",
    300: "reshape", 301: "flatten", 310: "permute", 320: "concat", 330: "split",
    340: "sequenceRepeat", 345: "reorganizeData", 350: "slice", 400: "simpleRecurrent",
    410: "gru", 420: "uniDirectionalLSTM", 430: "biDirectionalLSTM", 500: "custom",
    600: "copy", 605: "branch", 615: "loop", 620: "loopBreak", 625: "loopContinue",
    635: "rangeStatic", 640: "rangeDynamic", 660: "clip", 665: "ceil", 670: "floor",
    680: "sign", 685: "round", 700: "exp2", 710: "sin", 715: "cos", 720: "tan", 730: "asin",
    735: "acos", 740: "atan", 750: "sinh", 755: "cosh", 760: "tanh", 770: "asinh",
    775: "acosh", 780: "atanh", 790: "erf", 795: "gelu", 815: "equal", 820: "notEqual",
    825: "lessThan", 827: "lessEqual", 830: "greaterThan", 832: "greaterEqual",
    840: "logicalOr", 845: "logicalXor", 850: "logicalNot", 855: "logicalAnd",
    865: "modBroadcastable", 870: "minBroadcastable", 875: "maxBroadcastable",
    880: "addBroadcastable", 885: "powBroadcastable", 890: "divideBroadcastable",
    895: "floorDivBroadcastable", 900: "multiplyBroadcastable", 905: "subtractBroadcastable",
    920: "tile", 925: "stack", 930: "gather", 935: "scatter", 940: "gatherND",
    945: "scatterND", 950: "softmaxND", 952: "gatherAlongAxis", 954: "scatterAlongAxis",
    960: "reverse", 965: "reverseSeq", 975: "splitND", 980: "concatND", 985: "transpose",
    995: "sliceStatic", 1000: "sliceDynamic", 1005: "slidingWindows", 1015: "topK",
    1020: "argMin", 1025: "argMax", 1040: "embeddingND", 1045: "batchedMatmul",
    1065: "getShape", 1070: "loadConstantND", 1080: "fillLike", 1085: "fillStatic",
    1090: "fillDynamic", 1100: "broadcastToLike", 1105: "broadcastToStatic",
    1110: "broadcastToDynamic", 1120: "squeeze", 1125: "expandDims", 1130: "flattenTo2D",
    1135: "reshapeLike", 1140: "reshapeStatic", 1145: "reshapeDynamic",
    1150: "rankPreservingReshape", 1155: "constantPad", 1170: "randomNormalLike",
    1175: "randomNormalStatic", 1180: "randomNormalDynamic", 1190: "randomUniformLike",
    1195: "randomUniformStatic", 1200: "randomUniformDynamic", 1210: "randomBernoulliLike",
    1215: "randomBernoulliStatic", 1220: "randomBernoulliDynamic",
    1230: "categoricalDistribution", 1250: "reduceL1", 1255: "reduceL2", 1260: "reduceMax",
    1265: "reduceMin", 1270: "reduceSum", 1275: "reduceProd", 1280: "reduceMean",
    1285: "reduceLogSum", 1290: "reduceSumSquare", 1295: "reduceLogSumExp",
    1313: "whereNonZero", 1315: "matrixBandPart", 1320: "lowerTriangular",
    1325: "upperTriangular", 1330: "whereBroadcastable", 1350: "layerNormalization",
    1400: "NonMaximumSuppression", 1450: "oneHot", 1455: "cumSum", 1460: "clampedReLU",
    1461: "argSort", 1465: "pooling3d", 1466: "globalPooling3d", 1470: "sliceBySize",
    1471: "convolution3d",
}

Message = dict[int, list[int | bytes]]
MAX_DEPTH = 32  # pipelines inside pipelines: Core ML nests a few; a file nesting more is hostile


def message(data: bytes, where: str) -> Message:
    """The fields of one message: field number → its values in file order (an ``int`` for
    varint and fixed-width values, ``bytes`` for length-delimited ones)."""
    found: Message = {}
    try:
        for number, value in fields(data):
            found.setdefault(number, []).append(value)
    except ProtoError as error:
        raise FormatError(f"{where}: the protocol buffer is damaged ({error}); expected a Core "
                          "ML model as coremltools saves it. The file is truncated or not a "
                          "Core ML model.") from None
    return found


def last(found: Message, number: int, default: int | bytes) -> int | bytes:
    """A singular field's value (the last one given wins, as protobuf merges)."""
    values = found.get(number)
    return values[-1] if values else default


def number_of(found: Message, number: int, where: str, what: str) -> int:
    value = last(found, number, 0)
    if not isinstance(value, int):
        raise FormatError(f"{where}: {what} is length-delimited; expected a number. The file "
                          "is damaged.")
    return value


def flag(found: Message, number: int, where: str, what: str) -> bool:
    return number_of(found, number, where, what) != 0


def float32(found: Message, number: int, where: str, what: str) -> float:
    bits = number_of(found, number, where, what)
    return float(np.uint32(bits & 0xFFFFFFFF).view(np.float32))


def sub(found: Message, number: int, where: str, what: str) -> bytes | None:
    """A message-typed field's bytes (None when absent); several given merge, as protobuf
    merges them, which for the messages read here means the last one's fields win."""
    values = found.get(number)
    if not values:
        return None
    if not all(isinstance(value, bytes) for value in values):
        raise FormatError(f"{where}: {what} is a number; expected a message. The file is "
                          "damaged.")
    return b"".join(value for value in values if isinstance(value, bytes))


def weights(data: bytes | None, count: int, where: str, meter: budget.Meter) -> np.ndarray:
    """The ``count`` values of a ``WeightParams``: ``floatValue`` (packed or not) as float32,
    ``float16Value`` as float16, ``rawValue`` as little-endian float32 (or float16, told by
    its length). Quantized weights are refused."""
    if data is None:
        raise FormatError(f"{where}: missing; expected {count} values. The file is damaged or "
                          "was not written by coremltools.")
    found = message(data, where)
    numbers = FIELDS["WeightParams"]
    if numbers["int8RawValue"] in found or numbers["quantization"] in found:
        raise UnsupportedFeatureError(
            f"{where}: quantized weights (int8RawValue or QuantizationParams); rnnport reads "
            "float32 and float16 weights, since a quantized layer computes other numbers. "
            "Convert the model from its float source, or dequantize it with coremltools first.")
    meter.charge(4 * count, where)
    floats = found.get(numbers["floatValue"], [])
    if floats:
        if len(floats) == 1 and isinstance(floats[0], bytes):
            if len(floats[0]) != 4 * count:
                raise _wrong(where, count, f"{len(floats[0]) // 4:,} float values")
            return np.frombuffer(floats[0], "<f4").astype(np.float32)
        if len(floats) != count or not all(isinstance(value, int) for value in floats):
            raise _wrong(where, count, f"{len(floats):,} floatValue entries")
        return np.array(floats, dtype=np.uint32).view(np.float32)
    for name, width, dtype in (("float16Value", 2, "<f2"), ("rawValue", 4, "<f4")):
        raw = last(found, numbers[name], b"")
        if isinstance(raw, bytes) and raw:
            if name == "rawValue" and len(raw) == 2 * count:
                width, dtype = 2, "<f2"
            if len(raw) != width * count:
                raise _wrong(where, count, f"{name} of {len(raw):,} bytes")
            return np.frombuffer(raw, dtype).astype(np.dtype(dtype).newbyteorder("="))
    raise _wrong(where, count, "no values")


def _wrong(where: str, count: int, found: str) -> FormatError:
    return FormatError(f"{where}: {found}; expected {count:,} values (the sizes the layer "
                       "declares). The file is damaged or its sizes lie.")


def put_varint(number: int, value: int) -> bytes:
    return key(number, 0) + varint(value)


def put_bytes(number: int, value: bytes) -> bytes:
    return key(number, 2) + varint(len(value)) + value


def put_float(number: int, value: float) -> bytes:
    return key(number, 5) + struct.pack("<f", value)


def put_messages(number: int, values: Iterable[bytes]) -> bytes:
    return b"".join(put_bytes(number, value) for value in values)
