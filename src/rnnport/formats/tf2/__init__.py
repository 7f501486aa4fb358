"""TensorFlow 2 object-based checkpoints and SavedModel folders, read without TensorFlow.

**Checkpoints** (``tf.train.Checkpoint``, tf.keras / Keras 2 ``model.save_weights("ckpt")``)
are TensorBundles (:mod:`rnnport.io.tensorbundle`) whose tensors are keyed by *object path*
and which hold the ``_CHECKPOINTABLE_OBJECT_GRAPH`` string tensor, a ``TrackableObjectGraph``
(:mod:`rnnport.io.tfproto`). ``read`` takes a prefix, its ``.index`` file, or a folder whose
``checkpoint`` state file names the checkpoint. A Keras 2 model keeps::

    layer_with_weights-k/cell/kernel            (I, G·H)   Keras gate order, x @ kernel
    layer_with_weights-k/cell/recurrent_kernel  (H, G·H)
    layer_with_weights-k/cell/bias              LSTM (4H,), SimpleRNN (H,),
                                                GRU (2, 3H) reset_after / (3H,) reset-before
    layer_with_weights-k/forward_layer/cell/…, backward_layer/cell/…   (Bidirectional)
    layer_with_weights-k/{kernel, recurrent_kernel, bias}               (CuDNNLSTM / CuDNNGRU:
                                                bias (8H,) / (6H,), cuDNN blocks not transposed)

each key followed by ``/.ATTRIBUTES/VARIABLE_VALUE``; ``k`` counts only layers with weights
(a Dense too). ``tf.train.Checkpoint(model=…, optimizer=…)`` puts the model under ``model/``
and adds the optimizer (slots under ``…/.OPTIMIZER_SLOT/…``) and ``save_counter``. The
arrays are read as the keras format reads ``get_weights()`` lists
(:mod:`rnnport.formats.keras.layers`, which is also this layout's specification). A
checkpoint records no layer classes: LSTM, GRU and SimpleRNN are told by the kernel's
columns (4H, 3H, H), reset-after by the GRU bias's shape, CuDNN layers by their bias
(8H / 6H); activations are not recorded either, so Keras's defaults are taken unless
``activation=`` / ``recurrent_activation=`` say otherwise (``hard_sigmoid`` is Keras 2's,
``keras_version=`` defaults to 2: only Keras 2 writes these checkpoints). Nor does a
checkpoint record a layer's ``go_backwards`` or a Bidirectional's ``merge_mode``:
``go_backwards=False`` and ``merge_mode='concat'`` are assumed, and ``notes`` says so for
every layer read (a layer built with ``go_backwards=True`` returns its output reversed in
time, and ``merge_mode='sum'`` adds the two directions: no array tells, so such a checkpoint
reads as another network). A ConvLSTM1D/2D/3D, told by its 3- to 5-D kernels, is refused by
name. Consecutive recurrent layers whose sizes chain form one stack; where the model holds
several (a Dense between, two unrelated layers), ``layer=`` picks one by object path
(``layer_with_weights-2``, ``model/layer_with_weights-0``) or by the Keras layer name, and
``layer=[…]`` (``--layer`` repeated) reads exactly the layers listed, in the model's order,
each taking the previous one's output.

**SavedModels** (folders with ``saved_model.pb`` and ``variables/variables.*``): the
variables bundle is a checkpoint like the above, but it keys each variable by the first
path TensorFlow found to it (``variables/0`` for a tf.keras ``model.save``,
``lstm/variables/0`` for a ``tf.Module`` holding a layer), so layers are found by walking
the object graph by name, skipping the aliases (``variables``, ``keras_api`` …). tf.keras's
``keras_metadata.pb`` gives each layer's class and config, which then decide cell,
activations and ``reset_after`` (as in a Keras model file); there ``go_backwards=True``
outside a Bidirectional, a ``merge_mode`` other than ``'concat'`` and classes rnnport does
not read (ConvLSTM2D …) are refused by name. Without it, or where it holds no layers, the
layers are read as from a checkpoint, defaults assumed (``notes`` says so).
``saved_model.pb`` is decoded (:func:`rnnport.io.tfproto.read_saved_model`), so a damaged
one is an error, though only the variables' object graph is used. A TF1
``SavedModelBuilder`` export has no object graph: its variables are read by the tf1 format
(``scope=``, ``forget_bias=``, ``cell_clip=`` apply).

**Keras 3 SavedModels** (``model.export(dir)``, the way Keras 3 ships a model, and
``tf.saved_model.save`` of a Keras 3 model: no ``keras_metadata.pb`` and no tf.keras layer
objects, whose identifiers start ``_tf_keras``) hold no Keras layers at all. They are read by
:mod:`.keras3`: the recurrent layers from the variables' Keras 3 paths
(``sequential/encoder/lstm_cell/kernel``), and what no variable records (activations,
``reset_after`` without a bias, ``go_backwards``, a Bidirectional's merge, the order of a
stack, masks) from the serving function's graph, whose loops' steps are evaluated with NumPy.
``layer=`` takes a layer's Keras path or name (``sequential/encoder``, ``encoder``);
``activation=``, ``recurrent_activation=`` and ``reset_after=`` must agree with the graph.

**Writing** (:mod:`.writer`) gives the checkpoint's ``{key: array}``; with ``path=``
(``dir/ckpt``) the checkpoint itself, which tf_keras's ``model.load_weights("dir/ckpt")``
restores into ``Sequential([Input((None, I)), …])`` of the layers the keras format names
(``return_sequences=True``), and ``dir/checkpoint`` names it as the latest. Keras keeps one
bias for LSTM, SimpleRNN and reset-before GRU cells: writing sums the two.

**Running** (``framework_forward``, ``convert --verify``): a Keras 3 SavedModel runs in
TensorFlow with Keras 3, in a process of its own (``TF_USE_LEGACY_KERAS`` unset,
:mod:`rnnport.formats.tf2._keras3`): its own serving function where the stack read is the
whole model (and no layer is a ``CudnnRNNV3``, which has no CPU kernel), else a Keras 3
Sequential of the layers read given the SavedModel's variables. Otherwise, where tensorflow
and tf_keras are installed, TensorFlow runs in a process of its own
(``TF_USE_LEGACY_KERAS=1``, :mod:`rnnport.formats.tf2._keras2`). Where the stack read is
the whole model (its only layers with weights, and besides them only layers that change no
numbers), a SavedModel with Keras metadata is loaded with ``tf_keras.models.load_model``
and a checkpoint restored with ``load_weights`` into the Keras 2 Sequential rebuilt for the
network read; otherwise (a
TimeDistributed(Dense) before it, a stack picked with ``layer=``) that Sequential gets the
stack's own variables, through ``tf.train.load_checkpoint`` of the checkpoint or of the
SavedModel's ``variables/variables``, and is run.
"""

from __future__ import annotations

import bisect
import glob
import importlib.util
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import FormatError
from ...io import tensorbundle
from ...model import RNN, Model
from .._common import is_path, listed
from .._protocol import Choices, Format
from .._tensorflow import run_job, tf_keras_unavailable
from ..keras import layers as keras_layers
from ..keras import read_options_for as keras_read_options_for
from . import objects, writer
from .objects import Layer, Source

__all__ = ["FORMAT"]

KERAS_OPTIONS = frozenset({"activation", "recurrent_activation", "keras_version", "reset_after"})
TF1_OPTIONS = frozenset({"scope", "forget_bias", "cell_clip", "activation"})
READ_OPTIONS = KERAS_OPTIONS | TF1_OPTIONS | {"layer"}
# Object-based checkpoints of Keras layers are tf.keras's (TF2) or tf_keras's: Keras 2, so
# hard_sigmoid is clip(0.2·x + 0.5, 0, 1), and (from 2.3 on) the gates default to sigmoid as
# notes() says; keras_version= overrides it.
CHECKPOINT_KERAS = "2.3"


def sniff(source: Any) -> bool:
    if is_path(source):
        return objects.looks_object_based(source)
    if isinstance(source, Mapping) and source:
        return all(objects.is_object_key(key) for key in source) and any(
            key.endswith(f"/recurrent_kernel{objects.VALUE}") for key in source)
    return False


def _tf1_read(source: Source, options: Mapping[str, Any]) -> Model:
    from .. import get

    unknown = sorted(set(options) - TF1_OPTIONS)
    if unknown:
        raise FormatError(f"{source.where}: a TF1 SavedModel (no object graph; its variables "
                          f"are named by TF1 scopes); option(s) {', '.join(unknown)} apply to "
                          "TF2 objects only. Pass scope=, forget_bias=, cell_clip= or "
                          "activation= instead.")
    return get("tf1").reader(str(source.name_based), **options)


def _check_options(source: Source, options: Mapping[str, Any]) -> None:
    tf1_only = sorted(set(options) & (TF1_OPTIONS - KERAS_OPTIONS))
    if tf1_only:
        raise FormatError(f"{source.where}: option(s) {', '.join(tf1_only)} apply to the TF1 "
                          "variables of a SavedModelBuilder export; this holds TF2 objects "
                          "(Keras layers). Drop them.")


def read(source: Any, **options: Any) -> Model:
    """The recurrent stack of a TF2 checkpoint, SavedModel or dict (see the module docstring)."""
    opened = Source(source)
    if opened.name_based is not None:
        return _tf1_read(opened, options)
    _check_options(opened, options)
    keras_layers.check_version_option(options, f"read(fmt='tf2'): {opened.where}")
    if opened.keras3 is not None:
        export = opened.keras3
        return keras_layers.stack_layers(export.read(export.choose(options.get("layer")),
                                                     options))
    chosen = objects.choose(opened, options.pop("layer", None))
    opened.charge(chosen)
    return keras_layers.stack_layers([_read_layer(opened, layer, options) for layer in chosen])


def _read_layer(source: Source, layer: Layer, options: Mapping[str, Any]) -> Model:
    location = f"{source.where}, {layer.describe()}"
    arrays = source.arrays_of(layer)
    recurrent = arrays[1]
    gates = recurrent.shape[1] // recurrent.shape[0] \
        if recurrent.ndim == 2 and recurrent.shape[0] else 0
    # Options name what a checkpoint does not record, each for the cells it applies to.
    options = {key: value for key, value in options.items()
               if not ((key == "recurrent_activation" and gates not in (3, 4))
                       or (key == "reset_after" and gates != 3))}
    if layer.class_name is None or layer.config is None:
        return keras_layers.read_weights(arrays, {"keras_version": CHECKPOINT_KERAS, **options},
                                         location)
    version = options.get("keras_version", "2")
    if layer.class_name in keras_layers.WRAPPERS:
        if len(layer.inner) != 2:
            raise FormatError(f"{location}: a Bidirectional layer whose forward_layer and "
                              "backward_layer have no Keras metadata; the SavedModel is damaged.")
        configured = keras_layers.bidirectional_options(layer.config, layer.inner[0],
                                                        layer.inner[1], location,
                                                        keras_version=version)
        inner = layer.inner[0][0]
    else:
        inner = layer.class_name
        configured = keras_layers.layer_options(inner, layer.config, location, backward=False,
                                                keras_version=version)
    return keras_layers.read_configured(inner, arrays, options, configured, location)


def notes(source: Any, **options: Any) -> list[str]:
    """Other stacks, other layers with weights (a Dense), optimizer state, the save counter,
    and the activations assumed (names and shapes only; no tensor is read)."""
    opened = Source(source)
    if opened.name_based is not None:
        from .. import get

        return [f"a TF1 SavedModel (SavedModelBuilder): its variables are read as a TF1 "
                f"checkpoint ({opened.name_based}).",
                *get("tf1").source_notes(str(opened.name_based), **options)]
    if opened.keras3 is not None:
        return opened.keras3.notes(opened.keras3.choose(options.get("layer")))
    chosen = objects.choose(opened, options.get("layer"))
    layers = opened.layers()
    found = objects.stacks(opened, layers)
    picked = {layer.path for layer in chosen}
    out = [f"another recurrent stack, layer={stack[0].path!r}: {objects.summary(opened, stack)}; "
           "not read." for stack in found if not picked & {layer.path for layer in stack}]
    out += [f"{layer.describe()}: {objects.kind(opened, layer)}, recurrent, in the stack of the "
            "layers read but not listed in layer=; not read." for stack in found
            if picked & {each.path for each in stack} for layer in stack
            if layer.path not in picked]
    if opened.metadata_file is not None:
        if not any(opened.metadata):
            out.append(f"{opened.metadata_file}: holds no Keras layers (no class or config for "
                       "any layer); the layers are read as from a checkpoint, with what it "
                       "assumes.")
        else:
            bare = [layer.describe() for layer in chosen if layer.class_name is None]
            if bare:
                out.append(f"{opened.metadata_file}: holds no class or config for {listed(bare)}; "
                           "read as from a checkpoint, with what it assumes.")
    recurrent = {layer.path for layer in layers}
    weight_layers = opened.weight_layers()
    under = _grouped(opened.paths, {f"{path}/" for path in weight_layers.values()})
    for (_container, _k), path in sorted(weight_layers.items()):
        if path not in recurrent:
            held = [f"{p[len(path) + 1:]} {opened.shape(p)}" for p in under.get(f"{path}/", [])]
            out.append(f"{path}: a layer with weights that is not recurrent ({listed(held)}); "
                       "not read (rnnport reads the recurrent layers).")
    used = {f"{holder}/" for layer in layers for holder in layer.holders}
    used |= {f"{path}/" for path in weight_layers.values()}
    counters = [path for path in opened.paths if path == "save_counter"]
    optimizer = [path for path in opened.paths if path.split("/")[0] == "optimizer"]
    rest = [path for path in _grouped(opened.paths, used).get("", [])
            if path not in counters and path not in optimizer]
    slots = sum(1 for key in opened.keys if "/.OPTIMIZER_SLOT/" in key)
    if slots or optimizer:
        out.append(f"optimizer state: {len(optimizer)} optimizer variable(s)"
                   f"{f' and {slots} slot variable(s) (…/.OPTIMIZER_SLOT/…)' if slots else ''}; "
                   "training state, not read.")
    if counters:
        out.append("save_counter: tf.train.Checkpoint's count of saves; not read.")
    if rest:
        out.append(f"other variables: {listed(rest)}; not part of the network, not read.")
    unrecorded = [layer for layer in chosen if layer.class_name is None]
    kinds = {objects.kind(opened, layer).split("(")[0].split()[-1] for layer in unrecorded}
    if kinds - {"CuDNNLSTM", "CuDNNGRU"}:  # CuDNN layers have fixed activations
        assumed = []
        if "activation" not in options:
            assumed.append("activation='tanh'")
        if "recurrent_activation" not in options and kinds & {"LSTM", "GRU"}:
            assumed.append("recurrent_activation='sigmoid' (LSTM and GRU)")
        if assumed:
            out.append(f"a checkpoint records no activations: Keras's defaults assumed, "
                       f"{', '.join(assumed)}; pass the option if the model was built "
                       "otherwise.")
    # No option can say these: the note is the only word a checkpoint gets.
    for layer in unrecorded:
        out.append(f"{layer.describe()}: go_backwards=False assumed (a checkpoint does not "
                   "record it; a layer built with go_backwards=True returns its output "
                   "reversed in time, which no other format does, and reads as another network).")
        if len(layer.holders) == 2:
            out.append(f"{layer.describe()}: Bidirectional, merge_mode='concat' assumed (a "
                       "checkpoint does not record it; 'sum', 'mul' or 'ave' combine the two "
                       "directions otherwise, and rnnport's output concatenates them).")
    return out


def _grouped(paths: Iterable[str], prefixes: set[str]) -> dict[str, list[str]]:
    """The paths by the shortest of ``prefixes`` each starts with ("": none), in their
    order; in time n log n, not paths × prefixes (an object graph can hold many of both)."""
    shortest: list[str] = []
    for prefix in sorted(prefixes):  # a prefix-free list: in it, the one a path starts with
        if not shortest or not prefix.startswith(shortest[-1]):  # is the last one before it
            shortest.append(prefix)
    out: dict[str, list[str]] = {}
    for path in paths:
        at = bisect.bisect_right(shortest, path) - 1
        found = shortest[at] if at >= 0 and path.startswith(shortest[at]) else ""
        out.setdefault(found, []).append(path)
    return out


def choices(source: Any) -> Choices:
    """The separate recurrent stacks ``layer=`` picks from."""
    opened = Source(source)
    if opened.name_based is not None:
        from .. import get

        networks = get("tf1").networks
        tf1 = networks(str(opened.name_based)) if networks else Choices("scope", ())
        return tf1
    if opened.keras3 is not None:
        export = opened.keras3
        export.refuse_empty()
        return Choices("layer", tuple((stack[0].path, export.summary(stack))
                                      for stack in export.stacks))
    found = objects.stacks(opened, opened.layers())
    return Choices("layer", tuple((stack[0].path, objects.summary(opened, stack))
                                  for stack in found))


def output_files(path: Path) -> list[Path]:
    """The checkpoint's index and one data shard (the folder's ``checkpoint`` state file is
    updated too, as by tf1, and not listed)."""
    return tensorbundle.bundle_files(tensorbundle.output_prefix(path))


def input_files(path: Path) -> list[Path]:
    """A checkpoint's index and data shards, or a SavedModel's files."""
    if path.is_dir() and (path / "saved_model.pb").is_file():
        variables = path / "variables"
        return [path / "saved_model.pb", path / "keras_metadata.pb", path / "fingerprint.pb",
                *sorted(variables.glob("variables.*"))]
    try:
        prefix = tensorbundle.checkpoint_prefix(path)
    except FormatError:
        prefix = path
    return [Path(f"{prefix}.index"),
            *sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*"))]


def param_count(model: Model) -> int:
    return int(sum(np.size(array) for array in writer.write(model).values()))


def _write(model: Model, path: Any = None) -> dict[str, np.ndarray]:
    return writer.write(model, path)


# -- TensorFlow running the source ------------------------------------------------------------


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """tf_keras (Keras 2, in a TensorFlow process of its own) computing ``y`` for ``x``
    ``(batch, time, input)`` from ``source``: a SavedModel loaded with Keras metadata where
    the stack read is the whole model, else the Sequential rebuilt for ``model`` given the
    stack's variables from the checkpoint (or the SavedModel's variables). Returns (label, y)
    or why not."""
    if not is_path(source):
        return "the source is a dict of arrays, not a file TensorFlow loads: no framework check"
    opened = Source(source)
    if opened.keras3 is not None:
        return _keras3_forward(opened, model, np.asarray(x))
    unavailable = tf_keras_unavailable(x, model.input_size, "Keras 2 models")
    if unavailable is not None:
        return unavailable
    x = np.asarray(x)
    if opened.name_based is not None:
        return "a TF1 SavedModel has no Keras model to run: no framework check"
    if opened.saved_model is not None and not opened.metadata:
        return ("a SavedModel without keras_metadata.pb (tf.saved_model.save of a module) "
                "has no Keras model to load: no framework check")
    assert opened.bundle is not None
    chosen = _matching(opened, model)
    if isinstance(chosen, str):
        return f"{chosen}: no framework check"
    whole = _whole_model(opened, chosen)
    if opened.saved_model is not None and whole:
        # The Keras model itself, loaded as saved: its configs, not the ones read, run.
        return _run({"saved_model": str(opened.saved_model.resolve())}, x, model,
                    f"tf_keras loading the SavedModel {opened.saved_model.name}")
    if any(spec.activations and not keras_layers.holds_activations(spec)
           for spec in (layer.spec for layer in model.layers())):
        return "Keras 2 cannot build these activations: no framework check"
    job: dict[str, Any] = {"checkpoint": str(opened.bundle.prefix.resolve()),
                           "layers": _rebuilt(model)}
    if opened.saved_model is None and whole and [layer.path for layer in chosen] == [
            f"layer_with_weights-{k}" for k in range(len(chosen))]:
        label = f"tf_keras load_weights({opened.bundle.prefix.name}) into the Sequential rebuilt"
    else:
        job["keys"] = [[opened.paths[f"{holder}/{name}"] for holder in layer.holders
                        for name in ("kernel", "recurrent_kernel", "bias")
                        if f"{holder}/{name}" in opened.paths] for layer in chosen]
        named = (f"{opened.saved_model.name}/variables/variables" if opened.saved_model
                 else opened.bundle.prefix.name)
        label = f"tf_keras set_weights from tf.train.load_checkpoint({named}) into the Sequential rebuilt"
    return _run(job, x, model, label)


def _keras3_forward(source: Source, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """Keras 3 in a TensorFlow process of its own: the SavedModel's own serving function where
    the stack read is the whole model, else a Keras 3 Sequential of the layers read given their
    variables."""
    missing = [name for name in ("tensorflow", "keras") if importlib.util.find_spec(name) is None]
    if missing:
        return (f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed "
                "(a Keras 3 SavedModel runs in TensorFlow with Keras 3): no framework check")
    if x.ndim != 3 or x.shape[2] != model.input_size:
        return (f"x has shape {x.shape}; TensorFlow is run on (batch, time, "
                f"{model.input_size}): no framework check")
    export = source.keras3
    chosen = export.matching(model)
    if chosen is None:
        return f"{source.where}: holds no recurrent stack like the network read: no framework check"
    assert source.saved_model is not None and source.bundle is not None
    # A CudnnRNNV3 (exported on a GPU) has no CPU kernel: those layers run rebuilt.
    if export.whole(chosen) and not any(d.cudnn for layer in chosen for d in layer.directions):
        job: dict[str, Any] = {"saved_model": str(source.saved_model.resolve())}
        label = f"TensorFlow running {source.saved_model.name}'s own serving function (Keras 3)"
    else:
        job = {"checkpoint": str(source.bundle.prefix.resolve()), "layers": export.rebuilt(chosen)}
        label = (f"Keras 3 set_weights from tf.train.load_checkpoint({source.saved_model.name}/"
                 "variables/variables) into the Sequential rebuilt")
    y = run_job(["-m", "rnnport.formats.tf2._keras3"], {**job, "dtype": str(model.dtype)},
                x.astype(model.dtype, copy=False), "it", legacy_keras=False)
    return f"{y}: no framework check" if isinstance(y, str) else (label, y)


def _whole_model(source: Source, chosen: list[Layer]) -> bool:
    """Whether running the source's model runs ``chosen`` alone: they are its only layers with
    weights, and (where Keras metadata lists the others) the rest change no numbers."""
    paths = {layer.path for layer in chosen}
    if set(source.weight_layers().values()) != paths:
        return False
    top = {path: entry[0] for path, entry in source.metadata.items() if path and "/" not in path}
    return all(path in paths or cls in keras_layers.PASSIVE_LAYERS for path, cls in top.items())


def _matching(source: Source, model: Model) -> list[Layer] | str:
    """The source's layers that ``model`` was read from, told by their sizes and cells: a
    whole stack, else part of one, else layers that chain (``layer=[…]``)."""
    layers = model.layers()
    found = objects.stacks(source, source.layers())

    def like(each: Layer, layer: RNN) -> bool:
        return source.sizes(each) == (layer.spec.input_size, layer.output_size) \
            and len(each.holders) == layer.spec.num_directions \
            and _gates(source, each) == layer.spec.gate_count

    def fits(candidate: list[Layer]) -> bool:
        return len(candidate) == len(layers) and all(
            like(each, layer) for each, layer in zip(candidate, layers, strict=True))

    runs = [stack[start:start + len(layers)] for stack in found
            for start in range(len(stack) - len(layers) + 1)]
    # Layers that chain across stacks (layer=[…]): the first such run in the source's
    # order, each layer like the network's in its place (found in one pass, not by trying
    # every run, whose number grows exponentially with the layers).
    chain: list[Layer] = []
    for each in (layer for stack in found for layer in stack):
        if len(chain) < len(layers) and like(each, layers[len(chain)]):
            chain.append(each)
    for candidate in [*(stack for stack in found if len(stack) == len(layers)), *runs, chain]:
        if fits(candidate):
            if any(objects.kind(source, each).startswith(("CuDNN", "Bidirectional CuDNN"))
                   for each in candidate):
                return ("CuDNNLSTM / CuDNNGRU layers run only on a GPU (TensorFlow has no CPU "
                        "kernel for them)")
            return candidate
    return f"{source.where}: holds no recurrent stack like the network read"


def _gates(source: Source, layer: Layer) -> int:
    recurrent = source.shape(f"{layer.holders[0]}/recurrent_kernel")
    return recurrent[1] // recurrent[0] if len(recurrent) == 2 and recurrent[0] else 0


def _rebuilt(model: Model) -> list[dict[str, Any]]:
    out = []
    specs = [layer.spec for layer in model.layers()]
    for spec, (cls, name, inner) in zip(specs, writer.keras_classes(specs), strict=True):
        config: dict[str, Any] = {"units": spec.hidden_size, "return_sequences": True,
                                  "use_bias": spec.bias, "name": inner}
        if cls == "SimpleRNN":
            config["activation"] = spec.nonlinearity
        else:
            config.update(keras_read_options_for(spec.replace(bias=True))
                          if spec.activations else {})
            config.pop("keras_version", None)
        if cls == "GRU":
            config["reset_after"] = spec.reset_after
        out.append({"class": cls, "config": config, "bidirectional": spec.bidirectional,
                    "name": name, "input_size": spec.input_size})
    return out


def _run(job: dict[str, Any], x: np.ndarray, model: Model,
         label: str) -> tuple[str, np.ndarray] | str:
    y = run_job(["-m", "rnnport.formats.tf2._keras2"], {**job, "dtype": str(model.dtype)},
                np.asarray(x).astype(model.dtype, copy=False), "it")
    return f"{y}: no framework check" if isinstance(y, str) else (label, y)


FORMAT = Format(
    "tf2", sniff=sniff, reader=read, writer=_write, counter=param_count,
    read_options=READ_OPTIONS,
    features=frozenset({"reset_before"}),
    # As Keras: one bias for LSTM, SimpleRNN and reset-before GRU (reset-after keeps two).
    one_bias=frozenset({"lstm", "gru_reset_before", "rnn"}),
    read_options_for=keras_read_options_for, output_files=output_files,
    input_files=input_files, gate_names={"g": "c", "n": "h"},
    layout_notes=("Variables are keyed by object path: layer_with_weights-k/cell/{kernel, "
                  "recurrent_kernel, bias}/.ATTRIBUTES/VARIABLE_VALUE, Keras's arrays.",),
    names={"reset_before": "reset_after=False", "reset_after": "reset_after=True"},
    activations=keras_layers.holds_activations, notes=notes, networks=choices,
    framework_forward=framework_forward)
