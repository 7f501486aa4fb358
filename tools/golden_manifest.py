"""The command line and the ``MANIFEST.json`` of a golden-file generator: ``--list``,
``--case NAME`` (repeatable), ``--out DIR``; each case made, its files' SHA-256 recorded
beside its other facts, the manifest of earlier runs kept for the cases not made again."""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["distinct_uniform", "main"]

# A case made: the facts the manifest keeps of it, its files (in the output folder), the
# line to print, and the versions of the libraries that made it.
Made = tuple[dict[str, Any], list[str], str, dict[str, str]]


def main(argv: list[str] | None, *, description: str, default_out: Path,
         cases: Mapping[str, str], generator: str, make: Callable[[str, Path], Made]) -> int:
    """Parse ``argv`` and make the chosen ``cases`` (name → description) with ``make``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=default_out)
    parser.add_argument("--case", action="append", choices=sorted(cases))
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    if args.list:
        for name, text in cases.items():
            print(f"{name}: {text}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"cases": {}}
    for name in args.case or list(cases):
        facts, files, line, versions = make(name, args.out)
        manifest["cases"][name] = {**facts, "files": {file: _sha256(args.out / file)
                                                      for file in files}}
        manifest["versions"] = versions
        print(f"{name}: {line}")
    manifest["generator"] = generator
    manifest_path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    return 0


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def distinct_uniform(rng: np.random.Generator, shape: tuple[int, ...], used: set[float],
                     scale: float = 0.6) -> np.ndarray:
    """Uniform float32 values in ±scale, none repeated and none already in ``used`` (which
    takes them): random, distinct weights, so that a swapped gate cannot pass."""
    while True:
        values = rng.uniform(-scale, scale, size=shape).astype(np.float32)
        flat = {float(v) for v in values.ravel()}
        if len(flat) == values.size and not flat & used:
            used |= flat
            return values
