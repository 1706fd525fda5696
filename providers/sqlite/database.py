"""The sqlite file as one provider's process sees it: the connection, the schema,
the write transactions and the translation of sqlite's errors.

What a namespace's :class:`~.backend._SQLiteBackend` needs of its provider and
nothing more: the backends are built with this object, never with the
provider, so what they may touch is this class's public names.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from statestream.provider import (
    ProviderUnavailableError,
    StateCorruptError,
    StateError,
    StoreUnwritableError,
)

from .claims import _cannot_write
from .records import encode_delta
from .runs import RUNS_SCHEMA

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SQLiteDatabase"]

APPLICATION_ID: Final = 0x53537374  # "SSst": marks a file as ours
SCHEMA_VERSION: Final = 3
_MIB: Final = 1024 * 1024

_SCHEMA: Final = {
    "statestream_entries": (
        "CREATE TABLE statestream_entries ("
        " namespace TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL,"
        " PRIMARY KEY (namespace, key)) WITHOUT ROWID",
        ("namespace", "key", "value"),
    ),
    "statestream_log": (
        "CREATE TABLE statestream_log ("
        " seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL, txid INTEGER NOT NULL,"
        " delta BLOB NOT NULL)",
        ("seq", "namespace", "txid", "delta"),
    ),
    "statestream_txids": (
        "CREATE TABLE statestream_txids ("
        " namespace TEXT NOT NULL PRIMARY KEY, committed INTEGER NOT NULL DEFAULT -1,"
        " prepared INTEGER) WITHOUT ROWID",
        ("namespace", "committed", "prepared"),
    ),
    # Schema 3: the sorted runs of large namespaces (runs.py).
    **RUNS_SCHEMA,
}
_LOG_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS statestream_log_namespace ON statestream_log (namespace, txid)"
)

# Connections inherited through fork() are parked here, never closed nor
# collected: closing the parent's connection from the child can release
# locks and corrupt state that the parent still relies on (sqlite's "how to
# corrupt" guide, section 2.6).
_INHERITED: list[sqlite3.Connection] = []


class SQLiteDatabase:
    """One provider's use of its sqlite file in this process: one connection, opened
    (and checked) on first use and again in a forked child, serialised by
    :attr:`lock` because the local runtime may drive several tasks from
    threads. Pickles as its configuration only.

    Read-only outside this class: :attr:`path`, :attr:`lock`, :attr:`conn`
    (the connection while open in some process, else None; compare with
    ``is``) and :attr:`writes`.
    """

    def __init__(
        self,
        path: Path,
        *,
        synchronous: str,
        timeout_s: float,
        cache_mb: int,
        checkpoint_mb: int,
        page_size: int,
    ) -> None:
        self.path = path
        self._synchronous = synchronous
        self._timeout_s = timeout_s
        self._cache_mb = cache_mb
        self._checkpoint_mb = checkpoint_mb
        self._page_size = page_size
        self.lock = threading.RLock()
        self.conn: sqlite3.Connection | None = None
        # The connection's cursor for point reads (one cursor reused: a miss
        # makes no cursor object), and the process that opened the connection.
        self._reader: sqlite3.Cursor | None = None
        self._pid = 0
        self._closed = False
        #: Write transactions of this provider so far, per namespace written:
        #: sqlite's data_version counts only other connections' commits, so a
        #: backend's kept merge of the committed log checks both (see
        #: _SQLiteBackend._check). A dict rather than a method: a point read
        #: asks it on every miss.
        self.writes: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Ship the configuration, never the connection or the lock.
        state = self.__dict__.copy()
        state.update(conn=None, _reader=None, _pid=0, lock=None, writes={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    def connection(self) -> sqlite3.Connection:
        """The connection of this process, opened (and checked) on first use. Lock held."""
        if self._closed:
            raise StateError("the sqlite state provider is closed; open a new one")
        if self.conn is not None:
            if self._pid == os.getpid():
                return self.conn
            _INHERITED.append(self.conn)  # forked: leave the parent's alone
            self.conn = self._reader = None
        self.conn = self._open()
        self._reader = self.conn.cursor()
        self._pid = os.getpid()
        return self.conn

    def _open(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False
            )
        except (OSError, sqlite3.Error) as exc:
            raise ProviderUnavailableError(
                f"cannot open the sqlite state database {str(self.path)!r}: {exc}; "
                "check that the directory exists and is writable, or set `path`"
            ) from exc
        try:
            # Only a file without pages takes the page size: set it before
            # anything can write the first page. An existing file keeps its own.
            conn.execute(f"PRAGMA page_size={self._page_size}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            self._ensure_schema(conn)
            self._tune(conn)
        except sqlite3.OperationalError as exc:
            conn.close()
            raise ProviderUnavailableError(
                f"cannot use the sqlite state database {str(self.path)!r}: {exc}"
            ) from exc
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._corrupt(f"sqlite cannot read it: {exc}") from exc
        except StateCorruptError:
            conn.close()
            raise
        return conn

    def _tune(self, conn: sqlite3.Connection) -> None:
        """Size the page cache and the WAL for commits of scattered keys (see the module doc)."""
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        conn.execute(f"PRAGMA cache_size={-self._cache_mb * 1024}")  # negative: KiB
        conn.execute(f"PRAGMA wal_autocheckpoint={self._checkpoint_mb * _MIB // page_size}")
        # A WAL that one big transaction grew past the limit is cut back to
        # it when the next checkpoint restarts it.
        conn.execute(f"PRAGMA journal_size_limit={self._checkpoint_mb * _MIB}")
        # Statement journals (kept by the multi-row upsert of a commit, one
        # page image per page it changes) in memory, not in a temporary file.
        conn.execute("PRAGMA temp_store=MEMORY")

    def _corrupt(self, reason: str) -> StateCorruptError:
        path = str(self.path)
        return StateCorruptError(
            f"{path!r} is not a statestream state database ({reason}); it was left untouched: "
            f"move it aside (mv {path} {path}.bad) or point the sqlite provider's `path` elsewhere"
        )

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        def tables() -> set[str]:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            return {row[0] for row in rows}

        def pragma(name: str) -> int:
            row = conn.execute(f"PRAGMA {name}").fetchone()
            return int(row[0])

        if not tables() and pragma("application_id") == 0:
            # A new (or empty) file. Another process may be creating it too:
            # decide again under the write lock.
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not tables():
                    for create, _ in _SCHEMA.values():
                        conn.execute(create)
                    conn.execute(_LOG_INDEX)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        application_id = pragma("application_id")
        if application_id != APPLICATION_ID:
            raise self._corrupt(
                f"a sqlite database of another application (application_id {application_id:#x})"
            )
        version = pragma("user_version")
        if version == 1:
            self._upgrade_from_1(conn)
            version = pragma("user_version")
        if version == 2:
            self._upgrade_from_2(conn)
            version = pragma("user_version")
        if version != SCHEMA_VERSION:
            raise self._corrupt(
                f"schema version {version}, this statestream reads version {SCHEMA_VERSION}"
            )
        present = tables()
        for table, (_, columns) in _SCHEMA.items():
            if table not in present:
                raise self._corrupt(f"table {table} is missing")
            found = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({table})"))
            if found != columns:
                raise self._corrupt(f"table {table} has columns {found}, expected {columns}")

    def _upgrade_from_1(self, conn: sqlite3.Connection) -> None:
        """Turn a file of schema 1 (prepared deltas as rows) into schema 2, in place.

        Each namespace's prepared rows become one log record of its prepared
        txid; committed entries are where they were. One transaction, under
        the write lock, so a crash leaves the file as it was and a second
        process upgrading at the same moment finds it done.
        """
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version == 1:
                found = tuple(
                    row[1] for row in conn.execute("PRAGMA table_info(statestream_prepared)")
                )
                if found != ("namespace", "key", "value"):
                    raise self._corrupt(
                        f"schema version 1 with table statestream_prepared of columns {found}"
                    )
                conn.execute(_SCHEMA["statestream_log"][0])
                conn.execute(_LOG_INDEX)
                prepared = conn.execute(
                    "SELECT namespace, prepared FROM statestream_txids WHERE prepared IS NOT NULL"
                ).fetchall()
                for ns, txid in prepared:
                    rows = conn.execute(
                        "SELECT key, value FROM statestream_prepared WHERE namespace = ?"
                        " ORDER BY key",
                        (ns,),
                    ).fetchall()
                    if rows:
                        delta = [(bytes(k), None if v is None else bytes(v)) for k, v in rows]
                        conn.execute(
                            "INSERT INTO statestream_log (namespace, txid, delta) VALUES (?, ?, ?)",
                            (ns, txid, encode_delta(delta)),
                        )
                conn.execute("DROP TABLE statestream_prepared")
                conn.execute("PRAGMA user_version = 2")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _upgrade_from_2(self, conn: sqlite3.Connection) -> None:
        """Add the (empty) tables of sorted runs to a file of schema 2, in place: its
        entries, log and txids are read as they are. One transaction under the
        write lock, as _upgrade_from_1."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if int(conn.execute("PRAGMA user_version").fetchone()[0]) == 2:
                for create, _ in RUNS_SCHEMA.values():
                    conn.execute(create)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def use(self) -> Iterator[sqlite3.Connection]:
        """The connection, with sqlite errors translated at the boundary."""
        with self.lock:
            try:
                yield self.connection()
            except sqlite3.DatabaseError as exc:  # OperationalError among them
                raise self.error(exc) from exc

    def error(self, exc: sqlite3.DatabaseError) -> Exception:
        """What a sqlite error means to the runtime (raised ``from`` it)."""
        if isinstance(exc, sqlite3.OperationalError):
            if _cannot_write(exc):
                return StoreUnwritableError(
                    f"sqlite state database {str(self.path)!r} cannot be written: {exc}; "
                    "free space on its disk (or fix the disk), or set `path` elsewhere"
                )
            # Locked past the timeout: the store is there but cannot be
            # used now; the runtime retries (statestream._outage).
            return ProviderUnavailableError(
                f"sqlite state database {str(self.path)!r} is unavailable: {exc}"
            )
        return StateCorruptError(
            f"sqlite state database {str(self.path)!r} cannot be read: {exc}; "
            "restore it from a backup or move it aside"
        )

    def reader(self) -> sqlite3.Cursor | None:
        """The point-read cursor when the connection is open in this process and the
        provider is not closed, else None (then :meth:`use` opens it). Lock held."""
        if self._pid == os.getpid() and not self._closed:
            return self._reader
        return None

    @contextmanager
    def transaction(self, *namespaces: str) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything in the block commits, or nothing.

        ``namespaces``: those it may write; their count of write transactions
        goes up whatever the outcome (see :attr:`writes`).
        """
        with self.use() as conn:
            # IMMEDIATE takes the write lock up front, so the txid checks made
            # inside the block hold until COMMIT.
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                writes = self.writes
                for ns in namespaces:
                    writes[ns] = writes.get(ns, 0) + 1
            conn.execute("COMMIT")

    def close(self) -> None:
        """Close this process's connection; the object is not used again (the
        provider's ``close``)."""
        with self.lock:
            self._closed = True
            conn, self.conn, self._reader = self.conn, None, None
            if conn is not None and self._pid == os.getpid():
                conn.close()
