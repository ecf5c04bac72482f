"""Shared entry selection for copy, bundle export and retire: MATRIX [--cells] | --all, and
--fingerprint."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from neffcache.errors import UsageError

F = TypeVar("F", bound=Callable[..., Any])


def fingerprint_option(f: F) -> F:
    return click.option("--fingerprint", "fingerprints", multiple=True, metavar="KEY",
                        help="Only entries built for this fingerprint (a key or a prefix of "
                             "at least 6 hex digits; repeatable).")(f)


def cells_option(f: F) -> F:
    return click.option("--cells", "patterns", multiple=True, metavar="GLOB",
                        help="Only cells of MATRIX whose id matches GLOB (repeatable).")(f)


def select_manifests(store: Any, matrix: str | None, patterns: tuple[str, ...],
                     fingerprints: tuple[str, ...], everything: bool, *,
                     workers: int = 16) -> tuple[Any, ...]:
    """The validated manifests of the selected entries (sorted by entry key)."""
    from neffcache.lifecycle.entry_select import (
        check_fingerprint_args,
        read_manifests,
        select_entry_keys,
    )

    if everything == (matrix is not None):
        raise UsageError("give a MATRIX or --all (not both)")
    if everything and patterns:
        raise UsageError("--cells selects cells of a MATRIX; it cannot be used with --all")
    wanted = check_fingerprint_args(fingerprints)
    cells = None
    if matrix is not None:
        from neffcache.matrix import select_cells
        from neffcache.matrix_io import load_matrix

        m = load_matrix(matrix)
        cells = select_cells(m.cells, patterns)
        if not cells:
            raise UsageError(f"--cells {' '.join(patterns)}: matches no cell of {matrix}")
    keys = select_entry_keys(store, cells, wanted, workers=workers)
    return read_manifests(store, keys, workers=workers)
