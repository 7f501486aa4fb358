"""Writing ONNX models: a whole graph around one recurrent node per layer (see
:mod:`rnnport.formats.onnx`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...activations import PARAMETERS
from ...errors import FormatError
from ...gates import CANONICAL, gate_family, reorder
from ...io.atomic import atomic_write
from ...model import RNN, Model, Stack
from .._common import require
from .layout import ORDERS, PEEPHOLE_ORDER

__all__ = ["write"]

DEFAULT_OPSET = 17
IR_VERSION = 8


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
    opset = options.get("opset", DEFAULT_OPSET)
    if isinstance(opset, bool) or not isinstance(opset, int) or opset < 14:
        raise FormatError(f"write(fmt='onnx'): opset={opset}; expected 14 or later (the LSTM, "
                          "GRU and RNN operators this writer targets).")
    flags = {}
    for flag in ("time_major", "lengths", "initial_state"):
        value = options.get(flag, False)
        if not isinstance(value, (bool, np.bool_)):
            raise FormatError(f"write(fmt='onnx'): {flag}={value!r}; expected True or False.")
        flags[flag] = bool(value)
    time_major = flags["time_major"]
    # ONNX Runtime's CPU kernels for these operators run float32 only: the graph computes in
    # float32, and weights of other precisions are stored as they are and cast in the graph.
    compute = np.dtype(np.float32)
    elem = onnx.helper.np_dtype_to_tensor_dtype(compute)
    graph = _Graph(onnx, numpy_helper)

    graph.inputs.append(onnx.helper.make_tensor_value_info(
        "x", elem, ["time", "batch", model.input_size] if time_major
        else ["batch", "time", model.input_size]))
    x = "x" if time_major else graph.one("Transpose", ["x"], perm=[1, 0, 2])

    # Optional inputs are graph inputs only when asked for, and never initializers as well:
    # ONNX Runtime warns about every initializer that is also a graph input. Left out, the
    # recurrent nodes' own defaults apply (full length, zero state).
    lengths = ""
    if flags["lengths"]:
        lengths = "sequence_lens"
        graph.inputs.append(onnx.helper.make_tensor_value_info(
            lengths, onnx.TensorProto.INT32, ["batch"]))
    initial_state = flags["initial_state"]

    suffix = (lambda index: "") if len(parts) == 1 else (lambda index: f"_{index}")
    layer_input = x
    for index, part in enumerate(parts):
        layer_input = _write_part(graph, part, layer_input, lengths, initial_state,
                                  suffix(index), compute, elem)
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


def _write_part(graph: _Graph, part: RNN, layer_input: str, lengths: str,
                initial_state: bool, suffix: str, compute: np.dtype, elem: int) -> str:
    """One part's recurrent nodes, one per layer; ``lengths`` is the name of the lengths
    input ("" for none), and with ``initial_state`` the part takes its state inputs."""
    onnx = graph.onnx
    spec = part.spec
    directions = spec.num_directions
    family = gate_family(spec.cell)
    order, canonical = ORDERS[family], CANONICAL[family]
    stacked = spec.num_layers * directions
    state_names = ["initial_h"] + (["initial_c"] if spec.cell == "lstm" else [])
    states = {}  # state name → graph input (L·D, batch, width), sliced per layer below
    for name, width in zip(state_names, (spec.output_size, spec.hidden_size), strict=False):
        if initial_state:
            states[name] = f"{name}{suffix}"
            graph.inputs.append(onnx.helper.make_tensor_value_info(states[name], elem,
                                                                   [stacked, "batch", width]))
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
        if states:
            window = [graph.constant("start", np.array([layer * directions])),
                      graph.constant("stop", np.array([(layer + 1) * directions])),
                      graph.constant("axis", np.array([0]))]
            inputs += [graph.one("Slice", [states[name], *window]) for name in state_names]
        else:
            inputs += [""] * len(state_names)
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
        while not inputs[-1]:  # absent optional inputs at the end are left out, not named ""
            inputs.pop()
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
