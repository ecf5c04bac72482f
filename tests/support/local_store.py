"""LocalStore with ``sweep_temps``, which only the tests use."""

from __future__ import annotations

from neffcache.store.local import TEMP_GRACE_SECONDS
from neffcache.store.local import LocalStore as _LocalStore


class LocalStore(_LocalStore):
    def sweep_temps(self, grace: float = TEMP_GRACE_SECONDS) -> int:
        """Remove the stale temp files; how many."""
        stale = list(self.stale_temps(grace))
        for temp in stale:
            self.remove_temp(temp)
        return len(stale)
