"""Registered matrices: store a matrix's TOML, sha256 and cells in the index, keep every
version, and give back the cells of the current one (coverage without the file at hand).

A matrix is named by its ``name`` key (else the file's stem). Its sha256 is the digest of
the canonical JSON of the parsed TOML, so comments and layout do not make a new version.
Registering new content adds a version; registering content seen before makes that version
current again (``registered_at`` moves to now). Versions count from 1 per name.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from neffcache.canonical import digest_of
from neffcache.errors import MatrixError, NotFoundError
from neffcache.index.api import Index
from neffcache.index.ops_values import MatrixVersion
from neffcache.index.tables import cells as C
from neffcache.index.tables import matrices as M
from neffcache.index.tables import matrix_cells as MC
from neffcache.index.values import as_utc
from neffcache.matrix import Cell, Matrix

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# Reads here are Core (``tables``): ``coverage NAME`` starts without the ORM; registering a
# matrix (a write) imports the models and the aggregates in ``_save``.

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def matrix_name_of(matrix: Matrix) -> str:
    """The name a matrix is registered under: its ``name`` key, else its file's stem."""
    if matrix.name:
        return matrix.name
    stem = PurePath(matrix.source).stem
    return stem if stem and not stem.startswith("<") else "matrix"


def matrix_digest(text: str, source: str = "<matrix>") -> str:
    """sha256 of the canonical JSON of the parsed TOML (pure)."""
    try:
        return digest_of(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{source}: not valid TOML: {exc}") from None


def register_matrix(index: Index, matrix: Matrix, text: str,
                    name: str | None = None) -> MatrixVersion:
    """Record ``matrix`` (parsed from ``text``) as the current version of its name; returns
    that version (``changed`` is False when it already was the current one). Idempotent and
    safe to call from several precompile shards at once."""
    name = (name or matrix_name_of(matrix))[:255]
    digest = matrix_digest(text, matrix.source)
    with index._write() as s:  # noqa: SLF001 - neffcache.index-internal
        changed = _save(s, matrix, text, name, digest)
    found = [v for v in matrix_versions(index, name) if v.digest == digest]
    v = found[0]
    return MatrixVersion(v.id, v.name, v.version, v.digest, v.backend, v.cell_count,
                         v.registered_at, v.current, changed)


def _save(s: Session, matrix: Matrix, text: str, name: str, digest: str) -> bool:
    from sqlalchemy import update

    from neffcache.index import aggregates
    from neffcache.index.models import MatrixCellRow, MatrixRow
    from neffcache.index.record import insert_if_absent, save_fingerprints_and_cells, utcnow

    now = utcnow()
    current = _current_id(s, name)
    known = s.scalar(select(M.c.id).where(M.c.name == name, M.c.digest == digest))
    insert_if_absent(s, MatrixRow, [{"name": name, "digest": digest, "backend": matrix.backend,
                                     "toml": text, "registered_at": now}])
    matrix_id = s.scalar(select(M.c.id).where(M.c.name == name, M.c.digest == digest))
    assert matrix_id is not None
    if matrix_id == current:
        return False
    save_fingerprints_and_cells(s, [], matrix.cells, now)
    insert_if_absent(s, MatrixCellRow, [{"matrix_id": matrix_id, "cell_key": c.key,
                                         "position": i} for i, c in enumerate(matrix.cells)])
    if known is None:
        aggregates.matrix_registered(s, matrix_id)
    s.execute(update(MatrixRow).where(MatrixRow.id == matrix_id).values(registered_at=now))
    return True


def _current_id(s: Any, name: str) -> int | None:
    return s.scalar(select(M.c.id).where(M.c.name == name)  # type: ignore[no-any-return]
                    .order_by(M.c.registered_at.desc(), M.c.id.desc()).limit(1))


def matrix_versions(index: Index, name: str) -> list[MatrixVersion]:
    """Every version of a matrix, oldest first (empty if the name is unknown)."""
    with index._connect() as s:  # noqa: SLF001
        rows = s.execute(select(M.c.id, M.c.digest, M.c.backend, M.c.registered_at)
                         .where(M.c.name == name).order_by(M.c.id)).all()
        counts = _cell_counts(s, [r.id for r in rows])
    if not rows:
        return []
    current = max(rows, key=lambda r: (as_utc(r.registered_at), r.id)).id
    return [MatrixVersion(r.id, name, n, r.digest, r.backend, counts.get(r.id, 0),
                          as_utc(r.registered_at), r.id == current)  # type: ignore[arg-type]
            for n, r in enumerate(rows, 1)]


def _cell_counts(s: Any, ids: Sequence[int]) -> dict[int, int]:
    if not ids:
        return {}
    return dict(s.execute(select(MC.c.matrix_id, func.count())
                          .where(MC.c.matrix_id.in_(ids))
                          .group_by(MC.c.matrix_id)).all())


def list_matrices(index: Index) -> list[MatrixVersion]:
    """The current version of every registered matrix, by name (two queries in all)."""
    with index._connect() as s:  # noqa: SLF001
        rows = s.execute(select(M.c.id, M.c.name, M.c.digest, M.c.backend, M.c.registered_at)
                         .order_by(M.c.name, M.c.id)).all()
        by_name: dict[str, list[Any]] = {}
        for r in rows:
            by_name.setdefault(r.name, []).append(r)
        current = {name: max(enumerate(rs, 1), key=lambda x: (as_utc(x[1].registered_at),
                                                              x[1].id))
                   for name, rs in by_name.items()}
        counts = _cell_counts(s, [r.id for _, r in current.values()])
    return [MatrixVersion(r.id, name, n, r.digest, r.backend, counts.get(r.id, 0),
                          as_utc(r.registered_at), True)  # type: ignore[arg-type]
            for name, (n, r) in sorted(current.items())]


def get_matrix(index: Index, name: str, version: int | None = None, *,
               with_toml: bool = False) -> MatrixVersion:
    """A matrix's current version (or ``version``); NotFoundError names what is unknown."""
    versions = matrix_versions(index, name)
    if not versions:
        raise NotFoundError(f"matrix {name!r}: not registered (neffcache matrix register FILE)")
    if version is None:
        chosen = next(v for v in versions if v.current)
    elif 1 <= version <= len(versions):
        chosen = versions[version - 1]
    else:
        raise NotFoundError(f"matrix {name!r}: no version {version} "
                            f"(versions 1..{len(versions)})")
    if not with_toml:
        return chosen
    with index._connect() as s:  # noqa: SLF001
        text = s.scalar(select(M.c.toml).where(M.c.id == chosen.id))
    return MatrixVersion(chosen.id, chosen.name, chosen.version, chosen.digest, chosen.backend,
                         chosen.cell_count, chosen.registered_at, chosen.current, False, text)


def matrix_cell_refs(index: Index, matrix_id: int) -> list[tuple[str, str]]:
    """(cell id, cell key) of a registered version, in declared order."""
    with index._connect() as s:  # noqa: SLF001
        return [(i, k) for i, k in s.execute(
            select(C.c.id, C.c.key).select_from(C.join(MC, MC.c.cell_key == C.c.key))
            .where(MC.c.matrix_id == matrix_id).order_by(MC.c.position))]


def registered_cells(index: Index, name: str, version: int | None = None) -> tuple[Cell, ...]:
    """The cells of a registered matrix, in declared order: pass them to ``Index.coverage``."""
    v = get_matrix(index, name, version)
    with index._connect() as s:  # noqa: SLF001
        rows = s.scalars(select(C.c.json).select_from(C.join(MC, MC.c.cell_key == C.c.key))
                         .where(MC.c.matrix_id == v.id).order_by(MC.c.position))
        return tuple(Cell.from_json(j) for j in rows)
