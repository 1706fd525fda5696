"""Failures under both modes: what a failed tuple costs (issue 44, item 2).

Storm's word count as its state document writes it (``state.get``/``state.put``
per tuple, an ``ack``), with the count bolt failing ``--fail-rate`` of its
attempts at random (``collector.fail``, each attempt independent, a seeded RNG
per task), on sqlite state, over ``--lines`` lines of ten words. Each mode runs
the same input; the table gives the spout's emits against the input's lines,
the failures, the rewinds, the dead letters, whether the committed counts are
exact (exactly-once) or by how much they overcount (at-least-once), and the
run time, as ratios of runs interleaved mode by mode (the machine is shared).

    python bench/bench_failures.py --lines 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "runtime"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_retry_here import CONF, POISON, corpus, topology

from statestream import _core
from statestream.runtime.local import LocalRuntime
from statestream.testing import committed_state


def run(lines: int, rate: float, exactly_once: bool, poison_every: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        path = tmp / "in.txt"
        expected = corpus(path, lines, poison_every)
        topo = topology(path, rate)
        conf = {
            **CONF,
            "topology.state.checkpoint.interval.ms": 1000,
            "statestream.state.exactly.once": exactly_once,
            "statestream.deadletter.path": str(tmp / "dead.jsonl"),
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp / "state.db")},
        }
        start = time.perf_counter()
        result = LocalRuntime(topo, conf).run(until_idle=True)
        elapsed = time.perf_counter() - start
        got = Counter(committed_state(topo, conf, "count"))
        # The poison words are dead-lettered (exactly-once: each alone, the rest of
        # its line counted; at-least-once: the whole line).
        expected = Counter({w: n for w, n in expected.items() if w != POISON})
        words = sum(expected.values())
        return {
            "emits": result.components["lines"].emitted / lines,
            "failed": result.components["count"].failed,
            "rewinds": result.counters.get("rewinds", 0),
            "dead": result.counters.get("dead_lettered", 0),
            "exact": float(got == expected),
            "over": (sum(got.values()) - words) / words,
            "time": elapsed,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fail-rate", type=float, default=0.01)
    args = ap.parse_args()
    logging.getLogger("statestream").setLevel(logging.ERROR)  # one line per dead letter
    print(f"core: {_core.describe()}")
    print(f"python {' '.join(sys.argv)}")
    for case, rate, poison in (("random 1%", args.fail_rate, 0), ("poison lines 1%", 0.0, 100)):
        rows: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for _ in range(args.rounds):
            for mode in (False, True):  # interleaved
                rows[mode].append(run(args.lines, rate, mode, poison))
        alo = statistics.median(r["time"] for r in rows[False])
        print(f"\n{case}, {args.lines:,} lines, {args.rounds} interleaved rounds (medians)")
        print(
            "| mode | spout emits / lines | failures | rewinds | dead letters | counts | time / at-least-once |"
        )
        print("|---|---:|---:|---:|---:|---|---:|")
        for mode in (False, True):
            r = rows[mode]
            med = {k: statistics.median(x[k] for x in r) for k in r[0]}
            counts = (
                ("exact" if all(x["exact"] for x in r) else "NOT exact")
                if mode
                else f"+{med['over']:.2%}"
            )
            print(
                f"| {'exactly-once' if mode else 'at-least-once'} | {med['emits']:.3f} | "
                f"{med['failed']:,.0f} | {med['rewinds']:,.0f} | {med['dead']:,.0f} | {counts} | "
                f"{med['time'] / alo:.2f} |"
            )


if __name__ == "__main__":
    main()
