"""``neffcache config``: the effective settings and where each came from, secrets masked."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from neffcache.config import DEFAULT, config_file_path, read_settings, redact_url
from neffcache.errors import ExitRule
from neffcache.request_rules import checked_request
from neffcache.store import s3_settings


@dataclass(frozen=True, slots=True)
class ConfigValue:
    """One setting: its name, its effective value (None: unset) and where that came from."""

    name: str
    value: str | None
    source: str


@dataclass(frozen=True, slots=True)
class ShowConfigResult(ExitRule):
    """Every setting in a fixed order (the first: the config file's path), and whether that
    file was there to read (``config_read``). A success (exit 0)."""

    values: tuple[ConfigValue, ...]
    config_file: str
    config_read: bool

    def to_json(self) -> dict[str, Any]:
        """``neffcache config --json``: settings as {name: {value, source}}."""
        return {"config_file": self.config_file, "config_read": self.config_read,
                "settings": {v.name: {"value": v.value, "source": v.source}
                             for v in self.values}}


@checked_request
class ShowConfigRequest:
    """The flags a command may pass (None: not given), as ``neffcache config`` takes them."""

    store: str | None = None
    index: str | None = None
    python: str | None = None
    reports: str | None = None


def show_config(request: ShowConfigRequest) -> ShowConfigResult:
    """The settings a command would run with here; ConfigError (exit 2) as any command's."""
    s = read_settings(os.environ, store=request.store, index=request.index,
                      python=request.python, reports=request.reports)
    src = dict(s.sources)
    spool = s.report_spool or "DIR/.neffcache-entries/report-spool"
    path = config_file_path(os.environ)
    rows = [("config_file", str(path)), ("home", str(s.home)), ("store", redact_url(s.store_url)),
            ("index", redact_url(s.index_url)),
            ("python", s.python or f"{sys.executable} (the running interpreter)"),
            ("reports", s.reports_to), ("report_spool", spool),
            ("mirrors", " ".join(redact_url(m) for m in s.mirrors) or None),
            ("trusted_keys", " ".join(s.trusted_keys) or None),
            ("signing_key_file", s.signing_key_file),
            ("signing_key_pem", "(set; not shown)" if s.signing_key_pem else None),
            ("retire", " ".join(f"{k}={v}" for k, v in s.retire) or None)]
    src["config_file"] = "NEFFCACHE_CONFIG" if os.environ.get("NEFFCACHE_CONFIG") else DEFAULT
    values = [ConfigValue(name, value, src.get(name, DEFAULT)) for name, value in rows]
    values += [ConfigValue(*row) for row in s3_settings(os.environ)]
    return ShowConfigResult(tuple(values), str(path), s.config_file is not None)
