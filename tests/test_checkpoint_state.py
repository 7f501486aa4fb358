"""The ``checkpoint`` state file beside the checkpoints rnnport writes: the text TensorFlow
writes, updated as TensorFlow updates it, refused when unreadable, preferred when a folder
is read. (TensorFlow itself reads it in ``test_tf1_live.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError
from rnnport.formats import output_files
from rnnport.io import checkpoint_state
from rnnport.io.checkpoint_state import CheckpointState, format_state, parse_state, updated

MODEL = RNN.random(Spec("gru", 3, 4), seed=1)
OTHER = RNN.random(Spec("gru", 3, 4), seed=2)


def _state(folder: Path) -> str:
    return (folder / "checkpoint").read_text()


def test_writing_a_checkpoint_names_it_in_tensorflows_text(tmp_path: Path) -> None:
    rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    assert _state(tmp_path) == ('model_checkpoint_path: "model.ckpt"\n'
                                'all_model_checkpoint_paths: "model.ckpt"\n')
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "checkpoint", "model.ckpt.data-00000-of-00001", "model.ckpt.index"]


def test_the_newest_comes_last_others_stay_and_none_twice(tmp_path: Path) -> None:
    rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt-1")
    rnnport.write(OTHER, "tf1", path=tmp_path / "model.ckpt-2.index")  # the index names the prefix
    assert _state(tmp_path) == ('model_checkpoint_path: "model.ckpt-2"\n'
                                'all_model_checkpoint_paths: "model.ckpt-1"\n'
                                'all_model_checkpoint_paths: "model.ckpt-2"\n')
    rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt-1", overwrite=True)
    assert _state(tmp_path) == ('model_checkpoint_path: "model.ckpt-1"\n'
                                'all_model_checkpoint_paths: "model.ckpt-2"\n'
                                'all_model_checkpoint_paths: "model.ckpt-1"\n')


def test_a_folder_reads_the_checkpoint_the_state_names(tmp_path: Path) -> None:
    rnnport.write(MODEL, "tf1", path=tmp_path / "b.ckpt")
    rnnport.write(OTHER, "tf1", path=tmp_path / "a.ckpt")  # newest, though first by name
    assert rnnport.read(tmp_path) == rnnport.read(tmp_path / "a.ckpt")
    rnnport.write(MODEL, "tf1", path=tmp_path / "b.ckpt", overwrite=True)
    assert rnnport.read(tmp_path) == rnnport.read(tmp_path / "b.ckpt")


def test_entries_tensorflow_wrote_are_kept_with_their_timestamps(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").write_text(
        f'model_checkpoint_path: "{tmp_path}/ckpt-2"\n'
        f'all_model_checkpoint_paths: "{tmp_path}/ckpt-1"\n'
        f'all_model_checkpoint_paths: "{tmp_path}/ckpt-2"\n'
        "all_model_checkpoint_timestamps: 1717000000.5\n"
        "all_model_checkpoint_timestamps: 1717000100.25\n"
        "last_preserved_timestamp: 1716999999.0\n")
    rnnport.write(MODEL, "tf1", path=tmp_path / "converted")
    state = parse_state((tmp_path / "checkpoint").read_bytes())
    assert state.model_checkpoint_path == "converted"
    assert state.all_model_checkpoint_paths == (f"{tmp_path}/ckpt-1", f"{tmp_path}/ckpt-2",
                                                "converted")
    assert state.all_model_checkpoint_timestamps[:2] == (1717000000.5, 1717000100.25)
    assert state.all_model_checkpoint_timestamps[2] > 1717000100.25  # now
    assert state.last_preserved_timestamp == 1716999999.0
    rnnport.write(MODEL, "tf1", path=tmp_path / "ckpt-1")  # an absolute entry names it: moved
    state = parse_state((tmp_path / "checkpoint").read_bytes())
    assert state.all_model_checkpoint_paths == (f"{tmp_path}/ckpt-2", "converted", "ckpt-1")
    assert len(state.all_model_checkpoint_timestamps) == 3


def test_an_old_newest_missing_from_the_list_is_listed_before_the_new_one() -> None:
    before = CheckpointState("old.ckpt", all_model_checkpoint_timestamps=(5.0,))
    after = updated(before, Path("folder/new.ckpt"), now=9.0)
    assert after == CheckpointState("new.ckpt", ("old.ckpt", "new.ckpt"))  # stamps dropped


def test_strings_are_escaped_as_protobuf_writes_them_and_read_back() -> None:
    name = 'wé"ird\\na\tme\n'
    text = format_state(CheckpointState(name, (name,), (1.5,), 0.25))
    assert text.splitlines()[0] == r'model_checkpoint_path: "w\303\251\"ird\\na\tme\n"'
    assert parse_state(text.encode()) == CheckpointState(name, (name,), (1.5,), 0.25)


def test_the_text_formats_other_spellings_are_read() -> None:
    text = ("# written by hand\nall_model_checkpoint_paths: 'a' \"b\", "
            "model_checkpoint_path: \"first\"; model_checkpoint_path:\"ab\"\n"
            "all_model_checkpoint_timestamps: 1e3 all_model_checkpoint_timestamps: -inf\n"
            "last_preserved_timestamp: 2.5f\n")
    assert parse_state(text.encode()) == CheckpointState("ab", ("ab",), (1000.0, -np.inf), 2.5)


def test_a_state_file_that_cannot_be_read_stops_the_write(tmp_path: Path) -> None:
    text = 'model_checkpoint_path: "a"\nbest: "b"\n'
    (tmp_path / "checkpoint").write_text(text)
    with pytest.raises(FormatError) as caught:
        rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    assert str(caught.value) == (
        f"{tmp_path / 'checkpoint'}, line 2: unknown field 'best'; expected TensorFlow's "
        "checkpoint state, the fields model_checkpoint_path, all_model_checkpoint_paths, "
        "all_model_checkpoint_timestamps, last_preserved_timestamp one a line "
        '(model_checkpoint_path: "model.ckpt"). rnnport names each checkpoint it writes there, '
        "as TensorFlow's savers do, and does not overwrite a state file it cannot read; fix or "
        "remove it. Nothing was written.")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]
    assert (tmp_path / "checkpoint").read_text() == text


@pytest.mark.parametrize(("text", "problem"), [
    ("model_checkpoint_path model.ckpt\n", "line 1: expected ':' after model_checkpoint_path;"),
    ("model_checkpoint_path: model.ckpt\n", "line 1: model_checkpoint_path takes a quoted string;"),
    ('\nlast_preserved_timestamp: "soon"\n', "line 2: last_preserved_timestamp takes a number;"),
    ('model_checkpoint_path: "a\\qb"\n', 'line 1: unknown escape \\q in "a\\qb";'),
    ('model_checkpoint_path: "\\377"\n', "line 1: model_checkpoint_path's escaped bytes are not "
                                          "UTF-8;"),
    ('model_checkpoint_path: "open\n', "line 1: cannot read '\"open';"),
    (': "x"\n', "line 1: ':' where a field name should be;"),
])
def test_what_cannot_be_read_is_named_with_its_line(tmp_path: Path, text: str,
                                                    problem: str) -> None:
    (tmp_path / "checkpoint").write_text(text)
    with pytest.raises(FormatError) as caught:
        rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    assert problem in str(caught.value)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]


def test_reading_a_folder_with_an_unreadable_state_says_to_pass_the_prefix(tmp_path: Path) -> None:
    rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    (tmp_path / "checkpoint").write_text("garbage\n")
    with pytest.raises(FormatError, match=r"line 1: unknown field 'garbage'; .* Pass a checkpoint "
                                          r"prefix instead of the folder \("):
        rnnport.read(tmp_path)
    assert rnnport.read(tmp_path / "model.ckpt", "tf1") is not None


def test_a_folder_named_checkpoint_stops_the_write(tmp_path: Path) -> None:
    (tmp_path / "checkpoint").mkdir()
    with pytest.raises(FormatError, match="checkpoint: is a folder, not a file.*Expected "
                                          "TensorFlow's checkpoint state"):
        rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]


def test_a_missing_folder_is_not_created_and_the_error_says_how(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FormatError) as caught:
        rnnport.write(MODEL, "tf1", path="ckpt/model.ckpt")
    assert str(caught.value) == (
        "ckpt/model.ckpt.index: the folder ckpt does not exist; create it first "
        "(mkdir -p ckpt) or choose another output path. Nothing was written.")
    assert not list(tmp_path.iterdir())


def test_the_state_file_is_no_output_so_an_existing_one_never_stops_a_convert(
        tmp_path: Path) -> None:
    assert [p.name for p in output_files("tf1", tmp_path / "m.ckpt")] == [
        "m.ckpt.index", "m.ckpt.data-00000-of-00001"]
    rnnport.write(MODEL, "tf1", path=tmp_path / "first.ckpt")
    rnnport.convert(tmp_path, "tf1", path=tmp_path / "second.ckpt")  # reads first, via the state
    assert checkpoint_state.read_state(tmp_path, "") == CheckpointState(
        "second.ckpt", ("first.ckpt", "second.ckpt"))
    assert rnnport.read(tmp_path) == rnnport.read(tmp_path / "first.ckpt")


def test_the_state_is_replaced_atomically_with_the_usual_file_mode(tmp_path: Path) -> None:
    rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    mode = (tmp_path / "model.ckpt.index").stat().st_mode
    assert (tmp_path / "checkpoint").stat().st_mode == mode
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".partial")]


@pytest.mark.parametrize("length", [250, 300, 5000])
@pytest.mark.parametrize("fmt", [None, "tf1", "tf2"])
def test_a_state_file_naming_a_name_no_file_can_have_is_a_format_error(
        tmp_path: Path, fmt: str | None, length: int) -> None:
    """250 characters fit a file's name, not with the shards' suffix; 300 fit none; 5,000
    fit no path: looked up, each was an OSError (ENAMETOOLONG)."""
    rnnport.write(MODEL, "tf1", path=tmp_path / "model.ckpt")
    name = "m" * length
    (tmp_path / "checkpoint").write_text(f'model_checkpoint_path: "{name}"\n'
                                         f'all_model_checkpoint_paths: "{name}"\n')
    with pytest.raises(FormatError, match=rf"checkpoint, model_checkpoint_path: names the file "
                                          rf"'m{{40}}'…'m{{20}}', a name of {length + 20:,} bytes "
                                          r"with the '\.data-00000-of-00001' the reader adds; "
                                          r"expected at most 255 \(because no file system holds "
                                          r"longer names\)"):
        rnnport.read(tmp_path, fmt)


@pytest.mark.parametrize("fmt", [None, "tf1", "tf2"])
def test_a_prefix_too_long_for_its_index_is_a_format_error(tmp_path: Path,
                                                           fmt: str | None) -> None:
    """A prefix a file may have, whose index (PREFIX.index) no file can have."""
    prefix = tmp_path / ("p" * 252)
    message = (r"p\.index \([0-9,]+ characters\) cannot be looked up; the system says: File name "
               r"too long\. Check the path\." if fmt else
               r"does not exist \(no such file, folder or checkpoint prefix\)")  # sniffed: no
    with pytest.raises(FormatError, match=message):
        rnnport.read(prefix, fmt)
