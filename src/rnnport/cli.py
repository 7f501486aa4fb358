"""The ``rnnport`` command line: a thin layer over the public API.

``main(argv) -> int`` is callable from tests; exit codes: 0 ok, 1 a user error (one line
on stderr, ``--debug`` for the traceback), 2 usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import RnnportError

__all__ = ["main", "main_entry"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rnnport",
        description="Move trained LSTM/GRU/RNN layers exactly between Keras, cuDNN buffers, "
                    "PyTorch, ONNX and TF1 checkpoints, and run them with NumPy alone.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo", help="convert the reference Keras GRU and LSTM to cuDNN buffers and check them",
        description="Convert the reference Keras GRU and LSTM weights to the cuDNN parameter "
                    "buffer and check every value against the buffer cuDNN received.")
    demo.add_argument("--reference", metavar="JSON",
                      help="reference file (default: the copy bundled with rnnport)")
    commands.add_parser("formats", help="list the formats and what they need",
                        description="List the registered formats.")
    return parser


def _formats(out: object) -> int:
    from .formats import _REGISTRY, get

    for name, info in _REGISTRY.items():
        extra = get(name).EXTRA
        needs = f"pip install 'rnnport[{extra}]' for framework objects" if extra else "NumPy only"
        print(f"{name:<8} {info.summary}  ({needs})", file=out)  # type: ignore[arg-type]
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
    try:
        if args.command == "demo":
            from .demo import run_demo

            return run_demo(args.reference, sys.stdout)
        if args.command == "formats":
            return _formats(sys.stdout)
    except (RnnportError, OSError) as error:
        if args.debug:
            raise
        print(f"rnnport {args.command}: {error}", file=sys.stderr)
        return 1
    return 2


def main_entry() -> None:
    sys.exit(main())
