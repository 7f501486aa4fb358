"""Keras 3 SavedModels: ``model.export(dir)`` and ``tf.saved_model.save(model, dir)``.

Keras 3 (on TensorFlow) saves no Keras layer objects and no ``keras_metadata.pb``: a
``model.export`` folder's object graph holds the serving functions and flat lists of
variables (``variables/0`` …, ``_all_variables/0`` …, the latter a second copy of the same
values), and ``tf.saved_model.save`` of a Keras 3 model holds its objects under private
names (``_layers/1/cell/kernel``). In both, every variable is named by its *Keras 3 path*
(``SavedVariable.name``, the checkpoint's ``full_name``): the layer names from the model
down, then the variable's name::

    <model>/<layer>/<cell>/kernel              (I, G·H)   x @ kernel, Keras gate order
    <model>/<layer>/<cell>/recurrent_kernel    (H, G·H)
    <model>/<layer>/<cell>/bias                LSTM (4H,), SimpleRNN (H,),
                                               GRU (2, 3H) reset_after / (3H,) reset-before
    <model>/<bidirectional>/forward_<layer>/<cell>/…, …/backward_<layer>/<cell>/…

(``sequential/encoder/lstm_cell/kernel``; a Functional model's layers have no model prefix:
``lstm/lstm_cell/kernel``; names may be custom or auto-numbered, ``gru_cell_1``), as in a
Keras ``get_weights()`` list (:mod:`rnnport.formats.keras.layers`). Names cannot say what the
layers compute, in which order they are called, or how, so all of that is read from the
serving function's graph (``saved_model.pb``'s function library, :mod:`.graph`):

* **The loops.** Keras 3's ``rnn()`` (``keras/src/backend/tensorflow/rnn.py``) steps a
  layer with a ``While`` whose body reads one step of the input
  (``TensorListGetItem`` of a list made by ``TensorListFromTensor`` of the time-major
  sequence), computes the cell from the layer's variables (captured resources, read inside
  the body), writes the output (``TensorListSetItem`` at the step counter) and returns the
  new states (LSTM ``h, c``; GRU and SimpleRNN ``h``; with a mask the previous output
  first, and the mask read from a second list of bools). Each loop that reads a kernel and a
  recurrent kernel is one *direction*; which variables are its kernel, recurrent kernel and
  bias is told by their names. The step counter must start at 0 and count by 1.
* **The cell.** The body's step is evaluated with NumPy, with the variables' values, on
  random inputs and states (uniform in ±1, then scaled so that every gate's pre-activation
  ``x·kernel + h·recurrent_kernel`` reaches ±10 and ±100: functions that agree near 0, relu
  and relu6 or ``relu(max_value=4)``, linear and a clip, part there), and compared with one
  step of rnnport's own network read from the same arrays with Keras's activations
  (``sigmoid``, ``tanh``, ``relu``, ``linear``, ``softsign``, ``softplus``, ``elu``,
  Keras 3's ``hard_sigmoid`` = ``relu6(x + 3) / 6``) for the activation and recurrent
  activation, and for a GRU without a bias both ``reset_after`` forms. Exactly one must match
  on every probe (within 1e-6 in float64): that is what the layer computes, whatever ops
  (``implementation=1`` or 2, ``Relu6``/``RealDiv``) spell it. A step that none matches is
  refused, naming what it applies that rnnport does not compute: a SimpleRNN's activation by
  its Keras name (``sigmoid``, ``relu6``, ``hard_tanh`` …), else ``relu6`` (a ``Relu6``
  not of ``x + 3``), a clip (``Minimum``/``Maximum``: ``relu(max_value=…)``, ``hard_tanh``,
  ``ops.clip``), ``x·f(x)`` (silu, hard_silu, mish), the ops of no activation rnnport computes
  (``Selu``, ``Erfc`` for gelu …), or the operation rnnport does not evaluate. Kernels of 3 to
  5 dimensions are a ConvLSTM's, refused by name.
* **Precision.** A loop carrying float16 or bfloat16 values, or casting its weights to them
  (a ``mixed_float16``, ``float16``, ``mixed_bfloat16`` … dtype policy; a ``CudnnRNNV3`` of
  such a type), computes in half precision, which rnnport does not: it is refused by name.
* **cuDNN.** Exported on a machine with a GPU, an LSTM or a reset-after GRU with the default
  activations and a bias is one ``CudnnRNNV3`` op instead of a loop, its ``params`` built
  from the variables (``Split``, ``Transpose``, ``Reshape``, ``ConcatV2``; Keras 3's
  ``_cudnn_lstm`` / ``_cudnn_gru``). That buffer is evaluated and must equal the cuDNN buffer
  (:mod:`rnnport.formats.cudnn`, two biases) of the direction read with the defaults.
* **Direction and order of time.** From the loop's input list back through the ops that only
  move data (``Transpose``, ``ReverseV2``, ``ReverseSequence``, ``Identity``) to the tensor
  it came from, counting reversals of the time axis: an odd count is ``go_backwards=True``.
  The output list's ``TensorListStack`` is the direction's output sequence.
* **Bidirectional.** A forward and a backward direction over the same input whose outputs
  meet in a ``ConcatV2`` along the last axis, forward first and the backward output
  reversed back to the input's order, are one Bidirectional layer (``merge_mode='concat'``);
  meeting in ``AddV2`` (``sum``; then ``RealDiv`` by 2: ``ave``) or ``Mul`` (``mul``), or not
  at all (``merge_mode=None``), the layer is listed and refused when chosen, as is a
  ``go_backwards=True`` layer outside a Bidirectional: rnnport's output concatenates the
  directions in the input's time order. An even count above 0 (a time flip such as
  ``Lambda(ops.flip)`` before a ``go_backwards=True`` layer) is a forward network over the
  tensor before the flips, its output in that tensor's order; ``notes`` says which tensor.
* **Stacks, in call order.** A layer whose input sequence is another layer's whole output
  (its ``TensorListStack``, or its Bidirectional concatenation, through data-moving ops only)
  follows that layer: chains of such layers are the stacks, listed in the model's order of
  its variables (``model.variables``). A layer taking anything else (the model's input, a
  Conv1D's or a Dense's output, a ``RepeatVector``) starts a stack. A layer with
  ``unroll=True`` has no loop (its steps are spelled out one by one) and is refused by name;
  so is a loop that steps two cells (``keras.layers.RNN`` of a list of cells), and a model
  exported from the JAX backend, whose serving function is one ``XlaCallModule`` (jax2tf's
  serialized StableHLO) and whose variables have no paths.
* **Names.** A layer is picked by its path less the cell (``sequential/encoder``) or its
  name (``encoder``). A subclassed model's layers built in its ``call`` are all named by
  the model's own path (``m/kernel``): such layers are told apart by their variables and
  numbered in the model's order (``m[0]``, ``m[1]``).

What the graph also shows is noted (``notes``): a loop that reads a mask (a ``Masking``
layer or ``mask_zero``: masked steps keep the state, where rnnport's ``forward`` runs every
step unless ``lengths`` is given), an initial state that is not zeros (``initial_state=``,
``stateful=True``, whose state variables are listed), a layer that returns its last step
alone (``return_sequences=False``), a layer called more than once (shared), the layers with
weights that are not recurrent (Dense, Conv1D …: their variables listed, not read), the
random-number state of dropout (``seed_generator_state``). ``activation=``,
``recurrent_activation=`` and ``reset_after=`` may be given; they must agree with the graph,
and ``keras_version=`` must be 3 where a layer computes ``hard_sigmoid``.
The serving function analysed is the one whose loops read the most recurrent layers
(``__inference___call___N`` behind ``serve``/``serving_default`` for ``model.export``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import pairwise, product
from typing import Any

import numpy as np

from ... import budget
from ...errors import AmbiguousSourceError, FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...io import tensorbundle, tfproto
from ...model import Model, as_float_array
from .._common import close_matches, listed
from ..keras import layers as keras_layers
from .graph import ACTIVATION_OPS, LOOPS, Evaluator, Library, Ref, Unevaluable, attr_int, attr_text, attr_type

__all__ = ["Direction", "Export", "KerasLayer", "is_keras3"]

ROLES = ("kernel", "recurrent_kernel", "bias")
# Keras's activations rnnport computes in LSTM and GRU layers, the defaults first.
ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear", "softsign", "softplus", "elu",
               "hard_sigmoid")
SIMPLE_ACTIVATIONS = ("tanh", "relu")
# The ops those activations are made of in a Keras 3 graph (hard_sigmoid: Relu6; linear: none).
KERAS_OPS = frozenset({"Sigmoid", "Tanh", "Relu", "Relu6", "Softsign", "Softplus", "Elu"})
CUDNN_OPS = frozenset({"CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"})
XLA_OPS = frozenset({"XlaCallModule"})  # jax2tf's: a JAX backend's whole computation
PROBE_BATCH = 3
# The step is evaluated on x, h (and c) uniform in ±1, then again where the gates'
# pre-activations reach these magnitudes, both signs in every gate: functions that agree near
# 0 part there (relu and relu6 above 6, linear and a clip, sigmoid and its hard forms).
PROBE_REACH = (10.0, 100.0)
WIDE_BATCH = 8
MAX_SCALE = 1e6
TOLERANCE = 1e-6
HALF_TYPES = {tfproto.DT_HALF: "float16", tfproto.DT_BFLOAT16: "bfloat16"}
CLIP_OPS = frozenset({"Minimum", "Maximum", "ClipByValue"})
# x·f(x), by f's op: Keras's self-gated activations, which no rnnport cell applies.
GATED = {"Sigmoid": "silu (x·sigmoid(x))", "Relu6": "hard_silu (x·hard_sigmoid(x))",
         "Tanh": "x·tanh(…) (mish is x·tanh(softplus(x)))"}
GATES = {4: "LSTM", 3: "GRU", 1: "SimpleRNN"}


def is_keras3(saved: tfproto.SavedModel) -> bool:
    """Whether a SavedModel's objects are Keras 3's (no tf.keras / tf_keras layer objects,
    whose identifiers start ``_tf_keras_``)."""
    graph = saved.meta_graphs[0].object_graph_def if saved.meta_graphs else None
    if graph is None:
        return False
    return not any(node.user_object is not None
                   and node.user_object.identifier.startswith("_tf_keras")
                   for node in graph.nodes)


# One evaluation of a loop's step: x, the initial states (h, or h and c), and what the step
# computed from them (the output, then the new states).
Probe = tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]


@dataclass
class Direction:
    """One direction of a recurrent layer: the loop (or cuDNN op) stepping one cell."""

    holder: str                   # the cell's variable path: sequential/encoder/lstm_cell
    variables: dict[str, int]     # kernel, recurrent_kernel[, bias] → object graph node id
    function: str                 # the function the loop is in
    node: str                     # the While (or CudnnRNNV3) node
    order: int                    # its position in the function
    source: Ref | None = None     # the sequence it steps through, before data-moving ops
    source_axis: int = 0
    backward: bool = False        # reads its input in reverse (go_backwards=True)
    flips: int = 0                # reversals of the time axis between the source and the loop
    output: Ref | None = None     # its output sequence (time-major for a loop)
    output_axis: int = 0
    sequences: bool = True        # the output holds every step (return_sequences=True)
    options: dict[str, Any] = field(default_factory=dict)  # what the step computes
    masked: bool = False
    initial: str = ""             # where the initial state comes from, if not zeros
    cudnn: bool = False
    calls: int = 1                # loops stepping the same cell in that function (shared)
    problem: str = ""             # why it cannot be read

    @property
    def path(self) -> str:
        return self.holder.rpartition("/")[0] or self.holder

    @property
    def cell(self) -> frozenset[int]:
        """The cell's identity: its variables (their names need not be unique)."""
        return frozenset(self.variables.values()) or frozenset({-1 - self.order})


@dataclass
class KerasLayer:
    """A recurrent layer: one direction, or two of a Bidirectional."""

    path: str
    directions: list[Direction]
    output: Ref | None            # its whole output sequence, for the next layer to take
    output_axis: int = 0          # the time axis there
    problem: str = ""
    rank: int = 0                 # where its variables are in the model's list

    @property
    def name(self) -> str:
        return self.path.rpartition("/")[2]


class Export:
    """The Keras 3 model of a SavedModel (see the module docstring): ``layers`` and
    ``stacks`` found, every variable by node id."""

    def __init__(self, where: str, saved: tfproto.SavedModel,
                 graph: tfproto.TrackableObjectGraph, bundle: tensorbundle.Bundle,
                 size: int) -> None:
        self.where, self.bundle, self.size = where, bundle, size
        meta = saved.meta_graphs[0]
        objects = meta.object_graph_def
        assert objects is not None
        self.names: dict[int, str] = {}
        self.keys: dict[int, str] = {}
        for node_id, node in enumerate(objects.nodes):
            if node.kind != "variable" or node.variable is None:
                continue
            self.names[node_id] = node.variable.name
            if node_id < len(graph.nodes):
                for attribute in graph.nodes[node_id].attributes:
                    if attribute.name == "VARIABLE_VALUE" and attribute.checkpoint_key in bundle:
                        self.keys[node_id] = attribute.checkpoint_key
        self.library = Library(meta.graph_def, objects.bound_inputs, where, size)
        self.bound = {node_id for ids in objects.bound_inputs.values() for node_id in ids
                      if node_id in self.names}
        self.rank = _model_order(objects)
        self._arrays: dict[int, np.ndarray] = {}
        self.limit = budget.allowance("expansion", size)
        self.stepped: set[int] = set()  # the variables some loop or cuDNN op reads
        self.directions = self._directions()
        self.layers = self._layers()
        self.stacks = self._stacks()

    # -- variables ---------------------------------------------------------------------

    def shape(self, node_id: int) -> tuple[int, ...]:
        key = self.keys.get(node_id)
        return tuple(self.bundle[key].shape) if key is not None else ()

    def array(self, node_id: int) -> np.ndarray:
        found = self._arrays.get(node_id)
        if found is None:
            key = self.keys.get(node_id)
            if key is None:
                raise FormatError(f"{self.where}: variable {self.names.get(node_id, node_id)!r} "
                                  "has no value in variables/variables; the SavedModel is "
                                  "incomplete.")
            found = as_float_array(self.bundle.read(key), f"{self.where}: {key}")
            self._arrays[node_id] = found
        return found

    def arrays(self, direction: Direction) -> list[np.ndarray]:
        return [self.array(direction.variables[role]) for role in ROLES
                if role in direction.variables]

    def _cell(self, ids: set[int], function: str, node: tfproto.NodeDef,
              order: int) -> Direction | None:
        """The direction stepping the cell whose variables ``ids`` are (told by their names:
        kernel, recurrent_kernel, bias), one with a problem where they are not one cell's,
        or None where they hold no recurrent kernel."""
        where = f"{node.op} node {node.name!r} ({function})"
        self.stepped |= ids
        holders: dict[str, dict[str, int]] = {}
        twice = []
        for node_id in sorted(ids):
            holder, _, role = self.names.get(node_id, "").rpartition("/")
            if role in holders.setdefault(holder, {}):
                twice.append(f"{holder}/{role}")
            holders[holder][role] = node_id
        cells = sorted(holder for holder, roles in holders.items()
                       if {"kernel", "recurrent_kernel"} <= set(roles))
        if not cells:
            return None
        holder = cells[0] if len(cells) == 1 else _common_path(cells)
        variables = {role: holders[holder][role] for role in ROLES if role in holders.get(
            holder, {})}
        direction = Direction(holder, variables, function, node.name, order,
                              cudnn=node.op in CUDNN_OPS)
        if len(cells) > 1:
            direction.problem = (f"{where} steps {len(cells)} cells at once ({listed(cells)}): "
                                 "a keras.layers.RNN of a list of cells (StackedRNNCells), which "
                                 "rnnport does not read; build the stack from one RNN layer per "
                                 "cell")
        elif twice:
            direction.problem = (f"{where} reads two variables named {twice[0]}; the SavedModel "
                                 "does not say which is which")
        elif any(len(self.shape(i)) != 2 for i in variables.values()
                 if self.names[i].endswith("kernel")):
            rank = len(self.shape(variables["recurrent_kernel"]))
            direction.problem = (f"{where}: its kernels are {rank}-D: a ConvLSTM{rank - 2}D, "
                                 "whose kernels are convolutions, not an LSTM's (I, 4H) "
                                 "matrices; rnnport reads LSTM, GRU and SimpleRNN layers")
        return direction

    # -- the directions: loops and cuDNN ops -------------------------------------------

    def _directions(self) -> list[Direction]:
        found: list[Direction] = []
        for function in sorted(self.library.functions):
            nodes = self.library.nodes[function]
            for order, node in enumerate(nodes.values()):
                if node.op in LOOPS:
                    direction = self._loop(function, node, order)
                elif node.op in CUDNN_OPS:
                    direction = self._cudnn(function, node, order)
                else:
                    continue
                if direction is not None:
                    found.append(direction)
        # Each cell (its variables) once: from the function that steps the most cells (the
        # model's call), the others from the first function that steps them.
        counts: dict[str, set[frozenset[int]]] = {}
        for direction in found:
            counts.setdefault(direction.function, set()).add(direction.cell)
        ranked = sorted(counts, key=lambda function: (-len(counts[function]), function))
        chosen: dict[frozenset[int], Direction] = {}
        for function in ranked:
            for direction in found:
                if direction.function == function:
                    first = chosen.setdefault(direction.cell, direction)
                    if first.function == function:
                        first.calls += direction is not first
        return sorted(chosen.values(), key=lambda d: (ranked.index(d.function), d.order))

    def _loop(self, function: str, node: tfproto.NodeDef, order: int) -> Direction | None:
        library = self.library
        body_name = _called(node, "body")
        inputs = library.inputs(function, node)
        held = {k: library.variable(ref) for k, ref in enumerate(inputs)}
        where = f"loop {node.name!r} ({function})"
        direction = self._cell({v for v in held.values() if v is not None}, function, node,
                               order)
        if direction is None or direction.problem:
            return direction
        if body_name is None or body_name not in library.functions:
            direction.problem = f"{where} calls body {body_name!r}, which the library lacks"
            return direction
        try:
            self._read_loop(direction, node, inputs, held, body_name)
        except LimitError:
            raise
        except Unevaluable as error:
            direction.problem = (f"{where}: its step applies {error.op} ({error.node}), which "
                                 f"rnnport does not evaluate{f' ({error.why})' if error.why else ''}"
                                 "; the layer computes something rnnport does not read")
        except RnnportError as error:  # this layer's variables or step, not the file's
            direction.problem = f"{where}: {error}"
        return direction

    def _read_loop(self, direction: Direction, node: tfproto.NodeDef, inputs: list[Ref],
                   held: dict[int, int | None], body: str) -> None:
        library = self.library
        where = f"loop {node.name!r}"
        nodes = library.nodes[body]
        arguments = [arg.name for arg in library.functions[body].signature.input_arg]
        returns = library.returns[body]
        if len(arguments) != len(inputs) or len(returns) != len(inputs):
            direction.problem = (f"{where}: {len(inputs)} inputs, but its body takes "
                                 f"{len(arguments)} and returns {len(returns)}; the graph is "
                                 "damaged")
            return
        position = {name: k for k, name in enumerate(arguments)}
        sequences: list[tuple[tfproto.NodeDef, int]] = []
        masks: list[tuple[tfproto.NodeDef, int]] = []
        writes: list[tuple[tfproto.NodeDef, int]] = []
        for item in nodes.values():
            if item.op == "TensorListGetItem" and item.input:
                source = library.ref(body, item.input[0])
                if source is not None and source.is_argument and source.node in position:
                    kind = attr_int(item, "element_dtype", 0)
                    (masks if kind == tfproto.DT_BOOL else sequences).append(
                        (item, position[source.node]))
            elif item.op == "TensorListSetItem" and len(item.input) >= 3:
                source = library.ref(body, item.input[0])
                if source is not None and source.is_argument and source.node in position:
                    writes.append((item, position[source.node]))
        lists = {k for _, k in sequences}
        if len(lists) != 1 or len({k for _, k in writes}) != 1:
            direction.problem = (f"{where}: its step reads {len(lists)} input sequence(s) and "
                                 f"writes {len({k for _, k in writes})} output sequence(s); a "
                                 "Keras RNN layer's loop reads one and writes one (a cell "
                                 "taking constants= or several inputs is not read)")
            return
        sequence = lists.pop()
        (write, written), = writes[:1]
        direction.masked = bool(masks)
        # The step counter: the index the sequence is read at, from 0 by 1.
        counter = library.ref(body, sequences[0][0].input[1]) if len(
            sequences[0][0].input) > 1 else None
        if counter is None or not counter.is_argument or counter.node not in position:
            direction.problem = f"{where}: its step reads the sequence at no step counter"
            return
        step = position[counter.node]
        start = library.constant(inputs[step])
        index = library.ref(body, write.input[1])
        direction.sequences = index is not None and index.is_argument and index.node == counter.node
        kinds = _loop_types(node, len(inputs))
        states = [k for k in range(len(inputs)) if kinds[k] in FLOAT_TYPES and held.get(k) is None]
        arrays = self.arrays(direction)
        hidden = arrays[1].shape[0] if arrays[1].ndim == 2 else 0
        gates = arrays[1].shape[1] // hidden if hidden and arrays[1].ndim == 2 else 0
        carried = 2 if gates == 4 else 1
        if len(states) not in (carried, carried + 1) or gates not in GATES:
            direction.problem = (f"{where}: its step carries {len(states)} float value(s) for "
                                 f"a cell whose recurrent kernel is {arrays[1].shape}; expected "
                                 f"{carried} (a Keras {GATES.get(gates, 'RNN')} layer's "
                                 "state), and one more with a mask")
            return
        halves = self._half_precision(body, [kinds[k] for k in range(len(inputs))
                                             if held.get(k) is None])
        if halves:
            direction.problem = f"{where}: {halves}"
            return
        output_ref = library.ref(body, write.input[2])
        new_states = [library.ref(body, returns[k]) for k in states[-carried:]]
        new_step = library.ref(body, returns[step])
        assert output_ref is not None
        if any(new is None for new in new_states):
            direction.problem = f"{where}: its body returns no new state"
            return

        def run(x: np.ndarray, values: dict[int, np.ndarray]) -> Evaluator:
            feeds = {Ref(body, item.name, "item", 0): x for item, _ in sequences}
            for item, _ in masks:  # every step valid: the step as it runs unmasked
                feeds[Ref(body, item.name, "item", 0)] = np.ones(
                    self._element(body, item, len(x)), dtype=bool)
            for k, value in values.items():
                feeds[Ref(body, arguments[k])] = value
            feeds[Ref(body, arguments[step])] = np.asarray(0, dtype=np.int32)
            return Evaluator(library, body, feeds, self.array, self.limit)

        probes: list[Probe] = []
        for x, values in _probe_inputs(arrays, states, hidden, carried):
            evaluate = run(x, values)
            if not probes:
                counted = evaluate(new_step) if new_step is not None else None
                if start is None or np.ndim(start) or int(start) != 0 or counted is None or \
                        np.ndim(counted) or int(counted) != 1:
                    direction.problem = (f"{where}: its step counter does not start at 0 and "
                                         "count by 1; the loop does not step through the "
                                         "sequence in order")
                    return
            got = [evaluate(output_ref), *[evaluate(new) for new in new_states if new]]
            probes.append((x, [values[k] for k in states[-carried:]], got))
        matched = self._match(direction, arrays, probes, [*new_states, output_ref])
        if isinstance(matched, str):
            direction.problem = f"{where}: {matched}"
            return
        direction.options = matched
        # Where the loop's sequence comes from, and where its output goes.
        self._ends(direction, node, inputs[sequence], Ref(direction.function, node.name,
                                                           "output", written))
        zeros = [self._is_zeros(inputs[k]) for k in states[-carried:]]
        if not all(zeros):
            direction.initial = "an initial state that is not zeros (initial_state=, or " \
                                "stateful=True)"

    def _element(self, body: str, item: tfproto.NodeDef, batch: int) -> tuple[int, ...]:
        """The shape of a list's element a ``TensorListGetItem`` reads (its ``element_shape``,
        -1 the batch), ``(batch, 1)`` where it does not say (Keras's masks)."""
        ref = self.library.ref(body, item.input[2]) if len(item.input) > 2 else None
        shape = self.library.constant(ref) if ref is not None else None
        if shape is None or shape.ndim != 1 or not 1 <= len(shape) <= 4 or any(
                int(d) < -1 or int(d) > 1 << 16 for d in shape):
            return (batch, 1)
        return tuple(batch if int(d) == -1 else int(d) for d in shape)

    def _is_zeros(self, ref: Ref) -> bool:
        """Whether a state is zeros: a ``Fill`` of 0, ``ZerosLike`` or a zero ``Const``,
        past ops that only reshape it."""
        library = self.library
        for _ in range(64):
            source, _, _ = library.back(ref, 0)
            node = library.node(source)
            if node is None:
                return False
            inputs = library.inputs(source.function, node)
            if node.op in ("ExpandDims", "Reshape", "Squeeze") and inputs:
                ref = inputs[0]
                continue
            if node.op == "ZerosLike":
                return True
            if node.op == "Fill" and len(inputs) == 2:
                value = library.constant(inputs[1])
                return value is not None and np.size(value) == 1 and \
                    float(np.ravel(value)[0]) == 0
            value = library.constant(source)
            return value is not None and not np.any(value)
        return False

    def _ends(self, direction: Direction, node: tfproto.NodeDef, sequence: Ref,
              output: Ref) -> None:
        """The direction's source sequence, reversal and output sequence (a loop's)."""
        library = self.library
        made, _, _ = library.back(sequence, 0)
        maker = library.node(made)
        if maker is None or maker.op != "TensorListFromTensor" or not maker.input:
            direction.problem = (f"loop {node.name!r}: its sequence list is not made from a "
                                 f"tensor ({maker.op if maker else made.describe()})")
            return
        start = library.ref(made.function, maker.input[0])
        assert start is not None
        direction.source, direction.source_axis, direction.flips = library.back(start, 0)
        direction.backward = direction.flips % 2 == 1
        stacked = [(consumer, function) for consumer, position, function, _, _, _ in
                   library.forward(output, 0) if consumer.op == "TensorListStack"
                   and position == 0]
        if stacked:
            consumer, function = stacked[0]
            direction.output = Ref(function, consumer.name, "tensor", 0)
            direction.output_axis = 0

    def _cudnn(self, function: str, node: tfproto.NodeDef, order: int) -> Direction | None:
        library = self.library
        inputs = library.inputs(function, node)
        if len(inputs) < 4:
            return None
        where = f"{node.op} node {node.name!r} ({function})"
        direction = self._cell(library.read_variables(function, [inputs[3]]), function, node,
                               order)
        if direction is None or direction.problem:
            return direction
        try:
            self._read_cudnn(direction, node, inputs)
        except LimitError:
            raise
        except Unevaluable as error:
            direction.problem = (f"{where}: its weights are built with {error.op} "
                                 f"({error.node}), which rnnport does not evaluate")
        except RnnportError as error:
            direction.problem = f"{where}: {error}"
        return direction

    def _read_cudnn(self, direction: Direction, node: tfproto.NodeDef,
                    inputs: list[Ref]) -> None:
        from .. import get

        where = f"{node.op} node {node.name!r}"
        mode = attr_text(node, "rnn_mode", "lstm")
        settings = {"direction": attr_text(node, "direction", "unidirectional"),
                    "input_mode": attr_text(node, "input_mode", "linear_input"),
                    "num_proj": str(attr_int(node, "num_proj", 0))}
        if mode not in ("lstm", "gru") or settings != {"direction": "unidirectional",
                                                      "input_mode": "linear_input",
                                                      "num_proj": "0"}:
            direction.problem = (f"{where}: rnn_mode {mode!r}, {settings}; Keras 3 writes an "
                                 "LSTM or GRU, unidirectional, linear_input, num_proj 0")
            return
        half = HALF_TYPES.get(attr_type(node, "T") or 0)
        if half:
            direction.problem = f"{where}: {_half_refusal(half, f'the op computes in {half}')}"
            return
        arrays = self.arrays(direction)
        options = {"reset_after": True} if mode == "gru" else {}
        try:
            model = keras_layers.read_weights(arrays, options, f"{self.where}, {direction.path}")
        except RnnportError as error:
            direction.problem = f"{where}: {error}"
            return
        if model.spec.cell != mode:
            direction.problem = (f"{where}: rnn_mode {mode!r}, but its variables are a "
                                 f"{model.spec.cell} cell's")
            return
        evaluate = Evaluator(self.library, direction.function, {}, self.array, self.limit)
        params = np.ravel(evaluate(inputs[3]))
        expected = np.asarray(get("cudnn").write(model.astype(np.float64)))
        if params.shape != expected.shape or not np.allclose(params, expected, rtol=0,
                                                              atol=TOLERANCE):
            direction.problem = (f"{where}: the cuDNN buffer it builds from the variables is "
                                 "not the buffer of the cell they hold; the layer computes "
                                 "something rnnport does not read")
            return
        direction.options = {"activation": "tanh", "recurrent_activation": "sigmoid",
                             **options}
        time_major = bool(node.attr.get("time_major") and node.attr["time_major"].value)
        axis = 0 if time_major or node.op != "CudnnRNNV3" else 1
        direction.source, direction.source_axis, flips = self.library.back(inputs[0], axis)
        direction.backward = flips % 2 == 1
        direction.output = Ref(direction.function, node.name, "output", 0)
        direction.output_axis = axis
        if node.op == "CudnnRNNV3" and len(inputs) > 4:
            lengths = self.library.node(self.library.back(inputs[4], 0)[0])
            direction.masked = lengths is None or lengths.op != "Fill"
        if not all(self._is_zeros(ref) for ref in inputs[1:3 if mode == "lstm" else 2]):
            direction.initial = "an initial state that is not zeros (initial_state=, or " \
                                "stateful=True)"

    # -- the cell a step computes ------------------------------------------------------

    def _match(self, direction: Direction, arrays: list[np.ndarray], probes: list[Probe],
               refs: list[Ref | None]) -> dict[str, Any] | str:
        """The read options under which rnnport's step of ``arrays`` equals what the loop
        computed in every probe (from its x and initial states); or why there are none."""
        gates = arrays[1].shape[1] // arrays[1].shape[0]
        candidates: list[dict[str, Any]]
        if gates == 1:
            candidates = [{"activation": name} for name in SIMPLE_ACTIVATIONS]
        else:
            pairs = [("tanh", "sigmoid"), *[(a, r) for a, r in product(ACTIVATIONS, ACTIVATIONS)
                                            if (a, r) != ("tanh", "sigmoid")]]
            candidates = [{"activation": a, "recurrent_activation": r} for a, r in pairs]
            if gates == 3 and len(arrays) == 2:
                candidates = [{**c, "reset_after": after} for after in (True, False)
                              for c in candidates]
        wide = [np.asarray(a, dtype=np.float64) for a in arrays]
        location = f"{self.where}, {direction.path}"
        matched = []
        for options in candidates:
            self.library.charge(sum(a.size for a in wide) // 64 + 1)
            model = keras_layers.read_weights(wide, {**options, "keras_version": "3"}, location)
            agreed = [_agrees(model, probe) for probe in probes[:1]]
            if agreed == [None]:
                break
            if agreed == [True] and all(_agrees(model, probe) for probe in probes[1:]):
                matched.append(options)
                if len(matched) > 1:
                    break
        if len(matched) == 1:
            return matched[0]
        if len(matched) > 1:
            return (f"its step matches both {matched[0]} and {matched[1]}; rnnport cannot tell "
                    "which the layer computes")
        kind = GATES.get(gates, "RNN")
        named = _named_simple(wide, probes) if gates == 1 else ""
        return (f"its step computes no Keras {kind} with activations rnnport computes "
                f"({', '.join(SIMPLE_ACTIVATIONS if gates == 1 else ACTIVATIONS)}); it "
                f"{named or self._applied(refs)}")

    def _applied(self, refs: list[Ref | None]) -> str:
        """What a step that no candidate matches applies, for its refusal: the functions no
        activation rnnport computes uses (``relu6``, a clip, ``x·sigmoid(x)``, ``Selu`` …),
        else every activation op it applies."""
        library = self.library
        nodes = [node for ref in library.slice([r for r in refs if r])
                 if (node := library.node(ref)) is not None]
        function = next((r.function for r in refs if r), "")
        culprits: dict[str, None] = {}
        clips = sorted({node.op for node in nodes if node.op in CLIP_OPS})
        for node in nodes:
            if node.op == "Relu6" and not self._shifted_by_three(function, node):
                culprits["relu6 (Relu6)"] = None
            elif node.op == "Mul":
                gated = self._self_gated(function, node)
                if gated:
                    culprits[gated] = None
            elif node.op in ACTIVATION_OPS and node.op not in KERAS_OPS:
                culprits[node.op] = None
        if clips:
            culprits[f"a clip ({', '.join(clips)}: relu(max_value=…), hard_tanh or "
                     "ops.clip)"] = None
        if culprits:
            return f"applies {listed(sorted(culprits))}, which no activation rnnport computes uses"
        applied = sorted({node.op for node in nodes if node.op in ACTIVATION_OPS})
        return f"applies {listed(applied)}" if applied else "applies no activation"

    def _shifted_by_three(self, function: str, node: tfproto.NodeDef) -> bool:
        """Whether a ``Relu6`` takes ``x + 3``: Keras 3's hard_sigmoid, relu6(x + 3) / 6."""
        inputs = self.library.inputs(function, node)
        added = self.library.node(inputs[0]) if inputs else None
        if added is None or added.op not in ("AddV2", "Add"):
            return False
        return any(value is not None and np.size(value) == 1 and float(np.ravel(value)[0]) == 3
                   for value in map(self.library.constant, self.library.inputs(function, added)))

    def _self_gated(self, function: str, node: tfproto.NodeDef) -> str:
        """The name of ``x·f(x)`` where a ``Mul`` is one (:data:`GATED`), else ``""``."""
        inputs = self.library.inputs(function, node)
        if len(inputs) != 2:
            return ""
        for x, other in (inputs, inputs[::-1]):
            gate = self.library.node(self._unscaled(other))
            if gate is None or gate.op not in GATED:
                continue
            argument = self.library.inputs(function, gate)[:1]
            for _ in range(3):  # past β·x (silu), x + 3 (hard_silu), softplus (mish)
                if not argument or argument[0] == x:
                    break
                inner = self.library.node(argument[0])
                if inner is None or inner.op not in ("Mul", "AddV2", "Add", "Softplus"):
                    argument = []
                    break
                argument = [ref for ref in self.library.inputs(function, inner)
                            if self.library.constant(ref) is None][:1]
            if argument and argument[0] == x:
                return GATED[gate.op]
        return ""

    def _unscaled(self, ref: Ref) -> Ref:
        """``ref`` past multiplications and divisions by constants."""
        for _ in range(3):
            node = self.library.node(ref)
            if node is None or node.op not in ("Mul", "RealDiv"):
                break
            variable = [r for r in self.library.inputs(ref.function, node)
                        if self.library.constant(r) is None]
            if len(variable) != 1:
                break
            ref = variable[0]
        return ref

    def _half_precision(self, body: str, kinds: list[int]) -> str:
        """Why a loop computing in float16 or bfloat16 (a ``mixed_float16``, ``float16`` …
        dtype policy) is not read, or ``""``."""
        cast = {HALF_TYPES[kind] for node in self.library.nodes[body].values()
                if node.op == "Cast" and (kind := attr_type(node, "DstT") or 0) in HALF_TYPES}
        carried = {HALF_TYPES[kind] for kind in kinds if kind in HALF_TYPES}
        if not cast and not carried:
            return ""
        half = sorted(cast | carried)[0]
        return _half_refusal(half, " and ".join(part for part in (
            f"its state and sequence are {half}" if carried else "",
            f"it casts its weights to {half}" if cast else "") if part))

    # -- layers and stacks -------------------------------------------------------------

    def _layers(self) -> list[KerasLayer]:
        directions = [d for d in self.directions if not d.problem]
        layers: list[KerasLayer] = []
        paired: set[int] = set()
        forward_ends = {id(d): self.library.forward(d.output, d.output_axis) if d.output
                        else [] for d in directions}
        for first in directions:
            if id(first) in paired or first.backward:
                continue
            for second in directions:
                if id(second) in paired or not second.backward or second is first or \
                        first.source != second.source or first.source is None:
                    continue
                merge = _meeting(forward_ends[id(first)], forward_ends[id(second)])
                if merge is None:
                    continue
                paired.update({id(first), id(second)})
                layers.append(self._bidirectional(first, second, merge))
                break
        for direction in self.directions:
            if id(direction) in paired:
                continue
            problem = direction.problem
            if not problem and direction.backward:
                problem = self._go_backwards(direction)
            layers.append(KerasLayer(direction.path, [direction],
                                     direction.output if direction.sequences else None,
                                     direction.output_axis, problem))
        xla = sorted({node.op for nodes in self.library.nodes.values()
                      for node in nodes.values() if node.op in XLA_OPS})
        for holder, ids in self._unlooped().items():
            path = holder.rpartition("/")[0] or holder or "(unnamed)"
            held = ", ".join(f"{self.names[i].rpartition('/')[2]} {self.shape(i)}" for i in ids)
            why = (f"the serving functions compute with {', '.join(xla)}: a Keras 3 model "
                   "exported from the JAX backend, whose computation is serialized StableHLO "
                   "inside that op, which rnnport does not read. Export it from the TensorFlow "
                   "backend (KERAS_BACKEND=tensorflow), or read the layer's get_weights() with "
                   "fmt='keras' and the options its config gives" if xla else
                   "a layer built with unroll=True (each step spelled out), which rnnport does "
                   "not read; rebuild the layer with unroll=False (the default) and export it "
                   "again")
            layers.append(KerasLayer(path, [], None, rank=min(self.rank.get(i, 0) for i in ids),
                                     problem=f"{path}: no loop of the serving functions steps "
                                             f"its cell ({held}): {why}"))
        for layer in layers:
            if layer.directions:
                layer.rank = min([self.rank.get(node_id, len(self.rank)) for direction in
                                  layer.directions for node_id in direction.variables.values()],
                                 default=len(self.rank))
        layers.sort(key=lambda layer: layer.rank)
        # Paths that are not unique (a subclassed model's layers built in its call are all
        # named by the model's path): numbered in the model's order, so layer= tells them apart.
        paths: dict[str, list[KerasLayer]] = {}
        for layer in layers:
            paths.setdefault(layer.path, []).append(layer)
        for same in paths.values():
            if len(same) > 1:
                for number, layer in enumerate(same):
                    layer.path = f"{layer.path}[{number}]"
        return layers

    def _go_backwards(self, direction: Direction) -> str:
        siblings = [d for d in self.directions if d is not direction and d.source == direction.source
                    and d.path.rpartition("/")[0] == direction.path.rpartition("/")[0]]
        if siblings:
            return (f"{direction.path}: one direction of a Bidirectional layer whose outputs are "
                    "not concatenated (merge_mode=None: returned apart); rnnport's bidirectional "
                    "output concatenates forward and backward. "
                    + _concat_advice("the two outputs are y[..., :H] and y[..., H:]"))
        return (f"{direction.path}: go_backwards=True outside a Bidirectional layer: it returns "
                "the sequence reversed in time, which no other format does. Reverse the time "
                "axis of x yourself and read a layer built with go_backwards=False")

    def _bidirectional(self, first: Direction, second: Direction,
                       merge: tuple[tfproto.NodeDef, str, list[tuple[int, int, int]]]) -> KerasLayer:
        node, function, arrived = merge
        parents = [d.path.rpartition("/")[0] for d in (first, second)]
        path = parents[0] if parents[0] == parents[1] and parents[0] else \
            f"{first.path}+{second.path}"
        (first_at, first_flips, axis), (second_at, second_flips, _) = arrived
        problem, mode = "", ""
        both = first.sequences and second.sequences
        if node.op == "ConcatV2":
            concat_axis = self.library.constant(self.library.inputs(function, node)[-1])
            last = concat_axis is not None and np.size(concat_axis) == 1 and \
                int(np.ravel(concat_axis)[0]) in (-1, 2 if both else 1)
            ordered = first_at < second_at and (not both or (
                first_flips % 2 == 0 and second_flips % 2 == 1))
            if not last or not ordered:
                problem = (f"{path}: its directions' outputs meet in {node.op} {node.name!r} "
                           "other than as Keras's concatenation (forward then backward in the "
                           "input's time order, along the last axis)")
        else:
            mode = {"AddV2": "sum", "Add": "sum", "Mul": "mul"}.get(node.op, "")
            if mode == "sum" and any(c.op in ("RealDiv", "Div", "Mul") for c, *_ in
                                     self.library.forward(Ref(function, node.name, "z", 0),
                                                          axis, limit=4)):
                mode = "ave"
            described = f"merge_mode={mode!r}" if mode else f"outputs combined by {node.op}"
            problem = (f"{path}: a Bidirectional layer with {described}; rnnport's "
                       "bidirectional output concatenates forward and backward "
                       "(merge_mode='concat', as cuDNN, PyTorch and ONNX do). "
                       + _concat_advice(f"{described} gives " + MERGED.get(
                           mode, f"{node.op} of y[..., :H] and y[..., H:]")))
        if not problem and first.options != second.options:
            problem = (f"{path}: its forward and backward layers compute different cells "
                       f"({first.options} and {second.options}, read from their loops); a "
                       "bidirectional network in rnnport has one cell for both directions. Read "
                       "each direction's arrays with fmt='keras'")
        output = Ref(function, node.name, "output", 0) if both and not problem else None
        return KerasLayer(path, [first, second], output, axis, problem)

    def _origin(self, direction: Direction) -> str:
        """The tensor a direction's sequence comes from, in words."""
        source = direction.source
        if source is None:
            return "the layer's input"
        if source.is_argument:
            return f"the model's input (argument {source.node!r} of {source.function})"
        return f"tensor {source.node}:{source.index} of {source.function}"

    def _unlooped(self) -> dict[str, list[int]]:
        """Cells whose kernel and recurrent kernel no loop or cuDNN op reads: holder → the
        variables."""
        holders: dict[str, dict[str, int]] = {}
        for node_id in sorted(self.bound - self.stepped):
            holder, _, role = self.names[node_id].rpartition("/")
            holders.setdefault(holder, {})[role] = node_id
        return {holder: [roles[role] for role in ROLES if role in roles]
                for holder, roles in sorted(holders.items())
                if {"kernel", "recurrent_kernel"} <= set(roles)}

    def _stacks(self) -> list[list[KerasLayer]]:
        """Chains of layers each taking the previous one's whole output (see the docstring)."""
        by_output = {layer.output: layer for layer in self.layers
                     if layer.output is not None and not layer.problem}
        before: dict[int, KerasLayer] = {}
        followers: dict[int, int] = {}
        for layer in self.layers:
            if layer.problem or not layer.directions:
                continue
            previous = self._previous(layer, by_output)
            if previous is not None:
                before[id(layer)] = previous
                followers[id(previous)] = followers.get(id(previous), 0) + 1
        out: list[list[KerasLayer]] = []
        placed: set[int] = set()
        for layer in self.layers:
            if id(layer) in placed:
                continue
            previous = before.get(id(layer))
            if previous is not None and followers.get(id(previous)) == 1:
                continue  # placed after its predecessor
            chain = [layer]
            placed.add(id(layer))
            while followers.get(id(chain[-1])) == 1:
                after = next(each for each in self.layers if before.get(id(each)) is chain[-1])
                chain.append(after)
                placed.add(id(after))
            out.append(chain)
        return out

    def _previous(self, layer: KerasLayer,
                  by_output: Mapping[Ref, KerasLayer]) -> KerasLayer | None:
        """The layer whose whole output sequence ``layer`` takes (time axis where it was)."""
        sources = {(d.source, d.source_axis) for d in layer.directions}
        if len(sources) != 1:
            return None
        source, axis = sources.pop()
        previous = by_output.get(source) if source is not None else None
        if previous is None or previous is layer or previous.output_axis != axis:
            return None
        return previous

    # -- reading -----------------------------------------------------------------------

    def kind(self, layer: KerasLayer) -> str:
        if not layer.directions:
            return "unrolled recurrent layer"
        variables = layer.directions[0].variables
        shape = self.shape(variables["recurrent_kernel"]) if variables else ()
        wrapped = "Bidirectional " if len(layer.directions) == 2 else ""
        if len(shape) != 2:
            return f"{wrapped}ConvLSTM{len(shape) - 2}D" if len(shape) in (3, 4, 5) else \
                f"{wrapped}recurrent layer"
        gates = shape[1] // shape[0] if shape[0] else 0
        return f"{wrapped}{GATES.get(gates, 'RNN')}({shape[0]})"

    def summary(self, stack: list[KerasLayer]) -> str:
        return " → ".join(f"{layer.path}: {self.kind(layer)}" for layer in stack)

    def listing(self) -> str:
        return "\n".join(f"  - layer={stack[0].path!r}: {self.summary(stack)}"
                         for stack in self.stacks)

    def refuse_empty(self) -> None:
        if self.stacks:
            return
        held = [f"{holder} ({', '.join(roles)})" for holder, roles in self._others().items()]
        loops = sum(1 for function in self.library.nodes.values()
                    for node in function.values() if node.op in LOOPS)
        raise FormatError(
            f"{self.where}: no recurrent layer found in this Keras 3 SavedModel; expected a loop "
            "of its serving function reading a kernel and a recurrent_kernel variable (a Keras "
            f"LSTM, GRU or SimpleRNN). It holds {len(self.bound)} variable(s) the functions "
            f"read{': ' + '; '.join(held[:8]) if held else ''}"
            f"{f' … ({len(held)} layers in all)' if len(held) > 8 else ''}, and {loops} "
            "loop(s).")

    def _others(self) -> dict[str, list[str]]:
        """The variables no recurrent direction reads, by layer (in the model's order):
        path → ``role (shape)``."""
        unrolled = {i for ids in self._unlooped().values() for i in ids}
        groups: dict[str, list[str]] = {}
        for node_id in sorted(self.bound - self.stepped - unrolled,
                              key=lambda i: (self.rank.get(i, len(self.rank)), i)):
            holder, _, role = self.names[node_id].rpartition("/")
            groups.setdefault(holder or role, []).append(f"{role} {self.shape(node_id)}")
        return groups

    def choose(self, choice: Any) -> list[KerasLayer]:
        self.refuse_empty()
        layers = [layer for stack in self.stacks for layer in stack]
        if choice is None:
            if len(self.stacks) == 1:
                chosen = self.stacks[0]
            else:
                raise AmbiguousSourceError(
                    f"{self.where}: holds {len(self.stacks)} separate recurrent stacks; pass "
                    "layer= to pick one (or layer=[…] several layers that chain, in the "
                    f"model's order):\n{self.listing()}")
        elif isinstance(choice, str):
            layer = self._find(layers, choice)
            chosen = next(stack for stack in self.stacks if layer in stack)
        elif isinstance(choice, (list, tuple)) and choice and all(isinstance(c, str)
                                                                   for c in choice):
            chosen = [self._find(layers, name) for name in choice]
            outputs = {layer.output: layer for layer in chosen if layer.output is not None}
            for first, second in pairwise(chosen):
                if self._previous(second, outputs) is not first:
                    raise FormatError(
                        f"{self.where}: layer={list(choice)!r} does not form one stack: "
                        f"{second.path} does not take {first.path}'s output (in the serving "
                        "function's graph); expected layers each taking the previous one's "
                        f"whole output, in call order. The stacks here:\n{self.listing()}")
        else:
            raise FormatError(f"read(fmt='tf2'): layer={choice!r}; expected a layer's path "
                              f"such as {self.stacks[0][0].path!r}, its name, or a list of "
                              "them (layers that chain, in call order).")
        for layer in chosen:
            if layer.problem:
                raise UnsupportedFeatureError(f"{self.where}, {layer.path}: {_tail(layer)}.")
        return chosen

    def _find(self, layers: list[KerasLayer], wanted: str) -> KerasLayer:
        name = wanted.strip("/")
        for layer in layers:
            if name in (layer.path, layer.name) or layer.path.endswith(f"/{name}"):
                return layer
        hint = close_matches(name, [layer.path for layer in layers] +
                             [layer.name for layer in layers])
        raise FormatError(f"{self.where}: no recurrent layer {wanted!r}.{hint} The stacks "
                          f"here:\n{self.listing()}")

    def read(self, chosen: list[KerasLayer], options: Mapping[str, Any]) -> list[Model]:
        out: list[Model] = []
        for layer in chosen:
            location = f"{self.where}, {layer.path}"
            found = layer.directions[0].options
            for key in ("activation", "recurrent_activation", "reset_after"):
                if key in options and key in found and options[key] != found[key]:
                    raise FormatError(f"{location}: option {key}={options[key]!r} contradicts "
                                      f"the layer's loop, which computes {key}={found[key]!r}; "
                                      "drop the option.")
            version = options.get("keras_version")
            if version is not None and "hard_sigmoid" in found.values() and \
                    keras_layers.keras_major(version) != 3:
                raise FormatError(f"{location}: keras_version={version!r}, but the layer's loop "
                                  "computes Keras 3's hard_sigmoid (relu6(x + 3) / 6); drop "
                                  "the option.")
            arrays = [array for direction in layer.directions for array in self.arrays(direction)]
            out.append(keras_layers.read_weights(arrays, {**found, "keras_version": "3"},
                                                 location))
        return out

    # -- TensorFlow running it ---------------------------------------------------------

    def matching(self, model: Model) -> list[KerasLayer] | None:
        """The layers (consecutive in one stack) that ``model`` was read from."""
        wanted = [(layer.spec.cell, layer.spec.input_size, layer.spec.hidden_size,
                   layer.spec.num_directions) for layer in model.layers()]
        for stack in self.stacks:
            for start in range(len(stack) - len(wanted) + 1):
                run = stack[start:start + len(wanted)]
                if not any(layer.problem for layer in run) and [
                        self._facts(layer) for layer in run] == wanted:
                    return run
        return None

    def _facts(self, layer: KerasLayer) -> tuple[str, int, int, int]:
        shape = self.shape(layer.directions[0].variables["kernel"])
        recurrent = self.shape(layer.directions[0].variables["recurrent_kernel"])
        gates = recurrent[1] // recurrent[0] if len(recurrent) == 2 and recurrent[0] else 0
        cell = {4: "lstm", 3: "gru"}.get(gates) or \
            f"rnn_{layer.directions[0].options.get('activation', 'tanh')}"
        return cell, shape[0] if shape else 0, recurrent[0] if recurrent else 0, \
            len(layer.directions)

    def whole(self, chosen: list[KerasLayer]) -> bool:
        """Whether the model's serving function computes ``chosen`` alone: the first takes the
        function's input, and its one output is the last one's whole output sequence."""
        first, last = chosen[0].directions[0], chosen[-1]
        if first.source is None or not first.source.is_argument or last.output is None or \
                not any(chosen == stack for stack in self.stacks):
            return False
        function = first.source.function
        arguments = self.library.functions[function].signature.input_arg
        returns = self.library.returns[function]
        if not arguments or arguments[0].name != first.source.node or len(returns) != 1:
            return False
        returned = self.library.ref(function, returns[0])
        if returned is None:
            return False
        found, axis, flips = self.library.back(returned, 1)
        return found == last.output and axis == last.output_axis and flips % 2 == 0

    def rebuilt(self, chosen: list[KerasLayer]) -> list[dict[str, Any]]:
        """The Keras 3 layers of a Sequential computing ``chosen``, with the checkpoint keys of
        their weights."""
        out = []
        for layer in chosen:
            direction = layer.directions[0]
            cls, _, _, directions = self._facts(layer)
            config: dict[str, Any] = {"units": self._facts(layer)[2], "return_sequences": True,
                                      "use_bias": "bias" in direction.variables,
                                      **direction.options}
            out.append({"class": {"lstm": "LSTM", "gru": "GRU"}.get(cls, "SimpleRNN"),
                        "config": config, "bidirectional": directions == 2,
                        "input_size": self._facts(layer)[1],
                        "keys": [self.keys[d.variables[role]] for d in layer.directions
                                 for role in ROLES if role in d.variables]})
        return out

    # -- what inspect says ---------------------------------------------------------------

    def notes(self, chosen: list[KerasLayer]) -> list[str]:
        out = ["a Keras 3 SavedModel: no Keras layer objects; its layers were found from the "
               "variables' Keras paths and the serving function's graph (each loop's step "
               "evaluated: activations and reset_after come from it)."]
        picked = {id(layer) for layer in chosen}
        for stack in self.stacks:
            if not picked & {id(layer) for layer in stack}:
                problems = [layer for layer in stack if layer.problem]
                why = f" ({_tail(problems[0])})" if problems else ""
                out.append(f"another recurrent stack, layer={stack[0].path!r}: "
                           f"{self.summary(stack)}; not read{why}.")
        for layer in chosen:
            found = layer.directions[0].options
            told = ", ".join(f"{key}={value!r}" for key, value in found.items())
            how = "its cuDNN op (exported on a GPU)" if layer.directions[0].cudnn else \
                "its loop's step"
            out.append(f"{layer.path}: {self.kind(layer)}, {told}, read from {how}.")
            if any(d.masked for d in layer.directions):
                out.append(f"{layer.path}: the model masks this layer's input (a Masking layer "
                           "or mask_zero=True): masked steps keep the state; rnnport's forward "
                           "runs every step unless lengths= gives each sequence's length "
                           "(right-padded batches).")
            if not layer.directions[0].sequences:
                out.append(f"{layer.path}: returns its last step alone (return_sequences=False); "
                           "rnnport's forward returns every step: the layer's output is y[:, -1]"
                           + (", the backward half at y[:, 0] (where the backward direction "
                              "ends)" if len(layer.directions) == 2 else "") + ".")
            if layer.directions[0].calls > 1:
                out.append(f"{layer.path}: called {layer.directions[0].calls} times in the "
                           "serving function (a shared layer); its stack is the one of its "
                           "first call.")
            for direction in layer.directions:
                if direction.flips > 1 and not direction.backward:
                    out.append(f"{direction.path}: the network's input x is "
                               f"{self._origin(direction)}, which the layer reads reversed in "
                               f"time {_times(direction.flips)} on the way (a time flip before "
                               "it, such as Lambda(ops.flip), and its go_backwards=True cancel): "
                               "the network runs forward over that tensor, and its y is in that "
                               "tensor's time order.")
                if direction.initial:
                    out.append(f"{direction.path}: takes {direction.initial}; rnnport's "
                               "forward starts from zeros unless state= is given.")
        seeds = []
        recurrent = {layer.path for layer in self.layers} | {
            d.path for layer in self.layers for d in layer.directions}
        for holder, held in self._others().items():
            if all(item.startswith("seed_generator_state ") for item in held):
                seeds.append(holder)
                continue
            if holder in recurrent:
                out.append(f"{holder}: the recurrent layer's own state variables "
                           f"({listed(held)}: stateful=True), the state it was saved with; not "
                           "read.")
                continue
            out.append(f"{holder}: a layer with weights that is not recurrent ({listed(held)}); "
                       "not read (rnnport reads the recurrent layers).")
        if seeds:
            out.append(f"{listed(seeds)}: random-number state (seed_generator_state, for "
                       "dropout); not read.")
        return out


FLOAT_TYPES = frozenset({tfproto.DT_FLOAT, tfproto.DT_DOUBLE, tfproto.DT_HALF,
                         tfproto.DT_BFLOAT16})


def _called(node: tfproto.NodeDef, key: str) -> str | None:
    attr = node.attr.get(key)
    return attr.value.name if attr is not None and isinstance(attr.value, tfproto.NameAttrList) \
        else None


def _loop_types(node: tfproto.NodeDef, count: int) -> list[int]:
    attr = node.attr.get("T")
    if attr is None or not isinstance(attr.value, tfproto.AttrList) or \
            len(attr.value.type) != count:
        raise FormatError(f"While node {node.name!r}: its T attribute does not list the types of "
                          f"its {count} inputs; the graph is damaged.")
    return list(attr.value.type)


def _meeting(first: list[tuple[tfproto.NodeDef, int, str, int, int, Ref]],
             second: list[tuple[tfproto.NodeDef, int, str, int, int, Ref]]
             ) -> tuple[tfproto.NodeDef, str, list[tuple[int, int, int]]] | None:
    """The first node both directions' outputs reach (past data-moving ops, and past
    Keras's ``outputs[-1]`` for return_sequences=False): (node, its function, per direction
    (input position, reversals, time axis))."""
    def ends(found: list[tuple[tfproto.NodeDef, int, str, int, int, Ref]]
             ) -> dict[tuple[str, str], tuple[int, int, int]]:
        return {(function, node.name): (position, flips, axis)
                for node, position, function, axis, flips, _ in found}

    mine, theirs = ends(first), ends(second)
    for node, _, function, *_ in first:
        key = (function, node.name)
        if key in theirs and mine[key][0] != theirs[key][0]:
            return node, function, [mine[key], theirs[key]]
    # return_sequences=False: each output's last step (a StridedSlice) meets the other's.
    return None


# What a Bidirectional's merge_mode computes from rnnport's concatenated y (H: units).
MERGED = {"sum": "y[..., :H] + y[..., H:]", "mul": "y[..., :H] * y[..., H:]",
          "ave": "(y[..., :H] + y[..., H:]) / 2"}


def _times(count: int) -> str:
    return {1: "once", 2: "twice"}.get(count, f"{count} times")


def _concat_advice(merged: str) -> str:
    return ("Export the model with this layer built with merge_mode='concat' and the same "
            f"weights: rnnport reads that, and {merged} of its y (H = units)")


def _half_refusal(half: str, how: str) -> str:
    """Why a layer Keras computes in ``half`` (float16, bfloat16) is not read."""
    return (f"Keras computes this layer in {half} ({how}: a dtype policy such as "
            f"'mixed_{half}' or '{half}'), and rnnport in float32 or float64; the outputs would "
            f"differ by {half}'s rounding (about {'1e-3' if half == 'float16' else '1e-2'}), "
            "not agree within 1e-5. Build the model with the float32 dtype policy "
            "(keras.config.set_dtype_policy('float32'), or dtype='float32' on the layer), load "
            "the weights into it and export it again")


def _probe_inputs(arrays: list[np.ndarray], states: list[int], hidden: int,
                  carried: int) -> list[tuple[np.ndarray, dict[int, np.ndarray]]]:
    """The inputs a loop's step is evaluated on: x and every float state the loop carries
    (``states``, h the ``carried``-th from the end), uniform in ±1, then scaled so that
    ``x·kernel + h·recurrent_kernel`` reaches each of :data:`PROBE_REACH` in every gate,
    above and below 0 where it can."""
    kernel, recurrent = (np.asarray(a, dtype=np.float64) for a in arrays[:2])
    rng = np.random.default_rng(len(arrays[0].ravel()))
    # Kernels that fit no cell are refused when read; until then they are probed unscaled.
    fits = kernel.ndim == 2 and kernel.shape[1] == recurrent.shape[1] == \
        recurrent.shape[1] // hidden * hidden
    out = []
    for reach in (None, *PROBE_REACH):
        batch = PROBE_BATCH if reach is None else WIDE_BATCH
        x = rng.uniform(-1.0, 1.0, (batch, kernel.shape[0]))
        values = {k: rng.uniform(-1.0, 1.0, (batch, hidden)) for k in states}
        scale = 1.0
        if reach is not None and fits:
            gates = (x @ kernel + values[states[-carried]] @ recurrent).reshape(
                batch, recurrent.shape[1] // hidden, hidden)
            top, bottom = gates.max(axis=(0, 2)), -gates.min(axis=(0, 2))
            both = np.where(np.minimum(top, bottom) > 0, np.minimum(top, bottom),
                            np.maximum(top, bottom))
            spread = float(np.min(both))
            if spread > 0 and np.isfinite(spread):
                scale = min(max(reach / spread, 1.0), MAX_SCALE)
        out.append((x * scale, {k: value * scale for k, value in values.items()}))
    return out


def _agrees(model: Model, probe: Probe) -> bool | None:
    """Whether one step of ``model`` computes what the loop did in ``probe``; None where
    the shapes differ."""
    x, initial, got = probe
    state: Any = tuple(s[None] for s in initial) if len(initial) == 2 else initial[0][None]
    y, final = model.forward(x[:, None, :], state=state)
    finals = list(final) if isinstance(final, tuple) else [final]
    mine = [y[:, 0], *[f[0] for f in finals]]
    if [np.shape(value) for value in mine] != [np.shape(value) for value in got]:
        return None
    return all(np.allclose(a, b, rtol=TOLERANCE, atol=TOLERANCE)
               for a, b in zip(mine, got, strict=True))


# Keras activations a SimpleRNN may apply that rnnport's simple RNN cells do not, for its
# refusal to name.
SIMPLE_NAMED: dict[str, Any] = {
    "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "linear": lambda v: v,
    "softsign": lambda v: v / (1 + np.abs(v)), "softplus": lambda v: np.logaddexp(0, v),
    "elu": lambda v: np.where(v > 0, v, np.expm1(np.minimum(v, 0))),
    "hard_sigmoid": lambda v: np.clip(v / 6 + 0.5, 0, 1), "relu6": lambda v: np.clip(v, 0, 6),
    "hard_tanh": lambda v: np.clip(v, -1, 1), "silu": lambda v: v / (1 + np.exp(-v)),
    "hard_silu": lambda v: v * np.clip(v / 6 + 0.5, 0, 1),
    "leaky_relu": lambda v: np.where(v > 0, v, 0.2 * v),
    "selu": lambda v: 1.0507009873554805 * np.where(
        v > 0, v, 1.6732632423543772 * np.expm1(np.minimum(v, 0))),
    "exponential": np.exp, "mish": lambda v: v * np.tanh(np.logaddexp(0, v)),
}


def _named_simple(arrays: list[np.ndarray], probes: list[Probe]) -> str:
    """The Keras activation a simple RNN's step applies to x·kernel + h·recurrent + bias in
    every probe, named where it is one rnnport does not compute for a simple RNN."""
    with np.errstate(all="ignore"):
        for name, function in SIMPLE_NAMED.items():
            if all(np.allclose(function(x @ arrays[0] + initial[0] @ arrays[1] + (
                    arrays[2] if len(arrays) > 2 else 0)), got[1], rtol=TOLERANCE,
                               atol=TOLERANCE) for x, initial, got in probes):
                return f"applies activation={name!r} (a SimpleRNN computes 'tanh' or 'relu' here)"
    return ""


def _model_order(objects: tfproto.SavedObjectGraph) -> dict[int, int]:
    """Each variable's place in the model's order: as first reached from the root, children in
    order (a ``model.export``'s root lists ``variables`` first, in ``model.variables`` order,
    which is its layers' order; ``tf.saved_model.save`` keeps a model's ``_layers`` in order)."""
    rank: dict[int, int] = {}
    seen = {0}
    queue = deque([0])
    while queue:
        node_id = queue.popleft()
        node = objects.nodes[node_id]
        if node.kind == "variable":
            rank[node_id] = len(rank)
        for child in node.children:
            if 0 <= child.node_id < len(objects.nodes) and child.node_id not in seen:
                seen.add(child.node_id)
                queue.append(child.node_id)
    return rank


def _common_path(paths: list[str]) -> str:
    """The longest path every one of ``paths`` is under."""
    split = [path.split("/") for path in paths]
    common = []
    for pieces in zip(*split, strict=False):
        if len(set(pieces)) != 1:
            break
        common.append(pieces[0])
    return "/".join(common) or paths[0]


def _tail(layer: KerasLayer) -> str:
    """A layer's problem without its leading path (said already)."""
    prefix = f"{layer.path}: "
    return layer.problem[len(prefix):] if layer.problem.startswith(prefix) else layer.problem
