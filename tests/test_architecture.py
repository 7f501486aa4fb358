"""The rules of the code's shape: a format is named only under ``formats/``, the import
graph has no cycle (lazy imports included), and the lower layers never import upward."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import rnnport

PACKAGE = Path(rnnport.__file__).resolve().parent
# The one word outside formats/ that is a format's name by coincidence: NumPy's archive
# suffix, which rnnport's own container format is named after.
NOT_A_FORMAT = {("io/atomic.py", '".npz"')}
# Layers that sit under the model and the formats: they import only among themselves.
LOWER = ("rnnport.errors", "rnnport.budget", "rnnport.copying", "rnnport.activations",
         "rnnport.gates", "rnnport.spec", "rnnport.runtime", "rnnport.helper", "rnnport.io")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every rnnport module ``name`` imports, wherever the import statement stands."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from package import module`` imports the module; a name, the package.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for successor in GRAPH[node]:
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in GRAPH:
        if node not in index:
            visit(node)
    return out


def test_the_import_graph_has_no_cycles() -> None:
    assert _cycles() == []


def test_the_cycle_finder_finds_a_planted_cycle() -> None:
    GRAPH["rnnport.errors"].add("rnnport.spec")
    try:
        assert ["rnnport.errors", "rnnport.spec"] in _cycles()
    finally:
        GRAPH["rnnport.errors"].discard("rnnport.spec")


def test_lower_layers_never_import_upward() -> None:
    def lower(module: str) -> bool:
        return any(module == layer or module.startswith(f"{layer}.") for layer in LOWER)

    upward = {name: sorted(target for target in targets if not lower(target))
              for name, targets in GRAPH.items() if lower(name)}
    assert {name: targets for name, targets in upward.items() if targets} == {}


def _docstring_lines(tree: ast.Module) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.body and isinstance(node.body[0], ast.Expr) \
                and isinstance(node.body[0].value, ast.Constant) \
                and isinstance(node.body[0].value.value, str):
            lines.add(node.body[0].lineno)
    return lines


# f-strings' text is its own token from Python 3.12 on.
TEXT_TOKENS = {tokenize.NAME, tokenize.STRING, tokenize.COMMENT,
               *filter(None, [getattr(tokenize, "FSTRING_MIDDLE", None)])}


def _namings(text: str) -> list[tuple[int, str]]:
    """Names, strings (docstrings aside) and comments of ``text`` that hold a registered
    format's name as a word (``keras``, ``tf1_cells``, ``"cudnn"``; not ``onnxruntime``)."""
    word = re.compile(r"(?<![A-Za-z0-9])(?:" + "|".join(map(re.escape, rnnport.formats()))
                      + r")(?![A-Za-z0-9])", re.IGNORECASE)
    docstrings = _docstring_lines(ast.parse(text))
    found = []
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.STRING and token.start[0] in docstrings:
            continue  # documentation may give examples
        if token.type in TEXT_TOKENS and word.search(token.string):
            found.append((token.start[0], token.string))
    return found


def test_nothing_outside_formats_names_a_format() -> None:
    named = {f"{path.relative_to(PACKAGE)}:{line}": text
             for name, path in MODULES.items()
             if not name.startswith("rnnport.formats")
             for line, text in _namings(path.read_text())
             if (str(path.relative_to(PACKAGE)), text) not in NOT_A_FORMAT}
    assert named == {}


def test_the_naming_check_sees_names_strings_and_comments() -> None:
    code = ('"""A docstring may say keras."""\nimport torch\nx = {"tf1": 1}  # a cudnn buffer\n'
            'keras_weights = 1\nonnxruntime = "pytorch"\ny = f"{x} from Keras"\n')
    assert [line for line, _ in _namings(code)] == [2, 3, 3, 4, 6]
