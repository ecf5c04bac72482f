"""``python -m neffcache.cli``: the console script."""

from neffcache.cli import main

main()
