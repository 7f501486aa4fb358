"""Running a ``.tflite`` file in the LiteRT interpreter (``ai-edge-litert``), for
``convert --verify``: the source's check, and stage 2 on a written file."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import numpy as np

from ...errors import RnnportError
from ...model import Model
from .._common import is_path
from .reader import network_ends

__all__ = ["framework_forward"]

NO_CHECK = ": no framework check"


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """The LiteRT interpreter running the ``.tflite`` file ``source`` on ``x`` ``(batch,
    time, I)``: the network's ``y`` (the tensor reading found it in, which must be an output
    of the file), or a sentence saying why there is no check.

    The file's one input takes ``x`` resized where its ``shape_signature`` leaves a dimension
    open (-1); a fixed batch (rnnport writes batch 1) takes ``x`` in pieces of that batch;
    another fixed time or input size is not run. Variable state tensors are reset to zeros
    before each piece, as ``forward`` starts from zeros.
    """
    if not (is_path(source) and os.fspath(source).lower().endswith(".tflite")):
        return "only a .tflite file holds a model LiteRT can run" + NO_CHECK
    if importlib.util.find_spec("ai_edge_litert") is None:
        return "LiteRT (ai-edge-litert) is not installed" + NO_CHECK
    try:
        start, output, takes, gives = network_ends(source)
    except RnnportError as error:
        return f"reading the file failed ({str(error).splitlines()[0]})" + NO_CHECK
    if output < 0:
        return "the file keeps no one tensor holding the network's y" + NO_CHECK
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    want = model.forward(x)[0].shape
    try:
        # The builtin kernels alone: no XNNPACK delegate (nor its start-up line on stderr).
        interpreter = Interpreter(model_path=os.fspath(source), experimental_op_resolver_type=
                                  OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        inputs = interpreter.get_input_details()
        if len(inputs) != 1 or inputs[0]["index"] != start or \
                np.dtype(inputs[0]["dtype"]) != np.float32:
            return ("the file's input is not the network's float32 x (it takes "
                    f"{[(d['name'], np.dtype(d['dtype']).name) for d in inputs]})" + NO_CHECK)
        fed = x.transpose(1, 0, 2) if takes else x  # as the file's input is laid out
        shape = tuple(int(d) for d in inputs[0]["shape"])
        signature = tuple(int(d) for d in inputs[0].get("shape_signature", shape))
        batch_axis = 1 if takes else 0
        fits = len(signature) == fed.ndim and all(
            s in (-1, n) for axis, (s, n) in enumerate(zip(signature, fed.shape, strict=True))
            if axis != batch_axis)
        piece = fed.shape[batch_axis] if signature[batch_axis] == -1 else shape[batch_axis]
        if not fits or piece < 1 or fed.shape[batch_axis] % piece:
            return f"the file's input is fixed at {shape}, the check's is {fed.shape}" + NO_CHECK
        wanted = list(fed.shape)
        wanted[batch_axis] = piece  # a fixed batch takes x in pieces of it
        if list(shape) != wanted:
            interpreter.resize_tensor_input(inputs[0]["index"], wanted)
        interpreter.allocate_tensors()
        found = [d for d in interpreter.get_output_details() if d["index"] == output]
        if not found:
            return ("the network's y is no output of the file (operators after it compute "
                    "the outputs)" + NO_CHECK)
        pieces = []
        for start_row in range(0, fed.shape[batch_axis], piece):
            interpreter.reset_all_variables()  # state tensors back to zeros
            rows = fed[:, start_row:start_row + piece] if takes else \
                fed[start_row:start_row + piece]
            interpreter.set_tensor(inputs[0]["index"], np.ascontiguousarray(rows, np.float32))
            interpreter.invoke()
            pieces.append(np.array(interpreter.get_tensor(found[0]["index"])))
        y = np.concatenate(pieces, axis=1 if gives else 0)
        if gives:
            y = y.transpose(1, 0, 2)
    except (RuntimeError, ValueError) as error:  # the interpreter's errors for a bad model
        return f"LiteRT cannot run {os.fspath(source)} ({str(error).splitlines()[0]})" + NO_CHECK
    if y.shape != want:
        return f"the file's y has shape {y.shape}, the network's {want}" + NO_CHECK
    return f"the LiteRT interpreter running {os.fspath(source)}", y
