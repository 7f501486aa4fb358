"""OpenVINO IR: ``model.xml`` (the graph) and ``model.bin`` (its constants), with one
``LSTMSequence``, ``GRUSequence`` or ``RNNSequence`` layer (opset5) per network layer.

The ``.xml`` is a ``<net>`` of ``<layers>`` (each a ``type``, an opset ``version``, its
``<data>`` attributes and its ports: element precision and ``<dim>``s, -1 where dynamic)
and ``<edges>`` joining an output port to an input port. A ``Const`` layer's ``<data>``
gives its ``element_type``, ``shape``, and the ``offset`` and ``size`` of its bytes in the
``.bin`` (little-endian, C order); the ``.bin`` has the ``.xml``'s name and folder.

Per recurrent layer (``D`` directions: index 0 forward, 1 reverse; ``G`` gates)::

    X      [B, T, I]            batch first
    H, C   [B, D, H]            initial states (C: LSTM only)
    seq    [B]                  sequence lengths (i32)
    W      [D, G·H, I]          gates stacked by rows: LSTM f i c o, GRU z r h, RNN one block
    R      [D, G·H, H]
    B      [D, G·H]             the two biases summed; a GRU with linear_before_reset=true:
                                [D, 4·H] = z sum, r sum, the candidate's input-side and
                                recurrent-side biases
    Y      [B, D, T, H]         a direction axis after batch; Ho, Co [B, D, H]

Inputs are X, H, (C,) seq, W, R, B in that order; W and R are cuDNN's orientation, only
the gate order differs (checked against the runtime: ``f i c o`` and ``z r h`` are what
``openvino.convert_model`` writes for PyTorch's ``i f g o`` and ``r z n``, and what the CPU
plugin computes). ``direction`` is ``forward``, ``reverse`` or ``bidirectional``;
``linear_before_reset=true`` is the reset-after GRU (PyTorch, cuDNN), ``false`` the
reset-before one; an ``RNNSequence`` with ``activations="relu"`` is ``rnn_relu``. The
opset has no peepholes and no projection. ``clip`` (every pre-activation clipped) and
activations other than the defaults (sigmoid and tanh; tanh or relu for the simple RNN)
are refused by name, as are ``LSTMSequence`` of opset1, ``TensorIterator``/``Loop``
bodies and single-step ``LSTMCell``/``GRUCell``/``RNNCell`` layers.

``openvino.save_model`` compresses weights to f16 by default: an f16 ``Const`` followed by
a ``Convert`` to f32. Such weights read as float16, exactly as stored; writing a float16
model stores them so, and a float32 model as f32 constants. Other dtypes are refused (the
runtime computes in f32).

Reading parses the XML with expat, refusing any DTD or entity (see :mod:`.ir`), and needs
neither OpenVINO nor anything but NumPy. It takes the path of the ``.xml``, of its ``.bin``,
or of a folder holding one IR, or an :class:`IR` in memory. Weights are found by
evaluating the layers that feed W, R and B in a small evaluator (:mod:`.fold`: constants
reshaped, transposed, split, gathered or converted), which refuses weights computed from
the graph's inputs or by arithmetic (a compressed model's ``Multiply``). It also checks
what the layers around the network do, with the graph's inputs fed at small sizes: every
initial state must be zeros (or come from the graph's inputs, which ``notes`` says) and the
lengths the whole sequence, and a layer is the next layer of the one whose ``Y`` it takes
only when the layers between them hand ``Y [B, D, T, H]`` on as ``X [B, T, D·H]`` (checked
on distinct numbers); otherwise each is a network of its own, and ``node=`` (a layer's
name) picks one. ``notes`` lists the other layers that compute (a head, a front end).

Writing builds a whole IR: input ``x`` [batch, time, input] (f32), each network layer a
recurrent layer started from zeros over the full lengths (computed from ``x``'s shape),
joined by ``Transpose`` and ``Reshape``; outputs ``y`` [batch, time, D·H], and ``h_n`` (and
``c_n``) [layers·D, batch, H] as ``forward`` returns its state (``h_n_0`` … per part of a
Stack). Without ``path`` it returns an :class:`IR`; with it, it writes ``PATH.xml`` and
``PATH.bin`` together, atomically. A bias-free network is written with zero biases.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...spec import Spec
from .._common import is_path
from .._protocol import Choices, Format, NamedArray, Suffix
from .fold import SEQUENCES
from .ir import IR, bin_path, is_ir, parse_shape, xml_path
from .reader import INPUTS, analyse, networks, notes, read
from .session import framework_forward
from .writer import output_files, param_count, write

__all__ = ["FORMAT", "IR"]


def sniff(source: Any) -> bool:
    if isinstance(source, IR):
        return True
    if not is_path(source):
        return False
    path = Path(source)
    if os.path.isdir(path):
        return sum(1 for item in path.iterdir() if item.suffix.lower() == ".xml"
                   and is_ir(item)) == 1
    if path.suffix.lower() == ".bin":
        return is_ir(xml_path(path))
    return path.suffix.lower() == ".xml" and is_ir(path)


def input_files(path: Path) -> list[Path]:
    """The ``.bin`` beside an ``.xml`` (or the ``.xml`` beside a ``.bin``)."""
    if path.suffix.lower() == ".xml":
        return [bin_path(path)]
    if path.suffix.lower() == ".bin":
        return [xml_path(path)]
    return []


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """W, R and B of the first recurrent layer, as the IR stores them."""
    analysis = analyse(native)
    layer = analysis.chains[0][0]
    inputs = INPUTS[SEQUENCES[layer.type]]
    note = ("axis 0 is the direction axis D (a bidirectional layer's forward direction is "
            "index 0, its reverse index 1)",)
    return [NamedArray(name, analysis.evaluate(*analysis.graph.producer(layer, inputs[name]))
                       .array, None, note) for name in ("W", "R", "B")]


def fixed_input(source: Any) -> tuple[int, int] | None:
    """The batch and time an IR whose one input has static sizes fixes (as ``convert_model``
    writes it when given ``input=[2, 5, 4]``, or ``[1, -1, 4]``: batch 2 or time 7 where
    the other one is dynamic), or None."""
    analysis = analyse(source)
    parameters = analysis.graph.of_type("Parameter")
    if len(parameters) != 1:
        return None
    shape = parse_shape(parameters[0].data.get("shape", ""), analysis.graph.where, "shape")
    if len(shape) != 3 or max(shape[:2]) < 1:
        return None
    batch, time = (shape[1], shape[0]) if analysis.time_major else (shape[0], shape[1])
    return (batch if batch > 0 else 2, time if time > 0 else 7)


def choices(source: Any) -> Choices:
    """The separate recurrent networks of an IR, each picked by one of its layers."""
    return Choices("node", tuple(networks(source)))


FORMAT = Format(
    "openvino", sniff=sniff, reader=read, writer=write, counter=param_count,
    read_options=frozenset({"node"}),
    features=frozenset({"reset_before", "reverse"}),
    one_bias=frozenset({"lstm", "gru", "gru_reset_before", "rnn"}), always_bias=True,
    dtypes=frozenset({"float16", "float32"}), extra="openvino", modules=("openvino",),
    suffixes=(Suffix(".xml", "an OpenVINO IR (.xml beside its .bin)"),
              Suffix(".bin", "an OpenVINO IR's weights (beside its .xml)", writes=False)),
    output_files=output_files, input_files=input_files,
    gate_names={"g": "c", "n": "h"},
    explain_arrays=explain_arrays, notes=notes, framework_forward=framework_forward,
    networks=choices, fixed_input=fixed_input,
    names={"reset_before": "GRUSequence linear_before_reset=false",
           "reset_after": "GRUSequence linear_before_reset=true",
           "reverse": "direction=reverse"},
    layout_notes=("OpenVINO arrays start with a direction axis D: W [D, G·H, I], R [D, G·H, "
                  "H], B [D, G·H] (one bias, the two summed; a reset-after GRU's B [D, 4·H] "
                  "keeps the candidate's two apart), forward first; one layer per network "
                  "layer.",))
