"""``neffcache config``: parse, call ``neffcache.config_show.show_config``, render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import finish, format_table
from neffcache.cli._options import shared
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.config_show import ShowConfigResult


@click.command("config", epilog=EXIT_CODE_HELP)
@shared("store", "index", "python")
@click.option("--report-to", "reports", metavar="WHERE", default=None,
              help="As restore --report-to: store, none or a directory.")
@shared("json")
def config(as_json: bool, **params: Any) -> None:
    """Show the effective settings and where each value came from.

    Each setting is resolved as every command resolves it (flag > environment variable > config
    file > default) and printed with its source: `flag`, the variable's name, the config file's
    path, or `default`. The config file is NEFFCACHE_CONFIG's (an error when that file does not
    exist) or $NEFFCACHE_HOME/config.toml (read when present). The S3 rows are what an s3://
    store is opened with: endpoint, region, the credential source (never the credentials),
    server-side encryption, storage class and multipart sizes.

    Nothing secret is printed: a password or query string in a URL is masked, the signing key's
    PEM (NEFFCACHE_SIGNING_KEY) is only said to be set.

    --json prints: config_file, config_read, settings ({name: {value, source}}).

    \b
    Examples:
      neffcache config
      NEFFCACHE_CONFIG=/etc/neffcache/config.toml neffcache config --json
      neffcache config --store s3://bucket/neff --python /opt/venv/bin/python
    """
    from neffcache.config_show import ShowConfigRequest, show_config

    result = show_config(ShowConfigRequest(**params))
    finish(result, as_json, lambda: _text(result))


def _text(r: ShowConfigResult) -> str:
    rows = [[v.name, "-" if v.value is None else v.value, v.source] for v in r.values]
    note = "" if r.config_read else f"\n(no config file at {r.config_file})"
    return format_table(["setting", "value", "source"], rows) + note
