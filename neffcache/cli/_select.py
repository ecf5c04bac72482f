"""Shared entry-selection options for copy and bundle export: --cells (of a MATRIX) and
--fingerprint (the selection itself is ``lifecycle``'s: MATRIX [--cells] | --all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def fingerprint_option(f: F) -> F:
    return click.option("--fingerprint", "fingerprints", multiple=True, metavar="KEY",
                        help="Only entries built for this fingerprint (a key or a prefix of "
                             "at least 6 hex digits; repeatable).")(f)


def cells_option(f: F) -> F:
    return click.option("--cells", "patterns", multiple=True, metavar="GLOB",
                        help="Only cells of MATRIX whose id matches GLOB (repeatable).")(f)
