"""Signed entries, pure: keys parse, a signature survives encode/decode, trust refuses what it
must (unsigned, another key, a field changed after signing), and rotation trusts several keys."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from pathlib import Path

import pytest

from neffcache.documents import digest_of
from neffcache.errors import ConfigError, ManifestError, UntrustedEntryError
from neffcache.fingerprint import build_fingerprint
from neffcache.keys import load_signing_key, load_trusted_keys, write_signing_key
from neffcache.manifest import (
    DIGEST_FIELD,
    FileRecord,
    Manifest,
    decode_manifest,
    encode_manifest,
    manifest_digest,
)
from neffcache.matrix import Cell
from neffcache.signing import (
    check_trusted,
    generate_signing_key,
    parse_public_key,
    parse_signing_key,
    sign_manifest,
    signed_digest_trusted,
)

CELL = Cell.from_json({"pipeline": "p", "class": "diffusers:Flux2KleinPipeline", "model": "/m",
                       "revision": None, "dtype": "bfloat16", "mode": "compile",
                       "components": ["transformer"], "height": 64, "width": 64, "batch": 1,
                       "tp": 1, "backend": "neuron"})
FP = build_fingerprint("neuron", {"target": "trn2"})
SHA = "ab" * 32


def manifest(sha: str = SHA, size: int = 5) -> Manifest:
    return Manifest(cell=CELL, fingerprint=FP,
                    files=(FileRecord("neff", "a/b.neff", size, sha),),
                    created_at="2026-12-03T00:00:00Z")


def test_a_signature_survives_encode_and_decode_and_verifies() -> None:
    _, key = generate_signing_key()
    signed = sign_manifest(manifest(), key)
    back = decode_manifest(encode_manifest(signed), allowed_roots=["neff"])
    assert back.signature == signed.signature and back.signature is not None
    assert back.signature.key_id == key.public.key_id
    check_trusted(back, [key.public], "m")  # no exception: trusted


def test_without_trusted_keys_anything_passes_even_unsigned() -> None:
    check_trusted(manifest(), [], "m")


def test_an_unsigned_entry_is_refused_naming_the_entry_and_the_keys() -> None:
    _, key = generate_signing_key()
    with pytest.raises(UntrustedEntryError) as exc:
        check_trusted(manifest(), [key.public], "manifests/k.json")
    msg = str(exc.value)
    assert "manifests/k.json" in msg and "not signed" in msg and key.public.key_id in msg
    assert "\n" not in msg


def test_an_entry_signed_by_another_key_is_refused_naming_that_key() -> None:
    _, ours = generate_signing_key()
    _, theirs = generate_signing_key()
    signed = sign_manifest(manifest(), theirs)
    with pytest.raises(UntrustedEntryError) as exc:
        check_trusted(signed, [ours.public], "manifests/k.json")
    assert theirs.public.key_id in str(exc.value) and "not trusted" in str(exc.value)


def test_rotation_trusts_entries_of_either_key() -> None:
    _, old = generate_signing_key()
    _, new = generate_signing_key()
    for key in (old, new):
        check_trusted(sign_manifest(manifest(), key), [new.public, old.public], "m")


@pytest.mark.parametrize("change", ["sha256", "size", "path", "created_at"])
def test_a_manifest_changed_after_signing_is_refused(change: str) -> None:
    """The attacker rewrites the manifest and recomputes its digest: the signature breaks."""
    _, key = generate_signing_key()
    doc = json.loads(encode_manifest(sign_manifest(manifest(), key)))
    if change == "created_at":
        doc["created_at"] = "2030-01-01T00:00:00Z"
    else:
        doc["files"][0][change] = {"sha256": "cd" * 32, "size": 6, "path": "evil.neff"}[change]
    body = {k: v for k, v in doc.items() if k not in (DIGEST_FIELD, "signature")}
    doc[DIGEST_FIELD] = digest_of(body)
    tampered = decode_manifest(json.dumps(doc), allowed_roots=["neff"])
    with pytest.raises(UntrustedEntryError, match="changed after signing"):
        check_trusted(tampered, [key.public], "m")


def test_a_signature_moved_onto_another_manifest_is_refused() -> None:
    _, key = generate_signing_key()
    sig = sign_manifest(manifest(), key).signature
    other = replace(manifest(sha="cd" * 32), signature=sig)
    with pytest.raises(UntrustedEntryError):
        check_trusted(other, [key.public], "m")


@pytest.mark.parametrize("raw", [
    "not an object", {"key_id": "x"}, {"key_id": "0" * 16, "ed25519": "short"},
    {"key_id": "0" * 16, "ed25519": "A" * 86 + "==", "extra": 1},
    {"key_id": "Z" * 16, "ed25519": "A" * 86 + "=="},
])
def test_a_hostile_signature_field_is_a_manifest_error(raw: object) -> None:
    doc = json.loads(encode_manifest(manifest()))
    doc["signature"] = raw
    with pytest.raises(ManifestError, match="signature"):
        decode_manifest(json.dumps(doc))


def test_a_signature_without_a_digest_is_refused() -> None:
    _, key = generate_signing_key()
    doc = json.loads(encode_manifest(sign_manifest(manifest(), key)))
    del doc[DIGEST_FIELD]
    with pytest.raises(ManifestError, match="without manifest_sha256"):
        decode_manifest(json.dumps(doc))


def test_the_unsigned_encoding_is_unchanged_by_the_signature_support() -> None:
    """Manifests published without a key are byte-identical to before (no signature field)."""
    doc = json.loads(encode_manifest(manifest()))
    assert "signature" not in doc and doc[DIGEST_FIELD] == manifest_digest(manifest())


def test_public_keys_parse_from_text_and_pem_and_bad_ones_are_config_errors() -> None:
    from cryptography.hazmat.primitives import serialization

    _, key = generate_signing_key()
    assert parse_public_key(key.public.text, "k") == key.public
    pem = key.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    assert parse_public_key(pem.decode(), "k") == key.public
    for bad in ("ed25519:", "ed25519:" + base64.b64encode(b"x" * 31).decode(), "rsa:AAAA",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"):
        with pytest.raises(ConfigError):
            parse_public_key(bad, "k")


def test_key_files_round_trip_and_a_key_file_is_never_overwritten(tmp_path: Path) -> None:
    pem, key = generate_signing_key()
    path = tmp_path / "signing.pem"
    write_signing_key(path, pem)
    assert path.stat().st_mode & 0o777 == 0o600
    loaded = load_signing_key(str(path))
    assert loaded is not None and loaded.public == key.public
    assert "BEGIN" not in repr(loaded)  # the secret never reaches a log through repr
    from neffcache.errors import UsageError
    with pytest.raises(UsageError, match="never overwritten"):
        write_signing_key(path, b"other")
    assert path.read_bytes() == pem
    with pytest.raises(ConfigError, match="not an unencrypted Ed25519 private key"):
        parse_signing_key(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "f")
    with pytest.raises(ConfigError, match="cannot read"):
        load_signing_key(str(tmp_path / "absent.pem"))


def test_a_trusted_key_file_holds_several_keys_with_comments(tmp_path: Path) -> None:
    keys = [generate_signing_key()[1].public for _ in range(3)]
    f = tmp_path / "fleet.pub"
    f.write_text(f"# CI 2026\n{keys[0].text}\n\n# CI 2027\n{keys[1].text}\n")
    got = load_trusted_keys([str(f), keys[2].text, keys[0].text])
    assert [k.key_id for k in got] == [keys[0].key_id, keys[1].key_id, keys[2].key_id]
    (tmp_path / "empty.pub").write_text("# nothing\n")
    with pytest.raises(ConfigError, match="no complete public key"):
        load_trusted_keys([str(tmp_path / "empty.pub")])


def test_a_local_copy_is_trusted_only_with_a_trusted_signature_of_its_digest() -> None:
    _, key = generate_signing_key()
    _, other = generate_signing_key()
    doc = json.loads(encode_manifest(sign_manifest(manifest(), key)))
    assert signed_digest_trusted(doc["signature"], doc[DIGEST_FIELD], [key.public])
    assert not signed_digest_trusted(doc["signature"], doc[DIGEST_FIELD], [other.public])
    assert not signed_digest_trusted(None, doc[DIGEST_FIELD], [key.public])
    assert not signed_digest_trusted(doc["signature"], "00" * 32, [key.public])
    assert not signed_digest_trusted({"bad": 1}, doc[DIGEST_FIELD], [key.public])
