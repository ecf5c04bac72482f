"""The store's key layout is read back where it is written (``store/base.py``): a manifest's
or a cell pointer's object key gives back the keys it was made of, and anything else under
its prefix (a nested name, another suffix) gives None."""

from __future__ import annotations

import pytest

from neffcache.store import (
    CELLS,
    MANIFESTS,
    cell_pointer_key,
    entry_key_of,
    manifest_key,
    pointer_parts,
)

CELL, FP = "c" * 64, "f" * 64


def test_object_keys_give_back_their_parts() -> None:
    assert entry_key_of(manifest_key(FP)) == FP
    assert pointer_parts(cell_pointer_key(CELL, FP)) == (CELL, FP)


@pytest.mark.parametrize("tail", [f"{FP}.json.tmp", f"{FP}", f"x/{FP}.json", f"{FP}.jsonx"])
def test_other_objects_under_the_prefixes_are_not_keys(tail: str) -> None:
    assert entry_key_of(f"{MANIFESTS}{tail}") is None
    assert pointer_parts(f"{CELLS}{CELL}/{tail}") is None
