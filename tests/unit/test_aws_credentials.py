"""The stdlib AWS credential chain: every source, botocore's precedence, the cases handed to
botocore, the metadata services over real loopback HTTP, refresh, and parity with botocore."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from neffcache.errors import ConfigError, UnavailableError
from neffcache.store import aws_credentials as ac
from neffcache.store.aws_credentials import (
    CredentialProvider,
    Credentials,
    NeedsBotocore,
    resolve_credentials,
    resolve_region,
)
from tests.support.imds_double import (
    ROLE_PATH,
    ContainerCredentialsDouble,
    ImdsDouble,
    credentials_document,
)
from tests.support.raw_http_double import RawReply, raw_http_double
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
NO_IMDS = {"AWS_EC2_METADATA_DISABLED": "true"}
ENV_KEYS = {"AWS_ACCESS_KEY_ID": "AKIAENVKEY", "AWS_SECRET_ACCESS_KEY": "env-secret-value"}
EPOCH_2030 = datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()


@pytest.fixture(autouse=True)
def _no_system_boto_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """/etc/boto.cfg on a developer machine must not change the outcome."""
    monkeypatch.setattr(ac, "BOTO_SYSTEM_CONFIG", str(tmp_path / "absent-boto.cfg"))


@pytest.fixture
def home(tmp_path: Path) -> str:
    path = tmp_path / "home"
    (path / ".aws").mkdir(parents=True)
    return str(path)


def write(path: str | Path, text: str) -> str:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(text)
    return str(path)


def shared_file(home: str, text: str) -> str:
    return write(Path(home, ".aws", "credentials"), text)


def config_file(home: str, text: str) -> str:
    return write(Path(home, ".aws", "config"), text)


def keys(creds: Credentials | None) -> tuple[str, str, str | None] | None:
    return None if creds is None else (creds.access_key, creds.secret_key, creds.token)


# -- environment -------------------------------------------------------------------------------


def test_environment_keys_with_token_and_expiration(home: str) -> None:
    env = {**ENV_KEYS, "AWS_SESSION_TOKEN": "env-token",
           "AWS_CREDENTIAL_EXPIRATION": "2030-01-01T00:00:00Z"}
    creds = resolve_credentials(env, home=home)
    assert creds == Credentials("AKIAENVKEY", "env-secret-value", "env-token", EPOCH_2030,
                                "environment")


def test_environment_security_token_wins_over_session_token_as_in_botocore(home: str) -> None:
    env = {**ENV_KEYS, "AWS_SESSION_TOKEN": "session", "AWS_SECURITY_TOKEN": "security"}
    assert keys(resolve_credentials(env, home=home)) == ("AKIAENVKEY", "env-secret-value",
                                                         "security")


def test_access_key_without_secret_names_the_variable_not_the_value(home: str) -> None:
    with pytest.raises(ConfigError, match="AWS_SECRET_ACCESS_KEY") as info:
        resolve_credentials({"AWS_ACCESS_KEY_ID": "AKIALONEKEY"}, home=home)
    assert "AKIALONEKEY" not in str(info.value)
    assert "\n" not in str(info.value)


def test_lone_secret_is_ignored_like_botocore(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n")
    env = {**NO_IMDS, "AWS_SECRET_ACCESS_KEY": "lonely"}
    assert resolve_credentials(env, home=home).source == "shared-credentials-file"


def test_bad_expiration_is_a_config_error(home: str) -> None:
    with pytest.raises(ConfigError, match="AWS_CREDENTIAL_EXPIRATION"):
        resolve_credentials({**ENV_KEYS, "AWS_CREDENTIAL_EXPIRATION": "tomorrow"}, home=home)


def test_repr_and_errors_never_show_secrets(home: str) -> None:
    creds = Credentials("AKIAREPR", "repr-secret", "repr-token", None, "environment")
    assert "repr-secret" not in repr(creds) and "repr-token" not in repr(creds)
    assert "AKIAREPR" in repr(creds)
    shared_file(home, "[default]\naws_access_key_id = AKIAPARTIAL\n")
    with pytest.raises(ConfigError) as info:
        resolve_credentials(NO_IMDS, home=home)
    assert "AKIAPARTIAL" not in str(info.value) and "aws_secret_access_key" in str(info.value)


# -- files and profiles ------------------------------------------------------------------------


def test_shared_credentials_file_default_profile(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = AKIAFILE\n"
                      "aws_secret_access_key = file-secret\naws_session_token = file-token\n")
    creds = resolve_credentials(NO_IMDS, home=home)
    assert keys(creds) == ("AKIAFILE", "file-secret", "file-token")
    assert creds is not None and creds.source == "shared-credentials-file"
    assert creds.expires is None


def test_shared_file_aws_security_token_is_read(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n"
                      "aws_security_token = legacy\n")
    assert keys(resolve_credentials(NO_IMDS, home=home)) == ("A", "S", "legacy")


def test_config_file_static_keys_default_and_named_profile(home: str) -> None:
    config_file(home, "[default]\naws_access_key_id = AKIADEF\naws_secret_access_key = d\n"
                      "[profile dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = v\n")
    default = resolve_credentials(NO_IMDS, home=home)
    dev = resolve_credentials({**NO_IMDS, "AWS_PROFILE": "dev"}, home=home)
    assert default is not None and (default.access_key, default.source) == ("AKIADEF",
                                                                             "config-file")
    assert dev is not None and dev.access_key == "AKIADEV"


def test_config_section_without_profile_prefix_is_not_a_profile(home: str) -> None:
    config_file(home, "[dev]\naws_access_key_id = AKIADEV\naws_secret_access_key = v\n")
    with pytest.raises(ConfigError, match="'dev'"):
        resolve_credentials({**NO_IMDS, "AWS_PROFILE": "dev"}, home=home)


def test_default_profile_variable_wins_over_profile_as_in_botocore(home: str) -> None:
    shared_file(home, "[a]\naws_access_key_id = AKIAA\naws_secret_access_key = a\n"
                      "[b]\naws_access_key_id = AKIAB\naws_secret_access_key = b\n")
    env = {**NO_IMDS, "AWS_PROFILE": "a", "AWS_DEFAULT_PROFILE": "b"}
    assert resolve_credentials(env, home=home).access_key == "AKIAB"
    assert resolve_credentials({**NO_IMDS, "AWS_PROFILE": "a"}, home=home).access_key == "AKIAA"


def test_file_locations_from_variables_with_tilde_and_vars(home: str, tmp_path: Path) -> None:
    write(Path(home, "elsewhere", "creds"),
          "[default]\naws_access_key_id = AKIAMOVED\naws_secret_access_key = m\n")
    env = {**NO_IMDS, "AWS_SHARED_CREDENTIALS_FILE": "~/elsewhere/creds"}
    assert resolve_credentials(env, home=home).access_key == "AKIAMOVED"
    write(tmp_path / "cfgdir" / "config",
          "[profile x]\naws_access_key_id = AKIAVAR\naws_secret_access_key = v\n")
    env = {**NO_IMDS, "CFGDIR": str(tmp_path / "cfgdir"), "AWS_CONFIG_FILE": "$CFGDIR/config",
           "AWS_PROFILE": "x"}
    assert resolve_credentials(env, home=home).access_key == "AKIAVAR"


def test_shared_file_wins_over_config_file_for_the_same_profile(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = AKIASHARED\naws_secret_access_key = s\n")
    config_file(home, "[default]\naws_access_key_id = AKIACONFIG\naws_secret_access_key = c\n")
    assert resolve_credentials(NO_IMDS, home=home).source == "shared-credentials-file"


def test_named_profile_missing_from_both_files_is_a_config_error(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n")
    with pytest.raises(ConfigError) as info:
        resolve_credentials({**ENV_KEYS, "AWS_PROFILE": "ghost"}, home=home)
    message = str(info.value)
    assert "'ghost'" in message and "AWS_PROFILE" in message
    assert str(Path(home, ".aws", "config")) in message
    assert str(Path(home, ".aws", "credentials")) in message


def test_profile_known_only_to_the_config_file_is_not_missing(home: str) -> None:
    config_file(home, "[profile regional]\nregion = eu-west-1\n")
    assert resolve_credentials({**NO_IMDS, "AWS_PROFILE": "regional"}, home=home) is None


def test_no_files_no_env_no_metadata_yields_none(home: str) -> None:
    assert resolve_credentials(NO_IMDS, home=home) is None


def test_unparseable_file_is_a_config_error_without_its_content(home: str) -> None:
    shared_file(home, "aws_secret_access_key = leaked-if-quoted\n[default]\n")
    with pytest.raises(ConfigError, match="cannot parse") as info:
        resolve_credentials(NO_IMDS, home=home)
    assert "leaked-if-quoted" not in str(info.value)


# -- sources handed to botocore ----------------------------------------------------------------

EXOTIC_KEYS = ["role_arn = arn:aws:iam::1:role/r\nsource_profile = default",
               "source_profile = other", "credential_source = Ec2InstanceMetadata",
               "role_arn = arn:aws:iam::1:role/r\nweb_identity_token_file = /tok",
               "sso_start_url = https://x.awsapps.com/start", "sso_session = corp",
               "sso_account_id = 123456789012", "credential_process = /bin/creds",
               "login_session = arn:aws:iam::1:user/u"]


@pytest.mark.parametrize("line", EXOTIC_KEYS)
def test_profile_with_another_source_needs_botocore(home: str, line: str) -> None:
    config_file(home, f"[profile exotic]\n{line}\n")
    with pytest.raises(NeedsBotocore, match="exotic"):
        resolve_credentials({**NO_IMDS, "AWS_PROFILE": "exotic"}, home=home)


@pytest.mark.parametrize("line", ["role_arn = arn:aws:iam::1:role/r", "sso_session = corp"])
def test_profile_keys_in_the_credentials_file_count_too(home: str, line: str) -> None:
    shared_file(home, f"[default]\n{line}\n")
    with pytest.raises(NeedsBotocore):
        resolve_credentials(NO_IMDS, home=home)


def test_web_identity_variables_come_before_the_shared_file(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n")
    env = {**NO_IMDS, "AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token",
           "AWS_ROLE_ARN": "arn:aws:iam::1:role/r"}
    with pytest.raises(NeedsBotocore, match="web identity"):
        resolve_credentials(env, home=home)


def test_assume_role_comes_before_static_keys_of_the_same_profile(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n")
    config_file(home, "[default]\nrole_arn = arn:aws:iam::1:role/r\nsource_profile = default\n")
    with pytest.raises(NeedsBotocore, match="role_arn"):
        resolve_credentials(NO_IMDS, home=home)


def test_environment_keys_win_over_a_role_profile(home: str) -> None:
    config_file(home, "[default]\nrole_arn = arn:aws:iam::1:role/r\n")
    assert resolve_credentials(ENV_KEYS, home=home).source == "environment"


def test_shared_file_keys_win_over_credential_process_as_in_botocore(home: str) -> None:
    shared_file(home, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n")
    config_file(home, "[default]\ncredential_process = /bin/creds\n")
    assert resolve_credentials(NO_IMDS, home=home).source == "shared-credentials-file"


def test_legacy_credential_files_need_botocore(home: str, tmp_path: Path) -> None:
    with pytest.raises(NeedsBotocore, match="AWS_CREDENTIAL_FILE"):
        resolve_credentials({**NO_IMDS, "AWS_CREDENTIAL_FILE": "/x"}, home=home)
    boto = write(tmp_path / "boto.cfg", "[Credentials]\naws_access_key_id = A\n"
                                        "aws_secret_access_key = S\n")
    with pytest.raises(NeedsBotocore, match="boto"):
        resolve_credentials({**NO_IMDS, "BOTO_CONFIG": boto}, home=home)
    write(Path(home, ".boto"), "[Credentials]\naws_access_key_id = A\naws_secret_access_key = S\n")
    with pytest.raises(NeedsBotocore, match=".boto"):
        resolve_credentials(NO_IMDS, home=home)


def test_boto_config_without_aws_keys_is_ignored(home: str, tmp_path: Path) -> None:
    boto = write(tmp_path / "boto.cfg", "[Credentials]\ngs_access_key_id = G\n")
    assert resolve_credentials({**NO_IMDS, "BOTO_CONFIG": boto}, home=home) is None


# -- container ---------------------------------------------------------------------------------


@pytest.fixture
def container() -> Iterator[ContainerCredentialsDouble]:
    with ContainerCredentialsDouble() as double:
        yield double


def test_container_full_uri_with_authorization_token(
        home: str, container: ContainerCredentialsDouble) -> None:
    container.authorization = "Bearer double-auth"
    env = {**NO_IMDS, "AWS_CONTAINER_CREDENTIALS_FULL_URI": container.url + container.path,
           "AWS_CONTAINER_AUTHORIZATION_TOKEN": "Bearer double-auth"}
    creds = resolve_credentials(env, home=home)
    assert creds == Credentials("ASIADOUBLEACCESSKEY", "double-secret-key", "double-token",
                                EPOCH_2030, "container")
    (seen,) = container.seen()
    assert seen.headers["authorization"] == "Bearer double-auth"
    assert seen.headers["accept"] == "application/json"


def test_container_token_file_wins_and_is_read_each_time(
        home: str, tmp_path: Path, container: ContainerCredentialsDouble) -> None:
    token_file = write(tmp_path / "token", "from-file-1")
    container.authorization = "from-file-1"
    env = {**NO_IMDS, "AWS_CONTAINER_CREDENTIALS_FULL_URI": container.url + container.path,
           "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": token_file,
           "AWS_CONTAINER_AUTHORIZATION_TOKEN": "from-env"}
    assert resolve_credentials(env, home=home).source == "container"
    write(token_file, "from-file-2")
    container.authorization = "from-file-2"
    assert resolve_credentials(env, home=home).source == "container"


def test_container_relative_uri_uses_the_ecs_host_and_wins_over_full_uri(
        home: str, container: ContainerCredentialsDouble, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ac, "CONTAINER_ENDPOINT", container.url)
    env = {**NO_IMDS, "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": container.path,
           "AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://example.com/never"}
    assert resolve_credentials(env, home=home).source == "container"
    assert [r.path for r in container.seen()] == [container.path]


@pytest.mark.parametrize("url", ["http://example.com/creds", "http://169.254.169.254/creds",
                                 "ftp://127.0.0.1/creds", "http://10.0.0.1/creds"])
def test_container_full_uri_host_not_allowed_over_http(home: str, url: str) -> None:
    with pytest.raises(ConfigError, match="not allowed"):
        resolve_credentials({**NO_IMDS, "AWS_CONTAINER_CREDENTIALS_FULL_URI": url}, home=home)


@pytest.mark.parametrize("url", ["https://anything.example.com/c", "http://127.0.0.2:9/c",
                                 "http://[::1]:9/c", "http://169.254.170.2/c",
                                 "http://169.254.170.23/c", "http://[fd00:ec2::23]/c",
                                 "http://localhost:9/c"])
def test_container_full_uri_hosts_botocore_allows(url: str) -> None:
    ac._check_container_url(url)  # no network: the rule alone


def test_container_token_with_line_break_is_refused(
        home: str, container: ContainerCredentialsDouble) -> None:
    env = {**NO_IMDS, "AWS_CONTAINER_CREDENTIALS_FULL_URI": container.url + container.path,
           "AWS_CONTAINER_AUTHORIZATION_TOKEN": "secret-token\nInjected: 1"}
    with pytest.raises(ConfigError, match="line break") as info:
        resolve_credentials(env, home=home)
    assert "secret-token" not in str(info.value)
    assert container.seen() == []


def test_container_failure_raises_after_retries_and_skips_imds(
        home: str, container: ContainerCredentialsDouble,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ac, "CONTAINER_RETRY_DELAY", 0.0)
    container.status = 500
    with ImdsDouble() as imds:
        env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": container.url + container.path,
               "AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url}
        with pytest.raises(UnavailableError, match="HTTP 500"):
            resolve_credentials(env, home=home)
        assert imds.seen() == []
    assert len(container.seen()) == 3  # botocore's ContainerMetadataFetcher attempts


def test_container_response_without_fields_is_unavailable(
        home: str, container: ContainerCredentialsDouble) -> None:
    container.credentials = {"AccessKeyId": "A", "SecretAccessKey": "leaky"}
    env = {**NO_IMDS, "AWS_CONTAINER_CREDENTIALS_FULL_URI": container.url + container.path}
    with pytest.raises(UnavailableError) as info:
        resolve_credentials(env, home=home)
    assert "leaky" not in str(info.value)


# -- instance metadata -------------------------------------------------------------------------


def imds_env(imds: ImdsDouble, **extra: str) -> dict[str, str]:
    return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.url, **extra}


def test_imds_v2_token_then_role_then_credentials(home: str) -> None:
    with ImdsDouble() as imds:
        creds = resolve_credentials(imds_env(imds), home=home)
    assert creds == Credentials("ASIADOUBLEACCESSKEY", "double-secret-key", "double-token",
                                EPOCH_2030, "instance-metadata")
    put, role, doc = imds.seen()
    assert (put.method, put.path) == ("PUT", "/latest/api/token")
    assert put.headers["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
    assert [(r.method, r.path) for r in (role, doc)] == [
        ("GET", ROLE_PATH), ("GET", ROLE_PATH + "neffcache-double-role")]
    assert {r.headers["x-aws-ec2-metadata-token"] for r in (role, doc)} == {imds.token}


def test_imds_double_really_requires_the_token_header(home: str) -> None:
    """Guards the double itself: a v1 GET is refused, so the test above proves the header."""
    import urllib.error
    import urllib.request

    with ImdsDouble() as imds, pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(imds.url + ROLE_PATH, timeout=5)
    assert info.value.code == 401


@pytest.mark.parametrize("status", [403, 404, 405])
def test_imds_falls_back_to_v1_when_the_token_is_refused(home: str, status: int) -> None:
    with ImdsDouble(token_status=status, v1_enabled=True) as imds:
        creds = resolve_credentials(imds_env(imds), home=home)
    assert creds is not None and creds.source == "instance-metadata"
    gets = imds.seen("GET")
    assert len(gets) == 2 and all("x-aws-ec2-metadata-token" not in r.headers for r in gets)


@pytest.mark.parametrize("where", ["env", "config"])
def test_imds_v1_disabled_means_no_fallback(home: str, where: str) -> None:
    with ImdsDouble(token_status=404, v1_enabled=True) as imds:
        env = imds_env(imds)
        if where == "env":
            env["AWS_EC2_METADATA_V1_DISABLED"] = "true"
        else:
            config_file(home, "[default]\nec2_metadata_v1_disabled = true\n")
        assert resolve_credentials(env, home=home) is None
        assert imds.seen("GET") == []


def test_imds_bad_request_on_token_gives_up(home: str) -> None:
    with ImdsDouble(token_status=400, v1_enabled=True) as imds:
        assert resolve_credentials(imds_env(imds), home=home) is None
        assert imds.seen("GET") == []


def test_imds_disabled_sends_nothing(home: str) -> None:
    with ImdsDouble() as imds:
        env = imds_env(imds, AWS_EC2_METADATA_DISABLED="TRUE")
        assert resolve_credentials(env, home=home) is None
        assert imds.seen() == []


def test_imds_endpoint_from_the_config_profile(home: str) -> None:
    with ImdsDouble() as imds:
        config_file(home, f"[default]\nec2_metadata_service_endpoint = {imds.url}\n")
        assert resolve_credentials({}, home=home).source == "instance-metadata"


@pytest.mark.parametrize("document", [
    {"Code": "AssumeRoleUnauthorizedAccess", "Message": "denied"},
    {**credentials_document(), "Code": "AssumeRoleUnauthorizedAccess"},
    {**credentials_document(), "Expiration": "soon"}])
def test_imds_error_document_yields_none(home: str, document: dict[str, str]) -> None:
    with ImdsDouble(credentials=document) as imds:
        assert resolve_credentials(imds_env(imds), home=home) is None


def spy_http(monkeypatch: pytest.MonkeyPatch, *, offline: bool = False) -> list[tuple[str, str]]:
    """Records (method, url) of every metadata request; ``offline`` fails them as unreachable."""
    calls: list[tuple[str, str]] = []
    real = ac._http

    def spy(method: str, url: str, headers: dict[str, str], timeout: float) -> tuple[int, bytes]:
        calls.append((method, url))
        if offline:
            raise ac._Unreachable("offline")
        return real(method, url, headers, timeout)

    monkeypatch.setattr(ac, "_http", spy)
    return calls


def test_imds_unreachable_port_yields_none_quickly(
        home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = spy_http(monkeypatch)
    start = time.monotonic()
    env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    assert resolve_credentials(env, home=home, timeout=1.0) is None
    assert time.monotonic() - start < 0.5
    assert [m for m, _ in calls] == ["PUT"]  # no v1 attempt at an endpoint that cannot connect


@pytest.mark.parametrize(("env", "url"), [
    ({}, "http://169.254.169.254/latest/api/token"),
    ({"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "IPv6"}, "http://[fd00:ec2::254]/latest/api/token"),
    ({"AWS_IMDS_USE_IPV6": "true"}, "http://[fd00:ec2::254]/latest/api/token"),
    ({"AWS_EC2_METADATA_SERVICE_ENDPOINT": "http://127.0.0.9:8/base"},
     "http://127.0.0.9:8/base/latest/api/token")])
def test_imds_endpoint_selection(home: str, monkeypatch: pytest.MonkeyPatch,
                                 env: dict[str, str], url: str) -> None:
    calls = spy_http(monkeypatch, offline=True)
    assert resolve_credentials(env, home=home) is None
    assert calls == [("PUT", url)]


def test_imds_bad_endpoint_mode_is_a_config_error(home: str) -> None:
    with pytest.raises(ConfigError, match="ipv4 or ipv6"):
        resolve_credentials({"AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE": "ipv5"}, home=home)


def test_imds_silent_endpoint_times_out_to_none(home: str) -> None:
    with socket.socket() as silent:  # accepts connections (backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}"}
        start = time.monotonic()
        assert resolve_credentials(env, home=home, timeout=0.2) is None
        elapsed = time.monotonic() - start
    assert 0.2 <= elapsed < 2.0  # token PUT times out, the v1 GET as botocore does, then None


def test_metadata_timeout_from_the_environment_overrides_the_argument(home: str) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        env = {"AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}",
               "AWS_METADATA_SERVICE_TIMEOUT": "0.1"}
        start = time.monotonic()
        assert resolve_credentials(env, home=home, timeout=30.0) is None
    assert time.monotonic() - start < 2.0


# -- precedence across every source ------------------------------------------------------------

ORDER = ["environment", "shared-credentials-file", "config-file", "container",
         "instance-metadata"]


@pytest.mark.parametrize("skip", range(len(ORDER)))
def test_precedence_follows_botocore(home: str, tmp_path: Path, skip: int) -> None:
    """With the first ``skip`` sources absent, the next one in botocore's order wins."""
    with ContainerCredentialsDouble() as container, ImdsDouble() as imds:
        env = imds_env(imds)
        present = ORDER[skip:]
        if "environment" in present:
            env.update(ENV_KEYS)
        if "shared-credentials-file" in present:
            shared_file(home, "[default]\naws_access_key_id = A\naws_secret_access_key = S\n")
        if "config-file" in present:
            config_file(home, "[default]\naws_access_key_id = C\naws_secret_access_key = S\n")
        if "container" in present:
            env["AWS_CONTAINER_CREDENTIALS_FULL_URI"] = container.url + container.path
        creds = resolve_credentials(env, home=home)
    assert creds is not None and creds.source == ORDER[skip]


# -- region ------------------------------------------------------------------------------------


def test_region_order(home: str) -> None:
    config_file(home, "[default]\nregion = eu-central-1\n[profile dev]\nregion = ap-south-1\n")
    assert resolve_region({"AWS_REGION": "us-west-2", "AWS_DEFAULT_REGION": "us-east-1"},
                          home=home) == "us-west-2"
    assert resolve_region({"AWS_DEFAULT_REGION": "us-east-1"}, home=home) == "us-east-1"
    assert resolve_region({}, home=home) == "eu-central-1"
    assert resolve_region({"AWS_PROFILE": "dev"}, home=home) == "ap-south-1"
    assert resolve_region({"AWS_PROFILE": "ghost"}, home=home) is None


def test_region_none_without_any_setting(home: str) -> None:
    assert resolve_region({}, home=home) is None


# -- CredentialProvider ------------------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counting_resolver(monkeypatch: pytest.MonkeyPatch, delay: float = 0.0) -> list[int]:
    """Wraps resolve_credentials; returns [calls, max concurrent calls]."""
    real = ac.resolve_credentials
    stats = [0, 0]
    active = [0]
    lock = threading.Lock()

    def wrapped(*args: object, **kwargs: object) -> Credentials | None:
        with lock:
            stats[0] += 1
            active[0] += 1
            stats[1] = max(stats[1], active[0])
        try:
            time.sleep(delay)
            return real(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with lock:
                active[0] -= 1

    monkeypatch.setattr(ac, "resolve_credentials", wrapped)
    return stats


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def temporary_env(key: str, expires: float) -> dict[str, str]:
    return {**NO_IMDS, "AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_SESSION_TOKEN": "t", "AWS_CREDENTIAL_EXPIRATION": iso(expires)}


def test_provider_resolves_once_for_static_credentials(
        home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = counting_resolver(monkeypatch)
    clock = FakeClock(1_000_000.0)
    provider = CredentialProvider(ENV_KEYS, home=home, clock=clock)
    first = provider.get()
    clock.now += 10 * 365 * 86400
    assert provider.get() is first and stats[0] == 1


def test_provider_refreshes_inside_the_window(home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = counting_resolver(monkeypatch)
    start = 2_000_000_000.0
    env = temporary_env("ASIAOLD", start + 3600)
    clock = FakeClock(start)
    provider = CredentialProvider(env, home=home, clock=clock)
    assert provider.get().access_key == "ASIAOLD"
    env.update(temporary_env("ASIANEW", start + 7200))
    clock.now = start + 3600 - ac.REFRESH_WINDOW - 1
    assert provider.get().access_key == "ASIAOLD" and stats[0] == 1
    clock.now = start + 3600 - ac.REFRESH_WINDOW
    assert provider.get().access_key == "ASIANEW" and stats[0] == 2
    assert provider.get().access_key == "ASIANEW" and stats[0] == 2


def test_provider_keeps_valid_credentials_when_refresh_finds_none(
        home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = counting_resolver(monkeypatch)
    start = 2_000_000_000.0
    env = temporary_env("ASIAOLD", start + 600)
    clock = FakeClock(start)
    provider = CredentialProvider(env, home=home, clock=clock)
    provider.get()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        del env[key]
    clock.now = start + 400  # inside the window, not expired
    assert provider.get().access_key == "ASIAOLD" and stats[0] == 2
    clock.now += ac.RETRY_INTERVAL / 2
    assert provider.get().access_key == "ASIAOLD" and stats[0] == 2  # no retry yet
    clock.now = start + 600  # expired, and refresh still finds nothing
    assert provider.get() is None and stats[0] == 3


def test_provider_keeps_valid_credentials_when_refresh_raises(
        home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    start = 2_000_000_000.0
    env = temporary_env("ASIAOLD", start + 600)
    clock = FakeClock(start)
    provider = CredentialProvider(env, home=home, clock=clock)
    provider.get()
    env["AWS_WEB_IDENTITY_TOKEN_FILE"] = "/tok"
    del env["AWS_ACCESS_KEY_ID"]
    clock.now = start + 400
    assert provider.get().access_key == "ASIAOLD"
    clock.now = start + 700
    with pytest.raises(NeedsBotocore):
        provider.get()


def test_provider_first_error_propagates_and_is_retried(home: str) -> None:
    env = {"AWS_ACCESS_KEY_ID": "AKIA"}
    provider = CredentialProvider(env, home=home, clock=FakeClock(0.0))
    with pytest.raises(ConfigError):
        provider.get()
    env["AWS_SECRET_ACCESS_KEY"] = "now-set"
    assert provider.get().access_key == "AKIA"


def test_provider_refreshes_in_one_thread_at_a_time(
        home: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stats = counting_resolver(monkeypatch, delay=0.05)
    start = 2_000_000_000.0
    env = temporary_env("ASIAOLD", start + 3600)
    clock = FakeClock(start)
    provider = CredentialProvider(env, home=home, clock=clock)
    provider.get()
    env.update(temporary_env("ASIANEW", start + 7200))
    clock.now = start + 3500
    barrier = threading.Barrier(8)
    results: list[str] = []

    def worker() -> None:
        barrier.wait()
        results.append(provider.get().access_key)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert stats == [2, 1]  # the first resolution plus exactly one refresh, never concurrent
    assert results == ["ASIANEW"] * 8


def test_provider_refreshes_instance_credentials_from_imds(home: str) -> None:
    start = 2_000_000_000.0
    with ImdsDouble(credentials=credentials_document("ASIAONE", expiration=iso(start + 900))) \
            as imds:
        clock = FakeClock(start)
        provider = CredentialProvider(imds_env(imds), home=home, clock=clock)
        assert provider.get().access_key == "ASIAONE"
        imds.credentials = credentials_document("ASIATWO", expiration=iso(start + 4500))
        clock.now = start + 900 - ac.REFRESH_WINDOW
        assert provider.get().access_key == "ASIATWO"
        assert len(imds.seen("PUT")) == 2


# -- parity with botocore ----------------------------------------------------------------------

Scenario = Callable[[Path], dict[str, str]]


def _env_vars(_: Path) -> dict[str, str]:
    return {**ENV_KEYS, "AWS_SESSION_TOKEN": "t-session"}


def _env_both_tokens(_: Path) -> dict[str, str]:
    return {**ENV_KEYS, "AWS_SESSION_TOKEN": "t-session", "AWS_SECURITY_TOKEN": "t-security"}


def _shared_default(d: Path) -> dict[str, str]:
    write(d / "credentials", "[default]\naws_access_key_id = AKIASHARED\n"
                             "aws_secret_access_key = shared-secret\naws_session_token = st\n")
    return {}


def _config_profile(d: Path) -> dict[str, str]:
    write(d / "config", "[default]\naws_access_key_id = AKIADEF\naws_secret_access_key = d\n"
                        "[profile dev]\naws_access_key_id = AKIADEV\n"
                        "aws_secret_access_key = dev-secret\naws_security_token = dt\n")
    return {"AWS_PROFILE": "dev"}


def _both_profile_variables(d: Path) -> dict[str, str]:
    write(d / "credentials", "[a]\naws_access_key_id = AKIAA\naws_secret_access_key = a\n"
                             "[b]\naws_access_key_id = AKIAB\naws_secret_access_key = b\n")
    return {"AWS_PROFILE": "a", "AWS_DEFAULT_PROFILE": "b"}


def _shared_over_config(d: Path) -> dict[str, str]:
    write(d / "credentials", "[p]\naws_access_key_id = AKIAS\naws_secret_access_key = s\n")
    write(d / "config", "[profile p]\naws_access_key_id = AKIAC\naws_secret_access_key = c\n")
    return {"AWS_PROFILE": "p"}


def _env_over_named_profile(d: Path) -> dict[str, str]:
    write(d / "credentials", "[p]\naws_access_key_id = AKIAS\naws_secret_access_key = s\n")
    return {**ENV_KEYS, "AWS_PROFILE": "p"}


def _nothing(_: Path) -> dict[str, str]:
    return {}


@pytest.fixture
def aws_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Scenario],
                                                                                 dict[str, str]]:
    """Applies a scenario to os.environ (botocore reads it) with files in tmp_path only."""
    for var in list(os.environ):
        if var.startswith(("AWS_", "BOTO_")):
            monkeypatch.delenv(var)

    def apply(scenario: Scenario) -> dict[str, str]:
        env = {"AWS_EC2_METADATA_DISABLED": "true",
               "AWS_CONFIG_FILE": str(tmp_path / "config"),
               "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
               "BOTO_CONFIG": str(tmp_path / "absent-boto")}
        env.update(scenario(tmp_path))
        for var, value in env.items():
            monkeypatch.setenv(var, value)
        return env

    return apply


@pytest.mark.parametrize("scenario", [
    _env_vars, _env_both_tokens, _shared_default, _config_profile, _both_profile_variables,
    _shared_over_config, _env_over_named_profile, _nothing])
def test_same_credentials_as_botocore(scenario: Scenario, aws_os_environ: Callable[
        [Scenario], dict[str, str]], tmp_path: Path) -> None:
    import botocore.session

    env = aws_os_environ(scenario)
    theirs = botocore.session.Session().get_credentials()
    ours = resolve_credentials(env, home=str(tmp_path / "no-home"))
    expected = None if theirs is None else (theirs.access_key, theirs.secret_key, theirs.token)
    assert keys(ours) == expected


def _missing_profile(_: Path) -> dict[str, str]:
    return {**ENV_KEYS, "AWS_PROFILE": "ghost"}


def _partial_env(_: Path) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "AKIAPARTIAL"}


def _partial_file(d: Path) -> dict[str, str]:
    write(d / "credentials", "[default]\naws_access_key_id = AKIAPARTIAL\n")
    return {}


@pytest.mark.parametrize("scenario", [_missing_profile, _partial_env, _partial_file])
def test_botocore_refuses_where_we_raise_config_error(scenario: Scenario, aws_os_environ: Callable[
        [Scenario], dict[str, str]], tmp_path: Path) -> None:
    import botocore.exceptions
    import botocore.session

    env = aws_os_environ(scenario)
    with pytest.raises(botocore.exceptions.BotoCoreError):
        botocore.session.Session().get_credentials()
    with pytest.raises(ConfigError):
        resolve_credentials(env, home=str(tmp_path / "no-home"))


def _region_in_default_profile(d: Path) -> dict[str, str]:
    write(d / "config", "[default]\nregion = eu-west-3\n")
    return {}


def _region_overlaid_by_credentials_file(d: Path) -> dict[str, str]:
    write(d / "config", "[profile p]\nregion = sa-east-1\n")
    write(d / "credentials", "[p]\nregion = ap-east-1\n")
    return {"AWS_PROFILE": "p"}


def _region_variable_over_file(d: Path) -> dict[str, str]:
    write(d / "config", "[default]\nregion = eu-west-3\n")
    return {"AWS_DEFAULT_REGION": "us-east-2"}


@pytest.mark.parametrize("scenario", [_nothing, _region_in_default_profile,
                                      _region_overlaid_by_credentials_file,
                                      _region_variable_over_file])
def test_same_region_as_botocore_without_aws_region(scenario: Scenario, aws_os_environ: Callable[
        [Scenario], dict[str, str]], tmp_path: Path) -> None:
    import botocore.session

    env = aws_os_environ(scenario)
    expected = botocore.session.Session().get_config_variable("region")
    assert resolve_region(env, home=str(tmp_path / "no-home")) == expected


# -- import cost -------------------------------------------------------------------------------


def test_import_pulls_in_neither_botocore_nor_the_http_stack() -> None:
    code = ("import neffcache.store.aws_credentials, sys; "
            "assert 'botocore' not in sys.modules; assert 'http.client' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=60)


def test_metadata_requests_name_the_host_and_send_an_empty_put_body() -> None:
    """The IMDSv2 token is a PUT without a body; an IPv6 host (as fd00:ec2::254) is bracketed
    in the Host header."""
    with raw_http_double("::1") as double:
        double.script.append(RawReply(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\ntoken"))
        status, body = ac._http("PUT", f"http://[::1]:{double.port}/latest/api/token",
                                 {"x-aws-ec2-metadata-token-ttl-seconds": "21600"}, 2.0)
    assert (status, body) == (200, b"token")
    request = double.requests[0].decode()
    assert request.startswith("PUT /latest/api/token HTTP/1.1\r\n")
    assert f"host: [::1]:{double.port}\r\n" in request
    assert "content-length: 0\r\n" in request
    assert "x-aws-ec2-metadata-token-ttl-seconds: 21600\r\n" in request
