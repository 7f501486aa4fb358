"""The canonical model: ``RNN`` (one uniform network) and ``Stack`` (networks in sequence).

``RNN`` holds a :class:`~rnnport.spec.Spec` and, for every layer and direction, the
parameters named and shaped as in :mod:`rnnport.spec` — cuDNN gate order (LSTM
``i f g o``, GRU ``r z n``) and orientation (``y = W·x``, matrices ``(G·H, in)``), both
biases. It is immutable (arrays are read-only), validated on construction, and equality is
exact: same spec, same dtype, same bits.

``Stack`` chains networks that cannot be one ``RNN`` because their cell, size or variant
differ (a Keras ``LSTM(128) → LSTM(64)``, an ``LSTM → GRU``). :func:`stack` builds the
simplest form: adjacent compatible parts merge, and a single part comes back as an ``RNN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Union

import numpy as np

from . import budget
from .copying import copy_into, writable_view
from .errors import DTypeError, FormatError, ShapeError, SpecError, StackSpecError, StateError
from .spec import Spec

if TYPE_CHECKING:
    from .runtime import Stream

__all__ = ["RNN", "Model", "Stack", "install_engines", "stack"]

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
DIRECTION_NAMES = ("forward", "backward")

Params = Mapping[str, np.ndarray]

# ``forward`` with an engine other than NumPy: the format registry, which knows the engines
# (the formats declare them) and sits above this module, installs its dispatcher here.
_run_engine: Callable[..., tuple[np.ndarray, Any]] | None = None


# ``stream`` with an engine other than NumPy: installed beside ``_run_engine``.
_stream_engine: Callable[..., Stream] | None = None


def install_engines(dispatch: Callable[..., tuple[np.ndarray, Any]],
                    streams: Callable[..., Stream] | None = None) -> None:
    """Let ``forward(engine=...)`` run the engines ``dispatch(network, x, state, lengths,
    time_major, engine=, device=)`` knows, and ``stream(engine=...)`` stream them through
    ``streams(parts, batch_size, state=, time_major=, engine=, device=, where=, stacked=)``."""
    global _run_engine, _stream_engine
    _run_engine = dispatch
    if streams is not None:
        _stream_engine = streams


def _numpy_on_cpu(engine: Any, device: Any) -> bool:
    """Whether ``engine=`` and ``device=`` ask for rnnport's own NumPy runtime."""
    return isinstance(engine, str) and engine == "numpy" and (
        device is None or (isinstance(device, str) and device.lower() == "cpu"))


def _stream(parts: Sequence[RNN], batch_size: Any, state: Any, time_major: bool, engine: Any,
            device: Any, where: str, stacked: bool) -> Stream:
    """``RNN.stream`` and ``Stack.stream``: NumPy's stream, or the installed engines'."""
    from .runtime import Stream

    if _numpy_on_cpu(engine, device):
        return Stream(parts, batch_size, state=state, time_major=time_major, where=where,
                      stacked=stacked)
    if _stream_engine is None:
        raise FormatError(f"{where}(engine={engine!r}): no engines are installed; "
                          "import rnnport first.")
    return _stream_engine(parts, batch_size, state=state, time_major=time_major, engine=engine,
                          device=device, where=where, stacked=stacked)


def where(layer: int, direction: int, name: str | None = None) -> str:
    """``layer 1, backward, weight_ih`` — the location part of messages."""
    text = f"layer {layer}, {DIRECTION_NAMES[direction]}"
    return f"{text}, {name}" if name else text


def as_array(value: Any, location: str) -> np.ndarray:
    """``np.asarray(value)``, or a ShapeError naming ``location`` for nested lists of
    unequal lengths (which NumPy refuses)."""
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as error:
        raise ShapeError(f"{location}: not one rectangular array ({error}); expected equal "
                         "lengths on every axis.") from None


def as_float_array(value: Any, location: str) -> np.ndarray:
    """``value`` as a NumPy array of a float dtype, or a DTypeError naming ``location``."""
    array = as_array(value, location)
    if array.dtype not in FLOAT_DTYPES:
        kind = {"i": "integer", "u": "unsigned integer", "b": "boolean", "c": "complex",
                "O": "object", "U": "string", "V": "raw (e.g. bfloat16)"}.get(array.dtype.kind,
                                                                              "non-float")
        raise DTypeError(
            f"{location}: dtype {array.dtype} ({kind}); expected float16, float32 or float64 "
            "(recurrent weights are real numbers kept in their own precision). "
            "Cast the array first, e.g. array.astype(numpy.float32)."
        )
    return array


class RNN:
    """A uniform recurrent network in canonical (cuDNN/PyTorch) layout.

    ``params[layer][direction]`` maps canonical names to arrays (see :mod:`rnnport.spec`).
    Arrays are copied unless ``copy=False``: readers pass views of their source where its
    layout agrees (a cuDNN buffer's slices, a Keras kernel's transpose), like
    ``numpy.asarray``. The model's arrays are read-only either way.
    """

    __slots__ = ("__weakref__", "_dtype", "_owners", "_params", "_spec")
    _spec: Spec
    _params: tuple[tuple[Params, ...], ...]
    _dtype: np.dtype
    _owners: tuple[np.ndarray, ...]  # set by convert() on its own intermediate (exported())

    def __init__(
        self, spec: Spec, params: Sequence[Sequence[Mapping[str, Any]]], *, copy: bool = True
    ) -> None:
        if not isinstance(spec, Spec):
            raise SpecError(f"RNN: spec must be an rnnport.Spec, got {type(spec).__name__}.")
        validated = _validated(spec, params, copy=copy)
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_params", validated)
        object.__setattr__(self, "_dtype", validated[0][0]["weight_ih"].dtype)
        # Set by convert() on its own intermediate model (see exported()).
        object.__setattr__(self, "_owners", ())

    # -- construction helpers ------------------------------------------------------------

    @classmethod
    def random(
        cls, spec: Spec, *, seed: int | None = 0, dtype: Any = np.float32, scale: float | None = None
    ) -> RNN:
        """Random, distinct weights and biases (uniform ±1/√H unless ``scale`` is given)."""
        if spec.num_params() > budget.allowance("elements"):
            raise budget.exceeded("RNN.random", f"{spec.describe()} has {spec.num_params():,} "
                                  "parameters to draw in memory", "elements",
                                  needed=spec.num_params())
        rng = np.random.default_rng(seed)
        bound = scale if scale is not None else 1.0 / math.sqrt(spec.hidden_size)
        params = [
            [
                {name: rng.uniform(-bound, bound, shape).astype(dtype)
                 for name, shape in spec.param_shapes(layer).items()}
                for _ in range(spec.num_directions)
            ]
            for layer in range(spec.num_layers)
        ]
        return cls(spec, params, copy=False)

    # -- access ----------------------------------------------------------------------

    @property
    def spec(self) -> Spec:
        return self._spec

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def params(self) -> tuple[tuple[Params, ...], ...]:
        """``params[layer][direction][name]`` → read-only array."""
        return self._params

    def parameter(self, layer: int, direction: int, name: str) -> np.ndarray:
        return self._params[layer][direction][name]

    def arrays(self) -> Iterator[tuple[int, int, str, np.ndarray]]:
        """Every parameter as ``(layer, direction, name, array)``, in storage order."""
        for layer, directions in enumerate(self._params):
            for direction, named in enumerate(directions):
                for name, array in named.items():
                    yield layer, direction, name, array

    def num_params(self) -> int:
        """Canonical count: both biases, projection, peepholes (``spec.num_params()``)."""
        return self._spec.num_params()

    @property
    def input_size(self) -> int:
        return self._spec.input_size

    @property
    def output_size(self) -> int:
        """Width of ``forward``'s ``y``: ``D·H_out``."""
        return self._spec.num_directions * self._spec.output_size

    # -- derived networks --------------------------------------------------------------

    def astype(self, dtype: Any) -> RNN:
        """The same network with every parameter cast to ``dtype`` (float16/32/64)."""
        target = np.dtype(dtype)
        if target not in FLOAT_DTYPES:
            raise DTypeError(f"RNN.astype: {target} is not float16, float32 or float64.")
        return RNN(self._spec, [[{k: v.astype(target) for k, v in named.items()}
                                 for named in directions] for directions in self._params],
                   copy=False)

    def layers(self) -> list[RNN]:
        """One single-layer ``RNN`` per layer (sharing this network's read-only arrays)."""
        out = []
        for layer, directions in enumerate(self._params):
            spec = self._spec.replace(num_layers=1, input_size=self._spec.layer_input_size(layer))
            out.append(RNN(spec, [list(directions)], copy=False))
        return out

    # -- computation -------------------------------------------------------------------

    def forward(
        self,
        x: Any,
        state: Any = None,
        lengths: Any = None,
        time_major: bool = False,
        *,
        engine: str = "numpy",
        device: Any = None,
        threads: int | None = None,
    ) -> tuple[np.ndarray, Any]:
        """Run the network on ``x``.

        ``x``: ``(batch, time, I)``, or ``(time, batch, I)`` with ``time_major=True``.
        Returns ``(y, state)``: ``y`` is ``(batch, time, D·H_out)`` in the same major order,
        the backward half in original time order; ``state`` is ``(h, c)`` for LSTM with
        ``h: (L·D, batch, H_out)`` and ``c: (L·D, batch, H)``, else ``h`` alone; index
        ``layer·D + direction``. ``lengths`` ``(batch,)``: sequence ``b`` is valid for its
        first ``lengths[b]`` steps — outputs past it are zero, the final state is the state
        at the last valid step, and the backward direction starts there.

        Math runs in float32 for float16/float32 weights, float64 for float64 weights.
        ``np.seterr`` applies as usual to invalid operations and division by zero (an
        infinite input raises under ``invalid="raise"``); overflow and underflow are
        ignored throughout, as ``exp`` overflows and underflows in saturated gates in
        normal work, giving the gates' exact limits.

        ``engine``: ``"numpy"`` (rnnport's own runtime), an engine a format declares
        (``rnnport.formats.engines()`` lists them; the network is written into it once and
        kept), or ``"auto"`` (the fastest installed engine for this network and input
        shape, timed on the first such call). ``device`` is for engines that run elsewhere
        than the CPU (e.g. ``"cuda"``). Every engine returns the same structure, shapes and
        dtypes; a network an engine cannot compute exactly runs in NumPy, with an
        ``EngineFallbackWarning`` saying why.

        ``threads`` (``engine="numpy"`` on the CPU only; other engines, and the
        NumPy fallback of another engine, keep their own settings and ignore it): the
        threads, one core each, the call may use. Every product runs on one BLAS thread
        (the per-step products are small and latency-bound, and a product split over BLAS
        threads can change its last bits). ``None``: rnnport chooses, within the BLAS's own
        count — a large enough layer runs its two directions (or, with one direction and a
        large batch, two halves of the batch) at once, or else its two directions' input
        projections; other input projections run in blocks of rows (fixed by their shape)
        in as many threads as the BLAS's count. ``1``: one thread throughout, the pieces
        and blocks in turn. ``n ≥ 2``: pieces at once as for ``None``, and the other input
        projections' blocks in ``n`` threads. The numbers do not depend on ``threads``. The
        BLAS's count is set through ``threadpoolctl`` (a required dependency); where it
        cannot be imported ``threads`` has no effect and everything runs as the BLAS is
        configured (e.g. ``OPENBLAS_NUM_THREADS``), in one Python thread. That count is
        process-wide: it is switched during the call and put back after it.
        """
        if _numpy_on_cpu(engine, device):
            from .runtime import run

            return run(self, x, state=state, lengths=lengths, time_major=time_major,
                       threads=threads)
        if _run_engine is None:
            raise FormatError(f"forward(engine={engine!r}): no engines are installed; "
                              "import rnnport first.")
        return _run_engine(self, x, state, lengths, time_major, engine=engine, device=device)

    # -- value semantics --------------------------------------------------------------

    def stream(self, batch_size: int = 1, *, state: Any = None, time_major: bool = False,
               engine: str = "numpy", device: Any = None) -> Stream:
        """A stateful stream of this network: it is planned once, then takes chunk after
        chunk, carrying the state between calls (online use: a frame or a few at a time).

        ``stream = rnn.stream(batch_size=1)``; ``y_chunk = stream(x_chunk)`` takes
        ``(batch_size, steps, I)`` (``(steps, batch_size, I)`` with ``time_major=True``), any
        ``steps ≥ 1``, and returns ``(batch_size, steps, H_out)`` in the same major order.
        ``stream.state`` is the carried state, a copy in ``forward``'s layout (``(h, c)``
        for an LSTM, else ``h``); ``state=`` starts from one. ``stream.reset()`` zeros it;
        ``stream.reset(rows, state=None)`` restarts chosen slots of the batch (zeros, or
        ``state`` with a batch axis of those rows) while the others go on.

        The chunks' outputs, concatenated, are ``forward``'s over the whole sequence, and
        the state after the last chunk is ``forward``'s final state: bit for bit where
        the BLAS computes each row of a product the same whatever the rows around it
        (OpenBLAS does; the tests check every cell and option), as the per-step code is
        ``forward``'s. A call checks only the chunk's shape and dtype (a float dtype other
        than the network's is cast), runs on one thread, and reuses the buffers planned for
        its number of steps. A bidirectional or reverse network cannot stream: its
        backward direction starts at the sequence's end (``UnsupportedFeatureError``).

        ``engine``/``device``: as for ``forward`` (not ``"auto"``). An engine's stream runs
        the session or module ``forward`` builds for the network, its inputs, outputs and
        carried state in buffers planned once (ONNX Runtime through I/O binding): the same
        API, and the NumPy stream's numbers within the engine's rounding. A network the
        engine cannot compute exactly streams in NumPy, with an ``EngineFallbackWarning``.
        """
        return _stream([self], batch_size, state, time_major, engine, device, "RNN.stream",
                       False)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("rnnport.RNN is immutable; build a new one instead")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RNN):
            return NotImplemented
        if self._spec != other._spec or self._dtype != other._dtype:
            return False
        return all(_same_bits(a, b) for (*_, a), (*_, b) in zip(self.arrays(), other.arrays(), strict=False))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<rnnport.RNN {self._spec.describe()}, {self._dtype}, {self.num_params():,} params>"


def one_network(model: Model, where: str) -> RNN:
    """``model`` when it is one network, not a :class:`Stack` of several."""
    if not isinstance(model, RNN):
        raise FormatError(f"{where}: the arrays read as a stack of {len(model.parts)} networks "
                          "that differ; expected one network.")
    return model


def shared_with_caller(model: Model, source: Any) -> None:
    """Mark ``model`` as :func:`rnnport.convert`'s own intermediate, read from ``source``:
    writers may hand out writable views of the memory of the arrays the caller passed
    (:func:`exported`), never of anything else."""
    owners = tuple(_writable_arrays(source))
    for part in model.parts if isinstance(model, Stack) else (model,):
        object.__setattr__(part, "_owners", owners)


def _writable_arrays(source: Any, depth: int = 0) -> Iterator[np.ndarray]:
    """The writable arrays owning their memory in ``source`` (an array, or lists, tuples
    and dicts of them, as Keras weights and state_dicts come)."""
    if isinstance(source, np.ndarray):
        if source.base is None and source.flags.writeable:
            yield source
    elif depth < 3 and isinstance(source, (list, tuple)):
        for item in source:
            yield from _writable_arrays(item, depth + 1)
    elif depth < 3 and isinstance(source, Mapping):
        for item in source.values():
            yield from _writable_arrays(item, depth + 1)


def exported(model: RNN, array: np.ndarray) -> np.ndarray:
    """``array`` (one of ``model``'s) as a writer hands it out: a new C-contiguous array,
    or, for :func:`rnnport.convert`'s intermediate model whose array is a C-contiguous view
    of an array the caller passed, a writable view of that memory. No one gets write access
    to memory a model holds for itself or to arrays the caller gave as read-only."""
    if model._owners and array.flags.c_contiguous:
        view = writable_view(array, model._owners)
        if view is not None:
            return view
    # C order, as every framework stores it (some savers copy raw memory, not values).
    copy = np.empty(array.shape, dtype=array.dtype)
    copy_into(copy, array)
    return copy


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    unsigned = np.dtype(f"u{a.dtype.itemsize}")
    return bool(np.array_equal(a.view(unsigned), b.view(unsigned)))


def _validated(
    spec: Spec, params: Sequence[Sequence[Mapping[str, Any]]], *, copy: bool
) -> tuple[tuple[Params, ...], ...]:
    """Check every array against the spec; collect all problems and raise once."""
    problems: list[str] = []
    if not isinstance(params, Sequence) or len(params) != spec.num_layers:
        found = len(params) if isinstance(params, Sequence) else type(params).__name__
        raise ShapeError(f"RNN params: expected one entry per layer ({spec.num_layers}), "
                         f"got {found}.")
    dtypes: dict[np.dtype, str] = {}
    out: list[tuple[Params, ...]] = []
    for layer, directions in enumerate(params):
        if not isinstance(directions, Sequence) or len(directions) != spec.num_directions:
            got = len(directions) if isinstance(directions, Sequence) else type(directions).__name__
            problems.append(f"layer {layer}: expected {spec.num_directions} direction(s), got {got}")
            continue
        expected = spec.param_shapes(layer)
        layer_out = []
        for direction, named in enumerate(directions):
            names = set(named)
            for missing in [n for n in expected if n not in names]:
                problems.append(f"{where(layer, direction, missing)}: missing "
                                f"({spec.describe(article=True)} has {', '.join(expected)})")
            for extra in sorted(names - set(expected)):
                problems.append(f"{where(layer, direction, extra)}: not a parameter of "
                                f"{spec.describe(article=True)} (expected {', '.join(expected)})")
            arrays = {}
            for name, shape in expected.items():
                if name not in named:
                    continue
                array = as_float_array(named[name], where(layer, direction, name))
                dtypes.setdefault(array.dtype, where(layer, direction, name))
                if array.shape != shape:
                    problems.append(f"{where(layer, direction, name)}: expected shape {shape} "
                                    f"({_why(spec, layer, name)}), got {array.shape}")
                    continue
                # Without copy the arrays are taken as they lie (a transposed view stays one),
                # through a view of their own, so that marking them read-only leaves the
                # caller's arrays as they were.
                array = np.array(array, order="C", copy=True) if copy else array.view()
                array.flags.writeable = False
                arrays[name] = array
            layer_out.append(MappingProxyType(arrays))
        out.append(tuple(layer_out))
    if problems:
        raise ShapeError(problems, hint=f"The spec is {spec!r}.")
    if len(dtypes) > 1:
        mixed = ", ".join(f"{d} (e.g. {loc})" for d, loc in dtypes.items())
        raise DTypeError(f"RNN params: mixed dtypes {mixed}; expected one dtype for the whole "
                         "network. Cast them to one, e.g. with .astype(numpy.float32).")
    return tuple(out)


def _why(spec: Spec, layer: int, name: str) -> str:
    gates = f"{spec.gate_count} gates × hidden {spec.hidden_size}"
    width = spec.layer_input_size(layer)
    source = ("input_size" if layer == 0 else
              f"{spec.num_directions} direction(s) × {spec.output_size} from the layer below")
    return {
        "weight_ih": f"{gates}, input {width} = {source}",
        "weight_hh": f"{gates}, recurrent input {spec.output_size}",
        "bias_ih": gates,
        "bias_hh": gates,
        "weight_hr": f"proj_size {spec.proj_size} × hidden {spec.hidden_size}",
        "bias_hr": f"proj_size {spec.proj_size}",
        "weight_peephole": f"i, f, o peepholes × hidden {spec.hidden_size}",
        "weight_ln": f"i, f, g, o layer-norm coefficients × hidden {spec.hidden_size}",
    }[name]


class Stack:
    """Recurrent networks applied one after another; each part's input is the previous ``y``.

    ``forward`` takes and returns ``state`` as a list with one entry per part, each in
    that part's ``RNN.forward`` form.
    """

    __slots__ = ("_parts",)
    _parts: tuple[RNN, ...]

    def __init__(self, parts: Sequence[RNN]) -> None:
        parts = tuple(parts)
        if not parts:
            raise ShapeError("Stack: expected at least one network, got none.")
        problems = []
        for index, part in enumerate(parts):
            if not isinstance(part, RNN):
                raise SpecError(f"Stack part {index}: expected an rnnport.RNN, "
                                f"got {type(part).__name__}.")
            if index and part.input_size != parts[index - 1].output_size:
                previous = parts[index - 1]
                problems.append(
                    f"part {index} ({part.spec.describe()}): input_size {part.input_size}; "
                    f"expected {previous.output_size} (the output width of part {index - 1}, "
                    f"{previous.spec.describe()})")
        if problems:
            raise ShapeError(problems, hint="Each part must take the previous part's output.")
        dtypes = {part.dtype for part in parts}
        if len(dtypes) > 1:
            raise DTypeError(f"Stack: parts have dtypes {sorted(map(str, dtypes))}; expected one "
                             "dtype. Cast the parts with RNN.astype first.")
        object.__setattr__(self, "_parts", parts)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("rnnport.Stack is immutable; build a new one instead")

    @property
    def parts(self) -> tuple[RNN, ...]:
        return self._parts

    @property
    def specs(self) -> tuple[Spec, ...]:
        return tuple(part.spec for part in self._parts)

    @property
    def spec(self) -> Spec:
        """A Stack has no single Spec; this raises with a pointer to ``specs``."""
        raise StackSpecError(
            f"Stack.spec: this stack's parts differ ({'; '.join(s.describe() for s in self.specs)}),"
            " so there is no single Spec. Use stack.specs or stack.parts[i].spec.")

    @property
    def dtype(self) -> np.dtype:
        return self._parts[0].dtype

    @property
    def input_size(self) -> int:
        return self._parts[0].input_size

    @property
    def output_size(self) -> int:
        return self._parts[-1].output_size

    def num_params(self) -> int:
        return sum(part.num_params() for part in self._parts)

    def layers(self) -> list[RNN]:
        return [layer for part in self._parts for layer in part.layers()]

    def astype(self, dtype: Any) -> Stack:
        return Stack([part.astype(dtype) for part in self._parts])

    def forward(
        self, x: Any, state: Sequence[Any] | None = None, lengths: Any = None,
        time_major: bool = False, *, engine: str = "numpy", device: Any = None,
        threads: int | None = None,
    ) -> tuple[np.ndarray, list[Any]]:
        """Like :meth:`RNN.forward`; ``state`` is a list with one entry per part (or None).
        Each part runs in ``engine`` on ``device`` (``"auto"`` chooses per part), with
        ``threads`` for the parts that run in NumPy."""
        if state is not None and (not isinstance(state, Sequence) or len(state) != len(self._parts)):
            got = len(state) if isinstance(state, Sequence) else type(state).__name__
            raise StateError(f"Stack.forward: state must be a list with one entry per part "
                             f"({len(self._parts)}), got {got}. Pass None for zero states.")
        states = []
        y = x
        for index, part in enumerate(self._parts):
            y, final = part.forward(y, None if state is None else state[index], lengths,
                                    time_major, engine=engine, device=device, threads=threads)
            states.append(final)
        return y, states

    def stream(self, batch_size: int = 1, *, state: Sequence[Any] | None = None,
               time_major: bool = False, engine: str = "numpy", device: Any = None) -> Stream:
        """Like :meth:`RNN.stream`; ``state`` (and ``stream.state``) is a list with one entry
        per part, and every part must be one-way. With an engine, each part streams in it
        (or, where it cannot compute that part exactly, in NumPy)."""
        return _stream(self._parts, batch_size, state, time_major, engine, device,
                       "Stack.stream", True)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Stack):
            return NotImplemented
        return len(self._parts) == len(other._parts) and all(
            a == b for a, b in zip(self._parts, other._parts, strict=False))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        inner = " → ".join(part.spec.describe() for part in self._parts)
        return f"<rnnport.Stack {inner}, {self.dtype}, {self.num_params():,} params>"


Model = Union[RNN, Stack]


def _mergeable(lower: RNN, upper: RNN) -> bool:
    a, b = lower.spec, upper.spec
    return (a.replace(num_layers=1, input_size=1) == b.replace(num_layers=1, input_size=1)
            and b.input_size == lower.output_size and lower.dtype == upper.dtype)


def stack(parts: Sequence[Model]) -> Model:
    """The simplest model for ``parts`` in sequence: compatible neighbours merge into one
    multi-layer ``RNN``; one part left gives an ``RNN``, several a ``Stack``."""
    flat: list[RNN] = []
    for part in parts:
        flat.extend(part.parts if isinstance(part, Stack) else [part])
    if not flat:
        raise ShapeError("stack: expected at least one network, got none.")
    # Runs of neighbours that merge, each built once (merging one at a time would check
    # every earlier layer again at each step: quadratic in the number of layers).
    runs: list[list[RNN]] = [[flat[0]]]
    for part in flat[1:]:
        if _mergeable(runs[-1][-1], part):
            runs[-1].append(part)
        else:
            runs.append([part])
    merged = [run[0] if len(run) == 1 else
              RNN(run[0].spec.replace(num_layers=sum(p.spec.num_layers for p in run)),
                  [layer for p in run for layer in p.params], copy=False)
              for run in runs]
    return merged[0] if len(merged) == 1 else Stack(merged)
