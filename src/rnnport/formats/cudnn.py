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
CPU twin of cuDNN and ONNX's OptimizedRNN found against cuDNN. Check against a GPU with
``torch.nn.LSTM(...).cuda()._flat_weights`` after ``flatten_parameters()``.

Reading needs the network's shape as options: ``cell``, ``input_size``, ``hidden_size``,
``num_layers`` (1), ``bidirectional`` (False), ``proj_size`` (0), ``bias_mode``
("double"). The buffer's dtype is kept. A buffer is a 1-D array, or a ``.npy`` file holding
one (read without unpickling); ``write(..., path=...)`` saves the ``.npy``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..copying import copy_into
from ..errors import FormatError, ShapeError, UnsupportedFeatureError
from ..gates import CANONICAL, gate_family, reorder
from ..io.archive import load_npy
from ..model import RNN, Model, Stack, as_float_array, where
from ..spec import Spec
from ._common import combine_biases, describe, is_path, to_numpy
from ._protocol import Format, NamedArray, Suffix

__all__ = ["FORMAT", "FlatFormat", "Segment", "buffer_size", "layout"]

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
    segments = layout(spec, bias_mode)
    return segments[-1].stop


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
                    what: str, names: Mapping[str, str]) -> Format:
        """This format's ``FORMAT``."""
        return Format(self.name, sniff=self.sniff, reader=self.read, writer=self.write,
                      counter=self.param_count, read_options=READ_OPTIONS,
                      write_options=WRITE_OPTIONS, features=self.features,
                      suffixes=(Suffix(SUFFIX, what),), read_options_for=self.read_options_for,
                      gate_names=gate_names, explain_arrays=self.explain_arrays,
                      layout_notes=layout_notes, names=names)

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
        segments = layout(spec, bias_mode)
        expected = segments[-1].stop
        if buffer.size != expected:
            raise ShapeError(
                f"{self.name} buffer: {buffer.size} elements; expected {expected} for "
                f"{spec.describe(article=True)} with bias_mode={bias_mode!r} "
                f"({_size_formula(spec, bias_mode)}). Check cell, sizes, num_layers, "
                "bidirectional, proj_size and bias_mode.")
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
    for layer in range(spec.num_layers):
        width = spec.layer_input_size(layer)
        term = f"{gates}·{hidden}·({width}+{out})"
        if spec.proj_size:
            term += f" + {spec.proj_size}·{hidden}"
        biases = len(bias_names(bias_mode))
        if biases:
            term += f" + {biases}·{gates}·{hidden}"
        parts.append(f"{directions}·[{term}]" if directions > 1 else f"[{term}]")
    return "per layer: " + " + ".join(parts)


FORMAT = FlatFormat("cudnn", ORDERS, frozenset({"projection"}), BIAS_MODES,
                    sniffs_files=True).declaration(
    gate_names={}, what="a flat buffer saved with numpy.save",
    names={"projection": "proj_size", "reset_after": "CUDNN_GRU"},
    layout_notes=("cuDNN's linLayerID k is the k-th matrix (and bias) of a pseudo-layer in the "
                  "buffer's order.",))
