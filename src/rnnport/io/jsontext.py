"""JSON that a file supplies, parsed with guards: every reader's one JSON parser.

Python's ``json.loads`` trusts its input in ways a reader of files from anywhere cannot:
it recurses once per level of nesting (in 3.11, against the same recursion limit as the
caller's frames, so the same text parses at the top of a program and raises
``RecursionError`` deep in one), it reads ``NaN``, ``Infinity`` and numbers too large for a
float (as ``inf``), it keeps the last of two copies of a key, it converts integers of any
length (quadratic in the digits, and a ``ValueError`` past 4,300 of them), and it builds
whatever the text holds. :func:`loads` reads the JSON of RFC 8259 with these bounds:

* at most ``max_bytes`` bytes of UTF-8 text (a byte-order mark is refused, as JSON on the
  wire has none), checked before anything is decoded;
* arrays and objects nested at most ``max_depth`` deep, read without recursion: the stack
  a parse takes is the same whatever the text and wherever it is called from, and what a
  caller walks afterwards is no deeper than ``max_depth``;
* numbers: an integer of at most :data:`MAX_DIGITS` digits, a fraction or exponent that
  is a finite float (``1e999`` is refused rather than read as infinity); ``NaN``,
  ``Infinity`` and ``-Infinity`` (which Python's ``json.dumps`` writes) only where the
  caller says its producer writes them (``allow_nan=True``);
* each key at most once per object (readers disagree on which copy wins);
* every value built charged against the ``expansion`` limit (:mod:`rnnport.budget`) for
  the file's ``size`` — an object or array :data:`OBJECT_BYTES`, each of its items and each
  string :data:`ITEM_BYTES` more — so that ``[[],[],…]`` cannot build gigabytes of lists from
  a file of megabytes. A :class:`Tally` shares one allowance among the documents of one
  file.

Strings are decoded by :func:`json.decoder.scanstring`, the standard library's own (no
recursion; control characters refused, as ``json.loads`` refuses them). What the text is
not is a :class:`JSONTextError` (a :class:`~rnnport.errors.FormatError`): ``m.keras,
config.json: not valid JSON: the key 'name' a second time in one object (line 3, column
17); …``, its :attr:`~JSONTextError.problem` the part after "not valid JSON: " for callers
that say more. Past the ``expansion`` limit it is a :class:`~rnnport.errors.LimitError`.
"""

from __future__ import annotations

import json.decoder
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from .. import budget
from ..errors import FormatError

__all__ = ["MAX_DEPTH", "MAX_DIGITS", "JSONTextError", "Tally", "loads"]

MAX_DEPTH = 64  # a model config or an exported program nests about a dozen levels
MAX_DIGITS = 40  # an integer's digits: offsets and sizes take 20 at most
OBJECT_BYTES = 64  # what each array, object or string built is charged
ITEM_BYTES = 8  # what each item of an array or object is charged beside

_SPACE = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_WORDS = {"true": True, "false": False, "null": None}
_NAN = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# The standard library's string scanner (its C one where built): no recursion.
_scan: Callable[[str, int, bool], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class JSONTextError(FormatError):
    """Text that is not the JSON :func:`loads` reads; ``problem`` says what and where in the
    text, without the file's name."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: not valid JSON: {problem}")
        self.problem = problem


class Tally:
    """The ``expansion`` allowance of one file whose JSON documents are parsed one by one
    (a SavedModel's ``keras_metadata.pb`` holds one per layer): what they build together is
    bounded by the file's size, not by each document's."""

    def __init__(self, where: str, size: int, *, bounded: bool = True) -> None:
        self.where, self.size = where, size
        self.allowed = budget.allowance("expansion", size) if bounded else sys.maxsize
        self.spent = 0

    def charge(self, amount: int) -> None:
        self.spent += amount
        if self.spent > self.allowed:
            raise budget.exceeded(self.where, f"its JSON builds more than {self.allowed:,} "
                                  "bytes of values", "expansion", self.size, self.spent)


def loads(data: bytes | bytearray | memoryview | str, where: str, *, size: int | None = None,
          max_bytes: int = 64 << 20, max_depth: int = MAX_DEPTH, allow_nan: bool = False,
          tally: Tally | None = None) -> Any:
    """The value of one JSON document (see the module docstring). ``where`` starts every
    message; the ``expansion`` limit is relative to ``size``, the size of the file the text
    came from, or to the text's own where it is larger (a zip member inflated), unless
    ``tally`` carries one file's allowance over several documents (or none:
    ``Tally(where, 0, bounded=False)``, for text rnnport's own code wrote)."""
    if not isinstance(data, (bytes, bytearray, memoryview, str)):
        raise JSONTextError(where, f"a {type(data).__name__}, not text; expected JSON as a "
                                   "string or UTF-8 bytes")
    if isinstance(data, str):
        # Checked as UTF-8 like bytes are: a str NumPy made from a file's text array can
        # hold code points past U+10FFFF, which Python cannot index.
        data = data.encode("utf-8", "surrogatepass")
    length = memoryview(data).nbytes
    if length > max_bytes:
        raise JSONTextError(where, f"{length:,} bytes of it; expected at most {max_bytes:,} "
                                   "for what it holds, so the file is damaged or built to "
                                   "exhaust memory")
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as error:
        raise JSONTextError(where, f"bytes that are not UTF-8 ({error.reason} at byte "
                                   f"{error.start:,}); expected UTF-8 text") from None
    if text.startswith("\ufeff"):
        raise JSONTextError(where, "a byte-order mark first; expected JSON text as JSON "
                                   "writers write it, without one")
    if tally is None:
        tally = Tally(where, max(length, size or 0))
    return _Parser(text, where, max_depth, allow_nan, tally).parse()


class _Parser:
    def __init__(self, text: str, where: str, max_depth: int, allow_nan: bool,
                 tally: Tally) -> None:
        self.text, self.where, self.max_depth, self.allow_nan = text, where, max_depth, allow_nan
        self.tally = tally

    def fail(self, position: int, what: str) -> JSONTextError:
        line = self.text.count("\n", 0, position) + 1
        column = position - (self.text.rfind("\n", 0, position) + 1) + 1
        return JSONTextError(self.where, f"{what} (line {line:,}, column {column:,})")

    def parse(self) -> Any:
        text, end, tally = self.text, len(self.text), self.tally
        space = _SPACE.match
        # Open containers: [container, the key awaiting its value (objects)].
        stack: list[list[Any]] = []
        position = space(text, 0).end()  # type: ignore[union-attr]
        while True:
            # A value starts here.
            if position >= end:
                raise self.fail(position, "the text ends where a value was expected")
            char = text[position]
            value: Any
            if char == '"':
                value, position = self.string(position)
            elif char == "{" or char == "[":
                if len(stack) >= self.max_depth:
                    raise self.fail(position, f"arrays and objects nested more than "
                                              f"{self.max_depth} deep; expected at most "
                                              f"{self.max_depth}, so the text is damaged or "
                                              "built to exhaust the stack")
                tally.charge(OBJECT_BYTES)
                position = space(text, position + 1).end()  # type: ignore[union-attr]
                if position < end and text[position] == ("}" if char == "{" else "]"):
                    value = {} if char == "{" else []
                    position += 1
                else:
                    stack.append([{} if char == "{" else [], None])
                    if char == "{":
                        position = self.key(stack[-1], position)
                    continue
            elif char == "-" or "0" <= char <= "9":
                value, position = self.number(position)
            else:
                value, position = self.word(position)
            # Hand the value to the containers it completes.
            while True:
                position = space(text, position).end()  # type: ignore[union-attr]
                if not stack:
                    if position != end:
                        raise self.fail(position, "more text follows the value; expected "
                                                  "one JSON value alone")
                    return value
                frame = stack[-1]
                container = frame[0]
                tally.spent += ITEM_BYTES
                is_object = type(container) is dict
                if is_object:
                    container[frame[1]] = value
                else:
                    container.append(value)
                char = text[position] if position < end else ""
                if char == ",":
                    position = space(text, position + 1).end()  # type: ignore[union-attr]
                    if is_object:
                        position = self.key(frame, position)
                    break
                if char == ("}" if is_object else "]"):
                    tally.charge(0)
                    position += 1
                    stack.pop()
                    value = container
                    continue
                raise self.fail(position, f"expected ',' or '{'}' if is_object else ']'}'")

    def key(self, frame: list[Any], position: int) -> int:
        """Read an object's key and its colon into ``frame``; the position of its value."""
        text = self.text
        if position >= len(text) or text[position] != '"':
            raise self.fail(position, "expected a key in double quotes")
        key, position = self.string(position)
        if key in frame[0]:
            raise self.fail(position, f"the key {key[:40]!r} a second time in one object; "
                                      "expected each key once (readers disagree on which copy "
                                      "counts)")
        frame[1] = key
        position = _SPACE.match(text, position).end()  # type: ignore[union-attr]
        if position >= len(text) or text[position] != ":":
            raise self.fail(position, "expected ':' after a key")
        return _SPACE.match(text, position + 1).end()  # type: ignore[union-attr]

    def string(self, position: int) -> tuple[str, int]:
        try:
            value, after = _scan(self.text, position + 1, True)
        except ValueError as error:  # json.JSONDecodeError: an unterminated string, a bad escape
            at = getattr(error, "pos", position)
            raise self.fail(at, getattr(error, "msg", str(error)).lower()) from None
        self.tally.charge(OBJECT_BYTES)
        return value, after

    def number(self, position: int) -> tuple[int | float, int]:
        text = self.text
        if text.startswith("-Infinity", position):
            return self.word(position)
        match = _NUMBER.match(text, position)
        if match is None:
            raise self.fail(position, "expected a number")
        whole, fraction, exponent = match.groups()
        if fraction is None and exponent is None:
            digits = len(whole) - (whole[0] == "-")
            if digits > MAX_DIGITS:
                raise self.fail(position, f"an integer of {digits:,} digits; "
                                          f"expected at most {MAX_DIGITS}")
            return int(whole), match.end()
        if match.end() - position > 1000:
            raise self.fail(position, f"a number written in {match.end() - position:,} "
                                      "characters; expected at most 1,000")
        value = float(match.group())
        if not math.isfinite(value):
            raise self.fail(position, f"the number {match.group()[:40]}, which is beyond a "
                                      "float's range; expected a finite number")
        return value, match.end()

    def word(self, position: int) -> tuple[Any, int]:
        text = self.text
        for word, value in _WORDS.items():
            if text.startswith(word, position):
                return value, position + len(word)
        for word, number in _NAN.items():
            if text.startswith(word, position):
                if not self.allow_nan:
                    raise self.fail(position, f"{word}, which JSON does not have; expected a "
                                              "finite number")
                return number, position + len(word)
        shown = text[position:position + 12]
        raise self.fail(position, f"{shown!r}; expected a value (an object, an array, a "
                                  "string, a number, true, false or null)")
