"""Writing OpenVINO IR: one recurrent layer per network layer, chained, in a graph that
``openvino.Core().read_model`` loads and runs (see :mod:`rnnport.formats.openvino`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

import numpy as np

from ...gates import CANONICAL, block, gate_family, reorder
from ...model import RNN, Model, Stack
from .._common import sum_exact
from .ir import IR, PRECISIONS, bin_path, xml_path
from .reader import ORDERS

__all__ = ["build", "output_files", "param_count", "write"]

OPERATIONS = {"lstm": "LSTMSequence", "gru": "GRUSequence", "rnn": "RNNSequence"}
ELEMENT = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32",
           np.dtype(np.int32): "i32", np.dtype(np.int64): "i64"}
Output = tuple[int, int]  # (layer id, output index)


class _Builder:
    """Layers, edges and constants of one IR, in the order they are added."""

    def __init__(self) -> None:
        self.layers: list[str] = []
        self.edges: list[tuple[int, int, int, int]] = []
        self.weights = bytearray()
        self.outputs: dict[Output, tuple[str, tuple[int, ...], int]] = {}  # type, dims, port

    def add(self, kind: str, version: str, inputs: list[Output],
            outputs: list[tuple[str, tuple[int, ...]]], data: dict[str, str] | None = None,
            name: str | None = None, names: dict[int, str] | None = None,
            runtime: str = "") -> list[Output]:
        number = len(self.layers)
        lines = [f'\t\t<layer id="{number}" name={quoteattr(name or f"{kind}_{number}")} '
                 f'type="{kind}" version="{version}">']
        if data:
            attributes = " ".join(f"{key}={quoteattr(value)}" for key, value in data.items())
            lines.append(f"\t\t\t<data {attributes} />")
        if runtime:
            lines += ["\t\t\t<rt_info>", f'\t\t\t\t<attribute name="{runtime}" version="0" />',
                      "\t\t\t</rt_info>"]
        port = 0
        if inputs:
            lines.append("\t\t\t<input>")
            for source in inputs:
                element, dims, source_port = self.outputs[source]
                lines += _port(port, element, dims)
                self.edges.append((source[0], source_port, number, port))
                port += 1
            lines.append("\t\t\t</input>")
        made = []
        if outputs:
            lines.append("\t\t\t<output>")
            for index, (element, dims) in enumerate(outputs):
                lines += _port(port, element, dims, (names or {}).get(index, ""))
                self.outputs[(number, index)] = (element, dims, port)
                made.append((number, index))
                port += 1
            lines.append("\t\t\t</output>")
        lines.append("\t\t</layer>")
        self.layers.append("\n".join(lines))
        return made

    def constant(self, array: np.ndarray, name: str | None = None) -> Output:
        """A ``Const`` holding ``array``; an f16 one is converted to f32 by a ``Convert``."""
        element = ELEMENT[array.dtype]
        data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        offset = len(self.weights)
        self.weights += data
        dims = tuple(array.shape)
        made = self.add("Const", "opset1", [], [(element, dims)],
                        {"element_type": element, "shape": ", ".join(map(str, dims)),
                         "offset": str(offset), "size": str(len(data))},
                        name=f"{name}/compressed" if name and element == "f16" else name)[0]
        if element == "f16":
            # Marked as decompression, as save_model marks it: without the mark, OpenVINO's
            # CPU plugin computes the layer it feeds in lower precision.
            return self.add("Convert", "opset1", [made], [("f32", dims)],
                            {"destination_type": "f32"}, name=name, runtime="decompression")[0]
        return made

    def xml(self) -> bytes:
        edges = [f'\t\t<edge from-layer="{a}" from-port="{b}" to-layer="{c}" to-port="{d}" />'
                 for a, b, c, d in self.edges]
        return "\n".join(['<?xml version="1.0"?>', '<net name="rnnport" version="11">',
                          "\t<layers>", *self.layers, "\t</layers>", "\t<edges>", *edges,
                          "\t</edges>", "</net>", ""]).encode()


def _port(port: int, element: str, dims: tuple[int, ...], names: str = "") -> list[str]:
    named = f" names={quoteattr(names)}" if names else ""
    return [f'\t\t\t\t<port id="{port}" precision="{PRECISIONS[element]}"{named}>',
            *(f"\t\t\t\t\t<dim>{dim}</dim>" for dim in dims), "\t\t\t\t</port>"]


def _biases(network: RNN, layer: int, direction: int) -> np.ndarray:
    """B of one direction: the two biases summed, and for a reset-after GRU the candidate's
    input-side and recurrent-side biases apart (``[z, r, n_W, n_R]``)."""
    spec = network.spec
    family = gate_family(spec.cell)
    named = network.params[layer][direction]
    if not spec.bias:
        width = spec.gate_count * spec.hidden_size
        return np.zeros(width + (spec.hidden_size if family == "gru" and spec.reset_after
                                 else 0), network.dtype)
    summed = sum_exact(named["bias_ih"], named["bias_hh"])
    if family == "gru" and spec.reset_after:
        block(summed, CANONICAL[family], "n")[...] = block(named["bias_ih"], CANONICAL[family],
                                                           "n")
        return np.concatenate([reorder(summed, CANONICAL[family], ORDERS[family]),
                               block(named["bias_hh"], CANONICAL[family], "n")])
    return reorder(summed, CANONICAL[family], ORDERS[family])


def build(model: Model) -> IR:
    """``model`` as an IR: input ``x`` [batch, time, input] (f32); outputs ``y`` [batch,
    time, D·H] and, per part of a Stack (``_0``, ``_1`` … after the names), the final
    ``h_n`` (and ``c_n``) [layers·D, batch, H] as ``forward`` returns them."""
    parts = model.parts if isinstance(model, Stack) else [model]
    builder = _Builder()
    x = builder.add("Parameter", "opset1", [], [("f32", (-1, -1, parts[0].input_size))],
                    {"shape": f"?,?,{parts[0].input_size}", "element_type": "f32"},
                    name="x", names={0: "x"})[0]
    shape = builder.add("ShapeOf", "opset3", [x], [("i64", (3,))], {"output_type": "i64"})[0]
    axis = builder.constant(np.array(0, np.int64))
    batch, time = (builder.add("Gather", "opset8", [shape, builder.constant(
        np.array([index], np.int64)), axis], [("i64", (1,))], {"batch_dims": "0"})[0]
        for index in (0, 1))
    lengths = builder.add("Broadcast", "opset3", [builder.add(
        "Convert", "opset1", [time], [("i32", (1,))], {"destination_type": "i32"})[0], batch],
        [("i32", (-1,))], {"mode": "numpy"}, name="sequence_lengths")[0]
    zero = builder.constant(np.array(0, np.float32))
    value = x
    for index, part in enumerate(parts):
        suffix = f"_{index}" if len(parts) > 1 else ""
        value = _network(builder, part, value, batch, lengths, zero, suffix,
                         last=index == len(parts) - 1)
    builder.add("Result", "opset1", [value], [], name="y/sink_port_0")
    return IR(builder.xml(), bytes(builder.weights))


def _network(builder: _Builder, network: RNN, x: Output, batch: Output, lengths: Output,
             zero: Output, suffix: str, last: bool) -> Output:
    """The layers of one network after ``x``; its output y (named when ``last``), with its
    final states as Results."""
    spec = network.spec
    family = gate_family(spec.cell)
    count, hidden = spec.num_directions, spec.hidden_size
    direction = "bidirectional" if spec.bidirectional else "reverse" if spec.reverse \
        else "forward"
    state_shape = builder.add("Concat", "opset1", [batch, builder.constant(
        np.array([count, hidden], np.int64))], [("i64", (3,))], {"axis": "0"})[0]
    initial = builder.add("Broadcast", "opset3", [zero, state_shape],
                          [("f32", (-1, count, hidden))], {"mode": "numpy"})[0]
    finals: dict[str, list[Output]] = {"h": [], "c": []}
    swap = builder.constant(np.array([0, 2, 1, 3], np.int64))
    join = builder.constant(np.array([0, 0, count * hidden], np.int64))
    for layer in range(spec.num_layers):
        name = f"{spec.cell}{suffix}/layer{layer}"
        weights = [builder.constant(np.stack([
            reorder(np.asarray(network.params[layer][d][key]), CANONICAL[family],
                    ORDERS[family]) for d in range(count)]), f"{name}/{letter}")
            for key, letter in (("weight_ih", "W"), ("weight_hh", "R"))]
        bias = builder.constant(np.stack([_biases(network, layer, d) for d in range(count)]),
                                f"{name}/B")
        states = [initial, initial] if family == "lstm" else [initial]
        data = {"direction": direction, "hidden_size": str(hidden), "activations":
                {"lstm": "sigmoid, tanh, tanh", "gru": "sigmoid, tanh"}.get(
                    family, "relu" if spec.cell == "rnn_relu" else "tanh"),
                "activations_alpha": "", "activations_beta": "", "clip": "0"}
        if family == "gru":
            data["linear_before_reset"] = "true" if spec.reset_after else "false"
        shapes: list[tuple[str, tuple[int, ...]]] = [("f32", (-1, count, -1, hidden))]
        shapes += [("f32", (-1, count, hidden))] * len(states)
        made = builder.add(OPERATIONS[family], "opset5", [x, *states, lengths, *weights, bias],
                           shapes, data, name=name)
        finals["h"].append(made[1])
        if family == "lstm":
            finals["c"].append(made[2])
        moved = builder.add("Transpose", "opset1", [made[0], swap],
                            [("f32", (-1, -1, count, hidden))])[0]
        final_layer = layer == spec.num_layers - 1
        x = builder.add("Reshape", "opset1", [moved, join], [("f32", (-1, -1, count * hidden))],
                        {"special_zero": "true"}, name="y" if final_layer and last else None,
                        names={0: "y"} if final_layer and last else None)[0]
    for letter, outputs in finals.items():
        if not outputs:
            continue
        joined = outputs[0] if len(outputs) == 1 else builder.add(
            "Concat", "opset1", outputs, [("f32", (-1, count * len(outputs), hidden))],
            {"axis": "1"})[0]
        final = builder.add("Transpose", "opset1", [joined, builder.constant(
            np.array([1, 0, 2], np.int64))], [("f32", (count * len(outputs), -1, hidden))],
            name=f"{letter}_n{suffix}", names={0: f"{letter}_n{suffix}"})[0]
        builder.add("Result", "opset1", [final], [], name=f"{letter}_n{suffix}/sink_port_0")
    return x


def write(model: Model, path: Any = None, **options: Any) -> IR:
    ir = build(model)
    if path is not None:
        ir.save(path)
    return ir


def output_files(path: Path) -> list[Path]:
    """``PATH.xml`` and ``PATH.bin`` (``path`` may name either, or neither)."""
    return [xml_path(path), bin_path(path)]


def param_count(model: Model, **options: Any) -> int:
    """Parameters as an IR stores ``model``: W, R and one summed bias per layer and
    direction (a reset-after GRU's B one block longer)."""
    total = 0
    for part in model.parts if isinstance(model, Stack) else [model]:
        spec = part.spec
        width = spec.gate_count * spec.hidden_size
        extra = spec.hidden_size if spec.cell == "gru" and spec.reset_after else 0
        total += sum(spec.num_directions * (width * (spec.layer_input_size(layer)
                                                     + spec.hidden_size) + width + extra)
                     for layer in range(spec.num_layers))
    return total
