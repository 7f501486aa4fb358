"""Generate golden OpenVINO IRs as OpenVINO's own converter writes them:
``openvino.convert_model`` from PyTorch modules and from ONNX files, saved by
``openvino.save_model``.

    .venv/bin/python tools/golden_openvino.py [--out tests/golden/openvino] [--case NAME ...]

Pinned: openvino 2026.4.1, torch 2.13.0, onnx and onnxruntime as requirements-test.txt
pins them (the versions used are recorded in each case's ``meta``). ``rnnport`` is not
imported. Every weight and bias is drawn at random (uniform ±0.6, a fixed seed per case),
so a gate or direction mix-up changes the numbers. Each case ``NAME`` is ``NAME.xml`` and
``NAME.bin`` as ``save_model`` wrote them, and ``NAME.npz`` holding ``x`` (batch-first,
``(2, 6, 5)``), ``y_openvino`` (OpenVINO's CPU plugin running the IR at f32 precision, given
``x`` in the layout the model takes, returned batch-first ``(2, 6, D·H)``), ``y_source``
(the source framework on the same input: PyTorch, or ONNX Runtime) and ``meta`` (JSON:
what the case is, ``time_major``, ``f16``, ``head`` and the versions).

Cases
-----
``torch_lstm_bi_2layer``  ``nn.LSTM(5, 8, num_layers=2, bidirectional=True, batch_first=True)``
``torch_gru``             ``nn.GRU(5, 8, batch_first=True)`` (reset-after)
``torch_rnn_relu``        ``nn.RNN(5, 8, nonlinearity="relu", batch_first=True)``
``torch_lstm_f16``        ``nn.LSTM(5, 8, batch_first=True)`` saved with the default
                          ``compress_to_fp16=True``: f16 constants and ``Convert`` layers
``torch_gru_head``        ``nn.GRU(5, 8, batch_first=True)`` and an ``nn.Linear(8, 3)`` head
                          (``y_openvino`` is the head's output; reading notes the head)
``onnx_gru_reset_before`` an ONNX ``GRU`` node made with ``onnx.helper`` (the default
                          ``linear_before_reset=0``, time-major ``X``), converted from the file
``onnx_lstm_bi_2layer``   ``torch.onnx.export(..., dynamo=False)`` of a time-major
                          ``nn.LSTM(5, 8, num_layers=2, bidirectional=True)``, converted
                          from the file
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
BATCH, TIME, INPUT, HIDDEN = 2, 6, 5, 8
CASES = ("torch_lstm_bi_2layer", "torch_gru", "torch_rnn_relu", "torch_lstm_f16",
         "torch_gru_head", "onnx_gru_reset_before", "onnx_lstm_bi_2layer")


def _randomize(module: Any, seed: int) -> None:
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.rand(parameter.shape, generator=generator) * 1.2 - 0.6)


def _torch_case(name: str, seed: int) -> tuple[Any, dict[str, Any]]:
    """The PyTorch module of a ``torch_*`` case (batch-first in, y out) and its facts."""
    import torch

    class Network(torch.nn.Module):
        def __init__(self, recurrent: torch.nn.Module, head: torch.nn.Module | None) -> None:
            super().__init__()
            self.recurrent, self.head = recurrent, head

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.recurrent(x)[0]
            return y if self.head is None else self.head(y)

    recurrent = {
        "torch_lstm_bi_2layer": lambda: torch.nn.LSTM(INPUT, HIDDEN, num_layers=2,
                                                      bidirectional=True, batch_first=True),
        "torch_gru": lambda: torch.nn.GRU(INPUT, HIDDEN, batch_first=True),
        "torch_rnn_relu": lambda: torch.nn.RNN(INPUT, HIDDEN, nonlinearity="relu",
                                               batch_first=True),
        "torch_lstm_f16": lambda: torch.nn.LSTM(INPUT, HIDDEN, batch_first=True),
        "torch_gru_head": lambda: torch.nn.GRU(INPUT, HIDDEN, batch_first=True),
    }[name]()
    head = torch.nn.Linear(HIDDEN, 3) if name == "torch_gru_head" else None
    module = Network(recurrent, head).eval()
    _randomize(module, seed)
    return module, {"f16": name == "torch_lstm_f16", "head": head is not None,
                    "time_major": False}


def _onnx_file(name: str, folder: Path, seed: int) -> tuple[Path, dict[str, Any]]:
    """The ONNX file of an ``onnx_*`` case (time-major X) and its facts."""
    import onnx
    import torch
    from onnx import TensorProto, helper, numpy_helper

    path = folder / f"{name}.onnx"
    if name == "onnx_gru_reset_before":
        rng = np.random.default_rng(seed)
        arrays = {"W": (1, 3 * HIDDEN, INPUT), "R": (1, 3 * HIDDEN, HIDDEN),
                  "B": (1, 6 * HIDDEN)}
        initializers = [numpy_helper.from_array(rng.uniform(-0.6, 0.6, shape).astype(
            np.float32), key) for key, shape in arrays.items()]
        node = helper.make_node("GRU", ["x", "W", "R", "B"], ["y"], hidden_size=HIDDEN)
        graph = helper.make_graph(
            [node], "gru_reset_before",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["time", "batch", INPUT])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
        onnx.save(helper.make_model(graph, ir_version=8,
                                     opset_imports=[helper.make_opsetid("", 14)]), path)
    else:
        module = torch.nn.LSTM(INPUT, HIDDEN, num_layers=2, bidirectional=True).eval()
        _randomize(module, seed)
        torch.onnx.export(module, (torch.zeros(TIME, BATCH, INPUT),), str(path), dynamo=False,
                          input_names=["x"], output_names=["y", "h_n", "c_n"],
                          dynamic_axes={"x": {0: "time", 1: "batch"}})
    return path, {"f16": False, "head": False, "time_major": True}


def _run_openvino(model: Any, x: np.ndarray) -> np.ndarray:
    import openvino

    compiled = openvino.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return np.asarray(compiled({0: x})[compiled.outputs[0]])


def _batch_first(y: np.ndarray) -> np.ndarray:
    """A time-major output as (batch, time, D·H): ONNX's Y [T, D, B, H], or [T, B, D·H]."""
    if y.ndim == 4:
        return y.transpose(2, 0, 1, 3).reshape(BATCH, TIME, -1)
    return y.transpose(1, 0, 2)


def make(name: str, out: Path) -> None:
    import onnx
    import onnxruntime
    import openvino
    import torch

    seed = CASES.index(name) + 33
    x = np.random.default_rng(seed).uniform(-1, 1, (BATCH, TIME, INPUT)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        if name.startswith("torch_"):
            module, facts = _torch_case(name, seed)
            with torch.no_grad():
                y_source = module(torch.from_numpy(x)).numpy()
            model = openvino.convert_model(module, example_input=torch.from_numpy(x))
        else:
            path, facts = _onnx_file(name, Path(folder), seed)
            session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            y_source = _batch_first(session.run(None, {"x": x.transpose(1, 0, 2)})[0])
            model = openvino.convert_model(str(path))
        openvino.save_model(model, str(out / f"{name}.xml"), compress_to_fp16=facts["f16"])
    saved = openvino.Core().read_model(str(out / f"{name}.xml"))
    if facts["time_major"]:
        y_openvino = _batch_first(_run_openvino(saved, x.transpose(1, 0, 2)))
    else:
        y_openvino = _run_openvino(saved, x)
    meta = {"case": name, **facts, "shape": [BATCH, TIME, INPUT], "hidden_size": HIDDEN,
            "versions": {"openvino": openvino.__version__, "torch": torch.__version__,
                         "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}}
    np.savez(out / f"{name}.npz", x=x, y_openvino=y_openvino.astype(np.float32),
             y_source=np.asarray(y_source, np.float32), meta=np.array(json.dumps(meta)))
    print(f"{name}: |openvino − source| = {np.abs(y_openvino - y_source).max():.2e}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "openvino")
    parser.add_argument("--case", action="append", choices=CASES)
    arguments = parser.parse_args(argv)
    arguments.out.mkdir(parents=True, exist_ok=True)
    for name in arguments.case or CASES:
        make(name, arguments.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
