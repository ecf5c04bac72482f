"""The precompile face as a Python API: a request in, a result out that knows its exit code and
its --json document. Public names only; the cells run on the ``test-sleep`` TEST BACKEND (a
worker that sleeps and leaves a few synthetic NEFFs: no torch), stores are local directories and
the index is the embedded SQLite default of each test's own NEFFCACHE_HOME."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.errors import UsageError, WorkerError, exit_code_for
from neffcache.index import list_runs, open_index
from neffcache.precompile import (
    CaptureRequest,
    PrecompileRequest,
    PushRequest,
    WarmRequest,
    capture_entry,
    check_warm,
    precompile,
    push,
)
from neffcache.store import manifest_key, open_store
from tests.support.sleep_backend import cell_ids, register, write_sleep_matrix

ROOT = Path(__file__).resolve().parents[3]
OK, BAD = cell_ids(2)


@pytest.fixture(autouse=True)
def _sleep_backend() -> None:
    register()  # this process reads the matrix; the workers are tests.support.sleep_worker


@pytest.fixture
def env() -> dict[str, str]:
    """The environment of the calls and their workers (which import tests.support)."""
    paths = [str(ROOT), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "store")


def neff_dir(path: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    return path


# --- precompile ---------------------------------------------------------------------------

@pytest.mark.parametrize("shard", ["1 of 4", "4", "a/b"])
def test_a_bad_shard_is_refused_with_exit_2(tmp_path: Path, store: str, shard: str) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05})
    with pytest.raises(UsageError, match="--shard") as err:
        precompile(PrecompileRequest(matrix, shard=shard, store=store))
    assert exit_code_for(err.value) == 2
    assert not Path(store).exists()  # refused before the store was touched


def test_claim_mixes_with_neither_shard_nor_force(tmp_path: Path, store: str) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05})
    for request in (PrecompileRequest(matrix, claim=True, shard="0/2", store=store),
                    PrecompileRequest(matrix, claim=True, force=True, store=store)):
        with pytest.raises(UsageError, match="do not mix") as err:
            precompile(request)
        assert exit_code_for(err.value) == 2


def test_a_failed_cell_exits_1_after_the_other_cell_is_published_and_a_rerun_exits_0(
        tmp_path: Path, store: str, env: dict[str, str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05, BAD: {"fail": "boom", "seconds": 0.05}})
    events: list[tuple[str, str, str]] = []
    selected: list[int] = []
    result = precompile(PrecompileRequest(matrix, workers=2, store=store, environ=env,
                                          progress=events.append, selected=selected.append))
    doc = result.to_json()
    assert result.exit_code == 1
    err = result.error()
    assert isinstance(err, WorkerError) and "1 of 2 cells failed" in str(err)
    assert {c["cell_id"]: c["status"] for c in doc["cells"]} == {OK: "published",
                                                                 BAD: "failed"}
    assert [c["cell_id"] for c in doc["cells"]] == [OK, BAD]  # the matrix's order
    assert doc["counts"] == {"published": 1, "exists": 0, "skipped": 0, "failed": 1,
                             "refused": 0}
    assert doc["run_id"] and doc["store"] == open_store(store).url
    assert selected == [2]
    assert ("start", OK, "warming") in events and any(e[:2] == ("failed", BAD) for e in events)

    again = precompile(PrecompileRequest(matrix, cells=[OK], store=store, environ=env))
    assert again.exit_code == 0 and again.error() is None
    assert [c["status"] for c in again.to_json()["cells"]] == ["skipped"]
    assert again.to_json()["run_id"] is None  # nothing to warm: no run started


def test_a_claimed_run_publishes_every_cell_once(tmp_path: Path, store: str,
                                                 env: dict[str, str]) -> None:
    ids = cell_ids(3)
    matrix = write_sleep_matrix(tmp_path, dict.fromkeys(ids, 0.05))
    result = precompile(PrecompileRequest(matrix, claim=True, workers=2, lease_seconds=30,
                                          store=store, environ=env))
    assert result.exit_code == 0
    doc = result.to_json()
    assert [c["cell_id"] for c in doc["cells"]] == ids
    assert doc["counts"]["published"] == 3
    st = open_store(store)
    assert all(st.has(manifest_key(c["entry_key"])) for c in doc["cells"])
    rerun = precompile(PrecompileRequest(matrix, claim=True, store=store, environ=env))
    assert rerun.exit_code == 0 and rerun.to_json()["counts"]["skipped"] == 3


def test_a_stop_event_ends_a_claimed_run_and_releases_its_lease_as_cancelled(
        tmp_path: Path, store: str, env: dict[str, str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 120.0})
    stop = threading.Event()
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def progress(event: tuple[str, str, str]) -> None:
        if event[0] == "start":
            stop.set()  # as a caller's own signal handler or thread would

    result = precompile(PrecompileRequest(matrix, claim=True, lease_seconds=60, retries=0,
                                          store=store, environ=env, progress=progress,
                                          stop=stop))
    assert {sig: signal.getsignal(sig) for sig in handlers} == handlers  # none installed
    doc = result.to_json()
    assert doc["stopped"] == {"running": 1, "cancelled": 1, "released": 1}
    assert [c["status"] for c in doc["cells"]] == ["cancelled"]
    assert doc["counts"]["failed"] == 0
    assert result.exit_code == 1 and "stopped" in str(result.error())

    # the attempt was given back: with --retries 0 the cell is claimed and published now
    (tmp_path / "sleepy-model" / "seconds.json").write_text(json.dumps({OK: 0.05}))
    again = precompile(PrecompileRequest(matrix, claim=True, lease_seconds=60, retries=0,
                                         store=store, environ=env))
    assert again.exit_code == 0 and again.to_json()["stopped"] is None
    assert [c["status"] for c in again.to_json()["cells"]] == ["published"]
    # the index says which run was cancelled (the dashboard's runs table, /api/runs)
    with open_index(f"sqlite:///{os.environ['NEFFCACHE_HOME']}/index.db",
                    auto_upgrade=False) as ix:
        runs = {r.id: r for r in list_runs(ix)}
    stopped, finished = runs[doc["run_id"]], runs[again.to_json()["run_id"]]
    assert (stopped.status, stopped.cells_cancelled, stopped.cells_ok) == ("cancelled", 1, 0)
    assert stopped.to_json()["status"] == "cancelled"
    assert (finished.status, finished.cells_cancelled, finished.cells_ok) == ("finished", None, 1)


def test_notice_says_when_no_cell_is_selected(tmp_path: Path, store: str,
                                              env: dict[str, str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05})
    notices: list[str] = []
    result = precompile(PrecompileRequest(matrix, cells=["nothing/*"], store=store,
                                          environ=env, notice=notices.append))
    assert result.exit_code == 0 and result.to_json()["cells"] == []
    assert notices == [f"{matrix}: no cell selected"]


def test_an_edited_copy_of_a_registered_matrix_is_refused_unless_replaced(
        tmp_path: Path, store: str, env: dict[str, str]) -> None:
    from neffcache.index import ListRegisteredMatricesRequest, list_registered_matrices

    prod = write_sleep_matrix(tmp_path / "prod", {OK: 0.05}, name="prod")
    assert precompile(PrecompileRequest(prod, store=store, environ=env)).exit_code == 0
    copy = write_sleep_matrix(tmp_path / "copy", {OK: 0.05, BAD: 0.05}, name="prod")
    events: list[tuple[str, str, str]] = []
    with pytest.raises(UsageError) as err:
        precompile(PrecompileRequest(copy, store=store, environ=env, progress=events.append))
    message = str(err.value)
    assert exit_code_for(err.value) == 2 and "\n" not in message
    assert "matrix 'prod' is registered with other content (version 1, digest" in message
    assert str(copy) in message and err.value.hint and "--replace-matrix" in err.value.hint
    assert events == []  # refused before any cell was warmed
    listed = list_registered_matrices(ListRegisteredMatricesRequest()).to_json()
    assert [(m["name"], m["version"], m["cells"]) for m in listed] == [("prod", 1, 1)]

    replaced = precompile(PrecompileRequest(copy, store=store, environ=env,
                                            replace_matrix=True))
    assert replaced.exit_code == 0
    listed = list_registered_matrices(ListRegisteredMatricesRequest()).to_json()
    assert [(m["name"], m["version"], m["cells"]) for m in listed] == [("prod", 2, 2)]
    again = precompile(PrecompileRequest(copy, store=store, environ=env))  # now current
    assert again.exit_code == 0


# --- push ---------------------------------------------------------------------------------

def test_push_publishes_a_cell_from_a_cache_dir_and_indexes_it(tmp_path: Path,
                                                               store: str) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05})
    cache = neff_dir(tmp_path / "cache", {"ab/cd/k.neff": b"neff bytes", "x.neff": b"x"})
    result = push(PushRequest(roots={"neff": cache}, matrix=matrix, cell_id=OK, store=store))
    doc = result.to_json()
    assert result.exit_code == 0 and result.error() is None
    assert doc["cell_id"] == OK and doc["created"] is True and doc["indexed"] is True
    assert doc["files"] == 2 and doc["total_bytes"] == len(b"neff bytes") + 1
    assert doc["store"] == open_store(store).url
    assert open_store(store).has(manifest_key(doc["entry_key"]))
    # The same cell again, its roots as --root strings: the first writer's entry stands.
    second = push(PushRequest(roots=[f"neff={cache}"], matrix=matrix, cell_id=OK, store=store))
    assert second.to_json()["entry_key"] == doc["entry_key"]
    assert second.to_json()["created"] is False and second.exit_code == 0


@pytest.mark.parametrize("request_args, needle", [
    ({"roots": {"neff": "/tmp"}}, "name the cell"),
    ({"roots": ["neff"], "cell_id": OK}, "expected NAME=DIR"),
    ({"roots": {"inductor": "/tmp"}, "cell_id": OK}, "no cache root 'inductor'"),
    ({"roots": (), "cell_id": OK}, "at least one cache root"),
])
def test_push_refuses_a_bad_request_with_exit_2(tmp_path: Path, store: str,
                                                request_args: dict[str, object],
                                                needle: str) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05})
    args = dict(request_args)
    if "cell_id" in args:
        args["matrix"] = matrix
    with pytest.raises(UsageError, match=needle) as err:
        push(PushRequest(store=store, **args))  # type: ignore[arg-type]
    assert exit_code_for(err.value) == 2


# --- capture ------------------------------------------------------------------------------

def test_capture_back_fills_the_only_cell_without_an_entry(tmp_path: Path, store: str) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05, BAD: 0.05})
    cache = tmp_path / "cache"
    neff_dir(cache / "neff", {"restored.neff": b"from an entry"})
    pushed = push(PushRequest(roots={"neff": cache / "neff"}, matrix=matrix, cell_id=OK,
                              store=store))
    neff_dir(cache / "neff", {"runtime/new.neff": b"compiled at run time"})

    plan = capture_entry(CaptureRequest(matrix, cache, dry_run=True, store=store))
    doc = plan.to_json()
    assert plan.exit_code == 0 and "indexed" not in doc and doc["dry_run"] is True
    assert (doc["action"], doc["cell_id"], doc["new_files"], doc["restored_files"]) == \
        ("publish", BAD, 1, 1)

    done = capture_entry(CaptureRequest(matrix, cache, store=store))
    doc = done.to_json()
    assert done.exit_code == 0
    assert doc["created"] is True and doc["indexed"] is True and doc["files"] == 1
    assert doc["entry_key"] != pushed.to_json()["entry_key"]
    assert open_store(store).has(manifest_key(doc["entry_key"]))
    again = capture_entry(CaptureRequest(matrix, cache, store=store))
    assert again.to_json()["action"] == "nothing" and again.exit_code == 0


def test_capture_cannot_attribute_files_to_one_of_several_cells(tmp_path: Path,
                                                                store: str) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05, BAD: 0.05})
    cache = tmp_path / "cache"
    neff_dir(cache / "neff", {"new.neff": b"runtime"})
    with pytest.raises(UsageError, match="--cell ID") as err:
        capture_entry(CaptureRequest(matrix, cache, store=store))
    assert exit_code_for(err.value) == 2


# --- warm ---------------------------------------------------------------------------------

@pytest.fixture
def restored(tmp_path: Path) -> Iterator[Path]:
    cache = tmp_path / "restored"
    (cache / "neff").mkdir(parents=True)
    yield cache


def test_check_warm_exits_3_with_strict_when_a_cell_compiled(tmp_path: Path, restored: Path,
                                                             env: dict[str, str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05, BAD: 0.05})
    events: list[tuple[str, str, str]] = []
    lenient = check_warm(WarmRequest(matrix, restored, cells=[OK], environ=env,
                                     progress=events.append))
    assert lenient.exit_code == 0  # the sleep worker leaves new files: compiled
    assert lenient.to_json()["counts"] == {"hit": 0, "compiled": 1, "failed": 0}
    assert [e[0] for e in events] == ["start", "compiled"]
    strict = check_warm(WarmRequest(matrix, restored, cells=[OK], strict=True, environ=env))
    assert strict.exit_code == 3


def test_check_warm_exits_1_when_a_warm_up_fails(tmp_path: Path, restored: Path,
                                                 env: dict[str, str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: {"fail": "boom", "seconds": 0.01}})
    result = check_warm(WarmRequest(matrix, restored, environ=env))
    assert result.exit_code == 1 and isinstance(result.error(), WorkerError)
    assert result.to_json()["cells"][0]["status"] == "failed"


def test_check_warm_refuses_a_directory_without_cache_roots(tmp_path: Path) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05})
    with pytest.raises(UsageError, match="no cache root") as err:
        check_warm(WarmRequest(matrix, tmp_path / "empty"))
    assert exit_code_for(err.value) == 2


def test_warm_results_a_slow_index_did_not_take_are_spooled_and_recorded_by_the_next_warm(
        tmp_path: Path, restored: Path, store: str, env: dict[str, str]) -> None:
    matrix = write_sleep_matrix(tmp_path, {OK: 0.05, BAD: 0.05})
    pushed = push(PushRequest(roots={"neff": neff_dir(tmp_path / "c", {"k.neff": b"k"})},
                              matrix=matrix, cell_id=OK, store=store)).to_json()
    db = Path(os.environ["NEFFCACHE_HOME"]) / "index.db"
    spool = restored / ".neffcache-entries" / "report-spool"
    notes: list[str] = []
    writer = sqlite3.connect(db)  # another writer holds the index: it answers too slowly
    writer.execute("BEGIN IMMEDIATE")
    try:
        first = check_warm(WarmRequest(matrix, restored, cells=[OK], environ=env,
                                       notice=notes.append))
    finally:
        writer.rollback()
        writer.close()
    assert first.to_json()["cells"][0]["status"] == "compiled"
    assert any("did not answer within 2.0 s" in n for n in notes)
    assert any(f"kept in {spool}" in n for n in notes)
    (spooled,) = spool.glob("*.json")
    assert json.loads(spooled.read_bytes())["verdicts"] == [
        {"entry_key": pushed["entry_key"], "status": "compiled"}]
    assert verified(db, pushed["entry_key"]) is None
    # The next warm (of the other cell) reaches the index: the spooled verdict is recorded.
    check_warm(WarmRequest(matrix, restored, cells=[BAD], environ=env))
    assert verified(db, pushed["entry_key"]) == "compiled"
    assert list(spool.glob("*.json")) == []


def verified(db: Path, entry_key: str) -> str | None:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        row = conn.execute("SELECT verified_status FROM entries WHERE entry_key = ?",
                           (entry_key,)).fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]
