"""TensorFlow 1.x recurrent cells in checkpoints (``tf.compat.v1.nn.rnn_cell``, contrib).

Read from a checkpoint prefix (NumPy only, see :mod:`rnnport.io.tensorbundle`) or a dict
name → array; written as such a dict, or as a checkpoint when ``path`` is given.

Each cell keeps its variables under its own scope name::

    LSTMCell, LSTMBlockCell   lstm_cell/kernel (I+R, 4H), bias (4H,)
                              [w_i_diag, w_f_diag, w_o_diag (H,)] [projection/kernel (H, P)]
    BasicLSTMCell             basic_lstm_cell/kernel, bias
    CudnnCompatibleLSTMCell   cudnn_compatible_lstm_cell/kernel, bias
    GRUCell                   gru_cell/gates/{kernel (I+H, 2H), bias}, candidate/{kernel (I+H, H), bias}
    CudnnCompatibleGRUCell    cudnn_compatible_gru_cell/gates/{kernel, bias},
                              candidate/input_projection/{kernel (I, H), bias},
                              candidate/hidden_projection/{kernel (H, H), bias}
    BasicRNNCell              basic_rnn_cell/kernel (I+H, H), bias

A kernel's rows are x's then h's (``R`` = P with a projection, else H); its columns hold
the gates: LSTM ``i j f o`` (``j`` is the candidate g), GRU gates ``r u`` (u = z).

Stacks are found from the scopes around the cells: ``{scope}/{cell}`` (one
``dynamic_rnn`` layer), ``{scope}/multi_rnn_cell/cell_{k}/{cell}`` (``MultiRNNCell``),
``{scope}/{fw,bw}/{cell}`` (``bidirectional_dynamic_rnn``) and
``{scope}/cell_{k}/bidirectional_rnn/{fw,bw}/{cell}`` (``stack_bidirectional_dynamic_rnn``).
Anything else in the checkpoint (a global step, optimizer slots, other layers) is left
alone; ``scope=`` picks one network when there are several (:func:`networks` lists them).
Writing names the variables the same way: ``scope=`` (default ``rnn``, or
``stack_bidirectional_rnn`` for a bidirectional network) and ``structure=`` (default:
``single`` for one layer, ``multi`` for several, ``stack_bidirectional`` when bidirectional;
``bidirectional`` names a one-layer ``bidirectional_dynamic_rnn``).

The state file: writing a checkpoint at ``folder/NAME`` also records it as the newest in
``folder/checkpoint``, the ``CheckpointState`` text TensorFlow's savers keep there
(:mod:`rnnport.io.checkpoint_state`), so ``tf.train.latest_checkpoint(folder)`` returns
it. ``model_checkpoint_path`` and the last ``all_model_checkpoint_paths`` entry become
``"NAME"`` (relative to the folder); the file's other entries are kept. It is read before
anything is written: a ``checkpoint`` file that is not a checkpoint state stops the write
with an error (and is left as it was). It is not among the written files
(``output_files``): an existing one is updated, as TensorFlow does, never a reason to
refuse the write. Reading a folder reads the checkpoint its state file names
(``model_checkpoint_path``, looked for in that folder), else its only checkpoint.

Running: ``framework_forward`` (``rnnport convert --verify`` from a checkpoint) builds the
TF1 graph the variable names describe — the cells, structure and scope found — restores it
with ``tf.compat.v1.train.Saver`` and runs it, in a TensorFlow process of its own
(:mod:`rnnport.formats._tf1_graph`), where TensorFlow and ``tf_keras`` are installed.

Biases: the cells keep one bias, plus ``forget_bias`` (1.0 by default; 0 for
CudnnCompatibleLSTMCell) added to f at run time and never saved. Reading puts the saved
bias in ``bias_hh`` and ``forget_bias`` in ``bias_ih``'s forget block, so writing back
with the same ``forget_bias`` is bit-exact. CudnnCompatibleGRUCell keeps its candidate's
two biases apart (a reset-after GRU); GRUCell is a reset-before GRU. What a checkpoint
cannot say comes as options: ``forget_bias``, ``cell_clip`` and ``activation="relu"``
(BasicRNNCell) — on writing they state what the TensorFlow graph will use, and must
agree with the model.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import (
    AmbiguousSourceError,
    FormatError,
    RnnportError,
    ShapeError,
    UnsupportedFeatureError,
)
from ..gates import CANONICAL, block, block_range, gate_family, reorder, transposed
from ..io import checkpoint_state, tensorbundle
from ..model import RNN, Model, as_float_array, stack
from ..spec import Spec
from ._common import (
    close_matches,
    combine_biases,
    describe,
    is_path,
    layer_number,
    listed,
    sum_exact,
    to_numpy,
)
from ._protocol import Choices, Format, RunTimeConstant, Suffix, missing_feature
from ._tensorflow import run_job, tf_keras_unavailable

__all__ = ["CELLS", "FORMAT", "STRUCTURES", "networks"]

READ_OPTIONS = frozenset({"scope", "forget_bias", "cell_clip", "activation", "hidden_size",
                          "num_layers", "bidirectional", "input_size", "rnn_mode"})
# The options only an opaque cuDNN buffer takes: the shape and cell it does not record.
OPAQUE_OPTIONS = ("hidden_size", "num_layers", "bidirectional", "input_size", "rnn_mode")
WRITE_OPTIONS = frozenset({"cell", "scope", "structure", "forget_bias", "cell_clip", "activation"})

LSTM_ORDER = "igfo"  # TF1's i, j, f, o with j written as the candidate g
GRU_ORDER = "rzn"  # TF1's r, u under gates/, then the candidate: the canonical order


@dataclass(frozen=True)
class Cell:
    """One TF1 cell class: its variable scope, what it computes and what it can hold."""

    name: str  # the class name
    scope: str  # the default variable scope name
    family: str
    forget_bias: float | None  # TensorFlow's default; None: the cell has no forget bias
    holds: frozenset[str] = field(default_factory=frozenset)
    fixed_forget_bias: bool = False

    def variables(self, projection: bool, peepholes: bool) -> list[str]:
        if self.family == "gru":
            if self.scope == "gru_cell":
                return ["gates/kernel", "gates/bias", "candidate/kernel", "candidate/bias"]
            return ["gates/kernel", "gates/bias", "candidate/input_projection/kernel",
                    "candidate/input_projection/bias", "candidate/hidden_projection/kernel",
                    "candidate/hidden_projection/bias"]
        names = ["kernel", "bias"]
        if peepholes:
            names += ["w_i_diag", "w_f_diag", "w_o_diag"]
        if projection:
            names.append("projection/kernel")
        return names


CELLS = {
    cell.name: cell for cell in (
        Cell("LSTMCell", "lstm_cell", "lstm", 1.0, frozenset({"projection", "peepholes",
                                                               "cell_clip"})),
        Cell("LSTMBlockCell", "lstm_cell", "lstm", 1.0, frozenset({"peepholes", "cell_clip"})),
        Cell("BasicLSTMCell", "basic_lstm_cell", "lstm", 1.0),
        Cell("CudnnCompatibleLSTMCell", "cudnn_compatible_lstm_cell", "lstm", 0.0,
             fixed_forget_bias=True),
        Cell("GRUCell", "gru_cell", "gru", None, frozenset({"reset_before"})),
        Cell("CudnnCompatibleGRUCell", "cudnn_compatible_gru_cell", "gru", None),
        Cell("BasicRNNCell", "basic_rnn_cell", "rnn", None),
    )
}
# Reading: the scope names the class (LSTMBlockCell saves under LSTMCell's names and
# computes the same function, so "lstm_cell" reads as LSTMCell).
BY_SCOPE = {cell.scope: cell for cell in reversed(CELLS.values())}
ALIASES = {**{name.lower(): name for name in CELLS},
           **{cell.scope: cell.name for cell in CELLS.values()}, "lstm_block_cell": "LSTMBlockCell"}

_VARIABLE = re.compile(
    r"^(?:(?P<outer>.*)/)?(?P<cell>" + "|".join(sorted(BY_SCOPE, key=len, reverse=True)) + r")/"
    r"(?P<var>kernel|bias|w_[ifo]_diag|projection/kernel|gates/(?:kernel|bias)|"
    r"candidate/(?:kernel|bias|(?:input|hidden)_projection/(?:kernel|bias)))$")
_STACK_BIDIRECTIONAL = re.compile(r"^(?:(?P<scope>.*)/)?cell_(?P<layer>\d+)/bidirectional_rnn/"
                                  r"(?P<direction>fw|bw)$")
_BIDIRECTIONAL = re.compile(r"^(?:(?P<scope>.*)/)?(?P<direction>fw|bw)$")
_MULTI = re.compile(r"^(?:(?P<scope>.*)/)?multi_rnn_cell/cell_(?P<layer>\d+)$")

# Variables of the training loop, not of any layer (optimizers' step counters and powers).
TRAINING_STATE = re.compile(r"^(global_step|beta[12]_power(_\d+)?)$")

STRUCTURES = {
    "single": "one dynamic_rnn cell",
    "multi": "a MultiRNNCell stack",
    "bidirectional": "a bidirectional_dynamic_rnn",
    "stack_bidirectional": "a stack_bidirectional_dynamic_rnn stack",
}


# -- sources ----------------------------------------------------------------------------


def sniff(source: Any) -> bool:
    if is_path(source):
        text = os.fspath(source)
        path = Path(text)
        if path.is_dir() and (path / "saved_model.pb").is_file():
            return False  # a SavedModel folder: fmt='tf2' reads it (TF1 exports included)
        if text.endswith(".index") or tensorbundle.is_data_file(path):
            found = True
        elif path.is_dir():
            found = (path / "checkpoint").is_file() or any(path.glob("*.index"))
        else:
            found = Path(f"{text}.index").is_file()
        if not found:
            return False
        # An object-based (TF2) checkpoint holds its object graph: fmt='tf2' reads it.
        try:
            return "_CHECKPOINTABLE_OBJECT_GRAPH" not in tensorbundle.Bundle(
                tensorbundle.checkpoint_prefix(path))
        except (RnnportError, OSError):
            return True
    if isinstance(source, Mapping):
        return any(isinstance(key, str) and _VARIABLE.match(key) for key in source)
    return False


class _Variables:
    """Name → array, read lazily from a checkpoint or taken from a dict."""

    def __init__(self, source: Any) -> None:
        if is_path(source):
            self.bundle: tensorbundle.Bundle | None = tensorbundle.Bundle(source)
            self.where = str(self.bundle.prefix)
            self.names = list(self.bundle)
            self.shapes = {name: self.bundle[name].shape for name in self.names}
            self._arrays: dict[str, Any] = {}
        elif isinstance(source, Mapping):
            self.bundle = None
            self.where = "tf1 variables"
            self._arrays = {}
            for key, value in source.items():
                if isinstance(key, bytes):
                    key = key.decode("utf-8", "replace")
                if not isinstance(key, str):
                    raise FormatError(f"tf1 variables: key {key!r} is a {type(key).__name__}; "
                                      "expected variable names (strings).")
                name = _strip(key)
                if name in self._arrays:
                    raise FormatError(f"tf1 variables: {key!r} and {name!r} name one variable "
                                      "(a graph tensor's ':0' dropped); pass each once.")
                self._arrays[name] = value
            self.names = list(self._arrays)
            self.shapes = {}
            for name, value in self._arrays.items():
                try:
                    self.shapes[name] = tuple(np.shape(value))
                except ValueError as error:
                    raise FormatError(f"tf1 variables, {name!r}: not one rectangular array "
                                      f"({error}).") from None
        else:
            raise FormatError(
                f"read(fmt='tf1'): expected a checkpoint prefix (e.g. 'model.ckpt-1000', its "
                f".index file or its folder) or a dict variable name → array; got "
                f"{describe(source)}.")

    def array(self, name: str) -> np.ndarray:
        where = f"{self.where}: variable {name!r}"
        if self.bundle is not None:
            return as_float_array(self.bundle.read(name), where)
        return as_float_array(to_numpy(self._arrays[name]), where)


def _strip(name: str) -> str:
    """``rnn/lstm_cell/kernel:0`` → ``rnn/lstm_cell/kernel`` (graph tensor names)."""
    return name[:-2] if name.endswith(":0") else name


# -- finding the networks ----------------------------------------------------------------


@dataclass
class _Network:
    scope: str
    structure: str
    # (layer, direction) → (cell scope name, the prefix of its variables)
    cells: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.structure == "single":
            (cell, prefix), = self.cells.values()
            return f"{prefix}{cell}"
        if self.structure == "multi":
            return f"{self.scope}/multi_rnn_cell" if self.scope else "multi_rnn_cell"
        return self.scope

    def matches(self, scope: str) -> bool:
        scope = scope.strip("/")
        return scope in (self.scope, self.name) or self.name.startswith(f"{scope}/") or (
            self.scope.startswith(f"{scope}/"))

    def summary(self) -> str:
        if self.structure == OPAQUE:
            return f"scope={self.scope!r}: {OPAQUE_WHAT} ({self.cells[0, 0][0]})"
        cells = sorted({BY_SCOPE[cell].name for cell, _ in self.cells.values()})
        layers = 1 + max(layer for layer, _ in self.cells)
        return (f"scope={self.scope!r}: {STRUCTURES[self.structure]} of {', '.join(cells)}"
                f" ({layers} layer{'s' if layers > 1 else ''})")


def _networks(names: Sequence[str], where: str) -> list[_Network]:
    found: dict[tuple[str, str], _Network] = {}
    matched = [(name, match) for name in names if (match := _VARIABLE.match(name))]
    for name, match in matched:
        outer, cell = match["outer"] or "", match["cell"]
        prefix = f"{outer}/" if outer else ""
        layer, direction = 0, 0
        if m := _STACK_BIDIRECTIONAL.match(outer):
            structure, scope = "stack_bidirectional", m["scope"] or ""
            layer, direction = layer_number(m["layer"], where), ("fw", "bw").index(m["direction"])
        elif m := _BIDIRECTIONAL.match(outer):
            structure, scope = "bidirectional", m["scope"] or ""
            direction = ("fw", "bw").index(m["direction"])
        elif m := _MULTI.match(outer):
            structure, scope, layer = "multi", m["scope"] or "", layer_number(m["layer"], where)
        else:
            structure, scope = "single", outer
        if layer >= len(matched):
            # Every layer below this one needs a variable of its own, so the number is
            # bounded by the variables held: nothing is ever sized or looped by it.
            raise FormatError(
                f"{where}: {name!r} names layer {layer}, but only {len(matched)} cell variables "
                f"are held in all, too few for {layer + 1} layers (each needs one at least); "
                f"expected layer numbers below {len(matched)}. The checkpoint is damaged or "
                "built to exhaust memory; re-save it with every layer.")
        network = found.setdefault((scope, structure) if structure != "single" else
                                   (prefix + cell, structure), _Network(scope, structure))
        known = network.cells.setdefault((layer, direction), (cell, prefix))
        if known != (cell, prefix):
            raise FormatError(
                f"{where}: {prefix or 'the top level'} holds two cells ({known[0]} and {cell}) for "
                "the same layer; expected one cell per layer and direction.")
    for network in found.values():
        if network.structure in ("multi", "single") and re.search(r"(^|/)(fw|bw)$",
                                                                    network.scope):
            raise UnsupportedFeatureError(
                f"{where}: scope {network.scope!r} is one direction of a bidirectional_dynamic_rnn "
                "over MultiRNNCell stacks: each direction runs its whole stack alone, and the "
                "backward stack sees the time-reversed input. rnnport's bidirectional layers "
                "join both directions after every layer (stack_bidirectional_dynamic_rnn, cuDNN, "
                "PyTorch), so this network has no faithful equivalent.")
    return sorted(found.values(), key=lambda n: n.name)


def _choose(networks: list[_Network], scope: str | None, where: str,
            names: Sequence[str]) -> _Network:
    if not networks:
        object_based = any("/.ATTRIBUTES/" in name for name in names)
        raise FormatError(
            f"{where}: no TF1 recurrent cell variables found; expected names ending in "
            "lstm_cell/kernel, basic_lstm_cell/kernel, cudnn_compatible_lstm_cell/kernel, "
            "gru_cell/gates/kernel, cudnn_compatible_gru_cell/gates/kernel or "
            "basic_rnn_cell/kernel (cells with a custom name= are not recognised)."
            + (" This is a TF2 object-based checkpoint (tf.train.Checkpoint, "
               "Model.save_weights), whose names follow object paths; read it with fmt='tf2'."
               if object_based else ""))
    listing = "\n".join(f"  - {network.summary()}" for network in networks)
    if scope is None:
        if len(networks) == 1:
            return networks[0]
        raise AmbiguousSourceError(
            f"{where}: holds {len(networks)} recurrent networks; pass scope= to pick one:\n"
            f"{listing}")
    if not isinstance(scope, str):
        raise FormatError(f"read(fmt='tf1'): scope={scope!r}; expected a string such as "
                          f"{networks[0].scope!r}.")
    chosen = [network for network in networks if network.matches(scope)]
    if len(chosen) == 1:
        return chosen[0]
    exact = [network for network in chosen if scope.strip("/") in (network.scope, network.name)]
    if len(exact) == 1:
        return exact[0]
    if not chosen:
        hint = close_matches(scope, [n.scope for n in networks])
        raise FormatError(f"{where}: no recurrent network under scope={scope!r}.{hint} "
                          f"The networks here:\n{listing}")
    raise AmbiguousSourceError(f"{where}: scope={scope!r} matches {len(chosen)} networks; pass "
                               f"a longer scope:\n" + "\n".join(f"  - {n.summary()}"
                                                                 for n in chosen))


def networks(source: Any) -> list[dict[str, Any]]:
    """The recurrent networks in a checkpoint or dict: what ``scope=`` can pick, and what each is.

    Each entry has ``scope``, ``structure`` (one of :data:`STRUCTURES`), ``layers``,
    ``bidirectional`` and ``cells`` (the cell class per layer). Only names and shapes are
    looked at; no tensor is read.
    """
    variables = _Variables(source)
    out = []
    for network in _networks(variables.names, variables.where):
        layers = 1 + max(layer for layer, _ in network.cells)
        listed_layers = min(layers, len(network.cells))  # gaps past the cells held: unlisted
        out.append({
            "scope": network.scope, "structure": network.structure, "layers": layers,
            "bidirectional": network.structure in ("bidirectional", "stack_bidirectional"),
            "cells": [BY_SCOPE[network.cells[layer, 0][0]].name if (layer, 0) in network.cells
                      else None for layer in range(listed_layers)],
        })
    for network in _opaque_networks(variables):
        out.append({"scope": network.scope, "structure": OPAQUE, "layers": None,
                    "bidirectional": None, "cells": [network.cells[0, 0][0]]})
    return out


def notes(source: Any, **options: Any) -> list[str]:
    """What a checkpoint (or dict) holds beside the network ``scope=`` picks: other networks,
    optimizer slots and moving averages of its variables, a global step, other layers'
    variables (see ``Format.notes``). Names and shapes only; no tensor is read."""
    variables = _Variables(source)
    found = [*_networks(variables.names, variables.where), *_opaque_networks(variables)]
    network = _choose(found, options.get("scope"), variables.where, variables.names)
    used: set[str] = {f"{network.scope}/opaque_kernel"} if network.structure == OPAQUE else set()
    for cell, prefix in ([] if network.structure == OPAQUE else network.cells.values()):
        base = f"{prefix}{cell}/"
        used.update(base + name for name in _cell_variables(variables.names, BY_SCOPE[cell],
                                                            base)[2])
    out = [f"another recurrent network, {other.summary()}; not read." for other in found
           if other is not network]
    kinds = {BY_SCOPE[cell] for cell, _ in network.cells.values() if cell in BY_SCOPE}
    assumed = []
    if options.get("forget_bias") is None and any(
            cell.forget_bias and not cell.fixed_forget_bias for cell in kinds):
        assumed.append("forget_bias=1.0 (added to the forget gate at run time)")
    if options.get("cell_clip") is None and any("cell_clip" in cell.holds for cell in kinds):
        assumed.append("no cell_clip")
    if "activation" not in options and any(cell.family == "rnn" for cell in kinds):
        assumed.append("activation tanh")
    if assumed:
        out.append(f"assumed, as the cells' defaults, since a checkpoint does not record them: "
                   f"{', '.join(assumed)}; pass the option if the graph built the cells "
                   "otherwise.")
    others = {f"{prefix}{cell}/" for other in found if other is not network
              for cell, prefix in other.cells.values()}
    slots: dict[str, int] = {}
    averages, state, rest = 0, [], []
    for name in variables.names:
        if name in used or any(name.startswith(base) for base in others):
            continue
        owner, _, last = name.rpartition("/")
        if owner in used or owner.rpartition("/")[0] in used:  # a slot of a variable read
            if last == "ExponentialMovingAverage":
                averages += 1
            else:
                slots[last] = slots.get(last, 0) + 1
        elif TRAINING_STATE.match(last):
            state.append(name)
        else:
            rest.append(f"{name} {variables.shapes.get(name, ())}")
    if slots:
        held = ", ".join(f"…/{kind} ({count})" for kind, count in sorted(slots.items()))
        out.append(f"optimizer slots of the variables read: {held}; training state, not "
                   "read.")
    if averages:
        out.append(f"moving averages of {averages} variables read (…/ExponentialMovingAverage); "
                   "rnnport reads the raw variables, not their averages.")
    if state:
        out.append(f"training state: {', '.join(state)}; not read.")
    if rest:
        out.append(f"other variables: {listed(rest)}; not part of the network, not read.")
    return out


# -- CudnnRNN layers' opaque buffers ---------------------------------------------------------

OPAQUE = "cudnn"  # the structure of a network held in one opaque cuDNN buffer
OPAQUE_WHAT = "a CudnnRNN layer's opaque cuDNN buffer"
_OPAQUE_VARIABLE = re.compile(r"^(?:(?P<outer>.*)/)?(?P<layer>[^/]+)/opaque_kernel$")
# tf.contrib.cudnn_rnn's layers name their scope after the class (cudnn_lstm, cudnn_gru_1 …).
_OPAQUE_LAYER = re.compile(r"^cudnn_(?P<mode>lstm|gru|rnn_tanh|rnn_relu)(?:_\d+)?$")
RNN_MODES = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def _opaque_networks(variables: _Variables) -> list[_Network]:
    """One network per 1-D ``…/opaque_kernel`` variable: a ``CudnnLSTM`` / ``CudnnGRU`` /
    ``CudnnRNNTanh`` / ``CudnnRNNRelu`` layer's whole cuDNN weight space (cells: the mode its
    scope names, or ``?``)."""
    found = []
    for name in variables.names:
        match = _OPAQUE_VARIABLE.match(name)
        if match and len(variables.shapes.get(name, ())) == 1:
            scope = name.rpartition("/")[0]
            mode = _OPAQUE_LAYER.match(match["layer"])
            found.append(_Network(scope, OPAQUE, {(0, 0): (mode["mode"] if mode else "?",
                                                          f"{scope}/")}))
    return found


def _read_opaque(variables: _Variables, network: _Network, options: Mapping[str, Any]) -> Model:
    """The network in a ``…/opaque_kernel`` buffer: cuDNN's layout (``formats.cudnn``, bias
    mode double, as TensorFlow's CudnnRNN ops keep it), its shape solved from the size and
    what the options and the scope tell (:func:`rnnport.formats.cudnn.one_shape`)."""
    from . import cudnn

    name = f"{network.scope}/opaque_kernel"
    where = f"{variables.where}: {name}"
    named_mode = network.cells[0, 0][0]
    mode = options.get("rnn_mode")
    if mode is not None and mode not in RNN_MODES:
        raise FormatError(f"{where}: rnn_mode={mode!r}; expected one of "
                          f"{', '.join(map(repr, RNN_MODES))}.")
    if mode is None and named_mode == "?":
        raise FormatError(f"{where}: the layer's name does not say its cell (cudnn_lstm, "
                          "cudnn_gru, cudnn_rnn_tanh, cudnn_rnn_relu); pass rnn_mode= with one of "
                          f"{', '.join(map(repr, RNN_MODES))}.")
    if mode is not None and named_mode not in ("?", mode):
        raise FormatError(f"{where}: rnn_mode={mode!r}, but the layer's name says "
                          f"{named_mode!r}; drop rnn_mode= or pass {named_mode!r}.")
    cell = mode or named_mode
    for key in ("forget_bias", "cell_clip", "activation"):
        if options.get(key) is not None:
            raise FormatError(f"{where}: {key}= applies to TF1 cells; a cuDNN buffer holds "
                              "neither a forget bias, a cell clip nor an activation choice. "
                              "Drop it.")
    buffer = variables.array(name)
    known = {key: options.get(key) for key in ("hidden_size", "num_layers", "bidirectional",
                                               "input_size")}
    spec = cudnn.one_shape(buffer.size, cell, where, **known)
    return cudnn.FORMAT.read(buffer, **cudnn.FORMAT.read_options_for(spec))


# -- read ---------------------------------------------------------------------------------


def read(source: Any, **options: Any) -> Model:
    variables = _Variables(source)
    where = variables.where
    network = _choose([*_networks(variables.names, where), *_opaque_networks(variables)],
                      options.get("scope"), where, variables.names)
    if network.structure == OPAQUE:
        return _read_opaque(variables, network, options)
    given = [key for key in OPAQUE_OPTIONS if options.get(key) is not None]
    if given:
        raise FormatError(f"{where}: {', '.join(given)}= apply to a CudnnRNN layer's opaque "
                          f"buffer (…/opaque_kernel); {network.summary()} records its shape in "
                          "its variables. Drop the option(s).")
    layers = 1 + max(layer for layer, _ in network.cells)
    directions = 2 if network.structure in ("bidirectional", "stack_bidirectional") else 1
    # Named lazily: a stray cell_99999999 must not list 10⁸ gaps.
    missing = list(itertools.islice(((layer, direction) for layer in range(layers)
                                     for direction in range(directions)
                                     if (layer, direction) not in network.cells), 9))
    if missing:
        text = listed(f"layer {layer} {('fw', 'bw')[direction] if directions == 2 else ''}"
                      .strip() for layer, direction in missing)
        raise FormatError(f"{where}: {network.summary()} lacks {text}; the checkpoint is "
                          "incomplete (or holds cells with custom names).")
    kinds = {BY_SCOPE[cell] for cell, _ in network.cells.values()}
    _check_cell_options(options, kinds, where)
    parts: list[RNN] = []
    for layer in range(layers):
        found = [_read_cell(variables, *network.cells[layer, direction], options)
                 for direction in range(directions)]
        specs = [spec for spec, _ in found]
        if len(specs) == 2 and specs[0] != specs[1]:
            raise ShapeError(
                f"{where}: layer {layer}: fw is {specs[0].describe(article=True)} but bw is "
                f"{specs[1].describe(article=True)}; expected the same cell in both directions.")
        spec = specs[0].replace(bidirectional=directions == 2)
        parts.append(RNN(spec, [[params for _, params in found]], copy=False))
    for layer in range(1, layers):
        expected = parts[layer - 1].output_size
        if parts[layer].spec.input_size != expected:
            cell, prefix = network.cells[layer, 0]
            raise ShapeError(
                f"{where}: {prefix}{cell}/ takes inputs of size {parts[layer].spec.input_size} "
                f"(from its kernel's rows), but layer {layer - 1} gives {expected}; expected each "
                "layer to take the previous layer's output (both directions joined).")
    return stack(parts)


def _check_cell_options(options: Mapping[str, Any], kinds: set[Cell], where: str) -> None:
    """Options only some cells take, checked against the cells read or written."""
    families = {cell.family for cell in kinds}
    if options.get("forget_bias") is not None:
        if "lstm" not in families:
            raise FormatError(f"{where}: forget_bias= applies to LSTM cells; this network has "
                              f"{', '.join(sorted(c.name for c in kinds))}. Drop the option.")
        _number("forget_bias", options["forget_bias"])
    if options.get("cell_clip") is not None and not any("cell_clip" in c.holds for c in kinds):
        raise FormatError(f"{where}: cell_clip= applies to LSTMCell and LSTMBlockCell; this "
                          f"network has {', '.join(sorted(c.name for c in kinds))}. Drop it.")
    activation = options.get("activation", "tanh")
    if activation not in ("tanh", "relu"):
        raise UnsupportedFeatureError(f"{where}: activation={activation!r}; expected 'tanh' or "
                                      "'relu' (BasicRNNCell).")
    if activation == "relu" and "rnn" not in families:
        raise FormatError(f"{where}: activation='relu' applies to BasicRNNCell; this network has "
                          f"{', '.join(sorted(c.name for c in kinds))}, whose activation rnnport "
                          "computes as tanh. Drop the option.")


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not np.isfinite(value):
        raise FormatError(f"tf1: {name}={value!r}; expected a finite number.")
    return float(value)


def _read_cell(variables: _Variables, scope_name: str, prefix: str,
               options: Mapping[str, Any]) -> tuple[Spec, dict[str, np.ndarray]]:
    cell = BY_SCOPE[scope_name]
    base = f"{prefix}{scope_name}/"
    where = f"{variables.where}: {base}"
    projection, peepholes, expected, missing = _cell_variables(variables.names, cell, base)
    if missing:
        raise FormatError(f"{where}: {cell.name} variables {', '.join(missing)} are missing; "
                          f"expected {', '.join(expected)}.")
    shapes = {name: variables.shapes[base + name] for name in expected}
    sizes = _sizes(cell, shapes, projection, where)
    _check_shapes(cell, shapes, sizes, projection, peepholes, where)
    arrays = {name: variables.array(base + name) for name in expected}
    dtypes = {a.dtype for a in arrays.values()}
    if len(dtypes) > 1:
        raise FormatError(f"{where}: variables of several dtypes ({', '.join(map(str, dtypes))}); "
                          "expected one dtype per cell.")
    return _canonical(cell, arrays, sizes, options, where)


def _cell_variables(names: Sequence[str], cell: Cell,
                    base: str) -> tuple[bool, bool, list[str], list[str]]:
    """Whether the cell under ``base`` has a projection and peepholes, the names (below
    ``base``) of the variables it reads, and those of them ``names`` lacks."""
    present = {name[len(base):] for name in names if name.startswith(base)}
    projection = "projection/kernel" in present and cell.family == "lstm"
    peepholes = bool({"w_i_diag", "w_f_diag", "w_o_diag"} & present) and cell.family == "lstm"
    expected = list(cell.variables(projection, peepholes))
    return projection, peepholes, expected, [name for name in expected if name not in present]


def _sizes(cell: Cell, shapes: Mapping[str, tuple[int, ...]], projection: bool,
           where: str) -> tuple[int, int, int]:
    """(input, hidden, projection) from the kernel shapes."""
    kernel = "gates/kernel" if cell.family == "gru" else "kernel"
    gates = {"lstm": 4, "gru": 2, "rnn": 1}[cell.family]
    shape = shapes[kernel]
    if len(shape) != 2 or shape[1] % gates or shape[1] == 0:
        raise ShapeError(f"{where}{kernel}: shape {list(shape)}; expected a 2-D kernel (I + H, "
                         f"{gates}·H) with x's rows first, then h's.")
    hidden = shape[1] // gates
    recurrent = hidden
    proj = 0
    if projection:
        proj_shape = shapes["projection/kernel"]
        if len(proj_shape) != 2 or proj_shape[0] != hidden or proj_shape[1] < 1:
            raise ShapeError(f"{where}projection/kernel: shape {list(proj_shape)}; expected "
                             f"[{hidden}, P] (num_units {hidden} from the kernel's columns).")
        proj = recurrent = proj_shape[1]
    inputs = shape[0] - recurrent
    if inputs < 1:
        raise ShapeError(f"{where}{kernel}: shape {list(shape)}; its {shape[0]} rows leave no room "
                         f"for inputs after the {recurrent} recurrent rows; expected (I + "
                         f"{recurrent}, {shape[1]}).")
    return inputs, hidden, proj


def _check_shapes(cell: Cell, shapes: Mapping[str, tuple[int, ...]], sizes: tuple[int, int, int],
                  projection: bool, peepholes: bool, where: str) -> None:
    inputs, hidden, proj = sizes
    recurrent = proj or hidden
    expected: dict[str, tuple[int, ...]]
    if cell.family == "lstm":
        expected = {"kernel": (inputs + recurrent, 4 * hidden), "bias": (4 * hidden,)}
        if peepholes:
            expected.update({f"w_{g}_diag": (hidden,) for g in "ifo"})
        if projection:
            expected["projection/kernel"] = (hidden, proj)
    elif cell.family == "rnn":
        expected = {"kernel": (inputs + hidden, hidden), "bias": (hidden,)}
    else:
        expected = {"gates/kernel": (inputs + hidden, 2 * hidden), "gates/bias": (2 * hidden,)}
        if cell.scope == "gru_cell":
            expected.update({"candidate/kernel": (inputs + hidden, hidden),
                             "candidate/bias": (hidden,)})
        else:
            expected.update({"candidate/input_projection/kernel": (inputs, hidden),
                             "candidate/input_projection/bias": (hidden,),
                             "candidate/hidden_projection/kernel": (hidden, hidden),
                             "candidate/hidden_projection/bias": (hidden,)})
    problems = [f"{where}{name}: shape {list(shapes[name])}; expected {list(shape)}"
                for name, shape in expected.items() if tuple(shapes[name]) != shape]
    if problems:
        raise ShapeError(problems, hint=f"(A {cell.name} with input size {inputs} and "
                         f"{hidden} units{f', num_proj {proj}' if proj else ''}, sizes taken from "
                         "its kernel.)")


def _canonical(cell: Cell, arrays: Mapping[str, np.ndarray], sizes: tuple[int, int, int],
               options: Mapping[str, Any], where: str) -> tuple[Spec, dict[str, np.ndarray]]:
    inputs, hidden, proj = sizes
    dtype = arrays["gates/kernel" if cell.family == "gru" else "kernel"].dtype
    params: dict[str, np.ndarray] = {}
    if cell.family == "lstm":
        kernel = arrays["kernel"]
        params["weight_ih"] = reorder(kernel[:inputs].T, LSTM_ORDER, CANONICAL["lstm"])
        params["weight_hh"] = reorder(kernel[inputs:].T, LSTM_ORDER, CANONICAL["lstm"])
        params["bias_hh"] = reorder(arrays["bias"], LSTM_ORDER, CANONICAL["lstm"])
        bias_ih = np.zeros(4 * hidden, dtype=dtype)
        block(bias_ih, CANONICAL["lstm"], "f")[...] = _forget_bias(cell, options, where)
        params["bias_ih"] = bias_ih
        peepholes = "w_i_diag" in arrays
        if peepholes:
            params["weight_peephole"] = np.stack([arrays[f"w_{g}_diag"] for g in "ifo"])
        if proj:
            params["weight_hr"] = np.ascontiguousarray(arrays["projection/kernel"].T)
        clip = options.get("cell_clip") if "cell_clip" in cell.holds else None
        spec = Spec("lstm", inputs, hidden, proj_size=proj, peepholes=peepholes,
                    cell_clip=_number("cell_clip", clip) if clip is not None else None)
        return spec, params
    if cell.family == "rnn":
        kernel = arrays["kernel"]
        params = {"weight_ih": np.ascontiguousarray(kernel[:inputs].T),
                  "weight_hh": np.ascontiguousarray(kernel[inputs:].T),
                  "bias_ih": np.zeros(hidden, dtype=dtype),
                  "bias_hh": np.array(arrays["bias"], copy=True)}
        return Spec(f"rnn_{options.get('activation', 'tanh')}", inputs, hidden), params
    gates = arrays["gates/kernel"]
    if cell.scope == "gru_cell":
        candidate = arrays["candidate/kernel"]
        w_n, r_n = candidate[:inputs].T, candidate[inputs:].T
        bias_hh = np.concatenate([arrays["gates/bias"], arrays["candidate/bias"]])
        bias_ih = np.zeros(3 * hidden, dtype=dtype)
    else:
        w_n = arrays["candidate/input_projection/kernel"].T
        r_n = arrays["candidate/hidden_projection/kernel"].T
        zeros = np.zeros(2 * hidden, dtype=dtype)
        bias_ih = np.concatenate([zeros, arrays["candidate/input_projection/bias"]])
        bias_hh = np.concatenate([arrays["gates/bias"], arrays["candidate/hidden_projection/bias"]])
    params = {"weight_ih": np.concatenate([gates[:inputs].T, w_n]),
              "weight_hh": np.concatenate([gates[inputs:].T, r_n]),
              "bias_ih": bias_ih, "bias_hh": bias_hh}
    return Spec("gru", inputs, hidden, reset_after=cell.scope != "gru_cell"), params


# -- write --------------------------------------------------------------------------------


def _cell_named(value: Any, where: str) -> Cell:
    if isinstance(value, str):
        key = value if value in CELLS else ALIASES.get(value.lower())
        if key is not None:
            return CELLS[key]
    choices = ", ".join(CELLS)
    hint = close_matches(value, [*CELLS, *ALIASES]) if isinstance(value, str) else ""
    raise FormatError(f"{where}: cell={value!r}; expected one of {choices} (or their scope "
                      f"names, e.g. 'lstm_cell').{hint}")


def _default_cell(spec: Spec) -> Cell:
    if spec.cell == "lstm":
        return CELLS["LSTMCell"]
    if spec.cell == "gru":
        return CELLS["CudnnCompatibleGRUCell" if spec.reset_after else "GRUCell"]
    return CELLS["BasicRNNCell"]


def _cells_for(layers: list[RNN], option: Any, where: str) -> list[Cell]:
    if option is None:
        return [_default_cell(layer.spec) for layer in layers]
    if isinstance(option, str):
        chosen = _cell_named(option, where)
        return [chosen] * len(layers)
    if isinstance(option, Sequence) and len(option) == len(layers):
        return [_cell_named(item, f"{where}, layer {index}") for index, item in enumerate(option)]
    raise FormatError(f"{where}: cell={option!r}; expected one cell name, or a list with one per "
                      f"layer ({len(layers)}).")


def _check_cell(cell: Cell, spec: Spec, options: Mapping[str, Any], where: str) -> None:
    if gate_family(spec.cell) != cell.family:
        raise UnsupportedFeatureError(
            f"{where}: a {cell.name} cannot hold {spec.describe(article=True)}; choose a "
            f"{spec.cell.split('_')[0].upper()} cell (e.g. cell={_default_cell(spec).name!r}).")
    # The family matched above: a simple RNN is this cell's own kind.
    missing = missing_feature(spec, cell.holds | {"simple_rnn", "relu_rnn", "reset_after"})
    if missing is not None:
        key, what, why = missing
        holders = [c.name for c in CELLS.values() if key in c.holds and c.family == cell.family]
        alternatives = f" Cells that hold it: {', '.join(holders)}." if holders else ""
        raise UnsupportedFeatureError(
            f"{where}: {cell.name} cannot hold {what}: {why}. Converting would change the "
            f"numbers, so nothing was written.{alternatives}")
    if cell.name == "GRUCell" and spec.reset_after:
        raise UnsupportedFeatureError(
            f"{where}: GRUCell is a reset-before GRU, and this model is reset-after (its "
            "candidate is tanh(W_n x + b_W + r∘(R_n h + b_R))); no conversion between the two "
            "GRUs is exact. Use cell='CudnnCompatibleGRUCell'.")
    clip = options.get("cell_clip")
    if "cell_clip" in cell.holds and spec.cell_clip != (
            None if clip is None else _number("cell_clip", clip)):
        raise UnsupportedFeatureError(
            f"{where}: the model has cell_clip={spec.cell_clip}, the option says cell_clip={clip}; "
            "a checkpoint does not store the clip, the graph passes it to the cell. Pass "
            f"cell_clip={spec.cell_clip} (the value your graph gives {cell.name}) to write it.")
    activation = options.get("activation", "tanh")
    if spec.cell.startswith("rnn") and activation != spec.nonlinearity:
        raise UnsupportedFeatureError(
            f"{where}: the model's activation is {spec.nonlinearity!r}, the option says "
            f"{activation!r}; a checkpoint does not store it, the graph passes it to BasicRNNCell. "
            f"Pass activation={spec.nonlinearity!r} to write it.")


def _structure(option: Any, bidirectional: bool, layers: int, where: str) -> str:
    """The TF1 structure to name variables after: the option, checked, or the natural one."""
    if option is None:
        if bidirectional:
            return "stack_bidirectional"
        return "multi" if layers > 1 else "single"
    if not isinstance(option, str) or option not in STRUCTURES:
        raise FormatError(f"{where}: structure={option!r}; expected one of "
                          f"{', '.join(map(repr, STRUCTURES))}.{close_matches(str(option), STRUCTURES)}")
    fits = {"single": not bidirectional and layers == 1, "multi": not bidirectional,
            "bidirectional": bidirectional and layers == 1,
            "stack_bidirectional": bidirectional}[option]
    if not fits:
        kind = f"{layers}-layer {'bidirectional' if bidirectional else 'one-directional'}"
        raise FormatError(f"{where}: structure={option!r} ({STRUCTURES[option]}) cannot name a "
                          f"{kind} network.")
    return option


def _prefix(structure: str, scope: str, layer: int, direction: int) -> str:
    head = f"{scope}/" if scope else ""
    side = ("fw", "bw")[direction]
    if structure == "single":
        return head
    if structure == "multi":
        return f"{head}multi_rnn_cell/cell_{layer}/"
    if structure == "bidirectional":
        return f"{head}{side}/"
    return f"{head}cell_{layer}/bidirectional_rnn/{side}/"


def write(model: Model, path: Any = None, **options: Any) -> dict[str, np.ndarray]:
    where = "write(fmt='tf1')"
    layers = model.layers()
    bidirectional = {layer.spec.bidirectional for layer in layers}
    if len(bidirectional) > 1:
        raise UnsupportedFeatureError(
            f"{where}: the stack mixes bidirectional and one-directional layers; TF1 stacks are "
            "either a MultiRNNCell or a stack_bidirectional_dynamic_rnn. Write each part with "
            "its own scope (write(part, 'tf1', scope=...) for part in model.parts).")
    structure = _structure(options.get("structure"), bidirectional == {True}, len(layers), where)
    scope = options.get("scope", {"stack_bidirectional": "stack_bidirectional_rnn",
                                  "bidirectional": "bidirectional_rnn"}.get(structure, "rnn"))
    if not isinstance(scope, str):
        raise FormatError(f"{where}: scope={scope!r}; expected a string such as 'rnn'.")
    scope = scope.strip("/")
    cells = _cells_for(layers, options.get("cell"), where)
    _check_cell_options(options, set(cells), where)
    out: dict[str, np.ndarray] = {}
    for index, (layer, cell) in enumerate(zip(layers, cells, strict=True)):
        location = f"{where}, layer {index}"
        _check_cell(cell, layer.spec, options, location)
        forget_bias = _forget_bias(cell, options, location)
        for direction, named in enumerate(layer.params[0]):
            base = f"{_prefix(structure, scope, index, direction)}{cell.scope}/"
            for name, array in _cell_arrays(cell, layer.spec, named, forget_bias,
                                            location).items():
                out[base + name] = array
    if path is not None:
        prefix = tensorbundle.output_prefix(path)
        checkpoint_state.write_recorded(prefix, lambda: tensorbundle.write_bundle(prefix, out),
                                        "write(fmt='tf1')")
    return out


def _forget_bias(cell: Cell, options: Mapping[str, Any], where: str) -> float:
    """The forget bias the TensorFlow graph adds: the option, or the cell's default."""
    if cell.forget_bias is None:
        return 0.0
    if options.get("forget_bias") is None:
        return cell.forget_bias
    value = _number("forget_bias", options["forget_bias"])
    if cell.fixed_forget_bias and value != cell.forget_bias:
        raise FormatError(f"{where}: {cell.name} has no forget_bias (it is always "
                          f"{cell.forget_bias:g}); drop forget_bias= or choose LSTMCell.")
    return value


def _cell_arrays(cell: Cell, spec: Spec, named: Mapping[str, np.ndarray], forget_bias: float,
                 where: str) -> dict[str, np.ndarray]:
    family = cell.family
    weight_ih, weight_hh = named["weight_ih"], named["weight_hh"]
    dtype = weight_ih.dtype
    size = spec.gate_count * spec.hidden_size
    if spec.bias:
        bias_ih, bias_hh = named["bias_ih"], named["bias_hh"]
    else:
        bias_ih = bias_hh = np.zeros(size, dtype=dtype)
    if family == "lstm":
        shift = np.zeros(size, dtype=dtype)
        block(shift, CANONICAL["lstm"], "f")[...] = forget_bias
        if np.array_equal(bias_ih, shift):  # as read with the same forget_bias: bit-exact
            single = np.array(bias_hh, copy=True)
        elif np.array_equal(bias_hh, shift):
            single = np.array(bias_ih, copy=True)
        else:
            single = sum_exact(bias_ih, bias_hh)
            block(single, CANONICAL["lstm"], "f")[...] -= block(shift, CANONICAL["lstm"], "f")
        out = {"kernel": _kernel([weight_ih, weight_hh], CANONICAL["lstm"], LSTM_ORDER),
               "bias": reorder(single, CANONICAL["lstm"], LSTM_ORDER)}
        if spec.peepholes:
            for row, gate in enumerate("ifo"):
                out[f"w_{gate}_diag"] = np.array(named["weight_peephole"][row], copy=True)
        if spec.proj_size:
            out["projection/kernel"] = np.ascontiguousarray(named["weight_hr"].T)
        return out
    if family == "rnn":
        return {"kernel": _kernel([weight_ih, weight_hh]), "bias": sum_exact(bias_ih, bias_hh)}
    # TF1's GRU keeps r and u (z) together under gates/, the candidate apart.
    hidden = spec.hidden_size
    gates = slice(block_range(GRU_ORDER, "r", hidden)[0], block_range(GRU_ORDER, "z", hidden)[1])
    candidate = slice(*block_range(GRU_ORDER, "n", hidden))
    out = {"gates/kernel": _kernel([weight_ih[gates], weight_hh[gates]]),
           "gates/bias": sum_exact(bias_ih[gates], bias_hh[gates])}
    if cell.scope == "gru_cell":
        single = combine_biases(spec, {"bias_ih": bias_ih, "bias_hh": bias_hh}, "hh", where,
                                "tf1 GRUCell")
        out["candidate/kernel"] = _kernel([weight_ih[candidate], weight_hh[candidate]])
        out["candidate/bias"] = np.array(single[candidate], copy=True)
    else:
        out["candidate/input_projection/kernel"] = _kernel([weight_ih[candidate]])
        out["candidate/input_projection/bias"] = np.array(bias_ih[candidate], copy=True)
        out["candidate/hidden_projection/kernel"] = _kernel([weight_hh[candidate]])
        out["candidate/hidden_projection/bias"] = np.array(bias_hh[candidate], copy=True)
    return out


def _kernel(parts: list[np.ndarray], source: str | None = None,
            target: str | None = None) -> np.ndarray:
    """A TF1 kernel ``(I + H, G·H)``: the canonical input rows' transpose above the
    recurrent rows', gate columns in ``target`` order; one copy of each element."""
    kernel = np.empty((sum(p.shape[1] for p in parts), parts[0].shape[0]), dtype=parts[0].dtype)
    start = 0
    for part in parts:
        transposed(part, source, target, out=kernel[start:start + part.shape[1]])
        start += part.shape[1]
    return kernel


def param_count(model: Model, **options: Any) -> int:
    """Parameters as the TF1 cells save them (one bias; GRUCell 3H(I+H) + 3H)."""
    return int(sum(array.size for array in write(model, **options).values()))


def read_options_for(spec: Spec) -> dict[str, Any]:
    """A checkpoint stores neither a BasicRNNCell's activation nor an LSTM cell clip."""
    if spec.cell.startswith("rnn"):
        return {"activation": spec.nonlinearity}
    return {"cell_clip": spec.cell_clip} if spec.cell_clip is not None else {}


def output_files(path: Path) -> list[Path]:
    """A checkpoint written at ``path`` (a prefix, or its ``.index``): the index and the one
    data shard. The folder's ``checkpoint`` state file is updated too but is not listed: it
    is shared by every checkpoint in the folder, and one there must not stop the write."""
    return tensorbundle.bundle_files(tensorbundle.output_prefix(path))


def input_files(path: Path) -> list[Path]:
    """The index and data shards of the checkpoint that ``path`` names (a prefix, one of its
    files, or a folder's latest checkpoint)."""
    try:
        prefix = tensorbundle.checkpoint_prefix(path)
    except FormatError:  # a folder without a checkpoint: nothing more to protect
        prefix = path
    files = []
    for base in {path, prefix}:
        files += [Path(f"{base}.index"),
                  *base.parent.glob(f"{glob.escape(base.name)}.data-*")]
    return files


def choices(source: Any) -> Choices:
    """The networks ``scope=`` picks from."""
    return Choices("scope", tuple(
        (network["scope"], f"{OPAQUE_WHAT} ({network['cells'][0]})"
         if network["structure"] == OPAQUE else
         f"{network['structure']}, {network['layers']} layer(s) of "
         f"{', '.join(map(str, network['cells']))}")
        for network in networks(source)))


# -- TensorFlow running the checkpoint ------------------------------------------------------


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """TensorFlow restoring the checkpoint ``source`` into the TF1 graph its variable names
    describe, and running ``x`` ``(batch, time, input)``: ``y`` ``(batch, time, D·H_out)``.

    The cells, structure and scope come from the checkpoint: the network whose layers have
    ``model``'s cells and sizes (of several alike, the one holding ``model``'s arrays). What
    a checkpoint does not record comes from ``model``, as reading left it: each LSTM cell's
    ``forget_bias`` (the constant in ``bias_ih``'s forget block), ``cell_clip`` and a
    BasicRNNCell's activation. TensorFlow runs in a process of its own (``python -m
    rnnport.formats._tf1_graph``, on the CPU, within five minutes),
    since TF1 cells need ``TF_USE_LEGACY_KERAS=1`` before TensorFlow is imported; the
    graph's variables are restored with ``tf.compat.v1.train.Saver``, which fails unless
    every name, shape and dtype matches. Returns a sentence instead when it cannot run.
    """
    if not is_path(source):
        return ("the source is a dict of variables, no checkpoint TensorFlow can restore: no "
                "framework check")
    unavailable = tf_keras_unavailable(x, model.input_size, "TF1 cells")
    if unavailable is not None:
        return unavailable
    x = np.asarray(x)
    variables = _Variables(source)
    plan = _framework_plan(variables, model)
    if isinstance(plan, str):
        return f"{plan}: no framework check"
    network, cells = plan
    assert variables.bundle is not None
    job = {"checkpoint": str(variables.bundle.prefix.resolve()),
           "structure": network.structure, "scope": network.scope, "cells": cells}
    y = run_job(["-m", "rnnport.formats._tf1_graph"], job, x.astype(model.dtype, copy=False),
                "the checkpoint")
    if isinstance(y, str):
        return f"{y}: no framework check"
    names = ", ".join(dict.fromkeys(cell["cls"] for cell in cells))
    return (f"TensorFlow restoring {variables.bundle.prefix.name} into "
            f"{STRUCTURES[network.structure]} ({names})", y)


def _framework_plan(variables: _Variables,
                    model: Model) -> tuple[_Network, list[dict[str, Any]]] | str:
    """The network of the checkpoint ``model`` was read from, and the TF cells to build for
    it (class and constructor arguments per layer); or why there is none."""
    found = _networks(variables.names, variables.where)
    fitting, reasons = [], []
    for network in found:
        cells = _framework_cells(variables, network, model)
        if isinstance(cells, str):
            reasons.append(cells)
        else:
            fitting.append((network, cells))
    if len(fitting) > 1:
        fitting = [(network, cells) for network, cells in fitting
                   if _holds(variables, network, model, cells)] or fitting
    if len(fitting) == 1:
        return fitting[0]
    if fitting:
        return (f"{variables.where}: holds {len(fitting)} networks like the model ("
                f"{'; '.join(network.summary() for network, _ in fitting)}) and none holds "
                "its arrays alone")
    if len(reasons) == 1:
        return reasons[0]
    if not reasons:
        return f"{variables.where}: holds no TF1 recurrent cell variables"
    return (f"{variables.where}: none of its {len(found)} networks is the model's: "
            f"{'; '.join(reasons)}")


def _framework_cells(variables: _Variables, network: _Network,
                     model: Model) -> list[dict[str, Any]] | str:
    """``{"cls", "kwargs"}`` per layer for TensorFlow to build ``network`` as ``model``
    computes it, or why ``model`` is not that network."""
    layers = model.layers()
    directions = 2 if network.structure in ("bidirectional", "stack_bidirectional") else 1
    count = 1 + max(layer for layer, _ in network.cells)
    if count != len(layers) or len(network.cells) != count * directions or any(
            layer.spec.bidirectional != (directions == 2) for layer in layers):
        return (f"{network.summary()} is not the model's {len(layers)} "
                f"{'bidirectional ' if layers[0].spec.bidirectional else ''}layer(s)")
    out = []
    for index, layer in enumerate(layers):
        spec = layer.spec
        scope_name, prefix = network.cells[index, 0]
        cell = BY_SCOPE[scope_name]
        base = f"{prefix}{scope_name}/"
        where = f"{variables.where}: {base}"
        projection, peepholes, expected, missing = _cell_variables(variables.names, cell, base)
        if missing:
            return f"{where}: {cell.name} variables {', '.join(missing)} are missing"
        try:
            sizes = _sizes(cell, {name: variables.shapes[base + name] for name in expected},
                           projection, where)
            _check_cell(cell, spec, {"cell_clip": spec.cell_clip,
                                     "activation": spec.nonlinearity}, where)
        except RnnportError as error:
            return str(error).rstrip(".")
        if (*sizes, peepholes) != (spec.input_size, spec.hidden_size, spec.proj_size,
                                   spec.peepholes):
            return (f"{where}: {cell.name} with input size {sizes[0]}, {sizes[1]} units"
                    f"{f', num_proj {sizes[2]}' if sizes[2] else ''}"
                    f"{', peepholes' if peepholes else ''}; layer {index} of the model is "
                    f"{spec.describe(article=True)}")
        kwargs: dict[str, Any] = {"num_units": spec.hidden_size}
        if cell.forget_bias is not None and not cell.fixed_forget_bias:
            forget_bias = _model_forget_bias(layer)
            if forget_bias is None:
                return (f"layer {index}: bias_ih's forget block is not one number, as reading "
                        "a checkpoint leaves it (forget_bias there, zeros elsewhere), so the "
                        "forget_bias TensorFlow should add is unknown")
            kwargs["forget_bias"] = forget_bias
        if cell.name == "LSTMCell":
            kwargs.update(use_peepholes=spec.peepholes, num_proj=spec.proj_size or None,
                          cell_clip=spec.cell_clip)
        if cell.family == "rnn":
            kwargs["activation"] = spec.nonlinearity
        out.append({"cls": cell.name, "kwargs": kwargs})
    return out


def _model_forget_bias(layer: RNN) -> float | None:
    """The constant reading put in ``bias_ih``'s forget block (0 without biases)."""
    if not layer.spec.bias:
        return 0.0
    values = np.concatenate([np.ravel(block(named["bias_ih"], CANONICAL["lstm"], "f"))
                             for named in layer.params[0]])
    return float(values[0]) if values.size and np.all(values == values[0]) else None


def _holds(variables: _Variables, network: _Network, model: Model,
           cells: list[dict[str, Any]]) -> bool:
    """Whether ``network``'s variables are exactly what writing ``model`` with these cells
    would save."""
    for index, (layer, built) in enumerate(zip(model.layers(), cells, strict=True)):
        for direction, named in enumerate(layer.params[0]):
            scope_name, prefix = network.cells[index, direction]
            cell = BY_SCOPE[scope_name]
            forget_bias = built["kwargs"].get("forget_bias", cell.forget_bias or 0.0)
            expected = _cell_arrays(cell, layer.spec, named, forget_bias, variables.where)
            if not all(np.array_equal(variables.array(f"{prefix}{scope_name}/{name}"), array)
                       for name, array in expected.items()):
                return False
    return True


FORMAT = Format(
    "tf1", sniff=sniff, reader=read, writer=write, counter=param_count,
    read_options=READ_OPTIONS, write_options=WRITE_OPTIONS,
    features=frozenset({"projection", "peepholes", "cell_clip", "reset_before"}),
    # Every TF1 cell keeps one bias (CudnnCompatibleGRUCell sums even the r and z pairs),
    # and saves it even for a network without biases (as zeros).
    one_bias=frozenset({"lstm", "gru", "gru_reset_before", "rnn"}), always_bias=True,
    suffixes=(Suffix(".ckpt", "a TF1 checkpoint prefix"),
              Suffix(".index", "a TF1 checkpoint's index")),
    # The writer is told what the graph passes to the cells: the same as reading needs.
    read_options_for=read_options_for, write_options_for=read_options_for,
    output_files=output_files, input_files=input_files, gate_names={"g": "j", "z": "u"},
    run_time_constants=(RunTimeConstant(
        "forget_bias", default=1.0, neutral=0.0, cells=frozenset({"lstm"}),
        what="TF1 LSTM cells add forget_bias (default 1.0, never saved) to gate f at run time",
        adder="TensorFlow"),),
    networks=choices, notes=notes, framework_forward=framework_forward,
    names={"projection": "LSTMCell num_proj", "peepholes": "LSTMCell use_peepholes",
           "cell_clip": "LSTMCell cell_clip", "reset_before": "GRUCell",
           "reset_after": "CudnnCompatibleGRUCell"})
