"""Sizes (STYLE.md item 10, issue #36): no function or method in neffcache/ is longer than 60
lines, docstring included; none outside a click command takes more than 8 parameters. Split
a function, or pass a request whole, rather than raise a bound. Reads the sources with
``ast``."""

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


# Issue #36: parameters are passed whole (a request or one derived context), not relayed.
MAX_PARAMS = 8


def _is_click_command(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Call) and ast.unparse(d.func).split(".")[-1]
               in {"command", "option", "argument", "pass_context"} for d in node.decorator_list)


def long_signatures(source: str, where: str, limit: int = MAX_PARAMS) -> list[str]:
    found = []
    for n in ast.walk(ast.parse(source)):
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) or _is_click_command(n):
            continue
        names = [a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs]
        count = len(names) - (names[:1] in (["self"], ["cls"]))
        if count > limit:
            found.append(f"{where}:{n.lineno} {n.name} ({count} parameters)")
    return found


def test_no_function_outside_click_takes_more_than_eight_parameters() -> None:
    found = [f for p in sorted(PACKAGE.rglob("*.py"))
             for f in long_signatures(p.read_text(encoding="utf-8"),
                                      str(p.relative_to(PACKAGE.parent)))]
    assert found == []


def test_the_parameter_check_can_fail() -> None:
    args = ", ".join(f"a{i}" for i in range(9))
    assert long_signatures(f"def f({args}): pass", "x.py") == ["x.py:1 f (9 parameters)"]
    assert long_signatures(f"class C:\n    def f(self, {args[4:]}): pass", "x.py") == []
    clicked = f"@click.command()\n@click.option('--a0')\ndef f({args}): pass"
    assert long_signatures(clicked, "x.py") == []

