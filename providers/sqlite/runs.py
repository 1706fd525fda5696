"""Sorted runs: a large namespace's folded changes between its log and its entries.

Why. A fold that upserts each changed key into ``statestream_entries``
rewrites one B-tree page per key once the state is much larger than the
fold (1,000 random keys of a 1,000,000-key state: ~1,000 pages, against ~40
in a 1,000-key state), so a commit's cost followed the state's size. Once
the entries hold at least :data:`DENSE` times the fold's keys, a fold
instead writes its keys as a new *run*: rows of ``statestream_runs`` under
a new run number, in key order, so the pages it writes are new ones filled
one after the other. Runs are merged in sorted passes, inside sqlite:

* the runs of one *level* (a fold's run is level 0) become one run of the
  next level once there are :data:`FANOUT` of them (tiered compaction);
* every run goes into the entries, in one sorted upsert, once the runs hold
  a :data:`BASE_SHARE` th of the entries' rows: that pass rewrites most
  pages of the namespace's entries, each once, for many keys a page.

So a changed key is written about once a level (a handful, growing with
log(state / fold)) instead of a page of its own, and the runs stay few.

The order of the committed state. A namespace's committed state is its
entries, then its runs from the lowest run number to the highest (a key's
row in a later run wins; a NULL value is a deletion, a *tombstone*, until
the entries take it), then its committed log records. Run numbers only
grow, and a level's runs are merged only when every lower level is empty,
so the merged run, numbered above all, is where its rows were in that
order. A fold goes straight into the entries only while the namespace has
no run (else it would land under older runs).

Crash safety: a fold writes its run in the transaction of the commit that
folds; the merges run afterwards in a transaction of their own, so a kill
in either leaves the file as before it (sqlite's atomic commit), and the
next fold finds the runs still to merge.

Reads: a point read is one statement, a seek into each run and one into the
entries, newest first; :func:`read_many` one statement a chunk; a page in key
order (:func:`stored_page`) one statement per run and one for the entries.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from itertools import chain
from typing import Final, NamedTuple

__all__ = [
    "BASE_SHARE",
    "DENSE",
    "FANOUT",
    "RUNS_SCHEMA",
    "RUN_RECORDS",
    "Run",
    "base_floor",
    "compact_runs",
    "list_runs",
    "load",
    "merge_into_base",
    "read_many",
    "stored_page",
    "write_run",
]

#: A fold goes into the entries directly while they hold fewer than this many
#: times its keys: a sorted upsert of that many keys then changes most pages of
#: the namespace anyway, each for several keys.
DENSE: Final = 8
#: The runs of a level merged into one run of the next once there are this many.
FANOUT: Final = 8
#: Every run merged into the entries once the runs hold 1/BASE_SHARE of
#: the entries' rows (see the module doc).
BASE_SHARE: Final = 4
#: While runs exist, a fold waits for this many committed records (or the
#: log's byte bound): fewer, larger runs.
RUN_RECORDS: Final = 64

RUNS_SCHEMA: Final = {
    "statestream_runs": (
        "CREATE TABLE statestream_runs ("
        " namespace TEXT NOT NULL, run INTEGER NOT NULL, key BLOB NOT NULL, value BLOB,"
        " PRIMARY KEY (namespace, run, key)) WITHOUT ROWID",
        ("namespace", "run", "key", "value"),
    ),
    "statestream_run_list": (
        "CREATE TABLE statestream_run_list ("
        " namespace TEXT NOT NULL, run INTEGER NOT NULL, level INTEGER NOT NULL,"
        " rows INTEGER NOT NULL, deletes INTEGER NOT NULL,"
        " PRIMARY KEY (namespace, run)) WITHOUT ROWID",
        ("namespace", "run", "level", "rows", "deletes"),
    ),
}


class Run(NamedTuple):
    """One run of a namespace: its number, level, rows and tombstones among them."""

    run: int
    level: int
    rows: int
    deletes: int


def list_runs(conn: sqlite3.Connection | sqlite3.Cursor, ns: str) -> list[Run]:
    """The runs of ``ns``, newest (highest number) first."""
    return [
        Run(*row)
        for row in conn.execute(
            "SELECT run, level, rows, deletes FROM statestream_run_list WHERE namespace = ?"
            " ORDER BY run DESC",
            (ns,),
        )
    ]


def base_floor(conn: sqlite3.Connection, ns: str, at_least: int) -> int:
    """The rows of ``ns`` in the entries, counted up to ``2 * at_least`` (a count
    that reaches that is a lower bound): C steps only, one per row counted."""
    (count,) = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM statestream_entries WHERE namespace = ? LIMIT ?)",
        (ns, 2 * at_least),
    ).fetchone()
    return int(count)


# A run's rows, sorted, _CHUNK a statement bound as bytearrays (no adaptation
# step a value: see backend._CHUNK); the namespace and run number bound once.
_CHUNK: Final = 256


def _insert_sql(rows: int) -> str:
    return (
        "INSERT INTO statestream_runs (namespace, run, key, value) SELECT ?, ?, column1, column2"
        " FROM (VALUES " + ", ".join(["(?, ?)"] * rows) + ")"
    )


_INSERT: Final = {1 << bit: _insert_sql(1 << bit) for bit in range(_CHUNK.bit_length())}


def write_run(
    conn: sqlite3.Connection,
    ns: str,
    runs: list[Run],
    keys: list[bytes],
    values: Mapping[bytes, bytes | None],
) -> list[Run]:
    """Write ``keys`` (sorted) with their ``values`` (None: a tombstone) as a new
    level-0 run of ``ns`` numbered above ``runs``; the runs after it, newest first."""
    number = runs[0].run + 1 if runs else 1
    done, left, size, deletes = 0, len(keys), _CHUNK, 0
    while left:
        while size > left:
            size >>= 1
        chunk = keys[done : done + size]
        found = list(map(values.__getitem__, chunk))
        if None in found:
            deletes += found.count(None)
            bound: list[object] = [ns, number]
            for key, value in zip(chunk, found, strict=True):
                bound += (bytearray(key), None if value is None else bytearray(value))
        else:
            rows = chain.from_iterable(zip(chunk, found, strict=True))
            bound = [ns, number, *map(bytearray, rows)]  # type: ignore[arg-type]
        conn.execute(_INSERT[size], bound)
        done += size
        left -= size
    run = Run(number, 0, len(keys), deletes)
    conn.execute("INSERT INTO statestream_run_list VALUES (?, ?, ?, ?, ?)", (ns, *run))
    return [run, *runs]


def _numbers(runs: Sequence[Run]) -> str:
    # Run numbers are integers this module made: safe in the statement's text.
    return ", ".join(str(int(r.run)) for r in runs)


def _newest(runs: Sequence[Run]) -> str:
    """A query of each key's newest row among ``runs`` (sqlite takes a bare
    column of an aggregate query with max() from the row of the maximum)."""
    if len(runs) == 1:
        return (
            f"SELECT key, value FROM statestream_runs WHERE namespace = :ns"
            f" AND run = {int(runs[0].run)}"
        )
    return (
        "SELECT key, value FROM (SELECT key, value, max(run) FROM statestream_runs"
        f" WHERE namespace = :ns AND run IN ({_numbers(runs)}) GROUP BY key)"
    )


def _drop_runs(conn: sqlite3.Connection, ns: str, runs: Sequence[Run]) -> None:
    numbers = _numbers(runs)
    conn.execute(f"DELETE FROM statestream_runs WHERE namespace = ? AND run IN ({numbers})", (ns,))
    conn.execute(
        f"DELETE FROM statestream_run_list WHERE namespace = ? AND run IN ({numbers})", (ns,)
    )


def _merge_level(conn: sqlite3.Connection, ns: str, runs: list[Run], level: int) -> list[Run]:
    """Merge the runs of ``level`` (the lowest there is) into one run of the next,
    numbered above all; tombstones kept (older runs and the entries may hold
    their keys). The runs after it, newest first."""
    merged = [r for r in runs if r.level == level]
    rest = [r for r in runs if r.level != level]
    number = runs[0].run + 1
    rows = conn.execute(
        f"INSERT INTO statestream_runs (namespace, run, key, value)"
        f" SELECT :ns, {int(number)}, key, value FROM ({_newest(merged)}) WHERE true",
        {"ns": ns},
    ).rowcount
    deletes = 0
    if any(r.deletes for r in merged):
        (deletes,) = conn.execute(
            "SELECT count(*) FROM statestream_runs WHERE namespace = ? AND run = ?"
            " AND value IS NULL",
            (ns, number),
        ).fetchone()
    _drop_runs(conn, ns, merged)
    run = Run(number, level + 1, rows, deletes)
    conn.execute("INSERT INTO statestream_run_list VALUES (?, ?, ?, ?, ?)", (ns, *run))
    return [run, *rest]


def merge_into_base(conn: sqlite3.Connection, ns: str, runs: list[Run]) -> int:
    """Apply every run of ``ns`` to its entries in one sorted pass (each key's
    newest row: an upsert, or a delete for a tombstone) and drop the runs.
    Returns the tombstones applied (the entries may have shrunk by as many)."""
    if not runs:
        return 0
    newest = _newest(runs)
    # "WHERE true": so that ON CONFLICT is not read as the join's constraint.
    conn.execute(
        "INSERT INTO statestream_entries (namespace, key, value)"
        f" SELECT :ns, key, value FROM ({newest}) WHERE value IS NOT NULL"
        " ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value",
        {"ns": ns},
    )
    deletes = sum(r.deletes for r in runs)
    if deletes:
        conn.execute(
            "DELETE FROM statestream_entries WHERE namespace = :ns AND key IN"
            f" (SELECT key FROM ({newest}) WHERE value IS NULL)",
            {"ns": ns},
        )
    _drop_runs(conn, ns, runs)
    return deletes


def compact_runs(
    conn: sqlite3.Connection, ns: str, runs: list[Run], floor: int
) -> tuple[list[Run], int]:
    """The merges the runs of ``ns`` are due (module doc), in the caller's
    transaction. ``floor``: rows the entries hold at least (a count of them
    that reached its limit, or less). Returns the runs after it, newest first,
    and the new floor."""
    while runs:
        need = sum(r.rows for r in runs) * BASE_SHARE + 1
        if floor < need:
            floor = base_floor(conn, ns, need)
        if floor < need:
            floor -= merge_into_base(conn, ns, runs)
            return [], max(floor, 0)
        level = runs[0].level
        if sum(1 for r in runs if r.level == level) < FANOUT:
            break
        runs = _merge_level(conn, ns, runs, level)
    return runs, floor


# A point read: the newest of a seek into each run and one into the entries.
_LOAD: Final = (
    "SELECT value FROM (SELECT run, value FROM statestream_runs WHERE namespace = :ns"
    " AND run IN (SELECT run FROM statestream_run_list WHERE namespace = :ns) AND key = :key"
    " UNION ALL SELECT -1, value FROM statestream_entries WHERE namespace = :ns AND key = :key)"
    " ORDER BY run DESC LIMIT 1"
)


def load(conn: sqlite3.Connection | sqlite3.Cursor, ns: str, key: bytes) -> bytes | None:
    """The stored value of ``key`` in ``ns`` (runs over entries), None if absent or
    deleted."""
    row = conn.execute(_LOAD, {"ns": ns, "key": key}).fetchone()
    return None if row is None or row[0] is None else bytes(row[0])


_READ_CHUNK: Final = 512


def _read_many_sql(keys: int) -> str:
    marks = ", ".join(["?"] * keys)
    return (
        "SELECT key, value, run FROM statestream_runs WHERE namespace = ? AND run IN"
        " (SELECT run FROM statestream_run_list WHERE namespace = ?)"
        f" AND key IN ({marks})"
    )


_READ_MANY: Final = {1 << bit: _read_many_sql(1 << bit) for bit in range(_READ_CHUNK.bit_length())}


def read_many(
    conn: sqlite3.Connection | sqlite3.Cursor, ns: str, keys: list[bytes]
) -> tuple[dict[bytes, bytes | None], list[bytes]]:
    """The newest run row of each of ``keys`` (sorted) that a run of ``ns`` holds
    (None: a tombstone), and the keys no run holds, in order (for the entries)."""
    newest: dict[bytes, tuple[int, bytes | None]] = {}
    done, left, size = 0, len(keys), _READ_CHUNK
    while left:
        while size > left:
            size >>= 1
        chunk = map(bytearray, keys[done : done + size])
        for key, value, run in conn.execute(_READ_MANY[size], [ns, ns, *chunk]):
            old = newest.get(key)
            if old is None or old[0] < run:
                newest[key] = (run, value)
        done += size
        left -= size
    found = {key: None if value is None else bytes(value) for key, (_, value) in newest.items()}
    return found, [key for key in keys if key not in found]


def stored_page(
    conn: sqlite3.Connection, ns: str, runs: list[Run], after: bytes, limit: int
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """The stored entries of ``ns`` (runs applied over its entries) above ``after``
    in key order, and the last key the page covers (None: every key). A page
    reads up to ``limit`` rows from each run and from the entries; it covers
    the keys up to the smallest last key of those that filled their limit,
    so it may hold more than ``limit`` entries, or fewer (tombstones)."""
    sources = [
        conn.execute(
            "SELECT key, value FROM statestream_entries WHERE namespace = ? AND key > ?"
            " ORDER BY key LIMIT ?",
            (ns, after, limit),
        ).fetchall()
    ]
    for run in reversed(runs):  # oldest first: a later run's row wins
        sources.append(
            conn.execute(
                "SELECT key, value FROM statestream_runs WHERE namespace = ? AND run = ?"
                " AND key > ? ORDER BY key LIMIT ?",
                (ns, run.run, after, limit),
            ).fetchall()
        )
    full = [bytes(rows[-1][0]) for rows in sources if len(rows) == limit]
    end = min(full) if full else None
    merged: dict[bytes, bytes | None] = {}
    for rows in sources:
        for key, value in rows:
            k = bytes(key)
            if end is None or k <= end:
                merged[k] = None if value is None else bytes(value)
    page = [(k, v) for k in sorted(merged) if (v := merged[k]) is not None]
    return page, end
