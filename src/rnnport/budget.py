"""The resource limits every reader obeys, and how to raise them.

A file is data someone else made. Whatever it claims, reading it costs memory and time in
proportion to its size, and a call costs what its arguments really hold. Each limit has a
name, a default relative to what it measures, and one way to change it:

>>> import rnnport
>>> with rnnport.limits(expansion=64):        # doctest: +SKIP
...     rnn = rnnport.read("big_graph.onnx")

or ``--limit expansion=64`` on the command line. A refusal is a :class:`LimitError` that
names the limit it hit, what it allows here and how to raise it.

=============  ==========================================================================
``expansion``  Bytes a read may build per byte of the file (counted 4 MiB larger than it
               is): arrays decoded, expanded from shared references, computed while
               folding a graph, and the parameters of the network it describes. Default 4
               (a 1 MB file may build 20 MB).
``work``       Parsing steps per byte of the file (counted 1,024 bytes larger than it is):
               tables and vectors visited, loop bodies evaluated. Default 4.
``elements``   Values one ``forward`` call, or one ``RNN.random``, may hold at once.
               Default 2³¹.
``seconds``    Seconds a reader run in its own process may take (plus 1 s per 10 MB).
               Default 20.
=============  ==========================================================================

Limits are kept per thread and per task (a :mod:`contextvars` variable): raising one in a
``with`` block changes nothing elsewhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType

from .errors import LimitError, SpecError, UnknownOptionError

__all__ = ["LIMITS", "Limit", "LimitError", "Meter", "allowance", "current", "exceeded", "limits",
           "value"]


@dataclass(frozen=True)
class Limit:
    """One limit: its name, default, what it measures and how an allowance is made of it."""

    name: str
    default: float
    unit: str  # how a value reads: "4 bytes per byte of the file, plus 16 MiB"
    meaning: str
    slack: int = 0  # added to a file's size: what a small file may take beyond its size
    per_size: bool = True  # relative to a file's size (else an absolute count)

    def describe(self, value: float) -> str:
        number = f"{value:g}" if value < 1e6 else f"{int(value):,}"
        return f"{number} {self.unit}"


LIMITS: dict[str, Limit] = {limit.name: limit for limit in (
    Limit("expansion", 4, "bytes per byte of the file, counted 4 MiB larger than it is",
          "memory a read may build: arrays decoded or expanded, values computed while folding "
          "a graph, the parameters of the network a file describes", slack=4 << 20),
    Limit("work", 4, "steps per byte of the file, counted 1,024 bytes larger than it is",
          "parsing work: objects visited, loop bodies evaluated", slack=1024),
    Limit("elements", 2**31, "values",
          "the values one forward call or one RNN.random may hold at once", per_size=False),
    Limit("seconds", 20, "s, plus 1 s per 10 MB of the file",
          "how long a reader run in its own process may take", per_size=False),
)}

_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "rnnport_command_line", default=False)
_VALUES: contextvars.ContextVar[Mapping[str, float]] = contextvars.ContextVar(
    "rnnport_limits", default=MappingProxyType({}))


def value(name: str) -> float:
    """The limit ``name`` as it stands here (raised in a ``with limits(…)`` block, or its
    default)."""
    return _VALUES.get().get(name, LIMITS[name].default)


def current() -> dict[str, float]:
    """Every limit's value as it stands here."""
    return {name: value(name) for name in LIMITS}


def allowance(name: str, size: int = 0) -> int:
    """What limit ``name`` allows for a file of ``size`` bytes: value × (size + slack) for
    the limits relative to a size; the value itself for the others."""
    limit = LIMITS[name]
    allowed = value(name) if not limit.per_size else value(name) * (max(size, 0) + limit.slack)
    return int(min(allowed, sys.maxsize))  # a limit raised out of sight allows everything


def exceeded(where: str, what: str, name: str, size: int | None = None,
             needed: float | None = None) -> LimitError:
    """The error for ``what`` (“the arrays would take 3,000,000,000 bytes”) past limit
    ``name``; ``size`` is the file's size when the limit is relative to it, ``needed`` what
    the refused call or read would take, when known (the suggested value then covers it)."""
    limit = LIMITS[name]
    now = value(name)
    allowed = f" ({allowance(name, size):,} for this file's {size:,} bytes)" \
        if size is not None and limit.per_size else ""
    suggestion = now * 4
    if needed is not None:
        base = max(size or 0, 0) + limit.slack if limit.per_size else 1
        suggestion = max(suggestion, _round_up(needed / max(base, 1)))
    suggestion = min(suggestion, 1e18)
    number = f"{suggestion:g}" if suggestion < 1e6 else str(int(suggestion))
    why = ("A damaged or hostile file can claim any size, so nothing was read. If you trust "
           "it, raise the limit" if limit.per_size else "Nothing was done. To allow it, raise "
           "the limit")
    how = (f"--limit {name}={number}" if _COMMAND_LINE.get() else
           f"with rnnport.limits({name}={number}): … in Python, or --limit {name}={number} on "
           "the command line")
    return LimitError(
        f"{where}: {what}; that is past the limit {name!r}, {limit.describe(now)}{allowed}, "
        f"which bounds {limit.meaning}. {why}: {how}.", name)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Refusals within say how to raise a limit on the command line alone (``--limit``)."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def _round_up(number: float) -> float:
    """``number`` rounded up to 1, 2 or 5 times a power of ten."""
    scale = 10.0 ** math.floor(math.log10(number)) if number > 0 else 1.0
    return next(step * scale for step in (1, 2, 5, 10) if step * scale >= number)


@contextmanager
def limits(**values: float) -> Iterator[dict[str, float]]:
    """Raise (or lower) limits for the reads and calls inside the ``with`` block:
    ``with rnnport.limits(expansion=64, seconds=120): rnnport.read(path)``. Yields every
    limit's value inside the block."""
    unknown = sorted(set(values) - set(LIMITS))
    if unknown:
        raise UnknownOptionError(f"rnnport.limits: no limit named {', '.join(map(repr, unknown))}"
                                 f"; the limits are {', '.join(LIMITS)}.")
    for name, number in values.items():
        if isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0 \
                or number == float("inf"):
            raise SpecError(f"rnnport.limits: {name}={number!r}; expected a positive, finite "
                            f"number ({LIMITS[name].unit}).")
    token = _VALUES.set(MappingProxyType({**_VALUES.get(), **{k: float(v) for k, v in values.items()}}))
    try:
        yield current()
    finally:
        _VALUES.reset(token)


class Meter:
    """What one read spends of limit ``name`` (relative to a file of ``size`` bytes), counted
    *before* the work or memory it stands for is taken: :meth:`charge` adds units and raises
    the limit's :class:`LimitError` once they pass what the limit allows. ``what`` says what
    the units are (“bytes of arrays decoded”, “steps”) in that error."""

    __slots__ = ("allowed", "name", "scale", "size", "spent", "what", "where")

    def __init__(self, name: str, size: int, where: str, what: str, scale: int = 1) -> None:
        """``scale``: units the meter allows per unit the limit allows (what one unit of the
        limit is worth in the units counted here)."""
        self.name, self.size, self.where, self.what = name, max(size, 0), where, what
        self.scale = scale
        self.allowed = min(allowance(name, self.size) * scale, sys.maxsize)
        self.spent = 0

    @property
    def left(self) -> int:
        """Units still allowed."""
        return max(self.allowed - self.spent, 0)

    def charge(self, units: int, doing: str = "") -> None:
        """Count ``units`` about to be spent; ``doing`` says on what, for the error."""
        self.spent += max(units, 0)
        if self.spent > self.allowed:
            on = f" ({doing})" if doing else ""
            raise exceeded(self.where, f"reading it would take {self.spent:,} {self.what}{on}",
                           self.name, self.size, self.spent // self.scale)
