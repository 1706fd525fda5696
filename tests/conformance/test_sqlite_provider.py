"""What only the sqlite provider promises: its file, its schema, its connection."""

from __future__ import annotations

import os
import pickle
import sqlite3
from pathlib import Path

import orjson
import pytest
from sqlite_files import sqlite_file

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
    with sqlite_file(path) as conn:
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
    with sqlite_file(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('ada')")
    with _open(path) as provider, pytest.raises(StateCorruptError, match="another application"):
        provider.get_state("count-0").committed_txid  # noqa: B018 - the read is the test
    with sqlite_file(path) as conn:
        assert conn.execute("SELECT name FROM users").fetchall() == [("ada",)]


def test_a_wrong_schema_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE statestream_log")
    conn.execute("CREATE TABLE statestream_log (namespace TEXT, k BLOB, v BLOB)")
    conn.commit()
    conn.close()
    with _open(path) as provider, pytest.raises(StateCorruptError, match="statestream_log"):
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
        conn = provider.database.connection()
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
        parent_conn = provider.database.connection()
        monkeypatch.setattr(os, "getpid", lambda: -1)  # as seen from a forked child
        assert provider.get_state("count-0").get("other") is None
        assert provider.database.connection() is not parent_conn
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
    conn = provider.database.connection()
    names = ("page_size", "cache_size", "wal_autocheckpoint", "journal_size_limit", "temp_store")
    return {name: conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names}


def test_defaults_tune_the_cache_and_the_wal(tmp_path: Path) -> None:
    with _open(tmp_path / "state.db") as provider:
        _commit_one(provider)
        assert _pragmas(provider) == {
            "page_size": 2048,
            "cache_size": -8 * 1024,  # KiB (issue 34: within the RSS bound)
            "wal_autocheckpoint": 16 * 1024 * 1024 // 2048,  # pages
            "journal_size_limit": 16 * 1024 * 1024,  # bytes
            "temp_store": 2,  # MEMORY
        }


def test_config_sets_the_cache_and_the_wal(tmp_path: Path) -> None:
    # Strings too: configs also come from environment variables and --set.
    config = {"cache_mb": "12", "checkpoint_mb": 2, "page_size": "4096"}
    path = tmp_path / "state.db"
    with open_provider("sqlite", {"path": str(path), **config}) as provider:
        assert isinstance(provider, SQLiteStateProvider)
        _commit_one(provider)
        pragmas = _pragmas(provider)
    assert pragmas["page_size"] == 4096
    assert pragmas["cache_size"] == -12 * 1024
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


def _log_records(path: Path, namespace: str) -> int:
    with sqlite_file(path) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM statestream_log WHERE namespace = ?", (namespace,)
        ).fetchone()
    return int(count)


def test_a_commit_writes_the_delta_as_one_log_record(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        state = provider.get_state("count-0")
        for i in range(1000):
            state.put(f"k{i}", i)
        state.prepare_commit(0)
        conn = provider.database.connection()
        before = conn.total_changes
        state.commit(0)
        # The txid row alone: the delta became committed where it was.
        assert conn.total_changes - before == 1
        assert _log_records(path, "count-0") == 1
    with _open(path) as provider:
        state = provider.get_state("count-0")
        assert state.committed_txid == 0 and state.get("k999") == 999


def test_committed_records_fold_into_the_entries(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    folds = sqlite_provider._FOLD_RECORDS
    with _open(path) as provider:
        state = provider.get_state("count-0")
        seen = []
        for txid in range(3 * folds):
            state.put(f"k{txid % 5}", txid)
            if txid % 7 == 3:
                state.delete("k0")
            state.prepare_commit(txid)
            state.commit(txid)
            seen.append(_log_records(path, "count-0"))
        # Never more than the fold threshold of records waits in the log.
        assert max(seen) == folds - 1 and min(seen) == 0
    with _open(path) as provider:
        state = provider.get_state("count-0")
        expected = {f"k{t % 5}": t for t in range(3 * folds)}
        last_delete = max(t for t in range(3 * folds) if t % 7 == 3)
        if max(t for t in range(3 * folds) if t % 5 == 0) < last_delete:
            del expected["k0"]
        assert dict(state.items()) == expected
        provider.compact()
        assert _log_records(path, "count-0") == 0
        with sqlite_file(path) as conn:
            rows = conn.execute(
                "SELECT key, value FROM statestream_entries WHERE namespace = 'count-0'"
            ).fetchall()
        assert {orjson.loads(k): orjson.loads(v) for k, v in rows} == expected


def test_point_reads_see_the_log_and_other_writers(tmp_path: Path) -> None:
    # A state too large to preload reads key by key: through the committed
    # log records, and again after another process has committed.
    path = tmp_path / "state.db"
    with _open(path) as writer, _open(path) as reader:
        w = writer.get_state("count-0")
        for i in range(50):
            w.put(i, "old")
        w.commit()
        writer.compact()
        w.put(7, "new")
        w.delete(8)
        w.prepare_commit(0)
        w.commit(0)
        w.put(9, "prepared only")
        w.prepare_commit(1)
        r = reader.get_state("count-0")
        r.preload_limit = 10  # type: ignore[attr-defined]
        assert (r.get(6), r.get(7), r.get(8, "gone"), r.get(9)) == ("old", "new", "gone", "old")
        backend = sqlite_provider._SQLiteBackend(reader.database, "count-0")
        assert backend.load(b"9") == b'"old"'  # the merged log is cached now
        w.commit(1)  # by another connection: the cache is stale
        assert backend.load(b"9") == b'"prepared only"'
        assert backend.load(b"8") is None and backend.load(b"6") == b'"old"'


def test_a_kept_merge_follows_this_process_writes(tmp_path: Path) -> None:
    # data_version changes only on other connections' commits: writes through
    # another backend object of the same connection, and a drop, must be seen.
    with _open(tmp_path / "state.db") as provider:
        kept = provider._open_backend("count-0")
        kept.commit_direct([(b"1", b"1")])
        assert kept.load(b"1") == b"1"  # the merged log is kept now
        sqlite_provider._SQLiteBackend(provider.database, "count-0").commit_direct([(b"1", b"2")])
        assert kept.load(b"1") == b"2"
        provider._drop(["count-0"])
        assert kept.load(b"1") is None


def test_namespaces_follow_the_log(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider, "logged-0")  # only in the log
        gone = provider.get_state("gone-0")
        gone.put("k", 1)
        gone.commit()
        provider.compact("gone-0")
        gone.delete("k")
        gone.commit()  # in the entries, deleted by the log
        prepared = provider.get_state("prepared-0")
        prepared.put("k", 1)
        prepared.prepare_commit(0)  # not committed: not listed
        assert provider.namespaces() == ["logged-0"]


def test_a_damaged_log_record_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        _commit_one(provider)
    with sqlite_file(path) as conn:
        conn.execute("UPDATE statestream_log SET delta = substr(delta, 1, 9)")
    with _open(path) as provider, pytest.raises(StateCorruptError, match="log record"):
        provider.get_state("count-0").get("k")


@pytest.mark.parametrize(
    "delta",
    [
        [],
        [(b'"a"', b"1")],
        [(b'"a"', None), (b"2", b""), (b'"\\u00e9"', bytes(range(256))), (b"x" * 70_000, None)],
    ],
)
def test_delta_records_round_trip(delta: list[tuple[bytes, bytes | None]]) -> None:
    keys, values = sqlite_provider.decode_delta(sqlite_provider.encode_delta(delta))
    assert list(zip(keys, values, strict=True)) == delta
    with pytest.raises(ValueError, match="too many"):
        sqlite_provider.decode_delta(sqlite_provider.encode_delta(delta) + b"x")


def _schema_1_file(path: Path) -> None:
    """A file as statestream wrote it before the log (schema 1): committed entries,
    a prepared delta of txid 4 over committed txid 3."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE statestream_entries (namespace TEXT NOT NULL, key BLOB NOT NULL,"
        " value BLOB NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.execute(
        "CREATE TABLE statestream_prepared (namespace TEXT NOT NULL, key BLOB NOT NULL,"
        " value BLOB, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.execute(
        "CREATE TABLE statestream_txids (namespace TEXT NOT NULL PRIMARY KEY,"
        " committed INTEGER NOT NULL DEFAULT -1, prepared INTEGER) WITHOUT ROWID"
    )
    conn.execute(f"PRAGMA application_id = {sqlite_provider.APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.executemany(
        "INSERT INTO statestream_entries VALUES ('count-0', ?, ?)",
        [(b'"a"', b"1"), (b'"b"', b"2"), (b'"c"', b"3")],
    )
    conn.executemany(
        "INSERT INTO statestream_prepared VALUES ('count-0', ?, ?)",
        [(b'"a"', b"10"), (b'"b"', None), (b'"d"', b"4")],
    )
    conn.execute("INSERT INTO statestream_txids VALUES ('count-0', 3, 4)")
    conn.close()


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
def test_a_schema_1_file_is_upgraded_in_place(tmp_path: Path, outcome: str) -> None:
    path = tmp_path / "state.db"
    _schema_1_file(path)
    with _open(path) as provider:
        state = provider.get_state("count-0")
        assert (state.committed_txid, state.prepared_txid) == (3, 4)
        assert dict(state.items()) == {"a": 1, "b": 2, "c": 3}
        if outcome == "commit":
            state.commit(4)
        else:
            state.rollback()
    with sqlite_file(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == sqlite_provider.SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "statestream_prepared" not in tables
    with _open(path) as provider:
        state = provider.get_state("count-0")
        if outcome == "commit":
            assert dict(state.items()) == {"a": 10, "c": 3, "d": 4}
        else:
            assert dict(state.items()) == {"a": 1, "b": 2, "c": 3}


def test_plain_records_read_back_as_the_state_encodes() -> None:
    from statestream._serde import encode_json

    plain = {"a": 1, "b": "x,y", "c": None, "d": True, "e": -(2**60), "f\\n": "\u007f"}
    delta = [(encode_json(("t", 1)), None), (encode_json(7), b"\x80\x04")]
    record = sqlite_provider.encode_plain_delta(plain, delta)
    keys, values = sqlite_provider.decode_delta(record)
    assert sorted(zip(keys, values, strict=True), key=repr) == sorted(
        [*delta, *((encode_json(k), encode_json(v)) for k, v in plain.items())], key=repr
    )
    with pytest.raises(ValueError, match="JSON document"):
        sqlite_provider.decode_delta(record[:12] + b"\xff" + record[13:])


def test_deferred_puts_go_to_the_log_unencoded(tmp_path: Path) -> None:
    # The state's unencoded puts (ASCII str keys, plain values) are one JSON
    # document in the record; the rest, and what reads them, are unchanged.
    path = tmp_path / "state.db"
    with _open(path) as provider:
        state = provider.get_state("count-0")
        state.put("plain", 1)
        state.put(("tuple", "key"), 2)
        state.put("dict", {"v": 3})
        state.put("gone", 4)
        state.delete("gone")
        state.prepare_commit(0)
        with sqlite_file(path) as conn:
            (record,) = conn.execute("SELECT delta FROM statestream_log").fetchone()
        assert record[:4] == b"SSj1" and b'{"plain":1}' in record
        assert state.get("plain") == 1 and dict(state.items())["plain"] == 1
        state.rollback()
        assert state.get("plain") is None
        state.put("plain", 5)
        state.prepare_commit(0)
        state.commit(0)
    with _open(path) as provider:
        assert dict(provider.get_state("count-0").items()) == {"plain": 5}


def test_records_merge_in_the_order_they_were_written() -> None:
    # Plain documents and rows of the same key, across records: the later wins,
    # whichever form each took.
    from statestream._serde import encode_json

    records = [
        sqlite_provider.encode_plain_delta({"a": 1, "b": 1, "c": 1}, []),
        sqlite_provider.encode_delta(
            [(encode_json("a"), encode_json({"v": 2})), (encode_json("b"), None)]
        ),
        sqlite_provider.encode_plain_delta({"a": 3}, [(encode_json(("t",)), b"4")]),
        sqlite_provider.encode_delta([(encode_json("c"), None)]),
        sqlite_provider.encode_plain_delta({"c": 5}, []),
    ]
    merged = sqlite_provider.merge_records(records)
    assert merged == {
        encode_json("a"): encode_json(3),
        encode_json("b"): None,
        encode_json("c"): encode_json(5),
        encode_json(("t",)): b"4",
    }
    # Record by record, applied in order, gives the same.
    one_by_one: dict[bytes, bytes | None] = {}
    for record in records:
        one_by_one.update(zip(*sqlite_provider.decode_delta(record), strict=True))
    assert one_by_one == merged
