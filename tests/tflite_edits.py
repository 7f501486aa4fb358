"""Editing ``.tflite`` files through LiteRT's own generated schema code, and running them in
the LiteRT interpreter: the structurally different writer and runtime the TFLite tests check
rnnport's reader against."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np


def edited(path: Path | bytes, change: Callable[[Any], None]) -> bytes:
    """The file at ``path`` (or these bytes) as ``change`` leaves its
    ``schema_py_generated.ModelT``."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(path if isinstance(path, bytes) else path.read_bytes(), 0)
    change(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def deep_loop_body(source: Path | bytes, links: int) -> bytes | None:
    """``source`` with the first loop body input that a FULLY_CONNECTED reads (a state, in a
    converted recurrent layer) passed through a chain of ``links`` RESHAPEs that keep its
    shape: values rnnport's loop evaluator follows, ``links`` deep. None without such a
    body."""
    found = []

    def change(model: Any) -> None:
        bodies = [op.builtinOptions.bodySubgraphIndex for graph in model.subgraphs
                  for op in graph.operators or []
                  if hasattr(op.builtinOptions, "bodySubgraphIndex")]
        for body in (model.subgraphs[index] for index in bodies):
            dense = next((op for op in body.operators
                          if op.inputs is not None and len(op.inputs)
                          and op.inputs[0] in list(body.inputs)
                          and model.operatorCodes[op.opcodeIndex].builtinCode == 9), None)
            if dense is None:
                continue
            code = copy.deepcopy(model.operatorCodes[dense.opcodeIndex])
            code.builtinCode = code.deprecatedBuiltinCode = 22  # RESHAPE
            model.operatorCodes.append(code)
            source, chain = int(dense.inputs[0]), []
            for link in range(links):
                tensor = copy.deepcopy(body.tensors[source])
                tensor.name, tensor.buffer = f"link_{link}".encode(), 0
                body.tensors.append(tensor)
                op = copy.deepcopy(dense)
                op.opcodeIndex = len(model.operatorCodes) - 1
                op.inputs, op.outputs = [source], [len(body.tensors) - 1]
                op.builtinOptionsType, op.builtinOptions = 0, None
                chain.append(op)
                source = len(body.tensors) - 1
            dense.inputs = [source, *list(dense.inputs)[1:]]
            body.operators[:0] = chain
            found.append(body)
            return
    data = edited(source, change)
    return data if found else None


def litert(data: bytes, x: np.ndarray) -> np.ndarray:
    """The LiteRT interpreter's first output for ``x`` fed to the model ``data``."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=data)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return np.asarray(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]))
