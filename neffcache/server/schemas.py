"""Response models of the HTTP API: they document the JSON (served as /openapi.json) and check
every response against it. Each is generated from the index's declaration of that document
(a TypedDict of ``neffcache.index``, the same one the CLI's ``--json`` and the values'
``to_json`` use), so a shape is written once; only the server's own documents (errors,
health) are declared here."""

from __future__ import annotations

import types
from typing import (
    Annotated,
    Any,
    Literal,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    is_typeddict,
)

from pydantic import BaseModel, Field, create_model

from neffcache.index import (
    AttentionDoc,
    CoverageGridDoc,
    Doc,
    EntryDoc,
    FailureDoc,
    FingerprintDiffDoc,
    FingerprintDoc,
    InProgressDoc,
    MatrixDetail,
    MatrixDoc,
    RestoreDoc,
    RestoreOutcomeDoc,
    RestorePointDoc,
    RunDetail,
    RunDoc,
    SdkBytesDoc,
    Summary,
)


class ErrorDoc(BaseModel):
    error: str = Field(description="One-line message naming what failed.")
    type: str = Field(description="The neffcache error class, e.g. NotFoundError.")
    hint: str | None = Field(None, description="A command that may fix it.")


class Health(BaseModel):
    status: Literal["ok"]
    index: str = Field(description="Index URL, password redacted.")
    schema_revision: str | None
    schema_head: str


_MODELS: dict[type, type[BaseModel]] = {}


def model_of(shape: type) -> type[BaseModel]:
    """The pydantic model of a TypedDict document, of the same name: every key a field (its
    ``Doc`` the field's description; a key the document may lack defaults to None), nested
    documents as their models."""
    if shape in _MODELS:
        return _MODELS[shape]
    required = shape.__required_keys__  # type: ignore[attr-defined]
    fields: dict[str, Any] = {}
    for name, hint in get_type_hints(shape, include_extras=True).items():
        tp, description = _unwrap(hint)
        tp = _convert(tp)
        if name in required:
            fields[name] = (tp, Field(description=description))
        else:
            fields[name] = (tp | None, Field(None, description=description))
    model: type[BaseModel] = create_model(shape.__name__, __doc__=shape.__doc__, **fields)
    _MODELS[shape] = model
    return model


def _unwrap(hint: Any) -> tuple[Any, str | None]:
    if get_origin(hint) is Annotated:
        tp, *meta = get_args(hint)
        return tp, next((m.text for m in meta if isinstance(m, Doc)), None)
    return hint, None


def _convert(tp: Any) -> Any:
    """``tp`` with every TypedDict inside it (lists, dicts, unions) replaced by its model."""
    if isinstance(tp, type) and is_typeddict(tp):
        return model_of(tp)
    origin, args = get_origin(tp), get_args(tp)
    if origin is list:
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


# The models the routes name (OpenAPI components keep these names, the documents' names).
MatrixDocModel = model_of(MatrixDoc)
MatrixDetailModel = model_of(MatrixDetail)
CoverageGridModel = model_of(CoverageGridDoc)
EntryModel = model_of(EntryDoc)
FingerprintModel = model_of(FingerprintDoc)
SdkBytesModel = model_of(SdkBytesDoc)
RunModel = model_of(RunDoc)
RunDetailModel = model_of(RunDetail)
FailureModel = model_of(FailureDoc)
InProgressModel = model_of(InProgressDoc)
RestoreModel = model_of(RestoreDoc)
RestoreOutcomeModel = model_of(RestoreOutcomeDoc)
RestorePointModel = model_of(RestorePointDoc)
SummaryModel = model_of(Summary)
AttentionModel = model_of(AttentionDoc)
FingerprintDiffModel = model_of(FingerprintDiffDoc)
MatrixDocList = list_of(MatrixDocModel)
EntryList = list_of(EntryModel)
FingerprintList = list_of(FingerprintModel)
SdkBytesList = list_of(SdkBytesModel)
RunList = list_of(RunModel)
FailureList = list_of(FailureModel)
InProgressList = list_of(InProgressModel)
RestoreList = list_of(RestoreModel)
RestoreOutcomeList = list_of(RestoreOutcomeModel)
RestorePointList = list_of(RestorePointModel)
