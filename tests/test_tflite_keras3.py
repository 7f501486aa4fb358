"""Reading Keras 3 models converted to TFLite (``rnnport.formats.tflite``), against LiteRT.

Expected values: the golden files of ``tools/golden_tflite_keras3.py`` (Keras 3.15 on
TensorFlow 2.21, ``TFLiteConverter.from_keras_model``): ``y_litert`` (the LiteRT
interpreter), ``y_keras`` (the Keras model), the Keras layers' ``get_weights()``, and for a
model with layers around the recurrent one, LiteRT's intermediate tensors. Refusals are
checked on those files and on copies edited through LiteRT's own generated schema code
(``ai_edge_litert.schema_py_generated``), run by the LiteRT interpreter where it can.
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

import rnnport
from rnnport.cli import main
from rnnport.errors import UnsupportedFeatureError
from rnnport.formats.tflite import FORMAT, networks, notes
from rnnport.formats.tflite.reader import network_ends

GOLDEN = Path(__file__).parent / "golden" / "tflite_keras3"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())
# Read, and LiteRT ran them: forward equals y_litert.
LITERT = ["bi_lstm", "gru", "gru_linear", "gru_reset_before", "gru_stateful", "lstm",
          "lstm_dropout", "lstm_flip_go_backwards", "lstm_last", "simple_rnn",
          "stacked_gru_lstm"]
AROUND = "conv_lstm_dense"  # Conv1D → LSTM → Dense: the network's own tensors, from LiteRT
SEQ2SEQ = "gru_encoder_decoder"  # two networks: the encoder's final state starts the decoder
FLEX = "lstm_open_flex"  # read; the LiteRT installed has no Flex delegate: against Keras
MERGED = "bi_gru_sum"  # a Bidirectional with merge_mode='sum': its two directions, named
LAST_STEPS = "bi_gru_last"  # a Bidirectional's last steps: its directions, read one by one
REFUSED = {"gru_saved_model_variables": r"the weights are not in the file",
           "simple_rnn_linear": r"a simple RNN whose activation is the identity \(no function: "
                                r"Keras's activation='linear'\)",
           # as the tf2 reader refuses the same layer exported (tests/test_keras3_export.py)
           "lstm_go_backwards": r"operator 2 \(WHILE\): go_backwards=True outside a "
                                r"Bidirectional layer: the loop runs over the sequence reversed "
                                r"in time and the file keeps its outputs in that reversed order",
           "gru_go_backwards_last": r"go_backwards=True outside a Bidirectional layer: the loop "
                                    r"runs over the sequence reversed in time and the file keeps "
                                    r"its last step alone \(return_sequences=False",
           "bi_halves_differ": r"the two directions differ in activations \(forward "
                               r"Sigmoid/Tanh/Tanh, backward Sigmoid/Relu/Relu\)",
           "lstm_silu": r"it applies v·sigmoid\(v\) \(Keras's silu\), which no cell rnnport "
                        r"reads applies",
           "lstm_mixed_float16": r"Keras computed the layer in float16 \(a dtype policy such as "
                                 r"'mixed_float16' or 'float16'\), and rnnport computes in "
                                 r"float32"}
READ = [*LITERT, AROUND, FLEX, SEQ2SEQ, MERGED, LAST_STEPS]


def _data(name: str) -> dict[str, Any]:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        found: dict[str, Any] = {key: data[key] for key in data.files}
    found["meta"] = json.loads(str(found["meta"]))
    return found


def _edited(name: str, change: Callable[[Any], None]) -> bytes:
    return edited(GOLDEN / f"{name}.tflite", change)


def _refused_though_litert_runs(name: str, change: Callable[[Any], None], match: str) -> None:
    """Golden file ``name`` edited by ``change`` runs in LiteRT, computing other numbers;
    rnnport refuses it with ``match``."""
    data = _data(name)
    edited = _edited(name, change)
    assert np.abs(litert(edited, data["x"]) - data["y_litert"]).max() > 1e-3
    with pytest.raises(UnsupportedFeatureError, match=match):
        FORMAT.read(edited)


def test_every_golden_case_is_checked_and_small() -> None:
    assert MANIFEST["generator"] == "tools/golden_tflite_keras3.py"
    assert MANIFEST["versions"]["keras"].startswith("3.")
    assert sorted(MANIFEST["cases"]) == sorted([*READ, *REFUSED])
    assert max(p.stat().st_size for p in GOLDEN.iterdir()) < 24_000
    assert sum(p.stat().st_size for p in GOLDEN.iterdir()) < 384_000


@pytest.mark.parametrize("name", LITERT)
def test_forward_equalslitert(name: str) -> None:
    data = _data(name)
    model = FORMAT.read(GOLDEN / f"{name}.tflite")
    y, _ = model.forward(data["x"])
    if data["y_litert"].ndim == 2:  # return_sequences=False: the last step
        y = y[:, -1]
    np.testing.assert_allclose(y, data["y_litert"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(y, data["y_keras"], rtol=0, atol=1e-5)
    assert model.dtype == np.float32


def test_a_network_between_other_layers_equals_litert_on_its_own_tensors() -> None:
    """Conv1D → LSTM → Dense: the LSTM's input and output tensors, as LiteRT computed them."""
    data = _data(AROUND)
    path = GOLDEN / f"{AROUND}.tflite"
    start, end, takes, gives = network_ends(path)
    x, expected = data[f"litert/{start}"], data[f"litert/{end}"]
    y, _ = FORMAT.read(path).forward(x, time_major=takes)
    assert takes == gives  # the file keeps the sequence one way through the network
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-5)
    said = notes(path)
    assert any("CONV_2D" in note and "FULLY_CONNECTED" in note and "not part of the network"
               in note for note in said)


def test_an_encoders_final_state_starts_the_decoder() -> None:
    """The encoder's loop keeps no output sequence (only its final state is used): read as
    a network of its own, whose final state, fed to the decoder, gives LiteRT's output."""
    data = _data(SEQ2SEQ)
    path = GOLDEN / f"{SEQ2SEQ}.tflite"
    (encoder_node, _), (decoder_node, _) = networks(path).entries
    encoder = FORMAT.read(path, node=encoder_node)
    decoder = FORMAT.read(path, node=decoder_node)
    _, state = encoder.forward(data["x"])
    assert any(np.abs(state[0] - data[key]).max() < 1e-5 for key in data
               if key.startswith("litert/") and data[key].shape == state[0].shape)
    y, _ = decoder.forward(data["x"], state=state)
    np.testing.assert_allclose(y, data["y_litert"], rtol=0, atol=1e-5)
    assert not np.allclose(decoder.forward(data["x"])[0], data["y_litert"], atol=1e-3)
    for model, layer in zip((encoder, decoder), data["meta"]["layers"], strict=True):
        keras = _keras(layer, data)
        assert keras.spec == model.spec
        for parameter in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            assert np.array_equal(keras.parameter(0, 0, parameter),
                                  model.parameter(0, 0, parameter))
    assert any("gives its final state alone" in note
               for note in notes(path, node=encoder_node))
    assert any("takes its initial state h from tensor" in note
               for note in notes(path, node=decoder_node))


def test_an_open_batch_with_flex_tensor_lists_reads() -> None:
    """SELECT_TF_OPS: the loop's output is a TensorList (FlexTensorListReserve,
    FlexTensorListSetItem, FlexTensorListStack); LiteRT here cannot run it (no Flex
    delegate), so the check is Keras's own output, and the weights, bit for bit."""
    data = _data(FLEX)
    assert "Flex" in data["meta"]["litert"] and "y_litert" not in data
    path = GOLDEN / f"{FLEX}.tflite"
    model = FORMAT.read(path)
    np.testing.assert_allclose(model.forward(data["x"])[0], data["y_keras"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(model.forward(data["x"][:1])[0], data["y_keras"][:1], rtol=0,
                               atol=1e-5)
    said = notes(path)
    assert any("FlexTensorListReserve, FlexTensorListSetItem, FlexTensorListStack" in note
               and "Flex delegate" in note for note in said)
    assert not any("other operators" in note for note in said)  # FILL & co. are the state's


def _keras(layer: dict[str, Any], data: dict[str, Any]) -> rnnport.RNN:
    options: dict[str, Any] = {}
    if "GRU" in layer.get("inner", layer["class"]):
        options["reset_after"] = layer["reset_after"]
    if layer.get("activation") not in (None, "tanh"):
        options["activation"] = layer["activation"]
    weights = [data[f"weights/{layer['name']}/{k}"]
               for k in range(sum(key.startswith(f"weights/{layer['name']}/") for key in data))]
    read = rnnport.read(weights, "keras", **options)
    assert isinstance(read, rnnport.RNN)
    return read


@pytest.mark.parametrize("name", [*LITERT, AROUND, FLEX])
def test_the_weights_are_the_keras_layers_bit_for_bit(name: str) -> None:
    """Read the Keras layers' own arrays through the keras format: the same Spec, and every
    canonical weight equal bit for bit; so are the biases, where one-bias cells may hold
    the bias in the other slot (the file adds it on the input side: bias_ih + bias_hh)."""
    data = _data(name)
    layers = FORMAT.read(GOLDEN / f"{name}.tflite").layers()
    assert len(layers) == len(data["meta"]["layers"])
    for layer, described in zip(layers, data["meta"]["layers"], strict=True):
        keras = _keras(described, data)
        assert keras.spec == layer.spec
        for direction in range(keras.spec.num_directions):
            def get(model: rnnport.RNN, parameter: str, at: int = direction) -> np.ndarray:
                return model.parameter(0, at, parameter)

            for parameter in ("weight_ih", "weight_hh"):
                assert np.array_equal(get(layer, parameter), get(keras, parameter)), parameter
            two = keras.spec.cell == "gru" and keras.spec.reset_after
            for parameter in ("bias_ih", "bias_hh") if two else ():
                assert np.array_equal(get(layer, parameter), get(keras, parameter)), parameter
            assert np.array_equal(get(layer, "bias_ih") + get(layer, "bias_hh"),
                                  get(keras, "bias_ih") + get(keras, "bias_hh"))


def test_the_gru_with_no_candidate_function_reads_exactly() -> None:
    model = FORMAT.read(GOLDEN / "gru_linear.tflite")
    assert model.spec.activations == (("Sigmoid", 0.0, 0.0), ("Affine", 1.0, 0.0))


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_by_name(name: str) -> None:
    with pytest.raises(UnsupportedFeatureError, match=REFUSED[name]):
        FORMAT.read(GOLDEN / f"{name}.tflite")


def test_a_flip_before_a_go_backwards_layer_is_a_forward_network_on_the_input() -> None:
    """Lambda(ops.flip) → LSTM(go_backwards=True): REVERSE_V2 (the flip), TRANSPOSE,
    REVERSE_V2 (go_backwards), WHILE; the reversals cancel, as the tf2 reader finds them."""
    path = GOLDEN / "lstm_flip_go_backwards.tflite"
    model = FORMAT.read(path)
    assert not model.spec.reverse and network_ends(path)[0] == 0  # the file's input
    assert any("reversed in time twice on the way" in note for note in notes(path))


def test_a_bidirectional_merged_by_add_names_its_merge() -> None:
    """merge_mode='sum': two networks (rnnport's bidirectional concatenates), each named as
    its direction; read one by one, their outputs add up to LiteRT's."""
    data = _data(MERGED)
    path = GOLDEN / f"{MERGED}.tflite"
    with pytest.raises(rnnport.errors.FormatError,
                       match=r"(?s)holds 2 recurrent networks.*backward direction of a "
                             r"Bidirectional layer merged by operator \d+ \(ADD\): "
                             r"merge_mode='sum'"):
        FORMAT.read(path)
    (backward_node, _), (forward_node, _) = networks(path).entries
    backward = FORMAT.read(path, node=backward_node)
    forward = FORMAT.read(path, node=forward_node)
    assert backward.spec.reverse and not forward.spec.reverse
    y = forward.forward(data["x"])[0] + backward.forward(data["x"])[0]
    np.testing.assert_allclose(y, data["y_litert"], rtol=0, atol=1e-5)
    assert any("merge_mode='sum'" in note and "forward + backward" in note
               for note in notes(path, node=forward_node))


def test_a_bidirectional_returning_its_last_steps_reads_each_direction() -> None:
    """return_sequences=False: the backward loop keeps its last step (time 0) beside the
    forward one's; a go_backwards loop, not refused as one outside a Bidirectional."""
    data = _data(LAST_STEPS)
    path = GOLDEN / f"{LAST_STEPS}.tflite"
    (backward_node, _), (forward_node, _) = networks(path).entries
    backward = FORMAT.read(path, node=backward_node)
    forward = FORMAT.read(path, node=forward_node)
    assert backward.spec.reverse and not forward.spec.reverse
    y = np.concatenate([forward.forward(data["x"])[0][:, -1],
                        backward.forward(data["x"])[0][:, 0]], axis=-1)
    np.testing.assert_allclose(y, data["y_litert"], rtol=0, atol=1e-5)
    assert any("y[:, 0] of the reverse network" in note
               for note in notes(path, node=backward_node))


def test_weights_in_variables_nothing_initializes_are_not_in_the_file() -> None:
    data = _data("gru_saved_model_variables")
    assert "READ_VARIABLE" in data["meta"]["litert"]  # LiteRT cannot run it either
    with pytest.raises(UnsupportedFeatureError) as error:
        FORMAT.read(GOLDEN / "gru_saved_model_variables.tflite")
    message = str(error.value)
    for words in ("reads its weights from resource variables ('gru/gru_cell/recurrent_kernel',",
                  "no CALL_ONCE initializer", "from_saved_model", "from_keras_model"):
        assert words in message


def _initialize_variables(model: Any, values: dict[bytes, np.ndarray]) -> None:
    """Give the file a CALL_ONCE initializer subgraph assigning ``values`` (shared name →
    array) to its variables, as the converter writes for variables a model assigns."""
    from ai_edge_litert import schema_py_generated as schema

    def code(number: int) -> int:
        found = [k for k, c in enumerate(model.operatorCodes) if c.builtinCode == number]
        if found:
            return found[0]
        operator_code = schema.OperatorCodeT()
        operator_code.builtinCode, operator_code.deprecatedBuiltinCode = number, min(number, 127)
        operator_code.version = 1
        model.operatorCodes.append(operator_code)
        return len(model.operatorCodes) - 1

    init = schema.SubGraphT()
    init.name, init.tensors, init.operators, init.inputs, init.outputs = b"init", [], [], [], []
    for shared_name, array in values.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(np.ascontiguousarray(array, "<f4").tobytes(), "u1")
        model.buffers.append(buffer)
        for kind, shape, buffer_index in ((0, list(array.shape), len(model.buffers) - 1),
                                          (13, [], 0)):
            tensor = schema.TensorT()
            tensor.name, tensor.type, tensor.shape, tensor.buffer = shared_name, kind, shape, \
                buffer_index
            init.tensors.append(tensor)
        handle = schema.OperatorT()
        handle.opcodeIndex, handle.inputs, handle.outputs = code(142), [], [len(init.tensors) - 1]
        handle.builtinOptionsType = 111
        handle.builtinOptions = schema.VarHandleOptionsT()
        handle.builtinOptions.sharedName, handle.builtinOptions.container = shared_name, b""
        assign = schema.OperatorT()
        assign.opcodeIndex = code(144)
        assign.inputs, assign.outputs = [len(init.tensors) - 1, len(init.tensors) - 2], []
        init.operators += [handle, assign]
    model.subgraphs.append(init)
    once = schema.OperatorT()
    once.opcodeIndex, once.inputs, once.outputs = code(129), [], []
    once.builtinOptionsType = 103
    once.builtinOptions = schema.CallOnceOptionsT()
    once.builtinOptions.initSubgraphIndex = len(model.subgraphs) - 1
    model.subgraphs[0].operators.insert(0, once)


def test_weights_in_initialized_variables_are_refused_by_name() -> None:
    """With an initializer the file holds its weights, and LiteRT runs it (Keras's output);
    rnnport reads a loop's weights from constants, and says so."""
    data = _data("gru_saved_model_variables")
    values = {b"gru/gru_cell/kernel": data["weights/gru/0"],
              b"gru/gru_cell/recurrent_kernel": data["weights/gru/1"],
              b"gru/gru_cell/bias": data["weights/gru/2"]}
    edited = _edited("gru_saved_model_variables", lambda m: _initialize_variables(m, values))
    np.testing.assert_allclose(litert(edited, data["x"]), data["y_keras"], rtol=0, atol=1e-5)
    with pytest.raises(UnsupportedFeatureError,
                       match=r"resource variables \('gru/gru_cell/recurrent_kernel', .*\) that "
                             r"the file's CALL_ONCE initializer \(subgraph 3\) sets; rnnport "
                             r"reads a loop's weights from the constants"):
        FORMAT.read(edited)


def test_resource_variables_for_state_and_seeds_are_said() -> None:
    stateful = notes(GOLDEN / "gru_stateful.tflite")
    assert any("from resource variable 'gru/rnn_state' (zeros at first)" in note and
               "assigns again after each invocation" in note for note in stateful)
    dropout = notes(GOLDEN / "lstm_dropout.tflite")
    assert any("feed none of the file's outputs" in note and "CALL_ONCE" in note and
               "'seed_generator/seed_generator_state_1'" in note for note in dropout)


def _body_ops(model: Any, body: int, name: str) -> list[Any]:
    from ai_edge_litert import schema_py_generated as schema

    number = getattr(schema.BuiltinOperator, name)
    return [op for op in model.subgraphs[body].operators
            if model.operatorCodes[op.opcodeIndex].builtinCode == number]


def test_an_lstm_whose_gates_apply_different_functions_is_refused_naming_them() -> None:
    def input_gate_tanh(model: Any) -> None:
        from ai_edge_litert import schema_py_generated as schema

        tanh = _body_ops(model, 2, "TANH")[0].opcodeIndex
        _body_ops(model, 2, "LOGISTIC")[0].opcodeIndex = tanh
        assert schema.BuiltinOperator.TANH == model.operatorCodes[tanh].builtinCode

    _refused_though_litert_runs("lstm", input_gate_tanh,
                                r"an LSTM whose gates apply different functions \(input gate "
                                r"i: tanh, forget gate f: sigmoid, output gate o: sigmoid\)")


def test_an_lstm_loop_whose_output_is_its_cell_state_is_refused() -> None:
    """The output sequence built from c' (not h'): no state is the one the output holds."""
    def output_c(model: Any) -> None:
        body = model.subgraphs[2]
        h, c = body.outputs[3], body.outputs[4]
        for op in _body_ops(model, 2, "RESHAPE"):
            op.inputs = [c if t == h else t for t in op.inputs]

    with pytest.raises(UnsupportedFeatureError, match=r"is built from none of its 2 states"):
        FORMAT.read(_edited("lstm", output_c))


def test_a_strided_slice_of_more_than_the_features_is_named() -> None:
    def shrink(model: Any) -> None:
        _body_ops(model, 2, "STRIDED_SLICE")[0].builtinOptions.shrinkAxisMask = 1

    with pytest.raises(UnsupportedFeatureError,
                       match=r"operator 3 \(STRIDED_SLICE with shrink_axis_mask\)"):
        FORMAT.read(_edited("gru", shrink))


def _main_op(model: Any, name: str) -> Any:
    return next(op for op in model.subgraphs[0].operators
                if model.operatorCodes[op.opcodeIndex].customCode == name.encode() or
                getattr(model.operatorCodes[op.opcodeIndex], "builtinCode", None) == name)


def _set_constant(model: Any, subgraph: int, tensor: int, values: np.ndarray) -> None:
    """A buffer of its own (the converter shares equal constants' buffers) with ``values``."""
    from ai_edge_litert import schema_py_generated as schema

    buffer = schema.BufferT()
    buffer.data = np.frombuffer(np.ascontiguousarray(values).tobytes(), "u1")
    model.buffers.append(buffer)
    model.subgraphs[subgraph].tensors[tensor].buffer = len(model.buffers) - 1


def test_a_flex_list_of_other_length_or_written_elsewhere_is_refused() -> None:
    def seven_items(model: Any) -> None:
        reserve = _main_op(model, "FlexTensorListReserve")
        _set_constant(model, 0, reserve.inputs[1], np.array(7, "<i4"))

    with pytest.raises(UnsupportedFeatureError,
                       match=r"its output list starts as FlexTensorListReserve of 7 items"):
        FORMAT.read(_edited(FLEX, seven_items))

    def written_at_one(model: Any) -> None:
        body = model.subgraphs[2]
        setter, one = body.operators[-1], body.operators[0].inputs[1]  # the counter's step
        setter.inputs = [setter.inputs[0], one, setter.inputs[2]]

    with pytest.raises(UnsupportedFeatureError,
                       match=r"is a TensorList its body writes with FlexTensorListSetItem; "
                             r"rnnport reads a list whose item at the step counter"):
        FORMAT.read(_edited(FLEX, written_at_one))


def test_a_flex_list_nothing_stacks_leaves_no_output() -> None:
    def unstacked(model: Any) -> None:
        stack = _main_op(model, "FlexTensorListStack")
        stack.inputs = [stack.inputs[1], stack.inputs[1]]  # reads no list

    said = notes(_edited(FLEX, unstacked))
    assert any("keeps its outputs in a TensorList that nothing reads" in note for note in said)


def test_nonzero_initial_states_are_refused() -> None:
    def fill_half(model: Any) -> None:
        fill = next(op for op in model.subgraphs[0].operators
                    if model.operatorCodes[op.opcodeIndex].builtinCode == 94)
        _set_constant(model, 0, fill.inputs[1], np.array(0.5, "<f4"))

    with pytest.raises(UnsupportedFeatureError,
                       match=r"the initial state h \(input 3, tensor .* \(a FILL of a constant\)"
                             r"\) is a nonzero constant"):
        FORMAT.read(_edited(FLEX, fill_half))

    def state_starts_at_half(model: Any) -> None:
        init = model.subgraphs[1]  # the CALL_ONCE initializer
        assign = init.operators[-1]
        _set_constant(model, 1, assign.inputs[1], np.full((2, 4), 0.5, "<f4"))

    _refused_though_litert_runs("gru_stateful", state_starts_at_half,
                                r"resource variable 'gru/rnn_state' \(set by the CALL_ONCE "
                                r"initializer, subgraph 1\)\)\) is a nonzero constant")


def test_inspect_lists_what_each_file_holds(capsys: pytest.CaptureFixture[str]) -> None:
    expected = {"lstm": "LSTM 3→4", "gru_linear": "GRU 3→4 (reset after, activations "
                "Sigmoid/Affine)", "bi_lstm": "bidirectional LSTM 3→3", FLEX: "Flex delegate",
                "stacked_gru_lstm": "part 1: LSTM 4→3"}
    for name, words in expected.items():
        assert main(["inspect", str(GOLDEN / f"{name}.tflite")]) == 0
        assert words in capsys.readouterr().out, name
    for name, words in REFUSED.items():
        assert main(["inspect", str(GOLDEN / f"{name}.tflite")]) != 0
        assert words.replace("\\", "") in capsys.readouterr().err, name


def test_reading_imports_no_framework() -> None:
    code = ("import sys\n"
            "from rnnport.formats.tflite import FORMAT\n"
            f"for name in {[*LITERT, AROUND, FLEX]!r}:\n"
            f"    FORMAT.read({str(GOLDEN)!r} + '/' + name + '.tflite')\n"
            "loaded = [m for m in ('tensorflow', 'keras', 'ai_edge_litert', 'flatbuffers') "
            "if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("name", ["gru", "gru_stateful", "gru_saved_model_variables", FLEX])
def test_variable_and_slice_options_equal_the_generated_readers(name: str) -> None:
    """VAR_HANDLE's names, CALL_ONCE's subgraph and STRIDED_SLICE's masks, as rnnport's
    decoder reads them, against LiteRT's generated reader."""
    from ai_edge_litert import schema_py_generated as schema

    from rnnport.io import tflite_schema as tfl

    content = (GOLDEN / f"{name}.tflite").read_bytes()
    model, generated = tfl.decode_model(content), schema.Model.GetRootAsModel(content, 0)
    checked = 0
    for s, graph in enumerate(model.subgraphs):
        for o, op in enumerate(graph.operators):
            kind = {103: "CallOnceOptions", 111: "VarHandleOptions",
                    32: "StridedSliceOptions"}.get(op.builtin_options_type)
            if kind is None:
                continue
            options = getattr(schema, kind)()
            found = generated.Subgraphs(s).Operators(o).BuiltinOptions()
            options.Init(found.Bytes, found.Pos)
            for field in tfl.PLAIN_OPTIONS[kind][1]:
                expected = getattr(options, "".join(p.capitalize() for p in field.split("_")))()
                expected = expected.decode() if isinstance(expected, bytes) else \
                    "" if expected is None else int(expected)
                assert op.builtin_options.values[field] == expected, (name, s, o, field)
            checked += 1
    assert checked > 0
