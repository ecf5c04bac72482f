"""Headless Debian Chromium driven over the DevTools protocol (CDP) with websocket-client:
navigate, wait for a condition, evaluate JavaScript, take screenshots, record requests and
console errors. Loopback only; no browser download, no profile outside a temp directory."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--disable-extensions", "--metrics-recording-only",
         "--no-default-browser-check", "--disable-features=Translate,MediaRouter,OptimizationHints",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0")


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Page:
    """One page target: send CDP commands, collect events."""

    def __init__(self, ws_url: str) -> None:
        import websocket

        self._ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self._next = 0
        self.events: list[dict[str, Any]] = []

    def close(self) -> None:
        self._ws.close()

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next += 1
        msg_id = self._next
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._ws.recv())
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        """Read messages until the event ``method`` arrives (kept in ``events`` too)."""
        deadline = time.monotonic() + timeout
        seen = len(self.events)
        while time.monotonic() < deadline:
            for e in self.events[seen:]:
                if e["method"] == method:
                    return e
            seen = len(self.events)
            self._ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(self._ws.recv())
            finally:
                self._ws.settimeout(30)
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"no {method} within {timeout} s")

    def evaluate(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JS error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        """Poll until ``expression`` is truthy; return its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"not true within {timeout} s: {expression}")

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", **params)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path

    def requested_urls(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def console_errors(self) -> list[str]:
        out = []
        for e in self.events:
            if e["method"] == "Runtime.exceptionThrown":
                out.append(json.dumps(e["params"]["exceptionDetails"])[:500])
            elif e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error":
                out.append(e["params"]["entry"]["text"])
            elif e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error":
                out.append(json.dumps(e["params"]["args"])[:500])
        return out


@contextmanager
def chromium(width: int = 1440, height: int = 1000) -> Iterator[Page]:
    """Start headless Chromium with a throwaway profile; yield its first page; stop it."""
    binary = chromium_binary()
    if binary is None:
        raise RuntimeError("chromium not found (tools/install installs it)")
    profile = Path(tempfile.mkdtemp(prefix="neffcache-chromium-"))
    proc = subprocess.Popen([binary, *FLAGS, f"--user-data-dir={profile}",
                             f"--window-size={width},{height}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    page: Page | None = None
    try:
        port = _devtools_port(profile, proc)
        page = Page(_page_ws_url(port))
        page.send("Page.enable")
        page.send("Runtime.enable")
        page.send("Log.enable")
        page.send("Network.enable")
        page.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        yield page
    finally:
        if page is not None:
            page.close()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _devtools_port(profile: Path, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"chromium exited with {proc.returncode}")
        if marker.is_file():
            lines = marker.read_text().split()
            if lines:
                return int(lines[0])
        time.sleep(0.1)
    raise RuntimeError(f"chromium did not open a DevTools port within {timeout} s")


def _page_ws_url(port: int, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
            pages = [t for t in json.load(r) if t.get("type") == "page"]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.1)
    raise RuntimeError("chromium has no page target")


def navigate(page: Page, url: str, timeout: float = 30.0) -> None:
    """Load ``url`` and wait for its load event."""
    page.events = [e for e in page.events if e["method"] != "Page.loadEventFired"]
    result = page.send("Page.navigate", url=url)
    if result.get("errorText"):
        raise RuntimeError(f"{url}: {result['errorText']}")
    page.wait_event("Page.loadEventFired", timeout)
