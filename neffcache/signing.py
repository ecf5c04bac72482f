"""Ed25519 signatures over a manifest's digest, the key formats, and the trust check (pure)."""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from neffcache.errors import ConfigError, ManifestError, UntrustedEntryError
from neffcache.manifest import Manifest, Signature, manifest_digest, signature_from_json

PUBLIC_PREFIX = "ed25519:"
MESSAGE_PREFIX = b"neffcache-manifest-v1:"
_PEM_PUBLIC = "-----BEGIN PUBLIC KEY-----"


@dataclass(frozen=True, slots=True)
class PublicKey:
    """An Ed25519 public key (32 raw bytes)."""

    raw: bytes

    @property
    def key_id(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()[:16]

    @property
    def text(self) -> str:
        return PUBLIC_PREFIX + base64.b64encode(self.raw).decode("ascii")


@dataclass(frozen=True, slots=True)
class SigningKey:
    """An Ed25519 private key and its public half; its repr never shows the secret."""

    public: PublicKey
    private: Any = field(repr=False)  # cryptography's Ed25519PrivateKey


def parse_public_key(text: str, source: str) -> PublicKey:
    """``ed25519:<base64>`` or a PEM ``PUBLIC KEY`` block; anything else is a ConfigError."""
    text = text.strip()
    if text.startswith(PUBLIC_PREFIX):
        try:
            raw = base64.b64decode(text[len(PUBLIC_PREFIX):], validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ConfigError(f"{source}: not an Ed25519 public key (expected ed25519: and "
                              "the base64 of 32 bytes)")
        return PublicKey(raw)
    if text.startswith(_PEM_PUBLIC):
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            key = None
        if not isinstance(key, Ed25519PublicKey):
            raise ConfigError(f"{source}: not an Ed25519 public key in PEM")
        return PublicKey(key.public_bytes_raw())
    raise ConfigError(f"{source}: expected a public key written ed25519:<base64> or a PEM "
                      "PUBLIC KEY block (neffcache keys generate prints one)")


def parse_signing_key(data: bytes, source: str) -> SigningKey:
    """An unencrypted Ed25519 private key in PEM (PKCS#8); the error never quotes the file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{source}: not an unencrypted Ed25519 private key in PEM "
                          "(make one with `neffcache keys generate`)")
    return SigningKey(PublicKey(key.public_key().public_bytes_raw()), key)


def generate_signing_key() -> tuple[bytes, SigningKey]:
    """A new key: its PKCS#8 PEM (to keep secret) and the key."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    pem = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption())
    return pem, parse_signing_key(pem, "a new key")


def signed_message(manifest: Manifest) -> bytes:
    return MESSAGE_PREFIX + manifest_digest(manifest).encode("ascii")


def sign_manifest(manifest: Manifest, key: SigningKey) -> Manifest:
    value = key.private.sign(signed_message(manifest))
    return replace(manifest, signature=Signature(key.public.key_id,
                                                 base64.b64encode(value).decode("ascii")))


def check_trusted(manifest: Manifest, trusted: Sequence[PublicKey], source: str) -> None:
    """UntrustedEntryError unless no key is trusted or one of ``trusted`` signed this manifest."""
    if not trusted:
        return
    what = f"{source} (cell {manifest.cell.id})"
    sig = manifest.signature
    if sig is None:
        raise UntrustedEntryError(f"{what}: not signed, and keys {_ids(trusted)} are "
                                  "required", hint="publish it again with a signing key")
    key = next((k for k in trusted if k.key_id == sig.key_id), None)
    if key is None:
        raise UntrustedEntryError(f"{what}: signed by key {sig.key_id}, which is not "
                                  f"trusted (trusted: {_ids(trusted)})")
    if not verifies(key, sig, signed_message(manifest)):
        raise UntrustedEntryError(f"{what}: the signature by key {sig.key_id} does not match "
                                  "the manifest (changed after signing)")


def signed_digest_trusted(raw_signature: Any, digest: Any, trusted: Sequence[PublicKey]) -> bool:
    """Whether a raw ``signature`` field signs ``digest`` (taken as written: for local copies)."""
    try:
        sig = signature_from_json(raw_signature, "manifest")
    except ManifestError:
        return False
    key = next((k for k in trusted if sig is not None and k.key_id == sig.key_id), None)
    return key is not None and sig is not None and isinstance(digest, str) \
        and verifies(key, sig, MESSAGE_PREFIX + digest.encode("ascii", "replace"))


def verifies(key: PublicKey, sig: Signature, message: bytes) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    try:
        Ed25519PublicKey.from_public_bytes(key.raw).verify(base64.b64decode(sig.ed25519),
                                                            message)
    except (InvalidSignature, ValueError, binascii.Error):
        return False
    return True


def _ids(keys: Sequence[PublicKey]) -> str:
    return ", ".join(k.key_id for k in keys)
