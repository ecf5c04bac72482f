"""Reading matrix files from disk (the I/O edge of neffcache.matrix)."""

from __future__ import annotations

from pathlib import Path

from neffcache.errors import MatrixError
from neffcache.matrix import Matrix, parse_matrix


def load_matrix(path: str | Path) -> Matrix:
    """Read and parse a matrix file; a missing or unreadable file is a MatrixError."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MatrixError(f"{p}: matrix file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError(f"{p}: cannot read matrix file: {exc}") from None
    return parse_matrix(text, source=str(p))
