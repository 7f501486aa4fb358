"""The TensorFlow 2 golden files of ``tools/golden_tf2.py`` are all there and hang together.

This checks what the generator wrote, apart from any reader (tests/test_tf2.py and
tests/test_tfgraph.py read the files): every case of ``tests/golden/tf2/MANIFEST.json`` has its files and an
``.npz`` whose ``x`` and ``y`` agree on batch and time, made with distinct weights, and the
folder stays small. TensorFlow is not imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

TF2 = Path(__file__).parent / "golden" / "tf2"
KINDS = {"tf2_checkpoint", "savedmodel", "frozen_graph"}
MAX_BYTES = 2_000_000


def _manifest() -> dict[str, Any]:
    return json.loads((TF2 / "MANIFEST.json").read_text())


def _cases() -> list[dict[str, Any]]:
    return list(_manifest()["cases"])


def _load(case: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    with np.load(TF2 / case["npz"], allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    return json.loads(str(arrays.pop("meta"))), arrays


def test_manifest_names_the_versions_and_every_kind() -> None:
    manifest = _manifest()
    assert manifest["generator"] == "tools/golden_tf2.py"
    assert manifest["versions"]["tensorflow"].startswith("2.")
    assert manifest["versions"]["tf_keras"].startswith("2.")
    assert {case["kind"] for case in manifest["cases"]} == KINDS
    names = [case["name"] for case in manifest["cases"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case["name"])
def test_case_files_exist(case: dict[str, Any]) -> None:
    assert case["kind"] in KINDS
    assert case["files"], f"{case['name']}: no files listed"
    for name in [case["npz"], *case["files"]]:
        assert (TF2 / name).is_file(), f"{name}: listed in MANIFEST.json, missing"
    source = TF2 / case["source"]
    if case["kind"] == "tf2_checkpoint":
        assert Path(f"{source}.index").is_file()
        assert list(source.parent.glob(f"{source.name}.data-*-of-*"))
    elif case["kind"] == "savedmodel":
        assert (source / "saved_model.pb").is_file()
        assert (source / "variables" / "variables.index").is_file()
    else:
        assert source.suffix == ".pb" and source.is_file()


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case["name"])
def test_npz_has_x_and_y_of_consistent_shapes(case: dict[str, Any]) -> None:
    meta, arrays = _load(case)
    assert meta["case"] == case["name"] and meta["kind"] == case["kind"]
    x, y = arrays["x"], arrays["y"]
    assert x.dtype == y.dtype == np.float32
    assert x.ndim == 3 and y.ndim in (2, 3)
    time_axis, batch_axis = (0, 1) if meta["time_major"] else (1, 0)
    if y.ndim == 3:
        assert y.shape[time_axis] == x.shape[time_axis], (x.shape, y.shape)
        assert y.shape[batch_axis] == x.shape[batch_axis], (x.shape, y.shape)
    else:  # the last step only (a Dense head after return_sequences=False)
        assert not meta["time_major"] and y.shape[0] == x.shape[0], (x.shape, y.shape)
    assert np.all(np.isfinite(y)) and np.any(y != 0)
    batch = x.shape[batch_axis]
    for key, value in arrays.items():
        if key.startswith(("h_n", "c_n")):
            assert batch in value.shape[-2:], f"{key}: {value.shape} for batch {batch}"


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case["name"])
def test_npz_describes_where_to_look(case: dict[str, Any]) -> None:
    meta, arrays = _load(case)
    assert meta["files"] == case["files"]
    if case["kind"] == "frozen_graph":
        assert meta["input_nodes"]["x"] == "input"
        assert set(meta["output_nodes"]) <= set(arrays), meta["output_nodes"]
        assert meta["constants"], "no weight constants recorded"
    else:
        assert "_CHECKPOINTABLE_OBJECT_GRAPH" in meta["variables"]
        assert set(meta["outputs"]) <= set(arrays)
        for layer in meta["layers"]:
            assert set(layer["checkpoint_keys"]) <= set(meta["variables"])
            for k, key in enumerate(layer["checkpoint_keys"]):
                assert arrays[f"weights/{layer['name']}/{k}"].shape == \
                    tuple(meta["variables"][key]), key


@pytest.mark.parametrize("case", _cases(), ids=lambda case: case["name"])
def test_weights_are_distinct(case: dict[str, Any]) -> None:
    """Random distinct weights: a swapped gate or a transposed kernel cannot pass unseen."""
    _, arrays = _load(case)
    weights = [v.ravel() for k, v in arrays.items() if k.startswith(("weights/", "cudnn_params"))]
    if not weights:
        return  # frozen TF1 cells: the weights are only in the graph
    values = np.concatenate(weights)
    assert np.unique(values).size == values.size
    assert not np.any(values == 0)


def test_every_file_is_listed_and_the_folder_is_small() -> None:
    listed = {"MANIFEST.json"}
    for case in _cases():
        listed.update([case["npz"], *case["files"]])
    present = {str(p.relative_to(TF2)) for p in TF2.rglob("*") if p.is_file()}
    assert present == listed
    assert sum((TF2 / name).stat().st_size for name in present) < MAX_BYTES
