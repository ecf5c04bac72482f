"""``python -m tests.support.sleep_cli ARGS``: the neffcache CLI with the ``test-sleep`` TEST
BACKEND registered (tests start real worker processes with it)."""

from __future__ import annotations

import sys

from neffcache.cli import run
from tests.support.sleep_backend import register

if __name__ == "__main__":
    register()
    sys.exit(run(sys.argv[1:]))
