"""The cell one step of a loop computes, found by evaluating the step symbolically: the
part of the loop readers (TFLite's ``WHILE``, Core ML's ``loop`` layer and ML Program
``while_loop``) that does not depend on the format.

A format's evaluator turns each value the new states are computed from into a
:class:`Sym`: :class:`Var` (the step's input ``x``, the states ``h`` and ``c``),
:class:`Const` (a constant: a scalar or a vector along the feature axis), :class:`Sum` of
affine terms ``W·s + b`` (:class:`Term`), other values and constants, :class:`Act` (an
activation: sigmoid, tanh, relu), :class:`Mul`, :class:`Sub`, and :class:`Opaque` (what the
evaluator could not follow, named). :func:`rows` takes rows of an affine value (a split or
a slice along the features); :func:`add` adds two values. :func:`match` then says which
canonical cell the new states are, term by term: a simple RNN (tanh or relu), a GRU
(reset after or before; ``h' = z∘h + (1 − z)∘n`` or ``n + z∘(h − n)``) or an LSTM
(two states), as the loop readers' docstrings write them, with the weights and biases
the step holds, unchanged (bit for bit). Gate and candidate functions other than the
defaults (σ; tanh) are read as ``Spec.activations`` (the identity as ``Affine`` 1, 0);
gates applying different functions, and a simple RNN of another function, are
:class:`Unsupported`. Biases the step leaves out are zeros; a cell with no
bias at all is read with ``bias=False``; a bias added to the sum of both products (Keras
3's LSTM) is the recurrent side's, as the keras format reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..activations import DEFAULTS
from ._common import sum_exact

__all__ = ["Act", "Const", "Matched", "Mul", "Opaque", "Sub", "Sum", "Sym", "Term",
           "Unsupported", "Var", "add", "match", "parts", "rows", "scalar", "unmatched"]

MAX_PARTS = 64  # terms of one sum (ADD(s, s) doubles them: a chain must not grow unbounded)


# -- symbolic values -----------------------------------------------------------------------


class Sym:
    """A value of the step; compared by identity (one object per body tensor)."""


@dataclass(frozen=True, eq=False)
class Var(Sym):
    name: str  # "x" (the step's input) or "h" (the state)


@dataclass(frozen=True, eq=False)
class Const(Sym):
    values: np.ndarray
    tensor: int | str  # the body's tensor (or blob, or value name) holding it


@dataclass(frozen=True, eq=False)
class Term:
    """``weight · source + bias`` along the feature axis."""

    source: Sym
    weight: np.ndarray  # (out, in)
    bias: np.ndarray | None  # (out,)


@dataclass(frozen=True, eq=False)
class Sum(Sym):
    terms: tuple[Term, ...] = ()
    others: tuple[Sym, ...] = ()
    consts: tuple[np.ndarray, ...] = ()


@dataclass(frozen=True, eq=False)
class Act(Sym):
    fn: str
    arg: Sym


@dataclass(frozen=True, eq=False)
class Mul(Sym):
    a: Sym
    b: Sym


@dataclass(frozen=True, eq=False)
class Sub(Sym):
    a: Sym
    b: Sym


@dataclass(frozen=True, eq=False)
class Opaque(Sym):
    what: str  # the operator or tensor that made it



def add(a: Sym, b: Sym) -> Sym:
    """``a + b``; ``(0 − v) + c`` is ``c − v`` (the same bits: IEEE subtraction adds the
    negation), as a converter writes ``1 − z`` as ``−z + 1``."""
    for negated, other in ((a, b), (b, a)):
        if isinstance(negated, Sub) and _zero(negated.a) and isinstance(other, Const):
            return Sub(other, negated.b)
    terms: list[Term] = []
    others: list[Sym] = []
    consts: list[np.ndarray] = []
    for part in (a, b):
        if isinstance(part, Sum):
            terms.extend(part.terms)
            others.extend(part.others)
            consts.extend(part.consts)
        elif isinstance(part, Const):
            consts.append(part.values)
        else:
            others.append(part)
    if len(terms) + len(others) + len(consts) > MAX_PARTS:
        return Opaque(f"a sum of more than {MAX_PARTS} parts")
    return Sum(tuple(terms), tuple(others), tuple(consts))



def rows(value: Sym, taken: range, total: int, what: str) -> Sym:
    """Rows ``taken`` of an affine ``value`` ``total`` features wide: of each term's weights
    and bias, and of each constant vector (``what``: the operation, for an opaque value)."""
    if not isinstance(value, Sum) or value.others:
        return Opaque(f"{what} of a non-affine value")
    if any(t.weight.shape[0] != total for t in value.terms) or \
            any(c.shape not in ((), (1,), (total,)) for c in value.consts):
        return Opaque(f"{what}: the sizes disagree")
    index = slice(taken.start, taken.stop, taken.step) if taken.step > 0 else np.asarray(taken)
    return Sum(terms=tuple(Term(t.source, t.weight[index], None if t.bias is None else
                                t.bias[index]) for t in value.terms),
               consts=tuple(c if c.ndim == 0 or c.shape == (1,) else c[index]
                            for c in value.consts))


def scalar(values: np.ndarray) -> float | None:
    """The number one numeric value holds (None: several values, or not numbers)."""
    if values.size != 1 or values.dtype.kind not in "fiub":
        return None
    return float(values.reshape(-1)[0])


def _zero(value: Sym) -> bool:
    return isinstance(value, Const) and scalar(value.values) == 0.0


# -- matching the cells --------------------------------------------------------------------


# A recognised cell: its Spec fields, canonical parameters and whether it has a bias.
Matched = tuple[dict[str, Any], dict[str, np.ndarray], bool]


class _NoMatch(Exception):
    pass


class Unsupported(Exception):
    """The value is a cell rnnport knows, with something the canonical one cannot hold."""


def _need(condition: bool) -> None:
    if not condition:
        raise _NoMatch()


Affine = dict[str, tuple[np.ndarray, np.ndarray | None]]  # source → (weight, bias)
# The step's activations → Spec.activations entries ("identity": an affine value, no
# function: ONNX's Affine with alpha 1, beta 0).
ACTIVATIONS: dict[str, tuple[str, float, float]] = {
    "sigmoid": ("Sigmoid", 0.0, 0.0), "tanh": ("Tanh", 0.0, 0.0), "relu": ("Relu", 0.0, 0.0),
    "identity": ("Affine", 1.0, 0.0)}
SAID = {"identity": "the identity (no function: Keras's activation='linear')"}
SELF_GATED = {"sigmoid": "v·sigmoid(v) (Keras's silu)"}


def _affine(value: Sym, sources: dict[str, Callable[[Sym], bool]], hidden: int) -> Affine:
    """{source: (weight, bias)} of an affine value whose terms read exactly ``sources``
    (each a test of a term's source); loose constant vectors join the last side without a
    bias (``h``'s where both are open: the slot the keras format reads a one-bias cell's
    bias into)."""
    _need(isinstance(value, Sum) and not value.others)
    assert isinstance(value, Sum)
    found: Affine = {}
    for term in value.terms:
        names = [name for name, test in sources.items() if test(term.source)]
        _need(len(names) == 1 and names[0] not in found and term.weight.shape[0] == hidden)
        found[names[0]] = (term.weight, term.bias)
    _need(set(found) == set(sources))
    if value.consts:
        # Several loose constants are one bias only when all but one are zeros: the step
        # adds them one by one, and their sum is a value the step never holds.
        loose = np.zeros(hidden, dtype=np.float32)
        for const in value.consts:
            _need(const.shape in ((), (1,), (hidden,)) and const.dtype.kind == "f")
            vector = np.broadcast_to(const, (hidden,)).astype(np.float32)
            _need(not (loose.any() and vector.any()))
            loose = sum_exact(loose, vector)
        open_sides = [name for name in sources if found[name][1] is None]
        _need(bool(open_sides))
        weight, _ = found[open_sides[-1]]
        found[open_sides[-1]] = (weight, loose.astype(np.float32))
    return found


def _is(name: str) -> Callable[[Sym], bool]:
    return lambda value: isinstance(value, Var) and value.name == name


XH = {"x": _is("x"), "h": _is("h")}


def _unwrap(value: Sym) -> tuple[str, Sym]:
    """(the function, its argument) of an activated value; ("identity", value) of another."""
    return (value.fn, value.arg) if isinstance(value, Act) else ("identity", value)


def _gate(value: Sym, hidden: int) -> tuple[str, Affine]:
    """(function, affine of x and h) of a gate: an activation of ``W x + R h + b`` (or that
    sum alone: no function)."""
    fn, argument = _unwrap(value)
    return fn, _affine(argument, XH, hidden)


def _one(value: Sym, number: float) -> bool:
    return isinstance(value, Const) and scalar(value.values) == number


def _mix(value: Sym) -> tuple[Sym, Sym]:
    """(z, n) of ``z∘h + (1 − z)∘n`` or ``n + z∘(h − n)``, in any order of the operands."""
    _need(isinstance(value, Sum) and not value.terms and not value.consts and
          len(value.others) == 2)
    assert isinstance(value, Sum)
    first, second = value.others
    for a, b in ((first, second), (second, first)):
        # z∘h + (1 − z)∘n
        if isinstance(a, Mul) and isinstance(b, Mul):
            for z, h in ((a.a, a.b), (a.b, a.a)):
                if not _is("h")(h):
                    continue
                for one_minus, n in ((b.a, b.b), (b.b, b.a)):
                    if isinstance(one_minus, Sub) and _one(one_minus.a, 1.0) and one_minus.b is z:
                        return z, n
        # n + z∘(h − n)
        if isinstance(b, Mul):
            for z, difference in ((b.a, b.b), (b.b, b.a)):
                if isinstance(difference, Sub) and _is("h")(difference.a) and difference.b is a:
                    return z, a
    raise _NoMatch()


def parts(values: tuple[Sym, ...] | list[Sym]) -> Iterator[Sym]:
    """``values`` and every value they are built from, each once (at most 16384)."""
    seen: set[int] = set()
    pending: list[Sym] = list(values)
    while pending and len(seen) < 1 << 14:
        value = pending.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        yield value
        if isinstance(value, (Mul, Sub)):
            pending.extend((value.a, value.b))
        elif isinstance(value, Act):
            pending.append(value.arg)
        elif isinstance(value, Sum):
            pending.extend(value.others)
            pending.extend(term.source for term in value.terms)


def self_gated(values: tuple[Sym, ...]) -> list[str]:
    """The products ``v·f(v)`` of a value and an activation of itself (Keras's silu,
    ``x·sigmoid(x)``) that ``values`` are built from, named, each once."""
    found: dict[str, None] = {}
    for value in parts(values):
        if isinstance(value, Mul):
            for a, b in ((value.a, value.b), (value.b, value.a)):
                if isinstance(b, Act) and b.arg is a:
                    found[SELF_GATED.get(b.fn, f"v·{b.fn}(v)")] = None
    return list(found)


def _bias(found: Affine, side: str, hidden: int) -> np.ndarray:
    bias = found[side][1]
    return np.zeros(hidden, np.float32) if bias is None else np.asarray(bias, np.float32)


def _either(product: Mul, match: Callable[[Sym, Sym], Any]) -> Any:
    """``match`` of a product's two factors, in the first order it accepts."""
    for a, b in ((product.a, product.b), (product.b, product.a)):
        try:
            return match(a, b)
        except _NoMatch:
            continue
    raise _NoMatch()


def _said(fn: str) -> str:
    return SAID.get(fn, fn)


def _same_gates(cell: str, functions: dict[str, str]) -> str:
    """The one function the gates ``functions`` (gate → function) apply; a cell whose
    gates differ is refused."""
    if len(set(functions.values())) != 1:
        raise Unsupported(
            f"{'an' if cell == 'LSTM' else 'a'} {cell} whose gates apply different functions ("
            + ", ".join(f"{gate}: {_said(fn)}" for gate, fn in functions.items())
            + f"); the canonical {cell} applies one gate function to all of them")
    return next(iter(functions.values()))


def _cell(cell: str, gates: tuple[Affine, ...], hidden: int, functions: tuple[str, ...],
          fields: dict[str, Any]) -> Matched:
    """The fields and canonical parameters of ``cell`` from its gates (canonical order),
    the functions (Spec.activations order) and the other fields."""
    widths = {g["x"][0].shape[1:] for g in gates}
    _need(len(widths) == 1 and all(g["h"][0].shape == (hidden, hidden) for g in gates))
    params = {"weight_ih": np.concatenate([g["x"][0] for g in gates]),
              "weight_hh": np.concatenate([g["h"][0] for g in gates]),
              "bias_ih": np.concatenate([_bias(g, "x", hidden) for g in gates]),
              "bias_hh": np.concatenate([_bias(g, "h", hidden) for g in gates])}
    has_bias = any(g[side][1] is not None for g in gates for side in ("x", "h"))
    activations = tuple(ACTIVATIONS[fn] for fn in functions)
    if activations != tuple(ACTIVATIONS[fn.lower()] for fn in DEFAULTS[cell]):
        fields = {**fields, "activations": activations}
    return {"cell": cell, **fields}, params, has_bias


def _gru(new: tuple[Sym, ...], hidden: int) -> Matched:
    _need(len(new) == 1)
    z_value, n_value = _mix(new[0])
    z_fn, z = _gate(z_value, hidden)
    n_fn, inner = _unwrap(n_value)
    _need(isinstance(inner, Sum))
    assert isinstance(inner, Sum)
    if len(inner.others) == 1 and isinstance(inner.others[0], Mul):  # reset after
        product = inner.others[0]
        (r_fn, r), n_h = _either(product, lambda r_value, recurrent: (
            _gate(r_value, hidden), _affine(recurrent, {"h": _is("h")}, hidden)))
        n_x = _affine(Sum(inner.terms, (), inner.consts), {"x": _is("x")}, hidden)
        reset_after = True
        n = {"x": n_x["x"], "h": n_h["h"]}
    else:  # reset before: R_n (r∘h)
        holder: list[Sym] = []

        def reset_h(value: Sym) -> bool:
            if isinstance(value, Mul) and (_is("h")(value.a) or _is("h")(value.b)):
                holder.append(value.b if _is("h")(value.a) else value.a)
                return True
            return False

        n_found = _affine(inner, {"x": _is("x"), "rh": reset_h}, hidden)
        _need(len(holder) == 1)
        r_fn, r = _gate(holder[0], hidden)
        reset_after = False
        n = {"x": n_found["x"], "h": n_found["rh"]}
    gate_fn = _same_gates("GRU", {"update gate z": z_fn, "reset gate r": r_fn})
    return _cell("gru", (r, z, n), hidden, (gate_fn, n_fn), {"reset_after": reset_after})


def _simple(new: tuple[Sym, ...], hidden: int) -> Matched:
    _need(len(new) == 1)
    fn, found = _gate(new[0], hidden)
    _need(found["h"][0].shape == (hidden, hidden))
    if fn not in ("tanh", "relu"):
        raise Unsupported(f"a simple RNN whose activation is {_said(fn)}; rnnport's simple "
                           "RNN cells apply tanh (rnn_tanh) or relu (rnn_relu)")
    params = {"weight_ih": found["x"][0], "weight_hh": found["h"][0],
              "bias_ih": _bias(found, "x", hidden), "bias_hh": _bias(found, "h", hidden)}
    has_bias = any(found[side][1] is not None for side in ("x", "h"))
    return {"cell": f"rnn_{fn}"}, params, has_bias


def _lstm(new: tuple[Sym, ...], hidden: int) -> Matched:
    """``c' = f∘c + i∘g`` and ``h' = o∘act(c')`` (any order of the operands)."""
    _need(len(new) == 2)
    new_h, new_c = new
    _need(isinstance(new_c, Sum) and not new_c.terms and not new_c.consts and
          len(new_c.others) == 2)
    assert isinstance(new_c, Sum)
    found: tuple[Sym, Mul] | None = None
    first, second = new_c.others
    for kept, added in ((first, second), (second, first)):
        if isinstance(kept, Mul) and isinstance(added, Mul):
            for f_value, c in ((kept.a, kept.b), (kept.b, kept.a)):
                if _is("c")(c):
                    found = f_value, added
    _need(found is not None)
    assert found is not None
    f_fn, f = _gate(found[0], hidden)
    pairs = []  # (i, g) of i∘g: the factor with the forget gate's function is i
    for i_value, g_value in ((found[1].a, found[1].b), (found[1].b, found[1].a)):
        try:
            pairs.append((_gate(i_value, hidden), _gate(g_value, hidden)))
        except _NoMatch:
            continue
    _need(bool(pairs))
    (i_fn, i), (g_fn, g) = next((pair for pair in pairs if pair[0][0] == f_fn), pairs[0])
    _need(isinstance(new_h, Mul))
    assert isinstance(new_h, Mul)

    def output(o_value: Sym, out: Sym) -> tuple[str, tuple[str, Affine]]:
        h_fn, argument = _unwrap(out)
        _need(argument is new_c)
        return h_fn, _gate(o_value, hidden)

    h_fn, (o_fn, o) = _either(new_h, output)
    gate_fn = _same_gates("LSTM", {"input gate i": i_fn, "forget gate f": f_fn,
                                   "output gate o": o_fn})
    return _cell("lstm", (i, f, g, o), hidden, (gate_fn, g_fn, h_fn), {})


def match(new: tuple[Sym, ...], hidden: int) -> Matched | Unsupported | None:
    """The cell the new states ``new`` (``h``, and an LSTM's ``c``) are, with ``hidden``
    units: its Spec fields, canonical parameters and whether it has a bias; what keeps it
    from the canonical cell; or None when it is no cell rnnport reads."""
    for matcher in (_simple, _gru, _lstm):
        try:
            return matcher(new, hidden)
        except _NoMatch:
            continue
        except Unsupported as refusal:
            return refusal
    return None


def unmatched(new: tuple[Sym, ...], opaque: list[str]) -> str:
    """Why new states :func:`match` found no cell in are none: the operations the evaluator
    could not follow (``opaque``), a self-gated product, or values that do not combine."""
    unknown = ", ".join(dict.fromkeys(opaque))
    gated = self_gated(new)
    return (f"operations it could not follow: {unknown}" if unknown else
            f"it applies {', '.join(gated)}, which no cell rnnport reads applies" if gated
            else "every operation was followed, but their values do not combine as one of "
            "these cells")
