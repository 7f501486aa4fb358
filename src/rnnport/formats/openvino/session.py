"""Running IRs in OpenVINO (CPU, f32 inference): the IRs rnnport writes, for tests, and a
source IR, for ``convert --verify`` (see :mod:`rnnport.formats.openvino`)."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import AmbiguousSourceError, RnnportError
from ...model import Model
from .._common import is_path, require
from .ir import IR, xml_path
from .reader import analyse, notes

__all__ = ["compile_ir", "framework_forward", "run_reference"]

NO_CHECK = ": no framework check"


def compile_ir(source: IR | Any) -> Any:
    """An IR (in memory, or the path of its ``.xml``) compiled by OpenVINO for the CPU,
    computing in f32 (its default on some CPUs is bf16 or f16)."""
    openvino = require("openvino", extra="openvino", purpose="running OpenVINO IR")
    core = openvino.Core()
    if isinstance(source, IR):
        model = core.read_model(model=source.xml.decode(), weights=openvino.Tensor(
            np.frombuffer(source.weights, np.uint8).copy()))
    else:
        model = core.read_model(str(xml_path(Path(source))))
    return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def run_reference(source: IR | Any, x: np.ndarray) -> Mapping[str, np.ndarray]:
    """Run an IR rnnport wrote in OpenVINO on ``x`` [batch, time, input]; its outputs by
    name (``y``, ``h_n``, ``c_n`` …). Used by the tests."""
    compiled = compile_ir(source)
    results = compiled({0: np.asarray(x, np.float32)})
    return {next(iter(output.get_names())): np.asarray(results[output])
            for output in compiled.outputs}


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """OpenVINO running the IR ``source`` on ``x`` ``(batch, time, I)`` (fed time first
    where the IR's input gives time first): ``y`` from its first output, or a sentence
    saying why there is no check (the output named ``y``, where one is)."""
    if not (isinstance(source, IR) or is_path(source)):
        return "only an IR (.xml and .bin) holds a model OpenVINO can run" + NO_CHECK
    if importlib.util.find_spec("openvino") is None:
        return "OpenVINO is not installed (pip install openvino)" + NO_CHECK
    try:
        found = notes(source)
        analysis = analyse(source)
    except AmbiguousSourceError:
        return "the IR holds several recurrent networks" + NO_CHECK
    beside = [note for note in found if note.startswith(("other computing layers",
                                                          "another recurrent network"))]
    if beside:
        return f"the IR computes more than the network read ({beside[0].rstrip('.')})" + NO_CHECK
    parameters = analysis.graph.of_type("Parameter")
    if len(parameters) != 1:
        return (f"the IR takes {len(parameters)} inputs, not the sequence alone" + NO_CHECK)
    compiled = compile_ir(source)
    fed = np.asarray(x, np.float32)
    try:
        result = compiled({0: fed.transpose(1, 0, 2) if analysis.time_major else fed})
    except (RuntimeError, RnnportError) as error:
        return f"OpenVINO could not run the IR on x ({str(error).splitlines()[0]})" + NO_CHECK
    # rnnport's own IRs name their output y beside the states; converted ones have one
    y = np.asarray(result[next((output for output in compiled.outputs
                                if "y" in output.get_names()), compiled.outputs[0])])
    if analysis.time_major and y.ndim == 4:  # ONNX's Y [T, D, B, H], as converted
        y = y.transpose(2, 0, 1, 3).reshape(y.shape[2], y.shape[0], -1)
    elif analysis.time_major and y.ndim == 3:
        y = y.transpose(1, 0, 2)
    return "OpenVINO (CPU, f32)", y
