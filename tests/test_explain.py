"""``rnnport.explain``: traced layout tables, their text and HTML, and what they claim.

Expected values come from elsewhere than the tracer: parameter counts from
``rnnport.param_count``, array names from the formats' own ``write``, gate orders from
LAYOUTS.md §1, and the cuDNN buffer from the Keras → cuDNN reference example that
TensorFlow really handed to cuDNN.
"""

from __future__ import annotations

import html
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


def held(model: rnnport.RNN, *fmts: str) -> rnnport.RNN:
    """``model`` in float32 where one of ``fmts`` stores no float64 (tflite)."""
    if all(rnnport.formats.get(fmt).holds_dtype(model.dtype) for fmt in fmts):
        return model
    return model.astype(np.float32)


def _leaves(tree: dict, path: str = "") -> list[tuple[str, object]]:
    """A nested dict's leaves by ``/``-joined key path, in order."""
    out: list[tuple[str, object]] = []
    for key, value in tree.items():
        name = f"{path}/{key}" if path else str(key)
        out.extend(_leaves(value, name) if isinstance(value, dict) else [(name, value)])
    return out


def spec_for(cell: str) -> rnnport.Spec:
    return rnnport.Spec({"rnn": "rnn_tanh"}.get(cell, cell), 2, 3)


@pytest.mark.parametrize(("cell", "source", "target"),
                         list(itertools.product(CELLS, FORMATS, FORMATS)))
def test_every_pair_names_every_array_and_labels_every_element(cell: str, source: str,
                                                               target: str) -> None:
    lacking = [fmt for fmt in (source, target)
               if cell == "rnn" and "simple_rnn" not in rnnport.formats.get(fmt).held_features]
    if lacking:  # a format without a simple RNN cell has no layout of one to show
        with pytest.raises(rnnport.UnsupportedFeatureError, match="no simple RNN cell"):
            explained(cell, source, target)
        return
    if cell == "gru" and not all(rnnport.formats.get(fmt).reset_after for fmt in (source, target)):
        # nor a format with the reset-before GRU alone a layout of the reset-after one
        with pytest.raises(rnnport.UnsupportedFeatureError, match="cannot hold a reset-after GRU"):
            explained(cell, source, target)
        return
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
        assert sum(tables.values()) == rnnport.param_count(held(model, fmt), fmt), (side, fmt)
        native = rnnport.write(held(model, fmt), fmt)
        if isinstance(native, dict):  # the names are the format's own keys (paths, nested)
            floats = [key for key, value in _leaves(native)
                      if value is not None and np.asarray(value).dtype.kind == "f"]
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


# -- the reset-before GRU ----------------------------------------------------------------------

HOLDERS = [name for name in FORMATS if "reset_before" in rnnport.formats.get(name).features]
NOT_HOLDERS = [name for name in FORMATS if name not in HOLDERS]


def _value(label: str, model: rnnport.RNN) -> float:
    """The value a table label names, read from ``model`` (layer 0, forward) by name."""
    match = re.fullmatch(r"(bW|bR|W|R|b)([a-z])\[(\d+)(?:,(\d+))?\]", label)
    assert match is not None, label
    kind, gate, unit, column = match.groups()
    letters = rnnport.gates.CANONICAL[rnnport.gates.gate_family(model.spec.cell)]
    names = {"W": ("weight_ih",), "R": ("weight_hh",), "bW": ("bias_ih",), "bR": ("bias_hh",),
             "b": ("bias_ih", "bias_hh")}[kind]
    total = 0.0
    for name in names:
        rows = rnnport.gates.block(model.parameter(0, 0, name), letters, gate)
        total += rows[int(unit), int(column)] if column is not None else rows[int(unit)]
    return float(total)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(HOLDERS, HOLDERS)))
def test_reset_before_pairs_label_every_element(source: str, target: str) -> None:
    explanation = explain("gru", source, target, reset_before=True)
    assert explanation.spec.reset_after is False
    text = explanation.text()
    found = sections(text)
    model = rnnport.RNN.random(rnnport.Spec("gru", 2, 3, reset_after=False), dtype=np.float64)
    for side, fmt, arrays in (("SOURCE", source, explanation.source_arrays),
                              ("TARGET", target, explanation.target_arrays)):
        assert list(found[side]) == [array.heading() for array in arrays]
        assert sum(found[side].values()) == rnnport.param_count(held(model, fmt), fmt)
    assert "GRU here is reset-before" in text and "bug" not in text and "irregular" not in text


def test_reset_before_keras_gru_stores_one_bias_150_against_165() -> None:
    """LAYOUTS.md §4: Keras GRU, I=4, H=5: reset_after=False 150, reset_after=True 165."""
    explanation = explain("gru", "keras", "tf1", input_size=4, hidden_size=5, reset_before=True)
    before, after = (rnnport.param_count(rnnport.RNN.random(
        rnnport.Spec("gru", 4, 5, reset_after=flag)), "keras") for flag in (False, True))
    assert (before, after) == (150, 165)
    keras = explanation.counts[0]
    assert keras.fmt == "keras" and keras.total == 150
    assert "a reset-after GRU (reset_after=True): 165" in keras.detail
    bias = explanation.source_arrays[2]
    assert bias.name == "bias" and bias.shape == (15,)
    # z r h, one stored bias per gate: the sum bW + bR.
    assert list(bias.labels()[::5]) == ["bz[0]", "br[0]", "bn[0]"]
    text = explanation.text()
    assert ("keras stores a reset-before GRU (reset_after=False) with one bias per gate, 3·H: "
            "3·H·(I + H) + 3·H = 150 parameters (I = 4, H = 5), against 3·H·(I + H) + 6·H = 165 "
            "for a reset-after GRU (reset_after=True)") in text
    assert ("The reset-after GRU keeps the candidate's recurrent bias bR_n apart because r "
            "multiplies (R_n h + bR_n); the reset-before GRU applies r to h before the product, "
            "so bW_n and bR_n only ever act as their sum and can be stored as one.") in text
    assert "GRU 4→5 (reset before)" in explanation.title
    # The labels say what Keras really stores: every element of what rnnport.write gives Keras
    # for a random reset-before GRU, by name.
    model = rnnport.RNN.random(rnnport.Spec("gru", 4, 5, reset_after=False), dtype=np.float64)
    native = rnnport.write(model, "keras")
    for array, values in zip(explanation.source_arrays, native, strict=True):
        for index, label in np.ndenumerate(array.labels()):
            assert np.asarray(values)[index] == _value(label, model), (array.name, label)
    # The reset-after view shows the other count.
    assert "a reset-before GRU (reset_after=False): 150" in explain(
        "gru", "keras", "tf1", input_size=4, hidden_size=5).counts[0].detail


@pytest.mark.parametrize("fmt", NOT_HOLDERS)
def test_formats_without_a_reset_before_gru_are_refused_with_those_that_hold_one(
        fmt: str) -> None:
    holders = ", ".join(HOLDERS)
    for source, target in ((fmt, HOLDERS[0]), (HOLDERS[0], fmt)):
        with pytest.raises(rnnport.UnsupportedFeatureError) as raised:
            explain("gru", source, target, reset_before=True)
        message = str(raised.value)
        assert message.startswith(f"explain: the {fmt} format cannot hold a reset-before GRU")
        assert f"Formats that hold it: {holders} (" in message
    with pytest.raises(rnnport.SpecError, match="only a GRU has a reset gate"):
        explain("lstm", HOLDERS[0], HOLDERS[0], reset_before=True)


# -- layers and directions: the block map of a flat buffer ----------------------------------------


def _neutral(fmt: str, cell: str) -> dict[str, float]:
    return {c.option: c.neutral for c in rnnport.formats.get(fmt).run_time_constants
            if cell in c.cells}


def _converted(model: rnnport.RNN, source: str, target: str) -> np.ndarray:
    """What a conversion from ``source`` to ``target`` writes for ``model``."""
    declared, cell = rnnport.formats.get(source), model.spec.cell
    native = rnnport.write(model, source, **_neutral(source, cell))
    back = rnnport.read(native, source, **declared.read_back_options(model),
                        **_neutral(source, cell))
    return np.asarray(rnnport.write(back, target, **_neutral(target, cell)))


def _writes_one_buffer(fmt: str) -> bool:
    native = rnnport.write(rnnport.RNN.random(rnnport.Spec("lstm", 2, 3)), fmt)
    return isinstance(native, np.ndarray) and native.ndim == 1


FLAT = [name for name in FORMATS if _writes_one_buffer(name)]


def test_flat_formats_are_found() -> None:
    assert set(FLAT) >= {"cudnn", "miopen"}


@pytest.mark.parametrize(("cell", "source", "target"), [
    (cell, source, target) for cell, source, target in itertools.product(("lstm", "gru"), FORMATS,
                                                                         FLAT)
    # the flat buffers hold the reset-after GRU alone: no GRU a format without one shares
    if cell != "gru" or rnnport.formats.get(source).reset_after])
def test_block_map_holds_what_the_writer_wrote_for_a_2_layer_bidirectional_network(
        cell: str, source: str, target: str) -> None:
    """Every block of the map, read out of a buffer written from random weights, holds the
    canonical parameter block it names (by layer, direction, name and gate)."""
    from rnnport.explain.trace import KIND_TAGS

    spec = rnnport.Spec(cell, 3, 4, num_layers=2, bidirectional=True)
    model = held(rnnport.RNN.random(spec, dtype=np.float64, seed=7), source, target)
    buffer = _converted(model, source, target)
    explanation = explain(cell, source, target, input_size=3, hidden_size=4, num_layers=2,
                          bidirectional=True)
    maps = {found.fmt: found for found in explanation.buffers}
    assert target in maps and (source in maps) == (source in FLAT)
    blocks = maps[target].blocks
    assert maps[target].size == buffer.size == rnnport.param_count(model, target)
    assert [b.start for b in blocks] == [0] + [b.stop for b in blocks[:-1]]
    assert blocks[-1].stop == buffer.size
    letters = rnnport.gates.CANONICAL[rnnport.gates.gate_family(spec.cell)]
    covered = set()
    for block in blocks:
        piece = buffer[block.start:block.stop]
        tag = KIND_TAGS[block.kind]
        if tag == "zero":
            assert not piece.any() and block.name == "zeros"
            continue
        names = {"W": ["weight_ih"], "R": ["weight_hh"], "bW": ["bias_ih"], "bR": ["bias_hh"],
                 "b": ["bias_ih", "bias_hh"]}[tag]
        assert block.name.startswith(" + ".join(names))
        stops = [start for _, start in block.gates[1:]] + [block.stop]
        for (gate, start), stop in zip(block.gates, stops, strict=True):
            expected = sum(rnnport.gates.block(model.parameter(block.layer, block.direction, name),
                                               letters, gate) for name in names)
            np.testing.assert_array_equal(buffer[start:stop], np.ravel(expected))
            covered.update((block.layer, block.direction, name, gate) for name in names)
    assert len(covered) == spec.num_layers * 2 * 4 * len(letters)


def test_block_map_of_the_layouts_example_and_the_tables_at_their_offsets() -> None:
    """LAYOUTS.md §5: 2-layer bidirectional LSTM, I=10, H=20 — matrices [0, 14400), biases
    [14400, 15040). The tables show layer 0, forward, at its offsets in that buffer."""
    explanation = explain("lstm", "torch", "cudnn", input_size=10, hidden_size=20, num_layers=2,
                          bidirectional=True)
    (buffer,) = explanation.buffers
    assert buffer.size == 15040
    assert buffer.summary == ("all matrices of all layers and directions first, [0, 14400), "
                              "then all biases, [14400, 15040)")
    rows = [(b.start, b.stop, b.layer, b.direction, b.name) for b in buffer.blocks]
    assert rows[:2] == [(0, 800, 0, 0, "weight_ih (80×10)"), (800, 2400, 0, 0, "weight_hh (80×20)")]
    assert rows[4] == (4800, 8000, 1, 0, "weight_ih (80×40)")  # layer 1 takes D·H = 40 inputs
    assert rows[8] == (14400, 14480, 0, 0, "bias_ih (80)")
    offsets = {array.name: array.offset for array in explanation.target_arrays}
    assert offsets == {"weight_ih": 0, "weight_hh": 800, "bias_ih": 14400, "bias_hh": 14480}
    text = explanation.text()
    assert "BUFFER BLOCKS: cudnn, the whole 2-layer bidirectional LSTM 10→20" in text
    assert re.search(r"\n  \[9600, 12800\) +3200  1 +backward +W weight_ih \(80×40\) +"
                     r"W_i@9600 W_f@10400 W_g@11200 W_o@12000\n", text)
    assert "The tables show layer 0, forward direction" in text
    assert "cudnn: 15040" in text and "torch: 15040" in text


def test_offsets_of_zero_slots_and_of_non_flat_formats_in_a_deep_network() -> None:
    explanation = explain("lstm", "keras", "miopen", num_layers=3)
    (buffer,) = explanation.buffers
    assert [b.name for b in buffer.blocks if b.kind == 0] == ["zeros"] * 3
    zero_slot = next(a for a in explanation.target_arrays if a.name == "bias_ih")
    assert set(zero_slot.labels()) == {"zero"}
    assert zero_slot.offset == next(b.start for b in buffer.blocks if b.name == "zeros")
    model = rnnport.RNN.random(rnnport.Spec("lstm", 2, 3, num_layers=3))
    assert dict(explanation.network_counts) == {
        "keras": rnnport.param_count(model, "keras"), "miopen": rnnport.param_count(model, "miopen")}
    # A run-time constant's offsets are those of the whole buffer, too.
    folded = explain("lstm", "tf1", "cudnn", num_layers=2)
    # TF1 keeps one bias: layer 0's input-side slot is the buffer's first run of zeros, and
    # reading adds forget_bias to its f block (canonical order i f g o, H = 3).
    forget = next(b for b in folded.buffers[0].blocks if b.name == "zeros").start + 3
    assert (f"reading with forget_bias=1.0 adds +1 to bias_ih[3:6] (buffer [{forget}, "
            f"{forget + 3}))") in folded.text()
    non_flat = explain("gru", "keras", "tf1", num_layers=2, bidirectional=True)
    assert non_flat.buffers == () and len(non_flat.network_counts) == 2
    assert "BUFFER BLOCKS" not in non_flat.text()


def test_layer_0_has_the_same_codes_in_a_one_layer_and_a_deeper_network() -> None:
    from rnnport.explain.trace import coded_models

    deep = rnnport.Spec("gru", 2, 3, num_layers=2, bidirectional=True)
    _, one_a, one_b = coded_models(deep.replace(num_layers=1, bidirectional=False))
    book, deep_a, deep_b = coded_models(deep)
    for one, whole in ((one_a, deep_a), (one_b, deep_b)):
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            np.testing.assert_array_equal(one.parameter(0, 0, name), whole.parameter(0, 0, name))
    assert book.kind.size == deep.num_params() + 1


def test_bad_layer_and_direction_arguments() -> None:
    for value in (0, 9, True, 1.5):
        with pytest.raises(rnnport.SpecError, match="num_layers"):
            explain("lstm", "keras", "cudnn", num_layers=value)  # type: ignore[arg-type]
    with pytest.raises(rnnport.SpecError, match="bidirectional='yes'"):
        explain("lstm", "keras", "cudnn", bidirectional="yes")  # type: ignore[arg-type]


def test_cli_flags(capsys: pytest.CaptureFixture[str]) -> None:
    from rnnport.cli import main

    assert main(["explain", "gru", "--reset-before", "--from", "keras", "--to", "tf1", "-i", "4",
                 "-H", "5"]) == 0
    out = capsys.readouterr().out
    assert "keras: 150 = " in out and "= 165 for a reset-after GRU" in out
    assert main(["explain", "gru", "--reset-before", "--from", "keras", "--to",
                 NOT_HOLDERS[0]]) == 1
    err = capsys.readouterr().err
    assert f"the {NOT_HOLDERS[0]} format cannot hold a reset-before GRU" in err
    assert f"Formats that hold it: {', '.join(HOLDERS)}" in err
    assert main(["explain", "lstm", "--from", "torch", "--to", "cudnn", "-i", "10", "-H", "20",
                 "--layers", "2", "--bidirectional"]) == 0
    assert "all matrices of all layers and directions first, [0, 14400), then all biases, " \
           "[14400, 15040)" in capsys.readouterr().out
    assert main(["explain", "--help"]) == 0
    assert f"one of {', '.join(FORMATS)}" in " ".join(capsys.readouterr().out.split())


# -- wide pages ----------------------------------------------------------------------------------

MEASURE = ("<script>const boxes = [...document.querySelectorAll('div.scroll')];"
           "document.body.setAttribute('data-measured', JSON.stringify({page: "
           "document.documentElement.scrollWidth, widest: Math.max(...boxes.map(b => "
           "b.scrollWidth)), box: Math.max(...boxes.map(b => b.clientWidth))}));</script>")


def _measure(chromium: str, page: str, tmp_path: Path, name: str) -> dict[str, int]:
    """The page's scroll width, and its boxes' widest content and width, at 1400 px."""
    path = tmp_path / f"{name}.html"
    path.write_text(page.replace("</body>", MEASURE + "</body>"), encoding="utf-8")
    dom = subprocess.run([chromium, "--headless=new", "--no-sandbox", "--disable-gpu",
                          "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
                          "--window-size=1400,900", "--dump-dom", path.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'data-measured="([^"]*)"', dom.stdout)
    assert found is not None, dom.stdout[-2000:]
    return json.loads(html.unescape(found.group(1)))


@pytest.mark.slow
def test_wide_tables_scroll_in_their_own_box_in_headless_chromium(tmp_path: Path) -> None:
    """At 1400 px the page is no wider than the window; the widest table (a TF1 kernel of
    32 columns, unelided) scrolls inside its box. Without the box's CSS the same page runs
    off to the right, so the check can fail."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail(CHROMIUM_HINT)
    page = explain("lstm", "tf1", "cudnn", input_size=8, hidden_size=8, num_layers=3,
                   bidirectional=True).html()
    fixed = _measure(chromium, page, tmp_path, "fixed")
    assert fixed["page"] <= 1400 < fixed["widest"]
    assert fixed["box"] <= 1400
    assert page.count("overflow-x:auto") == 1
    broken = _measure(chromium, page.replace("overflow-x:auto", ""), tmp_path, "broken")
    assert broken["page"] > 1400
