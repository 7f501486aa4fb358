"""Writing a TF2 object-based checkpoint of the Keras 2 Sequential that holds a network.

The checkpoint is what tf_keras's ``model.save_weights("dir/ckpt")`` writes for
``Sequential([Input((None, I)), layer_0, …])`` (one Keras layer per rnnport layer, named as
the keras format names them): every variable under
``layer_with_weights-k/cell/{kernel,recurrent_kernel,bias}/.ATTRIBUTES/VARIABLE_VALUE``
(``…/forward_layer/cell/…`` and ``…/backward_layer/cell/…`` in a Bidirectional), and the
``_CHECKPOINTABLE_OBJECT_GRAPH`` string tensor, a ``TrackableObjectGraph`` whose nodes are
numbered breadth first from the root as TensorFlow numbers them::

    0 root          layer_with_weights-k → layer k, layer-k → layer k (each k), root → 0
    layer           cell → cell, state_spec → (empty)
    Bidirectional   forward_layer → layer, backward_layer → layer
    cell            [state_size → (empty), LSTM only] kernel, recurrent_kernel[, bias]
    variable        attribute VARIABLE_VALUE: full_name (lstm/lstm_cell/kernel), checkpoint_key

TensorFlow restores by walking this graph from the model's root, matching children by
name, so ``model.load_weights`` fills exactly these variables.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...io import checkpoint_state, tensorbundle, tfproto
from ...io._proto import key, varint
from ...model import Model
from ...spec import Spec
from ..keras import layers as keras_layers
from .objects import VALUE

__all__ = ["encode_object_graph", "keras_classes", "write"]

KERAS_CLASSES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "SimpleRNN", "rnn_relu": "SimpleRNN"}
_SNAKE = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "simple_rnn"}


@dataclass
class _Node:
    children: list[tuple[str, _Node]] = field(default_factory=list)
    variable: tuple[str, str] | None = None  # (full_name, checkpoint_key)


def _message(number: int, body: bytes) -> bytes:
    return key(number, 2) + varint(len(body)) + body


def _text(number: int, value: str) -> bytes:
    return _message(number, value.encode("utf-8"))


def encode_object_graph(nodes: list[_Node]) -> bytes:
    """``nodes`` (``nodes[0]`` the root, children already numbered by position) as a
    serialized ``TrackableObjectGraph`` (field numbers: :data:`rnnport.io.tfproto.FIELDS`)."""
    position = {id(node): index for index, node in enumerate(nodes)}
    out = bytearray()
    for node in nodes:
        body = bytearray()
        for name, child in node.children:
            body += _message(1, key(1, 0) + varint(position[id(child)]) + _text(2, name))
        if node.variable is not None:
            full_name, checkpoint_key = node.variable
            body += _message(2, _text(1, "VARIABLE_VALUE") + _text(2, full_name)
                             + _text(3, checkpoint_key))
        holds = node.variable is not None or bool(node.children)
        body += _message(5, key(1, 0) + varint(int(holds)) if holds else b"")
        out += _message(1, bytes(body))
    return bytes(out)


def keras_classes(specs: list[Spec]) -> list[tuple[str, str, str]]:
    """Per layer: (Keras class, layer name, inner layer name) as the keras format names
    them (``lstm``, ``lstm_1``, ``bidirectional`` holding ``lstm_2`` …)."""
    used: dict[str, int] = {}

    def unique(name: str) -> str:
        count = used.get(name, 0)
        used[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    out = []
    for spec in specs:
        cls = KERAS_CLASSES[spec.cell]
        inner = unique(_SNAKE[cls])
        out.append((cls, unique("bidirectional") if spec.bidirectional else inner, inner))
    return out


def write(model: Model, path: Any = None) -> dict[str, np.ndarray]:
    """The checkpoint's variables, key → array; with ``path`` also the checkpoint itself
    (and the folder's ``checkpoint`` state file names it, as tf1 does)."""
    specs = [layer.spec for layer in model.layers()]
    arrays = keras_layers.write(model)
    root = _Node()
    out: dict[str, np.ndarray] = {}
    layer_nodes = []
    for index, (spec, layer_arrays, (cls, name, inner)) in enumerate(
            zip(specs, arrays, keras_classes(specs), strict=True)):
        base = f"layer_with_weights-{index}"
        cell_name = f"{_SNAKE[cls]}_cell"
        sides = [("forward_layer", f"forward_{inner}"), ("backward_layer", f"backward_{inner}")] \
            if spec.bidirectional else [("", inner)]
        half = len(layer_arrays) // len(sides)
        layer_node = _Node()
        for side, (side_name, side_inner) in enumerate(sides):
            holder = _Node()
            if cls == "LSTM":
                holder.children.append(("state_size", _Node()))
            prefix = f"{base}/{side_name}/cell" if side_name else f"{base}/cell"
            full = f"{name}/{side_inner}/{cell_name}" if side_name else f"{name}/{cell_name}"
            for variable, array in zip(("kernel", "recurrent_kernel", "bias"),
                                       layer_arrays[side * half:(side + 1) * half], strict=False):
                checkpoint_key = f"{prefix}/{variable}{VALUE}"
                out[checkpoint_key] = np.ascontiguousarray(array)
                holder.children.append((variable, _Node(variable=(f"{full}/{variable}",
                                                                  checkpoint_key))))
            rnn_node = _Node([("cell", holder), ("state_spec", _Node())])
            if side_name:
                layer_node.children.append((side_name, rnn_node))
            else:
                layer_node = rnn_node
        layer_nodes.append(layer_node)
    for index, node in enumerate(layer_nodes):
        root.children += [(f"layer_with_weights-{index}", node), (f"layer-{index}", node)]
    root.children.append(("root", root))
    if path is not None:
        _save(root, out, path)
    return out


def _numbered(root: _Node) -> list[_Node]:
    nodes, seen, queue = [root], {id(root)}, deque([root])
    while queue:
        for _, child in queue.popleft().children:
            if id(child) not in seen:
                seen.add(id(child))
                nodes.append(child)
                queue.append(child)
    return nodes


def _save(root: _Node, variables: dict[str, np.ndarray], path: Any) -> None:
    prefix = tensorbundle.output_prefix(path)
    graph = np.empty((), dtype=object)
    graph[()] = encode_object_graph(_numbered(root))
    checkpoint_state.write_recorded(
        prefix, lambda: tensorbundle.write_bundle(prefix, {**variables,
                                                          tfproto.OBJECT_GRAPH_KEY: graph}),
        "write(fmt='tf2')")
