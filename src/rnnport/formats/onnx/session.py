"""Running ONNX models in ONNX Runtime (CPU): the graphs rnnport writes, for tests, and a
source file, for ``convert --verify`` (see :mod:`rnnport.formats.onnx`)."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import AmbiguousSourceError
from ...model import Model, Stack
from .._common import is_path, listed, require
from .quantized import OP
from .reader import notes

__all__ = ["framework_forward", "run_reference"]

# ONNX Runtime's element types for the inputs a check can build.
FLOATS = {"tensor(float)": np.float32, "tensor(double)": np.float64,
          "tensor(float16)": np.float16}
INTEGERS = {"tensor(int32)": np.int32, "tensor(int64)": np.int64}
# rnnport's state inputs: initial_h, initial_c, with _<part> for a Stack.
STATE_INPUT = re.compile(r"initial_([hc])(?:_(\d{1,9}))?")
# Words in a symbolic dimension's name that say which axis it is.
AXIS_WORDS = {"batch": ("batch",), "time": ("time", "seq", "step", "len", "frame")}
NO_CHECK = ": no framework check"


def run_reference(proto: Any, x: np.ndarray, **feeds: Any) -> Mapping[str, np.ndarray]:
    """Run a written model in ONNX Runtime (CPU) on ``x``, with ``feeds`` (``sequence_lens``,
    ``initial_h`` …: the inputs the model was written to take; None ones are left out) by
    name; the outputs by name. Used by the tests."""
    onnxruntime = require("onnxruntime", extra="onnx", purpose="running ONNX models")
    session = onnxruntime.InferenceSession(proto.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    inputs = {"x": np.asarray(x, np.float32),
              **{k: v for k, v in feeds.items() if v is not None}}
    return dict(zip(names, session.run(None, inputs), strict=True))


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """ONNX Runtime (CPU) running the ``.onnx`` file ``source`` on ``x`` ``(batch, time, I)``:
    ``y`` ``(batch, time, D·H_out)`` from the graph's first output, or a sentence saying why
    there is no check.

    The graph's required inputs are fed ``x`` (batch-first or time-major, as its declared
    shape says), integer ``(batch,)`` inputs the full length, and rnnport's state inputs
    (``initial_h``, ``initial_c``, ``initial_h_0`` …) zeros shaped from ``model``'s spec.
    """
    if not (is_path(source) and os.fspath(source).lower().endswith(".onnx")):
        return "only an .onnx file holds a model ONNX Runtime can run" + NO_CHECK
    if importlib.util.find_spec("onnxruntime") is None:
        return "ONNX Runtime is not installed" + NO_CHECK
    try:
        found = notes(source)
    except AmbiguousSourceError:
        return "the graph holds several recurrent networks" + NO_CHECK
    if any(note.startswith("no recurrent node") for note in found):
        # Nodes around an unrolled network are not told apart from it: its first output may
        # be a head's. Reading already ran the graph and found rnnport's output among its values.
        return ("the graph computes the network step by step, and reading it checked that by "
                "running the graph" + NO_CHECK)
    if any(OP in note for note in found):
        return (f"ONNX Runtime computes the quantized {OP} with integers (x and h quantized "
                "on every step), which the dequantized weights read do not" + NO_CHECK)
    beside = [note for note in found if note.startswith(
        ("other computing nodes", "another recurrent network"))]
    if beside:
        return (f"the graph computes more than the network read ({beside[0].split(';')[0]})"
                + NO_CHECK)
    import onnxruntime

    settings = onnxruntime.SessionOptions()
    settings.log_severity_level = 3  # a foreign file's load warnings are not this check's
    try:
        session = onnxruntime.InferenceSession(os.fspath(source), sess_options=settings,
                                               providers=["CPUExecutionProvider"])
    except Exception as error:  # ONNX Runtime's error classes derive from Exception alone
        return f"ONNX Runtime cannot load {os.fspath(source)} ({_first_line(error)})" + NO_CHECK
    x = np.asarray(x)
    batch, steps = x.shape[0], x.shape[1]
    feeds: dict[str, np.ndarray] = {}
    data = []
    for declared in session.get_inputs():
        value = _default_input(declared, model, batch, steps)
        if value is None:
            data.append(declared)
        else:
            feeds[declared.name] = value
    if len(data) != 1:
        names = listed(repr(declared.name) for declared in data) or "none"
        return (f"the graph takes {len(data)} inputs besides lengths and rnnport's states "
                f"({names}); expected one, the sequence x" + NO_CHECK)
    (declared,) = data
    if declared.type not in FLOATS or len(declared.shape or ()) != 3:
        return (f"the graph's input {declared.name!r} is {declared.type} {declared.shape}; "
                "expected a float sequence of rank 3" + NO_CHECK)
    layouts = [time_major for time_major in (False, True)
               if _fits(declared.shape, x.shape, time_major)]
    if not layouts:
        return (f"the graph's input {declared.name!r} is declared {declared.shape}, which holds "
                f"the check's input (batch, time, input) = {x.shape} neither batch-first nor "
                "time-major" + NO_CHECK)
    if len(layouts) > 1:
        return (f"the graph's input {declared.name!r} is declared {declared.shape}, which does "
                f"not say whether it is batch-first or time-major" + NO_CHECK)
    time_major = layouts[0]
    feeds[declared.name] = (x.transpose(1, 0, 2) if time_major else x).astype(
        FLOATS[declared.type])
    try:
        y = np.asarray(session.run(None, feeds)[0])
    except Exception as error:  # a shape or type the graph refuses: said, not raised
        return f"ONNX Runtime cannot run {os.fspath(source)} ({_first_line(error)})" + NO_CHECK
    # The first output: y (time, batch, D·H) or ONNX's Y (time, D, batch, H) when time-major,
    # y (batch, time, D·H) or Y (batch, time, D, H) when batch-first; wanted (batch, time, D·H).
    if time_major and y.ndim == 4 and y.shape[0] == steps and y.shape[2] == batch:
        y = y.transpose(2, 0, 1, 3)
    elif time_major and y.ndim == 3:
        y = y.transpose(1, 0, 2)
    if y.ndim == 4:
        y = y.reshape(*y.shape[:2], -1)
    if y.shape != (batch, steps, model.output_size):
        return (f"the graph's first output has shape {y.shape}; expected (batch, time, "
                f"D·H_out) = {(batch, steps, model.output_size)}" + NO_CHECK)
    return f"ONNX Runtime running {os.path.basename(os.fspath(source))}", y


def _default_input(declared: Any, model: Model, batch: int, steps: int) -> np.ndarray | None:
    """What a required input other than the sequence gets: full lengths for an integer
    ``(batch,)`` input, zeros for rnnport's state inputs; None for any other input."""
    shape = declared.shape or []
    if declared.type in INTEGERS and len(shape) == 1:
        return np.full(batch, steps, INTEGERS[declared.type])
    found = STATE_INPUT.fullmatch(declared.name)
    if declared.type not in FLOATS or found is None:
        return None
    parts = list(model.parts) if isinstance(model, Stack) else [model]
    index = int(found.group(2) or 0)
    if index >= len(parts) or (found.group(2) is None) != (len(parts) == 1):
        return None
    spec = parts[index].spec
    if found.group(1) == "c" and spec.cell != "lstm":
        return None
    width = spec.output_size if found.group(1) == "h" else spec.hidden_size
    return np.zeros((spec.num_layers * spec.num_directions, batch, width),
                    FLOATS[declared.type])


def _fits(declared: list[Any], shape: tuple[int, ...], time_major: bool) -> bool:
    """Whether a declared input shape (numbers, named or unnamed symbolic dimensions) holds
    ``shape`` (batch, time, I) fed in this layout."""
    roles = ("time", "batch", "") if time_major else ("batch", "time", "")
    sizes = (shape[1], shape[0], shape[2]) if time_major else shape
    for dim, size, role in zip(declared, sizes, roles, strict=True):
        if isinstance(dim, int) and dim != size:
            return False
        if isinstance(dim, str):
            named = {axis for axis, words in AXIS_WORDS.items()
                     if any(word in dim.lower() for word in words)}
            if named and role not in named:
                return False
    return True


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]
