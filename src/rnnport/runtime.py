"""The recurrences — the only implementation of the math in rnnport.

All cells in canonical form (``W`` input weights, ``R`` recurrent weights, ``bW``/``bR``
their biases, ``σ`` the logistic sigmoid, ``∘`` elementwise product)::

    LSTM   i = σ(W_i x + R_i h + bW_i + bR_i [+ p_i∘c])
           f = σ(W_f x + R_f h + bW_f + bR_f [+ p_f∘c])
           g = tanh(W_g x + R_g h + bW_g + bR_g)
           c' = f∘c + i∘g                     [clipped to ±cell_clip]
                                              [input_forget: f = 1 − i]
           o = σ(W_o x + R_o h + bW_o + bR_o [+ p_o∘c'])
           h' = o∘tanh(c')                    [h' = W_hr h' (+ b_hr) with a projection]
    layer-norm LSTM: each gate's a = W x + R h [+ p∘c] is normalized over its
           H units before the biases, a' = (a − mean(a)) / sqrt(var(a) + 1e-8)·ln + bW + bR
    GRU    r = σ(W_r x + R_r h + bW_r + bR_r)
           z = σ(W_z x + R_z h + bW_z + bR_z)
           n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))     reset after (cuDNN, PyTorch)
           n = tanh(W_n x + bW_n + R_n (r∘h) + bR_n)     reset before (Keras reset_after=False)
           h' = (1 − z)∘n + z∘h
    RNN    h' = act(W x + R h + bW + bR),  act = tanh or relu

``Spec.activations`` swaps σ (f), the candidate's tanh (g) and the output's tanh (h)
for ONNX's alternatives (:mod:`rnnport.activations`). With ``gate_clip`` (ONNX ``clip``)
every gate pre-activation (LSTM i, f, g, o; GRU r, z, n; RNN h) is clipped to
``±gate_clip`` before its activation; an LSTM's ``tanh(c')`` is not clipped (ONNX
Runtime's reading of the operator, checked against it in the tests).

How it runs:

* The input side of a whole sequence is one matrix product per layer and direction; only
  the recurrent product stays inside the time loop.
* Both directions of a layer advance together: step ``s`` runs the forward direction at
  time ``s`` and the backward direction at time ``T−1−s`` (its input is reversed in time
  once per layer), so each step is one recurrent product per direction and one set of
  elementwise operations for both. A reverse network's one direction runs as a backward
  direction does.
* Every step writes into buffers allocated once per call, with in-place ufuncs. The
  recurrent product is ``np.dot`` per direction, in blocks of columns small enough for
  OpenBLAS's small-matrix kernels (chosen by shape alone), and its sum with the step's
  input lands gate-major, ``(D, G, B, H)``, so that each gate's block is contiguous for
  the elementwise work (see :class:`_Scratch`).
* Threads (``forward(threads=...)``, through ``threadpoolctl``, a required dependency; see
  :class:`_Plan`): the per-step products, small and latency-bound, run single-threaded (a
  BLAS thread that waits for a busy core at every step is what makes a loaded machine
  slow, and a threaded matrix-vector product may split its sums); an input projection,
  one large product per layer and direction, runs in blocks of rows fixed by its shape,
  each on one BLAS thread, several at once in Python threads (:func:`_row_blocks`:
  OpenBLAS's own threads can change a product's last bits); and a layer
  large enough to gain runs in two pieces at once, one Python thread and one core each,
  with no synchronization between steps: a bidirectional layer's two directions (the same
  per-direction ``np.dot`` calls as when they step together, so bit-identical to running
  them in turn), or a one-direction layer's two halves of a large batch (split by shape
  alone, so one thread runs the same halves in turn). Where the steps are too small for that (batch 1: the
  threads would pass the interpreter lock back and forth at every elementwise operation),
  a bidirectional layer's two input projections still run at once, and its steps
  together. On Linux a large enough layer instead runs its second piece (a bidirectional
  layer's backward direction, a one-way layer's second half of the batch) in a helper
  process (:mod:`rnnport.helper`), first step to last, while this process runs the first:
  no interpreter lock between them, one meeting per layer, the same numbers. Where
  ``threadpoolctl`` cannot be imported the thread counts cannot be set: everything runs as the BLAS is
  configured (``OPENBLAS_NUM_THREADS`` …), in one Python thread.
* Gates run in the order ``i f o g`` (LSTM), so the three sigmoid blocks are one slice:
  one σ pass serves them, and the candidate takes NumPy's tanh. σ's input scale (σ(x) =
  1 / (1 + e^-x) takes ``−x``) is folded into the weights and biases once; −1 changes no
  product or sum by a bit. See :class:`rnnport.activations.Kernel`.
* At batch 1, a layer without options (no gate clip, the default activations; an LSTM
  without peepholes, projection, layer norm, cell clip or coupled gates) steps through
  :func:`_lean_cell`: the same operations on the same operands, one ufunc call each over
  views made once, without the general step's 5-D views and option checks (a step of a
  few hundred values costs about as many microseconds as it makes calls). The tests hold
  both to the same bits.
* At four sequences or more, such an LSTM or GRU (reset after) steps unit-major
  (:class:`_Units`): h, c and the gates as (units, sequences), the product ``Rᵀ h`` in
  blocks of rows of Rᵀ (:func:`_unit_blocks`), which OpenBLAS's small-matrix kernels run
  faster than ``h R``.
  Its input projection and h history stay as everywhere else; a step reads its input and
  writes h' through transposed views.
* The weights a step reads (the recurrent matrices, their halves and blocks) lie in
  memory that Linux is asked to back with huge pages (:func:`_resident`): a step's
  product reads them from the second-level cache, and with 4 KiB pages their hundreds of
  pages cost address translations at every step.
* A :class:`Stream` runs a one-way network chunk after chunk with the same per-step code
  and pieces, on one thread, its buffers planned when it is made; a one-row input
  projection runs as two rows (:func:`_one_row`), so that its numbers are those of the
  same row in ``forward``'s product over the whole sequence.
* With ``lengths`` the batch is sorted longest first and step ``s`` computes only the
  sequences still running, a prefix of the batch, as PyTorch's packed sequences do.
  Each backward sequence is reversed within its own length, so it starts at its last
  valid step. A finished sequence keeps its state; its outputs are zero.
"""

from __future__ import annotations

import functools
import importlib
import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from . import budget
from .activations import DEFAULTS, RELU, SIGMOID, TANH, kernel, one
from .errors import DTypeError, ShapeError, StateError, UnsupportedFeatureError
from .gates import CANONICAL, block, block_range, gate_family, reorder
from .spec import Spec

__all__ = ["Network", "Stream", "run"]

# The runtime's gate order: an LSTM's sigmoid gates side by side, then the candidate.
ORDER = {"lstm": "ifog", "gru": "rzn", "rnn": "h"}
LAYER_NORM_EPSILON = 1e-8  # the layer-norm LSTM's 1 / sqrt(variance + 1e-8)


def _quiet() -> Any:
    """Overflow and underflow ignored throughout a forward call, whatever ``np.seterr``
    says: in normal work e^x overflows to inf (a sigmoid's 0) and underflows to 0 (its 1)
    in saturated gates, both the exact limits. The caller's settings hold for invalid
    operations and division by zero."""
    return np.errstate(over="ignore", under="ignore")


def compute_dtype(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.float64) if dtype == np.float64 else np.dtype(np.float32)


# Where Linux backs memory with transparent huge pages on request ("madvise" mode, the
# common default), the weights every step reads are placed in such pages. A step's
# matrix-vector product reads its weights from the second-level cache, and with 4 KiB
# pages each of its hundreds of pages costs an address translation that the translation
# caches do not all hold (more so in a virtual machine): half of an LSTM 320's recurrent
# weights (800 KiB) took 7.9 µs a product in 2 MiB pages against 10.2 µs in 4 KiB pages
# (NumPy 2.4 with OpenBLAS 0.3.31, an Intel Xeon VM). NumPy asks for huge pages itself
# only for arrays of 4 MiB or more. The same values, the same products: only the
# addresses change.
HUGE_PAGE = 2 << 20
HUGE_MIN_BYTES = 1 << 20  # below this much, a huge page would be mostly unused
_HUGE_PAGES = hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")


def _resident(arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``arrays`` C-contiguous: copies placed together in one mapping that the kernel is
    asked to back with huge pages (see :data:`HUGE_PAGE`), each at a multiple of 64
    bytes, where they hold at least :data:`HUGE_MIN_BYTES` together; else (or where the
    kernel takes no such advice) as :func:`numpy.ascontiguousarray` gives them."""
    sizes = [-(-array.nbytes // 64) * 64 for array in arrays]
    total = sum(sizes)
    if not _HUGE_PAGES or total < HUGE_MIN_BYTES:
        return [np.ascontiguousarray(array) for array in arrays]
    length = -(-total // HUGE_PAGE) * HUGE_PAGE
    try:
        region = mmap.mmap(-1, length + HUGE_PAGE,
                           flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError):  # no such advice here: ordinary pages
        return [np.ascontiguousarray(array) for array in arrays]
    memory = np.frombuffer(region, np.uint8)  # keeps the mapping while a copy lives
    offset = -memory.ctypes.data % HUGE_PAGE
    copies = []
    for array, size in zip(arrays, sizes, strict=True):
        copy = memory[offset:offset + array.nbytes].view(array.dtype).reshape(array.shape)
        copy[...] = array
        copies.append(copy)
        offset += size
    return copies


class _Layer:
    """One layer's parameters, both directions stacked, prepared once per network.

    Weights are transposed for ``x @ W``, their gate blocks in :data:`ORDER`, and each block
    is multiplied by its activation's ``scale``. Shapes (``D`` directions)::

        input_weights  D × (I_layer, G·H)      input_bias  (D, 1, G·H)   bW + bR
        recurrent      (D, H_out, G·H)         GRU reset-before: r z columns only,
        recurrent_n    (D, H, H)               with R_n apart (it multiplies r∘h)
        bias_n         (D, 1, H)               GRU reset-after: bR_n, inside r∘(…)
        peephole       i, f, o: (D, 1, H)      projection  (D, H, P)   projection_bias (D, 1, P)
        layer_norm     gate → (coefficients (D, 1, H), bias (D, 1, H), epsilon): the bias
                       leaves input_bias (it comes after the normalization)
    """

    __slots__ = ("__weakref__", "act_f", "act_g", "act_h", "agree", "backward", "bias_n",
                 "blocks", "cell", "cell_clip", "chunked", "clip", "directions", "halved", "hidden",
                 "input_bias", "input_forget", "input_weights", "layer_norm", "one_way",
                 "out_size", "peephole", "projection", "projection_bias", "recurrent",
                 "recurrent_n", "source", "unit_blocked", "width")

    def __init__(self, spec: Spec, directions: Sequence[Mapping[str, np.ndarray]],
                 dtype: np.dtype) -> None:
        family = gate_family(spec.cell)
        self.source = (spec, directions, dtype)  # what it was prepared from (the helper's copy)
        order = ORDER[family]
        hidden = spec.hidden_size
        self.cell, self.hidden, self.out_size = spec.cell, hidden, spec.output_size
        self.directions = len(directions)
        # Which directions run from each sequence's end: a bidirectional layer's second, or
        # the one direction of a reverse network.
        self.backward = (False, True) if spec.bidirectional else (spec.reverse,)
        self.width = spec.gate_count * hidden
        self.input_forget, self.cell_clip = spec.input_forget, spec.cell_clip
        if family == "rnn":
            act = TANH if spec.cell == "rnn_tanh" else RELU
            self.act_f = self.act_g = self.act_h = act
        else:
            names = spec.activations or [(name, 0.0, 0.0) for name in DEFAULTS[spec.cell]]
            self.act_f = kernel(names[0])
            self.act_g = kernel(names[1])
            self.act_h = kernel(names[2]) if len(names) == 3 else TANH
        # A gate's scale: the candidate (g, n, or an RNN's only block) takes act_g's.
        scales = {gate: self.act_g.scale if gate in "gnh" else self.act_f.scale for gate in order}
        self.blocks = {gate: slice(*block_range(order, gate, hidden)) for gate in order}
        self.clip = None if spec.gate_clip is None else {
            gate: abs(scales[gate]) * spec.gate_clip for gate in order}

        def prepared(array: np.ndarray) -> np.ndarray:
            """Canonical rows (G·H, ·) → runtime order, scaled by gate, transposed."""
            out = reorder(np.asarray(array, dtype=dtype), CANONICAL[family], order)
            for gate, scale in scales.items():
                if scale != 1.0:
                    block(out, order, gate)[...] *= scale
            return np.ascontiguousarray(out.T)

        self.input_weights = [prepared(p["weight_ih"]) for p in directions]
        recurrent = np.stack([prepared(p["weight_hh"]) for p in directions])
        biases = np.zeros((self.directions, 1, self.width), dtype=dtype)
        self.bias_n = self.recurrent_n = None
        if spec.bias:
            for d, p in enumerate(directions):
                recurrent_bias = prepared(p["bias_hh"][:, None])[0]
                if family == "gru" and spec.reset_after:
                    # bR_n sits inside r∘(…): it cannot join the input-side bias.
                    if self.bias_n is None:
                        self.bias_n = np.zeros((self.directions, 1, hidden), dtype=dtype)
                    self.bias_n[d, 0] = recurrent_bias[self.blocks["n"]]
                    recurrent_bias[self.blocks["n"]] = 0
                biases[d, 0] = prepared(p["bias_ih"][:, None])[0] + recurrent_bias
        self.layer_norm = None
        if spec.layer_norm:
            # The gates are normalized before their biases. A block holds s·a (s: its
            # activation's scale); (s·a − mean) / sqrt(var(s·a) + s²·ε) = sign(s)·norm(a), so
            # the coefficients take |s| and ε takes s²: exactly the normalized a' times s.
            rows = np.stack([np.asarray(p["weight_ln"], dtype=dtype) for p in directions])
            self.layer_norm = {
                gate: (abs(scales[gate]) * rows[:, "ifgo".index(gate), None, :],
                       biases[..., self.blocks[gate]].copy(),
                       LAYER_NORM_EPSILON * scales[gate] ** 2)
                for gate in order}
            biases = np.zeros_like(biases)
        self.input_bias = biases
        if family == "gru" and not spec.reset_after:
            # r∘h enters R_n alone, so the n columns get their own product.
            self.recurrent_n = np.ascontiguousarray(recurrent[..., self.blocks["n"]])
            recurrent = np.ascontiguousarray(recurrent[..., :self.blocks["n"].start])
        self.recurrent = _resident([recurrent])[0]
        self.peephole = None
        if spec.peepholes:
            weights = np.stack([p["weight_peephole"] for p in directions]).astype(dtype)
            weights *= self.act_f.scale
            self.peephole = {gate: weights[:, row, None, :] for row, gate in enumerate("ifo")}
        self.projection = (np.stack([np.asarray(p["weight_hr"], dtype=dtype).T
                                     for p in directions]) if spec.proj_size else None)
        self.projection_bias = (np.stack([np.asarray(p["bias_hr"], dtype=dtype)[None, :]
                                          for p in directions]) if spec.proj_bias else None)
        self.one_way: list[_Layer] | None = None
        self.chunked: dict[int, list[list[np.ndarray]]] = {}
        self.unit_blocked: dict[tuple[tuple[int, int], ...],
                                list[list[tuple[slice, np.ndarray]]]] = {}
        self.halved: list[tuple[np.ndarray, np.ndarray]] | None = None
        self.agree: bool | None = None  # see _halves_agree

    def halves(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """The recurrent weights, per direction, as two contiguous (H_out, G·H/2) halves: the
        columns of the first and of the second half of the units, each gate's in turn
        (see :func:`_halves`); made once."""
        if self.halved is None:
            gates, half = len(self.blocks), self.hidden // 2

            def columns(matrix: np.ndarray, part: int) -> np.ndarray:
                return matrix.reshape(-1, gates, 2, half)[:, :, part].reshape(-1, gates * half)

            copies = _resident([columns(matrix, part) for matrix in self.recurrent
                                for part in (0, 1)])
            self.halved = [(copies[2 * d], copies[2 * d + 1]) for d in range(len(self.recurrent))]
        return self.halved

    def chunks(self, width: int) -> list[list[np.ndarray]]:
        """The recurrent weights, per direction, as contiguous blocks of ``width`` columns
        (one block, the weights themselves, when ``width`` is all of them); made once."""
        found = self.chunked.get(width)
        if found is None:
            columns = self.recurrent.shape[-1]
            if width >= columns:
                found = [[matrix] for matrix in self.recurrent]
            else:
                copies = iter(_resident([matrix[:, j:j + width] for matrix in self.recurrent
                                         for j in range(0, columns, width)]))
                found = [[next(copies) for _ in range(0, columns, width)]
                         for _ in self.recurrent]
            self.chunked[width] = found
        return found

    def units(self, widest: int) -> list[list[tuple[slice, np.ndarray]]]:
        """Rᵀ, per direction, in the blocks of rows of :func:`_unit_blocks` for blocks of
        at most ``widest`` rows, each as (its rows of Rᵀ, the block (rows, H_out)) (see
        :class:`_Units`); made once for each set of blocks, which many widths share."""
        cuts = _unit_blocks(self.hidden, len(self.blocks), widest)
        key = tuple((cut.start, cut.stop) for cut in cuts)
        found = self.unit_blocked.get(key)
        if found is None:
            copies = iter(_resident([matrix[:, cut].T for matrix in self.recurrent
                                     for cut in cuts]))
            found = [[(cut, next(copies)) for cut in cuts] for _ in self.recurrent]
            self.unit_blocked[key] = found
        return found

    def direction(self, index: int) -> _Layer:
        """This layer's direction ``index`` alone, as a one-direction layer whose arrays are
        views of this one's (made once, kept)."""
        if self.one_way is None:
            self.one_way = [self._one(d) for d in range(self.directions)]
        return self.one_way[index]

    def _one(self, d: int) -> _Layer:
        one = object.__new__(_Layer)
        for name in _Layer.__slots__:
            if name != "__weakref__":
                setattr(one, name, getattr(self, name))
        part = slice(d, d + 1)

        def cut(array: np.ndarray | None) -> np.ndarray | None:
            return None if array is None else array[part]

        one.directions, one.backward, one.one_way, one.chunked = 1, (self.backward[d],), None, {}
        one.unit_blocked = {}
        one.halved = None if self.halved is None else self.halved[part]
        one.agree = self.agree
        one.input_weights = self.input_weights[part]
        one.input_bias, one.recurrent = self.input_bias[part], self.recurrent[part]
        one.recurrent_n, one.bias_n = cut(self.recurrent_n), cut(self.bias_n)
        one.projection, one.projection_bias = cut(self.projection), cut(self.projection_bias)
        if self.peephole is not None:
            one.peephole = {gate: weights[part] for gate, weights in self.peephole.items()}
        if self.layer_norm is not None:
            one.layer_norm = {gate: (coefficients[part], bias[part], epsilon)
                              for gate, (coefficients, bias, epsilon) in self.layer_norm.items()}
        return one


class Network(Protocol):
    """What the runtime reads of a network: an immutable :class:`rnnport.RNN` is one."""

    @property
    def spec(self) -> Spec: ...

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def params(self) -> Sequence[Sequence[Mapping[str, np.ndarray]]]: ...


# Prepared layers per network, kept while the network lives: a network is immutable, so
# what is derived from its weights once stays valid.
_PREPARED: dict[int, list[_Layer]] = {}


def _prepared(network: Network) -> list[_Layer]:
    key = id(network)
    cached = _PREPARED.get(key)
    if cached is None:
        dtype = compute_dtype(network.dtype)
        cached = [_Layer(network.spec, directions, dtype) for directions in network.params]
        try:  # the entry must leave with the network, or a later one at its id would reuse it
            weakref.finalize(network, _PREPARED.pop, key, None)
        except TypeError:  # not weakly referable: prepared afresh on each call
            return cached
        _PREPARED[key] = cached
    return cached


def run(
    network: Network, x: Any, *, state: Any = None, lengths: Any = None,
    time_major: bool = False, threads: int | None = None,
) -> tuple[np.ndarray, Any]:
    """``forward`` of :class:`rnnport.RNN`; see there for shapes and ``threads``."""
    spec = network.spec
    dtype = compute_dtype(network.dtype)
    _check_threads(threads)
    inputs = _check_input(x, spec.input_size, dtype)
    if not time_major:
        inputs = inputs.transpose(1, 0, 2)
    steps, batch, _ = inputs.shape
    _check_size(spec, steps, batch)
    lengths = _check_lengths(lengths, batch, steps)
    h0, c0 = _check_state(state, spec, batch, dtype)
    directions = spec.num_directions
    is_lstm = spec.cell == "lstm"

    packed = _Packing(lengths, steps, batch) if lengths is not None else None
    if packed is not None:
        inputs, h0 = inputs[:, packed.order], h0[:, packed.order]
        c0 = None if c0 is None else c0[:, packed.order]
    layer_input = np.ascontiguousarray(inputs)
    h_n = np.empty((spec.num_layers * directions, batch, spec.output_size), dtype=dtype)
    c_n = np.empty((spec.num_layers * directions, batch, spec.hidden_size), dtype=dtype) \
        if is_lstm else None
    plan = _Plan(threads)
    try:
        with _quiet():
            for index, layer in enumerate(_prepared(network)):
                rows = slice(index * directions, (index + 1) * directions)
                cell = None if c0 is None else np.array(c0[rows], copy=True)
                history = _run_layer(layer, layer_input, packed, h0[rows], cell, plan)
                layer_input = _layer_output(history, packed, layer.backward)
                h_n[rows] = _final_state(history, packed)
                if c_n is not None:
                    c_n[rows] = cell
    finally:
        plan.restore()
    y = layer_input
    if packed is not None:
        y, h_n = y[:, packed.restore], h_n[:, packed.restore]
        c_n = None if c_n is None else c_n[:, packed.restore]
    y = np.ascontiguousarray(y if time_major else y.transpose(1, 0, 2))
    return y, ((h_n, c_n) if is_lstm else h_n)


class _Packing:
    """Variable lengths: the batch sorted longest first, and how many run at each step."""

    __slots__ = ("active", "columns", "invalid", "lengths", "order", "restore", "reverse")

    def __init__(self, lengths: np.ndarray, steps: int, batch: int) -> None:
        self.order = np.argsort(-lengths, kind="stable")
        self.restore = np.argsort(self.order)
        self.lengths = lengths[self.order]
        time = np.arange(steps)[:, None]
        valid = time < self.lengths[None, :]                          # (T, B)
        self.invalid = ~valid
        self.active = valid.sum(axis=1).tolist()                      # step s runs a prefix
        # Backward step s reads time length−1−s of its own sequence (padding stays put).
        self.reverse = np.where(valid, self.lengths[None, :] - 1 - time, time)
        self.columns = np.arange(batch)[None, :]                      # with reverse: (T, B)


# -- threads -------------------------------------------------------------------------------

# A layer's two pieces (its directions, or the halves of its batch) run at once when its
# per-step product has at least this many multiply-adds per direction (B·H_out·G·H): below
# it, passing the interpreter lock between the two threads costs more than the second core
# gains.
CONCURRENT_MIN_STEP_WORK = 1 << 20
# Below it, a bidirectional layer's two input projections still run at once when each has
# at least this many multiply-adds (T·B·I·G·H): one large product per thread, no lock
# passed between steps.
CONCURRENT_MIN_PROJECTION = 1 << 24
# A one-direction layer runs as two halves of its batch (sequences are independent) when its
# per-step product has at least this many multiply-adds and each half at least
# SPLIT_MIN_BATCH sequences. The split depends on the shapes alone, never on the threads:
# with one thread the halves run in turn, so the numbers are the same for every count.
SPLIT_MIN_STEP_WORK = 1 << 22
# One of a layer's two pieces runs in the helper process when the layer's steps hold at
# least this many multiply-adds per direction (T·B·H_out·G·H, the whole batch; a piece is
# a direction, or half the batch of a one-way layer): a piece of about 2 ms or more of
# work, against the 0.1 ms of passing its input and outputs.
HELPER_MIN_WORK = 1 << 25
SPLIT_MIN_BATCH = 16

_BLAS: tuple[_Count, ...] | None = None  # the loaded BLAS libraries' thread counts
_BLAS_LOCK = threading.Lock()
_RUNNING = 0  # forward calls between their first switch of the BLAS count and the put-back
_FOUND: list[int] = []  # the count each BLAS library had before the first of them
_SWITCHED = False  # whether a call since then changed a count


class _Count:
    """One BLAS library's thread count, read and set through threadpoolctl's controller; for
    OpenBLAS with its own threads (not OpenMP's), through the two functions the controller
    calls, found once: a read or a switch then takes about 0.1 µs instead of 0.3 to 0.5 µs,
    and a stream's one-step call, a few tens of µs, may read once and switch twice. The
    controller would leave a process-wide OpenBLAS count to the first Python thread that set
    it; rnnport's calls share theirs through :data:`_BLAS_LOCK` (see :class:`_Plan`), from
    any thread, so that every product runs on one BLAS thread wherever it is called."""

    __slots__ = ("controller", "get_num_threads", "set_num_threads")

    def __init__(self, controller: Any) -> None:
        self.controller = controller  # threadpoolctl's, which names the library
        self.get_num_threads: Callable[[], Any] = controller.get_num_threads
        self.set_num_threads: Callable[[int], Any] = controller.set_num_threads
        find = getattr(controller, "_get_symbol", None)  # threadpoolctl ≥ 3.5
        if (getattr(controller, "internal_api", None) == "openblas"
                and getattr(controller, "threading_layer", None) == "pthreads"
                and callable(find)):
            try:
                get, put = find("openblas_get_num_threads"), find("openblas_set_num_threads")
            except Exception:  # a controller of another shape: its own methods
                return
            if callable(get) and callable(put):
                self.get_num_threads, self.set_num_threads = get, put


def _blas() -> tuple[_Count, ...]:
    """The BLAS libraries' thread counts, found once per process (a scan of the loaded
    libraries takes about a millisecond); ``()`` without ``threadpoolctl``."""
    global _BLAS
    if _BLAS is None:
        with _BLAS_LOCK:
            if _BLAS is None:
                try:  # required, but a broken environment only costs speed; untyped
                    threadpoolctl = importlib.import_module("threadpoolctl")
                except ImportError:
                    _BLAS = ()
                else:
                    controller = threadpoolctl.ThreadpoolController().select(user_api="blas")
                    _BLAS = tuple(_Count(library) for library in controller.lib_controllers)
    return _BLAS


def _cores() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _check_threads(threads: Any) -> None:
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise StateError(f"forward: threads={threads!r}; expected None (rnnport chooses) or a "
                         "whole number ≥ 1, the threads (and cores) the call may use.")


class _Plan:
    """How one ``forward`` call uses threads: the Python threads of the input projections'
    blocks (``wide``), whether a layer's two pieces (see :func:`_pieces`) may run at once (in a
    second thread, or one of them in the helper process: :meth:`uses_helper`), and the
    switch between counts (only when the count changes).

    Every product uses one BLAS thread whatever ``threads`` says: the steps are
    latency-bound, and a product split over BLAS threads can change its last bits (a
    matrix-vector product's sums are split; OpenBLAS's kernels for a partial tile sum in
    another order). A projection's blocks of rows (:func:`_row_blocks`), fixed by shape,
    run up to ``wide`` at once.

    ``None`` spends what the BLAS is set to (``OPENBLAS_NUM_THREADS``; a Dask worker's one
    thread): with one BLAS thread, no second Python thread either. The count is the
    process's, and a call sets it to one: calls running at once in several threads share
    it, and the count found before the first of them is put back when the last one ends
    (if any call changed it). A call finding the count already one switches nothing."""

    __slots__ = ("concurrent", "current", "libraries", "step", "wide")

    def __init__(self, threads: int | None) -> None:
        global _RUNNING, _FOUND
        self.libraries = _blas()
        self.current: int | None = None
        if not self.libraries:  # no control: as the BLAS is set, the pieces in turn
            self.wide = self.step = 0
            self.concurrent = False
            return
        with _BLAS_LOCK:
            if _RUNNING == 0:
                _FOUND = [library.get_num_threads() for library in self.libraries]
                if len(set(_FOUND)) == 1:  # alone, so the count is still the one found
                    self.current = _FOUND[0]
            _RUNNING += 1
            found = max(_FOUND)
        self.step = 1
        if threads is None:
            self.wide = found
            self.concurrent = found >= 2 and _cores() >= 2
        else:
            self.wide = int(threads)
            self.concurrent = self.wide >= 2

    def use(self, count: int) -> None:
        global _SWITCHED
        if count and count != self.current:
            for library in self.libraries:
                library.set_num_threads(count)
            self.current = count
            _SWITCHED = True

    def restore(self) -> None:
        global _RUNNING, _SWITCHED
        if not self.libraries:
            return
        with _BLAS_LOCK:
            _RUNNING -= 1
            if _RUNNING == 0 and _SWITCHED:
                for library, count in zip(self.libraries, _FOUND, strict=True):
                    library.set_num_threads(count)
                _SWITCHED = False
        self.current = None

    def runs_concurrently(self, layer: _Layer, batch: int, steps: int) -> bool:
        return (self.concurrent and steps > 1
                and batch * layer.out_size * layer.width >= CONCURRENT_MIN_STEP_WORK)

    def uses_helper(self, layer: _Layer, batch: int, steps: int,
                    packed: _Packing | None) -> bool:
        """Whether one of the layer's two pieces (its backward direction, or the second half
        of its batch; see :func:`_pieces`) runs in the helper process
        (:mod:`rnnport.helper`): enough work to pay for passing its input and outputs."""
        return (self.concurrent and packed is None and steps > 1
                and (layer.directions == 2 or _splits_batch(layer, batch))
                and steps * batch * layer.out_size * layer.width >= HELPER_MIN_WORK)

    def uses_lockstep(self, layer: _Layer, batch: int, steps: int,
                      packed: _Packing | None) -> bool:
        """Whether the layer's steps run in lockstep with the helper (:func:`_lockstep`):
        no lengths; one sequence and an LSTM of :func:`_halves`, or more and a layer of
        :func:`_row_halves`; as much work as :meth:`uses_helper` asks; no other task
        running beside this process; and stores seen by other cores in order
        (:data:`ORDERED_STORES`)."""
        return (ORDERED_STORES and self.concurrent and packed is None and steps > 1
                and (_halves(layer) if batch == 1 else _row_halves(layer, batch) is not None)
                and steps * batch * layer.out_size * layer.width >= HELPER_MIN_WORK
                and not _contended())

    def projects_concurrently(self, layer: _Layer, batch: int, steps: int) -> bool:
        return (self.concurrent and layer.directions == 2
                and steps * batch * layer.input_weights[0].size >= CONCURRENT_MIN_PROJECTION)


def _one_thread() -> tuple[_Count, ...]:
    """The BLAS at one thread for a call whose products all run on one, as ``_Plan(1)``
    and ``use(1)`` do, at less cost (a stream's call of one step takes a few tens of µs):
    counted among the running calls, the count switched only where it is not one already.
    Returns the libraries to pass to :func:`_put_back` when the call ends."""
    global _RUNNING, _FOUND, _SWITCHED
    libraries = _BLAS if _BLAS is not None else _blas()
    if not libraries:
        return libraries
    with _BLAS_LOCK:
        if not _SWITCHED:  # as when no call is running
            if len(libraries) == 1:  # the usual case, in fewer operations (about 1 µs less)
                count = libraries[0].get_num_threads()
                if _RUNNING == 0:
                    _FOUND = [count]
                if count != 1:
                    libraries[0].set_num_threads(1)
                    _SWITCHED = True
            else:
                counts = [library.get_num_threads() for library in libraries]
                if _RUNNING == 0:
                    _FOUND = counts
                if counts != [1] * len(counts):
                    for library in libraries:
                        library.set_num_threads(1)
                    _SWITCHED = True
        _RUNNING += 1
    return libraries


def _put_back(libraries: tuple[_Count, ...]) -> None:
    """The end of a call begun by :func:`_one_thread`: the last call running puts back the
    counts found before the first (as :meth:`_Plan.restore`)."""
    global _RUNNING, _SWITCHED
    if not libraries:
        return
    with _BLAS_LOCK:
        _RUNNING -= 1
        if _RUNNING == 0 and _SWITCHED:
            if len(libraries) == 1:
                libraries[0].set_num_threads(_FOUND[0])
            else:
                for library, count in zip(libraries, _FOUND, strict=True):
                    library.set_num_threads(count)
            _SWITCHED = False


def _splits_batch(layer: _Layer, batch: int) -> bool:
    return (layer.directions == 1 and batch >= 2 * SPLIT_MIN_BATCH
            and batch * layer.out_size * layer.width >= SPLIT_MIN_STEP_WORK)


def _pieces(layer: _Layer, batch: int, by_direction: bool) -> list[tuple[slice, slice]]:
    """The layer's recurrence in independent pieces, as (directions, batch rows): each
    direction apart (``by_direction``), two halves of the batch (:func:`_splits_batch`), or
    one piece."""
    everything = slice(0, batch)
    if layer.directions == 2 and by_direction:
        return [(slice(d, d + 1), everything) for d in range(2)]
    if not _splits_batch(layer, batch):
        return [(slice(0, layer.directions), everything)]
    half = batch // 2
    return [(slice(0, 1), slice(0, half)), (slice(0, 1), slice(half, batch))]


def _project(layer: _Layer, inputs: np.ndarray, packed: _Packing | None, directions: slice,
             rows: slice, out: np.ndarray | None = None, threads: int = 1,
             in_step_order: bool = False) -> np.ndarray:
    """The input side ``W x + bW + bR`` of ``directions`` for the sequences ``rows`` of
    ``inputs`` (T, B, I), all steps at once: ``(d, T, b, G·H)`` (into ``out`` if given),
    backward directions in their step order (``inputs`` already in it: ``in_step_order``,
    one direction, no lengths); each product in the blocks of :func:`_row_blocks`, up to
    ``threads`` of them at once."""
    steps, batch, width = inputs.shape
    count = rows.stop - rows.start
    projected = np.empty((directions.stop - directions.start, steps, count, layer.width),
                         dtype=inputs.dtype) if out is None else out
    for index, direction in enumerate(range(directions.start, directions.stop)):
        source = inputs
        if layer.backward[direction] and not in_step_order:
            source = inputs[::-1] if packed is None else inputs[packed.reverse, packed.columns]
        if count != batch:
            source = source[:, rows]
        flat = np.ascontiguousarray(source).reshape(steps * count, width)
        _blocked_product(flat, layer.input_weights[direction],
                         projected[index].reshape(steps * count, layer.width), threads)
    projected += layer.input_bias[directions, None]
    return projected


# An input projection runs in blocks of rows fixed by its shape, each a product on one BLAS
# thread, up to `threads` blocks at once in Python threads (the interpreter lock is free
# while each multiplies). OpenBLAS's own threads split a product's rows and columns too,
# but its kernels for a partial tile sum in another order, so where its threads cut the
# product changed the last bits of some rows (seen with OpenBLAS 0.3.31's Haswell kernels,
# chosen on an AMD Zen 5 CPU: a (640, 16) @ (16, 144) product on two threads). Blocks
# fixed by shape give the same numbers for every thread count. A block holds at least
# PROJECTION_BLOCK_WORK multiply-adds (a tenth of a millisecond or more, against tens of
# microseconds to start a thread) and PROJECTION_BLOCK_ROWS rows: each block repacks all
# the weights, which on one core cost (500, 640) @ (640, 1280) 7 % more in blocks of 250
# rows and 31 % more in blocks of 31 (measured on an AMD EPYC with OpenBLAS 0.3.31), and
# (3200, 640) @ (640, 1280) 15 % more in 16 blocks than in 4 and 10 % more in 4 than in 2
# (an Intel Xeon; in 2 as in 1). The count is a power of two, at most PROJECTION_BLOCKS,
# so that blocks share out evenly among 2, 4, 8 or 16 threads.
PROJECTION_BLOCK_WORK = 1 << 23
PROJECTION_BLOCK_ROWS = 1024
PROJECTION_BLOCKS = 16


def _row_blocks(rows: int, depth: int, width: int) -> list[slice]:
    """The blocks of rows a ``(rows, depth) @ (depth, width)`` product runs in, by shape alone."""
    most = min(PROJECTION_BLOCKS, rows // PROJECTION_BLOCK_ROWS,
               rows * depth * width // PROJECTION_BLOCK_WORK)
    count = 1
    while count * 2 <= most:
        count *= 2
    return [slice(rows * k // count, rows * (k + 1) // count) for k in range(count)]


def _blocked_product(rows: np.ndarray, weights: np.ndarray, out: np.ndarray,
                     threads: int, padded: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """``out = rows @ weights`` in the blocks of :func:`_row_blocks`, up to ``threads`` at
    once; the caller has set one BLAS thread (or left the BLAS as configured). One row runs
    as two (see :func:`_one_row`), through ``padded`` if given."""
    if rows.shape[0] == 1:
        _one_row(rows, weights, out, padded)
        return
    blocks = _row_blocks(rows.shape[0], rows.shape[1], weights.shape[1])

    def block(cut: slice) -> None:
        np.matmul(rows[cut], weights, out=out[cut])

    if threads <= 1 or len(blocks) == 1:
        for cut in blocks:
            block(cut)
    else:
        _at_once(block, [(cut,) for cut in blocks], threads)


def _one_row(row: np.ndarray, weights: np.ndarray, out: np.ndarray,
             padded: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """``out = row @ weights`` for one row (1, K), as a product of two rows computes it.

    A one-row product runs as a matrix-vector product (gemv), whose sums OpenBLAS orders
    otherwise than its matrix kernels (float64 always, float32 at 128 columns and more):
    the row's numbers would differ in their last bits from the same row inside a product of
    more rows. Run with a second row of zeros, a row gets the same numbers however many rows
    its product has (OpenBLAS 0.3.31), so a sequence run a step at a time (a stream, or
    ``forward`` per step with its state) matches ``forward`` over the whole of it.
    ``padded``: buffers (2, K) whose second row is zero and (2, N), else made here."""
    if padded is None:
        padded = (np.zeros((2, row.shape[1]), row.dtype),
                  np.empty((2, weights.shape[1]), out.dtype))
    source, result = padded
    source[0] = row[0]
    np.matmul(source, weights, out=result)
    out[0] = result[0]


def _run_layer(layer: _Layer, inputs: np.ndarray, packed: _Packing | None, h0: np.ndarray,
               cell: np.ndarray | None, plan: _Plan) -> np.ndarray:
    """Run both directions over ``inputs`` (T, B, I); returns the h history
    ``(T+1, D, B, H_out)`` in step order (backward steps run from the end). ``cell``
    (D, B, H) is updated in place and ends as the final cell state.

    Each piece (:func:`_pieces`) projects its own inputs and runs its own steps, so that
    pieces running at once share nothing but the arrays they write apart."""
    steps, batch, _ = inputs.shape
    history = np.empty((steps + 1, layer.directions, batch, layer.out_size), dtype=inputs.dtype)
    history[0] = h0
    loop = _LOOPS[layer.cell]
    active = None if packed is None else packed.active
    concurrent = plan.runs_concurrently(layer, batch, steps)
    pieces = _pieces(layer, batch, by_direction=concurrent)

    def run_piece(directions: slice, rows: slice, wide: int = 1, step: int = 0,
                  projected: np.ndarray | None = None) -> None:
        plan.use(step)
        if projected is None:
            projected = _project(layer, inputs, packed, directions, rows, threads=wide)
        one = layer if directions.stop - directions.start == layer.directions \
            else layer.direction(directions.start)
        running = active
        if active is not None and rows.stop - rows.start != batch:
            # Sorted longest first, the sequences running at a step are a prefix of each part.
            running = [min(max(n - rows.start, 0), rows.stop - rows.start) for n in active]
        loop(one, projected, history[:, directions, rows],
             None if cell is None else cell[directions, rows], running, None)

    if plan.uses_lockstep(layer, batch, steps, packed):
        plan.use(plan.step)
        if _lockstep(layer, inputs, history, cell):
            return history
    job = None
    if plan.uses_helper(layer, batch, steps, packed):
        from . import helper  # not at import: most calls never start one

        # Two pieces (uses_helper says there are): the second in the helper process, the
        # first here, at once. Without a helper ready, the pieces run as below.
        halves = _pieces(layer, batch, by_direction=True)
        direction, rows = halves[1][0].start, halves[1][1]
        try:
            job = helper.job(layer, direction, inputs[:, rows], h0[direction, rows],
                             None if cell is None else cell[direction, rows])
            if job is not None:
                plan.use(plan.step)
                run_piece(*halves[0])
        except Exception:  # raised by this piece (np.seterr, memory): the helper finishes its
            if job is not None:  # own and stays for later calls; its result is not used
                job.finish(history[:, direction, rows],
                           None if cell is None else cell[direction, rows])
            raise
        except BaseException:  # interrupted: the helper is shut down, not waited for
            if job is not None:
                job.abandon()
            raise
        take_over = None
        if job is not None and _wants_the_rest(job, steps):
            job.ask_for_the_rest()
            take_over = _take_over(layer, direction)
        if job is not None and not job.finish(history[:, direction, rows],
                                              None if cell is None else cell[direction, rows],
                                              take_over):
            run_piece(*halves[1])  # the helper could not: here, the same numbers
        if job is not None:
            return history
    if concurrent and len(pieces) == 2:
        plan.use(plan.step)  # before the threads start: both share the process's count
        _both(run_piece, pieces[0], pieces[1])
    elif plan.projects_concurrently(layer, batch, steps):
        # Steps too small to gain from a second thread; the two projections, one large
        # product each, run at once, and the directions' steps together.
        projected = np.empty((2, steps, batch, layer.width), dtype=inputs.dtype)
        everything = slice(0, batch)
        plan.use(plan.step)
        _both(lambda d: _project(layer, inputs, packed, slice(d, d + 1), everything,
                                 out=projected[d:d + 1]), (0,), (1,))
        run_piece(slice(0, 2), everything, step=plan.step, projected=projected)
    else:
        for directions, rows in pieces:
            run_piece(directions, rows, plan.wide, plan.step)
    return history


# -- lockstep: one direction's steps shared by two processes ----------------------------------


def lockstep_steps(directions: Sequence[tuple[_Layer, int]], part: int,
                   projected: Sequence[np.ndarray], history: np.ndarray, cells: np.ndarray,
                   ticks: np.ndarray, wait: Callable[[int], None], chunk: int,
                   first: int = 0) -> None:
    """Half ``part`` of the units (see :func:`_halves` and :func:`_row_halves`) of every
    step of a layer, its directions one after the other, from the ``first`` step (counted
    over all of them): ``directions`` gives each direction's prepared layer and its index
    there, ``projected`` each direction's input side (1, T, B, G·H) (see
    :func:`_lockstep_pieces`), ``history`` (T+1, D, B, H) h and ``cells`` rows of c (c's
    history for one sequence, else a ring of :data:`_CELL_RING` rows; empty for a GRU),
    their first rows the initial state; ``chunk`` the width of the product's chunks (see
    :func:`_row_halves`; unused for one sequence); ``ticks`` (4, 1): the steps each
    process has done, plus one (the first tick: its projection), then the two words to
    stop (see :class:`~rnnport.helper.LockstepJob`). After each step this process's tick
    is set, and ``wait(tick)`` returns once the other's has reached it: each step reads
    all of h, both halves. Every step writes columns of its own, so neither process writes
    what the other still reads."""
    mine, other = ticks[part], ticks[1 - part]
    for index, (step, rows) in _half_directions(directions, part, projected, history, cells,
                                                chunk, first):
        tick = index + 1
        for views in rows:
            step(*views)
            tick += 1
            mine[0] = tick
            if other[0] < tick:
                wait(tick)


def _alone(directions: Sequence[tuple[_Layer, int]], projected: Sequence[np.ndarray],
           history: np.ndarray, cells: np.ndarray, chunk: int, first: int) -> None:
    """The steps of :func:`lockstep_steps` from ``first`` on, both halves here."""
    for (_, (step, rows)), (_, (other_step, other_rows)) in zip(
            _half_directions(directions, 0, projected, history, cells, chunk, first),
            _half_directions(directions, 1, projected, history, cells, chunk, first),
            strict=True):
        for views, other_views in zip(rows, other_rows, strict=True):
            step(*views)
            other_step(*other_views)


def _half_directions(directions: Sequence[tuple[_Layer, int]], part: int,
                     projected: Sequence[np.ndarray], history: np.ndarray, cells: np.ndarray,
                     chunk: int, first: int) -> Iterator[tuple[int, tuple[Callable[..., None],
                                                    Iterator[tuple[Any, ...]]]]]:
    """For each direction with steps from ``first`` on (counted over all directions): the
    count of its first step, the step of half ``part`` (:func:`_half_cell` for one
    sequence, else :func:`_half_rows_cell`) and, step by step, its arguments: the half's
    step input, h, and the half's h', c and c'. ``projected`` holds each direction's input
    side (its one piece: :func:`_lockstep_pieces`)."""
    steps, batch, half = history.shape[0] - 1, history.shape[2], history.shape[-1] // 2
    units = slice(part * half, (part + 1) * half)
    for d, (layer, index) in enumerate(directions):
        start = max(first - d * steps, 0)
        if start >= steps:
            continue
        source = _split(layer, projected[d][0, start:])[:, :, part]  # (T, B, G, H/2)
        step: Callable[..., None]
        if batch == 1:
            inputs: Iterable[Any] = source
            step = _half_cell(layer, index, part, source.dtype)
        else:
            inputs = source.transpose(0, 2, 3, 1)  # (T, G, H/2, B)
            step = _half_rows_cell(layer, index, part, batch, chunk, source.dtype)
        h = history[start:, d]
        c: Iterable[np.ndarray]
        c_next: Iterable[np.ndarray]
        if len(cells) == steps + 1:  # c's history
            c, c_next = cells[start:-1, d, :, units], cells[start + 1:, d, :, units]
        else:  # a ring of c's rows (see _CELL_RING)
            ring = [cells[row % len(cells), d, :, units] for row in range(start, steps + 1)]
            c, c_next = ring[:-1], ring[1:]
        yield d * steps + start, (step, zip(inputs, h[:-1], h[1:, :, units], c, c_next,
                                            strict=True))


# Where stores reach other cores in the order they were made (x86's total store order), a
# process that sees its partner's tick also sees the h it wrote before it. Elsewhere (Arm,
# POWER) stores may be seen out of order, and Python has no fence to order them: lockstep
# runs on x86 alone.
ORDERED_STORES = hasattr(os, "uname") and os.uname().machine.lower() in {
    "x86_64", "amd64", "i386", "i686", "x86"}


def _contended() -> bool:
    """Whether this process would share the CPUs it may use: another runnable task beside
    it leaves the helper no core of its own (``/proc/loadavg``'s running count, this
    process included). A lockstep process kept waiting on its partner runs far slower
    than each running a direction of its own."""
    try:
        with open("/proc/loadavg", "rb") as status:
            running = int(status.read(256).split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return True
    return running > _cores() - 1


def _lockstep_pieces(layer: _Layer, batch: int) -> list[tuple[int, int, int]]:
    """The pieces of a lockstep layer whose input sides are projected apart, as
    (direction, first row, row after): those of :func:`_pieces` by direction, one a
    direction (a lockstep layer's batch is one piece: see :func:`_row_halves`). This
    process projects the first, the helper the second (if any), each as
    :func:`_run_layer` projects a piece, so that the numbers are those of the pieces run
    apart."""
    return [(directions.start, rows.start, rows.stop)
            for directions, rows in _pieces(layer, batch, by_direction=True)]


def _lockstep(layer: _Layer, inputs: np.ndarray, history: np.ndarray,
              cell: np.ndarray | None) -> bool:
    """Run a layer of :meth:`_Plan.uses_lockstep` as two processes in lockstep
    (:func:`lockstep_steps`): this one the first half of the units, the helper the other,
    each direction in turn, each process with half of a direction's recurrent weights in
    its cache. This process projects the first of the :func:`_lockstep_pieces`, the
    helper the second. ``history`` (T+1, D, B, H) holds h0 in its first row and receives
    the h history; ``cell`` (D, B, H), an LSTM's initial cell state (None for a GRU),
    receives the final one. False when no helper can take the layer (nothing is written
    then).

    If the helper stops (it died, was stopped, reported an error, or the caller's
    ``np.seterr`` made a step raise there), the steps from the last one both finished run
    here, both halves: the same operations, hence the same numbers."""
    from . import helper  # not at import: most calls never start one

    steps, batch, _ = inputs.shape
    pieces = _lockstep_pieces(layer, batch)
    chunk = 0 if batch == 1 else _row_halves(layer, batch) or 0
    job = helper.lockstep(layer, inputs, history[0], cell, pieces, chunk,
                          steps + 1 if batch == 1 else _CELL_RING)
    if job is None:
        return False
    projected, states, cells, ticks = job.arrays
    directions = [(layer, d) for d in range(layer.directions)]
    try:
        with _quiet():
            try:
                _project_piece(layer, pieces[0][0], inputs, pieces[0], projected[0])
                ticks[0][0] = 1
                if ticks[1][0] < 1:
                    job.wait(1)
                lockstep_steps(directions, 0, projected, states, cells, ticks, job.wait, chunk)
            except helper.Stopped:
                # Both halves are done up to the lower tick: a helper given up may have run
                # on a step or two before it was ended, past this process's last one.
                done = int(ticks[1][0])
                if done < 1 and len(pieces) == 2:
                    _project_piece(layer, pieces[1][0], inputs, pieces[1], projected[1])
                _alone(directions, projected, states, cells, chunk,
                       max(min(done, int(ticks[0][0])) - 1, 0))
    except Exception:  # this process's steps raised (np.seterr, memory): the helper stops
        job.stop()
        raise
    except BaseException:  # interrupted: the helper is shut down, not waited for
        job.abandon()
        raise
    job.stop()
    history[...] = states
    if cell is not None:
        cell[...] = cells[(len(states) - 1) % len(cells)]
    return True


# The rows of c a lockstep layer of more than one sequence keeps, in turn: each process
# reads and writes its own half of c alone, and a step begins only once the other process
# finished the step before, so rows of the steps s − 1 (where the other's half is read
# after it stopped at step s) to s + 1 (where this process may have gone on) are enough.
# One sequence keeps c's history (a row's views made with the step's others, in C).
_CELL_RING = 3


def _project_piece(layer: _Layer, direction: int, inputs: np.ndarray,
                   piece: tuple[int, int, int], out: np.ndarray) -> None:
    """The input side of a lockstep ``piece`` (see :func:`_lockstep_pieces`) into ``out``
    (1, T, b, G·H), through ``layer``'s ``direction`` (the piece's, or 0 of that direction
    alone, as the helper holds it)."""
    _, first, after = piece
    _project(layer, inputs, None, slice(direction, direction + 1), slice(first, after), out=out)


def helper_layer(spec: Spec, params: Mapping[str, np.ndarray], dtype: np.dtype,
                 backward: bool) -> _Layer:
    """One direction of a layer alone, prepared from its canonical ``params`` as
    :func:`_prepared` prepares it here (:mod:`rnnport.helper`'s copy)."""
    layer = _Layer(spec, [params], dtype)  # its one direction, running as ``backward`` says
    layer.backward = (backward,)
    return layer


def run_direction(layer: _Layer, inputs: np.ndarray, history: np.ndarray,
                  cell: np.ndarray | None, projected: np.ndarray, ticks: np.ndarray) -> int:
    """The helper's piece (:func:`rnnport.helper.job`): one-direction ``layer`` over
    ``inputs`` (T, B, I) in its step order (a backward direction's reversed in time), as
    one piece of :func:`_run_layer` runs it, its input side into ``projected``
    (1, T, B, G·H): ``history`` (T+1, 1, B, H_out) holds h0 in its first row, ``cell``
    (1, B, H) the initial cell state (updated in place). The steps run in
    :func:`_stretches`; after each, ``ticks[1]`` counts the steps done, and before each,
    a request from the caller in ``ticks[2]`` (:meth:`rnnport.helper.Job.ask_for_the_rest`)
    ends the run there: the caller runs the rest from these arrays (:func:`_take_over`),
    the same steps on the same operands. Returns the steps done. One BLAS thread is the
    caller's to set."""
    steps, batch = inputs.shape[:2]
    _project(layer, inputs, None, slice(0, 1), slice(0, batch), out=projected,
             in_step_order=True)
    loop, scratch = _LOOPS[layer.cell], _loop_scratch(layer, batch, inputs.dtype)
    with _quiet():
        for first, after in _stretches(steps):
            if ticks[2][0]:
                return first
            loop(layer, projected[:, first:after], history[first:after + 1], cell, None,
                 scratch)
            ticks[1][0] = after
    return steps


# A helper's piece runs its steps in this many stretches, and may hand the rest over to the
# calling process between two of them: a caller that finished its own piece first takes
# over when more than a stretch is left (the helper shared its core with another program,
# or started late). Each stretch copies h (and c) in and out of a unit-major loop's
# buffers: a few microseconds.
STRETCHES = 16


def _stretch(steps: int) -> int:
    """The steps of a stretch of :func:`run_direction` (the last may hold fewer)."""
    return max(1, -(-steps // STRETCHES))


def _stretches(steps: int) -> list[tuple[int, int]]:
    """The stretches of :func:`run_direction`: (first step, step after), by count alone."""
    size = _stretch(steps)
    return [(first, min(first + size, steps)) for first in range(0, steps, size)]


def _take_over(layer: _Layer, direction: int) -> Callable[[int, list[np.ndarray]], None]:
    """The rest of a helper's piece of ``layer`` (its ``direction``) from step ``first``,
    run here on the job's arrays (:func:`rnnport.helper._layout`): its input side, the h
    history and c as the helper left them after step ``first``."""
    one = layer if layer.directions == 1 else layer.direction(direction)

    def take_over(first: int, arrays: list[np.ndarray]) -> None:
        history, cell, projected = arrays[3], arrays[4], arrays[5]
        _LOOPS[layer.cell](one, projected[:, first:], history[first:],
                           cell if cell.size else None, None, None)

    return take_over


def _wants_the_rest(job: Any, steps: int) -> bool:
    """Whether this process, its own piece done, should take over the helper's (see
    :data:`STRETCHES`): more than a stretch of it left."""
    return steps - job.steps_done() > _stretch(steps)


def lockstep_helper(layers: Sequence[_Layer], inputs: np.ndarray,
                    projected: Sequence[np.ndarray], history: np.ndarray, cells: np.ndarray,
                    ticks: np.ndarray, wait: Callable[[int], None],
                    pieces: Sequence[tuple[int, int, int]], chunk: int) -> None:
    """The helper's part of :func:`_lockstep`, its layer's directions ``layers`` (one
    each): the second piece's input side (if any), then the second half of every step."""
    if len(pieces) == 2:
        _project_piece(layers[pieces[1][0]], 0, inputs, pieces[1], projected[1])
    ticks[1][0] = 1
    if ticks[0][0] < 1:
        wait(1)
    with _quiet():
        lockstep_steps([(layer, 0) for layer in layers], 1, projected, history, cells, ticks,
                       wait, chunk)


def serve_helper(fd: int) -> None:
    """The helper process's entry point (:mod:`rnnport.helper`)."""
    from . import helper

    helper.serve(fd, helper_layer, run_direction, lockstep_helper)


def _both(work: Callable[..., object], first: tuple[Any, ...], second: tuple[Any, ...]) -> None:
    """``work(*first)`` here and ``work(*second)`` in a second thread, at once; an exception
    in either is raised here (the first one's if both fail)."""
    _at_once(work, [first, second], 2)


def _at_once(work: Callable[..., object], jobs: Sequence[tuple[Any, ...]], threads: int) -> None:
    """``work(*arguments)`` for each of ``jobs``, in ``threads`` threads at once (at most one
    a job): this one runs jobs 0, ``threads``, 2·``threads`` …, the k-th other thread jobs
    k, k + ``threads`` …. An exception is raised here once every thread has stopped (the
    first job's to fail, by order); a thread stops at its first failure."""
    count = min(threads, len(jobs))
    failures: dict[int, BaseException] = {}
    # NumPy's error state is per thread (a new one starts with the defaults): the caller's
    # np.seterr and np.seterrcall hold in every thread, as in one.
    settings, handler = np.geterr(), np.geterrcall()

    def run(first: int) -> None:
        index = first
        try:  # the settings' own entry and exit too: nothing escapes a thread unreported
            with (np.errstate(**settings) if handler is None
                  else np.errstate(call=handler, **settings)), _quiet():
                for index in range(first, len(jobs), count):
                    work(*jobs[index])
        except BaseException as error:  # handed to the calling thread, raised there
            failures[index] = error

    others = [threading.Thread(target=run, args=(first,), name="rnnport-recurrence",
                               daemon=True) for first in range(1, count)]
    for other in others:
        other.start()
    run(0)
    for other in others:
        other.join()
    if failures:
        raise failures[min(failures)]


def _layer_output(history: np.ndarray, packed: _Packing | None,
                  backward: tuple[bool, ...]) -> np.ndarray:
    """``(T, B, D·H_out)`` in time order: backward directions put back in original time."""
    steps = history.shape[0] - 1
    directions, batch, out_size = history.shape[1:]
    if directions == 1 and packed is None and not backward[0]:
        return history[1:].reshape(steps, batch, out_size)
    y = np.empty((steps, batch, directions * out_size), dtype=history.dtype)
    for direction, runs_backward in enumerate(backward):
        part = y[:, :, direction * out_size:(direction + 1) * out_size]
        if not runs_backward:
            part[...] = history[1:, direction]
        elif packed is None:
            part[...] = history[steps:0:-1, direction]
        else:
            part[...] = history[packed.reverse + 1, direction, packed.columns]
    if packed is not None:
        y[packed.invalid] = 0
    return y


def _final_state(history: np.ndarray, packed: _Packing | None) -> np.ndarray:
    if packed is None:
        return history[-1]
    return history[packed.lengths, :, packed.columns[0]].transpose(1, 0, 2)


class _Scratch:
    """Per-step buffers, and views of them for the first ``n`` sequences of the batch
    (a lean LSTM or GRU at four sequences or more runs unit-major instead: :class:`_Units`).

    ``raw`` receives the recurrent product ``h @ R`` (``R`` of N columns, ``G_R`` gate
    blocks), in blocks of ``chunk`` columns, ``(D, N / chunk, B, chunk)``: OpenBLAS runs a
    product of at most :data:`SMALL_PRODUCT` multiply-adds with its small-matrix kernels,
    which do not repack the weights (a larger one repacks them at every step, about a third
    of its time at 16 rows). ``chunk`` is all of N, or a divisor of H (see
    :func:`_chunk_width`), chosen by shape alone. The step input is added to it into
    ``gates`` (D, G, B, H), gate-major, so that every gate block the elementwise operations
    read is contiguous (NumPy's ufuncs take about three times as long over column slices of
    (B, G·H) rows). The sum runs over 5-D views ``(D, G, B, H / c, c)`` of both (``c`` the
    chunk, or H). ``tmp`` (D, B, H) holds intermediate products."""

    def __init__(self, layer: _Layer, batch: int, dtype: np.dtype) -> None:
        directions, hidden = layer.directions, layer.hidden
        depth, width = layer.recurrent.shape[1:]
        self.chunk = _chunk_width(hidden, batch, depth) or width
        self.weights = layer.chunks(self.chunk)
        self.single = self.weights[0][0] if len(self.weights) == len(self.weights[0]) == 1 \
            else None
        self.raw = np.empty((directions, width // self.chunk, batch, self.chunk), dtype=dtype)
        self.gates = np.empty((directions, len(layer.blocks), batch, hidden), dtype=dtype)
        self.tmp = np.empty((directions, batch, hidden), dtype=dtype)
        self.order = list(layer.blocks)
        # The 5-D split of a gate's H units: (H / c, c) for chunks of c ≤ H, else (1, H).
        self.split = (hidden // self.chunk, self.chunk) if self.chunk <= hidden else (1, hidden)
        self._cache: dict[int, tuple[Any, ...]] = {}

    def views(self, n: int) -> tuple[Any, ...]:
        """(raw, raw as (D, G_R, n, H / c, c), gates (D, G, n, H), gates as (D, G, n, H / c,
        c), {gate: (D, n, H)}, tmp) for the first ``n`` sequences."""
        found = self._cache.get(n)
        if found is None:
            raw, gates = self.raw[:, :, :n], self.gates[:, :, :n]
            directions, hidden = raw.shape[0], gates.shape[-1]
            if self.chunk <= hidden:
                raw_gates = raw.reshape(directions, raw.shape[1] // self.split[0],
                                        self.split[0], n, self.chunk).transpose(0, 1, 3, 2, 4)
            else:
                raw_gates = raw.reshape(directions, n, self.chunk // hidden, hidden
                                        ).transpose(0, 2, 1, 3)[..., None, :]
            found = (raw, raw_gates, gates, gates.reshape(*gates.shape[:3], *self.split),
                     {g: gates[:, k] for k, g in enumerate(self.order)}, self.tmp[:, :n])
            self._cache[n] = found
        return found

    def product(self, h: np.ndarray, raw: np.ndarray) -> None:
        """``raw = h @ R`` per direction and block: ``np.dot``, the BLAS call a stacked
        ``np.matmul`` makes for each direction, at less cost per call."""
        if self.single is not None:  # one direction, one block: the batch-1 case, kept short
            np.dot(h[0], self.single, out=raw[0, 0])
            return
        for d, blocks in enumerate(self.weights):
            rows, out = h[d], raw[d]
            for j, matrix in enumerate(blocks):
                np.dot(rows, matrix, out=out[j])


# OpenBLAS's bound on M·N·K for its small-matrix kernels (SkylakeX and later CPUs), and
# what a block must hold to be worth a call: at least CHUNK_MIN_ROWS rows (below, the
# product is matrix-vector or as fast whole) and CHUNK_MIN_WIDTH columns.
SMALL_PRODUCT = 1_000_000
CHUNK_MIN_ROWS = 4
CHUNK_MIN_WIDTH = 32


def _widest(hidden: int, rows: int, depth: int) -> int | None:
    """The most columns (rows of Rᵀ, unit-major) a block of a step's product at ``rows``
    sequences may hold: as many as keep ``(rows, depth) @ (depth, width)`` within
    :data:`SMALL_PRODUCT`, at most ``hidden``; None (one product of them all) below
    :data:`CHUNK_MIN_ROWS` sequences or :data:`CHUNK_MIN_WIDTH` columns."""
    if rows < CHUNK_MIN_ROWS:
        return None
    widest = min(hidden, SMALL_PRODUCT // max(rows * depth, 1))
    return widest if widest >= CHUNK_MIN_WIDTH else None


def _chunk_width(hidden: int, rows: int, depth: int) -> int | None:
    """The widest divisor of ``hidden`` within :func:`_widest`'s bound (at least
    :data:`CHUNK_MIN_WIDTH`): a sequence-major step's blocks of columns; None for one
    product of all the columns."""
    for width in range(_widest(hidden, rows, depth) or 0, CHUNK_MIN_WIDTH - 1, -1):
        if hidden % width == 0:
            return width
    return None


def _unit_width(hidden: int, rows: int, depth: int) -> int | None:
    """The most rows of Rᵀ a block of a unit-major product (see :class:`_Units`) at
    ``rows`` sequences holds (:func:`_widest`); None for one product of all of Rᵀ."""
    return _widest(hidden, rows, depth)


def _unit_blocks(hidden: int, gates: int, widest: int) -> list[slice]:
    """The blocks of rows of Rᵀ (G·H rows, gate by gate) that a unit-major product runs
    in, for blocks of at most ``widest`` rows: all of them at once where ``widest`` holds
    them, else a block a gate where it holds a gate's units, else each half of each gate's
    units (all its units where they are odd) in as few blocks as can be, of one width (a
    multiple of 16 where that stays within ``widest``; the last block may be narrower).
    Then no block crosses a half, so each half of the units (:func:`_half_rows_cell`) runs
    some of these blocks, whole. Fewer blocks are fewer calls: a GRU of hidden 512 at 16
    sequences ran its step's product in 279–284 µs as 18 blocks (96, 96 and 64 rows a half
    of a gate) against 298 µs as 24 blocks of 64 (OpenBLAS 0.3.31, an Intel Xeon).
    OpenBLAS's small-matrix kernels gave each element the same bits in blocks of every
    width tried, but every path that runs a layer uses these blocks regardless."""
    if widest >= gates * hidden:
        return [slice(0, gates * hidden)]
    if widest >= hidden:
        return [slice(gate * hidden, (gate + 1) * hidden) for gate in range(gates)]
    spans = [(0, hidden // 2), (hidden // 2, hidden)] if hidden % 2 == 0 else [(0, hidden)]
    cuts: list[slice] = []
    for gate in range(gates):
        for start, stop in spans:
            size = stop - start
            count = -(-size // widest)
            width = -(-size // count)
            rounded = -(-width // 16) * 16  # a multiple of the kernels' 16 rows
            if rounded <= widest:
                width = rounded
            for first in range(start, stop, width):
                cuts.append(slice(gate * hidden + first, gate * hidden + min(first + width, stop)))
    return cuts


def _steps(projected: np.ndarray, history: np.ndarray, cell: np.ndarray | None,
           active: list[int] | None, scratch: _Scratch | None) -> Iterator[tuple[Any, ...]]:
    """For each step ``s``: its input projection (with a scratch, gate-major and split as
    its 5-D views, (D, G, n, H / c, c); else (D, n, width)), h, the slot for h', the cell
    state and the scratch views, cut to the sequences still running (all of them without
    lengths)."""
    directions, steps, batch, width = projected.shape
    if scratch is None:
        by_step = projected.transpose(1, 0, 2, 3)  # (T, D, B, G·H)
        full = None
    else:  # (T, D, G, B, H / c, c)
        parts, size = scratch.split
        by_step = projected.reshape(directions, steps, batch, width // (parts * size), parts,
                                    size).transpose(1, 0, 3, 2, 4, 5)
        full = scratch.views(batch)
    if active is None:  # the common case, its views made by iteration in C
        for step_input, h, h_next in zip(by_step, history[:-1], history[1:], strict=True):
            yield step_input, h, h_next, cell, full
        return
    for s in range(by_step.shape[0]):
        n = active[s]
        if n == batch:
            yield by_step[s], history[s], history[s + 1], cell, full
        elif n == 0:
            return
        elif scratch is None:
            yield (by_step[s, :, :n], history[s, :, :n], history[s + 1, :, :n], None, None)
        else:
            yield (by_step[s, :, :, :n], history[s, :, :n], history[s + 1, :, :n],
                   None if cell is None else cell[:, :n], scratch.views(n))


def _dot(h: np.ndarray, weights: Sequence[np.ndarray], out: np.ndarray) -> None:
    """``out = h @ weights`` for ``h`` (D, B, K), one (K, N) matrix per direction, ``out``
    (D, B, N) with C-contiguous rows: ``np.dot`` per direction."""
    for d, matrix in enumerate(weights):
        np.dot(h[d], matrix, out=out[d])


def _clip(layer: _Layer, gates: dict[str, np.ndarray], which: str) -> None:
    bounds = layer.clip or {}
    for gate in which:
        np.clip(gates[gate], -bounds[gate], bounds[gate], out=gates[gate])


def _normalize(gate: np.ndarray, norm: tuple[np.ndarray, np.ndarray, float],
               tmp: np.ndarray) -> None:
    """A gate's pre-activation (D, n, H), normalized over its units in place, then scaled by
    the coefficients and shifted by the bias (see :class:`_Layer`)."""
    coefficients, bias, epsilon = norm
    gate -= gate.mean(axis=-1, keepdims=True)
    np.multiply(gate, gate, out=tmp)
    spread = tmp.mean(axis=-1, keepdims=True)
    spread += epsilon
    np.sqrt(spread, out=spread)
    gate /= spread
    gate *= coefficients
    gate += bias


_Step = Callable[[np.ndarray, np.ndarray, np.ndarray, Any], None]


def _gated_loop(layer: _Layer, projected: np.ndarray, history: np.ndarray, cell: Any,
                active: list[int] | None, scratch: _Scratch | _Units | None) -> None:
    """The steps of an LSTM (``cell``: its state) or a GRU (``cell`` None): the lean cell at
    batch 1 without lengths, else the cell's step over the scratch's views, made again only
    when lengths change the views."""
    if projected.shape[2] == 1 and _lean(layer):
        # One sequence: with a length, its steps up to it (those after it do not run).
        steps = projected.shape[1] if active is None else sum(1 for n in active if n)
        _lean_loop(layer, projected[:, :steps], history[:steps + 1], cell)
        return
    if scratch is None:
        scratch = _scratch(layer, projected.shape[2], projected.dtype)
    if isinstance(scratch, _Units):
        _unit_loop(layer, projected, history, cell, active, scratch)
        return
    make: Callable[[_Layer, _Scratch, tuple[Any, ...]], _Step] = \
        _lstm_step if cell is not None else _gru_step
    step: Any = None
    last = None
    for step_input, h, h_next, c, views in _steps(projected, history, cell, active, scratch):
        if views is not last:  # the same views at every step, without lengths
            last = views
            step = make(layer, scratch, views)
        step(step_input, h, h_next, c)


def _lstm_step(layer: _Layer, scratch: _Scratch, views: tuple[Any, ...]) -> _Step:
    """One LSTM step over ``views`` (see :meth:`_Scratch.views`): ``step(step_input, h,
    h_next, c)``, everything else read once here (a step at batch 1 takes about 8 µs
    besides its product), so that a stream runs a step with one call."""
    order = list(layer.blocks)
    sigmoid_gates = slice(order.index("i"), order.index("o") + 1)
    act_f, act_g, act_h = layer.act_f, layer.act_g, layer.act_h
    # Where the candidate takes the gates' own activation (σ for both, say): one pass over
    # all four gates.
    shared = act_f is act_g and layer.peephole is None
    into_h = act_h.direct or act_h.into  # tanh(c') straight into h' (or the output slot)
    peephole, projection, layer_norm = layer.peephole, layer.projection, layer.layer_norm
    projection_bias = layer.projection_bias
    clip, cell_clip, input_forget = layer.clip, layer.cell_clip, layer.input_forget
    product = scratch.product
    raw, raw_gates, buf, split, gates, tmp = views
    i, f, g, o = gates["i"], gates["f"], gates["g"], gates["o"]
    unit = one(buf)
    sigmoids = buf[:, sigmoid_gates]

    def step(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: np.ndarray) -> None:
        product(h, raw)
        np.add(raw_gates, step_input, out=split)
        if peephole is not None:
            for gate in "if":
                np.multiply(peephole[gate], c, out=tmp)
                gates[gate] += tmp
        if layer_norm is not None:
            for gate in ("ifg" if peephole is not None else "ifog"):
                _normalize(gates[gate], layer_norm[gate], tmp)
        if clip is not None:
            _clip(layer, gates, "ifg" if peephole is not None else "ifog")
        if shared:
            act_f.prescaled(buf)
        else:
            if peephole is None:
                act_f.prescaled(sigmoids)
            else:
                act_f.prescaled(i)
                act_f.prescaled(f)
            act_g.prescaled(g)
        if input_forget:
            np.subtract(unit, i, out=f)
        c *= f
        np.multiply(i, g, out=tmp)
        c += tmp
        if cell_clip is not None:
            np.clip(c, -cell_clip, cell_clip, out=c)
        if peephole is not None:
            # o's peephole sees the new cell state.
            np.multiply(peephole["o"], c, out=tmp)
            np.add(o, tmp, out=o)
            if layer_norm is not None:
                _normalize(o, layer_norm["o"], tmp)
            if clip is not None:
                _clip(layer, gates, "o")
            act_f.prescaled(o)
        if projection is None:
            into_h(c, h_next)
            h_next *= o
        else:
            into_h(c, tmp)
            np.multiply(tmp, o, out=tmp)
            np.matmul(tmp, projection, out=h_next)
            if projection_bias is not None:
                h_next += projection_bias

    return step


def _gru_step(layer: _Layer, scratch: _Scratch, views: tuple[Any, ...]) -> _Step:
    """One GRU step over ``views`` (see :meth:`_Scratch.views`): ``step(step_input, h,
    h_next, _)`` (the last argument, an LSTM's cell state, unused), everything else read once
    here, as :func:`_lstm_step`. ``h_next`` may be
    ``h`` itself: h' is written last."""
    # Reset before: the product holds the r z columns only (R_n multiplies r∘h apart).
    act_f, bias_n, clip = layer.act_f, layer.bias_n, layer.clip
    per_direction_n = None if layer.recurrent_n is None else list(layer.recurrent_n)
    if bias_n is not None:
        bias_n = bias_n.reshape(bias_n.shape[0], 1, *scratch.split)
    product = scratch.product
    raw, raw_gates, buf, split, gates, tmp = views
    # Gates r z n (ORDER): r and z from the product and the input together.
    rz_raw, rz_split, rz, n_split = raw_gates[:, :2], split[:, :2], buf[:, :2], split[:, 2]
    n_raw = raw_gates[:, -1]  # n with reset after (reset before's product has no n)
    r, z, candidate, r_split = gates["r"], gates["z"], gates["n"], split[:, 0]
    rest = _gru_rest(layer, candidate, z, tmp)

    def step(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, _: Any = None) -> None:
        product(h, raw)
        np.add(rz_raw, step_input[:, :2], out=rz_split)
        if clip is not None:
            _clip(layer, gates, "rz")
        act_f.prescaled(rz)
        if per_direction_n is None:  # reset after: n = g(W_n x + bW_n + r∘(R_n h + bR_n))
            if bias_n is not None:
                np.add(n_raw, bias_n, out=n_split)
                np.multiply(candidate, r, out=candidate)
            else:
                np.multiply(n_raw, r_split, out=n_split)
        else:                        # reset before: n = g(W_n x + bW_n + R_n (r∘h) + bR_n)
            np.multiply(r, h, out=tmp)
            _dot(tmp, per_direction_n, candidate)
        np.add(n_split, step_input[:, 2], out=n_split)
        if clip is not None:
            _clip(layer, gates, "n")
        rest(h, h_next)

    return step


def _gru_rest(layer: _Layer, candidate: np.ndarray, z: np.ndarray, tmp: np.ndarray
              ) -> Callable[[np.ndarray, np.ndarray], None]:
    """The GRU step after n's pre-activation is in ``candidate`` and z in ``z`` (a
    :func:`_gru_step`, a :func:`_lean_cell` step, or a :func:`_half_rows_cell` half):
    ``rest(h, h_next)``, n = g(·) in place, then h' = (1 − z)∘n + z∘h = n + z∘(h − n) into
    ``h_next`` (which may be ``h``), through ``tmp``."""
    activation = layer.act_g.prescaled
    subtract, multiply, add = np.subtract, np.multiply, np.add

    def rest(h: np.ndarray, h_next: np.ndarray) -> None:
        activation(candidate)
        subtract(h, candidate, tmp)
        multiply(tmp, z, tmp)
        add(candidate, tmp, h_next)

    return rest


# -- unit-major steps: more than one sequence ----------------------------------------------


def _loop_scratch(layer: _Layer, batch: int, dtype: np.dtype) -> _Scratch | _Units | None:
    """The per-step buffers a layer's loop (:data:`_LOOPS`) takes for ``batch`` sequences,
    for a caller that runs its steps in several calls (a stream's chunks, a helper's
    stretches) and makes them once: None for a simple RNN, which has none."""
    return None if layer.cell.startswith("rnn") else _scratch(layer, batch, dtype)


def _scratch(layer: _Layer, batch: int, dtype: np.dtype) -> _Scratch | _Units:
    """The per-step buffers of an LSTM's or GRU's steps at ``batch`` sequences: unit-major
    where :func:`_unit_major`, else sequence-major."""
    if _unit_major(layer, batch):
        return _Units(layer, batch, dtype)
    return _Scratch(layer, batch, dtype)


def _unit_major(layer: _Layer, batch: int) -> bool:
    """Whether the steps of ``layer`` at ``batch`` sequences (a piece's) run unit-major
    (:class:`_Units`): a :func:`_lean` LSTM or GRU (reset after) at :data:`CHUNK_MIN_ROWS`
    sequences or more (at two or three, copying h and c around the step cost more than the
    product gained). By shape alone, so every path that runs such a piece (``forward``'s
    threads, the helper, lockstep, a stream) computes it the same way."""
    return (batch >= CHUNK_MIN_ROWS and layer.cell in ("lstm", "gru")
            and layer.recurrent_n is None and _lean(layer))


class _Units:
    """The state and buffers of a :func:`_unit_major` layer's steps at ``batch`` sequences,
    unit-major: h, c and the gates as (units, sequences), so that the recurrent product is
    ``Rᵀ h``, each block of rows of Rᵀ (:meth:`_Layer.units`, for blocks of as many rows
    as :func:`_unit_width` allows) by all of h (H, B). OpenBLAS's small-matrix
    kernels ran that 15–20 % faster than ``h R`` at 16 sequences (an Intel Xeon, OpenBLAS
    0.3.31: an LSTM 320's step in 140 µs against 180), and every elementwise operation
    reads and writes contiguous blocks. The step's input projection, the h history and the
    cell state stay sequence-major: a step reads its input through a transposed view and
    writes h' to the history through one, and the loop copies h and c in at its start and
    c out at its end (exact copies: the same numbers).

    ``h`` (2, D, H, B): h and h' in turn; ``c`` (D, H, B) for an LSTM. The step of the
    first ``n`` sequences (lengths) multiplies into the first D·G·H·n values of one buffer,
    seen as (D, G·H, n): contiguous, as the BLAS needs its output, and no more memory for
    any number of lengths."""

    def __init__(self, layer: _Layer, batch: int, dtype: np.dtype) -> None:
        hidden, (depth, width) = layer.hidden, layer.recurrent.shape[1:]
        self.layer, self.batch = layer, batch
        self.weights = layer.units(_unit_width(hidden, batch, depth) or width)
        self.h = np.empty((2, layer.directions, hidden, batch), dtype)
        self.c = np.empty((layer.directions, hidden, batch), dtype) \
            if layer.cell == "lstm" else None
        self._raw = np.empty(layer.directions * width * batch, dtype)
        self._tmp = np.empty(layer.directions * hidden * batch, dtype)
        self._steps: dict[int, Callable[..., None]] = {}

    def step(self, n: int) -> Callable[..., None]:
        """The step of the first ``n`` sequences (see :func:`_unit_step`), made once per n."""
        found = self._steps.get(n)
        if found is None:
            directions, width = self.layer.directions, self.layer.width
            bias_n = self.layer.bias_n
            found = _unit_step(self.layer, self.weights,
                               self._raw[:directions * width * n].reshape(directions, width, n),
                               self._tmp[:directions * self.layer.hidden * n].reshape(
                                   directions, self.layer.hidden, n),
                               None if bias_n is None else bias_n.transpose(0, 2, 1))
            self._steps[n] = found
        return found


def _unit_step(layer: _Layer, weights: Sequence[Sequence[tuple[slice, np.ndarray]]],
               raw: np.ndarray, tmp: np.ndarray, bias_n: np.ndarray | None,
               units: slice | None = None) -> Callable[..., None]:
    """One unit-major step of n sequences into the buffers ``raw`` (D, G·U, n) (the
    product, then the gates) and ``tmp`` (D, U, n), for U units: all of them, or the
    ``units`` of a lockstep half (:func:`_half_rows_cell`). ``step(step_input, h, h_next,
    c)`` takes the units' step input (D, G, U, n) (a transposed view of the projection),
    all of h (D, H, n), the slot for the units' h' (D, U, n) and an LSTM's c (D, U, n),
    updated in place (None for a GRU). ``weights``: per direction the blocks of rows of Rᵀ
    (rows, H) that hold the units' rows, each with the rows of ``raw`` it fills; ``bias_n``
    a GRU's bR_n for them (D, U, 1), or None."""
    products = [[(matrix, raw[d, rows]) for rows, matrix in blocks]
                for d, blocks in enumerate(weights)]
    dot = np.dot
    after = _unit_gates(layer, raw, tmp, bias_n)

    def step(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any) -> None:
        for d, pairs in enumerate(products):
            source = h[d]
            for matrix, out in pairs:
                dot(matrix, source, out)
        after(step_input, h if units is None else h[:, units], h_next, c)

    return step


def _unit_gates(layer: _Layer, raw: np.ndarray, tmp: np.ndarray, bias_n: np.ndarray | None
                ) -> Callable[[np.ndarray, np.ndarray, np.ndarray, Any], None]:
    """A unit-major step after its product, which is in ``raw`` (D, G·U, n) for U units
    (all of them, or a lockstep half): ``after(step_input, h, h_next, c)`` with the units'
    input (D, G, U, n), h and h' (D, U, n) and an LSTM's c (D, U, n), updated in place;
    ``tmp`` (D, U, n); ``bias_n`` a GRU's bR_n (D, U, 1) or None. The operations of
    :func:`_lstm_step` and :func:`_gru_step` for a lean layer, in the same order (their
    tails :func:`_lstm_rest` and :func:`_gru_rest`)."""
    units = tmp.shape[1]
    gates = raw.reshape(raw.shape[0], -1, units, raw.shape[2])  # (D, G, U, n)
    add, multiply = np.add, np.multiply
    if layer.cell == "lstm":
        order = list(layer.blocks)

        def view(names: str) -> np.ndarray:
            return raw[:, _span(layer, names, units)] if len(names) > 1 else \
                gates[:, order.index(names)]

        rest = _lstm_rest(layer, raw, tmp, view)

        def lstm(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any) -> None:
            add(gates, step_input, gates)
            rest(c, c, h_next)

        return lstm
    r, z, candidate, rz = gates[:, 0], gates[:, 1], gates[:, 2], gates[:, :2]
    sigmoid, rest_gru = layer.act_f.prescaled, _gru_rest(layer, candidate, z, tmp)

    def gru(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any = None) -> None:
        add(rz, step_input[:, :2], rz)
        sigmoid(rz)
        if bias_n is not None:  # n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))
            add(candidate, bias_n, candidate)
        multiply(candidate, r, candidate)
        add(candidate, step_input[:, 2], candidate)
        rest_gru(h, h_next)

    return gru


def _unit_one(units: _Units, projected: np.ndarray, h: np.ndarray, c: np.ndarray | None
              ) -> Callable[[], None]:
    """A stream's one step of a unit-major piece (see :class:`_Units`), as :func:`_unit_loop`
    runs a step: its input ``projected`` (D, 1, B, G·H), h (D, B, H) and c (D, B, H)
    copied in unit-major, the step, h' and c' copied back over h and c."""
    directions, _, batch, _ = projected.shape
    step = units.step(batch)
    step_input = projected[:, 0].reshape(directions, batch, len(units.layer.blocks),
                                          units.layer.hidden).transpose(0, 2, 3, 1)
    h_units, h_next, c_units = units.h[0], units.h[1], units.c
    copyto = np.copyto

    def run() -> None:
        copyto(h_units, h.transpose(0, 2, 1))
        if c is not None and c_units is not None:
            copyto(c_units, c.transpose(0, 2, 1))
        step(step_input, h_units, h_next, c_units)
        copyto(h, h_next.transpose(0, 2, 1))
        if c is not None and c_units is not None:
            copyto(c, c_units.transpose(0, 2, 1))

    return run


def _unit_loop(layer: _Layer, projected: np.ndarray, history: np.ndarray, cell: Any,
               active: list[int] | None, units: _Units) -> None:
    """The steps of a :func:`_unit_major` layer (see :func:`_gated_loop`): h and c copied
    into ``units``' unit-major buffers, each step's h' copied out to ``history``, c back to
    ``cell`` at the end. With lengths, step ``s`` runs the first ``active[s]`` sequences."""
    steps, batch = projected.shape[1], projected.shape[2]
    h, c = units.h, units.c
    np.copyto(h[0], history[0].transpose(0, 2, 1))
    if c is not None:
        np.copyto(c, cell.transpose(0, 2, 1))
    directions, gates, hidden = projected.shape[0], len(layer.blocks), layer.hidden
    inputs = projected.reshape(directions, steps, batch, gates, hidden).transpose(1, 0, 3, 4, 2)
    copyto = np.copyto
    if active is None:
        step = units.step(batch)
        for s in range(steps):
            h_next = h[(s + 1) % 2]
            step(inputs[s], h[s % 2], h_next, c)
            copyto(history[s + 1], h_next.transpose(0, 2, 1))
    else:
        for s in range(steps):
            n = active[s]
            if n == 0:
                break
            h_next = h[(s + 1) % 2, :, :, :n]
            units.step(n)(inputs[s, ..., :n], h[s % 2, :, :, :n], h_next,
                          None if c is None else c[:, :, :n])
            copyto(history[s + 1, :, :n], h_next.transpose(0, 2, 1))
    if c is not None:
        np.copyto(cell, c.transpose(0, 2, 1))


def _rnn_loop(layer: _Layer, projected: np.ndarray, history: np.ndarray, cell: None,
              active: list[int] | None, scratch: _Scratch | _Units | None) -> None:
    if active is None and projected.shape[2] == 1 and _lean(layer):
        _lean_loop(layer, projected, history, cell)
        return
    act, recurrent = layer.act_g, list(layer.recurrent)
    bound = None if layer.clip is None else layer.clip["h"]
    for step_input, h, h_next, _, _ in _steps(projected, history, None, active, None):
        _dot(h, recurrent, h_next)
        h_next += step_input
        if bound is not None:
            np.clip(h_next, -bound, bound, out=h_next)
        act.prescaled(h_next)


# (layer, input projections, h history, cell state or None, sequences running per step,
# per-step buffers to reuse or None for new ones; the RNN loop has none)
_Loop = Callable[[_Layer, np.ndarray, np.ndarray, Any, "list[int] | None",
                  "_Scratch | _Units | None"], None]
_LOOPS: dict[str, _Loop] = {"lstm": _gated_loop, "gru": _gated_loop, "rnn_tanh": _rnn_loop,
                            "rnn_relu": _rnn_loop}


# -- argument checks ---------------------------------------------------------------------


def _check_input(x: Any, input_size: int, dtype: np.dtype) -> np.ndarray:
    try:
        array = np.asarray(x)
    except (ValueError, TypeError) as error:  # a ragged nesting of lists
        raise ShapeError(f"forward: x cannot be an array ({str(error).splitlines()[0]}); "
                         f"expected (batch, time, {input_size}) numbers, every sequence of the "
                         "same length (pad shorter ones and pass lengths=).") from None
    if array.dtype.kind not in "fiu":
        raise DTypeError(f"forward: x has dtype {array.dtype}; expected real numbers "
                         "(float16/32/64). Cast x with x.astype(numpy.float32).")
    if array.ndim != 3 or array.shape[2] != input_size:
        hint = (" Add a batch axis with x[None] for one sequence."
                if array.ndim == 2 and array.shape[1] == input_size else "")
        raise ShapeError(
            f"forward: x has shape {array.shape}; expected (batch, time, {input_size}) "
            f"(or (time, batch, {input_size}) with time_major=True) because the network's "
            f"input_size is {input_size}.{hint}")
    return array.astype(dtype, copy=False)


def _check_size(spec: Spec, steps: int, batch: int) -> None:
    width = max(spec.layer_input_size(layer) for layer in range(spec.num_layers))
    held = steps * batch * (width + spec.num_directions * (
        spec.gate_count * spec.hidden_size + 2 * spec.output_size))
    if held > budget.allowance("elements"):  # x, the input projections, h history and y
        error = budget.exceeded(
            "forward", f"x of {steps:,} steps × {batch:,} sequences would need {held:,} values "
            "at once", "elements", needed=held)
        raise type(error)(f"{error} Or run it in pieces along time, carrying the state: "
                          "y1, s = net.forward(x[:, :k]); y2, s = net.forward(x[:, k:], state=s).",
                          error.limit)


def whole_numbers(array: np.ndarray) -> bool:
    """Whether ``array`` holds whole numbers: integers, or floats without a fraction."""
    return array.dtype.kind in "iu" or (
        array.dtype.kind == "f" and bool(np.all(np.mod(array, 1) == 0)))


def _check_lengths(lengths: Any, batch: int, steps: int) -> np.ndarray | None:
    """``lengths`` as int64, or None when every sequence runs all ``steps``."""
    if lengths is None:
        return None
    array = np.asarray(lengths)
    if not whole_numbers(array):
        raise StateError(f"forward: lengths has dtype {array.dtype}; expected integers.")
    if array.shape != (batch,):
        raise StateError(f"forward: lengths has shape {array.shape}; expected ({batch},), "
                         "one length per sequence in the batch.")
    array = array.astype(np.int64)
    bad = np.flatnonzero((array < 0) | (array > steps))
    if bad.size:
        raise StateError(f"forward: lengths[{bad[0]}] = {array[bad[0]]}; expected 0 ≤ length ≤ "
                         f"{steps} (the number of time steps of the input).")
    if np.all(array == steps):
        return None
    return array


def _check_state(state: Any, spec: Any, batch: int, dtype: np.dtype,
                 where: str = "forward") -> tuple[np.ndarray, np.ndarray | None]:
    layers_directions = spec.num_layers * spec.num_directions
    h_shape = (layers_directions, batch, spec.output_size)
    c_shape = (layers_directions, batch, spec.hidden_size)
    is_lstm = spec.cell == "lstm"
    if state is None:
        return np.zeros(h_shape, dtype), (np.zeros(c_shape, dtype) if is_lstm else None)
    if is_lstm:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise StateError(f"{where}: an LSTM state is a pair (h, c) with h {h_shape} and c "
                             f"{c_shape}; got {type(state).__name__}.")
        h, c = (np.asarray(part) for part in state)
    else:
        if isinstance(state, (tuple, list)):
            raise StateError(f"{where}: a {spec.cell} state is one array h {h_shape}, "
                             f"not a {type(state).__name__}.")
        h, c = np.asarray(state), None
    problems = []
    if h.shape != h_shape:
        problems.append(f"h has shape {h.shape}; expected {h_shape} "
                        "(layers·directions, batch, H_out), index layer·D + direction")
    if c is not None and c.shape != c_shape:
        problems.append(f"c has shape {c.shape}; expected {c_shape} "
                        "(layers·directions, batch, hidden)")
    if problems:
        raise StateError(f"{where}: " + "; ".join(problems) + ".")
    return h.astype(dtype, copy=False), (None if c is None else c.astype(dtype, copy=False))



# -- streams -------------------------------------------------------------------------------

# A stream keeps the buffers of this many chunk lengths (steps per call); a call with
# another length plans its buffers anew, and the length used least recently is dropped.
STREAM_KEPT_LENGTHS = 4


def _lean(layer: _Layer) -> bool:
    """Whether the layer's steps at batch 1 run as :func:`_lean_cell`: no gate clip, the
    default activations, and an LSTM without its options."""
    if layer.clip is not None:
        return False
    if layer.cell == "lstm":
        return (layer.act_f is SIGMOID and layer.act_g is TANH
                and layer.act_h is TANH and layer.peephole is None and layer.layer_norm is None
                and layer.projection is None and layer.cell_clip is None
                and not layer.input_forget)
    if layer.cell == "gru":
        return layer.act_f is SIGMOID and layer.act_g is TANH
    return True  # a simple RNN: tanh or relu


# A lean LSTM whose recurrent weights per direction hold at least this many bytes may run
# its batch-1 steps in two halves of its units, one in each of two processes
# (:func:`_lockstep`). At about a megabyte the weights of one direction fill much of a
# core's second-level cache (1.6 MB for hidden 320 took 25–37 µs a step on an Intel Xeon
# with 2 MB, against 7–10 µs for half of it): in lockstep each core holds half.
HALVES_MIN_BYTES = 1 << 20


def _halves(layer: _Layer) -> bool:
    """Whether the layer's batch-1 steps may run as two halves of its units
    (:func:`_half_cell`): a lean LSTM of at least :data:`HALVES_MIN_BYTES` of recurrent
    weights a direction whose halves give the numbers of its whole step
    (:func:`_halves_agree`)."""
    return (layer.cell == "lstm" and layer.hidden % 2 == 0 and _lean(layer)
            and layer.recurrent[0].nbytes >= HALVES_MIN_BYTES and _halves_agree(layer))


def _halves_agree(layer: _Layer) -> bool:
    """Whether two :func:`_half_cell` steps give the bits of one :func:`_lean_cell` step,
    each direction, checked once per prepared layer on two random states, on one BLAS
    thread as every step runs (on two, OpenBLAS splits a long matrix-vector product's
    sums, which changes their bits). A half's product is ``h`` by half the columns; the
    BLAS computes each of a matrix-vector product's sums the same way wherever its column
    lies, except at the edge of its blocking (OpenBLAS 0.3.31 gave other bits for hidden
    100 in float32, none for 320), and NumPy's ``exp`` and ``tanh`` compute each element
    alike however long the array. The BLAS's code takes the same path whatever the
    values, so two states that agree show that the two ways are the same computation;
    where they do not, the layer runs whole (each process a direction)."""
    if layer.agree is None:
        libraries = _one_thread()
        try:
            layer.agree = all(_halves_agree_in(layer, d) for d in range(layer.directions))
        finally:
            _put_back(libraries)
    return layer.agree


def _halves_agree_in(layer: _Layer, direction: int) -> bool:
    """:func:`_halves_agree` for one direction (the BLAS at one thread)."""
    dtype, half = layer.recurrent.dtype, layer.hidden // 2
    rng = np.random.default_rng(direction)
    whole = _lean_cell(layer.direction(direction), dtype)
    halves = [_half_cell(layer, direction, part, dtype) for part in (0, 1)]
    for _ in range(2):
        step_input = rng.standard_normal((1, 1, layer.width)).astype(dtype)
        h = rng.standard_normal((1, 1, layer.hidden)).astype(dtype)
        c = rng.standard_normal((1, 1, layer.hidden)).astype(dtype)
        h_whole, c_whole = np.empty_like(h), c.copy()
        whole(step_input, h, h_whole, c_whole)
        h_parts, c_parts = np.empty_like(h), np.empty_like(c)
        for part, step in enumerate(halves):
            units = slice(part * half, (part + 1) * half)
            step(_split(layer, step_input[0])[:, part], h[0], h_parts[0, :, units],
                 c[0, :, units], c_parts[0, :, units])
        if not (np.array_equal(h_whole, h_parts) and np.array_equal(c_whole, c_parts)):
            return False
    return True


def _row_halves(layer: _Layer, batch: int) -> int | None:
    """The most rows of a block of the recurrent product (:func:`_unit_width`, see
    :class:`_Units`) when a layer's steps at ``batch`` sequences may run as two halves of
    its units, one in each process (:func:`_half_rows_cell`), else None: a one-way lean
    LSTM or GRU (reset after) of an even number of units whose step's product holds at
    least :data:`CONCURRENT_MIN_STEP_WORK` multiply-adds and whose batch runs as one piece
    (see :func:`_lockstep_pieces`: halves then use both cores where the piece uses one),
    unit-major (:func:`_unit_major`) in blocks (:func:`_unit_blocks`) narrower than a
    gate's units, which then lie within one half of them (a layer whose blocks hold whole
    gates is small enough to run whole). Each half's products are then some of the
    piece's own, the same calls, and its elementwise operations those of
    :func:`_unit_gates` on its units: the numbers of the piece run whole. (A batch in two
    halves runs each half in a process of its own: unit-major, a GRU of hidden 512 at 32
    sequences took 57 ms that way against 63 in halves of its units, which copy h for each
    half of the batch at every step. A bidirectional layer's directions, one in each
    process, ran as fast as in halves.)"""
    if not (layer.directions == 1 and layer.hidden % 2 == 0 and _unit_major(layer, batch)
            and batch * layer.out_size * layer.width >= CONCURRENT_MIN_STEP_WORK
            and len(_lockstep_pieces(layer, batch)) == 1):
        return None
    widest = _unit_width(layer.hidden, batch, layer.recurrent.shape[1])
    return widest if widest is not None and widest < layer.hidden else None


def _half_rows_cell(layer: _Layer, direction: int, part: int, batch: int, chunk: int,
                    dtype: np.dtype) -> Callable[..., None]:
    """Half ``part`` of the units of a :func:`_row_halves` layer's ``direction``, one step
    of ``batch`` sequences, its product in the blocks of :func:`_unit_blocks` of at most
    ``chunk`` rows: ``step(step_input, h, h_next, c, c_next)`` with the half's step input
    (G, H/2, B), all of h (B, H), and the half's h', c and c' (B, H/2) (an LSTM's; empty
    for a GRU). The half runs as the layer's :class:`_Units` step (:func:`_unit_step`)
    runs its units: h copied unit-major, multiplied by the half's blocks of Rᵀ, the same
    calls, then the same elementwise operations, c in and h' and c' out through exact
    copies."""
    hidden, half, gates = layer.hidden, layer.hidden // 2, len(layer.blocks)
    if not (hidden % 2 == 0 and 0 < chunk < hidden):
        raise ValueError(f"blocks of at most {chunk} rows do not split {hidden} units in halves")
    units = slice(part * half, (part + 1) * half)
    # The half's blocks, each with its rows in the half's product (gate by gate, H/2 each).
    mine = []
    for rows, weights in layer.units(chunk)[direction]:
        gate, first = divmod(rows.start, hidden)
        if units.start <= first < units.stop:
            start = gate * half + first - units.start
            mine.append((slice(start, start + rows.stop - rows.start), weights))
    bias_n = None if layer.bias_n is None else \
        layer.bias_n[direction:direction + 1, :, units].transpose(0, 2, 1)
    h_units = np.empty((1, hidden, batch), dtype)
    out = np.empty((1, half, batch), dtype)
    c_units = np.empty((1, half, batch), dtype) if layer.cell == "lstm" else None
    half_step = _unit_step(layer, [mine], np.empty((1, gates * half, batch), dtype),
                           np.empty((1, half, batch), dtype), bias_n, units)
    copyto = np.copyto

    def step(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any = None,
             c_next: Any = None) -> None:
        copyto(h_units[0], h.T)
        if c_units is not None:
            copyto(c_units[0], c.T)
        half_step(step_input[None], h_units, out, c_units)
        copyto(h_next, out[0].T)
        if c_units is not None:
            copyto(c_next, c_units[0].T)

    return step


def _split(layer: _Layer, array: np.ndarray) -> np.ndarray:
    """``array`` (…, G·H) as a view (…, 2, G, H/2): each half of the units' gate blocks."""
    gates, half = len(layer.blocks), layer.hidden // 2
    shape = array.shape[:-1]
    axes = len(shape)
    return array.reshape(*shape, gates, 2, half).swapaxes(axes, axes + 1)


def _half_cell(layer: _Layer, direction: int, part: int, dtype: np.dtype
               ) -> Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], None]:
    """Half ``part`` of the units of a :func:`_halves` LSTM's ``direction``, one step:
    ``step(step_input, h, h_next, c, c_next)`` with the half's step input (1, G, H/2) (a
    view of :func:`_split`), all of h (1, H), and the half's h', c and c' (1, H/2). Per
    unit, the operations of :func:`_lean_cell` on its half of the columns (the bits of the
    whole step where :func:`_halves_agree`)."""
    half = layer.hidden // 2
    matrix = layer.halves()[direction][part]
    gates = np.empty((1, 4 * half), dtype)
    blocks = gates.reshape(1, 4, half)
    rest = _lstm_rest(layer, gates, np.empty((1, half), dtype),
                      lambda names: gates[:, _span(layer, names, half)])
    dot, add = np.dot, np.add

    def step(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: np.ndarray,
             c_next: np.ndarray) -> None:
        dot(h, matrix, gates)
        add(blocks, step_input, blocks)
        rest(c, c_next, h_next)

    return step


def _span(layer: _Layer, names: str, size: int) -> slice:
    """The gate blocks ``names`` (adjacent in the runtime's order), as a slice of an axis
    that holds each block in ``size`` places."""
    first = min(layer.blocks[gate].start for gate in names) // layer.hidden
    after = max(layer.blocks[gate].stop for gate in names) // layer.hidden
    if after - first != len(names):
        raise ValueError(f"the gates {names} are not adjacent in the order {''.join(layer.blocks)}")
    return slice(first * size, after * size)


def _lstm_rest(layer: _Layer, gates: np.ndarray, tmp: np.ndarray,
               view: Callable[[str], np.ndarray]) -> Callable[[Any, Any, Any], None]:
    """The lean LSTM step after its gates' pre-activations are in ``gates`` (one
    :func:`_lean_cell` step, a :func:`_half_cell` half or a :func:`_half_rows_cell` half):
    ``view(names)`` is the part of ``gates`` that holds the adjacent gates ``names``;
    ``rest(c, c_next, h_next)`` writes c' into ``c_next`` (which may be ``c``), then h'."""
    unit = one(gates)
    sigmoids = view("ifo")
    i, f, o, g = (view(gate) for gate in "ifog")
    add, multiply, divide = np.add, np.multiply, np.divide
    exp, tanh = np.exp, np.tanh

    def rest(c: Any, c_next: Any, h_next: Any) -> None:
        exp(sigmoids, sigmoids)  # σ of i, f and o (their inputs hold −x)
        add(sigmoids, unit, sigmoids)
        divide(unit, sigmoids, sigmoids)
        tanh(g, g)
        multiply(c, f, c_next)
        multiply(i, g, tmp)
        add(c_next, tmp, c_next)
        tanh(c_next, h_next)
        multiply(h_next, o, h_next)

    return rest


def _lean_cell(layer: _Layer, dtype: np.dtype
               ) -> Callable[[np.ndarray, np.ndarray, np.ndarray, Any], None]:
    """One step of a :func:`_lean` layer at batch 1, its buffers made here:
    ``step(step_input, h, h_next, c)`` with the step's input projection ``(D, 1, G·H)``,
    ``h`` and the slot for h' ``(D, 1, H_out)``, an LSTM's cell state ``(D, 1, H)`` (updated
    in place; None for the others). An LSTM's or a GRU's ``h_next`` may be ``h`` itself (h
    is read before h' is written); a simple RNN's may not (its product reads h while it
    writes h').

    The operations of :func:`_lstm_step`, :func:`_gru_step` and :func:`_rnn_loop` on the
    same operands in the same order, so the same bits (the tests run both): ``np.dot`` of h
    by R per direction, its sum with the step's input, the activations. At batch 1 the
    product and the gates lie in one row per direction (:class:`_Scratch`'s gate-major
    layout is the runtime's gate order itself), so each operation is one ufunc call over a
    view made here, with no option to look up, each given its output as a positional
    argument (NumPy parses it faster than ``out=``): a step of a few hundred values costs
    about as many microseconds as it makes calls."""
    directions, hidden, width = layer.directions, layer.hidden, layer.recurrent.shape[-1]
    gates = np.empty((directions, 1, layer.width), dtype)
    tmp = np.empty((directions, 1, hidden), dtype)
    unit = one(gates)
    # Per direction: its recurrent weights (H_out, ·) and the row its product fills.
    first, first_row = layer.recurrent[0], gates[0, :, :width]
    second, second_row = (layer.recurrent[1], gates[1, :, :width]) if directions == 2 \
        else (None, None)
    dot, add, multiply, divide, exp = np.dot, np.add, np.multiply, np.divide, np.exp

    if layer.cell == "lstm":
        rest = _lstm_rest(layer, gates, tmp,
                          lambda names: gates[..., _span(layer, names, layer.hidden)])

        def lstm(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any) -> None:
            dot(h[0], first, first_row)
            if second is not None:
                dot(h[1], second, second_row)
            add(gates, step_input, gates)
            rest(c, c, h_next)

        return lstm
    if layer.cell == "gru":
        r, z, n = (gates[..., layer.blocks[gate]] for gate in "rzn")
        rz = gates[..., :2 * hidden]
        reset_before = layer.recurrent_n  # (D, H, H): R_n multiplies r∘h apart
        bias_n = layer.bias_n  # (D, 1, H): bR_n, inside r∘(…)
        rest_gru = _gru_rest(layer, n, z, tmp)

        def gru(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any) -> None:
            dot(h[0], first, first_row)
            if second is not None:
                dot(h[1], second, second_row)
            add(rz, step_input[..., :2 * hidden], rz)
            exp(rz, rz)
            add(rz, unit, rz)
            divide(unit, rz, rz)
            if reset_before is None:  # reset after: n = tanh(W_n x + bW_n + r∘(R_n h + bR_n))
                if bias_n is not None:
                    add(n, bias_n, n)
                multiply(n, r, n)
            else:                     # reset before: n = tanh(W_n x + bW_n + R_n (r∘h) + bR_n)
                multiply(r, h, tmp)
                for d in range(directions):
                    dot(tmp[d], reset_before[d], n[d])
            add(n, step_input[..., 2 * hidden:], n)
            rest_gru(h, h_next)

        return gru
    activation = layer.act_g.core

    def rnn(step_input: np.ndarray, h: np.ndarray, h_next: np.ndarray, c: Any) -> None:
        dot(h[0], first, h_next[0])
        if second is not None:
            dot(h[1], second, h_next[1])
        add(h_next, step_input, h_next)
        activation(h_next)

    return rnn


def _lean_loop(layer: _Layer, projected: np.ndarray, history: np.ndarray,
               cell: np.ndarray | None) -> None:
    """A :func:`_lean` layer's steps at batch 1 without lengths (see :func:`_steps`)."""
    step = _lean_cell(layer, projected.dtype)
    for step_input, h, h_next in zip(projected.transpose(1, 0, 2, 3), history[:-1], history[1:],
                                     strict=True):
        step(step_input, h, h_next, cell)


def _lean_step(layer: _Layer, dtype: np.dtype, h: np.ndarray, c: np.ndarray | None
               ) -> Callable[[np.ndarray], np.ndarray]:
    """A stream's step of a one-way :func:`_lean` layer at batch 1: a function of the
    layer's input (1, 1, I) that updates the state ``h`` (1, 1, H_out) and ``c`` (1, 1, H)
    in place and returns ``h``. The input projection runs through the padded product of
    :func:`_one_row`, its bias added after, as ``forward`` runs it; then
    :func:`_lean_cell`."""
    size, width = layer.input_weights[0].shape[0], layer.width
    weights, bias = layer.input_weights[0], layer.input_bias[0]
    source = np.zeros((2, size), dtype)  # the second row stays zero (see _one_row)
    result = np.empty((2, width), dtype)
    row, projected = source[:1].reshape(1, 1, size), result[:1]
    step_input = projected.reshape(1, 1, width)
    cell = _lean_cell(layer, dtype)
    copyto, dot, add = np.copyto, np.dot, np.add

    if not layer.cell.startswith("rnn"):
        def step(x: np.ndarray) -> np.ndarray:
            copyto(row, x)  # casts a stack's input from another part's dtype
            dot(source, weights, result)
            add(projected, bias, projected)
            cell(step_input, h, h, c)
            return h

        return step
    h_next = np.empty_like(h)

    def through(x: np.ndarray) -> np.ndarray:
        copyto(row, x)
        dot(source, weights, result)
        add(projected, bias, projected)
        cell(step_input, h, h_next, c)
        copyto(h, h_next)
        return h

    return through


class _StreamLayer:
    """One layer of a stream, planned at its creation: the prepared layer, its pieces (the
    batch rows each runs, as ``forward`` splits them by shape alone), a scratch per piece,
    and where its state lives (its row of the part's ``h`` and ``c``)."""

    __slots__ = ("bias", "cells", "dtype", "index", "layer", "loop", "padded", "part",
                 "pieces", "scratches", "weights")

    def __init__(self, layer: _Layer, part: int, index: int, batch: int, dtype: np.dtype,
                 cell: np.ndarray | None) -> None:
        self.layer, self.part, self.index, self.dtype = layer, part, index, dtype
        self.loop = _LOOPS[layer.cell]
        self.weights, self.bias = layer.input_weights[0], layer.input_bias[:, None]
        # A one-row input projection (one step of one sequence) runs as two: see _one_row.
        self.padded = (np.zeros((2, self.weights.shape[0]), dtype),
                       np.empty((2, self.weights.shape[1]), dtype))
        self.pieces = [rows for _, rows in _pieces(layer, batch, by_direction=False)]
        self.scratches = [_loop_scratch(layer, rows.stop - rows.start, dtype)
                          for rows in self.pieces]
        self.cells = [None if cell is None else cell[index:index + 1, rows]
                      for rows in self.pieces]


class Stream:
    """A network run chunk after chunk, its state carried between calls, planned once.

    Made by :meth:`rnnport.RNN.stream` and :meth:`rnnport.Stack.stream`; see there. A call
    ``stream(x_chunk)`` takes ``(batch_size, steps, I)`` (``(steps, batch_size, I)`` with
    ``time_major``), any ``steps ≥ 1``, and returns that chunk's outputs
    ``(batch_size, steps, H_out)`` (a new array each call). It runs what ``forward`` runs for
    those steps, with the same per-step code, on one thread: the weights prepared, the
    batch split into the pieces ``forward`` uses, and the buffers of every step allocated
    when the stream is made (the buffers that depend on ``steps``, at the first call with
    that many steps), so that a call checks the chunk's shape and dtype and computes.

    A chunk of one step (the online case) runs a function planned to its last view when
    the stream is made: each layer's input projection, then its step writing the new state
    over the carried one; at batch 1 a layer without options runs :func:`_lean_cell`, the
    step ``forward``'s time loop runs at batch 1, one ufunc call per operation (LSTM
    128→128: about 15 µs a call on the Xeon of ``make bench``, 6 of them its two products,
    where ONNX Runtime called directly takes about 20). A chunk with the stream's shape and
    dtype is taken as it is; anything else is checked, and cast where its dtype is another
    float.

    Exactness. This stream's chunks, concatenated, are ``forward``'s outputs over the whole
    sequence bit for bit, and its state ``forward``'s final state: the same operations on
    the same operands in the same order, a one-row input projection included
    (:func:`_one_row`), wherever the BLAS computes a row of a product the same whatever the
    rows around it (OpenBLAS does; the tests check every cell, option, dtype and chunk
    length). An engine's stream (``stream(engine="onnxruntime" | "torch")``,
    :class:`rnnport.formats.running.EngineStream`) gives that runtime's numbers instead,
    within its rounding of this stream's (float32: a few units in the last place, about
    1e-7; the tests allow 1e-5), and may differ in the last bits from that runtime's own
    ``forward`` over the whole sequence: a product of one chunk's rows can take other
    kernels than one of the whole sequence's (a one-row product in PyTorch, as in OpenBLAS
    without :func:`_one_row`).
    """

    def __init__(self, parts: Sequence[Network], batch_size: Any, *, state: Any = None,
                 time_major: bool = False, where: str = "RNN.stream",
                 stacked: bool = False) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ShapeError(f"{where}: batch_size={batch_size!r}; expected a whole number ≥ 1, "
                             "the sequences the stream serves at once (one per slot).")
        if not isinstance(time_major, (bool, np.bool_)):
            raise StateError(f"{where}: time_major={time_major!r}; expected True or False.")
        for number, network in enumerate(parts):
            spec = network.spec
            if spec.bidirectional or spec.reverse:
                what = "bidirectional" if spec.bidirectional else "a reverse network"
                which = f"part {number} of the stack is" if stacked else "the network is"
                raise UnsupportedFeatureError(
                    f"{where}: {which} {what}; expected a one-way network, because a stream "
                    "sees a sequence a chunk at a time and the backward direction starts at "
                    "the sequence's end. Run forward(x) over whole sequences, or stream a "
                    "one-way network.")
        self._parts = list(parts)
        self._where, self._stacked = where, stacked
        self.batch_size, self.time_major = int(batch_size), bool(time_major)
        self.dtype = compute_dtype(parts[0].dtype)
        self.input_size = parts[0].spec.input_size
        self.output_size = parts[-1].spec.output_size
        self._batch_axis = 1 if self.time_major else 0
        self._one_shape = ((1, self.batch_size, self.input_size) if self.time_major else
                           (self.batch_size, 1, self.input_size))
        self._h: list[np.ndarray] = []
        self._c: list[np.ndarray | None] = []
        for network in parts:
            spec, dtype = network.spec, compute_dtype(network.dtype)
            self._h.append(np.zeros((spec.num_layers, self.batch_size, spec.output_size), dtype))
            self._c.append(np.zeros((spec.num_layers, self.batch_size, spec.hidden_size), dtype)
                           if spec.cell == "lstm" else None)
        self._prepare()
        if state is not None:
            self.reset(state=state)

    def _prepare(self) -> None:
        """Everything a call reuses: here the NumPy layers, their weights prepared, and the
        steps of one-step chunks, every buffer and view made (an engine's stream builds its
        sessions instead)."""
        for network in self._parts:
            _check_size(network.spec, 1, self.batch_size)
        self._layers: list[_StreamLayer] = []
        for number, network in enumerate(self._parts):
            dtype = compute_dtype(network.dtype)
            self._layers.extend(
                _StreamLayer(layer, number, index, self.batch_size, dtype, self._c[number])
                for index, layer in enumerate(_prepared(network)))
        self._buffers: dict[int, list[tuple[list[np.ndarray], np.ndarray]]] = {}
        self._one = self._run_of_one([self._step_of_one(entry) for entry in self._layers])

    def _planned(self, steps: int) -> list[tuple[list[np.ndarray], np.ndarray]]:
        """Per layer, for chunks of ``steps``: each piece's input projections
        ``(1, steps, rows, G·H)`` and the h history ``(steps + 1, 1, batch, H_out)``."""
        for network in self._parts:
            _check_size(network.spec, steps, self.batch_size)
        if len(self._buffers) >= STREAM_KEPT_LENGTHS:
            del self._buffers[next(iter(self._buffers))]
        planned = [([np.empty((1, steps, rows.stop - rows.start, entry.layer.width), entry.dtype)
                     for rows in entry.pieces],
                    np.empty((steps + 1, 1, self.batch_size, entry.layer.out_size), entry.dtype))
                   for entry in self._layers]
        self._buffers[steps] = planned
        return planned

    def __call__(self, x_chunk: Any) -> np.ndarray:
        """The outputs of the chunk ``x_chunk`` (see the class); the state moves on."""
        x = x_chunk
        if type(x) is np.ndarray and x.shape == self._one_shape and x.dtype is self.dtype:
            return self._one(x)  # the common call: one step, planned to the last view
        if not (type(x) is np.ndarray and x.dtype == self.dtype and x.ndim == 3
                and x.shape[self._batch_axis] == self.batch_size
                and x.shape[2] == self.input_size and x.shape[1 - self._batch_axis] >= 1):
            x = self._checked(x)
        if x.shape == self._one_shape:
            return self._one(x)
        inputs = x if self.time_major else x.transpose(1, 0, 2)
        steps = inputs.shape[0]
        buffers = self._buffers.get(steps)
        if buffers is None:
            buffers = self._planned(steps)
        else:  # the most recently used length stays longest
            self._buffers[steps] = self._buffers.pop(steps)
        layer_input = np.ascontiguousarray(inputs)
        libraries = _one_thread()
        try:
            with _quiet():
                for entry, (projections, history) in zip(self._layers, buffers, strict=True):
                    layer_input = self._step(entry, layer_input, projections, history)
        finally:
            _put_back(libraries)
        return layer_input.copy() if self.time_major else layer_input.transpose(1, 0, 2).copy()

    def _step(self, entry: _StreamLayer, inputs: np.ndarray, projections: list[np.ndarray],
              history: np.ndarray) -> np.ndarray:
        """One layer over the chunk ``inputs`` (T, B, I), as ``forward``'s ``_run_layer``
        runs a one-way layer in one thread; returns its output (T, B, H_out), a view of
        ``history``."""
        if inputs.dtype != entry.dtype:  # a stack's parts of different dtypes
            inputs = inputs.astype(entry.dtype)
        steps, batch, width = inputs.shape
        h = self._h[entry.part]
        history[0, 0] = h[entry.index]
        for rows, scratch, cell, projected in zip(entry.pieces, entry.scratches, entry.cells,
                                                  projections, strict=True):
            count = rows.stop - rows.start
            source = inputs if count == batch else np.ascontiguousarray(inputs[:, rows])
            _blocked_product(source.reshape(steps * count, width), entry.weights,
                             projected.reshape(steps * count, entry.layer.width), 1,
                             entry.padded if steps * count == 1 else None)
            projected += entry.bias
            entry.loop(entry.layer, projected, history[:, :, rows], cell, None, scratch)
        h[entry.index] = history[-1, 0]
        return history[1:].reshape(steps, batch, entry.layer.out_size)

    def _run_of_one(self, steps: list[Callable[[np.ndarray], np.ndarray]]
                    ) -> Callable[[np.ndarray], np.ndarray]:
        """A call of one step: the layers' ``steps`` in turn, on one BLAS thread, with
        overflow and underflow ignored as in :func:`_quiet`; returns a new array in the
        chunk's layout."""
        body: Callable[[np.ndarray], np.ndarray]
        if len(steps) == 1:
            body = steps[0]
        else:
            def body(inputs: np.ndarray) -> np.ndarray:
                for step in steps:
                    inputs = step(inputs)
                return inputs

        # np.errstate as a decorator: its settings made once, not at every call.
        quiet = np.errstate(over="ignore", under="ignore")(body)
        one_thread, put_back = _one_thread, _put_back
        _blas()  # found now, not at the first call
        if self.batch_size > 1 and not self.time_major:  # (B, 1, ·) as (1, B, ·)
            def turned(x: np.ndarray) -> np.ndarray:
                libraries = one_thread()
                try:
                    y = quiet(x.transpose(1, 0, 2))
                finally:
                    put_back(libraries)
                return y.transpose(1, 0, 2).copy()

            return turned

        def run(x: np.ndarray) -> np.ndarray:
            libraries = one_thread()
            try:
                y = quiet(x)
            finally:
                put_back(libraries)
            return y.copy()

        return run

    def _step_of_one(self, entry: _StreamLayer) -> Callable[[np.ndarray], np.ndarray]:
        """What :meth:`_step` runs for a chunk of one step, every view made here: a function
        of the layer's input (1, B, I) that returns its output (1, B, H_out), a view of the
        carried h. The same operations on the same operands in the same order, hence the
        same bits. At batch 1, a layer without options runs :func:`_lean_step`; an LSTM or
        GRU step writes h' over h (each reads h before it writes h'); a simple RNN's product
        reads h while it writes h', so its h' goes through ``history``."""
        layer, dtype, weights, bias = entry.layer, entry.dtype, entry.weights, entry.bias
        h = self._h[entry.part]
        c = self._c[entry.part]
        batch = self.batch_size
        if batch == 1 and _lean(layer):
            return _lean_step(layer, dtype, h[entry.index:entry.index + 1],
                              None if c is None else c[entry.index:entry.index + 1])
        h_state = h[entry.index:entry.index + 1]  # (1, B, H_out)
        through = layer.cell.startswith("rnn")  # a simple RNN: h and h' in history
        history = np.empty((2, 1, batch, layer.out_size), dtype)
        h_first, out = history[0], history[1]
        source, result = entry.padded
        width = source.shape[1]
        source_row = source[:1].reshape(1, 1, width)
        runs: list[Callable[[np.ndarray], None]] = []
        for rows, scratch, cell in zip(entry.pieces, entry.scratches, entry.cells, strict=True):
            count = rows.stop - rows.start
            projected = np.empty((1, 1, count, layer.width), dtype)
            flat = projected.reshape(count, layer.width)
            run_step: Callable[[], None]
            if scratch is None:  # a simple RNN
                run_step = functools.partial(entry.loop, layer, projected, history[:, :, rows],
                                             None, None, None)
            elif isinstance(scratch, _Units):
                run_step = _unit_one(scratch, projected, h_state[:, rows], cell)
            else:
                parts, size = scratch.split
                step_input = projected.reshape(1, 1, count, layer.width // (parts * size), parts,
                                               size).transpose(1, 0, 3, 2, 4, 5)[0]
                h_piece, views = h_state[:, rows], scratch.views(count)
                make = _lstm_step if cell is not None else _gru_step
                run_step = functools.partial(make(layer, scratch, views), step_input, h_piece,
                                             h_piece, cell)
            runs.append(self._piece_of_one(rows, count, batch, flat, projected,
                                           (source_row, source, result), weights, bias,
                                           run_step))
        def run(inputs: np.ndarray) -> np.ndarray:
            if inputs.dtype != dtype:  # a stack's parts of different dtypes
                inputs = inputs.astype(dtype)
            if through:
                np.copyto(h_first, h_state)
            for piece in runs:
                piece(inputs)
            if through:
                np.copyto(h_state, out)
            return h_state

        return run

    @staticmethod
    def _piece_of_one(rows: slice, count: int, batch: int, flat: np.ndarray,
                      projected: np.ndarray, padded: tuple[np.ndarray, np.ndarray, np.ndarray],
                      weights: np.ndarray, bias: np.ndarray,
                      run_step: Callable[[], None]) -> Callable[[np.ndarray], None]:
        """One piece of a layer at one step: its input projection (one row through the
        padded product of :func:`_one_row`, the bias added on the way out), then its step.
        ``padded``: the first row of the padded input as (1, 1, I), the padded input and
        the product."""
        source_row, source, result = padded
        piece: Callable[[np.ndarray], None]
        if count == 1:
            result_row = result[:1].reshape(projected.shape)

            def piece(inputs: np.ndarray) -> None:
                np.copyto(source_row, inputs if count == batch else inputs[:, rows])
                np.matmul(source, weights, out=result)
                np.add(result_row, bias, out=projected)
                run_step()
        else:
            width = source.shape[1]

            def piece(inputs: np.ndarray) -> None:
                rows_in = inputs if count == batch else np.ascontiguousarray(inputs[:, rows])
                _blocked_product(rows_in.reshape(count, width), weights, flat, 1)
                np.add(projected, bias, out=projected)
                run_step()
        return piece

    def _checked(self, x: Any) -> np.ndarray:
        """``x_chunk`` as an array of the stream's dtype, or the error that says why not."""
        where = "stream(x_chunk)"
        batch, size = self.batch_size, self.input_size
        layout, expected = (("(steps, batch, input)", f"(steps ≥ 1, {batch}, {size})")
                            if self.time_major else
                            ("(batch, steps, input)", f"({batch}, steps ≥ 1, {size})"))
        try:
            array = np.asarray(x)
        except (ValueError, TypeError) as error:  # a ragged nesting of lists
            raise ShapeError(f"{where}: x_chunk cannot be an array "
                             f"({str(error).splitlines()[0]}); expected {layout} = {expected} "
                             "numbers.") from None
        if array.dtype.kind not in "fiu":
            raise DTypeError(f"{where}: x_chunk has dtype {array.dtype}; expected real numbers "
                             f"(the stream computes in {self.dtype}). Cast it with "
                             f"x_chunk.astype(numpy.{self.dtype}).")
        if (array.ndim != 3 or array.shape[self._batch_axis] != batch
                or array.shape[2] != size or array.shape[1 - self._batch_axis] < 1):
            hint = ""
            if array.ndim == 2 and array.shape[1] == size and batch == 1:
                hint = " Add a batch axis with x_chunk[None] (one stream, batch_size=1)."
            elif array.ndim == 3 and array.shape[2] == size \
                    and array.shape[self._batch_axis] != batch:
                hint = (f" A stream serves the same {batch} slots at every call: pass a chunk "
                        "for each (reset a slot when a new sequence starts in it), or make a "
                        f"stream with batch_size={array.shape[self._batch_axis]}.")
            elif array.ndim == 3 and array.shape[2] == size:
                hint = " A chunk holds at least one step."
            raise ShapeError(f"{where}: x_chunk has shape {array.shape}; expected {layout} = "
                             f"{expected} because the stream was made with batch_size={batch} "
                             f"for a network of input_size {size}.{hint}")
        return array.astype(self.dtype, copy=False)

    @property
    def state(self) -> Any:
        """The carried state, a copy in ``forward``'s layout: an LSTM's ``(h, c)`` with
        ``h: (L, batch_size, H_out)`` and ``c: (L, batch_size, H)``, else ``h`` alone; a
        list of one such entry per part for a stack."""
        states = [h.copy() if c is None else (h.copy(), c.copy())
                  for h, c in zip(self._h, self._c, strict=True)]
        return states if self._stacked else states[0]

    def reset(self, rows: Any = None, state: Any = None) -> None:
        """Start over: the state of ``rows`` (an int, a sequence of ints or a boolean mask of
        ``batch_size``; None for every row) set to zeros, or to ``state`` in ``forward``'s
        layout with a batch axis of those rows (a list of one per part for a stack, each
        entry None for zeros). The other rows go on where they were."""
        where = "stream.reset"
        selected, count = self._rows(rows, where)
        parts = len(self._parts)
        if not self._stacked:
            entries: Sequence[Any] = [state]
        elif state is None:
            entries = [None] * parts
        elif not isinstance(state, Sequence) or isinstance(state, (str, bytes)) \
                or len(state) != parts:
            got = len(state) if isinstance(state, Sequence) else type(state).__name__
            raise StateError(f"{where}: state must be a list with one entry per part ({parts}), "
                             f"got {got}. Pass None (or None for a part) for zero states.")
        else:
            entries = list(state)
        checked = [None if entry is None else
                   _check_state(entry, network.spec, count, h.dtype, where)
                   for entry, network, h in zip(entries, self._parts, self._h, strict=True)]
        for found, h, c in zip(checked, self._h, self._c, strict=True):  # all checked first
            if found is None:
                h[:, selected] = 0
                if c is not None:
                    c[:, selected] = 0
            else:
                h[:, selected] = found[0]
                if c is not None:
                    c[:, selected] = found[1]

    def _rows(self, rows: Any, where: str) -> tuple[Any, int]:
        """``rows`` as an index of the batch axis, and how many rows it selects."""
        batch = self.batch_size
        if rows is None:
            return slice(None), batch
        array = np.asarray(rows)
        if array.dtype == np.bool_:
            if array.shape != (batch,):
                raise StateError(f"{where}: rows is a boolean mask of shape {array.shape}; "
                                 f"expected ({batch},), one flag per slot of the stream.")
            array = np.flatnonzero(array)
        elif array.ndim > 1 or not whole_numbers(array):
            raise StateError(f"{where}: rows={rows!r}; expected a slot number, a sequence of "
                             f"them, or a boolean mask of {batch} flags.")
        array = array.astype(np.int64).reshape(-1)
        bad = array[(array < 0) | (array >= batch)]
        if bad.size:
            raise StateError(f"{where}: rows holds {bad[0]}; expected slots 0 ≤ row < {batch} "
                             f"(the stream's batch_size).")
        if np.unique(array).size != array.size:
            raise StateError(f"{where}: rows holds a slot twice ({array.tolist()}); expected "
                             "each slot once.")
        return array, array.size

    def __repr__(self) -> str:
        inner = " → ".join(network.spec.describe() for network in self._parts)
        return f"<rnnport stream of {inner}, batch_size={self.batch_size}, {self.dtype}>"
