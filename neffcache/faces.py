"""Lazy package faces (PEP 562): a face's ``_FACE`` table maps each module (relative, or
``neffcache.x``) to the names it exports (``"verify_store as verify"`` renames); ``lazy_face``
derives ``__all__`` and ``__getattr__`` from it, ``tools/faces.py`` the static imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exported(table: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, str]]:
    """Each exported name -> (its module, relative to the package; its name there)."""
    out: dict[str, tuple[str, str]] = {}
    for module, names in table.items():
        for entry in names:
            name, _, alias = entry.partition(" as ")
            out[alias or name] = (module, name)
    return out


def module_name(package: str, module: str) -> str:
    """A table's module key as an absolute module name (``neffcache.x`` is one already)."""
    return module if module.startswith("neffcache.") else f"{package}.{module}"


def lazy_face(namespace: dict[str, Any], table: Mapping[str, tuple[str, ...]]
              ) -> tuple[list[str], Callable[[str], Any]]:
    """The ``__all__`` and the module ``__getattr__`` of the package whose globals are
    ``namespace``: a name is imported from its module when first read, then kept."""
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
