"""What only the S3 store has to get right: URLs, endpoints, conditional writes, and the one
place client errors become NotFoundError / UnavailableError / ConfigError."""

from __future__ import annotations

import io
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from neffcache.errors import ConfigError, IntegrityError, UnavailableError
from neffcache.store.s3 import S3Store
from tests.support.servers import free_port

MiB = 1 << 20
SECRET = "s3cr3t-never-in-messages"


@pytest.fixture
def fake_creds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNEVERINMESSAGES")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def closed_endpoint() -> str:
    return f"http://127.0.0.1:{free_port()}"  # bound then released: nothing listens there


def assert_one_line_without_credentials(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg
    assert SECRET not in msg and "AKIDNEVERINMESSAGES" not in msg
    return msg


# -- URLs and endpoints -----------------------------------------------------------------------

def test_from_url_parses_bucket_and_prefix(fake_creds: None) -> None:
    store = S3Store.from_url("s3://bkt/a/b/", environ={})
    assert (store.bucket, store.prefix, store.url) == ("bkt", "a/b", "s3://bkt/a/b")
    assert S3Store.from_url("s3://bkt", environ={}).url == "s3://bkt"


@pytest.mark.parametrize("url", ["s3://", "s3:///prefix", "s3://user:pw@bkt/p", "s3://bkt/p?x=1",
                                 "gs://bkt/p"])
def test_from_url_rejects_malformed_urls(url: str) -> None:
    with pytest.raises(ConfigError, match="s3://BUCKET/PREFIX"):
        S3Store.from_url(url, environ={})


def test_endpoint_variables_s3_specific_first(fake_creds: None) -> None:
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:1111",
           "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:2222"}
    assert S3Store.from_url("s3://bkt/p", environ=env).endpoint == "http://127.0.0.1:2222"
    del env["AWS_ENDPOINT_URL_S3"]
    assert S3Store.from_url("s3://bkt/p", environ=env).endpoint == "http://127.0.0.1:1111"


def test_endpoint_user_info_is_never_shown(fake_creds: None) -> None:
    store = S3Store("bkt", "p", endpoint_url=f"http://user:{SECRET}@127.0.0.1:{free_port()}",
                    max_attempts=1)
    with pytest.raises(UnavailableError) as info:
        store.check()
    assert_one_line_without_credentials(info.value)


# -- unreachable, no credentials, missing bucket ----------------------------------------------

def test_check_on_unreachable_endpoint_is_unavailable(fake_creds: None) -> None:
    endpoint = closed_endpoint()
    store = S3Store("bkt", "p", endpoint_url=endpoint)
    started = time.monotonic()
    with pytest.raises(UnavailableError) as info:
        store.check()
    elapsed = time.monotonic() - started
    msg = assert_one_line_without_credentials(info.value)
    assert endpoint in msg and "s3://bkt/p" in msg
    print(f"check() on a closed port failed after {elapsed:.2f}s")  # measured, not asserted


OPERATIONS: dict[str, Callable[[S3Store], object]] = {
    "has": lambda s: s.has("manifests/x.json"),
    "open": lambda s: s.open("manifests/x.json"),
    "read": lambda s: s.read("manifests/x.json", 1, 2),
    "put": lambda s: s.put("manifests/x.json", io.BytesIO(b"x")),
    "put-multipart": lambda s: s.put("blobs/x", io.BytesIO(b"x" * 6 * MiB)),
    "list": lambda s: list(s.list("manifests/")),
    "delete": lambda s: s.delete("manifests/x.json"),
}


@pytest.mark.parametrize("op", OPERATIONS)
def test_every_operation_on_unreachable_endpoint_is_unavailable(fake_creds: None,
                                                                op: str) -> None:
    store = S3Store("bkt", "p", endpoint_url=closed_endpoint(), max_attempts=1,
                    multipart_threshold=5 * MiB, part_size=5 * MiB)
    with pytest.raises(UnavailableError) as info:
        OPERATIONS[op](store)
    assert_one_line_without_credentials(info.value)


def test_missing_credentials_are_unavailable(monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: object) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", f"{tmp_path}/no-credentials")
    monkeypatch.setenv("AWS_CONFIG_FILE", f"{tmp_path}/no-config")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    store = S3Store("bkt", "p", endpoint_url=closed_endpoint(), max_attempts=1)
    with pytest.raises(UnavailableError, match="no usable AWS credentials"):
        store.check()
    with pytest.raises(UnavailableError, match="no usable AWS credentials"):
        store.read("manifests/x.json")


@pytest.mark.s3
def test_missing_bucket_is_unavailable_not_not_found(s3_env: dict[str, str]) -> None:
    store = S3Store.from_url("s3://nc-no-such-bucket/p")
    with pytest.raises(UnavailableError, match="bucket does not exist"):
        store.check()
    with pytest.raises(UnavailableError, match="bucket does not exist"):
        store.read("manifests/x.json")
    with pytest.raises(UnavailableError, match="bucket does not exist"):
        store.put("manifests/x.json", io.BytesIO(b"x"))


@pytest.mark.seaweedfs
def test_wrong_secret_is_refused_by_a_server_that_checks_signatures(
        seaweedfs_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """SeaweedFS runs with an identity, so it verifies every signature as AWS does."""
    good = S3Store.from_url(seaweedfs_url)
    good.put("manifests/a.json", io.BytesIO(b"{}"))
    assert good.read("manifests/a.json") == b"{}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    bad = S3Store.from_url(seaweedfs_url)
    with pytest.raises(UnavailableError, match="secret key does not match") as info:
        bad.read("manifests/a.json")
    assert_one_line_without_credentials(info.value)
    assert info.value.hint and "AWS_SECRET_ACCESS_KEY" in info.value.hint
    with pytest.raises(UnavailableError, match="secret key does not match"):
        bad.put("manifests/b.json", io.BytesIO(b"{}"))


@pytest.mark.seaweedfs
def test_unknown_access_key_is_named(seaweedfs_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDNEVERINMESSAGES")
    store = S3Store.from_url(seaweedfs_url)
    for call in (store.check, lambda: store.read("manifests/a.json"),
                 lambda: list(store.list("manifests/"))):
        with pytest.raises(UnavailableError, match="access key id not recognised") as info:
            call()
        assert_one_line_without_credentials(info.value)


# -- conditional writes on the moto server ----------------------------------------------------

@pytest.mark.s3
def test_keys_live_under_the_prefix(s3_url: str, s3_bucket: str,
                                    s3_env: dict[str, str]) -> None:
    import boto3

    store = S3Store.from_url(s3_url)
    store.put("manifests/a.json", io.BytesIO(b"{}"))
    raw = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    keys = [o["Key"] for o in raw.list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert keys == ["neff/manifests/a.json"]
    sibling = S3Store.from_url(f"s3://{s3_bucket}/neff2")
    raw.put_object(Bucket=s3_bucket, Key="neff2/manifests/b.json", Body=b"{}")
    assert list(store.list("")) == ["manifests/a.json"]
    assert list(sibling.list("")) == ["manifests/b.json"]


@pytest.mark.s3
@pytest.mark.parametrize("key", ["manifests/k.json", "pending/k.json", "blobs/k"])
def test_conditional_write_itself_refuses_to_overwrite(s3_url: str, key: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Skip the HEAD shortcut so the server's If-None-Match is what stops the second writer."""
    store = S3Store.from_url(s3_url, multipart_threshold=6 * MiB, part_size=5 * MiB)
    assert store.put(key, io.BytesIO(b"1" * 100)) is True
    monkeypatch.setattr(store, "has", lambda key: False)
    assert store.put(key, io.BytesIO(b"2" * 100)) is False
    assert store.read(key) == b"1" * 100


@pytest.mark.s3
def test_large_bodies_that_are_not_content_addressed_stay_conditional(s3_url: str) -> None:
    """Above the multipart threshold a manifest-like key is still one conditional PutObject."""
    store = S3Store.from_url(s3_url, multipart_threshold=6 * MiB, part_size=5 * MiB)
    assert store.put("manifests/big.json", io.BytesIO(b"1" * 7 * MiB)) is True
    assert store.put("manifests/big.json", io.BytesIO(b"2" * 7 * MiB)) is False
    assert store.read("manifests/big.json", 0, 4) == b"1111"
    # the body is sent whole from where the stream stood, from a BytesIO's buffer or a file
    body = bytes(range(256)) * (28 * 1024)  # 7 MiB
    at_three = io.BytesIO(b"xyz" + body)
    at_three.read(3)
    assert store.put("manifests/big2.json", at_three) is True
    assert store.read("manifests/big2.json") == body
    with tempfile.TemporaryFile() as fh:
        fh.write(body[::-1])
        fh.seek(0)
        assert store.put("manifests/big3.json", fh) is True
    assert store.read("manifests/big3.json") == body[::-1]


@pytest.mark.s3
def test_large_blob_goes_multipart_and_is_skipped_when_present(s3_url: str, s3_bucket: str,
                                                               s3_env: dict[str, str]) -> None:
    import boto3

    store = S3Store.from_url(s3_url, multipart_threshold=6 * MiB, part_size=5 * MiB)
    body = bytes(range(256)) * (44 * 1024)  # 11 MiB: three parts
    assert store.put("blobs/sha256/ab/big", io.BytesIO(body)) is True
    assert store.put("blobs/sha256/ab/big", io.BytesIO(body)) is False  # present: nothing uploaded
    assert store.read("blobs/sha256/ab/big") == body
    raw = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    etag = raw.head_object(Bucket=s3_bucket, Key="neff/blobs/sha256/ab/big")["ETag"]
    assert etag.strip('"').endswith("-3")  # a multipart upload of 5 + 5 + 1 MiB
    assert raw.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


@pytest.mark.s3
def test_a_large_local_file_goes_multipart_without_a_spool(s3_url: str, s3_bucket: str,
                                                           s3_env: dict[str, str], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A body read from a local file (through a VerifyingReader, or a pack's temp file) is
    uploaded from the file itself: no spool. One that fails its sha256 at the end of the file
    aborts the upload: an IntegrityError, no object and no multipart upload left."""
    import boto3

    from neffcache.hashing import VerifyingReader, sha256_bytes

    def no_spool(*args: object, **kwargs: object) -> None:
        raise AssertionError("spooled a local file")

    monkeypatch.setattr("neffcache.store.s3.tempfile.TemporaryFile", no_spool)
    store = S3Store.from_url(s3_url, multipart_threshold=6 * MiB, part_size=5 * MiB)
    raw = boto3.client("s3", endpoint_url=s3_env["AWS_ENDPOINT_URL"])
    body = bytes(range(256)) * (44 * 1024)  # 11 MiB: three parts
    path = tmp_path / "big"
    path.write_bytes(body)
    for sha, key in (("0" * 64, "blobs/sha256/00/bad"), (sha256_bytes(body), "blobs/sha256/ab/ok")):
        reader = VerifyingReader(open(path, "rb"), size=len(body), sha256=sha, name="big")
        with reader:
            if sha == "0" * 64:
                with pytest.raises(IntegrityError, match="differs from"):
                    store.put(key, reader)  # type: ignore[arg-type]
                assert not store.has(key)
            else:
                assert store.put(key, reader) is True  # type: ignore[arg-type]
                assert store.read(key) == body
    with open(path, "rb") as fh:  # unsized, as a pack's temp file is: sized from the file
        fh.read(MiB)
        assert store.put("packs/ab/p", fh) is True
    assert store.read("packs/ab/p") == body[MiB:]
    for key, parts in (("neff/blobs/sha256/ab/ok", 3), ("neff/packs/ab/p", 2)):
        assert raw.head_object(Bucket=s3_bucket, Key=key)["ETag"].strip('"').endswith(f"-{parts}")
    assert raw.list_multipart_uploads(Bucket=s3_bucket).get("Uploads", []) == []


@pytest.mark.s3
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_requests_go_through_the_configured_proxy(s3_url: str, monkeypatch: pytest.MonkeyPatch,
                                                  variable: str) -> None:
    from tests.support.forward_proxy import ForwardProxy

    with ForwardProxy() as proxy:
        monkeypatch.setenv(variable, proxy.url)
        store = S3Store.from_url(s3_url, create=True)
        store.check()
        assert store.put("manifests/p.json", io.BytesIO(b"{}")) is True
        assert store.read("manifests/p.json") == b"{}"
        assert list(store.list("manifests/")) == ["manifests/p.json"]
        methods = {m for m, _ in proxy.seen}
    assert {"GET", "PUT"} <= methods


@pytest.mark.s3
def test_no_proxy_bypasses_the_proxy(s3_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.support.forward_proxy import ForwardProxy

    with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
        store = S3Store.from_url(s3_url, create=True)
        store.put("manifests/q.json", io.BytesIO(b"{}"))
        assert store.read("manifests/q.json") == b"{}"
    assert proxy.seen == []


@pytest.mark.s3
@pytest.mark.parametrize("start,length", [(0, None), (1 * MiB, 3 * MiB)], ids=["whole", "range"])
def test_a_cut_response_resumes_from_the_last_byte_received(
        s3_url: str, monkeypatch: pytest.MonkeyPatch, start: int, length: int | None) -> None:
    """A body cut short (reset or truncated by the network) costs one more ranged GET for what
    is missing, never the whole object again (object_store resumes the stream)."""
    from tests.support.forward_proxy import ForwardProxy

    body = bytes(range(256)) * (20 * 1024)  # 5 MiB
    S3Store.from_url(s3_url).put("blobs/sha256/ab/cut", io.BytesIO(body))
    with ForwardProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        store = S3Store.from_url(s3_url)
        proxy.cut_gets, proxy.cut_after = 2, 512 * 1024
        got = store.read("blobs/sha256/ab/cut", start, length)
    end = len(body) if length is None else start + length
    assert got == body[start:end]
    assert len(proxy.ranges) == 3  # the first GET and one resumption per cut
    resumed = [int(r.split("=")[1].split("-")[0]) for r in proxy.ranges[1:]]
    assert resumed == [start + 512 * 1024, start + 1024 * 1024]


@pytest.mark.s3
def test_the_store_check_outlasts_a_few_slowdowns(s3_url: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """check() gets the same attempts as every other call (it once gave up after two)."""
    from tests.support.faulty_proxy import FaultyProxy

    with FaultyProxy() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        for _ in range(3):
            proxy.fault_next("neffcache-check", "slowdown")
        S3Store.from_url(s3_url, create=True).check()
    assert proxy.injected["slowdown"] == 3


@pytest.mark.s3
def test_a_deadline_clips_every_wait_of_a_stalled_call(s3_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that stops answering: with a deadline 1.5 s away the read gives up by then
    (timeouts and retry window clipped), not after the 60 s read timeout."""
    from tests.support.faulty_proxy import FaultyProxy

    S3Store.from_url(s3_url).put("manifests/s.json", io.BytesIO(b"{}"))
    with FaultyProxy(stall_seconds=30) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        deadline = time.monotonic() + 1.5
        store = S3Store.from_url(s3_url, deadline=deadline)
        proxy.stall_all = True
        with pytest.raises(UnavailableError, match="timed out"):
            store.read("manifests/s.json")
        assert time.monotonic() - deadline < 1.0  # the deadline + 1 s
