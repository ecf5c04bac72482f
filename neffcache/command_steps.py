"""Steps every use case shares: open and check its store; destroy only with consent."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from neffcache.errors import UsageError
from neffcache.store import Store, open_store

Preview = TypeVar("Preview")


def open_checked_store(url: str, *, create: bool = False,
                       environ: Mapping[str, str] | None = None) -> Store:
    """UnavailableError when it cannot be reached, ConfigError when not a neffcache store."""
    store = open_store(url, create=create, environ=environ)
    store.check()
    return store


def consent(confirmed: bool, confirm: Callable[[Preview], bool] | None, preview: Preview,
            refusal: str, *, hint: str) -> bool:
    """``confirmed``, else ``confirm(preview)``; with neither, UsageError (never a prompt)."""
    if confirmed:
        return True
    if confirm is None:
        raise UsageError(refusal, hint=hint)
    return confirm(preview)
