"""A local store's stale temp files (a writer killed mid-put): listed by PID or age, reported
by verify, removed by gc and by a copy into the store; a live writer's are left alone."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from neffcache.lifecycle import CollectGarbageRequest, collect_garbage
from neffcache.lifecycle.verify import audit_store as verify_store
from tests.support.local_store import LocalStore


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (PIDs are not reused this soon)


def litter(store: LocalStore) -> tuple[Path, Path, Path]:
    store.put("blobs/sha256/aa/" + "a" * 64, io.BytesIO(b"x"))
    where = store.root / "blobs" / "sha256" / "aa"
    dead = where / f".tmp-{dead_pid()}-abc"
    live = where / f".tmp-{os.getpid()}-def"
    old = where / ".tmp-legacy"
    for path in (dead, live, old):
        path.write_bytes(b"partial" * 100)
    os.utime(old, (1, 1))
    return dead, live, old


def test_stale_temps_are_the_dead_and_the_old(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    dead, live, old = litter(store)
    stale = {t.key for t in store.stale_temps()}
    assert stale == {p.relative_to(store.root).as_posix() for p in (dead, old)}
    assert verify_store(store).temps and verify_store(store).error() is None
    assert store.sweep_temps() == 2 and live.exists() and not dead.exists()
    assert list(store.stale_temps()) == [] and verify_store(store).temps == ()


def test_gc_removes_them(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")
    dead, live, old = litter(store)
    dry = collect_garbage(CollectGarbageRequest(store=str(store.root), dry_run=True))
    assert len(dry.temps) == 2 and dead.exists()
    done = collect_garbage(CollectGarbageRequest(store=str(store.root), confirmed=True))
    assert done.temps_removed == 2 and done.to_json()["temp_files_removed"] == 2
    assert not dead.exists() and not old.exists() and live.exists()


def test_a_put_names_its_temp_after_its_pid(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "s")

    class Watch(io.BytesIO):
        seen: list[str] = []

        def read(self, n: int | None = -1) -> bytes:
            Watch.seen.extend(p.name for p in store.root.rglob(".tmp-*"))
            return super().read(n)

    store.put("blobs/sha256/bb/" + "b" * 64, Watch(b"y"))
    assert Watch.seen and all(n.startswith(f".tmp-{os.getpid()}-") for n in Watch.seen)
    assert list(store.stale_temps()) == []
