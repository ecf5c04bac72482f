"""A store that is not a store — an endpoint answering an HTML page with 200 to every request, one
that redirects every request, a mistyped prefix or directory with nothing under it — is a clear
exit 6 (not a store / unreachable) or 2 (nothing there: configuration) from every command that
opens a store, never "ok, 0 manifests"."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.store import STORE_MARKER, open_store
from tests.support.servers import LOOPBACK, free_port

HTML = b"<!doctype html><html><body><h1>Welcome</h1></body></html>"
MATRIX = """\
backend = "neuron"
[[pipelines]]
name = "tiny"
class = "diffusers:Flux2KleinPipeline"
model = "/models/tiny"
mode = "compile"
shapes = ["64x64"]
"""


class _Handler(http.server.BaseHTTPRequestHandler):
    """``server.mode``: "html" answers every request 200 with a web page; "redirect" answers
    302 to a closed loopback port."""

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        if self.server.mode == "redirect":  # type: ignore[attr-defined]
            self.send_response(302)
            self.send_header("Location", f"http://{LOOPBACK}:{self.server.closed}/")  # type: ignore[attr-defined]
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(HTML)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(HTML)

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture(params=["html", "redirect"])
def endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), _Handler)
    server.mode = request.param  # type: ignore[attr-defined]
    server.closed = free_port()  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://{LOOPBACK}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neffcache.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def commands(store: str, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that opens a store, aimed at ``store``."""
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    good = tmp_path / "good"  # a real store, for the other side of copy and repair
    open_store(str(good), create=True).check()
    index = f"sqlite:///{tmp_path / 'index.db'}"
    return {
        "verify": ["verify", "--store", store],
        "restore": ["restore", str(matrix), "--to", str(tmp_path / "out"), "--store", store,
                    "--report-to", "none"],
        "restore --dry-run": ["restore", str(matrix), "--to", str(tmp_path / "out"),
                              "--store", store, "--dry-run"],
        "gc": ["gc", "--store", store, "--dry-run"],
        "copy --from": ["copy", "--all", "--from", store, "--to", str(tmp_path / "copy")],
        "copy --to": ["copy", "--all", "--from", str(good), "--to", store],
        "repair": ["repair", "--dry-run", "--from", str(good), "--store", store],
        "repair --from": ["repair", "--dry-run", "--from", store, "--store", str(good)],
        "reindex": ["reindex", "--store", store, "--index", index],
        "retire": ["retire", "--dry-run", "--keep-sdk-versions", "1", "--store", store,
                   "--index", index],
        "bundle export": ["bundle", "export", "--all", "-o", str(tmp_path / "x.bundle"),
                          "--store", store],
    }


def test_an_endpoint_that_is_not_s3_is_exit_6_from_every_command(
        endpoint: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT")}
    env.update({"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s",
                "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": endpoint,
                "NEFFCACHE_INSTANCE_TYPE": "trn2.48xlarge"})
    outcomes = {}
    for name, args in commands("s3://bucket/neff", tmp_path).items():
        if name in ("retire", "reindex"):
            run(["db", "upgrade", "--index", args[-1]], env, tmp_path)
        done = run(args, env, tmp_path)
        outcomes[name] = (done.returncode, done.stderr.strip().splitlines()[:1])
    assert {n: rc for n, (rc, _) in outcomes.items()} == dict.fromkeys(outcomes, 6), outcomes
    for name, (_, first) in outcomes.items():
        assert first and first[0].startswith("Error: "), (name, first)


def test_a_mistyped_prefix_is_exit_2_and_names_the_store(
        s3_url: str, s3_env: dict[str, str], tmp_path: Path) -> None:
    real = open_store(s3_url, create=True)
    real.check()  # a store with its marker beside the mistyped one
    assert real.has(STORE_MARKER)
    typo = s3_url + "x"
    env = dict(os.environ, NEFFCACHE_INSTANCE_TYPE="trn2.48xlarge")
    for name, args in commands(typo, tmp_path).items():
        if name in ("copy --to", "retire", "reindex"):  # a copy creates its target
            continue
        done = run(args, env, tmp_path)
        assert done.returncode == 2, (name, done.stdout, done.stderr)
        assert "not a neffcache store: nothing under it" in done.stderr, (name, done.stderr)
        assert typo.removeprefix("s3://") in done.stderr
    verify = run(["verify", "--store", s3_url, "--json"], env, tmp_path)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["manifests"] == 0


def test_an_empty_directory_is_not_a_store_but_a_pushed_one_is(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    env = dict(os.environ)
    done = run(["verify", "--store", str(tmp_path / "empty")], env, tmp_path)
    assert done.returncode == 2 and "not a neffcache store" in done.stderr, done.stderr
    made = open_store(str(tmp_path / "made"), create=True)
    made.check()  # what push, precompile, copy and bundle import do first
    assert json.loads(made.read(STORE_MARKER))["neffcache_store"] == 1
    done = run(["verify", "--store", str(tmp_path / "made")], env, tmp_path)
    assert done.returncode == 0, done.stderr
