"""Keras model files: written by real Keras 3 and tf_keras and read by rnnport; written by
rnnport and loaded by real Keras 3; and damaged or hostile files refused clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import keras
import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import (
    AmbiguousSourceError,
    FormatError,
    ShapeError,
    UnsupportedFeatureError,
)
from rnnport.formats import keras as keras_format
from rnnport.formats.keras import layers as keras_layers

TOLERANCE = 1e-5
INPUT = 3
WRITER = Path(__file__).parent / "tf_keras_writer.py"


def _x(width: int = INPUT, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (2, 6, width)).astype(dtype)


def _close(got: Any, want: Any) -> None:
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=TOLERANCE, rtol=TOLERANCE)


def _randomize(model: Any, seed: int) -> None:
    rng = np.random.default_rng(seed)
    model.set_weights([rng.uniform(-0.8, 0.8, w.shape).astype(w.dtype)
                       for w in model.get_weights()])


def _run(layers: list[Any], x: np.ndarray) -> np.ndarray:
    y: Any = x
    for layer in layers:
        y = layer(y)
    return keras.ops.convert_to_numpy(y)


def _files(folder: Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


# -- Keras 3 files → rnnport -------------------------------------------------------------

# name → (layers between Input and a Dense head, names of the recurrent layers, options a
# weights file needs because it has no config)
Layers = Callable[[], list[Any]]
KERAS3_CASES: dict[str, tuple[Layers, list[str], dict[str, Any]]] = {
    "lstm": (lambda: [keras.layers.LSTM(4, return_sequences=True, name="rnn")], ["rnn"], {}),
    "gru_reset_after": (lambda: [keras.layers.GRU(4, reset_after=True, return_sequences=True,
                                                  name="rnn")], ["rnn"], {}),
    "gru_reset_before": (lambda: [keras.layers.GRU(4, reset_after=False, return_sequences=True,
                                                   name="rnn")], ["rnn"], {}),
    "simple_rnn_relu": (lambda: [keras.layers.SimpleRNN(4, activation="relu",
                                                        return_sequences=True, name="rnn")],
                        ["rnn"], {"activation": "relu"}),
    "bidirectional_lstm": (lambda: [keras.layers.Bidirectional(
        keras.layers.LSTM(3, return_sequences=True), name="rnn")], ["rnn"], {}),
    "lstm_gru_stack": (lambda: [keras.layers.Masking(name="mask"),
                                keras.layers.LSTM(5, return_sequences=True, name="enc"),
                                keras.layers.Dropout(0.5, name="drop"),
                                keras.layers.GRU(3, return_sequences=True, name="dec")],
                       ["enc", "dec"], {"layer": ["enc", "dec"]}),
}


@pytest.mark.parametrize("name", sorted(KERAS3_CASES))
def test_keras3_model_and_weights_files_read_as_keras_runs_them(tmp_path: Path, name: str) -> None:
    make, recurrent, weights_options = KERAS3_CASES[name]
    layers = make()
    model = keras.Sequential([keras.Input((None, INPUT)), *layers, keras.layers.Dense(2)])
    _randomize(model, seed=len(name))
    model.save(tmp_path / "model.keras")
    model.save_weights(tmp_path / "model.weights.h5")
    x = _x()
    want = _run(layers, x)  # the recurrent stack's own output, without the Dense head
    from_archive = rnnport.read(tmp_path / "model.keras")
    _close(from_archive.forward(x)[0], want)
    from_weights = rnnport.read(str(tmp_path / "model.weights.h5"), **weights_options)
    _close(from_weights.forward(x)[0], want)
    assert from_weights == from_archive
    # a single layer can also be picked by name from the .keras file
    picked = rnnport.read(tmp_path / "model.keras", layer=recurrent[0])
    assert picked == from_archive


def _functional_with_head() -> tuple[Any, list[str]]:
    inputs = keras.Input((None, INPUT), name="x")
    hidden = keras.layers.LSTM(4, return_sequences=True, name="enc")(inputs)
    hidden = keras.layers.Dropout(0.2, name="drop")(hidden)
    hidden = keras.layers.Bidirectional(keras.layers.GRU(3, return_sequences=True),
                                        name="bi")(hidden)
    outputs = keras.layers.Dense(2, name="head")(hidden)
    return keras.Model(inputs, outputs), ["enc", "drop", "bi"]


def test_keras3_functional_model_with_a_head_reads_its_recurrent_stack(tmp_path: Path) -> None:
    model, names = _functional_with_head()
    _randomize(model, seed=3)
    model.save(tmp_path / "f.keras")
    model.save_weights(tmp_path / "f.weights.h5")
    x = _x(seed=1)
    want = _run([model.get_layer(name) for name in names], x)
    _close(rnnport.read(tmp_path / "f.keras").forward(x)[0], want)
    with pytest.raises(AmbiguousSourceError, match=r"recurrent layers 'bi' \(group bidirectional\), "
                                                   r"'enc' \(group lstm\); other layers here "
                                                   r"\('head' \(group dense\)\)"):
        rnnport.read(tmp_path / "f.weights.h5")
    from_weights = rnnport.read(tmp_path / "f.weights.h5", layer=["enc", "bi"])
    _close(from_weights.forward(x)[0], want)


def test_keras3_model_with_two_stacks_needs_layer(tmp_path: Path) -> None:
    inputs = keras.Input((None, INPUT), name="x")
    encoded = keras.layers.LSTM(4, return_sequences=True, name="enc")(inputs)
    middle = keras.layers.Dense(5, name="mid")(encoded)
    decoded = keras.layers.GRU(3, return_sequences=True, name="dec")(middle)
    model = keras.Model(inputs, keras.layers.Dense(1, name="out")(decoded))
    _randomize(model, seed=5)
    model.save(tmp_path / "two.keras")
    with pytest.raises(AmbiguousSourceError) as caught:
        rnnport.read(tmp_path / "two.keras")
    message = str(caught.value)
    assert "'enc' (LSTM)" in message and "'dec' (GRU)" in message and "layer=" in message
    x = _x(seed=2)
    _close(rnnport.read(tmp_path / "two.keras", layer="enc").forward(x)[0],
           _run([model.get_layer("enc")], x))
    middle_x = _run([model.get_layer("enc"), model.get_layer("mid")], x)
    _close(rnnport.read(tmp_path / "two.keras", layer="dec").forward(middle_x)[0],
           _run([model.get_layer("dec")], middle_x))
    with pytest.raises(FormatError, match=r"no layer named 'dek'.*'enc', 'dec'.*Did you mean 'dec'"):
        rnnport.read(tmp_path / "two.keras", layer="dek")
    with pytest.raises(FormatError, match=r"'mid' \(Dense\) is not a recurrent layer"):
        rnnport.read(tmp_path / "two.keras", layer="mid")


# -- tf_keras legacy files → rnnport -------------------------------------------------------


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tf_keras")
    environment = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": ""}
    environment.pop("KERAS_BACKEND", None)
    subprocess.run([sys.executable, str(WRITER), str(folder)], check=True, env=environment,
                   capture_output=True, timeout=300)
    return folder


LEGACY_FILES = {  # file stem → the stem of its expected output
    "legacy_stack": "legacy_stack",
    "legacy_stack_weights": "legacy_stack",
    "legacy_functional": "legacy_functional",
    "cudnn_lstm": "cudnn_lstm",
    "cudnn_lstm_weights": "cudnn_lstm",
    "cudnn_gru": "cudnn_gru",
    "cudnn_bigru": "cudnn_bigru",
    "legacy_activations": "legacy_activations",
    "old_keras_weights": "old_keras_weights",
}


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(LEGACY_FILES))
def test_tf_keras_legacy_files_read_as_tf_keras_runs_them(legacy: Path, stem: str) -> None:
    expected = np.load(legacy / "expected.npz")
    path = legacy / f"{stem}.h5"
    before = path.read_bytes()
    model = rnnport.read(path)
    _close(model.forward(expected["x"])[0], expected[LEGACY_FILES[stem]])
    assert path.read_bytes() == before


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["cudnn_lstm", "cudnn_gru"])
def test_cudnn_layers_give_the_buffer_they_hand_to_cudnn(legacy: Path, stem: str) -> None:
    expected = np.load(legacy / "expected.npz")
    buffer = rnnport.write(rnnport.read(legacy / f"{stem}.h5"), "cudnn")
    recorded = expected[f"params_{stem}"]
    assert buffer.dtype == recorded.dtype and np.array_equal(buffer, recorded)


@pytest.mark.slow
def test_an_old_keras_weights_file_takes_that_kerass_default_gates(legacy: Path) -> None:
    """Keras before 2.3 defaulted recurrent_activation to hard_sigmoid; its weights-only file
    records nothing else. tf.keras's 2.2.4-tf spans TensorFlow 1.x and 2.0: no guess."""
    expected = np.load(legacy / "expected.npz")
    model = rnnport.read(legacy / "old_keras_weights.h5")
    assert [part.spec.activations[0] for part in model.parts] == [("HardSigmoid", 0.2, 0.5)] * 2
    with pytest.raises(FormatError, match="TensorFlow 1.x to 2.1.*recurrent_activation="):
        rnnport.read(legacy / "old_tf_keras_weights.h5")
    told = rnnport.read(legacy / "old_tf_keras_weights.h5", recurrent_activation="hard_sigmoid",
                        keras_version="2.2.4-tf")
    _close(told.forward(expected["x"])[0], expected["old_keras_weights"])
    later = rnnport.read(legacy / "old_keras_weights.h5", recurrent_activation="sigmoid")
    assert not np.allclose(later.forward(expected["x"])[0], expected["old_keras_weights"],
                           atol=1e-3)


@pytest.mark.slow
def test_cudnn_layers_get_weights_lists_read_as_cudnn(legacy: Path) -> None:
    expected = np.load(legacy / "expected.npz")
    with h5py.File(legacy / "cudnn_lstm.h5", "r") as h5:
        group = h5["model_weights/cu_dnnlstm/cu_dnnlstm"]
        arrays = [group[name][()] for name in ("kernel:0", "recurrent_kernel:0", "bias:0")]
    from_file = rnnport.read(legacy / "cudnn_lstm.h5")
    assert rnnport.read(arrays) == from_file == rnnport.read(arrays, cudnn_layer=True)
    _close(from_file.forward(expected["x"])[0], expected["cudnn_lstm"])
    with pytest.raises(ShapeError, match="CuDNNLSTM's or CuDNNGRU's.*cudnn_layer=True"):
        rnnport.read(arrays, cudnn_layer=False)


@pytest.mark.slow
def test_cudnn_kernels_read_as_plain_keras_kernels_give_other_outputs(legacy: Path) -> None:
    """The CuDNN reshape matters: the same arrays read the plain way compute something else."""
    expected = np.load(legacy / "expected.npz")
    with h5py.File(legacy / "cudnn_lstm.h5", "r") as h5:
        group = h5["model_weights/cu_dnnlstm/cu_dnnlstm"]
        kernel, recurrent, bias = (group[name][()] for name in
                                   ("kernel:0", "recurrent_kernel:0", "bias:0"))
    plain = rnnport.read([kernel, recurrent, bias[:16] + bias[16:]], fmt="keras")
    assert not np.allclose(plain.forward(expected["x"])[0], expected["cudnn_lstm"], atol=1e-3)


# -- rnnport → Keras 3 ---------------------------------------------------------------------

MODELS: dict[str, Callable[[], rnnport.Model]] = {
    "lstm": lambda: RNN.random(Spec("lstm", INPUT, 4), seed=1),
    "gru_reset_after": lambda: RNN.random(Spec("gru", INPUT, 4), seed=2),
    "gru_reset_before": lambda: RNN.random(Spec("gru", INPUT, 4, reset_after=False), seed=3),
    "simple_rnn_relu": lambda: RNN.random(Spec("rnn_relu", INPUT, 4), seed=4),
    "simple_rnn_no_bias": lambda: RNN.random(Spec("rnn_tanh", INPUT, 4, bias=False), seed=5),
    "bidirectional_lstm_2_layers": lambda: RNN.random(
        Spec("lstm", INPUT, 4, num_layers=2, bidirectional=True), seed=6),
    "stack": lambda: rnnport.stack([
        RNN.random(Spec("lstm", INPUT, 5), seed=7),
        RNN.random(Spec("gru", 5, 2, bidirectional=True), seed=8),
        RNN.random(Spec("rnn_tanh", 4, 3), seed=9)]),
    "float64_bidirectional_gru": lambda: RNN.random(
        Spec("gru", INPUT, 4, bidirectional=True), seed=10, dtype=np.float64),
}


def _keras_twin(model: rnnport.Model) -> Any:
    """The Keras architecture of ``model``, built independently of rnnport's files."""
    dtype = str(model.dtype)
    layers: list[Any] = [keras.Input((None, model.input_size), dtype=dtype)]
    for part in model.layers():
        spec = part.spec
        common = {"return_sequences": True, "use_bias": spec.bias, "dtype": dtype}
        if spec.cell == "lstm":
            layer = keras.layers.LSTM(spec.hidden_size, **common)
        elif spec.cell == "gru":
            layer = keras.layers.GRU(spec.hidden_size, reset_after=spec.reset_after, **common)
        else:
            layer = keras.layers.SimpleRNN(spec.hidden_size, activation=spec.cell[4:], **common)
        layers.append(keras.layers.Bidirectional(layer, dtype=dtype) if spec.bidirectional
                      else layer)
    return keras.Sequential(layers)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_keras3_loads_and_runs_the_files_we_write(tmp_path: Path, name: str) -> None:
    model = MODELS[name]()
    x = _x(model.input_size, seed=3, dtype=model.dtype)
    want, _ = model.forward(x)
    returned = rnnport.write(model, "keras", path=tmp_path / "ours.keras")
    assert all(np.array_equal(a, b) for a, b in zip(
        keras_layers.leaves(returned), keras_layers.leaves(rnnport.write(model, "keras")),
        strict=True))
    loaded = keras.saving.load_model(tmp_path / "ours.keras")
    got = keras.ops.convert_to_numpy(loaded(x))
    assert got.dtype == model.dtype
    _close(got, want)

    rnnport.write(model, "keras", path=tmp_path / "ours.weights.h5")
    twin = _keras_twin(model)
    twin.load_weights(tmp_path / "ours.weights.h5")
    _close(keras.ops.convert_to_numpy(twin(x)), want)

    _close(rnnport.read(tmp_path / "ours.keras").forward(x)[0], want)
    assert _files(tmp_path) == {"ours.keras", "ours.weights.h5"}


def test_equal_models_give_equal_archives(tmp_path: Path) -> None:
    model = MODELS["stack"]()
    rnnport.write(model, "keras", path=tmp_path / "a.keras")
    rnnport.write(model, "keras", path=tmp_path / "b.keras")
    assert (tmp_path / "a.keras").read_bytes() == (tmp_path / "b.keras").read_bytes()


# -- bad input -------------------------------------------------------------------------------


@pytest.fixture()
def archive(tmp_path: Path) -> Path:
    path = tmp_path / "good.keras"
    rnnport.write(RNN.random(Spec("lstm", INPUT, 4), seed=11), "keras", path=path)
    return path


def _rewrite(source: Path, target: Path, *, drop: str | None = None,
             config: Callable[[dict[str, Any]], None] | None = None,
             extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for info in original.infolist():
            if info.filename == drop:
                continue
            data = original.read(info.filename)
            if info.filename == "config.json" and config is not None:
                changed = json.loads(data)
                config(changed)
                data = json.dumps(changed).encode()
            copy.writestr(info.filename, data)
        for name, data in (extra or {}).items():
            copy.writestr(zipfile.ZipInfo(name), data)
    return target


@pytest.mark.parametrize("member", ["../evil", "/tmp/evil", "a/../../evil"])
def test_archive_member_escaping_the_folder_is_refused(tmp_path: Path, archive: Path,
                                                       member: str) -> None:
    path = _rewrite(archive, tmp_path / "evil.keras", extra={member: b"boom"})
    before = path.read_bytes()
    with pytest.raises(FormatError, match=rf"evil.keras: archive member {member!r} has a path "
                                          r"that leaves the archive's folder"):
        rnnport.read(path)
    assert path.read_bytes() == before
    assert not (tmp_path.parent / "evil").exists()
    assert _files(tmp_path) == {"good.keras", "evil.keras"}


def test_truncated_files_are_format_errors(tmp_path: Path, archive: Path) -> None:
    rnnport.write(RNN.random(Spec("gru", INPUT, 4), seed=12), "keras",
                  path=tmp_path / "good.weights.h5")
    for good, name in ((archive, "cut.keras"), (tmp_path / "good.weights.h5", "cut.h5")):
        data = good.read_bytes()
        path = tmp_path / name
        path.write_bytes(data[:len(data) // 2])
        with pytest.raises(FormatError, match=rf"{name}: not a readable (\.keras archive|HDF5 "
                                              r"file).*truncated"):
            rnnport.read(path)
        assert path.read_bytes() == data[:len(data) // 2]


def test_archive_without_weights_is_a_format_error(tmp_path: Path, archive: Path) -> None:
    path = _rewrite(archive, tmp_path / "bare.keras", drop="model.weights.h5")
    with pytest.raises(FormatError, match=r"bare.keras: the archive lacks model.weights.h5; "
                                          r"expected config.json and model.weights.h5"):
        rnnport.read(path)


def test_unknown_recurrent_layer_class_is_refused(tmp_path: Path, archive: Path) -> None:
    def rename(config: dict[str, Any]) -> None:
        config["config"]["layers"][1]["class_name"] = "MyLSTM"

    path = _rewrite(archive, tmp_path / "custom.keras", config=rename)
    with pytest.raises(UnsupportedFeatureError, match=r"layer 'lstm' \(MyLSTM\) is recurrent, "
                                                      r"but rnnport reads LSTM, GRU"):
        rnnport.read(path)


def test_weights_that_do_not_fit_the_config_are_shape_errors(tmp_path: Path,
                                                              archive: Path) -> None:
    def grow(config: dict[str, Any]) -> None:
        config["config"]["layers"][1]["config"]["units"] = 5

    path = _rewrite(archive, tmp_path / "grown.keras", config=grow)
    with pytest.raises(ShapeError, match=r"grown.keras, model.weights.h5, /layers/lstm, layer "
                                         r"'lstm' \(LSTM\), /layers/lstm/cell/vars/1: "
                                         r"recurrent_kernel \(4, 16\); expected \(5, 20\)"):
        rnnport.read(path)


def test_links_in_hdf5_files_are_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "linked.weights.h5"
    rnnport.write(RNN.random(Spec("lstm", INPUT, 4), seed=13), "keras", path=path)
    with h5py.File(path, "a") as h5:
        del h5["layers/lstm/cell/vars/0"]
        h5["layers/lstm/cell/vars/0"] = h5py.ExternalLink("/etc/hostname", "/data")
    with pytest.raises(FormatError, match=r"/layers/lstm/cell/vars/0 is an HDF5 ExternalLink"):
        rnnport.read(path)


def test_hdf5_files_that_are_not_keras_files(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as h5:
        h5["data"] = np.zeros(3)
    with pytest.raises(FormatError, match=r"an HDF5 file, but not a Keras one.*\['data'\]"):
        rnnport.read(path)


def test_writes_that_fail_leave_nothing_behind(tmp_path: Path) -> None:
    model = RNN.random(Spec("lstm", INPUT, 4), seed=14)
    with pytest.raises(FormatError, match="does not exist; create it first"):
        rnnport.write(model, "keras", path=tmp_path / "missing" / "m.keras")
    with pytest.raises(UnsupportedFeatureError, match=r"legacy HDF5 model files are not "
                                                      r"written; use a path ending in \.keras"):
        rnnport.write(model, "keras", path=tmp_path / "m.h5")
    projected = RNN.random(Spec("lstm", INPUT, 4, proj_size=2), seed=15)
    with pytest.raises(UnsupportedFeatureError, match="projection"):
        rnnport.write(projected, "keras", path=tmp_path / "p.keras")
    assert _files(tmp_path) == set()


def test_paths_are_told_by_suffix_only_when_the_file_exists(tmp_path: Path, archive: Path) -> None:
    assert keras_format.sniff(archive) and keras_format.sniff(str(archive))
    assert not keras_format.sniff(tmp_path / "missing.keras")
    assert not keras_format.sniff(tmp_path / "missing.h5")
    with pytest.raises(FormatError, match="does not exist"):
        rnnport.read(tmp_path / "missing.keras")
    with pytest.raises(FormatError, match="option layer= picks layers inside a Keras model file"):
        rnnport.read(rnnport.write(RNN.random(Spec("gru", 2, 3)), "keras"), fmt="keras",
                     layer="gru")


def test_an_option_no_layer_in_the_file_takes_is_refused(tmp_path: Path) -> None:
    model = rnnport.RNN.random(rnnport.Spec("lstm", 3, 4))
    rnnport.write(model, "keras", path=tmp_path / "m.keras")
    with pytest.raises(rnnport.FormatError, match="option activation= applies to SimpleRNN "
                                                  "layers, .* have none; drop the option"):
        rnnport.read(tmp_path / "m.keras", activation="relu")
    assert rnnport.read(tmp_path / "m.keras") == rnnport.read(rnnport.write(model, "keras"))
