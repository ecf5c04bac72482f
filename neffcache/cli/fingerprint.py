"""``neffcache fingerprint``: this host's fingerprint, or why an entry's differs."""

from __future__ import annotations

import os
import re

import click

from neffcache.cli._common import (
    emit_json,
    format_table,
    index_option,
    json_option,
    python_option,
    settings_from,
    store_option,
)
from neffcache.config import Settings
from neffcache.errors import EXIT_CODE_HELP, NotFoundError, UsageError

_HEX_RE = re.compile(r"^[0-9a-f]{6,64}$")


@click.command("fingerprint", epilog=EXIT_CODE_HELP)
@click.option("--backend", "backend_name", metavar="NAME", default=None,
              help="inductor or neuron [default: inductor, or the explained entry's].")
@click.option("--explain", "explain", metavar="ENTRY_KEY|FINGERPRINT_KEY", default=None,
              help="List the fingerprint fields that differ from this host's: an entry's "
                   "(its manifest, read from the store) or a fingerprint's (as `coverage` "
                   "and `ls` print them, read from the index). A unique key prefix is enough.")
@python_option
@store_option
@index_option
@json_option
def fingerprint(backend_name: str | None, explain: str | None, python: str | None,
                store: str | None, index: str | None, as_json: bool) -> None:
    """Print this host's fingerprint: what must match between the host that compiled an
    entry and the host that restores it (backend; torch, diffusers, transformers and Python
    versions; for neuron the torch-neuronx, neuronx-cc and NKI versions, the target trn2/trn3,
    the logical-core config, the canonical compiler flags and opt level; for inductor the
    torch path, CPU ISA and thread count). Facts shown under "info" (the instance type and
    the Neuron runtime version) are recorded but never compared.

    The package versions, the Python version and the torch path are those of the interpreter
    that runs inference: --python PATH (or NEFFCACHE_PYTHON, or the config key `python`),
    read by running it once with a small script that imports nothing but the standard
    library; by default the interpreter running neffcache. CPU, flags and target are the
    host's either way.

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
    from neffcache.backends import get_backend
    from neffcache.fingerprint import (
        FIELD_NOTES,
        collect_fingerprint,
        described_interpreter,
        diff_fingerprints,
    )

    settings = settings_from(store, index=index, python=python)
    interpreter = described_interpreter(settings.python)
    if explain is None:
        fp = collect_fingerprint(get_backend(backend_name or "inductor").name, os.environ,
                                 python=settings.python)
        if as_json:
            emit_json({"key": fp.key, "backend": fp.backend, "fields": dict(fp.fields),
                       "info": dict(fp.info), "unknown_fields": list(fp.unknown_fields),
                       "python": interpreter})
            return
        click.echo(f"fingerprint {fp.key}  (backend {fp.backend}, python {interpreter})")
        click.echo(format_table(["field", "value"], [[k, v] for k, v in fp.fields]))
        if fp.info:
            click.echo("info (recorded, never compared): "
                       + ", ".join(f"{k}={v}" for k, v in fp.info))
        for name in fp.unknown_fields:
            click.echo(f"warning: {name} is unknown on this host: nothing will be built or "
                       f"restored here until it is known")
        return
    manifest, there = _explained(explain, settings)
    here = collect_fingerprint(get_backend(backend_name or there.backend).name, os.environ,
                               python=settings.python)
    diffs = diff_fingerprints(here, there)
    info_here, info_there = dict(here.info), dict(there.info)
    info_diffs = [(k, info_here.get(k, "absent"), info_there.get(k, "absent"))
                  for k in sorted(set(info_here) | set(info_there))
                  if info_here.get(k) != info_there.get(k)]
    if as_json:
        emit_json({"entry_key": manifest.entry_key if manifest else None,
                   "cell_id": manifest.cell.id if manifest else None,
                   "backend": there.backend, "here": here.key, "there": there.key,
                   "match": not diffs and not here.unknown_fields,
                   "unknown_here": list(here.unknown_fields),
                   "differences": [{"field": d.name, "here": d.here, "there": d.there,
                                    "note": FIELD_NOTES.get(d.name, "")} for d in diffs],
                   "info_differences": [{"field": k, "here": a, "there": b}
                                        for k, a, b in info_diffs],
                   "python": interpreter})
        return
    if manifest is not None:
        click.echo(f"entry {manifest.entry_key} ({manifest.cell.id}, backend {there.backend})")
        click.echo(f"  built for fingerprint {there.key[:12]}, this host is {here.key[:12]} "
                   f"(python {interpreter})")
    else:
        click.echo(f"fingerprint {there.key} (backend {there.backend}); this host is "
                   f"{here.key[:12]} (python {interpreter})")
    for name in here.unknown_fields:
        click.echo(f"  {name} is unknown on this host, so no entry is used here")
    what = "this entry" if manifest is not None else "its entries"
    if not diffs:
        click.echo(f"same fingerprint: {what} would be used here"
                   if not here.unknown_fields
                   else "same fields, but an unknown field never matches")
    else:
        click.echo(f"{len(diffs)} field(s) differ, so {what} would not be used here:")
        click.echo(format_table(["field", "this host", "entry", "why it matters"],
                                [[d.name, d.here, d.there, FIELD_NOTES.get(d.name, "")]
                                 for d in diffs]))
    if info_diffs:
        click.echo("info (never compared): " + "; ".join(
            f"{k}: this host {a}, entry {b}" for k, a, b in info_diffs))


def _explained(key: str, settings: Settings):  # type: ignore[no-untyped-def]
    """(manifest, its fingerprint) of an entry in the store, else (None, fingerprint) of a
    fingerprint key (or unique prefix) in the index."""
    try:
        manifest = _read_entry(key, settings.store_url)
        return manifest, manifest.fingerprint
    except (NotFoundError, UsageError) as exc:
        missed = exc
    clean = key.strip().lower()
    if not _HEX_RE.match(clean):
        raise missed
    from neffcache.errors import UnavailableError
    from neffcache.index import open_index

    try:
        with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
            found = ix.find_fingerprints(clean)
    except UnavailableError:
        raise missed from None
    if len(found) == 1:
        return None, next(iter(found.values()))
    raise UsageError(f"--explain {clean}: no entry in the store and "
                     f"{'no' if not found else len(found)} fingerprints in the index "
                     f"match that key", hint="neffcache ls; neffcache coverage MATRIX")


def _read_entry(key: str, store_url: str):  # type: ignore[no-untyped-def]
    from neffcache.manifest import decode_manifest
    from neffcache.store import manifest_key, open_store
    from neffcache.store.base import MANIFESTS, entry_key_of

    key = key.strip().lower()
    if not _HEX_RE.match(key):
        raise UsageError(f"--explain {key!r}: expected an entry key (hex, at least 6 digits)")
    s = open_store(store_url)
    if len(key) < 64:
        matches = sorted(k for k in (entry_key_of(o) for o in s.list(MANIFESTS))
                         if k and k.startswith(key))
        if len(matches) != 1:
            raise UsageError(f"--explain {key}: {'no' if not matches else len(matches)} "
                             f"entries match that prefix in {s.url}")
        key = matches[0]
    try:
        data = s.read(manifest_key(key))
    except NotFoundError:
        raise NotFoundError(f"entry {key}: no manifest in {s.url}",
                            hint="neffcache ls") from None
    return decode_manifest(data, source=f"manifests/{key}.json")
