"""Generate golden TensorFlow 2 files: object-based checkpoints, SavedModels, frozen graphs.

    .venv/bin/python tools/golden_tf2.py [--out tests/golden/tf2] [--case NAME ...] [--list]

Everything here is made by the real TensorFlow 2.21 with ``tf_keras`` (Keras 2), for the
``tf2`` and ``tfgraph`` readers to be checked against. ``TF_USE_LEGACY_KERAS=1`` is set before
TensorFlow is imported (``tf.keras`` and the TF1 cells are then ``tf_keras``'s; Keras 3
never loads). The script runs itself twice, each in a process of its own: ``--part keras``
(eager: Keras 2 models, ``tf.train.Checkpoint``, ``tf.saved_model.save``) and ``--part
graph`` (graph mode, ``tf.compat.v1``: frozen graphs), because the TF1 builders of
``src/rnnport/formats/_tf1_graph.py`` turn eager execution off when loaded. Then it writes
``<out>/MANIFEST.json``. Only the ``--part graph`` process imports ``rnnport`` (after
TensorFlow, NumPy-only: its cuDNN writer fills the opaque buffer of the ``frozen_cudnn_*``
cases); every expected output is TensorFlow's own.

Weights: every variable of a case is random (uniform, ±0.6 unless noted) and every value in
a case is distinct, biases included (never TensorFlow's zero or one initial biases), so a
swapped gate, a transposed kernel or a dropped bias cannot pass. Inputs are uniform ±1;
batch 2, time 5–6, input 3–4, hidden 2–5. Seeds: CRC32 of the case name.

Files, per case ``<name>`` (paths relative to ``<out>``)
-------------------------------------------------------
``<name>.npz`` (plain arrays, ``allow_pickle=False``):

``meta``
    0-d unicode array holding a JSON object: ``case``, ``kind`` (``tf2_checkpoint``,
    ``savedmodel`` or ``frozen_graph``), ``description``, ``versions`` (tensorflow,
    tf_keras, numpy), ``files`` (every file of the case), ``source`` (what a reader opens:
    a checkpoint prefix, a SavedModel folder or a ``.pb``), ``dtype``, ``tolerance``,
    ``time_major`` (how ``x`` and ``y`` are laid out), ``read_options`` (what the file
    cannot tell a reader: an activation, ``cell_clip``, ``forget_bias``), and per kind:

    - Keras cases: ``layers``, one per Keras layer in call order: ``name``, ``class``,
      ``inner`` (a Bidirectional's wrapped class), ``units``, ``bidirectional``,
      ``config`` (``activation``, ``recurrent_activation``, ``use_bias``,
      ``reset_after``, ``return_sequences``, ``merge_mode`` where the layer has them),
      ``checkpoint_keys`` (the variable key holding each ``get_weights()`` array, found by
      value) and ``state_keys``; ``variables`` (every key in the TensorBundle -> shape,
      ``_CHECKPOINTABLE_OBJECT_GRAPH`` included) and ``dtypes``; ``outputs`` (the npz keys
      of the model's outputs, in order); SavedModels add ``signatures`` (name -> input
      and output names).
    - Frozen graphs: ``graph`` (``tf1`` style: ``while_loop`` v1 control flow and reference
      variables, as TF 1.x froze; ``tf2`` style: control flow v2, a ``While`` op whose body
      is in ``library.function``, and resource variables), ``input_nodes`` and
      ``output_nodes`` (npz key -> node name; tensor ``<node>:0``), ``cells``, ``constants``
      (name -> shape of every Const that was a variable), ``ops`` (fused ops: node name ->
      op and attributes).

``x``
    The input as fed: ``(batch, time, input)``, or ``(time, batch, input)`` where
    ``time_major``.
``y``
    The model's (first) output as TensorFlow returned it.
``h_n/{layer}``, ``c_n/{layer}`` (Keras cases)
    Final states of the Keras RNN layer named ``{layer}``, ``(directions, batch, units)``,
    forward first (``c_n`` for LSTMs); TensorFlow's own, from the same layer with
    ``return_state=True`` and the same weights where the model does not return them.
``layer_output/{layer}`` (Keras stacks)
    The output of every layer of a stack, in the same way.
``weights/{layer}/{k}`` (Keras cases)
    ``get_weights()[k]`` of layer ``{layer}`` (forward then backward for a Bidirectional).
``h_n/{layer}/{direction}``, ``c_n/{layer}/{direction}`` (frozen TF1 cells)
    As in ``tools/golden_tf1.py``: ``h`` ``(batch, num_proj or units)``, ``c``
    ``(batch, units)``; direction 0 forward, 1 backward.
``h_n``, ``c_n``, ``lengths``, ``cudnn_params``, ``canonical/{variable}`` (cuDNN cases)
    The op's final states ``(layers · directions, batch, units)`` as ``CudnnRNN*`` returns
    them, the ``sequence_lengths`` fed, the opaque buffer (also in the graph), and the
    ``CudnnCompatible*Cell`` variables that computed ``y``.

``<name>/``: the TensorFlow files (see each case's description and ``files``).

What a reader finds in them (TensorFlow 2.21, tf_keras 2.21)
------------------------------------------------------------
* TF2 checkpoints key every variable ``<object path>/.ATTRIBUTES/VARIABLE_VALUE``; the key
  ``_CHECKPOINTABLE_OBJECT_GRAPH`` (a scalar string) holds the ``TrackableObjectGraph``
  proto. ``save_weights``: ``layer_with_weights-<k>`` counts the layers that have weights
  (a Dense too), in ``model.layers`` order, Sequential and Functional alike; RNN layers
  hold ``cell/{kernel, recurrent_kernel, bias}`` (Keras gate order and ``x·W``
  orientation), a Bidirectional ``forward_layer/cell/…`` and ``backward_layer/cell/…``,
  the CuDNN layers ``kernel``, ``recurrent_kernel``, ``bias`` with no ``cell/``. A GRU's
  bias is ``(2, 3·units)`` with ``reset_after`` and ``(3·units,)`` without. A text file
  ``checkpoint`` (``model_checkpoint_path: "ckpt"``) is written beside the bundle.
* ``tf.train.Checkpoint(model=, optimizer=)``: ``model/…`` as above, ``save_counter/…``,
  and the optimizer: the legacy Adam under ``optimizer/{iter, beta_1, beta_2, decay,
  learning_rate}`` with slots ``<variable path>/.OPTIMIZER_SLOT/optimizer/{m, v}/…``; the
  current Adam as ``optimizer/_iterations``, ``optimizer/_learning_rate`` and
  ``optimizer/_variables/<n>`` (two per trainable variable, in order from 1).
* SavedModel bundles (``variables/variables``) key each variable by the *first* path to it
  in the object graph, which is not always the layer path: ``model.save`` with traces
  (the default) gives ``variables/0``, ``variables/1``, … (the model's ``variables`` list),
  a ``tf.Module`` holding a Keras layer ``lstm/variables/<i>``; only ``save_traces=False``
  gives ``layer_with_weights-0/…``. Map a layer to its variables through the object graph
  (nodes' ``children`` and ``attributes[].checkpoint_key``). ``keras_metadata.pb`` is a
  ``SavedMetadata`` proto: per node ``node_id`` (the object graph's), ``node_path``
  (``root.layer_with_weights-0.cell``), ``identifier`` (``_tf_keras_sequential``,
  ``_tf_keras_rnn_layer``, ``_tf_keras_layer``) and ``metadata``, a JSON string holding the
  layer's ``class_name`` and ``config``. With traces ``saved_model.pb`` also holds the Keras
  LSTM/GRU functions, their ``CudnnRNNV3`` variants included, so it is large (0.6 MB here).
* Frozen graphs: each variable becomes a ``Const`` of its own name (``rnn/lstm_cell/kernel``,
  ``tensor_content`` float32), read through ``<name>/read`` (``tf1`` style, reaching the
  loop through ``Enter`` nodes) or ``<name>/Read/ReadVariableOp`` and
  ``<name>/Read/Identity`` (``tf2`` style, fed to the ``StatelessWhile`` node ``rnn/while``).
  ``LSTMCell``'s forget bias (1.0) and ``cell_clip`` are scalar Consts inside the loop, not
  attributes. Fused ops carry theirs: ``BlockLSTM`` (inputs ``seq_len_max`` int64, ``x``
  time-major, ``cs_prev``, ``h_prev``, ``w`` ``[input + units, 4·units]`` gates
  ``i c f o``, ``wci``, ``wcf``, ``wco``, ``b``; attributes ``forget_bias`` (default 1.0),
  ``cell_clip`` (default 3.0; ≤ 0 means none), ``use_peephole``; outputs ``i cs f o ci co
  h``), ``BlockLSTMV2`` (the same, gates ``i f c o``, no ``forget_bias``, ``cell_clip``
  default 0.0 = none), ``GRUBlockCell`` (``x``, ``h_prev``, ``w_ru``, ``w_c``, ``b_ru``,
  ``b_c``; outputs ``r u c h``), ``CudnnRNN`` (``input``, ``input_h``, ``input_c``,
  ``params``; ``rnn_mode``, ``input_mode``, ``direction``, ``dropout``, ``seed``,
  ``seed2``, ``is_training``) and ``CudnnRNNV3`` (also ``sequence_lengths``; ``num_proj``,
  ``time_major``). A GRU's ``input_c`` is an empty Const. The number of layers of a
  ``CudnnRNN*`` node is in no attribute: ``input_h`` is ``(layers · directions, batch,
  units)``.

What TensorFlow could not produce
---------------------------------
* ``tf.compat.v1.keras.layers.CuDNNLSTM`` / ``CuDNNGRU`` still exist in tf_keras and build on
  the CPU (variables ``kernel``, ``recurrent_kernel``, ``bias`` of ``8·units`` / ``6·units``
  straight under ``layer_with_weights-0``), so their checkpoints are here, but they run only
  on a GPU (``CudnnRNNV3`` has no CPU kernel). Their ``y`` and states come from TensorFlow's
  CPU ``LSTM`` / ``GRU(reset_after=True)`` with the weights converted by tf_keras' own
  ``hdf5_format._convert_rnn_weights`` (the CuDNN layers hand ``kernel[:, gate]`` to cuDNN
  without transposing it, so their input kernels are not a Keras LSTM's).
* ``CudnnRNNV3`` / ``CudnnRNN`` have no CPU kernel; a session over a graph holding one fails
  on creation, so those graphs are built with the opaque buffer as a ``Const`` from the
  start (named as a frozen ``opaque_kernel`` variable, with its ``/read`` Identity) and
  never run; ``y`` is what ``CudnnCompatibleLSTMCell`` / ``CudnnCompatibleGRUCell`` compute
  with the same weights, converted the way TensorFlow's ``CudnnParamsFormatConverter`` does.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

from make_golden import REPO_ROOT, Arrays, case_rng, meta_array, write_npz

OUT = REPO_ROOT / "tests" / "golden" / "tf2"
BATCH = 2
BOUND = 0.6
TOLERANCE = 1e-5
CONFIG_KEYS = ("activation", "recurrent_activation", "use_bias", "reset_after", "return_sequences",
               "return_state", "merge_mode")
RNN_CLASSES = ("LSTM", "GRU", "SimpleRNN", "CuDNNLSTM", "CuDNNGRU")


# -- case tables (no TensorFlow needed to list them) ---------------------------------------


@dataclass(frozen=True)
class KerasCase:
    """A Keras 2 model saved by ``container``: ``save_weights`` (TF format, prefix ``ckpt``),
    ``checkpoint`` (``tf.train.Checkpoint(model=, optimizer=)`` after one Adam step),
    ``keras_savedmodel`` (``model.save(dir, save_format="tf")``) or ``module_savedmodel``
    (``tf.saved_model.save`` of a ``tf.Module``)."""

    name: str
    kind: str
    description: str
    model: str  # a key of KERAS_MODELS
    input_size: int
    time: int
    container: str = "save_weights"
    read_options: dict[str, Any] = field(default_factory=dict)
    save_traces: bool = True
    optimizer: str = ""


@dataclass(frozen=True)
class GraphCase:
    """A frozen GraphDef: ``builder`` (a key of GRAPH_BUILDERS) makes the network over the
    ``input`` placeholder; ``style`` ``tf1`` or ``tf2`` (see the module docstring)."""

    name: str
    description: str
    builder: str
    input_size: int
    time: int
    units: int
    options: dict[str, Any] = field(default_factory=dict)
    time_major: bool = False
    style: str = "tf1"
    bound: float = BOUND
    read_options: dict[str, Any] = field(default_factory=dict)
    kind: str = "frozen_graph"


KERAS_CASES: tuple[KerasCase, ...] = (
    KerasCase("tf2_ckpt_lstm", "tf2_checkpoint",
              "Sequential([LSTM(5, return_sequences=True)]), model.save_weights('ckpt').",
              "lstm", 4, 6),
    KerasCase("tf2_ckpt_gru_reset_after", "tf2_checkpoint",
              "Sequential([GRU(4, return_sequences=True)]) (reset_after=True, bias (2, 12)), "
              "model.save_weights('ckpt').", "gru_reset_after", 3, 5),
    KerasCase("tf2_ckpt_gru_reset_before", "tf2_checkpoint",
              "Sequential([GRU(3, reset_after=False, return_sequences=True)]) (bias (9,)), "
              "model.save_weights('ckpt').", "gru_reset_before", 4, 6),
    KerasCase("tf2_ckpt_simplernn_tanh", "tf2_checkpoint",
              "Sequential([SimpleRNN(5, return_sequences=True)]), model.save_weights('ckpt').",
              "simplernn_tanh", 3, 6),
    KerasCase("tf2_ckpt_simplernn_relu", "tf2_checkpoint",
              "Sequential([SimpleRNN(4, activation='relu', return_sequences=True)]), "
              "model.save_weights('ckpt'); the activation is not in the checkpoint.",
              "simplernn_relu", 4, 5, read_options={"activation": "relu"}),
    KerasCase("tf2_ckpt_bi_lstm", "tf2_checkpoint",
              "Sequential([Bidirectional(LSTM(3, return_sequences=True))]) (merge_mode concat), "
              "model.save_weights('ckpt').", "bi_lstm", 4, 5),
    KerasCase("tf2_ckpt_stack_lstm_gru_dense", "tf2_checkpoint",
              "Sequential([LSTM(5, return_sequences=True), GRU(4), Dense(3)]): y is the Dense "
              "output (batch, 3) from the GRU's last step; model.save_weights('ckpt').",
              "stack_lstm_gru_dense", 3, 6),
    KerasCase("tf2_ckpt_functional_two_lstm", "tf2_checkpoint",
              "Functional model: Input(4) -> LSTM(4, return_sequences, return_state, "
              "name='encoder') -> LSTM(2, return_sequences, return_state, name='decoder'); "
              "outputs [decoder sequence, encoder h, c, decoder h, c]; "
              "model.save_weights('ckpt').", "functional_two_lstm", 4, 5),
    KerasCase("tf2_ckpt_cudnn_lstm", "tf2_checkpoint",
              "Sequential([tf.compat.v1.keras.layers.CuDNNLSTM(4, return_sequences=True)]) built "
              "on the CPU, model.save_weights('ckpt'); bias (32,) = input then recurrent biases; "
              "y from a CPU LSTM with tf_keras' _convert_rnn_weights (cuDNN layout kernels).",
              "cudnn_lstm", 3, 5),
    KerasCase("tf2_ckpt_cudnn_gru", "tf2_checkpoint",
              "Sequential([tf.compat.v1.keras.layers.CuDNNGRU(3, return_sequences=True)]) built "
              "on the CPU, model.save_weights('ckpt'); bias (18,); y from a CPU "
              "GRU(reset_after=True) with tf_keras' _convert_rnn_weights.", "cudnn_gru", 4, 6),
    KerasCase("tf2_checkpoint_optimizer", "tf2_checkpoint",
              "Sequential([LSTM(3, return_sequences=True), Dense(2)]) trained one step with "
              "tf_keras.optimizers.legacy.Adam (Keras <= 2.10's Adam: slots m and v under "
              "<variable>/.OPTIMIZER_SLOT/optimizer/{m,v}), then tf.train.Checkpoint(model=model, "
              "optimizer=optimizer).save('ckpt') -> ckpt-1; y with the saved (trained) weights.",
              "optimizer_lstm_dense", 4, 5, container="checkpoint", optimizer="legacy"),
    KerasCase("tf2_checkpoint_optimizer_adam", "tf2_checkpoint",
              "As tf2_checkpoint_optimizer with Keras >= 2.11's tf_keras.optimizers.Adam, whose "
              "m and v are optimizer/_variables/{1..} (no .OPTIMIZER_SLOT keys).",
              "optimizer_lstm_dense", 3, 6, container="checkpoint", optimizer="adam"),
    KerasCase("tf2_savedmodel_keras_lstm", "savedmodel",
              "Sequential([LSTM(4, return_sequences=True)]), model.save(dir, save_format='tf'): "
              "saved_model.pb, keras_metadata.pb, fingerprint.pb, variables/ (assets/ is empty "
              "and so not committed).", "savedmodel_lstm", 3, 6, container="keras_savedmodel"),
    KerasCase("tf2_savedmodel_keras_bi_gru", "savedmodel",
              "Sequential([Bidirectional(GRU(3, return_sequences=True))]), "
              "model.save(dir, save_format='tf', save_traces=False, signatures=a serving "
              "function of x (None, None, 4)): the layers' call traces are left out (1.7 MB with "
              "them); variable keys are layer_with_weights-0/..., where tf2_savedmodel_keras_lstm "
              "(traces kept) has variables/0/...", "savedmodel_bi_gru", 4, 5,
              container="keras_savedmodel", save_traces=False),
    KerasCase("tf2_savedmodel_module_lstm", "savedmodel",
              "tf.saved_model.save of a tf.Module holding tf_keras LSTM(4, return_sequences, "
              "return_state) as attribute 'lstm', with a @tf.function serving_default "
              "signature x (None, None, 3) -> {y, h, c}; no keras_metadata.pb.",
              "module_lstm", 3, 6, container="module_savedmodel"),
)

GRAPH_CASES: tuple[GraphCase, ...] = (
    GraphCase("tf2_frozen_lstm_peephole_proj_clip",
              "dynamic_rnn of LSTMCell(5, use_peepholes=True, num_proj=3, cell_clip=0.5) (scope "
              "rnn), frozen; weights ±2 so that the clip is hit.", "dynamic_rnn", 4, 6, 5,
              {"cell": "LSTMCell", "kwargs": {"use_peepholes": True, "num_proj": 3,
                                              "cell_clip": 0.5}},
              bound=2.0, read_options={"cell_clip": 0.5}),
    GraphCase("tf2_frozen_gru_cell", "dynamic_rnn of GRUCell(4), frozen.", "dynamic_rnn", 3, 5, 4,
              {"cell": "GRUCell", "kwargs": {}}),
    GraphCase("tf2_frozen_multi_rnn_lstm",
              "dynamic_rnn of MultiRNNCell([LSTMCell(4), LSTMCell(3)]), frozen.", "multi", 3, 5, 4,
              {"cells": [["LSTMCell", {"num_units": 4}], ["LSTMCell", {"num_units": 3}]]}),
    GraphCase("tf2_frozen_stack_bidirectional_lstm",
              "stack_bidirectional_dynamic_rnn of two layers of LSTMCell(3) forward and "
              "backward (tf.contrib.rnn's, mirrored from TF 1.15), frozen.", "stack_bidirectional",
              4, 5, 3, {"cells": [["LSTMCell", {"num_units": 3}], ["LSTMCell", {"num_units": 3}]]}),
    GraphCase("tf2_frozen_block_lstm",
              "The fused BlockLSTM op as tf.contrib.rnn.LSTMBlockFusedCell(4, forget_bias=0.7, "
              "cell_clip=0.5, use_peephole=True) builds it (variables lstm_fused_cell/kernel "
              "[7, 16] in gate order i c f o, bias, w_i_diag, w_f_diag, w_o_diag), time-major, "
              "frozen; weights ±2 so that the clip is hit.", "block_lstm", 3, 6, 4,
              {"op": "BlockLSTM", "forget_bias": 0.7, "cell_clip": 0.5, "use_peephole": True},
              time_major=True, bound=2.0),
    GraphCase("tf2_frozen_block_lstm_v2",
              "The fused BlockLSTMV2 op (gate order i f c o, no forget_bias attribute) with "
              "cell_clip=0.5 and use_peephole=True, variables block_lstm_v2/{kernel, bias, "
              "w_i_diag, w_f_diag, w_o_diag}, time-major, frozen; weights ±2.", "block_lstm", 4, 5,
              3, {"op": "BlockLSTMV2", "cell_clip": 0.5, "use_peephole": True},
              time_major=True, bound=2.0),
    GraphCase("tf2_frozen_gru_block_cell",
              "dynamic_rnn of tf.contrib.rnn.GRUBlockCellV2(4) (the fused GRUBlockCell op each "
              "step; variables rnn/gru_cell/gates/kernel, gates/bias, candidate/kernel, "
              "candidate/bias, as GRUCell names them), frozen.", "gru_block_cell", 3, 5, 4),
    GraphCase("tf2_frozen_lstm_cell_cfv2",
              "dynamic_rnn of LSTMCell(4) built with TensorFlow 2's defaults (control flow v2: "
              "one While op, its cond and body in library.function; resource variables), frozen.",
              "dynamic_rnn", 3, 5, 4, {"cell": "LSTMCell", "kwargs": {}}, style="tf2"),
    GraphCase("tf2_frozen_cudnn_lstm",
              "A CudnnRNNV3 node (rnn_mode lstm, unidirectional, linear_input, num_proj 0, "
              "time_major, is_training false) whose params are the Const "
              "cudnn_lstm/opaque_kernel (rnnport's cudnn writer, bias mode double) read through "
              "cudnn_lstm/opaque_kernel/read; inputs 'input' (time, batch, 3) and "
              "'sequence_lengths'; never run (no CPU kernel): y, h_n, c_n from "
              "CudnnCompatibleLSTMCell with the same weights.", "cudnn", 3, 6, 4,
              {"op": "CudnnRNNV3", "cell": "lstm", "bidirectional": False, "scope": "cudnn_lstm"},
              time_major=True),
    GraphCase("tf2_frozen_cudnn_gru_bidirectional",
              "A CudnnRNN (v1) node (rnn_mode gru, bidirectional, linear_input, time_major) "
              "whose params are the Const cudnn_gru/opaque_kernel (rnnport's cudnn writer); "
              "input 'input' (time, batch, 4); never run: y and h_n from bidirectional_dynamic_rnn "
              "of CudnnCompatibleGRUCell with the same weights.", "cudnn", 4, 5, 3,
              {"op": "CudnnRNN", "cell": "gru", "bidirectional": True, "scope": "cudnn_gru"},
              time_major=True),
)

ALL_CASES: tuple[KerasCase | GraphCase, ...] = KERAS_CASES + GRAPH_CASES


def part_of(case: KerasCase | GraphCase) -> str:
    return "graph" if isinstance(case, GraphCase) else "keras"


def versions() -> dict[str, str]:
    return {"tensorflow": importlib.metadata.version("tensorflow"),
            "tf_keras": importlib.metadata.version("tf_keras"), "numpy": np.__version__}


# -- shared helpers --------------------------------------------------------------------------


class Distinct:
    """Random uniform arrays whose values are all different from every value drawn before."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.seen: set[float] = set()

    def __call__(self, shape: Sequence[int], bound: float = BOUND, dtype: Any = np.float32
                 ) -> np.ndarray:
        value = self.rng.uniform(-bound, bound, tuple(shape)).astype(dtype)
        flat = value.reshape(-1)
        for i in range(flat.size):
            while float(flat[i]) in self.seen:
                flat[i] = dtype(self.rng.uniform(-bound, bound))
            self.seen.add(float(flat[i]))
        return value


def case_dir(out: Path, name: str) -> Path:
    folder = out / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def listed_files(out: Path, name: str) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in (out / name).rglob("*") if p.is_file())


def common_meta(case: KerasCase | GraphCase, out: Path, source: str) -> dict[str, Any]:
    return {"case": case.name, "kind": case.kind, "description": case.description,
            "versions": versions(), "files": listed_files(out, case.name), "source": source,
            "dtype": "float32", "tolerance": TOLERANCE, "read_options": dict(case.read_options)}


def assert_close(name: str, got: Any, want: Any, atol: float = 1e-6) -> None:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.allclose(got, want, atol=atol, rtol=0):
        raise AssertionError(f"{name}: {got.shape} vs {want.shape}, max |Δ| "
                             f"{np.max(np.abs(got - want)) if got.shape == want.shape else '-'}")


def bundle_variables(prefix: str) -> tuple[dict[str, list[int]], dict[str, str]]:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    return ({k: list(shapes[k]) for k in sorted(shapes)},
            {k: dtypes[k].name for k in sorted(dtypes)})


def keys_by_value(prefix: str, arrays: Sequence[np.ndarray], exclude: str = ".OPTIMIZER_SLOT"
                  ) -> list[str]:
    """The checkpoint key holding each array (its values are distinct, so the match is unique)."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    found = []
    for array in arrays:
        keys = [k for k, s in shapes.items() if exclude not in k and list(s) == list(array.shape)
                and k != "_CHECKPOINTABLE_OBJECT_GRAPH"
                and np.array_equal(reader.get_tensor(k), array)]
        if len(keys) != 1:
            raise AssertionError(f"{prefix}: an array {array.shape} is held by {keys}")
        found.append(keys[0])
    return found


def write_case(out: Path, name: str, arrays: Arrays) -> None:
    path = out / f"{name}.npz"
    size = write_npz(path, arrays)
    folder = sum(p.stat().st_size for p in (out / name).rglob("*") if p.is_file())
    print(f"  wrote {path.name} ({size} bytes) and {name}/ ({folder} bytes)", flush=True)


# -- Keras 2 models (eager) ------------------------------------------------------------------


def build_model(key: str, input_size: int) -> Any:
    """A fresh tf_keras model for ``key`` (the same call twice gives the same architecture)."""
    import tensorflow as tf
    import tf_keras as keras

    layers = keras.layers
    shape = (None, input_size)
    sequential: dict[str, Callable[[], list[Any]]] = {
        "lstm": lambda: [layers.LSTM(5, return_sequences=True, name="lstm")],
        "gru_reset_after": lambda: [layers.GRU(4, return_sequences=True, name="gru")],
        "gru_reset_before": lambda: [layers.GRU(3, reset_after=False, return_sequences=True,
                                                name="gru")],
        "simplernn_tanh": lambda: [layers.SimpleRNN(5, return_sequences=True, name="simple_rnn")],
        "simplernn_relu": lambda: [layers.SimpleRNN(4, activation="relu", return_sequences=True,
                                                    name="simple_rnn")],
        "bi_lstm": lambda: [layers.Bidirectional(layers.LSTM(3, return_sequences=True),
                                                 name="bidirectional")],
        "stack_lstm_gru_dense": lambda: [layers.LSTM(5, return_sequences=True, name="lstm"),
                                         layers.GRU(4, name="gru"), layers.Dense(3, name="dense")],
        "cudnn_lstm": lambda: [tf.compat.v1.keras.layers.CuDNNLSTM(4, return_sequences=True,
                                                                   name="cudnn_lstm")],
        "cudnn_gru": lambda: [tf.compat.v1.keras.layers.CuDNNGRU(3, return_sequences=True,
                                                                 name="cudnn_gru")],
        "optimizer_lstm_dense": lambda: [layers.LSTM(3, return_sequences=True, name="lstm"),
                                         layers.Dense(2, name="dense")],
        "savedmodel_lstm": lambda: [layers.LSTM(4, return_sequences=True, name="lstm")],
        "savedmodel_bi_gru": lambda: [layers.Bidirectional(layers.GRU(3, return_sequences=True),
                                                           name="bidirectional")],
    }
    if key in sequential:
        return keras.Sequential([keras.Input(shape, name="x"), *sequential[key]()], name=key)
    if key == "functional_two_lstm":
        inputs = keras.Input(shape, name="x")
        sequence, h_enc, c_enc = layers.LSTM(4, return_sequences=True, return_state=True,
                                             name="encoder")(inputs)
        y, h_dec, c_dec = layers.LSTM(2, return_sequences=True, return_state=True,
                                      name="decoder")(sequence)
        return keras.Model(inputs, [y, h_enc, c_enc, h_dec, c_dec], name=key)
    raise KeyError(key)


# npz keys of a functional model's outputs after y, in order.
FUNCTIONAL_OUTPUTS = {"functional_two_lstm": ("h_n/encoder", "c_n/encoder", "h_n/decoder",
                                              "c_n/decoder")}


def randomize_model(model: Any, draw: Distinct) -> None:
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            layer.set_weights([draw(w.shape) for w in weights])


def state_runner(layer: Any, sequence: Any) -> Any:
    """A layer computing what ``layer`` computes, with ``return_state=True``, its weights set."""
    import tf_keras as keras
    from tf_keras.src.saving.legacy.hdf5_format import _convert_rnn_weights

    name = type(layer).__name__
    if name in ("CuDNNLSTM", "CuDNNGRU"):
        # No CPU kernel: TensorFlow's CPU layer with tf_keras' own cuDNN -> Keras conversion.
        common = {"return_sequences": layer.return_sequences, "return_state": True}
        twin = (keras.layers.LSTM(layer.units, **common) if name == "CuDNNLSTM" else
                keras.layers.GRU(layer.units, reset_after=True, recurrent_activation="sigmoid",
                                 **common))
        twin(sequence)
        twin.set_weights(_convert_rnn_weights(twin, layer.get_weights()))
        return twin
    config = layer.get_config()
    if name == "Bidirectional":
        for key in ("layer", "backward_layer"):
            if key in config:
                config[key]["config"]["return_state"] = True
    else:
        config["return_state"] = True
    twin = type(layer).from_config(config)
    twin(sequence)
    twin.set_weights(layer.get_weights())
    return twin


def layer_info(layer: Any) -> dict[str, Any]:
    name = type(layer).__name__
    inner = layer.forward_layer if name == "Bidirectional" else layer
    config = {**inner.get_config(), **({"merge_mode": layer.merge_mode}
                                        if name == "Bidirectional" else {})}
    return {"name": layer.name, "class": name,
            "inner": type(inner).__name__ if name == "Bidirectional" else None,
            "units": int(inner.units), "bidirectional": name == "Bidirectional",
            "config": {k: config[k] for k in CONFIG_KEYS if k in config}}


def run_layers(model: Any, x: np.ndarray, arrays: Arrays) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """Run ``model``'s layers one by one (RNN layers through :func:`state_runner`), recording
    every layer's output, final states and weights; returns the last output and layer infos."""
    import tf_keras as keras

    infos = []
    sequence: Any = x
    layers = [la for la in model.layers if not isinstance(la, keras.layers.InputLayer)]
    for layer in layers:
        info = layer_info(layer)
        for k, weight in enumerate(layer.get_weights()):
            arrays[f"weights/{layer.name}/{k}"] = weight
        if info["class"] in RNN_CLASSES or info["class"] == "Bidirectional":
            outputs = [np.asarray(t) for t in state_runner(layer, sequence)(sequence)]
            sequence, states = outputs[0], outputs[1:]
            per_direction = 2 if "LSTM" in (info["inner"] or info["class"]) else 1
            directions = 2 if info["bidirectional"] else 1
            arrays[f"h_n/{layer.name}"] = np.stack(states[0::per_direction][:directions])
            info["state_keys"] = [f"h_n/{layer.name}"]
            if per_direction == 2:
                arrays[f"c_n/{layer.name}"] = np.stack(states[1::2][:directions])
                info["state_keys"].append(f"c_n/{layer.name}")
        else:
            sequence = np.asarray(layer(sequence))
        if len(layers) > 1:
            arrays[f"layer_output/{layer.name}"] = sequence
        infos.append(info)
    return sequence, infos


def train_one_step(model: Any, draw: Distinct, input_size: int, time: int, kind: str) -> Any:
    import tensorflow as tf
    import tf_keras as keras

    adam = keras.optimizers.legacy.Adam if kind == "legacy" else keras.optimizers.Adam
    optimizer = adam(learning_rate=0.01)
    inputs = tf.constant(draw((BATCH, time, input_size), bound=1.0))
    target = tf.constant(draw((BATCH, time, model.output_shape[-1]), bound=1.0))
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(inputs, training=True) - target))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables, strict=True))
    return optimizer


def make_lstm_module(input_size: int, draw: Distinct) -> Any:
    """A ``tf.Module`` holding a tf_keras LSTM as ``lstm``, called through a ``tf.function``
    with an input signature (the class is made here: TensorFlow is imported lazily)."""
    import tensorflow as tf
    import tf_keras as keras

    class LSTMModule(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="lstm_module")
            self.lstm = keras.layers.LSTM(4, return_sequences=True, return_state=True,
                                          name="lstm")
            self.lstm.build((None, None, input_size))
            self.lstm.set_weights([draw(w.shape) for w in self.lstm.get_weights()])

        @tf.function(input_signature=[tf.TensorSpec([None, None, input_size], tf.float32,
                                                    name="x")])
        def __call__(self, x: Any) -> dict[str, Any]:
            y, h, c = self.lstm(x)
            return {"y": y, "h": h, "c": c}

    return LSTMModule()


def signatures_of(folder: Path) -> dict[str, Any]:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(folder))
    found = {}
    for name, function in loaded.signatures.items():
        found[name] = {"inputs": sorted(function.structured_input_signature[1]),
                       "outputs": sorted(function.structured_outputs)}
    return found


def run_module_case(case: KerasCase, out: Path) -> Arrays:
    import tensorflow as tf

    draw = Distinct(case_rng(case.name))
    x = draw((BATCH, case.time, case.input_size), bound=1.0)
    module = make_lstm_module(case.input_size, draw)
    result = {k: np.asarray(v) for k, v in module(tf.constant(x)).items()}
    folder = case_dir(out, case.name) / "saved_model"
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.__call__})
    reloaded = tf.saved_model.load(str(folder)).signatures["serving_default"](x=tf.constant(x))
    for key, value in result.items():
        assert_close(f"{case.name}: reloaded {key}", reloaded[key], value, atol=0)
    weights = module.lstm.get_weights()
    prefix = str(folder / "variables" / "variables")
    variables, dtypes = bundle_variables(prefix)
    arrays: Arrays = {"x": x, "y": result["y"], "h_n/lstm": result["h"][None],
                      "c_n/lstm": result["c"][None]}
    info = layer_info(module.lstm)
    info.update(checkpoint_keys=keys_by_value(prefix, weights), state_keys=["h_n/lstm", "c_n/lstm"])
    for k, weight in enumerate(weights):
        arrays[f"weights/lstm/{k}"] = weight
    meta = common_meta(case, out, f"{case.name}/saved_model")
    meta.update(time_major=False, layers=[info], variables=variables, dtypes=dtypes,
                outputs=["y", "h_n/lstm", "c_n/lstm"], signatures=signatures_of(folder),
                signature_outputs={"y": "y", "h": "h_n/lstm (without its directions axis)",
                                   "c": "c_n/lstm (without its directions axis)"})
    arrays["meta"] = meta_array(meta)
    return arrays


def run_keras_case(case: KerasCase, out: Path) -> Arrays:
    import tensorflow as tf
    import tf_keras as keras

    if case.container == "module_savedmodel":
        return run_module_case(case, out)
    draw = Distinct(case_rng(case.name))
    x = draw((BATCH, case.time, case.input_size), bound=1.0)
    model = build_model(case.model, case.input_size)
    randomize_model(model, draw)
    optimizer = None
    if case.container == "checkpoint":
        optimizer = train_one_step(model, draw, case.input_size, case.time, case.optimizer)
    arrays: Arrays = {"x": x}
    y, infos = run_layers(model, x, arrays)
    cudnn = any(info["class"].startswith("CuDNN") for info in infos)
    outputs = ["y"]
    if cudnn:
        arrays["y"] = y
    else:
        model_outputs = model(x)
        if isinstance(model_outputs, (list, tuple)):
            # the model's own states, checked against what the state runners gave
            arrays["y"] = np.asarray(model_outputs[0])
            for key, value in zip(FUNCTIONAL_OUTPUTS[case.model], model_outputs[1:], strict=True):
                assert_close(f"{case.name}: {key}", np.asarray(value)[None], arrays[key])
                outputs.append(key)
        else:
            arrays["y"] = np.asarray(model_outputs)
        assert_close(f"{case.name}: layer by layer", y, arrays["y"])
    every = np.concatenate([v.ravel() for k, v in arrays.items() if k.startswith("weights/")])
    if np.unique(every).size != every.size:
        raise AssertionError(f"{case.name}: weights are not all distinct")
    folder = case_dir(out, case.name)
    if case.container == "save_weights":
        prefix = str(folder / "ckpt")
        model.save_weights(prefix)
        source, key_prefix = f"{case.name}/ckpt", prefix
        check = build_model(case.model, case.input_size)
        check.load_weights(prefix).assert_existing_objects_matched()
    elif case.container == "checkpoint":
        saved = tf.train.Checkpoint(model=model, optimizer=optimizer).save(str(folder / "ckpt"))
        source, key_prefix = f"{case.name}/{Path(saved).name}", saved
        check = build_model(case.model, case.input_size)
        tf.train.Checkpoint(model=check).read(saved).expect_partial()
    else:
        signature = None if case.save_traces else tf.function(model.__call__).get_concrete_function(
            tf.TensorSpec([None, None, case.input_size], tf.float32, name="x"))
        model.save(str(folder / "saved_model"), save_format="tf", save_traces=case.save_traces,
                   signatures=signature)
        source = f"{case.name}/saved_model"
        key_prefix = str(folder / "saved_model" / "variables" / "variables")
        check = keras.models.load_model(str(folder / "saved_model"))
    for layer, reloaded in zip(model.layers, check.layers, strict=True):
        for a, b in zip(layer.get_weights(), reloaded.get_weights(), strict=True):
            assert_close(f"{case.name}: reloaded {layer.name}", b, a, atol=0)
    if not cudnn:
        reloaded_y = check(x)
        reloaded_y = reloaded_y[0] if isinstance(reloaded_y, (list, tuple)) else reloaded_y
        assert_close(f"{case.name}: reloaded y", reloaded_y, arrays["y"], atol=0)
    by_name = {layer.name: layer for layer in model.layers}
    for info in infos:
        info["checkpoint_keys"] = keys_by_value(key_prefix, by_name[info["name"]].get_weights())
    variables, dtypes = bundle_variables(key_prefix)
    meta = common_meta(case, out, source)
    meta.update(time_major=False, layers=infos, variables=variables, dtypes=dtypes,
                outputs=outputs)
    if cudnn:
        meta["computed_by"] = ("tf_keras CPU LSTM/GRU(reset_after=True) with weights from "
                               "tf_keras.src.saving.legacy.hdf5_format._convert_rnn_weights")
    if case.container == "keras_savedmodel":
        meta["signatures"] = signatures_of(folder / "saved_model")
    if case.container == "checkpoint":
        meta["optimizer"] = {"class": f"{type(optimizer).__module__}.{type(optimizer).__name__}",
                             "learning_rate": 0.01, "steps": 1}
    arrays["meta"] = meta_array(meta)
    return arrays


# -- frozen graphs (graph mode) --------------------------------------------------------------


def load_tf1_graph_module() -> Any:
    """rnnport's TF1 graph builders (pure TensorFlow), loaded by path as tools/golden_tf1.py
    does; loading it turns eager execution off."""
    path = REPO_ROOT / "src" / "rnnport" / "formats" / "_tf1_graph.py"
    spec = importlib.util.spec_from_file_location("_tf1_graph", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gru_block_cell_class() -> Any:
    """``tf.contrib.rnn.GRUBlockCellV2`` from its TF 1.15 source: the fused ``GRUBlockCell``
    op per step, variables named as ``GRUCell`` names them."""
    import tensorflow as tf
    from tf_keras.src.layers.rnn.legacy_cells import LayerRNNCell

    class GRUBlockCellV2(LayerRNNCell):
        def __init__(self, num_units: int, name: str = "gru_cell") -> None:
            super().__init__(name=name)
            self._cell_size = num_units

        @property
        def state_size(self) -> int:
            return self._cell_size

        @property
        def output_size(self) -> int:
            return self._cell_size

        def build(self, input_shape: Any) -> None:
            input_size = tf.compat.dimension_value(tf.TensorShape(input_shape)[-1])
            size = self._cell_size
            self._gate_kernel = self.add_weight("gates/kernel", [input_size + size, size * 2])
            self._gate_bias = self.add_weight(
                "gates/bias", [size * 2], initializer=tf.compat.v1.constant_initializer(1.0))
            self._candidate_kernel = self.add_weight("candidate/kernel", [input_size + size, size])
            self._candidate_bias = self.add_weight(
                "candidate/bias", [size], initializer=tf.compat.v1.constant_initializer(0.0))
            self.built = True

        def call(self, inputs: Any, h_prev: Any) -> Any:
            _, _, _, new_h = tf.raw_ops.GRUBlockCell(
                x=inputs, h_prev=h_prev, w_ru=self._gate_kernel, w_c=self._candidate_kernel,
                b_ru=self._gate_bias, b_c=self._candidate_bias)
            return new_h, new_h

    return GRUBlockCellV2


@dataclass
class Built:
    """A built graph network: output tensors by npz key, and what to record."""

    outputs: dict[str, Any]
    cells: list[dict[str, Any]]
    fused: list[Any] = field(default_factory=list)


def state_tensors(state: Any, layer: int, direction: int) -> dict[str, Any]:
    import tensorflow as tf

    if isinstance(state, tf.compat.v1.nn.rnn_cell.LSTMStateTuple):
        return {f"h_n/{layer}/{direction}": state.h, f"c_n/{layer}/{direction}": state.c}
    return {f"h_n/{layer}/{direction}": state}


def build_graph_network(case: GraphCase, x: Any, tf1_graph: Any) -> Built:
    import tensorflow as tf

    rnn_cell = tf.compat.v1.nn.rnn_cell
    options = case.options
    if case.builder == "dynamic_rnn":
        kwargs = {"num_units": case.units, **options["kwargs"]}
        cell = getattr(rnn_cell, options["cell"])(**kwargs)
        y, state = tf.compat.v1.nn.dynamic_rnn(cell, x, dtype=tf.float32)
        return Built({"y": y, **state_tensors(state, 0, 0)},
                     [{"class": options["cell"], "kwargs": kwargs}])
    if case.builder == "gru_block_cell":
        y, state = tf.compat.v1.nn.dynamic_rnn(gru_block_cell_class()(case.units), x,
                                               dtype=tf.float32)
        return Built({"y": y, **state_tensors(state, 0, 0)},
                     [{"class": "GRUBlockCellV2", "kwargs": {"num_units": case.units}}],
                     fused=["GRUBlockCell"])
    if case.builder == "multi":
        cells = [getattr(rnn_cell, cls)(**kwargs) for cls, kwargs in options["cells"]]
        y, states = tf.compat.v1.nn.dynamic_rnn(rnn_cell.MultiRNNCell(cells), x, dtype=tf.float32)
        tensors = {"y": y}
        for layer, state in enumerate(states):
            tensors.update(state_tensors(state, layer, 0))
        return Built(tensors, [{"class": cls, "kwargs": kw} for cls, kw in options["cells"]])
    if case.builder == "stack_bidirectional":
        def make() -> list[Any]:
            return [getattr(rnn_cell, cls)(**kwargs) for cls, kwargs in options["cells"]]

        y, states_fw, states_bw = tf1_graph.stack_bidirectional_dynamic_rnn(
            make(), make(), x, dtype=tf.float32)
        tensors = {"y": y}
        for layer, (fw, bw) in enumerate(zip(states_fw, states_bw, strict=True)):
            tensors.update(state_tensors(fw, layer, 0))
            tensors.update(state_tensors(bw, layer, 1))
        return Built(tensors, [{"class": cls, "kwargs": kw} for cls, kw in options["cells"]])
    if case.builder == "block_lstm":
        return build_block_lstm(case, x)
    raise KeyError(case.builder)


def build_block_lstm(case: GraphCase, x: Any) -> Built:
    """``BlockLSTM`` as ``tf.contrib.rnn.LSTMBlockFusedCell`` calls it (TF 1.15), or
    ``BlockLSTMV2`` the same way; ``x`` is time-major."""
    import tensorflow as tf

    options, units = case.options, case.units
    scope = "lstm_fused_cell" if options["op"] == "BlockLSTM" else "block_lstm_v2"
    input_size = case.input_size
    with tf.compat.v1.variable_scope(scope):
        kernel = tf.compat.v1.get_variable("kernel", [input_size + units, units * 4])
        bias = tf.compat.v1.get_variable("bias", [units * 4])
        diagonals = [tf.compat.v1.get_variable(f"w_{g}_diag", [units]) for g in "ifo"]
        time_len = tf.shape(x)[0]
        batch = tf.shape(x)[1]
        zeros = tf.zeros(tf.stack([batch, units]), dtype=tf.float32)
        attributes = {"cell_clip": options["cell_clip"], "use_peephole": options["use_peephole"]}
        if options["op"] == "BlockLSTM":
            attributes["forget_bias"] = options["forget_bias"]
        op = getattr(tf.raw_ops, options["op"])
        result = op(seq_len_max=tf.cast(time_len, tf.int64), x=x, cs_prev=zeros, h_prev=zeros,
                    w=kernel, wci=diagonals[0], wcf=diagonals[1], wco=diagonals[2], b=bias,
                    **attributes)
    return Built({"y": result.h, "h_n/0/0": result.h[-1], "c_n/0/0": result.cs[-1]},
                 [{"class": f"{options['op']} (raw op)", "kwargs": {"num_units": units,
                                                                    **attributes}}],
                 fused=[options["op"]])


def randomize_graph(sess: Any, draw: Distinct, bound: float) -> None:
    import tensorflow as tf

    for var in sorted(tf.compat.v1.global_variables(), key=lambda v: v.op.name):
        var.load(draw(var.shape.as_list(), bound=bound), sess)


def set_graph_style(style: str) -> None:
    import tensorflow as tf

    if style == "tf1":
        tf.compat.v1.disable_control_flow_v2()
        tf.compat.v1.disable_resource_variables()
    else:
        tf.compat.v1.enable_control_flow_v2()
        tf.compat.v1.enable_resource_variables()


def node_name(key: str) -> str:
    return "output" if key == "y" else key.replace("/", "_")


def attribute_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "s":
        return value.s.decode()
    if kind == "f":
        return float(str(np.float32(value.f)))  # 0.7, not 0.699999988
    if kind in ("i", "b"):
        return getattr(value, kind)
    if kind == "type":
        import tensorflow as tf

        return tf.as_dtype(value.type).name
    return str(getattr(value, kind)) if kind else None


def graph_facts(graph_def: Any, fused: Iterable[str]) -> dict[str, Any]:
    """Weight constants (name -> shape) and the fused ops with their attributes."""
    from tensorflow.python.framework import tensor_util

    fused = set(fused)
    constants, ops = {}, {}
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    for node in nodes:
        if node.op == "Const" and node.attr["value"].tensor.tensor_content:
            value = tensor_util.MakeNdarray(node.attr["value"].tensor)
            if value.dtype == np.float32 and value.size > 1 and value.ndim >= 1:
                constants[node.name] = list(value.shape)
        if node.op in fused:
            ops[node.name] = {"op": node.op, "inputs": list(node.input),
                              "attributes": {k: attribute_value(v) for k, v in
                                             sorted(node.attr.items())}}
        if node.op in ("VariableV2", "VarHandleOp", "ReadVariableOp", "Assign", "AssignVariableOp"):
            raise AssertionError(f"frozen graph still holds {node.op} {node.name}")
    return {"constants": dict(sorted(constants.items())), "ops": ops}


def write_graph(out: Path, case: GraphCase, graph_def: Any) -> str:
    folder = case_dir(out, case.name)
    (folder / "frozen_graph.pb").write_bytes(graph_def.SerializeToString(deterministic=True))
    return f"{case.name}/frozen_graph.pb"


def rerun_frozen(graph_def: Any, feeds: Mapping[str, np.ndarray], nodes: Mapping[str, str]
                 ) -> dict[str, np.ndarray]:
    import tensorflow as tf

    with tf.Graph().as_default() as graph:
        tf.compat.v1.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as sess:
            return sess.run({k: f"{n}:0" for k, n in nodes.items()},
                            {f"{n}:0": v for n, v in feeds.items()})


def run_graph_case(case: GraphCase, out: Path, tf1_graph: Any) -> Arrays:
    import tensorflow as tf

    if case.builder == "cudnn":
        return run_cudnn_case(case, out, tf1_graph)
    set_graph_style(case.style)
    draw = Distinct(case_rng(case.name))
    shape = (case.time, BATCH, case.input_size) if case.time_major else \
        (BATCH, case.time, case.input_size)
    x = draw(shape, bound=1.0)
    with tf.Graph().as_default() as graph:
        placeholder = tf.compat.v1.placeholder(tf.float32, [None, None, case.input_size],
                                               name="input")
        built = build_graph_network(case, placeholder, tf1_graph)
        nodes = {key: node_name(key) for key in built.outputs}
        for key, tensor in built.outputs.items():
            tf.identity(tensor, name=nodes[key])
        variables = {v.op.name: v.shape.as_list() for v in tf.compat.v1.global_variables()}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            randomize_graph(sess, draw, case.bound)
            values = sess.run(built.outputs, {placeholder: x})
            graph_def = tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), list(nodes.values()))
    source = write_graph(out, case, graph_def)
    again = rerun_frozen(graph_def, {"input": x}, nodes)
    for key in values:
        assert_close(f"{case.name}: frozen {key}", again[key], values[key], atol=0)
    facts = graph_facts(graph_def, built.fused)
    if set(facts["constants"]) < set(variables):
        raise AssertionError(f"{case.name}: variables {sorted(variables)} not all frozen: "
                             f"{sorted(facts['constants'])}")
    clip = case.options.get("cell_clip", case.options.get("kwargs", {}).get("cell_clip"))
    if clip is not None:
        c = np.abs(values["c_n/0/0"])
        assert c.max() <= clip + 1e-6 and np.isclose(c, clip).any(), f"{case.name}: clip not hit"
    arrays: Arrays = {"x": x, **{k: np.asarray(v) for k, v in values.items()}}
    meta = common_meta(case, out, source)
    meta.update(time_major=case.time_major, graph=case.style, cells=built.cells,
                input_nodes={"x": "input"}, output_nodes=nodes, variables=variables,
                constants={k: v for k, v in facts["constants"].items() if k in variables},
                ops=facts["ops"], other_float_constants=sorted(set(facts["constants"]) -
                                                               set(variables)))
    arrays["meta"] = meta_array(meta)
    return arrays


# -- cuDNN opaque buffers ------------------------------------------------------------------

# cuDNN's gate order (rnnport's canonical one) and TensorFlow's canonical cells' orders, as
# TensorFlow's CudnnParamsFormatConverterLSTM / ...GRU convert between them.
CUDNN_GATES = {"lstm": "ifgo", "gru": "rzn"}


def canonical_params(spec: Any, draw: Distinct) -> list[list[dict[str, np.ndarray]]]:
    return [[{name: draw(shape) for name, shape in spec.param_shapes(layer).items()}
             for _ in range(spec.num_directions)] for layer in range(spec.num_layers)]


def split_buffer(buffer: np.ndarray, cell: str, input_size: int, units: int, directions: int
                 ) -> list[dict[str, np.ndarray]]:
    """One layer's buffer cut by cuDNN's documented layout, independently of rnnport's reader:
    every direction's matrices (W_g (H, I) per gate, then R_g (H, H)), then every direction's
    biases (bW_g, then bR_g)."""
    gates = len(CUDNN_GATES[cell])
    offset, found = 0, [{} for _ in range(directions)]

    def take(shape: tuple[int, ...]) -> np.ndarray:
        nonlocal offset
        size = int(np.prod(shape))
        piece = buffer[offset:offset + size].reshape(shape)
        offset += size
        return piece

    for d in range(directions):
        found[d]["weight_ih"] = np.concatenate([take((units, input_size)) for _ in range(gates)])
        found[d]["weight_hh"] = np.concatenate([take((units, units)) for _ in range(gates)])
    for d in range(directions):
        found[d]["bias_ih"] = np.concatenate([take((units,)) for _ in range(gates)])
        found[d]["bias_hh"] = np.concatenate([take((units,)) for _ in range(gates)])
    if offset != buffer.size:
        raise AssertionError(f"buffer of {buffer.size} values, layout covers {offset}")
    return found


def tf_canonical_weights(cell: str, params: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """cuDNN-order weights as ``CudnnCompatibleLSTMCell`` / ``CudnnCompatibleGRUCell`` hold
    them (TensorFlow's ``CudnnParamsFormatConverter``: kernels ``[input + units, ...]`` for
    ``x·W``; LSTM gates reordered ``i f g o -> i g f o`` and both biases summed; GRU gates
    ``r z`` in ``gates/``, the candidate's input and hidden parts apart)."""
    blocks = {name: np.split(params[name], len(CUDNN_GATES[cell])) for name in params}
    if cell == "lstm":
        order = [CUDNN_GATES["lstm"].index(g) for g in "igfo"]
        kernel = np.concatenate([np.concatenate([blocks["weight_ih"][g], blocks["weight_hh"][g]],
                                                axis=1) for g in order]).T
        bias = np.concatenate([blocks["bias_ih"][g] + blocks["bias_hh"][g] for g in order])
        return {"kernel": kernel, "bias": bias}
    r, z, n = (CUDNN_GATES["gru"].index(g) for g in "rzn")
    gates = np.concatenate([np.concatenate([blocks["weight_ih"][g], blocks["weight_hh"][g]], axis=1)
                            for g in (r, z)]).T
    return {"gates/kernel": gates,
            "gates/bias": np.concatenate([blocks["bias_ih"][g] + blocks["bias_hh"][g]
                                          for g in (r, z)]),
            "candidate/input_projection/kernel": blocks["weight_ih"][n].T,
            "candidate/hidden_projection/kernel": blocks["weight_hh"][n].T,
            "candidate/input_projection/bias": blocks["bias_ih"][n],
            "candidate/hidden_projection/bias": blocks["bias_hh"][n]}


def run_canonical(case: GraphCase, x: np.ndarray, weights: list[dict[str, np.ndarray]],
                  tf1_graph: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """TensorFlow's CPU cells for the cuDNN network: y (time-major), h_n and c_n as
    ``CudnnRNN*`` returns them, and the variables by name."""
    import tensorflow as tf

    cell = case.options["cell"]
    make = tf1_graph.CudnnCompatibleLSTMCell if cell == "lstm" else tf1_graph.CudnnCompatibleGRUCell
    with tf.Graph().as_default():
        inputs = tf.constant(x)
        if case.options["bidirectional"]:
            (y_fw, y_bw), states = tf.compat.v1.nn.bidirectional_dynamic_rnn(
                make(case.units), make(case.units), inputs, dtype=tf.float32, time_major=True)
            y = tf.concat([y_fw, y_bw], -1)
        else:
            y, state = tf.compat.v1.nn.dynamic_rnn(make(case.units), inputs, dtype=tf.float32,
                                                   time_major=True)
            states = (state,)
        if cell == "lstm":
            fetch = {"y": y, "h_n": tf.stack([s.h for s in states]),
                     "c_n": tf.stack([s.c for s in states])}
        else:
            fetch = {"y": y, "h_n": tf.stack(list(states))}
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            variables = {}
            for var in tf.compat.v1.global_variables():
                name = var.op.name
                direction = 1 if "/bw/" in name else 0
                value = weights[direction][name.split("_cell/", 1)[1]]
                var.load(value, sess)
                variables[name] = value
            values = sess.run(fetch)
    return {k: np.asarray(v) for k, v in values.items()}, variables


def run_cudnn_case(case: GraphCase, out: Path, tf1_graph: Any) -> Arrays:
    import tensorflow as tf

    import rnnport

    set_graph_style("tf1")
    options = case.options
    cell, bidirectional, scope = options["cell"], options["bidirectional"], options["scope"]
    directions = 2 if bidirectional else 1
    draw = Distinct(case_rng(case.name))
    spec = rnnport.Spec(cell, case.input_size, case.units, bidirectional=bidirectional)
    params = canonical_params(spec, draw)
    buffer = np.array(rnnport.write(rnnport.RNN(spec, params), "cudnn"), dtype=np.float32)
    for d, found in enumerate(split_buffer(buffer, cell, case.input_size, case.units, directions)):
        for name, value in found.items():
            assert_close(f"{case.name}: buffer {name}", value, params[0][d][name], atol=0)
    x = draw((case.time, BATCH, case.input_size), bound=1.0)
    weights = [tf_canonical_weights(cell, params[0][d]) for d in range(directions)]
    expected, variables = run_canonical(case, x, weights, tf1_graph)
    lengths = np.full((BATCH,), case.time, dtype=np.int32)
    with tf.Graph().as_default() as graph:
        inputs = tf.compat.v1.placeholder(tf.float32, [None, None, case.input_size], name="input")
        sequence_lengths = tf.compat.v1.placeholder(tf.int32, [None], name="sequence_lengths") \
            if options["op"] == "CudnnRNNV3" else None
        with tf.name_scope(scope):
            opaque = tf.constant(buffer, name="opaque_kernel")
            read = tf.identity(opaque, name="opaque_kernel/read")
            batch = tf.shape(inputs)[1]
            h0 = tf.zeros(tf.stack([directions, batch, case.units]), dtype=tf.float32)
            attributes = {"rnn_mode": cell, "input_mode": "linear_input",
                          "direction": "bidirectional" if bidirectional else "unidirectional",
                          "dropout": 0.0, "seed": 0, "seed2": 0, "is_training": False}
            c0 = h0 if cell == "lstm" else tf.constant([], dtype=tf.float32)
            feeds = {"input": x}
            if sequence_lengths is not None:
                result = tf.raw_ops.CudnnRNNV3(
                    input=inputs, input_h=h0, input_c=c0, params=read,
                    sequence_lengths=sequence_lengths, num_proj=0, time_major=True, **attributes)
                feeds["sequence_lengths"] = lengths
            else:
                result = tf.raw_ops.CudnnRNN(input=inputs, input_h=h0, input_c=c0, params=read,
                                             **attributes)
        nodes = {"y": "output", "h_n": "h_n"}
        tf.identity(result.output, name="output")
        tf.identity(result.output_h, name="h_n")
        if cell == "lstm":
            tf.identity(result.output_c, name="c_n")
            nodes["c_n"] = "c_n"
        graph_def = graph.as_graph_def()
    source = write_graph(out, case, graph_def)
    facts = graph_facts(graph_def, [options["op"]])
    with tf.Graph().as_default():  # what was written imports back, the buffer intact
        tf.compat.v1.import_graph_def(graph_def, name="")
        constant = tf.compat.v1.get_default_graph().get_operation_by_name(f"{scope}/opaque_kernel")
        from tensorflow.python.framework import tensor_util

        assert np.array_equal(tensor_util.MakeNdarray(constant.get_attr("value")), buffer)
    arrays: Arrays = {"x": x, **expected, "cudnn_params": buffer}
    if "sequence_lengths" in feeds:
        arrays["lengths"] = lengths
    for name, value in variables.items():
        arrays[f"canonical/{name}"] = value
    meta = common_meta(case, out, source)
    meta.update(
        time_major=True, graph="tf1",
        input_nodes={"x": "input", **({"lengths": "sequence_lengths"} if "sequence_lengths"
                                      in feeds else {})},
        output_nodes=nodes, constants={f"{scope}/opaque_kernel": [int(buffer.size)]},
        ops=facts["ops"],
        cudnn={"cell": cell, "input_size": case.input_size, "hidden_size": case.units,
               "num_layers": 1, "bidirectional": bidirectional, "bias_mode": "double",
               "params_size": int(buffer.size)},
        computed_by=("CudnnCompatible" + ("LSTMCell" if cell == "lstm" else "GRUCell") +
                     (" in bidirectional_dynamic_rnn" if bidirectional else " in dynamic_rnn") +
                     ", time_major, variables canonical/*"),
        cells=[{"class": options["op"], "kwargs": {"num_units": case.units, **attributes}}])
    arrays["meta"] = meta_array(meta)
    return arrays


# -- driver ----------------------------------------------------------------------------------


def run_part(part: str, out: Path, wanted: set[str]) -> None:
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    warnings.filterwarnings("ignore")
    tf.keras.utils.set_random_seed(0)
    if part == "keras":
        for case in KERAS_CASES:
            if case.name in wanted:
                print(f"{case.name}:", flush=True)
                write_case(out, case.name, run_keras_case(case, out))
        return
    tf1_graph = load_tf1_graph_module()
    for graph_case in GRAPH_CASES:
        if graph_case.name in wanted:
            print(f"{graph_case.name}:", flush=True)
            write_case(out, graph_case.name, run_graph_case(graph_case, out, tf1_graph))


def write_manifest(out: Path) -> None:
    """List every case whose npz exists (all of them after a full run)."""
    cases = []
    for case in ALL_CASES:
        path = out / f"{case.name}.npz"
        if not path.exists():
            raise FileNotFoundError(f"{path}: not generated; run without --case first")
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
        cases.append({"name": case.name, "kind": case.kind, "npz": path.name,
                      "files": meta["files"], "source": meta["source"],
                      "description": case.description, "versions": meta["versions"]})
    manifest = {"generator": "tools/golden_tf2.py", "versions": versions(), "cases": cases}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"wrote {out / 'MANIFEST.json'} ({len(cases)} cases; {total} bytes in {out})")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"output folder (default: {OUT})")
    parser.add_argument("--case", action="append", choices=[c.name for c in ALL_CASES],
                        help="only this case (repeatable; default: all)")
    parser.add_argument("--list", action="store_true", help="only print the case names")
    parser.add_argument("--part", choices=("keras", "graph"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(c.name for c in ALL_CASES))
        return 0
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(args.case or [c.name for c in ALL_CASES])
    if args.part:
        run_part(args.part, out, wanted)
        return 0
    for part in ("keras", "graph"):
        names = [c.name for c in ALL_CASES if part_of(c) == part and c.name in wanted]
        if names:
            command = [sys.executable, str(Path(__file__).resolve()), "--part", part, "--out",
                       str(out)] + [item for name in names for item in ("--case", name)]
            subprocess.run(command, check=True)
    write_manifest(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
