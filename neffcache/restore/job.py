"""One restore into a directory as a value (``RestoreJob``), handed whole to each step. No I/O."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

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

    def __post_init__(self) -> None:  # a list of cells, a relative target: made exact once
        object.__setattr__(self, "cells", tuple(self.cells))
        object.__setattr__(self, "target", Path(self.target).absolute())

    def entry_keys(self) -> list[str]:
        """Each cell's entry key for the fingerprint, in cell order."""
        return [entry_key(c, self.fingerprint) for c in self.cells]
