"""Table tests of the per-spout-task message book (statestream._messages): every
decision a runtime asks of it about a message, without a runtime."""

from __future__ import annotations

from typing import Any

import pytest

from statestream._deadletter import DEAD, REPLAY, DeadLetter, DeadLetterFile, Replay
from statestream._messages import Cause, MessageBook
from statestream._retry import RetryPolicy, VerdictKind

POLICY = RetryPolicy(initial_ms=100, multiplier=2, max_ms=1000, max_attempts=3)
CAUSE = Cause("count", ValueError("bad"), None)


def book(policy: RetryPolicy = POLICY) -> MessageBook:
    return MessageBook("wc", "lines", 1, policy)


def fed(msg_id: Any = 7, values: list[Any] | None = None) -> Replay:
    record = DeadLetter.of("wc", "lines", 1, msg_id, values or ["x"], "count", None, 3, "old")
    record.status = REPLAY
    return Replay(record)


def fail_times(b: MessageBook, msg_id: Any, n: int, *, rewinds: bool, now: float = 0.0) -> Any:
    out = None
    for i in range(n):
        out = b.failed(msg_id, ["x"], "default", CAUSE, now + i * 10, rewinds=rewinds)
        if rewinds:
            b.rewound(complete=False)
        else:
            b.due(now + i * 10 + 5)
    return out


# -- the decision on a failure: (attempts so far, mode, fed back?) -> what to do --
@pytest.mark.parametrize(
    ("failures", "rewinds", "replay", "kind", "writes", "dead_again", "tells"),
    [
        # at-least-once: retry, retry, then give up and tell the spout
        (1, False, False, VerdictKind.RETRY, False, False, False),
        (2, False, False, VerdictKind.RETRY, False, False, False),
        (3, False, False, VerdictKind.GIVE_UP, True, False, True),
        # exactly-once: the spout hears of it when it emits it again
        (1, True, False, VerdictKind.RETRY, False, False, False),
        (3, True, False, VerdictKind.GIVE_UP, True, False, False),
        # a fed-back dead letter: dead again, never a second record, never told
        (1, False, True, VerdictKind.RETRY, False, False, False),
        (3, False, True, VerdictKind.GIVE_UP, False, True, False),
        (3, True, True, VerdictKind.GIVE_UP, False, True, False),
    ],
)
def test_the_outcome_of_a_failure(
    failures: int,
    rewinds: bool,
    replay: bool,
    kind: VerdictKind,
    writes: bool,
    dead_again: bool,
    tells: bool,
) -> None:
    b = book()
    msg_id: Any = fed() if replay else 7
    out = fail_times(b, msg_id, failures, rewinds=rewinds)
    assert out.verdict.kind is kind
    assert out.verdict.failures == failures
    assert (out.record is not None) is writes
    assert (out.replay is msg_id) is dead_again
    assert out.tell_spout is tells
    assert out.gives_up is (kind is VerdictKind.GIVE_UP)


def test_the_record_names_the_message_and_its_last_failure() -> None:
    b = book()
    fail_times(b, 7, 2, rewinds=False)
    out = b.failed(
        7, ["a", 1], "words", Cause("split", None, "boom", "Failed"), 50.0, rewinds=False
    )
    r = out.record
    assert r is not None
    assert (r.topology, r.spout, r.task, r.msg_id, r.values, r.stream) == (
        "wc",
        "lines",
        1,
        7,
        ["a", 1],
        "words",
    )
    assert (r.component, r.error_type, r.error, r.attempts, r.status) == (
        "split",
        "Failed",
        "boom",
        3,
        DEAD,
    )
    exc_out = book(RetryPolicy(max_attempts=1)).failed(
        8, ["b"], "default", Cause("count", KeyError("k"), "ignored"), 0.0, rewinds=True
    )
    assert exc_out.record is not None
    assert (exc_out.record.error_type, exc_out.record.error) == ("KeyError", "'k'")


def test_given_up_messages_are_settled_only_once_written() -> None:
    b = book(RetryPolicy(max_attempts=1))
    out = b.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=True)
    assert out.record is not None
    assert not b.skips(7, ["x"])  # not written yet: delivered
    b.gave_up(out)
    assert b.skips(7, ["x"])  # the very message: skipped, the spout told
    assert not b.skips(7, ["y"])  # the same id with other values is another message
    assert not b.skips(8, ["x"])
    assert b.take_settles() == [7]
    assert b.take_settles() == []
    assert b.retries.attempts(7) == 0  # given up on: forgotten


def test_a_second_report_in_one_attempt_is_ignored() -> None:
    b = book()
    b.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=True)
    again = b.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=True)
    assert again.verdict.kind is VerdictKind.IGNORED and not again.gives_up
    b2 = book()
    b2.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=False)  # waits for its retry
    assert b2.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=False).verdict.kind is (
        VerdictKind.IGNORED
    )


# -- the schedule: what falls due goes back to the spout, a fed-back one to the queue --
def test_due_hands_back_the_spouts_messages_and_requeues_fed_back_ones() -> None:
    b = book()
    rid = fed()
    b.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=False)  # due at 0.1
    b.failed(rid, ["x"], "default", CAUSE, 0.0, rewinds=False)
    assert b.due(0.05) == ([], 0)
    due = b.due(0.1)
    assert (due.fail, due.requeued) == ([7], 1)
    assert list(b.replays) == [rid]


def test_release_held_at_a_cut() -> None:
    b = book()
    rid = fed()
    for m in (7, rid):
        b.failed(m, ["x"], "default", CAUSE, 0.0, rewinds=True)
        assert b.retries.hold(m, 0.0)
    assert b.release_held() == [7]
    assert list(b.replays) == [rid]
    assert b.retries.waiting == 0


# -- the replay queue ---------------------------------------------------------------
def test_fed_back_records_go_out_in_order_and_in_flight_ones_come_back_on_a_reopen() -> None:
    b = book()
    r1, r2 = fed(1).record, fed(2).record
    b.feed(r1)
    b.feed(r2)
    first = b.replays.popleft()
    assert first.record is r1
    b.replay_emitted(first)
    assert b.replaying == {first}
    b.rewound(reopen=True)  # the spouts are opened anew: it goes out again, first
    assert [r.record for r in b.replays] == [r1, r2]
    assert not b.replaying


def test_an_acked_replay_is_done_and_a_rewind_without_reopen_keeps_the_queue() -> None:
    b = book()
    b.feed(fed(1).record)
    rid = b.replays.popleft()
    b.replay_emitted(rid)
    b.replay_done(rid)
    assert not b.replaying
    b.rewound()
    assert not b.replays


def test_requeue_puts_back_what_is_still_to_replay_in_front_in_order() -> None:
    b = book()
    b.feed(fed(9).record)
    a, dead, c = fed(1), fed(2), fed(3)
    dead.record.status = DEAD  # given up on again in the job
    b.requeue([a, None, 5, dead, c])
    assert [r.record.msg_id for r in b.replays] == [1, 3, 9]


def test_a_fed_back_message_given_up_on_again_leaves_the_in_flight_set() -> None:
    b = book(RetryPolicy(max_attempts=1))
    rid = fed()
    b.replay_emitted(rid)
    out = b.failed(rid, ["x"], "default", CAUSE, 0.0, rewinds=False)
    assert out.replay is rid and not b.replaying
    b.rewound(reopen=True)
    assert not b.replays  # not sent again


# -- attempts: a rewind, a cut -----------------------------------------------------
@pytest.mark.parametrize(
    ("complete", "reopen", "count_after", "settles_after"),
    [(False, False, 1, 1), (True, False, 0, 1), (False, True, 1, 0), (True, True, 0, 0)],
)
def test_a_rewind(complete: bool, reopen: bool, count_after: int, settles_after: int) -> None:
    b = book(RetryPolicy(max_attempts=1))
    b.gave_up(b.failed(5, ["x"], "default", CAUSE, 0.0, rewinds=True))
    b.skips(5, ["x"])
    b2 = book()
    b2.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=True)
    b2.rewound()
    b2.retries.emitted_again(7)  # replayed, and did not fail in this attempt
    b2.rewound(complete=complete, reopen=reopen)
    b.rewound(complete=complete, reopen=reopen)
    assert b2.retries.attempts(7) == count_after
    assert len(b.take_settles()) == settles_after


def test_a_cut_forgets_what_went_through() -> None:
    b = book()
    b.failed(7, ["x"], "default", CAUSE, 0.0, rewinds=True)
    b.rewound()
    b.retries.emitted_again(7)
    b.passed_cut()
    assert b.retries.attempts(7) == 0 and not b.failures


# -- carrying out an outcome: the same on every runtime ------------------------------
@pytest.mark.parametrize(
    ("failures", "replay", "dead_lettered", "statuses", "settled"),
    [
        (1, False, False, [], False),  # a retry is due: nothing written
        (3, False, True, [DEAD], True),  # given up: the record, then settled
        (3, True, True, [DEAD], False),  # fed back, given up again: dead again, no 2nd record
    ],
)
def test_carry_out_writes_what_the_outcome_says(
    tmp_path: Any,
    failures: int,
    replay: bool,
    dead_lettered: bool,
    statuses: list[str],
    settled: bool,
) -> None:
    file = DeadLetterFile(tmp_path / "dead.jsonl")
    b = book()
    msg: Any = 7
    if replay:
        rid = fed()
        file.append(rid.record)
        b.replay_emitted(rid)
        msg = rid
    out = None
    for i in range(failures):
        out = b.failed(msg, ["x"], "default", CAUSE, i * 10.0, rewinds=True)
        b.rewound(complete=False)
    assert out is not None
    assert b.carry_out(out, file) is dead_lettered
    assert [r.status for r in file.records()] == statuses
    assert b.skips(7, ["x"]) is settled
