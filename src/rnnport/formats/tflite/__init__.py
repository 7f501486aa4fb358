"""TFLite (LiteRT) flatbuffers: ``.tflite`` models with fused recurrent operators.

A source is a ``.tflite`` path, the file's bytes (what :func:`write` returns) or a decoded
:class:`rnnport.io.tflite_schema.Model`. Reading uses NumPy alone (the bounds-checked
decoder in :mod:`rnnport.io.tflite_schema`); TensorFlow, LiteRT and ``flatbuffers`` are
never imported to read.

The file
--------
A FlatBuffer with file identifier ``TFL3`` at bytes 4–8 whose root is a ``Model``:
``operator_codes``, ``subgraphs`` (0 is the main graph: ``tensors``, ``inputs``,
``outputs``, ``operators`` in execution order), ``buffers`` (a constant tensor's bytes,
little-endian, row-major; buffer 0 is the empty sentinel). An operator lists its input and
output tensor indices; ``-1`` leaves an optional input out.

Operators read, and how each maps to the canonical model
---------------------------------------------------------
``UNIDIRECTIONAL_SEQUENCE_LSTM`` (44), and ``LSTM`` (16, FULL kernel: one time step per
invocation, h and c in variable tensors): 24 inputs (:data:`~rnnport.io.tflite_schema.LSTM_INPUTS`)::

    0 input (batch, time, I) [(time, batch, I) if time_major]
    1-4   input_to_{input,forget,cell,output}_weights   (H, I)
    5-8   recurrent_to_{…}_weights                       (H, H_out)
    9-11  cell_to_{input,forget,output}_weights          (H,)    peepholes
    12-15 {input,forget,cell,output}_gate_bias           (H,)
    16 projection_weights (P, H)    17 projection_bias (P,)
    18 output_state (batch, H_out)  19 cell_state (batch, H)
    20-23 {…}_layer_norm_coefficients (H,)

    i = σ(W_i x + R_i h + P_i∘c + b_i)   f = σ(W_f x + R_f h + P_f∘c + b_f)
    g = act(W_c x + R_c h + b_c)          c' = clip(f∘c + i∘g, ±cell_clip)
    o = σ(W_o x + R_o h + P_o∘c' + b_o)   h' = W_proj (o∘act(c'))  (or o∘act(c'))

→ canonical ``weight_ih`` = rows [W_i; W_f; W_c; W_o] (gates i f c o are canonical i f g o),
``weight_hh`` likewise, ``bias_ih`` = [b_i; b_f; b_c; b_o], ``bias_hh`` = zeros (TFLite
holds one bias), ``weight_hr`` = projection_weights, ``bias_hr`` = projection_bias
(``Spec.proj_bias``), ``weight_peephole`` = rows i, f, o, ``weight_ln`` = the layer-norm
coefficients, rows i f g o (``Spec.layer_norm``: each gate's ``W x + R h + P∘c`` is
normalized over its units, ``(a − mean) / sqrt(var + 1e-8)``, times the coefficients, plus
the bias — LiteRT's layer-norm LSTM, computed by :mod:`rnnport.runtime`).
Options (``UnidirectionalSequenceLSTMOptions``): ``cell_clip`` (0: none) → ``Spec.cell_clip``;
``fused_activation_function`` TANH → the default, RELU → ``activations`` (Sigmoid, Relu,
Relu); ``time_major`` → a note (the network is the same; feed ``time_major=True``).

* CIFG (inputs 1 and 5 left out): LiteRT computes ``i = 1 − f``; canonical
  ``input_forget`` computes ``f = 1 − i``. The forget gate's weights, bias and peephole are
  held negated in the canonical input gate (``σ(−a) = 1 − σ(a)``), the forget slot zeros;
  its layer-norm coefficients move unchanged (``LN(−a)·k − b = −(LN(a)·k + b)``).
* Refused by name (the numbers would change): ``proj_clip`` > 0, the activations NONE,
  RELU_N1_TO_1, RELU6, SIGN_BIT, ``diagonal_recurrent_tensors``, LSTM's BASIC kernel, a
  nonzero constant initial state (zeros, a variable or a run-time input are accepted, with
  a note).

``BIDIRECTIONAL_SEQUENCE_LSTM`` (52): input 0; forward weights at inputs 1–17 and backward
at 18–34 (each in the order of inputs 1–17 above); states 35–38 (forward h, c, backward h,
c); an auxiliary input (39–47) is refused. ``merge_outputs``: one output (forward ‖
backward on the last axis), else two (a note). ``time_major`` defaults to true.

``UNIDIRECTIONAL_SEQUENCE_RNN`` (35), ``RNN`` (24, one step): input, input_weights (H, I),
recurrent_weights (H, H), bias (H,), hidden_state; ``h' = act(W x + R h + b)``; TANH →
``rnn_tanh``, RELU → ``rnn_relu``, others refused. ``BIDIRECTIONAL_SEQUENCE_RNN`` (46):
input, forward weights/recurrent/bias/state at 1–4, backward at 5–8, auxiliary 9–11
(refused).

What the TensorFlow converter writes
------------------------------------
A Keras ``LSTM`` → one ``UNIDIRECTIONAL_SEQUENCE_LSTM`` with ``cell_clip`` 10.0 (LiteRT
clips the cell state: a real clip, read as ``Spec.cell_clip``) and variable state tensors.
``Bidirectional(LSTM)`` → ``REVERSE_V2`` → ``UNIDIRECTIONAL_SEQUENCE_LSTM`` → ``REVERSE_V2``
(the backward direction, reversed on the time axis) beside a forward one on the same input,
joined by ``CONCATENATION`` on the last axis → one bidirectional layer. A reversed op alone
is a ``reverse`` network when a ``REVERSE_V2`` puts its output back in time order; one whose
output the file keeps reversed (or whose last step alone it keeps) is a ``go_backwards=True``
layer outside a Bidirectional, refused by name as the tf2 reader refuses it, and a time flip
just before it (``Lambda(ops.flip)``, nothing else reading the flipped sequence) cancels its
reversal: a forward network over the tensor before the flip (a note says so). Two directions
joined by ``ADD`` (``merge_mode='sum'``, ``'ave'`` with a ``MUL`` by 0.5) or ``MUL``
(``'mul'``) stay two networks, each listed and noted with the merge. Stacked layers → a
chain of ops, each reading the one before (through shape-keeping ``DEQUANTIZE``/``RESHAPE``
too) → one network (``rnnport.stack``).
Float16 weights feed ``DEQUANTIZE`` ops → read as float32 (exact).

A Keras ``SimpleRNN`` or ``GRU`` → ``TRANSPOSE`` (to time-major) → ``WHILE`` →
``TRANSPOSE`` (a backward direction with ``REVERSE_V2`` inside both): no fused operator
exists, so the converter writes the recurrence as a loop whose body subgraph computes one
step from builtins. rnnport evaluates the body symbolically (:mod:`.loops`) and reads the
loop when its new state is a simple RNN (tanh, relu) or a GRU (reset after or before),
term by term, with the weights from the body's constants — bit-equal to the Keras
layer's; anything else in a body (another gate function, an LSTM's two states, a loop
that stops before the sequence's end) is refused with what it computes. The GRU loops
rnnport writes carry an ``rnnport.loops`` metadata entry (JSON) naming each loop op, its
layer and direction, the GRU variant and sizes, and the body tensors holding
``weight_ih``, ``weight_hh``, ``bias_ih`` and ``bias_hh``; the reader checks those
tensors' shapes against the description before reading them (a damaged entry is an
error), and reads the same loops from their bodies alone when the entry is gone.

Keras 3 (``from_keras_model``) writes no fused operator: every ``LSTM``, ``GRU`` and
``SimpleRNN`` is a ``WHILE`` loop, read as above. An LSTM's loop carries two states, h and
c; a GRU's body splits the recurrent product with ``STRIDED_SLICE``; ``activation=`` /
``recurrent_activation=`` other than tanh / sigmoid are read as ``Spec.activations``
(``"linear"``: the identity, ``Affine`` 1, 0), a simple RNN of another function is refused.
Bidirectional and stacked layers join as the fused ones do. A loop whose output sequence the
converter dropped (an encoder whose final state alone is used: ``return_state``) is a
network of its own whose y no tensor holds; a loop starting from another's final state
(the decoder) takes its initial state at run time (a note). With an open batch the
converter needs ``SELECT_TF_OPS``, and the loop's output becomes a TensorList built by Flex
operators (``FlexTensorListReserve`` in front, ``FlexTensorListSetItem`` in the body,
``FlexTensorListStack`` behind): read as the sequence the stack gives (LiteRT runs such a
file only with its Flex delegate). The zeros the loop starts from may be computed (``FILL``
of the input's batch): read as zeros. Resource variables (``VAR_HANDLE``, ``READ_VARIABLE``,
``ASSIGN_VARIABLE``, first set by a ``CALL_ONCE`` initializer subgraph) hold what a model
assigns: a ``stateful`` layer's state (an initial state read as zeros when its initializer
sets zeros, with a note that LiteRT carries it between invocations; nonzero is refused) and
Keras 3's dropout seed generator (operators feeding no output, listed by ``notes``). Weights
held in resource variables are refused; when nothing initializes them (what
``from_saved_model`` writes for a ``tf.saved_model.save`` folder, which LiteRT cannot run
either) the refusal says the weights are not in the file.

Quantized weights (an integer tensor with a scale) are refused unless ``dequantize=True``,
which reads ``scale·(q − zero_point)`` (per channel along ``quantized_dimension``) and
notes that the numbers changed. Several unrelated networks are listed by ``networks``;
``node=`` (an operator index, or an output tensor's name) picks one. Operators outside the
network (a STRIDED_SLICE taking the last step, a Dense layer) are listed by ``notes``.
"""

from __future__ import annotations

import os
from typing import Any

from ...io.tflite_schema import FILE_IDENTIFIER
from ...model import Model
from ...spec import Spec
from .._protocol import Format, NamedArray, Suffix
from .options import WRITE_OPTIONS
from .reader import READ_OPTIONS, fixed_input, networks, notes, parameter_arrays, read

__all__ = ["FORMAT", "SUFFIX", "networks", "notes", "read", "sniff"]

SUFFIX = ".tflite"


def sniff(source: Any) -> bool:
    """A path ending ``.tflite``, or bytes whose flatbuffer file identifier is ``TFL3``."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source).lower().endswith(SUFFIX)
    if isinstance(source, (bytes, bytearray, memoryview)):
        head = bytes(memoryview(source).cast("B")[4:8]) if len(source) >= 8 else b""
        return head == FILE_IDENTIFIER
    from ...io.tflite_schema import Model as Decoded

    return isinstance(source, Decoded)


def _write(model: Model, path: Any = None, **options: Any) -> Any:
    from .writer import write

    return write(model, path=path, **options)


def param_count(model: Model, **options: Any) -> int:
    """Parameters as the file holds them: the constant tensors a read takes parameters from
    (one bias per gate; a CIFG LSTM has no input-gate tensors)."""
    return sum(array.size for _, array in parameter_arrays(_write(model, **options)))


def _framework_forward(source: Any, model: Model, x: Any) -> Any:
    from .litert import framework_forward

    return framework_forward(source, model, x)


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """The constant tensors a read of ``native`` takes parameters from, by tensor name."""
    return [NamedArray(name, array) for name, array in parameter_arrays(native)]


FORMAT = Format(
    "tflite", sniff=sniff, reader=read, writer=_write, counter=param_count,
    read_options=READ_OPTIONS, write_options=WRITE_OPTIONS,
    # The writer holds these; the reader also reads the fused RELU LSTM (non-default
    # activations), which the writer does not write.
    features=frozenset({"projection", "proj_bias", "peepholes", "layer_norm", "cell_clip",
                        "input_forget", "reset_before", "reverse"}),
    dtypes=frozenset({"float16", "float32"}),
    one_bias=frozenset({"lstm", "rnn"}), always_bias=True,
    suffixes=(Suffix(SUFFIX, "a TFLite (LiteRT) model"),),
    gate_names={"g": "c"},
    layout_notes=("TFLite keeps each gate's weights as its own tensor: input_to_{input,forget,"
                  "cell,output}_weights (H, I), recurrent_to_…_weights (H, H_out), "
                  "…_gate_bias (H,); one bias per gate.",
                  "A GRU has no TFLite operator: rnnport writes a WHILE loop whose body "
                  "subgraph computes the step from builtins, with W_x/weights (3H, I) and "
                  "R_h/weights (3H, H) in gate order r z n and both biases kept apart "
                  "(W_x/bias, R_h/bias), so the reset-after GRU is exact. TensorFlow's "
                  "converter writes tf_keras GRUs and SimpleRNNs, and every Keras 3 recurrent "
                  "layer, as loops too; rnnport reads any loop whose body computes one of the "
                  "canonical cells.",),
    networks=networks, notes=notes, explain_arrays=explain_arrays,
    framework_forward=_framework_forward, extra="tflite", modules=("flatbuffers",),
    fixed_input=fixed_input,
    drops={"cell_clip": "read it with cell_clip=None to drop the clip: "
                        "the outputs stay the same while no step's |c| reaches it (TensorFlow's "
                        "converter sets 10 for every Keras LSTM)"},
    names={"input_forget": "CIFG (no input gate)", "projection": "projection_weights",
           "peepholes": "cell_to_*_weights", "cell_clip": "cell_clip",
           "proj_bias": "projection_bias", "layer_norm": "*_layer_norm_coefficients",
           "reset_before": "a GRU WHILE loop", "reverse": "REVERSE_V2 around the op"})
