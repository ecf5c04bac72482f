"""One suite, every store: the behaviour restore, publish, verify and gc rely on."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from neffcache.errors import NotFoundError, UsageError
from neffcache.store.base import Store, blob_key, manifest_key

MiB = 1 << 20
BIG = 13 * MiB  # above the S3 test multipart threshold: three parts (6 + 5 + 2 MiB)


class Trickle(io.RawIOBase):
    """A non-seekable stream that returns at most 64 KiB per read, like a pipe or socket."""

    def __init__(self, data: bytes) -> None:
        self._view, self._pos = memoryview(data), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = min(len(buffer), 64 * 1024, len(self._view) - self._pos)
        buffer[:n] = self._view[self._pos:self._pos + n]
        self._pos += n
        return n


def put_bytes(store: Store, key: str, data: bytes, *, if_absent: bool = True) -> bool:
    return store.put(key, io.BytesIO(data), if_absent=if_absent)


def read_all(store: Store, key: str) -> bytes:
    fh = store.open(key)
    try:
        return fh.read()
    finally:
        fh.close()


# -- round trips ------------------------------------------------------------------------------

def test_small_object_round_trip(store: Store) -> None:
    data = b"0123456789abcdef"
    assert not store.has("manifests/a.json")
    assert put_bytes(store, "manifests/a.json", data) is True
    assert store.has("manifests/a.json")
    assert read_all(store, "manifests/a.json") == data
    assert store.read("manifests/a.json") == data
    assert store.read("manifests/a.json", 4) == data[4:]
    assert store.read("manifests/a.json", 4, 3) == b"456"
    assert store.read("manifests/a.json", 0, 1) == b"0"
    assert store.read("manifests/a.json", 10, 100) == data[10:]
    assert store.read("manifests/a.json", len(data)) == b""
    assert store.read("manifests/a.json", 100, 5) == b""


def test_empty_object_round_trip(store: Store) -> None:
    assert put_bytes(store, "blobs/sha256/e3/empty", b"") is True
    assert store.has("blobs/sha256/e3/empty")
    assert read_all(store, "blobs/sha256/e3/empty") == b""
    assert store.read("blobs/sha256/e3/empty") == b""
    assert store.read("blobs/sha256/e3/empty", 0, 10) == b""


def test_multi_mib_object_streams_in_chunks_and_reads_ranges(store: Store) -> None:
    data = os.urandom(BIG)
    key = blob_key(hashlib.sha256(data).hexdigest())
    assert store.put(key, Trickle(data)) is True  # type: ignore[arg-type]

    digest, total = hashlib.sha256(), 0
    fh = store.open(key)
    with fh:
        while chunk := fh.read(MiB):
            digest.update(chunk)
            total += len(chunk)
    assert fh.closed
    assert (total, digest.hexdigest()) == (BIG, hashlib.sha256(data).hexdigest())

    boundary = 6 * MiB  # the first S3 part boundary
    assert store.read(key, boundary - 10, 20) == data[boundary - 10:boundary + 10]
    assert store.read(key, BIG - 5) == data[-5:]
    assert store.read(key, 0, 3 * MiB) == data[:3 * MiB]

    # A ranged stream, read in chunks that do not line up with the range.
    start, length = boundary - 12345, 2 * MiB + 7
    with store.open(key, start, length) as fh:
        got = b"".join(iter(lambda: fh.read(300_001), b""))
    assert got == data[start:start + length]
    with store.open(key, BIG - 3, 100) as fh:
        assert fh.read() == data[-3:]
    with store.open(key, BIG + 10, 5) as fh:
        assert fh.read() == b""


def test_ranged_open_of_a_missing_key_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.open("packs/00/" + "0" * 64, 10, 5).read()


# -- if_absent --------------------------------------------------------------------------------

@pytest.mark.parametrize("first_size,second_size", [(10, 20), (BIG, 20), (10, BIG), (BIG, BIG)],
                         ids=["small-small", "big-small", "small-big", "big-big"])
def test_put_if_absent_never_overwrites(store: Store, first_size: int,
                                        second_size: int) -> None:
    first, second = b"1" * first_size, b"2" * second_size
    assert put_bytes(store, "manifests/k.json", first) is True
    assert put_bytes(store, "manifests/k.json", second) is False
    assert store.read("manifests/k.json") == first


def test_put_without_if_absent_overwrites(store: Store) -> None:
    assert put_bytes(store, "manifests/k.json", b"old") is True
    assert put_bytes(store, "manifests/k.json", b"new", if_absent=False) is True
    assert store.read("manifests/k.json") == b"new"


@pytest.mark.parametrize("size,writers", [(1000, 8), (7 * MiB, 3)], ids=["small", "large"])
def test_put_if_absent_race_has_exactly_one_winner(store: Store, size: int, writers: int,
                                                   request: pytest.FixtureRequest) -> None:
    """Exactly one concurrent writer wins and the stored bytes are that writer's; a body above
    the multipart threshold at a key that is not content-addressed is one conditional PUT."""
    if size > MiB and request.node.callspec.params["store"] in ("s3", "s3-ipv6"):
        pytest.skip("moto 5.2 checks If-None-Match, then computes the body's checksums and "
                    "stores it, without a lock (moto/s3/responses.py, put_object): concurrent "
                    "large PUTs can all succeed there; this race runs on SeaweedFS instead")
    bodies = [bytes([65 + i]) * size for i in range(writers)]
    barrier = threading.Barrier(writers)

    def write(body: bytes) -> bool:
        barrier.wait()
        return put_bytes(store, "manifests/raced.json", body)

    with ThreadPoolExecutor(writers) as pool:
        results = list(pool.map(write, bodies))
    stored = store.read("manifests/raced.json")
    assert results.count(True) == 1, results
    assert stored == bodies[results.index(True)]


# -- missing keys -----------------------------------------------------------------------------

def test_missing_key_raises_not_found(store: Store) -> None:
    key = manifest_key("does-not-exist")
    assert store.has(key) is False
    with pytest.raises(NotFoundError):
        store.open(key)
    with pytest.raises(NotFoundError):
        store.read(key)
    with pytest.raises(NotFoundError):
        store.read(key, 5, 10)
    with pytest.raises(NotFoundError):
        store.read(key, 0, 0)


@pytest.mark.parametrize("key", ["../escape", "a/../../b", "/etc/passwd", "", "a//b", "./a",
                                 "manifests/.."])
def test_keys_that_could_escape_are_rejected(store: Store, key: str) -> None:
    for call in (lambda: store.has(key), lambda: store.open(key), lambda: store.read(key),
                 lambda: put_bytes(store, key, b"x"), lambda: store.delete(key)):
        with pytest.raises(UsageError):
            call()


# -- list and delete --------------------------------------------------------------------------

def test_list_by_prefix(store: Store) -> None:
    keys = {manifest_key("e1"), manifest_key("e2"), blob_key("ab" + "0" * 62),
            blob_key("cd" + "1" * 62)}
    for key in keys:
        put_bytes(store, key, b"x")
    assert set(store.list("")) == keys
    assert set(store.list("manifests/")) == {manifest_key("e1"), manifest_key("e2")}
    assert set(store.list("blobs/sha256/ab/")) == {blob_key("ab" + "0" * 62)}
    assert list(store.list("nothing-here/")) == []


def test_list_more_than_one_page(store: Store) -> None:
    """S3 returns at most 1,000 keys per ListObjectsV2 page: list must follow continuations."""
    keys = {f"blobs/sha256/{i % 7:02x}/{i:064x}" for i in range(1013)}
    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(lambda k: put_bytes(store, k, b""), keys))
    listed = list(store.list("blobs/"))
    assert len(listed) == len(keys)
    assert set(listed) == keys


def test_delete_is_idempotent(store: Store) -> None:
    put_bytes(store, "manifests/d.json", b"x")
    store.delete("manifests/d.json")
    assert not store.has("manifests/d.json")
    store.delete("manifests/d.json")
    store.delete("manifests/never-existed.json")
    assert list(store.list("manifests/")) == []
    assert put_bytes(store, "manifests/d.json", b"y") is True
    assert store.read("manifests/d.json") == b"y"


def test_check_passes_on_a_working_store(store: Store) -> None:
    store.check()


# -- imports ----------------------------------------------------------------------------------

AWS_SDK = ("boto3", "botocore", "s3transfer")


def _aws_modules_after(code: str, roots: tuple[str, ...] = AWS_SDK) -> list[str]:
    """Modules under ``roots`` (package names or exact module names) imported by ``code``."""
    probe = (f"import sys\n{code}\n"
             "print(','.join(sorted(m for m in sys.modules "
             f"if m.split('.')[0] in {roots!r} or m in {roots!r})))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    return [m for m in out.stdout.strip().split(",") if m]


def test_importing_the_store_package_does_not_import_boto3(tmp_path: Path) -> None:
    assert _aws_modules_after(
        "import neffcache.store\n"
        f"s = neffcache.store.open_store({str(tmp_path)!r}, create=True)\n"
        "s.check(); s.has('a')") == []


@pytest.mark.s3
def test_s3_reads_and_writes_import_no_aws_sdk(s3_url: str) -> None:
    """With credentials from the environment, the S3 store is obstore alone: no botocore
    (~0.2 s of imports and client set-up on a boot), no boto3, no s3transfer."""
    read = _aws_modules_after(
        f"import io, neffcache.store; s = neffcache.store.open_store({s3_url!r}, create=True)\n"
        "s.check()\n"
        "assert not s.has('manifests/x.json'); list(s.list('manifests/'))")
    assert read == []
    wrote = _aws_modules_after(
        f"import io, neffcache.store; s = neffcache.store.open_store({s3_url!r})\n"
        "s.put('manifests/x.json', io.BytesIO(b'{}')); assert s.read('manifests/x.json')\n"
        "s.delete('manifests/x.json')")
    assert wrote == []
    assert _aws_modules_after("import botocore.session")  # the probe can see the SDK


@pytest.mark.s3
def test_s3_reads_use_neither_http_client_nor_the_email_package(s3_url: str) -> None:
    """http.client parses headers with the email package: ~25 ms of a boot's start-up."""
    stack = ("http.client", "email")
    opened = f"import io, neffcache.store; s = neffcache.store.open_store({s3_url!r})\n"
    read = _aws_modules_after(
        opened + "s.put('manifests/r.json', io.BytesIO(b'{}'))\n"
        "s.check(); assert not s.has('manifests/x.json'); list(s.list('manifests/'))\n"
        "assert s.read('manifests/r.json') == b'{}'", stack)
    assert read == []
    assert _aws_modules_after("import http.client", stack)  # the probe can see them
