"""``capture_entry(CaptureRequest) -> CaptureResult``: the use case behind ``neffcache capture``:
back-fill what an instance compiled at run time as the entry of the cell it served (the plan
and the publish are ``backfill``'s), then index it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.errors import ExitRule, UsageError
from neffcache.precompile.backfill import BackfillPlan, apply_backfill, plan_backfill, read_entries
from neffcache.precompile.capture import scan_roots
from neffcache.precompile.indexing import record_entry_or_warn
from neffcache.precompile.publish import PublishOptions, PublishResult
from neffcache.precompile.push_cell import open_publisher
from neffcache.request_rules import checked_request

# What a capture's JSON takes from the publish's, when it published.
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
    entries = read_entries(to.store, m.cells, to.fingerprint, backend)
    present = scan_roots(backend, {k: v for k, v in dirs.items() if Path(v).is_dir()})
    plan = plan_backfill(present, m.cells, to.fingerprint, entries, request.cell_id)
    published, indexed = None, None
    if not request.dry_run:
        published = apply_backfill(to.store, plan, backend, to.fingerprint, dirs,
                                   PublishOptions(workers=request.workers, signer=to.signer))
        if published is not None:
            indexed = record_entry_or_warn(to.settings, published.manifest, to.store.url,
                                           request.notice)
    return CaptureResult(plan, to.fingerprint.key, to.store.url, request.dry_run, published,
                         indexed)
