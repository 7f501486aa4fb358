"""What a source holds beside the network read, and what reading it assumes: each format's
``notes`` hook and ``rnnport inspect``, which prints them."""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.cli import main
from rnnport.formats import get

FILES = Path(__file__).parent / "golden" / "files"


def notes(fmt: str, source: object, **options: object) -> list[str]:
    hook = get(fmt).notes
    assert hook is not None
    return hook(source, **options)


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["inspect", *args]) == 0
    return capsys.readouterr().out


# -- Keras ------------------------------------------------------------------------------------


def test_a_keras_file_names_the_layers_left_out() -> None:
    found = notes("keras", FILES / "legacy_stack.h5")
    assert found == [
        "layer 'dropout' (Dropout): no weights, and no effect at inference; not read.",
        "layer 'dense' (Dense): not recurrent; not read (rnnport reads the recurrent layers).",
    ]


def test_a_functional_file_names_its_head() -> None:
    assert notes("keras", FILES / "legacy_functional.h5") == [
        "layer 'head' (Dense): not recurrent; not read (rnnport reads the recurrent layers)."]


def test_a_keras_file_holding_the_network_alone_has_nothing_beside_it(tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 4, num_layers=2, bidirectional=True), seed=1)
    for name in ("m.keras", "m.weights.h5"):
        rnnport.write(model, "keras", path=tmp_path / name)
        assert notes("keras", tmp_path / name) == []


@pytest.fixture
def old_keras_weights(tmp_path: Path) -> Path:
    """legacy_stack_weights.h5 as Keras 2.2.4 (which defaulted to hard_sigmoid gates) wrote it."""
    path = tmp_path / "old.h5"
    shutil.copy(FILES / "legacy_stack_weights.h5", path)
    with h5py.File(path, "r+") as h5:
        h5.attrs["keras_version"] = "2.2.4"
    return path


def test_an_old_keras_weights_file_says_hard_sigmoid_is_assumed(old_keras_weights: Path) -> None:
    found = notes("keras", old_keras_weights)
    assumed = [note for note in found if "hard_sigmoid" in note]
    assert len(assumed) == 2  # the LSTM and the bidirectional GRU
    assert all("2.2.4" in note and "recurrent_activation='sigmoid'" in note for note in assumed)
    assert not any("hard_sigmoid" in note for note in
                   notes("keras", old_keras_weights, recurrent_activation="sigmoid"))
    model = rnnport.read(old_keras_weights)
    assert model.parts[0].spec.activations[0][0] == "HardSigmoid"


def test_inspect_prints_the_assumption_and_the_layers_left_out(
        capsys: pytest.CaptureFixture[str], old_keras_weights: Path) -> None:
    out = inspect(capsys, str(old_keras_weights))
    assert "beside it, or assumed (4):" in out
    assert "hard_sigmoid gates assumed" in out and "layer 'dense': not recurrent" in out


def test_masking_and_another_stack_are_named_with_what_they_do(tmp_path: Path) -> None:
    import keras
    model = keras.Sequential([keras.Input((None, 3)), keras.layers.Masking(mask_value=-1.0),
                              keras.layers.LSTM(4, return_sequences=True, name="encoder"),
                              keras.layers.Dense(2, name="head"),
                              keras.layers.GRU(3, return_sequences=True, name="decoder")])
    path = tmp_path / "masked.keras"
    model.save(path)
    found = notes("keras", path, layer="encoder")
    assert found == [
        "layer 'masking' (Masking): Keras skips the time steps whose inputs all equal "
        "mask_value=-1.0, carrying the state over them; rnnport runs every step it is given, "
        "so pass only the unmasked steps.",
        "layer 'head' (Dense): not recurrent; not read (rnnport reads the recurrent layers).",
        "layer 'decoder' (GRU): recurrent, another network here; not read (layer='decoder' "
        "reads it).",
    ]


# -- PyTorch ----------------------------------------------------------------------------------


def _state(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = {f"encoder.rnn.{key}": value for key, value in
             rnnport.write(RNN.random(Spec("lstm", 3, 4), seed=seed), "torch").items()}
    state |= {"fc.weight": rng.standard_normal((2, 4)), "fc.bias": rng.standard_normal(2)}
    return state


def test_a_state_dict_names_the_other_modules_keys() -> None:
    found = notes("torch", _state())
    assert found == ["module 'fc': fc.weight (2, 4), fc.bias (2,); not recurrent weights, "
                     "not read."]


def test_a_second_rnn_is_named_with_the_prefix_that_reads_it() -> None:
    state = _state() | {f"decoder.{key}": value for key, value in
                        rnnport.write(RNN.random(Spec("gru", 4, 5), seed=2), "torch").items()}
    found = notes("torch", state, prefix="encoder.rnn.")
    assert "another RNN under the key prefix 'decoder.'; not read (prefix='decoder.' reads " \
           "it)." in found
    with pytest.raises(rnnport.AmbiguousSourceError):
        notes("torch", state)


def test_a_training_checkpoint_names_what_sits_beside_its_state_dict(tmp_path: Path) -> None:
    import torch
    state = {key: torch.from_numpy(np.asarray(value)) for key, value in _state().items()}
    path = tmp_path / "checkpoint.pt"
    torch.save({"model": state, "optimizer": {"lr": 0.1}, "epoch": 3}, path)
    found = notes("torch", path)
    assert found[:2] == ["a torch.save file, read without PyTorch.",
                         "a training checkpoint: its 'model' entry read as the state_dict; "
                         "beside it 'optimizer', 'epoch', not read."]
    assert any(note.startswith("module 'fc'") for note in found)
    assert notes("torch", torch.nn.LSTM(3, 4)) == []


def test_many_modules_are_summed_up_not_listed_one_by_one() -> None:
    state = _state() | {f"block{k}.weight": np.zeros(1) for k in range(20)}
    found = notes("torch", state)
    assert len(found) == 9 and found[-1].startswith("… and 13 more modules (13 keys)")


# -- TF1 --------------------------------------------------------------------------------------


def _variables() -> dict[str, object]:
    kernel, bias = np.zeros((7, 16), np.float32), np.zeros(16, np.float32)
    return {
        "rnn/lstm_cell/kernel": kernel, "rnn/lstm_cell/bias": bias,
        "rnn/lstm_cell/kernel/Adam": kernel, "rnn/lstm_cell/kernel/Adam_1": kernel,
        "rnn/lstm_cell/bias/Adam": bias, "rnn/lstm_cell/bias/Adam_1": bias,
        "rnn/lstm_cell/kernel/ExponentialMovingAverage": kernel,
        "global_step": np.int64(1000), "beta1_power": np.float32(0.9),
        "dense/kernel": np.zeros((4, 2)), "dense/bias": np.zeros(2),
        "dec/gru_cell/gates/kernel": np.zeros((5, 4)), "dec/gru_cell/gates/bias": np.zeros(4),
        "dec/gru_cell/candidate/kernel": np.zeros((5, 2)),
        "dec/gru_cell/candidate/bias": np.zeros(2),
    }


def test_a_tf1_checkpoint_names_slots_steps_averages_and_other_variables() -> None:
    found = notes("tf1", _variables(), scope="rnn")
    assert found == [
        "another recurrent network, scope='dec': one dynamic_rnn cell of GRUCell (1 layer); "
        "not read.",
        "assumed, as the cells' defaults, since a checkpoint does not record them: "
        "forget_bias=1.0 (added to the forget gate at run time), no cell_clip; pass the "
        "option if the graph built the cells otherwise.",
        "optimizer slots of the variables read: …/Adam (2), …/Adam_1 (2); training state, "
        "not read.",
        "moving averages of 1 variables read (…/ExponentialMovingAverage); rnnport reads the "
        "raw variables, not their averages.",
        "training state: global_step, beta1_power; not read.",
        "other variables: dense/kernel (4, 2), dense/bias (2,); not part of the network, "
        "not read.",
    ]
    options = {"forget_bias": 0.0, "cell_clip": 3.0}
    assert not any("assumed" in note for note in notes("tf1", _variables(), scope="rnn",
                                                       **options))
    gru = notes("tf1", _variables(), scope="dec")
    assert not any("assumed" in note for note in gru)
    assert any("scope='rnn'" in note for note in gru)


def test_inspect_a_tf1_checkpoint_says_what_is_assumed(
        capsys: pytest.CaptureFixture[str]) -> None:
    out = inspect(capsys, str(Path(__file__).parent / "golden" / "tf1" / "tf1_basic_rnn_cell"
                              / "model.ckpt"))
    assert "beside it, or assumed (1):" in out and "activation tanh" in out


# -- ONNX -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An LSTM stack with a Linear head and a softmax, as both PyTorch exporters write it."""
    import torch

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = torch.nn.LSTM(3, 4, 2, batch_first=True)
            self.fc = torch.nn.Linear(4, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.fc(self.rnn(x)[0]), -1)

    torch.manual_seed(0)
    module, x = Tagger().eval(), torch.randn(1, 5, 3)
    folder = tmp_path_factory.mktemp("exported")
    paths = {"dynamo": folder / "dynamo.onnx", "torchscript": folder / "torchscript.onnx"}
    torch.onnx.export(module, (x,), str(paths["dynamo"]))
    torch.onnx.export(module, (x,), str(paths["torchscript"]), dynamo=False)
    return paths


@pytest.mark.parametrize("exporter", ["dynamo", "torchscript"])
def test_an_exported_model_names_its_head_and_the_states_fed(exported: dict[str, Path],
                                                             exporter: str) -> None:
    found = notes("onnx", exported[exporter])
    fed = [note for note in found if " is fed initial_h from " in note]
    assert len(fed) == 2  # one per layer's node
    state = "a constant of zeros" if exporter == "dynamo" else "computed at run time"
    assert all(state in note for note in fed)
    computing = next(note for note in found if note.startswith("other computing nodes"))
    assert "MatMul" in computing and "Softmax" in computing
    initializers = next(note for note in found if note.startswith("other initializers"))
    assert "'fc.bias' (2,)" in initializers


@pytest.mark.parametrize("inputs", [False, True], ids=["x alone", "lengths and state"])
def test_a_written_onnx_model_has_no_other_computing_nodes(tmp_path: Path, inputs: bool) -> None:
    path = tmp_path / "m.onnx"
    rnnport.write(RNN.random(Spec("gru", 3, 4, num_layers=2), seed=3), "onnx", path=path,
                  lengths=inputs, initial_state=inputs)
    found = notes("onnx", path)
    assert not any(note.startswith("other computing nodes") for note in found)
    fed = [note for note in found if " is fed " in note]
    assert len(fed) == (2 if inputs else 0)  # one node per layer
    assert all("sequence_lens from 'sequence_lens', computed at run time" in note
               and "initial_h from" in note for note in fed)


def test_a_second_onnx_network_is_named_with_the_node_that_reads_it() -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(4)
    nodes, initializers = [], []
    for name, op, gates in (("enc", "LSTM", 4), ("dec", "GRU", 3)):
        for tensor, shape in (("W", (1, gates * 2, 3)), ("R", (1, gates * 2, 2))):
            initializers.append(numpy_helper.from_array(
                rng.standard_normal(shape).astype(np.float32), f"{name}_{tensor}"))
        nodes.append(helper.make_node(op, ["x", f"{name}_W", f"{name}_R"], [f"{name}_y"],
                                      name=name, hidden_size=2))
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 1, 3])],
        [helper.make_tensor_value_info(f"{n}_y", TensorProto.FLOAT, [5, 1, 1, 2]) for n in ("enc",
                                                                                     "dec")],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    found = notes("onnx", model, node="enc")
    assert found == ["another recurrent network, ONNX GRU node 'dec'; not read (node='dec' "
                     "reads it)."]


# -- the command line -------------------------------------------------------------------------


def test_inspect_says_when_nothing_sits_beside_the_network(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "m.keras"
    rnnport.write(RNN.random(Spec("lstm", 3, 4), seed=5), "keras", path=path)
    assert "beside it: nothing (the source holds this network alone)" in inspect(capsys,
                                                                                 str(path))


def test_inspect_with_options_passes_them_to_the_notes(
        capsys: pytest.CaptureFixture[str], old_keras_weights: Path) -> None:
    out = inspect(capsys, str(old_keras_weights), "-O", "recurrent_activation=sigmoid")
    assert "hard_sigmoid" not in out and "beside it, or assumed (2):" in out


def test_an_unrolled_network_says_how_it_was_read(tmp_path: Path) -> None:
    import torch
    path = tmp_path / "rnn.onnx"
    torch.onnx.export(torch.nn.RNN(3, 4, 2), (torch.randn(5, 1, 3),), str(path))
    (note,) = notes("onnx", path)
    assert note.startswith("no recurrent node: the graph computes a 2-layer RNN(tanh) 3→4 "
                           "step by step")


def test_a_nested_checkpoint_is_unwrapped_and_named(tmp_path: Path) -> None:
    import torch
    state = {key: torch.from_numpy(np.asarray(value)) for key, value in _state().items()}
    path = tmp_path / "nested.pt"
    torch.save({"state_dict": {"model": state}, "epoch": 3}, path)
    assert rnnport.read(path).spec == Spec("lstm", 3, 4)
    assert notes("torch", path)[1] == ("a training checkpoint: its 'state_dict.model' entry "
                                       "read as the state_dict; beside it 'epoch', not read.")


def test_training_state_is_told_anywhere_in_the_checkpoint() -> None:
    variables = _variables()
    variables["train/global_step"] = variables.pop("global_step")
    variables["beta1_power_2"] = variables.pop("beta1_power")
    found = notes("tf1", variables, scope="rnn")
    assert "training state: train/global_step, beta1_power_2; not read." in found


def test_notes_check_options_as_read_does() -> None:
    with pytest.raises(rnnport.UnknownOptionError, match="bogus"):
        get("tf1").source_notes(_variables(), scope="rnn", bogus=1)
    assert get("tf1").source_notes(_variables(), scope="dec")


def test_a_keras_archive_with_an_oversized_config_is_refused_unread(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "big.keras"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", b" " * (40 << 20))
        archive.writestr("model.weights.h5", b"")
    with pytest.raises(rnnport.FormatError, match="config.json' declares 41,943,040 bytes"):
        rnnport.read(path)


def test_a_variable_given_twice_or_under_no_name_is_refused() -> None:
    variables = _variables()
    twice = {**variables, "rnn/lstm_cell/kernel:0": variables["rnn/lstm_cell/kernel"]}
    with pytest.raises(rnnport.FormatError, match="name one variable"):
        rnnport.read(twice, "tf1", scope="rnn")
    with pytest.raises(rnnport.FormatError, match="expected variable names"):
        rnnport.read({**variables, 3: np.zeros(2)}, "tf1", scope="rnn")
