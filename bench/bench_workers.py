"""Storm's word count on 1 and 2 worker processes (``topology.workers``), and what a tuple
costs to move between workers (issue 15).

    python bench/bench_workers.py [--sentences 200000] [--pairs 3]
        [--variants 2w,1w-s2,2w-s2] [--parts wall,frame,pipe,callgrind[,cgrun]]
        [--cg-variants 1w,2w,1w-s2,2w-s2] [--jobs 1]

Two topologies, the same documented bolts (``SplitSentence``, ``WordCount``
of examples/wordcount.py, shuffle to split, fields grouping on ``word`` to
count, 2 tasks each), SQLite, exactly-once, ``config/local.yaml``:

* ``1w``, ``2w``: examples/wordcount.py unchanged (one ``FileSpout`` task,
  so the spout is in one worker);
* ``1w-s2``, ``2w-s2``: bench/wordcount_tasks.py, the same topology with a
  2-task ``FileSpout`` (task i emits the lines numbered i modulo 2), so that
  on 2 workers each worker reads half of the input.

``wall``: each variant run by ``statestream run ... --until-idle`` once per
pair, interleaved (1w, 2w, 1w-s2, 2w-s2, 1w, ...), each in a fresh directory
(a fresh state.db) on ``bench/corpus.py``'s corpus. Each run is a child
process (``bench_workers.py --child``) that calls the CLI's ``main``
in-process after wrapping a few methods of ``statestream.runtime.workers``
(nothing per tuple; every wrapper takes ``*args``, so that small signature
changes do not break it): ``Worker.run`` (the worker's ``getrusage``: CPU,
ru_maxrss = peak RSS, context switches; its rounds and bytes; the timers
the worker keeps itself: encoding, ``Mesh.exchange``, decoding +
delivering), ``Link.encode`` (frames, groups, tuples and acker messages
sent, counted per group), ``Worker._poll_spouts`` and ``Worker._quiet``
(time in the spouts, idle sleeps). The wall clock is taken by the parent
around the child process (interpreter start-up and imports included; the
child runs without PYTHONDONTWRITEBYTECODE, so that its modules are compiled
once, as an installed package's are) and,
separately, the run's own ``RunResult.elapsed``; the final counts are checked
(the word total, the same counts in every run of every variant).
``2w-acker2`` (``topology.acker.executors: 2``) is kept for comparison with
older results: a default acker count is now raised to ``topology.workers``.

``frame``: the cost of moving word-count tuples between workers in one
process, on synthetic frames built as a run builds them (worker 1's
``RemoteInbox`` for split task 2 and count task 4, in columns: one group per
source task and stream per round, the words of a line sharing its root; acks
as ``Acking.ack`` appends them, root and XOR words): ``RemoteInbox.add_drawn``
(what a spout's and an anchored emit's routes call for a task of another
worker: the queue draws the edge, and a group's edges cross as one int),
``Link.encode``, ``Link.decode`` and ``Link.deliver`` into a real, unopened
worker ``LocalRuntime`` (its inbox deques and acker ledger), in microseconds
per tuple (best of 7).

``callgrind``: the same operations under ``valgrind --tool=callgrind``,
counting instructions inside ``functools.reduce`` (as bench_instructions.py
does), at two repetition counts so that the fixed cost cancels: marginal
instructions per tuple.

``pipe``: rounds of the same frames through a real pipe pair between two
forked processes, each with a ``Mesh``, as ``Worker._exchange`` does them:
send frame r, read the peer's frame r-1 (lag 1), decode and deliver it; in
microseconds per round and per tuple; and with empty frames (status only)
for the fixed cost of a round.

``cgrun`` (not in the default parts: several minutes per variant): the whole
word count under callgrind at 5,000 and 10,000 lines, every process counted
(valgrind follows the forked workers): marginal instructions per word per
process, the CPU work 2 workers add whatever the machine's load. ``--jobs``
runs that many valgrind runs at once (instruction counts do not depend on
the load).

Measure from a built copy of the tree (see bench/RESULTS-workers.md): with a
stale in-tree build statestream silently runs its pure-Python core;
``STATESTREAM_CORE=compiled`` makes that an error.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from workers_frames import (  # noqa: E402
    CG_OPS,
    CG_REPS,
    FRAMES,
    frame_ops,
    frame_setup,
    frames_note,
    part_frame,
    part_pipe,
)

sys.path.insert(0, str(ROOT / "examples"))

EXAMPLE = ROOT / "examples" / "wordcount.py"
SPOUT2 = HERE / "wordcount_tasks.py"

VARIANTS: dict[str, tuple[int, Path, dict[str, Any]]] = {
    # name: (workers, topology file, extra config)
    "1w": (1, EXAMPLE, {}),
    "2w": (2, EXAMPLE, {}),
    "1w-s2": (1, SPOUT2, {}),
    "2w-s2": (2, SPOUT2, {}),
    "2w-acker2": (2, EXAMPLE, {"topology.acker.executors": 2}),
}
# The one-worker run each variant's ratio is taken against (besides 1w).
BASELINE = {"2w": "1w", "2w-acker2": "1w", "1w-s2": "1w", "2w-s2": "1w-s2"}


# -- the child: one run of the CLI, with counters around the worker's rounds ---------------


def _sent_counts(box: Any) -> tuple[int, int, int]:
    """(groups, tuples, acker messages) in an outbox: a group of the tuple part is
    ``(target, lane, src, stream, values, edges, roots, anchors)``; anything else
    counts as one tuple."""
    groups = getattr(box, "tuples", ())
    n = 0
    for g in groups:
        vals = g[4] if isinstance(g, tuple) and len(g) > 4 else None
        n += len(vals) if isinstance(vals, list) else 1
    return len(groups), n, len(getattr(box, "acks", ())) + len(getattr(box, "pairs", ())) // 2


def _instrument(stats_dir: str) -> None:
    """Wrap Worker.run, Link.encode, Worker._poll_spouts and Worker._quiet; write one
    JSON per worker at the end of its run."""
    from statestream.runtime.workers import link as W_link
    from statestream.runtime.workers import worker as W

    orig_run = W.Worker.run
    orig_encode = W_link.Link.encode
    orig_quiet = W.Worker._quiet
    orig_poll = W.Worker._poll_spouts
    pc = time.perf_counter
    st: dict[str, float] = {}

    def reset() -> None:
        st.clear()
        st.update(
            frames=0, groups_out=0, tuples_out=0, acks_out=0, max_frame=0,
            quiet=0, quiet_s=0.0, poll_s=0.0,
        )  # fmt: skip

    def quiet(self: Any, *args: Any, **kw: Any) -> Any:
        st["quiet"] += 1
        t = pc()
        out = orig_quiet(self, *args, **kw)
        st["quiet_s"] += pc() - t
        return out

    def poll(self: Any, *args: Any, **kw: Any) -> Any:
        t = pc()
        out = orig_poll(self, *args, **kw)
        st["poll_s"] += pc() - t
        return out

    def encode(self: Any, peer: int, *args: Any, **kw: Any) -> Any:
        g, n, a = _sent_counts(self.out[peer])
        st["groups_out"] += g
        st["tuples_out"] += n
        st["acks_out"] += a
        data = orig_encode(self, peer, *args, **kw)
        st["frames"] += 1
        st["max_frame"] = max(st["max_frame"], len(data))
        return data

    def run(self: Any, *args: Any, **kw: Any) -> Any:
        reset()
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = pc()
        result = orig_run(self, *args, **kw)
        wall = pc() - t0
        ru = resource.getrusage(resource.RUSAGE_SELF)
        rt = self.rt
        out = dict(st)
        out.update(
            index=self.index,
            pid=os.getpid(),
            rounds=self.rounds,
            bytes_out=self.mesh.bytes_out,
            # the worker's own timers (Worker._exchange)
            encode_s=getattr(self, "encode_time", 0.0),
            exchange_s=getattr(self, "wait_time", 0.0),
            deliver_s=getattr(self, "deliver_time", 0.0),
            run_s=wall,
            user_s=ru.ru_utime - ru0.ru_utime,
            sys_s=ru.ru_stime - ru0.ru_stime,
            maxrss_kb=ru.ru_maxrss,
            nvcsw=ru.ru_nvcsw - ru0.ru_nvcsw,
            nivcsw=ru.ru_nivcsw - ru0.ru_nivcsw,
            tasks=sorted(rt.task_by_id),
            spout_emitted=sum(
                getattr(s, "emitted", 0) for s in rt.spouts if not getattr(s, "system", False)
            ),
        )
        Path(stats_dir, f"worker{self.index}.json").write_text(json.dumps(out))
        return result

    W.Worker.run = run  # type: ignore[method-assign]
    W_link.Link.encode = encode  # type: ignore[method-assign]
    W.Worker._quiet = quiet  # type: ignore[method-assign]
    W.Worker._poll_spouts = poll  # type: ignore[method-assign]


def child(args: argparse.Namespace) -> None:
    from statestream import _cli, _core

    stats_dir = args.stats
    _instrument(stats_dir)
    workers, topo_file, extra = VARIANTS[args.variant]
    sets = [
        f"wordcount.input={args.input}",
        f"wordcount.output={args.output}",
        f"topology.workers={workers}",
        *(f"{k}={v}" for k, v in extra.items()),
        *args.child_set,
    ]
    argv = [
        "run",
        str(topo_file),
        "--until-idle",
        "--no-progress",
        "-c",
        str(ROOT / "config" / "local.yaml"),
    ]
    for s in sets:
        argv += ["--set", s]
    code = 0
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    try:
        _cli.main.main(argv, prog_name="statestream", standalone_mode=False)
    except SystemExit as exc:
        code = int(exc.code or 0)
    wall = time.perf_counter() - t0
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(stats_dir, "main.json").write_text(
        json.dumps(
            {
                "code": code,
                "cli_s": wall,
                "cli_cpu_s": me.ru_utime + me.ru_stime - ru0.ru_utime - ru0.ru_stime,
                "nvcsw": me.ru_nvcsw - ru0.ru_nvcsw,
                "nivcsw": me.ru_nivcsw - ru0.ru_nivcsw,
                "core": _core.describe(),
                "maxrss_kb": me.ru_maxrss,
                "user_s": me.ru_utime,
                "sys_s": me.ru_stime,
                "children_maxrss_kb": kids.ru_maxrss,
                "children_user_s": kids.ru_utime,
                "children_sys_s": kids.ru_stime,
            }
        )
    )
    sys.exit(code)


# -- wall clock: interleaved runs ------------------------------------------------------------

_ELAPSED = re.compile(r"statestream: idle after ([0-9.]+) s, (\d+) errors")


# A child runs as an installed package does, its modules compiled once and read
# from __pycache__ after that: a PYTHONDONTWRITEBYTECODE=1 in the environment
# (as on this machine kind) would make every run compile statestream's sources
# again (about 40 ms of each process's start-up, for 1 worker and for 2).
_CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def one_wall_run(variant: str, corpus: Path, keep: dict[str, Any]) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"bw-{variant}-"))
    stats = work / "stats"
    stats.mkdir()
    out = work / "counts.jsonl"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--variant",
        variant,
        "--input",
        str(corpus),
        "--output",
        str(out),
        "--stats",
        str(stats),
    ]
    load = Path("/proc/loadavg").read_text().split()[0]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, env=_CHILD_ENV)
    wall = time.perf_counter() - t0
    found = _ELAPSED.search(proc.stderr)
    if proc.returncode != 0 or found is None or found.group(2) != "0":
        raise SystemExit(f"{variant} run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    main = json.loads((stats / "main.json").read_text())
    workers = [json.loads(p.read_text()) for p in sorted(stats.glob("worker*.json"))]
    counts: dict[str, int] = {}
    for line in out.read_bytes().splitlines():
        rec = json.loads(line)
        counts[rec["word"]] = counts.get(rec["word"], 0) + rec["count"]
    total = sum(counts.values())
    if "counts" not in keep:
        keep["counts"] = counts
    elif counts != keep["counts"]:
        raise SystemExit(f"{variant}: the counts differ from the first run's")
    shutil.rmtree(work)
    return {
        "variant": variant,
        "load": load,
        "wall": wall,
        "elapsed": float(found.group(1)),
        "main": main,
        "workers": workers,
        "total": total,
    }


_TIMED = ("poll_s", "encode_s", "exchange_s", "deliver_s", "quiet_s")


def _fmt_s(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f}"


def part_wall(args: argparse.Namespace, cmd: str) -> None:
    from corpus import corpus_path

    corpus = corpus_path(args.sentences)
    words = args.sentences * 10
    variants = list(dict.fromkeys(["1w", *args.variants.split(",")]))
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    keep: dict[str, Any] = {}
    for i in range(args.pairs):
        for v in variants:
            r = one_wall_run(v, corpus, keep)
            runs[v].append(r)
            print(
                f"  pair {i + 1} {v}: load {r['load']}: {r['wall']:.2f} s wall, "
                f"run {r['elapsed']:.2f} s, {r['total']:,} words counted",
                file=sys.stderr,
                flush=True,
            )
        if keep.get("counts") is not None and sum(keep["counts"].values()) != words:
            raise SystemExit(f"counted {sum(keep['counts'].values()):,} words, not {words:,}")
    if args.json:
        Path(args.json).write_text(json.dumps(runs))
    med = statistics.median
    order = " ".join(variants)
    loads = [float(r["load"]) for v in variants for r in runs[v]]
    print(f"command: {cmd}\n")
    print(
        f"Wall clock of `statestream run TOPOLOGY --until-idle -c config/local.yaml` (SQLite, "
        f"exactly-once, checkpoint every 1 s) on {args.sentences:,} lines ({words:,} words), "
        f"{args.pairs} interleaved rounds ({order}), load average (1 min) "
        f"{min(loads):.2f}-{max(loads):.2f} at the runs' starts; process = the child process "
        f"from start to exit, run = RunResult.elapsed. Topology: 'example' = "
        f"examples/wordcount.py unchanged (1 spout task), 'spout x2' = "
        f"bench/wordcount_tasks.py (the same bolts, FileSpout with parallelism 2):\n"
    )
    print("| configuration | topology | process median | min | max | run median | min | max |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for v in variants:
        ws = [r["wall"] for r in runs[v]]
        es = [r["elapsed"] for r in runs[v]]
        print(f"| {v} {_describe(v)} | {_topo_label(v)} | {_fmt_s(ws)} | {_fmt_s(es)} |")
    print()
    print(
        "Speed-up = run time of the 1-worker configuration / run time of this one (> 1: "
        "faster); per pair = the runs of the same interleaved round:\n"
    )
    print("| configuration | against | process (medians) | run (medians) | per-pair run |")
    print("|---|---|---:|---:|---|")
    for v in variants:
        for b in dict.fromkeys(["1w", BASELINE.get(v, "1w")]):
            if b == v or b not in runs:
                continue
            base = runs[b]
            rw = med(r["wall"] for r in base) / med(r["wall"] for r in runs[v])
            re_ = med(r["elapsed"] for r in base) / med(r["elapsed"] for r in runs[v])
            pairs = ", ".join(
                f"{a['elapsed'] / x['elapsed']:.2f}" for a, x in zip(base, runs[v], strict=True)
            )
            print(f"| {v} | {b} | {rw:.2f}x | {re_:.2f}x | {pairs} |")
    print()
    print(
        "Per process, medians over the runs. CPU = user+sys seconds (the CLI call for the "
        "one-process run and the supervisor, Worker.run for a worker); peak RSS = ru_maxrss; "
        "% = share of the worker's Worker.run wall time, from the worker's own timers: encode = "
        "Link.encode, exchange = Mesh.exchange (write, select, read: mostly waiting for the "
        "peer), decode+deliver = Link.decode + Link.deliver; spout = Worker._poll_spouts; "
        "rest = bolts, timers, status; groups/tuples/acks = what Link.encode sent per round "
        "(tuples in columns, a group per source task and stream); sleeps = idle sleeps of the "
        "round loop (_quiet); csw = voluntary/involuntary context switches per round:\n"
    )
    print(
        "| configuration | process | tasks | CPU s | peak RSS MB | rounds | rounds/s "
        "| spout lines/round | groups/round | tuples sent/round | acks sent/round "
        "| KB sent/round | spout % | encode % | exchange % | decode+deliver % | rest % "
        "| sleeps | csw/round |"
    )
    print(
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---:|---|"
    )
    for v in variants:
        rs = runs[v]
        sup = "supervisor" if rs[0]["workers"] else "the one process"
        cpu = med(r["main"]["cli_cpu_s"] for r in rs)
        rss = med(r["main"]["maxrss_kb"] for r in rs) / 1024
        tasks = "-" if rs[0]["workers"] else "all"
        print(f"| {v} | {sup} | {tasks} | {cpu:.2f} | {rss:.1f} |" + " |" * 14)
        for wi in range(len(rs[0]["workers"])):
            ws = [r["workers"][wi] for r in rs]

            def m(f: Any, ws: list[dict[str, Any]] = ws) -> float:
                return med(f(w) for w in ws)

            def per_round(key: str) -> float:
                return m(lambda w: w[key] / max(1, w["rounds"]))

            def pct(key: str) -> float:
                return m(lambda w: 100 * w[key] / w["run_s"])

            rest = m(lambda w: 100 * (w["run_s"] - sum(w[k] for k in _TIMED)) / w["run_s"])
            tasks = ",".join(str(t) for t in ws[0]["tasks"])
            print(
                f"| {v} | worker {wi} | {tasks} | {m(lambda w: w['user_s'] + w['sys_s']):.2f} "
                f"| {m(lambda w: w['maxrss_kb']) / 1024:.1f} | {m(lambda w: w['rounds']):,.0f} "
                f"| {m(lambda w: w['rounds'] / w['run_s']):,.0f} "
                f"| {per_round('spout_emitted'):.1f} | {per_round('groups_out'):.1f} "
                f"| {per_round('tuples_out'):.1f} | {per_round('acks_out'):.1f} "
                f"| {m(lambda w: w['bytes_out'] / max(1, w['rounds']) / 1024):.1f} "
                f"| {pct('poll_s'):.1f} | {pct('encode_s'):.1f} | {pct('exchange_s'):.1f} "
                f"| {pct('deliver_s'):.1f} | {rest:.1f} | {m(lambda w: w['quiet']):,.0f} "
                f"| {per_round('nvcsw'):.1f}/{per_round('nivcsw'):.1f} |"
            )
    print()
    print("Raw runs (per worker: rounds, CPU s, peak RSS MB):\n")
    for v in variants:
        for r in runs[v]:
            ws = "; ".join(
                f"w{w['index']} {w['rounds']:,} rounds {w['user_s'] + w['sys_s']:.1f} s "
                f"{w['maxrss_kb'] / 1024:.0f} MB"
                for w in r["workers"]
            )
            print(
                f"- {v}: load {r['load']}: process {r['wall']:.2f} s, run {r['elapsed']:.2f} s, "
                f"main CPU {r['main']['cli_cpu_s']:.1f} s, "
                f"{r['main']['maxrss_kb'] / 1024:.0f} MB" + (f"; {ws}" if ws else "")
            )
    print()


# -- moving tuples between workers: synthetic frames ------------------------------------


def callgrind_all() -> None:
    """The measured part under valgrind: for every frame, operation and repetition count,
    one functools.reduce call (callgrind dumps before each, so each dump is one call).
    Prints the labels of the calls in order, as JSON."""
    import gc

    setups = {kind: frame_ops(frame_setup(kind)) for kind in FRAMES}
    labels = []
    gc.disable()
    for kind, ops in setups.items():
        for op in CG_OPS:
            fn = ops[op]
            for reps in CG_REPS:
                fn()  # warm: first-call costs stay out of the count

                def loop(_: Any, __: Any, fn: Any = fn, reps: int = reps) -> None:
                    for _ in range(reps):
                        fn()

                functools.reduce(loop, [0, 0])
                labels.append([kind, op, reps])
    functools.reduce(lambda _, __: None, [0, 0])  # ends the last measured dump
    print(json.dumps(labels))


def part_callgrind(args: argparse.Namespace, cmd: str) -> None:
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    small, large = CG_REPS
    out = Path(tempfile.mkdtemp(prefix="bw-cg-"))
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=functools_reduce",
            "--dump-before=functools_reduce",
            f"--callgrind-out-file={out}/cg.out",
            # The interpreter itself, not a wrapper script (pyenv shims are bash).
            sys.executable,
            str(Path(__file__).resolve()),
            "--cg-all",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    labels = json.loads(proc.stdout.strip().splitlines()[-1])
    counts: dict[tuple[str, str, int], int] = {}
    for k, (kind, op, reps) in enumerate(labels):
        # dump 1 is taken before the first call; dump k + 2 holds call k
        text = (out / f"cg.out.{k + 2}").read_text()
        found = re.search(r"^totals: (\d+)", text, re.M)
        assert found is not None, text[:500]
        counts[(kind, op, reps)] = int(found.group(1))
    shutil.rmtree(out)
    print(f"command: {cmd}\n")
    print(
        f"Instructions per tuple (callgrind, inside functools.reduce, garbage collector off): "
        f"marginal between {small} and {large} repetitions of the operation on one frame, "
        f"divided by {large - small} x tuples per frame; {frames_note()}:\n"
    )
    print(
        "| frame | tuples | append | encode | decode | deliver | decode+deliver "
        "| total per tuple | total per frame |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for kind in FRAMES:
        n = FRAMES[kind][0] + FRAMES[kind][1]
        per = {
            op: (counts[(kind, op, large)] - counts[(kind, op, small)]) / (large - small)
            for op in CG_OPS
        }
        enc = per["encode"] - per["refill"]
        total = per["append"] + enc + per["decode+deliver"]
        print(
            f"| {kind} | {n} | {per['append'] / n:,.0f} | {enc / n:,.0f} "
            f"| {per['decode'] / n:,.0f} | {per['deliver'] / n:,.0f} "
            f"| {per['decode+deliver'] / n:,.0f} | {total / n:,.0f} | {total:,.0f} |"
        )
    print()


def part_cgrun(args: argparse.Namespace, cmd: str) -> None:
    """The whole word count under callgrind, on 1 and 2 workers, at two corpus sizes:
    marginal instructions per word of every process (the CPU work, whatever the load)."""
    from corpus import corpus_path

    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    sizes = (5_000, 10_000)
    interval = 3_600_000
    variants = args.cg_variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v!r}; known: {', '.join(VARIANTS)}")
    todo = [(v, n) for v in variants for n in sizes]
    running: list[tuple[str, int, Path, Any]] = []
    found: dict[tuple[str, int], dict[str, int]] = {}

    def start(v: str, n: int) -> None:
        work = Path(tempfile.mkdtemp(prefix=f"bw-cgrun-{v}-"))
        (work / "stats").mkdir()
        proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                str(Path(__file__).resolve()),
                "--child",
                "--variant",
                v,
                "--input",
                str(corpus_path(n)),
                "--output",
                str(work / "counts.jsonl"),
                "--stats",
                str(work / "stats"),
                "--child-set",
                f"topology.state.checkpoint.interval.ms={interval}",
                "--child-set",
                "topology.message.timeout.secs=7200",
            ],
            cwd=work,
            stdout=subprocess.DEVNULL,
            stderr=(work / "valgrind.err").open("w"),
            text=True,
        )
        running.append((v, n, work, proc))

    def finish(v: str, n: int, work: Path, proc: Any) -> None:
        err = (work / "valgrind.err").read_text()
        if proc.returncode != 0:
            raise SystemExit(f"callgrind run {v} {n} failed:\n{err[-3000:]}")
        per_pid = {int(p): int(c) for p, c in re.findall(r"==(\d+)== Collected : (\d+)", err)}
        main_pid = int(re.search(r"==(\d+)==", err).group(1))  # type: ignore[union-attr]
        row = {"supervisor" if VARIANTS[v][0] > 1 else "the one process": per_pid.pop(main_pid)}
        for wf in sorted((work / "stats").glob("worker*.json")):
            w = json.loads(wf.read_text())
            row[f"worker {w['index']}"] = per_pid.pop(w["pid"])
        for pid, c in per_pid.items():  # other forks (none expected)
            row[f"pid {pid}"] = c
        found[(v, n)] = row
        shutil.rmtree(work)
        print(f"  callgrind {v} {n:,} lines: {row}", file=sys.stderr, flush=True)

    while todo or running:
        while todo and len(running) < max(1, args.jobs):
            start(*todo.pop(0))
        time.sleep(1)
        for item in list(running):
            if item[3].poll() is not None:
                running.remove(item)
                finish(*item)
    words = (sizes[1] - sizes[0]) * 10
    print(f"command: {cmd}\n")
    print(
        f"The whole word count (SQLite, exactly-once; checkpoint interval "
        f"{interval // 1000} s and message timeout 7,200 s, so that only the final checkpoint "
        f"is taken however slowly valgrind runs) under callgrind, every process counted from "
        f"its start to its exit: marginal instructions per word between {sizes[0]:,} and "
        f"{sizes[1]:,} lines (start-up, imports and fixed costs cancel); the last column "
        f"compares with 1w, examples/wordcount.py on one process:\n"
    )
    print(
        f"| configuration | topology | process | instructions, {sizes[0]:,} lines "
        f"| instructions, {sizes[1]:,} lines | marginal per word | 1w per word / this |"
    )
    print("|---|---|---|---:|---:|---:|---:|")
    ref = None
    if "1w" in variants:
        ref = (
            sum(found[("1w", sizes[1])].values()) - sum(found[("1w", sizes[0])].values())
        ) / words
    for v in variants:
        small, large = found[(v, sizes[0])], found[(v, sizes[1])]
        for k in large:
            per = (large[k] - small.get(k, 0)) / words
            vs = f"{ref / per:.2f}x" if ref and per > 0 else ""
            print(
                f"| {v} | {_topo_label(v)} | {k} | {small.get(k, 0):,} | {large[k]:,} "
                f"| {per:,.0f} | {vs} |"
            )
        ts, tl = sum(small.values()), sum(large.values())
        per = (tl - ts) / words
        vs = f"{ref / per:.2f}x" if ref else ""
        print(
            f"| {v} | {_topo_label(v)} | **all processes** | {ts:,} | {tl:,} "
            f"| **{per:,.0f}** | {vs} |"
        )
    print()


def _topo_label(v: str) -> str:
    return "example" if VARIANTS[v][1] == EXAMPLE else "spout x2"


def _describe(v: str) -> str:
    workers, _, extra = VARIANTS[v]
    bits = [f"topology.workers={workers}"] + [f"{k}={x}" for k, x in extra.items()]
    return "(" + ", ".join(bits) + ")"


DEFAULTS = {
    "sentences": 200_000,
    "pairs": 3,
    "variants": "2w,1w-s2,2w-s2",
    "parts": "wall,frame,pipe,callgrind",
    "cg_variants": "1w,2w,1w-s2,2w-s2",
    "jobs": 1,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=DEFAULTS["sentences"])
    ap.add_argument("--pairs", type=int, default=DEFAULTS["pairs"])
    ap.add_argument("--variants", default=DEFAULTS["variants"])
    ap.add_argument("--parts", default=DEFAULTS["parts"])
    ap.add_argument("--cg-variants", default=DEFAULTS["cg_variants"], help="cgrun's variants")
    ap.add_argument("--jobs", type=int, default=DEFAULTS["jobs"], help="cgrun runs at once")
    ap.add_argument("--json", help="write the wall part's raw runs here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--output", help=argparse.SUPPRESS)
    ap.add_argument("--stats", help=argparse.SUPPRESS)
    ap.add_argument("--cg-all", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-set", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if args.cg_all:
        callgrind_all()
        return
    cmd = "python bench/bench_workers.py"
    for key, default in DEFAULTS.items():
        value = getattr(args, key)
        if value != default:
            cmd += f" --{key.replace('_', '-')} {value}"
    parts = args.parts.split(",")
    from statestream import _core

    print(f"core: {_core.describe()}; statestream from {Path(_core.__file__).parent}\n")
    if "wall" in parts:
        part_wall(args, cmd)
    if "frame" in parts:
        part_frame(args, cmd)
    if "pipe" in parts:
        part_pipe(args, cmd)
    if "callgrind" in parts:
        part_callgrind(args, cmd)
    if "cgrun" in parts:
        part_cgrun(args, cmd)


if __name__ == "__main__":
    main()
