"""Every public request checks itself when it is made: wrong types, a lone string where a
sequence is meant and out-of-range numbers are a UsageError (exit 2) naming the field; the
CLI's flags refuse the same numbers; every type a public call takes or returns imports from
the top level."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import neffcache
from neffcache import UsageError
from neffcache.cli import run

REQUESTS = sorted(n for n in neffcache.__all__ if n.endswith("Request"))


def _required(cls: type) -> dict[str, Any]:
    """A value for each field without a default (every one of them takes a str)."""
    return {f.name: "x" for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}


def _build(name: str, /, **fields: Any) -> Any:
    cls = getattr(neffcache, name)
    return cls(**{**_required(cls), **fields})


def _refused(name: str, field: str, value: Any) -> str:
    with pytest.raises(UsageError) as caught:
        _build(name, **{field: value})
    message = str(caught.value)
    assert message.startswith(f"{name}.{field}: "), message
    assert caught.value.exit_code == 2
    return message


def test_there_are_public_requests_and_each_builds_from_its_required_fields() -> None:
    assert len(REQUESTS) >= 30
    for name in REQUESTS:
        _build(name)


@pytest.mark.parametrize("name", REQUESTS)
def test_a_value_of_no_type_a_field_takes_is_refused_for_every_field(name: str) -> None:
    for f in dataclasses.fields(getattr(neffcache, name)):
        assert "expected" in _refused(name, f.name, object())


def _sequence_fields() -> list[tuple[str, str]]:
    """(request, field) for each field typed as a sequence that takes no lone str."""
    found = []
    for name in REQUESTS:
        for f in dataclasses.fields(getattr(neffcache, name)):
            top_level = re.split(r"\|(?![^\[]*\])", str(f.type))  # not inside [...]
            alternatives = {a.strip().split("[")[0] for a in top_level}
            if "Sequence" in alternatives and "str" not in alternatives:
                found.append((name, f.name))
    return found


SEQUENCES = _sequence_fields()


def test_the_fields_the_issue_names_are_sequences() -> None:
    for pair in [("RestoreRequest", "mirrors"), ("RestoreRequest", "trusted_keys"),
                 ("RestoreRequest", "cells"), ("CopyEntriesRequest", "fingerprints"),
                 ("PushRequest", "roots"), ("IngestRestoreReportsRequest", "sources")]:
        assert pair in SEQUENCES


@pytest.mark.parametrize("name, field", SEQUENCES)
def test_a_lone_string_where_a_sequence_is_meant_is_refused(name: str, field: str) -> None:
    message = _refused(name, field, "s3://bucket/prefix")
    assert "lone string" in message and "('s3://bucket/prefix',)" in message


# (request, field, refused values, a value it takes): each row is one rule of
# request_rules.RANGES, written out here so that removing a rule fails this test.
RANGE_CASES: list[tuple[str, str, tuple[Any, ...], Any]] = [
    ("RestoreRequest", "deadline", (-5, 0, 0.0), 0.5),
    ("RestoreRequest", "workers", (0, -1, 257), 256),
    ("RestoreRequest", "bundle_max_bytes", (-1,), 0),
    ("PrecompileRequest", "workers", (0, 257), 1),
    ("PrecompileRequest", "lease_seconds", (0.5, 0), 1),
    ("PrecompileRequest", "retries", (-1, 101), 0),
    ("PrecompileRequest", "timeout", (0.5,), 1.0),
    ("PrecompileRequest", "heartbeat_seconds", (-0.1,), 0),
    ("PushRequest", "workers", (0, 257), 256),
    ("PushRequest", "compile_seconds", (-1.0,), 0.0),
    ("CaptureRequest", "workers", (0, 65), 64),
    ("WarmRequest", "timeout", (0, 0.99), 1),
    ("DemoRequest", "workers", (0, 65), 64),
    ("DemoRequest", "timeout", (0,), 1),
    ("ListEntriesRequest", "limit", (0, -3), 1),
    ("IngestRestoreReportsRequest", "days", (-1,), 0),
    ("ShowRegisteredMatrixRequest", "version", (0,), 1),
    ("RetireEntriesRequest", "keep_sdk_versions", (0,), 1),
    ("RetireEntriesRequest", "keep_restored_days", (0,), 1),
    ("RetireEntriesRequest", "workers", (0, 257), 16),
    ("CollectGarbageRequest", "grace", (-1,), 0),
    ("CollectGarbageRequest", "workers", (0, 257), 256),
    ("VerifyStoreRequest", "workers", (0, 257), 1),
    ("VerifyLocalDirRequest", "workers", (0, 257), 1),
    ("CopyEntriesRequest", "workers", (0, 257), 1),
    ("RepairRequest", "workers", (0, 257), 1),
    ("ImportBundleRequest", "workers", (0, 257), 1),
    ("ImportBundleRequest", "max_bytes", (-1,), 0),
    ("ShowBundleRequest", "max_bytes", (-1,), 0),
    ("ServeRequest", "port", (-1, 65536), 0),
    ("ServeRequest", "ingest_every", (-1.0,), 0),
]


@pytest.mark.parametrize("name, field, refused, taken", RANGE_CASES)
def test_a_number_out_of_its_range_is_refused(name: str, field: str, refused: tuple[Any, ...],
                                              taken: Any) -> None:
    for value in refused:
        assert "is not in the range" in _refused(name, field, value)
    assert getattr(_build(name, **{field: taken}), field) == taken


def test_the_issue_examples() -> None:
    assert "lone string" in _refused("RestoreRequest", "mirrors", "s3://b/p")
    assert "lone string" in _refused("RestoreRequest", "trusted_keys", "ed25519:AAAA")
    assert "got the str '120'" in _refused("RestoreRequest", "deadline", "120")
    assert "x>0" in _refused("RestoreRequest", "deadline", -5)
    assert "bool" in _refused("RestoreRequest", "require_signatures", "yes")
    assert "int" in _refused("PrecompileRequest", "workers", True)  # a bool is not a count
    assert "Fingerprint" in _refused("RestoreRequest", "fingerprint", "abc123")


def test_values_of_the_declared_types_are_taken() -> None:
    import threading

    request = _build("PrecompileRequest", matrix=Path("m.toml"), cells=["a*"], timeout=5,
                     stop=threading.Event(), heartbeat=print, environ={"A": "1"})
    assert request.cells == ["a*"] and request.timeout == 5
    assert _build("PushRequest", roots={"neff": Path("/tmp")}).roots == {"neff": Path("/tmp")}
    assert _build("PushRequest", roots=["neff=/tmp"]).roots == ["neff=/tmp"]
    assert _build("DemoRequest", shapes="64x64").shapes == "64x64"  # a str is meant here
    assert _build("RestoreRequest", workers=None, deadline=None).workers is None


def test_the_cli_refuses_the_same_numbers_in_its_own_words(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]
                                                            ) -> None:
    code = run(["restore", str(tmp_path / "m.toml"), "--to", str(tmp_path), "--deadline", "-5"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Invalid value for '--deadline': -5.0 is not in the range x>0." in err


def _public_types() -> dict[str, type]:
    """Every project class named in the fields of a public request or result, or in the
    signature of a public call, and in theirs in turn."""
    import inspect

    modules = [m for n, m in sorted(sys.modules.items()) if n.startswith("neffcache") and m]

    def resolve(name: str) -> type | None:
        for m in modules:
            obj = getattr(m, name, None)
            if isinstance(obj, type) and obj.__module__.startswith("neffcache."):
                return obj
        return None

    found: dict[str, type] = {}
    todo = [getattr(neffcache, n) for n in neffcache.__all__]
    while todo:
        obj = todo.pop()
        texts = [str(f.type) for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj) \
            else [str(inspect.signature(obj))] if inspect.isfunction(obj) else []
        # a name called in the annotation (Annotated[int, Doc("...")]) is metadata, not a type
        for name in {n for t in texts for n in re.findall(r"\b([A-Z]\w*)\b(?!\()", t)} - set(found):
            cls = resolve(name)
            if cls is not None and dataclasses.is_dataclass(cls) and cls.__name__ == name:
                found[name] = cls
                todo.append(cls)
    return found


def test_every_type_a_public_call_takes_or_returns_imports_from_the_top_level() -> None:
    """A name ending in Result at the top level is a use case's result (it knows its exit
    code and its JSON: test_api_face); a value type named so (GcResult, IngestResult...)
    imports from its package's face instead."""
    import importlib

    types = _public_types()
    assert {"EntrySummary", "Matrix", "CoverageRow", "Fingerprint", "PrecompileReport",
            "Conflict", "Problem", "GcResult"} <= set(types)
    missing = sorted(n for n, cls in types.items() if not n.endswith("Result")
                     and (n not in neffcache.__all__ or getattr(neffcache, n) is not cls))
    assert missing == []
    faces = [importlib.import_module(f"neffcache.{f}")
             for f in ("index", "lifecycle", "precompile", "restore")]
    behind = sorted(n for n, cls in types.items() if n.endswith("Result")
                    and n not in neffcache.__all__
                    and not any(getattr(face, n, None) is cls for face in faces))
    assert behind == []
    from neffcache import EntrySummary, Fingerprint, Matrix  # noqa: F401 - the import is the test
