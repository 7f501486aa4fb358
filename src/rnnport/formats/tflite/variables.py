"""Resource variables in a ``.tflite`` model: which variable a resource tensor is, and the
value its ``CALL_ONCE`` initializer gives it.

TensorFlow's converter freezes a model's weights into constants, but keeps a variable the
model assigns (a stateful layer's state, Keras 3's dropout seed generator) as a resource;
``from_saved_model`` on a ``tf.saved_model.save`` folder keeps every variable so, weights
included. ``VAR_HANDLE`` gives a variable's handle (options ``container`` and
``shared_name``: the variable's identity, the same in every subgraph), ``READ_VARIABLE``
its value, ``ASSIGN_VARIABLE`` a new one. A ``CALL_ONCE`` in the main subgraph runs its
initializer subgraph (``init_subgraph_index``) on the first invocation; the
``ASSIGN_VARIABLE`` operators there give the variables their first values. A variable
nothing assigns holds no value: LiteRT's ``READ_VARIABLE`` fails on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...io import tflite_schema as tfl

__all__ = ["ASSIGN_VARIABLE", "CALL_ONCE", "READ_VARIABLE", "VAR_HANDLE", "Variables"]

CALL_ONCE, VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE = 129, 142, 143, 144

Key = tuple[str, str]  # (container, shared_name)


@dataclass
class Variables:
    """A model's resource variables, found in one pass over its operators."""

    model: tfl.Model
    handles: dict[tuple[int, int], Key] = field(default_factory=dict)  # (subgraph, tensor)
    names: dict[Key, str] = field(default_factory=dict)  # a handle tensor's name, for messages
    initial: dict[Key, tuple[int, int]] = field(default_factory=dict)  # (subgraph, value)
    initializers: dict[Key, int] = field(default_factory=dict)  # the subgraph assigning it
    assigned: dict[Key, list[tuple[int, int]]] = field(default_factory=dict)  # elsewhere

    @classmethod
    def of(cls, model: tfl.Model) -> Variables:
        found = cls(model)
        init: set[int] = set()
        for graph in model.subgraphs[:1]:
            for op in graph.operators:
                if model.operator_code(op) == CALL_ONCE:
                    index = getattr(op.builtin_options, "values", {}).get("init_subgraph_index")
                    if isinstance(index, int) and 0 < index < len(model.subgraphs):
                        init.add(index)
        for subgraph, graph in enumerate(model.subgraphs):
            for op in graph.operators:
                if model.operator_code(op) == VAR_HANDLE and len(op.outputs) == 1:
                    values = getattr(op.builtin_options, "values", {})
                    key = (str(values.get("container", "")), str(values.get("shared_name", "")))
                    if not key[1]:  # no shared name: the handle's own tensor names it
                        key = ("", f"subgraphs[{subgraph}]/{graph.tensors[op.outputs[0]].name}")
                    found.handles[subgraph, op.outputs[0]] = key
                    found.names.setdefault(key, graph.tensors[op.outputs[0]].name)
        for subgraph, graph in enumerate(model.subgraphs):
            for k, op in enumerate(graph.operators):
                if model.operator_code(op) != ASSIGN_VARIABLE or len(op.inputs) != 2:
                    continue
                variable = found.handles.get((subgraph, op.inputs[0]))
                if variable is None:
                    continue
                if subgraph in init and variable not in found.initial:
                    found.initial[variable] = (subgraph, op.inputs[1])
                    found.initializers[variable] = subgraph
                else:
                    found.assigned.setdefault(variable, []).append((subgraph, k))
        return found

    def describe(self, key: Key) -> str:
        """``'name'`` and where its first value comes from."""
        name = self.names.get(key, key[1])
        if key in self.initial:
            return f"{name!r} (set by the CALL_ONCE initializer, subgraph {self.initializers[key]})"
        return f"{name!r} (which nothing in the file initializes)"
