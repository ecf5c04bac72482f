"""A restore's file system: ``O_NOFOLLOW`` descriptors, DIR's lock, temp names and their sweep."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from neffcache.errors import DeadlineExceededError, UsageError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TMP_PREFIX = ".neffcache-"
TMP_SUFFIX = ".tmp"
_TMP = f"{TMP_PREFIX}{uuid.uuid4().hex[:8]}-"  # unique per process; a counter after it
_names = itertools.count()
_MAX_OPEN_DIRS = 64  # per DirCache: ``trim`` closes them beyond that
ENTRIES_DIR = ".neffcache-entries"  # manifest copies, missing.json and the lock
LOCK_FILE = "lock"
_POLL = (0.02, 0.25)  # first and longest wait between tries for a lock held elsewhere


class UnsafePathError(OSError):
    """A path component inside a target root is a symlink or not a directory."""


def tmp_name() -> str:
    return f"{_TMP}{next(_names):x}{TMP_SUFFIX}"


def replace_best_effort(final: Path, pieces: Iterable[bytes]) -> None:
    """Write ``pieces`` to ``final`` through a rename, not fsynced, OSError ignored."""
    tmp = final.with_name(tmp_name())
    with contextlib.suppress(OSError):
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as fh:
                fh.writelines(pieces)
            os.replace(tmp, final)
        finally:
            tmp.unlink(missing_ok=True)


def open_dir_at(parent: str | int, name: str, *, create: bool, what: str) -> int:
    """The descriptor of directory ``name`` in ``parent``, created if asked, never through a
    symlink (one there, or a file: ``UsageError``)."""
    pfd = parent if isinstance(parent, int) else \
        os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=pfd)
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=pfd)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
        kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
        raise UsageError(f"{what} is {kind}: restore never follows a symlink out of the "
                         f"destination; remove it (or restore to another --to)")
    finally:
        if pfd is not parent:
            os.close(pfd)


class Roots:
    """Open descriptors of each target root (missing: created, or left out); never a symlink."""

    def __init__(self, target_dirs: Mapping[str, str], *, create: bool = True) -> None:
        self.fds: dict[str, int] = {}
        self.real: dict[str, str] = {}  # each root's resolved path, for _assert_inside
        self.created: set[tuple[str, str]] = set()  # directories this restore made
        try:
            for name, d in sorted(target_dirs.items()):
                base, _, leaf = d.rstrip("/").rpartition("/")
                base = base or "/"
                if create:
                    os.makedirs(base, exist_ok=True)
                elif not os.path.lexists(d):
                    continue
                self.fds[name] = open_dir_at(base, leaf, create=create, what=d)
                self.real[name] = f"{os.path.realpath(base).rstrip('/')}/{leaf}"
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    def __enter__(self) -> Roots:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class DirCache:
    """Directory descriptors inside the roots for one thread, each opened once from its parent with
    ``O_NOFOLLOW`` and checked to lie inside its root."""

    def __init__(self, roots: Roots, *, check_inside: bool = True) -> None:
        self.roots = roots
        self.check_inside = check_inside
        self.fds: dict[tuple[str, str], int] = {}

    def get(self, root: str, dir_path: str, *, create: bool) -> int:
        """The descriptor of ``dir_path`` ("" for the root itself) inside ``root``."""
        if not dir_path:
            return self.roots.fds[root]
        key = (root, dir_path)
        fd = self.fds.get(key)
        if fd is not None:
            return fd
        parent, _, name = dir_path.rpartition("/")
        pfd = self.get(root, parent, create=create)
        created = self.roots.created
        # Under a directory this restore created, the child cannot exist yet: mkdir first.
        made = create and (root, parent) in created and self._mkdir(root, parent, name, pfd)
        while True:
            try:
                fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
                break
            except FileNotFoundError:
                if not create or made:
                    raise
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a symlink or file in the way
                    raise UnsafePathError(exc.errno, f"{root}/{dir_path}: component {name!r} "
                                          f"is a symlink or not a directory; refusing to "
                                          f"follow it") from None
                raise
            made = self._mkdir(root, parent, name, pfd) or True
        try:
            # A directory made by this restore, opened without following links from a checked
            # parent, needs no further check; one that was there already gets one.
            if self.check_inside and key not in created:
                _assert_inside(fd, self.roots.real[root], root, dir_path)
        except BaseException:
            os.close(fd)
            raise
        self.fds[key] = fd
        return fd

    def _mkdir(self, root: str, parent: str, name: str, pfd: int) -> bool:
        """Create ``parent/name``; True if this call created it (another thread may win)."""
        try:
            os.mkdir(name, 0o755, dir_fd=pfd)
        except FileExistsError:
            return False
        self.roots.created.add((root, f"{parent}/{name}" if parent else name))
        return True

    def trim(self) -> None:
        if len(self.fds) >= _MAX_OPEN_DIRS:
            self.close()

    def close(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)


def _assert_inside(fd: int, real_root: str, root: str, dir_path: str) -> None:
    """Defence in depth: the directory just opened must be ``<resolved root>/<dir_path>``."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if real != f"{real_root.rstrip('/')}/{dir_path}":
        raise UnsafePathError(1, f"{root}/{dir_path}: resolves to {real}, outside the target "
                              f"root {real_root}")


def datasync_at(dfd: int, path: str, same: Callable[[os.stat_result], bool]) -> bool:
    """``fdatasync`` the file at ``path`` under ``dfd`` if ``same(its stat)``; True if it did."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    try:
        if not same(os.fstat(fd)):
            return False
        os.fdatasync(fd)
        return True
    finally:
        os.close(fd)


_BOOT_ID: list[str | None] = []


def boot_id() -> str | None:
    """This boot's id (``/proc/sys/kernel/random/boot_id``), None where unknown."""
    if not _BOOT_ID:
        try:
            _BOOT_ID.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None)
        except OSError:
            _BOOT_ID.append(None)
    return _BOOT_ID[0]


def sync_filesystems(fds: Iterable[int]) -> bool:
    """``syncfs(2)`` once per filesystem; False where unavailable. Restore never uses it."""
    import ctypes

    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux
        return False
    for fd in {os.fstat(fd).st_dev: fd for fd in fds}.values():
        if syncfs(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    return True


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
        with contextlib.suppress(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
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
        if not name.startswith(TMP_PREFIX) or not name.endswith(TMP_SUFFIX) \
                or len(name) <= len(TMP_PREFIX) + len(TMP_SUFFIX):
            continue
        with contextlib.suppress(FileNotFoundError):
            if not stat.S_ISDIR(os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode):
                os.unlink(name, dir_fd=dfd)
                n += 1
    return n
