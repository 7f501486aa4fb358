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
    assert "parameters, canonical (both biases b_ih and b_hh, as rnnport's model keeps them): 736" in out
    assert "parameters as stored in torch: 736, the same" in out


def test_inspect_a_tf1_checkpoint_lists_its_networks(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    variables = {**rnnport.write(RNN.random(Spec("lstm", 4, 5)), "tf1", scope="encoder/rnn"),
                 **rnnport.write(RNN.random(Spec("gru", 5, 6)), "tf1", scope="decoder/rnn")}
    tensorbundle.write_bundle(tmp_path / "two.ckpt", variables)
    assert main(["inspect", str(tmp_path / "two.ckpt"), "-q"]) == 0  # every network, in full
    out = capsys.readouterr().out
    assert "2 networks (-O scope=… picks one):" in out
    assert "--scope encoder/rnn: single, 1 layer(s) of LSTMCell" in out
    assert "\n== --scope encoder/rnn\nLSTM 4→5" in out and "\n== --scope decoder/rnn\nGRU 5→6" in out
    assert out.count("parameters as stored in tf1") == 2
    assert main(["inspect", str(tmp_path / "two.ckpt"), "--scope", "decoder", "-q"]) == 0
    out = capsys.readouterr().out
    assert "networks" not in out.splitlines()[1] and "== scope" not in out
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
    assert re.search(r"stage 1, rnnport reading \S+ back: max \|Δ\| = \S+ \(tolerance 1e-05\) ok",
                     out)
    assert re.search(r"source, PyTorch .*: max \|Δ\| = \S+ \(tolerance 1e-05\) ok", out)
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
    assert re.search(r"stage 1, rnnport reading \S+c.npz back: max \|Δ\| = 0.0e\+00 .* ok",
                     result.stdout)
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
    assert re.search(r"stage 1, rnnport reading \S+m.onnx back: max \|Δ\| = \S+ .* ok", out)
    assert re.search(r"source, Keras 3 .*: max \|Δ\| = \S+ .* ok", out)


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
    assert re.search(r"back: max \|Δ\| = 0.0e\+00 \(tolerance \S+\) ok", capsys.readouterr().out)


def _two_networks(kind: str, tmp_path: Path) -> tuple[Path, str, list[str]]:
    """A file of ``kind`` holding two separate networks, the option that picks one, and
    the values that pick each."""
    lstm, gru = RNN.random(Spec("lstm", 3, 4)), RNN.random(Spec("gru", 3, 2), seed=5)
    if kind == "torch":
        state = {**{f"enc.{k}": v for k, v in rnnport.write(lstm, "torch").items()},
                 **{f"dec.{k}": v for k, v in rnnport.write(gru, "torch").items()}}
        from rnnport.formats import torch as torch_format

        torch_format.save(state, tmp_path / "two.pt")
        return tmp_path / "two.pt", "prefix", ["enc.", "dec."]
    if kind == "onnx":
        import onnx

        merged = onnx.compose.merge_models(rnnport.write(lstm, "onnx"), rnnport.write(gru, "onnx"),
                                           io_map=[], prefix1="a_", prefix2="b_")
        onnx.save(merged, tmp_path / "two.onnx")
        names = [node.name for node in merged.graph.node if node.op_type in ("LSTM", "GRU")]
        return tmp_path / "two.onnx", "node", names
    import keras

    inputs = keras.Input((None, 3), name="x")
    encoded = keras.layers.LSTM(4, return_sequences=True, name="enc")(inputs)
    middle = keras.layers.Dense(3, name="mid")(encoded)
    decoded = keras.layers.GRU(2, return_sequences=True, name="dec")(middle)
    keras.Model(inputs, decoded).save(tmp_path / "two.keras")
    return tmp_path / "two.keras", "layer", ["enc", "dec"]


@pytest.mark.parametrize("kind", ["torch", "onnx", "keras"])
def test_inspect_lists_and_shows_every_network_of_any_format(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str) -> None:
    path, option, values = _two_networks(kind, tmp_path)
    assert main(["inspect", str(path), "-q"]) == 0
    out = capsys.readouterr().out
    assert "2 networks (" in out
    for value in values:
        assert f"\n== -O {option}={value}\n" in out
    assert "LSTM 3→4" in out and "GRU" in out
    assert out.count("parameters as stored in") == 2
    assert main(["inspect", str(path), "-O", f"{option}={values[1]}", "-q"]) == 0
    out = capsys.readouterr().out
    assert "== " not in out and "LSTM 3→4" not in out.split("beside it")[0]


def test_cli_errors_speak_the_command_line(capsys: pytest.CaptureFixture[str],
                                           tmp_path: Path) -> None:
    from rnnport.cli import cli_terms

    assert cli_terms("read: x could be read as a or b; pass fmt= with one of them (e.g. "
                     "fmt='a').") == ("read: x could be read as a or b; pass --from with one of "
                                      "them (e.g. --from a).")
    assert cli_terms("pass layer=['gru', 'lstm'] or scope='enc/rnn'; bidirectional='True'; "
                     "expected True or False") == ("pass --layer gru --layer lstm or --scope "
                                                   "enc/rnn; -O 'bidirectional=\"True\"'; "
                                                   "expected true or false")
    assert cli_terms("write(fmt='torch', as_cell=True): no. Pass overwrite=True, per_part=True "
                     "or reset_after=False; x=3 stays") == (
        "writing torch (-O as_cell=true): no. Pass --force, --per-part or -O reset_after=false; "
        "x=3 stays")
    (tmp_path / "m.weird").write_text("?")
    assert main(["inspect", str(tmp_path / "m.weird")]) == 1
    error = capsys.readouterr().err
    assert "pass --from with one of" in error and "fmt=" not in error and "builtins" not in error
    np.save(tmp_path / "b.npy", np.zeros(10, np.float32))
    assert main(["inspect", str(tmp_path / "b.npy"), "-O", "cell=gru", "-O", "input_size=2",
                 "-O", "hidden_size=3", "-O", "bidirectional=yes"]) == 1
    assert "-O bidirectional=yes; expected true or false" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "b.npy"), "-O", "cell=gru", "-O", "input_size=2",
                 "-O", "hidden_size=3", "-O", "bidirectional=FALSE", "-q"]) == 1
    assert "expected 63 for a GRU 2→3" in capsys.readouterr().err  # FALSE is false: sizes checked


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert re.fullmatch(r"rnnport \S+ \(NumPy \S+\)\n", capsys.readouterr().out)


def test_a_stack_into_a_one_network_format_asks_for_per_part_and_writes_each_part(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stack = rnnport.stack([RNN.random(Spec("gru", 3, 4)), RNN.random(Spec("lstm", 4, 2))])
    rnnport.write(stack, "npz", path=tmp_path / "s.npz")
    assert main(["convert", str(tmp_path / "s.npz"), str(tmp_path / "s.pt")]) == 1
    error = capsys.readouterr().err
    assert "Pass --per-part to write one file per part" in error
    assert str(tmp_path / "s.part0.pt") in error and not (tmp_path / "s.pt").exists()
    assert main(["convert", str(tmp_path / "s.npz"), str(tmp_path / "s.pt"), "--per-part",
                 "--verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert out.count("stage 1, rnnport reading") == 2 and out.count("stage 2, PyTorch") == 2
    for index, part in enumerate(stack.parts):
        assert rnnport.read(tmp_path / f"s.part{index}.pt") == part
    assert main(["convert", str(tmp_path / "s.npz"), str(tmp_path / "s.pt"), "--per-part",
                 "-q"]) == 1
    assert "--force" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "s.npz"), str(tmp_path / "b.npy"), "--per-part",
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert "reading b.part1.npy back takes: -O cell=lstm -O input_size=4 -O hidden_size=2" \
        in out.replace(str(tmp_path) + "/", "")
    flags = out.split("b.part1.npy back takes: ")[1].splitlines()[0]
    options = [word for word in flags.split() if word != "-O"]
    assert main(["inspect", str(tmp_path / "b.part1.npy"), *(w for o in options for w in ("-O", o)),
                 "-q"]) == 0
    assert "LSTM 4→2" in capsys.readouterr().out


def test_api_writes_one_file_per_part_checked_before_the_first(tmp_path: Path) -> None:
    stack = rnnport.stack([RNN.random(Spec("gru", 3, 4)), RNN.random(Spec("lstm", 4, 2))])
    (tmp_path / "s.part1.npy").write_bytes(b"mine")
    with pytest.raises(rnnport.RnnportError, match="overwrite=True"):
        rnnport.write(stack, "cudnn", path=tmp_path / "s.npy", per_part=True)
    assert not (tmp_path / "s.part0.npy").exists()
    buffers = rnnport.write(stack, "cudnn", path=tmp_path / "s.npy", per_part=True, overwrite=True)
    assert [np.load(tmp_path / f"s.part{i}.npy").tolist() for i in range(2)] == \
           [b.tolist() for b in buffers]


@pytest.mark.parametrize(("shape", "flags", "lengths", "expected"), [
    ((5, 3), [], None, (5, 4)),                                    # one sequence: (time, input)
    ((2, 5, 3), [], [5, 2], (2, 5, 4)),                            # lengths tell: batch first
    ((2, 6, 3), [], None, (2, 6, 4)),                              # (batch, time, input)
    ((2, 5, 3), ["--batch-first"], None, (2, 5, 4)),
    ((5, 2, 3), ["--time-major"], None, (5, 2, 4)),
])
def test_run_knows_the_layout_or_is_told(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                         shape: tuple[int, ...], flags: list[str],
                                         lengths: list[int] | None,
                                         expected: tuple[int, ...]) -> None:
    model = RNN.random(Spec("gru", 3, 4))
    rnnport.write(model, "npz", path=tmp_path / "m.npz")
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    extra = []
    if lengths is not None:
        np.save(tmp_path / "l.npy", np.array(lengths))
        extra = ["--lengths", str(tmp_path / "l.npy")]
    assert main(["run", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"), *flags,
                 *extra, "--output", str(tmp_path / "y.npz"), "-q"]) == 0
    with np.load(tmp_path / "y.npz") as saved:
        assert saved["y"].shape == expected
        time_major = "--time-major" in flags
        want, _ = model.forward(x if len(shape) == 3 else x[None], time_major=time_major,
                                lengths=None if lengths is None else np.array(lengths))
        np.testing.assert_array_equal(saved["y"], want if len(shape) == 3 else want[0])
    capsys.readouterr()


def test_run_refuses_lengths_that_say_the_input_is_time_major(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rnnport.write(RNN.random(Spec("gru", 3, 4)), "npz", path=tmp_path / "m.npz")
    np.save(tmp_path / "x.npy", np.zeros((4, 6, 3), np.float32))
    assert main(["run", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy")]) == 0
    assert "as (batch, time, input) (--time-major reads it as (time, batch, input))" in \
        capsys.readouterr().err
    np.save(tmp_path / "l.npy", np.array([4, 1, 2, 3, 4, 4]))
    assert main(["run", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"),
                 "--lengths", str(tmp_path / "l.npy")]) == 1
    error = capsys.readouterr().err
    assert "--lengths has 6 entries, the size of axis 1: it looks time-major" in error
    assert "Pass --time-major" in error and "--batch-first" in error
    assert main(["run", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"),
                 "--lengths", str(tmp_path / "l.npy"), "--time-major", "--output",
                 str(tmp_path / "y.npy"), "-q"]) == 0
    assert np.load(tmp_path / "y.npy").shape == (4, 6, 4)


def test_review_mends_bias_mode_none_and_read_back_hints(capsys: pytest.CaptureFixture[str],
                                                         tmp_path: Path) -> None:
    from rnnport.cli import _option

    assert _option("bias_mode=none") == ("bias_mode", "none")
    assert _option("x=null") == ("x", None) and _option("x=TRUE") == ("x", True)
    rnnport.write(RNN.random(Spec("gru", 3, 4, bias=False)), "npz", path=tmp_path / "n.npz")
    assert main(["convert", str(tmp_path / "n.npz"), str(tmp_path / "n.npy"), "-q"]) == 0
    hint = capsys.readouterr().out.split("back takes: ")[1].split()
    assert "bias_mode=none" in hint
    assert main(["inspect", str(tmp_path / "n.npy"), *hint, "-q"]) == 0
    assert "no bias" in capsys.readouterr().out
    rnnport.write(RNN.random(Spec("lstm", 3, 4)), "npz", path=tmp_path / "l.npz")
    assert main(["convert", str(tmp_path / "l.npz"), str(tmp_path / "s.npy"), "-O",
                 "bias_mode=single_input", "--verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert "-O bias_mode=single_input" in out and "stage 1, rnnport reading" in out


def test_review_mends_per_part_writes_nothing_when_a_part_cannot_be_written(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    stack = rnnport.stack([RNN.random(Spec("lstm", 3, 4)),
                           RNN.random(Spec("gru", 4, 2, reset_after=False))])
    rnnport.write(stack, "npz", path=tmp_path / "s.npz")
    (tmp_path / "s.npy").write_bytes(b"mine")  # the unsplit name is never written
    assert main(["convert", str(tmp_path / "s.npz"), str(tmp_path / "s.npy"), "--per-part"]) == 1
    assert "reset-before GRU" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.npy", "s.npz"]
    with pytest.raises(rnnport.UnsupportedFeatureError):
        rnnport.write(stack, "torch", per_part=True, path=tmp_path / "api.pt")
    assert not list(tmp_path.glob("api*"))
    fine = rnnport.stack([RNN.random(Spec("lstm", 3, 4)), RNN.random(Spec("gru", 4, 2))])
    rnnport.write(fine, "npz", path=tmp_path / "f.npz")
    (tmp_path / "f.pt").write_bytes(b"mine")
    assert main(["convert", str(tmp_path / "f.npz"), str(tmp_path / "f.pt"), "--per-part",
                 "-q"]) == 0
    assert (tmp_path / "f.pt").read_bytes() == b"mine" and (tmp_path / "f.part1.pt").exists()


def test_review_mends_cli_terms_leave_what_is_not_an_option_alone() -> None:
    from rnnport.cli import cli_terms

    assert cli_terms("--layer and -O layer=… both given") == "--layer and -O layer=… both given"
    assert cli_terms("with overwrite=False or per_part=False, layer=None") == \
        "with overwrite=False or per_part=False, layer=None"
    assert cli_terms("scope='a b' here") == "--scope 'a b' here"
    told = "Formats that hold it: keras (keras: reset_after=False); pass bias_mode='double'"
    assert cli_terms(told, {"bias_mode"}) == \
        "Formats that hold it: keras (keras: reset_after=False); pass -O bias_mode=double"
    assert cli_terms("lengths=3; expected True or False") == \
        "-O lengths=3; expected true or false"


def test_review_mends_run_takes_one_sequence_with_any_flag(capsys: pytest.CaptureFixture[str],
                                                           tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 4))
    rnnport.write(model, "npz", path=tmp_path / "m.npz")
    x = np.random.default_rng(1).uniform(-1, 1, (7, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "l.npy", np.array([5]))
    for extra in (["--time-major"], ["--batch-first"], ["--lengths", str(tmp_path / "l.npy")]):
        assert main(["run", str(tmp_path / "m.npz"), "--input", str(tmp_path / "x.npy"), *extra,
                     "--output", str(tmp_path / "y.npz"), "--force", "-q"]) == 0
        with np.load(tmp_path / "y.npz") as saved:
            lengths = np.array([5]) if "--lengths" in extra else None
            np.testing.assert_array_equal(saved["y"], model.forward(x[None], lengths=lengths)[0][0])
    capsys.readouterr()


def test_review_mends_verify_compares_a_keras_model_that_returns_the_last_step(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import keras

    model = keras.Sequential([keras.Input((None, 3)), keras.layers.Bidirectional(
        keras.layers.GRU(2))])
    model.save(tmp_path / "last.keras")
    assert main(["convert", str(tmp_path / "last.keras"), str(tmp_path / "last.pt"), "--verify",
                 "-q"]) == 0
    assert re.search(r"source, Keras 3 loading last.keras \(return_sequences=True to compare "
                     r"every step\): max \|Δ\| = \S+ \(tolerance 1e-05\) ok", capsys.readouterr().out)


def test_review_mends_verify_checks_the_source_before_writing_beside_it(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "ck"
    folder.mkdir()
    rnnport.write(RNN.random(Spec("gru", 3, 4)), "tf1", path=folder / "orig")
    assert main(["convert", str(folder), str(folder / "copy"), "--to", "tf1", "--verify",
                 "-q"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"source, TensorFlow restoring orig", out), out
    assert re.search(r"stage 2, TensorFlow restoring copy", out), out


def test_review_mends_verify_of_float64_into_a_float32_framework(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rnnport.write(RNN.random(Spec("lstm", 3, 4), dtype=np.float64), "npz", path=tmp_path / "d.npz")
    assert main(["convert", str(tmp_path / "d.npz"), str(tmp_path / "d.onnx"), "--verify",
                 "-q"]) == 0
    assert re.search(r"stage 2, ONNX Runtime .*\(tolerance 1e-05\) ok", capsys.readouterr().out)


def test_review_mends_verify_of_some_layers_of_a_keras_model(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import keras

    keras.Sequential([keras.Input((None, 3)), keras.layers.LSTM(4, return_sequences=True,
                                                                name="a"),
                      keras.layers.GRU(2, return_sequences=True, name="b")]).save(
        tmp_path / "two.keras")
    assert main(["convert", str(tmp_path / "two.keras"), str(tmp_path / "b.pt"), "--layer", "b",
                 "--verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert "the Keras model runs 2 recurrent layer(s), and 1 were read" in out
