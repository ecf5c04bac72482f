"""Functions that fit on a screen (STYLE.md item 10): no function or method in neffcache/ is
longer than 60 lines, docstring included; the CLI's, whose help texts are long, least of all.
Split a function rather than raise the bound. Reads the sources with ``ast``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "neffcache"
MAX_LINES = 60


def long_functions(source: str, where: str, limit: int = MAX_LINES) -> list[str]:
    return [f"{where}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for n in ast.walk(ast.parse(source))
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno is not None and n.end_lineno - n.lineno + 1 > limit]


def test_no_function_is_longer_than_a_screen() -> None:
    found = [f for p in sorted(PACKAGE.rglob("*.py"))
             for f in long_functions(p.read_text(encoding="utf-8"),
                                     str(p.relative_to(PACKAGE.parent)))]
    assert found == []


def test_the_check_can_fail() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(4))
    assert long_functions(f"def f():\n{body}", "x.py", limit=4) == ["x.py:1 f (5 lines)"]
    assert long_functions(f"def f():\n{body}", "x.py", limit=5) == []
