"""``import rnnport`` pulls in no framework, and NumPy-only work stays NumPy-only."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("torch", "tensorflow", "keras", "tf_keras", "onnx", "onnxruntime", "h5py", "jax",
              "ncnn", "openvino", "paddle", "tensorflowjs", "coremltools")

SCRIPT = """
import sys
import numpy as np
import rnnport
spec = rnnport.Spec("lstm", 3, 4, num_layers=2, bidirectional=True)
rnn = rnnport.RNN.random(spec)
buffer = rnnport.write(rnn, "cudnn")
weights = rnnport.convert(buffer, "keras", fmt="cudnn", cell="lstm", input_size=3, hidden_size=4,
                          num_layers=2, bidirectional=True)
state = rnnport.write(rnnport.read(weights), "torch")
rnnport.read(state).forward(np.zeros((1, 2, 3), np.float32))
print(",".join(m for m in %r if m in sys.modules))
"""


def test_import_and_numpy_work_import_no_framework() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT % (FRAMEWORKS,)], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == ""
