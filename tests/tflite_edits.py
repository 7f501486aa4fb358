"""Editing ``.tflite`` files through LiteRT's own generated schema code, and running them in
the LiteRT interpreter: the structurally different writer and runtime the TFLite tests check
rnnport's reader against."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def edited(path: Path, change: Callable[[Any], None]) -> bytes:
    """The file at ``path`` as ``change`` leaves its ``schema_py_generated.ModelT``."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(path.read_bytes(), 0)
    change(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def litert(data: bytes, x: np.ndarray) -> np.ndarray:
    """The LiteRT interpreter's first output for ``x`` fed to the model ``data``."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return np.asarray(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
