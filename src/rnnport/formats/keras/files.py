"""Keras model files, read and written with h5py alone (Keras itself is never imported).

The layers inside follow :mod:`rnnport.formats.keras.layers`, which this module builds on.

**Keras 3 ``.keras``** (``Model.save("m.keras")``) is a zip archive::

    metadata.json       {"keras_version": "3.x", "date_saved": "..."}
    config.json         {"class_name": "Sequential" | "Functional", "config": {"layers": [
                          {"class_name": "LSTM", "config": {"name": ..., "units": ..., ...},
                           "name": ..., "inbound_nodes": [...]},   # the last two: Functional
                          ...]}}
    model.weights.h5    the variables, laid out as below

**Keras 3 weights** (``model.weights.h5`` in the archive; ``Model.save_weights("m.weights.h5")``)
keep one group per entry of ``model.layers``, keyed by the layer's *class* in snake case and
numbered by order among layers of that class (``lstm``, ``lstm_1``, ``gru``,
``simple_rnn``, ``bidirectional``, ``input_layer`` (Functional only), ``dense`` …)::

    /vars                                     attrs name = the model's name
    /layers/<key>/vars                        attrs name = the layer's name (Keras 3; tf_keras
                                              writes no name)
    /layers/<key>/cell/vars/0, 1, 2           LSTM, GRU, SimpleRNN: kernel (I, G·H),
                                              recurrent_kernel (H, G·H), bias (absent when
                                              use_bias=False)
    /layers/<key>/forward_layer/cell/vars/0…  Bidirectional: the forward layer's arrays, and
    /layers/<key>/backward_layer/cell/vars/0… the backward layer's

(tf_keras ≥ 2.13 writes the same layout without names, older TensorFlow 2.13 under
``_layer_checkpoint_dependencies`` instead of ``layers``.) A weights file holds no config:
cells come from the shapes, and the order of layers of *different* classes is not recorded
(``lstm`` and ``gru`` are just names), so a stack of mixed layers needs ``layer=[names…]``.

**Legacy HDF5** (tf.keras 1.x/2.x, Keras 2, tf_keras, and Keras 3's ``Model.save("m.h5")``)::

    /                         attrs model_config (JSON, as config.json), keras_version, backend
    /model_weights            attrs layer_names = names of the layers, in model order
    /model_weights/<name>     attrs weight_names = ["<name>/lstm_cell/kernel:0",
                              "<name>/lstm_cell/recurrent_kernel:0", "<name>/lstm_cell/bias:0"]
                              (get_weights() order; a Bidirectional lists forward_<inner>/…
                              then backward_<inner>/…; Keras 3 drops the ``:0``)
    /model_weights/<name>/<weight name>   the arrays

``save_weights("m.h5")`` writes the same at the root, without ``model_config``. Keras 1
wrote the same layout with its own layer configs and per-gate arrays (``lstm_1_W_i`` …);
:mod:`rnnport.formats.keras.keras1` turns those layers into Keras 2's before they are read. Attributes
over 64 KiB are split into ``layer_names0``, ``layer_names1`` …. ``CuDNNLSTM`` /
``CuDNNGRU`` layers exist only here: ``<name>/kernel:0``, ``recurrent_kernel:0``,
``bias:0`` with bias ``(8H,)`` / ``(6H,)`` and cuDNN's matrices reshaped, not transposed
(see :mod:`rnnport.formats.keras.layers`); a weights file tells them by that bias.

**Stacks.** The recurrent layers (LSTM, GRU, SimpleRNN, Bidirectional, CuDNNLSTM,
CuDNNGRU) that follow one another — in a Sequential's order, or output to input in a
Functional graph — with only passive layers between (InputLayer, Masking, Dropout, …) form a
stack. Other layers (a Dense head, an Embedding) are left out unless they sit between
recurrent layers, which makes separate stacks; then ``layer="name"`` picks the stack holding
that layer and ``layer=["a", "b"]`` exactly those layers, in that order.

**Safety.** Zip members are read into memory by name (never extracted); an archive with an
absolute member name or one containing ``..`` is refused, as is a member that declares more
bytes than it could store (:mod:`rnnport.io.archive`). HDF5 is parsed by h5py in a separate,
limited process (:mod:`rnnport.io.hdf5`), so a file that would crash or stall the HDF5
library only fails the read. HDF5 soft and external links, external and virtual datasets
are refused (they could read other files). Every damaged or unexpected input is a
:class:`~rnnport.errors.FormatError` naming the file and the layer or dataset.

**Writing** gives a Keras 3 Sequential: an ``InputLayer`` ``(None, None, I)`` in the model's
dtype, then one layer per rnnport layer (LSTM / GRU / SimpleRNN, in a Bidirectional when
bidirectional), ``return_sequences=True`` throughout. ``.keras`` gets the archive (zip
members stored, fixed timestamps, so equal models give equal bytes); ``.weights.h5`` the
weights alone, for ``model.load_weights`` on that architecture. Legacy ``.h5`` is not written.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ... import budget
from ..._version import package_version
from ...errors import (
    AmbiguousSourceError,
    FormatError,
    RnnportError,
    ShapeError,
    UnsupportedFeatureError,
)
from ...gates import gate_family
from ...io import hdf5, jsontext
from ...io.archive import open_zip, read_member
from ...io.atomic import atomic_write
from ...model import Model
from ...spec import Spec
from .._common import close_matches, is_path, require
from . import keras1
from . import layers as keras_layers

__all__ = ["is_keras_file", "layer_names", "loads_into", "notes", "read_file", "write_file"]

SUFFIXES = (".keras", ".h5", ".hdf5")
ARCHIVE_CONFIG = "config.json"
ARCHIVE_WEIGHTS = "model.weights.h5"
ARCHIVE_METADATA = "metadata.json"
MAX_CONFIG = 32 << 20  # bytes of JSON: a model's config is kilobytes, a huge one megabytes
CONTAINERS = ("layers", "_layer_checkpoint_dependencies")
# Recurrent layers rnnport cannot read; reading the rest of a model must not hide them.
OTHER_RECURRENT = {"RNN", "ConvLSTM1D", "ConvLSTM2D", "ConvLSTM3D", "StackedRNNCells",
                   "PeepholeLSTMCell", "LSTMCell", "GRUCell", "SimpleRNNCell"}
READABLE = "LSTM, GRU, SimpleRNN, Bidirectional, CuDNNLSTM and CuDNNGRU"
READABLE_ANY = "LSTM, GRU, SimpleRNN, Bidirectional, CuDNNLSTM or CuDNNGRU"
KERAS_CLASSES = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "SimpleRNN", "rnn_relu": "SimpleRNN"}
GATES = {"LSTM": 4, "GRU": 3, "SimpleRNN": 1, "CuDNNLSTM": 4, "CuDNNGRU": 3}


def _snake(name: str) -> str:
    """Keras's ``naming.to_snake_case``: the key of a layer's group in a Keras 3 weights file."""
    name = re.sub(r"\W+", "", name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


PASSIVE_KEYS = {_snake(name) for name in keras_layers.PASSIVE_LAYERS} | {"input"}
RNN_KEYS = {_snake(name) for name in (*keras_layers.RNN_LAYERS, *keras_layers.WRAPPERS)}


def _unique(name: str, used: dict[str, int]) -> str:
    """``lstm``, ``lstm_1``, … as Keras numbers groups of one class."""
    if name in used:
        used[name] += 1
        return f"{name}_{used[name]}"
    used[name] = 0
    return name


def _split_key(key: str) -> tuple[str, int]:
    match = re.fullmatch(r"(.+?)_(\d{1,9})", key)  # longer digits: part of the name
    return (match.group(1), int(match.group(2))) if match else (key, 0)


def is_keras_file(source: Any) -> bool:
    """Whether ``source`` is a path to an existing file named like a Keras model file."""
    try:
        path = Path(source)
        return path.name.lower().endswith(SUFFIXES) and path.is_file()
    except (TypeError, ValueError, OSError):
        return False


@dataclass
class FileLayer:
    """One entry of a model's layer list, as far as the file tells it."""

    name: str
    class_name: str | None                  # None: a weights file, which has no config
    config: Mapping[str, Any] | None
    where: str                              # where its weights live, for messages
    kind: str = "other"     # rnn | passive | recurrent (unreadable) | nested (a model holding
                            # recurrent layers) | other
    arrays: list[np.ndarray] = field(default_factory=list)   # forward, then backward
    datasets: list[str] = field(default_factory=list)        # their paths in the file
    inputs: tuple[str, ...] | None = None   # Functional: the layers feeding it
    aliases: tuple[str, ...] = ()           # other names it answers to (its group key)
    keras_version: str | None = None        # of the Keras that wrote the file, when it says
    keras1: str | None = None               # a Keras 1 layer: how that was told

    def describe(self) -> str:
        if self.class_name:
            return f"{self.name!r} ({self.class_name})"
        if self.aliases and self.aliases[0] != self.name:
            return f"{self.name!r} (group {self.aliases[0]})"
        return repr(self.name)


# -- read ------------------------------------------------------------------------------


def read_file(source: Any, **options: Any) -> Model:
    """Read the recurrent stack of a Keras model or weights file (see the module docstring)."""
    keras_layers.check_version_option(options, f"read(fmt='keras'): {source}")
    path, _, chosen = _chosen(source, options.pop("layer", None))
    _check_parameters(path, chosen)
    for option, gates, owner in (("activation", {1}, "SimpleRNN"), ("reset_after", {3}, "GRU"),
                                 ("recurrent_activation", {3, 4}, "LSTM and GRU")):
        if option in options and not any(_gates(layer) in gates for layer in chosen):
            raise FormatError(f"{path}: option {option}= applies to {owner} layers, and the "
                              f"layers read ({', '.join(layer.describe() for layer in chosen)}) "
                              "have none; drop the option.")
    return keras_layers.stack_layers([_read_layer(layer, options) for layer in chosen])


def _check_parameters(path: Path, chosen: Sequence[FileLayer]) -> None:
    """Refuse a network whose parameters, at the dtype read, take more bytes than the
    ``expansion`` limit allows for the file's size (compressed datasets can hold a thousand
    times what the file stores)."""
    size = path.stat().st_size
    total = sum(int(array.nbytes) for layer in chosen for array in layer.arrays)
    if total > budget.allowance("expansion", size):
        raise budget.exceeded(
            str(path), f"the network read ({len(chosen)} layer(s)) has {total:,} bytes of "
            "parameters", "expansion", size, total)


def stacks(source: Any) -> list[tuple[str, str]]:
    """The separate recurrent stacks of a model file whose config records the order of
    its layers: (the name of a layer that picks the stack, what the stack is) each."""
    if not (is_path(source) and Path(source).name.lower().endswith(SUFFIXES)
            and Path(source).is_file()):
        return []
    layers, functional, ordered = _file_layers(Path(source))
    if not ordered:
        return []
    return [(stack[0].name, " → ".join(layer.describe() for layer in stack))
            for stack in _stacks(layers, functional)]


def notes(source: Any, **options: Any) -> list[str]:
    """What reading the file with ``options`` leaves out or assumes (see ``Format.notes``):
    the layers beside the stack read, and the gate activation a weights-only file from an
    old Keras is taken to have, and how a Keras 1 layer was told."""
    path, layers, chosen = _chosen(source, options.get("layer"))
    read = {id(layer) for layer in chosen}
    out = []
    for layer in layers:
        if id(layer) in read:
            if layer.keras1:
                out.append(f"layer {layer.describe()}: a Keras 1 layer ({layer.keras1}); its "
                           "gates' arrays, found by name, fused in Keras 2's order.")
            if layer.class_name is None and "recurrent_activation" not in options:
                assumed = _assumed_activation(layer, options, f"{path}, layer {layer.describe()}")
                if assumed:
                    out.append(
                        f"layer {layer.describe()}: a weights-only file records no activations; "
                        f"hard_sigmoid gates assumed, the default of the Keras "
                        f"({options.get('keras_version', layer.keras_version)}) that wrote it. Pass "
                        "recurrent_activation='sigmoid' if the model was built with it.")
            continue
        note = _left_out(layer)
        if note:
            out.append(f"layer {layer.describe()}: {note}")
    return out


def _chosen(source: Any, choice: Any) -> tuple[Path, list[FileLayer], list[FileLayer]]:
    """The file's path, its layers, and the stack ``layer=`` (``choice``) picks."""
    path = Path(source)
    if not path.name.lower().endswith(SUFFIXES):
        raise FormatError(
            f"read(fmt='keras'): {path}: expected a Keras file named *.keras, *.h5, *.hdf5 or "
            f"*.weights.h5, got suffix {path.suffix or 'none'!r}. Rename the file if it is one.")
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise FormatError(f"read(fmt='keras'): {path} {what}; expected a Keras model file. "
                          "Check the path.")
    layers, functional, ordered = _file_layers(path)
    return path, layers, _select(layers, choice, str(path), functional=functional,
                                 ordered=ordered)


def _left_out(layer: FileLayer) -> str | None:
    """Why ``layer``, which the stack read does not hold, is not read; None for input layers."""
    if layer.kind == "rnn":
        return f"recurrent, another network here; not read (layer={layer.name!r} reads it)."
    if layer.kind in ("recurrent", "nested"):
        return _unreadable(layer) + "."
    if layer.class_name == "Masking":
        value = (layer.config or {}).get("mask_value", 0.0)
        return (f"Keras skips the time steps whose inputs all equal mask_value={value!r}, "
                "carrying the state over them; rnnport runs every step it is given, so pass "
                "only the unmasked steps.")
    if layer.class_name == "InputLayer" or (layer.class_name is None
                                            and layer.name.startswith("input")):
        return None
    if layer.kind == "passive":
        return "no weights, and no effect at inference; not read."
    return "not recurrent; not read (rnnport reads the recurrent layers)."


def _file_layers(path: Path) -> tuple[list[FileLayer], bool, bool]:
    """The file's layers, whether it is Functional, and whether their order is recorded."""
    require("h5py", extra="keras", purpose="Reading Keras model files")
    try:
        if path.name.lower().endswith(".keras"):
            return _archive_layers(path)
        return _h5_layers(path)
    except RecursionError:  # a config nested deeper than any model's
        raise FormatError(f"{path}: the model config is nested too deeply to be a Keras "
                          "config; the file is damaged or built to break a reader.") from None


def _gates(layer: FileLayer) -> int:
    """Gate blocks of a layer's recurrent kernel (H, G·H); 0 when it cannot tell."""
    recurrent = layer.arrays[1] if len(layer.arrays) > 1 else None
    if recurrent is None or recurrent.ndim != 2 or not recurrent.shape[0]:
        return 0
    return recurrent.shape[1] // recurrent.shape[0]


def _archive_layers(path: Path) -> tuple[list[FileLayer], bool, bool]:
    with open_zip(path, ".keras archive (the zip file Keras 3 writes with "
                  "model.save('m.keras'))") as archive:
        names = set(archive.namelist())
        missing = [name for name in (ARCHIVE_CONFIG, ARCHIVE_WEIGHTS) if name not in names]
        if missing:
            found = ", ".join(sorted(names)) or "nothing"
            other = (" It holds model.weights.npz, which rnnport does not read; save the model "
                     "with the default HDF5 weights." if "model.weights.npz" in names else "")
            raise FormatError(
                f"{path}: the archive lacks {' and '.join(missing)}; expected config.json and "
                f"model.weights.h5 (what Keras 3 model.save('m.keras') writes), found {found}."
                f"{other}")
        config_bytes = read_member(archive, ARCHIVE_CONFIG, str(path), MAX_CONFIG)
        weights_bytes = read_member(archive, ARCHIVE_WEIGHTS, str(path))
        metadata = (_json(read_member(archive, ARCHIVE_METADATA, str(path), MAX_CONFIG),
                          f"{path}, {ARCHIVE_METADATA}") if ARCHIVE_METADATA in names else {})
    config = _json(config_bytes, f"{path}, {ARCHIVE_CONFIG}")
    version = metadata.get("keras_version") if isinstance(metadata, Mapping) else None
    where = f"{path}, {ARCHIVE_WEIGHTS}"
    with _open_h5(weights_bytes, where) as h5:
        return _versioned(_keras3_layers(h5, config, where, f"{path}, {ARCHIVE_CONFIG}"),
                          None if version is None else str(version))


def _json(data: Any, where: str) -> Any:
    try:  # Python's json.dumps, which Keras writes with, writes NaN and Infinity
        return jsontext.loads(data, where, max_bytes=MAX_CONFIG, allow_nan=True)
    except jsontext.JSONTextError as error:
        raise FormatError(f"{where}: not valid JSON ({error.problem}); expected the model "
                          "config Keras writes. The file may be damaged.") from None


@contextmanager
def _open_h5(source: Path | bytes, where: str) -> Iterator[hdf5.Group]:
    """The file's tree, read by :func:`rnnport.io.hdf5.snapshot` in a limited child process."""
    h5 = hdf5.snapshot(source, where)
    try:
        yield h5
    except RnnportError:
        raise
    except (KeyError, TypeError) as error:
        raise FormatError(f"{where}: cannot read the HDF5 data ({type(error).__name__}: "
                          f"{error}); the file may be truncated or damaged.") from None


def _versioned(found: tuple[list[FileLayer], bool, bool],
               version: str | None) -> tuple[list[FileLayer], bool, bool]:
    for layer in found[0]:
        layer.keras_version = version
    return found


def _h5_layers(path: Path) -> tuple[list[FileLayer], bool, bool]:
    where = str(path)
    with _open_h5(path, where) as h5:
        version = _text(h5.attrs["keras_version"]) if "keras_version" in h5.attrs else None
        found = _versioned(_h5_file_layers(h5, where), version)
    for layer in found[0]:
        if layer.kind == "rnn" and layer.datasets and keras1.is_keras1(version, layer.datasets):
            _from_keras1(layer, version)
    return found


def _from_keras1(layer: FileLayer, version: str | None) -> None:
    """A Keras 1 layer's per-gate arrays and config in Keras 2's form (see
    :mod:`rnnport.formats.keras.keras1`)."""
    location = f"{layer.where}, layer {layer.describe()}"
    layer.arrays, layer.datasets = keras1.layer_arrays(layer.datasets, layer.arrays, location)
    if version is None:
        layer.keras_version = "1"
        layer.keras1 = "told by its weight names; the file records no keras_version"
    else:
        layer.keras1 = f"keras_version {version} on the file's root"
    if layer.class_name is not None and layer.config is not None:
        layer.config = keras1.layer_config(layer.class_name, layer.config, location)


def _h5_file_layers(h5: hdf5.Group, where: str) -> tuple[list[FileLayer], bool, bool]:
    if "model_config" in h5.attrs:
        config = _json(h5.attrs["model_config"], f"{where}, attribute model_config")
        weights = _child(h5, "model_weights", where)
        if weights is None or not isinstance(weights, hdf5.Group):
            raise FormatError(f"{where}: a legacy Keras model file without a model_weights "
                              "group; expected /model_weights/<layer>/… (what "
                              "model.save('m.h5') writes). The file may be damaged.")
        return _legacy_layers(weights, config, where)
    if _attr_strings(h5, "layer_names", where) is not None:
        return _legacy_layers(h5, None, where)
    if any(name in h5 for name in CONTAINERS) or "vars" in h5:
        return _keras3_layers(h5, None, where, where)
    raise FormatError(
        f"{where}: an HDF5 file, but not a Keras one; expected Keras 3 weights (groups "
        "layers/<layer>/…) or a legacy Keras file (attribute layer_names or model_config), "
        f"found top-level entries {sorted(h5)!r}.")


# -- h5 access (links and external data refused) ------------------------------------------


Claims = dict[int, tuple[FileLayer, str]]  # a dataset's id → the layer reading it, its group


def _claim(claimed: Claims, node: hdf5.Node | None, layer: FileLayer, group: str) -> None:
    """Record that ``layer`` (whose weights are under ``group``) reads dataset ``node``;
    refuse a second layer reading it. Keras saves each layer's weights once, under that
    layer; a layer list naming one group for many layers (a name repeated, or one layer's
    group inside another's) would build each of them anew from the same bytes: 300 layers
    from one 6 MB group make a 1.9 GB network."""
    if node is None:
        return
    first, first_group = claimed.setdefault(id(node), (layer, group))
    if first is not layer:
        groups = f"group {group}" if group == first_group else \
            f"groups {first_group} and {group}"
        layers = (f"two layers named {layer.describe()}" if first.describe() == layer.describe()
                  else f"layers {first.describe()} and {layer.describe()}")
        raise FormatError(
            f"{layer.where}: {layers} both read the stored weights {node.name} ({groups}); "
            "expected each layer to read weights of its own, as Keras saves them. The layer "
            "list does not fit the weights: the file is damaged, or built to make one stored "
            "group count as many layers. Nothing was read.")


def _child(group: hdf5.Node, name: str, where: str) -> hdf5.Node | None:
    """``group[name]`` through hard links only; None when absent."""
    node = group
    for part in name.split("/"):
        if not part:
            continue
        if not isinstance(node, hdf5.Group):
            raise FormatError(f"{where}: {node.name} is a dataset, but {name!r} goes through "
                              "it as if it were a group; the file is damaged.")
        link = node.link(part)
        if link is None:
            return None
        if not isinstance(link, hdf5.HardLink):
            raise FormatError(
                f"{where}: {node.name.rstrip('/')}/{part} is an HDF5 {type(link).__name__}; "
                "Keras never writes links, and one can point outside the file. Refusing to "
                "follow it.")
        node = node[part]
    return node


def _dataset(node: hdf5.Node | None, where: str) -> np.ndarray:
    if not isinstance(node, hdf5.Dataset):
        what = "missing" if node is None else f"{node.name} is a group"
        raise FormatError(f"{where}: {what}; expected a dataset (an array).")
    if node.is_virtual or node.external:
        raise FormatError(f"{where}: dataset {node.name} keeps its data in other files "
                          "(virtual or external storage); Keras never writes that. Refusing to "
                          "read it.")
    if node.problem is not None:
        raise FormatError(f"{where}: dataset {node.name} cannot be read: {node.problem}.")
    array = np.asarray(node[()])
    if _text(node.attrs.get("dtype", "")) == "bfloat16" and array.dtype.itemsize == 2:
        # bfloat16 is the top half of a float32: widening is exact.
        widened = array.view(np.uint16).astype(np.uint32) << 16
        array = widened.view(np.float32)
    return array


def _text(value: Any) -> str:
    return value.decode("utf8", "replace") if isinstance(value, (bytes, np.bytes_)) \
        else str(value)


def _attr_strings(node: hdf5.Node, name: str, where: str) -> list[str] | None:
    """A list-of-strings attribute, joined from ``name0``, ``name1``… when Keras split it."""
    if name in node.attrs:
        values = [node.attrs[name]]
    elif f"{name}0" in node.attrs:
        values, index = [], 0
        while f"{name}{index}" in node.attrs:
            values.append(node.attrs[f"{name}{index}"])
            index += 1
    else:
        return None
    out: list[str] = []
    for value in values:
        out.extend(_text(item) for item in np.atleast_1d(np.asarray(value, dtype=object)))
    return out


# -- model configs ------------------------------------------------------------------------


# (name, class name, layer config, the layers feeding it): a model config's layer; a legacy
# weights file knows the names only.
ModelEntry = tuple[str, str, Mapping[str, Any], tuple[str, ...] | None]
ConfigEntry = tuple[str, str | None, Mapping[str, Any] | None, tuple[str, ...] | None]


def _model_entries(config: Any, where: str) -> tuple[list[ModelEntry], bool]:
    """``(name, class_name, layer config, inputs)`` per layer of a model config, and whether
    the model is Functional (inputs known) rather than Sequential (inputs: the layer before)."""
    if not isinstance(config, Mapping):
        raise FormatError(f"{where}: expected a model config object, got {type(config).__name__}.")
    model_class = config.get("class_name")
    inner = config.get("config")
    if model_class == "Sequential":
        entries = inner if isinstance(inner, list) else (
            inner.get("layers") if isinstance(inner, Mapping) else None)
        functional = False
    elif isinstance(inner, Mapping) and ("input_layers" in inner or model_class in
                                         keras_layers.MODEL_CLASSES):
        entries = inner.get("layers")
        functional = True
    else:
        raise UnsupportedFeatureError(
            f"{where}: the model is a {model_class!r}, whose config does not list its layers "
            "(a subclassed model); rnnport reads Sequential and Functional models. Save the "
            "recurrent layers in a Sequential model, or read layer.get_weights() directly.")
    if not isinstance(entries, list):
        raise FormatError(f"{where}: the {model_class} config has no list of layers; expected "
                          "config.layers = [{class_name, config}, …]. The file may be damaged.")
    out: list[ModelEntry] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("class_name"), str):
            raise FormatError(f"{where}: layer {index} of the config is not "
                              "{class_name, config, …}; the file may be damaged.")
        raw = entry.get("config")
        layer_config: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        name = entry.get("name") or layer_config.get("name") or f"layer {index}"
        inputs = _producers(entry.get("inbound_nodes", [])) if functional else None
        out.append((str(name), entry["class_name"], layer_config, inputs))
    return out, functional


def _producers(nodes: Any) -> tuple[str, ...]:
    """Names of the layers whose outputs a Functional layer takes (Keras 3 ``keras_history``
    or legacy ``[name, node, tensor, kwargs]`` lists)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, Mapping):
            history = value.get("keras_history")
            if isinstance(history, (list, tuple)) and history and isinstance(history[0], str):
                found.append(history[0])
                return
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            if (len(value) in (3, 4) and isinstance(value[0], str)
                    and isinstance(value[1], int) and not isinstance(value[1], bool)):
                found.append(value[0])
                return
            for item in value:
                walk(item)

    walk(nodes)
    return tuple(dict.fromkeys(found))


def _kind(class_name: str, config: Mapping[str, Any]) -> str:
    if class_name in keras_layers.RNN_LAYERS:
        return "rnn"
    if class_name in keras_layers.WRAPPERS:
        inner = config.get("layer")
        inner_class = inner.get("class_name") if isinstance(inner, Mapping) else None
        return "rnn" if isinstance(inner_class, str) and inner_class in keras_layers.RNN_LAYERS \
            else "recurrent"
    if class_name in keras_layers.PASSIVE_LAYERS:
        return "passive"
    if isinstance(config.get("layers"), list):  # a nested model
        return "nested" if _holds_recurrent(config["layers"]) else "other"
    if class_name in OTHER_RECURRENT or any(key in config for key in (
            "recurrent_initializer", "recurrent_activation", "cell")):
        return "recurrent"
    return "other"


def _holds_recurrent(value: Any) -> bool:
    if isinstance(value, Mapping):
        if value.get("class_name") in {*keras_layers.RNN_LAYERS, *OTHER_RECURRENT}:
            return True
        return any(_holds_recurrent(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_recurrent(item) for item in value)
    return False


# -- Keras 3 weights ----------------------------------------------------------------------


def _keras3_layers(h5: hdf5.Group, config: Any, where: str,
                   config_where: str) -> tuple[list[FileLayer], bool, bool]:
    container = next((_child(h5, name, where) for name in CONTAINERS if name in h5), None)
    groups: dict[str, hdf5.Group] = {}
    if isinstance(container, hdf5.Group):
        for key in container:
            node = _child(container, key, where)
            if isinstance(node, hdf5.Group):
                groups[key] = node
    names: dict[str, str] = {}  # layer name → group key
    for key, group in groups.items():
        own = _child(group, "vars", where)
        if own is not None and "name" in own.attrs:
            names[_text(own.attrs["name"])] = key
    if config is None:
        return _keras3_weights_only(groups, names, where), False, False
    entries, functional = _model_entries(config, config_where)
    used: dict[str, int] = {}
    claimed: Claims = {}
    layers = []
    for name, class_name, layer_config, inputs in entries:
        guess = _unique(_snake(class_name), used)
        # Keras 3 records each layer's name; tf_keras does not, and then the numbering decides.
        group_key = names.get(name)
        if group_key is None and guess in groups and guess not in names.values():
            group_key = guess
        layer = FileLayer(name, class_name, layer_config, where, _kind(class_name, layer_config),
                          inputs=inputs)
        if layer.kind == "rnn":
            if group_key is None:
                raise FormatError(
                    f"{where}: no weights for layer {layer.describe()}; expected a group "
                    f"layers/{guess}/ (with cell/vars) for it. The weights may come from another "
                    "model; save the model again.")
            layer.where = f"{where}, {groups[group_key].name}"
            layer.aliases = (group_key,)
            _keras3_arrays(groups[group_key], layer, class_name in keras_layers.WRAPPERS,
                           claimed)
        layers.append(layer)
    return layers, functional, True


def _keras3_weights_only(groups: Mapping[str, hdf5.Group], names: Mapping[str, str],
                         where: str) -> list[FileLayer]:
    key_names = {key: name for name, key in names.items()}
    claimed: Claims = {}
    layers = []
    for key in sorted(groups, key=_split_key):
        group = groups[key]
        base, _ = _split_key(key)
        name = key_names.get(key, key)
        layer = FileLayer(name, None, None, f"{where}, {group.name}", aliases=(key,))
        bidirectional = "forward_layer" in group and "backward_layer" in group
        if "cell" in group or bidirectional:
            layer.kind = "rnn" if base in RNN_KEYS else "recurrent"
            if layer.kind == "rnn":
                _keras3_arrays(group, layer, bidirectional, claimed)
        elif base in PASSIVE_KEYS:
            layer.kind = "passive"
        layers.append(layer)
    return layers


def _keras3_arrays(group: hdf5.Group, layer: FileLayer, bidirectional: bool,
                   claimed: Claims) -> None:
    sides = ("forward_layer", "backward_layer") if bidirectional else ("",)
    for side in sides:
        node = _child(group, side, layer.where) if side else group
        if node is None:
            raise FormatError(f"{layer.where}: layer {layer.describe()} has no {side} group; "
                              "expected forward_layer/ and backward_layer/ for a Bidirectional "
                              "layer. The file may be damaged.")
        cell = _child(node, "cell/vars", layer.where)
        if cell is None:
            cell = _child(node, "vars", layer.where)
        if cell is None or not isinstance(cell, hdf5.Group):
            raise FormatError(f"{layer.where}: layer {layer.describe()} has no {node.name}/cell/"
                              "vars group; expected the cell's arrays there (0: kernel, "
                              "1: recurrent_kernel, 2: bias). The file may be damaged.")
        numbered = {key: int(key) for key in cell if re.fullmatch(r"[0-9]{1,9}", key)}
        keys = sorted(cell, key=lambda key: (key not in numbered, numbered.get(key, 0), key))
        if len(numbered) != len(keys):
            raise FormatError(f"{layer.where}: {cell.name} holds {keys}; expected datasets "
                              "named 0, 1, 2 (kernel, recurrent_kernel, bias).")
        for key in keys:
            path = f"{cell.name}/{key}"
            node = _child(cell, key, layer.where)
            _claim(claimed, node, layer, group.name)
            layer.arrays.append(_dataset(node, f"{layer.where}, {path}"))
            layer.datasets.append(path)


# -- legacy HDF5 --------------------------------------------------------------------------


def _legacy_layers(root: hdf5.Group, config: Any,
                   where: str) -> tuple[list[FileLayer], bool, bool]:
    layer_names = _attr_strings(root, "layer_names", where)
    if layer_names is None:
        raise FormatError(f"{where}: {root.name} has no layer_names attribute; expected the "
                          "list of layers a legacy Keras file keeps there. The file may be "
                          "damaged.")
    functional = False
    entries: list[ConfigEntry]
    if config is not None:
        configured, functional = _model_entries(config, f"{where}, attribute model_config")
        entries = list(configured)
    else:
        entries = [(name, None, None, None) for name in layer_names]
    stored = set(layer_names)
    claimed: Claims = {}
    layers = []
    for name, class_name, layer_config, inputs in entries:
        kind = _kind(class_name, layer_config or {}) if class_name is not None else "other"
        layer = FileLayer(name, class_name, layer_config, where, kind, inputs=inputs)
        if name in stored:
            group = _child(root, name, where)
            if group is None or not isinstance(group, hdf5.Group):
                raise FormatError(f"{where}: layer_names lists {name!r} but {root.name}/{name} is "
                                  "not a group; the file may be damaged.")
            layer.where = f"{where}, {group.name}"
            weight_names = _attr_strings(group, "weight_names", where) or []
            if class_name is None:
                layer.kind = _legacy_kind(name, weight_names)
            if layer.kind == "rnn":
                for weight in weight_names:
                    node = _child(group, weight, layer.where)
                    if node is None:
                        raise FormatError(f"{layer.where}: weight_names lists {weight!r}, but the "
                                          "group holds no such dataset; the file may be "
                                          "damaged.")
                    _claim(claimed, node, layer, group.name)
                    layer.arrays.append(_dataset(node, f"{layer.where}/{weight}"))
                    layer.datasets.append(f"{group.name}/{weight}")
        elif layer.kind == "rnn":
            raise FormatError(f"{where}: no weights for layer {layer.describe()}; expected a "
                              f"group {root.name.rstrip('/')}/{name} listed in layer_names. The "
                              "file may be damaged.")
        elif class_name is None:
            layer.kind = _legacy_kind(name, [])
        layers.append(layer)
    return layers, functional, True


def _legacy_kind(name: str, weight_names: Sequence[str]) -> str:
    """A weights file's layer, told from its weight names (no config to say its class)."""
    if not weight_names:
        return "passive" if _split_key(name)[0] in PASSIVE_KEYS or name.startswith(
            "input") else "other"
    basenames = [weight.rsplit("/", 1)[-1].split(":")[0] for weight in weight_names]
    recurrent = "recurrent_kernel" in basenames or keras1.is_recurrent(weight_names)
    return "rnn" if recurrent else "other"


# -- stacks and layer= ----------------------------------------------------------------------


def _stacks(layers: list[FileLayer], functional: bool) -> list[list[FileLayer]]:
    stacks: list[list[FileLayer]] = []
    if not functional:
        current: list[FileLayer] | None = None
        for layer in layers:
            if layer.kind == "rnn":
                if current is None:
                    current = []
                    stacks.append(current)
                current.append(layer)
            elif layer.kind != "passive":
                current = None
        return stacks
    by_name = {layer.name: layer for layer in layers}
    stack_of: dict[str, list[FileLayer]] = {}
    continued: set[str] = set()
    for layer in layers:
        if layer.kind != "rnn":
            continue
        producer = _producer(layer, by_name)
        if (producer is not None and producer.name in stack_of and producer.name not in continued
                and stack_of[producer.name][-1] is producer):
            continued.add(producer.name)
            stack = stack_of[producer.name]
            stack.append(layer)
        else:
            stack = [layer]
            stacks.append(stack)
        stack_of[layer.name] = stack
    return stacks


def _producer(layer: FileLayer, by_name: Mapping[str, FileLayer]) -> FileLayer | None:
    """The layer whose output reaches ``layer`` through passive layers only, if exactly one."""
    seen = set()
    inputs = layer.inputs or ()
    while len(inputs) == 1 and inputs[0] in by_name and inputs[0] not in seen:
        seen.add(inputs[0])
        candidate = by_name[inputs[0]]
        if candidate.kind != "passive":
            return candidate
        inputs = candidate.inputs or ()
    return None


def _listing(stacks: Sequence[Sequence[FileLayer]]) -> str:
    return "; ".join(" → ".join(layer.describe() for layer in stack) for stack in stacks)


def _select(layers: list[FileLayer], choice: Any, where: str, *, functional: bool,
            ordered: bool) -> list[FileLayer]:
    recurrent = [layer for layer in layers if layer.kind == "rnn"]
    unreadable = [layer for layer in layers if layer.kind in ("recurrent", "nested")]
    if ordered:
        stacks = _stacks(layers, functional)
    elif len(recurrent) > 1 and len({_split_key(layer.aliases[0])[0] for layer in recurrent}) == 1 \
            and all(layer.kind in ("rnn", "passive") for layer in layers):
        stacks = [recurrent]  # one class, numbered in model order, nothing else in between
    else:
        stacks = [[layer] for layer in recurrent]
    if choice is None:
        if unreadable:
            raise UnsupportedFeatureError(
                f"{where}: {'; '.join(_unreadable(layer) for layer in unreadable)}; reading the "
                "model would leave it out. "
                + (f"To read the other recurrent layers alone, pass layer= (e.g. "
                   f"layer={stacks[0][0].name!r})." if stacks else "Nothing else here can be read."))
        if not stacks:
            raise FormatError(f"{where}: no {READABLE_ANY} layer found; expected a model or "
                              "weights file holding at least one.")
        if len(stacks) > 1:
            if not ordered:
                others = [layer.describe() for layer in layers if layer.kind == "other"]
                between = (f"; other layers here ({', '.join(others)}) might sit between them"
                           if others else "")
                raise AmbiguousSourceError(
                    f"{where}: a Keras 3 weights file keys its layers by class and does not record "
                    "the order of layers of different classes, nor what sits between them; it "
                    f"holds the recurrent layers {', '.join(s[0].describe() for s in stacks)}"
                    f"{between}. Pass layer=[their names in the model's order], or read the "
                    ".keras file, whose config tells.")
            raise AmbiguousSourceError(
                f"{where}: the model holds {len(stacks)} separate recurrent stacks "
                f"({_listing(stacks)}); pass layer= with a layer name to read the stack holding "
                f"it (e.g. layer={stacks[0][0].name!r}), or a list of names to read exactly "
                "those layers in that order.")
        return stacks[0]
    if isinstance(choice, str):
        layer = _find(layers, choice, where)
        return next(stack for stack in stacks if layer in stack)
    if isinstance(choice, (list, tuple)) and choice and all(isinstance(c, str) for c in choice):
        chosen = [_find(layers, name, where) for name in choice]
        if len({id(layer) for layer in chosen}) != len(chosen):
            raise FormatError(f"read(fmt='keras'): layer={list(choice)!r} names a layer twice; "
                              "list each layer once, in the model's order.")
        return chosen
    raise FormatError(f"read(fmt='keras'): layer={choice!r}; expected a layer name or a list of "
                      "layer names.")


def _unreadable(layer: FileLayer) -> str:
    if layer.kind == "nested":
        return (f"layer {layer.describe()} is a nested model holding recurrent layers, and "
                "rnnport reads the layers of the outer model only (save the inner model on its "
                "own, inner.save('inner.keras'), and read that)")
    return f"layer {layer.describe()} is recurrent, but rnnport reads {READABLE} layers only"


def _find(layers: list[FileLayer], name: str, where: str) -> FileLayer:
    for layer in layers:
        if name == layer.name or name in layer.aliases:
            if layer.kind == "rnn":
                return layer
            if layer.kind in ("recurrent", "nested"):
                raise UnsupportedFeatureError(f"{where}: {_unreadable(layer)}.")
            raise FormatError(f"{where}: layer {layer.describe()} is not a recurrent layer; "
                              f"layer= takes the names of {READABLE} layers.")
    names = [layer.name for layer in layers if layer.kind == "rnn"]
    raise FormatError(f"{where}: no layer named {name!r}; the recurrent layers are "
                      f"{', '.join(map(repr, names)) or 'none'}.{close_matches(name, names)}")


# -- one layer ------------------------------------------------------------------------------


def _read_layer(layer: FileLayer, options: Mapping[str, Any]) -> Model:
    location = f"{layer.where}, layer {layer.describe()}"
    gates = _gates(layer)
    # A file may mix cells: activation= is SimpleRNN's option, reset_after= a GRU's,
    # recurrent_activation= an LSTM's and a GRU's (their candidates' come from configs).
    options = {key: value for key, value in options.items()
               if not ((key == "activation" and gates != 1) or (key == "reset_after" and gates != 3)
                       or (key == "recurrent_activation" and gates not in (3, 4)))}
    version = options.get("keras_version", layer.keras_version)
    if layer.class_name is None or layer.config is None:
        return keras_layers.read_weights(layer.arrays, {"keras_version": version, **options},
                                         location)
    config = layer.config
    if layer.class_name in keras_layers.WRAPPERS:
        forward = config["layer"]
        inner, inner_config = forward["class_name"], _gru_defaults(forward, layer.arrays)
        backward = config.get("backward_layer")
        if isinstance(backward, Mapping):
            backward_pair = (str(backward.get("class_name")),
                             _gru_defaults(backward, layer.arrays))
        else:  # tf_keras leaves it out unless given: the forward layer, reversed
            backward_pair = (inner, {**inner_config,
                                     "go_backwards": not inner_config.get("go_backwards", False)})
        layer_options = keras_layers.bidirectional_options(config, (inner, inner_config),
                                                           backward_pair, location,
                                                           keras_version=version)
        directions = 2
    else:
        inner = layer.class_name
        inner_config = _gru_defaults({"class_name": inner, "config": config}, layer.arrays)
        layer_options = keras_layers.layer_options(inner, inner_config, location,
                                                   backward=False, keras_version=version)
        directions = 1
    _check_shapes(layer, inner, inner_config, directions, location)
    return keras_layers.read_configured(inner, layer.arrays, options, layer_options, location)


def _assumed_activation(layer: FileLayer, options: Mapping[str, Any],
                        location: str) -> dict[str, Any]:
    """The options a weights-only layer is read with for the gate activation its file does
    not record (hard_sigmoid gates from a Keras before 2.3, or none)."""
    halves = layer.arrays[:3] if len(layer.arrays) in (3, 6) else layer.arrays
    return keras_layers.default_gates(
        halves, {"keras_version": layer.keras_version, **options}, location)


def _gru_defaults(entry: Mapping[str, Any], arrays: Sequence[np.ndarray]) -> Mapping[str, Any]:
    """A layer config; a GRU from Keras before 2.1 has no ``reset_after`` and was reset-before,
    which its bias shape also says."""
    raw = entry.get("config")
    config: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    if entry.get("class_name") == "GRU" and "reset_after" not in config:
        two_rows = len(arrays) >= 3 and np.ndim(arrays[2]) == 2
        return {**config, "reset_after": two_rows}
    return config


def _check_shapes(layer: FileLayer, cls: str, config: Mapping[str, Any], directions: int,
                  location: str) -> None:
    """The arrays against what the config says: count, units, gates, bias."""
    units = config.get("units")
    cudnn = cls in keras_layers.CUDNN_CELLS
    use_bias = cudnn or bool(config.get("use_bias", True))
    per_direction = 3 if use_bias else 2
    found = ", ".join(f"{path} {tuple(np.shape(a))}" for path, a in zip(
        layer.datasets, layer.arrays, strict=False)) or "none"
    said = (f"the config says {cls}(units={units!r}, use_bias={use_bias}"
            + (f", reset_after={bool(config.get('reset_after'))}" if cls == "GRU" else "") + ")"
            + (" in a Bidirectional" if directions == 2 else ""))
    if len(layer.arrays) != per_direction * directions:
        raise FormatError(
            f"{location}: {len(layer.arrays)} arrays ({found}); expected "
            f"{per_direction * directions} because {said}. The config and the weights may come "
            "from different models.")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        return
    gates = GATES[cls]
    columns = gates * units
    if cudnn:
        bias_shape: tuple[int, ...] = (2 * columns,)
    elif cls == "GRU" and config.get("reset_after", True):
        bias_shape = (2, columns)
    else:
        bias_shape = (columns,)
    problems = []
    for direction in range(directions):
        arrays = layer.arrays[direction * per_direction:(direction + 1) * per_direction]
        paths = layer.datasets[direction * per_direction:(direction + 1) * per_direction]
        kernel, recurrent = np.shape(arrays[0]), np.shape(arrays[1])
        if len(kernel) != 2 or kernel[1] != columns:
            problems.append(f"{location}, {paths[0]}: kernel {kernel}; expected (I, {columns})")
        if recurrent != (units, columns):
            problems.append(f"{location}, {paths[1]}: recurrent_kernel {recurrent}; expected "
                            f"({units}, {columns})")
        if use_bias and np.shape(arrays[2]) != bias_shape:
            problems.append(f"{location}, {paths[2]}: bias {np.shape(arrays[2])}; expected "
                            f"{bias_shape}")
    if problems:
        raise ShapeError(problems, hint=f"The arrays do not fit the layer: {said}. The config and "
                         "the weights may come from different models; save the model again.")


# -- write ------------------------------------------------------------------------------------


def write_file(specs: Sequence[Spec], arrays: Sequence[Sequence[np.ndarray]], path: Any) -> None:
    """Save single-layer ``specs`` with their Keras ``arrays`` (one get_weights() list per
    layer) as a Keras 3 ``.keras`` archive or ``.weights.h5`` file at ``path``, atomically."""
    target = Path(path)
    name = target.name.lower()
    if name.endswith(".weights.h5"):
        archive = False
    elif name.endswith(".keras"):
        archive = True
    elif name.endswith((".h5", ".hdf5")):
        raise UnsupportedFeatureError(
            f"write(fmt='keras'): {target}: legacy HDF5 model files are not written; use a "
            "path ending in .keras (Keras 3 loads it with keras.saving.load_model) or "
            ".weights.h5 (for model.load_weights). Nothing was written.")
    else:
        raise FormatError(
            f"write(fmt='keras'): {target}: expected a path ending in .keras or .weights.h5, got "
            f"suffix {target.suffix or 'none'!r}. Nothing was written.")
    h5py = require("h5py", extra="keras", purpose="Writing Keras model files")
    plan = _plan(specs)
    weights = _weights_bytes(h5py, plan, arrays)
    if archive:
        data = _archive_bytes(_config(plan, specs, arrays), weights)
    else:
        data = weights
    atomic_write(target, lambda file: file.write(data))


@dataclass
class _Planned:
    key: str            # group key in the weights file
    name: str           # layer name
    cls: str            # LSTM | GRU | SimpleRNN
    inner: str          # the wrapped layer's name (Bidirectional), else the layer name
    bidirectional: bool


def _plan(specs: Sequence[Spec]) -> list[_Planned]:
    used: dict[str, int] = {}
    keys: dict[str, int] = {}
    plan = []
    for spec in specs:
        cls = KERAS_CLASSES[spec.cell]
        inner = _unique(_snake(cls), used)
        if spec.bidirectional:
            name = _unique("bidirectional", used)
            key = _unique("bidirectional", keys)
        else:
            name, key = inner, _unique(_snake(cls), keys)
        plan.append(_Planned(key, name, cls, inner, spec.bidirectional))
    return plan


def layer_names(specs: Sequence[Spec]) -> list[str]:
    """The names :func:`write_file` gives the layers of ``specs``, in order."""
    return [planned.name for planned in _plan(specs)]


def loads_into(path: Any, specs: Sequence[Spec]) -> str | None:
    """None when the Keras 3 weights file at ``path`` holds exactly the layers that
    :func:`write_file` gives ``specs`` — what Keras's ``load_weights`` needs to fill a
    Sequential rebuilt from them, as it finds each layer's group by class and position
    (``lstm``, ``lstm_1`` …), not by the layer's name; else why not, in one sentence."""
    layers, _, _ = _file_layers(Path(path))
    if any(not layer.aliases for layer in layers):
        return (f"{Path(path).name} is a legacy HDF5 weights file, which Keras 3 loads only into "
                "the model that saved it")
    found = sorted(layer.aliases[0] for layer in layers)
    expected = sorted(planned.key for planned in _plan(specs))
    if found != expected:
        return (f"{Path(path).name} holds the layer groups {', '.join(found) or 'none'}, and "
                "Keras's load_weights needs exactly those of the Sequential rebuilt from the "
                f"network read ({', '.join(expected)})")
    if not all(stored.startswith("/layers/") for layer in layers for stored in layer.datasets):
        return (f"{Path(path).name} keeps its layers where an older TensorFlow put them "
                "(not under /layers/), which Keras 3 does not load")
    return None


def _weights_bytes(h5py: Any, plan: Sequence[_Planned],
                   arrays: Sequence[Sequence[np.ndarray]]) -> bytes:
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        h5.create_group("vars").attrs["name"] = "sequential"
        container = h5.create_group("layers")
        for planned, layer_arrays in zip(plan, arrays, strict=True):
            group = container.create_group(planned.key)
            group.create_group("vars").attrs["name"] = planned.name
            cell_name = f"{_snake(planned.cls)}_cell"
            if planned.bidirectional:
                half = len(layer_arrays) // 2
                for side, part in (("forward", layer_arrays[:half]),
                                   ("backward", layer_arrays[half:])):
                    sub = group.create_group(f"{side}_layer")
                    sub.create_group("vars").attrs["name"] = f"{side}_{planned.inner}"
                    _write_cell(sub, cell_name, part)
            else:
                _write_cell(group, cell_name, layer_arrays)
    return buffer.getvalue()


def _write_cell(group: Any, cell_name: str, arrays: Sequence[np.ndarray]) -> None:
    cell = group.create_group("cell").create_group("vars")
    cell.attrs["name"] = cell_name
    for index, array in enumerate(arrays):
        cell.create_dataset(str(index), data=np.ascontiguousarray(array), track_times=False)


def _config(plan: Sequence[_Planned], specs: Sequence[Spec],
            arrays: Sequence[Sequence[np.ndarray]]) -> dict[str, Any]:
    dtype = str(np.asarray(arrays[0][0]).dtype)
    input_size = specs[0].input_size
    layers: list[dict[str, Any]] = [{
        "module": "keras.layers", "class_name": "InputLayer", "registered_name": None,
        "config": {"batch_shape": [None, None, input_size], "dtype": dtype, "sparse": False,
                   "ragged": False, "name": "input_layer", "optional": False},
    }]
    for planned, spec in zip(plan, specs, strict=True):
        if planned.bidirectional:
            entry = _entry("Bidirectional", {
                "name": planned.name, "trainable": True, "dtype": dtype, "merge_mode": "concat",
                "layer": _rnn_entry(planned, spec, dtype, backward=False),
                "backward_layer": _rnn_entry(planned, spec, dtype, backward=True)})
        else:
            entry = _rnn_entry(planned, spec, dtype, backward=None)
        entry["build_config"] = {"input_shape": [None, None, spec.input_size]}
        layers.append(entry)
    return {
        "module": "keras", "class_name": "Sequential", "registered_name": None,
        "config": {"name": "sequential", "trainable": True, "dtype": dtype, "layers": layers},
        "build_config": {"input_shape": [None, None, input_size]},
    }


def _entry(cls: str, config: dict[str, Any]) -> dict[str, Any]:
    return {"module": "keras.layers", "class_name": cls, "config": config,
            "registered_name": None}


def _rnn_entry(planned: _Planned, spec: Spec, dtype: str, *, backward: bool | None) -> dict[str, Any]:
    name = planned.inner if backward is None else (
        f"{'backward' if backward else 'forward'}_{planned.inner}")
    config: dict[str, Any] = {
        "name": name, "trainable": True, "dtype": dtype, "return_sequences": True,
        "return_state": False, "go_backwards": bool(backward), "stateful": False,
        "unroll": False, "units": spec.hidden_size,
        "activation": "relu" if spec.cell == "rnn_relu" else "tanh", "use_bias": spec.bias,
    }
    if gate_family(spec.cell) != "rnn":
        config["recurrent_activation"] = "sigmoid"
        if spec.activations:
            config["recurrent_activation"], config["activation"] = (
                _keras3_name(activation) for activation in spec.activations[:2])
    if spec.cell == "gru":
        config["reset_after"] = spec.reset_after
    return _entry(planned.cls, config)


def _keras3_name(activation: Any) -> str:
    names = keras_layers.keras_names(activation)
    name = names.get(None, names.get(3))
    if name is None:
        raise UnsupportedFeatureError(
            f"write(fmt='keras'): the activation {activation[0]}({activation[1]:g}, "
            f"{activation[2]:g}) is Keras 2's hard_sigmoid (clip(0.2·x + 0.5, 0, 1)), which "
            "Keras 3 does not have, and .keras files are Keras 3 models. Write the weights "
            "(get_weights() lists, .weights.h5) for a Keras 2 layer, or another format (onnx, "
            "npz). Nothing was written.")
    return name


def _archive_bytes(config: Mapping[str, Any], weights: bytes) -> bytes:
    metadata = {"keras_version": "3.0.0", "saved_by": f"rnnport {package_version()}"}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, data in ((ARCHIVE_METADATA, json.dumps(metadata).encode()),
                           (ARCHIVE_CONFIG, json.dumps(config).encode()),
                           (ARCHIVE_WEIGHTS, weights)):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()
