"""The JSON documents of the index's values that differ from their value's fields (a renamed,
computed or omitted key), each declared once as a TypedDict (pure typing): the values'
``to_json`` build them, the CLI's ``--json`` prints them, and the HTTP API's response models
are generated from them (``neffcache.server.schemas``). A value whose document is its fields
(``EntrySummary``, ``SdkBytes``, ``IndexTotals``, ``RestorePoint``, ``ReindexResult``) is its
own declaration (``neffcache.documents``).
Fields are a contract: add, never rename or drop.

A field's description for the OpenAPI document rides along as ``Annotated[T, Doc("...")]``;
a key that may be absent is declared in a ``total=False`` class (the API shows it as null).
"""

from __future__ import annotations

from typing import Annotated, Literal, TypedDict

from neffcache.documents import Doc
from neffcache.index.values import CoverageColumn, Status

Outcome = Literal["hit", "partial", "miss", "error"]
RunStatus = Literal["running", "finished", "cancelled"]


# --- coverage -------------------------------------------------------------------------------

class FieldDiffDoc(TypedDict):
    field: str
    value: Annotated[str, Doc("This fingerprint's value ('absent': it has no such field).")]
    against: Annotated[str, Doc("The other fingerprint's value.")]
    note: Annotated[str, Doc("Why the field is part of a fingerprint ('' if no note).")]


class FingerprintDiffDoc(TypedDict):
    """What tells two fingerprints apart (/api/fingerprint-diff)."""

    key: str
    against: str
    differences: list[FieldDiffDoc]


class GridRowDoc(TypedDict):
    cell_id: str
    cell_key: str
    statuses: Annotated[list[Status], Doc("One per fingerprint, in column order.")]
    verified: Annotated[dict[str, str], Doc(
        "Column number -> how the entry's first call after a restore went, where known "
        "(neffcache warm, precompile --verify): 'hit' (warm: nothing compiled), 'compiled', "
        "'verify-failed'.")]


class CoverageGridDoc(TypedDict):
    """A page of a registered matrix's cells x fingerprints (/api/coverage)."""

    matrix: str
    version: int
    sha256: str
    cells_pattern: str | None
    total_cells: Annotated[int, Doc("Cells matching the pattern (all pages).")]
    offset: int
    limit: int
    fingerprints: Annotated[list[CoverageColumn], Doc(
        "Columns: every fingerprint with an entry, a failure or a live lease for a cell of "
        "the matrix, or that a restore report of the matrix named; counts over the matching "
        "cells.")]
    rows: list[GridRowDoc]


class MatrixCoverageDoc(TypedDict):
    matrix: str
    version: int
    cells: int
    fingerprints: list[CoverageColumn]


# --- entries, fingerprints, runs, failures --------------------------------------------------


class FingerprintDoc(TypedDict):
    key: str
    backend: str
    sdk_version: str
    fields: dict[str, str]
    first_seen_at: str | None
    entries: int
    total_bytes: int


# --- restores -------------------------------------------------------------------------------

class BucketDoc(TypedDict):
    le: float
    count: int


class RestoreOutcomeDoc(TypedDict):
    outcome: Outcome
    count: int
    no_entry: Annotated[int, Doc("Of count: restores (exit 3) missing cells that have no "
                                 "entry for their fingerprint.")]
    other_fingerprint: Annotated[int, Doc("Of count: restores (exit 5) whose cells were "
                                          "built only for other fingerprints.")]
    seconds_sum: float
    bytes_sum: int
    buckets: Annotated[list[BucketDoc], Doc("Cumulative counts of durations <= le.")]
