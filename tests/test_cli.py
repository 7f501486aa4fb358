"""The command line: in-process through main(argv), and once through the console script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.cli import main
from rnnport.io import tensorbundle


def test_demo_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("yes, bit for bit") == 2
    assert "W_r (3×2)        kernel[:, 3:6]ᵀ" in out
    assert "all checks passed" in out


def test_demo_with_a_missing_reference_is_a_one_line_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["demo", "--reference", str(tmp_path / "absent.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rnnport demo:") and "absent.json" in err and "Traceback" not in err


def test_formats_lists_every_format(capsys: pytest.CaptureFixture[str]) -> None:
    import rnnport

    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if not line.startswith(" ")]
    assert names == rnnport.formats()
    assert "        write options: activation, cell, cell_clip, forget_bias, scope, structure" in out


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["no-such-command"]) == 2


def test_console_script_runs_the_demo() -> None:
    script = Path(sys.executable).parent / "rnnport"
    command = [str(script)] if script.exists() else [shutil.which("rnnport") or "rnnport"]
    result = subprocess.run([*command, "demo"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "all checks passed" in result.stdout


# -- inspect, convert, run ----------------------------------------------------------------


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True), seed=2)
    rnnport.write(model, "torch", path=tmp_path / "m.pt")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).uniform(-1, 1, (2, 5, 3))
            .astype(np.float32))
    return tmp_path / "m.pt"


def test_inspect_shows_the_network_and_both_counts_with_the_formula(
        capsys: pytest.CaptureFixture[str], model_file: Path) -> None:
    assert main(["inspect", str(model_file), "-q"]) == 0
    out = capsys.readouterr().out
    assert "m.pt: torch (" in out
    assert "2-layer bidirectional LSTM 3→4" in out
    assert "cell lstm, input 3, hidden 4, layers 2, directions 2, variant standard, dtype float32" \
        in out
    assert "layer 1: 2 × (4·4·(8+4) + 2·4·4) = 448" in out
    assert "parameters: canonical 736" in out and "as stored in torch: 736" in out


def test_inspect_a_tf1_checkpoint_lists_its_networks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    variables = {**rnnport.write(RNN.random(Spec("lstm", 4, 5)), "tf1", scope="encoder/rnn"),
                 **rnnport.write(RNN.random(Spec("gru", 5, 6)), "tf1", scope="decoder/rnn")}
    tensorbundle.write_bundle(tmp_path / "two.ckpt", variables)
    assert main(["inspect", str(tmp_path / "two.ckpt")]) == 1
    assert "pass scope= to pick one" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "two.ckpt"), "-O", "scope=decoder", "-q"]) == 0
    out = capsys.readouterr().out
    assert "2 networks (-O scope=… picks one):" in out
    assert "scope='encoder/rnn': single, 1 layer(s) of LSTMCell" in out
    assert "GRU 5→6 (reset after)" in out and "as stored in tf1: 222" in out


@pytest.mark.parametrize(("target", "extra"), [
    ("out.npz", []), ("out.onnx", []), ("out.safetensors", []), ("buf.npy", []),
    ("ckpt/model.ckpt", ["-O", "cell=CudnnCompatibleLSTMCell"]),
])
def test_convert_verify_reports_the_max_error(capsys: pytest.CaptureFixture[str],
                                              model_file: Path, target: str,
                                              extra: list[str]) -> None:
    (model_file.parent / "ckpt").mkdir()
    destination = model_file.parent / target
    assert main(["convert", str(model_file), str(destination), "--verify", "-q", *extra]) == 0
    out = capsys.readouterr().out
    assert f"wrote {destination} (" in out
    assert re.search(r"file read back: max \|Δ\| = \S+ ok", out)
    assert re.search(r"PyTorch nn.LSTM on the source weights: max \|Δ\| = \S+ ok", out)
    if target.endswith(".npy"):
        back = rnnport.read(np.load(destination), "cudnn", cell="lstm", input_size=3,
                            hidden_size=4, num_layers=2, bidirectional=True)
    else:
        back = rnnport.read(destination)
    assert back.spec == rnnport.read(model_file).spec


def test_convert_refuses_to_overwrite_and_never_writes_over_its_input(
        capsys: pytest.CaptureFixture[str], model_file: Path) -> None:
    before = model_file.read_bytes()
    assert main(["convert", str(model_file), str(model_file), "--force"]) == 1
    assert "is the input file; rnnport never writes over its input" in capsys.readouterr().err
    other = model_file.parent / "other.npz"
    other.write_bytes(b"keep me")
    assert main(["convert", str(model_file), str(other)]) == 1
    assert capsys.readouterr().err.strip().endswith(
        "other.npz: exists; pass --force to replace it. Nothing was written.")
    assert other.read_bytes() == b"keep me"
    assert main(["convert", str(model_file), str(other), "--force", "-q"]) == 0
    assert rnnport.read(other) == rnnport.read(model_file)
    assert model_file.read_bytes() == before


def test_convert_errors_are_one_line_and_leave_nothing_behind(
        capsys: pytest.CaptureFixture[str], model_file: Path) -> None:
    folder = model_file.parent
    before = sorted(p.name for p in folder.iterdir())
    cases = [
        (["convert", str(model_file), str(folder / "missing" / "m.npz")],
         "the folder", "does not exist"),
        (["convert", str(model_file), str(folder / "m.foo")],
         "cannot tell the output format from the name; pass --to FORMAT", ""),
        (["convert", str(model_file), str(folder / "o.npz"), "-O", "bogus=1"],
         "option(s) bogus apply to neither torch (reading) nor npz (writing)", ""),
        (["convert", str(folder / "absent.pt"), str(folder / "o.npz")], "absent.pt", "no such"),
        (["convert", str(model_file), str(folder / "o.keras"), "--to", "kears"],
         "unknown format 'kears'", "Did you mean 'keras'?"),
    ]
    for argv, first, second in cases:
        assert main([*argv, "-q"]) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("rnnport convert: ") and first in err and second in err, err
        assert err.count("\n") == 1 and "Traceback" not in err
    assert sorted(p.name for p in folder.iterdir()) == before


def test_debug_shows_the_traceback(model_file: Path) -> None:
    with pytest.raises(rnnport.FormatError):
        main(["convert", str(model_file), str(model_file.parent / "m.foo"), "--debug"])


def test_run_saves_outputs_and_states(capsys: pytest.CaptureFixture[str],
                                      model_file: Path) -> None:
    folder = model_file.parent
    np.save(folder / "lengths.npy", np.array([5, 2]))
    assert main(["run", str(model_file), "--input", str(folder / "x.npy"), "--lengths",
                 str(folder / "lengths.npy"), "--output", str(folder / "y.npz"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "y: shape (2, 5, 8), dtype float32" in out and "c_n: shape (4, 2, 4)" in out
    model = rnnport.read(model_file)
    y, (h, c) = model.forward(np.load(folder / "x.npy"), lengths=np.array([5, 2]))
    with np.load(folder / "y.npz") as saved:
        assert np.array_equal(saved["y"], y) and np.array_equal(saved["c_n"], c)
        assert np.array_equal(saved["h_n"], h)


def test_progress_goes_to_stderr_and_quiet_silences_it(
        capsys: pytest.CaptureFixture[str], model_file: Path) -> None:
    assert main(["inspect", str(model_file)]) == 0
    assert capsys.readouterr().err == f"reading {model_file} …\n"
    assert main(["inspect", str(model_file), "--quiet"]) == 0
    assert capsys.readouterr().err == ""


def test_missing_arguments_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["convert", "only-one"]) == 2
    assert "the following arguments are required: DST" in capsys.readouterr().err
    assert main(["run", "m.pt"]) == 2


def test_console_script_converts(model_file: Path) -> None:
    script = Path(sys.executable).parent / "rnnport"
    command = [str(script)] if script.exists() else [shutil.which("rnnport") or "rnnport"]
    result = subprocess.run([*command, "convert", str(model_file),
                             str(model_file.parent / "c.npz"), "--verify"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "npz file read back: max |Δ| = 0.0e+00 ok" in result.stdout
    assert result.stderr.startswith("reading ")


def test_explain_prints_plain_tables_when_not_a_terminal_and_writes_html(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "layout.html"
    assert main(["explain", "gru", "--from", "keras", "--to", "cudnn", "--html", str(page),
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    assert "gate blocks z r h → r z n (blocks 0 and 1 swap)" in out
    assert page.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert main(["explain", "lstm", "--from", "keras", "--to", "nope"]) == 1
    assert "unknown format 'nope'" in capsys.readouterr().err


def test_convert_verify_runs_a_keras_source_in_keras(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 4, num_layers=2, bidirectional=True), seed=5)
    rnnport.write(model, "keras", path=tmp_path / "m.keras")
    assert main(["convert", str(tmp_path / "m.keras"), str(tmp_path / "m.onnx"), "--verify",
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"onnx file read back: max \|Δ\| = \S+ ok", out)
    assert re.search(r"Keras 3 running the source file: max \|Δ\| = \S+ ok", out)


def test_explain_html_and_outputs_that_cannot_be_written(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, model_file: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("mine")
    assert main(["explain", "lstm", "--from", "keras", "--to", "cudnn", "--html", str(page)]) == 1
    assert page.read_text() == "mine" and "--force" in capsys.readouterr().err
    assert main(["explain", "lstm", "--from", "keras", "--to", "cudnn", "--html", str(page),
                 "--force", "-q"]) == 0
    assert page.read_text().startswith("<!DOCTYPE html") or "<html" in page.read_text()
    assert main(["explain", "gru", "--from", "keras", "--to", "cudnn", "-i", "100000"]) == 1
    assert "expected 1 to 64" in capsys.readouterr().err
    folder = tmp_path / "out.npz"
    folder.mkdir()
    assert main(["convert", str(model_file), str(folder), "--force"]) == 1
    assert "is a folder" in capsys.readouterr().err


@pytest.mark.parametrize("content", [b"\x93NUMPY\xff\xfe", b"not json", b"[]", b'{"gru": {}}'])
def test_demo_with_a_bad_reference_says_what_it_needs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes) -> None:
    reference = tmp_path / "reference.json"
    reference.write_bytes(content)
    assert main(["demo", "--reference", str(reference)]) == 1
    err = capsys.readouterr().err
    assert "reference.json" in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_a_legacy_h5_output_is_refused_before_reading(capsys: pytest.CaptureFixture[str],
                                                      model_file: Path, tmp_path: Path) -> None:
    assert main(["convert", str(model_file), str(tmp_path / "out.h5")]) == 1
    err = capsys.readouterr().err
    assert "a legacy Keras .h5 is read, not written" in err and "reading" not in err
    assert not (tmp_path / "out.h5").exists()


def test_options_in_python_spelling_and_broken_json_are_told_apart(
        capsys: pytest.CaptureFixture[str], model_file: Path) -> None:
    from rnnport.cli import _option

    assert _option("bidirectional=True") == ("bidirectional", True)
    assert _option("proj_size=None") == ("proj_size", None)
    assert _option("scope=rnn/fw") == ("scope", "rnn/fw")
    assert main(["inspect", str(model_file), "-O", "prefix=[1"]) == 2
    assert "looks like JSON but is not valid JSON" in capsys.readouterr().err


def test_unwritable_folders_and_archives_as_inputs_are_one_line_errors(
        capsys: pytest.CaptureFixture[str], model_file: Path, tmp_path: Path) -> None:
    assert main(["convert", str(model_file), "/proc/m.onnx"]) == 1  # even root cannot write
    err = capsys.readouterr().err
    assert "cannot create a file in /proc" in err and ".partial" not in err
    np.savez(tmp_path / "x.npz", x=np.zeros((1, 2, 3), np.float32))
    assert main(["run", str(model_file), "--input", str(tmp_path / "x.npz"), "--output",
                 str(tmp_path / "y.npz")]) == 1
    assert "expected one array saved with np.save" in capsys.readouterr().err
    with pytest.raises(rnnport.FormatError, match="param_count: expected an rnnport.RNN"):
        rnnport.param_count("x")  # type: ignore[arg-type]


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_convert_verify_reads_back_a_stack_of_different_layers(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str) -> None:
    from rnnport.model import stack

    model = stack([RNN.random(Spec("lstm", 3, 4), seed=1), RNN.random(Spec("gru", 4, 5), seed=2)])
    rnnport.write(model, "npz", path=tmp_path / "stack.npz")
    assert main(["convert", str(tmp_path / "stack.npz"), str(tmp_path / f"stack{suffix}"),
                 "--verify", "-q"]) == 0
    assert "read back: max |Δ| = 0.0e+00 ok" in capsys.readouterr().out
