"""The neuron fingerprint: canonical NEURON_CC_FLAGS, opt level, runtime and instance-type
probes (files only), info fields that never enter the key, check_usable, and one module for
every TorchNeuron variable name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from neffcache import fingerprint as fpmod
from neffcache.backends import neuron_env
from neffcache.errors import FingerprintMismatchError, exit_code_for
from neffcache.fingerprint import (
    Fingerprint,
    build_fingerprint,
    canonical_cc_flags,
    check_usable,
    collect_fingerprint,
    opt_level,
    probe_instance_type,
    probe_runtime_version,
    runtime_version_from_dpkg_status,
    runtime_version_from_lib_names,
)

PACKAGE = Path(fpmod.__file__).resolve().parent


@pytest.mark.parametrize("a, b", [
    ("--target trn2 --auto-cast none", "--auto-cast=none   --target=trn2"),
    ("-O 1 --lnc=2", "--lnc 2 -O1"),
    ("\t--model-type=transformer\n-O2 ", "-O2 --model-type transformer"),
    ("--a 'x y' --b", "--b --a='x y'"),
    ("--shift -1 --b", "--b --shift=-1"),  # a negative number is a value, not an option
])
def test_order_spacing_and_value_spelling_do_not_change_the_flags(a: str, b: str) -> None:
    assert canonical_cc_flags(a) == canonical_cc_flags(b)


@pytest.mark.parametrize("a, b", [
    ("-O1 -O2", "-O2 -O1"),  # the last one wins in the compiler: order of a repeat matters
    ("--auto-cast none --auto-cast all", "--auto-cast all --auto-cast none"),
    ("--a 'x y'", "--a x y"),  # one value with a space is not a value and a stray word
    ("--a x --b y", "--a y --b x"),
    ("--target trn2", "--target trn3"),
    ("", "-O1"),
])
def test_different_flags_stay_different(a: str, b: str) -> None:
    assert canonical_cc_flags(a) != canonical_cc_flags(b)


def test_canonical_flags_are_stable_and_quoted() -> None:
    assert canonical_cc_flags("-O1  --lnc 2 --auto-cast none") == \
        "--auto-cast=none --lnc=2 -O1"
    assert canonical_cc_flags("--a 'x y'") == "'--a=x y'"
    once = canonical_cc_flags("--b 2 -O 3 --a 'p q'")
    assert canonical_cc_flags(once) == once  # canonical form is a fixed point
    # unbalanced quotes fall back to splitting on spaces, still deterministic
    assert canonical_cc_flags("--unbalanced 'quote") == canonical_cc_flags("--unbalanced  'quote")


@pytest.mark.parametrize("flags, level", [
    ("", "default"), ("-O1", "1"), ("-O 2", "2"), ("--optlevel=3", "3"),
    ("--opt-level 1", "1"), ("-O1 --x -O2", "2"), ("-O2 -O1", "1"), ("--lnc=2", "default"),
])
def test_opt_level_is_the_last_one_named(flags: str, level: str) -> None:
    assert opt_level(flags) == level


DPKG = """\
Package: aws-neuronx-dkms
Status: install ok installed
Version: 2.21.37.0

Package: aws-neuronx-runtime-lib
Status: install ok installed
Priority: optional
Version: 2.27.23.0-8deec4dbf
Description: Neuron runtime
 a continuation line: Version: 9.9.9

Package: zlib1g
Status: install ok installed
Version: 1:1.2.13
"""


def test_runtime_version_from_dpkg_status() -> None:
    assert runtime_version_from_dpkg_status(DPKG) == "2.27.23.0-8deec4dbf"
    removed = DPKG.replace("install ok installed\nPriority", "deinstall ok config-files\nPriority")
    assert runtime_version_from_dpkg_status(removed) is None
    assert runtime_version_from_dpkg_status("") is None


def test_dpkg_status_matches_the_whole_package_name_in_any_paragraph() -> None:
    lookalike = "Package: aws-neuronx-runtime-lib-dev\nStatus: install ok installed\n" \
                "Version: 9.0\n\n"
    assert runtime_version_from_dpkg_status(lookalike) is None
    last = lookalike + "Package: aws-neuronx-runtime-lib\nStatus: install ok installed\n" \
        "Version: 2.28.1.0"  # the last paragraph, no trailing newline
    assert runtime_version_from_dpkg_status(last) == "2.28.1.0"
    big = "".join(f"Package: pkg{i}\nStatus: install ok installed\nVersion: {i}\n\n"
                  for i in range(3000)) + DPKG
    assert runtime_version_from_dpkg_status(big) == "2.27.23.0-8deec4dbf"


def test_runtime_version_from_lib_names() -> None:
    names = ["/opt/aws/neuron/lib/libnrt.so", "libnrt.so.1", "libnrt.so.2.27.23.0",
             "libnrt.so.2.9.1", "libnrt.so.2.27.x", "libnccom.so.2.99.0"]
    assert runtime_version_from_lib_names(names) == "2.27.23.0"
    assert runtime_version_from_lib_names(["libnrt.so.1"]) is None


def test_probe_runtime_version_reads_files_only(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(DPKG)
    assert probe_runtime_version(status, ()) == "2.27.23.0-8deec4dbf"
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnrt.so.2.26.1.0").write_bytes(b"")
    none = tmp_path / "no-status"
    assert probe_runtime_version(none, (str(lib),)) == "2.26.1.0"
    assert probe_runtime_version(none, (str(tmp_path / "nowhere"),)) == "absent"


def test_instance_type_from_override_else_dmi(tmp_path: Path) -> None:
    dmi = tmp_path / "product_name"
    dmi.write_text("trn3.48xlarge\n")
    assert probe_instance_type({}, dmi) == "trn3.48xlarge"
    assert probe_instance_type({"NEFFCACHE_INSTANCE_TYPE": "trn2.3xlarge"}, dmi) == "trn2.3xlarge"
    assert probe_instance_type({}, tmp_path / "missing") == "unknown"


def test_target_from_dmi_and_the_override_wins(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    dmi = tmp_path / "product_name"
    dmi.write_text("trn2.48xlarge")
    monkeypatch.setattr(fpmod, "_DMI_PRODUCT", dmi)
    monkeypatch.setattr(fpmod, "_DPKG_STATUS", tmp_path / "status")
    (tmp_path / "status").write_text(DPKG)
    fp = collect_fingerprint("neuron", {})
    assert fp.get("target") == "trn2"
    assert fp.get_info("instance_type") == "trn2.48xlarge"
    assert fp.get_info("version.neuron-runtime") == "2.27.23.0-8deec4dbf"
    assert "version.neuron-runtime" not in dict(fp.fields)
    forced = collect_fingerprint("neuron", {neuron_env.PLATFORM_TARGET: "trn3"})
    assert forced.get("target") == "trn3" and forced.key != fp.key
    dmi.write_text("m7i.large")
    assert collect_fingerprint("neuron", {}).unknown_fields == ("target",)


def test_info_never_enters_the_key_or_equality() -> None:
    facts = {"target": "trn2", "version.neuronx-cc": "2.21.0"}
    a = build_fingerprint("neuron", facts, {"version.neuron-runtime": "2.27.0"})
    b = build_fingerprint("neuron", facts, {"version.neuron-runtime": "absent",
                                            "instance_type": "c7i.4xlarge"})
    assert a.key == b.key and a == b
    assert Fingerprint.from_json(a.to_json()).info == a.info
    # a fingerprint written before info existed decodes to the same key
    old = {"schema_version": 1, "backend": "neuron", "fields": facts}
    assert Fingerprint.from_json(old).key == a.key
    assert "info" not in build_fingerprint("neuron", facts).to_json()


def test_check_usable_refuses_an_unknown_target() -> None:
    unknown = build_fingerprint("neuron", {"target": "unknown"}, {"instance_type": "m7i.large"})
    with pytest.raises(FingerprintMismatchError) as exc:
        check_usable(unknown)
    assert exit_code_for(exc.value) == 5
    assert "target" in str(exc.value) and "m7i.large" in str(exc.value)
    assert neuron_env.PLATFORM_TARGET in (exc.value.hint or "")
    check_usable(build_fingerprint("neuron", {"target": "trn2"}))
    check_usable(build_fingerprint("inductor", {"cpu.arch": "x86_64"}))


_NEURON_NAME = re.compile(r"\b(TORCH_NEURONX_[A-Z0-9_]+|NEURON_[A-Z0-9_]+)\b")


def _code_strings(tree: ast.AST) -> list[str]:
    """Every string constant in the code, docstrings excepted."""
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docstrings]


def test_only_neuron_env_spells_torchneuron_variable_names() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "neuron_env.py" and path.parent.name == "backends":
            continue
        for text in _code_strings(ast.parse(path.read_text(encoding="utf-8"))):
            offenders += [f"{path.relative_to(PACKAGE)}: {m}" for m in _NEURON_NAME.findall(text)]
    assert offenders == []
    assert neuron_env.NEFF_CACHE_DIR in Path(neuron_env.__file__).read_text()
