"""What only the sqlite provider promises: its file, its schema, its connection."""

from __future__ import annotations

import os
import pickle
import sqlite3
import time
from pathlib import Path

import pytest

from statestream._errors import ConfigError, ProviderUnavailableError, StateCorruptError
from statestream._registry import open_provider
from statestream_providers import sqlite as sqlite_provider
from statestream_providers.sqlite import SQLiteStateProvider


def _open(path: Path) -> SQLiteStateProvider:
    provider = open_provider("sqlite", {"path": str(path), "synchronous": "normal"})
    assert isinstance(provider, SQLiteStateProvider)
    return provider


def _commit_one(provider: SQLiteStateProvider, namespace: str = "count-0") -> None:
    state = provider.get_state(namespace)
    state.put("k", "v")
    state.prepare_commit(0)
    state.commit(0)


def test_creates_parent_directories_lazily_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "state.db"
    with _open(path) as provider:
        assert not path.parent.exists(), "opening a provider touches nothing"
        _commit_one(provider)
        assert path.exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    with open_provider("sqlite") as provider:
        assert isinstance(provider, SQLiteStateProvider)
        _commit_one(provider)
    assert (tmp_path / "statestream-data" / "state.db").exists()


@pytest.mark.parametrize(
    "content",
    [b"this is not a database at all, just some text" * 200, os.urandom(8192)],
    ids=["text", "random"],
)
def test_a_file_that_is_not_sqlite_is_corrupt(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "state.db"
    path.write_bytes(content)
    with _open(path) as provider, pytest.raises(StateCorruptError) as info:
        provider.get_state("count-0").get("k")
    message = str(info.value)
    assert str(path) in message and "move it aside" in message
    assert path.read_bytes() == content, "never overwritten"


def test_another_applications_database_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    with _open(path) as provider, pytest.raises(StateCorruptError, match="another application"):
        provider.get_state("count-0").committed_txid  # noqa: B018 - the read is the test
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]


def test_a_wrong_schema_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE statestream_prepared")
    conn.execute("CREATE TABLE statestream_prepared (namespace TEXT, k BLOB, v BLOB)")
    conn.commit()
    conn.close()
    with _open(path) as provider, pytest.raises(StateCorruptError, match="statestream_prepared"):
        provider.get_state("count-0").get("k")


def test_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with _open(path) as provider, pytest.raises(StateCorruptError, match="version 99"):
        provider.get_state("count-0").get("k")


def test_an_empty_file_is_initialised(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    path.touch()
    with _open(path) as provider:
        _commit_one(provider)
    with _open(path) as provider:
        assert provider.get_state("count-0").get("k") == "v"


def test_an_unusable_path_is_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with (
        _open(blocker / "sub" / "state.db") as provider,
        pytest.raises(ProviderUnavailableError, match="cannot open"),
    ):
        provider.get_state("count-0").get("k")


def test_each_commit_is_one_transaction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_applier(monkeypatch)  # its copies run on the same connection, traced too
    path = tmp_path / "state.db"
    with _open(path) as provider:
        state = provider.get_state("count-0")
        for i in range(100):
            state.put(i, i)
        state.prepare_commit(0)
        conn = provider._connection()
        changes_before = conn.total_changes
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        state.commit(0)
        conn.set_trace_callback(None)
        assert conn.total_changes > changes_before
    assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT"
    assert statements.count("BEGIN IMMEDIATE") == 1 and statements.count("COMMIT") == 1


def test_reconnects_after_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with _open(tmp_path / "state.db") as provider:
        _commit_one(provider)
        parent_conn = provider._connection()
        monkeypatch.setattr(os, "getpid", lambda: -1)  # as seen from a forked child
        assert provider.get_state("count-0").get("other") is None
        assert provider._connection() is not parent_conn
        parent_conn.execute("SELECT 1")  # the parent's connection was left open
    sqlite_provider._INHERITED.remove(parent_conn)
    parent_conn.close()


def test_pickles_without_its_connection(tmp_path: Path) -> None:
    with _open(tmp_path / "state.db") as provider:
        _commit_one(provider)
        clone = pickle.loads(pickle.dumps(provider))
    with clone:
        assert clone.get_state("count-0").get("k") == "v"


def test_a_second_process_view_sees_commits(tmp_path: Path) -> None:
    # Two connections on one file, as a dumping CLI beside a running topology.
    path = tmp_path / "state.db"
    with _open(path) as writer, _open(path) as reader:
        _commit_one(writer, "a-0")
        _commit_one(writer, "b-0")
        assert reader.namespaces() == ["a-0", "b-0"]


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"paht": "x.db"}, "paht"),
        ({"synchronous": "sometimes"}, "synchronous"),
        ({"timeout": "soon"}, "timeout"),
        ({"serializer": "yaml"}, "yaml"),
        ({"cache_mb": 0}, "cache_mb"),
        ({"cache_mb": "lots"}, "cache_mb"),
        ({"checkpoint_mb": 0}, "checkpoint_mb"),
        ({"checkpoint_mb": -16}, "checkpoint_mb"),
        ({"checkpoint_mb": 1.5}, "checkpoint_mb"),
        ({"page_size": 3000}, "page_size"),
        ({"page_size": 256}, "page_size"),
        ({"page_size": 131072}, "page_size"),
    ],
)
def test_config_errors_name_the_key(config: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        open_provider("sqlite", config)


def _pragmas(provider: SQLiteStateProvider) -> dict[str, int]:
    conn = provider._connection()
    names = ("page_size", "cache_size", "wal_autocheckpoint", "journal_size_limit", "temp_store")
    return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}


def test_defaults_tune_the_cache_and_the_wal(tmp_path: Path) -> None:
    with _open(tmp_path / "state.db") as provider:
        _commit_one(provider)
        assert _pragmas(provider) == {
            "page_size": 2048,
            "cache_size": -32 * 1024,  # KiB
            "wal_autocheckpoint": 16 * 1024 * 1024 // 2048,  # pages
            "journal_size_limit": 16 * 1024 * 1024,  # bytes
            "temp_store": 2,  # MEMORY
        }


def test_config_sets_the_cache_and_the_wal(tmp_path: Path) -> None:
    # Strings too: configs also come from environment variables and --set.
    config = {"cache_mb": "8", "checkpoint_mb": 2, "page_size": "4096"}
    path = tmp_path / "state.db"
    with open_provider("sqlite", {"path": str(path), **config}) as provider:
        assert isinstance(provider, SQLiteStateProvider)
        _commit_one(provider)
        pragmas = _pragmas(provider)
    assert pragmas["page_size"] == 4096
    assert pragmas["cache_size"] == -8 * 1024
    assert pragmas["wal_autocheckpoint"] == 2 * 1024 * 1024 // 4096
    assert pragmas["journal_size_limit"] == 2 * 1024 * 1024


def test_an_existing_file_keeps_its_page_size(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with open_provider("sqlite", {"path": str(path), "page_size": 4096}) as provider:
        assert isinstance(provider, SQLiteStateProvider)
        _commit_one(provider)
    with open_provider("sqlite", {"path": str(path), "page_size": 1024}) as provider:
        assert isinstance(provider, SQLiteStateProvider)
        assert provider.get_state("count-0").get("k") == "v"
        pragmas = _pragmas(provider)
    assert pragmas["page_size"] == 4096
    # The checkpoint threshold is in MiB, so it follows the file's page size.
    assert pragmas["wal_autocheckpoint"] == 16 * 1024 * 1024 // 4096


def test_the_wal_stays_bounded(tmp_path: Path) -> None:
    # Commits of scattered keys, each writing ~65 pages of 1 KiB to the WAL:
    # without checkpoints it would reach ~4 MiB; with checkpoint_mb=1 it
    # stays within 1 MiB plus one commit.
    path = tmp_path / "state.db"
    config = {"path": str(path), "synchronous": "normal", "checkpoint_mb": 1, "page_size": 1024}
    wal = Path(f"{path}-wal")
    with open_provider("sqlite", config) as provider:
        state = provider.get_state("count-0")
        for i in range(2000):
            state.put(f"key-{i:05d}", "x" * 20)
        state.commit()
        largest = 0
        for txid in range(60):
            for i in range(txid % 37, 2000, 37):  # 55 keys, one in 37
                state.put(f"key-{i:05d}", txid)
            state.prepare_commit(txid)
            state.commit(txid)
            largest = max(largest, wal.stat().st_size)
        assert largest <= 1024 * 1024 + 200 * 1024, largest
    with _open(path) as provider:
        state = provider.get_state("count-0")
        assert state.committed_txid == 59
        for i in (0, 1, 1999):  # the last txid that changed key i
            assert state.get(f"key-{i:05d}") == max(t for t in range(60) if t % 37 == i % 37)


def test_a_large_delta_commits_in_one_transaction(tmp_path: Path) -> None:
    # A delta bigger than the WAL limit and than the page cache: sqlite spills
    # and checkpoints as needed, and the commit is still all or nothing.
    path = tmp_path / "state.db"
    config = {"path": str(path), "synchronous": "normal", "checkpoint_mb": 1, "cache_mb": 1}
    crashed = open_provider("sqlite", config)
    state = crashed.get_state("count-0")
    for i in range(30_000):
        state.put(i, "v" * 40)
    state.prepare_commit(0)
    state.commit(0)
    for i in range(0, 30_000, 2):
        state.delete(i)
    state.prepare_commit(1)
    # A crash: the instance is abandoned, its prepared delete of 15,000 keys stored.
    with open_provider("sqlite", config) as provider:
        state = provider.get_state("count-0")
        assert state.committed_txid == 0 and state.prepared_txid == 1
        assert state.get(0) == "v" * 40
        state.commit(1)
        assert sum(1 for _ in state) == 15_000
        assert 0 not in state and state.get(1) == "v" * 40
    crashed.close()


# -- a commit leaves the copy of its delta into the entries to a thread -----------------


def _raw(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _no_applier(monkeypatch: pytest.MonkeyPatch) -> None:
    """Commits as if the applier never got to run (slow, or the process died first)."""
    monkeypatch.setattr(SQLiteStateProvider, "_apply_later", lambda self, namespace: None)


def _two_commits(provider: SQLiteStateProvider) -> None:
    """txid 0 stores a..e; txid 1 updates a, deletes b and c, adds f."""
    state = provider.get_state("count-0")
    for i, key in enumerate("abcde"):
        state.put(key, i)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 10)
    state.delete("b")
    state.delete("c")
    state.put("f", 5)
    state.prepare_commit(1)
    state.commit(1)


AFTER_TWO = {"a": 10, "d": 3, "e": 4, "f": 5}


def test_reads_take_a_committed_delta_before_it_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    _no_applier(monkeypatch)
    with _open(path) as provider:
        _two_commits(provider)
        # Committed, not copied: the delta of txid 1 waits in statestream_prepared.
        assert _raw(path, "SELECT committed, prepared FROM statestream_txids") == [(1, 1)]
        assert len(_raw(path, "SELECT key FROM statestream_prepared")) == 4
        assert len(_raw(path, "SELECT key FROM statestream_entries")) == 5
    with _open(path) as provider:  # a fresh reader: nothing cached
        state = provider.get_state("count-0")
        assert (state.committed_txid, state.prepared_txid) == (1, None)
        assert {k: state.get(k) for k in "abcdef"} == {**dict.fromkeys("bc"), **AFTER_TWO}
        assert dict(state.items()) == AFTER_TWO
        # The next write of the namespace copies the delta first, in its own transaction.
        state.put("g", 6)
        state.prepare_commit(2)
        assert _raw(path, "SELECT committed, prepared FROM statestream_txids") == [(1, 2)]
        entries = _raw(path, "SELECT key FROM statestream_entries ORDER BY key")
        assert [bytes(k) for (k,) in entries] == [b'"a"', b'"d"', b'"e"', b'"f"']
        state.rollback()  # discards txid 2 only
    with _open(path) as provider:
        assert dict(provider.get_state("count-0").items()) == AFTER_TWO


def test_the_applier_copies_in_short_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_provider, "_APPLY_ROWS", 2)  # 4 rows: two transactions
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _two_commits(provider)
        for _ in range(500):
            if _raw(path, "SELECT prepared FROM statestream_txids") == [(None,)]:
                break
            time.sleep(0.01)
        assert _raw(path, "SELECT committed, prepared FROM statestream_txids") == [(1, None)]
        assert _raw(path, "SELECT key FROM statestream_prepared") == []
        stored = _raw(path, "SELECT key, value FROM statestream_entries ORDER BY key")
        assert [(bytes(k), bytes(v)) for k, v in stored] == [
            (f'"{k}"'.encode(), str(v).encode()) for k, v in AFTER_TWO.items()
        ]
        assert dict(provider.get_state("count-0").items()) == AFTER_TWO


def test_a_crash_before_the_copy_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    with monkeypatch.context() as patch:
        _no_applier(patch)
        crashed = _open(path)
        _two_commits(crashed)  # then the process dies: no close, no copy
    with _open(path) as provider:
        state = provider.get_state("count-0")
        assert state.committed_txid == 1 and dict(state.items()) == AFTER_TWO
        # Listing namespaces finishes the copy, so that the list is exact.
        assert provider.namespaces() == ["count-0"]
        assert _raw(path, "SELECT key FROM statestream_prepared") == []
        assert dict(provider.get_state("count-0").items()) == AFTER_TWO
    crashed.close()


def test_a_version_1_file_is_upgraded_in_place(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 1")  # version 1 has the same tables
    conn.commit()
    conn.close()
    with _open(path) as provider:
        assert provider.get_state("count-0").get("k") == "v"
    assert _raw(path, "PRAGMA user_version") == [(sqlite_provider.SCHEMA_VERSION,)]
    assert sqlite_provider.SCHEMA_VERSION == 2


def test_an_idle_applier_ends_and_the_next_commit_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_provider, "_IDLE", 0.05)
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider)
        first = provider._applier
        assert first is not None
        first.thread.join(10)
        assert not first.thread.is_alive() and first.ended
        state = provider.get_state("count-0")
        state.put("k", "w")
        state.prepare_commit(1)
        state.commit(1)
        assert provider._applier is not first
        for _ in range(500):
            if _raw(path, "SELECT prepared FROM statestream_txids") == [(None,)]:
                break
            time.sleep(0.01)
        assert _raw(path, "SELECT committed, prepared FROM statestream_txids") == [(1, None)]
        assert provider.get_state("count-0").get("k") == "w"
