"""Throughput of the transactional global count: batch size and pipelining.

    python bench/bench_transactional.py [--tuples 300000] [--repeat 3]

Runs examples/transactional_global_count.py on the local runtime (memory
provider for the coordinator's state, the count in a SQLite file) with
batches of about 500 and 5,000 words (three partitions, a third each) and
``topology.max.spout.pending`` 1 and 5, and beside it the stateful word
count (examples/wordcount.py, exactly-once state) over the same words
written ten to a line. Each row is the median of ``--repeat`` runs, each
checked exact before it counts, each in its own process (nothing carries
over between runs). Words per second are words counted over the wall time
of ``LocalRuntime.run``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))


def global_count(tuples: int, batch: int, pending: int) -> float:
    import transactional_global_count as gc

    from statestream.runtime.local import LocalRuntime

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "count.db")
        conf = {
            "global-count.tuples": tuples,
            "global-count.take": max(1, batch // gc.PARTITIONS),
            "global-count.database": db,
            "topology.max.spout.pending": pending,
        }
        rt = LocalRuntime(gc.topology(), conf)
        t0 = time.perf_counter()
        rt.run(until_idle=True)
        elapsed = time.perf_counter() - t0
        ((count,),) = sqlite3.connect(db).execute("SELECT count FROM counts").fetchall()
        gc._connections.clear()
    if count != tuples:
        raise SystemExit(f"global count {count} != {tuples}: not exact, no number")
    return tuples / elapsed


def wordcount(tuples: int) -> float:
    import transactional_global_count as gc
    import wordcount as wc

    from statestream.runtime.local import LocalRuntime

    words = [w for p in range(gc.PARTITIONS) for (w,) in gc.words(tuples)[p]]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "words.txt"
        corpus.write_text(
            "".join(" ".join(words[i : i + 10]) + "\n" for i in range(0, len(words), 10))
        )
        out = Path(tmp) / "counts.jsonl"
        conf = {"wordcount.input": str(corpus), "wordcount.output": str(out)}
        rt = LocalRuntime(wc.topology(), conf)
        t0 = time.perf_counter()
        rt.run(until_idle=True)
        elapsed = time.perf_counter() - t0
        total = sum(json.loads(line)["count"] for line in out.read_text().splitlines())
    if total != tuples:
        raise SystemExit(f"word count total {total} != {tuples}: not exact, no number")
    return tuples / elapsed


def measure(*args: object) -> float:
    """One run in a fresh process: its words per second."""
    out = subprocess.run(
        [sys.executable, __file__, "--one", *map(str, args)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, *rest = args.one
        numbers = [int(x) for x in rest]
        print(global_count(*numbers) if kind == "gc" else wordcount(*numbers))
        return
    rows: list[tuple[str, str, str, float]] = []
    for batch in (500, 5000):
        for pending in (1, 5):
            runs = [measure("gc", args.tuples, batch, pending) for _ in range(args.repeat)]
            rows.append(
                ("transactional global count", f"{batch:,}", str(pending), statistics.median(runs))
            )
    runs = [measure("wc", args.tuples) for _ in range(args.repeat)]
    rows.append(("stateful word count (exactly-once)", "-", "-", statistics.median(runs)))
    print(f"$ python bench/bench_transactional.py --tuples {args.tuples} --repeat {args.repeat}")
    print(f"{args.tuples:,} words, local runtime, memory provider, median of {args.repeat}\n")
    head = ("topology", "batch", "max.spout.pending", "words/s")
    widths = [max(len(head[i]), *(len(str(r[i])) for r in rows)) for i in range(3)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=False)) + "  " + head[3])
    for r in rows:
        print(
            "  ".join(str(v).ljust(w) for v, w in zip(r, widths, strict=False))
            + f"  {r[3]:>10,.0f}"
        )


if __name__ == "__main__":
    main()
