"""plan_restore, cell verdicts, the state file and the exit rule (all pure)."""

from __future__ import annotations

import json
import shlex
from dataclasses import replace
from typing import Any

import pytest

from neffcache.errors import (
    CacheMissError,
    DeadlineExceededError,
    FingerprintMismatchError,
    IntegrityError,
    UnavailableError,
    exit_code_for,
)
from neffcache.fingerprint import build_fingerprint
from neffcache.manifest import FileRecord, Manifest
from neffcache.matrix import Cell
from neffcache.restore import state_rows
from neffcache.restore.install import FileFailure
from neffcache.restore.outcome import RestoreResult, outcome_error
from neffcache.restore.plan import (
    PresentFile,
    cell_verdicts,
    plan_restore,
    short_cells,
    unwanted_files,
    wanted_pairs,
    wanted_sizes,
)
from neffcache.restore.resolve import CellFailure, Resolution
from neffcache.restore.state import StateRecord, encode_state_chunks
from neffcache.restore.state_rows import parse_row_pieces, unpack_row
from tests.support.state_codec import decode_pending, decode_state, encode_state, parse_rows

FP = build_fingerprint("neuron", {"target": "trn2"})
DIRS = {"neff": "/t/neff", "hlo": "/t/hlo"}


def cell(h: int) -> Cell:
    return Cell("p", "diffusers:P", "m", "main", "bfloat16", "compile", ("transformer",),
                h, h, 1, 1)


def f(path: str, sha: str, size: int = 10, root: str = "neff", mode: int = 0o644) -> FileRecord:
    return FileRecord(root, path, size, sha * 64 if len(sha) == 1 else sha, mode)


def entry(h: int, *files: FileRecord) -> Manifest:
    return Manifest(cell(h), FP, tuple(sorted(files, key=lambda r: (r.root, r.path))))


def test_everything_absent_is_fetched_and_shared_blobs_once() -> None:
    a = entry(64, f("x/1.neff", "a"), f("x/2.neff", "b"))
    b = entry(128, f("y/1.neff", "a"), f("x/2.neff", "b"), f("h", "c", root="hlo"))
    plan = plan_restore([a, b], DIRS, {})
    by_sha = {g.sha256[0]: [t.path for t in g.targets] for g in plan.fetch}
    assert by_sha == {"a": ["x/1.neff", "y/1.neff"], "b": ["x/2.neff"], "c": ["h"]}
    assert plan.files_to_fetch == 4
    assert plan.bytes_to_fetch == 30
    assert plan.present == () and plan.conflicts == ()


def test_present_and_valid_files_are_skipped_others_fetched() -> None:
    a = entry(64, f("1", "a"), f("2", "b"), f("3", "c"), f("4", "d", mode=0o755))
    present = {
        ("neff", "1"): PresentFile(10, "a" * 64, 0o644),   # valid
        ("neff", "2"): PresentFile(10, "f" * 64, 0o644),   # wrong bytes
        ("neff", "3"): PresentFile(9, None, 0o644),        # wrong size, not hashed
        ("neff", "4"): PresentFile(10, "d" * 64, 0o644),   # right bytes, wrong mode
    }
    plan = plan_restore([a], DIRS, present)
    assert [t.path for t in plan.present] == ["1"]
    assert sorted(t.path for g in plan.fetch for t in g.targets) == ["2", "3", "4"]


def test_conflicting_entries_first_in_cell_order_wins() -> None:
    a = entry(64, f("same", "a"), f("ok", "c"))
    b = entry(128, f("same", "b", size=11))
    for order in ([a, b], [b, a]):
        plan = plan_restore(order, DIRS, {})
        assert len(plan.conflicts) == 1
        c = plan.conflicts[0]
        winner = next(r for r in order[0].files if r.path == "same")
        assert (c.root, c.path) == ("neff", "same")
        assert c.entry_keys == (order[0].entry_key, order[1].entry_key)
        assert c.sha256s[0] == winner.sha256
        assert "neff/same" in c.message and f"kept entry {order[0].entry_key[:12]}" in c.message
        fetched = {t.path: t.sha256 for g in plan.fetch for t in g.targets}
        assert fetched["same"] == winner.sha256  # fetched once, the winner's bytes
        assert sorted(fetched) == ["ok", "same"]


def test_conflict_present_and_valid_for_any_record_is_left() -> None:
    a = entry(64, f("same", "a"))
    b = entry(128, f("same", "b"))
    for sha in ("a", "b"):
        plan = plan_restore([a, b], DIRS, {("neff", "same"): PresentFile(10, sha * 64, 0o644)})
        assert plan.fetch == () and [t.sha256[0] for t in plan.present] == [sha]
        assert len(plan.conflicts) == 1  # still reported
    other = plan_restore([a, b], DIRS, {("neff", "same"): PresentFile(10, "f" * 64, 0o644)})
    assert [t.sha256[0] for g in other.fetch for t in g.targets] == ["a"]


def test_conflicts_do_not_fail_the_restore() -> None:
    a = entry(64, f("same", "a"))
    b = entry(128, f("same", "b"))
    plan = plan_restore([a, b], DIRS, {})
    restored, incomplete = cell_verdicts([a, b], {("neff", "same")})
    assert restored == (a.cell.id, b.cell.id) and incomplete == ()
    r = result(restored=(64, 128))
    r = RestoreResult(**{**{k: getattr(r, k) for k in r.__slots__}, "conflicts": plan.conflicts})
    assert code(r) == 0 and r.to_json()["conflicts"] == 1


def test_same_bytes_from_two_entries_is_not_a_conflict() -> None:
    plan = plan_restore([entry(64, f("s", "a")), entry(128, f("s", "a"))], DIRS, {})
    assert plan.conflicts == ()
    assert plan.files_to_fetch == 1


def test_fetch_order_follows_the_entries() -> None:
    a = entry(64, f("z", "1"))
    b = entry(128, f("a", "2"))
    assert [g.targets[0].path for g in plan_restore([a, b], DIRS, {}).fetch] == ["z", "a"]


def test_root_without_target_dir_is_refused() -> None:
    a = entry(64, f("x", "a", root="hlo"))
    try:
        plan_restore([a], {"neff": "/t/neff"}, {})
    except IntegrityError as exc:
        assert "root 'hlo' has no target directory" in str(exc)
    else:
        raise AssertionError("expected a ManifestError")


def test_wanted_sizes_and_verdicts() -> None:
    a = entry(64, f("1", "a", size=1), f("2", "b"))
    b = entry(128, f("1", "c", size=2))
    assert wanted_sizes([a, b]) == {("neff", "1"): (1, 2), ("neff", "2"): (10,)}
    restored, incomplete = cell_verdicts([a, b], {("neff", "1"), ("neff", "2")})
    assert restored == (a.cell.id, b.cell.id) and incomplete == ()
    restored, incomplete = cell_verdicts([a, b], {("neff", "1")})
    assert restored == (b.cell.id,) and incomplete == (a.cell.id,)


def test_wanted_pairs_and_unwanted_files_without_a_map() -> None:
    a = entry(64, f("1", "a", size=1), f("2", "b"), f("h", "c", root="hlo"))
    b = entry(128, f("1", "c", size=2))
    assert list(wanted_pairs([a])) == list(wanted_sizes([a]).items())
    assert list(wanted_pairs([a, b])) == list(wanted_sizes([a, b]).items())
    have = [("neff", "1"), ("neff", "9"), ("hlo", "1"), ("hlo", "h"), ("x", "2")]
    assert unwanted_files([a, b], have) == {("neff", "9"), ("hlo", "1"), ("x", "2")}
    assert unwanted_files([b], have[:2]) == {("neff", "9")}
    assert unwanted_files([a], []) == set()


def test_state_rows_in_pieces_read_as_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """However the text is cut, and with items longer than the window's margin (read again
    once there is more), the pieces read as the whole text; a cut-off document is empty."""
    monkeypatch.setattr(state_rows, "MARGIN", 8)
    good = [3, -5, 6, 7, "ab" * 32, 0o644]
    doc = {"schema_version": 1, "x": 7,
           "files": {"a/" + "long" * 9: good, 'q"],': [0, 1, 2, 3, "0" * 64, 0],
                     "bad": [1, 2]},
           "pending": {"b1": {"p": good}, "b2": {}}}
    for text in (json.dumps(doc, separators=(",", ":")), json.dumps(doc, indent=3)):
        text = text.replace('"x": 7', '"x":7').replace('"x":7', '"x":' + "1" * 23 + ".5e+1")
        whole = parse_rows(text, 1)
        assert len(whole[0]) == 2 and list(whole[1]) == ["b1", "b2"]
        for n in (1, 3, 7, 50, len(text)):
            pieces = [text[i:i + n] for i in range(0, len(text), n)]
            assert parse_row_pieces(iter(pieces), 1) == whole, n
            assert parse_row_pieces(pieces[:-1], 1) == ({}, {}), n
            assert parse_row_pieces(["", *pieces, ""], 2) == ({}, {})


def test_state_round_trip_and_garbage_is_empty() -> None:
    recs = {"a/b": StateRecord(1, 2, 3, 4, "a" * 64, 0o644)}
    assert decode_state(encode_state(recs)) == recs
    assert recs["a/b"].matches(1, 2, 3, 4)
    assert not recs["a/b"].matches(1, 2, 99, 4)  # ctime moved: re-hash
    for junk in (b"", b"[]", b"{", b'{"schema_version": 1, "files": {"x": [1]}}',
                 b'{"schema_version": 2, "files": {}}'):
        assert decode_state(junk) == {}


def test_state_pending_in_pieces_is_the_whole_document() -> None:
    """Pending rows are written a few at a time; joined they are the one document: boots in
    the order of their first path, paths sorted, a durable path never also pending."""
    rec = {f"d/{i:02d}": StateRecord(i, 2, 3, 4, "a" * 64, 0o644) for i in range(9)}
    pending = {p: ("b2" if i % 3 else "b1", r) for i, (p, r) in enumerate(rec.items())}
    durable = ["d/00", "d/04"]
    data = b"".join(encode_state_chunks(durable, rec.__getitem__, pending, batch=2))
    doc = json.loads(data)
    boots: dict[str, dict[str, Any]] = {}
    for p in sorted(pending):
        if p not in durable:
            boots.setdefault(pending[p][0], {})[p] = json.loads(json.dumps(
                [rec[p].size, 2, 3, 4, "a" * 64, 0o644]))
    assert doc == {"schema_version": 1, "files": {p: doc["files"][p] for p in durable},
                   "pending": boots}
    assert list(doc["pending"]) == list(boots) == ["b2", "b1"] and data == json.dumps(
        doc, separators=(",", ":")).encode()
    assert decode_pending(data) == {p: v for p, v in pending.items() if p not in durable}
    assert decode_state(data) == {p: rec[p] for p in durable}
    assert b"pending" not in encode_state(rec, {})


def test_state_rows_read_in_one_pass_as_json_reads_them() -> None:
    """The packed reader agrees with ``json.loads`` on any layout of the document (a path with
    quotes, brackets and non-ASCII; whitespace anywhere), and leaves out rows that are not
    records (their files are hashed again) rather than the whole state."""
    good = [3, -5, 6, 7, "ab" * 32, 0o644]
    doc = {"schema_version": 1, "files": {'a/"],x': good, "é/b": [0, 1, 2, 3, "0" * 64, 0],
                                          "bad/hex": [1, 2, 3, 4, "zz" * 32, 0o644],
                                          "bad/len": [1, 2, 3, 4, "ab" * 31, 0o644],
                                          "bad/size": [-1, 2, 3, 4, "ab" * 32, 0o644],
                                          "bad/float": [1.5, 2, 3, 4, "ab" * 32, 0o644],
                                          "bad/short": [1, 2, 3]},
           "pending": {"b1": {"p": good}, "b2": {}}}
    for text in (json.dumps(doc, separators=(",", ":")), json.dumps(doc, indent=2),
                 json.dumps(doc, ensure_ascii=False)):
        files, pending = parse_rows(text, 1)
        assert {p: unpack_row(b) for p, b in files.items()} == {
            'a/"],x': tuple(good), "é/b": (0, 1, 2, 3, "0" * 64, 0)}
        assert {b: {p: unpack_row(r) for p, r in rows.items()} for b, rows in pending.items()} \
            == {"b1": {"p": tuple(good)}, "b2": {}}
    for junk in ('{"schema_version":1,"files":{}} x', '{"schema_version":2,"files":{"p":[]}}',
                 '{"files":{"p":' + json.dumps(good) + "}}", '{"schema_version":1,"files":[]}'):
        assert parse_rows(junk, 1) == ({}, {})


# --- the exit rule --------------------------------------------------------------------------

def result(*, missing=(), restored=(), failed=(), failures=(), elsewhere=(), deadline=False,
           requested=None):  # type: ignore[no-untyped-def]
    res = Resolution(found=(), missing=tuple(cell(h) for h in missing), failed=tuple(failed),
                     unresolved=(), elsewhere=tuple(elsewhere))
    ids = tuple(cell(h).id for h in restored)
    req = requested or tuple(cell(h).id for h in (*restored, *missing))
    return RestoreResult("neuron", FP.key, "file:///s", "/t", req, res, ids, (), 0, 0, 0,
                         tuple(failures), deadline, 0.1)


def code(r: RestoreResult) -> int:
    err = outcome_error(r)
    return exit_code_for(err) if err else 0


def test_exit_rule() -> None:
    assert code(result(restored=(64,))) == 0
    assert code(result(restored=(64,), missing=(128,))) == 3
    assert isinstance(outcome_error(result(missing=(128,))), CacheMissError)
    other = ((cell(128).id, ("f" * 64,)),)
    mismatch = outcome_error(result(missing=(128,), elsewhere=other))
    assert isinstance(mismatch, FingerprintMismatchError)
    assert mismatch.hint and mismatch.hint.startswith("neffcache fingerprint --explain ")
    flags = ("--python", "/opt/my venv/bin/python", "--store", "file:///s")
    quoted = outcome_error(replace(result(missing=(128,), elsewhere=other), explain_args=flags))
    assert quoted is not None and quoted.hint is not None
    assert shlex.split(quoted.hint)[4:] == list(flags)  # quoted for a shell, run as printed
    # Some cell restored: a plain partial restore, even if others were built elsewhere.
    assert code(result(restored=(64,), missing=(128,), elsewhere=other)) == 3
    bad = FileFailure("neff", "x", "integrity", "neff/x: corrupt")
    assert code(result(restored=(64,), failures=(bad,), deadline=True)) == 4
    rejected = CellFailure(cell(64).id, "integrity", "manifests/k.json: path '../x'")
    assert code(result(failed=(rejected,))) == 4
    down = FileFailure("neff", "x", "unavailable", "store down")
    assert isinstance(outcome_error(result(failures=(down,))), UnavailableError)
    assert code(result(failures=(FileFailure("neff", "x", "io", "disk full"),))) == 1
    late = FileFailure("neff", "x", "deadline", "stopped")
    assert isinstance(outcome_error(result(failures=(late,), deadline=True)),
                      DeadlineExceededError)


def test_short_cells_judge_as_the_plan_does() -> None:
    """``short_cells`` (known.py's judgement, without a plan) says what ``cell_verdicts`` of
    the plan's in-place files says: conflicts, wrong mode or size, absent, another root."""
    a = entry(64, f("same", "a"), f("only-a", "c"))
    b = entry(128, f("same", "b"), f("only-b", "d", mode=0o755))
    c = entry(192, f("x", "e", root="other"))
    cases = [{}, {("neff", "same"): PresentFile(10, "a" * 64, 0o644)},
             {("neff", "same"): PresentFile(10, "b" * 64, 0o644),
              ("neff", "only-a"): PresentFile(10, "c" * 64, 0o644),
              ("neff", "only-b"): PresentFile(10, "d" * 64, 0o644)},  # wrong mode
             {("neff", "same"): PresentFile(10, "b" * 64, 0o644),
              ("neff", "only-a"): PresentFile(10, "c" * 64, 0o644),
              ("neff", "only-b"): PresentFile(10, "d" * 64, 0o755)},
             {("neff", "same"): PresentFile(11, "a" * 64, 0o644),
              ("neff", "only-a"): PresentFile(10, "c" * 64, 0o644)}]
    dirs = {**DIRS, "other": "/t/other"}
    seen = []
    for present in cases:
        in_place = {t.id for t in plan_restore([a, b, c], dirs, present).present}
        want = set(cell_verdicts([a, b, c], in_place)[1])
        assert short_cells([a, b, c], dirs, present) == want
        seen.append(want)
    assert {cell(64).id, cell(128).id} - seen[3] == {cell(64).id, cell(128).id} and \
        cell(128).id in seen[2] and cell(64).id in seen[4]
    try:
        short_cells([c], DIRS, {})
    except IntegrityError as exc:  # a ManifestError, as plan_restore raises
        assert "root 'other' has no target directory" in str(exc)
    else:
        raise AssertionError("expected a ManifestError")
