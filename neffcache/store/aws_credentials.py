"""AWS credentials and region for the botocore-free S3 client, resolved in botocore's default
chain order for the common sources; any other source raises NeedsBotocore. Stdlib only.

Chain (botocore's ``create_credential_resolver``; a profile named by AWS_DEFAULT_PROFILE or
AWS_PROFILE must exist in one of the two files, checked first, like botocore's ProfileNotFound):

    environment                 AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ token, expiration)
    assume role                 profile role_arn / source_profile / credential_source  -> botocore
    web identity                AWS_WEB_IDENTITY_TOKEN_FILE or profile's               -> botocore
    SSO                         profile sso_*                                           -> botocore
    shared credentials file     [NAME] in AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials)
    login, process              profile login_session / credential_process             -> botocore
    config file                 [profile NAME] or [default] in AWS_CONFIG_FILE (~/.aws/config)
    boto2 / EC2 CLI files       AWS_CREDENTIAL_FILE, BOTO_CONFIG, /etc/boto.cfg, ~/.boto -> botocore
    container                   AWS_CONTAINER_CREDENTIALS_RELATIVE_URI / _FULL_URI
    instance metadata           IMDSv2, IMDSv1 fallback as botocore does

Secrets never appear in exception messages or reprs. The network and file parsers are imported
only when a source needs them, so importing this module stays cheap on the boot path.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from neffcache.errors import ConfigError, UnavailableError

# Temporary credentials are refreshed this long before they expire. botocore refreshes 15 min
# ahead (advisory) and insists at 10; IMDS and the ECS/EKS agents publish new credentials "at
# least 5 minutes" before the old ones expire, so refreshing earlier often returns the same ones.
REFRESH_WINDOW = 5 * 60.0
# A refresh that yields nothing newer (still inside the window, or a failed fetch while the old
# credentials are valid) is not retried sooner than this, so get() never hammers a metadata service.
RETRY_INTERVAL = 30.0

CONTAINER_ENDPOINT = "http://169.254.170.2"
CONTAINER_ATTEMPTS = 3  # botocore's ContainerMetadataFetcher: 3 attempts, 1 s apart
CONTAINER_RETRY_DELAY = 1.0
_CONTAINER_HTTP_HOSTS = frozenset({"169.254.170.2", "169.254.170.23", "fd00:ec2::23", "localhost"})

IMDS_ENDPOINT = "http://169.254.169.254/"
IMDS_ENDPOINT_IPV6 = "http://[fd00:ec2::254]/"
_IMDS_ROLE_PATH = "latest/meta-data/iam/security-credentials/"
_IMDS_FIELDS = ("AccessKeyId", "SecretAccessKey", "Token", "Expiration")

BOTO_SYSTEM_CONFIG = "/etc/boto.cfg"

_ROLE_KEYS = ("role_arn", "source_profile", "credential_source")
_SSO_KEYS = ("sso_session", "sso_start_url", "sso_region", "sso_role_name", "sso_account_id")
_PROCESS_KEYS = ("login_session", "credential_process")


@dataclass(frozen=True, slots=True)
class Credentials:
    """One set of AWS credentials. ``source`` is the chain step that produced them: environment,
    shared-credentials-file, config-file, container or instance-metadata."""

    access_key: str
    secret_key: str = field(repr=False)
    token: str | None = field(default=None, repr=False)
    expires: float | None = None  # epoch seconds, None = static
    source: str = ""


class NeedsBotocore(Exception):
    """The environment asks for a credential source this module does not implement."""


# -- the chain ---------------------------------------------------------------------------------


def resolve_credentials(env: Mapping[str, str], *, home: str | None = None,
                        timeout: float = 1.0) -> Credentials | None:
    """The first credentials botocore's default chain would find in ``env`` and the AWS files
    (``home`` stands in for ``~``); None when no source yields any. ``timeout`` bounds each
    metadata request unless AWS_METADATA_SERVICE_TIMEOUT or the profile sets one for IMDS.

    Raises ConfigError for what botocore rejects (unknown named profile, partial keys, bad
    files or URLs), NeedsBotocore for sources not implemented here, UnavailableError when the
    container credentials endpoint fails (botocore does not fall through to IMDS then either)."""
    profile = _load_profile(env, home)
    if profile.chosen_by is not None and not profile.exists:
        raise ConfigError(
            f"AWS profile {profile.name!r} (from {profile.chosen_by}) not found in "
            f"{profile.config_path} or {profile.credentials_path}")
    found = _from_environment(env)
    if found is not None:
        return found
    _refuse_roles_and_sso(env, profile)
    found = _static_keys(profile.in_credentials, profile.credentials_path,
                         "shared-credentials-file")
    if found is not None:
        return found
    _refuse_keys(profile, _PROCESS_KEYS)
    found = _static_keys(profile.in_config, profile.config_path, "config-file")
    if found is not None:
        return found
    _refuse_legacy_files(env, home)
    found = _from_container(env, timeout)
    if found is not None:
        return found
    return _from_instance_metadata(env, profile, timeout)


def resolve_region(env: Mapping[str, str], *, home: str | None = None) -> str | None:
    """AWS_REGION, then AWS_DEFAULT_REGION, then ``region`` of the active profile; else None."""
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        if env.get(var):
            return env[var]
    return _load_profile(env, home).merged.get("region") or None


class CredentialProvider:
    """Thread-safe: resolves once, caches, and refreshes when temporary credentials are within
    REFRESH_WINDOW of ``expires``. One thread resolves at a time; callers arriving meanwhile wait
    for it (bounded by the metadata timeouts) and share its result. A failed refresh keeps
    credentials that have not expired yet. ``clock`` (epoch seconds) is injectable for tests."""

    def __init__(self, env: Mapping[str, str], *, home: str | None = None, timeout: float = 1.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._env = env
        self._home = home
        self._timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        # (credentials, refresh at); one tuple so readers without the lock never see a mix.
        self._state: tuple[Credentials | None, float] | None = None

    def get(self) -> Credentials | None:
        state = self._state
        if state is not None and self._clock() < state[1]:
            return state[0]
        with self._lock:
            state = self._state
            now = self._clock()
            if state is not None and now < state[1]:
                return state[0]  # another thread refreshed while this one waited
            previous = None if state is None else state[0]
            self._state = self._refresh(previous, now)
            return self._state[0]

    def _refresh(self, previous: Credentials | None,
                 now: float) -> tuple[Credentials | None, float]:
        try:
            fresh = resolve_credentials(self._env, home=self._home, timeout=self._timeout)
        except (ConfigError, UnavailableError, NeedsBotocore):
            if not _still_valid(previous, now):
                raise
            fresh = None
        if fresh is None:
            return (previous if _still_valid(previous, now) else None), now + RETRY_INTERVAL
        if fresh.expires is None:
            return fresh, float("inf")
        return fresh, max(fresh.expires - REFRESH_WINDOW, now + RETRY_INTERVAL)


def _still_valid(creds: Credentials | None, now: float) -> bool:
    return creds is not None and (creds.expires is None or now < creds.expires)


# -- environment and files ---------------------------------------------------------------------


def _from_environment(env: Mapping[str, str]) -> Credentials | None:
    access = env.get("AWS_ACCESS_KEY_ID", "")
    if not access:
        return None  # botocore ignores a lone AWS_SECRET_ACCESS_KEY too
    secret = env.get("AWS_SECRET_ACCESS_KEY", "")
    if not secret:
        raise ConfigError("partial AWS credentials in the environment: AWS_ACCESS_KEY_ID is set "
                          "but AWS_SECRET_ACCESS_KEY is not")
    # botocore's order: the legacy AWS_SECURITY_TOKEN first, then AWS_SESSION_TOKEN.
    token = env.get("AWS_SECURITY_TOKEN") or env.get("AWS_SESSION_TOKEN") or None
    expiration = env.get("AWS_CREDENTIAL_EXPIRATION", "")
    expires = None
    if expiration:
        try:
            expires = _parse_time(expiration)
        except ValueError:
            raise ConfigError("AWS_CREDENTIAL_EXPIRATION is not an ISO 8601 time") from None
    return Credentials(access, secret, token, expires, "environment")


def _static_keys(section: Mapping[str, str] | None, path: str, source: str) -> Credentials | None:
    if section is None or "aws_access_key_id" not in section:
        return None
    if "aws_secret_access_key" not in section:
        raise ConfigError(f"partial AWS credentials in {path}: the profile has "
                          "aws_access_key_id but no aws_secret_access_key")
    token = section.get("aws_security_token", section.get("aws_session_token")) or None
    return Credentials(section["aws_access_key_id"], section["aws_secret_access_key"], token,
                       None, source)


@dataclass(frozen=True, slots=True)
class _Profile:
    name: str
    chosen_by: str | None  # the variable that named it; None: the implicit "default"
    config_path: str
    credentials_path: str
    in_config: Mapping[str, str] | None  # its section in each file; None: absent there
    in_credentials: Mapping[str, str] | None

    @property
    def exists(self) -> bool:
        return self.in_config is not None or self.in_credentials is not None

    @property
    def merged(self) -> dict[str, str]:
        """botocore's view of the profile: config file keys overlaid by the credentials file."""
        return {**(self.in_config or {}), **(self.in_credentials or {})}


def _load_profile(env: Mapping[str, str], home: str | None) -> _Profile:
    name, chosen_by = "default", None
    for var in ("AWS_DEFAULT_PROFILE", "AWS_PROFILE"):  # botocore reads them in this order
        if env.get(var):
            name, chosen_by = env[var], var
            break
    config_path = _expand(env.get("AWS_CONFIG_FILE", "~/.aws/config"), env, home)
    credentials_path = _expand(
        env.get("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), env, home)
    config_profiles = _config_profiles(_read_ini(config_path) or {})
    credential_sections = _read_ini(credentials_path) or {}
    return _Profile(name, chosen_by, config_path, credentials_path,
                    config_profiles.get(name), credential_sections.get(name))


def _config_profiles(sections: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """botocore's ``build_profile_map``: ``[profile NAME]`` sections and ``[default]``."""
    import shlex

    profiles: dict[str, dict[str, str]] = {}
    for key, values in sections.items():
        if key.startswith("profile"):
            try:
                parts = shlex.split(key)
            except ValueError:
                continue
            if len(parts) == 2:
                profiles[parts[1]] = values
        elif key == "default":
            profiles[key] = values
    return profiles


def _read_ini(path: str) -> dict[str, dict[str, str]] | None:
    """Sections of an INI file parsed as botocore does (RawConfigParser); None if absent."""
    if not path or not os.path.isfile(path):
        return None
    import configparser

    parser = configparser.RawConfigParser()
    try:
        parser.read([path])
    except (configparser.Error, UnicodeDecodeError) as exc:
        # configparser's own messages quote the offending line, which may hold a secret.
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise ConfigError(f"cannot parse {path}: {type(exc).__name__}{where}") from None
    return {s: {o: parser.get(s, o) for o in parser.options(s)} for s in parser.sections()}


def _expand(path: str, env: Mapping[str, str], home: str | None) -> str:
    """expandvars (from ``env``) then expanduser (``home`` stands in for ``~``), like botocore."""
    if "$" in path:
        import re

        path = re.sub(r"\$(\w+)|\$\{(\w+)\}",
                      lambda m: env.get(m.group(1) or m.group(2), m.group(0)), path)
    if home is not None and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return os.path.expanduser(path)


def _refuse_roles_and_sso(env: Mapping[str, str], profile: _Profile) -> None:
    _refuse_keys(profile, _ROLE_KEYS)
    token_file = (env["AWS_WEB_IDENTITY_TOKEN_FILE"] if "AWS_WEB_IDENTITY_TOKEN_FILE" in env
                  else profile.merged.get("web_identity_token_file"))
    if token_file:
        raise NeedsBotocore("web identity credentials (AWS_WEB_IDENTITY_TOKEN_FILE or the "
                            "profile's web_identity_token_file)")
    _refuse_keys(profile, _SSO_KEYS)


def _refuse_keys(profile: _Profile, keys: tuple[str, ...]) -> None:
    merged = profile.merged
    for key in keys:
        if key in merged:
            raise NeedsBotocore(f"AWS profile {profile.name!r} uses {key}")


def _refuse_legacy_files(env: Mapping[str, str], home: str | None) -> None:
    if "AWS_CREDENTIAL_FILE" in env:
        raise NeedsBotocore("AWS_CREDENTIAL_FILE (EC2 CLI credentials file) is set")
    paths = ([env["BOTO_CONFIG"]] if "BOTO_CONFIG" in env
             else [BOTO_SYSTEM_CONFIG, "~/.boto"])
    for path in paths:
        full = _expand(path, env, home)
        try:
            sections = _read_ini(full) or {}
        except ConfigError:
            raise NeedsBotocore(f"boto config {full} is not parseable here") from None
        if "aws_access_key_id" in sections.get("Credentials", {}):
            raise NeedsBotocore(f"boto config {full} holds credentials")


# -- container and instance metadata -----------------------------------------------------------


def _from_container(env: Mapping[str, str], timeout: float) -> Credentials | None:
    relative = env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    if relative is not None:
        url = CONTAINER_ENDPOINT + relative
    elif "AWS_CONTAINER_CREDENTIALS_FULL_URI" in env:
        url = env["AWS_CONTAINER_CREDENTIALS_FULL_URI"]
        _check_container_url(url)
    else:
        return None
    headers = {"Accept": "application/json"}
    authorization = _container_authorization(env)
    if authorization is not None:
        headers["Authorization"] = authorization
    doc = _fetch_container_json(url, headers, timeout)
    creds = _credentials_from_json(doc, "container")
    if creds is None:
        raise UnavailableError("container credentials endpoint: the response lacks "
                               + "/".join(_IMDS_FIELDS) + " or has a bad Expiration")
    return creds


def _check_container_url(url: str) -> None:
    """botocore's rule: https anywhere; http only to a loopback address or the ECS/EKS hosts."""
    import ipaddress
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme == "https":
        return
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "http" or not (loopback or host in _CONTAINER_HTTP_HOSTS):
        raise ConfigError(
            f"AWS_CONTAINER_CREDENTIALS_FULL_URI: host {host!r} is not allowed over "
            f"{parts.scheme or 'a missing scheme'}; use https, a loopback address or one of "
            + ", ".join(sorted(_CONTAINER_HTTP_HOSTS)))


def _container_authorization(env: Mapping[str, str]) -> str | None:
    token: str | None = None
    if "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE" in env:
        path = env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"]
        try:
            with open(path, encoding="utf-8") as f:
                token = f.read()  # re-read each time: the agent rotates it
        except OSError as exc:
            raise ConfigError(f"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE {path}: "
                              f"{exc.strerror or type(exc).__name__}") from None
    elif "AWS_CONTAINER_AUTHORIZATION_TOKEN" in env:
        token = env["AWS_CONTAINER_AUTHORIZATION_TOKEN"]
    if token is not None and ("\r" in token or "\n" in token):
        raise ConfigError("the container authorization token contains a line break "
                          "(not a legal header value)")
    return token


def _fetch_container_json(url: str, headers: dict[str, str], timeout: float) -> object:
    import json

    problem = ""
    for attempt in range(CONTAINER_ATTEMPTS):
        if attempt:
            time.sleep(CONTAINER_RETRY_DELAY)
        try:
            status, body = _http("GET", url, headers, timeout)
        except _NetworkError as exc:
            problem = str(exc)
            continue
        if status != 200:
            problem = f"HTTP {status}"
            continue
        try:
            return json.loads(body)
        except ValueError:
            problem = "the response is not JSON"
    raise UnavailableError(f"container credentials endpoint: {problem} "
                           f"({CONTAINER_ATTEMPTS} attempts)")


@dataclass(frozen=True, slots=True)
class _ImdsSettings:
    base_url: str
    timeout: float
    attempts: int
    v1_disabled: bool


def _from_instance_metadata(env: Mapping[str, str], profile: _Profile,
                            timeout: float) -> Credentials | None:
    """IMDSv2, falling back to IMDSv1 as botocore does; any network failure yields None."""
    if env.get("AWS_EC2_METADATA_DISABLED", "false").lower() == "true":
        return None
    imds = _imds_settings(env, profile.merged, timeout)
    token, reachable = _imds_token(imds)
    if token is None and (not reachable or imds.v1_disabled):
        return None
    headers = {} if token is None else {"x-aws-ec2-metadata-token": token}
    role = _imds_get(imds, _IMDS_ROLE_PATH, headers)
    role = role.splitlines()[0].strip() if role and role.strip() else None
    if not role:
        return None
    import json

    body = _imds_get(imds, _IMDS_ROLE_PATH + role, headers)
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return None
    return _credentials_from_json(doc, "instance-metadata")


def _imds_settings(env: Mapping[str, str], profile: Mapping[str, str],
                   timeout: float) -> _ImdsSettings:
    def setting(var: str, key: str) -> str | None:  # botocore: the variable, then the profile
        return env[var] if var in env else profile.get(key)

    mode = setting("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE", "ec2_metadata_service_endpoint_mode")
    if mode is not None and mode.lower() not in ("ipv4", "ipv6"):
        raise ConfigError(f"ec2_metadata_service_endpoint_mode {mode!r}: expected ipv4 or ipv6")
    ipv6 = (mode.lower() == "ipv6" if mode is not None
            else (setting("AWS_IMDS_USE_IPV6", "imds_use_ipv6") or "").lower() == "true")
    base_url = (setting("AWS_EC2_METADATA_SERVICE_ENDPOINT", "ec2_metadata_service_endpoint")
                or (IMDS_ENDPOINT_IPV6 if ipv6 else IMDS_ENDPOINT))
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"EC2 metadata endpoint {base_url!r}: expected an http(s) URL")
    configured_timeout = setting("AWS_METADATA_SERVICE_TIMEOUT", "metadata_service_timeout")
    attempts = setting("AWS_METADATA_SERVICE_NUM_ATTEMPTS", "metadata_service_num_attempts")
    v1_disabled = setting("AWS_EC2_METADATA_V1_DISABLED", "ec2_metadata_v1_disabled") or ""
    try:
        return _ImdsSettings(
            base_url if base_url.endswith("/") else base_url + "/",
            float(configured_timeout) if configured_timeout else timeout,
            max(1, int(attempts)) if attempts else 1,
            v1_disabled.lower() == "true")
    except ValueError:
        raise ConfigError("metadata_service_timeout / metadata_service_num_attempts: "
                          "expected numbers") from None


def _imds_token(imds: _ImdsSettings) -> tuple[str | None, bool]:
    """(token, endpoint reachable). Like botocore: 403/404/405, a timeout or another status
    mean "no token, IMDSv1 may work"; 400 means give up. Unlike botocore, a connection that
    cannot even be opened skips the v1 attempt, which would fail the same way a second time."""
    headers = {"x-aws-ec2-metadata-token-ttl-seconds": "21600"}
    reachable = False
    for _ in range(imds.attempts):
        try:
            status, body = _http("PUT", imds.base_url + "latest/api/token", headers,
                                 imds.timeout)
        except _Unreachable:
            continue
        except _NetworkError:
            return None, True  # botocore: a read timeout falls back to v1 at once
        reachable = True
        if status == 200:
            return body.decode("utf-8", "replace"), True
        if status == 400:
            return None, False
        if status in (403, 404, 405):
            return None, True
    return None, reachable


def _imds_get(imds: _ImdsSettings, path: str, headers: dict[str, str]) -> str | None:
    for _ in range(imds.attempts):
        try:
            status, body = _http("GET", imds.base_url + path, headers, imds.timeout)
        except _NetworkError:
            continue
        if status == 200 and body:
            return body.decode("utf-8", "replace")
    return None


def _credentials_from_json(doc: object, source: str) -> Credentials | None:
    if not isinstance(doc, dict) or not all(isinstance(doc.get(k), str) for k in _IMDS_FIELDS):
        return None
    if doc.get("Code", "Success") != "Success":
        return None
    try:
        expires = _parse_time(doc["Expiration"])
    except ValueError:
        return None
    return Credentials(doc["AccessKeyId"], doc["SecretAccessKey"], doc["Token"] or None,
                       expires, source)


# -- plumbing ----------------------------------------------------------------------------------


class _NetworkError(Exception):
    """A request failed below HTTP (connect, read, protocol); the message holds no secrets."""


class _Unreachable(_NetworkError):
    """The connection could not be opened at all."""


def _http(method: str, url: str, headers: Mapping[str, str],
          timeout: float) -> tuple[int, bytes]:
    from urllib.parse import urlsplit

    from neffcache.store.http1 import Connection, ProtocolError

    parts = urlsplit(url)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ConfigError(f"metadata URL for host {parts.hostname!r}: bad port") from None
    host = parts.hostname or ""
    tls = None
    if parts.scheme == "https":
        import ssl

        tls = ssl.create_default_context()
    conn = Connection(host, port, tls=tls)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    name = f"[{host}]" if ":" in host else host  # an IPv6 address, as in fd00:ec2::254
    sent = {"host": f"{name}:{parts.port}" if parts.port else name, **headers}
    if method in ("PUT", "POST"):
        sent.setdefault("content-length", "0")  # the IMDSv2 token PUT has no body
    try:
        try:
            conn.connect(timeout, timeout)
        except OSError as exc:
            raise _Unreachable(f"cannot connect to {host}:{port}: {type(exc).__name__}") from None
        try:
            response = conn.send(method, target, sent)
            return response.status, response.read()
        except (OSError, ProtocolError) as exc:
            raise _NetworkError(f"{host}:{port}: {type(exc).__name__}") from None
    finally:
        conn.close()


def _parse_time(text: str) -> float:
    """ISO 8601 (``2030-01-01T00:00:00Z``, offsets, fractions) to epoch seconds; naive = UTC."""
    from datetime import datetime, timezone

    value = text.strip()
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()
