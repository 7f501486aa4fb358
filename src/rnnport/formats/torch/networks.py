"""Where the recurrent networks of a PyTorch file (or dict) sit.

A state_dict may be the whole file, or one entry of a checkpoint nested anywhere: under
``state_dict`` (Lightning), ``model_state_dict``, ``model_state``, ``net``, ``params``,
``module`` (DeepSpeed), beside an optimizer's state, an EMA copy, hyper-parameters; its
keys may carry module paths (``module.`` from DataParallel, ``model.`` from Lightning,
``encoder.rnn.`` and ``decoder.rnn.`` side by side). :func:`find` walks the whole tree of
dicts, lists and tuples (each container once, at most :data:`MAX_DEPTH` deep) and groups
every key that names a PyTorch recurrent parameter (``weight_ih_l0``, a cell's
``weight_ih``) by where it sits: the path of dict keys and list positions to its mapping
(``container``) and the part of the key before the parameter's name (``inner``). A group's
``prefix`` is both joined by dots, as the tree's own names would be:
``state_dict.model.rnn.``. ``prefix=`` picks a group by that, or by its ``inner`` part
alone when only one group has it, with or without the trailing dot.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import AmbiguousSourceError, FormatError
from ...io.pickled import Global, Opaque, preview
from .._common import layer_number
from .pt2 import GraphNetwork, count_check

__all__ = ["KEY", "MAX_DEPTH", "Group", "descend", "find", "key_text", "match", "opaque_values",
           "pick"]

# ``weight_ih_l0``, ``bias_hh_l1_reverse`` (nn.LSTM/GRU/RNN), ``weight_ih`` (the cells).
KEY = re.compile(r"^(?P<prefix>.*?)(?P<name>weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)"
                 r"(?:_l(?P<layer>[0-9]+)(?P<reverse>_reverse)?)?$")
MAX_DEPTH = 32


def match(key: Any) -> re.Match[str] | None:
    """``key`` as a PyTorch recurrent parameter's name; a cell's (no layer suffix) only under
    a dotted module path, never one holding ``/`` (other formats' paths)."""
    found = KEY.match(key) if isinstance(key, str) else None
    if found and found["layer"] is None and "/" in found["prefix"]:
        return None
    return found


@dataclass(eq=False)
class Group:
    """One network's keys: where they sit, and their values by (layer, direction) → name."""

    container: tuple[str, ...]
    inner: str
    mapping: Mapping[Any, Any] | None
    entries: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    keys: dict[tuple[int, int, str], Any] = field(default_factory=dict)  # → the key in mapping
    cells: bool = False  # it holds a cell's keys (no layer suffix)
    layered: bool = False  # it holds a layered network's keys
    graph: GraphNetwork | None = None

    @property
    def prefix(self) -> str:
        return "".join(f"{part}." for part in self.container) + self.inner

    def describe(self) -> str:
        layers = 1 + max(layer for layer, _ in self.entries)
        directions = 1 + max(direction for _, direction in self.entries)
        what = f"{layers} layer(s), {directions} direction(s)"
        if self.graph is not None:
            what += (f", node {self.graph.node!r} "
                     f"({self.graph.target.removeprefix('torch.ops.')})")
        return what


def key_text(key: Any) -> str:
    """A dict key or list position as a part of a key path, or in a message."""
    return key if isinstance(key, str) else str(key) if isinstance(key, int) and \
        not isinstance(key, bool) and abs(key) < 2**63 else preview(key)


class _Walk:
    """A breadth-first walk over the containers of a tree, each met once, at most
    :data:`MAX_DEPTH` deep; a container's path is kept as a link to its parent's (an index
    and a key), and spelt out only when asked for, so the walk costs a few words per
    container whatever the depth."""

    def __init__(self, tree: Any) -> None:
        self.links: list[tuple[int, Any]] = [(-1, None)]  # (parent link, key) per container
        self.depths = [0]
        self.pending: deque[tuple[Any, int]] = deque([(tree, 0)])
        self.seen: set[int] = set()

    def __iter__(self) -> Walk:
        while self.pending:
            node, link = self.pending.popleft()
            if id(node) in self.seen:
                continue
            self.seen.add(id(node))
            yield node, link

    def enter(self, value: Any, parent: int, key: Any) -> None:
        """Walk ``value`` (met under ``key`` in the container of link ``parent``) later."""
        if self.depths[parent] < MAX_DEPTH and id(value) not in self.seen:
            self.links.append((parent, key))
            self.depths.append(self.depths[parent] + 1)
            self.pending.append((value, len(self.links) - 1))

    def path(self, link: int) -> tuple[str, ...]:
        parts = []
        while link > 0:
            link, key = self.links[link]
            parts.append(key_text(key))
        return tuple(reversed(parts))


Walk = Iterator[tuple[Any, int]]


def find(tree: Any, graphs: Sequence[GraphNetwork] = (), location: str = "",
         models: int = 1) -> list[Group]:
    """Every group of recurrent keys in ``tree``, in the order a breadth-first walk meets
    them; for a ``.pt2`` archive with recurrent nodes (``graphs``), one group per distinct
    node, its parameters assigned by the node's argument order."""
    if graphs:
        return _graph_groups(tree, graphs, location, models)
    groups: dict[tuple[int, str], Group] = {}
    walk = _Walk(tree)
    for node, link in walk:
        children: Any
        if isinstance(node, Mapping):
            children = node.items()
        elif isinstance(node, (list, tuple)):
            children = enumerate(node)
        else:
            continue
        for key, value in children:
            found = match(key) if isinstance(node, Mapping) else None
            if found is not None:
                group = groups.get((link, found["prefix"]))
                if group is None:
                    group = groups[(link, found["prefix"])] = Group(walk.path(link),
                                                                    found["prefix"], node)
                layer = 0 if found["layer"] is None else layer_number(found["layer"], location)
                direction = 1 if found["reverse"] else 0
                group.entries.setdefault((layer, direction), {})[found["name"]] = value
                group.keys[(layer, direction, found["name"])] = key
                if found["layer"] is None:
                    group.cells = True
                else:
                    group.layered = True
            elif isinstance(value, (Mapping, list, tuple)):
                walk.enter(value, link, key)
    return list(groups.values())


def _graph_groups(tree: Any, graphs: Sequence[GraphNetwork], location: str,
                  models: int) -> list[Group]:
    groups: dict[tuple[str, tuple[str | None, ...]], Group] = {}
    for network in graphs:
        if (network.model, network.params) in groups:
            continue  # the same weights again: a cell stepped once per time step
        container = (network.model,) if models > 1 else ()
        mapping = tree[network.model] if models > 1 else tree
        if network.is_cell:
            layout = [(0, 0, name) for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
        else:
            each = count_check(network, location)
            names = ["weight_ih", "weight_hh", *(["bias_ih", "bias_hh"] * network.has_biases),
                     *(["weight_hr"] if each in (3, 5) else [])]
            directions = 2 if network.bidirectional else 1
            layout = [(layer, direction, name) for layer in range(network.num_layers)
                      for direction in range(directions) for name in names]
        named = [name for name in network.params if name is not None]
        first = match(named[0]) if named else None
        inner = first["prefix"] if first else _shared_path(named)
        group = Group(container, inner, mapping, graph=network, cells=network.is_cell,
                      layered=not network.is_cell)
        for (layer, direction, name), fqn in zip(layout, network.params, strict=False):
            if fqn is None:
                continue
            if fqn not in mapping:
                raise FormatError(f"{location}: node {network.node!r} uses {fqn!r}, which the "
                                  "archive does not store; it is truncated or damaged.")
            group.entries.setdefault((layer, direction), {})[name] = mapping[fqn]
            group.keys[(layer, direction, name)] = fqn
        groups[(network.model, network.params)] = group
    return list(groups.values())


def descend(tree: Any, container: Sequence[str]) -> Any:
    """What sits at ``container`` (a group's path) in ``tree``, or None."""
    node = tree
    for segment in container:
        if isinstance(node, Mapping):
            node = next((value for key, value in node.items() if key_text(key) == segment), None)
        elif isinstance(node, (list, tuple)) and segment.isascii() and segment.isdigit() and \
                int(segment) < len(node):
            node = node[int(segment)]
        else:
            return None
    return node


def _shared_path(names: Sequence[str]) -> str:
    """The module path all ``names`` share, with its dot (``rnn.`` of ``rnn.w``, ``rnn.v``)."""
    parts = [name.split(".")[:-1] for name in names]
    shared = []
    for column in zip(*parts, strict=False):
        if len(set(column)) > 1:
            break
        shared.append(column[0])
    return "".join(f"{part}." for part in shared)


def pick(groups: Sequence[Group], prefix: Any, location: str) -> Group:
    """The group ``prefix=`` names (see the module docstring), or the only one."""
    if prefix is None:
        if len(groups) > 1:
            listing = ", ".join(repr(group.prefix) for group in groups)
            raise AmbiguousSourceError(f"{location}: holds {len(groups)} RNNs, with key prefixes "
                                       f"{listing}; pass prefix= with one of them.")
        return groups[0]
    if not isinstance(prefix, str):
        raise FormatError(f"{location}: no RNN with prefix {prefix!r}; expected a string, one of "
                          f"{', '.join(repr(group.prefix) for group in groups)}.")
    wanted = {prefix, f"{prefix}."} if prefix and not prefix.endswith(".") else {prefix}
    for attribute in ("prefix", "inner"):
        chosen = [group for group in groups if getattr(group, attribute) in wanted]
        if len(chosen) == 1:
            return chosen[0]
        if len(chosen) > 1:
            raise AmbiguousSourceError(
                f"{location}: prefix={prefix!r} fits {len(chosen)} RNNs, "
                f"{', '.join(repr(group.prefix) for group in chosen)}; pass the whole prefix.")
    raise FormatError(f"{location}: no RNN with prefix {prefix!r}; prefixes found: "
                      f"{', '.join(repr(group.prefix) for group in groups)}.")


def opaque_values(tree: Any, most: int = 8) -> list[tuple[str, str]]:
    """``(path, global)`` of the first ``most`` objects in ``tree`` that the pickle would
    have built by calling a global rnnport does not run (a custom class, a Namespace)."""
    found: list[tuple[str, str]] = []
    walk = _Walk(tree)
    for node, link in walk:
        if isinstance(node, (Opaque, Global)):
            made = node.made_by if isinstance(node, Opaque) else node
            found.append((".".join(walk.path(link)) or "the whole file",
                          preview(made, 80)[1:-1]))
            if len(found) == most:
                break
            continue
        children: Any = node.items() if isinstance(node, Mapping) else \
            enumerate(node) if isinstance(node, (list, tuple)) else ()
        for key, value in children:
            if isinstance(value, (Mapping, list, tuple, Opaque, Global)):
                walk.enter(value, link, key)
    return found
