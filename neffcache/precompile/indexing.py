"""Tell the index what a use case published or judged; a failing index is only a notice."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from neffcache.config import Settings
from neffcache.errors import NeffcacheError
from neffcache.manifest import Manifest

if TYPE_CHECKING:
    from neffcache.index import Index

Notice = Callable[[str], None]


def record_entry_or_warn(settings: Settings, manifest: Manifest, store_url: str,
                         notice: Notice | None = None) -> bool:
    """Record a published entry in the index; True when it was, else a notice and False."""
    from neffcache.index import open_index

    say = notice or silent
    try:
        with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as index:
            index.record_entry(manifest, store_url)
        return True
    except NeffcacheError as exc:
        say(f"warning: entry not recorded in the index: {' '.join(str(exc).split())}")
        say(f"hint: {exc.hint or 'neffcache reindex'}")
        return False


def report_to_index(settings: Settings, what: str, write: Callable[[Index], None],
                    timeout: float, notice: Notice | None = None) -> bool | None:
    """Run ``write(index)`` in a thread given at most ``timeout`` seconds (a boot must not wait
    on a dashboard): True when written, False when not (a notice), None without an index."""
    if not settings.has_index:
        return None
    say = notice or silent
    errors: list[BaseException] = []

    def send() -> None:
        try:
            from neffcache.index import open_index

            with open_index(settings.index_url,
                            auto_upgrade=settings.index_is_embedded) as idx:
                write(idx)
        except BaseException as exc:  # noqa: BLE001 - reported as a notice below
            errors.append(exc)

    worker = threading.Thread(target=send, name="neffcache-index-report", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        say(f"warning: index did not answer within {timeout:.1f} s; {what} not recorded")
    elif errors:
        say(f"warning: {what} not recorded in the index: {' '.join(str(errors[0]).split())}")
    return not (worker.is_alive() or errors)


def silent(message: str) -> None:
    """The notice of a caller that gave none: dropped."""
