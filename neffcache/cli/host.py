"""What this host resolves: ``neffcache fingerprint`` (or why an entry's differs), ``config``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from neffcache.cli._common import finish, format_table
from neffcache.cli._options import shared
from neffcache.errors import EXIT_CODE_HELP

if TYPE_CHECKING:
    from neffcache.config_show import ShowConfigResult
    from neffcache.fingerprint_explain import ExplainResult, FingerprintResult


@click.command("fingerprint", epilog=EXIT_CODE_HELP)
@click.option("--backend", "backend", metavar="NAME", default=None,
              help="inductor or neuron [default: inductor, or the explained entry's].")
@click.option("--explain", "explain", metavar="ENTRY_KEY|FINGERPRINT_KEY", default=None,
              help="List the fingerprint fields that differ from this host's: an entry's "
                   "(its manifest, read from the store) or a fingerprint's (as `coverage` "
                   "and `ls` print them, read from the index). A unique key prefix is enough.")
@shared("python", "store", "index", "json")
def fingerprint(backend: str | None, explain: str | None, python: str | None,
                store: str | None, index: str | None, as_json: bool) -> None:
    """Print this host's fingerprint: what must match between the host that compiled an
    entry and the host that restores it (backend; torch, diffusers, transformers and Python
    versions; for neuron the torch-neuronx, neuronx-cc and NKI versions, the target trn2/trn3,
    the logical-core config, the canonical compiler flags and opt level; for inductor the
    torch path, CPU ISA and thread count). Facts shown under "info" (the instance type and
    the Neuron runtime version) are recorded but never compared.

    The package versions, the Python version and the torch path are those of the interpreter
    --python names, read by running it once with a small script that imports nothing but the
    standard library. CPU, flags and target are the host's either way.

    With --explain ENTRY_KEY, name each field that differs from that entry's, with this
    host's value, the entry's value and why the field matters, i.e. why the entry would not
    be used here. --explain FINGERPRINT_KEY does the same for a fingerprint in the index
    (a coverage column, a restore report's fingerprint): a key that is no entry in the
    store is looked up there. Exits 0 whether or not they match.

    \b
    Examples:
      neffcache fingerprint --backend neuron
      neffcache fingerprint --json
      neffcache fingerprint --explain 3fa2c9d1e0b4      # an entry key or a fingerprint key
      neffcache fingerprint --backend neuron --python /opt/venv/bin/python --json
    """
    from neffcache.fingerprint_explain import (
        ExplainRequest,
        FingerprintRequest,
        explain_fingerprint,
        show_fingerprint,
    )

    if explain is None:
        shown = show_fingerprint(FingerprintRequest(backend=backend, python=python))
        finish(shown, as_json, lambda: render_fingerprint(shown))
        return
    result = explain_fingerprint(ExplainRequest(explain, backend, python, store, index))
    finish(result, as_json, lambda: render_explain(result))


def render_fingerprint(result: FingerprintResult) -> str:
    fp = result.fingerprint
    lines = [f"fingerprint {fp.key}  (backend {fp.backend}, python {result.python})",
             format_table(["field", "value"], [[k, v] for k, v in fp.fields])]
    if fp.info:
        lines.append("info (recorded, never compared): "
                     + ", ".join(f"{k}={v}" for k, v in fp.info))
    lines += [f"warning: {name} is unknown on this host: nothing will be built or "
              f"restored here until it is known" for name in fp.unknown_fields]
    return "\n".join(lines)


def render_explain(result: ExplainResult) -> str:
    here, there, diffs = result.here, result.there, result.differences
    if result.entry_key is not None:
        lines = [f"entry {result.entry_key} ({result.cell_id}, backend {there.backend})",
                 f"  built for fingerprint {there.key[:12]}, this host is {here.key[:12]} "
                 f"(python {result.python})"]
    else:
        lines = [f"fingerprint {there.key} (backend {there.backend}); this host is "
                 f"{here.key[:12]} (python {result.python})"]
    lines += [f"  {name} is unknown on this host, so no entry is used here"
              for name in here.unknown_fields]
    what = "this entry" if result.entry_key is not None else "its entries"
    if not diffs:
        lines.append(f"same fingerprint: {what} would be used here"
                     if not here.unknown_fields
                     else "same fields, but an unknown field never matches")
    else:
        lines.append(f"{len(diffs)} field(s) differ, so {what} would not be used here:")
        lines.append(format_table(["field", "this host", "entry", "why it matters"],
                                  [[d.name, d.here, d.there, result.note(d.name)]
                                   for d in diffs]))
    if result.info_differences:
        lines.append("info (never compared): " + "; ".join(
            f"{d.name}: this host {d.here}, entry {d.there}" for d in result.info_differences))
    return "\n".join(lines)


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
    finish(result, as_json, lambda: _config_text(result))


def _config_text(r: ShowConfigResult) -> str:
    rows = [[v.name, "-" if v.value is None else v.value, v.source] for v in r.values]
    note = "" if r.config_read else f"\n(no config file at {r.config_file})"
    return format_table(["setting", "value", "source"], rows) + note
