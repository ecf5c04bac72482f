"""Coverage's reads over a ``listing.Reader``, and the facts they give: no SQLAlchemy here.
The statements are named (``coverage_statements`` builds them; ``sqla_reader`` runs them
for ``neffcache coverage``, the API, the dashboard and /metrics alike).

- ``status_of`` is the rule: ready (an entry), in_progress (no entry; a live lease), failed
  (no entry, no lease; a recorded failure), missing (none of these).
- ``read_facts`` reads what the index holds for a scope of cells (their keys, or a
  registered matrix version) in a fixed number of statements, never one per cell; ``now``
  (the database clock, ``database_now``) decides which leases are live.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from neffcache.errors import NotFoundError
from neffcache.index.listing import Reader, shape_of
from neffcache.index.shapes import Status
from neffcache.index.values import (
    FAILED,
    IN_PROGRESS,
    MISSING,
    READY,
    CoverageRow,
    LiveLease,
    as_utc,
)

if TYPE_CHECKING:
    from neffcache.fingerprint import Fingerprint
    from neffcache.index.ops_values import MatrixVersion
    from neffcache.matrix import Cell

Pair = tuple[str, str]  # (cell key, fingerprint key)
Scope = tuple[str, Any]  # ("keys", cell keys) or ("matrix", a registered version's id)


def status_of(entry: bool, lease: bool, failure: bool) -> Status:
    """The coverage rule for one cell x fingerprint (pure): an entry wins, then a live lease,
    then a recorded failure; else missing."""
    if entry:
        return READY
    if lease:
        return IN_PROGRESS
    return FAILED if failure else MISSING


@dataclass(frozen=True, slots=True)
class FailureFact:
    exit_status: int | None
    log_tail: str
    failed_at: datetime | None


@dataclass(frozen=True, slots=True)
class CoverageFacts:
    """What the index holds for some cells, keyed by (cell key, fingerprint key). Without
    details an entry is (None, None) and a failure has no log tail."""

    entries: dict[Pair, tuple[str | None, int | None]] = field(default_factory=dict)
    failures: dict[Pair, FailureFact] = field(default_factory=dict)
    leases: dict[Pair, LiveLease] = field(default_factory=dict)
    fingerprints: dict[str, Fingerprint] = field(default_factory=dict)
    first_seen: dict[str, datetime | None] = field(default_factory=dict)
    named: tuple[str, ...] = ()  # columns even with nothing for these cells (restore reports)


def keys_param(dialect: str, keys: Sequence[str]) -> str:
    """A set of keys as the one parameter ``coverage_statements.in_keys`` takes: a Postgres
    array literal (``{"k1","k2"}``, each element quoted), a JSON list on SQLite
    (``json_each``)."""
    if dialect == "postgresql":
        return "{" + ",".join(f'"{_array_escape(k)}"' for k in keys) + "}"
    return json.dumps(list(keys))


def _array_escape(key: str) -> str:
    """``key`` inside a double-quoted element of a Postgres array literal."""
    if "\\" in key or '"' in key:
        return key.replace("\\", "\\\\").replace('"', '\\"')
    return key


def scope_of_keys(keys: Sequence[str]) -> Scope:
    return ("keys", keys)


def scope_of_matrix(matrix_id: int) -> Scope:
    return ("matrix", matrix_id)


def _scope_params(reader: Reader, scope: Scope) -> dict[str, Any]:
    kind, value = scope
    if kind == "matrix":
        return {"matrix_id": value}
    return {"keys": keys_param(reader.dialect, value)}


def database_now(reader: Reader) -> datetime:
    """The database server's current time (UTC). Postgres: ``now()`` (the transaction's
    start, so one transaction sees one time); SQLite: its own clock, in milliseconds."""
    row = reader.first("now", (), {})
    assert row is not None
    value = row[0]
    out = as_utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))
    assert out is not None
    return out


def read_facts(reader: Reader, scope: Scope, now: datetime, *, details: bool = True,
               named: Sequence[str] = ()) -> CoverageFacts:
    """What the index holds for the cells of ``scope``: one statement each for entries,
    failures (the latest per pair, with details) and live leases at ``now``, then the
    fingerprints they name (with ``named`` ones: columns even when nothing was built for
    them). A scope of no keys reads nothing but the named fingerprints."""
    facts = CoverageFacts(named=tuple(dict.fromkeys(named)))
    if scope[0] != "keys" or scope[1]:
        params = _scope_params(reader, scope)
        shape = shape_of({"scope": scope[0], "details": details})
        if details:
            for ck, fk, key, size in reader.all("cov_entries", shape, params):
                facts.entries[(ck, fk)] = (key, size)
            for ck, fk, status, tail, at in reader.all("cov_failures", shape, params):
                facts.failures[(ck, fk)] = FailureFact(status, tail, as_utc(at))
        else:
            for ck, fk in reader.all("cov_entries", shape, params):
                facts.entries[(ck, fk)] = (None, None)
            for ck, fk in reader.all("cov_failures", shape, params):
                facts.failures[(ck, fk)] = FailureFact(None, "", None)
        for r in reader.all("cov_leases", shape_of({"scope": scope[0]}),
                             {**params, "now": now}):
            lease = live_lease(r)
            facts.leases[(lease.cell_key, lease.fingerprint_key)] = lease
    seen = {fp for _, fp in facts.entries} | {fp for _, fp in facts.failures} | {
        fp for _, fp in facts.leases} | set(facts.named)
    read_fingerprints(reader, sorted(seen), facts)
    return facts


def read_fingerprints(reader: Reader, keys: Sequence[str], facts: CoverageFacts) -> None:
    """The fingerprints of ``keys`` the index knows, into ``facts``."""
    from neffcache.fingerprint import Fingerprint

    if not keys:
        return
    for key, backend, fields, first_seen in reader.all(
            "cov_fingerprints", (), {"keys": keys_param(reader.dialect, keys)}):
        facts.fingerprints[key] = Fingerprint(backend=backend, fields=tuple(
            sorted((str(k), str(v)) for k, v in fields.items())))
        facts.first_seen[key] = as_utc(first_seen)


def fingerprints_with_rows(reader: Reader, cell_keys: Sequence[str], now: datetime) -> set[str]:
    """Fingerprint keys with an entry, a failure or a live lease for one of these cells,
    without reading the cells' rows (``coverage_statements._fingerprints_with``)."""
    if not cell_keys:
        return set()
    return {r[0] for r in reader.all("cov_fingerprints_with", (), {
        "keys": keys_param(reader.dialect, cell_keys), "now": now})}


def find_fingerprint_keys(reader: Reader, prefix: str) -> list[str]:
    """Up to 10 fingerprint keys starting with the hex ``prefix``, in order (a range an
    index serves; a non-hex prefix matches nothing)."""
    p = prefix.lower()
    if not p or any(ch not in "0123456789abcdef" for ch in p) or len(p) > 64:
        return []
    return [r[0] for r in reader.all("fingerprint_prefix", (),
                                      {"lo": p, "hi": p + "g", "limit": 10})]


def live_lease(r: Sequence[Any]) -> LiveLease:
    """A LiveLease from (cell key, fingerprint key, host, claimed, heartbeat, expires,
    attempts); a live lease has all three times."""
    claimed, heartbeat, expires = (_utc(t) for t in r[3:6])
    return LiveLease(str(r[0]), str(r[1]), str(r[2] or "?"), claimed, heartbeat, expires,
                     int(r[6]))


def _utc(ts: datetime | None) -> datetime:
    out = as_utc(ts)
    assert out is not None
    return out


def coverage_row(cell_id: str, cell_key: str, fp_key: str, status: Status,
                 facts: CoverageFacts) -> CoverageRow:
    """A CoverageRow with what explains its status (entry, lease holder, failure)."""
    pair = (cell_key, fp_key)
    if status == READY:
        entry_key, size = facts.entries[pair]
        return CoverageRow(cell_id, cell_key, fp_key, READY, entry_key=entry_key,
                           total_bytes=size)
    if status == IN_PROGRESS:
        lease = facts.leases[pair]
        return CoverageRow(cell_id, cell_key, fp_key, IN_PROGRESS, host=lease.host,
                           since=lease.claimed_at, lease_expires_at=lease.expires_at)
    if status == FAILED:
        failure = facts.failures[pair]
        return CoverageRow(cell_id, cell_key, fp_key, FAILED, exit_status=failure.exit_status,
                           log_tail=failure.log_tail, failed_at=failure.failed_at)
    return CoverageRow(cell_id, cell_key, fp_key, MISSING)


def cell_ids_and_keys(cells: Sequence[Cell] | Sequence[tuple[str, str]]
                      ) -> tuple[tuple[str, str], ...]:
    """(id, key) per distinct cell, in order, from cells (a key is a digest: computed once
    here) or from (id, key) pairs already made."""
    from neffcache.matrix import Cell, cell_keys

    pairs: Iterable[tuple[str, str]]
    if cells and isinstance(cells[0], Cell):
        cell_objs = cast("Sequence[Cell]", cells)
        pairs = zip([c.id for c in cell_objs], cell_keys(cell_objs), strict=True)
    else:
        pairs = cast("Sequence[tuple[str, str]]", cells)
    out: dict[str, str] = {}
    for cell_id, key in pairs:
        out.setdefault(key, cell_id)
    return tuple((cell_id, key) for key, cell_id in out.items())


# --- registered matrices --------------------------------------------------------------------

def _registered(row: Sequence[Any]) -> tuple[Any, ...]:
    """A version row's order as the current one is chosen: the last registered, then id."""
    return (as_utc(row[3]), row[0])


def matrix_versions(reader: Reader, name: str) -> list[MatrixVersion]:
    """Every version of matrix ``name``, oldest first (empty if unknown), each with a
    ``cell_count`` of 0 (``matrix_reads.versions_in`` counts them)."""
    from neffcache.index.ops_values import MatrixVersion

    rows = list(reader.all("matrix_versions", (), {"name": name}))
    if not rows:
        return []
    current = max(rows, key=_registered)[0]
    return [MatrixVersion(r[0], name, n, r[1], r[2], 0, as_utc(r[3]),  # type: ignore[arg-type]
                          r[0] == current) for n, r in enumerate(rows, 1)]


def current_matrix(reader: Reader, name: str) -> tuple[int, str] | None:
    """(id, backend) of the current version of matrix ``name`` (as ``matrix_versions``
    marks it); None if the name is unknown."""
    rows = list(reader.all("matrix_versions", (), {"name": name}))
    if not rows:
        return None
    row = max(rows, key=_registered)
    return int(row[0]), str(row[2])


def choose_version(versions: Sequence[MatrixVersion], name: str,
                   version: int | None = None) -> MatrixVersion:
    """Pure: the current version (or ``version``) of ``versions``; NotFoundError names what
    is unknown."""
    if not versions:
        raise NotFoundError(f"matrix {name!r}: not registered (neffcache matrix register FILE)")
    if version is None:
        return next(v for v in versions if v.current)
    if 1 <= version <= len(versions):
        return versions[version - 1]
    raise NotFoundError(f"matrix {name!r}: no version {version} "
                        f"(versions 1..{len(versions)})")


def matrix_cell_refs(reader: Reader, matrix_id: int) -> list[tuple[str, str]]:
    """(cell id, cell key) of a registered version, in declared order."""
    return [(r[0], r[1]) for r in reader.all("matrix_cell_refs", (), {"matrix_id": matrix_id})]
