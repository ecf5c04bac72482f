"""The gc use case, ``collect_garbage``: plan, ask for consent, apply."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from neffcache.command_steps import consent, open_checked_store
from neffcache.config import read_settings
from neffcache.errors import ExitRule, UnavailableError
from neffcache.lifecycle.gc import (
    DEFAULT_GRACE_SECONDS,
    GcResult,
    UploadPlan,
    apply_gc,
    apply_uploads,
    check_grace,
    collect_gc,
    collect_uploads,
    upload_json,
)
from neffcache.request_rules import checked_request
from neffcache.store import TempFile, TempFiles, Upload


@dataclass(frozen=True, slots=True)
class CollectGarbageResult(ExitRule):
    """What gc planned and did: ``gc`` the blob and pack plan and what was deleted (None with
    ``uploads_only``); ``uploads`` the multipart-upload plan (None for a store without them,
    or when they could not be listed: then ``uploads_error`` says why). A success (exit 0)."""

    store: str
    dry_run: bool
    grace: float
    gc: GcResult | None
    uploads: UploadPlan | None
    aborted: tuple[Upload, ...] = ()
    uploads_error: str | None = None
    temps: tuple[TempFile, ...] = ()  # stale temp files a killed writer left (local store)
    temps_removed: int = 0

    @property
    def pending(self) -> str:
        stale = len(self.uploads.abort) if self.uploads is not None else 0
        if self.gc is None:
            return f"{stale} multipart upload(s)"
        plan = self.gc.plan
        return (f"{len(plan.delete)} blob(s), {len(plan.delete_packs)} pack(s) and "
                f"{stale} multipart upload(s)")

    def counts(self) -> Mapping[str, int]:
        """The summary's numbers; empty with ``uploads_only``."""
        if self.gc is None:
            return {}
        p = self.gc.plan
        return {"manifests": p.manifests, "blobs": p.blobs, "referenced": p.referenced,
                "unreferenced": len(p.delete) + len(p.spared), "spared": len(p.spared),
                "deleted": len(self.gc.deleted), "stale_intents": len(p.stale_intents),
                "packs": p.packs, "unreferenced_packs": len(p.delete_packs) + len(p.spared_packs),
                "deleted_packs": len(self.gc.deleted_packs)}

    def to_json(self) -> dict[str, Any]:
        """``neffcache gc --json``; with ``uploads_only``: store, dry_run, uploads."""
        uploads = None if self.uploads is None else \
            dict(self.uploads.to_json(), aborted=[upload_json(u) for u in self.aborted])
        if self.gc is None:
            return {"store": self.store, "dry_run": self.dry_run, "uploads": uploads}
        doc = dict(self.gc.to_json(), store=self.store, uploads=uploads,
                   temp_files=[t.key for t in self.temps[:200]],
                   temp_files_removed=self.temps_removed)
        if self.uploads_error is not None:
            doc["uploads_error"] = self.uploads_error
        return doc


@checked_request
class CollectGarbageRequest:
    """What ``collect_garbage`` does. ``grace``: seconds a publish in progress or a retire is
    protected for, and the age past which multipart uploads are aborted (at least 600 unless
    ``force``); ``uploads_only``: only abort stale multipart uploads."""

    store: str | None = None
    grace: float = DEFAULT_GRACE_SECONDS
    force: bool = False
    uploads_only: bool = False
    workers: int = 16
    dry_run: bool = False
    confirmed: bool = False
    confirm: Callable[[CollectGarbageResult], bool] | None = None
    notice: Callable[[str], None] | None = None


def collect_garbage(request: CollectGarbageRequest) -> CollectGarbageResult:
    """Delete blobs and packs no manifest references and abort stale multipart uploads. Raises
    UsageError (exit 2) for a grace below the floor without ``force`` and without consent,
    IntegrityError (exit 4) for an unreadable manifest, UnavailableError (exit 6) when the
    store (with ``uploads_only``: its uploads) cannot be reached."""
    check_grace(request.grace, force=request.force)
    s = open_checked_store(read_settings(os.environ, store=request.store).store_url)
    now = time.time()
    gc: GcResult | None = None
    seen: tuple[set[str], set[str]] = (set(), set())
    if not request.uploads_only:
        plan, seen_m, seen_i = collect_gc(s, now=now, grace=request.grace,
                                          workers=request.workers)
        gc, seen = GcResult(plan, (), (), True), (seen_m, seen_i)
    uploads_error: str | None = None
    try:
        found = collect_uploads(s, now=now, grace=request.grace, workers=request.workers)
    except UnavailableError as exc:
        if request.uploads_only:
            raise
        found, uploads_error = None, str(exc)
        if request.notice is not None:
            hint = f" (Hint: {exc.hint})" if exc.hint else ""
            request.notice(f"warning: multipart uploads not checked: {exc}{hint}")
    temps = tuple(s.stale_temps()) if isinstance(s, TempFiles) and gc is not None else ()
    preview = CollectGarbageResult(s.url, True, request.grace, gc,
                                   found[0] if found else None, (), uploads_error, temps)
    doomed = len(temps) + (len(found[0].abort) if found else 0)
    if gc is not None:
        doomed += len(plan.delete) + len(plan.delete_packs) + len(plan.stale_intents)
    if request.dry_run or (doomed and not consent(
            request.confirmed, request.confirm, preview,
            f"gc would delete or abort {preview.pending} in {preview.store}; not confirmed",
            hint="neffcache gc --dry-run, then neffcache gc --yes")):
        return preview
    result = None if gc is None else apply_gc(s, plan, seen, workers=request.workers)
    aborted = () if not found else apply_uploads(s, *found, workers=request.workers)
    for temp in temps:
        assert isinstance(s, TempFiles)  # temps only come from TempFiles
        s.remove_temp(temp)
    return replace(preview, dry_run=False, gc=result, aborted=aborted,
                   temps_removed=len(temps))
