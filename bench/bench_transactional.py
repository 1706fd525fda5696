"""Throughput of the transactional global count: batch size and pipelining.

    python bench/bench_transactional.py [--tuples 300000] [--repeat 3] [--runner spark]

Runs examples/transactional_global_count.py on the local runtime (memory
provider for the coordinator's state, the count in a SQLite file), or with
``--runner spark`` on a ``local[2,2]`` SparkSession (sqlite provider, since
the executors must share it; the session is started and warmed up before the
clock starts), with
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
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "examples"))


def runtime(runner: str, topology: Any, conf: dict[str, Any], tmp: str) -> Any:
    """The runtime to measure; for Spark a warm session (not timed) and a sqlite store."""
    if runner == "local":
        from statestream.runtime.local import LocalRuntime

        return LocalRuntime(topology, conf)
    import os

    from pyspark.sql import SparkSession

    from statestream.runtime.spark import _SPARK_DEFAULTS, SparkRuntime

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2,2]")
    for key, value in _SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).count()  # warm-up
    conf = {
        **conf,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(Path(tmp) / "state.db")},
    }
    return SparkRuntime(topology, conf, spark=spark)


def global_count(tuples: int, batch: int, pending: int, runner: str = "local") -> float:
    import transactional_global_count as gc

    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp) / "count.db")
        conf = {
            "global-count.tuples": tuples,
            "global-count.take": max(1, batch // gc.PARTITIONS),
            "global-count.database": db,
            "topology.max.spout.pending": pending,
        }
        rt = runtime(runner, gc.topology(), conf, tmp)
        t0 = time.perf_counter()
        rt.run(until_idle=True)
        elapsed = time.perf_counter() - t0
        ((count,),) = sqlite3.connect(db).execute("SELECT count FROM counts").fetchall()
        gc._connections.clear()
    if count != tuples:
        raise SystemExit(f"global count {count} != {tuples}: not exact, no number")
    return tuples / elapsed


def wordcount(tuples: int, runner: str = "local") -> float:
    import transactional_global_count as gc
    import wordcount as wc

    words = [w for p in range(gc.PARTITIONS) for (w,) in gc.words(tuples)[p]]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "words.txt"
        corpus.write_text(
            "".join(" ".join(words[i : i + 10]) + "\n" for i in range(0, len(words), 10))
        )
        out = Path(tmp) / "counts.jsonl"
        conf = {"wordcount.input": str(corpus), "wordcount.output": str(out)}
        rt = runtime(runner, wc.topology(), conf, tmp)
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
        [sys.executable, __file__, *map(str, args)], capture_output=True, text=True
    )
    if out.returncode != 0:
        raise SystemExit(out.stderr)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--runner", choices=["local", "spark"], default="local")
    parser.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        kind, *rest = args.one
        numbers = [int(x) for x in rest]
        if kind == "gc":
            print(global_count(*numbers, runner=args.runner))
        else:
            print(wordcount(*numbers, runner=args.runner))
        return
    rows: list[tuple[str, str, str, float]] = []
    for batch in (500, 5000):
        for pending in (1, 5):
            runs = [
                measure("--runner", args.runner, "--one", "gc", args.tuples, batch, pending)
                for _ in range(args.repeat)
            ]
            rows.append(
                ("transactional global count", f"{batch:,}", str(pending), statistics.median(runs))
            )
    runs = [
        measure("--runner", args.runner, "--one", "wc", args.tuples) for _ in range(args.repeat)
    ]
    rows.append(("stateful word count (exactly-once)", "-", "-", statistics.median(runs)))
    runner = "" if args.runner == "local" else f" --runner {args.runner}"
    print(
        f"$ python bench/bench_transactional.py --tuples {args.tuples} --repeat {args.repeat}"
        + runner
    )
    store = "memory provider" if args.runner == "local" else "local[2,2], sqlite provider"
    print(f"{args.tuples:,} words, {args.runner} runtime, {store}, median of {args.repeat}\n")
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
