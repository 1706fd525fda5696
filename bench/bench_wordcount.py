"""Word count throughput on the local runtime, acking off and on.

The topology is examples/wordcount.py's spout and split bolt with a plain
in-memory counting bolt (bench_stateful.plain_topology), since the example's
own stateful count needs acking; bench_stateful.py measures that one.

    python bench/bench_wordcount.py [--sentences 200000]

Each configuration runs in its own process (so peak RSS is its own) over the
same generated corpus (bench/corpus.py: 2,000,000 words, fixed seed) and is
checked against collections.Counter before its numbers are printed.
"""

from __future__ import annotations

import argparse
import collections
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))


def one_run(corpus: str, ackers: int) -> dict[str, object]:
    from bench_stateful import plain_topology

    from statestream.runtime.local import LocalRuntime

    out = tempfile.mktemp(suffix=".jsonl")
    conf = {
        "wordcount.input": corpus,
        "wordcount.output": out,
        "topology.acker.executors": ackers,
    }
    rt = LocalRuntime(plain_topology(), conf)
    t0 = time.perf_counter()
    result = rt.run(until_idle=True)
    elapsed = time.perf_counter() - t0
    got = {}
    with open(out) as f:
        for line in f:
            d = json.loads(line)
            got[d["word"]] = d["count"]
    with open(corpus) as f:
        expected = collections.Counter(f.read().split())
    words = sum(expected.values())
    return {
        "ackers": ackers,
        "words": words,
        "elapsed": elapsed,
        "exact": got == dict(expected),
        "rate": {cid: m.executed / elapsed for cid, m in result.components.items()},
        "emitted": {cid: m.emitted / elapsed for cid, m in result.components.items()},
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--corpus", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one is not None:
        print(json.dumps(one_run(args.corpus, args.one)))
        return
    from corpus import corpus_path

    corpus = str(corpus_path(args.sentences))
    rows = []
    for ackers in (0, 1):
        proc = subprocess.run(
            [sys.executable, __file__, "--one", str(ackers), "--corpus", corpus],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    cmd = "python bench/bench_wordcount.py" + (
        f" --sentences {args.sentences}" if args.sentences != 200_000 else ""
    )
    print(f"command: {cmd}")
    print(
        f"corpus: {args.sentences:,} sentences, {rows[0]['words']:,} words, python {sys.version.split()[0]}"
    )
    print()
    print(
        "| acking | words/s end to end | split executed/s | count executed/s | sentences emitted/s | peak RSS MB | exact |"
    )
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        label = "off (acker.executors=0)" if r["ackers"] == 0 else f"on ({r['ackers']} acker)"
        print(
            f"| {label} | {r['words'] / r['elapsed']:,.0f} | {r['rate']['split']:,.0f} | "
            f"{r['rate']['count']:,.0f} | {r['emitted']['sentences']:,.0f} | {r['rss_mb']:.0f} | {r['exact']} |"
        )
    off, on = rows[0], rows[1]
    cost = 1 - (on["words"] / on["elapsed"]) / (off["words"] / off["elapsed"])
    print()
    print(f"acking costs {cost:.0%} of the throughput (goal: at most 40%)")


if __name__ == "__main__":
    main()
