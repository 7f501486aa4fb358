"""cuDNN's flat weight-space buffer.

One 1-D array holds every parameter of a (multi-layer, possibly bidirectional) RNN.
Pseudo-layers run layer by layer, forward then backward (``index = layer·D + direction``).
**All weight matrices of all pseudo-layers come first, then all biases**::

    for each pseudo-layer:          # matrices, row-major, y = W·x
        W_g   (H, I_k)   for each gate g in order     (linLayerID 0 … G-1)
        R_g   (H, H_out) for each gate g in order     (linLayerID G … 2G-1)
        W_hr  (P, H)     LSTM projection only         (linLayerID 8)
    for each pseudo-layer:          # biases, by bias mode
        bW_g  (H,)       for each gate g   — modes "double" and "single_input"
        bR_g  (H,)       for each gate g   — modes "double" and "single_recurrent"

Gate order: LSTM ``i f g o``, GRU ``r z n`` (cuDNN's GRU is reset-after), RNN one block.
``I_0`` is the input size; later layers take ``D·H_out``. Bias modes:
``double`` (cuDNN's default: both biases), ``single_input`` (``bW`` only),
``single_recurrent`` (``bR`` only), ``none``.

Example: 2-layer bidirectional LSTM, I=10, H=20 — matrices ``[0, 14400)``, biases
``[14400, 15040)``; single layer (Keras reference): ``W…, R…, bW…, bR…``.

NVIDIA does not document the multi-layer order; it is what JAX's cuDNN binding, MXNet's
CPU twin of cuDNN and ONNX's OptimizedRNN found against cuDNN, and what
``tools/check_cudnn_gpu.py`` found with cuDNN 9.19 (through PyTorch 2.11, on an H100): every
parameter's offset, a buffer bit-equal to the weight space PyTorch builds, and cuDNN's
outputs, for LSTM (with projection), GRU and RNN, 1–3 layers, one or two directions.

Reading needs the network's shape as options: ``cell``, ``input_size``, ``hidden_size``,
``num_layers`` (1), ``bidirectional`` (False), ``proj_size`` (0), ``bias_mode``
("double"). The buffer's dtype is kept. A buffer is a 1-D array, or a ``.npy`` file holding
one (read without unpickling); ``write(..., path=...)`` saves the ``.npy``.

**Running it in cuDNN** (``framework_forward``, ``convert --verify``) needs PyTorch and a
CUDA GPU: an ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` is built on the GPU for the network
(bias modes ``double`` and ``none``: PyTorch has no single-bias modules) and, after
``flatten_parameters()``, every parameter is a view into one contiguous tensor, the weight
space PyTorch hands cuDNN (always with both biases: zeros for a bias-free network).
:func:`cuda_module` checks that this tensor has the size of a ``double`` buffer and each
parameter the offset and shape :func:`layout` gives it, copies the buffer into it (a
``none`` buffer is its matrices, which come first), and cuDNN runs ``x`` with IEEE float32
(no TF32). ``tools/check_cudnn_gpu.py`` runs the same check over many networks.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..copying import copy_into
from ..errors import AmbiguousSourceError, FormatError, ShapeError, UnsupportedFeatureError
from ..gates import CANONICAL, gate_family, reorder
from ..io.archive import load_npy
from ..model import RNN, Model, Stack, as_float_array, where
from ..spec import Spec
from ._common import combine_biases, describe, is_path, require, to_numpy
from ._protocol import Format, NamedArray, Suffix

__all__ = ["FORMAT", "FlatFormat", "Segment", "buffer_size", "check_weight_space", "cuda_module",
           "framework_forward", "ieee_float32", "layout", "one_shape", "shapes_for",
           "weight_space"]

BIAS_MODES = ("double", "single_input", "single_recurrent", "none")
READ_OPTIONS = frozenset({"cell", "input_size", "hidden_size", "num_layers", "bidirectional",
                          "proj_size", "bias_mode"})
WRITE_OPTIONS = frozenset({"bias_mode", "per_part"})
SUFFIX = ".npy"

ORDERS = {"lstm": CANONICAL["lstm"], "gru": CANONICAL["gru"], "rnn": CANONICAL["rnn"]}


@dataclass(frozen=True)
class Segment:
    """Where one canonical parameter lives in the flat buffer."""

    layer: int
    direction: int
    name: str  # canonical name: weight_ih, weight_hh, weight_hr, bias_ih, bias_hh
    offset: int
    shape: tuple[int, ...]

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def stop(self) -> int:
        return self.offset + self.size


def bias_names(bias_mode: str) -> tuple[str, ...]:
    return {"double": ("bias_ih", "bias_hh"), "single_input": ("bias_ih",),
            "single_recurrent": ("bias_hh",), "none": ()}[bias_mode]


def layout(spec: Spec, bias_mode: str = "double") -> list[Segment]:
    """Every segment of the buffer for ``spec``, in buffer order."""
    segments: list[Segment] = []
    offset = 0
    pseudo_layers = [(layer, direction) for layer in range(spec.num_layers)
                     for direction in range(spec.num_directions)]
    for kinds in (("weight_ih", "weight_hh", "weight_hr"), bias_names(bias_mode)):
        for layer, direction in pseudo_layers:
            gates_hidden = spec.gate_count * spec.hidden_size
            shapes = {
                "weight_ih": (gates_hidden, spec.layer_input_size(layer)),
                "weight_hh": (gates_hidden, spec.output_size),
                "weight_hr": (spec.proj_size, spec.hidden_size) if spec.proj_size else None,
                "bias_ih": (gates_hidden,),
                "bias_hh": (gates_hidden,),
            }
            for name in kinds:
                shape = shapes[name]
                if shape is None:
                    continue
                segment = Segment(layer, direction, name, offset, shape)
                segments.append(segment)
                offset = segment.stop
    return segments


def buffer_size(spec: Spec, bias_mode: str = "double") -> int:
    """Elements of the buffer, computed without listing its blocks (a spec claiming a
    billion layers costs nothing to size)."""
    gates = spec.gate_count * spec.hidden_size
    biases = {"double": 2, "single_input": 1, "single_recurrent": 1, "none": 0}[bias_mode]
    projection = spec.proj_size * spec.hidden_size

    def weights(layer: int) -> int:
        return gates * (spec.layer_input_size(layer) + spec.output_size) + projection

    per_direction = weights(0) + (spec.num_layers - 1) * weights(1) + \
        spec.num_layers * biases * gates
    return spec.num_directions * per_direction


MAX_CANDIDATES = 8


def shapes_for(size: int, cell: str, *, input_size: int | None = None,
               hidden_size: int | None = None, num_layers: int | None = None,
               bidirectional: bool | None = None, proj_size: int = 0,
               bias_mode: str = "double", max_layers: int = 16) -> list[Spec]:
    """Every network of cell kind ``cell`` whose ``bias_mode`` buffer holds ``size``
    elements, with the sizes given fixed and the others solved for: what a buffer that
    records no shape (a TF1 ``opaque_kernel``, a ``CudnnRNN`` node's params) can be.
    Sorted by layers, then directions, then hidden size; the input size is solved exactly."""
    gates = {"lstm": 4, "gru": 3}.get(cell, 1)
    biases = len(bias_names(bias_mode))
    found = []
    layers_range = [num_layers] if num_layers is not None else range(1, max_layers + 1)
    directions_range = [2 if bidirectional else 1] if bidirectional is not None else (1, 2)
    for layers in layers_range:
        for directions in directions_range:
            hidden_range: Any = [hidden_size] if hidden_size is not None else range(
                1, math.isqrt(max(size // (gates * directions * layers), 0)) + 1)
            for hidden in hidden_range:
                out = proj_size or hidden
                per_layer = gates * hidden * out + biases * gates * hidden + proj_size * hidden
                deeper = gates * hidden * (directions * out + out) + biases * gates * hidden \
                    + proj_size * hidden
                rest = size - directions * per_layer - (layers - 1) * directions * deeper
                if rest <= 0 or rest % (directions * gates * hidden):
                    continue
                width = rest // (directions * gates * hidden)
                if input_size is not None and width != input_size:
                    continue
                spec = Spec(cell, width, hidden, num_layers=layers,
                            bidirectional=directions == 2, proj_size=proj_size,
                            bias=bias_mode != "none")
                if buffer_size(spec, bias_mode) == size:
                    found.append(spec)
    return found


def one_shape(size: int, cell: str, where: str, **known: Any) -> Spec:
    """The one network :func:`shapes_for` finds, or an error listing the candidates and the
    options that would tell them apart."""
    found = shapes_for(size, cell, **known)
    if len(found) == 1:
        return found[0]
    given = ", ".join(f"{key}={value!r}" for key, value in known.items() if value is not None)
    if not found:
        raise FormatError(f"{where}: {size} elements fit no {cell} network"
                          + (f" with {given}" if given else "") + "; check the sizes given.")
    shown = "; ".join(spec.describe() for spec in found[:MAX_CANDIDATES])
    more = f" and {len(found) - MAX_CANDIDATES} more" if len(found) > MAX_CANDIDATES else ""
    unknown = [key for key in ("hidden_size", "num_layers", "bidirectional", "input_size")
               if known.get(key) is None]
    raise AmbiguousSourceError(
        f"{where}: {size} elements fit {len(found)} {cell} networks ({shown}{more}); the "
        f"buffer does not record its shape. Pass {', '.join(f'{k}=' for k in unknown)} to "
        "pick one.")


class FlatFormat:
    """A flat buffer in cuDNN's container layout with a given gate order per cell family.

    ``sniffs_files``: whether a ``.npy`` path is told to be this format (one flat format
    claims the suffix; the others read such files with ``fmt=``).
    """

    def __init__(self, name: str, orders: dict[str, str], features: frozenset[str],
                 bias_modes: tuple[str, ...], *, sniffs_files: bool) -> None:
        self.name = name
        self.orders = orders
        self.features = features
        self.bias_modes = bias_modes
        self.sniffs_files = sniffs_files

    def declaration(self, *, gate_names: Mapping[str, str], layout_notes: tuple[str, ...],
                    what: str, names: Mapping[str, str],
                    framework_forward: Callable[[Any, Model, np.ndarray],
                                                tuple[str, np.ndarray] | str] | None = None
                    ) -> Format:
        """This format's ``FORMAT``."""
        return Format(self.name, sniff=self.sniff, reader=self.read, writer=self.write,
                      counter=self.param_count, read_options=READ_OPTIONS,
                      write_options=WRITE_OPTIONS, features=self.features,
                      suffixes=(Suffix(SUFFIX, what),), read_options_for=self.read_options_for,
                      gate_names=gate_names, explain_arrays=self.explain_arrays,
                      layout_notes=layout_notes, names=names,
                      framework_forward=framework_forward)

    def read_options_for(self, spec: Spec) -> dict[str, Any]:
        """A buffer records no shape: reading one back is told all of it."""
        return dict(cell=spec.cell, input_size=spec.input_size, hidden_size=spec.hidden_size,
                    num_layers=spec.num_layers, bidirectional=spec.bidirectional,
                    proj_size=spec.proj_size, bias_mode="double" if spec.bias else "none")

    def explain_arrays(self, native: Any, spec: Spec) -> list[NamedArray]:
        """Each segment of the buffer, at its offset."""
        buffer = np.asarray(native)
        return [NamedArray(segment.name, buffer[segment.offset:segment.stop].reshape(
            segment.shape), segment.offset) for segment in layout(spec)]

    def _check_bias_mode(self, bias_mode: Any, where_: str) -> str:
        if bias_mode not in self.bias_modes:
            raise FormatError(f"{where_}: bias_mode={bias_mode!r}; expected one of "
                              f"{', '.join(map(repr, self.bias_modes))}.")
        return bias_mode

    def order(self, cell: str) -> str:
        return self.orders[gate_family(cell)]

    # -- read ----------------------------------------------------------------------------

    def read(self, source: Any, **options: Any) -> RNN:
        missing = [key for key in ("cell", "input_size", "hidden_size") if key not in options]
        if missing:
            raise FormatError(
                f"read(fmt={self.name!r}): a flat buffer does not record the network's shape; "
                f"missing option(s) {', '.join(missing)}. Pass e.g. cell='lstm', input_size=10, "
                "hidden_size=20 (and num_layers=, bidirectional=, proj_size=, bias_mode= when "
                "they differ from 1, False, 0, 'double').")
        bias_mode = self._check_bias_mode(options.pop("bias_mode", "double"),
                                          f"read(fmt={self.name!r})")
        spec = Spec(cell=options["cell"], input_size=options["input_size"],
                    hidden_size=options["hidden_size"], num_layers=options.get("num_layers", 1),
                    bidirectional=options.get("bidirectional", False),
                    proj_size=options.get("proj_size", 0), bias=bias_mode != "none")
        order = self.order(spec.cell)
        if spec.proj_size and "projection" not in self.features:
            raise UnsupportedFeatureError(f"read(fmt={self.name!r}): this format has no LSTM "
                                          "projection; pass proj_size=0.")
        if is_path(source):
            buffer = load_npy(source, str(source))
        else:
            buffer = to_numpy(source)
        if not isinstance(buffer, np.ndarray) or buffer.ndim != 1:
            raise FormatError(f"read(fmt={self.name!r}): expected a 1-D array, got "
                              f"{describe(buffer)}. Flatten it with .reshape(-1) if it is the "
                              "whole weight space.")
        buffer = as_float_array(buffer, f"{self.name} buffer")
        expected = buffer_size(spec, bias_mode)
        if buffer.size != expected:
            raise ShapeError(
                f"{self.name} buffer: {buffer.size} elements; expected {expected} for "
                f"{spec.describe(article=True)} with bias_mode={bias_mode!r} "
                f"({_size_formula(spec, bias_mode)}). Check cell, sizes, num_layers, "
                "bidirectional, proj_size and bias_mode.")
        segments = layout(spec, bias_mode)
        params: list[list[dict[str, np.ndarray]]] = [
            [{} for _ in range(spec.num_directions)] for _ in range(spec.num_layers)]
        for segment in segments:
            piece = buffer[segment.offset:segment.stop].reshape(segment.shape)
            if segment.name != "weight_hr":
                # A view of the buffer where the gate orders agree (cuDNN's are canonical).
                piece = reorder(piece, order, CANONICAL[gate_family(spec.cell)], copy=False)
            params[segment.layer][segment.direction][segment.name] = piece
        if bias_mode in ("single_input", "single_recurrent"):
            present, absent = (("bias_ih", "bias_hh") if bias_mode == "single_input"
                               else ("bias_hh", "bias_ih"))
            for directions in params:
                for named in directions:
                    named[absent] = np.zeros_like(named[present])
        return RNN(spec, params, copy=False)

    # -- write ---------------------------------------------------------------------------

    def write(self, model: Model, path: Any = None, **options: Any) -> Any:
        per_part = options.pop("per_part", False)
        if isinstance(model, Stack):
            if not per_part:
                raise UnsupportedFeatureError(
                    f"write(fmt={self.name!r}): one {self.name} buffer holds one uniform network, "
                    f"and this Stack has {len(model.parts)} different parts "
                    f"({'; '.join(s.describe() for s in model.specs)}). Pass per_part=True for a "
                    f"list with one buffer per part, or write each of stack.parts.")
            buffers = [self.write(part, **options) for part in model.parts]
            if path is not None:
                raise FormatError(f"write(fmt={self.name!r}): path= saves one buffer; with "
                                  "per_part=True save each buffer yourself.")
            return buffers
        spec = model.spec
        where_ = f"write(fmt={self.name!r})"
        bias_mode = self._check_bias_mode(options.get("bias_mode",
                                                      "double" if spec.bias else "none"), where_)
        order = self.order(spec.cell)
        canonical = CANONICAL[gate_family(spec.cell)]
        values = {
            (layer, direction): {
                **_bias_values(spec, named, bias_mode, where(layer, direction), self.name),
                **{name: array for name, array in named.items() if name.startswith("weight")},
            }
            for layer, direction, named in _pseudo_layers(model)
        }
        segments = layout(spec, bias_mode)
        buffer = np.empty(segments[-1].stop, dtype=model.dtype)
        for segment in segments:
            value = values[(segment.layer, segment.direction)][segment.name]
            target = buffer[segment.offset:segment.stop].reshape(segment.shape)
            if segment.name == "weight_hr":
                copy_into(target, value)
            else:
                reorder(value, canonical, order, out=target)
        if path is not None:
            from ..io.atomic import save_npy

            save_npy(path, buffer)
        return buffer

    def param_count(self, model: Model, **options: Any) -> int:
        if isinstance(model, Stack):
            return sum(self.param_count(part, **options) for part in model.parts)
        spec = model.spec
        bias_mode = options.get("bias_mode", "double" if spec.bias else "none")
        return buffer_size(spec, self._check_bias_mode(bias_mode, "param_count"))

    def sniff(self, source: Any) -> bool:
        if is_path(source):
            return self.sniffs_files and os.fspath(source).lower().endswith(SUFFIX)
        return isinstance(source, np.ndarray) and source.ndim == 1


def _pseudo_layers(model: RNN) -> Iterator[tuple[int, int, Any]]:
    for layer, directions in enumerate(model.params):
        for direction, named in enumerate(directions):
            yield layer, direction, named


def _bias_values(spec: Spec, named: Any, bias_mode: str, location: str,
                 target: str) -> dict[str, np.ndarray]:
    if not spec.bias:
        zeros = np.zeros(spec.gate_count * spec.hidden_size, dtype=named["weight_ih"].dtype)
        return {"bias_ih": zeros, "bias_hh": zeros}
    if bias_mode == "double":
        return {"bias_ih": named["bias_ih"], "bias_hh": named["bias_hh"]}
    if bias_mode == "none":
        if named["bias_ih"].any() or named["bias_hh"].any():
            raise UnsupportedFeatureError(
                f"write(fmt={target!r}) {location}: bias_mode='none' drops the biases, and this "
                "network's biases are not all zero. Use bias_mode='double' (or a single mode).")
        return {}
    into = "ih" if bias_mode == "single_input" else "hh"
    return {f"bias_{into}": combine_biases(spec, named, into, f"write(fmt={target!r}) {location}",
                                           f"bias_mode={bias_mode!r}")}


def _size_formula(spec: Spec, bias_mode: str) -> str:
    gates, hidden, out = spec.gate_count, spec.hidden_size, spec.output_size
    directions = spec.num_directions
    parts = []
    for layer in range(min(spec.num_layers, 2)):  # layers past the first all read layer 1's
        width = spec.layer_input_size(layer)
        term = f"{gates}·{hidden}·({width}+{out})"
        if spec.proj_size:
            term += f" + {spec.proj_size}·{hidden}"
        biases = len(bias_names(bias_mode))
        if biases:
            term += f" + {biases}·{gates}·{hidden}"
        parts.append(f"{directions}·[{term}]" if directions > 1 else f"[{term}]")
    if spec.num_layers > 2:
        parts[1] = f"{spec.num_layers - 1} × {parts[1]}"
    return "per layer: " + " + ".join(parts)


# -- running it in cuDNN, through PyTorch -------------------------------------------------

# PyTorch's names for its flat weights: weight_ih_l0, bias_hh_l2_reverse, weight_hr_l1.
TORCH_WEIGHT = re.compile(r"(weight_ih|weight_hh|weight_hr|bias_ih|bias_hh)_l(\d+)(_reverse)?")


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """cuDNN computing ``y`` (batch, time, D·H_out) for ``x`` (batch, time, I) from the buffer
    itself: ``source``, a ``.npy`` file (loaded as the reader loads it) or a 1-D array, copied
    into the weight space of a PyTorch module on the GPU (:func:`cuda_module`). Where
    there is no CUDA GPU (or no PyTorch, or the network is one PyTorch's cuDNN modules cannot
    express), a sentence saying why not."""
    if isinstance(model, Stack):
        return "a stack of differing parts is no single cuDNN network: no framework check"
    if importlib.util.find_spec("torch") is None:
        return ("real cuDNN runs here through PyTorch, which is not installed: "
                "no framework check")
    import torch

    if not torch.cuda.is_available():
        return "real cuDNN needs a CUDA GPU, and PyTorch sees none: no framework check"
    if not torch.backends.cudnn.is_available():
        return "this PyTorch was built without cuDNN: no framework check"
    spec = model.spec
    if spec.cell == "gru" and not spec.reset_after:
        return "cuDNN's GRU is reset-after, and this one resets before: no framework check"
    if is_path(source):
        buffer = load_npy(source, os.fspath(source))  # checked as the reader checks it
        what = Path(source).name
    else:
        buffer, what = to_numpy(source), "the buffer"
    buffer = buffer.astype(buffer.dtype.newbyteorder("="), copy=False)  # torch: native only
    bias_mode = "double" if spec.bias else "none"
    expected = buffer_size(spec, bias_mode)
    if buffer.ndim != 1 or buffer.size != expected:
        return (f"{what} holds {buffer.size} elements, and PyTorch's cuDNN module for "
                f"{spec.describe(article=True)} takes {expected} (bias_mode={bias_mode!r}; it "
                "has no single-bias modes): no framework check")
    module = cuda_module(spec, buffer)
    inputs = torch.from_numpy(np.ascontiguousarray(x)).to(device="cuda", dtype=_module_dtype(module))
    with ieee_float32(torch), torch.no_grad():
        y = module(inputs)[0].cpu().numpy()
    label = (f"cuDNN {torch.backends.cudnn.version()} on {torch.cuda.get_device_name()} running "
             f"{what} (copied into PyTorch's nn.{type(module).__name__} weight space)")
    return label, y


def cuda_module(spec: Spec, buffer: np.ndarray) -> Any:
    """An ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` (batch_first) on the current CUDA device, in
    ``buffer``'s dtype, whose cuDNN weight space holds ``buffer``: a 1-D array laid out as
    :func:`layout` says for ``spec``, bias mode ``double`` (``spec.bias``) or ``none``.

    PyTorch keeps every network in cuDNN's double-bias weight space, a bias-free one with its
    biases zero (no views on them). The matrices come first in both modes, so a buffer
    without biases fills the space up to where they start, and the rest is set to zero. The
    module's weight space is checked (:func:`check_weight_space`) before the copy, so every
    parameter takes the values at cuDNN's own offsets."""
    torch = require("torch", extra="torch", purpose="running a cuDNN buffer")
    from .torch import new_module

    module = new_module(spec, batch_first=True).to(device="cuda",
                                                   dtype=getattr(torch, buffer.dtype.name))
    module.flatten_parameters()
    space = weight_space(module)
    check_weight_space(module, spec, space)
    with torch.no_grad():
        space[:buffer.size].copy_(torch.from_numpy(np.ascontiguousarray(buffer)))
        space[buffer.size:].zero_()
    return module


def _module_dtype(module: Any) -> Any:
    return next(module.parameters()).dtype


def weight_space(module: Any) -> Any:
    """The contiguous 1-D tensor that every parameter of a flattened CUDA ``nn.LSTM`` /
    ``nn.GRU`` / ``nn.RNN`` views: the storage of ``module._flat_weights`` after
    ``flatten_parameters()``, the weight space PyTorch allocated
    (``cudnnGetRNNWeightSpaceSize`` bytes) and hands cuDNN."""
    import torch

    weights = module._flat_weights
    storage = weights[0].untyped_storage()
    unshared = [name for name, weight in zip(module._flat_weights_names, weights, strict=True)
                if weight.untyped_storage().data_ptr() != storage.data_ptr()]
    if unshared or not weights[0].is_cuda:
        raise FormatError(
            f"cuDNN weight space: the module's parameters {', '.join(unshared) or '(on the CPU)'} "
            "do not share one storage after flatten_parameters(); expected a CUDA module with "
            "cuDNN enabled (torch.backends.cudnn.enabled), where PyTorch flattens them into "
            "one.")
    space = torch.empty(0, dtype=weights[0].dtype, device=weights[0].device)
    space.set_(storage, 0, (storage.nbytes() // weights[0].element_size(),))
    return space


def check_weight_space(module: Any, spec: Spec, space: Any) -> None:
    """Raise FormatError unless the weight space ``space`` of the flattened CUDA ``module``
    has :func:`buffer_size` elements for ``spec`` in bias mode ``double`` (the one mode
    PyTorch sets up, also for a bias-free network) and each parameter is the view at the
    offset, of the shape, that :func:`layout` gives it — where cuDNN's own
    ``cudnnGetRNNWeightParams`` placed it for PyTorch."""
    import torch

    segments = {(segment.layer, segment.direction, segment.name): segment
                for segment in layout(spec, "double")}
    expected = buffer_size(spec, "double")
    version = f"cuDNN {torch.backends.cudnn.version()}"
    if space.numel() != expected:
        raise FormatError(
            f"{version} weight space for {spec.describe(article=True)}: {space.numel()} "
            f"elements; expected {expected} ({_size_formula(spec, 'double')}), the size of "
            "rnnport's cudnn buffer with bias_mode='double'. The layout in "
            "rnnport.formats.cudnn does not match this cuDNN; please report it with this "
            "message.")
    wrong = []
    for name, weight in zip(module._flat_weights_names, module._flat_weights, strict=True):
        match = TORCH_WEIGHT.fullmatch(name)
        segment = segments.get((int(match[2]), 1 if match[3] else 0, match[1])) if match else None
        found = (weight.storage_offset(), tuple(weight.shape))
        if segment is None or found != (segment.offset, segment.shape):
            at = "nowhere" if segment is None else f"{segment.offset} {segment.shape}"
            wrong.append(f"{name} at {found[0]} {found[1]} (rnnport: {at})")
    if wrong:
        raise FormatError(
            f"{version} weight space for {spec.describe(article=True)}: "
            f"{'; '.join(wrong[:6])}; expected every parameter where rnnport's cudnn layout puts "
            "it. The layout in rnnport.formats.cudnn does not match this cuDNN; please report it "
            "with this message.")


@contextmanager
def ieee_float32(torch: Any) -> Iterator[None]:
    """cuDNN enabled, with float32 products in IEEE float32. PyTorch lets cuDNN use TF32 (a
    10-bit mantissa, errors near 1e-3) by default on Ampere and later GPUs, which would swamp
    the check's 1e-5; the settings are restored afterwards."""
    cudnn = torch.backends.cudnn
    rnn: Any
    try:  # PyTorch ≥ 2.9 sets precision per cuDNN operation; an RNN is one
        rnn = importlib.import_module("torch.backends.cudnn.rnn")
    except ImportError:
        rnn = None
    per_operation = rnn is not None and hasattr(rnn, "fp32_precision")
    enabled = cudnn.enabled
    saved = rnn.fp32_precision if per_operation else cudnn.allow_tf32
    cudnn.enabled = True
    if per_operation:
        rnn.fp32_precision = "ieee"
    else:
        cudnn.allow_tf32 = False
    try:
        yield
    finally:
        cudnn.enabled = enabled
        if per_operation:
            rnn.fp32_precision = saved
        else:
            cudnn.allow_tf32 = saved


FORMAT = FlatFormat("cudnn", ORDERS, frozenset({"projection"}), BIAS_MODES,
                    sniffs_files=True).declaration(
    gate_names={}, what="a flat buffer saved with numpy.save",
    names={"projection": "proj_size", "reset_after": "CUDNN_GRU"},
    layout_notes=("cuDNN's linLayerID k is the k-th matrix (and bias) of a pseudo-layer in the "
                  "buffer's order.",),
    framework_forward=framework_forward)
