"""The steps every command's use case takes the same way: open and check its store, and go on
with destructive work only with consent (the library never prompts)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from neffcache.errors import UsageError
from neffcache.store import Store, open_store

Preview = TypeVar("Preview")


def open_checked_store(url: str, *, create: bool = False,
                       environ: Mapping[str, str] | None = None) -> Store:
    """The store at ``url`` (see ``open_store``), checked: UnavailableError (exit 6) when it
    cannot be reached, ConfigError (exit 2) when it is not a neffcache store."""
    store = open_store(url, create=create, environ=environ)
    store.check()
    return store


def consent(confirmed: bool, confirm: Callable[[Preview], bool] | None, preview: Preview,
            refusal: str, *, hint: str) -> bool:
    """Whether to go on: ``confirmed``, else what ``confirm(preview)`` answers (``preview``:
    the dry run's result); with neither, UsageError(``refusal``, ``hint``)."""
    if confirmed:
        return True
    if confirm is None:
        raise UsageError(refusal, hint=hint)
    return confirm(preview)
