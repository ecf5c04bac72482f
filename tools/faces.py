#!/usr/bin/env python3
"""Write each lazy face's imports for type checkers from its table.

A face (a package ``__init__.py`` with a ``_FACE`` table, see ``neffcache/faces.py``) declares
each name it exports once, in that table; its ``if TYPE_CHECKING:`` block (the imports mypy and
editors read) is generated from it here, sorted as ruff's isort sorts.

    python tools/faces.py            rewrite every face's block
    python tools/faces.py --check    exit 1 (naming the faces) when a block has drifted

Reads the sources with ``ast``; imports nothing of neffcache.
"""

from __future__ import annotations

import ast
import sys
import textwrap
from pathlib import Path

from neffcache.faces import module_name

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "neffcache"
TABLE = "_FACE"
HEADER = ("if TYPE_CHECKING:  # written by tools/faces.py from _FACE: edit the table, not this\n"
          "    # ruff: noqa: F401 - re-exported: the face's __all__ is derived from _FACE\n"
          "    # isort: off\n")
FOOTER = "    # isort: on\n"
WIDTH = 100


def faces(package: Path = PACKAGE) -> list[Path]:
    """Every ``__init__.py`` under ``package`` that assigns a ``_FACE`` table."""
    return sorted(p for p in package.rglob("__init__.py") if table_node(_parse(p)) is not None)


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def table_node(tree: ast.Module) -> ast.expr | None:
    """The value assigned to ``_FACE`` at the top level, if any."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == TABLE for t in node.targets):
            return node.value
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == TABLE:
            return node.value
    return None


def _member_key(name: str) -> tuple[int, str, str]:
    """Constants, then classes, then the rest; case-insensitive (as ruff's isort orders)."""
    kind = 0 if name.isupper() and len(name) > 1 else 1 if name[:1].isupper() else 2
    return kind, name.lower(), name


def _statement(module: str, names: list[str]) -> str:
    """One import, its names wrapped at WIDTH (generated, so packed rather than one a line)."""
    one = f"    from {module} import {', '.join(names)}"
    if len(one) <= WIDTH:
        return one + "\n"
    text = f"    from {module} import ({', '.join(names)})"
    return "\n".join(textwrap.wrap(text, WIDTH, subsequent_indent=" " * 8,
                                   break_on_hyphens=False, break_long_words=False)) + "\n"


def block(package: str, table: dict[str, tuple[str, ...]]) -> str:
    """The ``if TYPE_CHECKING:`` block of the face of ``package`` with this table."""
    lines = [HEADER]
    for module in sorted(table, key=lambda m: module_name(package, m).lower()):
        full = module_name(package, module)
        plain = sorted((n for n in table[module] if " as " not in n), key=_member_key)
        if plain:
            lines.append(_statement(full, plain))
        for aliased in sorted((n for n in table[module] if " as " in n), key=_member_key):
            lines.append(_statement(full, [aliased]))
    return "".join(lines) + FOOTER


def expected(path: Path, root: Path = ROOT) -> str:
    """The face's source with its TYPE_CHECKING block as the table says (``root``: the
    folder holding the package)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    value = table_node(tree)
    assert value is not None
    table = ast.literal_eval(value)
    package = ".".join(path.relative_to(root).parent.parts)
    guard = next((n for n in tree.body if isinstance(n, ast.If)
                  and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"), None)
    if guard is None:
        raise SystemExit(f"{path}: no `if TYPE_CHECKING:` block to write")
    lines = text.splitlines(keepends=True)
    start, end = guard.lineno - 1, guard.end_lineno or guard.lineno
    while end < len(lines) and lines[end] == FOOTER:  # a comment: not in the node
        end += 1
    return "".join(lines[:start]) + block(package, table) + "".join(lines[end:])


def drifted(package: Path = PACKAGE) -> list[Path]:
    """The faces under ``package`` whose TYPE_CHECKING block is not what their table says."""
    return [p for p in faces(package)
            if p.read_text(encoding="utf-8") != expected(p, package.parent)]


def main(argv: list[str]) -> int:
    stale = drifted()
    for path in stale:
        if "--check" in argv:
            print(f"{path.relative_to(ROOT)}: its TYPE_CHECKING imports drifted from its "
                  f"_FACE table (run python tools/faces.py)", file=sys.stderr)
        else:
            path.write_text(expected(path), encoding="utf-8")
            print(f"{path.relative_to(ROOT)}: TYPE_CHECKING imports rewritten", file=sys.stderr)
    return 1 if "--check" in argv and stale else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
