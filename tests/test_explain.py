"""``rnnport.explain``: traced layout tables, their text and HTML, and what they claim.

Expected values come from elsewhere than the tracer: parameter counts from
``rnnport.param_count``, array names from the formats' own ``write``, gate orders from
LAYOUTS.md §1, and the cuDNN buffer from the Keras → cuDNN reference example that
TensorFlow really handed to cuDNN.
"""

from __future__ import annotations

import html.parser
import itertools
import json
import re
import shutil
import subprocess
import sys
from functools import cache
from importlib import resources
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

import rnnport
from rnnport.explain import Explanation, explain

FORMATS = rnnport.formats()
CELLS = ("lstm", "gru", "rnn")
LABEL = re.compile(r"(?<![\w\]])(?:bW|bR|W|R|b)[a-z]\[\d+(?:,\d+)?\]|\bzero\b")
HEADING = re.compile(r"^  (\S+) \((\d+(?:, \d+)*,?)\)(?: at \[\d+, \d+\))?$")
CHROMIUM_HINT = ("chromium is not installed; `make test` installs it (apt-get install -y chromium). "
                 "The HTML page of rnnport explain is checked by rendering it in headless Chromium.")


@cache
def explained(cell: str, source: str, target: str) -> Explanation:
    return explain(cell, source, target)


def sections(text: str) -> dict[str, dict[str, int]]:
    """SOURCE/TARGET → {array heading: number of element labels in its table}."""
    out: dict[str, dict[str, int]] = {}
    current: dict[str, int] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith(("SOURCE:", "TARGET:")):
            current = out.setdefault(line.split(":")[0], {})
            heading = None
        elif line.startswith(("RULES", "PARAMETER COUNTS")):
            current, heading = {}, None
        elif HEADING.match(line) and line[2:] not in current:
            heading = line[2:]
            current[heading] = 0
        elif heading is not None:
            current[heading] += len(LABEL.findall(line))
    return out


def spec_for(cell: str) -> rnnport.Spec:
    return rnnport.Spec({"rnn": "rnn_tanh"}.get(cell, cell), 2, 3)


@pytest.mark.parametrize(("cell", "source", "target"),
                         list(itertools.product(CELLS, FORMATS, FORMATS)))
def test_every_pair_names_every_array_and_labels_every_element(cell: str, source: str,
                                                               target: str) -> None:
    explanation = explained(cell, source, target)
    text = explanation.text(color=False)
    found = sections(text)
    model = rnnport.RNN.random(spec_for(cell), dtype=np.float64)
    for side, fmt, arrays in (("SOURCE", source, explanation.source_arrays),
                              ("TARGET", target, explanation.target_arrays)):
        tables = found[side]
        assert list(tables) == [array.heading() for array in arrays]
        for array in arrays:
            assert tables[array.heading()] == array.size, (side, array.heading())
        assert sum(tables.values()) == rnnport.param_count(model, fmt), (side, fmt)
        native = rnnport.write(model, fmt)
        if isinstance(native, dict):  # the names are the format's own keys
            floats = [key for key, value in native.items() if np.asarray(value).dtype.kind == "f"]
            assert [array.name for array in arrays] == floats
    assert f"RULES: {source} → {target}" in text
    assert "bug" not in text
    assert "irregular" not in text


def test_keras_gru_counts_and_gate_order_into_cudnn() -> None:
    explanation = explained("gru", "keras", "cudnn")
    tables = sections(explanation.text())
    assert tables["SOURCE"] == {"kernel (2, 9)": 18, "recurrent_kernel (3, 9)": 27,
                                "bias (2, 9)": 18}
    kernel = explanation.source_arrays[0].labels()
    # LAYOUTS.md §1: Keras GRU columns are z r h; cuDNN's first GRU gate is reset.
    assert [kernel[0, 3 * block] for block in range(3)] == ["Wz[0,0]", "Wr[0,0]", "Wn[0,0]"]
    first = explanation.target_arrays[0]
    assert first.name == "weight_ih" and first.offset == 0
    assert first.labels()[0, 0] == "Wr[0,0]"
    assert "\n     @0  Wr[0,0]  Wr[0,1]\n" in explanation.text()
    assert "gate blocks z r h → r z n (blocks 0 and 1 swap)" in explanation.text()
    assert "W_r@0 W_z@6 W_n@12" in explanation.text()


def test_onnx_lstm_is_i_o_f_c_and_tf1_lstm_is_i_j_f_o() -> None:
    onnx = explained("lstm", "torch", "onnx")
    weights = onnx.target_arrays[0]
    assert weights.name == "W" and weights.shape == (1, 12, 2)
    assert [weights.labels()[0, 3 * block, 0] for block in range(4)] == [
        "Wi[0,0]", "Wo[0,0]", "Wf[0,0]", "Wg[0,0]"]
    assert "gate blocks i o f c (canonical i o f g)" in onnx.text()
    tf1 = explained("lstm", "cudnn", "tf1")
    kernel = tf1.target_arrays[0]
    assert kernel.name == "rnn/lstm_cell/kernel" and kernel.shape == (5, 12)
    labels = kernel.labels()
    assert [labels[0, 3 * block] for block in range(4)] == ["Wi[0,0]", "Wg[0,0]", "Wf[0,0]",
                                                            "Wo[0,0]"]
    assert labels[2, 0] == "Ri[0,0]"  # rows: x first, then h
    text = tf1.text()
    assert "gate blocks i j f o (canonical i g f o)" in text
    assert "forget_bias=1.0 adds -1 to rnn/lstm_cell/bias[6:9]" in text


def test_one_bias_formats_show_the_sum_and_the_zero_slot() -> None:
    explanation = explained("lstm", "keras", "cudnn")
    segments = {array.name: array for array in explanation.target_arrays}
    assert set(segments["bias_ih"].labels()) == {"zero"}
    assert list(segments["bias_hh"].labels()[:4]) == ["bi[0]", "bi[1]", "bi[2]", "bf[0]"]
    assert list(explanation.source_arrays[2].labels()[:3]) == ["bi[0]", "bi[1]", "bi[2]"]
    text = explanation.text()
    assert "recurrent-side bias bias_hh and zeros in bias_ih" in text
    assert "keras: 72 = G·H·(I + H + 1)" in text and "cudnn: 84 = G·H·(I + H + 2)" in text
    folded = explained("lstm", "tf1", "cudnn").text()
    assert "reading with forget_bias=1.0 adds +1 to bias_ih[3:6] (buffer [63, 66))" in folded


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_tables_predict_the_real_keras_to_cudnn_buffer(cell: str) -> None:
    """The reference example is the buffer TensorFlow handed to cuDNN: every cuDNN element
    holds the Keras element with the same label (zero where the label is ``zero``)."""
    data = json.loads(resources.files("rnnport").joinpath("data/reference.json")
                      .read_text())[cell]
    keras = {"kernel": data["keras_kernel"], "recurrent_kernel": data["keras_recurrent_kernel"],
             "bias": data["keras_bias"]}
    explanation = explain(cell, "keras", "cudnn", input_size=data["input_size"],
                          hidden_size=data["hidden_size"])
    value = {}
    for array in explanation.source_arrays:
        for index, label in np.ndenumerate(array.labels()):
            value[label] = np.asarray(keras[array.name])[index]
    buffer = np.asarray(data["cudnn_params"])
    checked = 0
    for segment in explanation.target_arrays:
        for flat, label in enumerate(segment.labels().reshape(-1)):
            expected = 0.0 if label == "zero" else value[label]
            assert buffer[segment.offset + flat] == expected, (segment.name, flat, label)
            checked += 1
    assert checked == buffer.size


def test_plain_text_has_no_escape_codes_and_colour_text_has_them() -> None:
    explanation = explained("lstm", "keras", "tf1")
    plain, coloured = explanation.text(color=False), explanation.text(color=True)
    assert "\x1b" not in plain and str(explanation) == plain
    assert "\x1b[" in coloured and "\x1b[0m" in coloured
    stripped = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    assert [line.rstrip() for line in stripped.splitlines()] == [
        line.rstrip() for line in plain.splitlines()]


def test_large_sizes_elide_and_default_sizes_show_everything() -> None:
    assert "…" not in "".join(explained("gru", "keras", "cudnn").text().partition("RULES")[0])
    big = explain("lstm", "keras", "cudnn", input_size=40, hidden_size=64).text()
    assert "…" in big and "⋮" in big
    assert len(big.splitlines()) < 300
    tables = [line for line in big.splitlines() if LABEL.search(line)]
    assert max(map(len, tables)) <= 120


def test_bad_arguments_raise_rnnport_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(rnnport.SpecError, match="cell='lstmm'"):
        explain("lstmm", "keras", "cudnn")
    with pytest.raises(rnnport.UnknownFormatError, match="known formats"):
        explain("lstm", "kerass", "cudnn")
    with pytest.raises(rnnport.SpecError, match="hidden_size"):
        explain("lstm", "keras", "cudnn", hidden_size=0)
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(rnnport.MissingDependencyError, match=r"rnnport\[onnx\]"):
        explain("lstm", "onnx", "keras")


def test_import_rnnport_does_not_import_explain_nor_frameworks() -> None:
    script = ("import sys, rnnport; assert 'rnnport.explain' not in sys.modules\n"
              "import rnnport.explain\n"
              "print(','.join(m for m in ('torch', 'keras', 'onnx', 'tensorflow') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""


class _Checker(html.parser.HTMLParser):
    VOID: ClassVar[frozenset[str]] = frozenset({"meta", "br", "hr", "img", "input", "link", "col",
                                                "wbr"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.declarations: list[str] = []

    def handle_decl(self, decl: str) -> None:
        self.declarations.append(decl)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes {self.stack[-1:] or 'nothing'}")
        else:
            self.stack.pop()


@pytest.mark.parametrize(("cell", "source", "target"),
                         [("gru", "keras", "cudnn"), ("lstm", "tf1", "onnx"), ("rnn", "torch", "miopen")])
def test_html_is_valid_standalone_html5(cell: str, source: str, target: str) -> None:
    explanation = explained(cell, source, target)
    page = explanation.html()
    checker = _Checker()
    checker.feed(page)
    checker.close()
    assert checker.problems == [] and checker.stack == []
    assert page.startswith("<!DOCTYPE html>") and checker.declarations == ["DOCTYPE html"]
    tags = [tag for tag, _ in checker.tags]
    assert ("meta", {"charset": "utf-8"}) in checker.tags and tags.count("title") == 1
    assert "script" not in tags and "link" not in tags
    assert not re.search(r"https?://", page)
    cells = sum(1 for tag, attrs in checker.tags if tag == "td" and "title" in attrs)
    assert cells == sum(a.size for a in explanation.source_arrays + explanation.target_arrays)
    assert tags.count("table") == len(explanation.source_arrays + explanation.target_arrays) + 2


@pytest.mark.slow
def test_html_renders_in_headless_chromium(tmp_path: Path) -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail(CHROMIUM_HINT)
    explanation = explained("gru", "keras", "cudnn")
    page = tmp_path / "explain.html"
    page.write_text(explanation.html(), encoding="utf-8")
    base = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*base, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert dom.stdout.count('<table class="arr"') == 7
    assert "<h2>Legend</h2>" in dom.stdout and "Rules: keras → cudnn" in dom.stdout
    assert 'title="Wr[0,0]: input weights W, gate r (reset), unit 0, input column 0; buffer ' \
           'offset 0">Wr[0,0]</td>' in dom.stdout
    shot = tmp_path / "explain.png"
    rendered = subprocess.run([*base, f"--screenshot={shot}", "--window-size=1200,1600",
                               page.as_uri()], capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
