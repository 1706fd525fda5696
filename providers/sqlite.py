"""The ``sqlite`` state provider: embedded, durable, one file.

Config (``topology.state.provider.config``)::

    path:          "./statestream-data/state.db"  # parent directories are created
    serializer:    "json"                         # or "pickle" (see statestream.provider)
    synchronous:   "full"                         # sqlite's PRAGMA synchronous: full|normal|off
    timeout:       5000                           # ms to wait for another writer's lock
    cache_mb:      32                             # page cache of each connection, MiB (>= 1)
    checkpoint_mb: 16                             # WAL size that starts a checkpoint, MiB (>= 1)
    page_size:     2048                           # bytes, 512..65536, a power of two;
                                                  # only a new file takes it

Schema (``PRAGMA application_id`` = 0x53537374, ``user_version`` = 2)::

    statestream_entries (namespace TEXT, key BLOB, value BLOB NOT NULL)     folded committed entries
    statestream_log     (seq INTEGER, namespace TEXT, txid INTEGER, delta BLOB)  deltas, in order
    statestream_txids   (namespace TEXT, committed INTEGER, prepared INTEGER)

A prepare writes its whole delta as one record of the log (the encoded
keys and values back to back, :func:`encode_delta`), and a commit only
moves the namespace's committed txid: a record is committed once its txid
is at most that, and the committed state is the entries with the committed
records applied over them in ``seq`` order. A rollback deletes the records
above the committed txid. So a checkpoint writes a few pages of one record
rather than a row per key in two B-trees (schema 1 did that: a row per key
into a table of prepared rows, then a copy of each into the entries), and
costs about the same whatever the delta's keys are. Once
``_FOLD_RECORDS`` committed records (or ``_FOLD_BYTES``) have gathered, the
commit that reached the count also folds them into the entries, in the
same transaction: a key changed at every checkpoint is written to the
B-tree once per fold instead of twice per checkpoint. Reads merge the two:
a scan reads the committed records first; a point read keeps their merge
while the committed txid and the records are the same. ``compact()`` folds
now, for tools that read ``statestream_entries`` directly.

A file of schema 1 is upgraded in place when it is first opened (its
prepared rows become one record per namespace), in one transaction. A
statestream older than the log refuses a file of schema 2, naming the
version.

What a fold costs. A fold rewrites each B-tree page that holds a
changed key, once in the WAL and once more when a checkpoint copies the WAL
back into the database file. In a small state a few pages hold every key;
in a large one scattered keys each sit on a page of their own: committing
1,000 random keys writes ~40 pages in a state of 1,000 keys and ~1,000 in a
state of 1,000,000 (2 KiB pages). That count is the B-tree's (the log
records in between cost only their own bytes); the settings
keep the cost of each page down (bench/bench_state.py measures them):

* ``page_size`` 2048 rather than sqlite's 4096 halves the bytes each page
  costs to write and fsync. A record (key and value encoded) of up to ~480
  bytes stays within its page, longer ones spill into overflow pages: for
  states of large values choose 4096 (~1,000 bytes) or more. A file keeps
  the page size it was created with, whatever the config says; to change
  it, stop the topology and run ``PRAGMA journal_mode=DELETE; PRAGMA
  page_size=N; VACUUM; PRAGMA journal_mode=WAL`` on it with ``sqlite3``.
* ``cache_mb`` must hold the pages one fold changes, or sqlite writes
  them to the WAL before the commit and reads them back. sqlite's default,
  2 MiB, holds fewer than a fold of 1,000 scattered keys changes in 4 KiB
  pages. The cache grows only as pages are read.
* ``checkpoint_mb``: the commit that grows the WAL past this size also
  checkpoints it (two fsyncs and a write of every page in it), and a page
  that several commits changed is copied once. sqlite's default, 1,000
  pages, meant a checkpoint every other commit. The WAL stays bounded: it
  exceeds this size by one commit at most and is cut back to it once
  checkpointed (``journal_size_limit``), unless another connection keeps a
  read transaction open all that time, as in any sqlite database in WAL
  mode (the provider's own reads are short).
* ``temp_store=MEMORY``: the statement journal of the fold's multi-row
  upsert (a copy of every page it changes, kept to undo the statement
  alone) stays in memory rather than in a temporary file written on every
  commit.

None of these changes what a crash or a power cut leaves.

One run per topology. A run claims its topology's scope of the file
(:meth:`SQLiteStateProvider.claim`) before it touches any state: an
exclusive ``flock`` on ``<path>.<topology>.lock`` beside the database (the
topology's name URL-quoted), which holds the claimer's pid. A second
``statestream run`` of the same topology on the same file waits for it,
then stops with StateLockedError naming that pid; other topologies on the
file run beside it. ``flock`` rather than ``fcntl`` record locks because it
belongs to the open file description: the worker processes a supervisor
forks share its claim, and it ends when the last of them is gone (the
workers die with their supervisor). The lock files are left in place:
removing one would race with the next claimer.

A file that is not a sqlite database, or is one with another schema, raises
StateCorruptError and is never overwritten or read as empty.

The connection opens on first use (so a provider pickles and ships to
workers), and again in a forked child, which must not use its parent's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import sys
import threading
from array import array
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar, Final, Self
from urllib.parse import quote

import orjson

from statestream.provider import (
    SHARING_MACHINE,
    BackendStateProvider,
    ClaimHandle,
    ClaimWait,
    CommitOutcome,
    ConfigError,
    Delta,
    ProcessClaims,
    ProviderUnavailableError,
    StateCorruptError,
    StateLockedError,
    StoreUnwritableError,
    check_config_keys,
    config_option,
    encode_json,
    get_serializer,
)

__all__ = ["SQLiteStateProvider"]

DEFAULT_PATH: Final = "./statestream-data/state.db"
APPLICATION_ID: Final = 0x53537374  # "SSst": marks a file as ours
SCHEMA_VERSION: Final = 2
_SCAN_PAGE: Final = 1024
_MIB: Final = 1024 * 1024
_MAX_MB: Final = 1 << 20  # 1 TiB: a typo guard, not a recommendation
_PAGE_SIZES: Final = tuple(1 << n for n in range(9, 17))  # sqlite's: 512 .. 65536
DEFAULT_CACHE_MB: Final = 32
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
        self._synchronous = synchronous.upper()
        self._timeout_s = timeout_ms / 1000
        self._cache_mb = cache_mb
        self._checkpoint_mb = checkpoint_mb
        self._page_size = page_size
        # One connection per provider per process; the lock serialises its use
        # because the local runtime may drive several tasks from threads.
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

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
        state.update(_conn=None, _pid=0, _lock=None, _states={})
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
            self._conn = None
        self._conn = self._open()
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
            except sqlite3.OperationalError as exc:
                if _cannot_write(exc):
                    raise StoreUnwritableError(
                        f"sqlite state database {str(self.path)!r} cannot be written: {exc}; "
                        "free space on its disk (or fix the disk), or set `path` elsewhere"
                    ) from exc
                # Locked past the timeout: the store is there but cannot be
                # used now; the runtime retries (statestream._outage).
                raise ProviderUnavailableError(
                    f"sqlite state database {str(self.path)!r} is unavailable: {exc}"
                ) from exc
            except sqlite3.DatabaseError as exc:
                raise StateCorruptError(
                    f"sqlite state database {str(self.path)!r} cannot be read: {exc}; "
                    "restore it from a backup or move it aside"
                ) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: everything in the block commits, or nothing."""
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
            conn.execute("COMMIT")

    # ------------------------------------------------------------------ provider

    def _open_backend(self, namespace: str) -> _SQLiteBackend:
        return _SQLiteBackend(self, namespace)

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
            if next(iter(_SQLiteBackend(self, ns).scan()), None) is None:
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
        with self._transaction() as conn:
            for table in ("statestream_entries", "statestream_log", "statestream_txids"):
                conn.executemany(
                    f"DELETE FROM {table} WHERE namespace = ?", [(ns,) for ns in namespaces]
                )

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
            _SQLiteBackend(self, ns).fold()

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
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()


# ---------------------------------------------------------------------- claims

_IN_MEMORY: Final = ":memory:"
_MAX_LOCK_NAME: Final = 200  # bytes of a lock file's name; most file systems allow 255


#: sqlite's primary result codes of a store that is there but cannot be written now.
_UNWRITABLE: Final = {13: "SQLITE_FULL", 10: "SQLITE_IOERR"}


def _cannot_write(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` says the disk is full or failed (retried as an outage), not a
    lock held past the timeout."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in _UNWRITABLE  # extended codes keep the primary in the low byte
    return "disk is full" in str(exc) or "disk I/O error" in str(exc)


def _lock_path(db: Path, scope: str) -> Path:
    """``<db>.<scope quoted>.lock``, absolute, so that every path to the file
    gives one registry key; a scope too long for a file name is hashed."""
    name = f"{db.name}.{quote(scope, safe='')}.lock"
    if len(name.encode()) > _MAX_LOCK_NAME:
        digest = hashlib.sha256(scope.encode()).hexdigest()[:32]
        name = f"{db.name}.{digest}.lock"
    return (db.parent / name).absolute()


class _Claim:
    """This process's flock of one lock file (a :class:`~statestream.provider.Hold`),
    shared by every claim of its scope here."""

    __slots__ = ("fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    def end(self) -> None:
        # Unlocked and closed, never deleted: a claimer that opened the file
        # before a deletion would lock a name nobody else can find.
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)

    def __repr__(self) -> str:
        return f"sqlite lock {str(self.path)!r}"


# The scopes this process holds, by lock file. A child holds its parent's
# claims only through the inherited descriptors (kept open: they keep the
# lock while the child lives); see ProcessClaims.
_CLAIMS: ProcessClaims[_Claim] = ProcessClaims()


def _holder(fd: int) -> int | None:
    """The pid written in a lock file, if there is one yet."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


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
    # map() runs bytearray without an interpreted step per value.
    params: list[Any] = list(map(bytearray, chain.from_iterable(rows)))
    done, left, size = 0, len(rows), _CHUNK
    while left:
        while size > left:
            size >>= 1
        conn.execute(_UPSERT[size], [ns, *params[2 * done : 2 * (done + size)]])
        done += size
        left -= size


# The delta of a prepare goes into the log as one record (see the module
# doc): a little-endian header of the row count, the key lengths and the
# value lengths (_TOMBSTONE for a deleted key), then the keys and the values
# back to back. Built and read with array and join, no interpreted step per
# row unless the delta deletes keys.
_DELTA_MAGIC: Final = b"SSd1"
_PLAIN_MAGIC: Final = b"SSj1"  # a JSON document of plain entries, then an SSd1 record
_TOMBSTONE: Final = 0xFFFFFFFF
_U32: Final = "I" if array("I").itemsize == 4 else "L"
_SWAP: Final = sys.byteorder != "little"


def _u32s(values: Iterable[int]) -> bytes:
    packed = array(_U32, values)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def encode_delta(delta: Delta) -> bytes:
    """One log record holding ``delta`` (keys and values as given, None for a deletion)."""
    if not delta:
        return _DELTA_MAGIC + (0).to_bytes(4, "little")
    keys, values = zip(*delta, strict=True)
    try:
        value_lengths = _u32s(map(len, values))  # a None raises TypeError
        stored: Iterable[bytes] = values
    except TypeError:
        value_lengths = _u32s(_TOMBSTONE if v is None else len(v) for v in values)
        stored = [v for v in values if v is not None]
    return b"".join(
        (
            _DELTA_MAGIC,
            len(keys).to_bytes(4, "little"),
            _u32s(map(len, keys)),
            value_lengths,
            b"".join(keys),
            b"".join(stored),
        )
    )


def encode_plain_delta(plain: Mapping[str, Any], delta: Delta) -> bytes:
    """One log record holding ``delta`` and the entries of ``plain``
    (see ``StateBackend.write_prepared_plain``): the JSON document of
    ``plain``, then the record of ``delta``."""
    document = orjson.dumps(plain)
    size = len(document).to_bytes(4, "little")
    return b"".join((_PLAIN_MAGIC, size, document, encode_delta(delta)))


def decode_delta(record: bytes) -> tuple[list[bytes], list[bytes | None]]:
    """The keys and values of a log record (None for a deletion).

    Raises ValueError if ``record`` is not one that ``encode_delta`` or
    ``encode_plain_delta`` made.
    """
    plain, keys, values = _split_record(record)
    if plain:
        # As the state would have encoded them.
        keys.extend(map(encode_json, plain))
        values.extend(map(encode_json, plain.values()))
    return keys, values


def merge_records(records: Iterable[bytes]) -> dict[bytes, bytes | None]:
    """The entries of log records applied in order: encoded key -> encoded value
    (None: deleted). Raises ValueError as decode_delta does.

    The JSON documents of plain entries are merged as they are and only
    the union is encoded, once: a key put at every checkpoint is encoded
    once per fold, not once per record.
    """
    plain_union: dict[str, Any] = {}
    rows: dict[bytes, bytes | None] = {}
    for record in records:
        plain, keys, values = _split_record(bytes(record))
        if plain:
            if rows:  # an older row of the same key must not outlive this record
                for name in plain:
                    rows.pop(encode_json(name), None)
            plain_union.update(plain)
        for key, value in zip(keys, values, strict=True):
            if plain_union and key[:1] == b'"':  # a str key: it may be a plain one
                plain_union.pop(orjson.loads(key), None)
            rows[key] = value
    for name, plain_value in plain_union.items():
        rows[encode_json(name)] = encode_json(plain_value)
    return rows


def _split_record(record: bytes) -> tuple[dict[str, Any] | None, list[bytes], list[bytes | None]]:
    """A record's JSON document of plain entries (None if it has none), and its rows."""
    if record[:4] == _PLAIN_MAGIC and len(record) >= 8:
        size = int.from_bytes(record[4:8], "little")
        try:
            plain = orjson.loads(record[8 : 8 + size])
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"its JSON document cannot be read ({exc})") from None
        if not isinstance(plain, dict):
            raise ValueError("its JSON document is not an object")
        keys, values = _decode_rows(record[8 + size :])
        return plain, keys, values
    keys, values = _decode_rows(record)
    return None, keys, values


def _decode_rows(record: bytes) -> tuple[list[bytes], list[bytes | None]]:
    if record[:4] != _DELTA_MAGIC or len(record) < 8:
        raise ValueError("not a statestream delta record")
    n = int.from_bytes(record[4:8], "little")
    lengths = array(_U32)
    head = 8 + 8 * n
    if len(record) < head:
        raise ValueError(f"a delta record of {n} rows is cut short")
    lengths.frombytes(record[8:head])
    if _SWAP:
        lengths.byteswap()
    key_lengths, value_lengths = lengths[:n], lengths[n:]
    pos = head
    keys: list[bytes] = []
    for length in key_lengths:
        keys.append(record[pos : pos + length])
        pos += length
    values: list[bytes | None] = []
    for length in value_lengths:
        if length == _TOMBSTONE:
            values.append(None)
        else:
            values.append(record[pos : pos + length])
            pos += length
    if pos != len(record):
        raise ValueError(f"a delta record of {n} rows has {len(record) - pos} bytes too many")
    return keys, values


# When the committed records of a namespace are folded into its entries
# (see the module doc): after this many, or once they hold this many bytes.
_FOLD_RECORDS: Final = 8
_FOLD_BYTES: Final = 8 * _MIB

# The committed txid of a namespace, -1 without one (?1 is the namespace).
_COMMITTED: Final = "coalesce((SELECT committed FROM statestream_txids WHERE namespace = ?1), -1)"


class _SQLiteBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace in the sqlite file.

    Committed state is the namespace's entries with its committed log
    records applied over them in order; the records of the prepared txid
    wait in the log until it commits (or are deleted by a rollback).
    """

    __slots__ = ("_mark", "_ns", "_overlay", "_provider")

    def __init__(self, provider: SQLiteStateProvider, namespace: str) -> None:
        self._provider = provider
        self._ns = namespace
        # The committed log records applied (key -> value, None: deleted),
        # for point reads, and what they were read at (see _committed_log).
        self._overlay: dict[bytes, bytes | None] = {}
        self._mark: tuple[int, int, int] | None = None

    def _committed_log(self, conn: sqlite3.Connection, cached: bool) -> dict[bytes, bytes | None]:
        """The committed log records of the namespace, merged in order.

        ``cached``: reuse the last merge while the committed records are the
        same ones (same committed txid, count and last sequence number),
        which one query tells; another process may have committed since.
        """
        ns = self._ns
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
            self._overlay, self._mark = merged, mark
        return merged

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

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        # Pages by key, each page its own short read, so that the lock is not
        # held while the caller iterates and memory stays bounded. The
        # committed log is read once, first: a key it holds is yielded from
        # it, never from the entries, so each key comes once even if the log
        # is folded into the entries meanwhile.
        with self._provider._use() as conn:
            overlay = self._committed_log(conn, cached=False)
        after = b""  # every stored key is non-empty, so greater than b""
        while True:
            with self._provider._use() as conn:
                rows = conn.execute(
                    "SELECT key, value FROM statestream_entries"
                    " WHERE namespace = ? AND key > ? ORDER BY key LIMIT ?",
                    (self._ns, after, _SCAN_PAGE),
                ).fetchall()
            for key, value in rows:
                key = bytes(key)
                if key not in overlay:
                    yield key, bytes(value)
            if len(rows) < _SCAN_PAGE:
                break
            after = rows[-1][0]
        for key, value in overlay.items():
            if value is not None:
                yield key, value

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

    def write_prepared_plain(self, txid: int, plain: Mapping[str, Any], delta: Delta) -> None:
        self._write_record(txid, encode_plain_delta(plain, delta))

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
