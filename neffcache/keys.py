"""Key files (the I/O edge of ``signing``) and the ``neffcache keys`` use cases."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from neffcache.config import Settings
from neffcache.documents import Document
from neffcache.errors import ConfigError, ExitRule, UsageError
from neffcache.request_rules import checked_request
from neffcache.signing import (
    PUBLIC_PREFIX,
    PublicKey,
    SigningKey,
    generate_signing_key,
    parse_public_key,
    parse_signing_key,
)

_PEM_END = "-----END PUBLIC KEY-----"


def load_trusted_keys(items: Sequence[str]) -> tuple[PublicKey, ...]:
    """Each item a key (``ed25519:<base64>``) or a file of ``ed25519:`` lines (``#`` comments
    allowed) or PEM blocks; each key once, in order."""
    found = (k for item in items for k in (
        [parse_public_key(item, "trusted key")] if item.startswith(PUBLIC_PREFIX)
        else _keys_in_file(Path(item).expanduser())))
    return tuple({k.key_id: k for k in found}.values())  # one key_id: one key (its raw bytes)


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
    return KeyResult(key.public.text, key.public.key_id, str(out))


def show_key(request: ShowKeyRequest) -> KeyResult:
    """The public key of a private key file (PEM), or the first key of a public key file.
    Raises ConfigError (exit 2) when the file holds neither."""
    path = Path(request.path).expanduser()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    public = parse_signing_key(data, f"signing key file {path}").public \
        if b"PRIVATE KEY" in data[:64] else load_trusted_keys([str(path)])[0]
    return KeyResult(public.text, public.key_id, str(path))
