"""TF1 checkpoints: the TensorBundle container, the tf1 format, and damaged input."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import (
    AmbiguousSourceError,
    DTypeError,
    FormatError,
    ShapeError,
    UnsupportedFeatureError,
)
from rnnport.io import tensorbundle
from rnnport.io.crc32c import crc32c

X = np.random.default_rng(7).uniform(-1, 1, (3, 6, 4)).astype(np.float32)


def _model(spec: Spec, seed: int = 0, dtype: object = np.float32) -> RNN:
    return RNN.random(spec, seed=seed, dtype=dtype, scale=0.6)


def _same_function(a: rnnport.Model, b: rnnport.Model, x: np.ndarray = X) -> None:
    np.testing.assert_allclose(b.forward(x)[0], a.forward(x)[0], atol=1e-6, rtol=0)


# -- CRC-32C and the container ----------------------------------------------------------


def test_crc32c_matches_the_published_check_value_and_a_byte_loop() -> None:
    assert crc32c(b"123456789") == 0xE3069283
    data = np.random.default_rng(0).integers(0, 256, 300_001, dtype=np.uint8)
    table = [0] * 256
    for n in range(256):
        value = n
        for _ in range(8):
            value = (value >> 1) ^ 0x82F63B78 if value & 1 else value >> 1
        table[n] = value
    register = 0xFFFFFFFF
    for byte in data.tobytes():
        register = table[(register ^ byte) & 0xFF] ^ (register >> 8)
    assert crc32c(data) == register ^ 0xFFFFFFFF
    assert crc32c(data[1000:], crc32c(data[:1000])) == crc32c(data)


def test_bundle_round_trip_keeps_every_dtype_shape_and_bit(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    arrays = {
        "a/kernel": rng.standard_normal((7, 20)).astype(np.float32),
        "a/bias": rng.standard_normal(20),
        "half": rng.standard_normal(3).astype(np.float16),
        "ints": np.arange(-3, 3, dtype=np.int64),
        "small": np.arange(-3, 3, dtype=np.int8),
        "flags": np.array([True, False, True]),
        "scalar": np.float32(2.5),
        "empty": np.zeros((0, 4), np.float32),
        "big": rng.standard_normal((300, 700)).astype(np.float32),
    }
    written = tensorbundle.write_bundle(tmp_path / "m.ckpt", arrays)
    assert [p.name for p in written] == ["m.ckpt.index", "m.ckpt.data-00000-of-00001"]
    back = tensorbundle.read_bundle(tmp_path / "m.ckpt")
    assert sorted(back) == sorted(arrays)
    for name, value in arrays.items():
        value = np.asarray(value)
        assert back[name].dtype == value.dtype and back[name].shape == value.shape, name
        assert np.array_equal(back[name], value), name
    assert not list(tmp_path.glob("*.partial"))


def test_a_checkpoint_is_found_from_its_index_file_data_file_or_folder(tmp_path: Path) -> None:
    tensorbundle.write_bundle(tmp_path / "model.ckpt-7", {"v": np.ones(2, np.float32)})
    for path in (tmp_path / "model.ckpt-7", tmp_path / "model.ckpt-7.index",
                 tmp_path / "model.ckpt-7.data-00000-of-00001", tmp_path):
        assert tensorbundle.Bundle(path).prefix == tmp_path / "model.ckpt-7"
    (tmp_path / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-7"\n')
    assert tensorbundle.Bundle(tmp_path).prefix == tmp_path / "model.ckpt-7"


def test_writing_refuses_what_a_checkpoint_cannot_hold(tmp_path: Path) -> None:
    with pytest.raises(DTypeError, match="'s' has dtype <U1"):
        tensorbundle.write_bundle(tmp_path / "m", {"s": np.array(["x"])})
    with pytest.raises(FormatError, match="the folder .* does not exist"):
        tensorbundle.write_bundle(tmp_path / "missing" / "m", {"v": np.ones(1)})
    assert not list(tmp_path.iterdir())


# -- damaged checkpoints ----------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    model = _model(Spec("lstm", 4, 5, num_layers=2, bidirectional=True))
    rnnport.write(model, "tf1", path=tmp_path / "model.ckpt")
    return tmp_path / "model.ckpt"


def test_a_truncated_index_is_reported_with_its_file(checkpoint: Path) -> None:
    index = Path(f"{checkpoint}.index")
    data = index.read_bytes()
    for size in (0, 20, len(data) - 1, len(data) // 2):
        index.write_bytes(data[:size])
        with pytest.raises(FormatError) as error:
            rnnport.read(checkpoint, "tf1")
        assert str(index) in str(error.value)
        assert "truncated" in str(error.value) or "damaged" in str(error.value)


def test_a_flipped_index_byte_is_caught_or_harmless(checkpoint: Path) -> None:
    """Every table block is CRC-checked; only the footer's padding and unused handle are not."""
    model = rnnport.read(checkpoint, "tf1")
    index = Path(f"{checkpoint}.index")
    data = index.read_bytes()
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        index.write_bytes(bytes(damaged))
        if position < len(data) - 48:
            with pytest.raises(FormatError):
                rnnport.read(checkpoint, "tf1")
        else:
            try:
                assert rnnport.read(checkpoint, "tf1") == model
            except FormatError:
                pass


def test_a_flipped_data_byte_fails_the_checksum_of_its_tensor(checkpoint: Path) -> None:
    bundle = tensorbundle.Bundle(checkpoint)
    name = "stack_bidirectional_rnn/cell_1/bidirectional_rnn/bw/lstm_cell/kernel"
    entry = bundle[name]
    data = bundle.data_path(0)
    raw = bytearray(data.read_bytes())
    raw[entry.offset + entry.size // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    with pytest.raises(FormatError) as error:
        rnnport.read(checkpoint)
    text = str(error.value)
    assert repr(name) in text and "CRC-32C" in text and str(data) in text


def test_a_truncated_data_file_names_the_tensor_past_its_end(checkpoint: Path) -> None:
    data = tensorbundle.Bundle(checkpoint).data_path(0)
    data.write_bytes(data.read_bytes()[:100])
    with pytest.raises(FormatError, match="lie beyond the end of .*truncated"):
        rnnport.read(checkpoint)


def test_a_missing_shard_is_named(checkpoint: Path) -> None:
    Path(f"{checkpoint}.data-00000-of-00001").unlink()
    with pytest.raises(FormatError, match=r"data file .*model\.ckpt\.data-00000-of-00001 is "
                                          r"missing \(shard 1 of 1\)"):
        rnnport.read(checkpoint)


@pytest.mark.parametrize("kind", ["folder", "fifo", "socket"])
def test_a_shard_that_is_no_file_is_named_for_what_it_is(checkpoint: Path, kind: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    shard = Path(f"{checkpoint}.data-00000-of-00001")
    shard.unlink()
    with contextlib.ExitStack() as stack:
        if kind == "folder":
            shard.mkdir()
        elif kind == "fifo":
            os.mkfifo(shard)  # opened without blocking, then refused
        else:
            monkeypatch.chdir(shard.parent)  # AF_UNIX paths are short: bound by its name alone
            listening = stack.enter_context(socket.socket(socket.AF_UNIX))
            listening.bind(shard.name)  # cannot be opened at all (ENXIO)
        what = {"folder": "a folder", "fifo": r"a FIFO \(named pipe\)", "socket": "a socket"}
        with pytest.raises(FormatError, match=rf"data file .*model\.ckpt\.data-00000-of-00001 "
                                              rf"is {what[kind]}, not a file \(shard 1 of 1\)"):
            rnnport.read(checkpoint)


def test_no_checkpoint_at_the_path(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match="no checkpoint here; expected the index file"):
        rnnport.read(tmp_path / "nothing.ckpt", "tf1")
    with pytest.raises(FormatError, match="a folder with no checkpoint in it"):
        rnnport.read(tmp_path, "tf1")


def test_wrong_shapes_for_a_named_cell_are_listed_together() -> None:
    variables = rnnport.write(_model(Spec("lstm", 4, 5)), "tf1", cell="LSTMCell")
    variables["rnn/lstm_cell/bias"] = np.zeros(19, np.float32)
    with pytest.raises(ShapeError) as error:
        rnnport.read(variables, "tf1")
    assert "rnn/lstm_cell/bias: shape [19]; expected [20]" in str(error.value)
    assert "LSTMCell with input size 4 and 5 units" in str(error.value)
    gru = rnnport.write(_model(Spec("gru", 4, 5, reset_after=False)), "tf1")
    gru["rnn/gru_cell/candidate/kernel"] = np.zeros((8, 5), np.float32)
    with pytest.raises(ShapeError, match=r"candidate/kernel: shape \[8, 5\]; expected \[9, 5\]"):
        rnnport.read(gru, "tf1")


def test_missing_variables_of_a_cell_are_named() -> None:
    variables = rnnport.write(_model(Spec("gru", 4, 5)), "tf1")
    del variables["rnn/cudnn_compatible_gru_cell/candidate/hidden_projection/bias"]
    with pytest.raises(FormatError, match="CudnnCompatibleGRUCell variables "
                                          "candidate/hidden_projection/bias are missing"):
        rnnport.read(variables, "tf1")


def test_a_stack_whose_layers_do_not_chain_is_refused() -> None:
    variables = rnnport.write(_model(Spec("lstm", 4, 5, num_layers=2)), "tf1")
    variables["rnn/multi_rnn_cell/cell_1/lstm_cell/kernel"] = np.zeros((11, 20), np.float32)
    with pytest.raises(ShapeError, match="takes inputs of size 6 .* layer 0 gives 5"):
        rnnport.read(variables, "tf1")


# -- the format --------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "cell", "names"), [
    (Spec("lstm", 4, 5), "LSTMCell", {"rnn/lstm_cell/kernel": (9, 20), "rnn/lstm_cell/bias": (20,)}),
    (Spec("lstm", 4, 5), "BasicLSTMCell", {"rnn/basic_lstm_cell/kernel": (9, 20),
                                           "rnn/basic_lstm_cell/bias": (20,)}),
    (Spec("lstm", 4, 5, peepholes=True, proj_size=3), "LSTMCell", {
        "rnn/lstm_cell/kernel": (7, 20), "rnn/lstm_cell/bias": (20,),
        "rnn/lstm_cell/w_i_diag": (5,), "rnn/lstm_cell/w_f_diag": (5,),
        "rnn/lstm_cell/w_o_diag": (5,), "rnn/lstm_cell/projection/kernel": (5, 3)}),
    (Spec("gru", 4, 5, reset_after=False), "GRUCell", {
        "rnn/gru_cell/gates/kernel": (9, 10), "rnn/gru_cell/gates/bias": (10,),
        "rnn/gru_cell/candidate/kernel": (9, 5), "rnn/gru_cell/candidate/bias": (5,)}),
    (Spec("rnn_tanh", 4, 5), "BasicRNNCell", {"rnn/basic_rnn_cell/kernel": (9, 5),
                                              "rnn/basic_rnn_cell/bias": (5,)}),
])
def test_variable_names_and_shapes_are_tensorflows(spec: Spec, cell: str,
                                                   names: dict[str, tuple[int, ...]]) -> None:
    written = rnnport.write(_model(spec), "tf1", cell=cell)
    assert {name: array.shape for name, array in written.items()} == names


def test_the_acoustic_model_naming_and_shapes() -> None:
    model = _model(Spec("lstm", 120, 320, num_layers=2, bidirectional=True))
    written = rnnport.write(model, "tf1", cell="CudnnCompatibleLSTMCell",
                            scope="layer/stack_bidirectional_rnn")
    base = "layer/stack_bidirectional_rnn/cell_{}/bidirectional_rnn/{}/cudnn_compatible_lstm_cell/"
    assert written[base.format(0, "fw") + "kernel"].shape == (440, 1280)
    assert written[base.format(1, "bw") + "kernel"].shape == (960, 1280)
    assert len(written) == 8
    back = rnnport.read(written)
    _same_function(model, back, np.random.default_rng(0).uniform(-1, 1, (2, 5, 120)))


def test_forget_bias_is_folded_so_the_same_value_writes_back_bit_exact() -> None:
    written = rnnport.write(_model(Spec("lstm", 4, 5)), "tf1")
    for forget_bias in (None, 1.0, 0.0, 0.7):
        options = {} if forget_bias is None else {"forget_bias": forget_bias}
        model = rnnport.read(written, "tf1", **options)
        bias_ih = model.parameter(0, 0, "bias_ih")
        expected = 1.0 if forget_bias is None else forget_bias
        assert np.array_equal(bias_ih, np.repeat(np.float32([0, expected, 0, 0]), 5))
        again = rnnport.write(model, "tf1", **options)
        assert all(np.array_equal(again[k], written[k]) for k in written)
    # written for a graph whose cells add forget_bias 0, the same function is kept
    one = rnnport.read(written)
    moved = rnnport.write(one, "tf1", forget_bias=0.0)
    assert not np.array_equal(moved["rnn/lstm_cell/bias"], written["rnn/lstm_cell/bias"])
    _same_function(one, rnnport.read(moved, forget_bias=0.0))


def test_cudnn_compatible_cells_add_no_forget_bias() -> None:
    model = _model(Spec("lstm", 4, 5))
    written = rnnport.write(model, "tf1", cell="CudnnCompatibleLSTMCell")
    back = rnnport.read(written)
    assert not back.parameter(0, 0, "bias_ih").any()
    _same_function(model, back)
    with pytest.raises(FormatError, match="CudnnCompatibleLSTMCell has no forget_bias"):
        rnnport.read(written, forget_bias=1.0)
    with pytest.raises(FormatError, match="CudnnCompatibleLSTMCell has no forget_bias"):
        rnnport.write(model, "tf1", cell="cudnn_compatible_lstm_cell", forget_bias=1.0)


def test_torch_lstm_through_tf1_keeps_its_function_and_comes_back_exactly() -> None:
    model = _model(Spec("lstm", 4, 5, num_layers=2, bidirectional=True))
    state_dict = rnnport.write(model, "torch")
    written = rnnport.convert(state_dict, "tf1", cell="CudnnCompatibleLSTMCell")
    back = rnnport.read(written)
    _same_function(model, back)
    assert rnnport.convert(rnnport.convert(back, "torch"), "tf1",
                           cell="CudnnCompatibleLSTMCell").keys() == written.keys()


def test_a_stack_of_different_cells_round_trips() -> None:
    model = rnnport.stack([_model(Spec("gru", 4, 5, reset_after=False)),
                           _model(Spec("lstm", 5, 3, peepholes=True), seed=1)])
    written = rnnport.write(model, "tf1")
    assert sorted({name.split("/")[2:4][0] for name in written}) == ["cell_0", "cell_1"]
    back = rnnport.read(written)
    assert isinstance(back, rnnport.Stack)
    _same_function(model, back)


def test_features_a_cell_cannot_hold_are_refused_naming_the_cells_that_can() -> None:
    peephole = _model(Spec("lstm", 4, 5, peepholes=True))
    with pytest.raises(UnsupportedFeatureError, match="BasicLSTMCell cannot hold LSTM peepholes.*"
                                                      "Cells that hold it: LSTMCell, LSTMBlockCell"):
        rnnport.write(peepholes := peephole, "tf1", cell="BasicLSTMCell")
    assert peepholes is peephole
    with pytest.raises(UnsupportedFeatureError, match="LSTMBlockCell cannot hold an LSTM projection"):
        rnnport.write(_model(Spec("lstm", 4, 5, proj_size=2)), "tf1", cell="LSTMBlockCell")
    with pytest.raises(UnsupportedFeatureError, match="GRUCell is a reset-before GRU"):
        rnnport.write(_model(Spec("gru", 4, 5)), "tf1", cell="GRUCell")
    with pytest.raises(UnsupportedFeatureError, match="CudnnCompatibleGRUCell cannot hold a "
                                                      "reset-before GRU"):
        rnnport.write(_model(Spec("gru", 4, 5, reset_after=False)), "tf1",
                      cell="CudnnCompatibleGRUCell")
    with pytest.raises(UnsupportedFeatureError, match="a GRUCell cannot hold an LSTM"):
        rnnport.write(_model(Spec("lstm", 4, 5)), "tf1", cell="GRUCell")
    with pytest.raises(FormatError, match="cell='LSTMcel'.*Did you mean 'LSTMCell'"):
        rnnport.write(_model(Spec("lstm", 4, 5)), "tf1", cell="LSTMcel")


def test_what_a_checkpoint_does_not_store_must_be_stated() -> None:
    clipped = _model(Spec("lstm", 4, 5, cell_clip=0.5))
    with pytest.raises(UnsupportedFeatureError,
                       match="Pass cell_clip=0.5 .the value your graph gives LSTMCell."):
        rnnport.write(clipped, "tf1")
    written = rnnport.write(clipped, "tf1", cell_clip=0.5)
    assert rnnport.read(written, cell_clip=0.5).spec.cell_clip == 0.5
    relu = _model(Spec("rnn_relu", 4, 5))
    with pytest.raises(UnsupportedFeatureError, match="Pass activation='relu'"):
        rnnport.write(relu, "tf1")
    back = rnnport.read(rnnport.write(relu, "tf1", activation="relu"), activation="relu")
    assert back.spec.cell == "rnn_relu"
    with pytest.raises(FormatError, match="activation='relu' applies to BasicRNNCell"):
        rnnport.read(rnnport.write(_model(Spec("gru", 4, 5)), "tf1"), activation="relu")
    with pytest.raises(FormatError, match="forget_bias= applies to LSTM cells"):
        rnnport.read(rnnport.write(_model(Spec("gru", 4, 5)), "tf1"), forget_bias=1.0)


def test_several_networks_need_a_scope_and_the_error_lists_them() -> None:
    variables = {
        **rnnport.write(_model(Spec("lstm", 4, 5)), "tf1", scope="encoder/rnn"),
        **rnnport.write(_model(Spec("gru", 5, 6), seed=2), "tf1", scope="decoder/rnn"),
        "global_step": np.int64(10),
        "encoder/rnn/lstm_cell/kernel/Adam": np.zeros((9, 20), np.float32),
    }
    with pytest.raises(AmbiguousSourceError) as error:
        rnnport.read(variables, "tf1")
    text = str(error.value)
    assert "holds 2 recurrent networks; pass scope= to pick one" in text
    assert "scope='decoder/rnn': one dynamic_rnn cell of CudnnCompatibleGRUCell (1 layer)" in text
    assert "scope='encoder/rnn': one dynamic_rnn cell of LSTMCell (1 layer)" in text
    assert rnnport.read(variables, "tf1", scope="encoder").spec.cell == "lstm"
    assert rnnport.read(variables, "tf1", scope="decoder/rnn").spec.cell == "gru"
    with pytest.raises(FormatError, match="no recurrent network under scope='dekoder'.*Did you "
                                          "mean 'decoder/rnn'"):
        rnnport.read(variables, "tf1", scope="dekoder")


def test_bidirectional_multi_rnn_cell_stacks_are_refused_with_the_reason() -> None:
    forward = rnnport.write(_model(Spec("lstm", 4, 5, num_layers=2)), "tf1",
                            scope="bidirectional_rnn/fw")
    with pytest.raises(UnsupportedFeatureError, match="each direction runs its whole stack alone"):
        rnnport.read(forward, "tf1")


def test_tf1_dicts_and_checkpoints_are_sniffed(checkpoint: Path) -> None:
    assert isinstance(rnnport.read(checkpoint), RNN)
    assert isinstance(rnnport.read(str(checkpoint) + ".index"), RNN)
    assert isinstance(rnnport.read(rnnport.write(_model(Spec("gru", 4, 5)), "tf1")), RNN)


def test_graph_tensor_names_with_a_port_are_accepted() -> None:
    written = rnnport.write(_model(Spec("lstm", 4, 5)), "tf1")
    model = rnnport.read({f"{k}:0": v for k, v in written.items()}, "tf1")
    assert model == rnnport.read(written)


def test_param_count_is_what_the_cells_save() -> None:
    gru = _model(Spec("gru", 4, 5, reset_after=False))
    assert rnnport.param_count(gru, "tf1") == 150
    assert rnnport.param_count(_model(Spec("gru", 4, 5)), "tf1") == 155
    assert rnnport.param_count(_model(Spec("lstm", 4, 5)), "tf1") == 200


def test_float16_and_float64_checkpoints_keep_their_dtype(tmp_path: Path) -> None:
    for dtype in (np.float16, np.float64):
        model = _model(Spec("lstm", 4, 5, num_layers=2), dtype=dtype)
        prefix = tmp_path / f"m{np.dtype(dtype).itemsize}.ckpt"
        rnnport.write(model, "tf1", path=prefix)
        back = rnnport.read(prefix)
        assert back.dtype == dtype
        assert rnnport.write(back, "tf1").keys() == rnnport.write(model, "tf1").keys()


def test_copying_a_checkpoint_elsewhere_keeps_it_readable(checkpoint: Path, tmp_path: Path) -> None:
    other = tmp_path / "copy"
    other.mkdir()
    for file in checkpoint.parent.glob("model.ckpt.*"):
        shutil.copy(file, other / file.name)
    assert rnnport.read(other / "model.ckpt") == rnnport.read(checkpoint)


def test_a_path_that_does_not_exist_is_said_so(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"nothing\.ckpt does not exist .*check the path"):
        rnnport.read(tmp_path / "nothing.ckpt")


def test_a_checkpoint_without_tf1_cells_says_what_names_were_expected(tmp_path: Path) -> None:
    tensorbundle.write_bundle(tmp_path / "m", {
        "model/layer_with_weights-0/cell/kernel/.ATTRIBUTES/VARIABLE_VALUE": np.ones((9, 20))})
    with pytest.raises(FormatError, match="no TF1 recurrent cell variables found.*TF2 "
                                          "object-based checkpoint"):
        rnnport.read(tmp_path / "m", "tf1")


def test_writing_to_a_folder_asks_for_a_prefix(tmp_path: Path) -> None:
    with pytest.raises(FormatError, match=r"is a folder; pass a checkpoint prefix inside it, "
                                          r"e\.g\. .*model\.ckpt"):
        rnnport.write(_model(Spec("lstm", 4, 5)), "tf1", path=tmp_path)
    assert not list(tmp_path.iterdir())


def test_more_bad_input_gets_rnnport_errors(tmp_path) -> None:
    from rnnport.formats import sniff
    from rnnport.io import _proto
    from rnnport.io.tensorbundle import write_bundle

    model = rnnport.RNN.random(rnnport.Spec("lstm", 2, 3))
    with pytest.raises(rnnport.FormatError, match="structure"):
        rnnport.write(model, "tf1", structure=["single"])
    with pytest.raises(rnnport.FormatError, match="rectangular"):
        rnnport.read({"rnn/lstm_cell/kernel": [[1, 2], [3]], "rnn/lstm_cell/bias": np.zeros(12)},
                     "tf1")
    with pytest.raises(rnnport.FormatError, match="path=5"):
        rnnport.write(model, "tf1", path=5)
    with pytest.raises(rnnport.FormatError, match="names must be non-empty strings"):
        write_bundle(tmp_path / "m.ckpt", {1: np.zeros(2), "a": np.zeros(2)})
    with pytest.raises(rnnport.FormatError, match="rectangular"):
        write_bundle(tmp_path / "m.ckpt", {"a": [[1, 2], [3]]})
    assert not list(tmp_path.iterdir())
    with pytest.raises(_proto.ProtoError, match="64 bits"):
        _proto.read_varint(b"\xff" * 9 + b"\x7f", 0)
    assert _proto.read_varint(b"\xff" * 9 + b"\x01", 0) == (2**64 - 1, 10)
    named_like_a_shard = tmp_path / "train.data-v2.npz"
    rnnport.write(model, "npz", path=named_like_a_shard)
    assert sniff(named_like_a_shard) == "npz"


def test_write_refuses_options_its_cells_do_not_take() -> None:
    gru = rnnport.RNN.random(rnnport.Spec("gru", 2, 3))
    with pytest.raises(rnnport.FormatError, match="forget_bias= applies to LSTM cells"):
        rnnport.write(gru, "tf1", forget_bias=2.0)
    lstm = rnnport.RNN.random(rnnport.Spec("lstm", 2, 3))
    with pytest.raises(rnnport.FormatError, match="cell_clip= applies to LSTMCell"):
        rnnport.write(lstm, "tf1", cell="BasicLSTMCell", cell_clip=2.0)
