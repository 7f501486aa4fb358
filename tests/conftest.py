"""Shared test set-up: quiet TensorFlow, pin Keras to its TensorFlow backend."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# TensorFlow and Keras run on the CPU here; the GPU tests (which need real cuDNN) run in a
# process of their own with the GPUs the machine showed before this line.
GPUS_SHOWN = os.environ.get("CUDA_VISIBLE_DEVICES")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
