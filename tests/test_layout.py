"""The layout's rules, checked on the code itself: imports point one way between the packages,
nothing below the CLI imports it (or rich, or click), importing the library leaves the process's
environment alone, and functions stay short enough to read top to bottom."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "mtcli"
BASE = {"config", "errors", "device", "files", "settings"}  # the top-level modules
# what each part of mtcli may import (itself always), as the packages' docstrings say
MAY_IMPORT = {
    "errors": set(),
    "device": {"errors"},
    "files": {"errors"},
    "config": {"device"},
    "settings": {"config", "errors"},
    "data": BASE,
    "text": {"data"} | BASE,
    "model": {"config"},
    "decoding": {"model", "config"},
    "store": {"model", "data"} | BASE,
    "engines": {"text", "decoding", "model", "store", "data"} | BASE,
    "training": {"engines", "text", "decoding", "model", "store", "data"} | BASE,
    "documents": {"text", "data"}
    | BASE,  # files of strings: above the text layer, below cli/serving
    "serving": {"engines", "text", "store", "data", "documents", "explain"} | BASE,
    "explain": {"engines", "decoding", "model", "store", "data"} | BASE,
}
CLI_ONLY = {"rich", "click"}  # the terminal's: the library reports through callbacks
LONGEST_FUNCTION = 60  # lines, signature and docstring included
LONGEST_COMMAND = 25  # lines of a command's body, its docstring excluded


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py"))


def _part(path: Path) -> str:
    """The package (or top-level module) a file belongs to: mtcli/data/batches.py -> data."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at the top or inside a function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            if node.module == "mtcli":  # from mtcli import files
                found |= {f"mtcli.{alias.name}" for alias in node.names}
    return found


def _parts_imported(path: Path) -> set[str]:
    return {
        name.split(".")[1]
        for name in _imports(path)
        if name.startswith("mtcli.") and name.split(".")[1] != "__version__"
    }


def test_the_rules_cover_every_part():
    """Every package and top-level module has a row (a new one must say what it may import)."""
    parts = {_part(p) for p in _modules()} - {"__init__", "__main__", "cli"}
    assert parts == set(MAY_IMPORT), parts ^ set(MAY_IMPORT)


def _wrong_imports(path: Path) -> list[str]:
    """What a module imports that its part may not (cli and the entry points: anything)."""
    part = _part(path)
    if part in ("cli", "__init__", "__main__"):
        return []
    wrong = _parts_imported(path) - MAY_IMPORT[part] - {part}
    wrong |= {name.split(".")[0] for name in _imports(path)} & CLI_ONLY
    return [f"{path.relative_to(REPO)} ({part}) imports {sorted(wrong)}"] if wrong else []


def test_imports_point_one_way():
    """Each module imports only the parts below its own, and nothing below cli/ imports rich
    or click."""
    wrong = [line for path in _modules() for line in _wrong_imports(path)]
    assert not wrong, wrong


def test_the_rule_catches_an_upward_import(tmp_path, monkeypatch):
    """The control: the same reading flags a model module that imports the engines or rich."""
    source = (PACKAGE / "model" / "transformer.py").read_text(encoding="utf-8")
    copy = tmp_path / "mtcli" / "model" / "transformer.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(source + "\nfrom mtcli.engines.build import build_translator\nimport rich\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "mtcli")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _wrong_imports(copy) == [
        "mtcli/model/transformer.py (model) imports ['engines', 'rich']"
    ]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(paths: list[Path]) -> dict[str, set[str]]:
    """Module -> the mtcli modules it imports, at the top or inside a function (a lazy import
    hides a cycle from Python, not from a reader)."""
    names = {_module_name(p): p for p in paths}
    graph = {}
    for name, path in names.items():
        graph[name] = set()
        for imported in _imports(path):
            while imported and imported not in names:  # from mtcli.x import f -> mtcli.x
                imported = imported.rpartition(".")[0]
            if imported and imported != name and not name.startswith(imported + "."):
                graph[name].add(imported)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of imports (its modules in order, the first repeated last), or []."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return path[path.index(name) :] + [name]
        if name in done:
            return []
        for imported in sorted(graph[name]):
            if found := visit(imported, path + [name]):
                return found
        done.add(name)
        return []

    return next((c for name in sorted(graph) if (c := visit(name, []))), [])


def test_no_module_imports_itself_round_a_cycle():
    """No chain of imports leads back to where it started, lazy ones counted (the builder and
    the confidence estimator once imported each other inside functions)."""
    assert _cycle(_module_graph(_modules())) == []
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def test_the_search_and_the_translator_know_nothing_of_text():
    """decoding/ and engines/translator.py take token ids and phrases of ids: spans, casing,
    spacing and sentences are the text layer's (it plans, they search, it renders)."""
    searching = sorted((PACKAGE / "decoding").glob("*.py")) + [
        PACKAGE / "engines" / "translator.py"
    ]
    reading_text = [
        str(path.relative_to(REPO))
        for path in searching
        if any(name.startswith("mtcli.text") for name in _imports(path))
    ]
    assert reading_text == []


def _fresh(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def fresh_imports() -> list[str]:
    """One fresh process (torch's import is most of it): first the library below cli/, then
    every module, each step printing what the tests below check."""
    code = (
        "import os, sys, pkgutil, importlib; before = dict(os.environ)\n"
        "import mtcli.training.loop, mtcli.engines.build, mtcli.serving.app\n"
        "print(sorted(m for m in ('rich', 'click') if m in sys.modules))\n"
        "import mtcli\n"
        "for m in pkgutil.walk_packages(mtcli.__path__, 'mtcli.'):\n"
        "    if m.name not in ('mtcli.__main__',): importlib.import_module(m.name)\n"
        "after = dict(os.environ)\n"
        "print(sorted(set(before.items()) ^ set(after.items())))"
    )
    return _fresh(code).splitlines()


def test_the_training_loop_imports_no_terminal_library(fresh_imports):
    """`import mtcli.training.loop` (and the validation and server code) loads neither rich nor
    click: progress reaches the terminal through a callback the CLI supplies."""
    assert fresh_imports[0] == "[]"


def test_importing_mtcli_sets_no_environment_variable(fresh_imports):
    """Every module of the library imported in one process: os.environ is as it was (the
    oneDNN cache limits are set by the commands, through device.limit_kernel_caches)."""
    assert fresh_imports[1] == "[]"


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def test_no_function_is_longer_than_it_can_be_read():
    long = [
        f"{path.relative_to(REPO)}:{fn.lineno} {fn.name} ({fn.end_lineno - fn.lineno + 1} lines)"
        for path in _modules()
        for fn in _functions(path)
        if fn.end_lineno - fn.lineno + 1 > LONGEST_FUNCTION
    ]
    assert not long, long


def test_commands_only_parse_and_call():
    """Each click command's body (after its docstring) is short: the work lives below the CLI."""
    long = []
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        for fn in _functions(path):
            decorated = any("command" in ast.unparse(d) for d in fn.decorator_list)
            body = fn.body[1:] if ast.get_docstring(fn) else fn.body
            if decorated and body and body[-1].end_lineno - body[0].lineno + 1 > LONGEST_COMMAND:
                long.append(f"{path.name}:{fn.name}")
    assert not long, long


def test_every_package_is_in_the_wheel():
    """pyproject names its packages one by one (models/ is mapped in): a folder left off the
    list is missing from the wheel, and an installed mtcli fails on its first import of it."""
    import tomllib

    listed = set(
        tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    on_disk = {
        ".".join(init.parent.relative_to(REPO).parts) for init in PACKAGE.rglob("__init__.py")
    }
    assert on_disk - listed == set()
