"""The package version, in one place (the top-level face re-exports it)."""

__version__ = "0.1.0"
