"""Instructions per word of the word count by component, pure-Python core against compiled.

    python bench/bench_components.py [--small 3000] [--large 6000] [--jobs 2]
        [--configs NAME,...] [--profile DIR] [--keep]

Every figure is a *marginal* instruction count per word: each configuration
runs at two corpus sizes (``--small`` and ``--large`` sentences of 10 words
from bench/corpus.py) under ``valgrind --tool=callgrind``, counting only the
instructions inside ``LocalRuntime.run`` (bench_instructions.py's
``functools.reduce`` toggle), and the figure is
``(I_large - I_small) / (words_large - words_small)``. Interpreter start-up,
imports, building the topology, opening tasks and providers and closing them
happen once per run and cancel out; what is left is what one more word costs.

Costs are attributed by difference between neighbouring configurations,
each adding one piece to the one before (see ``CONFIGS`` and ``COMPONENTS``):
the spout feeding a bolt that does nothing (no acking), the split in
between, acking on, counting in a dict, the documented stateful count of
examples/wordcount.py on the memory provider with one checkpoint at the end,
checkpoints every second, then SQLite in place of memory. Exactly-once
(``statestream.state.exactly.once: true``) is measured against
at-least-once (``false``) on both providers and both intervals.

Each configuration runs twice: on the pure-Python core
(``STATESTREAM_CORE=python``, "before") and on the compiled core
(``STATESTREAM_CORE=compiled``, "after"). The in-place build of a checkout
goes stale as soon as someone edits a core source, so both run from a copy
of the working tree (uncommitted changes included) in a temporary
directory, built there with ``setup.py build_ext --inplace``; the children
run with that copy as their working directory and ``PYTHONPATH``, print
``statestream._core.describe()`` and where statestream was imported from,
and the run stops if either is not what was asked for.

Caveat on the one-second checkpoints: how many checkpoints fall on a word
depends on wall-clock speed, and valgrind runs the interpreter many times
slower than native, so under valgrind a run takes far more checkpoints per
word than it would natively (and the slower pure-Python core takes more
than the compiled one). The raw table shows the checkpoint tuples each run
emitted. Costs that follow the number of distinct words (the state written
by the last checkpoint, the counts written at cleanup) also land in the
marginal figure, since a larger corpus has more distinct words.

The ratio column is before / after. The defaults make 56 valgrind runs:
about 16 minutes on a 2-core machine that other work was also using.
Needs valgrind and rsync, and a C compiler and mypyc for the compiled core.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HOUR_MS = 3_600_000
SECOND_MS = 1_000
RESULT_TAG = "bench_components result: "


@dataclass(frozen=True)
class Config:
    """One configuration: the arguments of bench_instructions.one_run."""

    topology: str
    acking: bool = True
    provider: str = "memory"
    interval_ms: int = HOUR_MS
    exactly_once: str = "false"


#: Every configuration measured, by name. The stateful ones are
#: examples/wordcount.py; exactly-once is always said explicitly ("auto"
#: would turn it on, FileSpout being rewindable).
CONFIGS: dict[str, Config] = {
    "lines-noack": Config("lines", acking=False),
    "lines": Config("lines"),
    "words-noack": Config("words", acking=False),
    "words": Config("words"),
    "plain-noack": Config("plain", acking=False),
    "plain": Config("plain"),
    "alo-memory-1h": Config("stateful"),
    "alo-memory-1s": Config("stateful", interval_ms=SECOND_MS),
    "alo-sqlite-1h": Config("stateful", provider="sqlite"),
    "alo-sqlite-1s": Config("stateful", provider="sqlite", interval_ms=SECOND_MS),
    "eo-memory-1h": Config("stateful", exactly_once="true"),
    "eo-memory-1s": Config("stateful", interval_ms=SECOND_MS, exactly_once="true"),
    "eo-sqlite-1h": Config("stateful", provider="sqlite", exactly_once="true"),
    "eo-sqlite-1s": Config(
        "stateful", provider="sqlite", interval_ms=SECOND_MS, exactly_once="true"
    ),
}

#: The attribution: (component, configuration with it, configuration without
#: it or None). The rows down to the sqlite provider add up to alo-sqlite-1s.
COMPONENTS: list[tuple[str, str, str | None]] = [
    (
        "spout: read, emit and deliver each line to a bolt (no acking), per word",
        "lines-noack",
        None,
    ),
    (
        "split: split a line, emit and deliver each word to a bolt (no acking)",
        "words-noack",
        "lines-noack",
    ),
    ("acker: anchored emits, acks, the XOR ledger, for lines and words", "words", "words-noack"),
    ("count in a plain dict", "plain", "words"),
    (
        "stateful count (memory, one checkpoint at the end): StatefulBolt wrappers, "
        "state.get/put, the anchored emit of (word, count), the resumable spout",
        "alo-memory-1h",
        "plain",
    ),
    ("checkpoints every second (memory provider)", "alo-memory-1s", "alo-memory-1h"),
    (
        "state provider: SQLite instead of memory (checkpoints every second)",
        "alo-sqlite-1s",
        "alo-memory-1s",
    ),
]

#: Other cuts through the same measurements.
OTHER_CUTS: list[tuple[str, str, str]] = [
    ("acker for the lines alone", "lines", "lines-noack"),
    ("acker in the plain count", "plain", "plain-noack"),
    ("SQLite instead of memory, one checkpoint at the end", "alo-sqlite-1h", "alo-memory-1h"),
    ("checkpoints every second (SQLite provider)", "alo-sqlite-1s", "alo-sqlite-1h"),
    (
        "exactly-once instead of at-least-once: memory, one checkpoint",
        "eo-memory-1h",
        "alo-memory-1h",
    ),
    (
        "exactly-once instead of at-least-once: memory, every second",
        "eo-memory-1s",
        "alo-memory-1s",
    ),
    (
        "exactly-once instead of at-least-once: SQLite, one checkpoint",
        "eo-sqlite-1h",
        "alo-sqlite-1h",
    ),
    (
        "exactly-once instead of at-least-once: SQLite, every second",
        "eo-sqlite-1s",
        "alo-sqlite-1s",
    ),
]

#: Totals: the documented stateful count, and the plain count for reference.
TOTALS: list[tuple[str, str]] = [
    ("documented count, at-least-once, memory, checkpoint every hour", "alo-memory-1h"),
    ("documented count, at-least-once, memory, checkpoint every second", "alo-memory-1s"),
    ("documented count, at-least-once, SQLite, checkpoint every hour", "alo-sqlite-1h"),
    ("documented count, at-least-once, SQLite, checkpoint every second", "alo-sqlite-1s"),
    ("documented count, exactly-once, memory, checkpoint every hour", "eo-memory-1h"),
    ("documented count, exactly-once, memory, checkpoint every second", "eo-memory-1s"),
    ("documented count, exactly-once, SQLite, checkpoint every hour", "eo-sqlite-1h"),
    ("documented count, exactly-once, SQLite, checkpoint every second", "eo-sqlite-1s"),
    ("plain count (dict), acking on", "plain"),
    ("plain count (dict), acking off", "plain-noack"),
]

CORES = ("python", "compiled")


# ---------------------------------------------------------------- the child


def child(name: str, sentences: int, core: str) -> None:
    """One measured run (under valgrind), then the checks, then one JSON line."""
    # Imported first and checked before anything else is measured or trusted.
    import statestream
    from statestream import _core

    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(ROOT / "examples"))
    import bench_instructions
    from corpus import corpus_path

    where = Path(statestream.__file__).resolve()
    if not where.is_relative_to(Path.cwd().resolve()):
        raise SystemExit(f"statestream imported from {where}, not from the copy {Path.cwd()}")
    if _core.compiled() != (core == "compiled"):
        raise SystemExit(f"asked for the {core} core, got: {_core.describe()}")
    cfg = CONFIGS[name]
    result, conf = bench_instructions.one_run(
        cfg.topology, sentences, cfg.exactly_once, cfg.provider, cfg.interval_ms, cfg.acking
    )
    # Checks, outside the measured part: the run did all the work, exactly.
    if result.errors:
        raise SystemExit(f"{name}: the run reported errors: {result.errors[:3]}")
    text = corpus_path(sentences).read_text()
    if cfg.topology in ("lines", "words"):
        want = sentences if cfg.topology == "lines" else len(text.split())
        got = result.components["ack"].executed
        if got != want:
            raise SystemExit(f"{name}: the acking bolt executed {got} tuples, not {want}")
    else:
        counts: collections.Counter[str] = collections.Counter()
        with open(conf["wordcount.output"]) as f:
            for line in f:
                d = json.loads(line)
                counts[d["word"]] += d["count"]
        if counts != collections.Counter(text.split()):
            raise SystemExit(f"{name}: the counts are not the corpus's word counts")
    cp = result.components.get("$checkpointspout")
    print(
        RESULT_TAG
        + json.dumps(
            {
                "core": _core.describe(),
                "compiled": _core.compiled(),
                "statestream": str(where),
                "checkpoint_tuples": cp.emitted if cp is not None else 0,
            }
        )
    )


# --------------------------------------------------------------- the parent


def snapshot_and_build(dest: Path) -> None:
    """Copy the working tree to ``dest`` without build products, and build the core there."""
    subprocess.run(
        [
            "rsync",
            "-a",
            "--exclude=/.git",
            "--exclude=/build",
            "--exclude=/bench/results",
            "--exclude=*.so",
            "--exclude=_build_info.json",
            "--exclude=*.egg-info",
            "--exclude=__pycache__",
            "--exclude=.*_cache",
            f"{ROOT}/",
            f"{dest}/",
        ],
        check=True,
    )
    proc = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=dest,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0 or not (dest / "statestream" / "_build_info.json").exists():
        raise SystemExit(
            "building the compiled core in the copy failed:\n"
            + proc.stdout[-3000:]
            + proc.stderr[-3000:]
        )


@dataclass
class Run:
    name: str
    core: str
    sentences: int
    instructions: int = 0
    checkpoint_tuples: int = 0
    describe: str = ""


def measure(run: Run, copy: Path, profile: Path | None) -> Run:
    out = "/dev/null"
    if profile is not None:
        out = str(profile / f"callgrind.out.{run.name}.{run.core}.{run.sentences}")
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(copy),
        STATESTREAM_CORE=run.core,
        # The same string hashes in every run: dict layouts do not vary.
        PYTHONHASHSEED="0",
    )
    proc = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=functools_reduce",
            f"--callgrind-out-file={out}",
            # The interpreter itself, not a wrapper script (pyenv shims are bash).
            sys.executable,
            str(copy / "bench" / "bench_components.py"),
            "--child",
            run.name,
            "--sentences",
            str(run.sentences),
            "--core",
            run.core,
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    found = re.search(r"Collected : (\d+)", proc.stderr)
    line = next((x for x in proc.stdout.splitlines() if x.startswith(RESULT_TAG)), None)
    if proc.returncode != 0 or found is None or line is None:
        raise SystemExit(
            f"{run.name} on the {run.core} core, {run.sentences} sentences, failed "
            f"(exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        )
    info: dict[str, Any] = json.loads(line[len(RESULT_TAG) :])
    if info["compiled"] != (run.core == "compiled"):
        raise SystemExit(f"{run.name}: asked for the {run.core} core, ran {info['core']}")
    if not Path(info["statestream"]).is_relative_to(copy):
        raise SystemExit(f"{run.name}: statestream came from {info['statestream']}, not {copy}")
    run.instructions = int(found.group(1))
    run.checkpoint_tuples = info["checkpoint_tuples"]
    run.describe = info["core"]
    print(
        f"  {run.name:14} {run.core:8} {run.sentences:>6} sentences: "
        f"{run.instructions:>14,} instructions ({info['core']})",
        file=sys.stderr,
        flush=True,
    )
    return run


def tree_state() -> str:
    """The commit measured and the uncommitted changes it carried, for the record."""
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(ROOT),
                "status",
                "--porcelain",
                "--",
                "statestream",
                "examples",
                "bench",
                "providers",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    changed = sorted(x[3:] for x in dirty if x.strip())
    if not changed:
        return (
            f"commit {head}, no uncommitted changes under statestream/ examples/ bench/ providers/"
        )
    return f"commit {head} plus uncommitted changes to {', '.join(changed)}"


def fmt_ratio(before: float, after: float) -> str:
    if after <= 0 or before <= 0 or abs(after) < 50:
        return "n/a"
    return f"{before / after:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=3000, help="sentences in the small run")
    ap.add_argument("--large", type=int, default=6000, help="sentences in the large run")
    ap.add_argument("--jobs", type=int, default=2, help="valgrind runs at once")
    ap.add_argument("--configs", help="comma-separated subset of: " + ", ".join(CONFIGS))
    ap.add_argument(
        "--profile",
        type=Path,
        help="keep the callgrind output of every run in this directory (callgrind_annotate)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the built copy of the tree")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--sentences", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--core", choices=CORES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.sentences, args.core)
        return
    if args.large <= args.small:
        ap.error(f"--large ({args.large}) must be more sentences than --small ({args.small})")
    names = list(CONFIGS) if not args.configs else args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        ap.error(f"unknown configuration {unknown[0]!r} (known: {', '.join(CONFIGS)})")
    for tool in ("valgrind", "rsync"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install {tool})")
    cmd = shlex.join(["python", "bench/bench_components.py", *sys.argv[1:]])
    state = tree_state()
    sys.path.insert(0, str(HERE))
    from corpus import corpus_path

    copy = Path(tempfile.mkdtemp(prefix="statestream-bench-"))
    try:
        print(f"building the compiled core in a copy of the tree: {copy}", file=sys.stderr)
        snapshot_and_build(copy)
        (copy / "bench" / "results").mkdir(exist_ok=True)
        for n in (args.small, args.large):
            src = corpus_path(n)  # written here, outside any measured run
            shutil.copy(src, copy / "bench" / "results" / src.name)
        if args.profile is not None:
            args.profile = args.profile.resolve()
            args.profile.mkdir(parents=True, exist_ok=True)
        runs = [
            Run(name, core, n)
            for n in (args.large, args.small)  # the long ones first
            for name in names
            for core in CORES
        ]
        print(f"{len(runs)} valgrind runs, {args.jobs} at a time", file=sys.stderr)
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            done = list(pool.map(lambda r: measure(r, copy, args.profile), runs))
    finally:
        if args.keep:
            print(f"kept the copy: {copy}", file=sys.stderr)
        else:
            shutil.rmtree(copy, ignore_errors=True)

    by = {(r.name, r.core, r.sentences): r for r in done}
    dwords = (args.large - args.small) * 10

    def per_word(name: str, core: str) -> float:
        return (
            by[(name, core, args.large)].instructions - by[(name, core, args.small)].instructions
        ) / dwords

    marginal = {(n, c): per_word(n, c) for n in names for c in CORES}

    def diff(core: str, with_: str, without: str | None) -> float:
        return marginal[(with_, core)] - (marginal[(without, core)] if without else 0.0)

    describes = {c: next(r.describe for r in done if r.core == c) for c in CORES}
    print(f"command: {cmd}\n")
    print(f"tree: {state}; before: {describes['python']}; after: {describes['compiled']}\n")
    print(
        "Marginal instructions per word, (I_large - I_small) / (words_large - words_small), "
        f"with {args.small:,} and {args.large:,} sentences of 10 words: callgrind's count "
        "inside LocalRuntime.run, so start-up, imports and per-run fixed costs cancel. "
        "Components are differences between neighbouring configurations (in brackets).\n"
    )

    def table(rows: list[tuple[str, str, str | None]]) -> None:
        print("| component | before (pure Python) | after (compiled) | ratio |")
        print("|---|---:|---:|---:|")
        for label, with_, without in rows:
            if with_ not in names or (without is not None and without not in names):
                continue
            b, a = diff("python", with_, without), diff("compiled", with_, without)
            how = with_ if without is None else f"{with_} - {without}"
            print(f"| {label} [{how}] | {b:,.0f} | {a:,.0f} | {fmt_ratio(b, a)} |")

    table(COMPONENTS)
    if all(n in names for _, n, _ in COMPONENTS):
        last = COMPONENTS[-1][1]
        b, a = marginal[(last, "python")], marginal[(last, "compiled")]
        print(
            f"| **sum: the documented count, SQLite, every second** [{last}] "
            f"| **{b:,.0f}** | **{a:,.0f}** | **{fmt_ratio(b, a)}** |"
        )
    print("\nOther cuts through the same runs:\n")
    table([(lbl, w, wo) for lbl, w, wo in OTHER_CUTS])
    print("\nTotals (marginal instructions per word):\n")
    table([(lbl, n, None) for lbl, n in TOTALS])
    print(
        "\nRaw counts (instructions inside LocalRuntime.run; checkpoint tuples emitted "
        "by $checkpointspout, small/large run):\n"
    )
    print("| configuration | core | small run | large run | per word | checkpoint tuples |")
    print("|---|---|---:|---:|---:|---:|")
    for name in names:
        for core in CORES:
            s, lg = by[(name, core, args.small)], by[(name, core, args.large)]
            print(
                f"| {name} | {core} | {s.instructions:,} | {lg.instructions:,} "
                f"| {marginal[(name, core)]:,.0f} | {s.checkpoint_tuples}/{lg.checkpoint_tuples} |"
            )


if __name__ == "__main__":
    main()
