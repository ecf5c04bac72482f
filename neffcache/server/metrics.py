"""Prometheus metrics read from the index at scrape time (a custom prometheus_client
Collector; nothing is counted in this process, so any number of servers agree).

    neffcache_index_up                                      1 if the index answered the scrape
    neffcache_entries{backend,sdk_version}                  entries per SDK version
    neffcache_entry_bytes{backend,sdk_version}              bytes of those entries
    neffcache_matrix_cells{matrix}                          cells of the current version
    neffcache_coverage_ratio{matrix,fingerprint,backend,sdk_version}     ready / cells
    neffcache_coverage_cells{matrix,fingerprint,backend,sdk_version,status}   cell counts
    neffcache_failed_cells{matrix,fingerprint}              cells whose warm-up failed
    neffcache_restores_total{outcome}                       restore reports (hit|partial|miss|error)
    neffcache_restore_bytes_total{outcome}                  bytes those restores fetched
    neffcache_restore_duration_seconds{outcome}             histogram of restore durations
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from neffcache.errors import NeffcacheError
from neffcache.index import Index
from neffcache.index import ops_queries as q
from neffcache.index.ops_values import DURATION_BUCKETS, group_by_sdk


class IndexCollector(Collector):
    """Reads the index on every scrape; an unreachable index gives neffcache_index_up 0."""

    def __init__(self, index: Index) -> None:
        self._index = index

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("neffcache_index_up", "1 if the index answered this scrape.")
        try:
            families = list(self._families())
        except NeffcacheError:
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _families(self) -> Iterator[Metric]:
        yield from _storage(self._index)
        yield from _coverage(self._index)
        yield from _restores(self._index)


def _storage(ix: Index) -> Iterator[Metric]:
    entries = GaugeMetricFamily("neffcache_entries", "Entries in the index per SDK version.",
                                labels=["backend", "sdk_version"])
    size = GaugeMetricFamily("neffcache_entry_bytes", "Bytes of the entries per SDK version.",
                             labels=["backend", "sdk_version"])
    for s in group_by_sdk(q.fingerprint_stats(ix)):
        entries.add_metric([s.backend, s.sdk_version], s.entries)
        size.add_metric([s.backend, s.sdk_version], s.total_bytes)
    yield entries
    yield size


def _coverage(ix: Index) -> Iterator[Metric]:
    labels = ["matrix", "fingerprint", "backend", "sdk_version"]
    cells = GaugeMetricFamily("neffcache_matrix_cells",
                              "Cells of the current version of a registered matrix.",
                              labels=["matrix"])
    ratio = GaugeMetricFamily("neffcache_coverage_ratio",
                              "Share of a matrix's cells with an entry for a fingerprint.",
                              labels=labels)
    counts = GaugeMetricFamily("neffcache_coverage_cells",
                               "A matrix's cells per fingerprint and status.",
                               labels=[*labels, "status"])
    failed = GaugeMetricFamily("neffcache_failed_cells",
                               "Cells whose latest warm-up failed and that have no entry.",
                               labels=["matrix", "fingerprint"])
    for grid in q.coverage_summaries(ix):
        name = grid.matrix.name
        cells.add_metric([name], grid.total_cells)
        for f in grid.fingerprints:
            base = [name, f.key, f.backend, f.sdk_version]
            ratio.add_metric(base, f.ratio)
            for status, n in (("ready", f.ready), ("failed", f.failed), ("missing", f.missing)):
                counts.add_metric([*base, status], n)
            failed.add_metric([name, f.key], f.failed)
    yield from (cells, ratio, counts, failed)


def _restores(ix: Index) -> Iterator[Metric]:
    total = CounterMetricFamily("neffcache_restores", "Restore runs reported to the index.",
                                labels=["outcome"])
    size = CounterMetricFamily("neffcache_restore_bytes", "Bytes fetched by reported restores.",
                               labels=["outcome"])
    hist = HistogramMetricFamily("neffcache_restore_duration_seconds",
                                 "How long reported restores took.", labels=["outcome"])
    for o in q.restore_outcomes(ix):
        total.add_metric([o.outcome], o.count)
        size.add_metric([o.outcome], o.bytes_sum)
        buckets = [(_le(b), n) for b, n in zip(DURATION_BUCKETS, o.buckets, strict=True)]
        hist.add_metric([o.outcome], [*buckets, ("+Inf", o.count)], sum_value=o.seconds_sum)
    yield from (total, size, hist)


def _le(bound: float) -> str:
    return repr(float(bound))


def metrics_registry(index: Index) -> CollectorRegistry:
    """A registry holding only the index collector (no process metrics of this server)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(IndexCollector(index))
    return registry
