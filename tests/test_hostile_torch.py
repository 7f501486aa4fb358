"""PyTorch files built to exhaust memory through shared references: ``torch.save`` pickles a
list once and refers to it again in two bytes, so a few kilobytes can name billions of
numbers. Lists of numbers still read, within the ``expansion`` limit."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec
from rnnport.errors import FormatError, LimitError
from rnnport.formats import torch as torch_format

torch = pytest.importorskip("torch")


def _shared(depth: int, width: int) -> list[Any]:
    """``width`` numbers, then ``depth - 1`` levels each holding one list ``width`` times."""
    nested: list[Any] = [0.0] * width
    for _ in range(depth - 1):
        nested = [nested] * width
    return nested


def _more_than(value: Any, most: int) -> bool:
    """Whether nested lists ``value`` hold more than ``most`` items, counted one by one (with
    no sharing known) and given up on past ``most``."""
    pending, seen = [value], 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > most:
            return True
        if isinstance(item, (list, tuple)):
            pending.extend(item)
    return False


@pytest.fixture(autouse=True)
def no_huge_list_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail at once, instead of hanging or allocating gigabytes, if the reader turns lists of
    more than a million items into an array."""
    convert = torch_format.to_numpy

    def guarded(value: Any, location: str = "an input array") -> np.ndarray:
        if _more_than(value, 10**6):
            pytest.fail(f"{location}: lists of more than 10⁶ items converted to an array")
        return convert(value, location)

    monkeypatch.setattr(torch_format, "to_numpy", guarded)


@pytest.mark.parametrize(("depth", "width", "most_bytes"), [
    (5, 100, 4_000),       # 10¹⁰ numbers in a 3 KB file: hours of work
    (3, 700, 11_000),      # 3.4·10⁸ numbers in 11 KB: a 2.7 GB array
    (2, 25_000, 280_000),  # 6.25·10⁸ numbers: MemoryError
])
def test_lists_repeated_by_reference_are_refused(tmp_path: Path, depth: int, width: int,
                                                 most_bytes: int) -> None:
    path = tmp_path / "shared.pt"
    torch.save({"weight_ih_l0": _shared(depth, width), "weight_hh_l0": torch.zeros(4, 1)}, path)
    assert path.stat().st_size < most_bytes
    with pytest.raises(LimitError, match=r"'weight_ih_l0' would expand to [\d,]+ bytes") as error:
        rnnport.read(path)
    assert error.value.limit == "expansion"
    assert "rnnport.limits(expansion=" in str(error.value)
    # Listing what the file holds builds no array at all (the fixture fails any expansion).
    assert torch_format.choices(path).entries == (("", "1 layer(s), 1 direction(s)"),)
    assert torch_format.notes(path)


def test_shared_lists_are_counted_once_each(tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Twenty levels of one shared pair: 2²⁰ numbers from two stored ones, each looked at
    once."""
    opened: list[int] = []
    leaf = torch_format._leaf

    def counted(item: Any) -> tuple[int, int]:
        opened.append(1)
        return leaf(item)

    monkeypatch.setattr(torch_format, "_leaf", counted)
    path = tmp_path / "deep.pt"
    torch.save({"weight_ih_l0": _shared(20, 2), "weight_hh_l0": torch.zeros(4, 1)}, path)
    with rnnport.limits(expansion=0.001), pytest.raises(LimitError, match="8,388,608 bytes"):
        torch_format.load(path)
    assert len(opened) == 2  # pickle stores each float; the lists above them are shared


def test_a_list_that_holds_itself_is_refused(tmp_path: Path) -> None:
    looped: list[Any] = [0.0]
    looped.append(looped)
    path = tmp_path / "loop.pt"
    torch.save({"weight_ih_l0": looped, "weight_hh_l0": torch.zeros(4, 1)}, path)
    with pytest.raises(FormatError, match="a list that holds itself"):
        rnnport.read(path)


def test_lists_read_within_the_limit_and_shared_ones_are_refused(tmp_path: Path) -> None:
    model = RNN.random(Spec("gru", 3, 5, num_layers=2), seed=2)
    rnnport.write(model, "torch", path=tmp_path / "m.pt")
    assert rnnport.read(tmp_path / "m.pt") == model
    # Lists of numbers, a row list repeated as [[0.5] * 3] * 8 pickles, read as float64.
    lists = {name: value.tolist() for name, value in rnnport.write(model, "torch").items()}
    lists["bias_ih_l0"] = [0.25] * 15
    torch.save(lists, tmp_path / "lists.pt")
    torch.save({"weight_ih_l0": [[0.5] * 3] * 8, "weight_hh_l0": [[0.25] * 2] * 8},
               tmp_path / "rows.pt")
    read = rnnport.read(tmp_path / "lists.pt")
    assert isinstance(read, RNN) and read.spec == model.spec and read.dtype == np.float64
    np.testing.assert_array_equal(read.layers()[1].params[0][0]["weight_hh"],
                                  model.layers()[1].params[0][0]["weight_hh"])
    assert rnnport.read(tmp_path / "rows.pt").spec == Spec("lstm", 3, 2, bias=False)
    # In memory, shared lists are bounded by the bytes their distinct lists hold.
    state = {"weight_ih_l0": _shared(4, 200), "weight_hh_l0": [[0.0]] * 4}
    with pytest.raises(LimitError, match="expansion"):
        rnnport.read(state, fmt="torch")
