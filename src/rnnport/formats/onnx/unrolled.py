"""Recurrent networks a graph computes step by step, with elementary operators instead of
an ``LSTM``, ``GRU`` or ``RNN`` node: what PyTorch's default (dynamo) exporter writes for
``nn.RNN`` (unrolled over the example's time steps) and for ``nn.LSTMCell``, ``nn.GRUCell``
and ``nn.RNNCell`` (one step, or one per step of a Python loop).

**Finding the weights.** A *linear* is ``MatMul(a, K)``, plus an ``Add`` of a 1-D constant
when one follows, or ``Gemm(a, B, C)`` (``alpha = beta = 1``, no ``transA``), where ``a``
depends on the graph's inputs and ``K``, ``B``, ``C`` are constants (see :mod:`.graph` for
what counts as one). Only the main graph is searched.

* *A sequence* (``nn.RNN``): each layer and direction multiplies its whole input by one
  matrix ``W`` (I, H), and each step multiplies the state by one square matrix ``U``
  (H, H), adds the product to that step's slice of the input's product and applies
  ``Tanh`` or ``Relu``. Following the slice back through the slicing nodes reaches the
  direction's ``W``; a slice with a negative step on the way marks the backward direction.
  Layers are told apart by what their ``W`` multiplies, in the graph's order, and a layer
  that does not take the layer before's outputs starts another network.
* *A step* (a cell): two linears of one width G·H whose results meet within a few nodes,
  one of the input ``x``, one of the state ``h`` with H rows; G = 4, 3 or 1 says LSTM, GRU
  or simple RNN, computed as PyTorch's cells compute them. A cell stepped in a loop gives
  the same step many times, read once. A loop that starts from a zero state made inside
  the model has no state product in its first step (the exporter folded ``0·Rᵀ + b_hh``
  into a constant); every later step has one, and is read. When the input and the state
  are of one size, the state's product is the one that takes what the cell's own steps
  computed (h′ feeds back); in a single step, the graph's inputs say which in PyTorch's
  order, ``(x, h)`` / ``(x, (h, c))``.
* *A pair of cells*: two cells of one kind and size, one stepped over a sequence and one
  over it reversed (``torch.flip``, a reversed slice, or steps taken from the last index
  down: told by the values the steps take, not by how the graph reverses them), whose
  outputs the graph joins into one bidirectional network's ``y`` (forward half first, the
  backward half in time order, time- or batch-major): read as that bidirectional network.
  One cell stepped both ways so is a bidirectional network whose directions hold the same
  weights. Why two such cells are not one network (joined backward half first, stacked,
  added, of different sizes) is said where they are listed.

**Checking them.** Shapes do not prove that a graph computes the network its weights
suggest, so the reader runs the graph in NumPy with random values in place of what the
network is fed (its input and state; the operators it runs are :data:`RUN_OPS`, others are
skipped with what depends on them) and requires one of the graph's values to equal
rnnport's output for the network read, within :data:`TOLERANCE`; otherwise it refuses.
A step is run from the graph's own state where the run computes it; where it cannot (a
convolutional front end before the loop), from random ``h`` and, fed where the step takes
it, random ``c``; an LSTM's ``c`` is looked for first among the values the step takes
near its state product. A cell stepped in a loop is then checked over the whole
sequence, one step after the other in rnnport's forward: each step must apply the cell
once (not ``cell(x, cell(x, h))``), to an input not computed from the cell's own outputs,
from the state the step before computed (no zoneout, residual or average between steps).
A loop's first state is zeros, or a state the graph holds (a learned ``h0.expand(…)``),
which ``notes`` then names: rnnport's ``forward`` starts from the state it is given; a
non-zero first state whose product the exporter folded away is refused. A cell whose
steps make two loops from zeros is the one-cell bidirectional network above, or refused.
A pair is run whole: random values fed where both cells' steps take their inputs from
(through slicing and reshaping, and the graph inputs a front end computes that from),
zeros to the graph's other inputs (a state fed to the model: rnnport's ``forward`` starts
from zeros), and the bidirectional network's ``y`` must be among the values. The weights are the stored
constants, transposed back: bit-exact.

**What the search may cost.** Products are paired through the nodes near their results,
never pair by pair; a step's check runs only the nodes within :data:`STEP_CONE` of its two
products and what those take, not the whole graph (the whole-sequence and pair checks run
it all, once for the cells together and once more per cell whose first state is fed);
every node walked, pair found and node run counts against the ``work`` limit (a node run
:data:`RUN_STEPS` steps, a product's multiply-adds one step per
:data:`PRODUCTS_PER_STEP`), and so does every run of a network read to compare with the
graph (each loop step, each first state tried, each pair's directions) and every value it
is compared with; every value run counts against the ``expansion`` budget, and each
network built (its matrices copied) is paid for first.

**Several networks** in one graph are an :class:`~rnnport.errors.AmbiguousSourceError`
listing them; ``node=`` with the name (or output) of one of a network's ``MatMul`` /
``Gemm`` nodes picks it. A pair's cells are each picked by their own nodes (the cell
alone, stepping forward), the pair by the node joining their outputs.

**Refused, with the reason:** a cell exported without its state (PyTorch folds the zero
state's product into a constant, so ``weight_hh`` is not in the file), a sequence of one
time step (no state is ever multiplied), a loop that is not the plain recurrence of its
cell (listed, and refused when picked), anything the check does not confirm.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...activations import function
from ...budget import Meter
from ...errors import AmbiguousSourceError, FormatError, LimitError, RnnportError, UnsupportedFeatureError
from ...model import RNN, Model, stack
from ...spec import Spec
from .graph import FOLDABLE, MAX_DEPTH, Scope, attributes, exhausted, fold

__all__ = ["MAX_FED", "RUN_OPS", "TOLERANCE", "Stepped", "declared_shapes", "find",
           "input_feeds", "listing", "read", "run"]

RUN_OPS = (*FOLDABLE, "Constant", "MatMul", "Gemm", "Sigmoid", "Tanh", "Relu", "Neg",
           "SplitToSequence", "SequenceAt", "ConstantOfShape", "Dropout", "Flatten", "Equal",
           "Where")
TOLERANCE = 1e-4  # of the largest output value, at least 1: float32 in both
PASS_OPS = {"Squeeze", "Unsqueeze", "Reshape", "Identity", "Cast", "Slice", "Gather",
            "Transpose", "Split", "Flatten"}
SLICING_OPS = {"Slice", "Gather", "Split"}
ACTIVATIONS = {"Tanh": "tanh", "Relu": "relu"}
CELLS = {4: "lstm", 3: "gru", 1: "rnn"}
MEETING_HOPS = 3  # a step's two products meet within this many nodes
STEP_CONE = 16  # a step's results lie within this many nodes of its products
RUN_STEPS = 4  # steps of the work limit a node run to check a network counts, besides its inputs
STEP_HOPS = 5  # nodes from an LSTM step's state product to the Mul that takes its c, at most
MAX_PAIRS = 64  # cell candidates checked, at most
TRIES = 2  # steps checked per pair of matrices: a cell stepped in a loop is read once
MAX_PIECES = 1 << 16  # pieces one SplitToSequence may make when running the graph
FLOAT_TYPES = (1, 10, 11, 16)  # ONNX float, float16, double, bfloat16
EXPORT_WITH_STATE = ("export the cell with its state as an input, e.g. torch.onnx.export("
                     "cell, (x, (h, c)), path) for an LSTMCell or (x, h) for the others")


@dataclass
class Linear:
    """``data · kernel + bias`` as the graph computes it."""

    node: Any
    data: str  # the name multiplied
    key: str  # the matrix's source name: the same for every use of one matrix
    kernel: np.ndarray  # (in, out), MatMul's orientation
    bias: np.ndarray | None
    output: str  # the name holding the result (after the bias)


@dataclass
class _Network:
    model: Model
    linears: list[Linear]  # the nodes whose matrices it holds
    what: str  # for listings: "an LSTM 3→4 (state 'h')"
    steps: list[Linear] = field(default_factory=list)  # a cell's: each step's input product
    joins: tuple[str, ...] = ()  # a paired network's: the node joining its halves, its output
    refused: str = ""  # why a cell's loop is not the network its step is, when it is not
    start: str = ""  # the values a cell's loop takes its first state from, when not zeros
    whole: _Network | None = None  # one of the two loops of one cell: that cell

    @property
    def names(self) -> set[str]:
        """What ``node=`` may give to pick it: its nodes' names and outputs (for a pair, the
        node joining its cells' outputs: each cell's own nodes pick that cell alone)."""
        return {name for linear in self.linears
                for name in (linear.node.name, *linear.node.output) if name} | \
            {name for name in self.joins if name}

    @property
    def pick(self) -> str:
        """A name ``node=`` picks it by."""
        if self.joins:
            return next(name for name in self.joins if name)
        return self.linears[0].node.name or self.linears[0].output


@dataclass
class _Joined:
    """Cells read as one bidirectional network, layer by layer."""

    network: _Network
    layers: list[tuple[_Network, _Network]]  # per layer: its forward and backward cell
    x: np.ndarray  # the first layer's input in the check's run, (time, batch, input)
    y: np.ndarray  # the graph's value equal to the last layer's output, time-major


@dataclass
class Stepped:
    """What a graph computes step by step: the network read, and how it was found."""

    model: Model
    what: str  # "an LSTM 3→4", "a bidirectional LSTM 3→4 (two cells, …)"
    # Paired cells: per layer, the node= values picking its forward and backward cell alone.
    cells: list[tuple[str, str]] = field(default_factory=list)
    start: str = ""  # a cell's loop: the values its first state comes from, when not zeros
    tied: bool = False  # paired cells: one cell stepped both ways
    unpaired: list[str] = field(default_factory=list)  # why cells were not read as a pair


def read(scope: Scope, options: Mapping[str, Any]) -> Model | None:
    """The network ``scope`` computes step by step, checked against rnnport's forward pass;
    None when the graph computes nothing the way a recurrent network does."""
    found = find(scope, options)
    return None if found is None else found.model


def find(scope: Scope, options: Mapping[str, Any]) -> Stepped | None:
    """:func:`read`'s network and what it is; None when there is none."""
    where = f"{scope.loaded.where}{f', {scope.path}' if scope.path else ''}"
    graph = _Search(scope, where)
    chosen = _choose(graph, _networks(graph, where), options)
    if chosen is None:
        return None
    network, joined = chosen
    if joined is None:
        return Stepped(network.model, _describe(network.model), start=network.start,
                       unpaired=graph.unpaired)
    return Stepped(network.model, network.what,
                   [(forward.pick, backward.pick) for forward, backward in joined.layers],
                   tied=any(forward.whole is not None for forward, _ in joined.layers),
                   unpaired=graph.unpaired)


def listing(scope: Scope) -> list[tuple[str, str]]:
    """The networks the graph computes step by step, as ``read`` tells them apart: (a name
    ``node=`` picks it by, what it is)."""
    where = f"{scope.loaded.where}{f', {scope.path}' if scope.path else ''}"
    graph = _Search(scope, where)
    networks, joined = _networks(graph, where)
    return [(network.pick, f"{network.what}{f' (not read: {network.refused})' if network.refused else ''}")
            for network in _top(networks, joined)]


def _describe(model: Model) -> str:
    if isinstance(model, RNN):
        return model.spec.describe(article=True)
    return f"a stack of {' → '.join(spec.describe() for spec in model.specs)}"


def _some(names: set[str], shown: int = 4) -> str:
    """A few of a network's names, and how many there are."""
    ordered = sorted(map(repr, names))
    more = f", … ({len(ordered)} in all)" if len(ordered) > shown else ""
    return ", ".join(ordered[:shown]) + more


def _top(networks: list[_Network], joined: list[_Joined]) -> list[_Network]:
    """The networks told apart: the cells joined into a network as that network (the one
    of most layers), in its first cell's place."""
    owner: dict[int, _Network] = {}
    for each in sorted(joined, key=lambda each: len(each.layers)):
        owner.update({id(cell): each.network for layer in each.layers for cell in layer})
    out: list[_Network] = []
    for network in networks:
        chosen = owner.get(id(network), network)
        if not any(chosen is already for already in out):
            out.append(chosen)
    return out


def _networks(graph: _Search, where: str) -> tuple[list[_Network], list[_Joined]]:
    """Every network found (sequences, then cells) and the cells paired into bidirectional
    networks."""
    linears = _linears(graph)
    if not linears:
        return [], []
    networks = _sequences(graph, linears)
    taken = {id(linear) for network in networks for linear in network.linears}
    cells, problems = _cells(graph, [linear for linear in linears if id(linear) not in taken])
    if not networks and not cells:
        if problems:
            shown = "; ".join(problems[:4]) + ("; …" if len(problems) > 4 else "")
            raise UnsupportedFeatureError(
                f"{where}: the graph multiplies two values by constants of one width whose "
                "products meet, as one step of a recurrent cell does, but computes none of the "
                f"cells rnnport knows with them ({shown}). rnnport reads PyTorch's LSTMCell, "
                "GRUCell and RNNCell as its exporter writes them.")
        if _folded_state(graph, linears):
            raise UnsupportedFeatureError(
                f"{where}: one step of a recurrent cell whose state was folded away: exported "
                "without a state, h = 0, so PyTorch's exporter computed h·weight_hh + bias_hh "
                "once, into a constant, and weight_hh is not in the file. Nothing can bring it "
                f"back; {EXPORT_WITH_STATE} (a cell stepped in a loop: with two or more time "
                "steps), or read the cell's state_dict.")
        return [], []
    looped = [cell for cell in cells if len(cell.steps) >= 2]
    values = _sequence_run(graph, looped) if looped else {}
    cells = _loops(graph, cells, values)
    joined = _paired(graph, cells, values)
    paired = {id(cell) for each in joined for layer in each.layers for cell in layer}
    wholes: list[_Network] = []  # one cell's two loops not read as one network: the cell
    for cell in cells:
        whole = cell.whole
        if whole is not None and id(cell) not in paired:
            if not any(whole is already for already in wholes):
                whole.refused = ("it is stepped over a sequence and over it reversed from zero "
                                 "states, its outputs not joined as a bidirectional network's "
                                 "y (forward half first, the backward half in time order)")
                wholes.append(whole)
                networks.append(whole)
        else:
            networks.append(cell)
    return networks, joined


def _choose(graph: _Search, found: tuple[list[_Network], list[_Joined]],
            options: Mapping[str, Any]) -> tuple[_Network, _Joined | None] | None:
    """The network ``node=`` picks (or the only one) and, for joined cells, how."""
    networks, joined = found
    if not networks:
        return None
    every = [each.network for each in joined] + networks
    top = _top(networks, joined)
    wanted = options.get("node")
    if wanted is not None:
        picked = [network for network in every if wanted in network.names]
        if not picked:
            listed = "; ".join(f"{n.what}: {_some(n.names)}" for n in every)
            raise FormatError(f"{graph.where}: node={wanted!r} names none of the nodes of the "
                              f"networks the graph computes step by step ({listed}).")
        top = picked
    if len(top) > 1:
        listed = "; ".join(f"{n.what}{' (refused: see node=)' if n.refused else ''}, e.g. "
                           f"node={n.pick!r}" for n in top)
        unpaired = "".join(f" {reason}." for reason in graph.unpaired)
        raise AmbiguousSourceError(f"{graph.where}: the graph computes {len(top)} recurrent "
                                   f"networks step by step ({listed}); pass node= to pick one."
                                   f"{unpaired}")
    if top[0].refused:
        raise UnsupportedFeatureError(
            f"{graph.where}: the graph steps {top[0].what}, but {top[0].refused}; that is not "
            "the network its cell makes, and rnnport's forward could not give the graph's "
            "numbers. rnnport reads a cell stepped once per time step, each step taking the "
            "state the one before computed (from zeros, or a state it notes); read the cell's "
            "weights from the PyTorch model (its state_dict) to run it your own way.")
    return top[0], next((each for each in joined if each.network is top[0]), None)


# -- the graph: linears, what depends on the inputs, shapes --------------------------------------


def _dynamic(scope: Scope) -> set[str]:
    """The names whose values depend on the graph's inputs fed at run time, in one pass."""
    out = {name for name in scope.inputs if name not in scope.initializers}
    for node in scope.nodes:
        if any(name in out for name in node.input) or any(
                attribute.HasField("g") or len(attribute.graphs) for attribute in node.attribute):
            out.update(name for name in node.output if name)
    return out


def _linears(graph: _Search) -> list[Linear]:
    scope = graph.scope
    graph.charge(2 * len(scope.nodes), "finding the graph's products")
    dynamic = _dynamic(scope)
    consumers = scope.consumers
    found = []
    for node in scope.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("MatMul", "Gemm") \
                or len(node.input) < 2 or not node.output or node.input[1] in dynamic:
            continue
        if node.input[0] not in dynamic and (node.input[0] not in scope.producers or
                                             scope.constant(node.input[0]) is not None):
            continue  # a product of constants, not of what the model computes (a state)
        given = attributes(node, scope.label(node))
        if node.op_type == "Gemm" and (given.get("alpha", 1.0) != 1.0 or
                                       given.get("beta", 1.0) != 1.0 or given.get("transA", 0)):
            continue
        matrix = scope.constant(node.input[1])
        if matrix is None or matrix.ndim != 2 or matrix.dtype.kind != "f" or 0 in matrix.shape:
            continue
        kernel = matrix.T if given.get("transB", 0) else matrix
        bias, output = None, node.output[0]
        if node.op_type == "Gemm" and len(node.input) > 2 and node.input[2]:
            if node.input[2] in dynamic:
                continue
            bias = scope.constant(node.input[2])
            if bias is None or bias.shape not in ((kernel.shape[1],), (1, kernel.shape[1])):
                continue
            bias = bias.reshape(-1)
        else:
            after = consumers.get(output, [])
            if len(after) == 1 and after[0].op_type == "Add" and after[0].output:
                other = next((name for name in after[0].input if name != output), "")
                value = None if other in dynamic else scope.constant(other)
                if value is not None and value.shape == (kernel.shape[1],):
                    bias, output = value, after[0].output[0]
        key = graph.origin(node.input[1])[0]  # through the Transpose an exporter may add
        found.append(Linear(node, node.input[0], key, kernel, bias, output))
    return found


class _Search:
    """One scope being searched, with what the steps share: consumers, shapes, the nodes
    near each value."""

    def __init__(self, scope: Scope, where: str) -> None:
        self.scope, self.where = scope, where
        self.consumers = scope.consumers
        self._shapes: dict[str, tuple[int, ...]] | None = None
        self._near_cache: dict[str, set[int]] = {}
        # The linears paired, and each node → the positions of those whose results reach it.
        self._meeting: tuple[list[Linear], dict[int, list[int]]] | None = None
        self._positions: dict[int, int] | None = None
        self.unpaired: list[str] = []  # why cells that could be a pair were not read as one

    def position(self, node: Any) -> int:
        """``node``'s place in the graph's order."""
        if self._positions is None:
            self._positions = {id(each): index for index, each in enumerate(self.scope.nodes)}
        return self._positions.get(id(node), -1)

    def origin(self, name: str) -> tuple[str, list[Any]]:
        """Follow ``name`` back through :data:`PASS_OPS` (their data input), at most
        :data:`~.graph.MAX_DEPTH` nodes: the name reached and the nodes passed."""
        passed: list[Any] = []
        producers = self.scope.producers
        while name in producers and producers[name].op_type in PASS_OPS and \
                len(passed) < MAX_DEPTH:
            node = producers[name]
            if not node.input or not node.input[0] or node.input[0] == name:
                break
            passed.append(node)
            name = node.input[0]
        return name, passed

    def shape(self, name: str) -> tuple[int, ...] | None:
        """``name``'s shape as the model declares or ONNX's shape inference finds it (a
        named size taken as 2); None when unknown."""
        if self._shapes is None:
            self._shapes = declared_shapes(self.scope)
        return self._shapes.get(name)

    def flips(self, nodes: Sequence[Any]) -> bool:
        """Whether a Slice among ``nodes`` reverses an axis (a negative step)."""
        for node in nodes:
            if node.op_type == "Slice" and len(node.input) > 4:
                steps = self.scope.constant(node.input[4])
                if steps is not None and steps.dtype.kind in "iu" and (steps < 0).any():
                    return True
        return False

    def meets(self, first: str, second: str) -> bool:
        """Whether the values ``first`` and ``second`` reach one node within
        :data:`MEETING_HOPS` nodes."""
        return bool(self._near(first) & self._near(second))

    def meeting(self, linear: Linear, linears: list[Linear]) -> list[Linear]:
        """The ``linears`` whose results meet ``linear``'s (:meth:`meets`), in their order:
        found through the nodes near each result, not by trying every pair, and each one
        found counted against the ``work`` limit (a graph whose products all meet still
        has as many pairs as its products squared)."""
        if self._meeting is None or self._meeting[0] is not linears:
            near: dict[int, list[int]] = {}
            for index, other in enumerate(linears):
                for node in self._near(other.output):
                    near.setdefault(node, []).append(index)
            self._meeting = linears, near
        found = sorted({index for node in self._near(linear.output)
                        for index in self._meeting[1].get(node, ())})
        self.charge(len(found), "pairing the products that meet")
        return [linears[index] for index in found]

    def charge(self, steps: int, doing: str) -> None:
        self.scope.loaded.work.charge(steps, doing)

    def forward(self, model: RNN, x: np.ndarray, **options: Any) -> tuple[np.ndarray, Any]:
        """``model.forward(x, **options)``, counted against the ``work`` limit first:
        :data:`RUN_STEPS` steps and its products (each parameter once per step of each
        sequence), :data:`PRODUCTS_PER_STEP` a step (a loop of many steps, each checked
        from several states, runs the network read many times)."""
        spec = model.spec
        self.charge(RUN_STEPS + x.size // max(spec.input_size, 1) * spec.num_params()
                    // PRODUCTS_PER_STEP, "running the network read to check it")
        return model.forward(x, **options)

    def differences(self, values: Mapping[str, Any],
                    expected: np.ndarray) -> Iterator[tuple[str, float]]:
        """Each float value of ``expected``'s shape among ``values``, by name, with its
        largest difference from ``expected``; the values looked at and the numbers compared
        counted against the ``work`` limit (a loop's every step compares with every value)."""
        self.charge(len(values), "comparing the network read with the graph's values")
        for name, value in values.items():
            if isinstance(value, np.ndarray) and value.shape == expected.shape and \
                    value.dtype.kind == "f":
                self.charge(expected.size // PRODUCTS_PER_STEP, "comparing the network read "
                            "with the graph's values")
                yield name, float(np.max(np.abs(value - expected), initial=0.0))

    def near(self, name: str) -> set[int]:
        """The nodes (by id) ``name`` reaches within :data:`MEETING_HOPS` nodes."""
        return self._near(name)

    def taken_near(self, name: str) -> set[str]:
        """The values the nodes within :data:`STEP_HOPS` nodes of ``name`` take: where a
        step's recurrent product goes, the state it updates (an LSTM's c) is taken."""
        return {item for node in self._walk(name, STEP_HOPS) for item in node.input if item}

    def after(self, name: str | Iterable[str]) -> set[str]:
        """The values computed from ``name`` (or from any of several), in one pass over the
        graph's order."""
        out = {name} if isinstance(name, str) else set(name)
        self.charge(len(self.scope.nodes), "following what a step computes")
        for node in self.scope.nodes:
            if any(item in out for item in node.input):
                out.update(output for output in node.output if output)
        return out

    def walk(self, name: str, hops: int) -> list[Any]:
        """The nodes reached from ``name`` within ``hops`` nodes, each once."""
        return self._walk(name, hops)

    def _near(self, name: str) -> set[int]:
        if name not in self._near_cache:
            self._near_cache[name] = {id(node) for node in self._walk(name, MEETING_HOPS)}
        return self._near_cache[name]

    def _walk(self, name: str, hops: int) -> list[Any]:
        """The nodes reached from ``name`` within ``hops`` nodes, each once."""
        frontier, seen, found = [name], set(), []
        for _ in range(hops):
            following: list[str] = []
            for current in frontier:
                self.charge(1 + len(self.consumers.get(current, ())), "walking near a product")
                for node in self.consumers.get(current, []):
                    if id(node) not in seen:
                        seen.add(id(node))
                        found.append(node)
                        following.extend(output for output in node.output if output)
            frontier = following
        return found


def declared_shapes(scope: Scope, unknown: int = 2) -> dict[str, tuple[int, ...]]:
    """The shapes of the main graph's values as declared or as ONNX's shape inference finds
    them (a named or unknown size taken as 2, or as ``unknown``)."""
    from onnx import helper, shape_inference

    graph = scope.loaded.graph
    infos = [*graph.input, *graph.value_info, *graph.output]
    if not graph.value_info and scope.loaded.opsets:
        # The initializers' shapes, not their bytes: inference copies the model it is given.
        listed = {value.name for value in graph.input}
        declared = [helper.make_tensor_value_info(tensor.name, tensor.data_type, tensor.dims)
                    for tensor in graph.initializer if tensor.name not in listed]
        bare = helper.make_graph(graph.node, graph.name, [*graph.input, *declared],
                                 graph.output)
        try:
            inferred = shape_inference.infer_shapes(
                helper.make_model(bare, opset_imports=scope.loaded.opsets))
            infos = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
        except Exception:  # shape inference fails on what it does not know: no shapes
            pass
    return {info.name: _dims(info.type.tensor_type, unknown=unknown) for info in infos
            if info.type.tensor_type.HasField("shape")}


# -- sequences (nn.RNN, unrolled) ---------------------------------------------------------------


@dataclass
class _Step:
    weight: Linear  # the product of the whole input this step slices
    recurrent: Linear
    activation: str
    backward: bool
    others: list[Linear] = field(default_factory=list)  # the other steps' uses of U


def _sequences(graph: _Search, linears: list[Linear]) -> list[_Network]:
    scope = graph.scope
    by_output = {linear.output: linear for linear in linears}
    steps: dict[str, list[_Step]] = {}  # U's key → its steps
    for linear in linears:
        rows, columns = linear.kernel.shape
        joins = graph.consumers.get(linear.output, [])
        if rows != columns or len(joins) != 1 or joins[0].op_type != "Add" or \
                not joins[0].output:
            continue
        after = graph.consumers.get(joins[0].output[0], [])
        if len(after) != 1 or after[0].op_type not in ACTIVATIONS:
            continue
        other = next((name for name in joins[0].input if name != linear.output), "")
        origin, passed = graph.origin(other)
        weight = by_output.get(origin)
        if weight is None or weight.key == linear.key or weight.kernel.shape[1] != columns \
                or not any(node.op_type in SLICING_OPS for node in passed):
            continue
        steps.setdefault(linear.key, []).append(
            _Step(weight, linear, ACTIVATIONS[after[0].op_type], graph.flips(passed)))
    directions = []
    for key, found in steps.items():
        kinds = {(id(step.weight), step.activation, step.backward) for step in found}
        if len(kinds) != 1:
            raise _refuse(graph.where, f"the steps that multiply by {key!r} take their inputs "
                          "from different products, or apply different activations")
        found[0].others = [step.recurrent for step in found[1:]]
        directions.append(found[0])
    position = {id(node): index for index, node in enumerate(scope.nodes)}
    directions.sort(key=lambda step: position[id(step.weight.node)])
    layers: dict[str, list[_Step]] = {}
    for step in directions:
        layers.setdefault(step.weight.data, []).append(step)
    networks: list[list[list[_Step]]] = []
    for group in layers.values():
        group.sort(key=lambda step: step.backward)
        if [step.backward for step in group] not in ([False], [False, True]):
            networks += [[[step]] for step in group]  # networks side by side on one input
        elif networks and _follows(graph, group, networks[-1][-1]):
            networks[-1].append(group)
        else:
            networks.append([group])
    return [_sequence(graph, network) for network in networks]


def _follows(graph: _Search, layer: list[_Step], before: list[_Step]) -> bool:
    """Whether ``layer`` multiplies what ``before`` (the layer before) outputs: its input
    is computed from that layer's activations."""
    outputs = {output for step in before for node in graph.consumers.get(step.recurrent.output,
                                                                         [])
               for after in graph.consumers.get(node.output[0], []) for output in after.output}
    pending, seen = [layer[0].weight.data], set[str]()
    while pending and len(seen) < 100_000:
        graph.charge(1, "following a layer's input back")
        name = pending.pop()
        if name in outputs:
            return True
        if name in seen:
            continue
        seen.add(name)
        node = graph.scope.producers.get(name)
        if node is not None:
            pending.extend(item for item in node.input if item)
    return False


def _refuse(where: str, what: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(
        f"{where}: the graph computes the steps of an unrolled recurrent network, but {what}. "
        "rnnport reads the unrolled simple RNNs that PyTorch's exporter writes for nn.RNN; "
        "for another network, export it with torch.onnx.export(..., dynamo=False), which "
        "writes RNN nodes, or read the PyTorch weights themselves (the state_dict).")


def _sequence(graph: _Search, layers: list[list[_Step]]) -> _Network:
    where = graph.where
    counts = {len(layer) for layer in layers}
    nonlinearities = {step.activation for layer in layers for step in layer}
    if len(counts) != 1 or len(nonlinearities) != 1:
        raise _refuse(where, "its layers differ in their directions or activations")
    count = counts.pop()
    for layer in layers:
        if [step.backward for step in layer] != [False, True][:count]:
            raise _refuse(where, "a layer runs only backward, or two directions run the same "
                          "way")
    first = layers[0][0].weight
    hidden = layers[0][0].recurrent.kernel.shape[0]
    spec = Spec(cell=f"rnn_{nonlinearities.pop()}", input_size=first.kernel.shape[0],
                hidden_size=hidden, num_layers=len(layers), bidirectional=count == 2,
                bias=any(step.weight.bias is not None or step.recurrent.bias is not None
                         for layer in layers for step in layer))
    params = []
    for index, layer in enumerate(layers):
        for step in layer:
            if step.weight.kernel.shape != (spec.layer_input_size(index), hidden) or \
                    step.recurrent.kernel.shape != (hidden, hidden):
                raise _refuse(where, f"layer {index}'s matrices are {step.weight.kernel.shape} "
                              f"and {step.recurrent.kernel.shape}, which do not chain")
        params.append([_params(graph, step.weight, step.recurrent, spec.bias)
                       for step in layer])
    model = _build(graph, spec, params)
    _check_sequence(graph, model, first)
    linears = [linear for layer in layers for step in layer
               for linear in (step.weight, step.recurrent, *step.others)]
    return _Network(model, linears, f"{spec.describe(article=True)} (unrolled)")


def _params(graph: _Search, weight: Linear, recurrent: Linear, bias: bool
            ) -> dict[str, np.ndarray]:
    """One direction's parameters, the matrices transposed back into fresh arrays (paid for
    first: many steps may share one matrix, which is copied for each network built)."""
    graph.scope.charge(weight.kernel.nbytes + recurrent.kernel.nbytes, graph.where,
                       "the matrices of the networks tried, transposed back")
    named = {"weight_ih": np.ascontiguousarray(weight.kernel.T),
             "weight_hh": np.ascontiguousarray(recurrent.kernel.T)}
    if bias:
        for name, linear in (("bias_ih", weight), ("bias_hh", recurrent)):
            named[name] = linear.bias if linear.bias is not None else \
                np.zeros(linear.kernel.shape[1], linear.kernel.dtype)
    return named


def _build(graph: _Search, spec: Spec, params: list[list[dict[str, np.ndarray]]]) -> RNN:
    where = graph.where
    dtypes = {array.dtype for layer in params for entry in layer for array in entry.values()}
    if len(dtypes) != 1:
        raise FormatError(f"{where}: the network's constants are of several dtypes "
                          f"({', '.join(sorted(map(str, dtypes)))}); expected one.")
    graph.scope.charge(sum(array.nbytes for layer in params for entry in layer
                           for array in entry.values()), where, "the networks tried")
    return RNN(spec, params, copy=True)


# -- steps (cells) ------------------------------------------------------------------------------


def _cells(graph: _Search, linears: list[Linear]) -> tuple[list[_Network], list[str]]:
    """The cells whose steps the graph computes, and why the candidates that are not failed
    the check."""
    pairs = (  # (input's linear, state's linear), found lazily
        (data, state) for state in linears
        if state.kernel.shape[1] % state.kernel.shape[0] == 0
        and state.kernel.shape[1] // state.kernel.shape[0] in CELLS
        for data in graph.meeting(state, linears)
        if data is not state and data.data != state.data
        and data.kernel.shape[1] == state.kernel.shape[1])
    found: list[_Network] = []
    problems = []
    checked = set()
    tries: dict[tuple[str, str], int] = {}  # per pair of matrices: the steps of one cell
    swapped: dict[tuple[str, str], bool] = {}  # input and state of one size: which is which
    for data, state in pairs:
        keys = (data.key, state.key)
        if keys in checked or tries.get(keys, 0) >= TRIES:  # a cell stepped in a loop: once
            continue
        if sum(tries.values()) >= MAX_PAIRS:
            break
        if data.kernel.shape == state.kernel.shape:
            if keys not in swapped:
                swapped[keys] = _swapped(graph, data, state, linears)
            if swapped[keys]:
                tries[keys] = TRIES  # the other way round is the cell: this one is not tried
                continue
        tries[keys] = tries.get(keys, 0) + 1
        hidden, width = state.kernel.shape
        family = CELLS[width // hidden]
        cells = [f"rnn_{name}" for name in ACTIVATIONS.values()] if family == "rnn" else \
            [family]
        try:
            step = _StepRun(graph, data, state)
        except _Mismatch as error:
            problems.append(f"{data.output!r} and {state.output!r}: {error}")
            continue
        for cell in cells:
            spec = Spec(cell=cell, input_size=data.kernel.shape[0], hidden_size=hidden,
                        bias=data.bias is not None or state.bias is not None)
            model = _build(graph, spec, [[_params(graph, data, state, spec.bias)]])
            try:
                step.check(model)
            except _Mismatch as error:
                problems.append(f"as {spec.describe(article=True)}: {error}")
                continue
            checked.add(keys)
            # Every step of a cell stepped in a loop uses its two matrices.
            uses = [linear for linear in linears if linear.key in keys]
            steps = [linear for linear in uses if linear.key == data.key]
            same = next((network for network in found if network.model == model), None)
            if same is None:
                found.append(_Network(model, uses, f"{spec.describe(article=True)} "
                                      f"(state {state.data!r})", steps))
            else:
                same.linears += uses
                same.steps += steps
            break
    return found, problems


def _swapped(graph: _Search, data: Linear, state: Linear, linears: list[Linear]) -> bool:
    """For two products of one shape (a cell whose input and state are of one size): whether
    ``data`` is the state's product and ``state`` the input's. In a loop the state's
    product takes what the cell's own steps computed (h′ feeds back), the input's never;
    in one step, the graph's inputs say it in PyTorch's order: ``(x, h)``, ``(x, (h, c))``."""
    keys = {data.key, state.key}
    uses = [linear for linear in linears if linear.key in keys]
    computed = graph.after([linear.output for linear in uses])
    fed_back = {key: any(linear.data in computed for linear in uses if linear.key == key)
                for key in keys}
    if fed_back[data.key] != fed_back[state.key]:
        return fed_back[data.key]
    order = {value.name: index for index, value in enumerate(graph.scope.loaded.graph.input)}
    first, second = (order.get(graph.origin(linear.data)[0]) for linear in (data, state))
    return first is not None and second is not None and first > second


@dataclass
class _Loop:
    """A run of a cell's steps, each taking the state the one before it computed."""

    steps: list[int]  # indexes into the cell's steps, in the graph's order
    states: list[Linear]  # the state products of those steps (none for a folded first one)
    inputs: list[np.ndarray]  # what each step takes in the sequence run, (batch, input)
    h: np.ndarray  # the state after its last step, as rnnport's forward computes it
    c: np.ndarray | None
    start: str = ""  # the values its first state comes from, when not zeros: "'h0'"


def _loops(graph: _Search, cells: list[_Network], values: Mapping[str, Any]) -> list[_Network]:
    """``cells``, each cell stepped in a loop checked over its whole sequence
    (:func:`_runs`): one loop as it is (its first state noted when not zeros); a cell
    stepped in two loops from zeros, of as many steps, as its two loops (a bidirectional
    network whose directions share the cell, if :func:`_paired` finds them joined); any
    other, refused with the reason."""
    out: list[_Network] = []
    for cell in cells:
        if len(cell.steps) < 2 or not isinstance(cell.model, RNN):
            out.append(cell)
            continue
        try:
            loops = _runs(graph, cell, values)
        except _Mismatch as error:
            cell.refused = str(error)
            out.append(cell)
            continue
        if len(loops) == 1:
            cell.start = loops[0].start
            out.append(cell)
        elif len(loops) == 2 and not loops[0].start and not loops[1].start and \
                len(loops[0].steps) == len(loops[1].steps):
            for loop in loops:
                steps = [cell.steps[index] for index in loop.steps]
                out.append(_Network(cell.model, steps + loop.states, cell.what, steps,
                                    whole=cell))
        else:
            sizes = ", ".join(str(len(loop.steps)) for loop in loops[:8]) + \
                (", …" if len(loops) > 8 else "")  # a crafted graph's thousands: not all
            starts = sum(1 for loop in loops if loop.start)
            other = f", {starts} of them from a state that is not zeros" if starts else ""
            cell.refused = (f"it is stepped in {len(loops)} loops (of {sizes} steps{other}), "
                            "where a network steps once over its sequence, or a bidirectional "
                            "one over it and over it reversed from zeros")
            out.append(cell)
    return out


def _runs(graph: _Search, cell: _Network, values: Mapping[str, Any]) -> list[_Loop]:
    """The loops a cell's steps make in the sequence run: each step (its input's product)
    with the state product that meets it, run by rnnport's forward one step at a time; a
    step whose state is zeros (or folded away) starts a loop, one whose state is a loop's
    last output goes on with it, and only a first loop may start from another state (the
    model's initial state). :class:`_Mismatch` for a step applying the cell more than once,
    a state that is none of these, inputs that are not one sequence's steps."""
    model = cell.model
    if not isinstance(model, RNN):  # never: cells are one-layer networks
        raise _Mismatch("not a cell")
    spec = model.spec
    steps = sorted(cell.steps, key=lambda step: graph.position(step.node))
    cell.steps = steps
    applied: dict[int, list[Linear]] = {id(step): [] for step in steps}
    near: dict[int, list[Linear]] = {}  # a node → the steps whose input's product it is near
    for step in steps:
        for node in graph.near(step.output):
            near.setdefault(node, []).append(step)
    for product in (linear for linear in cell.linears if linear.key != steps[0].key):
        owners = list({id(step): step for node in graph.near(product.output)
                       for step in near.get(node, [])}.values())
        if len(owners) != 1:
            raise _Mismatch(f"its state product {product.output!r} meets {len(owners)} of its "
                            "steps' input products, where a step's meets its own")
        applied[id(owners[0])].append(product)
    loops: list[_Loop] = []
    for index, step in enumerate(steps):
        states = sorted(applied[id(step)], key=lambda linear: graph.position(linear.node))
        if len(states) > 1:
            raise _Mismatch(f"it applies the cell {len(states)} times to one step's input "
                            f"{step.data!r} (as h = cell(x, cell(x, h)) does)")
        x = values.get(step.data)
        if not isinstance(x, np.ndarray) or x.ndim != 2 or x.shape[1] != spec.input_size:
            raise _Mismatch(f"running the graph did not compute the input {step.data!r} of "
                            f"its step {index + 1}")
        state = states[0] if states else None
        h = None if state is None else values.get(state.data)
        if state is not None and (not isinstance(h, np.ndarray) or h.shape != (
                x.shape[0], spec.hidden_size)):
            raise _Mismatch(f"running the graph did not compute the state {state.data!r} its "
                            f"step {index + 1} takes")
        graph.charge(len(loops), "following a cell's loops")
        loop = _continued(loops, h)
        if loop is None:
            if state is not None and h is not None and np.any(h) and loops:
                raise _Mismatch(f"step {index + 1} takes a state ({state.data!r}) that is none "
                                "of the steps' outputs (the loop computes something between "
                                "its steps: a zoneout, a residual, an average)")
            loop = _start(graph, values, model, x, step, state, h)
            loops.append(loop)
        out, carried = graph.forward(model, x[None], state=loop.h[None] if loop.c is None else (
            loop.h[None], loop.c[None]), time_major=True)
        loop.h = out[0]
        loop.c = carried[1][0] if isinstance(carried, tuple) else None
        loop.steps.append(index)
        loop.states += states
        loop.inputs.append(x)
    fed = graph.after([linear.output for linear in cell.linears])
    fed_back = next((step.data for step in steps if step.data in fed), None)
    if fed_back is not None:
        raise _Mismatch(f"a step's input ({fed_back!r}) is computed from the cell's own "
                        "outputs (fed back into its input, as a decoder feeding its output "
                        "does), where a network's input is given")
    for loop in loops:
        twice = next((index for index, (before, after) in enumerate(itertools.pairwise(
            loop.inputs)) if np.array_equal(before, after)), None)
        if twice is not None:
            raise _Mismatch(f"it applies the cell twice to one input: steps {twice + 1} and "
                            f"{twice + 2} take the same values (as h = cell(x, cell(x, h)) "
                            "does)")
        if _closest(graph, values, loop.h) > TOLERANCE * _scale(loop.h):
            raise _Mismatch(_differs("its last step's output", _closest(graph, values, loop.h)))
    return loops


def _continued(loops: list[_Loop], h: np.ndarray | None) -> _Loop | None:
    """The loop whose last output is ``h`` (the latest such), if any."""
    if h is None:
        return None
    for loop in reversed(loops):
        if loop.h.shape == h.shape and \
                float(np.max(np.abs(loop.h - h), initial=0.0)) <= TOLERANCE * _scale(loop.h):
            return loop
    return None


def _start(graph: _Search, values: Mapping[str, Any], model: RNN, x: np.ndarray,
           step: Linear, state: Linear | None, h: np.ndarray | None) -> _Loop:
    """A loop starting at ``step``, whose state product ``state`` takes ``h`` (None: the
    exporter folded the product into a constant, as it does for a state made inside the
    model). The state is whatever makes the step compute one of the graph's values: zeros,
    else (folded) a value of the state's shape the step takes near its input's product (a
    GRU's update takes h itself); an LSTM's c, zeros or a value of its shape taken near the
    step."""
    lstm = model.spec.cell == "lstm"
    zeros = np.zeros((x.shape[0], model.spec.hidden_size), np.float32)
    near = graph.taken_near(step.output if state is None else state.output)
    graph.charge(len(values) + len(near), "looking for a loop's first state")
    # a state made inside the model may be a constant (one row for the whole batch)
    constants = {name: np.broadcast_to(value, zeros.shape).astype(np.float32) for name in near
                 if name not in values and (value := graph.scope.constant(name)) is not None
                 and value.shape in (zeros.shape, zeros.shape[1:], (1, zeros.shape[1]))
                 and value.dtype.kind == "f"}
    shaped = [(name, value) for name, value in sorted({**values, **constants}.items(),
                                                      key=lambda item: (item[0] not in near,
                                                                        str(item[0])))
              if isinstance(value, np.ndarray) and value.shape == zeros.shape
              and value.dtype.kind == "f"]
    if state is not None and h is not None:
        starts = [(state.data, h)]
    else:
        starts = [("", zeros), *[(name, value) for name, value in shaped
                                 if name in near and np.any(value)][:8]]
    for name, start in starts:
        own = graph.origin(name)[0] if name else ""
        cells = [("", zeros), *[(other, value) for other, value in shaped
                                if other not in (name, own)][:8]] if lstm else [("", None)]
        for other, c in cells:
            y, _ = graph.forward(model, x[None], state=start[None] if c is None else (
                start[None], c[None]), time_major=True)
            if _closest(graph, values, y[0]) <= TOLERANCE * _scale(y):
                given = [f"{what} {value!r}" if lstm else repr(value) for what, value, array in
                         (("h", name, start), ("c", other, c)) if np.any(array)]
                return _Loop([], [], [], start, c, " and ".join(given))
    if state is None:
        raise _Mismatch("its first step does not start from zeros, nor from a state the graph "
                        "holds: the exporter folded the state's product with weight_hh into a "
                        "constant (a learned initial state, h0.expand(...)), and the state "
                        "itself is not in the file")
    raise _Mismatch(f"its first step takes a state ({state.data!r}) with which it computes "
                    "none of the graph's values (for an LSTM, with no value of the graph as c)")


def _paired(graph: _Search, cells: list[_Network], values: Mapping[str, Any]) -> list[_Joined]:
    """Cells of one kind and size stepped over one sequence and over it reversed, whose
    outputs the graph joins as one bidirectional network's ``y`` (forward half first, the
    backward half in time order, as rnnport's ``forward`` gives it): each such pair as one
    network, and pairs fed another pair's ``y`` as its next layer. Told by the values the
    graph computes (``values``: :func:`_sequence_run`), not by how it reverses the sequence
    (a ``Flip``, a reversed slice, steps taken from the last index down). Why two cells over
    a sequence and over it reversed are not one network is kept in ``graph.unpaired``."""
    looped = [cell for cell in cells if isinstance(cell.model, RNN) and len(cell.steps) >= 2
              and not cell.refused]
    pairs: list[_Joined] = []
    inputs = {id(cell): _inputs(values, cell) for cell in looped}  # each stacked once
    for first, second in itertools.combinations(looped, 2):
        if any(cell is taken for pair in pairs for taken in pair.layers[0]
               for cell in (first, second)):
            continue
        sequences = inputs[id(first)], inputs[id(second)]
        if sequences[0] is None or sequences[1] is None or \
                sequences[0].shape != sequences[1].shape:
            continue
        graph.charge(RUN_STEPS + 2 * sequences[0].size // PRODUCTS_PER_STEP,
                     "comparing the sequences cells step over")
        if np.array_equal(sequences[0], sequences[1]) and \
                first.model.spec == second.model.spec:
            graph.unpaired.append(
                f"{first.what} ({first.pick!r}) and {second.what} ({second.pick!r}) step over "
                "one sequence in the same order, where a bidirectional network's second "
                "direction steps over it reversed: read apart")
            continue
        if not np.array_equal(sequences[0], sequences[1][::-1]):
            continue
        if first.model.spec != second.model.spec:
            graph.unpaired.append(_apart(graph, values, first, second, sequences[0]))
            continue
        for (forward, x), backward in (((first, sequences[0]), second),
                                       ((second, sequences[1]), first)):
            joined = _pair(graph, values, forward, backward, x)
            if joined is not None:
                pairs.append(joined)
                break
        else:
            graph.unpaired.append(_apart(graph, values, first, second, sequences[0]))
    return _stacked(pairs)


def _apart(graph: _Search, values: Mapping[str, Any], first: _Network, second: _Network,
           x: np.ndarray) -> str:
    """Why two cells stepped over a sequence and over it reversed are not read as one
    bidirectional network."""
    names = f"{first.what} ({first.pick!r}) and {second.what} ({second.pick!r})"
    if not isinstance(first.model, RNN) or not isinstance(second.model, RNN):
        return f"{names} are not one-layer cells"  # never: cells are
    if first.model.spec != second.model.spec:
        why = "their cells differ in kind or size; a bidirectional network's two are alike"
    elif first.start or second.start:
        why = f"one starts from a state that is not zeros ({first.start or second.start!r})"
    else:
        why = "the graph does not join their outputs as a bidirectional network's y (forward " \
              "half first, the backward half in time order)"
        forward, _ = graph.forward(first.model, x, time_major=True)
        backward = graph.forward(second.model, x[::-1].copy(), time_major=True)[0][::-1]
        for text, joined in (("joins them backward half first", np.concatenate(
                [backward, forward], -1)), ("stacks them on a new axis", np.stack(
                    [forward, backward], 2)), ("adds them", forward + backward)):
            if any(_equal(graph, values, candidate) is not None
                   for candidate in (joined, joined.swapaxes(0, 1))):
                why = (f"the graph {text}, where a bidirectional network's y joins them "
                       "forward half first")
                break
    return f"{names} step over a sequence and over it reversed, but are read apart: {why}"


def _pair(graph: _Search, values: Mapping[str, Any], forward: _Network, backward: _Network,
          x: np.ndarray) -> _Joined | None:
    """``forward`` and ``backward`` as one bidirectional network run on ``x`` (time, batch,
    input), when the graph computes its ``y`` (time- or batch-major)."""
    if not isinstance(forward.model, RNN) or not isinstance(backward.model, RNN):
        return None  # cells are one-layer networks
    spec = forward.model.spec.replace(bidirectional=True)
    model = RNN(spec, [[*forward.model.params[0], *backward.model.params[0]]])
    y, _ = graph.forward(model, x, time_major=True)
    for expected, batch_major in ((y, False), (y.transpose(1, 0, 2), True)):
        join = _equal(graph, values, expected)
        if join is not None:
            found = values[join[1]]
            cells = "one cell stepped over the sequence and over it reversed, both directions " \
                "its weights" if forward.whole is not None and forward.whole is backward.whole \
                else "two cells, one stepped over the sequence and one over it reversed"
            what = f"{spec.describe(article=True)} ({cells}, joined by {join[0]!r})"
            return _Joined(_Network(model, [], what, joins=join), [(forward, backward)], x,
                           found.transpose(1, 0, 2) if batch_major else found)
    return None


def _stacked(pairs: list[_Joined]) -> list[_Joined]:
    """``pairs``, and beside them each run of pairs where one takes the ``y`` of the one
    before (the same values) as its input: one network of their layers, picked by the last
    one's join (the earlier layers stay pickable alone by theirs)."""
    following: dict[int, _Joined | None] = {}  # None: taken by two
    for later in pairs:
        for earlier in pairs:
            if earlier is not later and earlier.y.shape == later.x.shape and \
                    np.array_equal(earlier.y, later.x):
                following[id(earlier)] = later if id(earlier) not in following else None
    fed = {id(later) for later in following.values() if later is not None}
    out = [pair for pair in pairs if id(pair) in following or id(pair) not in fed]
    for start in pairs:
        if id(start) in fed:
            continue
        chain = [start]
        while (after := following.get(id(chain[-1]))) is not None and len(chain) <= len(pairs):
            chain.append(after)
        if len(chain) == 1:
            continue
        model = stack([pair.network.model for pair in chain])
        last = chain[-1].network
        what = (f"{_describe(model)} ({len(chain)} layers of two cells, one stepped over the "
                f"layer's input and one over it reversed, the last joined by {last.joins[0]!r})")
        out = [pair for pair in out if pair is not chain[-1]]
        out.append(_Joined(_Network(model, [], what, joins=last.joins),
                           [layer for pair in chain for layer in pair.layers], chain[0].x,
                           chain[-1].y))
    return out


def _sequence_run(graph: _Search, cells: list[_Network]) -> dict[str, Any]:
    """The graph run with random values where the cells' steps take their inputs from
    (through slicing and reshaping: a graph input, or what a front end the run cannot
    compute makes, such as convolutions) and zeros for the graph's other inputs (the state
    a model takes, if any: rnnport's forward starts from zeros). A value the run computes
    from one fed before it is not fed: a layer's input stays the layer before's output. A
    first state the run cannot compute (made by nodes it does not run) is fed random
    values too, and so is, for an LSTM, what its first step takes beside it that the run
    lacks."""
    rng = np.random.default_rng(2)
    feeds = {name: np.zeros_like(value) for name, value in _feeds(graph).items()}
    position = {name: index for index, node in enumerate(graph.scope.nodes)
                for name in node.output}
    origins = sorted({graph.origin(linear.data)[0] for cell in cells for linear in cell.steps},
                     key=lambda name: position.get(name, -1))
    upstream = _upstream(graph.scope, origins)  # a front end's inputs: random too
    for source in feeds:
        if source in upstream and feeds[source].dtype.kind == "f":
            feeds[source] = _random(rng, feeds[source].shape, graph.where)
    values = run(graph.scope, feeds, graph.where)
    for source in origins:
        shape = graph.shape(source)
        if source not in values and shape is not None:
            feeds[source] = _random(rng, shape, graph.where)
            values = run(graph.scope, feeds, graph.where)
    for cell in cells:
        first = min(cell.steps, key=lambda step: graph.position(step.node))
        x = values.get(first.data)
        state = min((linear for linear in cell.linears if linear.key != first.key and
                     graph.meets(first.output, linear.output)),
                    key=lambda linear: graph.position(linear.node), default=None)
        if state is None or state.data in values or not isinstance(x, np.ndarray) or \
                x.ndim != 2:
            continue
        h = _random(rng, (x.shape[0], state.kernel.shape[0]), graph.where)
        feeds[state.data] = h
        after = graph.after(state.output)
        for name in sorted(graph.taken_near(state.output) - after, key=str):
            if name not in values and name not in feeds and \
                    graph.scope.constant(name) is None and graph.shape(name) in (None, h.shape):
                feeds[name] = _random(rng, h.shape, graph.where)
        values = run(graph.scope, feeds, graph.where)
    return values


def _inputs(values: Mapping[str, Any], cell: _Network) -> np.ndarray | None:
    """The sequence a cell stepped over in a run, (time, batch, input), in the order its
    steps come in the graph; None when the run did not compute it."""
    found = [value for linear in cell.steps
             if isinstance(value := values.get(linear.data), np.ndarray)]
    if len(found) != len(cell.steps) or found[0].ndim != 2 or not all(
            value.shape == found[0].shape and value.dtype.kind == "f" for value in found):
        return None
    return np.stack(found)


def _equal(graph: _Search, values: Mapping[str, Any],
           expected: np.ndarray) -> tuple[str, str] | None:
    """The node computing a value equal to ``expected`` (within :data:`TOLERANCE`) and that
    value's name; None when there is none."""
    limit = TOLERANCE * _scale(expected)
    for name, difference in graph.differences(values, expected):
        if difference <= limit:
            node = graph.scope.producers.get(name)
            return (node.name if node is not None and node.name else name), name
    return None


def _folded_state(graph: _Search, linears: list[Linear]) -> bool:
    """Whether a linear of the input meets a 2-D constant of its width: a cell exported
    without its state, whose state product was folded."""
    if len(linears) != 1:
        return False
    linear = linears[0]
    width = linear.kernel.shape[1]
    for node in graph.consumers.get(linear.output, []):
        if node.op_type != "Add":
            continue
        other = next((name for name in node.input if name != linear.output), "")
        value = graph.scope.constant(other)
        if value is not None and value.ndim == 2 and value.shape[1] == width:
            return True
    return False


# -- checking: run the graph in NumPy ---------------------------------------------------------


class _Mismatch(Exception):
    """The graph computed other numbers than the network read."""


class _StepRun:
    """The graph run once with random x and h fed where it multiplies them, for the cells
    those two products may be (:meth:`check`)."""

    def __init__(self, graph: _Search, data: Linear, state: Linear) -> None:
        self.graph, self.state = graph, state
        hidden, inputs = state.kernel.shape[0], data.kernel.shape[0]
        batch = _batch(graph, data.data) or _batch(graph, state.data) or 2
        rng = np.random.default_rng(0)
        self.x = _random(rng, (batch, inputs), graph.where)
        feeds = {**_feeds(graph), data.data: self.x}
        # Only what the step's check looks at is run: the values within STEP_CONE nodes of
        # its two products, the state it takes, and what they are computed from (running a
        # whole large graph for each pair of products tried cost its size times theirs).
        near = {output for linear in (data, state)
                for node in graph.walk(linear.output, STEP_CONE) for output in node.output}
        wanted = {*near, state.data, *graph.taken_near(state.output)}
        values = run(graph.scope, feeds, graph.where, wanted)
        h = values.get(state.data)  # the graph's own state keeps every use of it consistent
        if not (isinstance(h, np.ndarray) and h.shape == (batch, hidden) and
                h.dtype.kind == "f"):
            # A state the run cannot compute (a front end it does not run stands before
            # it): random, and so is what the step takes beside it that the run lacks (an
            # LSTM's c).
            h = _random(rng, (batch, hidden), graph.where)
            feeds[state.data] = h
            values = run(graph.scope, feeds, graph.where, wanted)
            after = graph.after(state.output)  # the step's own results: not fed
            for name in sorted(graph.taken_near(state.output) - after, key=str):
                if name not in values and graph.scope.constant(name) is None and \
                        graph.shape(name) in (None, h.shape):
                    feeds[name] = _random(rng, h.shape, graph.where)
            if len(feeds) > len(values) or any(name not in values for name in feeds):
                values = run(graph.scope, feeds, graph.where, wanted)
        self.h, self.values = h, values

    def check(self, model: RNN) -> None:
        """One step of ``model`` (an LSTM's c: a value of the state's shape the graph has)
        is among the run's values, or :class:`_Mismatch`."""
        h = self.h
        states: list[Any] = [h[None]]
        if model.spec.cell == "lstm":
            own = self.graph.origin(self.state.data)[0]
            inputs = self.graph.scope.inputs
            taken = self.graph.taken_near(self.state.output)
            # The c this step updates is taken near its product (a state computed by an
            # earlier step of a loop), else fed to the graph; then anything of its shape.
            ordered = sorted(self.values.items(),
                             key=lambda item: (item[0] not in taken, item[0] not in inputs))
            states = [(h[None], value[None]) for name, value in ordered
                      if name not in (own, self.state.data) and isinstance(value, np.ndarray)
                      and value.shape == h.shape and value.dtype.kind == "f"][:8]
            if not states:
                raise _Mismatch("no value of the state's shape to be c")
        closest = np.inf
        for state_in in states:
            y, _ = self.graph.forward(model, self.x[:, None, :], state=state_in)
            closest = min(closest, _closest(self.graph, self.values, y[:, 0]))
            if closest <= TOLERANCE * _scale(y):
                return
        raise _Mismatch(_differs("the next state h", closest))


def _check_sequence(graph: _Search, model: RNN, first: Linear) -> None:
    """``model`` run on random input fed where the graph multiplies its first layer's
    input (time-major, as PyTorch's exporter multiplies it), from a state of the graph's if
    it has one, gives an output among the values the graph computes."""
    spec = model.spec
    shape = graph.shape(first.data)
    feeds = _feeds(graph)
    if shape is None or len(shape) != 3:
        shape = _computed_shape(graph, feeds, first.data)
    if shape is None or len(shape) != 3 or shape[2] != spec.input_size:
        raise _refuse(graph.where, f"the shape of the first layer's input {first.data!r} is "
                      f"{'unknown' if shape is None else shape}; expected (time, batch, "
                      f"{spec.input_size})")
    x = _random(np.random.default_rng(1), shape, graph.where)
    values = run(graph.scope, {**feeds, first.data: x}, graph.where)
    states_shape = (spec.num_layers * spec.num_directions, shape[1], spec.hidden_size)
    ordered = sorted(values.items(), key=lambda item: item[0] not in graph.scope.inputs)
    states = [value for _, value in ordered if isinstance(value, np.ndarray) and
              value.shape == states_shape and value.dtype.kind == "f"][:4]
    closest = np.inf
    for state in [*states, None]:
        y, _ = graph.forward(model, x, state=state, time_major=True)
        closest = min(closest, _closest(graph, values, y))
        if closest <= TOLERANCE * _scale(y):
            return
    raise _refuse(graph.where, f"it does not compute the network its matrices describe "
                  f"({spec.describe(article=True)}): {_differs('the output y', closest)}")


def _batch(graph: _Search, name: str) -> int | None:
    """The batch size of a step's input or state ``name`` (batch, width), if declared."""
    shape = graph.shape(name)
    return shape[0] if shape is not None and len(shape) == 2 else None


def _random(rng: np.random.Generator, shape: tuple[int, ...], where: str) -> np.ndarray:
    """Random float32 values in [-1, 1) of ``shape``, refused before allocating past
    :data:`MAX_FED`."""
    if len(shape) > 64 or math.prod(shape) > MAX_FED:
        raise FormatError(f"{where}: checking the network means feeding the graph values of "
                          f"shape {shape[:8]}, more than {MAX_FED:,}; the declared shapes are "
                          "not a real model's.")
    return rng.random(shape, dtype=np.float32) * 2 - 1


def _computed_shape(graph: _Search, feeds: Mapping[str, np.ndarray],
                    name: str) -> tuple[int, ...] | None:
    value = run(graph.scope, feeds, graph.where).get(name)
    return value.shape if isinstance(value, np.ndarray) else None


def _feeds(graph: _Search) -> dict[str, np.ndarray]:
    """Random values for the graph's inputs fed at run time (a named size taken as 2)."""
    return input_feeds(graph.scope, graph.where)


def input_feeds(scope: Scope, where: str, distinct: bool = False) -> dict[str, np.ndarray]:
    """Random values for the main graph's inputs fed at run time: floats in [-1, 1), zeros
    for the others; a named or unknown size taken as 2, or with ``distinct`` as 2, 3, 4 …
    one per name (so that a batch and a time axis differ)."""
    rng = np.random.default_rng(0)
    feeds, total = {}, 0
    named: dict[str, int] | None = {} if distinct else None
    for value in scope.loaded.graph.input:
        if value.name in scope.initializers:
            continue
        tensor = value.type.tensor_type
        dims = _dims(tensor, named)
        total += math.prod(dims)
        if total > MAX_FED or len(dims) > 64:
            raise FormatError(f"{where}: the graph's inputs (up to {value.name!r}, "
                              f"{dims[:8]}) take more than {MAX_FED:,} values; too large to "
                              "check the network it computes by running it.")
        feeds[value.name] = _random(rng, dims, where) \
            if tensor.elem_type in FLOAT_TYPES else np.zeros(dims, np.int64)
    return feeds


def _dims(tensor: Any, named: dict[str, int] | None = None,
          unknown: int = 2) -> tuple[int, ...]:
    """A tensor type's shape, a named or unknown size taken as ``unknown`` (or, given
    ``named``, a named one as the size it holds for that name, a new one for a new name)."""
    out = []
    for dim in tensor.shape.dim:
        if dim.HasField("dim_value") and dim.dim_value > 0:
            out.append(dim.dim_value)
        elif named is not None and dim.HasField("dim_param") and dim.dim_param:
            out.append(named.setdefault(dim.dim_param, 2 + len(named)))
        else:
            out.append(unknown)
    return tuple(out)


MAX_FED = 1 << 22  # values fed to the graph's inputs when running it
# Products (multiply-adds) one step of the work limit stands for when running a graph: a
# step elsewhere is a Python operation, about a microsecond, the time NumPy takes for these.
PRODUCTS_PER_STEP = 1024


def _scale(expected: np.ndarray) -> float:
    return max(1.0, float(np.max(np.abs(expected), initial=0.0)))


def _closest(graph: _Search, values: Mapping[str, Any], expected: np.ndarray) -> float:
    """The smallest largest difference between ``expected`` and a value of its shape."""
    return min((difference for _, difference in graph.differences(values, expected)),
               default=np.inf)


def _differs(what: str, closest: float) -> str:
    found = "no value of its shape" if closest == np.inf else \
        f"the closest differs by {closest:.2g}"
    return f"the graph computes no value equal to {what} ({found})"


# Operators run here beyond the folding ones: float arithmetic and the network's own.
def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None,
          attributes: Mapping[str, Any]) -> np.ndarray:
    if attributes.get("transA", 0):
        a = a.T
    if attributes.get("transB", 0):
        b = b.T
    out = float(attributes.get("alpha", 1.0)) * (a @ b)
    return out if c is None else out + float(attributes.get("beta", 1.0)) * c


ELEMENTWISE: dict[str, Callable[..., np.ndarray]] = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
    "MatMul": np.matmul, "Neg": np.negative, "Equal": np.equal, "Where": np.where,
    **{name: function((name, 0.0, 0.0)) for name in ("Sigmoid", "Tanh", "Relu")},
}


def run(scope: Scope, feeds: Mapping[str, np.ndarray], where: str,
        wanted: Iterable[str] | None = None) -> dict[str, Any]:
    """Every value of ``scope`` that :data:`RUN_OPS` compute from ``feeds`` and the
    constants, in the graph's order (with ``wanted``, only those the values named there
    are computed from); a node of another operator, and what depends on it, is skipped.
    ``feeds`` may name any value, which then takes the place of what the graph computes
    there. Values may take as much memory as the folding budget allows; each node run is
    counted against the ``work`` limit (:data:`RUN_STEPS` steps and one an input), and so
    are the products computed."""
    values: dict[str, Any] = dict(feeds)  # arrays, and lists for ONNX sequences
    budget = scope.loaded.budget + sum(int(value.nbytes) for value in feeds.values())
    needed = None if wanted is None else _ancestors(scope, wanted, feeds)
    work = scope.loaded.work
    with np.errstate(all="ignore"):
        for node in scope.nodes:
            if (needed is not None and id(node) not in needed) or \
                    node.domain not in ("", "ai.onnx") or node.op_type not in RUN_OPS or \
                    all(name in values for name in node.output if name):
                continue
            work.charge(RUN_STEPS + len(node.input), "running the graph to check the network "
                        "it computes")
            budget = _run_node(scope, node, values, feeds, budget, where)
    return values


def _run_node(scope: Scope, node: Any, values: dict[str, Any], feeds: Mapping[str, np.ndarray],
              budget: int, where: str) -> int:
    """One node of :func:`run`, its outputs added to ``values``; the budget left after."""
    arguments = _arguments(scope, node, values)
    if arguments is None:
        return budget  # an input the run could not compute
    try:
        outputs = _compute(scope, node, arguments, where, scope.label(node), budget)
    except (LimitError, TooManyPieces):  # BudgetError among them
        raise
    except RnnportError:
        return budget
    except (ValueError, TypeError, IndexError, AttributeError, ArithmeticError):
        return budget  # shapes that do not fit: the value is simply not there
    for name, value in outputs.items():
        if name in feeds:
            continue
        budget -= sum(int(item.nbytes) for item in _items(value))
        if budget < 0:
            raise exhausted(where, "running the graph to check the network it computes takes",
                            scope.loaded.stored, scope.loaded.limit - budget)
        values[name] = value
    return budget


def _ancestors(scope: Scope, names: Iterable[str], fed: Mapping[str, Any]) -> set[int]:
    """The nodes (by id) the values ``names`` are computed from, not past a value ``fed``."""
    return {id(scope.producers[name]) for name in _upstream(scope, names, fed)
            if name in scope.producers}


def _upstream(scope: Scope, names: Iterable[str], fed: Mapping[str, Any] | None = None
              ) -> set[str]:
    """The values ``names`` are computed from, themselves included, not past a value
    ``fed``; each node followed counted against the ``work`` limit."""
    pending, seen = list(names), set[str]()
    while pending:
        name = pending.pop()
        if name in seen or (fed is not None and name in fed):
            continue
        seen.add(name)
        node = scope.producers.get(name)
        if node is not None:
            scope.loaded.work.charge(1 + len(node.input), "finding what a check computes")
            pending.extend(item for item in node.input if item)
    return seen


class TooManyPieces(FormatError):
    """A sequence split into more pieces than any recurrent network has steps."""


def _items(value: Any) -> Iterable[np.ndarray]:
    return value if isinstance(value, list) else [value]


def _arguments(scope: Scope, node: Any, values: Mapping[str, Any]) -> list[Any] | None:
    arguments: list[Any] = []
    for name in node.input:
        if not name:
            arguments.append(None)
        elif name in values:
            arguments.append(values[name])
        elif name in scope.producers:
            return None
        else:
            constant = scope.constant(name)
            if constant is None:
                return None
            arguments.append(constant)
    return arguments


def _fits(shape: tuple[int, ...], budget: int, where: str, work: Meter | None = None,
          products: int = 1) -> None:
    """Refuse, before computing it, a result larger than the run may still take; count
    computing it against the ``work`` limit: its values, each the sum of ``products``
    products, :data:`PRODUCTS_PER_STEP` products a step."""
    if math.prod(shape) * 8 > budget:
        raise exhausted(where, f"running the graph to check the network it computes would "
                        f"make a value of shape {shape}", needed=math.prod(shape) * 8)
    if work is not None:
        work.charge(math.prod(shape) * products // PRODUCTS_PER_STEP,
                    f"computing a value of shape {shape} to check the network")


def _split_to_sequence(arguments: list[Any], attributes: Mapping[str, Any],
                       where: str) -> list[np.ndarray]:
    data = arguments[0]
    axis = int(attributes.get("axis", 0)) % max(data.ndim, 1)
    split = arguments[1] if len(arguments) > 1 else None
    if split is None:  # pieces of one, the axis dropped unless keepdims
        count = data.shape[axis]
    elif np.ndim(split) == 0:
        count = -(-data.shape[axis] // max(int(split), 1))
    else:
        count = len(split)
    if count > MAX_PIECES:
        raise TooManyPieces(f"{where}: SplitToSequence into {count:,} pieces; expected at most "
                          f"{MAX_PIECES:,} (a recurrent network's steps), so the graph is built "
                          "to exhaust the reader. Nothing was read.")
    if split is None:
        pieces = np.split(data, data.shape[axis], axis=axis)
        return pieces if attributes.get("keepdims", 1) else [np.squeeze(p, axis) for p in pieces]
    sizes = [int(split)] * count if np.ndim(split) == 0 else [int(size) for size in split]
    return np.split(data, np.cumsum(sizes)[:-1], axis=axis)


def _constant_of_shape(shape: np.ndarray, given: Mapping[str, Any], budget: int,
                       where: str) -> np.ndarray:
    """ConstantOfShape: ``value``'s one element (float32 zero by default) filling ``shape``."""
    from onnx import numpy_helper

    if shape.ndim != 1 or shape.dtype.kind not in "iu" or shape.size > 64 or (shape < 0).any():
        raise ValueError("not a shape")
    dims = tuple(int(dim) for dim in shape)
    value = given.get("value")
    if value is not None and (math.prod(int(dim) for dim in value.dims) != 1 or
                              value.data_location == 1 or len(value.external_data)):
        raise ValueError("not one stored value")  # checked before anything is decoded
    fill = np.zeros(1, np.float32) if value is None else numpy_helper.to_array(value)
    if fill.size != 1 or fill.dtype.kind not in "fiub":
        raise ValueError("not one number")
    _fits(dims, budget, where)
    return np.full(dims, fill.reshape(-1)[0], dtype=fill.dtype)


def _compute(scope: Scope, node: Any, arguments: list[Any], where: str,
             label: str, budget: int) -> dict[str, Any]:
    op = node.op_type
    if op == "SplitToSequence":
        return {node.output[0]: _split_to_sequence(arguments, attributes(node, label), where)}
    if op == "SequenceAt":
        return {node.output[0]: arguments[0][int(arguments[1])]}
    if op == "ConstantOfShape":  # the zero state a model makes for the batch it is given
        return {node.output[0]: _constant_of_shape(arguments[0], attributes(node, label),
                                                   budget, where)}
    if op == "Constant":
        value = scope.constant(node.output[0])
        return {} if value is None else {node.output[0]: value}
    if op == "Dropout":  # inference: the identity, unless asked to train
        if len(arguments) > 2 and arguments[2] is not None and np.any(arguments[2]):
            raise ValueError("training_mode")
        return {node.output[0]: arguments[0]}
    if op == "Flatten":
        data = arguments[0]
        axis = int(attributes(node, label).get("axis", 1))
        axis = axis + data.ndim if axis < 0 else axis
        return {node.output[0]: data.reshape(math.prod(data.shape[:axis]),
                                             math.prod(data.shape[axis:]))}
    work = scope.loaded.work
    if op == "Gemm":
        a, b, *rest = arguments
        given = attributes(node, label)
        _fits((a.shape[1] if given.get("transA", 0) else a.shape[0],
               b.shape[0] if given.get("transB", 0) else b.shape[1]), budget, where, work,
              a.shape[0] if given.get("transA", 0) else a.shape[-1])
        return {node.output[0]: _gemm(a, b, rest[0] if rest else None, given)}
    if op in ELEMENTWISE and (op not in FOLDABLE or any(
            argument is not None and argument.dtype.kind == "f" for argument in arguments)):
        operands = [a for a in arguments if a is not None]
        if op == "MatMul":
            a, b = (np.atleast_2d(operand) for operand in operands)
            _fits((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]),
                  budget, where, work, a.shape[-1])
        else:
            _fits(np.broadcast_shapes(*(operand.shape for operand in operands)), budget, where,
                  work)
        return {node.output[0]: np.asarray(ELEMENTWISE[op](*operands))}
    return {name: fold(node, arguments, name, where, label, budget)
            for name in node.output if name}
