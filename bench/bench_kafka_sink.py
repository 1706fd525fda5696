"""KafkaSink's rows a second beside PostgresSink's (append), through the checkpoint protocol.

    python bench/bench_kafka_sink.py [--rows 50000] [--checkpoints 5] [--rounds 5]

Each sink is prepared as a runtime prepares it (tests/connectors/sink_cases.py:
a sink task over a SQLite state store) and driven as the local runtime drives
it: every ``--checkpoints``-th of the ``--rows`` tuples handed to
``execute_batch`` in drains of 160, then PREPARE (the rows staged in the
state) and COMMIT (the target written in one transaction with the guard,
synchronously: the direct caller's path, as Spark's driver writes). Kafka: a
tansu 0.6.0 broker of the bench's own (tests/kafka_broker.py), a topic of two
partitions, records keyed by word; PostgreSQL: the shared server, an append
table. The two sinks run in turn, ``--rounds`` rounds, each round a fresh
target; per run the wall-clock rows a second and the CPU seconds of this
process (the broker's and the database's own work is in their processes).
The ratio is Kafka's rate over PostgreSQL's, per round (interleaved rounds
share the machine's load); its median is the figure.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "connectors"))

import sink_cases  # noqa: E402

from statestream._checkpoint import Action  # noqa: E402
from statestream._stateful import apply_action  # noqa: E402
from statestream.testing import make_tuple  # noqa: E402

DRAIN = 160


class KafkaKeyed(sink_cases.KafkaTopic):
    def make(self) -> Any:
        from statestream.connectors import KafkaSink

        return KafkaSink(self.topic, bootstrap=self.bootstrap, key="word")


def one_run(case: Any, tmp: Path, rows: int, checkpoints: int) -> tuple[float, float]:
    """Rows a second and CPU seconds of ``rows`` rows through ``case``'s sink."""
    case.opened = []
    case.topology = f"bench-{uuid.uuid4().hex[:10]}"
    sink, state = sink_cases.open_task(case, sink_cases.store(tmp))
    try:
        apply_action(sink, state, Action.INITSTATE, -1, False)
        # A first checkpoint outside the timing: connections opened, the guard read.
        sink.execute(make_tuple(["w0", 0], sink_cases.FIELDS))
        apply_action(sink, state, Action.PREPARE, 0, True)
        apply_action(sink, state, Action.COMMIT, 0, True)
        tuples = [make_tuple([f"w{i % 800}", i], sink_cases.FIELDS) for i in range(rows)]
        per = rows // checkpoints
        wall, cpu = time.perf_counter(), time.process_time()
        for c in range(checkpoints):
            part = tuples[c * per : (c + 1) * per]
            for i in range(0, len(part), DRAIN):
                sink.execute_batch(part[i : i + DRAIN])
            apply_action(sink, state, Action.PREPARE, c + 1, True)
            apply_action(sink, state, Action.COMMIT, c + 1, True)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        written = len(case.rows())
        assert written == per * checkpoints + 1, (written, per * checkpoints + 1)
        return per * checkpoints / wall, cpu
    finally:
        for opened in case.opened:
            opened.cleanup()
        case.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--checkpoints", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from tests.kafka_broker import started_kafka_broker

    runs: dict[str, list[tuple[float, float]]] = {"KafkaSink": [], "PostgresSink": []}
    with started_kafka_broker() as broker:
        for _ in range(args.rounds):
            for name in runs:
                tmp = Path(tempfile.mkdtemp())
                try:
                    if name == "KafkaSink":
                        case: Any = KafkaKeyed(tmp, broker)
                    else:
                        case = sink_cases.PostgresAppend(tmp)
                    runs[name].append(one_run(case, tmp, args.rows, args.checkpoints))
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
    command = "python3 bench/bench_kafka_sink.py " + " ".join(sys.argv[1:])
    print(f"$ {command}".rstrip())
    print(f"{args.rows:,} rows in {args.checkpoints} checkpoints, {args.rounds} interleaved rounds")
    print("| sink | rows/s (median) | rows/s (each round) | CPU s of this process (median) |")
    print("|---|---|---|---|")
    for name, rs in runs.items():
        rates = [r for r, _ in rs]
        each = ", ".join(f"{r:,.0f}" for r in rates)
        cpu = statistics.median(c for _, c in rs)
        print(f"| {name} | {statistics.median(rates):,.0f} | {each} | {cpu:.2f} |")
    ratios = [k[0] / p[0] for k, p in zip(runs["KafkaSink"], runs["PostgresSink"], strict=True)]
    print(f"Kafka / PostgreSQL rows/s, per round: {', '.join(f'{r:.2f}' for r in ratios)}; "
          f"median {statistics.median(ratios):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
