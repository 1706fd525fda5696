"""A state behind the outage guard still hands its deferred puts to a backend that
stores them as they are (issue 34: the guard hid ``write_prepared_plain``, so
every checkpoint encoded each put one by one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statestream import FakeClock
from statestream._kvstate import CommitOutcome, StoredKeyValueState
from statestream._outage import GuardedBackend, OutageGuard, StoreOutage
from statestream._serde import JsonSerializer


class _Plain:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def load(self, key: bytes) -> bytes | None:
        return None

    def load_txids(self) -> tuple[int, int | None]:
        return -1, None

    def scan(self) -> list[tuple[bytes, bytes]]:
        return []

    def write_prepared(self, txid: int, delta: object) -> None:
        self.calls.append(("write_prepared", txid))

    def write_prepared_plain(self, txid: int, plain: Mapping[str, Any], delta: object) -> None:
        self.calls.append(("write_prepared_plain", dict(plain)))

    def apply_prepared(self, txid: int) -> CommitOutcome:
        return CommitOutcome.APPLIED

    def discard_prepared(self) -> None:
        pass


def test_the_guard_passes_the_plain_prepare_through() -> None:
    inner = _Plain()
    guarded = GuardedBackend(inner, OutageGuard(StoreOutage("test", 1.0), FakeClock()))  # type: ignore[arg-type]
    state = StoredKeyValueState("ns", guarded, JsonSerializer())  # type: ignore[arg-type]
    state.put("word", 3)
    state.prepare_commit(0)
    assert inner.calls == [("write_prepared_plain", {"word": 3})]
    state.commit(0)
    assert state.get("word") == 3


def test_prepared_bytes_is_what_the_prepare_sent() -> None:
    inner = _Plain()
    state = StoredKeyValueState("ns", inner, JsonSerializer())  # type: ignore[arg-type]
    assert state.prepared_bytes == 0
    state.put("word", 3)  # deferred: the backend's count is not an int here
    state.put(("a", 1), [1, 2])  # encoded at put: b'["a",1]' and b"[1,2]"
    state.prepare_commit(0)
    assert state.prepared_bytes == len(b'["a",1]') + len(b"[1,2]")
    state.delete("gone")  # a tombstone: its key
    state.prepare_commit(0)  # the same txid again: added
    assert state.prepared_bytes == len(b'["a",1]') + len(b"[1,2]") + len(b'"gone"')
    state.commit(0)
    assert state.prepared_bytes == 0


def test_sqlite_says_the_bytes_of_its_record(tmp_path: Any) -> None:
    from statestream_providers.sqlite import SQLiteStateProvider, encode_plain_delta

    with SQLiteStateProvider(str(tmp_path / "s.db")) as provider:
        state = provider.get_state("ns")
        state.put("word", 3)
        state.put("other", "x")
        state.prepare_commit(0)
        assert state.prepared_bytes == len(encode_plain_delta({"word": 3, "other": "x"}, []))
        state.rollback()
        assert state.prepared_bytes == 0
