"""Core ML (Apple): NeuralNetwork models (``.mlmodel``) and ML Programs (``.mlpackage``).

**The file** is one ``Model`` protocol buffer (Apple's ``Model.proto``; the field numbers
rnnport uses are in :mod:`.fields`, checked against coremltools' descriptors in the
tests). Its model is one of ``neuralNetwork`` (500), ``neuralNetworkClassifier`` (403),
``neuralNetworkRegressor`` (303), or a ``pipeline`` (202; a ``pipelineClassifier`` 200 or
``pipelineRegressor`` 201 wraps one) whose ``models`` run in turn, each again any model.
An ML Program (``mlProgram``, 502, the model of the ``.mlpackage`` folders coremltools writes
by default) is read by :mod:`.program`: its MIL ``lstm`` and ``rnn`` operations and its
``while_loop`` s. A neural network is a list of ``NeuralNetworkLayer`` s, each with a
``name``, ``input`` and ``output`` blob names and one layer message. rnnport reads four
recurrent layers, and ``loop`` layers computing one:

``uniDirectionalLSTM`` / ``biDirectionalLSTM`` (one ``LSTMWeightParams`` per direction,
forward first; the layer's output is ``[forward, backward]`` along the channels)::

    i = f(W_i x + R_i y + b_i [+ p_i∘c])        weights (H, I), recursions (H, H), biases (H,)
    f = f(W_f x + R_f y + b_f [+ p_f∘c])        forgetBias: see below
    z = g(W_z x + R_z y + b_z)                  the block input: canonical g
    o = f(W_o x + R_o y + b_o [+ p_o∘c'])       coupledInputAndForgetGate: f = 1 − i
    c' = clip(f∘c + i∘z, ±cellClipThreshold)    y' = o∘h(c')

``gru`` (reset before, as Keras's ``reset_after=False``; Spec.reset_after False)::

    z = f(W_z x + R_z h + b_z)    r = f(W_r x + R_r h + b_r)
    n = g(W_o x + R_o (r∘h) + b_o)              (Core ML calls it the output gate)
    h' = (1 − z)∘n + z∘h

``simpleRecurrent``: ``h' = act(W x + R h + b)``, act tanh (``rnn_tanh``) or ReLU
(``rnn_relu``); another activation is refused.

``loop`` (``LoopLayerParams``: a ``conditionNetwork``, its ``conditionVar`` and a
``bodyNetwork`` of generic layers): how coremltools writes a network Core ML has no layer
for, a PyTorch GRU (which resets after), and a TensorFlow Keras layer (converted from a
SavedModel: TensorFlow's ``while`` loop). rnnport reads the loops coremltools writes
(:mod:`.loops`): a counter blob from 0, adding 1 per step while ``lessThan`` a constant
``T``; the states either in a buffer of ``T + 1`` rows starting as zeros (PyTorch: each step
``gather`` s row ``counter`` as ``h`` and ``scatter`` s ``h'`` into row ``counter + 1``; the
output is the ``slice`` of rows 1 to ``T``) or carried as blobs of their own starting as
zeros (Keras: ``h``, an LSTM's ``c``; ``h'`` ``scatter`` ed into row ``counter`` of a list of
``T`` rows, the output); ``x`` is row ``counter`` of the sequence (time first). The body's
new states are evaluated symbolically through ``innerProduct`` and ``batchedMatmul``
(weights in the layer, stored out-major), ``add`` and ``multiply`` (two inputs, or one and
``alpha``), ``addBroadcastable``, ``multiplyBroadcastable``, ``subtractBroadcastable``,
``activation`` (sigmoid, tanh, ReLU; linear with alpha ±1 and beta 0), ``splitND`` of the
features, ``squeeze``, ``expandDims``, ``copy`` and ``loadConstantND``; a ``branch`` that
grows the list when the counter reaches its length is never run (it may have no
``elseBranch``). The loop's ``maxLoopIterations`` is 0 or at least ``T`` and it has no
input; a ``loop``, ``loopBreak`` or ``loopContinue`` in its body, or a condition writing a
blob the body or the network reads, is refused. The step must be a
canonical simple RNN, GRU (reset after, PyTorch's and Keras's; or before) or LSTM, read with
the weights ``(out, in)`` as the body holds them, bit for bit; a bias added once to the sum
of both products (Keras) is read as the recurrent one (``bias_hh``, as the keras format
reads it), PyTorch's two biases apart. Another layer on the way (named with its type),
another step, another condition, or a buffer or state starting other than as zeros is
refused by name, and nothing is read.

A bidirectional ``gru`` or ``simpleRecurrent`` has no layer of its own: it is a forward layer
and a ``reverseInput`` layer of the same type and sizes on the same input, the reversed
one's outputs (in the order it ran them: Apple's BiDirectionalLSTM documentation gives the
backward outputs ``yb_1`` after ``x_T`` alone, and coremltools' tests expect the same of
``direction="reverse"``) flipped by a ``reverse`` layer along the sequence axis alone, joined
forward then backward by a ``concat`` along the channels; read as one layer. Joined in
another order, or without the ``reverse``, the layers are read as what they are.

Activations ``f``, ``g`` (and an LSTM's ``h``) are ``ActivationParams``: sigmoid, tanh,
ReLU, linear (ONNX Affine), scaledTanh, sigmoidHard (HardSigmoid, Core ML's default for
coremltools' ``add_gru``), leakyReLU, ELU, softsign and softplus map to Spec.activations;
thresholdedReLU (Core ML keeps ``x`` at ``x = alpha``, ONNX does not), PReLU and
parametricSoftplus are refused. A bidirectional LSTM whose directions differ in them is
refused. Weights (``WeightParams``) are ``floatValue`` (float32), ``float16Value`` (float16)
or ``rawValue`` (little-endian float32, or float16 when half as long); quantized ones
(``int8RawValue``, ``quantization``) are refused by name. ``cellClipThreshold`` is read as
``Spec.cell_clip`` (coremltools writes 50000 by default; 0, the field unset, and float32's
largest value read as no clip), and ``cell_clip=`` overrides it (None drops it).

**Layout.** Core ML runs a sequence as a rank-5 blob ``(Seq, Batch, C, 1, 1)``; rnnport's
``forward(x)`` with ``x (batch, time, I)`` is Core ML fed ``x.transpose(1, 0, 2)[..., None,
None]``, giving ``(time, batch, D·H, 1, 1)``. A layer with ``sequenceOutput`` false gives
the last step alone (``y[:, -1]``, or ``y[:, 0]`` for a reverse layer: ``notes`` says
so). A layer with ``reverseInput`` runs the sequence last step first and outputs its steps
in the order it ran them (coremltools' tests of ``direction="reverse"`` expect PyTorch's
output for the flipped sequence, unflipped), rnnport's ``y`` (time-ordered, as ONNX's
``reverse``) flipped: it reads as ``Spec.reverse`` when a ``reverse`` layer along the sequence
axis alone follows it (its output is then the layer's), or when it outputs its last step
alone, and is refused otherwise. Extra inputs (initial ``h``, ``c``) are zeros by default,
``forward(state=…)`` gives them.

**forgetBias** is documented as adding 1 to ``b_f``, but Core ML adds nothing:
coremltools' Keras converter sets it whenever Keras's ``unit_forget_bias`` is set, with
Keras's whole trained bias stored, and its numeric tests compare Core ML's predictions with
Keras's (coremltools issue 309 reports the flag without effect). rnnport reads the stored
bias alone, and ``notes`` says so.

**Networks.** A recurrent layer whose first input is the sequence output of the recurrent
layer before it (in the same neural network, directly or through ``squeeze``,
``expandDims``, ``copy``, ``reshapeStatic`` or ``flatten`` layers) continues its network;
the layers merge into one ``RNN`` where they fit, or a ``Stack``. A loop's sequence output
is the ``slice`` of rows 1 to ``T`` of its PyTorch buffer (a multi-layer PyTorch GRU: loops
in turn); a Keras loop's list is its network's end. A bidirectional PyTorch GRU is a loop
over the sequence and one over its ``reverse``: two networks, each read as the GRU over its
own input (``layer=``). Several networks: ``layer=`` (a layer's name, ``model<i>/<name>``
inside a pipeline's i-th model) picks one; ``notes`` lists the other layers and models.

**Writing** gives a :class:`CoreMLModel` (the ``Model`` bytes; ``path=`` saves them, atomically):
a ``neuralNetwork`` (specification version 4) with input ``input`` (``I``) and output
``output`` (``D·H``), one recurrent layer per network layer with ``sequenceOutput`` set,
float32 weights as ``floatValue`` and float16 ones as ``float16Value``. One bias per gate
(two biases summed); the reset-after GRU has no Core ML layer and is refused; without a
cell clip the LSTM's threshold is float32's largest value, which no finite cell state passes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...gates import CANONICAL, gate_family
from ...io._proto import ProtoError, skip, tag_at
from ...io.atomic import atomic_write
from ...io.inputs import head, read_file
from ...model import RNN, Model, Stack, stack
from ...spec import Spec
from .._common import by_layer, is_path, listed
from .._protocol import Choices, Format, NamedArray, Suffix
from .fields import (
    ACTIVATIONS,
    FIELDS,
    LAYER_TYPES,
    MAX_DEPTH,
    Message,
    flag,
    float32,
    message,
    number_of,
    sub,
    weights,
)
from .loops import (
    LoopCell,
    Node,
    loop_model,
    loop_notes,
    nn_layer,
    nn_loop,
    recognise,
    signed,
)
from .package import MODEL_ITEM, PACKAGE, CoreMLPackage, encode_package, save_package
from .program import networks as program_networks
from .program import notes as program_notes
from .program import package_model, read_program
from .writer import encode, holds_activations

__all__ = ["FORMAT", "CoreMLModel", "CoreMLPackage", "read", "sniff", "write"]

READ_OPTIONS = frozenset({"layer", "cell_clip"})
MAX_FILE_BYTES = 2**31  # protobuf's own limit on a message
FROM_FILE = "file"
MODEL, LAYER = FIELDS["Model"], FIELDS["NeuralNetworkLayer"]
NETWORKS = {MODEL["neuralNetwork"]: "neuralNetwork",
            MODEL["neuralNetworkClassifier"]: "neuralNetworkClassifier",
            MODEL["neuralNetworkRegressor"]: "neuralNetworkRegressor"}
PIPELINES = {MODEL["pipeline"]: "pipeline", MODEL["pipelineClassifier"]: "pipelineClassifier",
             MODEL["pipelineRegressor"]: "pipelineRegressor"}
RECURRENT = {LAYER["uniDirectionalLSTM"], LAYER["biDirectionalLSTM"], LAYER["gru"],
             LAYER["simpleRecurrent"]}
# Core ML's name of each canonical gate's weight, recursion, bias (and peephole) fields.
LSTM_GATES = {"i": "inputGate", "f": "forgetGate", "g": "blockInput", "o": "outputGate"}
GRU_GATES = {"r": "resetGate", "z": "updateGate", "n": "outputGate"}
FLOAT32_MAX = float(np.finfo(np.float32).max)
LAYER_SLICE = LAYER["slice"]
# Layers that give their one input's values unchanged in another shape: a chain of recurrent
# layers may run through them (coremltools' converter puts squeeze and expandDims between).
PASSING = frozenset({"squeeze", "expandDims", "copy", "reshapeStatic", "flatten"})


class CoreMLModel(NamedTuple):
    """A Core ML model in memory: the serialized ``Model`` protocol buffer that a
    ``.mlmodel`` file holds."""

    spec: bytes


@dataclass(frozen=True)
class Layer:
    """One recurrent ``NeuralNetworkLayer``: its label (its name, ``model<i>/`` before it
    inside a pipeline), type field, blobs, and the layer message's fields."""

    label: str
    kind: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    body: Message
    network: int  # which neural network of the file it belongs to
    backward: Message | None = None  # a bidirectional pair's reversed layer (gru, simpleRecurrent)
    # A loop layer's cell (inputs: its sequence; outputs: its output rows), or why not
    loop: LoopCell | UnsupportedFeatureError | None = None
    # a reverseInput layer whose outputs a ``reverse`` layer puts back in time order (its
    # outputs are then that layer's)
    time_ordered: bool = False

    @property
    def type(self) -> str:
        return LAYER_TYPES[self.kind]

    @property
    def sequence_output(self) -> bool:
        if self.kind == LAYER["loop"]:  # a Keras list holds every step; a PyTorch buffer's
            # rows 1 to T do, once sliced
            return isinstance(self.loop, LoopCell) and (
                self.loop.first_row == 0 or self.outputs != (self.loop.output,))
        if self.kind in (LAYER["uniDirectionalLSTM"], LAYER["biDirectionalLSTM"]):
            params = message(sub(self.body, 15, self.label, "params") or b"", self.label)
            return flag(params, FIELDS["LSTMParams"]["sequenceOutput"], self.label,
                        "sequenceOutput")
        return flag(self.body, FIELDS["GRULayerParams"]["sequenceOutput"], self.label,
                    "sequenceOutput")


@dataclass
class Contents:
    """What a file holds: its recurrent layers, and everything else, described."""

    layers: list[Layer]
    others: list[str]
    ml_program: bool = False
    networks: int = 0  # neural networks seen (a chain stays inside one)
    programs: list[bytes] = field(default_factory=list)  # ML Programs' bytes
    # (network, blob) → the blob it repeats, for layers that only reshape their one input
    aliases: dict[tuple[int, str], str] = field(default_factory=dict)
    # (network, blob) → the blob a ``copy`` layer repeats (no axis moved)
    copies: dict[tuple[int, str], str] = field(default_factory=dict)
    folder: Path | None = None  # where an ML Program's weight files lie
    # (network, output blob) → a concat or reverse layer: its label, type, inputs, message
    joins: dict[tuple[int, str], tuple[str, int, tuple[str, ...], Message]] = field(
        default_factory=dict)
    meter: budget.Meter | None = None  # what decoding a loop's weights is charged to


# -- reading the model's structure -----------------------------------------------------------


def _text(value: int | bytes, where: str) -> str:
    if not isinstance(value, bytes):
        raise FormatError(f"{where}: a name is a number; expected a string. The file is damaged.")
    return value.decode("utf-8", "replace")


def _walk(data: bytes, where: str, prefix: str, depth: int, found: Contents) -> None:
    """Collect the layers of the model ``data`` (a ``Model`` message) into ``found``."""
    if depth > MAX_DEPTH:
        raise FormatError(f"{where}: pipelines nested deeper than {MAX_DEPTH} levels; expected "
                          "a Core ML model (which nests a few). The file is damaged or hostile.")
    model = message(data, where)
    for number, name in PIPELINES.items():
        body = sub(model, number, where, name)
        if body is None:
            continue
        pipeline = body if number == MODEL["pipeline"] else \
            sub(message(body, where), 1, where, "pipeline") or b""
        parts = message(pipeline, where).get(FIELDS["Pipeline"]["models"], [])
        for index, part in enumerate(parts):
            if not isinstance(part, bytes):
                raise FormatError(f"{where}: a pipeline's model is a number; expected a "
                                  "message. The file is damaged.")
            _walk(part, where, f"{prefix}model{index}/", depth + 1, found)
        return
    program = sub(model, MODEL["mlProgram"], where, "mlProgram")
    if program is not None:
        found.ml_program = True
        found.programs.append(program)
        return
    for number, name in NETWORKS.items():
        body = sub(model, number, where, name)
        if body is not None:
            _layers(body, where, prefix, found)
            return
    kinds = [number for number in model if number >= 200]
    found.others.append(f"{prefix or 'the model'}: a model of type field "
                        f"{kinds[0] if kinds else 'none'}, not a neural network")


def _layers(network: bytes, where: str, prefix: str, found: Contents) -> None:
    network_number = found.networks
    found.networks += 1
    layers = message(network, where).get(FIELDS["NeuralNetwork"]["layers"], [])
    written: dict[str, list[int]] = {}  # blob → the layers that wrote it, so far
    nodes: dict[int, Node] = {}
    positions: dict[int, int] = {}  # a node given (its id) → its layer's position
    pending: dict[str, tuple[int, LoopCell]] = {}  # a loop's buffer → its layer, its cell
    assert found.meter is not None
    meter = found.meter

    def outer(blob: str, reader: Node | None) -> Node | None:
        """The layer that last wrote ``blob`` before ``reader`` (None: so far)."""
        before = positions.get(id(reader), len(layers)) if reader is not None else len(layers)
        position = next((found for found in reversed(written.get(blob, [])) if found < before),
                        None)
        if position is None:
            return None
        if position not in nodes:
            nodes[position] = nn_layer(layers[position], where, meter)
            positions[id(nodes[position])] = position
        return nodes[position]

    for position, raw in enumerate(layers):
        if not isinstance(raw, bytes):
            raise FormatError(f"{where}: a layer is a number; expected a message. The file is "
                              "damaged.")
        layer = message(raw, where)
        name = _text(layer.get(LAYER["name"], [b""])[-1], where)
        kinds = [number for number in layer if number >= 100]
        kind = kinds[-1] if kinds else 0
        label = f"{prefix}{name}"
        inputs, outputs = layer.get(LAYER["input"], []), layer.get(LAYER["output"], [])
        if LAYER_TYPES.get(kind) in PASSING and len(inputs) == 1 and len(outputs) == 1:
            found.aliases[network_number, _text(outputs[0], where)] = _text(inputs[0], where)
            if LAYER_TYPES.get(kind) == "copy":
                found.copies[network_number, _text(outputs[0], where)] = _text(inputs[0], where)
        if kind == LAYER_SLICE and len(inputs) == 1 and len(outputs) == 1:
            _loop_output(layer, pending, found, where)
        if kind == LAYER["loop"]:
            found.layers.append(_loop_layer(layer, label, outer, where, meter, network_number))
            if isinstance(found.layers[-1].loop, LoopCell):
                pending[found.layers[-1].loop.output] = (len(found.layers) - 1,
                                                         found.layers[-1].loop)
        for blob in outputs:
            written.setdefault(_text(blob, where), []).append(position)
        if kind == LAYER["loop"]:
            continue
        if kind not in RECURRENT:
            found.others.append(f"{label} ({LAYER_TYPES.get(kind, f'layer type {kind}')})")
            if kind in (LAYER["concat"], LAYER["reverse"]) and len(outputs) == 1:
                found.joins[network_number, _text(outputs[0], where)] = (
                    label, kind, tuple(_text(value, where) for value in inputs),
                    message(sub(layer, kind, where, LAYER_TYPES[kind]) or b"", label))
            continue
        body = message(sub(layer, kind, where, LAYER_TYPES[kind]) or b"",
                       f"{where}: layer {label}")
        found.layers.append(Layer(
            label, kind, tuple(_text(value, where) for value in layer.get(LAYER["input"], [])),
            tuple(_text(value, where) for value in layer.get(LAYER["output"], [])), body,
            network_number))


def _loop_layer(layer: Message, label: str, outer: Any, where: str, meter: budget.Meter,
                network: int) -> Layer:
    """A ``loop`` layer as the recurrent layer it computes (:mod:`.loops`); one that is
    none keeps its refusal, raised when it is read. Its output is its buffer until a
    ``slice`` of the rows its steps wrote is found (:func:`_loop_output`)."""
    params = message(sub(layer, LAYER["loop"], where, "loop") or b"", f"{where}: {label}")
    try:
        cell = recognise(nn_loop(params, f"{where}: layer {label} (loop)", outer, where, meter,
                                 tuple(_text(value, where) for value in
                                       layer.get(LAYER["input"], []))))
    except UnsupportedFeatureError as refusal:
        return Layer(label, LAYER["loop"], (), (), {}, network, loop=refusal)
    return Layer(label, LAYER["loop"], (cell.sequence,), (cell.output,), {}, network, loop=cell)


def _loop_output(layer: Message, pending: dict[str, tuple[int, LoopCell]], found: Contents,
                 where: str) -> None:
    """Make a ``slice`` layer taking rows 1 to T of a loop's buffer (what its steps wrote)
    that loop's sequence output."""
    source = _text(layer[LAYER["input"]][0], where)
    if source not in pending:
        return
    index, cell = pending[source]
    numbers = FIELDS["SliceLayerParams"]
    params = message(sub(layer, LAYER_SLICE, where, "slice") or b"", where)
    rows = tuple(signed(number_of(params, numbers[key], where, key))
                 for key in ("startIndex", "endIndex", "stride", "axis"))
    if rows == (1, cell.steps + 1, 1, 0):
        del pending[source]
        found.layers[index] = replace(found.layers[index],
                                      outputs=(_text(layer[LAYER["output"]][0], where),))


def _contents(source: Any) -> tuple[Contents, str, int]:
    """The file's contents, where it is (for messages), and its size."""
    data, where, folder = _bytes(source)
    found = Contents([], [], folder=folder, meter=budget.Meter(
        "expansion", len(data), where, "bytes of weights decoded"))
    _walk(data, where, "", 0, found)
    _pair_directions(found)
    _put_back_in_time_order(found)
    return found, where, len(data)


def _pair_directions(contents: Contents) -> None:
    """Merge each bidirectional GRU or simple RNN, as Core ML spells one, into one layer:
    a forward layer and a ``reverseInput`` layer of the same type and sizes reading the same
    blob, the reversed one's outputs put back in time order by a ``reverse`` layer along
    the sequence axis alone, joined forward then backward by a ``concat`` along the
    channels. Other joins (backward first, no ``reverse``) stay separate layers."""
    by_output = {(layer.network, layer.outputs[0]): layer for layer in contents.layers
                 if layer.outputs and layer.kind in (LAYER["gru"], LAYER["simpleRecurrent"])}

    def joined(network: int, blob: str, kind: int) -> tuple[str, ...] | None:
        blob = _resolve(contents, network, blob)
        join = contents.joins.get((network, blob))
        return join[2] if join is not None and join[1] == kind else None

    pairs: dict[int, tuple[Layer, Layer, str]] = {}
    for (network, top), (_, kind, inputs, body) in contents.joins.items():
        if kind != LAYER["concat"] or len(inputs) != 2 or flag(
                body, FIELDS["ConcatLayerParams"]["sequenceConcat"], top, "sequenceConcat"):
            continue
        reversed_from = joined(network, inputs[1], LAYER["reverse"])
        if reversed_from is None or len(reversed_from) != 1 or not _sequence_axis_alone(
                contents.joins[network, _resolve(contents, network, inputs[1])][3], top):
            continue
        forward = by_output.get((network, _resolve(contents, network, inputs[0])))
        backward = by_output.get((network, _resolve(contents, network, reversed_from[0],
                                                    contents.copies)))
        if forward is None or backward is None or forward is backward \
                or forward.kind != backward.kind or not forward.inputs or not backward.inputs \
                or _source(contents, forward) != _source(contents, backward) \
                or _reversed(forward) or not _reversed(backward) \
                or _sizes(forward) != _sizes(backward) \
                or not forward.sequence_output or not backward.sequence_output \
                or id(forward) in pairs or any(id(backward) == id(pair[1])
                                               for pair in pairs.values()):
            continue
        pairs[id(forward)] = (forward, backward, top)
    if not pairs:
        return
    dropped = {id(pair[1]) for pair in pairs.values()}
    merged = []
    for layer in contents.layers:
        if id(layer) in pairs:
            forward, backward, top = pairs[id(layer)]
            layer = replace(forward, outputs=(top,), backward=backward.body)
        elif id(layer) in dropped:
            continue
        merged.append(layer)
    contents.layers = merged


def _put_back_in_time_order(contents: Contents) -> None:
    """Read a ``reverseInput`` layer whose sequence output a ``reverse`` layer along the
    sequence axis alone flips back into time order as one layer with that layer's output:
    a reverse network (Spec.reverse) as rnnport computes it."""
    flips: dict[tuple[int, str], str] = {}
    for (network, top), (label, kind, inputs, body) in contents.joins.items():
        if kind == LAYER["reverse"] and len(inputs) == 1 and _sequence_axis_alone(body, label):
            flips.setdefault((network, _resolve(contents, network, inputs[0], contents.copies)),
                             top)
    for index, layer in enumerate(contents.layers):
        if layer.backward is None and layer.outputs and layer.kind != LAYER["biDirectionalLSTM"] \
                and _reversed(layer) and layer.sequence_output \
                and (layer.network, layer.outputs[0]) in flips:
            contents.layers[index] = replace(
                layer, outputs=(flips[layer.network, layer.outputs[0]],), time_ordered=True)


def _resolve(contents: Contents, network: int, blob: str,
             through: dict[tuple[int, str], str] | None = None) -> str:
    """The blob ``blob`` repeats, through the layers that only reshape their input (or,
    given ``through``, those alone: the ``copy`` layers before a ``reverse``, whose axis 0
    must stay the sequence's)."""
    links = contents.aliases if through is None else through
    seen = set()
    while (network, blob) in links and blob not in seen:
        seen.add(blob)
        blob = links[network, blob]
    return blob


def _reversed(layer: Layer) -> bool:
    return flag(layer.body, 100, layer.label, "reverseInput")


def _sequence_axis_alone(body: Message, where: str) -> bool:
    """Whether a ``reverse`` layer flips the first axis (Seq of a rank-5 blob) alone."""
    values = body.get(FIELDS["ReverseLayerParams"]["reverseDim"], [])
    flags: list[int] = []
    for value in values:  # packed (bytes of varints) or one varint per value
        flags += list(value) if isinstance(value, bytes) else [value]
    del where
    return bool(flags) and flags[0] == 1 and not any(flags[1:])


def _bytes(source: Any) -> tuple[bytes, str, Path | None]:
    """The ``Model`` bytes of ``source``, where it is, and the folder its weight files
    lie in (None for a model in memory)."""
    if isinstance(source, CoreMLModel):
        if not isinstance(source.spec, (bytes, bytearray, memoryview)):
            raise FormatError(f"coreml: CoreMLModel.spec is a {type(source.spec).__name__}; "
                              "expected the Model protocol buffer's bytes.")
        return bytes(source.spec), "Core ML model", None
    if _framework_object(source):
        spec = source.get_spec() if hasattr(source, "get_spec") else source
        return bytes(spec.SerializeToString()), "Core ML model", None
    where = f"Core ML {os.fspath(source)}"
    path = Path(source)
    if path.is_dir():
        model = package_model(path, where)
        return read_file(model, where, inside=path, limit=MAX_FILE_BYTES), where, model.parent
    return read_file(path, where, limit=MAX_FILE_BYTES), where, path.parent


def _framework_object(source: Any) -> bool:
    """A coremltools ``MLModel`` or a ``Model_pb2.Model`` spec (told without importing
    coremltools)."""
    module = type(source).__module__ or ""
    if type(source).__name__ == "Model" and module.split(".")[-1] == "Model_pb2":
        return hasattr(source, "SerializeToString")
    return module.startswith("coremltools") and hasattr(source, "get_spec")


def _networks(contents: Contents, where: str) -> list[list[Layer]]:
    chains: list[list[Layer]] = []
    for layer in contents.layers:
        if chains:
            previous = chains[-1][-1]
            if previous.network == layer.network and layer.inputs and previous.outputs \
                    and _source(contents, layer) == previous.outputs[0] \
                    and previous.sequence_output:
                chains[-1].append(layer)
                continue
        chains.append([layer])
    if not chains:
        if contents.ml_program:
            raise UnsupportedFeatureError(
                f"{where}: a pipeline holding {len(contents.programs)} ML Programs and no "
                "recurrent NeuralNetwork layer; rnnport reads one ML Program at a time. Save "
                "the program that holds the network as a model of its own.")
        raise FormatError(f"{where}: no uniDirectionalLSTM, biDirectionalLSTM, gru or "
                          f"simpleRecurrent layer; found {listed(contents.others) or 'nothing'}.")
    return chains


def _source(contents: Contents, layer: Layer) -> str:
    """The blob a layer's first input repeats, through layers that only reshape it."""
    return _resolve(contents, layer.network, layer.inputs[0])


def _describe(chain: Sequence[Layer]) -> str:
    return " → ".join(f"{layer.label} ({layer.type})" for layer in chain)


def _pick(chains: list[list[Layer]], layer: str | None, where: str) -> list[Layer]:
    return by_layer(chains, layer, lambda chain: [item.label for item in chain], _describe,
                    where)


# -- one layer -------------------------------------------------------------------------------


def _activation(raw: int | bytes, where: str) -> tuple[str, float, float]:
    """One ``ActivationParams`` as Spec.activations holds it."""
    if not isinstance(raw, bytes):
        raise FormatError(f"{where}: an activation is a number; expected a message.")
    found = message(raw, where)
    names = {number: name for name, number in FIELDS["ActivationParams"].items()}
    chosen = [names.get(number, f"field {number}") for number in found]
    if len(chosen) != 1:
        raise FormatError(f"{where}: an activation naming {listed(chosen) or 'nothing'}; "
                          "expected exactly one function. The file is damaged.")
    name = chosen[0]
    if name not in ACTIVATIONS:
        raise UnsupportedFeatureError(
            f"{where}: the activation {name}; rnnport computes "
            f"{listed(sorted(ACTIVATIONS))} (thresholdedReLU keeps x at x = alpha, which "
            "rnnport's ThresholdedRelu does not; PReLU and parametricSoftplus hold arrays). "
            "Rebuild the layer with one of those activations.")
    onnx, parameters = ACTIVATIONS[name]
    body = message(sub(found, FIELDS["ActivationParams"][name], where, name) or b"", where)
    alpha, beta = [float32(body, index + 1, where, parameter) if index < len(parameters)
                   else 0.0 for index, parameter in enumerate(("alpha", "beta"))]
    if len(parameters) == 2 and alpha == 0 and beta == 0:
        # coremltools' builders leave them unset (add_gru's default hard sigmoid), and Core
        # ML does not document what it computes then: clip(0·x + 0) would be a constant.
        raise UnsupportedFeatureError(
            f"{where}: the activation {name} with alpha and beta unset (0 and 0), which "
            "Core ML does not define; expected the values set (0.2 and 0.5 for the usual "
            "hard sigmoid). Set them in the spec (layer.gru.activations[0].sigmoidHard.alpha "
            "= 0.2 …) and save it again.")
    # float32 fields: the shortest decimal that gives the stored value back (as ONNX's).
    return onnx, float(str(np.float32(alpha))), float(str(np.float32(beta)))


def _activations(values: list[int | bytes], count: int, where: str
                 ) -> tuple[tuple[str, float, float], ...]:
    if not values:
        return ()
    if len(values) != count:
        raise FormatError(f"{where}: {len(values)} activations; expected {count}.")
    return tuple(_activation(value, where) for value in values)


def _sizes(layer: Layer) -> tuple[int, int]:
    input_size = number_of(layer.body, 1, layer.label, "inputVectorSize")
    hidden = number_of(layer.body, 2, layer.label, "outputVectorSize")
    if not 0 < input_size < 2**31 or not 0 < hidden < 2**31:
        raise FormatError(f"{layer.label}: inputVectorSize {input_size}, outputVectorSize "
                          f"{hidden}; expected positive sizes. The file is damaged.")
    return input_size, hidden


def _cell_clip(threshold: float, option: Any) -> float | None:
    if option != FROM_FILE:
        return None if option is None else float(option)
    if threshold <= 0 or not np.isfinite(threshold) or threshold >= FLOAT32_MAX:
        return None
    return float(str(np.float32(threshold)))  # a float32 field: its shortest decimal


def layer_spec(layer: Layer, cell_clip: Any = FROM_FILE) -> Spec:
    """The one-layer Spec of a recurrent layer (no weights read)."""
    if layer.kind == LAYER["loop"]:
        if isinstance(layer.loop, UnsupportedFeatureError):
            raise UnsupportedFeatureError(*layer.loop.args) from None
        if layer.loop is None:
            raise FormatError(f"{layer.label}: a loop layer not read")
        return Spec(**layer.loop.fields)
    if layer.backward is not None:
        forward = layer_spec(replace(layer, backward=None), cell_clip)
        backward = layer_spec(replace(layer, body=layer.backward, backward=None,
                                      time_ordered=True), cell_clip)
        if backward != forward.replace(reverse=True):
            raise UnsupportedFeatureError(
                f"{layer.label}: a bidirectional {layer.type} pair whose backward layer "
                f"differs from its forward one ({backward} against {forward}); rnnport's "
                "bidirectional layers use one cell, bias and activations for both directions.")
        return forward.replace(bidirectional=True)
    where = layer.label
    input_size, hidden = _sizes(layer)
    if layer.kind in (LAYER["uniDirectionalLSTM"], LAYER["biDirectionalLSTM"]):
        numbers = FIELDS["LSTMParams"]
        params = message(sub(layer.body, 15, where, "params") or b"", where)
        bidirectional = layer.kind == LAYER["biDirectionalLSTM"]
        activations = _activations(layer.body.get(10, []), 3, where)
        if bidirectional and _activations(layer.body.get(11, []), 3, where) != activations:
            raise UnsupportedFeatureError(
                f"{where}: a biDirectionalLSTM whose backward activations differ from its "
                "forward ones; rnnport's bidirectional LSTM uses one set for both directions.")
        return Spec("lstm", input_size, hidden, bidirectional=bidirectional,
                    bias=flag(params, numbers["hasBiasVectors"], where, "hasBiasVectors"),
                    peepholes=flag(params, numbers["hasPeepholeVectors"], where, "peepholes"),
                    input_forget=flag(params, numbers["coupledInputAndForgetGate"], where,
                                      "coupledInputAndForgetGate"),
                    cell_clip=_cell_clip(float32(params, numbers["cellClipThreshold"], where,
                                                 "cellClipThreshold"), cell_clip),
                    activations=activations, reverse=not bidirectional and _check_time_order(
                        layer, flag(layer.body, 100, where, "reverseInput")))
    reverse = flag(layer.body, 100, where, "reverseInput")
    _check_time_order(layer, reverse)
    bias = flag(layer.body, 20, where, "hasBiasVectors")
    if layer.kind == LAYER["gru"]:
        return Spec("gru", input_size, hidden, reset_after=False, bias=bias,
                    activations=_activations(layer.body.get(10, []), 2, where), reverse=reverse)
    activation = _activations(layer.body.get(10, [])[-1:], 1, where)
    if not activation:
        raise FormatError(f"{where}: a simpleRecurrent layer without its activation; Core ML "
                          "requires one (tanh or ReLU for rnnport). The file is damaged.")
    name = activation[0][0]
    if name not in ("Tanh", "Relu"):
        raise UnsupportedFeatureError(
            f"{where}: a simpleRecurrent layer with activation {name}; rnnport's simple RNN "
            "computes tanh (rnn_tanh) or ReLU (rnn_relu). Rebuild the layer with one of them.")
    return Spec("rnn_tanh" if name == "Tanh" else "rnn_relu", input_size, hidden, bias=bias,
                reverse=reverse)


def _check_time_order(layer: Layer, reverse: bool) -> bool:
    """``reverse``, once sure rnnport's reverse network gives what the layer outputs: a
    ``reverseInput`` layer outputs its steps in the order it ran them (the output after
    ``x_T`` first: coremltools' tests of ``direction="reverse"`` expect the same), which is
    rnnport's (time-ordered) ``y`` flipped, unless a ``reverse`` layer flips it back."""
    if reverse and layer.sequence_output and not layer.time_ordered:
        raise UnsupportedFeatureError(
            f"{layer.label}: a {layer.type} layer with reverseInput and sequenceOutput gives "
            "its outputs in the order it ran them (the output after the last step first), "
            "and no reverse layer along the sequence axis puts them back in time order; "
            "rnnport's reverse networks give y in time order (as ONNX's direction=\"reverse\"). "
            "Add a reverse layer (reverseDim 1, 0, 0, 0, 0) after it, or flip the time axis "
            "of x yourself and read the layer with reverseInput false.")
    return reverse


def _direction(layer: Layer, spec: Spec, raw: bytes, meter: budget.Meter
               ) -> dict[str, np.ndarray]:
    """One direction's canonical arrays from its Core ML weight fields."""
    where, hidden, inputs = layer.label, spec.hidden_size, spec.input_size
    if spec.cell == "lstm":
        numbers, names = FIELDS["LSTMWeightParams"], LSTM_GATES
        found = message(raw, where)
        weight, recursion, bias_name = "WeightMatrix", "RecursionMatrix", "BiasVector"
    else:
        numbers = FIELDS["GRULayerParams"] if spec.cell == "gru" else \
            FIELDS["SimpleRecurrentLayerParams"]
        names = GRU_GATES if spec.cell == "gru" else {"h": ""}
        found = layer.body
        weight, recursion, bias_name = (("WeightMatrix", "RecursionMatrix", "BiasVector")
                                        if spec.cell == "gru" else
                                        ("weightMatrix", "recursionMatrix", "biasVector"))

    def take(gate: str, suffix: str, count: int) -> np.ndarray:
        field = f"{names[gate]}{suffix}"
        return weights(sub(found, numbers[field], where, field), count,
                       f"{where}: {field}", meter)

    order = CANONICAL[gate_family(spec.cell)]
    named = {"weight_ih": np.concatenate([take(gate, weight, hidden * inputs).reshape(
                 hidden, inputs) for gate in order]),
             "weight_hh": np.concatenate([take(gate, recursion, hidden * hidden).reshape(
                 hidden, hidden) for gate in order])}
    has_bias = bool(spec.cell == "lstm" and flag(
        message(sub(layer.body, 15, where, "params") or b"", where),
        FIELDS["LSTMParams"]["hasBiasVectors"], where, "hasBiasVectors")) or (
        spec.cell != "lstm" and spec.bias)
    if spec.bias:
        named["bias_ih"] = np.concatenate([take(gate, bias_name, hidden) for gate in order]) \
            if has_bias else np.zeros(len(order) * hidden, named["weight_ih"].dtype)
        named["bias_hh"] = np.zeros_like(named["bias_ih"])
    if spec.peepholes:
        named["weight_peephole"] = np.stack([take(gate, "PeepholeVector", hidden)
                                             for gate in "ifo"])
    return named


def _layer_model(layer: Layer, meter: budget.Meter, cell_clip: Any) -> RNN:
    spec = layer_spec(layer, cell_clip)
    if layer.loop is not None:
        assert isinstance(layer.loop, LoopCell)  # layer_spec raised the refusal
        return loop_model(spec, layer.loop)
    if spec.cell == "lstm":
        raws = layer.body.get(20, [])
        if len(raws) != spec.num_directions or not all(isinstance(raw, bytes) for raw in raws):
            raise FormatError(f"{layer.label}: {len(raws)} weightParams; expected "
                              f"{spec.num_directions}, one per direction. The file is damaged.")
        directions = [_direction(layer, spec, raw, meter)
                      for raw in raws if isinstance(raw, bytes)]
    else:
        one = spec.replace(bidirectional=False)
        directions = [_direction(replace(layer, backward=None), one, b"", meter)]
        if layer.backward is not None:
            directions.append(_direction(replace(layer, body=layer.backward, backward=None),
                                         one, b"", meter))
    dtypes = {array.dtype for named in directions for array in named.values()}
    dtype = np.float16 if dtypes == {np.dtype(np.float16)} else np.float32
    return RNN(spec, [[{name: array.astype(dtype, copy=False) for name, array in named.items()}
                       for named in directions]], copy=False)


# -- the verbs -------------------------------------------------------------------------------


def read(source: Any, layer: str | None = None, cell_clip: Any = FROM_FILE) -> Model:
    """The recurrent network of a ``.mlmodel`` path, a :class:`CoreMLModel`, or a
    coremltools ``MLModel`` / spec; ``layer=`` picks one of several networks, ``cell_clip=``
    replaces the LSTM layers' ``cellClipThreshold`` (None: no clip)."""
    contents, where, size = _contents(source)
    if not contents.layers and len(contents.programs) == 1:
        return read_program(contents.programs[0], contents.folder, where, size, cell_clip, layer)
    chain = _pick(_networks(contents, where), layer, where)
    meter = budget.Meter("expansion", size, where, "bytes of weights decoded")
    return stack([_layer_model(item, meter, cell_clip) for item in chain])


def networks(source: Any) -> Choices:
    """The recurrent networks of a model, each picked by the name of its first layer."""
    contents, where, _ = _contents(source)
    if not contents.layers and len(contents.programs) == 1:
        return Choices("layer", tuple(program_networks(contents.programs[0], where)))
    return Choices("layer", tuple((chain[0].label, _describe(chain))
                                  for chain in _networks(contents, where)))


def notes(source: Any, layer: str | None = None, cell_clip: Any = FROM_FILE) -> list[str]:
    """The layers and models beside the network, and what its layers assume."""
    contents, where, _ = _contents(source)
    if not contents.layers and len(contents.programs) == 1:
        read_program(contents.programs[0], contents.folder, where, 0, cell_clip, layer)
        return program_notes(contents.programs[0], where, contents.folder)
    chains = _networks(contents, where)
    chain = _pick(chains, layer, where)
    out = []
    if contents.others:
        out.append(f"other layers and models beside the network: {listed(contents.others)}")
    for item in chain:
        spec = layer_spec(item, cell_clip)
        if len(item.inputs) > 1:
            out.append(f"{item.label} takes its initial state from {', '.join(item.inputs[1:])}; "
                       "forward(state=…) gives it (zeros when None)")
        if isinstance(item.loop, LoopCell):
            out.extend(loop_notes(item.label, item.loop))
        if item.kind == LAYER["loop"] and not item.sequence_output:
            out.append(f"{item.label} leaves its outputs in a buffer of T + 1 rows, the initial "
                       "state first: forward's y is its rows 1 to T")
        elif item is chain[-1] and not item.sequence_output:
            step = "y[:, 0] (it runs the sequence last step first)" if spec.reverse \
                else "y[:, -1]"
            out.append(f"{item.label} outputs its last step alone (sequenceOutput false): "
                       f"forward's {step}")
        if spec.cell == "lstm" and flag(message(sub(item.body, 15, item.label, "params")
                                                or b"", item.label),
                                        FIELDS["LSTMParams"]["forgetBias"], item.label,
                                        "forgetBias"):
            out.append(f"{item.label} sets forgetBias, read as the stored forget-gate bias "
                       "alone: Core ML adds nothing for it (coremltools' Keras converter sets "
                       "it with Keras's whole bias stored, and its tests compare with Keras)")
        if spec.cell == "lstm" and spec.cell_clip is not None:
            out.append(f"{item.label} clips its cell state at ±{spec.cell_clip:g} "
                       "(cellClipThreshold); read with cell_clip=None to leave it out")
    for other in chains:
        if other is not chain:
            out.append(f"another recurrent network: {_describe(other)} (layer="
                       f"{other[0].label!r} reads it)")
    return out


def write(model: Model, path: Any = None, program: bool | None = None
          ) -> CoreMLModel | CoreMLPackage:
    """A NeuralNetwork model, or with ``program=True`` (the default for a path ending
    ``.mlpackage``) an ML Program package (:mod:`.package`)."""
    if program is None:
        program = path is not None and os.fspath(path).lower().endswith(".mlpackage")
    if program:
        package = encode_package(model)
        if path is not None:
            save_package(package, Path(path))
        return package
    native = CoreMLModel(encode(model))
    if path is not None:
        atomic_write(Path(path), lambda file: file.write(native.spec))
    return native


def input_files(path: Path) -> list[Path]:
    """The files a read opens beside ``path``: an ML Program's weights file, which reading
    its spec opens; for a ``.mlpackage`` folder, its ``Manifest.json``, the model file the
    manifest names (``Data/com.apple.CoreML/model.mlmodel`` where it names none) and the
    weights file beside that."""
    if path.suffix.lower() == ".mlmodel":
        weights = path.parent / "weights" / "weight.bin"
        return [weights] if weights.is_file() else []
    if not (path.is_dir() and (path / "Manifest.json").is_file()):
        return []
    try:
        model = package_model(path, f"Core ML {path}")
    except FormatError:
        model = path / "Data" / MODEL_ITEM
    return [path / "Manifest.json", model, model.parent / "weights" / "weight.bin"]


def sniff(source: Any) -> bool:
    """A :class:`CoreMLModel`, a coremltools model or spec, a path ending ``.mlmodel`` or
    ``.mlpackage``, or a file whose first field is a small ``specificationVersion`` followed
    (at the top level) by one of ``Model``'s model fields."""
    if isinstance(source, CoreMLModel) or _framework_object(source):
        return True
    if not is_path(source):
        return False
    if os.fspath(source).lower().endswith((".mlmodel", ".mlpackage")):
        return True
    start = head(source, 1 << 20)
    return start is not None and _looks_like_model(memoryview(start))


def _looks_like_model(head: memoryview) -> bool:
    models = set(NETWORKS) | set(PIPELINES) | {MODEL["mlProgram"]}
    position = 0
    try:
        number, wire, position = tag_at(head, position)
        if number != MODEL["specificationVersion"] or wire != 0:
            return False
        version_end = skip(head, position, wire, number)
        if version_end - position != 1 or not 0 < head[position] < 64:
            return False
        position = version_end
        while position < len(head):
            number, wire, position = tag_at(head, position)
            if number in models and wire == 2:
                return True
            position = skip(head, position, wire, number)
    except ProtoError:
        return False
    return False


def param_count(model: Model) -> int:
    """Values the file stores: one bias per gate."""
    parts = model.parts if isinstance(model, Stack) else (model,)
    total = 0
    for part in parts:
        spec = part.spec
        for index in range(spec.num_layers):
            gates, hidden = spec.gate_count, spec.hidden_size
            per = gates * hidden * (spec.layer_input_size(index) + hidden)
            per += gates * hidden if spec.bias else 0
            per += 3 * hidden if spec.peepholes else 0
            total += per * spec.num_directions
    return total


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """Each layer's Core ML arrays, one per gate and kind, as the file names them."""
    contents, where, size = _contents(native)
    meter = budget.Meter("expansion", size, where, "bytes of weights decoded")
    out = []
    for layer in contents.layers:
        if layer.kind == LAYER["loop"]:
            continue  # rnnport writes no loops; a read one has no Core ML names of its own
        model = _layer_model(layer, meter, FROM_FILE)
        order = CANONICAL[gate_family(model.spec.cell)]
        names = LSTM_GATES if model.spec.cell == "lstm" else \
            GRU_GATES if model.spec.cell == "gru" else {"h": "h"}
        for direction, named in enumerate(model.params[0]):
            side = ("forward", "backward")[direction] + "." if model.spec.bidirectional else ""
            hidden = model.spec.hidden_size
            for index, gate in enumerate(order):
                rows = slice(index * hidden, (index + 1) * hidden)
                out.append(NamedArray(f"{layer.label}.{side}{names[gate]}WeightMatrix",
                                      named["weight_ih"][rows]))
                out.append(NamedArray(f"{layer.label}.{side}{names[gate]}RecursionMatrix",
                                      named["weight_hh"][rows]))
                if "bias_ih" in named:
                    out.append(NamedArray(f"{layer.label}.{side}{names[gate]}BiasVector",
                                          named["bias_ih"][rows]))
    return out


def framework_forward(source: Any, model: Model, x: np.ndarray) -> str:
    """Core ML runs on Apple platforms alone; say so, and what was checked instead."""
    del source, model, x
    return ("Core ML runs only on macOS and iOS, so it cannot run the model here; the "
            "network was read by the equations of Apple's NeuralNetwork.proto, which the "
            "golden files check against the source frameworks' numbers: no framework check")


FORMAT = Format(
    "coreml", sniff=sniff, reader=read, writer=write, counter=param_count, package=PACKAGE,
    cells=frozenset({"lstm", "gru", "rnn"}), reset_after=False,
    read_options=READ_OPTIONS, write_options=frozenset({"program"}),
    features=frozenset({"peepholes", "cell_clip", "input_forget", "activations",
                        "reset_before", "reverse"}),
    one_bias=frozenset({"lstm", "gru_reset_before", "rnn"}),
    dtypes=frozenset({"float16", "float32"}), extra=None, modules=(),
    suffixes=(Suffix(".mlmodel", "a Core ML model (a NeuralNetwork, or an ML Program's spec)"),
              Suffix(".mlpackage", "a Core ML package: an ML Program and its weights")),
    input_files=input_files,
    activations=holds_activations, explain_arrays=explain_arrays, networks=networks,
    notes=notes, framework_forward=framework_forward, gate_names={"g": "z", "n": "o"},
    drops={"cell_clip": "read it with cell_clip=None to drop the clip: the outputs stay the "
                        "same while no step's |c| reaches it (coremltools sets 50000 for every "
                        "LSTM)"},
    names={"reset_after": "the gru layer (reset before only; a reset-after GRU is read from "
                          "the loops coremltools writes for one, never written: ONNX, Keras, "
                          "PyTorch and TFLite hold one)",
           "peepholes": "hasPeepholeVectors", "cell_clip": "cellClipThreshold",
           "input_forget": "coupledInputAndForgetGate", "activations": "ActivationParams",
           "reset_before": "gru", "reverse": "reverseInput"},
    layout_notes=("Core ML keeps one matrix per gate: W (H, I), R (H, H), b (H,) and "
                  "peepholes (H,), LSTM gates named input, forget, blockInput (canonical g), "
                  "output; GRU update (z), reset (r), output (canonical n); one bias per gate.",
                  "Sequences are rank-5 blobs (Seq, Batch, C, 1, 1): time first."),
)
