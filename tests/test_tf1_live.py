"""Checkpoints rnnport writes, read by real TensorFlow: ``tf.train.load_checkpoint`` in this
process, and TF1 graphs restored with ``Saver`` and run in another (``tests/tf1_runner.py``);
the ``checkpoint`` state file beside them, by ``latest_checkpoint`` and ``CheckpointManager``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf

import rnnport
from rnnport import RNN, Spec

pytestmark = pytest.mark.slow  # live framework checks, TF1 graphs in another process

RUNNER = Path(__file__).parent / "tf1_runner.py"


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_tensorflow_loads_every_array_we_write(tmp_path: Path, dtype: Any) -> None:
    model = RNN.random(Spec("lstm", 6, 5, num_layers=2, bidirectional=True, peepholes=True,
                            proj_size=3), seed=4, dtype=dtype)
    written = rnnport.write(model, "tf1", path=tmp_path / "model.ckpt")
    reader = tf.train.load_checkpoint(str(tmp_path / "model.ckpt"))
    assert reader.get_variable_to_shape_map() == {k: list(v.shape) for k, v in written.items()}
    for name, array in written.items():
        loaded = reader.get_tensor(name)
        assert loaded.dtype == array.dtype and np.array_equal(loaded, array), name


def _job(tmp_path: Path, name: str, model: rnnport.Model, cells: list[dict[str, Any]],
         structure: str, *, time_major: bool = False, lengths: bool = False,
         outer_scope: str | None = None, **write_options: Any
         ) -> tuple[dict[str, Any], rnnport.Model, dict[str, np.ndarray]]:
    rng = np.random.default_rng(len(name))
    shape = (7, 3, model.input_size) if time_major else (3, 7, model.input_size)
    x = rng.uniform(-1, 1, shape).astype(model.dtype)
    np.save(tmp_path / f"{name}_x.npy", x)
    job = {"name": name, "checkpoint": str(tmp_path / name / "model.ckpt"), "cells": cells,
           "structure": structure, "time_major": time_major, "x": str(tmp_path / f"{name}_x.npy"),
           "outer_scope": outer_scope}
    inputs: dict[str, np.ndarray] = {"x": x}
    if lengths:
        inputs["lengths"] = np.array([3, 7, 1])
        np.save(tmp_path / f"{name}_lengths.npy", inputs["lengths"])
        job["lengths"] = str(tmp_path / f"{name}_lengths.npy")
    (tmp_path / name).mkdir()
    rnnport.write(model, "tf1", path=job["checkpoint"], structure=structure, **write_options)
    return job, model, inputs


def _cell(cls: str, units: int, **kwargs: Any) -> dict[str, Any]:
    return {"cls": cls, "kwargs": {"num_units": units, **kwargs}}


def test_tensorflow_runs_our_checkpoints_like_rnnport(tmp_path: Path) -> None:
    torch_like = RNN.random(Spec("lstm", 12, 8, num_layers=2, bidirectional=True), seed=1,
                            scale=0.6)  # two biases per gate, as cuDNN and PyTorch keep them
    jobs = [
        _job(tmp_path, "lstm_peephole_proj_clip",
             RNN.random(Spec("lstm", 4, 6, proj_size=3, peepholes=True, cell_clip=0.4), seed=2,
                        scale=1.5),
             [_cell("LSTMCell", 6, use_peepholes=True, num_proj=3, cell_clip=0.4,
                    forget_bias=0.3)], "single", lengths=True, cell_clip=0.4, forget_bias=0.3),
        _job(tmp_path, "acoustic", torch_like, [_cell("CudnnCompatibleLSTMCell", 8)] * 2,
             "stack_bidirectional", time_major=True, lengths=True, outer_scope="layer",
             cell="CudnnCompatibleLSTMCell", scope="layer/stack_bidirectional_rnn"),
        _job(tmp_path, "block_cell", RNN.random(Spec("lstm", 4, 5, peepholes=True), seed=3),
             [_cell("LSTMBlockCell", 5, use_peephole=True)], "single", cell="LSTMBlockCell"),
        _job(tmp_path, "basic_lstm_f64", RNN.random(Spec("lstm", 4, 5), seed=4, dtype=np.float64),
             [_cell("BasicLSTMCell", 5, dtype="float64")], "single", cell="BasicLSTMCell"),
        _job(tmp_path, "gru_multi", RNN.random(Spec("gru", 4, 5, num_layers=2, reset_after=False),
                                               seed=5),
             [_cell("GRUCell", 5)] * 2, "multi", lengths=True),
        _job(tmp_path, "cudnn_gru_bidirectional", RNN.random(Spec("gru", 4, 5, bidirectional=True),
                                                             seed=6),
             [_cell("CudnnCompatibleGRUCell", 5)], "bidirectional", lengths=True),
        _job(tmp_path, "rnn_relu", RNN.random(Spec("rnn_relu", 4, 5), seed=7),
             [_cell("BasicRNNCell", 5, activation="relu")], "single", activation="relu"),
        _job(tmp_path, "mixed", rnnport.stack([
            RNN.random(Spec("gru", 4, 5, reset_after=False), seed=8),
            RNN.random(Spec("lstm", 5, 3), seed=9)]),
             [_cell("GRUCell", 5), _cell("LSTMCell", 3)], "multi"),
    ]
    (tmp_path / "jobs.json").write_text(json.dumps([job for job, _, _ in jobs]))
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "jobs.json"),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for job, model, inputs in jobs:
        with np.load(tmp_path / f"{job['name']}.npz") as data:
            tf_out = dict(data)
        y, _ = model.forward(inputs["x"], lengths=inputs.get("lengths"),
                             time_major=job["time_major"])
        tolerance = 1e-10 if model.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(y, tf_out["y"], atol=tolerance, rtol=tolerance,
                                   err_msg=job["name"])


def test_tensorflow_finds_and_restores_the_newest_checkpoint_we_write(tmp_path: Path) -> None:
    spec = Spec("lstm", 4, 5, num_layers=2)
    rnnport.write(RNN.random(spec, seed=1), "tf1", path=tmp_path / "model.ckpt-1")
    written = rnnport.write(RNN.random(spec, seed=2), "tf1", path=tmp_path / "model.ckpt-2")
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-2")
    state = tf.train.get_checkpoint_state(str(tmp_path))
    assert list(state.all_model_checkpoint_paths) == [str(tmp_path / "model.ckpt-1"),
                                                      str(tmp_path / "model.ckpt-2")]
    with tf.Graph().as_default():
        variables = {name: tf.compat.v1.get_variable(name, array.shape, tf.as_dtype(array.dtype))
                     for name, array in written.items()}
        with tf.compat.v1.Session() as session:
            tf.compat.v1.train.Saver().restore(session, tf.train.latest_checkpoint(str(tmp_path)))
            restored = session.run(variables)
    for name, array in written.items():
        assert np.array_equal(restored[name], array), name


def test_a_checkpoint_manager_keeps_its_checkpoints_and_takes_ours_as_the_newest(
        tmp_path: Path) -> None:
    saved = tf.train.Checkpoint(step=tf.Variable(1))
    manager = tf.train.CheckpointManager(saved, str(tmp_path), max_to_keep=5)
    first, second = manager.save(), manager.save()
    rnnport.write(RNN.random(Spec("gru", 3, 4)), "tf1", path=tmp_path / "converted.ckpt")
    again = tf.train.CheckpointManager(saved, str(tmp_path), max_to_keep=5)
    assert again.latest_checkpoint == str(tmp_path / "converted.ckpt")
    assert again.checkpoints == [first, second, str(tmp_path / "converted.ckpt")]
    third = again.save()  # TensorFlow's next save keeps ours in the list
    assert tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths[-2:] == [
        str(tmp_path / "converted.ckpt"), third]
    assert rnnport.read(tmp_path / "converted.ckpt") is not None
