"""The per-tuple undo journal of StoredKeyValueState (exactly-once retries a failed
tuple in place: its writes are undone before it runs again)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from statestream._kvjournal import UndoJournal
from statestream._kvstate import StoredKeyValueState
from statestream._registry import open_provider


@pytest.fixture
def state(tmp_path: Path) -> Iterator[StoredKeyValueState]:
    provider = open_provider("sqlite", {"path": str(tmp_path / "s.db")}, scope="t")
    st = provider.get_state("count-0")
    assert isinstance(st, StoredKeyValueState)
    st.put("kept", 1)
    st.put(("a", 1), "tuple key")
    st.prepare_commit(0)
    st.commit(0)
    yield st
    provider.close()  # its connection, not left to the collector (a warning from 3.13)


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.put("kept", 2),
        lambda s: s.put("new", 1),
        lambda s: s.delete("kept"),
        lambda s: (s.put("kept", 5), s.put("kept", 6), s.delete("kept"), s.put("kept", 7)),
        lambda s: s.put("kept", s.get("kept") + 10),  # the word count's read, then write
        lambda s: (s.get("new"), s.put("new", 1), s.put("new", s.get("new") + 1)),
        lambda s: (s.get("kept"), s.put("other", 1), s.put("kept", 9)),
        lambda s: (s.put(1, "int"), s.put(True, "bool")),  # two keys that compare equal
        lambda s: s.put(("a", 1), "changed"),
        lambda s: s.delete(("a", 1)),
    ],
)
def test_undo_puts_back_what_the_tuple_changed(state: StoredKeyValueState, change: object) -> None:
    state.start_journal()
    state.journal_begin()
    state.put("before", state.get("before", 0) + 1)  # an earlier tuple's write: kept
    state.journal_begin()
    before = dict(state.items())
    change(state)  # type: ignore[operator]
    state.journal_undo()
    assert dict(state.items()) == before
    # What is undone is undone in the store too.
    state.prepare_commit(1)
    state.commit(1)
    assert dict(state.items()) == before


def test_journal_begin_forgets_the_last_tuple(state: StoredKeyValueState) -> None:
    state.start_journal()
    state.journal_begin()
    state.put("kept", 2)
    state.journal_begin()  # the next tuple: the last one's write stays
    state.put("kept", 3)
    state.journal_undo()
    assert state.get("kept") == 2


def test_without_a_journal_nothing_is_recorded(state: StoredKeyValueState) -> None:
    state.put("kept", 2)
    state.journal_begin()
    state.journal_undo()
    assert state.get("kept") == 2


def test_the_undo_journal_alone_keeps_each_key_once_in_order_and_starts_afresh() -> None:
    j = UndoJournal()
    for key, old in [("a", 1), (1, "one"), ("b", None), (True, "true")]:
        assert not j.holds(key)
        j.remember(key, old)
    assert j.holds(1) and j.holds(True) and not j.holds(2)  # 1 and True are two keys
    j.read("c", 5)
    assert (j.last_read("c", "?"), j.last_read("a", "?")) == (5, "?")
    assert j.take() == [("a", 1), (1, "one"), ("b", None), (True, "true")]
    assert not j.holds("a") and j.last_read("c", "?") == "?"
    j.remember("z", 0)  # the lists are reused, only the first n count
    assert j.take() == [("z", 0)]
