"""The sqlite state provider: the connection, the schema and the namespaces (see the package doc)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from statestream.provider import (
    SHARING_MACHINE,
    BackendStateProvider,
    ClaimHandle,
    ClaimWait,
    ConfigError,
    ProviderUnavailableError,
    StateCorruptError,
    StateLockedError,
    StoreUnwritableError,
    check_config_keys,
    config_option,
    get_serializer,
)

from .backend import _SQLiteBackend
from .claims import _CLAIMS, _IN_MEMORY, _cannot_write, _Claim, _holder, _lock_path
from .records import encode_delta

__all__ = ["SQLiteStateProvider"]

DEFAULT_PATH: Final = "./statestream-data/state.db"
APPLICATION_ID: Final = 0x53537374  # "SSst": marks a file as ours
SCHEMA_VERSION: Final = 2
_MIB: Final = 1024 * 1024
_MAX_MB: Final = 1 << 20  # 1 TiB: a typo guard, not a recommendation
_PAGE_SIZES: Final = tuple(1 << n for n in range(9, 17))  # sqlite's: 512 .. 65536
# 8, not 32: the page cache is part of the process's memory, which issue 34
# bounds at 150 MB whatever the state's size; 8 MiB holds the pages a fold
# of a small state changes, and a large state's fold never fitted anyway.
DEFAULT_CACHE_MB: Final = 8
DEFAULT_CHECKPOINT_MB: Final = 16
DEFAULT_PAGE_SIZE: Final = 2048

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
}
_LOG_INDEX: Final = (
    "CREATE INDEX IF NOT EXISTS statestream_log_namespace ON statestream_log (namespace, txid)"
)

# Connections inherited through fork() are parked here, never closed nor
# collected: closing the parent's connection from the child can release
# locks and corrupt state that the parent still relies on (sqlite's "how to
# corrupt" guide, section 2.6).
_INHERITED: list[sqlite3.Connection] = []

_SYNCHRONOUS: Final = ("off", "normal", "full", "extra")


class SQLiteStateProvider(BackendStateProvider):
    """State in one sqlite file, shared by all namespaces (and processes) using it."""

    name: ClassVar[str] = "sqlite"
    sharing: ClassVar[str] = SHARING_MACHINE  # any process that can open the file
    _KEYS: ClassVar[frozenset[str]] = frozenset(
        {"path", "serializer", "synchronous", "timeout", "cache_mb", "checkpoint_mb", "page_size"}
    )

    def __init__(
        self,
        path: str | os.PathLike[str] = DEFAULT_PATH,
        *,
        serializer: str = "json",
        synchronous: str = "full",
        timeout_ms: int = 5000,
        cache_mb: int = DEFAULT_CACHE_MB,
        checkpoint_mb: int = DEFAULT_CHECKPOINT_MB,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        super().__init__(get_serializer(serializer))
        if synchronous.lower() not in _SYNCHRONOUS:
            raise ConfigError(
                f"sqlite state provider config 'synchronous' must be one of "
                f"{', '.join(_SYNCHRONOUS)}, not {synchronous!r}"
            )
        for key, value, low, high in (
            ("cache_mb", cache_mb, 1, _MAX_MB),
            ("checkpoint_mb", checkpoint_mb, 1, _MAX_MB),
        ):
            if not low <= value <= high:
                raise ConfigError(
                    f"sqlite state provider config {key!r} must be between {low} and {high} "
                    f"(MiB), not {value!r}"
                )
        if page_size not in _PAGE_SIZES:
            raise ConfigError(
                f"sqlite state provider config 'page_size' must be a power of two from "
                f"{_PAGE_SIZES[0]} to {_PAGE_SIZES[-1]}, not {page_size!r}"
            )
        self.path = Path(path)
        # One backend per namespace, so the committed log merged once (for
        # namespaces() at a restart's rescale check) serves the first get too.
        self._backends: dict[str, _SQLiteBackend] = {}
        self._synchronous = synchronous.upper()
        self._timeout_s = timeout_ms / 1000
        self._cache_mb = cache_mb
        self._checkpoint_mb = checkpoint_mb
        self._page_size = page_size
        # One connection per provider per process; the lock serialises its use
        # because the local runtime may drive several tasks from threads.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        # The connection's cursor for point reads (one cursor reused: a miss
        # makes no cursor object), and the process that opened the connection.
        self._reader: sqlite3.Cursor | None = None
        self._pid = 0
        # Write transactions of this provider so far, per namespace written:
        # sqlite's data_version counts only other connections' commits, so a
        # backend's kept merge of the committed log checks both (see
        # _SQLiteBackend._committed_log).
        self._writes: dict[str, int] = {}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Self:
        check_config_keys(cls.name, config, cls._KEYS)
        return cls(
            config_option(cls.name, config, "path", str, DEFAULT_PATH),
            serializer=config_option(cls.name, config, "serializer", str, "json"),
            synchronous=config_option(cls.name, config, "synchronous", str, "full"),
            timeout_ms=config_option(cls.name, config, "timeout", int, 5000),
            cache_mb=config_option(cls.name, config, "cache_mb", int, DEFAULT_CACHE_MB),
            checkpoint_mb=config_option(
                cls.name, config, "checkpoint_mb", int, DEFAULT_CHECKPOINT_MB
            ),
            page_size=config_option(cls.name, config, "page_size", int, DEFAULT_PAGE_SIZE),
        )

    def __repr__(self) -> str:
        return f"SQLiteStateProvider(path={str(self.path)!r})"

    def missing_store(self) -> str | None:
        """The database file if it does not exist (opening would create it)."""
        return None if self.path.exists() else str(self.path)

    def __getstate__(self) -> dict[str, Any]:
        # Ship the configuration, never the connection or the lock.
        state = self.__dict__.copy()
        state.update(_conn=None, _reader=None, _pid=0, _lock=None, _states={}, _backends={})
        state.update(_writes={})
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ connection

    def _connection(self) -> sqlite3.Connection:
        """The connection of this process, opened (and checked) on first use. Lock held."""
        self.check_open()
        if self._conn is not None:
            if self._pid == os.getpid():
                return self._conn
            _INHERITED.append(self._conn)  # forked: leave the parent's alone
            self._conn = self._reader = None
        self._conn = self._open()
        self._reader = self._conn.cursor()
        self._pid = os.getpid()
        return self._conn

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
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _use(self) -> Iterator[sqlite3.Connection]:
        """The connection, with sqlite errors translated at the boundary."""
        with self._lock:
            try:
                yield self._connection()
            except sqlite3.DatabaseError as exc:  # OperationalError among them
                raise self._error(exc) from exc

    def _error(self, exc: sqlite3.DatabaseError) -> Exception:
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

    def _ready(self) -> sqlite3.Cursor | None:
        """The point-read cursor when the connection is open in this process and the
        provider is not closed, else None (then :meth:`_use` opens it). Lock held."""
        if self._pid == os.getpid() and not self._closed:
            return self._reader
        return None

    @contextmanager
    def _transaction(self, *namespaces: str) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything in the block commits, or nothing.

        ``namespaces``: those it may write; their count of write transactions
        goes up whatever the outcome (see ``_writes``).
        """
        with self._use() as conn:
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
                writes = self._writes
                for ns in namespaces:
                    writes[ns] = writes.get(ns, 0) + 1
            conn.execute("COMMIT")

    # ------------------------------------------------------------------ provider

    def _open_backend(self, namespace: str) -> _SQLiteBackend:
        backend = self._backends.get(namespace)
        if backend is None:
            backend = self._backends[namespace] = _SQLiteBackend(self, namespace)
        return backend

    def namespaces(self) -> list[str]:
        # Walks the primary key from one namespace to the next instead of
        # reading every entry, as a plain SELECT DISTINCT would.
        with self._use() as conn:
            rows = conn.execute(
                "WITH RECURSIVE ns(name) AS ("
                " SELECT min(namespace) FROM statestream_entries"
                " UNION ALL"
                " SELECT (SELECT min(namespace) FROM statestream_entries WHERE namespace > name)"
                " FROM ns WHERE name IS NOT NULL)"
                " SELECT name FROM ns WHERE name IS NOT NULL"
            ).fetchall()
            logged = conn.execute(
                "SELECT DISTINCT l.namespace FROM statestream_log l"
                " LEFT JOIN statestream_txids t ON t.namespace = l.namespace"
                " WHERE l.txid <= coalesce(t.committed, -1)"
            ).fetchall()
        names = {row[0] for row in rows}
        # A namespace with committed records in the log is listed if anything
        # of it is left once they are applied (they may delete every entry).
        for (ns,) in logged:
            if not self._open_backend(ns).has_entries():
                names.discard(ns)
            else:
                names.add(ns)
        return sorted(names)

    def stored_namespaces(self) -> list[str]:
        with self._use() as conn:
            rows = conn.execute(
                "SELECT namespace FROM statestream_entries UNION SELECT namespace FROM"
                " statestream_log UNION SELECT namespace FROM statestream_txids"
            ).fetchall()
        return sorted(row[0] for row in rows)

    def _drop(self, namespaces: list[str]) -> None:
        with self._transaction(*namespaces) as conn:
            for table in ("statestream_entries", "statestream_log", "statestream_txids"):
                conn.executemany(
                    f"DELETE FROM {table} WHERE namespace = ?", [(ns,) for ns in namespaces]
                )
        for ns in namespaces:
            backend = self._backends.get(ns)
            if backend is not None:
                backend.forget()

    def forget_state(self, namespace: str) -> None:
        # Spark writes a namespace from several processes in turn: the next
        # state object reads the committed log afresh too.
        super().forget_state(namespace)
        backend = self._backends.get(namespace)
        if backend is not None:
            backend.forget()

    def compact(self, namespace: str | None = None) -> None:
        """Fold the committed log records of ``namespace`` (of every namespace if None)
        into the entries now, each namespace in one transaction.

        Never needed for correctness: a commit folds a namespace's records
        once enough have gathered. Afterwards the committed state is all in
        ``statestream_entries``, for tools that read that table themselves.
        """
        if namespace is None:
            with self._use() as conn:
                names = [
                    row[0] for row in conn.execute("SELECT DISTINCT namespace FROM statestream_log")
                ]
        else:
            names = [namespace]
        for ns in names:
            self._open_backend(ns).fold()

    def claim(self, scope: str, wait: float) -> ClaimHandle[_Claim] | None:
        """Hold topology ``scope`` of this file for one run (see the module doc).

        Waits up to ``wait`` seconds for another process's claim, trying every
        50 ms, then raises StateLockedError naming its pid. A scope this
        process holds already is granted again; each claim is released on
        its own. An in-memory database (``path: ":memory:"``) is this
        connection's alone: nothing to claim (None).
        """
        if str(self.path) == _IN_MEMORY:
            return None
        path = _lock_path(self.path, scope)
        joined = _CLAIMS.join(path)
        if joined is not None:
            return joined
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise ProviderUnavailableError(
                f"cannot open the lock file {str(path)!r} of the sqlite state database "
                f"{str(self.path)!r}: {exc}; check that its directory is writable"
            ) from exc
        waiting = ClaimWait(self.clock, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                # Held: by another thread of this process that got there first?
                joined = _CLAIMS.join(path)
                if joined is not None or waiting.over():
                    pid = None if joined is not None else _holder(fd)
                    os.close(fd)
                    if joined is not None:
                        return joined
                    raise StateLockedError.for_scope(
                        scope, str(self.path), pid=pid, wait=wait
                    ) from None
                waiting.pause()
            except OSError as exc:
                os.close(fd)
                raise ProviderUnavailableError(
                    f"cannot lock {str(path)!r} for topology {scope!r}: {exc}"
                ) from exc
        # Who holds it, for the error of the next claimer (only that: a full
        # disk costs the pid in that message, not the claim).
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return _CLAIMS.add(path, _Claim(path, fd))

    def _close(self) -> None:
        with self._lock:
            conn, self._conn, self._reader = self._conn, None, None
            if conn is not None and self._pid == os.getpid():
                conn.close()
