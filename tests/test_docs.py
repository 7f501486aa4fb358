"""The documentation site builds, and its code runs as written.

The site (``mkdocs.yml``, ``docs/``, the pages ``tools/docs_pages.py`` generates from the
code) builds with MkDocs in strict mode: a broken link, a missing page or a reference
mkdocstrings cannot resolve fails it. Then the ``python`` blocks of every page, in the
navigation's order (generated pages included), run in one namespace, and the commands of
their ``sh`` blocks run where they stand in the text, in one temporary folder that holds a
copy of ``examples/`` (the pages speak from the root of a clone), a link to ``tests/``
(whose golden files they read) and a link to this environment as ``.venv``. Lines that set
up an environment (``make``, ``pip install``, activating ``.venv``) are what this test
environment already did, and are the only lines not run. The README's code runs the same
way, on its own, in a folder of its own.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
SET_UP = ("make ", "pip ", ". .venv/bin/activate")


def docs_pages() -> ModuleType:
    """``tools/docs_pages.py``, the generator of the site's pages."""
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "tools" / "docs_pages.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_site(site: Path) -> None:
    """Build the site into ``site``, strictly: any warning fails the build."""
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), site_dir=str(site), strict=True)
    config.plugins.on_startup(command="build", dirty=False)
    try:
        build(config)
    finally:
        config.plugins.on_shutdown()


def blocks(text: str) -> list[tuple[int, str, str]]:
    """(line, language, code) of each fenced block."""
    return [(text.count("\n", 0, match.start()) + 2, match[1], match[2])
            for match in BLOCK.finditer(text)]


def commands(code: str) -> list[str]:
    """The shell commands of an ``sh`` block: continuation lines joined, comments and the
    set-up lines left out."""
    joined = re.sub(r"\\\n\s*", "", code)
    found = []
    for line in joined.splitlines():
        command = re.split(r"\s+#", line, maxsplit=1)[0].strip()
        if command and not command.startswith("#") and not command.startswith(SET_UP):
            found.append(command)
    return found


def run_blocks(pages: list[tuple[str, str]], folder: Path) -> int:
    """Run the ``python`` and ``sh`` blocks of ``pages`` ((name, Markdown) in order) in
    ``folder``, in one namespace; the count of blocks and commands run."""
    environment = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                   f"{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    namespace: dict[str, object] = {"__name__": "__docs__"}
    ran = 0
    for page, text in pages:
        for line, lang, code in blocks(text):
            if lang == "python":
                try:
                    exec(compile(code, f"{page}, block at line {line}", "exec"), namespace)
                except Exception as error:  # the page's own words fail: say which block
                    pytest.fail(f"{page}, python block at line {line}: "
                                f"{type(error).__name__}: {error}")
                ran += 1
            elif lang == "sh":
                for command in commands(code):
                    result = subprocess.run(["bash", "-c", command], cwd=folder,
                                            env=environment, capture_output=True, text=True,
                                            timeout=600, check=False)
                    assert result.returncode == 0, (
                        f"{page}, sh block at line {line}: `{command}` exited "
                        f"{result.returncode}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
                    ran += 1
    return ran


def prepare(folder: Path) -> None:
    """What the pages expect around them: the examples, the golden files, ``.venv``."""
    shutil.copytree(ROOT / "examples", folder / "examples")
    (folder / "tests").symlink_to(ROOT / "tests")  # golden files the pages read, never write
    (folder / ".venv").symlink_to(Path(sys.prefix))


def test_the_block_reader_finds_code_and_leaves_out_set_up_only() -> None:
    text = "x\n```python\na = 1\n```\n```sh\nmake demo  # set up\nrnnport formats \\\n" \
           "    --matrix   # a comment\n```\n"
    assert [(line, lang) for line, lang, _ in blocks(text)] == [(3, "python"), (6, "sh")]
    assert commands(blocks(text)[1][2]) == ["rnnport formats --matrix"]


def test_the_site_builds_strictly_with_every_generated_page(tmp_path: Path) -> None:
    import rnnport

    build_site(tmp_path / "site")
    site = tmp_path / "site"
    for name in rnnport.formats():
        page = (site / "formats" / f"{name}.html").read_text(encoding="utf-8")
        assert "features refused" in page and "Layout" in page and "Example" in page
    assert "rnnport convert" in (site / "cli.html").read_text(encoding="utf-8")
    matrix = (site / "matrix.html").read_text(encoding="utf-8")
    assert "from ↓ to →" in matrix and "Σ −P" in matrix
    assert "Security: what rnnport promises" in (site / "security.html").read_text(encoding="utf-8")
    assert "def read" not in (site / "api.html").read_text(encoding="utf-8")  # no source shown
    for picture in ("lstm-keras-torch.html", "gru-keras-cudnn.html"):
        assert "rnnport explain" in (site / "pictures" / picture).read_text(encoding="utf-8")


def test_every_literal_of_a_format_page_becomes_one_code_span() -> None:
    """A literal running on to the next line of a docstring is still one code span: the
    generated Markdown keeps no reStructuredText double backticks."""
    import rnnport

    pages = docs_pages()
    assert pages.markdown("a ``literal that\nbreaks`` a line") == "a `literal that breaks` a line\n"
    for name in rnnport.formats():
        prose = re.sub(r"^```.*?^```", "", pages.format_page(name), flags=re.S | re.M)
        assert "``" not in prose, name


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[nowhere](missing.md)\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: x\nstrict: true\n")
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    with pytest.raises(Abort, match="warning"):
        build(load_config(str(tmp_path / "mkdocs.yml"), site_dir=str(tmp_path / "site")))


def test_the_matrix_page_shows_the_generated_matrix() -> None:
    from rnnport.formats import matrix_markdown

    pages = dict(docs_pages().pages())
    assert matrix_markdown() in pages["matrix.md"]


def test_the_readme_is_short_and_links_into_the_docs() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 80
    for target in re.findall(r"\]\((docs/[^)#]+)", text):
        assert (ROOT / target).exists(), target


@pytest.mark.slow
def test_the_docs_code_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = docs_pages().pages()
    assert sum(lang == "python" for _, text in pages for _, lang, _ in blocks(text)) >= 35
    prepare(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert run_blocks(pages, tmp_path) >= 60


@pytest.mark.slow
def test_the_readme_code_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README stands alone: its code runs in a folder of its own."""
    readme = [("README.md", (ROOT / "README.md").read_text(encoding="utf-8"))]
    prepare(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert run_blocks(readme, tmp_path) >= 5
