"""``capture_entry(CaptureRequest)`` (``neffcache capture``): back-fill runtime-compiled files."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.errors import ExitRule, UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import FileRecord, Manifest, entry_key
from neffcache.matrix import Cell
from neffcache.precompile.capture import scan_roots
from neffcache.precompile.hit_check import FileState
from neffcache.precompile.plan import read_entries
from neffcache.precompile.publish import PublishOptions, PublishResult, hash_files, publish_with
from neffcache.precompile.push_cell import open_publisher
from neffcache.request_rules import checked_request

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
    """Decide what to publish: files in ``present`` that no entry lists become the entry of
    one cell without one (``entries``: cell id -> manifest). Pure."""
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


def hash_new_files(plan: BackfillPlan, dirs: Mapping[str, str | Path],
                   workers: int = 8) -> tuple[FileRecord, ...]:
    """Records for the plan's new files, validated as a manifest's are."""
    return hash_files([(f.root, f.path, Path(dirs[f.root], *f.path.split("/")), None)
                       for f in plan.new_files], max(1, workers), list(dirs), "capture")


PRODUCER = {"tool": "neffcache capture", "source": "runtime-compiled (back-fill)"}


_PUBLISH_FIELDS = ("created", "files", "total_bytes", "blobs_uploaded", "bytes_uploaded")


@checked_request
class CaptureRequest:
    """What ``neffcache capture`` is asked to back-fill; each field is the flag of that name.

    ``cache``: the restored directory the service compiled into. ``cell_id``: the cell the
    runtime-compiled files belong to (None: the only cell without an entry). ``dry_run``:
    plan only. ``store``, ``index``, ``python``, ``signing_key`` (the instance's own key):
    None resolves them as the CLI does, from ``environ`` (None: the process's). ``notice``:
    warnings. ``allow_missing_packages``: publish even when the interpreter lacks what the
    backend needs.
    """

    matrix: str | Path
    cache: str | Path
    cell_id: str | None = None
    dry_run: bool = False
    workers: int = 8
    python: str | None = None
    store: str | None = None
    index: str | None = None
    environ: Mapping[str, str] | None = None
    notice: Callable[[str], None] | None = None
    allow_missing_packages: bool = False
    signing_key: str | Path | None = None


@dataclass(frozen=True, slots=True)
class CaptureResult(ExitRule):
    """What a capture found (``plan``) and did: ``published`` (None on a dry run or when the
    plan publishes nothing), ``indexed``. ``to_json()`` is the ``--json`` document; a capture
    that cannot decide or publish raises, so ``error()`` is None."""

    plan: BackfillPlan
    fingerprint_key: str
    store_url: str
    dry_run: bool
    published: PublishResult | None = None
    indexed: bool | None = None

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.plan.to_json(), fingerprint_key=self.fingerprint_key,
                   store=self.store_url, dry_run=self.dry_run)
        if self.published is not None:
            doc.update({k: v for k, v in self.published.to_json().items()
                        if k in _PUBLISH_FIELDS})
            doc["indexed"] = self.indexed
        return doc


def capture_entry(request: CaptureRequest) -> CaptureResult:
    """Publish the files an instance compiled at run time as the entry of one cell without an
    entry, and index it (``neffcache capture --help``). Raises UsageError (2) when the files
    cannot be attributed to one cell, MatrixError (2), FingerprintMismatchError (5),
    UnavailableError (6); an index failure is only a notice."""
    from neffcache.backends import get_backend, root_dirs
    from neffcache.matrix_io import load_matrix

    m = load_matrix(request.matrix)
    backend = get_backend(m.backend)
    target = Path(request.cache).expanduser().absolute()
    dirs = root_dirs(backend, str(target))
    if not any(Path(d).is_dir() for d in dirs.values()):
        raise UsageError(f"--cache {target}: no cache root in it ({', '.join(dirs.values())})")
    to = open_publisher(request, backend.name)
    cell_ids = {entry_key(c, to.fingerprint): c.id for c in m.cells}
    entries = {cell_ids[k]: e for k, e in read_entries(to.store, list(cell_ids), backend).items()}
    present = scan_roots(backend, dirs)  # the roots that are directories
    plan = plan_backfill(present, m.cells, to.fingerprint, entries, request.cell_id)
    published, indexed = None, None
    if not request.dry_run and plan.action == PUBLISH and plan.cell is not None:
        files = hash_new_files(plan, dirs, workers=request.workers)
        published = publish_with(to.store, plan.cell, to.fingerprint, backend,
                                 {name: Path(d) for name, d in dirs.items()},
                                 PublishOptions(producer=PRODUCER, workers=request.workers,
                                                files=files, signer=to.signer))
        indexed = to.record(published.manifest, request.notice)
    return CaptureResult(plan, to.fingerprint.key, to.store.url, request.dry_run, published,
                         indexed)
