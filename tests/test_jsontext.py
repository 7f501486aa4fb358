"""The guarded JSON parser every reader uses for JSON a file supplies: what ``json.loads``
reads, read alike; nesting, numbers, repeated keys and sizes bounded; no recursion, so the
same text parses wherever the call is made from."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hostile_cases import deep_call
from hypothesis import given, settings
from hypothesis import strategies as st

import rnnport
from rnnport.errors import FormatError, LimitError
from rnnport.io import jsontext
from rnnport.io.jsontext import JSONTextError, Tally, loads

GOLDEN = Path(__file__).parent / "golden"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64) |
    st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=5) |
    st.dictionaries(st.text(max_size=8), children, max_size=5), max_leaves=40)


@settings(max_examples=200, deadline=None)
@given(json_values, st.sampled_from([None, 2, "\t"]))
def test_reads_what_json_loads_reads(value: Any, indent: Any) -> None:
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    assert loads(text.encode(), "x") == json.loads(text)
    assert loads(text, "x") == json.loads(text)


def test_reads_the_golden_files_json_as_json_loads_does() -> None:
    documents = [path.read_bytes() for path in sorted(GOLDEN.glob("**/*.json"))]
    for archive in sorted(GOLDEN.glob("**/*.pt2")) + sorted(GOLDEN.glob("**/*.keras")):
        with zipfile.ZipFile(archive) as opened:
            documents += [opened.read(name) for name in opened.namelist()
                          if name.endswith(".json")]
    assert len(documents) > 10
    for data in documents:
        assert loads(data, "x", allow_nan=True, max_depth=256) == json.loads(data)


@pytest.mark.parametrize(("text", "problem"), [
    ("[" * 65 + "]" * 65, "arrays and objects nested more than 64 deep"),
    ('{"a":' * 200_000, "arrays and objects nested more than 64 deep"),
    ("[NaN]", "NaN, which JSON does not have"),
    ("[-Infinity]", "-Infinity, which JSON does not have"),
    ("1e400", "the number 1e400, which is beyond a float's range"),
    ("-1e999", "beyond a float's range"),
    ("1" * 41, "an integer of 41 digits; expected at most 40"),
    ("1" * 100_000, "an integer of 100,000 digits"),
    ("0." + "1" * 2000, "a number written in 2,002 characters"),
    ('{"a": 1, "a": 2}', "the key 'a' a second time in one object"),
    ("[1, 2,]", "expected a value"),
    ('{"a": 1,}', "expected a key in double quotes"),
    ("[1 2]", "expected ',' or ']'"),
    ('{"a" 1}', "expected ':' after a key"),
    ("[1] [2]", "more text follows the value"),
    ("", "the text ends where a value was expected"),
    ("[", "the text ends where a value was expected"),
    ('"abc', "unterminated string"),
    ('"a\x01"', "invalid control character"),
    ("\ufeff{}", "a byte-order mark first"),
    ("01", "more text follows the value"),
    ("tru", "'tru'; expected a value"),
])
def test_refusals_say_what_and_where(text: str, problem: str) -> None:
    with pytest.raises(JSONTextError, match=r"^doc: not valid JSON: ") as error:
        loads(text.encode(), "doc")
    assert problem in str(error.value)
    assert "(line 1, column" in str(error.value) or "byte-order" in problem
    assert isinstance(error.value, FormatError) and problem in error.value.problem


def test_nan_and_infinity_where_the_writer_writes_them() -> None:
    found = loads("[NaN, Infinity, -Infinity, 1.5]", "x", allow_nan=True)
    assert math.isnan(found[0]) and found[1:] == [math.inf, -math.inf, 1.5]


def test_bytes_that_are_not_utf8_and_values_that_are_not_text() -> None:
    with pytest.raises(JSONTextError, match=r"bytes that are not UTF-8 \(invalid start byte at "
                                            r"byte 1\)"):
        loads(b'"\xff"', "x")
    with pytest.raises(JSONTextError, match="a int, not text"):
        loads(7, "x")  # type: ignore[arg-type]


def test_text_numpy_made_with_code_points_past_unicode_is_refused() -> None:
    """A text array from a file can hold code points past U+10FFFF: NumPy makes a str of
    them that Python cannot index (SystemError)."""
    import numpy as np

    text = str(np.array([0x7B, 0x110000, 0x7D], np.uint32).view("<U3")[0:1].reshape(()))
    with pytest.raises(JSONTextError, match="bytes that are not UTF-8"):
        loads(text, "x")


def test_more_bytes_than_the_caller_allows_are_refused_unread() -> None:
    with pytest.raises(JSONTextError, match="1,001 bytes of it; expected at most 1,000"):
        loads(b" " * 1001, "x", max_bytes=1000)


def test_what_the_values_take_is_charged_against_the_expansion_limit() -> None:
    many = b"[" + b",".join([b"[]"] * 200_000) + b"]"
    assert len(loads(many, "x")) == 200_000  # within 4 × (its size + 4 MiB)
    with rnnport.limits(expansion=0.5), pytest.raises(LimitError) as error:
        loads(many, "many.json")
    assert error.value.limit == "expansion"
    assert str(error.value).startswith("many.json: its JSON builds more than ")


def test_a_tally_bounds_the_documents_of_one_file_together() -> None:
    tally = Tally("meta.pb", 100)
    document = b"[" + b",".join([b"{}"] * 10_000) + b"]"
    with rnnport.limits(expansion=1), pytest.raises(LimitError, match="meta.pb: its JSON"):
        for _ in range(100):
            loads(document, "meta.pb", tally=tally)
    assert tally.spent > tally.allowed


def test_deep_text_parses_alike_wherever_it_is_called_from() -> None:
    text = "[" * 64 + "1" + "]" * 64
    expected = loads(text, "x")
    assert deep_call(60, lambda: loads(text, "x")) == expected
    with pytest.raises(JSONTextError, match="nested more than 64 deep"):
        deep_call(60, lambda: loads("[" * 100_000, "x"))
    assert jsontext.MAX_DEPTH == 64
