"""The activation functions ONNX names for its recurrent operators.

An LSTM has three (``f`` for the gates, ``g`` for the candidate, ``h`` for the output:
default Sigmoid, Tanh, Tanh), a GRU two (``f``, ``g``: Sigmoid, Tanh). A
``Spec.activations`` entry is ``(name, alpha, beta)``; functions that take no ``alpha``
or ``beta`` carry 0.0 there. Definitions (ONNX operator set)::

    Sigmoid          1 / (1 + e^-x)            Tanh       tanh(x)
    Relu             max(0, x)                 Softsign   x / (1 + |x|)
    Softplus         log(1 + e^x)              Affine     alpha·x + beta
    LeakyRelu        x if x ≥ 0 else alpha·x   ThresholdedRelu   x if x > alpha else 0
    ScaledTanh       alpha·tanh(beta·x)        HardSigmoid       clip(alpha·x + beta, 0, 1)
    Elu              x if x ≥ 0 else alpha·(e^x − 1)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["DEFAULTS", "PARAMETERS", "RELU", "SIGMOID", "TANH", "Activation", "Kernel", "function", "kernel",
           "normalize", "sigmoid"]

Activation = tuple[str, float, float]

DEFAULTS: dict[str, tuple[str, ...]] = {"lstm": ("Sigmoid", "Tanh", "Tanh"),
                                        "gru": ("Sigmoid", "Tanh")}
# Which of alpha/beta each function takes, with ONNX's default values.
PARAMETERS: dict[str, dict[str, float]] = {
    "Sigmoid": {}, "Tanh": {}, "Relu": {}, "Softsign": {}, "Softplus": {},
    "Affine": {"alpha": 1.0, "beta": 0.0},
    "LeakyRelu": {"alpha": 0.01},
    "ThresholdedRelu": {"alpha": 1.0},
    "ScaledTanh": {"alpha": 1.0, "beta": 1.0},
    "HardSigmoid": {"alpha": 0.2, "beta": 0.5},
    "Elu": {"alpha": 1.0},
}


def normalize(cell: str, activations: object) -> tuple[tuple[Activation, ...], list[str]]:
    """Canonical ``Spec.activations`` (``()`` for the defaults) and any problems found."""
    if activations in (None, ()):
        return (), []
    if cell not in DEFAULTS:
        return (), [f"activations on a {cell} cell; only LSTM and GRU cells take them "
                    "(a simple RNN's activation is its cell, rnn_tanh or rnn_relu)"]
    problems: list[str] = []
    out: list[Activation] = []
    items = list(activations) if isinstance(activations, (list, tuple)) else [activations]
    if len(items) != len(DEFAULTS[cell]):
        return (), [f"activations={activations!r}; expected {len(DEFAULTS[cell])} for {cell} "
                    f"({', '.join(DEFAULTS[cell])} by default)"]
    for item in items:
        name, *values = (item,) if isinstance(item, str) else tuple(item)
        if name not in PARAMETERS:
            problems.append(f"activation {name!r}; expected one of {', '.join(PARAMETERS)}")
            continue
        takes = PARAMETERS[name]
        given = [float(v) for v in values] + [None, None]
        alpha = given[0] if given[0] is not None else takes.get("alpha", 0.0)
        beta = given[1] if given[1] is not None else takes.get("beta", 0.0)
        out.append((name, alpha if "alpha" in takes else 0.0, beta if "beta" in takes else 0.0))
    if tuple(name for name, _, _ in out) == DEFAULTS[cell]:
        return (), problems
    return tuple(out), problems


def sigmoid(x: np.ndarray) -> np.ndarray:
    """σ(x) = 1 / (1 + e^-x), as a new array."""
    out = np.empty_like(x)
    with np.errstate(over="ignore"):
        SIGMOID.into(x, out)
    return out


class Kernel:
    """An activation as the runtime applies it: in place, on preallocated arrays.

    The runtime folds ``scale`` into the weights and biases feeding the activation, so
    :meth:`prescaled` receives ``scale·x`` and leaves ``act(x)`` in place. Scales are ±1 or
    ±2, powers of two, so folding them changes no bit of any product or sum.
    :meth:`into` takes an unscaled ``x`` (an LSTM's cell state) and writes ``act(x)``.
    """

    __slots__ = ("_into", "_prescaled", "name", "scale")

    def __init__(self, name: str, scale: float, prescaled: Callable[[np.ndarray], object],
                 into: Callable[[np.ndarray, np.ndarray], object]) -> None:
        self.name, self.scale, self._prescaled, self._into = name, scale, prescaled, into

    def prescaled(self, values: np.ndarray) -> None:
        self._prescaled(values)

    def into(self, x: np.ndarray, out: np.ndarray) -> None:
        self._into(x, out)

    def __repr__(self) -> str:
        return f"<Kernel {self.name}, scale {self.scale}>"


def _sigmoid_prescaled(values: np.ndarray) -> None:
    # values = -x: σ(x) = 1 / (1 + e^-x). e^-x overflows to inf for x < -88 (float32),
    # which gives exactly 0; the runtime runs with overflow warnings off.
    np.exp(values, out=values)
    values += 1.0
    np.reciprocal(values, out=values)


def _sigmoid_into(x: np.ndarray, out: np.ndarray) -> None:
    np.negative(x, out=out)
    _sigmoid_prescaled(out)


def _tanh_prescaled(values: np.ndarray) -> None:
    np.tanh(values, out=values)


SIGMOID = Kernel("Sigmoid", -1.0, _sigmoid_prescaled, _sigmoid_into)
TANH = Kernel("Tanh", 1.0, _tanh_prescaled, lambda x, out: np.tanh(x, out=out))
RELU = Kernel("Relu", 1.0, lambda values: np.maximum(values, 0.0, out=values),
              lambda x, out: np.maximum(x, 0.0, out=out))


def kernel(activation: Activation) -> Kernel:
    """The runtime's in-place form of ``activation`` (``(name, alpha, beta)``)."""
    name = activation[0]
    if name == "Sigmoid":
        return SIGMOID
    if name == "Tanh":
        return TANH
    if name == "Relu":
        return RELU
    apply = function(activation)

    def prescaled(values: np.ndarray) -> None:
        values[...] = apply(values)

    def into(x: np.ndarray, out: np.ndarray) -> None:
        out[...] = apply(x)

    return Kernel(name, 1.0, prescaled, into)


def function(activation: Activation) -> Callable[[np.ndarray], np.ndarray]:
    name, alpha, beta = activation
    table: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "Sigmoid": sigmoid,
        "Tanh": np.tanh,
        "Relu": lambda x: np.maximum(x, 0.0),
        "Softsign": lambda x: x / (1.0 + np.abs(x)),
        "Softplus": lambda x: np.logaddexp(0.0, x),
        "Affine": lambda x: alpha * x + beta,
        "LeakyRelu": lambda x: np.where(x >= 0, x, alpha * x),
        "ThresholdedRelu": lambda x: np.where(x > alpha, x, 0.0),
        "ScaledTanh": lambda x: alpha * np.tanh(beta * x),
        "HardSigmoid": lambda x: np.clip(alpha * x + beta, 0.0, 1.0),
        "Elu": lambda x: np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0.0))),
    }
    return table[name]
