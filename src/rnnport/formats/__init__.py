"""The format registry, and the protocol every format follows.

**The registry** maps a format name to the module that implements it and a one-line
summary; a module is imported the first time its format is used. Adding a format is one
module (or package) under ``rnnport/formats/`` that declares ``FORMAT``, plus one line in
``_REGISTRY`` (or a call to :func:`register`). Nothing outside ``rnnport/formats/`` names a
format: the public API, the command line, ``explain``, the tests and the tools loop over
the registry and read each format's declaration.

**The protocol.** A format module declares ``FORMAT = Format(...)``
(:class:`rnnport.formats._protocol.Format`), with these fields:

Verbs. ``FORMAT.read``, ``FORMAT.write`` and ``FORMAT.param_count`` check the options and
that the format holds every feature of the model, then call the declared functions:

* ``name``: the registered name.
* ``sniff(source) -> bool``: whether ``source`` (a path, an array, a framework object, a
  dict …) looks like this format. Cheap: no framework is imported, no tensor read.
* ``reader(source, **options) -> RNN | Stack``.
* ``writer(model, path=None, **options) -> native object``; with ``path`` it also saves,
  atomically.
* ``counter(model, **options) -> int``: parameters as the format stores them (default:
  the canonical count).

What the format can hold:

* ``read_options`` / ``write_options``: the keyword options ``read`` / ``write`` take.
* ``cells``: the cell families it holds, ``lstm`` and ``gru`` and (the default) ``rnn``,
  or ``rnn_tanh`` for a simple RNN that computes tanh only; a simple RNN is refused by a
  format without one as the feature ``simple_rnn``, a relu one by a format with
  ``rnn_tanh`` as the feature ``relu_rnn``.
* ``reset_after``: whether it holds the reset-after GRU (default True); a runtime with the
  reset-before GRU alone (TensorFlow.js) declares False, and refuses it as the feature
  ``reset_after``.
* ``features``: which optional features of :class:`~rnnport.Spec` it holds, out of
  ``projection``, ``proj_bias``, ``peepholes``, ``layer_norm``, ``cell_clip``,
  ``gate_clip``, ``input_forget``, ``activations``, ``reset_before``, ``reverse``; writing a
  network that uses another one is refused.
* ``dtypes``: the parameter dtypes it stores as they are, out of ``float16``, ``float32``,
  ``float64`` (default None: all three); writing (or counting) a model of another dtype is
  refused with an error naming the dtype and the cast (``model.astype('float32')``).
* ``one_bias``: the bias kinds (``lstm``, ``gru``, ``gru_reset_before``, ``rnn``) whose two
  biases it stores as one sum; ``always_bias``: it stores biases (zeros) even for a
  network without them.
* ``names``: what the format calls a feature it holds, or the reset-after GRU
  (``reset_after``), for messages: ``{"reset_before": "GRUCell"}``.
* ``activations(spec) -> bool`` (optional): for a format that names some non-default
  activations but not all (Keras's own functions), whether it holds those of ``spec``.
* ``extra``: the pip extra its framework objects need, or None; ``modules``: the optional
  modules its verbs import when they need them (``torch``, ``h5py`` …).

Files:

* ``suffixes``: the file name endings it reads; each :class:`~._protocol.Suffix` says what
  such a file is and whether the format also writes it. The command line picks an output
  format by suffix (the longest match; among formats writing the same suffix, the first
  registered).
* ``output_files(path) -> [Path]``: the files ``write(..., path=path)`` creates (default:
  ``path`` itself; a checkpoint writes an index and data shards).
* ``input_files(path) -> [Path]``: files beside ``path`` that reading it opens (default:
  none); no output may be one of them.
* ``package``: the outputs it writes as folders (:class:`~rnnport.io.atomic.Package`: a
  name ending, and the marker file such a folder holds), which a write with overwrite may
  replace; no other folder is ever replaced.

Reading back, and running:

* ``read_options_for(spec) -> dict``: the options reading the format's own output of a
  network of ``spec`` needs, because the native object does not record them (a flat
  buffer's shape, a simple RNN's relu).
* ``stack_read_options(specs) -> dict`` (optional): what reading back a stack of layers
  of these specs needs besides each layer's options (a Keras weights file: the layers'
  names in order). :meth:`~._protocol.Format.read_back_options` joins both for a model.
* ``write_options_for(spec) -> dict``: the options writing such a network needs, for what
  the format must be told rather than shown (a checkpoint's cell clip).
* ``networks(source) -> Choices`` (optional): the networks a source holds when it can hold
  several, and the option that picks one.
* ``notes(source, **options) -> [str]`` (optional): what reading ``source`` with these
  options leaves out or assumes, one sentence each: the other layers, variables and nodes
  the source holds beside the network (a Dense layer, ``fc.*`` keys, optimizer slots, a
  step counter), the other networks, and defaults taken for what the source does not
  record. ``rnnport inspect`` prints them, so nothing is dropped without a word.
* ``framework_forward(source, model, x) -> (label, y) | reason`` (optional): the source's
  own framework computing ``y`` for ``x`` where it is installed; otherwise a sentence
  saying why not. ``rnnport convert --verify`` compares it with rnnport's result.
* ``engines``: the frameworks that run what the format writes, for ``forward(engine=...)``
  (:class:`~._protocol.Engine`: a name, the modules and pip extra it needs, ``build(model,
  device)`` writing one network once into a runnable object, and the devices it takes);
  :func:`engines` lists them, :mod:`.running` dispatches.
* ``fixed_input(source) -> (batch, time) | None`` (optional): the batch and time a file
  fixes its input at (a converted ``.tflite``), so ``--verify`` feeds its framework that
  shape.
* ``drops``: features the format stores that a read option leaves out, by feature key,
  with the option and what changes (``{"cell_clip": "read with cell_clip=None …"}``);
  a conversion whose target refuses such a feature says so.

For ``explain``:

* ``gate_names``: the format's letter for a canonical gate where it differs
  (``{"g": "c"}``).
* ``explain_arrays(native, spec) -> [NamedArray]``: the native object's arrays, named as
  the format names them (default: a dict's float values, a list's items, or one buffer).
* ``layout_notes``: sentences about the layout that hold for every network.
* ``run_time_constants``: numbers the framework adds at run time and never saves (TF1's
  ``forget_bias``), with the value that stores parameters unchanged.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import (
    AmbiguousSourceError,
    FormatError,
    UnknownFormatError,
    UnknownOptionError,
)
from ..model import install_engines
from ..spec import Spec
from ._common import close_matches, describe
from ._protocol import (
    BIAS_KINDS,
    FEATURE_CODES,
    Choices,
    Engine,
    Format,
    NamedArray,
    RunTimeConstant,
    Suffix,
    bias_kind,
    install_holders,
)
from .running import AUTO, NUMPY
from .running import forward as run_engine
from .running import stream as stream_engine

__all__ = [
    "BIAS_KINDS",
    "FEATURE_CODES",
    "Choices",
    "Engine",
    "Entry",
    "Format",
    "NamedArray",
    "RunTimeConstant",
    "Suffix",
    "engine",
    "engines",
    "formats",
    "get",
    "info",
    "input_files",
    "matrix",
    "matrix_markdown",
    "output_files",
    "output_format",
    "part_path",
    "register",
    "resolve",
    "sniff",
    "split_options",
    "sums_biases",
]


@dataclass(frozen=True)
class Entry:
    """One registry line: the format's name, its module and what it is, in one line."""

    name: str
    module: str
    summary: str


_REGISTRY: dict[str, Entry] = {
    entry.name: entry
    for entry in (
        Entry("keras", "rnnport.formats.keras",
              "Keras LSTM/GRU/SimpleRNN/Bidirectional layers, get_weights() lists, "
              ".keras / .weights.h5 / legacy .h5 files (h5py, no Keras)"),
        Entry("cudnn", "rnnport.formats.cudnn",
              "the flat cuDNN weight-space buffer (any layers, directions, bias mode)"),
        Entry("miopen", "rnnport.formats.miopen",
              "the flat ROCm MIOpen weight buffer (LSTM gates i f o c)"),
        Entry("torch", "rnnport.formats.torch",
              "PyTorch nn.LSTM/GRU/RNN and LSTMCell/GRUCell/RNNCell modules, their "
              "state_dicts, and PyTorch's files told by their bytes (torch.save zips and "
              "legacy pickles by any name, .safetensors, .pt2), read without PyTorch"),
        Entry("onnx", "rnnport.formats.onnx",
              "ONNX models with LSTM/GRU/RNN nodes (ModelProto, GraphProto, .onnx path, "
              "external data)"),
        Entry("npz", "rnnport.formats.npz",
              "rnnport's own lossless .npz container: spec and canonical arrays"),
        Entry("tf1", "rnnport.formats.tf1",
              "TensorFlow 1.x cells: checkpoints (read without TensorFlow), name→array dicts"),
        Entry("tf2", "rnnport.formats.tf2",
              "TensorFlow 2 object-based checkpoints and SavedModel folders of Keras 2 layers, "
              "Keras 3 model.export folders (read without TensorFlow), key→array dicts"),
        Entry("tfgraph", "rnnport.formats.tfgraph",
              "frozen TensorFlow graphs (.pb GraphDef): TF1 cells, fused LSTM/GRU ops, CudnnRNN"),
        Entry("tflite", "rnnport.formats.tflite",
              "TFLite / LiteRT flatbuffers (.tflite): fused LSTM/RNN operators and the "
              "converter's WHILE loops (tf_keras SimpleRNN/GRU, every Keras 3 layer; read "
              "without TensorFlow or LiteRT); written as models LiteRT runs"),
        Entry("flax", "rnnport.formats.flax",
              "Flax (JAX) linen and NNX LSTM/GRU/SimpleCell parameter trees, their RNN, "
              "Bidirectional and stacked wrappers, .msgpack checkpoints (NumPy only)"),
        Entry("equinox", "rnnport.formats.equinox",
              "Equinox (JAX) eqx.nn.LSTMCell / GRUCell modules and their arrays, lists for "
              "stacks"),
        Entry("ncnn", "rnnport.formats.ncnn",
              "Tencent ncnn .param/.bin models (pnnx's LSTM, GRU and RNN layers; f32 and f16 "
              "weights; NumPy only), written as models ncnn's Net runs"),
        Entry("openvino", "rnnport.formats.openvino",
              "OpenVINO IR (.xml + .bin): LSTMSequence/GRUSequence/RNNSequence layers, f32 "
              "or f16-compressed weights (read without OpenVINO); written as IRs OpenVINO "
              "runs"),
        Entry("coreml", "rnnport.formats.coreml",
              "Core ML NeuralNetwork models (.mlmodel: LSTM, bidirectional LSTM, GRU and "
              "simpleRecurrent layers, in pipelines too; the loops coremltools writes for "
              "PyTorch GRUs and Keras layers) and ML Program packages (MIL lstm, rnn, "
              "while_loop); read with NumPy alone, written as models coremltools loads"),
        Entry("paddle", "rnnport.formats.paddle",
              "PaddlePaddle nn.LSTM/GRU/SimpleRNN state dicts and .pdparams files, jit.save "
              "inference models (PIR .json or .pdmodel with .pdiparams), read without paddle"),
        Entry("tfjs", "rnnport.formats.tfjs",
              "TensorFlow.js layers models (model.json and its weight shards; read with NumPy "
              "alone, written as models tf.loadLayersModel runs)"),
    )
}


def register(name: str, module: str, summary: str) -> None:
    """Register format ``name``, implemented by the importable ``module`` (which declares
    ``FORMAT``). A registered name cannot be registered again."""
    if not isinstance(name, str) or not name.isidentifier() or name in _REGISTRY:
        raise FormatError(f"register: format name {name!r}; expected a new identifier "
                          f"(registered: {', '.join(_REGISTRY)}).")
    _REGISTRY[name] = Entry(name, module, summary)


def formats() -> list[str]:
    """Names of the registered formats."""
    return list(_REGISTRY)


def info(name: str) -> Entry:
    """The registry line of format ``name``, or an error listing the known formats."""
    if not isinstance(name, str) or name not in _REGISTRY:
        known = ", ".join(_REGISTRY)
        hint = close_matches(name, _REGISTRY) if isinstance(name, str) else ""
        raise UnknownFormatError(f"unknown format {name!r}; known formats: {known}.{hint}")
    return _REGISTRY[name]


def get(name: str) -> Format:
    """Format ``name``'s declaration (its module is imported on first use)."""
    entry = info(name)
    declared = getattr(importlib.import_module(entry.module), "FORMAT", None)
    if not isinstance(declared, Format) or declared.name != name:
        raise FormatError(f"format {name!r}: module {entry.module} declares no FORMAT named "
                          f"{name!r}; expected FORMAT = Format({name!r}, ...).")
    return declared


def sniff(source: Any) -> str:
    """The one format ``source`` can be read as, or an error listing the candidates."""
    matches = [name for name in _REGISTRY if _sniffs(name, source)]
    if len(matches) == 1:
        return matches[0]
    if not matches and isinstance(source, (str, os.PathLike)) and not os.path.exists(source):
        raise FormatError(f"read: {source} does not exist (no such file, folder or checkpoint "
                          "prefix); check the path.")
    what = (f"{source} (a folder)" if os.path.isdir(source) else str(source)) \
        if isinstance(source, (str, os.PathLike)) else describe(source)
    if not matches:
        raise FormatError(
            f"read: cannot tell the format of {what}; pass fmt= with one of "
            f"{', '.join(_REGISTRY)}.")
    raise AmbiguousSourceError(
        f"read: {what} could be read as {' or '.join(matches)}; pass fmt= with one "
        f"of them (e.g. fmt={matches[0]!r}).")


def _sniffs(name: str, source: Any) -> bool:
    """Whether format ``name`` takes ``source``; not when a file it would look for beside
    a path cannot even be looked up (a name too long once its suffix is added …)."""
    try:
        return get(name).sniff(source)
    except OSError:
        return False


def resolve(source: Any, fmt: str | None) -> str:
    """The format to read ``source`` as: ``fmt`` (checked), or the one sniffing finds."""
    return sniff(source) if fmt is None else info(fmt).name


def split_options(source: str, target: str, options: Mapping[str, Any],
                  where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``options`` for a conversion, split into (read options, write options): each goes to
    the side that takes it (an option both take goes to both); one neither takes is an
    error naming what each side takes."""
    reading, writing = get(source).read_options, get(target).write_options
    unknown = sorted(set(options) - reading - writing)
    if unknown:
        raise UnknownOptionError(
            f"{where}: unknown option(s) {', '.join(unknown)} apply to neither {source} "
            f"(reading) nor {target} (writing); reading {source} takes: "
            f"{', '.join(sorted(reading)) or 'none'}; writing {target} takes: "
            f"{', '.join(sorted(writing)) or 'none'}.")
    return ({k: v for k, v in options.items() if k in reading},
            {k: v for k, v in options.items() if k in writing})


def _holders(feature: str) -> list[Format]:
    return [get(name) for name in _REGISTRY if feature in get(name).held_features]


install_holders(_holders)


# -- engines: forward(engine=...) -----------------------------------------------------------


def _declared_engines() -> dict[str, tuple[Format, Engine]]:
    """Every engine the formats declare, by name, with its format, in registry order."""
    found: dict[str, tuple[Format, Engine]] = {}
    for name in _REGISTRY:
        declared = get(name)
        for engine_declared in declared.engines:
            found.setdefault(engine_declared.name, (declared, engine_declared))
    return found


def engines() -> list[str]:
    """Names ``forward(engine=...)`` takes: ``numpy`` (rnnport's own runtime, the default),
    the engines the formats declare, and ``auto`` (the fastest installed one, measured)."""
    return [NUMPY, *_declared_engines(), AUTO]


def engine(name: str) -> Engine:
    """The engine a format declares under ``name``, or an error listing the engines."""
    found = _declared_engines()
    if not isinstance(name, str) or name not in found:
        hint = close_matches(name, engines()) if isinstance(name, str) else ""
        raise UnknownOptionError(f"unknown engine {name!r}; expected one of "
                                 f"{', '.join(map(repr, engines()))}.{hint}")
    return found[name][1]


install_engines(functools.partial(run_engine, declared=_declared_engines),
                functools.partial(stream_engine, declared=_declared_engines))


# -- files ----------------------------------------------------------------------------------


def _suffixes() -> list[tuple[Suffix, str]]:
    """Every declared suffix with its format, longest first, then in registry order."""
    found = [(suffix, name) for name in _REGISTRY for suffix in get(name).suffixes]
    return sorted(found, key=lambda item: -len(item[0].text))


def output_format(path: str | os.PathLike[str]) -> str:
    """The format a file named ``path`` is written in, from its suffix."""
    lower = os.fspath(path).lower()
    matches = [(suffix, name) for suffix, name in _suffixes()
               if lower.endswith(suffix.text.lower())]
    written = [name for suffix, name in matches if suffix.writes]
    if written:
        return written[0]
    read_only = f" ({matches[0][0].what} is read, not written)" if matches else ""
    endings = ", ".join(dict.fromkeys(suffix.text for name in _REGISTRY
                                      for suffix in get(name).suffixes if suffix.writes))
    # A format that writes several files at one name takes a bare prefix (a checkpoint).
    prefixes = [name for name in _REGISTRY if len(get(name).output_files(Path("model"))) > 1]
    prefix = (f" A name without a suffix is a prefix for {' or '.join(prefixes)} "
              f"(e.g. --to {prefixes[0]})." if prefixes else "")
    raise FormatError(f"{os.fspath(path)}: cannot tell the output format from the name"
                      f"{read_only}; pass --to FORMAT. Files rnnport writes end in {endings}."
                      f"{prefix}")


def output_files(name: str, path: str | os.PathLike[str]) -> list[Path]:
    """The files ``write(model, name, path=path)`` creates."""
    return get(name).output_files(Path(path))


def part_path(name: str, path: str | os.PathLike[str], index: int) -> Path:
    """Where part ``index`` of a stack goes when format ``name`` writes one file per part:
    ``.part{index}`` before the format's suffix (``enc.pt`` → ``enc.part0.pt``), or after
    the name when none matches (a checkpoint prefix)."""
    text = os.fspath(path)
    endings = sorted((suffix.text for suffix in get(name).suffixes),
                     key=len, reverse=True)
    for ending in endings:
        if text.lower().endswith(ending.lower()) and len(text) > len(ending):
            return Path(f"{text[:-len(ending)]}.part{index}{text[-len(ending):]}")
    return Path(f"{text}.part{index}")


def input_files(source: object) -> list[Path]:
    """The files a read of ``source`` may open: a path and what any format opens beside it;
    every path in a list or tuple of sources."""
    if isinstance(source, (list, tuple)):
        return [path for item in source for path in input_files(item)]
    if not isinstance(source, (str, os.PathLike)):
        return []
    path = Path(source)
    try:
        return [path, *(extra for name in _REGISTRY for extra in get(name).input_files(path))]
    except (OSError, ValueError):  # a name no file can have (a NUL byte, too long): no files
        return [path]


# -- what converts to what ---------------------------------------------------------------------


def sums_biases(name: str, spec: Spec) -> bool:
    """Whether a trip through format ``name`` changes the biases of a network of ``spec``
    (sums its two, or gives a bias-free one zero biases) while keeping its function."""
    declared = get(name)
    return (spec.bias or declared.always_bias) and bias_kind(spec) in declared.one_bias


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
    declared = {name: get(name) for name in names}
    return [[Pair(source, target,
                  tuple(f for f in FEATURE_CODES
                        if f in declared[source].held_features - declared[target].held_features),
                  tuple(k for k in BIAS_KINDS
                        if k in declared[target].one_bias - declared[source].one_bias))
             for target in names] for source in names]


def matrix_markdown() -> str:
    """The conversion matrix as a Markdown table with its legend."""
    names = formats()
    lines = ["| from ↓ to → | " + " | ".join(f"`{name}`" for name in names) + " |",
             "|---|" + "---|" * len(names)]
    for row in matrix():
        lines.append(f"| `{row[0].source}` | " + " | ".join(p.cell() for p in row) + " |")
    codes = ", ".join(f"{code} {what}" for code, what in FEATURE_CODES.values())
    summed = "; ".join(
        f"`{name}`: {', '.join(v for k, v in BIAS_KINDS.items() if k in get(name).one_bias)}"
        for name in names if get(name).one_bias)
    lines += [
        "",
        "* ✓: every network the source format holds converts, and its arrays read back "
        "bit-equal.",
        "* Σ: the target keeps one bias where the source keeps two, so they are summed (the "
        f"same function, rounded once): {summed}. "
        + " ".join(f"`{name}` also stores zero biases for a network without them."
                   for name in names if get(name).always_bias),
        *(f"* `{name}` holds the non-default activations it has names for, not others "
          "(its module's docstring lists them)." for name in names
          if get(name).activations is not None),
        f"* −x: networks using feature x are refused with an error naming it: {codes}.",
        *(f"* `{name}` stores {' and '.join(sorted(get(name).dtypes or ()))} weights; "
          "other dtypes are refused with an error naming the cast." for name in names
          if get(name).dtypes is not None),
        "* Every format holds LSTM and GRU cells and, unless −s or −u says otherwise, simple "
        "RNN (tanh and relu) cells; any number of layers, one or two directions, with or without "
        "biases.",
    ]
    return "\n".join(lines)


class _Registry(types.ModuleType):
    """``rnnport.formats`` is this package and, called, the list of format names (the
    public ``rnnport.formats()``)."""

    def __call__(self) -> list[str]:
        return formats()


sys.modules[__name__].__class__ = _Registry
