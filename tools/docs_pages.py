"""The generated pages of the documentation site, and the MkDocs hooks that add them.

``mkdocs.yml`` names this file under ``hooks:``. At build time it adds, from the code:

* one page per registered format (``formats/NAME.md``), from the registry line, the
  format's declaration (:class:`rnnport.formats.Format`: files, options with their
  defaults, cells and features held and refused, dtypes, biases, engines) and its module's
  docstring (the layout specification), with an example that writes a random network in
  the format and reads it back; a hand-written ``docs/formats/NAME.md``, where there is
  one, follows as "In practice". A format registered in the building process gets its
  page with no other change;
* ``formats/index.md``, the list of formats;
* the conversion matrix (:func:`rnnport.formats.matrix_markdown`), the command line's
  reference (from its argparse parser), the benchmark's method (``bench/bench.py``'s
  docstring) and ``rnnport explain``'s pages for an LSTM and a GRU, where a page holds
  ``<!-- generated: KEY -->``.

:func:`pages` gives every page of the site as it is built (generated text included), in
the order of the navigation, for the test that runs the documentation's code blocks.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from rnnport import formats
from rnnport.formats import BIAS_KINDS, FEATURE_CODES, Format

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)
# The pictures `rnnport explain` draws for the docs: (file, cell, source, target, options).
PICTURES = (("lstm-keras-torch.html", "lstm", "keras", "torch", {}),
            ("gru-keras-cudnn.html", "gru", "keras", "cudnn", {}),
            ("gru-reset-before-keras-tf1.html", "gru", "keras", "tf1", {"reset_before": True}))
CELL_NAMES = {"lstm": "LSTM", "gru": "GRU", "rnn": "simple RNN (tanh and relu)",
              "rnn_tanh": "simple RNN (tanh only)"}


# -- reStructuredText docstrings as Markdown -----------------------------------------------


_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|obj|exc):`~?([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def markdown(docstring: str) -> str:
    """A docstring's reStructuredText (roles, ``literal``, ``::`` blocks, bullets) as the
    Markdown MkDocs renders."""
    lines = inspect.cleandoc(docstring).splitlines()
    out: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.rstrip().endswith("::"):
            text = line.rstrip()[:-2].rstrip()
            if text:
                out.append(_inline(text) + ":")
            index += 1
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip() or lines[index][:1] == " "):
                block.append(lines[index])
                index += 1
            while block and not block[-1].strip():
                block.pop()
            body = inspect.cleandoc("\n".join(block)) if block else ""
            out += ["", "```text", *body.splitlines(), "```", ""]
            continue
        if (line.startswith(("* ", "- ")) and out and out[-1].strip()
                and not out[-1].lstrip().startswith(("* ", "- ")) and out[-1][:1] != " "):
            out.append("")
        # a literal that runs on to the next line is joined into one line (Markdown's code
        # spans may not break where _inline works line by line)
        while _ROLE.sub("", line).count("``") % 2 and index + 1 < len(lines) \
                and lines[index + 1].strip():
            index += 1
            line = f"{line.rstrip()} {lines[index].strip()}"
        out.append(_inline(line))
        index += 1
    return "\n".join(out).strip() + "\n"


def _inline(line: str) -> str:
    """One line of prose: roles and double backticks as code spans, ``<`` escaped outside
    them."""
    line = _ROLE.sub(lambda match: f"``{match[1].split('.')[-1] if '~' in match[0] else match[1]}``",
                     line)
    parts = re.split(r"(``[^`]+``|`[^`]+`)", line)
    return "".join(
        f"`{part[2:-2]}`" if part.startswith("``") else part if part.startswith("`")
        else part.replace("<", "&lt;") for part in parts)


# -- one page per format ---------------------------------------------------------------------


def _defaults(function: Any, names: frozenset[str]) -> dict[str, str]:
    """Each option's default as the function's signature gives it ('required' without one);
    an option taken through ``**options`` has its defaults in the format's docstring."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}
    found = {}
    for name in names:
        parameter = parameters.get(name)
        if parameter is not None:
            found[name] = ("required" if parameter.default is inspect.Parameter.empty
                           else f"`{parameter.default!r}`")
    return found


def _options(title: str, names: frozenset[str], function: Any) -> list[str]:
    if not names:
        return [f"**{title}**: none.", ""]
    defaults = _defaults(function, names)
    lines = [f"**{title}**:", "", "| option | default |", "|---|---|"]
    lines += [f"| `{name}` | {defaults.get(name, 'as the layout below says')} |"
              for name in sorted(names)]
    if function.__doc__:
        lines += ["", markdown(function.__doc__)]
    return [*lines, ""]


def _example(name: str, declared: Format) -> list[str]:
    """A write and a read back of a random LSTM, checked by running both."""
    dtype = "float32" if declared.holds_dtype("float32") else sorted(declared.dtypes or ())[-1]
    written = [suffix for suffix in declared.suffixes if suffix.writes]
    path = f"example{written[0].text}" if written else None
    lines = ["```python", "import numpy as np", "import rnnport", "",
             f'net = rnnport.RNN.random(rnnport.Spec("lstm", 4, 8), dtype=np.{dtype})']
    if path is not None:
        lines += [f'rnnport.write(net, "{name}", path="{path}", overwrite=True)',
                  f'back = rnnport.read("{path}", "{name}"'
                  + "".join(f", {key}={value!r}" for key, value in
                            declared.read_back_options(_sample(dtype)).items()) + ")"]
    else:
        lines += [f'native = rnnport.write(net, "{name}")   # the format\'s own object',
                  f'back = rnnport.read(native, "{name}"'
                  + "".join(f", {key}={value!r}" for key, value in
                            declared.read_back_options(_sample(dtype)).items()) + ")"]
    x = "np.random.default_rng(0).standard_normal((2, 5, 4)).astype(np.float32)"
    if "lstm" in declared.one_bias:
        lines += [f"x = {x}",
                  "assert np.allclose(back.forward(x)[0], net.forward(x)[0], atol=1e-5)"
                  "  # biases summed: the same function"]
    else:
        lines += ["assert back == net   # the same arrays, bit for bit"]
    return [*lines, "```", ""]


def _sample(dtype: str) -> Any:
    import numpy as np

    from rnnport import RNN, Spec
    return RNN.random(Spec("lstm", 4, 8), dtype=np.dtype(dtype))


def format_page(name: str, guide: str | None = None) -> str:
    """Format ``name``'s page: its registry line and declaration, its module's docstring,
    an example, and ``guide`` (a hand-written page) after them."""
    entry = formats.info(name)
    declared = formats.get(name)
    module = importlib.import_module(entry.module)
    held = declared.held_features
    cells = [CELL_NAMES[cell] for cell in ("lstm", "gru", "rnn", "rnn_tanh")
             if cell in declared.cells]
    suffixes = [f"`{s.text}` ({s.what}{'' if s.writes else ', read only'})"
                for s in declared.suffixes]
    extra = (f"the `{declared.extra}` extra for framework objects (`pip install "
             f"'rnnport[{declared.extra}]'`)" if declared.extra else "nothing but NumPy")
    dtypes = ", ".join(sorted(declared.dtypes)) if declared.dtypes else \
        "float16, float32 and float64, as they are"
    lines = [f"# `{name}`", "", f"{entry.summary[0].upper()}{entry.summary[1:]}.", "",
             "| | |", "|---|---|",
             f"| files | {', '.join(suffixes) or 'none: objects in memory'} |",
             f"| needs | {extra} |",
             f"| cells | {', '.join(cells)} |",
             "| features held | " + (", ".join(what for key, (_, what) in FEATURE_CODES.items()
                                          if key in held) or "none") + " |",
             "| features refused | " + (", ".join(
                 f"{what} (−{code})" for key, (code, what) in FEATURE_CODES.items()
                 if key not in held) or "none") + " |",
             f"| weights | {dtypes} |",
             "| biases | " + ("one per gate, the two summed, for: " + ", ".join(
                 what for key, what in BIAS_KINDS.items() if key in declared.one_bias)
                 if declared.one_bias else "both kept apart") +
             ("; zeros stored for a network without biases" if declared.always_bias else "")
             + " |"]
    if declared.engines:
        lines.append("| engines | " + ", ".join(
            f"`forward(engine=\"{engine.name}\")` (the `{engine.extra}` extra)"
            for engine in declared.engines) + " |")
    if declared.names:
        lines.append("| its names | " + ", ".join(
            f"{key}: {value}" for key, value in sorted(declared.names.items())) + " |")
    lines += ["", "Every feature the table refuses is an `UnsupportedFeatureError` naming it "
              "and the formats that hold it; the [conversion matrix](../matrix.md) sets this "
              "format against every other.", "",
              "## Options", "",
              *_options("Reading", declared.read_options, declared.reader),
              *_options("Writing", declared.write_options, declared.writer)]
    constants = declared.run_time_constants
    notes = declared.layout_notes
    if constants or notes or declared.drops:
        lines += ["## What the framework adds or drops", ""]
        lines += [f"* `{c.option}` (default `{c.default}`): {c.what}" for c in constants]
        lines += [f"* {note}" for note in notes]
        lines += [f"* {FEATURE_CODES[key][1]}: {what}" for key, what in declared.drops.items()]
        lines.append("")
    lines += ["## Layout", "", markdown(module.__doc__ or "(no docstring)"),
              "## Example", "", *_example(name, declared)]
    if guide:
        body = guide.split("\n", 1)[1] if guide.startswith("# ") else guide
        lines += ["## In practice", "", _demoted(body).strip(), ""]
    return "\n".join(lines)


def _demoted(text: str) -> str:
    """Markdown whose headings sit one level lower, code blocks left as they are."""
    out, fenced = [], False
    for line in text.splitlines():
        fenced ^= line.startswith("```")
        out.append(f"#{line}" if not fenced and re.match(r"#{1,5} ", line) else line)
    return "\n".join(out)


def formats_index() -> str:
    """The list of formats, one line each, linking to their pages."""
    lines = ["# Formats", "",
             "One page per registered format, generated from the registry and the format's "
             "module: what it reads and writes, options and their defaults, the features it "
             "holds and refuses, its layout, an example. `rnnport formats` prints the same "
             "list; `rnnport.formats.register` adds one at run time.", "",
             "| format | what it is | needs |", "|---|---|---|"]
    for name in formats.formats():
        extra = formats.get(name).extra
        lines.append(f"| [`{name}`]({name}.md) | {formats.info(name).summary} | "
                     + (f"`rnnport[{extra}]` for framework objects" if extra else "NumPy")
                     + " |")
    lines += ["", "[What converts to what](../matrix.md), exactly or with biases summed.", ""]
    return "\n".join(lines)


# -- generated sections --------------------------------------------------------------------


@contextmanager
def _columns(width: int) -> Iterator[None]:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def cli_reference() -> str:
    """``rnnport --help`` and each command's ``--help``, from the parser itself."""
    import argparse

    from rnnport.cli import _parser

    with _columns(100):
        parser = _parser()
        lines = ["```text", parser.format_help().rstrip(), "```", ""]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    lines += [f"### `rnnport {name}`", "", "```text",
                              sub.format_help().rstrip(), "```", ""]
    return "\n".join(lines)


def bench_method() -> str:
    """How ``make bench`` measures: its script's docstring."""
    text = (ROOT / "bench" / "bench.py").read_text(encoding="utf-8")
    docstring = text.split('"""', 2)[1]
    return markdown(docstring)


def explain_pictures() -> str:
    """The explain pages embedded, each with the command that draws it."""
    lines = []
    for file, cell, source, target, options in PICTURES:
        flags = " --reset-before" if options.get("reset_before") else ""
        lines += [f"### {cell.upper()}{', reset-before' if flags else ''}: "
                  f"{source} → {target}", "",
                  "```sh", f"rnnport explain {cell}{flags} --from {source} --to {target} "
                  f"--html {file}", "```", "",
                  f'<iframe src="pictures/{file}" title="rnnport explain {cell} {source} '
                  f'{target}" style="width:100%;height:720px;border:1px solid #ccc"></iframe>',
                  "", f"[Open the page on its own](pictures/{file}).", ""]
    return "\n".join(lines)


def explain_html(cell: str, source: str, target: str, options: dict[str, Any]) -> str:
    from rnnport.explain import explain

    return explain(cell, source, target, **options).html()


def extras() -> str:
    """The pip extras ``pyproject.toml`` declares, what each installs, and the formats and
    engines that need it."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: the table needs 3.11's TOML reader
        return "The extras are listed in `pyproject.toml`, `[project.optional-dependencies]`."
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lines = ["| extra | installs | for |", "|---|---|---|"]
    for extra, packages in declared["project"]["optional-dependencies"].items():
        users = [f"the [`{name}`](formats/{name}.md) format" for name in formats.formats()
                 if formats.get(name).extra == extra]
        users += [f"`forward(engine=\"{engine.name}\")`" for name in formats.formats()
                  for engine in formats.get(name).engines if engine.extra == extra]
        lines.append(f"| `{extra}` | {', '.join(f'`{p}`' for p in packages)} | "
                     f"{', '.join(dict.fromkeys(users)) or 'see above'} |")
    return "\n".join(lines)


GENERATED = {"matrix": formats.matrix_markdown, "cli": cli_reference, "extras": extras,
             "bench-method": bench_method, "explain": explain_pictures}


def fill(text: str) -> str:
    """A page's ``<!-- generated: KEY -->`` lines replaced by what they stand for."""
    return MARKER.sub(lambda match: GENERATED[match[1]]().rstrip(), text)


# -- the site's pages, in order ------------------------------------------------------------


def _nav_files(nav: Any) -> Iterator[str]:
    if isinstance(nav, str):
        yield nav
    elif isinstance(nav, list):
        for item in nav:
            yield from _nav_files(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            yield from _nav_files(value)


def _guide(name: str, docs: Path) -> str | None:
    path = docs / "formats" / f"{name}.md"
    return path.read_text(encoding="utf-8") if path.is_file() else None


def pages(docs: Path = DOCS) -> list[tuple[str, str]]:
    """(path in the site's sources, Markdown as built) for every page, in the navigation's
    order, the format pages after the formats' index."""
    config = yaml.safe_load((docs.parent / "mkdocs.yml").read_text(encoding="utf-8"))
    found = []
    for uri in _nav_files(with_formats(config["nav"])):
        if uri == "formats/index.md":
            found.append((uri, formats_index()))
        elif uri.startswith("formats/"):
            name = uri.removeprefix("formats/").removesuffix(".md")
            found.append((uri, format_page(name, _guide(name, docs))))
        else:
            found.append((uri, fill((docs / uri).read_text(encoding="utf-8"))))
    return found


def with_formats(nav: list[Any]) -> list[Any]:
    """The navigation with one entry per registered format under its ``Formats`` section."""
    out = []
    for item in nav:
        if isinstance(item, dict) and "Formats" in item:
            section = [entry for entry in item["Formats"]
                       if not (isinstance(entry, str) and entry.startswith("formats/")
                               and entry != "formats/index.md")]
            index = [i for i, entry in enumerate(section) if entry == "formats/index.md"]
            at = index[0] + 1 if index else 0
            section[at:at] = [{f"{name}": f"formats/{name}.md"} for name in formats.formats()]
            out.append({"Formats": section})
        else:
            out.append(item)
    return out


# -- MkDocs hooks ----------------------------------------------------------------------------


def on_config(config: Any) -> Any:
    """The format pages join the navigation."""
    config["nav"] = with_formats(config["nav"])
    return config


def on_files(files: Any, config: Any) -> Any:
    """Every format page (replacing a hand-written guide of the same path), the formats'
    index and the explain pictures, generated."""
    from mkdocs.structure.files import File

    docs = Path(config["docs_dir"])
    for name in formats.formats():
        uri = f"formats/{name}.md"
        existing = files.get_file_from_path(uri)
        if existing is not None:
            files.remove(existing)
        files.append(File.generated(config, uri, content=format_page(name, _guide(name, docs))))
    existing = files.get_file_from_path("formats/index.md")
    if existing is not None:
        files.remove(existing)
    files.append(File.generated(config, "formats/index.md", content=formats_index()))
    for file, cell, source, target, options in PICTURES:
        files.append(File.generated(config, f"pictures/{file}",
                                    content=explain_html(cell, source, target, options)))
    return files


def on_page_markdown(markdown_text: str, page: Any, config: Any, files: Any) -> str:
    """Generated sections filled in."""
    return fill(markdown_text)


_RENDERED_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|obj|exc):<code>(~?)([^<]+)</code>")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    """The docstrings' Sphinx roles, which mkdocstrings renders as a role and a code span
    (``:func:`~a.b```), as the code span alone (``b``; ``a.b`` without the tilde)."""
    return _RENDERED_ROLE.sub(
        lambda match: f"<code>{match[2].split('.')[-1] if match[1] else match[2]}</code>", html)


if __name__ == "__main__":  # print one page: python tools/docs_pages.py formats/onnx.md
    wanted = sys.argv[1:]
    for uri, text in pages():
        if not wanted or uri in wanted:
            print(text)
