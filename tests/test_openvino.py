"""OpenVINO IR: golden IRs ``openvino.convert_model`` wrote (``tools/golden_openvino.py``)
read against OpenVINO's own outputs, IRs rnnport writes run by OpenVINO, and damaged and
hostile IRs refused by name."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.cli import main
from rnnport.errors import FormatError, LimitError, UnsupportedFeatureError
from rnnport.formats.openvino import IR
from rnnport.formats.openvino.session import framework_forward

GOLDEN = Path(__file__).parent / "golden" / "openvino"
CASES = sorted(path.stem for path in GOLDEN.glob("*.npz"))
NETWORKS = [name for name in CASES if not name.endswith("_head")]
# f16 weights are exact f16 numbers and both sides compute in f32 with them: as close as f32.
TOLERANCE = 1e-5


def _case(name: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return arrays, json.loads(str(arrays["meta"]))


@pytest.fixture(scope="module")
def openvino() -> Any:
    """OpenVINO, a test dependency: missing, these tests fail."""
    import openvino

    return openvino


def _run(openvino: Any, ir: IR | Path, x: np.ndarray) -> dict[str, np.ndarray]:
    core = openvino.Core()
    model = core.read_model(str(ir)) if isinstance(ir, Path) else core.read_model(
        model=ir.xml.decode(), weights=openvino.Tensor(np.frombuffer(ir.weights, np.uint8).copy()))
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    results = compiled({0: x})
    return {next(iter(output.get_names())): np.asarray(results[output])
            for output in compiled.outputs}


# -- golden IRs -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", NETWORKS)
def test_a_converted_ir_reads_as_openvino_computes_it(name: str) -> None:
    arrays, meta = _case(name)
    model = rnnport.read(GOLDEN / f"{name}.xml")
    assert isinstance(model, RNN)
    assert model.dtype == (np.float16 if meta["f16"] else np.float32)
    y, _ = model.forward(arrays["x"])
    assert np.abs(y - arrays["y_openvino"]).max() < TOLERANCE
    # PyTorch or ONNX Runtime on the same weights (f32): the f16 model rounded them.
    assert np.abs(y - arrays["y_source"]).max() < (2e-3 if meta["f16"] else TOLERANCE)


def test_the_golden_cases_are_the_networks_they_were_made_from() -> None:
    read = {name: rnnport.read(GOLDEN / f"{name}.xml").spec for name in CASES}
    assert read["torch_lstm_bi_2layer"] == Spec("lstm", 5, 8, num_layers=2, bidirectional=True)
    assert read["onnx_lstm_bi_2layer"] == read["torch_lstm_bi_2layer"]
    assert read["onnx_gru_reset_before"] == Spec("gru", 5, 8, reset_after=False)
    assert read["torch_gru"] == read["torch_gru_head"] == Spec("gru", 5, 8)
    assert read["torch_rnn_relu"] == Spec("rnn_relu", 5, 8)


@pytest.mark.parametrize("name", CASES)
def test_a_converted_ir_round_trips_bit_exactly(tmp_path: Path, name: str) -> None:
    model = rnnport.read(GOLDEN / f"{name}.xml")
    assert rnnport.read(rnnport.write(model, "openvino")) == model
    rnnport.write(model, "openvino", path=tmp_path / "m.xml")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.bin", "m.xml"]
    for source in (tmp_path / "m.xml", tmp_path):
        assert rnnport.read(source) == model
    # a .bin is PyTorch's by name (a pytorch_model.bin), but not one beside an IR's .xml
    assert rnnport.read(tmp_path / "m.bin") == rnnport.read(tmp_path / "m.bin", "openvino")
    assert rnnport.read(tmp_path / "m.bin") == model


def test_swapping_two_gates_changes_the_output() -> None:
    arrays, _ = _case("torch_lstm_bi_2layer")
    model = rnnport.read(GOLDEN / "torch_lstm_bi_2layer.xml")
    assert isinstance(model, RNN)
    params = [[dict(named) for named in layer] for layer in model.params]
    hidden = model.spec.hidden_size
    weight = params[0][0]["weight_ih"].copy()
    weight[:hidden], weight[hidden:2 * hidden] = model.params[0][0]["weight_ih"][hidden:2 * hidden], \
        model.params[0][0]["weight_ih"][:hidden]
    params[0][0]["weight_ih"] = weight
    swapped, _ = RNN(model.spec, params).forward(arrays["x"])
    assert np.abs(swapped - arrays["y_openvino"]).max() > 1e-2


def test_notes_say_what_is_beside_the_network() -> None:
    declared = rnnport.formats.get("openvino")
    head = declared.source_notes(GOLDEN / "torch_gru_head.xml")
    assert any("other computing layers" in note and "MatMul" in note and "Add" in note
               for note in head)
    assert any("time before batch" in note
               for note in declared.source_notes(GOLDEN / "onnx_gru_reset_before.xml"))
    assert any("f16" in note for note in declared.source_notes(GOLDEN / "torch_lstm_f16.xml"))
    assert declared.source_notes(GOLDEN / "torch_gru.xml") == []


def test_reading_imports_no_framework() -> None:
    script = ("import sys, glob, rnnport\n"
              f"for path in sorted(glob.glob({str(GOLDEN / '*.xml')!r})):\n"
              "    rnnport.read(path).forward(__import__('numpy').zeros((1, 2, 5), 'float32'))\n"
              "print(','.join(m for m in ('openvino', 'torch', 'onnx', 'onnxruntime') "
              "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""


# -- IRs rnnport writes, run by OpenVINO ----------------------------------------------------

LIVE = {
    "lstm_bi_2layer": lambda: RNN.random(Spec("lstm", 5, 8, num_layers=2, bidirectional=True),
                                         seed=1),
    "gru_reset_before_reverse": lambda: RNN.random(Spec("gru", 5, 8, reset_after=False,
                                                        reverse=True), seed=2),
    "gru_bi_2layer_f16": lambda: RNN.random(Spec("gru", 5, 8, num_layers=2,
                                                 bidirectional=True), seed=3,
                                            dtype=np.float16),
    "rnn_relu_bi_nobias": lambda: RNN.random(Spec("rnn_relu", 5, 8, bidirectional=True,
                                                  bias=False), seed=4),
    "stack_lstm_gru": lambda: rnnport.model.stack([
        RNN.random(Spec("lstm", 5, 8, bidirectional=True), seed=5),
        RNN.random(Spec("gru", 16, 6), seed=6)]),
}


@pytest.mark.parametrize("name", sorted(LIVE))
def test_openvino_runs_what_rnnport_writes(openvino: Any, tmp_path: Path, name: str) -> None:
    model = LIVE[name]()
    x = np.random.default_rng(0).uniform(-1, 1, (3, 6, 5)).astype(np.float32)
    rnnport.write(model, "openvino", path=tmp_path / "net.xml")
    got = _run(openvino, tmp_path / "net.xml", x)
    # The IR holds one bias, the two summed in the weights' precision: for float16 weights
    # a rounding of its own, so the network written is the one read back from the file.
    written = rnnport.read(tmp_path / "net.xml")
    y, state = written.forward(x)
    assert np.abs(got["y"] - y).max() < TOLERANCE
    if written.dtype == np.float32:
        assert np.abs(got["y"] - model.forward(x)[0]).max() < TOLERANCE
    if isinstance(model, RNN):
        h, c = state if model.spec.cell == "lstm" else (state, None)
        assert np.abs(got["h_n"] - h).max() < TOLERANCE
        if c is not None:
            assert np.abs(got["c_n"] - c).max() < TOLERANCE
    else:
        assert {"h_n_0", "c_n_0", "h_n_1"} <= set(got)
    assert written == rnnport.read(rnnport.write(model, "openvino"))


def test_convert_verify_runs_the_source_and_the_output_in_openvino(
        openvino: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "again.xml"
    assert main(["convert", str(GOLDEN / "onnx_lstm_bi_2layer.xml"), str(target),
                 "--verify"]) == 0
    out = capsys.readouterr().out
    assert out.count("OpenVINO (CPU, f32)") == 2, out
    assert re.search(r"stage 2, OpenVINO \(CPU, f32\).*max", out), out


def test_framework_forward_says_why_it_cannot_check() -> None:
    model = rnnport.read(GOLDEN / "torch_gru_head.xml")
    found = framework_forward(GOLDEN / "torch_gru_head.xml", model,
                              np.zeros((1, 2, 5), np.float32))
    assert isinstance(found, str) and "other computing layers" in found
    assert "only an IR" in str(framework_forward({"a": 1}, model, np.zeros((1, 2, 5))))


@pytest.mark.parametrize(("shape", "fixed"), [("?,?,3", None), ("1,?,3", (1, 7)),
                                              ("?,5,3", (2, 5)), ("4,6,3", (4, 6))])
def test_verify_feeds_the_batch_or_time_an_input_fixes(tmp_path: Path, shape: str,
                                                      fixed: tuple[int, int] | None) -> None:
    # convert_model(..., input=[1, -1, 4]) fixes the batch alone
    path = tmp_path / "m.xml"
    rnnport.write(RNN.random(Spec("gru", 3, 4), seed=1), "openvino", path=path)
    _edit(path, 'shape="?,?,3"', f'shape="{shape}"')
    assert rnnport.formats.get("openvino").fixed_input(path) == fixed


def test_writing_refuses_what_the_opset_cannot_hold() -> None:
    with pytest.raises(UnsupportedFeatureError, match="projection"):
        rnnport.write(RNN.random(Spec("lstm", 3, 4, proj_size=2)), "openvino")
    with pytest.raises(UnsupportedFeatureError, match="peepholes"):
        rnnport.write(RNN.random(Spec("lstm", 3, 4, peepholes=True)), "openvino")
    with pytest.raises(UnsupportedFeatureError, match="float64"):
        rnnport.write(RNN.random(Spec("gru", 3, 4), dtype=np.float64), "openvino")


# -- damaged and hostile IRs ----------------------------------------------------------------


BIDIRECTIONAL = Spec("lstm", 3, 4, bidirectional=True)


def _written(tmp_path: Path, spec: Spec = BIDIRECTIONAL) -> Path:
    path = tmp_path / "m.xml"
    rnnport.write(RNN.random(spec, seed=7), "openvino", path=path)
    return path


def _edit(path: Path, old: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, count))


BOMB = ('<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY a "aaaaaaaaaa">'
        '<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]>\n<net version="11">&b;</net>')
EXTERNAL = ('<?xml version="1.0"?>\n<!DOCTYPE net [<!ENTITY secret SYSTEM '
            '"file:///etc/passwd">]>\n<net version="11">&secret;</net>')


def _first_weights(path: Path) -> str:
    return re.search(r'<layer id="\d+" name="lstm/layer0/W"[^>]*>\s*<data [^>]*/>',
                     path.read_text()).group(0)  # type: ignore[union-attr]


HOSTILE: dict[str, tuple[Callable[[Path], None], type[Exception], str]] = {
    "entity bomb": (lambda path: path.write_text(BOMB), FormatError, "DOCTYPE"),
    "external entity": (lambda path: path.write_text(EXTERNAL), FormatError, "DOCTYPE"),
    "not XML": (lambda path: path.write_bytes(b"<net><layers>\xff"), FormatError,
                "not well-formed"),
    "deep nesting": (lambda path: path.write_text("<net>" + "<a>" * 100 + "</a>" * 100
                                                  + "</net>"), FormatError, "nested"),
    "lying offset": (lambda path: _edit(path, _first_weights(path), re.sub(
        r'offset="\d+"', 'offset="99999999"', _first_weights(path))), FormatError,
        "truncated"),
    "size against shape": (lambda path: _edit(path, _first_weights(path), re.sub(
        r'size="\d+"', 'size="8"', _first_weights(path))), FormatError, "agree"),
    "huge shape": (lambda path: _edit(path, _first_weights(path), re.sub(
        r'shape="[^"]*"', 'shape="2, 16000000000, 3"', re.sub(
            r'size="\d+"', 'size="384000000000"', _first_weights(path)))), FormatError,
        "truncated"),
    "truncated bin": (lambda path: path.with_suffix(".bin").write_bytes(
        path.with_suffix(".bin").read_bytes()[:40]), FormatError, "truncated"),
    "missing bin": (lambda path: path.with_suffix(".bin").unlink(), FormatError,
                    "no weights file"),
    "cycle": (lambda path: _edit(path, "</edges>", '<edge from-layer="2" from-port="1" '
                                 'to-layer="0" to-port="0" /></edges>'), FormatError,
              "edge"),
    "clip": (lambda path: _edit(path, 'clip="0"', 'clip="3"'), UnsupportedFeatureError,
             "clip=3"),
    "activations": (lambda path: _edit(path, '"sigmoid, tanh, tanh"', '"relu, tanh, tanh"'),
                    UnsupportedFeatureError, "activations"),
    "opset1 LSTMSequence": (lambda path: _edit(path, 'type="LSTMSequence" version="opset5"',
                                               'type="LSTMSequence" version="opset1"'),
                            UnsupportedFeatureError, "opset1"),
    "TensorIterator": (lambda path: _edit(path, 'type="LSTMSequence"', 'type="TensorIterator"'),
                       UnsupportedFeatureError, "TensorIterator"),
    "unknown element type": (lambda path: _edit(path, 'element_type="f32" shape="2, 16, 3"',
                                                'element_type="nf4" shape="2, 16, 3"'),
                             UnsupportedFeatureError, "nf4"),
    "unevaluated layer": (lambda path: _edit(path, 'type="Convert" version="opset1">\n'
                                             '\t\t\t<data destination_type="i32"',
                                             'type="Tile" version="opset1">\n'
                                             '\t\t\t<data destination_type="i32"'),
                          FormatError, "does not evaluate Tile"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_damaged_or_hostile_ir_is_an_rnnport_error(tmp_path: Path, name: str) -> None:
    path = _written(tmp_path)
    damage, error, text = HOSTILE[name]
    damage(path)
    with pytest.raises(error, match=re.escape(text)):
        rnnport.read(path, "openvino")


def test_weights_computed_by_arithmetic_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.xml"
    rnnport.write(RNN.random(Spec("gru", 3, 4), dtype=np.float16), "openvino", path=path)
    _edit(path, 'type="Convert" version="opset1">\n\t\t\t<data destination_type="f32"',
          'type="Relu" version="opset1">\n\t\t\t<data destination_type="f32"')
    with pytest.raises(UnsupportedFeatureError, match=r"computed by layer .*\(Relu"):
        rnnport.read(path)


def test_a_fixed_non_zero_initial_state_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path, Spec("gru", 3, 4))
    weights = path.with_suffix(".bin").read_bytes()
    zero = np.float32(0).tobytes()
    # the zero the initial state is broadcast from: the only f32 scalar constant
    scalar = re.search(r'element_type="f32" shape="" offset="(\d+)"', path.read_text())
    assert scalar is not None
    offset = int(scalar.group(1))
    assert weights[offset:offset + 4] == zero
    path.with_suffix(".bin").write_bytes(weights[:offset] + np.float32(0.5).tobytes()
                                         + weights[offset + 4:])
    with pytest.raises(UnsupportedFeatureError, match="non-zero"):
        rnnport.read(path)


def test_a_read_past_the_limits_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    with rnnport.limits(expansion=1e-4), pytest.raises(LimitError, match="expansion"):
        rnnport.read(path)


def _between_w(path: Path, kind: str, levels: int, ports: int) -> None:
    """Put ``levels`` layers of ``kind`` between the first W constant and its layer, each
    taking the one before on all of its ``ports`` inputs."""
    text = path.read_text()
    found = re.search(r'<layer id="(\d+)" name="lstm/layer0/W"', text)
    assert found is not None
    edge = re.search(rf'<edge from-layer="{found.group(1)}" from-port="(\d+)" '
                     r'to-layer="(\d+)" to-port="(\d+)" />', text)
    assert edge is not None
    layers, edges, source = [], [], (found.group(1), edge.group(1))
    for level in range(levels):
        number = 1000 + level
        inputs = "".join(f'<port id="{port}" />' for port in range(ports))
        data = '<data axis="0" />' if kind == "Concat" else ""
        layers.append(f'<layer id="{number}" name="copy{level}" type="{kind}" '
                      f'version="opset1">{data}<input>{inputs}</input><output>'
                      f'<port id="{ports}" /></output></layer>')
        edges += [f'<edge from-layer="{source[0]}" from-port="{source[1]}" '
                  f'to-layer="{number}" to-port="{port}" />' for port in range(ports)]
        source = (str(number), str(ports))
    text = text.replace(edge.group(0), f'<edge from-layer="{source[0]}" from-port='
                        f'"{source[1]}" to-layer="{edge.group(2)}" to-port="{edge.group(3)}" />')
    path.write_text(text.replace("</layers>", "".join(layers) + "</layers>")
                    .replace("</edges>", "".join(edges) + "</edges>"))


@pytest.mark.parametrize(("kind", "levels", "ports", "inputs"),
                         [("Concat", 6, 8, 3), ("Transpose", 400, 1, 2000)])
def test_layers_that_copy_the_weights_over_and_over_are_refused(
        tmp_path: Path, kind: str, levels: int, ports: int, inputs: int) -> None:
    # Concat: a 20 kB IR whose W of 192 bytes would take 50 MB (8 ** 6 copies); Transpose:
    # a 250 kB IR whose W would be copied, and each copy kept, 400 times (51 MB)
    path = _written(tmp_path, Spec("lstm", inputs, 4))
    _between_w(path, kind, levels, ports)
    with pytest.raises(LimitError, match="expansion"):
        rnnport.read(path)


def test_an_xml_that_is_no_ir_is_not_sniffed(tmp_path: Path) -> None:
    (tmp_path / "other.xml").write_text('<?xml version="1.0"?><config/>')
    with pytest.raises(FormatError, match="cannot tell the format"):
        rnnport.read(tmp_path / "other.xml")
    shutil.copy(GOLDEN / "torch_gru.xml", tmp_path / "alone.xml")
    with pytest.raises(FormatError, match="no weights file alone.bin"):
        rnnport.read(tmp_path / "alone.xml")
