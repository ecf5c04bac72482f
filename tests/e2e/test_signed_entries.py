"""Signed entries end to end, on S3 (moto server), through the real CLI: push signs, restore
with trusted keys refuses an unsigned entry, another key's, a manifest changed after signing
and a blob changed after signing (exit 4, one line naming the entry and the key); rotation
trusts two keys; no keys configured behaves as before; copy and bundles carry signatures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neffcache.documents import digest_of
from neffcache.manifest import DIGEST_FIELD
from tests.e2e.conftest import CELL_64, CELL_128, Cli, restored_tree, split_url

pytestmark = pytest.mark.s3


def make_key(cli: Cli, tmp_path: Path, name: str) -> tuple[Path, str, str]:
    """A new key: (private key file, public key text, key id)."""
    r = cli("keys", "generate", "--out", str(tmp_path / f"{name}.pem"), "--json")
    assert r.code == 0, r.stderr
    return tmp_path / f"{name}.pem", r.json["public_key"], r.json["key_id"]


def push(cli: Cli, matrix: Path, tmp_path: Path, cell: str, data: bytes,
         key: Path | None) -> dict[str, Any]:
    src = tmp_path / f"src-{abs(hash((cell, data)))}"
    (src / "m").mkdir(parents=True)
    (src / "m" / "model.neff").write_bytes(data)
    args = ["--signing-key", str(key)] if key is not None else []
    r = cli("push", "--matrix", str(matrix), "--cell", cell, "--root", f"neff={src}",
            "--json", *args)
    assert r.code == 0, r.stderr
    return r.json  # type: ignore[no-any-return]


def restore(cli: Cli, matrix: Path, out: Path, *trusted: str, cells: str = CELL_64,
            env: dict[str, str] | None = None) -> Any:
    args = [a for k in trusted for a in (("--trusted-key", k) if k != "--json" else (k,))]
    return cli("restore", str(matrix), "--to", str(out), "--cells", cells, "--report-to",
               "none", *args, env=env)


def manifest_object(s3: Any, s3_url: str, entry_key: str) -> tuple[str, str, dict[str, Any]]:
    bucket, prefix = split_url(s3_url)
    key = f"{prefix}/manifests/{entry_key}.json"
    return bucket, key, json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def test_a_signed_entry_restores_with_its_key_trusted_and_an_unsigned_one_is_refused(
        cli: Cli, matrix: Path, tmp_path: Path) -> None:
    key, public, key_id = make_key(cli, tmp_path, "ci")
    signed = push(cli, matrix, tmp_path, CELL_64, b"signed neff", key)
    assert signed["signed_by"] == key_id
    unsigned = push(cli, matrix, tmp_path, CELL_128, b"unsigned neff", None)
    assert unsigned["signed_by"] is None
    listed = cli("ls", "--json")
    assert listed.code == 0, listed.stderr
    assert {e["entry_key"]: e["signed_by"] for e in listed.json["entries"]} == {
        signed["entry_key"]: key_id, unsigned["entry_key"]: None}

    ok = restore(cli, matrix, tmp_path / "ok", public, "--json")
    assert ok.code == 0, ok.stderr
    assert ok.json["signers"] == [key_id] and ok.json["signatures_checked"] is True
    assert restored_tree(tmp_path / "ok" / "neff") == {"m/model.neff": b"signed neff"}

    refused = restore(cli, matrix, tmp_path / "no", public, cells=CELL_128)
    assert refused.code == 4, refused.stderr
    line = refused.stderr.strip().splitlines()[0]
    assert unsigned["entry_key"] in line and "not signed" in line and key_id in line
    assert not (tmp_path / "no" / "neff" / "m" / "model.neff").exists()

    # Without trusted keys the unsigned entry restores; a signed one says who signed it.
    plain = restore(cli, matrix, tmp_path / "plain", cells=CELL_128)
    assert plain.code == 0, plain.stderr
    named = restore(cli, matrix, tmp_path / "named")
    assert named.code == 0 and f"signed by key(s) {key_id}" in named.stderr, named.stderr


def test_an_entry_signed_by_an_untrusted_key_is_refused_naming_the_key(
        cli: Cli, matrix: Path, tmp_path: Path) -> None:
    _, trusted, trusted_id = make_key(cli, tmp_path, "ci")
    rogue, _, rogue_id = make_key(cli, tmp_path, "rogue")
    entry = push(cli, matrix, tmp_path, CELL_64, b"rogue neff", rogue)
    r = restore(cli, matrix, tmp_path / "out", trusted)
    assert r.code == 4
    line = r.stderr.strip().splitlines()[0]
    assert entry["entry_key"] in line and rogue_id in line and "not trusted" in line
    assert trusted_id in line
    assert not (tmp_path / "out" / "neff" / "m" / "model.neff").exists()


def test_rotation_two_trusted_keys_from_the_environment_and_a_key_file(
        cli: Cli, matrix: Path, tmp_path: Path) -> None:
    old, old_pub, _ = make_key(cli, tmp_path, "old")
    new, new_pub, _ = make_key(cli, tmp_path, "new")
    push(cli, matrix, tmp_path, CELL_64, b"by the old key", old)
    push(cli, matrix, tmp_path, CELL_128, b"by the new key", new)
    fleet = tmp_path / "fleet.pub"
    fleet.write_text(f"# rotating 2026-12\n{new_pub}\n{old_pub}\n")
    both = f"{CELL_64} {CELL_128}".split()
    r = cli("restore", str(matrix), "--to", str(tmp_path / "a"), "--report-to", "none",
            "--cells", both[0], "--cells", both[1], env={"NEFFCACHE_TRUSTED_KEYS": str(fleet)})
    assert r.code == 0, r.stderr
    # The old key dropped: its entry is refused, the new key's still restores.
    only_new = restore(cli, matrix, tmp_path / "b", new_pub, cells=CELL_64)
    assert only_new.code == 4 and "not trusted" in only_new.stderr
    assert restore(cli, matrix, tmp_path / "c", new_pub, cells=CELL_128).code == 0


def test_a_manifest_changed_after_signing_is_refused(cli: Cli, matrix: Path, tmp_path: Path,
                                                     s3: Any, s3_url: str) -> None:
    """Someone with write access to the prefix points the signed entry at their own blob and
    recomputes the manifest's own digest: the signature no longer matches."""
    key, public, key_id = make_key(cli, tmp_path, "ci")
    entry = push(cli, matrix, tmp_path, CELL_64, b"the real neff", key)
    evil = push(cli, matrix, tmp_path, CELL_128, b"evil neff!!!!", None)
    _, _, evil_doc = manifest_object(s3, s3_url, evil["entry_key"])
    bucket, mkey, doc = manifest_object(s3, s3_url, entry["entry_key"])
    doc["files"][0].update(sha256=evil_doc["files"][0]["sha256"],
                           size=evil_doc["files"][0]["size"])
    doc.pop("packs", None)
    doc[DIGEST_FIELD] = digest_of({k: v for k, v in doc.items()
                                   if k not in (DIGEST_FIELD, "signature")})
    s3.put_object(Bucket=bucket, Key=mkey, Body=json.dumps(doc).encode())
    r = restore(cli, matrix, tmp_path / "out", public)
    assert r.code == 4
    line = r.stderr.strip().splitlines()[0]
    assert entry["entry_key"] in line and key_id in line and "changed after signing" in line
    assert not (tmp_path / "out" / "neff" / "m" / "model.neff").exists()


def test_a_blob_changed_after_signing_is_refused(cli: Cli, matrix: Path, tmp_path: Path,
                                                 s3: Any, s3_url: str) -> None:
    """The manifest is intact and trusted; the blob it names was replaced: the signed sha256
    catches it and nothing is installed."""
    key, public, _ = make_key(cli, tmp_path, "ci")
    entry = push(cli, matrix, tmp_path, CELL_64, b"the real neff", key)
    bucket, _, doc = manifest_object(s3, s3_url, entry["entry_key"])
    _, prefix = split_url(s3_url)
    sha = doc["files"][0]["sha256"]
    for listed in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]:
        if listed["Key"].endswith(sha) or "/packs/" in listed["Key"]:
            s3.put_object(Bucket=bucket, Key=listed["Key"], Body=b"the evil neff")
    r = restore(cli, matrix, tmp_path / "out", public)
    assert r.code == 4, r.stderr
    assert "sha256" in r.stderr
    assert not (tmp_path / "out" / "neff" / "m" / "model.neff").exists()


def test_trust_added_later_refuses_an_unsigned_entry_already_in_place(
        cli: Cli, matrix: Path, tmp_path: Path) -> None:
    """The store-free no-op path honours the keys too: a local copy restored before keys were
    required is judged by the store again, which refuses the unsigned entry."""
    _, public, _ = make_key(cli, tmp_path, "ci")
    push(cli, matrix, tmp_path, CELL_64, b"unsigned neff", None)
    out = tmp_path / "out"
    assert restore(cli, matrix, out).code == 0
    r = restore(cli, matrix, out, public)
    assert r.code == 4 and "not signed" in r.stderr


def test_copy_and_bundles_carry_the_signature(cli: Cli, matrix: Path, tmp_path: Path,
                                              s3_url: str) -> None:
    key, public, _ = make_key(cli, tmp_path, "ci")
    push(cli, matrix, tmp_path, CELL_64, b"signed neff", key)
    local = tmp_path / "copy"
    copied = cli("copy", "--all", "--from", s3_url, "--to", str(local))
    assert copied.code == 0, copied.stderr
    bundle = tmp_path / "e.bundle"
    exported = cli("bundle", "export", "--all", "--output", str(bundle))
    assert exported.code == 0, exported.stderr
    via_copy = restore(cli, matrix, tmp_path / "a", public, env={"NEFFCACHE_STORE": str(local)})
    assert via_copy.code == 0, via_copy.stderr
    via_bundle = cli("restore", str(matrix), "--to", str(tmp_path / "b"), "--cells", CELL_64,
                     "--from-bundle", str(bundle), "--trusted-key", public)
    assert via_bundle.code == 0, via_bundle.stderr
    assert restored_tree(tmp_path / "b" / "neff") == {"m/model.neff": b"signed neff"}


def test_a_bad_signing_key_fails_before_anything_is_published(cli: Cli, matrix: Path,
                                                              tmp_path: Path) -> None:
    bad = tmp_path / "bad.pem"
    bad.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    src = tmp_path / "src"
    src.mkdir()
    (src / "x.neff").write_bytes(b"x")
    r = cli("push", "--matrix", str(matrix), "--cell", CELL_64, "--root", f"neff={src}",
            "--signing-key", str(bad))
    assert r.code == 2 and "not an unencrypted Ed25519 private key" in r.stderr
    assert "AAAA" not in r.stderr
    nothing = restore(cli, matrix, tmp_path / "out")  # nothing was published, no store made
    assert nothing.code == 2 and "not a neffcache store: nothing under it" in nothing.stderr


def test_verify_lists_the_entries_a_trusting_restore_would_refuse(cli: Cli, matrix: Path,
                                                                  tmp_path: Path) -> None:
    key, public, _ = make_key(cli, tmp_path, "ci")
    push(cli, matrix, tmp_path, CELL_64, b"signed neff", key)
    unsigned = push(cli, matrix, tmp_path, CELL_128, b"unsigned neff", None)
    assert cli("verify").code == 0  # no keys: signatures are not checked
    r = cli("verify", "--trusted-key", public, "--json")
    assert r.code == 4
    assert [(p["kind"], p["key"]) for p in r.json["problems"]] == [
        ("untrusted", f"manifests/{unsigned['entry_key']}.json")]
    assert cli("verify", env={"NEFFCACHE_TRUSTED_KEYS": public}).code == 4
