"""The :class:`~statestream.provider.StateBackend` of one namespace in the sqlite file."""

from __future__ import annotations

import sqlite3
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, filterfalse
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final

from statestream.provider import (
    CommitOutcome,
    Delta,
    StateCorruptError,
)

from . import runs as sorted_runs
from .records import encode_delta, encode_plain_delta, merge_records
from .runs import (
    Run,
    base_floor,
    compact_runs,
    list_runs,
    merge_into_base,
    read_many,
    stored_page,
    write_run,
)
from .runs import load as load_stored

if TYPE_CHECKING:
    from .database import SQLiteDatabase

_MIB: Final = 1024 * 1024
_SCAN_PAGE: Final = 1024

# What a written row costs. Binding each row through executemany costs one
# statement step in Python per row, and Python's sqlite3 (3.11) runs its
# adaptation step on every ``bytes`` it binds (a look-up of the adapters,
# then of ``__adapt__`` and ``__conform__``, each building an AttributeError:
# ~3,300 instructions a value), but never on a ``bytearray``, which it binds
# as the same BLOB. So the rows of a fold go in as bytearrays, _CHUNK
# rows per multi-row INSERT. Stored bytes, and what reads return, are the
# same; a process that registered adapters of its own is not touched.
_CHUNK: Final = 256  # 513 parameters a statement, within sqlite's old limit of 999


def _upsert_sql(rows: int) -> str:
    # The namespace bound once, as the statement's first "?" (a numbered "?1"
    # bound from a sequence is deprecated since Python 3.12, an error from 3.14;
    # binding it again a row costs 13% more instructions a row). "WHERE true"
    # keeps ON CONFLICT from being read as a join's constraint.
    return (
        "INSERT INTO statestream_entries (namespace, key, value) SELECT ?, column1, column2 "
        "FROM (VALUES " + ", ".join(["(?, ?)"] * rows) + ") WHERE true"
        " ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value"
    )


# Statements of _CHUNK rows and of every smaller power of two: any count of
# rows is a sum of them, and the connection's statement cache keeps these
# few prepared, where a statement per remainder size would not stay cached.
_UPSERT: Final = {1 << bit: _upsert_sql(1 << bit) for bit in range(_CHUNK.bit_length())}


def _upsert_entries(
    conn: sqlite3.Connection, ns: str, keys: list[bytes], values: Mapping[bytes, bytes | None]
) -> None:
    """Upsert ``keys`` (in order) with their ``values`` into the entries of ``ns``, in
    the caller's transaction."""
    done, left, size = 0, len(keys), _CHUNK
    while left:
        while size > left:
            size >>= 1
        # A statement's rows at a time, not the whole fold's (its copy of
        # every key and value would double the fold's peak memory); the keys
        # sorted alone, not (key, value) tuples: a tuple compare a step costs
        # more than the bytes compare under it.
        chunk = keys[done : done + size]
        # map() runs bytearray without an interpreted step per value.
        rows = chain.from_iterable(zip(chunk, map(values.__getitem__, chunk), strict=True))
        conn.execute(_UPSERT[size], [ns, *map(bytearray, rows)])  # type: ignore[arg-type]
        done += size
        left -= size


# When the committed records of a namespace are folded into its entries
# (see the module doc): after this many, or once they hold this many bytes.
# The bytes bound the process's memory too: a point read keeps the unfolded
# records merged (decoded: several times their encoded size), per namespace,
# which the fold writes (or merges them, if no read did). With 8 MiB a 20M-key word count peaked at
# 319 MB, with 2 MiB it had reached 174 MB in its first 8 min (issue 34).
_FOLD_RECORDS: Final = 8
_FOLD_BYTES: Final = 1 * _MIB

# A point read of the folded entries.
_SELECT: Final = "SELECT value FROM statestream_entries WHERE namespace = ? AND key = ?"

# Point reads of many keys, one statement a chunk: each "?" a key, the last the
# namespace; sized as _UPSERT is, so the statement cache keeps them. The keys are
# rows of a VALUES list that the CROSS JOIN walks in their (sorted) order, a seek
# each: "key IN (...)" first builds a temporary index of the list, 11% more
# instructions a key read (callgrind, 512 random keys of 380k, sqlite 3.40).
_READ_CHUNK: Final = 512


def _select_many_sql(keys: int) -> str:
    rows = ", ".join(["(?)"] * keys)
    return (
        f"SELECT e.key, e.value FROM (VALUES {rows}) AS v CROSS JOIN statestream_entries AS e"
        " WHERE e.namespace = ? AND e.key = v.column1"
    )


_SELECT_MANY: Final = {
    1 << bit: _select_many_sql(1 << bit) for bit in range(_READ_CHUNK.bit_length())
}


def _select_entries(
    conn: sqlite3.Cursor | sqlite3.Connection, ns: str, keys: list[bytes]
) -> dict[bytes, bytes]:
    """The folded entries of ``keys`` in ``ns`` that exist: a statement a chunk of keys
    (sorted, so each chunk's seeks move forward through the B-tree)."""
    found: dict[bytes, bytes] = {}
    done, left, size = 0, len(keys), _READ_CHUNK
    while left:
        while size > left:
            size >>= 1
        # bytearrays: bound without the adaptation step a bytes pays (see _CHUNK).
        bound: list[object] = [*map(bytearray, keys[done : done + size]), ns]
        found.update(conn.execute(_SELECT_MANY[size], bound))  # BLOBs read as bytes
        done += size
        left -= size
    return found


# The committed txid of a namespace, -1 without one (its "?" is the namespace).
_COMMITTED: Final = "coalesce((SELECT committed FROM statestream_txids WHERE namespace = ?), -1)"


#: The kept merge of a namespace's committed log records (see _SQLiteBackend):
#: the merged part, the records not merged into it yet (in order), and the
#: mark (committed txid, count and last seq of the committed records).
_Kept = tuple[dict[bytes, bytes | None], list[bytes], tuple[int, int, int]]


class _SQLiteBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace in the sqlite file.

    Committed state is the namespace's entries with its committed log
    records applied over them in order; the records of the prepared txid
    wait in the log until it commits (or are deleted by a rollback).

    The committed records' merge is kept for point reads (see
    :meth:`_committed_log`), merged lazily: a record committed here joins
    the records waiting to be merged, which the next read merges, or a fold
    writes without a read ever merging them (a small state, whose reads are
    all in its state's cache, never merges one). A backend that committed
    the namespace itself keeps that merge current at each of its commits
    and then trusts it without asking the store, until a write of the
    namespace through another object here or :meth:`forget`: the
    namespace's state object already assumes it is the namespace's only
    writer (a task's namespace has one task; Spark, which writes a
    namespace from several processes in turn, forgets both before each
    use), and this merge is what that writer committed.
    """

    __slots__ = (
        "_ceiling",
        "_db",
        "_floor",
        "_mark",
        "_ns",
        "_ordered",
        "_overlay",
        "_runs",
        "_seen",
        "_unmerged",
    )

    def __init__(self, db: SQLiteDatabase, namespace: str) -> None:
        # The file, not the provider: the connection, its lock, transactions
        # and the count of writes are all a backend uses.
        self._db = db
        self._ns = namespace
        # The committed log records applied (key -> value, None: deleted),
        # for point reads, the records still to apply over it, and what they
        # were read at (see _check).
        self._overlay: dict[bytes, bytes | None] = {}
        self._unmerged: list[bytes] = []
        self._mark: tuple[int, int, int] | None = None
        # When the merge was last known current: the connection, its
        # data_version (None: this backend's own commit made it current, see
        # the class doc) and the provider's count of write transactions of
        # the namespace.
        self._seen: tuple[sqlite3.Connection, int | None, int] | None = None
        self._ordered: tuple[dict[bytes, bytes | None], list[bytes]] | None = None
        # The namespace's sorted runs (see runs.py), newest first, kept as the
        # merge is (None: not known, read when needed), and the rows its
        # entries hold at least (a count that reached its limit: a hint of
        # size for choosing where a fold goes, never needed for correctness).
        self._runs: list[Run] | None = None
        self._floor = 0
        # The rows its entries hold at most (None: not known): an exact count
        # plus the keys upserted since, so that a fold of a growing namespace
        # counts its entries only once they may be DENSE times the fold (the
        # count reads up to 2 * DENSE times its keys' rows: it was 1.2% of the
        # 781k-word count's CPU, counted at every fold). A hint, as the floor.
        self._ceiling: int | None = None

    def _committed_log(self, conn: sqlite3.Connection) -> dict[bytes, bytes | None]:
        """The committed log records of the namespace, merged in order (kept: see _check)."""
        self._check(conn)
        if self._unmerged:
            self._merge_waiting()
        return self._overlay

    def _merge_waiting(self) -> None:
        """Apply the records waiting to be merged to the kept merge (a record's
        entries over the merge of those before it is the merge of all)."""
        merged = self._merge(self._unmerged)
        if self._overlay:
            self._overlay.update(merged)
        else:
            self._overlay = merged
        self._unmerged, self._ordered = [], None

    def _check(self, conn: sqlite3.Connection) -> None:
        """Make the kept merge current: reused while the committed records are the
        same ones, else read again (merged when a read needs it).

        A merge this backend's own commit left is current while nothing else
        here wrote the namespace (the class doc): no statement. Otherwise
        nothing can have changed the records while no other connection
        committed (``PRAGMA data_version``, a counter sqlite keeps per
        connection) and nothing here wrote the namespace: one pragma instead
        of the aggregate over the log below (~88,000 instructions a miss on a
        large state). Otherwise one query tells (same committed txid, count
        and last sequence number).
        """
        if self._trusted(conn):
            return
        writes = self._db.writes.get(self._ns, 0)
        old = self._seen
        (version,) = conn.execute("PRAGMA data_version").fetchone()
        seen = (conn, version, writes)
        if old is not None and old[0] is conn and old[1:] == seen[1:]:
            return
        mark = self._mark_now(conn)
        self._runs = None  # a merge of runs changes no mark: read the list again
        self._ceiling = None  # another writer may have added entries
        if mark != self._mark:
            committed, count, _ = mark
            records: list[bytes] = []
            if count:
                records = [
                    row[0]
                    for row in conn.execute(
                        "SELECT delta FROM statestream_log WHERE namespace = ? AND txid <= ?"
                        " ORDER BY seq",
                        (self._ns, committed),
                    ).fetchall()
                ]
            self._overlay, self._unmerged, self._ordered = {}, records, None
        self._mark, self._seen = mark, seen

    def _trusted(self, conn: sqlite3.Connection | None) -> bool:
        """Whether the kept merge is one this backend's own commit left on ``conn`` and
        nothing else here wrote the namespace since (the class doc): current, no
        statement needed."""
        seen = self._seen
        return (
            seen is not None
            and seen[0] is conn
            and seen[1] is None
            and seen[2] == self._db.writes.get(self._ns, 0)
        )

    def _mark_now(self, conn: sqlite3.Connection) -> tuple[int, int, int]:
        """The namespace's committed txid, and the count and last seq of its committed records."""
        committed, count, last = conn.execute(
            f"SELECT c, count(l.seq), coalesce(max(l.seq), 0) FROM (SELECT {_COMMITTED} AS c)"
            " LEFT JOIN statestream_log l ON l.namespace = ? AND l.txid <= c",
            (self._ns, self._ns),
        ).fetchone()
        return committed, count, last

    def _current(self, conn: sqlite3.Connection) -> tuple[_Kept, list[Run] | None]:
        """The kept merge, made current if it was not, and the runs if known, taken
        away from the backend for the caller's write transaction to extend: if
        that fails, the next read reads the log afresh. Inside the write
        transaction."""
        self._check(conn)
        assert self._mark is not None  # set by _check
        kept = (self._overlay, self._unmerged, self._mark)
        runs = self._runs
        self._drop_kept()
        return kept, runs

    def _keep(
        self, conn: sqlite3.Connection, kept: _Kept | None, writes: int, runs: list[Run] | None
    ) -> None:
        """Keep ``kept`` and ``runs``, current as this backend's own write transaction
        left them, and trust them while the namespace's count of writes is the
        one that transaction made (``writes``: the count before it, plus one).
        Nothing if ``kept`` is None (not known)."""
        if kept is not None and self._db.writes.get(self._ns, 0) == writes:
            self._overlay, self._unmerged, self._mark = kept
            self._seen, self._ordered, self._runs = (conn, None, writes), None, runs

    def _drop_kept(self) -> None:
        self._overlay, self._unmerged, self._mark, self._seen = {}, [], None, None
        self._ordered = self._runs = None

    def forget(self) -> None:
        """Drop the kept merge and what is known of the namespace's runs and size:
        the next read merges the committed log again."""
        self._drop_kept()
        self._floor, self._ceiling = 0, None

    def _run_list(self, conn: sqlite3.Connection | sqlite3.Cursor) -> list[Run]:
        """The namespace's runs, newest first (kept; read if not known). After _check."""
        runs = self._runs
        if runs is None:
            runs = self._runs = list_runs(conn, self._ns)
        return runs

    def _merge(self, records: Iterable[bytes]) -> dict[bytes, bytes | None]:
        try:
            return merge_records(records)
        except ValueError as exc:
            raise StateCorruptError(
                f"sqlite state database {str(self._db.path)!r}: a log record of "
                f"namespace {self._ns!r} cannot be read ({exc}); restore the file from a "
                "backup or move it aside"
            ) from exc

    def load(self, key: bytes) -> bytes | None:
        db = self._db
        with db.lock:
            # The path of a miss in a run (issue 34: ~850,000 a run of the
            # large word count): a merge this backend keeps current, the
            # connection's cursor, no context manager.
            reader = db.reader()
            if reader is not None and self._trusted(db.conn):
                if self._unmerged:
                    self._merge_waiting()
                overlay = self._overlay
                if key in overlay:
                    return overlay[key]
                try:
                    runs = self._runs
                    if runs is None:
                        runs = self._run_list(reader)
                    if runs:
                        return load_stored(reader, self._ns, key)
                    row = reader.execute(_SELECT, (self._ns, key)).fetchone()
                except sqlite3.DatabaseError as exc:
                    raise db.error(exc) from exc
                return None if row is None else bytes(row[0])
        with db.use() as conn:
            overlay = self._committed_log(conn)
            if key in overlay:
                return overlay[key]
            if self._run_list(conn):
                return load_stored(conn, self._ns, key)
            row = conn.execute(_SELECT, (self._ns, key)).fetchone()
        return None if row is None else bytes(row[0])

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The committed values of ``keys`` (the log's merge over the entries): the
        keys the merge lacks in statements of up to 512 keys, in key order."""
        db = self._db
        with db.lock:
            reader = db.reader()
            if reader is not None and self._trusted(db.conn):  # as in load
                if self._unmerged:
                    self._merge_waiting()
                try:
                    return self._read_many(reader, keys)
                except sqlite3.DatabaseError as exc:
                    raise db.error(exc) from exc
        with db.use() as conn:
            self._committed_log(conn)
            return self._read_many(conn, keys)

    def _read_many(
        self, conn: sqlite3.Cursor | sqlite3.Connection, keys: Sequence[bytes]
    ) -> list[bytes | None]:
        overlay = self._overlay
        # C loops, no interpreted step a key (0.3 keys a word of the 781k-word
        # count come here): the log's merge answers the keys it holds.
        stored = sorted(filterfalse(overlay.__contains__, keys))
        logged = len(stored) < len(keys)  # some keys are the log's
        found: dict[bytes, bytes | None] = {}
        if stored and self._run_list(conn):
            # Keys a run holds (tombstones among them), then the others' entries.
            found, stored = read_many(conn, self._ns, stored)
        if stored:
            found.update(_select_entries(conn, self._ns, stored))
        if logged:
            hits = list(filter(overlay.__contains__, keys))
            found.update(zip(hits, map(overlay.__getitem__, hits), strict=True))
        return list(map(found.get, keys))

    def has_entries(self) -> bool:
        """Whether anything is committed, the log applied; the merge is kept
        for the reads that follow, and no key is sorted."""
        with self._db.use() as conn:
            overlay = self._committed_log(conn)
            if any(value is not None for value in overlay.values()):
                return True
            runs = bool(self._run_list(conn))
        if runs:  # tombstones may hide entries: a page at a time
            after: bytes | None = None
            while True:
                page, after = self.scan_page(after, _SCAN_PAGE)
                if page:
                    return True
                if after is None:
                    return False
        with self._db.use() as conn:
            rows = conn.execute(
                "SELECT key FROM statestream_entries WHERE namespace = ?", (self._ns,)
            )
            return any(bytes(key) not in overlay for (key,) in rows)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        after: bytes | None = None
        while True:
            page, after = self.scan_page(after, _SCAN_PAGE)
            yield from page
            if after is None:
                return

    def scan_page(
        self, after: bytes | None, limit: int
    ) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
        """Up to ``limit`` entries by key above ``after``, in key order: the entries
        table's, with the committed log records applied (their merge is kept,
        see _committed_log, so a state read in pages merges the log once).
        Each page is its own short read, so the lock is not held while the
        caller iterates and memory stays bounded."""
        end: bytes | None
        with self._db.use() as conn:
            overlay = self._committed_log(conn)
            # Every stored key is non-empty, so greater than b"".
            if self._run_list(conn):
                page, end = stored_page(
                    conn, self._ns, self._run_list(conn), b"" if after is None else after, limit
                )
            else:
                rows = conn.execute(
                    "SELECT key, value FROM statestream_entries"
                    " WHERE namespace = ? AND key > ? ORDER BY key LIMIT ?",
                    (self._ns, b"" if after is None else after, limit),
                ).fetchall()
                # The page covers the keys up to its last row's, or every key
                # once the rows ran out.
                end = bytes(rows[-1][0]) if len(rows) == limit else None
                page = [(bytes(k), bytes(v)) for k, v in rows]
        if overlay:
            ordered = self._overlay_keys(overlay)
            low = 0 if after is None else bisect_right(ordered, after)
            high = len(ordered) if end is None else bisect_right(ordered, end)
            if page:
                page = [row for row in page if row[0] not in overlay]
            logged = [(k, v) for k in ordered[low:high] if (v := overlay[k]) is not None]
            if not page:
                return logged, end  # in key order already: no sort (a small hot state)
            page += logged
            # Two sorted runs: one merge by the key alone (comparing the
            # (key, value) tuples costs a tuple compare per step).
            page.sort(key=itemgetter(0))
        return page, end

    def _overlay_keys(self, overlay: dict[bytes, bytes | None]) -> list[bytes]:
        """The keys of the committed log's merge, sorted (kept with the merge)."""
        if self._ordered is None or self._ordered[0] is not overlay:
            self._ordered = (overlay, sorted(overlay))
        return self._ordered[1]

    def load_txids(self) -> tuple[int, int | None]:
        with self._db.use() as conn:
            row = conn.execute(
                "SELECT committed, prepared FROM statestream_txids WHERE namespace = ?",
                (self._ns,),
            ).fetchone()
        return (-1, None) if row is None else (int(row[0]), row[1])

    def write_prepared(self, txid: int, delta: Delta) -> None:
        self._write_record(txid, encode_delta(delta) if delta else None)

    def _write_record(self, txid: int, record: bytes | None) -> None:
        ns = self._ns
        before = self._db.writes.get(ns, 0)
        with self._db.transaction(ns) as conn:
            if record is not None:
                conn.execute(
                    "INSERT INTO statestream_log (namespace, txid, delta) VALUES (?, ?, ?)",
                    (ns, txid, record),
                )
            conn.execute(
                "INSERT INTO statestream_txids (namespace, prepared) VALUES (?, ?)"
                " ON CONFLICT (namespace) DO UPDATE SET prepared = excluded.prepared",
                (ns, txid),
            )
        self._unchanged(before)

    def _unchanged(self, before: int) -> None:
        """After a write transaction of this backend that left the committed records
        as they were (a prepare, a rollback): a merge known current before it
        (``before``: the namespace's count of writes then) stays current."""
        seen = self._seen
        if (
            seen is not None
            and seen[2] == before
            and self._db.writes.get(self._ns, 0) == before + 1
        ):
            self._seen = (seen[0], seen[1], before + 1)

    def write_prepared_plain(self, txid: int, plain: Mapping[str, Any], delta: Delta) -> int:
        record = encode_plain_delta(plain, delta)
        self._write_record(txid, record)
        return len(record)  # the state's prepared_bytes

    def apply_prepared(self, txid: int) -> CommitOutcome:
        ns = self._ns
        before = self._db.writes.get(ns, 0)
        with self._db.transaction(ns) as conn:
            row = conn.execute(
                "SELECT committed, prepared FROM statestream_txids WHERE namespace = ?", (ns,)
            ).fetchone()
            committed, prepared = (-1, None) if row is None else row
            if txid <= committed:
                return CommitOutcome.ALREADY_COMMITTED
            if prepared != txid:
                return CommitOutcome.NOT_PREPARED
            (overlay, unmerged, mark), runs = self._current(conn)
            # The prepared records become committed by the txid alone: the
            # commit writes one row whatever the size of the delta.
            conn.execute(
                "UPDATE statestream_txids SET committed = ?, prepared = NULL WHERE namespace = ?",
                (txid, ns),
            )
            # They wait in the kept merge for a read or the fold to merge them.
            rows = conn.execute(
                "SELECT seq, delta FROM statestream_log WHERE namespace = ? AND txid > ?"
                " AND txid <= ? ORDER BY seq",
                (ns, committed, txid),
            ).fetchall()
            unmerged.extend(row[1] for row in rows)
            last = max(mark[2], rows[-1][0]) if rows else mark[2]
            kept, runs, wrote = self._fold(
                conn, txid, (overlay, unmerged, (txid, mark[1] + len(rows), last)), runs
            )
        self._keep(conn, kept, before + 1, runs)
        if wrote:
            self._compact(before + 1)
        return CommitOutcome.APPLIED

    def commit_direct(self, delta: Delta) -> None:
        ns = self._ns
        if not delta:
            return
        before = self._db.writes.get(ns, 0)
        record = encode_delta(delta)
        with self._db.transaction(ns) as conn:
            (overlay, unmerged, (committed, count, _)), runs = self._current(conn)
            # Logged as committed at the current txid, so that it applies
            # after every record committed before it.
            seq = conn.execute(
                "INSERT INTO statestream_log (namespace, txid, delta) VALUES (?, ?, ?)",
                (ns, committed, record),
            ).lastrowid
            assert seq is not None  # set by every INSERT
            unmerged.append(record)
            kept, runs, wrote = self._fold(
                conn, committed, (overlay, unmerged, (committed, count + 1, seq)), runs
            )
        self._keep(conn, kept, before + 1, runs)
        if wrote:
            self._compact(before + 1)

    def _fold(
        self,
        conn: sqlite3.Connection,
        committed: int,
        kept: _Kept,
        runs: list[Run] | None,
        *,
        force: bool = False,
    ) -> tuple[_Kept | None, list[Run] | None, bool]:
        """Fold the committed log records once there are enough of them (``force``:
        if there are any): into the entries while the namespace has no run and
        its entries are few beside the fold's keys, else as a new run (see
        runs.py). ``kept``: the kept merge of every committed record, current;
        ``runs``: the namespace's runs if known.

        Only records before the first uncommitted one are folded, so that
        records are always applied in the order they were written. A key
        changed by several records is written once. Returns the kept merge
        of the committed records left in the log (None when not known), the
        runs (None when not known) and whether a run was written (then
        merges may be due: :meth:`_compact`).
        """
        ns = self._ns
        rows = conn.execute(
            "SELECT seq, txid, length(delta) FROM statestream_log WHERE namespace = ? ORDER BY seq",
            (ns,),
        ).fetchall()
        last = 0
        count = size = 0
        for seq, txid, length in rows:
            if txid > committed:
                break
            last, count, size = seq, count + 1, size + length
        if not count or (not force and count < _FOLD_RECORDS and size < _FOLD_BYTES):
            return kept, runs, False
        if runs is None:
            runs = list_runs(conn, ns)
        if runs and not force and count < sorted_runs.RUN_RECORDS and size < _FOLD_BYTES:
            return kept, runs, False  # a large state: fewer, larger runs
        overlay, unmerged, (_, kept_count, _) = kept
        del kept
        # Every committed record is folded unless one comes after an
        # uncommitted one (then only those before it, in order: read again).
        whole = count == kept_count
        if not whole:
            overlay, unmerged = {}, []  # dropped first, not held beside a new merge
            merged = self._merge(
                row[0]
                for row in conn.execute(
                    "SELECT delta FROM statestream_log WHERE namespace = ? AND seq <= ?"
                    " ORDER BY seq",
                    (ns, last),
                ).fetchall()
            )
        elif not overlay:
            merged = self._merge(unmerged)  # as a read of the records would
        else:
            merged = overlay
            if unmerged:
                merged.update(self._merge(unmerged))
        del overlay, unmerged
        wrote = bool(runs) or self._large(conn, len(merged))
        if wrote:
            runs = write_run(conn, ns, runs, sorted(merged), merged)
        else:
            # A fold without deletions (a counter's) sorts its keys in C, with no
            # interpreted step a key.
            deletes = None in merged.values()
            live = (
                sorted(k for k, v in merged.items() if v is not None) if deletes else sorted(merged)
            )
            if live:
                _upsert_entries(conn, ns, live, merged)
                if self._ceiling is not None:
                    self._ceiling += len(live)
            deleted = (
                [(ns, bytearray(k)) for k, v in merged.items() if v is None] if deletes else []
            )
            if deleted:
                conn.executemany(
                    "DELETE FROM statestream_entries WHERE namespace = ? AND key = ?", deleted
                )
                self._floor = max(self._floor - len(deleted), 0)
        conn.execute("DELETE FROM statestream_log WHERE namespace = ? AND seq <= ?", (ns, last))
        return (({}, [], (committed, 0, 0)) if whole else None), runs, wrote

    def _large(self, conn: sqlite3.Connection, keys: int) -> bool:
        """Whether the entries hold at least DENSE times ``keys`` rows (counted only
        while the floor known from an earlier count is lower)."""
        need = keys * sorted_runs.DENSE
        if self._floor < need and (self._ceiling is None or self._ceiling >= need):
            self._floor = base_floor(conn, self._ns, need)
            # A count under its limit (2 * need) is every row: exact.
            self._ceiling = self._floor if self._floor < 2 * need else None
        return self._floor >= need

    def _compact(self, writes: int, *, base: bool = False) -> None:
        """The merges of runs that are due (``base``: every run into the entries), in a
        transaction of their own after the one that wrote the run: a kill in it
        leaves the runs as they were, for the next fold. ``writes``: the
        namespace's count of writes after that transaction. The committed state
        and the log stay as they were, so a kept merge stays current."""
        ns = self._ns
        self._ceiling = None  # runs merged into the entries add rows to them
        with self._db.transaction(ns) as conn:
            runs = list_runs(conn, ns)
            if base:
                merge_into_base(conn, ns, runs)
                runs = []
            else:
                runs, self._floor = compact_runs(conn, ns, runs, self._floor)
        self._unchanged(writes)
        self._runs = runs

    def fold(self) -> None:
        """Fold every committed log record and every run of the namespace into its
        entries now."""
        ns = self._ns
        before = self._db.writes.get(ns, 0)
        with self._db.transaction(ns) as conn:
            kept, runs = self._current(conn)
            folded, runs, _ = self._fold(conn, kept[2][0], kept, runs, force=True)
        self._keep(conn, folded, before + 1, runs)
        self._compact(before + 1, base=True)

    def discard_prepared(self) -> None:
        before = self._db.writes.get(self._ns, 0)
        with self._db.transaction(self._ns) as conn:
            conn.execute(
                f"DELETE FROM statestream_log WHERE namespace = ? AND txid > {_COMMITTED}",
                (self._ns, self._ns),
            )
            conn.execute(
                "UPDATE statestream_txids SET prepared = NULL WHERE namespace = ?", (self._ns,)
            )
        self._unchanged(before)
