"""Settings: flag > ``NEFFCACHE_*`` variable > config file > default (README "Configuration")."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from neffcache.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE_KEYS = ("store", "index", "python", "reports", "mirrors", "trusted_keys",
             "signing_key_file", "require_signatures")
BOOL_KEYS = frozenset({"require_signatures"})
_TRUE, _FALSE = frozenset({"1", "true", "yes", "on"}), frozenset({"", "0", "false", "no", "off"})
REPORTS_TO_STORE, REPORTS_OFF = "store", "none"
DEFAULT = "default"  # Settings.sources: a value nobody set
TABLE_KEYS = {"retire": {"keep_sdk_versions": int, "keep_matrices": list,
                         "keep_restored_days": int}}


@dataclass(frozen=True, slots=True)
class Settings:
    home: Path
    store_url: str
    index_url: str
    index_explicit: bool  # an index was named (flag, variable, file), not the embedded default
    python: str | None = None  # the interpreter the fingerprint describes (None: this one)
    reports_to: str = REPORTS_TO_STORE  # "store", "none" or a directory path
    retire: tuple[tuple[str, Any], ...] = ()  # the config file's [retire] table
    mirrors: tuple[str, ...] = ()  # stores a restore reads after store_url, in order
    trusted_keys: tuple[str, ...] = ()  # public keys (ed25519:...) or files of them
    require_signatures: bool = False  # fail closed without trusted keys (neffcache.trust)
    signing_key_file: str | None = None  # the PEM file publish signs with
    signing_key_pem: str | None = field(default=None, repr=False)  # NEFFCACHE_SIGNING_KEY
    report_spool: str | None = None  # None: beside the restored cache
    # Where each value came from, by setting name: "flag", the environment variable's name,
    # the config file's path, or "default" (``neffcache config``).
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    config_file: str | None = None  # the config file read (None: none was there)

    @property
    def index_is_embedded(self) -> bool:
        return not self.index_explicit

    @property
    def has_index(self) -> bool:
            return self.index_explicit or (self.home / "index.db").exists()


def default_home(environ: Mapping[str, str]) -> Path:
    if environ.get("NEFFCACHE_HOME"):
        return Path(environ["NEFFCACHE_HOME"]).expanduser()
    base = environ.get("XDG_CACHE_HOME") or str(Path(environ.get("HOME", "~")) / ".cache")
    return Path(base).expanduser() / "neffcache"


def config_file_path(environ: Mapping[str, str]) -> Path:
    if environ.get("NEFFCACHE_CONFIG"):
        return Path(environ["NEFFCACHE_CONFIG"]).expanduser()
    return default_home(environ) / "config.toml"


def parse_config_file(text: str, source: str) -> dict[str, Any]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - set(FILE_KEYS) - set(TABLE_KEYS))
    if unknown:
        raise ConfigError(f"{source}: unknown key {unknown[0]!r} (expected "
                          f"{list(FILE_KEYS) + list(TABLE_KEYS)})")
    for k, v in data.items():
        if k in TABLE_KEYS:
            _check_table(k, v, source)
        elif k in BOOL_KEYS:
            if not isinstance(v, bool):
                raise ConfigError(f"{source}: {k}: expected true or false")
        elif not isinstance(v, str) or not v:
            raise ConfigError(f"{source}: {k}: expected a non-empty string")
    return dict(data)


def _check_table(name: str, value: Any, source: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{source}: {name}: expected a table ([{name}])")
    spec = TABLE_KEYS[name]
    for k, v in value.items():
        if k not in spec:
            raise ConfigError(f"{source}: [{name}] unknown key {k!r} (expected {sorted(spec)})")
        if spec[k] is int and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{source}: [{name}] {k}: expected an integer >= 1")
        if spec[k] is list and (not isinstance(v, list)
                                or not all(isinstance(x, str) and x for x in v)):
            raise ConfigError(f"{source}: [{name}] {k}: expected a list of file paths")


def load_settings(environ: Mapping[str, str], file_values: Mapping[str, Any] | None = None,
                  *, store: str | None = None, index: str | None = None,
                  python: str | None = None, reports: str | None = None,
                  file_source: str = "config file") -> Settings:
    """``file_values``: the parsed config file, ``file_source`` its path (for ``sources``)."""
    file_values = file_values or {}
    sources: dict[str, str] = {}

    def pick(name: str, flag: str | None, var: str | None, key: str | None) -> Any:
        for value, source in ((flag, "flag"), (environ.get(var or ""), var),
                              (file_values.get(key or ""), file_source)):
            if value:
                sources[name] = str(source)
                return value
        sources[name] = DEFAULT
        return None

    home = default_home(environ)
    sources["home"] = "NEFFCACHE_HOME" if environ.get("NEFFCACHE_HOME") else DEFAULT
    store_url = pick("store", store, "NEFFCACHE_STORE", "store") or str(home / "store")
    named_index = pick("index", index, "NEFFCACHE_INDEX", "index")
    index_url = named_index or f"sqlite:///{home / 'index.db'}"
    _check_index_url(index_url)
    interpreter = pick("python", python, "NEFFCACHE_PYTHON", "python")
    reports_to = reports_destination(pick("reports", reports, "NEFFCACHE_REPORTS", "reports")
                                     or REPORTS_TO_STORE)
    retire = pick("retire", None, None, "retire") or {}
    mirrors = str(pick("mirrors", None, "NEFFCACHE_MIRRORS", "mirrors") or "")
    trusted = str(pick("trusted_keys", None, "NEFFCACHE_TRUSTED_KEYS", "trusted_keys") or "")
    key_file = pick("signing_key_file", None, "NEFFCACHE_SIGNING_KEY_FILE", "signing_key_file")
    key_pem = pick("signing_key_pem", None, "NEFFCACHE_SIGNING_KEY", None)
    spool = pick("report_spool", None, "NEFFCACHE_REPORT_SPOOL", None)
    require = pick("require_signatures", None, "NEFFCACHE_REQUIRE_SIGNATURES",
                   "require_signatures")
    return Settings(home=home, store_url=str(store_url), index_url=str(index_url),
                    index_explicit=bool(named_index), python=interpreter or None,
                    reports_to=reports_to, mirrors=tuple(mirrors.split()),
                    trusted_keys=tuple(trusted.split()), signing_key_file=key_file,
                    signing_key_pem=key_pem, report_spool=spool,
                    require_signatures=require is not None and (
                        require if isinstance(require, bool)
                        else flag_value(str(require), "NEFFCACHE_REQUIRE_SIGNATURES")),
                    retire=tuple(sorted((k, tuple(v) if isinstance(v, list) else v)
                                        for k, v in retire.items())),
                    sources=tuple(sorted(sources.items())))


def flag_value(value: str, name: str) -> bool:
    v = value.strip().lower()
    if v not in _TRUE | _FALSE:
        raise ConfigError(f"{name}={value!r}: expected 1/true/yes/on or 0/false/no/off")
    return v in _TRUE


def reports_destination(value: str) -> str:
    value = value.strip()
    if value.lower() in (REPORTS_TO_STORE, REPORTS_OFF):
        return value.lower()
    if not value or "://" in value:
        raise ConfigError(f"reports {redact_url(value)!r}: expected 'store' (the store's "
                          f"reports/ prefix), 'none' or a local directory path")
    return value


def _check_index_url(url: str) -> None:
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if not scheme.startswith(("sqlite", "postgresql")):
        raise ConfigError(f"index {redact_url(url)!r}: expected sqlite:///PATH or "
                          f"postgresql+psycopg://USER@HOST/DB")


def redact_url(url: str) -> str:
    """``url`` with any password and every query value masked, for messages and logs."""
    if "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, at, host = rest.rpartition("@")  # the last @: a secret may hold "/"
    if at and ":" in creds:
        creds = creds.split(":", 1)[0] + ":***"
    host, q, query = host.partition("?")
    if q:
        query = "&".join(f"{part.partition('=')[0]}=***" for part in query.split("&"))
    return f"{scheme}://{creds}{at}{host}{q}{query}"


def read_settings(environ: Mapping[str, str], *, store: str | None = None,
                  index: str | None = None, python: str | None = None,
                  reports: str | None = None) -> Settings:
    """The I/O edge: a file NEFFCACHE_CONFIG names must exist, the default one may not."""
    path = config_file_path(environ)
    values = None
    if environ.get("NEFFCACHE_CONFIG") and not path.is_file():
        raise ConfigError(f"NEFFCACHE_CONFIG={environ['NEFFCACHE_CONFIG']}: no such file",
                          hint="create it, or unset NEFFCACHE_CONFIG (then "
                               "$NEFFCACHE_HOME/config.toml is read when present)")
    if path.is_file():
        try:
            values = parse_config_file(path.read_text(encoding="utf-8"), str(path))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    settings = load_settings(environ, values, store=store, index=index, python=python,
                             reports=reports, file_source=str(path))
    return replace(settings, config_file=str(path)) if values is not None else settings
