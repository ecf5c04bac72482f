"""Retire: the policy's plan (pure), its execution on a store, and gc's grace for it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from neffcache.errors import UsageError
from neffcache.lifecycle import gc
from neffcache.lifecycle.entry_select import read_manifests, select_entry_keys
from neffcache.lifecycle.retire import (
    EntryInfo,
    RetirePolicy,
    apply_retire,
    plan_retire,
    policy_from,
    retire_record,
    version_order,
)
from neffcache.store import blob_key
from tests.support.lifecycle import cell, publish_synthetic, sdk_fingerprint, with_restored
from tests.support.memory_store import MemoryStore


def _store(tmp_path: Path) -> MemoryStore:
    """Three SDK versions (neuronx-cc 2.9, 2.10, 2.19), two cells each; seed per entry."""
    store = MemoryStore()
    for i, cc in enumerate(("2.9", "2.19", "2.10")):
        for j, h in enumerate((64, 128)):
            publish_synthetic(store, cell(h), sdk_fingerprint(cc), tmp_path / f"{cc}-{h}",
                              seed=10 * i + j)
    return store


def _infos(store: MemoryStore) -> list[EntryInfo]:
    return [EntryInfo.of(m) for m in read_manifests(store, select_entry_keys(store, None))]


def test_versions_sort_numerically() -> None:
    def order(cc: str) -> tuple[object, ...]:
        return version_order((("version.neuronx-cc", cc),))

    assert sorted(["2.9", "2.19", "2.10", "absent"], key=order) == ["absent", "2.9", "2.10",
                                                                    "2.19"]


def test_plan_keeps_the_newest_k_sdk_versions(tmp_path: Path) -> None:
    infos = _infos(_store(tmp_path))
    plan = plan_retire(infos, RetirePolicy(keep_sdk_versions=2))
    kept = {dict(e.sdk)["version.neuronx-cc"] for e in plan.keep}
    gone = {dict(e.sdk)["version.neuronx-cc"] for e in plan.retire}
    assert kept == {"2.19", "2.10"} and gone == {"2.9"}
    assert len(plan.retire) == 2 and len(plan.keep) == 4
    retired_blobs = {b for e in plan.retire for b in e.blobs}
    kept_blobs = {b for e in plan.keep for b in e.blobs}
    assert plan.bytes_freed == sum(n for _, n in retired_blobs - kept_blobs) > 0
    assert [(v[0][1], k) for _, v, k in plan.sdk_versions] == \
        [("2.19", True), ("2.10", True), ("2.9", False)]


def test_a_kept_matrix_keeps_its_cells_whatever_the_sdk(tmp_path: Path) -> None:
    infos = _infos(_store(tmp_path))
    plan = plan_retire(infos, RetirePolicy(keep_sdk_versions=1,
                                           keep_cells=frozenset({cell(64).key}),
                                           keep_matrices=("prod",)))
    assert {e.cell_id for e in plan.retire} == {cell(128).id}
    assert len(plan.retire) == 2  # 128x128 under 2.9 and 2.10


def test_restored_fingerprints_keep_all_their_entries_and_say_why(tmp_path: Path) -> None:
    infos = _infos(_store(tmp_path))
    old = sdk_fingerprint("2.9").key
    policy = RetirePolicy(keep_sdk_versions=1, keep_restored_days=7,
                          keep_fingerprints=frozenset({old, "f" * 64}))
    plan = plan_retire(infos, policy)
    kept = {(dict(e.sdk)["version.neuronx-cc"], e.cell_id): r
            for e, r in zip(plan.keep, plan.kept_by, strict=True)}
    assert kept == {("2.19", cell(64).id): ("sdk_version",),
                    ("2.19", cell(128).id): ("sdk_version",),
                    ("2.9", cell(64).id): ("restored",),
                    ("2.9", cell(128).id): ("restored",)}
    assert {dict(e.sdk)["version.neuronx-cc"] for e in plan.retire} == {"2.10"}
    doc = plan.to_json()
    assert sorted(tuple(e["kept_by"]) for e in doc["keep"]) == \
        [("restored",), ("restored",), ("sdk_version",), ("sdk_version",)]
    assert all("kept_by" not in e for e in doc["retire"])
    assert doc["policy"]["keep_restored_days"] == 7
    assert doc["policy"]["keep_fingerprints"] == sorted({old, "f" * 64})
    record = retire_record(plan, by="ops@host", reason="", now=time.time())
    assert record["policy"] == doc["policy"]


def test_an_entry_kept_by_several_rules_names_each(tmp_path: Path) -> None:
    infos = _infos(_store(tmp_path))
    newest = sdk_fingerprint("2.19").key
    plan = plan_retire(infos, RetirePolicy(keep_sdk_versions=1, keep_cells=frozenset(
        {cell(64).key}), keep_matrices=("prod",), keep_restored_days=1,
        keep_fingerprints=frozenset({newest})))
    rules = {(e.fingerprint_key, e.cell_id): r
             for e, r in zip(plan.keep, plan.kept_by, strict=True)}
    assert rules[(newest, cell(64).id)] == ("sdk_version", "matrix", "restored")
    assert rules[(newest, cell(128).id)] == ("sdk_version", "restored")
    assert len(plan.retire) == 2  # 128x128 under 2.9 and 2.10


def test_restored_days_alone_is_a_policy_and_nothing_restored_retires_all(tmp_path: Path
                                                                          ) -> None:
    infos = _infos(_store(tmp_path))
    plan = plan_retire(infos, RetirePolicy(keep_restored_days=7))
    assert plan.keep == () and len(plan.retire) == 6
    assert all(not k for _, _, k in plan.sdk_versions)


def test_restored_days_come_from_the_flag_over_the_config() -> None:
    assert policy_from(None, [], {"keep_restored_days": 3}).keep_restored_days == 3
    assert policy_from(None, [], {"keep_restored_days": 3}, 9).keep_restored_days == 9
    policy = with_restored(policy_from(2, [], {}, 5), ["a" * 64])
    assert policy.keep_fingerprints == frozenset({"a" * 64}) and policy.keep_sdk_versions == 2
    with pytest.raises(UsageError, match="--keep-restored-days 0"):
        RetirePolicy(keep_restored_days=0).check()


def test_no_policy_is_refused() -> None:
    with pytest.raises(UsageError, match="needs a policy"):
        plan_retire([], RetirePolicy())


def test_apply_removes_pointers_and_manifests_and_gc_waits_for_the_grace(tmp_path: Path
                                                                        ) -> None:
    store = _store(tmp_path)
    plan = plan_retire(_infos(store), RetirePolicy(keep_sdk_versions=2))
    now = time.time()
    record = apply_retire(store, plan, by="ops@host", reason="SDK 2.9 is gone", now=now)
    assert record.startswith("retired/") and store.has(record)
    left = set(select_entry_keys(store, None))
    assert left == {e.entry_key for e in plan.keep}
    assert not any(store.has(f"cells/{e.cell_key}/{e.fingerprint_key}.json")
                   for e in plan.retire)
    freed = {blob_key(s) for e in plan.retire for s, _ in e.blobs} - \
        {blob_key(s) for e in plan.keep for s, _ in e.blobs}
    young, _, _ = gc.collect_gc(store, now=now + 10, grace=3600)
    assert not set(young.delete) & freed and freed <= set(young.spared)
    old, seen_m, seen_i = gc.collect_gc(store, now=now + 7200, grace=3600)
    assert set(old.delete) == freed
    gc.apply_gc(store, old, (seen_m, seen_i))
    assert not any(store.has(k) for k in freed)
    assert store.has(record)  # the history stays
    from neffcache.lifecycle.verify import audit_store as verify_store

    assert verify_store(store).problems == ()
