"""The signing-key use cases: ``generate_key`` (a new Ed25519 key file) and ``show_key`` (the
public key a fleet trusts, from a private or public key file)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from neffcache.documents import Document
from neffcache.errors import ConfigError, ExitRule, UsageError
from neffcache.key_files import load_signing_key, load_trusted_keys, write_signing_key
from neffcache.request_rules import checked_request
from neffcache.signing import PublicKey, generate_signing_key


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
        head = path.read_bytes()[:64]
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it ({exc.strerror})") from None
    if b"PRIVATE KEY" in head:
        key = load_signing_key(str(path))
        assert key is not None
        return _result(key.public, path)
    return _result(load_trusted_keys([str(path)])[0], path)


def _result(public: PublicKey, path: Path) -> KeyResult:
    return KeyResult(public.text, public.key_id, str(path))
