"""Where a windowed run's memory goes: CPU seconds, the cycle collector, RSS, tuples pending.

    PYTHONPATH=TREE STATESTREAM_CORE=compiled python bench/bench_window_probe.py KIND [--events N]

One run of bench_windows.py's ``KIND`` topology (``window``, ``aggregate``,
``count``; the same events, config and exactness check) in this
process, printing its wall and CPU seconds (``time.process_time``), the cycle
collector's collections per generation and the seconds they took (through
``gc.callbacks``, which only observe), the peak RSS, and for a windowed kind
the tuples each windowed task held pending (not yet passed by the watermark)
at each checkpoint: median and max. The wall clock of one run on a shared
machine is noise; compare CPU seconds, collections and RSS of interleaved runs.
"""

from __future__ import annotations

import argparse
import collections
import gc
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_windows  # beside this file


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("kind", choices=["window", "aggregate", "count"])
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()

    from statestream._windowed import WindowedBoltExecutor
    from statestream.runtime.local import LocalRuntime
    from statestream.testing import committed_state

    events = str(bench_windows.events_path(args.events))
    workdir = tempfile.mkdtemp(prefix="bench-window-probe-")
    conf = bench_windows.statestream_conf(events, workdir)
    topo = bench_windows.statestream_topology(args.kind, 10)
    rt = LocalRuntime(topo, conf)

    collections_by_gen = [0, 0, 0]
    gc_s = [0.0, 0.0]  # total, start of the one under way

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_s[1] = time.perf_counter()
        else:
            collections_by_gen[info["generation"]] += 1
            gc_s[0] += time.perf_counter() - gc_s[1]

    pending: list[int] = []
    prepare = WindowedBoltExecutor.pre_prepare

    def counting_prepare(self: Any, txid: int) -> None:
        pending.append(len(self.core.pending_now()))
        prepare(self, txid)

    WindowedBoltExecutor.pre_prepare = counting_prepare  # type: ignore[method-assign]
    gc.callbacks.append(on_gc)
    cpu0, t0 = time.process_time(), time.perf_counter()
    result = rt.run(until_idle=True)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    gc.callbacks.remove(on_gc)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    keys, _ = bench_windows.read_events(events)
    if args.kind == "count":
        want = collections.Counter(bench_windows.KEYS[k] for k in keys)
        got = committed_state(topo, conf, "count")
    else:
        want = bench_windows.expected_windows(events, 10_000)
        got = committed_state(topo, conf, "totals")
    shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"{args.kind}: {args.events:,} events, {elapsed:.2f} s wall, {cpu:.2f} s CPU, "
        f"gc collections {collections_by_gen} in {gc_s[0]:.2f} s, peak RSS {rss_mb:.0f} MB, "
        f"exact={dict(got) == dict(want) and not result.errors}"
    )
    if pending:
        print(
            f"  tuples pending per windowed task at its {len(pending)} checkpoints: "
            f"median {statistics.median(pending):,.0f}, max {max(pending):,}"
        )


if __name__ == "__main__":
    main()
