"""The API's documents: response models (from the index's declarations), error bodies, statuses."""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import (
    Annotated,
    Any,
    Literal,
    TypedDict,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from pydantic import BaseModel, Field, create_model

from neffcache import index as idx
from neffcache.documents import Doc, document_keys
from neffcache.errors import (
    CacheMissError,
    DeadlineExceededError,
    FingerprintMismatchError,
    IntegrityError,
    NeffcacheError,
    NotFoundError,
    SchemaOutdatedError,
    UnavailableError,
    UsageError,
    by_class,
)


class ErrorDoc(BaseModel):
    error: str = Field(description="One-line message naming what failed.")
    type: str = Field(description="The neffcache error class, e.g. NotFoundError.")
    hint: str | None = Field(None, description="A command that may fix it.")


HTTP_STATUSES: dict[type[BaseException], int] = {
    NeffcacheError: 500,
    UsageError: 400,  # bad query parameter value (e.g. a malformed glob or version)
    NotFoundError: 404,  # unknown matrix, version or precompile run
    CacheMissError: 404,
    IntegrityError: 500,
    FingerprintMismatchError: 409,
    UnavailableError: 503,  # the index cannot be reached
    SchemaOutdatedError: 503,  # the index needs `neffcache db upgrade`
    DeadlineExceededError: 504,
}


def http_status_for(exc: BaseException) -> int:
    return by_class(HTTP_STATUSES, exc, 500)


def error_document(exc: BaseException) -> dict[str, str | None]:
    return {"error": " ".join(str(exc).split()), "type": type(exc).__name__,
            "hint": getattr(exc, "hint", None)}


def validation_document(errors: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """The 400 body: never the value sent (it may be huge)."""
    parts = []
    for e in errors[:3]:
        loc = [str(x) for x in e.get("loc", ()) if x not in ("query", "path", "body")]
        msg = str(e.get("msg", "invalid value"))[:200]
        parts.append(f"{'.'.join(loc) or 'request'}: {msg}")
    more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
    return {"error": "bad parameter " + "; ".join(parts) + more, "type": "UsageError",
            "hint": "see /openapi.json for the parameters each endpoint takes"}


class Summary(TypedDict):
    """Totals, coverage per matrix x fingerprint, bytes per SDK version, restore outcomes."""

    index: str
    totals: idx.IndexTotals
    coverage: list[idx.MatrixCoverageDoc]
    sdk_versions: list[idx.SdkBytes]
    restore_outcomes: list[idx.RestoreOutcomeDoc]


class Health(BaseModel):
    status: Literal["ok"]
    index: str = Field(description="Index URL, password redacted.")
    schema_revision: str | None
    schema_head: str


# The API's name and description of each dataclass's document (its OpenAPI component).
_DOCUMENTS: dict[type, tuple[str, str | None]] = {
    idx.EntrySummary: ("EntryDoc", idx.EntrySummary.__doc__),
    idx.CoverageGrid: ("CoverageGridDoc", "A page of a registered matrix's cells x "
                       "fingerprints (/api/coverage)."),
    idx.CoverageColumn: ("FingerprintCountsDoc", "A fingerprint's column of a coverage grid, "
                         "counted over the grid's cells."),
    idx.FailedCell: ("AttentionFailureDoc", None),
    idx.FailureRecord: ("FailureDoc", None),
    idx.GridRow: ("GridRowDoc", None),
    idx.MatrixDetail: ("MatrixDetail", idx.MatrixDetail.__doc__),
    idx.MatrixVersion: ("MatrixDoc", "A registered matrix version (``matrix ls/show --json``, "
                        "/api/matrices)."),
    idx.RestoreRecord: ("RestoreDoc", None),
    idx.RunDetail: ("RunDetail", None),
    idx.RunSummary: ("RunDoc", None),
    idx.IndexTotals: ("TotalsDoc", None),
    idx.RestorePoint: ("RestorePointDoc", None),
    idx.SdkBytes: ("SdkBytesDoc", None),
}


@functools.cache
def model_of(shape: type) -> type[BaseModel]:
    """The pydantic model of a TypedDict (same name) or a dataclass (keys as ``document_keys``
    says, named as ``_DOCUMENTS`` says); a key the document may lack defaults to None."""
    hints = get_type_hints(shape, include_extras=True)
    if dataclasses.is_dataclass(shape):
        name, doc = _DOCUMENTS[shape]
        keys = document_keys(shape)
        hints = {key: hints[field] for field, key, _ in keys}
        required = {key for _, key, optional in keys if not optional}
    else:
        name, doc = shape.__name__, shape.__doc__
        required = shape.__required_keys__  # type: ignore[attr-defined]
    fields: dict[str, Any] = {}
    for key, hint in hints.items():
        tp, description = _unwrap(hint)
        tp = _convert(tp)
        if key in required:
            fields[key] = (tp, Field(description=description))
        else:
            fields[key] = (tp | None, Field(None, description=description))
    return create_model(name, __doc__=doc, **fields)


def _unwrap(hint: Any) -> tuple[Any, str | None]:
    if get_origin(hint) is Annotated:
        tp, *meta = get_args(hint)
        return tp, next((m.text for m in meta if isinstance(m, Doc)), None) or None
    return hint, None


def _convert(tp: Any) -> Any:
    """``tp`` as its JSON is: documents inside it as their models, a datetime an ISO string or
    null, a tuple a list."""
    if isinstance(tp, type) and (is_typeddict(tp) or dataclasses.is_dataclass(tp)):
        return model_of(tp)
    if tp is datetime:
        return str | None
    origin, args = get_origin(tp), get_args(tp)
    if origin is list or origin is tuple and args[1:] == (Ellipsis,):
        return list_of(_convert(args[0]))
    if origin is dict:
        return dict.__class_getitem__((_convert(args[0]), _convert(args[1])))
    if origin in (Union, types.UnionType):
        return Union[tuple(_convert(a) for a in args)]  # noqa: UP007 - built at run time
    return tp


def list_of(item: Any) -> Any:
    """``list[item]`` for a type known only at run time (mypy cannot follow ``list[var]``)."""
    return list.__class_getitem__(item)


def many(shape: type) -> Any:
    return list_of(model_of(shape))
