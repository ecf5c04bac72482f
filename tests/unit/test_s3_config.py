"""Pure decisions about reaching S3: URL parsing, endpoint and addressing, credential source,
and the translation of client failures into domain errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from obstore.exceptions import GenericError, PermissionDeniedError, UnauthenticatedError

from neffcache.errors import ConfigError, NotFoundError, UnavailableError
from neffcache.store.s3_config import (
    CONTAINER,
    ENVIRONMENT,
    INSTANCE,
    NONE,
    PROFILE,
    WEB_IDENTITY,
    configured_endpoint,
    credential_source,
    locate,
    parse_s3_url,
    put_settings,
    read_profile,
    redact,
    unsigned_payload,
)
from neffcache.store.s3_errors import response_code, translate


@pytest.mark.parametrize("url,expected", [("s3://b/a/b/", ("b", "a/b")), ("s3://b", ("b", ""))])
def test_parse_s3_url(url: str, expected: tuple[str, str]) -> None:
    assert parse_s3_url(url) == expected


@pytest.mark.parametrize("url", ["s3://", "gs://b/p", "s3://u:p@b/p", "s3://b/p?x=1"])
def test_parse_s3_url_refuses(url: str) -> None:
    with pytest.raises(ConfigError, match="s3://BUCKET/PREFIX"):
        parse_s3_url(url)


def test_endpoint_variables() -> None:
    both = {"AWS_ENDPOINT_URL": "http://a", "AWS_ENDPOINT_URL_S3": "http://b"}
    assert configured_endpoint(both) == "http://b"
    assert configured_endpoint({"AWS_ENDPOINT_URL": "http://a"}) == "http://a"
    assert configured_endpoint({"AWS_ENDPOINT_URL": "http://a",
                                "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "true"}) is None


def test_explicit_endpoints_are_path_style_ipv6_included() -> None:
    loc = locate("bkt", "p", "http://[::1]:9000/", {}, {})
    assert (loc.endpoint, loc.virtual_hosted, loc.allow_http) == ("http://[::1]:9000", False, True)
    assert locate("bkt", "p", "https://minio:9000", {}, {}).allow_http is False
    with pytest.raises(ConfigError, match="expected http:// or https://"):
        locate("bkt", "p", "ftp://user:secret@host", {}, {})


def test_region_order_and_aws_addressing() -> None:
    env = {"AWS_DEFAULT_REGION": "eu-west-1"}
    assert locate("bkt", "", None, env, {"region": "us-west-2"}).region == "eu-west-1"
    assert locate("bkt", "", None, dict(env, AWS_REGION="ap-south-1"), {}).region == "ap-south-1"
    assert locate("bkt", "", None, {}, {"region": "us-west-2"}).region == "us-west-2"
    aws = locate("bkt", "", None, {}, {})
    assert (aws.endpoint, aws.virtual_hosted) == (None, True)
    assert locate("my.bkt", "", None, {}, {}).virtual_hosted is False  # TLS names: no dots


@pytest.mark.parametrize("flags,endpoint", [
    ({"AWS_USE_FIPS_ENDPOINT": "true"}, "https://bkt.s3-fips.eu-west-1.amazonaws.com"),
    ({"AWS_USE_DUALSTACK_ENDPOINT": "true"}, "https://bkt.s3.dualstack.eu-west-1.amazonaws.com"),
    ({"AWS_USE_FIPS_ENDPOINT": "true", "AWS_USE_DUALSTACK_ENDPOINT": "TRUE"},
     "https://bkt.s3-fips.dualstack.eu-west-1.amazonaws.com"),
])
def test_fips_and_dualstack_endpoints(flags: dict[str, str], endpoint: str) -> None:
    loc = locate("bkt", "", None, dict(flags, AWS_REGION="eu-west-1"), {})
    assert (loc.endpoint, loc.virtual_hosted) == (endpoint, True)


@pytest.mark.parametrize("env,profile,source", [
    ({"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b", "AWS_PROFILE": "x"}, None,
     ENVIRONMENT),
    ({"AWS_ACCESS_KEY_ID": "a"}, None, INSTANCE),  # a lone key id is no credential
    ({"AWS_WEB_IDENTITY_TOKEN_FILE": "/t", "AWS_ROLE_ARN": "arn"}, None, WEB_IDENTITY),
    ({"AWS_PROFILE": "ci"}, None, PROFILE),  # botocore reports the missing profile
    ({}, {"aws_access_key_id": "a"}, PROFILE),
    ({}, {"sso_session": "corp"}, PROFILE),
    ({}, {"credential_process": "/bin/creds"}, PROFILE),
    ({}, {"region": "eu-west-1"}, INSTANCE),  # a profile with only settings
    ({"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "/v2/x"}, None, CONTAINER),
    ({"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://127.0.0.1/x"}, {"region": "x"}, CONTAINER),
    ({"AWS_EC2_METADATA_DISABLED": "true"}, None, NONE),
    ({}, None, INSTANCE),
])
def test_credential_source_follows_botocores_order(env: dict[str, str],
                                                   profile: dict[str, str] | None,
                                                   source: str) -> None:
    found = credential_source(env, profile)
    assert found.name == source
    assert found.needs_botocore == (source in (PROFILE, WEB_IDENTITY))


def test_read_profile_merges_files_credentials_winning(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("[profile ci]\nregion = eu-west-1\nrole_arn = arn:r\n"
                      "[default]\nregion = us-east-1\n", encoding="utf-8")
    creds = tmp_path / "credentials"
    creds.write_text("[ci]\nregion = ap-south-1\naws_access_key_id = A\n", encoding="utf-8")
    env = {"AWS_CONFIG_FILE": str(config), "AWS_SHARED_CREDENTIALS_FILE": str(creds),
           "AWS_PROFILE": "ci"}
    assert read_profile(env) == {"region": "ap-south-1", "role_arn": "arn:r",
                                 "aws_access_key_id": "A"}
    assert read_profile(dict(env, AWS_PROFILE="default")) == {"region": "us-east-1"}
    assert read_profile(dict(env, AWS_PROFILE="other")) is None
    config.write_text("not an ini file [", encoding="utf-8")
    creds.unlink()
    assert read_profile(env) is None  # botocore, not this, reports malformed files


# -- translation of client failures -------------------------------------------------------------

def _status(status: int, code: str = "") -> str:
    body = f"<Error><Code>{code}</Code><Message>secret-ish</Message></Error>" if code else ""
    return (f"Error performing GET http://127.0.0.1:9000/bkt/p/k in 1ms - Server returned "
            f"non-2xx status code: {status} Forbidden: {body}")


def _translate(exc: BaseException, key: str | None = "k", source: str = ENVIRONMENT) -> Exception:
    return translate(exc, where="s3://bkt/p/k", endpoint="http://127.0.0.1:9000",
                     op="GetObject", key=key, source=source)


def test_response_code_reads_status_and_code() -> None:
    assert response_code(Exception(_status(403, "AccessDenied"))) == ("AccessDenied", "403")
    assert response_code(Exception(_status(503))) == ("503", "503")
    assert response_code(Exception("error sending request")) == ("", "?")


@pytest.mark.parametrize("exc,kind,words", [
    (FileNotFoundError(_status(404, "NoSuchKey")), NotFoundError, "not found"),
    (FileNotFoundError(_status(404, "NoSuchBucket")), UnavailableError, "bucket does not exist"),
    (PermissionDeniedError(_status(403, "SignatureDoesNotMatch")), UnavailableError,
     "secret key does not match"),
    (GenericError(_status(503, "SlowDown")), UnavailableError, "throttled"),
    (GenericError(_status(301, "PermanentRedirect")), ConfigError, "another region"),
    (GenericError(_status(400, "AuthorizationHeaderMalformed")), ConfigError, "another region"),
    (GenericError("Error performing GET http://127.0.0.1:9000/bkt/k in 1ms - HTTP error: error "
                  "sending request"), UnavailableError, "cannot reach S3 endpoint"),
    (GenericError("Error performing PUT http://169.254.169.254/latest/api/token in 1ms - HTTP "
                  "error: error sending request"), UnavailableError,
     "cannot get credentials from the instance-metadata source"),
    (UnauthenticatedError("External AWS credential provider: RuntimeError: x"),
     UnavailableError, "credential source failed"),
])
def test_translate(exc: BaseException, kind: type[Exception], words: str) -> None:
    source = INSTANCE if "169.254" in str(exc) else ENVIRONMENT
    err = _translate(exc, source=source)
    assert type(err) is kind and words in str(err)
    assert "\n" not in str(err) and "secret-ish" not in str(err)


def test_missing_object_without_a_key_is_unavailable() -> None:
    assert isinstance(_translate(FileNotFoundError(_status(404, "NoSuchKey")), key=None),
                      UnavailableError)


def test_redact_drops_user_info_and_brackets_ipv6() -> None:
    assert redact("http://user:pw@[::1]:9000/x") == "http://[::1]:9000/x"
    assert redact("https://h.example") == "https://h.example"


def _boto_errors() -> list[tuple[BaseException, type[Exception], str, str | None]]:
    from botocore.exceptions import (  # type: ignore[import-untyped]
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        ReadTimeoutError,
    )

    def client(code: str, status: int) -> ClientError:
        return ClientError({"Error": {"Code": code, "Message": "secret-ish body"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}, "X")

    return [
        (client("AccessDenied", 403), UnavailableError, "access denied (AccessDenied, HTTP 403, "
         "ListMultipartUploads)", "s3:ListBucketMultipartUploads"),
        (client("SlowDown", 503), UnavailableError, "throttled", None),
        (client("PermanentRedirect", 301), ConfigError, "another region", "AWS_REGION"),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9000"), UnavailableError,
         "cannot reach S3 endpoint http://127.0.0.1:9000 (connection failed", None),
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:9000"), UnavailableError,
         "(timed out, ListMultipartUploads)", None),
        (NoCredentialsError(), UnavailableError, "no usable AWS credentials", None),
    ]


@pytest.mark.parametrize("case", range(6))
def test_botocore_failures_are_translated_without_bodies(case: int) -> None:
    from neffcache.store.s3_config import CredentialSource
    from neffcache.store.s3_errors import botocore_failure

    exc, kind, words, hint = _boto_errors()[case]
    err = botocore_failure(exc, where="s3://bkt/p", endpoint="http://127.0.0.1:9000",
                           op="ListMultipartUploads", source=CredentialSource(ENVIRONMENT),
                           denied_hint="gc needs s3:ListBucketMultipartUploads")
    assert type(err) is kind and words in str(err), str(err)
    assert "secret-ish" not in str(err) and "\n" not in str(err)
    if hint is not None:
        assert hint in (getattr(err, "hint", None) or "")


@pytest.mark.parametrize(("endpoint", "env", "unsigned"), [
    (None, {}, True),  # AWS itself: https
    ("https://minio.internal:9000", {}, True),
    ("http://127.0.0.1:9000", {}, False),  # no TLS: the body stays signed
    ("https://minio.internal:9000", {"AWS_UNSIGNED_PAYLOAD": "false"}, False),
    ("http://127.0.0.1:9000", {"AWS_UNSIGNED_PAYLOAD": " TRUE "}, True),
    ("http://127.0.0.1:9000", {"AWS_UNSIGNED_PAYLOAD": "maybe"}, False),
])
def test_bodies_go_unsigned_only_where_tls_protects_them(
        endpoint: str | None, env: dict[str, str], unsigned: bool) -> None:
    assert unsigned_payload(locate("b", "", endpoint, env, {}), env) is unsigned


def test_the_client_is_built_with_the_signing_chosen() -> None:
    from neffcache.store.s3 import S3Store

    env = {"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s", "AWS_REGION": "us-east-1"}
    tls = S3Store("b", endpoint_url="https://s3.example.invalid", environ=env)
    plain = S3Store("b", endpoint_url="http://127.0.0.1:1", environ=env)
    assert tls._client.config.get("unsigned_payload") in (True, "true")
    assert "unsigned_payload" not in plain._client.config


@pytest.mark.parametrize("env,expected", [
    ({}, (None, None, None)),
    ({"NEFFCACHE_S3_SSE": "aes256"}, ("AES256", None, None)),
    ({"NEFFCACHE_S3_SSE": "sse-kms", "NEFFCACHE_S3_SSE_KMS_KEY_ID": "k"}, ("aws:kms", "k", None)),
    ({"NEFFCACHE_S3_SSE_KMS_KEY_ID": "k"}, ("aws:kms", "k", None)),
    ({"NEFFCACHE_S3_STORAGE_CLASS": "STANDARD_IA"}, (None, None, "STANDARD_IA")),
])
def test_put_settings(env: dict[str, str], expected: tuple[str | None, ...]) -> None:
    s = put_settings(env)
    assert (s.sse, s.kms_key_id, s.storage_class) == expected


@pytest.mark.parametrize("env,needle", [
    ({"NEFFCACHE_S3_SSE": "rot13"}, "NEFFCACHE_S3_SSE='rot13': expected AES256"),
    ({"NEFFCACHE_S3_SSE": "AES256", "NEFFCACHE_S3_SSE_KMS_KEY_ID": "k"}, "not AES256"),
    ({"NEFFCACHE_S3_STORAGE_CLASS": "cheap please"}, "expected an S3 storage class"),
])
def test_put_settings_refuse(env: dict[str, str], needle: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(needle)):
        put_settings(env)
