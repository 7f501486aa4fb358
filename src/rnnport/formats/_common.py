"""Helpers shared by the format modules: names, optional imports, tensors, biases."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

from ..errors import (
    AmbiguousSourceError,
    FormatError,
    MissingDependencyError,
    UnsupportedFeatureError,
)
from ..gates import CANONICAL, block
from ..model import as_array
from ..spec import Spec

__all__ = [
    "MAX_LISTED",
    "by_layer",
    "close_matches",
    "combine_biases",
    "is_path",
    "layer_number",
    "listed",
    "require",
    "sum_exact",
    "to_numpy",
]


MAX_LISTED = 8  # names a note lists before "…"

_Network = TypeVar("_Network")


def by_layer(networks: Sequence[_Network], layer: str | None, names: Callable[[_Network],
             list[str]], describe: Callable[[_Network], str], where: str,
             option: str = "layer") -> _Network:
    """The one of ``networks`` holding the recurrent layer named ``layer`` (``names`` gives
    a network's layer names), or the only one; else a FormatError listing the layers, or an
    AmbiguousSourceError listing the networks (``describe``) and saying to pass ``option=``."""
    if layer is not None:
        for network in networks:
            if layer in names(network):
                return network
        every = [name for network in networks for name in names(network)]
        raise FormatError(f"{where}: no recurrent layer named {layer!r}; the recurrent layers "
                          f"are {listed(every)}.")
    if len(networks) > 1:
        raise AmbiguousSourceError(
            f"{where}: holds {len(networks)} recurrent networks ("
            + "; ".join(describe(network) for network in networks[:MAX_LISTED])
            + f"); pass {option}= with the name of one of their layers (e.g. "
            f"{option}={names(networks[0])[0]!r}).")
    return networks[0]


def layer_number(text: str, where: str) -> int:
    """The layer number a name holds (``_l3``, ``cell_3``): at most nine digits, so a
    hostile name cannot make a number Python refuses to convert. Callers that build
    anything per layer check the count against what the source holds."""
    if len(text) > 9:
        shown = f"{text[:12]}… ({len(text)} digits)"
        raise FormatError(f"{where}: layer number {shown}; no network has that many layers. "
                          "The file is damaged or built to exhaust memory.")
    return int(text)


def listed(names: Iterable[str]) -> str:
    """``a, b, c`` — at most :data:`MAX_LISTED` names, then how many in all."""
    names = list(names)
    return ", ".join(names[:MAX_LISTED]) + (f", … ({len(names)} in all)"
                                            if len(names) > MAX_LISTED else "")


def is_path(source: Any) -> bool:
    """Whether ``source`` names a file (a ``str`` or ``os.PathLike``)."""
    import os

    return isinstance(source, (str, os.PathLike))


def close_matches(word: str, candidates: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` or an empty string."""
    import difflib  # only when a name is misspelt

    found = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" Did you mean {found[0]!r}?" if found else ""


def require(module: str, *, extra: str, purpose: str) -> Any:
    """Import an optional framework, or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingDependencyError(
            f"{purpose} needs {module!r}, which is not installed ({error}). "
            f"{install_hint(module, extra)}") from error


def install_hint(module: str, extra: str) -> str:
    """How to install what an optional module needs, into the environment rnnport runs in."""
    return (f"Install it with `pip install {module.split('.')[0]}`, or install rnnport with "
            f"its {extra!r} extra: `pip install 'rnnport[{extra}]'` from an index, "
            f"`pip install -e '.[{extra}]'` in a clone.")


def to_numpy(value: Any, location: str = "an input array") -> np.ndarray:
    """A framework tensor or array-like as a NumPy array, without importing any framework.

    bfloat16 tensors become float32 (exact); everything else keeps its dtype.
    """
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach") and hasattr(value, "cpu"):  # torch.Tensor
        try:
            tensor = value.detach().cpu()
            if str(tensor.dtype) == "torch.bfloat16":
                tensor = tensor.float()
            return tensor.numpy()
        except (TypeError, RuntimeError, NotImplementedError, ValueError) as error:
            # sparse, quantized, float8, meta and nested tensors have no NumPy form
            raise FormatError(f"{location}: a {_tensor_kind(value)} tensor, which has no NumPy "
                              f"array form ({type(error).__name__}: {str(error)[:200]}); "
                              "expected dense float weights.") from None
    if hasattr(value, "numpy") and callable(value.numpy):  # tf / keras tensors and variables
        return np.asarray(value.numpy())
    return as_array(value, location)


def _tensor_kind(value: Any) -> str:
    return " ".join(str(getattr(value, name, "?")) for name in ("layout", "dtype", "device"))


def sum_exact(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """``first + second``, returning an operand unchanged (same bits) when the other is all zero."""
    if not second.any():
        return np.array(first, copy=True)
    if not first.any():
        return np.array(second, copy=True)
    return first + second


def combine_biases(spec: Spec, named: Mapping[str, np.ndarray], into: str, where: str,
                   target: str) -> np.ndarray:
    """One bias vector (canonical order) computing what ``bias_ih`` and ``bias_hh`` compute.

    ``into`` names the slot the target keeps (``"ih"`` or ``"hh"``). Summing is exact in
    function for every cell but the reset-after GRU, whose ``bR_n`` sits inside ``r∘(…)``
    and ``bW_n`` outside it: there, the candidate block of the slot that is dropped must be
    zero, or the target cannot express the network.
    """
    bias_ih, bias_hh = named["bias_ih"], named["bias_hh"]
    if spec.cell == "gru" and spec.reset_after:
        dropped = bias_hh if into == "ih" else bias_ih
        if block(dropped, CANONICAL["gru"], "n").any():
            side = "recurrent" if into == "ih" else "input"
            raise UnsupportedFeatureError(
                f"{where}: {target} keeps one GRU bias, but this reset-after GRU has a nonzero "
                f"{side}-side candidate bias (b{'R' if into == 'ih' else 'W'}_n), which acts "
                f"{'inside' if into == 'ih' else 'outside'} r∘(…) and cannot be moved to the "
                f"other slot without changing the output. Keep both biases (e.g. cuDNN "
                f"bias_mode='double', Keras GRU reset_after=True).")
    return sum_exact(bias_ih, bias_hh)


def describe(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of shape {value.shape} and dtype {value.dtype}"
    if isinstance(value, (list, tuple)):
        return f"a {type(value).__name__} of {len(value)} item(s)"
    if isinstance(value, Mapping):
        return f"a mapping with {len(value)} key(s)"
    return f"a {type(value).__module__}.{type(value).__qualname__}"
