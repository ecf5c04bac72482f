"""The dashboard in headless Debian Chromium (driven over CDP) against the real
``neffcache serve`` on the embedded index: the grid shows the index's statuses, the filter,
paging and failure logs work, nothing is fetched from another host, at 52 fingerprints the
worst come first with the grid on the first screen, links and auto-refresh keep a selection,
and screenshots are kept under artifacts/ (gitignored) for a human to look at."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from neffcache.fingerprint import Fingerprint, build_fingerprint
from neffcache.index import Index, open_index
from neffcache.reports import build_report
from tests.support.chromium import Page, chromium, navigate
from tests.support.live_server import serve_subprocess
from tests.support.ops_seed import (
    DEMO_RESTORES,
    FAILED,
    FLAGS,
    MISSING,
    READY,
    Seeded,
    StatusRule,
    flag_fingerprints,
    matrix_text,
    sdk_fingerprint,
    seed,
    seed_demo,
    seed_problems,
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


def fleet_of_52() -> tuple[list[Fingerprint], Fingerprint, Fingerprint]:
    """52 fingerprints: 45 SDK versions on trn2, five with neuronx-cc absent (on trn1),
    one the fleet restores with and nothing was built for, one with half its cells failed."""
    fps = [sdk_fingerprint(n) for n in range(45)]
    fps += [build_fingerprint("neuron", {"version.neuronx-cc": "absent", "version.torch":
                                         f"2.{n}.0", "target": "trn1"}) for n in range(5)]
    restored = build_fingerprint("neuron", {"version.neuronx-cc": "2.99.0", "target": "trn2",
                                            "version.torch": "2.9.0", "lnc": "1"})
    half = build_fingerprint("neuron", {"version.neuronx-cc": "2.50.0", "target": "trn3",
                                        "version.torch": "2.9.0"})
    return [*fps, half, restored], restored, half


def fleet_rule(n_fps: int) -> StatusRule:
    def rule(n: int, i: int) -> str:
        if i == n_fps - 1:  # restored: nothing built
            return MISSING
        if i == n_fps - 2:  # half: every other cell failed
            return FAILED if n % 2 else READY
        return FAILED if (n + i) % 40 == 0 else MISSING if (n * 7 + i) % 11 == 0 else READY
    return rule


def seed_fleet(ix: Index) -> tuple[Seeded, Fingerprint, Fingerprint, Seeded]:
    """Matrix "fleet": 120 cells x 52 fingerprints (6,240 grid cells, ~5,200 entries), restore
    reports naming the restored-only fingerprint, a few entries verified (warm, compiled);
    matrix "side": 8 cells x 3 fingerprints."""
    fps, restored, half = fleet_of_52()
    text = matrix_text("fleet", pipelines=2, modes=("compile", "eager"), shapes=30)
    data = seed(ix, text, fps, fleet_rule(len(fps)))
    cells = [c.id for c in data.matrix.cells]
    ix.record_reports([build_report(
        {"status": "partial", "exit_code": 3, "cells_requested": cells, "cells_missing": cells,
         "seconds": 1.0}, fingerprint=restored, host=f"i-fleet-{n}", matrix="fleet",
        now=datetime.now(timezone.utc), nonce=f"{n:08x}", version="t") for n in range(3)])
    for entry, status in zip(ix.entries("p0/compile/*", fps[0].key, limit=3),
                             ("hit", "hit", "compiled"), strict=True):
        assert ix.record_verification(entry.entry_key, status)
    side = seed(ix, matrix_text("side", shapes=4, first=5, modes=("compile", "eager")),
                fps[10:13], lambda n, i: READY if n % 3 else MISSING)
    return data, restored, half, side


CARD_KEYS = "[...document.querySelectorAll('#fp-summary .fp-card')].map(e => e.dataset.fp)"


def test_at_52_fingerprints_the_worst_come_first_the_grid_is_above_the_fold_and_links_open_a_selection(  # noqa: E501
        neffcache_home: Path) -> None:
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        data, restored, half, side = seed_fleet(ix)
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base, \
            chromium(1280, 800) as page:
        navigate(page, base + "/")
        assert page.wait_for("document.body.dataset.loaded") == "true"
        assert page.evaluate("document.getElementById('matrix').value") == "fleet"
        cards = page.evaluate(CARD_KEYS)
        assert cards[:2] == [restored.key, half.key], cards
        texts = page.evaluate("[...document.querySelectorAll('.fp-card, .fp-row')]"
                              ".map(e => e.textContent.replace(/\\s+/g, ' '))")
        assert len(texts) == 52 and all(" trn" in t for t in texts), texts
        assert "3 restores · nothing built" in texts[0] and "trn2 lnc=1" in texts[0]
        assert any("neuron absent" in t and "trn1" in t for t in texts)
        top = page.evaluate("document.querySelector('#grid tbody tr').getBoundingClientRect()"
                            ".top")
        assert top < 800 - 40, top  # the grid's first row is on the first screen
        keys = read_grid(page)["keys"]
        assert keys[:2] == [restored.key, half.key]  # type: ignore[index]
        warm = page.evaluate("[...document.querySelectorAll('#grid td.st.ready.warm')]"
                             ".map(td => td.dataset.verified).join(',')")
        assert warm == "hit,hit"
        assert page.evaluate("document.querySelectorAll('#grid td[data-verified=compiled]')"
                             ".length") == 1
        page.screenshot(ARTIFACTS / "dashboard-worst-first.png", full_page=False)

        page.evaluate(f"document.querySelector('.fp-card[data-fp=\"{half.key}\"]').click()")
        page.wait_for("document.querySelector('#grid thead th.sel')?.title === "
                      f"{json.dumps(half.key)}")
        assert f"fingerprint={half.key}" in page.evaluate("location.search")
        assert "matrix=fleet" in page.evaluate("location.search")

        chosen = side.fingerprints[2]
        navigate(page, f"{base}/?matrix=side&fingerprint={chosen.key}&refresh=1")
        page.wait_for("Number(document.body.dataset.loads) >= 3")  # refreshed twice
        assert page.evaluate("document.getElementById('matrix').value") == "side"
        assert page.evaluate("document.querySelector('.fp-card.selected').dataset.fp") \
            == chosen.key
        assert page.evaluate("document.querySelector('#grid thead th.sel').title") \
            == chosen.key
        assert page.evaluate("location.search") == \
            f"?matrix=side&fingerprint={chosen.key}&refresh=1"
        assert page.evaluate("document.getElementById('refresh-every').value") == "1"

        first = side.fingerprints[0]  # the same selection as a fragment: #matrix=&fingerprint=
        navigate(page, f"{base}/#matrix=side&fingerprint={first.key}&refresh=0")
        page.wait_for("document.body.dataset.loaded === 'true' && document.querySelector("
                      "'.fp-card.selected')?.dataset.fp === " + json.dumps(first.key))
        assert page.evaluate("document.getElementById('matrix').value") == "side"
        assert page.evaluate("location.search") == \
            f"?matrix=side&fingerprint={first.key}&refresh=0"
        assert page.console_errors() == []
    assert data.count(half, FAILED) == 60 and data.count(restored, MISSING) == 120


ATTENTION = """JSON.stringify(Object.fromEntries(['failed', 'stale', 'unbuilt'].map(kind => [kind,
  [...document.querySelectorAll(`#attention .att-${kind} .att-item`)].map(a => ({
    matrix: a.dataset.matrix, fp: a.dataset.fp, text: a.textContent.replace(/\\s+/g, ' '),
    bottom: a.getBoundingClientRect().bottom}))])))"""


def test_the_first_screen_leads_with_what_is_wrong_in_every_matrix_not_only_the_selected_one(
        neffcache_home: Path) -> None:
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        data, reported, cancelled = seed_problems(ix)
    failed = {(cell, k) for (cell, k), s in data.statuses.items() if s == FAILED}
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base, \
            chromium(1280, 800) as page:
        navigate(page, base + "/?matrix=other")  # a matrix with no failed cell is selected
        assert page.wait_for("document.body.dataset.loaded") == "true"
        assert page.evaluate("document.getElementById('matrix').value") == "other"
        assert page.evaluate("document.getElementById('failures').textContent") == (
            f'no failed cell in other (every matrix: {len(failed)}, listed under "Needs '
            'attention")')
        shown = json.loads(page.evaluate(ATTENTION))
        # every failed cell of "demo" (not selected) is on the first screen, with its matrix
        assert {(a["matrix"], a["fp"]) for a in shown["failed"]} == {
            ("demo", k) for _, k in failed}
        assert {next(c for c, _ in failed if c in a["text"]) for a in shown["failed"]} == {
            c for c, _ in failed}
        assert all(a["bottom"] <= 800 for a in shown["failed"]), shown["failed"]
        head = page.evaluate("document.querySelector('#attention .att-failed .att-head')"
                             ".textContent")
        assert f"{len(failed)} failed cells" in head
        assert [(a["matrix"], "w-dead" in a["text"]) for a in shown["stale"]] == [("demo", True)]
        assert [(a["matrix"], a["fp"]) for a in shown["unbuilt"]] == [("other", reported)]
        assert "1 restore" in shown["unbuilt"][0]["text"]
        page.screenshot(ARTIFACTS / "dashboard-attention.png", full_page=False)

        runs = page.evaluate(f"document.querySelector('#runs tr[data-run=\"{cancelled}\"]')"
                             ".textContent")
        assert "cancelled" in runs and "running" not in runs
        assert page.evaluate("document.querySelectorAll('#runs tr[data-status=cancelled]')"
                             ".length") == 1

        # a failed cell of another matrix is one click from its grid
        fp = sorted(k for _, k in failed)[0]
        page.evaluate(f"document.querySelector('#attention .att-failed "
                      f".att-item[data-fp=\"{fp}\"]').click()")
        page.wait_for("document.getElementById('matrix').value === 'demo' && "
                      f"document.querySelector('.fp-card.selected')?.dataset.fp === '{fp}'")
        page.evaluate(f"document.querySelector('#attention .att-failed "  # again: kept
                      f".att-item[data-fp=\"{fp}\"]').click()")
        assert f"fingerprint={fp}" in page.evaluate("location.search")
        assert page.console_errors() == []


def test_fingerprint_cards_show_what_tells_them_apart_and_explain_it_in_one_click(
        neffcache_home: Path) -> None:
    one, two, other_sdk = flag_fingerprints()
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        seed(ix, matrix_text("flags", shapes=3, first=20), (one, two, other_sdk),
             lambda n, i: READY)
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base, \
            chromium(1280, 800) as page:
        navigate(page, base + "/?matrix=flags")
        assert page.wait_for("document.body.dataset.loaded") == "true"
        # everything built, nothing failed, no fleet: the first screen says so
        assert page.evaluate("document.getElementById('attention').dataset.ok") == "true"
        assert "Nothing needs attention in any matrix" in page.evaluate(
            "document.getElementById('attention').textContent")
        tells = json.loads(page.evaluate("""JSON.stringify(Object.fromEntries(
            [...document.querySelectorAll('.fp-card')].map(c => [c.dataset.fp,
              c.querySelector('.distinct')?.textContent.replace(/\\s+/g, ' ').trim()
              ?? null])))"""))
        assert tells == {one.key: f"cc_flags {FLAGS[0]}", two.key: f"cc_flags {FLAGS[1]}",
                         other_sdk.key: None}
        page.evaluate(f"document.querySelector('.fp-card[data-fp=\"{two.key}\"] .explain')"
                      ".click()")
        page.wait_for("!document.getElementById('fp-explain').hidden && "
                      "document.querySelector('#fp-explain tr[data-field]') !== null")
        rows = json.loads(page.evaluate("""JSON.stringify([...document.querySelectorAll(
            '#fp-explain tbody tr')].map(tr => [...tr.cells].map(td => td.textContent.trim())))"""))
        assert rows[0][:3] == ["cc_flags", FLAGS[1], FLAGS[0]] and len(rows) == 1
        assert "NEURON_CC_FLAGS" in rows[0][3]
        text = page.evaluate("document.getElementById('fp-explain').textContent")
        assert f"neffcache fingerprint --explain {two.key}" in text
        assert "fingerprint=" not in page.evaluate("location.search")  # explaining is not choosing
        page.screenshot(ARTIFACTS / "dashboard-explain.png", full_page=False)
        assert page.console_errors() == []


def test_a_ready_cell_shows_its_entry_and_the_key_that_signed_it(neffcache_home: Path) -> None:
    """The signer is visible on the dashboard: a click on a ready cell shows its entry, and
    the key id that signed its manifest (or "unsigned")."""
    from neffcache.matrix import parse_matrix
    from neffcache.signing import generate_signing_key, sign_manifest
    from tests.unit.test_index_factories import make_manifest

    text = matrix_text("signed", shapes=2)
    matrix = parse_matrix(text, "signed.toml")
    fp = sdk_fingerprint(1)
    _, key = generate_signing_key()
    signed, plain = (make_manifest(c, fp, files=[("neff", "k.neff", 100, c.key)])
                     for c in matrix.cells[:2])
    with open_index(f"sqlite:///{neffcache_home / 'index.db'}", auto_upgrade=True) as ix:
        seed(ix, text, (), lambda n, i: MISSING)  # registers the matrix
        ix.record_entries([sign_manifest(signed, key), plain], "s3://bucket/neff")
    with serve_subprocess({"NEFFCACHE_HOME": str(neffcache_home)}) as base, chromium() as page:
        navigate(page, base + "/#matrix=signed")
        assert page.wait_for("document.body.dataset.loaded") == "true"
        shown = {}
        for n, cell in enumerate(matrix.cells[:2]):
            page.evaluate(f"document.querySelectorAll('#grid tbody tr')[{n}]"
                          ".querySelector('td.st.ready').click()")
            shown[cell.id] = page.wait_for(
                "(() => { const e = document.querySelector('#cell-log .entry-info');"
                f" return e && e.textContent.startsWith({json.dumps(cell.id)})"
                " && e.querySelector('.signer').textContent; })()")
        assert shown == {matrix.cells[0].id: f"signed by key {key.public.key_id}",
                         matrix.cells[1].id: "unsigned"}
        page.screenshot(ARTIFACTS / "dashboard-signer.png")
        assert page.console_errors() == []
