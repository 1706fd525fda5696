"""examples/stream_to_postgres.py, SIGKILLed over and over while lines are produced: exact?

    python bench/bench_connectors_kill.py [--lines 200000] [--kills 20]
        [--sources redis,jetstream,rabbitmq] [--runtimes local,workers,spark]
        [--rate 0] [--restart-lines 0]

(``SSTREAM_TEST_SEED=N`` replays the kill timings of a seed it printed.)

For each source (a stream of its own on the real Redis, NATS JetStream or
RabbitMQ server) and runtime (``local``: one process, SIGKILLed; ``workers``:
``topology.workers: 2``, one worker SIGKILLed at a time and restarted by the
supervisor), ``examples/produce_lines.py`` sends ``--lines`` lines into the
source at ``--rate`` lines a second while the pipeline runs and is killed
``--kills`` times (tests/connectors/end_to_end.py does the work, as the CI
tests do at a small size); then a last run finishes the stream and the two
PostgreSQL tables are checked: every ``(word, k)`` for k = 1 .. the word's
count once in ``word_updates`` (duplicates, gaps and rows beyond the true
count counted), ``word_totals`` equal to ``collections.Counter`` of the input.
Prints one table row per (source, runtime). ``--rate 0`` picks a rate that
spreads the lines over the kills (about 1.5 s of a run per kill). ``spark``
SIGKILLs ``statestream run --runner spark`` drivers (``local[2,2]``, about 15
s a start each; give it fewer ``--spark-kills``) and finishes on a
SparkSession of this process, the state on the shared Redis. CI does not
run the Spark kill (a JVM a killed driver, which no shared SparkSession can
save) nor the JetStream and RabbitMQ restarts: this bench does, small
enough to run in a few minutes::

    python bench/bench_connectors_kill.py --sources redis --runtimes spark --lines 2000 --spark-kills 2
    python bench/bench_connectors_kill.py --sources jetstream,rabbitmq --runtimes '' --restart-lines 2000

``--restart-lines N`` (N > 0) adds, per source, a run during which the
source's broker (one of this bench's own, on spare ports: Redis with AOF,
NATS with JetStream's file store, a second RabbitMQ node) is stopped and
started again, N lines (tests/connectors/test_end_to_end_restart.py at a
larger size), with the errors the run reported.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "connectors"))

import end_to_end as e2e  # noqa: E402
from kill_loop import seeded_rng  # noqa: E402
from redis_server import delete_prefix  # noqa: E402

COLUMNS = ("source", "runtime", "lines", "kills", "duplicates", "gaps", "beyond", "totals",
           "exact", "seconds")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--sources", default=",".join(e2e.SOURCES))
    ap.add_argument("--runtimes", default="local,workers")
    ap.add_argument("--spark-kills", type=int, default=3)
    ap.add_argument("--rate", type=float, default=0.0, help="lines a second (0: spread)")
    ap.add_argument("--restart-lines", type=int, default=0)
    args = ap.parse_args()
    rate = args.rate or args.lines / (1.5 * args.kills)
    rng = seeded_rng()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    failures = 0
    for kind in args.sources.split(","):
        for runtime in filter(None, args.runtimes.split(",")):
            kills = args.spark_kills if runtime == "spark" else args.kills
            prefix = f"bench-e2e-{uuid.uuid4().hex[:8]}:"
            with (
                tempfile.TemporaryDirectory() as tmp,
                e2e.source(kind) as src,
                e2e.database() as dsn,
            ):
                result = e2e.killed_run(
                    runtime, src, dsn, Path(tmp), lines=args.lines, kills=kills, rate=rate,
                    rng=rng, spark=spark_session() if runtime == "spark" else None,
                    state_prefix=prefix,
                )  # fmt: skip
            if runtime == "spark":
                delete_prefix(prefix)
            failures += not report(result)
    for kind in args.sources.split(",") if args.restart_lines else ():
        with tempfile.TemporaryDirectory() as tmp, e2e.database() as dsn:
            server = e2e.Server(kind, Path(tmp) / kind)
            server.start()
            try:
                result = e2e.broker_restart_run(server, dsn, Path(tmp), lines=args.restart_lines)
            finally:
                server.stop()
            if result.errors:  # which, before the run's log goes with its directory
                print_errors(Path(tmp) / "run.log")
        failures += not report(result)
    return 1 if failures else 0


def report(result: e2e.Result) -> bool:
    """Print ``result``'s row; whether it was exact (and, on a restart, free of errors)."""
    row: dict[str, Any] = e2e.describe(result)
    if result.runtime.endswith("restarted"):
        row["kills"] = f"restart ({result.errors} errors)"
    print("| " + " | ".join(f"{row[c]:,}" if isinstance(row[c], int) else str(row[c])
                            for c in COLUMNS) + " |", flush=True)  # fmt: skip
    return row["exact"] == "yes" and not result.errors


def print_errors(log: Path, most: int = 5) -> None:
    """The first ``most`` errors the run reported (statestream's error log writes
    ``<component>[<task>] raised ...``), on stderr."""
    raised = [line for line in log.read_text().splitlines() if "] raised " in line]
    for line in raised[:most]:
        print(f"  run error: {line[:400]}", file=sys.stderr)


_SPARK: list[Any] = []


def spark_session() -> Any:
    """One SparkSession for the bench (``local[2,2]``, statestream's Spark defaults)."""
    if not _SPARK:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession

        from statestream.runtime.spark import _SPARK_DEFAULTS

        builder = SparkSession.builder.master("local[2,2]").appName("bench-connectors")
        for key, value in _SPARK_DEFAULTS.items():
            builder = builder.config(key, value)
        _SPARK.append(builder.getOrCreate())
        _SPARK[0].sparkContext.setLogLevel("ERROR")
    return _SPARK[0]


if __name__ == "__main__":
    sys.exit(main())
