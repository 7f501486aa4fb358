"""Keras files whose layer list makes one stored weight group count as many layers, and
networks whose parameters take more than the ``expansion`` limit allows for the file."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError, LimitError
from rnnport.formats.keras import files as keras_files

FILES = Path(__file__).parent / "golden" / "files"


def _edit_config(source: Path, target: Path, edit: Any) -> Path:
    """``source`` (a .keras archive) with its config.json changed by ``edit``."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for info in original.infolist():
            data = original.read(info.filename)
            if info.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config).encode()
            copy.writestr(info.filename, data)
    return target


def _repeat_layer(times: int) -> Any:
    def edit(config: dict[str, Any]) -> None:
        layers = config["config"]["layers"]
        layers[1:] = [layers[1]] * times
    return edit


def test_a_keras_config_repeating_one_layer_is_refused(tmp_path: Path) -> None:
    rnnport.write(RNN.random(Spec("lstm", 4, 4), seed=1), "keras", path=tmp_path / "one.keras")
    path = _edit_config(tmp_path / "one.keras", tmp_path / "many.keras", _repeat_layer(300))
    message = (r"many.keras, model.weights.h5, /layers/lstm: two layers named 'lstm' \(LSTM\) "
               r"both read the stored weights /layers/lstm/cell/vars/0 \(group /layers/lstm\); "
               r"expected each layer to read weights of its own")
    with pytest.raises(FormatError, match=message):
        rnnport.read(path)
    with pytest.raises(FormatError, match="both read the stored weights"):
        keras_files.stacks(path)


def test_a_legacy_config_repeating_one_layer_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "many.h5"
    shutil.copy(FILES / "legacy_stack.h5", path)
    with h5py.File(path, "a") as h5:
        config = json.loads(h5.attrs["model_config"])
        layers = config["config"]["layers"]
        layers[1:2] = [layers[1]] * 300
        h5.attrs["model_config"] = json.dumps(config)
    with pytest.raises(FormatError, match=r"two layers named 'lstm' \(LSTM\) both read the "
                                          r"stored weights /model_weights/lstm/"):
        rnnport.read(path)


def test_legacy_layer_names_repeating_one_group_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "many_weights.h5"
    shutil.copy(FILES / "legacy_stack_weights.h5", path)
    with h5py.File(path, "a") as h5:
        h5.attrs["layer_names"] = np.array([b"lstm"] * 300)
    with pytest.raises(FormatError, match=r"two layers named 'lstm' both read the stored "
                                          r"weights /lstm/"):
        rnnport.read(path)


def test_a_layer_whose_group_lies_inside_anothers_is_refused(tmp_path: Path) -> None:
    """Legacy layers are found by name, and a name with a slash reaches into another
    layer's group: ``lstm/lstm`` reads what ``lstm`` reads, under other names."""
    path = tmp_path / "nested.h5"
    shutil.copy(FILES / "legacy_stack.h5", path)
    with h5py.File(path, "a") as h5:
        config = json.loads(h5.attrs["model_config"])
        layers = config["config"]["layers"]
        twin = json.loads(json.dumps(layers[1]))
        twin["config"]["name"] = "lstm/lstm"
        layers.insert(2, twin)
        h5.attrs["model_config"] = json.dumps(config)
        group = h5["model_weights"]
        group.attrs["layer_names"] = np.array([b"lstm", b"lstm/lstm", b"dropout",
                                               b"bidirectional", b"dense"])
        kept = [name.decode() if isinstance(name, bytes) else name
                for name in group["lstm"].attrs["weight_names"]]
        group["lstm/lstm"].attrs["weight_names"] = np.array(
            [name.split("/", 1)[1].encode() for name in kept])
    with pytest.raises(FormatError, match=r"layers 'lstm' \(LSTM\) and 'lstm/lstm' \(LSTM\) "
                                          r"both read the stored weights"):
        rnnport.read(path)


def test_a_network_reads_within_the_expansion_limit_and_not_past_it(tmp_path: Path) -> None:
    model = rnnport.stack([RNN.random(Spec("lstm", 3, 5), seed=3),
                           RNN.random(Spec("gru", 5, 4, bidirectional=True), seed=4),
                           RNN.random(Spec("lstm", 8, 2), seed=5)])
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5, 3)).astype(np.float32)
    for suffix in (".keras", ".weights.h5"):
        path = tmp_path / f"m{suffix}"
        rnnport.write(model, "keras", path=path)
        options = {"layer": keras_files.layer_names(model.specs)} if suffix == ".weights.h5" \
            else {}
        np.testing.assert_allclose(rnnport.read(path, **options).forward(x)[0],
                                   model.forward(x)[0], atol=1e-6)
        with rnnport.limits(expansion=1e-4), pytest.raises(LimitError) as error:
            rnnport.read(path, **options)
        assert error.value.limit == "expansion"
        # A .keras file's config.json is parsed first, and its values count too.
        assert ("config.json: its JSON builds more than" if suffix == ".keras" else
                "the network read (3 layer(s)) has") in str(error.value)
        assert "rnnport.limits(expansion=" in str(error.value)
    for stem in ("legacy_stack", "legacy_stack_weights"):
        assert rnnport.read(FILES / f"{stem}.h5").layers()
