"""The ``rnnport`` command line: a thin layer over the public API.

``main(argv) -> int`` is callable from tests; exit codes: 0 ok, 1 a user error (one line
on stderr, ``--debug`` for the traceback), 2 usage. Results go to stdout; progress goes
to stderr, and ``--quiet`` silences it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from . import api, formats
from .errors import FormatError, RnnportError
from .io.atomic import NUMPY_ARCHIVE, atomic_write, check_outputs, save_archive
from .model import Model, Stack
from .spec import Spec

__all__ = ["main", "main_entry"]

TOLERANCE = {np.dtype(np.float16): 2e-3, np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-10}
EPILOG = """format options (-O KEY=VALUE, repeatable; values are JSON when they parse, e.g.
-O hidden_size=320 -O bidirectional=true, else text): what a source cannot record (a flat
buffer's shape: -O cell=lstm -O input_size=120 -O hidden_size=320) or a target needs; each
goes to the side that takes it. `rnnport formats` lists each format's options and the file
names it reads and writes."""


class _Progress:
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr, flush=True)


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    spelled = {"True": True, "False": False, "None": None}  # Python's spellings, too
    if value.strip() in spelled:
        return key.strip(), spelled[value.strip()]
    try:
        return key.strip(), json.loads(value)
    except (ValueError, RecursionError):
        if value.lstrip()[:1] in ("[", "{", '"'):
            raise argparse.ArgumentTypeError(
                f"{key.strip()}={value!r} looks like JSON but is not valid JSON") from None
        return key.strip(), value


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress messages on stderr")
    parser = argparse.ArgumentParser(
        prog="rnnport", parents=[common],
        description="Move trained LSTM/GRU/RNN layers exactly between the frameworks and "
                    "containers that hold them (`rnnport formats` lists them), and run them "
                    "with NumPy alone.",
        epilog="`rnnport COMMAND --help` explains each command.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, summary: str, description: str) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=description, epilog=EPILOG,
                                   parents=[common],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    def source(sub: argparse.ArgumentParser, name: str = "FILE") -> None:
        sub.add_argument("source", metavar=name, help="a model file, checkpoint prefix or "
                         "folder (`rnnport formats` lists the names each format reads)")
        sub.add_argument("--from", dest="fmt", metavar="FORMAT",
                         help="the source's format when its name does not tell")
        sub.add_argument("-O", "--option", dest="options", action="append", type=_option,
                         default=[], metavar="KEY=VALUE", help="a format option (see below)")

    inspect = command("inspect", "what a file holds: networks, sizes, parameter counts",
                      "Show the format found, each recurrent network (cell, sizes, layers, "
                      "directions, variant, dtype) and its parameter counts as stored and "
                      "canonical, with the formula.")
    source(inspect)

    convert = command("convert", "convert a model file to another format",
                      "Read SRC, write DST atomically (the format from DST's name or --to). "
                      "--verify reads DST back and compares forward() on random input with "
                      "the source (and with the source framework when it is installed).")
    source(convert, "SRC")
    convert.add_argument("destination", metavar="DST", help="the output path")
    convert.add_argument("--to", metavar="FORMAT", help="the output format when DST's name does "
                         "not tell, or another that writes the same name (`rnnport formats` "
                         "lists the names each format writes; the first listed wins)")
    convert.add_argument("--verify", action="store_true",
                         help="re-read the output and compare outputs, printing the max error")
    convert.add_argument("--force", action="store_true",
                         help="replace DST if it exists (never the input itself)")

    run = command("run", "run a model file on an input array",
                  "Run FILE's network on X (.npy, (batch, time, input), or (time, batch, "
                  "input) with --time-major) with NumPy and save y and the final states.")
    source(run)
    run.add_argument("--input", required=True, metavar="X.npy", help="the input sequence")
    run.add_argument("--lengths", metavar="L.npy", help="valid length of each sequence")
    run.add_argument("--output", metavar="Y" + NUMPY_ARCHIVE,
                     help="save y, h_n (and c_n) here, as one NumPy archive")
    run.add_argument("--time-major", action="store_true", help="X is (time, batch, input)")
    run.add_argument("--force", action="store_true", help="replace --output if it exists")

    explain = command("explain", "show two formats' layouts element by element, in colour",
                      "Every element of the source format's arrays and of the target layout, "
                      "coloured by gate and by kind, with a legend and the rules that map one "
                      "onto the other.")
    explain.add_argument("cell", choices=["lstm", "gru", "rnn"], help="the cell type")
    explain.add_argument("--from", dest="source_format", required=True, metavar="FORMAT")
    explain.add_argument("--to", dest="target_format", required=True, metavar="FORMAT")
    explain.add_argument("-i", "--input-size", type=int, default=2, metavar="I")
    explain.add_argument("-H", "--hidden-size", type=int, default=3, metavar="H")
    explain.add_argument("--html", metavar="OUT", help="also write a standalone HTML page")
    explain.add_argument("--force", action="store_true", help="replace --html if it exists")

    demo = command("demo", "convert the bundled reference example and check it bit for bit",
                   "Convert the reference GRU and LSTM weights (the bundled reference names its "
                   "two formats) to the parameter buffer and check every value against the "
                   "buffer the reference recorded; then show where each block came from.")
    demo.add_argument("--reference", metavar="JSON",
                      help="reference file (default: the copy bundled with rnnport)")
    listing = command("formats", "list the formats, what they read and write, and their options",
                      "List the registered formats, or with --matrix which conversions are "
                      "exact, which sum biases and which features each pair refuses.")
    listing.add_argument("--matrix", action="store_true",
                         help="print the conversion matrix (Markdown) instead")
    return parser


# -- sources -------------------------------------------------------------------------------


def _read(path: str, fmt: str | None, options: dict[str, Any], progress: _Progress) -> Model:
    progress(f"reading {path} …")
    return api.read(path, fmt, **options)


# -- commands --------------------------------------------------------------------------------


def _inspect(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    options = dict(args.options)
    fmt = formats.resolve(args.source, args.fmt)
    model = _read(args.source, fmt, options, progress)
    print(f"{args.source}: {fmt} ({formats.info(fmt).summary})", file=out)
    networks = formats.get(fmt).networks
    choices = networks(args.source) if networks is not None else None
    if choices is not None and len(choices.entries) > 1:
        print(f"{len(choices.entries)} networks (-O {choices.option}=… picks one):", file=out)
        for value, what in choices.entries:
            print(f"  {choices.option}={value!r}: {what}", file=out)
    parts = model.parts if isinstance(model, Stack) else (model,)
    if len(parts) > 1:
        print(f"a stack of {len(parts)} networks that differ (each a part):", file=out)
    for index, part in enumerate(parts):
        spec = part.spec
        lead = f"part {index}: " if len(parts) > 1 else ""
        print(f"{lead}{spec.describe()}", file=out)
        variant = {"gru": "reset after" if spec.reset_after else "reset before"}.get(
            spec.cell, spec.nonlinearity if spec.cell.startswith("rnn") else "standard")
        print(f"  cell {spec.cell}, input {spec.input_size}, hidden {spec.hidden_size}"
              f"{f', projection {spec.proj_size}' if spec.proj_size else ''}, layers "
              f"{spec.num_layers}, directions {spec.num_directions}, variant {variant}, dtype "
              f"{part.dtype}", file=out)
        for layer in range(spec.num_layers):
            print(f"  layer {layer}: {_formula(spec, layer)}", file=out)
    stored = _stored_count(model, fmt, options)
    _print_notes(args.source, fmt, options, out)
    print(f"parameters: canonical {model.num_params():,} (both biases, as rnnport's model "
          f"keeps them); as stored in {fmt}: {stored}", file=out)
    return 0


def _print_notes(source: str, fmt: str, options: dict[str, Any], out: TextIO) -> None:
    """What the source holds beside the network read, and what was assumed."""
    chosen = formats.get(fmt)
    if chosen.notes is None:
        return
    found = chosen.source_notes(source, **options)
    if not found:
        print("beside it: nothing (the source holds this network alone)", file=out)
        return
    print(f"beside it, or assumed ({len(found)}):", file=out)
    for note in found:
        print(f"  - {note}", file=out)


def _formula(spec: Spec, layer: int) -> str:
    gates, hidden, width = spec.gate_count, spec.hidden_size, spec.layer_input_size(layer)
    recurrent = spec.output_size
    terms = [(f"{gates}·{hidden}·({width}+{recurrent})", "G·H·(in + H_out) weights")]
    if spec.bias:
        terms.append((f"2·{gates}·{hidden}", "2·G·H biases"))
    if spec.proj_size:
        terms.append((f"{spec.proj_size}·{hidden}", "P·H projection"))
    if spec.peepholes:
        terms.append((f"3·{hidden}", "3·H peepholes"))
    total = spec.num_directions * sum(math.prod(s) for s in spec.param_shapes(layer).values())
    lead = f"{spec.num_directions} × " if spec.num_directions > 1 else ""
    return (f"{lead}({' + '.join(t for t, _ in terms)}) = {total:,}  "
            f"[{' + '.join(n for _, n in terms)}]")


def _stored_count(model: Model, fmt: str, options: dict[str, Any]) -> str:
    usable = {k: v for k, v in options.items() if k in formats.get(fmt).write_options}
    try:
        return f"{api.param_count(model, fmt, **usable):,}"
    except RnnportError as error:
        return f"n/a ({str(error).splitlines()[0]})"


def _compare(label: str, got: np.ndarray, want: np.ndarray, dtype: np.dtype,
             out: TextIO) -> bool:
    error = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    ok = error <= TOLERANCE.get(dtype, 1e-5)
    print(f"  {label}: max |Δ| = {error:.1e} {'ok' if ok else 'TOO LARGE'}", file=out)
    return ok


def _convert(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    options = dict(args.options)
    target = formats.info(args.to).name if args.to else formats.output_format(args.destination)
    conversion = api.Conversion.plan(args.source, target, fmt=args.fmt, path=args.destination,
                                     overwrite=args.force, options=options, how="pass --force")
    progress(f"reading {args.source} …")
    model = conversion.read()
    progress(f"writing {args.destination} ({target}) …")
    conversion.write(model)
    size = sum(p.stat().st_size for p in conversion.output_files() if p.exists())
    what = (f"a stack of {len(model.parts)} networks" if isinstance(model, Stack)
            else model.spec.describe())
    print(f"wrote {args.destination} ({target}, {size:,} bytes): {what}", file=out)
    if not args.verify:
        return 0
    progress("verifying …")
    declared = formats.get(target)
    back_options = {**declared.read_back_options(model),
                    **{k: v for k, v in options.items() if k in declared.read_options}}
    back = api.read(args.destination, target, **back_options)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 7, model.input_size)).astype(model.dtype)
    want, _ = model.forward(x)
    got, _ = back.forward(x)
    print(f"verify: random input {x.shape}, forward() of {args.source} vs {args.destination}:",
          file=out)
    ok = _compare(f"{target} file read back", got, want, np.dtype(model.dtype), out)
    ok &= _framework_check(model, conversion.source_format, args.source, x, want, out)
    if not ok:
        raise FormatError(f"convert --verify: {args.destination} does not compute what "
                          f"{args.source} computes (see the errors above).")
    return 0


def _framework_check(model: Model, fmt: str, path: str, x: np.ndarray, want: np.ndarray,
                     out: TextIO) -> bool:
    """Compare with the source framework's own computation when it is installed."""
    run = formats.get(fmt).framework_forward
    found = run(path, model, x) if run is not None else (
        f"{fmt} source: no framework check; rnnport's runtime is checked against each framework "
        "by its test suite")
    if isinstance(found, str):
        print(f"  ({found})", file=out)
        return True
    label, got = found
    return _compare(label, got, want, np.dtype(model.dtype), out)


def _run(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    if args.output:
        if Path(args.output).suffix.lower() != NUMPY_ARCHIVE:
            raise FormatError(f"{args.output}: --output should end in {NUMPY_ARCHIVE} (one NumPy "
                              "archive of y and the final states).")
        check_outputs([Path(args.output)], [*formats.input_files(args.source), Path(args.input)],
                      args.force, "pass --force")
    model = _read(args.source, args.fmt, dict(args.options), progress)
    x = _load_array(args.input, "--input")
    lengths = _load_array(args.lengths, "--lengths") if args.lengths else None
    progress(f"running {x.shape} …")
    y, state = model.forward(x, lengths=lengths, time_major=args.time_major)
    arrays = {"y": y, **_state_arrays(state)}
    for name, array in arrays.items():
        print(f"{name}: shape {array.shape}, dtype {array.dtype}, min {array.min():.4g}, max "
              f"{array.max():.4g}" if array.size else f"{name}: shape {array.shape}", file=out)
    if args.output:
        save_archive(args.output, arrays, "rnnport run --output")
        print(f"wrote {args.output}", file=out)
    return 0


def _state_arrays(state: Any, prefix: str = "") -> dict[str, np.ndarray]:
    if isinstance(state, list):  # a Stack: one state per part
        out: dict[str, np.ndarray] = {}
        for index, item in enumerate(state):
            out.update(_state_arrays(item, f"part{index}/"))
        return out
    if isinstance(state, tuple):
        return {f"{prefix}h_n": state[0], f"{prefix}c_n": state[1]}
    return {f"{prefix}h_n": state}


def _load_array(path: str, flag: str) -> np.ndarray:
    from .io.archive import load_npy
    from .io.atomic import NUMPY_ARCHIVE

    if path.lower().endswith(NUMPY_ARCHIVE):
        raise RnnportError(f"{flag} {path}: an archive of several arrays; expected one array "
                           "saved with np.save(path, x) as .npy.")
    return load_npy(path, f"{flag} {path}")


def _explain(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    from .explain import explain

    if args.html:
        check_outputs([Path(args.html)], [], args.force, "pass --force")
    result = explain(args.cell, args.source_format, args.target_format,
                     input_size=args.input_size, hidden_size=args.hidden_size)
    print(result.text(color=out.isatty() and "NO_COLOR" not in os.environ), file=out)
    if args.html:
        page = result.html().encode("utf-8")
        atomic_write(args.html, lambda file: file.write(page))
        progress(f"wrote {args.html}")
    return 0


def _formats(args: argparse.Namespace, out: TextIO) -> int:
    if args.matrix:
        print(formats.matrix_markdown(), file=out)
        return 0
    for name in formats.formats():
        declared = formats.get(name)
        extra = declared.extra
        needs = f"framework objects need pip install 'rnnport[{extra}]'" if extra else \
            "NumPy only"
        print(f"{name:<7} {formats.info(name).summary}; {needs}", file=out)
        read = " ".join(f"*{s.text}" for s in declared.suffixes)
        written = " ".join(f"*{s.text}" for s in declared.suffixes if s.writes)
        if read:
            print(f"{'':<8}files: {read}" + ("" if written == read else
                                             f" (writes {written or 'none'})"), file=out)
        for kind, names in (("read", declared.read_options), ("write", declared.write_options)):
            if names:
                print(f"{'':<8}{kind} options: {', '.join(sorted(names))}", file=out)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    debug, quiet = getattr(args, "debug", False), getattr(args, "quiet", False)
    progress = _Progress(quiet)
    out = sys.stdout
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(args.reference, out)
        if args.command == "formats":
            return _formats(args, out)
        handler = {"inspect": _inspect, "convert": _convert, "run": _run,
                   "explain": _explain}[args.command]
        return handler(args, out, progress)
    except BrokenPipeError:  # e.g. `rnnport explain lstm … | head`: the reader has had enough
        sys.stderr.close()
        return 1
    except (RnnportError, OSError) as error:
        if debug:
            raise
        text = " ".join(str(error).split("\n")[0].split()) if isinstance(error, OSError) \
            else str(error).replace("\n", " ")
        print(f"rnnport {args.command}: {text}", file=sys.stderr)
        return 1


def main_entry() -> None:
    sys.exit(main())
