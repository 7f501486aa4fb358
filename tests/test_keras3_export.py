"""Keras 3 SavedModels (``model.export``, ``tf.saved_model.save``), read by tf2 without TensorFlow.

Expected values come from Keras 3.15 on TensorFlow 2.21 (the golden folders of
``tools/golden_keras3.py``): each recurrent layer's own input and output as Keras computed
them, and its ``get_weights()`` arrays. What a damaged graph does is checked on copies of
those folders with one op renamed in ``saved_model.pb`` (a same-length name keeps the
protocol buffer's lengths right). One test runs TensorFlow itself (``convert --verify``), in
a process of its own.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import cli
from rnnport.errors import AmbiguousSourceError, FormatError, LimitError, UnsupportedFeatureError
from rnnport.formats import get
from rnnport.io import tfproto

KERAS3 = Path(__file__).parent / "golden" / "keras3"
MAX_BYTES = 2_200_000


def _manifest() -> dict[str, Any]:
    return json.loads((KERAS3 / "MANIFEST.json").read_text())


def _load(name: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(KERAS3 / f"{name}.npz", allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


REFUSED = {  # (case, layer) → the words the UnsupportedFeatureError must hold
    ("keras3_refused", "backwards"): "go_backwards=True outside a Bidirectional",
    ("keras3_refused", "summed"): "merge_mode='sum'",
    ("keras3_refused", "gelu"): "Erfc, which no activation rnnport computes",
    ("keras3_refused", "sigmoid"): "activation='sigmoid'",
    ("keras3_refused", "unrolled"): "unroll=True",
    ("keras3_stacked_cells", "cells"): "steps 2 cells at once",
    # What agrees with rnnport's activations near 0: the step is also evaluated far from it.
    ("keras3_lookalikes", "relu6_rnn"): "it applies activation='relu6' (a SimpleRNN computes "
                                        "'tanh' or 'relu' here)",
    ("keras3_lookalikes", "relu6_gates"): "it applies relu6 (Relu6), which no activation "
                                          "rnnport computes uses",
    ("keras3_lookalikes", "capped"): "it applies a clip (Maximum, Minimum: relu(max_value=…), "
                                     "hard_tanh or ops.clip)",
    ("keras3_lookalikes", "silu"): "it applies silu (x·sigmoid(x)), which no activation",
    ("keras3_lookalikes", "mixed"): "Keras computes this layer in float16 (its state and "
                                    "sequence are float16 and it casts its weights to float16: "
                                    "a dtype policy such as 'mixed_float16' or 'float16'), and "
                                    "rnnport in float32",
    ("keras3_lookalikes", "mixed_bf16"): "Keras computes this layer in bfloat16",
    ("keras3_lookalikes", "half"): "Keras computes this layer in float16 (its state and "
                                   "sequence are float16:",
}
# Read from the model's input, not the layer's (see its test).
UNFLIPPED = ("keras3_lookalikes", "unflipped")
READABLE = [(name, stack) for name, case in _manifest()["cases"].items()
            for stack in case["stacks"] if (name, stack[0]) not in {*REFUSED, UNFLIPPED}]


def test_golden_folders_are_listed_distinct_and_small() -> None:
    manifest = _manifest()
    assert manifest["generator"] == "tools/golden_keras3.py"
    assert manifest["versions"]["keras"].startswith("3.")
    listed = {"MANIFEST.json"}
    for name, case in manifest["cases"].items():
        listed.update(case["files"])
        assert (KERAS3 / name / "saved_model.pb").is_file()
        _, arrays = _load(name)
        weights = [v.ravel() for k, v in arrays.items() if k.startswith("weights/")]
        if weights:  # random distinct weights: a swapped gate cannot pass unseen
            values = np.concatenate(weights)
            assert np.unique(values).size == values.size and not np.any(values == 0)
    present = {str(p.relative_to(KERAS3)) for p in KERAS3.rglob("*") if p.is_file()}
    assert present == listed
    assert sum((KERAS3 / name).stat().st_size for name in present) < MAX_BYTES


@pytest.mark.parametrize(("name", "stack"), READABLE, ids=[f"{n}-{s[0]}" for n, s in READABLE])
def test_exports_read_and_run_as_keras_did(name: str, stack: list[str]) -> None:
    meta, arrays = _load(name)
    source = str(KERAS3 / name)
    assert rnnport.formats.sniff(source) == "tf2"
    several = len(meta["stacks"]) > 1
    model = rnnport.read(source, layer=stack[0]) if several else rnnport.read(source)
    assert len(model.layers()) == len(stack)
    x = arrays[f"input/{stack[0]}"]
    expected = arrays[f"output/{stack[-1]}"]
    if stack == ["masked"]:  # x[1] ends in two zero steps, which Keras's mask skips
        lengths = np.array([x.shape[1], x.shape[1] - 2])
        y, _ = model.forward(x, lengths=lengths)
        for b, length in enumerate(lengths):
            np.testing.assert_allclose(y[b, :length], expected[b, :length],
                                       atol=meta["tolerance"], rtol=0)
        return
    y, _ = model.forward(x)
    if expected.ndim == 2:  # return_sequences=False: the last step
        y = y[:, -1]
    np.testing.assert_allclose(y, expected, atol=meta["tolerance"], rtol=0)


def test_the_arrays_read_are_the_keras_weights() -> None:
    _, arrays = _load("keras3_stack_bidirectional")
    model = rnnport.read(str(KERAS3 / "keras3_stack_bidirectional"))
    written = rnnport.write(model, "keras")
    for path, got in zip(("lower", "upper"), written, strict=True):
        for k, array in enumerate(got):
            np.testing.assert_array_equal(array, arrays[f"weights/{path}/{k}"])


def test_networks_are_the_stacks_in_call_order() -> None:
    for name, case in _manifest()["cases"].items():
        if not case["stacks"]:
            continue
        choices = get("tf2").networks(str(KERAS3 / name))  # type: ignore[misc]
        assert choices.option == "layer"
        assert [value for value, _ in choices.entries] == [s[0] for s in case["stacks"]], name
        for (_, what), stack in zip(choices.entries, case["stacks"], strict=True):
            assert [part.split(": ")[0] for part in what.split(" → ")] == stack


def test_what_no_variable_records_comes_from_the_graph() -> None:
    source = str(KERAS3 / "keras3_activations")
    lstm, gru, simple = rnnport.read(source).layers()
    assert [name for name, _, _ in lstm.spec.activations] == ["HardSigmoid", "Relu", "Relu"]
    assert lstm.spec.activations[0][1] == pytest.approx(1 / 6)  # Keras 3's relu6(x + 3) / 6
    assert gru.spec.cell == "gru" and not gru.spec.reset_after and not gru.spec.bias
    assert [name for name, _, _ in gru.spec.activations] == ["Sigmoid", "Softsign"]
    assert simple.spec.cell == "rnn_relu"
    with pytest.raises(FormatError, match="contradicts the layer's loop"):
        rnnport.read(source, activation="tanh")
    with pytest.raises(FormatError, match="hard_sigmoid"):
        rnnport.read(source, keras_version="2")
    with pytest.raises(FormatError, match=r"reset_after=True contradicts.*reset_after=False"):
        rnnport.read(source, layer=["softsign_gru"], reset_after=True)
    assert rnnport.read(source, layer=["relu_lstm"], recurrent_activation="hard_sigmoid").spec \
        == lstm.spec
    notes = " ".join(get("tf2").source_notes(source))
    assert "activation='relu', recurrent_activation='hard_sigmoid'" in notes
    assert "reset_after=False" in notes


def test_inspect_lists_what_the_file_holds(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["inspect", str(KERAS3 / "keras3_conv_lstm_dense")]) == 0
    text = capsys.readouterr().out
    assert "encoder: LSTM(5)" in text and "read from its loop's step" in text
    assert "features: a layer with weights that is not recurrent (kernel (3, 3, 4)" in text
    assert "head: a layer with weights that is not recurrent (kernel (5, 2)" in text
    notes = " ".join(get("tf2").source_notes(str(KERAS3 / "keras3_cudnn")))
    assert "read from its cuDNN op" in notes
    notes = " ".join(get("tf2").source_notes(str(KERAS3 / "keras3_refused"), layer="masked"))
    assert "masks this layer's input" in notes and "lengths=" in notes
    assert "another recurrent stack, layer='backwards'" in notes


@pytest.mark.parametrize(("name", "layer"), sorted(REFUSED), ids=[layer for _, layer in sorted(REFUSED)])
def test_what_rnnport_does_not_compute_is_refused_by_name(name: str, layer: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=re.escape(REFUSED[name, layer])):
        rnnport.read(str(KERAS3 / name), layer=layer)


def test_refusals_say_which_keras_function_and_how_to_export_instead() -> None:
    """Each with the step's ops at fault (not the sigmoid gates silu and relu share), and
    advice that works on a folder (fmt='keras' reads no SavedModel)."""
    source = str(KERAS3 / "keras3_lookalikes")
    for layer in ("relu6_rnn", "capped", "silu", "relu6_gates"):
        with pytest.raises(UnsupportedFeatureError) as caught:
            rnnport.read(source, layer=layer)
        assert "applies Relu" not in str(caught.value) and "Sigmoid" not in str(caught.value)
    with pytest.raises(UnsupportedFeatureError, match=r"dtype='float32' on the layer\), load "
                                                      r"the weights into it and export it again"):
        rnnport.read(source, layer="mixed")
    with pytest.raises(UnsupportedFeatureError) as caught:
        rnnport.read(str(KERAS3 / "keras3_refused"), layer="summed")
    assert "fmt='keras'" not in str(caught.value)
    assert "Export the model with this layer built with merge_mode='concat' and the same " \
           "weights: rnnport reads that, and merge_mode='sum' gives y[..., :H] + y[..., H:] of " \
           "its y" in str(caught.value)


def test_a_flip_before_a_go_backwards_layer_reads_the_models_input() -> None:
    """Lambda(ops.flip) then LSTM(go_backwards=True): the reversals cancel; the network runs
    forward over the model's input, which notes name."""
    _, arrays = _load("keras3_lookalikes")
    source = str(KERAS3 / "keras3_lookalikes")
    model = rnnport.read(source, layer="unflipped")
    assert not model.spec.reverse
    y, _ = model.forward(arrays["x"])
    np.testing.assert_allclose(y, arrays["output/unflipped"], atol=1e-5, rtol=0)
    flipped, _ = model.forward(arrays["input/unflipped"])  # the layer's own input: not it
    assert np.abs(flipped - arrays["output/unflipped"]).max() > 1e-2
    notes = " ".join(get("tf2").source_notes(source, layer="unflipped"))
    assert "unflipped: the network's input x is the model's input" in notes
    assert "reversed in time twice on the way" in notes


def test_several_stacks_ask_for_layer_and_lists_chain() -> None:
    source = str(KERAS3 / "keras3_branches")
    with pytest.raises(AmbiguousSourceError, match="(?s)layer='gru'.*layer='simple'") as caught:
        rnnport.read(source)
    assert "gru_reset_before: GRU(3)" in str(caught.value)
    with pytest.raises(FormatError, match="does not form one stack"):
        rnnport.read(source, layer=["gru", "simple"])
    with pytest.raises(FormatError, match="no recurrent layer 'gru_reset_after'"):
        rnnport.read(source, layer="gru_reset_after")
    stack = str(KERAS3 / "keras3_stack_lstm_gru")
    assert len(rnnport.read(stack, layer=["lstm", "sequential/gru"]).layers()) == 2
    assert rnnport.read(stack, layer=["gru"]).spec.cell == "gru"


def test_no_recurrent_layer_says_what_the_file_holds() -> None:
    with pytest.raises(FormatError, match=r"no recurrent layer found.*sequential/conv1d "
                                          r"\(kernel \(2, 3, 2\), bias \(2,\)\); sequential/dense"):
        rnnport.read(str(KERAS3 / "keras3_no_recurrent"))


def test_a_jax_backend_export_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedFeatureError, match=r"XlaCallModule: a Keras 3 model exported "
                                                      r"from the JAX backend.*KERAS_BACKEND="
                                                      r"tensorflow"):
        rnnport.read(str(KERAS3 / "keras3_jax"))


def _renamed(tmp_path: Path, name: str, old: bytes, new: bytes, count: int = 1) -> str:
    """A copy of a golden export whose saved_model.pb has ``old`` replaced by ``new`` (same
    length) ``count`` times (-1: everywhere)."""
    assert len(old) == len(new)
    folder = tmp_path / name
    shutil.copytree(KERAS3 / name, folder)
    graph = folder / "saved_model.pb"
    content = graph.read_bytes()
    assert old in content
    graph.write_bytes(content.replace(old, new, count))
    return str(folder)


def test_the_step_decides_what_is_read(tmp_path: Path) -> None:
    """Every Tanh of the LSTM's graph made a Relu: the step now computes relu, and is read so."""
    source = _renamed(tmp_path, "keras3_lstm", b"\x12\x04Tanh", b"\x12\x04Relu", -1)
    spec = rnnport.read(source).spec
    assert [name for name, _, _ in spec.activations] == ["Sigmoid", "Relu", "Relu"]


def test_an_op_rnnport_does_not_evaluate_is_named(tmp_path: Path) -> None:
    source = _renamed(tmp_path, "keras3_lstm", b"\x12\x07Sigmoid", b"\x12\x07Sigmodd", -1)
    with pytest.raises(UnsupportedFeatureError, match="applies Sigmodd"):
        rnnport.read(source)


def test_a_loop_that_reads_no_sequence_is_refused(tmp_path: Path) -> None:
    source = _renamed(tmp_path, "keras3_lstm", b"\x12\x11TensorListGetItem",
                      b"\x12\x11TensorListGetItex", -1)
    with pytest.raises(UnsupportedFeatureError, match="reads 0 input sequence"):
        rnnport.read(source)


def test_a_cudnn_buffer_that_is_not_the_cell_is_refused(tmp_path: Path) -> None:
    """The weight matrices zeroed instead of transposed on their way into CudnnRNNV3."""
    source = _renamed(tmp_path, "keras3_cudnn", b"\x12\x09Transpose", b"\x12\x09ZerosLike", -1)
    with pytest.raises(UnsupportedFeatureError, match="not the buffer of the cell they hold"):
        rnnport.read(source, layer="sequential/lstm")


def test_reading_imports_no_framework() -> None:
    code = ("import sys, rnnport; rnnport.read(sys.argv[1]); "
            "print(sorted(m for m in ('tensorflow', 'keras', 'tf_keras', 'torch') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code, str(KERAS3 / "keras3_lstm")],
                          capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.slow
def test_convert_verify_runs_the_export_in_tensorflow(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["convert", str(KERAS3 / "keras3_stack_bidirectional"),
                     str(tmp_path / "model.onnx"), "--verify"]) == 0
    text = capsys.readouterr().out
    assert "source, TensorFlow running keras3_stack_bidirectional's own serving function" in text
    assert "stage 2, ONNX Runtime" in text and text.count(" ok") >= 3


def _function(nodes: list[bytes]) -> tfproto.GraphDef:
    """A GraphDef whose library holds one function ``f`` of these nodes, returning ``out``."""
    from rnnport.io import tfproto_encode as encode

    function = encode.function_def("f", [("x", tfproto.DT_FLOAT)], [("y", tfproto.DT_FLOAT)],
                                   nodes, {"y": "out:output:0"})
    return tfproto.decode_graph_def(encode.graph_def([], [function]))


def test_a_step_that_would_build_huge_values_is_refused_before_it_does() -> None:
    from rnnport.formats.tf2.graph import Evaluator, Library, Ref
    from rnnport.io import tfproto_encode as encode

    def const(name: str, value: list[int]) -> bytes:
        array = np.asarray(value, dtype=np.int32)
        return encode.node_def(name, "Const", [], {"dtype": encode.attr_type(array.dtype),
                                                  "value": encode.attr_tensor(array)})

    float32 = encode.attr_type(np.dtype(np.float32))
    column = [const("tall", [100_000, 1]), const("wide", [1, 100_000]),
              encode.node_def("a", "Fill", ["tall:output:0", "x"], {"T": float32}),
              encode.node_def("b", "Fill", ["wide:output:0", "x"], {"T": float32}),
              encode.node_def("out", "MatMul", ["a:output:0", "b:output:0"], {"T": float32})]
    library = Library(_function(column), {}, "hostile.pb", 1000)
    evaluate = Evaluator(library, "f", {Ref("f", "x"): np.float64(1.0)}, lambda _: np.zeros(1),
                         limit=64 << 20)
    with pytest.raises(LimitError, match=r"shape \[100000, 100000\]"):
        evaluate(Ref("f", "out", "output", 0))
    splits = [const("axis", [0]), encode.node_def("out", "Split", ["axis:output:0", "x"], {
        "T": float32, "num_split": encode.attr_int(1 << 40)})]
    evaluate = Evaluator(Library(_function(splits), {}, "hostile.pb", 1000), "f",
                         {Ref("f", "x"): np.zeros(0)}, lambda _: np.zeros(1), limit=64 << 20)
    with pytest.raises(FormatError, match="num_split"):
        evaluate(Ref("f", "out", "output", 0))


def test_bidirectional_halves_computing_different_cells_are_refused() -> None:
    """As a custom backward_layer= with another activation reads: each half's loop told."""
    from rnnport.formats.tf2.objects import Source

    export = Source(str(KERAS3 / "keras3_stack_bidirectional")).keras3
    backward = next(d for d in export.directions if d.path == "upper/backward_lstm")
    backward.options = {**backward.options, "activation": "relu"}
    export.layers = export._layers()
    export.stacks = export._stacks()
    with pytest.raises(UnsupportedFeatureError, match=r"upper: its forward and backward layers "
                                                      r"compute different cells"):
        export.choose("upper")


def test_bidirectional_outputs_returned_apart_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two directions over one input whose outputs meet nowhere (merge_mode=None)."""
    from rnnport.formats.tf2 import keras3
    from rnnport.formats.tf2.objects import Source

    monkeypatch.setattr(keras3, "_meeting", lambda first, second: None)
    export = Source(str(KERAS3 / "keras3_stack_bidirectional")).keras3
    with pytest.raises(UnsupportedFeatureError, match=r"lower/backward_gru: one direction of a "
                                                      r"Bidirectional layer whose outputs are not "
                                                      r"concatenated \(merge_mode=None"):
        export.choose("lower/backward_gru")


def test_convolutional_kernels_are_refused_as_convlstm(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ConvLSTM1D's kernels are (kernel_size, channels, 4·filters): 3-D."""
    from rnnport.formats.tf2.keras3 import Export
    from rnnport.formats.tf2.objects import Source

    shape = Export.shape
    monkeypatch.setattr(Export, "shape", lambda self, node_id: (2, *shape(self, node_id))
                        if self.names[node_id].endswith("kernel") else shape(self, node_id))
    with pytest.raises(UnsupportedFeatureError, match="its kernels are 3-D: a ConvLSTM1D"):
        Source(str(KERAS3 / "keras3_lstm")).keras3.choose(None)
