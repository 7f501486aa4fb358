"""Each format's ``framework_forward``: the target framework itself loading a file rnnport
wrote and running it (``convert --verify``'s second stage), against rnnport's forward and
the golden outputs PyTorch and Keras computed; and the sentence saying why not where it
cannot run. The framework's numbers must come from the file, not from the model handed in:
a model of the same shape with other weights does not change them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from golden_cases import load

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError
from rnnport.formats import get

TOLERANCE = 1e-5
TORCH_CASES = ["torch_lstm", "torch_lstm_proj", "torch_gru", "torch_rnn_relu", "torch_lstm_nobias",
               "torch_lstm_bi_2layer", "torch_gru_bi_3layer", "torch_rnn_bi_2layer_relu",
               "torch_lstm_proj_bi_2layer", "torch_lstm_float64"]
# Each Keras case takes about a second (building and loading a model); the first, the import.
KERAS_CASES = ["keras_bi_gru", "keras_stack_mixed_bi",
               *(pytest.param(name, marks=pytest.mark.slow) for name in (
                   "keras_lstm", "keras_gru_reset_before", "keras_simplernn_relu",
                   "keras_lstm_float64"))]


def _x(width: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (2, 7, width)).astype(dtype)


def _run(fmt: str, source: Any, model: rnnport.Model, x: np.ndarray) -> tuple[str, np.ndarray]:
    found = get(fmt).framework_forward(source, model, x)  # type: ignore[misc]
    assert not isinstance(found, str), found
    return found


def _close(got: np.ndarray, want: np.ndarray, tolerance: float = TOLERANCE) -> None:
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tolerance,
                               rtol=0)


def _written(model: rnnport.Model, fmt: str, path: Path) -> rnnport.Model:
    """``model`` written to ``path`` as ``fmt`` and read back, as ``convert --verify`` does."""
    declared = get(fmt)
    declared.write(model, path=path)
    return rnnport.read(path, fmt, **declared.read_back_options(model))


def _golden(fmt: str, name: str, path: Path) -> tuple[str, rnnport.Model]:
    """The golden case ``name`` written to ``path`` as ``fmt`` and read back; the framework's
    label for running that file, and the network read back. The framework's ``y`` must equal
    the golden output and rnnport's forward of what was read back, within the case's
    tolerance."""
    case = load(name)
    back = _written(case.read(), fmt, path)
    label, y = _run(fmt, path, back, case.arrays["x"])
    tolerance = case.meta["tolerance"]
    _close(y, case.arrays["y"], tolerance)
    _close(y, back.forward(case.arrays["x"])[0], tolerance)
    return label, back


def _other(model: RNN) -> RNN:
    """A network of ``model``'s shape and dtype with other weights."""
    return RNN.random(model.spec, seed=99, dtype=model.dtype)


# -- PyTorch ---------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
@pytest.mark.parametrize("name", TORCH_CASES)
def test_pytorch_loads_the_file_rnnport_wrote_and_computes_the_golden_output(
        name: str, suffix: str, tmp_path: Path) -> None:
    label, back = _golden("torch", name, tmp_path / f"model{suffix}")
    module = {"lstm": "LSTM", "gru": "GRU"}.get(back.spec.cell, "RNN")
    assert label.startswith(f"PyTorch loading model{suffix} into nn.{module}")


@pytest.mark.parametrize("spec", [Spec("lstm", 3, 5, num_layers=3, bidirectional=True, proj_size=2),
                                  Spec("gru", 4, 3, num_layers=2, bias=False),
                                  Spec("rnn_relu", 3, 4, num_layers=2, bidirectional=True)],
                         ids=lambda spec: spec.describe())
def test_pytorch_runs_random_networks_from_the_file_not_from_the_model_given(
        spec: Spec, tmp_path: Path) -> None:
    model = RNN.random(spec, seed=3)
    x = _x(spec.input_size)
    back = _written(model, "torch", tmp_path / "m.pt")
    _, y = _run("torch", tmp_path / "m.pt", back, x)
    _close(y, model.forward(x)[0])
    # The model handed in only tells the shape: its weights do not reach PyTorch.
    _, unchanged = _run("torch", tmp_path / "m.pt", _other(back), x)
    np.testing.assert_array_equal(unchanged, y)
    assert np.max(np.abs(_other(back).forward(x)[0] - y)) > 1e-2  # they would show


def test_pytorch_finds_the_network_read_in_a_checkpoint_with_several(tmp_path: Path) -> None:
    import torch
    torch.manual_seed(0)
    encoder = torch.nn.GRU(3, 4, num_layers=2, bidirectional=True)
    decoder = torch.nn.LSTMCell(8, 5)
    checkpoint = {"epoch": 7, "model_state_dict": {
        **{f"encoder.rnn.{k}": v for k, v in encoder.state_dict().items()},
        **{f"decoder.cell.{k}": v for k, v in decoder.state_dict().items()},
        "head.weight": torch.zeros(2, 5)}}
    torch.save(checkpoint, tmp_path / "checkpoint.pt")
    x = _x(3)
    model = rnnport.read(tmp_path / "checkpoint.pt", prefix="encoder.rnn.")
    label, y = _run("torch", tmp_path / "checkpoint.pt", model, x)
    assert label == ("PyTorch loading checkpoint.pt (keys under 'model_state_dict.encoder.rnn.') "
                     "into nn.GRU")
    with torch.no_grad():
        _close(y, encoder(torch.from_numpy(x).transpose(0, 1))[0].transpose(0, 1).numpy())
    cell = rnnport.read(tmp_path / "checkpoint.pt", prefix="decoder.cell.")
    label, y = _run("torch", tmp_path / "checkpoint.pt", cell, _x(8))
    assert label == ("PyTorch loading checkpoint.pt (keys under 'model_state_dict.decoder.cell.') "
                     "into nn.LSTMCell, stepped over time")
    _close(y, cell.forward(_x(8))[0])
    label, _ = _run("torch", checkpoint, cell, _x(8))
    assert label.startswith("PyTorch loading the state_dict (keys under "
                            "'model_state_dict.decoder.cell.')")


def test_pytorch_runs_a_module_itself_in_eval_mode_and_leaves_its_mode_alone() -> None:
    import torch
    torch.manual_seed(1)
    module = torch.nn.LSTM(3, 4, num_layers=2, dropout=0.9)  # dropout acts in training only
    model = rnnport.read(module)
    label, y = _run("torch", module, model, _x(3))
    assert label == "PyTorch running the nn.LSTM itself"
    _close(y, model.forward(_x(3))[0])
    assert module.training


def test_pytorch_refuses_tensors_that_do_not_fit_the_network_read(tmp_path: Path) -> None:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2))
    rnnport.write(model, "torch", path=tmp_path / "m.pt")
    one_layer = RNN.random(Spec("lstm", 3, 4))
    with pytest.raises(FormatError, match=r"(?s)load_state_dict\(strict=True\) refuses .*"
                                          r"Unexpected key\(s\).*weight_ih_l1"):
        get("torch").framework_forward(tmp_path / "m.pt", one_layer, _x(3))  # type: ignore[misc]


def test_pytorch_says_why_it_cannot_run() -> None:
    run = get("torch").framework_forward
    assert run is not None
    parts = rnnport.stack([RNN.random(Spec("lstm", 3, 4)), RNN.random(Spec("gru", 4, 2))])
    assert run([{}, {}], parts, _x(3)) == ("a stack of differing parts is no single PyTorch "
                                           "module: no framework check")
    assert run(np.zeros(3), RNN.random(Spec("gru", 3, 2)), _x(3)) == (
        "an array of shape (3,) and dtype float64 is no PyTorch module, state_dict or file: no "
        "framework check")


# -- Keras -----------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
@pytest.mark.parametrize("name", KERAS_CASES)
def test_keras_loads_the_file_rnnport_wrote_and_computes_the_golden_output(
        name: str, suffix: str, tmp_path: Path) -> None:
    label, _ = _golden("keras", name, tmp_path / f"model{suffix}")
    assert label == (f"Keras 3 loading model{suffix}" + (
        " into the Sequential rnnport rebuilt" if suffix == ".weights.h5" else ""))


def test_keras_weights_come_from_the_weights_file_not_from_the_model_given(
        tmp_path: Path) -> None:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True), seed=8)
    back = _written(model, "keras", tmp_path / "m.weights.h5")
    _, y = _run("keras", tmp_path / "m.weights.h5", _other(back), _x(3))
    _close(y, model.forward(_x(3))[0])


def test_keras_says_why_it_cannot_run(tmp_path: Path) -> None:
    import keras
    run = get("keras").framework_forward
    assert run is not None
    model = RNN.random(Spec("gru", 3, 4))
    why = ("the Keras check loads .keras and .weights.h5 files, and this is {}: no framework "
           "check")
    assert run(rnnport.write(model, "keras"), model, _x(3)) == why.format("an object in memory")
    assert run(tmp_path / "old.h5", model, _x(3)) == why.format("a legacy .h5 file")
    with_head = keras.Sequential([keras.Input((None, 3)), keras.layers.GRU(4, return_sequences=True),
                                  keras.layers.Dense(2)])
    with_head.save_weights(tmp_path / "head.weights.h5")
    with_head.save(tmp_path / "head.keras")
    read = rnnport.read(tmp_path / "head.weights.h5")
    assert run(tmp_path / "head.weights.h5", read, _x(3)) == (
        "head.weights.h5 holds the layer groups dense, gru, and Keras's load_weights needs "
        "exactly those of the Sequential rebuilt from the network read (gru): no framework "
        "check")
    assert run(tmp_path / "head.keras", read, _x(3)) == (
        "the Keras model has layers beyond the recurrent stack (dense): no framework check")


# -- cuDNN -----------------------------------------------------------------------------------


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@pytest.mark.skipif(_cuda(), reason="a CUDA GPU is here: the GPU test runs instead")
def test_cudnn_says_it_needs_a_cuda_gpu(tmp_path: Path) -> None:
    run = get("cudnn").framework_forward
    assert run is not None
    model = RNN.random(Spec("lstm", 3, 4))
    rnnport.write(model, "cudnn", path=tmp_path / "m.npy")
    found = run(tmp_path / "m.npy", model, _x(3))
    assert isinstance(found, str) and found.endswith(": no framework check")
    assert "needs a CUDA GPU" in found or "PyTorch, which is not installed" in found
    parts = rnnport.stack([model, RNN.random(Spec("gru", 4, 2))])
    assert run([], parts, _x(3)) == ("a stack of differing parts is no single cuDNN network: "
                                     "no framework check")


@pytest.mark.skipif(not _cuda(), reason="real cuDNN needs a CUDA GPU, and the suite hides the "
                    "machine's GPUs unless CUDA_VISIBLE_DEVICES is set (the check below runs "
                    "tools/check_cudnn_gpu.py on them in any case)")
def test_cudnn_runs_the_buffer_rnnport_wrote_on_the_gpu(tmp_path: Path) -> None:
    import torch

    run = get("cudnn").framework_forward
    assert run is not None
    settings = (torch.backends.cudnn.enabled, torch.backends.cudnn.allow_tf32)
    for index, spec in enumerate([Spec("lstm", 3, 5, num_layers=2, bidirectional=True, proj_size=2),
                                  Spec("gru", 4, 3, num_layers=3, bidirectional=True),
                                  Spec("rnn_relu", 3, 4, num_layers=2, bias=False),
                                  Spec("rnn_tanh", 3, 4, bidirectional=True)]):
        model = RNN.random(spec, seed=index)
        back = _written(model, "cudnn", tmp_path / f"m{index}.npy")
        label, y = _run("cudnn", tmp_path / f"m{index}.npy", back, _x(spec.input_size))
        assert label.startswith("cuDNN ") and f"running m{index}.npy" in label
        _close(y, model.forward(_x(spec.input_size))[0])
        _, unchanged = _run("cudnn", tmp_path / f"m{index}.npy", _other(back),
                            _x(spec.input_size))
        np.testing.assert_array_equal(unchanged, y)
    assert (torch.backends.cudnn.enabled, torch.backends.cudnn.allow_tf32) == settings
    single = RNN.random(Spec("lstm", 3, 4))
    buffer = rnnport.write(single, "cudnn", bias_mode="single_input")
    found = run(buffer, rnnport.read(buffer, "cudnn", cell="lstm", input_size=3, hidden_size=4,
                                     bias_mode="single_input"), _x(3))
    assert found == ("the buffer holds 128 elements, and PyTorch's cuDNN module for an LSTM "
                     "3→4 takes 144 (bias_mode='double'; it has no single-bias modes): "
                     "no framework check")


def test_real_cudnn_runs_rnnports_buffers_when_a_gpu_is_here() -> None:
    """``tools/check_cudnn_gpu.py`` in a process that sees the machine's GPUs: every buffer
    rnnport writes runs in real cuDNN and equals PyTorch's own weight space bit for bit."""
    import os
    import subprocess
    import sys

    from conftest import GPUS_SHOWN

    root = Path(__file__).resolve().parent.parent
    env = {key: value for key, value in os.environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    if GPUS_SHOWN is not None:
        env["CUDA_VISIBLE_DEVICES"] = GPUS_SHOWN
    env["PYTHONPATH"] = str(root / "src")
    result = subprocess.run([sys.executable, str(root / "tools" / "check_cudnn_gpu.py")],
                            env=env, capture_output=True, text=True, timeout=600, check=False)
    if result.returncode == 2:
        pytest.skip(f"no CUDA GPU: {result.stdout.strip()}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all match." in result.stdout


# -- LiteRT ----------------------------------------------------------------------------------

TFLITE_CASES = ["torch_lstm_proj_bi_2layer", "torch_gru_bi_3layer", "torch_rnn_relu",
                "keras_bi_gru", "keras_gru_reset_before", "keras_stack_mixed_bi"]


@pytest.mark.parametrize("name", TFLITE_CASES)
def test_litert_runs_the_file_rnnport_wrote_and_computes_the_golden_output(
        name: str, tmp_path: Path) -> None:
    """rnnport writes batch 1 (state tensors need a fixed batch): the check runs a batch of
    two in two pieces, resetting the state between them."""
    label, back = _golden("tflite", name, tmp_path / "model.tflite")
    assert label.startswith("the LiteRT interpreter running")
    x = _x(back.input_size, seed=3)
    _, y = _run("tflite", tmp_path / "model.tflite", back.astype(np.float32), x)
    _close(y, back.forward(x)[0])


def test_litert_runs_a_converted_file_at_the_shape_it_fixes() -> None:
    golden = Path(__file__).parent / "golden" / "tflite"
    model = rnnport.read(golden / "bi_gru.tflite")
    fixed = get("tflite").fixed_input
    assert fixed is not None and fixed(golden / "bi_gru.tflite") == (2, 5)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    _, y = _run("tflite", golden / "bi_gru.tflite", model, x)
    _close(y, model.forward(x)[0])
    said = get("tflite").framework_forward(golden / "bi_gru.tflite", model,  # type: ignore[misc]
                                           _x(3))
    assert isinstance(said, str) and "fixed at (2, 5, 3)" in said


def test_litert_says_why_it_cannot_run(tmp_path: Path) -> None:
    golden = Path(__file__).parent / "golden" / "tflite"
    run = get("tflite").framework_forward
    assert run is not None
    last = rnnport.read(golden / "gru_last.tflite")
    x = np.zeros((2, 5, 3), np.float32)
    assert "no one tensor holding the network's y" in run(golden / "gru_last.tflite", last, x)
    int8 = rnnport.read(golden / "lstm_int8.tflite", dequantize=True)
    assert "is not the network's float32 x" in run(golden / "lstm_int8.tflite", int8, x)
    assert "only a .tflite file" in run((golden / "bi_gru.tflite").read_bytes(), last, x)
