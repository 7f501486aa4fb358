"""Every exception rnnport raises.

Each class is also a built-in exception, so callers that catch ``ValueError`` or
``ImportError`` keep working. Messages follow one shape::

    <where>: <what>; expected <X> (because …), got <Y>. <how to fix>.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "AmbiguousSourceError",
    "DTypeError",
    "DeviceError",
    "EngineFallbackWarning",
    "FormatError",
    "HelperFallbackWarning",
    "LimitError",
    "MissingDependencyError",
    "RnnportError",
    "ShapeError",
    "SpecError",
    "StackSpecError",
    "StateError",
    "UnknownFormatError",
    "UnknownOptionError",
    "UnsupportedFeatureError",
]


class RnnportError(Exception):
    """Base class of every rnnport error."""


class SpecError(RnnportError, ValueError):
    """A Spec field is missing, of the wrong type, or inconsistent with another."""


class StackSpecError(SpecError, AttributeError):
    """Raised by ``Stack.spec``: a stack of different networks has no single Spec."""


class ShapeError(RnnportError, ValueError):
    """One or more arrays have the wrong shape; the message lists every problem."""

    def __init__(self, problems: str | Iterable[str], *, hint: str = "") -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        text = self.problems[0] if len(self.problems) == 1 else (
            f"{len(self.problems)} shape problems:\n" + "\n".join(f"  - {p}" for p in self.problems)
        )
        super().__init__(f"{text}\n{hint}" if hint else text)


class DTypeError(RnnportError, TypeError, ValueError):
    """An array holds integers, complex numbers, or dtypes that do not agree."""


class StateError(RnnportError, ValueError):
    """An initial state or ``lengths`` argument does not fit the network or the input."""


class FormatError(RnnportError, ValueError):
    """A source does not hold what its format requires (missing keys, bad sizes)."""


class LimitError(FormatError):
    """A file, or a call, would take more than a resource limit allows (see
    :mod:`rnnport.budget`); ``limit`` is the limit's name."""

    def __init__(self, message: str, limit: str = "") -> None:
        super().__init__(message)
        self.limit = limit


class UnknownFormatError(FormatError, KeyError):
    """A format name that is not registered."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class AmbiguousSourceError(FormatError):
    """The format, or the network inside a source, cannot be told without help."""


class UnknownOptionError(RnnportError, TypeError):
    """A keyword option that the chosen format does not take."""


class UnsupportedFeatureError(RnnportError, NotImplementedError):
    """The target cannot express a feature of the model; converting would change the numbers."""


class MissingDependencyError(RnnportError, ImportError):
    """An optional framework is needed for this operation and is not installed."""


class DeviceError(RnnportError, ValueError):
    """A ``forward`` device that the chosen engine cannot run on, or that is not there."""


class EngineFallbackWarning(UserWarning):
    """``forward(engine=...)`` ran rnnport's own NumPy runtime instead of the engine asked for,
    because that engine cannot compute this network exactly; the message says why."""


class HelperFallbackWarning(UserWarning):
    """``forward``'s helper process (:mod:`rnnport.helper`) missed its deadline (it was
    stopped, or stuck) and was ended; the piece it was running ran in the calling process
    instead: the same numbers, more slowly. The message says what happened."""


def brief(error: BaseException, length: int = 200) -> str:
    """``Type: message`` on one line (``Type`` alone for an empty message), the message cut
    to ``length`` characters: how a report names an error that is not rnnport's own."""
    line = " ".join(str(error).split())[:length]
    return f"{type(error).__name__}: {line}" if line else type(error).__name__
