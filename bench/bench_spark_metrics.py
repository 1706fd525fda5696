"""What Spark's figures cost (issue 33): the executors' sampled timing, the driver's
reads of Spark's status tracker.

``--part executor``: instructions of one bolt task on an executor
(``statestream.runtime.spark.executor.run_bolt``, as a Spark partition runs it,
without Spark) over ``--tuples`` sentences into the word count's split bolt, at
each ``topology.stats.sample.rate`` of ``--rates``, counted by callgrind in
that call only (``--toggle-collect=functools_reduce``, as bench_instructions.py
does). Instruction counts are exact on a loaded machine.

``--part tracker``: a Spark ``local[2]`` word count of ``--lines`` lines in
batches of ``--batch`` (memory provider off: sqlite in a scratch folder), with
the time the driver spends reading each batch's jobs from the status tracker
(``JobWatch._read``) against the batch's job; wall clock, so say the load.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "bench")]

from bench_instructions import callgrind_count  # noqa: E402


def _task_input(tuples: int, rate: float) -> tuple[Any, Any, list[Any]]:
    import cloudpickle
    from word_bolts import word_count

    from statestream._config import Config
    from statestream.runtime.plan import RuntimePlan
    from statestream.runtime.spark.executor import Shipped
    from statestream.runtime.spark.shared import SEQ_BITS

    class Broadcast:
        def __init__(self, value: Any) -> None:
            self.value = value

    topology = word_count("bench", Path("unused.txt"))
    plan = RuntimePlan(topology, Config({"topology.stats.sample.rate": rate}))
    payload = Broadcast(({}, cloudpickle.dumps(Shipped(plan, exactly_once=True))))
    src = plan.component_tasks["lines"][0]
    text = "the quick brown fox jumps over the lazy dog"
    items = []
    for i in range(tuples):  # what the file spout emits: (offset, line)
        key = (src << SEQ_BITS) | i
        items.append((0, (key, "default", (i, text[i % 9 :]), (key + 1,))))
    return "bench-token", payload, items


def one(tuples: int, rate: float) -> None:
    """Run the split bolt's task once, inside functools.reduce (what callgrind counts)."""
    from statestream.runtime.spark.executor import run_bolt

    token, payload, items = _task_input(tuples, rate)
    out = list(run_bolt(token, payload, "split", 0, {}, 0, items[:10]))
    (ack,) = [rec[2] for _, _, rec in out if rec[0] == -1]  # (-1, ACK, ack) to the counts
    assert ack[2] == 10 and not ack[6], ack[6]  # warm (imports, the plan), none failed
    functools.reduce(lambda _, __: list(run_bolt(token, payload, "split", 0, {}, 0, items)), [0], 0)


def executor(tuples: int, rates: list[float]) -> None:
    print(f"| rate | instructions ({tuples:,} tuples) | per tuple | ratio to rate 0 |")
    print("|---:|---:|---:|---:|")
    base = None
    for rate in rates:
        total = callgrind_count(__file__, "--one", str(rate), "--tuples", str(tuples))
        base = base or total
        print(f"| {rate} | {total:,} | {total / tuples:,.0f} | {total / base:.4f} |", flush=True)


def tracker(lines: int, batch: int) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from word_bolts import word_count

    from statestream.runtime.spark import SPARK_DEFAULTS, SparkRuntime
    from statestream.runtime.spark.stages import JobWatch

    builder = SparkSession.builder.master("local[2]")
    for key, value in SPARK_DEFAULTS.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    reads: list[float] = []
    read = JobWatch._read

    def timed(self: JobWatch, *args: Any) -> None:
        start = time.perf_counter()
        read(self, *args)
        reads.append(time.perf_counter() - start)

    JobWatch._read = timed  # type: ignore[method-assign]
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "in.txt"
        corpus.write_text("".join(f"a b c{i} d e\n" for i in range(lines)))
        conf = {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(Path(tmp) / "state.db")},
        }
        rt = SparkRuntime(word_count("bench", corpus), conf, spark=spark, batch_size=batch)
        rt.run(until_idle=True)
        snap = rt.metrics_snapshot()
    spark.stop()
    jobs = [b.duration or 0.0 for b in snap.spark[1:]]  # the first batch starts the workers
    reads = reads[1:]
    print(f"batches {len(snap.spark)} (of which the first left out), reads {len(reads)}")
    print(
        f"status reads: mean {1000 * sum(reads) / len(reads):.2f} ms, max {1000 * max(reads):.2f} ms"
    )
    print(
        f"jobs: mean {1000 * sum(jobs) / len(jobs):.0f} ms; reads / jobs {sum(reads) / sum(jobs):.4f}"
    )
    print(f"load: {os.getloadavg()}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["executor", "tracker"], default="executor")
    p.add_argument("--tuples", type=int, default=20_000)
    p.add_argument("--rates", default="0,0.05,1")
    p.add_argument("--lines", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=1_000)
    p.add_argument("--one", type=float, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        one(args.tuples, args.one)
    elif args.part == "executor":
        executor(args.tuples, [float(r) for r in args.rates.split(",")])
    else:
        tracker(args.lines, args.batch)


if __name__ == "__main__":
    main()
