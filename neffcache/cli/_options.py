"""Shared click options, declared once and applied by name (``shared``), as sqlite-utils does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from neffcache.request_rules import RANGES

F = TypeVar("F", bound=Callable[..., Any])


def ranged(request: str, field: str) -> click.ParamType:
    """A request field's range (``request_rules.RANGES``) as an option type: click refuses it."""
    r = RANGES[request][field]
    kind = click.FloatRange if r.real else click.IntRange
    return kind(r.min, r.max, min_open=r.min_open)


_TRUSTED_KEY = click.option(
    "--trusted-key", "trusted_keys", multiple=True, metavar="KEY|FILE",
    help="Trust entries signed by this public key (ed25519:<base64>, or a file of them, one "
         "per line): with any key configured, an unsigned entry or one signed by another "
         "key is refused (exit 4), and a manifest replaces one in a store only if signed "
         "and matching its pinned digest. Repeatable, for key rotation [env "
         "NEFFCACHE_TRUSTED_KEYS or config `trusted_keys`, space-separated].")
_REQUIRE_SIGNATURES = click.option(
    "--require-signatures", "require_signatures", is_flag=True,
    help="Fail closed (exit 2) when no trusted key is configured, instead of reading "
         "entries unchecked [env NEFFCACHE_REQUIRE_SIGNATURES=1; config "
         "`require_signatures = true`].")

_SHARED: dict[str, Callable[[Any], Any]] = {
    "store": click.option(
        "--store", "store", metavar="URL", default=None,
        help="Store: PATH, file://PATH or s3://BUCKET/PREFIX "
             "[env NEFFCACHE_STORE; default $NEFFCACHE_HOME/store]."),
    "index": click.option(
        "--index", "index", metavar="URL", default=None,
        help="Index SQLAlchemy URL [env NEFFCACHE_INDEX; default "
             "sqlite:///$NEFFCACHE_HOME/index.db]."),
    "signing_key": click.option(
        "--signing-key", "signing_key", metavar="FILE", default=None,
        type=click.Path(dir_okay=False),
        help="Sign each manifest published with this Ed25519 private key (PEM; `neffcache "
             "keys generate` makes one): restores that trust its public key accept the entry "
             "[env NEFFCACHE_SIGNING_KEY_FILE, or the PEM itself in NEFFCACHE_SIGNING_KEY; "
             "config key `signing_key_file`; default: unsigned]."),
    # the trust gate's policy (neffcache.trust) for every command that installs or checks entries
    "trust": lambda f: _TRUSTED_KEY(_REQUIRE_SIGNATURES(f)),
    "log_format": click.option(
        "--log-format", "log_format", type=click.Choice(("text", "jsonl")), default="text",
        show_default=True, envvar="NEFFCACHE_LOG_FORMAT", show_envvar=True,
        help="stderr's log: text lines, or jsonl (one JSON object per event: ts (UTC, ISO "
             "8601), event, cell, elapsed, phase, message) for CI systems that parse logs. "
             "Results stay on stdout."),
    "python": click.option(
        "--python", "python", metavar="PATH", default=None,
        help="The Python interpreter that runs inference (e.g. /opt/venv/bin/python): the "
             "fingerprint describes its packages, and precompile and warm run their workers "
             "under it (it needs no neffcache); default: the one running neffcache [env "
             "NEFFCACHE_PYTHON; config key `python`]."),
    "allow_missing_packages": click.option(
        "--allow-missing-packages", "allow_missing_packages", is_flag=True,
        help="Publish even when the fingerprinted interpreter lacks what the backend needs "
             "(torch; torch-neuronx for neuron). Without it that is refused (exit 2): such an "
             "entry's fingerprint says the package is absent and matches no host that runs "
             "inference [env NEFFCACHE_ALLOW_MISSING_PACKAGES=1]."),
    "json": click.option("--json", "as_json", is_flag=True,
                         help="Print one JSON document to stdout instead of a table."),
    "jsonl": click.option("--jsonl", "as_jsonl", is_flag=True,
                          help="Print JSON lines to stdout: one object per line, as read."),
    "cells": click.option("--cells", "cells", multiple=True, metavar="GLOB",
                          help="Only cells whose id matches GLOB (repeatable)."),
    # entry selection (copy, bundle export): MATRIX [--cells] [--fingerprint] | --all
    "matrix_cells": click.option(
        "--cells", "cells", multiple=True, metavar="GLOB",
        help="Only cells of MATRIX whose id matches GLOB (repeatable)."),
    "fingerprint": click.option(
        "--fingerprint", "fingerprints", multiple=True, metavar="KEY",
        help="Only entries built for this fingerprint (a key or a prefix of at least 6 hex "
             "digits; repeatable)."),
}


def shared(*names: str) -> Callable[[F], F]:
    """The shared options ``names`` (keys of ``_SHARED``), shown in that order."""
    def apply(f: F) -> F:
        for name in reversed(names):
            f = _SHARED[name](f)
        return f

    return apply


def workers_option(request: str, default: int | None, help: str, **attrs: Any) -> Any:
    return click.option("--workers", "workers", type=ranged(request, "workers"), default=default,
                        show_default=default is not None, help=help, **attrs)


def yes_option(verb: str) -> Any:
    return click.option("--yes", "-y", "confirmed", is_flag=True,
                        help=f"{verb} without asking (required when stdin is not a terminal).")


class Group(click.Group):
    """A group whose Examples: are its subcommands' first ones (so they cannot drift)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        super().format_help_text(ctx, formatter)
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text("\b\nExamples:\n" + "\n".join(
                "  " + _first_example(self.commands[n]) for n in self.list_commands(ctx)))


def _first_example(command: click.Command) -> str:
    lines = (command.help or "").split("Examples:\n", 1)[1].splitlines()
    n = next(i for i, line in enumerate(lines) if not line.endswith("\\"))
    return "\n  ".join(line.strip() for line in lines[: n + 1])
