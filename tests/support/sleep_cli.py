"""``python -m tests.support.sleep_cli ARGS``: the neffcache CLI with the ``test-sleep`` TEST
BACKEND registered (tests start real worker processes with it)."""

from __future__ import annotations

import sys

from neffcache.cli import main
from tests.support.sleep_backend import register

if __name__ == "__main__":
    register()
    main(sys.argv[1:])  # as the installed command ends (``exit_process``)
