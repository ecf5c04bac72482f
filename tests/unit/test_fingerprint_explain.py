"""``show_fingerprint`` and ``explain_fingerprint`` through their public names: the result's
JSON (``neffcache fingerprint [--explain KEY] --json``) and exit code."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from neffcache.errors import UsageError
from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.fingerprint_explain import (
    ExplainRequest,
    FingerprintRequest,
    explain_fingerprint,
    show_fingerprint,
)
from neffcache.index import open_index
from neffcache.manifest import Manifest, encode_manifest
from neffcache.store import manifest_key, open_store
from tests.unit.test_index_factories import make_cell, make_manifest


def test_show_fingerprint_knows_its_key_backend_and_interpreter() -> None:
    result = show_fingerprint(FingerprintRequest(backend="inductor"))
    doc = result.to_json()
    assert doc["key"] == result.fingerprint.key and len(doc["key"]) == 64
    assert doc["backend"] == "inductor" and doc["python"] == sys.executable
    assert "cpu.isa" in doc["fields"] and doc["unknown_fields"] == []
    assert (result.error(), result.exit_code) == (None, 0)
    assert show_fingerprint(FingerprintRequest()).to_json()["backend"] == "inductor"


def test_show_fingerprint_refuses_an_unknown_backend() -> None:
    with pytest.raises(UsageError, match="unknown backend"):
        show_fingerprint(FingerprintRequest(backend="tpu"))


def _built_elsewhere(neffcache_home: Path) -> tuple[Fingerprint, Manifest]:
    """An entry built under this host's inductor fingerprint with another torch version,
    in the default store and the default (embedded) index."""
    here = show_fingerprint(FingerprintRequest(backend="inductor")).fingerprint
    there = build_fingerprint("inductor", {**dict(here.fields), "version.torch": "0.0.1"})
    manifest = make_manifest(make_cell(), there)
    store = open_store(str(neffcache_home / "store"), create=True)
    store.put(manifest_key(manifest.entry_key), io.BytesIO(encode_manifest(manifest)))
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        ix.record_entries([manifest], store.url)
    return there, manifest


def test_explain_an_entry_names_the_differing_field(neffcache_home: Path) -> None:
    there, manifest = _built_elsewhere(neffcache_home)
    result = explain_fingerprint(ExplainRequest(key=manifest.entry_key[:12]))
    assert (result.error(), result.exit_code) == (None, 0)  # a difference is an answer
    doc = result.to_json()
    assert doc["entry_key"] == manifest.entry_key and doc["cell_id"] == manifest.cell.id
    assert doc["there"] == there.key and doc["match"] is False
    assert [d["field"] for d in doc["differences"]] == ["version.torch"]
    assert doc["differences"][0]["there"] == "0.0.1"
    assert "torch" in doc["differences"][0]["note"]


def test_explain_a_fingerprint_key_reads_the_index(neffcache_home: Path) -> None:
    there, _ = _built_elsewhere(neffcache_home)
    doc = explain_fingerprint(ExplainRequest(key=there.key[:16])).to_json()
    assert doc["entry_key"] is None and doc["cell_id"] is None
    assert doc["there"] == there.key and doc["backend"] == "inductor"
    assert [d["field"] for d in doc["differences"]] == ["version.torch"]


def test_explain_a_matching_entry(neffcache_home: Path) -> None:
    here = show_fingerprint(FingerprintRequest(backend="inductor")).fingerprint
    manifest = make_manifest(make_cell(), here)
    open_store(str(neffcache_home / "store"), create=True).put(
        manifest_key(manifest.entry_key), io.BytesIO(encode_manifest(manifest)))
    result = explain_fingerprint(ExplainRequest(key=manifest.entry_key))
    assert result.match and result.differences == () and result.exit_code == 0
    assert result.to_json()["here"] == result.to_json()["there"] == here.key


def test_explain_an_unknown_key_is_a_usage_error(neffcache_home: Path) -> None:
    _built_elsewhere(neffcache_home)
    with pytest.raises(UsageError, match="no entry in the store"):
        explain_fingerprint(ExplainRequest(key="ffffffffffff"))
    with pytest.raises(UsageError, match="expected an entry key"):
        explain_fingerprint(ExplainRequest(key="not-hex"))
