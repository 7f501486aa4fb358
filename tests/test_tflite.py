"""Reading TFLite models (``rnnport.formats.tflite``), against the LiteRT interpreter.

Expected values: the golden files' ``y_litert`` (the LiteRT interpreter) and ``y_keras``
(the Keras model converted), made by ``tools/golden_tflite.py``; and, for fields the
converter never writes, golden files edited through LiteRT's own generated schema code
(``ai_edge_litert.schema_py_generated`` with ``flatbuffers``, a structurally different
writer) and run by the LiteRT interpreter.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tflite_edits import edited, litert

from rnnport.errors import FormatError, RnnportError, UnsupportedFeatureError
from rnnport.formats.tflite import FORMAT, networks, notes, sniff

GOLDEN = Path(__file__).parent / "golden" / "tflite"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"]
LSTMS = ["bi_lstm", "lstm_float16", "lstm_last", "lstm_sequences", "stacked_lstm"]
# SimpleRNN and GRU layers: WHILE loops whose body rnnport evaluates symbolically.
LOOPS = ["bi_gru", "gru_batch1", "gru_last", "gru_reset_before", "gru_sequences", "simple_rnn",
         "simple_rnn_relu", "stacked_gru"]
READABLE = LSTMS + LOOPS
# Integer weights: read only with dequantize=True; LiteRT's integer kernels compute other
# numbers than the dequantized float network (each case's bound, measured on its file).
QUANTIZED = {"gru_dynamic_int8": 2e-2, "lstm_int8": 5e-2}
# Refused: go_backwards=True outside a Bidirectional (the file keeps its outputs in reversed
# time order, which no canonical network gives).
REVERSED = ["gru_go_backwards"]


def _golden(name: str) -> tuple[Path, dict[str, np.ndarray]]:
    path = GOLDEN / f"{name}.tflite"
    with np.load(path.with_suffix(".npz"), allow_pickle=False) as data:
        return path, {key: data[key] for key in ("x", "y_litert", "y_keras")}


def _output(model: Any, x: np.ndarray, like: np.ndarray) -> np.ndarray:
    y, _ = model.forward(x)
    return y[:, -1] if like.ndim == 2 else y  # return_sequences=False: the last step


def test_every_golden_case_is_read() -> None:
    assert sorted(MANIFEST) == sorted([*READABLE, *QUANTIZED, *REVERSED])


@pytest.mark.parametrize("name", READABLE)
def test_golden_file_computes_litert_and_keras_outputs(name: str) -> None:
    path, data = _golden(name)
    model = FORMAT.read(path)
    y = _output(model, data["x"], data["y_litert"])
    np.testing.assert_allclose(y, data["y_litert"], rtol=0, atol=1e-5)
    # float16 weights: Keras ran the float32 originals, LiteRT the rounded ones.
    tolerance = 1e-3 if name == "lstm_float16" else 1e-5
    np.testing.assert_allclose(y, data["y_keras"], rtol=0, atol=tolerance)
    assert model.dtype == np.float32
    if name in LSTMS:
        assert {layer.spec.cell_clip for layer in model.layers()} == {10.0}


def _keras_weights(name: str) -> list[np.ndarray]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        keys = sorted((key for key in data if key.startswith("weights/")),
                      key=lambda key: int(key.rsplit("/", 1)[1]))
        return [data[key] for key in keys]


@pytest.mark.parametrize("name", ["gru_sequences", "gru_reset_before", "simple_rnn", "bi_gru"])
def test_a_loop_reads_the_keras_layers_weights_exactly(name: str) -> None:
    """The weights the loop's body holds are the Keras layer's, bit for bit: read the same
    arrays through the keras format and compare the canonical parameters."""
    import rnnport

    model = FORMAT.read(GOLDEN / f"{name}.tflite")
    meta = json.loads(str(np.load(GOLDEN / f"{name}.npz")["meta"]))
    layer = meta["layers"][0]
    options = {"reset_after": layer["config"].get("reset_after", True)} \
        if "GRU" in layer.get("inner", layer["class"]) else \
        {"activation": layer["config"]["activation"]} if "inner" not in layer else {}
    weights = _keras_weights(name)
    if "inner" in layer:  # Bidirectional: forward then backward arrays
        options = {"reset_after": layer["config"]["layer"]["config"].get("reset_after", True)}
    keras = rnnport.read(weights, "keras", **options)
    assert keras.spec == model.spec
    for layer_index in range(keras.spec.num_layers):
        for direction in range(keras.spec.num_directions):
            for name_ in ("weight_ih", "weight_hh"):
                np.testing.assert_array_equal(model.parameter(layer_index, direction, name_),
                                              keras.parameter(layer_index, direction, name_))


def test_loop_shapes() -> None:
    before = FORMAT.read(GOLDEN / "gru_reset_before.tflite")
    assert before.spec.cell == "gru" and not before.spec.reset_after
    assert FORMAT.read(GOLDEN / "simple_rnn_relu.tflite").spec.cell == "rnn_relu"
    bi = FORMAT.read(GOLDEN / "bi_gru.tflite")
    assert bi.spec.bidirectional and bi.spec.reset_after
    said = notes(GOLDEN / "gru_last.tflite")
    assert any("STRIDED_SLICE" in note for note in said)
    assert not any("TRANSPOSE" in note or "WHILE" in note for note in notes(GOLDEN / "bi_gru.tflite"))


@pytest.mark.parametrize("name", sorted(QUANTIZED))
def test_integer_weights_are_refused_then_read_with_dequantize(name: str) -> None:
    path, data = _golden(name)
    with pytest.raises(UnsupportedFeatureError, match="dequantize=True"):
        FORMAT.read(path)
    model = FORMAT.read(path, dequantize=True)
    y = _output(model, data["x"], data["y_litert"])
    error = float(np.abs(y - data["y_litert"]).max())
    assert 1e-6 < error < QUANTIZED[name]  # close, and not equal: the kernels are integer
    said = notes(path, dequantize=True)
    assert any("dequantized (dequantize=True)" in note and "numbers differ" in note
               for note in said)


def test_golden_shapes() -> None:
    bi = FORMAT.read(GOLDEN / "bi_lstm.tflite")
    assert bi.spec.bidirectional and bi.spec.hidden_size == 4 and bi.spec.num_layers == 1
    stacked = FORMAT.read(GOLDEN / "stacked_lstm.tflite")
    assert [s.hidden_size for s in stacked.specs] == [5, 4]  # type: ignore[union-attr]


def test_bytes_and_paths_read_alike() -> None:
    path = GOLDEN / "lstm_sequences.tflite"
    assert FORMAT.read(path.read_bytes()) == FORMAT.read(path) == FORMAT.read(str(path))


def test_swapping_two_gates_changes_the_output() -> None:
    _, data = _golden("lstm_sequences")
    swapped = _edited("lstm_sequences", lambda m: _swap_inputs(m, 2, 3))
    y = _output(FORMAT.read(swapped), data["x"], data["y_litert"])
    assert np.abs(y - data["y_litert"]).max() > 1e-3


def test_sniff() -> None:
    assert sniff("model.tflite") and sniff(Path("M.TFLITE"))
    assert sniff((GOLDEN / "bi_lstm.tflite").read_bytes())
    assert not sniff("model.onnx") and not sniff(b"\0" * 16) and not sniff(b"TFL3")


def test_notes_say_what_is_left_out() -> None:
    said = notes(GOLDEN / "lstm_last.tflite")
    assert any("STRIDED_SLICE" in note for note in said)
    assert any("variable tensors" in note for note in said)


def test_networks_and_node() -> None:
    path = GOLDEN / "stacked_lstm.tflite"
    choices = networks(path)
    assert choices.option == "node" and [value for value, _ in choices.entries] == ["0"]
    assert FORMAT.read(path, node=1) == FORMAT.read(path, node="0") == FORMAT.read(path)
    assert FORMAT.read(path, node="StatefulPartitionedCall:0") == FORMAT.read(path)
    with pytest.raises(FormatError, match="node='nope' is no operator"):
        FORMAT.read(path, node="nope")


def test_reading_imports_no_framework() -> None:
    code = ("import sys, numpy as np\n"
            "from rnnport.formats.tflite import FORMAT\n"
            f"for name in {READABLE!r}:\n"
            f"    FORMAT.read({str(GOLDEN)!r} + '/' + name + '.tflite')\n"
            "bad = [m for m in ('tensorflow', 'flatbuffers', 'ai_edge_litert', 'tf_keras', "
            "'keras', 'torch') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- files edited through LiteRT's own schema code, run by LiteRT --------------------------


def _edited(name: str, change: Callable[[Any], None]) -> bytes:
    return edited(GOLDEN / f"{name}.tflite", change)


def _lstm_op(model: Any) -> Any:
    return next(op for op in model.subgraphs[0].operators
                if op.builtinOptions is not None and hasattr(op.builtinOptions, "cellClip"))


def _swap_inputs(model: Any, a: int, b: int) -> None:
    inputs = list(_lstm_op(model).inputs)
    inputs[a], inputs[b] = inputs[b], inputs[a]
    _lstm_op(model).inputs = inputs


def _add_constant(model: Any, values: np.ndarray, name: str) -> int:
    from ai_edge_litert import schema_py_generated as schema

    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(values, "<f4").tobytes(), "u1")
    model.buffers.append(buffer)
    tensor = schema.TensorT()
    tensor.shape, tensor.type, tensor.buffer = list(values.shape), 0, len(model.buffers) - 1
    tensor.name = name
    tensors = model.subgraphs[0].tensors
    tensors.append(tensor)
    return len(tensors) - 1


def _set_input(model: Any, position: int, tensor: int) -> None:
    op = _lstm_op(model)
    inputs = list(op.inputs)
    inputs[position] = tensor
    op.inputs = inputs


def _peepholes(model: Any) -> None:
    rng = np.random.default_rng(7)
    for position in (9, 10, 11):
        _set_input(model, position, _add_constant(model, rng.uniform(-0.5, 0.5, 4), "peep"))


def _cifg(model: Any) -> None:
    _set_input(model, 1, -1)
    _set_input(model, 5, -1)
    _set_input(model, 12, -1)


def _projection(model: Any) -> None:
    rng = np.random.default_rng(8)
    projection = _add_constant(model, rng.uniform(-0.5, 0.5, (2, 4)), "proj")
    _set_input(model, 16, projection)
    _set_input(model, 17, _add_constant(model, np.zeros(2), "proj_bias"))
    # The recurrent weights take the projected (2-wide) h; the output and h state narrow.
    tensors = model.subgraphs[0].tensors
    op = _lstm_op(model)
    for position in (5, 6, 7, 8):
        _set_input(model, position, _add_constant(model, rng.uniform(-0.5, 0.5, (4, 2)), "rec"))
    tensors[op.inputs[18]].shape = [2, 2]
    tensors[op.outputs[0]].shape = [2, 5, 2]


def _relu(model: Any) -> None:
    _lstm_op(model).builtinOptions.fusedActivationFunction = 1


def _proj_bias(model: Any) -> None:
    _projection(model)
    _set_input(model, 17, _add_constant(model, np.array([0.25, -0.4]), "proj_bias"))


def _layer_norm(model: Any) -> None:
    rng = np.random.default_rng(9)
    for position in (20, 21, 22, 23):
        _set_input(model, position, _add_constant(model, rng.uniform(0.5, 1.5, 4), "norm"))


def _cifg_layer_norm(model: Any) -> None:
    _cifg(model)
    _layer_norm(model)
    _set_input(model, 20, -1)  # no input gate: no input-gate coefficients


def _small_clip(model: Any) -> None:
    _lstm_op(model).builtinOptions.cellClip = 0.3


@pytest.mark.parametrize("change", [_peepholes, _cifg, _projection, _relu, _small_clip,
                                    lambda m: (_cifg(m), _peepholes(m)), _proj_bias, _layer_norm,
                                    _cifg_layer_norm,
                                    lambda m: (_layer_norm(m), _peepholes(m), _proj_bias(m))],
                         ids=["peepholes", "cifg", "projection", "relu", "cell_clip",
                              "cifg_peepholes", "proj_bias", "layer_norm", "cifg_layer_norm",
                              "layer_norm_peepholes_proj_bias"])
def test_edited_lstm_equalslitert(change: Callable[[Any], None]) -> None:
    _, data = _golden("lstm_sequences")
    edited = _edited("lstm_sequences", change)
    expected = litert(edited, data["x"])
    y, _ = FORMAT.read(edited).forward(data["x"])
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5)
    if expected.shape == data["y_litert"].shape:  # the edit mattered
        assert np.abs(expected - data["y_litert"]).max() > 1e-4
    else:  # a projection: its bias mattered
        assert np.abs(expected - litert(_edited("lstm_sequences", _projection),
                                         data["x"])).max() > 1e-4 or change is not _proj_bias


def test_cifg_and_peepholes_map_to_the_spec() -> None:
    spec = FORMAT.read(_edited("lstm_sequences", lambda m: (_cifg(m), _peepholes(m)))).spec
    assert spec.input_forget and spec.peepholes and spec.cell_clip == 10.0
    assert FORMAT.read(_edited("lstm_sequences", _projection)).spec.proj_size == 2
    assert [name for name, _, _ in FORMAT.read(_edited("lstm_sequences", _relu)).spec
            .activations] == ["Sigmoid", "Relu", "Relu"]
    said = notes(_edited("lstm_sequences", _cifg))
    assert any("CIFG" in note for note in said)


def _proj_clip(model: Any) -> None:
    _projection(model)
    _lstm_op(model).builtinOptions.projClip = 3.0


def _state(model: Any) -> None:
    _set_input(model, 19, _add_constant(model, np.full((2, 4), 0.5), "c0"))


def _relu6(model: Any) -> None:
    _lstm_op(model).builtinOptions.fusedActivationFunction = 3


@pytest.mark.parametrize(("change", "message"), [
    (_proj_clip, "proj_clip=3 \\(the projected output is clipped\\)"),
    (_state, "initial cell state c .* is a nonzero constant"),
    (_relu6, "fused activation RELU6"),
], ids=["proj_clip", "state", "relu6"])
def test_unsupported_fields_are_refused_by_name(change: Callable[[Any], None],
                                                message: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=message):
        FORMAT.read(_edited("lstm_sequences", change))


def test_layer_norm_for_some_gates_only_is_damage() -> None:
    with pytest.raises(FormatError, match="layer-norm coefficients for some gates only"):
        FORMAT.read(_edited("lstm_sequences", lambda m: (_layer_norm(m), _set_input(m, 22, -1))))


def test_layer_norm_and_projection_bias_map_to_the_spec() -> None:
    spec = FORMAT.read(_edited("lstm_sequences", lambda m: (_layer_norm(m), _proj_bias(m)))).spec
    assert spec.layer_norm and spec.proj_bias and spec.proj_size == 2
    cifg = FORMAT.read(_edited("lstm_sequences", _cifg_layer_norm))
    assert cifg.spec.input_forget and cifg.spec.layer_norm
    assert not np.any(cifg.parameter(0, 0, "weight_ln")[1])  # the unused forget row


def test_zero_projection_bias_and_zero_state_are_accepted() -> None:
    def zero_state(model: Any) -> None:
        _set_input(model, 19, _add_constant(model, np.zeros((2, 4)), "c0"))

    _, data = _golden("lstm_sequences")
    model = FORMAT.read(_edited("lstm_sequences", zero_state))
    np.testing.assert_allclose(model.forward(data["x"])[0], data["y_litert"], atol=1e-5)


def _int8_weights(model: Any) -> None:
    from ai_edge_litert import schema_py_generated as schema

    tensors = model.subgraphs[0].tensors
    tensor = tensors[_lstm_op(model).inputs[2]]  # input_to_forget_weights (4, 3)
    values = np.frombuffer(bytes(model.buffers[tensor.buffer].data), "<f4").reshape(4, 3)
    scale = np.abs(values).max(axis=1) / 127
    model.buffers[tensor.buffer].data = np.frombuffer(
        np.round(values / scale[:, None]).astype("i1").tobytes(), "u1")
    tensor.type = 9
    tensor.quantization = schema.QuantizationParametersT()
    tensor.quantization.scale = [float(s) for s in scale]
    tensor.quantization.zeroPoint = [0, 0, 0, 0]
    tensor.quantization.quantizedDimension = 0


def test_quantized_weights_are_refused_unless_dequantized() -> None:
    edited = _edited("lstm_sequences", _int8_weights)
    with pytest.raises(UnsupportedFeatureError, match="quantized INT8 weights.*dequantize=True"):
        FORMAT.read(edited)
    model = FORMAT.read(edited, dequantize=True)
    _, data = _golden("lstm_sequences")
    close = np.abs(model.forward(data["x"])[0] - data["y_litert"]).max()
    assert 0 < close < 0.05  # the numbers changed, a little
    assert any("numbers differ" in note for note in notes(edited, dequantize=True))


# -- damaged files ---------------------------------------------------------------------------


# Keras 3's loops (tools/golden_tflite_keras3.py): LSTMs, STRIDED_SLICE, Flex TensorLists,
# resource variables.
KERAS3 = [GOLDEN.parent / "tflite_keras3" / f"{name}.tflite"
          for name in ("lstm", "gru", "gru_stateful", "lstm_open_flex")]


@pytest.mark.parametrize("path", [GOLDEN / f"{name}.tflite" for name in READABLE] + KERAS3,
                         ids=lambda path: path.stem if path.parent == GOLDEN else
                         f"keras3/{path.stem}")
def test_truncated_and_mutated_files_are_rnnport_errors(path: Path) -> None:
    data = path.read_bytes()
    # The last byte that is not padding (a string's zeros, as a file may end).
    for length in (0, 7, 8, 64, len(data) // 3, len(data) // 2, len(data.rstrip(b"\0")) - 1):
        with pytest.raises(RnnportError):
            FORMAT.read(data[:length])
    rng = np.random.default_rng(len(data))
    for _ in range(150):
        damaged = bytearray(data)
        for position in rng.integers(0, len(data), 4):
            damaged[position] = int(rng.integers(0, 256))
        try:
            FORMAT.read(bytes(damaged))
        except RnnportError:
            pass


def test_a_file_that_is_no_tflite_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "model.tflite"
    path.write_bytes(b"\x10\0\0\0NOPE" + b"\0" * 32)
    with pytest.raises(FormatError, match="file identifier"):
        FORMAT.read(path)
    with pytest.raises(FormatError, match="missing.tflite: no such file"):
        FORMAT.read(tmp_path / "missing.tflite")


@pytest.mark.parametrize("spec", [
    {"cell": "gru", "input_size": 3, "hidden_size": 4},
    {"cell": "gru", "input_size": 3, "hidden_size": 4, "reset_after": False},
    {"cell": "gru", "input_size": 3, "hidden_size": 2, "num_layers": 2, "bidirectional": True},
    {"cell": "gru", "input_size": 2, "hidden_size": 3, "bias": False, "reverse": True},
    {"cell": "lstm", "input_size": 3, "hidden_size": 4, "num_layers": 2, "bidirectional": True},
    {"cell": "rnn_relu", "input_size": 3, "hidden_size": 4},
])
def test_rnnports_own_files_read_back_exactly(spec: dict[str, Any]) -> None:
    from rnnport import RNN, Spec

    model = RNN.random(Spec(**spec), seed=3)
    written = FORMAT.write(model)
    back = FORMAT.read(written)
    assert back.spec.replace(bias=model.spec.bias) == model.spec
    assert FORMAT.write(back) == written  # the same file: biases summed once, loops described
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, model.input_size)).astype(np.float32)
    np.testing.assert_allclose(back.forward(x)[0], model.forward(x)[0], atol=1e-5, rtol=0)


def test_a_loop_whose_description_does_not_fit_is_refused() -> None:
    from rnnport import RNN, Spec

    written = FORMAT.write(RNN.random(Spec("gru", 3, 4), seed=1))
    start = written.index(b'"loops"')
    damaged = written[:start] + written[start:].replace(b'"hidden_size": 4', b'"hidden_size": 5', 1)
    assert damaged != written
    with pytest.raises(RnnportError):
        FORMAT.read(damaged)


# -- loops that are not the canonical cells ------------------------------------------------


def _body_opcode(model: Any, name: str) -> int:
    codes = [code.builtinCode for code in model.operatorCodes]
    from rnnport.io.tflite_schema import BUILTIN_OPERATORS

    wanted = {v: k for k, v in BUILTIN_OPERATORS.items()}[name]
    if wanted not in codes:
        from ai_edge_litert import schema_py_generated as schema

        code = schema.OperatorCodeT()
        code.builtinCode = code.deprecatedBuiltinCode = wanted
        code.version = 1
        model.operatorCodes.append(code)
        codes.append(wanted)
    return codes.index(wanted)


def _replace_in_body(model: Any, old: str, new: str) -> None:
    """The body subgraph's first ``old`` operator becomes ``new`` (same tensors)."""
    old_index, new_index = _body_opcode(model, old), _body_opcode(model, new)
    body = model.subgraphs[2]
    next(op for op in body.operators if op.opcodeIndex == old_index).opcodeIndex = new_index


def test_a_loop_with_another_gate_function_is_refused_with_what_it_computes() -> None:
    """A GRU whose update gate is a tanh and whose reset gate a sigmoid computes no canonical
    cell (one gate function for both); LiteRT runs it, rnnport refuses it naming both."""
    edited = _edited("gru_sequences", lambda m: _replace_in_body(m, "LOGISTIC", "TANH"))
    _, data = _golden("gru_sequences")
    assert np.abs(litert(edited, data["x"]) - data["y_litert"]).max() > 1e-3
    with pytest.raises(UnsupportedFeatureError,
                       match=r"a GRU whose gates apply different functions \(update gate z: "
                             r"tanh, reset gate r: sigmoid\)"):
        FORMAT.read(edited)


def test_a_loop_body_with_an_unknown_operation_names_it() -> None:
    edited = _edited("simple_rnn", lambda m: _replace_in_body(m, "TANH", "HARD_SWISH"))
    with pytest.raises(UnsupportedFeatureError, match=r"could not follow: .*HARD_SWISH"):
        FORMAT.read(edited)


def _condition_bound(model: Any, value: int) -> None:
    condition = model.subgraphs[1]
    less = condition.operators[0]
    bound = condition.tensors[less.inputs[1]]
    model.buffers[bound.buffer].data = np.array([value], np.int32).view(np.uint8)


def test_a_loop_that_stops_early_is_refused() -> None:
    edited = _edited("simple_rnn", lambda m: _condition_bound(m, 3))
    with pytest.raises(UnsupportedFeatureError, match="stops after 3 steps, and the "
                                                      "sequence has 6"):
        FORMAT.read(edited)
    assert FORMAT.read(_edited("simple_rnn", lambda m: _condition_bound(m, 60))) == \
        FORMAT.read(GOLDEN / "simple_rnn.tflite")


def _counter_start(model: Any, value: int) -> None:
    main = model.subgraphs[0]
    loop = next(op for op in main.operators if op.builtinOptions is not None and
                hasattr(op.builtinOptions, "bodySubgraphIndex"))
    start = main.tensors[loop.inputs[1]]
    model.buffers[start.buffer].data = np.array([value], np.int32).view(np.uint8)


def test_a_loop_whose_counter_does_not_start_at_zero_is_refused() -> None:
    edited = _edited("gru_sequences", lambda m: _counter_start(m, 1))
    with pytest.raises(UnsupportedFeatureError, match="starts at 0 and adds 1 per step"):
        FORMAT.read(edited)


def test_rnnports_own_loops_read_without_their_description() -> None:
    """The metadata entry naming rnnport's loops removed, the loops are recognised from
    their bodies alone: the same network, bit for bit."""
    import rnnport

    for reset_after in (True, False):
        model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4, num_layers=2, bidirectional=True,
                                                reset_after=reset_after), dtype=np.float32,
                                   seed=5)
        written = FORMAT.write(model)
        anonymous = written.replace(b"rnnport.loops", b"rnnport.xxxxx")
        assert anonymous != written and FORMAT.read(anonymous) == model


def test_the_converters_cell_clip_can_be_dropped_by_name() -> None:
    """Every converted Keras LSTM clips at ±10: read as Spec.cell_clip (torch refuses it),
    and with cell_clip=None without it, said in the notes; within the clip the outputs are
    LiteRT's."""
    import rnnport

    path, data = _golden("lstm_sequences")
    clipped = FORMAT.read(path)
    assert clipped.spec.cell_clip == 10.0
    assert any("cell_clip=None" in note for note in notes(path))
    with pytest.raises(UnsupportedFeatureError, match="cell clip"):
        rnnport.write(clipped, "torch")
    free = FORMAT.read(path, cell_clip=None)
    assert free.spec.cell_clip is None and free.spec == clipped.spec.replace(cell_clip=None)
    np.testing.assert_allclose(free.forward(data["x"])[0], data["y_litert"], rtol=0, atol=1e-5)
    assert any("read without a clip as told" in note for note in notes(path, cell_clip=None))
    assert FORMAT.read(path, cell_clip=2.5).spec.cell_clip == 2.5
    for bad in ("none", 0, -1.0, float("inf"), True):
        with pytest.raises(FormatError, match="cell_clip="):
            FORMAT.read(path, cell_clip=bad)


def test_a_conversion_refused_for_the_clip_says_how_the_source_drops_it(tmp_path: Path) -> None:
    import rnnport

    path = GOLDEN / "lstm_sequences.tflite"
    with pytest.raises(UnsupportedFeatureError, match=r"cell clip .* The tflite source can "
                                                      r"leave it out: read it with cell_clip=None"):
        rnnport.convert(path, "onnx", path=tmp_path / "m.onnx")
    assert not (tmp_path / "m.onnx").exists()
    rnnport.convert(path, "onnx", path=tmp_path / "m.onnx", cell_clip=None)
    assert rnnport.read(tmp_path / "m.onnx") == rnnport.read(path, cell_clip=None)


# -- what a review of the loop reader found ------------------------------------------------


def test_stacked_loops_read_as_one_network() -> None:
    """The converter leaves the sequence time-major between two loops (no TRANSPOSE pair):
    the second loop reads the first one's output as it is."""
    model = FORMAT.read(GOLDEN / "stacked_gru.tflite")
    assert [spec.hidden_size for spec in model.specs] == [5, 4]  # type: ignore[union-attr]
    assert not any("time-major" in note for note in notes(GOLDEN / "stacked_gru.tflite"))


def test_go_backwards_outside_a_bidirectional_is_refused_as_tf2_refuses_it() -> None:
    """Read as a reverse network, its y would be LiteRT's output reversed in time."""
    path, _ = _golden("gru_go_backwards")
    with pytest.raises(UnsupportedFeatureError, match=r"operator 2 \(WHILE\): go_backwards=True "
                                                      r"outside a Bidirectional layer.*reversed "
                                                      r"order.*Reverse the time axis of x"):
        FORMAT.read(path)
    assert "go_backwards=True outside a Bidirectional: refused" in networks(path).entries[0][1]


def test_a_batch_of_one_reshaped_to_time_major_is_batch_major() -> None:
    path = GOLDEN / "gru_batch1.tflite"
    assert not any("time-major" in note for note in notes(path))
    from rnnport.formats.tflite.reader import fixed_input

    assert fixed_input(path) == (1, 5)


def _recurrent_n_columns(model: Any) -> None:
    """The reset-before GRU's R_n (the body's one (4, 4) FULLY_CONNECTED weight) made (4, 2),
    with as many bytes."""
    body = model.subgraphs[2]
    weights = [body.tensors[op.inputs[1]] for op in body.operators
               if len(op.inputs) > 1 and list(body.tensors[op.inputs[1]].shape) == [4, 4]]
    assert len(weights) == 1
    weights[0].shape = [4, 2]
    model.buffers[weights[0].buffer].data = model.buffers[weights[0].buffer].data[:32]


def test_a_loop_whose_weights_do_not_fit_is_an_rnnport_error() -> None:
    edited = _edited("gru_reset_before", _recurrent_n_columns)
    with pytest.raises(RnnportError):
        FORMAT.read(edited)


def _time_major(model: Any) -> None:
    op = _lstm_op(model)
    op.builtinOptions.timeMajor = True
    tensors = model.subgraphs[0].tensors
    for tensor in (tensors[op.inputs[0]], tensors[op.outputs[0]]):
        tensor.shape = [tensor.shape[1], tensor.shape[0], tensor.shape[2]]


def test_verify_feeds_a_time_major_file_time_major(tmp_path: Path) -> None:
    edited = tmp_path / "time_major.tflite"
    edited.write_bytes(_edited("lstm_sequences", _time_major))
    model = FORMAT.read(edited)
    fixed = FORMAT.fixed_input
    assert fixed is not None and fixed(edited) == (2, 5)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    run = FORMAT.framework_forward
    assert run is not None
    found = run(edited, model, x)
    assert not isinstance(found, str), found
    np.testing.assert_allclose(found[1], model.forward(x)[0], rtol=0, atol=1e-5)
    assert any("time-major" in note for note in notes(edited))


def _empty_batch(model: Any) -> None:
    tensors = model.subgraphs[0].tensors
    op = _lstm_op(model)
    for position in (0, 18, 19):
        tensors[op.inputs[position]].shape = [0, *list(tensors[op.inputs[position]].shape)[1:]]
    tensors[op.outputs[0]].shape = [0, 5, 4]


def test_verify_of_a_file_with_an_empty_batch_says_why_not(tmp_path: Path) -> None:
    edited = tmp_path / "empty.tflite"
    edited.write_bytes(_edited("lstm_sequences", _empty_batch))
    model = FORMAT.read(edited)
    run = FORMAT.framework_forward
    assert run is not None
    said = run(edited, model, np.zeros((2, 5, 3), np.float32))
    assert isinstance(said, str) and "no framework check" in said
