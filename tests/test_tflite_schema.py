"""The TFLite reader (``rnnport.io.tflite_schema``) against LiteRT's own generated schema code.

Expected values come from the ``flatbuffers``-based ``schema_py_generated`` module that
ships with ``ai-edge-litert`` (a structurally different reader), and the weights from the
Keras models the golden files were converted from (``tools/golden_tflite.py``).
"""

from __future__ import annotations

import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from rnnport.errors import DTypeError, FormatError
from rnnport.io import tflite_schema as tfl

GOLDEN = Path(__file__).parent / "golden" / "tflite"
CASES = sorted(p.stem for p in GOLDEN.glob("*.tflite"))


def _enum(cls: type) -> dict[int, str]:
    return {value: name for name, value in vars(cls).items() if not name.startswith("_")}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def test_golden_cases_exist() -> None:
    assert CASES == ["bi_gru", "bi_lstm", "gru_batch1", "gru_dynamic_int8", "gru_go_backwards",
                     "gru_last", "gru_reset_before", "gru_sequences", "lstm_float16", "lstm_int8",
                     "lstm_last", "lstm_sequences", "simple_rnn", "simple_rnn_relu",
                     "stacked_gru", "stacked_lstm"]
    assert sum(p.stat().st_size for p in GOLDEN.iterdir()) < 1 << 20


def test_enums_match_the_generated_schema() -> None:
    assert tfl.BUILTIN_OPERATORS == _enum(schema.BuiltinOperator)
    assert {k: v[0] for k, v in tfl.TENSOR_TYPES.items()} == _enum(schema.TensorType)
    assert tfl.ACTIVATIONS == _enum(schema.ActivationFunctionType)
    assert tfl.LSTM_KERNEL_TYPES == _enum(schema.LSTMKernelType)
    options = _enum(schema.BuiltinOptions)
    assert {k: options[k] for k in tfl.BUILTIN_OPTIONS} == tfl.BUILTIN_OPTIONS
    ops = schema.BuiltinOperator
    assert (tfl.LSTM, tfl.UNIDIRECTIONAL_SEQUENCE_LSTM, tfl.BIDIRECTIONAL_SEQUENCE_LSTM,
            tfl.UNIDIRECTIONAL_SEQUENCE_RNN, tfl.BIDIRECTIONAL_SEQUENCE_RNN, tfl.RNN) == (
        ops.LSTM, ops.UNIDIRECTIONAL_SEQUENCE_LSTM, ops.BIDIRECTIONAL_SEQUENCE_LSTM,
        ops.UNIDIRECTIONAL_SEQUENCE_RNN, ops.BIDIRECTIONAL_SEQUENCE_RNN, ops.RNN)
    assert (tfl.LSTM, tfl.UNIDIRECTIONAL_SEQUENCE_LSTM, tfl.BIDIRECTIONAL_SEQUENCE_LSTM,
            tfl.UNIDIRECTIONAL_SEQUENCE_RNN, tfl.BIDIRECTIONAL_SEQUENCE_RNN, tfl.RNN) == (
        16, 44, 52, 35, 46, 24)
    for code, (name, dtype) in tfl.TENSOR_TYPES.items():
        if dtype is not None:
            assert np.dtype(dtype).itemsize == {"BOOL": 1}.get(name, np.dtype(dtype).itemsize), code


def test_field_slots_match_the_generated_schema() -> None:
    for table, fields in tfl.FIELDS.items():
        for name, index in fields.items():
            adder = getattr(schema, f"{table}Add{_camel(name)}")
            slots = re.findall(r"Slot\((\d+)", inspect.getsource(adder))
            assert slots == [str(index)], (table, name, slots)
        # no field of the schema between two listed ones is missing from the table's order
        start = getattr(schema, f"{table}Start")
        assert f"StartObject({max(fields.values()) + 1})" in inspect.getsource(start) or \
            max(fields.values()) + 1 <= int(re.findall(r"StartObject\((\d+)", inspect.getsource(start))[0])


def test_option_defaults_match_the_generated_schema() -> None:
    empty = _empty_table()
    for kind, table in tfl.BUILTIN_OPTIONS.items():
        generated = getattr(schema, table)()
        generated.Init(empty, 4)
        ours = tfl._OPTION_CLASSES[kind]()
        for name in tfl.FIELDS[table]:
            assert getattr(ours, name) == getattr(generated, _camel(name))(), (table, name)


def _empty_table() -> bytes:
    import flatbuffers

    builder = flatbuffers.Builder(0)
    builder.StartObject(0)
    builder.Finish(builder.EndObject())
    data = bytes(builder.Output())
    return data[int.from_bytes(data[:4], "little") - 4:]  # the table at position 4


def _gen_ints(obj: object, name: str) -> tuple[int, ...]:
    if getattr(obj, f"{name}IsNone")():
        return ()
    return tuple(int(v) for v in getattr(obj, f"{name}AsNumpy")())


@pytest.mark.parametrize("case", CASES)
def test_decoding_equals_the_generated_reader(case: str) -> None:
    content = (GOLDEN / f"{case}.tflite").read_bytes()
    model = tfl.decode_model(content, source=f"{case}.tflite")
    gen = schema.Model.GetRootAsModel(content, 0)
    assert model.version == gen.Version() == 3
    assert len(model.operator_codes) == gen.OperatorCodesLength()
    for i, code in enumerate(model.operator_codes):
        g = gen.OperatorCodes(i)
        assert code.builtin_code == max(g.BuiltinCode(), g.DeprecatedBuiltinCode())
        assert code.deprecated_builtin_code == g.DeprecatedBuiltinCode()
        assert code.version == g.Version()
        assert code.custom_code == (g.CustomCode().decode() if g.CustomCode() else None)
    assert model.description == gen.Description().decode()
    assert [m.name for m in model.metadata] == [gen.Metadata(i).Name().decode()
                                                for i in range(gen.MetadataLength())]
    assert [m.buffer for m in model.metadata] == [gen.Metadata(i).Buffer()
                                                  for i in range(gen.MetadataLength())]
    assert len(model.buffers) == gen.BuffersLength()
    for i, buffer in enumerate(model.buffers):
        g = gen.Buffers(i)
        expected = b"" if g.DataIsNone() else g.DataAsNumpy().tobytes()
        assert bytes(buffer.data) == expected
        assert (buffer.offset, buffer.size) == (g.Offset(), g.Size())
    assert len(model.subgraphs) == gen.SubgraphsLength()
    for s, graph in enumerate(model.subgraphs):
        g = gen.Subgraphs(s)
        assert graph.inputs == _gen_ints(g, "Inputs") and graph.outputs == _gen_ints(g, "Outputs")
        assert graph.name == (g.Name().decode() if g.Name() is not None else None)
        assert len(graph.tensors) == g.TensorsLength()
        for t, tensor in enumerate(graph.tensors):
            gt = g.Tensors(t)
            assert tensor.name == gt.Name().decode()
            assert tensor.shape == _gen_ints(gt, "Shape")
            assert tensor.shape_signature == (None if gt.ShapeSignatureIsNone()
                                              else _gen_ints(gt, "ShapeSignature"))
            assert (tensor.type, tensor.buffer, tensor.is_variable) == (
                gt.Type(), gt.Buffer(), gt.IsVariable())
            gq = gt.Quantization()
            assert (tensor.quantization is None) == (gq is None)
            if gq is not None and tensor.quantization is not None:
                q = tensor.quantization
                assert q.scale == tuple(float(v) for v in (gq.ScaleAsNumpy() if not gq.ScaleIsNone() else ()))
                assert q.zero_point == _gen_ints(gq, "ZeroPoint")
                assert q.quantized_dimension == gq.QuantizedDimension()
                assert q.details_type == gq.DetailsType()
        assert len(graph.operators) == g.OperatorsLength()
        for o, op in enumerate(graph.operators):
            go = g.Operators(o)
            assert op.opcode_index == go.OpcodeIndex()
            assert op.inputs == _gen_ints(go, "Inputs") and op.outputs == _gen_ints(go, "Outputs")
            assert op.intermediates == _gen_ints(go, "Intermediates")
            assert op.builtin_options_type == go.BuiltinOptionsType()
            table = go.BuiltinOptions()
            if op.builtin_options_type in tfl.BUILTIN_OPTIONS:
                name = tfl.BUILTIN_OPTIONS[op.builtin_options_type]
                generated = getattr(schema, name)()
                generated.Init(table.Bytes, table.Pos)
                for field in tfl.FIELDS[name]:
                    assert getattr(op.builtin_options, field) == pytest.approx(
                        getattr(generated, _camel(field))()), (case, o, field)
            elif op.builtin_options_type:
                assert op.builtin_options == tfl.OtherOptions(op.builtin_options_type)


@pytest.mark.parametrize("case", CASES)
def test_tensor_arrays_equal_the_generated_readers(case: str) -> None:
    content = (GOLDEN / f"{case}.tflite").read_bytes()
    model = tfl.decode_model(content)
    gen = schema.Model.GetRootAsModel(content, 0)
    dtypes = {k: v for k, (_, v) in tfl.TENSOR_TYPES.items()}
    checked = 0
    for s, graph in enumerate(model.subgraphs):
        for t, tensor in enumerate(graph.tensors):
            gt = gen.Subgraphs(s).Tensors(t)
            g_buffer = gen.Buffers(gt.Buffer())
            if g_buffer.DataIsNone() or g_buffer.DataLength() == 0:
                with pytest.raises(FormatError, match="has no data"):
                    tfl.tensor_array(model, t, subgraph=s)
                continue
            expected = np.frombuffer(g_buffer.DataAsNumpy().tobytes(), dtype=dtypes[gt.Type()])
            expected = expected.reshape(gt.ShapeAsNumpy() if not gt.ShapeIsNone() else ())
            quantized = tensor.quantization is not None and tensor.quantization.quantized
            if quantized:  # refused as values, given as the stored integers with raw=True
                with pytest.raises(DTypeError, match="quantized"):
                    tfl.tensor_array(model, tensor, subgraph=s)
            array = tfl.tensor_array(model, tensor, subgraph=s, raw=quantized)
            assert array.dtype == expected.dtype and array.shape == expected.shape
            np.testing.assert_array_equal(array, expected)
            assert not array.flags.writeable
            checked += 1
    assert checked > 0


def _load(case: str) -> tuple[tfl.Model, dict[str, np.ndarray], dict]:
    model = tfl.read_model(GOLDEN / f"{case}.tflite")
    with np.load(GOLDEN / f"{case}.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    return model, arrays, json.loads(str(arrays["meta"]))


@pytest.mark.parametrize("case", CASES)
def test_operators_are_the_ones_the_converter_reported(case: str) -> None:
    model, _, meta = _load(case)
    assert model.operator_names() == meta["ops"]
    assert [c.name for c in model.operator_codes] == meta["operator_codes"]


def _lstms(model: tfl.Model) -> list[tfl.Operator]:
    return [op for op in model.subgraphs[0].operators
            if model.operator_code(op) == tfl.UNIDIRECTIONAL_SEQUENCE_LSTM]


@pytest.mark.parametrize("case,layers", [("lstm_sequences", ["lstm"]), ("lstm_last", ["lstm"]),
                                         ("stacked_lstm", ["lstm_1", "lstm_2"])])
def test_fused_lstm_inputs_are_in_the_documented_order(case: str, layers: list[str]) -> None:
    """Each per-gate tensor equals the Keras kernel's block (Keras: gates i, f, c, o)."""
    model, arrays, _ = _load(case)
    graph = model.subgraphs[0]
    ops = _lstms(model)
    assert len(ops) == len(layers)
    for op, layer in zip(ops, layers, strict=True):
        assert len(op.inputs) == len(tfl.LSTM_INPUTS) == 24
        named = dict(zip(tfl.LSTM_INPUTS, op.inputs, strict=True))
        options = op.builtin_options
        assert isinstance(options, tfl.UnidirectionalSequenceLSTMOptions)
        assert tfl.ACTIVATIONS[options.fused_activation_function] == "TANH"
        # The converter writes cell_clip 10 (LiteRT then clips c to ±10; Keras does not).
        assert (options.cell_clip, options.proj_clip, options.time_major) == (10.0, 0.0, False)
        kernel, recurrent, bias = (arrays[f"weights/{layer}/{k}"] for k in range(3))
        hidden = recurrent.shape[0]
        for g, gate in enumerate(("input", "forget", "cell", "output")):
            block = slice(g * hidden, (g + 1) * hidden)
            for prefix, keras in (("input_to", kernel), ("recurrent_to", recurrent)):
                np.testing.assert_array_equal(
                    tfl.tensor_array(model, named[f"{prefix}_{gate}_weights"]), keras[:, block].T)
            np.testing.assert_array_equal(tfl.tensor_array(model, named[f"{gate}_gate_bias"]), bias[block])
        for name in ("cell_to_input_weights", "cell_to_forget_weights", "cell_to_output_weights",
                     "projection_weights", "projection_bias", "input_layer_norm_coefficients",
                     "forget_layer_norm_coefficients", "cell_layer_norm_coefficients",
                     "output_layer_norm_coefficients"):
            assert named[name] == -1, name
        for state in ("output_state", "cell_state"):
            assert graph.tensors[named[state]].shape == (2, hidden)
    assert ops[0].inputs[0] == graph.inputs[0]
    assert graph.tensors[graph.inputs[0]].shape == tuple(arrays["x"].shape)


def test_bidirectional_lstm_is_two_fused_lstms_and_reverses() -> None:
    model, arrays, _ = _load("bi_lstm")
    graph = model.subgraphs[0]
    ops = _lstms(model)
    assert len(ops) == 2
    names = model.operator_names()
    reversed_x = {o for k, op in enumerate(graph.operators) if names[k] == "REVERSE_V2" for o in op.outputs}
    backward = [op for op in ops if op.inputs[0] in reversed_x]
    forward = [op for op in ops if op.inputs[0] == graph.inputs[0]]
    assert len(backward) == len(forward) == 1
    kernel = arrays["weights/bi_lstm/3"]  # the backward layer's kernel
    named = dict(zip(tfl.LSTM_INPUTS, backward[0].inputs, strict=True))
    hidden = kernel.shape[1] // 4
    np.testing.assert_array_equal(tfl.tensor_array(model, named["input_to_forget_weights"]),
                                  kernel[:, hidden:2 * hidden].T)


def test_simple_rnn_becomes_a_while_loop() -> None:
    model, _, _ = _load("simple_rnn")
    assert model.operator_names() == ["TRANSPOSE", "WHILE", "TRANSPOSE"]
    assert len(model.subgraphs) == 3


def test_float16_weights_read_as_float16() -> None:
    model, arrays, _ = _load("lstm_float16")
    op = _lstms(model)[0]
    graph = model.subgraphs[0]
    producer = {out: o for o in graph.operators for out in o.outputs}
    named = dict(zip(tfl.LSTM_INPUTS, op.inputs, strict=True))
    weights = producer[named["input_to_forget_weights"]].inputs[0]
    array = tfl.tensor_array(model, weights)
    assert array.dtype == np.float16
    np.testing.assert_array_equal(array, arrays["weights/lstm/0"][:, 4:8].T.astype(np.float16))


def test_quantized_tensors_are_refused_unless_raw() -> None:
    model, _, _ = _load("lstm_sequences")
    graph = model.subgraphs[0]
    index = next(i for i, t in enumerate(graph.tensors) if t.shape == (4, 3))
    quantized = tfl.Tensor(name="w", shape=(48,), type=9, buffer=graph.tensors[index].buffer,
                           quantization=tfl.Quantization(scale=(0.5,), zero_point=(0,)))
    with pytest.raises(DTypeError, match=r"holds quantized INT8 values .*raw=True"):
        tfl.tensor_array(model, quantized)
    assert tfl.tensor_array(model, quantized, raw=True).dtype == np.int8
    wrong = tfl.Tensor(name="w", shape=(5, 3), type=0, buffer=graph.tensors[index].buffer)
    with pytest.raises(FormatError, match=r"FLOAT32 \[5, 3\] needs 60 bytes, its buffer \d+ holds 48"):
        tfl.tensor_array(model, wrong)


def test_external_buffers_are_bounds_checked() -> None:
    """A buffer stored after the FlatBuffer (models over 2 GB): offset and size from the file."""
    import flatbuffers

    for offset, size, ok in ((40, 8, True), (40, 10_000, False), (2**63, 8, False)):
        builder = flatbuffers.Builder(0)
        schema.BufferStart(builder)
        schema.BufferAddOffset(builder, offset)
        schema.BufferAddSize(builder, size)
        buffer = schema.BufferEnd(builder)
        schema.ModelStartBuffersVector(builder, 1)
        builder.PrependUOffsetTRelative(buffer)
        buffers = builder.EndVector()
        schema.ModelStart(builder)
        schema.ModelAddVersion(builder, 3)
        schema.ModelAddBuffers(builder, buffers)
        builder.Finish(schema.ModelEnd(builder), file_identifier=b"TFL3")
        content = bytes(builder.Output()) + bytes(range(64))
        if ok:
            model = tfl.decode_model(content)
            assert bytes(model.buffers[0].data) == content[offset:offset + size]
        else:
            with pytest.raises(FormatError, match=r"buffers\[0\]: data of .* runs past the end"):
                tfl.decode_model(content)


def test_error_names_the_file_and_where() -> None:
    content = bytearray((GOLDEN / "lstm_sequences.tflite").read_bytes())
    content[4:8] = b"XXXX"
    with pytest.raises(FormatError, match=r"^m.tflite: the file identifier is b'XXXX', expected b'TFL3'"):
        tfl.decode_model(bytes(content), source="m.tflite")


def test_decoding_imports_no_framework() -> None:
    code = (
        "import sys, rnnport\n"
        "from rnnport.io import tflite_schema\n"
        f"m = tflite_schema.read_model({str(GOLDEN / 'stacked_lstm.tflite')!r})\n"
        "tflite_schema.tensor_array(m, 2)\n"
        "bad = [n for n in ('tensorflow', 'flatbuffers', 'ai_edge_litert', 'tf_keras', 'keras', 'torch')"
        " if n in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_tensor_in_a_model_without_buffers_is_refused() -> None:
    """Buffer 0 (the default) must be listed too: readers index Model.buffers with it."""
    import flatbuffers

    builder = flatbuffers.Builder(0)
    schema.TensorStart(builder)
    tensor = schema.TensorEnd(builder)
    schema.SubGraphStartTensorsVector(builder, 1)
    builder.PrependUOffsetTRelative(tensor)
    tensors = builder.EndVector()
    schema.SubGraphStart(builder)
    schema.SubGraphAddTensors(builder, tensors)
    graph = schema.SubGraphEnd(builder)
    schema.ModelStartSubgraphsVector(builder, 1)
    builder.PrependUOffsetTRelative(graph)
    graphs = builder.EndVector()
    schema.ModelStart(builder)
    schema.ModelAddSubgraphs(builder, graphs)
    builder.Finish(schema.ModelEnd(builder), file_identifier=b"TFL3")
    with pytest.raises(FormatError, match=r"subgraphs\[0\]\.tensors\[0\]\.buffer: buffer index 0; "
                                          r"expected below 0"):
        tfl.decode_model(bytes(builder.Output()))
