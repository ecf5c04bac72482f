"""The trust gate every manifest passes before it is installed, copied, imported or repaired."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from neffcache.config import Settings
from neffcache.errors import ConfigError, NeffcacheError, UntrustedEntryError
from neffcache.hashing import is_sha256
from neffcache.keys import load_trusted_keys
from neffcache.manifest import DIGEST_FIELD, Manifest, entry_key_for, manifest_digest
from neffcache.signing import PublicKey, check_trusted, signed_digest_trusted
from neffcache.store import CELLS, Store, cell_pointer_key, pointer_parts
from neffcache.thread_pool import map_in_threads

NO_KEYS_HINT = "configure trusted keys: --trusted-key KEY, NEFFCACHE_TRUSTED_KEYS or the " \
    "config file's trusted_keys"


@dataclass(frozen=True, slots=True)
class TrustPolicy:
    """The host's trusted keys: with any, every manifest must be signed by one of them (the
    same refusal in every command); with none, nothing is checked."""

    keys: tuple[PublicKey, ...] = ()

    def admit(self, manifest: Manifest, source: str) -> None:
        """UntrustedEntryError: unsigned, signed by a key not trusted, or changed since."""
        check_trusted(manifest, self.keys, source)

    def admit_replacement(self, manifest: Manifest, source: str, pin: str | None) -> None:
        """``admit``, and the proof a manifest needs to replace one a store lists: the digest
        ``pin`` its publisher left must match, and without keys there must be a pin."""
        self.admit(manifest, source)
        check_pin(manifest, source, pin)
        if pin is None and not self.keys:
            raise UntrustedEntryError(f"{source} (cell {manifest.cell.id}): nothing proves it "
                                      f"is the publisher's (no trusted key is configured and "
                                      f"{pointer_of(manifest)} pins no digest)",
                                      hint=NO_KEYS_HINT)

    def vouches_for_copy(self, signature: object, digest: object) -> bool:
        """Whether a local copy's raw ``signature`` and ``manifest_sha256`` fields are trusted."""
        return not self.keys or signed_digest_trusted(signature, digest, self.keys)


def check_pin(manifest: Manifest, source: str, pin: str | None) -> None:
    """UntrustedEntryError when ``pin`` (left in the cell pointer) is not the manifest's digest."""
    if pin is not None and (digest := manifest_digest(manifest)) != pin:
        raise UntrustedEntryError(f"{source} (cell {manifest.cell.id}): its digest "
                                  f"{digest[:12]} is not the {pin[:12]} its publisher pinned "
                                  f"in {pointer_of(manifest)} (rewritten after publish)")


class TrustFlags(Protocol):
    """A request's trust flags (restore, verify, repair, copy, bundle import)."""

    @property
    def trusted_keys(self) -> Sequence[str]: ...

    @property
    def require_signatures(self) -> bool: ...


def load_trust(settings: Settings, flags: TrustFlags | None = None) -> TrustPolicy:
    """The policy from the request's keys (or files of them), else the settings' trusted
    keys; ConfigError when signatures are required and no key is configured (fail closed)."""
    keys, require = (flags.trusted_keys, flags.require_signatures) if flags else ((), False)
    trusted = load_trusted_keys(tuple(keys) or settings.trusted_keys)
    if not trusted and (require or settings.require_signatures):
        raise ConfigError("signatures are required (--require-signatures / "
                          "NEFFCACHE_REQUIRE_SIGNATURES / require_signatures) but no trusted "
                          "key is configured: refusing every entry", hint=NO_KEYS_HINT)
    return TrustPolicy(trusted)


def pointer_of(manifest: Manifest) -> str:
    return cell_pointer_key(manifest.cell.key, manifest.fingerprint.key)


def admit_into(store: Store, manifest: Manifest, source: str, trust: TrustPolicy) -> None:
    """``admit`` a new entry, ``admit_replacement`` one the store's cell pointer names."""
    listed, pin = _read_pointer(store, pointer_of(manifest), manifest.entry_key)
    if listed:
        trust.admit_replacement(manifest, source, pin)
    else:
        trust.admit(manifest, source)


def read_pins(store: Store, workers: int = 8) -> dict[str, str | None]:
    """Entry key -> pinned digest (or None) of each cell pointer naming its own entry."""

    def one(key: str) -> tuple[str, str | None] | None:
        pointer = pointer_parts(key)
        if pointer is None:
            return None
        entry = entry_key_for(*pointer)
        names, pin = _read_pointer(store, key, entry)
        return (entry, pin) if names else None

    return dict(p for p in map_in_threads(one, list(store.list(CELLS)), workers) if p)


def _read_pointer(store: Store, key: str, entry: str) -> tuple[bool, str | None]:
    try:
        doc = json.loads(store.read(key))
    except (NeffcacheError, ValueError):
        return False, None
    if not isinstance(doc, dict) or doc.get("entry_key") != entry:
        return False, None
    pin = doc.get(DIGEST_FIELD)
    return True, pin if is_sha256(pin) else None


def signers(manifests: Iterable[Manifest]) -> tuple[str, ...]:
    return tuple(sorted({m.signature.key_id for m in manifests if m.signature is not None}))


UNCHECKED = TrustPolicy()  # no key configured: nothing is checked (the default of every call)
