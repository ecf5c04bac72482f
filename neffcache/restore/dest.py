"""The destination DIR of a restore: its lock, a killed restore's mark, stale temp files."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from neffcache.errors import DeadlineExceededError, UsageError
from neffcache.restore.fs import DirCache, Roots, is_temp, open_dir_at

ENTRIES_DIR = ".neffcache-entries"  # manifest copies, missing.json and the lock
LOCK_FILE = "lock"
_POLL = (0.02, 0.25)  # first and longest wait between tries for a lock held elsewhere


def local_manifest_path(target: str | Path, key: str) -> Path:
    return Path(target, ENTRIES_DIR, f"{key}.json")


class Held:
    """The lock on a destination, held: ``unclean`` says the last restore did not finish."""

    def __init__(self, fd: int, entries_fd: int, unclean: bool) -> None:
        self.fd, self.entries_fd, self.unclean = fd, entries_fd, unclean

    def finished(self) -> None:
        """This restore ended (whatever its outcome): clear the mark."""
        os.ftruncate(self.fd, 0)


@contextlib.contextmanager
def lock_destination(target: str, *, deadline: float | None = None,
                     on_wait: Callable[[str], None] | None = None,
                     who: str = "restore") -> Iterator[Held]:
    """Hold DIR's restore lock for the block; one held elsewhere is waited for, until ``deadline``
    at most (``DeadlineExceededError``); ``on_wait`` is told once who holds it."""
    try:
        os.makedirs(target, exist_ok=True)
        efd = open_dir_at(target, ENTRIES_DIR, create=True,
                          what=f"{target.rstrip('/')}/{ENTRIES_DIR}")
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        raise UsageError(f"{target}: cannot write there ({exc.strerror}): restore needs a "
                         "writable DIR") from None
    fd = -1
    try:
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                     dir_fd=efd)
        _acquire(fd, target, deadline, on_wait)
        unclean = os.fstat(fd).st_size > 0
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{who} pid {os.getpid()} since {time.time():.0f}\n".encode(), 0)
        yield Held(fd, efd, unclean)
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock
        os.close(efd)


def _acquire(fd: int, target: str, deadline: float | None,
             on_wait: Callable[[str], None] | None) -> None:
    pause, holder = _POLL[0], ""
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if not holder:  # told once
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another restore"
            if on_wait is not None:
                on_wait(f"waiting for {holder} into {target} to finish (one restore per directory)")
        if deadline is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError(
                f"deadline reached while waiting for {holder} into {target} to finish "
                f"(one restore per directory); nothing was restored by this run")
        time.sleep(min(pause, left))
        pause = min(pause * 2, _POLL[1])


def is_unclean(target: str) -> bool:
    """Whether DIR's lock file is marked: a restore runs there or was killed. One stat."""
    try:
        return os.stat(f"{target.rstrip('/')}/{ENTRIES_DIR}/{LOCK_FILE}",
                       follow_symlinks=False).st_size > 0
    except OSError:
        return False


def sweep_dirs(roots: Roots, dirs: Iterable[tuple[str, str]]) -> int:
    """Remove every temp file directly in each existing ``(root, dir path)``; how many."""
    missing: set[tuple[str, str]] = set()
    n = 0
    with contextlib.closing(DirCache(roots, check_inside=False)) as cache:
        for root, dir_path in sorted(set(dirs)):
            fd = _existing(cache, missing, root, dir_path)
            if fd is None:
                continue
            n += sweep_temps(fd)
            cache.trim()
    return n


def _existing(cache: DirCache, missing: set[tuple[str, str]], root: str,
              dir_path: str) -> int | None:
    """The descriptor of an existing directory, or None (absent ones remembered in ``missing``)."""
    parent = dir_path.rpartition("/")[0]
    if (root, dir_path) in missing:
        return None
    if not parent or _existing(cache, missing, root, parent) is not None:
        with contextlib.suppress(OSError):  # absent (nothing stale there), or not a directory
            return cache.get(root, dir_path, create=False)
    missing.add((root, dir_path))
    return None


def sweep_trees(roots: Roots) -> int:
    """Remove every temp file anywhere under the roots (never through a symlink); how many."""
    n = 0
    for fd in roots.fds.values():
        for _dir, _subdirs, files, dfd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            n += sweep_temps(dfd, files)
    return n


def sweep_temps(dfd: int, names: Iterable[str] | None = None) -> int:
    """Remove the temp files directly in directory ``dfd`` (among ``names``, else all); how many."""
    n = 0
    for name in os.listdir(dfd) if names is None else names:
        if not is_temp(name):
            continue
        try:
            if stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                continue
            os.unlink(name, dir_fd=dfd)
            n += 1
        except FileNotFoundError:
            continue
    return n
