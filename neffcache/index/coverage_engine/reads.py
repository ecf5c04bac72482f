"""Coverage's reads over a ``listing.Reader``: a fixed number of statements per scope of cells."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from itertools import chain, pairwise
from typing import TYPE_CHECKING, Any

from neffcache.errors import NotFoundError
from neffcache.fingerprint import Fingerprint
from neffcache.index.coverage_engine.rules import (
    CoverageFacts,
    CoveragePlan,
    FailureFact,
    cell_ids_and_keys,
)
from neffcache.index.listing import HEX, Reader, shape_of
from neffcache.index.ops_values import MatrixVersion
from neffcache.index.values import LiveLease, Status, as_utc

if TYPE_CHECKING:
    from neffcache.matrix import Cell

Scope = tuple[str, Any]  # ("keys", cell keys) or ("matrix", a registered version's id)
STREAM_BATCH = 500  # cells per batch: a batch's facts are what a stream holds at once
FIRST_BATCH = 100  # the first batch is small: its rows come at once
SINGLE = 500  # up to this many cells are read once, with details, before the first row


def keys_param(dialect: str, keys: Sequence[str]) -> str:
    """Keys as ``statements.in_keys``'s one parameter: a Postgres array literal, else JSON."""
    if dialect == "postgresql":
        return "{" + ",".join('"' + k.replace("\\", "\\\\").replace('"', '\\"') + '"'
                              for k in keys) + "}"
    return json.dumps(list(keys))


def database_now(reader: Reader) -> datetime:
    """The database's time (UTC); Postgres: the transaction's start."""
    value = reader.all("now", (), {})[0][0]
    return _utc(value if isinstance(value, datetime) else datetime.fromisoformat(str(value)))


def read_facts(reader: Reader, scope: Scope, now: datetime, *, details: bool = True,
               named: Sequence[str] = ()) -> CoverageFacts:
    """Entries, latest failures and live leases of ``scope``, one statement each; their prints."""
    facts = CoverageFacts(named=tuple(dict.fromkeys(named)))
    kind, value = scope
    if kind != "keys" or value:
        params = ({"matrix_id": value} if kind == "matrix"
                  else {"keys": keys_param(reader.dialect, value)})
        shape = shape_of({"scope": kind, "details": details})
        for ck, fk, *entry in reader.all("cov_entries", shape, params):
            facts.entries[(ck, fk)] = (entry[0], entry[1]) if details else (None, None)
        for ck, fk, *failure in reader.all("cov_failures", shape, params):
            facts.failures[(ck, fk)] = (FailureFact(failure[0], failure[1], as_utc(failure[2]))
                                        if details else FailureFact(None, "", None))
        for r in reader.all("cov_leases", shape_of({"scope": kind}), {**params, "now": now}):
            lease = live_lease(r)
            facts.leases[(lease.cell_key, lease.fingerprint_key)] = lease
    seen = {*facts.named, *(fp for _, fp in chain(facts.entries, facts.failures, facts.leases))}
    facts.fingerprints.update(read_fingerprints(reader, sorted(seen)))
    return facts


def read_fingerprints(reader: Reader, keys: Sequence[str]) -> dict[str, Fingerprint]:
    """The fingerprints of ``keys`` the index knows."""
    if not keys:
        return {}
    rows = reader.all("cov_fingerprints", (), {"keys": keys_param(reader.dialect, keys)})
    return {key: Fingerprint(backend=backend, fields=tuple(
                sorted((str(k), str(v)) for k, v in fields.items())))
            for key, backend, fields in rows}


def fingerprints_with_rows(reader: Reader, cell_keys: Sequence[str], now: datetime) -> set[str]:
    """Fingerprint keys with an entry, a failure or a live lease for one of these cells."""
    return {r[0] for r in reader.all("cov_fingerprints_with", (), {
        "keys": keys_param(reader.dialect, cell_keys), "now": now})}


def find_fingerprints(reader: Reader, prefix: str) -> dict[str, Fingerprint]:
    """Up to 10 fingerprints whose key starts with the hex ``prefix``, by key."""
    p = prefix.lower()
    if not HEX.fullmatch(p):
        return {}
    keys = [r[0] for r in reader.all("fingerprint_prefix", (),
                                      {"lo": p, "hi": p + "g", "limit": 10})]
    return dict(sorted(read_fingerprints(reader, keys).items()))


def live_lease(r: Sequence[Any]) -> LiveLease:
    claimed, heartbeat, expires = (_utc(t) for t in r[3:6])
    return LiveLease(str(r[0]), str(r[1]), str(r[2] or "?"), claimed, heartbeat, expires,
                     int(r[6]))


def _utc(ts: datetime | None) -> datetime:
    out = as_utc(ts)
    assert out is not None
    return out


def plan_coverage(reader: Reader, cells: Sequence[Cell] | Sequence[tuple[str, str]],
                  given: Sequence[Fingerprint], now: datetime, *, named: Sequence[str] = (),
                  only: Sequence[str] | None = None) -> CoveragePlan:
    """The columns for ``cells`` (``only``: these); up to SINGLE cells read at once."""
    cells = cell_ids_and_keys(cells)
    single = None
    if len(cells) <= SINGLE:
        single = read_facts(reader, ("keys", [k for _, k in cells]), now, named=named)
        seen = set(single.fingerprints) | set(single.named)
        known = single.fingerprints
    else:
        seen = set(named) | fingerprints_with_rows(reader, [k for _, k in cells], now)
        known = read_fingerprints(reader, sorted(seen))
    return CoveragePlan.of(cells, given, known, seen, only=only, single=single)


Cell_ = tuple[str, str, str, Status, CoverageFacts]  # cell id, cell key, fp key, status, facts


def coverage_cells(reader: Reader, plan: CoveragePlan, now: datetime) -> Iterator[Cell_]:
    """``rules.coverage_row``'s arguments per cell x column; each batch read in its turn."""
    n = len(plan.cells)  # FIRST_BATCH cells, then STREAM_BATCH each
    for start, stop in pairwise([0, *range(FIRST_BATCH, n, STREAM_BATCH), n] if n else []):
        part = plan.cells[start:stop]
        facts = plan.single if plan.single is not None else read_facts(
            reader, ("keys", [k for _, k in part]), now)
        for cell_id, ck in part:
            for k in plan.keys:
                yield cell_id, ck, k, facts.status((ck, k)), facts


def matrix_cell_refs(reader: Reader, matrix_id: int) -> list[tuple[str, str]]:
    return [(r[0], r[1]) for r in reader.all("matrix_cell_refs", (), {"matrix_id": matrix_id})]


def matrix_versions(reader: Reader, name: str) -> list[MatrixVersion]:
    """Every version of matrix ``name``, oldest first, each with a ``cell_count`` of 0."""
    return versions_of(name, reader.all("matrix_versions", (), {"name": name}))


def versions_of(name: str, rows: Sequence[Sequence[Any]]) -> list[MatrixVersion]:
    """Rows (id, digest, backend, registered at) of matrix ``name`` as its versions."""
    if not rows:
        return []
    current = max(rows, key=lambda r: (as_utc(r[3]), r[0]))[0]
    return [MatrixVersion(r[0], name, n, r[1], r[2], 0, as_utc(r[3]),  # type: ignore[arg-type]
                          r[0] == current) for n, r in enumerate(rows, 1)]


def choose_version(versions: Sequence[MatrixVersion], name: str,
                   version: int | None = None) -> MatrixVersion:
    """The current version (or ``version``); NotFoundError names what is unknown."""
    if not versions:
        raise NotFoundError(f"matrix {name!r}: not registered (neffcache matrix register FILE)")
    if version is None:
        return next(v for v in versions if v.current)
    if 1 <= version <= len(versions):
        return versions[version - 1]
    raise NotFoundError(f"matrix {name!r}: no version {version} "
                        f"(versions 1..{len(versions)})")
