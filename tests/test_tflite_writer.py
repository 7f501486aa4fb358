"""The tflite writer: the LiteRT interpreter runs what it writes, and equals rnnport's forward
(random distinct weights of every cell kind) and the real frameworks (golden cases)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from golden_cases import load, names

import rnnport
from rnnport.errors import FormatError, UnknownOptionError, UnsupportedFeatureError
from rnnport.formats.tflite import builder
from rnnport.formats.tflite.writer import WRITE_OPTIONS, write
from rnnport.io import tflite_schema

TOLERANCE = 1e-5

SPECS: dict[str, dict[str, Any]] = {
    "lstm": {"cell": "lstm"},
    "lstm_peephole_projection_clip": {"cell": "lstm", "peepholes": True, "proj_size": 3,
                                      "cell_clip": 0.4},
    "lstm_cifg": {"cell": "lstm", "input_forget": True},
    "lstm_cifg_peephole": {"cell": "lstm", "input_forget": True, "peepholes": True},
    "lstm_no_bias": {"cell": "lstm", "bias": False},
    "gru_reset_after": {"cell": "gru"},
    "gru_reset_before": {"cell": "gru", "reset_after": False},
    "gru_no_bias": {"cell": "gru", "bias": False},
    "rnn_tanh": {"cell": "rnn_tanh"},
    "rnn_relu": {"cell": "rnn_relu"},
    "rnn_reverse": {"cell": "rnn_tanh", "reverse": True},
    "lstm_2_layer_bidirectional": {"cell": "lstm", "num_layers": 2, "bidirectional": True},
    "lstm_bidirectional_projection": {"cell": "lstm", "bidirectional": True, "proj_size": 2,
                                      "peepholes": True},
    "gru_2_layer_bidirectional": {"cell": "gru", "num_layers": 2, "bidirectional": True},
    "gru_reset_before_bidirectional_no_bias": {"cell": "gru", "bidirectional": True,
                                               "reset_after": False, "bias": False},
    "rnn_relu_2_layer_bidirectional": {"cell": "rnn_relu", "num_layers": 2,
                                       "bidirectional": True},
    "lstm_layer_norm": {"cell": "lstm", "layer_norm": True},
    "lstm_layer_norm_cifg_peephole": {"cell": "lstm", "layer_norm": True, "input_forget": True,
                                      "peepholes": True},
    "lstm_projection_bias": {"cell": "lstm", "proj_size": 3, "proj_bias": True},
    "lstm_layer_norm_everything": {"cell": "lstm", "layer_norm": True, "proj_size": 2,
                                   "proj_bias": True, "peepholes": True, "cell_clip": 0.7,
                                   "bidirectional": True, "num_layers": 2},
}


def run_litert(data: bytes, x: np.ndarray) -> list[np.ndarray]:
    """``[y, h_n]`` from the LiteRT interpreter (resizing a dynamic time axis)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data)
    (given,) = interpreter.get_input_details()
    if tuple(given["shape"]) != x.shape:
        interpreter.resize_tensor_input(given["index"], x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(given["index"], np.ascontiguousarray(x, dtype=np.float32))
    interpreter.invoke()
    return [interpreter.get_tensor(out["index"]) for out in interpreter.get_output_details()]


def final_h(model: rnnport.Model, state: Any) -> list[np.ndarray]:
    """Each part's final h, as the writer's ``h_n`` outputs hold them."""
    parts = model.parts if isinstance(model, rnnport.Stack) else (model,)
    states = state if isinstance(model, rnnport.Stack) else [state]
    return [s[0] if part.spec.cell == "lstm" else s for part, s in zip(parts, states, strict=True)]


def check(model: rnnport.Model, x: np.ndarray, **options: Any) -> np.ndarray:
    data = write(model, batch_size=x.shape[0], **options)
    decoded = tflite_schema.decode_model(data)
    assert decoded.version == 3
    y, *h_n = run_litert(data, x)
    expected, state = model.forward(x)
    np.testing.assert_allclose(y, expected, atol=TOLERANCE, rtol=0)
    wanted = final_h(model, state)
    assert len(h_n) == len(wanted)
    for got, want in zip(h_n, wanted, strict=True):
        np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)
    return y


@pytest.mark.parametrize("name", sorted(SPECS))
def test_litert_runs_every_cell_kind_like_forward(name: str) -> None:
    spec = rnnport.Spec(input_size=3, hidden_size=4, **SPECS[name])
    model = rnnport.RNN.random(spec, seed=7, scale=0.9)
    x = np.random.default_rng(3).standard_normal((2, 6, 3)).astype(np.float32)
    check(model, x)


@pytest.mark.parametrize(("name", "parameter"), [("lstm_layer_norm", "weight_ln"),
                                               ("lstm_projection_bias", "bias_hr")])
def test_litert_computes_the_layer_norm_and_projection_bias_it_is_given(
        name: str, parameter: str) -> None:
    """Other coefficients (another projection bias) change LiteRT's output as they change
    forward's: LiteRT runs them, it does not ignore them."""
    spec = rnnport.Spec(input_size=3, hidden_size=4, **SPECS[name])
    model = rnnport.RNN.random(spec, seed=4)
    named = dict(model.params[0][0])
    named[parameter] = np.asarray(named[parameter]) * 1.5 + 0.25
    other = rnnport.RNN(spec, [[named]])
    x = np.random.default_rng(5).standard_normal((1, 5, 3)).astype(np.float32)
    before, after = run_litert(write(model), x)[0], run_litert(write(other), x)[0]
    assert np.abs(before - after).max() > 1e-3
    np.testing.assert_allclose(after, other.forward(x)[0], atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("name", ["lstm_2_layer_bidirectional", "gru_reset_before",
                                  "rnn_tanh"])
def test_static_time_steps_and_default_batch(name: str) -> None:
    spec = rnnport.Spec(input_size=3, hidden_size=4, **SPECS[name])
    model = rnnport.RNN.random(spec, seed=1)
    x = np.random.default_rng(0).standard_normal((1, 4, 3)).astype(np.float32)
    data = write(model, time_steps=4)
    graph = tflite_schema.decode_model(data).subgraphs[0]
    assert graph.tensors[graph.inputs[0]].shape == (1, 4, 3)
    assert graph.tensors[graph.inputs[0]].shape_signature is None
    y = run_litert(data, x)[0]
    np.testing.assert_allclose(y, model.forward(x)[0], atol=TOLERANCE, rtol=0)


def test_dynamic_time_axis_is_a_shape_signature() -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4))
    graph = tflite_schema.decode_model(write(model, batch_size=2)).subgraphs[0]
    x = graph.tensors[graph.inputs[0]]
    assert (x.name, x.shape, x.shape_signature) == ("x", (2, 1, 3), (2, -1, 3))
    assert [graph.tensors[i].name for i in graph.outputs] == ["y", "h_n"]


def test_swapping_two_gates_changes_the_litert_output() -> None:
    spec = rnnport.Spec("lstm", 3, 4)
    model = rnnport.RNN.random(spec, seed=2)
    named = dict(model.params[0][0])
    weight = np.array(named["weight_ih"])
    weight[[0, 4]] = weight[[4, 0]]  # a row of i and a row of f
    named["weight_ih"] = weight
    swapped = rnnport.RNN(spec, [[named]])
    x = np.random.default_rng(0).standard_normal((1, 5, 3)).astype(np.float32)
    assert not np.allclose(run_litert(write(model), x)[0], run_litert(write(swapped), x)[0],
                           atol=1e-4)


def test_ops_are_the_converters() -> None:
    def ops(model: rnnport.Model) -> list[str]:
        decoded = tflite_schema.decode_model(write(model))
        return [decoded.operator_codes[op.opcode_index].name
                for op in decoded.subgraphs[0].operators]

    lstm = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4, bidirectional=True))
    assert ops(lstm)[:5] == ["UNIDIRECTIONAL_SEQUENCE_LSTM", "STRIDED_SLICE", "REVERSE_V2",
                             "UNIDIRECTIONAL_SEQUENCE_LSTM", "REVERSE_V2"]
    assert "CONCATENATION" in ops(lstm)
    assert "UNIDIRECTIONAL_SEQUENCE_RNN" in ops(rnnport.RNN.random(rnnport.Spec("rnn_relu", 3, 4)))
    assert "WHILE" in ops(rnnport.RNN.random(rnnport.Spec("gru", 3, 4)))


def test_lstm_tensors_follow_the_converters_layout() -> None:
    spec = rnnport.Spec("lstm", 3, 4, peepholes=True, cell_clip=2.5)
    model = rnnport.RNN.random(spec, seed=5)
    decoded = tflite_schema.decode_model(write(model))
    (op,) = [op for op in decoded.subgraphs[0].operators
             if decoded.operator_codes[op.opcode_index].builtin_code
             == tflite_schema.UNIDIRECTIONAL_SEQUENCE_LSTM]
    slot = {name: op.inputs[k] for k, name in enumerate(tflite_schema.LSTM_INPUTS)}
    named = model.params[0][0]
    hidden = spec.hidden_size
    forget = tflite_schema.tensor_array(decoded, slot["input_to_forget_weights"])
    np.testing.assert_array_equal(forget, named["weight_ih"][hidden:2 * hidden])
    np.testing.assert_array_equal(tflite_schema.tensor_array(decoded, slot["cell_gate_bias"]),
                                  (named["bias_ih"] + named["bias_hh"])[2 * hidden:3 * hidden])
    np.testing.assert_array_equal(tflite_schema.tensor_array(decoded, slot["cell_to_output_weights"]),
                                  named["weight_peephole"][2])
    tensors = decoded.subgraphs[0].tensors
    assert tensors[slot["output_state"]].is_variable and tensors[slot["cell_state"]].is_variable
    assert slot["projection_weights"] == -1
    assert op.builtin_options == tflite_schema.UnidirectionalSequenceLSTMOptions(
        fused_activation_function=4, cell_clip=2.5)


def test_options_numbers_match_litert_schema() -> None:
    from ai_edge_litert import schema_py_generated as schema

    for table, (number, fields) in builder.OPTIONS.items():
        assert getattr(schema.BuiltinOptions, table) == number, table
        for field, (index, _) in fields.items():
            camel = "".join(part.capitalize() for part in field.split("_"))
            # the generated Add<Field> writes vtable slot `index`
            source = getattr(schema, f"{table}Add{camel}")
            import inspect

            assert f"PrependSlot({index}," in inspect.getsource(source).replace(
                "Int32Slot(", "Slot(").replace("Int8Slot(", "Slot(").replace(
                "BoolSlot(", "Slot(").replace("UOffsetTRelativeSlot(", "Slot("), (table, field)
    assert WRITE_OPTIONS == {"batch_size", "time_steps"}


@pytest.mark.parametrize("name", names())
def test_golden_cases_run_in_litert(name: str) -> None:
    case = load(name)
    model = case.read()
    x = case.arrays["x"]
    if np.dtype(case.meta["dtype"]) == np.float64:
        with pytest.raises(UnsupportedFeatureError, match="float64 weights"):
            write(model)
        model = model.astype(np.float32)
        x = x.astype(np.float32)
    y = check(model, x)
    if case.lengths is None and case.initial_state(model) is None \
            and np.dtype(case.meta["dtype"]) != np.float64:
        np.testing.assert_allclose(y, case.arrays["y"], atol=TOLERANCE, rtol=0)


def test_path_saves_atomically_and_checks_the_suffix(tmp_path: Path) -> None:
    model = rnnport.RNN.random(rnnport.Spec("rnn_tanh", 2, 3))
    data = write(model, tmp_path / "model.tflite")
    assert (tmp_path / "model.tflite").read_bytes() == data
    assert data[4:8] == b"TFL3"
    with pytest.raises(FormatError, match=r"expected '\.tflite'"):
        write(model, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()


def test_refusals_name_the_feature() -> None:
    with pytest.raises(UnsupportedFeatureError, match="gate_clip"):
        write(rnnport.RNN.random(rnnport.Spec("lstm", 2, 3, gate_clip=1.0)))
    with pytest.raises(UnsupportedFeatureError, match="activations"):
        write(rnnport.RNN.random(rnnport.Spec("gru", 2, 3, activations=(("HardSigmoid", 0.2, 0.5),
                                                                         ("Tanh", 0, 0)))))
    with pytest.raises(UnknownOptionError, match="batchsize"):
        write(rnnport.RNN.random(rnnport.Spec("gru", 2, 3)), batchsize=2)
    with pytest.raises(FormatError, match="time_steps=0"):
        write(rnnport.RNN.random(rnnport.Spec("gru", 2, 3)), time_steps=0)


def test_float16_weights_are_widened_exactly() -> None:
    model = rnnport.RNN.random(rnnport.Spec("gru", 3, 4, bidirectional=True), dtype=np.float16)
    x = np.random.default_rng(1).standard_normal((2, 5, 3)).astype(np.float32)
    check(model, x)


def test_state_variables_carry_over_until_reset() -> None:
    """Like the converter's files: the LSTM's states are variable tensors."""
    from ai_edge_litert.interpreter import Interpreter

    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4), seed=4)
    x = np.random.default_rng(2).standard_normal((1, 5, 3)).astype(np.float32)
    interpreter = Interpreter(model_content=write(model, time_steps=5))
    interpreter.allocate_tensors()
    index = interpreter.get_input_details()[0]["index"]
    output = interpreter.get_output_details()[0]["index"]
    runs = []
    for reset in (False, False, True):
        if reset:
            interpreter.reset_all_variables()
        interpreter.set_tensor(index, x)
        interpreter.invoke()
        runs.append(interpreter.get_tensor(output).copy())
    expected = model.forward(x)[0]
    np.testing.assert_allclose(runs[0], expected, atol=TOLERANCE, rtol=0)
    assert not np.allclose(runs[1], expected, atol=1e-4)
    np.testing.assert_allclose(runs[2], expected, atol=TOLERANCE, rtol=0)
