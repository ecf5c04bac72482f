"""``neffcache fingerprint``: show this host's fingerprint, or explain how another differs."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from neffcache.backends import get_backend
from neffcache.config import Settings, read_settings
from neffcache.errors import ExitRule, NotFoundError, UnavailableError, UsageError
from neffcache.fingerprint import (
    FIELD_NOTES,
    FieldDiff,
    Fingerprint,
    collect_fingerprint,
    described_interpreter,
    diff_fingerprints,
    diff_pairs,
)
from neffcache.hashing import is_key_prefix
from neffcache.request_rules import checked_request

if TYPE_CHECKING:
    from neffcache.manifest import Manifest

DEFAULT_BACKEND = "inductor"


@checked_request
class FingerprintRequest:
    """Which fingerprint of this host to collect.

    backend: "inductor" or "neuron" (None: inductor). python: the interpreter that runs
    inference, whose package versions, Python version and torch path are read by running it
    once (None: NEFFCACHE_PYTHON > config key ``python`` > the interpreter running
    neffcache). environ: the variables the fingerprint and the settings are read from
    (None: ``os.environ``)."""

    backend: str | None = None
    python: str | None = None
    environ: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class FingerprintResult(ExitRule):
    """This host's fingerprint and the interpreter it describes (``python``, a path)."""

    fingerprint: Fingerprint
    python: str

    def to_json(self) -> dict[str, Any]:
        fp = self.fingerprint
        return {"key": fp.key, "backend": fp.backend, "fields": dict(fp.fields),
                "info": dict(fp.info), "unknown_fields": list(fp.unknown_fields),
                "python": self.python}


@checked_request
class ExplainRequest:
    """What to explain: ``key`` is an entry key (its manifest is read from the store) or a
    fingerprint key (read from the index), either one or a unique prefix of at least 6 hex
    digits; the store is tried first.

    backend: the backend of this host's fingerprint (None: the explained one's). python,
    environ: as in FingerprintRequest. store, index: URLs (None: NEFFCACHE_STORE /
    NEFFCACHE_INDEX > config file > the embedded default)."""

    key: str
    backend: str | None = None
    python: str | None = None
    store: str | None = None
    index: str | None = None
    environ: Mapping[str, str] | None = None


@dataclass(frozen=True, slots=True)
class ExplainResult(ExitRule):
    """This host's fingerprint (``here``) against an entry's or a fingerprint's (``there``).

    entry_key and cell_id name the entry (None when ``key`` was a fingerprint key);
    differences are the compared fields that differ (``FieldDiff(name, here, there)``, a
    field missing on one side is "absent"); info_differences the recorded, never compared
    facts that differ; python the interpreter ``here`` describes."""

    here: Fingerprint
    there: Fingerprint
    python: str
    entry_key: str | None = None
    cell_id: str | None = None
    differences: tuple[FieldDiff, ...] = ()
    info_differences: tuple[FieldDiff, ...] = ()

    @property
    def match(self) -> bool:
        """True when an entry built for ``there`` would be used on this host."""
        return not self.differences and not self.here.unknown_fields

    @staticmethod
    def note(field_name: str) -> str:
        """Why a fingerprint field matters (empty for a field without a note)."""
        return FIELD_NOTES.get(field_name, "")

    def to_json(self) -> dict[str, Any]:
        return {"entry_key": self.entry_key, "cell_id": self.cell_id,
                "backend": self.there.backend, "here": self.here.key,
                "there": self.there.key, "match": self.match,
                "unknown_here": list(self.here.unknown_fields),
                "differences": [{"field": d.name, "here": d.here, "there": d.there,
                                 "note": self.note(d.name)} for d in self.differences],
                "info_differences": [{"field": d.name, "here": d.here, "there": d.there}
                                     for d in self.info_differences],
                "python": self.python}


def show_fingerprint(request: FingerprintRequest) -> FingerprintResult:
    """This host's fingerprint for ``request.backend`` (``neffcache fingerprint``). Raises
    UsageError for an unknown backend, ConfigError for a bad setting or ``python``."""
    _, interpreter, here = _host(request)
    return FingerprintResult(here(request.backend or DEFAULT_BACKEND), interpreter)


def explain_fingerprint(request: ExplainRequest) -> ExplainResult:
    """Each fingerprint field that differs between this host and an entry (or a fingerprint
    in the index): ``neffcache fingerprint --explain KEY``. Raises UsageError when ``key``
    names no single entry or fingerprint; NotFoundError when a full entry key has no manifest
    and is no fingerprint key either."""
    settings, interpreter, here_as = _host(request, request.store, request.index)
    manifest, there = _explained(request.key, settings)
    here = here_as(request.backend or there.backend)
    return ExplainResult(here=here, there=there, python=interpreter,
                         entry_key=manifest.entry_key if manifest else None,
                         cell_id=manifest.cell.id if manifest else None,
                         differences=diff_fingerprints(here, there),
                         info_differences=diff_pairs(here.info, there.info))


def _host(request: FingerprintRequest | ExplainRequest, store: str | None = None,
          index: str | None = None) -> tuple[Settings, str, Callable[[str], Fingerprint]]:
    """The settings, the interpreter they name, and this host's fingerprint for a backend."""
    environ = os.environ if request.environ is None else request.environ
    settings = read_settings(environ, store=store, index=index, python=request.python)
    return settings, described_interpreter(settings.python), lambda backend: collect_fingerprint(
        get_backend(backend).name, environ, python=settings.python)


def _explained(key: str, settings: Settings) -> tuple[Manifest | None, Fingerprint]:
    """From the store (manifest, its fingerprint), else from the index (None, fingerprint)."""
    key = key.strip().lower()
    if not is_key_prefix(key):
        raise UsageError(f"--explain {key!r}: expected an entry key (hex, at least 6 digits)")
    try:
        manifest = _read_entry(key, settings.store_url)
        return manifest, manifest.fingerprint
    except (NotFoundError, UsageError) as exc:
        missed = exc
    from neffcache.index import find_fingerprints, open_index

    try:
        with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as ix:
            found = find_fingerprints(ix, key)
    except UnavailableError:
        raise missed from None
    if len(found) == 1:
        return None, next(iter(found.values()))
    raise UsageError(f"--explain {key}: no entry in the store and "
                     f"{'no' if not found else len(found)} fingerprints in the index "
                     f"match that key", hint="neffcache ls; neffcache coverage MATRIX")


def _read_entry(key: str, store_url: str) -> Manifest:
    from neffcache.manifest import decode_manifest
    from neffcache.store import MANIFESTS, entry_key_of, manifest_key, open_store

    s = open_store(store_url)
    if len(key) < 64:
        matches = sorted(k for k in (entry_key_of(o) for o in s.list(MANIFESTS))
                         if k and k.startswith(key))
        if len(matches) != 1:
            raise UsageError(f"--explain {key}: {'no' if not matches else len(matches)} "
                             f"entries match that prefix in {s.url}")
        key = matches[0]
    try:
        data = s.read(manifest_key(key))
    except NotFoundError:
        raise NotFoundError(f"entry {key}: no manifest in {s.url}",
                            hint="neffcache ls") from None
    return decode_manifest(data, source=f"manifests/{key}.json")
