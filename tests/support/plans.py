"""Reindex's and reports ingest's plans of a store listing, by the names the tests use."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from neffcache.index.reindex import plan_objects
from neffcache.reports import report_id_of
from neffcache.store import entry_key_of


def plan_reindex(object_keys: Iterable[str]) -> tuple[list[tuple[str, str]], list[str]]:
    return plan_objects(object_keys, entry_key_of)


def plan_ingest(object_keys: Iterable[str], skip: Collection[str] = ()
                ) -> tuple[list[tuple[str, str]], list[str]]:
    return plan_objects(object_keys, report_id_of, skip)
