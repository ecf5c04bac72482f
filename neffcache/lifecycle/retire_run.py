"""The retire use case, ``retire_entries``: the policy from the request and the config file,
the index's restored fingerprints, the plan, consent, the record, the index; from a typed
request (see ``retire`` for the rules)."""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from neffcache.config import Settings, read_settings
from neffcache.errors import ExitRule, NeffcacheError, UsageError
from neffcache.lifecycle.entry_select import read_manifests, select_entry_keys
from neffcache.lifecycle.retire import (
    EntryInfo,
    RetirePlan,
    RetirePolicy,
    apply_retire,
    plan_retire,
    policy_from,
    with_restored,
)
from neffcache.matrix_io import load_matrix
from neffcache.request_rules import checked_request
from neffcache.store import open_store


@dataclass(frozen=True, slots=True)
class RetireEntriesResult(ExitRule):
    """The plan (what is kept, by which rules, what is retired, the bytes the next gc frees),
    whether it was only a dry run, the record written (its store key; None on a dry run or
    when nothing was retired), the store's URL, and why the index could not be updated
    (``index_error``; None when it was or there is none). A result is a success (exit 0)."""

    plan: RetirePlan
    dry_run: bool
    record: str | None
    store: str
    index_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """``neffcache retire --json``: policy, sdk_versions, keep (with kept_by), retire,
        entries_kept, entries_retired, blobs_freed, bytes_freed, dry_run, record, store."""
        return dict(self.plan.to_json(), dry_run=self.dry_run, record=self.record,
                    store=self.store)


@checked_request
class RetireEntriesRequest:
    """What ``retire_entries`` keeps and how it goes about it.

    The policy (any rule keeps an entry; each None/empty falls back to the config file's
    [retire] table): ``keep_sdk_versions`` the newest K SDK versions per backend,
    ``keep_matrices`` every entry of these matrix files' cells, ``keep_restored_days`` the
    fingerprints an ok/partial restore report in the index found in the last D days.
    ``store``/``index``: URLs (None: as the CLI would, NEFFCACHE_* > config file > default).
    ``reason`` and ``by`` go into the record (defaults: the policy, USER@HOST).
    ``dry_run``: plan only. Otherwise retiring needs consent: ``confirmed=True``, or a
    ``confirm(preview)`` callback (``preview`` is the dry run's result) returning True; when
    it returns False nothing is retired and the result is the dry run's. It never prompts.
    ``notice(line)``: warnings (the index could not be updated). ``workers``: parallel reads.
    """

    keep_sdk_versions: int | None = None
    keep_matrices: Sequence[str | Path] = ()
    keep_restored_days: int | None = None
    store: str | None = None
    index: str | None = None
    reason: str = ""
    by: str | None = None
    workers: int = 16
    dry_run: bool = False
    confirmed: bool = False
    confirm: Callable[[RetireEntriesResult], bool] | None = None
    notice: Callable[[str], None] | None = None


def retire_entries(request: RetireEntriesRequest) -> RetireEntriesResult:
    """Retire every entry of the store the policy does not keep: plan first, then write a
    record (``retired/<time>-<id>.json``) and delete each retired entry's cell pointer and
    manifest; blobs are left to gc. The retired entries leave the index too when there is one
    (a failing index is only a notice). Raises UsageError (exit 2) for no policy at all, for
    ``keep_restored_days`` without an index, and when there is something to retire without
    consent; MatrixError for a bad matrix file; UnavailableError (exit 6) when the store or
    the index cannot be reached."""
    settings = read_settings(os.environ, store=request.store, index=request.index)
    policy = _policy(request, settings)
    s = open_store(settings.store_url)
    s.check()
    manifests = read_manifests(s, select_entry_keys(s, None, workers=request.workers),
                               workers=request.workers)
    plan = plan_retire([EntryInfo.of(m) for m in manifests], policy)
    preview = RetireEntriesResult(plan, True, None, s.url)
    if request.dry_run:
        return preview
    if plan.retire and not _consent(request, preview):
        return preview
    record = None
    index_error = None
    if plan.retire:
        record = apply_retire(s, plan, by=request.by or _who(),
                              reason=request.reason or policy.describe())
        index_error = _unindex(settings, [e.entry_key for e in plan.retire], request.notice)
    return RetireEntriesResult(plan, False, record, s.url, index_error)


def _policy(request: RetireEntriesRequest, settings: Settings) -> RetirePolicy:
    """Flags over the config file's [retire] table, checked; with the index's restored
    fingerprints when the policy keeps them."""
    config = dict(settings.retire)
    files = tuple(request.keep_matrices) or tuple(config.get("keep_matrices", ()))
    policy = policy_from(request.keep_sdk_versions, [_matrix_cells(f) for f in files], config,
                         request.keep_restored_days)
    policy.check()
    if policy.keep_restored_days is not None:
        policy = with_restored(policy, _restored(settings, policy.keep_restored_days))
    return policy


def _matrix_cells(path: str | Path) -> tuple[str, tuple[str, ...]]:
    m = load_matrix(path)
    return m.name or str(path), tuple(c.key for c in m.cells)


def _who() -> str:
    """USER@HOST, the default ``by`` of a retire record."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _consent(request: RetireEntriesRequest, preview: RetireEntriesResult) -> bool:
    """Whether to go on: ``confirmed``, else what ``confirm`` answers; with neither, refuse."""
    if request.confirmed:
        return True
    if request.confirm is None:
        plan = preview.plan
        raise UsageError(f"retire would retire {len(plan.retire)} of "
                         f"{len(plan.retire) + len(plan.keep)} entries from {preview.store}; "
                         "not confirmed",
                         hint="neffcache retire ... --dry-run, then the same with --yes")
    return request.confirm(preview)


def _has_index(settings: Settings) -> bool:
    """Whether an index is configured or the embedded one exists."""
    return bool(settings.index_explicit or (settings.home / "index.db").exists())


def _restored(settings: Settings, days: int) -> set[str]:
    """The index's fingerprint keys restored in the last ``days`` days."""
    if not _has_index(settings):
        raise UsageError(f"--keep-restored-days {days} needs the index (restore reports are "
                         f"counted there), and there is none",
                         hint="neffcache reindex (or --index URL / NEFFCACHE_INDEX)")
    from neffcache.index import open_index  # SQLAlchemy: only when the policy needs it

    since = datetime.now(timezone.utc) - timedelta(days=days)
    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as idx:
        return idx.restored_fingerprints(since)


def _unindex(settings: Settings, keys: list[str],
             notice: Callable[[str], None] | None) -> str | None:
    """Remove retired entries from the index when there is one; a failure is only a notice
    (and the returned message)."""
    if not _has_index(settings):
        return None
    from neffcache.index import open_index  # SQLAlchemy: only when there is an index

    try:
        with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as idx:
            idx.remove_entries(keys)
    except NeffcacheError as exc:
        message = " ".join(str(exc).split())
        if notice is not None:
            notice(f"warning: retired entries not removed from the index: {message}")
            notice("hint: neffcache reindex")
        return message
    return None
