"""Generate golden Core ML files: NeuralNetwork models written by coremltools, with the
numbers of the source framework that holds the same weights.

    .venv/bin/python tools/golden_coreml.py [--out tests/golden/coreml] [--list]

Core ML runs only on Apple platforms, so each reference comes from a framework that
computes the network the file declares, given the same weights:

* ``lstm``, ``lstm_bi_2layer``, ``rnn``: a PyTorch ``nn.LSTM`` / ``nn.RNN`` whose weights
  ``NeuralNetworkBuilder`` writes with ``add_unilstm`` / ``add_bidirlstm`` (one layer per
  network layer) / ``add_simple_rnn``, gate by gate (PyTorch's two biases summed);
  reference: PyTorch's output.
* ``lstm_f16``: an LSTM with its weights made float16 by coremltools'
  ``_convert_neural_network_spec_weights_to_fp16`` (what ``quantize_weights(model, 16)``
  calls); reference: PyTorch with the same float16 values, computing in float32.
* ``gru``: a real Core ML ``gru`` layer (``add_gru``, reset before, hard-sigmoid gates with
  alpha 0.2 and beta 0.5 set); reference: ONNX Runtime's ``GRU`` (``linear_before_reset``
  0, ``HardSigmoid``/``Tanh`` activations) with the same weights.
* ``lstm_head``: ``innerProduct`` → ``uniDirectionalLSTM`` → ``innerProduct`` inside a
  ``pipeline`` model (coremltools' ``Pipeline``): layers and a model around the network;
  reference: PyTorch's LSTM on the LSTM's input.
* ``lstm_traced``: a traced PyTorch module holding a batch-first ``nn.LSTM``, converted by
  ``coremltools.convert(..., convert_to="neuralnetwork")`` (transposes, initial-state
  constants and squeezes around a ``uniDirectionalLSTM``); reference: PyTorch.
* ``lstm_bi_traced``: a 2-layer bidirectional LSTM converted the same way (coremltools'
  own mapping of PyTorch's directions onto ``biDirectionalLSTM``); reference: PyTorch.
* ``gru_loop``: a traced PyTorch GRU converted the same way: coremltools writes a ``loop``
  layer whose body computes one step from generic layers (innerProduct, add, multiply,
  activation, gather, scatter); reference: PyTorch.
* ``gru_loop_2layer``: a 2-layer PyTorch GRU converted the same way: two loops, the second
  reading the rows the first wrote; reference: PyTorch.
* ``program_*``: the same traced PyTorch modules converted to ML Program packages
  (``convert_to="mlprogram"``, saved as ``<name>.mlpackage`` folders: ``Manifest.json``,
  the program, ``weights/weight.bin``): LSTM, 2-layer bidirectional LSTM, RNN, a GRU
  (``program_gru_loop``, a ``while_loop`` of generic operations) and a 2-layer GRU
  (``program_gru_loop_2layer``, two of them); reference: PyTorch. ``program_gru_loop_f16``:
  the GRU converted with FLOAT16 precision (float16 weights, the step computed in
  float16); reference: PyTorch with the same float16 values, computing in float32.
  ``program_lstm_f16``, an iOS17 ``lstm`` with float16 weights built with the MIL Builder
  (a converted LSTM stays float32 even with FLOAT16 precision); reference: PyTorch with
  the same float16 values, computing in float32.

* ``keras_lstm``, ``keras_gru``, ``keras_rnn``: a tf_keras ``LSTM`` / ``GRU``
  (``reset_after=True``) / ``SimpleRNN`` in a ``Sequential`` model, saved as a SavedModel
  folder and converted by ``coremltools.convert(folder, source="tensorflow",
  convert_to="neuralnetwork")`` (coremltools 9.0 takes no Keras 3 model, and a tf_keras
  model only as a SavedModel): a ``loop`` layer computing the step from
  ``batchedMatmul`` s of the Keras kernels, the bias, ``splitND`` of the gates, the states
  carried as loop values; reference: the Keras model's own ``predict``, and its
  ``get_weights()`` stored as ``keras.<index>``. ``program_keras_lstm``,
  ``program_keras_gru``: the same converted to float32 ML Programs (a ``while_loop`` reading
  and writing TensorLists: ``make_list``, ``list_read``, ``list_write``).

Weights are uniform ±0.6 from a generator seeded by the case's name (biases too, never
zeros), inputs uniform ±1; input 5, hidden 8, time 6, batch 2. Files per case: ``<name>.mlmodel``
and ``<name>.npz`` (``x`` (batch, time, input) and ``y`` (batch, time, D·H), float32; for
the loops also the PyTorch module's parameters as ``torch.<name>``, e.g.
``torch.weight_ih_l0``, the values the file must hold bit for bit).
``MANIFEST.json`` lists the cases and the versions that made them (pinned below; another
version may write other files, so the script refuses to run with one unless
``--any-version``). ``--only NAME …`` makes those cases alone and keeps the other files (a
converted model records the day it was converted). ``rnnport`` is not imported.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
PINNED = {"coremltools": "9.0", "torch": "2.13.0+cpu", "onnx": "1.23.2", "onnxruntime": "1.31.1",
          "tensorflow": "2.21.0", "tf_keras": "2.21.0"}
INPUT, HIDDEN, TIME, BATCH = 5, 8, 6, 2


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def _torch_rnn(kind: str, rng: np.random.Generator, **options: Any) -> Any:
    import torch

    module = getattr(torch.nn, kind)(INPUT, HIDDEN, batch_first=True, **options)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(torch.tensor(rng.uniform(-0.6, 0.6, parameter.shape),
                                         dtype=torch.float32))
    return module.eval()


def _torch_y(module: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return np.asarray(module(torch.tensor(x))[0].numpy(), dtype=np.float32)


def _lstm_gates(module: Any, layer: int, suffix: str = "") -> tuple[list[Any], list[Any],
                                                                        list[Any]]:
    """Core ML's ``[W_i, W_f, W_o, W_z]`` and ``R``, ``b`` lists from PyTorch's i f g o rows."""
    def rows(name: str) -> list[np.ndarray]:
        array = getattr(module, f"{name}_l{layer}{suffix}").detach().numpy()
        blocks = np.split(array, 4)
        return [blocks[0], blocks[1], blocks[3], blocks[2]]
    bias_ih, bias_hh = rows("bias_ih"), rows("bias_hh")
    return rows("weight_ih"), rows("weight_hh"), [a + b for a, b in zip(bias_ih, bias_hh,
                                                                          strict=True)]


def _builder(output: int) -> Any:
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    return NeuralNetworkBuilder([("input", datatypes.Array(INPUT))],
                                [("output", datatypes.Array(output))])


def _lstm(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    module = _torch_rnn("LSTM", _rng(name))
    builder = _builder(HIDDEN)
    weights, recursions, biases = _lstm_gates(module, 0)
    builder.add_unilstm("lstm", recursions, weights, biases, HIDDEN, INPUT, ["input"],
                        ["output"], output_all=True)
    return builder.spec, _torch_y(module, x)


def _lstm_f16(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    import torch
    from coremltools.models.utils import _convert_neural_network_spec_weights_to_fp16

    module = _torch_rnn("LSTM", _rng(name))
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(parameter.half().float())
    builder = _builder(HIDDEN)
    weights, recursions, biases = _lstm_gates(module, 0)
    # Sums of two float16 values need not be float16: round PyTorch's biases to match.
    biases = [bias.astype(np.float16).astype(np.float32) for bias in biases]
    with torch.no_grad():
        module.bias_ih_l0.copy_(torch.tensor(np.concatenate(
            [biases[0], biases[1], biases[3], biases[2]])))
        module.bias_hh_l0.zero_()
    builder.add_unilstm("lstm", recursions, weights, biases, HIDDEN, INPUT, ["input"],
                        ["output"], output_all=True)
    return _convert_neural_network_spec_weights_to_fp16(builder.spec), _torch_y(module, x)


def _lstm_bi_2layer(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    module = _torch_rnn("LSTM", _rng(name), num_layers=2, bidirectional=True)
    builder = _builder(2 * HIDDEN)
    blob = "input"
    for layer in range(2):
        forward, backward = _lstm_gates(module, layer), _lstm_gates(module, layer, "_reverse")
        top = "output" if layer == 1 else "hidden"
        builder.add_bidirlstm(f"bilstm{layer}", forward[1], forward[0], forward[2],
                              backward[1], backward[0], backward[2], HIDDEN,
                              INPUT if layer == 0 else 2 * HIDDEN, [blob], [top],
                              output_all=True)
        blob = top
    return builder.spec, _torch_y(module, x)


def _rnn(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    module = _torch_rnn("RNN", _rng(name))
    builder = _builder(HIDDEN)
    builder.add_simple_rnn("rnn", module.weight_hh_l0.detach().numpy(),
                           module.weight_ih_l0.detach().numpy(),
                           (module.bias_ih_l0 + module.bias_hh_l0).detach().numpy(), HIDDEN,
                           INPUT, "TANH", ["input"], ["output"], output_all=True)
    return builder.spec, _torch_y(module, x)


def _gru(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper

    rng = _rng(name)
    weights = [rng.uniform(-0.6, 0.6, (HIDDEN, INPUT)).astype(np.float32) for _ in range(3)]
    recursions = [rng.uniform(-0.6, 0.6, (HIDDEN, HIDDEN)).astype(np.float32)
                  for _ in range(3)]
    biases = [rng.uniform(-0.6, 0.6, HIDDEN).astype(np.float32) for _ in range(3)]
    builder = _builder(HIDDEN)
    layer = builder.add_gru("gru", recursions, weights, biases, HIDDEN, INPUT, ["input"],
                            ["output"], activation="TANH", inner_activation="SIGMOID_HARD",
                            output_all=True)
    hard = layer.gru.activations[0].sigmoidHard
    hard.alpha, hard.beta = 0.2, 0.5
    # ONNX's GRU: gates z r h, W (1, 3H, I), R (1, 3H, H), B (1, 6H) = [Wb, Rb].
    initializers = [
        helper.make_tensor("W", TensorProto.FLOAT, [1, 3 * HIDDEN, INPUT],
                           np.concatenate(weights).ravel()),
        helper.make_tensor("R", TensorProto.FLOAT, [1, 3 * HIDDEN, HIDDEN],
                           np.concatenate(recursions).ravel()),
        helper.make_tensor("B", TensorProto.FLOAT, [1, 6 * HIDDEN],
                           np.concatenate([*biases, np.zeros(3 * HIDDEN, np.float32)]))]
    node = helper.make_node("GRU", ["X", "W", "R", "B"], ["Y"], hidden_size=HIDDEN,
                            linear_before_reset=0, activations=["HardSigmoid", "Tanh"],
                            activation_alpha=[0.2], activation_beta=[0.5])
    graph = helper.make_graph(
        [node], "gru", [helper.make_tensor_value_info("X", TensorProto.FLOAT,
                                                      [TIME, BATCH, INPUT])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [TIME, 1, BATCH, HIDDEN])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)], ir_version=8)
    onnx.checker.check_model(model)
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    y = session.run(None, {"X": np.ascontiguousarray(x.transpose(1, 0, 2))})[0]
    return builder.spec, np.asarray(y[:, 0].transpose(1, 0, 2), dtype=np.float32)


def _lstm_head(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    from coremltools.models import datatypes
    from coremltools.models.pipeline import Pipeline

    rng = _rng(name)
    module = _torch_rnn("LSTM", rng)
    builder = _builder(3)
    builder.add_inner_product("project", rng.uniform(-0.6, 0.6, (INPUT, INPUT)),
                              rng.uniform(-0.6, 0.6, INPUT), INPUT, INPUT, True, "input",
                              "projected")
    weights, recursions, biases = _lstm_gates(module, 0)
    builder.add_unilstm("lstm", recursions, weights, biases, HIDDEN, INPUT, ["projected"],
                        ["hidden"], output_all=True)
    builder.add_inner_product("head", rng.uniform(-0.6, 0.6, (3, HIDDEN)),
                              rng.uniform(-0.6, 0.6, 3), HIDDEN, 3, True, "hidden", "output")
    pipeline = Pipeline([("input", datatypes.Array(INPUT))], [("output", datatypes.Array(3))])
    pipeline.add_model(builder.spec)
    return pipeline.spec, _torch_y(module, x)


class _Traced:
    """A module whose forward is its recurrent layer's sequence output."""

    @staticmethod
    def convert(module: Any, x: np.ndarray, to: str = "neuralnetwork", **options: Any) -> Any:
        import coremltools
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.rnn = module

            def forward(self, inputs: Any) -> Any:
                return self.rnn(inputs)[0]

        traced = torch.jit.trace(Wrapped().eval(), torch.tensor(x))
        converted = coremltools.convert(traced, inputs=[coremltools.TensorType(shape=x.shape)],
                                        convert_to=to, **options)
        return converted.get_spec() if to == "neuralnetwork" else converted


def _lstm_traced(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    module = _torch_rnn("LSTM", _rng(name))
    return _Traced.convert(module, x), _torch_y(module, x)


def _lstm_bi_traced(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    module = _torch_rnn("LSTM", _rng(name), num_layers=2, bidirectional=True)
    return _Traced.convert(module, x), _torch_y(module, x)


PARAMETERS: dict[str, dict[str, np.ndarray]] = {}  # case → the PyTorch parameters it stores


def _gru_loop(**options: Any) -> Callable[[str, np.ndarray], tuple[Any, np.ndarray]]:
    """A traced PyTorch GRU converted to a NeuralNetwork: coremltools writes a loop layer."""
    def make(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
        module = _torch_rnn("GRU", _rng(name), **options)
        PARAMETERS[name] = _parameters(module)
        return _Traced.convert(module, x), _torch_y(module, x)
    return make


def _parameters(module: Any) -> dict[str, np.ndarray]:
    return {f"torch.{key}": value.detach().numpy().copy()
            for key, value in module.state_dict().items()}


def _keras(kind: str, to: str = "neuralnetwork"
           ) -> Callable[[str, np.ndarray], tuple[Any, np.ndarray]]:
    """A tf_keras recurrent layer converted from a SavedModel folder (an ML Program in
    float32 with ``to="mlprogram"``)."""
    def make(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
        import tempfile

        import coremltools
        import tf_keras

        rng = _rng(name)
        layer = getattr(tf_keras.layers, kind)(HIDDEN, return_sequences=True)
        model = tf_keras.Sequential([tf_keras.layers.Input((TIME, INPUT), batch_size=BATCH),
                                     layer])
        layer.set_weights([rng.uniform(-0.6, 0.6, array.shape).astype(np.float32)
                           for array in layer.get_weights()])
        PARAMETERS[name] = {f"keras.{index}": array for index, array in
                            enumerate(layer.get_weights())}
        y = np.asarray(model.predict(x, verbose=0), dtype=np.float32)
        with tempfile.TemporaryDirectory() as folder:
            model.save(folder, save_format="tf")
            options = {} if to == "neuralnetwork" else {
                "compute_precision": coremltools.precision.FLOAT32}
            converted = coremltools.convert(folder, source="tensorflow", convert_to=to,
                                            **options)
        return (converted.get_spec() if to == "neuralnetwork" else converted), y
    return make


def _program(kind: str, half: bool = False, **options: Any
             ) -> Callable[[str, np.ndarray], tuple[Any, np.ndarray | None]]:
    """A case converting a traced PyTorch module to an ML Program package (float32, or
    float16 with ``half``: the reference then runs PyTorch on the float16 values)."""
    def make(name: str, x: np.ndarray) -> tuple[Any, np.ndarray | None]:
        import coremltools
        import torch

        module = _torch_rnn(kind, _rng(name), **options)
        converted = _Traced.convert(module, x, "mlprogram", compute_precision=(
            coremltools.precision.FLOAT16 if half else coremltools.precision.FLOAT32))
        if half:
            with torch.no_grad():
                for parameter in module.parameters():
                    parameter.copy_(parameter.half().float())
        if kind == "GRU":
            PARAMETERS[name] = _parameters(module)
        return converted, _torch_y(module, x)
    return make


def _program_f16(name: str, x: np.ndarray) -> tuple[Any, np.ndarray]:
    """coremltools keeps a converted LSTM in float32 even with FLOAT16 precision, so the
    float16 program is built with the MIL Builder (iOS17's lstm takes float16)."""
    import coremltools
    import torch
    from coremltools.converters.mil import Builder
    from coremltools.converters.mil.mil import types

    module = _torch_rnn("LSTM", _rng(name))
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(parameter.half().float())
        module.bias_ih_l0.copy_((module.bias_ih_l0 + module.bias_hh_l0).half().float())
        module.bias_hh_l0.zero_()

    def mil(parameter: Any) -> np.ndarray:  # PyTorch's gate rows i f g o → MIL's i f o g
        blocks = np.split(parameter.detach().numpy().astype(np.float16), 4)
        return np.concatenate([blocks[0], blocks[1], blocks[3], blocks[2]])

    zeros = np.zeros((BATCH, HIDDEN), np.float16)

    @Builder.program(input_specs=[Builder.TensorSpec(shape=(TIME, BATCH, INPUT),
                                                     dtype=types.fp16)],
                     opset_version=coremltools.target.iOS17)
    def program(inputs: Any) -> Any:
        return Builder.lstm(x=inputs, initial_h=zeros, initial_c=zeros,
                            weight_ih=mil(module.weight_ih_l0),
                            weight_hh=mil(module.weight_hh_l0), bias=mil(module.bias_ih_l0),
                            output_sequence=True)[0]

    converted = coremltools.convert(program, convert_to="mlprogram",
                                    minimum_deployment_target=coremltools.target.iOS17,
                                    compute_precision=coremltools.precision.FLOAT16)
    return converted, _torch_y(module, x)


CASES: dict[str, tuple[str, Callable[[str, np.ndarray], tuple[Any, np.ndarray | None]]]] = {
    "lstm": ("uniDirectionalLSTM by NeuralNetworkBuilder; PyTorch nn.LSTM reference", _lstm),
    "lstm_f16": ("the LSTM with float16 weights (coremltools' fp16 conversion)", _lstm_f16),
    "lstm_bi_2layer": ("two biDirectionalLSTM layers; PyTorch 2-layer bidirectional LSTM",
                       _lstm_bi_2layer),
    "rnn": ("simpleRecurrent (tanh); PyTorch nn.RNN reference", _rnn),
    "gru": ("a real gru layer (reset before, hard-sigmoid gates); ONNX Runtime GRU "
            "linear_before_reset=0 reference", _gru),
    "lstm_head": ("innerProduct, uniDirectionalLSTM, innerProduct inside a pipeline",
                  _lstm_head),
    "lstm_traced": ("traced PyTorch LSTM converted by coremltools.convert(convert_to="
                    "\"neuralnetwork\")", _lstm_traced),
    "lstm_bi_traced": ("traced PyTorch 2-layer bidirectional LSTM converted by coremltools."
                       "convert(convert_to=\"neuralnetwork\")", _lstm_bi_traced),
    "gru_loop": ("traced PyTorch GRU converted by coremltools: a loop layer of generic layers",
                 _gru_loop()),
    "gru_loop_2layer": ("traced 2-layer PyTorch GRU converted by coremltools: two loop layers",
                        _gru_loop(num_layers=2)),
    "keras_lstm": ("tf_keras LSTM (SavedModel) converted by coremltools: a loop layer; "
                   "Keras predict reference", _keras("LSTM")),
    "keras_gru": ("tf_keras GRU, reset after (SavedModel) converted by coremltools: a loop "
                  "layer; Keras predict reference", _keras("GRU")),
    "keras_rnn": ("tf_keras SimpleRNN (SavedModel) converted by coremltools: a loop layer; "
                  "Keras predict reference", _keras("SimpleRNN")),
    "program_keras_lstm": ("ML Program package: tf_keras LSTM (SavedModel), float32: a "
                           "while_loop over TensorLists", _keras("LSTM", "mlprogram")),
    "program_keras_gru": ("ML Program package: tf_keras GRU (SavedModel), float32: a "
                          "while_loop over TensorLists", _keras("GRU", "mlprogram")),
    "program_lstm": ("ML Program package: traced PyTorch LSTM, float32", _program("LSTM")),
    "program_lstm_bi_2layer": ("ML Program package: 2-layer bidirectional LSTM",
                               _program("LSTM", num_layers=2, bidirectional=True)),
    "program_lstm_f16": ("ML Program package: an iOS17 MIL lstm with float16 weights, built "
                         "with the MIL Builder; PyTorch with the same values", _program_f16),
    "program_rnn": ("ML Program package: traced PyTorch RNN (tanh)", _program("RNN")),
    "program_gru_loop": ("ML Program package: traced PyTorch GRU, a while_loop",
                         _program("GRU")),
    "program_gru_loop_2layer": ("ML Program package: traced 2-layer PyTorch GRU, two "
                                "while_loops", _program("GRU", num_layers=2)),
    "program_gru_loop_f16": ("ML Program package: traced PyTorch GRU, FLOAT16 precision (a "
                             "while_loop computing in float16); PyTorch with the same float16 "
                             "values", _program("GRU", half=True)),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "golden" / "coreml")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--any-version", action="store_true")
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), metavar="NAME")
    args = parser.parse_args(argv)
    if args.list:
        for name, (what, _) in CASES.items():
            print(f"{name}: {what}")
        return 0
    import importlib.metadata

    versions = {name: importlib.metadata.version(name) for name in PINNED}
    wrong = {name: version for name, version in versions.items() if version != PINNED[name]}
    if wrong and not args.any_version:
        print(f"versions {wrong} differ from the pinned {PINNED}; pass --any-version to run "
              "anyway", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    kept = {}
    if args.only and (args.out / "MANIFEST.json").is_file():
        kept = {case["name"]: case for case in json.loads(
            (args.out / "MANIFEST.json").read_text())["cases"]}
    manifest = []
    for name, (what, make) in CASES.items():
        if args.only and name not in args.only and name in kept:
            manifest.append(kept[name])
            continue
        x = _rng(name + "/x").uniform(-1, 1, (BATCH, TIME, INPUT)).astype(np.float32)
        made, y = make(name, x)
        if hasattr(made, "save"):  # an ML Program: a package folder
            shutil.rmtree(args.out / f"{name}.mlpackage", ignore_errors=True)
            made.save(str(args.out / f"{name}.mlpackage"))
        else:
            (args.out / f"{name}.mlmodel").write_bytes(made.SerializeToString())
        arrays = {"x": x} if y is None else {"x": x, "y": y}
        arrays.update(PARAMETERS.get(name, {}))
        np.savez(args.out / f"{name}.npz", **arrays)
        manifest.append({"name": name, "what": what, "reference": y is not None,
                         "file": f"{name}.mlpackage" if hasattr(made, "save")
                         else f"{name}.mlmodel"})
    (args.out / "MANIFEST.json").write_text(json.dumps(
        {"versions": versions, "input": INPUT, "hidden": HIDDEN, "time": TIME,
         "cases": manifest}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
