"""Generate golden ONNX files as today's tools write them: PyTorch's two exporters on a CRNN
that steps two ``nn.LSTMCell`` s in Python loops, ONNX Runtime's dynamic quantizer on an
LSTM, and PyTorch's default exporter on ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN``.

    .venv/bin/python tools/golden_onnx.py [--out tests/golden/onnx] [--case NAME ...] [--list]

Everything here is made by the real tools (PyTorch 2.13's ``torch.onnx.export``: the default,
dynamo-based exporter, and the TorchScript one with ``dynamo=False``; ONNX Runtime 1.31's
``onnxruntime.quantization.quantize_dynamic``), and every expected output is ONNX Runtime's
own, from the file (PyTorch's beside it where PyTorch computes the same). ``rnnport`` is
not imported.

Cases
-----
``crnn_cells_dynamo``, ``crnn_cells_torchscript``
    A CRNN as captcha solvers write it (:class:`CaptchaCRNN`): a convolution, ReLU and max
    pooling turn a ``(batch, 1, 4, 5)`` image into 5 columns of 3 features, time-major
    ``(5, batch, 3)``; an ``nn.LSTMCell(3, 4)`` is stepped over them in a Python loop from a
    zero state created inside ``forward``, a second one over ``torch.flip`` of them; the
    second's outputs are flipped back and concatenated after the first's (8 features); a
    Linear head gives log-probabilities. The model returns ``(log_probs, y)``, ``y`` being
    the concatenated outputs. Both exporters unroll the loops: every step is a pair of
    ``Gemm`` nodes (input and state products) except the first of each loop, whose state
    product the exporter folded into a constant (the state is zero). Exported by the default
    exporter with ``external_data=False`` (one file) and by the TorchScript one with an open
    batch (``dynamic_axes``: the zero states are then ``ConstantOfShape`` nodes of the
    batch the graph is given).
``gru_cells_reversed_loop_dynamo``
    Two ``nn.GRUCell(3, 4)`` over a batch-first ``(batch, 5, 3)`` sequence from a zero state
    made in ``forward``, one from the first step up, one from the last step down (indices
    taken in reverse, no flip), their outputs stacked on the time axis and concatenated;
    the default exporter.
``lstm_cells_two_layers_dynamo``
    Two layers, each a pair of ``nn.LSTMCell`` stepped as the CRNN's over a time-major
    ``(3, batch, 3)`` sequence, the second pair over the first's concatenated outputs (8
    features); the default exporter.
``qlstm``, ``qlstm_bidirectional_per_channel``, ``qlstm_uint8``
    ``nn.LSTM(4, 5)`` (bidirectional in the second), exported by the default exporter, then
    ``quantize_dynamic`` (``per_channel=True`` in the second): the ``LSTM`` node becomes
    ``com.microsoft.DynamicQuantizeLSTM`` with int8 ``W [D, I, 4H]`` and ``R [D, H, 4H]``
    and float32 scales and int8 zero points ``[D]`` (per tensor) or ``[D, 4H]`` (per
    channel). The quantizer writes int8 weights only; the operator also takes uint8, and
    ``qlstm_uint8`` is ``qlstm`` with its weights and zero points moved to uint8 (each
    plus 128: the same dequantized values), run by ONNX Runtime as the others. Beside each,
    ``<name>_dequantized.onnx``: the same graph with the node replaced by an ``LSTM`` whose
    ``W`` and ``R`` are ``scale·(q − zero_point)`` computed here in float32, transposed to
    the ``LSTM`` operator's ``[D, 4H, in]``.
``apart_encoder_decoder_gru_torchscript``, ``apart_encoder_decoder_lstm_dynamo``
    ``nn.GRU(3, 4)`` (``nn.LSTM``) over a batch-first ``(batch, 5, 3)`` sequence, then
    ``nn.GRU(4, 4)`` over its output from its final state (an encoder handing its state to a
    decoder); the TorchScript exporter, and the default one. The decoder's node takes the
    encoder's ``Y`` as a next layer would, and its ``initial_h`` (``initial_c``) from the
    encoder's ``Y_h`` (``Y_c``): two networks, not a stack.
``apart_interleaved_lstm_torchscript``
    ``nn.LSTM(3, 4, bidirectional=True)`` then ``nn.LSTM(8, 4)`` over its output with the
    directions' features interleaved (``y.reshape(B, T, 2, 4).transpose(2, 3)``); the
    TorchScript exporter.
``apart_swapped_gru_torchscript``, ``apart_swapped_gru_dynamo``
    ``nn.GRU(3, 4)`` then ``nn.GRU(4, 4)`` over ``y.transpose(0, 1)`` (the second steps over
    the batch axis); both exporters. ``meta`` names the modules (``networks``) and the
    ``glue`` (``state``, ``interleave``, ``swap``).
``projected_lstm_dynamo``, ``projected_lstm_two_layers_dynamo``
    ``nn.LSTM(3, 5, proj_size=2, batch_first=True)`` (and with ``num_layers=2``) exported by
    the default exporter, which writes ``LSTM`` nodes of ``hidden_size=2`` (the projection's
    size) with the weights cut to match and an ``initial_c`` of 5 cells: ONNX Runtime refuses
    to run them. The case holds the file and the PyTorch weights (``weights/lstm/…``), no
    outputs.
``loop_gru_twice_dynamo``, ``loop_gru_zoneout_dynamo``, ``loop_gru_learned_state_dynamo``,
``loop_lstm_learned_state_dynamo``, ``loop_lstm_learned_state_torchscript``,
``loop_gru_both_directions_dynamo``, ``loop_rnn_square_dynamo``
    One ``nn.GRUCell(3, 4)`` (``nn.LSTMCell``, ``nn.RNNCell``) stepped over a batch-first
    ``(batch, 5, 3)`` sequence in a Python loop, its states stacked on the time axis: applied
    twice per step (``h = cell(x_t, cell(x_t, h))``); with a zoneout (``h = 0.5·cell(x_t, h)
    + 0.5·h``); from a learned state (``h0.expand(batch, 4)``, and ``c0``: parameters, under
    ``weights/h0``, ``weights/c0``); over ``x`` and over ``torch.flip(x)``, joined as a
    bidirectional network's output (one cell for both directions); ``(4, 4)`` from zeros
    (input and state of one size). ``meta["mode"]`` says which.
``loop_gru_pair_added_dynamo``
    Two ``nn.GRUCell(3, 4)`` (``forward_cell``, ``backward_cell``) over a batch-first
    ``(batch, 5, 3)`` sequence and over ``torch.flip`` of it from zero states, the second's
    outputs flipped back and added to the first's: not a bidirectional network's output.
``square_lstm_step_dynamo``
    One step of ``nn.LSTMCell(4, 4)`` exported with its state, ``(x, (h, c))``; ``x``, ``h``,
    ``c`` and ``inputs`` (the graph's input names, in that order) are in the case.
``torch_default_lstm``, ``torch_default_gru``, ``torch_default_rnn``
    ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` ``(3, 4, num_layers=2, bidirectional=True,
    batch_first=True)`` exported by the default exporter (``external_data=False``): LSTM
    and GRU as ``LSTM``/``GRU`` nodes, the simple RNN unrolled into ``MatMul``/``Tanh`` steps
    (the exporter has no ``RNN`` node for it).

The default exporter stores, on every node, ``metadata_props`` holding Python stack traces
with this machine's paths (two thirds of a file's bytes); they are removed before saving.
Nothing else is changed.

Weights: every parameter is random (uniform, ±0.6) and every value in a case is distinct,
biases included, so a swapped gate, a transposed matrix or a dropped bias cannot pass.
Inputs are uniform ±1. Seeds: CRC32 of the case name.

Files, per case ``<name>``
--------------------------
``<name>.onnx`` (and ``<name>_dequantized.onnx`` for the quantized cases), and ``<name>.npz``
(plain arrays, ``allow_pickle=False``):

``meta``
    0-d unicode array holding a JSON object: ``case``, ``description``, ``versions``,
    ``exporter``, ``files``, ``time_major`` (how ``x`` and ``y`` are laid out),
    ``tolerance`` (rnnport's forward against ``y``: 1e-5, or for the quantized cases the
    quantization error's bound, against ONNX Runtime's integer kernels),
    ``read_options`` (what reading needs: ``dequantize``), ``cells`` (the paired cells'
    names, layer by layer, forward first), ``quantized_error`` (ONNX Runtime's quantized output against
    the dequantized float model's).
``x``
    The recurrent network's input: the CRNN's columns as PyTorch computed them
    ``(time, batch, 3)``; the quantized cases' ``(time, batch, 4)``; the default export's
    ``(batch, time, 3)``.
``y``
    The recurrent network's output as ONNX Runtime computed it from the file: the CRNN's
    second output, the others' first.
``y_torch``
    PyTorch's own ``y`` (not for the quantized cases).
``image``, ``log_probs`` (CRNN)
    The image fed and ONNX Runtime's first output.
``y_dequantized``, ``y_float`` (quantized cases)
    ONNX Runtime's output of ``<name>_dequantized.onnx`` and of the float model the quantizer
    was given.
``weights/<cell or module>/<name>``
    The PyTorch parameters (``weights/fw/weight_ih``, ``weights/lstm/weight_hh_l1_reverse``).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import golden_manifest
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "golden" / "onnx"
TOLERANCE = 1e-5
# rnnport's float forward with the dequantized weights against ONNX Runtime's integer kernels,
# which quantize x and h to uint8 on every step: measured 1.3e-3 at most on these cases
# (ONNX Runtime's quantized output differs from the float model's by as much).
QUANTIZED_TOLERANCE = 5e-3
BATCH = 2


def _randomize(module: Any, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every parameter of ``module`` replaced by distinct random values; the state_dict."""
    import torch

    used: set[float] = set()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.from_numpy(golden_manifest.distinct_uniform(
                rng, tuple(parameter.shape), used)))
    return {name: value.detach().numpy().copy() for name, value in module.state_dict().items()}


def _export(module: Any, args: tuple[Any, ...], path: Path, exporter: str,
            outputs: list[str]) -> None:
    """``torch.onnx.export`` as a user calls it; the default exporter's stack traces are
    dropped from the file."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        if exporter == "dynamo":
            torch.onnx.export(module, args, str(path), input_names=["x"], output_names=outputs,
                              external_data=False, verbose=False)
        else:  # with an open batch, as models served this way are exported
            torch.onnx.export(module, args, str(path), input_names=["x"], output_names=outputs,
                              dynamo=False, dynamic_axes={"x": {0: "batch"}})
        logging.disable(logging.NOTSET)
    _strip(path)


def _strip(path: Path) -> None:
    """The default exporter's stack traces (``metadata_props``) dropped from the file."""
    import onnx

    model = onnx.load(str(path))
    for node in model.graph.node:
        del node.metadata_props[:]
    onnx.save(model, str(path))


def _exported(name: str, out: Path, module: Any, x: np.ndarray, weights: dict[str, np.ndarray],
              prefix: str = "", exporter: str = "dynamo"
              ) -> tuple[dict[str, np.ndarray], list[str]]:
    """``module`` exported (by the default exporter unless ``exporter`` says
    ``torchscript``), run by ONNX Runtime and PyTorch on ``x`` (which must agree): the
    case's arrays (``x``, ``y``, ``y_torch``, the weights under ``weights/<prefix>``) and
    files."""
    import torch

    path = out / f"{name}.onnx"
    _export(module, (torch.from_numpy(x),), path, exporter, ["y"])
    y = _session(path, {"x": x})[0]
    with torch.no_grad():
        result = module(torch.from_numpy(x))
    y_torch = (result[0] if isinstance(result, tuple) else result).numpy()
    _agree(name, y, y_torch)
    return {"x": x, "y": y, "y_torch": y_torch,
            **{f"weights/{prefix}{key.replace('.', '/')}": value
               for key, value in weights.items()}}, [path.name]


def _session(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [np.asarray(value) for value in session.run(None, feeds)]


# -- the CRNN: two LSTMCells stepped in Python loops --------------------------------------------

def _crnn_class() -> Any:
    import torch
    from torch import nn

    class CaptchaCRNN(nn.Module):
        """Convolutional features, two LSTMCells over them and their reverse, a head."""

        def __init__(self) -> None:
            super().__init__()
            self.cnn = nn.Sequential(nn.Conv2d(1, 3, 3, padding=1), nn.ReLU(),
                                     nn.MaxPool2d((4, 1)))
            self.hidden = 4
            self.fw, self.bw = nn.LSTMCell(3, 4), nn.LSTMCell(3, 4)
            self.head = nn.Linear(8, 6)

        def columns(self, image: Any) -> Any:
            return self.cnn(image).squeeze(2).permute(2, 0, 1)  # (time, batch, features)

        def forward(self, image: Any) -> tuple[Any, Any]:
            x = self.columns(image)
            batch = x.shape[1]
            h, c = torch.zeros(batch, self.hidden), torch.zeros(batch, self.hidden)
            forward = []
            for step in range(x.shape[0]):
                h, c = self.fw(x[step], (h, c))
                forward.append(h)
            reversed_x = torch.flip(x, [0])
            h, c = torch.zeros(batch, self.hidden), torch.zeros(batch, self.hidden)
            backward = []
            for step in range(x.shape[0]):
                h, c = self.bw(reversed_x[step], (h, c))
                backward.append(h)
            y = torch.cat([torch.stack(forward), torch.flip(torch.stack(backward), [0])], 2)
            return self.head(y).log_softmax(2), y

    return CaptchaCRNN


def _bidirectional_cells(forward_cell: Any, backward_cell: Any, x: Any, hidden: int) -> Any:
    """Two LSTMCells over time-major ``x`` and its flip from zero states; outputs joined."""
    import torch

    batch = x.shape[1]
    h, c = torch.zeros(batch, hidden), torch.zeros(batch, hidden)
    forward = []
    for step in range(x.shape[0]):
        h, c = forward_cell(x[step], (h, c))
        forward.append(h)
    reversed_x = torch.flip(x, [0])
    h, c = torch.zeros(batch, hidden), torch.zeros(batch, hidden)
    backward = []
    for step in range(x.shape[0]):
        h, c = backward_cell(reversed_x[step], (h, c))
        backward.append(h)
    return torch.cat([torch.stack(forward), torch.flip(torch.stack(backward), [0])], 2)


def _two_layers(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
    from torch import nn

    class TwoLayers(nn.Module):
        """Two layers of paired LSTMCells, the second fed the first's joined outputs."""

        def __init__(self) -> None:
            super().__init__()
            self.fw0, self.bw0 = nn.LSTMCell(3, 4), nn.LSTMCell(3, 4)
            self.fw1, self.bw1 = nn.LSTMCell(8, 4), nn.LSTMCell(8, 4)

        def forward(self, x: Any) -> Any:
            first = _bidirectional_cells(self.fw0, self.bw0, x, 4)
            return _bidirectional_cells(self.fw1, self.bw1, first, 4)

    model = TwoLayers().eval()
    weights = _randomize(model, rng)
    x = rng.uniform(-1, 1, (3, BATCH, 3)).astype(np.float32)
    arrays, files = _exported(name, out, model, x, weights)
    return {"arrays": arrays, "files": files, "exporter": "dynamo", "time_major": True,
            "cells": ["fw0", "bw0", "fw1", "bw1"]}


def _crnn(exporter: str) -> Callable[[str, Path, np.random.Generator], dict[str, Any]]:
    def make(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
        import torch

        model = _crnn_class()().eval()
        weights = _randomize(model, rng)
        image = rng.uniform(-1, 1, (BATCH, 1, 4, 5)).astype(np.float32)
        path = out / f"{name}.onnx"
        _export(model, (torch.from_numpy(image),), path, exporter, ["log_probs", "y"])
        log_probs, y = _session(path, {"x": image})
        with torch.no_grad():
            x = model.columns(torch.from_numpy(image)).numpy()
            y_torch = model(torch.from_numpy(image))[1].numpy()
        _agree(name, y, y_torch)
        arrays = {"image": image, "x": x, "y": y, "y_torch": y_torch, "log_probs": log_probs,
                  **{f"weights/{key.replace('.', '/')}": value for key, value in weights.items()
                     if key.startswith(("fw.", "bw."))}}
        return {"arrays": arrays, "files": [path.name], "exporter": exporter,
                "time_major": True, "cells": ["fw", "bw"]}
    return make


def _reversed_loop_class() -> Any:
    import torch
    from torch import nn

    class ReversedLoop(nn.Module):
        """Two GRUCells over a batch-first sequence: one from the first step up, one from
        the last step down (no flip), outputs stacked on the time axis and concatenated."""

        def __init__(self) -> None:
            super().__init__()
            self.forward_cell, self.backward_cell = nn.GRUCell(3, 4), nn.GRUCell(3, 4)

        def forward(self, x: Any) -> Any:
            steps = x.shape[1]
            h = torch.zeros(x.shape[0], 4)
            forward = []
            for step in range(steps):
                h = self.forward_cell(x[:, step], h)
                forward.append(h)
            h = torch.zeros(x.shape[0], 4)
            backward: list[Any] = [None] * steps
            for step in reversed(range(steps)):
                h = self.backward_cell(x[:, step], h)
                backward[step] = h
            return torch.cat([torch.stack(forward, 1), torch.stack(backward, 1)], 2)

    return ReversedLoop


def _reversed_loop(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
    model = _reversed_loop_class()().eval()
    weights = _randomize(model, rng)
    x = rng.uniform(-1, 1, (BATCH, 5, 3)).astype(np.float32)
    arrays, files = _exported(name, out, model, x, weights)
    return {"arrays": arrays, "files": files, "exporter": "dynamo", "time_major": False,
            "cells": ["forward_cell", "backward_cell"]}


# -- two recurrent modules, one taking the other's output: not one stack -----------------------

def _apart(kind: str, exporter: str, glue: str
           ) -> Callable[[str, Path, np.random.Generator], dict[str, Any]]:
    """``nn.GRU``/``nn.LSTM`` ``first`` then ``second``, batch-first, ``second`` taking
    ``first``'s output: from ``first``'s final state (``glue="state"``, an encoder and its
    decoder), with the directions' features interleaved (``"interleave"``, ``first``
    bidirectional), or with the batch and time axes swapped (``"swap"``)."""
    def make(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
        from torch import nn

        module = {"gru": nn.GRU, "lstm": nn.LSTM}[kind]

        class Apart(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                bidirectional = glue == "interleave"
                self.first = module(3, 4, batch_first=True, bidirectional=bidirectional)
                self.second = module(8 if bidirectional else 4, 4, batch_first=True)

            def forward(self, x: Any) -> Any:
                y, state = self.first(x)
                if glue == "state":
                    return self.second(y, state)[0]
                if glue == "interleave":  # [forward | backward] → (f0, b0, f1, b1, …)
                    batch, steps = y.shape[:2]
                    y = y.reshape(batch, steps, 2, 4).transpose(2, 3).reshape(batch, steps, 8)
                else:  # the second runs over the batch axis
                    y = y.transpose(0, 1)
                return self.second(y)[0]

        model = Apart().eval()
        weights = _randomize(model, rng)
        x = rng.uniform(-1, 1, (BATCH, 5, 3)).astype(np.float32)
        arrays, files = _exported(name, out, model, x, weights, exporter=exporter)
        return {"arrays": arrays, "files": files, "exporter": exporter, "time_major": False,
                "networks": ["first", "second"], "glue": glue}
    return make


# -- what the default exporter makes of a projected LSTM -----------------------------------------

def _projected(layers: int) -> Callable[[str, Path, np.random.Generator], dict[str, Any]]:
    """``nn.LSTM(3, 5, proj_size=2, num_layers=layers, batch_first=True)`` through the
    default exporter, which writes an ``LSTM`` node of ``hidden_size=2`` (the projection's
    size) with the weights cut to match and an ``initial_c`` of 5: ONNX Runtime refuses to
    run it, so the case holds the file and the PyTorch weights only."""
    def make(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
        import torch
        from torch import nn

        class Projected(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(3, 5, proj_size=2, num_layers=layers, batch_first=True)

            def forward(self, x: Any) -> Any:
                return self.lstm(x)[0]

        model = Projected().eval()
        weights = _randomize(model, rng)
        path = out / f"{name}.onnx"
        _export(model, (torch.zeros(BATCH, 4, 3),), path, "dynamo", ["y"])
        arrays = {f"weights/{key.replace('.', '/')}": value for key, value in weights.items()}
        return {"arrays": arrays, "files": [path.name], "exporter": "dynamo",
                "time_major": False}
    return make


# -- one cell stepped in a Python loop, plainly or not ------------------------------------------

def _loop(kind: str, mode: str, exporter: str = "dynamo"
          ) -> Callable[[str, Path, np.random.Generator], dict[str, Any]]:
    """``nn.GRUCell``/``nn.LSTMCell``/``nn.RNNCell`` ``(3, 4)`` stepped over a batch-first
    ``(batch, 5, 3)`` sequence in a Python loop, its states stacked on the time axis;
    ``mode``: ``twice`` (``h = cell(x_t, cell(x_t, h))``), ``zoneout`` (``h = 0.5·cell(x_t,
    h) + 0.5·h``), ``learned`` (from ``h0.expand(batch, 4)``, a parameter, and ``c0`` for
    an LSTM), ``both`` (the one cell over ``x`` and over ``torch.flip(x)``, outputs joined
    as a bidirectional network's), ``square`` (``(4, 4)``: input and state of one size)."""
    def make(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
        import torch
        from torch import nn

        size = 4 if mode == "square" else 3

        class Loop(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.cell = {"gru": nn.GRUCell, "lstm": nn.LSTMCell, "rnn": nn.RNNCell}[kind](
                    size, 4)
                if mode == "learned":
                    self.h0 = nn.Parameter(torch.zeros(1, 4))
                    self.c0 = nn.Parameter(torch.zeros(1, 4))

            def step(self, x: Any, h: Any, c: Any) -> tuple[Any, Any]:
                if kind == "lstm":
                    return tuple(self.cell(x, (h, c)))
                return self.cell(x, h), c

            def run(self, x: Any) -> Any:
                batch = x.shape[0]
                if mode == "learned":
                    h, c = self.h0.expand(batch, 4), self.c0.expand(batch, 4)
                else:
                    h, c = torch.zeros(batch, 4), torch.zeros(batch, 4)
                outputs = []
                for step in range(x.shape[1]):
                    if mode == "twice":
                        h, c = self.step(x[:, step], *self.step(x[:, step], h, c))
                    elif mode == "zoneout":
                        new, c = self.step(x[:, step], h, c)
                        h = 0.5 * new + 0.5 * h
                    else:
                        h, c = self.step(x[:, step], h, c)
                    outputs.append(h)
                return torch.stack(outputs, 1)

            def forward(self, x: Any) -> Any:
                y = self.run(x)
                if mode == "both":
                    y = torch.cat([y, torch.flip(self.run(torch.flip(x, [1])), [1])], 2)
                return y

        model = Loop().eval()
        weights = _randomize(model, rng)
        x = rng.uniform(-1, 1, (BATCH, 5, size)).astype(np.float32)
        arrays, files = _exported(name, out, model, x, weights, exporter=exporter)
        return {"arrays": arrays, "files": files, "exporter": exporter, "time_major": False,
                "mode": mode}
    return make


def _added(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
    """Two ``nn.GRUCell(3, 4)`` over a batch-first sequence and over ``torch.flip`` of it
    from zero states, the second's outputs flipped back and *added* to the first's."""
    import torch
    from torch import nn

    class Added(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.forward_cell, self.backward_cell = nn.GRUCell(3, 4), nn.GRUCell(3, 4)

        def forward(self, x: Any) -> Any:
            outputs = []
            for cell, sequence in ((self.forward_cell, x),
                                   (self.backward_cell, torch.flip(x, [1]))):
                h, states = torch.zeros(x.shape[0], 4), []
                for step in range(x.shape[1]):
                    h = cell(sequence[:, step], h)
                    states.append(h)
                outputs.append(torch.stack(states, 1))
            return outputs[0] + torch.flip(outputs[1], [1])

    model = Added().eval()
    weights = _randomize(model, rng)
    x = rng.uniform(-1, 1, (BATCH, 5, 3)).astype(np.float32)
    arrays, files = _exported(name, out, model, x, weights)
    return {"arrays": arrays, "files": files, "exporter": "dynamo", "time_major": False}


def _square_step(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
    """One step of ``nn.LSTMCell(4, 4)`` exported with its state as inputs, ``(x, (h, c))``:
    the input and the state are of one size."""
    import torch

    cell = torch.nn.LSTMCell(4, 4).eval()
    weights = _randomize(cell, rng)
    x, h, c = (rng.uniform(-1, 1, (BATCH, 4)).astype(np.float32) for _ in range(3))
    path = out / f"{name}.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        torch.onnx.export(cell, (torch.from_numpy(x), (torch.from_numpy(h), torch.from_numpy(c))),
                          str(path), external_data=False, verbose=False)
        logging.disable(logging.NOTSET)
    _strip(path)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [value.name for value in session.get_inputs()]
    y = np.asarray(session.run(None, dict(zip(names, (x, h, c), strict=True)))[0])
    with torch.no_grad():
        y_torch = cell(torch.from_numpy(x), (torch.from_numpy(h), torch.from_numpy(c)))[0].numpy()
    _agree(name, y, y_torch)
    arrays = {"x": x, "h": h, "c": c, "y": y, "y_torch": y_torch,
              **{f"weights/cell/{key}": value for key, value in weights.items()}}
    return {"arrays": arrays, "files": [path.name], "exporter": "dynamo", "time_major": False,
            "inputs": names}


# -- ONNX Runtime's DynamicQuantizeLSTM ---------------------------------------------------------

def _quantized(bidirectional: bool, per_channel: bool, unsigned: bool
               ) -> Callable[[str, Path, np.random.Generator], dict[str, Any]]:
    def make(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
        import onnx
        import torch
        from onnxruntime.quantization import quantize_dynamic

        module = torch.nn.LSTM(4, 5, bidirectional=bidirectional).eval()
        weights = _randomize(module, rng)
        x = rng.uniform(-1, 1, (6, BATCH, 4)).astype(np.float32)
        path, dequantized = out / f"{name}.onnx", out / f"{name}_dequantized.onnx"
        with tempfile.TemporaryDirectory() as folder:
            float_path = Path(folder) / "float.onnx"
            _export(module, (torch.from_numpy(x),), float_path, "dynamo", ["y"])
            y_float = _session(float_path, {"x": x})[0]
            quantize_dynamic(str(float_path), str(path), per_channel=per_channel)
        model = onnx.load(str(path))
        if unsigned:
            _to_uint8(model)
            onnx.save(model, str(path))
        onnx.save(_dequantized_model(model), str(dequantized))
        y = _session(path, {"x": x})[0]
        y_dequantized = _session(dequantized, {"x": x})[0]
        error = float(np.max(np.abs(y - y_dequantized)))
        if error > QUANTIZED_TOLERANCE:
            raise SystemExit(f"{name}: ONNX Runtime's quantized output differs from the "
                             f"dequantized float model's by {error:.2g}, more than the "
                             f"tolerance {QUANTIZED_TOLERANCE}")
        arrays = {"x": x, "y": y, "y_dequantized": y_dequantized, "y_float": y_float,
                  **{f"weights/lstm/{key}": value for key, value in weights.items()}}
        return {"arrays": arrays, "files": [path.name, dequantized.name],
                "exporter": "dynamo, then onnxruntime.quantization.quantize_dynamic"
                            f"(per_channel={per_channel})", "time_major": True,
                "tolerance": QUANTIZED_TOLERANCE, "read_options": {"dequantize": True},
                "quantized_error": error}
    return make


def _quantized_node(model: Any) -> Any:
    (node,) = [node for node in model.graph.node if node.op_type == "DynamicQuantizeLSTM"]
    return node


def _to_uint8(model: Any) -> None:
    """The node's int8 weights and zero points as uint8, each plus 128."""
    from onnx import numpy_helper

    node = _quantized_node(model)
    moved = {node.input[index] for index in (1, 2, 9, 11)}
    for tensor in model.graph.initializer:
        if tensor.name in moved:
            values = numpy_helper.to_array(tensor).astype(np.int16) + 128
            tensor.CopyFrom(numpy_helper.from_array(values.astype(np.uint8), tensor.name))


def _dequantized_model(model: Any) -> Any:
    """A copy of ``model`` whose DynamicQuantizeLSTM is an LSTM with the dequantized weights."""
    import onnx
    from onnx import helper, numpy_helper

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    node = _quantized_node(copy)
    tensors = {tensor.name: tensor for tensor in copy.graph.initializer}
    arrays = {name: numpy_helper.to_array(tensor) for name, tensor in tensors.items()}
    inputs = list(node.input)
    replaced = []
    for weight, scale, zero in ((1, 8, 9), (2, 10, 11)):
        quantized = arrays[inputs[weight]]
        scales, zeros = arrays[inputs[scale]], arrays[inputs[zero]]
        shape = (-1, 1, 1) if scales.ndim == 1 else (scales.shape[0], 1, scales.shape[1])
        values = scales.reshape(shape) * (quantized.astype(np.float32) -
                                          zeros.reshape(shape).astype(np.float32))
        name = f"{inputs[weight]}_dequantized"
        replaced.append(numpy_helper.from_array(
            np.ascontiguousarray(values.astype(np.float32).transpose(0, 2, 1)), name))
        inputs[weight] = name
    for index in (8, 9, 10, 11):
        copy.graph.initializer.remove(tensors[inputs[index]])
    copy.graph.initializer.extend(replaced)
    attributes = {attribute.name: helper.get_attribute_value(attribute)
                  for attribute in node.attribute}
    lstm = helper.make_node("LSTM", inputs[:8], list(node.output), name=f"{node.name}_float",
                            **attributes)
    position = list(copy.graph.node).index(node)
    copy.graph.node.remove(node)
    copy.graph.node.insert(position, lstm)
    if not any(other.domain == "com.microsoft" for other in copy.graph.node):
        kept = [entry for entry in copy.opset_import if entry.domain != "com.microsoft"]
        del copy.opset_import[:]
        copy.opset_import.extend(kept)
    return copy


# -- PyTorch's default exporter on the modules --------------------------------------------------

def _default(kind: str) -> Callable[[str, Path, np.random.Generator], dict[str, Any]]:
    def make(name: str, out: Path, rng: np.random.Generator) -> dict[str, Any]:
        import torch

        module = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind](
            3, 4, num_layers=2, bidirectional=True, batch_first=True).eval()
        weights = _randomize(module, rng)
        x = rng.uniform(-1, 1, (BATCH, 5, 3)).astype(np.float32)
        arrays, files = _exported(name, out, module, x, weights, f"{kind}/")
        return {"arrays": arrays, "files": files, "exporter": "dynamo", "time_major": False}
    return make


def _agree(name: str, onnx_runtime: np.ndarray, torch: np.ndarray) -> None:
    error = float(np.max(np.abs(onnx_runtime - torch)))
    if error > TOLERANCE:
        raise SystemExit(f"{name}: ONNX Runtime and PyTorch differ by {error:.2g}")


CASES: dict[str, tuple[Callable[[str, Path, np.random.Generator], dict[str, Any]], str]] = {
    "crnn_cells_dynamo": (_crnn("dynamo"), "a CRNN stepping two nn.LSTMCell(3, 4) in Python "
                          "loops from a zero state made in forward, one over torch.flip of "
                          "the columns, outputs concatenated; torch.onnx.export (default)"),
    "crnn_cells_torchscript": (_crnn("torchscript"), "the same CRNN; torch.onnx.export("
                               "dynamo=False, dynamic_axes={'x': {0: 'batch'}})"),
    "lstm_cells_two_layers_dynamo": (_two_layers, "two layers, each two nn.LSTMCell stepped "
                                     "over its input and over torch.flip of it from zero "
                                     "states, outputs concatenated; the second layer takes "
                                     "the first's; torch.onnx.export (default)"),
    "gru_cells_reversed_loop_dynamo": (_reversed_loop, "two nn.GRUCell(3, 4) over a "
                                       "batch-first sequence from a zero state, one from the "
                                       "last step down (no flip), outputs concatenated; "
                                       "torch.onnx.export (default)"),
    "apart_encoder_decoder_gru_torchscript": (
        _apart("gru", "torchscript", "state"), "nn.GRU(3, 4) then nn.GRU(4, 4) over its output "
        "from its final state (an encoder and its decoder); torch.onnx.export(dynamo=False)"),
    "apart_encoder_decoder_lstm_dynamo": (
        _apart("lstm", "dynamo", "state"), "nn.LSTM(3, 4) then nn.LSTM(4, 4) over its output "
        "from its final state (h, c); torch.onnx.export (default)"),
    "apart_interleaved_lstm_torchscript": (
        _apart("lstm", "torchscript", "interleave"), "nn.LSTM(3, 4, bidirectional=True) then "
        "nn.LSTM(8, 4) over its output with the directions' features interleaved; "
        "torch.onnx.export(dynamo=False)"),
    "apart_swapped_gru_torchscript": (
        _apart("gru", "torchscript", "swap"), "nn.GRU(3, 4) then nn.GRU(4, 4) over its output "
        "with batch and time swapped; torch.onnx.export(dynamo=False)"),
    "apart_swapped_gru_dynamo": (
        _apart("gru", "dynamo", "swap"), "the same; torch.onnx.export (default)"),
    "projected_lstm_dynamo": (_projected(1), "nn.LSTM(3, 5, proj_size=2, batch_first=True); "
                              "torch.onnx.export (default): a malformed LSTM node"),
    "projected_lstm_two_layers_dynamo": (_projected(2), "the same with num_layers=2"),
    "loop_gru_twice_dynamo": (_loop("gru", "twice"), "nn.GRUCell(3, 4) applied twice per "
                              "step, h = cell(x_t, cell(x_t, h)); torch.onnx.export (default)"),
    "loop_gru_zoneout_dynamo": (_loop("gru", "zoneout"), "nn.GRUCell(3, 4) stepped with "
                                "h = 0.5·cell(x_t, h) + 0.5·h; torch.onnx.export (default)"),
    "loop_gru_learned_state_dynamo": (_loop("gru", "learned"), "nn.GRUCell(3, 4) stepped from "
                                      "a learned h0.expand(batch, 4); torch.onnx.export "
                                      "(default)"),
    "loop_lstm_learned_state_dynamo": (_loop("lstm", "learned"), "nn.LSTMCell(3, 4) stepped "
                                       "from learned h0, c0; torch.onnx.export (default)"),
    "loop_lstm_learned_state_torchscript": (_loop("lstm", "learned", "torchscript"), "the "
                                            "same; torch.onnx.export(dynamo=False)"),
    "loop_gru_both_directions_dynamo": (_loop("gru", "both"), "one nn.GRUCell(3, 4) over x and "
                                        "over torch.flip(x), outputs joined as a bidirectional "
                                        "network's; torch.onnx.export (default)"),
    "loop_rnn_square_dynamo": (_loop("rnn", "square"), "nn.RNNCell(4, 4) stepped from zeros; "
                               "torch.onnx.export (default)"),
    "loop_gru_pair_added_dynamo": (_added, "two nn.GRUCell(3, 4) over x and over "
                                   "torch.flip(x), outputs added; torch.onnx.export (default)"),
    "square_lstm_step_dynamo": (_square_step, "one step of nn.LSTMCell(4, 4) with (x, (h, c)) "
                                "as inputs; torch.onnx.export (default)"),
    "qlstm": (_quantized(False, False, False), "nn.LSTM(4, 5) through quantize_dynamic: "
              "DynamicQuantizeLSTM, int8, one scale"),
    "qlstm_bidirectional_per_channel": (_quantized(True, True, False), "nn.LSTM(4, 5, "
                                        "bidirectional=True) through quantize_dynamic("
                                        "per_channel=True): scales per column"),
    "qlstm_uint8": (_quantized(False, False, True), "qlstm with uint8 weights and zero "
                    "points (each plus 128)"),
    "torch_default_lstm": (_default("lstm"), "nn.LSTM(3, 4, num_layers=2, bidirectional=True, "
                           "batch_first=True); torch.onnx.export (default)"),
    "torch_default_gru": (_default("gru"), "nn.GRU(3, 4, num_layers=2, bidirectional=True, "
                          "batch_first=True); torch.onnx.export (default)"),
    "torch_default_rnn": (_default("rnn"), "nn.RNN(3, 4, num_layers=2, bidirectional=True, "
                          "batch_first=True); torch.onnx.export (default), unrolled"),
}


def _versions() -> dict[str, str]:
    import onnx
    import onnxruntime
    import onnxscript
    import torch

    return {"torch": torch.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "onnxscript": onnxscript.__version__,
            "numpy": np.__version__}


def make_case(name: str, out: Path) -> golden_manifest.Made:
    builder, description = CASES[name]
    made = builder(name, out, np.random.default_rng(zlib.crc32(name.encode())))
    arrays = made.pop("arrays")
    files = [*made.pop("files"), f"{name}.npz"]
    meta = {"case": name, "description": description, "versions": _versions(), "files": files,
            "tolerance": TOLERANCE, "read_options": {}, **made}
    np.savez(out / f"{name}.npz", meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    facts = {"description": description, "exporter": meta["exporter"],
             "tolerance": meta["tolerance"], "read_options": meta["read_options"]}
    return facts, files, description, _versions()


def main(argv: list[str] | None = None) -> int:
    return golden_manifest.main(argv, description=(__doc__ or "").splitlines()[0],
                                default_out=OUT,
                                cases={name: text for name, (_, text) in CASES.items()},
                                generator="tools/golden_onnx.py", make=make_case)


if __name__ == "__main__":
    sys.exit(main())
