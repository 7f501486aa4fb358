"""Measure how far ONNX Runtime's ``com.microsoft.DynamicQuantizeLSTM`` lies from the network
rnnport reads from it with ``dequantize=True`` (see :mod:`rnnport.formats.onnx.quantized`).

    .venv/bin/python tools/onnx_quantized_error.py [--scale 1 3]

``nn.LSTM`` modules initialised as PyTorch initialises them (weights uniform in ±1/√H, times
``--scale``), exported with ``torch.onnx.export(..., dynamo=False)`` and quantized with
``onnxruntime.quantization.quantize_dynamic`` (per tensor and per channel); each is run by
ONNX Runtime and by rnnport's forward on inputs N(0, 1) and uniform ±1. Prints the largest
difference per shape, then over all. The difference is ONNX Runtime's: it quantizes x and
h to 8 bits on every step.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import logging
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

SHAPES = [(inputs, hidden) for inputs, hidden in itertools.product((16, 64, 256), (32, 64, 128, 256))
          if (inputs, hidden) != (256, 32)]
STEPS = (20, 100, 400)


def largest(inputs: int, hidden: int, steps: int, bidirectional: bool, per_channel: bool,
            scale: float, folder: Path) -> float:
    """The largest difference between ONNX Runtime's quantized LSTM and rnnport's read of it."""
    import onnxruntime
    import torch
    from onnxruntime.quantization import quantize_dynamic

    import rnnport

    torch.manual_seed(inputs * 7 + hidden + steps)
    lstm = torch.nn.LSTM(inputs, hidden, bidirectional=bidirectional)
    with torch.no_grad():
        for parameter in lstm.parameters():
            parameter.mul_(scale)

    class Output(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = lstm

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lstm(x)[0]

    float_path, quantized_path = folder / "float.onnx", folder / "quantized.onnx"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        torch.onnx.export(Output().eval(), (torch.randn(steps, 2, inputs),), str(float_path),
                          dynamo=False, input_names=["x"])
        quantize_dynamic(str(float_path), str(quantized_path), per_channel=per_channel)
    model = rnnport.read(quantized_path, dequantize=True)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(quantized_path), options,
                                           providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    worst = 0.0
    for x in (rng.standard_normal((steps, 2, inputs)), rng.uniform(-1, 1, (steps, 2, inputs))):
        x = x.astype(np.float32)
        expected = session.run(None, {"x": x})[0]
        y, _ = model.forward(x, time_major=True)
        worst = max(worst, float(np.max(np.abs(y - expected))))
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scale", type=float, nargs="+", default=[1.0])
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    overall = 0.0
    with tempfile.TemporaryDirectory() as folder:
        for scale in args.scale:
            for (inputs, hidden), steps in itertools.product(SHAPES, STEPS):
                worst = max(largest(inputs, hidden, steps, bidirectional, per_channel, scale,
                                    Path(folder))
                            for bidirectional, per_channel in itertools.product((False, True),
                                                                                repeat=2))
                overall = max(overall, worst)
                print(f"scale {scale:g}, I={inputs}, H={hidden}, T={steps}: {worst:.2e}",
                      flush=True)
    print(f"largest: {overall:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
