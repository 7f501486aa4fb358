"""rnnport's own container: a NumPy ``.npz`` holding the spec and every array, losslessly.

Everything an :class:`~rnnport.RNN` or :class:`~rnnport.Stack` is goes in: the spec of
each part (every field, so peepholes, clips, activations and the GRU variant survive) and
the canonical arrays in their own dtype, bit for bit. Keys::

    rnnport                         0-d string: JSON {"format": "rnnport", "version": 1,
                                    "parts": [spec fields, ...]}
    part{p}/layer{k}/{forward|backward}/{name}    e.g. part0/layer1/backward/weight_hh

The file is read member by member with size checks, never unpickling (see
:mod:`rnnport.io.archive`: members that overlap are refused, and what they inflate to is
charged against the ``expansion`` limit before any is read), and needs NumPy alone. ``write`` returns
the dict of arrays; ``path=`` saves it atomically.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import FormatError, RnnportError
from ..io import jsontext
from ..io.archive import check_sizes, open_zip, read_member, read_npy
from ..io.atomic import NUMPY_ARCHIVE, save_archive
from ..model import DIRECTION_NAMES, RNN, Model, Stack, exported
from ..spec import Spec
from ._common import describe, is_path
from ._protocol import FEATURE_CODES, Format, Suffix

__all__ = ["FORMAT"]

HEADER = "rnnport"
VERSION = 1
SUFFIX = NUMPY_ARCHIVE


def sniff(source: Any) -> bool:
    if is_path(source):
        return Path(source).suffix.lower() == SUFFIX
    return isinstance(source, Mapping) and HEADER in source


def _key(part: int, layer: int, direction: int, name: str) -> str:
    return f"part{part}/layer{layer}/{DIRECTION_NAMES[direction]}/{name}"


def write(model: Model, path: Any = None) -> dict[str, np.ndarray]:
    parts = model.parts if isinstance(model, Stack) else (model,)
    specs = []
    for part in parts:
        spec = {f.name: getattr(part.spec, f.name) for f in fields(Spec)}
        spec["activations"] = [list(a) for a in part.spec.activations]
        specs.append(spec)
    out: dict[str, np.ndarray] = {
        HEADER: np.array(json.dumps({"format": HEADER, "version": VERSION, "parts": specs}))}
    for index, part in enumerate(parts):
        for layer, direction, name, array in part.arrays():
            out[_key(index, layer, direction, name)] = exported(part, array)
    if path is not None:
        save_archive(path, out, "write(fmt='npz')")
    return out


def read(source: Any) -> Model:
    if is_path(source):
        where = str(source)
        if not Path(source).is_file():
            raise FormatError(f"{where}: no such file.")
        arrays = {}
        with open_zip(source, ".npz file") as archive:
            names = archive.namelist()
            for name in names:
                if not name.endswith(".npy"):
                    raise FormatError(f"{where}: member {name!r} is not an .npy array; an .npz "
                                      "file holds nothing else.")
            check_sizes(archive, names, where, os.path.getsize(source))
            for name in names:
                data = read_member(archive, name, where)
                arrays[name[:-4]] = read_npy(data, f"{where}, {name}")
    elif isinstance(source, Mapping):
        where = "npz arrays"
        arrays = dict(source)
    else:
        raise FormatError(f"read(fmt='npz'): expected a .npz path or the dict write(fmt='npz') "
                          f"returns; got {describe(source)}.")
    if HEADER not in arrays:
        raise FormatError(f"{where}: no {HEADER!r} entry; this .npz was not written by rnnport "
                          "(its arrays carry no spec). Read the arrays yourself and pass them "
                          "to the format they came from.")
    entry = arrays[HEADER]
    try:
        if not isinstance(entry, (np.ndarray, str)) or np.ndim(entry) or \
                np.asarray(entry).dtype.kind != "U":
            raise TypeError(f"a {describe(entry)}, not one string")
        header = jsontext.loads(str(entry), f"{where}: the {HEADER!r} entry", max_depth=8)
        version, specs = header["version"], header["parts"]
    except jsontext.JSONTextError as error:
        raise FormatError(f"{where}: the {HEADER!r} entry is not rnnport's JSON header "
                          f"({error.problem}).") from None
    except (KeyError, TypeError) as error:
        raise FormatError(f"{where}: the {HEADER!r} entry is not rnnport's JSON header "
                          f"({type(error).__name__}: {error}).") from None
    if version != VERSION:
        raise FormatError(f"{where}: container version {version!r}; this rnnport reads "
                          f"version {VERSION}. Upgrade rnnport.")
    if not isinstance(specs, list) or not specs:
        raise FormatError(f"{where}: the {HEADER!r} header's parts is {specs!r}; expected a "
                          "list of one spec per part.")
    parts: list[RNN] = []
    used = {HEADER}
    for index, fields_ in enumerate(specs):
        try:
            fields_ = dict(fields_)
            fields_["activations"] = tuple(tuple(a) for a in fields_.get("activations", ()))
            spec = Spec(**fields_)
        except (TypeError, ValueError, OverflowError, RnnportError) as error:
            raise FormatError(f"{where}: part {index}'s spec is invalid ({error}).") from None
        params = []
        for layer in range(spec.num_layers):
            directions = []
            for direction in range(spec.num_directions):
                named = {}
                for name in spec.param_shapes(layer):
                    key = _key(index, layer, direction, name)
                    if key not in arrays:
                        raise FormatError(f"{where}: array {key!r} is missing; expected every "
                                          f"array of {spec.describe(article=True)}.")
                    named[name] = arrays[key]
                    used.add(key)
                directions.append(named)
            params.append(directions)
        parts.append(RNN(spec, params, copy=False))
    extra = sorted(set(arrays) - used)
    if extra:
        raise FormatError(f"{where}: unexpected arrays {', '.join(extra[:5])}"
                          f"{' …' if len(extra) > 5 else ''}; the container is not as rnnport "
                          "wrote it, and reading it would drop them.")
    if not parts:
        raise FormatError(f"{where}: the header lists no networks.")
    return parts[0] if len(parts) == 1 else Stack(parts)


FORMAT = Format("npz", sniff=sniff, reader=read, writer=write, features=frozenset(FEATURE_CODES),
                suffixes=(Suffix(SUFFIX, "an rnnport .npz container"),))
