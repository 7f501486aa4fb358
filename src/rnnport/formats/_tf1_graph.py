"""TF1 recurrent graphs built with the real TensorFlow: run only in a process of its own.

Importing this module imports TensorFlow, sets ``TF_USE_LEGACY_KERAS=1`` first (TF1 cells
live in ``tf_keras``; the variable must be set before TensorFlow is imported, so a process
that already imported TensorFlow with Keras 3 cannot use it) and turns off eager
execution. ``import rnnport`` never imports it: :func:`rnnport.formats.tf1.framework_forward`
runs it as ``python -m rnnport.formats._tf1_graph JOB.json``, and ``tools/golden_tf1.py``
loads it by its path. It imports nothing from rnnport, so those cases compute only what
TensorFlow computes.

``JOB.json`` holds one object:

``checkpoint``
    The prefix to restore with ``tf.compat.v1.train.Saver`` (every variable of the graph
    must be in it, under the same name, shape and dtype).
``structure``, ``scope``
    What to build, as :func:`build_network` takes them; ``scope`` is the variable scope the
    structure's own names start under (``""``: the top level).
``cells``
    One ``{"cls": class name, "kwargs": constructor arguments}`` per layer (``activation``
    by name: ``"relu"``).
``x``, ``y``
    ``.npy`` paths: the input ``(batch, time, input)`` to read, and where to save the output
    ``(batch, time, directions · output size)``.

The contrib classes that no longer ship with TensorFlow are mirrored from their TF 1.15
sources: ``tf.contrib.rnn.LSTMBlockCell`` (running the real ``LSTMBlockCell`` kernel),
``tf.contrib.cudnn_rnn.CudnnCompatibleLSTMCell``,
``tf.contrib.cudnn_rnn.CudnnCompatibleGRUCell`` and
``tf.contrib.rnn.stack_bidirectional_dynamic_rnn``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from tf_keras.src.layers.rnn.legacy_cells import LayerRNNCell

tf.compat.v1.disable_eager_execution()
tf.get_logger().setLevel("ERROR")
warnings.filterwarnings("ignore", message=r".* is deprecated and will be removed")

__all__ = ["STRUCTURES", "CudnnCompatibleGRUCell", "CudnnCompatibleLSTMCell", "LSTMBlockCell",
           "build_network", "main", "make_cell", "one_line", "run_job",
           "stack_bidirectional_dynamic_rnn", "variable_scope"]

rnn_cell = tf.compat.v1.nn.rnn_cell
STRUCTURES = ("single", "multi", "bidirectional", "stack_bidirectional")


# -- mirrors of the tf.contrib classes (TF 1.15 sources) ----------------------------------


class LSTMBlockCell(LayerRNNCell):
    """``tf.contrib.rnn.LSTMBlockCell``: the fused ``LSTMBlockCell`` kernel, one step."""

    def __init__(self, num_units: int, forget_bias: float = 1.0, cell_clip: float | None = None,
                 use_peephole: bool = False, dtype: Any = None, reuse: Any = None,
                 name: str = "lstm_cell") -> None:
        super().__init__(_reuse=reuse, dtype=dtype, name=name)
        self._num_units = num_units
        self._forget_bias = forget_bias
        self._use_peephole = use_peephole
        self._cell_clip = cell_clip if cell_clip is not None else -1
        self._names = {"W": "kernel", "b": "bias", "wci": "w_i_diag", "wcf": "w_f_diag",
                       "wco": "w_o_diag", "scope": "lstm_cell"}

    @property
    def state_size(self) -> Any:
        return rnn_cell.LSTMStateTuple(self._num_units, self._num_units)

    @property
    def output_size(self) -> int:
        return self._num_units

    def build(self, inputs_shape: Any) -> None:
        input_size = tf.compat.dimension_value(tf.TensorShape(inputs_shape)[-1])
        if not input_size:
            raise ValueError(f"Expecting inputs_shape[1] to be set: {inputs_shape}")
        units = self._num_units
        self._kernel = self.add_weight(self._names["W"], [input_size + units, units * 4])
        self._bias = self.add_weight(self._names["b"], [units * 4],
                                     initializer=tf.compat.v1.constant_initializer(0.0))
        if self._use_peephole:
            self._w_i_diag = self.add_weight(self._names["wci"], [units])
            self._w_f_diag = self.add_weight(self._names["wcf"], [units])
            self._w_o_diag = self.add_weight(self._names["wco"], [units])
        self.built = True

    def call(self, inputs: Any, state: Any) -> Any:
        if self._use_peephole:
            wci, wcf, wco = self._w_i_diag, self._w_f_diag, self._w_o_diag
        else:
            wci = wcf = wco = tf.zeros([self._num_units], dtype=self.dtype)
        cs_prev, h_prev = state
        out = tf.raw_ops.LSTMBlockCell(
            x=inputs, cs_prev=cs_prev, h_prev=h_prev, w=self._kernel, wci=wci, wcf=wcf, wco=wco,
            b=self._bias, forget_bias=self._forget_bias, cell_clip=self._cell_clip,
            use_peephole=self._use_peephole)
        return out.h, rnn_cell.LSTMStateTuple(out.cs, out.h)


class CudnnCompatibleLSTMCell(LSTMBlockCell):
    """``tf.contrib.cudnn_rnn.CudnnCompatibleLSTMCell``."""

    def __init__(self, num_units: int, reuse: Any = None) -> None:
        super().__init__(num_units, forget_bias=0, cell_clip=None, use_peephole=False,
                         reuse=reuse, name="cudnn_compatible_lstm_cell")
        self._names.update({"scope": "cudnn_compatible_lstm_cell"})


class CudnnCompatibleGRUCell(tf.compat.v1.nn.rnn_cell.GRUCell):
    """``tf.contrib.cudnn_rnn.CudnnCompatibleGRUCell``: cuDNN's GRU (reset applied after)."""

    def __init__(self, num_units: int, reuse: Any = None, kernel_initializer: Any = None) -> None:
        super().__init__(num_units, activation=None, reuse=reuse,
                         kernel_initializer=kernel_initializer)

    def build(self, inputs_shape: Any) -> None:
        input_depth = tf.compat.dimension_value(tf.TensorShape(inputs_shape)[-1])
        if input_depth is None:
            raise ValueError(f"Expected inputs.shape[-1] to be known, saw shape: {inputs_shape}")
        units = self._num_units
        zeros = tf.compat.v1.zeros_initializer(dtype=self.dtype)
        self._gate_kernel = self.add_weight(
            "gates/kernel", shape=[input_depth + units, 2 * units],
            initializer=self._kernel_initializer)
        self._gate_bias = self.add_weight(
            "gates/bias", shape=[2 * units],
            initializer=(self._bias_initializer if self._bias_initializer is not None
                         else tf.compat.v1.constant_initializer(1.0, dtype=self.dtype)))
        self._candidate_input_kernel = self.add_weight(
            "candidate/input_projection/kernel", shape=[input_depth, units],
            initializer=self._kernel_initializer)
        self._candidate_hidden_kernel = self.add_weight(
            "candidate/hidden_projection/kernel", shape=[units, units],
            initializer=self._kernel_initializer)
        self._candidate_input_bias = self.add_weight(
            "candidate/input_projection/bias", shape=[units],
            initializer=self._bias_initializer if self._bias_initializer is not None else zeros)
        self._candidate_hidden_bias = self.add_weight(
            "candidate/hidden_projection/bias", shape=[units],
            initializer=self._bias_initializer if self._bias_initializer is not None else zeros)
        self.built = True

    def call(self, inputs: Any, state: Any) -> Any:
        gate_inputs = tf.matmul(tf.concat([inputs, state], 1), self._gate_kernel)
        gate_inputs = tf.nn.bias_add(gate_inputs, self._gate_bias)
        value = tf.sigmoid(gate_inputs)
        r, u = tf.split(value=value, num_or_size_splits=2, axis=1)
        candidate = tf.nn.bias_add(tf.matmul(inputs, self._candidate_input_kernel),
                                   self._candidate_input_bias)
        candidate += r * tf.nn.bias_add(tf.matmul(state, self._candidate_hidden_kernel),
                                        self._candidate_hidden_bias)
        candidate = self._activation(candidate)
        new_h = (1 - u) * candidate + u * state
        return new_h, new_h


def stack_bidirectional_dynamic_rnn(
    cells_fw: Sequence[Any], cells_bw: Sequence[Any], inputs: Any,
    initial_states_fw: Sequence[Any] | None = None,
    initial_states_bw: Sequence[Any] | None = None, dtype: Any = None,
    sequence_length: Any = None, parallel_iterations: int | None = None,
    time_major: bool = False, scope: Any = None, swap_memory: bool = False,
) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    """``tf.contrib.rnn.stack_bidirectional_dynamic_rnn``."""
    if not cells_fw or not cells_bw or len(cells_fw) != len(cells_bw):
        raise ValueError("cells_fw and cells_bw must be non-empty lists of the same length")
    states_fw, states_bw = [], []
    prev_layer = inputs
    with tf.compat.v1.variable_scope(scope or "stack_bidirectional_rnn"):
        for i, (cell_fw, cell_bw) in enumerate(zip(cells_fw, cells_bw, strict=True)):
            initial_state_fw = initial_states_fw[i] if initial_states_fw else None
            initial_state_bw = initial_states_bw[i] if initial_states_bw else None
            with tf.compat.v1.variable_scope(f"cell_{i}"):
                outputs, (state_fw, state_bw) = tf.compat.v1.nn.bidirectional_dynamic_rnn(
                    cell_fw, cell_bw, prev_layer, initial_state_fw=initial_state_fw,
                    initial_state_bw=initial_state_bw, sequence_length=sequence_length,
                    parallel_iterations=parallel_iterations, dtype=dtype,
                    swap_memory=swap_memory, time_major=time_major)
                prev_layer = tf.concat(outputs, 2)
            states_fw.append(state_fw)
            states_bw.append(state_bw)
    return prev_layer, tuple(states_fw), tuple(states_bw)


# -- building ------------------------------------------------------------------------------

MIRRORS = {"LSTMBlockCell": LSTMBlockCell, "CudnnCompatibleLSTMCell": CudnnCompatibleLSTMCell,
           "CudnnCompatibleGRUCell": CudnnCompatibleGRUCell}


def make_cell(cls: str, kwargs: Mapping[str, Any]) -> Any:
    """A new cell of class ``cls`` (``tf.compat.v1.nn.rnn_cell`` or a mirror); ``activation``
    and ``dtype`` may be given by name."""
    arguments = dict(kwargs)
    if "activation" in arguments:
        arguments["activation"] = getattr(tf.nn, arguments["activation"])
    if "dtype" in arguments:
        arguments["dtype"] = tf.as_dtype(arguments["dtype"])
    return (MIRRORS.get(cls) or getattr(rnn_cell, cls))(**arguments)


@contextlib.contextmanager
def variable_scope(path: str) -> Iterator[Any]:
    """Enter the variable scope ``path`` (``"a/b"``: ``b`` inside ``a``; ``""``: the top
    level) and yield it, for a builder's ``scope=``: the builder re-enters it, so the
    variables it makes are named ``path/…`` with nothing added."""
    with contextlib.ExitStack() as stack:
        for part in filter(None, path.split("/")):
            stack.enter_context(tf.compat.v1.variable_scope(part))
        yield tf.compat.v1.get_variable_scope()


def build_network(structure: str, cells: Sequence[tuple[str, Mapping[str, Any]]], x: Any, *,
                  scope: Any = None, lengths: Any = None, time_major: bool = False,
                  dtype: Any = None, initial_states: Sequence[Sequence[Any]] | None = None,
                  wrap: Callable[[int, Any], Any] | None = None) -> tuple[Any, list[list[Any]]]:
    """A TF1 network over ``x``; returns ``y`` and the final states per layer and direction.

    ``structure``: ``single`` (one ``dynamic_rnn``), ``multi`` (a ``MultiRNNCell`` in one
    ``dynamic_rnn``), ``bidirectional`` (one ``bidirectional_dynamic_rnn``, both outputs
    joined on the last axis) or ``stack_bidirectional``; ``cells``: ``(class, kwargs)`` per
    layer; ``scope``: passed to the builder (None: its default name); ``initial_states``:
    per layer and direction; ``wrap(layer, cell)`` wraps a single or multi network's cells
    (a ``DeviceWrapper``).
    """
    common = {"sequence_length": lengths, "time_major": time_major,
              "dtype": x.dtype if dtype is None else tf.as_dtype(dtype)}
    init = initial_states
    if structure in ("single", "multi"):
        made = [make_cell(cls, kwargs) for cls, kwargs in cells]
        if wrap is not None:
            made = [wrap(layer, cell) for layer, cell in enumerate(made)]
        if structure == "single":
            y, final = tf.compat.v1.nn.dynamic_rnn(made[0], x,
                                                   initial_state=init[0][0] if init else None,
                                                   scope=scope, **common)
            return y, [[final]]
        y, final = tf.compat.v1.nn.dynamic_rnn(
            rnn_cell.MultiRNNCell(made), x,
            initial_state=tuple(layer[0] for layer in init) if init else None, scope=scope,
            **common)
        return y, [[layer] for layer in final]
    if structure == "bidirectional":
        (cls, kwargs), = cells
        (y_fw, y_bw), (s_fw, s_bw) = tf.compat.v1.nn.bidirectional_dynamic_rnn(
            make_cell(cls, kwargs), make_cell(cls, kwargs), x,
            initial_state_fw=init[0][0] if init else None,
            initial_state_bw=init[0][1] if init else None, scope=scope, **common)
        return tf.concat([y_fw, y_bw], -1), [[s_fw, s_bw]]
    if structure != "stack_bidirectional":
        raise ValueError(f"structure={structure!r}; expected one of {', '.join(STRUCTURES)}")
    y, states_fw, states_bw = stack_bidirectional_dynamic_rnn(
        [make_cell(cls, kwargs) for cls, kwargs in cells],
        [make_cell(cls, kwargs) for cls, kwargs in cells], x,
        initial_states_fw=[layer[0] for layer in init] if init else None,
        initial_states_bw=[layer[1] for layer in init] if init else None, scope=scope,
        **common)
    return y, [[s_fw, s_bw] for s_fw, s_bw in zip(states_fw, states_bw, strict=True)]


# -- running a job -------------------------------------------------------------------------


def run_job(job: Mapping[str, Any]) -> None:
    """Build the job's network, restore its checkpoint, run ``x`` and save ``y``."""
    x = np.load(job["x"], allow_pickle=False)
    cells = [(cell["cls"], cell["kwargs"]) for cell in job["cells"]]
    with tf.Graph().as_default():
        with variable_scope(job["scope"]) as scope:
            y, _ = build_network(job["structure"], cells, tf.constant(x), scope=scope)
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, job["checkpoint"])
            np.save(job["y"], np.asarray(session.run(y)), allow_pickle=False)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rnnport.formats._tf1_graph JOB.json``: run the job (see the docstring)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    if len(arguments) != 1:
        print("usage: python -m rnnport.formats._tf1_graph JOB.json", file=sys.stderr)
        return 2
    try:
        run_job(json.loads(Path(arguments[0]).read_text()))
    except Exception as error:  # told to the parent in one line, the last on stderr
        print(f"{type(error).__name__}: {one_line(error)}", file=sys.stderr)
        return 1
    return 0


def one_line(error: BaseException) -> str:
    """What went wrong, without TensorFlow's preamble, stack traces and node names: ``Key
    rnn/gru_cell/candidate/bias not found in checkpoint``."""
    text = str(error).split("Original error:", 1)[-1].split("Original stack trace", 1)[0]
    kept = [line.strip() for line in text.splitlines() if line.strip() and not re.match(
        r"\s*(File |Graph execution error|Detected at node|Node: |\[\[)", line)]
    return " ".join(kept)[:500]


if __name__ == "__main__":
    sys.exit(main())
