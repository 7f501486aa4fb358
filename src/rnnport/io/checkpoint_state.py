"""TensorFlow's checkpoint state file: ``checkpoint``, in the folder of the checkpoints it lists.

``tf.train.latest_checkpoint(folder)`` and ``tf.train.get_checkpoint_state(folder)`` read
``folder/checkpoint``, a ``CheckpointState`` protocol buffer in its text format. TensorFlow's
savers write it after every save, one field a line::

    model_checkpoint_path: "model.ckpt-2000"
    all_model_checkpoint_paths: "model.ckpt-1000"
    all_model_checkpoint_paths: "model.ckpt-2000"
    all_model_checkpoint_timestamps: 1717000000.5
    all_model_checkpoint_timestamps: 1717000100.25
    last_preserved_timestamp: 1716999999.0

``model_checkpoint_path``
    The newest checkpoint's prefix: what ``latest_checkpoint`` returns.
``all_model_checkpoint_paths`` (repeated)
    The checkpoints kept, oldest first; the newest is last.
``all_model_checkpoint_timestamps`` (repeated, optional; one per path)
    When each was saved, in seconds since the epoch. ``tf.train.CheckpointManager`` deletes
    the older ones whose timestamp is after ``last_preserved_timestamp`` (optional).

A relative path is relative to the folder; TensorFlow writes relative paths when it saved
into a folder named relatively, absolute ones otherwise. Strings are quoted with C escapes
(``\\"``, ``\\\\``, ``\\n``, and octal bytes such as ``\\303\\251`` for non-ASCII UTF-8). The
text format also allows ``#`` comments, single quotes, adjacent strings (joined), a ``,`` or
``;`` after a field, and a singular field given twice (the last one counts). TensorFlow
treats a file with an unknown field or a syntax error as no state at all.

:func:`record` updates the file after a checkpoint was written, as
``tf.compat.v1.train.update_checkpoint_state`` does after a save: the new checkpoint,
named relative to the folder, becomes ``model_checkpoint_path`` and the last of
``all_model_checkpoint_paths``; an earlier entry naming the same checkpoint is dropped;
every other entry is kept as written (an old ``model_checkpoint_path`` missing from the
list is added before the new one, since TensorFlow always lists it). Timestamps stay one
per path, the new one stamped now, when they were one per path; otherwise they are left
out, so ``CheckpointManager`` deletes none of the checkpoints listed. A file that cannot be
read as a checkpoint state is an error and is never overwritten.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import FormatError
from . import inputs
from .atomic import atomic_write, folder_lock

__all__ = ["STATE_FILE", "CheckpointState", "format_state", "parse_state", "read_state",
           "record", "updated"]

STATE_FILE = "checkpoint"
MAX_STATE_BYTES = 16 << 20  # thousands of checkpoints take kilobytes

_STRING_FIELDS = ("model_checkpoint_path", "all_model_checkpoint_paths")
_NUMBER_FIELDS = ("all_model_checkpoint_timestamps", "last_preserved_timestamp")

_TOKEN = re.compile(r"""
    (?P<space>[ \t\r\n\f\v]+|\#[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<number>(?P<value>[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|inf(?:inity)?|nan))
                 [fF]?)(?![A-Za-z0-9_])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<colon>:)
  | (?P<separator>[,;])
""", re.VERBOSE | re.IGNORECASE)
_SIMPLE_ESCAPES = {ord("n"): 10, ord("t"): 9, ord("r"): 13, ord("a"): 7, ord("b"): 8,
                   ord("f"): 12, ord("v"): 11, ord("\\"): 92, ord("'"): 39, ord('"'): 34,
                   ord("?"): 63}
_OCTAL, _HEX = frozenset(b"01234567"), frozenset(b"0123456789abcdefABCDEF")


@dataclass(frozen=True)
class CheckpointState:
    """The fields of a ``CheckpointState``; ``None``: the field is absent."""

    model_checkpoint_path: str | None = None
    all_model_checkpoint_paths: tuple[str, ...] = ()
    all_model_checkpoint_timestamps: tuple[float, ...] = ()
    last_preserved_timestamp: float | None = None


class _Unreadable(ValueError):
    """What is wrong, and on which line; the caller says which file and what to do."""


def read_state(folder: str | os.PathLike[str], advice: str) -> CheckpointState | None:
    """The state in ``folder/checkpoint``; ``None`` when there is no such file. A file that
    is no checkpoint state raises FormatError ending in ``advice`` (what the user can do)."""
    path = Path(folder) / STATE_FILE
    if not os.path.lexists(path):
        return None
    try:
        # Not recorded as an input: a checkpoint written into the folder adds itself to this
        # file and keeps what it lists (the checkpoints it names are recorded when read).
        data = inputs.read_file(path, str(path), inside=Path(folder), name=STATE_FILE,
                                record=False, limit=MAX_STATE_BYTES)
    except FormatError as error:
        raise FormatError(f"{error} Expected TensorFlow's checkpoint state (a text file). "
                          f"{advice}") from None
    try:
        return parse_state(data)
    except _Unreadable as error:
        raise FormatError(f"{path}, {error}; expected TensorFlow's checkpoint state, the fields "
                          f"{', '.join((*_STRING_FIELDS, *_NUMBER_FIELDS))} one a line "
                          f'(model_checkpoint_path: "model.ckpt"). {advice}') from None


def parse_state(data: bytes) -> CheckpointState:
    """A ``CheckpointState`` in text format (see the module docstring for what is read)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _Unreadable(f"byte {error.start}: not UTF-8 text") from None
    tokens = _Tokens(text)
    fields: dict[str, list[str | float]] = {}
    while (token := tokens.next()) is not None:
        kind, value, line = token
        if kind != "name":
            raise _Unreadable(f"line {line}: {value!r} where a field name should be")
        if value not in (*_STRING_FIELDS, *_NUMBER_FIELDS):
            raise _Unreadable(f"line {line}: unknown field {value!r}")
        if tokens.next_if("colon") is None:
            raise _Unreadable(f"line {line}: expected ':' after {value}")
        if value in _STRING_FIELDS:
            parts = []
            while (string := tokens.next_if("string")) is not None:
                parts.append(_unquote(string[1], string[2]))
            if not parts:
                raise _Unreadable(f"line {line}: {value} takes a quoted string")
            try:
                fields.setdefault(value, []).append(b"".join(parts).decode("utf-8"))
            except UnicodeDecodeError:
                raise _Unreadable(f"line {line}: {value}'s escaped bytes are not UTF-8") \
                    from None
        else:
            number = tokens.next_if("number")
            if number is None:
                raise _Unreadable(f"line {line}: {value} takes a number")
            fields.setdefault(value, []).append(float(number[1]))
        tokens.next_if("separator")
    model = fields.get("model_checkpoint_path", [])
    preserved = fields.get("last_preserved_timestamp", [])
    return CheckpointState(
        model_checkpoint_path=str(model[-1]) if model else None,
        all_model_checkpoint_paths=tuple(map(str, fields.get("all_model_checkpoint_paths", []))),
        all_model_checkpoint_timestamps=tuple(
            float(v) for v in fields.get("all_model_checkpoint_timestamps", [])),
        last_preserved_timestamp=float(preserved[-1]) if preserved else None)


class _Tokens:
    """The text's tokens, read as the parser asks for them (so a grammar error is told
    before a stray character further on): ``(kind, text, line)``; a number's text without
    its ``f`` suffix."""

    def __init__(self, text: str) -> None:
        self.text, self.position, self.line = text, 0, 1
        self.ahead: tuple[str, str, int] | None = None

    def next(self) -> tuple[str, str, int] | None:
        if self.ahead is not None:
            token, self.ahead = self.ahead, None
            return token
        while self.position < len(self.text):
            match = _TOKEN.match(self.text, self.position)
            if match is None:
                rest = self.text[self.position:].split("\n", 1)[0]
                raise _Unreadable(f"line {self.line}: cannot read {rest[:30]!r}")
            line = self.line
            self.line += match.group().count("\n")
            self.position = match.end()
            kind = match.lastgroup or ""
            if kind != "space":
                return kind, match["value"] if kind == "number" else match.group(), line
        return None

    def next_if(self, kind: str) -> tuple[str, str, int] | None:
        """The next token if it is of ``kind``; otherwise None, and the token stays."""
        token = self.next()
        if token is not None and token[0] == kind:
            return token
        self.ahead = token
        return None


def _unquote(token: str, line: int) -> bytes:
    """The bytes a quoted text-format string stands for (C escapes undone)."""
    raw = token[1:-1].encode("utf-8")
    out = bytearray()
    index = 0
    while index < len(raw):
        byte = raw[index]
        index += 1
        if byte != 92:  # a backslash
            out.append(byte)
            continue
        escape = raw[index]
        if escape in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[escape])
            index += 1
        elif escape in _OCTAL:
            end = index
            while end < min(index + 3, len(raw)) and raw[end] in _OCTAL:
                end += 1
            out.append(int(raw[index:end], 8) & 0xFF)
            index = end
        elif escape in b"xX" and index + 1 < len(raw) and raw[index + 1] in _HEX:
            end = index + 1
            while end < min(index + 3, len(raw)) and raw[end] in _HEX:
                end += 1
            out.append(int(raw[index + 1:end], 16))
            index = end
        else:
            raise _Unreadable(f"line {line}: unknown escape \\{chr(escape)} in {token}")
    return bytes(out)


def _quote(text: str) -> str:
    """``text`` as protobuf's text format writes a string: C escapes, octal for non-ASCII."""
    named = {10: "\\n", 13: "\\r", 9: "\\t", 34: '\\"', 39: "\\'", 92: "\\\\"}
    return '"' + "".join(named.get(byte) or (chr(byte) if 32 <= byte < 127 else f"\\{byte:03o}")
                         for byte in text.encode("utf-8")) + '"'


def _number(value: float) -> str:
    return ("nan" if math.isnan(value) else "-inf" if value == -math.inf else
            "inf" if value == math.inf else repr(float(value)))


def format_state(state: CheckpointState) -> str:
    """The text TensorFlow writes for ``state`` (fields in the proto's order)."""
    lines = []
    if state.model_checkpoint_path is not None:
        lines.append(f"model_checkpoint_path: {_quote(state.model_checkpoint_path)}")
    lines += [f"all_model_checkpoint_paths: {_quote(path)}"
              for path in state.all_model_checkpoint_paths]
    lines += [f"all_model_checkpoint_timestamps: {_number(stamp)}"
              for stamp in state.all_model_checkpoint_timestamps]
    if state.last_preserved_timestamp is not None:
        lines.append(f"last_preserved_timestamp: {_number(state.last_preserved_timestamp)}")
    return "".join(f"{line}\n" for line in lines)


def _names(entry: str, target: Path, folder: Path) -> bool:
    """Whether the state's ``entry`` (relative to ``folder``, or absolute) names ``target``."""
    path = Path(entry)
    return os.path.normpath(os.path.abspath(path if path.is_absolute() else folder / path)) \
        == os.path.normpath(os.path.abspath(target))


def updated(state: CheckpointState | None, prefix: Path, now: float) -> CheckpointState:
    """``state`` after the checkpoint ``prefix`` was saved in its folder (see the module
    docstring): the newest, and last in the list; other entries kept."""
    state = state or CheckpointState()
    folder = prefix.parent
    paths = list(state.all_model_checkpoint_paths)
    stamps = list(state.all_model_checkpoint_timestamps)
    in_step = bool(stamps) and len(stamps) == len(paths)
    old = state.model_checkpoint_path
    if old and not any(_names(path, folder / old, folder) for path in paths):
        paths.append(old)
        in_step = False  # no timestamp is known for it
    kept = [(path, stamp) for path, stamp in zip(paths, stamps if in_step else [0.0] * len(paths),
                                                  strict=True)
            if not _names(path, prefix, folder)]
    return replace(state, model_checkpoint_path=prefix.name,
                   all_model_checkpoint_paths=(*(path for path, _ in kept), prefix.name),
                   all_model_checkpoint_timestamps=(*(stamp for _, stamp in kept), now)
                   if in_step else ())


def record(prefix: str | os.PathLike[str], before: CheckpointState | None) -> Path:
    """Name the checkpoint just written at ``prefix`` the newest in its folder's state file
    (``before``: the file's state, read before the checkpoint was written); atomically.
    The state file is always replaced, whatever :func:`~rnnport.io.atomic.replacing`
    says: it belongs to the folder, and naming the checkpoint in it is part of writing it."""
    prefix = Path(prefix)
    text = format_state(updated(before, prefix, time.time()))
    return atomic_write(prefix.parent / STATE_FILE, lambda file: file.write(text.encode("ascii")),
                        replace=True)


def write_recorded(prefix: Path, write: Callable[[], object], where: str) -> None:
    """Call ``write()`` to write the checkpoint at ``prefix``, then name it the newest in its
    folder's state file, keeping what another writer recorded meanwhile. A state file that
    cannot be read stops everything before ``write`` runs; one that cannot be updated after
    it is an error saying the checkpoint itself is written.

    rnnport's writers take turns per folder (:func:`~rnnport.io.atomic.folder_lock`) from
    reading the state to replacing it, so no checkpoint another one recorded is lost, and
    the state file is replaced in one rename: a reader finds the old state or the new one.
    A writer stopped between the checkpoint and the state leaves the state naming the
    checkpoints it named before (all still there, unless the one written was among them)."""
    with folder_lock(prefix.parent if str(prefix.parent) else Path(".")):
        state = read_state(
            prefix.parent, "rnnport names each checkpoint it writes there, as TensorFlow's "
            "savers do, and does not overwrite a state file it cannot read; fix or remove it. "
            "Nothing was written.")
        write()
        try:
            state = read_state(prefix.parent, "") or state
        except FormatError:
            pass
        try:
            record(prefix, state)
        except (OSError, FormatError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else \
                str(error).removesuffix(" Nothing was written.")
            raise FormatError(
                f"{where}: the checkpoint {prefix} is written, but the state file "
                f"{prefix.parent / STATE_FILE} could not be updated ({reason}), so "
                "tf.train.latest_checkpoint does not name it. Fix the cause, then write again "
                "with overwrite=True (--force).") from error
