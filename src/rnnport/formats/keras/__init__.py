"""Keras: layers, ``get_weights()`` lists and model files.

Two halves, depending one way: :mod:`.layers` reads and writes layer objects and their
``get_weights()`` arrays (its docstring is the layout specification), and :mod:`.files`
reads and writes ``.keras`` archives, Keras 3 ``.weights.h5`` files and legacy ``.h5`` /
``.hdf5`` files on top of it (h5py only; Keras is never imported to read), Keras 1's
per-gate layers in those through :mod:`.keras1` (read only: writing gives Keras 2/3).

``read`` takes a layer, a list of layers, ``get_weights()`` lists, or a path to a
``.keras`` archive, a ``.weights.h5`` or a legacy ``.h5`` / ``.hdf5`` file; the layer
configs (where the file has them) decide cell, activation and reset_after, and ``layer=``
picks one stack when the model holds several. ``write`` gives the ``get_weights()``
nesting (a flat list for a one-layer network, a list of per-layer lists otherwise); with
``path=`` it also saves a ``.keras`` archive (a Sequential model that
``keras.saving.load_model`` runs) or a ``.weights.h5`` for ``load_weights``.

The framework check (``framework_forward``, ``convert --verify``) has Keras 3 load a
``.keras`` file and run it; for a ``.weights.h5``, Keras loads the Sequential rnnport writes
for the network and then ``load_weights`` the file into it.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import UnsupportedFeatureError
from ...model import RNN, Model
from ...spec import Spec
from .._common import is_path
from .._protocol import Choices, Format, NamedArray, Suffix
from . import files, layers

__all__ = ["FORMAT"]


def sniff(source: Any) -> bool:
    return files.is_keras_file(source) if is_path(source) else layers.sniff(source)


def read(source: Any, **options: Any) -> Model:
    return files.read_file(source, **options) if is_path(source) else \
        layers.read(source, **options)


def notes(source: Any, **options: Any) -> list[str]:
    """A file's layers beside the stack read, and what is assumed (a layer object or a
    weights list holds nothing else)."""
    return files.notes(source, **options) if is_path(source) else []


def write(model: Model, path: Any = None) -> list[Any]:
    arrays = layers.write(model)
    if path is not None:
        files.write_file([layer.spec for layer in model.layers()], arrays, path)
    if isinstance(model, RNN) and model.spec.num_layers == 1:
        return arrays[0]
    return arrays


def param_count(model: Model) -> int:
    return int(sum(np.size(array) for array in layers.leaves(layers.write(model))))


def read_options_for(spec: Spec) -> dict[str, Any]:
    """Arrays say neither a layer's activations nor which GRU a bias-free one is."""
    options: dict[str, Any] = {}
    if spec.cell.startswith("rnn"):
        options["activation"] = spec.nonlinearity
    if spec.cell == "gru" and not spec.bias:
        options["reset_after"] = spec.reset_after
    if spec.activations:
        names = [layers.keras_names(activation) for activation in spec.activations[:2]]
        options["recurrent_activation"], options["activation"] = (
            next(iter(found.values())) for found in names)
        majors = {major for found in names for major in found if major is not None}
        if majors:
            options["keras_version"] = str(majors.pop())
    return options


def stack_read_options(specs: list[Spec]) -> dict[str, Any]:
    """A weights file does not record the order of layers of different classes: name them."""
    return {"layer": files.layer_names(specs)}


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """One layer's arrays under the names Keras gives them."""
    names = ("kernel", "recurrent_kernel", "bias")
    return [NamedArray(name, np.asarray(array)) for name, array in zip(names, native,
                                                                       strict=False)]


def choices(source: Any) -> Choices:
    """The separate recurrent stacks of a model file, each picked by one of its layers."""
    return Choices("layer", tuple(files.stacks(source)))


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """Keras 3 computing ``y`` for ``x`` (batch, time, I) from a source file.

    A ``.keras`` archive is loaded with ``keras.saving.load_model`` and run, when it holds
    only the recurrent stack. A ``.weights.h5`` holds no architecture: Keras loads the
    Sequential rnnport writes for ``model`` (a ``.keras`` in a temporary folder, every weight
    NaN so that one ``load_weights`` leaves unset shows), then ``load_weights(source)``, and
    runs it. Returns (label, y (batch, time, D·H_out)), or why Keras cannot run it.
    """
    name = os.fspath(source).lower() if is_path(source) else ""
    if not name.endswith((".keras", ".weights.h5")):
        what = "a legacy .h5 file" if name.endswith((".h5", ".hdf5")) else (
            "a file" if name else "an object in memory")
        return (f"the Keras check loads .keras and .weights.h5 files, and this is {what}: "
                "no framework check")
    if importlib.util.find_spec("keras") is None:
        return "Keras is not installed: no framework check"
    # Keras 3 brings its backend (often TensorFlow): fewer of its start-up lines on the
    # terminal (TensorFlow prints some before it reads this setting).
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras

    if name.endswith(".keras"):
        loaded = keras.saving.load_model(source, compile=False)
        others = [layer.name for layer in loaded.layers if type(layer).__name__ not in
                  {*layers.LAYER_CELLS, *layers.WRAPPERS, *layers.PASSIVE_LAYERS}]
        if others:
            return (f"the Keras model has layers beyond the recurrent stack "
                    f"({', '.join(others)}): no framework check")
        recurrent = [layer for layer in loaded.layers
                     if type(layer).__name__ in {*layers.LAYER_CELLS, *layers.WRAPPERS}]
        if len(recurrent) != len(model.layers()):
            return (f"the Keras model runs {len(recurrent)} recurrent layer(s), and "
                    f"{len(model.layers())} were read (layer= picked some): no framework check")
        label = f"Keras 3 loading {Path(source).name}"
        config = loaded.get_config()
        if _every_step(config):  # compare every step, not the last only
            rebuilt = type(loaded).from_config(config)
            rebuilt.set_weights(loaded.get_weights())
            loaded, label = rebuilt, label + " (return_sequences=True to compare every step)"
        y = loaded(x)
        return label, keras.ops.convert_to_numpy(y[0] if isinstance(y, (list, tuple)) else y)
    specs = [layer.spec for layer in model.layers()]
    why = files.loads_into(source, specs)
    if why is not None:
        return f"{why}: no framework check"
    blank = [[np.full_like(array, np.nan) for array in arrays] for arrays in layers.write(model)]
    with tempfile.TemporaryDirectory(prefix="rnnport-") as folder:
        rebuilt = Path(folder) / "rebuilt.keras"
        try:
            files.write_file(specs, blank, rebuilt)
        except UnsupportedFeatureError as error:  # Keras 2's hard_sigmoid, say
            return f"Keras 3 cannot build this network ({error}): no framework check"
        built = keras.saving.load_model(rebuilt, compile=False)
    built.load_weights(source)
    label = f"Keras 3 loading {Path(source).name} into the Sequential rnnport rebuilt"
    return label, keras.ops.convert_to_numpy(built(x))


def _every_step(config: Any) -> bool:
    """Set ``return_sequences`` in every recurrent layer's config of a saved model's config;
    whether any was off."""
    changed = False
    if isinstance(config, dict):
        inner = config.get("config")
        if config.get("class_name") in {*layers.LAYER_CELLS, *layers.WRAPPERS} \
                and isinstance(inner, dict) and inner.get("return_sequences") is False:
            inner["return_sequences"] = True
            changed = True
        for value in config.values():
            changed |= _every_step(value)
    elif isinstance(config, list):
        for value in config:
            changed |= _every_step(value)
    return changed


FORMAT = Format(
    "keras", sniff=sniff, reader=read, writer=write, counter=param_count,
    read_options=frozenset({"activation", "recurrent_activation", "keras_version", "reset_after",
                            "layer", "cudnn_layer"}),
    features=frozenset({"reset_before"}),
    # Cells whose two biases Keras keeps as one (a GRU with reset_after=True keeps both).
    one_bias=frozenset({"lstm", "gru_reset_before", "rnn"}), extra="keras", modules=("h5py",),
    suffixes=(Suffix(".weights.h5", "a Keras 3 weights file"),
              Suffix(".keras", "a Keras 3 .keras archive"),
              Suffix(".h5", "a legacy Keras .h5", writes=False),
              Suffix(".hdf5", "a legacy Keras .hdf5", writes=False)),
    read_options_for=read_options_for, gate_names={"g": "c", "n": "h"},
    explain_arrays=explain_arrays, framework_forward=framework_forward,
    names={"reset_before": "reset_after=False", "reset_after": "reset_after=True"},
    activations=layers.holds_activations, notes=notes, networks=choices,
    stack_read_options=stack_read_options)
