"""Windows (issue 46): a windowed count against the plain word count, against Bytewax, and RSS.

    python bench/bench_windows.py rate    [--events 2000000] [--repeat 3] [--tree DIR]
    python bench/bench_windows.py bytewax [--events 2000000] [--repeat 3] [--tree DIR]
    python bench/bench_windows.py rss     [--events 2000000] [--windows 10,100,1000] [--tree DIR]
    python bench/bench_windows.py spill   [--events 2000000] [--window-s 1000] [--tree DIR]

The input, the same for every system: the benchmark corpus's words
(bench/corpus.py, 2,000,000 words for 200,000 sentences) turned into
``(key, ts)`` events, written once to bench/results/events-N.txt as lines
``key ts``. The key is one of 20 (``k00``..``k19``, by crc32 of the word, so
as skewed as the words are); ``ts`` is an int of ms since the epoch, the i-th
event at ``T0 + i`` ms (2,000 s of event time for 2,000,000 events: 200
windows of 10 s), one event in ten moved up to 4.5 s earlier (disorder within
the 5 s lag, so no event is late).

statestream's topologies, each run in a process of its own (``--one``), state
on sqlite in a fresh directory, ``topology.max.spout.pending`` 10,000 (as
config/local.yaml), a checkpoint every 1 s, exactly-once (the default):

- ``window``: ``EventSpout`` -> ``WindowCount`` (a ``BaseWindowedBolt``,
  ``with_tumbling_window(Duration.seconds(10))``, ``with_timestamp_field("ts")``,
  ``with_lag(Duration.seconds(5))``, fields grouping on ``key``, 2 tasks,
  counting each window's tuples per key) -> ``Totals`` (a StatefulBolt, 1 task,
  adding each window's counts under ``start:key``: a window fired twice would
  count twice).
- ``aggregate``: the same with ``with_aggregate`` (one dict of counts per
  window and task, no tuples kept).
- ``count``: ``EventSpout`` -> examples/wordcount.py's ``WordCount`` (one
  ``state.get``/``state.put`` per tuple, the count emitted anchored, the tuple
  acked; fields grouping on ``key``, 2 tasks): the plain word count of the
  same events.
- ``ack`` (in ``bytewax``'s rounds): ``EventSpout`` -> a bolt that only acks
  (2 tasks, fields grouping on ``key``; no state, so no checkpoint): the floor
  under any statestream topology reading these events, exact if every event
  was acked once.

``EventSpout`` reads the events file whole at ``open`` (inside the timed
run) into two arrays and emits ``(key, ts)`` with the event's index as message
id; its position is that index. Every run is checked exactly: the committed
``Totals`` against a Counter of ``(window start, key)`` over the events, the
committed counts against a Counter of keys. The time is ``run(until_idle=True)``
(open, the events read, every window fired, the last checkpoint committed);
the peak RSS is ``resource.getrusage`` of that process (``ru_maxrss``).

``bytewax``: bench/bench_bytewax.py's venv (bytewax 0.21.1) and its runner
(``run_dataflow``): ``FileSource(events)`` -> ``map`` parsing a line ->
``count_window`` keyed on the key, ``EventClock(ts_getter,
wait_for_system_duration=5 s)``, ``TumblingWindower(10 s, align_to=the epoch)``
-> a sink keeping ``start:key -> count``; 1 worker, recovery on (sqlite
snapshots, ``epoch_interval`` 1 s), as bench_bytewax.py's primary figure.

``spill``: ``window`` with a window of ``--window-s`` seconds (1,000: 1,000,000
events, 500,000 a task) in memory, against the same with
``with_max_events_in_memory`` a tenth of a task's window (50,000): the older
tuples spill to the store and are read back, chunk by chunk, when the window
fires (``WindowCount`` iterates the window, ``for t in window``). Peak RSS and
rate of each, both exact.

``--tree DIR`` runs statestream from a built copy (PYTHONPATH=DIR,
STATESTREAM_CORE=compiled), as bench_wallclock.py's ``--sync`` makes one;
without it, whatever ``statestream`` this interpreter imports (the core it
runs is printed). Configurations run round-robin, ``--repeat`` times each.
"""

from __future__ import annotations

import argparse
import array
import collections
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import bench_bytewax  # noqa: E402  (beside this file; stdlib imports only, so the venv has it)

KEYS = [f"k{i:02d}" for i in range(20)]
T0_MS = 1_700_000_000_000  # a multiple of 1,000 s: windows of 10, 100, 1000 s start at T0
LAG_S = 5
TIMEOUT_S = 900


# --- the events --------------------------------------------------------------------------


def events_path(events: int, seed: int = 7) -> Path:
    """``events`` lines ``key ts`` from the corpus's words, cached under bench/results."""
    path = HERE / "results" / f"events-{events}-{seed}.txt"
    if path.exists():
        return path
    from corpus import corpus_path

    sentences = -(-events // 10)
    rng = random.Random(seed)
    by_word: dict[str, str] = {}
    tmp = path.with_suffix(".tmp")
    with open(corpus_path(sentences)) as src, tmp.open("w") as out:
        i = 0
        for line in src:
            for word in line.split():
                if i == events:
                    break
                key = by_word.get(word)
                if key is None:
                    key = by_word[word] = KEYS[zlib.crc32(word.encode()) % len(KEYS)]
                # One event in ten up to 4.5 s early: disorder within the 5 s lag.
                late_by = rng.randrange(4_500) if rng.random() < 0.1 else 0
                out.write(f"{key} {T0_MS + i - late_by}\n")
                i += 1
    tmp.rename(path)
    return path


def read_events(path: str) -> tuple[bytes, array.array[int]]:
    """The events as (key index per event, timestamp per event): compact, 9 bytes an event."""
    index = {k: i for i, k in enumerate(KEYS)}
    keys = bytearray()
    stamps = array.array("q")
    with open(path) as f:
        for line in f:
            key, ts = line.split()
            keys.append(index[key])
            stamps.append(int(ts))
    return bytes(keys), stamps


def expected_windows(path: str, window_ms: int) -> collections.Counter[str]:
    keys, stamps = read_events(path)
    return collections.Counter(
        f"{ts - ts % window_ms}:{KEYS[k]}" for k, ts in zip(keys, stamps, strict=True)
    )


# --- statestream, in the measured process ------------------------------------------------


def statestream_topology(kind: str, window_s: int, clock: Any = None, step: float = 0.0) -> Any:
    """``kind``'s topology; with ``clock`` (a fake one, with ``advance``) the spout moves it ``step``
    s forward per event (bench_window_instructions.py)."""
    from statestream import BaseWindowedBolt, Bolt, Duration, Spout, StatefulBolt, TopologyBuilder

    class EventSpout(Spout):
        """Emits ``(key, ts)`` per event of ``windows.input``; rewindable by index."""

        def declare_output_fields(self, declarer: Any) -> None:
            declarer.declare(["key", "ts"])

        def open(self, conf: Any, context: Any, collector: Any) -> None:
            super().open(conf, context, collector)
            self.keys, self.stamps = read_events(conf["windows.input"])
            self.next = 0
            self.replay: deque[int] = deque()
            self.outstanding = 0

        def next_tuple(self) -> None:
            if self.replay:
                i = self.replay.popleft()
            elif self.next < len(self.keys):
                i = self.next
                self.next += 1
                self.outstanding += 1
            else:
                return
            if clock is not None:
                clock.advance(step)
            self.collector.emit([KEYS[self.keys[i]], self.stamps[i]], i)

        def ack(self, msg_id: Any) -> None:
            self.outstanding -= 1

        def fail(self, msg_id: Any) -> None:
            self.replay.append(msg_id)

        def dead_lettered(self, msg_id: Any) -> None:
            self.outstanding -= 1

        def exhausted(self) -> bool:
            return self.next >= len(self.keys) and not self.replay and not self.outstanding

        def position(self) -> dict[str, Any]:
            return {"next": self.next, "replay": list(self.replay)}

        def seek(self, position: Any) -> None:
            self.outstanding = 0
            if position is None:
                self.next, self.replay = 0, deque()
            else:
                self.next, self.replay = int(position["next"]), deque(position["replay"])

    class WindowCount(BaseWindowedBolt):
        def execute(self, window: Any) -> None:
            counts: dict[str, int] = {}
            for t in window:  # a spilled window: read back chunk by chunk
                k = t.values[0]
                counts[k] = counts.get(k, 0) + 1
            for key, n in counts.items():
                self.collector.emit([window.start_timestamp, key, n])

        def declare_output_fields(self, declarer: Any) -> None:
            declarer.declare(["start", "key", "n"])

    class AggregateCount(WindowCount):
        def execute(self, window: Any) -> None:
            for key, n in window.value.items():
                self.collector.emit([window.start_timestamp, key, n])

    class Totals(StatefulBolt):
        def init_state(self, state: Any) -> None:
            self.state = state

        def execute(self, tup: Any) -> None:
            start, key, n = tup.values
            k = f"{start}:{key}"
            self.state.put(k, self.state.get(k, 0) + n)
            self.collector.ack(tup)

    class AckOnly(Bolt):
        def execute(self, tup: Any) -> None:
            self.collector.ack(tup)

    b = TopologyBuilder("windows")
    b.set_spout("events", EventSpout())
    if kind == "ack":
        b.set_bolt("count", AckOnly(), 2).fields_grouping("events", ["key"])
        return b.build()
    if kind == "count":
        sys.path.insert(0, str(ROOT / "examples"))
        import wordcount

        b.set_bolt("count", wordcount.WordCount(), 2).fields_grouping("events", ["key"])
        return b.build()
    bolt: Any = AggregateCount() if kind == "aggregate" else WindowCount()
    if kind.startswith("spill:"):
        bolt.with_max_events_in_memory(int(kind.split(":")[1]))
    bolt.with_tumbling_window(Duration.seconds(window_s)).with_timestamp_field("ts")
    bolt.with_lag(Duration.seconds(LAG_S))
    if kind == "aggregate":
        bolt.with_aggregate(_acc_init, _acc_add, _acc_merge, _acc_result)
    b.set_bolt("windows", bolt, 2).fields_grouping("events", ["key"])
    b.set_bolt("totals", Totals()).shuffle_grouping("windows")
    return b.build()


def _acc_init() -> dict[str, int]:
    return {}


def _acc_add(acc: dict[str, int], tup: Any) -> dict[str, int]:
    k = tup.values[0]
    acc[k] = acc.get(k, 0) + 1
    return acc


def _acc_merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    for k, n in b.items():
        a[k] = a.get(k, 0) + n
    return a


def _acc_result(acc: dict[str, int]) -> dict[str, int]:
    return acc


def statestream_conf(events: str, workdir: str) -> dict[str, Any]:
    """The config of every statestream run: sqlite in ``workdir``, exactly-once."""
    return {
        "windows.input": events,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": f"{workdir}/state.db"},
        "topology.max.spout.pending": 10_000,
        "topology.state.checkpoint.interval.ms": 1000,
    }


def one_statestream(kind: str, events: str, window_s: int) -> dict[str, Any]:
    from statestream import _core
    from statestream.runtime.local import LocalRuntime
    from statestream.testing import committed_state

    workdir = tempfile.mkdtemp(prefix="bench-windows-")
    try:
        conf = statestream_conf(events, workdir)
        topo = statestream_topology(kind, window_s)
        rt = LocalRuntime(topo, conf)
        t0 = time.perf_counter()
        result = rt.run(until_idle=True)
        elapsed = time.perf_counter() - t0
        rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if kind in ("count", "ack"):
            keys, _ = read_events(events)
            want: collections.Counter[str] = collections.Counter(KEYS[k] for k in keys)
            # The floor keeps no state: exact if it acked every event once.
            acked = result.components["count"].acked
            got = committed_state(topo, conf, "count") if kind == "count" else want
            got = got if kind == "count" or acked == len(keys) else collections.Counter()
        else:
            want = expected_windows(events, window_s * 1000)
            got = committed_state(topo, conf, "totals")
        return {
            "elapsed": elapsed,
            "events": sum(want.values()),
            "exact": dict(got) == dict(want) and not result.errors,
            "late": result.counters.get("late_tuples", 0),
            "rss_mb": rss_kb / 1024,
            "core": _core.describe(),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- Bytewax, in its venv ----------------------------------------------------------------


def bytewax_worker(events: str, workdir: str, window_s: int, recovery_dir: str | None) -> None:
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    from bytewax.connectors.files import FileSource
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.recovery import RecoveryConfig
    from bytewax.run import cli_main

    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    window_ms = window_s * 1000

    class WindowsPartition(StatelessSinkPartition[tuple[str, tuple[int, int]]]):
        def __init__(self, path: Path) -> None:
            self.path = path
            self.counts: dict[str, int] = {}

        def write_batch(self, items: list[tuple[str, tuple[int, int]]]) -> None:
            for key, (window_id, n) in items:
                k = f"{window_id * window_ms}:{key}"  # aligned to the epoch: id * length
                self.counts[k] = self.counts.get(k, 0) + n

        def close(self) -> None:
            self.path.write_text(json.dumps(self.counts))

    class WindowsSink(DynamicSink[tuple[str, tuple[int, int]]]):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> WindowsPartition:
            return WindowsPartition(Path(workdir) / f"windows-{worker_index}.json")

    def parse(line: str) -> tuple[str, int]:
        key, ts = line.split()
        return key, int(ts)

    def ts_getter(event: tuple[str, int]) -> datetime:
        return epoch + timedelta(milliseconds=event[1])

    flow = Dataflow("windows")
    lines = op.input("lines", flow, FileSource(events))
    parsed = op.map("parse", lines, parse)
    clock = EventClock(ts_getter, wait_for_system_duration=timedelta(seconds=LAG_S))
    windower = TumblingWindower(length=timedelta(seconds=window_s), align_to=epoch)
    counted = count_window("count", parsed, clock, windower, lambda e: e[0])
    op.output("out", counted.down, WindowsSink())

    recovery = RecoveryConfig(Path(recovery_dir)) if recovery_dir else None
    start = time.time()
    cli_main(flow, epoch_interval=timedelta(seconds=1), recovery_config=recovery)
    end = time.time()
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"start": start, "end": end, "rss_mb": rss_kb / 1024}), flush=True)


BYTEWAX = bench_bytewax.Config("Bytewax 0.21.1", "count_window, 1 worker, recovery, epoch 1 s")


def one_bytewax(py: Path, events: str, window_s: int) -> dict[str, Any]:
    workdir = tempfile.mkdtemp(prefix="bench-windows-bytewax-")
    try:
        args = ["--events-file", events, "--window-s", str(window_s)]
        stamps = bench_bytewax.run_dataflow(py, Path(__file__).resolve(), args, workdir, BYTEWAX)
        got: collections.Counter[str] = collections.Counter()
        for f in Path(workdir).glob("windows-*.json"):
            got.update(json.loads(f.read_text()))
        want = expected_windows(events, window_s * 1000)
        return {
            "elapsed": max(s["end"] for s in stamps) - min(s["start"] for s in stamps),
            "events": sum(want.values()),
            "exact": dict(got) == dict(want),
            "late": 0,
            "rss_mb": max(s["rss_mb"] for s in stamps),
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- the parent --------------------------------------------------------------------------


def run_statestream(kind: str, events: str, window_s: int, tree: str | None) -> dict[str, Any]:
    env = dict(os.environ)
    if tree:
        env.update(PYTHONPATH=tree, STATESTREAM_CORE="compiled")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one", kind]
    cmd += ["--events-file", events, "--window-s", str(window_s)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"exit {proc.returncode}: {bench_bytewax.tail(proc.stderr)}")
    r: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return r


LABELS = {
    "window": "statestream, BaseWindowedBolt (tuples kept)",
    "aggregate": "statestream, with_aggregate (an accumulator per window)",
    "count": "statestream, plain word count (get/put per tuple)",
    "ack": "statestream, the floor: each event acked by a bolt, no state, no checkpoint",
    "bytewax": "Bytewax 0.21.1, count_window, recovery",
    "spill": "statestream, BaseWindowedBolt, with_max_events_in_memory",
}


def command(args: argparse.Namespace) -> str:
    cmd = f"python bench/bench_windows.py {args.part}"
    if args.events != 2_000_000:
        cmd += f" --events {args.events}"
    if args.part == "rss":
        if args.windows != "10,100,1000":
            cmd += f" --windows {args.windows}"
    elif args.part == "spill":
        if args.window_s != 10:
            cmd += f" --window-s {args.window_s}"
        if args.repeat != 3:
            cmd += f" --repeat {args.repeat}"
    elif args.repeat != 3:
        cmd += f" --repeat {args.repeat}"
    if args.tree:
        cmd += f" --tree {args.tree}"
    return cmd


def rates(runs: list[dict[str, Any]]) -> list[float]:
    return [r["events"] / r["elapsed"] for r in runs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("part", nargs="?", choices=["rate", "bytewax", "rss", "spill"], default="rate")
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--windows", default="10,100,1000", help="rss: window lengths in seconds")
    ap.add_argument("--tree", help="a built copy of statestream to run (STATESTREAM_CORE=compiled)")
    # Hidden: one measured process (statestream's --one, Bytewax's --worker in its venv).
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--events-file", help=argparse.SUPPRESS)
    ap.add_argument("--window-s", type=int, default=10, help="spill: the window's seconds")
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--recovery-dir", help=argparse.SUPPRESS)
    args, _ = ap.parse_known_args()

    if args.worker:
        bytewax_worker(args.events_file, args.workdir, args.window_s, args.recovery_dir)
        return
    if args.one:
        print(json.dumps(one_statestream(args.one, args.events_file, args.window_s)))
        return

    print(f"command: {command(args)}", flush=True)
    events = str(events_path(args.events))
    load_before = os.getloadavg()
    began = time.time()
    if args.part == "rss":
        configs = [(k, int(w)) for w in args.windows.split(",") for k in ("window", "aggregate")]
        repeat = 1
    elif args.part == "spill":
        window_s = args.window_s if args.window_s != 10 else 1000
        # A tenth of a task's window (1,000 events a second of event time, 2 tasks).
        limit = max(1, window_s * 1000 // 2 // 10)
        configs = [("window", window_s), (f"spill:{limit}", window_s)]
        repeat = args.repeat
    elif args.part == "bytewax":
        configs = [("window", 10), ("aggregate", 10), ("ack", 10), ("bytewax", 10)]
        repeat = args.repeat
    else:
        configs = [("window", 10), ("count", 10), ("aggregate", 10), ("count", 10)]
        repeat = args.repeat
    py = bench_bytewax.ensure_venv() if args.part == "bytewax" else None
    results: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in configs}
    errors: dict[tuple[str, int], list[str]] = {c: [] for c in configs}
    core = "?"
    for rep in range(repeat):
        for kind, window_s in configs:
            try:
                if kind == "bytewax":
                    assert py is not None
                    r = one_bytewax(py, events, window_s)
                else:
                    r = run_statestream(kind, events, window_s, args.tree)
                    core = r["core"]
            except Exception as exc:
                errors[(kind, window_s)].append(str(exc))
                print(f"  run {rep + 1}: {kind} {window_s} s: FAILED {exc}", file=sys.stderr)
                continue
            results[(kind, window_s)].append(r)
            print(
                f"  run {rep + 1}: {kind} {window_s} s: {r['events'] / r['elapsed']:,.0f} "
                f"events/s, {r['elapsed']:.2f} s, RSS {r['rss_mb']:.0f} MB, "
                f"exact={r['exact']}, late={r['late']}",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"\n{args.events:,} events, 20 keys, {args.events // 1000:,} s of event time "
        f"(bench/results/{Path(events).name}); {repeat} run(s) per configuration, "
        f"round-robin, {time.time() - began:.0f} s in all; python {platform.python_version()}, "
        f"{os.cpu_count()} cores; statestream: {core}"
        + (f" from {args.tree}" if args.tree else "")
        + f"; 1-min load average {load_before[0]:.2f} before, {os.getloadavg()[0]:.2f} after\n"
    )
    if args.part in ("rss", "spill"):
        print("| window | statestream form | events/s | peak RSS MB | exact | late |")
        print("|---:|---|---:|---:|---|---:|")
        for kind, window_s in configs:
            for r in results[(kind, window_s)]:
                print(
                    f"| {window_s} s | {kind} | {r['events'] / r['elapsed']:,.0f} | "
                    f"{r['rss_mb']:.0f} | {r['exact']} | {r['late']} |"
                )
    else:
        print(
            "| configuration | runs | best events/s | median events/s | peak RSS MB (median) "
            "| exact |"
        )
        print("|---|---:|---:|---:|---:|---|")
        medians: dict[str, float] = {}
        for key in dict.fromkeys(configs):
            runs = results[key]
            if not runs:
                print(f"| {LABELS[key[0]]} | 0 | failed | failed | - | - |")
                continue
            rs = rates(runs)
            medians[key[0]] = statistics.median(rs)
            rss = statistics.median(r["rss_mb"] for r in runs)
            exact = all(r["exact"] for r in runs) and not any(r["late"] for r in runs)
            print(
                f"| {LABELS[key[0]]} | {len(runs)} | {max(rs):,.0f} | {medians[key[0]]:,.0f} "
                f"| {rss:.0f} | {exact} |"
            )
        base = "count" if args.part == "rate" else "bytewax"
        if base in medians:
            print(f"\n| ratio of medians | over {LABELS[base]} |")
            print("|---|---:|")
            for kind in ("window", "aggregate", "ack"):
                if kind in medians:
                    print(f"| {LABELS[kind]} | {medians[kind] / medians[base]:.2f} |")
    for key, errs in errors.items():
        for err in dict.fromkeys(errs):
            print(f"\n{key[0]} {key[1]} s: failed: {err}")


if __name__ == "__main__":
    main()
