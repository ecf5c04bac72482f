"""File-system primitives of a restore (the bottom layer): directory descriptors, syncfs.

Files are written through directory descriptors opened one component at a time with
``O_NOFOLLOW`` (``DirCache``): a symlink planted inside a target directory is never followed, so
nothing is written outside the root. Durability is batched: ``syncfs`` where Linux has it (via
ctypes), else fsync per file and directory. Nothing here knows about entries or the store.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TMP_PREFIX = ".neffcache-"
TMP_SUFFIX = ".tmp"
_MAX_OPEN_DIRS = 64  # per DirCache: ``trim`` syncs and closes them beyond that


class UnsafePathError(OSError):
    """A path component inside a target root is a symlink or not a directory."""



# --- directory descriptors --------------------------------------------------------------------

class Roots:
    """Open descriptors of each target root (created if needed; with ``create=False`` a
    missing root is left out, for a look that must write nothing); close when done."""

    def __init__(self, target_dirs: Mapping[str, str], *, create: bool = True) -> None:
        self.fds: dict[str, int] = {}
        self.dirs = dict(target_dirs)
        self.real: dict[str, str] = {}  # each root's resolved path, for _assert_inside
        self.created: set[tuple[str, str]] = set()  # directories this restore made
        try:
            for name, d in sorted(target_dirs.items()):
                if create:
                    os.makedirs(d, exist_ok=True)
                elif not os.path.isdir(d):
                    continue
                self.fds[name] = os.open(d, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                self.real[name] = os.path.realpath(d)
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

    @contextlib.contextmanager
    def parent(self, root: str, path: str, *, create: bool) -> Iterator[int]:
        """The descriptor of a file's directory inside ``root``, never through a symlink."""
        dirs = DirCache(self)
        try:
            yield dirs.get(root, path.rpartition("/")[0], create=create)
        finally:
            dirs.close()


class DirCache:
    """Directory descriptors inside the roots for one thread: each opened once, from its parent,
    with ``O_NOFOLLOW`` (created first when asked), and checked to lie inside its root. Records
    which directories gained entries, so ``sync`` fsyncs each of them once. Descriptors stay
    valid until ``trim`` or ``close``, which the owner calls between batches of work."""

    def __init__(self, roots: Roots, *, check_inside: bool = True) -> None:
        self.roots = roots
        self.check_inside = check_inside
        self.fds: dict[tuple[str, str], int] = {}
        self.dirty: set[tuple[str, str]] = set()

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
        self.dirty.add((root, parent))  # a new entry in the parent
        self.roots.created.add((root, f"{parent}/{name}" if parent else name))
        return True

    def touched(self, root: str, dir_path: str) -> None:
        """A file was renamed into ``dir_path``: fsync it at the next ``sync``."""
        self.dirty.add((root, dir_path))

    def sync(self) -> None:
        """Make every directory that gained an entry since the last sync durable: one
        ``syncfs`` per root where Linux offers it, else an fsync per directory (all are still
        open: the cache syncs before it closes anything)."""
        dirty, self.dirty = self.dirty, set()
        if dirty and sync_filesystems(self.roots.fds[r] for r, _ in dirty):
            return
        for root, dir_path in sorted(dirty):
            os.fsync(self.fds[(root, dir_path)] if dir_path else self.roots.fds[root])

    def trim(self) -> None:
        """Bound the descriptors held: past the limit, sync the dirty ones and close all."""
        if len(self.fds) >= _MAX_OPEN_DIRS:
            self.sync()
            self._close_all()

    def close(self) -> None:
        self._close_all()

    def _close_all(self) -> None:
        fds, self.fds = self.fds, {}
        for fd in fds.values():
            os.close(fd)


def _assert_inside(fd: int, real_root: str, root: str, dir_path: str) -> None:
    """Defence in depth: the directory just opened (component by component, no symlinks) must
    be exactly ``<resolved root>/<dir_path>``; one readlink of /proc/self/fd (skipped where
    there is no /proc)."""
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return
    if real != f"{real_root.rstrip('/')}/{dir_path}":
        raise UnsafePathError(1, f"{root}/{dir_path}: resolves to {real}, outside the target "
                              f"root {real_root}")


_syncfs: Callable[[int], int] | None | bool = False  # False: not looked up yet


def sync_filesystems(fds: Iterable[int]) -> bool:
    """``syncfs(2)`` once for each distinct descriptor: everything dirty on its filesystem is
    written back, in one call instead of one fsync per file and directory (on ext4 without a
    journal, as on many VMs, per-file fsync also writes each inode and parent synchronously).
    False where syncfs is not available (then the caller fsyncs file by file)."""
    global _syncfs
    if _syncfs is False:
        _syncfs = _find_syncfs()
    if _syncfs is None:
        return False
    for fd in set(fds):
        if _syncfs(fd) != 0:  # type: ignore[operator]
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    return True


def _find_syncfs() -> Callable[[int], int] | None:
    return _libc_function("syncfs", "c_int")  # type: ignore[return-value]


_sync_file_range: Callable[[int, int, int, int], int] | None | bool = False
_SYNC_FILE_RANGE_WRITE = 2


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing a range of a file to disk now, without waiting
    (``sync_file_range(2)``, Linux), so the fsync at the end has less left to wait for. A hint:
    where unavailable or failing, nothing happens (the fsync still makes the file durable)."""
    global _sync_file_range
    if _sync_file_range is False:
        _sync_file_range = _libc_function("sync_file_range", "c_int", "c_longlong",
                                          "c_longlong", "c_uint")
    if _sync_file_range is not None and length > 0:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)  # type: ignore[operator]


def _libc_function(name: str, *argtypes: str) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
        fn.argtypes = [getattr(ctypes, a) for a in argtypes]
        fn.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return fn  # type: ignore[no-any-return]
