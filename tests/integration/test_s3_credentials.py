"""Every AWS credential source, end to end through the CLI: a restore from S3 (moto, with moto's
STS for the sources that assume a role) exits 0 when the source works, and with the exit code
and one-line message of the table when it does not. The metadata services are test doubles on
127.0.0.1 (tests/support/imds_double.py); STS refusals come from a small refusing double."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread

import pytest

from tests.conftest import CLOSED_METADATA_ENDPOINT
from tests.e2e.conftest import CELL_64, MATRIX
from tests.support.imds_double import (
    ContainerCredentialsDouble,
    ImdsDouble,
    credentials_document,
)
from tests.support.synthetic import make_neff_cache

pytestmark = pytest.mark.s3

AWS_SOURCES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
               "AWS_DEFAULT_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
               "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
               "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_DISABLED")
ROLE = "arn:aws:iam::123456789012:role/neffcache-reader"


class _RefusingSts(BaseHTTPRequestHandler):
    """Test double of an STS that refuses every call as AWS does (403, an STS error document)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = (b'<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error>'
                b"<Type>Sender</Type><Code>AccessDenied</Code><Message>Not authorized to "
                b"perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>")
        self.send_response(403)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def refusing_sts() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RefusingSts)
    Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@dataclass
class World:
    """A pushed entry on moto and everything a case needs to build its environment."""

    base: dict[str, str]
    tmp: Path
    matrix: Path
    moto: str
    refusing_sts: str
    double: ContainerCredentialsDouble | ImdsDouble | None = None  # started by a case

    def write(self, name: str, text: str, mode: int = 0o600) -> str:
        path = self.tmp / name
        path.write_text(text, encoding="utf-8")
        path.chmod(mode)
        return str(path)


@pytest.fixture
def world(s3_env: dict[str, str], s3_url: str, tmp_path: Path,
          refusing_sts: str) -> World:
    env = dict(os.environ, NEFFCACHE_STORE=s3_url, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge")
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    cache = make_neff_cache(tmp_path / "neff", seed=3, count=5, large=0)
    push = subprocess.run([sys.executable, "-m", "neffcache.cli", "push", "--matrix", str(matrix),
                           "--cell", CELL_64, "--root", f"neff={cache.root}"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert push.returncode == 0, push.stderr
    base = {k: v for k, v in env.items() if k not in AWS_SOURCES}
    return World(base, tmp_path, matrix, s3_env["AWS_ENDPOINT_URL"], refusing_sts)


def _profile_files(w: World, config: str, credentials: str = "") -> dict[str, str]:
    return {"AWS_CONFIG_FILE": w.write("config", config),
            "AWS_SHARED_CREDENTIALS_FILE": w.write("credentials", credentials)}


def env_keys(w: World) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def shared_file(w: World) -> dict[str, str]:
    return _profile_files(w, "[default]\nregion = us-east-1\n",
                          "[default]\naws_access_key_id = testing\n"
                          "aws_secret_access_key = testing\n")


def profile_role_arn(w: World) -> dict[str, str]:
    files = _profile_files(w, f"[profile ci]\nrole_arn = {ROLE}\nsource_profile = base\n",
                           "[base]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    return {**files, "AWS_PROFILE": "ci", "AWS_ENDPOINT_URL_STS": w.moto}


def web_identity(w: World) -> dict[str, str]:
    return {"AWS_WEB_IDENTITY_TOKEN_FILE": w.write("token", "eyJ.oidc.token"),
            "AWS_ROLE_ARN": ROLE, "AWS_ENDPOINT_URL_STS": w.moto}


def web_identity_refused(w: World) -> dict[str, str]:
    return dict(web_identity(w), AWS_ENDPOINT_URL_STS=w.refusing_sts)


def sso_without_token(w: World) -> dict[str, str]:
    config = ("[profile sso]\nsso_session = corp\nsso_account_id = 123456789012\n"
              "sso_role_name = Reader\nregion = us-east-1\n[sso-session corp]\n"
              "sso_start_url = https://corp.awsapps.com/start\nsso_region = us-east-1\n")
    return {**_profile_files(w, config), "AWS_PROFILE": "sso",
            "HOME": str(w.tmp / "home-without-sso-cache")}


def credential_process(w: World) -> dict[str, str]:
    script = w.write("creds.sh", "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": "
                     "\"testing\", \"SecretAccessKey\": \"testing\"}'\n", 0o700)
    return _profile_files(w, f"[default]\ncredential_process = {script}\n")


def credential_process_failing(w: World) -> dict[str, str]:
    script = w.write("creds.sh", "#!/bin/sh\necho 'vault sealed' >&2\nexit 1\n", 0o700)
    return _profile_files(w, f"[default]\ncredential_process = {script}\n")


def missing_profile(w: World) -> dict[str, str]:
    return {**_profile_files(w, "[default]\nregion = us-east-1\n"), "AWS_PROFILE": "nope"}


def container(w: World) -> dict[str, str]:
    double = ContainerCredentialsDouble(authorization="pod-identity-token",
                                        credentials=credentials_document("testing", "testing"))
    w.double = double.__enter__()
    return {"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"{double.url}{double.path}",
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": w.write("pod-token", "pod-identity-token")}


def instance_role(w: World) -> dict[str, str]:
    double = ImdsDouble(credentials=credentials_document("testing", "testing"))
    w.double = double.__enter__()
    return {"AWS_METADATA_ENDPOINT": double.url}


def no_source(w: World) -> dict[str, str]:
    return {"AWS_EC2_METADATA_DISABLED": "true"}


def instance_metadata_unreachable(w: World) -> dict[str, str]:
    return {"AWS_METADATA_ENDPOINT": CLOSED_METADATA_ENDPOINT}


Case = Callable[[World], dict[str, str]]
TABLE: list[tuple[Case, int, str]] = [
    (env_keys, 0, ""),
    (shared_file, 0, ""),
    (profile_role_arn, 0, ""),
    (web_identity, 0, ""),
    (credential_process, 0, ""),
    (container, 0, ""),
    (instance_role, 0, ""),
    (web_identity_refused, 6, "AWS STS refused the web identity token"),
    (sso_without_token, 2, "AWS SSO profile 'sso' has no valid login"),
    (credential_process_failing, 6, "credential_process of AWS profile 'default' failed"),
    (missing_profile, 2, "AWS profile 'nope' is not in"),
    (no_source, 6, "no usable AWS credentials"),
    (instance_metadata_unreachable, 6, "cannot get credentials from the instance-metadata"),
]
HINTS = {sso_without_token: "aws sso login --profile sso",
         no_source: "attach an instance role",
         missing_profile: "aws configure --profile nope"}


@pytest.mark.parametrize("case,code,words", TABLE, ids=[c.__name__ for c, _, _ in TABLE])
def test_each_credential_source(world: World, case: Case, code: int, words: str) -> None:
    extra = case(world)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "neffcache.cli", "restore", str(world.matrix),
             "--to", str(world.tmp / "out"), "--cells", CELL_64],
            env={**world.base, **extra}, capture_output=True, text=True, timeout=120)
    finally:
        double = world.double
        if double is not None:
            double.__exit__(None, None, None)
    assert proc.returncode == code, proc.stderr
    if code == 0:
        assert (world.tmp / "out" / "neff").is_dir()
        if double is not None:  # the double really was asked (and nothing else was)
            assert double.seen("GET"), "the metadata double saw no credential request"
        return
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    error = next(line for line in lines if line.startswith("Error:"))
    assert words in error
    assert "testing" not in proc.stderr and "Traceback" not in proc.stderr
    if case in HINTS:
        assert any(HINTS[case] in line for line in lines if line.startswith("Hint:")), lines
