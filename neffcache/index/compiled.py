"""Compiled forms of the read statements, kept in a file per code version for the bare driver."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from neffcache.index.listing import Shape

FORMAT = 2
UNUSED_S = 30 * 86400  # ``save`` removes other code versions' files not written for this long
_SOURCES = Path(__file__).resolve().parent  # neffcache/index: the statements and schema


@dataclass(frozen=True, slots=True)
class CompiledStatement:
    """``names``: in the driver's order (qmark: may repeat); the rest says what to convert."""

    sql: str
    names: tuple[str, ...]
    defaults: Mapping[str, Any]
    datetime_params: frozenset[str]
    datetime_columns: tuple[int, ...]
    json_columns: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "datetime_params": sorted(self.datetime_params)}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> CompiledStatement:
        return CompiledStatement(
            sql=str(doc["sql"]), names=tuple(str(n) for n in doc["names"]),
            defaults=dict(doc["defaults"]),
            datetime_params=frozenset(str(n) for n in doc["datetime_params"]),
            datetime_columns=tuple(int(i) for i in doc["datetime_columns"]),
            json_columns=tuple(int(i) for i in doc["json_columns"]))


def statement_key(dialect: str, name: str, shape: Shape) -> str:
    return f"{dialect}|{name}|{json.dumps(shape)}"


def code_digest() -> str:
    """sha256 of the index package's sources and SQLAlchemy's release."""
    h = hashlib.sha256(f"format {FORMAT}\n".encode())
    for path in sorted(_SOURCES.rglob("*.py")):  # coverage_engine/ too
        h.update(path.relative_to(_SOURCES).as_posix().encode() + b"\0" + path.read_bytes()
                 + b"\0")
    spec = importlib.util.find_spec("sqlalchemy")
    if spec is not None and spec.origin:
        h.update(Path(spec.origin).read_bytes())
    return h.hexdigest()


class StatementCache:
    """The compiled statements of one code version, from and to one file."""

    def __init__(self, path: Path | None, head: str | None = None,
                 statements: dict[str, CompiledStatement] | None = None) -> None:
        self.path = path
        self.head = head  # the schema revision this code expects (None: not known yet)
        self._statements = statements or {}
        self._dirty = False

    @staticmethod
    def load(home: Path) -> StatementCache:
        """Empty if missing or unreadable."""
        try:
            path = home / "sql" / f"{code_digest()}.json"
        except OSError:
            return StatementCache(None)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                mine = st.st_uid == os.getuid() and not st.st_mode & 0o022
                doc = json.loads(f.read()) if mine else {}  # SQL others could write: never run it
            if doc.get("format") != FORMAT:
                return StatementCache(path)
            return StatementCache(path, doc.get("head"), {
                k: CompiledStatement.from_json(v) for k, v in doc["statements"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return StatementCache(path)

    def get(self, dialect: str, name: str, shape: Shape) -> CompiledStatement | None:
        return self._statements.get(statement_key(dialect, name, shape))

    def put(self, dialect: str, name: str, shape: Shape, compiled: CompiledStatement,
            head: str) -> None:
        key = statement_key(dialect, name, shape)
        if self._statements.get(key) != compiled or self.head != head:
            self._statements[key] = compiled
            self.head = head
            self._dirty = True

    def save(self) -> None:
        """Write the file if anything was added (atomically; a failure is ignored)."""
        if not self._dirty or self.path is None:
            return
        doc = {"format": FORMAT, "head": self.head,
               "statements": {k: v.to_json() for k, v in sorted(self._statements.items())}}
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, self.path)
            self._dirty = False
            for other in self.path.parent.glob("*.json"):
                if other != self.path and time.time() - other.stat().st_mtime > UNUSED_S:
                    other.unlink(missing_ok=True)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
