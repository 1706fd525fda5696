"""Instructions per event of the windowed count against the plain count, counted by callgrind.

    python bench/bench_window_instructions.py [--kinds window,count,aggregate,ack]
        [--events 50000,100000] [--events-per-second 25000] [--profile DIR]

bench_windows.py's topologies (its ``statestream_topology``: the events of
bench/results/events-N-7.txt, 20 keys, 10 s event-time tumbling windows with
a 5 s lag, 2 tasks on a fields grouping, sqlite, exactly-once, a checkpoint
every 1 s) run under ``valgrind --tool=callgrind``, counting only inside
``LocalRuntime.run`` (called through ``functools.reduce``, as
bench_instructions.py does). The wall clock would put the checkpoints and
the watermark's moves where valgrind's speed puts them (some 50 times more
per event than a native run), so the run's clock is a fake one that the
spout moves ``1 / --events-per-second`` s forward per event it emits: every
build takes its checkpoints, ticks and watermark moves at the same events.
25,000 events/s is about the windowed count's native rate here, so a
checkpoint and a watermark move come every 25,000 events, as in a real run.

The figure is the marginal cost per event, ``(I_large - I_small) /
(events_large - events_small)``, which cancels start-up, the first
checkpoint and the last windows' fire. Kinds: ``window`` (BaseWindowedBolt,
tuples kept), ``aggregate`` (with_aggregate), ``count`` (the plain word count
of the same events, state get/put per event), ``ack`` (the spout and a bolt
that only acks, the runtime's floor). ``--profile DIR`` keeps the larger
run's callgrind file per kind for ``callgrind_annotate --inclusive=yes``, and
prints where its instructions went, per event of that run (the inclusive
counts of the compiled functions named in PARTS, over its events).
Every run is checked exact (outside the measured part).
"""

from __future__ import annotations

import argparse
import functools
import operator
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_windows  # noqa: E402  (beside this file)
from bench_instructions import callgrind_run, import_provider  # noqa: E402

KINDS = ("window", "aggregate", "count", "ack")


class BenchClock:
    """A fake clock read through C calls only, as the system clock is (the windowed
    path reads ``time.monotonic`` per tuple when the clock is the SystemClock):
    FakeClock's ``monotonic`` is an interpreted method, some 700 instructions a
    read that a real run does not pay."""

    def __init__(self) -> None:
        self._now = [0.0]
        self.monotonic = self.time = functools.partial(operator.getitem, self._now, 0)

    def advance(self, seconds: float) -> None:
        self._now[0] += seconds

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)


def one_run(kind: str, events: int, per_second: int) -> None:
    """The measured part (under valgrind): one run inside functools.reduce, then its check."""
    import collections

    from statestream.runtime.local import LocalRuntime
    from statestream.testing import committed_state

    path = str(bench_windows.events_path(events))
    clock = BenchClock()
    workdir = tempfile.mkdtemp(prefix="bench-window-instr-")
    conf = bench_windows.statestream_conf(path, workdir)
    import_provider("sqlite")
    topo = bench_windows.statestream_topology(kind, 10, clock, 1.0 / per_second)
    rt = LocalRuntime(topo, conf, clock)
    # A two-item list without an initial value: reduce calls the lambda once.
    result = functools.reduce(lambda _, __: rt.run(until_idle=True), [0, 0])
    keys, _ = bench_windows.read_events(path)
    if kind in ("count", "ack"):
        want: collections.Counter[str] = collections.Counter(bench_windows.KEYS[k] for k in keys)
        got = committed_state(topo, conf, "count") if kind == "count" else want
    else:
        want = bench_windows.expected_windows(path, 10_000)
        got = committed_state(topo, conf, "totals")
    exact = dict(got) == dict(want) and not result.errors
    spout = result.components.get("$checkpointspout")
    ckpt = spout.emitted if spout is not None else 0
    print(f"exact: {exact}, checkpoint tuples: {ckpt}, counters: {result.counters}")
    shutil.rmtree(workdir, ignore_errors=True)


def callgrind(kind: str, events: int, per_second: int, out: str) -> tuple[int, str]:
    """Instructions counted inside functools.reduce, and the run's ``exact:`` line."""
    args = [__file__, "--one", kind, "--events", str(events)]
    total, stdout = callgrind_run([*args, "--events-per-second", str(per_second)], out=out)
    exact = re.search(r"^exact: .*$", stdout, re.M)
    if exact is None:
        raise SystemExit(f"the measured run printed no check:\n{stdout[-500:]}")
    return total, exact.group(0)


#: Where a run's instructions go: a part and the compiled functions whose inclusive
#: counts make it (callgrind_annotate's names, without the module group's prefix).
PARTS = [
    ("the spout (its emits, the acker's entries, completions)", ["LocalRuntime____step_spouts"]),
    ("the bolts' data tuples", ["BoltTask____drain_here"]),
    ("- a tuple into the window (timestamp, channel, add, clock)", ["WindowIntake___take"]),
    ("- the watermark's moves (release in order, windows due)", ["TimeOrder___advance"]),
    ("- the end of input (every window still open)", ["TimeOrder___finish"]),
    ("- the ack (held for the checkpoint)", ["BoltTask___ack"]),
    ("the checkpoints (prepare, commit, acks released)", ["handle_checkpoint"]),
    ("- the window store's save (chunk, $window)", ["WindowStore___save"]),
]


def breakdown(path: str, events: int) -> list[tuple[str, float]]:
    """Instructions per event by PARTS in one callgrind file of a run of ``events``."""
    text = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path],
        capture_output=True,
        text=True,
        cwd="/",  # source paths left unresolved: the same listing from any directory
    ).stdout
    total = int(re.search(r"([\d,]+) \([ \d.]+%\)  PROGRAM TOTALS", text)[1].replace(",", ""))  # type: ignore[index]
    rows = [("the run (LocalRuntime.run)", total / events)]
    for part, names in PARTS:
        n = 0
        for name in names:
            # Every file the function's lines are in (its own, and headers inlined
            # into it, which callgrind_annotate may list apart): their sum.
            pattern = r"^\s*([\d,]+) \([ \d.]+%\)  \S*:CPyDef_\w*" + name + r" "
            n += sum(int(m[1].replace(",", "")) for m in re.finditer(pattern, text, re.M))
        rows.append((part, n / events))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--events", default="50000,100000", help="the two input sizes")
    ap.add_argument("--events-per-second", type=int, default=25_000)
    ap.add_argument("--profile", help="keep the larger run's callgrind file per kind here")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one_run(args.one, int(args.events), args.events_per_second)
        return
    kinds = args.kinds.split(",")
    if unknown := [k for k in kinds if k not in KINDS]:
        ap.error(f"--kinds {unknown[0]!r}: pick from {', '.join(KINDS)}")
    small, large = (int(n) for n in args.events.split(","))
    for n in (small, large):
        bench_windows.events_path(n)  # written outside the measured runs
    from statestream import _core

    cmd = "python bench/bench_window_instructions.py"
    if args.kinds != ",".join(KINDS):
        cmd += f" --kinds {args.kinds}"
    if args.events != "50000,100000":
        cmd += f" --events {args.events}"
    if args.events_per_second != 25_000:
        cmd += f" --events-per-second {args.events_per_second}"
    print(f"command: {cmd}")
    import statestream

    print(f"measured: statestream from {Path(statestream.__file__).parent}, {_core.describe()}")
    rows = []
    for kind in kinds:
        counts = []
        for n in (small, large):
            keep = args.profile and n == large
            out = f"{args.profile}/callgrind.out.{kind}" if keep else "/dev/null"
            total, exact = callgrind(kind, n, args.events_per_second, out)
            print(f"  {kind} {n:,} events: {total:,} instructions; {exact}", file=sys.stderr)
            counts.append(total)
        rows.append((kind, counts, (counts[1] - counts[0]) / (large - small)))
    print()
    print(f"| kind | I at {small:,} events | I at {large:,} events | per event (marginal) |")
    print("|---|---:|---:|---:|")
    for kind, counts, per in rows:
        print(f"| {kind} | {counts[0]:,} | {counts[1]:,} | {per:,.0f} |")
    if args.profile:
        parts = {kind: breakdown(f"{args.profile}/callgrind.out.{kind}", large) for kind in kinds}
        print(f"\nInstructions per event of the {large:,}-event runs, by part (inclusive):\n")
        print("| part | " + " | ".join(kinds) + " |")
        print("|---|" + "---:|" * len(kinds))
        for i, (part, _) in enumerate(parts[kinds[0]]):
            print(f"| {part} | " + " | ".join(f"{parts[k][i][1]:,.0f}" for k in kinds) + " |")


if __name__ == "__main__":
    main()
