"""The inference interpreter's facts (pure parts): the probe's answer, which fields come from
the interpreter rather than the host, and the `python` setting's precedence."""

from __future__ import annotations

import json

import pytest

from neffcache.backends import neuron_env
from neffcache.config import load_settings, parse_config_file
from neffcache.errors import ConfigError
from neffcache.fingerprint import (
    COMMON_DISTRIBUTIONS,
    collect_fingerprint,
    interpreter_distributions,
    interpreter_facts,
)
from neffcache.interpreter import ABSENT, PROBE_SCRIPT, parse_probe_output

ENV = {"HOME": "/home/u"}
NAMES = ("torch", "diffusers", "nki")


def _answer(doc: object) -> str:
    return f"neffcache-probe:{json.dumps(doc)}\n"


def test_probe_answer_becomes_facts_in_the_requested_order() -> None:
    out = "a sitecustomize that prints\n" + _answer({
        "python": "3.12.1", "torch_path": "/opt/venv/lib/python3.12/site-packages/torch",
        "versions": {"torch": "2.9.0", "diffusers": None, "nki": "0.1", "extra": "1"}})
    facts = parse_probe_output(out, NAMES, "/opt/venv/bin/python")
    assert facts.path == "/opt/venv/bin/python"
    assert facts.python_version == "3.12.1"
    assert facts.versions == (("torch", "2.9.0"), ("diffusers", ABSENT), ("nki", "0.1"))
    assert facts.torch_path == "/opt/venv/lib/python3.12/site-packages/torch"
    no_torch = parse_probe_output(_answer({"python": "3.10.0", "torch_path": None,
                                           "versions": {}}), NAMES, "p")
    assert no_torch.torch_path == ABSENT
    assert no_torch.version_map == dict.fromkeys(NAMES, ABSENT)


@pytest.mark.parametrize("out", [
    "", "Python 3.12.1\n", "neffcache-probe:{not json\n", _answer([1, 2]),
    _answer({"versions": {}}), _answer({"python": "", "versions": {}}),
    _answer({"python": "3.12", "versions": []}),
    _answer({"python": "3.12", "versions": {"torch": 2}}),
    _answer({"python": "3.12", "versions": {}, "torch_path": 7}),
])
def test_a_garbled_answer_is_refused(out: str) -> None:
    with pytest.raises(ValueError):
        parse_probe_output(out, NAMES, "p")


def test_the_probe_script_never_imports_torch_and_needs_no_neffcache() -> None:
    assert "import torch" not in PROBE_SCRIPT and "neffcache" not in PROBE_SCRIPT.replace(
        "neffcache-probe:", "")
    compile(PROBE_SCRIPT, "<probe>", "exec")  # valid Python


@pytest.mark.parametrize("backend", ["inductor", "neuron"])
def test_interpreter_fields_are_exactly_the_ones_that_depend_on_the_interpreter(
        backend: str) -> None:
    facts = interpreter_facts(backend, {"torch": "9.9"}, "3.99.0", "/venv/torch")
    expected = {f"version.{d}" for d in interpreter_distributions(backend)} | {"version.python"}
    if backend == "inductor":
        expected.add("torch.path")
    assert set(facts) == expected
    assert facts["version.torch"] == "9.9" and facts["version.python"] == "3.99.0"
    assert facts["version.diffusers"] == ABSENT
    # Every such field is in the collected fingerprint; every other field is a host fact.
    local = dict(collect_fingerprint(backend, {}).fields)
    assert set(facts) <= set(local)
    host = set(local) - set(facts)
    assert not any(name.startswith("version.") for name in host)


def test_neuron_reads_the_sdk_from_the_interpreter_too() -> None:
    assert set(interpreter_distributions("neuron")) == \
        set(COMMON_DISTRIBUTIONS) | set(neuron_env.SDK_DISTRIBUTIONS)
    assert interpreter_distributions("inductor") == COMMON_DISTRIBUTIONS


def test_python_setting_precedence_flag_env_file_default() -> None:
    file = {"python": "/file/python"}
    env = {**ENV, "NEFFCACHE_PYTHON": "/env/python"}
    assert load_settings(ENV).python is None
    assert load_settings(ENV, file).python == "/file/python"
    assert load_settings(env, file).python == "/env/python"
    assert load_settings(env, file, python="/flag/python").python == "/flag/python"
    assert load_settings({**ENV, "NEFFCACHE_PYTHON": ""}, file).python == "/file/python"


def test_python_is_a_known_config_key() -> None:
    assert parse_config_file('python = "/opt/venv/bin/python"', "c.toml") == \
        {"python": "/opt/venv/bin/python"}
    with pytest.raises(ConfigError, match=r"^c.toml: python: expected a non-empty string"):
        parse_config_file('python = ""', "c.toml")
    with pytest.raises(ConfigError, match=r"^c.toml: unknown key 'pyhton'"):
        parse_config_file('pyhton = "/x"', "c.toml")
