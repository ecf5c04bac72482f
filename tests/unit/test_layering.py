"""The map of ARCHITECTURE.md, enforced: every neffcache module has a layer, imports point down,
and no import cycle exists (function-level imports count too: hiding a cycle in a function is
still a cycle). Reads the sources with ``ast``; imports nothing of neffcache in this process (each
restore module is imported on its own in a fresh interpreter)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "neffcache"

# Lowest first. A module may import modules of its own rank or below, never above; the entry
# whose name is the longest prefix of a module's name gives its rank. Keep ARCHITECTURE.md's
# tree in the same order.
LAYERS: tuple[tuple[str, ...], ...] = (
    # core: pure models and small helpers (no store, no index, no network)
    ("neffcache.version", "neffcache.errors", "neffcache.build_hook", "neffcache.faces"),
    ("neffcache.request_rules",),
    ("neffcache.documents", "neffcache.hashing", "neffcache.thread_pool", "neffcache.config"),
    ("neffcache.interpreter", "neffcache.backends"),
    ("neffcache.matrix", "neffcache.matrix_io", "neffcache.fingerprint"),
    ("neffcache.parts",),
    ("neffcache.manifest",),
    # signed entries: signatures and trust (pure), then key files and the keys use cases
    ("neffcache.signing",),
    ("neffcache.key_files", "neffcache.keys"),
    # storage and records
    ("neffcache.store",),
    # what every command's use case does alike: open and check its store, consent
    ("neffcache.command_steps",),
    ("neffcache.config_show",),
    # the trust gate: the policy every command applies to a manifest (keys, pins)
    ("neffcache.trust",),
    ("neffcache.reports",),
    ("neffcache.report_spool",),
    ("neffcache.report_send",),
    ("neffcache.index",),
    # `neffcache fingerprint`'s use cases (they read the store and the index)
    ("neffcache.fingerprint_explain",),
    # restore: its steps, bottom to top
    ("neffcache.restore.fs", "neffcache.restore.plan", "neffcache.restore.state_rows"),
    ("neffcache.restore.ready",),
    ("neffcache.restore.seen",),
    ("neffcache.restore.state",),
    ("neffcache.restore.scan",),
    ("neffcache.restore.install",),
    ("neffcache.restore.fetch",),
    ("neffcache.restore.apply",),
    ("neffcache.restore.job",),
    ("neffcache.restore.resolve",),
    ("neffcache.restore.outcome",),
    ("neffcache.restore.local",),
    ("neffcache.restore.known",),
    ("neffcache.restore.run", "neffcache.restore.preview", "neffcache.restore.pruning"),
    ("neffcache.restore.session", "neffcache.restore"),
    # precompile: warm cells in workers, publish entries
    ("neffcache.precompile.hit_check",),
    ("neffcache.precompile.capture",),
    ("neffcache.precompile.worker",),
    ("neffcache.precompile.launch",),
    ("neffcache.precompile.heartbeat",),
    ("neffcache.precompile.packing",),
    ("neffcache.precompile.intents",),
    ("neffcache.precompile.publish",),
    ("neffcache.precompile.plan",),
    ("neffcache.precompile.warm",),
    ("neffcache.precompile.run", "neffcache.precompile.backfill"),
    ("neffcache.precompile.push_cell", "neffcache.precompile.backfill_cell"),
    ("neffcache.precompile.session", "neffcache.precompile"),
    # lifecycle: what happens to entries after they are published (most modules hold their
    # use case too)
    ("neffcache.lifecycle.entry_select",
     "neffcache.lifecycle.verify", "neffcache.lifecycle.verify_local",
     "neffcache.lifecycle.retire"),
    ("neffcache.lifecycle.gc", "neffcache.lifecycle.copy"),
    ("neffcache.lifecycle.repair", "neffcache.lifecycle.bundle"),
    # gc's use case, and lifecycle's face
    ("neffcache.lifecycle.gc_run", "neffcache.lifecycle"),
    # applications of the library
    ("neffcache.demo", "neffcache.server"),
    # the public Python API: every face's use cases, re-exported
    ("neffcache",),
    ("neffcache.cli._common", "neffcache.cli._select", "neffcache.cli._process"),
    ("neffcache.cli",),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(neffcache module, line) for every import in the file, at any depth. ``from P import x``
    counts as importing ``P.x`` where that is a module, else ``P``."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join(here + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in known:
                    yield sub, node.lineno
                elif base in known:
                    yield base, node.lineno


def graph() -> dict[str, dict[str, int]]:
    mods = modules()
    known = set(mods)
    edges: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        edges[name] = {}
        for target, line in imported(name, path, known):
            if target != name:
                edges[name].setdefault(target, line)
    return edges


def rank_of(name: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, rank)
    for rank, prefixes in enumerate(layers):
        for p in prefixes:
            inside = name.startswith(p + ".") and p != "neffcache"  # the root: itself only
            if (name == p or inside) and (best is None or len(p) > best[0]):
                best = (len(p), rank)
    return None if best is None else best[1]


def upward_imports(edges: dict[str, dict[str, int]]) -> list[str]:
    out = []
    for src, targets in sorted(edges.items()):
        for dst, line in sorted(targets.items()):
            rs, rd = rank_of(src), rank_of(dst)
            if rs is not None and rd is not None and rd > rs:
                out.append(f"{src}:{line} imports {dst} (a higher layer)")
    return out


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_module_has_a_layer() -> None:
    assert [m for m in modules() if rank_of(m) is None] == []


def test_imports_point_down() -> None:
    assert upward_imports(graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_each_restore_module_imports_on_its_own() -> None:
    """``python -c "import neffcache.restore.state"`` and the like, each in a fresh interpreter
    (a cycle the graph misses, e.g. through a face's lazy names, fails only in some orders)."""
    names = sorted(m for m in modules() if m.startswith("neffcache.restore."))
    assert "neffcache.restore.state" in names
    failed = []
    for name in names:
        run = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                             text=True, cwd=PACKAGE.parent, check=False)
        if run.returncode:
            failed.append(f"{name}: {run.stderr.strip().splitlines()[-1:]}")
    assert failed == []


def test_the_checks_can_fail() -> None:
    """The rules catch what they are for, on a made-up graph."""
    edges = {"neffcache.restore.fs": {"neffcache.restore.run": 3},
             "neffcache.restore.run": {"neffcache.restore.fs": 1},
             "neffcache.manifest": {"neffcache.cli": 9}}
    assert cycles(edges) == [["neffcache.restore.fs", "neffcache.restore.run"]]
    assert upward_imports(edges) == [
        "neffcache.manifest:9 imports neffcache.cli (a higher layer)",
        "neffcache.restore.fs:3 imports neffcache.restore.run (a higher layer)"]
    assert rank_of("neffcache.restore_apply") is None  # an unmapped module fails the first test


# Packages another line of work grows often: the map names the package, not every file.
SUMMARISED = ("index", "server")


def mapped_paths(text: str) -> set[str]:
    """Paths in the first code block of ARCHITECTURE.md, a tree indented two spaces a level:
    ``name/`` opens a directory, ``name.py`` is a file; the rest of a line is its job."""
    block = text.split("```", 2)[1]
    paths: set[str] = set()
    stack: list[str] = []
    for line in block.splitlines()[1:]:
        if not line.strip():
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 2
        name = line.split()[0]
        del stack[depth:]
        if name.endswith("/"):
            stack.append(name.rstrip("/"))
            paths.add("/".join(stack))
        elif name.endswith(".py"):
            paths.add("/".join([*stack, name]))
    return paths


def test_architecture_md_maps_the_tree() -> None:
    text = (PACKAGE.parent / "ARCHITECTURE.md").read_text(encoding="utf-8")
    mapped = mapped_paths(text)
    files = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
             if "migrations" not in p.parts}
    wanted = {f for f in files if f.split("/")[1] not in SUMMARISED}
    wanted |= {f"neffcache/{d}" for d in SUMMARISED}
    assert sorted(wanted - mapped) == []  # in the tree, not on the map
    assert sorted(p for p in mapped - files if not p.endswith(SUMMARISED)
                  and (PACKAGE.parent / p).suffix == ".py") == []  # on the map, not in the tree


# Packages with a face: outside package P, code imports only ``neffcache.P`` (its
# ``__init__``), or a submodule the face names in its ``__all__``.
def package_of(name: str) -> str | None:
    """``neffcache.P`` for a module inside subpackage P (P itself included), else None."""
    parts = name.split(".")
    if len(parts) < 2:
        return None
    pkg = ".".join(parts[:2])
    return pkg if (PACKAGE.parent / pkg.replace(".", "/") / "__init__.py").exists() else None


def face_exports(pkg: str) -> set[str]:
    """The names in ``pkg``'s ``__all__`` (read with ast)."""
    path = PACKAGE.parent / pkg.replace(".", "/") / "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return {e.value for e in ast.walk(node.value) if isinstance(e, ast.Constant)}
    return set()


def behind_faces(edges: dict[str, dict[str, int]]) -> list[str]:
    out = []
    for src, targets in sorted(edges.items()):
        for dst, line in sorted(targets.items()):
            pkg = package_of(dst)
            if pkg is None or dst == pkg or package_of(src) == pkg:
                continue
            if dst.split(".")[2] in face_exports(pkg) and dst.count(".") == 2:
                continue
            out.append(f"{src}:{line} imports {dst} (import {pkg} instead)")
    return out


def test_other_packages_are_reached_through_their_faces() -> None:
    assert behind_faces(graph()) == []


def test_the_face_rule_can_fail() -> None:
    edges = {"neffcache.cli.restore": {"neffcache.restore.run": 4, "neffcache.restore": 5},
             "neffcache.restore.run": {"neffcache.restore.fs": 2}}
    assert behind_faces(edges) == [
        "neffcache.cli.restore:4 imports neffcache.restore.run (import neffcache.restore "
        "instead)"]
