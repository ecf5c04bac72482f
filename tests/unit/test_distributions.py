"""Distribution versions without importlib.metadata: the same answers as importlib.metadata,
for every distribution in this environment and for the awkward cases on a synthetic path."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from neffcache.interpreter import ABSENT, versions


def reference(name: str, path: list[str]) -> str:
    found = list(importlib.metadata.distributions(name=name, path=path))
    return found[0].version if found else ABSENT


def test_every_installed_distribution_matches_importlib_metadata() -> None:
    names = sorted({d.metadata["Name"] for d in importlib.metadata.distributions()
                    if d.metadata["Name"]})
    assert len(names) > 50  # the probe sees a real environment (so a mismatch can show)
    expected = {}
    for n in names:
        try:
            expected[n] = importlib.metadata.version(n)
        except importlib.metadata.PackageNotFoundError:
            expected[n] = ABSENT
    assert versions(names) == expected


def write_info(parent: Path, dirname: str, version: str, *, egg: bool = False) -> None:
    d = parent / dirname
    d.mkdir(parents=True)
    (d / ("PKG-INFO" if egg else "METADATA")).write_text(
        f"Metadata-Version: 2.1\nName: x\nVersion: {version}\n\nVersion: 9.9 (body)\n")


def test_synthetic_path_matches_importlib_metadata(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    write_info(first, "Foo.Bar-1.0.dist-info", "1.0")
    write_info(second, "foo_bar-2.0.dist-info", "2.0")  # shadowed by the first entry
    write_info(second, "legacy_pkg-0.3-py3.11.egg-info", "0.3", egg=True)
    write_info(second, "spaced-4.0.dist-info", "4.0 ")
    (second / "NotAPkg-1.0.txt").write_text("")
    path = [str(first), str(tmp_path / "missing"), str(second)]
    names = ["foo-bar", "FOO_BAR", "legacy.pkg", "spaced", "nowhere", "notapkg"]
    got = versions(names, path)
    assert got == {n: reference(n, path) for n in names}
    assert got["foo-bar"] == "1.0" and got["legacy.pkg"] == "0.3" and got["nowhere"] == ABSENT


def test_a_zip_on_sys_path_falls_back_to_importlib(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "bundle.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_pkg-1.2.dist-info/METADATA", "Name: zipped-pkg\nVersion: 1.2\n\n")
    monkeypatch.setattr(sys, "path", [str(archive), *sys.path])
    assert versions(["zipped-pkg"]) == {"zipped-pkg": "1.2"}


def test_collecting_a_fingerprint_does_not_import_importlib_metadata() -> None:
    code = ("import os, sys; from neffcache.fingerprint import collect_fingerprint as c\n"
            "c('neuron', os.environ); c('inductor', os.environ)\n"
            "assert 'importlib.metadata' not in sys.modules, 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
