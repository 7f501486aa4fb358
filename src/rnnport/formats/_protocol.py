"""The protocol every format declares (see :mod:`rnnport.formats` for its specification).

This module holds the declaration's types, the checks every verb makes, and the catalogue
of optional features. It imports no format and not the registry, so format modules can
import it; the registry, which knows every format, tells it who holds a feature
(:func:`install_holders`), for the errors that name the alternatives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..errors import DeviceError, FormatError, UnknownOptionError, UnsupportedFeatureError
from ..io.packages import Package
from ..model import RNN, Model, Stack
from ..spec import Spec
from ._common import close_matches, describe

__all__ = ["BIAS_KINDS", "FEATURE_CODES", "FLOAT_NAMES", "Choices", "Engine", "Format",
           "NamedArray", "RunTimeConstant", "Runner", "Suffix", "bias_kind", "check_options",
           "cpu_only", "features_of", "install_holders", "missing_feature", "native_arrays"]


@dataclass(frozen=True)
class Suffix:
    """A file name ending that a format reads and, unless ``writes`` is False, writes."""

    text: str  # e.g. ".weights.h5"; matched case-insensitively, longest first
    what: str  # what such a file is, for help texts and errors: "a legacy Keras .h5"
    writes: bool = True


@dataclass(frozen=True)
class NamedArray:
    """One array of a native object, as ``explain`` shows it."""

    name: str
    array: np.ndarray
    offset: int | None = None  # the first element's position in a flat buffer
    notes: tuple[str, ...] = ()  # what a reader of this array's table should know


@dataclass(frozen=True)
class RunTimeConstant:
    """A number the format's framework adds to a parameter at run time and never saves
    (TF1's ``forget_bias``). Reading and writing take it as the option ``option``; with
    ``neutral`` the stored arrays hold the parameters unchanged, which is how ``explain``
    traces them before it shows what ``default`` changes."""

    option: str
    default: float
    neutral: float
    cells: frozenset[str]  # the Spec cells it applies to
    what: str  # one sentence: who adds what, where, by default
    adder: str  # who adds it back at run time: "TensorFlow"


@dataclass(frozen=True)
class Choices:
    """The networks one source holds, each picked by ``option=value``."""

    option: str
    entries: tuple[tuple[str, str], ...]  # (value, what that network is)


# An engine's prepared network: (x (time, batch, I), h0, c0 or None, lengths or None) →
# (y (time, batch, D·H_out), h_n, c_n or None), arrays in the network's compute dtype.
Runner = Callable[[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None],
                  tuple[np.ndarray, np.ndarray, np.ndarray | None]]


def cpu_only(device: Any) -> str:
    """The device of an engine that runs on the CPU alone."""
    if device is None or (isinstance(device, str) and device.lower() == "cpu"):
        return "cpu"
    raise DeviceError(f"device={device!r}; expected None or 'cpu' (this engine runs on the CPU "
                      "only). Pass device=None, or pick an engine that runs on other devices.")


@dataclass(frozen=True)
class Engine:
    """A framework that runs the networks its format writes, for ``forward(engine=name)``.

    ``build(model, device)`` writes one network (an ``RNN``, never a ``Stack``) as the
    framework's runnable object, once per network and device, and returns its
    :data:`Runner`; it raises UnsupportedFeatureError for a network the framework would
    compute differently (then ``forward`` runs NumPy, with a warning saying why).
    ``device(device)`` normalizes ``forward``'s ``device`` or raises DeviceError."""

    name: str
    modules: tuple[str, ...]  # what it imports, all needed: ("onnxruntime", "onnx")
    extra: str  # the pip extra that installs them
    build: Callable[[RNN, str], Runner]
    device: Callable[[Any], str] = cpu_only


def no_options(spec: Spec) -> dict[str, Any]:
    """Nothing to tell: the format records everything about a network of ``spec``."""
    return {}


def same_file(path: Path) -> list[Path]:
    """A write to ``path`` creates that one file."""
    return [path]


def no_files(path: Path) -> list[Path]:
    """A read of ``path`` opens nothing beside it."""
    return []


def canonical_count(model: Model, **options: Any) -> int:
    """The format stores exactly the canonical parameters."""
    return model.num_params()


def native_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """The float arrays of a native object: a dict's values by key, a list's by position,
    or the object itself as one ``buffer`` (metadata such as a JSON header is left out)."""
    if isinstance(native, Mapping):
        named = [(str(name), np.asarray(array)) for name, array in native.items()]
    elif isinstance(native, (list, tuple)):
        named = [(f"array {index}", np.asarray(array)) for index, array in enumerate(native)]
    else:
        named = [("buffer", np.asarray(native))]
    return [NamedArray(name, array, 0 if name == "buffer" and array.ndim == 1 else None)
            for name, array in named if array.dtype.kind == "f"]


@dataclass(frozen=True)
class Format:
    """What one format module declares as ``FORMAT``; the registry's docstring is its
    specification, field by field. :meth:`read`, :meth:`write` and :meth:`param_count`
    check options and features, then call the declared ``reader``, ``writer`` and
    ``counter``."""

    name: str
    sniff: Callable[[Any], bool]
    reader: Callable[..., Model]
    writer: Callable[..., Any]
    counter: Callable[..., int] = canonical_count
    read_options: frozenset[str] = frozenset()
    write_options: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()
    one_bias: frozenset[str] = frozenset()
    always_bias: bool = False
    extra: str | None = None
    modules: tuple[str, ...] = ()
    suffixes: tuple[Suffix, ...] = ()
    read_options_for: Callable[[Spec], dict[str, Any]] = no_options
    stack_read_options: Callable[[list[Spec]], dict[str, Any]] | None = None
    write_options_for: Callable[[Spec], dict[str, Any]] = no_options
    output_files: Callable[[Path], list[Path]] = same_file
    input_files: Callable[[Path], list[Path]] = no_files
    gate_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    explain_arrays: Callable[[Any, Spec], list[NamedArray]] = native_arrays
    layout_notes: tuple[str, ...] = ()
    run_time_constants: tuple[RunTimeConstant, ...] = ()
    networks: Callable[[Any], Choices] | None = None
    framework_forward: Callable[[Any, Model, np.ndarray], tuple[str, np.ndarray] | str] | None \
        = None
    names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    activations: Callable[[Spec], bool] | None = None
    notes: Callable[..., list[str]] | None = None
    dtypes: frozenset[str] | None = None
    fixed_input: Callable[[Any], tuple[int, int] | None] | None = None
    cells: frozenset[str] = frozenset({"lstm", "gru", "rnn"})
    reset_after: bool = True
    drops: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    engines: tuple[Engine, ...] = ()
    package: Package | None = None

    def __post_init__(self) -> None:
        unknown = sorted((self.features | set(self.names) | set(self.drops))
                         - set(FEATURE_CODES) - {"reset_after"})
        if (not {"lstm", "gru"} <= self.cells <= {"lstm", "gru", "rnn", "rnn_tanh"}
                or {"rnn", "rnn_tanh"} <= self.cells):
            unknown.append(f"cells {sorted(self.cells)}")
        kinds = sorted(self.one_bias - set(BIAS_KINDS))
        floats = sorted((self.dtypes or frozenset()) - FLOAT_NAMES)
        if floats or self.dtypes == frozenset():
            raise FormatError(f"format {self.name!r}: dtypes {sorted(self.dtypes or ())}; "
                              f"expected None (every float dtype) or some of "
                              f"{sorted(FLOAT_NAMES)}.")
        if unknown or kinds:
            raise FormatError(f"format {self.name!r}: unknown feature(s) {unknown} or bias "
                              f"kind(s) {kinds}; expected features from "
                              f"{sorted(FEATURE_CODES)} and bias kinds from {sorted(BIAS_KINDS)}.")

    # -- the checked verbs ----------------------------------------------------------------

    def read(self, source: Any, **options: Any) -> Model:
        """``source`` read as this format, after checking the options."""
        check_options(f"read(fmt={self.name!r})", options, self.read_options)
        return self.reader(source, **options)

    def write(self, model: Model, path: Any = None, **options: Any) -> Any:
        """``model`` written as this format (saved when ``path`` is given), after checking
        the options and that the format holds every feature the model uses."""
        where = f"write(fmt={self.name!r})"
        check_options(where, options, self.write_options)
        for location, part in _parts(model, where):
            self.check_dtype(part, location)
            self.check_features(part.spec, location)
        return self.writer(model, path=path, **options)

    def param_count(self, model: Model, **options: Any) -> int:
        """Parameters as this format stores ``model``."""
        where = f"param_count(fmt={self.name!r})"
        check_options(where, options, self.write_options)
        for location, part in _parts(model, where):
            self.check_dtype(part, location)
            self.check_features(part.spec, location, "It cannot store such a network, so "
                                "there is nothing to count")
        return int(self.counter(model, **options))

    def read_back_options(self, model: Model) -> dict[str, Any]:
        """The options reading this format's own output of ``model`` needs: each part's
        ``read_options_for`` (the first part's where they disagree), and for a stack of
        several parts ``stack_read_options`` of its layers."""
        parts = [part for _, part in _parts(model, f"{self.name} read back")]
        options: dict[str, Any] = {}
        for part in parts:
            for key, value in self.read_options_for(part.spec).items():
                options.setdefault(key, value)
        layers = [layer for part in parts for layer in part.layers()]
        if len(parts) > 1 and self.stack_read_options is not None:
            options.update(self.stack_read_options([layer.spec for layer in layers]))
        return options

    def source_notes(self, source: Any, **options: Any) -> list[str]:
        """What reading ``source`` with these options leaves out or assumes (the ``notes``
        hook, after checking the options as :meth:`read` does); none without the hook."""
        check_options(f"read(fmt={self.name!r})", options, self.read_options)
        return [] if self.notes is None else self.notes(source, **options)

    def holds_dtype(self, dtype: Any) -> bool:
        """Whether this format stores parameters of ``dtype`` as they are."""
        return self.dtypes is None or np.dtype(dtype).name in self.dtypes

    def check_dtype(self, model: RNN, where: str) -> None:
        """Raise UnsupportedFeatureError when this format cannot store ``model``'s dtype."""
        if self.holds_dtype(model.dtype):
            return
        held = sorted(self.dtypes or ())
        raise UnsupportedFeatureError(
            f"{where}: the {self.name} format cannot hold {model.dtype.name} weights; expected "
            f"{' or '.join(held)} (the format stores and computes in those, so the numbers "
            f"would change). Cast first: model.astype({held[-1]!r}).")

    def check_features(self, spec: Spec, where: str,
                       consequence: str = "Converting would change the numbers, so nothing "
                                          "was written") -> None:
        """Raise UnsupportedFeatureError naming the first feature of ``spec`` this format
        lacks, and the formats that hold it."""
        missing = missing_feature(spec, self.holds(spec))
        if missing is None:
            return
        key, what, why = missing
        holders = _holders(key)
        if holders:
            known = [f"{other.name}: {other.names[key]}" for other in holders
                     if key in other.names]
            alternatives = (f"Formats that hold it: {', '.join(other.name for other in holders)}"
                            + (f" ({'; '.join(known)})." if known else "."))
        else:
            alternatives = "No registered format holds it besides rnnport's own model."
        raise UnsupportedFeatureError(f"{where}: the {self.name} format cannot hold {what}: "
                                      f"{why}. {consequence}. {alternatives}")


    @property
    def held_features(self) -> frozenset[str]:
        """The declared features, ``simple_rnn`` where ``cells`` has the simple RNN
        (``rnn`` or ``rnn_tanh``), ``relu_rnn`` where it has both its activations (``rnn``),
        and ``reset_after`` unless the format declares ``reset_after=False``."""
        simple = ({"simple_rnn"} if self.cells & {"rnn", "rnn_tanh"} else set()) \
            | ({"relu_rnn"} if "rnn" in self.cells else set())
        return self.features | simple | ({"reset_after"} if self.reset_after else frozenset())

    def holds(self, spec: Spec) -> frozenset[str]:
        """The features this format holds of ``spec``: its declared ones, the simple RNN cell
        unless ``cells`` leaves it out, and non-default activations where it names those of
        ``spec`` (``activations``)."""
        held = self.held_features
        if spec.activations and self.activations is not None and self.activations(spec):
            return held | {"activations"}
        return held


def check_options(where: str, options: Mapping[str, Any], known: frozenset[str]) -> None:
    """Raise UnknownOptionError for the first option not in ``known``."""
    for option in options:
        if option not in known:
            listing = ", ".join(sorted(known)) or "none"
            raise UnknownOptionError(
                f"{where}: unknown option {option!r}; this format takes: {listing}."
                f"{close_matches(option, known)}")


def _parts(model: Model, where: str) -> list[tuple[str, RNN]]:
    if isinstance(model, Stack):
        return [(f"{where}, part {index}", part) for index, part in enumerate(model.parts)]
    if isinstance(model, RNN):
        return [(where, model)]
    raise FormatError(f"{where}: expected an rnnport.RNN or Stack (from rnnport.read), got "
                      f"{describe(model)}.")


def _no_holders(feature: str) -> list[Format]:
    return []


# Who holds a feature: the registry knows every format and installs its answer here.
_holders: Callable[[str], list[Format]] = _no_holders


def install_holders(lookup: Callable[[str], list[Format]]) -> None:
    """Let the errors of :meth:`Format.check_features` name the formats that hold a feature."""
    global _holders
    _holders = lookup


# The parameter dtypes a format may declare in ``dtypes``.
FLOAT_NAMES = frozenset({"float16", "float32", "float64"})

# -- the optional features a network may use ---------------------------------------------

# Feature key → (code in the conversion matrix, short name).
FEATURE_CODES = {"projection": ("P", "LSTM projection"), "peepholes": ("p", "LSTM peepholes"),
                 "cell_clip": ("c", "LSTM cell clip"), "gate_clip": ("g", "gate clip"),
                 "input_forget": ("f", "coupled input-forget gates"),
                 "activations": ("a", "non-default activations"),
                 "reset_before": ("r", "reset-before GRU"),
                 "reset_after": ("R", "reset-after GRU"),
                 "reverse": ("v", "reverse-only direction"),
                 "proj_bias": ("B", "LSTM projection bias"),
                 "layer_norm": ("n", "layer-norm LSTM"),
                 "simple_rnn": ("s", "simple RNN cell"),
                 "relu_rnn": ("u", "simple RNN with relu")}
# How two biases combine, by cell: the kinds a one-bias format names in ``one_bias``.
BIAS_KINDS = {"lstm": "LSTM", "gru": "GRU", "gru_reset_before": "reset-before GRU",
              "rnn": "simple RNN"}


def bias_kind(spec: Spec) -> str:
    """``lstm``, ``gru`` (reset after), ``gru_reset_before`` or ``rnn``: how biases combine."""
    if spec.cell == "gru":
        return "gru" if spec.reset_after else "gru_reset_before"
    return "rnn" if spec.cell.startswith("rnn") else spec.cell


def features_of(spec: Spec) -> list[tuple[str, str, str]]:
    """(feature key, what it is, why it matters) for each optional feature ``spec`` uses."""
    used = []
    if spec.cell.startswith("rnn"):
        used.append(("simple_rnn", f"a simple RNN ({spec.cell})", "it has no simple RNN cell, "
                     "only LSTM and GRU cells"))
    if spec.cell == "rnn_relu":
        used.append(("relu_rnn", "a simple RNN with relu (rnn_relu)", "its simple RNN "
                     "computes h' = tanh(W x + R h + b) only, not relu"))
    if spec.proj_size:
        used.append(("projection", f"an LSTM projection (proj_size={spec.proj_size})",
                     "h' = W_hr·h' feeds the next step and the output"))
    if spec.proj_bias:
        used.append(("proj_bias", "an LSTM projection bias", "h' = W_hr·m + b_hr"))
    if spec.layer_norm:
        used.append(("layer_norm", "a layer-norm LSTM", "each gate's pre-activation is "
                     "normalized over its units, scaled and shifted by the bias"))
    if spec.peepholes:
        used.append(("peepholes", "LSTM peepholes", "the gates see the cell state"))
    if spec.cell_clip is not None:
        used.append(("cell_clip", f"an LSTM cell clip ({spec.cell_clip:g})",
                     "c' is clipped before tanh"))
    if spec.gate_clip is not None:
        used.append(("gate_clip", f"a gate clip ({spec.gate_clip:g})",
                     "every pre-activation is clipped before its activation"))
    if spec.input_forget:
        used.append(("input_forget", "coupled input and forget gates",
                     "f = 1 − i replaces the forget gate"))
    if spec.activations:
        names = ", ".join(name for name, _, _ in spec.activations)
        used.append(("activations", f"non-default activations ({names})",
                     "the gates and candidate use other functions than sigmoid and tanh"))
    if spec.reverse:
        used.append(("reverse", "a reverse-only network (its one direction runs from each "
                     "sequence's end)", "its output at time t depends on the inputs after t, "
                     "not before"))
    if spec.cell == "gru" and spec.reset_after:
        used.append(("reset_after", "a reset-after GRU",
                     "its candidate is tanh(W_n x + bW_n + r∘(R_n h + bR_n)), not tanh(W_n x + "
                     "R_n(r∘h) + b); no conversion between the two GRUs is exact"))
    if spec.cell == "gru" and not spec.reset_after:
        used.append(("reset_before", "a reset-before GRU",
                     "its candidate is tanh(W_n x + R_n(r∘h) + b), not tanh(W_n x + "
                     "r∘(R_n h + b_R) + b_W); no conversion between the two GRUs is exact"))
    return used


def missing_feature(spec: Spec, holds: frozenset[str]) -> tuple[str, str, str] | None:
    """``(key, what, why)`` of the first feature ``spec`` uses that is not in ``holds``."""
    return next((used for used in features_of(spec) if used[0] not in holds), None)
