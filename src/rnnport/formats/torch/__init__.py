"""PyTorch: ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` modules and their state_dicts.

Keys, per layer ``k`` (``_reverse`` suffix for the backward direction)::

    weight_ih_l{k}   (G·H, I_k)    gates stacked by rows: LSTM i f g o, GRU r z n
    weight_hh_l{k}   (G·H, H_out)
    bias_ih_l{k}     (G·H,)        absent with bias=False
    bias_hh_l{k}     (G·H,)
    weight_hr_l{k}   (P, H)        LSTM with proj_size > 0

This is the canonical layout byte for byte. A state_dict taken from a larger model
(keys like ``encoder.rnn.weight_ih_l0``) is found by its prefix; ``prefix=`` picks one
when several RNNs share the dict.

Cells (``nn.LSTMCell``, ``nn.GRUCell``, ``nn.RNNCell``, stepped by hand in streaming
models) keep one layer's arrays under the same names without the layer suffix:
``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``. A cell reads as a one-layer,
one-direction network (stepping it over a sequence is what ``forward`` computes);
``write(..., as_cell=True)`` gives the cell's keys, and with ``module=True`` the cell module
(``as_cell``, not ``cell``: a conversion hands ``cell=`` to the reader of a flat buffer or the
writer of TF1 cells). A cell's keys are told apart from other formats' by PyTorch's
dotted module paths: a key holding ``/`` is no PyTorch key.

What keys cannot tell: ``nonlinearity="tanh"`` (an ``nn.RNN`` or ``nn.RNNCell`` with relu).
``nn.GRU`` is the reset-after GRU; PyTorch has no peepholes and no cell clip. A
TorchScript archive (``torch.jit.save``) is a module as code, refused: reading it would
mean running it.

Writing gives a dict of NumPy arrays (``module=True``: a ready ``nn.Module``, which needs
torch). A list of state_dicts or modules reads as a stack. Tensors are converted without
importing torch; bfloat16 becomes float32 (exact).

Files are told apart by their bytes, never by their names (``pytorch_model.bin``,
Lightning's ``.ckpt``, ``checkpoint.pth.tar``, ``weights`` with no suffix): a ``torch.save``
zip, a legacy ``torch.save`` pickle, a safetensors file or a ``torch.export`` ``.pt2``
archive (:mod:`.files`, :mod:`.pt2`). All are read without PyTorch: pickles by a
restricted pickle machine that imports and calls nothing (:mod:`rnnport.io.pickled`;
objects of other classes — hyper-parameters, a whole pickled module — are kept as names,
never made), tensors as views of their storages read only when needed, within the
``expansion`` limit (:mod:`.tensors`). The weights may sit anywhere in a checkpoint
(``state_dict``, ``model_state``, ``net``, ``module`` …, DataParallel's ``module.`` and
Lightning's ``model.`` prefixes; :mod:`.networks`): every network found is listed by the key
path ``prefix=`` takes. A ``.pt2`` graph also tells the cell: a relu ``nn.RNN`` reads as one.
Writing a path gives a ``torch.save`` zip (any name but ``.safetensors``) or a safetensors
file, both without PyTorch.

The framework check (``framework_forward``, ``convert --verify``) has PyTorch itself load
such a file (``torch.load(weights_only=True)``, ``safetensors.torch``), put the tensors into
a module built for the network with ``load_state_dict(strict=True)``, and run it.

The ``torch`` engine (``forward(engine="torch", device=None | "cuda" | …)``) writes a
network once as a module on the device and runs it under ``torch.no_grad()``: ``lengths``
as packed sequences (``enforce_sorted=False``), cuDNN on a CUDA device with TF32 off.
float16 weights run in float32, as rnnport computes them; anything ``write`` refuses (a
reset-before GRU, peepholes …) runs in NumPy instead, with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import itertools
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ... import budget
from ...errors import (
    DeviceError,
    DTypeError,
    FormatError,
    RnnportError,
    UnsupportedFeatureError,
)
from ...io.atomic import atomic_write
from ...io.pickled import Builder, Global, Opaque, preview
from ...model import RNN, Model, Stack, exported, stack
from ...spec import Spec
from .._common import MAX_LISTED, describe, is_path, listed, require, to_numpy
from .._protocol import Choices, Engine, Format, Runner, Suffix
from .files import KINDS, kind_of, opened, other_zip, safetensors_bytes, write_zip
from .networks import Group, descend, find, key_text, match, opaque_values, pick
from .tensors import Loaded, NumpyArray, TensorRef

__all__ = ["ENGINE", "FORMAT", "load", "new_module", "save", "to_module"]

READ_OPTIONS = frozenset({"nonlinearity", "prefix"})
WRITE_OPTIONS = frozenset({"module", "batch_first", "per_part", "as_cell"})
SUFFIXES = (Suffix(".pt", "a torch.save file"), Suffix(".pth", "a torch.save file"),
            Suffix(".safetensors", "a safetensors file"),
            Suffix(".bin", "a torch.save file (pytorch_model.bin)"),
            Suffix(".ckpt", "a Lightning checkpoint (torch.save)", writes=False),
            Suffix(".pt2", "a torch.export archive", writes=False))
FILE_SUFFIXES = tuple(suffix.text for suffix in SUFFIXES)

MODULE_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
CELL_MODULES = {"LSTMCell": "lstm", "GRUCell": "gru", "RNNCell": "rnn"}
GATE_CELLS = {4: "lstm", 3: "gru", 1: "rnn"}


def _is_module(value: Any) -> bool:
    """A PyTorch recurrent module (or a subclass of one), told from other frameworks' layers
    of the same names and attributes by the module its class comes from."""
    return hasattr(value, "state_dict") and _from_torch(value) and (
        getattr(value, "mode", None) in MODULE_MODES or _is_cell(value))


def _from_torch(value: Any) -> bool:
    return any(str(getattr(kind, "__module__", "")).split(".")[0] == "torch"
               for kind in type(value).__mro__)


def _is_cell(value: Any) -> bool:
    return type(value).__name__ in CELL_MODULES and hasattr(value, "state_dict") and \
        hasattr(value, "weight_ih")


def sniff(source: Any) -> bool:
    if _is_module(source):
        return True
    if is_path(source):
        # By content; a damaged file named like a PyTorch file is still this format's (its
        # reader says what is wrong), unless its bytes are plainly another format's. A ".bin"
        # is claimed by its bytes alone: other formats' weights files are named so too (an
        # OpenVINO IR's, ncnn's, TensorFlow.js's shards).
        suffix = Path(source).suffix.lower()
        return kind_of(source) is not None or (
            suffix in FILE_SUFFIXES and suffix != ".bin" and Path(source).is_file()
            and not other_zip(source))
    if isinstance(source, Mapping):
        return bool(find(source))
    if isinstance(source, (list, tuple)) and source:
        return all(_is_module(item) or (isinstance(item, Mapping) and sniff(item))
                   for item in source)
    return False


# -- read ------------------------------------------------------------------------------


def read(source: Any, **options: Any) -> Model:
    if isinstance(source, (list, tuple)):
        if not source:
            raise FormatError("read(fmt='torch'): expected a state_dict or module, got an empty "
                              "list.")
        return stack([read(item, **options) for item in source])
    if _is_module(source):
        return _read_module(source, options)
    if is_path(source):
        with opened(source) as loaded:
            return _read_loaded(loaded, options)
    if isinstance(source, Mapping):
        location = "torch state_dict"
        groups = _found(source, location)
        group = pick(groups, options.get("prefix"), location)
        _check_expansion(group, location, None)
        return _read_group(group, options, _where(location, group))
    raise FormatError(f"read(fmt='torch'): expected an nn.LSTM/GRU/RNN, a state_dict (keys like "
                      f"'weight_ih_l0'), or a list of them; got {describe(source)}.")


def _read_loaded(loaded: Loaded, options: Mapping[str, Any]) -> RNN:
    groups = _found(loaded.tree, loaded.where, loaded)
    group = pick(groups, options.get("prefix"), loaded.where)
    _check_expansion(group, loaded.where, loaded.size)
    return _read_group(group, options, _where(loaded.where, group))


def _found(tree: Any, location: str, loaded: Loaded | None = None) -> list[Group]:
    """The networks ``tree`` holds, or an error saying what it holds instead."""
    graphs = loaded.graphs if loaded is not None else ()
    groups = find(tree, graphs, location, loaded.models if loaded is not None else 1)
    if groups:
        return groups
    opaque = opaque_values(tree)
    if opaque:
        listing = listed(f"{path} ({made})" for path, made in opaque)
        raise FormatError(
            f"{location}: no recurrent weights found, and the file pickles Python objects "
            f"rnnport does not build (it never runs a file's code): {listing}. A whole pickled "
            "module (torch.save(model)) keeps its weights inside such objects. Where you trust "
            "the file, save its weights once: torch.save(torch.load(path, map_location='cpu', "
            "weights_only=False).state_dict(), 'weights.pt'), and read that.")
    keys = _top_keys(tree)
    raise FormatError(f"{location}: no RNN weights found; expected keys like 'weight_ih_l0' "
                      f"(at any depth), got {keys or 'no keys'}.")


def _top_keys(tree: Any) -> str:
    if isinstance(tree, Mapping):
        return ", ".join(key_text(key) for key in itertools.islice(tree, 5))
    return _value_text(tree)


def _value_text(value: Any) -> str:
    """What a value a file holds is, for a message (never its whole ``str``)."""
    if isinstance(value, (TensorRef, NumpyArray)):
        return f"one tensor, {value.describe()}"
    if isinstance(value, (Global, Builder)):
        return f"the bare name {value if isinstance(value, Global) else value.name}"
    if isinstance(value, Opaque):
        return f"an object of {preview(value.made_by)[1:-1]}"
    if isinstance(value, (Mapping, list, tuple, np.ndarray)) or hasattr(value, "shape"):
        return describe(value)
    return preview(value)


def _shape_text(value: Any) -> str:
    """A stored value's shape, as notes list it (empty for a value without one)."""
    if isinstance(value, TensorRef):
        return str(value.shape)
    if isinstance(value, NumpyArray):
        return preview(value.shape)
    shape: Any = getattr(value, "shape", None)
    return str(tuple(shape)) if isinstance(shape, tuple) or type(shape).__name__ == "Size" \
        else ""


def _where(location: str, group: Group) -> str:
    return f"{location}{f' (prefix {group.prefix!r})' if group.prefix else ''}"


def _read_module(module: Any, options: dict[str, Any]) -> RNN:
    location = f"torch {type(module).__name__}"
    if _is_cell(module):
        family = CELL_MODULES[type(module).__name__]
        cell = f"rnn_{module.nonlinearity}" if family == "rnn" else family
        mode = f"nonlinearity {getattr(module, 'nonlinearity', None)!r}"
    else:
        cell, mode = MODULE_MODES[module.mode], f"mode {module.mode!r}"
    if "nonlinearity" in options and cell.startswith("rnn") and \
            f"rnn_{options['nonlinearity']}" != cell:
        raise FormatError(f"{location}: option nonlinearity={options['nonlinearity']!r} "
                          f"contradicts the module's {mode}; drop the option.")
    state = module.state_dict()
    group = pick(_found(state, location), None, location)
    rnn = _read_group(group, {**options, "nonlinearity": cell[4:] or "tanh"}
                      if cell.startswith("rnn") else options, location)
    declared = dict(input_size=module.input_size, hidden_size=module.hidden_size,
                    num_layers=getattr(module, "num_layers", 1),
                    bidirectional=bool(getattr(module, "bidirectional", False)),
                    proj_size=getattr(module, "proj_size", 0), bias=bool(module.bias))
    found = {key: getattr(rnn.spec, key) for key in declared}
    if found != declared:
        raise FormatError(f"{location}: its attributes {declared} disagree with its weights "
                          f"{found}.")
    return rnn


def _array(value: Any, where: str) -> np.ndarray:
    """A stored value as a NumPy array: a file's tensor read now, a framework tensor or an
    array-like converted."""
    if isinstance(value, (TensorRef, NumpyArray)):
        return value.array(where)
    if isinstance(value, (Opaque, Global)) or type(value).__name__ == "_Unbuilt":
        made = getattr(value, "made_by", None) or getattr(value, "function", None) or value
        name = made.name if isinstance(made, Builder) else preview(made)
        raise FormatError(f"{where}: a value the file builds by calling {name}, which rnnport "
                          "does not do (it never runs pickled code): a quantized, sparse or "
                          "custom tensor type, or another Python object; expected dense float "
                          "weights. Save the weights as plain tensors.")
    return to_numpy(value, where)


def _read_group(group: Group, options: Mapping[str, Any], where: str) -> RNN:
    entries = group.entries
    if group.cells:
        if group.layered:
            raise FormatError(f"{where}: holds both a cell's keys (weight_ih) and a layered "
                              "network's (weight_ih_l0) under one prefix; expected one of them.")
        if "weight_hr" in entries[(0, 0)]:
            raise FormatError(f"{where}: a cell's keys with weight_hr; PyTorch's cells have no "
                              "projection, and rnnport reads weight_hr only as weight_hr_l<k>.")
    layers = 1 + max(layer for layer, _ in entries)
    directions = 1 + max(direction for _, direction in entries)
    # Named lazily: a stray key such as weight_ih_l99999999 must not list 10⁸ gaps.
    missing = list(itertools.islice(
        (f"weight_ih_l{k}{'_reverse' if d else ''}" for k in range(layers)
         for d in range(directions) if (k, d) not in entries), 6))
    if missing:
        shown = ", ".join(missing[:5]) + (", …" if len(missing) > 5 else "")
        raise FormatError(f"{where}: missing {shown}; expected layers 0…{layers - 1}"
                          f" with {directions} direction(s) each.")
    arrays = {(layer, direction): {name: _array(value, f"{where}, {key(name, layer, direction)}")
                                   for name, value in named.items()}
              for (layer, direction), named in entries.items()}
    for (layer, direction), named in arrays.items():
        for name, array in named.items():
            if array.dtype.kind != "f":
                raise DTypeError(
                    f"{where}, {key(name, layer, direction)}: {array.dtype} weights; expected "
                    "float16, bfloat16, float32 or float64 (a quantized model's integers mean "
                    "nothing without their scales). Save the model's float weights.")
    first = arrays[(0, 0)]
    for required in ("weight_ih", "weight_hh"):
        if required not in first:
            raise FormatError(f"{where}: missing {required}_l0.")
    weight_ih, weight_hh = first["weight_ih"], first["weight_hh"]
    if weight_ih.ndim != 2 or weight_hh.ndim != 2:
        raise FormatError(f"{where}: weight_ih_l0 {weight_ih.shape} and weight_hh_l0 "
                          f"{weight_hh.shape}; expected 2-D (G·H, I) and (G·H, H_out).")
    projection = first.get("weight_hr")
    hidden = projection.shape[1] if projection is not None and projection.ndim == 2 \
        else weight_hh.shape[1]
    gates = weight_hh.shape[0] // hidden if hidden and weight_hh.shape[0] % hidden == 0 else 0
    if gates not in GATE_CELLS:
        raise FormatError(f"{where}: weight_hh_l0 {weight_hh.shape}; expected (G·H, H_out) with "
                          "G = 4 (LSTM), 3 (GRU) or 1 (RNN).")
    cell = GATE_CELLS[gates]
    graph_cell = group.graph.cell if group.graph is not None else None
    if graph_cell is not None and not graph_cell.startswith(cell):
        raise FormatError(f"{where}: node {group.graph.node!r} is {graph_cell} but its "  # type: ignore[union-attr]
                          f"weight_hh {weight_hh.shape} holds {gates} gate(s); the archive is "
                          "damaged.")
    if cell == "rnn":
        nonlinearity = options.get("nonlinearity", graph_cell[4:] if graph_cell else "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise FormatError(f"{where}: nonlinearity={nonlinearity!r}; expected 'tanh' or "
                              "'relu'.")
        if graph_cell is not None and graph_cell != f"rnn_{nonlinearity}":
            raise FormatError(f"{where}: option nonlinearity={nonlinearity!r} contradicts node "
                              f"{group.graph.node!r}, which computes {graph_cell}; drop the "  # type: ignore[union-attr]
                              "option.")
        cell = f"rnn_{nonlinearity}"
    spec = Spec(cell=cell, input_size=weight_ih.shape[1], hidden_size=hidden, num_layers=layers,
                bidirectional=directions == 2,
                proj_size=projection.shape[0] if projection is not None else 0,
                bias="bias_ih" in first or "bias_hh" in first)
    # Copied where they are not new: a state_dict usually holds a live module's parameters,
    # which training changes (a file's tensors are read into arrays of their own).
    fresh = {(layer, direction, name) for (layer, direction), named in entries.items()
             for name, value in named.items() if isinstance(value, (TensorRef, NumpyArray))}
    params = [[{name: array if (layer, direction, name) in fresh else np.array(array, copy=True)
                for name, array in arrays[(layer, direction)].items()}
               for direction in range(directions)] for layer in range(layers)]
    return RNN(spec, params, copy=False)


def choices(source: Any) -> Choices:
    """The RNNs a state_dict (or file) holds, by the key prefix ``prefix=`` takes."""
    if is_path(source):
        with opened(source) as loaded:
            groups = _found(loaded.tree, loaded.where, loaded)
    elif isinstance(source, Mapping):
        groups = _found(source, "torch state_dict")
    else:
        return Choices("prefix", ())
    return Choices("prefix", tuple((group.prefix, group.describe()) for group in groups))


def notes(source: Any, **options: Any) -> list[str]:
    """What a state_dict (or file) holds beside the network ``prefix=`` picks: other RNNs,
    other modules' keys, a training checkpoint's other entries, Python objects not built
    (see ``Format.notes``)."""
    if is_path(source):
        with opened(source) as loaded:
            return _notes(loaded.tree, options, loaded.where, loaded)
    if isinstance(source, Mapping):
        return _notes(source, options, "torch state_dict", None)
    return []  # a module holds its network alone; a list is read whole


def _notes(tree: Any, options: Mapping[str, Any], location: str,
           loaded: Loaded | None) -> list[str]:
    groups = _found(tree, location, loaded)
    group = pick(groups, options.get("prefix"), location)
    out = []
    if loaded is not None:
        out.append(f"{KINDS[loaded.kind]}, read without PyTorch"
                   + (f"; its metadata: {listed(f'{k}={v}' for k, v in loaded.metadata.items())}"
                      if loaded.metadata else "") + ".")
    if group.graph is not None:
        out.append(f"the network is node {group.graph.node!r} "
                   f"({group.graph.target.removeprefix('torch.ops.')}) of model "
                   f"{group.graph.model!r}; its other operations are not read.")
    elif loaded is not None and loaded.kind == "pt2":
        out.append("the graph holds no aten.lstm, gru or rnn node (its recurrence is "
                   "decomposed into elementary operations, or the module is not called): the "
                   "network is read by its parameters' names alone.")
    if group.container and isinstance(tree, Mapping):
        outer = group.container[0]
        others = [repr(key_text(key)) for key in tree if key_text(key) != outer]
        out.append(f"a training checkpoint: its {'.'.join(group.container)!r} entry read as "
                   f"the state_dict" + (f"; beside it {listed(others)}, not read." if others
                                        else "."))
    for other in groups:
        if other is not group:
            out.append(f"another RNN under the key prefix {other.prefix!r}; not read "
                       f"(prefix={other.prefix!r} reads it).")
    modules: dict[str, list[str]] = {}
    for name, value in (group.mapping or {}).items():
        if match(name) is not None or (group.graph is not None and name in group.keys.values()):
            continue  # the network read, or another one noted above
        text = key_text(name)
        owner = text.rsplit(".", 1)[0] if "." in text else ""
        modules.setdefault(owner, []).append(f"{text} {_shape_text(value)}".rstrip())
    for owner, keys in list(modules.items())[:MAX_LISTED]:
        what = f"module {owner!r}" if owner else "top-level keys"
        out.append(f"{what}: {listed(keys)}; not recurrent weights, not read.")
    if len(modules) > MAX_LISTED:
        rest = sum(len(keys) for keys in list(modules.values())[MAX_LISTED:])
        out.append(f"… and {len(modules) - MAX_LISTED} more modules ({rest} keys), not read.")
    opaque = opaque_values(tree)
    if opaque:
        out.append("Python objects the file pickles, kept as names and not built (rnnport "
                   f"runs no file's code): {listed(f'{path} ({made})' for path, made in opaque)}"
                   "; not read.")
    return out


# -- write -----------------------------------------------------------------------------


def key(name: str, layer: int, direction: int) -> str:
    return f"{name}_l{layer}{'_reverse' if direction else ''}"


def write(model: Model, path: Any = None, **options: Any) -> Any:
    if options.get("as_cell") and not (isinstance(model, RNN) and model.spec.num_layers == 1
                                    and not model.spec.bidirectional
                                    and not model.spec.proj_size):
        what = ("a stack of networks" if isinstance(model, Stack)
                else model.spec.describe(article=True))
        raise UnsupportedFeatureError(
            f"write(fmt='torch', as_cell=True): a PyTorch cell is one layer, one direction and no "
            f"projection, and this is {what}. Write it as a module (as_cell=False), or write each "
            "layer of model.layers() as a cell.")
    if isinstance(model, Stack):
        if not options.pop("per_part", False):
            raise UnsupportedFeatureError(
                f"write(fmt='torch'): one nn.{_module_class(model.parts[0].spec)} holds one "
                f"uniform network, and this Stack has {len(model.parts)} different parts "
                f"({'; '.join(s.describe() for s in model.specs)}). Pass per_part=True for a list "
                "with one state_dict (or module) per part, or write each of stack.parts.")
        if path is not None:
            raise FormatError("write(fmt='torch'): path= saves one state_dict; with "
                              "per_part=True save each part yourself.")
        return [write(part, **options) for part in model.parts]
    options.pop("per_part", None)
    cell = bool(options.get("as_cell", False))
    state = {name if cell else key(name, layer, direction): exported(model, array)
             for layer, direction, name, array in model.arrays()}
    if path is not None:
        save(state, path)
    if options.get("module", False):
        if cell and "batch_first" in options:
            raise FormatError("write(fmt='torch'): batch_first= does not apply to a cell, "
                              "which takes one time step.")
        return to_module(model, state, batch_first=options.get("batch_first", False), cell=cell)
    if "batch_first" in options:
        raise FormatError("write(fmt='torch'): batch_first= applies with module=True only.")
    return state


def _module_class(spec: Spec) -> str:
    return {"lstm": "LSTM", "gru": "GRU"}.get(spec.cell, "RNN")


def to_module(model: RNN, state: Mapping[str, np.ndarray], *, batch_first: bool,
              cell: bool = False) -> Any:
    torch = require("torch", extra="torch", purpose="write(fmt='torch', module=True)")
    module = new_module(model.spec, batch_first=batch_first, cell=cell).to(
        getattr(torch, model.dtype.name))
    module.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})  # it copies
    return module.eval()


def new_module(spec: Spec, *, batch_first: bool, cell: bool = False) -> Any:
    """A freshly initialised ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (``cell``: ``nn.LSTMCell``
    / ``nn.GRUCell`` / ``nn.RNNCell``) of ``spec``'s shape, float32, on the CPU."""
    torch = require("torch", extra="torch", purpose="building a PyTorch module")
    if cell:
        shape = dict(input_size=spec.input_size, hidden_size=spec.hidden_size, bias=spec.bias)
        return (torch.nn.LSTMCell(**shape) if spec.cell == "lstm" else
                torch.nn.GRUCell(**shape) if spec.cell == "gru" else
                torch.nn.RNNCell(nonlinearity=spec.nonlinearity, **shape))
    kwargs: dict[str, Any] = dict(input_size=spec.input_size, hidden_size=spec.hidden_size,
                                  num_layers=spec.num_layers, bias=spec.bias,
                                  batch_first=batch_first, bidirectional=spec.bidirectional)
    if spec.cell == "lstm":
        return torch.nn.LSTM(proj_size=spec.proj_size, **kwargs)
    if spec.cell == "gru":
        return torch.nn.GRU(**kwargs)
    return torch.nn.RNN(nonlinearity=spec.nonlinearity, **kwargs)


def load(path: Any) -> dict[str, np.ndarray]:
    """The one network's arrays a PyTorch file holds, by the keys they are stored under
    (``rnn.weight_ih_l0`` …), read without PyTorch; an error when the file holds several
    networks (read it with ``prefix=``)."""
    with opened(path) as loaded:
        group = pick(_found(loaded.tree, loaded.where, loaded), None, loaded.where)
        _check_expansion(group, loaded.where, loaded.size)
        return {str(group.keys[(layer, direction, name)]):
                _array(value, f"{loaded.where}, {group.keys[(layer, direction, name)]}")
                for (layer, direction), named in group.entries.items()
                for name, value in named.items()}


def _check_expansion(group: Group, where: str, size: int | None) -> None:
    """Refuse a network whose lists and tuples would expand, as NumPy arrays, past the
    ``expansion`` limit for ``size`` bytes (a file's size; None: what the lists themselves
    hold, for a state_dict given in memory).

    ``torch.save`` pickles a list once and refers to it again by a two-byte reference, so
    ``[[0.0] * 100] * 100`` nested five deep is a 3 KB file naming 10¹⁰ numbers. A real
    ``state_dict()`` holds tensors only; lists of numbers are read as arrays, within the limit.
    """
    total, held = 0, 0
    for (layer, direction, name), key in group.keys.items():
        value = group.entries[(layer, direction)][name]
        if not isinstance(value, (list, tuple)):
            continue  # tensors are bounded by the file above; other objects are never expanded
        expanded, distinct = _array_bytes(value, f"{where}, {key}")
        total, held = total + expanded, held + distinct
        allowed = budget.allowance("expansion", held if size is None else size)
        if total > allowed:
            before = f" ({total:,} with the lists before it)" if total != expanded else ""
            raise budget.exceeded(
                where, f"the lists under {key!r} would expand to {expanded:,} bytes of "
                f"arrays{before}, from {held:,} bytes of distinct lists that repeat one another "
                "by reference", "expansion", held if size is None else size, total)


def _array_bytes(value: list[Any] | tuple[Any, ...], where: str) -> tuple[int, int]:
    """The bytes nested lists and tuples would take as one NumPy array (their numbers, as
    float64 or wider), and the bytes their distinct lists hold (8 per item). Each distinct
    list is counted once, by its ``id``, without recursion; a list inside itself is refused."""
    numbers: dict[int, int] = {}  # id → the numbers it expands to
    width, held = 8, 0
    pending: list[tuple[Any, bool]] = [(value, False)]
    open_lists: set[int] = set()  # on the path being walked: met again, it holds itself
    while pending:
        item, closing = pending.pop()
        identity = id(item)
        if closing:
            numbers[identity] = sum(numbers[id(child)] for child in item)
            open_lists.discard(identity)
        elif identity in numbers:
            continue
        elif isinstance(item, (list, tuple)):
            if identity in open_lists:
                raise FormatError(f"{where}: a list that holds itself; expected nested lists of "
                                  "numbers (a state_dict holds tensors). The file is damaged or "
                                  "built to exhaust memory.")
            open_lists.add(identity)
            held += 8 * len(item)
            pending.append((item, True))
            pending.extend((child, False) for child in item)
        else:
            count, item_width = _leaf(item)
            numbers[identity] = count
            width = max(width, item_width)
    return numbers[id(value)] * width, held


def _leaf(item: Any) -> tuple[int, int]:
    """How many numbers ``item``, inside a list, adds to its array, and the bytes of each."""
    if isinstance(item, complex):
        return 1, 16
    if isinstance(item, str):  # NumPy's str dtype: 4 bytes per character of the longest
        return 1, 4 * max(len(item), 1)
    if isinstance(item, bytes):
        return 1, max(len(item), 1)
    if isinstance(item, np.ndarray):
        return int(item.size), max(int(item.itemsize), 8)
    numel = getattr(item, "numel", None)  # a torch.Tensor, converted whole
    if callable(numel) and hasattr(item, "element_size"):
        return int(numel()), max(int(item.element_size()), 8)
    return 1, 8  # a number, or an object NumPy keeps as one pointer


def save(state: Mapping[str, np.ndarray], path: Any) -> None:
    """Save a state_dict without PyTorch: a safetensors file for a ``.safetensors`` path, else
    the zip ``torch.save`` writes (``.pt``, ``.pth``, ``pytorch_model.bin`` …), which
    ``torch.load(weights_only=True)`` loads."""
    if Path(path).suffix.lower() == ".pt2":
        raise FormatError(f"write(fmt='torch'): {path}: a .pt2 archive holds a program "
                          "torch.export traced from a module's code, which a state_dict does "
                          "not have; rnnport reads .pt2 files but does not write them. Write a "
                          ".pt (or .safetensors) state_dict, load it into your module, and "
                          "export that with torch.export.")
    if Path(path).suffix.lower() == ".safetensors":
        atomic_write(path, lambda file: file.write(safetensors_bytes(state)))
    else:
        atomic_write(path, lambda file: write_zip(file, state, Path(path).stem or "archive"))


def read_options_for(spec: Spec) -> dict[str, Any]:
    """A state_dict does not say whether a simple RNN runs relu."""
    return {"nonlinearity": spec.nonlinearity} if spec.cell.startswith("rnn") else {}


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """PyTorch computing ``y`` for ``x`` (batch, time, I) from the source itself.

    A module runs as it is (in eval mode: no dropout between layers). A file is loaded by
    PyTorch — ``torch.load(weights_only=True)`` for ``torch.save`` files (zip or legacy),
    ``safetensors.torch.load_file``, ``torch.export.load`` for ``.pt2`` archives — and the
    tensors at the place rnnport read the network from (a state_dict's, likewise) go through
    ``load_state_dict(strict=True)`` into an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``, or the
    cell, built for ``model.spec``: a key rnnport did not read, or one it read wrongly, makes
    PyTorch refuse. Returns (label, y (batch, time, D·H_out)), or why PyTorch cannot run.
    """
    if isinstance(model, Stack):
        return "a stack of differing parts is no single PyTorch module: no framework check"
    if importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed: no framework check"
    if isinstance(source, (list, tuple)) and len(source) == 1:
        source = source[0]
    if _is_module(source):
        return f"PyTorch running the {_module_name(source)} itself", _run(source, x)
    if is_path(source):
        with opened(source) as loaded:
            group = _group_read_as(_found(loaded.tree, loaded.where, loaded), model,
                                   loaded.where)
            kind = loaded.kind
        if isinstance(group, str):
            return group
        tree = _framework_load(Path(source), kind)
        if isinstance(tree, str):
            return tree
        what, location = f"PyTorch loading {Path(source).name}", str(source)
    elif isinstance(source, Mapping):
        location = "torch state_dict"
        group = _group_read_as(_found(source, location), model, location)
        if isinstance(group, str):
            return group
        tree, what = source, "PyTorch loading the state_dict"
    else:
        return (f"{describe(source)} is no PyTorch module, state_dict or file: "
                "no framework check")
    module = _loaded_module(tree, group, model, location)
    under = f" (keys under {group.prefix!r})" if group.prefix else ""
    stepped = ", stepped over time" if _is_cell(module) else ""
    return f"{what}{under} into {_module_name(module)}{stepped}", _run(module, x)


def _group_read_as(groups: list[Group], model: RNN, location: str) -> Group | str:
    """The one group that reads as ``model`` (the reader may have been told ``prefix=``), or
    why there is none."""
    if len(groups) == 1:
        return groups[0]
    options = read_options_for(model.spec)
    matching = [group for group in groups if _reads_as(group, options, location, model)]
    if len(matching) != 1:
        return (f"{location} holds {len(groups)} RNNs and {len(matching)} of them hold the "
                "network read: no framework check")
    return matching[0]


def _framework_load(path: Path, kind: str) -> Any:
    """The file as PyTorch (or safetensors) loads it, or why it does not."""
    import torch

    try:
        if kind == "safetensors":
            if importlib.util.find_spec("safetensors") is None:
                return "safetensors is not installed: no framework check"
            loader = require("safetensors.torch", extra="torch",
                             purpose="loading .safetensors files into PyTorch")
            return loader.load_file(str(path), device="cpu")
        if kind == "pt2":
            program = torch.export.load(str(path))
            return {**program.state_dict, **program.constants}
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except Exception as error:  # PyTorch raises many types; weights_only refuses some globals
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        return (f"PyTorch does not load {path.name} by itself ({type(error).__name__}: {first}): "
                "no framework check")


def _loaded_module(tree: Any, group: Group, model: RNN, location: str) -> Any:
    """A module built for ``model.spec`` holding the tensors PyTorch loaded at ``group``'s
    place in ``tree`` (by ``load_state_dict(strict=True)``)."""
    import torch

    mapping = descend(tree, group.container)
    tensors = {}
    for (layer, direction, name), stored in group.keys.items():
        value = mapping[stored] if isinstance(mapping, Mapping) and stored in mapping else None
        if value is None:
            raise FormatError(f"{location}: PyTorch's own loading holds no {stored!r} under "
                              f"{'.'.join(group.container) or 'the top level'}, where rnnport "
                              "read it; the file is read differently by the two.")
        tensors[name if group.cells else key(name, layer, direction)] = \
            value if isinstance(value, torch.Tensor) else \
            torch.from_numpy(np.array(to_numpy(value, f"{location}, {stored}"), copy=True))
    module = new_module(model.spec, batch_first=True, cell=group.cells).to(
        getattr(torch, model.dtype.name))
    try:
        module.load_state_dict(tensors, strict=True)  # copies, casting bfloat16 exactly
    except RuntimeError as error:
        raise FormatError(
            f"{location}: PyTorch's load_state_dict(strict=True) refuses the tensors under "
            f"prefix {group.prefix!r} for nn.{type(module).__name__} built for the network read, "
            f"{model.spec.describe(article=True)}; expected them to fit it exactly. "
            f"{str(error)[:500]}") from None
    return module.eval()


def _module_name(module: Any) -> str:
    """``nn.LSTM``, ``nn.RNN(nonlinearity='relu')``."""
    nonlinearity = getattr(module, "nonlinearity", None)
    return f"nn.{type(module).__name__}" + (f"(nonlinearity={nonlinearity!r})"
                                            if nonlinearity else "")


def _reads_as(group: Group, options: Mapping[str, Any], location: str, model: RNN) -> bool:
    try:
        return _read_group(group, options, location) == model
    except RnnportError:
        return False


def _run(module: Any, x: np.ndarray) -> np.ndarray:
    """``module`` (a network or a cell, stepped over time) run on ``x`` (batch, time, I) on
    its own device and dtype; ``y`` (batch, time, D·H_out) as NumPy."""
    import torch

    parameter = next(module.parameters())
    inputs = torch.from_numpy(np.ascontiguousarray(x)).to(device=parameter.device,
                                                          dtype=parameter.dtype)
    training = module.training
    module.eval()  # nn.LSTM's dropout= acts between layers in training mode only
    try:
        with torch.no_grad():
            if _is_cell(module):
                state: Any = None
                steps = []
                for step in range(inputs.shape[1]):
                    state = module(inputs[:, step], state)
                    steps.append(state[0] if isinstance(state, tuple) else state)
                y = torch.stack(steps, dim=1)
            elif module.batch_first:
                y = module(inputs)[0]
            else:
                y = module(inputs.transpose(0, 1))[0].transpose(0, 1)
    finally:
        module.train(training)
    return to_numpy(y)


# -- the torch engine: forward(engine="torch") ------------------------------------------------


def engine_device(device: Any) -> str:
    """``forward``'s ``device`` as PyTorch names it (``cpu``, ``cuda``, ``cuda:1`` …), checked
    to be one PyTorch can put a tensor on here."""
    torch = require("torch", extra="torch", purpose="forward(engine='torch')")
    try:
        # Device names are lower case in PyTorch; "CPU" is "cpu", as for the other engines.
        named = torch.device("cpu" if device is None else
                             device.lower() if isinstance(device, str) else device)
        if named.type == "meta":  # tensors without data: nothing would be computed
            raise ValueError("a meta device holds shapes, not values")
        torch.empty(0, device=named)
    except Exception as error:  # PyTorch says "not compiled with CUDA" with several classes
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DeviceError(f"device={device!r}; expected 'cpu' or a device PyTorch can use "
                          f"here, and PyTorch refuses it ({first}). Pass device=None for the "
                          "CPU.") from None
    return str(named)


def build_engine(model: RNN, device: str) -> Runner:
    """``model`` written once as an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` on ``device``, and
    how to run it: time-major tensors sharing the NumPy arrays' memory on the CPU, packed
    sequences for ``lengths``, cuDNN on a CUDA device (with TF32 off, so float32 stays
    float32)."""
    torch = require("torch", extra="torch", purpose="forward(engine='torch')")
    from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

    module = write(model, module=True, batch_first=False)
    if model.dtype == np.float16:  # rnnport computes float16 weights in float32: exact upcast
        module = module.float()
    target = torch.device(device)
    module = module.to(target).requires_grad_(False)
    cudnn = torch.backends.cudnn
    lstm = model.spec.cell == "lstm"

    def tensor(array: np.ndarray) -> Any:
        # torch.from_numpy takes no negative strides and warns about read-only memory.
        if not array.flags.writeable or any(stride < 0 for stride in array.strides):
            array = np.array(array, copy=True)
        value = torch.from_numpy(array)
        return value if target.type == "cpu" else value.to(target)

    def runner(inputs: np.ndarray, h0: np.ndarray, c0: np.ndarray | None,
               lengths: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        flags = (cudnn.flags(enabled=True, benchmark=cudnn.benchmark,
                             deterministic=cudnn.deterministic, allow_tf32=False)
                 if target.type == "cuda" else contextlib.nullcontext())
        with torch.no_grad(), flags:
            x = tensor(inputs)
            hx = (tensor(h0), tensor(c0)) if lstm and c0 is not None else tensor(h0)
            if lengths is None:
                y, final = module(x, hx)
            else:  # packed needs every length ≥ 1; a length-0 sequence is fixed up after
                packed = pack_padded_sequence(x, torch.from_numpy(np.maximum(lengths, 1)),
                                              enforce_sorted=False)
                out, final = module(packed, hx)
                y = pad_packed_sequence(out, total_length=inputs.shape[0])[0]
        h_n, c_n = final if lstm else (final, None)
        return (y.cpu().numpy(), h_n.cpu().numpy(),
                None if c_n is None else c_n.cpu().numpy())

    if target.type == "cpu":
        runner.stream = functools.partial(_stream_step, torch, module)  # type: ignore[attr-defined]
    return runner


def _stream_step(torch: Any, module: Any, h: np.ndarray,
                 c: np.ndarray | None) -> Callable[[np.ndarray], np.ndarray]:
    """A stream's step on the CPU (see :mod:`rnnport.formats.running`): the module built
    once, its state tensors sharing the stream's state arrays, the final state copied
    back into them after each chunk; the module's own operator called directly
    (:func:`_operator`)."""
    h_t = torch.from_numpy(h)
    hx = h_t if c is None else (h_t, torch.from_numpy(c))
    # inference_mode, not no_grad: no version counters nor views tracked for autograd (the
    # module called directly took 10 to 15 µs less a one-step call at batch 1, LSTM 128→128,
    # on 2 shared cores); the same bits.
    inference_mode = torch.inference_mode
    run = _operator(torch, module)

    def step(inputs: np.ndarray) -> np.ndarray:
        if not inputs.flags.writeable:  # torch.from_numpy warns about read-only memory
            inputs = inputs.copy()
        with inference_mode():
            y, final = run(torch.from_numpy(inputs), hx)
            if c is None:
                h_t.copy_(final)
            else:
                hx[0].copy_(final[0])
                hx[1].copy_(final[1])
        return y.numpy()

    return step


# The operator each module's forward ends in, by its mode.
_OPERATORS = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}


def _operator(torch: Any, module: Any) -> Callable[[Any, Any], tuple[Any, Any]]:
    """``module(x, hx)`` for a time-major ``x`` and a state ``hx`` of the module's shapes, as
    the module's ``forward`` ends in it: its operator (``torch._VF.lstm`` …) on the module's
    own weights and settings, without the checks and reshaping of arguments that rnnport
    has done already (about 40 µs of a one-step call at batch 1, LSTM 128→128, against
    130 µs for the operator). The module itself where this PyTorch names no such operator,
    or for a module of another class."""
    functions = getattr(torch, "_VF", None)
    getattr(module, "_update_flat_weights", lambda: None)()  # as forward does first
    name = _OPERATORS.get(getattr(module, "mode", ""), "")
    operator = getattr(functions, name, None) if name else None
    weights = getattr(module, "_flat_weights", None)
    if (operator is None or weights is None
            or type(module) not in (torch.nn.LSTM, torch.nn.GRU, torch.nn.RNN)):
        return module
    settings = (module.bias, module.num_layers, float(module.dropout), module.training,
                module.bidirectional, module.batch_first)
    if name == "lstm":
        def lstm(x: Any, hx: Any) -> tuple[Any, Any]:
            y, h_n, c_n = operator(x, hx, weights, *settings)
            return y, (h_n, c_n)
        return lstm

    def other(x: Any, hx: Any) -> tuple[Any, Any]:
        y, h_n = operator(x, hx, weights, *settings)
        return y, h_n

    return other


ENGINE = Engine("torch", modules=("torch",), extra="torch", build=build_engine,
                device=engine_device)


FORMAT = Format(
    "torch", sniff=sniff, reader=read, writer=write, read_options=READ_OPTIONS,
    write_options=WRITE_OPTIONS, features=frozenset({"projection"}), extra="torch",
    modules=("torch", "safetensors.numpy"),
    suffixes=SUFFIXES,
    read_options_for=read_options_for, framework_forward=framework_forward, networks=choices,
    names={"projection": "proj_size", "reset_after": "nn.GRU"}, notes=notes,
    engines=(ENGINE,))
