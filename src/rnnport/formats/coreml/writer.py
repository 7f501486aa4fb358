"""Writing a network as a Core ML ``neuralNetwork`` model (the bytes of a ``.mlmodel``).

One layer per network layer: ``uniDirectionalLSTM`` or ``biDirectionalLSTM``, ``gru`` (the
reset-before GRU), ``simpleRecurrent``; each with ``sequenceOutput`` set, its first input
the previous layer's output (a bidirectional GRU or simple RNN: two layers, a ``reverse``
and a ``concat``, see :func:`_gru_or_rnn_pair`; a reverse layer: the layer with
``reverseInput`` and a ``reverse`` that puts its outputs back in time order). Weights are
written gate by gate (``W (H, I)``, ``R (H, H)``, one bias ``(H,)``: the two canonical
biases summed) as ``floatValue`` for float32 and ``float16Value`` for float16, so reading
them back gives the same bits.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import UnsupportedFeatureError
from ...gates import CANONICAL, block, gate_family
from ...io._proto import varint
from ...model import RNN, Model, Stack
from ...spec import Spec
from .._common import sum_exact
from .fields import ACTIVATIONS, FIELDS, put_bytes, put_float, put_messages, put_varint

__all__ = ["SPECIFICATION_VERSION", "encode", "holds_activations"]

SPECIFICATION_VERSION = 4  # iOS 13: float16 weights and every recurrent layer
FLOAT32_TYPE = 65568  # ArrayFeatureType.FLOAT32
FLOAT32_MAX = float(np.finfo(np.float32).max)
TO_COREML = {onnx: (name, parameters) for name, (onnx, parameters) in ACTIVATIONS.items()}
DEFAULTS = {"lstm": (("Sigmoid", 0.0, 0.0), ("Tanh", 0.0, 0.0), ("Tanh", 0.0, 0.0)),
            "gru": (("Sigmoid", 0.0, 0.0), ("Tanh", 0.0, 0.0))}
LSTM_GATES = {"i": "inputGate", "f": "forgetGate", "g": "blockInput", "o": "outputGate"}
GRU_GATES = {"r": "resetGate", "z": "updateGate", "n": "outputGate"}


def holds_activations(spec: Spec) -> bool:
    """Whether Core ML's ActivationParams hold every activation of ``spec``."""
    return all(name in TO_COREML for name, _, _ in spec.activations)


def _weights(array: np.ndarray) -> bytes:
    """A ``WeightParams``: float16 values as ``float16Value``, others as ``floatValue``."""
    numbers = FIELDS["WeightParams"]
    if array.dtype == np.float16:
        return put_bytes(numbers["float16Value"], array.astype("<f2").tobytes())
    return put_bytes(numbers["floatValue"], array.astype("<f4").tobytes())


def _activation(name: str, alpha: float, beta: float) -> bytes:
    if name not in TO_COREML:
        raise UnsupportedFeatureError(
            f"coreml: the activation {name}; Core ML's recurrent layers compute "
            f"{', '.join(sorted(TO_COREML))}. Write the network to ONNX instead.")
    coreml, parameters = TO_COREML[name]
    values = {"alpha": alpha, "beta": beta}
    body = b"".join(put_float(index + 1, values[parameter])
                    for index, parameter in enumerate(parameters))
    return put_bytes(FIELDS["ActivationParams"][coreml], body)


def _activations(spec: Spec) -> list[bytes]:
    return [_activation(*item) for item in (spec.activations or DEFAULTS[spec.cell])]


def _bias(named: dict[str, np.ndarray], rows: int) -> np.ndarray:
    dtype = named["weight_ih"].dtype
    return sum_exact(named.get("bias_ih", np.zeros(rows, dtype)),
                     named.get("bias_hh", np.zeros(rows, dtype)))


def _gate_fields(named: dict[str, np.ndarray], spec: Spec, names: dict[str, str],
                 numbers: dict[str, int], suffixes: tuple[str, str, str]) -> bytes:
    """Each gate's weight, recursion and bias messages (the bias when ``spec.bias``)."""
    order = CANONICAL[gate_family(spec.cell)]
    bias = _bias(named, len(order) * spec.hidden_size) if spec.bias else None
    out = b""
    for gate in order:
        prefix = names[gate]
        out += put_bytes(numbers[prefix + suffixes[0]],
                         _weights(block(named["weight_ih"], order, gate)))
        out += put_bytes(numbers[prefix + suffixes[1]],
                         _weights(block(named["weight_hh"], order, gate)))
        if bias is not None:
            out += put_bytes(numbers[prefix + suffixes[2]], _weights(block(bias, order, gate)))
    return out


def _lstm(spec: Spec, directions: list[dict[str, np.ndarray]]) -> tuple[int, bytes]:
    numbers = FIELDS["LSTMWeightParams"]
    weight_messages = []
    for named in directions:
        body = _gate_fields(named, spec, LSTM_GATES, numbers,
                            ("WeightMatrix", "RecursionMatrix", "BiasVector"))
        if spec.peepholes:
            for row, gate in enumerate("ifo"):
                body += put_bytes(numbers[f"{LSTM_GATES[gate]}PeepholeVector"],
                                  _weights(named["weight_peephole"][row]))
        weight_messages.append(body)
    params_numbers = FIELDS["LSTMParams"]
    params = (put_varint(params_numbers["sequenceOutput"], 1)
              + put_varint(params_numbers["hasBiasVectors"], int(spec.bias))
              + put_varint(params_numbers["hasPeepholeVectors"], int(spec.peepholes))
              + put_varint(params_numbers["coupledInputAndForgetGate"], int(spec.input_forget))
              + put_float(params_numbers["cellClipThreshold"],
                          FLOAT32_MAX if spec.cell_clip is None else spec.cell_clip))
    activations = _activations(spec)
    if spec.bidirectional:
        numbers = FIELDS["BiDirectionalLSTMLayerParams"]
        body = (put_messages(numbers["activationsForwardLSTM"], activations)
                + put_messages(numbers["activationsBackwardLSTM"], activations))
        kind = FIELDS["NeuralNetworkLayer"]["biDirectionalLSTM"]
    else:
        numbers = FIELDS["UniDirectionalLSTMLayerParams"]
        body = put_messages(numbers["activations"], activations) + (
            put_varint(numbers["reverseInput"], 1) if spec.reverse else b"")
        kind = FIELDS["NeuralNetworkLayer"]["uniDirectionalLSTM"]
    body += put_bytes(numbers["params"], params) + put_messages(numbers["weightParams"],
                                                                 weight_messages)
    return kind, body


def _gru_or_rnn(spec: Spec, named: dict[str, np.ndarray]) -> tuple[int, bytes]:
    if spec.cell == "gru":
        numbers = FIELDS["GRULayerParams"]
        body = (put_messages(numbers["activations"], _activations(spec))
                + put_varint(numbers["hasBiasVectors"], int(spec.bias))
                + _gate_fields(named, spec, GRU_GATES, numbers,
                               ("WeightMatrix", "RecursionMatrix", "BiasVector")))
        kind = FIELDS["NeuralNetworkLayer"]["gru"]
    else:
        numbers = FIELDS["SimpleRecurrentLayerParams"]
        activation = _activation("Tanh" if spec.cell == "rnn_tanh" else "Relu", 0.0, 0.0)
        body = (put_bytes(numbers["activation"], activation)
                + put_varint(numbers["hasBiasVector"], int(spec.bias))
                + _gate_fields(named, spec, {"h": ""}, numbers,
                               ("weightMatrix", "recursionMatrix", "biasVector")))
        kind = FIELDS["NeuralNetworkLayer"]["simpleRecurrent"]
    return kind, body + put_varint(numbers["sequenceOutput"], 1) + (
        put_varint(numbers["reverseInput"], 1) if spec.reverse else b"")


class Written(NamedTuple):
    """One NeuralNetworkLayer to write: its name, type field, blobs and layer message."""

    name: str
    kind: int
    inputs: tuple[str, ...]
    output: str
    body: bytes


def _gru_or_rnn_pair(spec: Spec, directions: list[dict[str, np.ndarray]], index: int,
                     blob: str, top: str) -> list[Written]:
    """A bidirectional GRU or simple RNN layer as Core ML spells it: no such layer, so the
    forward layer and a ``reverseInput`` one read the same input; the reversed layer gives
    its outputs in the order it ran them (Apple's BiDirectionalLSTM documentation: the
    backward ``yb_1`` is the output after ``x_T`` alone; coremltools' own tests expect the
    same of ``direction="reverse"``), so a ``reverse`` layer along the sequence axis puts
    them back in time order, and a ``concat`` along the channels joins forward, backward."""
    forward, backward = (spec.replace(bidirectional=False),
                         spec.replace(bidirectional=False, reverse=True))
    sizes = put_varint(1, spec.input_size) + put_varint(2, spec.hidden_size)
    kind, forward_body = _gru_or_rnn(forward, directions[0])
    _, backward_body = _gru_or_rnn(backward, directions[1])
    name = _TYPE_NAMES[kind]
    concat = put_varint(FIELDS["ConcatLayerParams"]["sequenceConcat"], 0)
    return [
        Written(f"{name}_{index}_forward", kind, (blob,), f"layer{index}_forward",
                sizes + forward_body),
        Written(f"{name}_{index}_backward", kind, (blob,), f"layer{index}_backward_reversed",
                sizes + backward_body),
        _time_order(index, f"layer{index}_backward_reversed", f"layer{index}_backward"),
        Written(f"concat_{index}", FIELDS["NeuralNetworkLayer"]["concat"],
                (f"layer{index}_forward", f"layer{index}_backward"), top, concat)]


def _time_order(index: int, source: str, top: str) -> Written:
    """The ``reverse`` layer that flips a ``reverseInput`` layer's outputs (in the order it
    ran them) back into time order: along the sequence axis of ``(Seq, Batch, C, 1, 1)``."""
    reverse_dim = put_bytes(FIELDS["ReverseLayerParams"]["reverseDim"], bytes([1, 0, 0, 0, 0]))
    return Written(f"reverse_{index}", FIELDS["NeuralNetworkLayer"]["reverse"], (source,), top,
                   reverse_dim)


def _layers(model: Model) -> tuple[list[Written], Spec, Spec]:
    """The network's layers, and the first and last one-layer specs."""
    parts: tuple[RNN, ...] = model.parts if isinstance(model, Stack) else (model,)
    specs = [part.spec.replace(num_layers=1, input_size=part.spec.layer_input_size(index))
             for part in parts for index in range(part.spec.num_layers)]
    out: list[Written] = []
    blob = "input"
    for index, (layer_spec, directions) in enumerate(zip(specs, (
            directions for part in parts for directions in part.params), strict=True)):
        top = "output" if index == len(specs) - 1 else f"layer{index}_output"
        named = [dict(direction) for direction in directions]
        if len(named) != layer_spec.num_directions:
            raise UnsupportedFeatureError(
                f"coreml: layer {index} holds {len(named)} directions; expected "
                f"{layer_spec.num_directions} (its spec's). The model is inconsistent.")
        if layer_spec.cell != "lstm" and layer_spec.bidirectional:
            out += _gru_or_rnn_pair(layer_spec, named, index, blob, top)
        else:
            sizes = put_varint(1, layer_spec.input_size) + put_varint(2, layer_spec.hidden_size)
            kind, body = _lstm(layer_spec, named) if layer_spec.cell == "lstm" else \
                _gru_or_rnn(layer_spec, named[0])
            output = f"layer{index}_reversed" if layer_spec.reverse else top
            out.append(Written(f"{_TYPE_NAMES[kind]}_{index}", kind, (blob,), output,
                               sizes + body))
            if layer_spec.reverse:
                out.append(_time_order(index, output, top))
        blob = top
    _check_every_direction_written(out, specs)
    return out, specs[0], specs[-1]


def _check_every_direction_written(layers: list[Written], specs: list[Spec]) -> None:
    """Refuse, rather than write, a network that lost a direction on the way."""
    recurrent = {FIELDS["NeuralNetworkLayer"][name]: name for name in
                 ("gru", "simpleRecurrent", "uniDirectionalLSTM", "biDirectionalLSTM")}
    written = sum(2 if item.kind == FIELDS["NeuralNetworkLayer"]["biDirectionalLSTM"] else 1
                  for item in layers if item.kind in recurrent)
    expected = sum(spec.num_directions for spec in specs)
    if written != expected:
        raise UnsupportedFeatureError(
            f"coreml: the network has {expected} layer directions but {written} would be "
            "written; rnnport refuses to drop any. This is a bug in rnnport's Core ML writer.")


def _feature(name: str, size: int, rank5: bool) -> bytes:
    numbers = FIELDS["ArrayFeatureType"]
    if rank5:  # exact shapes: (Seq, Batch, C, 1, 1), Seq and Batch any length
        ranges = b"".join(put_bytes(
            FIELDS["ArrayFeatureType.ShapeRange"]["sizeRanges"],
            put_varint(FIELDS["SizeRange"]["lowerBound"], low)
            + put_varint(FIELDS["SizeRange"]["upperBound"], high & (2**64 - 1)))
            for low, high in ((1, -1), (1, -1), (size, size), (1, 1), (1, 1)))
        array = put_bytes(numbers["shape"], b"".join(varint(value)
                                                     for value in (1, 1, size, 1, 1))) \
            + put_varint(numbers["dataType"], FLOAT32_TYPE) \
            + put_bytes(numbers["shapeRange"], ranges)
    else:
        array = put_bytes(numbers["shape"], varint(size)) \
            + put_varint(numbers["dataType"], FLOAT32_TYPE)
    return (put_bytes(FIELDS["FeatureDescription"]["name"], name.encode())
            + put_bytes(FIELDS["FeatureDescription"]["type"],
                        put_bytes(FIELDS["FeatureType"]["multiArrayType"], array)))


def encode(model: Model) -> bytes:
    """The ``Model`` bytes of ``model``: input ``input`` (I), output ``output`` (D·H)."""
    layers, first, last = _layers(model)
    numbers = FIELDS["NeuralNetworkLayer"]
    network = b""
    for item in layers:
        network += put_bytes(FIELDS["NeuralNetwork"]["layers"], (
            put_bytes(numbers["name"], item.name.encode())
            + b"".join(put_bytes(numbers["input"], blob.encode()) for blob in item.inputs)
            + put_bytes(numbers["output"], item.output.encode()) + put_bytes(item.kind,
                                                                              item.body)))
    # reverse is a layer of specification 4, which Core ML allows with exact shapes alone
    rank5 = any(item.kind == numbers["reverse"] for item in layers)
    if rank5:
        network += put_varint(FIELDS["NeuralNetwork"]["arrayInputShapeMapping"], 1)
    description = (put_bytes(FIELDS["ModelDescription"]["input"],
                             _feature("input", first.input_size, rank5))
                   + put_bytes(FIELDS["ModelDescription"]["output"],
                               _feature("output", last.num_directions * last.hidden_size,
                                        rank5)))
    return (put_varint(FIELDS["Model"]["specificationVersion"], SPECIFICATION_VERSION)
            + put_bytes(FIELDS["Model"]["description"], description)
            + put_bytes(FIELDS["Model"]["neuralNetwork"], network))


_TYPE_NAMES = {number: name for name, number in FIELDS["NeuralNetworkLayer"].items()}
