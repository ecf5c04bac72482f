"""``neffcache matrix register|ls|show``: declared matrices kept in the index, with history."""

from __future__ import annotations

from typing import Any

import click

from neffcache.cli._common import finish, format_table
from neffcache.cli._options import Group, ranged, shared
from neffcache.errors import EXIT_CODE_HELP


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
