"""gc in a loop against a push that runs longer than gc's grace: `neffcache verify` is clean
after every round and the push's entry is whole at the end (issue 12). The push publishes
through a store wrapper that lets a fixed number of uploads through per gc round, so it spans
several rounds whatever the machine's speed; its intent is renewed every 0.2 s, gc's grace is
1 s (--force). Before the push: an entry it shares nothing with, and the orphans of a crashed
earlier push of the same files, which this push finds present and skips."""

from __future__ import annotations

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.hashing import sha256_bytes
from neffcache.precompile.publish import PublishResult, publish_entry
from neffcache.restore.run import restore_cells
from neffcache.store import blob_key, open_store
from neffcache.store.base import BLOBS, PACKS
from tests.e2e.conftest import Cli, restored_tree
from tests.support.lifecycle import cell, publish_synthetic, sdk_fingerprint
from tests.support.slow_store import SlowStore
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3
GRACE = 1.0
REFRESH = 0.2
PER_ROUND = 25  # uploads the push may make per gc round


def test_gc_rounds_during_a_long_push_leave_the_store_whole(cli: Cli, tmp_path: Path,
                                                            s3_url: str) -> None:
    store = open_store(s3_url)
    fp = sdk_fingerprint("2.21")
    base = publish_synthetic(store, cell(64), fp, tmp_path / "base", seed=1, count=10)
    cache = make_neff_cache(tmp_path / "push", seed=2, count=150, large=1,
                            large_size=(20 << 20, 20 << 20), droppings=False)  # one multipart
    orphans = sorted(set(cache.files.values()), key=sha256_bytes)[:40]
    for data in orphans:
        store.put(blob_key(sha256_bytes(data)), io.BytesIO(data))
    crashed = {"entry_key": "c" * 64, "created_at": time.time() - 7200, "host": "ci",
               "blobs": sorted(sha256_bytes(d) for d in orphans)}
    store.put("pending/" + "c" * 64 + ".1.json", io.BytesIO(json.dumps(crashed).encode()))

    gate = threading.Semaphore(0)
    slow = SlowStore(store, gate=gate, prefixes=(BLOBS, PACKS))
    outcome: dict[str, PublishResult | BaseException] = {}

    def push() -> None:
        try:
            outcome["result"] = publish_entry(slow, cell(128), fp, NEURON, {"neff": cache.root},
                                              workers=2, refresh_every=REFRESH)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            outcome["error"] = exc

    pusher = threading.Thread(target=push)
    started = time.monotonic()
    pusher.start()
    rounds: list[tuple[bool, dict[str, object]]] = []
    try:
        while pusher.is_alive() and len(rounds) < 40:
            round_started = time.monotonic()
            junk = os.urandom(256)  # something gc must delete: proves it ran for real
            store.put(blob_key(sha256_bytes(junk)), io.BytesIO(junk))
            swept = cli("gc", "--yes", "--grace", str(GRACE), "--force", "--json")
            assert swept.code == 0, swept.stderr
            assert blob_key(sha256_bytes(junk)) in swept.json["deleted"]
            checked = cli("verify", "--json")
            assert checked.code == 0 and checked.json["problems"] == [], checked.stdout
            rounds.append((pusher.is_alive(), swept.json))
            gate.release(PER_ROUND)
            # A round lasts a grace at least, so a push alive for 4 rounds has outlived 3
            # graces on a fast machine too.
            time.sleep(max(0.0, round_started + GRACE - time.monotonic()))
    finally:
        gate.release(100_000)
        pusher.join(timeout=300)
    seconds = time.monotonic() - started
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    result = outcome["result"]
    assert isinstance(result, PublishResult) and result.created
    assert result.blobs_skipped >= len(orphans)  # the orphans were found and relied on

    during = [doc for alive, doc in rounds if alive]
    assert len(during) >= 4 and seconds > 3 * GRACE  # the push outlived the grace by far
    assert any(doc["spared"] for doc in during)  # gc saw the push's fresh intent
    assert ("pending/" + "c" * 64 + ".1.json") in rounds[0][1]["stale_intents"]
    renewals = [k for k in slow.puts if k.startswith("pending/")]
    assert len(renewals) >= 3

    final = cli("gc", "--yes", "--grace", str(GRACE), "--force", "--json")
    assert final.code == 0, final.stderr
    checked = cli("verify", "--json")
    assert checked.code == 0 and checked.json["problems"] == [], checked.stdout
    assert checked.json["manifests"] == 2
    out = tmp_path / "out"
    restored = restore_cells(store, [cell(128), cell(64)], NEURON, fp, out)
    assert restored.error() is None, restored.error()
    expected = dict(cache.files)
    expected.update({f.path: (tmp_path / "base" / f.path).read_bytes()
                     for f in base.manifest.files})
    assert restored_tree(out / "neff") == expected
    assert list(store.list("pending/")) == []
