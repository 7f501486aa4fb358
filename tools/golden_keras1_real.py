"""Generate golden Keras 1 HDF5 files with Keras 1.2.2 itself (Theano backend), and the outputs
Keras 1.2.2 computed.

    /tmp/k1venv/bin/python tools/golden_keras1_real.py [--out tests/golden/keras1_real]
        [--case NAME ...] [--list]

Unlike ``tools/golden_keras1.py`` (Keras 1's layout written by hand with h5py, tf_keras's
legacy converter as the oracle), these files are Keras 1.2.2's ``model.save`` /
``model.save_weights`` output and ``y`` is Keras 1.2.2's own ``predict``.

**Environment** (Keras 1 needs an old stack; TensorFlow 0.x/1.x does not install on
Python 3.11, Theano 1.0.5 does)::

    python3.11 -m venv /tmp/k1venv
    /tmp/k1venv/bin/pip install keras==1.2.2 theano==1.0.5 "numpy<1.24" "scipy<1.11" h5py \
        pyyaml six

Run with ``KERAS_BACKEND=theano``, ``THEANO_FLAGS=cxx=,blas.ldflags=`` (Theano's Python
implementations: no C++ compilation, and numpy ≥ 1.22 lacks the ``blas_opt_info`` Theano's
default reads) and a throwaway ``HOME`` (Keras 1 writes ``~/.keras/keras.json``); this script
sets the first two when they are unset. Python 3.11 dropped ``collections.Iterable`` …
and ``inspect.getargspec``, which Keras 1.2.2 imports: the shims below put them back before
Keras is imported; nothing else of Keras is changed. ``rnnport`` is not imported.

Weights: every array is set with ``layer.set_weights`` (Keras 1's ``get_weights`` order) to
random values, uniform ±0.6 and all distinct within a case, biases included. Inputs uniform
±1, batch 2. Seeds: CRC32 of the case name.

Files, per case ``<name>``
--------------------------
``<name>.h5``
    What Keras 1.2.2 wrote.
``<name>.npz`` (plain arrays, ``allow_pickle=False``): ``x`` ``(batch, time, input)``
float32; ``y`` Keras 1.2.2's output of the last recurrent layer for ``x``, every step; ``meta``
a 0-d unicode JSON object: ``case``, ``description``, ``versions``, ``keras_version`` (on the
file's root, or null), ``weights_only``, ``layers`` (the recurrent layers' names, in order),
``others`` (the other layers' names), ``weight_names`` (each recurrent layer's, as Keras
wrote them), ``tolerance``.

``MANIFEST.json`` lists every case with its description, its files and their SHA-256.
"""

from __future__ import annotations

import collections
import collections.abc
import inspect
import json
import os
import sys
import zlib
from pathlib import Path
from typing import Any

os.environ.setdefault("KERAS_BACKEND", "theano")
os.environ.setdefault("THEANO_FLAGS", "cxx=,blas.ldflags=")

import golden_manifest
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "golden" / "keras1_real"
BATCH = 2
TOLERANCE = 1e-5

CASES = {
    "lstm": "Sequential: LSTM(8, return_sequences=True) (consume_less='cpu', hard_sigmoid) → "
            "TimeDistributed(Dense(3)); model.save",
    "gru_gpu_lstm_mem": "Sequential: GRU(7, consume_less='gpu') → LSTM(6, consume_less='mem', "
                        "inner_activation='sigmoid'); model.save",
    "bidirectional": "Model: Input → Bidirectional(LSTM(5)) → Bidirectional(GRU(4, "
                     "activation='relu')); model.save",
    "weights_simplernn_lstm_gpu": "save_weights: SimpleRNN(6) → LSTM(5, consume_less='gpu'), "
                                  "no config, no keras_version",
}


def _shims() -> None:
    """What Python 3.11 removed and Keras 1.2.2 imports, put back before Keras is imported."""
    for name in ("Iterable", "Mapping", "Callable", "Sequence", "MutableMapping"):
        if not hasattr(collections, name):
            setattr(collections, name, getattr(collections.abc, name))
    if not hasattr(inspect, "getargspec"):
        inspect.getargspec = lambda function: inspect.getfullargspec(function)[:4]  # type: ignore


def _build(name: str) -> tuple[Any, Any, int, int, bool]:
    """The model, the recurrent stack's last layer, input size, time steps, weights only."""
    from keras.layers import GRU, LSTM, Bidirectional, Dense, Input, SimpleRNN, TimeDistributed
    from keras.models import Model, Sequential

    if name == "lstm":
        model = Sequential()
        model.add(LSTM(8, input_shape=(6, 4), return_sequences=True))
        model.add(TimeDistributed(Dense(3)))
        return model, model.layers[0], 4, 6, False
    if name == "gru_gpu_lstm_mem":
        model = Sequential()
        model.add(GRU(7, input_shape=(5, 5), return_sequences=True, consume_less="gpu"))
        model.add(LSTM(6, return_sequences=True, consume_less="mem",
                       inner_activation="sigmoid"))
        return model, model.layers[-1], 5, 5, False
    if name == "bidirectional":
        inputs = Input(shape=(6, 4))
        last = Bidirectional(GRU(4, return_sequences=True, activation="relu"))
        outputs = last(Bidirectional(LSTM(5, return_sequences=True))(inputs))
        return Model(inputs, outputs), last, 4, 6, False
    model = Sequential()
    model.add(SimpleRNN(6, input_shape=(5, 3), return_sequences=True))
    model.add(LSTM(5, return_sequences=True, consume_less="gpu"))
    return model, model.layers[-1], 3, 5, True


def make(name: str, out: Path) -> golden_manifest.Made:
    _shims()
    import h5py
    import keras
    import theano
    from keras import backend

    rng = np.random.default_rng(zlib.crc32(name.encode()))
    used: set[float] = set()
    model, last, inputs, steps, weights_only = _build(name)
    recurrent, others = [], []
    for layer in model.layers:
        inner = getattr(layer, "layer", layer)
        kind = type(inner).__name__
        (recurrent if kind in ("LSTM", "GRU", "SimpleRNN") else others).append(layer)
        layer.set_weights([golden_manifest.distinct_uniform(rng, np.shape(weight), used)
                           for weight in layer.get_weights()])
    model.compile("sgd", "mse")
    x = rng.uniform(-1, 1, size=(BATCH, steps, inputs)).astype(np.float32)
    stack = backend.function([model.inputs[0]], [last.output])
    y = np.asarray(stack([x])[0], np.float32)
    path = out / f"{name}.h5"
    if path.exists():
        path.unlink()
    if weights_only:
        model.save_weights(str(path))
    else:
        model.save(str(path))
    with h5py.File(path, "r") as h5:
        version = h5.attrs.get("keras_version")
        version = None if version is None else _text(version)
        root = h5 if weights_only else h5["model_weights"]
        weight_names = {layer.name: [_text(n) for n in root[layer.name].attrs["weight_names"]]
                        for layer in recurrent}
    versions = {"keras": keras.__version__, "backend": backend.backend(),
                "theano": theano.__version__, "numpy": np.__version__,
                "h5py": h5py.__version__, "python": sys.version.split()[0]}
    meta = {"case": name, "description": CASES[name], "versions": versions,
            "keras_version": version, "weights_only": weights_only,
            "layers": [layer.name for layer in recurrent],
            "others": [layer.name for layer in others], "weight_names": weight_names,
            "tolerance": TOLERANCE}
    np.savez(out / f"{name}.npz", x=x, y=y, meta=np.array(json.dumps(meta)))
    facts = {"description": CASES[name], "layers": meta["layers"]}
    return facts, [f"{name}.h5", f"{name}.npz"], f"y {y.shape}", versions


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def main(argv: list[str] | None = None) -> int:
    return golden_manifest.main(
        argv, description=__doc__.splitlines()[0], default_out=DEFAULT_OUT, cases=CASES,
        generator="tools/golden_keras1_real.py", make=make)


if __name__ == "__main__":
    sys.exit(main())
