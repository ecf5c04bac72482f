"""``push(PushRequest) -> PushResult``, the use case behind ``neffcache push``."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from neffcache.backends import Backend
from neffcache.config import Settings
from neffcache.errors import ExitRule, MatrixError, NeffcacheError, UsageError
from neffcache.fingerprint import Fingerprint
from neffcache.manifest import Manifest
from neffcache.matrix import Cell
from neffcache.precompile.publish import (
    DEFAULT_WORKERS,
    PublishOptions,
    PublishResult,
    publish_with,
)
from neffcache.request_rules import checked_request
from neffcache.signing import SigningKey
from neffcache.store import Store


@checked_request
class PushRequest:
    """Which cell to publish, and from which cache roots; each field is the flag of that name.

    The cell: ``cell``, or ``cell_json`` (a file holding a cell's JSON, maybe with a
    ``backend`` key; ``"-"``: stdin), or ``matrix`` with ``cell_id``. ``roots``: ``{name:
    dir}`` or ``"NAME=DIR"`` strings. ``backend``: None takes the matrix's or the cell JSON's.
    ``compile_seconds``: the warm-up's (in the manifest). ``workers``: parallel uploads.
    ``store``, ``index``, ``python``, ``signing_key``: None resolves them as the CLI does,
    from ``environ`` (None: the process's). ``notice``: warnings.
    ``allow_missing_packages``: publish even when the interpreter lacks what the backend needs.
    """

    roots: Mapping[str, str | Path] | Sequence[str] = ()
    cell_json: str | Path | None = None
    matrix: str | Path | None = None
    cell_id: str | None = None
    cell: Cell | None = None
    backend: str | None = None
    compile_seconds: float | None = None
    workers: int = DEFAULT_WORKERS
    python: str | None = None
    store: str | None = None
    index: str | None = None
    environ: Mapping[str, str] | None = None
    notice: Callable[[str], None] | None = None
    allow_missing_packages: bool = False
    signing_key: str | Path | None = None


@dataclass(frozen=True, slots=True)
class PushResult(ExitRule):
    """A published (or already present: ``published.created`` False) entry; ``indexed``: the
    index recorded it. ``to_json()`` is the ``--json`` document; a push that cannot publish
    raises, so ``error()`` is None."""

    published: PublishResult
    indexed: bool
    store_url: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.published.to_json(), indexed=self.indexed, store=self.store_url)


class Publishing(Protocol):
    """The fields every publishing request (push, capture, precompile) shares."""

    @property
    def environ(self) -> Mapping[str, str] | None: ...
    @property
    def store(self) -> str | None: ...
    @property
    def index(self) -> str | None: ...
    @property
    def python(self) -> str | None: ...
    @property
    def allow_missing_packages(self) -> bool: ...
    @property
    def signing_key(self) -> str | Path | None: ...


@dataclass(frozen=True, slots=True)
class Publisher:
    """Where and as what a use case publishes."""

    settings: Settings
    fingerprint: Fingerprint
    signer: SigningKey | None
    store: Store

    def record(self, manifest: Manifest, notice: Callable[[str], None] | None) -> bool:
        """Record a published entry in the index; True when it was, else a notice and False."""
        from neffcache.index import open_index

        settings = self.settings
        try:
            with open_index(settings.index_url, auto_upgrade=settings.index_is_embedded) as index:
                index.record_entry(manifest, self.store.url)
            return True
        except NeffcacheError as exc:
            if notice is not None:
                notice(f"warning: entry not recorded in the index: {' '.join(str(exc).split())}")
                notice(f"hint: {exc.hint or 'neffcache reindex'}")
            return False


def open_publisher(request: Publishing, backend: str,
                   env: Mapping[str, str] | None = None) -> Publisher:
    """The settings, this host's fingerprint (collected in ``env``, default the request's
    environment) checked usable and publishable, the signing key and the open store."""
    from neffcache.command_steps import open_checked_store
    from neffcache.config import read_settings
    from neffcache.fingerprint import (
        check_publishable,
        check_usable,
        collect_fingerprint,
        described_interpreter,
    )
    from neffcache.keys import signer_for

    environ = os.environ if request.environ is None else request.environ
    settings = read_settings(environ, store=request.store, index=request.index,
                             python=request.python)
    fingerprint = collect_fingerprint(backend, env or environ, python=settings.python)
    check_usable(fingerprint)  # an unknown neuron target never matches: never publish under it
    check_publishable(fingerprint, described_interpreter(settings.python),
                      allow_missing=request.allow_missing_packages, environ=environ)
    signer = signer_for(request.signing_key, settings)
    return Publisher(settings, fingerprint, signer,
                     open_checked_store(settings.store_url, create=True))


def push(request: PushRequest) -> PushResult:
    """Publish the files under each cache root as one cell's entry on this host's fingerprint,
    then index it (``neffcache push --help``). Raises UsageError (2) for a cell or root that
    cannot be used, FingerprintMismatchError (5), UnavailableError (6); an index failure is
    only a notice."""
    from neffcache.backends import get_backend

    cell, default_backend = _load_cell(request)
    name = request.backend or default_backend
    if not name:
        raise UsageError("--backend: required with a --cell-json that has no `backend` key")
    backend = get_backend(name)
    roots = parse_roots(request.roots, backend)
    to = open_publisher(request, backend.name)
    result = publish_with(to.store, cell, to.fingerprint, backend, roots, PublishOptions(
        compile_seconds=request.compile_seconds, workers=request.workers, signer=to.signer))
    return PushResult(result, to.record(result.manifest, request.notice), to.store.url)


def _load_cell(request: PushRequest) -> tuple[Cell, str | None]:
    """The cell and the backend it names (None when it names none)."""
    cell_json, matrix, cell_id = request.cell_json, request.matrix, request.cell_id
    if request.cell is not None:
        if cell_json or matrix or cell_id:
            raise UsageError("give the cell once: a Cell, --cell-json, or --matrix with --cell")
        return request.cell, None
    if cell_json and (matrix or cell_id):
        raise UsageError("give either --cell-json or --matrix with --cell, not both")
    if cell_json:
        return _read_cell_json(str(cell_json))
    if not (matrix and cell_id):
        raise UsageError("name the cell: --cell-json FILE, or --matrix MATRIX --cell ID")
    from neffcache.matrix_io import load_matrix

    m = load_matrix(matrix)
    for c in m.cells:
        if c.id == cell_id:
            return c, m.backend
    some = ", ".join(c.id for c in m.cells[:3])
    raise UsageError(f"--cell {cell_id!r}: no such cell in {matrix} (cells look like {some})")


def _read_cell_json(cell_json: str) -> tuple[Cell, str | None]:
    try:
        text = sys.stdin.read() if cell_json == "-" else Path(cell_json).read_text("utf-8")
        data = json.loads(text)
    except OSError as exc:
        raise UsageError(f"{cell_json}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"{cell_json}: not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{cell_json}: expected a JSON object (a cell)")
    data = data.get("cell", data)
    try:
        return Cell.from_json(data), data.get("backend")
    except MatrixError as exc:
        raise UsageError(f"{cell_json}: {exc}") from None


def parse_roots(roots: Mapping[str, str | Path] | Sequence[str],
                backend: Backend) -> dict[str, Path]:
    """Each cache root's directory, from a mapping or ``NAME=DIR`` strings."""
    specs = ([f"{name}={directory}" for name, directory in roots.items()]
             if isinstance(roots, Mapping) else [roots] if isinstance(roots, str) else list(roots))
    if not specs:
        raise UsageError(f"--root: name at least one cache root, e.g. "
                         f"{backend.root_names[0]}=/tmp/cache")
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, directory = spec.partition("=")
        if not sep or not name or not directory:
            raise UsageError(f"--root {spec!r}: expected NAME=DIR, e.g. "
                             f"{backend.root_names[0]}=/tmp/cache")
        backend.root(name)
        if name in out:
            raise UsageError(f"--root {name}: given twice")
        out[name] = Path(directory).expanduser()
    return out
