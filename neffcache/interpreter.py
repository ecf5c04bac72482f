"""A fingerprint's interpreter facts: package versions, of this Python or another (a probe)."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from neffcache.errors import ConfigError

ABSENT = "absent"
_SEPARATORS = re.compile(r"[-_.]+")


def normalize(name: str) -> str:
    return _SEPARATORS.sub("_", name).lower()


def versions(names: Iterable[str], path: Sequence[str] | None = None) -> dict[str, str]:
    """The first ``NAME-*.dist-info`` or ``.egg-info`` on the path gives its version (1-3 ms,
    importlib.metadata's 50-65); where the scan cannot be sure (a zip or egg, another
    finder), importlib.metadata answers."""
    from importlib.machinery import PathFinder

    names = list(names)
    if path is None and not all(f is PathFinder or not hasattr(f, "find_distributions")
                                for f in sys.meta_path):
        return {n: _from_importlib(n) for n in names}
    wanted: dict[str, list[str]] = {}
    for n in names:
        wanted.setdefault(normalize(n), []).append(n)
    found: dict[str, str] = {}
    for entry in list(sys.path if path is None else path):
        if not wanted:
            break
        listing = _listing(entry)
        if listing is None:  # a zip, an egg or something else the scan does not read
            return {n: _from_importlib(n) if path is None else ABSENT for n in names}
        for child in (c for c in listing if c.lower().endswith((".dist-info", ".egg-info"))):
            key = normalize(child.lower().rpartition(".")[0].partition("-")[0])
            if key not in wanted:
                continue
            version = _read_version(os.path.join(entry or ".", child))
            for name in wanted.pop(key):
                found[name] = version if version is not None else _from_importlib(name)
    return {n: found.get(n, ABSENT) for n in names}


def _listing(entry: str) -> list[str] | None:
    """[] when it does not exist; None for what the scan cannot read (a zip, an ``.egg``)."""
    if entry.lower().endswith(".egg"):
        return None
    try:
        return os.listdir(entry or ".")
    except NotADirectoryError:
        return None
    except OSError:
        return []


def _read_version(info_dir: str) -> str | None:
    for name in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info_dir, name), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if line in ("\n", "\r\n"):
                        break  # end of the headers
                    if line[:8].lower() == "version:":  # as the email parser reads it
                        return line[8:].lstrip(" \t").rstrip("\r\n")
            return None  # headers without a version: let importlib.metadata decide
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            return None
    return None


def _from_importlib(name: str) -> str:
    import importlib.metadata

    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return ABSENT


# How long the target interpreter gets to answer (start-up plus a few metadata lookups).
PROBE_TIMEOUT = 5.0
HINT = ("point --python, NEFFCACHE_PYTHON or the config key `python` at the interpreter that "
        "runs inference, e.g. /opt/venv/bin/python")
_MARKER = "neffcache-probe:"

# Python 3.8+, stdlib only, torch located but never imported; argv[1]: the distribution names.
# `-c` puts the working directory first on sys.path; the service does not have it there.
PROBE_SCRIPT = f"""\
import json, os, platform, sys
if sys.path and sys.path[0] == "":
    del sys.path[0]
import importlib.metadata as md
import importlib.util
versions = {{}}
for name in json.loads(sys.argv[1]):
    try:
        versions[name] = md.version(name)
    except md.PackageNotFoundError:
        versions[name] = None
spec = importlib.util.find_spec("torch")
places = list(spec.submodule_search_locations or []) if spec is not None else []
print({_MARKER!r} + json.dumps({{
    "python": platform.python_version(),
    "versions": versions,
    "torch_path": os.path.realpath(places[0]) if places else None,
}}))
"""


@dataclass(frozen=True, slots=True)
class InterpreterFacts:
    path: str
    python_version: str
    versions: tuple[tuple[str, str], ...]  # (distribution, version or 'absent')
    torch_path: str  # the torch package directory, resolved, or 'absent'

    @property
    def version_map(self) -> dict[str, str]:
        return dict(self.versions)


def parse_probe_output(stdout: str, names: Sequence[str], path: str) -> InterpreterFacts:
    """From the last marked line of stdout (site hooks may print)."""
    lines = [line for line in stdout.splitlines() if line.startswith(_MARKER)]
    if not lines:
        raise ValueError("no answer from the probe script")
    doc = json.loads(lines[-1][len(_MARKER):])
    doc = doc if isinstance(doc, dict) else {}
    found, python, torch_path = doc.get("versions"), doc.get("python"), doc.get("torch_path")
    if not isinstance(found, dict) or not isinstance(python, str) or not python \
            or not (torch_path is None or isinstance(torch_path, str)):
        raise ValueError("the probe's answer lacks versions or the Python version")
    for name in names:
        if not isinstance(found.get(name), (str, type(None))):
            raise ValueError(f"version of {name!r} is not a string")
    versions = tuple((name, found.get(name) or ABSENT) for name in names)
    return InterpreterFacts(path=path, python_version=python, versions=versions,
                            torch_path=torch_path or ABSENT)


def resolve_interpreter(value: str) -> str:
    """The absolute path of ``value`` (a path, or a name on PATH). Symlinks are kept: only a
    venv's own ``bin/python`` gives the venv's packages."""
    import shutil  # not at the top: its archive modules would cost every boot ~3 ms

    if os.sep not in value:
        found = shutil.which(value)
        if found is None:
            raise ConfigError(f"python interpreter {value!r}: not found on PATH", hint=HINT)
        return os.path.abspath(found)
    path = os.path.abspath(os.path.expanduser(value))
    if not os.path.exists(path):
        raise ConfigError(f"python interpreter {path}: no such file", hint=HINT)
    if os.path.isdir(path):
        raise ConfigError(f"python interpreter {path}: is a directory, expected an "
                          f"executable such as {path.rstrip('/')}/bin/python", hint=HINT)
    if not os.access(path, os.X_OK):
        raise ConfigError(f"python interpreter {path}: not executable", hint=HINT)
    return path


def probe_interpreter(value: str, names: Sequence[str], *,
                      environ: Mapping[str, str] | None = None,
                      timeout: float = PROBE_TIMEOUT) -> InterpreterFacts:
    """Any failure is a ConfigError naming the interpreter."""
    import subprocess

    path = resolve_interpreter(value)
    try:
        proc = subprocess.run([path, "-c", PROBE_SCRIPT, json.dumps(list(names))],
                              capture_output=True, text=True, errors="replace",
                              stdin=subprocess.DEVNULL, timeout=timeout,
                              env=dict(os.environ if environ is None else environ))
    except subprocess.TimeoutExpired:
        raise ConfigError(f"python interpreter {path}: no answer within {timeout:g} s",
                          hint=HINT) from None
    except OSError as exc:
        raise ConfigError(f"python interpreter {path}: cannot run it: {exc.strerror}",
                          hint=HINT) from None
    if proc.returncode != 0:
        how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 \
            else f"exited with {proc.returncode}"
        raise ConfigError(f"python interpreter {path}: {how} while reading package versions: "
                          f"{_last_line(proc.stderr)}", hint=HINT)
    try:
        return parse_probe_output(proc.stdout, names, path)
    except ValueError as exc:
        raise ConfigError(f"python interpreter {path}: did not answer like Python 3.8 or "
                          f"later ({exc}): {_last_line(proc.stderr or proc.stdout)}",
                          hint=HINT) from None


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no output"
