"""Generate golden TensorFlow.js layers models: tf_keras HDF5 files through TensorFlow.js's
own converter, run by TensorFlow.js itself.

    .venv/bin/python tools/golden_tfjs.py [--out tests/golden/tfjs] [--case NAME ...] [--list]

Run it with the test environment's Python (TensorFlow 2.21 and ``tf_keras`` 2.21 installed);
``rnnport`` is not imported. Per case, a Keras 2 model (``tf_keras``, ``TF_USE_LEGACY_KERAS=1``
before TensorFlow is imported) gets random weights and is saved as a legacy ``.h5``, which
``tensorflowjs_converter --input_format keras`` turns into ``model.json`` and its
``group*-shard*of*.bin`` shards. Node.js then runs the converted model with
``@tensorflow/tfjs`` (``tests/js``: ``npm ci --prefix tests/js``) through rnnport's runner
script (``src/rnnport/data/tfjs_runner.js``), and Keras runs the same input.

**The converter's environment.** The ``tensorflowjs`` package from PyPI pins versions the test
environment cannot take (``packaging~=23.1``, ``tensorflow-decision-forests``, ``jax``), so the
generator makes a virtual environment of its own, ``.golden-envs/tfjs`` (ignored by git), on
first use: a ``.pth`` file puts the test environment's packages (TensorFlow, ``tf_keras``,
``h5py``, NumPy) on its path, and into it go, without their dependencies,
``tensorflowjs==4.22.0`` and ``tensorflow-hub==0.16.1`` (imported by the converter's
SavedModel code, unused for HDF5), plus an empty ``tensorflow_decision_forests`` module
(imported, unused for HDF5). Nothing else is installed; the Keras-HDF5 path imports no more.

**Keras 3.** The ``keras3_*`` cases are built with Keras 3 (the ``keras`` package) instead,
saved as a ``.keras`` archive (converted with ``--input_format keras_keras --output_format
tfjs_layers_model``: weights named by their archive paths, ``layers/lstm/cell/vars/0``) or
as an ``.h5`` (``--input_format keras``: names under the Sequential's own,
``sequential/bidirectional/forward_lstm/lstm_cell/kernel``). TF.js 4.22 cannot load a Keras 3
topology (its ``InputLayer`` has ``batch_shape``), so ``meta.tfjs_error`` says what it said and
``y_keras`` is the recurrent stack's output (the last recurrent layer's, before the head).

Weights: every array is random (uniform ±0.6) and every value in a case distinct, biases
included (never Keras's zero or one initial biases), so that a swapped gate or a dropped bias
cannot pass. Inputs are uniform ±1, batch 2. Seeds: CRC32 of the case name.

Files, per case ``<name>``
--------------------------
``<name>/model.json``, ``<name>/group1-shard*of*.bin``
    The converter's output, as written (the manifest sorted by weight name, as the converter
    sorts it).
``<name>.npz`` (plain arrays, ``allow_pickle=False``):

``x``
    The input, ``(batch, time, input)``, float32.
``y_tfjs``
    TensorFlow.js's output for ``x`` (the model's first output: the recurrent stack's); absent
    where TF.js refuses the model (``meta.tfjs_error`` says what it said).
``y_keras``
    The Keras model's own output for ``x`` (its first output).
``weights/{layer}/{k}``
    The ``k``-th array of ``get_weights()`` of the Keras layer named ``layer``.
``meta``
    0-d unicode array holding a JSON object: ``case``, ``description``, ``versions``,
    ``converter_flags``, ``layers`` (the recurrent layers' names, in order), ``others`` (the
    other layers' names), ``quantized`` (the converter's quantization, or null),
    ``tfjs_error`` (or null), ``tolerance`` (how close ``y_tfjs`` is to ``y_keras``).

``MANIFEST.json`` lists every case with its description, its files and their SHA-256.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import venv
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import golden_manifest
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "golden" / "tfjs"
ENVIRONMENT = ROOT / ".golden-envs" / "tfjs"
RUNNER = ROOT / "src" / "rnnport" / "data" / "tfjs_runner.js"
NODE_MODULES = ROOT / "tests" / "js" / "node_modules"
PINNED = ("tensorflowjs==4.22.0", "tensorflow-hub==0.16.1")
BATCH = 2

Builder = Callable[[Any], Any]  # tf_keras → the model


def _lstm_dense(keras: Any) -> Any:
    inputs = keras.Input((6, 5), name="features")
    sequence = keras.layers.LSTM(8, return_sequences=True, name="encoder")(inputs)
    head = keras.layers.Dense(3, name="head")(sequence)
    return keras.Model(inputs, [sequence, head], name="tagger")


def _gru_reset_before(keras: Any) -> Any:
    return keras.Sequential([keras.Input((5, 4)),
                             keras.layers.GRU(10, reset_after=False, return_sequences=True)])


def _simplernn_relu(keras: Any) -> Any:
    return keras.Sequential([keras.Input((7, 6)), keras.layers.Masking(0.0),
                             keras.layers.SimpleRNN(12, activation="relu",
                                                    return_sequences=True)])


def _bi_stack(keras: Any) -> Any:
    return keras.Sequential([
        keras.Input((5, 4)),
        keras.layers.Bidirectional(keras.layers.LSTM(8, return_sequences=True)),
        keras.layers.Bidirectional(keras.layers.GRU(8, reset_after=False,
                                                    return_sequences=True))])


def _gru_reset_after(keras: Any) -> Any:
    return keras.Sequential([keras.Input((5, 4)), keras.layers.GRU(8, return_sequences=True)])


def _lstm_hard_sigmoid(keras: Any) -> Any:
    return keras.Sequential([keras.Input((6, 4)), keras.layers.LSTM(
        9, recurrent_activation="hard_sigmoid", return_sequences=True)])


def _keras3_stack(keras: Any) -> Any:
    return keras.Sequential([
        keras.Input((5, 4)),
        keras.layers.Bidirectional(keras.layers.LSTM(6, return_sequences=True)),
        keras.layers.GRU(5, reset_after=False, return_sequences=True),
        keras.layers.Dense(2)])


# name → (description, builder, converter flags, quantization)
CASES: dict[str, tuple[str, Builder, tuple[str, ...], str | None]] = {
    "lstm_dense": ("Functional: LSTM(8) 'encoder' → Dense(3) 'head', outputs [encoder, head]; "
                   "input 5, time 6", _lstm_dense, (), None),
    "gru_reset_before": ("GRU(10, reset_after=False); input 4, time 5", _gru_reset_before, (),
                         None),
    "simplernn_relu": ("Masking → SimpleRNN(12, activation='relu'); input 6, time 7",
                       _simplernn_relu, (), None),
    "bi_stack_sharded": ("Bidirectional(LSTM(8)) → Bidirectional(GRU(8, reset_after=False)); "
                         "input 4, time 5; shards of 2,048 bytes", _bi_stack,
                         ("--weight_shard_size_bytes", "2048"), None),
    "lstm_hard_sigmoid_uint8": ("LSTM(9, recurrent_activation='hard_sigmoid'), weights "
                                "quantized to uint8 (--quantize_uint8); input 4, time 6",
                                _lstm_hard_sigmoid, ("--quantize_uint8", "*"), "uint8"),
    "bi_stack_float16": ("the bi_stack_sharded model with float16 weights "
                         "(--quantize_float16); input 4, time 5", _bi_stack,
                         ("--quantize_float16", "*"), "float16"),
    "gru_reset_after": ("GRU(8) (reset_after=True, the Keras 2 default), which TF.js refuses "
                        "to load; input 4, time 5", _gru_reset_after, (), None),
    "keras3_archive": ("Keras 3 Sequential: Bidirectional(LSTM(6)) → GRU(5, reset_after=False) "
                       "→ Dense(2), saved as .keras and converted with --input_format "
                       "keras_keras; input 4, time 5", _keras3_stack,
                       ("--input_format", "keras_keras", "--output_format",
                        "tfjs_layers_model"), None),
    "keras3_h5": ("the keras3_archive model saved by Keras 3 as .h5 and converted with "
                  "--input_format keras; input 4, time 5", _keras3_stack,
                  ("--input_format", "keras"), None),
}
KERAS3_SUFFIXES = {"keras3_archive": ".keras", "keras3_h5": ".h5"}


def environment() -> Path:
    """The converter's virtual environment's Python, made on first use (module docstring)."""
    python = ENVIRONMENT / "bin" / "python"
    if (ENVIRONMENT / "ready").exists():
        return python
    shutil.rmtree(ENVIRONMENT, ignore_errors=True)
    venv.EnvBuilder(with_pip=True).create(ENVIRONMENT)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], check=True,
                               capture_output=True, text=True).stdout.strip())
    (site / "test-environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    stub = site / "tensorflow_decision_forests"
    stub.mkdir(exist_ok=True)
    (stub / "__init__.py").write_text('"""Imported by tensorflowjs, unused for HDF5."""\n')
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", *PINNED],
                   check=True)
    (ENVIRONMENT / "ready").write_text("\n".join(PINNED) + "\n")
    return python


def run_tfjs(model: Path, x: np.ndarray) -> tuple[np.ndarray | None, str | None, str]:
    """TensorFlow.js's output for ``x``, or None and what TF.js said; and its version."""
    if not (NODE_MODULES / "@tensorflow" / "tfjs").is_dir():
        raise SystemExit("@tensorflow/tfjs is missing: run npm ci --prefix tests/js")
    job = {"runs": [{"model": str(model.resolve()), "topology": None, "strict": True,
                     "shape": list(x.shape),
                     "input": base64.b64encode(x.astype("<f4").tobytes()).decode()}]}
    done = subprocess.run(["node", str(RUNNER)], input=json.dumps(job), capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NODE_PATH": str(NODE_MODULES)},
                          check=True)
    answer = json.loads(done.stdout)
    result = answer["results"][0]
    if "error" in result:
        return None, result["error"], answer["version"]
    y = np.frombuffer(base64.b64decode(result["output"]), "<f4").reshape(result["shape"])
    return y, None, answer["version"]


def make(name: str, out: Path) -> golden_manifest.Made:
    description, builder, flags, quantized = CASES[name]
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import tensorflow as tf
    import tf_keras as keras

    seed = zlib.crc32(name.encode())
    rng = np.random.default_rng(seed)
    tf.random.set_seed(seed % 2**31)
    maker = keras
    if name in KERAS3_SUFFIXES:
        import keras as maker  # Keras 3, whatever TF_USE_LEGACY_KERAS says
    model = builder(maker)
    used: set[float] = set()
    arrays: dict[str, np.ndarray] = {}
    recurrent, others = [], []
    for layer in model.layers:
        weights = [golden_manifest.distinct_uniform(rng, tuple(w.shape), used)
                   for w in layer.get_weights()]
        layer.set_weights(weights)
        for index, array in enumerate(weights):
            arrays[f"weights/{layer.name}/{index}"] = array
        if type(layer).__name__ in ("LSTM", "GRU", "SimpleRNN", "Bidirectional"):
            recurrent.append(layer.name)
        elif type(layer).__name__ != "InputLayer":
            others.append(layer.name)
    shape = model.inputs[0].shape
    x = rng.uniform(-1, 1, (BATCH, shape[1], shape[2])).astype(np.float32)
    if name == "simplernn_relu":
        x[1, -2:] = 0.0  # masked steps: Keras keeps the state there, TF.js too
    if name in KERAS3_SUFFIXES:  # the stack's output: the last recurrent layer's
        stack = [layer for layer in model.layers if layer.name in recurrent][-1]
        model_of_stack = maker.Model(model.inputs, stack.output)
        y_keras = np.asarray(model_of_stack.predict(x, verbose=0), np.float32)
    else:
        y_keras = model.predict(x, verbose=0)
        y_keras = np.asarray(y_keras[0] if isinstance(y_keras, list) else y_keras, np.float32)
    folder = out / name
    shutil.rmtree(folder, ignore_errors=True)
    with tempfile.TemporaryDirectory() as temporary:
        saved = Path(temporary) / f"{name}{KERAS3_SUFFIXES.get(name, '.h5')}"
        model.save(saved)
        formats = () if name in KERAS3_SUFFIXES else ("--input_format", "keras")
        subprocess.run([str(environment().parent / "tensorflowjs_converter"), *formats,
                        *flags, str(saved), str(folder)], check=True, capture_output=True)
    y_tfjs, error, version = run_tfjs(folder / "model.json", x)
    if y_tfjs is not None:
        arrays["y_tfjs"] = y_tfjs
    tolerance = None if y_tfjs is None else float(np.abs(y_tfjs - y_keras).max())
    versions = {"tensorflow": tf.__version__, "tf_keras": keras.__version__,
                **({"keras": maker.__version__} if maker is not keras else {}),
                "tensorflowjs": PINNED[0].split("==")[1], "@tensorflow/tfjs": version,
                "node": subprocess.run(["node", "--version"], capture_output=True,
                                       text=True).stdout.strip(), "numpy": np.__version__}
    meta = {"case": name, "description": description, "versions": versions,
            "converter_flags": list(flags), "layers": recurrent, "others": others,
            "quantized": quantized, "tfjs_error": error, "tolerance": tolerance}
    np.savez(out / f"{name}.npz", x=x, y_keras=y_keras, meta=np.array(json.dumps(meta)),
             **arrays)
    files = [f"{name}.npz", *(f"{name}/{path.name}" for path in sorted(folder.iterdir()))]
    facts = {"description": description, "shards": len(files) - 2}
    line = (f"{len(files) - 2} shard(s); TF.js − Keras max |Δ| {tolerance:.2e}"
            if tolerance is not None else f"TF.js refuses it: {error}")
    return facts, files, line, versions


def main(argv: list[str] | None = None) -> int:
    return golden_manifest.main(
        argv, description=__doc__.splitlines()[0], default_out=DEFAULT_OUT,
        cases={name: case[0] for name, case in CASES.items()}, generator="tools/golden_tfjs.py",
        make=make)


if __name__ == "__main__":
    sys.exit(main())
