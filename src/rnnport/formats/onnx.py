"""ONNX: ``LSTM`` / ``GRU`` / ``RNN`` operator nodes, one node per layer.

Per node (``D`` directions, index 0 forward, 1 reverse)::

    X   [T, B, I]            ([B, T, I] with layout=1)
    W   [D, G·H, I]          gates stacked by rows: LSTM i o f c, GRU z r h, RNN one block
    R   [D, G·H, H]
    B   [D, 2·G·H]           input-side biases, then recurrent-side biases (optional)
    P   [D, 3·H]             LSTM peepholes p_i, p_o, p_f (optional)
    sequence_lens [B] int32, initial_h [D, B, H], initial_c [D, B, H]   (optional)
    Y   [T, D, B, H]         a direction axis, not PyTorch's [T, B, D·H]
    Y_h [D, B, H], Y_c [D, B, H]

W and R are cuDNN's orientation; only the gate order differs. GRU ``linear_before_reset=1``
is the reset-after GRU (cuDNN, PyTorch), ``0`` (the ONNX default) the reset-before one.
``activations`` default to Sigmoid/Tanh/Tanh (LSTM), Sigmoid/Tanh (GRU), Tanh (RNN);
an RNN with ``Relu`` is ``rnn_relu``. ONNX cannot hold an LSTM projection, and its
``clip`` (every pre-activation clipped before its activation) is rnnport's ``gate_clip``,
not TF1's cell clip; ``input_forget=1`` is ``Spec.input_forget`` (``f = 1 − i``).

Writing builds a whole graph: input ``x`` ``(batch, time, input)`` (``time_major=True``:
``(time, batch, input)``), optional inputs ``sequence_lens`` (int32 ``(batch,)``),
``initial_h`` and ``initial_c`` shaped like ``forward``'s state (defaults: full length,
zeros), outputs ``y`` shaped like ``forward``'s ``y``, ``h_n`` and, for LSTM, ``c_n``. The
glue between layers (``Y [T, D, B, H]`` → ``[T, B, D·H]``) is ordinary graph nodes. A
``Stack`` is written whole, with one state input and output per part (``initial_h_0``,
``h_n_0``, …). The graph computes in float32 (ONNX Runtime's CPU kernels for these
operators run float32 only); float16 and float64 weights are stored in their own precision
and cast in the graph, so reading the file back gives them unchanged.

Reading finds the RNN nodes of a graph, takes W/R/B/P from initializers or Constant nodes
(through Cast/Identity), and follows chains of nodes joined by reshaping glue (as
PyTorch's exporter writes a stacked RNN) into one network; ``node=`` picks one chain when
a graph holds several. ``activations`` (with ``activation_alpha``/``activation_beta``,
consumed in order by the functions that take them) become ``Spec.activations``. Anything
that changes the numbers and the runtime cannot compute (a function ONNX does not name,
different functions per direction, weights fed at run time) raises an error naming the
node and the attribute.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..activations import PARAMETERS
from ..errors import AmbiguousSourceError, FormatError, UnsupportedFeatureError
from ..gates import CANONICAL, gate_family, reorder
from ..io.atomic import atomic_write
from ..model import RNN, Model, Stack, stack
from ..spec import Spec
from ._common import describe, require
from ._protocol import Format, NamedArray, Suffix

__all__ = ["FORMAT", "run_reference"]

READ_OPTIONS = frozenset({"node"})
WRITE_OPTIONS = frozenset({"time_major", "opset"})

ORDERS = {"lstm": "iofg", "gru": "zrn", "rnn": "h"}
PEEPHOLE_ORDER = "iof"  # ONNX P; rnnport keeps weight_peephole rows as i, f, o
OPS = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn"}
GLUE_OPS = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast", "Dropout",
            "Concat", "Flatten"}
DEFAULT_OPSET = 17
IR_VERSION = 8
MAX_LENGTH = np.iinfo(np.int32).max


def _is_proto(source: Any, name: str) -> bool:
    return type(source).__name__ == name and hasattr(source, "SerializeToString")


def sniff(source: Any) -> bool:
    if _is_proto(source, "ModelProto") or _is_proto(source, "GraphProto"):
        return True
    return isinstance(source, (str, os.PathLike)) and Path(source).suffix.lower() == ".onnx"


# -- write -----------------------------------------------------------------------------


class _Graph:
    """A small builder over onnx.helper with unique names."""

    def __init__(self, onnx: Any, numpy_helper: Any) -> None:
        self.onnx = onnx
        self.numpy_helper = numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.inputs: list[Any] = []
        self.outputs: list[Any] = []
        self._count = 0

    def name(self, base: str) -> str:
        self._count += 1
        return f"{base}_{self._count}"

    def constant(self, base: str, value: np.ndarray) -> str:
        name = self.name(base)
        self.initializers.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1,
             **attributes: Any) -> list[str]:
        names = [self.name(op.lower()) for _ in range(outputs)] if isinstance(outputs, int) \
            else list(outputs)
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), names,
                                                     name=self.name(op), **attributes))
        return names

    def one(self, op: str, inputs: Sequence[str], **attributes: Any) -> str:
        return self.node(op, inputs, 1, **attributes)[0]


def write(model: Model, path: Any = None, **options: Any) -> Any:
    onnx = require("onnx", extra="onnx", purpose="write(fmt='onnx')")
    from onnx import numpy_helper

    parts = list(model.parts) if isinstance(model, Stack) else [model]
    time_major = bool(options.get("time_major", False))
    opset = options.get("opset", DEFAULT_OPSET)
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < 14:
        raise FormatError(f"write(fmt='onnx'): opset={opset}; expected 14 or later (the LSTM, "
                          "GRU and RNN operators this writer targets).")
    # ONNX Runtime's CPU kernels for these operators run float32 only: the graph computes in
    # float32, and weights of other precisions are stored as they are and cast in the graph.
    compute = np.dtype(np.float32)
    elem = onnx.helper.np_dtype_to_tensor_dtype(compute)
    graph = _Graph(onnx, numpy_helper)

    graph.inputs.append(onnx.helper.make_tensor_value_info(
        "x", elem, ["time", "batch", model.input_size] if time_major
        else ["batch", "time", model.input_size]))
    x = "x" if time_major else graph.one("Transpose", ["x"], perm=[1, 0, 2])
    shape = graph.one("Shape", [x])
    steps = graph.one("Gather", [shape, graph.constant("time_axis", np.array([0]))], axis=0)
    batch = graph.one("Gather", [shape, graph.constant("batch_axis", np.array([1]))], axis=0)

    # sequence_lens defaults to "longer than any sequence", then is capped at T.
    graph.inputs.append(onnx.helper.make_tensor_value_info("sequence_lens", onnx.TensorProto.INT32,
                                                           ["batch"]))
    graph.initializers.append(numpy_helper.from_array(np.array([MAX_LENGTH], np.int32),
                                                      "sequence_lens"))
    lengths = graph.one("Min", [graph.one("Expand", ["sequence_lens", batch]),
                                graph.one("Cast", [steps], to=onnx.TensorProto.INT32)])

    suffix = (lambda index: "") if len(parts) == 1 else (lambda index: f"_{index}")
    layer_input = x
    for index, part in enumerate(parts):
        layer_input = _write_part(graph, part, layer_input, lengths, batch, suffix(index),
                                  compute, elem)
    y = layer_input if time_major else graph.one("Transpose", [layer_input], perm=[1, 0, 2])
    graph.nodes.append(onnx.helper.make_node("Identity", [y], ["y"], name="y"))
    graph.outputs.insert(0, onnx.helper.make_tensor_value_info(
        "y", elem, ["time", "batch", model.output_size] if time_major
        else ["batch", "time", model.output_size]))

    onnx_graph = onnx.helper.make_graph(graph.nodes, "rnnport", graph.inputs, graph.outputs,
                                        graph.initializers)
    proto = onnx.helper.make_model(onnx_graph, producer_name="rnnport",
                                   opset_imports=[onnx.helper.make_opsetid("", opset)])
    proto.ir_version = IR_VERSION
    onnx.checker.check_model(proto)
    if path is not None:
        data = proto.SerializeToString()
        atomic_write(path, lambda file: file.write(data))
    return proto


def _write_part(graph: _Graph, part: RNN, layer_input: str, lengths: str, batch: str,
                suffix: str, compute: np.dtype, elem: int) -> str:
    onnx = graph.onnx
    spec = part.spec
    directions = spec.num_directions
    family = gate_family(spec.cell)
    order, canonical = ORDERS[family], CANONICAL[family]
    stacked = spec.num_layers * directions
    state_names = ["initial_h"] + (["initial_c"] if spec.cell == "lstm" else [])
    states = {}
    for name, width in zip(state_names, (spec.output_size, spec.hidden_size), strict=False):
        full = f"{name}{suffix}"
        graph.inputs.append(onnx.helper.make_tensor_value_info(full, elem,
                                                               [stacked, "batch", width]))
        graph.initializers.append(graph.numpy_helper.from_array(
            np.zeros((stacked, 1, width), compute), full))
        target = graph.one("Concat", [graph.constant("states", np.array([stacked])), batch,
                                      graph.constant("width", np.array([width]))], axis=0)
        states[name] = graph.one("Expand", [full, target])
    finals: dict[str, list[str]] = {"h_n": [], "c_n": []}
    for layer, named_directions in enumerate(part.params):
        def weights(value: np.ndarray, base: str) -> str:
            name = graph.constant(base, value)
            if value.dtype != compute:
                name = graph.one("Cast", [name], to=elem)
            return name

        def stacked_param(build: Any, base: str, named_directions: Any = named_directions) -> str:
            return weights(np.stack([build(named) for named in named_directions]), base)

        def stacked_matrix(key: str, base: str, named_directions: Any = named_directions) -> str:
            """(D, G·H, ·): each direction's matrix reordered straight into its place."""
            first = named_directions[0][key]
            value = np.empty((len(named_directions), *first.shape), dtype=first.dtype)
            for direction, named in enumerate(named_directions):
                reorder(named[key], canonical, order, out=value[direction])
            return weights(value, base)

        inputs = [layer_input, stacked_matrix("weight_ih", "W"), stacked_matrix("weight_hh", "R")]
        inputs.append(stacked_param(lambda n: np.concatenate(
            [reorder(n["bias_ih"], canonical, order), reorder(n["bias_hh"], canonical, order)]),
            "B") if spec.bias else "")
        inputs.append(lengths)
        window = [graph.constant("start", np.array([layer * directions])),
                  graph.constant("stop", np.array([(layer + 1) * directions])),
                  graph.constant("axis", np.array([0]))]
        for name in state_names:
            inputs.append(graph.one("Slice", [states[name], *window]))
        if spec.peepholes:
            inputs.append(stacked_param(lambda n: reorder(
                n["weight_peephole"], "ifo", PEEPHOLE_ORDER).reshape(-1), "P"))
        attributes: dict[str, Any] = {
            "hidden_size": spec.hidden_size,
            "direction": "bidirectional" if directions == 2 else
                         "reverse" if spec.reverse else "forward",
        }
        if spec.cell == "gru":
            attributes["linear_before_reset"] = int(spec.reset_after)
        if spec.gate_clip is not None:
            attributes["clip"] = spec.gate_clip
        if spec.input_forget:
            attributes["input_forget"] = 1
        if spec.activations:
            functions = list(spec.activations) * directions
            attributes["activations"] = [name for name, _, _ in functions]
            for key, position in (("alpha", 1), ("beta", 2)):
                values = [f[position] for f in functions if key in PARAMETERS[f[0]]]
                if values:
                    attributes[f"activation_{key}"] = values
        if family == "rnn":
            attributes["activations"] = ["Relu" if spec.cell == "rnn_relu" else "Tanh"] * directions
        op = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}[family]
        outputs = graph.node(op, inputs, 3 if op == "LSTM" else 2, **attributes)
        finals["h_n"].append(outputs[1])
        if op == "LSTM":
            finals["c_n"].append(outputs[2])
        moved = graph.one("Transpose", [outputs[0]], perm=[0, 2, 1, 3])
        layer_input = graph.one("Reshape", [moved, graph.constant("shape", np.array([0, 0, -1]))])
    for name, pieces in finals.items():
        if not pieces:
            continue
        full = f"{name}{suffix}"
        graph.nodes.append(onnx.helper.make_node("Concat", pieces, [full], axis=0, name=full))
        width = spec.output_size if name == "h_n" else spec.hidden_size
        graph.outputs.append(onnx.helper.make_tensor_value_info(full, elem,
                                                                [stacked, "batch", width]))
    return layer_input


# -- read ------------------------------------------------------------------------------


def _load(source: Any) -> Any:
    onnx = require("onnx", extra="onnx", purpose="read(fmt='onnx')")
    if _is_proto(source, "ModelProto"):
        return source.graph
    if _is_proto(source, "GraphProto"):
        return source
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise FormatError(f"{path}: no such file; expected an .onnx model.")
        try:
            return onnx.load(str(path), load_external_data=False).graph
        except Exception as error:  # protobuf raises its own DecodeError types
            raise FormatError(f"{path}: not a readable ONNX model ({type(error).__name__}: "
                              f"{error}); the file may be truncated or not ONNX.") from None
    raise FormatError(f"read(fmt='onnx'): expected an onnx.ModelProto, a GraphProto or a path to "
                      f"an .onnx file, got {describe(source)}.")


class _Values:
    """Constant tensors of a graph: initializers and Constant nodes, through Cast/Identity."""

    def __init__(self, graph: Any) -> None:
        from onnx import numpy_helper

        self.numpy_helper = numpy_helper
        self.initializers = {t.name: t for t in graph.initializer}
        self.graph_inputs = {i.name for i in graph.input}
        self.producers = {out: node for node in graph.node for out in node.output}

    def get(self, name: str, where: str, seen: frozenset[str] = frozenset()) -> np.ndarray:
        if name in self.graph_inputs:
            raise UnsupportedFeatureError(
                f"{where}: {name!r} is a graph input fed at run time, not a constant; rnnport "
                "reads weights stored in the file. Fold it into an initializer first.")
        if name in seen:
            raise FormatError(f"{where}: {name!r} is computed from itself (a cycle of "
                              f"{', '.join(sorted(seen))}); the graph is malformed.")
        if name in self.initializers:
            return self._array(self.initializers[name], where)
        node = self.producers.get(name)
        if node is not None and node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    return self._array(attribute.t, where)
        if node is not None and node.op_type in ("Cast", "Identity") and node.input:
            value = self.get(node.input[0], where, seen | {name})
            if node.op_type == "Cast":
                from onnx import helper

                code = next((a.i for a in node.attribute if a.name == "to"), None)
                try:
                    to = np.dtype(helper.tensor_dtype_to_np_dtype(code))
                except (KeyError, TypeError, ValueError):
                    raise FormatError(f"{where}: the Cast producing {name!r} has to={code!r}, "
                                      "not an ONNX tensor type; the graph is malformed.") from None
                # A float→float cast only sets the graph's compute precision: keep the weights
                # as stored, so a round trip gives them back unchanged.
                if not (value.dtype.kind == "f" and to.kind == "f"):
                    value = value.astype(to)
            return value
        raise UnsupportedFeatureError(
            f"{where}: {name!r} is computed by {node.op_type if node else 'nothing'} at run "
            "time, not a constant; rnnport reads weights stored as initializers or Constant "
            "nodes.")

    def _array(self, tensor: Any, where: str) -> np.ndarray:
        if tensor.data_location == 1 or len(tensor.external_data):  # TensorProto.EXTERNAL
            raise UnsupportedFeatureError(
                f"{where}: tensor {tensor.name!r} keeps its data in another file (ONNX external "
                "data); rnnport reads only what the model file itself holds, never files it "
                "names. Save the model with its weights inside: onnx.save_model(model, path, "
                "save_as_external_data=False).")
        try:
            return self.numpy_helper.to_array(tensor)
        except MemoryError:
            raise
        except Exception as error:  # onnx raises what NumPy and protobuf raise
            raise FormatError(f"{where}: tensor {tensor.name!r} cannot be read ({error}); its "
                              "data does not match its type and shape.") from None


def _attributes(node: Any) -> dict[str, Any]:
    """A node's attributes, strings decoded; a malformed one is a FormatError."""
    from onnx import helper

    out = {}
    for attribute in node.attribute:
        try:
            value = helper.get_attribute_value(attribute)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, list) and any(isinstance(item, bytes) for item in value):
                value = [item.decode("utf-8") if isinstance(item, bytes) else item
                         for item in value]
        except MemoryError:
            raise
        except Exception as error:  # an unknown attribute type, text that is not UTF-8
            raise FormatError(f"{_label(node)}: attribute {attribute.name!r} cannot be read "
                              f"({type(error).__name__}: {error}); the model is damaged.") \
                from None
        expected = _ATTRIBUTE_TYPES.get(attribute.name)
        if expected is not None and not (
                isinstance(value, expected[0]) and (expected[1] is None or all(
                    isinstance(item, expected[1]) for item in value))):
            raise FormatError(f"{_label(node)}: attribute {attribute.name!r} is {value!r}; "
                              f"expected {expected[2]}. The model is damaged.")
        out[attribute.name] = value
    return out


# The recurrent nodes' attributes: (Python type, element type of a list, what ONNX defines).
_ATTRIBUTE_TYPES: dict[str, tuple[Any, Any, str]] = {
    "hidden_size": (int, None, "an integer"), "layout": (int, None, "an integer"),
    "input_forget": (int, None, "an integer"), "linear_before_reset": (int, None, "an integer"),
    "clip": ((int, float), None, "a float"), "direction": (str, None, "a string"),
    "activations": (list, str, "a list of strings"),
    "activation_alpha": (list, (int, float), "a list of floats"),
    "activation_beta": (list, (int, float), "a list of floats"),
}


def _label(node: Any) -> str:
    return f"ONNX {node.op_type} node {node.name or node.output[0]!r}"


def _chains(graph: Any) -> list[list[Any]]:
    nodes = [n for n in graph.node if n.op_type in OPS and n.domain in ("", "ai.onnx")]
    for node in nodes:
        if not node.output or not node.output[0]:
            raise FormatError(f"ONNX {node.op_type} node {node.name!r}: no output Y; the "
                              "graph is malformed.")
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def next_rnn(node: Any) -> Any:
        frontier, seen = [node.output[0]], set()
        while frontier:
            name = frontier.pop()
            for consumer in consumers.get(name, []):
                if id(consumer) in seen:
                    continue
                seen.add(id(consumer))
                if consumer.op_type in OPS and consumer.input and consumer.input[0] == name:
                    return consumer
                if consumer.op_type in GLUE_OPS:
                    frontier.extend(consumer.output[:1])
        return None

    successor = {id(n): next_rnn(n) for n in nodes}
    has_predecessor = {id(s) for s in successor.values() if s is not None}
    chains = []
    for node in nodes:
        if id(node) in has_predecessor:
            continue
        chain = [node]
        while successor[id(chain[-1])] is not None and len(chain) <= len(nodes):
            chain.append(successor[id(chain[-1])])
        chains.append(chain)
    return chains


def read(source: Any, **options: Any) -> Model:
    graph = _load(source)
    chains = _chains(graph)
    if not chains:
        ops = sorted({n.op_type for n in graph.node})
        raise FormatError(f"read(fmt='onnx'): the graph has no LSTM, GRU or RNN node (its "
                          f"operators: {', '.join(ops) or 'none'}).")
    wanted = options.get("node")
    if wanted is not None:
        chains = [c for c in chains if any(wanted in (n.name, n.output[0]) for n in c)]
        if not chains:
            names = ", ".join(repr(n.name or n.output[0]) for c in _chains(graph) for n in c)
            raise FormatError(f"read(fmt='onnx'): no RNN node named {wanted!r}; nodes: {names}.")
    if len(chains) > 1:
        listing = "; ".join(" → ".join(f"{n.op_type} {n.name or n.output[0]!r}" for n in c)
                            for c in chains)
        raise AmbiguousSourceError(f"read(fmt='onnx'): the graph holds {len(chains)} separate "
                                   f"recurrent networks ({listing}); pass node= with the name "
                                   "of one of their nodes.")
    values = _Values(graph)
    return stack([_read_node(node, values) for node in chains[0]])


def _read_node(node: Any, values: _Values) -> RNN:
    where = _label(node)
    family = OPS[node.op_type]
    attributes = _attributes(node)
    directions = {"forward": 1, "reverse": 1, "bidirectional": 2}
    direction = attributes.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction not in directions:
        raise FormatError(f"{where}: direction={direction!r}; expected forward, reverse or "
                          "bidirectional.")
    clip = attributes.get("clip")
    if clip is not None:
        if not isinstance(clip, (int, float)):
            raise FormatError(f"{where}: clip={clip!r}; expected a number.")
        # ONNX keeps float attributes as float32: take the shortest decimal that gives it back.
        clip = float(str(np.float32(clip)))
    input_forget = bool(attributes.get("input_forget", 0))
    if input_forget and family != "lstm":
        raise FormatError(f"{where}: input_forget=1 applies to LSTM nodes only.")
    activations = [a.decode() if isinstance(a, bytes) else a
                   for a in attributes.get("activations", [])]
    cell = family
    if family == "rnn":
        kinds = set(activations or ["Tanh"])
        if kinds == {"Tanh"}:
            cell = "rnn_tanh"
        elif kinds == {"Relu"}:
            cell = "rnn_relu"
        else:
            raise UnsupportedFeatureError(f"{where}: activations={activations}; rnnport computes "
                                          "Tanh or Relu for every direction of an RNN node.")
    functions: tuple[Any, ...] = ()
    if family != "rnn" and activations:
        functions = _activations(where, activations, attributes, directions[direction])
    if family != "rnn" and attributes.get("layout", 0) not in (0, 1):
        raise FormatError(f"{where}: layout={attributes['layout']!r}; expected 0 or 1.")
    inputs = list(node.input) + [""] * 8
    weight = values.get(inputs[1], f"{where}, W")
    recurrent = values.get(inputs[2], f"{where}, R")
    bias = values.get(inputs[3], f"{where}, B") if inputs[3] else None
    peephole = values.get(inputs[7], f"{where}, P") if family == "lstm" and inputs[7] else None
    declared = attributes.get("hidden_size")
    hidden = int(declared) if declared is not None else (
        recurrent.shape[-1] if recurrent.ndim == 3 else 0)
    count = directions[direction]
    gates = len(ORDERS[family]) * hidden
    problems = []
    if weight.ndim != 3 or weight.shape[:2] != (count, gates):
        problems.append(f"W {weight.shape}; expected ({count}, {gates}, input)")
    if recurrent.shape != (count, gates, hidden):
        problems.append(f"R {recurrent.shape}; expected ({count}, {gates}, {hidden})")
    if bias is not None and bias.shape != (count, 2 * gates):
        problems.append(f"B {bias.shape}; expected ({count}, {2 * gates})")
    if peephole is not None and peephole.shape != (count, 3 * hidden):
        problems.append(f"P {peephole.shape}; expected ({count}, {3 * hidden})")
    if problems:
        raise FormatError(f"{where}: " + "; ".join(problems) + f" (hidden_size {hidden}, "
                          f"{count} direction(s)).")
    spec = Spec(cell=cell, input_size=int(weight.shape[2]), hidden_size=hidden,
                bidirectional=count == 2, bias=bias is not None, peepholes=peephole is not None,
                gate_clip=clip, input_forget=input_forget, activations=functions,
                reverse=direction == "reverse",
                reset_after=bool(attributes.get("linear_before_reset", 0)) if family == "gru"
                else True)
    order, canonical = ORDERS[family], CANONICAL[family]
    params = []
    for d in range(count):
        named = {"weight_ih": reorder(weight[d], order, canonical),
                 "weight_hh": reorder(recurrent[d], order, canonical)}
        if bias is not None:
            named["bias_ih"] = reorder(bias[d, :gates], order, canonical)
            named["bias_hh"] = reorder(bias[d, gates:], order, canonical)
        if peephole is not None:
            named["weight_peephole"] = reorder(peephole[d].reshape(3, hidden), PEEPHOLE_ORDER,
                                               "ifo")
        params.append(named)
    return RNN(spec, [params], copy=False)


def _activations(where: str, names: list[str], attributes: Mapping[str, Any],
                 directions: int) -> tuple[Any, ...]:
    """``(name, alpha, beta)`` per function, consuming activation_alpha/beta in order."""
    unknown = [name for name in names if name not in PARAMETERS]
    if unknown:
        raise UnsupportedFeatureError(
            f"{where}: activations={names}; {', '.join(map(repr, unknown))} is not one of the "
            f"functions rnnport computes ({', '.join(PARAMETERS)}).")
    alphas = list(attributes.get("activation_alpha", []))
    betas = list(attributes.get("activation_beta", []))
    functions = []
    for name in names:
        takes = PARAMETERS[name]
        alpha = (alphas.pop(0) if alphas else takes["alpha"]) if "alpha" in takes else 0.0
        beta = (betas.pop(0) if betas else takes["beta"]) if "beta" in takes else 0.0
        # float32 attributes: the shortest decimal that gives the stored value back.
        functions.append((name, float(str(np.float32(alpha))), float(str(np.float32(beta)))))
    count = len(functions) // directions
    if len(functions) != count * directions or (
            directions == 2 and functions[:count] != functions[count:]):
        raise UnsupportedFeatureError(
            f"{where}: activations={names} differ between the directions (or do not split "
            "evenly); rnnport runs both directions with the same functions.")
    return tuple(functions[:count])


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """W, R and B (and P) of the graph's first recurrent node, as the graph stores them."""
    graph = _load(native)
    values = _Values(graph)
    node = next(node for node in graph.node if node.op_type in OPS)
    out = []
    for input_name, name in zip(("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c",
                                 "P"), node.input, strict=False):
        if input_name in ("W", "R", "B", "P") and name:
            array = values.get(name, _label(node))
            notes = ("axis 0 is ONNX's direction axis D (1 here: forward only)",) \
                if array.shape and array.shape[0] == 1 else ()
            out.append(NamedArray(input_name, array, None, notes))
    return out


FORMAT = Format(
    "onnx", sniff=sniff, reader=read, writer=write, read_options=READ_OPTIONS,
    write_options=WRITE_OPTIONS,
    features=frozenset({"peepholes", "reset_before", "gate_clip", "input_forget", "activations",
                        "reverse"}),
    extra="onnx", modules=("onnx",), suffixes=(Suffix(".onnx", "an ONNX model"),),
    gate_names={"g": "c", "n": "h"},
    explain_arrays=explain_arrays,
    names={"peepholes": "P", "gate_clip": "clip", "input_forget": "input_forget=1",
           "reverse": "direction=reverse",
           "activations": "activations", "reset_before": "linear_before_reset=0",
           "reset_after": "linear_before_reset=1"},
    layout_notes=("ONNX arrays start with a direction axis D: W [D, G·H, I], R [D, G·H, H], "
                  "B [D, 2·G·H] (here D = 1).",))


def run_reference(proto: Any, x: np.ndarray, **feeds: Any) -> Mapping[str, np.ndarray]:
    """Run a written model in ONNX Runtime (CPU); used by tests and ``convert --verify``."""
    onnxruntime = require("onnxruntime", extra="onnx", purpose="running ONNX models")
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3  # the optional inputs' defaults are meant to be overridable
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {"x": np.asarray(x, np.float32),
              **{k: v for k, v in feeds.items() if v is not None}}
    return dict(zip(names, session.run(None, inputs), strict=True))
