"""The floor of the large/small throughput ratio (issue 34): store reads a word x a read's cost.

    python bench/bench_state_floor.py [--generation 62000 40000 400000] [--reads 20000]

1. The store reads the large corpus causes (bench_wallclock.vocab_corpus(2,000,000,
   1,000,000): 781,312 distinct words) through the read cache's two generations,
   simulated per count task (a word goes to task CRC32 % 2; a generation of N
   entries a task; a key seen before and in neither generation is a store read,
   a key never seen is answered by the filter of stored keys without one).
2. What one read costs through Python's sqlite3 on a 1,000,000-row table of the
   sqlite provider's schema (``statestream_entries``, 2 KiB pages, 8 MiB page
   cache), and what ``PRAGMA data_version`` (the provider's check of its kept
   merge, once a miss) costs: callgrind, instructions inside ``functools.reduce``
   of 0 and of ``--reads`` random reads, the difference divided by ``--reads``.
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sqlite3
import sys
import tempfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_instructions import callgrind_count  # noqa: E402

ROWS = 1_000_000
SQL = {
    "select": "SELECT value FROM statestream_entries WHERE namespace = ? AND key = ?",
    "pragma": "PRAGMA data_version",
}


def simulate(generation: int) -> str:
    from bench_wallclock import vocab_corpus

    with open(vocab_corpus(2_000_000, 1_000_000)) as f:
        words = f.read().split()
    young: list[dict[str, int]] = [{}, {}]
    old: list[dict[str, int]] = [{}, {}]
    seen: list[set[str]] = [set(), set()]
    reads = firsts = 0
    for word in words:
        task = zlib.crc32(word.encode()) & 1
        if word in young[task]:
            continue
        if len(young[task]) >= generation:
            old[task], young[task] = young[task], {}
        young[task][word] = 1
        if word in old[task]:
            continue
        if word in seen[task]:
            reads += 1
        else:
            firsts += 1
            seen[task].add(word)
    return (
        f"| {generation:,} | {len(words):,} | {firsts:,} | {reads:,} | {reads / len(words):.2f} |"
    )


def _table(path: str) -> None:
    if os.path.exists(path):
        return
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA page_size=2048")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(
        "CREATE TABLE statestream_entries (namespace TEXT NOT NULL, key BLOB NOT NULL,"
        " value BLOB NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.executemany(
        "INSERT INTO statestream_entries VALUES (?, ?, ?)",
        (("count-0", f'"w{i}"'.encode(), b"3") for i in range(ROWS)),
    )
    conn.commit()
    conn.close()


def one(path: str, what: str, n: int) -> None:
    """The measured part (under valgrind): n reads of random keys, or n pragmas."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA cache_size=-8192")
    rng = random.Random(1)
    keys = [f'"w{rng.randrange(ROWS)}"'.encode() for _ in range(n)]
    sql = SQL[what]

    def reads(_: object, __: object) -> None:
        ex = conn.execute
        if what == "select":
            for key in keys:
                ex(sql, ("count-0", key)).fetchone()
        else:
            for _key in keys:
                ex(sql).fetchone()

    functools.reduce(reads, [0, 0])


def count(path: str, what: str, n: int) -> int:
    return callgrind_count(__file__, "--one", what, str(n), path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--generation", type=int, nargs="+", default=[40_000, 62_000, 400_000])
    ap.add_argument("--reads", type=int, default=20_000)
    ap.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(args.one[2], args.one[0], int(args.one[1]))
        return
    print("| generation a task | words | first sights (no read) | store reads | a word |")
    print("|---|---|---|---|---|")
    for generation in args.generation:
        print(simulate(generation), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/floor.db"
        _table(path)
        print("\n| statement (Python sqlite3, 1,000,000 rows) | instructions a call |")
        print("|---|---|")
        for what in ("select", "pragma"):
            per = (count(path, what, args.reads) - count(path, what, 0)) / args.reads
            print(f"| {SQL[what]} | {per:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
