"""Copy benchmark: `neffcache copy` S3 -> S3 between two moto servers (each side its own
endpoint and keys) against a named peer in the same run: boto3's s3transfer
(download_fileobj into memory, then upload_fileobj) over the same objects, same threads.

    python tools/bench/copy_s3.py              # 3 entries with 5-7 MiB blobs, 8 workers

Prints MB/s of each and the ratio neffcache / peer (the machine is noisy: compare the ratio).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from neffcache.backends import get_backend  # noqa: E402
from neffcache.precompile.publish import publish_entry  # noqa: E402
from neffcache.store import open_store, side_environ  # noqa: E402
from tests.integration.test_copy_s3_to_s3 import client, side_env  # noqa: E402
from tests.support.lifecycle import cell, sdk_fingerprint  # noqa: E402
from tests.support.servers import moto_server  # noqa: E402
from tests.support.synthetic import make_neff_cache  # noqa: E402

MiB = 1 << 20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    (tmp / "tmp").mkdir()
    with moto_server() as a, moto_server() as b:
        env = side_env(tmp, a, b)
        name = f"nc-{uuid.uuid4().hex[:10]}"
        src_c, dst_c = client(a, "from-key", "us-east-1"), client(b, "to-key", "us-east-1")
        src_c.create_bucket(Bucket=name)
        dst_c.create_bucket(Bucket=name)
        src = open_store(f"s3://{name}/nc", environ=side_environ(env, "FROM"))
        for i in range(args.entries):
            cache = make_neff_cache(tmp / f"c{i}", seed=i, count=8, large=4,
                                    large_size=(5 * MiB + 1, 7 * MiB), droppings=False)
            publish_entry(src, cell(64 * (i + 1)), sdk_fingerprint("2.19"),
                          get_backend("neuron"), {"neff": cache.root})
        keys = [o["Key"] for page in src_c.get_paginator("list_objects_v2").paginate(
            Bucket=name, Prefix="nc/") for o in page.get("Contents", [])]
        total = sum(o["ContentLength"] for o in
                    (src_c.head_object(Bucket=name, Key=k) for k in keys))
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "neffcache.cli", "copy", "--all", "--from",
                        f"s3://{name}/nc", "--to", f"s3://{name}/cp", "--workers",
                        str(args.workers)], env=env, check=True, stdout=subprocess.DEVNULL)
        ours = time.monotonic() - started

        def peer(key: str) -> None:
            buf = io.BytesIO()
            src_c.download_fileobj(name, key, buf)
            buf.seek(0)
            dst_c.upload_fileobj(buf, name, "peer/" + key)

        started = time.monotonic()
        with ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(peer, keys))
        theirs = time.monotonic() - started
    mb = total / 1e6
    print(f"{len(keys)} objects, {mb:.1f} MB, {os.cpu_count()} CPUs")
    print(f"neffcache copy (incl. process start): {mb / ours:.1f} MB/s ({ours:.2f} s)")
    print(f"peer boto3 s3transfer in-process:     {mb / theirs:.1f} MB/s ({theirs:.2f} s)")
    print(f"ratio neffcache / peer: {theirs / ours:.2f} x")


if __name__ == "__main__":
    main()
