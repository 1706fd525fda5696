"""What only the sqlite provider promises: its file, its schema, its connection."""

from __future__ import annotations

import os
import pickle
import sqlite3
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


def test_each_commit_is_one_transaction(tmp_path: Path) -> None:
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
