"""Reading ONNX models: the recurrent nodes, their attributes and weights (see
:mod:`rnnport.formats.onnx` for the layout, :mod:`.graph` for how constants are found)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...activations import PARAMETERS
from ...errors import AmbiguousSourceError, FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...gates import CANONICAL, reorder
from ...model import RNN, Model, stack
from ...spec import Spec
from .._common import listed
from . import quantized, unrolled
from .graph import FOLDABLE, Loaded, Scope, load, scopes
from .graph import attributes as node_attributes
from .layout import ORDERS, PEEPHOLE_ORDER
from .layout import family as recurrent_family

__all__ = ["chains", "notes", "read"]

# ONNX Runtime's quantized matrix products (quantize_dynamic, quantize_static): not read.
QUANTIZED_PRODUCTS = {"MatMulInteger", "QLinearMatMul", "DynamicQuantizeMatMul",
                      "MatMulIntegerToFloat", "QGemm"}
# Nodes that carry a layer's output on to the next layer (as exporters join a stack).
GLUE_OPS = {"Transpose", "Reshape", "Squeeze", "Unsqueeze", "Identity", "Cast", "Dropout",
            "Concat", "Flatten"}
# Nodes that only move, reshape or describe data: counted, not listed, in notes.
SHAPING_OPS = {*GLUE_OPS, *FOLDABLE, "Constant", "ConstantOfShape"} - {"Add", "Sub", "Mul",
                                                                      "Div"}


def chains(scope: Scope, apart: list[str] | None = None) -> list[list[Any]]:
    """The recurrent nodes of one scope, in chains of layers: a node is the next layer of the
    node whose ``Y`` it takes through reshaping glue, unless its initial state is computed
    from a recurrent node's outputs (a decoder started from an encoder's final state is a
    network of its own). Why two nodes joined so are read apart is added to ``apart``."""
    nodes = [n for n in scope.nodes if recurrent_family(n)]
    consumers = scope.consumers
    dead_ends: set[str] = set()  # names from which no recurrent node is reached: walked once

    def next_rnn(node: Any) -> Any:
        if not node.output or not node.output[0]:  # Y omitted: the chain ends here
            return None
        frontier, seen = [node.output[0]], set()
        while frontier:
            name = frontier.pop()
            if name in seen or name in dead_ends:
                continue
            seen.add(name)
            for consumer in consumers.get(name, []):
                if recurrent_family(consumer) and consumer.input and consumer.input[0] == name:
                    return consumer
                if consumer.op_type in GLUE_OPS:
                    frontier.extend(consumer.output[:1])
        dead_ends.update(seen)
        return None

    successor = {id(n): next_rnn(n) for n in nodes}
    for node in nodes:
        after = successor[id(node)]
        source = None if after is None else _state_source(scope, after)
        if after is not None and source is not None:
            successor[id(node)] = None
            if apart is not None:
                owner = "that node" if source[0] is node else scope.label(source[0])
                apart.append(f"{scope.label(after)} takes the output of {scope.label(node)} "
                             f"but starts from a state computed from {source[1]!r}, an output "
                             f"of {owner} (as a decoder starts from an encoder's final state): "
                             "not the next layer of a stack, so each is read as a network of "
                             "its own")
    links = [(node, successor[id(node)]) for node in nodes if successor[id(node)] is not None]
    for node, reason in _glue(scope, links).items():
        successor[node] = None
        if apart is not None:
            apart.append(reason)
    has_predecessor = {id(s) for s in successor.values() if s is not None}
    found = []
    for node in nodes:
        if id(node) in has_predecessor:
            continue
        chain = [node]
        while successor[id(chain[-1])] is not None and len(chain) <= len(nodes):
            chain.append(successor[id(chain[-1])])
        found.append(chain)
    return found


def _state_source(scope: Scope, node: Any) -> tuple[Any, str] | None:
    """The recurrent node (and its output) that ``node``'s ``initial_h`` or ``initial_c`` is
    computed from, if any; a ``Shape`` taken on the way reads sizes, not values. Each node
    followed counts against the ``work`` limit."""
    inputs = list(node.input) + [""] * 8
    pending = [name for name in inputs[5:7] if name]
    seen: set[str] = set()
    while pending and len(seen) < 100_000:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        producer = scope.producers.get(name)
        if producer is None:
            continue
        scope.loaded.work.charge(1 + len(producer.input), "following a state back")
        if recurrent_family(producer):
            return producer, name
        if producer.op_type != "Shape":
            pending.extend(item for item in producer.input if item)
    return None


def _glue(scope: Scope, links: list[tuple[Any, Any]]) -> dict[int, str]:
    """Why the glue of each link ``(a, b)`` (``b`` takes ``a``'s ``Y`` through reshaping
    nodes) does not hand ``Y`` on as the next layer of a stack takes it, by ``id(a)``;
    links whose glue does are left out. A stack's next layer takes ``Y`` [T, D, B, H]
    ([B, T, D, H] with ``layout=1``) as X [T, B, D·H] ([B, T, D·H]), the directions'
    features side by side, forward first. Checked by running the graph in NumPy
    (:func:`.unrolled.run`) with each ``Y`` fed as distinct numbers: a glue that swaps the
    batch and time axes, interleaves the directions or adds features gives other numbers
    there, and one the run cannot compute is not taken on trust."""
    if not links:
        return {}
    where = scope.loaded.where + (f", {scope.path}" if scope.path else "")
    reasons: dict[int, str] = {}
    fed: dict[int, np.ndarray] = {}  # id(a) → the Y fed, as [T, B, D, H]
    following = {id(a): b for a, b in links}
    later = {id(b) for _, b in links}
    try:
        # The main graph's inputs (a subgraph may take them too, as outer-scope names) give
        # each chain's first input its sizes; every layer of a stack has them, so each Y is
        # fed for them, and the run computes what each next layer takes.
        feeds = unrolled.input_feeds(scope, where, distinct=True)
        firsts = [a for a, _ in links if id(a) not in later]
        values = unrolled.run(scope, feeds, where, [a.input[0] for a in firsts])
        declared = unrolled.declared_shapes(scope) if not scope.path else {}
        start = 1  # each Y's numbers follow the one before's: all distinct
        for first in firsts:
            x = values.get(first.input[0])
            # not computed (a front end the run skips): as declared, else 5 steps of 3
            shape = x.shape if isinstance(x, np.ndarray) else declared.get(first.input[0])
            if shape is None or len(shape) != 3:
                shape = (3, 5, 0) if _layout(first) == 1 else (5, 3, 0)
            time, batch = (shape[1], shape[0]) if _layout(first) == 1 else shape[:2]
            node: Any = first
            while node is not None and id(node) not in fed:
                start += _feed_y(scope, node, time, batch, start, feeds, fed, where)
                node = following.get(id(node))
        values = unrolled.run(scope, feeds, where, [b.input[0] for _, b in links])
    except LimitError:  # a read past its limits is refused, not read otherwise
        raise
    except RnnportError as error:
        return {id(a): _apart(scope, a, b, f"the nodes between them could not be run to check "
                              f"that they pass its Y on unchanged ({error})") for a, b in links}
    for a, b in links:
        expected = fed.get(id(a))
        got = values.get(b.input[0])
        if expected is None or not isinstance(got, np.ndarray):
            reasons[id(a)] = _apart(scope, a, b, "the nodes between them could not be run to "
                                    "check that they pass its Y on unchanged")
            continue
        time, batch, directions, hidden = expected.shape
        expected = expected.reshape(time, batch, directions * hidden)
        if _layout(b) == 1:
            expected = expected.transpose(1, 0, 2)
        if got.shape != expected.shape or not np.array_equal(got, expected):
            reasons[id(a)] = _apart(scope, a, b, "the nodes between them rearrange its Y (a "
                                    "stack's next layer takes Y [T, D, B, H] as X [T, B, D·H], "
                                    "time, batch and the directions' features in place; these "
                                    "move them)")
    return reasons


def _apart(scope: Scope, before: Any, after: Any, why: str) -> str:
    return (f"{scope.label(after)} takes the output of {scope.label(before)}, but {why}: "
            "not the next layer of a stack, so each is read as a network of its own")


def _layout(node: Any) -> int:
    layout = next((attribute.i for attribute in node.attribute if attribute.name == "layout"), 0)
    return 1 if layout == 1 else 0


def _feed_y(scope: Scope, node: Any, time: int, batch: int, start: int,
            feeds: dict[str, np.ndarray], fed: dict[int, np.ndarray], where: str) -> int:
    """Feed ``node``'s ``Y`` as the numbers from ``start`` on (float64, exact through any
    glue) for ``time`` steps of ``batch`` (fewer where that would be too many: a stack's
    glue has no fixed sizes), keep it as [T, B, D, H] in ``fed``; how many numbers."""
    attributes = node_attributes(node, scope.label(node))
    directions = 2 if attributes.get("direction") == "bidirectional" else 1
    hidden = attributes.get("hidden_size")
    if not isinstance(hidden, int) or hidden <= 0:
        return 0  # said when the node is read
    if time * batch * directions * hidden > unrolled.MAX_FED or time <= 0 or batch <= 0:
        time, batch = 5, 3
    size = time * batch * directions * hidden
    if size > unrolled.MAX_FED:
        raise FormatError(f"{where}: {scope.label(node)}'s output would take {size:,} "
                          f"values, more than {unrolled.MAX_FED:,}")
    tagged = np.arange(start, start + size, dtype=np.float64).reshape(
        time, batch, directions, hidden)
    fed[id(node)] = tagged
    feeds[node.output[0]] = tagged.transpose(1, 0, 2, 3) if _layout(node) == 1 else \
        tagged.transpose(0, 2, 1, 3)
    return size


def _names(node: Any) -> set[str]:
    return {node.name, *(output for output in node.output if output)} - {""}


def read(source: Any, **options: Any) -> Model:
    dequantize = options.get("dequantize", False)
    if not isinstance(dequantize, bool):
        raise FormatError(f"read(fmt='onnx'): dequantize={dequantize!r}; expected True or "
                          "False.")
    loaded = load(source)
    every, _, picked, _ = _choose(loaded, options)
    if picked is None:
        return _unrolled(loaded, every[0], options).model
    scope, chain = picked
    shapes = _Shapes(scope, chain)
    return stack([_read_node(node, scope, dequantize, shapes) for node in chain])


Found = tuple[Scope, list[Any]]


def _unrolled(loaded: Loaded, main: Scope, options: Mapping[str, Any]) -> unrolled.Stepped:
    """The network a graph without recurrent nodes computes step by step, or the error
    saying there is none."""
    # An op_type that is not UTF-8 comes back from protobuf as bytes: named all the same.
    ops = sorted({n.op_type if isinstance(n.op_type, str) else repr(n.op_type)
                  for n in loaded.graph.node})
    quantized = sorted(QUANTIZED_PRODUCTS & set(ops))
    try:
        found = unrolled.find(main, options)
    except UnsupportedFeatureError:
        if not quantized:
            raise
        found = None
    if found is not None:
        return found
    if quantized:
        raise UnsupportedFeatureError(
            f"read(fmt='onnx'): the graph has no LSTM, GRU or RNN node, and multiplies with ONNX "
            f"Runtime's quantized matrix products ({', '.join(quantized)}), as onnxruntime."
            "quantization.quantize_dynamic writes a network PyTorch's exporter unrolled into "
            "steps. rnnport does not read quantized matrix products (of ONNX Runtime's "
            "quantized operators it reads the LSTM node, com.microsoft.DynamicQuantizeLSTM, "
            "with dequantize=True): read the float model the quantizer was given.")
    sequence_in = any(len(value.type.tensor_type.shape.dim) == 3 for value in main.loaded.graph.input)
    unrolled_looking = sequence_in and {"MatMul", "Gemm"} & set(ops) and {"Tanh", "Relu"} & set(ops)
    hint = (" An nn.RNN, or a cell stepped in a loop, exported with a single time step never "
            "multiplies its state, so its weight_hh is not in the file: export it with two or "
            "more steps (for nn.RNN, PyTorch's TorchScript exporter, torch.onnx.export(..., "
            "dynamo=False), writes an RNN node instead)." if unrolled_looking else "")
    raise FormatError(f"read(fmt='onnx'): the graph has no LSTM, GRU or RNN node (its "
                      f"operators: {', '.join(ops) or 'none'}), nor computes a recurrent "
                      "network step by step as PyTorch's exporter writes nn.RNN and the "
                      f"LSTM/GRU/RNN cells.{hint}")


def _choose(loaded: Loaded, options: Mapping[str, Any]
            ) -> tuple[list[Scope], list[Found], Found | None, list[str]]:
    """The model's scopes, every chain of recurrent nodes in them, the chain ``node=``
    picks (or the only one; None when there is none), and why nodes that take another's
    output are not its next layer."""
    given = options.get("inputs") or {}
    if not isinstance(given, Mapping):
        raise FormatError(f"read(fmt='onnx'): inputs={given!r}; expected a mapping of graph "
                          "input names to arrays, e.g. inputs={'W': W}.")
    every = scopes(loaded, given)
    apart: list[str] = []
    found = [(scope, chain) for scope in every for chain in chains(scope, apart)]
    if not found:
        return every, found, None, apart
    picked = found
    wanted = options.get("node")
    if wanted is not None and not isinstance(wanted, str):
        raise FormatError(f"read(fmt='onnx'): node={wanted!r}; expected the name of a node or "
                          "of its output.")
    if wanted is not None:
        picked = [(scope, chain) for scope, chain in found
                  if any(wanted in _names(node) for node in chain)]
        if not picked:
            names = listed(repr(scope.label(node)) for scope, chain in found for node in chain)
            raise FormatError(f"read(fmt='onnx'): no recurrent node named {wanted!r}; the "
                              f"recurrent nodes: {names}.")
    if len(picked) > 1:
        listing = listed(" → ".join(scope.label(node) for node in chain)
                         for scope, chain in picked)
        why = f" ({'; '.join(apart)}.)" if apart else ""
        raise AmbiguousSourceError(f"read(fmt='onnx'): the model holds {len(picked)} separate "
                                   f"recurrent networks ({listing}); pass node= with the name "
                                   f"of one of their nodes.{why}")
    return every, found, picked[0], apart


def networks(source: Any) -> list[tuple[str, str]]:
    """The separate chains of recurrent nodes: (a name ``node=`` takes, what the chain is)."""
    loaded = load(source)
    every = scopes(loaded, {})
    found = [(chain[0].name or next(output for output in chain[0].output if output),
              " → ".join(scope.label(node) for node in chain))
             for scope in every for chain in chains(scope)]
    return found or unrolled.listing(every[0])


def notes(source: Any, **options: Any) -> list[str]:
    """What the model holds beside the recurrent nodes read: other recurrent networks, the
    initial states and lengths those nodes are fed, the graph's other computing nodes and
    initializers (see ``Format.notes``). Shapes only; no other tensor is read."""
    loaded = load(source)
    every, found, picked, apart = _choose(loaded, options)
    if picked is None:
        stepped = _unrolled(loaded, every[0], options)
        start = f" from the state {stepped.start}" if stepped.start else ""
        out = [f"no recurrent node: the graph computes {stepped.what} step by step (as "
               "PyTorch's default exporter writes nn.RNN and the cells); rnnport read its "
               "matrices and checked, by running the graph in NumPy, that it computes the "
               f"network read{start}. Nodes around it are not listed."]
        if stepped.start:
            out.append(f"the loop starts from {stepped.start}, a state that is not zeros (an "
                       "initial state the model makes or learns). Not read: rnnport runs from "
                       "the state you pass it (zeros by default); pass that state as forward's "
                       "state= to get the graph's numbers.")
        if stepped.tied:
            out.append(f"both directions of the bidirectional network are one cell, stepped in "
                       f"two loops: node={stepped.cells[0][0]!r} reads it alone (as a cell, "
                       "stepping forward).")
        elif len(stepped.cells) == 1:
            (forward, backward), = stepped.cells
            out.append(f"the bidirectional network is two cells: node={forward!r} reads the "
                       f"forward one alone, node={backward!r} the backward one (as a cell, "
                       "stepping forward).")
        elif stepped.cells:
            layers = "; ".join(f"layer {index}: node={forward!r} and node={backward!r}"
                               for index, (forward, backward) in enumerate(stepped.cells))
            out.append(f"each layer of the bidirectional network is two cells, each read "
                       f"alone (as a cell, stepping forward) by node= with one of its nodes: "
                       f"{layers}.")
        out += [f"{reason}." for reason in stepped.unpaired]
        return out
    scope, chain = picked
    out = [f"another recurrent network, {' → '.join(other.label(node) for node in nodes)}; "
           f"not read (node={nodes[0].name or nodes[0].output[0]!r} reads it)."
           for other, nodes in found if nodes is not chain]
    out += [f"{reason}." for reason in apart]
    out += [quantized.note(scope.label(node), node, options.get("dequantize") is True)
            for node in chain if node.domain not in ("", "ai.onnx")]
    used_nodes = {id(node) for _, nodes in found for node in nodes}
    used_tensors: set[int] = set()
    followed: set[tuple[int, str]] = set()
    for owner, nodes in found:  # their weights, lengths and states: told of here
        for node in nodes:
            for name in node.input[1:]:
                owner.lineage(name, used_nodes, used_tensors, followed)
    for node in chain:
        inputs = list(node.input) + [""] * 8
        fed = [_fed(scope, inputs[index], what) for index, what in
               ((4, "sequence_lens"), (5, "initial_h"), (6, "initial_c")) if inputs[index]]
        if fed:
            out.append(f"{scope.label(node)} is fed {'; '.join(fed)}. Not read: rnnport runs "
                       "from the state and lengths you pass it (zeros and full length by "
                       "default).")
    shaping: dict[str, int] = {}
    computing: list[str] = []
    tensors: list[str] = []
    for each in every:
        for node in each.nodes:
            if id(node) in used_nodes:
                continue
            if node.op_type in SHAPING_OPS:
                shaping[node.op_type] = shaping.get(node.op_type, 0) + 1
            else:
                computing.append(each.label(node))
        tensors += [f"{tensor.name!r} {tuple(tensor.dims)}" for tensor in
                    each.initializers.values() if id(tensor) not in used_tensors]
    if computing:
        out.append(f"other computing nodes: {listed(computing)}; not part of the recurrent "
                   "network, not read.")
    if shaping:
        counts = ", ".join(f"{op} ×{count}" if count > 1 else op
                           for op, count in sorted(shaping.items()))
        out.append(f"shaping nodes around it ({counts}): they move data, compute nothing, and "
                   "are not read.")
    if tensors:
        out.append(f"other initializers: {listed(tensors)}; not read.")
    return out


def _fed(scope: Scope, name: str, what: str) -> str:
    """What a recurrent node's state or lengths input holds, as far as constants tell."""
    value = scope.constant(name)
    if value is None:
        return f"{what} from {name!r}, computed at run time"
    if what == "sequence_lens":
        return f"{what} from {name!r}, a constant {value.shape}"
    if value.size and not np.any(value):
        return f"{what} from {name!r}, a constant of zeros"
    return f"{what} from {name!r}, a constant {value.shape}{' that is not all zeros' if value.size else ''}"


def _attributes(node: Any, where: str) -> dict[str, Any]:
    """A recurrent node's attributes (:func:`.graph.attributes`), each of the type ONNX
    defines for it."""
    out = node_attributes(node, where)
    for name, value in out.items():
        expected = _ATTRIBUTE_TYPES.get(name)
        if expected is not None and not (
                isinstance(value, expected[0]) and (expected[1] is None or all(
                    isinstance(item, expected[1]) for item in value))):
            raise FormatError(f"{where}: attribute {name!r} is {value!r}; "
                              f"expected {expected[2]}. The model is damaged.")
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


# Activation functions per direction: LSTM f, g, h; GRU f, g; RNN f (ONNX's operators).
FUNCTIONS = {"lstm": 3, "gru": 2, "rnn": 1}
LISTED = ("activations", "activation_alpha", "activation_beta")
LISTS = (6, 7, 8)  # AttributeProto.FLOATS, INTS, STRINGS


def _check_listed(node: Any, family: str, where: str) -> None:
    """Refuse ``activations`` of another length than the cell takes (and more
    ``activation_alpha`` / ``activation_beta`` values than functions), counted on the stored
    attribute, before anything decodes its entries."""
    direction = next((attribute.s for attribute in node.attribute
                      if attribute.name == "direction"), b"forward")
    if direction not in (b"forward", b"reverse", b"bidirectional"):
        return  # said by the direction's own check
    count = 2 if direction == b"bidirectional" else 1
    expected = FUNCTIONS[family] * count
    because = (f"{node.op_type} takes {FUNCTIONS[family]} per direction, {count} "
               f"direction{'s' if count > 1 else ''}")
    for attribute in node.attribute:
        if attribute.name not in LISTED or attribute.type not in LISTS:
            continue  # not a list: said by the type check
        entries = len(attribute.strings) + len(attribute.floats) + len(attribute.ints)
        if attribute.name == "activations" and entries != expected:
            raise FormatError(f"{where}: attribute 'activations' lists {entries:,} functions; "
                              f"expected {expected} ({because}). The model is damaged; "
                              "re-export it, or drop the attribute for ONNX's default "
                              "functions.")
        if attribute.name != "activations" and entries > expected:
            raise FormatError(f"{where}: attribute {attribute.name!r} holds {entries:,} "
                              f"values; expected at most {expected}, one for each activation "
                              f"function ({because}). The model is damaged; re-export it.")


def _family(node: Any) -> str:
    found = recurrent_family(node)
    if found is None:  # never: chains hold recurrent nodes only
        raise FormatError(f"ONNX {node.op_type} node: not a recurrent operator.")
    return found


def _read_node(node: Any, scope: Scope, dequantize: bool, shapes: _Shapes) -> RNN:
    where = scope.label(node)
    family = _family(node)
    _check_listed(node, family, where)
    attributes = _attributes(node, where)
    directions = {"forward": 1, "reverse": 1, "bidirectional": 2}
    direction = attributes.get("direction", "forward")
    if direction not in directions:
        raise FormatError(f"{where}: direction={direction!r}; expected forward, reverse or "
                          "bidirectional.")
    clip = attributes.get("clip")
    if clip is not None:
        # ONNX keeps float attributes as float32: take the shortest decimal that gives it back.
        clip = float(str(np.float32(clip)))
    input_forget = bool(attributes.get("input_forget", 0))
    if input_forget and family != "lstm":
        raise FormatError(f"{where}: input_forget=1 applies to LSTM nodes only.")
    activations = list(attributes.get("activations", []))
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
    count = directions[direction]
    declared = attributes.get("hidden_size")
    if declared is not None:  # before the weights: a projected LSTM's are not even whole
        _check_states(node, family, int(declared), count, shapes, where)
    if node.domain in ("", "ai.onnx"):
        weight = scope.value(inputs[1], f"{where}, W")
        recurrent = scope.value(inputs[2], f"{where}, R")
    else:
        weight, recurrent = quantized.weights(scope, node, where, dequantize)
    bias = scope.value(inputs[3], f"{where}, B") if inputs[3] else None
    peephole = scope.value(inputs[7], f"{where}, P") if family == "lstm" and inputs[7] else None
    hidden = int(declared) if declared is not None else (
        recurrent.shape[-1] if recurrent.ndim == 3 else 0)
    if declared is None:
        _check_states(node, family, hidden, count, shapes, where)
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
    # The layer's own copies, in canonical order: paid for before they are made (many nodes
    # may share one stored W, which is decoded once but copied for each).
    scope.charge(sum(array.nbytes for array in (weight, recurrent, bias, peephole)
                     if array is not None), where, "the layers' weights copied in canonical order")
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


class _Shapes:
    """The shapes of a scope's values where they are known: a constant's, a declared or
    inferred one with its sizes (others None), else as running the graph in NumPy from its
    inputs computes it (run once, when first needed)."""

    def __init__(self, scope: Scope, nodes: list[Any]) -> None:
        self.scope = scope
        # the recurrent nodes' states: the values a run computes, should it be needed
        self.states = [name for node in nodes for name in node.input[5:7] if name]
        self._declared: dict[str, tuple[int, ...]] | None = None
        self._computed: dict[str, Any] | None = None

    def __call__(self, name: str) -> tuple[int | None, ...] | None:
        scope = self.scope
        if not name:
            return None
        value = scope.constant(name)
        if value is not None:
            return value.shape
        if scope.path:  # a subgraph's or a function's values: neither declared nor run
            return None
        if self._declared is None:
            self._declared = unrolled.declared_shapes(scope, unknown=-1)
        declared = self._declared.get(name)
        if declared is not None and -1 not in declared:
            return declared
        if self._computed is None:
            try:
                self._computed = unrolled.run(scope, unrolled.input_feeds(
                    scope, scope.loaded.where, distinct=True), scope.loaded.where,
                    self.states)
            except LimitError:
                raise
            except RnnportError:
                self._computed = {}
        computed = self._computed.get(name)
        if isinstance(computed, np.ndarray):
            return computed.shape
        return None if declared is None else tuple(None if dim == -1 else dim
                                                   for dim in declared)


def _check_states(node: Any, family: str, hidden: int, count: int, shapes: _Shapes,
                  where: str) -> None:
    """Refuse a node whose ``initial_h`` or ``initial_c`` has a shape other than
    ``[D, batch, hidden_size]``: ONNX Runtime refuses to run it, and its weights are not
    the network's. A ``c`` wider than ``h`` is PyTorch's projected LSTM, named."""
    inputs = list(node.input) + [""] * 8
    found = {what: shapes(inputs[index]) for index, what in
             ((5, "initial_h"), (6, "initial_c")) if inputs[index]
             and (index == 5 or family == "lstm")}
    wrong = {what: shape for what, shape in found.items() if shape is not None and (
        len(shape) != 3 or shape[0] not in (count, None) or shape[2] not in (hidden, None))}
    if not wrong:
        return
    shown = "; ".join(f"{what} [{', '.join(_dim(shape, axis) for axis in range(len(shape)))}]"
                      for what, shape in wrong.items())
    c, h = found.get("initial_c"), found.get("initial_h")
    if family == "lstm" and c is not None and len(c) == 3 and c[2] is not None and \
            c[2] > hidden and (h is None or len(h) != 3 or h[2] in (hidden, None)):
        raise UnsupportedFeatureError(
            f"{where}: {shown}; expected [{count}, batch, {hidden}] (hidden_size={hidden}). "
            f"This is what PyTorch's default (dynamo) exporter writes for nn.LSTM(hidden_size="
            f"{c[2]}, proj_size={hidden}): ONNX's LSTM cannot hold an LSTM projection, so the "
            f"node claims hidden_size={hidden}, its weights cut to match, beside a cell state "
            f"of {c[2]}; it computes nothing the model did, and ONNX Runtime refuses to run it. "
            "Read the PyTorch weights (the state_dict) instead: rnnport reads the projection "
            "from them.")
    raise FormatError(f"{where}: {shown}; expected [{count}, batch, {hidden}] ({count} "
                      f"direction(s), hidden_size={hidden}). The node's state does not fit its "
                      "size (ONNX Runtime refuses to run it); the model is damaged, re-export "
                      "it.")


def _dim(shape: tuple[int | None, ...], axis: int) -> str:
    """A state's size on ``axis`` as told: its batch (axis 1 of three) is whatever it is fed."""
    size = shape[axis]
    return "batch" if axis == 1 and len(shape) == 3 else "?" if size is None else str(size)


def _activations(where: str, names: list[str], attributes: Mapping[str, Any],
                 directions: int) -> tuple[Any, ...]:
    """``(name, alpha, beta)`` per function, consuming activation_alpha/beta in order."""
    unknown = [name for name in names if name not in PARAMETERS]
    if unknown:
        raise UnsupportedFeatureError(
            f"{where}: activations={names}; {', '.join(map(repr, unknown))} is not one of the "
            f"functions rnnport computes ({', '.join(PARAMETERS)}).")
    alphas = iter(attributes.get("activation_alpha", []))
    betas = iter(attributes.get("activation_beta", []))
    functions = []
    for name in names:
        takes = PARAMETERS[name]
        alpha = next(alphas, takes["alpha"]) if "alpha" in takes else 0.0
        beta = next(betas, takes["beta"]) if "beta" in takes else 0.0
        # float32 attributes: the shortest decimal that gives the stored value back.
        functions.append((name, float(str(np.float32(alpha))), float(str(np.float32(beta)))))
    count = len(functions) // directions
    if len(functions) != count * directions or (
            directions == 2 and functions[:count] != functions[count:]):
        raise UnsupportedFeatureError(
            f"{where}: activations={names} differ between the directions (or do not split "
            "evenly); rnnport runs both directions with the same functions.")
    return tuple(functions[:count])
