"""Helpers for lifecycle tests: publish entries under chosen SDK versions, and hand-made
bundles (hostile ones included), built with tarfile directly."""

from __future__ import annotations

import io
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from neffcache.backends import get_backend
from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.hashing import sha256_bytes
from neffcache.lifecycle.gc import manifest_all_references
from neffcache.lifecycle.retire import RetirePolicy
from neffcache.matrix import Cell
from neffcache.precompile.publish import PublishResult, publish_entry
from neffcache.store import TOC_NAME, Member, Store, Toc, encode_toc
from tests.support.synthetic import make_neff_cache


def cell(height: int, mode: str = "compile") -> Cell:
    return Cell("tiny", "diffusers:Flux2KleinPipeline", "/models/tiny-flux2-klein", "main",
                "bfloat16", mode, ("transformer",), height, height, 1, 1)


def sdk_fingerprint(cc: str, torch: str = "2.8.0") -> Fingerprint:
    """A neuron fingerprint whose SDK is neuronx-cc ``cc`` (other fields fixed)."""
    return build_fingerprint("neuron", {"target": "trn2", "lnc": "2",
                                        "version.neuronx-cc": cc,
                                        "version.torch-neuronx": f"{torch}.1",
                                        "version.torch": torch})


def manifest_references(data: bytes, source: str) -> set[str]:
    """The blob sha256s a manifest references (``gc.manifest_all_references``'s first)."""
    return manifest_all_references(data, source)[0]


def with_restored(policy: RetirePolicy, fingerprint_keys: Iterable[str]) -> RetirePolicy:
    """The policy with the fingerprints restored in its last ``keep_restored_days``."""
    return replace(policy, keep_fingerprints=frozenset(fingerprint_keys))


def publish_synthetic(store: Store, c: Cell, fp: Fingerprint, root: Path, *, seed: int,
                      count: int = 12) -> PublishResult:
    cache = make_neff_cache(root, seed=seed, count=count, large=0, droppings=False)
    return publish_entry(store, c, fp, get_backend(fp.backend), {"neff": cache.root})


def write_tar(path: Path, members: Sequence[tuple[str, bytes]], *,
              extra: Sequence[tarfile.TarInfo] = ()) -> None:
    """A tar of (name, bytes) regular files in order, then ``extra`` header-only members."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)


def bundle_with(path: Path, objects: Sequence[tuple[str, bytes]],
                listed: Sequence[tuple[str, bytes]] | None = None) -> None:
    """A bundle whose TOC lists ``listed`` (default: ``objects``) and whose tar holds
    ``objects``: lets a test make TOC and members disagree, or list hostile names."""
    toc = Toc(entries=(), members=tuple(Member(n, len(b), sha256_bytes(b))
                                        for n, b in (objects if listed is None else listed)))
    write_tar(path, [(TOC_NAME, encode_toc(toc)), *objects])
