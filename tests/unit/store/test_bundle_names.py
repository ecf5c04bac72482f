"""A bundle member's name is a whole store key: ``check_member_name`` refuses one with a
trailing newline or other tail (a regex ``$`` would let ``name\\n`` through) and takes the
kinds a bundle carries."""

from __future__ import annotations

import pytest

from neffcache.errors import IntegrityError
from neffcache.store.base import blob_key
from neffcache.store.bundle_format import check_member_name

SHA = "ab" * 32


@pytest.mark.parametrize("name", [f"manifests/{SHA}.json", f"cells/{SHA}/{SHA}.json",
                                  blob_key(SHA)])
def test_a_store_key_of_a_bundled_kind_is_a_member_name(name: str) -> None:
    assert check_member_name(name, SHA if name.startswith("blobs/") else None) == name


@pytest.mark.parametrize("tail", ["\n", "\r", " ", "/x", ".json"])
def test_a_name_with_a_tail_is_refused(tail: str) -> None:
    with pytest.raises(IntegrityError, match="is not a bundle object"):
        check_member_name(f"manifests/{SHA}.json{tail}")
    with pytest.raises(IntegrityError, match="is not a bundle object"):
        check_member_name(blob_key(SHA) + tail, SHA)
