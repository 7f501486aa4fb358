"""tf_keras (Keras 2) running a TF2 checkpoint or SavedModel: only in a process of its own.

Run as ``python -m rnnport.formats.tf2._keras2 JOB.json`` (``framework_forward`` does);
importing it imports TensorFlow after setting ``TF_USE_LEGACY_KERAS=1``. Of rnnport it takes
only its command line (:func:`rnnport.formats._tensorflow.job_main`), so it computes only what
TensorFlow computes. ``JOB.json`` holds:

``saved_model``
    A folder for ``tf_keras.models.load_model``; or
``checkpoint`` and ``layers``
    A prefix, and the layers of the Sequential to rebuild (``class``, ``config``,
    ``bidirectional``, ``name``, ``input_size``); with ``keys`` (per layer, the checkpoint
    keys of its ``get_weights()`` arrays) the weights come from ``tf.train.load_checkpoint``
    and ``set_weights``, else from ``model.load_weights(checkpoint)``.
``x``, ``y``, ``dtype``
    The input ``.npy`` ``(batch, time, input)`` and where to save the output.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import numpy as np

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
import tf_keras as keras

warnings.filterwarnings("ignore")


def build(layers: list[dict[str, Any]], dtype: str) -> Any:
    """``Sequential([Input((None, I)), …])`` of the layers described, every weight NaN so
    that one a restore leaves unset shows in the output."""
    built = [keras.Input(shape=(None, layers[0]["input_size"]), dtype=dtype)]
    for layer in layers:
        cls = getattr(keras.layers, layer["class"])
        if layer["bidirectional"]:
            built.append(keras.layers.Bidirectional(cls(**layer["config"], dtype=dtype),
                                                    name=layer["name"], dtype=dtype))
        else:
            built.append(cls(**layer["config"], dtype=dtype))
    model = keras.Sequential(built)
    model.set_weights([np.full(w.shape, np.nan, dtype=w.dtype) for w in model.get_weights()])
    return model


def run_job(job: dict[str, Any]) -> np.ndarray:
    x = np.load(job["x"], allow_pickle=False)
    if "saved_model" in job:
        model = keras.models.load_model(job["saved_model"], compile=False)
        for layer in model.layers:  # compare every step, not the last only
            inner = getattr(layer, "layer", layer)
            for part in (inner, getattr(layer, "forward_layer", None),
                         getattr(layer, "backward_layer", None)):
                if part is not None and hasattr(part, "return_sequences"):
                    part.return_sequences = True
        config = model.get_config()
        rebuilt = type(model).from_config(config)
        rebuilt.set_weights(model.get_weights())
        y = rebuilt(x)
    else:
        model = build(job["layers"], job["dtype"])
        if "keys" in job:
            reader = tf.train.load_checkpoint(job["checkpoint"])
            for layer, keys in zip(model.layers, job["keys"], strict=True):
                layer.set_weights([reader.get_tensor(key) for key in keys])
        else:
            model.load_weights(job["checkpoint"]).assert_existing_objects_matched()
        y = model(x)
    y = y[0] if isinstance(y, (list, tuple)) else y
    return np.asarray(y)


if __name__ == "__main__":
    from .._tensorflow import job_main

    sys.exit(job_main(sys.argv[1:], run_job))
