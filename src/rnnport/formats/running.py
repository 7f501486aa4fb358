"""``forward(engine=...)``: one network run by another framework, with rnnport's arguments
and results.

Engines: ``numpy`` (rnnport's own runtime, :mod:`rnnport.runtime`, the default), the ones
formats declare (:class:`~._protocol.Engine`, e.g. ONNX Runtime, PyTorch), and ``auto``.

* An engine gets the network written once per network and device (a session, a module),
  kept while the network lives: networks are immutable. Each call then checks the
  arguments as the NumPy path does and feeds the arrays straight in.
* Whatever the engine, ``forward`` returns what the NumPy path returns: ``y`` in the input's
  major order, C-contiguous, in the network's compute dtype (float32, or float64 for float64
  weights); the state ``(h, c)`` (LSTM) or ``h`` shaped ``(L·D, batch, ·)``; outputs past a
  sequence's length zero and its final state the one at its last valid step (a sequence of
  length 0 keeps its initial state).
* A network the engine would compute differently (a feature its format refuses, a
  precision it does not compute in) runs in NumPy instead, with an
  :class:`~rnnport.errors.EngineFallbackWarning` saying why: never other numbers.
* ``auto`` times every engine that can run the network on the device asked for, on the
  call's own input (after a warm-up run each), and keeps the fastest for that network and
  shape class (:func:`chosen`): batch and time rounded up to powers of two, whether
  ``lengths`` is given, the device.
* ``stream(engine=...)`` (:func:`stream`): each part of the network streams through the
  runner ``forward`` builds for it (the same cache), its state carried in the stream's own
  arrays. A runner with a ``stream(h, c)`` method (ONNX Runtime: I/O binding to planned
  buffers; PyTorch on the CPU: tensors over them, the module's own operator called
  directly) gives its own per-chunk step; any other is called per chunk with the carried
  state. A part the engine cannot compute exactly streams in NumPy, with the warning
  ``forward`` gives. An engine's stream gives that runtime's numbers: the NumPy stream's
  within its rounding, not bit for bit (see :class:`~rnnport.runtime.Stream`).
"""

from __future__ import annotations

import importlib.util
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from ..errors import (
    DeviceError,
    EngineFallbackWarning,
    MissingDependencyError,
    UnknownOptionError,
    UnsupportedFeatureError,
)
from ..model import RNN
from ..runtime import (
    STREAM_KEPT_LENGTHS,
    Stream,
    _check_input,
    _check_lengths,
    _check_size,
    _check_state,
    compute_dtype,
    run,
)
from ._common import close_matches, install_hint
from ._protocol import Engine, Format, Runner, cpu_only, missing_feature

__all__ = ["NUMPY", "EngineStream", "ShapeClass", "chosen", "forward", "stream"]

NUMPY = "numpy"
AUTO = "auto"


class ShapeClass(NamedTuple):
    """The inputs ``auto`` keeps one choice for: ``batch`` and ``steps`` are the powers of two
    the call's batch and time round up to."""

    batch: int
    steps: int
    lengths: bool
    device: Any


# (id(network), engine, device as passed) → its runner, or why it falls back to NumPy.
_RUNNERS: dict[tuple[int, str, Any], _Prepared | str] = {}
# id(network) → the engine ``auto`` chose per shape class.
_CHOICES: dict[int, dict[ShapeClass, str]] = {}


def forward(network: RNN, x: Any, state: Any, lengths: Any, time_major: bool, *, engine: Any,
            device: Any, declared: Callable[[], Mapping[str, tuple[Format, Engine]]]
            ) -> tuple[np.ndarray, Any]:
    """``network.forward(x, state, lengths, time_major)`` run by ``engine`` on ``device``;
    ``declared()`` gives the engines the formats declare, by name, with their formats."""
    try:
        runner = _RUNNERS.get((id(network), engine, device))
    except TypeError:  # an unhashable engine or device: no such engine or device
        runner = None
    if runner is None:
        if isinstance(engine, str) and engine == NUMPY:
            try:
                cpu_only(device)
            except DeviceError as error:
                raise DeviceError(f"forward(engine='numpy'): {error}") from None
            return run(network, x, state=state, lengths=lengths, time_major=time_major)
        if isinstance(engine, str) and engine == AUTO:
            return _auto(network, x, state, lengths, time_major, device, declared)
        runner = _runner(network, engine, device, declared())
    if isinstance(runner, str):
        warnings.warn(runner, EngineFallbackWarning, stacklevel=3)
        return run(network, x, state=state, lengths=lengths, time_major=time_major)
    return _call(runner, network, x, state, lengths, time_major)


def chosen(network: RNN) -> dict[ShapeClass, str]:
    """The engine ``forward(engine="auto")`` chose for ``network``, by shape class."""
    return dict(_CHOICES.get(id(network), {}))


def _runner(network: RNN, name: Any, device: Any,
            engines: Mapping[str, tuple[Format, Engine]], what: str = "forward"
            ) -> _Prepared | str:
    """The cached runner of ``network`` in engine ``name`` on ``device``, built on first use;
    or, where the engine cannot compute the network exactly, the warning's text."""
    if not isinstance(name, str) or name not in engines:
        known = [NUMPY, *engines, AUTO]
        hint = close_matches(name, known) if isinstance(name, str) else ""
        raise UnknownOptionError(f"{what}: unknown engine {name!r}; expected one of "
                                 f"{', '.join(map(repr, known))}.{hint}")
    owner, declared = engines[name]
    where = f"forward(engine={name!r})"
    for module in declared.modules:
        if importlib.util.find_spec(module.split(".")[0]) is None:
            raise MissingDependencyError(f"{where} needs {module!r}, which is not installed. "
                                         f"{install_hint(module, declared.extra)}")
    try:
        normalized = declared.device(device)
    except DeviceError as error:
        raise DeviceError(f"{where}: {error}") from None
    instead = ("; rnnport's NumPy runtime runs it instead (the numbers of engine='numpy'). "
               "Pass engine='numpy' to say so and silence this warning.")
    missing = missing_feature(network.spec, owner.holds(network.spec))
    runner: _Prepared | str
    if missing is not None:
        runner = (f"{where}: {name} runs networks as the {owner.name} format writes them, and "
                  f"that format cannot hold {missing[1]} ({missing[2]}){instead}")
    elif not owner.holds_dtype(network.dtype):
        runner = (f"{where}: {name} runs networks as the {owner.name} format writes them, and "
                  f"that format cannot hold {network.dtype.name} weights{instead}")
    else:
        try:
            runner = _Prepared(network, declared.build(network, normalized))
        except UnsupportedFeatureError as error:
            runner = f"{str(error).rstrip('.')}{instead}"
    key = (id(network), name, device)
    try:  # the entry must leave with the network, or a later one at its id would reuse it
        weakref.finalize(network, _RUNNERS.pop, key, None)
    except TypeError:
        return runner
    _RUNNERS[key] = runner
    return runner


class _Prepared:
    """A network's runner, with what each call would otherwise derive again."""

    __slots__ = ("dtype", "lstm", "runner", "zeros")

    def __init__(self, network: RNN, runner: Runner) -> None:
        self.runner = runner
        self.dtype = compute_dtype(network.dtype)
        self.lstm = network.spec.cell == "lstm"
        # The zero state of the last batch size seen (engines only read their inputs).
        self.zeros: tuple[int, np.ndarray, np.ndarray | None] | None = None

    def zero_state(self, spec: Any, batch: int) -> tuple[np.ndarray, np.ndarray | None]:
        zeros = self.zeros  # one read: another thread may replace it meanwhile
        if zeros is None or zeros[0] != batch:
            zeros = self.zeros = (batch, *_check_state(None, spec, batch, self.dtype))
        return zeros[1], zeros[2]


def _call(prepared: _Prepared, network: RNN, x: Any, state: Any, lengths: Any,
          time_major: bool) -> tuple[np.ndarray, Any]:
    """The runner on ``x`` after the NumPy path's checks, its results in that path's form."""
    spec = network.spec
    inputs = _check_input(x, spec.input_size, prepared.dtype)
    if not time_major:
        inputs = inputs.transpose(1, 0, 2)
    steps, batch, _ = inputs.shape
    _check_size(spec, steps, batch)
    valid = _check_lengths(lengths, batch, steps)
    h0, c0 = (prepared.zero_state(spec, batch) if state is None else
              _check_state(state, spec, batch, prepared.dtype))
    if steps == 0 or batch == 0:  # nothing to run, and frameworks refuse empty axes
        return run(network, x, state=state, lengths=lengths, time_major=time_major)
    y, h_n, c_n = prepared.runner(inputs, h0, c0, valid)
    if valid is not None and not valid.all():
        # A sequence of length 0 never steps: frameworks zero its state or refuse it.
        empty = valid == 0
        y[:, empty] = 0
        h_n[:, empty] = h0[:, empty]
        if c_n is not None and c0 is not None:
            c_n[:, empty] = c0[:, empty]
    y = np.ascontiguousarray(y if time_major else y.transpose(1, 0, 2))
    return y, ((h_n, c_n) if prepared.lstm else h_n)


def _auto(network: RNN, x: Any, state: Any, lengths: Any, time_major: bool, device: Any,
          declared: Callable[[], Mapping[str, tuple[Format, Engine]]]) -> tuple[np.ndarray, Any]:
    """The fastest engine for this network and shape class, timed on this call's input the
    first time and remembered."""
    try:
        shape = np.shape(x)
    except (ValueError, TypeError):  # ragged: the NumPy path says what is wrong with it
        shape = ()
    if len(shape) != 3:  # the NumPy path says what is wrong with it
        return run(network, x, state=state, lengths=lengths, time_major=time_major)
    steps, batch = (shape[0], shape[1]) if time_major else (shape[1], shape[0])
    shape_class = ShapeClass(1 << max(batch - 1, 0).bit_length(),
                             1 << max(steps - 1, 0).bit_length(), lengths is not None, device)
    choices = _CHOICES.get(id(network))
    if choices is not None and shape_class in choices:
        return forward(network, x, state, lengths, time_major, engine=choices[shape_class],
                       device=device, declared=declared)
    engines = declared()
    candidates = [NUMPY] if _runs_on_cpu(device) else []
    for name, (_, engine) in engines.items():
        if all(importlib.util.find_spec(module.split(".")[0]) for module in engine.modules):
            try:
                if not isinstance(_runner(network, name, device, engines), str):
                    candidates.append(name)
            except DeviceError:
                continue
    if not candidates:
        raise DeviceError(f"forward(engine='auto'): no installed engine runs on device="
                          f"{device!r}; expected None or 'cpu' (every engine), or a device one "
                          "installed engine can use.")
    timed = []
    for name in candidates:
        if len(candidates) > 1:  # a warm-up run: first-call set-up is not the engine's speed
            forward(network, x, state, lengths, time_major, engine=name, device=device,
                    declared=declared)
        start = time.perf_counter()
        result = forward(network, x, state, lengths, time_major, engine=name, device=device,
                         declared=declared)
        timed.append((time.perf_counter() - start, name, result))
    _, winner, result = min(timed, key=lambda entry: entry[0])
    if choices is None:
        choices = _CHOICES.setdefault(id(network), {})
        weakref.finalize(network, _CHOICES.pop, id(network), None)
    choices[shape_class] = winner
    return result


def _runs_on_cpu(device: Any) -> bool:
    try:
        cpu_only(device)
    except DeviceError:
        return False
    return True


# -- streams ---------------------------------------------------------------------------------

# A part's step: its chunk (T, batch, I) time-major, C-contiguous, in its compute dtype →
# its outputs (T, batch, H_out), valid until the next step; the state moves on in place.
Step = Callable[[np.ndarray], np.ndarray]


def stream(parts: list[RNN], batch_size: Any, *, state: Any, time_major: bool, engine: Any,
           device: Any, where: str, stacked: bool,
           declared: Callable[[], Mapping[str, tuple[Format, Engine]]]) -> Stream:
    """``RNN.stream`` / ``Stack.stream`` with ``engine`` (any but NumPy on the CPU)."""
    if isinstance(engine, str) and engine == NUMPY:
        try:
            cpu_only(device)
        except DeviceError as error:
            raise DeviceError(f"{where}(engine='numpy'): {error}") from None
        return Stream(parts, batch_size, state=state, time_major=time_major, where=where,
                      stacked=stacked)
    if isinstance(engine, str) and engine == AUTO:
        raise UnknownOptionError(
            f"{where}: engine='auto' chooses per call's shape, and a stream keeps one engine; "
            f"expected an engine by name ({', '.join(map(repr, [NUMPY, *declared()]))}).")
    engines = declared()
    runners = [_runner(network, engine, device, engines, f"{where}") for network in parts]
    return EngineStream(parts, batch_size, runners, state=state, time_major=time_major,
                        where=where, stacked=stacked, engine=engine)


class EngineStream(Stream):
    """:class:`~rnnport.runtime.Stream`'s API (state, reset, the chunk's checks), each part
    stepped by its engine's runner, or by a NumPy stream where the engine falls back."""

    def __init__(self, parts: list[RNN], batch_size: Any, runners: list[_Prepared | str], *,
                 state: Any, time_major: bool, where: str, stacked: bool, engine: str) -> None:
        self._runners = runners
        self.engine = engine
        super().__init__(parts, batch_size, state=state, time_major=time_major, where=where,
                         stacked=stacked)

    def _prepare(self) -> None:
        for network in self._parts:
            _check_size(network.spec, 1, self.batch_size)
        self._sized: set[int] = {1}  # the chunk lengths whose size _check_size passed
        self._steps: list[tuple[np.dtype, Step]] = []
        for number, (network, runner) in enumerate(zip(self._parts, self._runners,
                                                       strict=True)):
            h, c = self._h[number], self._c[number]
            dtype = compute_dtype(network.dtype)
            if isinstance(runner, str):
                text = runner.replace("forward(engine=", f"{self._where}(engine=")
                warnings.warn(text, EngineFallbackWarning, stacklevel=5)
                alone = Stream([network], self.batch_size, time_major=True)
                alone._h[0], alone._c[0] = h, c  # one state: reset and state see it
                alone._prepare()  # its layers write c where the stream keeps it
                self._steps.append((dtype, alone))
                continue
            own = getattr(runner.runner, "stream", None)
            self._steps.append((dtype, own(h, c) if own is not None else
                                _carried(runner.runner, h, c)))

    def __call__(self, x_chunk: Any) -> np.ndarray:
        x = x_chunk
        if not (type(x) is np.ndarray and x.shape == self._one_shape
                and x.dtype is self.dtype):  # one step, sized when the stream was made
            if not (type(x) is np.ndarray and x.dtype == self.dtype and x.ndim == 3
                    and x.shape[self._batch_axis] == self.batch_size
                    and x.shape[2] == self.input_size and x.shape[1 - self._batch_axis] >= 1):
                x = self._checked(x)
            steps = x.shape[1 - self._batch_axis]
            if steps not in self._sized:  # checked once per chunk length, as Stream plans
                for network in self._parts:
                    _check_size(network.spec, steps, self.batch_size)
                if len(self._sized) >= STREAM_KEPT_LENGTHS:
                    self._sized.remove(next(size for size in self._sized if size != 1))
                self._sized.add(steps)
        y = np.ascontiguousarray(x if self.time_major else x.transpose(1, 0, 2))
        for dtype, step in self._steps:
            if y.dtype != dtype:  # a stack's parts of different dtypes
                y = y.astype(dtype)
            y = step(y)
        return y.copy() if self.time_major else y.transpose(1, 0, 2).copy()

    def __repr__(self) -> str:
        return super().__repr__().replace("stream of", f"{self.engine} stream of", 1)


def _carried(runner: Runner, h: np.ndarray, c: np.ndarray | None) -> Step:
    """A step calling ``runner`` on each chunk from the carried state."""

    def step(inputs: np.ndarray) -> np.ndarray:
        y, h_n, c_n = runner(inputs, h, c, None)
        h[...] = h_n
        if c is not None and c_n is not None:
            c[...] = c_n
        return y

    return step
