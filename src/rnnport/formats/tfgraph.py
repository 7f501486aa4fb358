"""Frozen TensorFlow graphs: a ``GraphDef`` (``.pb``) whose weights are ``Const`` nodes.

Read with NumPy alone (:mod:`rnnport.io.tfproto`); TensorFlow is never imported to read.
A source is a ``.pb`` path, the serialized bytes, a decoded
:class:`rnnport.io.tfproto.GraphDef`, or what :func:`write` returns (a :class:`FrozenGraph`).

What a frozen graph holds, and how each kind is read::

    TF1 cells (dynamic_rnn, MultiRNNCell, stack_bidirectional_dynamic_rnn …)
        each variable a Const under its variable's name (rnn/lstm_cell/kernel …), read
        through <name>/read or <name>/Read/ReadVariableOp; the loop a TF1 while (Enter/
        Merge/Switch) or a functional While/StatelessWhile whose body is in library.function.
        → the tf1 reader, given the Consts as a dict name → array (scope= picks a network).
        LSTMCell's forget_bias and cell_clip are no attributes: they are scalar Consts in the
        cell's step, Add/AddV2(<cell>/split:2, a scalar Const) and clip_by_value's Minimum/y;
        a BasicRNNCell's relu is a Relu node. A While body's nodes are named under the calling
        While's scope. They are recovered from there when every cell of the network agrees,
        else the tf1 defaults are taken and ``notes`` says so; a step no one cell can claim,
        or a While whose body the library lacks, is refused unless the options are given.
    BlockLSTM (tf.contrib.rnn.LSTMBlockFusedCell)
        inputs seq_len_max, x (time-major), cs_prev, h_prev, w [I+H, 4H] gates i c f o,
        wci, wcf, wco, b; attrs forget_bias (1.0), cell_clip (3.0; ≤ 0: none), use_peephole.
    BlockLSTMV2      the same, gates i f c o, no forget_bias, cell_clip 0.0 (none) by default.
    LSTMBlockCell    one step: x, cs_prev, h_prev, w, wci, wcf, wco, b; attributes as BlockLSTM.
    GRUBlockCell     one step: x, h_prev, w_ru [I+H, 2H] (r, u), w_c [I+H, H], b_ru, b_c;
                     r, u = σ([x, h]·w_ru + b_ru), c = tanh([x, r∘h]·w_c + b_c),
                     h' = u∘h + (1−u)∘c: TF1's GRUCell, a reset-before GRU.
    CudnnRNN, CudnnRNNV2, CudnnRNNV3
        inputs input, input_h (layers·directions, batch, H), input_c, params (one opaque
        cuDNN buffer, double biases), [sequence_lengths]; attrs rnn_mode, input_mode,
        direction, num_proj (V3). → the cudnn format, its shape solved from the buffer's size
        and what the attributes and the static shapes of input_h and input tell
        (:func:`rnnport.formats.cudnn.one_shape`); ``hidden_size=``, ``num_layers=``,
        ``input_size=`` settle what they leave open.

A per-step op (LSTMBlockCell, GRUBlockCell) whose weights carry TF1 cell names is that TF1
network; its attributes give the forget bias and clip. Other fused ops are networks of their
own, picked by ``node=`` (their node's name); TF1 networks by ``scope=``. Weights that come
from anything but a Const (a variable: the graph is not frozen) are refused by name.

What a read may cost follows the file's size (:mod:`rnnport.budget`): each Const's array is
made once, however many nodes read it, and what it takes beyond the file's bytes (a short
``float_val`` repeated to fill its shape) is charged to the ``expansion`` limit before it is
made; following inputs back (each name once) and matching cells' steps to their cells
(through a trie of the cells' scopes, each step's path once) count against ``work``. A
size is taken only from integer Consts: NaN, text or a vector there tells no size.

Writing (:func:`write`) builds a graph TensorFlow runs: Placeholder ``x`` (batch, time,
input), Identity ``y`` (batch, time, D·H_out) and ``h_n``/``c_n`` (layers·D, batch, ·),
weights as Consts under TF1 variable names (the tf1 writer's), one functional ``While`` per
layer and direction whose body computes one step of the TF1 cell.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import budget
from ..errors import AmbiguousSourceError, FormatError, RnnportError, UnsupportedFeatureError
from ..gates import reorder
from ..io import tfproto
from ..io.inputs import read_file
from ..model import Model, as_float_array
from ..spec import Spec
from ._common import close_matches, describe, is_path, listed
from ._protocol import Choices, Format, RunTimeConstant, Suffix
from ._tensorflow import run_job

__all__ = ["FORMAT", "FrozenGraph", "read", "write"]

SUFFIX = ".pb"
READ_OPTIONS = frozenset({"scope", "node", "forget_bias", "cell_clip", "activation",
                          "hidden_size", "num_layers", "bidirectional", "input_size", "rnn_mode"})
WRITE_OPTIONS = frozenset({"scope", "forget_bias"})

# Ops a weight reaches its consumer through, in frozen graphs.
PASS_THROUGH = frozenset({"Identity", "Enter", "ReadVariableOp", "Snapshot", "StopGradient",
                          "RefIdentity"})
VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp", "VarIsInitializedOp"})
# Fused op → indices of its weight inputs.
BLOCK_LSTM = {"BlockLSTM": (4, 5, 6, 7, 8), "BlockLSTMV2": (4, 5, 6, 7, 8),
              "LSTMBlockCell": (3, 4, 5, 6, 7)}
GRU_BLOCK = {"GRUBlockCell": (2, 3, 4, 5), "GRUBlockCellV2": (2, 3, 4, 5)}
CUDNN = frozenset({"CudnnRNN", "CudnnRNNV2", "CudnnRNNV3"})
FUSED = frozenset({*BLOCK_LSTM, *GRU_BLOCK, *CUDNN})
# Attribute defaults of the ops (TensorFlow 2.21's op registrations).
FORGET_BIAS_DEFAULT = {"BlockLSTM": 1.0, "LSTMBlockCell": 1.0, "BlockLSTMV2": 0.0}
CELL_CLIP_DEFAULT = {"BlockLSTM": 3.0, "LSTMBlockCell": 3.0, "BlockLSTMV2": 0.0}
RNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")
# Ops that call library functions → the attributes naming them.
CALLS = {"While": ("body", "cond"), "StatelessWhile": ("body", "cond"),
         "PartitionedCall": ("f",), "StatefulPartitionedCall": ("f",)}
# A weight Const under its read's name: grappler folds <variable>/read into a Const.
READ_SUFFIX = re.compile(r"/(?:read|Read/Identity|Read/ReadVariableOp)$")
# tf_keras layers frozen from a TF2 tf.function: <layer>/Read[_k]/ReadVariableOp/resource.
KERAS_TF2 = re.compile(r"/Read(?:_\d+)?/ReadVariableOp/resource$")
# What a TF1 cell's step graph holds that its variables do not, by cell scope name.
STEP_OPTIONS = {"lstm_cell": ("forget_bias", "cell_clip"), "basic_lstm_cell": ("forget_bias",),
                "basic_rnn_cell": ("activation",)}


class FrozenGraph(dict):
    """What :func:`write` returns: the weights, Const name → array (the arrays the graph
    holds, so comparing two is comparing their weights), and ``serialized``, the GraphDef's
    bytes (``bytes(frozen)``)."""

    serialized: bytes = b""

    def __bytes__(self) -> bytes:
        return self.serialized


# -- the graph ----------------------------------------------------------------------------


class _Graph:
    """A decoded GraphDef with its nodes by (function, name) and a way to follow an input
    back to the Const it reads."""

    def __init__(self, source: Any) -> None:
        if isinstance(source, FrozenGraph):
            self.where = "frozen graph"
            self.graph = tfproto.decode_graph_def(source.serialized, where=self.where)
            size = len(source.serialized)
        elif is_path(source):
            self.where = os.fspath(source)
            self.graph = tfproto.read_graph_def(source)
            size = os.stat(source).st_size
        elif isinstance(source, (bytes, bytearray, memoryview)):
            self.where = "GraphDef bytes"
            self.graph = tfproto.decode_graph_def(source, where=self.where)
            size = memoryview(source).nbytes
        elif isinstance(source, tfproto.GraphDef):
            self.where = "GraphDef"
            self.graph = source
            size = sum(_stored(node) for _, node in source.all_nodes())
        else:
            raise FormatError(f"read(fmt='tfgraph'): expected a frozen graph (a .pb path, its "
                              f"bytes or an rnnport.io.tfproto.GraphDef); got {describe(source)}.")
        # What one read may build (the Consts' arrays: a short typed list is filled out to its
        # shape) and do (inputs followed, cell steps matched), both in proportion to the file.
        self.arrays = budget.Meter("expansion", size, self.where, "bytes of Const arrays")
        self.work = budget.Meter("work", size, self.where, "steps (graph inputs followed back, "
                                 "cell steps matched to cells)")
        self.sources: dict[tuple[str, str], tuple[str, tfproto.NodeDef] | None] = {}
        self.arguments: dict[str, dict[str, int]] = {}
        self.nodes: dict[tuple[str, str], tfproto.NodeDef] = {}
        for function, node in self.graph.all_nodes():
            self.nodes[function, node.name] = node
        self.functions = {f.signature.name: f for f in self.graph.library.function}
        # body function → the While nodes that call it (to follow a function's arguments out).
        self.callers: dict[str, list[tfproto.NodeDef]] = {}
        # function → (the function its caller is in, the caller), from every graph level.
        calls: dict[str, list[tuple[str, tfproto.NodeDef]]] = {}
        # "node 'x' (While) calls body 'f'" for each function the library lacks.
        self.missing: list[str] = []
        for function, node in self.graph.all_nodes():
            for key in CALLS.get(node.op, ("body", "cond")):
                attr = node.attr.get(key)
                if attr is None or not isinstance(attr.value, tfproto.NameAttrList):
                    continue
                name = attr.value.name
                if name not in self.functions and node.op in CALLS:
                    self.missing.append(f"node {node.name!r} ({node.op}) calls {key} {name!r}")
                calls.setdefault(name, []).append((function, node))
                if not function:
                    self.callers.setdefault(name, []).append(node)
        self.scopes = _scopes(calls)

    def consts(self) -> dict[str, tfproto.TensorValue]:
        """The main graph's Const tensors by name."""
        out = {}
        for node in self.graph.node:
            value = node.attr.get("value")
            if node.op == "Const" and value is not None and isinstance(value.value,
                                                                       tfproto.TensorValue):
                out[node.name] = value.value
        return out

    def source(self, function: str, ref: str) -> tuple[str, tfproto.NodeDef] | None:
        """The node an input ``ref`` of a node in ``function`` reads, past Identity, Enter
        and variable reads, and out of a While body through its caller's inputs. Every name
        passed on the way is remembered with the answer, so a chain many nodes read is
        followed once; each step is counted against the ``work`` limit."""
        passed: list[tuple[str, str]] = []
        found: tuple[str, tfproto.NodeDef] | None = None
        for _ in range(1000):  # a cycle of Identities is damage, not a loop to follow
            name = ref.lstrip("^").split(":")[0]
            if (function, name) in self.sources:
                found = self.sources[function, name]
                break
            self.work.charge(1, f"following {name!r} back")
            passed.append((function, name))
            node = self.nodes.get((function, name))
            if node is None and function:
                callers = self.callers.get(function, [])
                index = self._argument(function, name)
                if index is None or len(callers) != 1 or index >= len(callers[0].input):
                    break
                function, ref = "", callers[0].input[index]
                continue
            if node is None:
                break
            if node.op in PASS_THROUGH and node.input:
                ref = node.input[0]
                continue
            found = function, node
            break
        for key in passed:
            self.sources[key] = found
        return found

    def _argument(self, function: str, name: str) -> int | None:
        """The position of argument ``name`` of ``function``'s signature (None: not one)."""
        positions = self.arguments.get(function)
        if positions is None:
            arguments = self.functions[function].signature.input_arg
            self.work.charge(len(arguments), f"indexing function {function!r}'s arguments")
            positions = self.arguments[function] = {}
            for index, argument in enumerate(arguments):
                positions.setdefault(argument.name, index)
        return positions.get(name)

    def array(self, node: tfproto.NodeDef) -> np.ndarray:
        """A Const node's array, made once and paid for against the ``expansion`` limit."""
        return _value(node).numpy(meter=self.arrays)

    def const(self, function: str, ref: str, where: str) -> np.ndarray:
        """The array of the Const that input ``ref`` reads; anything else is refused."""
        found = self.source(function, ref)
        if found is None:
            raise FormatError(f"{self.where}: {where} reads {ref!r}, which is not in the graph; "
                              "expected a Const (a frozen weight). The graph is incomplete.")
        node = found[1]
        if node.op != "Const":
            frozen = (" The graph is not frozen: convert its variables to Consts first "
                      "(tf.compat.v1.graph_util.convert_variables_to_constants)."
                      if node.op in VARIABLE_OPS else "")
            raise UnsupportedFeatureError(
                f"{self.where}: {where} comes from node {node.name!r}, a {node.op} op; expected "
                f"a Const holding the weight, which rnnport reads.{frozen}")
        return as_float_array(self.array(node), f"{self.where}: {node.name}")

    def shape(self, function: str, ref: str) -> tuple[int, ...] | None:
        """The static shape of input ``ref`` (-1 unknown) where a Const, a Placeholder's
        ``shape`` or a Fill of Const dimensions tells it; else None."""
        found = self.source(function, ref)
        if found is None:
            return None
        function, node = found
        if node.op == "Const":
            return tuple(_value(node).shape)
        if node.op in ("Placeholder", "PlaceholderWithDefault"):
            shape = node.attr.get("shape")
            return tuple(shape.value) if shape is not None and isinstance(shape.value, tuple) \
                else None
        if node.op == "Fill" and node.input:
            dims = self.source(function, node.input[0])
            if dims is None:
                return None
            if dims[1].op == "Const":
                sizes = self._integers(dims[1])
                return None if sizes is None or sizes.ndim > 1 else tuple(sizes.tolist())
            if dims[1].op == "Pack":
                out = []
                for item in dims[1].input:
                    part = self.source(dims[0], item)
                    size = None if part is None or part[1].op != "Const" else \
                        self._integers(part[1])
                    out.append(int(size) if size is not None and size.ndim == 0 else -1)
                return tuple(out)
        return None

    def _integers(self, node: tfproto.NodeDef) -> np.ndarray | None:
        """A Const of integers (a shape's sizes), or None when it holds anything else
        (floats, NaN among them, strings, more than a shape's sizes): no size is known then."""
        value = _value(node)
        if value.dtype_name not in ("DT_INT32", "DT_INT64") or value.size > tfproto.MAX_RANK:
            return None
        return self.array(node)


def _scopes(calls: Mapping[str, list[tuple[str, tfproto.NodeDef]]]) -> dict[str, str]:
    """Function → the name scope its nodes run in: its caller's name (a While's
    ``bidirectional_rnn/fw/fw/while``), under its own caller's scope when the caller is itself
    in a function. A function whose callers disagree has none: its nodes' names are all."""
    # Each function is settled once, when the last function calling it is (a cycle never is):
    # linear in the calls, however the library nests.
    waiting = {function: {outer for outer, _ in callers if outer}
               for function, callers in calls.items()}
    called_from: dict[str, list[str]] = {}
    for function, outers in waiting.items():
        for outer in outers:
            called_from.setdefault(outer, []).append(function)
    scopes: dict[str, str] = {}
    ready = [function for function, outers in waiting.items() if not outers]
    while ready:
        function = ready.pop()
        found = {"/".join(part for part in (scopes.get(outer, ""), node.name) if part)
                 for outer, node in calls[function]}
        if len(found) != 1:
            continue
        scopes[function] = found.pop()
        for inner in called_from.get(function, ()):
            left = waiting[inner]  # each (caller, callee) pair is listed once
            left.discard(function)
            if not left:
                ready.append(inner)
    return scopes


def _stored(node: tfproto.NodeDef) -> int:
    """The bytes a node's tensor holds as decoded (a decoded GraphDef's size, near enough)."""
    attr = node.attr.get("value")
    if attr is None or not isinstance(attr.value, tfproto.TensorValue):
        return 64
    return 64 + attr.value.stored_bytes


def _value(node: tfproto.NodeDef) -> tfproto.TensorValue:
    """A Const node's tensor."""
    attr = node.attr.get("value")
    if attr is None or not isinstance(attr.value, tfproto.TensorValue):
        raise FormatError(f"Const node {node.name!r}: no tensor in its value attribute; the "
                          "graph is damaged.")
    return attr.value


def _text(node: tfproto.NodeDef, name: str, default: str) -> str:
    attr = node.attr.get(name)
    if attr is None or attr.kind != "s":
        return default
    return bytes(attr.value).decode("utf-8", "replace")  # type: ignore[arg-type]


def _real(node: tfproto.NodeDef, name: str, default: float) -> float:
    attr = node.attr.get(name)
    return float(attr.value) if attr is not None and attr.kind == "f" else default  # type: ignore[arg-type]


def _integer(node: tfproto.NodeDef, name: str, default: int) -> int:
    attr = node.attr.get(name)
    return int(attr.value) if attr is not None and attr.kind == "i" else default  # type: ignore[arg-type]


def _flag(node: tfproto.NodeDef, name: str, default: bool) -> bool:
    attr = node.attr.get(name)
    return bool(attr.value) if attr is not None and attr.kind == "b" else default


# -- the networks a graph holds -------------------------------------------------------------


@dataclass
class _Found:
    """Everything a read of a graph needs: the TF1 weights, the fused-op networks, and what
    the cells' step graphs say about forget_bias, cell_clip and activation per cell."""

    graph: _Graph
    weights: dict[str, np.ndarray]  # TF1-named candidates: float Consts not used by a fused op
    fused: list[tuple[str, tfproto.NodeDef]]  # (function, node) of networks of their own
    evidence: dict[str, dict[str, set[float | str]]]  # cell base → option → values seen
    used: set[str]  # Consts read by the fused networks
    # step-graph values no one cell's name claims: (option, value, the cells it may be).
    unattributed: list[tuple[str, float | str, frozenset[str]]]


def _cell_bases(names: Any) -> list[str]:
    from .tf1 import _VARIABLE

    bases = []
    for name in names:
        match = _VARIABLE.match(name)
        if match:
            bases.append(name[:len(name) - len(match["var"]) - 1])
    return list(dict.fromkeys(bases))


class _Cells:
    """The TF1 cells (variable bases) a node path of a cell's step may belong to: those
    whose scope names all appear in the path in order, ending with the cell's own name
    (``rnn/while/rnn/multi_rnn_cell/cell_0/lstm_cell`` → ``rnn/multi_rnn_cell/cell_0/lstm_cell``);
    else, for a function's names no caller scopes (``lstm_cell``), the cells they end. One
    cell is an answer; several, or none, are not.

    The bases are kept in a trie of their scope names, so a path is matched by walking it
    once (the trie's nodes its names reach so far), not against every cell: a graph of
    many cells and many steps costs their sum, not their product. Each path is matched
    once; the steps are counted against the ``work`` limit."""

    END = "/"  # a trie node's key for the base ending there (no scope name holds a "/")

    def __init__(self, bases: list[str], work: budget.Meter) -> None:
        self.work = work
        self.trie: dict[str, Any] = {}
        self.suffixes: dict[tuple[str, ...], list[str]] = {}
        self.matched: dict[str, list[str]] = {}
        for base in bases:
            pieces = base.split("/")
            work.charge(len(pieces), "indexing the cells' scopes")
            node = self.trie
            for piece in pieces:
                node = node.setdefault(piece, {})
            node.setdefault(self.END, base)
            for start in range(len(pieces)):
                self.suffixes.setdefault(tuple(pieces[start:]), []).append(base)

    def match(self, path: str) -> list[str]:
        found = self.matched.get(path)
        if found is None:
            found = self.matched[path] = self._match(path)
        return found

    def _match(self, path: str) -> list[str]:
        parts = [part for part in path.split("/") if part != "while"]
        if not parts:
            return []
        # The trie nodes the names so far reach, as a subsequence, each once.
        reached: dict[int, dict[str, Any]] = {id(self.trie): self.trie}
        for part in parts:
            self.work.charge(len(reached), "matching the cells' steps to cells")
            for node in [node[part] for node in reached.values() if part in node]:
                reached.setdefault(id(node), node)
        full = {node[self.END] for node in reached.values() if self.END in node}
        ending = [base for base in full if base.rpartition("/")[2] == parts[-1]]
        return ending or list(self.suffixes.get(tuple(parts), []))


def _is_forget_bias(graph: _Graph, function: str, node: tfproto.NodeDef) -> float | None:
    """The forget bias an Add/AddV2 adds: the node adds a scalar float Const to output 2 (gate
    f) of a 4-way Split, as LSTMCell (``lstm_cell/add``) and BasicLSTMCell
    (``basic_lstm_cell/Add``) do; else None."""
    if node.op not in ("AddV2", "Add") or len(node.input) != 2:
        return None
    for gate, other in (node.input, reversed(node.input)):
        split = graph.nodes.get((function, gate.split(":")[0]))
        output = gate.rsplit(":", 1)[-1] if ":" in gate else "0"
        if split is not None and split.op == "Split" and output == "2" \
                and _integer(split, "num_split", 4) == 4:
            value = _scalar(graph, function, other)
            if value is not None:
                return value
    return None


def _scalar(graph: _Graph, function: str, ref: str) -> float | None:
    found = graph.source(function, ref)
    if found is None or found[1].op != "Const":
        return None
    value = _value(found[1])
    if value.size != 1 or value.dtype_name not in ("DT_FLOAT", "DT_DOUBLE", "DT_HALF"):
        return None
    return float(graph.array(found[1]).ravel()[0])


def _find(source: Any) -> _Found:
    graph = _Graph(source)
    consts = graph.consts()
    # grappler folds a variable's read into a Const of the read's name: the variable's value.
    renamed = {name: READ_SUFFIX.sub("", name) for name in consts}
    renamed = {name: new if new not in consts and _cell_bases([new]) else name
               for name, new in renamed.items()}
    consts = {renamed[name]: value for name, value in consts.items()}
    bases = _cell_bases(consts)
    evidence: dict[str, dict[str, set[float | str]]] = {}
    unattributed: list[tuple[str, float | str, frozenset[str]]] = []
    fused: list[tuple[str, tfproto.NodeDef]] = []
    used: set[str] = set()

    cells = _Cells(bases, graph.work)
    takes = {option: {base for base in bases if option in STEP_OPTIONS.get(base.rpartition("/")[2],
                                                                            ())}
             for option in ("forget_bias", "cell_clip", "activation")}

    def note(path: str, option: str, value: float | str) -> None:
        candidates = [base for base in cells.match(path) if base in takes[option]]
        if len(candidates) == 1:
            evidence.setdefault(candidates[0], {}).setdefault(option, set()).add(value)
        elif takes[option]:  # a step seen, but whose: reading must not guess (see _recovered)
            unattributed.append((option, value, frozenset(candidates or takes[option])))

    for function, node in graph.graph.all_nodes():
        scope = graph.scopes.get(function, "")
        path = f"{scope}/{node.name}" if scope else node.name
        forget_bias = _is_forget_bias(graph, function, node)
        if forget_bias is not None:
            note(path.rpartition("/")[0], "forget_bias", forget_bias)
        elif node.op == "Minimum" and node.name.endswith("/clip_by_value/Minimum") \
                and len(node.input) == 2:
            value = _scalar(graph, function, node.input[1])
            if value is not None:
                note(path[:-len("/clip_by_value/Minimum")], "cell_clip", value)
        elif node.op in ("Relu", "Tanh") and node.name.rpartition("/")[0].endswith(
                "basic_rnn_cell"):
            note(path.rpartition("/")[0], "activation", node.op.lower())
        elif node.op in FUSED:
            inputs = (3,) if node.op in CUDNN else (BLOCK_LSTM.get(node.op)
                                                    or GRU_BLOCK[node.op])
            names = []
            for index in inputs:
                if index >= len(node.input):
                    raise FormatError(f"{graph.where}: node {node.name!r} ({node.op}) has "
                                      f"{len(node.input)} inputs; expected at least "
                                      f"{max(inputs) + 1}. The graph is damaged.")
                found = graph.source(function, node.input[index])
                names.append(renamed.get(found[1].name, found[1].name)
                             if found is not None and not found[0] else None)
            kernel = names[0]
            step = node.op in ("LSTMBlockCell", "GRUBlockCell", "GRUBlockCellV2")
            if step and kernel is not None and kernel in consts and _cell_bases([kernel]):
                base = _cell_bases([kernel])[0]
                if node.op == "LSTMBlockCell":
                    evidence.setdefault(base, {}).setdefault("forget_bias", set()).add(
                        _real(node, "forget_bias", 1.0))
                    clip = _real(node, "cell_clip", 3.0)
                    evidence[base].setdefault("cell_clip", set()).add(clip if clip > 0 else "none")
                continue
            fused.append((function, node))
            used.update(name for name in names if name is not None)
    weights = {name: value.numpy(meter=graph.arrays) for name, value in consts.items()
               if name not in used and value.dtype_name in ("DT_FLOAT", "DT_DOUBLE", "DT_HALF",
                                                            "DT_BFLOAT16")
               and len(value.shape) >= 1}
    return _Found(graph, weights, fused, evidence, used, unattributed)


@dataclass(frozen=True)
class _Network:
    option: str  # "scope" (TF1 names) or "node" (a fused op)
    value: str
    what: str


def _tf1_networks(found: _Found) -> list[dict[str, Any]]:
    from . import tf1

    if not found.weights or not (_cell_bases(found.weights) or any(
            name.endswith("/opaque_kernel") for name in found.weights)):
        return []
    return tf1.networks(found.weights)


def _all(found: _Found) -> list[_Network]:
    out = []
    for entry in _tf1_networks(found):
        cells = ", ".join(str(cell) for cell in entry["cells"])
        what = (f"a CudnnRNN opaque buffer ({cells})" if entry["layers"] is None else
                f"{entry['structure']}, {entry['layers']} layer(s) of {cells}")
        out.append(_Network("scope", entry["scope"], what))
    for _, node in found.fused:
        out.append(_Network("node", node.name, f"a {node.op} node"))
    return out


def _listing(networks: list[_Network], shown: int = 20) -> str:
    """The networks, one a line (the first ``shown`` of them: a graph may hold thousands)."""
    lines = [f"  - {network.option}={network.value!r}: {network.what}"
             for network in networks[:shown]]
    if len(networks) > shown:
        lines.append(f"  … and {len(networks) - shown:,} more")
    return "\n".join(lines)


def _choose(found: _Found, options: Mapping[str, Any]) -> _Network:
    networks = _all(found)
    where = found.graph.where
    if not networks:
        keras = sorted(name for name, value in found.graph.consts().items()
                       if KERAS_TF2.search(name) and value.shape)
        if keras:
            raise UnsupportedFeatureError(
                f"{where}: weights named like a Keras layer frozen from a TF2 tf.function "
                f"({listed(keras)}); rnnport does not recognise Keras layers in a frozen graph "
                "(their names no longer say which weight is which); expected TF1 cell "
                "variables or a fused recurrent op. Read the model's SavedModel or checkpoint "
                "instead: rnnport.read(path, fmt='tf2').")
        ops = sorted({node.op for _, node in found.graph.graph.all_nodes()})
        raise FormatError(
            f"{where}: no recurrent network found; expected Consts named like TF1 cell variables "
            "(…/lstm_cell/kernel, …/gru_cell/gates/kernel, …/opaque_kernel) or a BlockLSTM, "
            "BlockLSTMV2, LSTMBlockCell, GRUBlockCell or CudnnRNN* node with Const weights. "
            f"Its ops: {listed(ops)}.")
    node, scope = options.get("node"), options.get("scope")
    for key, value in (("node", node), ("scope", scope)):
        if value is not None and not isinstance(value, str):
            raise FormatError(f"read(fmt='tfgraph'): {key}={value!r}; expected a string.")
    if node is not None:
        chosen = [n for n in networks if n.option == "node" and n.value == node.strip("/")]
        if len(chosen) != 1:
            hint = close_matches(node, [n.value for n in networks if n.option == "node"])
            raise FormatError(f"{where}: no fused recurrent node named {node!r}.{hint} The "
                              f"networks here:\n{_listing(networks)}")
        return chosen[0]
    if scope is not None:
        scope = scope.strip("/")
        chosen = [n for n in networks if n.value == scope or n.value.startswith(f"{scope}/")
                  or (n.option == "scope" and scope.startswith(f"{n.value}/"))]
        exact = [n for n in chosen if n.value == scope]
        chosen = exact or chosen
        if len(chosen) == 1:
            return chosen[0]
        if not chosen:
            hint = close_matches(scope, [n.value for n in networks])
            raise FormatError(f"{where}: no recurrent network under scope={scope!r}.{hint} The "
                              f"networks here:\n{_listing(networks)}")
        raise AmbiguousSourceError(f"{where}: scope={scope!r} matches {len(chosen)} networks; "
                                   f"pass a longer one:\n{_listing(chosen)}")
    if len(networks) == 1:
        return networks[0]
    raise AmbiguousSourceError(f"{where}: holds {len(networks)} recurrent networks; pass scope= "
                               f"(TF1 names) or node= (a fused op) to pick one:\n"
                               f"{_listing(networks)}")


# -- read ---------------------------------------------------------------------------------


def read(source: Any, **options: Any) -> Model:
    """The network a frozen graph holds (see the module's docstring)."""
    found = _find(source)
    network = _choose(found, options)
    if network.option == "scope":
        return _read_tf1(found, network, options)
    function, node = next((f, n) for f, n in found.fused if n.name == network.value)
    _refuse(options, ("scope", "node", *(("hidden_size", "num_layers", "input_size",
                                          "bidirectional", "rnn_mode") if node.op in CUDNN
                                         else ("forget_bias", "cell_clip"))),
            f"{found.graph.where}: node {node.name!r} ({node.op})")
    if node.op in CUDNN:
        return _read_cudnn(found.graph, function, node, options)
    if node.op in BLOCK_LSTM:
        return _read_block_lstm(found.graph, function, node, options)
    return _read_gru_block(found.graph, function, node)


def _refuse(options: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    given = [key for key, value in options.items() if value is not None and key not in allowed]
    if given:
        raise FormatError(f"{where}: option(s) {', '.join(given)} do not apply to this network "
                          f"(it takes {', '.join(allowed)}); drop them.")


def _network_bases(found: _Found, scope: str) -> list[str]:
    bases = _cell_bases(found.weights)
    return [base for base in bases if not scope or base == scope or base.startswith(f"{scope}/")]


def _recovered(found: _Found, scope: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """forget_bias, cell_clip and activation as the cells' step graphs give them: the one
    value every cell of the network that shows it agrees on (None where none shows it).
    Options given are not looked for; one the graph holds for cells it cannot tell apart
    (steps named ``lstm_cell/add`` of two networks) is asked for, not guessed."""
    out: dict[str, Any] = {}
    bases = _network_bases(found, scope)
    _check_complete(found, bases, options)
    for option in ("forget_bias", "cell_clip", "activation"):
        if option in options:
            continue
        values: set[float | str] = set()
        for base in bases:
            values |= found.evidence.get(base, {}).get(option, set())
        for what, value, candidates in found.unattributed:
            if what != option or not candidates & set(bases):
                continue
            if not candidates <= set(bases):
                cells = ", ".join(sorted(candidates))
                raise FormatError(
                    f"{found.graph.where}: the graph's cell steps hold a {option} "
                    f"({value}) that rnnport cannot attribute to one cell: its nodes' names "
                    f"fit {cells}, and not only the network under scope {scope!r}; expected "
                    "each step under its cell's scope. Pass forget_bias= and cell_clip= "
                    "(as the cells were built) to read the weights anyway.")
            values.add(value)
        if len(values) > 1:
            raise UnsupportedFeatureError(
                f"{found.graph.where}: the cells under scope {scope!r} use different {option} "
                f"values ({', '.join(map(str, sorted(values, key=str)))}); rnnport's TF1 reader "
                "takes one per network. Read each layer's cells with scope= and pass "
                f"{option}= explicitly.")
        if values:
            out[option] = values.pop()
    if out.get("cell_clip") == "none":
        out["cell_clip"] = None
    return out


def _check_complete(found: _Found, bases: list[str], options: Mapping[str, Any]) -> None:
    """Refuse a graph whose library lacks a function a node calls (``remove_training_nodes``
    drops it), unless every step option its cells take was given."""
    if not found.graph.missing:
        return
    kinds = {base.rpartition("/")[2] for base in bases}
    wanted = [option for option in ("forget_bias", "cell_clip", "activation")
              if any(option in STEP_OPTIONS.get(kind, ()) for kind in kinds)]
    lacking = [option for option in wanted if option not in options]
    if lacking:
        raise FormatError(
            f"{found.graph.where}: {'; '.join(found.graph.missing)}, which its library does "
            "not hold: the graph is incomplete: its cell step, which holds forget_bias and "
            "cell_clip, is missing; pass " + " and ".join(f"{option}=" for option in lacking)
            + " to read the weights anyway (or freeze the graph with its function library).")


def _read_tf1(found: _Found, network: _Network, options: Mapping[str, Any]) -> Model:
    from . import tf1

    taken = {key: value for key, value in options.items() if key != "node" and value is not None}
    taken["scope"] = network.value
    is_opaque = network.what.startswith("a CudnnRNN")
    if not is_opaque:
        for key, value in _recovered(found, network.value, options).items():
            if value is not None:
                taken.setdefault(key, value)
        kinds = {base.rpartition("/")[2] for base in _network_bases(found, network.value)}
        if not kinds & {"lstm_cell", "basic_lstm_cell"}:
            taken.pop("forget_bias", None) if "forget_bias" not in options else None
        if "lstm_cell" not in kinds:
            taken.pop("cell_clip", None) if "cell_clip" not in options else None
    return tf1.FORMAT.read(found.weights, **taken)


def _read_block_lstm(graph: _Graph, function: str, node: tfproto.NodeDef,
                     options: Mapping[str, Any]) -> Model:
    from . import tf1

    where = f"node {node.name!r} ({node.op})"
    names = ("kernel", "w_i_diag", "w_f_diag", "w_o_diag", "bias")
    arrays = {name: graph.const(function, node.input[index], f"{where} input {index} ({name})")
              for name, index in zip(names, BLOCK_LSTM[node.op], strict=True)}
    kernel = arrays["kernel"]
    if kernel.ndim != 2 or kernel.shape[1] % 4:
        raise FormatError(f"{graph.where}: {where}: w has shape {list(kernel.shape)}; expected "
                          "[input + units, 4·units].")
    if node.op == "BlockLSTMV2":  # gates i f c o → TF1's i c(j) f o
        kernel = reorder(kernel, "ifgo", "igfo", axis=1)
        arrays["bias"] = reorder(arrays["bias"], "ifgo", "igfo")
    variables = {"lstm_cell/kernel": kernel, "lstm_cell/bias": arrays["bias"]}
    if _flag(node, "use_peephole", False):
        variables.update({f"lstm_cell/{name}": arrays[name]
                          for name in ("w_i_diag", "w_f_diag", "w_o_diag")})
    clip = _real(node, "cell_clip", CELL_CLIP_DEFAULT[node.op])
    return tf1.FORMAT.read(variables, forget_bias=_real(node, "forget_bias",
                                                         FORGET_BIAS_DEFAULT[node.op]),
                           cell_clip=clip if clip > 0 else None)


def _read_gru_block(graph: _Graph, function: str, node: tfproto.NodeDef) -> Model:
    from . import tf1

    where = f"node {node.name!r} ({node.op})"
    names = ("gates/kernel", "candidate/kernel", "gates/bias", "candidate/bias")
    variables = {f"gru_cell/{name}": graph.const(function, node.input[index],
                                                 f"{where} input {index}")
                 for name, index in zip(names, GRU_BLOCK[node.op], strict=True)}
    return tf1.FORMAT.read(variables)


def _read_cudnn(graph: _Graph, function: str, node: tfproto.NodeDef,
                options: Mapping[str, Any]) -> Model:
    from . import cudnn

    where = f"{graph.where}: node {node.name!r} ({node.op})"
    mode = _text(node, "rnn_mode", "lstm")
    input_mode = _text(node, "input_mode", "linear_input")
    direction = _text(node, "direction", "unidirectional")
    if input_mode != "linear_input":
        raise UnsupportedFeatureError(
            f"{where}: input_mode={input_mode!r}; rnnport reads 'linear_input' (the input goes "
            "through W like every later layer). 'skip_input' feeds x straight into the first "
            "layer and 'auto_select' leaves the choice to cuDNN: no canonical network computes "
            "them the same, so nothing was read.")
    if mode not in RNN_MODES or direction not in ("unidirectional", "bidirectional"):
        raise UnsupportedFeatureError(f"{where}: rnn_mode={mode!r}, direction={direction!r}; "
                                      f"expected rnn_mode in {', '.join(RNN_MODES)} and direction "
                                      "unidirectional or bidirectional.")
    if len(node.input) < 4:
        raise FormatError(f"{where}: {len(node.input)} inputs; expected input, input_h, input_c, "
                          "params. The graph is damaged.")
    buffer = graph.const(function, node.input[3], "params (input 3)")
    if buffer.ndim != 1:
        raise FormatError(f"{where}: params has shape {list(buffer.shape)}; expected a 1-D opaque "
                          "buffer.")
    directions = 2 if direction == "bidirectional" else 1
    known: dict[str, Any] = {"bidirectional": directions == 2,
                             "proj_size": _integer(node, "num_proj", 0)}
    state = graph.shape(function, node.input[1])
    if state is not None and len(state) == 3:
        if state[0] > 0 and state[0] % directions == 0:
            known["num_layers"] = state[0] // directions
        if state[2] > 0 and not known["proj_size"]:
            known["hidden_size"] = state[2]
    inputs = graph.shape(function, node.input[0])
    if inputs is not None and len(inputs) == 3 and inputs[2] > 0:
        known["input_size"] = inputs[2]
    for key in ("hidden_size", "num_layers", "input_size"):
        given = options.get(key)
        if given is None:
            continue
        if known.get(key) not in (None, given):
            raise FormatError(f"{where}: {key}={given!r}, but the graph's shapes say "
                              f"{known[key]}; drop the option.")
        known[key] = given
    if options.get("rnn_mode") not in (None, mode):
        raise FormatError(f"{where}: rnn_mode={options['rnn_mode']!r}, but the node says "
                          f"{mode!r}; drop the option.")
    if options.get("bidirectional") not in (None, known["bidirectional"]):
        raise FormatError(f"{where}: bidirectional={options['bidirectional']!r}, but the node's "
                          f"direction is {direction!r}; drop the option.")
    spec = cudnn.one_shape(buffer.size, mode, where, **known)
    return cudnn.FORMAT.read(buffer, **cudnn.FORMAT.read_options_for(spec))


# -- what else a graph holds ------------------------------------------------------------------


def networks(source: Any) -> Choices:
    """The networks ``scope=`` (TF1 names) or ``node=`` (fused ops) picks from."""
    found = _find(source)
    listed_networks = _all(found)
    option = "scope" if any(n.option == "scope" for n in listed_networks) else "node"
    return Choices(option, tuple((n.value, n.what) for n in listed_networks))


def notes(source: Any, **options: Any) -> list[str]:
    """The other networks, the float Consts not read, and the values assumed for what the
    graph does not show."""
    found = _find(source)
    network = _choose(found, options)
    out = [f"another recurrent network, {n.option}={n.value!r} ({n.what}); not read."
           for n in _all(found) if n != network]
    if network.option == "scope":
        taken = {key: options[key] for key in ("forget_bias", "cell_clip", "activation")
                 if options.get(key) is not None}
        recovered = _recovered(found, network.value, options)
        for key, value in recovered.items():
            taken.setdefault(key, value)
        bases = _network_bases(found, network.value)
        kinds = {base.rpartition("/")[2] for base in bases}
        assumed = []
        if "forget_bias" not in taken and kinds & {"lstm_cell", "basic_lstm_cell"}:
            assumed.append("forget_bias=1.0")
        if "cell_clip" not in taken and "lstm_cell" in kinds:
            assumed.append("no cell_clip")
        if "activation" not in taken and "basic_rnn_cell" in kinds:
            assumed.append("activation tanh")
        if recovered:
            shown = ", ".join(f"{key}={value!r}" for key, value in recovered.items())
            out.append(f"read from the cells' step graphs: {shown}.")
        if assumed:
            out.append(f"assumed, as TF1's defaults, since the graph's cell steps do not show "
                       f"them: {', '.join(assumed)}; pass the option if they were built "
                       "otherwise.")
        read_names = {name for name in found.weights
                      if any(name.startswith(f"{base}/") for base in bases)}
        if network.what.startswith("a CudnnRNN"):
            read_names = {f"{network.value}/opaque_kernel"}
    else:
        read_names = found.used
    rest = [f"{name} {list(array.shape)}" for name, array in found.weights.items()
            if name not in read_names]
    if rest:
        out.append(f"other float Consts: {listed(rest)}; not part of the network, not read.")
    return out


# -- TensorFlow running the graph ---------------------------------------------------------------

_RUNNER = r"""
import json, sys
import numpy as np
import tensorflow as tf
job = json.load(open(sys.argv[1]))
graph_def = tf.compat.v1.GraphDef()
graph_def.ParseFromString(open(job["graph"], "rb").read())
with tf.Graph().as_default() as graph:
    tf.compat.v1.import_graph_def(graph_def, name="")
    with tf.compat.v1.Session(graph=graph) as session:
        y = session.run(job["output"] + ":0", {job["input"] + ":0": np.load(job["x"])})
np.save(job["y"], y)
"""


def _endpoints(graph: _Graph) -> tuple[str, str, bool] | str:
    """(input Placeholder, output node, time-major) of a graph, or why they are unclear."""
    placeholders = [node for node in graph.graph.node if node.op == "Placeholder"]
    if len(placeholders) != 1:
        return (f"the graph has {len(placeholders)} Placeholders "
                f"({', '.join(n.name for n in placeholders) or 'none'}); one input is fed")
    outputs = [name for name in ("y", "output") if ("", name) in graph.nodes]
    if not outputs:
        return "the graph has no node named y or output to fetch"
    ops = {node.op for _, node in graph.graph.all_nodes()}
    if ops & CUDNN:
        return "its CudnnRNN node has no CPU kernel in TensorFlow"
    consumers = [node for node in graph.graph.node if placeholders[0].name in
                 (ref.split(":")[0] for ref in node.input)]
    time_major = any(node.op in BLOCK_LSTM for node in consumers)
    return placeholders[0].name, outputs[0], time_major


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """TensorFlow importing the graph (``tf.compat.v1.import_graph_def``) and running ``x``
    ``(batch, time, input)`` through its one Placeholder, fetching ``y`` (or ``output``), in
    a process of its own; a sentence why not where it cannot."""
    if importlib.util.find_spec("tensorflow") is None:
        return "TensorFlow is not installed: no framework check"
    try:
        graph = _Graph(source)
    except RnnportError as error:
        return f"the graph cannot be read ({error}): no framework check"
    found = _endpoints(graph)
    if isinstance(found, str):
        return f"{found}: no framework check"
    input_name, output_name, time_major = found
    x = np.asarray(x)
    serialized = source.serialized if isinstance(source, FrozenGraph) else (
        read_file(source, str(source)) if is_path(source) else None)
    if serialized is None:
        if not isinstance(source, (bytes, bytearray, memoryview)):
            return "the source is a decoded GraphDef, not bytes TensorFlow parses: no " \
                   "framework check"
        serialized = bytes(source)
    graph_bytes = serialized

    def prepare(folder: Path) -> dict[str, Any]:
        (folder / "graph.pb").write_bytes(graph_bytes)
        return {"graph": str(folder / "graph.pb")}

    feed = np.swapaxes(x, 0, 1) if time_major else x
    y = run_job(["-c", _RUNNER], {"input": input_name, "output": output_name},
                feed.astype(model.dtype, copy=False), "the graph", legacy_keras=False,
                prepare=prepare)
    if isinstance(y, str):
        return f"{y}: no framework check"
    if time_major:
        y = np.swapaxes(y, 0, 1)
    return f"TensorFlow running the frozen graph ({input_name} → {output_name})", y


# -- sources --------------------------------------------------------------------------------


def sniff(source: Any) -> bool:
    if isinstance(source, (FrozenGraph, tfproto.GraphDef)):
        return True
    if is_path(source):
        name = Path(os.fspath(source)).name.lower()
        # A SavedModel's saved_model.pb and Keras's keras_metadata.pb are not frozen graphs.
        return name.endswith(SUFFIX) and name not in ("saved_model.pb", "keras_metadata.pb")
    return False


# -- write ----------------------------------------------------------------------------------

# Output argument names of the ops the graph uses (their OpDefs), for a function body's
# "node:argument:index" tensor names.
_OUTPUT_ARG = {"ConcatV2": "output", "MatMul": "product", "BiasAdd": "output", "Split": "output",
               "Sigmoid": "y", "Tanh": "y", "Relu": "activations", "Mul": "z", "AddV2": "z",
               "Sub": "z", "Minimum": "z", "Maximum": "z", "Less": "z", "GatherV2": "output",
               "Reshape": "output", "ExpandDims": "output", "TensorScatterUpdate": "output",
               "Const": "output"}
INT32 = 3


class _Body:
    """The nodes of one function body, each added with its op's attributes; ``add`` returns
    the tensor name (``node:argument:0``) for later nodes."""

    def __init__(self, dtype: np.dtype) -> None:
        from ..io import tfproto_encode as encode

        self.encode = encode
        self.dtype = dtype
        self.nodes: list[bytes] = []

    def add(self, name: str, op: str, inputs: list[str], index: int = 0,
            **attrs: bytes) -> str:
        self.nodes.append(self.encode.node_def(name, op, inputs, attrs))
        return f"{name}:{_OUTPUT_ARG[op]}:{index}"

    def const(self, name: str, value: Any, dtype: Any = None) -> str:
        array = np.asarray(value, dtype=dtype or self.dtype)
        return self.add(name, "Const", [], dtype=self.encode.attr_type(array.dtype),
                        value=self.encode.attr_tensor(array))

    def binary(self, name: str, op: str, first: str, second: str) -> str:
        return self.add(name, op, [first, second], T=self.encode.attr_type(self.dtype))

    def unary(self, name: str, op: str, value: str) -> str:
        return self.add(name, op, [value], T=self.encode.attr_type(self.dtype))

    def matmul(self, name: str, first: str, second: str) -> str:
        return self.add(name, "MatMul", [first, second], T=self.encode.attr_type(self.dtype),
                        transpose_a=self.encode.attr_bool(False),
                        transpose_b=self.encode.attr_bool(False))

    def bias_add(self, name: str, value: str, bias: str) -> str:
        return self.add(name, "BiasAdd", [value, bias], T=self.encode.attr_type(self.dtype),
                        data_format=self.encode.attr_string("NHWC"))

    def concat(self, name: str, parts: list[str], axis: int) -> str:
        return self.add(name, "ConcatV2", [*parts, self.const(f"{name}/axis", axis, np.int32)],
                        N=self.encode.attr_int(len(parts)), T=self.encode.attr_type(self.dtype),
                        Tidx=self.encode.attr_type(INT32))

    def split(self, name: str, value: str, count: int) -> list[str]:
        axis = self.const(f"{name}/split_dim", 1, np.int32)
        first = self.add(name, "Split", [axis, value], T=self.encode.attr_type(self.dtype),
                         num_split=self.encode.attr_int(count))
        return [first[:-1] + str(index) for index in range(count)]


def _cell_step(body: _Body, base: str, kind: str, spec: Spec, x: str, h: str, c: str | None,
               weights: dict[str, str], forget_bias: float) -> tuple[str, str | None]:
    """One step of TF1 cell ``kind`` (its scope name) under ``base``: (h', c')."""
    joined = body.concat(f"{base}/concat", [x, h], 1)
    if kind == "lstm_cell":
        gates = body.bias_add(f"{base}/BiasAdd", body.matmul(f"{base}/MatMul", joined,
                                                             weights["kernel"]), weights["bias"])
        i, j, f, o = body.split(f"{base}/split", gates, 4)
        f = body.binary(f"{base}/add", "AddV2", f, body.const(f"{base}/add/y", forget_bias))
        assert c is not None
        if spec.peepholes:
            f = body.binary(f"{base}/add_1", "AddV2", f, body.binary(
                f"{base}/mul_f", "Mul", weights["w_f_diag"], c))
            i = body.binary(f"{base}/add_2", "AddV2", i, body.binary(
                f"{base}/mul_i", "Mul", weights["w_i_diag"], c))
        kept = body.binary(f"{base}/mul", "Mul", body.unary(f"{base}/Sigmoid", "Sigmoid", f), c)
        new = body.binary(f"{base}/mul_1", "Mul", body.unary(f"{base}/Sigmoid_1", "Sigmoid", i),
                          body.unary(f"{base}/Tanh", "Tanh", j))
        cell = body.binary(f"{base}/add_3", "AddV2", kept, new)
        if spec.cell_clip is not None:
            clip = spec.cell_clip
            cell = body.binary(f"{base}/clip_by_value/Minimum", "Minimum", cell,
                               body.const(f"{base}/clip_by_value/Minimum/y", clip))
            cell = body.binary(f"{base}/clip_by_value", "Maximum", cell,
                               body.const(f"{base}/clip_by_value/y", -clip))
        if spec.peepholes:
            o = body.binary(f"{base}/add_4", "AddV2", o, body.binary(
                f"{base}/mul_o", "Mul", weights["w_o_diag"], cell))
        out = body.binary(f"{base}/mul_2", "Mul", body.unary(f"{base}/Sigmoid_2", "Sigmoid", o),
                          body.unary(f"{base}/Tanh_1", "Tanh", cell))
        if spec.proj_size:
            out = body.matmul(f"{base}/projection/MatMul", out, weights["projection/kernel"])
        return out, cell
    if kind == "basic_rnn_cell":
        pre = body.bias_add(f"{base}/BiasAdd", body.matmul(f"{base}/MatMul", joined,
                                                           weights["kernel"]), weights["bias"])
        relu = spec.nonlinearity == "relu"
        return body.unary(f"{base}/{'Relu' if relu else 'Tanh'}", "Relu" if relu else "Tanh",
                          pre), None
    gates = body.unary(f"{base}/Sigmoid", "Sigmoid", body.bias_add(
        f"{base}/BiasAdd", body.matmul(f"{base}/MatMul", joined, weights["gates/kernel"]),
        weights["gates/bias"]))
    r, u = body.split(f"{base}/split", gates, 2)
    if kind == "gru_cell":  # reset before: tanh([x, r∘h]·W_c + b_c)
        joined_r = body.concat(f"{base}/concat_1", [x, body.binary(f"{base}/mul", "Mul", r, h)], 1)
        candidate = body.bias_add(f"{base}/BiasAdd_1", body.matmul(
            f"{base}/MatMul_1", joined_r, weights["candidate/kernel"]), weights["candidate/bias"])
    else:  # CudnnCompatibleGRUCell, reset after: tanh(x·W_i + b_i + r∘(h·W_h + b_h))
        inner = body.bias_add(f"{base}/BiasAdd_1", body.matmul(
            f"{base}/MatMul_1", x, weights["candidate/input_projection/kernel"]),
            weights["candidate/input_projection/bias"])
        hidden = body.bias_add(f"{base}/BiasAdd_2", body.matmul(
            f"{base}/MatMul_2", h, weights["candidate/hidden_projection/kernel"]),
            weights["candidate/hidden_projection/bias"])
        candidate = body.binary(f"{base}/add", "AddV2", inner,
                                body.binary(f"{base}/mul", "Mul", r, hidden))
    candidate = body.unary(f"{base}/Tanh", "Tanh", candidate)
    one_minus = body.binary(f"{base}/sub", "Sub", body.const(f"{base}/sub/x", 1.0), u)
    return body.binary(f"{base}/add_1", "AddV2", body.binary(f"{base}/mul_1", "Mul", u, h),
                       body.binary(f"{base}/mul_2", "Mul", one_minus, candidate)), None


def write(model: Model, path: Any = None, **options: Any) -> FrozenGraph:
    """A frozen GraphDef running ``model`` (see the module's docstring); saved at ``path``."""
    from ..io import tfproto_encode as encode
    from . import tf1

    where = "write(fmt='tfgraph')"
    layers = model.layers()
    dtype = np.dtype(model.dtype)
    if dtype not in encode.DATA_TYPES:
        raise UnsupportedFeatureError(f"{where}: dtype {dtype}; expected float16, float32 or "
                                      "float64.")
    specs = [layer.spec for layer in layers]
    clips = {spec.cell_clip for spec in specs if spec.cell == "lstm"}
    activations = {spec.nonlinearity for spec in specs if spec.cell.startswith("rnn")}
    if len(clips) > 1 or len(activations) > 1:
        raise UnsupportedFeatureError(f"{where}: the layers use different cell clips or "
                                      "activations; write each part on its own.")
    forget_bias = tf1._number("forget_bias", options.get("forget_bias", 1.0))
    tf1_options: dict[str, Any] = {"forget_bias": forget_bias} if any(
        spec.cell == "lstm" for spec in specs) else {}
    if clips and clips != {None}:
        tf1_options["cell_clip"] = clips.pop()
    if activations:
        tf1_options["activation"] = activations.pop()
    if "scope" in options:
        tf1_options["scope"] = options["scope"]
    variables = tf1.FORMAT.write(model, **tf1_options)
    bidirectional = specs[0].bidirectional
    structure = tf1._structure(None, bidirectional, len(layers), where)
    scope = str(options.get("scope", "stack_bidirectional_rnn" if structure ==
                            "stack_bidirectional" else "rnn")).strip("/")

    graph: list[bytes] = []
    functions: list[bytes] = []
    type_attr = encode.attr_type(dtype)

    def node(name: str, op: str, inputs: list[str], **attrs: bytes) -> str:
        graph.append(encode.node_def(name, op, inputs, attrs))
        return name

    def const(name: str, value: Any, kind: Any = None) -> str:
        array = np.asarray(value, dtype=kind or dtype)
        return node(name, "Const", [], dtype=encode.attr_type(array.dtype),
                    value=encode.attr_tensor(array))

    def pack(name: str, parts: list[str]) -> str:
        return node(name, "Pack", parts, N=encode.attr_int(len(parts)),
                    T=encode.attr_type(INT32), axis=encode.attr_int(0))

    def zeros(name: str, dims: list[str]) -> str:
        return node(name, "Fill", [pack(f"{name}/shape", dims), const(f"{name}/value", 0.0)],
                    T=type_attr, index_type=encode.attr_type(INT32))

    def reverse(name: str, value: str) -> str:
        return node(name, "ReverseV2", [value, const(f"{name}/axis", [0], np.int32)],
                    T=type_attr, Tidx=encode.attr_type(INT32))

    def strided(name: str, value: str, index: int) -> str:
        return node(name, "StridedSlice", [value, const(f"{name}/begin", [index], np.int32),
                                           const(f"{name}/end", [index + 1], np.int32),
                                           const(f"{name}/strides", [1], np.int32)],
                    T=encode.attr_type(INT32), Index=encode.attr_type(INT32),
                    begin_mask=encode.attr_int(0), end_mask=encode.attr_int(0),
                    ellipsis_mask=encode.attr_int(0), new_axis_mask=encode.attr_int(0),
                    shrink_axis_mask=encode.attr_int(1))

    input_size = specs[0].input_size
    node("x", "Placeholder", [], dtype=type_attr, shape=encode.attr_shape([-1, -1, input_size]))
    perm = const("perm", [1, 0, 2], np.int32)
    sequence = node("time_major", "Transpose", ["x", perm], T=type_attr,
                    Tperm=encode.attr_type(INT32))
    shape = node("shape", "Shape", ["x"], T=type_attr, out_type=encode.attr_type(INT32))
    batch, time = strided("batch", shape, 0), strided("time", shape, 1)
    for name, array in variables.items():
        const(name, array)
    finals_h: list[str] = []
    finals_c: list[str] = []
    for index, spec in enumerate(specs):
        kind = tf1._default_cell(spec).scope
        outputs = []
        for direction in range(spec.num_directions):
            base = f"{tf1._prefix(structure, scope, index, direction)}{kind}"
            names = [name for name in variables if name.startswith(f"{base}/")]
            loop = f"{base}/while"
            seq = reverse(f"{loop}/reverse_input", sequence) if direction else sequence
            out_size = spec.output_size
            lstm = kind == "lstm_cell"
            states = [zeros(f"{loop}/h0", [batch, const(f"{loop}/h_size", out_size, np.int32)])]
            if lstm:
                states.append(zeros(f"{loop}/c0", [batch, const(f"{loop}/c_size",
                                                                spec.hidden_size, np.int32)]))
            ys = zeros(f"{loop}/ys0", [time, batch, const(f"{loop}/y_size", out_size, np.int32)])
            loop_inputs = [const(f"{loop}/t0", 0, np.int32), time, seq, *states, ys, *names]
            types: list[np.dtype | int] = [INT32, INT32, *[dtype] * (len(loop_inputs) - 2)]
            arguments = ["t", "steps", "sequence", "h", *(["c"] if lstm else []), "ys",
                         *[f"w{k}" for k in range(len(names))]]
            signature = [(arg, t if isinstance(t, int) else encode.DATA_TYPES[t])
                         for arg, t in zip(arguments, types, strict=True)]
            tag = re.sub(r"[^A-Za-z0-9_]", "_", loop)
            cond = _Body(dtype)
            less = cond.add("Less", "Less", ["t", "steps"], T=encode.attr_type(INT32))
            functions.append(encode.function_def(f"{tag}_cond", signature,
                                                 [("done", tfproto.DT_BOOL)], cond.nodes,
                                                 {"done": less}))
            body = _Body(dtype)
            x_t = body.add("x_t", "GatherV2", ["sequence", "t", body.const("x_t/axis", 0, np.int32)],
                           Tparams=type_attr, Tindices=encode.attr_type(INT32),
                           Taxis=encode.attr_type(INT32), batch_dims=encode.attr_int(0))
            weights = {name[len(base) + 1:]: f"w{k}" for k, name in enumerate(names)}
            h_new, c_new = _cell_step(body, base, kind, spec, x_t, "h", "c" if lstm else None,
                                      weights, forget_bias)
            at = body.add("index", "Reshape", ["t", body.const("index/shape", [1, 1], np.int32)],
                          T=encode.attr_type(INT32), Tshape=encode.attr_type(INT32))
            update = body.add("update", "ExpandDims", [h_new, body.const("update/dim", 0,
                                                                         np.int32)],
                              T=type_attr, Tdim=encode.attr_type(INT32))
            ys_new = body.add("ys_new", "TensorScatterUpdate", ["ys", at, update], T=type_attr,
                              Tindices=encode.attr_type(INT32))
            t_new = body.add("t_new", "AddV2", ["t", body.const("one", 1, np.int32)],
                             T=encode.attr_type(INT32))
            results = [t_new, "steps", "sequence", h_new, *([c_new] if lstm else []), ys_new,
                       *[f"w{k}" for k in range(len(names))]]
            assert all(item is not None for item in results)
            functions.append(encode.function_def(
                f"{tag}_body", signature, [(f"out_{arg}", t) for arg, t in signature],
                body.nodes, {f"out_{arg}": str(result) for (arg, _), result
                             in zip(signature, results, strict=True)}))
            node(loop, "While", loop_inputs, T=encode.attr_types(types),
                 cond=encode.attr_func(f"{tag}_cond"), body=encode.attr_func(f"{tag}_body"),
                 parallel_iterations=encode.attr_int(1))
            finals_h.append(f"{loop}:3")
            if lstm:
                finals_c.append(f"{loop}:4")
            result = f"{loop}:{5 if lstm else 4}"
            outputs.append(reverse(f"{loop}/reverse_output", result) if direction else result)
        if len(outputs) == 2:
            axis = const(f"layer_{index}/concat/axis", 2, np.int32)
            sequence = node(f"layer_{index}/concat", "ConcatV2", [*outputs, axis],
                            N=encode.attr_int(2), T=type_attr, Tidx=encode.attr_type(INT32))
        else:
            sequence = outputs[0]
    node("y", "Transpose", [sequence, const("perm_out", [1, 0, 2], np.int32)], T=type_attr,
         Tperm=encode.attr_type(INT32))
    for name, finals in (("h_n", finals_h), ("c_n", finals_c)):
        if finals and len({spec.output_size if name == "h_n" else spec.hidden_size
                           for spec in specs}) == 1:
            node(name, "Pack", finals, N=encode.attr_int(len(finals)), T=type_attr,
                 axis=encode.attr_int(0))
    frozen = FrozenGraph(variables)
    frozen.serialized = encode.graph_def(graph, functions)
    if path is not None:
        from ..io.atomic import atomic_write

        atomic_write(path, lambda file: file.write(frozen.serialized))
    return frozen


def param_count(model: Model, **options: Any) -> int:
    """Parameters as the graph's Consts hold them (TF1's cells: one bias)."""
    return int(sum(array.size for array in write(model, **options).values()))


FORMAT = Format(
    "tfgraph", sniff=sniff, reader=read, writer=write, counter=param_count,
    read_options=READ_OPTIONS, write_options=WRITE_OPTIONS,
    features=frozenset({"projection", "peepholes", "cell_clip", "reset_before"}),
    one_bias=frozenset({"lstm", "gru", "gru_reset_before", "rnn"}), always_bias=True,
    modules=("tensorflow",),
    suffixes=(Suffix(SUFFIX, "a frozen TensorFlow graph"),),
    gate_names={"g": "j", "z": "u"},
    run_time_constants=(RunTimeConstant(
        "forget_bias", default=1.0, neutral=0.0, cells=frozenset({"lstm"}),
        what="TF1 LSTM cells add forget_bias (default 1.0; a Const in the graph) to gate f at "
             "run time", adder="TensorFlow"),),
    networks=networks, notes=notes, framework_forward=framework_forward,
    names={"projection": "LSTMCell num_proj", "peepholes": "LSTMCell use_peepholes",
           "cell_clip": "LSTMCell cell_clip", "reset_before": "GRUCell",
           "reset_after": "CudnnCompatibleGRUCell"})
