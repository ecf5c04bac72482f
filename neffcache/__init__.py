"""neffcache: compile once in CI, boot any number of Trainium instances warm."""

__version__ = "0.1.0"
