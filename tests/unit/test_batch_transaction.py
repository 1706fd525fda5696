"""One batch's transaction as events to actions (``statestream._batch_transaction``):
every (failures so far, event) pair, and whole runs of events."""

from __future__ import annotations

import pytest

from statestream._batch_transaction import BatchTransaction, Do, Event

ATTEMPTS = 3
RETRY = [Do.RECORD_FAILURE, Do.ROLLBACK, Do.WARN_RETRY, Do.READ_AGAIN, Do.PREPARE, Do.RUN_JOB]
LAST = [Do.RECORD_FAILURE, Do.ROLLBACK, Do.FAIL_MESSAGES, Do.GIVE_UP]

# (failures before, event) -> (actions, failures after, done)
TABLE = {
    Event.READ: ([Do.PREPARE, Do.RUN_JOB], 0, False),
    Event.CLAIM_LOST: ([Do.STOP], 0, True),
    Event.UNFIXABLE: ([Do.STOP], 0, True),
    Event.JOB_SUCCEEDED: ([Do.COMMIT], 0, True),
    Event.MESSAGES_FAILED: ([Do.COUNT_ERRORS, Do.ROLLBACK, Do.WAIT], 0, False),
    Event.WAITED: ([Do.READ_AGAIN, Do.PREPARE, Do.RUN_JOB], 0, False),
    Event.STOPPED: ([], 0, True),
    Event.JOB_FAILED: (RETRY, 1, False),
}


@pytest.mark.parametrize("before", range(ATTEMPTS))
@pytest.mark.parametrize("event", list(Event), ids=lambda e: e.value)
def test_every_event_after_every_number_of_failed_jobs(before: int, event: Event) -> None:
    tx = BatchTransaction(ATTEMPTS, failures=before)
    actions, added, done = TABLE[event]
    if event is Event.JOB_FAILED and before + 1 == ATTEMPTS:
        actions, done = LAST, True
    assert tx.on(event) == actions
    assert tx.failures == before + added
    assert tx.done is done


def test_the_table_covers_every_event() -> None:
    assert set(TABLE) == set(Event)


def test_a_batch_whose_job_fails_every_time_gives_up_after_its_attempts() -> None:
    tx = BatchTransaction(ATTEMPTS)
    log = tx.on(Event.READ)
    while not tx.done:
        log += tx.on(Event.JOB_FAILED)
    assert log.count(Do.RUN_JOB) == ATTEMPTS
    assert log.count(Do.ROLLBACK) == ATTEMPTS
    assert log[-2:] == [Do.FAIL_MESSAGES, Do.GIVE_UP]
    assert Do.COMMIT not in log


def test_failed_messages_never_use_up_the_attempts_of_the_batch() -> None:
    tx = BatchTransaction(1)
    for _ in range(10):  # a poison message retried: its book decides, not the batch
        assert tx.on(Event.MESSAGES_FAILED)[-1] is Do.WAIT
        assert tx.on(Event.WAITED)[-1] is Do.RUN_JOB
    assert tx.on(Event.JOB_SUCCEEDED) == [Do.COMMIT]
    assert tx.failures == 0


def test_a_failed_job_then_success_commits_once() -> None:
    tx = BatchTransaction(ATTEMPTS)
    tx.on(Event.READ)
    tx.on(Event.JOB_FAILED)
    assert tx.on(Event.JOB_SUCCEEDED) == [Do.COMMIT]
    assert tx.done and tx.failures == 1


def test_nothing_is_committed_or_rolled_back_when_the_claim_is_lost_or_the_store_is_away() -> None:
    for event in (Event.CLAIM_LOST, Event.UNFIXABLE):
        actions = BatchTransaction(ATTEMPTS).on(event)
        assert Do.COMMIT not in actions and Do.ROLLBACK not in actions
