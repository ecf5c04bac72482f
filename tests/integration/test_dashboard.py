"""The dashboard in headless Debian Chromium (driven over CDP) against the real
``neffcache serve`` on the embedded index: the grid shows the index's statuses, the filter,
paging and failure logs work, nothing is fetched from another host, and screenshots are kept
under artifacts/ (gitignored) for a human to look at."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from neffcache.index import open_index
from tests.support.chromium import Page, chromium, navigate
from tests.support.live_server import serve_subprocess
from tests.support.ops_seed import (
    DEMO_RESTORES,
    FAILED,
    MISSING,
    READY,
    Seeded,
    matrix_text,
    sdk_fingerprint,
    seed,
    seed_demo,
)

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"

# Reads the grid back from the DOM: column keys, then each row's cell id and statuses.
READ_GRID = """JSON.stringify({
  keys: [...document.querySelectorAll('#grid thead th[title]')].map(th => th.title),
  rows: [...document.querySelectorAll('#grid tbody tr')].map(tr => [
    tr.querySelector('td.cell').textContent,
    [...tr.querySelectorAll('td.st')].map(td => td.dataset.status)]),
  page: document.getElementById('page-info').textContent,
})"""


def read_grid(page: Page) -> dict[str, object]:
    return json.loads(page.evaluate(READ_GRID))


def set_filter(page: Page, glob: str) -> None:
    page.evaluate(f"""(() => {{ const f = document.getElementById('filter');
        f.value = {json.dumps(glob)}; f.dispatchEvent(new Event('input')); }})()""")


@pytest.fixture
def demo_server(neffcache_home: Path) -> Iterator[tuple[str, Seeded]]:
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        data = seed_demo(ix)
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base:
        yield base, data


def test_grid_shows_the_statuses_in_the_index(demo_server: tuple[str, Seeded]) -> None:
    base, data = demo_server
    with chromium() as page:
        navigate(page, base + "/")
        assert page.wait_for("document.body.dataset.loaded") == "true"
        grid = read_grid(page)
        keys = grid["keys"]
        shown = {(cell, k): s for cell, statuses in grid["rows"]  # type: ignore[attr-defined]
                 for k, s in zip(keys, statuses, strict=True)}  # type: ignore[arg-type]
        assert shown == data.statuses
        assert set(shown.values()) == {READY, FAILED, MISSING}
        assert grid["page"] == "cells 1–6 of 6"
        page.screenshot(ARTIFACTS / "dashboard.png")

        cards = page.evaluate("[...document.querySelectorAll('.fp-card .counts')]"
                              ".map(e => e.textContent).join('|')")
        for fp in data.fingerprints:
            assert (f"{data.count(fp, READY)} ready · {data.count(fp, FAILED)} failed · "
                    f"{data.count(fp, MISSING)} missing") in cards
        restores = page.evaluate("document.getElementById('restores').textContent")
        assert all(host in restores for host, *_ in DEMO_RESTORES)
        failures = page.evaluate("document.getElementById('failures').textContent")
        assert "neuronx-cc: error: out of memory" in failures

        page.evaluate("document.querySelector('#grid td.st.failed').click()")
        log = page.wait_for("(() => { const b = document.getElementById('cell-log');"
                            " return !b.hidden && b.querySelector('pre')"
                            " && b.textContent; })()")
        assert "out of memory" in log

        set_filter(page, "p0/eager/*")
        page.wait_for("document.getElementById('page-info').textContent === 'cells 1–3 of 3'")
        rows = read_grid(page)["rows"]
        assert [r[0] for r in rows] == [c.id for c in data.matrix.cells if "/eager/" in c.id]  # type: ignore[index, union-attr]

        assert page.console_errors() == []
        assert all(u.startswith(base + "/") or u.startswith("data:")
                   for u in page.requested_urls()), page.requested_urls()


def test_5000_cells_by_10_fingerprints_stay_paged_and_usable(neffcache_home: Path) -> None:
    fps = [sdk_fingerprint(i) for i in range(10)]
    text = matrix_text("fleet", pipelines=5, modes=("compile", "eager"), shapes=25, batches=20)
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        data = seed(ix, text, fps,
                    lambda n, i: READY if n % 10 < i else FAILED if n % 10 == i else MISSING)
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base, \
            chromium() as page:
        started = time.monotonic()
        navigate(page, base + "/")
        page.wait_for("document.body.dataset.loaded")
        first_load = time.monotonic() - started
        grid = read_grid(page)
        assert grid["page"] == "cells 1–200 of 5,000"
        assert len(grid["rows"]) == 200  # type: ignore[arg-type]
        assert page.evaluate("document.querySelectorAll('#grid td.st').length") == 2000
        page.screenshot(ARTIFACTS / "dashboard-5000x10.png", full_page=False)

        cells = [c.id for c in data.matrix.cells]
        started = time.monotonic()
        page.evaluate("document.getElementById('next').click()")
        page.wait_for("document.getElementById('page-info').textContent"
                      " === 'cells 201–400 of 5,000'")
        next_page = time.monotonic() - started
        keys = read_grid(page)["keys"]
        rows = read_grid(page)["rows"]
        assert [r[0] for r in rows] == cells[200:400]  # type: ignore[index, union-attr]
        for cell_id, statuses in rows[:20]:  # type: ignore[index, misc]
            assert statuses == [data.statuses[(cell_id, k)] for k in keys]  # type: ignore[union-attr]

        started = time.monotonic()
        set_filter(page, "p3/eager/*")
        page.wait_for("document.getElementById('page-info').textContent"
                      " === 'cells 1–200 of 500'")
        filtered = time.monotonic() - started
        assert all(r[0].startswith("p3/eager/") for r in read_grid(page)["rows"])  # type: ignore[union-attr, index]
        assert page.console_errors() == []
    print(f"\n5000x10 dashboard: first load {first_load:.2f} s, next page {next_page:.2f} s, "
          f"filter {filtered:.2f} s (incl. 250 ms debounce)")


def test_fleet_view_shows_a_0_percent_fingerprint_column_and_restores_over_time(
        neffcache_home: Path) -> None:
    """A fingerprint the fleet restores with but nothing was built for is a column at 0 %;
    restores per day are drawn by outcome, misses split by why."""
    from datetime import datetime, timezone

    from neffcache.reports import build_report

    fleet = sdk_fingerprint(7)  # in restore reports only: no entry, no failure
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        data = seed_demo(ix)
        cells = [c.id for c in data.matrix.cells]
        ix.record_reports([build_report(
            {"status": "partial", "exit_code": code, "cells_requested": cells,
             "cells_missing": cells, "seconds": 1.5}, fingerprint=fleet, host=f"i-fleet-{n}",
            matrix="demo", now=datetime.now(timezone.utc), nonce=f"{n:08x}", version="t")
            for n, code in enumerate((3, 5, 5))])
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base, \
            chromium() as page:
        navigate(page, base + "/")
        assert page.wait_for("document.body.dataset.loaded") == "true"
        grid = read_grid(page)
        assert fleet.key in grid["keys"]  # type: ignore[operator]
        column = list(grid["keys"]).index(fleet.key)  # type: ignore[call-overload]
        assert {statuses[column] for _, statuses in grid["rows"]} == {MISSING}  # type: ignore[attr-defined, index]
        chips = page.evaluate("[...document.querySelectorAll('#overview .chip.zero')]"
                              ".map(e => e.title + '|' + e.textContent).join('\\n')")
        assert f"{fleet.key}" in chips and f"{fleet.key[:8]} 0 %" in chips
        bars = json.loads(page.evaluate("""JSON.stringify(Object.fromEntries(
            [...document.querySelectorAll('#timeline-chart rect')].map(r =>
              [r.dataset.series, r.querySelector('title').textContent])))"""))
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        assert bars["miss_other_fingerprint"] == f"{today}: 2 miss: other fingerprint"
        assert bars["miss_no_entry"] == f"{today}: 1 miss: no entry"
        assert {"hit", "partial", "error"} <= set(bars)  # the seeded demo restores
        page.screenshot(ARTIFACTS / "dashboard-fleet.png", full_page=True)
        assert page.console_errors() == []
