"""No ``Any`` where a project type belongs: a parameter or a field named after one of
neffcache's own types (index, store, cell, backend, fingerprint, manifest, matrix, ...) is
annotated with that type, not ``Any``. mypy (run by .ci/run over neffcache/) checks the
rest; this catches the escape hatch it cannot see. Reads the sources with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "neffcache"

# Names that, in this code base, always hold a project type.
PROJECT_NAMES = frozenset({
    "index", "idx", "ix", "store", "source", "cell", "cells", "backend", "fingerprint",
    "manifest", "manifests", "matrix", "settings", "result", "report", "plan", "run",
    "lease", "request", "preview", "outcome",
})


def is_any(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a string annotation
        node = ast.parse(node.value, mode="eval").body
    return (isinstance(node, ast.Name) and node.id == "Any") or (
        isinstance(node, ast.Attribute) and node.attr == "Any")


def any_for_project_types(source: str, where: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            out += [f"{where}:{a.lineno} {node.name}({a.arg}: Any)" for a in args
                    if a.arg in PROJECT_NAMES and is_any(a.annotation)]
        elif isinstance(node, ast.AnnAssign):
            target = node.target
            name = target.id if isinstance(target, ast.Name) else (
                target.attr if isinstance(target, ast.Attribute) else "")
            if name in PROJECT_NAMES and is_any(node.annotation):
                out.append(f"{where}:{node.lineno} {name}: Any")
    return out


def test_no_any_for_project_types() -> None:
    found = [f for p in sorted(PACKAGE.rglob("*.py"))
             for f in any_for_project_types(p.read_text(encoding="utf-8"),
                                            str(p.relative_to(PACKAGE.parent)))]
    assert found == []


def test_the_check_can_fail() -> None:
    src = ("from typing import Any\n"
           "def f(index: Any, n: Any, *, store: 'Any') -> None: ...\n"
           "class C:\n    cells: Any\n    other: Any\n")
    assert any_for_project_types(src, "x.py") == [
        "x.py:2 f(index: Any)", "x.py:2 f(store: Any)", "x.py:4 cells: Any"]
