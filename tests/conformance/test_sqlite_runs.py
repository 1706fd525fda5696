"""The sqlite provider's sorted runs (providers/sqlite/runs.py): a large namespace's
folds, their merges, the upgrade of files written before them, and kills in the
middle of a merge. The whole conformance suite also runs on them (``sqlite-runs``
in conftest.py)."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlite_files import sqlite_file

from statestream._errors import StoreUnwritableError
from statestream._registry import open_provider
from statestream_providers import sqlite as sqlite_provider
from statestream_providers.sqlite import SQLiteStateProvider, backend, runs


def _open(path: Path) -> SQLiteStateProvider:
    provider = open_provider("sqlite", {"path": str(path), "synchronous": "normal"})
    assert isinstance(provider, SQLiteStateProvider)
    return provider


def _runs(path: Path, namespace: str = "count-0") -> list[tuple[int, int, int]]:
    """(run, level, rows) of the namespace's runs, newest first."""
    with sqlite_file(path) as conn:
        return [
            (r, level, rows)
            for r, level, rows in conn.execute(
                "SELECT run, level, rows FROM statestream_run_list WHERE namespace = ?"
                " ORDER BY run DESC",
                (namespace,),
            )
        ]


def _entries(path: Path, namespace: str = "count-0") -> int:
    with sqlite_file(path) as conn:
        (count,) = conn.execute(
            "SELECT count(*) FROM statestream_entries WHERE namespace = ?", (namespace,)
        ).fetchone()
    return int(count)


def _check(state: Any, model: dict[str, int], rng: random.Random) -> None:
    assert dict(state.items()) == model
    keys = [*rng.sample(sorted(model), min(50, len(model))), "never-0", "never-1"]
    assert state.get_many(keys) == [model.get(k) for k in keys]
    for key in keys[:10]:
        assert state.get(key) == model.get(key)


def test_a_large_namespace_folds_into_runs_then_into_its_entries(tmp_path: Path) -> None:
    # The built-in settings: 20,000 entries, then commits of 100 keys. A fold's
    # keys are a few hundredths of the entries: it becomes a run; the runs go
    # into the entries once they hold a quarter of their rows.
    path = tmp_path / "state.db"
    rng = random.Random(7)
    model = {f"w{i}": 0 for i in range(20_000)}
    seen_runs: list[list[tuple[int, int, int]]] = []
    with _open(path) as provider:
        state = provider.get_state("count-0")
        for key in model:
            state.put(key, 0)
        state.commit()
        provider.compact()
        for txid in range(2 * runs.RUN_RECORDS + 3 * backend._FOLD_RECORDS):
            for _ in range(100):
                key = f"w{rng.randrange(20_000)}"
                model[key] = txid
                state.put(key, txid)
            if txid % 9 == 4:
                gone = rng.choice(sorted(model))
                del model[gone]
                state.delete(gone)
            state.prepare_commit(txid)
            state.commit(txid)
            seen_runs.append(_runs(path))
        _check(state, model, rng)
    # A fold wrote a run (its rows in key order under a new number), and the
    # runs went into the entries when they held a quarter of them.
    assert any(seen_runs), "no fold became a run"
    first = next(r for r in seen_runs if r)
    assert first[0][1] == 0 and first[0][2] >= 8 * 100 - 50
    emptied = [i for i in range(1, len(seen_runs)) if seen_runs[i - 1] and not seen_runs[i]]
    assert emptied, "the runs never went into the entries"
    with _open(path) as provider:
        _check(provider.get_state("count-0"), model, rng)
        provider.compact()
        assert _runs(path) == [] and _entries(path) == len(model)
        _check(provider.get_state("count-0"), model, rng)


def test_a_growing_namespace_counts_its_entries_only_when_a_fold_may_become_a_run(
    tmp_path: Path,
) -> None:
    # Folds of 800 new keys each (8 commits of 100): the entries grow by 800 a
    # fold. The fold goes into the entries until they hold DENSE times its keys
    # (6,400: after the 8th fold), and the 9th becomes the first run; the entries
    # are counted at the first fold and at the 9th only, not at every fold.
    path = tmp_path / "state.db"
    counts: list[str] = []
    model: dict[str, int] = {}
    per_fold = backend._FOLD_RECORDS * 100
    with _open(path) as provider:
        state = provider.get_state("count-0")
        first_run = None
        for txid in range(10 * backend._FOLD_RECORDS):
            for i in range(100):
                key = f"w{txid:04d}-{i:03d}"
                model[key] = txid
                state.put(key, txid)
            state.prepare_commit(txid)
            if txid == 0:  # the connection is open after the first prepare
                conn = provider.database.conn
                assert conn is not None
                conn.set_trace_callback(
                    lambda sql: counts.append(sql) if "count(*)" in sql else None
                )
            state.commit(txid)
            if first_run is None and _runs(path):
                first_run = (txid + 1) // backend._FOLD_RECORDS
                assert _entries(path) == runs.DENSE * per_fold
        assert first_run == runs.DENSE + 1
        assert len(counts) == 2, counts
        _check(state, model, random.Random(3))


@pytest.fixture
def small_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fold a run, runs merged by twos, the entries taken only while empty."""
    monkeypatch.setattr(backend, "_FOLD_RECORDS", 1)
    monkeypatch.setattr(runs, "RUN_RECORDS", 1)
    monkeypatch.setattr(runs, "DENSE", 0)
    monkeypatch.setattr(runs, "FANOUT", 2)
    monkeypatch.setattr(runs, "BASE_SHARE", 0)


@pytest.mark.usefixtures("small_runs")
def test_levels_of_runs_with_tombstones_read_exactly_after_each_reopen(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    rng = random.Random(11)
    model: dict[str, int] = {}
    levels: set[int] = set()
    for txid in range(40):
        with _open(path) as provider:
            state = provider.get_state("count-0")
            state.preload_limit = 0  # type: ignore[attr-defined]  # reads go to the store
            _check(state, model, rng)
            for _ in range(30):
                key = f"k{rng.randrange(120)}"
                if key in model and rng.random() < 0.3:
                    del model[key]
                    state.delete(key)
                else:
                    model[key] = txid
                    state.put(key, txid)
            state.prepare_commit(txid)
            state.commit(txid)
            _check(state, model, rng)
            levels.update(level for _, level, _ in _runs(path))
    assert max(levels) >= 3, levels
    with _open(path) as provider:
        assert provider.namespaces() == ["count-0"]
        for key in list(model):
            provider.get_state("count-0").delete(key)
        provider.get_state("count-0").commit()
        # Every key deleted, the tombstones in a run over the entries: nothing is listed.
        assert provider.namespaces() == []
        assert dict(provider.get_state("count-0").items()) == {}


@pytest.mark.usefixtures("small_runs")
def test_a_failed_merge_leaves_the_committed_state_and_the_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "state.db"
    with _open(path) as provider:
        state = provider.get_state("count-0")
        for txid in range(4):  # runs of levels 0 and 1: the next fold merges
            state.put(f"k{txid}", txid)
            state.prepare_commit(txid)
            state.commit(txid)
        before = _runs(path)
        real = runs._merge_level

        def fail(conn: sqlite3.Connection, *args: Any) -> Any:
            real(conn, *args)  # done in the transaction, then the disk fails
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(runs, "_merge_level", fail)
        state.put("k4", 4)
        state.prepare_commit(4)
        # The commit's own transaction (its run) is done; the merge after it failed.
        with pytest.raises(StoreUnwritableError):
            state.commit(4)
        assert len(_runs(path)) == len(before) + 1
        monkeypatch.setattr(runs, "_merge_level", real)
        # A failed commit is sent again (the runtime's rule): the store has it already.
        state.commit(4)
        assert state.get("k4") == 4 and state.committed_txid == 4
        assert len(_runs(path)) == len(before) + 1  # no fold: the runs wait for the next
    with _open(path) as provider:
        state = provider.get_state("count-0")
        assert dict(state.items()) == {f"k{t}": t for t in range(5)}
        state.put("k5", 5)
        state.prepare_commit(5)
        state.commit(5)  # the next fold's merges take the runs left
        assert len(_runs(path)) < len(before) + 2
        assert dict(state.items()) == {f"k{t}": t for t in range(6)}


def _schema_2_file(path: Path) -> None:
    """A file as statestream wrote it before the runs (schema 2): folded entries,
    a committed log record and a prepared one."""
    encode = sqlite_provider.encode_delta
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE statestream_entries (namespace TEXT NOT NULL, key BLOB NOT NULL,"
        " value BLOB NOT NULL, PRIMARY KEY (namespace, key)) WITHOUT ROWID"
    )
    conn.execute(
        "CREATE TABLE statestream_log (seq INTEGER PRIMARY KEY, namespace TEXT NOT NULL,"
        " txid INTEGER NOT NULL, delta BLOB NOT NULL)"
    )
    conn.execute("CREATE INDEX statestream_log_namespace ON statestream_log (namespace, txid)")
    conn.execute(
        "CREATE TABLE statestream_txids (namespace TEXT NOT NULL PRIMARY KEY,"
        " committed INTEGER NOT NULL DEFAULT -1, prepared INTEGER) WITHOUT ROWID"
    )
    conn.execute(f"PRAGMA application_id = {sqlite_provider.APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 2")
    conn.executemany(
        "INSERT INTO statestream_entries VALUES ('count-0', ?, ?)",
        [(orjson.dumps(f"w{i}"), orjson.dumps(i)) for i in range(1000)],
    )
    conn.executemany(
        "INSERT INTO statestream_log (namespace, txid, delta) VALUES ('count-0', ?, ?)",
        [
            (5, encode([(b'"w1"', b"100"), (b'"w2"', None), (b'"new"', b"7")])),
            (6, encode([(b'"w3"', b"300")])),
        ],
    )
    conn.execute("INSERT INTO statestream_txids VALUES ('count-0', 5, 6)")
    conn.close()


def test_a_schema_2_file_reads_exactly_after_the_upgrade(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    _schema_2_file(path)
    expected: dict[str, int] = {f"w{i}": i for i in range(1000)}
    expected.update({"w1": 100, "new": 7})
    del expected["w2"]
    with _open(path) as provider:
        state = provider.get_state("count-0")
        assert (state.committed_txid, state.prepared_txid) == (5, 6)
        assert dict(state.items()) == expected
        assert state.get_many(["w1", "w2", "w3", "new"]) == [100, None, 3, 7]
        state.commit(6)
        expected["w3"] = 300
        assert dict(state.items()) == expected
    with sqlite_file(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert conn.execute("SELECT count(*) FROM statestream_runs").fetchone()[0] == 0
    with _open(path) as provider:
        assert dict(provider.get_state("count-0").items()) == expected


# A process committing forever with small runs (every fold a run, merges by
# twos, the runs into the entries once they hold as many rows): txid t puts
# 200 keys and deletes a few, the same ones whatever the run; it prints each
# committed txid.
_WRITER = textwrap.dedent(
    """
    import random, sys
    from statestream._registry import open_provider
    from statestream_providers.sqlite import backend, runs

    backend._FOLD_RECORDS = 1
    runs.RUN_RECORDS, runs.DENSE, runs.FANOUT, runs.BASE_SHARE = 1, 0, 2, 1
    provider = open_provider("sqlite", {"path": sys.argv[1], "synchronous": "normal"})
    state = provider.get_state("count-0")
    txid = state.committed_txid + 1
    while True:
        for key, value in ops(txid):
            if value is None:
                state.delete(key)
            else:
                state.put(key, value)
        state.prepare_commit(txid)
        state.commit(txid)
        print(txid, flush=True)
        txid += 1
    """
)
_OPS = textwrap.dedent(
    """
    def ops(txid):
        rng = random.Random(txid)
        out = [(f"k{rng.randrange(3000)}", txid) for _ in range(200)]
        return out + [(f"k{rng.randrange(3000)}", None) for _ in range(5)]
    """
)


def _model(upto: int) -> dict[str, int]:
    namespace: dict[str, Any] = {"random": random}
    exec(_OPS, namespace)
    model: dict[str, int] = {}
    for txid in range(upto + 1):
        for key, value in namespace["ops"](txid):
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
    return model


def test_sigkill_in_folds_and_merges_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    script = tmp_path / "writer.py"
    script.write_text("import random\n" + _OPS + _WRITER)
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    print(f"kill seed {seed}")
    rng.seed(seed)
    layouts = []
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, str(script), str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        printed = -1
        stop_after = rng.randrange(3, 25)
        for line in proc.stdout:
            printed = int(line)
            if stop_after == 0:
                break
            stop_after -= 1
        time.sleep(rng.uniform(0, 0.03))  # somewhere in the next commits, folds, merges
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        with _open(path) as provider:
            state = provider.get_state("count-0")
            committed = state.committed_txid
            assert committed >= printed
            assert dict(state.items()) == _model(committed)
        layouts.append(_runs(path))
    assert any(layouts), "no kill left runs to read"
