"""The floor under the word count: its user code driven by the thinnest interpreted loop.

    python bench/bench_floor.py [--emit interpreted|append]

What the documented word count's user code costs with no runtime at all: per
line ``SplitSentence.execute`` (``line.split()`` and ``collector.emit([word])``
per word), per word a counting ``execute`` (``tup.values[0]``, a dict get and
set, ``collector.ack``), handed over through one deque and a three-line tuple
class; no routing, no acking, no state. ``--emit append`` makes ``emit`` the
deque's own ``append`` (a C call); ``interpreted`` a Python method that builds
the tuple. Counted by callgrind inside ``functools.reduce``, as
bench_instructions.py counts the runtime, at 5,000 and 10,000 sentences of
bench/corpus.py; the figure is the marginal cost per word.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections import deque
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


class Tup:
    __slots__ = ("values",)

    def __init__(self, values: Any) -> None:
        self.values = values


class Collector:
    def __init__(self, out: deque[Any], emit: str) -> None:
        self.out = out
        if emit == "append":
            self.emit = out.append  # type: ignore[method-assign]

    def emit(self, values: Any) -> None:
        self.out.append(Tup(values))

    def ack(self, tup: Any) -> None:
        pass


class Split:
    def execute(self, tuple: Any, collector: Collector) -> None:
        _offset, line = tuple.values
        for word in line.split():
            collector.emit([word])


class Count:
    def __init__(self, collector: Collector) -> None:
        self.counts: dict[str, int] = {}
        self.collector = collector

    def execute(self, tup: Any) -> None:
        w = tup.values[0]
        self.counts[w] = self.counts.get(w, 0) + 1
        self.collector.ack(tup)


def one_run(path: str, emit: str) -> dict[str, int]:
    with open(path) as f:
        lines = f.read().splitlines()

    def run() -> dict[str, int]:
        q: deque[Any] = deque()
        collector = Collector(q, emit)
        split, count = Split(), Count(collector)
        wrap = emit == "append"
        for i, line in enumerate(lines):
            split.execute(Tup((i, line)), collector)
            while q:
                item = q.popleft()
                count.execute(Tup(item) if wrap else item)
        return count.counts

    return functools.reduce(lambda _, __: run(), [0, 0])  # type: ignore[no-any-return]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--emit", choices=("interpreted", "append"), default="append")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one_run(args.one, args.emit)
        return
    from bench_instructions import callgrind_count
    from corpus import corpus_path

    counts = {
        n: callgrind_count(__file__, "--emit", args.emit, "--one", str(corpus_path(n)))
        for n in (5000, 10000)
    }
    per_word = (counts[10000] - counts[5000]) / 50_000
    print(f"command: python bench/bench_floor.py --emit {args.emit}\n")
    print("| emit | instructions, 5,000 sentences | 10,000 sentences | marginal per word |")
    print("|---|---:|---:|---:|")
    print(f"| {args.emit} | {counts[5000]:,} | {counts[10000]:,} | {per_word:,.0f} |")


if __name__ == "__main__":
    main()
