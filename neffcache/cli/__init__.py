"""The ``neffcache`` console script: a lazy click group, and the one place errors become exits."""

from __future__ import annotations

import importlib
import os

import click

from neffcache.errors import EXIT_CODE_HELP, NeffcacheError, exit_code_for
from neffcache.version import version_text

# name -> `neffcache --help`'s line; the command (attribute `name` of neffcache.cli.<module>) is
# imported only when run, so `neffcache restore` on a boot path pays for nothing else
COMMANDS: dict[str, str] = {
    "push": "Publish an entry for a cell from cache dirs.",
    "restore": "Fetch a matrix's entries into cache dirs, verified.",
    "coverage": "Every cell x fingerprint with its status.",
    "ls": "List entries in the index.",
    "fingerprint": "Show this host's fingerprint or explain an entry's.",
    "verify": "Check every manifest's blobs exist and match their sha256.",
    "reindex": "Rebuild the index from the store (manifests and restore reports).",
    "reports": "Ingest restore reports (store objects or files) into the index.",
    "db": "Index database maintenance (upgrade).",
    "config": "Show the effective settings and where each value came from.",
    "repair": "Rewrite missing or damaged objects from a mirror, bundle or directory.",
    "gc": "Delete blobs no manifest references; abort stale uploads.",
    "precompile": "Warm every cell of a matrix not yet cached, and publish entries.",
    "warm": "Boot check: first call of each cell against a restored cache; report misses.",
    "capture": "Back-fill: publish files an instance compiled at run time as an entry.",
    "demo": "Build a tiny pipeline, precompile, restore, show cold vs warm.",
    "matrix": "Register matrix files in the index (with history) and list them.",
    "serve": "Read-only HTTP API, Prometheus /metrics and coverage dashboard.",
    "copy": "Copy entries between stores, blobs once, verified, resumable.",
    "bundle": "Carry entries in one verified file: export, import, show.",
    "keys": "Signing keys: generate one, show the public key restores trust.",
    "prune": "Remove from a restore DIR the entries the matrix no longer needs; plan first.",
    "retire": "Remove entries by policy (SDK versions kept, matrices kept); plan first.",
}
_MODULES = {"verify": "maintenance", "gc": "maintenance", "repair": "maintenance",
            "prune": "retire", "bundle": "copy", "push": "publish", "capture": "publish",
            "keys": "publish", "db": "index", "matrix": "index", "reindex": "index",
            "reports": "index", "serve": "index", "ls": "coverage", "warm": "precompile",
            "fingerprint": "host", "config": "host"}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"neffcache.cli.{_MODULES.get(name, name)}")
        return getattr(module, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(n, COMMANDS[n]) for n in self.list_commands(ctx)])


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        click.echo(f"neffcache {version_text()}")
        ctx.exit()


@click.group(cls=LazyGroup, epilog=EXIT_CODE_HELP,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version,
              help="Show the version (and the git commit it was built from) and exit.")
@click.option("--config", "config_file", metavar="FILE", default=None,
              help="Read settings from this TOML file (sets NEFFCACHE_CONFIG for the command; "
                   "it must exist).")
def group(config_file: str | None) -> None:
    """Compile once in CI, boot any number of Trainium instances warm.

    neffcache pre-compiles a declared matrix of pipelines x shapes x modes, stores the
    compile caches content-addressed in S3 (or a local directory) with a SQL index, and
    restores exactly the right entries onto a fresh instance, verified and atomic.

    \b
    Configuration (flag > environment > config file > default):
      NEFFCACHE_HOME    embedded default home (~/.cache/neffcache): index.db + store/
      NEFFCACHE_STORE   --store: PATH, file://PATH or s3://BUCKET/PREFIX
      NEFFCACHE_INDEX   --index: sqlite:///PATH or postgresql+psycopg://USER@HOST/DB
      NEFFCACHE_REPORTS restore --report-to: store (default), none or a directory
      NEFFCACHE_CONFIG  TOML file with `store`, `index`, `python`, `reports`, `mirrors`,
                        `trusted_keys` and `signing_key_file` keys (must exist if named)
      NEFFCACHE_DEBUG=1 show tracebacks
    S3 uses the standard AWS credential chain and AWS_ENDPOINT_URL. `neffcache config`
    prints every effective setting and where it came from.
    """
    if config_file is not None:  # the edge: every command below reads it from there
        os.environ["NEFFCACHE_CONFIG"] = config_file


def main(argv: list[str] | None = None) -> None:
    from neffcache.cli._process import exit_process

    exit_process(run(argv))


def run(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; every NeffcacheError maps to its code here."""
    try:
        returned: object = group.main(args=argv, prog_name="neffcache", standalone_mode=False)
        return returned if isinstance(returned, int) else 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return 1
    except click.ClickException as exc:
        exc.show()
        return 2
    except NeffcacheError as exc:
        _debug_traceback()
        msg = " ".join(str(exc).split())  # one line, always
        click.echo(f"Error: {msg}", err=True)
        if exc.hint:
            click.echo(f"Hint: {exc.hint}", err=True)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # noqa: BLE001 - the last line of defence prints one line too
        _debug_traceback()
        click.echo(f"Error: unexpected {type(exc).__name__}: {exc}", err=True)
        click.echo("Hint: rerun with NEFFCACHE_DEBUG=1 for a traceback", err=True)
        return 1


def _debug_traceback() -> None:
    if os.environ.get("NEFFCACHE_DEBUG"):
        import traceback  # only here: importing it costs every run a few ms of start-up

        traceback.print_exc()
