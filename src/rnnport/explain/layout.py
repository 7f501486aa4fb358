"""What ``explain`` found, as data: the traced arrays of both formats, the rules, the
counts and where each target block came from. The renderers draw it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ..spec import Spec
from .trace import TracedArray

__all__ = ["Block", "BufferMap", "Count", "Layout", "Origin"]


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


@dataclass(frozen=True)
class Block:
    """One run of a flat buffer: one parameter of one layer and direction, or zeros."""

    start: int
    stop: int
    kind: int  # trace.W, R, BW, BR, SUM (one stored bias), or ZERO
    layer: int  # -1 for zeros
    direction: int  # 0 forward, 1 backward; -1 for zeros
    name: str  # the canonical parameter, e.g. "weight_ih (15×4)"; "zeros" for zeros
    gates: tuple[tuple[str, int], ...]  # (canonical gate letter, first offset), buffer order

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def is_matrix(self) -> bool:
        return self.name.startswith("weight")


@dataclass(frozen=True)
class BufferMap:
    """Every block of one format's flat buffer holding a whole network, in buffer order."""

    fmt: str
    size: int
    blocks: tuple[Block, ...]

    @property
    def summary(self) -> str:
        """``matrices [0, 14400), then biases [14400, 15040)``, as the blocks lie."""
        matrices = [b for b in self.blocks if b.is_matrix]
        biases = [b for b in self.blocks if not b.is_matrix]
        if not matrices or not biases:
            return "matrices only" if matrices else "biases only"
        last_matrix = max(b.stop for b in matrices)
        first_bias = min(b.start for b in biases)
        if last_matrix <= first_bias:
            return (f"all matrices of all layers and directions first, [{matrices[0].start}, "
                    f"{last_matrix}), then all biases, [{first_bias}, {self.size})")
        return "matrices and biases interleave, layer by layer"


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
    # The whole network when it has more layers or directions than the one the tables show
    # (layer 0, forward), with each flat buffer's blocks and each format's total count.
    network: Spec | None = None
    buffers: tuple[BufferMap, ...] = ()
    network_counts: tuple[tuple[str, int], ...] = ()

    @property
    def cell(self) -> str:
        return self.spec.cell

    @property
    def whole(self) -> Spec:
        """The network explained: :attr:`network`, else the one layer of :attr:`spec`."""
        return self.network or self.spec

    @property
    def title(self) -> str:
        return (f"{self.whole.describe()}, input_size {self.spec.input_size}, hidden_size "
                f"{self.spec.hidden_size}: {self.source} → {self.target}")

    @property
    def scope(self) -> str:
        """What the element tables show of a network of several layers or directions; empty
        for one layer, one direction."""
        if self.network is None:
            return ""
        network = self.network
        later = (f"; layers after the first take D·H_out = {network.layer_input_size(1)} inputs"
                 if network.num_layers > 1 else "")
        flat = "; flat-buffer offsets are those of the whole network's buffer" \
            if self.buffers else ""
        return (f"The tables show layer 0, forward direction, under the names a one-layer "
                f"network's arrays have: every layer and direction is laid out alike{later}"
                f"{flat}.")
