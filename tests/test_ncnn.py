"""ncnn ``.param``/``.bin`` models (``rnnport.formats.ncnn``), against ncnn's own ``Net``.

Expected values: the golden files' ``y_ncnn`` (ncnn running the files pnnx wrote from
PyTorch modules) and ``y_torch`` (PyTorch), made by ``tools/golden_ncnn.py``; and ncnn
running the files rnnport writes, driven here through the ``ncnn`` package's own API.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import AmbiguousSourceError, FormatError, UnsupportedFeatureError
from rnnport.formats.ncnn import FORMAT, NcnnModel, notes, parse_param

GOLDEN = Path(__file__).parent / "golden" / "ncnn"
CASES = {case["name"]: case for case in json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"]}
# ncnn widens float16 weights to float32 and computes in float32, as rnnport does: the
# bound is float32's. PyTorch ran the float32 weights pnnx rounded to float16: |Δ| measured
# 4.7e-5 over 6 steps (each weight off by up to 2⁻¹¹ of itself), bounded here by 2e-4.
TORCH_F16 = 2e-4
TAG_FLOAT16, TAG_INT8 = 0x01306B47, 0x000D4B38


@pytest.fixture(scope="module")
def ncnn() -> Any:
    """The runtime itself: a test dependency, so a missing one fails these tests."""
    import ncnn as runtime

    return runtime


def golden(name: str) -> tuple[Path, dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz") as data:
        return GOLDEN / f"{name}.ncnn.param", dict(data)


def run_ncnn(ncnn: Any, files: NcnnModel, folder: Path, x: np.ndarray) -> np.ndarray:
    """ncnn's Net on rnnport's files, one sequence of ``x`` (batch, time, I) at a time."""
    (folder / "m.param").write_bytes(files.param)
    (folder / "m.bin").write_bytes(files.bin)
    out = []
    with ncnn.Net() as net:
        net.opt.use_fp16_storage = net.opt.use_fp16_packed = False  # float32, as rnnport
        net.opt.use_fp16_arithmetic = net.opt.use_bf16_storage = False
        assert net.load_param(str(folder / "m.param")) == 0
        assert net.load_model(str(folder / "m.bin")) == 0
        for sequence in x:
            with net.create_extractor() as extractor:
                extractor.input("in0", ncnn.Mat(np.ascontiguousarray(sequence, np.float32)))
                status, y = extractor.extract("out0")
                assert status == 0
                out.append(np.array(y))
    return np.stack(out)


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_files_compute_what_ncnn_and_pytorch_computed(name: str) -> None:
    path, expected = golden(name)
    model = rnnport.read(path)
    y, _ = model.forward(expected["x"][None])
    np.testing.assert_allclose(y[0], expected["y_ncnn"], atol=1e-5, rtol=0)
    bound = TORCH_F16 if CASES[name]["fp16"] else 1e-5
    np.testing.assert_allclose(y[0], expected["y_torch"], atol=bound, rtol=0)
    assert model.dtype == (np.float16 if CASES[name]["fp16"] else np.float32)
    native = rnnport.write(model, "ncnn")
    assert rnnport.read(native, "ncnn") == model  # bit-exact round trip
    if name != "gru_head":  # pnnx's layout is rnnport's: the same bytes
        assert native.bin == (GOLDEN / f"{name}.ncnn.bin").read_bytes()


def test_what_the_golden_files_hold() -> None:
    lstm = rnnport.read(GOLDEN / "lstm_bi_2layer.ncnn.param")
    assert lstm.spec == Spec("lstm", 5, 8, num_layers=2, bidirectional=True)
    assert rnnport.read(GOLDEN / "lstm_proj.ncnn.param").spec.proj_size == 3
    assert rnnport.read(GOLDEN / "rnn_bi.ncnn.param").spec.cell == "rnn_tanh"
    assert notes(GOLDEN / "gru_head.ncnn.param") == [
        "other layers beside the network: gemm_0 (Gemm), gemm_1 (Gemm)"]
    assert rnnport.formats.sniff(GOLDEN / "gru.ncnn.param") == "ncnn"


def test_swapping_two_gates_changes_the_output() -> None:
    """The golden check can fail: ncnn's O and G rows read as the other gate differ."""
    path, expected = golden("lstm_proj")
    model = rnnport.read(path)
    weights = dict(model.params[0][0])
    hidden = model.spec.hidden_size
    swapped = np.concatenate([weights["weight_ih"][:2 * hidden], weights["weight_ih"][3 * hidden:],
                              weights["weight_ih"][2 * hidden:3 * hidden]])
    wrong = RNN(model.spec, [[{**weights, "weight_ih": swapped}]])
    y, _ = wrong.forward(expected["x"][None])
    assert np.abs(y[0] - expected["y_ncnn"]).max() > 1e-2


@pytest.mark.parametrize("spec", [
    Spec("lstm", 4, 6, num_layers=2, bidirectional=True, proj_size=3),
    Spec("gru", 3, 5, reverse=True),
    Spec("gru", 4, 5, num_layers=2, bidirectional=True, bias=False),
    Spec("rnn_tanh", 3, 4, num_layers=3, bidirectional=True),
], ids=["lstm_bi_proj", "gru_reverse", "gru_bi_nobias", "rnn_stack"])
def test_ncnn_runs_what_rnnport_writes(ncnn: Any, tmp_path: Path, spec: Spec) -> None:
    model = RNN.random(spec, seed=5)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 7, spec.input_size)).astype(np.float32)
    got = run_ncnn(ncnn, rnnport.write(model, "ncnn"), tmp_path, x)
    np.testing.assert_allclose(got, model.forward(x)[0], atol=1e-5, rtol=0)


def test_ncnn_runs_float16_weights_and_a_stack_rnnport_writes(ncnn: Any, tmp_path: Path) -> None:
    lstm = RNN.random(Spec("lstm", 3, 5), seed=2, dtype=np.float16)
    gru = RNN.random(Spec("gru", 5, 4, bidirectional=True), seed=3, dtype=np.float16)
    model = rnnport.stack([lstm, gru])
    files = rnnport.write(model, "ncnn", path=tmp_path / "s.ncnn.param")
    assert (tmp_path / "s.ncnn.bin").read_bytes() == files.bin
    assert struct.unpack("<I", files.bin[:4])[0] == TAG_FLOAT16
    x = np.random.default_rng(2).uniform(-1, 1, (2, 6, 3)).astype(np.float32)
    got = run_ncnn(ncnn, files, tmp_path, x)
    # The file holds each gate's two biases summed in float16; ncnn computes in float32
    # from the float16 weights, and so does the model read back, widened.
    back = rnnport.read(tmp_path / "s.ncnn.param")
    assert back.dtype == np.float16 and rnnport.write(back, "ncnn") == files
    np.testing.assert_allclose(got, back.astype(np.float32).forward(x)[0], atol=1e-5, rtol=0)
    label, y = FORMAT.framework_forward(tmp_path / "s.ncnn.param", model, x)
    assert label.startswith("ncnn") and np.allclose(y, got, atol=1e-6)


def test_reading_imports_no_framework() -> None:
    script = (f"import sys, rnnport; rnnport.read({str(GOLDEN / 'gru_head.ncnn.param')!r})"
              ".forward([[[0.0] * 5]]); print([m for m in ('ncnn', 'torch', 'pnnx') "
              "if m in sys.modules])")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"


# -- refusals and damaged files --------------------------------------------------------------


def files_of(name: str) -> NcnnModel:
    return NcnnModel((GOLDEN / f"{name}.ncnn.param").read_bytes(),
                     (GOLDEN / f"{name}.ncnn.bin").read_bytes())


def edited(name: str, old: bytes, new: bytes) -> NcnnModel:
    files = files_of(name)
    assert old in files.param
    return files._replace(param=files.param.replace(old, new))


@pytest.mark.parametrize(("files", "error", "message"), [
    (files_of("gru")._replace(bin=files_of("gru").bin[:-10]), FormatError,
     "layer 'gru_0' (GRU) weight_hc_data needs 768 bytes at offset 620"),
    (edited("gru", b"1=120", b"1=1200000000"), FormatError, "the .bin holds 1,388"),
    (edited("gru", b"1=120", b"1=121"), FormatError, "weight_data_size a multiple of"),
    (edited("gru", b"1=120", b"1=99999999999"), FormatError, "32-bit integer"),
    (edited("gru", b"2=0", b"2=3"), FormatError, "direction 2=3"),
    (edited("gru", b"2=0", b"2=0 8=1"), UnsupportedFeatureError, "int8 weights"),
    (edited("gru", b"2=0", b"40=1"), FormatError, "param key 40"),
    (edited("gru", b"7767517", b"7767516"), FormatError, "magic number 7767517"),
    (edited("gru", b"2 2", b"3 2"), FormatError, "truncated"),
    (edited("gru", b"2 2", b"1 2"), FormatError, "more follow"),
    (edited("gru", b"2 2", b"2 999999999999"), FormatError, "the blob count"),
    (edited("gru", b"gru_0", b"gr\xc3\xbc_0"), FormatError, "not ASCII"),
    (edited("gru_head", b"Gemm                     gemm_0", b"Deconvolution            gemm_0"),
     UnsupportedFeatureError, "layer 'gemm_0' (Deconvolution) comes before"),
    (NcnnModel(struct.pack("<ii", 7767517, 2), b""), UnsupportedFeatureError, "binary .param.bin"),
    (files_of("gru")._replace(bin=struct.pack("<I", TAG_INT8) + files_of("gru").bin[4:]),
     UnsupportedFeatureError, "stored as int8"),
    (files_of("gru")._replace(bin=struct.pack("<I", 0xDEADBEEF) + files_of("gru").bin[4:]),
     FormatError, "storage tag 0xDEADBEEF"),
    (edited("rnn_bi", b"RNN ", b"Cat "), FormatError, "holds no LSTM, GRU or RNN layer"),
])
def test_damaged_and_unsupported_files_are_rnnport_errors(files: NcnnModel, error: type,
                                                          message: str) -> None:
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace(".", r"\.")):
        rnnport.read(files, "ncnn")


def test_several_networks_are_listed_and_picked_by_layer(tmp_path: Path) -> None:
    # Two LSTMs whose widths do not chain: two networks (each named by its layers).
    first = rnnport.write(RNN.random(Spec("lstm", 3, 4), seed=1), "ncnn")
    second = RNN.random(Spec("lstm", 7, 2), seed=2)
    text = first.param.replace(b"2 2\n", b"3 3\n") + \
        b"LSTM lstm_b 1 1 out0 out1 0=2 1=56 2=0 3=2\n"
    written = rnnport.write(second, "ncnn")
    files = NcnnModel(text, first.bin + written.bin)
    with pytest.raises(AmbiguousSourceError, match="layer='lstm_0'"):
        rnnport.read(files, "ncnn")
    assert rnnport.read(files, "ncnn", layer="lstm_b") == rnnport.read(written, "ncnn")
    assert [value for value, _ in FORMAT.networks(files).entries] == ["lstm_0", "lstm_b"]
    with pytest.raises(FormatError, match="no recurrent layer named 'nope'"):
        rnnport.read(files, "ncnn", layer="nope")


def test_the_bin_given_reads_the_param_beside_it(ncnn: Any, tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 4), seed=2)
    rnnport.write(model, "ncnn", path=tmp_path / "m.ncnn.param")
    weights = tmp_path / "m.ncnn.bin"
    assert rnnport.read(weights) == rnnport.read(tmp_path / "m.ncnn.param")
    assert FORMAT.input_files(weights) == [tmp_path / "m.ncnn.param"]
    assert notes(weights) == []
    x = np.random.default_rng(3).uniform(-1, 1, (1, 4, 3)).astype(np.float32)
    label, y = FORMAT.framework_forward(weights, model, x)
    assert label.startswith("ncnn") and np.allclose(y, model.forward(x)[0], atol=1e-5)
    # the same bytes beside no .param are nobody's: a .bin is PyTorch's by its bytes alone
    shutil.copy(weights, tmp_path / "other.bin")
    with pytest.raises(FormatError, match="cannot tell the format"):
        rnnport.read(tmp_path / "other.bin")


def test_a_bin_beside_the_param_only(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "gru.ncnn.bin").write_bytes((GOLDEN / "gru.ncnn.bin").read_bytes())
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "gru.ncnn.param").write_bytes((GOLDEN / "gru.ncnn.param").read_bytes())
    with pytest.raises(FormatError, match="no such file"):
        rnnport.read(folder / "gru.ncnn.param")
    (folder / "gru.ncnn.bin").symlink_to(outside / "gru.ncnn.bin")
    with pytest.raises(FormatError, match="leads out of"):
        rnnport.read(folder / "gru.ncnn.param")


@pytest.mark.parametrize(("spec", "named"), [
    (Spec("rnn_relu", 2, 3), "simple RNN with relu"),
    (Spec("gru", 2, 3, reset_after=False), "reset-before GRU"),
    (Spec("lstm", 2, 3, peepholes=True), "peepholes"),
    (Spec("lstm", 2, 3, layer_norm=True), "layer-norm LSTM"),
])
def test_what_ncnn_cannot_compute_is_refused_by_name(spec: Spec, named: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=f"ncnn format cannot hold.*{named}"):
        rnnport.write(RNN.random(spec), "ncnn")
    with pytest.raises(UnsupportedFeatureError, match="float64"):
        rnnport.write(RNN.random(Spec("gru", 2, 3), dtype=np.float64), "ncnn")


def test_two_biases_are_summed_and_a_gru_keeps_its_candidate_biases_apart() -> None:
    model = RNN.random(Spec("gru", 2, 3), seed=4)
    back = rnnport.read(rnnport.write(model, "ncnn"), "ncnn")
    theirs, ours = model.params[0][0], back.params[0][0]
    np.testing.assert_array_equal(ours["bias_ih"][:6], theirs["bias_ih"][:6] + theirs["bias_hh"][:6])
    np.testing.assert_array_equal(ours["bias_ih"][6:], theirs["bias_ih"][6:])
    np.testing.assert_array_equal(ours["bias_hh"][6:], theirs["bias_hh"][6:])
    assert rnnport.param_count(model, "ncnn") == 3 * 3 * (2 + 3) + 4 * 3


def test_a_chain_through_split_is_one_network_and_a_str_param_reads() -> None:
    files = rnnport.write(RNN.random(Spec("gru", 3, 4, num_layers=2), seed=6), "ncnn")
    text = files.param.decode().replace("3 3\n", "4 5\n").replace(
        "1 1 in0 1 ", "1 1 in0 a ").replace("GRU                      gru_1",
        "Split split 1 2 a 1 b\nGRU                      gru_1")
    model = rnnport.read(NcnnModel(text, files.bin), "ncnn")  # type: ignore[arg-type]
    assert model == rnnport.read(files, "ncnn") and model.spec.num_layers == 2
    assert notes(NcnnModel(text.encode(), files.bin)) == [
        "other layers beside the network: split (Split)"]


def test_a_param_naming_millions_of_layers_is_refused_before_they_are_built() -> None:
    lines = b"".join(b"Noop n%d 0 0\n" % index for index in range(300_000))
    with pytest.raises(rnnport.LimitError, match="expansion"):
        rnnport.read(NcnnModel(b"7767517\n300000 1\n" + lines, b""), "ncnn")


def test_a_quoted_string_left_open_is_read_in_linear_time() -> None:
    # 1.5 million words after an opening quote (3 MB): joined one by one, 80 s and more
    param = (b'7767517\n1 1\nInput in0 0 1 in0 0="a b" 1="' + b"w " * 1_500_000)
    started = time.perf_counter()
    with pytest.raises(FormatError, match="quoted string should be; the .param is truncated"):
        rnnport.read(NcnnModel(param, b""), "ncnn")
    assert time.perf_counter() - started < 5
    layers = parse_param(b'7767517\n1 1\nInput in0 0 1 in0 0="a  b" 1="" 2=" x " 3=" "\n', "p")
    assert layers[0].params == {0: '"a b"', 1: '""', 2: '" x "', 3: '" "'}
