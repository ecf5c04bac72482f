"""Proof that a hit is a hit: did a warm-up compile anything? Pure; no I/O, no torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# "group.name" counters that count real compilation work. Hit counters alone are not trusted:
# inductor can report FX-graph hits while kernels rebuild.
WORK_COUNTERS = ("inductor.fxgraph_cache_miss", "inductor.fxgraph_cache_bypass",
                 "aot_autograd.autograd_cache_miss", "aot_autograd.autograd_cache_bypass")
# Counters shown for information (hits), never taken as proof of anything.
HIT_COUNTERS = ("inductor.fxgraph_cache_hit", "aot_autograd.autograd_cache_hit",
                "stats.unique_graphs")
# C++ builds whose output name ends like this are real compiles; ".i" is preprocessing.
CPP_COMPILE_SUFFIXES = (".so", ".o", ".gch", ".pch", ".obj", ".dll")


@dataclass(frozen=True, slots=True)
class FileState:
    """What is known about one capturable file: where it is and enough to notice a rewrite."""

    root: str
    path: str
    size: int
    mtime_ns: int

    @property
    def id(self) -> str:
        return f"{self.root}/{self.path}"


@dataclass(frozen=True, slots=True)
class FileDiff:
    new: tuple[str, ...]
    changed: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CompileActivity:
    """What a warm-up did: counters ("group.name" -> value) and C++ compiler outputs."""

    counters: Mapping[str, int] = field(default_factory=dict)
    cpp_outputs: tuple[str, ...] = ()
    cpp_probe: bool = False  # False when the C++ builder could not be instrumented

    @property
    def cpp_compiles(self) -> tuple[str, ...]:
        return tuple(p for p in self.cpp_outputs if p.endswith(CPP_COMPILE_SUFFIXES))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CompileActivity:
        counters = {f"{g}.{k}": int(v) for g, vals in dict(data.get("counters") or {}).items()
                    for k, v in dict(vals).items()}
        return cls(counters, tuple(str(p) for p in data.get("cpp_outputs") or ()),
                   bool(data.get("cpp_probe", False)))


@dataclass(frozen=True, slots=True)
class Verdict:
    """``compiled`` is True if any evidence of compilation was found; ``reasons`` says which."""

    compiled: bool
    reasons: tuple[str, ...]
    new_files: int
    changed_files: int
    work: tuple[tuple[str, int], ...] = field(default=())
    hits: tuple[tuple[str, int], ...] = field(default=())
    cpp_compiles: int = 0

    def summary(self) -> str:
        """One short line for a table; ``reasons`` has the details (with example files)."""
        if not self.compiled:
            hit = dict(self.hits).get("inductor.fxgraph_cache_hit", 0)
            return (f"no (0 new files, 0 cache misses, 0 C++ compiles"
                    f"{f'; {hit} FX-graph hit(s)' if hit else ''})")
        parts = [f"{self.new_files} new files"] if self.new_files else []
        parts += [f"{self.changed_files} rewritten"] if self.changed_files else []
        parts += [f"{name.split('.')[-1]}={value}" for name, value in self.work if value]
        parts += [f"{self.cpp_compiles} C++ compiles"] if self.cpp_compiles else []
        return f"YES ({', '.join(parts)})"

    def to_json(self) -> dict[str, Any]:
        return {"compiled": self.compiled, "reasons": list(self.reasons),
                "new_files": self.new_files, "changed_files": self.changed_files,
                "work_counters": dict(self.work), "hit_counters": dict(self.hits),
                "cpp_compiles": self.cpp_compiles}


def diff_files(before: Iterable[FileState], after: Iterable[FileState]) -> FileDiff:
    """Files that appeared, changed (size or mtime) or disappeared between two scans."""
    old = {f.id: f for f in before}
    new = {f.id: f for f in after}
    return FileDiff(
        new=tuple(sorted(set(new) - set(old))),
        changed=tuple(sorted(i for i in set(new) & set(old)
                             if (new[i].size, new[i].mtime_ns) != (old[i].size, old[i].mtime_ns))),
        removed=tuple(sorted(set(old) - set(new))),
    )


def judge_activity(files: FileDiff, activity: CompileActivity, *, shown: int = 3) -> Verdict:
    """Compiled if any capturable file is new or rewritten, any work counter moved, or the
    C++ compiler produced anything. Pure."""
    work = tuple((name, activity.counters.get(name, 0)) for name in WORK_COUNTERS)
    hits = tuple((name, activity.counters.get(name, 0)) for name in HIT_COUNTERS)
    cpp = activity.cpp_compiles

    def evidence(paths: tuple[str, ...], what: str) -> list[str]:
        return [f"{len(paths)} {what}, e.g. {', '.join(paths[:shown])}"] if paths else []

    reasons = (evidence(files.new, "new file(s) in the cache roots")
               + evidence(files.changed, "cached file(s) rewritten")
               + [f"{name} = {value}" for name, value in work if value]
               + evidence(cpp, "C++ compile(s)"))
    return Verdict(compiled=bool(reasons), reasons=tuple(reasons), new_files=len(files.new),
                   changed_files=len(files.changed), work=work, hits=hits,
                   cpp_compiles=len(cpp))
