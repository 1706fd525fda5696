"""What a rescale costs: re-partitioning a stateful bolt's committed state at start.

    python bench/bench_rescale.py [--keys 1000000] [--providers sqlite,redis]

A store holds N keys of bolt ``count`` committed by 2 tasks; the topology
starts with 3 tasks, and ``rescale_state`` (what every runtime calls before
its tasks open) moves every key to its new owner. Each provider runs in its own
process; the table gives the seconds the rescale took, keys per second, and
the process's peak RSS.
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


def fill(provider: Any, keys: int) -> None:
    """Bolt ``count``'s state on 2 tasks, ``keys`` keys ``"k<i>" -> i`` (``provider``
    scoped to topology ``bench``), its parallelism recorded in ``$layout``."""
    from statestream._rescale import LAYOUT_NAMESPACE
    from statestream._routing import task_for_key

    states = [provider.get_state(f"count-{t}") for t in (0, 1)]
    for i in range(keys):
        key = f"k{i}"
        states[task_for_key(key, 2)].put(key, i)
        if i % 100_000 == 99_999:
            for s in states:
                s.commit()
    for s in states:
        s.commit()
    layout = provider.get_state(LAYOUT_NAMESPACE)
    layout.put("parallelism", {"count": 2})
    layout.commit()


def one(provider_name: str, keys: int) -> dict[str, Any]:
    from bench_stateful import cleanup, provider_conf

    from statestream import KeyValueState, StatefulBolt, TopologyBuilder, Tuple
    from statestream._registry import open_provider
    from statestream._rescale import rescale_state
    from statestream.testing import ListSpout

    class Count(StatefulBolt):
        def init_state(self, state: KeyValueState) -> None:
            self.state = state

        def execute(self, tuple: Tuple) -> None:
            self.collector.ack(tuple)

    conf = provider_conf(provider_name, tempfile.mkdtemp())
    spec, pconf = conf["topology.state.provider"], conf["topology.state.provider.config"]
    with open_provider(spec, pconf, scope="bench") as provider:
        fill(provider, keys)
    b = TopologyBuilder("bench")
    b.set_spout("words", ListSpout([], fields=["word"]))
    b.set_bolt("count", Count(), 3).fields_grouping("words", ["word"])
    topology = b.build()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open_provider(spec, pconf, scope="bench") as provider:
        t0 = time.perf_counter()
        (report,) = rescale_state(provider, topology)
        elapsed = time.perf_counter() - t0
        found = sum(1 for t in range(3) for _ in provider.get_state(f"count-{t}"))
    cleanup(conf)
    return {
        "provider": provider_name,
        "moved": report.moved,
        "kept": report.kept,
        "found": found,
        "seconds": elapsed,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_before_mb": rss_before / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--providers", default="sqlite,redis")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.keys)))
        return
    cmd = "python bench/bench_rescale.py"
    if args.keys != 1_000_000:
        cmd += f" --keys {args.keys}"
    if args.providers != "sqlite,redis":
        cmd += f" --providers {args.providers}"
    print(f"command: {cmd}\n")
    print("| provider | keys | moved (2 -> 3 tasks) | seconds | keys/s | peak RSS MB (before) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in args.providers.split(","):
        out = (
            subprocess.run(
                [sys.executable, __file__, "--one", name, "--keys", str(args.keys)],
                check=True,
                capture_output=True,
                text=True,
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        r = json.loads(out)
        assert r["found"] == args.keys == r["moved"] + r["kept"], r
        print(
            f"| {name} | {args.keys:,} | {r['moved']:,} | {r['seconds']:.1f} "
            f"| {args.keys / r['seconds']:,.0f} | {r['rss_mb']:.0f} ({r['rss_before_mb']:.0f}) |"
        )


if __name__ == "__main__":
    main()
