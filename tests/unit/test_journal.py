"""The per-tuple undo journal (statestream._journal): a failed tuple leaves no effect."""

from __future__ import annotations

from typing import Any

import pytest

from statestream._journal import TupleJournal


class DictState:
    """The part of a key-value state the journal uses."""

    def __init__(self, data: dict[Any, Any] | None = None) -> None:
        self.data = dict(data or {})
        self.prepared_txid: int | None = None

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def delete(self, key: Any) -> Any:
        return self.data.pop(key, None)

    def __iter__(self) -> Any:
        return iter(self.data)

    def __contains__(self, key: object) -> bool:
        return key in self.data


# (state before, the tuple's writes, the state after its undo): undo puts back
# exactly what the tuple found, whatever it did to each key, in any order.
UNDO_TABLE: list[tuple[dict[str, int], list[tuple[str, str, int | None]], dict[str, int]]] = [
    ({}, [], {}),
    ({}, [("put", "a", 1)], {}),
    ({"a": 1}, [("put", "a", 2)], {"a": 1}),
    ({"a": 1}, [("put", "a", 2), ("put", "a", 3)], {"a": 1}),
    ({"a": 1}, [("delete", "a", None)], {"a": 1}),
    ({"a": 1}, [("delete", "a", None), ("put", "a", 5)], {"a": 1}),
    ({}, [("put", "a", 1), ("delete", "a", None)], {}),
    ({}, [("delete", "missing", None)], {}),
    ({"a": 1, "b": 2}, [("put", "b", 9), ("put", "c", 3), ("delete", "a", None)], {"a": 1, "b": 2}),
]


@pytest.mark.parametrize(("before", "writes", "after"), UNDO_TABLE)
def test_undo_puts_back_what_the_tuple_found(
    before: dict[str, int], writes: list[tuple[str, str, int | None]], after: dict[str, int]
) -> None:
    state = DictState(before)
    journal = TupleJournal(state)
    journal.begin()
    for op, key, value in writes:
        if op == "put":
            journal.put(key, value)
        else:
            journal.delete(key)
    journal.undo()
    assert state.data == after


def test_begin_keeps_what_the_last_tuple_did() -> None:
    state = DictState({"a": 1})
    journal = TupleJournal(state)
    journal.begin()
    journal.put("a", 2)  # this tuple succeeded
    journal.begin()
    journal.put("a", 3)
    journal.put("b", 4)
    journal.undo()  # the second failed
    assert state.data == {"a": 2}
    journal.undo()  # nothing journaled any more: a second undo changes nothing
    assert state.data == {"a": 2}


def test_writes_reach_the_state_at_once_and_reads_pass_through() -> None:
    state = DictState({"a": 1})
    journal = TupleJournal(state)
    journal.begin()
    journal.put("b", 2)
    assert state.data == {"a": 1, "b": 2}
    assert journal.get("b") == 2 and journal.delete("a") == 1
    assert list(journal) == ["b"] and "b" in journal and "a" not in journal
    assert journal.prepared_txid is None  # any other attribute is the state's
