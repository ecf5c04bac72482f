"""Lazy package faces (PEP 562) from a ``_FACE`` table: module -> the names it exports."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exported(table: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, str]]:
    """Each exported name -> (its module, its name there); ``"x as y"`` renames."""
    return {alias or name: (module, name) for module, names in table.items()
            for name, _, alias in (entry.partition(" as ") for entry in names)}


def module_name(package: str, module: str) -> str:
    return module if module.startswith("neffcache.") else f"{package}.{module}"


def lazy_face(namespace: dict[str, Any], table: Mapping[str, tuple[str, ...]]
              ) -> tuple[list[str], Callable[[str], Any]]:
    """``__all__`` and ``__getattr__`` for ``namespace``: a name is imported when first read."""
    package = namespace["__name__"]
    homes = exported(table)

    def __getattr__(name: str) -> Any:  # PEP 562
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name(package, home[0])), home[1])
        namespace[name] = value
        return value

    return sorted(homes), __getattr__
