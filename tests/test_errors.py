"""Bad input gets a clear rnnport error; the texts users see most are pinned."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import (
    AmbiguousSourceError,
    DTypeError,
    FormatError,
    RnnportError,
    ShapeError,
    SpecError,
    StateError,
    UnknownFormatError,
    UnknownOptionError,
    UnsupportedFeatureError,
)

LSTM = Spec("lstm", 2, 3)


def keras_lstm(input_size: int = 2, units: int = 3, dtype: object = np.float32) -> list:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, shape).astype(dtype)
            for shape in ((input_size, 4 * units), (units, 4 * units), (4 * units,))]


def test_every_error_is_an_rnnport_error_and_a_builtin() -> None:
    assert issubclass(ShapeError, ValueError) and issubclass(ShapeError, RnnportError)
    assert issubclass(UnsupportedFeatureError, NotImplementedError)
    assert issubclass(rnnport.MissingDependencyError, ImportError)
    assert issubclass(UnknownFormatError, ValueError)


def test_wrong_shapes_are_collected_into_one_error() -> None:
    params = {"weight_ih": np.zeros((12, 3)), "weight_hh": np.zeros((12, 3)),
              "bias_ih": np.zeros(11)}
    with pytest.raises(ShapeError) as error:
        RNN(LSTM, [[params]])
    text = str(error.value)
    assert text.startswith("3 shape problems:")
    assert "layer 0, forward, bias_hh: missing (an LSTM 2→3 has weight_ih, weight_hh, " in text
    assert ("layer 0, forward, weight_ih: expected shape (12, 2) (4 gates × hidden 3, input 2 = "
            "input_size), got (12, 3)") in text
    assert "layer 0, forward, bias_ih: expected shape (12,) (4 gates × hidden 3), got (11,)" in text


def test_wrong_cudnn_buffer_size_states_the_expected_size() -> None:
    with pytest.raises(ShapeError) as error:
        rnnport.read(np.zeros(80, np.float32), "cudnn", cell="lstm", input_size=2, hidden_size=3)
    assert str(error.value).startswith(
        "cudnn buffer: 80 elements; expected 84 for an LSTM 2→3 with bias_mode='double' "
        "(per layer: [4·3·(2+3) + 2·4·3])")


def test_cudnn_read_without_the_shape_says_which_options() -> None:
    with pytest.raises(FormatError, match="missing option.* input_size, hidden_size"):
        rnnport.read(np.zeros(84, np.float32), "cudnn", cell="lstm")


def test_inconsistent_keras_stack() -> None:
    with pytest.raises(ShapeError) as error:
        rnnport.read([keras_lstm(2, 3), keras_lstm(4, 2)])
    assert "part 1 (LSTM 4→2): input_size 4; expected 3 (the output width of part 0" in str(
        error.value)


@pytest.mark.parametrize("fmt", ["cudnn", "torch", "miopen"])
def test_reset_before_gru_into_a_reset_after_format(fmt: str) -> None:
    rnn = RNN.random(Spec("gru", 2, 3, reset_after=False))
    with pytest.raises(UnsupportedFeatureError) as error:
        rnnport.write(rnn, fmt)
    text = str(error.value)
    assert text.startswith(f"write(fmt={fmt!r}): the {fmt} format cannot hold a reset-before GRU")
    assert "no conversion between the two GRUs is exact" in text and "keras" in text


@pytest.mark.parametrize("fmt", ["keras", "miopen"])
def test_projection_into_a_format_without_one(fmt: str) -> None:
    rnn = RNN.random(Spec("lstm", 2, 4, proj_size=2))
    with pytest.raises(UnsupportedFeatureError, match=r"cannot hold an LSTM projection \(proj_size=2"
                       r"\).*Formats that hold it: cudnn, torch"):
        rnnport.write(rnn, fmt)


def test_peepholes_and_cell_clip_are_not_dropped() -> None:
    from rnnport.formats import get

    for feature, spec in (("peepholes", Spec("lstm", 2, 3, peepholes=True)),
                          ("cell_clip", Spec("lstm", 2, 3, cell_clip=3.0)),
                          ("gate_clip", Spec("gru", 2, 3, gate_clip=3.0)),
                          ("input_forget", Spec("lstm", 2, 3, input_forget=True)),
                          # ScaledTanh: no framework layer's function (Keras names some others)
                          ("activations", Spec("gru", 2, 3, activations=[
                              "HardSigmoid", ("ScaledTanh", 1.5, 0.7)]))):
        lacking = [fmt for fmt in rnnport.formats() if feature not in get(fmt).features]
        assert {"keras", "cudnn", "torch"} <= set(lacking)
        for fmt in lacking:
            with pytest.raises(UnsupportedFeatureError):
                rnnport.write(RNN.random(spec), fmt)


@pytest.mark.parametrize("dtype", [np.int64, np.complex64, np.bool_])
def test_integer_complex_and_boolean_weights(dtype: type) -> None:
    with pytest.raises(DTypeError) as error:
        rnnport.read(keras_lstm(dtype=dtype))
    assert str(error.value).startswith("keras weights, kernel: dtype ")
    assert "expected float16, float32 or float64" in str(error.value)


def test_mixed_dtypes() -> None:
    weights = keras_lstm()
    weights[2] = weights[2].astype(np.float64)
    with pytest.raises(DTypeError, match="mixed dtypes"):
        rnnport.read(weights)


def test_unknown_format_suggests_a_close_match() -> None:
    with pytest.raises(UnknownFormatError) as error:
        rnnport.write(RNN.random(LSTM), "cudn")
    assert str(error.value) == ("unknown format 'cudn'; known formats: "
                                f"{', '.join(rnnport.formats())}. Did you mean 'cudnn'?")


def test_unknown_option_suggests_a_close_match() -> None:
    with pytest.raises(UnknownOptionError, match="unknown option 'bias_mod'.*'bias_mode'"):
        rnnport.write(RNN.random(LSTM), "cudnn", bias_mod="none")
    with pytest.raises(UnknownOptionError, match="unknown option"):
        rnnport.convert(keras_lstm(), "torch", colour="red")


def test_flat_buffer_without_fmt_lists_the_fitting_formats() -> None:
    with pytest.raises(AmbiguousSourceError, match="could be read as cudnn or miopen; pass fmt="):
        rnnport.read(np.zeros(84, np.float32))


def test_unrecognised_source() -> None:
    with pytest.raises(FormatError, match="cannot tell the format of a builtins.int"):
        rnnport.read(3)


def test_state_dict_with_two_rnns_asks_for_a_prefix() -> None:
    state = {f"{p}.{name}_l0": np.zeros(shape, np.float32) for p in ("enc", "dec")
             for name, shape in (("weight_ih", (12, 2)), ("weight_hh", (12, 3)))}
    with pytest.raises(AmbiguousSourceError, match="prefixes 'enc.', 'dec.'; pass prefix="):
        rnnport.read(state)
    assert rnnport.read(state, prefix="dec.").spec == Spec("lstm", 2, 3, bias=False)


def test_keras_list_of_wrong_length() -> None:
    with pytest.raises(FormatError, match="5 arrays; expected 3"):
        rnnport.read([*keras_lstm(), np.zeros(3), np.zeros(3)])


def test_keras_bias_of_wrong_shape() -> None:
    weights = keras_lstm()
    weights[2] = weights[2][:-1]
    with pytest.raises(ShapeError, match=r"bias \(11,\); expected \(12,\)"):
        rnnport.read(weights)


def test_forward_argument_errors() -> None:
    rnn = RNN.random(LSTM)
    with pytest.raises(ShapeError, match=r"x has shape \(2, 3\); expected \(batch, time, 2\)"):
        rnn.forward(np.zeros((2, 3)))
    with pytest.raises(DTypeError, match="x has dtype complex128; expected real numbers"):
        rnn.forward(np.zeros((2, 3, 2), complex))
    with pytest.raises(StateError, match=r"lengths\[1\] = 4; expected 0 ≤ length ≤ 3"):
        rnn.forward(np.zeros((2, 3, 2)), lengths=[1, 4])
    with pytest.raises(StateError, match=r"an LSTM state is a pair \(h, c\)"):
        rnn.forward(np.zeros((2, 3, 2)), state=np.zeros((1, 2, 3)))
    with pytest.raises(StateError, match=r"h has shape \(2, 2, 3\); expected \(1, 2, 3\)"):
        rnn.forward(np.zeros((2, 3, 2)), state=(np.zeros((2, 2, 3)), np.zeros((1, 2, 3))))


def test_invalid_spec_lists_every_problem() -> None:
    with pytest.raises(SpecError) as error:
        Spec("gru", 0, 3, proj_size=2)
    assert str(error.value) == ("Spec: input_size=0; expected an int >= 1; proj_size=2 on a gru "
                                "cell; only LSTM cells have a projection.")
    with pytest.raises(SpecError, match="cell='lstmm'"):
        Spec("lstmm", 2, 3)
    with pytest.raises(SpecError, match="activations on a rnn_tanh cell"):
        Spec("rnn_tanh", 2, 3, activations=["Relu"])
    with pytest.raises(SpecError, match="activation 'Swish'; expected one of Sigmoid"):
        Spec("gru", 2, 3, activations=["Swish", "Tanh"])
    assert Spec("lstm", 2, 3, activations=["Sigmoid", "Tanh", "Tanh"]).activations == ()


def test_reset_after_gru_single_bias_mode_refuses_to_move_the_candidate_bias() -> None:
    with pytest.raises(UnsupportedFeatureError, match="nonzero recurrent-side candidate bias"):
        rnnport.write(RNN.random(Spec("gru", 2, 3)), "cudnn", bias_mode="single_input")


def test_nonzero_biases_are_not_dropped_by_bias_mode_none() -> None:
    with pytest.raises(UnsupportedFeatureError, match="bias_mode='none' drops the biases"):
        rnnport.write(RNN.random(LSTM), "cudnn", bias_mode="none")


def test_stack_into_a_uniform_format() -> None:
    model = rnnport.stack([RNN.random(LSTM), RNN.random(Spec("gru", 3, 3))])
    with pytest.raises(UnsupportedFeatureError, match="Pass per_part=True"):
        rnnport.write(model, "torch")
    with pytest.raises(UnsupportedFeatureError, match="Pass per_part=True"):
        rnnport.write(model, "cudnn")
    parts = rnnport.write(model, "torch", per_part=True)
    assert rnnport.read(parts) == model
    with pytest.raises(AttributeError, match="no single Spec"):
        _ = model.spec


def test_output_in_a_missing_folder_writes_nothing(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "buffer.npy"
    with pytest.raises(FormatError, match="does not exist; create it first"):
        rnnport.write(RNN.random(LSTM), "cudnn", path=target)
    assert not (tmp_path / "missing").exists()


def test_saved_buffer_round_trips(tmp_path: Path) -> None:
    rnn = RNN.random(LSTM)
    target = tmp_path / "buffer.npy"
    buffer = rnnport.write(rnn, "cudnn", path=target)
    assert np.array_equal(np.load(target), buffer)
    assert [p.name for p in tmp_path.iterdir()] == ["buffer.npy"]


def test_model_is_immutable() -> None:
    rnn = RNN.random(LSTM)
    with pytest.raises(AttributeError, match="immutable"):
        rnn._spec = LSTM  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        rnn.params[0][0]["weight_ih"][0, 0] = 1.0
    source = {"weight_ih_l0": np.ones((12, 2), np.float32), "weight_hh_l0": np.ones((12, 3),
                                                                                      np.float32)}
    copy = rnnport.read(source)
    source["weight_ih_l0"][0, 0] = 5.0
    assert copy.params[0][0]["weight_ih"][0, 0] == 1.0


def test_ragged_arrays_stray_layers_and_odd_prefixes_are_clear_errors() -> None:
    with pytest.raises(rnnport.ShapeError, match="not one rectangular array"):
        rnnport.read([[1.0], [1.0, 2.0]], "cudnn", cell="lstm", input_size=1, hidden_size=1)
    with pytest.raises(rnnport.ShapeError, match="weight_ih_l0: not one rectangular array"):
        rnnport.read({"weight_ih_l0": [[1.0], [1.0, 2.0]], "weight_hh_l0": np.zeros((4, 1))},
                     "torch")
    # Named lazily: listing every gap up to layer 99999999 would not finish.
    with pytest.raises(rnnport.FormatError, match=r"missing weight_ih_l1, .*…"):
        rnnport.read({"weight_ih_l0": np.zeros((4, 2)), "weight_hh_l0": np.zeros((4, 1)),
                      "weight_ih_l99999999": np.zeros((4, 1))}, "torch")
    with pytest.raises(rnnport.FormatError, match="no RNN with prefix"):
        rnnport.read({"weight_ih_l0": np.zeros((4, 2)), "weight_hh_l0": np.zeros((4, 1))},
                     "torch", prefix=[1])


def test_layer_numbers_too_long_to_be_real_are_clear_errors() -> None:
    weights = rnnport.write(RNN.random(Spec("rnn_tanh", 2, 3), seed=1), "torch")
    stray = {**weights, "weight_ih_l" + "9" * 5000: weights["weight_ih_l0"]}
    with pytest.raises(rnnport.FormatError, match=r"layer number 999999999999… \(5000 digits\)"):
        rnnport.read(stray, "torch")
    cells = {"multi_rnn_cell/cell_" + "1" * 5000 + "/basic_rnn_cell/kernel": np.zeros((5, 3)),
             "multi_rnn_cell/cell_" + "1" * 5000 + "/basic_rnn_cell/bias": np.zeros(3)}
    with pytest.raises(rnnport.FormatError, match="5000 digits"):
        rnnport.read(cells, "tf1")


def test_a_checkpoint_dict_is_unwrapped_like_a_checkpoint_file() -> None:
    weights = rnnport.write(RNN.random(Spec("lstm", 2, 3), seed=2), "torch")
    wrapped = {"model": {"arch": "tagger"}, "weights": {}, "state_dict": weights, "epoch": 4}
    assert rnnport.read(wrapped).spec == Spec("lstm", 2, 3)
