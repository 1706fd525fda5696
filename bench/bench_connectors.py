"""The example pipeline against the file word count, and the instructions of each sink's commit path.

    python bench/bench_connectors.py --part throughput [--lines 100000] [--pairs 3]
    python bench/bench_connectors.py --part instructions [--rows 20000] [--batch 160]
    python bench/bench_connectors.py --part spout [--lines 100000] [--pairs 3]
    python bench/bench_connectors.py --part bound [--lines 100000] [--pairs 5]

``throughput``: examples/stream_to_postgres.py (a Redis stream -> split ->
count -> two PostgreSQL sinks, append and upsert) against examples/wordcount.py
(a file -> split -> count) on the same lines, both with their state in SQLite
and a checkpoint every second, and between them the example with its sinks
swapped for bolts that only ack (what the sinks cost is the difference) and
for stateful bolts that only ack (their acks held to the checkpoint, as a
sink's: what of the sinks' cost is the stateful machinery, not their own
work): the four run in turn ``--pairs`` rounds (each a ``statestream run --until-idle``
process on a fresh store, and for the example a fresh PostgreSQL schema). Per
run: its own time (the ``idle after X s`` of its summary: start-up left out)
and the CPU seconds of its process (start-up included; the servers' work is
in their processes), the second being the fair figure on a loaded machine.
The ratios are the word count's times over the example's (the example's rate
over the word count's): the sinks must not be the bottleneck (a ratio of at
least 0.5).

``instructions``: each sink of statestream.connectors (PostgresSink append and
upsert, RedisSink to a stream, FileSink), prepared as a runtime prepares it
(tests/connectors/sink_cases.py) and driven through the checkpoint actions as
the runtime drives it, counted by ``valgrind --tool=callgrind`` in this
process only (a server's own work is not counted): ``execute`` per row (the
tuple taken in: buffered and acked; through ``execute_batch`` in batches of
``--batch`` tuples, as the local runtime hands a sink its inbox, about 160 a
drain in the throughput pipeline; ``--batch 1``: ``execute`` per tuple, as
Spark's executors and a sink with its own ``execute`` take them) and the
commit path per row (PREPARE:
the rows staged in the sink's SQLite state; COMMIT: the target written in one
transaction with the guard), the latter as (C(rows) - C(0)) / rows, with the
fixed cost of a commit C(0) beside it; the commit path both as Spark's driver
and a direct caller run it (``apply_action``: the write done in the COMMIT)
and as the local runtime runs it (``StatefulTaskProtocol``: the COMMIT hands
the write to the task's writer thread, and the next PREPARE, counted too,
waits for it; callgrind runs the threads one at a time and counts both).

``bound``: what the example could reach with no runtime work between the count and
its sinks: bench/fused_sinks.py (the sinks fused into the count, in each of its
``FUSED_MODE``s) beside the word count, the pipeline with no sinks at all (Redis
-> split -> count) and the example, ``--pairs`` interleaved rounds, each run with
its time, its process's CPU and PostgreSQL's (every ``postgres`` process), and
for the runs that write both tables whether they hold the exact counts.

``spout``: RedisStreamSpout by itself on a stream of ``--lines`` lines,
``--pairs`` rounds: CPU a line on its thread (what the pipeline's thread
pays) and in the whole process (its reader thread's XREAD replies too).
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "connectors"))

WORDCOUNT = str(ROOT / "examples" / "wordcount.py")
SINKS = ("postgres-append", "postgres-upsert", "redis-stream", "file")
_IDLE = re.compile(r"idle after ([\d.]+) s")
# The example with its two PostgreSQL sinks swapped for bolts that only ack
# (``{base}`` Bolt: what the rest of the pipeline costs; StatefulBolt: that and
# the checkpoint machinery a sink goes through, its acks held to the commit).
ACK_ONLY = """
import sys
sys.path.insert(0, {examples!r})
import stream_to_postgres
from statestream import {base}


class AckOnly({base}):
    def init_state(self, state):
        pass

    def execute(self, tup):
        self.collector.ack(tup)


def topology():
    return stream_to_postgres.build(AckOnly(), AckOnly())
"""
# The example's source, split and count with no sink at all: the pipeline's floor.
NO_SINKS = """
import os
import sys
sys.path.insert(0, {examples!r})
import stream_to_postgres as example
from wordcount import WordCount
from statestream import TopologyBuilder


def topology():
    builder = TopologyBuilder("stream-to-postgres")
    url = os.environ.get("LINES_URL", example.DEFAULT_URL)
    builder.set_spout("lines", example.source(url, os.environ.get("LINES_STREAM", "lines")))
    builder.set_bolt("split", example.Split(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    return builder.build()
"""
# The example itself, reporting at exit how its process's main thread (where every
# task runs) spent the run: on a CPU, runnable but waiting for one (the machine's
# load), or blocked (waiting on a server, on a sink's write, idle, or for the GIL),
# from /proc/self/task/<pid>/schedstat (Linux).
WAITS = """
import atexit
import os
import sys
import time
sys.path.insert(0, {examples!r})
from stream_to_postgres import topology


def _schedstat():
    with open(f"/proc/self/task/{{os.getpid()}}/schedstat") as f:
        on_cpu, runnable, _ = map(int, f.read().split())
    return time.monotonic(), on_cpu / 1e9, runnable / 1e9


_START = _schedstat()


@atexit.register
def _report():
    wall, cpu, runnable = (b - a for a, b in zip(_START, _schedstat()))
    print(f"main thread: blocked {{wall - cpu - runnable:.2f}} s, on CPU {{cpu:.2f}} s, "
          f"runnable {{runnable:.2f}} s", file=sys.stderr)
"""
_BLOCKED = re.compile(r"main thread: blocked ([\d.-]+) s")


# -- throughput ---------------------------------------------------------------------------


def timed_run(args: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """The run's own seconds (its summary's ``idle after X s``), the CPU seconds its
    process used (start-up included; the servers' work is in their own processes),
    and the seconds its main thread was blocked (``WAITS``; NaN if not reported)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-m", "statestream", "run", *args, "--until-idle", "--no-progress"],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    found = _IDLE.search(proc.stderr)
    if proc.returncode != 0 or found is None:
        raise SystemExit(f"statestream run {args[0]} failed ({proc.returncode}):\n{proc.stderr}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    blocked = _BLOCKED.search(proc.stderr)
    return float(found.group(1)), cpu, float(blocked.group(1)) if blocked else float("nan")


# What every run of ``throughput`` and ``bound`` is given.
COMMON = ["--set", "topology.state.provider=sqlite"]
COMMON += ["--set", "topology.state.checkpoint.interval.ms=1000"]
COMMON += ["--set", "topology.max.spout.pending=50000"]


def wordcount_run(tmp: Path, corpus: Path, pair: int) -> tuple[float, float, float]:
    """examples/wordcount.py on ``corpus``, its state in a fresh SQLite file."""
    state = f"topology.state.provider.config={{path: {tmp}/wc-{pair}.db}}"
    return timed_run([WORDCOUNT, *COMMON, "--set", state, "--set", f"wordcount.input={corpus}"])


def throughput(lines: int, pairs: int) -> None:
    import end_to_end as e2e

    from statestream.testing import random_text

    tmp = Path(tempfile.mkdtemp())
    corpus = tmp / "lines.txt"
    random_text(corpus, lines)
    common = COMMON
    variant = tmp / "ack_only_sinks.py"
    variant.write_text(ACK_ONLY.format(examples=str(ROOT / "examples"), base="Bolt"))
    stateful = tmp / "stateful_ack_only_sinks.py"
    stateful.write_text(ACK_ONLY.format(examples=str(ROOT / "examples"), base="StatefulBolt"))
    example = tmp / "stream_to_postgres_waits.py"
    example.write_text(WAITS.format(examples=str(ROOT / "examples")))
    print(f"{lines:,} lines ({lines * e2e.WORDS_PER_LINE:,} words), {pairs} rounds\n")
    print("| round | word count run / CPU s | pipeline, sinks acking only | stateful sinks "
          "acking only | stream_to_postgres | its main thread blocked s | run ratio "
          "| CPU ratio |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs: list[list[float]] = []
    with e2e.source("redis") as src:
        e2e.wait_producer(e2e.start_producer(src, corpus, 0))
        env = {**os.environ, "LINES_URL": src.url, "LINES_STREAM": src.stream}
        for pair in range(1, pairs + 1):
            wc = wordcount_run(tmp, corpus, pair)
            state = f"topology.state.provider.config={{path: {tmp}/ack-{pair}.db}}"
            ack = timed_run([str(variant), *common, "--set", state], env)
            state = f"topology.state.provider.config={{path: {tmp}/sack-{pair}.db}}"
            sack = timed_run([str(stateful), *common, "--set", state], env)
            with e2e.database() as dsn:
                state = f"topology.state.provider.config={{path: {tmp}/pipe-{pair}.db}}"
                args = [str(example), *common, "--set", state]
                pipe = timed_run(args, {**env, "POSTGRES_DSN": dsn})
            runs.append([*wc[:2], *ack[:2], *pipe[:2], *sack[:2], pipe[2]])
            print(f"| {pair} | {wc[0]:.2f} / {wc[1]:.2f} | {ack[0]:.2f} / {ack[1]:.2f} "
                  f"| {sack[0]:.2f} / {sack[1]:.2f} "
                  f"| {pipe[0]:.2f} / {pipe[1]:.2f} | {pipe[2]:.2f} | {wc[0] / pipe[0]:.2f} "
                  f"| {wc[1] / pipe[1]:.2f} |", flush=True)  # fmt: skip
    med = [statistics.median(r[i] for r in runs) for i in range(9)]
    print(
        f"\nmedians, lines per second of run time (per CPU second): file word count "
        f"{lines / med[0]:,.0f} ({lines / med[1]:,.0f}), the pipeline with sinks that only "
        f"ack {lines / med[2]:,.0f} ({lines / med[3]:,.0f}), stateful ones that only ack "
        f"{lines / med[6]:,.0f} ({lines / med[7]:,.0f}), stream_to_postgres "
        f"{lines / med[4]:,.0f} ({lines / med[5]:,.0f}); stream_to_postgres / word count: "
        f"run {med[0] / med[4]:.2f}, CPU {med[1] / med[5]:.2f}; stream_to_postgres' main "
        f"thread blocked {med[8]:.2f} s"
    )
    shutil.rmtree(tmp, ignore_errors=True)


def postgres_cpu() -> float:
    """CPU seconds used so far by every ``postgres`` process (Linux /proc)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        total += sum(int(f) for f in fields[11:15]) / tick  # utime stime cutime cstime
    return total


def bound(lines: int, pairs: int) -> None:
    import collections

    import end_to_end as e2e

    from statestream.testing import random_text

    tmp = Path(tempfile.mkdtemp())
    corpus = tmp / "lines.txt"
    random_text(corpus, lines)
    truth = collections.Counter(corpus.read_text().split())
    no_sinks = tmp / "no_sinks.py"
    no_sinks.write_text(NO_SINKS.format(examples=str(ROOT / "examples")))
    fused = str(HERE / "fused_sinks.py")
    example = str(ROOT / "examples" / "stream_to_postgres.py")
    variants: list[tuple[str, str, dict[str, str]]] = [
        ("no sinks", str(no_sinks), {}),
        ("example", example, {}),
        *((f"fused {m}", fused, {"FUSED_MODE": m}) for m in ("keep", "copy", "mem", "mem-updates", "mem-totals", "drop")),
    ]  # fmt: skip
    print(f"{lines:,} lines ({lines * e2e.WORDS_PER_LINE:,} words), {pairs} rounds; a cell: "
          "run s / process CPU s / PostgreSQL CPU s (word count's run / this run, "
          "by CPU), and whether both tables are exact\n")  # fmt: skip
    print(f"| round | word count | {' | '.join(v[0] for v in variants)} |")
    print(f"|---:|---:|{'---:|' * len(variants)}")
    ratios: dict[str, list[tuple[float, float]]] = {v[0]: [] for v in variants}
    with e2e.source("redis") as src:
        e2e.wait_producer(e2e.start_producer(src, corpus, 0))
        env = {**os.environ, "LINES_URL": src.url, "LINES_STREAM": src.stream}
        for pair in range(1, pairs + 1):
            wc = wordcount_run(tmp, corpus, pair)
            cells = [f"{wc[0]:.2f} / {wc[1]:.2f}"]
            for i, (name, path, extra) in enumerate(variants):
                with e2e.database() as dsn:
                    state = f"topology.state.provider.config={{path: {tmp}/v{i}-{pair}.db}}"
                    before = postgres_cpu()
                    run = timed_run(
                        [path, *COMMON, "--set", state], {**env, **extra, "POSTGRES_DSN": dsn}
                    )
                    pg = postgres_cpu() - before
                    both = name in ("example", "fused keep", "fused copy", "fused mem")
                    exact = (
                        (" exact" if e2e.check(dsn, truth).exact else " NOT EXACT") if both else ""
                    )
                ratios[name].append((wc[0] / run[0], wc[1] / run[1]))
                cells.append(f"{run[0]:.2f} / {run[1]:.2f} / {pg:.2f} "
                             f"({wc[0] / run[0]:.2f}, {wc[1] / run[1]:.2f}){exact}")  # fmt: skip
            print(f"| {pair} | {' | '.join(cells)} |", flush=True)
    print("\nmedian ratios to the word count, run (CPU): " + ", ".join(
        f"{name} {statistics.median(r[0] for r in rs):.2f} ({statistics.median(r[1] for r in rs):.2f})"
        for name, rs in ratios.items()
    ))  # fmt: skip
    shutil.rmtree(tmp, ignore_errors=True)


# -- instructions -------------------------------------------------------------------------


def sink_case(kind: str, tmp: Path) -> Any:
    import sink_cases

    if kind == "postgres-upsert":
        case = sink_cases.PostgresAppend(tmp, "upsert")
    else:
        case = sink_cases.CASES[kind.partition("-")[0]](tmp)
    case.opened = []
    case.topology = f"bench-{uuid.uuid4().hex[:10]}"
    return case


def measured(kind: str, rows: int, part: str, batch: int) -> None:
    """Runs under valgrind: a sink of ``kind`` prepared, then ``part`` (``execute`` of
    ``rows`` tuples, or ``commit``: PREPARE and COMMIT of them; ``overlapped``: the
    same through the local runtime's task protocol, and the next PREPARE that waits
    for the write) inside functools.reduce, the part callgrind counts."""
    import sink_cases

    from statestream._checkpoint import Action
    from statestream._stateful import StatefulTaskProtocol, apply_action
    from statestream.testing import make_tuple

    tmp = Path(tempfile.mkdtemp())
    case = sink_case(kind, tmp)
    try:
        sink, state = sink_cases.open_task(case, sink_cases.store(tmp))
        if part == "overlapped":
            protocol = StatefulTaskProtocol(sink)

            def apply_action(_: Any, state: Any, action: Action, txid: int, __: bool) -> None:
                protocol.act(state, action, txid)

        apply_action(sink, state, Action.INITSTATE, -1, False)
        # A first checkpoint outside the count: connections opened, tables warm.
        sink.execute(make_tuple(["w0", 0], sink_cases.FIELDS))
        apply_action(sink, state, Action.PREPARE, 0, True)
        apply_action(sink, state, Action.COMMIT, 0, True)
        tuples = [make_tuple([f"w{i % 800}", i], sink_cases.FIELDS) for i in range(rows)]
        batches = [tuples[i : i + batch] for i in range(0, rows, batch)]

        def execute(_: Any, __: Any) -> None:
            if batch == 1:
                for tup in tuples:
                    sink.execute(tup)
            else:
                for tups in batches:
                    sink.execute_batch(tups)

        def commit(_: Any, __: Any) -> None:
            apply_action(sink, state, Action.PREPARE, 1, True)
            apply_action(sink, state, Action.COMMIT, 1, True)
            if part == "overlapped":  # nothing received: waits for the write of 1
                apply_action(sink, state, Action.PREPARE, 2, True)

        if part == "execute":
            functools.reduce(execute, [0, 0])
        else:
            execute(0, 0)
            functools.reduce(commit, [0, 0])
            # Written: every row (one per key for the upsert), and the warm-up's.
            expected = min(rows, 800) if kind == "postgres-upsert" else rows + 1
            assert len(case.rows()) == max(expected, 1), (len(case.rows()), expected)
    finally:
        for opened in case.opened:
            opened.cleanup()
        case.close()
        shutil.rmtree(tmp, ignore_errors=True)


def instructions(rows: int, batch: int) -> None:
    from bench_instructions import callgrind_count

    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    me = str(Path(__file__).resolve())
    how = "execute per tuple" if batch == 1 else f"execute_batch of {batch} tuples"
    print(f"{rows:,} rows a checkpoint ({how}), instructions of this process (callgrind)\n")
    print("| sink | execute / row | commit path / row | fixed cost of a commit "
          "| overlapped: commit path / row | fixed cost |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|")
    for kind in SINKS:
        one = ("--one", kind, "--batch", str(batch), "--rows")
        execute = callgrind_count(me, *one, str(rows), "--what", "execute")
        cells = [f"{execute / rows:,.0f}"]
        for what in ("commit", "overlapped"):
            commit = callgrind_count(me, *one, str(rows), "--what", what)
            empty = callgrind_count(me, *one, "0", "--what", what)
            cells += [f"{(commit - empty) / rows:,.0f}", f"{empty:,}"]
        print(f"| {kind} | {' | '.join(cells)} |", flush=True)


# -- spout ---------------------------------------------------------------------------------


class _LastId:
    """A spout collector keeping only the last message id emitted."""

    last: Any = None

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.last = msg_id

    def report_error(self, error: BaseException) -> None:
        raise error


def spout(lines: int, rounds: int) -> None:
    """RedisStreamSpout by itself: ``next_tuple`` until exhausted, each id acked in
    groups of 1,000, over a stream of ``lines`` lines (random_text); its thread's CPU
    and the process's (the reader thread's XREAD replies included) a line."""
    import time

    import redis

    from statestream import FakeClock
    from statestream.connectors import RedisStreamSpout
    from statestream.testing import mock_context, random_text

    tmp = Path(tempfile.mkdtemp())
    random_text(tmp / "lines.txt", lines)
    client = redis.Redis()
    name = f"bench-spout-{uuid.uuid4().hex[:8]}"
    pipe = client.pipeline(transaction=False)
    for line in (tmp / "lines.txt").read_text().splitlines():
        pipe.xadd(name, {"line": line})
    pipe.execute()
    print(f"{lines:,} lines, RedisStreamSpout alone (exactly-once, as in a run)\n")
    print("| round | its thread, us a line | the process, us a line |")
    print("|---:|---:|---:|")
    try:
        for r in range(1, rounds + 1):
            sp = RedisStreamSpout(name, fields=["line"])
            out = _LastId()
            context = mock_context("lines", clock=FakeClock())
            context.exactly_once = True
            sp.open({}, context, out)  # type: ignore[arg-type]
            n, pending = 0, []
            thread, process = time.thread_time(), time.process_time()
            while True:
                out.last = None
                sp.next_tuple()
                if out.last is not None:
                    n += 1
                    pending.append(out.last)
                    if len(pending) < 1000:
                        continue
                elif sp.exhausted():
                    break
                for msg_id in pending:
                    sp.ack(msg_id)
                pending.clear()
            thread, process = time.thread_time() - thread, time.process_time() - process
            sp.close()
            print(f"| {r} | {thread / n * 1e6:.2f} | {process / n * 1e6:.2f} |", flush=True)
    finally:
        client.delete(name)
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--part", choices=("throughput", "instructions", "spout", "bound"), default="throughput"
    )
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=160, help="tuples an execute_batch (1: execute)")
    ap.add_argument("--one", choices=SINKS, help=argparse.SUPPRESS)
    ap.add_argument("--what", choices=("execute", "commit", "overlapped"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        measured(args.one, args.rows, args.what, max(1, args.batch))
    elif args.part == "throughput":
        throughput(args.lines, args.pairs)
    elif args.part == "spout":
        spout(args.lines, args.pairs)
    elif args.part == "bound":
        bound(args.lines, args.pairs)
    else:
        instructions(args.rows, max(1, args.batch))


if __name__ == "__main__":
    main()
