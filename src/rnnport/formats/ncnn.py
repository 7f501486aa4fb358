"""ncnn (Tencent): a ``.param`` text file naming the layers, and a ``.bin`` of their weights.

**The .param file** is whitespace-separated text (ncnn reads it with ``scanf``)::

    7767517                                 the magic number
    LAYER_COUNT BLOB_COUNT
    TYPE NAME BOTTOM_COUNT TOP_COUNT BOTTOMS… TOPS… KEY=VALUE…      one per layer

A value is an integer, a float (it holds ``.`` or ``e``), a string (it starts with a
letter or ``"``), or an array: ``KEY=a,b,c``, or the older ``-(23300+KEY)=N,a,b,…``. Keys
run from 0 to 31. A blob is named by the layer whose top it is; a bottom names a blob made
before. The binary ``.param.bin`` form (``ncnn2mem``) is refused by name: convert it back
to text with ncnn's tools.

**The .bin file** holds, layer by layer in ``.param`` order, the arrays each layer's
``load_model`` asks for. A *tagged* array (``ModelBin::load(…, 0)``) starts with a 4-byte
little-endian tag: ``0`` or ``0x0002C056`` raw float32; ``0x01306B47`` float16, its bytes
padded to 4; ``0x000D4B38`` int8 (refused by name: ncnn computes such a layer with int8
arithmetic, which a float network cannot match); any other tag is a 256-entry lookup table
no current ncnn tool writes, refused. An *untagged* array (``load(…, 1)``) is raw float32.
Reading walks the layers before the network to find where its weights start: the layers
that keep no weights, and the weight sizes of ``InnerProduct``, ``Gemm``, ``Convolution``,
``Convolution1D``, ``Embed``, ``MemoryData``, ``BatchNorm``, ``LayerNorm``, ``Scale``,
``PReLU`` and ``Bias`` (their float forms); another layer type before the network is refused
by name, since its weights cannot be skipped.

**The recurrent layers** (``D`` directions: param ``2=direction`` 0 forward, 1 reverse, 2
both; arrays per direction, forward first), all tagged, in this order::

    LSTM   0=num_output (H_out)  1=weight_data_size (D·4·H·I)  2=direction  3=hidden_size H
           weight_xc (D, 4H, I)     rows in gate order I F O G (canonical i f g o)
           bias_c    (D, 4, H)      one bias per gate: bias_ih + bias_hh
           weight_hc (D, 4H, H_out)
           weight_hr (D, H_out, H)  only when H_out ≠ H: the projection (proj_size = H_out)
    GRU    0=num_output (H)  1=weight_data_size (D·3·H·I)  2=direction
           weight_xc (D, 3H, I)     rows r, z (ncnn's "update"), n: canonical order
           bias_c    (D, 4, H)      rows: b_ir + b_hr, b_iz + b_hz, b_in, b_hn
           weight_hc (D, 3H, H)
    RNN    0=num_output (H)  1=weight_data_size (D·H·I)  2=direction
           weight_xc (D, H, I), bias_c (D, 1, H): b_ih + b_hh, weight_hc (D, H, H)

Matrices are cuDNN's orientation (``(G·H, in)``, ``y = W·x``). ncnn computes the LSTM of
PyTorch (``c' = f∘c + i∘g``, ``h' = o∘tanh(c')``, then ``h' = W_hr·h'``), the reset-after
GRU (``n = tanh(W_n x + b_in + r∘(R_n h + b_hn))``, ``h' = (1 − z)∘n + z∘h``) and the simple
RNN with tanh only: a reset-before GRU, a relu RNN, peepholes, clips and layer norm are
refused by name. A layer with ``8=int8_scale_term`` set is refused (int8 weights).

**No batch axis.** An ncnn blob is one sequence: ``w`` = features, ``h`` = time. rnnport's
``forward(x)`` with ``x (batch, time, I)`` is ncnn run once per batch item on ``x[b]``
``(time, I)``, giving ``y[b]`` ``(time, D·H_out)`` (the reverse half in time order); with
``lengths``, item ``b`` equals ncnn run on ``x[b, :lengths[b]]``. A layer with three bottoms
(LSTM) or two (GRU, RNN) takes its initial state from them: ``h`` ``(D, H_out)`` (and ``c``
``(D, H)``), which is ``state[layer·D:(layer+1)·D, b]``; its extra tops give the final state
the same way.

**Networks.** One ncnn layer is one layer of the network. A recurrent layer whose input is
the previous one's output (directly, or through ``Split``/``Noop``) continues its network;
the layers of one network merge into a multi-layer ``RNN`` where they fit, or a ``Stack``.
Several networks in one file: ``layer=`` (the name of any of its ncnn layers) picks one.
``notes`` lists the other layers (inputs, heads, initial-state inputs).

**Writing** gives an :class:`NcnnModel` (the ``.param`` text and the ``.bin`` bytes);
``path=`` saves ``X.param`` (pnnx names it ``X.ncnn.param``) and ``X.bin`` beside it,
atomically. The graph is ``Input in0`` → one layer per network layer → the last layer's
top ``out0``; float32 weights are tagged 0, float16 ones ``0x01306B47`` (exact either way).
ncnn keeps one bias per gate (a GRU's candidate biases apart), so two biases are summed,
and a network without biases gets zeros.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

import numpy as np

from .. import budget
from ..errors import FormatError, UnsupportedFeatureError
from ..gates import CANONICAL, block, gate_family, reorder
from ..io.atomic import atomic_write_all
from ..io.inputs import head, open_file, read_file
from ..model import RNN, Model, Stack, stack
from ..spec import Spec
from ._common import by_layer, is_path, listed, sum_exact
from ._protocol import Choices, Format, NamedArray, Suffix

__all__ = ["FORMAT", "NcnnModel", "is_param", "read", "sniff", "write"]

MAGIC = 7767517
TAG_FLOAT32 = 0
TAG_FLOAT32_SCALED = 0x0002C056
TAG_FLOAT16 = 0x01306B47
TAG_INT8 = 0x000D4B38
MAX_PARAM_BYTES = 64 << 20  # a .param of 64 MiB would list millions of layers
MAX_KEY = 32  # ncnn's NCNN_MAX_PARAM_COUNT
LAYER_BYTES = 1024  # what one parsed layer, and a network layer made of it, costs at most
INT32_MAX = 2**31 - 1
READ_OPTIONS = frozenset({"layer"})
NO_CHECK = ": no framework check"

# Gate order of each recurrent layer's rows, by cell family.
ORDERS = {"lstm": "ifog", "gru": "rzn", "rnn": "h"}
CELLS = {"LSTM": "lstm", "GRU": "gru", "RNN": "rnn_tanh"}
TYPES = {"lstm": "LSTM", "gru": "GRU", "rnn": "RNN"}  # by gate family
# Layers that pass their input on unchanged (a chain of recurrent layers may run through them).
PASSING = frozenset({"Split", "Noop"})
# Layers keeping a tagged weight and a raw bias: param keys (num_output, bias_term,
# weight_data_size, int8_scale_term).
WEIGHTED = {"InnerProduct": (0, 1, 2, 8), "Embed": (0, 2, 3, 18), "Convolution": (0, 5, 6, 8),
            "Convolution1D": (0, 5, 6, 8)}
# Layers whose load_model reads nothing from the .bin.
WEIGHTLESS = frozenset({
    "Input", "Split", "Noop", "Concat", "Slice", "Reshape", "Permute", "Squeeze", "ExpandDims",
    "Flatten", "ReLU", "Sigmoid", "TanH", "Softmax", "Dropout", "Crop", "BinaryOp", "UnaryOp",
    "Eltwise", "Clip", "Swish", "GELU", "HardSigmoid", "HardSwish", "Mish", "ELU", "SELU",
    "Padding", "Pooling", "Pooling1D", "Pooling3D", "Interp", "Reduction", "MatMul", "Tile",
    "Cast", "ShuffleChannel", "CopyTo", "Erf", "Exp", "Log", "Power", "Threshold", "AbsVal",
    "Normalize", "Mean", "ArgMax", "LRN", "Yolov3DetectionOutput", "Fold", "Unfold",
    "Shrink", "CumulativeSum", "CELU", "BNLL", "GroupNorm", "InstanceNorm", "RMSNorm",
})


class NcnnModel(NamedTuple):
    """An ncnn model in memory: the ``.param`` text (ASCII bytes) and the ``.bin`` bytes."""

    param: bytes
    bin: bytes


@dataclass(frozen=True)
class Layer:
    """One line of a ``.param``: its type, name, bottom and top blobs and raw params."""

    index: int
    type: str
    name: str
    bottoms: tuple[str, ...]
    tops: tuple[str, ...]
    params: dict[int, str]

    @property
    def label(self) -> str:
        return f"layer {self.name!r} ({self.type})"

    def integer(self, key: int, default: int, where: str) -> int:
        """Param ``key`` as an int32 (``default`` when absent)."""
        text = self.params.get(key)
        if text is None:
            return default
        if not re.fullmatch(r"[+-]?\d{1,10}", text) or not -2**31 <= int(text) <= INT32_MAX:
            raise FormatError(f"{where}: {self.label} has {key}={text[:40]!r}; expected a 32-bit "
                              "integer (ncnn reads it with %d). The .param is damaged.")
        return int(text)

    def count(self, key: int, default: int, where: str) -> int:
        """Param ``key``, a size: a non-negative integer."""
        value = self.integer(key, default, where)
        if value < 0:
            raise FormatError(f"{where}: {self.label} has {key}={value}; expected a size of 0 "
                              "or more. The .param is damaged.")
        return value


@dataclass(frozen=True)
class Blob:
    """Where one array of a layer lies in the ``.bin``: ``count`` values, ``tagged`` or raw
    float32."""

    name: str
    count: int
    tagged: bool


# -- .param ---------------------------------------------------------------------------------


def parse_param(text: bytes, where: str) -> list[Layer]:
    """The layers of a ``.param`` text, checked against its header."""
    if text[:4] == struct.pack("<i", MAGIC):
        raise UnsupportedFeatureError(
            f"{where}: a binary .param.bin (ncnn2mem's form); rnnport reads the text .param. "
            "Convert it back to text with ncnn's tools, or export the model again with pnnx.")
    try:
        tokens = text.decode("ascii").split()
    except UnicodeDecodeError as error:
        raise FormatError(f"{where}: byte {error.start} is not ASCII; an ncnn .param is ASCII "
                          "text. The file is damaged or no .param.") from None
    if not tokens or tokens[0] != str(MAGIC):
        found = repr(tokens[0][:20]) if tokens else "an empty file"
        raise FormatError(f"{where}: starts with {found}; expected ncnn's magic number {MAGIC} "
                          "(an older .param, from before 2017, must be converted again).")
    position = iter(enumerate(tokens))
    next(position)

    def take(what: str) -> str:
        item = next(position, None)
        if item is None:
            raise FormatError(f"{where}: the file ends where {what} should be; the .param is "
                              "truncated.")
        return item[1]

    def number(what: str, token: str, limit: int) -> int:
        if not token.isdigit() or len(token) > 10 or int(token) > limit:
            raise FormatError(f"{where}: {what} is {token[:20]!r}; expected a count of at most "
                              f"{limit:,} (the file holds {len(tokens):,} words).")
        return int(token)

    layer_count = number("the layer count", take("the layer count"), len(tokens))
    blob_count = number("the blob count", take("the blob count"), len(tokens))
    layers: list[Layer] = []
    pending: str | None = None
    blobs: set[str] = set()
    # What the layers take in memory, charged before each is kept: a file of short lines
    # can name millions of layers.
    meter = budget.Meter("expansion", len(text), where, "bytes of layers")
    for index in range(layer_count):
        meter.charge(LAYER_BYTES, f"layer {index}")
        kind = pending or take(f"layer {index}'s type")
        pending = None
        name = take(f"layer {index}'s name")
        label = f"layer {index} {name[:60]!r} ({kind[:40]})"
        bottom_count = number(f"{label}'s bottom count", take(f"{label}'s bottom count"),
                              len(tokens))
        top_count = number(f"{label}'s top count", take(f"{label}'s top count"), len(tokens))
        meter.charge(64 * (bottom_count + top_count), f"{label}'s blobs")
        bottoms = tuple(take(f"{label}'s bottoms") for _ in range(bottom_count))
        tops = tuple(take(f"{label}'s tops") for _ in range(top_count))
        for bottom in bottoms:
            if bottom not in blobs:  # ncnn makes a blob nobody produced (an input)
                blobs.add(bottom)
        blobs.update(tops)
        params: dict[int, str] = {}
        while True:
            item = next(position, None)
            if item is None:
                break
            token = item[1]
            match = re.fullmatch(r"(-?\d{1,10})=(.*)", token)
            if match is None:
                pending = token
                break
            key = int(match[1])
            key = -key - 23300 if key <= -23300 else key
            if not 0 <= key < MAX_KEY:
                raise FormatError(f"{where}: {label} has the param key {match[1]}; expected 0 to "
                                  f"{MAX_KEY - 1} (or -23300 minus one, for an array).")
            value = match[2]
            meter.charge(len(token) + 64, f"layer {index}'s params")
            if value.startswith('"'):  # a quoted string, spaces kept: words to the closing "
                words = [value]
                while words == ['"'] or not words[-1].endswith('"'):
                    words.append(take(f"the end of {label}'s quoted string"))
                value = " ".join(words)
            params[key] = value
        layers.append(Layer(index, kind, name, bottoms, tops, params))
    if pending is not None or next(position, None) is not None:
        raise FormatError(f"{where}: the header says {layer_count} layers, but more follow; "
                          "expected the layer count to match. The .param is damaged.")
    if len(blobs) > blob_count:
        raise FormatError(f"{where}: the header says {blob_count} blobs, the layers name "
                          f"{len(blobs)}; expected at least as many as they name (ncnn would "
                          "write past its list). The .param is damaged.")
    return layers


def recurrent_blobs(layer: Layer, where: str) -> tuple[Spec, list[Blob]]:
    """The network layer an ncnn ``LSTM``/``GRU``/``RNN`` layer holds, and its arrays."""
    cell = CELLS[layer.type]
    gates = len(ORDERS[gate_family(cell)])
    output = layer.count(0, 0, where)
    size = layer.count(1, 0, where)
    direction = layer.integer(2, 0, where)
    hidden = layer.count(3, output, where) if cell == "lstm" else output
    if layer.integer(8, 0, where):
        raise UnsupportedFeatureError(
            f"{where}: {layer.label} holds int8 weights (8=int8_scale_term); ncnn computes it "
            "with int8 arithmetic, which no float network reproduces. Export the float model "
            "again (pnnx without int8 quantization).")
    if direction not in (0, 1, 2):
        raise FormatError(f"{where}: {layer.label} has direction 2={direction}; expected 0 "
                          "(forward), 1 (reverse) or 2 (bidirectional).")
    directions = 2 if direction == 2 else 1
    per_input = directions * gates * hidden
    if output == 0 or hidden == 0 or size == 0 or size % per_input:
        raise FormatError(
            f"{where}: {layer.label} has num_output 0={output}, hidden size {hidden} and "
            f"weight_data_size 1={size}; expected positive sizes with weight_data_size a "
            f"multiple of directions·{gates}·hidden = {per_input} (it is that times the input "
            "size). The .param is damaged.")
    proj = output if output != hidden else 0
    if proj > hidden:
        raise UnsupportedFeatureError(
            f"{where}: {layer.label} projects {hidden} hidden units to num_output {output}, "
            "more than it has; rnnport's LSTM projection (PyTorch's proj_size) is smaller "
            "than the hidden size.")
    spec = Spec(cell, size // per_input, hidden, bidirectional=direction == 2,
                reverse=direction == 1, proj_size=proj)
    rows = directions * gates * hidden
    blobs = [Blob("weight_xc_data", rows * spec.input_size, True),
             Blob("bias_c_data", directions * (4 if cell == "gru" else gates) * hidden, True),
             Blob("weight_hc_data", rows * spec.output_size, True)]
    if proj:
        blobs.append(Blob("weight_hr_data", directions * proj * hidden, True))
    return spec, blobs


def _other_blobs(layer: Layer, where: str) -> list[Blob]:
    """The arrays a layer that is not recurrent reads from the .bin."""
    kind = layer.type
    if kind in WEIGHTLESS:
        return []
    if kind in WEIGHTED:
        output, bias, size, int8 = (layer.count(key, 0, where) for key in WEIGHTED[kind])
        if kind.startswith("Convolution") and layer.integer(19, 0, where):
            return []  # dynamic_weight: the weights are a bottom
        if not int8:
            return [Blob("weight_data", size, True),
                    *([Blob("bias_data", output, False)] if bias else [])]
    elif kind == "Gemm" and not layer.integer(18, 0, where):
        constant_a, constant_b, constant_c = (layer.integer(key, 0, where) for key in (4, 5, 6))
        m, n, k = (layer.count(key, 0, where) for key in (7, 8, 9))
        broadcast = layer.integer(10, 0, where)
        c_size = {0: 1, 1: m, 2: m, 3: n * m, 4: n}.get(broadcast, 0)
        return [*([Blob("A_data", m * k, True)] if constant_a == 1 else []),
                *([Blob("B_data", n * k, True)] if constant_b == 1 else []),
                *([Blob("C_data", c_size, True)] if constant_c == 1 and c_size else [])]
    elif kind == "MemoryData":
        sizes = [layer.count(key, 0, where) for key in (0, 1, 11, 2)]
        used = [size for size in sizes if size] or [1]
        tagged = layer.integer(21, 1, where) == 0
        return [] if not any(sizes) else [Blob("data", int(np.prod(used, dtype=object)), tagged)]
    elif kind in ("BatchNorm", "PReLU", "Bias"):
        return [Blob(name, layer.count(0, 0, where), False)
                for name in (("slope", "mean", "var", "bias") if kind == "BatchNorm" else
                             ("data",))]
    elif kind == "LayerNorm":
        size = layer.count(0, 0, where)
        return [] if not layer.integer(2, 1, where) else [Blob("gamma", size, False),
                                                            Blob("beta", size, False)]
    elif kind == "Scale":
        size = layer.integer(0, 0, where)
        if size == -233:
            return []
        size = layer.count(0, 0, where)
        return [Blob("scale", size, False),
                *([Blob("bias", size, False)] if layer.integer(1, 0, where) else [])]
    raise UnsupportedFeatureError(
        f"{where}: {layer.label} comes before the recurrent layers and keeps weights in the "
        f".bin in a form whose size rnnport does not know ({kind}"
        f"{', int8' if kind in WEIGHTED or kind == 'Gemm' else ''}), so where the recurrent weights start "
        "cannot be told. rnnport skips the weights of "
        "InnerProduct, Gemm, Convolution, Convolution1D, Embed, MemoryData, BatchNorm, LayerNorm, "
        "Scale, PReLU and Bias layers (float) and passes layers without weights. Export the "
        "recurrent network on its own.")


# -- .bin -----------------------------------------------------------------------------------


class _Weights:
    """Reads a ``.bin`` array by array: a file (read as far as needed) or bytes."""

    def __init__(self, source: BinaryIO | bytes, where: str) -> None:
        self.source, self.where, self.offset = source, where, 0
        if isinstance(source, bytes):
            self.size = len(source)
        else:
            self.size = os.fstat(source.fileno()).st_size

    def _bytes(self, count: int, what: str) -> bytes:
        if count > self.size - self.offset:
            raise FormatError(
                f"{self.where}: {what} needs {count:,} bytes at offset {self.offset:,}, but the "
                f".bin holds {self.size:,}; expected the weights the .param declares. The .bin "
                "is truncated, or belongs to another .param.")
        start, self.offset = self.offset, self.offset + count
        if isinstance(self.source, bytes):
            return self.source[start:self.offset]
        self.source.seek(start)
        data = self.source.read(count)
        if len(data) != count:
            raise FormatError(f"{self.where}: {what}: the .bin ended while it was read.")
        return data

    def skip(self, blob: Blob, what: str) -> None:
        """Step over an array of another layer."""
        self.take(blob, what, keep=False)

    def take(self, blob: Blob, what: str, keep: bool = True) -> np.ndarray:
        """The next array: ``blob.count`` values, float16 or float32 as stored."""
        if not blob.tagged:
            return self._values(blob.count, "<f4", what, keep)
        tag = struct.unpack("<I", self._bytes(4, f"{what}'s storage tag"))[0]
        if tag in (TAG_FLOAT32, TAG_FLOAT32_SCALED):
            return self._values(blob.count, "<f4", what, keep)
        if tag == TAG_FLOAT16:
            values = self._values(blob.count, "<f2", what, keep)
            self._bytes(-(blob.count * 2) % 4, f"{what}'s padding")
            return values
        if tag == TAG_INT8:
            raise UnsupportedFeatureError(
                f"{self.where}: {what} is stored as int8 (tag 0x{tag:08X}); ncnn computes such "
                "weights with int8 arithmetic, which no float network reproduces. Export the "
                "float model again.")
        raise FormatError(
            f"{self.where}: {what} has the storage tag 0x{tag:08X} at offset {self.offset - 4:,}; "
            f"expected 0 or 0x{TAG_FLOAT32_SCALED:08X} (float32) or 0x{TAG_FLOAT16:08X} "
            "(float16). Other tags mean a 256-entry lookup table no current ncnn tool writes, "
            "or a damaged file.")

    def _values(self, count: int, dtype: str, what: str, keep: bool) -> np.ndarray:
        data = self._bytes(count * np.dtype(dtype).itemsize, what)
        return np.frombuffer(data, dtype=dtype).astype(dtype[1:]) if keep else np.empty(0)


# -- networks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Network:
    layers: tuple[Layer, ...]
    specs: tuple[Spec, ...]


def _producers(layers: Sequence[Layer]) -> dict[str, Layer]:
    found: dict[str, Layer] = {}
    for layer in layers:
        for top in layer.tops:
            found.setdefault(top, layer)
    return found


def _source_of(blob: str, producers: dict[str, Layer], known: dict[str, str]) -> str:
    """The blob ``blob`` copies, through ``Split`` and ``Noop`` layers (each answer kept in
    ``known``, so that every blob is followed once whatever the number of layers)."""
    path: list[str] = []
    while blob not in known and blob in producers and producers[blob].type in PASSING \
            and producers[blob].bottoms and len(path) <= len(producers):
        path.append(blob)
        blob = producers[blob].bottoms[0]
    source = known.get(blob, blob)
    known.update(dict.fromkeys(path, source))
    return source


def _networks(layers: Sequence[Layer], where: str) -> list[_Network]:
    """The chains of recurrent layers, each joined where a layer reads the one before's output
    and its width fits."""
    producers = _producers(layers)
    chains: list[list[tuple[Layer, Spec]]] = []
    last: dict[str, int] = {}  # a chain's last layer's output blob → chain index
    known: dict[str, str] = {}
    for layer in layers:
        if layer.type not in CELLS:
            continue
        spec, _ = recurrent_blobs(layer, where)
        if not layer.bottoms or not layer.tops:
            raise FormatError(f"{where}: {layer.label} has {len(layer.bottoms)} bottoms and "
                              f"{len(layer.tops)} tops; expected the input and the output.")
        before = last.pop(_source_of(layer.bottoms[0], producers, known), None)
        if before is not None and _width(chains[before][-1][1]) == spec.input_size:
            chains[before].append((layer, spec))
            last[layer.tops[0]] = before
        else:
            chains.append([(layer, spec)])
            last[layer.tops[0]] = len(chains) - 1
    return [_Network(tuple(layer for layer, _ in chain), tuple(spec for _, spec in chain))
            for chain in chains]


def _width(spec: Spec) -> int:
    """The width of a layer's output: ``D·H_out``."""
    return spec.num_directions * spec.output_size


def _describe(network: _Network) -> str:
    first, last = network.layers[0], network.layers[-1]
    span = first.name if len(network.layers) == 1 else f"{first.name} … {last.name}"
    kinds = "/".join(dict.fromkeys(item.type for item in network.layers))
    return (f"{len(network.layers)} {kinds} layer(s) {span}: {network.specs[0].input_size} → "
            f"{_width(network.specs[-1])}")


def _pick(networks: list[_Network], layer: str | None, where: str) -> _Network:
    if not networks:
        raise FormatError(f"{where}: holds no LSTM, GRU or RNN layer; expected at least one "
                          "(rnnport reads recurrent networks). pnnx writes two .param files: "
                          "read the .ncnn.param, not pnnx's own .pnnx.param.")
    return by_layer(networks, layer, lambda network: [item.name for item in network.layers],
                    _describe, where)


# -- reading ---------------------------------------------------------------------------------


def _contents(value: Any, field: str, where: str) -> bytes:
    """A field of an :class:`NcnnModel` as bytes (the ``.param`` may be a str)."""
    if isinstance(value, str) and field == "param":
        value = value.encode("ascii", "replace")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise FormatError(f"{where}: {field} is a {type(value).__name__}; expected the "
                          f".{field} file's bytes{' (or its text)' if field == 'param' else ''}.")
    return bytes(value)


def _param_path(path: Path) -> Path:
    """The ``.param`` a path names: itself, or the ``.param`` beside a ``.bin`` given in its
    stead."""
    return path.with_suffix(".param") if path.suffix.lower() == ".bin" else path


def _bin_path(path: Path) -> Path:
    """The ``.bin`` beside a ``.param``: the same name with ``.bin`` for its last suffix."""
    return path.with_suffix(".bin") if path.suffix else path.with_name(path.name + ".bin")


def _load(source: Any, where: str) -> tuple[list[Layer], BinaryIO | bytes, str]:
    if isinstance(source, NcnnModel):
        return (parse_param(_contents(source.param, "param", where), where),
                _contents(source.bin, "bin", where), where)
    path = _param_path(Path(source))
    text = read_file(path, where, limit=MAX_PARAM_BYTES)
    layers = parse_param(text, where)
    weights = _bin_path(path)
    return layers, open_file(weights, f"{where}: its weights {weights.name}",
                             inside=path.parent, name=weights.name), f"{weights}"


def _layer_model(layer: Layer, spec: Spec, arrays: list[np.ndarray]) -> RNN:
    """One network layer from the arrays of an ncnn layer."""
    directions = spec.num_directions
    family = gate_family(spec.cell)
    order = ORDERS[family]
    rows = spec.gate_count * spec.hidden_size
    weight_xc = arrays[0].reshape(directions, rows, spec.input_size)
    bias_c = arrays[1].reshape(directions, -1)
    weight_hc = arrays[2].reshape(directions, rows, spec.output_size)
    params = []
    for direction in range(directions):
        bias = bias_c[direction]
        if spec.cell == "gru":  # r sum, z sum, b_in, b_hn
            hidden = spec.hidden_size
            bias_ih = bias[:rows].copy()
            bias_hh = np.zeros_like(bias_ih)
            block(bias_hh, CANONICAL["gru"], "n")[:] = bias[rows:rows + hidden]
        else:
            bias_ih = reorder(bias, order, CANONICAL[family])
            bias_hh = np.zeros_like(bias_ih)
        named = {"weight_ih": reorder(weight_xc[direction], order, CANONICAL[family]),
                 "weight_hh": reorder(weight_hc[direction], order, CANONICAL[family]),
                 "bias_ih": bias_ih, "bias_hh": bias_hh}
        if spec.proj_size:
            named["weight_hr"] = arrays[3].reshape(directions, spec.proj_size,
                                                   spec.hidden_size)[direction]
        params.append(named)
    return RNN(spec, [params], copy=False)


def _read_network(layers: list[Layer], weights: _Weights, network: _Network,
                  where: str) -> Model:
    wanted = {layer.index for layer in network.layers}
    arrays: dict[int, list[np.ndarray]] = {}
    for layer in layers[:network.layers[-1].index + 1]:
        if layer.index in wanted:
            _, blobs = recurrent_blobs(layer, where)
            arrays[layer.index] = [weights.take(blob, f"{layer.label} {blob.name}")
                                   for blob in blobs]
        else:
            blobs = recurrent_blobs(layer, where)[1] if layer.type in CELLS else \
                _other_blobs(layer, where)
            for blob in blobs:
                weights.skip(blob, f"{layer.label} {blob.name}")
    kinds = {array.dtype for found in arrays.values() for array in found}
    dtype = np.float16 if kinds == {np.dtype(np.float16)} else np.float32
    parts = [_layer_model(layer, spec, [array.astype(dtype, copy=False)
                                         for array in arrays[layer.index]])
             for layer, spec in zip(network.layers, network.specs, strict=True)]
    return stack(parts)


def read(source: Any, layer: str | None = None) -> Model:
    """The recurrent network of an ncnn ``.param`` path (its ``.bin`` beside it) or an
    :class:`NcnnModel`; ``layer=`` picks one of several networks."""
    where = f"ncnn {os.fspath(source)}" if is_path(source) else "ncnn model"
    layers, data, bin_where = _load(source, where)
    try:
        network = _pick(_networks(layers, where), layer, where)
        return _read_network(layers, _Weights(data, bin_where), network, where)
    finally:
        if not isinstance(data, bytes):
            data.close()


def _parsed(source: Any) -> tuple[list[Layer], str]:
    where = f"ncnn {os.fspath(source)}" if is_path(source) else "ncnn model"
    if isinstance(source, NcnnModel):
        return parse_param(_contents(source.param, "param", where), where), where
    return parse_param(read_file(_param_path(Path(source)), where, limit=MAX_PARAM_BYTES),
                       where), where


def networks(source: Any) -> Choices:
    """The recurrent networks of a model, each picked by the name of its first layer."""
    layers, where = _parsed(source)
    return Choices("layer", tuple((network.layers[0].name, _describe(network))
                                  for network in _networks(layers, where)))


def notes(source: Any, layer: str | None = None) -> list[str]:
    """The layers beside the network, and the initial states it takes from other blobs."""
    layers, where = _parsed(source)
    found = _networks(layers, where)
    network = _pick(found, layer, where)
    mine = {item.index for item in network.layers}
    out = []
    others = [item for item in layers if item.index not in mine and item.type != "Input"]
    if others:
        shown = listed(f"{item.name} ({item.type})" for item in others)
        out.append(f"other layers beside the network: {shown}")
    for item in network.layers:
        if len(item.bottoms) > 1:
            out.append(f"{item.label} takes its initial state from {', '.join(item.bottoms[1:])}; "
                       "forward(state=…) gives it (zeros when None)")
    for other in found:
        if other is not network:
            out.append(f"another recurrent network: {_describe(other)} (layer="
                       f"{other.layers[0].name!r} reads it)")
    return out


# -- writing ---------------------------------------------------------------------------------


def _tagged(array: np.ndarray) -> bytes:
    """A tagged .bin array: the tag, the values, and zeros to a multiple of 4 bytes."""
    if array.dtype == np.float16:
        data = array.astype("<f2").tobytes()
        return struct.pack("<I", TAG_FLOAT16) + data + bytes(-len(data) % 4)
    return struct.pack("<I", TAG_FLOAT32) + array.astype("<f4").tobytes()


def _layer_arrays(model: RNN) -> Iterator[tuple[Spec, list[tuple[str, np.ndarray]]]]:
    """Per network layer: its one-layer spec and the ncnn arrays, named."""
    spec = model.spec
    family = gate_family(spec.cell)
    order = ORDERS[family]
    for index, directions in enumerate(model.params):
        layer_spec = spec.replace(num_layers=1, input_size=spec.layer_input_size(index))
        xc, bias, hc, hr = [], [], [], []
        for named in directions:
            xc.append(reorder(named["weight_ih"], CANONICAL[family], order))
            hc.append(reorder(named["weight_hh"], CANONICAL[family], order))
            bias.append(_bias(spec, named))
            if spec.proj_size:
                hr.append(named["weight_hr"])
        arrays = [("weight_xc_data", np.stack(xc)), ("bias_c_data", np.stack(bias)),
                  ("weight_hc_data", np.stack(hc))]
        if hr:
            arrays.append(("weight_hr_data", np.stack(hr)))
        yield layer_spec, arrays


def _bias(spec: Spec, named: dict[str, np.ndarray] | Any) -> np.ndarray:
    """One direction's ncnn bias rows: (4, H) LSTM, (4, H) GRU, (1, H) RNN."""
    hidden, dtype = spec.hidden_size, named["weight_ih"].dtype
    rows = spec.gate_count * hidden
    bias_ih = named.get("bias_ih", np.zeros(rows, dtype))
    bias_hh = named.get("bias_hh", np.zeros(rows, dtype))
    if spec.cell == "gru":
        gates = CANONICAL["gru"]
        summed = sum_exact(bias_ih[:2 * hidden], bias_hh[:2 * hidden])
        return np.concatenate([summed, block(bias_ih, gates, "n"),
                               block(bias_hh, gates, "n")]).reshape(4, hidden)
    family = gate_family(spec.cell)
    summed = reorder(sum_exact(bias_ih, bias_hh), CANONICAL[family], ORDERS[family])
    return summed.reshape(-1, hidden)


def encode(model: Model) -> NcnnModel:
    """The ``.param`` text and ``.bin`` bytes of ``model`` (an ``Input`` named ``in0``, one
    layer per network layer, the last one's output ``out0``)."""
    parts = model.parts if isinstance(model, Stack) else (model,)
    lines: list[str] = []
    data = bytearray()
    blob = "in0"
    count = sum(part.spec.num_layers for part in parts)
    for part in parts:
        for layer_spec, arrays in _layer_arrays(part):
            number = len(lines)
            kind = TYPES[gate_family(layer_spec.cell)]
            top = "out0" if number == count - 1 else str(number + 1)
            params = [f"0={layer_spec.output_size}", f"1={arrays[0][1].size}",
                      f"2={2 if layer_spec.bidirectional else 1 if layer_spec.reverse else 0}"]
            if layer_spec.cell == "lstm":
                params.append(f"3={layer_spec.hidden_size}")
            lines.append(f"{kind:<24} {f'{kind.lower()}_{number}':<24} 1 1 {blob} {top} "
                         + " ".join(params))
            blob = top
            for _, array in arrays:
                data += _tagged(np.ascontiguousarray(array))
    header = [str(MAGIC), f"{count + 1} {count + 1}", f"{'Input':<24} {'in0':<24} 0 1 in0"]
    return NcnnModel("\n".join([*header, *lines, ""]).encode("ascii"), bytes(data))


def output_files(path: Path) -> list[Path]:
    """The ``.param`` and the ``.bin`` beside it."""
    return [path, _bin_path(path)]


def input_files(path: Path) -> list[Path]:
    """Reading a ``.param`` opens the ``.bin`` beside it (and a ``.bin`` its ``.param``)."""
    if path.suffix.lower() == ".bin":
        return [_param_path(path)]
    return [_bin_path(path)] if sniff(path) else []


def write(model: Model, path: Any = None) -> NcnnModel:
    files = encode(model)
    if path is not None:
        param, weights = output_files(Path(path))
        atomic_write_all([(param, lambda file: file.write(files.param)),
                          (weights, lambda file: file.write(files.bin))])
    return files


# -- the rest of the protocol ----------------------------------------------------------------


def sniff(source: Any) -> bool:
    """An :class:`NcnnModel`, or a path whose file starts with ncnn's magic number (text or
    binary .param), or ends ``.param``, or a ``.bin`` beside such a ``.param``."""
    if isinstance(source, NcnnModel):
        return True
    if not is_path(source):
        return False
    if os.fspath(source).lower().endswith(".param"):
        return True
    if Path(source).suffix.lower() == ".bin":
        return is_param(_param_path(Path(source)))
    return is_param(Path(source))


def is_param(path: Path) -> bool:
    """Whether the file at ``path`` starts with ncnn's magic number (text or binary)."""
    start = head(path, 16)
    return start is not None and (start[:4] == struct.pack("<i", MAGIC) or re.match(
        rb"\s*7767517\s", start) is not None)


def param_count(model: Model) -> int:
    """Values the ``.bin`` stores: one bias per gate (a GRU's four rows)."""
    parts = model.parts if isinstance(model, Stack) else (model,)
    return sum(array.size for part in parts for _, arrays in _layer_arrays(part)
               for _, array in arrays)


def explain_arrays(native: Any, spec: Spec) -> list[NamedArray]:
    """Each layer's ncnn arrays, as its ``load_model`` shapes them."""
    files = native if isinstance(native, NcnnModel) else encode(read(native))
    layers = parse_param(files.param, "ncnn model")
    weights = _Weights(files.bin, "ncnn model")
    out = []
    for layer in layers:
        if layer.type not in CELLS:
            continue
        layer_spec, blobs = recurrent_blobs(layer, "ncnn model")
        directions = layer_spec.num_directions
        gates = layer_spec.gate_count
        for blob in blobs:
            array = weights.take(blob, blob.name)
            shape = {"weight_xc_data": (directions, gates * layer_spec.hidden_size, -1),
                     "bias_c_data": (directions, -1),
                     "weight_hc_data": (directions, gates * layer_spec.hidden_size, -1),
                     "weight_hr_data": (directions, layer_spec.proj_size, -1)}[blob.name]
            out.append(NamedArray(f"{layer.name}.{blob.name}", array.reshape(shape), None,
                                  ("axis 0 is the direction (forward, then reverse)",)))
    return out


def framework_forward(source: Any, model: Model, x: np.ndarray) -> tuple[str, np.ndarray] | str:
    """ncnn's ``Net`` running the ``.param``/``.bin`` of ``source`` on each sequence of ``x``
    ``(batch, time, I)``, zeros fed to initial-state bottoms."""
    import importlib.util

    if not is_path(source):
        return "only a .param file beside its .bin holds a model ncnn can load" + NO_CHECK
    if importlib.util.find_spec("ncnn") is None:
        return "the ncnn package is not installed (pip install ncnn)" + NO_CHECK
    source = _param_path(Path(source))
    layers, where = _parsed(source)
    found = _networks(layers, where)
    if len(found) != 1:
        return "the file holds several recurrent networks" + NO_CHECK
    network = found[0]
    import ncnn  # type: ignore[import-untyped]

    first, last = network.layers[0], network.layers[-1]
    outputs = []
    with ncnn.Net() as net:
        # float32 throughout, as rnnport computes (ncnn would use float16 where the CPU has it)
        net.opt.use_fp16_storage = net.opt.use_fp16_packed = False
        net.opt.use_fp16_arithmetic = net.opt.use_bf16_storage = False
        if net.load_param(os.fspath(source)) or net.load_model(os.fspath(_bin_path(Path(source)))):
            return f"ncnn cannot load {os.fspath(source)}" + NO_CHECK
        for sequence in np.asarray(x, dtype=np.float32):
            with net.create_extractor() as extractor:
                extractor.input(first.bottoms[0], ncnn.Mat(np.ascontiguousarray(sequence)))
                for item in network.layers:
                    for index, bottom in enumerate(item.bottoms[1:]):
                        spec = network.specs[network.layers.index(item)]
                        width = spec.output_size if index == 0 else spec.hidden_size
                        zeros = np.zeros((spec.num_directions, width), np.float32)
                        extractor.input(bottom, ncnn.Mat(zeros))
                status, y = extractor.extract(last.tops[0])
                if status:
                    return f"ncnn failed to run {os.fspath(source)} ({status})" + NO_CHECK
                outputs.append(np.array(y))
    return f"ncnn {getattr(ncnn, '__version__', '')} running {os.fspath(source)}".replace(
        "  ", " "), np.stack(outputs)


FORMAT = Format(
    "ncnn", sniff=sniff, reader=read, writer=write, counter=param_count,
    cells=frozenset({"lstm", "gru", "rnn_tanh"}),
    read_options=READ_OPTIONS, features=frozenset({"projection", "reverse"}),
    one_bias=frozenset({"lstm", "gru", "rnn"}), always_bias=True,
    dtypes=frozenset({"float16", "float32"}), extra="ncnn", modules=("ncnn",),
    suffixes=(Suffix(".ncnn.param", "an ncnn .param (pnnx's name) with its .ncnn.bin"),
              Suffix(".param", "an ncnn .param with its .bin beside it")),
    output_files=output_files, input_files=input_files, gate_names={"z": "u"},
    explain_arrays=explain_arrays, networks=networks, notes=notes,
    framework_forward=framework_forward,
    names={"projection": "LSTM 0=num_output < 3=hidden_size", "reverse": "direction 2=1",
           "reset_after": "GRU"},
    layout_notes=("ncnn keeps per layer weight_xc (D, G·H, I), bias_c (D, rows·H), weight_hc "
                  "(D, G·H, H_out): LSTM gates I F O G with one summed bias; GRU r z n with "
                  "bias rows r sum, z sum, b_in, b_hn.",))
