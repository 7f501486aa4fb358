"""The child of :mod:`rnnport.io.hdf5`: ``python -I _hdf5_child.py PATH|- SIZE RATIO SECONDS``.

``RATIO`` bounds compressed datasets: their bytes may reach ``RATIO × SIZE`` (1032 for a
file, 1 for an archive member, whose decompression was bounded already). ``SECONDS`` is
the CPU time allowed, the parent's timeout.

Reads an HDF5 file with h5py under resource limits and writes its tree to stdout (see
:mod:`rnnport.io.hdf5` for the protocol). Imports nothing from rnnport, so that a hostile
file meets as little code as possible and the child starts fast.
"""

from __future__ import annotations

import io
import json
import resource
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np

MAX_NODES = 100_000
MAX_DEPTH = 64
MEMORY = 512 << 20           # bytes beyond the imports, plus three times the file's size


def encode_attribute(value: Any) -> dict[str, Any] | None:
    if isinstance(value, str):
        return {"str": value}
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    if isinstance(value, h5py.Empty):
        return None
    array = np.asarray(value)
    if array.dtype.kind in "OSU":
        items = [encode_attribute(item) if isinstance(item, (str, bytes)) else None
                 for item in array.reshape(-1).tolist()]
        return None if None in items else {"strings": items}
    if array.dtype.kind in "biuf" and array.size <= 1 << 20:
        return {"values": array.reshape(-1).tolist(), "dtype": array.dtype.str,
                "shape": list(array.shape)}
    return None  # compound, reference, enum … types: no weights


class Walk:
    """Copies a file's tree out, through hard links, each object once, within the budget."""

    def __init__(self, size: int, ratio: int) -> None:
        self.plain, self.filtered = size, size * ratio
        self.nodes = 0
        self.seen: set[int] = set()
        self.arrays: list[np.ndarray] = []
        self.offset = 0

    def node(self, obj: Any, depth: int) -> dict[str, Any]:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            raise ValueError(f"more than {MAX_NODES} objects or deeper than {MAX_DEPTH} levels")
        address = h5py.h5o.get_info(obj.id).addr
        if address in self.seen:
            raise ValueError(f"{obj.name} is reached twice (hard links form a cycle or share "
                             "an object)")
        self.seen.add(address)
        attrs = {}
        for name in obj.attrs:
            encoded = encode_attribute(obj.attrs[name])
            if encoded is not None:
                attrs[name] = encoded
        if isinstance(obj, h5py.Dataset):
            return {"kind": "dataset", "name": obj.name, "attrs": attrs, **self.dataset(obj)}
        links: dict[str, Any] = {}
        for name in obj:
            link = obj.get(name, getlink=True)
            if isinstance(link, h5py.SoftLink):
                links[name] = ("soft", link.path)
            elif isinstance(link, h5py.ExternalLink):
                links[name] = ("external", [link.filename, link.path])
            else:
                links[name] = ("hard", self.node(obj[name], depth + 1))
        return {"kind": "group", "name": obj.name, "attrs": attrs, "links": links}

    def dataset(self, obj: Any) -> dict[str, Any]:
        out = {"virtual": bool(obj.is_virtual), "external": bool(obj.external)}
        if out["virtual"] or out["external"]:
            return {**out, "problem": "its data lives in other files, which are never opened"}
        if obj.dtype.kind not in "biuf" or obj.dtype.names is not None \
                or obj.dtype.subdtype is not None:
            return {**out, "problem": f"it holds {obj.dtype}, not numbers"}
        if obj.shape is None:
            return {**out, "problem": "it is empty (no dataspace)"}
        nbytes = obj.dtype.itemsize * int(np.prod(obj.shape or (), dtype=object))
        compressed = obj.compression is not None or bool(obj.id.get_create_plist().get_nfilters())
        budget = self.filtered if compressed else self.plain
        if nbytes > budget:
            raise ValueError(f"dataset {obj.name} declares {nbytes:,} bytes, more than the file "
                             f"can hold ({budget:,} left)")
        array = np.asarray(obj[()])
        self.filtered -= array.nbytes
        self.plain -= 0 if compressed else array.nbytes
        self.arrays.append(array)
        entry = {**out, "dtype": array.dtype.str, "shape": list(array.shape),
                 "offset": self.offset}
        self.offset += array.nbytes
        return entry


def data_size() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 30


def main(argument: str, size: int, ratio: int, seconds: int) -> int:
    out = sys.stdout.buffer
    while h5py.h5pl.size():  # no folders to load filter plugins from (the parent also sets
        h5py.h5pl.remove(0)  # HDF5_PLUGIN_PRELOAD="::", which turns plugin loading off)
    data = sys.stdin.buffer.read() if argument == "-" else b""
    limit = data_size() + MEMORY + 3 * size
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds + 5))  # SIGXCPU, then SIGKILL
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # it writes nothing but its answer
    try:
        with h5py.File(io.BytesIO(data) if argument == "-" else argument, "r") as file:
            walk = Walk(size, ratio)
            header = {"root": walk.node(file, 0)}
    except Exception as error:
        message = json.dumps({"error": f"{type(error).__name__}: {error}"[:400]}).encode()
        out.write(len(message).to_bytes(8, "little") + message)
        return 0
    encoded = json.dumps(header).encode()
    out.write(len(encoded).to_bytes(8, "little") + encoded)
    for array in walk.arrays:
        out.write(array.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], *map(int, sys.argv[2:5])))
