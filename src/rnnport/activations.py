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
from typing import Any

import numpy as np

__all__ = ["DEFAULTS", "PARAMETERS", "RELU", "SIGMOID", "TANH", "Activation", "Kernel",
           "function", "kernel", "normalize"]

Activation = tuple[str, float, float]

DEFAULTS: dict[str, tuple[str, ...]] = {"lstm": ("Sigmoid", "Tanh", "Tanh"),
                                        "gru": ("Sigmoid", "Tanh")}
# Which of alpha/beta each function takes, with its default value.
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
    items: list[Any] = list(activations) if isinstance(activations, (list, tuple)) \
        else [activations]
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


class Kernel:
    """An activation as the runtime applies it, in place on preallocated arrays:
    ``act(x) = core(scale·x)``.

    The runtime folds ``scale`` into the weights and biases that feed the activation (±1:
    no product or sum changes by a bit), so :meth:`prescaled` receives ``scale·x``. Blocks
    that take one kernel share one pass (an LSTM whose gates and candidate take the same
    activation). :meth:`into` takes an unscaled ``x`` (an LSTM's cell state), through
    ``direct(x, out)`` when the kernel has one (one pass instead of two).
    """

    __slots__ = ("core", "direct", "name", "scale")

    def __init__(self, name: str, scale: float, core: Callable[[np.ndarray], object],
                 direct: Callable[[np.ndarray, np.ndarray], object] | None = None) -> None:
        self.name, self.scale, self.core, self.direct = name, scale, core, direct

    def prescaled(self, values: np.ndarray) -> None:
        self.core(values)

    def into(self, x: np.ndarray, out: np.ndarray) -> None:
        if self.direct is not None:
            self.direct(x, out)
            return
        if self.scale == 1.0:
            np.copyto(out, x)
        else:
            np.multiply(x, self.scale, out=out)
        self.prescaled(out)

    def __repr__(self) -> str:
        return f"<Kernel {self.name}, scale {self.scale}>"


# 1 as a 0-d array of each dtype the runtime computes in. A ufunc takes a 0-d array of
# the array's own dtype about 0.3 µs faster than a Python float, which it must first
# resolve to that dtype; the result is the same to the bit. A kernel runs several times at
# every step, on a few hundred values at batch 1.
_ONE = {np.float32: np.array(1.0, dtype=np.float32), np.float64: np.array(1.0, dtype=np.float64)}


def one(values: np.ndarray) -> Any:
    """1 as a 0-d array of ``values``' dtype (a ufunc given one runs a step less than
    given the Python float 1.0), or 1.0 for other dtypes."""
    return _ONE.get(values.dtype.type, 1.0)


def _logistic(values: np.ndarray) -> None:
    """``values`` = −x in, σ(x) = 1 / (1 + e^−x) out. e^−x overflows to inf for x below
    about −88 (float32), which gives exactly 0 (and underflows to 0 above about 88, which
    gives 1); the runtime runs with overflow and underflow warnings off. ``1 / v`` is
    ``np.divide`` by a 0-d one: the same bits as ``np.reciprocal``, in less time."""
    unit = one(values)
    np.exp(values, out=values)
    np.add(values, unit, out=values)
    np.divide(unit, values, out=values)


def _tanh(values: np.ndarray) -> None:
    np.tanh(values, out=values)


SIGMOID = Kernel("Sigmoid", -1.0, _logistic)
# An LSTM's candidate takes NumPy's tanh in a pass of its own beside the σ pass over the
# three other gates: one call fewer than tanh(x) = 2σ(2x) − 1 in a shared pass over all
# four, faster at every size measured (NumPy 2.4 on an Intel Xeon, float32 and float64:
# 1.7 against 2.2 µs at 4 × 160 values, 14 against 18 µs at 4 × 5,120), and exact to
# NumPy's tanh where 2σ(2x) − 1 loses the relative precision of values near 0.
TANH = Kernel("Tanh", 1.0, _tanh, direct=lambda x, out: np.tanh(x, out=out))
RELU = Kernel("Relu", 1.0, lambda values: np.maximum(values, 0.0, out=values))


def kernel(activation: Activation) -> Kernel:
    """The runtime's in-place form of ``activation`` (``(name, alpha, beta)``)."""
    name = activation[0]
    known = {"Sigmoid": SIGMOID, "Tanh": TANH, "Relu": RELU}
    if name in known:
        return known[name]
    apply = function(activation)

    def core(values: np.ndarray) -> None:
        values[...] = apply(values)

    return Kernel(name, 1.0, core)


def function(activation: Activation) -> Callable[[np.ndarray], np.ndarray]:
    """``activation`` as a plain function of ``x``: its definition, which :func:`kernel`
    wraps for the less common ones and the tests hold the kernels to."""
    name, alpha, beta = activation
    table: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
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
