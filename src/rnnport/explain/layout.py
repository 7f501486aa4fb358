"""What ``explain`` found, as data: the traced arrays of both formats, the rules, the
counts and where each target block came from. The renderers draw it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..spec import Spec
from .trace import TracedArray

__all__ = ["Count", "Layout", "Origin"]


@dataclass(frozen=True)
class Count:
    """Parameters as one format stores them, with the formula."""

    fmt: str
    total: int
    formula: str
    detail: str


@dataclass(frozen=True)
class Origin:
    """Where one block of a target array came from in the source format."""

    array: str  # the target array's name
    where: str  # the block as an index of that array (empty: all of it)
    offset: int | None  # the block's first element in a flat buffer
    size: int
    block: str  # "W_r (3×2)", or the name of a slot that holds zeros
    source: str  # "kernel[:, 3:6]ᵀ", or why the slot holds zeros


@dataclass(frozen=True, eq=False)
class Layout:
    """The traced layouts of one cell in two formats."""

    spec: Spec
    source: str
    target: str
    source_arrays: tuple[TracedArray, ...]
    target_arrays: tuple[TracedArray, ...]
    rules: tuple[str, ...]
    counts: tuple[Count, ...]
    # Each canonical gate letter → its name and what the two formats call it.
    gate_names: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    origins: tuple[Origin, ...] = ()

    @property
    def cell(self) -> str:
        return self.spec.cell

    @property
    def title(self) -> str:
        return (f"{self.spec.describe()}, input_size {self.spec.input_size}, hidden_size "
                f"{self.spec.hidden_size}: {self.source} → {self.target}")
