"""The recurrent layers of a TF2 checkpoint or SavedModel, found from its object paths.

A :class:`Source` opens what ``read`` is given — a checkpoint (prefix, ``.index`` or a
folder with a ``checkpoint`` state file), a SavedModel folder, or a dict ``checkpoint key
→ array`` — and lists its variables by *object path*. In a checkpoint the paths come from
walking the ``TrackableObjectGraph`` from the root, breadth first, over every child except
the aliases Keras and ``tf.Module`` add (``variables``, ``trainable_variables``,
``keras_api`` … and names starting with ``_``), so that a SavedModel's variable keyed
``variables/0`` is still found at ``layer_with_weights-0/cell/kernel``. A dict's keys are
paths already (``PATH/.ATTRIBUTES/VARIABLE_VALUE``).

A *recurrent layer* is an object holding variables ``kernel`` and ``recurrent_kernel`` (and
``bias``): a Keras RNN layer's ``cell``, or a CuDNNLSTM/CuDNNGRU itself. Its layer path is
the holder's less ``/cell``; ``…/forward_layer`` and ``…/backward_layer`` are the two
directions of the Bidirectional above them. Layers in one container (the root, or
``model`` of a ``tf.train.Checkpoint``) are ordered by the ``k`` of
``layer_with_weights-k``, which counts every layer with weights (a Dense too): consecutive
``k`` whose sizes chain form one stack, as consecutive layers of a Sequential do.

A ConvLSTM1D/2D/3D also holds ``kernel`` and ``recurrent_kernel``, but 3-, 4- or 5-D
(``(*kernel_size, I, 4·filters)``); such layers (and any class the Keras metadata names
that rnnport does not read) form stacks of their own and are refused by name when chosen.

What an object graph can repeat is bounded by the files' size (the ``expansion`` limit,
:mod:`rnnport.budget`): the paths, each its parent's and one more piece (a chain of objects
costs the square of its length), are charged as they are built, and the arrays of the layers
chosen before any tensor is read, each layer's counted though several may name one stored
tensor; a stored tensor is read once however many object paths name its key.
"""

from __future__ import annotations

import math
import os
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from ... import budget
from ...errors import AmbiguousSourceError, FormatError, UnsupportedFeatureError
from ...io import inputs, jsontext, tensorbundle, tfproto
from ...model import as_float_array
from .._common import close_matches, describe, is_path, to_numpy
from . import keras3

__all__ = ["Layer", "Source", "choose", "is_object_key", "kind", "looks_object_based", "stacks",
           "summary", "unsupported"]

VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
# Children that alias objects reached under their own names elsewhere.
ALIASES = frozenset({"variables", "trainable_variables", "non_trainable_variables",
                     "trainable_weights", "non_trainable_weights", "weights", "keras_api",
                     "root", "signatures", "layers", "submodules", "states"})
_WEIGHTS = re.compile(r"^layer_with_weights-([0-9]{1,9})$")  # Keras writes ASCII digits
PATH_BYTES = 64  # what each object path kept is charged beside its characters
_NAMES = ("kernel", "recurrent_kernel", "bias")
# The Keras layers rnnport reads (the keras format's LSTM, GRU, SimpleRNN, CuDNN… classes).
READABLE = frozenset({"LSTM", "GRU", "SimpleRNN", "CuDNNLSTM", "CuDNNGRU"})
WRAPPERS = frozenset({"Bidirectional"})


def is_object_key(key: Any) -> bool:
    return isinstance(key, str) and key.endswith(VALUE)


def _unescape(piece: str) -> str:
    return piece.replace(".S", "/").replace("..", ".")


@dataclass
class Layer:
    """One recurrent layer: its object path, its holders' paths (one per direction) and
    what the source says of it."""

    path: str
    container: str
    index: int | None      # the k of layer_with_weights-k
    order: int             # where its path was first reached
    holders: list[str]     # forward[, backward]: paths of the objects holding kernel …
    name: str = ""         # the Keras layer's name, where the source tells it
    class_name: str | None = None
    config: Mapping[str, Any] | None = None
    inner: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)

    def describe(self) -> str:
        named = f" ({self.name})" if self.name and self.name != self.path else ""
        return f"{self.path}{named}"


class Source:
    """A TF2 checkpoint, SavedModel or dict, by object path (see the module docstring)."""

    def __init__(self, source: Any) -> None:
        self.saved_model: Path | None = None
        self.bundle: tensorbundle.Bundle | None = None
        self.name_based: Path | None = None   # a TF1 SavedModel's variables prefix
        self.metadata: dict[str, tuple[str, Mapping[str, Any]]] = {}
        self.metadata_file: Path | None = None   # keras_metadata.pb, where the folder has one
        self.full_names: dict[str, str] = {}
        self.slots = 0
        self.keras3: Any = None   # a Keras 3 SavedModel's Export (see .keras3)
        self._arrays: Mapping[str, Any] = {}
        self._decoded: dict[str, np.ndarray] = {}  # checkpoint key → its array, read once
        self.size = 0  # bytes of the files read, which the resource limits are relative to
        if isinstance(source, Mapping):
            self.where = "tf2 variables"
            keys = {}
            for key in source:
                if not is_object_key(key):
                    raise FormatError(f"tf2 variables: key {key!r}; expected checkpoint keys "
                                      f"ending in {VALUE} (as write(model, 'tf2') gives).")
                keys[key[:-len(VALUE)]] = key
            self._arrays = source
            self.paths = keys
            self.order = {path: index for index, path in enumerate(keys)}
            self.shapes = {key: tuple(np.shape(value)) for key, value in source.items()}
            self.keys = list(source)
            return
        if not is_path(source):
            raise FormatError(
                "read(fmt='tf2'): expected a TF2 checkpoint prefix (its .index file or folder), "
                f"a SavedModel folder, or a dict checkpoint key → array; got {describe(source)}.")
        path = Path(source)
        saved: tfproto.SavedModel | None = None
        where = f"read(fmt='tf2'): {path}"
        if path.name == "saved_model.pb" and inputs.is_file(path, where):
            path = path.parent
        if path.is_dir() and inputs.is_file(path / "saved_model.pb", where):
            self.saved_model = path
            prefix = path / "variables" / "variables"
            if not inputs.is_file(Path(f"{prefix}.index"), where):
                raise FormatError(f"{path}: a SavedModel folder without variables/variables.index; "
                                  "copy its variables/ folder with saved_model.pb.")
            # Decoded here so that a damaged saved_model.pb is an error, as TensorFlow would
            # make it, rather than a folder read from its variables alone.
            saved = _saved_model(path / "saved_model.pb")
            self.bundle = tensorbundle.Bundle(prefix, inside=path)  # its variables stay in it
        else:
            self.bundle = tensorbundle.Bundle(path)
        self.where = str(path if self.saved_model else self.bundle.prefix)
        self.size = _files_size(self.bundle, self.saved_model)
        self.keys = list(self.bundle)
        self.shapes = {key: self.bundle[key].shape for key in self.keys}
        if tfproto.OBJECT_GRAPH_KEY not in self.bundle:
            if self.saved_model is None:
                raise FormatError(
                    f"{self.where}: no {tfproto.OBJECT_GRAPH_KEY} tensor, so a name-based (TF1) "
                    "checkpoint, not an object-based one; read it with fmt='tf1'.")
            self.name_based = self.bundle.prefix
            self.paths, self.order = {}, {}
            return
        graph = tfproto.read_object_graph(self.bundle)
        self.paths, self.order, node_paths = _walk(graph, self.where, self.size)
        self.slots = sum(len(node.slot_variables) for node in graph.nodes)
        for node_id, node_path in node_paths.items():
            for attribute in graph.nodes[node_id].attributes:
                if attribute.name == "VARIABLE_VALUE":
                    self.full_names[node_path] = attribute.full_name
        missing = [key for key in self.paths.values() if key not in self.bundle]
        if missing:
            raise FormatError(f"{self.where}: the object graph names {missing[0]!r}, which the "
                              "checkpoint does not hold; it is damaged or incomplete.")
        if self.saved_model is not None and (self.saved_model / "keras_metadata.pb").is_file():
            self.metadata_file = self.saved_model / "keras_metadata.pb"
            self._keras_metadata(self.metadata_file)
        elif saved is not None and keras3.is_keras3(saved):
            self.keras3 = keras3.Export(self.where, saved, graph, self.bundle, self.size)

    def _keras_metadata(self, path: Path) -> None:
        # One JSON document per node, written by Python's json.dumps (which writes NaN and
        # Infinity), all of them together within what the file's size allows.
        tally = jsontext.Tally(str(path), self.size)
        for node in tfproto.read_saved_metadata(path).nodes:
            parts = node.node_path.split(".")
            if not parts or parts[0] != "root":
                continue
            try:
                entry = jsontext.loads(node.metadata, str(path), allow_nan=True, tally=tally)
            except jsontext.JSONTextError as error:
                raise FormatError(f"{path}: node {node.node_path[:200]!r} holds metadata that is "
                                  f"not JSON ({error.problem}); the file is damaged.") from None
            if isinstance(entry, dict) and isinstance(entry.get("config"), dict):
                self.metadata["/".join(parts[1:])] = (str(entry.get("class_name")),
                                                      entry["config"])

    def shape(self, path: str) -> tuple[int, ...]:
        return tuple(self.shapes[self.paths[path]])

    def array(self, path: str) -> np.ndarray:
        """The array at ``path``, read-only; a checkpoint's tensor is read once however many
        object paths name its key."""
        key = self.paths[path]
        where = f"{self.where}: {key}"
        if self.bundle is None:
            return as_float_array(to_numpy(self._arrays[key]), where)
        found = self._decoded.get(key)
        if found is None:
            found = self._decoded[key] = as_float_array(self.bundle.read(key), where)
            found.flags.writeable = False
        return found

    def charge(self, layers: list[Layer]) -> None:
        """Refuse, before any tensor is read, layers whose arrays together pass what the
        ``expansion`` limit allows for the files' size (each layer's counted, though object
        paths may name one stored tensor for many)."""
        if self.bundle is None:
            return
        total = 0
        for layer in layers:
            for holder in layer.holders:
                for name in _NAMES:
                    path = f"{holder}/{name}"
                    if path in self.paths:
                        entry = self.bundle[self.paths[path]]
                        total += math.prod(entry.shape) * _width(entry.dtype)
        if total > budget.allowance("expansion", self.size):
            raise budget.exceeded(self.where, f"the {len(layers)} layer(s) read hold {total:,} "
                                  "bytes of arrays", "expansion", self.size, total)

    def layers(self) -> list[Layer]:
        """The recurrent layers, in order (see the module docstring)."""
        found: dict[str, Layer] = {}
        for path in self.paths:
            holder, _, last = path.rpartition("/")
            if not holder or last != "recurrent_kernel" or f"{holder}/kernel" not in self.paths:
                continue
            base = holder[:-len("/cell")] if holder.endswith("/cell") else (
                "" if holder == "cell" else holder)
            outer, _, side = base.rpartition("/")
            direction = ("forward_layer", "backward_layer").index(side) \
                if side in ("forward_layer", "backward_layer") else None
            layer_path = outer if direction is not None else base
            container, _, own = layer_path.rpartition("/")
            match = _WEIGHTS.match(own)
            layer = found.setdefault(layer_path, Layer(
                layer_path, container, int(match[1]) if match else None,
                self.order.get(layer_path, self.order[path]), [], ""))
            if direction is None:
                layer.holders = [holder]
            else:
                while len(layer.holders) < 2:
                    layer.holders.append("")
                layer.holders[direction] = holder
        out = sorted(found.values(), key=lambda layer: (
            layer.container, layer.index if layer.index is not None else -1, layer.order))
        for layer in out:
            if "" in layer.holders:
                raise FormatError(f"{self.where}: {layer.path} holds one direction of a "
                                  "Bidirectional layer only (forward_layer and backward_layer "
                                  "expected); the checkpoint is incomplete.")
            full = self.full_names.get(f"{layer.holders[0]}/kernel", "")
            layer.name = full.split("/")[0] if "/" in full else ""
            if layer.path in self.metadata:
                layer.class_name, layer.config = self.metadata[layer.path]
                layer.name = str(layer.config.get("name", layer.name))
                for side in ("forward_layer", "backward_layer"):
                    inner = self.metadata.get(f"{layer.path}/{side}")
                    if inner is not None:
                        layer.inner.append(inner)
        return out

    def weight_layers(self) -> dict[tuple[str, int], str]:
        """Every ``layer_with_weights-k`` object with variables: (container, k) → its path."""
        out = {}
        for path in self.paths:
            pieces = path.split("/")
            for depth, piece in enumerate(pieces):
                match = _WEIGHTS.match(piece)
                if match:
                    out[("/".join(pieces[:depth]), int(match[1]))] = "/".join(pieces[:depth + 1])
                    break
        return out

    def arrays_of(self, layer: Layer) -> list[np.ndarray]:
        """Forward then backward: kernel, recurrent_kernel[, bias] each."""
        out = []
        for holder in layer.holders:
            out += [self.array(f"{holder}/{name}") for name in _NAMES
                    if f"{holder}/{name}" in self.paths]
        return out

    def sizes(self, layer: Layer) -> tuple[int, int]:
        """(input size, output size) from the shapes alone (channels for a ConvLSTM, whose
        kernels are ``(*kernel_size, I, 4·filters)``)."""
        kernel = self.shape(f"{layer.holders[0]}/kernel")
        recurrent = self.shape(f"{layer.holders[0]}/recurrent_kernel")
        row = -2 if len(recurrent) > 2 else 0
        return (kernel[row] if len(kernel) >= abs(row) and kernel else 0,
                (recurrent[row] if recurrent else 0) * len(layer.holders))


def _width(dtype: str) -> int:
    """Bytes per element a tensor of ``dtype`` is read as (bfloat16 as float32; a type the
    read refuses anyway, 4)."""
    try:
        return 4 if dtype == "bfloat16" else np.dtype(dtype).itemsize
    except TypeError:
        return 4


def _files_size(bundle: tensorbundle.Bundle, saved_model: Path | None) -> int:
    """The bytes of a checkpoint's index and data shards, and of a SavedModel's own files."""
    shards = sorted({bundle[key].shard for key in bundle})  # those named, not the header's count
    files = [bundle.index_path, *(bundle.data_path(shard) for shard in shards)]
    if saved_model is not None:
        files += [saved_model / "saved_model.pb", saved_model / "keras_metadata.pb"]
    return sum(file.stat().st_size for file in files if file.is_file())


@lru_cache(maxsize=4)
def _decoded(path: str, _stamp: tuple[int, int]) -> tfproto.SavedModel:
    return tfproto.read_saved_model(path)


def _saved_model(path: Path) -> tfproto.SavedModel:
    """``saved_model.pb`` decoded, once per version of the file (a SavedModel is opened by
    ``read``, ``notes`` and ``networks`` in turn, and a large graph takes a while). The file
    is recorded as one the read opened even when its decoding is reused, so that no write of
    the same conversion replaces it."""
    real = inputs.note(path, f"SavedModel {path.parent}")
    stat = real.stat()
    return _decoded(str(real), (stat.st_mtime_ns, stat.st_size))


class _Paths:
    """What the object paths built for one source take, charged against the ``expansion``
    limit before each is built: each repeats its parent's, so a long chain of nodes would
    cost the square of its length."""

    def __init__(self, where: str, size: int) -> None:
        self.where, self.size = where, size
        self.allowed = budget.allowance("expansion", size)
        self.built = 0

    def charge(self, length: int) -> None:
        self.built += length + PATH_BYTES
        if self.built > self.allowed:
            raise budget.exceeded(self.where, "its object graph's paths (each repeating its "
                                  f"parent's) would take more than {self.allowed:,} bytes: a "
                                  "chain of objects nested very deep", "expansion", self.size)


def _walk(graph: tfproto.TrackableObjectGraph, where: str,
          size: int) -> tuple[dict[str, str], dict[str, int], dict[int, str]]:
    """Object path → checkpoint key of every variable value; path → the order it was
    reached; node → path. The paths are charged as they are built (:class:`_Paths`)."""
    nodes = graph.nodes
    if not nodes:
        return {}, {}, {}
    built = _Paths(where, size)
    paths: dict[int, str] = {0: ""}
    order: dict[str, int] = {}
    queue = deque([0])
    while queue:
        parent = queue.popleft()
        for index, child in enumerate(nodes[parent].children):
            if not 0 <= child.node_id < len(nodes):
                raise FormatError(f"{where}: object graph nodes[{parent}].children[{index}] names "
                                  f"node {child.node_id}; expected one of 0..{len(nodes) - 1}, so "
                                  "the object graph is damaged.")
            name = child.local_name
            if child.node_id in paths or name in ALIASES or name.startswith("_"):
                continue
            piece = name.replace("/", ".S")
            built.charge(len(paths[parent]) + 1 + len(piece))
            path = f"{paths[parent]}/{piece}" if paths[parent] else piece
            paths[child.node_id] = path
            order[path] = len(order)
            queue.append(child.node_id)
    keys = {}
    for node_id, path in paths.items():
        for attribute in nodes[node_id].attributes:
            if attribute.name == "VARIABLE_VALUE" and path:
                keys[path] = attribute.checkpoint_key
    # Variables reached only through an alias (a module's list): keyed by the alias path.
    tfkeys = tfproto.checkpoint_keys(graph, where=f"{where}: object graph", charge=built.charge)
    known = set(keys.values())  # a set: one look-up per key, not a scan of every value
    for path, key in tfkeys.items():
        if key not in known and "/.OPTIMIZER_SLOT/" not in path \
                and "/.ATTRIBUTES/" not in path:
            keys[path] = key
            known.add(key)
            order.setdefault(path, len(order))
    return keys, order, paths


def stacks(source: Source, layers: list[Layer]) -> list[list[Layer]]:
    """Consecutive layers of one container whose sizes chain: one stack each (a layer
    rnnport does not read, a ConvLSTM, stands alone)."""
    out: list[list[Layer]] = []
    for layer in layers:
        if out:
            last = out[-1][-1]
            if (last.container == layer.container and last.index is not None
                    and layer.index == last.index + 1
                    and unsupported(source, last) is None and unsupported(source, layer) is None
                    and source.sizes(last)[1] == source.sizes(layer)[0]):
                out[-1].append(layer)
                continue
        out.append([layer])
    return out


def summary(source: Source, stack: list[Layer]) -> str:
    return " → ".join(f"{layer.describe()}: {kind(source, layer)}" for layer in stack)


def kind(source: Source, layer: Layer) -> str:
    if layer.class_name:
        inner = layer.inner[0][0] if layer.inner else ""
        return f"{layer.class_name}({inner})" if inner else layer.class_name
    recurrent = source.shape(f"{layer.holders[0]}/recurrent_kernel")
    other = unsupported(source, layer)
    if other is not None:
        filters = recurrent[-2] if len(recurrent) > 2 else 0
        return f"{'Bidirectional ' if len(layer.holders) == 2 else ''}{other}({filters})"
    hidden = recurrent[0] if recurrent else 0
    gates = recurrent[1] // hidden if len(recurrent) == 2 and hidden else 0
    cell = {4: "LSTM", 3: "GRU", 1: "SimpleRNN"}.get(gates, "recurrent")
    bias = f"{layer.holders[0]}/bias"
    if bias in source.paths and source.shape(bias) == (2 * gates * hidden,) and gates in (3, 4):
        cell = f"CuDNN{cell}"
    return f"{'Bidirectional ' if len(layer.holders) == 2 else ''}{cell}({hidden})"


def unsupported(source: Source, layer: Layer) -> str | None:
    """The class of a layer rnnport does not read (``ConvLSTM2D`` …), else None: by the Keras
    metadata where the source has it, else by the recurrent kernel's rank (a ConvLSTM's is
    ``(*kernel_size, filters, 4·filters)``: 3-D for ConvLSTM1D … 5-D for ConvLSTM3D)."""
    if layer.class_name:
        if layer.class_name in WRAPPERS:
            inner = layer.inner[0][0] if layer.inner else None
            return inner if inner is not None and inner not in READABLE else None
        return None if layer.class_name in READABLE else layer.class_name
    rank = len(source.shape(f"{layer.holders[0]}/recurrent_kernel"))
    return f"ConvLSTM{rank - 2}D" if rank in (3, 4, 5) else None


def _refuse_unsupported(source: Source, chosen: list[Layer]) -> None:
    for layer in chosen:
        other = unsupported(source, layer)
        if other is None:
            continue
        why = (" (a ConvLSTM's kernels are convolutions, (*kernel_size, input channels, "
               "4·filters), not an LSTM's (I, 4H) matrices)" if other.startswith("ConvLSTM")
               else "")
        readable = [stack[0].path for stack in stacks(source, source.layers())
                    if all(unsupported(source, each) is None for each in stack)]
        hint = (f" To read another recurrent stack here, pass layer= (e.g. "
                f"layer={readable[0]!r})." if readable else "")
        raise UnsupportedFeatureError(
            f"{source.where}, {layer.describe()}: {other} layers are not supported; rnnport "
            "reads LSTM, GRU, SimpleRNN, CuDNNLSTM and CuDNNGRU layers and Bidirectional ones of "
            f"them{why}.{hint}")


def _position(layer: Layer) -> tuple[int, ...] | None:
    """Where the layer sits in the model: the ``k`` of each ``layer_with_weights-k`` on its
    path (a nested model's layers after the nesting layer's own); None where a piece of the
    path is not counted so (a ``tf.Module``'s attribute)."""
    found = [_WEIGHTS.match(piece) for piece in layer.path.split("/")]
    numbers = tuple(int(match[1]) for match in found if match)
    return numbers if numbers and found[-1] is not None else None


def _find(source: Source, layers: list[Layer], wanted: str, listing: str) -> Layer:
    name = wanted.strip("/")
    for layer in layers:
        if name in (layer.path, layer.name):
            return layer
    hint = close_matches(name, [layer.path for layer in layers] +
                         [layer.name for layer in layers if layer.name])
    raise FormatError(f"{source.where}: no recurrent layer {wanted!r}.{hint} The stacks here:\n"
                      f"{listing}")


def _chain(source: Source, layers: list[Layer], choice: list[str] | tuple[str, ...],
           listing: str) -> list[Layer]:
    """The layers a list names, checked to form one stack: each once, in the model's order,
    each taking the previous one's output."""
    chosen = [_find(source, layers, name, listing) for name in choice]
    given = f"layer={list(choice)!r}"
    if len({layer.path for layer in chosen}) != len(chosen):
        raise FormatError(f"{source.where}: {given} names a layer twice; list each recurrent "
                          "layer once, in the model's order.")
    for first, second in pairwise(chosen):
        before, after = _position(first), _position(second)
        if before is not None and after is not None and not before < after:
            raise FormatError(
                f"{source.where}: {given} lists {second.describe()} after {first.describe()}, "
                "which comes before it in the model; expected the layers in the model's order "
                "(one stack, input first).")
        produced, taken = source.sizes(first)[1], source.sizes(second)[0]
        if produced != taken:
            raise FormatError(
                f"{source.where}: {given} does not form one stack: {first.describe()} outputs "
                f"{produced} values per step and {second.describe()} takes {taken}; expected "
                "layers each taking the previous one's output. Pass one layer (or one stack) "
                f"at a time. The stacks here:\n{listing}")
    return chosen


def choose(source: Source, choice: Any) -> list[Layer]:
    """The layers ``layer=`` picks: a layer's object path or Keras name picks the stack holding
    it, a list of them exactly those layers (in the model's order, forming one stack); the only
    stack without it."""
    layers = source.layers()
    found = stacks(source, layers)
    listing = "\n".join(f"  - layer={stack[0].path!r}: {summary(source, stack)}" for stack in found)
    if not found:
        raise FormatError(
            f"{source.where}: no recurrent layer found; expected objects holding kernel and "
            "recurrent_kernel variables (a Keras LSTM/GRU/SimpleRNN's cell/, a CuDNNLSTM or "
            "CuDNNGRU layer).")
    if choice is None:
        if len(found) == 1:
            _refuse_unsupported(source, found[0])
            return found[0]
        raise AmbiguousSourceError(
            f"{source.where}: holds {len(found)} separate recurrent stacks; pass layer= to pick "
            f"one (or layer=[…] several layers that chain, in the model's order):\n{listing}")
    if isinstance(choice, (list, tuple)) and choice and all(isinstance(c, str) for c in choice):
        chosen = _chain(source, layers, choice, listing)
    elif isinstance(choice, str):
        layer = _find(source, layers, choice, listing)
        chosen = next(stack for stack in found if layer in stack)
    else:
        raise FormatError(f"read(fmt='tf2'): layer={choice!r}; expected an object path such as "
                          f"{found[0][0].path!r}, a layer name, or a list of them (layers that "
                          "chain, in the model's order).")
    _refuse_unsupported(source, chosen)
    return chosen


def looks_object_based(path: Any) -> bool:
    """Whether ``path`` names a SavedModel folder or a checkpoint whose bundle holds an
    object graph (reads the index only)."""
    try:
        text = os.fspath(path)
        candidate = Path(text)
        if candidate.is_dir() and (candidate / "saved_model.pb").is_file():
            return True
        if candidate.name == "saved_model.pb" and candidate.is_file():
            return True
        prefix = tensorbundle.checkpoint_prefix(candidate)
        if not Path(f"{prefix}.index").is_file():
            return False
        return tfproto.OBJECT_GRAPH_KEY in tensorbundle.Bundle(prefix)
    except (FormatError, OSError, ValueError):
        return False
