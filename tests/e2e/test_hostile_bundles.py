"""``neffcache bundle import`` of hostile bundles (truncated anywhere, forged tables of contents,
gzip bombs, duplicate, traversing and link members, wrong digests, a huge member count): each
is refused with exit 4 and a one-line error, installs nothing, and the process writes no more
than its cap (``cap_for``; the kernel's RLIMIT_FSIZE stops any file past it; /proc/self/io
counts the bytes)."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from neffcache.hashing import sha256_bytes
from neffcache.lifecycle.bundle import write_bundle
from neffcache.lifecycle.entry_select import read_manifests, select_entry_keys
from neffcache.store import TOC_NAME, Member, Toc, encode_toc
from neffcache.store.local import LocalStore
from tests.e2e.conftest import MATRIX
from tests.support.lifecycle import cell, publish_synthetic, sdk_fingerprint

MiB = 1 << 20

def cap_for(data: bytes) -> int:
    """The most a bundle may make the process write: a plain tar is never copied (1 MiB is
    stderr's slack); an unauthenticated gzip one expands to at most 16x its size + 16 MiB."""
    return 16 * len(data) + 17 * MiB if data[:2] == b"\x1f\x8b" else MiB


BOMB = 1 << 30  # what the gzip bombs expand to
RECORD = 10240

# Runs the CLI under RLIMIT_FSIZE, then appends the bytes it wrote (wchar) to stderr's end.
RUNNER = """
import resource, sys
resource.setrlimit(resource.RLIMIT_FSIZE, ({cap}, {cap}))
from neffcache.cli import main
try:
    main(sys.argv[1:])
finally:
    wchar = [l for l in open("/proc/self/io") if l.startswith("wchar")][0].split()[1]
    sys.stderr.write("\\nWCHAR " + wchar + "\\n")
"""


class Good:
    def __init__(self, root: Path) -> None:
        store = LocalStore(root / "src")
        for i, h in enumerate((64, 128)):
            publish_synthetic(store, cell(h), sdk_fingerprint("2.19"), root / f"c{h}", seed=i)
        manifests = read_manifests(store, select_entry_keys(store, None))
        self.digest, self.toc = write_bundle(store, manifests, root / "good.bundle")
        self.bytes = (root / "good.bundle").read_bytes()
        write_bundle(store, manifests, root / "good.bundle.gz", gzip=True)
        self.gz = (root / "good.bundle.gz").read_bytes()
        with tarfile.open(fileobj=io.BytesIO(self.bytes)) as tar:
            self.members = [(i.name, tar.extractfile(i).read())  # type: ignore[union-attr]
                            for i in tar.getmembers()[1:]]
            self.toc_end = tar.getmembers()[1].offset


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Good:
    return Good(tmp_path_factory.mktemp("good"))


def tar_bytes(members: list[tuple[str, bytes]], listed: list[tuple[str, bytes]] | None = None,
              extra: list[tarfile.TarInfo] | None = None, *, sizes: dict[str, int] | None = None
              ) -> bytes:
    toc = Toc(entries=(), members=tuple(
        Member(n, (sizes or {}).get(n, len(b)), sha256_bytes(b))
        for n, b in (members if listed is None else listed)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in [(TOC_NAME, encode_toc(toc)), *members]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)
    return buf.getvalue()


def bomb(*, neffcache_format: bool) -> bytes:
    """A gzip stream of ~1 MiB that expands to BOMB bytes: a bundle whose TOC (and tar
    header) claim a 1 GiB blob of zeros, or a bare tar without a TOC."""
    name = "blobs/sha256/00/" + "0" * 64
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=1) as gz:
        if neffcache_format:
            toc = encode_toc(Toc(entries=(), members=(Member(name, BOMB, "0" * 64),)))
            head, member = tarfile.TarInfo(TOC_NAME), tarfile.TarInfo(name)
            head.size, member.size = len(toc), BOMB
            gz.write(head.tobuf(tarfile.GNU_FORMAT) + toc + bytes(-len(toc) % 512)
                     + member.tobuf(tarfile.GNU_FORMAT))  # the zeros follow: its "data"
        zeros = bytes(16 * MiB)
        for _ in range(BOMB // len(zeros)):
            gz.write(zeros)
    return out.getvalue()


def truncated(at: Callable[[Good], int], gz: bool = False) -> Callable[[Good], bytes]:
    return lambda g: (g.gz if gz else g.bytes)[:at(g)]


def flipped(at: Callable[[Good], int]) -> Callable[[Good], bytes]:
    def make(g: Good) -> bytes:
        data = bytearray(g.bytes)
        data[at(g)] ^= 0x01
        return bytes(data)
    return make


def link(kind: bytes, name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = "/etc/passwd"
    return info


def traversal(name: str) -> Callable[[Good], bytes]:
    return lambda g: tar_bytes([*g.members, (name, b"evil")])


def build_cases() -> dict[str, tuple[Callable[[Good], bytes], list[str]]]:
    cases: dict[str, tuple[Callable[[Good], bytes], list[str]]] = {}
    offsets: dict[str, Callable[[Good], int]] = {
        "1": lambda g: 1, "100": lambda g: 100, "511": lambda g: 511, "512": lambda g: 512,
        "in-toc": lambda g: 700, "toc-end-1": lambda g: g.toc_end - 1,
        "toc-end": lambda g: g.toc_end, "first-member": lambda g: g.toc_end + 600,
        "middle": lambda g: len(g.bytes) // 2, "end-marker": lambda g: len(g.bytes) - RECORD,
        "in-padding": lambda g: len(g.bytes) - RECORD // 2,
        "padding-1024": lambda g: len(g.bytes) - 1024, "padding-513": lambda g: len(g.bytes) - 513,
        "last-byte": lambda g: len(g.bytes) - 1}
    for label, at in offsets.items():
        cases[f"truncated-{label}"] = (truncated(at), [])
    for label, at in {"10": lambda g: 10, "half": lambda g: len(g.gz) // 2,
                      "crc": lambda g: len(g.gz) - 6, "last": lambda g: len(g.gz) - 1}.items():
        cases[f"gzip-truncated-{label}"] = (truncated(at, gz=True), [])
    cases["gzip-bomb"] = (lambda g: bomb(neffcache_format=True), [])
    cases["gzip-bomb-wrong-digest"] = (lambda g: bomb(neffcache_format=True),
                                       ["--expect-sha256", "1" * 64])
    cases["gzip-bomb-max-bytes"] = (lambda g: bomb(neffcache_format=True),
                                    ["--max-bytes", str(MiB)])
    cases["gzip-bomb-bare"] = (lambda g: bomb(neffcache_format=False), [])
    cases["toc-size-forged"] = (lambda g: tar_bytes(g.members, sizes={
        g.members[0][0]: len(g.members[0][1]) + 10}), [])
    cases["duplicate-name"] = (lambda g: tar_bytes([*g.members, g.members[0]]), [])
    cases["traversal-dotdot"] = (traversal("../../etc/evil"), [])
    cases["traversal-absolute"] = (traversal("/etc/evil"), [])
    cases["traversal-inside"] = (traversal("blobs/sha256/../../../evil"), [])
    cases["symlink"] = (lambda g: tar_bytes(g.members, extra=[link(tarfile.SYMTYPE, "blobs/x")]),
                        [])
    cases["hardlink"] = (lambda g: tar_bytes(g.members, extra=[link(tarfile.LNKTYPE, "h")]), [])
    cases["fifo"] = (lambda g: tar_bytes(g.members, extra=[link(tarfile.FIFOTYPE, "f")]), [])
    cases["directory"] = (lambda g: tar_bytes(g.members, extra=[link(tarfile.DIRTYPE, "d")]), [])
    cases["wrong-digest"] = (lambda g: g.bytes, ["--expect-sha256", "0" * 64])
    cases["member-bit-flip"] = (flipped(lambda g: g.toc_end + 512 + 3), [])
    cases["padding-bit-flip"] = (flipped(lambda g: len(g.bytes) - 3), [])
    cases["foreign-member"] = (lambda g: tar_bytes([*g.members, ("blobs/sha256/ab/" + "a" * 64,
                                                                 b"x")], listed=g.members), [])
    cases["listed-but-absent"] = (lambda g: tar_bytes(g.members[1:], listed=g.members), [])
    cases["huge-member-count"] = (lambda g: tar_bytes([], listed=[
        (f"blobs/sha256/{i % 256:02x}/{i:064x}", b"") for i in range(200_000)]), [])
    cases["trailing-garbage"] = (lambda g: g.bytes + b"\x01" * RECORD, [])
    cases["not-a-tar"] = (lambda g: b"hello world\n" * 1000, [])
    cases["empty"] = (lambda g: b"", [])
    return cases


CASES = build_cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_bundle_is_refused_and_installs_nothing(case: str, good: Good,
                                                          tmp_path: Path) -> None:
    make, options = CASES[case]
    path = tmp_path / "hostile.bundle"
    data = make(good)
    path.write_bytes(data)
    cap = cap_for(data)
    store = tmp_path / "store"
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp")}
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER.format(cap=cap), "bundle", "import", str(path),
         "--store", str(store), "--json", *options],
        capture_output=True, text=True, env=env, timeout=300)
    err, _, wchar = proc.stderr.rpartition("WCHAR ")
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert lines and lines[0].startswith("Error: ") and "Traceback" not in err, err
    assert len([line for line in lines if not line.startswith("Hint: ")]) == 1, err
    assert int(wchar) <= cap
    installed = [p for p in store.rglob("*") if p.is_file()] if store.exists() else []
    assert installed == [] and proc.stdout == ""
    print(json.dumps({"case": case, "bytes_written": int(wchar), "file_bytes": len(data)}))


def test_the_good_bundles_import(good: Good, tmp_path: Path) -> None:
    """The same runner passes a sound bundle (so the refusals above are about the bundles)."""
    for name, data in (("good.bundle", good.bytes), ("good.bundle.gz", good.gz)):
        path = tmp_path / name
        path.write_bytes(data)
        proc = subprocess.run(
            [sys.executable, "-c", RUNNER.format(cap=cap_for(data)), "bundle", "import",
             str(path),
             "--store", str(tmp_path / "store"), "--expect-sha256", good.digest],
            capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr


RESTORE_CASES = ("gzip-bomb", "gzip-bomb-max-bytes", "gzip-bomb-wrong-digest",
                 "gzip-truncated-half", "truncated-last-byte", "traversal-dotdot", "symlink",
                 "toc-size-forged", "member-bit-flip")


@pytest.mark.parametrize("case", RESTORE_CASES)
def test_restore_from_a_hostile_bundle_is_refused_and_writes_within_the_cap(
        case: str, good: Good, tmp_path: Path) -> None:
    """`restore --from-bundle` shares the opener: the same caps hold (``--max-bytes`` too),
    and nothing lands in the cache directories."""
    make, options = CASES[case]
    path = tmp_path / "hostile.bundle"
    data = make(good)
    path.write_bytes(data)
    cap = cap_for(data)
    (tmp_path / "matrix.toml").write_text(MATRIX)
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_path / "tmp"),
           "NEFFCACHE_INSTANCE_TYPE": "trn2.48xlarge"}
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER.format(cap=cap), "restore", str(tmp_path / "matrix.toml"),
         "--to", str(out), "--from-bundle", str(path), *options],
        capture_output=True, text=True, env=env, timeout=300)
    err, _, wchar = proc.stderr.rpartition("WCHAR ")
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[0].startswith("Error: "), err
    assert int(wchar) <= (2 * MiB if "--max-bytes" in options else cap)  # the operator's cap
    restored = [p for p in (out / "neff").rglob("*") if p.is_file()] if out.exists() else []
    assert restored == []


def test_restore_max_bytes_needs_a_bundle(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text(MATRIX)
    proc = subprocess.run([sys.executable, "-m", "neffcache.cli", "restore",
                           str(tmp_path / "matrix.toml"), "--to", str(tmp_path / "o"),
                           "--max-bytes", "100"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--from-bundle" in proc.stderr
