"""One restore into a directory as a value: what it restores and how it runs (``RestoreJob``).

A ``RestoreJob`` is derived once from a request (``neffcache.restore.session``) or from the
arguments of ``restore_cells``, and handed whole to each step of the restore: no step relays
the deadline, the thread counts or the trusted keys one by one. No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from neffcache.backends import Backend
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import entry_key
from neffcache.matrix import Cell
from neffcache.restore.apply import Progress
from neffcache.restore.plan import DEFAULT_UNITS, UnitPolicy
from neffcache.restore.ready import Announcer
from neffcache.signing import PublicKey

Notice = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class RestoreJob:
    """What one restore restores (``cells``, in priority order, of ``backend``, built for
    ``fingerprint``, into ``target/<root>``) and how it runs:

    workers    threads that read manifests and look at what is in place
    transfers  threads that fetch blobs and large-file parts (None: ``workers``)
    deadline   a ``time.monotonic()`` value: no new work starts after it (None: none)
    trusted    public keys: an entry not signed by one of them is refused (integrity)
    notice     gets each warning (a lock waited for, ...); None: dropped
    progress   gets (files done, files total, bytes fetched) while fetching
    announcer  announces each cell ready as its last file lands (``ready``)
    units      how blobs become requests (pack runs, large-blob parts)
    """

    cells: tuple[Cell, ...]
    backend: Backend
    fingerprint: Fingerprint
    target: Path
    workers: int = 16
    transfers: int | None = None
    deadline: float | None = None
    trusted: Sequence[PublicKey] = ()
    notice: Notice | None = None
    progress: Progress | None = None
    announcer: Announcer | None = None
    units: UnitPolicy = DEFAULT_UNITS

    def entry_keys(self) -> list[str]:
        """Each cell's entry key for the fingerprint, in cell order."""
        return [entry_key(c, self.fingerprint) for c in self.cells]


class JobOptions(TypedDict, total=False):
    """``RestoreJob``'s fields after ``target``, as keywords (``restore_cells(**options)``):
    mypy checks each against the field of that name."""

    workers: int
    transfers: int | None
    deadline: float | None
    trusted: Sequence[PublicKey]
    notice: Notice | None
    progress: Progress | None
    announcer: Announcer | None
    units: UnitPolicy
