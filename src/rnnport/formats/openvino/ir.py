"""OpenVINO IR files: the ``.xml`` graph, parsed with no DTD and no entities, and the
``.bin`` constants, decoded inside their bounds (see :mod:`rnnport.formats.openvino`).

The XML is read by expat with handlers that refuse any ``<!DOCTYPE``, entity declaration
or external entity: an IR has none, and they are how XML files expand (“billion laughs”)
or read other files. Elements nest at most :data:`MAX_DEPTH` deep, and every element, edge
and port counts against the ``work`` limit; every constant decoded counts against the
``expansion`` limit, for the sizes of both files together, before it is copied.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from xml.parsers import expat

import numpy as np

from ... import budget
from ...errors import FormatError, UnsupportedFeatureError
from ...io.inputs import head, is_file, read_file
from .._common import describe, is_path

__all__ = ["ELEMENT_TYPES", "IR", "Graph", "Layer", "Port", "bin_path", "load", "parse_shape",
           "xml_path"]

MAX_DEPTH = 32  # net, layers, layer, output, port, dim: six levels; rt_info a few more
MAX_RANK = 8
MAX_DIM = 1 << 40
# IR element types and the NumPy dtypes they are stored as (little-endian).
ELEMENT_TYPES: dict[str, np.dtype] = {"f16": np.dtype("<f2"), "f32": np.dtype("<f4"), "f64": np.dtype("<f8"),
                 "i8": np.dtype("i1"), "i16": np.dtype("<i2"), "i32": np.dtype("<i4"),
                 "i64": np.dtype("<i8"), "u8": np.dtype("u1"), "u16": np.dtype("<u2"),
                 "u32": np.dtype("<u4"), "u64": np.dtype("<u8"), "boolean": np.dtype("?")}
PRECISIONS = {"f16": "FP16", "f32": "FP32", "f64": "FP64", "i8": "I8", "i16": "I16",
              "i32": "I32", "i64": "I64", "u8": "U8", "u16": "U16", "u32": "U32", "u64": "U64",
              "boolean": "BOOL"}
_DIMENSION = re.compile(r"-?[0-9]{1,15}")


class IR(NamedTuple):
    """An OpenVINO IR in memory: the ``.xml`` text and the ``.bin`` weights, as
    ``openvino.Core().read_model(model=xml, weights=...)`` takes them and ``save`` writes
    them (``write(model, "openvino")`` returns one; ``xml, weights = ir``)."""

    xml: bytes
    weights: bytes

    def save(self, path: str | os.PathLike[str]) -> list[Path]:
        """Write ``PATH.xml`` and ``PATH.bin`` together, atomically; the two paths."""
        from ...io.atomic import atomic_write_all

        xml, weights = xml_path(Path(path)), bin_path(Path(path))
        return atomic_write_all([(xml, lambda file: file.write(self.xml)),
                                 (weights, lambda file: file.write(self.weights))])


@dataclass
class Port:
    """One port of a layer: its id (unique in the layer), element precision, dimensions
    (-1 where dynamic) and tensor names."""

    id: str
    precision: str
    dims: tuple[int, ...]
    names: str = ""


@dataclass
class Layer:
    """One ``<layer>``: its id, name, operation ``type`` and opset ``version``, its
    ``<data>`` attributes, and its input and output ports in order."""

    id: str
    name: str
    type: str
    version: str
    data: dict[str, str]
    inputs: list[Port] = field(default_factory=list)
    outputs: list[Port] = field(default_factory=list)

    def label(self) -> str:
        return f"layer {self.name!r} ({self.type}, id {self.id})"


class Graph:
    """A parsed IR: its layers in file order, which output feeds each input, and its
    constants' bytes."""

    def __init__(self, layers: list[Layer], edges: list[tuple[str, str, str, str]],
                 weights: bytes | memoryview, where: str, size: int) -> None:
        self.where = where
        self.weights = memoryview(weights)
        self.layers = {layer.id: layer for layer in layers}
        if len(self.layers) != len(layers):
            raise FormatError(f"{where}: two layers share an id; expected each <layer> id "
                              "once. The file is damaged.")
        self.arrays = budget.Meter("expansion", size, where, "bytes of constants decoded")
        self.decoded: dict[str, np.ndarray] = {}
        self.work = budget.Meter("work", size, where, "steps (layers, ports and edges read, "
                                 "layers evaluated)")
        # (layer id, input index) → (layer id, output index)
        self.sources: dict[tuple[str, int], tuple[str, int]] = {}
        self.consumers: dict[tuple[str, int], list[tuple[str, int]]] = {}
        positions = {(layer.id, port.id): ("in", index) for layer in layers
                     for index, port in enumerate(layer.inputs)}
        positions.update({(layer.id, port.id): ("out", index) for layer in layers
                          for index, port in enumerate(layer.outputs)})
        for from_layer, from_port, to_layer, to_port in edges:
            source = positions.get((from_layer, from_port))
            target = positions.get((to_layer, to_port))
            if source is None or target is None or source[0] != "out" or target[0] != "in":
                raise FormatError(f"{where}: an edge from layer {from_layer} port {from_port} "
                                  f"to layer {to_layer} port {to_port}; expected it to join an "
                                  "output port to an input port of layers in the file. The "
                                  "file is damaged.")
            key = (to_layer, target[1])
            if key in self.sources:
                raise FormatError(f"{where}: layer {to_layer} port {to_port} is fed by two "
                                  "edges; expected one. The file is damaged.")
            self.sources[key] = (from_layer, source[1])
            self.consumers.setdefault((from_layer, source[1]), []).append(key)

    def producer(self, layer: Layer, index: int) -> tuple[Layer, int]:
        """The layer and output index feeding input ``index`` of ``layer``."""
        found = self.sources.get((layer.id, index))
        if found is None:
            raise FormatError(f"{self.where}: input {index} of {layer.label()} is not "
                              "connected; expected an edge feeding it. The file is damaged.")
        return self.layers[found[0]], found[1]

    def of_type(self, *types: str) -> list[Layer]:
        return [layer for layer in self.layers.values() if layer.type in types]

    def constant(self, layer: Layer) -> np.ndarray:
        """The array of a ``Const`` layer, read from the weights after checking that its
        ``element_type``, ``shape``, ``offset`` and ``size`` agree and lie in the file;
        decoded (and charged) once, however many evaluations take it."""
        if layer.id not in self.decoded:
            self.decoded[layer.id] = self._decode(layer)
        return self.decoded[layer.id]

    def _decode(self, layer: Layer) -> np.ndarray:
        where = f"{self.where}, {layer.label()}"
        kind = layer.data.get("element_type", "")
        dtype = ELEMENT_TYPES.get(kind)
        if dtype is None:
            raise UnsupportedFeatureError(
                f"{where}: element_type {kind!r}; expected one of {', '.join(ELEMENT_TYPES)} "
                "(packed, 8-bit float and bfloat16 constants hold compressed weights, which "
                "rnnport does not read). Save the model with uncompressed weights.")
        shape = parse_shape(layer.data.get("shape", ""), where, "shape")
        offset, size = (_number(layer.data.get(key), where, key) for key in ("offset", "size"))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if any(dim < 0 for dim in shape) or count * dtype.itemsize != size:
            raise FormatError(f"{where}: shape {list(shape)} of {kind} takes "
                              f"{max(count, 0) * dtype.itemsize:,} bytes, but size says "
                              f"{size:,}; expected them to agree. The file is damaged.")
        if offset + size > len(self.weights):
            raise FormatError(f"{where}: bytes {offset:,} to {offset + size:,} of the weights "
                              f"file, which holds {len(self.weights):,}; expected them inside "
                              "it. The .bin file is truncated, or not the one of this .xml.")
        self.arrays.charge(size, f"the constant {layer.name!r}")
        array = np.frombuffer(self.weights, dtype, count, offset).reshape(shape)
        return array.astype(dtype.newbyteorder("="))


def _number(text: str | None, where: str, key: str) -> int:
    if text is None or not text.isdigit() or len(text) > 15:
        raise FormatError(f"{where}: {key}={text!r}; expected a whole number of bytes. The "
                          "file is damaged.")
    return int(text)


def parse_shape(text: str, where: str, what: str) -> tuple[int, ...]:
    """``"1, 24, 4"`` as ``(1, 24, 4)``; ``?``, ``-1`` and ranges (``1..10``) are -1
    (dynamic); ``""`` is a scalar."""
    if not text.strip():
        return ()
    dims = []
    for part in text.split(","):
        part = part.strip()
        if part == "?" or ".." in part:
            dims.append(-1)
        elif _DIMENSION.fullmatch(part) and -1 <= int(part) <= MAX_DIM:
            dims.append(int(part))
        else:
            raise FormatError(f"{where}: {what} {text[:80]!r}; expected dimensions such as "
                              f"'1, 24, 4' (each at most {MAX_DIM:,}, '?' or -1 when "
                              "dynamic). The file is damaged.")
    if len(dims) > MAX_RANK:
        raise FormatError(f"{where}: {what} has {len(dims)} dimensions; expected at most "
                          f"{MAX_RANK}. The file is damaged.")
    return tuple(dims)


# -- the XML --------------------------------------------------------------------------------


class _Element:
    __slots__ = ("attributes", "children", "tag", "text")

    def __init__(self, tag: str, attributes: dict[str, str]) -> None:
        self.tag, self.attributes = tag, attributes
        self.children: list[_Element] = []
        self.text = ""

    def child(self, tag: str) -> _Element | None:
        return next((item for item in self.children if item.tag == tag), None)


class _Refused(Exception):
    """A construct no IR holds (a DTD, an entity), met while parsing."""


def _parse_xml(data: bytes, where: str, work: budget.Meter) -> _Element:
    """The element tree of ``data``, refusing DTDs and entities (see the module docstring)."""
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    root = _Element("", {})
    stack = [root]

    def start(tag: str, attributes: dict[str, str]) -> None:
        work.charge(1 + len(attributes), "XML elements")
        if len(stack) > MAX_DEPTH:
            raise _Refused(f"elements nested more than {MAX_DEPTH} deep")
        element = _Element(tag, attributes)
        stack[-1].children.append(element)
        stack.append(element)

    def end(tag: str) -> None:
        stack.pop()

    def text(content: str) -> None:
        if stack[-1].tag == "dim":
            work.charge(len(content) // 16, "XML text")
            stack[-1].text += content

    def refuse(what: str) -> Any:
        def handler(*arguments: Any) -> Any:
            raise _Refused(what)
        return handler

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    parser.StartDoctypeDeclHandler = refuse("a <!DOCTYPE> declaration")
    parser.EntityDeclHandler = refuse("an <!ENTITY> declaration")
    parser.ExternalEntityRefHandler = refuse("an external entity")
    parser.NotationDeclHandler = refuse("a <!NOTATION> declaration")
    try:
        parser.Parse(data, True)
    except _Refused as refused:
        raise FormatError(f"{where}: the XML holds {refused}; an OpenVINO IR holds none (they "
                          "are how XML files expand to gigabytes or read other files), so "
                          "nothing was read.") from None
    except expat.ExpatError as error:
        raise FormatError(f"{where}: not well-formed XML ({expat.errors.messages[error.code]}"
                          f", line {error.lineno}, column {error.offset}); expected an OpenVINO "
                          "IR .xml. The file is damaged or not an IR.") from None
    if len(root.children) != 1 or root.children[0].tag != "net":
        raise FormatError(f"{where}: the XML's root element is not <net>; expected an OpenVINO "
                          "IR (<net> holding <layers> and <edges>).")
    return root.children[0]


def _port(element: _Element, where: str) -> Port:
    dims = []
    for dim in element.children:
        if dim.tag != "dim":
            continue
        text = dim.text.strip()
        if not _DIMENSION.fullmatch(text) or not -1 <= int(text) <= MAX_DIM:
            raise FormatError(f"{where}: port {element.attributes.get('id')!r} has the "
                              f"dimension {text[:40]!r}; expected a whole number (-1 when "
                              "dynamic). The file is damaged.")
        dims.append(int(text))
    if len(dims) > MAX_RANK:
        raise FormatError(f"{where}: port {element.attributes.get('id')!r} has {len(dims)} "
                          f"dimensions; expected at most {MAX_RANK}. The file is damaged.")
    return Port(element.attributes.get("id", ""), element.attributes.get("precision", ""),
                tuple(dims), element.attributes.get("names", ""))


def _layers(net: _Element, where: str) -> tuple[list[Layer], list[tuple[str, str, str, str]]]:
    layers_element, edges_element = net.child("layers"), net.child("edges")
    if layers_element is None or edges_element is None:
        raise FormatError(f"{where}: <net> without <layers> or <edges>; expected both (an "
                          "OpenVINO IR). The file is damaged or not an IR.")
    layers = []
    for element in layers_element.children:
        if element.tag != "layer":
            continue
        attributes = element.attributes
        data = element.child("data")
        label = f"{where}, layer {attributes.get('name', '?')!r}"
        ports = {tag: [_port(port, label) for port in (element.child(tag) or _Element("", {}))
                       .children if port.tag == "port"] for tag in ("input", "output")}
        layers.append(Layer(attributes.get("id", ""), attributes.get("name", ""),
                            attributes.get("type", ""), attributes.get("version", ""),
                            dict(data.attributes) if data is not None else {},
                            ports["input"], ports["output"]))
    edges = []
    for element in edges_element.children:
        if element.tag == "edge":
            attributes = element.attributes
            edges.append(tuple(attributes.get(key, "") for key in
                               ("from-layer", "from-port", "to-layer", "to-port")))
    return layers, edges  # type: ignore[return-value]


# -- files ----------------------------------------------------------------------------------


def xml_path(path: Path) -> Path:
    """The ``.xml`` of an IR named by ``path`` (its ``.xml``, its ``.bin`` or a bare name)."""
    return path.with_suffix(".xml") if path.suffix.lower() == ".bin" else \
        path if path.suffix.lower() == ".xml" else path.with_name(path.name + ".xml")


def bin_path(path: Path) -> Path:
    """The ``.bin`` beside an IR's ``.xml`` (same folder, same stem)."""
    return path.with_suffix(".bin") if path.suffix.lower() in (".xml", ".bin") else \
        path.with_name(path.name + ".bin")


def load(source: Any) -> Graph:
    """``source`` (an :class:`IR`, or the path of an IR's ``.xml``, its ``.bin`` or the folder
    holding one IR) as a :class:`Graph`."""
    if isinstance(source, IR):
        xml, weights, where = source.xml, source.weights, "OpenVINO IR"
    elif is_path(source):
        path = Path(source)
        if os.path.isdir(path):
            path = _only_ir(path)
        xml_file, bin_file = xml_path(path), bin_path(path)
        where = str(xml_file)
        xml = read_file(xml_file, where)
        if not is_file(bin_file, where):
            raise FormatError(f"{where}: no weights file {bin_file.name} beside it; an OpenVINO "
                              "IR keeps its constants in the .bin of the same name, in the same "
                              "folder. Copy it there.")
        weights = read_file(bin_file, f"{where}, its weights {bin_file.name}")
    else:
        raise FormatError(f"read(fmt='openvino'): expected the path of an OpenVINO IR (.xml, "
                          f"its .bin, or a folder holding one) or an IR, got {describe(source)}.")
    size = len(xml) + len(weights)
    work = budget.Meter("work", size, where, "steps (XML elements and attributes read)")
    layers, edges = _layers(_parse_xml(xml, where, work), where)
    return Graph(layers, edges, weights, where, size)


def _only_ir(folder: Path) -> Path:
    found = sorted(path for path in folder.iterdir()
                   if path.suffix.lower() == ".xml" and is_ir(path))
    if len(found) != 1:
        listing = ", ".join(path.name for path in found[:8]) or "none"
        raise FormatError(f"{folder}: a folder holding {len(found)} OpenVINO IR .xml files "
                          f"({listing}); expected exactly one. Pass the path of the .xml.")
    return found[0]


def is_ir(path: Path) -> bool:
    """Whether the file at ``path`` starts like an IR's XML (a ``<net`` element in its first
    kilobyte); nothing else is read."""
    start = head(path, 1024)
    return start is not None and b"<net" in start and \
        b"<!DOCTYPE" not in start[:start.find(b"<net")]
