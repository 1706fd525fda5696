"""Instructions per word of the word count on a given corpus (issue 34: small vs large state).

    python bench/bench_state_instructions.py CORPUS [CORPUS ...] [--provider sqlite|redis|memory]
        [--cache-mb MB] [--lines-per-second 23000] [--interval-ms 1000]

bench_instructions.py's method (valgrind's callgrind counting only inside
``functools.reduce`` around ``LocalRuntime.run``: no start-up, no imports;
one hash seed) on a corpus file of your choice: examples/wordcount.py,
exactly-once, ``topology.max.spout.pending: 50000``, its checkpoints placed
by a fake clock that the spout moves 1/N s per line (``--lines-per-second``),
the end-of-run dump included. Run it from a built tree (PYTHONPATH=TREE:TREE/pp
STATESTREAM_CORE=compiled) to count the compiled core.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "examples"))

from bench_instructions import callgrind_count  # noqa: E402


def one_run(
    corpus: str, provider: str, cache_mb: float, lines_per_second: int, interval_ms: int
) -> None:
    """The measured part (under valgrind): one word count inside functools.reduce."""
    import bench_stateful
    from bench_instructions import ticking_topology

    from statestream import FakeClock
    from statestream.runtime.local import LocalRuntime

    clock = FakeClock()
    workdir = tempfile.mkdtemp()
    conf: dict[str, Any] = {
        "wordcount.input": corpus,
        "wordcount.output": f"{workdir}/out.jsonl",
        "topology.state.checkpoint.interval.ms": interval_ms,
        "topology.message.timeout.secs": 7200,
        "topology.max.spout.pending": 50000,
        "statestream.state.exactly.once": True,
    }
    if cache_mb > 0:
        conf["topology.state.cache.mb"] = cache_mb
    conf.update(bench_stateful.provider_conf(provider, workdir))
    rt = LocalRuntime(ticking_topology(clock, lines_per_second), conf, clock)
    functools.reduce(lambda _, __: rt.run(until_idle=True), [0, 0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="+")
    ap.add_argument("--provider", choices=("memory", "sqlite", "redis"), default="sqlite")
    ap.add_argument("--cache-mb", type=float, default=0, help="0: the config's default")
    ap.add_argument("--lines-per-second", type=int, default=23000)
    ap.add_argument("--interval-ms", type=int, default=1000)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one_run(
            args.corpus[0], args.provider, args.cache_mb, args.lines_per_second, args.interval_ms
        )
        return
    print("| corpus | provider | cache MB | words | distinct | instructions | per word |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for corpus in args.corpus:
        with open(corpus) as f:
            text = f.read().split()
        total = callgrind_count(
            __file__,
            corpus,
            "--one",
            "--provider",
            args.provider,
            "--cache-mb",
            str(args.cache_mb),
            "--lines-per-second",
            str(args.lines_per_second),
            "--interval-ms",
            str(args.interval_ms),
        )
        print(
            f"| {Path(corpus).name} | {args.provider} | {args.cache_mb or 'default'} "
            f"| {len(text):,} | {len(set(text)):,} | {total:,} | {total / len(text):,.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
