"""Generate golden JAX files: Flax (linen and NNX) and Equinox recurrent cells run over time.

    .venv/bin/python tools/golden_jax.py [--out tests/golden/jax] [--case NAME ...] [--list]

Everything here is made by the real libraries (``flax.linen``, ``flax.nnx``, ``equinox``)
on JAX's CPU backend, for rnnport's JAX reading to be checked against. ``rnnport`` is not
imported. Shapes: batch 2, time 5, input 3, hidden 4, float32, zero initial state.

How each library is run
-----------------------
``flax.linen``
    Each cell is wrapped in ``nn.RNN(cell)`` (batch-major), or two of them in
    ``nn.Bidirectional(forward, backward)`` (default merge: concatenate forward then
    backward on the last axis, so 8 features). The stacked cases are small linen Modules
    that apply two layers one after the other; their layers and cells are built with
    ``parent=None`` so that each cell lives under its own layer's scope (``RNN_0/cell``,
    ``Bidirectional_1/forward_rnn/cell``). (Built inside ``@nn.compact`` without
    ``parent=None``, linen adopts the cells into the enclosing Module instead, as
    ``LSTMCell_0``, ``LSTMCell_1``, ...) The ``*_lengths`` cases pass ``seq_lengths``:
    Flax still computes outputs for the steps past a sequence's length, and they are
    stored as Flax gives them, but only steps ``t < length`` are meaningful.
``flax.nnx``
    Each cell (``nnx.LSTMCell(3, 4, rngs=...)`` and so on) is run over time with
    ``nnx.RNN(cell)``; the parameters are ``nnx.state(model, nnx.Param).to_pure_dict()``.
``equinox``
    Each cell (or the list of cells, for the stack) is run over time with ``jax.lax.scan``
    from a zero state and mapped over the batch with ``jax.vmap``; the output is the
    sequence of ``h`` (an LSTM cell returns ``(h, c)``). In the stack the second cell is
    fed the first cell's sequence of ``h``.

Parameter layouts, as the libraries have them
---------------------------------------------
* linen ``LSTMCell`` and ``OptimizedLSTMCell`` (same names): ``ii if ig io`` hold input
  kernels ``(input, hidden)`` without bias; ``hi hf hg ho`` hold recurrent kernels
  ``(hidden, hidden)`` and the biases. NNX ``LSTMCell`` is the same with ``if_`` for ``if``.
* NNX ``OptimizedLSTMCell``: ``dense_i`` (kernel ``(input, 4*hidden)``, no bias) and
  ``dense_h`` (kernel ``(hidden, 4*hidden)`` and bias), gates in order i, f, g, o.
* linen ``GRUCell``: ``ir iz in`` (kernel and bias), ``hr hz`` (kernel only), ``hn``
  (kernel and bias, applied inside the reset: ``n = tanh(W_in x + b_in + r * (W_hn h +
  b_hn))``). NNX ``GRUCell``: ``dense_i`` (kernel ``(input, 3*hidden)`` and bias) and
  ``dense_h`` (kernel only), gates r, z, n: it has no ``b_hn`` at all.
* linen ``SimpleCell``: ``i`` (kernel and bias) and ``h`` (kernel only); NNX: ``dense_i``
  and ``dense_h`` likewise.
* Equinox: ``weight_ih`` ``(gates*hidden, input)`` and ``weight_hh`` ``(gates*hidden,
  hidden)`` (PyTorch's orientation, the transpose of Flax's kernels). ``LSTMCell`` has one
  ``bias`` ``(4*hidden,)``, gates i, f, g, o. ``GRUCell`` has ``bias`` ``(3*hidden,)`` added
  on the input side (r, z, n) and ``bias_n`` ``(hidden,)`` added to ``W_hn h`` inside the
  reset; with ``use_bias=False`` both are ``None`` and not stored.

Weights: every parameter is random (uniform, ±0.6) and every value in a case is distinct,
biases included (never the libraries' zero initial biases), so a swapped gate or a dropped
bias cannot pass. Inputs are uniform ±1. Seeds: CRC32 of the case name (weights), CRC32
plus one (inputs).

Files, per case ``<name>``
--------------------------
``<name>.npz`` (plain arrays, ``allow_pickle=False``):

``x``
    The input, ``(batch, time, input)``, float32.
``y``
    The library's output for ``x``, ``(batch, time, features)``, float32.
``lengths``
    Only in the ``*_lengths`` cases: the ``seq_lengths`` passed to Flax, int32
    ``(batch,)``. Only steps ``t < lengths[b]`` of ``y[b]`` are meaningful.
``params/<path>``
    Every parameter array, ``<path>`` its key path in the library's own tree joined with
    ``/``: for linen the variables' keys including the ``params`` collection
    (``params/params/cell/ii/kernel``), for NNX the pure dict's keys
    (``params/cell/if_/kernel``), for Equinox the field name (``params/weight_ih``) or, in
    the stack, the layer index then the field name (``params/0/weight_ih``).
``meta``
    0-d unicode array holding a JSON object: ``case``, ``description``, ``library``
    (``flax.linen``, ``flax.nnx`` or ``equinox``), ``versions`` (jax, flax, equinox, numpy),
    ``cells`` (one per cell: ``class``, ``scope``, the key path prefix of its parameters,
    and ``options``, e.g. ``features``, ``gate_fn`` and ``activation_fn`` names),
    ``options`` (the first cell's options), ``structure`` (``bidirectional``, ``merge``,
    ``layers``, ``time_major``, ``initial_state``, ``seq_lengths`` and, where lengths are
    given, ``steps_past_length``), ``params`` (path -> shape), ``x_shape``, ``y_shape`` and
    ``tolerance`` (how close a reimplementation should come to ``y``).

``<name>.msgpack``
    Flax linen cases only: ``flax.serialization.to_bytes(variables)`` of the same variables
    (the format linen checkpoints are saved in).

``MANIFEST.json`` lists every case with its description, library, files and their SHA-256.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import golden_manifest
import numpy as np

BATCH, TIME, INPUT, HIDDEN = 2, 5, 3, 4
TOLERANCE = 1e-6
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "jax"


@dataclasses.dataclass
class Golden:
    """What one case's builder hands back to be written."""

    library: str
    y: np.ndarray
    params: dict[str, np.ndarray]
    cells: list[dict[str, Any]]
    structure: dict[str, Any]
    lengths: np.ndarray | None = None
    variables: Any = None  # linen only: the variables saved as ``<name>.msgpack``


_distinct_uniform = golden_manifest.distinct_uniform


def _key_name(entry: Any) -> str:
    """One step of a JAX key path as text: a dict key, an attribute name or a list index."""
    import jax

    if isinstance(entry, jax.tree_util.DictKey):
        return str(entry.key)
    if isinstance(entry, jax.tree_util.GetAttrKey):
        return entry.name
    if isinstance(entry, jax.tree_util.SequenceKey):
        return str(entry.idx)
    raise TypeError(f"unexpected key path entry {entry!r}")


def _leaves_by_path(tree: Any) -> dict[str, np.ndarray]:
    """The array leaves of a JAX tree by ``/``-joined key path, as numpy arrays."""
    import jax

    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {"/".join(_key_name(entry) for entry in path): np.asarray(leaf) for path, leaf in leaves}


def _randomize_tree(tree: Any, rng: np.random.Generator) -> tuple[Any, dict[str, np.ndarray]]:
    """Replace every array leaf of ``tree`` by distinct random values.

    Returns the new tree (numpy leaves) and its leaves by ``/``-joined key path.
    """
    import jax

    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    used: set[float] = set()
    new_leaves, by_path = [], {}
    for path, leaf in leaves:
        value = _distinct_uniform(rng, tuple(np.shape(leaf)), used)
        new_leaves.append(value)
        by_path["/".join(_key_name(entry) for entry in path)] = value
    return jax.tree_util.tree_unflatten(treedef, new_leaves), by_path


def _function_name(function: Callable[..., Any]) -> str:
    return getattr(function, "__name__", repr(function))


def _cell_entry(cell: Any, scope: str, option_names: tuple[str, ...]) -> dict[str, Any]:
    """Describe one cell: its class, where its parameters sit and its options."""
    options: dict[str, Any] = {}
    for option in option_names:
        value = getattr(cell, option)
        options[option] = _function_name(value) if callable(value) else value
    return {"class": type(cell).__name__, "scope": scope, "options": options}


def _structure(layers: int = 1, bidirectional: bool = False,
               lengths: np.ndarray | None = None) -> dict[str, Any]:
    structure: dict[str, Any] = {
        "layers": layers, "bidirectional": bidirectional,
        "merge": "concat (forward, backward)" if bidirectional else None,
        "stacked": layers > 1, "time_major": False, "initial_state": "zeros",
        "seq_lengths": None if lengths is None else lengths.tolist(),
    }
    if lengths is not None:
        structure["steps_past_length"] = "computed by Flax and stored, but not meaningful"
    return structure


# Flax linen ------------------------------------------------------------------------------

LINEN_OPTIONS = {"LSTMCell": ("features", "gate_fn", "activation_fn"),
                 "OptimizedLSTMCell": ("features", "gate_fn", "activation_fn"),
                 "GRUCell": ("features", "gate_fn", "activation_fn"),
                 "SimpleCell": ("features", "activation_fn", "residual")}


def _linen_cell_entry(cell: Any, scope: str) -> dict[str, Any]:
    return _cell_entry(cell, scope, LINEN_OPTIONS[type(cell).__name__])


def _run_linen(module: Any, rng: np.random.Generator, x: np.ndarray, seed: int,
               lengths: np.ndarray | None = None) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """Initialize a linen module, randomize all its variables and apply it to ``x``."""
    import jax

    variables = module.init(jax.random.key(seed), x)
    variables, params = _randomize_tree(variables, rng)
    if lengths is None:
        y = module.apply(variables, x)
    else:
        y = module.apply(variables, x, seq_lengths=lengths)
    return variables, params, np.asarray(y, dtype=np.float32)


def _linen_single(cell_factory: Callable[[], Any]) -> Callable[..., Golden]:
    """A builder for ``nn.RNN(cell)`` as the top module."""
    def build(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
        import flax.linen as nn

        cell = cell_factory()
        variables, params, y = _run_linen(nn.RNN(cell), rng, x, seed)
        return Golden("flax.linen", y, params, [_linen_cell_entry(cell, "params/cell")],
                      _structure(), variables=variables)
    return build


def _linen_lstm() -> Any:
    import flax.linen as nn

    return nn.LSTMCell(HIDDEN)


def _linen_optimized_lstm() -> Any:
    import flax.linen as nn

    return nn.OptimizedLSTMCell(HIDDEN)


def _linen_gru() -> Any:
    import flax.linen as nn

    return nn.GRUCell(HIDDEN)


def _linen_simple_tanh() -> Any:
    import flax.linen as nn

    return nn.SimpleCell(HIDDEN)


def _linen_simple_relu() -> Any:
    import flax.linen as nn

    return nn.SimpleCell(HIDDEN, activation_fn=nn.relu)


def _linen_bidirectional_gru(rng: np.random.Generator, x: np.ndarray, seed: int,
                             lengths: np.ndarray | None = None) -> Golden:
    import flax.linen as nn

    forward, backward = nn.GRUCell(HIDDEN), nn.GRUCell(HIDDEN)
    module = nn.Bidirectional(nn.RNN(forward), nn.RNN(backward))
    variables, params, y = _run_linen(module, rng, x, seed, lengths)
    cells = [_linen_cell_entry(forward, "params/forward_rnn/cell"),
             _linen_cell_entry(backward, "params/backward_rnn/cell")]
    return Golden("flax.linen", y, params, cells, _structure(bidirectional=True, lengths=lengths),
                  lengths=lengths, variables=variables)


def _linen_bi_gru(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    return _linen_bidirectional_gru(rng, x, seed)


def _linen_bi_gru_lengths(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    return _linen_bidirectional_gru(rng, x, seed, np.array([5, 2], dtype=np.int32))


def _linen_lstm_lengths(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import flax.linen as nn

    cell = nn.LSTMCell(HIDDEN)
    lengths = np.array([5, 3], dtype=np.int32)
    variables, params, y = _run_linen(nn.RNN(cell), rng, x, seed, lengths)
    return Golden("flax.linen", y, params, [_linen_cell_entry(cell, "params/cell")],
                  _structure(lengths=lengths), lengths=lengths, variables=variables)


def _linen_stack_modules() -> tuple[Any, Any]:
    """The two stacked linen Modules (defined here so flax is imported only when needed)."""
    import flax.linen as nn

    class StackedLSTM(nn.Module):
        """Two ``nn.RNN(nn.LSTMCell)`` layers, the second fed the first's outputs."""

        features: int

        @nn.compact
        def __call__(self, inputs: Any) -> Any:
            hidden = nn.RNN(nn.LSTMCell(self.features, parent=None))(inputs)
            return nn.RNN(nn.LSTMCell(self.features, parent=None))(hidden)

    class StackedBidirectionalLSTM(nn.Module):
        """Two Bidirectional LSTM layers; the second's input is ``2 * features`` wide."""

        features: int

        @nn.compact
        def __call__(self, inputs: Any) -> Any:
            hidden = inputs
            for _ in range(2):
                forward = nn.RNN(nn.LSTMCell(self.features, parent=None), parent=None)
                backward = nn.RNN(nn.LSTMCell(self.features, parent=None), parent=None)
                hidden = nn.Bidirectional(forward, backward)(hidden)
            return hidden

    return StackedLSTM, StackedBidirectionalLSTM


def _linen_stack_lstm(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import flax.linen as nn

    stacked_lstm, _ = _linen_stack_modules()
    variables, params, y = _run_linen(stacked_lstm(HIDDEN), rng, x, seed)
    cells = [_linen_cell_entry(nn.LSTMCell(HIDDEN), f"params/RNN_{layer}/cell") for layer in range(2)]
    return Golden("flax.linen", y, params, cells, _structure(layers=2), variables=variables)


def _linen_stack_bi_lstm(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import flax.linen as nn

    _, stacked_bidirectional = _linen_stack_modules()
    variables, params, y = _run_linen(stacked_bidirectional(HIDDEN), rng, x, seed)
    cells = [_linen_cell_entry(nn.LSTMCell(HIDDEN), f"params/Bidirectional_{layer}/{direction}/cell")
             for layer in range(2) for direction in ("forward_rnn", "backward_rnn")]
    return Golden("flax.linen", y, params, cells, _structure(layers=2, bidirectional=True),
                  variables=variables)


# Flax NNX --------------------------------------------------------------------------------

NNX_OPTIONS = {"LSTMCell": ("in_features", "hidden_features", "gate_fn", "activation_fn"),
               "OptimizedLSTMCell": ("in_features", "hidden_features", "gate_fn", "activation_fn"),
               "GRUCell": ("in_features", "hidden_features", "gate_fn", "activation_fn"),
               "SimpleCell": ("in_features", "hidden_features", "activation_fn", "residual")}


def _nnx_single(cell_class_name: str) -> Callable[..., Golden]:
    """A builder for ``nnx.RNN(nnx.<cell_class_name>(3, 4))``."""
    def build(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
        from flax import nnx

        cell = getattr(nnx, cell_class_name)(INPUT, HIDDEN, rngs=nnx.Rngs(seed))
        model = nnx.RNN(cell)
        state = nnx.state(model, nnx.Param)
        pure, params = _randomize_tree(state.to_pure_dict(), rng)
        state.replace_by_pure_dict(pure)
        nnx.update(model, state)
        # Check that the model now holds exactly the values that will be stored.
        held = _leaves_by_path(nnx.state(model, nnx.Param).to_pure_dict())
        if held.keys() != params.keys() or any(not np.array_equal(held[path], value)
                                               for path, value in params.items()):
            raise SystemExit(f"NNX {cell_class_name}: the model's parameters were not all replaced")
        y = np.asarray(model(x), dtype=np.float32)
        entry = _cell_entry(cell, "params/cell", NNX_OPTIONS[cell_class_name])
        return Golden("flax.nnx", y, params, [entry], _structure())
    return build


# Equinox ---------------------------------------------------------------------------------

def _equinox_run(cells: list[Any], x: np.ndarray) -> np.ndarray:
    """Run cells one after the other over time (``lax.scan``) and over the batch (``vmap``)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    def run_cell(cell: Any, sequence: Any) -> Any:
        zeros = jnp.zeros(cell.hidden_size, dtype=jnp.float32)
        initial = (zeros, zeros) if isinstance(cell, eqx.nn.LSTMCell) else zeros

        def step(state: Any, inputs: Any) -> tuple[Any, Any]:
            new_state = cell(inputs, state)
            h = new_state[0] if isinstance(new_state, tuple) else new_state
            return new_state, h

        _, hs = jax.lax.scan(step, initial, sequence)
        return hs

    def run_sequence(sequence: Any) -> Any:
        for cell in cells:
            sequence = run_cell(cell, sequence)
        return sequence

    return np.asarray(jax.vmap(run_sequence)(jnp.asarray(x)), dtype=np.float32)


def _equinox_build(make_cells: Callable[[Any], Any], rng: np.random.Generator,
                   x: np.ndarray, seed: int) -> Golden:
    """Randomize an Equinox cell (or list of cells) and run it; ``make_cells(key)`` builds it."""
    import jax
    import jax.numpy as jnp

    model = make_cells(jax.random.key(seed))
    model, params = _randomize_tree(model, rng)
    model = jax.tree_util.tree_map(jnp.asarray, model)
    cells = model if isinstance(model, list) else [model]
    y = _equinox_run(cells, x)
    entries = []
    for index, cell in enumerate(cells):
        scope = f"params/{index}" if isinstance(model, list) else "params"
        entries.append(_cell_entry(cell, scope, ("input_size", "hidden_size", "use_bias")))
    return Golden("equinox", y, params, entries, _structure(layers=len(cells)))


def _equinox_lstm(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import equinox as eqx

    return _equinox_build(lambda key: eqx.nn.LSTMCell(INPUT, HIDDEN, key=key), rng, x, seed)


def _equinox_gru(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import equinox as eqx

    return _equinox_build(lambda key: eqx.nn.GRUCell(INPUT, HIDDEN, key=key), rng, x, seed)


def _equinox_gru_nobias(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import equinox as eqx

    return _equinox_build(lambda key: eqx.nn.GRUCell(INPUT, HIDDEN, use_bias=False, key=key),
                          rng, x, seed)


def _equinox_stack(rng: np.random.Generator, x: np.ndarray, seed: int) -> Golden:
    import equinox as eqx
    import jax

    def make_cells(key: Any) -> list[Any]:
        first, second = jax.random.split(key)
        return [eqx.nn.LSTMCell(INPUT, HIDDEN, key=first), eqx.nn.LSTMCell(HIDDEN, HIDDEN, key=second)]

    return _equinox_build(make_cells, rng, x, seed)


# name -> (builder, description); a builder takes (weights rng, x, integer seed for the
# libraries' own initializers, whose values are all replaced) and returns a Golden.
CASES: dict[str, tuple[Callable[..., Golden], str]] = {
    "linen_lstm": (_linen_single(_linen_lstm), "flax.linen nn.RNN(nn.LSTMCell(4))"),
    "linen_optimized_lstm": (_linen_single(_linen_optimized_lstm),
                             "flax.linen nn.RNN(nn.OptimizedLSTMCell(4))"),
    "linen_gru": (_linen_single(_linen_gru), "flax.linen nn.RNN(nn.GRUCell(4))"),
    "linen_simple_tanh": (_linen_single(_linen_simple_tanh), "flax.linen nn.RNN(nn.SimpleCell(4)), tanh"),
    "linen_simple_relu": (_linen_single(_linen_simple_relu),
                          "flax.linen nn.RNN(nn.SimpleCell(4, activation_fn=nn.relu))"),
    "linen_bi_gru": (_linen_bi_gru, "flax.linen nn.Bidirectional(nn.RNN(nn.GRUCell(4)), "
                     "nn.RNN(nn.GRUCell(4))), concat merge: 8 features"),
    "linen_stack_lstm": (_linen_stack_lstm, "flax.linen Module applying two nn.RNN(nn.LSTMCell(4)) "
                         "layers one after the other (scopes RNN_0, RNN_1)"),
    "linen_stack_bi_lstm": (_linen_stack_bi_lstm, "flax.linen Module applying two "
                            "nn.Bidirectional LSTM(4) layers (scopes Bidirectional_0, "
                            "Bidirectional_1; the second's input is 8 wide)"),
    "linen_lstm_lengths": (_linen_lstm_lengths, "flax.linen nn.RNN(nn.LSTMCell(4)) with "
                           "seq_lengths=[5, 3]; only steps < length are meaningful"),
    "linen_bi_gru_lengths": (_linen_bi_gru_lengths, "flax.linen Bidirectional GRU(4) with "
                             "seq_lengths=[5, 2]; only steps < length are meaningful"),
    "nnx_lstm": (_nnx_single("LSTMCell"), "flax.nnx nnx.RNN(nnx.LSTMCell(3, 4))"),
    "nnx_optimized_lstm": (_nnx_single("OptimizedLSTMCell"),
                           "flax.nnx nnx.RNN(nnx.OptimizedLSTMCell(3, 4))"),
    "nnx_gru": (_nnx_single("GRUCell"), "flax.nnx nnx.RNN(nnx.GRUCell(3, 4))"),
    "nnx_simple_tanh": (_nnx_single("SimpleCell"), "flax.nnx nnx.RNN(nnx.SimpleCell(3, 4)), tanh"),
    "equinox_lstm": (_equinox_lstm, "equinox eqx.nn.LSTMCell(3, 4) over lax.scan, vmap over batch"),
    "equinox_gru": (_equinox_gru, "equinox eqx.nn.GRUCell(3, 4) over lax.scan, vmap over batch"),
    "equinox_gru_nobias": (_equinox_gru_nobias, "equinox eqx.nn.GRUCell(3, 4, use_bias=False) "
                           "over lax.scan, vmap over batch"),
    "equinox_stack": (_equinox_stack, "equinox [LSTMCell(3, 4), LSTMCell(4, 4)], the second fed "
                      "the first's h sequence, each over lax.scan, vmap over batch"),
}


def _versions() -> dict[str, str]:
    import equinox
    import flax
    import jax

    return {"jax": jax.__version__, "flax": flax.__version__, "equinox": equinox.__version__,
            "numpy": np.__version__}


def make_case(name: str, out: Path) -> tuple[dict[str, Any], list[str]]:
    """Build, run and write one case; returns its meta and the names of the files written."""
    builder, description = CASES[name]
    seed = zlib.crc32(name.encode())
    rng = np.random.default_rng(seed)
    rng_inputs = np.random.default_rng(seed + 1)
    x = rng_inputs.uniform(-1, 1, size=(BATCH, TIME, INPUT)).astype(np.float32)
    golden = builder(rng, x, seed & 0x7FFFFFFF)

    arrays: dict[str, np.ndarray] = {"x": x, "y": golden.y}
    if golden.lengths is not None:
        arrays["lengths"] = golden.lengths.astype(np.int32)
    for path, value in golden.params.items():
        arrays[f"params/{path}"] = value
    meta = {
        "case": name, "description": description, "library": golden.library,
        "versions": _versions(), "cells": golden.cells, "options": golden.cells[0]["options"],
        "structure": golden.structure,
        "params": {path: list(value.shape) for path, value in golden.params.items()},
        "x_shape": list(x.shape), "y_shape": list(golden.y.shape), "tolerance": TOLERANCE,
    }
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    np.savez(out / f"{name}.npz", **arrays)
    files = [f"{name}.npz"]
    if golden.variables is not None:
        from flax import serialization

        (out / f"{name}.msgpack").write_bytes(serialization.to_bytes(golden.variables))
        files.append(f"{name}.msgpack")
    return meta, files


def check_case(name: str, out: Path) -> None:
    """Reload a written case with ``allow_pickle=False`` and check its shapes against its meta."""
    with np.load(out / f"{name}.npz", allow_pickle=False) as data:
        meta = json.loads(str(data["meta"]))
        x, y = data["x"], data["y"]
        problems = []
        if x.shape != (BATCH, TIME, INPUT) or x.dtype != np.float32:
            problems.append(f"x is {x.shape} {x.dtype}")
        if y.ndim != 3 or y.shape[:2] != (BATCH, TIME) or y.dtype != np.float32:
            problems.append(f"y is {y.shape} {y.dtype}")
        if list(y.shape) != meta["y_shape"]:
            problems.append(f"y is {y.shape}, meta says {meta['y_shape']}")
        if "lengths" in data.files and (data["lengths"].shape != (BATCH,)
                                        or data["lengths"].dtype != np.int32):
            problems.append(f"lengths is {data['lengths'].shape} {data['lengths'].dtype}")
        stored = {key[len("params/"):]: data[key] for key in data.files if key.startswith("params/")}
        if sorted(stored) != sorted(meta["params"]):
            problems.append(f"params {sorted(stored)} differ from meta {sorted(meta['params'])}")
        for path, value in stored.items():
            if list(value.shape) != meta["params"].get(path):
                problems.append(f"params/{path} is {value.shape}")
    if problems:
        raise SystemExit(f"{name}: " + "; ".join(problems))


def _made(name: str, out: Path) -> golden_manifest.Made:
    meta, files = make_case(name, out)
    check_case(name, out)
    line = (f"{meta['library']} {'+'.join(c['class'] for c in meta['cells'])} "
            f"y{tuple(meta['y_shape'])} {len(meta['params'])} params  ({', '.join(files)})")
    return ({"description": meta["description"], "library": meta["library"]}, files, line,
            _versions())


def main(argv: list[str] | None = None) -> int:
    return golden_manifest.main(argv, description=__doc__.splitlines()[0],
                                default_out=DEFAULT_OUT,
                                cases={name: text for name, (_, text) in CASES.items()},
                                generator="tools/golden_jax.py", make=_made)


if __name__ == "__main__":
    sys.exit(main())
