"""Publish an entry: capture a warm-up's cache roots into blobs plus one manifest in a store."""

from __future__ import annotations

import hashlib
import io
import platform
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from neffcache.backends import Backend
from neffcache.documents import canonical_json
from neffcache.errors import IntegrityError, ManifestError, NotFoundError, StoppedError, UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.hashing import VerifyingReader, sha256_file, sha256_file_parts
from neffcache.manifest import (
    DIGEST_FIELD,
    FileRecord,
    Manifest,
    PackMember,
    PackRecord,
    PartDigests,
    decode_manifest,
    encode_manifest_pieces,
    manifest_digest,
    validate_files,
)
from neffcache.matrix import Cell
from neffcache.parts import DEFAULT_PARTS, PartPolicy, needs_parts
from neffcache.precompile.capture import walk_captured
from neffcache.precompile.intents import REFRESH_SECONDS, held_intents
from neffcache.precompile.packing import DEFAULT_POLICY, PackPolicy, plan_packs
from neffcache.signing import SigningKey, sign_manifest
from neffcache.store import Store, blob_key, cell_pointer_key, holds_good, manifest_key, pack_key
from neffcache.thread_pool import map_in_threads, usable_cpus
from neffcache.version import __version__

# Parallel uploads: a small blob costs a request, not bandwidth. Measured on a loaded SeaweedFS
# (3,000 files): 8 uploads took 1.55 x `s5cmd cp`, 32 took 1.14 x; peak RSS 127-160 MiB.
DEFAULT_WORKERS = 32
# Hashing is CPU work (sha256 releases the GIL): more threads than this only contend.
HASH_WORKERS_PER_CPU = 2
PACK_WORKERS = 4  # each holds one pack (at most PackPolicy.max_bytes) in memory
# A new blob up to this size is put create-only without a probe first (one request, not two).
PUT_FIRST_MAX = 1 << 20
STOP_POLL_SECONDS = 0.1  # how often a publish (and a precompile run) looks at its stop event

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class PublishResult:
    manifest: Manifest
    created: bool  # False: an entry with this key already existed and stands unchanged
    blobs_uploaded: int
    blobs_skipped: int
    bytes_uploaded: int
    packs_uploaded: int = 0
    pack_bytes_uploaded: int = 0

    def to_json(self) -> dict[str, Any]:
        m = self.manifest
        return {"entry_key": m.entry_key, "cell_id": m.cell.id, "cell_key": m.cell.key,
                "fingerprint_key": m.fingerprint.key, "backend": m.fingerprint.backend,
                "created": self.created, "files": len(m.files), "total_bytes": m.total_bytes,
                "blobs_uploaded": self.blobs_uploaded, "blobs_skipped": self.blobs_skipped,
                "bytes_uploaded": self.bytes_uploaded, "compile_seconds": m.compile_seconds,
                "signed_by": m.signature.key_id if m.signature else None,
                "packs": len(m.packs), "packs_uploaded": self.packs_uploaded,
                "pack_bytes_uploaded": self.pack_bytes_uploaded}


def default_producer() -> dict[str, str]:
    """Who wrote an entry (never credentials or the environment)."""
    return {"neffcache": __version__, "host": socket.gethostname(),
            "python": platform.python_version()}


def hash_workers(workers: int) -> int:
    return max(1, min(workers, HASH_WORKERS_PER_CPU * usable_cpus()))


def plan_publish(backend: Backend, roots: Mapping[str, Path], *,
                 workers: int = DEFAULT_WORKERS) -> tuple[FileRecord, ...]:
    """Every file under each named root that the backend captures, hashed, sorted by (root,
    path); a root that is not a directory is a UsageError."""
    found: list[tuple[str, str, Path, int | None]] = []
    for name, directory in sorted(roots.items()):
        backend.root(name)  # unknown root name -> UsageError naming the choices
        if not Path(directory).is_dir():
            raise UsageError(f"root {name}={directory}: not a directory")
        found.extend((name, rel, path, stat.S_IMODE(st.st_mode))
                     for rel, path, st in walk_captured(backend, name, Path(directory)))
    return hash_files(found, hash_workers(workers), backend.root_names, "publish")


def hash_files(found: Sequence[tuple[str, str, Path, int | None]], workers: int,
               allowed_roots: Sequence[str], source: str) -> tuple[FileRecord, ...]:
    """A record per (root, rel, local path, mode or None), checked as a reader checks them."""

    def record(item: tuple[str, str, Path, int | None]) -> FileRecord:
        root, rel, path, mode = item
        try:
            sha, size = sha256_file(path)
            mode = path.stat().st_mode & 0o777 if mode is None else mode
        except OSError as exc:
            raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
        return FileRecord(root=root, path=rel, size=size, sha256=sha, mode=mode)

    records = map_in_threads(record, found, workers)
    return validate_files([r.to_json() for r in records], allowed_roots=allowed_roots,
                          source=source)


@dataclass(frozen=True, slots=True)
class PublishOptions:
    """How ``publish_entry`` publishes. ``files``: None plans them; ``on_progress(done,
    total)``: told per blob; ``packing``: None packs nothing; ``parting``: which large files get
    part digests (every file over 24 MiB whatever the policy); ``signer`` signs the manifest;
    ``stop``: once set, ``StoppedError`` before the manifest (what reached the store is
    content-addressed and harmless)."""

    producer: Mapping[str, str] | None = None
    compile_seconds: float | None = None
    workers: int = DEFAULT_WORKERS
    files: tuple[FileRecord, ...] | None = None
    on_progress: Callable[[int, int], None] | None = None
    packing: PackPolicy | None = DEFAULT_POLICY
    parting: PartPolicy = DEFAULT_PARTS
    refresh_every: float = REFRESH_SECONDS
    signer: SigningKey | None = field(default=None, repr=False)
    stop: threading.Event | None = None


Sources = Mapping[str, tuple[FileRecord, Path]]  # sha256 -> (its record, a local file)


def publish_with(store: Store, cell: Cell, fingerprint: Fingerprint, backend: Backend,
                 roots: Mapping[str, Path], opts: PublishOptions) -> PublishResult:
    """Publish the files under ``roots`` as ``cell``'s entry: an intent, the blobs the store
    lacks, packs and part digests, the manifest if absent (first writer wins), the pointer."""
    if fingerprint.backend != backend.name:
        raise UsageError(f"fingerprint is for backend {fingerprint.backend!r}, "
                         f"not {backend.name!r}")
    files = plan_publish(backend, roots, workers=opts.workers) if opts.files is None else opts.files
    manifest = Manifest(
        cell=cell, fingerprint=fingerprint, files=files,
        producer=tuple(sorted({**default_producer(), **(opts.producer or {})}.items())),
        compile_seconds=opts.compile_seconds,
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    mkey = manifest_key(manifest.entry_key)
    sources = {f.sha256: (f, Path(roots[f.root], *f.path.split("/"))) for f in files}
    if store.has(mkey):
        return _refill(store, manifest, mkey, sources, opts)
    # The intent is in the store before any blob is looked at: a blob found present and skipped
    # is named by a fresh intent from then on, so gc spares it.
    with held_intents(store, [manifest], every=opts.refresh_every):
        groups = plan_packs(files, opts.packing) if opts.packing is not None else ()
        # Packs and part digests are built beside the blob uploads (each from the local files,
        # checked against their sha256 again); the manifest, written last, waits on all three.
        with ThreadPoolExecutor(max_workers=2) as beside:
            packed = beside.submit(_upload_packs, store, groups, sources, opts.stop)
            parted = beside.submit(_part_digests, files, sources, opts)
            uploaded, skipped, nbytes = _upload_blobs(store, sources, opts)
            packs, packs_uploaded, pack_bytes = packed.result()
            parts = parted.result()
        _check(opts.stop)  # the last safe point: past it, the entry is committed
        manifest = replace(manifest, packs=packs, parts=parts)
        if opts.signer is not None:
            manifest = sign_manifest(manifest, opts.signer)
        body = io.BytesIO()  # in pieces: never the whole manifest as dicts or twice as bytes
        body.writelines(encode_manifest_pieces(manifest))
        body.seek(0)
        created = store.put(mkey, body, if_absent=True)
        # A gc batch cleared before our intent existed may delete a blob we skipped after it
        # listed pending/: check the skipped ones once more, now that the manifest names them.
        again = {s: sources[s] for s in skipped if not store.has(blob_key(s))}
        if again:
            _upload_blobs(store, again, replace(opts, on_progress=None, stop=None))
        write_pointer(store, manifest)
    return PublishResult(manifest, created, len(uploaded), len(skipped), nbytes,
                         packs_uploaded, pack_bytes)


def _taking_options(make: Callable[P, PublishOptions]) -> Callable[
        Concatenate[Store, Cell, Fingerprint, Backend, Mapping[str, Path], P], PublishResult]:
    def publish_entry(store: Store, cell: Cell, fingerprint: Fingerprint, backend: Backend,
                      roots: Mapping[str, Path], /, *args: P.args,
                      **kwargs: P.kwargs) -> PublishResult:
        """``publish_with`` for ``PublishOptions(*args, **kwargs)``."""
        return publish_with(store, cell, fingerprint, backend, roots, make(*args, **kwargs))

    return publish_entry


publish_entry = _taking_options(PublishOptions)  # PublishOptions' fields, declared there once


def _refill(store: Store, manifest: Manifest, mkey: str, sources: Sources,
            opts: PublishOptions) -> PublishResult:
    """The entry exists: upload only the blobs it names that the store lacks or holds bad, so
    a push repairs what a gone-bad store lost."""
    try:
        named = {f.sha256 for f in decode_manifest(store.read(mkey), source=mkey).files}
    except (ManifestError, NotFoundError):
        named = set(sources)
    uploaded, skipped, nbytes = _upload_blobs(  # the entry's blobs: most likely all there
        store, {s: v for s, v in sources.items() if s in named},
        replace(opts, on_progress=None), put_first=False)
    write_pointer(store, manifest)
    return PublishResult(manifest, False, len(uploaded), len(sources) - len(uploaded), nbytes)


def _upload_blobs(store: Store, sources: Sources, opts: PublishOptions, *,
                  put_first: bool = True) -> tuple[list[str], list[str], int]:
    """Upload each blob the store lacks or holds bad; returns (uploaded, skipped, bytes)."""
    uploaded: list[str] = []
    skipped: list[str] = []

    def one(sha: str) -> tuple[str, bool]:
        record, path = sources[sha]
        key = blob_key(sha)
        # One create-only put: a fresh blob costs one request. A refused put means the store
        # holds something under the key; keep it only if it holds good, else rewrite it.
        if put_first and record.size <= PUT_FIRST_MAX and _upload_file(store, key, record, path):
            return sha, True
        if holds_good(store, key, record.size):
            return sha, False
        return sha, _upload_file(store, key, record, path)

    blobs = _in_pool(one, sorted(sources), opts.workers, opts.stop)
    for done, (sha, wrote) in enumerate(blobs, 1):
        (uploaded if wrote else skipped).append(sha)
        if opts.on_progress:
            opts.on_progress(done, len(sources))
    return uploaded, skipped, sum(sources[s][0].size for s in uploaded)


def _upload_file(store: Store, key: str, record: FileRecord, path: Path) -> bool:
    """Stream one file into the store, hashing as it goes; never commit changed bytes."""
    raw = _read_again(path, lambda p: open(p, "rb"))
    with VerifyingReader(raw, size=record.size, sha256=record.sha256,
                         name=f"{record.root}/{record.path}") as reader:
        wrote = store.put(key, reader, if_absent=True)  # type: ignore[arg-type]
        if wrote:
            try:
                reader.finish()
            except IntegrityError:
                store.delete(key)  # ours, and wrong: take it back before anyone trusts it
                raise
    return wrote


def _upload_packs(store: Store, groups: tuple[tuple[FileRecord, ...], ...], sources: Sources,
                  stop: threading.Event | None) -> tuple[tuple[PackRecord, ...], int, int]:
    """Build each pack in a temp file, its members checked again, and store it if absent;
    returns (pack records in order, packs uploaded, bytes uploaded)."""

    def one(members: tuple[FileRecord, ...]) -> tuple[PackRecord, bool]:
        whole = hashlib.sha256()
        layout = []
        with tempfile.TemporaryFile(prefix=".neffcache-pack-") as body:
            for f in members:
                path = sources[f.sha256][1]
                data = _read_again(path, Path.read_bytes)
                _check_same(path, f, hashlib.sha256(data).hexdigest(), len(data))
                layout.append(PackMember(f.sha256, body.tell(), f.size))
                whole.update(data)
                body.write(data)
            size = body.tell()
            body.seek(0)
            sha = whole.hexdigest()
            wrote = store.put(pack_key(sha), body, if_absent=True)  # type: ignore[arg-type]
        return PackRecord(sha, size, tuple(layout)), wrote

    done = list(_in_pool(one, groups, PACK_WORKERS, stop))
    wrote = [p for p, w in done if w]
    return tuple(p for p, _ in done), len(wrote), sum(p.size for p in wrote)


def _read_again(path: Path, read: Callable[[Path], T]) -> T:
    """``read(path)`` of a file being published: unreadable now is an IntegrityError."""
    try:
        return read(path)
    except OSError as exc:
        raise IntegrityError(f"{path}: vanished or unreadable while publishing: "
                             f"{exc.strerror}") from None


def _check_same(path: Path, f: FileRecord, sha: str, size: int) -> None:
    if size != f.size or sha != f.sha256:
        raise IntegrityError(f"{path}: changed while being published (sha256 or size "
                             f"differs from {f.sha256[:12]})")


def _part_digests(files: tuple[FileRecord, ...], sources: Sources, opts: PublishOptions
                  ) -> tuple[PartDigests, ...]:
    """A digest per part of each large file, its whole-file sha256 checked again."""
    policy = opts.parting

    def one(f: FileRecord) -> PartDigests:
        path = sources[f.sha256][1]
        sha, size, digests = _read_again(path, lambda p: sha256_file_parts(p, policy.part_bytes))
        _check_same(path, f, sha, size)
        return PartDigests(f.sha256, policy.part_bytes, digests)

    return tuple(_in_pool(one, needs_parts(files, policy), hash_workers(opts.workers), opts.stop))


def _in_pool(fn: Callable[[T], R], items: Iterable[T], workers: int,
             stop: threading.Event | None) -> Iterator[R]:
    """``fn`` over ``items`` on threads, results in input order; once ``stop`` is set,
    ``StoppedError`` within ``STOP_POLL_SECONDS`` (running calls end on their own)."""
    todo = list(items)
    pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(todo))))
    abandon = False
    try:
        futures = [pool.submit(fn, item) for item in todo]
        for future in futures:
            while stop is not None and not future.done():
                abandon = stop.is_set()
                _check(stop)
                wait([future], timeout=STOP_POLL_SECONDS)
            yield future.result()
    finally:
        pool.shutdown(wait=not abandon, cancel_futures=True)


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise StoppedError("publish stopped: the stop event was set")


def write_pointer(store: Store, manifest: Manifest) -> None:
    """The cell pointer, first writer wins; its digest is what ``neffcache.trust`` asks of a
    manifest that would replace this one."""
    body = {"entry_key": manifest.entry_key, "cell_id": manifest.cell.id,
            "cell_key": manifest.cell.key, "fingerprint_key": manifest.fingerprint.key,
            "fingerprint": manifest.fingerprint.to_json(),
            DIGEST_FIELD: manifest_digest(manifest)}
    store.put(cell_pointer_key(manifest.cell.key, manifest.fingerprint.key),
              io.BytesIO(canonical_json(body).encode("utf-8")), if_absent=True)
