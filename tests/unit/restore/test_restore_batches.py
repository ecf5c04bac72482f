"""How many small files a pack thread keeps open per batch: as many as helps, never so many
that the threads together run out of file descriptors."""

from __future__ import annotations

import resource

import pytest

from neffcache.cli._process import raise_open_file_limit
from neffcache.restore.install import BATCH_FILES, batch_files


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> dict[str, tuple[int, int]]:
    state = {"now": (1024, 1024)}
    monkeypatch.setattr(resource, "getrlimit", lambda which: state["now"])

    def setrlimit(which: int, value: tuple[int, int]) -> None:
        state["now"] = value

    monkeypatch.setattr(resource, "setrlimit", setrlimit)
    return state


def test_a_small_host_gets_full_batches(limits: dict[str, tuple[int, int]]) -> None:
    assert batch_files(3, 8) == BATCH_FILES == 32


def test_many_threads_share_the_descriptor_limit(limits: dict[str, tuple[int, int]]) -> None:
    n = batch_files(17, 16)
    assert 1 <= n < BATCH_FILES and 17 * n + 4 * 16 <= 1024 // 2
    limits["now"] = (1024, 1024)
    assert batch_files(500, 256) == 1  # never zero: one file per batch still works


def test_batch_files_never_changes_the_limit(limits: dict[str, tuple[int, int]]) -> None:
    limits["now"] = (1024, 65536)
    assert batch_files(193, 256) == 1  # lives within the soft limit it finds
    assert limits["now"] == (1024, 65536)


def test_the_cli_edge_raises_the_soft_limit_to_the_hard_one(
        limits: dict[str, tuple[int, int]]) -> None:
    limits["now"] = (1024, 65536)
    assert raise_open_file_limit() == 65536
    assert limits["now"] == (65536, 65536)
    assert batch_files(193, 256) == BATCH_FILES


def test_a_refused_raise_keeps_the_soft_limit(limits: dict[str, tuple[int, int]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    limits["now"] = (200, 4096)

    def refuse(which: int, value: tuple[int, int]) -> None:
        raise ValueError("not permitted")

    monkeypatch.setattr(resource, "setrlimit", refuse)
    assert raise_open_file_limit() == 200
    n = batch_files(3, 8)
    assert 1 <= n < BATCH_FILES and n * 3 + 4 * 8 <= 200 // 2
    assert limits["now"] == (200, 4096)
