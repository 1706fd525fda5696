"""The transaction coordinator under a retry policy: when a failed transaction is
emitted again, and when it gives up (pure; time is an argument)."""

from __future__ import annotations

from typing import Any

import pytest

from statestream._retry import RetryPolicy
from statestream._transactional.coordinator import (
    Emission,
    Event,
    GivenUp,
    TransactionAttempt,
    TransactionCoordinator,
    TxPhase,
    retry_wait_ms,
)

POLICY = RetryPolicy(initial_ms=100, multiplier=2, max_ms=1000, max_attempts=4)
FOREVER = RetryPolicy(initial_ms=100, multiplier=2, max_ms=1000, max_attempts=0)


# (policy, failures, heard_after_ms) -> the wait in ms, None: give up
@pytest.mark.parametrize(
    ("policy", "failures", "heard_after", "wait"),
    [
        (None, 1, 0.0, 0.0),  # no policy (Spark's driver): again at once
        (None, 10**6, 0.0, 0.0),
        (POLICY, 1, 0.0, 100.0),
        (POLICY, 2, 0.0, 200.0),
        (POLICY, 3, 0.0, 400.0),
        (POLICY, 4, 0.0, None),  # the last attempt failed
        (POLICY, 5, 0.0, None),
        (POLICY, 1, 100.0, 0.0),  # the runtime already waited the first delay
        (POLICY, 3, 100.0, 300.0),
        (POLICY, 2, 500.0, 0.0),  # never negative
        (FOREVER, 4, 0.0, 800.0),
        (FOREVER, 5, 0.0, 1000.0),  # capped
        (FOREVER, 10**6, 100.0, 900.0),  # forever, at the cap
    ],
)
def test_retry_wait(
    policy: RetryPolicy | None, failures: int, heard_after: float, wait: float | None
) -> None:
    assert retry_wait_ms(policy, failures, heard_after) == wait


class Harness:
    def __init__(
        self,
        policy: RetryPolicy | None = POLICY,
        max_pending: int = 1,
        heard_after_ms: float = 0.0,
        timeout_ms: float | None = None,
    ) -> None:
        self.now = 0.0
        self.n = 0
        self.c = TransactionCoordinator(
            None,
            max_pending,
            timeout_ms,
            lambda stored: None,
            retry=policy,
            heard_after_ms=heard_after_ms,
        )

    def poll(self) -> list[Emission]:
        return self.c.poll(self.now, ready=lambda: True, initialize=self.initialize)

    def initialize(self, txid: int, prev: Any) -> Any:
        self.n += 1
        return txid


def kinds(emissions: list[Emission]) -> list[tuple[str, int]]:
    return [(e.kind, e.attempt.transaction_id) for e in emissions]


def test_a_failed_transaction_waits_the_policy_s_delay_and_later_ones_wait_with_it() -> None:
    h = Harness(max_pending=3)
    b1, b2, b3 = h.poll() + h.poll() + h.poll()
    h.c.on_ack(b1.msg_id)
    h.now = 10
    h.c.on_fail(b2.msg_id, h.now)  # 2 fails: 2 and 3 go back, 2 waits 100 ms
    assert h.c.failures(2) == 1 and h.c.failures(3) == 0  # 3 failed only with it
    assert h.c.retry_at_ms == 110
    assert kinds(h.poll()) == [("commit", 1)]  # an earlier commit is not held
    h.now = 109
    assert h.poll() == []  # nor is a new transaction started meanwhile
    h.now = 110
    again = h.poll()
    assert kinds(again) == [("batch", 2), ("batch", 3)]
    h.now = 120
    h.c.on_fail(again[0].msg_id, h.now)  # second failure in a row: 200 ms
    assert h.c.failures(2) == 2 and h.c.retry_at_ms == 320
    h.now = 319
    assert h.poll() == []
    h.now = 320
    assert kinds(h.poll()) == [("batch", 2), ("batch", 3)]
    assert b3.attempt.transaction_id == 3


def test_the_wait_counts_from_the_failure_the_runtime_made_us_hear_late() -> None:
    h = Harness(heard_after_ms=100)
    (b1,) = h.poll()
    h.now = 100  # failed at 0, heard of at 100
    h.c.on_fail(b1.msg_id, h.now)
    assert h.c.retry_at_ms == 100  # 100 ms after the failure: at once
    (again,) = h.poll()
    h.now = 300
    h.c.on_fail(again.msg_id, h.now)  # failed at 200: again at 400
    assert h.c.retry_at_ms == 400


def test_a_timeout_is_a_failure_the_coordinator_notices_itself() -> None:
    h = Harness(timeout_ms=1000, heard_after_ms=100)
    h.poll()
    h.now = 1000
    assert h.poll() == []  # timed out at 1000; emitted again at 1100, nothing subtracted
    assert h.c.failures(1) == 1 and h.c.retry_at_ms == 1100
    h.now = 1100
    assert kinds(h.poll()) == [("batch", 1)]


def test_after_the_last_attempt_the_coordinator_gives_up_and_sends_nothing() -> None:
    h = Harness()
    for n in range(1, 5):
        (b,) = h.poll()
        assert b.attempt == TransactionAttempt(1, n)
        assert h.c.given_up is None
        h.c.on_fail(b.msg_id, h.now)
        h.now += 10_000
    assert h.c.given_up == GivenUp(1, 4, TransactionAttempt(1, 4), Event.BATCH_FAILED)
    assert h.poll() == [] and h.poll() == []
    assert h.c.active == {1: TxPhase.PENDING} and h.c.committed == 0


def test_a_commit_that_keeps_failing_gives_up_too() -> None:
    h = Harness(policy=RetryPolicy(max_attempts=2))
    for _ in range(2):
        (b,) = h.poll()
        h.c.on_ack(b.msg_id)
        (c,) = h.poll()
        h.c.on_fail(c.msg_id, h.now)
        h.now += 10_000
    assert h.c.given_up is not None and h.c.given_up.event is Event.COMMIT_FAILED


def test_a_commit_forgets_the_failures_and_a_new_run_starts_them_at_zero() -> None:
    h = Harness()
    (b,) = h.poll()
    h.c.on_fail(b.msg_id, h.now)
    h.now = 100
    (b,) = h.poll()
    h.c.on_ack(b.msg_id)
    (c,) = h.poll()
    h.c.on_ack(c.msg_id)
    assert h.c.committed == 1 and h.c.failures(1) == 0
    restarted = TransactionCoordinator(h.c.stored(), 1, None, lambda s: None, retry=POLICY)
    assert restarted.failures(2) == 0 and restarted.retry_at_ms is None


def test_forever_never_gives_up() -> None:
    h = Harness(policy=FOREVER)
    for _ in range(1000):
        (b,) = h.poll()
        h.c.on_fail(b.msg_id, h.now)
        assert h.c.retry_at_ms is not None and h.c.retry_at_ms - h.now <= 1000
        h.now = h.c.retry_at_ms
    assert h.c.given_up is None and h.c.failures(1) == 1000


def test_without_a_policy_a_failed_transaction_goes_again_at_once_forever() -> None:
    h = Harness(policy=None)
    for _ in range(100):
        (b,) = h.poll()
        h.c.on_fail(b.msg_id)
    assert h.c.given_up is None and kinds(h.poll()) == [("batch", 1)]


def test_after_giving_up_the_earlier_transactions_still_commit_then_it_stops() -> None:
    h = Harness(policy=RetryPolicy(max_attempts=1), max_pending=3)
    b1, b2, b3 = h.poll() + h.poll() + h.poll()
    h.c.on_fail(b2.msg_id, h.now)  # 2 gives up at once; 1 is still processing
    assert h.c.given_up is not None and h.c.given_up.txid == 2
    assert not h.c.stopped
    assert h.poll() == []
    h.c.on_ack(b1.msg_id)
    assert not h.c.stopped
    (c1,) = h.poll()  # its commit goes out; 2 and 3 are not emitted again
    assert kinds([c1]) == [("commit", 1)]
    h.c.on_ack(c1.msg_id)
    assert h.c.committed == 1 and h.c.stopped
    assert h.poll() == []
    assert h.c.active == {2: TxPhase.PENDING, 3: TxPhase.PENDING}
    assert b3.attempt.transaction_id == 3


def test_after_giving_up_an_earlier_failure_stops_it_too() -> None:
    h = Harness(policy=RetryPolicy(max_attempts=1), max_pending=2)
    b1, b2 = h.poll() + h.poll()
    h.c.on_fail(b2.msg_id, h.now)
    h.c.on_fail(b1.msg_id, h.now)  # nothing before 2 is under way any more
    assert h.c.stopped and h.poll() == [] and h.c.committed == 0
