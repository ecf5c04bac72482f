"""Manifest encode/decode/validate (pure): hostile input is refused with a one-line error."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neffcache.documents import canonical_json, digest_of
from neffcache.errors import IntegrityError, ManifestError
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import (
    DIGEST_FIELD,
    SIGNATURE_FIELD,
    FileRecord,
    Manifest,
    PackMember,
    PackRecord,
    PartDigests,
    Signature,
    decode_manifest,
    encode_manifest,
    encode_manifest_pieces,
    entry_key,
    loads_light,
    manifest_digest,
    validate_relative_path,
)
from neffcache.matrix import Cell
from neffcache.parts import MAX_PART_SIZE, needs_parts, part_count

CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",), 64, 64, 1, 1)
FP = build_fingerprint("neuron", {"version.torch": "2.6", "target": "trn2"})
SHA = "ab" * 32


def doc(files: list[dict[str, Any]]) -> bytes:
    m = Manifest(CELL, FP, ())
    d = m.to_json()
    d["files"] = files
    return json.dumps(d).encode()


def rec(path: str = "ab/cd/x.neff", **kw: Any) -> dict[str, Any]:
    return {"root": "neff", "path": path, "size": 3, "sha256": SHA, "mode": 0o644, **kw}


@pytest.mark.parametrize("files, needle", [
    ([rec("/etc/passwd")], "absolute"),
    ([rec("../x")], "'..'"),
    ([rec("a/../../x")], "'..'"),
    ([rec("a//b")], "empty"),
    ([rec("./a")], "'.'"),
    ([rec("a\\b")], "non-POSIX"),
    ([rec("C:x")], "absolute"),
    ([rec(""), ], "non-empty"),
    ([rec("a"), rec("a")], "duplicate path neff/a"),
    ([rec("a"), rec("a/b")], "both a file and a directory"),
    ([rec(root="etc")], "unknown root 'etc'"),
    ([rec(root="../neff")], "root"),
    ([rec(size=-1)], "size -1"),
    ([rec(size="3")], "size '3'"),
    ([rec(size=True)], "size True"),
    ([rec(sha256="AB" * 32)], "sha256"),
    ([rec(sha256="ab" * 31)], "sha256"),
    ([rec(mode=0o4755)], "mode 0o4755: expected permission bits"),  # octal, as chmod takes it
    (["x"], "expected an object"),
])
def test_hostile_or_malformed_files_are_refused(files: list[Any], needle: str) -> None:
    with pytest.raises(ManifestError) as info:
        decode_manifest(doc(files), allowed_roots=("neff", "hlo"), source="manifests/k.json")
    msg = str(info.value)
    assert needle in msg
    assert msg.startswith("manifests/k.json")
    assert "\n" not in msg


def test_manifest_errors_are_integrity_errors() -> None:
    assert issubclass(ManifestError, IntegrityError)


def test_bad_documents_are_refused() -> None:
    with pytest.raises(ManifestError, match="not valid JSON"):
        decode_manifest(b"{")
    with pytest.raises(ManifestError, match="expected a JSON object"):
        decode_manifest(b"[]")
    d = json.loads(doc([rec()]))
    d["schema_version"] = 99
    with pytest.raises(ManifestError, match="schema_version 99"):
        decode_manifest(json.dumps(d))
    d = json.loads(doc([rec()]))
    d["entry_key"] = "0" * 64
    with pytest.raises(ManifestError, match="does not match its cell"):
        decode_manifest(json.dumps(d))


def test_files_come_back_sorted_and_key_is_cell_plus_fingerprint() -> None:
    m = decode_manifest(doc([rec("b"), rec("a"), rec("c", root="hlo")]),
                        allowed_roots=("neff", "hlo"))
    assert [(f.root, f.path) for f in m.files] == [("hlo", "c"), ("neff", "a"), ("neff", "b")]
    assert m.entry_key == entry_key(CELL, FP)
    other = build_fingerprint("neuron", {"version.torch": "2.7", "target": "trn2"})
    assert entry_key(CELL, other) != m.entry_key


_name = st.text(alphabet="abcdefghij0123456789_-.", min_size=1, max_size=12).filter(
    lambda s: s not in (".", ".."))
_path = st.lists(_name, min_size=1, max_size=4).map("/".join)
_record = st.builds(FileRecord, root=st.sampled_from(["neff", "hlo"]), path=_path,
                    size=st.integers(0, 1 << 40),
                    sha256=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
                    mode=st.integers(0, 0o777))


def _no_clash(files: list[FileRecord]) -> bool:
    ids = {(f.root, f.path) for f in files}
    if len(ids) != len(files):
        return False
    return not any((f.root, "/".join(f.path.split("/")[:n])) in ids
                   for f in files for n in range(1, len(f.path.split("/"))))


def _required_parts(files: tuple[FileRecord, ...]) -> tuple[PartDigests, ...]:
    """Part digests for each file a manifest requires them for (over 24 MiB), at the largest
    part size the manifest accepts for it (so a 1 TiB file needs 1024, not 65,536)."""
    out = []
    for f in needs_parts(files):
        size = min(MAX_PART_SIZE, 1 << ((f.size - 1).bit_length() - 1))
        out.append(PartDigests(f.sha256, size, tuple(f"{i:064x}" for i in
                                                     range(part_count(f.size, size)))))
    return tuple(out)


@settings(max_examples=150, deadline=None)
@given(files=st.lists(_record, max_size=20, unique_by=lambda f: f.sha256).filter(_no_clash),
       seconds=st.one_of(st.none(), st.floats(0, 1e6)),
       producer=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8),
                                max_size=3))
def test_round_trip(files: list[FileRecord], seconds: float | None,
                    producer: dict[str, str]) -> None:
    ordered = tuple(sorted(files, key=lambda f: (f.root, f.path)))
    m = Manifest(CELL, FP, ordered,
                 producer=tuple(sorted(producer.items())), compile_seconds=seconds,
                 created_at="2026-01-01T00:00:00Z", parts=_required_parts(ordered))
    data = encode_manifest(m)
    back = decode_manifest(data, allowed_roots=("neff", "hlo"))
    assert back == m
    assert encode_manifest(back) == data  # canonical: same value, same bytes


def test_a_large_manifest_is_encoded_in_pieces_that_are_the_whole_document() -> None:
    """Files, packs and parts are encoded a few thousand at a time from the records (never
    all as dicts nor as one string): joined, the pieces are the canonical JSON of the whole
    body, its digest and its signature, as one ``canonical_json`` of it would be."""
    files = tuple(FileRecord("neff", f"d/{i:05d}.neff", 10 + i, f"{i:064x}", 0o644)
                  for i in range(9000))
    offsets = [0, *itertools.accumulate(f.size for f in files[:5000])]
    packs = (PackRecord("f" * 64, offsets[-1], tuple(PackMember(f.sha256, offsets[i], f.size)
                                                     for i, f in enumerate(files[:5000]))),)
    m = Manifest(CELL, FP, files, producer=(("host", "ü"),), created_at="now", packs=packs,
                 signature=Signature("0" * 16, "A" * 86 + "=="))
    pieces = list(encode_manifest_pieces(m))
    body = m.to_json()
    whole = canonical_json({**body, DIGEST_FIELD: digest_of(body),
                            SIGNATURE_FIELD: {"key_id": "0" * 16, "ed25519": "A" * 86 + "=="}})
    assert len(pieces) > 3 and max(map(len, pieces)) < len(whole) // 2
    assert b"".join(pieces) == encode_manifest(m) == whole.encode()
    assert manifest_digest(m) == digest_of(body)
    assert decode_manifest(b"".join(pieces)) == m
    light = loads_light(b"".join(pieces), members=False)  # the store-free check's reading
    assert light["packs"] == [{"sha256": "f" * 64, "size": offsets[-1], "members": []}]
    assert [(f["path"], f.get("size")) for f in light["files"][:2]] == [
        ("d/00000.neff", 10), ("d/00001.neff", 11)]
    assert len(loads_light(encode_manifest(m))["packs"][0]["members"]) == 5000


@given(_path)
def test_generated_relative_paths_are_accepted(path: str) -> None:
    assert validate_relative_path(path) == path


def test_a_manifest_carries_its_own_digest_and_a_flip_that_still_decodes_is_refused() -> None:
    data = encode_manifest(Manifest(CELL, FP, (FileRecord("neff", "a.neff", 3, SHA, 0o644),)))
    assert json.loads(data)["manifest_sha256"]
    assert decode_manifest(data).files[0].size == 3
    flipped = data.replace(b'"size":3', b'"size":4')  # still valid JSON, still a manifest
    assert flipped != data
    with pytest.raises(ManifestError, match="does not match its own sha256"):
        decode_manifest(flipped)
    # written before digests existed: judged by its fields alone
    legacy = {k: v for k, v in json.loads(data).items() if k != "manifest_sha256"}
    assert decode_manifest(json.dumps(legacy).encode()).files[0].size == 3
