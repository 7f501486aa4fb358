"""HDF5 files read in a separate, limited process, as a snapshot the caller walks safely.

The HDF5 library parses files in native code, and a damaged or hostile file can make it
hang or crash. So h5py runs in a child process (``python -I _hdf5_child.py``, which
imports nothing from rnnport) with a memory limit, a CPU-time limit and a wall-clock
timeout; a child seen stopped (``SIGSTOP``) for a second is ended then, without waiting
for the timeout (:mod:`rnnport.io.processes`). The child copies the tree out: groups,
their links (hard links are followed, soft and external links only named), attributes,
and each dataset's array. The caller gets plain objects with the few h5py-like methods
the Keras reader uses (:class:`Group`, :class:`Dataset`, :class:`HardLink`), or a
:class:`~rnnport.errors.FormatError` when the child fails, crashes, stops, runs out of time
or memory, or returns something malformed.

The child's bounds come from the file's own size: the bytes of uncompressed datasets at
most the file's size, of compressed ones at most 1032 times it (deflate's largest
expansion); at most 100,000 objects, 64 levels deep, each reached once. Datasets kept in
other files (external or virtual storage) are recorded but never read.

Protocol (child → parent, on stdout): 8 bytes little-endian header length, a JSON
header, then the arrays' raw bytes in C order at the offsets the header gives. A child
error is a JSON header ``{"error": "..."}``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import budget
from ..errors import FormatError
from . import inputs, jsontext, processes

__all__ = ["Dataset", "ExternalLink", "Group", "HardLink", "Node", "SoftLink", "snapshot"]

CHILD = Path(__file__).with_name("_hdf5_child.py")
CHILD_DEPTH = 64  # the child's MAX_DEPTH: groups nested deeper are refused there


# -- the snapshot -----------------------------------------------------------------------------


class HardLink:
    pass


class SoftLink:
    def __init__(self, path: str) -> None:
        self.path = path


class ExternalLink:
    def __init__(self, filename: str, path: str) -> None:
        self.filename, self.path = filename, path


class Node:
    """A group or dataset of the file, with its attributes."""

    def __init__(self, name: str, attrs: Mapping[str, Any]) -> None:
        self.name = name
        self.attrs = dict(attrs)


class Dataset(Node):
    def __init__(self, name: str, attrs: Mapping[str, Any], value: np.ndarray | None,
                 problem: str | None, is_virtual: bool, external: bool) -> None:
        super().__init__(name, attrs)
        self._value = value
        self.problem = problem  # why the child did not copy the data out (then value is None)
        self.is_virtual, self.external = is_virtual, external

    def __getitem__(self, key: Any) -> np.ndarray:
        if key != ():
            raise TypeError("only dataset[()] is supported")
        if self._value is None:
            raise FormatError(f"dataset {self.name} cannot be read: {self.problem}.")
        return self._value


class Group(Node):
    def __init__(self, name: str, attrs: Mapping[str, Any]) -> None:
        super().__init__(name, attrs)
        self._links: dict[str, tuple[HardLink | SoftLink | ExternalLink, Node | None]] = {}

    def __iter__(self) -> Iterator[str]:
        return iter(self._links)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._links

    def link(self, name: str) -> HardLink | SoftLink | ExternalLink | None:
        """How ``name`` is linked from this group (None when it is not)."""
        return self._links[name][0] if name in self._links else None

    def __getitem__(self, name: str) -> Node:
        link, node = self._links[name]
        if node is None:
            raise KeyError(f"{self.name}/{name} is a {type(link).__name__}, not followed")
        return node


# -- the parent side --------------------------------------------------------------------------


def snapshot(source: str | os.PathLike[str] | bytes, where: str) -> Group:
    """The tree of the HDF5 file ``source`` (a path, or the bytes of an archive member),
    read by a child process."""
    if isinstance(source, bytes):  # decompression was bounded already: no second factor
        size, argument, stdin, ratio = len(source), "-", source, 1
    else:
        path = inputs.checked(source, where)  # a regular file, recorded as read
        size, argument, stdin, ratio = os.path.getsize(path), os.fspath(path), b"", 1032
    timeout = budget.value("seconds") + size / 10e6  # wall clock and CPU
    command = [sys.executable, "-I", str(CHILD), argument, str(size), str(ratio),
               str(int(timeout))]
    environment = {key: value for key, value in os.environ.items()
                   if not key.startswith(("HDF5_", "PYTHON"))}
    environment["HDF5_PLUGIN_PRELOAD"] = "::"  # a file cannot make HDF5 load native code
    try:
        done = processes.run(command, input=stdin, timeout=timeout, env=environment)
    except processes.Overdue as overdue:
        if overdue.stopped:  # not the file's doing
            raise FormatError(f"{where}: the process reading this file with the HDF5 library "
                              f"{overdue} and was ended; nothing was read (the HDF5 library "
                              "never runs in rnnport's own process). Read the file again, and "
                              "let the process run.") from None
        raise budget.exceeded(where, f"the HDF5 library did not finish reading the file within "
                              f"{timeout:.0f} s (damaged, or built to stall a reader?)",
                              "seconds") from None
    if done.returncode != 0 or len(done.stdout) < 8:
        if done.returncode < 0:
            name = _signal_name(-done.returncode)
            if name == "SIGXCPU":
                raise budget.exceeded(where, f"the HDF5 library ran out of CPU time ({timeout:.0f}"
                                      " s) reading the file (damaged, or built to stall a "
                                      "reader?)", "seconds")
            how = {"SIGSEGV": "crashed (SIGSEGV)",
                   "SIGABRT": "aborted"}.get(name, f"was stopped by {name}")
        else:
            lines = done.stderr.decode("utf8", "replace").strip().splitlines()
            how = f"failed ({lines[-1] if lines else f'exit status {done.returncode}'})"
        raise FormatError(f"{where}: the HDF5 library {how} reading this file; the file is "
                          "damaged or built to break a reader (it ran in a separate process, "
                          "so nothing else was affected). Nothing was read.")
    return _parse(done.stdout, where)


def _signal_name(number: int) -> str:
    import signal

    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _parse(output: bytes, where: str) -> Group:
    length = int.from_bytes(output[:8], "little")
    try:  # the child's json.dumps of what the file holds (attribute values may be NaN),
        # within the child's own limits on what it describes
        header = jsontext.loads(memoryview(output)[8:8 + length], where, allow_nan=True,
                                max_bytes=len(output), max_depth=4 * CHILD_DEPTH + 16,
                                tally=jsontext.Tally(where, 0, bounded=False))
    except jsontext.JSONTextError:
        raise FormatError(f"{where}: the HDF5 reader's answer is malformed.") from None
    if "error" in header:
        raise FormatError(f"{where}: not a readable HDF5 file ({header['error']}); it may be "
                          "truncated or damaged, or not HDF5 at all; save it again.")
    data = memoryview(bytearray(output))[8 + length:]
    try:
        root = _build(header["root"], data)
    except (KeyError, TypeError, ValueError, IndexError, OverflowError, UnicodeError,
            AttributeError, RecursionError) as error:
        raise FormatError(f"{where}: the HDF5 reader's answer is malformed "
                          f"({type(error).__name__}: {error}).") from None
    if not isinstance(root, Group):
        raise FormatError(f"{where}: the HDF5 reader's answer is malformed (the root is no "
                          "group).")
    return root


def _build(entry: Mapping[str, Any], data: memoryview) -> Node:
    attrs = {name: _attribute(value) for name, value in entry["attrs"].items()}
    if entry["kind"] == "dataset":
        value, problem = None, entry.get("problem")
        if problem is None:
            dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
            start = entry["offset"]
            end = start + dtype.itemsize * int(np.prod(shape, dtype=np.int64))
            if not 0 <= start <= end <= len(data):
                raise FormatError(f"dataset {entry['name']}: the HDF5 reader's answer is "
                                  "malformed.")
            value = np.frombuffer(data[start:end], dtype=dtype).reshape(shape)
        return Dataset(entry["name"], attrs, value, problem, entry["virtual"], entry["external"])
    group = Group(entry["name"], attrs)
    for name, (kind, target) in entry["links"].items():
        if kind == "hard":
            group._links[name] = (HardLink(), _build(target, data))
        elif kind == "soft":
            group._links[name] = (SoftLink(target), None)
        else:
            group._links[name] = (ExternalLink(*target), None)
    return group


def _attribute(encoded: Mapping[str, Any]) -> Any:
    if "str" in encoded:
        return encoded["str"]
    if "bytes" in encoded:
        return np.bytes_(encoded["bytes"].encode("latin-1"))
    if "strings" in encoded:
        return np.array([_attribute(item) for item in encoded["strings"]], dtype=object)
    return np.array(encoded["values"], dtype=encoded["dtype"]).reshape(encoded["shape"])
