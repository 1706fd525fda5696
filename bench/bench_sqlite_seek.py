"""What a key costs sqlite in a large namespace: reads and sorted upserts (issue 49, item 2).

    python bench/bench_sqlite_seek.py [--keys 760000] [--rounds 2]

A table of the sqlite provider's schema (WAL, synchronous=FULL, 2 KiB pages)
holding ``--keys`` word-count rows (``"w123"`` -> ``7``) of one namespace,
as the 781k-word count's file holds them, then, in process CPU per key:

* **reads**: 250 statements of 512 random keys, sorted, after 50 to warm the
  cache: ``key IN (...)`` (the provider before) and a VALUES list walked by a
  CROSS JOIN (after), at a page cache of 2, 8 (the provider's) and 32 MiB and
  with ``mmap_size`` 64 MiB; peak RSS of the process after each;
* **the layout**: reads and sorted upserts (6 transactions of 30,000 random
  existing keys, statements of 256 rows, as a fold) in the provider's
  ``(namespace TEXT, key)`` primary key, in ``(namespace INTEGER, key)`` and in
  ``key`` alone.

Each round builds the files afresh; rounds repeat every case in the same order.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sqlite3
import tempfile
import time
from collections.abc import Callable

NS = "wordcount/count-0"
BATCH = 512


def bound_ns(layout: str) -> list[object]:
    """The namespace as the layout binds it (nothing for a table of one namespace)."""
    named: dict[str, list[object]] = {"text": [NS], "int": [1]}
    return named.get(layout, [])


def build(path: str, layout: str, rows: list[tuple[bytes, bytes]]) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA page_size=2048")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    column = {"text": "namespace TEXT NOT NULL, ", "int": "namespace INTEGER NOT NULL, "}
    pk = "key" if layout == "key" else "namespace, key"
    conn.execute(
        f"CREATE TABLE e ({column.get(layout, '')}key BLOB NOT NULL, value BLOB NOT NULL,"
        f" PRIMARY KEY ({pk})) WITHOUT ROWID"
    )
    ns = bound_ns(layout)
    marks = "?, " * len(ns)
    conn.execute("BEGIN")
    conn.executemany(f"INSERT INTO e VALUES ({marks}?, ?)", ([*ns, k, v] for k, v in rows))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return conn


def per_key(run: Callable[[], int]) -> float:
    cpu = time.process_time()
    keys = run()
    return (time.process_time() - cpu) / keys * 1e6


def reads(conn: sqlite3.Connection, layout: str, batches: list[list[bytes]], how: str) -> float:
    where = {"text": "namespace = ? AND ", "int": "namespace = ? AND "}.get(layout, "")
    ns = bound_ns(layout)
    if how == "in":
        sql = f"SELECT key, value FROM e WHERE {where}key IN ({', '.join(['?'] * BATCH)})"
    else:
        sql = (
            f"SELECT e.key, e.value FROM (VALUES {', '.join(['(?)'] * BATCH)}) AS v"
            f" CROSS JOIN e WHERE {where}e.key = v.column1"
        )

    def bind(batch: list[bytes]) -> list[object]:
        keys = list(map(bytearray, batch))
        return [*ns, *keys] if how == "in" else [*keys, *ns]

    for batch in batches[:50]:
        dict(conn.execute(sql, bind(batch)))

    def run() -> int:
        for batch in batches[50:]:
            dict(conn.execute(sql, bind(batch)))
        return (len(batches) - 50) * BATCH

    return per_key(run)


def upserts(conn: sqlite3.Connection, layout: str, folds: list[list[bytes]]) -> float:
    ns_col = "" if layout == "key" else "namespace, "
    ns = bound_ns(layout)
    sql = (
        f"INSERT INTO e ({ns_col}key, value) SELECT {'?, ' if ns else ''}column1, column2"
        f" FROM (VALUES {', '.join(['(?, ?)'] * 256)}) WHERE true"
        f" ON CONFLICT ({ns_col}key) DO UPDATE SET value = excluded.value"
    )

    def run() -> int:
        done = 0
        for fold in folds:
            conn.execute("BEGIN IMMEDIATE")
            for i in range(0, len(fold) - 255, 256):
                rows = [bytearray(x) for k in fold[i : i + 256] for x in (k, b"8")]
                conn.execute(sql, [*ns, *rows])
                done += 256
            conn.execute("COMMIT")
        return done

    return per_key(run)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keys", type=int, default=760_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    rng = random.Random(7)
    keys = sorted({b'"w%d"' % rng.randrange(10 * args.keys) for _ in range(args.keys)})
    rows = [(k, b"%d" % rng.randrange(1000)) for k in keys]
    batches = [sorted(rng.sample(keys, BATCH)) for _ in range(300)]
    folds = [sorted(rng.sample(keys, 30_000)) for _ in range(6)]
    print("| round | case | CPU us a key | peak RSS MB |")
    print("|---|---|---:|---:|")
    for round_ in range(1, args.rounds + 1):
        with tempfile.TemporaryDirectory() as tmp:
            conn = build(f"{tmp}/text.db", "text", rows)
            for cache, mmap in ((2, 0), (8, 0), (32, 0), (8, 64)):
                conn.execute(f"PRAGMA cache_size={-cache * 1024}")
                conn.execute(f"PRAGMA mmap_size={mmap * 2**20}")
                for how in ("in", "values"):
                    us = reads(conn, "text", batches, how)
                    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
                    label = f"read, {how}, cache {cache} MiB" + (
                        f", mmap {mmap} MiB" if mmap else ""
                    )
                    print(f"| {round_} | {label} | {us:.2f} | {rss:.0f} |", flush=True)
            conn.close()
            for layout in ("text", "int", "key"):
                conn = build(f"{tmp}/layout-{layout}.db", layout, rows)
                conn.execute("PRAGMA cache_size=-8192")
                (pages,) = conn.execute("PRAGMA page_count").fetchone()
                name = {"text": "(namespace TEXT, key)", "int": "(namespace INTEGER, key)"}
                label = f"{name.get(layout, 'key alone')}, {pages:,} pages"
                print(
                    f"| {round_} | read, values, {label} | {reads(conn, layout, batches, 'values'):.2f} | |"
                )
                print(
                    f"| {round_} | sorted upsert, {label} | {upserts(conn, layout, folds):.2f} | |"
                )
                conn.close()
                os.remove(f"{tmp}/layout-{layout}.db")


if __name__ == "__main__":
    main()
