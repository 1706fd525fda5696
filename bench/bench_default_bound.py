"""Peak RSS of the README word count on the built-in defaults (issue 44, item 7).

    python bench/bench_default_bound.py [--tree DIR ...]

Runs ``statestream run examples/wordcount.py --until-idle`` with no config file but a
sqlite store (so the built-in ``topology.max.spout.pending`` applies) over two
2,000,000-word corpora (10,000 and 781,312 distinct words, bench_wallclock.vocab_corpus),
each in a fresh directory and process, for each ``--tree`` (a checkout whose package
is imported: its own ``PYTHONPATH``), and prints the peak RSS of each run. Run times
are printed but not compared unless the runs were interleaved on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_wallclock import vocab_corpus  # noqa: E402


def run(tree: Path, corpus: str) -> tuple[float, float, str]:
    """(peak RSS MB, seconds, the summary line) of one word count."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [
            "/usr/bin/time", "-f", "RSS %M %e", sys.executable, "-m", "statestream", "run",
            str(tree / "examples" / "wordcount.py"), "--until-idle", "--no-progress",
            "--set", "topology.state.provider=sqlite",
            "--set", f"topology.state.provider.config={{path: {d}/state.db}}",
            "--set", f"wordcount.input={corpus}",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(tree)}
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=d, env=env, check=False)
    rss = re.search(r"^RSS (\d+) ([\d.]+)$", proc.stderr, re.M)
    summary = [line for line in proc.stderr.splitlines() if line.startswith("statestream: ")]
    if rss is None or proc.returncode != 0:
        raise SystemExit(f"{tree}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    return int(rss.group(1)) / 1024, float(rss.group(2)), summary[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", action="append", type=Path, default=[])
    args = ap.parse_args()
    trees = args.tree or [HERE.parent]
    print(f"python bench/bench_default_bound.py {' '.join(f'--tree {t}' for t in args.tree)}")
    print("\n| corpus | tree | peak RSS MB | s | summary |\n|---|---|---:|---:|---|")
    for vocab in (10_000, 1_000_000):
        corpus = vocab_corpus(2_000_000, vocab)
        for tree in trees:
            rss, secs, summary = run(tree, corpus)
            print(f"| {Path(corpus).name} | {tree} | {rss:.1f} | {secs:.1f} | {summary} |")


if __name__ == "__main__":
    main()
