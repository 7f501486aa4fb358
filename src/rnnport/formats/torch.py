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

Files: ``.pt``/``.pth`` are read with ``torch.load(weights_only=True)`` (never a plain
unpickle: a file holding Python objects is refused) and written with ``torch.save``;
``.safetensors`` through safetensors' NumPy API. A state_dict wrapped in a training
checkpoint (``{"state_dict": ...}``, ``{"model_state_dict": ...}``) is unwrapped.

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
import importlib.util
import itertools
import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import budget
from ..errors import (
    AmbiguousSourceError,
    DeviceError,
    FormatError,
    RnnportError,
    UnsupportedFeatureError,
)
from ..io.archive import open_zip
from ..io.atomic import atomic_write
from ..model import RNN, Model, Stack, exported, stack
from ..spec import Spec
from ._common import MAX_LISTED, describe, is_path, layer_number, listed, require, to_numpy
from ._protocol import Choices, Engine, Format, Runner, Suffix

__all__ = ["ENGINE", "FORMAT", "load", "new_module", "save", "to_module"]

READ_OPTIONS = frozenset({"nonlinearity", "prefix"})
WRITE_OPTIONS = frozenset({"module", "batch_first", "per_part", "as_cell"})
SUFFIXES = (Suffix(".pt", "a torch.save file"), Suffix(".pth", "a torch.save file"),
            Suffix(".safetensors", "a safetensors file"))
FILE_SUFFIXES = tuple(suffix.text for suffix in SUFFIXES)

# ``weight_ih_l0``, ``bias_hh_l1_reverse`` (nn.LSTM/GRU/RNN), ``weight_ih`` (the cells).
KEY = re.compile(r"^(?P<prefix>.*?)(?P<name>weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)"
                 r"(?:_l(?P<layer>\d+)(?P<reverse>_reverse)?)?$")
MODULE_MODES = {"LSTM": "lstm", "GRU": "gru", "RNN_TANH": "rnn_tanh", "RNN_RELU": "rnn_relu"}
CELL_MODULES = {"LSTMCell": "lstm", "GRUCell": "gru", "RNNCell": "rnn"}
GATE_CELLS = {4: "lstm", 3: "gru", 1: "rnn"}
CHECKPOINT_KEYS = ("state_dict", "model_state_dict", "model")  # training checkpoints' wrappers


def _is_module(value: Any) -> bool:
    return hasattr(value, "state_dict") and (
        getattr(value, "mode", None) in MODULE_MODES or _is_cell(value))


def _is_cell(value: Any) -> bool:
    return type(value).__name__ in CELL_MODULES and hasattr(value, "state_dict") and \
        hasattr(value, "weight_ih")


def _match(key: Any) -> re.Match[str] | None:
    """``key`` as a PyTorch recurrent parameter's name; a cell's (no layer suffix) only under
    a dotted module path, never one holding ``/`` (other formats' paths)."""
    match = KEY.match(key) if isinstance(key, str) else None
    if match and match["layer"] is None and "/" in match["prefix"]:
        return None
    return match


def sniff(source: Any) -> bool:
    if _is_module(source):
        return True
    if is_path(source):
        return Path(source).suffix.lower() in FILE_SUFFIXES
    if isinstance(source, Mapping):
        return any(_match(key) for key in _unwrap(source)[0])
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
        return _read_state_dict(load(source), options, str(source))
    if isinstance(source, Mapping):
        state, wrapper = _unwrap(source)
        location = "torch state_dict" + (f" (checkpoint entry {wrapper!r})" if wrapper else "")
        _check_expansion(state, location, None)
        return _read_state_dict(state, options, location)
    raise FormatError(f"read(fmt='torch'): expected an nn.LSTM/GRU/RNN, a state_dict (keys like "
                      f"'weight_ih_l0'), or a list of them; got {describe(source)}.")


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
    rnn = _read_state_dict(module.state_dict(), {**options, "nonlinearity": cell[4:] or "tanh"}
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


Groups = dict[str, dict[tuple[int, int], dict[str, Any]]]


def _groups(state: Mapping[str, Any], location: str) -> tuple[Groups, set[str], set[str]]:
    """The recurrent keys by prefix → (layer, direction) → name; the prefixes holding a
    cell's keys (no layer suffix), and those holding a layered network's."""
    groups: Groups = defaultdict(lambda: defaultdict(dict))
    cells: set[str] = set()
    layered: set[str] = set()
    for key, value in state.items():
        match = _match(key)
        if match:
            direction = 1 if match["reverse"] else 0
            layer = 0 if match["layer"] is None else layer_number(match["layer"], location)
            (cells if match["layer"] is None else layered).add(match["prefix"])
            groups[match["prefix"]][(layer, direction)][match["name"]] = value
    if not groups:
        keys = ", ".join(list(map(str, state))[:5])
        raise FormatError(f"{location}: no RNN weights found; expected keys like 'weight_ih_l0', "
                          f"got {keys or 'no keys'}.")
    return groups, cells, layered


def _prefix(groups: Groups, options: Mapping[str, Any], location: str) -> str:
    """The prefix ``prefix=`` picks, or the only one."""
    prefix = options.get("prefix")
    if prefix is None:
        if len(groups) > 1:
            listing = ", ".join(repr(p) for p in groups)
            raise AmbiguousSourceError(f"{location}: holds {len(groups)} RNNs, with key prefixes "
                                       f"{listing}; pass prefix= with one of them.")
        return next(iter(groups))
    if not isinstance(prefix, str) or prefix not in groups:
        raise FormatError(f"{location}: no RNN with prefix {prefix!r}; prefixes found: "
                          f"{', '.join(repr(p) for p in groups)}.")
    return prefix


def _read_state_dict(state: Mapping[str, Any], options: Mapping[str, Any], location: str) -> RNN:
    groups, cells, layered = _groups(state, location)
    prefix = _prefix(groups, options, location)
    entries = groups[prefix]
    where = f"{location}{f' (prefix {prefix!r})' if prefix else ''}"
    if prefix in cells:
        if prefix in layered:
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
        listed = ", ".join(missing[:5]) + (", …" if len(missing) > 5 else "")
        raise FormatError(f"{where}: missing {listed}; expected layers 0…{layers - 1}"
                          f" with {directions} direction(s) each.")
    first = {name: to_numpy(value, f"{where}, {name}_l0") for name, value in entries[(0, 0)].items()}
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
    if cell == "rnn":
        nonlinearity = options.get("nonlinearity", "tanh")
        if nonlinearity not in ("tanh", "relu"):
            raise FormatError(f"{where}: nonlinearity={nonlinearity!r}; expected 'tanh' or "
                              "'relu'.")
        cell = f"rnn_{nonlinearity}"
    spec = Spec(cell=cell, input_size=weight_ih.shape[1], hidden_size=hidden, num_layers=layers,
                bidirectional=directions == 2,
                proj_size=projection.shape[0] if projection is not None else 0,
                bias="bias_ih" in first or "bias_hh" in first)
    # Copied: a state_dict usually holds a live module's parameters, which training changes.
    params = [[{name: np.array(to_numpy(value, f"{where}, {name}"), copy=True)
                for name, value in entries[(layer, direction)].items()}
               for direction in range(directions)] for layer in range(layers)]
    return RNN(spec, params, copy=False)


def choices(source: Any) -> Choices:
    """The RNNs a state_dict (or file) holds, by the key prefix ``prefix=`` takes."""
    if is_path(source):
        state, _, _ = _load(source)
    elif isinstance(source, Mapping):
        state, _ = _unwrap(source)
    else:
        return Choices("prefix", ())
    groups, _, _ = _groups(state, "torch state_dict")
    return Choices("prefix", tuple(
        (prefix, f"{max(layer for layer, _ in group) + 1} layer(s), "
                 f"{max(direction for _, direction in group) + 1} direction(s)")
        for prefix, group in groups.items()))


def notes(source: Any, **options: Any) -> list[str]:
    """What a state_dict (or file) holds beside the network ``prefix=`` picks: other RNNs,
    other modules' keys, a training checkpoint's other entries (see ``Format.notes``)."""
    if is_path(source):
        state, wrapper, others = _load(source)
        location = str(source)
    elif isinstance(source, Mapping):
        state, wrapper = _unwrap(source)
        outer = wrapper.split(".")[0] if wrapper else None
        others = [str(key) for key in source if key != outer] if wrapper else []
        location = "torch state_dict"
    else:  # a module holds its network alone; a list is read whole
        return []
    groups, _, _ = _groups(state, location)
    prefix = _prefix(groups, options, location)
    out = []
    if wrapper is not None:
        out.append(f"a training checkpoint: its {wrapper!r} entry read as the state_dict"
                   + (f"; beside it {listed(map(repr, others))}, not read." if others else "."))
    for other in groups:
        if other != prefix:
            out.append(f"another RNN under the key prefix {other!r}; not read "
                       f"(prefix={other!r} reads it).")
    modules: dict[str, list[str]] = {}
    for key, value in state.items():
        match = _match(key)
        if match is not None:  # the network read, or another one noted above
            continue
        owner = str(key).rsplit(".", 1)[0] if "." in str(key) else ""
        shape = getattr(value, "shape", None)
        modules.setdefault(owner, []).append(f"{key} {tuple(shape)}" if shape is not None
                                             else str(key))
    for owner, keys in list(modules.items())[:MAX_LISTED]:
        what = f"module {owner!r}" if owner else "top-level keys"
        out.append(f"{what}: {listed(keys)}; not recurrent weights, not read.")
    if len(modules) > MAX_LISTED:
        rest = sum(len(keys) for keys in list(modules.values())[MAX_LISTED:])
        out.append(f"… and {len(modules) - MAX_LISTED} more modules ({rest} keys), not read.")
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


def load(path: Any) -> dict[str, Any]:
    """A state_dict from a file: ``.safetensors`` through safetensors' NumPy API, ``.pt`` /
    ``.pth`` through ``torch.load(weights_only=True)``, which never runs pickled code. A
    training checkpoint's state_dict is taken from under its key (``state_dict``,
    ``model_state_dict`` or ``model``)."""
    return _load(path)[0]


def _load(path: Any) -> tuple[dict[str, Any], str | None, list[str]]:
    """The state_dict, the checkpoint key it was under (or None), and the checkpoint's other
    top-level keys."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FILE_SUFFIXES:
        raise FormatError(f"{path}: suffix {suffix or 'none'}; expected .pt, .pth or "
                          ".safetensors for a PyTorch file.")
    if not path.is_file():
        raise FormatError(f"{path}: no such file.")
    if suffix == ".safetensors":
        safetensors = require("safetensors.numpy", extra="torch",
                              purpose="reading .safetensors files")
        try:
            return dict(safetensors.load_file(str(path))), None, []
        except Exception as error:  # safetensors raises its own SafetensorError and others
            raise FormatError(f"{path}: not a readable .safetensors file ({error}); it may be "
                              "truncated or damaged, or hold bfloat16 tensors NumPy cannot "
                              "represent (convert them to float32 first).") from None
    torch = require("torch", extra="torch", purpose="reading .pt files")
    with open(path, "rb") as file:
        magic = file.read(4)
    if magic != b"PK\x03\x04":
        raise FormatError(
            f"{path}: not the zip archive torch.save has written since PyTorch 1.6; the file is "
            "truncated or damaged, or comes from an older PyTorch. That legacy format's sizes "
            "cannot be checked before memory is allocated, so rnnport does not read it; "
            "re-save it with a current PyTorch: torch.save(torch.load(path), path).")
    with open_zip(path, "PyTorch file") as archive:  # names and sizes checked before torch
        names = archive.namelist()
    if any("/code/" in name for name in names) or any(name.endswith("/constants.pkl")
                                                      for name in names):
        raise UnsupportedFeatureError(
            f"{path}: a TorchScript archive (torch.jit.save), whose module is code that would "
            "have to run to be loaded; rnnport reads state_dicts and never runs a file's code. "
            "Where you trust the file, take its weights out once: "
            "torch.save(torch.jit.load(path).state_dict(), 'weights.pt'), and read that.")
    try:
        loaded = torch.load(str(path), map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except Exception as error:  # torch raises many types for damaged files
        if "Unsupported global" in str(error) or "Unsupported class" in str(error):
            raise FormatError(
                f"{path}: holds Python objects that are not plain weights (e.g. a whole "
                "nn.Module or custom classes); rnnport loads .pt files with "
                "torch.load(weights_only=True) and never runs pickled code. Re-save the "
                "weights only: torch.save(module.state_dict(), path).") from None
        raise FormatError(f"{path}: not a readable PyTorch file ({type(error).__name__}: "
                          f"{str(error)[:300]}); it may be truncated or damaged.") from None
    top = [str(key) for key in loaded] if isinstance(loaded, Mapping) else []
    loaded, wrapper = _unwrap(loaded)
    if not isinstance(loaded, Mapping):
        raise FormatError(f"{path}: holds {describe(loaded)}, not a state_dict; save "
                          "module.state_dict() instead.")
    size, total = path.stat().st_size, 0
    for key, value in loaded.items():
        # Strides can make a small storage look like a huge tensor (stride 0 repeats an
        # element), and many keys can share one storage; copying them would allocate what
        # the file never held.
        if isinstance(value, torch.Tensor) and value.layout == torch.strided \
                and not value.is_nested:
            total += value.numel() * value.element_size()
            if total > size:
                raise FormatError(
                    f"{path}: tensor {key!r} has shape {tuple(value.shape)} "
                    f"({value.numel():,} elements), and the tensors so far need {total:,} "
                    f"bytes, but the file is {size:,} bytes: their strides or shared storage "
                    "repeat stored values. A saved state_dict never does that; the file is "
                    "damaged or built to exhaust memory. Nothing was read.")
    _check_expansion(loaded, str(path), size)
    outer = wrapper.split(".")[0] if wrapper else None
    return dict(loaded), wrapper, [key for key in top if key != outer] if wrapper else []


def _check_expansion(state: Mapping[str, Any], where: str, size: int | None) -> None:
    """Refuse a state_dict whose lists and tuples would expand, as NumPy arrays, past the
    ``expansion`` limit for ``size`` bytes (a file's size; None: what the lists themselves
    hold, for a state_dict given in memory).

    ``torch.save`` pickles a list once and refers to it again by a two-byte reference, so
    ``[[0.0] * 100] * 100`` nested five deep is a 3 KB file naming 10¹⁰ numbers. A real
    ``state_dict()`` holds tensors only; lists of numbers are read as arrays, within the limit.
    """
    total, held = 0, 0
    for key, value in state.items():
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


def _unwrap(loaded: Any) -> tuple[Any, str | None]:
    """A training checkpoint's state_dict, under common keys (nested too: ``state_dict`` →
    ``model``), and their path (``"state_dict.model"``); else as given, and None."""
    path: list[str] = []
    while isinstance(loaded, Mapping) and not any(_match(k) for k in loaded) and len(path) < 8:
        wrappers = [key for key in CHECKPOINT_KEYS if isinstance(loaded.get(key), Mapping)]
        # The one holding the weights, if one does at once ({"model": config, "weights": …}).
        key = next((key for key in wrappers if any(_match(k) for k in loaded[key])),
                   wrappers[0] if wrappers else None)
        if key is None:
            break
        path.append(key)
        loaded = loaded[key]
    return loaded, ".".join(path) or None


def save(state: Mapping[str, np.ndarray], path: Any) -> None:
    """Save a state_dict: ``.safetensors`` (needs safetensors) or ``.pt``/``.pth`` (needs torch)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".safetensors":
        safetensors = require("safetensors.numpy", extra="torch",
                              purpose="saving .safetensors files")
        # safetensors copies raw memory: strided (transposed) views must be made contiguous.
        contiguous = {key: np.ascontiguousarray(value) for key, value in state.items()}
        atomic_write(path, lambda file: file.write(safetensors.save(contiguous)))
    elif suffix in (".pt", ".pth"):
        torch = require("torch", extra="torch", purpose="saving .pt files")
        tensors = {k: torch.from_numpy(np.array(v, copy=True)) for k, v in state.items()}
        atomic_write(path, lambda file: torch.save(tensors, file))
    else:
        raise FormatError(f"write(fmt='torch'): path {str(path)!r} has suffix {suffix or 'none'};"
                          " expected .pt, .pth or .safetensors.")


def read_options_for(spec: Spec) -> dict[str, Any]:
    """A state_dict does not say whether a simple RNN runs relu."""
    return {"nonlinearity": spec.nonlinearity} if spec.cell.startswith("rnn") else {}


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """PyTorch computing ``y`` for ``x`` (batch, time, I) from the source itself.

    A module runs as it is (in eval mode: no dropout between layers). A file is loaded by
    PyTorch — ``.pt`` / ``.pth`` with ``torch.load(weights_only=True)`` after rnnport's own
    checks, a training checkpoint unwrapped as the reader does; ``.safetensors`` with
    ``safetensors.torch.load_file`` — and its tensors (like a state_dict's) go through
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
        path = Path(source)
        if path.suffix.lower() == ".safetensors":
            if importlib.util.find_spec("safetensors") is None:
                return "safetensors is not installed: no framework check"
            loader = require("safetensors.torch", extra="torch",
                             purpose="loading .safetensors files into PyTorch")
            state: Mapping[str, Any] = loader.load_file(str(path), device="cpu")
        else:
            state = _load(path)[0]  # torch.load(weights_only=True), checked and unwrapped
        what, location = f"PyTorch loading {path.name}", str(path)
    elif isinstance(source, Mapping):
        state = _unwrap(source)[0]
        what, location = "PyTorch loading the state_dict", "torch state_dict"
    else:
        return (f"{describe(source)} is no PyTorch module, state_dict or file: "
                "no framework check")
    found = _loaded_module(state, model, location)
    if isinstance(found, str):
        return found
    module, prefix = found
    under = f" (keys under {prefix!r})" if prefix else ""
    stepped = ", stepped over time" if _is_cell(module) else ""
    return f"{what}{under} into {_module_name(module)}{stepped}", _run(module, x)


def _loaded_module(state: Mapping[str, Any], model: RNN,
                   location: str) -> tuple[Any, str] | str:
    """A module built for ``model.spec`` holding ``state``'s tensors under the prefix that
    reads as ``model`` (loaded by PyTorch's ``load_state_dict(strict=True)``), and that
    prefix; or why there is none."""
    import torch

    groups, cells, _ = _groups(state, location)
    if len(groups) == 1:
        prefix = next(iter(groups))
    else:  # the reader was told prefix=; find the network it read
        options = read_options_for(model.spec)
        matching = [candidate for candidate in groups
                    if _reads_as(state, {**options, "prefix": candidate}, location, model)]
        if len(matching) != 1:
            return (f"{location} holds {len(groups)} RNNs and {len(matching)} of them hold the "
                    "network read: no framework check")
        prefix = matching[0]
    tensors = {}
    for key, value in state.items():
        match = _match(key)
        if match is not None and match["prefix"] == prefix:
            tensors[key[len(prefix):]] = value if isinstance(value, torch.Tensor) else \
                torch.from_numpy(np.array(to_numpy(value, f"{location}, {key}"), copy=True))
    module = new_module(model.spec, batch_first=True, cell=prefix in cells).to(
        getattr(torch, model.dtype.name))
    try:
        module.load_state_dict(tensors, strict=True)  # copies, casting bfloat16 exactly
    except RuntimeError as error:
        raise FormatError(
            f"{location}: PyTorch's load_state_dict(strict=True) refuses the tensors under "
            f"prefix {prefix!r} for nn.{type(module).__name__} built for the network read, "
            f"{model.spec.describe(article=True)}; expected them to fit it exactly. "
            f"{str(error)[:500]}") from None
    return module.eval(), prefix


def _module_name(module: Any) -> str:
    """``nn.LSTM``, ``nn.RNN(nonlinearity='relu')``."""
    nonlinearity = getattr(module, "nonlinearity", None)
    return f"nn.{type(module).__name__}" + (f"(nonlinearity={nonlinearity!r})"
                                            if nonlinearity else "")


def _reads_as(state: Mapping[str, Any], options: Mapping[str, Any], location: str,
              model: RNN) -> bool:
    try:
        return _read_state_dict(state, options, location) == model
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

    return runner


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
