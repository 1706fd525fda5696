"""examples/stream_to_postgres.py, SIGKILLed over and over while lines are produced: exact?

    python bench/bench_connectors_kill.py [--lines 200000] [--kills 20]
        [--sources redis,jetstream,rabbitmq] [--runtimes local,workers]
        [--rate 0] [--seed N]

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
spreads the lines over the kills (about 1.5 s of a run per kill).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "connectors"))

import end_to_end as e2e  # noqa: E402
from kill_loop import seeded_rng  # noqa: E402

COLUMNS = ("source", "runtime", "lines", "kills", "duplicates", "gaps", "beyond", "totals",
           "exact", "seconds")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--sources", default=",".join(e2e.SOURCES))
    ap.add_argument("--runtimes", default="local,workers")
    ap.add_argument("--rate", type=float, default=0.0, help="lines a second (0: spread)")
    args = ap.parse_args()
    rate = args.rate or args.lines / (1.5 * args.kills)
    rng = seeded_rng()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    failures = 0
    for kind in args.sources.split(","):
        for runtime in args.runtimes.split(","):
            with (
                tempfile.TemporaryDirectory() as tmp,
                e2e.source(kind) as src,
                e2e.database() as dsn,
            ):
                started = time.monotonic()
                result = e2e.killed_run(runtime, src, dsn, Path(tmp), lines=args.lines,
                                        kills=args.kills, rate=rate, rng=rng)  # fmt: skip
                result.seconds = time.monotonic() - started
            row = e2e.describe(result)
            failures += row["exact"] != "yes"
            print("| " + " | ".join(f"{row[c]:,}" if isinstance(row[c], int) else str(row[c])
                                    for c in COLUMNS) + " |", flush=True)  # fmt: skip
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
