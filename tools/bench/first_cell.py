"""Time to the first cell ready (issue 38), a part of ``boot.py``: a matrix of N cells of the
compiled shape, each its own tree (6 large files + 300 small ones, fresh contents per cell),
published one cell at a time; then `neffcache restore --first LAST_CELL --log-format jsonl`
into an empty directory, on loopback and through the shaped link. Timed here from the moment
the restore process is started: to the line announcing the requested cell (read off stderr as
it comes) and to the process's exit. The requested cell is the matrix's last, so the order
the restore installs in is what is measured, not the matrix's. Every run is judged byte for
byte (every file of every cell) and its ready marker checked before the next.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import restore as B

from tests.support.synthetic import KiB, MiB, Profile, ProfileTree, make_profile_cache

FIRST_TARGET = 0.1  # first requested cell ready / whole restore, at most
PIPELINE = "boot-first"


def cell_profile(large_mib: int) -> Profile:
    return Profile("first", small=300, small_size=(1 * KiB, 64 * KiB), large=6,
                   large_size=(large_mib * MiB, large_mib * MiB))


def shapes(n: int) -> list[str]:
    return [f"{64 * (i + 8)}x1024" for i in range(n)]


def matrix_text(n: int) -> str:
    return (f'backend = "neuron"\n[[pipelines]]\nname = "{PIPELINE}"\n'
            'class = "diffusers:Flux2KleinPipeline"\nmodel = "/models/boot"\nmode = "compile"\n'
            f"shapes = {json.dumps(shapes(n))}\n")


def cell_ids(n: int) -> list[str]:
    return [f"{PIPELINE}/compile/{s}/b1/tp1" for s in shapes(n)]


@dataclass
class FirstCell:
    """One link's runs: seconds to the requested cell's announcement, to the exit, and the
    restore's own figure for the announcement (seconds since its process started)."""
    first: list[float] = field(default_factory=list)
    total: list[float] = field(default_factory=list)
    reported: list[float] = field(default_factory=list)
    position: list[int] = field(default_factory=list)  # the requested cell's place in line

    def ratio(self) -> float:
        return statistics.median(self.first) / statistics.median(self.total)


def prepare(work: Path, env: dict[str, str], n: int, large_mib: int,
            seed: int) -> tuple[Path, list[tuple[str, ProfileTree]]]:
    """Write the matrix and N cell trees; publish each cell (this checkout's push) to the
    store prefix ``first``; the sources are removed once published."""
    matrix = work / "first.toml"
    matrix.write_text(matrix_text(n), encoding="utf-8")
    penv = dict(env, NEFFCACHE_HOME=str(work / "home-first"),
                NEFFCACHE_STORE="s3://boot/first")
    cells = []
    for i, cell in enumerate(cell_ids(n)):
        tree = make_profile_cache(work / "src-first" / str(i), cell_profile(large_mib),
                                  seed=seed * 1000 + i)
        B.run([*B.neffcache(), "push", "--matrix", str(matrix), "--cell", cell, "--root",
               f"neff={tree.root}", "--json", "--allow-missing-packages"], penv)
        cells.append((cell, tree))
    B.log(f"first cell: {n} cells of {sum(t.total_bytes for _, t in cells) / MiB:.0f} MiB "
          "published")
    return matrix, cells


def run_once(matrix: Path, dest: Path, env: dict[str, str], first: str,
             n: int) -> tuple[float, float, float, int]:
    """One restore of the whole matrix, the ``first`` cell requested first. Returns (seconds
    to its announcement, seconds to the exit, the restore's own elapsed for it, its place in
    the announcements)."""
    argv = [*B.neffcache(), "restore", str(matrix), "--to", str(dest), "--first", first,
            "--log-format", "jsonl", "--json"]
    seen: dict[str, float] = {}
    events: list[dict[str, object]] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            now = time.perf_counter() - t0
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "ready":
                events.append(ev)
                seen.setdefault(str(ev.get("cell")), now)

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()  # stderr is the reader's alone
    proc.wait(timeout=1800)
    total = time.perf_counter() - t0
    reader.join(timeout=10)
    if proc.returncode != 0:
        raise RuntimeError(f"restore exited {proc.returncode}: {out[-2000:]}")
    doc = json.loads(out)
    order = [str(ev["cell"]) for ev in events]
    if first not in seen or sorted(order) != sorted(cell_ids(n)):
        raise RuntimeError(f"announcements: {order}")
    reported = next(float(ev["elapsed"]) for ev in events  # type: ignore[arg-type]
                    if ev["cell"] == first)
    assert [c["cell"] for c in doc["cells_ready"]] == order, (doc["cells_ready"], order)
    return seen[first], total, reported, order.index(first)


def measure(matrix: Path, cells: list[tuple[str, ProfileTree]], work: Path,
            env: dict[str, str], endpoints: dict[str, str], runs: int) -> dict[str, FirstCell]:
    """Rounds alternating the links; each run into a new directory, judged, then deleted."""
    first = cells[-1][0]
    out = {link: FirstCell() for link in endpoints}
    renv = dict(env, NEFFCACHE_HOME=str(work / "home-first-instance"),
                NEFFCACHE_STORE="s3://boot/first")
    links = list(endpoints)
    run_once(matrix, work / "out-first-warm", dict(renv, AWS_ENDPOINT_URL=endpoints[links[0]]),
             first, len(cells))  # untimed: SeaweedFS's first read of an object is slow
    shutil.rmtree(work / "out-first-warm", ignore_errors=True)
    for i in range(runs):
        for link in links[i % len(links):] + links[:i % len(links)]:
            dest = work / f"out-first-{link}-{i}"
            os.sync()
            r = run_once(matrix, dest, dict(renv, AWS_ENDPOINT_URL=endpoints[link]), first,
                         len(cells))
            for lst, v in zip((out[link].first, out[link].total, out[link].reported,
                               out[link].position), r, strict=True):
                lst.append(v)  # type: ignore[attr-defined]
            marker = dest / ".neffcache-entries" / "ready" / quote(first, safe="")
            if not marker.exists():
                raise RuntimeError(f"no ready marker at {marker}")
            for _, tree in cells:
                B.check_tree(dest / "neff", tree, "first cell", full=True)
            B.log(f"first cell, {link} {i + 1}: ready after {r[0]:.2f} s of {r[1]:.2f} s "
                  f"(announced #{r[3] + 1}; the restore's own figure {r[2]:.2f} s)")
            shutil.rmtree(dest, ignore_errors=True)
    return out


def report(results: dict[str, FirstCell], cells: list[tuple[str, ProfileTree]],
           limits: dict[str, float]) -> tuple[list[str], dict[str, bool]]:
    n = len(cells)
    nbytes = sum(t.total_bytes for _, t in cells)
    lines = [f"time to first cell: {n} cells of the compiled shape ({len(cells[0][1].files)} "
             f"files, {cells[0][1].total_bytes / MiB:.0f} MiB each; {nbytes / MiB:.0f} MiB in "
             f"all), `--first` the matrix's last cell; medians of "
             f"{len(next(iter(results.values())).first)}"]
    verdicts = {}
    for link, r in results.items():
        f, t = statistics.median(r.first), statistics.median(r.total)
        limit = f"   (limit for the whole: {limits[link]:.2f} s)" if link in limits else ""
        lines.append(f"  {link:9} first cell {f:6.2f} s of {t:6.2f} s = {r.ratio():.3f} "
                     f"(target <= {FIRST_TARGET}; 1/{n} = {1 / n:.3f})   the restore's own "
                     f"figure {statistics.median(r.reported):.2f} s, announced "
                     f"#{statistics.median(r.position) + 1:.0f}{limit}   (first: "
                     + ", ".join(f"{x:.2f}" for x in r.first) + "; whole: "
                     + ", ".join(f"{x:.2f}" for x in r.total) + ")")
        verdicts[f"first cell ({link}) <= {FIRST_TARGET} of the whole restore"] = \
            r.ratio() <= FIRST_TARGET
    return lines, verdicts
