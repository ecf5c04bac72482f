"""SigV4 for the small S3 client: AWS's published examples, and botocore's signer as the
reference on generated requests (keys with any characters, query parameters, session tokens)."""

from __future__ import annotations

import datetime
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from neffcache.store.s3_sigv4 import canonical_path, canonical_query, derive_key, sign_headers

EXAMPLE_ACCESS = "AKIAIOSFODNN7EXAMPLE"
EXAMPLE_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
EXAMPLE_HOST = "examplebucket.s3.amazonaws.com"


def signature_of(headers: dict[str, str]) -> str:
    return headers["authorization"].rpartition("Signature=")[2]


def test_aws_example_get_object_with_range() -> None:
    """S3 API reference, "Signature Calculations for the Authorization Header", GET Object."""
    key = derive_key(EXAMPLE_ACCESS, EXAMPLE_SECRET, "20130524", "us-east-1")
    headers = sign_headers("GET", EXAMPLE_HOST, "/test.txt", [], {"Range": "bytes=0-9"}, key,
                           "20130524T000000Z")
    assert "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date" in headers["authorization"]
    assert signature_of(headers) == \
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"


def test_aws_example_list_objects() -> None:
    """The same page, GET Bucket (List Objects) with max-keys=2 and prefix=J."""
    key = derive_key(EXAMPLE_ACCESS, EXAMPLE_SECRET, "20130524", "us-east-1")
    headers = sign_headers("GET", EXAMPLE_HOST, "/", [("max-keys", "2"), ("prefix", "J")], {},
                           key, "20130524T000000Z")
    assert signature_of(headers) == \
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"


def test_encoding_keeps_slashes_and_escapes_the_rest() -> None:
    assert canonical_path("/b/a b/c+d/é~") == "/b/a%20b/c%2Bd/%C3%A9~"
    assert canonical_query([("prefix", "a/b c"), ("list-type", "2")]) == \
        "list-type=2&prefix=a%2Fb%20c"


def test_token_is_sent_and_signed() -> None:
    key = derive_key("AKID", "secret", "20260101", "eu-west-1")
    headers = sign_headers("HEAD", "h", "/k", [], {}, key, "20260101T000000Z", "tok")
    assert headers["x-amz-security-token"] == "tok"
    assert "x-amz-security-token" in headers["authorization"].split("SignedHeaders=")[1]


def botocore_authorization(method: str, host: str, path: str, params: list[tuple[str, str]],
                           headers: dict[str, str], access: str, secret: str,
                           token: str | None, region: str, when: datetime.datetime) -> str:
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    query = canonical_query(params)
    url = f"https://{host}{canonical_path(path)}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=dict(headers))
    request.context["payload_signing_enabled"] = True
    with mock.patch("botocore.auth.get_current_datetime", return_value=when):
        S3SigV4Auth(Credentials(access, secret, token), "s3", region).add_auth(request)
    return str(request.headers["Authorization"])


_text = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF,
                              exclude_characters="\x7f"), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(method=st.sampled_from(["GET", "HEAD"]),
       segments=st.lists(_text.filter(lambda s: s not in (".", "..")), min_size=1, max_size=4),
       params=st.lists(st.tuples(st.from_regex(r"[a-z][a-z-]{0,12}", fullmatch=True), _text),
                       max_size=3, unique_by=lambda p: p[0]),
       ranged=st.booleans(), token=st.one_of(st.none(), st.text("abcXYZ012+/=", min_size=4)),
       region=st.sampled_from(["us-east-1", "eu-central-1", "ap-south-2"]),
       secret=st.text("abcdefXYZ0123/+", min_size=8, max_size=40))
def test_matches_botocore_signer(method: str, segments: list[str],
                                 params: list[tuple[str, str]], ranged: bool, token: str | None,
                                 region: str, secret: str) -> None:
    when = datetime.datetime(2026, 11, 30, 15, 4, 5)
    path = "/bucket/" + "/".join(segments)
    headers = {"Range": "bytes=5-99"} if ranged else {}
    ours = sign_headers(method, "s3.example.test:8333", path, params, headers,
                        derive_key("AKIDEXAMPLE", secret, "20261130", region),
                        "20261130T150405Z", token)
    theirs = botocore_authorization(method, "s3.example.test:8333", path, params, headers,
                                    "AKIDEXAMPLE", secret, token, region, when)
    assert ours["authorization"] == theirs
