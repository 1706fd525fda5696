"""The :class:`~statestream.provider.StateBackend` of one namespace in the sqlite file."""

from __future__ import annotations

import sqlite3
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Mapping
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Final

from statestream.provider import (
    CommitOutcome,
    Delta,
    StateCorruptError,
)

from .records import encode_delta, encode_plain_delta, merge_records

if TYPE_CHECKING:
    from .provider import SQLiteStateProvider

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
    # "?1" is the namespace, bound once; each "?" after it takes the next number.
    return (
        "INSERT INTO statestream_entries (namespace, key, value) VALUES "
        + ", ".join(["(?1, ?, ?)"] * rows)
        + " ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value"
    )


# Statements of _CHUNK rows and of every smaller power of two: any count of
# rows is a sum of them, and the connection's statement cache keeps these
# few prepared, where a statement per remainder size would not stay cached.
_UPSERT: Final = {1 << bit: _upsert_sql(1 << bit) for bit in range(_CHUNK.bit_length())}


def _upsert_entries(conn: sqlite3.Connection, ns: str, rows: list[tuple[bytes, bytes]]) -> None:
    """Upsert ``rows`` into the entries of ``ns`` in order, in the caller's transaction."""
    done, left, size = 0, len(rows), _CHUNK
    while left:
        while size > left:
            size >>= 1
        # map() runs bytearray without an interpreted step per value; a
        # statement's rows at a time, not the whole fold's (its copy of
        # every key and value would double the fold's peak memory).
        params: list[Any] = list(map(bytearray, chain.from_iterable(rows[done : done + size])))
        conn.execute(_UPSERT[size], [ns, *params])
        done += size
        left -= size


# When the committed records of a namespace are folded into its entries
# (see the module doc): after this many, or once they hold this many bytes.
# The bytes bound the process's memory too: a point read keeps the unfolded
# records merged (decoded: several times their encoded size), per namespace,
# and a fold decodes them again. With 8 MiB a 20M-key word count peaked at
# 319 MB, with 2 MiB it had reached 174 MB in its first 8 min (issue 34).
_FOLD_RECORDS: Final = 8
_FOLD_BYTES: Final = 1 * _MIB

# The committed txid of a namespace, -1 without one (?1 is the namespace).
_COMMITTED: Final = "coalesce((SELECT committed FROM statestream_txids WHERE namespace = ?1), -1)"


class _SQLiteBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace in the sqlite file.

    Committed state is the namespace's entries with its committed log
    records applied over them in order; the records of the prepared txid
    wait in the log until it commits (or are deleted by a rollback).
    """

    __slots__ = ("_mark", "_ns", "_ordered", "_overlay", "_provider", "_seen")

    def __init__(self, provider: SQLiteStateProvider, namespace: str) -> None:
        self._provider = provider
        self._ns = namespace
        # The committed log records applied (key -> value, None: deleted),
        # for point reads, and what they were read at (see _committed_log).
        self._overlay: dict[bytes, bytes | None] = {}
        self._mark: tuple[int, int, int] | None = None
        # When the merge was last known valid: the connection, its
        # data_version and the provider's count of its own write transactions.
        self._seen: tuple[sqlite3.Connection, int, int] | None = None
        self._ordered: tuple[dict[bytes, bytes | None], list[bytes]] | None = None

    def _committed_log(self, conn: sqlite3.Connection, cached: bool) -> dict[bytes, bytes | None]:
        """The committed log records of the namespace, merged in order.

        ``cached``: reuse the last merge while the committed records are the
        same ones. Nothing can have changed them while no other connection
        committed (``PRAGMA data_version``, a counter sqlite keeps per
        connection) and this provider wrote nothing: that costs one pragma a
        miss instead of the aggregate over the log below (~88,000
        instructions a miss on a large state). Otherwise one query tells
        (same committed txid, count and last sequence number).
        """
        ns = self._ns
        seen: tuple[sqlite3.Connection, int, int] | None = None
        if cached:
            (version,) = conn.execute("PRAGMA data_version").fetchone()
            seen = (conn, version, self._provider._writes)
            old = self._seen
            if old is not None and old[0] is conn and old[1:] == seen[1:]:
                return self._overlay
        committed, count, last = conn.execute(
            f"SELECT c, count(l.seq), coalesce(max(l.seq), 0) FROM (SELECT {_COMMITTED} AS c)"
            " LEFT JOIN statestream_log l ON l.namespace = ?1 AND l.txid <= c",
            (ns,),
        ).fetchone()
        mark = (committed, count, last)
        if cached and mark == self._mark:
            return self._overlay
        merged: dict[bytes, bytes | None] = {}
        if count:
            merged = self._merge(
                row[0]
                for row in conn.execute(
                    "SELECT delta FROM statestream_log WHERE namespace = ? AND txid <= ?"
                    " ORDER BY seq",
                    (ns, committed),
                ).fetchall()
            )
        if cached:
            self._overlay, self._mark, self._seen = merged, mark, seen
        return merged

    def forget(self) -> None:
        """Drop the kept merge: the next read merges the committed log again."""
        self._overlay, self._mark, self._seen, self._ordered = {}, None, None, None

    def _merge(self, records: Iterable[bytes]) -> dict[bytes, bytes | None]:
        try:
            return merge_records(records)
        except ValueError as exc:
            raise StateCorruptError(
                f"sqlite state database {str(self._provider.path)!r}: a log record of "
                f"namespace {self._ns!r} cannot be read ({exc}); restore the file from a "
                "backup or move it aside"
            ) from exc

    def load(self, key: bytes) -> bytes | None:
        with self._provider._use() as conn:
            overlay = self._committed_log(conn, cached=True)
            if key in overlay:
                return overlay[key]
            row = conn.execute(
                "SELECT value FROM statestream_entries WHERE namespace = ? AND key = ?",
                (self._ns, key),
            ).fetchone()
        return None if row is None else bytes(row[0])

    def has_entries(self) -> bool:
        """Whether anything is committed, the log applied; the merge is kept
        for the reads that follow, and no key is sorted."""
        with self._provider._use() as conn:
            overlay = self._committed_log(conn, cached=True)
            if any(value is not None for value in overlay.values()):
                return True
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
        with self._provider._use() as conn:
            overlay = self._committed_log(conn, cached=True)
            rows = conn.execute(
                "SELECT key, value FROM statestream_entries"
                " WHERE namespace = ? AND key > ? ORDER BY key LIMIT ?",
                (self._ns, b"" if after is None else after, limit),
            ).fetchall()
        # Every stored key is non-empty, so greater than b"". The page covers
        # the keys up to its last row's, or every key once the rows ran out.
        end: bytes | None = bytes(rows[-1][0]) if len(rows) == limit else None
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
        with self._provider._use() as conn:
            row = conn.execute(
                "SELECT committed, prepared FROM statestream_txids WHERE namespace = ?",
                (self._ns,),
            ).fetchone()
        return (-1, None) if row is None else (int(row[0]), row[1])

    def write_prepared(self, txid: int, delta: Delta) -> None:
        self._write_record(txid, encode_delta(delta) if delta else None)

    def _write_record(self, txid: int, record: bytes | None) -> None:
        ns = self._ns
        with self._provider._transaction() as conn:
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

    def write_prepared_plain(self, txid: int, plain: Mapping[str, Any], delta: Delta) -> int:
        record = encode_plain_delta(plain, delta)
        self._write_record(txid, record)
        return len(record)  # the state's prepared_bytes

    def apply_prepared(self, txid: int) -> CommitOutcome:
        ns = self._ns
        with self._provider._transaction() as conn:
            row = conn.execute(
                "SELECT committed, prepared FROM statestream_txids WHERE namespace = ?", (ns,)
            ).fetchone()
            committed, prepared = (-1, None) if row is None else row
            if txid <= committed:
                return CommitOutcome.ALREADY_COMMITTED
            if prepared != txid:
                return CommitOutcome.NOT_PREPARED
            # The prepared records become committed by the txid alone: the
            # commit writes one row whatever the size of the delta.
            conn.execute(
                "UPDATE statestream_txids SET committed = ?, prepared = NULL WHERE namespace = ?",
                (txid, ns),
            )
            self._fold(conn, txid, force=False)
        return CommitOutcome.APPLIED

    def commit_direct(self, delta: Delta) -> None:
        ns = self._ns
        if not delta:
            return
        with self._provider._transaction() as conn:
            # Logged as committed at the current txid, so that it applies
            # after every record committed before it.
            (committed,) = conn.execute(f"SELECT {_COMMITTED}", (ns,)).fetchone()
            conn.execute(
                "INSERT INTO statestream_log (namespace, txid, delta) VALUES (?, ?, ?)",
                (ns, committed, encode_delta(delta)),
            )
            self._fold(conn, committed, force=False)

    def _fold(self, conn: sqlite3.Connection, committed: int, *, force: bool) -> None:
        """Fold the committed log records into the entries once there are enough of them
        (``force``: if there are any).

        Only records before the first uncommitted one are folded, so that
        records are always applied in the order they were written. A key
        changed by several records is written once.
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
            return
        # The kept merge of these records is stale once they are folded:
        # dropped before they are merged again, not held beside that merge.
        self.forget()
        merged = self._merge(
            row[0]
            for row in conn.execute(
                "SELECT delta FROM statestream_log WHERE namespace = ? AND seq <= ? ORDER BY seq",
                (ns, last),
            ).fetchall()
        )
        live = sorted((k, v) for k, v in merged.items() if v is not None)
        if live:
            _upsert_entries(conn, ns, live)
        conn.executemany(
            "DELETE FROM statestream_entries WHERE namespace = ? AND key = ?",
            [(ns, bytearray(k)) for k, v in merged.items() if v is None],
        )
        conn.execute("DELETE FROM statestream_log WHERE namespace = ? AND seq <= ?", (ns, last))

    def fold(self) -> None:
        """Fold every committed log record of the namespace into its entries now."""
        with self._provider._transaction() as conn:
            (committed,) = conn.execute(f"SELECT {_COMMITTED}", (self._ns,)).fetchone()
            self._fold(conn, committed, force=True)

    def discard_prepared(self) -> None:
        with self._provider._transaction() as conn:
            conn.execute(
                f"DELETE FROM statestream_log WHERE namespace = ?1 AND txid > {_COMMITTED}",
                (self._ns,),
            )
            conn.execute(
                "UPDATE statestream_txids SET prepared = NULL WHERE namespace = ?", (self._ns,)
            )
