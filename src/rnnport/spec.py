"""``Spec``: what a recurrent network is, without its numbers.

Notation used throughout rnnport: ``I`` input size, ``H`` hidden size, ``P`` projection
size (``H_out = P`` when projecting, else ``H``), ``D`` directions, ``L`` layers, ``G``
gates (LSTM 4, GRU 3, simple RNN 1).

Canonical parameter shapes, per layer ``k`` and direction (cuDNN order and orientation,
PyTorch names)::

    weight_ih        (G·H, I_k)    I_0 = I, I_k = D·H_out for k > 0
    weight_hh        (G·H, H_out)
    bias_ih          (G·H,)        when spec.bias
    bias_hh          (G·H,)        when spec.bias
    weight_hr        (P, H)        LSTM with proj_size > 0
    bias_hr          (P,)          LSTM with a projection bias (h' = W_hr m + b_hr)
    weight_peephole  (3, H)        LSTM with peepholes: rows are the i, f, o weights
    weight_ln        (4, H)        layer-norm LSTM: rows are the i, f, g, o coefficients
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from .activations import normalize
from .errors import SpecError
from .gates import gate_count

__all__ = ["CELLS", "Spec"]

CELLS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


@dataclass(frozen=True)
class Spec:
    """The shape of a recurrent network.

    ``reset_after`` matters for GRU only (True: cuDNN/PyTorch/Keras-2.x+ form, the reset
    gate multiplies ``R_n h + bR_n``; False: it multiplies ``h`` before ``R_n``) and is
    kept True for other cells. ``peepholes`` and ``cell_clip`` (TF1: clip ``c'`` to
    ``±cell_clip``) are LSTM-only extras that TF1 and ONNX carry and cuDNN cannot.
    ``gate_clip`` is ONNX's ``clip``: every pre-activation is clipped to ``±gate_clip``
    before its activation, for any cell. ``reverse`` (one direction only) runs each
    sequence from its last valid step to its first, as ONNX's ``direction="reverse"`` and
    a bidirectional network's backward half do; outputs stay in time order.
    ``input_forget`` is ONNX's coupled LSTM gates, ``f = 1 − i``. ``proj_bias`` adds
    ``bias_hr`` after the projection, and ``layer_norm`` normalizes each LSTM gate's
    pre-activation over its ``H`` units before scaling it by ``weight_ln`` and adding the
    biases (see :mod:`rnnport.runtime`). ``activations``
    replaces an LSTM's (f, g, h) or a GRU's (f, g) functions with ONNX's alternatives (see
    :mod:`rnnport.activations`); ``()`` means the defaults.
    """

    cell: str
    input_size: int
    hidden_size: int
    num_layers: int = 1
    bidirectional: bool = False
    proj_size: int = 0
    reset_after: bool = True
    bias: bool = True
    peepholes: bool = False
    cell_clip: float | None = field(default=None)
    gate_clip: float | None = field(default=None)
    input_forget: bool = False
    activations: tuple[tuple[str, float, float], ...] = ()
    reverse: bool = False
    proj_bias: bool = False
    layer_norm: bool = False

    def __post_init__(self) -> None:
        problems: list[str] = []
        if self.cell not in CELLS:
            problems.append(f"cell={self.cell!r}; expected one of {', '.join(map(repr, CELLS))}")
        for name, minimum in (("input_size", 1), ("hidden_size", 1), ("num_layers", 1),
                              ("proj_size", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                problems.append(f"{name}={value!r}; expected an int >= {minimum}")
        for name in ("bidirectional", "reset_after", "bias", "peepholes", "input_forget",
                     "reverse", "proj_bias", "layer_norm"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name}={getattr(self, name)!r}; expected True or False")
        is_lstm = self.cell == "lstm"
        if self.reverse is True and self.bidirectional is True:
            problems.append("reverse=True with bidirectional=True; a bidirectional network "
                            "already runs one direction in reverse")
        if self.proj_size and not is_lstm:
            problems.append(f"proj_size={self.proj_size} on a {self.cell} cell; "
                            "only LSTM cells have a projection")
        if self.proj_bias is True and not self.proj_size:
            problems.append("proj_bias=True without a projection (proj_size=0); only a "
                            "projecting LSTM has a projection bias")
        if self.layer_norm is True and not is_lstm:
            problems.append(f"layer_norm=True on a {self.cell} cell; only LSTM cells "
                            "normalize their gates")
        if self.peepholes and not is_lstm:
            problems.append(f"peepholes=True on a {self.cell} cell; only LSTM cells have peepholes")
        if self.input_forget and not is_lstm:
            problems.append(f"input_forget=True on a {self.cell} cell; only LSTM cells couple "
                            "their input and forget gates")
        clip = self.gate_clip
        if clip is not None:
            if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not (
                    math.isfinite(clip) and clip > 0):
                problems.append(f"gate_clip={clip!r}; expected a positive finite number or None")
            else:
                object.__setattr__(self, "gate_clip", float(clip))
        if self.cell_clip is not None:
            clip = self.cell_clip
            if not is_lstm:
                problems.append(f"cell_clip={clip!r} on a {self.cell} cell; "
                                "only LSTM cells have a cell clip")
            elif isinstance(clip, bool) or not isinstance(clip, (int, float)) or not (
                    math.isfinite(clip) and clip > 0):
                problems.append(f"cell_clip={clip!r}; expected a positive finite number or None")
            else:
                object.__setattr__(self, "cell_clip", float(clip))
        if self.cell in CELLS:
            activations, found = normalize(self.cell, self.activations)
            problems.extend(found)
            object.__setattr__(self, "activations", activations)
        if problems:
            raise SpecError("Spec: " + "; ".join(problems) + ".")
        if self.cell != "gru" and not self.reset_after:
            object.__setattr__(self, "reset_after", True)

    # -- derived sizes ---------------------------------------------------------------

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional else 1

    @property
    def gate_count(self) -> int:
        return gate_count(self.cell)

    @property
    def output_size(self) -> int:
        """``H_out``: the size of ``h`` (``proj_size`` when projecting, else ``hidden_size``)."""
        return self.proj_size or self.hidden_size

    @property
    def nonlinearity(self) -> str:
        """The candidate activation of a simple RNN (``tanh``/``relu``); ``tanh`` otherwise."""
        return "relu" if self.cell == "rnn_relu" else "tanh"

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.num_directions * self.output_size

    def param_shapes(self, layer: int) -> dict[str, tuple[int, ...]]:
        """Canonical names and shapes of one layer's parameters (per direction), in storage order."""
        gates_hidden = self.gate_count * self.hidden_size
        shapes: dict[str, tuple[int, ...]] = {
            "weight_ih": (gates_hidden, self.layer_input_size(layer)),
            "weight_hh": (gates_hidden, self.output_size),
        }
        if self.bias:
            shapes["bias_ih"] = (gates_hidden,)
            shapes["bias_hh"] = (gates_hidden,)
        if self.proj_size:
            shapes["weight_hr"] = (self.proj_size, self.hidden_size)
        if self.proj_bias:
            shapes["bias_hr"] = (self.proj_size,)
        if self.peepholes:
            shapes["weight_peephole"] = (3, self.hidden_size)
        if self.layer_norm:
            shapes["weight_ln"] = (4, self.hidden_size)
        return shapes

    def num_params(self) -> int:
        """Canonical parameter count: both biases, projection (and its bias), peepholes and
        layer-norm coefficients included."""
        def layer(index: int) -> int:
            return sum(math.prod(shape) for shape in self.param_shapes(index).values())

        # Every layer past the first has layer 1's shapes: no loop over a claimed layer count.
        return self.num_directions * (layer(0) + (self.num_layers - 1) * layer(min(1, self.num_layers - 1)))

    def replace(self, **changes: object) -> Spec:
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return Spec(**values)

    def describe(self, article: bool = False) -> str:
        """One line for people, e.g. ``2-layer bidirectional LSTM 10→20 (proj 8)``;
        ``article=True`` prefixes "a"/"an"."""
        kind = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN(tanh)", "rnn_relu": "RNN(relu)"}[
            self.cell]
        extras = []
        if self.cell == "gru":
            extras.append("reset after" if self.reset_after else "reset before")
        if self.proj_size:
            extras.append(f"proj {self.proj_size}" + (" with bias" if self.proj_bias else ""))
        if self.layer_norm:
            extras.append("layer norm")
        if not self.bias:
            extras.append("no bias")
        if self.peepholes:
            extras.append("peepholes")
        if self.cell_clip is not None:
            extras.append(f"cell clip {self.cell_clip:g}")
        if self.gate_clip is not None:
            extras.append(f"gate clip {self.gate_clip:g}")
        if self.input_forget:
            extras.append("input-forget coupled")
        if self.activations:
            extras.append("activations " + "/".join(name for name, _, _ in self.activations))
        layers = f"{self.num_layers}-layer " if self.num_layers > 1 else ""
        direction = ("bidirectional " if self.bidirectional else
                     "reverse " if self.reverse else "")
        tail = f" ({', '.join(extras)})" if extras else ""
        text = f"{layers}{direction}{kind} {self.input_size}→{self.hidden_size}{tail}"
        if not article:
            return text
        vowel_sound = text[0] in "AEFHILMNORSX" or text.startswith(("8", "11-", "18-"))
        return f"{'an' if vowel_sound else 'a'} {text}"
