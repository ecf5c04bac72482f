"""Fingerprint (pure parts): cc-flag canonicalisation, opt level, target, diff, stable keys."""

from __future__ import annotations

import pytest

from neffcache.fingerprint import (
    build_fingerprint,
    canonical_cc_flags,
    collect_fingerprint,
    diff_fingerprints,
    opt_level,
    target_from_instance_type,
)


@pytest.mark.parametrize("a, b", [
    ("--model-type=transformer -O1", "-O1   --model-type=transformer"),
    ("--target trn2 --auto-cast none", "--auto-cast none --target trn2"),
    ("  --lnc=2  ", "--lnc=2"),
    ("--a 'x y' --b", "--b --a 'x y'"),
])
def test_equivalent_flags_canonicalise_equally(a: str, b: str) -> None:
    assert canonical_cc_flags(a) == canonical_cc_flags(b)


def test_different_flags_stay_different() -> None:
    assert canonical_cc_flags("-O1") != canonical_cc_flags("-O2")
    assert canonical_cc_flags("--target trn2") != canonical_cc_flags("--target trn3")
    assert canonical_cc_flags("") == ""
    # A flag keeps its separate value: swapping values between flags is a different set.
    assert canonical_cc_flags("--a x --b y") != canonical_cc_flags("--a y --b x")


@pytest.mark.parametrize("flags, level", [
    ("", "default"), ("-O1", "1"), ("--optlevel=2", "2"), ("--opt-level 3", "3"),
    ("-O1 --x -O2", "2"),
])
def test_opt_level(flags: str, level: str) -> None:
    assert opt_level(flags) == level


@pytest.mark.parametrize("itype, target", [
    ("trn2.48xlarge", "trn2"), ("trn2u.48xlarge", "trn2"), ("trn3.3xlarge", "trn3"),
    ("TRN1.32xlarge", "trn1"), ("m5.large", "unknown"), ("", "unknown"),
])
def test_target_from_instance_type(itype: str, target: str) -> None:
    assert target_from_instance_type(itype) == target


def test_diff_names_the_fields_that_differ() -> None:
    a = build_fingerprint("neuron", {"version.torch": "2.6", "target": "trn2", "lnc": "2"})
    b = build_fingerprint("neuron", {"version.torch": "2.7", "target": "trn2"})
    diffs = {d.name: (d.here, d.there) for d in diff_fingerprints(a, b)}
    assert diffs == {"version.torch": ("2.6", "2.7"), "lnc": ("2", "absent")}
    assert diff_fingerprints(a, a) == ()
    c = build_fingerprint("inductor", dict(a.fields))
    assert [d.name for d in diff_fingerprints(a, c)] == ["backend"]


def test_key_is_order_independent_and_round_trips() -> None:
    a = build_fingerprint("neuron", {"x": "1", "y": "2"})
    b = build_fingerprint("neuron", {"y": "2", "x": "1"})
    assert a.key == b.key
    assert type(a).from_json(a.to_json()) == a


def test_collect_neuron_uses_overrides_and_never_volatile_values() -> None:
    env = {"NEFFCACHE_INSTANCE_TYPE": "trn2.48xlarge", "NEURON_CC_FLAGS": "-O1 --lnc=2",
           "HOSTNAME": "ip-10-0-0-1", "TMPDIR": "/tmp/abc"}
    fp = collect_fingerprint("neuron", env)
    assert fp.get("target") == "trn2"
    assert fp.get("opt_level") == "1"
    assert fp.unknown_fields == ()
    values = " ".join(v for _, v in fp.fields)
    assert "ip-10-0-0-1" not in values and "/tmp/abc" not in values
    swapped = collect_fingerprint("neuron", dict(env, NEURON_CC_FLAGS="--lnc=2  -O1"))
    assert swapped.key == fp.key
    forced = collect_fingerprint("neuron", dict(env, NEURON_PLATFORM_TARGET_OVERRIDE="trn3"))
    assert forced.get("target") == "trn3"
