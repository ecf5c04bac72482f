"""Host fingerprint: what must match between the compiling and the restoring machine."""

from __future__ import annotations

import glob
import importlib.util
import os
import platform
import re
import shlex
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neffcache.backends import neuron_env
from neffcache.documents import digest_of
from neffcache.errors import FingerprintMismatchError, UsageError
from neffcache.interpreter import ABSENT, probe_interpreter, resolve_interpreter, versions

SCHEMA_VERSION = 1
UNKNOWN = "unknown"
COMMON_DISTRIBUTIONS = ("torch", "diffusers", "transformers")
# CPU flags that change which kernels inductor generates (its C++ keys include the ISA).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq",
             "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "asimd", "sve", "sve2")
# Inductor variables that only say where or how fast to work, not what to generate.
_INDUCTOR_NEUTRAL_VARS = {"TORCHINDUCTOR_CACHE_DIR", "TORCHINDUCTOR_COMPILE_THREADS",
                          "TORCHINDUCTOR_FX_GRAPH_CACHE", "TORCHINDUCTOR_AUTOGRAD_CACHE",
                          "TORCHINDUCTOR_FORCE_DISABLE_CACHES"}
_DMI_PRODUCT = Path("/sys/devices/virtual/dmi/id/product_name")
_DPKG_STATUS = Path("/var/lib/dpkg/status")
_TARGET_RE = re.compile(r"^(trn\d+|inf\d+)")
INSTANCE_TYPE_OVERRIDE = "NEFFCACHE_INSTANCE_TYPE"
RUNTIME_FIELD = "version.neuron-runtime"
# Why a field matters, shown by `neffcache fingerprint --explain` next to the two values.
FIELD_NOTES: dict[str, str] = {
    "backend": "the compiler backend (neuron or inductor)",
    "version.torch": "torch traces the graphs the compiler sees",
    "version.python": "Python version of the compiling process",
    "version.diffusers": "diffusers builds the model code that is traced",
    "version.transformers": "transformers builds the text encoder code that is traced",
    "version.torch-neuronx": "TorchNeuron lowers the graphs; its own cache key ignores it",
    "version.neuronx-cc": "the compiler that wrote the NEFFs; TorchNeuron's own key ignores it",
    "version.neuronx-nki": "NKI kernels compiled into the NEFFs",
    "version.nki": "NKI kernels compiled into the NEFFs",
    "version.libneuronxla": "the XLA bridge of older torch-neuronx builds",
    "target": f"Trainium generation the NEFFs were compiled for ({neuron_env.PLATFORM_TARGET} "
              f"or the EC2 instance type)",
    "lnc": f"logical NeuronCore config ({neuron_env.LOGICAL_NC_CONFIG})",
    "cc_flags": f"compiler flags ({neuron_env.CC_FLAGS}, order and spacing ignored)",
    "opt_level": f"optimisation level named in {neuron_env.CC_FLAGS}",
    "torch.path": "inductor's C++ kernel keys include the torch install path",
    "cpu.arch": "CPU architecture of the generated kernels",
    "cpu.isa": "CPU instruction sets inductor generates code for",
    "cpu.threads": "OMP thread count (enters inductor's kernel keys)",
    "inductor.settings": "TORCHINDUCTOR_* settings that change generated code",
}


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A backend name plus sorted (field, value) pairs; ``key`` is their canonical digest.
    ``info`` (instance type, runtime version) never enters the key: the compiler ignores it."""

    backend: str
    fields: tuple[tuple[str, str], ...]
    info: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    @property
    def key(self) -> str:
        return digest_of({"schema_version": SCHEMA_VERSION, "backend": self.backend,
                          "fields": dict(self.fields)})

    @property
    def short(self) -> str:
        return self.key[:12]

    def get(self, name: str, default: str = UNKNOWN) -> str:
        return dict(self.fields).get(name, default)

    @property
    def unknown_fields(self) -> tuple[str, ...]:
        """Required fields (the neuron target) that could not be determined."""
        required = ("target",) if self.backend == "neuron" else ()
        return tuple(f for f in required if self.get(f) == UNKNOWN)

    def get_info(self, name: str, default: str = UNKNOWN) -> str:
        return dict(self.info).get(name, default)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "backend": self.backend,
                               "fields": dict(self.fields)}
        if self.info:
            doc["info"] = dict(self.info)
        return doc

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fingerprint:
        fields = data.get("fields")
        backend = data.get("backend")
        info = data.get("info") or {}
        if not isinstance(backend, str) or not isinstance(fields, dict) \
                or not isinstance(info, dict):
            raise ValueError("fingerprint needs a backend string and a fields table")
        return build_fingerprint(backend, fields, info)


@dataclass(frozen=True, slots=True)
class FieldDiff:
    name: str
    here: str
    there: str


def build_fingerprint(backend: str, facts: Mapping[str, str],
                      info: Mapping[str, str] | None = None) -> Fingerprint:
    return Fingerprint(backend, tuple(sorted((str(k), str(v)) for k, v in facts.items())),
                       tuple(sorted((str(k), str(v)) for k, v in (info or {}).items())))


def check_usable(fingerprint: Fingerprint) -> None:
    """FingerprintMismatchError: a host with an unknown target neither restores nor publishes."""
    if not fingerprint.unknown_fields:  # only ever the neuron target
        return
    seen = fingerprint.get_info("instance_type")
    raise FingerprintMismatchError(
        f"fingerprint field 'target' is unknown on this host: {neuron_env.PLATFORM_TARGET} "
        f"is not set and the instance type ({seen}) is not a Trainium one; an unknown "
        f"target never matches an entry",
        hint=f"export {neuron_env.PLATFORM_TARGET}=trn2 (or trn3), or "
             f"{INSTANCE_TYPE_OVERRIDE}=trn2.48xlarge")


# What each backend's compile needs in the interpreter that runs it; an entry published
# without them says so in its fingerprint (version.NAME = absent) and matches no real host.
REQUIRED_DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "inductor": ("torch",),
    "neuron": ("torch", "torch-neuronx"),
}
ALLOW_MISSING_FLAG = "--allow-missing-packages"
ALLOW_MISSING_VAR = "NEFFCACHE_ALLOW_MISSING_PACKAGES"  # "1": the flag, for a whole job


def missing_distributions(fingerprint: Fingerprint) -> tuple[str, ...]:
    return tuple(name for name in REQUIRED_DISTRIBUTIONS.get(fingerprint.backend, ())
                 if fingerprint.get(f"version.{name}") == ABSENT)


def check_publishable(fingerprint: Fingerprint, python: str, *, allow_missing: bool = False,
                      environ: Mapping[str, str] | None = None) -> None:
    """UsageError when the interpreter lacks what the backend needs (no inference host would
    match the entry), unless ``allow_missing`` or ``ALLOW_MISSING_VAR`` in ``environ``."""
    missing = missing_distributions(fingerprint)
    forced = (environ or {}).get(ALLOW_MISSING_VAR, "").strip().lower() in ("1", "true", "yes")
    if not missing or allow_missing or forced:
        return
    names = " and ".join(missing)
    raise UsageError(
        f"python interpreter {python}: has no {names}, which the {fingerprint.backend} "
        f"backend needs; the fingerprint would say {names} absent and the entry would match "
        f"no host that runs inference",
        hint=f"install {' '.join(missing)} into that interpreter, point --python (or "
             f"NEFFCACHE_PYTHON) at the interpreter that runs inference, or pass "
             f"{ALLOW_MISSING_FLAG} ({ALLOW_MISSING_VAR}=1) to publish anyway")


def diff_fingerprints(here: Fingerprint, there: Fingerprint) -> tuple[FieldDiff, ...]:
    diffs = diff_pairs(here.fields, there.fields)
    if here.backend != there.backend:
        return (FieldDiff("backend", here.backend, there.backend), *diffs)
    return diffs


def diff_pairs(here: Iterable[tuple[str, str]], there: Iterable[tuple[str, str]]
               ) -> tuple[FieldDiff, ...]:
    a, b = dict(here), dict(there)
    return tuple(FieldDiff(k, a.get(k, "absent"), b.get(k, "absent"))
                 for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))


def _is_option(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not re.match(r"^-\d", token)


def cc_flag_groups(flags: str) -> tuple[tuple[str, str], ...]:
    """(option name, spelling) pairs in order; ``--target trn2`` -> ``--target=trn2``."""
    try:
        tokens = shlex.split(flags)
    except ValueError:
        tokens = flags.split()
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        value = tokens[i + 1] if i + 1 < len(tokens) else None
        takes_next = value is not None and _is_option(tok) and not _is_option(value) \
            and ("=" not in tok if tok.startswith("--") else len(tok) == 2)
        if takes_next:
            tok = f"{tok}={value}" if tok.startswith("--") else f"{tok}{value}"
            i += 1
        i += 1
        if tok.startswith("--"):
            name = tok.split("=", 1)[0]
        elif _is_option(tok):
            name = tok[:2]
        else:
            name = tok  # a stray value stands alone, so it is never glued to another flag
        out.append((name, tok))
    return tuple(out)


def canonical_cc_flags(flags: str) -> str:
    """A stable sort by name: a repeated option keeps its order (the compiler takes the last)."""
    groups = sorted(cc_flag_groups(flags), key=lambda g: g[0])
    return " ".join(shlex.quote(spelling) for _, spelling in groups)


_OPT_RE = re.compile(r"^(?:-O|--optlevel=|--opt-level=)([0-3])$")


def opt_level(flags: str) -> str:
    levels = [m.group(1) for _, spelling in cc_flag_groups(flags)
              for m in [_OPT_RE.match(spelling)] if m]
    return levels[-1] if levels else "default"


def target_from_instance_type(instance_type: str) -> str:
    m = _TARGET_RE.match(instance_type.strip().lower())
    return m.group(1) if m else UNKNOWN


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def probe_instance_type(environ: Mapping[str, str], dmi_path: Path | None = None) -> str:
    """From an override variable, else DMI (EC2 fills product_name); never the network."""
    return (environ.get(INSTANCE_TYPE_OVERRIDE, "").strip()
            or _read_text(dmi_path or _DMI_PRODUCT) or UNKNOWN)


_PARAGRAPH_END = re.compile(r"\n[ \t]*\n")


def runtime_version_from_dpkg_status(text: str, package: str = neuron_env.RUNTIME_PACKAGE
                                     ) -> str | None:
    """None if not installed; only paragraphs naming it are parsed (~1 MB of them, every boot)."""
    named = re.compile(rf"^Package:[ \t]*{re.escape(package)}[ \t]*$", re.MULTILINE)
    for found in named.finditer(text):  # dpkg writes Package first in each paragraph
        end = _PARAGRAPH_END.search(text, found.end())
        para = text[found.start():end.start() if end else len(text)]
        values = {name.strip().lower(): value.strip() for line in para.splitlines()
                  for name, sep, value in [line.partition(":")] if sep and not line[:1].isspace()}
        status = values.get("status", "").split()
        if values.get("package") == package and status[-1:] == ["installed"]:
            return values.get("version") or None
    return None


def runtime_version_from_lib_names(names: Sequence[str],
                                   lib: str = neuron_env.RUNTIME_LIB_NAME) -> str | None:
    """The highest fully versioned ``libnrt.so.X.Y.Z`` among file names."""
    pattern = re.compile(rf"{re.escape(lib)}\.(\d+(?:\.\d+){{2,}})")
    found = [tuple(map(int, m.group(1).split("."))) for name in names
             if (m := pattern.fullmatch(Path(name).name))]
    return ".".join(map(str, max(found))) if found else None


def probe_runtime_version(dpkg_status: Path | None = None,
                          lib_dirs: Sequence[str] = neuron_env.RUNTIME_LIB_DIRS) -> str:
    """From dpkg's status file, else from the runtime library's file name; else 'absent'."""
    try:
        raw = (dpkg_status or _DPKG_STATUS).read_bytes()
    except OSError:
        raw = b""
    # Decoding and scanning ~1 MB costs ~10 ms per boot; most hosts never mention the package.
    named = neuron_env.RUNTIME_PACKAGE.encode() in raw
    version = runtime_version_from_dpkg_status(raw.decode("utf-8", "replace")) if named else None
    if version is None:
        names = [n for d in lib_dirs for n in glob.glob(f"{d}/{neuron_env.RUNTIME_LIB_NAME}.*")]
        version = runtime_version_from_lib_names(names)
    return version or ABSENT


def probe_isa_flags() -> str:
    lines = _read_text(Path("/proc/cpuinfo")).splitlines()
    line = next((x for x in lines if x.startswith(("flags", "Features"))), ":")
    flags = set(line.split(":", 1)[1].split())
    return ",".join(f for f in ISA_FLAGS if f in flags) or "none"


def probe_torch_path() -> str:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "absent"
    return str(Path(list(spec.submodule_search_locations)[0]).resolve())


def interpreter_distributions(backend: str) -> tuple[str, ...]:
    sdk = neuron_env.SDK_DISTRIBUTIONS if backend == "neuron" else ()
    return COMMON_DISTRIBUTIONS + sdk


def interpreter_facts(backend: str, dist_versions: Mapping[str, str], python_version: str,
                      torch_path: str) -> dict[str, str]:
    facts = {f"version.{d}": dist_versions.get(d, ABSENT)
             for d in interpreter_distributions(backend)}
    facts["version.python"] = python_version
    if backend == "inductor":
        facts["torch.path"] = torch_path
    return facts


def collect_fingerprint(backend: str, environ: Mapping[str, str],
                        python: str | None = None) -> Fingerprint:
    """Interpreter facts from ``python`` (it runs inference) when given, else the running one."""
    names = interpreter_distributions(backend)
    if python is None:
        torch_path = probe_torch_path() if backend == "inductor" else ABSENT
        facts = interpreter_facts(backend, versions(names), platform.python_version(), torch_path)
    else:
        found = probe_interpreter(python, names, environ=environ)
        facts = interpreter_facts(backend, found.version_map, found.python_version,
                                  found.torch_path)
    info: dict[str, str] = {}
    if backend == "inductor":
        settings = sorted(f"{k}={v}" for k, v in environ.items()
                          if k.startswith("TORCHINDUCTOR_") and k not in _INDUCTOR_NEUTRAL_VARS)
        facts.update({
            "cpu.arch": platform.machine(), "cpu.isa": probe_isa_flags(),
            "inductor.settings": ";".join(settings) or "default",
            # Measured: a consumer with another OMP thread count misses every kernel.
            "cpu.threads": environ.get("OMP_NUM_THREADS", "").strip() or f"auto:{os.cpu_count()}",
        })
    elif backend == "neuron":
        itype = probe_instance_type(environ)
        flags = environ.get(neuron_env.CC_FLAGS, "")
        facts.update({
            "target": (environ.get(neuron_env.PLATFORM_TARGET, "").strip().lower()
                       or target_from_instance_type(itype)),
            "lnc": environ.get(neuron_env.LOGICAL_NC_CONFIG, "default").strip() or "default",
            "cc_flags": canonical_cc_flags(flags), "opt_level": opt_level(flags)})
        info = {"instance_type": itype, RUNTIME_FIELD: probe_runtime_version()}
    return build_fingerprint(backend, facts, info)


def described_interpreter(python: str | None) -> str:
    return sys.executable if python is None else resolve_interpreter(python)
