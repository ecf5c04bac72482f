"""TEST DOUBLE of ``worker`` for the ``test-sleep`` backend: reads the same spec,
"compiles" by sleeping the cell's seconds (from the model's seconds.json), leaves a few
synthetic NEFFs in the cache root and writes the same result document. No torch.

Each start and end is appended to ``$NEFFCACHE_TEST_SLEEP_RECORD`` (pid, parent pid, wall
time), so tests can tell which cell was compiled when, by whom, and how often.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from neffcache.matrix import Cell
from neffcache.precompile.worker import RESULT_SCHEMA, say_phase, write_result
from tests.support.sleep_backend import RECORD_VAR, SECONDS_FILE
from tests.support.synthetic import make_neff_cache


def _record(event: str, cell_id: str, **extra: Any) -> None:
    path = os.environ.get(RECORD_VAR)
    if not path:
        return
    line = json.dumps({"event": event, "cell_id": cell_id, "pid": os.getpid(),
                       "ppid": os.getppid(), "t": time.time(), **extra})
    with open(path, "a", encoding="utf-8") as fh:  # one short line per write: appends stay whole
        fh.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.sleep_worker")
    parser.add_argument("--spec", required=True)
    args = parser.parse_args(argv)
    spec = json.loads(Path(args.spec).read_text(encoding="utf-8"))
    cell_id = Cell.from_json(spec["cell"]).id
    table = json.loads(Path(spec["model"], SECONDS_FILE).read_text(encoding="utf-8"))
    plan = table.get(cell_id, 0.2)
    _record("start", cell_id)
    if isinstance(plan, dict):
        time.sleep(float(plan.get("seconds", 0.1)))
        _record("fail", cell_id)
        write_result(spec["result_path"], {"schema_version": RESULT_SCHEMA, "ok": False,
                                           "cell_id": cell_id, "error": str(plan.get("fail"))})
        print(f"test-sleep worker: {cell_id}: {plan.get('fail')}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    say_phase("compiling")
    print(f"test-sleep worker: {cell_id}: sleeping {float(plan):g} s", flush=True)
    time.sleep(float(plan))
    seed = int.from_bytes(cell_id.encode()[-8:], "little")
    cache = make_neff_cache(Path(spec["base"]) / "neff", seed=seed, count=4, large=0,
                            small_size=(256, 1024), droppings=False)
    seconds = time.perf_counter() - started
    files = [["neff", rel, len(data), 0] for rel, data in sorted(cache.files.items())]
    write_result(spec["result_path"], {
        "schema_version": RESULT_SCHEMA, "ok": True, "cell_id": cell_id,
        "seconds": round(seconds, 3), "files_before": [], "files_after": files,
        "activity": {}})
    _record("end", cell_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
