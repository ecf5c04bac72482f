"""Local copies of manifests, and the store-free check that a restore has nothing to do."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from neffcache.backends import Backend, root_dirs
from neffcache.errors import NeffcacheError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import (
    DIGEST_FIELD,
    SCHEMA_VERSION,
    SIGNATURE_FIELD,
    FileRecord,
    Manifest,
    loads_light,
    signature_from_json,
)
from neffcache.matrix import Cell
from neffcache.restore.fs import (
    ENTRIES_DIR,
    Roots,
    is_unclean,
    local_manifest_path,
    lock_destination,
    replace_best_effort,
)
from neffcache.restore.outcome import RestoreJob, RestoreResult, job_result
from neffcache.restore.plan import Conflict, plan_restore, wanted_sizes
from neffcache.restore.resolve import Resolution
from neffcache.restore.scan import scan_present
from neffcache.restore.state import (
    RootState,
    load_states,
    overlay,
    read_root_state,
    save_settled,
    settle_pending,
)
from neffcache.restore.state_rows import unpack_row
from neffcache.signing import PublicKey, signed_digest_trusted

LOCAL_ENTRIES = ENTRIES_DIR
MISSING_FILE = "missing.json"  # in LOCAL_ENTRIES: entries the store lacked at the last restore
MISSING_SCHEMA = 1
# A cell the store had no entry for is asked for again after this long: until then a boot
# whose other cells are in place takes the no-op path (no store request at all).
MISSING_RECHECK_SECONDS = 6 * 3600.0
_BAD_PARTS = frozenset({"", ".", ".."})


def read_local_doc(target: Path, key: str, roots: Sequence[str]) -> dict[str, Any] | None:
    """The local copy of entry ``key``'s manifest as JSON, if present and plausible."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        doc = loads_light(local_manifest_path(target, key).read_bytes(), members=False)
        if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION \
                or doc.get("entry_key") != key:
            return None
        allowed = set(roots)
        for f in doc["files"]:
            if f["root"] not in allowed or not _plain_relative(f["path"]):
                return None
        return doc
    return None


def manifest_of(doc: Mapping[str, Any], key: str, *, with_files: bool = True
                ) -> Manifest | None:
    """A Manifest from a local copy, or None if it is not entry ``key``."""
    try:
        files = tuple(FileRecord(f["root"], f["path"], f["size"], f["sha256"], f["mode"])
                      for f in doc["files"]) if with_files else ()
        m = Manifest(cell=Cell.from_json(doc["cell"]),
                     fingerprint=Fingerprint.from_json(doc["fingerprint"]), files=files,
                     signature=signature_from_json(doc.get(SIGNATURE_FIELD), key))
    except (ValueError, KeyError, TypeError, AttributeError, NeffcacheError):
        return None
    return m if m.entry_key == key else None


def confirm_in_place(docs: Sequence[Mapping[str, Any]], target_dirs: Mapping[str, str],
                     target: Path, deadline: float | None) -> tuple[int, int] | None:
    """(files the entries want, files left pending) if every one is in place as the state file
    vouched for it; None at the first doubt or when two entries claim one path."""
    states: dict[str, RootState] = {}
    fds: dict[str, int] = {}
    try:
        for root, d in target_dirs.items():
            states[root] = read_root_state(d)
            fds[root] = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        count = _confirm(docs, states, fds)
        left = None if count is None else _sync_pending(docs, states, fds, deadline)
        if count is None or left is None:
            return None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None
    finally:
        for fd in fds.values():
            os.close(fd)
    _record_settled(target, target_dirs, states)
    return count, left


def _sync_pending(docs: Sequence[Mapping[str, Any]], states: Mapping[str, RootState],
                  fds: Mapping[str, int], deadline: float | None) -> int | None:
    """``fdatasync`` the files pending in this boot on a thread waited for until ``deadline`` (one
    sync can take seconds beside a busy writer); how many stay pending, None when a file is not
    the one its row names."""
    if deadline is not None and time.monotonic() >= deadline:  # nothing more is started
        return sum(1 for _ in _pending_rows(docs, states))
    synced: list[tuple[str, str]] = []
    failed: list[bool] = []
    finished, stopped = threading.Event(), threading.Event()
    own = fds if deadline is None else {root: os.dup(fd) for root, fd in fds.items()}

    def run() -> None:
        try:
            for root, path in _pending_rows(docs, states):
                if stopped.is_set():
                    return
                if not states[root].sync_row(own[root], path):
                    failed.append(True)
                    return
                synced.append((root, path))
        except Exception:  # noqa: BLE001 - gone or unreadable: the full restore decides
            failed.append(True)
        finally:
            finished.set()
            for fd in own.values() if own is not fds else ():
                os.close(fd)

    if deadline is None:
        run()
    else:
        threading.Thread(target=run, name="neffcache-settle", daemon=True).start()
        finished.wait(max(0.0, deadline - time.monotonic()))
    done = finished.is_set()  # before the snapshot: then it holds every sync
    stopped.set()
    settled = synced[:]  # the syncs that returned by now: no later one is settled
    if failed:
        return None
    for root, path in settled:
        states[root].settle(path)
    return 0 if done else sum(1 for _ in _pending_rows(docs, states))


def _pending_rows(docs: Sequence[Mapping[str, Any]],
                  states: Mapping[str, RootState]) -> Iterator[tuple[str, str]]:
    """Each file of the copies the state file does not vouch for."""
    for doc in docs:
        for f in doc["files"]:
            root, path = f["root"], f["path"]
            if path not in states[root].files:
                yield root, path


def _record_settled(target: Path, dirs: Mapping[str, str],
                    states: Mapping[str, RootState]) -> None:
    """Write the state files that vouch for what this check synced, under DIR's lock if free."""
    if not any(s.settled for s in states.values()):
        return
    with contextlib.suppress(NeffcacheError, OSError):  # best effort: the next check syncs again
        with lock_destination(str(target), deadline=time.monotonic(),
                              who="restore (store-free)") as held:
            if not held.unclean:  # else the mark stays: the next full run sweeps
                save_settled(dirs, states)
                held.finished()


def _confirm(docs: Sequence[Mapping[str, Any]], states: Mapping[str, RootState],
             fds: Mapping[str, int]) -> int | None:
    seen: set[tuple[str, str]] = set()
    lstat, is_reg, mode_of = os.stat, stat.S_ISREG, stat.S_IMODE
    durable = {root: s.files for root, s in states.items()}
    pending = {root: s.this_boot() for root, s in states.items()}
    for doc in docs:
        for f in doc["files"]:  # hot loop: one fstatat, one unpack, nothing kept
            root, path = f["root"], f["path"]
            if len(docs) > 1:
                if (root, path) in seen:
                    return None
                seen.add((root, path))
            packed = durable[root].get(path) or pending[root].get(path)  # synced once all are
            if packed is None:  # confirmed (_sync_pending)
                return None
            size, mtime, ctime, inode, sha, mode = unpack_row(packed)
            if sha != f["sha256"] or size != f["size"] or mode != f["mode"]:
                return None
            st = lstat(path, dir_fd=fds[root], follow_symlinks=False)
            if st.st_ino != inode or st.st_mtime_ns != mtime or st.st_ctime_ns != ctime \
                    or st.st_size != size or not is_reg(st.st_mode) or mode_of(st.st_mode) != mode:
                return None
    return sum(len(doc["files"]) for doc in docs)


def _real_dir(path: Path) -> bool:
    """A directory, and not through a symlink at its last component."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _plain_relative(path: object) -> bool:
    return isinstance(path, str) and bool(path) and path[0] != "/" and "\x00" not in path \
        and not _BAD_PARTS.intersection(path.split("/"))


def save_missing(target: Path, fingerprint_key: str,
                 missing: Mapping[str, Sequence[str]], now: float) -> None:
    """Remember which entry keys the store lacked at ``now`` (best effort); none: no record."""
    final = Path(target, LOCAL_ENTRIES, MISSING_FILE)
    if not missing:
        with contextlib.suppress(OSError):
            final.unlink()
        return
    doc = {"schema_version": MISSING_SCHEMA, "fingerprint_key": fingerprint_key,
           "checked_at": now, "entries": {k: list(v) for k, v in sorted(missing.items())}}
    replace_best_effort(final, [json.dumps(doc, sort_keys=True).encode()])


def read_missing_record(target: Path, fingerprint_key: str, now: float,
                        max_age: float = MISSING_RECHECK_SECONDS
                        ) -> tuple[dict[str, tuple[str, ...]], float]:
    """Entry keys recorded missing for this fingerprint less than ``max_age`` seconds ago, and
    the time they were checked (``now`` when none)."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        doc = json.loads(Path(target, LOCAL_ENTRIES, MISSING_FILE).read_bytes())
        checked = float(doc["checked_at"])
        if doc.get("schema_version") == MISSING_SCHEMA and 0 <= now - checked < max_age \
                and doc.get("fingerprint_key") == fingerprint_key:
            return {str(k): tuple(str(f) for f in v) for k, v in doc["entries"].items()}, checked
    return {}, now


def _plan_locally(docs: Sequence[Mapping[str, Any]], keys: Sequence[str],
                  dirs: Mapping[str, str], deadline: float | None
                  ) -> tuple[int, int, tuple[Conflict, ...]] | None:
    """(files in place, 0 pending, conflicts) if a local plan over the copies fetches nothing."""
    full = _all([manifest_of(d, k) for d, k in zip(docs, keys, strict=True)])
    if full is None or len(full) < 2:
        return None
    wanted = wanted_sizes(full)
    state, pending = load_states(dirs)
    with Roots(dirs) as roots:
        settled = settle_pending(roots, pending, wanted, deadline=deadline)
        present, _ = scan_present(roots, wanted, overlay(state, settled.durable.records),
                                  hash_unknown=False)
    plan = plan_restore(full, dirs, present)
    if plan.fetch:
        return None
    return len(plan.present), 0, plan.conflicts


T = TypeVar("T")


def _all(items: list[T | None]) -> list[T] | None:
    kept = [x for x in items if x is not None]
    return kept if len(kept) == len(items) else None


def restore_local(cells: Sequence[Cell], backend: Backend, fingerprint: Fingerprint,
                  target: Path, *, store_url: str, trusted: Sequence[PublicKey] = (),
                  deadline: float | None = None) -> RestoreResult | None:
    """The result of a restore that finds every requested cell in place, from the local copies and
    the state files alone (no store, no hashing); None at any doubt: then a full restore decides.
    Cells recently found without an entry count as missing (``read_missing_record``). The result's
    manifests carry no file list."""
    started = time.monotonic()
    job = RestoreJob(tuple(cells), backend, fingerprint, target, deadline=deadline,
                     trusted=trusted)
    target = job.target
    if is_unclean(str(target)) or not _real_dir(Path(target, LOCAL_ENTRIES)):
        return None
    all_keys = job.entry_keys()
    known_missing = read_missing_record(target, fingerprint.key, time.time())[0] if any(
        not local_manifest_path(target, k).exists() for k in all_keys) else {}
    missing = [c for c, k in zip(cells, all_keys, strict=True) if k in known_missing]
    cells = [c for c, k in zip(cells, all_keys, strict=True) if k not in known_missing]
    keys = [k for k in all_keys if k not in known_missing]
    docs = _all([read_local_doc(target, k, backend.root_names) for k in keys])
    dirs = root_dirs(backend, str(target))
    if docs is None or not all(_real_dir(Path(d)) for d in dirs.values()):
        return None
    if trusted and not all(signed_digest_trusted(d.get(SIGNATURE_FIELD), d.get(DIGEST_FIELD),
                                                 trusted) for d in docs):
        return None
    confirmed = confirm_in_place(docs, dirs, target, deadline)
    # None: a file changed, or entries share paths: plan it, still locally
    here = (*confirmed, ()) if confirmed else _plan_locally(docs, keys, dirs, deadline)
    if here is None:
        return None
    found = _all([manifest_of(d, k, with_files=False) for d, k in zip(docs, keys, strict=True)])
    if found is None:
        return None
    elsewhere = tuple((c.id, known_missing[k]) for c, k in zip(job.cells, all_keys, strict=True)
                      if known_missing.get(k))
    resolution = Resolution(tuple(found), tuple(missing), (), (), elsewhere)
    return replace(job_result(job, store_url, resolution, started),
                   restored=tuple(c.id for c in cells), files_skipped=here[0],
                   files_unsynced=here[1], conflicts=here[2])
