"""``rnnport demo``: the bundled reference, converted and checked bit for bit.

The reference (``rnnport/data/reference.json``, a copy of the shared
``keras_cudnn_reference.json``) holds, for a GRU and an LSTM, the weights a layer had in
one format and the flat parameter buffer traced at the call made for it in another. It
names its formats in its keys: ``<format>_<array>`` for the source's arrays, in the order
the format lists them (``keras_kernel``, ``keras_recurrent_kernel``, ``keras_bias``), and
``<format>_params`` for the target's buffer (``cudnn_params``). The demo converts the
source arrays with rnnport, compares every value with the buffer, converts back, and shows
with :func:`rnnport.explain.explain` where each block of the buffer came from and the rules
that put it there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .api import param_count, read, write
from .errors import FormatError
from .explain import explain
from .formats import formats, get
from .model import RNN, one_network

__all__ = ["CaseResult", "Reference", "check_reference", "load_reference", "run_demo",
           "source_arrays"]

CASES = ("gru", "lstm")
BUFFER = "params"


@dataclass(frozen=True)
class Reference:
    """The reference file: its cases and the two formats its keys name."""

    cases: dict[str, dict[str, Any]]
    source: str
    target: str
    where: str = field(compare=False)  # the file's name, for messages


def _formats_named(case: dict[str, Any], where: str) -> tuple[str, str]:
    """(source, target) from a case's keys: the format with the ``params`` buffer is the
    target, the one format whose arrays are given besides it the source."""
    known = sorted(formats(), key=len, reverse=True)  # the longest name that fits wins
    named: dict[str, list[str]] = {}
    for key in case:
        fmt = next((name for name in known if key.startswith(f"{name}_")), None)
        if fmt is not None:
            named.setdefault(fmt, []).append(key[len(fmt) + 1:])
    targets = [fmt for fmt, arrays in named.items() if arrays == [BUFFER]]
    sources = [fmt for fmt in named if fmt not in targets]
    if len(targets) != 1 or len(sources) != 1:
        raise FormatError(
            f"{where}: keys {sorted(case)}; expected the source format's arrays as "
            f"<format>_<array> entries and the target's buffer as <format>_{BUFFER}, both "
            f"formats registered ({', '.join(sorted(known))}).")
    return sources[0], targets[0]


def load_reference(path: str | Path | None = None) -> Reference:
    """The reference example: ``path`` when given, else the copy bundled with rnnport."""
    if path is None:
        where = "the bundled reference"
        text = resources.files("rnnport").joinpath("data/reference.json").read_text(
            encoding="utf-8")
    else:
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{where}: not a text file; expected a JSON reference like the "
                              "bundled rnnport/data/reference.json.") from None
        except OSError as error:
            raise FormatError(f"{where}: cannot be read ({error.strerror or error}); expected "
                              "the path of a JSON reference like the bundled "
                              "rnnport/data/reference.json.") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise FormatError(f"{where}: not valid JSON ({error}); expected a JSON reference like "
                          "the bundled rnnport/data/reference.json.") from None
    missing = [name for name in CASES if not isinstance(data, dict)
               or not isinstance(data.get(name), dict)
               or not {"input_size", "hidden_size"} <= set(data[name])]
    if missing:
        raise FormatError(f"{where}: missing {', '.join(missing)}; expected objects \"gru\" "
                          "and \"lstm\", each with input_size, hidden_size, the source format's "
                          f"arrays (<format>_<array>) and the target's buffer "
                          f"(<format>_{BUFFER}).")
    named = {_formats_named(data[name], f"{where}, {name}") for name in CASES}
    if len(named) != 1:
        raise FormatError(f"{where}: the cases name different formats ({sorted(named)}); "
                          "expected one source and one target for all.")
    (source, target), = named
    return Reference({name: data[name] for name in CASES}, source, target, where)


def source_arrays(reference: Reference, name: str) -> list[np.ndarray]:
    """Case ``name``'s source arrays, in the order the reference lists them."""
    prefix = f"{reference.source}_"
    return [np.asarray(value, dtype=np.float32) for key, value in reference.cases[name].items()
            if key.startswith(prefix)]


def _buffer(reference: Reference, name: str) -> np.ndarray:
    return np.asarray(reference.cases[name][f"{reference.target}_{BUFFER}"], dtype=np.float32)


@dataclass
class CaseResult:
    name: str
    rnn: RNN
    buffer: np.ndarray
    expected: np.ndarray
    back: list[np.ndarray]
    original: list[np.ndarray]

    @property
    def buffer_matches(self) -> bool:
        return (self.buffer.shape == self.expected.shape
                and bool(np.array_equal(self.buffer.view(np.uint32),
                                        self.expected.view(np.uint32))))

    @property
    def round_trip_matches(self) -> bool:
        return len(self.back) == len(self.original) and all(
            a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))
            for a, b in zip(self.back, self.original, strict=False))


def check_reference(reference: Reference) -> list[CaseResult]:
    """Each case: source arrays → target buffer, compared with the reference's; and that
    buffer converted back to the source format."""
    results = []
    source, target = get(reference.source), get(reference.target)
    for name in CASES:
        original = source_arrays(reference, name)
        rnn = one_network(read(original, reference.source), f"{reference.where}, {name}")
        buffer = np.asarray(write(rnn, reference.target))
        back = write(read(buffer, reference.target, **target.read_options_for(rnn.spec)),
                     reference.source)
        arrays = [named.array for named in source.explain_arrays(back, rnn.spec)]
        results.append(CaseResult(name, rnn, buffer, _buffer(reference, name), arrays,
                                  original))
    return results


def _describe_case(reference: Reference, result: CaseResult, out: TextIO) -> None:
    spec = result.rnn.spec
    extra = f", reset_after={spec.reset_after}" if spec.cell == "gru" else ""
    print(f"{result.name.upper()}  input {spec.input_size}, hidden {spec.hidden_size}{extra}: "
          f"{reference.source} stores {param_count(result.rnn, reference.source)} parameters, "
          f"{reference.target} {result.buffer.size}", file=out)
    if spec.bias and spec.reset_after:  # the layer explain draws
        explanation = explain(spec.cell, reference.source, reference.target,
                              input_size=spec.input_size, hidden_size=spec.hidden_size)
        print(explanation.origin_table(), end="", file=out)
        print("  rules:", file=out)
        for number, rule in enumerate(explanation.rules, 1):
            print(f"    {number}. {rule}", file=out)
    if result.buffer.shape == result.expected.shape:
        verdict = "yes, bit for bit" if result.buffer_matches else "NO"
        same = result.expected.size - int(np.count_nonzero(result.buffer != result.expected))
        detail = f"{same}/{result.expected.size} float32 values"
    else:
        verdict, detail = "NO", (f"{result.buffer.size} values where the reference has "
                                 f"{result.expected.size}")
    print(f"  buffer equals the reference: {verdict} ({detail})", file=out)
    print(f"  {reference.target} → {reference.source} round trip gives the original arrays: "
          f"{'yes' if result.round_trip_matches else 'NO'}", file=out)


def run_demo(reference_path: str | Path | None, out: TextIO) -> int:
    reference = load_reference(reference_path)
    source = str(reference_path) if reference_path else "the copy bundled with rnnport"
    print(f"rnnport demo: {reference.source} weights → {reference.target} parameter buffer, "
          "checked against the buffer the reference recorded", file=out)
    print(f"reference: {source}\n", file=out)
    results = check_reference(reference)
    for result in results:
        _describe_case(reference, result, out)
        print(file=out)
    ok = all(r.buffer_matches and r.round_trip_matches for r in results)
    print("all checks passed" if ok else "MISMATCH: see above", file=out)
    return 0 if ok else 1
