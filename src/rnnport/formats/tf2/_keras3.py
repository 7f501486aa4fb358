"""Keras 3 (on TensorFlow) running a Keras 3 SavedModel: only in a process of its own.

Run as ``python -m rnnport.formats.tf2._keras3 JOB.json`` (``framework_forward`` does);
importing it removes ``TF_USE_LEGACY_KERAS`` from the environment, then imports TensorFlow
and Keras 3. Of rnnport it takes only its command line
(:func:`rnnport.formats._tensorflow.job_main`), so it computes only what TensorFlow computes.
``JOB.json`` holds:

``saved_model``
    A folder for ``tf.saved_model.load``: its ``serve`` endpoint (``model.export``) or its
    ``serving_default`` signature (``tf.saved_model.save``) is called on ``x``, the model's
    own graph; or
``checkpoint`` and ``layers``
    The SavedModel's ``variables/variables`` prefix and the layers of a Keras 3 Sequential
    to build (``class``, ``config``, ``bidirectional``, ``input_size``, and ``keys``: the
    checkpoint keys of the layer's ``get_weights()`` arrays, read with
    ``tf.train.load_checkpoint`` and set with ``set_weights``).
``x``, ``y``, ``dtype``
    The input ``.npy`` ``(batch, time, input)`` and where to save the output.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np

os.environ.pop("TF_USE_LEGACY_KERAS", None)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["KERAS_BACKEND"] = "tensorflow"

import keras
import tensorflow as tf

warnings.filterwarnings("ignore")


def _serve(folder: str, x: np.ndarray) -> np.ndarray:
    loaded = tf.saved_model.load(folder)
    if hasattr(loaded, "serve"):
        y = loaded.serve(tf.constant(x))
    else:
        signature = loaded.signatures["serving_default"]
        (name,) = signature.structured_input_signature[1]
        y = signature(**{name: tf.constant(x)})
    if isinstance(y, dict):
        if len(y) != 1:
            raise SystemExit(f"the SavedModel returns {len(y)} outputs; expected one")
        y = next(iter(y.values()))
    if isinstance(y, (list, tuple)):
        y = y[0]
    return np.asarray(y)


def _rebuilt(job: dict[str, Any], x: np.ndarray) -> np.ndarray:
    reader = tf.train.load_checkpoint(job["checkpoint"])
    layers = job["layers"]
    model = keras.Sequential([keras.Input((None, layers[0]["input_size"]), dtype=job["dtype"])])
    for layer in layers:
        made = getattr(keras.layers, layer["class"])(**layer["config"], dtype=job["dtype"])
        if layer["bidirectional"]:
            made = keras.layers.Bidirectional(made, dtype=job["dtype"])
        model.add(made)
        made.set_weights([reader.get_tensor(key) for key in layer["keys"]])
    return np.asarray(model(x))


def run_job(job: dict[str, Any]) -> np.ndarray:
    x = np.load(job["x"], allow_pickle=False)
    if keras.__version__.split(".")[0] != "3":
        raise SystemExit(f"Keras {keras.__version__} loaded; a Keras 3 SavedModel needs Keras 3")
    return _serve(job["saved_model"], x) if "saved_model" in job else _rebuilt(job, x)


if __name__ == "__main__":
    from .._tensorflow import job_main

    sys.exit(job_main(sys.argv[1:], run_job))
