"""TensorFlow.js layers models: ``model.json`` and its weight shards, read with NumPy alone.

``tensorflowjs_converter --input_format keras`` (and TF.js's own ``model.save``) write a
folder::

    model.json               {"format": "layers-model", "generatedBy": …, "convertedBy": …,
                              "modelTopology": <the Keras model config>,
                              "weightsManifest": [<group>, …]}
    group1-shard1of2.bin     a group's bytes, cut in shards (4 MiB each by default)
    group1-shard2of2.bin

``modelTopology`` is the Keras model config (``{"class_name": "Sequential" | "Functional" |
"Model", "config": {"layers": [...]}}``), or that config under ``model_config`` beside
``keras_version`` and ``backend`` (the converter's form). Its layers are read as a Keras file's
are (:mod:`rnnport.formats.keras.files`): LSTM, GRU, SimpleRNN and Bidirectional layers that
follow one another form a stack; other layers (Dense, Embedding, Masking …) are left alone and
listed by ``notes``; ``layer=`` picks one stack of several.

A group is ``{"paths": ["group1-shard1of2.bin", …], "weights": [{"name", "shape", "dtype",
"quantization"?}, …]}``: its shards, concatenated in order, hold its weights one after the
other in the order listed, little-endian, each ``prod(shape)`` values of ``dtype``
(``float32``, ``int32``: 4 bytes; ``bool``: 1; ``complex64``: 8; ``string``: each value a
4-byte length and its bytes). A quantized weight holds ``prod(shape)`` values of
``quantization.dtype`` instead: ``uint8`` / ``uint16`` read as ``q·scale + min`` (computed in
float64, rounded to float32, as TF.js computes it in JavaScript) and ``float16`` widened to
float32; both read exactly as TF.js reads them, and ``notes`` says so.

Weights are matched to layers **by name**, never by their place in the manifest (the converter
sorts the manifest by name, so a Dense layer's weights may come between two LSTMs'). A layer
``L``'s arrays are ``L/kernel``, ``L/recurrent_kernel``, ``L/bias``, or with the cell's name
between (``L/lstm_cell/kernel``, what tf.keras 2.2+ names them); a Bidirectional ``B``
wrapping ``N`` keeps ``B/forward_N/…`` and ``B/backward_N/…`` (TF.js names the backward layer
after its own config's name, or the forward layer's; a Keras 3 config names its two layers
``forward_N`` and ``backward_N`` itself). The converter's files from Keras 3 name them
otherwise: from an ``.h5``, a Sequential's under its name (``sequential/lstm/lstm_cell/kernel``),
read when every weight is; from a ``.keras`` archive (``--input_format keras_keras``), by the
archive's paths, under the key Keras 3 gives each layer of the model in order
(``layers/lstm_1/cell/vars/0``: 0 kernel, 1 recurrent_kernel, 2 bias; a Bidirectional's
``layers/bidirectional/forward_layer/cell/vars/0`` and ``backward_layer``). Each array is Keras's (see
:mod:`rnnport.formats.keras.layers`): ``kernel (I, G·H)``, ``recurrent_kernel (H, G·H)``,
gate blocks LSTM ``i f c o``, GRU ``z r h``; one bias (LSTM, SimpleRNN, reset-before GRU),
or two rows for a reset-after GRU.

**What TF.js computes.** TF.js's GRU is reset-before only: ``tf.layers.gru`` refuses
``reset_after=true`` (tfjs issue 4621), so writing a reset-after GRU is refused by name (a
converter's file with one is read as Keras computes it, and ``notes`` says TF.js cannot load
it). ``hard_sigmoid`` is ``clip(0.2·x + 0.5, 0, 1)`` in TF.js, Keras 2's, whatever Keras
version the topology names. TF.js computes in float32: float32 weights are written, other
dtypes refused with the cast to make.

**Writing** gives ``{"model.json": <its text, a 0-d str array>, <weight name>: <array>, …}``
(the manifest's names to arrays, as ``tf.io.decodeWeights`` gives them); ``path=`` (a name
ending in ``.json``) saves ``model.json`` and one shard beside it (``group1-shard1of1.bin``
for ``model.json``, ``<stem>.group1-shard1of1.bin`` for another name), atomically. The model
is a Sequential: an ``InputLayer`` ``(None, None, I)``, then one layer per rnnport layer,
``return_sequences=True``, a Bidirectional (``merge_mode="concat"``) where bidirectional,
weights named as the converter names them (``bidirectional/forward_lstm/lstm_cell/kernel``),
which ``tf.loadLayersModel`` matches to its variables. ``read`` takes that dict back, a
``model.json`` path, or a folder holding one.

**Safety.** ``model.json`` is parsed by :mod:`rnnport.io.jsontext` (bounded size, depth and
what it builds). Shards are opened through :mod:`rnnport.io.inputs`, only inside the folder of
``model.json``, by names without ``..`` or a drive. Shapes, dtypes and quantization are
checked, and each group's bytes must be exactly what its weights take, before any weight is
decoded; the arrays decoded are charged against the ``expansion`` limit first.

The framework check (``convert --verify``) runs the stack read in TF.js: Node.js loads the
file's weights with ``@tensorflow/tfjs`` (found from the working folder upwards, or on
``NODE_PATH``) into a Sequential of the stack's layers, every step returned, through rnnport's
runner script (``rnnport/data/tfjs_runner.js``): the stack's weights alone, still encoded as
stored, renamed to the names TF.js gives that Sequential's variables, every one required.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .. import budget
from .._version import package_version
from ..errors import FormatError, RnnportError, UnsupportedFeatureError
from ..io import inputs, jsontext, processes
from ..io.atomic import atomic_write_all
from ..model import Model
from ..spec import Spec
from ._common import describe, is_path, listed
from ._protocol import Format, Suffix
from .keras import files as keras_files
from .keras import layers as keras_layers

__all__ = ["FORMAT", "TfjsRun", "run_in_tfjs"]

MODEL_JSON = "model.json"
NATIVE_KEY = MODEL_JSON  # the key of model.json's text in the dict write gives
SUFFIX = ".json"
SHARD = "group1-shard1of1.bin"
MAX_MODEL_JSON = 64 << 20  # bytes: a topology is kilobytes, a manifest of thousands megabytes
MAX_RANK = 8
SNIFF_BYTES = 64 << 10
# Bytes per value of each manifest dtype TF.js stores with a fixed size.
DTYPE_BYTES = {"float32": 4, "int32": 4, "bool": 1, "complex64": 8}
QUANTIZED: dict[str, np.dtype[Any]] = {"uint8": np.dtype("<u1"), "uint16": np.dtype("<u2"),
                                       "float16": np.dtype("<f2")}
CELL_SCOPES = {"LSTM": "lstm_cell", "GRU": "gru_cell", "SimpleRNN": "simple_rnn_cell"}
ROLES = ("kernel", "recurrent_kernel", "bias")
# A weight's path in a Keras 3 archive (what the converter names it from a .keras file).
KERAS3_PATH = re.compile(r"(?:^|/)vars/[0-9]{1,9}$")
KERAS3_WEIGHT = re.compile(r"(?:cell/)?vars/([0-2])")
TFJS_VERSION = "4.22.0"  # the @tensorflow/tfjs rnnport's writing is checked against
RUN_SECONDS = 120.0  # for Node.js to load TF.js and run a few small models
INSTALL = (f"install it with npm (npm install @tensorflow/tfjs@{TFJS_VERSION}, in the working "
           "folder or a folder on NODE_PATH)")


# -- sniff ----------------------------------------------------------------------------------


def _model_json(path: Path) -> Path:
    """``path``, or the ``model.json`` in the folder ``path``."""
    return path / MODEL_JSON if path.is_dir() else path


def sniff(source: Any) -> bool:
    """A dict holding ``model.json``'s text, or a JSON file (or a folder's ``model.json``)
    whose first 64 KiB name ``modelTopology`` or ``weightsManifest``."""
    if isinstance(source, Mapping):
        text = source.get(NATIVE_KEY)
        return isinstance(text, str) or (isinstance(text, np.ndarray) and text.dtype.kind == "U")
    if not is_path(source):
        return False
    path = _model_json(Path(source))
    start = inputs.head(path, SNIFF_BYTES)
    return start is not None and start.lstrip()[:1] == b"{" and (
        b'"modelTopology"' in start or b'"weightsManifest"' in start)


# -- the manifest ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One weight of the manifest: where its bytes are and what they are."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    quantization: Mapping[str, Any] | None
    group: int
    offset: int | None  # in its group's bytes; None after a string weight (sizes unknown)
    size: int | None    # bytes; None for a string weight

    @property
    def count(self) -> int:
        return math.prod(self.shape)

    def describe(self) -> str:
        stored = self.quantization["dtype"] if self.quantization else self.dtype
        return f"{self.name} {list(self.shape)} {stored}"


@dataclass
class Opened:
    """A layers model: where it came from, its topology, its weights by name, and how to
    decode them."""

    where: str
    size: int                        # bytes of model.json and the shards (the budget's base)
    topology: Mapping[str, Any]      # the Keras model config
    keras_version: str | None
    stored: dict[str, Stored]
    groups: list[tuple[list[str], int | None]]  # (shard names, bytes the weights take)
    folder: Path | None = None       # of model.json; None for a dict
    given: Mapping[str, Any] | None = None      # a dict's arrays, by name
    group_bytes: dict[int, bytes] = field(default_factory=dict)

    def array(self, stored: Stored) -> np.ndarray:
        """The float32 array of one weight, decoded as TF.js decodes it."""
        where = f"{self.where}, weight {stored.name!r}"
        if self.given is not None:
            return _given_array(self.given, stored, where)
        if stored.offset is None or stored.size is None:
            raise UnsupportedFeatureError(
                f"{where}: comes after a string weight in group {stored.group + 1}, whose "
                "values have lengths rnnport does not read; expected float weights only "
                "before it. Convert the model without string weights.")
        data = self._group(stored.group)
        raw = data[stored.offset:stored.offset + stored.size]
        if stored.quantization is not None:
            kind = stored.quantization["dtype"]
            values = np.frombuffer(raw, QUANTIZED[kind])
            if kind == "float16":
                return values.astype(np.float32).reshape(stored.shape)
            scale, low = (float(stored.quantization[key]) for key in ("scale", "min"))
            return (values.astype(np.float64) * scale + low).astype(np.float32) \
                .reshape(stored.shape)
        if stored.dtype != "float32":
            raise FormatError(f"{where}: dtype {stored.dtype!r}; expected 'float32' (a "
                              "recurrent layer's weights are floats). The file is damaged.")
        return np.frombuffer(raw, "<f4").astype(np.float32).reshape(stored.shape)

    def _group(self, index: int) -> bytes:
        if index in self.group_bytes:
            return self.group_bytes[index]
        assert self.folder is not None
        names, declared = self.groups[index]
        parts, total = [], 0
        for name in names:
            remaining = None if declared is None else declared - total
            where = f"{self.where}: weights group {index + 1}, shard {name!r}"
            part = inputs.read_file(self.folder / name, where, inside=self.folder, name=name,
                                    limit=remaining)
            parts.append(part)
            total += len(part)
        data = b"".join(parts)
        if declared is not None and len(data) != declared:
            raise FormatError(
                f"{self.where}: weights group {index + 1} ({', '.join(names)}) holds "
                f"{len(data):,} bytes; expected {declared:,} (what its weights' shapes and "
                "dtypes take). A shard is truncated or from another model; convert the model "
                "again.")
        self.group_bytes[index] = data
        return data


def _given_array(given: Mapping[str, Any], stored: Stored, where: str) -> np.ndarray:
    if stored.name not in given:
        raise FormatError(f"{where}: listed in model.json's manifest but missing from the dict; "
                          "expected every weight the manifest lists, by name.")
    array = np.asarray(given[stored.name])
    if array.dtype != np.float32 or array.shape != stored.shape:
        raise FormatError(f"{where}: {describe(array)}; expected float32 of shape "
                          f"{stored.shape}, as model.json's manifest says.")
    return array


def _text(value: Any, where: str) -> str:
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind == "U":
        return str(value)
    if isinstance(value, str):
        return value
    raise FormatError(f"{where}: {describe(value)}; expected model.json's text (a str).")


def open_source(source: Any) -> Opened:
    """The layers model ``source`` is: a ``model.json`` path, a folder holding one, or the dict
    :func:`write` gives."""
    if isinstance(source, Mapping):
        where = "read(fmt='tfjs'): the dict's model.json"
        text = _text(source.get(NATIVE_KEY), where).encode("utf-8", "surrogatepass")
        document = jsontext.loads(text, where, max_bytes=MAX_MODEL_JSON, allow_nan=True)
        given = {key: value for key, value in source.items() if key != NATIVE_KEY}
        size = len(text) + sum(int(np.asarray(value).nbytes) for value in given.values())
        return _opened(document, where, size, None, given)
    if not is_path(source):
        raise FormatError(f"read(fmt='tfjs'): expected a model.json path, a folder holding "
                          f"one, or the dict write(fmt='tfjs') gives; got {describe(source)}.")
    path = _model_json(Path(source))
    where = str(path)
    text = inputs.read_file(path, where, limit=MAX_MODEL_JSON)
    document = jsontext.loads(text, where, max_bytes=MAX_MODEL_JSON, allow_nan=True)
    opened = _opened(document, where, len(text), path.parent, None)
    opened.size += sum(_shard_sizes(opened, path.parent))
    return opened


def _shard_sizes(opened: Opened, folder: Path) -> list[int]:
    """The sizes of the shards that exist (what the ``expansion`` limit is relative to)."""
    sizes = []
    for names, _ in opened.groups:
        for name in names:
            with contextlib.suppress(OSError, ValueError):
                if inputs.is_file(folder / name, opened.where):
                    sizes.append((folder / name).stat().st_size)
    return sizes


def _opened(document: Any, where: str, size: int, folder: Path | None,
            given: Mapping[str, Any] | None) -> Opened:
    if not isinstance(document, Mapping):
        raise FormatError(f"{where}: a JSON {type(document).__name__}; expected an object with "
                          "modelTopology and weightsManifest (a TensorFlow.js layers model).")
    kind = document.get("format")
    if kind == "graph-model" or (isinstance(document.get("modelTopology"), Mapping)
                                 and "node" in document["modelTopology"]):
        raise UnsupportedFeatureError(
            f"{where}: a TensorFlow.js graph model (format 'graph-model', converted from a "
            "SavedModel or frozen graph): its network is a TensorFlow graph of ops, not Keras "
            "layers. rnnport reads layers models: convert the Keras model with "
            "tensorflowjs_converter --input_format keras (or keras_saved_model), or read the "
            "SavedModel itself (fmt='tf2').")
    if kind not in (None, "layers-model"):
        raise FormatError(f"{where}: format {kind!r}; expected 'layers-model' (a TensorFlow.js "
                          "layers model).")
    topology = document.get("modelTopology")
    if not isinstance(topology, Mapping):
        raise FormatError(f"{where}: modelTopology is {describe(topology)}; expected the Keras "
                          "model config, an object. The file is damaged.")
    version = topology.get("keras_version")
    if isinstance(topology.get("model_config"), Mapping):
        topology = topology["model_config"]
        version = topology.get("keras_version", version)
    if not isinstance(topology.get("class_name"), str):
        raise FormatError(f"{where}: modelTopology's class_name is "
                          f"{describe(topology.get('class_name'))}; expected the model's class "
                          "(Sequential, Functional, Model). The file is damaged.")
    stored, groups = _manifest(document.get("weightsManifest"), where)
    return Opened(where, size, topology, None if version is None else str(version), stored,
                  groups, folder, given)


def _manifest(manifest: Any, where: str) -> tuple[dict[str, Stored], list[tuple[list[str],
                                                                               int | None]]]:
    """Every weight by name, and each group's shards and byte count."""
    if manifest is None:
        return {}, []
    if not isinstance(manifest, list):
        raise FormatError(f"{where}: weightsManifest is {describe(manifest)}; expected a list of "
                          "groups {paths, weights}.")
    stored: dict[str, Stored] = {}
    groups: list[tuple[list[str], int | None]] = []
    for index, group in enumerate(manifest):
        at = f"{where}: weightsManifest[{index}]"
        if not isinstance(group, Mapping) or not isinstance(group.get("paths"), list) or \
                not isinstance(group.get("weights"), list):
            raise FormatError(f"{at}: expected {{paths: [shard names], weights: [...]}}, got "
                              f"{describe(group)}.")
        names = group["paths"]
        if not all(isinstance(name, str) for name in names):
            raise FormatError(f"{at}: paths holds {describe(names)}; expected shard file names.")
        for name in names:
            inputs.check_name(at, name)
        offset: int | None = 0
        for number, entry in enumerate(group["weights"]):
            weight = _stored(entry, f"{at}.weights[{number}]", len(groups), offset)
            if weight.name in stored:
                raise FormatError(f"{at}: the weight {weight.name!r} a second time; expected each "
                                  "name once (TF.js matches weights to variables by name).")
            stored[weight.name] = weight
            offset = None if offset is None or weight.size is None else offset + weight.size
        groups.append((list(names), offset))
    return stored, groups


def _stored(entry: Any, at: str, group: int, offset: int | None) -> Stored:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise FormatError(f"{at}: expected {{name, shape, dtype}}, got {describe(entry)}.")
    name, shape, dtype = entry["name"], entry.get("shape"), entry.get("dtype")
    if not isinstance(shape, list) or len(shape) > MAX_RANK or not all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**40 for d in shape):
        raise FormatError(f"{at} ({name!r}): shape {shape!r}; expected a list of at most "
                          f"{MAX_RANK} sizes, each a whole number ≥ 0. The file is damaged.")
    if dtype not in (*DTYPE_BYTES, "string"):
        raise FormatError(f"{at} ({name!r}): dtype {dtype!r}; expected one of "
                          f"{', '.join(map(repr, [*DTYPE_BYTES, 'string']))}.")
    quantization = entry.get("quantization")
    count = math.prod(shape)
    size: int | None = None if dtype == "string" else count * DTYPE_BYTES[dtype]
    if quantization is not None:
        kind = quantization.get("dtype") if isinstance(quantization, Mapping) else None
        if not isinstance(kind, str) or kind not in QUANTIZED:
            raise UnsupportedFeatureError(
                f"{at} ({name!r}): quantization {quantization!r}; rnnport reads TF.js's uint8, "
                "uint16 and float16 quantization. Convert the model again with one of those "
                "(--quantize_uint8, --quantize_uint16, --quantize_float16) or none.")
        if dtype != "float32":
            raise UnsupportedFeatureError(f"{at} ({name!r}): a {dtype} weight quantized to "
                                          f"{kind}; rnnport reads quantized float32 weights.")
        if kind != "float16" and not all(
                isinstance(quantization.get(key), (int, float))
                and not isinstance(quantization.get(key), bool)
                and math.isfinite(quantization[key]) for key in ("scale", "min")):
            raise FormatError(f"{at} ({name!r}): {kind} quantization without a finite scale "
                              "and min; expected both (value = q·scale + min).")
        size = count * QUANTIZED[kind].itemsize
    return Stored(name, tuple(shape), dtype, quantization, group,
                  offset if size is not None else None, size)


# -- layers and their weights -----------------------------------------------------------------


def _config_name(entry: Any) -> str | None:
    """The ``config.name`` of a layer entry ``{class_name, config}``, when it has one."""
    config = entry.get("config") if isinstance(entry, Mapping) else None
    name = config.get("name") if isinstance(config, Mapping) else None
    return name if isinstance(name, str) else None


@dataclass(frozen=True)
class Naming:
    """How a manifest names its layers' weights: under each layer's name (TF.js, tf.keras and
    a Keras 3 ``.h5``; ``scope`` before them all, ``sequential/`` from a Keras 3 Sequential's
    ``.h5``), or by Keras 3's archive paths (``--input_format keras_keras``), under the key
    Keras 3 gives each layer of the model (``layers/lstm_1/cell/vars/0``)."""

    scope: str = ""
    keys: Mapping[str, str] | None = None  # layer name → its Keras 3 key; None: by name

    def root(self, layer: keras_files.FileLayer) -> str:
        if self.keys is None:
            return f"{self.scope}{layer.name}/"
        return f"layers/{self.keys[layer.name]}/"

    def role(self, rest: str) -> str | None:
        """The role of the weight named ``rest`` after one direction's prefix, or None."""
        parts = rest.split("/")
        if self.keys is None:
            return parts[-1] if len(parts) <= 2 and parts[-1] in ROLES else None
        match = KERAS3_WEIGHT.fullmatch(rest)
        return ROLES[int(match.group(1))] if match else None

    def pattern(self, prefix: str, role: str) -> str:
        if self.keys is None:
            return f"{prefix}[<cell>/]{role}"
        return f"{prefix}[cell/]vars/{ROLES.index(role)}"


def _naming(opened: Opened, entries: Sequence[tuple[str, Any, Any, Any]]) -> Naming:
    """How ``opened``'s manifest names the weights of the layers ``entries`` lists."""
    names = list(opened.stored)
    if names and all(name.startswith("layers/") and KERAS3_PATH.search(name)
                     for name in names):
        used: dict[str, int] = {}
        return Naming(keys={name: keras_files._unique(keras_files._snake(class_name), used)
                            for name, class_name, _, _ in entries})
    model = opened.topology.get("config")
    scope = model.get("name") if isinstance(model, Mapping) else None
    if isinstance(scope, str) and scope and names and \
            all(name.startswith(f"{scope}/") for name in names) and \
            all(name != scope for name, _, _, _ in entries):
        return Naming(scope=f"{scope}/")
    return Naming()


def _side(opened: Opened, root: str, first: str, *others: str | None) -> str:
    """The first of the directory names ``first, *others`` under ``root`` that weights are
    named under (``first`` when none is)."""
    for name in (first, *others):
        if name and any(stored.startswith(f"{root}{name}/") for stored in opened.stored):
            return f"{root}{name}/"
    return f"{root}{first}/"


def _prefixes(opened: Opened, layer: keras_files.FileLayer, naming: Naming) -> list[str]:
    """Where ``layer``'s arrays are named: under its root or, for a Bidirectional, under its
    two layers' (``B/forward_N/``, ``B/backward_N/``; Keras 3 configs name them
    ``forward_N`` and ``backward_N`` themselves; Keras 3 archive paths ``forward_layer``)."""
    root = naming.root(layer)
    if layer.class_name not in keras_layers.WRAPPERS:
        return [root]
    if naming.keys is not None:
        return [f"{root}forward_layer/", f"{root}backward_layer/"]
    config = layer.config or {}
    inner = _config_name(config.get("layer"))
    if inner is None:
        raise FormatError(f"{layer.where}: layer {layer.describe()} wraps a layer without a "
                          "name; expected config.layer = {class_name, config: {name, …}}, by "
                          "which its weights are named. The file is damaged.")
    backward = _config_name(config.get("backward_layer")) or inner
    return [_side(opened, root, f"forward_{inner}",
                  inner if inner.startswith("forward_") else None),
            _side(opened, root, f"backward_{backward}",
                  backward if backward.startswith("backward_") else None,
                  f"backward_{inner.removeprefix('forward_')}")]


def _named(opened: Opened, layer: keras_files.FileLayer, naming: Naming,
           claimed: dict[str, str], roles_of: dict[str, tuple[int, str]]) -> list[Stored]:
    """``layer``'s weights, by name: kernel, recurrent_kernel and bias of each direction
    (each one's direction and role put in ``roles_of``)."""
    found: list[Stored] = []
    for direction, prefix in enumerate(_prefixes(opened, layer, naming)):
        roles: dict[str, Stored] = {}
        strays = []
        for name, stored in opened.stored.items():
            if not name.startswith(prefix):
                continue
            role = naming.role(name[len(prefix):])
            if role is None:
                strays.append(name)
                continue
            if role in roles:
                raise FormatError(
                    f"{opened.where}: layer {layer.describe()}: two weights are its "
                    f"{role} ({roles[role].name!r} and {name!r}); expected one. The "
                    "manifest is damaged or joins two models.")
            roles[role] = stored
        if strays:
            expected = ", ".join(naming.pattern(prefix, role) for role in ROLES)
            raise FormatError(
                f"{opened.where}: layer {layer.describe()}: weights {listed(strays)} are named "
                f"under it but are none of {expected}; rnnport would leave them out. The file "
                "is damaged or holds a layer rnnport does not read.")
        missing = [role for role in ROLES[:2] if role not in roles]
        if missing:
            raise FormatError(
                f"{opened.where}: layer {layer.describe()}: no weight named "
                f"{naming.pattern(prefix, missing[0])} in the manifest; expected its kernel, "
                "recurrent_kernel and (with use_bias) bias, matched by name. The weights may "
                "come from another model; convert it again.")
        for role in ROLES:
            if role in roles:
                stored = roles[role]
                if stored.name in claimed:
                    raise FormatError(f"{opened.where}: the weight {stored.name!r} is named under "
                                      f"two layers ({claimed[stored.name]!r} and "
                                      f"{layer.name!r}); expected each layer's own.")
                claimed[stored.name] = layer.name
                roles_of[stored.name] = (direction, role)
                found.append(stored)
    return found


@dataclass
class Layers:
    """A model's layers as the Keras file reader sees them, and what else the manifest holds."""

    items: list[keras_files.FileLayer]
    functional: bool
    weights: dict[str, list[Stored]]   # a recurrent layer's name → its weights
    unclaimed: list[str]               # weights named under no layer of the topology
    roles: dict[str, tuple[int, str]] = field(default_factory=dict)  # weight → direction, role


def layers_of(opened: Opened) -> Layers:
    """Every layer of the topology; a recurrent one's arrays decoded (charged first)."""
    try:
        entries, functional = keras_files._model_entries(opened.topology,
                                                         f"{opened.where}, modelTopology")
    except RecursionError:
        raise FormatError(f"{opened.where}: the model config is nested too deeply to be a Keras "
                          "config; the file is damaged or built to break a reader.") from None
    naming = _naming(opened, entries)
    claimed: dict[str, str] = {}
    roles: dict[str, tuple[int, str]] = {}
    items, weights = [], {}
    for name, class_name, config, inbound in entries:
        # TF.js computes Keras 2's hard_sigmoid, whichever Keras the topology names.
        layer = keras_files.FileLayer(name, class_name, config, opened.where,
                                      keras_files._kind(class_name, config), inputs=inbound,
                                      keras_version="2")
        if layer.kind == "rnn":
            weights[name] = _named(opened, layer, naming, claimed, roles)
        items.append(layer)
    needed = sum(stored.count * 4 for found in weights.values() for stored in found)
    if needed > budget.allowance("expansion", opened.size):
        raise budget.exceeded(opened.where, f"its recurrent layers' weights take {needed:,} bytes "
                              "as float32", "expansion", opened.size, needed)
    for layer in items:
        for stored in weights.get(layer.name, []):
            layer.arrays.append(opened.array(stored))
            layer.datasets.append(stored.name)
    owned = tuple(naming.root(layer) for layer in items)
    return Layers(items, functional, weights, [name for name in opened.stored
                                               if name not in claimed and not name.startswith(owned)],
                  roles)


def _chosen(source: Any, choice: Any) -> tuple[Opened, Layers, list[keras_files.FileLayer]]:
    opened = open_source(source)
    found = layers_of(opened)
    chosen = keras_files._select(found.items, choice, opened.where, functional=found.functional,
                                 ordered=True)
    return opened, found, chosen


# -- read -------------------------------------------------------------------------------------


def read(source: Any, **options: Any) -> Model:
    """The recurrent stack of a layers model (``layer=`` picks one of several)."""
    _, _, chosen = _chosen(source, options.get("layer"))
    return keras_layers.stack_layers([keras_files._read_layer(layer, {}) for layer in chosen])


def notes(source: Any, **options: Any) -> list[str]:
    """The layers and weights beside the stack read, weights read dequantized, and a GRU TF.js
    cannot load."""
    opened, found, chosen = _chosen(source, options.get("layer"))
    read_names = {layer.name for layer in chosen}
    out = []
    for layer in found.items:
        if layer.name in read_names:
            continue
        note = keras_files._left_out(layer)
        if note:
            out.append(f"layer {layer.describe()}: {note}")
    if found.unclaimed:
        out.append(f"weights {listed(found.unclaimed)}: named under no layer of the topology; "
                   "not read.")
    quantized = [stored for name in read_names for stored in found.weights.get(name, [])
                 if stored.quantization is not None]
    if quantized:
        kinds = sorted({stored.quantization["dtype"] for stored in quantized
                        if stored.quantization is not None})
        out.append(f"{len(quantized)} weight(s) stored quantized ({', '.join(kinds)}), read "
                   "dequantized to float32 exactly as TF.js reads them (uint8 and uint16: "
                   "q·scale + min); the float model they came from may differ by up to the "
                   "quantization step.")
    for layer in chosen:
        inner = (layer.config or {}).get("layer") if layer.class_name == "Bidirectional" \
            else {"class_name": layer.class_name, "config": layer.config}
        config = inner.get("config") if isinstance(inner, Mapping) else None
        if isinstance(inner, Mapping) and inner.get("class_name") == "GRU" and \
                isinstance(config, Mapping) and config.get("reset_after") is True:
            out.append(f"layer {layer.describe()}: a reset-after GRU (reset_after=True), read as "
                       "Keras computes it; TF.js cannot load it (its GRU layer is reset-before "
                       "only, tfjs issue 4621).")
    major = keras_layers.keras_major(opened.keras_version)
    if major == 3 and any("hard_sigmoid" in json.dumps(layer.config) for layer in chosen):
        out.append("hard_sigmoid read as TF.js computes it, clip(0.2·x + 0.5, 0, 1) (Keras 2's), "
                   f"though the topology names Keras {opened.keras_version}, whose hard_sigmoid "
                   "is relu6(x + 3) / 6.")
    return out


# -- write ------------------------------------------------------------------------------------


def shard_name(path: Path) -> str:
    """The shard written beside ``path``: the converter's name beside ``model.json``."""
    return SHARD if path.name == MODEL_JSON else f"{path.stem}.{SHARD}"


def output_files(path: Path) -> list[Path]:
    """``model.json`` (or another ``.json`` name) and its one shard."""
    return [path, path.parent / shard_name(path)]


def input_files(path: Path) -> list[Path]:
    """The shards a ``model.json`` names beside it (none when it cannot be parsed)."""
    try:
        opened = open_source(path)
    except (RnnportError, OSError):
        return []
    folder = _model_json(path).parent
    return [folder / name for names, _ in opened.groups for name in names]


def _snake(name: str) -> str:
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def _unique(name: str, used: dict[str, int]) -> str:
    used[name] = used.get(name, -1) + 1
    return name if used[name] == 0 else f"{name}_{used[name]}"


def _activation_name(activation: Any) -> str:
    """TF.js's name for one of ``spec``'s activations (:func:`holds_activations` held it:
    a name every Keras shares, or Keras 2's ``hard_sigmoid``)."""
    names = keras_layers.keras_names(activation)
    return names.get(None) or names[2]


def holds_activations(spec: Spec) -> bool:
    """Whether TF.js computes ``spec``'s activations: Keras names that TF.js has (Keras 2's
    hard_sigmoid, not Keras 3's), an LSTM's candidate and output one function."""
    names = [keras_layers.keras_names(activation) for activation in spec.activations]
    if not all(None in found or 2 in found for found in names):
        return False
    return spec.cell != "lstm" or spec.activations[1] == spec.activations[2]


def _layer_config(spec: Spec, name: str, cls: str) -> dict[str, Any]:
    config: dict[str, Any] = {
        "name": name, "trainable": True, "dtype": "float32", "return_sequences": True,
        "return_state": False, "go_backwards": False, "stateful": False, "unroll": False,
        "units": spec.hidden_size, "activation": "relu" if spec.cell == "rnn_relu" else "tanh",
        "use_bias": spec.bias, "dropout": 0.0, "recurrent_dropout": 0.0}
    if cls != "SimpleRNN":
        config.update(recurrent_activation="sigmoid", implementation=2)
        if spec.activations:
            config["recurrent_activation"], config["activation"] = (
                _activation_name(activation) for activation in spec.activations[:2])
    if cls == "GRU":
        config["reset_after"] = False
    return config


def write(model: Model, path: Any = None) -> dict[str, np.ndarray]:
    """``model`` as a TF.js layers model (see the module docstring)."""
    target = None if path is None else Path(path)
    if target is not None and not target.name.lower().endswith(SUFFIX):
        raise FormatError(f"write(fmt='tfjs'): {target}: expected a path ending in .json "
                          "(model.json, with its shard written beside it), got suffix "
                          f"{target.suffix or 'none'!r}. Nothing was written.")
    layers = model.layers()
    arrays = keras_layers.write(model)
    used: dict[str, int] = {}
    entries: list[dict[str, Any]] = [{"class_name": "InputLayer", "config": {
        "batch_input_shape": [None, None, layers[0].spec.input_size], "dtype": "float32",
        "sparse": False, "name": "input_1"}}]
    weights: dict[str, np.ndarray] = {}
    for layer, layer_arrays in zip(layers, arrays, strict=True):
        spec = layer.spec
        cls = keras_files.KERAS_CLASSES[spec.cell]
        inner = _unique(_snake(cls), used)
        config = _layer_config(spec, inner, cls)
        scope = CELL_SCOPES[cls]
        if spec.bidirectional:
            name = _unique("bidirectional", used)
            entries.append({"class_name": "Bidirectional", "config": {
                "name": name, "trainable": True, "dtype": "float32", "merge_mode": "concat",
                "layer": {"class_name": cls, "config": config}}})
            prefixes = [f"{name}/forward_{inner}/{scope}/", f"{name}/backward_{inner}/{scope}/"]
        else:
            entries.append({"class_name": cls, "config": config})
            prefixes = [f"{inner}/{scope}/"]
        per_direction = len(layer_arrays) // len(prefixes)
        for direction, prefix in enumerate(prefixes):
            for role, array in zip(ROLES, layer_arrays[direction * per_direction:
                                                       (direction + 1) * per_direction],
                                   strict=False):
                weights[prefix + role] = np.ascontiguousarray(array, dtype="<f4")
    shard = SHARD if target is None else shard_name(target)
    document = {
        "format": "layers-model", "generatedBy": f"rnnport {package_version()}",
        "convertedBy": None,
        "modelTopology": {"class_name": "Sequential",
                          "config": {"name": "sequential", "layers": entries}},
        "weightsManifest": [{"paths": [shard], "weights": [
            {"name": name, "shape": list(array.shape), "dtype": "float32"}
            for name, array in weights.items()]}]}
    text = json.dumps(document)
    if target is not None:
        data = b"".join(array.tobytes() for array in weights.values())
        atomic_write_all([(target.parent / shard, lambda file: file.write(data)),
                          (target, lambda file: file.write(text.encode()))])
    return {NATIVE_KEY: np.array(text), **weights}


def param_count(model: Model) -> int:
    return int(sum(np.size(array) for array in keras_layers.leaves(keras_layers.write(model))))


# -- TensorFlow.js itself --------------------------------------------------------------------


@dataclass(frozen=True)
class TfjsRun:
    """One model for TF.js to run: ``model.json``'s path, the topology to load instead of
    the file's (or None), whether every stored weight must match a variable, the weights to
    pass on and their new names (or None: all, as named), and ``x`` ``(batch, time,
    features)``."""

    model: Path
    x: np.ndarray
    topology: Mapping[str, Any] | None = None
    strict: bool = True
    rename: Mapping[str, str] | None = None


@contextlib.contextmanager
def _runner() -> Iterator[Path]:
    with resources.as_file(resources.files("rnnport").joinpath("data/tfjs_runner.js")) as path:
        yield path


def run_in_tfjs(runs: Sequence[TfjsRun], *, node_path: str | os.PathLike[str] | None = None,
                timeout: float = RUN_SECONDS) -> tuple[str, list[np.ndarray | str]] | str:
    """TF.js running each model on its ``x`` in one Node.js process: (TF.js's version, each
    model's first output or what TF.js said instead); or why it could not run at all.
    ``node_path`` is a ``node_modules`` folder holding ``@tensorflow/tfjs`` (else it is
    searched from the working folder upwards and on ``NODE_PATH``)."""
    node = shutil.which("node")
    if node is None:
        return f"Node.js is not installed (no node on PATH); {INSTALL}"
    job = {"runs": [{"model": str(Path(run.model).resolve()),
                     "topology": None if run.topology is None else dict(run.topology),
                     "strict": run.strict, "shape": list(run.x.shape),
                     "rename": None if run.rename is None else dict(run.rename),
                     "input": base64.b64encode(np.ascontiguousarray(
                         run.x, dtype="<f4").tobytes()).decode()} for run in runs]}
    environment = dict(os.environ)
    if node_path is not None:
        environment["NODE_PATH"] = os.pathsep.join(
            [os.fspath(node_path), *filter(None, [environment.get("NODE_PATH")])])
    with _runner() as script:
        try:
            done = processes.run([node, str(script)], input=json.dumps(job).encode(),
                                 timeout=timeout, env=environment)
        except processes.Overdue as overdue:
            return f"Node.js running TF.js {overdue}"
    try:
        answer = json.loads(done.stdout.decode("utf-8", "replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        return (f"Node.js ended with exit status {done.returncode} and no answer: "
                f"{done.stderr.decode('utf-8', 'replace').strip()[-300:]}")
    if "missing" in answer:
        return f"@tensorflow/tfjs is not installed where Node.js looks; {INSTALL}"
    if "error" in answer:
        return f"the TF.js runner failed: {answer['error']}"
    results: list[np.ndarray | str] = []
    for result in answer["results"]:
        if "error" in result:
            results.append(str(result["error"]))
        else:
            results.append(np.frombuffer(base64.b64decode(result["output"]), "<f4")
                           .reshape(result["shape"]).astype(np.float32))
    return str(answer["version"]), results


def _stack_topology(chosen: Sequence[keras_files.FileLayer], input_size: int) -> dict[str, Any]:
    """A Sequential of the layers ``chosen``, every step returned, nothing around them."""
    entries: list[dict[str, Any]] = [{"class_name": "InputLayer", "config": {
        "batch_input_shape": [None, None, input_size], "dtype": "float32", "sparse": False,
        "name": "rnnport_input"}}]
    for layer in chosen:
        config = json.loads(json.dumps(layer.config))
        targets = [config["layer"]["config"]] if layer.class_name == "Bidirectional" else [config]
        if isinstance(config.get("backward_layer"), Mapping):
            targets.append(config["backward_layer"]["config"])
        for target in targets:
            target.update(return_sequences=True, return_state=False, stateful=False)
        entries.append({"class_name": layer.class_name, "config": config})
    return {"class_name": "Sequential", "config": {"name": "rnnport_stack", "layers": entries}}


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """TF.js (Node.js and ``@tensorflow/tfjs``) loading the source's weights into a Sequential
    of the stack read and running ``x`` ``(batch, time, I)``; or why it cannot."""
    with tempfile.TemporaryDirectory(prefix="rnnport-") as folder:
        if isinstance(source, Mapping):
            path = Path(folder) / MODEL_JSON
            document = json.loads(_text(source.get(NATIVE_KEY), "the dict's model.json"))
            data = b"".join(np.ascontiguousarray(source[entry["name"]], "<f4").tobytes()
                            for group in document["weightsManifest"]
                            for entry in group["weights"])
            (path.parent / SHARD).write_bytes(data)
            document["weightsManifest"] = [{"paths": [SHARD], "weights": [
                entry for group in document["weightsManifest"] for entry in group["weights"]]}]
            path.write_text(json.dumps(document))
        elif is_path(source):
            path = _model_json(Path(source))
        else:
            return f"the source is {describe(source)}, not a TF.js model: no framework check"
        found, chosen = _stack_of(path, model)
        if isinstance(chosen, str):
            return f"{chosen}: no framework check"
        # Only the stack's weights go to TF.js, under the names its variables have (whatever
        # the file names them: a Keras 3 archive's paths, a model's scope); other layers'
        # weights (a Dense head's) have no variable in the stack's model.
        rename = {stored: _variable_name(layer, *found.roles[stored])
                  for layer in chosen for stored in layer.datasets}
        run = TfjsRun(path, np.asarray(x, np.float32),
                      _stack_topology(chosen, model.input_size), True, rename)
        answer = run_in_tfjs([run])
    if isinstance(answer, str):
        return f"{answer}: no framework check"
    version, (result,) = answer
    if isinstance(result, str):
        return f"TF.js {version} cannot run it ({result[:300]}): no framework check"
    return f"TF.js {version} (Node.js) loading {path.name}'s weights into the stack read", result


def _variable_name(layer: keras_files.FileLayer, direction: int, role: str) -> str:
    """The name TF.js gives the variable of ``layer`` that holds ``role`` of ``direction``:
    ``L/kernel``; in a Bidirectional ``B`` wrapping ``N``, ``B/forward_N/kernel`` and
    ``B/backward_N/kernel`` (TF.js makes the backward layer from ``N``'s config)."""
    if layer.class_name not in keras_layers.WRAPPERS:
        return f"{layer.name}/{role}"
    inner = _config_name((layer.config or {}).get("layer"))
    return f"{layer.name}/{('forward_', 'backward_')[direction]}{inner}/{role}"


def _stack_of(path: Path, model: Model) -> tuple[Layers, list[keras_files.FileLayer] | str]:
    """The stack of the file that reads as ``model`` (the one read), or why none does."""
    found = layers_of(open_source(path))
    stacks = keras_files._stacks(found.items, found.functional)
    for stack in stacks:
        for start in range(len(stack)):
            part = stack[start:start + len(model.layers())]
            if len(part) == len(model.layers()) and keras_layers.stack_layers(
                    [keras_files._read_layer(layer, {}) for layer in part]) == model:
                return found, part
    return found, f"{path}: no stack of its layers reads as the model given"


FORMAT = Format(
    "tfjs", sniff=sniff, reader=read, writer=write, counter=param_count,
    read_options=frozenset({"layer"}),
    features=frozenset({"reset_before"}), reset_after=False,
    # Keras's layers: one bias for an LSTM, a reset-before GRU and a SimpleRNN.
    one_bias=frozenset({"lstm", "gru_reset_before", "rnn"}), dtypes=frozenset({"float32"}),
    suffixes=(Suffix(SUFFIX, "a TensorFlow.js layers model (model.json, shards beside it)"),),
    output_files=output_files, input_files=input_files, gate_names={"g": "c", "n": "h"},
    framework_forward=framework_forward, notes=notes, activations=holds_activations,
    names={"reset_before": "GRU (reset-before only; tf.layers.gru refuses reset_after=true)"},
    layout_notes=("Weights are Keras's (kernel (I, G·H), recurrent_kernel (H, G·H), one bias "
                  "but for a reset-after GRU), matched to layers by name in model.json's "
                  "manifest, their bytes in the shards.",))
