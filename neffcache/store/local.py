"""A store in a local directory (the embedded default: ``$NEFFCACHE_HOME/store``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from neffcache.errors import ConfigError, NotFoundError, UnavailableError, UsageError
from neffcache.store.base import FileRange, Store, TempFile, check_key, recognise_store

_CHUNK = 1 << 20
TEMP_PREFIX = ".tmp-"
TEMP_GRACE_SECONDS = 3600.0  # a live writer's temp file older than this is stale too


class LocalStore(Store):
    """Only ``create`` creates the directory: a typo in --store is a ConfigError, not a miss."""

    def __init__(self, root: str | Path, *, create: bool = True) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = f"file://{self.root}"
        self.create = create

    def _require_root(self) -> None:
        if self.create:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise UnavailableError(f"store {self.root}: cannot create: "
                                       f"{exc.strerror}") from None
        elif not self.root.is_dir():
            raise ConfigError(f"store {self.root}: no such directory (a local store is "
                              "created by push or precompile)",
                              hint="check --store / NEFFCACHE_STORE")

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*check_key(key).split("/"))

    def check(self) -> None:
        self._require_root()
        if not os.access(self.root, os.R_OK | os.X_OK):
            raise UnavailableError(f"store {self.root}: not readable")
        recognise_store(self, create=self.create)

    def has(self, key: str) -> bool:
        return self._path(key).is_file()

    def open(self, key: str, start: int = 0, length: int | None = None) -> BinaryIO:
        if start < 0 or (length is not None and length < 0):
            raise UsageError(f"{self.url}/{key}: negative range start={start} length={length}")
        try:
            fh = open(self._path(key), "rb")
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"{self.url}/{key}: not found") from None
        except OSError as exc:
            raise UnavailableError(f"{self.url}/{key}: {exc.strerror}") from None
        if start == 0 and length is None:
            return fh
        left = max(0, os.fstat(fh.fileno()).st_size - start)
        body = FileRange(fh, start, left if length is None else min(length, left),
                         f"{self.url}/{key}", owned=True)
        return body  # type: ignore[return-value]

    def put(self, key: str, source: BinaryIO, *, if_absent: bool = True) -> bool:
        final = self._path(key)
        self._require_root()
        if if_absent and final.exists():
            return False
        tmp: str | None = None
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{os.getpid()}-", dir=final.parent)
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(source, out, _CHUNK)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o644)
            if if_absent:
                try:  # an atomic create-if-absent
                    os.link(tmp, final)
                except FileExistsError:
                    return False
            else:
                os.replace(tmp, final)
            return True
        except OSError as exc:
            raise UnavailableError(f"{self.url}/{key}: cannot write: {exc.strerror}") from None
        finally:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def list(self, prefix: str) -> Iterator[str]:
        return self._keys(prefix, temps=False)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()

    def stale_temps(self, grace: float = TEMP_GRACE_SECONDS) -> Iterator[TempFile]:
        """Temp files whose writer (its PID in the name) is dead, or older than ``grace``."""
        now = time.time()
        for key in self._keys("", temps=True):
            try:
                st = self.root.joinpath(key).lstat()
            except FileNotFoundError:
                continue
            if now - st.st_mtime >= grace or not _writer_alive(key.rpartition("/")[2]):
                yield TempFile(key, st.st_size, st.st_mtime)

    def _keys(self, prefix: str, *, temps: bool) -> Iterator[str]:
        """The keys under ``prefix``: of the objects, or (``temps``) of writers' temp files."""
        for dirpath, _dirs, files in os.walk(self.root / prefix.rstrip("/")):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if name.startswith(TEMP_PREFIX) == temps and key.startswith(prefix):
                    yield key

    def remove_temp(self, temp: TempFile) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.root / temp.key)


def _writer_alive(name: str) -> bool:
    pid = name[len(TEMP_PREFIX):].partition("-")[0]
    if not pid.isdigit():
        return True  # an older name without a PID: only its age tells
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
