"""What a savepoint costs: exporting a topology's state to a file and importing it again.

    python bench/bench_savepoint.py [--keys 1000000] [--providers sqlite,redis]

A store holds N keys of bolt ``count`` committed by 2 tasks, at checkpoint 7;
``export_state`` writes them to a savepoint (plain JSON lines, then gzip), and
``import_state`` loads the plain one into a new store of the same provider.
Each provider runs in its own process; the table gives the seconds each took,
keys per second, the file's size, and the process's peak RSS (which must not
grow with N: both read and write a page or a chunk at a time; the store is
filled by another process).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def _fill(conf: dict[str, Any], keys: int) -> None:
    """The state of ``bench_rescale.fill`` committed at checkpoint 7, with its record."""
    from bench_rescale import fill

    from statestream._registry import open_provider

    spec, pconf = conf["topology.state.provider"], conf["topology.state.provider.config"]
    with open_provider(spec, pconf, scope="bench") as provider:
        fill(provider, keys)
        for t in (0, 1):
            state = provider.get_state(f"count-{t}")
            state.prepare_commit(7)
            state.commit(7)
        record = provider.get_state("$checkpointspout-0")
        record.put("checkpoint", {"txid": 7, "phase": "COMMITTED"})
        record.put("positions", {"7": {"words-0": {"line": keys}}})
        record.commit()


def one(provider_name: str, keys: int) -> dict[str, Any]:
    from bench_stateful import cleanup, provider_conf

    from statestream import export_state, import_state

    work = Path(tempfile.mkdtemp())
    source = provider_conf(provider_name, str(work / "a"))
    target = provider_conf(provider_name, str(work / "b"))
    for d in ("a", "b"):
        (work / d).mkdir()
    # Filled by another process: this one's peak RSS is the export's and the import's.
    subprocess.run(
        [sys.executable, __file__, "--fill", json.dumps(source), "--keys", str(keys)], check=True
    )
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    plain, packed = work / "bench.jsonl", work / "bench.jsonl.gz"
    t0 = time.perf_counter()
    done = export_state(plain, "bench", source)
    t1 = time.perf_counter()
    export_state(packed, "bench", source)
    t2 = time.perf_counter()
    loaded = import_state(plain, "bench", target)
    t3 = time.perf_counter()
    cleanup(source)
    cleanup(target)
    assert done.entries == loaded.entries == keys + 3, (done, loaded)  # + $layout 1, the record 2
    return {
        "export": t1 - t0,
        "export_gz": t2 - t1,
        "import": t3 - t2,
        "mb": plain.stat().st_size / 1e6,
        "gz_mb": packed.stat().st_size / 1e6,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mb": rss_before / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--providers", default="sqlite,redis")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--fill", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.fill:
        _fill(json.loads(args.fill), args.keys)
        return
    if args.one:
        print(json.dumps(one(args.one, args.keys)))
        return
    cmd = "python bench/bench_savepoint.py"
    if args.keys != 1_000_000:
        cmd += f" --keys {args.keys}"
    if args.providers != "sqlite,redis":
        cmd += f" --providers {args.providers}"
    print(f"command: {cmd}\n")
    print(
        "| provider | keys | export s (keys/s) | export .gz s | import s (keys/s) "
        "| file MB (.gz) | peak RSS MB (before) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in args.providers.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--one", name, "--keys", str(args.keys)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        r = json.loads(out.splitlines()[-1])
        n = args.keys
        print(
            f"| {name} | {n:,} | {r['export']:.1f} ({n / r['export']:,.0f}) "
            f"| {r['export_gz']:.1f} | {r['import']:.1f} ({n / r['import']:,.0f}) "
            f"| {r['mb']:.1f} ({r['gz_mb']:.1f}) | {r['rss_mb']:.0f} ({r['rss_before_mb']:.0f}) |"
        )


if __name__ == "__main__":
    main()
