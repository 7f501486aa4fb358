"""Loading the golden cases written by ``tools/make_golden.py`` (see its docstring)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import rnnport

GOLDEN = Path(__file__).parent / "golden"


@dataclass
class Case:
    name: str
    meta: dict[str, Any]
    arrays: dict[str, np.ndarray]

    @property
    def framework(self) -> str:
        return self.meta["framework"]

    def native(self) -> Any:
        """The weights as the framework gave them (Keras nesting or a state_dict)."""
        if self.framework == "torch":
            prefix = "state_dict/"
            return {k[len(prefix):]: v for k, v in self.arrays.items() if k.startswith(prefix)}
        layers = sorted({int(k.split("/")[1]) for k in self.arrays if k.startswith("weights/")})
        nested = [[self.arrays[f"weights/{i}/{k}"] for k in range(self._count(i))]
                  for i in layers]
        return nested if self.meta["stack"] else nested[0]

    def _count(self, layer: int) -> int:
        return sum(1 for k in self.arrays if k.startswith(f"weights/{layer}/"))

    def read(self) -> rnnport.Model:
        return rnnport.read(self.native(), self.framework, **self.meta["read_options"])

    # -- states, regrouped to rnnport's layout --------------------------------------------

    def _keras_layers_per_part(self, model: rnnport.Model) -> list[int]:
        parts = model.parts if isinstance(model, rnnport.Stack) else (model,)
        return [part.spec.num_layers for part in parts]

    def _keras_state(self, model: rnnport.Model, kind: str) -> list[Any] | None:
        """Per part: ``(h, c)`` or ``h`` built from the per-Keras-layer arrays."""
        if f"h{kind}/0" not in self.arrays:
            return None
        out, layer = [], 0
        parts = model.parts if isinstance(model, rnnport.Stack) else (model,)
        for part, count in zip(parts, self._keras_layers_per_part(model), strict=False):
            indices = range(layer, layer + count)
            h = np.concatenate([self.arrays[f"h{kind}/{i}"] for i in indices])
            if part.spec.cell == "lstm":
                c = np.concatenate([self.arrays[f"c{kind}/{i}"] for i in indices])
                out.append((h, c))
            else:
                out.append(h)
            layer += count
        return out

    def initial_state(self, model: rnnport.Model) -> Any:
        if self.framework == "torch":
            if "h0" not in self.arrays:
                return None
            return (self.arrays["h0"], self.arrays["c0"]) if "c0" in self.arrays \
                else self.arrays["h0"]
        state = self._keras_state(model, "0")
        if state is None or isinstance(model, rnnport.Stack):
            return state
        return state[0]

    def final_state(self, model: rnnport.Model) -> Any:
        if self.framework == "torch":
            return (self.arrays["h_n"], self.arrays["c_n"]) if "c_n" in self.arrays \
                else self.arrays["h_n"]
        state = self._keras_state(model, "_n")
        return state if isinstance(model, rnnport.Stack) else state[0]

    @property
    def lengths(self) -> np.ndarray | None:
        return self.arrays.get("lengths")

    def valid_mask(self) -> np.ndarray:
        """(batch, time, 1) True where the framework's output is meaningful."""
        x = self.arrays["x"]
        if self.lengths is None or self.meta["compare"] == "all":
            return np.ones((*x.shape[:2], 1), dtype=bool)
        return (np.arange(x.shape[1])[None, :] < self.lengths[:, None])[..., None]


def load(name: str) -> Case:
    with np.load(GOLDEN / f"{name}.npz", allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(str(arrays.pop("meta")))
    return Case(name, meta, arrays)


def names(framework: str | None = None) -> list[str]:
    """The Keras and PyTorch cases (or one framework's); TF1 cases have their own loader in
    ``test_tf1_golden.py``, since they are checkpoints rather than weight lists."""
    manifest = json.loads((GOLDEN / "MANIFEST.json").read_text())
    frameworks = (framework,) if framework else ("keras_", "torch_")
    return [n for n in manifest["cases"] if n.startswith(frameworks)]


def flatten_state(state: Any) -> list[np.ndarray]:
    if isinstance(state, np.ndarray):
        return [state]
    out: list[np.ndarray] = []
    for item in state:
        out.extend(flatten_state(item))
    return out
