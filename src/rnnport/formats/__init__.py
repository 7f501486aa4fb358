"""The format registry: format name → module, imported only when first used.

Every format module has the same surface:

* ``DESCRIPTION``: one line; ``EXTRA``: the pip extra its framework needs (or None)
* ``READ_OPTIONS`` / ``WRITE_OPTIONS``: the keyword options ``read`` / ``write`` take
* ``sniff(source) -> bool``: whether ``source`` looks like this format (cheap, no imports)
* ``read(source, **options) -> RNN | Stack``
* ``write(model, path=None, **options) -> native object``
* ``FEATURES``: which of ``projection``, ``peepholes``, ``cell_clip``, ``gate_clip``,
  ``input_forget``, ``activations``, ``reset_before`` (GRU) it can hold, checked by
  :func:`check_features` before writing
* ``ONE_BIAS`` (optional, default none): the cell kinds (``lstm``, ``gru``,
  ``gru_reset_before``, ``rnn``) whose two biases it stores as one sum; ``ALWAYS_BIAS``
  (optional, default False): it stores biases (zeros) even for a network without them
* ``param_count(model, **options) -> int``: parameters as the format stores them

Adding a format is one module plus one line in ``_REGISTRY``.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import (
    AmbiguousSourceError,
    FormatError,
    UnknownFormatError,
    UnsupportedFeatureError,
)
from ..spec import Spec
from ._common import close_matches, describe

__all__ = [
    "FEATURE_CODES",
    "FormatInfo",
    "bias_kind",
    "check_features",
    "formats",
    "get",
    "info",
    "matrix",
    "matrix_markdown",
    "missing_feature",
    "one_bias",
    "sniff",
    "sums_biases",
]


@dataclass(frozen=True)
class FormatInfo:
    name: str
    module: str
    summary: str


_REGISTRY: dict[str, FormatInfo] = {
    info.name: info
    for info in (
        FormatInfo("keras", "rnnport.formats.keras",
                   "Keras LSTM/GRU/SimpleRNN/Bidirectional layers, get_weights() lists, "
                   ".keras / .weights.h5 / legacy .h5 files (h5py, no Keras)"),
        FormatInfo("cudnn", "rnnport.formats.cudnn",
                   "the flat cuDNN weight-space buffer (any layers, directions, bias mode)"),
        FormatInfo("miopen", "rnnport.formats.miopen",
                   "the flat ROCm MIOpen weight buffer (LSTM gates i f o c)"),
        FormatInfo("torch", "rnnport.formats.torch",
                   "PyTorch nn.LSTM/GRU/RNN modules and their state_dicts"),
        FormatInfo("onnx", "rnnport.formats.onnx",
                   "ONNX models with LSTM/GRU/RNN nodes (ModelProto, GraphProto, .onnx path)"),
        FormatInfo("npz", "rnnport.formats.npz",
                   "rnnport's own lossless .npz container: spec and canonical arrays"),
        FormatInfo("tf1", "rnnport.formats.tf1",
                   "TensorFlow 1.x cells: checkpoints (read without TensorFlow), name→array dicts"),
    )
}


def formats() -> list[str]:
    """Names of the registered formats."""
    return list(_REGISTRY)


def info(name: str) -> FormatInfo:
    if not isinstance(name, str) or name not in _REGISTRY:
        known = ", ".join(_REGISTRY)
        hint = close_matches(name, _REGISTRY) if isinstance(name, str) else ""
        raise UnknownFormatError(f"unknown format {name!r}; known formats: {known}.{hint}")
    return _REGISTRY[name]


def get(name: str) -> ModuleType:
    """The module implementing format ``name`` (imported on first use)."""
    return importlib.import_module(info(name).module)


def sniff(source: Any) -> str:
    """The one format ``source`` can be read as, or an error listing the candidates."""
    matches = [name for name in _REGISTRY if get(name).sniff(source)]
    if len(matches) == 1:
        return matches[0]
    if not matches and isinstance(source, (str, os.PathLike)) and not os.path.exists(source):
        raise FormatError(f"read: {source} does not exist (no such file, folder or checkpoint "
                          "prefix); check the path.")
    if not matches:
        raise FormatError(
            f"read: cannot tell the format of {describe(source)}; pass fmt= with one of "
            f"{', '.join(_REGISTRY)}.")
    raise AmbiguousSourceError(
        f"read: {describe(source)} could be read as {' or '.join(matches)}; pass fmt= with one "
        f"of them (e.g. fmt={matches[0]!r}).")


def _features_of(spec: Spec) -> list[tuple[str, str, str]]:
    """(feature key, what it is, why it matters) for each optional feature ``spec`` uses."""
    used = []
    if spec.proj_size:
        used.append(("projection", f"an LSTM projection (proj_size={spec.proj_size})",
                     "h' = W_hr·h' feeds the next step and the output"))
    if spec.peepholes:
        used.append(("peepholes", "LSTM peepholes", "the gates see the cell state"))
    if spec.cell_clip is not None:
        used.append(("cell_clip", f"an LSTM cell clip ({spec.cell_clip:g})",
                     "c' is clipped before tanh"))
    if spec.gate_clip is not None:
        used.append(("gate_clip", f"a gate clip ({spec.gate_clip:g}, ONNX clip)",
                     "every pre-activation is clipped before its activation"))
    if spec.input_forget:
        used.append(("input_forget", "coupled input and forget gates (ONNX input_forget)",
                     "f = 1 − i replaces the forget gate"))
    if spec.activations:
        names = ", ".join(name for name, _, _ in spec.activations)
        used.append(("activations", f"non-default activations ({names})",
                     "the gates and candidate use other functions than sigmoid and tanh"))
    if spec.cell == "gru" and not spec.reset_after:
        used.append(("reset_before", "a reset-before GRU (Keras reset_after=False, TF1 GRUCell)",
                     "its candidate is tanh(W_n x + R_n(r∘h) + b), not tanh(W_n x + "
                     "r∘(R_n h + b_R) + b_W); no conversion between the two GRUs is exact"))
    return used


def missing_feature(spec: Spec, holds: frozenset[str]) -> tuple[str, str, str] | None:
    """``(key, what, why)`` of the first feature ``spec`` uses that is not in ``holds``."""
    return next((used for used in _features_of(spec) if used[0] not in holds), None)


def check_features(spec: Spec, name: str, where: str) -> None:
    """Raise UnsupportedFeatureError naming the first feature of ``spec`` that ``name`` lacks."""
    missing = missing_feature(spec, get(name).FEATURES)
    if missing is not None:
        key, what, why = missing
        holders = [other for other in _REGISTRY if key in get(other).FEATURES]
        alternatives = (f"Formats that hold it: {', '.join(holders)}." if holders else
                        "No registered format holds it besides rnnport's own model.")
        raise UnsupportedFeatureError(
            f"{where}: the {name} format cannot hold {what}: {why}. Converting would "
            f"change the numbers, so nothing was written. {alternatives}")


# -- what converts to what ---------------------------------------------------------------------

# Each optional feature, with the short code the conversion matrix uses for it.
FEATURE_CODES = {"projection": ("P", "LSTM projection"), "peepholes": ("p", "LSTM peepholes"),
                 "cell_clip": ("c", "LSTM cell clip"), "gate_clip": ("g", "gate clip"),
                 "input_forget": ("f", "coupled input-forget gates"),
                 "activations": ("a", "non-default activations"),
                 "reset_before": ("r", "reset-before GRU")}
BIAS_KINDS = {"lstm": "LSTM", "gru": "GRU", "gru_reset_before": "reset-before GRU",
              "rnn": "simple RNN"}


def bias_kind(spec: Spec) -> str:
    """``lstm``, ``gru`` (reset after), ``gru_reset_before`` or ``rnn``: how biases combine."""
    if spec.cell == "gru":
        return "gru" if spec.reset_after else "gru_reset_before"
    return "rnn" if spec.cell.startswith("rnn") else spec.cell


def one_bias(name: str) -> frozenset[str]:
    """The cell kinds whose two biases format ``name`` stores as their sum."""
    return getattr(get(name), "ONE_BIAS", frozenset())


def sums_biases(name: str, spec: Spec) -> bool:
    """Whether a trip through format ``name`` changes the biases of a network of ``spec``
    (sums its two, or gives a bias-free one zero biases) while keeping its function."""
    return (spec.bias or getattr(get(name), "ALWAYS_BIAS", False)) \
        and bias_kind(spec) in one_bias(name)


@dataclass(frozen=True)
class Pair:
    """Converting one network from ``source`` to ``target``."""

    source: str
    target: str
    refused: tuple[str, ...]    # features the source can hold and the target cannot
    summed: tuple[str, ...]     # cell kinds whose separate biases the target sums

    def cell(self) -> str:
        mark = "Σ" if self.summed else "✓"
        codes = " ".join(FEATURE_CODES[feature][0] for feature in self.refused)
        return f"{mark} −{codes}" if codes else mark


def matrix() -> list[list[Pair]]:
    """For every ordered pair of formats: which features stop a conversion (an error naming
    the feature) and which cells' biases get summed (the function is kept, the arrays are
    not bit-equal). Everything else converts with bit-equal arrays."""
    names = formats()
    holds = {name: get(name).FEATURES for name in names}
    return [[Pair(source, target,
                  tuple(f for f in FEATURE_CODES if f in holds[source] - holds[target]),
                  tuple(k for k in BIAS_KINDS if k in one_bias(target) - one_bias(source)))
             for target in names] for source in names]


def matrix_markdown() -> str:
    """The conversion matrix as a Markdown table with its legend."""
    names = formats()
    lines = ["| from ↓ to → | " + " | ".join(f"`{name}`" for name in names) + " |",
             "|---|" + "---|" * len(names)]
    for row in matrix():
        lines.append(f"| `{row[0].source}` | " + " | ".join(p.cell() for p in row) + " |")
    codes = ", ".join(f"{code} {what}" for code, what in FEATURE_CODES.values())
    summed = "; ".join(f"`{name}`: {', '.join(v for k, v in BIAS_KINDS.items() if k in one_bias(name))}"
                       for name in names if one_bias(name))
    lines += [
        "",
        "* ✓: every network the source format holds converts, and its arrays read back "
        "bit-equal.",
        "* Σ: the target keeps one bias where the source keeps two, so they are summed (the "
        f"same function, rounded once): {summed}. "
        + " ".join(f"`{name}` also stores zero biases for a network without them."
                   for name in names if getattr(get(name), "ALWAYS_BIAS", False)),
        f"* −x: networks using feature x are refused with an error naming it: {codes}.",
        "* Every format holds LSTM, GRU and simple RNN (tanh and relu) cells, any number of "
        "layers, one or two directions, with or without biases.",
    ]
    return "\n".join(lines)
