"""Back-fill: publish the files an instance compiled at run time as the entry of a cell.

A file in the cache roots is *runtime-compiled* when no entry of this fingerprint for the
matrix lists it. Those files become the entry of ONE cell without an entry (``--cell``, or the
only such cell), so restore needs no change; they are meant to be restored together with the
entries they were compiled on top of. ``plan_backfill`` is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import Backend
from neffcache.errors import UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import FileRecord, Manifest, entry_key
from neffcache.matrix import Cell
from neffcache.precompile.hit_check import FileState
from neffcache.precompile.plan import read_entry
from neffcache.precompile.publish import PublishOptions, PublishResult, hash_files, publish_entry
from neffcache.store import Store

PUBLISH, EXISTS, NOTHING = "publish", "exists", "nothing"


@dataclass(frozen=True, slots=True)
class BackfillPlan:
    """What a capture will do: which files are runtime-compiled and which cell gets them."""

    action: str  # publish | exists (the cell has an entry already) | nothing (no new files)
    cell: Cell | None
    entry_key: str | None
    new_files: tuple[FileState, ...]
    restored_files: int  # files in the roots that restored entries account for
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"action": self.action, "cell_id": self.cell.id if self.cell else None,
                "entry_key": self.entry_key, "new_files": len(self.new_files),
                "new_bytes": sum(f.size for f in self.new_files),
                "restored_files": self.restored_files, "reason": self.reason}


def plan_backfill(present: Sequence[FileState], cells: Sequence[Cell], fingerprint: Fingerprint,
                  entries: Mapping[str, Manifest], cell_id: str | None = None) -> BackfillPlan:
    """Decide what to publish. ``present``: capturable files in the roots; ``entries``: cell
    id -> this fingerprint's manifest, for the cells that have one; ``cell_id``: --cell. Pure."""
    known = {(f.root, f.path) for m in entries.values() for f in m.files}
    new = tuple(f for f in present if (f.root, f.path) not in known)
    restored = len(present) - len(new)
    cell = _attribute(cells, entries, cell_id, bool(new))
    if not new:
        return BackfillPlan(NOTHING, cell, None, (), restored,
                            "no runtime-compiled files: every file came from a restored entry")
    assert cell is not None
    key = entry_key(cell, fingerprint)
    if cell.id in entries:
        return BackfillPlan(EXISTS, cell, key, new, restored,
                            f"{cell.id} already has entry {key[:12]} (entries are immutable, "
                            f"the first writer wins); the {len(new)} new file(s) stay local")
    return BackfillPlan(PUBLISH, cell, key, new, restored,
                        f"{len(new)} runtime-compiled file(s) become the entry of {cell.id}")


def _attribute(cells: Sequence[Cell], entries: Mapping[str, Manifest], cell_id: str | None,
               has_new: bool) -> Cell | None:
    if cell_id is not None:
        for c in cells:
            if c.id == cell_id:
                return c
        some = ", ".join(c.id for c in cells[:3])
        raise UsageError(f"--cell {cell_id!r}: no such cell in the matrix (cells look like "
                         f"{some})")
    if not has_new:
        return None
    without = [c for c in cells if c.id not in entries]
    if len(without) == 1:
        return without[0]
    if not without:
        raise UsageError("every cell of the matrix has an entry for this fingerprint, so the "
                         "runtime-compiled files belong to no declared cell; add their "
                         "shapes to the matrix, or name a cell with --cell")
    ids = ", ".join(c.id for c in without[:4]) + (", ..." if len(without) > 4 else "")
    raise UsageError(f"{len(without)} cells have no entry for this fingerprint ({ids}); name "
                     f"the one this instance served with --cell ID")


def read_entries(store: Store, cells: Sequence[Cell], fingerprint: Fingerprint,
                 backend: Backend, workers: int = 16) -> dict[str, Manifest]:
    """Cell id -> this fingerprint's manifest, for the cells whose entry the store holds."""

    def one(cell: Cell) -> tuple[str, Manifest | None]:
        key = entry_key(cell, fingerprint)
        return cell.id, read_entry(store, key, backend, source=f"manifests/{key}.json")

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(cells) or 1))) as pool:
        return {cid: m for cid, m in pool.map(one, cells) if m is not None}


def hash_new_files(plan: BackfillPlan, dirs: Mapping[str, str | Path],
                   workers: int = 8) -> tuple[FileRecord, ...]:
    """Records (size, sha256, mode) for the plan's new files, validated as a manifest's are."""
    return hash_files([(f.root, f.path, Path(dirs[f.root], *f.path.split("/")), None)
                       for f in plan.new_files], max(1, workers), list(dirs), "capture")


PRODUCER = {"tool": "neffcache capture", "source": "runtime-compiled (back-fill)"}


def apply_backfill(store: Store, plan: BackfillPlan, backend: Backend, fingerprint: Fingerprint,
                   dirs: Mapping[str, str | Path], options: PublishOptions) -> PublishResult | None:
    """Publish the plan's new files as its cell's entry (None unless the plan says publish);
    when another instance back-filled the cell first, its entry stands (``created`` False)."""
    if plan.action != PUBLISH or plan.cell is None:
        return None
    files = hash_new_files(plan, dirs, workers=options.workers)
    roots = {name: Path(d) for name, d in dirs.items()}
    return publish_entry(store, plan.cell, fingerprint, backend, roots, options,
                         producer=PRODUCER, files=files)
