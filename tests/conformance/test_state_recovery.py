"""Reopen after a crash between any two steps.

A scripted sequence of state operations runs against a model. For every cut
point, the steps before it run on one provider instance, which is then
abandoned without close (the crash); a new instance with the same config
must show exactly the last committed state, keep the prepared txid, and
recover both ways the checkpoint spout may choose: commit the prepared txid
or roll it back. Then the state must go on working.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from statestream._state import KeyValueState

_TOMBSTONE = object()

Step = tuple[Any, ...]

SCRIPT: list[Step] = [
    ("put", "a", 1),
    ("put", "b", {"nested": [1, None]}),
    ("prepare", 0),
    ("put", "c", None),
    ("commit", 0),
    ("delete", "a"),
    ("put", "b", "b1"),
    ("prepare", 1),
    ("put", "d", [4]),
    ("prepare", 1),  # re-prepare: d joins txid 1
    ("commit", 1),
    ("put", "e", 5),
    ("delete", "c"),
    ("commit", None),  # direct commit: e, -c
    ("put", "f", 6),
    ("prepare", 2),
    ("rollback",),
    ("put", "g", 7),
    ("delete", "b"),
    ("prepare", 2),
    ("commit", 2),
    ("commit", 2),  # duplicate
    ("put", "a", "again"),
    ("prepare", 3),
]


@dataclass
class Model:
    """What a state must show, kept with plain dicts."""

    committed: dict[Any, Any] = field(default_factory=dict)
    prepared: dict[Any, Any] = field(default_factory=dict)
    pending: dict[Any, Any] = field(default_factory=dict)
    committed_txid: int = -1
    prepared_txid: int | None = None

    @staticmethod
    def _apply(target: dict[Any, Any], delta: dict[Any, Any]) -> None:
        for key, value in delta.items():
            if value is _TOMBSTONE:
                target.pop(key, None)
            else:
                target[key] = value

    def step(self, op: str, *args: Any) -> None:
        if op == "put":
            self.pending[args[0]] = args[1]
        elif op == "delete":
            self.pending[args[0]] = _TOMBSTONE
        elif op == "prepare":
            self.prepared.update(self.pending)
            self.pending.clear()
            self.prepared_txid = args[0]
        elif op == "commit" and args[0] is None:
            self._apply(self.committed, self.pending)
            self.pending.clear()
        elif op == "commit":
            if args[0] > self.committed_txid:
                self._apply(self.committed, self.prepared)
                self.prepared.clear()
                self.prepared_txid = None
                self.committed_txid = args[0]
        elif op == "rollback":
            self.prepared.clear()
            self.pending.clear()
            self.prepared_txid = None
        else:  # pragma: no cover - a typo in SCRIPT
            raise AssertionError(op)

    def visible(self) -> dict[Any, Any]:
        view = dict(self.committed)
        self._apply(view, self.prepared)
        self._apply(view, self.pending)
        return view

    def crash(self) -> None:
        """What survives a crash: committed entries and the stored prepared delta."""
        self.pending.clear()


def run(state: KeyValueState, op: str, *args: Any) -> None:
    if op == "put":
        state.put(*args)
    elif op == "delete":
        state.delete(*args)
    elif op == "prepare":
        state.prepare_commit(*args)
    elif op == "commit":
        state.commit(*args)
    elif op == "rollback":
        state.rollback()


def check(state: KeyValueState, expected: dict[Any, Any]) -> None:
    assert dict(state.items()) == expected
    for key in "abcdefgz":
        assert state.get(key, "<none>") == expected.get(key, "<none>"), key


@pytest.mark.parametrize("recovery", ["commit", "rollback"])
@pytest.mark.parametrize("cut", range(len(SCRIPT) + 1))
def test_reopen_after_crash(provider_factory: Any, namespace: str, cut: int, recovery: str) -> None:
    model = Model()
    before = provider_factory().get_state(namespace)
    for step in SCRIPT[:cut]:
        run(before, *step)
        model.step(*step)
        check(before, model.visible())

    # Crash: `before` is abandoned, never closed; a new provider takes over.
    model.crash()
    after = provider_factory().get_state(namespace)
    check(after, model.committed)
    assert after.committed_txid == model.committed_txid
    if hasattr(after, "prepared_txid"):  # not part of the protocol, but ours have it
        assert after.prepared_txid == model.prepared_txid

    # Recovery as the checkpoint spout drives it.
    if recovery == "commit" and model.prepared_txid is not None:
        txid = model.prepared_txid
        after.commit(txid)
        model.step("commit", txid)
    else:
        after.rollback()
        model.step("rollback")
    check(after, model.visible())

    # ... and the state goes on: the next checkpoint commits.
    next_txid = model.committed_txid + 1
    for step in [("put", "z", cut), ("prepare", next_txid), ("commit", next_txid)]:
        run(after, *step)
        model.step(*step)
    again = provider_factory().get_state(namespace)
    check(again, model.committed)
    assert again.committed_txid == next_txid
