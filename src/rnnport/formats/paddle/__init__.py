"""PaddlePaddle: ``paddle.nn.LSTM`` / ``GRU`` / ``SimpleRNN`` state dicts, ``.pdparams`` files
and inference models, read without PaddlePaddle.

Paddle keeps PyTorch's layout: per layer ``k`` and direction, ``weight_ih (G·H, I_k)`` and
``weight_hh (G·H, H_out)`` with the gates stacked by rows — LSTM ``i f g o``, GRU ``r z c``
— and ``bias_ih``, ``bias_hh (G·H,)``. The cells compute (``paddle/nn/layer/rnn.py``)::

    LSTM   i, f, o = σ(·), g = tanh(W_g x + b_ig + R_g h + b_hg)
           c' = f∘c + i∘g, h' = o∘tanh(c'); with proj_size, h' = h'·weight_ho (H, P)
    GRU    r, z = σ(W x + b_i + R h + b_h), c = tanh(W_c x + b_ic + r∘(R_c h + b_hc))
           h' = (h − c)∘z + c = (1 − z)∘c + z∘h      (the reset-after GRU)
    SimpleRNN  h' = act(W x + b_i + R h + b_h), act tanh or relu

so the canonical arrays are the state dict's, except the projection: paddle's ``weight_ho``
is ``(H, P)``, canonical ``weight_hr = weight_ho.T``. A paddle cell always has both biases
(``bias_*_attr=False`` makes them constant zeros): a network without biases is written as
the layer made with ``bias_ih_attr=False, bias_hh_attr=False`` keeps it, zero biases and no
PyTorch names for them (paddle 3.3 builds such a layer in one direction and layer only, and
cannot run it; a default layer restores the file from its cells' keys, warning about the
other names). Paddle has no reset-before GRU, no peepholes, clips or layer norm.

Sources (:mod:`.state` has the keys and the pickle, :mod:`.program` the inference models):

* a state dict (``layer.state_dict()``, of paddle tensors or NumPy arrays) or a
  ``.pdparams`` file (``paddle.save``), found by the keys of its cells
  (``0.cell_fw.weight_ih`` …) under any prefix (``encoder.lstm.``; ``prefix=`` picks one
  of several networks); the copies paddle also stores under PyTorch's names are checked
  against the cells' and said in ``notes``; a checkpoint's dict around the state dict
  (``{"model": state_dict, "epoch": 3}``, tensors pickled as ``(name, array)``) is entered,
  its keys read as ``model.…``; bfloat16 (which paddle.save writes as uint16 bits) is read as
  float32, exactly; an optimizer's state (``.pdopt``) is told apart and refused by name;
* a ``paddle.nn.LSTM/GRU/SimpleRNN`` layer (read through its state dict; its mode says a
  SimpleRNN's activation);
* an inference model: ``paddle.jit.save``'s PIR program ``model.json`` or the older
  ``model.pdmodel`` (``paddle.static.save_inference_model``) with ``model.pdiparams``
  beside it, named by either file or by the prefix ``model``; ``op=`` picks one of several
  ``rnn`` operators (0, 1 … in program order, those inside control flow included); the
  program's other operators and parameters (of any dtype) are passed over and listed.

Files are told by their bytes (a pickle of NumPy arrays; JSON with PIR's magic), a
``.pdparams`` or ``.pdmodel`` name by its suffix too. What a state dict does not record:
a SimpleRNN's activation (``activation="tanh"``, paddle's default, or ``"relu"``) and
``time_major``, which changes the input's layout, not the weights (``forward`` takes
``time_major=`` itself).

Writing gives the state dict ``paddle.nn.LSTM/GRU/SimpleRNN(...).state_dict()`` holds, as
NumPy arrays (both names of every parameter, as paddle has them), and with ``path`` a
``.pdparams`` file that ``layer.set_state_dict(paddle.load(path))`` restores; a Stack of
differing parts, with ``per_part=True``, one state dict per part (with ``path``, one file
each: ``enc.part0.pdparams`` …). The framework
check (``convert --verify``) has paddle load the file (``paddle.load`` into a layer built for
the network; ``paddle.jit.load`` for an inference model) and run it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import AmbiguousSourceError, FormatError, UnsupportedFeatureError
from ...io.atomic import atomic_write, check_target
from ...io.inputs import head, read_file
from ...model import RNN, Model, Stack, stack
from ...spec import Spec
from .._common import describe, is_path, listed
from .._jobs import run_job
from .._protocol import Choices, Format, Suffix
from .program import PROGRAM_SUFFIXES, Program, RnnOp, load_program, parameters
from .state import (
    CELL_NAMES,
    MODES,
    NAME_TABLE,
    Network,
    find,
    flat_items,
    pickle_dict,
    read_network,
    state_dict,
    unpickled,
)

__all__ = ["FORMAT", "read", "sniff", "write"]

READ_OPTIONS = frozenset({"prefix", "activation", "op"})
WRITE_OPTIONS = frozenset({"per_part"})
PDPARAMS = ".pdparams"
PDIPARAMS = ".pdiparams"
PDMODEL = ".pdmodel"
# The first bytes of a legacy torch.save file: a pickled magic number (torch reads it).
TORCH_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."
LAYER_CLASSES = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "rnn"}
# The ends of the keys of an optimizer's state dict (Adam's, Momentum's …, and its schedule).
OPTIMIZER_ENDINGS = ("_moment1_0", "_moment2_0", "_beta1_pow_acc_0", "_beta2_pow_acc_0",
                     "_velocity_0", "LR_Scheduler")


# -- what a source is ----------------------------------------------------------------------


def _is_layer(value: Any) -> bool:
    return type(value).__module__.startswith("paddle") and \
        getattr(value, "mode", None) in MODES and hasattr(value, "state_dict")


def kind_of(path: str | os.PathLike[str]) -> str | None:
    """``pdparams``, ``program`` (a PIR ``.json`` or a ``.pdmodel``), ``pdiparams`` (the
    parameters, read with the program beside them), ``prefix`` (``model`` for
    ``model.json``), ``folder`` (one holding one inference model, as models are shipped:
    ``inference.pdmodel`` and ``inference.pdiparams``), or None."""
    text = os.fspath(path)
    suffix = Path(text).suffix.lower()
    if os.path.isdir(path):
        return "folder" if _folder_model(Path(text)) is not None else None
    if not os.path.isfile(path):
        return "prefix" if not os.path.exists(path) and any(
            os.path.isfile(text + ending) for ending in PROGRAM_SUFFIXES) and \
            _program_file(Path(text)) is not None else None
    start = head(path, 512)
    if start is None:
        return None
    if start[:1] == b"\x80" and start[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") and \
            not start.startswith(TORCH_MAGIC) and b"numpy" in start and b"ndarray" in start:
        return "pdparams"
    if start.lstrip()[:1] == b"{" and b'"magic"' in start and b'"pir"' in start:
        return "program"
    if suffix == PDPARAMS:
        return "pdparams"
    if suffix == PDMODEL:
        return "program"
    if suffix == PDIPARAMS and _program_file(Path(text).with_suffix("")) is not None:
        return "pdiparams"
    return None


# The kinds of path read as an inference model.
PROGRAM_KINDS = ("program", "pdiparams", "prefix", "folder")

# Entries of a folder looked at for its inference model: a model's folder holds a few files.
FOLDER_ENTRIES = 10_000


def _folder_model(folder: Path) -> Path | None:
    """The stem of the one inference model (a ``.pdiparams`` with its program) in
    ``folder``, or None when it holds none or several."""
    found = []
    with os.scandir(folder) as entries:
        for count, entry in enumerate(entries):
            if count >= FOLDER_ENTRIES:
                return None
            if entry.name.lower().endswith(PDIPARAMS) and entry.is_file():
                stem = folder / entry.name[:-len(PDIPARAMS)]
                if _program_file(stem) is not None:
                    found.append(stem)
    return found[0] if len(found) == 1 else None


def _program_file(stem: Path) -> Path | None:
    """The program of the model ``stem`` names (``stem.json``, else ``stem.pdmodel``)."""
    for ending in PROGRAM_SUFFIXES:
        candidate = Path(f"{stem}{ending}")
        if candidate.is_file():
            return candidate
    return None


def sniff(source: Any) -> bool:
    if _is_layer(source):
        return True
    if is_path(source):
        return kind_of(source) is not None
    if isinstance(source, Mapping):
        return any(network.cells for network in find(source, "a paddle state dict"))
    if isinstance(source, (list, tuple)) and source:
        return all(not isinstance(item, (list, tuple)) and sniff(item) for item in source)
    return False


# -- reading ----------------------------------------------------------------------------


def _activation(options: Mapping[str, Any], where: str) -> str:
    activation = options.get("activation") or "tanh"
    if activation not in ("tanh", "relu"):
        raise FormatError(f"{where}: activation={activation!r}; expected 'tanh' or 'relu' (what "
                          "paddle.nn.SimpleRNN takes).")
    return str(activation)


def _pick(networks: list[Network], prefix: Any, where: str,
          state: Mapping[Any, Any] | None = None) -> Network:
    if not networks:
        keys = [str(key) for key, _ in flat_items(state or {})]
        moments = [key for key in keys if key.endswith(OPTIMIZER_ENDINGS)]
        if moments:
            raise FormatError(
                f"{where}: an optimizer's state (keys like {moments[0]!r}: its moments by "
                "parameter, as paddle.save(optimizer.state_dict(), '….pdopt') writes), not a "
                "model's weights; read the .pdparams saved beside it.")
        raise FormatError(f"{where}: no paddle RNN weights found; expected keys like "
                          "'0.cell.weight_ih' or '0.cell_fw.weight_ih' (paddle.nn.LSTM/GRU/"
                          "SimpleRNN's state_dict), or 'weight_ih_l0'.")
    if prefix is None:
        if len(networks) > 1:
            raise AmbiguousSourceError(
                f"{where}: holds {len(networks)} RNNs, with key prefixes "
                f"{listed(repr(network.prefix) for network in networks)}; pass prefix= with "
                "one of them.")
        return networks[0]
    wanted = {prefix, f"{prefix}."} if isinstance(prefix, str) else set()
    chosen = [network for network in networks if network.prefix in wanted]
    if len(chosen) != 1:
        raise FormatError(f"{where}: no RNN with prefix {prefix!r}; prefixes found: "
                          f"{listed(repr(network.prefix) for network in networks)}.")
    return chosen[0]


def _state(source: Any) -> tuple[Mapping[Any, Any], str, Path | None]:
    """A state dict source (a path to a ``.pdparams``, a dict, a layer) as its dict, where
    it came from, and the file."""
    if is_path(source):
        where = os.fspath(source)
        data = read_file(source, where)
        return unpickled(data, where, len(data)), where, Path(source)
    if _is_layer(source):
        return source.state_dict(), f"paddle {type(source).__name__}", None
    return source, "paddle state dict", None


def _read_state(source: Any, options: Mapping[str, Any]) -> tuple[RNN, list[str], Network]:
    state, where, _ = _state(source)
    activation = _activation(options, where)
    mode = source.mode if _is_layer(source) else None
    if mode is not None and mode.startswith("RNN") and options.get("activation") and \
            MODES[mode] != f"rnn_{options['activation']}":
        raise FormatError(f"{where}: activation={options['activation']!r} contradicts the "
                          f"layer's mode {mode!r}; drop the option.")
    network = _pick(find(state, where), options.get("prefix"), where, state)
    rnn, found = read_network(network, activation, where, mode)
    return rnn, found, network


def _program_paths(source: str | os.PathLike[str]) -> tuple[Path, Path]:
    """(program, parameters) of an inference model named by either file or its prefix."""
    path = Path(source)
    kind = kind_of(path)
    if kind in ("prefix", "pdiparams", "folder"):
        stem = path if kind == "prefix" else _folder_model(path) if kind == "folder" \
            else path.with_suffix("")
        assert stem is not None
        program = _program_file(stem)
        if program is None:
            raise FormatError(f"{os.fspath(path)}: no {' or '.join(PROGRAM_SUFFIXES)} program "
                              "beside it; an inference model is read with its program.")
        return program, Path(f"{stem}{PDIPARAMS}")
    return path, path.with_suffix(PDIPARAMS)


def _chosen_op(program: Program, option: Any, where: str) -> RnnOp:
    if not program.rnns:
        others = listed(program.others) or "none"
        raise UnsupportedFeatureError(
            f"{where}: the program has no rnn operator (its operators: {others}); rnnport reads "
            "the rnn operator paddle.nn.LSTM/GRU/SimpleRNN run. A projected LSTM, or cells "
            "stepped by hand, run as elementary operators: save the layer's state_dict with "
            "paddle.save and read that.")
    if option is None:
        if len(program.rnns) > 1:
            raise AmbiguousSourceError(
                f"{where}: the program runs {len(program.rnns)} rnn operators; pass op= with "
                f"one of {', '.join(str(op.index) for op in program.rnns)} (program order).")
        return program.rnns[0]
    index = int(option) if isinstance(option, (int, str)) and str(option).isdigit() else -1
    if not 0 <= index < len(program.rnns):
        raise FormatError(f"{where}: op={option!r}; expected one of "
                          f"{', '.join(str(op.index) for op in program.rnns)}.")
    return program.rnns[index]


def _read_program(source: str | os.PathLike[str], options: Mapping[str, Any],
                  ) -> tuple[RNN, Program, RnnOp]:
    program_path, params_path = _program_paths(source)
    where = os.fspath(program_path)
    program = load_program(program_path, where)
    op = _chosen_op(program, options.get("op"), where)
    cells = op.num_layers * (2 if op.bidirectional else 1)
    if len(op.weights) != 4 * cells:
        raise FormatError(f"{where}: {op.describe()} lists {len(op.weights)} weights; expected "
                          f"{4 * cells} (weight_ih, weight_hh, bias_ih, bias_hh of {cells} "
                          "cells).")
    arrays = parameters(program, params_path, set(op.weights), where)
    network = Network("")
    directions = 2 if op.bidirectional else 1
    for cell in range(cells):
        slot = (cell // directions, cell % directions)
        names = (op.weights[2 * cell], op.weights[2 * cell + 1],
                 op.weights[2 * cells + 2 * cell], op.weights[2 * cells + 2 * cell + 1])
        network.cells[slot] = {name: (key, arrays[key])
                               for name, key in zip(CELL_NAMES, names, strict=False)}
    rnn, _ = read_network(network, "tanh", f"{where}, {op.describe()}", op.mode)
    declared = (op.input_size, op.hidden_size, op.num_layers, op.bidirectional)
    found = (rnn.spec.input_size, rnn.spec.hidden_size, rnn.spec.num_layers,
             rnn.spec.bidirectional)
    if declared != found:
        raise FormatError(f"{where}: {op.describe()} declares input_size, hidden_size, "
                          f"num_layers, bidirectional = {declared}, but its weights make "
                          f"{found}; the model is damaged.")
    return rnn, program, op


def read(source: Any, **options: Any) -> Model:
    if isinstance(source, (list, tuple)):
        if not source:
            raise FormatError("read(fmt='paddle'): expected a state dict, file or layer, got an "
                              "empty list.")
        return stack([read(item, **options) for item in source])
    if is_path(source):
        kind = kind_of(source)
        if kind is None and os.fspath(source).lower().endswith(".json") and \
                os.path.isfile(source):
            kind = "program"  # asked for as paddle's: its parser says what is wrong
        if kind in PROGRAM_KINDS:
            return _read_program(source, options)[0]
        if kind is None:
            raise FormatError(f"{os.fspath(source)}: no PaddlePaddle file (a .pdparams pickle, a "
                              "PIR .json program or a .pdmodel, with its .pdiparams).")
    elif not (_is_layer(source) or isinstance(source, Mapping)):
        raise FormatError(f"read(fmt='paddle'): expected a paddle state dict, a .pdparams or "
                          f"inference model path, or a paddle.nn.LSTM/GRU/SimpleRNN; got "
                          f"{describe(source)}.")
    return _read_state(source, options)[0]


# -- what else a source holds ---------------------------------------------------------------


def notes(source: Any, **options: Any) -> list[str]:
    """What the source holds beside the network read (see ``Format.notes``)."""
    if isinstance(source, (list, tuple)):
        return []
    if is_path(source) and kind_of(source) in PROGRAM_KINDS:
        return _program_notes(source, options)
    rnn, found, network = _read_state(source, options)
    state, where, _ = _state(source)
    out = list(found)
    others = [other for other in find(state, where) if other.prefix != network.prefix]
    used = {*network.keys(), *(key for other in others for key in other.keys())}
    rest = [str(key) for key, _ in flat_items(state)
            if key not in used and not (isinstance(key, str) and key.endswith(NAME_TABLE))]
    if others:
        out.append(f"the state dict holds {len(others)} other RNN(s), with key prefixes "
                   f"{listed(repr(other.prefix) for other in others)}; prefix= picks one.")
    if rest:
        out.append(f"{len(rest)} other key(s) are not read: {listed(rest)}.")
    if any(isinstance(key, str) and key.endswith(NAME_TABLE) for key, _ in flat_items(state)):
        out.append(f"{NAME_TABLE} (each key's parameter name in the program, as paddle.save "
                   "stores it) is not needed to read the network.")
    if rnn.spec.cell.startswith("rnn") and not _is_layer(source) and "activation" not in options:
        out.append("a SimpleRNN's activation is not stored: read as tanh (paddle's default); "
                   "pass activation='relu' for a relu SimpleRNN.")
    out.append("time_major is not stored: it changes the input's layout, not the weights "
               "(forward takes time_major=).")
    return out


def _program_notes(source: str | os.PathLike[str], options: Mapping[str, Any]) -> list[str]:
    _, program, op = _read_program(source, options)
    out = [f"a {program.kind} inference model: the network is {op.describe()}, read without "
           "PaddlePaddle."]
    if op.time_major is not None:
        shapes = [shape for _, shape in program.inputs]
        out.append(f"the model takes its input {'time' if op.time_major else 'batch'}-major"
                   + (f" (fed as {list(shapes[0])}, -1 free)" if shapes and shapes[0] else "")
                   + "; forward takes either (time_major=).")
    if len(program.rnns) > 1:
        out.append(f"the program runs {len(program.rnns)} rnn operators; op= picks one "
                   f"(this is op={op.index}).")
    if program.others:
        out.append("the program's other operators are not read: "
                   f"{listed(f'{name} ×{count}' for name, count in program.others.items())}.")
    if op.nested:
        out.append(f"{op.describe()} runs inside a control-flow block (a condition's branch or "
                   "a loop's body): its weights are read; whether, and how often, it runs is the "
                   "program's to decide.")
    elif program.nested:
        out.append(f"{program.nested} nested block(s) or region(s) (loops, conditions) are not "
                   "read beyond their rnn operators.")
    return out


def networks(source: Any) -> Choices:
    """The networks a source holds: state dicts' by ``prefix``, programs' by ``op``."""
    if is_path(source) and kind_of(source) in PROGRAM_KINDS:
        program_path, _ = _program_paths(source)
        program = load_program(program_path, os.fspath(program_path))
        return Choices("op", tuple((str(op.index), op.describe()) for op in program.rnns))
    state, where, _ = _state(source)
    return Choices("prefix", tuple((network.prefix, network.describe())
                                   for network in find(state, where)))


def fixed_input(source: Any) -> tuple[int, int] | None:
    """The (batch, time) an inference model's input is fixed at, where it fixes its time."""
    if not (is_path(source) and kind_of(source) in PROGRAM_KINDS):
        return None
    _, program, op = _read_program(source, {})
    shapes = [shape for _, shape in program.inputs if len(shape) == 3]
    if op.time_major is None or not shapes:
        return None
    time, batch = (shapes[0][0], shapes[0][1]) if op.time_major else \
        (shapes[0][1], shapes[0][0])
    return (batch if batch > 0 else 2, time) if time > 0 else None


# -- writing ------------------------------------------------------------------------------


def write(model: Model, path: str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """``model``'s state dict (see the module docstring); with ``path``, a ``.pdparams``."""
    if isinstance(model, Stack):
        if not options.get("per_part"):
            raise UnsupportedFeatureError(
                f"write(fmt='paddle'): one paddle.nn.LSTM/GRU/SimpleRNN holds one uniform "
                f"network, and this Stack has {len(model.parts)} different parts "
                f"({'; '.join(spec.describe() for spec in model.specs)}). Pass per_part=True "
                "for a list with one state dict per part (with path=, one .pdparams per part), "
                "or write each of stack.parts.")
        if path is not None:
            raise FormatError("write(fmt='paddle'): path= saves one state dict; with "
                              "per_part=True save each part yourself.")
        return [write(part) for part in model.parts]
    state = state_dict(model)
    if path is not None:
        target = check_target(path)
        if not target.name.lower().endswith(PDPARAMS):
            raise FormatError(f"write(fmt='paddle'): path {str(target)!r}; expected a name "
                              f"ending in {PDPARAMS!r} (paddle.save's state dict file); rnnport "
                              "does not write inference models. Nothing was written.")
        data = pickle_dict(state)
        atomic_write(target, lambda handle: handle.write(data))
    return state


def param_count(model: Model, **options: Any) -> int:
    """Numbers a paddle state dict stores: both biases always (zeros for a network without),
    and most parameters twice (under the cell's name and PyTorch's, as paddle attaches them)."""
    return sum(np.asarray(value).size for part in (model.parts if isinstance(model, Stack)
                                                   else [model])
               for value in state_dict(part).values())


def read_options_for(spec: Spec) -> dict[str, Any]:
    """A state dict does not record a SimpleRNN's activation."""
    return {"activation": "relu"} if spec.cell == "rnn_relu" else {}


# -- running it in paddle ---------------------------------------------------------------------


def _prefix_of(source: Any, model: RNN) -> str | None:
    """The key prefix of the network of the state dict ``source`` that reads as ``model``
    (the one read, of several), or None when none does."""
    state, where, _ = _state(source)
    activation = "relu" if model.spec.cell == "rnn_relu" else "tanh"
    for network in find(state, where):
        with contextlib.suppress(FormatError):
            if read_network(network, activation, where)[0] == model:
                return network.prefix
    return None


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """Paddle computing ``y`` for ``x`` (batch, time, I) from the file itself, in a process of
    its own (paddle crashes when imported after TensorFlow; :mod:`._run`): a ``.pdparams``
    through ``paddle.load`` and ``set_state_dict`` into a layer built for ``model``, an
    inference model through ``paddle.jit.load``; or why not."""
    if importlib.util.find_spec("paddle") is None:
        return "PaddlePaddle is not installed: no framework check"
    if isinstance(model, Stack):
        return "a stack of differing parts is no single paddle layer: no framework check"
    kind = kind_of(source) if is_path(source) else None
    if kind is None:
        return "only a paddle file is loaded by paddle itself: no framework check"
    spec = model.spec
    job = {"source": os.fspath(Path(source).resolve()), "kind": kind,
           "spec": {"cell": spec.cell, "input_size": spec.input_size,
                    "hidden_size": spec.hidden_size, "num_layers": spec.num_layers,
                    "bidirectional": spec.bidirectional, "proj_size": spec.proj_size},
           "prefix": _prefix_of(source, model) if kind == "pdparams" else None}
    y = run_job(["-m", "rnnport.formats.paddle._run"], job, np.asarray(x), os.fspath(source),
                runtime="PaddlePaddle", environment={"GLOG_minloglevel": "2"})
    if isinstance(y, str):
        return f"{y}: no framework check"
    label = (f"paddle.jit.load running {_program_paths(source)[0].name}"
             if kind in PROGRAM_KINDS
             else f"paddle.load of {Path(source).name} into a paddle.nn layer")
    return label, y


def input_files(path: Path) -> list[Path]:
    """An inference model's other file (its parameters, or its program); a folder's model's
    two files."""
    if os.path.isdir(path):
        stem = _folder_model(Path(path))
        return [] if stem is None else [path for path in (_program_file(stem),
                                                           Path(f"{stem}{PDIPARAMS}"))
                                        if path is not None]
    text = os.fspath(path)
    lower = text.lower()
    if lower.endswith(PROGRAM_SUFFIXES):
        return [path.with_suffix(PDIPARAMS)]
    if lower.endswith(PDIPARAMS):
        return [path.with_suffix(ending) for ending in PROGRAM_SUFFIXES]
    return [Path(text + ending) for ending in (*PROGRAM_SUFFIXES, PDIPARAMS)] \
        if not os.path.splitext(text)[1] else []


FORMAT = Format(
    "paddle", sniff=sniff, reader=read, writer=write, counter=param_count,
    read_options=READ_OPTIONS, write_options=WRITE_OPTIONS, features=frozenset({"projection"}),
    suffixes=(Suffix(PDPARAMS, "a PaddlePaddle state dict (paddle.save)"),
              Suffix(PDMODEL, "a PaddlePaddle inference program (with its .pdiparams)",
                     writes=False),
              Suffix(PDIPARAMS, "a PaddlePaddle inference model's parameters", writes=False)),
    read_options_for=read_options_for, input_files=input_files,
    layout_notes=("Paddle keeps PyTorch's layout (gates stacked by rows: LSTM i f g o, GRU r z "
                  "c), under each cell's name ({k}.cell_fw.weight_ih) and again under "
                  "PyTorch's (weight_ih_l{k}); a projection is weight_ho (H, P), the canonical "
                  "weight_hr transposed.",),
    gate_names={"n": "c"},
    networks=networks, notes=notes, framework_forward=framework_forward,
    fixed_input=fixed_input,
    names={"projection": "LSTM(proj_size=)", "reset_after": "nn.GRU"})
