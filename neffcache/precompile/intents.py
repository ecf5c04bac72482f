"""Publish intents: ``pending/`` notes naming the blobs a publish relies on, so gc spares them."""

from __future__ import annotations

import contextlib
import io
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from neffcache.documents import canonical_json
from neffcache.errors import NeffcacheError, UnavailableError
from neffcache.manifest import Manifest
from neffcache.precompile.heartbeat import Ticker
from neffcache.store import PENDING, Store

# The shortest grace gc accepts without --force. A live intent is at most REFRESH_SECONDS old
# plus one renewal that may take as long as the store client's retries (3 min in s3.py); ten
# minutes also absorbs a few minutes of clock skew between the publishing host and gc's.
GRACE_FLOOR_SECONDS = 600.0
REFRESH_SECONDS = GRACE_FLOOR_SECONDS / 4


def write_intent(store: Store, manifest: Manifest) -> str:
    """Announce the blobs a publish relies on, before touching any (see gc): entry key, when,
    where, and every blob it names, under a new key; returns the key."""
    key = f"{PENDING}{manifest.entry_key}.{uuid.uuid4().hex[:16]}.json"
    body: dict[str, Any] = {"entry_key": manifest.entry_key, "created_at": time.time(),
                            "host": socket.gethostname(),
                            "blobs": sorted({f.sha256 for f in manifest.files})}
    store.put(key, io.BytesIO(canonical_json(body).encode("utf-8")), if_absent=True)
    return key


class IntentHolder(Ticker):
    """Holds one intent per manifest: written at construction (so before any blob is looked
    at), renewed every ``every`` seconds, deleted by ``release``."""

    def __init__(self, store: Store, manifests: Sequence[Manifest], *,
                 every: float = REFRESH_SECONDS) -> None:
        super().__init__(every, "neffcache-intents")
        self.store = store
        self.manifests = tuple(manifests)
        self.keys = [write_intent(store, m) for m in self.manifests]
        self.renewals = 0  # intents rewritten (for tests and diagnostics)
        self.failures = 0  # renewals that failed: the previous intent stands, the next tick retries
        if self.manifests:
            self.start()

    def tick(self) -> bool:
        for i, manifest in enumerate(self.manifests):
            if self._stop.is_set():
                return False
            # The fresh intent is written before the previous one goes, so a gc that listed
            # pending/ before this renewal reads the new key too.
            try:
                fresh = write_intent(self.store, manifest)
            except NeffcacheError:
                self.failures += 1
                continue
            old, self.keys[i] = self.keys[i], fresh
            self.renewals += 1
            with contextlib.suppress(NeffcacheError):  # a leftover expires after the grace
                self.store.delete(old)
        return True

    def release(self) -> None:
        """Stop renewing and delete the current intents (a failed delete expires on its own)."""
        self.stop()
        for key in self.keys:
            with contextlib.suppress(UnavailableError):
                self.store.delete(key)


@contextlib.contextmanager
def held_intents(store: Store, manifests: Sequence[Manifest], *,
                 every: float = REFRESH_SECONDS) -> Iterator[IntentHolder]:
    """Intents for ``manifests`` in the store for as long as the block runs, kept fresh."""
    holder = IntentHolder(store, manifests, every=every)
    try:
        yield holder
    finally:
        holder.release()
