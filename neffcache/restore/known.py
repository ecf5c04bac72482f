"""Resolve with the local manifest copies, asking the store only about what is missing."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from neffcache.backends import Backend
from neffcache.errors import ManifestError, UntrustedEntryError
from neffcache.manifest import DIGEST_FIELD, Manifest, decode_manifest, entry_key
from neffcache.restore.fs import Roots
from neffcache.restore.local import local_manifest_path, read_missing_record
from neffcache.restore.outcome import RestoreJob
from neffcache.restore.plan import FileId, short_cells, wanted_pairs, wanted_sizes
from neffcache.restore.resolve import (
    ManifestCopies,
    Resolution,
    ask_cells,
    find_elsewhere,
    resolve_entries,
)
from neffcache.restore.scan import scan_present
from neffcache.restore.seen import Present
from neffcache.restore.state import StateRecord
from neffcache.signing import PublicKey, check_trusted
from neffcache.store import Store, manifest_key


@dataclass(frozen=True, slots=True)
class Known:
    """The resolution, what a scan found at every path it wants, the records of files hashed."""

    resolution: Resolution
    present: Present  # files vouched for held as paths (``seen``): see ``seen``
    records: dict[FileId, StateRecord]
    missing_checked_at: float


def read_copy(target: Path, key: str, backend: Backend,
              trusted: Sequence[PublicKey] = ()) -> Manifest | None:
    """The local copy of entry ``key``'s manifest, validated as one from the store is, or None."""
    try:  # the bytes as a temporary: decoding frees them once they are text
        m = decode_manifest(_ours(local_manifest_path(target, key).read_bytes(), key),
                            allowed_roots=backend.root_names, source=f"{key}.json")
        check_trusted(m, trusted, f"{key}.json")
    except (OSError, ManifestError, UntrustedEntryError):
        return None
    return m if m.entry_key == key else None


def read_copies(target: Path, keys: Sequence[str], backend: Backend,
                trusted: Sequence[PublicKey] = ()) -> dict[str, Manifest]:
    # read before the state table: decoding peaks ~150 MiB above what it keeps (issue 22)
    return {k: m for k in keys if (m := read_copy(target, k, backend, trusted)) is not None}


def _ours(data: bytes, key: str) -> bytes:
    if f'"{DIGEST_FIELD}":'.encode() not in data:  # every copy this version writes has one
        raise ManifestError(f"{key}.json: no {DIGEST_FIELD}: not a copy neffcache wrote")
    return data


def resolve_known(store: Store, job: RestoreJob, roots: Roots, dirs: Mapping[str, str],
                  state: Mapping[FileId, StateRecord], copies: Mapping[str, Manifest]) -> Known:
    """Judge each cell from its valid copy, ask the store about the rest, scan what they want."""
    cells, fingerprint, target = job.cells, job.fingerprint, job.target
    workers, deadline = job.workers, job.deadline
    now = time.time()
    keys = job.entry_keys()
    recorded, checked_at = read_missing_record(target, fingerprint.key, now)
    held = list(copies.values())
    present, records = scan_present(roots, wanted_pairs(held), state, workers=min(workers, 8),
                                    deadline=deadline)
    short = short_cells(held, dirs, present)  # not a whole plan: its claims of a million
    # the store asked whether it still has them: "missing" ones are gone
    confirmed = ask_cells([m.cell for m in held if m.cell.id in short],
                          lambda c: "" if store.has(manifest_key(entry_key(c, fingerprint)))
                          else "missing", workers, deadline)
    gone, failed, late = confirmed.missing, confirmed.failed, confirmed.unresolved
    uncopied = [(c, k) for c, k in zip(cells, keys, strict=True) if k not in copies]
    reused = [c for c, k in uncopied if k in recorded]
    asked = resolve_entries(store, [c for c, k in uncopied if k not in recorded], fingerprint,
                            job.backend, workers=workers, deadline=deadline,
                            trusted=job.trusted, keep=ManifestCopies(target))
    for c in gone:  # retired from the store: the copy no longer says what the store has
        with contextlib.suppress(OSError):
            local_manifest_path(target, entry_key(c, fingerprint)).unlink()
    elsewhere = dict(asked.elsewhere) | dict(find_elsewhere(
        store, gone, fingerprint, workers=workers, deadline=deadline)) | {
        c.id: recorded[k] for c, k in uncopied if recorded.get(k)}
    dropped = {c.id for c in gone} | {f.cell_id for f in failed} | {c.id for c in late}
    by_key = {m.entry_key: m for m in asked.found} | {
        k: m for k, m in copies.items() if m.cell.id not in dropped}
    missing_ids = {c.id for c in (*asked.missing, *gone, *reused)}
    resolution = Resolution(
        found=tuple(by_key[k] for k in keys if k in by_key),
        missing=tuple(c for c in cells if c.id in missing_ids),
        failed=(*failed, *asked.failed), unresolved=(*late, *asked.unresolved),
        elsewhere=tuple((c.id, elsewhere[c.id]) for c in cells if c.id in elsewhere))
    present, records = _rescan(job, roots, state, held, resolution.found, present, records)
    return Known(resolution, present, records, checked_at if reused else now)


def _rescan(job: RestoreJob, roots: Roots, state: Mapping[FileId, StateRecord],
            scanned: Sequence[Manifest], found: Sequence[Manifest], present: Present,
            records: dict[FileId, StateRecord]) -> tuple[Present, dict[FileId, StateRecord]]:
    """What is in place at every path ``found`` wants (the first scan's look where it can)."""
    if len(found) == len(scanned) and all(a is b for a, b in zip(found, scanned, strict=True)):
        return present, records  # the very entries scanned: no two maps of a million paths
    before, wanted = wanted_sizes(scanned), wanted_sizes(found)
    extra = {fid: sizes for fid, sizes in wanted.items() if before.get(fid) != sizes}
    if not extra and len(wanted) == len(before):
        return present, records
    more, more_records = scan_present(roots, extra, state, hashed=records,
                                      workers=min(job.workers, 8), deadline=job.deadline)
    kept = present.keep(wanted, extra)  # a file hashed before is known, never "seen"
    kept_records = {fid: r for fid, r in records.items() if fid in wanted and fid not in extra}
    return kept.merge(more), kept_records | more_records
