"""Reading OpenVINO IR: the recurrent layers, their attributes and weights, and the chains
they form (see :mod:`rnnport.formats.openvino` for the layout)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import AmbiguousSourceError, FormatError, LimitError, ShapeError, UnsupportedFeatureError
from ...gates import CANONICAL, block, reorder
from ...model import RNN, Model, Stack, stack
from ...spec import Spec
from .._common import listed
from .fold import SEQUENCES, SHAPING, Evaluator, Value
from .ir import ELEMENT_TYPES, Graph, Layer, load, parse_shape

__all__ = ["ORDERS", "Analysis", "analyse", "networks", "notes", "read"]

# Gate orders of W, R and B along their second axis (checked against the runtime).
ORDERS = {"lstm": "figo", "gru": "zrn", "rnn": "h"}
DEFAULT_ACTIVATIONS = {"lstm": ["sigmoid", "tanh", "tanh"], "gru": ["sigmoid", "tanh"]}
# Inputs of each recurrent layer: where W, R, B, the lengths and the states are.
INPUTS = {"lstm": {"X": 0, "H": 1, "C": 2, "lengths": 3, "W": 4, "R": 5, "B": 6},
          "gru": {"X": 0, "H": 1, "lengths": 2, "W": 3, "R": 4, "B": 5},
          "rnn": {"X": 0, "H": 1, "lengths": 2, "W": 3, "R": 4, "B": 5}}
# Layers that compute a recurrence rnnport does not read from an IR, and why.
REFUSED = {
    "TensorIterator": "a TensorIterator (a loop over time steps with a body graph)",
    "Loop": "a Loop (a loop with a body graph)",
    "LSTMCell": "an LSTMCell (one time step of an LSTM)",
    "GRUCell": "a GRUCell (one time step of a GRU)",
    "RNNCell": "an RNNCell (one time step of a simple RNN)",
    "AUGRUSequence": "an AUGRUSequence (an attention-gated GRU)",
    "AUGRUCell": "an AUGRUCell (an attention-gated GRU step)",
}
# Layers that pass a layer's output on to the next one, as converters join a stack.
GLUE = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Convert"}
SIZES = (2, 3, 5, 7, 11)  # batch and time sizes the input is fed at, told apart from I


@dataclass
class Analysis:
    """One IR, evaluated: its recurrent layers in chains (each a network), and what the
    layers around them do."""

    graph: Graph
    evaluate: Evaluator
    chains: list[list[Layer]]
    apart: list[str] = field(default_factory=list)  # why joined layers are read apart
    time_major: bool = False  # the graph's input gives time before batch
    fed: list[str] = field(default_factory=list)  # states and lengths from graph inputs

    def chain(self, node: Any) -> list[Layer]:
        """The chain ``node=`` picks, or the only one."""
        where = f"read(fmt='openvino'), {self.graph.where}"
        picked = self.chains
        if node is not None:
            if not isinstance(node, str):
                raise FormatError(f"{where}: node={node!r}; expected the name of a recurrent "
                                  "layer.")
            picked = [chain for chain in self.chains if any(layer.name == node
                                                            for layer in chain)]
            if not picked:
                names = listed(repr(layer.name) for chain in self.chains for layer in chain)
                raise FormatError(f"{where}: no recurrent layer named {node!r}; the recurrent "
                                  f"layers: {names}.")
        if len(picked) > 1:
            listing = listed(" → ".join(repr(layer.name) for layer in chain) for chain in picked)
            why = f" ({'; '.join(self.apart)}.)" if self.apart else ""
            raise AmbiguousSourceError(f"{where}: the IR holds {len(picked)} separate recurrent "
                                       f"networks ({listing}); pass node= with the name of one "
                                       f"of their layers.{why}")
        return picked[0]


def analyse(source: Any) -> Analysis:
    """``source`` loaded, its inputs fed, and its recurrent layers found in chains."""
    graph = load(source)
    found = [layer for layer in graph.layers.values() if layer.type in SEQUENCES]
    if not found:
        refused = sorted({REFUSED[layer.type] for layer in graph.layers.values()
                          if layer.type in REFUSED})
        if refused:
            raise UnsupportedFeatureError(
                f"read(fmt='openvino'), {graph.where}: the IR computes its recurrence with "
                f"{' and '.join(refused)}, which rnnport does not read; it reads LSTMSequence, "
                "GRUSequence and RNNSequence layers. Convert the model again with "
                "openvino.convert_model from PyTorch or ONNX, which writes those.")
        types = listed(sorted({layer.type for layer in graph.layers.values()}))
        raise FormatError(f"read(fmt='openvino'), {graph.where}: the IR has no LSTMSequence, "
                          f"GRUSequence or RNNSequence layer (its layers: {types or 'none'}); "
                          "expected a recurrent network.")
    for layer in found:
        if layer.type == "LSTMSequence" and layer.version != "opset5":
            raise UnsupportedFeatureError(
                f"read(fmt='openvino'), {graph.where}, {layer.label()}: version "
                f"{layer.version!r}; rnnport reads LSTMSequence of opset5 (opset1's holds "
                "peepholes and a coupled input gate in another layout). Convert the model "
                "again with a current openvino.convert_model.")
    evaluate, time_major = _fed(graph, found)
    analysis = Analysis(graph, evaluate, [], time_major=time_major)
    analysis.chains = _chains(analysis, found)
    return analysis


def _fed(graph: Graph, found: list[Layer]) -> tuple[Evaluator, bool]:
    """An evaluator fed sizes at which every recurrent layer's X is [B, T, I] with B and T
    distinct, and whether the graph's input gives time before batch."""
    parameters = graph.of_type("Parameter")
    declared = {layer.id: parse_shape(layer.data.get("shape", ""), f"{graph.where}, "
                                      f"{layer.label()}", "shape") for layer in parameters}
    first = found[0]
    weights = Evaluator(graph, {})(*graph.producer(first, INPUTS[SEQUENCES[first.type]]["W"]))
    inputs = weights.array.shape[-1] if weights.array.ndim == 3 else 0
    batch, time = [size for size in SIZES if size != inputs][:2]
    last_error: FormatError | None = None
    fixed: Evaluator | None = None  # an input whose declared sizes fix batch and time
    for order in itertools.permutations((batch, time, inputs)):
        feeds = {layer.id: _feed(layer, declared[layer.id], order, batch, graph.where)
                 for layer in parameters}
        evaluate = Evaluator(graph, feeds)
        try:
            shape = evaluate(*graph.producer(first, 0)).array.shape
        except LimitError:
            raise
        except FormatError as error:
            last_error = error
            continue
        if shape == (batch, time, inputs):
            return evaluate, order.index(time) < order.index(batch)
        if len(shape) == 3 and shape[2] == inputs and fixed is None:
            fixed = evaluate
    if fixed is not None:
        return fixed, False
    raise FormatError(f"read(fmt='openvino'), {graph.where}: no input sizes give "
                      f"{first.label()} an input X [batch, time, {inputs}]"
                      f"{f' ({last_error})' if last_error else ''}; expected the graph's "
                      "inputs to reach it as a sequence of vectors.")


def _feed(layer: Layer, shape: tuple[int, ...], order: tuple[int, ...], batch: int,
          where: str) -> np.ndarray:
    """A graph input's value: its declared sizes, dynamic ones from ``order`` (then
    ``batch``); distinct small numbers for floats, zeros (valid indices) otherwise."""
    kind = layer.data.get("element_type", "f32")
    dtype = ELEMENT_TYPES.get(kind)
    if dtype is None:
        raise UnsupportedFeatureError(f"{where}, {layer.label()}: an input of element_type "
                                      f"{kind!r}; expected one of {', '.join(ELEMENT_TYPES)}.")
    sizes = iter(order)
    dims = tuple(dim if dim >= 0 else next(sizes, batch) for dim in shape)
    count = int(np.prod(dims, dtype=np.int64)) if dims else 1
    if count > 1 << 20:
        raise FormatError(f"{where}, {layer.label()}: an input of shape {list(dims)}; rnnport "
                          "evaluates the layers around the network at small sizes, and this "
                          "input fixes sizes too large for that.")
    if dtype.kind == "f":
        return (np.arange(count, dtype=np.float64) / 16).astype(dtype).reshape(dims)
    return np.zeros(dims, dtype)


def _chains(analysis: Analysis, found: list[Layer]) -> list[list[Layer]]:
    """The recurrent layers in chains: a layer is the next layer of the one whose Y it takes
    through reshaping layers as X [B, T, D·H] (checked on distinct numbers), when its state
    is not computed from a recurrent layer's outputs."""
    graph = analysis.graph
    successor: dict[str, Layer] = {}
    for layer in found:
        frontier, seen = [(layer.id, 0)], set()
        while frontier:
            key = frontier.pop()
            if key in seen:
                continue
            seen.add(key)
            graph.work.charge(1, "following a layer's output")
            for target, index in graph.consumers.get(key, []):
                consumer = graph.layers[target]
                if consumer.type in SEQUENCES and index == 0 and consumer.id not in successor:
                    reason = _link(analysis, layer, consumer)
                    if reason is None:
                        successor[layer.id] = consumer
                    else:
                        analysis.apart.append(f"{consumer.label()} takes the output of "
                                              f"{layer.label()}, but {reason}: not the next "
                                              "layer of a stack, so each is read as a network "
                                              "of its own")
                    frontier.clear()
                    break
                if consumer.type in GLUE:
                    frontier.extend((consumer.id, output)
                                    for output in range(len(consumer.outputs)))
    following = set(layer.id for layer in successor.values())
    chains = []
    for layer in found:
        if layer.id in following:
            continue
        chain = [layer]
        while chain[-1].id in successor and len(chain) <= len(found):
            chain.append(successor[chain[-1].id])
        chains.append(chain)
    return chains


def _link(analysis: Analysis, before: Layer, after: Layer) -> str | None:
    """Why ``after`` is not the next layer of ``before``'s stack, or None when it is."""
    evaluate, graph = analysis.evaluate, analysis.graph
    output = evaluate(before, 0).array
    batch, count, time, hidden = output.shape
    expected = output.transpose(0, 2, 1, 3).reshape(batch, time, count * hidden)
    got = evaluate(*graph.producer(after, 0)).array
    if got.shape != expected.shape or not np.array_equal(got, expected):
        return ("the layers between them rearrange its Y (a stack's next layer takes Y "
                "[B, D, T, H] as X [B, T, D·H], the directions' features side by side)")
    inputs = INPUTS[SEQUENCES[after.type]]
    for name in ("H", "C"):
        if name in inputs:
            origins = evaluate(*graph.producer(after, inputs[name])).origins
            if any(graph.layers[origin].type in SEQUENCES for origin in origins):
                return ("its initial state is computed from a recurrent layer's outputs (as "
                        "a decoder starts from an encoder's final state)")
    return None


# -- one layer ------------------------------------------------------------------------------


def _attributes(layer: Layer, family: str, where: str) -> Spec:
    """The Spec of one recurrent layer (sizes from its weights are checked later)."""
    data = layer.data
    direction = data.get("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise FormatError(f"{where}: direction={direction!r}; expected forward, reverse or "
                          "bidirectional.")
    clip = data.get("clip", "0").strip()
    if clip not in ("", "0", "0.0", "0.000000"):
        raise UnsupportedFeatureError(
            f"{where}: clip={clip}; every pre-activation is clipped to ±{clip} before its "
            "activation, which rnnport does not read from an IR (reading it without would "
            "change the numbers). Convert the model without a clip.")
    activations = [name.strip().lower() for name in data.get("activations", "").split(",")
                   if name.strip()]
    cell = family
    if family == "rnn":
        if activations not in ([], ["tanh"], ["relu"]):
            raise UnsupportedFeatureError(
                f"{where}: activations={data.get('activations')!r}; rnnport reads a simple RNN "
                "with tanh or relu.")
        cell = "rnn_relu" if activations == ["relu"] else "rnn_tanh"
    elif activations not in ([], DEFAULT_ACTIVATIONS[family]):
        default = ", ".join(DEFAULT_ACTIVATIONS[family])
        raise UnsupportedFeatureError(
            f"{where}: non-default activations {data.get('activations')!r}; rnnport reads "
            f"an IR {family.upper()} with its default activations ({default}). Reading it "
            "otherwise would change the numbers.")
    for name in ("activations_alpha", "activations_beta"):
        if data.get(name, "").strip():
            raise UnsupportedFeatureError(f"{where}: {name}={data[name]!r}; rnnport reads "
                                          "activations without parameters.")
    reset_after = True
    if family == "gru":
        setting = data.get("linear_before_reset", "false").strip().lower()
        if setting not in ("true", "false", "1", "0"):
            raise FormatError(f"{where}: linear_before_reset={setting!r}; expected true or "
                              "false.")
        reset_after = setting in ("true", "1")
    hidden = data.get("hidden_size", "")
    if not hidden.isdigit() or not 0 < int(hidden) <= 1 << 24:
        raise FormatError(f"{where}: hidden_size={hidden!r}; expected a positive whole number.")
    return Spec(cell, 1, int(hidden), bidirectional=direction == "bidirectional",
                reverse=direction == "reverse", reset_after=reset_after)


def _weights(analysis: Analysis, layer: Layer, name: str, where: str) -> Value:
    value = analysis.evaluate(*analysis.graph.producer(layer, INPUTS[SEQUENCES[layer.type]][name]))
    if value.origins:
        raise UnsupportedFeatureError(f"{where}: its {name} is computed from the graph's inputs "
                                      "at run time; rnnport reads weights the IR stores.")
    if value.computed:
        raise UnsupportedFeatureError(
            f"{where}: its {name} is computed by {value.computed} from the constants stored (as "
            "in a model whose weights were compressed or quantized), not stored; rnnport reads "
            "stored weights. Save the model with uncompressed weights.")
    if value.array.dtype.kind != "f":
        raise FormatError(f"{where}: its {name} holds {value.array.dtype}; expected floats.")
    return value


def _check_state(analysis: Analysis, layer: Layer, family: str, where: str) -> None:
    """Refuse a fixed non-zero initial state or fixed shorter lengths; note those fed from
    the graph's inputs."""
    graph, evaluate = analysis.graph, analysis.evaluate
    inputs = INPUTS[family]
    x = evaluate(*graph.producer(layer, 0)).array
    batch, time = x.shape[:2]
    for name in ("H", "C", "lengths"):
        if name not in inputs:
            continue
        value = evaluate(*graph.producer(layer, inputs[name]))
        what = "sequence lengths" if name == "lengths" else f"initial {name.lower()}"
        recurrent = [graph.layers[origin].label() for origin in value.origins
                     if graph.layers[origin].type in SEQUENCES]
        if recurrent:
            analysis.fed.append(f"{layer.label()} takes its {what} from {recurrent[0]}'s "
                                "outputs. Not read: rnnport runs from the state you pass it "
                                "(zeros by default)")
        elif value.origins:
            inputs_named = listed(repr(graph.layers[origin].name) for origin in value.origins)
            analysis.fed.append(f"{layer.label()} takes its {what} from the graph's inputs "
                                f"({inputs_named}). Not read: rnnport runs from the state and "
                                "lengths you pass it (zeros and full length by default)")
        elif name == "lengths":
            if value.array.size and not np.array_equal(value.array.reshape(-1),
                                                       np.full(batch, time)):
                raise UnsupportedFeatureError(
                    f"{where}: its sequence lengths are fixed at "
                    f"{value.array.reshape(-1)[:8].tolist()} for inputs of {time} steps; "
                    "rnnport reads networks run over the whole sequence (pass lengths to "
                    "forward instead).")
        elif value.array.any():
            raise UnsupportedFeatureError(
                f"{where}: its {what} is a fixed, non-zero constant; rnnport's networks start "
                "from the state forward is passed (zeros by default), and reading this one "
                "without it would change the numbers.")


def read_layer(analysis: Analysis, layer: Layer) -> RNN:
    """One recurrent layer as a one-layer RNN in canonical layout."""
    family = SEQUENCES[layer.type]
    where = f"read(fmt='openvino'), {analysis.graph.where}, {layer.label()}"
    spec = _attributes(layer, family, where)
    values = {name: _weights(analysis, layer, name, where) for name in ("W", "R", "B")}
    _check_state(analysis, layer, family, where)
    weight, recurrent, bias = (values[name].array for name in ("W", "R", "B"))
    count, gates, hidden = spec.num_directions, spec.gate_count, spec.hidden_size
    bias_width = gates * hidden + (hidden if family == "gru" and spec.reset_after else 0)
    problems = []
    inputs = weight.shape[2] if weight.ndim == 3 and weight.shape[2] > 0 else 0
    for name, array, shape in (("W", weight, (count, gates * hidden, inputs)),
                               ("R", recurrent, (count, gates * hidden, hidden)),
                               ("B", bias, (count, bias_width))):
        if array.shape != shape:
            problems.append(f"{where}: {name} has shape {list(array.shape)}; expected "
                            f"{list(shape)} (directions {count}, {gates} gates of "
                            f"hidden_size {hidden}"
                            + (", and the candidate's recurrent bias" if name == "B" and
                               bias_width > gates * hidden else "") + ")")
    if problems or not inputs:
        raise ShapeError(problems or [f"{where}: W has no input width."])
    stored = {value.stored for value in values.values()}
    dtypes = {array.dtype for array in (weight, recurrent, bias)}
    dtype = stored.pop() if len(stored) == 1 and None not in stored else \
        dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
    order, canonical = ORDERS[family], CANONICAL[family]
    params = []
    for direction in range(count):
        summed = bias[direction, :gates * hidden]
        bias_ih = reorder(summed, order, canonical).astype(dtype)
        bias_hh = np.zeros_like(bias_ih)
        if bias_width > gates * hidden:
            block(bias_hh, canonical, "n")[...] = bias[direction, gates * hidden:]
        params.append({"weight_ih": reorder(weight[direction], order, canonical).astype(dtype),
                       "weight_hh": reorder(recurrent[direction], order, canonical)
                       .astype(dtype),
                       "bias_ih": bias_ih, "bias_hh": bias_hh})
    return RNN(spec.replace(input_size=inputs), [params], copy=False)


def read(source: Any, **options: Any) -> Model:
    analysis = analyse(source)
    return stack([read_layer(analysis, layer) for layer in analysis.chain(options.get("node"))])


def networks(source: Any) -> list[tuple[str, str]]:
    """The separate chains of recurrent layers: (a name ``node=`` takes, what the chain is)."""
    return [(chain[0].name, " → ".join(layer.label() for layer in chain))
            for chain in analyse(source).chains]


def notes(source: Any, **options: Any) -> list[str]:
    """What the IR holds beside the network read: other recurrent networks, states and
    lengths fed from its inputs, an input given time first, f16 weights, and its other
    computing layers (see ``Format.notes``)."""
    analysis = analyse(source)
    chain = analysis.chain(options.get("node"))
    model = stack([read_layer(analysis, layer) for layer in chain])
    out = [f"another recurrent network, {' → '.join(layer.label() for layer in other)}; not "
           f"read (node={other[0].name!r} reads it)."
           for other in analysis.chains if other is not chain]
    out += [f"{reason}." for reason in analysis.apart]
    out += [f"{reason}." for reason in dict.fromkeys(analysis.fed)]
    if analysis.time_major:
        out.append("the graph's input gives time before batch (x [time, batch, input]); "
                   "rnnport read the network, which forward runs on either layout "
                   "(time_major=True).")
    parts = model.parts if isinstance(model, Stack) else [model]
    if any(part.dtype == np.float16 for part in parts):
        out.append("the IR stores the weights as f16 constants converted to f32 (as "
                   "openvino.save_model compresses them by default): read as float16, "
                   "exactly as stored.")
    recurrent = {layer.id for each in analysis.chains for layer in each}
    others = [layer.label() for layer in analysis.graph.layers.values()
              if layer.type not in SHAPING and layer.id not in recurrent]
    if others:
        out.append(f"other computing layers: {listed(others)}; not part of the network read.")
    return out

