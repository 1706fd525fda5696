"""Poison messages: exactly-once against at-least-once on the same input (issue 30).

    python bench/bench_poison.py [--pairs 3] [--lines 20000] [--every 100]

The word count of bench/poison_wordcount.py (the README's WordCount: state.get
and state.put per word, the count emitted anchored, the word acked; split and
count with 2 tasks each; the sqlite provider; a checkpoint every second; the
default retry policy, 5 attempts) over LINES lines of 8 words, one line in
EVERY holding the word POISON, on which ``split`` raises. Each pair runs the
default exactly-once mode and ``statestream.state.exactly.once=false`` one
after the other, each as its own ``python -m statestream run ... --until-idle``
process in a fresh directory (so the sqlite store starts empty), and the table
gives the wall clock of each (the whole process) and the median of the
per-pair ratios: issue 30 asks exactly-once to take at most 2x.

Every run is checked: exit 3 (finished, errors reported), every poison line
dead-lettered once, and in exactly-once mode every other word counted exactly
(``wordcount.output``, against collections.Counter of the input).

The second table is the bolt that fails every tuple (``wordcount.poison_every=1``): the
run must stop by itself with exit 1 (statestream.errors.max.rate) within 10 s.

The wall clock of a shared machine is noisy: compare the ratio of a pair, never
one run's seconds across sessions.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
TOPOLOGY = HERE / "poison_wordcount.py"
CONFIG = """\
topology.state.provider: sqlite
topology.state.provider.config:
  path: ./data/state.db
topology.state.checkpoint.interval.ms: 1000
"""


def corpus(path: Path, lines: int, every: int) -> tuple[collections.Counter[str], int]:
    """Write the input; return the expected counts (poison lines left out) and how
    many lines are poison."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(2000)]
    expected: collections.Counter[str] = collections.Counter()
    poison = 0
    with path.open("w") as f:
        for i in range(lines):
            line = [rng.choice(words) for _ in range(8)]
            if i % every == every // 2:
                line.insert(rng.randrange(9), "POISON")
                poison += 1
            else:
                expected.update(line)
            f.write(" ".join(line) + "\n")
    return expected, poison


def run(
    work: Path, exactly_once: bool, *extra: str
) -> tuple[float, subprocess.CompletedProcess[str]]:
    run_dir = Path(tempfile.mkdtemp(dir=work))
    (run_dir / "c.yaml").write_text(CONFIG)
    cmd = [
        sys.executable,
        "-m",
        "statestream",
        "run",
        str(TOPOLOGY),
        "-c",
        "c.yaml",
        "--until-idle",
        "--no-progress",
        "--set",
        f"wordcount.input={work / 'in.txt'}",
        "--set",
        "wordcount.output=out.jsonl",
        "--set",
        f"statestream.state.exactly.once={str(exactly_once).lower()}",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=run_dir, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - t0
    proc.args = run_dir  # where to look
    return wall, proc


def check(
    proc: subprocess.CompletedProcess[str],
    exactly_once: bool,
    expected: collections.Counter[str],
    poison: int,
) -> None:
    run_dir = Path(proc.args)
    if proc.returncode != 3:
        raise SystemExit(f"exit {proc.returncode}, expected 3:\n{proc.stderr[-3000:]}")
    dead = (run_dir / "data" / "deadletter.jsonl").read_bytes().splitlines()
    if len(dead) != poison:
        raise SystemExit(f"{len(dead)} dead letters, expected {poison}")
    counts: collections.Counter[str] = collections.Counter()
    for line in (run_dir / "out.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        counts[rec["word"]] = rec["count"]
    if exactly_once and counts != expected:
        raise SystemExit("exactly-once counts differ from the input's")
    if not exactly_once and any(counts[w] < n for w, n in expected.items()):
        raise SystemExit("at-least-once lost a count")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--every", type=int, default=100, help="one poison line in EVERY")
    args = ap.parse_args()
    core = os.environ.get("STATESTREAM_CORE", "(as built)")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        expected, poison = corpus(work / "in.txt", args.lines, args.every)
        print(
            f"`python bench/bench_poison.py --pairs {args.pairs} --lines {args.lines} "
            f"--every {args.every}` (STATESTREAM_CORE={core}): {args.lines:,} lines, "
            f"{poison} poison\n"
        )
        print("| pair | exactly-once s | at-least-once s | ratio |")
        print("|---:|---:|---:|---:|")
        ratios, eo_walls, alo_walls = [], [], []
        for pair in range(1, args.pairs + 1):
            eo, proc = run(work, True)
            check(proc, True, expected, poison)
            alo, proc = run(work, False)
            check(proc, False, expected, poison)
            eo_walls.append(eo)
            alo_walls.append(alo)
            ratios.append(eo / alo)
            print(f"| {pair} | {eo:.2f} | {alo:.2f} | {eo / alo:.2f}x |", flush=True)
        print(
            f"| median | {statistics.median(eo_walls):.2f} | {statistics.median(alo_walls):.2f} "
            f"| {statistics.median(ratios):.2f}x |\n"
        )
        print("A bolt that fails every tuple (wordcount.poison_every=1):\n")
        print("| mode | exit | s | last line |")
        print("|---|---:|---:|---|")
        for exactly_once in (True, False):
            wall, proc = run(work, exactly_once, "--set", "wordcount.poison_every=1")
            last = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
            mode = "exactly-once" if exactly_once else "at-least-once"
            print(f"| {mode} | {proc.returncode} | {wall:.2f} | {last[:160]} |", flush=True)


if __name__ == "__main__":
    main()
