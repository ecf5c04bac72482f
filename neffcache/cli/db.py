"""``neffcache db``: index database maintenance (upgrade the schema, show its revision)."""

from __future__ import annotations

import click

from neffcache.cli._common import finish
from neffcache.cli._options import Group, shared


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
