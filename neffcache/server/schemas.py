"""Response models of the HTTP API: they document the JSON (served as /openapi.json) and check
every response against it. Each is generated from the index's declaration of that document,
so a shape is written once: a value whose document is its fields is its frozen dataclass
(``neffcache.documents``: a datetime is an ISO string or null, a tuple a list, ``Doc`` a key's
description, other name or absence), any other document a TypedDict of ``neffcache.index``
(the one its ``to_json`` builds). Only the server's own documents (errors, health, the
summary it assembles) are declared here."""

from __future__ import annotations

import dataclasses
import types
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

from neffcache.documents import Doc, document_keys
from neffcache.index import (
    CoverageColumn,
    CoverageGrid,
    EntrySummary,
    FailedCell,
    FailureRecord,
    GridRow,
    IndexTotals,
    MatrixCoverageDoc,
    MatrixDetail,
    MatrixVersion,
    RestoreOutcomeDoc,
    RestorePoint,
    RestoreRecord,
    RunDetail,
    RunSummary,
    SdkBytes,
)


class ErrorDoc(BaseModel):
    error: str = Field(description="One-line message naming what failed.")
    type: str = Field(description="The neffcache error class, e.g. NotFoundError.")
    hint: str | None = Field(None, description="A command that may fix it.")


class Summary(TypedDict):
    """Totals, coverage per matrix x fingerprint, bytes per SDK version, restore outcomes."""

    index: str
    totals: IndexTotals
    coverage: list[MatrixCoverageDoc]
    sdk_versions: list[SdkBytes]
    restore_outcomes: list[RestoreOutcomeDoc]


class Health(BaseModel):
    status: Literal["ok"]
    index: str = Field(description="Index URL, password redacted.")
    schema_revision: str | None
    schema_head: str


_MODELS: dict[type, type[BaseModel]] = {}

# The API's name and description of each dataclass's document (its OpenAPI component).
_DOCUMENTS: dict[type, tuple[str, str | None]] = {
    EntrySummary: ("EntryDoc", EntrySummary.__doc__),
    CoverageGrid: ("CoverageGridDoc", "A page of a registered matrix's cells x fingerprints "
                   "(/api/coverage)."),
    CoverageColumn: ("FingerprintCountsDoc", "A fingerprint's column of a coverage grid, "
                     "counted over the grid's cells."),
    FailedCell: ("AttentionFailureDoc", None),
    FailureRecord: ("FailureDoc", None),
    GridRow: ("GridRowDoc", None),
    MatrixDetail: ("MatrixDetail", MatrixDetail.__doc__),
    MatrixVersion: ("MatrixDoc", "A registered matrix version (``matrix ls/show --json``, "
                    "/api/matrices)."),
    RestoreRecord: ("RestoreDoc", None),
    RunDetail: ("RunDetail", None),
    RunSummary: ("RunDoc", None),
    IndexTotals: ("TotalsDoc", None),
    RestorePoint: ("RestorePointDoc", None),
    SdkBytes: ("SdkBytesDoc", None),
}


def model_of(shape: type) -> type[BaseModel]:
    """The pydantic model of a document: a TypedDict's of the same name, every key a field
    (a key the document may lack defaults to None), or a dataclass's (its keys as
    ``document_keys`` says, named as ``_DOCUMENTS`` says); a field's ``Doc`` is its
    description, nested documents are their models."""
    if shape in _MODELS:
        return _MODELS[shape]
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
    model: type[BaseModel] = create_model(name, __doc__=doc, **fields)
    _MODELS[shape] = model
    return model


def _unwrap(hint: Any) -> tuple[Any, str | None]:
    if get_origin(hint) is Annotated:
        tp, *meta = get_args(hint)
        return tp, next((m.text for m in meta if isinstance(m, Doc)), None) or None
    return hint, None


def _convert(tp: Any) -> Any:
    """``tp`` with every document inside it (lists, dicts, unions) replaced by its model, as
    its JSON is: a datetime an ISO string or null, a tuple a list."""
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
    """``list[item]`` for a type only known at run time (a type checker cannot follow
    ``list[variable]``)."""
    return list.__class_getitem__(item)


def many(shape: type) -> Any:
    """The model of a list of ``shape`` documents."""
    return list_of(model_of(shape))
