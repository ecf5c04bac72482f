"""Ed25519 signatures over a manifest's digest, the trust check, key formats and key files."""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neffcache.config import Settings
from neffcache.documents import Document
from neffcache.errors import ConfigError, ExitRule, ManifestError, UntrustedEntryError, UsageError
from neffcache.manifest import Manifest, Signature, manifest_digest, signature_from_json
from neffcache.request_rules import checked_request

PUBLIC_PREFIX = "ed25519:"
MESSAGE_PREFIX = b"neffcache-manifest-v1:"
_PEM_PUBLIC = "-----BEGIN PUBLIC KEY-----"
_PEM_END = "-----END PUBLIC KEY-----"


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


def load_trusted_keys(items: Sequence[str]) -> tuple[PublicKey, ...]:
    """Each item a key (``ed25519:<base64>``) or a file of ``ed25519:`` lines (``#`` comments
    allowed) or PEM blocks; each key once, in order."""
    keys: dict[str, PublicKey] = {}
    for item in items:
        found = [parse_public_key(item, "trusted key")] if item.startswith(PUBLIC_PREFIX) \
            else _keys_in_file(Path(item).expanduser())
        for k in found:
            keys.setdefault(k.key_id, k)
    return tuple(keys.values())


def _keys_in_file(path: Path) -> list[PublicKey]:
    try:
        text = path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not ASCII text"
        raise ConfigError(f"trusted key file {path}: cannot read it ({why})") from None
    keys, pem = [], None
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if pem is not None:
            pem.append(line)
            if line == _PEM_END:
                keys.append(parse_public_key("\n".join(pem), f"{path}"))
                pem = None
        elif line.startswith("-----BEGIN"):
            pem = [line]
        elif line and not line.startswith("#"):
            keys.append(parse_public_key(line, f"{path}:{n}"))
    if pem is not None or not keys:
        raise ConfigError(f"trusted key file {path}: no complete public key in it")
    return keys


def load_signing_key(path: str | None, pem: str | None = None) -> SigningKey | None:
    """The key in file ``path``, else the PEM text ``pem`` (NEFFCACHE_SIGNING_KEY), else None."""
    if path:
        try:
            data = Path(path).expanduser().read_bytes()
        except OSError as exc:
            raise ConfigError(f"signing key file {path}: cannot read it ({exc.strerror})"
                              ) from None
        return parse_signing_key(data, f"signing key file {path}")
    if pem:
        return parse_signing_key(pem.encode("ascii", "replace"), "NEFFCACHE_SIGNING_KEY")
    return None


def signer_for(path: str | Path | None, settings: Settings) -> SigningKey | None:
    """The key a publish signs with: file ``path``, else the settings', else None (unsigned)."""
    if path:
        return load_signing_key(str(path))
    return load_signing_key(settings.signing_key_file, settings.signing_key_pem)


def write_signing_key(path: Path, pem: bytes) -> None:
    """Durably, mode 0600, never over an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        raise UsageError(f"{path} exists: a signing key is never overwritten "
                         "(choose another path, or remove it yourself)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot create it ({exc.strerror})") from None
    try:
        os.write(fd, pem)
        os.fsync(fd)
    finally:
        os.close(fd)


@checked_request
class GenerateKeyRequest:
    """``out``: the private key file to create (mode 0600; an existing file is never
    overwritten). ``public_out``: also write the public key there (one ``ed25519:`` line)."""

    out: str | Path
    public_out: str | Path | None = None


@checked_request
class ShowKeyRequest:
    """``path``: a private key (PEM) or a file of public keys; the public half is shown."""

    path: str | Path


@dataclass(frozen=True, slots=True)
class KeyResult(ExitRule, Document):
    """A key's public half: ``public_key`` (``ed25519:<base64>``, what NEFFCACHE_TRUSTED_KEYS
    and ``restore --trusted-key`` take) and ``key_id`` (what signatures and errors name).
    ``error()`` is always None: a bad file raises."""

    public_key: str
    key_id: str
    path: str


def generate_key(request: GenerateKeyRequest) -> KeyResult:
    """Make a new Ed25519 signing key in ``request.out`` and return its public half. Raises
    UsageError (exit 2) when the file exists or cannot be created."""
    pem, key = generate_signing_key()
    out = Path(request.out).expanduser()
    write_signing_key(out, pem)
    if request.public_out is not None:
        try:
            Path(request.public_out).expanduser().write_text(key.public.text + "\n")
        except OSError as exc:
            raise UsageError(f"{request.public_out}: cannot write it ({exc.strerror})"
                             ) from None
    return _result(key.public, out)


def show_key(request: ShowKeyRequest) -> KeyResult:
    """The public key of a private key file (PEM), or the first key of a public key file.
    Raises ConfigError (exit 2) when the file holds neither."""
    path = Path(request.path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    if b"PRIVATE KEY" in data[:64]:
        return _result(parse_signing_key(data, f"signing key file {path}").public, path)
    return _result(load_trusted_keys([str(path)])[0], path)


def _result(public: PublicKey, path: Path) -> KeyResult:
    return KeyResult(public.text, public.key_id, str(path))
