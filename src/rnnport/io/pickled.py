"""Pickles read without running them: a restricted pickle machine.

A pickle is a program for a small stack machine: most opcodes push numbers, strings and
containers, but ``GLOBAL``/``STACK_GLOBAL``/``INST`` import any name and ``REDUCE``/
``NEWOBJ``/``OBJ``/``BUILD`` call it, which is how a pickle runs code. This module executes
the opcodes itself (protocols 0 to 5) and never calls Python's unpickler, never imports a
name and never calls one:

* Numbers, strings, bytes, ``None``, booleans, tuples, lists and dicts are built as they
  are; sets and frozensets become tuples (their items are never hashed).
* A global the caller knows (``known``: ``(module, name)`` → value) is that value; when the
  value is a :class:`Builder`, ``REDUCE`` and ``NEWOBJ`` on it call the builder, a function
  of the caller's that builds plain data (an array's description, a dict) from plain data.
* Any other global is a :class:`Global`, a name and nothing more. Calling or instantiating
  it gives an :class:`Opaque`, which records the global and its arguments (and what
  ``BUILD``, ``APPEND`` and ``SETITEM`` add to it); nothing is imported or made.
* A persistent id (``PERSID``, ``BINPERSID``) goes to the caller's ``persistent`` function;
  without one, it is refused. Extension codes (``EXT1/2/4``, a registry of imports) and
  out-of-band buffers (``NEXT_BUFFER``) are refused.

Bounds. The machine takes one step per opcode, and a step per item a builder returns,
charged against the ``work`` limit for the size it is given (a file's), so its time is
linear in the pickle; every container, string and item it builds is charged against the
``expansion`` limit (at :data:`OBJECT_BYTES` an object and :data:`ITEM_BYTES` an item), so a
few bytes repeating a memo reference cannot build gigabytes; every length a string or bytes
opcode declares is checked against the bytes that remain before it is read. A dict key is
hashed only when hashing it is cheap and cannot be made to collide (strings and bytes,
whose hashes Python randomizes, integers below 2⁶⁰, ``None``, booleans, recorded objects by
identity); any other key (a tuple, a float) is kept inside an :class:`Unhashed` box, hashed
by identity. Nothing here recurses over the objects built, so nesting depth costs no stack:
callers that walk the result must bound their own depth, and describe its values with
:func:`preview`, never ``str`` or ``repr`` (a value built from shared references can have
a string representation exponentially longer than the file).
"""

from __future__ import annotations

import codecs
import mmap
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import budget
from ..errors import FormatError

__all__ = ["Builder", "Global", "Opaque", "Unhashed", "globals_named", "preview", "unpickle"]

HIGHEST_PROTOCOL = 5
# Integers up to this size hash to themselves: no two collide.
SAFE_INT = 2**60
OBJECT_BYTES = 64  # what an object the machine builds is charged, beside its items
ITEM_BYTES = 8  # what each item of a container, or character of a string, is charged


@dataclass(frozen=True)
class Global:
    """A name a pickle refers to (``module.name``), never imported."""

    module: str
    name: str

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(eq=False)
class Opaque:
    """What a pickle would make by calling (or instantiating) ``made_by`` with ``args``; it is
    never made. ``state``, ``items`` and ``entries`` keep what ``BUILD``, ``APPEND(S)`` and
    ``SETITEM(S)`` would have added to it."""

    made_by: Global
    args: tuple[Any, ...]
    state: Any = None
    items: list[Any] = field(default_factory=list)
    entries: list[tuple[Any, Any]] = field(default_factory=list)


@dataclass(eq=False)
class Unhashed:
    """A dict key kept as it is, hashed by identity: hashing it could take unbounded time or
    collide by design (a float, a deep tuple)."""

    value: Any


@dataclass(frozen=True)
class Builder:
    """A caller's function that a pickle may call through the global naming it; it takes
    the pickle's arguments (plain data) and returns plain data, or raises FormatError."""

    name: str
    function: Callable[..., Any]


def globals_named(builders: Mapping[str, Builder]) -> dict[tuple[str, str], Builder]:
    """``{"collections.OrderedDict": builder}`` keyed as ``known`` wants it."""
    return {tuple(name.rsplit(".", 1)): builder for name, builder in builders.items()}  # type: ignore[misc]


def preview(value: Any, most: int = 60) -> str:
    """A short description of ``value`` for a message, in time bounded by ``most`` (never
    ``str``/``repr`` of a container, which a pickle's shared references can make
    exponentially long, or of an integer with thousands of digits)."""
    parts: list[str] = []
    pending: list[Any] = [value]
    while pending and sum(map(len, parts)) < most:
        item = pending.pop()
        if isinstance(item, _Mark):
            parts.append(str(item))
        elif isinstance(item, (str, bytes)):
            parts.append(repr(item[:most]) + ("…" if len(item) > most else ""))
        elif isinstance(item, bool) or item is None or isinstance(item, float):
            parts.append(repr(item))
        elif isinstance(item, int):
            parts.append(str(item) if abs(item) < 10**30 else
                         f"<an integer of {item.bit_length()} bits>")
        elif isinstance(item, (tuple, list)):
            opening, closing = ("(", ")") if isinstance(item, tuple) else ("[", "]")
            shown = list(item[:4])
            tail: list[Any] = [_Mark(f", … ({len(item)} items){closing}" if len(item) > 4
                                     else closing)]
            for index, child in enumerate(reversed(shown)):
                tail.append(child)
                if index < len(shown) - 1:
                    tail.append(_Mark(", "))
            pending.extend(tail)
            parts.append(opening)
        elif isinstance(item, dict):
            parts.append(f"<a dict of {len(item)} entries>")
        elif isinstance(item, Global):
            parts.append(f"<{preview(item.module, 40)[1:-1]}.{preview(item.name, 40)[1:-1]}>")
        elif isinstance(item, Opaque):
            parts.append(f"<{preview(item.made_by)[1:-1]} object>")
        elif isinstance(item, Unhashed):
            pending.append(item.value)
        else:
            parts.append(f"<{type(item).__name__}>")
    text = "".join(parts)
    return text if len(text) <= most and not pending else text[:most] + "…"


class _Mark(str):
    """Punctuation :func:`preview` writes between the items it shows."""


class _Stop(Exception):
    """The STOP opcode: the value is complete."""


class _Machine:
    def __init__(self, data: bytes | mmap.mmap, where: str, known: Mapping[tuple[str, str], Any],
                 persistent: Callable[[Any], Any] | None, size: int, start: int) -> None:
        self.data = data
        self.where = where
        self.known = known
        self.persistent = persistent
        self.position = start
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.steps_allowed = budget.allowance("work", size)
        self.built_allowed = budget.allowance("expansion", size)
        self.steps = 0
        self.built = 0
        self.size = size

    # -- reading the opcode stream -----------------------------------------------------

    def fail(self, what: str) -> FormatError:
        return FormatError(f"{self.where}: {what} (at byte {self.position} of the pickle). "
                           "The file is damaged, or is not a pickle of plain data.")

    def take(self, count: int) -> bytes:
        end = self.position + count
        if count < 0 or end > len(self.data):
            raise self.fail(f"an opcode declares {count:,} bytes, but {len(self.data) - self.position:,} "
                            "remain")
        chunk = bytes(self.data[self.position:end])
        self.position = end
        return chunk

    def line(self) -> bytes:
        end = self.data.find(b"\n", self.position)
        if end < 0:
            raise self.fail("a text opcode's line has no end")
        chunk = bytes(self.data[self.position:end])
        self.position = end + 1
        return chunk

    def unsigned(self, count: int) -> int:
        return int.from_bytes(self.take(count), "little")

    def text_int(self, text: bytes) -> int:
        try:
            return int(text)
        except ValueError:  # not digits, or more digits than Python converts
            raise self.fail(f"{text[:20]!r}… is not a whole number") from None

    # -- the stack -----------------------------------------------------------------------

    def pop(self) -> Any:
        if not self.stack:
            raise self.fail("an opcode takes a value from an empty stack")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise self.fail("an opcode works on the top of an empty stack")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise self.fail("an opcode takes the items since a MARK, and there is none")
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def get(self, index: int) -> Any:
        if index not in self.memo:
            raise self.fail(f"memo entry {index} is used before it is stored")
        return self.memo[index]

    def put(self, index: int) -> None:
        self.memo[index] = self.top()

    # -- what a pickle would call -------------------------------------------------------

    def global_(self, module: str, name: str) -> Any:
        return self.known.get((module, name), Global(module, name))

    def call(self, function: Any, args: Any, how: str) -> Any:
        if not isinstance(args, tuple):
            raise self.fail(f"{how} with arguments {type(args).__name__}; expected a tuple")
        if isinstance(function, Builder):
            try:
                made = function.function(*args)
            except FormatError:
                raise
            except Exception as error:  # a builder's own check, or arguments it cannot take
                raise self.fail(f"{function.name} called with arguments it does not take "
                                f"({type(error).__name__})") from None
            self.made(_size_of(made))
            return made
        if isinstance(function, (Global, Opaque)):
            self.made(0)
            return Opaque(function if isinstance(function, Global) else function.made_by, args)
        raise self.fail(f"{how} calls a {type(function).__name__}, which is no function")

    def step(self) -> None:
        """Count one opcode against the ``work`` limit."""
        self.steps += 1
        if self.steps > self.steps_allowed:
            raise budget.exceeded(self.where, f"the pickle takes more than "
                                  f"{self.steps_allowed:,} steps", "work", self.size)

    def made(self, items: int, objects: int = 1) -> None:
        """Count ``objects`` new objects holding ``items`` items in all: their memory against
        the ``expansion`` limit, a step per item against ``work``."""
        self.steps += items
        self.built += OBJECT_BYTES * objects + ITEM_BYTES * items
        if self.built > self.built_allowed:
            raise budget.exceeded(self.where, f"the pickle builds more than "
                                  f"{self.built_allowed:,} bytes of objects", "expansion",
                                  self.size)
        if self.steps > self.steps_allowed:
            raise budget.exceeded(self.where, f"the pickle takes more than "
                                  f"{self.steps_allowed:,} steps", "work", self.size)

    def build(self, target: Any, state: Any) -> None:
        if isinstance(target, Opaque):
            target.state = state
        elif isinstance(target, dict):
            pass  # an OrderedDict's attributes (a state_dict's _metadata): not data
        elif callable(getattr(target, "pickle_state", None)):
            target.pickle_state(state)  # an object a Builder made, taking its state
        else:
            raise self.fail(f"BUILD sets the state of a {type(target).__name__}")

    def key(self, value: Any) -> Any:
        """``value`` as a dict key: itself where hashing it is bounded and collision-free,
        else boxed."""
        if isinstance(value, (bool, str, bytes, Global, Opaque, Unhashed)) or value is None:
            return value
        if isinstance(value, int) and abs(value) < SAFE_INT:
            return value
        return Unhashed(value)

    def set_items(self, target: Any, items: list[Any]) -> None:
        if len(items) % 2:
            raise self.fail("SETITEMS with an odd number of items")
        pairs = [(items[index], items[index + 1]) for index in range(0, len(items), 2)]
        self.made(len(items), objects=0)
        if isinstance(target, dict):
            for key, value in pairs:
                target[self.key(key)] = value
        elif isinstance(target, Opaque):
            target.entries.extend(pairs)
        else:
            raise self.fail(f"SETITEM(S) on a {type(target).__name__}")

    def append(self, target: Any, items: list[Any]) -> None:
        self.made(len(items), objects=0)
        if isinstance(target, list):
            target.extend(items)
        elif isinstance(target, Opaque):
            target.items.extend(items)
        else:
            raise self.fail(f"APPEND(S) on a {type(target).__name__}")

    def persistent_id(self, pid: Any) -> Any:
        if self.persistent is None:
            raise self.fail("a persistent id (data stored outside the pickle), which this "
                            "file has no place for")
        return self.persistent(pid)

    # -- the machine ---------------------------------------------------------------------

    def run(self) -> Any:
        data = self.data
        while True:
            if self.position >= len(data):
                raise self.fail("the pickle ends before its STOP opcode (truncated)")
            self.step()
            code = data[self.position]
            self.position += 1
            handler = _OPCODES.get(code)
            if handler is None:
                raise self.fail(f"opcode {bytes([code])!r} is no pickle opcode")
            try:
                handler(self)
            except _Stop:
                return self.pop()


def _size_of(value: Any) -> int:
    """How many items ``value`` (a string, bytes or container a builder made) holds."""
    return len(value) if isinstance(value, (str, bytes, tuple, list, dict)) else 1


def _text(raw: bytes) -> str | bytes:
    """A Python 2 ``str`` (``STRING``, ``BINSTRING``): text where it is UTF-8, else bytes."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw


def _utf8(machine: _Machine, raw: bytes) -> str:
    try:
        return raw.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        raise machine.fail("a string is not UTF-8") from None


def _quoted(machine: _Machine, raw: bytes) -> str | bytes:
    if len(raw) < 2 or raw[:1] != raw[-1:] or raw[:1] not in (b"'", b'"'):
        raise machine.fail("a STRING opcode's argument is not quoted")
    try:
        return _text(codecs.escape_decode(raw[1:-1])[0])
    except ValueError:
        raise machine.fail("a STRING opcode's escapes are damaged") from None


def _stop(machine: _Machine) -> None:
    raise _Stop


def _proto(machine: _Machine) -> None:
    version = machine.unsigned(1)
    if version > HIGHEST_PROTOCOL:
        raise machine.fail(f"pickle protocol {version}; expected 0 to {HIGHEST_PROTOCOL}")


def _mark(machine: _Machine) -> None:
    machine.marks.append(machine.stack)
    machine.stack = []


def _pop(machine: _Machine) -> None:
    if machine.stack:
        machine.stack.pop()
    else:
        machine.pop_mark()


def _push(value: Any) -> Callable[[_Machine], None]:
    return lambda machine: machine.stack.append(value)


def _pushing(read: Callable[[_Machine], Any]) -> Callable[[_Machine], None]:
    return lambda machine: machine.stack.append(read(machine))


def _int_line(machine: _Machine) -> int | bool:
    text = machine.line()
    if text in (b"00", b"01"):  # protocol 0's booleans
        return text == b"01"
    return machine.text_int(text)


def _long_line(machine: _Machine) -> int:
    text = machine.line()
    return machine.text_int(text[:-1] if text.endswith(b"L") else text)


def _long(machine: _Machine, width: int) -> int:
    count = int.from_bytes(machine.take(width), "little", signed=True)
    if count < 0:
        raise machine.fail("LONG4 with a negative length")
    return int.from_bytes(machine.take(count), "little", signed=True)


def _float_line(machine: _Machine) -> float:
    text = machine.line()
    try:
        return float(text)
    except ValueError:
        raise machine.fail(f"{text[:20]!r} is not a number") from None


def _sized(width: int, signed: bool = False) -> Callable[[_Machine], bytes]:
    def read(machine: _Machine) -> bytes:
        count = int.from_bytes(machine.take(width), "little", signed=signed)
        return machine.take(count)
    return read


def _tuple(count: int) -> Callable[[_Machine], None]:
    def make(machine: _Machine) -> None:
        if len(machine.stack) < count:
            raise machine.fail(f"TUPLE{count} with fewer items on the stack")
        items = machine.stack[len(machine.stack) - count:]
        del machine.stack[len(machine.stack) - count:]
        machine.made(count)
        machine.stack.append(tuple(items))
    return make


def _empty(make: Callable[[], Any]) -> Callable[[_Machine], None]:
    """An opcode pushing a new empty container."""
    def build(machine: _Machine) -> None:
        machine.made(0)
        machine.stack.append(make())
    return build


def _dict(machine: _Machine) -> None:
    items = machine.pop_mark()
    machine.made(0)
    made: dict[Any, Any] = {}
    machine.set_items(made, items)
    machine.stack.append(made)


def _setitem(machine: _Machine) -> None:
    value = machine.pop()
    key = machine.pop()
    machine.set_items(machine.top(), [key, value])


def _setitems(machine: _Machine) -> None:
    items = machine.pop_mark()
    machine.set_items(machine.top(), items)


def _append(machine: _Machine) -> None:
    value = machine.pop()
    machine.append(machine.top(), [value])


def _appends(machine: _Machine) -> None:
    items = machine.pop_mark()
    machine.append(machine.top(), items)


def _additems(machine: _Machine) -> None:
    items = machine.pop_mark()
    target = machine.top()
    if not isinstance(target, list):
        raise machine.fail(f"ADDITEMS on a {type(target).__name__}")
    target.extend(items)


def _global_text(machine: _Machine) -> None:
    module = _utf8(machine, machine.line())
    name = _utf8(machine, machine.line())
    machine.stack.append(machine.global_(module, name))


def _stack_global(machine: _Machine) -> None:
    name = machine.pop()
    module = machine.pop()
    if not isinstance(module, str) or not isinstance(name, str):
        raise machine.fail("STACK_GLOBAL with a module or name that is not a string")
    machine.stack.append(machine.global_(module, name))


def _reduce(machine: _Machine) -> None:
    args = machine.pop()
    function = machine.pop()
    machine.stack.append(machine.call(function, args, "REDUCE"))


def _newobj(machine: _Machine) -> None:
    args = machine.pop()
    cls = machine.pop()
    machine.stack.append(machine.call(cls, args, "NEWOBJ"))


def _newobj_ex(machine: _Machine) -> None:
    kwargs = machine.pop()
    args = machine.pop()
    cls = machine.pop()
    if kwargs and isinstance(cls, Builder):
        raise machine.fail(f"NEWOBJ_EX gives {cls.name} keyword arguments it does not take")
    machine.stack.append(machine.call(cls, args, "NEWOBJ_EX"))


def _inst(machine: _Machine) -> None:
    module = _utf8(machine, machine.line())
    name = _utf8(machine, machine.line())
    args = tuple(machine.pop_mark())
    machine.stack.append(machine.call(machine.global_(module, name), args, "INST"))


def _obj(machine: _Machine) -> None:
    items = machine.pop_mark()
    if not items:
        raise machine.fail("OBJ with nothing to instantiate")
    machine.stack.append(machine.call(items[0], tuple(items[1:]), "OBJ"))


def _build(machine: _Machine) -> None:
    state = machine.pop()
    machine.build(machine.top(), state)


def _refused(what: str) -> Callable[[_Machine], None]:
    def refuse(machine: _Machine) -> None:
        raise machine.fail(f"{what}, which no file of plain data needs; refused")
    return refuse


def _marked(make: Callable[[list[Any]], Any]) -> Callable[[_Machine], None]:
    """An opcode building ``make(items since the MARK)`` (the stack is the MARK's once
    they are taken)."""
    def build(machine: _Machine) -> None:
        items = machine.pop_mark()
        machine.made(len(items))
        machine.stack.append(make(items))
    return build


def _memoize(machine: _Machine) -> None:
    machine.memo[len(machine.memo)] = machine.top()


def _bytes(read: Callable[[_Machine], bytes]) -> Callable[[_Machine], None]:
    return lambda machine: machine.stack.append(bytes(read(machine)))


def _unicode(read: Callable[[_Machine], bytes]) -> Callable[[_Machine], None]:
    return lambda machine: machine.stack.append(_utf8(machine, read(machine)))


def _unicode_line(machine: _Machine) -> None:
    try:
        machine.stack.append(machine.line().decode("raw-unicode-escape"))
    except UnicodeDecodeError:
        raise machine.fail("a UNICODE opcode's escapes are damaged") from None


_OPCODES: dict[int, Callable[[_Machine], None]] = {
    ord(code): handler for code, handler in {
        ".": _stop,
        "\x80": _proto,
        "\x95": lambda machine: machine.take(8) and None,  # FRAME: its length, unneeded
        "(": _mark,
        "0": _pop,
        "1": lambda machine: machine.pop_mark() and None,
        "2": lambda machine: machine.stack.append(machine.top()),
        "N": _push(None),
        "\x88": _push(True),
        "\x89": _push(False),
        "I": _pushing(_int_line),
        "J": _pushing(lambda machine: struct.unpack("<i", machine.take(4))[0]),
        "K": _pushing(lambda machine: machine.unsigned(1)),
        "M": _pushing(lambda machine: machine.unsigned(2)),
        "L": _pushing(_long_line),
        "\x8a": _pushing(lambda machine: _long(machine, 1)),
        "\x8b": _pushing(lambda machine: _long(machine, 4)),
        "F": _pushing(_float_line),
        "G": _pushing(lambda machine: struct.unpack(">d", machine.take(8))[0]),
        "S": _pushing(lambda machine: _quoted(machine, machine.line())),
        "T": _pushing(lambda machine: _text(_sized(4, signed=True)(machine))),
        "U": _pushing(lambda machine: _text(_sized(1)(machine))),
        "B": _bytes(_sized(4)),
        "C": _bytes(_sized(1)),
        "\x8e": _bytes(_sized(8)),
        "\x96": _bytes(_sized(8)),  # BYTEARRAY8: kept as bytes
        "V": _unicode_line,
        "X": _unicode(_sized(4)),
        "\x8c": _unicode(_sized(1)),
        "\x8d": _unicode(_sized(8)),
        ")": _push(()),
        "t": _marked(tuple),
        "\x85": _tuple(1),
        "\x86": _tuple(2),
        "\x87": _tuple(3),
        "]": _empty(list),
        "l": _marked(list),
        "a": _append,
        "e": _appends,
        "}": _empty(dict),
        "d": _dict,
        "s": _setitem,
        "u": _setitems,
        "\x8f": _empty(list),  # EMPTY_SET: its items kept in a list
        "\x90": _additems,
        "\x91": _marked(tuple),
        "c": _global_text,
        "\x93": _stack_global,
        "R": _reduce,
        "\x81": _newobj,
        "\x92": _newobj_ex,
        "i": _inst,
        "o": _obj,
        "b": _build,
        "P": lambda machine: machine.stack.append(
            machine.persistent_id(_utf8(machine, machine.line()))),
        "Q": lambda machine: machine.stack.append(machine.persistent_id(machine.pop())),
        "g": lambda machine: machine.stack.append(machine.get(machine.text_int(machine.line()))),
        "h": lambda machine: machine.stack.append(machine.get(machine.unsigned(1))),
        "j": lambda machine: machine.stack.append(machine.get(machine.unsigned(4))),
        "p": lambda machine: machine.put(machine.text_int(machine.line())),
        "q": lambda machine: machine.put(machine.unsigned(1)),
        "r": lambda machine: machine.put(machine.unsigned(4)),
        "\x94": _memoize,
        "\x82": _refused("an extension code (EXT1), which names an import"),
        "\x83": _refused("an extension code (EXT2), which names an import"),
        "\x84": _refused("an extension code (EXT4), which names an import"),
        "\x97": _refused("an out-of-band buffer (NEXT_BUFFER)"),
        "\x98": _refused("an out-of-band buffer (READONLY_BUFFER)"),
    }.items()
}


def unpickle(data: bytes | mmap.mmap, where: str, *, known: Mapping[tuple[str, str], Any] | None = None,
             persistent: Callable[[Any], Any] | None = None, size: int | None = None,
             start: int = 0) -> tuple[Any, int]:
    """The value the pickle in ``data`` (from byte ``start``) describes, built as the module
    docstring says, and the position just past its STOP opcode (where a next pickle may
    begin). ``size`` is what the ``work`` limit is counted for (default: ``len(data)``);
    ``where`` starts every error message."""
    machine = _Machine(data, where, known or {}, persistent,
                       len(data) if size is None else size, start)
    value = machine.run()
    return value, machine.position
