"""The small S3 read client against a scripted loopback endpoint (a test double, for the
failures a real server cannot be made to produce on demand): retries, give-up messages,
region redirects, clock skew, dropped connections, keep-alive and list paging. Its reads
against real servers (moto, SeaweedFS with signatures checked) are in tests/contract."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator

import pytest

from neffcache.errors import NotFoundError, UnavailableError
from neffcache.store import s3_http
from neffcache.store.s3_http import HttpS3Reader, parse_list_page, resolve_endpoint
from tests.support.s3_reply_double import Reply, S3ReplyDouble, s3_error, s3_reply_double
from tests.support.servers import free_port


class Creds:
    access_key, secret_key, token = "AKIDDOUBLE", "secret-never-shown", None


CREDS = Creds()


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(s3_http.random, "random", lambda: 0.0)


@pytest.fixture
def served() -> Iterator[tuple[str, S3ReplyDouble]]:
    with s3_reply_double() as pair:
        yield pair


def reader(endpoint: str, **options: object) -> HttpS3Reader:
    return HttpS3Reader("bkt", region=None, endpoint_url=endpoint, credentials=lambda: CREDS,
                        **options)  # type: ignore[arg-type]


def read(r: HttpS3Reader, key: str = "p/k", start: int = 0, length: int | None = None) -> bytes:
    with r.get(key, f"s3://bkt/{key}", start, length) as body:
        return body.read()


def test_throttling_is_retried_then_succeeds(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.script = [s3_error("SlowDown", 503), s3_error("InternalError", 500)]
    assert read(reader(endpoint)) == b"default body"
    assert len(double.seen) == 3
    assert double.seen[0].path == "/bkt/p/k"


def test_gives_up_after_max_attempts_with_the_reason(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.default = s3_error("InternalError", 500)
    with pytest.raises(UnavailableError, match=r"s3://bkt/p/k: server error after retries "
                                               r"\(InternalError, HTTP 500, GetObject\)"):
        read(reader(endpoint, max_attempts=3))
    assert len(double.seen) == 3


@pytest.mark.parametrize("code,status,error,words", [
    ("NoSuchKey", 404, NotFoundError, "not found"),
    ("AccessDenied", 403, UnavailableError, "access denied"),
    ("SignatureDoesNotMatch", 403, UnavailableError, "secret key does not match"),
    ("NoSuchBucket", 404, UnavailableError, "bucket does not exist"),
])
def test_client_errors_are_not_retried(served: tuple[str, S3ReplyDouble], code: str,
                                       status: int, error: type[Exception], words: str) -> None:
    endpoint, double = served
    double.default = s3_error(code, status)
    with pytest.raises(error, match=words) as info:
        read(reader(endpoint))
    assert len(double.seen) == 1
    assert "\n" not in str(info.value) and "secret-never-shown" not in str(info.value)


def test_head_of_missing_key_is_not_found(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.default = Reply(404)
    with pytest.raises(NotFoundError):
        reader(endpoint).head("p/k", "s3://bkt/p/k")


def test_bucket_in_another_region_is_followed_once(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.script = [s3_error("AuthorizationHeaderMalformed", 400,
                              **{"x-amz-bucket-region": "eu-west-1"})]
    r = reader(endpoint)
    assert read(r) == b"default body"
    scopes = [s.headers["authorization"].split("Credential=")[1].split(",")[0]
              for s in double.seen]
    assert "/us-east-1/s3/" in scopes[0] and "/eu-west-1/s3/" in scopes[1]
    assert r.region == "eu-west-1"


def test_region_named_only_in_the_error_body_is_followed(
        served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    wrong = s3_error("AuthorizationHeaderMalformed", 400)
    wrong.body = wrong.body.replace(b"</Error>", b"<Region>ap-south-2</Region></Error>")
    double.script = [wrong]
    r = reader(endpoint)
    assert read(r) == b"default body"
    assert r.region == "ap-south-2" and len(double.seen) == 2


def test_clock_skew_is_corrected_from_the_server_date(
        served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    ahead = time.time() + 3 * 3600
    double.script = [s3_error("RequestTimeTooSkewed", 403,
                              Date=email.utils.formatdate(ahead, usegmt=True))]
    assert read(reader(endpoint)) == b"default body"
    sent = [time.mktime(time.strptime(s.headers["x-amz-date"], "%Y%m%dT%H%M%SZ"))
            for s in double.seen]
    assert 3 * 3600 - 120 < sent[1] - sent[0] < 3 * 3600 + 120


def test_dropped_connection_is_retried(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.script = [Reply(drop=True)]
    assert read(reader(endpoint)) == b"default body"
    assert len(double.seen) == 2


def test_body_cut_short_is_unavailable_not_data(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.default = Reply(200, b"x" * 5000, short_by=100)
    with pytest.raises(UnavailableError, match="connection closed"):
        read(reader(endpoint))


def test_connections_are_kept_alive_between_requests(
        served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    r = reader(endpoint)
    for _ in range(3):
        assert read(r) == b"default body"
    r.head("p/k", "s3://bkt/p/k")
    assert len({s.peer for s in double.seen}) == 1


def test_unfinished_body_does_not_return_its_connection(
        served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.default = Reply(200, b"y" * 100_000)
    r = reader(endpoint)
    with r.get("p/k", "s3://bkt/p/k") as body:
        assert body.read(10) == b"y" * 10
    assert read(r) == b"y" * 100_000  # a fresh connection: the old one had bytes pending
    assert len({s.peer for s in double.seen}) == 2


def test_ranges_are_sent_and_past_the_end_is_empty(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    double.script = [Reply(206, b"abc"), s3_error("InvalidRange", 416)]
    r = reader(endpoint)
    assert read(r, start=5, length=3) == b"abc"
    assert read(r, start=10**9) == b""
    assert [s.headers.get("range") for s in double.seen] == ["bytes=5-7", "bytes=1000000000-"]


def test_list_follows_continuation_tokens(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    page = ("<ListBucketResult xmlns='http://s3.amazonaws.com/doc/2006-03-01/'>"
            "<IsTruncated>{t}</IsTruncated>{keys}{next}</ListBucketResult>")
    double.script = [
        Reply(200, page.format(t="true", keys="<Contents><Key>p/a%20b</Key></Contents>",
                               next="<NextContinuationToken>tok/1=</NextContinuationToken>"
                               ).encode()),
        Reply(200, page.format(t="false", keys="<Contents><Key>p/c%2Bd</Key></Contents>",
                               next="").encode())]
    assert list(reader(endpoint).list("p/", "s3://bkt/p")) == ["p/a b", "p/c+d"]
    assert "continuation-token=tok%2F1%3D" in double.seen[1].path
    assert "encoding-type=url" in double.seen[0].path


def test_unreachable_endpoint_names_it_without_credentials() -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(UnavailableError, match=f"cannot reach S3 endpoint {endpoint}") as info:
        read(reader(endpoint, max_attempts=2))
    assert "secret-never-shown" not in str(info.value)


def test_missing_credentials_fail_before_any_request(served: tuple[str, S3ReplyDouble]) -> None:
    endpoint, double = served
    r = HttpS3Reader("bkt", region=None, endpoint_url=endpoint, credentials=lambda: None)
    with pytest.raises(UnavailableError, match="no usable AWS credentials"):
        read(r)
    assert double.seen == []


def test_endpoints_on_aws_and_elsewhere() -> None:
    assert resolve_endpoint("my-bucket", "eu-west-1", None).url == \
        "https://my-bucket.s3.eu-west-1.amazonaws.com"
    dotted = resolve_endpoint("my.bucket", "eu-west-1", None)
    assert (dotted.url, dotted.bucket_path) == ("https://s3.eu-west-1.amazonaws.com",
                                                "/my.bucket")
    assert resolve_endpoint("b", "cn-north-1", None).host.endswith(".amazonaws.com.cn")
    local = resolve_endpoint("bkt", "us-east-1", "http://127.0.0.1:8333/base/")
    assert (local.url, local.bucket_path) == ("http://127.0.0.1:8333", "/base/bkt")


def test_list_page_parse_rejects_non_xml() -> None:
    with pytest.raises(UnavailableError, match="not XML"):
        parse_list_page(b"<html>")
