"""Request fields checked when made, against their annotations and ``RANGES`` (pure)."""

from __future__ import annotations

import builtins
import collections.abc
import dataclasses
import functools
import os
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar, dataclass_transform

from neffcache.errors import UsageError


@dataclass(frozen=True, slots=True)
class Range:
    """``min`` (exclusive with ``min_open``) to ``max``; ``real``: a float field (FloatRange)."""

    min: int | None = None
    max: int | None = None
    min_open: bool = False
    real: bool = False

    def holds(self, value: float) -> bool:
        low = self.min is None or value > self.min or (value == self.min and not self.min_open)
        return low and (self.max is None or value <= self.max)

    def describe(self) -> str:
        """As click says it: ``x>=0``, ``x>0``, ``1<=x<=256``."""
        if self.max is None:
            return f"x{'>' if self.min_open else '>='}{self.min}"
        if self.min is None:
            return f"x<={self.max}"
        return f"{self.min}{'<' if self.min_open else '<='}x<={self.max}"


_WORKERS = Range(1, 256)
_SECONDS = Range(0, real=True)  # a span of seconds, 0 allowed
_TIMEOUT = Range(1, real=True)  # a worker's timeout: at least a second
_BYTES = Range(0)

# request class -> field -> range, checked by the request, made the CLI's option type
# (cli._common.ranged); a field typed ``X | None`` is checked when given
RANGES: dict[str, dict[str, Range]] = {
    "RestoreRequest": {"deadline": Range(0, min_open=True, real=True), "workers": _WORKERS,
                       "bundle_max_bytes": _BYTES},
    "PrecompileRequest": {"workers": _WORKERS, "lease_seconds": _TIMEOUT,
                          "retries": Range(0, 100), "timeout": _TIMEOUT,
                          "heartbeat_seconds": _SECONDS},
    "PushRequest": {"workers": _WORKERS, "compile_seconds": _SECONDS},
    "CaptureRequest": {"workers": Range(1, 64)},
    "WarmRequest": {"timeout": _TIMEOUT},
    "DemoRequest": {"workers": Range(1, 64), "timeout": _TIMEOUT},
    "ListEntriesRequest": {"limit": Range(1)},
    "IngestRestoreReportsRequest": {"days": Range(0)},
    "ShowRegisteredMatrixRequest": {"version": Range(1)},
    "RetireEntriesRequest": {"keep_sdk_versions": Range(1), "keep_restored_days": Range(1),
                             "workers": _WORKERS},
    "CollectGarbageRequest": {"grace": _SECONDS, "workers": _WORKERS},
    "VerifyStoreRequest": {"workers": _WORKERS},
    "VerifyLocalDirRequest": {"workers": _WORKERS},
    "CopyEntriesRequest": {"workers": _WORKERS},
    "RepairRequest": {"workers": _WORKERS},
    "ImportBundleRequest": {"workers": _WORKERS, "max_bytes": _BYTES},
    "ShowBundleRequest": {"max_bytes": _BYTES},
    "ServeRequest": {"port": Range(0, 65535), "ingest_every": _SECONDS},
}

Check = Callable[[object], bool]
T = TypeVar("T")


@dataclass_transform(frozen_default=True)
def checked_request(cls: type[T]) -> type[T]:
    """A frozen dataclass with slots that checks its fields when made."""
    cls.__post_init__ = check_request  # type: ignore[attr-defined]
    return dataclass(frozen=True, slots=True)(cls)


@dataclass(frozen=True, slots=True)
class _Rule:
    name: str
    check: Check
    expected: str
    sequence_only: bool  # a Sequence is meant and a str is not: name the lone-string mistake
    range: Range | None


def check_request(request: object) -> None:
    """UsageError naming the first field whose value breaks its rule."""
    cls: type = type(request)
    for rule in _rules(cls):
        value = getattr(request, rule.name)
        if not rule.check(value):
            raise UsageError(f"{cls.__name__}.{rule.name}: expected {rule.expected}, got "
                             f"{_shown(value, rule.sequence_only)}")
        if rule.range is not None and value is not None and not rule.range.holds(value):
            raise UsageError(f"{cls.__name__}.{rule.name}: {value!r} is not in the range "
                             f"{rule.range.describe()}")


def _shown(value: object, sequence_only: bool) -> str:
    text = repr(value)
    shown = f"the {type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
    if sequence_only and isinstance(value, str):
        return f"{shown} (a lone string where a sequence is meant: wrap it, e.g. ({value!r},))"
    return shown


@functools.cache
def _rules(cls: type) -> tuple[_Rule, ...]:
    ranges = RANGES.get(cls.__name__, {})
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    if not set(ranges) <= names:
        raise TypeError(f"RANGES[{cls.__name__!r}] names no field {set(ranges) - names}")
    hints = typing.get_type_hints(cls, localns=_Scope(vars(sys.modules[cls.__module__])))
    return tuple(_Rule(f.name, *_type_check(hints[f.name]), _sequence_only(hints[f.name]),
                       ranges.get(f.name))
                 for f in dataclasses.fields(cls))  # type: ignore[arg-type]


class _Unbound:
    """A name its module binds only for type checkers: a value is one if a class of its
    type has that name."""


class _Scope(dict[str, object]):
    """A module's names, then the builtins, then an ``_Unbound`` class for any other name."""

    def __missing__(self, name: str) -> object:
        return getattr(builtins, name, None) or type(name, (_Unbound,), {})


def _sequence_only(hint: object) -> bool:
    """A Sequence is meant and a str is not: a lone string is a mistake worth naming."""
    alternatives = typing.get_args(hint) if _is_union(hint) else (hint,)
    return str not in alternatives and any(typing.get_origin(a) is collections.abc.Sequence
                                           for a in alternatives)


def _is_union(hint: object) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


_SIMPLE: dict[str, tuple[Check, str]] = {
    "NoneType": (lambda v: v is None, "None"),
    "str": (lambda v: isinstance(v, str), "str"),
    "bool": (lambda v: isinstance(v, bool), "bool"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "int"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    "Path": (lambda v: isinstance(v, os.PathLike), "Path"),
}


def _type_check(hint: object) -> tuple[Check, str]:
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if _is_union(hint):
        parsed = [_type_check(a) for a in args]
        return (lambda v: any(c(v) for c, _ in parsed)), " or ".join(w for _, w in parsed)
    if origin is collections.abc.Callable:
        return callable, "a callable"
    if origin is collections.abc.Sequence and args:
        item, what = _type_check(args[0])
        return (lambda v: isinstance(v, Sequence) and not isinstance(v, (str, bytes))
                and all(item(x) for x in v)), f"a sequence of {what}"
    if origin is collections.abc.Mapping and args:
        (key, _), (value, what) = _type_check(args[0]), _type_check(args[1])
        return (lambda v: isinstance(v, Mapping) and all(key(k) and value(x)
                                                         for k, x in v.items())), \
            f"a mapping of {what}"
    if not isinstance(origin, type):
        raise TypeError(f"request_rules: cannot read the annotation {hint!r}")
    cls, name = origin, origin.__name__
    if name in _SIMPLE:
        return _SIMPLE[name]
    if issubclass(cls, _Unbound):
        return (lambda v: any(k.__name__ == name for k in type(v).__mro__)), name
    return (lambda v: isinstance(v, cls)), name
