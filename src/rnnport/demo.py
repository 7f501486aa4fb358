"""``rnnport demo``: Keras GRU and LSTM weights → the exact cuDNN buffer, checked bit for bit.

The reference (``keras_cudnn_reference.json``) holds the weights a Keras layer had and
the parameter buffer traced at the cuDNN call made for it. The demo converts the Keras
weights with rnnport, compares every value with the reference, converts back, and prints
where each piece of the buffer came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from .errors import FormatError
from .formats import cudnn, keras
from .gates import CANONICAL, block_range, gate_family
from .model import RNN

__all__ = ["CaseResult", "check_reference", "load_reference", "run_demo"]


CASE_KEYS = ("keras_kernel", "keras_recurrent_kernel", "keras_bias", "cudnn_params")


def load_reference(path: str | Path | None = None) -> dict[str, Any]:
    """The reference example: ``path`` when given, else the copy bundled with rnnport."""
    if path is None:
        where = "the bundled reference"
        text = resources.files("rnnport").joinpath("data/keras_cudnn_reference.json").read_text(
            encoding="utf-8")
    else:
        where = str(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise FormatError(f"{where}: not a text file; expected the JSON reference "
                              "(keras_cudnn_reference.json).") from None
    try:
        reference = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise FormatError(f"{where}: not valid JSON ({error}); expected the reference "
                          "keras_cudnn_reference.json.") from None
    missing = [f"{name}.{key}" for name in ("gru", "lstm") for key in CASE_KEYS
               if not isinstance(reference, dict) or not isinstance(reference.get(name), dict)
               or key not in reference[name]]
    if missing:
        raise FormatError(f"{where}: missing {', '.join(missing)}; expected objects \"gru\" and "
                          f"\"lstm\", each with {', '.join(CASE_KEYS)}.")
    return reference


def keras_weights(case: dict[str, Any]) -> list[np.ndarray]:
    return [np.asarray(case[key], dtype=np.float32)
            for key in ("keras_kernel", "keras_recurrent_kernel", "keras_bias")]


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


def check_reference(reference: dict[str, Any]) -> list[CaseResult]:
    results = []
    for name in ("gru", "lstm"):
        case = reference[name]
        original = keras_weights(case)
        rnn = keras.read(original)
        buffer = cudnn.write(rnn)
        back = keras.write(cudnn.read(buffer, cell=rnn.spec.cell, input_size=rnn.spec.input_size,
                                      hidden_size=rnn.spec.hidden_size))
        expected = np.asarray(case["cudnn_params"], dtype=np.float32)
        results.append(CaseResult(name, rnn, buffer, expected, back, original))
    return results


def _origin(rnn: RNN, name: str, gate: str) -> str:
    """Where a cuDNN gate block came from in the Keras arrays."""
    spec = rnn.spec
    family = gate_family(spec.cell)
    start, stop = block_range(keras.ORDERS[family], gate, spec.hidden_size)
    columns = f"{start}:{stop}"
    if name == "weight_ih":
        return f"kernel[:, {columns}]ᵀ"
    if name == "weight_hh":
        return f"recurrent_kernel[:, {columns}]ᵀ"
    if spec.cell == "gru" and spec.reset_after:
        return f"bias[{0 if name == 'bias_ih' else 1}, {columns}]"
    return "zeros (Keras keeps one bias)" if name == "bias_ih" else f"bias[{columns}]"


def _describe_case(result: CaseResult, out: TextIO) -> None:
    rnn = result.rnn
    spec = rnn.spec
    family = gate_family(spec.cell)
    extra = f", reset_after={spec.reset_after}" if spec.cell == "gru" else ""
    print(f"{result.name.upper()}  input {spec.input_size}, hidden {spec.hidden_size}{extra}: "
          f"Keras stores {keras.param_count(rnn)} parameters, cuDNN {result.buffer.size}", file=out)
    print(f"  {'offset':>6}  {'size':>4}  {'cuDNN block':<16} from Keras", file=out)
    symbols = {"weight_ih": "W", "weight_hh": "R", "bias_ih": "bW", "bias_hh": "bR"}
    hidden = spec.hidden_size
    for segment in cudnn.layout(spec):
        for gate in CANONICAL[family]:
            start, stop = block_range(CANONICAL[family], gate, hidden)
            shape = segment.shape[1:]
            size = (stop - start) * (shape[0] if shape else 1)
            offset = segment.offset + start * (shape[0] if shape else 1)
            dims = f" ({hidden}×{shape[0]})" if shape else f" ({hidden})"
            label = f"{symbols[segment.name]}_{gate}{dims}"
            print(f"  {offset:>6}  {size:>4}  {label:<16} {_origin(rnn, segment.name, gate)}",
                  file=out)
    verdict = "yes, bit for bit" if result.buffer_matches else "NO"
    differing = int(np.count_nonzero(result.buffer != result.expected)) \
        if result.buffer.shape == result.expected.shape else result.buffer.size
    print(f"  buffer equals the reference: {verdict} "
          f"({result.expected.size - differing}/{result.expected.size} float32 values)", file=out)
    print(f"  cuDNN → Keras round trip gives the original arrays: "
          f"{'yes' if result.round_trip_matches else 'NO'}", file=out)


def run_demo(reference_path: str | Path | None, out: TextIO) -> int:
    reference = load_reference(reference_path)
    source = str(reference_path) if reference_path else "the copy bundled with rnnport"
    print("rnnport demo: Keras weights → cuDNN parameter buffer, checked against the buffer "
          "cuDNN received", file=out)
    print(f"reference: {source}", file=out)
    print("rules: transpose each Keras matrix; reorder gates (Keras GRU z r h → cuDNN r z n; "
          "LSTM i f c o stays); all matrices first, then biases; a Keras LSTM's one bias goes "
          "to the recurrent side, zeros to the input side.\n", file=out)
    results = check_reference(reference)
    for result in results:
        _describe_case(result, out)
        print(file=out)
    ok = all(r.buffer_matches and r.round_trip_matches for r in results)
    print("all checks passed" if ok else "MISMATCH: see above", file=out)
    return 0 if ok else 1
