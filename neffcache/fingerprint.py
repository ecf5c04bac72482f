"""Host fingerprint: what must match between the machine that compiled and the one restoring.

``build_fingerprint`` and ``diff_fingerprints`` are pure; ``collect_fingerprint`` gathers the
facts with small probes (package metadata, /proc, DMI) and never imports torch or calls the
instance metadata service. Volatile values (host names, temp paths, times) never enter it.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neffcache.backends import neuron_env
from neffcache.canonical import digest_of

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
_TARGET_RE = re.compile(r"^(trn\d+|inf\d+)")
INSTANCE_TYPE_OVERRIDE = "NEFFCACHE_INSTANCE_TYPE"


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """A backend name plus sorted (field, value) pairs; ``key`` is their canonical digest."""

    backend: str
    fields: tuple[tuple[str, str], ...]

    @property
    def key(self) -> str:
        return digest_of(self.to_json())

    @property
    def short(self) -> str:
        return self.key[:12]

    def get(self, name: str, default: str = UNKNOWN) -> str:
        return dict(self.fields).get(name, default)

    @property
    def unknown_fields(self) -> tuple[str, ...]:
        """Fields that must be known for an entry to be usable but could not be determined."""
        required = ("target",) if self.backend == "neuron" else ()
        return tuple(f for f in required if self.get(f) == UNKNOWN)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "backend": self.backend,
                "fields": dict(self.fields)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fingerprint:
        fields = data.get("fields")
        backend = data.get("backend")
        if not isinstance(backend, str) or not isinstance(fields, dict):
            raise ValueError("fingerprint needs a backend string and a fields table")
        return cls(backend=backend,
                   fields=tuple(sorted((str(k), str(v)) for k, v in fields.items())))


@dataclass(frozen=True, slots=True)
class FieldDiff:
    name: str
    here: str
    there: str


def build_fingerprint(backend: str, facts: Mapping[str, str]) -> Fingerprint:
    return Fingerprint(backend=backend, fields=tuple(sorted((k, str(v)) for k, v in facts.items())))


def diff_fingerprints(here: Fingerprint, there: Fingerprint) -> tuple[FieldDiff, ...]:
    """Fields whose values differ (a field missing on one side shows as 'absent')."""
    diffs = []
    if here.backend != there.backend:
        diffs.append(FieldDiff("backend", here.backend, there.backend))
    a, b = dict(here.fields), dict(there.fields)
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            diffs.append(FieldDiff(name, a.get(name, "absent"), b.get(name, "absent")))
    return tuple(diffs)


def canonical_cc_flags(flags: str) -> str:
    """NEURON_CC_FLAGS with order and spacing normalised: `--a  -b` and `-b --a` give one key."""
    try:
        tokens = shlex.split(flags)
    except ValueError:
        tokens = flags.split()
    # Keep a flag together with its separate value (`--target trn2`) before sorting.
    groups: list[str] = []
    for tok in tokens:
        if groups and not tok.startswith("-") and groups[-1].startswith("-") and "=" not in groups[-1] \
                and " " not in groups[-1]:
            groups[-1] = f"{groups[-1]} {tok}"
        else:
            groups.append(tok)
    return " ".join(sorted(groups))


def opt_level(flags: str) -> str:
    """The neuronx-cc optimisation level named in the flags, or 'default'."""
    m = re.findall(r"(?:^|\s)(?:-O|--optlevel[= ]|--opt-level[= ])([0-3])\b", flags)
    return m[-1] if m else "default"


def target_from_instance_type(instance_type: str) -> str:
    m = _TARGET_RE.match(instance_type.strip().lower())
    return m.group(1) if m else UNKNOWN


# --- probes (I/O) -----------------------------------------------------------------------------

def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def probe_instance_type(environ: Mapping[str, str]) -> str:
    """Instance type from an override variable, else DMI (EC2 fills product_name); no network."""
    return environ.get(INSTANCE_TYPE_OVERRIDE) or _read_text(_DMI_PRODUCT) or UNKNOWN


def probe_isa_flags() -> str:
    text = _read_text(Path("/proc/cpuinfo"))
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            flags.update(line.split(":", 1)[1].split())
            break
    return ",".join(f for f in ISA_FLAGS if f in flags) or "none"


def probe_torch_path() -> str:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "absent"
    return str(Path(list(spec.submodule_search_locations)[0]).resolve())


def common_facts() -> dict[str, str]:
    facts = {f"version.{d}": _dist_version(d) for d in COMMON_DISTRIBUTIONS}
    facts["version.python"] = platform.python_version()
    return facts


def inductor_facts(environ: Mapping[str, str]) -> dict[str, str]:
    settings = sorted(f"{k}={v}" for k, v in environ.items()
                      if k.startswith("TORCHINDUCTOR_") and k not in _INDUCTOR_NEUTRAL_VARS)
    return {
        "torch.path": probe_torch_path(),
        "cpu.arch": platform.machine(),
        "cpu.isa": probe_isa_flags(),
        "inductor.settings": ";".join(settings) or "default",
        # Measured: a consumer with another OMP thread count misses every kernel.
        "cpu.threads": environ.get("OMP_NUM_THREADS", "").strip() or f"auto:{os.cpu_count()}",
    }


def neuron_facts(environ: Mapping[str, str]) -> dict[str, str]:
    facts = {f"version.{d}": _dist_version(d) for d in neuron_env.SDK_DISTRIBUTIONS}
    override = environ.get(neuron_env.PLATFORM_TARGET, "").strip().lower()
    facts["target"] = override or target_from_instance_type(probe_instance_type(environ))
    facts["lnc"] = environ.get(neuron_env.LOGICAL_NC_CONFIG, "default").strip() or "default"
    flags = environ.get(neuron_env.CC_FLAGS, "")
    facts["cc_flags"] = canonical_cc_flags(flags)
    facts["opt_level"] = opt_level(flags)
    return facts


def collect_fingerprint(backend: str, environ: Mapping[str, str]) -> Fingerprint:
    """This host's fingerprint for a backend."""
    facts = common_facts()
    if backend == "inductor":
        facts.update(inductor_facts(environ))
    elif backend == "neuron":
        facts.update(neuron_facts(environ))
    return build_fingerprint(backend, facts)
