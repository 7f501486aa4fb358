"""Core ML NeuralNetwork models (``rnnport.formats.coreml``), against coremltools and the
source frameworks.

Core ML runs only on Apple platforms, so expected values come from the frameworks that
compute the same network: the golden files' ``y`` (PyTorch, or ONNX Runtime for the
reset-before GRU), made by ``tools/golden_coreml.py`` from files coremltools wrote. What
rnnport writes is checked by coremltools itself: its protobuf classes parse it, ``MLModel``
loads it, and each layer equals the one coremltools' ``NeuralNetworkBuilder`` writes for the
same weights.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError, LimitError, UnsupportedFeatureError
from rnnport.formats.coreml import FORMAT, CoreMLModel, framework_forward, networks, notes
from rnnport.formats.coreml.fields import FIELDS, LAYER_TYPES, put_bytes, put_varint

GOLDEN = Path(__file__).parent / "golden" / "coreml"
CASES = {case["name"]: case for case in json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"]}
READ = [name for name, case in CASES.items() if case["reference"]]
LOOPS = [name for name in READ if "gru_loop" in name]  # a PyTorch GRU, as loops of layers
KERAS = [name for name in READ if "keras_" in name]  # tf_keras layers, as loops
RESET_AFTER = [*LOOPS, "keras_gru", "program_keras_gru"]  # no Core ML layer holds them
FLOAT32_MAX = float(np.finfo(np.float32).max)


@pytest.fixture(scope="module")
def coremltools() -> Any:
    """coremltools itself: a test dependency, so a missing one fails these tests."""
    import coremltools as ct
    from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: F401

    return ct


def golden(name: str) -> tuple[Path, dict[str, np.ndarray]]:
    with np.load(GOLDEN / f"{name}.npz") as data:
        return GOLDEN / CASES[name]["file"], dict(data)


def output(model: Any, x: np.ndarray) -> np.ndarray:
    y = model.forward(x)
    return np.asarray(y[0] if isinstance(y, tuple) else y)


def test_field_numbers_are_apples(coremltools: Any) -> None:
    from coremltools.proto import FeatureTypes_pb2, Model_pb2, NeuralNetwork_pb2

    for name, numbers in FIELDS.items():
        outer, _, inner = name.partition(".")
        module = next(module for module in (NeuralNetwork_pb2, Model_pb2, FeatureTypes_pb2)
                      if hasattr(module, outer))
        found = getattr(module, outer)
        descriptor = (getattr(found, inner) if inner else found).DESCRIPTOR
        assert {field: descriptor.fields_by_name[field].number for field in numbers} == numbers
    layer = NeuralNetwork_pb2.NeuralNetworkLayer.DESCRIPTOR.oneofs_by_name["layer"]
    assert LAYER_TYPES == {field.number: field.name for field in layer.fields}


@pytest.mark.parametrize("name", READ)
def test_golden_files_compute_the_source_frameworks_numbers(name: str) -> None:
    path, arrays = golden(name)
    model = rnnport.read(path)
    assert rnnport.formats.sniff(path) == "coreml"
    np.testing.assert_allclose(output(model, arrays["x"]), arrays["y"], rtol=0, atol=1e-5)
    spec = model.spec
    if name == "gru":
        assert not spec.reset_after and spec.activations[0][0] == "HardSigmoid"
    if name in ("lstm_f16", "program_lstm_f16"):
        assert model.params[0][0]["weight_ih"].dtype == np.float16
    if name in ("lstm_bi_2layer", "program_lstm_bi_2layer"):
        assert spec.bidirectional and spec.num_layers == 2


@pytest.mark.parametrize("name", LOOPS)
def test_loops_hold_the_pytorch_grus_weights_bit_for_bit(name: str) -> None:
    path, arrays = golden(name)
    model = rnnport.read(path)
    assert model.spec.cell == "gru" and model.spec.reset_after
    assert model.spec.num_layers == (2 if "2layer" in name else 1)
    half = name.endswith("_f16")
    assert model.params[0][0]["weight_ih"].dtype == (np.float16 if half else np.float32)
    state = rnnport.write(model, "torch")
    expected = {key.removeprefix("torch."): array for key, array in arrays.items()
                if key.startswith("torch.")}
    assert set(state) == set(expected)
    for key, array in expected.items():
        mine = np.asarray(state[key])
        assert np.array_equal(mine.astype(np.float32), array), key  # float16: the same values
        if not half:
            assert np.array_equal(mine.view(np.uint32), array.view(np.uint32)), key


@pytest.mark.parametrize("name", KERAS)
def test_keras_loops_hold_the_keras_weights_bit_for_bit(name: str) -> None:
    path, arrays = golden(name)
    model = rnnport.read(path)
    assert model.spec.cell == {"lstm": "lstm", "gru": "gru", "rnn": "rnn_tanh"}[
        name.rsplit("_", 1)[-1]]
    expected = [arrays[f"keras.{index}"] for index in range(3)]
    written = [np.asarray(array) for array in rnnport.write(model, "keras")]
    assert [array.shape for array in written] == [array.shape for array in expected]
    for mine, theirs in zip(written, expected, strict=True):
        assert np.array_equal(mine.view(np.uint32), theirs.view(np.uint32))


@pytest.mark.parametrize("name", [name for name in READ if name not in RESET_AFTER])
def test_round_trips_are_bit_exact(name: str, tmp_path: Path) -> None:
    model = rnnport.read(GOLDEN / CASES[name]["file"])
    rnnport.write(model, "coreml", tmp_path / "back.mlmodel")
    back = rnnport.read(tmp_path / "back.mlmodel")
    assert back.spec == model.spec
    for mine, theirs in zip(model.params, back.params, strict=True):
        for named, named_back in zip(mine, theirs, strict=True):
            for key, array in named.items():
                if key == "bias_hh" and name in KERAS:
                    continue  # a loop's one bias is read as the recurrent one: the sum is kept
                summed = array if key != "bias_ih" else array + named.get("bias_hh", 0)
                expected = named_back[key] if key != "bias_ih" else \
                    named_back[key] + named_back.get("bias_hh", 0)
                assert summed.dtype == expected.dtype
                assert np.array_equal(summed.view(np.uint8), expected.view(np.uint8)), key


def test_a_model_is_told_by_its_bytes_whatever_its_name(tmp_path: Path) -> None:
    renamed = tmp_path / "model.bin"
    renamed.write_bytes((GOLDEN / "lstm_head.mlmodel").read_bytes())
    assert rnnport.formats.sniff(renamed) == "coreml"
    onnx_like = tmp_path / "other.bin"
    onnx_like.write_bytes(put_varint(1, 8) + put_bytes(2, b"pytorch") + put_bytes(7, b""))
    assert not FORMAT.sniff(onnx_like)


def test_notes_name_the_layers_and_models_around_the_network() -> None:
    head = notes(GOLDEN / "lstm_head.mlmodel")
    assert "model0/project (innerProduct), model0/head (innerProduct)" in head[0]
    traced = notes(GOLDEN / "lstm_traced.mlmodel")
    assert any("takes its initial state from" in note for note in traced)
    assert any("±500 (cellClipThreshold)" in note for note in traced)


def _loop_body(spec: Any) -> Any:
    return next(layer for layer in spec.neuralNetwork.layers
                if layer.WhichOneof("layer") == "loop").loop.bodyNetwork.layers


def _damaged_loop(coremltools: Any, tmp_path: Path, change: Any, name: str = "gru_loop") -> Path:
    spec = coremltools.utils.load_spec(str(GOLDEN / f"{name}.mlmodel"))
    change(spec)
    path = tmp_path / "damaged.mlmodel"
    path.write_bytes(spec.SerializeToString())
    return path


def _softsign(spec: Any) -> None:
    tanh = next(layer for layer in _loop_body(spec) if layer.name == "tanh_1")
    tanh.activation.softsign.SetInParent()


def _reset_gate_keeps_h(spec: Any) -> None:  # h' = (1 − z)∘n + r∘h: no GRU
    kept = next(layer for layer in _loop_body(spec) if layer.name == "mul_5")
    kept.input[0] = "sigmoid_2"


def _five_steps(spec: Any) -> None:
    loop = next(layer for layer in spec.neuralNetwork.layers if layer.WhichOneof("layer") == "loop")
    bound = next(layer for layer in loop.loop.conditionNetwork.layers
                 if layer.WhichOneof("layer") == "loadConstantND")
    bound.loadConstantND.data.floatValue[0] = 5


def _initial_state(spec: Any) -> None:
    start = next(layer for layer in spec.neuralNetwork.layers if layer.name == "concat_1")
    start.loadConstantND.data.floatValue[3] = 0.5


def _unknown_layer(spec: Any) -> None:
    layer = next(layer for layer in _loop_body(spec) if layer.name == "add_7")
    layer.ClearField("add")
    layer.unary.type = 1  # a unary function (exp) where the GRU adds


def _loop_layer(spec: Any) -> Any:
    return next(layer for layer in spec.neuralNetwork.layers if layer.WhichOneof("layer") == "loop")


def _insert_after(layers: Any, name: str, new: Any) -> None:
    items = list(layers)
    del layers[:]
    for layer in items:
        layers.append(layer)
        if layer.name == name:
            layers.append(new)


def _doubling(name: str) -> Any:
    from coremltools.proto import NeuralNetwork_pb2

    layer = NeuralNetwork_pb2.NeuralNetworkLayer(name=f"double_{name}")
    layer.input.append(name)
    layer.output.append(name)
    layer.multiply.alpha = 2.0
    return layer


def _three_steps_at_most(spec: Any) -> None:  # the condition allows 6, the field caps at 3
    _loop_layer(spec).loop.maxLoopIterations = 3


def _steps_from_an_input(spec: Any) -> None:  # an input replaces maxLoopIterations
    _loop_layer(spec).input.append("while_loop_0_0")


def _break_in_body(spec: Any) -> None:
    _loop_body(spec).add(name="stop").loopBreak.SetInParent()


def _condition_rewrites_the_sequence(spec: Any) -> None:
    _loop_layer(spec).loop.conditionNetwork.layers.append(_doubling("transpose_0"))


def _nested_loop_rewrites_the_update(spec: Any) -> None:
    from coremltools.proto import NeuralNetwork_pb2

    inner = NeuralNetwork_pb2.NeuralNetworkLayer(name="inner")
    inner.loop.maxLoopIterations = 1
    inner.loop.bodyNetwork.layers.append(_doubling("expand_dims_1"))
    _insert_after(_loop_body(spec), "expand_dims_1", inner)


def _branch_with_an_else(spec: Any) -> None:
    """The growing branch coremltools writes for a TensorList, on its accepted condition
    (the counter reaching the buffer's length), with an elseBranch that runs every step."""
    from coremltools.proto import NeuralNetwork_pb2

    body, previous = _loop_body(spec), "expand_dims_1"
    for kind, inputs, output in (("getShape", ["while_loop_0_1"], "shape"),
                                 ("sliceStatic", ["shape"], "length"),
                                 ("greaterEqual", ["while_loop_0_0", "length"], "growing")):
        layer = NeuralNetwork_pb2.NeuralNetworkLayer(name=output)
        layer.input.extend(inputs)
        layer.output.append(output)
        getattr(layer, kind).SetInParent()
        if kind == "sliceStatic":
            layer.sliceStatic.beginIds.append(0)
            layer.sliceStatic.endIds.append(1)
            layer.sliceStatic.strides.append(1)
            layer.sliceStatic.beginMasks.append(False)
            layer.sliceStatic.endMasks.append(False)
        _insert_after(body, previous, layer)
        previous = output
    branch = NeuralNetwork_pb2.NeuralNetworkLayer(name="grow")
    branch.input.append("growing")
    branch.branch.ifBranch.SetInParent()
    branch.branch.elseBranch.layers.append(_doubling("expand_dims_1"))
    _insert_after(body, "growing", branch)


def _branch_in_condition(spec: Any) -> None:
    from coremltools.proto import NeuralNetwork_pb2

    branch = NeuralNetwork_pb2.NeuralNetworkLayer(name="choose")
    branch.input.append("less_1")
    branch.branch.ifBranch.layers.append(_doubling("transpose_0"))
    _loop_layer(spec).loop.conditionNetwork.layers.append(branch)


def _start_rewritten_after_its_copy(spec: Any) -> None:
    """The buffer copies concat_1 (now 0.5s); concat_1 is then written again with zeros."""
    layers = spec.neuralNetwork.layers
    start = next(layer for layer in layers if layer.name == "concat_1")
    zeros = type(start)()
    zeros.CopyFrom(start)
    zeros.name = "concat_1_again"
    for k in range(len(start.loadConstantND.data.floatValue)):
        start.loadConstantND.data.floatValue[k] = 0.5
    _insert_after(layers, "while_loop_0_1_input_copy", zeros)


@pytest.mark.parametrize(("change", "message"), [
    (_softsign, r"layer while_loop_0 \(loop\): its body computes a step that is neither .*"
                r"could not follow: layer tanh_1 \(activation\) \(softsign\)"),
    (_unknown_layer, r"could not follow: layer add_7 \(unary\)"),
    (_reset_gate_keeps_h, r"neither a simple RNN \(tanh or relu\), a GRU nor an LSTM .*"
                          r"do not combine"),
    (_five_steps, r"its condition stops after 5 steps, and its buffer of states holds 6"),
    (_initial_state, r"start with values other than zeros: an initial state"),
    (_three_steps_at_most, r"runs at most 3 steps \(maxLoopIterations\), and its buffer of "
                           r"states holds 6"),
    (_steps_from_an_input, r"takes its most steps from while_loop_0_0"),
    (_break_in_body, r"holds layer stop \(loopBreak\), control flow rnnport does not follow"),
    (_condition_rewrites_the_sequence, r"its condition holds layer double_transpose_0 "
                                       r"\(multiply\), which writes transpose_0"),
    (_nested_loop_rewrites_the_update, r"holds layer inner \(loop\), control flow"),
    (_branch_with_an_else, r"holds layer grow \(branch\), with 1 layers run otherwise "
                           r"\(elseBranch\)"),
    (_start_rewritten_after_its_copy, r"start with values other than zeros"),
    (_branch_in_condition, r"its condition holds layer choose \(branch\); rnnport reads a "
                           r"condition that only compares"),
])
def test_a_loop_that_is_no_canonical_cell_is_refused_by_name(coremltools: Any, tmp_path: Path,
                                                             change: Any, message: str) -> None:
    path = _damaged_loop(coremltools, tmp_path, change)
    with pytest.raises(UnsupportedFeatureError, match=message):
        rnnport.read(path)


def test_a_loop_constant_declaring_a_huge_shape_is_charged_before_decoding(
        coremltools: Any, tmp_path: Path) -> None:
    def huge(spec: Any) -> None:
        start = next(layer for layer in spec.neuralNetwork.layers if layer.name == "concat_1")
        start.loadConstantND.shape[0] = 2**30

    with pytest.raises(LimitError, match="expansion"):
        rnnport.read(_damaged_loop(coremltools, tmp_path, huge))


def test_a_second_loose_bias_in_a_loop_is_refused_not_summed(coremltools: Any,
                                                             tmp_path: Path) -> None:
    """Two bias vectors added one after the other: their float32 sum is no value the file
    holds, and the step rounds after each addition."""
    def second_bias(spec: Any) -> None:
        body = _loop_body(spec)
        bias_add = next(layer for layer in body if layer.name.endswith("while/BiasAdd"))
        bias = next(layer for layer in body if layer.output[0] == bias_add.input[1])
        extra, add = type(bias)(), type(bias_add)()
        extra.CopyFrom(bias)
        extra.name = extra.output[0] = "extra_bias"
        add.CopyFrom(bias_add)
        add.name = "extra_bias_add"
        add.input[:] = [bias_add.output[0], "extra_bias"]
        add.output[0] = "extra_bias_sum"
        split = next(layer for layer in body if layer.WhichOneof("layer") == "splitND")
        split.input[0] = "extra_bias_sum"
        _insert_after(body, bias_add.name, extra)
        _insert_after(body, "extra_bias", add)

    with pytest.raises(UnsupportedFeatureError, match="neither a simple RNN .* nor an LSTM"):
        rnnport.read(_damaged_loop(coremltools, tmp_path, second_bias, "keras_lstm"))


def _damaged_block(tmp_path: Path, change: Any, name: str = "program_gru_loop") -> Path:
    """A copy of a golden ML Program whose main block ``change`` rewrote."""
    import shutil

    from coremltools.proto import Model_pb2

    copy = tmp_path / "damaged.mlpackage"
    shutil.copytree(GOLDEN / f"{name}.mlpackage", copy)
    model_file = copy / "Data" / "com.apple.CoreML" / "model.mlmodel"
    spec = Model_pb2.Model.FromString(model_file.read_bytes())
    function = spec.mlProgram.functions["main"]
    change(function.block_specializations[function.opset])
    model_file.write_bytes(spec.SerializeToString())
    return copy


def _while_loop(block: Any) -> Any:
    return next(op for op in block.operations if op.type == "while_loop")


def _damaged_program(tmp_path: Path, change: Any) -> Path:
    return _damaged_block(tmp_path, lambda block: change(_while_loop(block).blocks[1].operations))


def _const_value(block: Any, name: str) -> Any:
    """The value of the const named ``name``, in the block or its loops."""
    ops = [*block.operations, *(op for loop in block.operations for inner in loop.blocks
                                for op in inner.operations)]
    return next(op for op in ops if op.type == "const" and op.outputs[0].name == name
                ).attributes["val"]


def _set(value: Any, data_type: int, sizes: list[int], fill: Any) -> None:
    """Make a const's value a tensor of ``data_type`` (MIL's codes: 21 string, 9 int32)."""
    value.immediateValue.tensor.Clear()
    fill(value.immediateValue.tensor)
    value.type.tensorType.dataType = data_type
    value.type.tensorType.ClearField("dimensions")
    for size in sizes:
        value.type.tensorType.dimensions.add().constant.size = size
    value.type.tensorType.rank = len(sizes)


def _text(name: str) -> Any:
    def change(block: Any) -> None:
        _set(_const_value(block, name), 21, [], lambda tensor: tensor.strings.values.append("x"))
    return change


def _no_axis(block: Any) -> None:
    _set(_const_value(block, "gather_2_axis_0"), 9, [0], lambda tensor: tensor.ints.SetInParent())


def _short_end_mask(block: Any) -> None:
    value = _const_value(block, "var_20_tmp_end_mask_0")
    value.immediateValue.tensor.Clear()
    value.immediateValue.tensor.bools.values.append(True)
    value.type.tensorType.ClearField("dimensions")
    value.type.tensorType.dimensions.add().constant.size = 1


def _cast_to_int32(block: Any) -> None:
    _const_value(block, "concat_1_x0_1_to_fp16_dtype_0").immediateValue.tensor.strings.values[0] \
        = "int32"


def _transpose_x_of_two(block: Any) -> None:
    matmul = next(op for op in _while_loop(block).blocks[1].operations if op.type == "matmul")
    _set(_const_value(block, matmul.inputs["transpose_x"].arguments[0].name), 9, [2],
         lambda tensor: tensor.ints.values.extend([1, 0]))


def _cast_after_squeeze(dtype: str) -> Any:
    """A cast of h to ``dtype`` (MIL's name) between its squeeze and the step's uses."""
    def change(block: Any) -> None:
        operations = _while_loop(block).blocks[1].operations
        items = list(operations)
        squeeze = next(op for op in items if op.outputs[0].name == "squeeze_3")
        mode = next(op for op in items if op.outputs[0].name == "scatter_1_mode_0")
        target, cast = type(mode)(), type(squeeze)()
        target.CopyFrom(mode)
        target.outputs[0].name = "to_dtype"
        target.attributes["val"].immediateValue.tensor.strings.values[0] = dtype
        cast.CopyFrom(squeeze)
        cast.type = "cast"
        del cast.inputs["axes"]
        cast.inputs["dtype"].arguments.add().name = "to_dtype"
        squeeze.outputs[0].name = "squeeze_3_wide"
        cast.inputs["x"].arguments[0].name = "squeeze_3_wide"
        del operations[:]
        for op in items:
            operations.append(op)
            if op is squeeze:
                operations.extend([target, cast])
    return change


def test_a_cast_in_a_while_loop_passes_only_between_float_types_the_step_holds(
        coremltools: Any, tmp_path: Path) -> None:
    golden = rnnport.read(GOLDEN / "program_gru_loop.mlpackage")
    assert rnnport.read(_damaged_block(tmp_path / "fp32", _cast_after_squeeze("fp32"))) == golden
    for dtype, why in (("fp16", "to fp16 in a float32 step"), ("int32", "to int32")):
        with pytest.raises(UnsupportedFeatureError,
                           match=rf"could not follow: cast squeeze_3 \({why}\)"):
            rnnport.read(_damaged_block(tmp_path / dtype, _cast_after_squeeze(dtype)))


def _pair(name: str) -> Any:
    def change(block: Any) -> None:
        _set(_const_value(block, name), 9, [2], lambda tensor: tensor.ints.values.extend([1, 0]))
    return change


@pytest.mark.parametrize(("change", "message"), [
    (_pair("var_23_batch_first_direction_0"), r"lstm \S+ direction is 2 values of type int64; "
                                              r"expected a string"),
    (_pair("var_23_batch_first_output_sequence_0"), r"output_sequence is 2 values of type "
                                                    r"int64, not one bool; expected a bool"),
    (_text("var_23_batch_first_output_sequence_0"), r"output_sequence is 'x', not one bool"),
    (_pair("var_23_batch_first_cell_activation_0"), r"cell_activation is 2 values"),
])
def test_an_lstm_operation_with_badly_typed_options_is_damaged(
        coremltools: Any, tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        rnnport.read(_damaged_block(tmp_path, change, "program_lstm"))


@pytest.mark.parametrize(("change", "name", "error", "message"), [
    (_no_axis, "program_gru_loop", UnsupportedFeatureError,
     r"could not follow gather gather_2 \(axis is 0 values of type int64, not one number\)"),
    (_text("gather_2_axis_0"), "program_gru_loop", UnsupportedFeatureError,
     r"could not follow gather gather_2 \(axis is 'x', not whole numbers\)"),
    (_text("while_loop_0_loop_vars0_0"), "program_gru_loop", UnsupportedFeatureError,
     r"not a step counter .* could not follow const while_loop_0_loop_vars0_0"),
    (_text("sub_1_x_0"), "program_gru_loop", UnsupportedFeatureError,
     r"could not follow: const sub_1_x_0 \(not a number\)"),
    (_text("slice_by_index_1"), "program_gru_loop", UnsupportedFeatureError,
     r"its condition is not the step counter .* could not follow const slice_by_index_1"),
    (_short_end_mask, "program_gru_loop", FormatError,
     r"slice_by_index var_20_tmp has end_mask of 1 values and begin of 3"),
    (_cast_to_int32, "program_gru_loop_f16", UnsupportedFeatureError,
     r"could not follow cast concat_1_x0_1_to_fp16 \(to int32\)"),
    (_transpose_x_of_two, "program_keras_lstm", UnsupportedFeatureError,
     r"could not follow: matmul \S+ \(transpose_x is 2 values of type int64, not one bool\)"),
])
def test_a_while_loop_with_badly_typed_constants_is_refused_by_name(
        coremltools: Any, tmp_path: Path, change: Any, name: str, error: type,
        message: str) -> None:
    rnnport.read(_damaged_block(tmp_path, lambda block: None, name))  # the golden reads
    with pytest.raises(error, match=message):
        rnnport.read(_damaged_block(tmp_path / "damaged", change, name))


@pytest.mark.parametrize(("op_type", "new_type", "message"), [
    ("tanh", "softsign", r"while_loop_0_0 \(while_loop\): its body computes a step .*could not "
                         r"follow: softsign tanh_1"),
    ("sub", "add", r"neither a simple RNN \(tanh or relu\), a GRU nor an LSTM"),
])
def test_a_while_loop_that_is_no_canonical_cell_is_refused_by_name(
        coremltools: Any, tmp_path: Path, op_type: str, new_type: str, message: str) -> None:
    def change(operations: Any) -> None:
        next(op for op in operations if op.type == op_type).type = new_type

    with pytest.raises(UnsupportedFeatureError, match=message):
        rnnport.read(_damaged_program(tmp_path, change))


def test_loops_are_told_apart_and_their_layers_noted() -> None:
    assert notes(GOLDEN / "program_gru_loop.mlpackage") == [
        "other operations of the ML Program beside the network: 2 transpose, 1 slice_by_index",
        "while_loop while_loop_0_0 (while_loop) runs 6 steps, the length of the sequence it was "
        "converted with: Core ML runs exactly that many, forward every step of the x it is given"]
    assert any("computes its step in float16 in Core ML; rnnport computes it in float32" in note
               for note in notes(GOLDEN / "program_gru_loop_f16.mlpackage"))
    assert any("while_loop_0 runs 6 steps" in note for note in notes(GOLDEN / "gru_loop.mlmodel"))
    assert "20_tmp (slice)" in notes(GOLDEN / "gru_loop.mlmodel")[0]
    assert not any("last step" in note for name in ("gru_loop", "keras_lstm")
                   for note in notes(GOLDEN / f"{name}.mlmodel"))  # every step is the output
    choices = networks(GOLDEN / "gru_loop_2layer.mlmodel")
    assert len(choices.entries) == 1 and "while_loop_0 (loop) → while_loop_1 (loop)" in \
        choices.entries[0][1]
    with pytest.raises(UnsupportedFeatureError, match="cannot hold a reset-after GRU"):
        rnnport.write(rnnport.read(GOLDEN / "gru_loop.mlmodel"), "coreml")


def test_an_ml_program_is_read_from_its_package_alone(tmp_path: Path) -> None:
    package = GOLDEN / "program_lstm.mlpackage"
    model = rnnport.read(package / "Data" / "com.apple.CoreML" / "model.mlmodel")
    assert model == rnnport.read(package)
    assert notes(package) == ["other operations of the ML Program beside the network: "
                              "2 transpose"]
    choices = networks(GOLDEN / "program_lstm_bi_2layer.mlpackage")
    assert len(choices.entries) == 1 and "lstm" in choices.entries[0][1]
    with pytest.raises(FormatError, match="outside the model's bytes"):
        rnnport.read(CoreMLModel((package / "Data" / "com.apple.CoreML" /
                                  "model.mlmodel").read_bytes()))
    copy = tmp_path / "copy.mlpackage"
    import shutil

    shutil.copytree(package, copy)
    weights = copy / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    weights.write_bytes(weights.read_bytes()[:200])
    with pytest.raises(FormatError, match="damaged"):
        rnnport.read(copy)


def test_swapping_two_gates_changes_the_output(coremltools: Any) -> None:
    from coremltools.proto import Model_pb2

    path, arrays = golden("lstm")
    spec = Model_pb2.Model()
    spec.ParseFromString(path.read_bytes())
    weights = spec.neuralNetwork.layers[0].uniDirectionalLSTM.weightParams
    swapped = list(weights.inputGateWeightMatrix.floatValue)
    weights.inputGateWeightMatrix.CopyFrom(weights.forgetGateWeightMatrix)
    del weights.forgetGateWeightMatrix.floatValue[:]
    weights.forgetGateWeightMatrix.floatValue.extend(swapped)
    model = rnnport.read(CoreMLModel(spec.SerializeToString()))
    assert np.abs(output(model, arrays["x"]) - arrays["y"]).max() > 1e-2


def _random(spec: Spec, seed: int, dtype: str = "float32") -> RNN:
    return RNN.random(spec, seed=seed).astype(dtype)


def _builder_spec(coremltools: Any, model: RNN) -> Any:
    """The same network as coremltools' NeuralNetworkBuilder writes it."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    spec = model.spec
    size = spec.num_directions * spec.hidden_size
    builder = NeuralNetworkBuilder([("input", datatypes.Array(spec.input_size))],
                                   [("output", datatypes.Array(size))])
    hidden = spec.hidden_size
    blob = "input"
    for index, directions in enumerate(model.params):
        top = "output" if index == spec.num_layers - 1 else f"layer{index}_output"
        inputs = spec.layer_input_size(index)
        per_direction = []
        for named in directions:
            blocks = {key: np.split(named[key], spec.gate_count)
                      for key in ("weight_ih", "weight_hh")}
            bias = np.split(named["bias_ih"] + named["bias_hh"], spec.gate_count)
            order = {"lstm": [0, 1, 3, 2], "gru": [1, 0, 2]}.get(spec.cell, [0])
            per_direction.append([[blocks["weight_hh"][k] for k in order],
                                  [blocks["weight_ih"][k] for k in order],
                                  [bias[k] for k in order]])
        if spec.cell == "lstm" and spec.bidirectional:
            (rf, wf, bf), (rb, wb, bb) = per_direction
            builder.add_bidirlstm(f"biDirectionalLSTM_{index}", rf, wf, bf, rb, wb, bb,
                                  hidden, inputs, [blob], [top], output_all=True,
                                  cell_clip_threshold=FLOAT32_MAX)
        elif spec.cell == "lstm":
            r, w, b = per_direction[0]
            builder.add_unilstm(f"uniDirectionalLSTM_{index}", r, w, b, hidden, inputs,
                                [blob], [top], output_all=True, cell_clip_threshold=FLOAT32_MAX)
        elif spec.cell == "gru":
            r, w, b = per_direction[0]
            builder.add_gru(f"gru_{index}", r, w, b, hidden, inputs, [blob], [top],
                            inner_activation="SIGMOID", output_all=True)
        else:
            r, w, b = per_direction[0]
            builder.add_simple_rnn(f"simpleRecurrent_{index}", r[0], w[0], b[0], hidden,
                                   inputs, "RELU" if spec.cell == "rnn_relu" else "TANH",
                                   [blob], [top], output_all=True)
        blob = top
    return builder.spec


@pytest.mark.parametrize("spec", [
    Spec("lstm", 5, 8),
    Spec("lstm", 4, 6, num_layers=2, bidirectional=True),
    Spec("gru", 5, 8, reset_after=False),
    Spec("rnn_relu", 5, 8),
], ids=["lstm", "bi_lstm_2layer", "gru_reset_before", "rnn_relu"])
def test_written_files_are_what_coremltools_writes(coremltools: Any, spec: Spec,
                                                   tmp_path: Path) -> None:
    from coremltools.proto import Model_pb2

    model = _random(spec, 7)
    path = tmp_path / "model.mlmodel"
    rnnport.write(model, "coreml", path)
    written = Model_pb2.Model()
    written.ParseFromString(path.read_bytes())
    built = _builder_spec(coremltools, model)
    assert list(written.neuralNetwork.layers) == list(built.neuralNetwork.layers)
    for mine, theirs in ((written.description.input, built.description.input),
                         (written.description.output, built.description.output)):
        assert [(item.name, list(item.type.multiArrayType.shape)) for item in mine] == \
            [(item.name, list(item.type.multiArrayType.shape)) for item in theirs]
    loaded = coremltools.models.MLModel(str(path), skip_model_load=True)
    assert loaded.get_spec() == written
    x = np.random.default_rng(1).uniform(-1, 1, (2, 6, spec.input_size)).astype(np.float32)
    np.testing.assert_array_equal(output(rnnport.read(path), x), output(model, x))


def test_float16_peepholes_clip_and_coupled_gates_round_trip(coremltools: Any,
                                                             tmp_path: Path) -> None:
    spec = Spec("lstm", 3, 4, peepholes=True, cell_clip=2.5, input_forget=True, reverse=True,
                activations=(("HardSigmoid", 0.25, 0.5), ("Tanh", 0, 0), ("Softsign", 0, 0)))
    model = _random(spec, 3, "float16")
    path = tmp_path / "f16.mlmodel"
    rnnport.write(model, "coreml", path)
    loaded = coremltools.models.MLModel(str(path), skip_model_load=True).get_spec()
    layer = loaded.neuralNetwork.layers[0].uniDirectionalLSTM
    assert layer.params.hasPeepholeVectors and layer.params.coupledInputAndForgetGate
    assert layer.reverseInput and layer.params.cellClipThreshold == 2.5
    assert len(layer.weightParams.inputGateWeightMatrix.float16Value) == 2 * 4 * 3
    back = rnnport.read(path)
    assert back.spec == spec
    for key, array in model.params[0][0].items():
        assert np.array_equal(back.params[0][0][key], array) or key.startswith("bias")


def test_a_reset_after_gru_is_refused_naming_who_holds_it() -> None:
    with pytest.raises(UnsupportedFeatureError, match="reset"):
        rnnport.write(_random(Spec("gru", 3, 4), 1), "coreml")


def test_verify_says_core_ml_cannot_run_here() -> None:
    path, arrays = golden("lstm")
    said = framework_forward(path, rnnport.read(path), arrays["x"])
    assert isinstance(said, str) and "macOS" in said


def _model(network_layers: bytes) -> bytes:
    return put_varint(1, 4) + put_bytes(FIELDS["Model"]["neuralNetwork"], network_layers)


def _layer(kind: str, body: bytes) -> bytes:
    numbers = FIELDS["NeuralNetworkLayer"]
    return put_bytes(1, put_bytes(numbers["name"], b"rnn") + put_bytes(numbers[kind], body))


TANH = put_bytes(10, put_bytes(FIELDS["ActivationParams"]["tanh"], b""))


@pytest.mark.parametrize("data, error, message", [
    (_model(_layer("simpleRecurrent", put_varint(1, 1 << 30) + put_varint(2, 1 << 30) + TANH
                   + put_bytes(30, put_bytes(1, b"\0" * 16)))), (LimitError, FormatError),
     "expansion|expected"),
    (_model(_layer("simpleRecurrent", put_varint(1, 2) + put_varint(2, 2) + TANH
                   + put_bytes(30, put_bytes(31, b"\1" * 4)))), UnsupportedFeatureError,
     "quantized weights"),
    (_model(_layer("simpleRecurrent", put_varint(1, 2) + put_varint(2, 2)
                   + put_bytes(10, put_bytes(20, b""))))[:-1] + b"", FormatError, "damaged"),
    (put_varint(1, 4) + put_bytes(FIELDS["Model"]["mlProgram"], b""), FormatError,
     "ML Program without functions"),
    (put_varint(1, 4) + put_bytes(202, put_bytes(1, b"")) * 1, FormatError, "found"),
], ids=["huge_sizes", "quantized", "truncated", "ml_program", "empty_pipeline"])
def test_damaged_and_hostile_models_are_rnnport_errors(data: bytes, error: Any,
                                                       message: str) -> None:
    with pytest.raises(error, match=message):
        rnnport.read(CoreMLModel(data))


def test_deeply_nested_pipelines_are_refused() -> None:
    data = put_varint(1, 4) + put_bytes(FIELDS["Model"]["neuralNetwork"], b"")
    for _ in range(40):
        data = put_varint(1, 4) + put_bytes(FIELDS["Model"]["pipeline"], put_bytes(1, data))
    with pytest.raises(FormatError, match="nested deeper"):
        rnnport.read(CoreMLModel(data))


def test_truncated_golden_files_are_rnnport_errors(tmp_path: Path) -> None:
    data = (GOLDEN / "lstm_bi_2layer.mlmodel").read_bytes()
    for cut in (len(data) // 3, len(data) - 7):
        (tmp_path / "cut.mlmodel").write_bytes(data[:cut])
        with pytest.raises(FormatError):
            rnnport.read(tmp_path / "cut.mlmodel")


def test_unset_hard_sigmoid_and_ml_packages_are_refused_by_name(coremltools: Any,
                                                                tmp_path: Path) -> None:
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    spec.ParseFromString((GOLDEN / "gru.mlmodel").read_bytes())
    spec.neuralNetwork.layers[0].gru.activations[0].sigmoidHard.Clear()
    with pytest.raises(UnsupportedFeatureError, match="alpha and beta unset"):
        rnnport.read(spec)
    spec.neuralNetwork.layers[0].gru.activations[0].thresholdedReLU.alpha = 1.0
    with pytest.raises(UnsupportedFeatureError, match="thresholdedReLU"):
        rnnport.read(spec)
    (tmp_path / "model.mlpackage").mkdir()
    with pytest.raises(FormatError, match="Manifest.json"):
        rnnport.read(tmp_path / "model.mlpackage")


def test_the_format_declares_what_it_holds() -> None:
    assert not FORMAT.reset_after and "reset_before" in FORMAT.features


@pytest.mark.parametrize("spec", [
    Spec("gru", 4, 6, bidirectional=True, reset_after=False),
    Spec("gru", 4, 6, num_layers=2, bidirectional=True, reset_after=False),
    Spec("rnn_tanh", 4, 6, bidirectional=True),
    Spec("rnn_relu", 4, 6, num_layers=2, bidirectional=True),
], ids=["bi_gru", "bi_gru_2layer", "bi_rnn_tanh", "bi_rnn_relu_2layer"])
def test_bidirectional_gru_and_rnn_round_trip_as_layer_pairs(coremltools: Any, spec: Spec,
                                                             tmp_path: Path) -> None:
    model = _random(spec, 11)
    path = tmp_path / "model.mlmodel"
    rnnport.write(model, "coreml", path)
    loaded = coremltools.models.MLModel(str(path), skip_model_load=True).get_spec()
    types = [layer.WhichOneof("layer") for layer in loaded.neuralNetwork.layers]
    kind = "gru" if spec.cell == "gru" else "simpleRecurrent"
    assert types == [kind, kind, "reverse", "concat"] * spec.num_layers
    back = rnnport.read(path)
    assert back.spec == spec
    for mine, theirs in zip(back.params, model.params, strict=True):
        for named, expected in zip(mine, theirs, strict=True):
            assert named["weight_ih"].tobytes() == expected["weight_ih"].tobytes()
    x = np.random.default_rng(2).uniform(-1, 1, (2, 5, spec.input_size)).astype(np.float32)
    np.testing.assert_array_equal(output(back, x), output(model, x))


def _builder_bidirectional_gru(coremltools: Any, model: RNN, order: str = "fb") -> Any:
    """A bidirectional GRU built with coremltools' NeuralNetworkBuilder: two gru layers,
    the second reverse_input, its outputs flipped back by add_reverse, joined by concat."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    spec = model.spec
    builder = NeuralNetworkBuilder(
        [("input", datatypes.Array(1, 1, spec.input_size, 1, 1))],
        [("output", datatypes.Array(1, 1, 2 * spec.hidden_size, 1, 1))],
        disable_rank5_shape_mapping=True)
    for name, named, reverse in (("forward", model.params[0][0], False),
                                 ("backward", model.params[0][1], True)):
        blocks = {key: np.split(named[key], 3) for key in ("weight_ih", "weight_hh")}
        bias = np.split(named["bias_ih"] + named["bias_hh"], 3)
        order_zro = [1, 0, 2]
        builder.add_gru(name, [blocks["weight_hh"][k] for k in order_zro],
                        [blocks["weight_ih"][k] for k in order_zro],
                        [bias[k] for k in order_zro], spec.hidden_size, spec.input_size,
                        ["input"], [name if not reverse else "backward_reversed"],
                        inner_activation="SIGMOID", output_all=True, reverse_input=reverse)
    builder.add_reverse("flip", "backward_reversed", "backward", [True] + [False] * 4)
    inputs = ["forward", "backward"] if order == "fb" else ["backward", "forward"]
    builder.add_elementwise("join", inputs, "output", "CONCAT")
    return builder.spec


def test_a_builder_made_bidirectional_gru_computes_onnx_runtimes_numbers(
        coremltools: Any) -> None:
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    spec = Spec("gru", 3, 5, bidirectional=True, reset_after=False)
    model = _random(spec, 5)
    read = rnnport.read(_builder_bidirectional_gru(coremltools, model), "coreml")
    assert read.spec == spec
    x = np.random.default_rng(3).uniform(-1, 1, (2, 7, 3)).astype(np.float32)
    hidden = spec.hidden_size
    zrn = [1, 0, 2]  # canonical r, z, n → ONNX z, r, h

    def onnx_order(array: np.ndarray) -> np.ndarray:
        parts = np.split(array, 3)
        return np.concatenate([parts[k] for k in zrn])

    directions = model.params[0]
    weights = np.stack([onnx_order(named["weight_ih"]) for named in directions])
    recursions = np.stack([onnx_order(named["weight_hh"]) for named in directions])
    biases = np.stack([np.concatenate([onnx_order(named["bias_ih"]),
                                       onnx_order(named["bias_hh"])]) for named in directions])
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], hidden_size=hidden,
                            direction="bidirectional", linear_before_reset=0)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [7, 2, 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(weights, "W"), onnx.numpy_helper.from_array(
            recursions, "R"), onnx.numpy_helper.from_array(biases, "B")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)],
                              ir_version=8)
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    y = session.run(None, {"X": x.transpose(1, 0, 2)})[0]  # (T, D, B, H)
    expected = y.transpose(2, 0, 1, 3).reshape(2, 7, 2 * hidden)
    np.testing.assert_allclose(output(read, x), expected, atol=1e-5)


def test_a_bidirectional_pair_joined_backward_first_is_read_as_two_layers(
        coremltools: Any) -> None:
    model = _random(Spec("gru", 3, 5, bidirectional=True, reset_after=False), 5)
    built = _builder_bidirectional_gru(coremltools, model, order="bf")
    with pytest.raises(FormatError, match="holds 2 recurrent networks"):
        rnnport.read(built, "coreml")
    forward = rnnport.read(built, "coreml", layer="forward")
    assert forward.spec == Spec("gru", 3, 5, reset_after=False)


def test_the_writer_refuses_to_drop_a_direction() -> None:
    from rnnport.formats.coreml import writer

    model = _random(Spec("gru", 3, 5, bidirectional=True, reset_after=False), 5)
    layers = [writer.Written("gru_0", 410, ("input",), "output", b"")]
    with pytest.raises(UnsupportedFeatureError, match="refuses to drop any"):
        writer._check_every_direction_written(layers, [model.spec])


@pytest.mark.parametrize("spec", [
    Spec("lstm", 3, 4), Spec("lstm", 3, 4, num_layers=2, bidirectional=True),
    Spec("lstm", 3, 4, peepholes=True, cell_clip=2.5, reverse=True),
    Spec("rnn_relu", 3, 4, num_layers=2),
], ids=["lstm", "bidirectional_2layer", "peepholes_clip_reverse", "rnn_relu"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_ml_packages_written_load_in_coremltools_and_read_back_bit_exact(
        coremltools: Any, spec: Spec, dtype: str, tmp_path: Path) -> None:
    from coremltools.converters.mil.frontend.milproto.load import load

    model = RNN.random(spec, seed=1).astype(dtype)
    path = tmp_path / "model.mlpackage"
    rnnport.write(model, "coreml", path)
    loaded = coremltools.models.MLModel(str(path), skip_model_load=True)
    found = loaded.get_spec()
    program = load(found, found.specificationVersion, loaded.weights_dir)  # MIL's own checks
    kinds = [op.op_type for op in program.functions["main"].operations]
    assert kinds.count("lstm" if spec.cell == "lstm" else "rnn") == spec.num_layers
    assert kinds.count("reverse") == (spec.num_layers if spec.reverse else 0)
    back = rnnport.read(path)
    assert back.spec == model.spec
    for named, named_back in zip((d for layer in model.params for d in layer),
                                 (d for layer in back.params for d in layer), strict=True):
        for key, array in named.items():
            expected = array + named["bias_hh"] if key == "bias_ih" else \
                np.zeros_like(array) if key == "bias_hh" else array
            assert named_back[key].dtype == array.dtype
            assert np.array_equal(named_back[key].view(np.uint8), expected.view(np.uint8)), key


def test_a_gru_into_an_ml_package_is_refused_by_name(tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 4, reset_after=False), seed=1)
    with pytest.raises(UnsupportedFeatureError, match="NeuralNetwork .mlmodel"):
        rnnport.write(model, "coreml", tmp_path / "model.mlpackage")
    assert not list(tmp_path.iterdir())


# -- .mlpackage outputs and inputs -----------------------------------------------------------


def _holds(path: Path, model: RNN) -> bool:
    """Whether the package at ``path`` holds ``model``'s weights (its biases summed)."""
    return np.array_equal(rnnport.read(path).params[0][0]["weight_hh"],
                          model.params[0][0]["weight_hh"])


def _hidden(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir() if entry.name.startswith("."))


def test_an_ml_package_is_replaced_only_with_overwrite_and_never_an_other_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rnnport.cli import main
    from rnnport.formats.coreml import package as package_module

    first = RNN.random(Spec("lstm", 3, 4), seed=1)
    second = RNN.random(Spec("lstm", 3, 4), seed=2)
    path = tmp_path / "model.mlpackage"
    rnnport.write(first, "coreml", path)
    with pytest.raises(FormatError, match="exists; pass overwrite=True"):
        rnnport.write(second, "coreml", path)
    assert _holds(path, first)
    rnnport.write(second, "coreml", path, overwrite=True)
    assert _holds(path, second) and _hidden(tmp_path) == []

    def broken() -> bytes:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(package_module, "manifest", broken)  # the write fails half-way
    with pytest.raises(FormatError, match="Nothing was written"):
        rnnport.write(first, "coreml", path, overwrite=True)
    monkeypatch.undo()
    assert _holds(path, second) and _hidden(tmp_path) == []

    source = tmp_path / "source.mlpackage"
    rnnport.write(first, "coreml", source)
    assert main(["convert", str(source), str(path), "--to", "coreml"]) != 0
    assert _holds(path, second)
    assert main(["convert", str(source), str(path), "--to", "coreml", "--force"]) == 0
    assert _holds(path, first) and _hidden(tmp_path) == []

    from rnnport.io import atomic  # where renameat2 is missing: renamed aside, then in

    monkeypatch.setattr(atomic, "_renameat2", lambda *args: False)
    rnnport.write(second, "coreml", path, overwrite=True)
    rnnport.write(second, "coreml", tmp_path / "new.mlpackage")
    monkeypatch.undo()
    assert _holds(path, second) and _holds(tmp_path / "new.mlpackage", second)
    assert _hidden(tmp_path) == []

    other = tmp_path / "other.mlpackage"  # a folder, but no package: never replaced
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(FormatError, match="is a folder"):
        rnnport.write(first, "coreml", other, overwrite=True)
    assert (other / "keep.txt").read_text() == "mine"
    a_file = tmp_path / "file.mlpackage"  # a file there is replaced as any file is
    a_file.write_bytes(b"old")
    with pytest.raises(FormatError, match="exists"):
        rnnport.write(first, "coreml", a_file)
    rnnport.write(first, "coreml", a_file, overwrite=True)
    assert _holds(a_file, first) and _hidden(tmp_path) == []


def test_a_killed_package_writes_temporary_folder_is_removed_by_the_next_write(
        tmp_path: Path) -> None:
    import fcntl
    import os

    path = tmp_path / "model.mlpackage"
    stale = tmp_path / ".model.mlpackage.k1ll3d_x.partial"
    (stale / "Data").mkdir(parents=True)
    (stale / "Data" / "weight.bin").write_bytes(b"half")
    live = tmp_path / ".model.mlpackage.l1ve0000.partial"
    live.mkdir()
    held = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # a writer still at work holds its folder
        rnnport.write(RNN.random(Spec("lstm", 3, 4), seed=1), "coreml", path)
        assert _hidden(tmp_path) == [live.name]
    finally:
        os.close(held)
    rnnport.write(RNN.random(Spec("lstm", 3, 4), seed=1), "coreml", path, overwrite=True)
    assert _hidden(tmp_path) == []


def test_the_files_of_a_package_are_inputs_no_output_may_be(tmp_path: Path) -> None:
    import shutil

    from rnnport.api import Conversion
    from rnnport.cli import main

    package = tmp_path / "model.mlpackage"
    shutil.copytree(GOLDEN / "program_lstm.mlpackage", package)
    inside = package / "Data" / "com.apple.CoreML"
    assert {path.resolve() for path in FORMAT.input_files(package)} >= {
        (package / "Manifest.json").resolve(), (inside / "model.mlmodel").resolve(),
        (inside / "weights" / "weight.bin").resolve()}
    before = {path: path.read_bytes() for path in package.rglob("*") if path.is_file()}
    for output in (inside / "weights" / "weight.bin", package / "Manifest.json"):
        with pytest.raises(FormatError, match="input"):
            Conversion.plan(package, "coreml", path=output, overwrite=True,
                            options={"program": False})
    # The package folder holding the source's files is no output either.
    with pytest.raises(FormatError, match="input"):
        Conversion.plan(inside / "model.mlmodel", "coreml", path=package, overwrite=True)
    assert main(["convert", str(inside / "model.mlmodel"), str(package), "--to", "coreml",
                 "--force"]) != 0
    assert main(["convert", str(package), str(package), "--to", "coreml", "--force"]) != 0
    assert main(["convert", str(package), str(package), "--to", "coreml"]) != 0
    assert {path: path.read_bytes() for path in package.rglob("*") if path.is_file()} == before
    assert _hidden(tmp_path) == []


@pytest.mark.parametrize("link", ["Manifest.json", "Data/com.apple.CoreML/model.mlmodel",
                                  "Data/com.apple.CoreML/weights/weight.bin",
                                  "Data/com.apple.CoreML/weights", "Data"])
def test_a_package_read_opens_no_file_outside_it(tmp_path: Path, link: str) -> None:
    import shutil

    outside = tmp_path / "outside"
    shutil.copytree(GOLDEN / "program_lstm.mlpackage", outside)
    package = tmp_path / "model.mlpackage"
    shutil.copytree(GOLDEN / "program_lstm.mlpackage", package)
    target = package / link
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    target.symlink_to(outside / link)
    with pytest.raises(FormatError, match="leads out"):
        rnnport.read(package)


def _torch_lstm_on_flipped(model: RNN, x: np.ndarray) -> np.ndarray:
    """What Core ML computes for a layer with reverseInput, by coremltools' own tests of
    ``direction="reverse"``: PyTorch's LSTM over the flipped sequence, in the order it ran."""
    import torch

    spec = model.spec
    module = torch.nn.LSTM(spec.input_size, spec.hidden_size, batch_first=True)
    named = model.params[0][0]
    with torch.no_grad():
        for key in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(module, f"{key}_l0").copy_(torch.from_numpy(named[key]))
        return module(torch.from_numpy(np.ascontiguousarray(x[:, ::-1])))[0].numpy()


def _reverse_lstm_spec(coremltools: Any, model: RNN, flip: bool, sequence: bool = True,
                       moved: str = "") -> Any:
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    spec, named = model.spec, model.params[0][0]
    order = [0, 1, 3, 2]
    blocks = {key: np.split(named[key], 4) for key in ("weight_ih", "weight_hh")}
    bias = np.split(named["bias_ih"] + named["bias_hh"], 4)
    builder = NeuralNetworkBuilder([("input", datatypes.Array(spec.input_size))],
                                   [("output", datatypes.Array(spec.hidden_size))])
    builder.add_unilstm("backward", [blocks["weight_hh"][k] for k in order],
                        [blocks["weight_ih"][k] for k in order], [bias[k] for k in order],
                        spec.hidden_size, spec.input_size, ["input"],
                        ["ran" if flip else "output"], output_all=sequence, reverse_input=True,
                        cell_clip_threshold=FLOAT32_MAX)
    if moved == "expand_dims":
        builder.add_expand_dims("moved", "ran", "moved", axes=[0])
    elif moved == "reshape_static":
        builder.add_reshape_static("moved", "ran", "moved", output_shape=[1, 12, 4, 1, 1])
    if flip:
        builder.add_reverse("time_order", "moved" if moved else "ran", "output",
                            reverse_dim=[1, 0, 0, 0, 0])
    return builder.spec


def test_a_reverse_input_layer_outputs_in_run_order_and_reads_only_put_back(
        coremltools: Any, tmp_path: Path) -> None:
    model = _random(Spec("lstm", 3, 4, reverse=True), 5)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 6, 3)).astype(np.float32)
    ran = _torch_lstm_on_flipped(model, x)
    flipped = tmp_path / "flipped.mlmodel"
    coremltools.utils.save_spec(_reverse_lstm_spec(coremltools, model, flip=True), str(flipped))
    back = rnnport.read(flipped)
    assert back.spec == model.spec
    np.testing.assert_allclose(output(back, x), ran[:, ::-1], rtol=0, atol=1e-6)
    bare = tmp_path / "bare.mlmodel"
    coremltools.utils.save_spec(_reverse_lstm_spec(coremltools, model, flip=False), str(bare))
    with pytest.raises(UnsupportedFeatureError, match="order it ran them"):
        rnnport.read(bare)
    last = tmp_path / "last.mlmodel"
    coremltools.utils.save_spec(_reverse_lstm_spec(coremltools, model, flip=False,
                                                   sequence=False), str(last))
    np.testing.assert_allclose(output(rnnport.read(last), x)[:, 0], ran[:, -1], rtol=0,
                               atol=1e-6)
    assert any("y[:, 0]" in note for note in notes(last))


def test_a_reverse_after_a_layer_that_moves_the_axes_puts_nothing_back(
        coremltools: Any, tmp_path: Path) -> None:
    """With an expandDims or a reshape between them, the reverse flips another axis (one of
    size 1 here): the layer's outputs stay in the order it ran them."""
    model = _random(Spec("lstm", 3, 4, reverse=True), 5)
    for moved in ("expand_dims", "reshape_static"):
        path = tmp_path / f"{moved}.mlmodel"
        coremltools.utils.save_spec(_reverse_lstm_spec(coremltools, model, flip=True,
                                                       moved=moved), str(path))
        with pytest.raises(UnsupportedFeatureError, match="order it ran them"):
            rnnport.read(path)


def test_a_reverse_layer_is_written_with_the_reverse_that_puts_it_in_time_order(
        coremltools: Any, tmp_path: Path) -> None:
    model = _random(Spec("lstm", 3, 4, reverse=True), 6)
    path = tmp_path / "reverse.mlmodel"
    rnnport.write(model, "coreml", path)
    layers = coremltools.models.MLModel(str(path), skip_model_load=True).get_spec() \
        .neuralNetwork.layers
    assert [layer.WhichOneof("layer") for layer in layers] == ["uniDirectionalLSTM", "reverse"]
    assert layers[0].uniDirectionalLSTM.reverseInput
    assert list(layers[1].reverse.reverseDim) == [True, False, False, False, False]
    x = np.random.default_rng(3).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(output(rnnport.read(path), x),
                               _torch_lstm_on_flipped(model, x)[:, ::-1], rtol=0, atol=1e-6)


def test_forget_bias_adds_nothing_and_notes_say_so(coremltools: Any, tmp_path: Path) -> None:
    model = _random(Spec("lstm", 3, 4), 8)
    spec = _builder_spec(coremltools, model)
    spec.neuralNetwork.layers[0].uniDirectionalLSTM.params.forgetBias = True
    path = tmp_path / "forget_bias.mlmodel"
    coremltools.utils.save_spec(spec, str(path))
    back = rnnport.read(path)
    x = np.random.default_rng(4).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    np.testing.assert_allclose(output(back, x), output(model, x), rtol=0, atol=1e-6)
    assert any("forgetBias" in note for note in notes(path))


def _mil_reverse_lstm(coremltools: Any, model: RNN, flip: bool, folder: Path) -> Path:
    from coremltools.converters.mil import Builder as mb

    spec, named = model.spec, model.params[0][0]
    mil = {key: np.concatenate([np.split(named[key], 4)[k] for k in (0, 1, 3, 2)])
           for key in ("weight_ih", "weight_hh")}
    bias = np.concatenate([np.split(named["bias_ih"] + named["bias_hh"], 4)[k]
                           for k in (0, 1, 3, 2)])

    @mb.program(input_specs=[mb.TensorSpec(shape=(6, 2, spec.input_size))])
    def program(x: Any) -> Any:
        zeros = np.zeros((2, spec.hidden_size), np.float32)
        y, _, _ = mb.lstm(x=x, initial_h=zeros, initial_c=zeros, weight_ih=mil["weight_ih"],
                          weight_hh=mil["weight_hh"], bias=bias, direction="reverse",
                          output_sequence=True)
        return mb.reverse(x=y, axes=[0]) if flip else y

    path = folder / f"reverse_{flip}.mlpackage"
    coremltools.convert(program, convert_to="mlprogram", skip_model_load=True,
                        compute_precision=coremltools.precision.FLOAT32).save(str(path))
    return path


def test_a_reverse_ml_program_lstm_reads_only_put_back_in_time_order(
        coremltools: Any, tmp_path: Path) -> None:
    model = _random(Spec("lstm", 3, 4, reverse=True), 9)
    x = np.random.default_rng(5).uniform(-1, 1, (2, 6, 3)).astype(np.float32)
    back = rnnport.read(_mil_reverse_lstm(coremltools, model, True, tmp_path))
    assert back.spec == model.spec
    np.testing.assert_allclose(output(back, x), _torch_lstm_on_flipped(model, x)[:, ::-1],
                               rtol=0, atol=1e-6)
    with pytest.raises(UnsupportedFeatureError, match="order it ran them"):
        rnnport.read(_mil_reverse_lstm(coremltools, model, False, tmp_path))
