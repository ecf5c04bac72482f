"""The verify use cases: ``verify_store`` (a store's integrity) and ``verify_local_dir`` (a
restored directory re-hashed against its manifests), each from a typed request."""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from neffcache.config import read_settings
from neffcache.lifecycle import verify, verify_local
from neffcache.lifecycle.verify import VerifyStoreResult
from neffcache.lifecycle.verify_local import VerifyLocalDirResult
from neffcache.request_rules import checked_request
from neffcache.store import BLOBS, DAMAGED, PACKS, open_store
from neffcache.trust import load_trust

# Re-hashing a restored directory is disk-bound: more readers than this only contend.
LOCAL_WORKERS_MAX = 8


@checked_request
class VerifyStoreRequest:
    """What ``verify_store`` checks.

    ``store``: a store URL (None: as the CLI would, NEFFCACHE_STORE > config file > default);
    ``quick``: only check that every referenced blob and pack exists (no download);
    ``workers``: parallel reads; ``progress(done, total)``: called per blob checked.
    ``quarantine``: mark each damaged blob or pack (wrong size or sha256) with a
    ``damaged/<key>`` object, so push, copy and bundle import rewrite it instead of skipping.
    ``trusted_keys``: public keys (``ed25519:...``) or files of them; a manifest none of them
    signed is a problem (``untrusted``: a restore trusting them would refuse it). Empty:
    NEFFCACHE_TRUSTED_KEYS, the config file's ``trusted_keys``, else signatures are not checked.
    A manifest whose digest is not the one its cell pointer pins is a problem either way
    (``pin``). The gate is ``neffcache.trust``.
    """

    store: str | None = None
    quick: bool = False
    workers: int = 8
    progress: Callable[[int, int], None] | None = None
    quarantine: bool = False
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


def verify_store(request: VerifyStoreRequest) -> VerifyStoreResult:
    """Check that every manifest in the store decodes and every blob and pack it references
    exists and streams to exactly its recorded size and sha256 (and part digests); each blob
    once. Problems are collected in the result (exit 4, or 6 when objects could only not be
    read), never raised one by one. Raises UnavailableError (exit 6) when the store cannot be
    reached at all, ConfigError for a bad store URL."""
    settings = read_settings(os.environ, store=request.store)
    trust = load_trust(settings, request.trusted_keys, require=request.require_signatures)
    s = open_store(settings.store_url)
    s.check()
    result = verify.verify_store(s, quick=request.quick, workers=request.workers,
                                 progress=request.progress, trust=trust)
    if request.quarantine:
        for p in result.problems:
            if p.kind in ("size", "sha256") and p.key.startswith((BLOBS, PACKS)):
                s.put(DAMAGED + p.key, io.BytesIO(p.message.encode("utf-8")), if_absent=True)
    return result


@checked_request
class VerifyLocalDirRequest:
    """What ``verify_local_dir`` checks: ``target``, a directory ``neffcache restore`` wrote
    (it holds ``.neffcache-entries/``); ``workers`` parallel reads (at most 8 are used);
    ``progress(done, total)`` after each batch of files. ``trusted_keys``: as for
    ``VerifyStoreRequest``; with keys, an entry whose manifest copy none of them signed is a
    problem (kind ``untrusted``): its files are where the runtime reads them, and a restore
    trusting those keys removes them."""

    target: str | Path
    workers: int = 8
    progress: Callable[[int, int], None] | None = None
    trusted_keys: Sequence[str] = ()
    require_signatures: bool = False


def verify_local_dir(request: VerifyLocalDirRequest) -> VerifyLocalDirResult:
    """Re-hash every file of every entry restored into ``target`` against the manifest restore
    kept there, under the directory's restore lock (a restore running there is waited for). A
    damaged file is listed and forgotten by its root's state file, so the next restore fetches
    it again; any problem is exit 4. No store is read. Raises UsageError (exit 2) when
    ``target`` is not a directory neffcache restore wrote."""
    trust = load_trust(read_settings(os.environ), request.trusted_keys,
                       require=request.require_signatures)
    return verify_local.verify_local(Path(request.target),
                                     workers=min(request.workers, LOCAL_WORKERS_MAX),
                                     progress=request.progress, trust=trust)
