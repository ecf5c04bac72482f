"""Output helpers for the subcommands: results to stdout (text or JSON), logs to stderr."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, Protocol

import click

from neffcache.errors import NeffcacheError, UsageError


class Outcome(Protocol):
    """What every use case returns (``errors.ExitRule``): its JSON and its error."""

    def to_json(self) -> Any: ...

    def error(self) -> NeffcacheError | None: ...


def finish(result: Outcome, as_json: bool, text: Callable[[], str | None],
           notes: Iterable[str] = ()) -> None:
    """``--json`` or ``text()`` (None: nothing) to stdout, ``notes`` to stderr; raise the error."""
    if as_json:
        emit_json(result.to_json())
    else:
        shown = text()
        if shown is not None:
            click.echo(shown)
    for line in notes:
        progress(line)
    err = result.error()
    if err is not None:
        raise err


def emit_json(doc: Any) -> None:
    sys.stdout.write(json_text(doc) + "\n")
    sys.stdout.flush()


def json_text(doc: Any, depth: int = 2, _pad: str = "") -> str:
    """JSON, keys sorted, indented for ``depth`` levels, deeper values on one line: json's C
    encoder then does the rows (an indented dump is pure Python, ~10x slower)."""
    inner = _pad + "  "
    if depth > 0 and isinstance(doc, dict) and doc:
        items = [f"{inner}{json.dumps(str(k))}: {json_text(v, depth - 1, inner)}"
                 for k, v in sorted(doc.items())]
        return "{\n" + ",\n".join(items) + "\n" + _pad + "}"
    if depth > 0 and isinstance(doc, (list, tuple)) and doc:
        if depth == 1:  # one line per item (the 20,000-row case): no recursion per item
            items = [inner + line for line in map(_ONE_LINE.encode, doc)]
        else:
            items = [inner + json_text(v, depth - 1, inner) for v in doc]
        return "[\n" + ",\n".join(items) + "\n" + _pad + "]"
    return _ONE_LINE.encode(doc)


_ONE_LINE = json.JSONEncoder(sort_keys=True, default=str, separators=(", ", ": "))
encode_line = _ONE_LINE.encode  # one item as stream_json and stream_lines want it
FLUSH_EVERY = 1000  # streamed lines between flushes (the first line is flushed at once)


def stream_lines(lines: Iterable[str], lead: str = "", sep: str = "", end: str = "\n") -> int:
    """``lines`` to stdout as they come (``lead`` before the first, ``sep`` between); how many."""
    out, n = sys.stdout, 0
    for line in lines:
        out.write((lead if n == 0 else sep) + line + end)
        n += 1
        if n == 1 or n % FLUSH_EVERY == 0:
            out.flush()
    out.flush()
    return n


def stream_json(head: Mapping[str, Any], key: str, lines: Iterable[str],
                tail: Callable[[], Mapping[str, Any]]) -> None:
    """``json_text`` written as it is made: ``head``, then ``key``: ``lines``, then ``tail()``."""
    out = sys.stdout
    out.write("{\n")
    for k, v in sorted(head.items()):
        out.write(f"  {json.dumps(k)}: {json_text(v, 1, '  ')},\n")
    out.write(f"  {json.dumps(key)}: [")
    n = stream_lines(lines, "\n    ", ",\n    ", "")
    out.write("\n  ]" if n else "]")
    for k, v in tail().items():
        out.write(f",\n  {json.dumps(k)}: {json_text(v, 1, '  ')}")
    out.write("\n}\n")
    out.flush()


def stream_table(headers: list[str], rows: Iterable[list[Any]], sample: int = 500) -> int:
    """``format_table`` as rows come, column widths from the first ``sample`` rows; how many."""
    it = iter(rows)
    first = list(itertools.islice(it, sample))
    if not first:
        return 0
    widths = _widths(headers, first)
    click.echo("\n".join(_row(r, widths) for r in [headers, *first]))
    sys.stdout.flush()
    return len(first) + stream_lines(_row(r, widths) for r in it)


def progress(message: str) -> None:
    click.echo(message, err=True)


def counter(label: str, unit: str, every: int = 1) -> Callable[[int, int], None] | None:
    """A ``progress(done, total)`` callback on one stderr line; None off a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        if done == total or done % every == 0:
            sys.stderr.write(f"\r{label}: {done}/{total} {unit}\x1b[K"
                             + ("\n" if done == total else ""))
            sys.stderr.flush()

    return show


def jsonl_line(event: str, cell: str | None, message: str, *, elapsed: float | None = None,
               phase: str | None = None, ts: datetime | None = None) -> str:
    """One ``--log-format jsonl`` object; elapsed: seconds since the cell's worker started."""
    when = (ts or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return json.dumps({"ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                       "event": event, "cell": cell,
                       "elapsed": None if elapsed is None else round(elapsed, 1),
                       "phase": phase, "message": message}, ensure_ascii=False)


def ask(question: str, would: str, hint: str) -> bool:
    """A terminal's yes (a no is click's Abort); without a terminal, a UsageError."""
    if not sys.stdin.isatty():
        raise UsageError(f"{would}; refusing without --yes when stdin is not a terminal",
                         hint=hint)
    return click.confirm(question, err=True, abort=True)


def format_table(headers: list[str], rows: list[list[Any]]) -> str:
    widths = _widths(headers, rows)
    return "\n".join(_row(r, widths) for r in [headers, *rows])


def _widths(headers: list[str], rows: list[list[Any]]) -> list[int]:
    return [max([len(h)] + [len(str(r[i])) for r in rows]) for i, h in enumerate(headers)]


def _row(cells: list[Any], widths: list[int]) -> str:
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
