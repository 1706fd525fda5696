"""The sqlite backend's kept merge of the committed log (issue 34): a miss in a run
asks the store one point read, a commit merges nothing until a read needs it, and
whatever fails, reads stay exact."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest

from statestream._errors import ProviderUnavailableError
from statestream._registry import open_provider
from statestream_providers import sqlite as sqlite_provider
from statestream_providers.sqlite import SQLiteStateProvider
from statestream_providers.sqlite import backend as sqlite_backend


def _open(path: Path) -> SQLiteStateProvider:
    provider = open_provider("sqlite", {"path": str(path), "synchronous": "off"})
    assert isinstance(provider, SQLiteStateProvider)
    return provider


def _statements(provider: SQLiteStateProvider) -> list[str]:
    seen: list[str] = []
    provider.database.connection().set_trace_callback(seen.append)
    return seen


def test_a_miss_after_its_own_commit_is_one_point_read(tmp_path: Path) -> None:
    with _open(tmp_path / "state.db") as provider:
        backend = provider._open_backend("count-0")
        backend.commit_direct([(b"1", b"1")])
        backend.fold()
        backend.write_prepared(0, [(b"2", b"2")])
        backend.apply_prepared(0)  # in the log, not folded
        seen = _statements(provider)
        assert (backend.load(b"1"), backend.load(b"2"), backend.load(b"3")) == (b"1", b"2", None)
        # No PRAGMA data_version, no look at the log: the point reads of the
        # two keys not in the log, and nothing else.
        assert len(seen) == 2
        assert all(sql.startswith("SELECT value FROM statestream_entries") for sql in seen)


def test_a_commit_merges_no_record_until_a_read_needs_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merges: list[int] = []
    real = sqlite_backend.merge_records

    def counted(records: list[bytes]) -> dict[bytes, bytes | None]:
        records = list(records)
        merges.append(len(records))
        return real(records)

    monkeypatch.setattr(sqlite_backend, "merge_records", counted)
    with _open(tmp_path / "state.db") as provider:
        state = provider.get_state("count-0")
        folds = sqlite_provider._FOLD_RECORDS
        for txid in range(folds):
            state.put(f"k{txid}", txid)
            state.prepare_commit(txid)
            state.commit(txid)
        # The fold merged the records once, all together, as it reads them.
        assert merges == [folds]
        backend = provider._open_backend("count-0")
        backend.write_prepared(folds, [(b'"x"', b"1")])
        backend.apply_prepared(folds)
        assert merges == [folds]
        assert backend.load(b'"x"') == b"1" and merges == [folds, 1]


def test_a_failed_commit_leaves_the_reads_at_the_last_committed_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _open(tmp_path / "state.db") as provider:
        backend = provider._open_backend("count-0")
        backend.write_prepared(0, [(b"1", b"old")])
        backend.apply_prepared(0)
        assert backend.load(b"1") == b"old"
        backend.write_prepared(1, [(b"1", b"new")])

        def broken(*args: object) -> None:
            raise sqlite3.OperationalError("database is locked")

        monkeypatch.setattr(sqlite_backend, "_upsert_entries", broken)
        with pytest.raises(ProviderUnavailableError):
            backend.fold()  # forced: reaches the upsert, which fails
        assert backend.load(b"1") == b"old"
        monkeypatch.setattr(sqlite_backend._SQLiteBackend, "_fold", lambda *a, **k: broken())
        with pytest.raises(ProviderUnavailableError):
            backend.apply_prepared(1)  # the commit is rolled back
        assert backend.load(b"1") == b"old"
        monkeypatch.undo()
        assert backend.apply_prepared(1).value == "applied"
        assert backend.load(b"1") == b"new"


def test_kept_merges_stay_exact_through_commits_folds_rollbacks_and_other_writers(
    tmp_path: Path,
) -> None:
    # A random run of prepares, commits, rollbacks, direct commits and folds on
    # one namespace, read after each step by the writing backend (its kept
    # merge trusted), a second backend object of the same provider, and a
    # backend of another connection: all three read the model.
    rng = random.Random(34)
    keys = [str(i).encode() for i in range(40)]
    model: dict[bytes, bytes] = {}
    path = tmp_path / "state.db"
    with _open(path) as provider, _open(path) as other:
        writer = provider._open_backend("count-0")
        txid = 0
        for step in range(400):
            action = rng.random()
            delta = [
                (k, None if rng.random() < 0.2 else f"{step}".encode())
                for k in rng.sample(keys, rng.randint(1, 12))
            ]
            if action < 0.5:
                writer.write_prepared(txid, delta)
                if rng.random() < 0.2:
                    writer.discard_prepared()
                else:
                    assert writer.apply_prepared(txid).value == "applied"
                    for k, v in delta:
                        if v is None:
                            model.pop(k, None)
                        else:
                            model[k] = v
                    txid += 1
            elif action < 0.75:
                # Direct commits through this object or, now and then, a
                # second object of the same provider (the writer must see it).
                target = (
                    writer
                    if rng.random() < 0.7
                    else sqlite_provider._SQLiteBackend(provider.database, "count-0")
                )
                target.commit_direct(delta)
                for k, v in dict(delta).items():
                    if v is None:
                        model.pop(k, None)
                    else:
                        model[k] = v
            elif action < 0.85:
                writer.fold()
            for k in rng.sample(keys, 10):
                assert writer.load(k) == model.get(k), (step, k)
            fresh = other._open_backend("count-0")
            for k in rng.sample(keys, 5):
                assert fresh.load(k) == model.get(k), (step, k)
        assert dict(writer.scan()) == model
