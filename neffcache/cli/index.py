"""The index's commands: ``db`` (its schema), ``matrix``, ``reindex``, ``reports``, ``serve``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from neffcache.cli._common import finish, format_table, progress
from neffcache.cli._options import Group, ranged, shared
from neffcache.errors import EXIT_CODE_HELP


@click.group("db", cls=Group)
def db() -> None:
    """Index database maintenance.

    The embedded SQLite index ($NEFFCACHE_HOME/index.db) is created and upgraded on first
    use. A named index (--index or NEFFCACHE_INDEX, e.g. a shared Postgres) is only ever
    changed by `neffcache db upgrade`; every other command refuses an outdated schema
    (exit 7) until it is run.
    """


@db.command("upgrade", short_help="Create or migrate the index schema (idempotent).")
@shared("index", "json")
def upgrade(index: str | None, as_json: bool) -> None:
    """Create the index schema or migrate it to this version of neffcache.

    Safe to rerun: an index already at the current revision is left as it is. Runs in one
    transaction, so a failed upgrade changes nothing.

    \b
    Examples:
      neffcache db upgrade
      neffcache db upgrade --index sqlite:////var/lib/neffcache/index.db
      NEFFCACHE_INDEX=postgresql+psycopg://neff@127.0.0.1/neff neffcache db upgrade --json

    JSON output: {"url", "from", "to", "changed"}; "from" is null for a new database.
    """
    from neffcache.index import UpgradeSchemaRequest, upgrade_schema

    result = upgrade_schema(UpgradeSchemaRequest(index=index))
    finish(result, as_json, lambda: f"{result.url}: already at revision {result.after}"
           if not result.changed else
           f"{result.url}: upgraded {result.before or '(empty)'} -> {result.after}")


@db.command("current", short_help="Show the schema revision and the one needed.")
@shared("index", "json")
@click.option("--check", is_flag=True,
              help="Exit 7 when the schema is not the one this neffcache needs.")
def current(index: str | None, as_json: bool, check: bool) -> None:
    """Show the index's schema revision and the one this neffcache needs.

    Reads only: a missing SQLite file is reported as empty, not created.

    \b
    Examples:
      neffcache db current
      neffcache db current --index postgresql+psycopg://neff@127.0.0.1/neff --json
      neffcache db current --check

    JSON output: {"url", "current", "head", "up_to_date"}.
    """
    from neffcache.index import ShowSchemaRequest, show_schema

    result = show_schema(ShowSchemaRequest(index=index, check=check))
    state = result.state
    status = "up to date" if state.up_to_date else "needs: neffcache db upgrade"
    finish(result, as_json, lambda: f"{state.url}: revision {state.current or '(empty)'}, "
                                    f"head {state.head} ({status})")


@click.group("matrix", cls=Group, epilog=EXIT_CODE_HELP)
def matrix() -> None:
    """Register matrix files in the index and list them.

    A registered matrix lets the index (and `neffcache serve`) compute coverage against the
    expected set of cells without the file at hand. Registering changed content under a
    registered name is refused unless --replace (then it adds a version); the latest
    registration is the current version.
    """


@matrix.command("register", epilog=EXIT_CODE_HELP)
@click.argument("file", metavar="FILE", type=click.Path(dir_okay=False))
@click.option("--name", metavar="NAME", default=None,
              help="Register under NAME [default: the file's `name` key, else its stem].")
@click.option("--replace", is_flag=True,
              help="Make FILE the current version even when NAME is registered with other "
                   "content (without it that is refused, exit 2).")
@shared("index", "json")
def register(as_json: bool, **params: Any) -> None:
    """Store FILE (its TOML, sha256 and cells) in the index as the current version.

    The sha256 is taken over the canonical JSON of the parsed TOML, so comments and layout
    do not make a new version. Registering the content of the current version again changes
    nothing (changed: false). Other content under a registered name (an edited copy that
    kept its `name`) is refused (exit 2, naming the matrix, the registered digest and FILE)
    unless --replace: then it becomes a new version, or content seen in an older version
    makes that version current again. Nothing is compiled or fetched.

    --json prints: name, version, sha256, backend, cells, registered_at, current, changed.

    \b
    Examples:
      neffcache matrix register matrix.toml
      neffcache matrix register matrix.toml --name flux2-prod --json
      neffcache matrix register matrix-v2.toml --replace   # a new version of its name
      NEFFCACHE_INDEX=postgresql+psycopg://ci@db/neffcache neffcache matrix register m.toml
    """
    from neffcache.index import RegisterMatrixFileRequest, register_matrix_file

    result = register_matrix_file(RegisterMatrixFileRequest(**params))
    v = result.version
    finish(result, as_json, lambda: f"{'registered' if v.changed else 'unchanged'}: {v.name} "
           f"version {v.version} ({v.cell_count} cells, {v.backend}, sha256 {v.digest[:12]})")


@matrix.command("ls", epilog=EXIT_CODE_HELP)
@shared("index", "json")
def ls(index: str | None, as_json: bool) -> None:
    """List registered matrices: the current version of each.

    --json prints a list of: name, version, sha256, backend, cells, registered_at, current,
    changed.

    \b
    Examples:
      neffcache matrix ls
      neffcache matrix ls --json | jq -r '.[].name'
    """
    from neffcache.index import ListRegisteredMatricesRequest, list_registered_matrices

    result = list_registered_matrices(ListRegisteredMatricesRequest(index=index))
    found = result.matrices
    finish(result, as_json, lambda: None if not found else format_table(
        ["NAME", "VERSION", "CELLS", "BACKEND", "SHA256", "REGISTERED"],
        [[v.name, v.version, v.cell_count, v.backend, v.digest[:12],
          v.registered_at.isoformat(timespec="seconds")] for v in found]),
        [] if found or as_json else ["no matrix registered (neffcache matrix register FILE)"])


@matrix.command("show", epilog=EXIT_CODE_HELP)
@click.argument("name", metavar="NAME")
@click.option("--version", "version", type=ranged("ShowRegisteredMatrixRequest", "version"),
              default=None, help="This version instead of the current one.")
@click.option("--versions", "versions", is_flag=True, help="List every version instead.")
@shared("index", "json")
def show(as_json: bool, **params: Any) -> None:
    """Print a registered matrix's TOML (current version, or --version N), or its history.

    --json prints the version (name, version, sha256, backend, cells, registered_at,
    current, changed, toml), or with --versions a list of versions without toml.

    \b
    Examples:
      neffcache matrix show flux2-prod > matrix.toml
      neffcache matrix show flux2-prod --version 1 | diff - matrix.toml
      neffcache matrix show flux2-prod --versions
    """
    from neffcache.index import ShowRegisteredMatrixRequest, show_registered_matrix

    result = show_registered_matrix(ShowRegisteredMatrixRequest(**params))
    if not params["versions"] and not as_json:
        click.echo(result.chosen.toml or "", nl=False)
        return
    finish(result, as_json, lambda: format_table(
        ["VERSION", "CURRENT", "CELLS", "SHA256", "REGISTERED"],
        [[v.version, "*" if v.current else "", v.cell_count, v.digest[:12],
          v.registered_at.isoformat(timespec="seconds")] for v in result.versions]))


@click.command("reindex")
@click.option("--keep-missing", is_flag=True,
              help="Keep index entries whose manifest is no longer in the store.")
@shared("store", "index", "json")
def reindex(as_json: bool, **params: Any) -> None:
    """Rebuild the index's entries from the store's manifests alone, and ingest its restore
    reports.

    The store is the source of truth: every valid manifest becomes an entry (with its cell,
    fingerprint and files), entries whose manifest is gone are removed (unless
    --keep-missing), and invalid manifests are skipped and listed with their reason; any
    invalid manifest makes the exit code 4 after the rest is indexed. Failures, precompile
    runs and restore reports already in the index are kept. Safe to rerun.

    Then every restore report object under the store's reports/ prefix not yet in the index
    is ingested (once: a report's id is unique in the index), giving the entries it found
    their last use and recording its fingerprint. A malformed report is skipped with a
    warning and does not change the exit code.

    \b
    Examples:
      neffcache reindex
      neffcache reindex --store s3://my-bucket/neff --index postgresql+psycopg://neff@db/neff
      neffcache reindex --json

    JSON output: {"store", "scanned", "added", "already_indexed", "removed",
    "invalid": [{"key", "reason"}], "reports": {"scanned", "added", "already_ingested",
    "invalid": [{"key", "reason"}]}}.
    """
    from neffcache.index import ReindexStoreRequest, reindex_store

    def report(done: int, total: int) -> None:
        if done % 500 == 0 or done == total:
            progress(f"reindex: {done}/{total} manifests read")

    result = reindex_store(ReindexStoreRequest(**params, progress=report))
    found, reports = result.manifests, result.reports
    finish(result, as_json, lambda: (
        f"{result.store}: {found.scanned} manifests, {found.added} added, "
        f"{found.already_indexed} already indexed, {found.removed} removed, "
        f"{len(found.invalid)} invalid\n"
        f"{result.store}: {reports.scanned} restore reports, {reports.added} added, "
        f"{reports.already_ingested} already ingested, {len(reports.invalid)} skipped"),
        [*(f"invalid: {bad.reason}" for bad in found.invalid),
         *(f"warning: restore report skipped: {bad.reason}" for bad in reports.invalid)])


@click.group("reports", cls=Group)
def reports() -> None:
    """Restore reports: what each instance restored, read into the index.

    Every `neffcache restore` writes one report: an object under the store's reports/
    prefix (reports/YYYY-MM-DD/<host>-<UTC time>-<random>.json) or, with --report-to DIR
    (or NEFFCACHE_REPORTS=DIR), a file in DIR. Instances never need database credentials:
    `neffcache reindex`, `neffcache serve` (in the background) and `neffcache reports ingest`
    put reports into the index, each once.
    """


@reports.command("ingest", epilog=EXIT_CODE_HELP,
                 short_help="Read new restore reports into the index (idempotent).")
@click.option("--from", "sources", multiple=True, metavar="PATH",
              type=click.Path(exists=True, path_type=Path),
              help="Report files, or directories of *.json report files (repeatable), "
                   "instead of the store.")
@click.option("--days", type=ranged("IngestRestoreReportsRequest", "days"),
              default=None, metavar="N",
              help="Only the store's reports dated from N days ago to tomorrow (UTC) "
                   "[default: every report].")
@shared("store", "index", "json")
def ingest(as_json: bool, **params: Any) -> None:
    """Ingest restore reports into the index: from the store's reports/ prefix, or from
    report files with --from.

    A report whose id is already in the index is not read again, so reruns add nothing.
    Each new report records the fingerprint it names (the fleet's fingerprints show even
    when nothing was built for them) and the last use of the entries it found. A malformed
    or hostile report is skipped with a warning (exit code unchanged); only its validated
    fields ever reach the index.

    \b
    Examples:
      neffcache reports ingest
      neffcache reports ingest --days 1 --json
      neffcache reports ingest --from /var/log/neffcache/reports --from ./one-report.json

    JSON output: {"source", "scanned", "added", "already_ingested",
    "invalid": [{"key", "reason"}]}.
    """
    from neffcache.index import IngestRestoreReportsRequest, ingest_restore_reports

    result = ingest_restore_reports(IngestRestoreReportsRequest(**params))
    found = result.ingest
    finish(result, as_json, lambda: f"{result.source}: {found.scanned} restore reports, "
           f"{found.added} added, {found.already_ingested} already ingested, "
           f"{len(found.invalid)} skipped",
           [f"warning: restore report skipped: {bad.reason}" for bad in found.invalid])


@click.command("serve", epilog=EXIT_CODE_HELP)
@click.option("--host", default="127.0.0.1", show_default=True, metavar="ADDRESS",
              help="Address to bind. Anything but loopback exposes the index read-only to "
                   "the network (a warning is printed); put a proxy with auth in front.")
@click.option("--port", type=ranged("ServeRequest", "port"), default=8077, show_default=True,
              help="TCP port (0 picks a free one).")
@click.option("--log-level", type=click.Choice(["critical", "error", "warning", "info",
                                                 "debug"]), default="warning",
              show_default=True, help="uvicorn's log level (access lines at info).")
@click.option("--ingest-every", "ingest_every", type=ranged("ServeRequest", "ingest_every"),
              default=60.0, show_default=True, metavar="SECONDS",
              help="Ingest new restore reports from the store's reports/ prefix this often; "
                   "0 turns it off.")
@shared("store", "index")
def serve(**params: Any) -> None:
    """Serve the index over HTTP, read-only: JSON API, /metrics and a dashboard at /.

    Everything is computed from the index on each request; nothing is cached and the API
    writes nothing (GET and HEAD; any other method gets 405).

    In the background, every --ingest-every seconds, restore reports that instances wrote
    under the store's reports/ prefix are ingested into the index (each once): at start the
    last 7 days of date prefixes, then only yesterday's, today's and tomorrow's (UTC), and
    objects already seen are not read again. A store that cannot be reached, or a malformed
    report, is a warning on stderr; serving goes on. `neffcache reindex` ingests every report.

    Matrices appear once registered (`neffcache matrix register FILE`; `neffcache precompile`
    registers its matrix too). The dashboard works offline: its scripts and styles are
    served by this process.

    \b
    Endpoints:
      /                      coverage dashboard (grid, bytes per SDK, restores, failures)
      /healthz               liveness and index schema revision
      /metrics               Prometheus text format (entries, bytes, coverage ratio,
                             failed cells, restore outcomes, restore-duration histogram)
      /openapi.json          OpenAPI description of everything under /api
      /api/summary           totals, coverage per matrix x fingerprint, bytes per SDK
      /api/matrices          registered matrices;  /api/matrix?name=N  one, with history
      /api/coverage?matrix=N[&cells=GLOB&offset=0&limit=200]   a page of the grid
      /api/entries  /api/fingerprints  /api/sdk-versions
      /api/runs  /api/run?id=ID  /api/failures   precompile runs and failed cells (log tails)
      /api/restores  /api/restore-outcomes        restore reports
      /api/restore-timeline?days=14&step=day|hour  restores per period by outcome

    Errors are JSON {"error", "type", "hint"}: 400 bad parameter (value not echoed),
    404 unknown matrix, version or run, 503 index unavailable or schema out of date.

    \b
    Examples:
      neffcache serve
      neffcache serve --port 9000 --index postgresql+psycopg://neffcache@db/neffcache
      neffcache serve --store s3://my-bucket/neff --ingest-every 30
      curl -s 127.0.0.1:8077/api/summary | jq '.coverage[].fingerprints[].ratio'
      curl -s 127.0.0.1:8077/metrics | grep neffcache_coverage_ratio
    """
    from neffcache.server import ServeRequest
    from neffcache.server import serve as run_server

    run_server(ServeRequest(**params, notice=progress))
