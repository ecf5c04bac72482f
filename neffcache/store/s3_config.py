"""How an ``s3://`` store is reached, from the environment and the AWS config files alone."""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict
from urllib.parse import urlsplit

from neffcache.config import redact_url
from neffcache.errors import ConfigError, UsageError

ENVIRONMENT = "environment"
WEB_IDENTITY = "web-identity"
PROFILE = "profile"
CONTAINER = "container"
INSTANCE = "instance-metadata"
NONE = "none"
MiB = 1 << 20
PART_SIZE = 8 * MiB  # also the default multipart threshold

# Keys that make a profile a credential source for botocore.
_PROFILE_SOURCE_KEYS = frozenset({
    "aws_access_key_id", "role_arn", "credential_process", "sso_session", "sso_start_url",
    "web_identity_token_file", "credential_source", "source_profile", "login_session"})


@dataclass(frozen=True, slots=True)
class S3Location:
    bucket: str
    prefix: str
    endpoint: str | None  # None: AWS's regional endpoint, chosen by obstore
    region: str | None
    virtual_hosted: bool
    allow_http: bool


@dataclass(frozen=True, slots=True)
class CredentialSource:
    """Which credential source applies. Credentials are resolved by obstore, or by botocore
    (profiles, SSO, web identity: it honours AWS_ENDPOINT_URL_STS), never here."""

    name: str
    profile: str | None = None

    @property
    def needs_botocore(self) -> bool:
        return self.name in (PROFILE, WEB_IDENTITY)


def side_environ(env: Mapping[str, str], side: str, profile: str | None = None) -> (
        dict[str, str]):
    """The environment one store of several reads (``side``: FROM, TO, ``MIRROR_<N>``): ``env``
    with ``NEFFCACHE_<SIDE>_X`` as ``X`` for AWS_*, and as ``NEFFCACHE_X`` for S3_* / BUNDLE_*
    (``S3_ENDPOINT``: ``AWS_ENDPOINT_URL_S3``). A profile of the side's own (``profile`` or
    ``NEFFCACHE_<SIDE>_AWS_PROFILE``) drops the shared environment keys (pure)."""
    out = dict(env)
    head = f"NEFFCACHE_{side}_"
    own = {var[len(head):]: value for var, value in env.items() if var.startswith(head)}
    if profile:
        own["AWS_PROFILE"] = profile
    if own.get("AWS_PROFILE"):
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            out.pop(var, None)
    for rest, value in own.items():
        if rest == "S3_ENDPOINT":
            out["AWS_ENDPOINT_URL_S3"] = value
        elif rest.startswith("AWS_"):
            out[rest] = value
        elif rest.startswith(("S3_", "BUNDLE_")):
            out[f"NEFFCACHE_{rest}"] = value
    return out


def parse_s3_url(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    bucket = parts.netloc
    if parts.scheme != "s3" or not bucket or parts.query or parts.fragment \
            or any(c in bucket for c in "@:"):
        raise ConfigError(f"store {redact_url(url)!r}: expected s3://BUCKET/PREFIX (credentials "
                          "come from the AWS chain, never from the URL)")
    return bucket, parts.path.strip("/")


def configured_endpoint(env: Mapping[str, str]) -> str | None:
    if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
        return None
    return env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None


def locate(bucket: str, prefix: str, endpoint: str | None, env: Mapping[str, str],
           profile: Mapping[str, str]) -> S3Location:
    """Where ``bucket`` is served: an explicit endpoint path-style; AWS virtual-hosted unless
    the name has dots (TLS names), FIPS and dual-stack as AWS_USE_FIPS_ENDPOINT /
    AWS_USE_DUALSTACK_ENDPOINT ask."""
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or profile.get("region") \
        or None
    if endpoint:
        scheme = urlsplit(endpoint).scheme
        if scheme not in ("http", "https"):
            raise ConfigError(f"S3 endpoint {redact(endpoint)!r}: expected http:// or https://")
        return S3Location(bucket, prefix, endpoint.rstrip("/"), region, False, scheme == "http")
    fips = _flag(env, "AWS_USE_FIPS_ENDPOINT")
    dualstack = _flag(env, "AWS_USE_DUALSTACK_ENDPOINT")
    dotted = "." in bucket
    if not (fips or dualstack):
        return S3Location(bucket, prefix, None, region, not dotted, False)
    host = "s3" + ("-fips" if fips else "") + (".dualstack" if dualstack else "")
    where = f"{host}.{region or 'us-east-1'}.amazonaws.com"
    endpoint = f"https://{where}" if dotted else f"https://{bucket}.{where}"
    return S3Location(bucket, prefix, endpoint, region, not dotted, False)


def credential_source(env: Mapping[str, str], profile: Mapping[str, str] | None) -> (
        CredentialSource):
    """Which source botocore's chain would use first (``profile``: None when not in a file)."""
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return CredentialSource(ENVIRONMENT)
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE") and env.get("AWS_ROLE_ARN"):
        return CredentialSource(WEB_IDENTITY)
    name = profile_name(env)
    explicit = bool(env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE"))
    if explicit or (profile is not None and _PROFILE_SOURCE_KEYS & profile.keys()):
        return CredentialSource(PROFILE, name)  # botocore reports a missing profile itself
    if env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") \
            or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return CredentialSource(CONTAINER)
    if _flag(env, "AWS_EC2_METADATA_DISABLED"):
        return CredentialSource(NONE)
    return CredentialSource(INSTANCE)


def profile_name(env: Mapping[str, str]) -> str:
    return env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"


def read_profile(env: Mapping[str, str]) -> dict[str, str] | None:
    """The selected profile's settings from the AWS config and credentials files (the latter
    winning); None when neither has it. Unreadable files count as absent (botocore, which
    resolves such profiles, reports them precisely)."""
    name = profile_name(env)
    home = env.get("HOME") or os.path.expanduser("~")
    config_file = env.get("AWS_CONFIG_FILE") or f"{home}/.aws/config"
    config = _section(config_file, name if name == "default" else f"profile {name}", home)
    if config is None and name == "default":
        config = _section(config_file, "profile default", home)
    credentials = _section(env.get("AWS_SHARED_CREDENTIALS_FILE") or f"{home}/.aws/credentials",
                           name, home)
    if config is None and credentials is None:
        return None
    return {**(config or {}), **(credentials or {})}


def _section(path: str, section: str, home: str) -> dict[str, str] | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path.replace("~", home, 1) if path.startswith("~") else path,
                    encoding="utf-8")
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    if not parser.has_section(section):
        return None
    return {k.lower(): v for k, v in parser.items(section)}


def unsigned_payload(location: S3Location, env: Mapping[str, str]) -> bool:
    """Over HTTPS, as the AWS SDKs do: no sha256 pass over every uploaded byte (~0.4 s of a
    push's 2.6 s CPU). ``AWS_UNSIGNED_PAYLOAD`` (true/false, obstore's own) overrides it."""
    given = env.get("AWS_UNSIGNED_PAYLOAD", "").strip().lower()
    if given in ("true", "false"):
        return given == "true"
    return not location.allow_http


def byte_count(name: str, value: str) -> int:
    """ConfigError (exit 2) naming the setting unless ``value`` is a number."""
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: expected a number of bytes") from None


def redact(endpoint: str) -> str:
    """Without any user:password part (nor query or fragment)."""
    parts = urlsplit(endpoint)
    if not parts.scheme:
        return endpoint
    return parts._replace(netloc=parts.netloc.rpartition("@")[2], query="", fragment="").geturl()


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "true"


# NEFFCACHE_S3_SSE's value (any case) -> the x-amz-server-side-encryption value S3 expects.
SSE_ALGORITHMS = {"aes256": "AES256", "sse-s3": "AES256", "aws:kms": "aws:kms",
                  "sse-kms": "aws:kms", "aws:kms:dsse": "aws:kms:dsse"}
_STORAGE_CLASS_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_")


@dataclass(frozen=True, slots=True)
class PutSettings:
    """What every PutObject and CreateMultipartUpload carries (None: the bucket's default)."""

    sse: str | None = None
    kms_key_id: str | None = None
    storage_class: str | None = None


def put_settings(env: Mapping[str, str]) -> PutSettings:
    """``NEFFCACHE_S3_SSE``, ``NEFFCACHE_S3_SSE_KMS_KEY_ID`` (alone it means aws:kms) and
    ``NEFFCACHE_S3_STORAGE_CLASS``."""
    given = env.get("NEFFCACHE_S3_SSE", "").strip()
    key = env.get("NEFFCACHE_S3_SSE_KMS_KEY_ID", "").strip() or None
    sse = SSE_ALGORITHMS.get(given.lower()) if given else ("aws:kms" if key else None)
    if given and sse is None:
        raise ConfigError(f"NEFFCACHE_S3_SSE={given!r}: expected AES256 (SSE-S3), aws:kms "
                          "(SSE-KMS) or aws:kms:dsse")
    if key and sse == "AES256":
        raise ConfigError("NEFFCACHE_S3_SSE_KMS_KEY_ID goes with NEFFCACHE_S3_SSE=aws:kms, "
                          "not AES256")
    storage = env.get("NEFFCACHE_S3_STORAGE_CLASS", "").strip() or None
    if storage is not None and not set(storage) <= _STORAGE_CLASS_CHARS:
        raise ConfigError(f"NEFFCACHE_S3_STORAGE_CLASS={storage!r}: expected an S3 storage "
                          "class such as STANDARD_IA or INTELLIGENT_TIERING")
    return PutSettings(sse, key, storage)


_KEY_VARIABLES = (("access_key_id", "AWS_ACCESS_KEY_ID"),
                  ("secret_access_key", "AWS_SECRET_ACCESS_KEY"),
                  ("session_token", "AWS_SESSION_TOKEN"))
_SIZE_VARIABLES = (("multipart_threshold", "NEFFCACHE_S3_MULTIPART_THRESHOLD"),
                   ("part_size", "NEFFCACHE_S3_PART_SIZE"))


class S3Tuning(TypedDict, total=False):
    endpoint_url: str | None
    max_attempts: int
    multipart_threshold: int
    part_size: int


@dataclass(frozen=True, slots=True)
class S3Settings:
    location: S3Location
    puts: PutSettings
    unsigned: bool  # request bodies go unsigned (``unsigned_payload``)
    credentials: CredentialSource
    keys: tuple[tuple[str, str], ...]  # the store's own environment keys, by obstore's names
    max_attempts: int
    multipart_threshold: int
    part_size: int

    @property
    def url(self) -> str:
        loc = self.location
        return f"s3://{loc.bucket}/{loc.prefix}" if loc.prefix else f"s3://{loc.bucket}"

    @property
    def endpoint(self) -> str:
        return redact(self.location.endpoint or "https://s3.amazonaws.com")


def load_s3_settings(bucket: str, prefix: str, env: Mapping[str, str],
                     tuning: S3Tuning) -> S3Settings:
    """``tuning`` over ``env``; region and credential source as the AWS chain finds them."""
    sizes = {name: byte_count(var, env[var]) for name, var in _SIZE_VARIABLES if env.get(var)}
    threshold = tuning.get("multipart_threshold", sizes.get("multipart_threshold", PART_SIZE))
    part_size = tuning.get("part_size", sizes.get("part_size", PART_SIZE))
    if part_size < 5 * MiB or threshold < part_size:
        raise UsageError("S3 store: part_size must be >= 5 MiB and <= multipart_threshold")
    profile = read_profile(env)
    endpoint = tuning["endpoint_url"] if "endpoint_url" in tuning else configured_endpoint(env)
    location = locate(bucket, prefix.strip("/"), endpoint, env, profile or {})
    return S3Settings(location, put_settings(env), unsigned_payload(location, env),
                      credential_source(env, profile),
                      tuple((name, env[var]) for name, var in _KEY_VARIABLES if env.get(var)),
                      tuning.get("max_attempts", 5), threshold, part_size)


def s3_settings(env: Mapping[str, str]) -> tuple[tuple[str, str | None, str], ...]:
    """(name, value, its variable or "default") rows for ``neffcache config``, no credential."""
    def first(*names: str) -> tuple[str | None, str]:
        found = next((n for n in names if env.get(n)), None)
        return (env[found], found) if found else (None, "default")

    endpoint, endpoint_from = first("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
    if env.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").lower() == "true":
        endpoint, endpoint_from = None, "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"
    source = credential_source(env, read_profile(env))
    puts = put_settings(env)
    return (("s3.endpoint", redact(endpoint) if endpoint else None, endpoint_from),
            ("s3.region", *first("AWS_REGION", "AWS_DEFAULT_REGION")),
            ("s3.credentials", source.name + (f" (profile {source.profile})"
                                              if source.profile else ""),
             "AWS credential chain"),
            ("s3.sse", puts.sse, "NEFFCACHE_S3_SSE" if env.get("NEFFCACHE_S3_SSE") else
             "NEFFCACHE_S3_SSE_KMS_KEY_ID" if puts.sse else "default"),
            ("s3.sse_kms_key_id", puts.kms_key_id, *first("NEFFCACHE_S3_SSE_KMS_KEY_ID")[1:]),
            ("s3.storage_class", puts.storage_class, *first("NEFFCACHE_S3_STORAGE_CLASS")[1:]),
            ("s3.multipart_threshold", *first("NEFFCACHE_S3_MULTIPART_THRESHOLD")),
            ("s3.part_size", *first("NEFFCACHE_S3_PART_SIZE")))
