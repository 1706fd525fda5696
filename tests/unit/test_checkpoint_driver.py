"""The synchronous checkpoint driver (``statestream._checkpoint_driver``), table-tested.

For every stored phase (a fresh store, ``COMMITTED(t)``, ``PREPARING(t)``,
``COMMITTING(t)``) and every event a driver gives it (the start's recovery,
a batch prepared, the job succeeded, the job failed), the actions it asks
for in order and what is stored before each one. The store is a dict; the
log interleaves the saves and the actions, so "stored before" is an order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from statestream._checkpoint import Action, CheckpointState, Emission, Phase
from statestream._checkpoint_driver import CheckpointDriver
from statestream._errors import RuntimeFailure
from statestream._exactly_once import CheckpointRecord

Log = list[tuple[str, Any]]


class Kv:
    """A key-value state that logs each commit (the record written) into ``log``."""

    def __init__(self, log: Log, data: Mapping[str, Any] | None = None) -> None:
        self.log = log
        self.data: dict[str, Any] = dict(data or {})
        self.pending: dict[str, Any] = {}
        self.fail = False

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: str, value: Any) -> None:
        self.pending[key] = value

    def commit(self, txid: int | None = None) -> None:
        if self.fail:
            self.pending = {}
            raise OSError("the store went away")
        self.data.update(self.pending)
        self.pending = {}
        self.log.append(("saved", str(CheckpointRecord.load(self).state)))  # type: ignore[arg-type]


def stored(phase: str | None, txid: int = 0) -> dict[str, Any]:
    """What a store holds after a run stopped in ``phase(txid)`` (None: a fresh store)."""
    if phase is None:
        return {}
    positions = {str(t): {"spout-0": t} for t in (txid - 1, txid) if t >= 0}
    return {"checkpoint": {"txid": txid, "phase": phase}, "positions": positions}


def driver(data: Mapping[str, Any], log: Log) -> tuple[CheckpointDriver, Kv]:
    kv = Kv(log, data)
    clock = [0.0]

    def now_ms() -> float:
        clock[0] += 1.0
        return clock[0]

    return CheckpointDriver(lambda: kv, 1000, now_ms), kv  # type: ignore[arg-type,return-value]


def acting(log: Log) -> Callable[[Emission], None]:
    def act(emission: Emission) -> None:
        log.append(("act", f"{emission.action.value}({emission.txid})"))

    return act


# (stored, recovery's log, the state it ends in, the txid whose positions the spouts seek to)
RECOVERY = [
    pytest.param(None, [("act", "INITSTATE(-1)")], "COMMITTED(-1)", None, id="fresh"),
    pytest.param(
        "COMMITTED", [("act", "INITSTATE(3)")], "COMMITTED(3)", 3, id="committed-just-initstate"
    ),
    pytest.param(
        "PREPARING",
        [("act", "ROLLBACK(3)"), ("saved", "COMMITTED(2)"), ("act", "INITSTATE(2)")],
        "COMMITTED(2)",
        2,
        id="preparing-rolls-back",
    ),
    pytest.param(
        "COMMITTING",
        [("act", "COMMIT(3)"), ("saved", "COMMITTED(3)"), ("act", "INITSTATE(3)")],
        "COMMITTED(3)",
        3,
        id="committing-finishes-the-commit",
    ),
]


@pytest.mark.parametrize(("phase", "expected", "ends", "restored"), RECOVERY)
def test_recovery_from_every_stored_phase(
    phase: str | None, expected: Log, ends: str, restored: int | None
) -> None:
    log: Log = []
    d, _ = driver(stored(phase, 3), log)
    acted = d.recover(acting(log))
    assert log == expected
    assert str(d.state) == ends
    assert acted == (phase in ("PREPARING", "COMMITTING"))
    assert not d.recovering
    txid, positions = d.restore_point()
    assert txid == (-1 if restored is None else restored)
    assert positions == (None if restored is None else {"spout-0": restored})


# After the recovery, one batch: (stored, event) -> the log from the prepare on.
@pytest.mark.parametrize("phase", [None, "COMMITTED", "PREPARING", "COMMITTING"])
@pytest.mark.parametrize("event", ["succeeded", "failed"])
def test_a_batch_after_every_stored_phase(phase: str | None, event: str) -> None:
    log: Log = []
    d, kv = driver(stored(phase, 3), log)
    d.recover(acting(log))
    base = d.committed_txid
    log.clear()
    txid = d.prepare({"spout-0": "end"})
    t = base + 1
    assert txid == t
    # PREPARING(t) is stored, with the batch's end positions, before the job runs.
    assert log == [("saved", f"PREPARING({t})")]
    assert kv.data["positions"][str(t)] == {"spout-0": "end"}
    log.clear()
    if event == "succeeded":
        d.commit(txid, acting(log))
        assert log == [
            ("saved", f"COMMITTING({t})"),
            ("act", f"COMMIT({t})"),
            ("saved", f"COMMITTED({t})"),
        ]
        assert d.committed_txid == t
        assert d.restore_point() == (t, {"spout-0": "end"})
    else:
        d.abort(txid)
        assert log == []  # nothing stored: PREPARING(t) says what recovery does
        d.recover(acting(log))
        assert log == [
            ("act", f"ROLLBACK({t})"),
            ("saved", f"COMMITTED({base})"),
            ("act", f"INITSTATE({base})"),
        ]
        assert d.committed_txid == base


def test_a_batch_prepared_again_after_a_rollback_gets_the_same_txid() -> None:
    log: Log = []
    d, _ = driver({}, log)
    d.recover(acting(log))
    assert d.prepare({"s": 1}) == 0
    d.abort(0)
    d.recover(acting(log))
    assert d.prepare({"s": 1}) == 0
    d.commit(0, acting(log))
    assert d.prepare({"s": 2}) == 1


def test_an_action_that_raises_leaves_the_stored_phase_for_the_next_start() -> None:
    log: Log = []
    d, kv = driver(stored("COMMITTED", 3), log)
    d.recover(acting(log))
    d.prepare({"s": 1})

    def broken(emission: Emission) -> None:
        raise OSError("a namespace could not commit")

    with pytest.raises(OSError):
        d.commit(4, broken)
    # COMMITTING(4) was stored before the COMMIT: the next start finishes it.
    again, _ = driver(kv.data, log)
    log.clear()
    again.recover(acting(log))
    assert log[0] == ("act", "COMMIT(4)")


def test_a_record_that_cannot_be_stored_raises_and_nothing_is_acted_on() -> None:
    log: Log = []
    d, kv = driver(stored("COMMITTED", 3), log)
    d.recover(acting(log))
    kv.fail = True
    log.clear()
    with pytest.raises(OSError):
        d.prepare({"s": 1})
    assert log == []
    assert d.state == CheckpointState(3, Phase.COMMITTED)


def test_commit_of_a_txid_that_was_not_prepared_is_refused() -> None:
    log: Log = []
    d, _ = driver({}, log)
    d.recover(acting(log))
    with pytest.raises(RuntimeFailure, match="COMMIT"):
        d.commit(0, acting(log))
    with pytest.raises(RuntimeFailure, match="PREPARE"):
        d.prepare({})
        d.prepare({})


def test_positions_are_stored_only_with_a_prepare() -> None:
    log: Log = []
    d, kv = driver({}, log)
    d.recover(acting(log))
    t = d.prepare({"a": 1})
    d.commit(t, acting(log))
    assert set(kv.data["positions"]) == {"0"}


def test_acked_positions_are_stored_with_a_prepare_that_has_no_cut() -> None:
    log: Log = []
    d, kv = driver({}, log)
    d.acked_positions = lambda: {"a": "acked"}
    d.recover(acting(log))
    d.coordinator.poll(0.0, early=True)  # the checkpoint spout's PREPARE (no cut)
    assert kv.data["acked"] == {"0": {"a": "acked"}}
    assert kv.data["positions"] == {}


def test_acked_positions_are_taken_again_at_every_phase_for_the_restored_txid() -> None:
    # The acks the commit of t releases reach the spouts after PREPARING(t) was
    # stored: COMMITTED(t) stores them with t, PREPARING(t+1) with t again.
    log: Log = []
    d, kv = driver({}, log)
    acked = {"a": 0}
    d.acked_positions = lambda: dict(acked)
    d.recover(acting(log))
    d.coordinator.poll(0.0, early=True)  # PREPARING(0)
    acked["a"] = 1  # heard meanwhile (a COMMITTING(0) stored now restores 0)
    d.on_ack(Action.PREPARE, 0)
    assert kv.data["acked"] == {"0": {"a": 1}}
    assert d.poll() == Emission(Action.COMMIT, 0)
    acked["a"] = 2  # what the commit of 0 released
    d.on_ack(Action.COMMIT, 0)
    assert d.record.resume_point() == (0, {"a": 2}, False)
    acked["a"] = 3
    d.coordinator.poll(0.0, early=True)  # PREPARING(1): a rollback restores 0
    assert kv.data["acked"] == {"0": {"a": 3}, "1": {"a": 3}}
    assert d.record.resume_point() == (0, {"a": 3}, False)


def test_the_asynchronous_side_stores_before_it_emits() -> None:
    log: Log = []
    d, kv = driver({}, log)
    assert d.poll() == Emission(Action.INITSTATE, -1)
    d.on_ack(Action.INITSTATE, -1)
    assert d.poll() is None  # the interval has not passed
    assert d.poll_prepare({"a": 7}, early=True) == Emission(Action.PREPARE, 0)
    assert log == [("saved", "PREPARING(0)")]
    assert kv.data["positions"] == {"0": {"a": 7}}
    d.on_fail(Action.PREPARE, 0)
    assert d.recovering
    assert d.poll() == Emission(Action.ROLLBACK, 0)
