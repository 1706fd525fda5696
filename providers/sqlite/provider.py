"""The sqlite state provider: config, namespaces and claims (see the package doc); the
file itself is :class:`~.database.SQLiteDatabase`."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from statestream.provider import (
    SHARING_MACHINE,
    BackendStateProvider,
    ClaimHandle,
    ClaimWait,
    ConfigError,
    ProviderUnavailableError,
    StateLockedError,
    check_config_keys,
    config_option,
    get_serializer,
)

from .backend import _SQLiteBackend
from .claims import _CLAIMS, _IN_MEMORY, _Claim, _holder, _lock_path
from .database import SQLiteDatabase

__all__ = ["SQLiteStateProvider"]

DEFAULT_PATH: Final = "./statestream-data/state.db"
_MAX_MB: Final = 1 << 20  # 1 TiB: a typo guard, not a recommendation
_PAGE_SIZES: Final = tuple(1 << n for n in range(9, 17))  # sqlite's: 512 .. 65536
# 8, not 32: the page cache is part of the process's memory, which issue 34
# bounds at 150 MB whatever the state's size; 8 MiB holds the pages a fold
# of a small state changes, and a large state's fold never fitted anyway.
DEFAULT_CACHE_MB: Final = 8
DEFAULT_CHECKPOINT_MB: Final = 16
DEFAULT_PAGE_SIZE: Final = 2048

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
        #: The file as this process uses it (connection, schema, transactions):
        #: all the backends are given.
        self.database = SQLiteDatabase(
            self.path,
            synchronous=synchronous.upper(),
            timeout_s=timeout_ms / 1000,
            cache_mb=cache_mb,
            checkpoint_mb=checkpoint_mb,
            page_size=page_size,
        )

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
        # Ship the configuration (the database pickles as its own), no states.
        state = self.__dict__.copy()
        state.update(_states={}, _backends={})
        return state

    # ------------------------------------------------------------------ provider

    def _open_backend(self, namespace: str) -> _SQLiteBackend:
        backend = self._backends.get(namespace)
        if backend is None:
            backend = self._backends[namespace] = _SQLiteBackend(self.database, namespace)
        return backend

    def namespaces(self) -> list[str]:
        # Walks the primary key from one namespace to the next instead of
        # reading every entry, as a plain SELECT DISTINCT would.
        with self.database.use() as conn:
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
                " UNION SELECT namespace FROM statestream_run_list"
            ).fetchall()
        names = {row[0] for row in rows}
        # A namespace with committed records in the log (or runs) is listed if
        # anything of it is left once they are applied (they may delete every
        # entry).
        for (ns,) in logged:
            if not self._open_backend(ns).has_entries():
                names.discard(ns)
            else:
                names.add(ns)
        return sorted(names)

    def stored_namespaces(self) -> list[str]:
        with self.database.use() as conn:
            rows = conn.execute(
                "SELECT namespace FROM statestream_entries UNION SELECT namespace FROM"
                " statestream_log UNION SELECT namespace FROM statestream_txids"
                " UNION SELECT namespace FROM statestream_run_list"
            ).fetchall()
        return sorted(row[0] for row in rows)

    def _drop(self, namespaces: list[str]) -> None:
        with self.database.transaction(*namespaces) as conn:
            for table in (
                "statestream_entries",
                "statestream_log",
                "statestream_txids",
                "statestream_runs",
                "statestream_run_list",
            ):
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
        """Fold the committed log records and the sorted runs of ``namespace`` (of every
        namespace if None) into the entries now.

        Never needed for correctness: a commit folds a namespace's records
        once enough have gathered. Afterwards the committed state is all in
        ``statestream_entries``, for tools that read that table themselves.
        """
        if namespace is None:
            with self.database.use() as conn:
                names = [
                    row[0]
                    for row in conn.execute(
                        "SELECT namespace FROM statestream_log"
                        " UNION SELECT namespace FROM statestream_run_list"
                    )
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
        self.database.close()
