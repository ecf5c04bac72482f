"""The index's use cases besides coverage and ``ls``: reindex, reports ingest, matrix, db."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neffcache.config import Settings, read_settings, redact_url
from neffcache.errors import (
    ExitRule,
    IntegrityError,
    MatrixError,
    SchemaOutdatedError,
    repair_hint,
)
from neffcache.index.engine import schema_state, upgrade_index
from neffcache.index.readers import open_index_as_cli
from neffcache.index.values import ReindexResult, SchemaState
from neffcache.request_rules import checked_request

# reindex and matrices (and what they import: the store, reports) load in the calls
# that use them: ``ls`` starts without them.
if TYPE_CHECKING:
    from neffcache.index.ops_values import MatrixVersion
    from neffcache.index.reindex import IngestResult


def _settings(index: str | None, store: str | None = None) -> Settings:
    return read_settings(os.environ, index=index, store=store)


@checked_request
class ReindexStoreRequest:
    """``neffcache reindex``: ``keep_missing`` keeps entries whose manifest is gone;
    ``store``/``index`` URLs (None: as the CLI); ``progress(done, total)`` is called after
    each manifest read."""

    keep_missing: bool = False
    store: str | None = None
    index: str | None = None
    progress: Callable[[int, int], None] | None = None


@dataclass(frozen=True, slots=True)
class ReindexStoreResult(ExitRule):
    """What a reindex found in the store (``manifests``) and which restore reports it
    ingested (``reports``). ``exit_code`` 4 (IntegrityError) when a manifest was invalid
    (skipped and listed; the rest was indexed), else 0."""

    store: str
    manifests: ReindexResult
    reports: IngestResult

    def to_json(self) -> dict[str, Any]:
        """The manifests' document flattened in, the reports' under "reports"."""
        return {"store": self.store, **self.manifests.to_json(),
                "reports": self.reports.to_json()}

    def error(self) -> IntegrityError | None:
        invalid = self.manifests.invalid
        if not invalid:
            return None
        return IntegrityError(f"{len(invalid)} invalid manifest(s) skipped; first: "
                              f"{invalid[0].reason}", hint=repair_hint(self.store))


def reindex_store(request: ReindexStoreRequest) -> ReindexStoreResult:
    """Rebuild the index's entries from the store's manifests alone (see ``neffcache reindex
    --help``), then ingest the store's restore reports not yet in the index. The index is
    opened first, so an outdated schema (SchemaOutdatedError, exit 7) is refused before the
    store is read; an unreachable store or index raises UnavailableError (6)."""
    from neffcache.command_steps import open_checked_store
    from neffcache.index.reindex import ingest_reports, reindex

    settings = _settings(request.index, request.store)
    with open_index_as_cli(settings) as ix:
        st = open_checked_store(settings.store_url)
        result = reindex(ix, st, prune=not request.keep_missing, progress=request.progress)
        reports = ingest_reports(ix, st)
    return ReindexStoreResult(st.url, result, reports)


@checked_request
class IngestRestoreReportsRequest:
    """``neffcache reports ingest``: ``sources`` report files or directories of ``*.json``
    files (empty: the store's reports/ prefix); ``days`` only the store's reports dated from
    N days ago to tomorrow (UTC; None: all); ``store``/``index`` URLs (None: as the CLI)."""

    sources: Sequence[str | Path] = ()
    days: int | None = None
    store: str | None = None
    index: str | None = None


@dataclass(frozen=True, slots=True)
class IngestRestoreReportsResult(ExitRule):
    """What was read (``source``: the store URL or the files) and added. A malformed report
    is skipped and listed in ``ingest.invalid``; it does not change the exit code."""

    source: str
    ingest: IngestResult

    def to_json(self) -> dict[str, Any]:
        """The source, with the ingest's document flattened in."""
        return {"source": self.source, **self.ingest.to_json()}


def ingest_restore_reports(request: IngestRestoreReportsRequest) -> IngestRestoreReportsResult:
    """Ingest restore reports into the index, each once (by report id): from report files,
    else from the store. Raises UnavailableError (6) / SchemaOutdatedError (7)."""
    from neffcache.command_steps import open_checked_store
    from neffcache.index.reindex import ingest_report_files, ingest_reports
    from neffcache.reports import date_prefixes
    from neffcache.store import REPORTS

    settings = _settings(request.index, request.store)
    with open_index_as_cli(settings) as ix:
        if request.sources:
            source = ", ".join(str(s) for s in request.sources)
            result = ingest_report_files(ix, [Path(s) for s in request.sources])
        else:
            st = open_checked_store(settings.store_url)
            source = st.url
            prefixes = [REPORTS] if request.days is None else \
                date_prefixes(datetime.now(timezone.utc), request.days)
            result = ingest_reports(ix, st, prefixes)
    return IngestRestoreReportsResult(source, result)


@checked_request
class RegisterMatrixFileRequest:
    """``neffcache matrix register``: the matrix ``file``, registered under ``name`` (None:
    its ``name`` key, else its stem); ``index`` URL (None: as the CLI). ``replace``: make
    it current even when that name's current version has other content (else refused)."""

    file: str | Path
    name: str | None = None
    index: str | None = None
    replace: bool = False


@dataclass(frozen=True, slots=True)
class RegisterMatrixFileResult(ExitRule):
    """The version now current (``changed`` False when it already was)."""

    version: MatrixVersion

    def to_json(self) -> dict[str, Any]:
        return self.version.to_json()


def register_matrix_file(request: RegisterMatrixFileRequest) -> RegisterMatrixFileResult:
    """Store a matrix file (its TOML, sha256 and cells) in the index as the current version
    of its name; idempotent. Raises MatrixError (exit 2) for an unreadable or invalid file or
    an empty name, UsageError (2) when that name is registered with other content and
    ``replace`` is not set, UnavailableError (6) / SchemaOutdatedError (7) for the index."""
    from neffcache.index.matrices import register_matrix
    from neffcache.matrix import parse_matrix

    file = str(request.file)
    try:
        text = Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(f"{file}: matrix file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{file}: cannot read matrix file: {exc}") from None
    spec = parse_matrix(text, source=file)
    if request.name is not None and not request.name.strip():
        raise MatrixError("--name: expected a non-empty name")
    with open_index_as_cli(_settings(request.index)) as ix:
        return RegisterMatrixFileResult(register_matrix(ix, spec, text, request.name,
                                                        replace=request.replace))


@checked_request
class ListRegisteredMatricesRequest:
    """``neffcache matrix ls``: ``index`` URL (None: as the CLI)."""

    index: str | None = None


@dataclass(frozen=True, slots=True)
class ListRegisteredMatricesResult(ExitRule):
    """The current version of every registered matrix, by name."""

    matrices: tuple[MatrixVersion, ...]

    def to_json(self) -> list[dict[str, Any]]:
        """A list, as ``matrix ls --json`` prints."""
        return [v.to_json() for v in self.matrices]


def list_registered_matrices(request: ListRegisteredMatricesRequest
                             ) -> ListRegisteredMatricesResult:
    """Registered matrices, the current version of each. Raises UnavailableError (6) /
    SchemaOutdatedError (7)."""
    from neffcache.index.matrices import list_matrices

    with open_index_as_cli(_settings(request.index)) as ix:
        return ListRegisteredMatricesResult(tuple(list_matrices(ix)))


@checked_request
class ShowRegisteredMatrixRequest:
    """``neffcache matrix show``: matrix ``name``, its ``version`` (None: the current one),
    or with ``versions`` its whole history; ``index`` URL (None: as the CLI)."""

    name: str
    version: int | None = None
    versions: bool = False
    index: str | None = None


@dataclass(frozen=True, slots=True)
class ShowRegisteredMatrixResult(ExitRule):
    """``chosen``: the version asked for (with its TOML unless ``history``); ``versions``:
    every version oldest first with ``history``, else just ``chosen``."""

    chosen: MatrixVersion
    versions: tuple[MatrixVersion, ...]
    history: bool = False

    def to_json(self) -> dict[str, Any] | list[dict[str, Any]]:
        """The version (with "toml"), or with history a list of versions without toml."""
        if self.history:
            return [v.to_json() for v in self.versions]
        return self.chosen.to_json()


def show_registered_matrix(request: ShowRegisteredMatrixRequest) -> ShowRegisteredMatrixResult:
    """A registered matrix's version with its TOML, or its history. Raises NotFoundError
    (exit 1) for an unknown name or version, UnavailableError (6) / SchemaOutdatedError (7)
    for the index."""
    from neffcache.index.matrices import get_matrix, matrix_versions

    with open_index_as_cli(_settings(request.index)) as ix:
        chosen = get_matrix(ix, request.name, request.version, with_toml=not request.versions)
        versions = tuple(matrix_versions(ix, request.name)) if request.versions else (chosen,)
    return ShowRegisteredMatrixResult(chosen, versions, request.versions)


@checked_request
class UpgradeSchemaRequest:
    """``neffcache db upgrade``: ``index`` URL (None: as the CLI)."""

    index: str | None = None


@dataclass(frozen=True, slots=True)
class UpgradeSchemaResult(ExitRule):
    """The revision before (None: a new database) and after; ``url`` password redacted."""

    url: str
    before: str | None
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def to_json(self) -> dict[str, Any]:
        """{"url", "from", "to", "changed"}, as ``db upgrade --json`` prints."""
        return {"url": self.url, "from": self.before, "to": self.after,
                "changed": self.changed}


def upgrade_schema(request: UpgradeSchemaRequest) -> UpgradeSchemaResult:
    """Create the index schema or migrate it to this code's head, in one transaction (safe
    to rerun). Raises UnavailableError (6) when the database cannot be reached."""
    url = _settings(request.index).index_url
    return UpgradeSchemaResult(redact_url(url), *upgrade_index(url))


@checked_request
class ShowSchemaRequest:
    """``neffcache db current``: ``index`` URL (None: as the CLI); ``check`` makes an
    outdated schema the result's error (exit 7)."""

    index: str | None = None
    check: bool = False


@dataclass(frozen=True, slots=True)
class ShowSchemaResult(ExitRule):
    """Where the schema stands (``state``). ``exit_code`` 7 (SchemaOutdatedError) with
    ``check`` when it is not this code's head, else 0."""

    state: SchemaState
    check: bool = False

    def to_json(self) -> dict[str, Any]:
        """{"url", "current", "head", "up_to_date"}, as ``db current --json`` prints."""
        return self.state.to_json()

    def error(self) -> SchemaOutdatedError | None:
        state = self.state
        if not self.check or state.up_to_date:
            return None
        return SchemaOutdatedError(f"index {state.url} is at revision "
                                   f"{state.current or '(empty)'}, this neffcache needs "
                                   f"{state.head}")


def show_schema(request: ShowSchemaRequest) -> ShowSchemaResult:
    """The index's schema revision and the one this code needs; reads only (a missing SQLite
    file is reported as empty, not created). Raises UnavailableError (6)."""
    return ShowSchemaResult(schema_state(_settings(request.index).index_url), request.check)
