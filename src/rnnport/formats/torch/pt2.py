"""``torch.export`` archives (``.pt2``), read without PyTorch.

``torch.export.save`` (PyTorch 2.6 and later; ExecuTorch and AOTInductor start from it)
writes a zip under one root folder (``<root>/``)::

    archive_format                         "pt2"
    models/<model>.json                    the ExportedProgram: graph_module.graph.nodes,
                                           graph_module.signature.input_specs
    data/weights/<model>_weights_config.json
                                           {"config": {fqn: {"path_name", "use_pickle",
                                            "tensor_meta": {"dtype", "sizes", "strides",
                                            "storage_offset", "layout"}}}}
    data/weights/weight_<n>                raw little-endian bytes; several parameters may
                                           view one file (sizes, strides and an offset, in
                                           elements)
    data/constants/<model>_constants_config.json, data/constants/tensor_<n>
                                           lifted tensor constants, the same way

Earlier releases wrote ``serialized_exported_program.json`` with the state_dict as a
``torch.save`` zip in ``serialized_state_dict.pt`` (and ``data/weights/<model>.pt`` in
between); both are read too. ``tensor_meta.dtype`` is PyTorch's ScalarType number
(:data:`SCALAR_TYPES`), sizes and strides ``{"as_int": n}``; layout 7 is strided, the only
one read. A tensor stored as a pickle (``use_pickle``, a tensor subclass) is read by the
restricted pickle machine, as any ``torch.save`` file.

The graph says what the parameters are: a node ``torch.ops.aten.lstm.input`` (``gru``,
``rnn_tanh``, ``rnn_relu``; ``.data`` for packed sequences) takes ``params`` — per layer and
direction ``w_ih, w_hh[, b_ih, b_hh][, w_hr]`` — with ``has_biases``, ``num_layers`` and
``bidirectional``; ``aten.lstm_cell.default`` (``gru_cell``, ``rnn_tanh_cell``,
``rnn_relu_cell``: an ``nn.LSTMCell`` stepped over time, a node per step) takes ``w_ih, w_hh,
b_ih, b_hh``. Each parameter is an input of the graph that ``input_specs`` maps to its
name in the state_dict (``p_rnn_weight_ih_l0`` → ``rnn.weight_ih_l0``). :func:`read_pt2`
returns the tensors under those names and, per recurrent node, a :class:`GraphNetwork`: the
cell (a relu RNN included, which no state_dict records), the layers and the parameter names
in the node's order. A recurrent parameter that no stored tensor feeds (computed in the
graph) is refused by name.
"""

from __future__ import annotations

import posixpath
import zipfile
from dataclasses import dataclass
from typing import Any

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...io import jsontext
from ...io.archive import member_data, open_zip, read_member
from ...io.pickled import preview
from .tensors import DTYPES, Ledger, Loaded, Storage, TensorRef, read_zip_tree, zip_root

__all__ = ["SCALAR_TYPES", "GraphNetwork", "read_pt2"]

SCALAR_TYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16",
                7: "float32", 8: "float64", 9: "complex32", 10: "complex64", 11: "complex128",
                12: "bool", 13: "bfloat16", 28: "uint16", 29: "float8_e4m3fn",
                30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz",
                33: "float8_e8m0fnu", 34: "uint32", 35: "uint64"}
STRIDED = 7
# aten operator → (cell, whether it is one step of a cell)
OPERATORS = {f"torch.ops.aten.{name}.{overload}": (cell, False)
             for name, cell in (("lstm", "lstm"), ("gru", "gru"), ("rnn_tanh", "rnn_tanh"),
                                ("rnn_relu", "rnn_relu"))
             for overload in ("input", "data")}
OPERATORS.update({f"torch.ops.aten.{name}_cell.default": (cell, True)
                  for name, cell in (("lstm", "lstm"), ("gru", "gru"),
                                     ("rnn_tanh", "rnn_tanh"), ("rnn_relu", "rnn_relu"))})
CELL_ARGUMENTS = ("w_ih", "w_hh", "b_ih", "b_hh")
PROGRAM_DEPTH = 256  # JSON levels of an exported program (graphs hold graphs); read flat


@dataclass(frozen=True)
class GraphNetwork:
    """A recurrent node of a ``.pt2`` graph: its cell, shape, and the state_dict names of its
    parameters in the node's order (``None`` for an absent cell bias)."""

    model: str
    node: str
    target: str
    cell: str
    is_cell: bool
    num_layers: int
    bidirectional: bool
    has_biases: bool
    params: tuple[str | None, ...]


def read_pt2(archive: zipfile.ZipFile, where: str, size: int) -> Loaded:
    """The tensors of every model in a ``.pt2`` archive (by state_dict name; under the
    model's name when there are several) and their recurrent nodes."""
    names = archive.namelist()
    ledger = Ledger(where, size)
    formats = [name for name in names if posixpath.basename(name) == "archive_format"]
    if formats:
        root = formats[0][: -len("archive_format")]
        models = sorted(name[len(root) + len("models/"):-len(".json")] for name in names
                        if name.startswith(f"{root}models/") and name.endswith(".json")
                        and "/" not in name[len(root) + len("models/"):])
        if not models:
            raise FormatError(f"{where}: a .pt2 archive with no models/<name>.json; it holds "
                              "AOTInductor or ExecuTorch output alone, compiled code rnnport "
                              "does not read. Save the ExportedProgram itself "
                              "(torch.export.save(ep, path)).")
        programs = {model: (f"{root}models/{model}.json",
                            _tensors(archive, root, model, where, size, ledger))
                    for model in models}
    else:
        program = next(name for name in names if name.endswith("serialized_exported_program.json"))
        root = program[: -len("serialized_exported_program.json")]
        programs = {"model": (program, _legacy_state(archive, root, where, size, ledger))}
    tree: dict[str, Any] = {}
    graphs = []
    for model, (member, tensors) in programs.items():
        exported = _json(archive, member, where, size)
        graphs.extend(_networks(exported, model, f"{where}, {member}"))
        if len(programs) == 1:
            tree = tensors
        else:
            tree[model] = tensors
    return Loaded(tree, "pt2", where, size, graphs=graphs, models=len(programs))


def _json(archive: zipfile.ZipFile, member: str, where: str, size: int) -> Any:
    raw = read_member(archive, member, where, limit=budget.allowance("expansion", size),
                      crc=False)
    try:  # torch writes it with Python's json.dumps, which writes NaN and Infinity
        return jsontext.loads(raw, f"{where}, {member}", size=size, max_bytes=len(raw),
                              max_depth=PROGRAM_DEPTH, allow_nan=True)
    except jsontext.JSONTextError as error:
        raise FormatError(f"{where}: {member} is not JSON ({error.problem}); the archive is "
                          "damaged.") from None


def _tensors(archive: zipfile.ZipFile, root: str, model: str, where: str, size: int,
             ledger: Ledger) -> dict[str, Any]:
    names = set(archive.namelist())
    legacy = f"{root}data/weights/{model}.pt"
    tensors: dict[str, Any] = {}
    if legacy in names:
        tensors.update(_nested_state(archive, legacy, where, size, ledger))
    for folder, config_name in (("weights", f"{model}_weights_config.json"),
                                ("constants", f"{model}_constants_config.json")):
        member = f"{root}data/{folder}/{config_name}"
        if member not in names:
            continue
        config = _json(archive, member, where, size)
        entries = config.get("config") if isinstance(config, dict) else None
        if not isinstance(entries, dict):
            raise FormatError(f"{where}, {member}: expected {{\"config\": {{name: payload}}}}, "
                              f"got {str(config)[:80]}.")
        for fqn, payload in entries.items():
            spot = f"{where}, {folder} {fqn!r}"
            if not isinstance(payload, dict) or not isinstance(payload.get("path_name"), str):
                raise FormatError(f"{spot}: payload {str(payload)[:80]}; expected path_name "
                                  "and tensor_meta.")
            stored = f"{root}data/{folder}/{payload['path_name']}"
            if stored not in names:
                raise FormatError(f"{spot}: the archive has no {stored!r}; it is truncated or "
                                  "damaged.")
            if payload.get("use_pickle"):
                tensors[fqn] = _pickled_tensor(archive, stored, spot, size, ledger)
            elif payload.get("tensor_meta") is not None:
                tensors[fqn] = _raw_tensor(archive, stored, payload["tensor_meta"], spot, ledger)
    return tensors


def _raw_tensor(archive: zipfile.ZipFile, member: str, meta: Any, where: str,
                ledger: Ledger) -> TensorRef:
    if not isinstance(meta, dict):
        raise FormatError(f"{where}: tensor_meta {str(meta)[:80]}; expected an object.")
    code = meta.get("dtype")
    name = SCALAR_TYPES.get(code) if isinstance(code, int) else None
    if name is None:
        raise FormatError(f"{where}: ScalarType {preview(code)}; expected one of "
                          f"{sorted(SCALAR_TYPES)}.")
    if meta.get("layout", STRIDED) != STRIDED:
        raise UnsupportedFeatureError(f"{where}: a tensor of layout {preview(meta.get('layout'))} "
                                      "(sparse or mkldnn); rnnport reads dense (strided) tensors.")
    dtype = DTYPES[name]
    shape = _ints(meta.get("sizes"), "sizes", where)
    strides = _ints(meta.get("strides"), "strides", where)
    offset = _ints([meta.get("storage_offset")], "storage_offset", where)[0]
    held = archive.getinfo(member).file_size
    if held % dtype.itemsize or len(strides) != len(shape):
        raise FormatError(f"{where}: {held:,} bytes of {name} for sizes {shape}, strides "
                          f"{strides}; the archive is damaged.")
    storage = Storage(member, dtype, held // dtype.itemsize,
                      lambda need: member_data(archive, member, where, need),
                      ledger)
    return TensorRef(storage, offset, shape, strides, dtype, "parameter")


def _ints(values: Any, what: str, where: str) -> tuple[int, ...]:
    """``[{"as_int": 3}, …]`` as ``(3, …)``; a symbolic size is refused."""
    if not isinstance(values, list) or len(values) > 64:
        raise FormatError(f"{where}: {what} {preview(values)}; expected a list of sizes.")
    out = []
    for value in values:
        number = value.get("as_int") if isinstance(value, dict) else None
        if not isinstance(number, int) or isinstance(number, bool) or not 0 <= number < 2**62:
            raise FormatError(f"{where}: {what} holds {preview(value)}; expected whole sizes "
                              "({\"as_int\": n}). A tensor stored with symbolic sizes cannot be "
                              "read.")
        out.append(number)
    return tuple(out)


def _nested(archive: zipfile.ZipFile, member: str, where: str, size: int, ledger: Ledger,
            what: str) -> Any:
    """What a ``torch.save`` zip stored as ``member`` of the archive holds (``what``, for
    the error when it has no ``data.pkl``). The inner archive is in memory, and stays open
    for its tensors to be read from."""
    raw = read_member(archive, member, where, limit=budget.allowance("expansion", size),
                      crc=False)
    ledger.charge(len(raw), member)
    inner = open_zip(raw, "torch.save file", where)
    root = zip_root(inner.namelist())
    if root is None:
        raise FormatError(f"{where}: no data.pkl; expected the torch.save zip of {what}.")
    return read_zip_tree(inner, root, where, size, ledger)


def _nested_state(archive: zipfile.ZipFile, member: str, where: str, size: int,
                  ledger: Ledger) -> dict[str, Any]:
    """A state_dict stored as a ``torch.save`` zip inside the archive."""
    spot = f"{where}, {member}"
    tree = _nested(archive, member, spot, size, ledger, "a state_dict")
    if not isinstance(tree, dict):
        raise FormatError(f"{spot}: holds a {type(tree).__name__}; expected a state_dict.")
    return tree


def _pickled_tensor(archive: zipfile.ZipFile, member: str, where: str, size: int,
                    ledger: Ledger) -> Any:
    return _nested(archive, member, where, size, ledger, "one tensor")


def _legacy_state(archive: zipfile.ZipFile, root: str, where: str, size: int,
                  ledger: Ledger) -> dict[str, Any]:
    tensors: dict[str, Any] = {}
    for name in ("serialized_state_dict.pt", "serialized_constants.pt"):
        member = f"{root}{name}"
        if member in archive.namelist() and archive.getinfo(member).file_size:
            nested = _nested_state(archive, member, where, size, ledger)
            tensors.update({str(key): value for key, value in nested.items()})
    return tensors


# -- the graph -------------------------------------------------------------------------------


def _networks(exported: Any, model: str, where: str) -> list[GraphNetwork]:
    """The recurrent nodes of one ExportedProgram (its JSON), their parameters by name."""
    module = exported.get("graph_module") if isinstance(exported, dict) else None
    graph = module.get("graph") if isinstance(module, dict) else None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    signature = module.get("signature") if isinstance(module, dict) else None
    if not isinstance(nodes, list) or not isinstance(signature, dict):
        raise FormatError(f"{where}: expected an ExportedProgram (graph_module.graph.nodes and "
                          "graph_module.signature); the archive is damaged or of a release "
                          "rnnport does not know.")
    fqn = _parameter_names(signature.get("input_specs"), where)
    found: list[GraphNetwork] = []
    for node in nodes:
        target = node.get("target") if isinstance(node, dict) else None
        if not isinstance(target, str) or target not in OPERATORS:
            continue
        cell, is_cell = OPERATORS[target]
        inputs = node.get("inputs")
        arguments = {entry["name"]: entry.get("arg") for entry in
                     (inputs if isinstance(inputs, list) else [])
                     if isinstance(entry, dict) and isinstance(entry.get("name"), str)}
        name = str(node.get("name") or target)
        spot = f"{where}, node {name!r} ({target.removeprefix('torch.ops.')})"
        if is_cell:
            tensors = [_tensor_name(arguments.get(argument), spot, argument, optional=index > 1)
                       for index, argument in enumerate(CELL_ARGUMENTS)]
            has_biases = tensors[2] is not None
            layers, bidirectional = 1, False
        else:
            tensors = _tensor_names(arguments.get("params"), spot)
            has_biases = _constant(arguments.get("has_biases"), "as_bool", spot, "has_biases")
            layers = _constant(arguments.get("num_layers"), "as_int", spot, "num_layers")
            bidirectional = _constant(arguments.get("bidirectional"), "as_bool", spot,
                                      "bidirectional")
        params = []
        for argument in tensors:
            if argument is not None and argument not in fqn:
                raise UnsupportedFeatureError(
                    f"{spot}: its weight {argument!r} is computed inside the graph, not stored "
                    "in the archive; rnnport reads weights that are parameters, buffers or "
                    "constants. Export the module whose parameters the recurrent layer uses "
                    "as they are.")
            params.append(None if argument is None else fqn[argument])
        found.append(GraphNetwork(model, name, target, cell, is_cell, layers, bidirectional,
                                  has_biases, tuple(params)))
    return found


def _parameter_names(specs: Any, where: str) -> dict[str, str]:
    """Graph input name → state_dict name, for parameters, buffers and tensor constants."""
    names = {}
    for spec in specs if isinstance(specs, list) else []:
        if not isinstance(spec, dict):
            continue
        for kind, field_name in (("parameter", "parameter_name"), ("buffer", "buffer_name"),
                                 ("tensor_constant", "tensor_constant_name")):
            entry = spec.get(kind)
            if isinstance(entry, dict) and isinstance(entry.get("arg"), dict):
                argument, stored = entry["arg"].get("name"), entry.get(field_name)
                if isinstance(argument, str) and isinstance(stored, str):
                    names[argument] = stored
    return names


def _tensor_name(argument: Any, where: str, what: str, optional: bool = False) -> str | None:
    if isinstance(argument, dict):
        tensor = argument.get("as_tensor")
        if isinstance(tensor, dict) and isinstance(tensor.get("name"), str):
            return str(tensor["name"])
        if optional and ("as_none" in argument or argument.get("as_optional_tensor", {}) == {
                "as_none": True}):
            return None
        optional_tensor = argument.get("as_optional_tensor")
        if isinstance(optional_tensor, dict):
            return _tensor_name({"as_tensor": optional_tensor.get("as_tensor")}, where, what,
                                optional) if "as_tensor" in optional_tensor else None
    if optional and argument is None:
        return None
    raise FormatError(f"{where}: argument {what} is {str(argument)[:80]}; expected a tensor.")


def _tensor_names(argument: Any, where: str) -> list[str | None]:
    tensors = argument.get("as_tensors") if isinstance(argument, dict) else None
    if not isinstance(tensors, list) or not all(
            isinstance(item, dict) and isinstance(item.get("name"), str) for item in tensors):
        raise FormatError(f"{where}: argument params is {str(argument)[:80]}; expected a list "
                          "of tensors.")
    return [str(item["name"]) for item in tensors]


def _constant(argument: Any, kind: str, where: str, what: str) -> Any:
    value = argument.get(kind) if isinstance(argument, dict) else None
    wanted = bool if kind == "as_bool" else int
    if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)) or (
            wanted is int and not 1 <= value <= 10**6):
        raise UnsupportedFeatureError(
            f"{where}: argument {what} is {str(argument)[:80]}; expected a constant "
            f"({kind}). A recurrent node whose {what} is computed at run time cannot be read.")
    return value


def count_check(network: GraphNetwork, where: str) -> int:
    """The parameters per layer and direction the node's ``params`` hold (2 to 5)."""
    groups = network.num_layers * (2 if network.bidirectional else 1)
    each, rest = divmod(len(network.params), groups)
    expected = {2, 3} if not network.has_biases else {4, 5}
    if rest or each not in expected or (each in (3, 5) and network.cell != "lstm"):
        raise FormatError(f"{where}: node {network.node!r} has {len(network.params)} parameters "
                          f"for {network.num_layers} layer(s) × {groups // network.num_layers} "
                          "direction(s); expected w_ih, w_hh, the biases when has_biases, and "
                          "w_hr for an LSTM projection, per layer and direction.")
    return each
