"""The dashboard ships in the wheel: install it into a fresh venv and have the installed
`neffcache serve` (run outside the checkout) serve the page and its files."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

from tests.integration.test_wheel_migrations import build_wheel, install_wheel, make_venv, sh
from tests.support.live_server import request
from tests.support.servers import free_port, wait_http


def test_installed_wheel_serves_the_dashboard(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"neffcache/web/index.html", "neffcache/web/app.js", "neffcache/web/style.css",
            "neffcache/server/app.py"} <= names
    venv = make_venv(tmp_path)
    install_wheel(venv, wheel)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # the installed wheel, not a checkout a PYTHONPATH names
    installed = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    where = sh(venv / "bin" / "python", "-c",
               "from neffcache.server.app import web_dir; print(web_dir())", cwd=outside,
               env=installed)
    assert where.stdout.strip().startswith(str(venv))

    port = free_port()
    env = dict(installed, NEFFCACHE_HOME=str(tmp_path / "home"))
    proc = subprocess.Popen([venv / "bin" / "neffcache", "serve", "--port", str(port)],
                            cwd=outside, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz", timeout=60)
        assert "<title>neffcache" in request(base + "/").text
        assert request(base + "/static/app.js").status == 200
        assert request(base + "/api/matrices").json == []
    finally:
        proc.terminate()
        proc.wait(timeout=15)
