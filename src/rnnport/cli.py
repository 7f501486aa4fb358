"""The ``rnnport`` command line: a thin layer over the public API.

``main(argv) -> int`` is callable from tests. Results go to stdout; progress goes to
stderr, and ``--quiet`` silences it. Whatever the input, an error is one line on stderr,
never a traceback (``--debug`` shows it), with one of the :data:`EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from . import api, budget, formats
from ._version import package_version
from .errors import FormatError, LimitError, RnnportError, brief
from .io.atomic import (
    NUMPY_ARCHIVE,
    atomic_write,
    check_outputs,
    replacing,
    save_archive,
    save_npy,
)
from .model import Model, Stack
from .spec import Spec

__all__ = ["cli_terms", "main", "main_entry"]

# The exit status of each outcome, documented in ``--help`` and the docs (the command line).
EXIT_CODES = {
    0: "done",
    1: "refused: the input or the request is not what rnnport can do (the line says why)",
    2: "usage: the command line itself is wrong",
    3: "a resource limit was hit, or memory ran out (--limit NAME=VALUE raises a limit)",
    70: "an internal error: a bug in rnnport (rerun with --debug and report the traceback)",
    130: "interrupted (Ctrl-C)",
}
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


def _limit(text: str) -> tuple[str, float]:
    name, sep, value = (part.strip() for part in text.partition("="))
    if name not in budget.LIMITS:
        raise argparse.ArgumentTypeError(f"no limit named {name!r}; the limits are "
                                         f"{', '.join(budget.LIMITS)} (NAME=VALUE)")
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not sep or not 0 < number < math.inf:
        raise argparse.ArgumentTypeError(f"{text!r}: expected {name}=NUMBER, a positive number "
                                         f"({budget.LIMITS[name].unit})")
    return name, number


def _option(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    # true/false in any case, and Python's spellings; `none` stays text (bias_mode=none).
    spelled = {"true": True, "false": False}
    if value.strip().lower() in spelled:
        return key.strip(), spelled[value.strip().lower()]
    if value.strip() == "None":
        return key.strip(), None
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
    common.add_argument("--limit", action="append", type=_limit, default=argparse.SUPPRESS,
                        metavar="NAME=VALUE",
                        help="raise (or lower) a resource limit for this run, repeatable: "
                             + "; ".join(f"{limit.name} ({limit.describe(limit.default)})"
                                         for limit in budget.LIMITS.values())
                             + ". SECURITY.md explains them")
    parser = argparse.ArgumentParser(
        prog="rnnport", parents=[common],
        description="Move trained LSTM/GRU/RNN layers exactly between the frameworks and "
                    "containers that hold them (`rnnport formats` lists them), and run them "
                    "with NumPy alone.",
        epilog="`rnnport COMMAND --help` explains each command.\n\nexit codes:\n"
               + "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"rnnport {package_version()} (NumPy {np.__version__})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def command(name: str, summary: str, description: str,
                epilog: str | None = EPILOG) -> argparse.ArgumentParser:
        return commands.add_parser(name, help=summary, description=description, epilog=epilog,
                                   parents=[common],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)

    def source(sub: argparse.ArgumentParser, name: str = "FILE") -> None:
        sub.add_argument("source", metavar=name, help="a model file, checkpoint prefix or "
                         "folder (`rnnport formats` lists the names each format reads)")
        sub.add_argument("--from", dest="fmt", metavar="FORMAT",
                         help="the source's format when its name does not tell: "
                              f"{', '.join(formats.formats())}")
        sub.add_argument("-O", "--option", dest="options", action="append", type=_option,
                         default=[], metavar="KEY=VALUE", help="a format option (see below)")
        sub.add_argument("--layer", action="append", metavar="NAME",
                         help="read only the recurrent layer(s) of this name from a model that "
                              "holds several (repeat for a stack, in order; -O layer=[…])")
        sub.add_argument("--scope", metavar="SCOPE",
                         help="the variable scope of the network to read from a checkpoint "
                              "that holds several (`rnnport inspect` lists them; -O scope=…)")

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
                         "not tell, or another that writes the same name (one of "
                         f"{', '.join(formats.formats())}; `rnnport formats` lists the names "
                         "each format writes; the first listed wins)")
    convert.add_argument("--per-part", action="store_true",
                         help="a stack of networks that differ (LSTM → GRU), written to a format "
                              "that holds one network: one file per part, DST's name with "
                              ".part0, .part1 … before its suffix (-O per_part=true)")
    convert.add_argument("--verify", action="store_true",
                         help="check the output in two stages: rnnport reads it back, and the "
                              "target's own framework (when installed) loads and runs it; "
                              "prints the largest difference and the tolerance of each")
    convert.add_argument("--force", action="store_true",
                         help="replace DST if it exists (never the input itself)")

    run = command("run", "run a model file on an input array, or on many files",
                  "Run FILE's network on X with NumPy and save y and the final states. X is "
                  "one .npy array: (time, input) for one sequence, or (batch, time, input), "
                  "or (time, batch, input) with --time-major. --lengths (one length per "
                  "sequence) that fit only the time axis of a (batch, time, input) reading "
                  "are refused as a sign of time-major input.\n\n"
                  "Many files: rnnport run FILE INPUTS... --out DIR runs every .npy file and "
                  f"{NUMPY_ARCHIVE} archive (each array on its own; a member named 'lengths' "
                  "gives the others' lengths) of INPUTS, folders searched recursively, in "
                  "--jobs processes (or on Dask), and writes y of each to DIR under the same "
                  "relative name, atomically. Outputs that exist are skipped (--force redoes "
                  "them), so running it again after an interruption does the rest. A file that "
                  "fails is reported and the others go on; the exit code is then 1.")
    source(run)
    run.add_argument("inputs", nargs="*", metavar="INPUTS",
                     help=f"with --out: .npy files, {NUMPY_ARCHIVE} archives and folders of "
                          "them, given together right after FILE")
    forms = run.add_mutually_exclusive_group(required=True)
    forms.add_argument("--input", metavar="X.npy", help="the input sequence")
    forms.add_argument("--out", metavar="DIR", help="run every file of INPUTS; write each y to "
                       "DIR under the input's relative name")
    run.add_argument("--jobs", type=_jobs, metavar="N",
                     help="with --out: worker processes, each with one BLAS thread (default: "
                          "the CPUs; 0 runs in this process); with --dask, the local workers")
    run.add_argument("--dask", metavar="ADDRESS",
                     help="with --out: run on the Dask scheduler at ADDRESS, or on a local "
                          "cluster of --jobs processes with 'local'; the workers write the "
                          "outputs, so DIR must be on a file system they share (needs the "
                          "'dask' extra)")
    run.add_argument("--lengths", metavar="L.npy", help="valid length of each sequence (with "
                     "--out: of every input array that has no 'lengths' of its own)")
    run.add_argument("--output", metavar="Y.npy|Y" + NUMPY_ARCHIVE,
                     help="save y alone (a name ending .npy), or y, h_n (and c_n) in one NumPy "
                          f"archive (ending {NUMPY_ARCHIVE})")
    layout = run.add_mutually_exclusive_group()
    layout.add_argument("--batch-first", dest="time_major", action="store_false", default=None,
                        help="X is (batch, time, input)")
    layout.add_argument("--time-major", dest="time_major", action="store_true", default=None,
                        help="X is (time, batch, input)")
    run.add_argument("--force", action="store_true", help="replace --output if it exists; "
                     "with --out, redo the inputs whose outputs exist")

    explain = command("explain", "show two formats' layouts element by element, in colour",
                      "Every element of the source format's arrays and of the target layout, "
                      "coloured by gate and by kind, with a legend and the rules that map one "
                      "onto the other. Sizes: -i and -H from 1 to 64, --layers from 1 to 8.",
                      epilog=None)
    explain.add_argument("cell", choices=["lstm", "gru", "rnn"], help="the cell type")
    known = ", ".join(formats.formats())
    explain.add_argument("--from", dest="source_format", required=True, metavar="FORMAT",
                         help=f"the source format: one of {known}")
    explain.add_argument("--to", dest="target_format", required=True, metavar="FORMAT",
                         help=f"the target format: one of {known}")
    explain.add_argument("-i", "--input-size", type=int, default=2, metavar="I")
    explain.add_argument("-H", "--hidden-size", type=int, default=3, metavar="H")
    explain.add_argument("--reset-before", action="store_true",
                         help="gru: the reset-before GRU (one bias per gate where a format "
                              "sums them) instead of the reset-after one")
    explain.add_argument("--layers", dest="num_layers", type=int, default=1, metavar="N",
                         help="layers of the network (default 1); the tables show layer 0, "
                              "and a flat buffer gets the offsets of every block")
    explain.add_argument("--bidirectional", action="store_true",
                         help="a bidirectional network (flat buffers: every block's offsets)")
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


def _source_options(args: argparse.Namespace) -> dict[str, Any]:
    """``-O`` options with ``--layer`` and ``--scope`` added; giving one twice is an error."""
    options = dict(args.options)
    for key, value in (("layer", getattr(args, "layer", None)),
                       ("scope", getattr(args, "scope", None))):
        if value is None:
            continue
        if key in options:
            raise FormatError(f"--{key} and -O {key}=… both given; give one of them.")
        options[key] = value
    return options


def _inspect(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    options = _source_options(args)
    fmt = formats.resolve(args.source, args.fmt)
    print(f"{args.source}: {fmt} ({formats.info(fmt).summary})", file=out)
    networks = formats.get(fmt).networks
    choices = networks(args.source) if networks is not None else None
    if choices is None or len(choices.entries) < 2 or choices.option in options:
        _inspect_one(args.source, fmt, options, out, progress)
        return 0
    print(f"{len(choices.entries)} networks (-O {choices.option}=… picks one):", file=out)
    for value, what in choices.entries:
        print(f"  {_flag(choices.option, value)}: {what}", file=out)
    for value, _ in choices.entries:
        print(f"\n== {_flag(choices.option, value)}", file=out)
        _inspect_one(args.source, fmt, {**options, choices.option: value}, out, progress)
    return 0


def _inspect_one(source: str, fmt: str, options: dict[str, Any], out: TextIO,
                 progress: _Progress) -> None:
    model = _read(source, fmt, options, progress)
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
    _print_notes(source, fmt, options, out)
    for line in _count_lines(model, fmt, options):
        print(line, file=out)


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
        print(f"  - {cli_terms(note, chosen.read_options)}", file=out)


# -- parameter counts ------------------------------------------------------------------------


def _count_lines(model: Model, fmt: str, options: dict[str, Any]) -> list[str]:
    """The count as ``fmt`` stores it and the canonical count, each with its formula per
    layer, and why they differ when they do."""
    declared = formats.get(fmt)
    usable = {k: v for k, v in options.items() if k in declared.write_options}
    canonical = model.num_params()
    layers = [(index, part.spec, layer) for index, part in
              enumerate(model.parts if isinstance(model, Stack) else (model,))
              for layer in range(part.spec.num_layers)]
    lead = (lambda index, layer: f"part {index} layer {layer}") if isinstance(model, Stack) \
        else (lambda index, layer: f"layer {layer}")
    lines = [f"parameters, canonical (both biases b_ih and b_hh, as rnnport's model keeps them): "
             f"{canonical:,}"]
    lines += [f"  {lead(i, layer)}: {_formula(spec, layer, one_bias=False)}"
              for i, spec, layer in layers]
    try:
        stored = api.param_count(model, fmt, **usable)
    except RnnportError as error:
        why = cli_terms(str(error).splitlines()[0], declared.read_options)
        lines.append(f"parameters as stored in {fmt}: n/a ({why})")
        return lines
    if stored == canonical:
        lines.append(f"parameters as stored in {fmt}: {stored:,}, the same")
        return lines
    one = {spec: formats.sums_biases(fmt, spec) for _, spec, _ in layers}
    predicted = sum(_layer_count(spec, layer, one_bias=one[spec]) for _, spec, layer in layers)
    lines.append(f"parameters as stored in {fmt}: {stored:,}")
    if predicted == stored:
        lines += [f"  {lead(i, layer)}: {_formula(spec, layer, one_bias=one[spec])}"
                  for i, spec, layer in layers]
    else:  # a layout of the format's own (`rnnport explain` shows it element by element)
        lines.append(f"  {stored - canonical:+,} against the canonical count, in {fmt}'s own "
                     "bias layout (`rnnport explain` shows it element by element)")
    lines += [f"  why: {reason}" for reason in _count_reasons(fmt, [s for _, s, _ in layers])]
    return lines


def _count_reasons(fmt: str, specs: list[Spec]) -> list[str]:
    reasons = []
    if any(spec.bias and formats.sums_biases(fmt, spec) for spec in specs):
        reasons.append(f"{fmt} keeps b_ih + b_hh as one sum wherever the cell's equations "
                       "allow it (the same function), where the canonical model keeps the two.")
    if any(not spec.bias and formats.sums_biases(fmt, spec) for spec in specs):
        reasons.append(f"{fmt} stores zero biases even for a network without them.")
    if any(spec.cell == "gru" and not spec.reset_after and spec.bias for spec in specs):
        reasons.append("this is a reset-before GRU: r multiplies h before the recurrent product, "
                       "so its two candidate biases can be summed; a reset-after GRU computes "
                       "r ⊙ (W_hn·h + b_hn), so it must keep b_hn apart: 2·3·H biases where one "
                       "bias per gate takes 3·H (for 4→5, 165 parameters rather than 150).")
    return reasons


def _layer_count(spec: Spec, layer: int, *, one_bias: bool) -> int:
    shapes = spec.param_shapes(layer)
    total = sum(math.prod(shape) for shape in shapes.values())
    if one_bias:
        total += spec.gate_count * spec.hidden_size - sum(
            math.prod(shapes[name]) for name in ("bias_ih", "bias_hh") if name in shapes)
    return spec.num_directions * total


def _formula(spec: Spec, layer: int, *, one_bias: bool) -> str:
    gates, hidden, width = spec.gate_count, spec.hidden_size, spec.layer_input_size(layer)
    recurrent = spec.output_size
    terms = [(f"{gates}·{hidden}·({width}+{recurrent})", "G·H·(in + H_out) weights")]
    if one_bias:
        terms.append((f"{gates}·{hidden}", "G·H biases, one per gate"))
    elif spec.bias:
        terms.append((f"2·{gates}·{hidden}", "2·G·H biases"))
    if spec.proj_size:
        terms.append((f"{spec.proj_size}·{hidden}", "P·H projection"))
    if spec.peepholes:
        terms.append((f"3·{hidden}", "3·H peepholes"))
    total = _layer_count(spec, layer, one_bias=one_bias)
    lead = f"{spec.num_directions} × " if spec.num_directions > 1 else ""
    return (f"{lead}({' + '.join(t for t, _ in terms)}) = {total:,}  "
            f"[{' + '.join(n for _, n in terms)}]")


def _compare(label: str, got: np.ndarray, want: np.ndarray, dtype: np.dtype,
             out: TextIO) -> bool:
    # The coarser of the model's precision and the one the framework computed in (some
    # compute float32 even for float64 weights).
    tolerance = max(TOLERANCE.get(dtype, 1e-5),
                    TOLERANCE.get(np.asarray(got).dtype, 1e-5))
    if np.shape(got) != np.shape(want):
        print(f"  {label}: output shape {np.shape(got)}, expected {np.shape(want)}: MISMATCH",
              file=out)
        return False
    error = float(np.max(np.abs(np.asarray(got, np.float64) - np.asarray(want, np.float64))))
    ok = error <= tolerance
    print(f"  {label}: max |Δ| = {error:.1e} (tolerance {tolerance:.0e}) "
          f"{'ok' if ok else 'TOO LARGE'}", file=out)
    return ok


def _convert(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    options = _source_options(args)
    if args.per_part:
        options["per_part"] = True
    target = formats.info(args.to).name if args.to else formats.output_format(args.destination)
    conversion = api.Conversion.plan(args.source, target, fmt=args.fmt, path=args.destination,
                                     overwrite=args.force, options=options, how="pass --force")
    progress(f"reading {args.source} …")
    model = conversion.read()
    declared = formats.get(target)
    if isinstance(model, Stack) and "per_part" in declared.write_options \
            and not options.get("per_part"):
        names = [str(formats.part_path(target, args.destination, index))
                 for index in range(len(model.parts))]
        layers = " or --layer NAME to convert some of its layers" \
            if "layer" in formats.get(conversion.source_format).read_options else ""
        raise FormatError(
            f"{args.source} holds a stack of {len(model.parts)} networks that differ "
            f"({'; '.join(spec.describe() for spec in model.specs)}), and a {target} file holds "
            f"one network. Pass --per-part to write one file per part ({', '.join(names)}){layers}.")
    # The source's own framework runs before anything is written: writing may change what a
    # folder source names (a checkpoint folder's state file).
    checked = _source_check(model, conversion.source_format, args.source, progress) \
        if args.verify else None
    progress(f"writing {args.destination} ({target}) …")
    conversion.write(model)
    written = conversion.output_files(model)
    size = sum(path.stat().st_size for path in written if path.exists())
    what = (f"a stack of {len(model.parts)} networks" if isinstance(model, Stack)
            else model.spec.describe())
    files = api.per_part_paths(target, model, args.destination, conversion.write_options)
    shown = ", ".join(map(str, files)) if files else args.destination
    print(f"wrote {shown} ({target}, {size:,} bytes): {what}", file=out)
    pieces: list[tuple[Any, Model]] = [(args.destination, model)]
    if files and isinstance(model, Stack):
        pieces = list(zip(files, model.parts, strict=True))
    for path, part in pieces:
        back_options = _back_options(declared, part, conversion.write_options)
        if back_options:
            flags = " ".join(_flag(key, value) for key, value in back_options.items())
            print(f"reading {path} back takes: {flags}", file=out)
    if checked is not None:
        _verify(args, conversion, model, pieces, checked, out, progress)
    return 0


def _back_options(declared: formats.Format, model: Model,
                  write_options: dict[str, Any]) -> dict[str, Any]:
    """What reading ``model`` back from the target needs: what the format does not record,
    and the write options (``bias_mode``) that are also read options."""
    return {**declared.read_back_options(model),
            **{key: value for key, value in write_options.items()
               if key in declared.read_options and key != "per_part"}}


def _flag(key: str, value: Any) -> str:
    """The command-line words that pass option ``key=value``: ``--layer``/``--scope`` where
    they say it, else ``-O key=value`` with a value ``-O`` reads back as ``value``, quoted
    for the shell where it needs it."""
    if key == "layer" and isinstance(value, list) and value and all(
            isinstance(name, str) for name in value):
        return " ".join(f"--layer {shlex.quote(name)}" for name in value)
    if key == "scope" and isinstance(value, str) and value:
        return f"--scope {shlex.quote(value)}"
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        if _option(f"{key}={text}")[1] != value:
            text = json.dumps(value)
    except argparse.ArgumentTypeError:
        text = json.dumps(value)
    return f"-O {shlex.quote(f'{key}={text}')}"


def _verify_input(model: Model, fmt: str, source: Any) -> np.ndarray:
    """The input every stage runs: (2, 7, I), or the batch and time the source file fixes."""
    fixed = formats.get(fmt).fixed_input
    batch, time = (fixed(source) if fixed is not None else None) or (2, 7)
    return np.random.default_rng(0).uniform(-1, 1, (batch, time, model.input_size)).astype(
        model.dtype)


def _source_check(model: Model, fmt: str, path: str,
                  progress: _Progress) -> tuple[str, np.ndarray] | str:
    """The source's own framework computing ``y`` for the verify input, or why not."""
    run = formats.get(fmt).framework_forward
    if run is None:
        return (f"{fmt} has no framework of its own; rnnport's runtime is checked against each "
                "framework by its test suite")
    progress(f"running {path} in its own framework …")
    return run(path, model, _verify_input(model, fmt, path))


def _verify(args: argparse.Namespace, conversion: api.Conversion, model: Model,
            pieces: list[tuple[Any, Model]], checked: tuple[str, np.ndarray] | str,
            out: TextIO, progress: _Progress) -> None:
    """Stage 1: rnnport reads the output back; stage 2: the target's framework loads and runs
    it, when installed; and the source's framework ran the source (``checked``)."""
    progress("verifying …")
    target, declared = conversion.target_format, formats.get(conversion.target_format)
    x = _verify_input(model, conversion.source_format, args.source)
    want, _ = model.forward(x)
    dtype = np.dtype(model.dtype)
    print(f"verify: random input {x.shape}, forward() of {args.source} against:", file=out)
    ok = True
    piece_input = x
    for path, part in pieces:
        part_want, _ = part.forward(piece_input)
        back = api.read(path, target, **_back_options(declared, part,
                                                       conversion.write_options))
        got, _ = back.forward(piece_input)
        ok &= _compare(f"stage 1, rnnport reading {path} back", got, part_want, dtype, out)
        run = declared.framework_forward
        found = run(path, back, piece_input) if run is not None else (
            f"{target} has no framework of its own to load it")
        if isinstance(found, str):
            print(f"  stage 2, {target}'s framework: not run ({found})", file=out)
        else:
            label, got = found
            ok &= _compare(f"stage 2, {label}", got, part_want, dtype, out)
        piece_input = part_want
    if isinstance(checked, str):
        print(f"  source, {conversion.source_format}'s framework on {args.source}: not run "
              f"({checked})", file=out)
    else:
        ok &= _compare(f"source, {checked[0]}", checked[1], want, dtype, out)
    if not ok:
        raise FormatError(f"convert --verify: {args.destination} does not compute what "
                          f"{args.source} computes (see the differences above).")


def _run(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    misplaced = _run_form_error(args)
    if misplaced:
        print(f"rnnport run: {misplaced}", file=sys.stderr)
        return 2
    if args.out is not None:
        return _run_many(args, out, progress)
    if args.output:
        if Path(args.output).suffix.lower() not in (NUMPY_ARCHIVE, ".npy"):
            raise FormatError(f"{args.output}: --output should end in .npy (y alone) or "
                              f"{NUMPY_ARCHIVE} (one NumPy archive of y and the final states).")
        check_outputs([Path(args.output)], [*formats.input_files(args.source), Path(args.input)],
                      args.force, "pass --force")
    model = _read(args.source, args.fmt, _source_options(args), progress)
    x = _load_array(args.input, "--input")
    lengths = _load_array(args.lengths, "--lengths") if args.lengths else None
    x, time_major, single = _layout(x, lengths, args.time_major, args.input, progress)
    y, state = model.forward(x, lengths=lengths, time_major=time_major)
    if single:
        y, state = y[0], _drop_batch(state)
    arrays = {"y": y, **_state_arrays(state)}
    for name, array in arrays.items():
        print(f"{name}: shape {array.shape}, dtype {array.dtype}, min {array.min():.4g}, max "
              f"{array.max():.4g}" if array.size else f"{name}: shape {array.shape}", file=out)
    if args.output:
        with replacing(args.force, "pass --force"):
            if Path(args.output).suffix.lower() == ".npy":
                save_npy(args.output, y)
            else:
                save_archive(args.output, arrays, "rnnport run --output")
        print(f"wrote {args.output}", file=out)
    return 0


def _run_form_error(args: argparse.Namespace) -> str:
    """What mixes run's two forms (--input X, or INPUTS... --out DIR), if anything."""
    if args.out is None:
        extra = [flag for flag, value in (("INPUTS", args.inputs), ("--jobs", args.jobs),
                                          ("--dask", args.dask)) if value not in (None, [])]
        return f"{' and '.join(extra)} go with --out DIR, not --input" if extra else ""
    if not args.inputs:
        return "--out DIR needs INPUTS: .npy files, archives or folders to run"
    if args.dask is not None and args.jobs == 0:
        return ("--jobs 0 runs in this process, without Dask; with --dask, --jobs is the number "
                "of Dask workers: 1 or more")
    return "--output goes with --input; with --out, each output is named after its input" \
        if args.output else ""


def _run_many(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    """``run FILE INPUTS... --out DIR``: :func:`rnnport.corpus.run`, its summary on ``out``."""
    from . import corpus

    lengths = _load_array(args.lengths, "--lengths") if args.lengths else None
    summary = corpus.run(args.source, args.inputs, args.out, fmt=args.fmt,
                         options=_source_options(args), jobs=args.jobs, dask=args.dask,
                         force=args.force, time_major=args.time_major, lengths=lengths,
                         progress=None if progress.quiet else sys.stderr)
    for line in summary.lines(redo="--force"):
        print(line, file=out)
    return 0 if summary.ok else 1


def _jobs(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of processes, 1 or more "
                                         "(0: run in this process)")
    return number


def _layout(x: np.ndarray, lengths: np.ndarray | None, time_major: bool | None, name: str,
            progress: _Progress) -> tuple[np.ndarray, bool, bool]:
    """``x`` as forward takes it, whether it is time-major, and whether it was one sequence
    (time, input). A 3-D ``x`` is (batch, time, input) unless --time-major says otherwise;
    lengths that fit only the time axis contradict that, and are refused."""
    if x.ndim == 2:
        progress(f"running one sequence of {x.shape[0]} steps …")
        return x[None], False, True
    if x.ndim == 3 and time_major is None:
        if lengths is not None and lengths.ndim == 1 and lengths.shape[0] == x.shape[1] \
                != x.shape[0]:
            raise FormatError(
                f"--input {name}: shape {x.shape} reads as (batch {x.shape[0]}, time "
                f"{x.shape[1]}, input {x.shape[2]}), but --lengths has {lengths.shape[0]} "
                f"entries, the size of axis 1: it looks time-major. Pass --time-major to read "
                f"it as (time {x.shape[0]}, batch {x.shape[1]}, input {x.shape[2]}), or "
                "--batch-first to keep (batch, time, input).")
        time_major = False
        progress(f"running {x.shape} as (batch, time, input) (--time-major reads it as "
                 "(time, batch, input)) …")
    else:
        progress(f"running {x.shape} …")
    return x, bool(time_major), False


def _drop_batch(state: Any) -> Any:
    """The final state of a one-sequence run without its batch axis of 1."""
    if isinstance(state, list):
        return [_drop_batch(item) for item in state]
    if isinstance(state, tuple):
        return tuple(item[:, 0] for item in state)
    return state[:, 0]


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
                     input_size=args.input_size, hidden_size=args.hidden_size,
                     reset_before=args.reset_before, num_layers=args.num_layers,
                     bidirectional=args.bidirectional)
    print(result.text(color=out.isatty() and "NO_COLOR" not in os.environ), file=out)
    if args.html:
        page = result.html().encode("utf-8")
        with replacing(args.force, "pass --force"):
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
        needs = f"framework objects need the {extra!r} extra (pip install -e '.[{extra}]' " \
            "in a clone)" if extra else "NumPy only"
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


# -- errors in the command line's terms ------------------------------------------------------

_CALL = re.compile(r"\b(read|write|convert|param_count)\(fmt='([\w-]+)'(?:, ([^()]*))?\)")
_KEYWORD = re.compile(r"(?<![\w.-])([a-z][a-z_]*)=(True|False|None|'[^']*'|\"[^\"]*\"|"
                      r"\[[^\]]*\]|\{[^}]*\}|[\w.+-]+|…|\.\.\.)?")
_FLAGS = {"fmt": "--from", "overwrite": "--force", "per_part": "--per-part", "layer": "--layer",
          "scope": "--scope"}
_SWITCHES = {"overwrite", "per_part"}  # flags that say True; False is their absence


def cli_terms(text: str, names: Iterable[str] | None = None,
              flags: Mapping[str, str] | None = None, *,
              switches: Iterable[str] = ()) -> str:
    """An error message from the Python API, phrased for the command line: ``fmt=`` is
    ``--from``, ``overwrite=True`` is ``--force``, ``layer=['a']`` is ``--layer a``, and the
    options ``names`` (default: every format's) are ``-O key=value`` with values ``-O``
    reads (``true``, not ``True``); ``flags`` and ``switches`` add a command's own flags
    (``num_layers`` → ``--layers``). Words already after ``-O``, and ``key=`` words that name
    no option (another framework's own vocabulary), stay as they are."""
    verbs = {"read": "reading", "write": "writing", "convert": "converting",
             "param_count": "counting"}
    text = _CALL.sub(lambda m: f"{verbs[m[1]]} {m[2]}" + (f" ({m[3]})" if m[3] else ""), text)
    known = set(_option_names() if names is None else names)
    named = {**_FLAGS, **(flags or {})}
    on_off = _SWITCHES | set(switches)

    def flag(match: re.Match[str]) -> str:
        key, value = match[1], match[2]
        if match.string[max(0, match.start() - 3):match.start()] == "-O ":
            return match[0]
        parsed = _python_value(value) if value else None
        if value in ("…", "..."):
            value = None
        if key in named:
            name = named[key]
            if key in on_off:
                return name if value is None or parsed is True else match[0]
            if value is None:
                return name
            if parsed is None or isinstance(parsed, bool):
                return match[0]
            items = parsed if isinstance(parsed, list) else [parsed]
            return " ".join(f"{name} {shlex.quote(str(item))}" for item in items)
        if key not in known:
            return match[0]
        if value is None:
            return f"-O {key}=…"
        return _flag(key, parsed)

    text = _KEYWORD.sub(flag, text)
    return text.replace("expected True or False", "expected true or false")


# What explain's keyword arguments are called on its command line.
_EXPLAIN_FLAGS = {"num_layers": "--layers", "input_size": "-i", "hidden_size": "-H",
                  "reset_before": "--reset-before", "bidirectional": "--bidirectional",
                  "cell": "CELL"}


def _cli_error(text: str, args: argparse.Namespace) -> str:
    """An error for ``args.command``'s one-line report, in the command line's terms."""
    text = text.removeprefix(f"{args.command}: ")
    if args.command == "explain":
        return cli_terms(text, (), _EXPLAIN_FLAGS, switches={"reset_before", "bidirectional"})
    return cli_terms(text, _involved(args))


def _involved(args: argparse.Namespace) -> set[str] | None:
    """The options of the formats a command reads and writes, when they can be told."""
    try:
        names: set[str] = set()
        source = getattr(args, "source", None)
        if isinstance(source, str):
            declared = formats.get(formats.resolve(source, getattr(args, "fmt", None)))
            names |= declared.read_options
        destination = getattr(args, "destination", None)
        if isinstance(destination, str):
            target = args.to or formats.output_format(destination)
            names |= formats.get(formats.info(target).name).write_options
        return names | {field.name for field in dataclass_fields(Spec)} if names else None
    except RnnportError:
        return None


def _python_value(text: str) -> Any:
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _option_names() -> set[str]:
    """Every option a format takes, and the Spec fields a flat buffer needs told."""
    names = {field.name for field in dataclass_fields(Spec)}
    for name in formats.formats():
        declared = formats.get(name)
        names |= declared.read_options | declared.write_options
    return names


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
    try:
        with budget.command_line(), budget.limits(**dict(getattr(args, "limit", []))):
            return _command(args, sys.stdout, _Progress(quiet))
    except BrokenPipeError:  # e.g. `rnnport explain lstm … | head`: the reader has had enough
        sys.stderr.close()
        return 1
    except BaseException as error:  # whatever the input, one line (the traceback with --debug)
        if debug or isinstance(error, SystemExit):
            raise
        code, text = _failure(error, args)
        print(f"rnnport {args.command}: {text}", file=sys.stderr)
        return code


def _command(args: argparse.Namespace, out: TextIO, progress: _Progress) -> int:
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args.reference, out)
    if args.command == "formats":
        return _formats(args, out)
    handler = {"inspect": _inspect, "convert": _convert, "run": _run,
               "explain": _explain}[args.command]
    return handler(args, out, progress)


def _failure(error: BaseException, args: argparse.Namespace) -> tuple[int, str]:
    """The exit code and the one line that report ``error``."""
    if isinstance(error, KeyboardInterrupt):
        return 130, "interrupted; nothing was left half-written."
    if isinstance(error, MemoryError):
        return 3, ("ran out of memory; the input needs more memory than this process may "
                   "take. Run it with more memory, or on smaller pieces of the input.")
    if isinstance(error, RnnportError):
        text = _cli_error(str(error).replace("\n", " "), args)
        return (3 if isinstance(error, LimitError) else 1), text
    if isinstance(error, OSError):
        return 1, " ".join(str(error).split("\n")[0].split())
    return 70, (f"internal error ({brief(error, 300)}); this is a bug in rnnport, not in your "
                "input. Rerun with --debug and report the traceback.")


def main_entry() -> None:
    sys.exit(main())
