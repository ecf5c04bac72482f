"""Documents shaped as a TypedDict declares them (only tests build them this way)."""

from __future__ import annotations

from typing import Any

from neffcache.documents import encode


def shaped_as(value: Any, shape: Any) -> Any:
    """``value``'s document as the TypedDict ``shape`` declares it, from its attributes."""
    return {key: encode(getattr(value, key)) for key in shape.__annotations__}
