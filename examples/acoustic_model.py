"""Run a TF1 cuDNN-compatible bidirectional LSTM acoustic model with NumPy alone.

The model was trained with ``tf.contrib.cudnn_rnn.CudnnLSTM`` and saved for CPU
inference as a ``stack_bidirectional_dynamic_rnn`` of ``CudnnCompatibleLSTMCell``
layers; its checkpoint holds variables such as::

    layer/stack_bidirectional_rnn/cell_0/bidirectional_rnn/fw/cudnn_compatible_lstm_cell/kernel
    layer/output/kernel, layer/output/bias, global_step

Usage::

    python examples/acoustic_model.py                      # the bundled model (made by TensorFlow)
    python examples/acoustic_model.py PREFIX FEATURES.npy  # your checkpoint, (time, batch, 120)

Nothing but NumPy and rnnport is imported; TensorFlow need not be installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import rnnport
from rnnport.io.tensorbundle import Bundle

HERE = Path(__file__).resolve().parent / "acoustic_model"


def main(argv: list[str]) -> int:
    prefix = Path(argv[0]) if argv else HERE / "model.ckpt"
    features = np.load(argv[1] if len(argv) > 1 else HERE / "features.npy")  # (time, batch, 120)
    lengths = np.load(HERE / "lengths.npy") if not argv else None

    # The recurrent stack: cells, layers and directions are found from the variable names.
    model = rnnport.read(prefix, scope="layer/stack_bidirectional_rnn")
    print(f"read {prefix}: {model.spec.describe()}, {model.num_params():,} parameters")
    y, (h, c) = model.forward(features, lengths=lengths, time_major=True)
    print(f"features {features.shape} -> outputs {y.shape} (time, batch, fw+bw); "
          f"final h {h.shape} and c {c.shape} (layers·directions, batch, hidden)")

    # Any other variable is one read away, e.g. the output layer on top of the stack.
    checkpoint = Bundle(prefix)
    if "layer/output/kernel" in checkpoint:
        logits = y @ checkpoint.read("layer/output/kernel") + checkpoint.read("layer/output/bias")
        print(f"logits {logits.shape}; best character per frame of sequence 0: "
              f"{logits[:8, 0].argmax(-1).tolist()}…")
        reference = HERE / "tensorflow_output.npz"
        if not argv and reference.is_file():
            with np.load(reference) as tf_out:
                error = max(np.abs(y - tf_out["y"]).max(), np.abs(logits - tf_out["logits"]).max())
            print(f"largest difference from TensorFlow's own output: {error:.1e}")

    frameworks = [name for name in ("tensorflow", "tf_keras", "keras", "torch") if name in sys.modules]
    print("frameworks imported:", ", ".join(frameworks) or "none")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
