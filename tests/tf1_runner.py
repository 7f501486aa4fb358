"""Run TF1 graphs on checkpoints rnnport wrote: ``python tests/tf1_runner.py JOBS.json OUT``.

A separate process, because TF1 cells need ``tf_keras`` and ``TF_USE_LEGACY_KERAS=1``
before TensorFlow is imported. Each job names a checkpoint, the cells, the structure and
the scope TensorFlow should build (with the same builders as ``tools/golden_tf1.py``);
the graph's variables are restored from the checkpoint with ``tf.compat.v1.train.Saver``
— which fails unless every name, shape and dtype matches — and run on the job's input.
Writes ``OUT/<job>.npz`` with ``y`` and ``h_n/{layer}/{direction}`` (``c_n/…`` for LSTM).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

import golden_tf1 as g  # sets TF_USE_LEGACY_KERAS before it imports TensorFlow

tf = g.tf


def run(job: dict, out: Path) -> None:
    cells = tuple(g.TFCell(cell["cls"], cell["kwargs"]) for cell in job["cells"])
    x = np.load(job["x"])
    lengths = np.load(job["lengths"]) if job.get("lengths") else None
    case = g.TF1Case(job["name"], "", job["structure"], cells, input_size=x.shape[-1],
                     time_major=job["time_major"], dtype=str(x.dtype),
                     outer_scope=job.get("outer_scope"), scope=job.get("scope"))
    with tf.Graph().as_default():
        if case.outer_scope:
            with tf.compat.v1.variable_scope(case.outer_scope):
                y, finals = g.build_network(case, tf.constant(x), lengths, None)
        else:
            y, finals = g.build_network(case, tf.constant(x), lengths, None)
        fetch = {"y": y}
        for layer, (spec, per_dir) in enumerate(zip(cells, finals, strict=True)):
            for d, state in enumerate(per_dir):
                fetch.update(g.state_arrays(spec, state, layer, d))
        with g.session(1) as sess:
            tf.compat.v1.train.Saver().restore(sess, job["checkpoint"])
            values = sess.run(fetch)
    np.savez(out / f"{job['name']}.npz", **{k: np.asarray(v) for k, v in values.items()})


def main() -> int:
    jobs = json.loads(Path(sys.argv[1]).read_text())
    out = Path(sys.argv[2])
    for job in jobs:
        run(job, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
