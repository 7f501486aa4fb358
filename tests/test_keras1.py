"""Keras 1 HDF5 files (tests/golden/keras1, made by tools/golden_keras1.py in Keras 1.2's
layout; the references are tf_keras's outputs after its own legacy converter of Keras 1
weights; tests/golden/keras1_real, written and run by Keras 1.2.2 itself with Theano, made by
tools/golden_keras1_real.py): read by content, the gates' arrays found by name, damaged files
refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import rnnport
from rnnport import formats
from rnnport.errors import FormatError, ShapeError, UnsupportedFeatureError

GOLDEN = Path(__file__).parent / "golden" / "keras1"
REAL = Path(__file__).parent / "golden" / "keras1_real"
CASES = sorted(json.loads((GOLDEN / "MANIFEST.json").read_text())["cases"])
REAL_CASES = sorted(json.loads((REAL / "MANIFEST.json").read_text())["cases"])


def _golden(name: str, folder: Path = GOLDEN) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    data = np.load(folder / f"{name}.npz", allow_pickle=False)
    return data["x"], data["y"], json.loads(str(data["meta"]))


def _copy(name: str, tmp_path: Path) -> Path:
    target = tmp_path / f"{name}.h5"
    shutil.copyfile(GOLDEN / f"{name}.h5", target)
    return target


def test_the_golden_cases_cover_the_issue() -> None:
    assert set(CASES) == {"lstm", "gru", "simplernn", "bidirectional_lstm", "gpu_stack",
                          "weights_bidirectional_gru"}


@pytest.mark.parametrize(("folder", "name"), [(GOLDEN, name) for name in CASES] +
                         [(REAL, name) for name in REAL_CASES])
def test_a_keras1_file_reads_as_keras_ran_it(folder: Path, name: str) -> None:
    x, want, meta = _golden(name, folder)
    source = folder / f"{name}.h5"
    assert rnnport.formats.sniff(source) == "keras"
    model = rnnport.read(source)
    assert len(model.layers()) == len(meta["layers"])
    np.testing.assert_allclose(model.forward(x)[0], want, rtol=0, atol=meta["tolerance"])
    notes = formats.get("keras").notes(source)
    told = "told by its weight names" if meta["keras_version"] is None else \
        f"keras_version {meta['keras_version']} on the file's root"
    for layer in meta["layers"]:
        assert any(note.startswith(f"layer '{layer}'") and f"a Keras 1 layer ({told}" in note
                   for note in notes), notes
    for other in meta["others"]:
        if not other.startswith("input"):
            assert any(note.startswith(f"layer '{other}'") and "not read" in note
                       for note in notes), notes
    if meta["weights_only"]:
        assert any("hard_sigmoid gates assumed" in note for note in notes), notes


@pytest.mark.parametrize("name", ["lstm", "bidirectional_lstm", "gpu_stack"])
def test_a_keras1_file_round_trips_bit_exactly(name: str) -> None:
    model = rnnport.read(GOLDEN / f"{name}.h5")
    keras = formats.get("keras")
    arrays = rnnport.write(model, "keras")
    again = rnnport.read(arrays, "keras", **keras.read_options_for(model.layers()[0].spec))
    for first, second in zip(model.layers(), again.layers(), strict=True):
        assert first.spec == second.spec
        for ours, theirs in zip(first.params[0], second.params[0], strict=True):
            assert ours.keys() == theirs.keys()
            for key in ours:
                assert np.array_equal(ours[key], theirs[key]), key


def test_an_lstm_is_written_as_keras_2_fuses_keras_1s_gates() -> None:
    arrays = rnnport.write(rnnport.read(GOLDEN / "lstm.h5"), "keras")
    with h5py.File(GOLDEN / "lstm.h5", "r") as h5:
        group = h5["model_weights/lstm_1"]
        for written, kind in zip(arrays, "WUb", strict=True):
            stored = [group[f"lstm_1_{kind}_{gate}:0"][()] for gate in "ifco"]
            assert np.array_equal(written, np.concatenate(stored, axis=-1)), kind


def _rewrite(path: Path, group: str, edit: Any) -> None:
    """Apply ``edit(group, weight_names)`` to one layer group, and store its weight_names."""
    with h5py.File(path, "r+") as h5:
        node = h5[group]
        names = [name.decode() if isinstance(name, bytes) else str(name)
                 for name in node.attrs["weight_names"]]
        names = edit(node, names)
        node.attrs["weight_names"] = [name.encode() for name in names]


def test_the_gates_are_found_by_name_not_by_position(tmp_path: Path) -> None:
    x, want, _ = _golden("lstm")
    moved = _copy("lstm", tmp_path)
    _rewrite(moved, "model_weights/lstm_1", lambda node, names: names[::-1])
    np.testing.assert_allclose(rnnport.read(moved).forward(x)[0], want, rtol=0, atol=1e-5)

    def swap(node: Any, names: list[str]) -> list[str]:  # the c and f gates' inputs traded
        node.move("lstm_1_W_c:0", "spare")
        node.move("lstm_1_W_f:0", "lstm_1_W_c:0")
        node.move("spare", "lstm_1_W_f:0")
        return names

    (tmp_path / "swapped").mkdir()
    swapped = _copy("lstm", tmp_path / "swapped")
    _rewrite(swapped, "model_weights/lstm_1", swap)
    assert np.abs(rnnport.read(swapped).forward(x)[0] - want).max() > 1e-3


def test_a_missing_gate_array_is_refused_by_name(tmp_path: Path) -> None:
    path = _copy("gru", tmp_path)

    def drop(node: Any, names: list[str]) -> list[str]:
        del node["gru_1_b_h"]
        return [name for name in names if name != "gru_1_b_h"]

    _rewrite(path, "model_weights/gru_1", drop)
    with pytest.raises(FormatError, match=r"gru_1: weights U_h, U_r, U_z, W_h, W_r, W_z, b_r, "
                       r"b_z; expected a Keras 1 LSTM's W, U, b for gates i, c, f, o"):
        rnnport.read(path)


def test_a_gate_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    path = _copy("bidirectional_lstm", tmp_path)

    def shrink(node: Any, names: list[str]) -> list[str]:
        del node["backward_lstm_1_U_f"]
        node.create_dataset("backward_lstm_1_U_f", data=np.ones((8, 7), np.float32))
        return names

    _rewrite(path, "model_weights/bidirectional_1", shrink)
    with pytest.raises(ShapeError, match=r"backward_lstm_1_U_f \(8, 7\); expected \(8, 8\)"):
        rnnport.read(path)


def test_an_unknown_consume_less_is_refused(tmp_path: Path) -> None:
    path = _copy("gpu_stack", tmp_path)
    with h5py.File(path, "r+") as h5:
        config = json.loads(h5.attrs["model_config"])
        config["config"][1]["config"]["consume_less"] = "tpu"
        h5.attrs["model_config"] = json.dumps(config).encode()
    with pytest.raises(UnsupportedFeatureError, match=r"consume_less='tpu'; expected one of "
                       "'cpu', 'mem', 'gpu'"):
        rnnport.read(path)


def test_a_keras1_file_whose_weights_are_not_named_so_is_refused(tmp_path: Path) -> None:
    path = _copy("lstm", tmp_path)

    def rename(node: Any, names: list[str]) -> list[str]:
        for index, name in enumerate(names):
            node.move(name, f"param_{index}")
        return [f"param_{index}" for index in range(len(names))]

    _rewrite(path, "model_weights/lstm_1", rename)
    with pytest.raises(FormatError, match="expected Keras 1's names <layer>_W_i"):
        rnnport.read(path)


def test_the_hard_sigmoid_default_is_keras_1s_and_can_be_overridden() -> None:
    x, want, _ = _golden("weights_bidirectional_gru")
    source = GOLDEN / "weights_bidirectional_gru.h5"
    spec = rnnport.read(source).layers()[0].spec
    assert spec.activations[0] == ("HardSigmoid", 0.2, 0.5)
    sigmoid = rnnport.read(source, recurrent_activation="sigmoid")
    assert np.abs(sigmoid.forward(x)[0] - want).max() > 1e-3


def test_the_real_keras_1_files_cover_its_layouts() -> None:
    assert set(REAL_CASES) == {"lstm", "gru_gpu_lstm_mem", "bidirectional",
                               "weights_simplernn_lstm_gpu"}
    names = {name: _golden(name, REAL)[2]["weight_names"] for name in REAL_CASES}
    assert names["lstm"]["lstm_1"] == [f"lstm_1_{kind}_{gate}" for gate in "icfo"
                                       for kind in "WUb"]
    assert names["gru_gpu_lstm_mem"]["gru_1"] == ["gru_1_W", "gru_1_U", "gru_1_b"]
    assert [name.split("_")[0] for name in names["bidirectional"]["bidirectional_1"]] == \
        ["forward"] * 9 + ["backward"] * 9


def _configs(path: Path) -> tuple[set[str], dict[str, list[set[str]]]]:
    """A file's root attributes, and the keys of its recurrent layers' configs by class."""
    with h5py.File(path, "r") as h5:
        attributes = set(h5.attrs)
        config = json.loads(h5.attrs["model_config"])
    entries = config["config"] if config["class_name"] == "Sequential" else \
        config["config"]["layers"]
    found: dict[str, list[set[str]]] = {}
    for entry in entries:
        inner = entry["config"].get("layer", entry)
        if inner["class_name"] in ("LSTM", "GRU", "SimpleRNN"):
            keys = set(inner["config"]) - {"batch_input_shape", "input_dtype"}
            found.setdefault(inner["class_name"], []).append(keys)
    return attributes, found


def test_the_hand_written_files_have_keras_1_2_2s_layout() -> None:
    """Root attributes and config keys as Keras 1.2.2 wrote them (no ``backend``: Keras 1
    never wrote one; ``input_dim`` and ``input_length`` in every recurrent config)."""
    real_attributes: set[str] = set()
    real_keys: dict[str, set[str]] = {}
    for name in REAL_CASES:
        if not _golden(name, REAL)[2]["weights_only"]:
            attributes, found = _configs(REAL / f"{name}.h5")
            real_attributes |= attributes
            for cls, keys in found.items():
                real_keys[cls] = keys[0]
    assert real_attributes == {"keras_version", "model_config", "training_config"}
    for name in CASES:
        if _golden(name)[2]["weights_only"]:
            continue
        attributes, found = _configs(GOLDEN / f"{name}.h5")
        assert attributes == {"keras_version", "model_config"}, name
        for cls, key_sets in found.items():
            for keys in key_sets:
                assert keys == real_keys.get(cls, keys), (name, keys ^ real_keys[cls])


def test_tensorflows_unique_variable_names_are_read(tmp_path: Path) -> None:
    """TensorFlow suffixes a variable's name made twice in one graph (``lstm_1_W_i_1:0``,
    when a model is built again in one session before it is saved); Keras 1 saves that name."""
    x, want, _ = _golden("lstm")
    path = _copy("lstm", tmp_path)

    def suffix(node: Any, names: list[str]) -> list[str]:
        renamed = [name.replace(":0", "_1:0") for name in names]
        for old, new in zip(names, renamed, strict=True):
            node.move(old, new)
        return renamed

    _rewrite(path, "model_weights/lstm_1", suffix)
    np.testing.assert_allclose(rnnport.read(path).forward(x)[0], want, rtol=0, atol=1e-5)
