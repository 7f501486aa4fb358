"""A format is one module plus one registry line: a throwaway format, declared in this test
module and registered here only, is picked up by ``rnnport formats``, ``convert``,
``convert --verify``, ``explain``, the conversion matrix and the documentation site (a page
from its registry line, declaration and this docstring, whose example runs) with no other
change.

The format: a network as JSON text (``*.plain.json``), every parameter a list of floats
(JSON keeps a float64 exactly; float16/32 values convert to float64 and back exactly),
the spec as its fields. It holds a projection and nothing else optional, and both biases.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnport
from rnnport import RNN, Spec, Stack, formats
from rnnport.cli import main
from rnnport.explain import explain
from rnnport.formats import Format, Suffix

NAME = "plain"
SUFFIX = ".plain.json"


def _key(layer: int, direction: int, name: str) -> str:
    return f"layer{layer}/{('forward', 'backward')[direction]}/{name}"


def sniff(source: Any) -> bool:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source).endswith(SUFFIX)
    return isinstance(source, Mapping) and "spec" in source


def write(model: rnnport.Model, path: Any = None) -> dict[str, Any]:
    if isinstance(model, Stack):
        raise rnnport.UnsupportedFeatureError("write(fmt='plain'): one network only.")
    out: dict[str, Any] = {"spec": np.array(json.dumps(
        {f.name: getattr(model.spec, f.name) for f in fields(Spec)}))}
    out.update({_key(layer, direction, name): np.array(array, copy=True)
                for layer, direction, name, array in model.arrays()})
    if path is not None:
        text = {"spec": json.loads(str(out["spec"])), "dtype": str(model.dtype),
                "arrays": {key: value.tolist() for key, value in out.items() if key != "spec"}}
        Path(path).write_text(json.dumps(text))
    return out


def _spec(fields_: dict[str, Any]) -> Spec:
    return Spec(**{**fields_, "activations": tuple(map(tuple, fields_["activations"]))})


def read(source: Any) -> RNN:
    if isinstance(source, (str, os.PathLike)):
        text = json.loads(Path(source).read_text())
        spec = _spec(text["spec"])
        arrays = {key: np.asarray(value, dtype=text["dtype"])
                  for key, value in text["arrays"].items()}
    else:
        spec = _spec(json.loads(str(source["spec"])))
        arrays = {key: value for key, value in source.items() if key != "spec"}
    params = [[{name: arrays[_key(layer, direction, name)] for name in spec.param_shapes(layer)}
               for direction in range(spec.num_directions)] for layer in range(spec.num_layers)]
    return RNN(spec, params)


FORMAT = Format(NAME, sniff=sniff, reader=read, writer=write, features=frozenset({"projection"}),
                suffixes=(Suffix(SUFFIX, "a network as plain JSON"),))


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(formats, "_REGISTRY", dict(formats._REGISTRY))
    formats.register(NAME, __name__, "a network as plain JSON (a format of this test only)")
    yield


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    model = RNN.random(Spec("lstm", 3, 4, num_layers=2, bidirectional=True, proj_size=2),
                       seed=4)
    rnnport.write(model, "torch", path=tmp_path / "m.pt")
    return tmp_path / "m.pt"


def test_the_registry_lists_it_and_the_api_reads_and_writes_it(registered: None,
                                                              tmp_path: Path) -> None:
    assert NAME in rnnport.formats() and formats.get(NAME) is FORMAT
    model = RNN.random(Spec("gru", 3, 5, bidirectional=True), seed=1)
    native = rnnport.write(model, NAME)
    assert rnnport.read(native) == model  # sniffed from the dict
    rnnport.write(model, NAME, path=tmp_path / f"m{SUFFIX}")
    assert rnnport.read(tmp_path / f"m{SUFFIX}") == model
    with pytest.raises(rnnport.UnsupportedFeatureError, match="the plain format cannot hold "
                       "LSTM peepholes.*Formats that hold it: onnx, npz, tf1"):
        rnnport.write(RNN.random(Spec("lstm", 2, 3, peepholes=True)), NAME)


def test_the_command_line_lists_converts_and_verifies_it(
        registered: None, model_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["formats"]) == 0
    assert re.search(rf"^{NAME} +a network as plain JSON .*; NumPy only$",
                     capsys.readouterr().out, re.MULTILINE)
    target = model_file.parent / f"out{SUFFIX}"
    assert main(["convert", str(model_file), str(target), "--verify", "-q"]) == 0
    out = capsys.readouterr().out
    assert f"wrote {target} ({NAME}, " in out
    assert re.search(r"stage 1, rnnport reading \S+ back: max \|Δ\| = 0\.0e\+00 \(tolerance \S+\) ok", out)
    assert f"stage 2, {NAME}'s framework: not run" in out
    assert rnnport.read(target) == rnnport.read(model_file)
    assert main(["convert", str(target), str(model_file.parent / "back.npz"), "-q"]) == 0
    assert rnnport.read(model_file.parent / "back.npz") == rnnport.read(model_file)


def test_explain_and_the_matrix_include_it(registered: None) -> None:
    explanation = explain("lstm", "keras", NAME)
    names = [array.name for array in explanation.target_arrays]
    assert names == [f"layer0/forward/{name}" for name in
                     ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    assert f"RULES: keras → {NAME}" in explanation.text()
    assert explanation.counts[1].total == 84
    lines = formats.matrix_markdown().splitlines()
    columns = [cell.strip(" `") for cell in lines[0].strip("|").split("|")][1:]
    cells = {line.strip("|").split("|")[0].strip(" `"):
             dict(zip(columns, (c.strip() for c in line.strip("|").split("|")[1:]), strict=True))
             for line in lines[2:2 + len(columns)]}
    assert columns == rnnport.formats() and list(cells) == rnnport.formats()
    # keras holds a reset-before GRU, plain does not; plain holds a projection, keras does
    # not and sums the biases of LSTM, reset-before GRU and simple RNN.
    assert cells["keras"][NAME] == "✓ −r" and cells[NAME]["keras"] == "Σ −P"
    assert cells[NAME]["torch"] == cells["torch"][NAME] == "✓"


def test_the_docs_site_gives_it_a_page_whose_example_runs(
        registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_docs import build_site, docs_pages, run_blocks

    build_site(tmp_path / "site")
    page = (tmp_path / "site" / "formats" / f"{NAME}.html").read_text(encoding="utf-8")
    assert "A network as plain JSON (a format of this test only)." in page  # the registry
    assert "<code>.plain.json</code> (a network as plain JSON)" in page    # the declaration
    assert "It holds a projection and nothing else optional" in page       # this docstring
    assert "LSTM peepholes (−p)" in page                                    # refused features
    index = (tmp_path / "site" / "formats" / "index.html").read_text(encoding="utf-8")
    assert f'href="{NAME}.html"' in index
    text = dict(docs_pages().pages())[f"formats/{NAME}.md"]
    monkeypatch.chdir(tmp_path)
    assert run_blocks([(f"formats/{NAME}.md", text)], tmp_path) == 1
    assert rnnport.read(tmp_path / f"example{SUFFIX}").spec == Spec("lstm", 4, 8)


def test_nothing_is_left_registered_after_the_tests() -> None:
    assert NAME not in rnnport.formats()
