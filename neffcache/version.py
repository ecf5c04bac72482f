"""The package version, and the commit a build was made from (see build_hook.py)."""

__version__ = "0.1.0"


def version_text() -> str:
    """``0.1.0 (commit <sha>)`` for a build from a git checkout, else ``0.1.0``."""
    from importlib.resources import files

    try:
        commit = files("neffcache").joinpath("_commit.txt").read_text().strip()
    except FileNotFoundError:
        commit = ""
    return f"{__version__} (commit {commit})" if commit else __version__
