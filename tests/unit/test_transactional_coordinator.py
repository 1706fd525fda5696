"""The transaction coordinator's protocol: the table, every (phase, event), and the coordinator."""

from __future__ import annotations

from typing import Any

import pytest

from statestream._errors import ConfigError, StateCorruptError
from statestream._transactional.coordinator import (
    Action,
    Emission,
    Event,
    StoredTransactions,
    TransactionAttempt,
    TransactionCoordinator,
    TxPhase,
    transition,
)

P, E, A = TxPhase, Event, Action

# (phase, event) -> (next phase, action); every pair not listed changes nothing.
TABLE = {
    (P.PENDING, E.EMIT): (P.PROCESSING, A.EMIT_BATCH),
    (P.PROCESSING, E.BATCH_ACKED): (P.PROCESSED, A.NONE),
    (P.PROCESSING, E.BATCH_FAILED): (P.PENDING, A.FAIL_LATER),
    (P.PROCESSING, E.TIMED_OUT): (P.PENDING, A.FAIL_LATER),
    (P.PROCESSING, E.EARLIER_FAILED): (P.PENDING, A.NONE),
    (P.PROCESSED, E.COMMIT_TURN): (P.COMMITTING, A.EMIT_COMMIT),
    (P.PROCESSED, E.EARLIER_FAILED): (P.PENDING, A.NONE),
    (P.COMMITTING, E.COMMIT_ACKED): (P.COMMITTED, A.RECORD_COMMIT),
    (P.COMMITTING, E.COMMIT_FAILED): (P.PENDING, A.FAIL_LATER),
    (P.COMMITTING, E.TIMED_OUT): (P.PENDING, A.FAIL_LATER),
    (P.COMMITTING, E.EARLIER_FAILED): (P.PENDING, A.NONE),
}
PAIRS = [(p, e) for p in TxPhase for e in Event]


@pytest.mark.parametrize(("phase", "event"), PAIRS, ids=[f"{p}-{e}" for p, e in PAIRS])
def test_every_phase_and_event(phase: TxPhase, event: Event) -> None:
    assert transition(phase, event) == TABLE.get((phase, event), (phase, A.NONE))


def test_the_listed_pairs_are_the_interesting_ones() -> None:
    # A PROCESSED batch cannot fail its processing any more, nor time out (no tuple is out).
    assert transition(P.PROCESSED, E.BATCH_FAILED) == (P.PROCESSED, A.NONE)
    assert transition(P.PROCESSED, E.TIMED_OUT) == (P.PROCESSED, A.NONE)
    # A commit is emitted only from PROCESSED, and COMMITTED is final.
    assert [p for p in TxPhase if transition(p, E.COMMIT_TURN)[1] is A.EMIT_COMMIT] == [P.PROCESSED]
    assert all(transition(P.COMMITTED, e) == (P.COMMITTED, A.NONE) for e in Event)


# -- the coordinator -------------------------------------------------------------


class Harness:
    """A coordinator with a recording store, a spout with ``batches`` ready, and a clock."""

    def __init__(
        self,
        max_pending: int = 1,
        batches: int = 100,
        stored: StoredTransactions | None = None,
        timeout_ms: float | None = 30_000,
    ) -> None:
        self.saved: list[StoredTransactions] = []
        self.batches = batches
        self.now = 0.0
        self.initialized: list[tuple[int, Any]] = []
        self.c = TransactionCoordinator(stored, max_pending, timeout_ms, self.saved.append)

    def initialize(self, txid: int, prev: Any) -> Any:
        self.initialized.append((txid, prev))
        return {"batch": txid, "after": prev}

    def ready(self) -> bool:
        return self.batches > len(self.initialized)

    def poll(self) -> list[Emission]:
        return self.c.poll(self.now, ready=self.ready, initialize=self.initialize)

    def poll_all(self) -> list[Emission]:
        out: list[Emission] = []
        while True:
            got = self.poll()
            if not got:
                return out
            out += got


def kinds(emissions: list[Emission]) -> list[tuple[str, int]]:
    return [(e.kind, e.attempt.transaction_id) for e in emissions]


def test_batch_ready_starts_one_transaction_and_saves_it_first() -> None:
    h = Harness()
    (e,) = h.poll()
    assert e == Emission("batch", TransactionAttempt(1, 1), {"batch": 1, "after": None}, 0)
    assert e.msg_id == ("batch", 1, 1)
    assert h.saved == [StoredTransactions(0, 2, {1: {"batch": 1, "after": None}})]
    assert h.c.active == {1: P.PROCESSING}
    assert h.poll() == []  # max pending 1


def test_not_ready_starts_nothing() -> None:
    h = Harness(batches=0)
    assert h.poll() == [] and h.saved == [] and h.c.exhausted(h.ready)


def test_processed_then_committed_in_order() -> None:
    h = Harness(max_pending=3)
    batches = h.poll_all()
    assert kinds(batches) == [("batch", 1), ("batch", 2), ("batch", 3)]
    # Later batches finish first: no commit until batch 1 is processed.
    h.c.on_ack(batches[2].msg_id)
    h.c.on_ack(batches[1].msg_id)
    assert h.poll() == []
    h.c.on_ack(batches[0].msg_id)
    (commit1,) = h.poll()
    assert commit1 == Emission("commit", batches[0].attempt, None, 0)
    assert h.poll() == []  # commit 2 waits for commit 1
    h.c.on_ack(commit1.msg_id)
    assert h.saved[-1].committed == 1
    assert set(h.saved[-1].metadata) == {1, 2, 3}  # the committed txid's metadata stays
    out = h.poll()
    assert kinds(out) == [("commit", 2), ("batch", 4)]  # a slot freed: a new batch too
    assert h.initialized[-1] == (
        4,
        {"batch": 3, "after": {"batch": 2, "after": {"batch": 1, "after": None}}},
    )


def test_failed_transaction_fails_every_later_one_and_all_are_emitted_again() -> None:
    h = Harness(max_pending=5)
    batches = h.poll_all()
    assert len(batches) == 5
    h.c.on_ack(batches[0].msg_id)
    (_commit1,) = h.poll()
    h.c.on_ack(batches[3].msg_id)  # 4 processed
    h.c.on_fail(batches[2].msg_id)  # 3 failed: 3, 4 and 5 go back
    assert h.c.active == {
        1: P.COMMITTING,
        2: P.PROCESSING,
        3: P.PENDING,
        4: P.PENDING,
        5: P.PENDING,
    }
    again = h.poll()
    assert kinds(again) == [("batch", 3), ("batch", 4), ("batch", 5)]
    assert [e.metadata for e in again] == [b.metadata for b in batches[2:]]  # the same batches
    assert [e.attempt.attempt_id for e in again] == [6, 7, 8]  # new attempts
    assert h.saved[-1].next_attempt == 9
    assert len(h.initialized) == 5  # no new metadata was asked for
    # Replies to the old attempts change nothing.
    h.c.on_ack(batches[4].msg_id)
    assert h.c.active[5] is P.PROCESSING and h.c.stale_replies == 1


def test_failed_commit_fails_it_and_every_later_one() -> None:
    h = Harness(max_pending=2)
    b1, b2 = h.poll_all()
    h.c.on_ack(b1.msg_id)
    h.c.on_ack(b2.msg_id)
    (c1,) = h.poll()
    h.c.on_fail(c1.msg_id)
    assert h.c.active == {1: P.PENDING, 2: P.PENDING}
    assert kinds(h.poll()) == [("batch", 1), ("batch", 2)]
    assert h.c.committed == 0


def test_timed_out_transaction_fails_like_a_failed_one() -> None:
    h = Harness(max_pending=3, timeout_ms=1000)
    b1, _b2, _b3 = h.poll_all()
    h.c.on_ack(b1.msg_id)
    h.now = 500
    (c1,) = h.poll()
    h.c.on_ack(c1.msg_id)
    h.now = 1000  # 2 and 3 were emitted at 0
    assert kinds(h.poll()) == [("batch", 2), ("batch", 3)]
    h.now = 1999
    assert kinds(h.poll()) == [("batch", 4)]
    h.now = 2000  # the new attempts of 2 and 3 time out again; 4 (emitted at 1999) with them
    assert kinds(h.poll()) == [("batch", 2), ("batch", 3), ("batch", 4)]


def test_a_committing_transaction_times_out() -> None:
    h = Harness(timeout_ms=100)
    (b1,) = h.poll()
    h.c.on_ack(b1.msg_id)
    h.now = 50
    (_c1,) = h.poll()
    h.now = 150
    assert kinds(h.poll()) == [("batch", 1)]


def test_without_a_timeout_nothing_times_out() -> None:
    h = Harness(timeout_ms=None)
    h.poll()
    h.now = 10**9
    assert h.poll() == []


def test_restart_with_active_transactions_emits_them_again_with_their_metadata() -> None:
    h = Harness(max_pending=3)
    batches = h.poll_all()
    h.c.on_ack(batches[0].msg_id)
    (c1,) = h.poll()
    h.c.on_ack(c1.msg_id)  # 1 committed, 2 and 3 active
    stored = h.saved[-1]
    assert stored.committed == 1 and stored.active == [2, 3]
    # A crash; a new coordinator from the store.
    r = Harness(max_pending=3, stored=StoredTransactions.from_json(stored.to_json()))
    assert r.c.active == {2: P.PENDING, 3: P.PENDING}
    again = r.poll()
    assert kinds(again) == [("batch", 2), ("batch", 3)]
    assert [e.metadata for e in again] == [b.metadata for b in batches[1:]]
    assert all(e.attempt.attempt_id > batches[-1].attempt.attempt_id for e in again)
    assert all(e.committed == 1 for e in again)
    assert r.initialized == []
    nxt = r.poll()  # then new transactions, from the last metadata
    assert kinds(nxt) == [("batch", 4)] and r.initialized == [(4, batches[2].metadata)]


def test_restart_on_a_fresh_store_starts_at_one() -> None:
    h = Harness(stored=None)
    assert kinds(h.poll()) == [("batch", 1)]


def test_a_failing_save_changes_nothing() -> None:
    calls = []

    def save(stored: StoredTransactions) -> None:
        calls.append(stored)
        if len(calls) == 1:
            raise OSError("disk full")

    c = TransactionCoordinator(None, 1, None, save)
    with pytest.raises(OSError):
        c.poll(0, ready=lambda: True, initialize=lambda t, p: t)
    assert c.active == {} and c.stored() == StoredTransactions()
    (e,) = c.poll(0, ready=lambda: True, initialize=lambda t, p: t)
    assert e.attempt == TransactionAttempt(1, 1)


def test_stale_and_malformed_replies_are_counted() -> None:
    h = Harness()
    (_b1,) = h.poll()
    h.c.on_ack(("commit", 1, 1))  # a commit ack while processing
    h.c.on_fail(("batch", 1, 99))  # another attempt
    h.c.on_ack(("batch", 7, 1))  # not active
    h.c.on_ack("garbage")
    assert h.c.stale_replies == 4 and h.c.active == {1: P.PROCESSING}


def test_exhausted_only_when_nothing_is_active_and_not_ready() -> None:
    h = Harness(batches=1)
    (b1,) = h.poll()
    assert not h.c.exhausted(h.ready)
    h.c.on_ack(b1.msg_id)
    (c1,) = h.poll()
    h.c.on_ack(c1.msg_id)
    assert h.c.exhausted(h.ready)


def test_max_pending_must_be_positive() -> None:
    with pytest.raises(ConfigError, match=r"max\.spout\.pending"):
        TransactionCoordinator(None, 0, None, lambda s: None)


NOT_INTEGERS = "committed and next_attempt must be integers"
OUT_OF_RANGE = "committed must be >= 0 and next_attempt >= 1"
EXPECTED = '{"committed": 3, "next_attempt": 9, "metadata": {"3": ..., "4": ...}}'


# (stored JSON, what the message says is wrong)
@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ({}, "'committed'"),
        ({"committed": "1", "next_attempt": 1, "metadata": {}}, NOT_INTEGERS),
        ({"committed": 1, "next_attempt": "1", "metadata": {}}, NOT_INTEGERS),
        ({"committed": 1.0, "next_attempt": 1, "metadata": {}}, NOT_INTEGERS),
        ({"committed": 1, "next_attempt": True, "metadata": {}}, NOT_INTEGERS),
        ({"committed": 1, "next_attempt": 0, "metadata": {}}, OUT_OF_RANGE),
        ({"committed": -1, "next_attempt": 1, "metadata": {}}, OUT_OF_RANGE),
        (
            {"committed": 1, "next_attempt": 3, "metadata": {"x": 1}},
            "invalid literal for int() with base 10: 'x'",
        ),
        (None, "'NoneType' object is not subscriptable"),
    ],
)
def test_corrupt_stored_state_is_refused(data: Any, reason: str) -> None:
    with pytest.raises(StateCorruptError) as info:
        StoredTransactions.from_json(data)
    assert str(info.value) == (
        f"stored transaction coordinator state {data!r} is not valid: {reason}; expected {EXPECTED}"
    )


def test_stored_state_with_a_gap_is_refused() -> None:
    with pytest.raises(StateCorruptError, match="not contiguous after the committed txid 1"):
        StoredTransactions.from_json(
            {"committed": 1, "next_attempt": 3, "metadata": {"2": 1, "4": 1}}
        )


# The smallest valid values: nothing committed yet, the first attempt next.
@pytest.mark.parametrize(
    "data",
    [
        {"committed": 0, "next_attempt": 1, "metadata": {}},
        {"committed": 0, "next_attempt": 1, "metadata": {"1": "m"}},
        {"committed": 1, "next_attempt": 1, "metadata": {"1": "m"}},
        {"committed": 0, "next_attempt": 2, "metadata": {"1": "m"}},
    ],
)
def test_stored_state_accepts_the_lower_bounds(data: Any) -> None:
    s = StoredTransactions.from_json(data)
    assert s.to_json() == data


def test_stored_state_round_trips_through_json() -> None:
    s = StoredTransactions(3, 12, {3: {"n": 3}, 4: [1, 2], 5: None})
    assert StoredTransactions.from_json(s.to_json()) == s
    assert s.to_json()["metadata"] == {"3": {"n": 3}, "4": [1, 2], "5": None}
    assert s.active == [4, 5]


def test_attempt_is_the_current_one_and_none_when_not_emitted() -> None:
    h = Harness(max_pending=2)
    assert h.c.attempt(1) is None  # not active
    b1, b2 = h.poll_all()
    assert h.c.attempt(1) == TransactionAttempt(1, 1)
    assert h.c.attempt(2) == TransactionAttempt(2, 2)
    assert h.c.attempt(3) is None  # not active
    h.c.on_fail(b1.msg_id)  # 1 fails, and 2 with it: both wait to be emitted again
    assert h.c.attempt(1) is None and h.c.attempt(2) is None
    assert kinds(h.poll()) == [("batch", 1), ("batch", 2)]
    assert h.c.attempt(1) == TransactionAttempt(1, 3)
    assert h.c.attempt(2) == TransactionAttempt(2, 4)
    # A commit is emitted with the current attempt; a committed txid has none.
    h.c.on_ack(("batch", 1, 3))
    (c1,) = h.poll()
    assert c1.attempt == h.c.attempt(1) == TransactionAttempt(1, 3)
    h.c.on_ack(c1.msg_id)
    assert h.c.attempt(1) is None
    assert b2.attempt != h.c.attempt(2)


def test_replies_to_the_old_attempts_of_failed_transactions_are_stale() -> None:
    h = Harness(max_pending=3)
    b1, b2, b3 = h.poll_all()
    h.c.on_ack(b3.msg_id)  # 3 processed
    h.c.on_fail(b1.msg_id)  # 1, 2 and 3 go back to PENDING, without an attempt
    assert h.c.active == {1: P.PENDING, 2: P.PENDING, 3: P.PENDING}
    for b in (b1, b2, b3):
        h.c.on_ack(b.msg_id)
        h.c.on_fail(b.msg_id)
    assert h.c.stale_replies == 6
    assert h.c.active == {1: P.PENDING, 2: P.PENDING, 3: P.PENDING}
    assert kinds(h.poll()) == [("batch", 1), ("batch", 2), ("batch", 3)]


def test_every_reply_that_does_not_apply_is_counted() -> None:
    h = Harness()
    (b1,) = h.poll()
    # Replies to the current attempt that the phase does not take.
    h.c.on_ack(("commit", 1, 1))
    h.c.on_fail(("commit", 1, 1))
    assert h.c.stale_replies == 2
    h.c.on_ack(b1.msg_id)
    h.c.on_ack(b1.msg_id)  # a second ack of the processed batch
    h.c.on_fail(b1.msg_id)  # a fail after the ack
    assert h.c.stale_replies == 4 and h.c.active == {1: P.PROCESSED}


def test_a_commit_carries_the_previous_committed_txid() -> None:
    h = Harness(max_pending=2)
    b1, b2 = h.poll_all()
    h.c.on_ack(b1.msg_id)
    h.c.on_ack(b2.msg_id)
    (c1,) = h.poll()
    h.c.on_ack(c1.msg_id)
    out = h.poll()
    assert out[0] == Emission("commit", b2.attempt, None, 1)


def test_stored_is_what_the_last_save_wrote() -> None:
    h = Harness(max_pending=2)
    assert h.c.stored() == StoredTransactions()
    b1, _b2 = h.poll_all()
    assert h.c.stored() == h.saved[-1]
    assert h.c.stored().metadata == {
        1: {"batch": 1, "after": None},
        2: {"batch": 2, "after": {"batch": 1, "after": None}},
    }
    h.c.on_ack(b1.msg_id)
    (c1,) = h.poll()
    h.c.on_ack(c1.msg_id)
    assert h.c.stored() == h.saved[-1] and h.c.stored().active == [2]
    # A copy: changing it does not change the coordinator.
    metadata = h.c.stored().metadata
    assert isinstance(metadata, dict)
    metadata.clear()
    assert h.c.stored() == h.saved[-1]


def test_repr_shows_committed_and_every_active_phase() -> None:
    h = Harness(max_pending=3)
    assert repr(h.c) == "TransactionCoordinator(committed=0, active={})"
    b1, _b2, _b3 = h.poll_all()
    h.c.on_ack(b1.msg_id)
    (c1,) = h.poll()
    h.c.on_ack(c1.msg_id)
    assert repr(h.c) == "TransactionCoordinator(committed=1, active={2:PROCESSING, 3:PROCESSING})"
