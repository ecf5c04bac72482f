"""The destination of a restore: one restore per DIR (lock), stale temp files swept, symlinks at
the roots and the entries directory refused, the final file replaced (never written through),
and durability: a restore syncs nothing and leaves its files pending; the next one in the same
boot fdatasyncs them (never a syncfs), one in a later boot hashes them, before the state file
vouches for them; only a ``Durable`` set can be saved."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from neffcache.backends import NEURON
from neffcache.errors import DeadlineExceededError, UsageError
from neffcache.fingerprint import build_fingerprint
from neffcache.matrix import Cell
from neffcache.precompile.publish import publish_entry
from neffcache.restore import fs as restore_fs
from neffcache.restore import local as local_mod
from neffcache.restore import scan as scan_mod
from neffcache.restore.fs import (
    ENTRIES_DIR,
    LOCK_FILE,
    Roots,
    is_unclean,
    lock_destination,
    sweep_dirs,
)
from neffcache.restore.local import restore_local
from neffcache.restore.run import restore_cells
from neffcache.restore.state import (
    STATE_FILE,
    Durable,
    StateRecord,
    load_pending,
    load_state,
    state_record,
    sync_records,
)
from neffcache.store.local import LocalStore
from tests.support.synthetic import make_neff_cache, read_tree

FP = build_fingerprint("neuron", {"target": "trn2"})
CELL = Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
            64, 64, 1, 1)


@pytest.fixture
def published(tmp_path: Path) -> tuple[LocalStore, dict[str, bytes]]:
    cache = make_neff_cache(tmp_path / "src", seed=7, count=30, large=1)
    store = LocalStore(tmp_path / "store")
    publish_entry(store, CELL, FP, NEURON, {"neff": cache.root})
    return store, cache.files


def temps(root: Path) -> list[Path]:
    return [p for p in root.rglob(".neffcache-*") if p.name.endswith(".tmp")]


def tree(root: Path) -> dict[str, bytes]:
    out = read_tree(root)
    out.pop(STATE_FILE, None)
    return out


# --- the lock -------------------------------------------------------------------------------

def test_a_second_restore_waits_until_its_deadline_then_exits_3(tmp_path: Path,
                                                                 published) -> None:  # type: ignore[no-untyped-def]
    store, _files = published
    target = tmp_path / "t"
    told: list[str] = []
    with lock_destination(str(target)):
        with pytest.raises(DeadlineExceededError, match="waiting for restore pid"):
            restore_cells(store, [CELL], NEURON, FP, target,
                          deadline=time.monotonic() + 0.3, notice=told.append)
    assert len(told) == 1 and str(target) in told[0]
    assert not (target / "neff").exists()  # it wrote nothing while it waited


def test_without_a_deadline_it_waits_for_the_first_then_runs(tmp_path: Path,
                                                            published) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    waiting = threading.Event()
    results: list[object] = []

    def second() -> None:
        results.append(restore_cells(store, [CELL], NEURON, FP, target,
                                     notice=lambda _m: waiting.set()))

    with lock_destination(str(target)):
        t = threading.Thread(target=second)
        t.start()
        assert waiting.wait(30)
        assert t.is_alive() and not (target / "neff").exists()
    t.join(60)
    r = results[0]
    assert r.error() is None  # type: ignore[attr-defined]
    assert tree(target / "neff") == files
    assert (target / ENTRIES_DIR / LOCK_FILE).stat().st_size == 0  # the mark is cleared


def test_stale_temps_of_a_killed_restore_are_removed_and_counted(tmp_path: Path,
                                                                 published) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    # What a restore killed mid-run leaves: temps here and there, a marked lock file, and
    # (since it never wrote its state file) a file the state file does not vouch for.
    some = sorted(files)
    litter = [target / "neff" / ".neffcache-0badc0de-1.tmp",
              (target / "neff" / some[3]).parent / ".neffcache-0badc0de-2.tmp",
              (target / "neff" / some[7]).parent / ".neffcache-0badc0de-3.tmp",
              target / ENTRIES_DIR / ".neffcache-0badc0de-4.tmp"]
    for p in litter:
        p.write_bytes(b"half")
    keep = target / "neff" / "not-ours.tmp"
    keep.write_bytes(b"x")
    (target / ENTRIES_DIR / LOCK_FILE).write_text("restore pid 1 since 0\n")
    assert is_unclean(str(target))
    # The marked lock file keeps the store-free no-op path from skipping the sweep.
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is None
    r = restore_cells(store, [CELL], NEURON, FP, target)
    assert r.error() is None and r.stale_temps_removed == len(litter)
    assert r.to_json()["stale_temps_removed"] == len(litter)
    assert temps(target) == [] and keep.exists()
    assert not is_unclean(str(target))
    assert tree(target / "neff") == {**files, "not-ours.tmp": b"x"}


def test_temps_in_the_directories_a_restore_writes_are_swept_without_a_mark(
        tmp_path: Path, published) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    victim = sorted(files)[5]
    (target / "neff" / victim).unlink()
    stale = (target / "neff" / victim).parent / ".neffcache-feedf00d-9.tmp"
    stale.write_bytes(b"half")
    r = restore_cells(store, [CELL], NEURON, FP, target)
    assert r.error() is None and r.files_fetched == 1 and r.stale_temps_removed == 1
    assert not stale.exists()


# --- symlinks -------------------------------------------------------------------------------

@pytest.mark.parametrize("link", ["neff", ENTRIES_DIR])
def test_a_symlink_at_a_root_or_the_entries_dir_is_refused(tmp_path: Path, published,
                                                           link: str) -> None:  # type: ignore[no-untyped-def]
    store, _files = published
    target, outside = tmp_path / "t", tmp_path / "outside"
    outside.mkdir()
    target.mkdir()
    (target / link).symlink_to(outside)
    with pytest.raises(UsageError, match="is a symlink: restore never follows"):
        restore_cells(store, [CELL], NEURON, FP, target)
    assert list(outside.iterdir()) == []


def test_a_root_made_a_symlink_after_a_restore_is_not_a_no_op(tmp_path: Path,
                                                              published) -> None:  # type: ignore[no-untyped-def]
    store, _files = published
    target = tmp_path / "t"
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is not None
    (target / "neff").rename(tmp_path / "moved")
    (target / "neff").symlink_to(tmp_path / "moved")
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is None
    with pytest.raises(UsageError):
        restore_cells(store, [CELL], NEURON, FP, target)


def test_a_symlink_at_a_final_path_is_replaced_not_written_through(tmp_path: Path,
                                                                   published) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target, outside = tmp_path / "t", tmp_path / "outside.neff"
    outside.write_bytes(b"precious")
    victim = sorted(files)[2]
    (target / "neff" / victim).parent.mkdir(parents=True)
    (target / "neff" / victim).symlink_to(outside)
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    assert outside.read_bytes() == b"precious"
    assert not (target / "neff" / victim).is_symlink()
    assert tree(target / "neff") == files


# --- durability -----------------------------------------------------------------------------

def test_a_restore_waits_for_no_disk_and_the_next_one_syncs_before_it_vouches(
        tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    dirs = {"neff": str(target / "neff")}
    synced: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        real(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    def no_syncfs(_fds):  # type: ignore[no-untyped-def]
        raise AssertionError("syncfs of the whole file system")

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(restore_fs, "sync_filesystems", no_syncfs)
    r = restore_cells(store, [CELL], NEURON, FP, target)
    assert r.error() is None and r.files_fetched == len(files)
    assert synced == []  # nothing waited for the disk
    assert load_state(dirs) == {}  # so nothing is vouched for: every file is pending
    assert {k for k, (boot, _) in load_pending(dirs).items()
            if boot == restore_fs.boot_id()} == {("neff", p) for p in files}
    again = restore_cells(store, [CELL], NEURON, FP, target)  # the same boot: sync, then vouch
    assert again.error() is None and again.files_fetched == 0
    assert sorted(synced) == sorted(str(target / "neff" / p) for p in files)
    assert len(load_state(dirs)) == len(files) and load_pending(dirs) == {}


def count_fdatasyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths os.fdatasync is called on from now on (each call still syncs)."""
    synced: list[str] = []
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        real(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    return synced


def test_the_store_free_check_syncs_this_boots_pending_files_once_all_are_confirmed(
        tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None  # all pending
    synced = count_fdatasyncs(monkeypatch)
    victim = sorted(files)[-1]
    (target / "neff" / victim).write_bytes(b"changed")
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is None
    assert synced == []  # a doubt at the last file: nothing synced for a run that plans
    # the full run syncs what the first left pending, and leaves the file it fetched pending
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    synced.clear()
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is not None
    assert synced == [str(target / "neff" / victim)]


def test_a_store_free_rerun_vouches_for_what_it_synced_so_the_next_syncs_nothing(
        tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    dirs = {"neff": str(target / "neff")}
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None  # all pending
    synced = count_fdatasyncs(monkeypatch)
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is not None
    assert sorted(synced) == sorted(str(target / "neff" / p) for p in files)
    assert set(load_state(dirs)) == {("neff", p) for p in files} and load_pending(dirs) == {}
    assert not is_unclean(str(target))  # the lock it took to write is left unmarked
    synced.clear()
    for _ in range(2):
        assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is not None
    assert synced == []  # vouched for now: nothing synced again
    hashed: list[str] = []
    monkeypatch.setattr(scan_mod, "_hash_at", lambda dfd, name, dl: hashed.append(name))
    again = restore_cells(store, [CELL], NEURON, FP, target)  # the full run trusts them too
    assert again.error() is None and again.files_fetched == 0
    assert synced == [] and hashed == []


def test_a_store_free_rerun_writes_no_state_over_one_a_restore_wrote_meanwhile(
        tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    dirs = {"neff": str(target / "neff")}
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None  # all pending
    real_save = local_mod.save_settled

    def restore_first(d, states):  # type: ignore[no-untyped-def]
        (target / "neff" / STATE_FILE).write_bytes(b"{}")  # another run's state file
        real_save(d, states)

    monkeypatch.setattr(local_mod, "save_settled", restore_first)
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is not None
    assert (target / "neff" / STATE_FILE).read_bytes() == b"{}"  # kept, not overwritten
    assert load_state(dirs) == {}


def test_a_later_boot_hashes_what_an_earlier_one_left_pending(
        tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    dirs = {"neff": str(target / "neff")}
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    bad = sorted(files)[2]
    with open(target / "neff" / bad, "r+b") as fh:  # lost in the crash: same size, zeros
        fh.write(bytes(len(files[bad])))
    monkeypatch.setattr(restore_fs, "_BOOT_ID", ["a-later-boot"])
    monkeypatch.setattr(os, "fdatasync", lambda fd: pytest.fail("a later boot syncs nothing"))
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is None
    hashed: list[str] = []
    real_hash = scan_mod._hash_at
    monkeypatch.setattr(scan_mod, "_hash_at", lambda dfd, name, dl: hashed.append(name)
                        or real_hash(dfd, name, dl))
    r = restore_cells(store, [CELL], NEURON, FP, target)
    assert r.error() is None and r.files_fetched == 1  # the zeroed file, found out
    assert len(hashed) == len(files)
    vouched = load_state(dirs)  # re-read from the disk in this boot: durable; the refetched
    assert set(vouched) == {("neff", p) for p in files if p != bad}  # one is pending
    assert set(load_pending(dirs)) == {("neff", bad)}
    assert tree(target / "neff") == files


def test_files_not_known_to_be_on_disk_are_not_vouched_for(
        tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    store, files = published
    target = tmp_path / "t"
    dirs = {"neff": str(target / "neff")}
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    real = os.fdatasync
    bad = sorted(files)[3]

    def failing(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").endswith("/" + bad):
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fdatasync", failing)
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is None
    r = restore_cells(store, [CELL], NEURON, FP, target)
    assert r.to_json()["exit_code"] == 1 and "could not be made durable" in str(r.error())
    vouched = load_state(dirs)
    assert ("neff", bad) not in vouched and len(vouched) == len(files) - 1
    assert set(load_pending(dirs)) == {("neff", bad)}  # hashed instead, still pending
    monkeypatch.undo()
    again = restore_cells(store, [CELL], NEURON, FP, target)  # syncs it, vouches now
    assert again.error() is None and again.files_fetched == 0
    assert len(load_state(dirs)) == len(files)
    assert restore_local([CELL], NEURON, FP, target, store_url=store.url) is not None


def test_sync_vouches_only_for_the_very_file_it_verified(tmp_path: Path) -> None:
    root = tmp_path / "neff"
    (root / "d").mkdir(parents=True)
    recs = {}
    for name in ("same", "replaced", "gone", "linked"):
        (root / "d" / name).write_bytes(name.encode())
        recs[("neff", f"d/{name}")] = state_record(os.stat(root / "d" / name), "0" * 64)
    (root / "d" / "new").write_bytes(b"replaced")
    os.replace(root / "d" / "new", root / "d" / "replaced")  # another inode at the name now
    (root / "d" / "gone").unlink()
    (root / "d" / "linked").unlink()
    (root / "d" / "linked").symlink_to(root / "d" / "same")
    with Roots({"neff": str(root)}) as roots:
        done = sync_records(roots, recs)
    assert set(done.durable.records) == {("neff", "d/same")}
    assert done.failed == () and done.skipped == 3


def test_a_durable_set_is_made_only_by_a_sync_or_from_a_state_file() -> None:
    with pytest.raises(TypeError, match="made only by"):
        Durable({("neff", "a"): StateRecord(1, 2, 3, 4, "0" * 64, 0o644)})


def test_the_sweep_after_a_killed_restore_never_follows_a_symlink(tmp_path: Path,
                                                                  published) -> None:  # type: ignore[no-untyped-def]
    store, _files = published
    target, outside = tmp_path / "t", tmp_path / "outside"
    assert restore_cells(store, [CELL], NEURON, FP, target).error() is None
    outside.mkdir()
    theirs = outside / ".neffcache-11111111-1.tmp"
    theirs.write_bytes(b"not ours")
    (target / "neff" / "elsewhere").symlink_to(outside)
    (target / "neff" / ".neffcache-22222222-1.tmp").symlink_to(theirs)  # the link goes
    (target / ENTRIES_DIR / LOCK_FILE).write_text("restore pid 1 since 0\n")
    r = restore_cells(store, [CELL], NEURON, FP, target)
    assert r.error() is None and r.stale_temps_removed == 1
    assert theirs.read_bytes() == b"not ours"


def test_the_sweep_of_planned_directories_skips_those_under_a_missing_parent(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "neff"
    (root / "aa" / "bb").mkdir(parents=True)
    stale = root / "aa" / "bb" / ".neffcache-dead-1.tmp"
    stale.write_bytes(b"x")
    (root / "aa" / "bb" / "kept.neff").write_bytes(b"y")
    opened: list[str] = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):  # type: ignore[no-untyped-def]
        opened.append(str(path))
        return real_open(path, flags, *args, **kwargs)

    planned = [("neff", f"{a}/{b}") for a in ("aa", "cc") for b in ("bb", "dd", "ee")]
    with Roots({"neff": str(root)}) as roots:
        monkeypatch.setattr(os, "open", spy)
        assert sweep_dirs(roots, planned) == 1
    monkeypatch.undo()
    assert not stale.exists() and (root / "aa" / "bb" / "kept.neff").exists()
    assert opened.count("cc") == 1  # looked for once, not once per directory below it
