"""The exit-code table is resolved by class hierarchy, and the CLI maps every error once."""

from __future__ import annotations

import pytest

from neffcache import errors as e
from neffcache.cli import run


class _Sub(e.ManifestError):
    pass


@pytest.mark.parametrize("exc, code", [
    (e.NeffcacheError("x"), 1),
    (e.UsageError("x"), 2),
    (e.ConfigError("x"), 2),
    (e.MatrixError("x"), 2),
    (e.CacheMissError("x"), 3),
    (e.DeadlineExceededError("x"), 3),
    (e.IntegrityError("x"), 4),
    (e.ManifestError("x"), 4),
    (_Sub("x"), 4),
    (e.FingerprintMismatchError("x"), 5),
    (e.UnavailableError("x"), 6),
    (e.SchemaOutdatedError("x"), 7),
    (e.NotFoundError("x"), 1),
    (e.WorkerError("x"), 1),
    (ValueError("x"), 1),
])
def test_exit_code_by_class_hierarchy(exc: BaseException, code: int) -> None:
    assert e.exit_code_for(exc) == code
    if isinstance(exc, e.NeffcacheError):  # each error knows its own, from the same table
        assert exc.exit_code == code


def test_table_order_does_not_matter(monkeypatch: pytest.MonkeyPatch) -> None:
    reversed_table = dict(reversed(list(e.EXIT_CODES.items())))
    monkeypatch.setattr(e, "EXIT_CODES", reversed_table)
    assert e.exit_code_for(e.ManifestError("x")) == 4
    assert e.exit_code_for(e.ConfigError("x")) == 2


def test_every_error_class_is_reachable_from_the_root() -> None:
    classes = [v for v in vars(e).values() if isinstance(v, type) and issubclass(v, Exception)]
    assert all(issubclass(c, e.NeffcacheError) for c in classes)
    assert e.SchemaOutdatedError("x").hint == "neffcache db upgrade"


def test_cli_prints_one_line_error_and_hint(capsys: pytest.CaptureFixture[str],
                                            tmp_path: object) -> None:
    code = run(["restore", "/nonexistent/matrix.toml", "--to", "/tmp/x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("Error: /nonexistent/matrix.toml: matrix file not found")
    assert err.count("\n") == 1


def test_neffcache_debug_adds_the_traceback(capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEFFCACHE_DEBUG", "1")
    code = run(["restore", "/nonexistent/matrix.toml", "--to", "/tmp/x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("Traceback (most recent call last):")
    assert err.rstrip().splitlines()[-1].startswith("Error: /nonexistent/matrix.toml")
