"""Retire entries by policy (newest K SDK versions, named matrices, restored lately)."""

from __future__ import annotations

import getpass
import io
import os
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from itertools import groupby
from pathlib import Path
from typing import Any

from neffcache.backends import neuron_env
from neffcache.command_steps import consent, open_checked_store
from neffcache.config import Settings, read_settings
from neffcache.documents import canonical_json
from neffcache.errors import ExitRule, NeffcacheError, UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.lifecycle.entry_select import select_manifests
from neffcache.manifest import Manifest
from neffcache.matrix_io import load_matrix
from neffcache.request_rules import checked_request
from neffcache.store import RETIRED, Store, cell_pointer_key, manifest_key

RECORD_SCHEMA = 1
SDK_FIELDS: dict[str, tuple[str, ...]] = {
    "neuron": tuple(f"version.{d}" for d in ("neuronx-cc", *(
        d for d in neuron_env.SDK_DISTRIBUTIONS if d != "neuronx-cc"), "torch")),
    "inductor": ("version.torch",),
}

SdkVersion = tuple[tuple[str, str], ...]
# The rules that can keep an entry, as the plan's JSON names them.
KEPT_SDK, KEPT_MATRIX, KEPT_RESTORED = "sdk_version", "matrix", "restored"


def sdk_version(fp: Fingerprint) -> SdkVersion:
    """The (field, value) pairs of a fingerprint that name its SDK release."""
    fields = SDK_FIELDS.get(fp.backend, ("version.torch",))
    return tuple((f, fp.get(f, "absent")) for f in fields)


def sdk_label(version: SdkVersion) -> str:
    return ", ".join(f"{f.removeprefix('version.')} {v}" for f, v in version if v != "absent")


def _part_key(value: str) -> tuple[tuple[int, int | str], ...]:
    if value in ("absent", "unknown", ""):
        return ((-1, 0),)
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+\-_]", value))


def version_order(version: SdkVersion) -> tuple[Any, ...]:
    """A sort key: field by field, numerically where the parts are numbers."""
    return tuple(_part_key(v) for _, v in version)


@dataclass(frozen=True, slots=True)
class RetirePolicy:
    keep_sdk_versions: int | None = None  # newest K SDK versions per backend
    keep_cells: frozenset[str] = frozenset()  # cell keys of the named matrices
    keep_matrices: tuple[str, ...] = ()  # their names, for the record
    keep_restored_days: int | None = None  # keep fingerprints restored in the last D days
    keep_fingerprints: frozenset[str] = frozenset()  # those fingerprints' keys (the index's)

    def check(self) -> None:
        if (self.keep_sdk_versions is None and not self.keep_matrices
                and self.keep_restored_days is None):
            raise UsageError("retire needs a policy: --keep-sdk-versions K, --keep-matrix FILE "
                             "and/or --keep-restored-days D (or a [retire] table in the config "
                             "file)")
        if self.keep_sdk_versions is not None and self.keep_sdk_versions < 1:
            raise UsageError(f"--keep-sdk-versions {self.keep_sdk_versions}: expected >= 1")
        if self.keep_restored_days is not None and self.keep_restored_days < 1:
            raise UsageError(f"--keep-restored-days {self.keep_restored_days}: expected >= 1")

    def to_json(self) -> dict[str, Any]:
        return {"keep_sdk_versions": self.keep_sdk_versions,
                "keep_matrices": list(self.keep_matrices),
                "keep_restored_days": self.keep_restored_days,
                "keep_fingerprints": sorted(self.keep_fingerprints)}

    def describe(self) -> str:
        rules = ((self.keep_sdk_versions is not None,
                  f"keep the newest {self.keep_sdk_versions} SDK version(s) per backend"),
                 (bool(self.keep_matrices), f"keep the cells of {', '.join(self.keep_matrices)}"),
                 (self.keep_restored_days is not None,
                  f"keep the fingerprints restored in the last {self.keep_restored_days} day(s) "
                  f"({len(self.keep_fingerprints)})"))
        return "; ".join(text for given, text in rules if given)

    def kept_by(self, e: EntryInfo, kept_versions: Set[tuple[str, SdkVersion]]) -> tuple[str, ...]:
        """The rules that keep ``e`` (empty: retire it)."""
        return tuple(rule for rule, keeps in ((KEPT_SDK, (e.backend, e.sdk) in kept_versions),
                                              (KEPT_MATRIX, e.cell_key in self.keep_cells),
                                              (KEPT_RESTORED,
                                               e.fingerprint_key in self.keep_fingerprints))
                     if keeps)


@dataclass(frozen=True, slots=True)
class EntryInfo:
    entry_key: str
    cell_key: str
    cell_id: str
    fingerprint_key: str
    backend: str
    sdk: SdkVersion
    blobs: tuple[tuple[str, int], ...]
    packs: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, m: Manifest) -> EntryInfo:
        return cls(m.entry_key, m.cell.key, m.cell.id, m.fingerprint.key, m.fingerprint.backend,
                   sdk_version(m.fingerprint), tuple(sorted({(f.sha256, f.size) for f in m.files})),
                   tuple(sorted({(p.sha256, p.size) for p in m.packs})))

    def to_json(self) -> dict[str, Any]:
        return {"entry_key": self.entry_key, "cell_id": self.cell_id, "cell_key": self.cell_key,
                "fingerprint_key": self.fingerprint_key, "backend": self.backend,
                "sdk": dict(self.sdk), "bytes": sum(n for _, n in self.blobs)}


@dataclass(frozen=True, slots=True)
class RetirePlan:
    policy: RetirePolicy
    keep: tuple[EntryInfo, ...]
    retire: tuple[EntryInfo, ...]
    kept_by: tuple[tuple[str, ...], ...]  # per entry of ``keep``: the rules that keep it
    sdk_versions: tuple[tuple[str, SdkVersion, bool], ...]  # (backend, version, kept), newest first
    blobs_freed: int
    bytes_freed: int  # blobs and packs only retired entries reference (what gc then frees)

    def to_json(self) -> dict[str, Any]:
        return {"policy": self.policy.to_json(),
                "sdk_versions": [{"backend": b, "sdk": dict(v), "label": sdk_label(v),
                                  "kept": k} for b, v, k in self.sdk_versions],
                "keep": [dict(e.to_json(), kept_by=list(rules))
                         for e, rules in zip(self.keep, self.kept_by, strict=True)],
                "retire": [e.to_json() for e in self.retire],
                "entries_kept": len(self.keep), "entries_retired": len(self.retire),
                "blobs_freed": self.blobs_freed, "bytes_freed": self.bytes_freed}


def plan_retire(entries: Iterable[EntryInfo], policy: RetirePolicy) -> RetirePlan:
    """The entries the policy keeps (by any rule) and retires, and the bytes gc then frees."""
    policy.check()
    entries = sorted(entries, key=lambda e: (e.backend, e.cell_id, e.entry_key))
    k = policy.keep_sdk_versions
    versions = [(backend, v, k is not None and i < k)
                for backend, group in groupby(entries, key=lambda e: e.backend)
                for i, v in enumerate(sorted({e.sdk for e in group}, key=version_order,
                                             reverse=True))]
    kept_versions = {(backend, v) for backend, v, kept in versions if kept}
    rules = [(e, policy.kept_by(e, kept_versions)) for e in entries]
    keep = [e for e, r in rules if r]
    retire = [e for e, r in rules if not r]
    still = {b for e in keep for b in (*e.blobs, *e.packs)}
    freed_blobs = {b for e in retire for b in e.blobs} - still
    freed_packs = {p for e in retire for p in e.packs} - still
    return RetirePlan(policy, tuple(keep), tuple(retire), tuple(r for _, r in rules if r),
                      tuple(versions), len(freed_blobs),
                      sum(n for _, n in freed_blobs | freed_packs))


def retire_record(plan: RetirePlan, *, by: str, reason: str, now: float) -> dict[str, Any]:
    """Who, when, why, the policy, the entries and what they referenced (gc spares those)."""
    return {"schema_version": RECORD_SCHEMA, "created_at": now,
            "retired_at": datetime.fromtimestamp(now, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "by": by, "reason": reason, "policy": plan.policy.to_json(),
            "entries": [e.to_json() for e in plan.retire],
            "blobs": sorted({s for e in plan.retire for s, _ in e.blobs}),
            "packs": sorted({s for e in plan.retire for s, _ in e.packs})}


def apply_retire(store: Store, plan: RetirePlan, *, by: str, reason: str,
                 now: float | None = None) -> str:
    """The record first (never deleted: the history), then pointers and manifests; its key."""
    now = time.time() if now is None else now
    stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    key = f"{RETIRED}{stamp}-{uuid.uuid4().hex[:8]}.json"
    body = canonical_json(retire_record(plan, by=by, reason=reason, now=now)).encode("utf-8")
    store.put(key, io.BytesIO(body), if_absent=True)
    for e in plan.retire:
        store.delete(cell_pointer_key(e.cell_key, e.fingerprint_key))
        store.delete(manifest_key(e.entry_key))
    return key


def policy_from(keep_sdk_versions: int | None, matrices: Sequence[tuple[str, Sequence[str]]],
                config: Mapping[str, Any], keep_restored_days: int | None = None
                ) -> RetirePolicy:
    """Flags over the config file's [retire] table; ``matrices`` are (name, cell keys)."""
    k = keep_sdk_versions if keep_sdk_versions is not None else config.get("keep_sdk_versions")
    d = keep_restored_days if keep_restored_days is not None else config.get(
        "keep_restored_days")
    return RetirePolicy(keep_sdk_versions=k,
                        keep_cells=frozenset(c for _, cells in matrices for c in cells),
                        keep_matrices=tuple(name for name, _ in matrices),
                        keep_restored_days=d)


@dataclass(frozen=True, slots=True)
class RetireEntriesResult(ExitRule):
    """The plan, whether it was only a dry run, the record written (its store key, or None),
    the store's URL, and why the index could not be updated (``index_error``)."""

    plan: RetirePlan
    dry_run: bool
    record: str | None
    store: str
    index_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.plan.to_json(), dry_run=self.dry_run, record=self.record,
                    store=self.store)


@checked_request
class RetireEntriesRequest:
    """What ``retire_entries`` keeps. Any rule keeps an entry; each None/empty falls back to
    the config file's [retire] table: ``keep_sdk_versions`` the newest K SDK versions per
    backend, ``keep_matrices`` every entry of these matrix files' cells, ``keep_restored_days``
    the fingerprints an ok/partial restore report in the index found in the last D days.
    ``reason`` and ``by`` go into the record (defaults: the policy, USER@HOST)."""

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
    """Retire every entry the policy does not keep, from the store and the index (a failing
    index is only a notice). Raises UsageError (exit 2) for no policy, ``keep_restored_days``
    without an index, or no consent; MatrixError for a bad matrix file; UnavailableError
    (exit 6) when the store or the index cannot be reached."""
    settings = read_settings(os.environ, store=request.store, index=request.index)
    policy = _policy(request, settings)
    s = open_checked_store(settings.store_url)
    manifests = select_manifests(s, None, everything=True, workers=request.workers)
    plan = plan_retire([EntryInfo.of(m) for m in manifests], policy)
    preview = RetireEntriesResult(plan, True, None, s.url)
    if request.dry_run:
        return preview
    if not plan.retire:
        return replace(preview, dry_run=False)
    if not consent(request.confirmed, request.confirm, preview,
                   f"retire would retire {len(plan.retire)} of {len(plan.retire) + len(plan.keep)}"
                   f" entries from {preview.store}; not confirmed",
                   hint="neffcache retire ... --dry-run, then the same with --yes"):
        return preview
    record = apply_retire(s, plan, by=request.by or _who(),
                          reason=request.reason or policy.describe())
    index_error = _unindex(settings, [e.entry_key for e in plan.retire], request.notice)
    return RetireEntriesResult(plan, False, record, s.url, index_error)


def _policy(request: RetireEntriesRequest, settings: Settings) -> RetirePolicy:
    config = dict(settings.retire)
    files = tuple(request.keep_matrices) or tuple(config.get("keep_matrices", ()))
    policy = policy_from(request.keep_sdk_versions, [_matrix_cells(f) for f in files], config,
                         request.keep_restored_days)
    policy.check()
    if policy.keep_restored_days is not None:
        policy = replace(policy, keep_fingerprints=frozenset(
            _restored(settings, policy.keep_restored_days)))
    return policy


def _matrix_cells(path: str | Path) -> tuple[str, tuple[str, ...]]:
    m = load_matrix(path)
    return m.name or str(path), tuple(c.key for c in m.cells)


def _who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def _restored(settings: Settings, days: int) -> set[str]:
    if not settings.has_index:
        raise UsageError(f"--keep-restored-days {days} needs the index (restore reports are "
                         f"counted there), and there is none",
                         hint="neffcache reindex (or --index URL / NEFFCACHE_INDEX)")
    from neffcache.index import open_index  # SQLAlchemy: only when the policy needs it

    with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as idx:
        return idx.restored_fingerprints(datetime.now(timezone.utc) - timedelta(days=days))


def _unindex(settings: Settings, keys: list[str],
             notice: Callable[[str], None] | None) -> str | None:
    if not settings.has_index:
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
