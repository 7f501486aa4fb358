"""Writing ``.tflite`` models that the LiteRT interpreter runs.

The model's one input is ``x`` ``(batch, time, input)`` float32; its outputs are ``y``
``(batch, time, D·H_out)`` (the backward half in time order) and ``h_n`` ``(L·D, batch,
H_out)`` (index ``layer·D + direction``, as :meth:`rnnport.RNN.forward` returns it; a
:class:`~rnnport.Stack` has one ``h_n/<part>`` per part). No ``c_n``: the LSTM op keeps its
cell state in a variable tensor, not an output. Every
layer and direction is one of:

* **LSTM** — ``UNIDIRECTIONAL_SEQUENCE_LSTM`` (batch-major, ``time_major=False``), laid out
  as TensorFlow's converter lays it out (:data:`~rnnport.io.tflite_schema.LSTM_INPUTS`):
  per-gate weights ``(H, I)`` / ``(H, H_out)`` (rows of canonical ``weight_ih`` /
  ``weight_hh``), one bias per gate ``bias_ih + bias_hh`` (:func:`combine_biases`, as the
  Keras writer sums them; zeros without biases), peepholes ``cell_to_{input,forget,output}``
  (the rows of ``weight_peephole``), ``projection_weights = weight_hr``,
  ``projection_bias = bias_hr``, ``{input,forget,cell,output}_layer_norm_coefficients``
  (the rows of ``weight_ln``: LiteRT adds the gate's bias after normalizing), the option
  ``cell_clip`` (0: none), and states 18/19 as *variable* tensors (zero after
  ``allocate_tensors``; like the converter's files, a second ``invoke`` continues from the
  state the first one left, unless ``reset_all_variables()`` is called).

  CIFG: TFLite couples ``i = 1 − f`` (no input-gate tensors); the canonical
  ``input_forget`` couples ``f = 1 − i``. TFLite's forget slot therefore holds the
  *negated* input gate (weights, bias, peephole): ``σ(−a) = 1 − σ(a)``, so TFLite's
  ``f = 1 − i`` and ``i = 1 − f = i`` — the canonical cell (to float rounding).
* **simple RNN** (tanh, relu) — ``UNIDIRECTIONAL_SEQUENCE_RNN`` with the fused activation
  ``TANH`` / ``RELU``, ``h' = act(W x + R h + b)``; one bias (summed), the hidden state a
  variable tensor.
* **GRU** (reset after and reset before) — no fused op exists: a ``WHILE`` op whose body
  subgraph computes one step from builtins (``GATHER`` the step, ``FULLY_CONNECTED`` for
  ``W x + bW`` and ``R h + bR``, ``SPLIT``, ``ADD``, ``LOGISTIC``, ``MUL``, ``TANH``,
  ``SUB``) and writes ``h'`` into ``y`` with ``DYNAMIC_UPDATE_SLICE``; both canonical
  biases are kept apart, so the reset-after GRU's ``r∘(R_n h + bR_n)`` is exact::

      r = σ(W_r x + bW_r + R_r h + bR_r)        z = σ(W_z x + bW_z + R_z h + bR_z)
      n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))          (reset after)
      n = tanh(W_n x + bW_n + R_n (r∘h) + bR_n)          (reset before)
      h' = n + z∘(h − n)

  The file's metadata entry ``rnnport.loops`` (JSON, sorted keys) records each loop: its op,
  the ops belonging to it, layer and direction, variant, bias and sizes, and which body
  tensors hold ``weight_ih``, ``weight_hh``, ``bias_ih`` and ``bias_hh`` (a reset-before
  GRU's ``weight_hh`` / ``bias_hh`` as two tensors: the r, z rows, then the n rows), so that
  rnnport reads its own loops back exactly.

A backward direction (and a ``reverse`` network) is ``REVERSE_V2`` (time axis), the cell,
``REVERSE_V2``, the converter's pattern for ``Bidirectional``; the directions are joined
by ``CONCATENATION`` on the feature axis. ``h_n`` is ``STRIDED_SLICE`` of each direction's
output (the last step forward, the first backward) then ``PACK``.

Write options (:data:`WRITE_OPTIONS`): ``batch_size`` (default 1; the variable state
tensors need a fixed batch) and ``time_steps`` (default ``None``: the time axis is
dynamic — stored as 1 with ``shape_signature`` -1, so call
``interpreter.resize_tensor_input(0, (batch, time, input))`` before
``allocate_tensors()``; an int fixes it). Refused (:class:`UnsupportedFeatureError`):
float64 weights (LiteRT's recurrent kernels run float32; cast with ``astype``),
``gate_clip`` and non-default ``activations`` (no TFLite op computes them).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ...errors import FormatError, UnknownOptionError, UnsupportedFeatureError
from ...gates import CANONICAL, block
from ...io.atomic import atomic_write, check_target
from ...io.tflite_schema import (
    ACTIVATIONS,
    BUILTIN_OPERATORS,
    LSTM_INPUTS,
    RNN_INPUTS,
    UNIDIRECTIONAL_SEQUENCE_LSTM,
    UNIDIRECTIONAL_SEQUENCE_RNN,
)
from ...model import RNN, Model, Stack
from .._common import combine_biases, listed, require
from .builder import Graph, ModelBuilder
from .options import WRITE_OPTIONS
from .reader import LOOPS  # the Metadata entry naming the WHILE loops (the module's docstring)

__all__ = ["LOOPS", "SUFFIX", "WRITE_OPTIONS", "write"]

SUFFIX = ".tflite"
WHERE = "write(fmt='tflite')"

_OPS = {name: code for code, name in BUILTIN_OPERATORS.items()}
_ACTIVATION = {name: code for code, name in ACTIVATIONS.items()}
_LSTM_SLOT = {name: index for index, name in enumerate(LSTM_INPUTS)}
_RNN_SLOT = {name: index for index, name in enumerate(RNN_INPUTS)}
_TFLITE_GATES = {"i": "input", "f": "forget", "g": "cell", "o": "output"}


def write(model: Model, path: str | os.PathLike[str] | None = None, **options: Any) -> bytes:
    """The ``.tflite`` FlatBuffer running ``model`` (see the module's docstring); saved
    atomically at ``path`` (suffix ``.tflite``) when given."""
    unknown = sorted(set(options) - WRITE_OPTIONS)
    if unknown:
        raise UnknownOptionError(f"{WHERE}: unknown option(s) {listed(unknown)}; expected "
                                 f"{listed(sorted(WRITE_OPTIONS))}.")
    batch = _positive(options.get("batch_size", 1), "batch_size")
    steps_option = options.get("time_steps")
    steps = None if steps_option is None else _positive(steps_option, "time_steps")
    target = None
    if path is not None:
        target = check_target(path)
        if target.suffix.lower() != SUFFIX:
            raise FormatError(f"{WHERE}: path {str(target)!r} ends in {target.suffix!r}; expected "
                              f"{SUFFIX!r} (a LiteRT FlatBuffer). Choose a path ending in "
                              f"{SUFFIX}. Nothing was written.")
    flatbuffers = require("flatbuffers", extra="tflite", purpose=WHERE)
    layers = model.layers()
    for index, layer in enumerate(layers):
        _check(layer, index)

    builder = ModelBuilder("rnnport")
    main = builder.graph("main")
    time = steps or 1
    signature = None if steps else (batch, -1, model.input_size)
    x = main.tensor("x", (batch, time, model.input_size), signature=signature)
    main.inputs.append(x)
    sequence = x
    finals: list[int] = []
    loops: list[dict[str, Any]] = []
    for index, layer in enumerate(layers):
        spec = layer.spec
        outputs = []
        for direction in range(spec.num_directions):
            backward = direction == 1 or spec.reverse
            name = f"layer{index}" + ("/backward" if direction else "")
            source = _reverse(main, f"{name}/reverse_input", sequence) if backward else sequence
            if spec.cell == "lstm":
                out = _lstm(main, name, layer, direction, source, batch)
            elif spec.cell == "gru":
                out, loop = _gru(builder, main, name, layer, direction, source, batch)
                loops.append({**loop, "layer": index, "direction": direction})
            else:
                out = _simple_rnn(main, name, layer, direction, source, batch)
            if backward:
                out = _reverse(main, f"{name}/reverse_output", out)
            outputs.append(out)
            finals.append(_final(main, f"{name}/h_n", out, backward))
        if len(outputs) == 1:
            sequence = outputs[0]
        else:
            first = main.tensors[outputs[0]]
            width = sum(main.tensors[o].shape[2] for o in outputs)
            sequence = main.like(f"layer{index}/concat", outputs[0],
                                 (batch, time, width), _signature(first.signature, width))
            main.op(_OPS["CONCATENATION"], outputs, [sequence],
                    ("ConcatenationOptions", {"axis": 2, "fused_activation_function": 0}))
    main.tensors[sequence].name = "y"
    main.outputs.append(sequence)
    parts = model.parts if isinstance(model, Stack) else (model,)
    start = 0
    for index, part in enumerate(parts):
        count = part.spec.num_layers * part.spec.num_directions
        label = "h_n" if len(parts) == 1 else f"h_n/{index}"
        main.outputs.append(_pack(main, label, finals[start:start + count]))
        start += count
    if loops:
        builder.add_metadata(LOOPS, json.dumps({"version": 1, "loops": loops},
                                               sort_keys=True).encode())
    data = builder.finish(flatbuffers)
    if target is not None:
        atomic_write(target, lambda file: file.write(data))
    return data


def _pack(graph: Graph, name: str, finals: list[int]) -> int:
    """``(len(finals), batch, H_out)`` from the per-direction final states."""
    shape = (len(finals), *graph.tensors[finals[0]].shape)
    h_n = graph.like(name, finals[0], shape)
    if len(finals) == 1:
        graph.op(_OPS["RESHAPE"], [finals[0], graph.const(f"{name}/shape", shape, np.int32)],
                 [h_n])
    else:
        graph.op(_OPS["PACK"], finals, [h_n], ("PackOptions", {"values_count": len(finals),
                                                                "axis": 0}))
    return h_n


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise FormatError(f"{WHERE}: {name}={value!r}; expected an int >= 1.")
    return int(value)


def _check(layer: RNN, index: int) -> None:
    spec = layer.spec
    where = f"{WHERE} layer {index}"
    if layer.dtype == np.float64:
        raise UnsupportedFeatureError(
            f"{where}: float64 weights; expected float16 or float32 (LiteRT's recurrent kernels "
            "compute in float32, so float64 numbers would change). Cast first: "
            "model.astype('float32').")
    if spec.gate_clip is not None:
        raise UnsupportedFeatureError(
            f"{where}: gate_clip={spec.gate_clip}; no TFLite recurrent op clips gate "
            "pre-activations (only the LSTM's cell state, cell_clip). Write another format.")
    if spec.activations:  # () is the defaults
        raise UnsupportedFeatureError(
            f"{where}: activations={spec.activations}; TFLite's recurrent ops use the default "
            "sigmoid/tanh only. Write another format.")


def _signature(signature: tuple[int, ...] | None, width: int) -> tuple[int, ...] | None:
    return None if signature is None else (signature[0], signature[1], width)


def _weights(layer: RNN, direction: int) -> dict[str, np.ndarray]:
    return {name: np.asarray(array, dtype=np.float32)
            for name, array in layer.params[0][direction].items()}


def _bias(layer: RNN, named: dict[str, np.ndarray], index: str) -> np.ndarray:
    spec = layer.spec
    if not spec.bias:
        return np.zeros(spec.gate_count * spec.hidden_size, np.float32)
    return combine_biases(spec, named, "ih", f"{WHERE} {index}", "tflite")


def _reverse(graph: Graph, name: str, value: int) -> int:
    out = graph.like(name, value)
    graph.op(_OPS["REVERSE_V2"], [value, graph.const(f"{name}/axis", [1], np.int32)], [out])
    return out


def _output(graph: Graph, name: str, source: int, width: int) -> int:
    base = graph.tensors[source]
    return graph.like(name, source, (base.shape[0], base.shape[1], width),
                      _signature(base.signature, width))


def _final(graph: Graph, name: str, out: int, backward: bool) -> int:
    """``out[:, -1]`` (forward) or ``out[:, 0]`` (backward, in time order): ``(B, H_out)``."""
    base = graph.tensors[out]
    final = graph.like(name, out, (base.shape[0], base.shape[2]))
    step = 0 if backward else -1
    graph.op(_OPS["STRIDED_SLICE"], [out, graph.const(f"{name}/begin", [0, step, 0], np.int32),
                                     graph.const(f"{name}/end", [0, step + 1 if step else 1, 0],
                                                 np.int32),
                                     graph.const(f"{name}/strides", [1, 1, 1], np.int32)],
             [final], ("StridedSliceOptions", {"begin_mask": 0b101, "end_mask": 0b101,
                                               "shrink_axis_mask": 0b010}))
    return final


def _lstm(graph: Graph, name: str, layer: RNN, direction: int, source: int, batch: int) -> int:
    spec = layer.spec
    named = _weights(layer, direction)
    bias = _bias(layer, named, name)
    order = CANONICAL["lstm"]
    inputs = [-1] * len(LSTM_INPUTS)
    inputs[_LSTM_SLOT["input"]] = source
    peephole = dict(zip("ifo", named["weight_peephole"], strict=True)) if spec.peepholes else {}
    for gate, tflite in _TFLITE_GATES.items():
        sign = 1.0
        if spec.input_forget and gate == "i":
            continue  # CIFG: TFLite has no input-gate tensors
        if spec.input_forget and gate == "f":
            gate, sign = "i", -1.0  # TFLite's f slot holds −(canonical i): σ(−a) = 1 − σ(a)
        for kind, array in (("input_to", named["weight_ih"]), ("recurrent_to", named["weight_hh"])):
            slot = f"{kind}_{tflite}_weights"
            inputs[_LSTM_SLOT[slot]] = graph.const(f"{name}/{slot}", sign * block(array, order, gate))
        slot = f"{tflite}_gate_bias"
        inputs[_LSTM_SLOT[slot]] = graph.const(f"{name}/{slot}", sign * block(bias, order, gate))
        if gate in peephole and tflite != "cell":
            slot = f"cell_to_{tflite}_weights"
            inputs[_LSTM_SLOT[slot]] = graph.const(f"{name}/{slot}", sign * peephole[gate])
        if spec.layer_norm:  # LN(−a)·k − b = −(LN(a)·k + b): the coefficients keep their sign
            slot = f"{tflite}_layer_norm_coefficients"
            inputs[_LSTM_SLOT[slot]] = graph.const(f"{name}/{slot}",
                                                   named["weight_ln"]["ifgo".index(gate)])
    if spec.proj_size:
        inputs[_LSTM_SLOT["projection_weights"]] = graph.const(f"{name}/projection_weights",
                                                               named["weight_hr"])
    if spec.proj_bias:
        inputs[_LSTM_SLOT["projection_bias"]] = graph.const(f"{name}/projection_bias",
                                                            named["bias_hr"])
    inputs[_LSTM_SLOT["output_state"]] = graph.tensor(f"{name}/output_state",
                                                      (batch, spec.output_size), variable=True)
    inputs[_LSTM_SLOT["cell_state"]] = graph.tensor(f"{name}/cell_state",
                                                    (batch, spec.hidden_size), variable=True)
    out = _output(graph, f"{name}/lstm", source, spec.output_size)
    graph.op(UNIDIRECTIONAL_SEQUENCE_LSTM, inputs, [out], (
        "UnidirectionalSequenceLSTMOptions",
        {"fused_activation_function": _ACTIVATION["TANH"],
         "cell_clip": float(spec.cell_clip or 0.0), "proj_clip": 0.0, "time_major": False,
         "asymmetric_quantize_inputs": False}))
    return out


def _simple_rnn(graph: Graph, name: str, layer: RNN, direction: int, source: int,
                batch: int) -> int:
    spec = layer.spec
    named = _weights(layer, direction)
    inputs = [-1] * len(RNN_INPUTS)
    inputs[_RNN_SLOT["input"]] = source
    inputs[_RNN_SLOT["input_weights"]] = graph.const(f"{name}/input_weights", named["weight_ih"])
    inputs[_RNN_SLOT["recurrent_weights"]] = graph.const(f"{name}/recurrent_weights",
                                                         named["weight_hh"])
    inputs[_RNN_SLOT["bias"]] = graph.const(f"{name}/bias", _bias(layer, named, name))
    inputs[_RNN_SLOT["hidden_state"]] = graph.tensor(f"{name}/hidden_state",
                                                     (batch, spec.hidden_size), variable=True)
    out = _output(graph, f"{name}/rnn", source, spec.hidden_size)
    activation = _ACTIVATION["RELU" if spec.nonlinearity == "relu" else "TANH"]
    graph.op(UNIDIRECTIONAL_SEQUENCE_RNN, inputs, [out], (
        "SequenceRNNOptions", {"time_major": False, "fused_activation_function": activation,
                               "asymmetric_quantize_inputs": False}))
    return out


def _gru(builder: ModelBuilder, graph: Graph, name: str, layer: RNN, direction: int,
         source: int, batch: int) -> tuple[int, dict[str, Any]]:
    """A WHILE loop over time: loop values ``(t, steps, x, h, y)``. Returns its output ``y``
    and its description for the ``rnnport.loops`` metadata."""
    spec = layer.spec
    hidden = spec.hidden_size
    int32 = np.int32
    first = len(graph.operators)
    # -- in the calling graph: steps = shape(x)[1], y0 = zeros(batch, steps, H) -------------------
    shape = graph.tensor(f"{name}/shape", (3,), int32)
    graph.op(_OPS["SHAPE"], [source], [shape], ("ShapeOptions", {"out_type": 2}))
    steps_vector = graph.tensor(f"{name}/steps_vector", (1,), int32)
    graph.op(_OPS["STRIDED_SLICE"], [shape, graph.const(f"{name}/at1", [1], int32),
                                     graph.const(f"{name}/at2", [2], int32),
                                     graph.const(f"{name}/one", [1], int32)], [steps_vector],
             ("StridedSliceOptions", {}))
    steps = graph.tensor(f"{name}/steps", (), int32)
    graph.op(_OPS["STRIDED_SLICE"], [shape, graph.const(f"{name}/at1", [1], int32),
                                     graph.const(f"{name}/at2", [2], int32),
                                     graph.const(f"{name}/one", [1], int32)], [steps],
             ("StridedSliceOptions", {"shrink_axis_mask": 1}))
    dims = graph.tensor(f"{name}/y_shape", (3,), int32)
    graph.op(_OPS["CONCATENATION"], [graph.const(f"{name}/batch", [batch], int32), steps_vector,
                                     graph.const(f"{name}/hidden", [hidden], int32)], [dims],
             ("ConcatenationOptions", {"axis": 0}))
    y0 = _output(graph, f"{name}/y0", source, hidden)
    graph.op(_OPS["FILL"], [dims, graph.const(f"{name}/zero", 0.0)], [y0])
    initial = [graph.const(f"{name}/t0", 0, int32), steps, source,
               graph.const(f"{name}/h0", np.zeros((batch, hidden))), y0]
    results = [graph.like(f"{name}/t_end", initial[0]), graph.like(f"{name}/steps_end", steps),
               graph.like(f"{name}/x_end", source), graph.like(f"{name}/h_end", initial[3]),
               graph.like(f"{name}/gru", y0)]

    def loop_values(sub: Graph) -> list[int]:
        values = [sub.tensor("t", (), int32), sub.tensor("steps", (), int32)]
        for index in (2, 3, 4):
            base = graph.tensors[initial[index]]
            values.append(sub.tensor(("x", "h", "y")[index - 2], base.shape,
                                     signature=base.signature))
        sub.inputs.extend(values)
        return values

    cond = builder.graph(f"{name}/cond")
    t, count, *_ = loop_values(cond)
    going = cond.tensor("continue", (), np.bool_)
    cond.op(_OPS["LESS"], [t, count], [going])
    cond.outputs.append(going)

    body = builder.graph(f"{name}/body")
    t, count, x, h, y = loop_values(body)
    input_size = graph.tensors[source].shape[2]
    named = _weights(layer, direction)
    order = CANONICAL["gru"]

    def tensor(label: str, width: int) -> int:
        return body.tensor(label, (batch, width))

    def dense(label: str, value: int, weights: np.ndarray, bias: np.ndarray | None) -> int:
        out = tensor(label, weights.shape[0])
        body.op(_OPS["FULLY_CONNECTED"], [value, body.const(f"{label}/weights", weights),
                                          -1 if bias is None else body.const(f"{label}/bias", bias)],
                [out], ("FullyConnectedOptions", {"fused_activation_function": 0,
                                                  "keep_num_dims": False}))
        return out

    def binary(op: str, label: str, first: int, second: int) -> int:
        out = tensor(label, hidden)
        body.op(_OPS[op], [first, second], [out], (f"{op.capitalize()}Options",
                                                   {"fused_activation_function": 0}))
        return out

    def unary(op: str, label: str, value: int) -> int:
        out = tensor(label, hidden)
        body.op(_OPS[op], [value], [out])
        return out

    def split(label: str, value: int, count: int) -> list[int]:
        outs = [tensor(f"{label}:{k}", hidden) for k in range(count)]
        body.op(_OPS["SPLIT"], [body.const(f"{label}/axis", 1, int32), value], outs,
                ("SplitOptions", {"num_splits": count}))
        return outs

    x_t = body.tensor("x_t", (batch, input_size))
    body.op(_OPS["GATHER"], [x, t], [x_t], ("GatherOptions", {"axis": 1, "batch_dims": 0}))
    bias_ih = named.get("bias_ih")
    bias_hh = named.get("bias_hh")
    gx_r, gx_z, gx_n = split("gx", dense("W_x", x_t, named["weight_ih"], bias_ih), 3)
    weight_hh = named["weight_hh"]
    if spec.reset_after:
        gh_r, gh_z, gh_n = split("gh", dense("R_h", h, weight_hh, bias_hh), 3)
    else:
        rz = slice(0, 2 * hidden)
        gh_r, gh_z = split("gh", dense("R_h", h, weight_hh[rz],
                                       None if bias_hh is None else bias_hh[rz]), 2)
    r = unary("LOGISTIC", "r", binary("ADD", "r_in", gx_r, gh_r))
    z = unary("LOGISTIC", "z", binary("ADD", "z_in", gx_z, gh_z))
    if spec.reset_after:
        reset = binary("MUL", "r_gh_n", r, gh_n)
    else:
        reset = dense("R_n_rh", binary("MUL", "r_h", r, h), block(weight_hh, order, "n"),
                      None if bias_hh is None else block(bias_hh, order, "n"))
    n = unary("TANH", "n", binary("ADD", "n_in", gx_n, reset))
    h_next = binary("ADD", "h_next", n, binary("MUL", "z_diff", z, binary("SUB", "diff", h, n)))
    update = body.tensor("update", (batch, 1, hidden))
    body.op(_OPS["RESHAPE"], [h_next, body.const("update/shape", [batch, 1, hidden], int32)],
            [update])
    t_vector = body.tensor("t_vector", (1,), int32)
    body.op(_OPS["RESHAPE"], [t, body.const("t/shape", [1], int32)], [t_vector])
    start = body.tensor("start", (3,), int32)
    zero = body.const("zero", [0], int32)
    body.op(_OPS["CONCATENATION"], [zero, t_vector, zero], [start],
            ("ConcatenationOptions", {"axis": 0}))
    y_next = body.like("y_next", y)
    body.op(_OPS["DYNAMIC_UPDATE_SLICE"], [y, update, start], [y_next])
    t_next = body.tensor("t_next", (), int32)
    body.op(_OPS["ADD"], [t, body.const("one", 1, int32)], [t_next],
            ("AddOptions", {"fused_activation_function": 0}))
    body.outputs.extend([t_next, count, x, h_next, y_next])

    graph.op(_OPS["WHILE"], initial, results, (
        "WhileOptions", {"cond_subgraph_index": builder.graphs.index(cond),
                         "body_subgraph_index": builder.graphs.index(body)}))

    def found(*labels: str) -> list[int]:
        by_name = {tensor.name: index for index, tensor in enumerate(body.tensors)}
        return [by_name[label] for label in labels]

    recurrent = ("R_h", "R_n_rh") if not spec.reset_after else ("R_h",)
    loop = {
        "cell": "gru", "reset_after": spec.reset_after, "bias": spec.bias,
        "input_size": input_size, "hidden_size": hidden, "operator": len(graph.operators) - 1,
        "operators": list(range(first, len(graph.operators))),
        "body": builder.graphs.index(body), "cond": builder.graphs.index(cond),
        "tensors": {"weight_ih": found("W_x/weights"),
                    "weight_hh": found(*(f"{label}/weights" for label in recurrent)),
                    **({"bias_ih": found("W_x/bias"),
                        "bias_hh": found(*(f"{label}/bias" for label in recurrent))}
                       if spec.bias else {})}}
    return results[4], loop
