"""Shared click options and output helpers for the subcommands."""

from __future__ import annotations

import itertools
import json
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeVar

import click

from neffcache.config import Settings, read_settings
from neffcache.errors import NeffcacheError, UsageError
from neffcache.request_rules import RANGES

F = TypeVar("F", bound=Callable[..., Any])


def ranged(request: str, field: str) -> click.ParamType:
    """The option type of a request field's range (``request_rules.RANGES``): the flag refuses
    what the request would, in click's words."""
    r = RANGES[request][field]
    kind = click.FloatRange if r.real else click.IntRange
    return kind(r.min, r.max, min_open=r.min_open)


def store_option(f: F) -> F:
    return click.option("--store", "store", metavar="URL", default=None,
                        help="Store: PATH, file://PATH or s3://BUCKET/PREFIX "
                             "[env NEFFCACHE_STORE; default $NEFFCACHE_HOME/store].")(f)


def index_option(f: F) -> F:
    return click.option("--index", "index", metavar="URL", default=None,
                        help="Index SQLAlchemy URL [env NEFFCACHE_INDEX; default "
                             "sqlite:///$NEFFCACHE_HOME/index.db].")(f)


def signing_key_option(f: F) -> F:
    return click.option("--signing-key", "signing_key", metavar="FILE", default=None,
                        type=click.Path(dir_okay=False),
                        help="Sign each manifest published with this Ed25519 private key "
                             "(PEM; `neffcache keys generate` makes one): restores that "
                             "trust its public key accept the entry [env "
                             "NEFFCACHE_SIGNING_KEY_FILE, or the PEM itself in "
                             "NEFFCACHE_SIGNING_KEY; config key `signing_key_file`; "
                             "default: unsigned].")(f)


def trust_options(f: F) -> F:
    """--trusted-key and --require-signatures: the trust gate's policy (neffcache.trust),
    the same for every command that installs, copies, imports, repairs or verifies."""
    f = click.option("--require-signatures", "require_signatures", is_flag=True,
                     help="Fail closed (exit 2) when no trusted key is configured, instead "
                          "of reading entries unchecked [env NEFFCACHE_REQUIRE_SIGNATURES=1; "
                          "config `require_signatures = true`].")(f)
    return click.option("--trusted-key", "trusted_keys", multiple=True, metavar="KEY|FILE",
                        help="Trust entries signed by this public key (ed25519:<base64>, or a "
                             "file of them, one per line): with any key configured, an "
                             "unsigned entry or one signed by another key is refused (exit "
                             "4), and a manifest replaces one in a store only if signed and "
                             "matching its pinned digest. Repeatable, for key rotation [env "
                             "NEFFCACHE_TRUSTED_KEYS or config `trusted_keys`, "
                             "space-separated].")(f)


def python_option(f: F) -> F:
    return click.option("--python", "python", metavar="PATH", default=None,
                        help="The Python interpreter that runs inference (e.g. "
                             "/opt/venv/bin/python): the fingerprint describes its packages, "
                             "and precompile and warm run their workers under it (it needs no "
                             "neffcache); default: the one running neffcache [env "
                             "NEFFCACHE_PYTHON; config key `python`].")(f)


def allow_missing_packages_option(f: F) -> F:
    return click.option("--allow-missing-packages", "allow_missing_packages", is_flag=True,
                        help="Publish even when the fingerprinted interpreter lacks what the "
                             "backend needs (torch; torch-neuronx for neuron). Without it "
                             "that is refused (exit 2): such an entry's fingerprint says the "
                             "package is absent and matches no host that runs inference "
                             "[env NEFFCACHE_ALLOW_MISSING_PACKAGES=1].")(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print one JSON document to stdout instead of a table.")(f)


def jsonl_option(f: F) -> F:
    return click.option("--jsonl", "as_jsonl", is_flag=True,
                        help="Print JSON lines to stdout: one object per line, as read.")(f)


def settings_from(store: str | None = None, index: str | None = None,
                  python: str | None = None, reports: str | None = None) -> Settings:
    return read_settings(os.environ, store=store, index=index, python=python,
                         reports=reports)


class Outcome(Protocol):
    """What every use case returns (``errors.ExitRule``): its JSON and its error."""

    def to_json(self) -> Any: ...

    def error(self) -> NeffcacheError | None: ...


def finish(result: Outcome, as_json: bool, text: Callable[[], str]) -> None:
    """Print a use case's result, its ``--json`` document or ``text()``, to stdout; then raise
    its error, which the group turns into the ``Error:``/``Hint:`` lines and the exit code."""
    if as_json:
        emit_json(result.to_json())
    else:
        click.echo(text())
    err = result.error()
    if err is not None:
        raise err


def emit_json(doc: Any) -> None:
    sys.stdout.write(json_text(doc) + "\n")
    sys.stdout.flush()


def json_text(doc: Any, depth: int = 2, _pad: str = "") -> str:
    """``doc`` as JSON, keys sorted, indented two spaces for ``depth`` levels and each deeper
    value on one line: a 20,000-row document is then encoded by json's C encoder (an indented
    dump falls back to the pure-Python one, ~10x slower) and stays one row per line."""
    if depth > 0 and isinstance(doc, dict) and doc:
        inner = _pad + "  "
        items = [f"{inner}{json.dumps(str(k))}: {json_text(v, depth - 1, inner)}"
                 for k, v in sorted(doc.items())]
        return "{\n" + ",\n".join(items) + "\n" + _pad + "}"
    if depth > 0 and isinstance(doc, (list, tuple)) and doc:
        inner = _pad + "  "
        if depth == 1:  # one line per item (the 20,000-row case): no recursion per item
            items = [inner + line for line in map(_ONE_LINE.encode, doc)]
        else:
            items = [inner + json_text(v, depth - 1, inner) for v in doc]
        return "[\n" + ",\n".join(items) + "\n" + _pad + "]"
    return _ONE_LINE.encode(doc)


_ONE_LINE = json.JSONEncoder(sort_keys=True, default=str, separators=(", ", ": "))
FLUSH_EVERY = 1000  # streamed lines between flushes (the first line is flushed at once)


def encode_line(doc: Any) -> str:
    """``doc`` on one line, as ``stream_json`` and ``stream_json_lines`` write each item
    (keys sorted, ASCII)."""
    return _ONE_LINE.encode(doc)


def stream_json(head: Mapping[str, Any], key: str, items: Iterable[Any],
                tail: Callable[[], Mapping[str, Any]], *, encoded: bool = False) -> None:
    """One JSON document written as it is made, formatted as ``json_text``: ``head``'s keys
    (sorted), then ``key``: a list of ``items`` one per line, written as they come, then the
    keys ``tail()`` returns once the items are written (counts, cursors, the check).
    ``encoded``: the items are already lines, ``encode_line``'s text."""
    out = sys.stdout
    out.write("{\n")
    for k, v in sorted(head.items()):
        out.write(f"  {json.dumps(k)}: {json_text(v, 1, '  ')},\n")
    out.write(f"  {json.dumps(key)}: [")
    n = 0
    for line in (items if encoded else map(_ONE_LINE.encode, items)):
        out.write(("\n" if n == 0 else ",\n") + "    " + line)
        n += 1
        if n == 1 or n % FLUSH_EVERY == 0:
            out.flush()
    out.write("\n  ]" if n else "]")
    for k, v in tail().items():
        out.write(f",\n  {json.dumps(k)}: {json_text(v, 1, '  ')}")
    out.write("\n}\n")
    out.flush()


def stream_json_lines(items: Iterable[Any], *, encoded: bool = False) -> int:
    """Each item as one line of JSON (keys sorted), written as it comes; how many.
    ``encoded``: the items are already lines, ``encode_line``'s text."""
    out = sys.stdout
    n = 0
    for line in (items if encoded else map(_ONE_LINE.encode, items)):
        out.write(line + "\n")
        n += 1
        if n == 1 or n % FLUSH_EVERY == 0:
            out.flush()
    out.flush()
    return n


def stream_table(headers: list[str], rows: Iterable[list[Any]], sample: int = 500) -> int:
    """``format_table`` as rows come: column widths from the first ``sample`` rows (a wider
    value later pushes its line right); the same text as ``format_table`` for up to
    ``sample`` rows. How many rows."""
    it = iter(rows)
    first = list(itertools.islice(it, sample))
    if not first:
        return 0
    text = format_table(headers, first)
    click.echo(text)
    sys.stdout.flush()
    widths = [max([len(h)] + [len(str(r[i])) for r in first]) for i, h in enumerate(headers)]
    n = len(first)
    for r in it:
        sys.stdout.write("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True))
                         .rstrip() + "\n")
        n += 1
        if n % FLUSH_EVERY == 0:
            sys.stdout.flush()
    sys.stdout.flush()
    return n


def progress(message: str) -> None:
    """A progress/log line on stderr (stdout is reserved for results)."""
    click.echo(message, err=True)


def counter(label: str, unit: str, every: int = 1) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` callback drawing "label: done/total unit" on one stderr line
    (every ``every``-th call, and the last), or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        if done == total or done % every == 0:
            sys.stderr.write(f"\r{label}: {done}/{total} {unit}\x1b[K"
                             + ("\n" if done == total else ""))
            sys.stderr.flush()

    return show


def confirm_or_refuse(question: str, refusal: str, hint: str) -> bool:
    """A terminal's yes to ``question`` (a no is click's Abort); without a terminal, refuse:
    UsageError(``refusal``, ``hint``). For a destructive command run without --yes."""
    if not sys.stdin.isatty():
        raise UsageError(refusal, hint=hint)
    if not click.confirm(question, err=True):
        raise click.exceptions.Abort()
    return True


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"

