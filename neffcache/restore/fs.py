"""File-system primitives of a restore: ``O_NOFOLLOW`` descriptors, ``fdatasync``, temp names."""

from __future__ import annotations

import contextlib
import errno
import functools
import itertools
import os
import stat
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from neffcache.errors import UsageError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TMP_PREFIX = ".neffcache-"
TMP_SUFFIX = ".tmp"
_TMP = f"{TMP_PREFIX}{uuid.uuid4().hex[:8]}-"  # unique per process; a counter after it
_names = itertools.count()
_MAX_OPEN_DIRS = 64  # per DirCache: ``trim`` closes them beyond that


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


def is_temp(name: str) -> bool:
    return name.startswith(TMP_PREFIX) and name.endswith(TMP_SUFFIX) and \
        len(name) > len(TMP_PREFIX) + len(TMP_SUFFIX)


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
    syncfs = _libc_function("syncfs", "c_int")
    if syncfs is None:
        return False
    one_per_fs = {os.fstat(fd).st_dev: fd for fd in fds}
    for fd in one_per_fs.values():
        if syncfs(fd) != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
    return True


@functools.cache  # looked up once per process
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
    found: Callable[..., int] = fn
    return found
