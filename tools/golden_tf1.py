"""Generate golden TF1 recurrent-cell test cases with the real TensorFlow in graph mode.

Run by ``tools/make_golden.py`` in a process of its own (TF1 cells need
``tf_keras`` and ``TF_USE_LEGACY_KERAS=1`` set before TensorFlow is imported,
which must not leak into the Keras 3 process); it can also be run alone::

    python tools/golden_tf1.py --out tests/golden [--case NAME ...] [--list]

The last line it prints to stdout is the JSON list of the case names.  The
script never imports ``rnnport``; it only records what TensorFlow computes.
Every case is built in its own ``tf.Graph`` and ``tf.compat.v1.Session``, its
variables are set to random values (uniform, all distinct) and saved with
``tf.compat.v1.train.Saver`` as a TensorBundle checkpoint
``<out>/tf1/<case>/model.ckpt`` (``.index`` and ``.data-*-of-*``).

The networks are built by ``src/rnnport/formats/_tf1_graph.py``, loaded by its
path (it is TensorFlow code that imports nothing from rnnport), which also mirrors
the contrib classes that no longer ship with TensorFlow from their TF 1.15
sources: ``tf.contrib.rnn.LSTMBlockCell`` (running the real ``LSTMBlockCell``
kernel), ``tf.contrib.cudnn_rnn.CudnnCompatibleLSTMCell``,
``tf.contrib.cudnn_rnn.CudnnCompatibleGRUCell`` and
``tf.contrib.rnn.stack_bidirectional_dynamic_rnn``.

Keys of every network case's ``<out>/<case>.npz`` (plain arrays, loadable with
``allow_pickle=False``):

``meta``
    0-d unicode array holding a JSON object with ``case``, ``framework``
    (``"tf1"``), ``framework_version``, ``description``, ``checkpoint`` (the
    checkpoint prefix relative to ``<out>``), ``read_options`` (what a reader
    that only sees the checkpoint cannot infer: ``forget_bias`` when it is not
    the cell's default, ``cell_clip``, ``{"activation": "relu"}``, ``scope``
    when the checkpoint holds several networks), ``cells`` (per layer: TF
    ``class``, its original ``path`` and constructor ``kwargs``),
    ``structure`` (``"single"``: one ``dynamic_rnn``; ``"multi"``: a
    ``MultiRNNCell`` in one ``dynamic_rnn``; ``"bidirectional"``: one
    ``bidirectional_dynamic_rnn``; ``"stack_bidirectional"``:
    ``stack_bidirectional_dynamic_rnn``), ``num_layers``, ``bidirectional``,
    ``time_major``, ``dtype``, ``compare`` (``"all"``), ``tolerance`` and
    ``variables`` (name -> shape of every variable in the checkpoint).
``x``
    The input as fed: ``(time, batch, input)`` when ``time_major`` else
    ``(batch, time, input)``.
``lengths``
    Optional ``(batch,)`` int64 ``sequence_length``.
``y``
    The output as TensorFlow returned it (same major-ness as ``x``; a single
    ``bidirectional_dynamic_rnn`` has forward and backward concatenated on the
    last axis).  Steps past ``lengths`` are zero, as TensorFlow writes them.
``h0/{layer}/{direction}``, ``c0/{layer}/{direction}``
    Optional initial states fed (direction 0 forward, 1 backward).
``h_n/{layer}/{direction}``, ``c_n/{layer}/{direction}``
    Final states: ``h`` ``(batch, num_proj or units)`` and, for LSTM cells,
    ``c`` ``(batch, units)`` (TF's ``LSTMStateTuple(c, h)``).

The ``"tensors"`` case (``tf1_dtypes``) is no network: its npz holds ``meta``
(``kind: "tensors"``, ``checkpoint``, ``dtypes``: name -> TF dtype name,
``variables``, ``strings``: name -> list of str for string variables) and
``tensor/{name}`` for every non-string variable as NumPy has it (bfloat16
converted to float32).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
os.environ["CUDA_VISIBLE_DEVICES"] = ""

import tensorflow as tf
from make_golden import (
    BATCH,
    REPO_ROOT,
    Arrays,
    case_rng,
    make_lengths,
    meta_array,
    tolerance,
    uniform,
    write_npz,
)


def _load_graph_module() -> Any:
    """rnnport's TF1 graph builders (pure TensorFlow, importing nothing from rnnport), loaded
    by their path so that this script never imports the package it makes cases for."""
    path = Path(__file__).resolve().parent.parent / "src" / "rnnport" / "formats" / "_tf1_graph.py"
    spec = importlib.util.spec_from_file_location("_tf1_graph", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


graph = _load_graph_module()
tf.compat.v1.disable_eager_execution()
tf.get_logger().setLevel("ERROR")
warnings.filterwarnings("ignore", message=r".* is deprecated and will be removed")

rnn_cell = tf.compat.v1.nn.rnn_cell
CKPT_DIR = "tf1"
LSTM_CLASSES = ("LSTMCell", "BasicLSTMCell", "LSTMBlockCell", "CudnnCompatibleLSTMCell")
DEFAULT_FORGET_BIAS = {"LSTMCell": 1.0, "BasicLSTMCell": 1.0, "LSTMBlockCell": 1.0,
                       "CudnnCompatibleLSTMCell": 0.0}
CELL_PATHS = {
    "LSTMCell": "tf.compat.v1.nn.rnn_cell.LSTMCell",
    "BasicLSTMCell": "tf.compat.v1.nn.rnn_cell.BasicLSTMCell",
    "GRUCell": "tf.compat.v1.nn.rnn_cell.GRUCell",
    "BasicRNNCell": "tf.compat.v1.nn.rnn_cell.BasicRNNCell",
    "LSTMBlockCell": "tf.contrib.rnn.LSTMBlockCell",
    "CudnnCompatibleLSTMCell": "tf.contrib.cudnn_rnn.CudnnCompatibleLSTMCell",
    "CudnnCompatibleGRUCell": "tf.contrib.cudnn_rnn.CudnnCompatibleGRUCell",
}


# -- case tables ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TFCell:
    cls: str
    kwargs: dict[str, Any]

    @property
    def units(self) -> int:
        return int(self.kwargs["num_units"])

    @property
    def lstm(self) -> bool:
        return self.cls in LSTM_CLASSES

    @property
    def h_out(self) -> int:
        return int(self.kwargs.get("num_proj") or self.units)


@dataclass(frozen=True)
class TF1Case:
    name: str
    description: str
    structure: str
    cells: tuple[TFCell, ...]
    input_size: int = 4
    time: int = 7
    lengths: bool = False
    initial_state: bool = False
    time_major: bool = False
    dtype: str = "float32"
    bound: float = 0.6
    outer_scope: str | None = None
    scope: str | None = None
    extras: bool = False
    decoder: TFCell | None = None
    devices: tuple[str, ...] = ()
    shards: int = 1


@dataclass(frozen=True)
class TensorsCase:
    name: str
    description: str
    tensors: tuple[tuple[str, str, tuple[int, ...]], ...] = field(default_factory=tuple)


def _c(cls: str, num_units: int, **kwargs: Any) -> TFCell:
    return TFCell(cls, {"num_units": num_units, **kwargs})


CUDNN_LSTM8 = _c("CudnnCompatibleLSTMCell", 8)

TF1_CASES: tuple[TF1Case, ...] = (
    TF1Case("tf1_lstm_cell", "LSTMCell via dynamic_rnn (scope rnn).", "single",
            (_c("LSTMCell", 5),)),
    TF1Case("tf1_lstm_cell_lengths_initial_state",
            "LSTMCell via dynamic_rnn with sequence_length and an initial LSTMStateTuple.",
            "single", (_c("LSTMCell", 5),), lengths=True, initial_state=True),
    TF1Case("tf1_lstm_cell_peephole_proj_clip",
            "LSTMCell with peepholes, num_proj=4, cell_clip=0.5, forget_bias=0.7; large weights.",
            "single", (_c("LSTMCell", 6, use_peepholes=True, num_proj=4, cell_clip=0.5,
                          forget_bias=0.7),), lengths=True, bound=2.0),
    TF1Case("tf1_basic_lstm_cell", "BasicLSTMCell (forget_bias 1.0).", "single",
            (_c("BasicLSTMCell", 5),)),
    TF1Case("tf1_lstm_block_cell", "contrib LSTMBlockCell with peepholes, with lengths.", "single",
            (_c("LSTMBlockCell", 5, use_peephole=True),), lengths=True),
    TF1Case("tf1_cudnn_compatible_lstm_cell", "contrib CudnnCompatibleLSTMCell (forget_bias 0).",
            "single", (_c("CudnnCompatibleLSTMCell", 5),)),
    TF1Case("tf1_gru_cell", "GRUCell with lengths.", "single", (_c("GRUCell", 5),), lengths=True),
    TF1Case("tf1_cudnn_compatible_gru_cell", "contrib CudnnCompatibleGRUCell (reset after).",
            "single", (_c("CudnnCompatibleGRUCell", 5),)),
    TF1Case("tf1_basic_rnn_cell", "BasicRNNCell with tanh.", "single", (_c("BasicRNNCell", 5),)),
    TF1Case("tf1_basic_rnn_cell_relu", "BasicRNNCell with relu.", "single",
            (_c("BasicRNNCell", 5, activation="relu"),)),
    TF1Case("tf1_multi_rnn_cell",
            "MultiRNNCell of three LSTMCell(6), with lengths and initial states for every layer.",
            "multi", (_c("LSTMCell", 6),) * 3, lengths=True, initial_state=True),
    TF1Case("tf1_multi_rnn_mixed", "MultiRNNCell of GRUCell(5) then LSTMCell(4).", "multi",
            (_c("GRUCell", 5), _c("LSTMCell", 4))),
    TF1Case("tf1_bidirectional_gru", "bidirectional_dynamic_rnn of GRUCell(5), with lengths.",
            "bidirectional", (_c("GRUCell", 5),), lengths=True),
    TF1Case("tf1_stack_bidirectional_cudnn_lstm",
            "Acoustic-model layout: stack_bidirectional_dynamic_rnn of 3 CudnnCompatibleLSTMCell(8) "
            "layers under scope 'layer', time-major, with lengths; the checkpoint also holds "
            "global_step and layer/output/{kernel,bias}.",
            "stack_bidirectional", (CUDNN_LSTM8,) * 3, input_size=12, lengths=True,
            time_major=True, outer_scope="layer", extras=True),
    TF1Case("tf1_stack_bidirectional_mixed",
            "stack_bidirectional_dynamic_rnn: LSTMCell(5) layer, then GRUCell(4) layer.",
            "stack_bidirectional", (_c("LSTMCell", 5), _c("GRUCell", 4))),
    TF1Case("tf1_two_networks",
            "Encoder (scope 'encoder', LSTMCell(5)) and decoder (scope 'decoder', GRUCell(5) fed "
            "the encoder output) in one checkpoint; y and states are the encoder's.",
            "single", (_c("LSTMCell", 5),), scope="encoder", decoder=_c("GRUCell", 5)),
    TF1Case("tf1_lstm_cell_float64", "LSTMCell computed in float64.", "single",
            (_c("LSTMCell", 5, dtype="float64"),), dtype="float64"),
    TF1Case("tf1_sharded",
            "MultiRNNCell of two LSTMCell(5); layer 0 on /cpu:0, layer 1 on /cpu:1; saved with "
            "Saver(sharded=True) into two data files.",
            "multi", (_c("LSTMCell", 5), _c("LSTMCell", 5)), lengths=True,
            devices=("/cpu:0", "/cpu:1"), shards=2),
)

TENSOR_CASES: tuple[TensorsCase, ...] = (
    TensorsCase("tf1_dtypes", "Standalone variables of many dtypes (no network).", (
        ("tensors/float16", "float16", (2, 3)),
        ("tensors/bfloat16", "bfloat16", (3, 2)),
        ("tensors/float32", "float32", (4,)),
        ("tensors/float64", "float64", (2, 2)),
        ("tensors/int32", "int32", (5,)),
        ("tensors/int64", "int64", (2, 3)),
        ("tensors/int8", "int8", (6,)),
        ("tensors/uint8", "uint8", (2, 4)),
        ("tensors/bool", "bool", (7,)),
        ("tensors/scalar", "float32", ()),
        ("tensors/empty", "float32", (0, 3)),
        ("tensors/string", "string", (3,)),
    )),
)


def case_names() -> list[str]:
    return [case.name for case in TF1_CASES] + [case.name for case in TENSOR_CASES]


# -- building and running ------------------------------------------------------------------


def make_cell(spec: TFCell) -> Any:
    return graph.make_cell(spec.cls, spec.kwargs)


def cell_meta(spec: TFCell) -> dict[str, Any]:
    return {"class": spec.cls, "path": CELL_PATHS[spec.cls], "kwargs": dict(spec.kwargs)}


def read_options(case: TF1Case) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for spec in case.cells:
        forget_bias = spec.kwargs.get("forget_bias", DEFAULT_FORGET_BIAS.get(spec.cls))
        if spec.lstm and forget_bias != DEFAULT_FORGET_BIAS[spec.cls]:
            options["forget_bias"] = forget_bias
        if spec.kwargs.get("cell_clip") is not None:
            options["cell_clip"] = spec.kwargs["cell_clip"]
        if spec.kwargs.get("activation", "tanh") != "tanh":
            options["activation"] = spec.kwargs["activation"]
    if case.decoder is not None:
        options["scope"] = case.scope
    return options


def directions(case: TF1Case) -> int:
    return 2 if case.structure in ("bidirectional", "stack_bidirectional") else 1


def initial_states(case: TF1Case, rng: np.random.Generator, arrays: Arrays) -> list[list[Any]]:
    """Random initial states per layer and direction, recorded in ``arrays``."""
    states: list[list[Any]] = []
    for layer, spec in enumerate(case.cells):
        per_dir = []
        for d in range(directions(case)):
            h0 = uniform(rng, (BATCH, spec.h_out), case.dtype)
            arrays[f"h0/{layer}/{d}"] = h0
            if spec.lstm:
                c0 = uniform(rng, (BATCH, spec.units), case.dtype)
                arrays[f"c0/{layer}/{d}"] = c0
                per_dir.append(rnn_cell.LSTMStateTuple(tf.constant(c0), tf.constant(h0)))
            else:
                per_dir.append(tf.constant(h0))
        states.append(per_dir)
    return states


def build_network(case: TF1Case, x: Any, lengths: Any, init: list[list[Any]] | None
                  ) -> tuple[Any, list[list[Any]]]:
    """The case's network; returns ``y`` and the final states per layer and direction."""
    wrap = (lambda layer, cell: rnn_cell.DeviceWrapper(cell, case.devices[layer])) \
        if case.devices else None
    return graph.build_network(case.structure, [(spec.cls, spec.kwargs) for spec in case.cells],
                               x, scope=case.scope, lengths=lengths, time_major=case.time_major,
                               dtype=case.dtype, initial_states=init, wrap=wrap)


def build_extras(case: TF1Case, y: Any) -> None:
    """Variables a reader must ignore (or the second network of a two-network case)."""
    if case.extras:
        tf.compat.v1.train.get_or_create_global_step()
        width = int(y.shape[-1])
        with tf.compat.v1.variable_scope(case.outer_scope or "extras"), \
                tf.compat.v1.variable_scope("output"):
            tf.compat.v1.get_variable("kernel", [width, 5], dtype=y.dtype)
            tf.compat.v1.get_variable("bias", [5], dtype=y.dtype)
    if case.decoder is not None:
        tf.compat.v1.nn.dynamic_rnn(make_cell(case.decoder), y, dtype=y.dtype, scope="decoder",
                                    time_major=case.time_major)


def randomize(sess: Any, rng: np.random.Generator, bound: float) -> None:
    """Set every global variable to random values; all float values in the case are distinct."""
    seen: set[float] = set()
    for var in sorted(tf.compat.v1.global_variables(), key=lambda v: v.op.name):
        dtype = var.dtype.base_dtype
        shape = var.shape.as_list()
        if dtype.is_floating:
            value = uniform(rng, shape, dtype.as_numpy_dtype, bound)
            flat = value.reshape(-1)
            for i in range(flat.size):
                while float(flat[i]) in seen:
                    flat[i] = uniform(rng, (), dtype.as_numpy_dtype, bound)
                seen.add(float(flat[i]))
        else:
            value = rng.integers(1, 10_000, shape).astype(dtype.as_numpy_dtype)
        var.load(value, sess)


def session(case_devices: int) -> Any:
    config = tf.compat.v1.ConfigProto(device_count={"CPU": case_devices},
                                      inter_op_parallelism_threads=1,
                                      intra_op_parallelism_threads=1)
    return tf.compat.v1.Session(config=config)


def save_checkpoint(sess: Any, out: Path, name: str, shards: int = 1) -> tuple[str, dict[str, Any]]:
    """Save every global variable; returns the prefix (relative to ``out``) and name -> shape."""
    case_dir = out / CKPT_DIR / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    saver = tf.compat.v1.train.Saver(sharded=shards > 1)
    saver.save(sess, str(case_dir / "model.ckpt"), write_meta_graph=False, write_state=False)
    expected_files = {"model.ckpt.index"} | {
        f"model.ckpt.data-{i:05d}-of-{shards:05d}" for i in range(shards)}
    written = {p.name for p in case_dir.iterdir()}
    if written != expected_files:
        raise AssertionError(f"{name}: checkpoint files {sorted(written)} != {sorted(expected_files)}")
    prefix = f"{CKPT_DIR}/{name}/model.ckpt"
    shapes = tf.train.load_checkpoint(str(out / prefix)).get_variable_to_shape_map()
    expected = {v.op.name for v in tf.compat.v1.global_variables()}
    if set(shapes) != expected:
        raise AssertionError(f"{name}: checkpoint holds {sorted(shapes)}, expected {sorted(expected)}")
    for key in sorted(shapes):
        print(f"    {key} {list(shapes[key])}")
    return prefix, {k: list(shapes[k]) for k in sorted(shapes)}


def state_arrays(spec: TFCell, state: Any, layer: int, d: int) -> Arrays:
    if spec.lstm:
        return {f"h_n/{layer}/{d}": state.h, f"c_n/{layer}/{d}": state.c}
    return {f"h_n/{layer}/{d}": state}


def run_case(case: TF1Case, out: Path) -> Arrays:
    rng = case_rng(case.name)
    shape = (case.time, BATCH, case.input_size) if case.time_major else \
        (BATCH, case.time, case.input_size)
    arrays: Arrays = {"x": uniform(rng, shape, case.dtype, bound=1.0)}
    if case.lengths:
        arrays["lengths"] = make_lengths(case.time)
    with tf.Graph().as_default():
        init = initial_states(case, rng, arrays) if case.initial_state else None
        x = tf.constant(arrays["x"])
        lengths = tf.constant(arrays["lengths"]) if case.lengths else None
        if case.outer_scope:
            with tf.compat.v1.variable_scope(case.outer_scope):
                y, finals = build_network(case, x, lengths, init)
        else:
            y, finals = build_network(case, x, lengths, init)
        build_extras(case, y)
        if case.devices:
            placed = {v.device for v in tf.compat.v1.global_variables()}
            assert len(placed) == len(case.devices), f"{case.name}: variables placed on {placed}"
            print(f"    variable devices: {sorted(placed)}")
        fetch: dict[str, Any] = {"y": y}
        for layer, (spec, per_dir) in enumerate(zip(case.cells, finals, strict=True)):
            for d, state in enumerate(per_dir):
                fetch.update(state_arrays(spec, state, layer, d))
        with session(max(case.shards, len(case.devices), 1)) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            randomize(sess, rng, case.bound)
            values = sess.run(fetch)
            prefix, variables = save_checkpoint(sess, out, case.name, case.shards)
    arrays.update({k: np.asarray(v) for k, v in values.items()})
    check_case(case, arrays)
    meta: dict[str, Any] = {
        "case": case.name,
        "framework": "tf1",
        "framework_version": tf.__version__,
        "description": case.description,
        "checkpoint": prefix,
        "read_options": read_options(case),
        "cells": [cell_meta(spec) for spec in case.cells],
        "structure": case.structure,
        "num_layers": len(case.cells),
        "bidirectional": directions(case) == 2,
        "time_major": case.time_major,
        "dtype": case.dtype,
        "compare": "all",
        "tolerance": tolerance(case.dtype),
        "variables": variables,
    }
    if case.decoder is not None:
        meta["networks"] = [case.scope, "decoder"]
        meta["decoder_cells"] = [cell_meta(case.decoder)]
    arrays["meta"] = meta_array(meta)
    return arrays


def check_case(case: TF1Case, arrays: Arrays) -> None:
    """Cheap checks that the case exercises what it claims to."""
    y = arrays["y"]
    assert y.dtype == np.dtype(case.dtype), (case.name, y.dtype)
    time_axis = 0 if case.time_major else 1
    assert y.shape[time_axis] == case.time and y.shape[1 - time_axis] == BATCH, y.shape
    clip = case.cells[0].kwargs.get("cell_clip")
    if clip is not None:
        c = arrays["c_n/0/0"]
        assert np.max(np.abs(c)) <= clip + 1e-6 and np.any(np.isclose(np.abs(c), clip)), \
            f"{case.name}: cell_clip was not hit"
    if case.lengths:
        y_bm = np.swapaxes(y, 0, 1) if case.time_major else y
        pad = np.arange(case.time)[None, :] >= arrays["lengths"][:, None]
        assert not np.any(y_bm[pad]), f"{case.name}: padded steps are not zero"


def run_tensors_case(case: TensorsCase, out: Path) -> Arrays:
    rng = case_rng(case.name)
    dtypes: dict[str, str] = {}
    with tf.Graph().as_default():
        variables = {}
        for name, dtype_name, shape in case.tensors:
            dtypes[name] = dtype_name
            dtype = tf.as_dtype(dtype_name)
            if dtype_name == "string":
                words = ["".join(rng.choice(list("abcdefghéß∂ 01"), rng.integers(0, 9)))
                         for _ in range(int(np.prod(shape)))]
                value: Any = tf.constant(np.array(words, dtype=object).reshape(shape), tf.string)
            elif dtype == tf.bool:
                value = tf.constant(rng.random(shape) < 0.5)
            elif dtype.is_integer:
                info = np.iinfo(dtype.as_numpy_dtype)
                value = tf.constant(rng.integers(info.min, info.max, shape, endpoint=True,
                                                 dtype=dtype.as_numpy_dtype))
            else:
                value = tf.cast(tf.constant(uniform(rng, shape, "float64", bound=10.0)), dtype)
            variables[name] = tf.compat.v1.Variable(value, name=name, dtype=dtype)
        with session(1) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            values = sess.run(variables)
            prefix, shapes = save_checkpoint(sess, out, case.name)
    arrays: Arrays = {}
    strings: dict[str, list[str]] = {}
    for name, value in values.items():
        if dtypes[name] == "string":
            strings[name] = [v.decode("utf-8") for v in np.asarray(value).ravel()]
        elif dtypes[name] == "bfloat16":
            arrays[f"tensor/{name}"] = np.asarray(value).astype(np.float32)
        else:
            arrays[f"tensor/{name}"] = np.asarray(value)
    arrays["meta"] = meta_array({
        "case": case.name,
        "framework": "tf1",
        "framework_version": tf.__version__,
        "kind": "tensors",
        "description": case.description,
        "checkpoint": prefix,
        "dtypes": dtypes,
        "strings": strings,
        "variables": shapes,
    })
    return arrays


EXAMPLE = REPO_ROOT / "examples" / "acoustic_model"


def write_example(folder: Path = EXAMPLE) -> None:
    """The bundled acoustic model of ``examples/acoustic_model.py``, saved by TensorFlow.

    The layout of a TF1 ``CudnnLSTM`` acoustic model converted for CPU inference: a
    ``stack_bidirectional_dynamic_rnn`` of 3 ``CudnnCompatibleLSTMCell`` layers under the
    scope ``layer``, 120 filterbank features in, time-major, then a dense layer to 29
    characters (``layer/output``) and a ``global_step``. Hidden size 32 keeps the files
    small (the real models use 320: same names, kernels ``[440, 1280]`` then ``[960, 1280]``).
    Also saves ``features.npy`` ``(time, batch, 120)``, ``lengths.npy`` and TensorFlow's own
    recurrent output and logits in ``tensorflow_output.npz``.
    """
    rng = case_rng("acoustic_model_example")
    time, batch, features, units, characters = 50, 2, 120, 32, 29
    x = uniform(rng, (time, batch, features), "float32", bound=1.0)
    lengths = np.array([time, 37], dtype=np.int64)
    case = TF1Case("example", "", "stack_bidirectional", (_c("CudnnCompatibleLSTMCell", units),) * 3,
                   input_size=features, time=time, time_major=True)
    with tf.Graph().as_default():
        with tf.compat.v1.variable_scope("layer"):
            y, _ = build_network(case, tf.constant(x), tf.constant(lengths), None)
            with tf.compat.v1.variable_scope("output"):
                kernel = tf.compat.v1.get_variable("kernel", [2 * units, characters])
                bias = tf.compat.v1.get_variable("bias", [characters])
            logits = tf.tensordot(y, kernel, 1) + bias
        tf.compat.v1.train.get_or_create_global_step()
        with session(1) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            randomize(sess, rng, 0.3)
            values = sess.run({"y": y, "logits": logits})
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            tf.compat.v1.train.Saver().save(sess, str(folder / "model.ckpt"),
                                            write_meta_graph=False, write_state=False)
    np.save(folder / "features.npy", x)
    np.save(folder / "lengths.npy", lengths)
    write_npz(folder / "tensorflow_output.npz", values)
    print(f"wrote the example acoustic model to {folder}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "tests" / "golden",
                        help="output directory (default: tests/golden)")
    parser.add_argument("--case", action="append", choices=case_names(),
                        help="only this case (repeatable; default: all)")
    parser.add_argument("--list", action="store_true", help="only print the case names")
    parser.add_argument("--example", action="store_true",
                        help=f"also write the bundled acoustic model example ({EXAMPLE})")
    args = parser.parse_args(argv)
    out: Path = args.out
    if args.example:
        write_example()
    if not args.list:
        wanted = set(args.case or case_names())
        jobs = [(run_case, c) for c in TF1_CASES] + [(run_tensors_case, c) for c in TENSOR_CASES]
        for runner, case in jobs:
            if case.name not in wanted:
                continue
            print(f"{case.name}:")
            path = out / f"{case.name}.npz"
            print(f"  wrote {path} ({write_npz(path, runner(case, out))} bytes)", flush=True)
    print(json.dumps(case_names()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
