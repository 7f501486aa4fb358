"""Every file a read opens goes through rnnport.io.inputs: it is a regular file, it stays
inside the folder of the file that named it, and no output of a conversion may replace it,
whatever the formats declare."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import rnnport
from rnnport.errors import FormatError
from rnnport.io import inputs

GOLDEN = Path(__file__).parent / "golden"
SAVED_MODEL = GOLDEN / "tf2" / "tf2_savedmodel_keras_bi_gru" / "saved_model"
CHECKPOINT = GOLDEN / "tf2" / "tf2_ckpt_bi_lstm"


def _contents(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes()
            for path in sorted(folder.rglob("*")) if path.is_file()}


@pytest.mark.parametrize(("target", "to"), [
    ("variables/variables", "tf1"),  # the SavedModel's own variables
    ("keras_metadata.pb", "torch"),  # its Keras metadata, opened beside saved_model.pb
])
def test_a_conversion_never_replaces_a_file_its_read_opened(tmp_path: Path, target: str,
                                                           to: str) -> None:
    folder = tmp_path / "saved_model"
    shutil.copytree(SAVED_MODEL, folder)
    before = _contents(folder)
    with pytest.raises(FormatError, match="rnnport never writes over its input"):
        rnnport.convert(folder / "saved_model.pb", to, path=folder / target, overwrite=True)
    assert _contents(folder) == before


def test_a_checkpoint_named_by_a_state_file_is_protected_too(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(CHECKPOINT, folder)
    (folder / "checkpoint").write_text('model_checkpoint_path: "elsewhere/ckpt"\n')
    before = _contents(folder)
    with pytest.raises(FormatError, match="rnnport never writes over its input"):
        rnnport.convert(folder, "tf1", path=folder / "ckpt", overwrite=True)
    assert _contents(folder) == before


def test_the_files_a_read_opened_are_recorded_by_their_real_paths(tmp_path: Path) -> None:
    rnnport.read(SAVED_MODEL)  # its saved_model.pb decoded once, then reused: recorded still
    with inputs.recording() as opened:
        rnnport.read(SAVED_MODEL)
    names = {path.relative_to(SAVED_MODEL.resolve()).as_posix() for path in opened}
    assert {"saved_model.pb", "variables/variables.index",
            "variables/variables.data-00000-of-00001"} <= names


def test_a_saved_model_read_before_is_still_protected_from_the_write(tmp_path: Path) -> None:
    folder = tmp_path / "saved_model"
    shutil.copytree(SAVED_MODEL, folder)
    rnnport.read(folder)
    before = _contents(folder)
    with pytest.raises(FormatError, match="rnnport never writes over its input"):
        rnnport.convert(folder, "onnx", path=folder / "saved_model.pb", overwrite=True)
    assert _contents(folder) == before


@pytest.mark.parametrize("linked", ["ckpt.index", "ckpt.data-00000-of-00001"])
def test_files_a_state_file_names_may_not_lead_out_of_its_folder(tmp_path: Path,
                                                                  linked: str) -> None:
    outside = tmp_path / "outside"
    shutil.copytree(CHECKPOINT, outside)
    folder = tmp_path / "run"
    shutil.copytree(CHECKPOINT, folder)
    (folder / linked).unlink()
    (folder / linked).symlink_to(outside / linked)
    with pytest.raises(FormatError, match=f"'{linked}' leads out of .*run"):
        rnnport.read(folder)
    # Named directly by the user, a link is the user's own choice.
    assert rnnport.read(folder / "ckpt") == rnnport.read(CHECKPOINT)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("name", ["model.pt", "model.onnx", "model.tflite", "ckpt.index"])
def test_a_fifo_named_like_a_model_is_named_as_a_fifo(tmp_path: Path, name: str) -> None:
    os.mkfifo(tmp_path / name)
    with pytest.raises(FormatError, match=r"is a FIFO \(named pipe\), not a file"):
        rnnport.read(tmp_path / name)


def test_a_sniff_looks_only_at_regular_files_and_never_blocks(tmp_path: Path) -> None:
    from rnnport.io.inputs import head

    (tmp_path / "file").write_bytes(b"7767517\n1 1\n")
    os.mkfifo(tmp_path / "fifo")  # no writer: opening it to read would block
    assert head(tmp_path / "file", 7) == b"7767517"
    assert head(tmp_path / "fifo", 7) is None
    assert head(tmp_path, 7) is None
    assert head(tmp_path / "absent", 7) is None
