"""PyTorch's tensors as its files describe them, read and written without PyTorch.

A tensor in a file is a *view* of a storage: ``(storage, storage_offset, size, stride,
dtype)``, in elements; the storage is a run of little-endian numbers (``torch.save`` zips:
the member ``<root>/data/<key>``; legacy files: a record after the pickles; ``.pt2``
archives: ``data/weights/weight_<n>``; safetensors: a byte range). :class:`TensorRef` keeps
that description, and :meth:`TensorRef.array` makes the NumPy array only when asked, after
checking that every element it reads lies inside the storage and charging its bytes to the
read's :class:`Ledger` (the ``expansion`` limit): a stride of 0, or many tensors over one
storage, cannot build more than the limit allows. A storage is read from the file once,
however many tensors view it.

``torch.save`` pickles a tensor as a call of ``torch._utils._rebuild_tensor_v2`` (``_v3``
for the newer dtypes, ``_rebuild_tensor`` in old files) on a persistent id naming its
storage, a parameter as ``_rebuild_parameter(_with_state)`` around it, a tensor subclass
as ``torch._tensor._rebuild_from_type_v2``; :func:`builders` gives those calls, made on plain
data by :mod:`rnnport.io.pickled`, with the storage and dtype names (``torch.FloatStorage``,
``torch.float32``) and the containers a state_dict uses (``collections.OrderedDict``).

bfloat16 becomes float32 (exact); the float8 and quantized types have no NumPy form and are
refused by name when read.
"""

from __future__ import annotations

import math
import struct
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import budget
from ...errors import FormatError
from ...io.archive import member_data, read_member
from ...io.pickled import Builder, Global, globals_named, preview, unpickle

__all__ = ["DTYPES", "DType", "Ledger", "Loaded", "NumpyArray", "Storage", "StorageType",
           "TensorRef",
           "builders", "dtype_named", "numpy_builders", "pickle_state_dict", "read_zip_tree",
           "storage_id", "zip_root"]


@dataclass(frozen=True)
class DType:
    """A PyTorch dtype: its name, its stored NumPy dtype (None: no NumPy form) and size."""

    name: str
    stored: str | None
    itemsize: int

    def out(self) -> np.dtype[Any]:
        """The dtype an array of it is given: bfloat16 as float32, else as stored."""
        return np.dtype("float32") if self.name == "bfloat16" else np.dtype(self.stored)


DTYPES: dict[str, DType] = {dtype.name: dtype for dtype in (
    DType("float32", "<f4", 4), DType("float64", "<f8", 8), DType("float16", "<f2", 2),
    DType("bfloat16", "<u2", 2), DType("int64", "<i8", 8), DType("int32", "<i4", 4),
    DType("int16", "<i2", 2), DType("int8", "i1", 1), DType("uint8", "u1", 1),
    DType("uint16", "<u2", 2), DType("uint32", "<u4", 4), DType("uint64", "<u8", 8),
    DType("bool", "?", 1), DType("complex64", "<c8", 8), DType("complex128", "<c16", 16),
    DType("complex32", None, 4), DType("float8_e4m3fn", None, 1), DType("float8_e5m2", None, 1),
    DType("float8_e4m3fnuz", None, 1), DType("float8_e5m2fnuz", None, 1),
    DType("float8_e8m0fnu", None, 1), DType("qint8", None, 1), DType("quint8", None, 1),
    DType("qint32", None, 4), DType("quint4x2", None, 1), DType("quint2x4", None, 1),
)}
# PyTorch's other names for them (``torch.float`` is ``torch.float32``).
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32", "short": "int16", "cfloat": "complex64", "cdouble": "complex128",
           "chalf": "complex32"}
# ``torch.FloatStorage`` → float32: the typed storages a file names.
STORAGES = {"Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
            "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8",
            "Bool": "bool", "ComplexFloat": "complex64", "ComplexDouble": "complex128",
            "ComplexHalf": "complex32", "QInt8": "qint8", "QUInt8": "quint8",
            "QInt32": "qint32", "QUInt4x2": "quint4x2", "QUInt2x4": "quint2x4"}
MAX_DIMS = 64
MAX_EXTENT = 2**40  # the largest size, stride or offset read (a tensor of 2⁴⁰ elements)


def dtype_named(name: str, where: str) -> DType:
    found = DTYPES.get(ALIASES.get(name, name))
    if found is None:
        raise FormatError(f"{where}: dtype {name!r} is no PyTorch dtype rnnport knows; expected "
                          f"one of {', '.join(DTYPES)}.")
    return found


@dataclass(eq=False)
class Ledger:
    """What one read may build (the ``expansion`` limit for a file of ``size`` bytes), and
    what it has built so far."""

    where: str
    size: int
    spent: int = 0

    def charge(self, count: int, what: str, where: str | None = None) -> None:
        """Count ``count`` bytes of ``what`` (read at ``where``, default the file) before
        they are made, or raise LimitError."""
        allowed = budget.allowance("expansion", self.size)
        if self.spent + count > allowed:
            raise budget.exceeded(where or self.where, f"{what} would take {count:,} bytes, "
                                  f"{self.spent + count:,} with what this read built before",
                                  "expansion", self.size, self.spent + count)
        self.spent += count


Buffer = bytes | bytearray | memoryview


@dataclass(eq=False)
class Storage:
    """A storage a file names: ``numel`` elements of ``dtype``, read by ``load`` (which
    returns at least ``nbytes`` bytes, or raises FormatError) the first time a tensor over
    it is read."""

    key: str
    dtype: DType
    numel: int
    load: Callable[[int], Buffer]
    ledger: Ledger
    byte_offset: int = 0  # a legacy storage view's start within its root storage's bytes
    big_endian: bool = False  # a file written on a big-endian machine says so
    _data: Buffer | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def data(self) -> Buffer:
        if self._data is None:
            self.ledger.charge(self.nbytes, f"storage {self.key!r}")
            raw = self.load(self.byte_offset + self.nbytes)
            if len(raw) < self.byte_offset + self.nbytes:
                raise FormatError(f"{self.ledger.where}: storage {self.key!r} holds "
                                  f"{len(raw) - self.byte_offset:,} bytes; expected "
                                  f"{self.nbytes:,} ({self.numel:,} × {self.dtype.name}). "
                                  "The file is truncated or damaged.")
            self._data = raw if self.byte_offset == 0 and len(raw) == self.nbytes else \
                memoryview(raw)[self.byte_offset:self.byte_offset + self.nbytes]
        return self._data


@dataclass(eq=False)
class TensorRef:
    """A tensor a file holds, not yet read: a view of ``storage``."""

    storage: Storage
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: DType
    kind: str = "tensor"  # or "parameter"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def describe(self) -> str:
        return f"{self.dtype.name} {self.shape}"

    def array(self, where: str) -> np.ndarray:
        """The tensor as a new NumPy array (bfloat16 as float32), read after checking that
        its elements lie inside its storage and charging its bytes."""
        if self.dtype.stored is None:
            raise FormatError(f"{where}: a {self.dtype.name} tensor, which has no NumPy form; "
                              "expected float32, float64, float16 or bfloat16 weights. "
                              "Dequantize or cast the weights before saving them.")
        count = self.size
        if not count:
            return np.zeros(self.shape, dtype=self.dtype.out())
        if (self.offset + sum((dim - 1) * step for dim, step in
                                        zip(self.shape, self.stride, strict=True)) >= self.storage.numel):
            raise FormatError(
                f"{where}: tensor {self.describe()} at offset {self.offset} with strides "
                f"{self.stride} reads past its storage's {self.storage.numel:,} elements. The "
                "file is damaged or built to read outside its data; nothing was read.")
        self.storage.ledger.charge(count * self.dtype.out().itemsize,
                                   f"tensor {self.describe()}", where)
        stored = np.dtype(self.dtype.stored)
        if self.storage.big_endian:
            stored = stored.newbyteorder(">")
        base = np.frombuffer(self.storage.data(), dtype=stored, count=self.storage.numel)
        itemsize = base.itemsize
        whole = tuple(math.prod(self.shape[axis + 1:]) for axis in range(self.ndim))
        if self.offset == 0 and count == self.storage.numel and self.stride == whole and \
                stored.isnative and self.dtype.name != "bfloat16":
            return base.reshape(self.shape)  # the storage is this tensor: no copy
        view = np.lib.stride_tricks.as_strided(
            base[self.offset:], shape=self.shape,
            strides=tuple(step * itemsize for step in self.stride), writeable=False)
        array = np.array(view, dtype=stored.newbyteorder("="), copy=True)
        if self.dtype.name == "bfloat16":  # the upper half of a float32: exact
            return (array.astype(np.uint32) << 16).view(np.float32)
        return array


def _whole_numbers(value: Any, what: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > MAX_DIMS or not all(
            isinstance(item, int) and not isinstance(item, bool) and 0 <= item < MAX_EXTENT
            for item in value):
        raise FormatError(f"{where}: a tensor's {what} is {preview(value)}; expected at most "
                          f"{MAX_DIMS} whole numbers from 0 to 2⁴⁰. The file is damaged.")
    return tuple(value)


def make_tensor(where: str) -> Callable[..., TensorRef]:
    """``torch._utils._rebuild_tensor_v2`` (and ``_v3``, ``_rebuild_tensor``) on plain data."""

    def rebuild(storage: Any, offset: Any, size: Any, stride: Any, *rest: Any) -> TensorRef:
        if not isinstance(storage, Storage):
            raise FormatError(f"{where}: a tensor over {type(storage).__name__}, not over a "
                              "storage the file holds; the file is damaged.")
        if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < MAX_EXTENT:
            raise FormatError(f"{where}: a tensor's storage offset is {preview(offset)}; "
                              "expected a whole number from 0 to 2⁴⁰. The file is damaged.")
        shape = _whole_numbers(size, "size", where)
        strides = _whole_numbers(stride, "stride", where)
        if len(strides) != len(shape):
            raise FormatError(f"{where}: a tensor of size {shape} with strides {strides}; "
                              "expected one stride per dimension. The file is damaged.")
        dtype = storage.dtype
        if len(rest) >= 3 and isinstance(rest[2], DType):  # _rebuild_tensor_v3's dtype
            dtype = rest[2]
            if storage.dtype.name != "uint8":
                raise FormatError(f"{where}: a {dtype.name} tensor over a typed "
                                  f"{storage.dtype.name} storage; the file is damaged.")
            if storage.nbytes % dtype.itemsize:
                raise FormatError(f"{where}: a {dtype.name} tensor over {storage.nbytes} bytes, "
                                  f"no whole number of {dtype.itemsize}-byte elements.")
            storage = Storage(storage.key, dtype, storage.nbytes // dtype.itemsize,
                              storage.load, storage.ledger, storage.byte_offset,
                              storage.big_endian)
        return TensorRef(storage, offset, shape, strides, dtype)

    return rebuild


def _parameter(data: Any, *rest: Any) -> Any:
    if isinstance(data, TensorRef):
        data.kind = "parameter"
    return data


def _from_type(function: Any, new_type: Any, args: Any, state: Any = None) -> Any:
    """``torch._tensor._rebuild_from_type_v2``: a tensor subclass's data, rebuilt by the
    function it names when that is one of the tensor builders (never this one again)."""
    if isinstance(function, Builder) and function.name in TENSOR_BUILDERS and \
            isinstance(args, tuple):
        return function.function(*args)
    return _Unbuilt(function, new_type)


@dataclass(eq=False)
class _Unbuilt:
    """A tensor rebuilt by a function rnnport does not run (a sparse or quantized tensor)."""

    function: Any
    new_type: Any


def _dict(*args: Any) -> dict[Any, Any]:
    """``collections.OrderedDict()`` and friends: a dict the pickle fills; a
    ``defaultdict(factory)`` ignores its factory, a ``Counter({…})`` copies its counts."""
    if not args or (len(args) == 1 and isinstance(args[0], (Global, Builder))):
        return {}
    if len(args) == 1 and isinstance(args[0], dict):
        return dict(args[0])
    raise TypeError("expected no arguments, a factory or a dict")


def _size(items: Any = ()) -> tuple[Any, ...]:
    return tuple(items) if isinstance(items, (tuple, list)) else ()


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    """``_codecs.encode``, how protocol 2 pickles ``bytes``: latin-1 text back to bytes."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8"):
        raise TypeError("expected text and latin1")
    return text.encode(encoding)


def _device(*args: Any) -> str:
    return ":".join(str(arg) for arg in args)


# NumPy dtype codes an array in a checkpoint may have (an object array's data is a pickle).
NUMPY_CODES = frozenset({"f2", "f4", "f8", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "b1",
                         "c8", "c16"})


@dataclass(eq=False)
class NumpyDType:
    """``numpy.dtype('f4', False, True)`` as a pickle makes it; BUILD sets its byte order."""

    code: Any
    byteorder: str = "="

    def pickle_state(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and state[1] in ("<", ">", "=", "|"):
            self.byteorder = state[1]

    def dtype(self, where: str) -> np.dtype[Any]:
        if not isinstance(self.code, str) or self.code not in NUMPY_CODES:
            raise FormatError(f"{where}: a NumPy array of dtype {preview(self.code)}; "
                              "expected a numeric dtype (an object array is a pickle, never "
                              "built).")
        return np.dtype(self.code).newbyteorder(">" if self.byteorder == ">" else
                                                "<" if self.byteorder == "<" else "=")


@dataclass(eq=False)
class NumpyArray:
    """A NumPy array pickled in a checkpoint (``numpy.core.multiarray._reconstruct`` and its
    state: shape, dtype, order, raw bytes), made only when read."""

    shape: Any = ()
    kind: Any = None
    fortran: Any = False
    raw: Any = None
    ledger: Ledger | None = None

    def pickle_state(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) in (4, 5):
            self.shape, self.kind, self.fortran, self.raw = state[-4:]

    def describe(self) -> str:
        return f"NumPy {preview(getattr(self.kind, 'code', '?'))} {preview(self.shape)}"

    def array(self, where: str) -> np.ndarray:
        if not isinstance(self.kind, NumpyDType) or not isinstance(self.raw, bytes):
            raise FormatError(f"{where}: a NumPy array without its dtype or bytes; the file is "
                              "damaged, or holds an object array.")
        dtype = self.kind.dtype(where)
        shape = _whole_numbers(self.shape, "shape", where)
        if math.prod(shape) * dtype.itemsize != len(self.raw):
            raise FormatError(f"{where}: a NumPy array of shape {shape} and dtype {dtype} holds "
                              f"{len(self.raw):,} bytes; expected "
                              f"{math.prod(shape) * dtype.itemsize:,}. The file is damaged.")
        if self.ledger is not None:
            self.ledger.charge(len(self.raw), f"a NumPy array of shape {shape}", where)
        flat = np.frombuffer(self.raw, dtype=dtype)
        return np.array(flat.reshape(shape, order="F" if self.fortran else "C"),
                        dtype=dtype.newbyteorder("="))


TENSOR_BUILDERS = ("torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor_v3",
                   "torch._utils._rebuild_tensor", "torch._utils._rebuild_parameter",
                   "torch._utils._rebuild_parameter_with_state")


def numpy_builders(ledger: Ledger) -> dict[str, Builder]:
    """The globals a pickle of NumPy arrays in plain containers names (what ``pickle.dump``
    of a dict of arrays writes, in any protocol), by dotted name: the arrays are
    :class:`NumpyArray` records, made only when read."""
    named = {
        "collections.OrderedDict": Builder("collections.OrderedDict", _dict),
        "collections.defaultdict": Builder("collections.defaultdict", _dict),
        "collections.Counter": Builder("collections.Counter", _dict),
        "builtins.dict": Builder("builtins.dict", _dict),
        "_codecs.encode": Builder("_codecs.encode", _encode),
        "builtins.set": Builder("builtins.set", _size),
        "builtins.frozenset": Builder("builtins.frozenset", _size),
        "numpy.dtype": Builder("numpy.dtype", lambda code, *flags: NumpyDType(code)),
    }
    for module in ("numpy.core.multiarray", "numpy._core.multiarray"):
        named[f"{module}._reconstruct"] = Builder(
            f"{module}._reconstruct", lambda cls, shape, code: NumpyArray(ledger=ledger))
        named[f"{module}.scalar"] = Builder(
            f"{module}.scalar", lambda kind, raw=None: NumpyArray((), kind, False, raw, ledger))
    for module in ("numpy.core.numeric", "numpy._core.numeric"):  # protocol 5's arrays
        named[f"{module}._frombuffer"] = Builder(
            f"{module}._frombuffer", lambda raw, kind, shape, order="C": NumpyArray(
                shape, kind, order == "F", bytes(raw) if isinstance(raw, bytearray) else raw,
                ledger))
    return named


def builders(where: str, ledger: Ledger) -> dict[tuple[str, str], Any]:
    """The globals a PyTorch pickle may name, as the pickle machine's ``known``."""
    tensor = Builder("torch._utils._rebuild_tensor_v2", make_tensor(where))
    named: dict[str, Any] = {
        **numpy_builders(ledger),
        "torch._utils._rebuild_tensor_v2": tensor,
        "torch._utils._rebuild_tensor_v3": Builder("torch._utils._rebuild_tensor_v3",
                                                   tensor.function),
        "torch._utils._rebuild_tensor": Builder("torch._utils._rebuild_tensor",
                                                tensor.function),
        "torch._utils._rebuild_parameter": Builder("torch._utils._rebuild_parameter",
                                                   _parameter),
        "torch._utils._rebuild_parameter_with_state": Builder(
            "torch._utils._rebuild_parameter_with_state", _parameter),
        "torch._tensor._rebuild_from_type_v2": Builder("torch._tensor._rebuild_from_type_v2",
                                                       _from_type),
        "torch.Size": Builder("torch.Size", _size),
        "torch.device": Builder("torch.device", _device),
    }
    known: dict[tuple[str, str], Any] = dict(globals_named(named))
    for name in (*DTYPES, *ALIASES):
        known[("torch", name)] = DTYPES[ALIASES.get(name, name)]
    for prefix, name in STORAGES.items():
        for module in ("torch", "torch.cuda"):
            known[(module, f"{prefix}Storage")] = StorageType(DTYPES[name])
    for module in ("torch", "torch.storage"):
        known[(module, "UntypedStorage")] = StorageType(DTYPES["uint8"])
    return known


@dataclass(frozen=True)
class StorageType:
    """``torch.FloatStorage`` as a pickle names it: the dtype of the storage's elements."""

    dtype: DType


def storage_id(pid: Any, where: str) -> tuple[DType, str, int, tuple[Any, ...] | None]:
    """A persistent id ``('storage', type, key, location, numel[, view])`` as (dtype, key,
    numel, view metadata or None)."""
    if not isinstance(pid, tuple) or len(pid) not in (5, 6) or \
            pid[0] not in ("storage", b"storage"):
        raise FormatError(f"{where}: a persistent id {preview(pid)}; expected ('storage', "
                          "type, key, location, size), the only kind torch.save writes. The "
                          "file is damaged or not a PyTorch file.")
    kind, key, numel = pid[1], pid[2], pid[4]
    if not isinstance(kind, StorageType):
        raise FormatError(f"{where}: a storage of type {preview(kind)}; expected a PyTorch "
                          "storage type (torch.FloatStorage …).")
    if isinstance(key, bytes):
        key = key.decode("ascii", "replace")
    if not (isinstance(key, str) or (isinstance(key, int) and 0 <= key < 2**63)) or \
            not isinstance(numel, int) or isinstance(numel, bool) or not 0 <= numel < 2**62:
        raise FormatError(f"{where}: storage {preview(key)} of {preview(numel)} elements; "
                          "expected a key and a non-negative size. The file is damaged.")
    view = pid[5] if len(pid) == 6 else None
    return kind.dtype, str(key), numel, view


@dataclass
class Loaded:
    """What a PyTorch file holds: ``tree`` (dicts, lists, tuples, numbers, strings, the
    pickle machine's ``Opaque`` records and :class:`TensorRef` leaves), what kind of file
    it is, and what a ``.pt2`` graph says about its networks (``graphs``: see
    :mod:`.pt2`)."""

    tree: Any
    kind: str
    where: str
    size: int
    graphs: list[Any] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    models: int = 1  # a .pt2 archive's models: the tree holds several under their names


def zip_root(names: list[str]) -> str | None:
    """The folder holding ``data.pkl`` (``archive/``), the shallowest; None without one."""
    found = sorted((name for name in names if name == "data.pkl" or name.endswith("/data.pkl")),
                   key=lambda name: name.count("/"))
    return found[0][: -len("data.pkl")] if found else None


def read_zip_tree(archive: zipfile.ZipFile, root: str, where: str, size: int,
                  ledger: Ledger) -> Any:
    """The object a ``torch.save`` zip (rooted at ``root``, e.g. ``archive/``) pickles."""
    names = set(archive.namelist())
    big_endian = False
    if f"{root}byteorder" in names:
        order = read_member(archive, f"{root}byteorder", where, limit=16, crc=False).strip()
        if order not in (b"little", b"big"):
            raise FormatError(f"{where}: {root}byteorder says {order[:16]!r}; expected 'little' "
                              "or 'big'. The file is damaged.")
        big_endian = order == b"big"
    data = read_member(archive, f"{root}data.pkl", where,
                       limit=budget.allowance("expansion", size), crc=False)
    storages: dict[str, Storage] = {}

    def persistent(pid: Any) -> Storage:
        dtype, key, numel, _ = storage_id(pid, where)
        if key in storages:
            return storages[key]
        member = f"{root}data/{key}"
        if member not in names:
            raise FormatError(f"{where}: storage {key!r} is named by the pickle, but the "
                              f"archive has no member {member!r}; the file is truncated or "
                              "damaged.")
        held = archive.getinfo(member).file_size
        if held < numel * dtype.itemsize:
            raise FormatError(
                f"{where}: storage {key!r} declares {numel:,} {dtype.name} elements "
                f"({numel * dtype.itemsize:,} bytes), but its member holds {held:,}. The file "
                "is damaged or built to exhaust memory; nothing was read.")
        storages[key] = Storage(key, dtype, numel,
                                lambda need: member_data(archive, member, where, need),
                                ledger,
                                big_endian=big_endian)
        return storages[key]

    tree, _ = unpickle(data, f"{where}, {root}data.pkl", known=builders(where, ledger),
                         persistent=persistent, size=size)
    return tree


# -- writing: a state_dict as torch.save pickles it ------------------------------------------


def _text(value: str) -> bytes:
    encoded = value.encode("utf-8")
    return b"X" + struct.pack("<I", len(encoded)) + encoded


def _int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    if -(2**31) <= value < 2**31:
        return b"J" + struct.pack("<i", value)
    raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(raw)]) + raw


def _ints(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(_int(value) for value in values) + b"t"


STORAGE_NAMES = {name: prefix for prefix, name in STORAGES.items()}
NUMPY_NAMES = {"float32": "float32", "float64": "float64", "float16": "float16"}


def pickle_state_dict(state: Mapping[str, np.ndarray]) -> tuple[bytes, list[np.ndarray]]:
    """The ``data.pkl`` of ``torch.save(state_dict)`` (protocol 2, an ``OrderedDict`` of
    tensors, as PyTorch writes it) and the storages it names, in key order ``0, 1, …``:
    each array as one contiguous little-endian storage."""
    out = [b"\x80\x02", b"ccollections\nOrderedDict\nq\x00)R("]
    storages = []
    for index, (name, value) in enumerate(state.items()):
        array = np.require(value, requirements="C")  # 0-d stays 0-d
        if array.dtype.name not in NUMPY_NAMES:
            raise FormatError(f"writing a PyTorch file: {name!r} has dtype {array.dtype}; "
                              f"expected one of {', '.join(NUMPY_NAMES)}.")
        storage = STORAGE_NAMES[NUMPY_NAMES[array.dtype.name]]
        strides = tuple(step // array.itemsize for step in array.strides) if array.size else \
            tuple(math.prod(array.shape[axis + 1:]) for axis in range(array.ndim))
        out += [_text(name), b"ctorch._utils\n_rebuild_tensor_v2\n((",
                _text("storage"), f"ctorch\n{storage}Storage\n".encode(), _text(str(index)),
                _text("cpu"), _int(array.size), b"tQ", _int(0), _ints(array.shape),
                _ints(strides), b"\x89h\x00)Rt", b"R"]
        storages.append(array.astype(array.dtype.newbyteorder("<"), copy=False))
    out.append(b"u.")
    return b"".join(out), storages
