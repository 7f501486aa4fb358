"""Check rnnport's cuDNN buffer layout against real cuDNN, on a machine with a CUDA GPU.

    PYTHONPATH=src python tools/check_cudnn_gpu.py

Needs NumPy, PyTorch built with CUDA and cuDNN, and rnnport importable; nothing else.
For each network below (LSTM, GRU, RNN tanh/relu, 1–3 layers, one or two directions,
LSTM with proj_size, with and without biases, float32 and float64), two checks:

1. **run**: ``rnnport.write(model, "cudnn")``, copied whole into the weight space of an
   ``nn.LSTM`` / ``nn.GRU`` / ``nn.RNN`` on the GPU (after ``flatten_parameters()``, whose
   parameter offsets must be those of rnnport's layout), run by cuDNN with TF32 off, against
   rnnport's NumPy ``forward`` (max |Δ| ≤ 1e-4). This is ``convert --verify``'s cuDNN stage.
2. **flat**: an ``nn.LSTM(...).cuda()`` with PyTorch's own random weights; its state_dict
   read by rnnport and written as a cudnn buffer (``bias_mode="double"``: PyTorch gives
   cuDNN both biases, zeros for a bias-free network) must equal, bit for bit, the weight
   space PyTorch built for cuDNN from the same parameters.

A control row swaps two gates of one buffer; its run must differ (the check can fail).
Prints a table; exits 0 when everything matches, 1 on any mismatch, 2 when there is no CUDA
GPU (nothing checked).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

import rnnport
from rnnport import RNN, Spec
from rnnport.formats import cudnn

TOLERANCE = 1e-4
BATCH, TIME = 3, 11

NETWORKS: list[tuple[Spec, Any]] = [
    (Spec("lstm", 5, 7), np.float32),
    (Spec("lstm", 5, 7, num_layers=2, bidirectional=True), np.float32),
    (Spec("lstm", 5, 7, num_layers=3), np.float32),
    (Spec("lstm", 5, 7, proj_size=3), np.float32),
    (Spec("lstm", 5, 7, num_layers=2, bidirectional=True, proj_size=4), np.float32),
    (Spec("lstm", 5, 7, num_layers=2, bias=False), np.float32),
    (Spec("gru", 5, 6), np.float32),
    (Spec("gru", 5, 6, num_layers=3, bidirectional=True), np.float32),
    (Spec("gru", 5, 6, num_layers=2, bias=False), np.float32),
    (Spec("rnn_tanh", 4, 6, num_layers=2), np.float32),
    (Spec("rnn_tanh", 4, 6, bidirectional=True), np.float32),
    (Spec("rnn_relu", 4, 6, num_layers=3, bidirectional=True), np.float32),
    (Spec("rnn_relu", 4, 6, bias=False), np.float32),
    (Spec("lstm", 5, 7, num_layers=2, bidirectional=True, proj_size=4), np.float64),
    (Spec("gru", 5, 6, num_layers=2, bidirectional=True), np.float64),
]


def _run_check(model: RNN, x: np.ndarray) -> tuple[float, str]:
    """cuDNN's output for rnnport's buffer of ``model`` against rnnport's forward."""
    found = cudnn.framework_forward(rnnport.write(model, "cudnn"), model, x)
    if isinstance(found, str):
        return float("inf"), found
    _, y = found
    want, _ = model.forward(x)
    return float(np.max(np.abs(y.astype(np.float64) - want.astype(np.float64)))), ""


def _flat_check(torch: Any, spec: Spec, dtype: Any) -> tuple[bool, str]:
    """PyTorch's own weight space for its random module against rnnport's buffer of it."""
    from rnnport.formats.torch import new_module

    module = new_module(spec, batch_first=True).to(device="cuda",
                                                   dtype=getattr(torch, np.dtype(dtype).name))
    module.flatten_parameters()
    space = cudnn.weight_space(module)
    pytorch_buffer = space.cpu().numpy()
    state = {key: value.detach().cpu() for key, value in module.state_dict().items()}
    options = {"nonlinearity": spec.nonlinearity} if spec.cell.startswith("rnn") else {}
    # PyTorch sets up cuDNN with both biases, zero for a bias-free network.
    buffer = rnnport.write(rnnport.read(state, "torch", **options), "cudnn", bias_mode="double")
    if buffer.shape != pytorch_buffer.shape:
        return False, f"sizes {buffer.size} (rnnport) and {pytorch_buffer.size} (PyTorch)"
    same = buffer.view(np.uint8).tobytes() == pytorch_buffer.view(np.uint8).tobytes()
    differing = int(np.count_nonzero(buffer != pytorch_buffer))
    return same, "" if same else f"{differing} of {buffer.size} elements differ"


def _swapped_gates(model: RNN) -> RNN:
    """``model`` with its first two gate blocks of every matrix and bias exchanged."""
    hidden = model.spec.hidden_size
    params = []
    for directions in model.params:
        layer = []
        for named in directions:
            swapped = {}
            for name, array in named.items():
                array = np.array(array, copy=True)
                if name != "weight_hr":
                    first = array[:hidden].copy()
                    array[:hidden] = array[hidden:2 * hidden]
                    array[hidden:2 * hidden] = first
                swapped[name] = array
            layer.append(swapped)
        params.append(layer)
    return RNN(model.spec, params)


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True))


def main() -> int:
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed: nothing checked.")
        return 2
    if not torch.cuda.is_available() or not torch.backends.cudnn.is_available():
        print("no CUDA GPU with cuDNN (torch.cuda.is_available() is False): nothing checked.")
        return 2
    # TF32 would round float32 products to a 10-bit mantissa (errors near 1e-3).
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name()}; tolerance {TOLERANCE:g}, x {BATCH}×{TIME}×I\n")
    header = ["network", "dtype", "run: max |Δ|", "flat: bit-equal", "result"]
    rows: list[list[str]] = []
    notes: list[str] = []
    failures = 0
    started = time.perf_counter()
    for index, (spec, dtype) in enumerate(NETWORKS):
        model = RNN.random(spec, seed=index, dtype=dtype)
        x = np.random.default_rng(100 + index).uniform(-1, 1, (BATCH, TIME, spec.input_size))
        try:
            error, why = _run_check(model, x.astype(dtype))
        except rnnport.RnnportError as failure:  # the weight space is not rnnport's layout
            error, why = float("inf"), str(failure)
        try:
            same, detail = _flat_check(torch, spec, dtype)
        except rnnport.RnnportError as failure:
            same, detail = False, str(failure)
        ok = error <= TOLERANCE and same
        failures += not ok
        where = f"{spec.describe()}, {np.dtype(dtype).name}"

        def note(text: str, where: str = where) -> str:
            notes.append(f"[{len(notes) + 1}] {where}: {text}")
            return f"[{len(notes)}]"

        rows.append([spec.describe(), np.dtype(dtype).name,
                     f"{error:.1e}" if not why else f"none, see {note(why)}",
                     "yes" if same else f"NO, see {note(detail)}",
                     "ok" if ok else "MISMATCH"])
    model = RNN.random(Spec("lstm", 5, 7, num_layers=2), seed=99, scale=1.0)
    x = np.random.default_rng(99).uniform(-1, 1, (BATCH, TIME, 5)).astype(np.float32)
    found = cudnn.framework_forward(rnnport.write(_swapped_gates(model), "cudnn"), model, x)
    error = float("inf") if isinstance(found, str) else float(
        np.max(np.abs(found[1] - model.forward(x)[0])))
    caught = error > 10 * TOLERANCE
    failures += not caught
    rows.append(["control: i and f gates swapped", "float32", f"{error:.1e}", "-",
                 "differs, as it must" if caught else "NOT CAUGHT"])
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    print(_row(header, widths))
    print(_row(["-" * width for width in widths], widths))
    for row in rows:
        print(_row(row, widths))
    if notes:
        print()
    for line in notes:
        print(line)
    print(f"\n{len(NETWORKS)} networks and 1 control in {time.perf_counter() - started:.1f} s: "
          + ("all match." if not failures else f"{failures} MISMATCH(ES)."))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
