"""Registered matrices: every version of a matrix's TOML, sha256 and cells in the index."""

from __future__ import annotations

import dataclasses
from pathlib import PurePath
from typing import TYPE_CHECKING

from sqlalchemy import func, select, update

from neffcache.documents import digest_of
from neffcache.errors import MatrixError, UsageError
from neffcache.index.api import Index
from neffcache.index.coverage_engine.grid import current_versions_in, versions_in
from neffcache.index.coverage_engine.reads import choose_version
from neffcache.index.ops_values import MatrixVersion
from neffcache.index.tables import cells as C
from neffcache.index.tables import matrices as M
from neffcache.index.tables import matrix_cells as MC
from neffcache.matrix import Cell, Matrix, tomllib  # tomllib: tomli before 3.11

if TYPE_CHECKING:
    from sqlalchemy import Row
    from sqlalchemy.orm import Session

# Reads here are Core (``tables``): ``coverage NAME`` starts without the ORM; registering a
# matrix (a write) imports the aggregates in ``_save``.


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
                    name: str | None = None, *, replace: bool = False) -> MatrixVersion:
    """Record ``matrix`` as the current version of its name (``changed``: False if it already
    was); safe from several shards at once. Other content under a current name is a UsageError
    (exit 2) unless ``replace``."""
    name = (name or matrix_name_of(matrix))[:255]
    digest = matrix_digest(text, matrix.source)
    with index.write_session() as s:
        if not replace:
            _refuse_other_content(s, name, digest, matrix.source)
        changed = _save(s, matrix, text, name, digest)
    registered = next(v for v in matrix_versions(index, name) if v.digest == digest)
    return dataclasses.replace(registered, changed=changed)


def _refuse_other_content(s: Session, name: str, digest: str, source: str) -> None:
    current = _current(s, name)
    if current is None or current.digest == digest:
        return
    version = s.scalar(select(func.count()).select_from(M).where(M.c.name == name,
                                                                 M.c.id <= current.id))
    raise UsageError(
        f"matrix {name!r} is registered with other content (version {version}, digest "
        f"{current.digest[:12]}) than {source} (digest {digest[:12]}); refusing to replace it",
        hint="give the edited copy its own `name`, or replace the registered matrix on "
             "purpose: neffcache precompile --replace-matrix, neffcache matrix register "
             "--replace")


def _save(s: Session, matrix: Matrix, text: str, name: str, digest: str) -> bool:
    from neffcache.index import aggregates
    from neffcache.index.record import insert_if_absent, save_fingerprints_and_cells, utcnow

    now = utcnow()
    current = _current(s, name)
    known = s.scalar(select(M.c.id).where(M.c.name == name, M.c.digest == digest))
    insert_if_absent(s, M, [{"name": name, "digest": digest, "backend": matrix.backend,
                             "toml": text, "registered_at": now}])
    matrix_id = s.scalar(select(M.c.id).where(M.c.name == name, M.c.digest == digest))
    assert matrix_id is not None
    if current is not None and current.id == matrix_id:
        return False
    save_fingerprints_and_cells(s, [], matrix.cells, now)
    insert_if_absent(s, MC, [{"matrix_id": matrix_id, "cell_key": c.key, "position": i}
                             for i, c in enumerate(matrix.cells)])
    if known is None:
        aggregates.matrix_registered(s, matrix_id)
    s.execute(update(M).where(M.c.id == matrix_id).values(registered_at=now))
    return True


def _current(s: Session, name: str) -> Row[int, str] | None:
    """The id and digest of the name's current version."""
    return s.execute(select(M.c.id, M.c.digest).where(M.c.name == name)
                     .order_by(M.c.registered_at.desc(), M.c.id.desc()).limit(1)).first()


def matrix_versions(index: Index, name: str) -> list[MatrixVersion]:
    """Every version of a matrix, oldest first (empty if the name is unknown)."""
    with index.connection() as conn:
        return versions_in(conn, name)


def list_matrices(index: Index) -> list[MatrixVersion]:
    """The current version of every registered matrix, by name."""
    with index.connection() as conn:
        return current_versions_in(conn)


def get_matrix(index: Index, name: str, version: int | None = None, *,
               with_toml: bool = False) -> MatrixVersion:
    """A matrix's current version (or ``version``); NotFoundError names what is unknown."""
    with index.connection() as conn:
        chosen = choose_version(versions_in(conn, name), name, version)
        if not with_toml:
            return chosen
        text = conn.scalar(select(M.c.toml).where(M.c.id == chosen.id))
    return dataclasses.replace(chosen, toml=text)


def registered_cells(index: Index, name: str, version: int | None = None) -> tuple[Cell, ...]:
    """The cells of a registered matrix, in declared order."""
    with index.connection() as conn:
        v = choose_version(versions_in(conn, name, counts=False), name, version)
        rows = conn.scalars(select(C.c.json).select_from(C.join(MC, MC.c.cell_key == C.c.key))
                            .where(MC.c.matrix_id == v.id).order_by(MC.c.position))
        return tuple(Cell.from_json(j) for j in rows)
