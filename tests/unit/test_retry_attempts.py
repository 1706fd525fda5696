"""The counting rule of statestream._retry with exactly-once state, table-tested.

A message's count is its consecutive failed attempts. With exactly-once state an
attempt is what runs between two rewinds (on Spark: one job of a batch): each
message that failed in it counts one failure, each that was emitted in it and went
through is forgotten, even though the rewind (another message's) undoes it, and one
cut off by the rewind keeps its count. Issue 12: before this rule, a line that
failed now and then was blamed across rewinds it did not cause and could be
dead-lettered although it never failed ``max.attempts`` times in a row.

Each row is a script of events over messages ``a``, ``b`` and ``c`` and the counts
(and give-ups) it must end with. Events:

* ``emit m``: the spout emits ``m`` in the attempt under way,
* ``fail m``: ``m`` failed in it (one of its tuples),
* ``rewind``: the attempt ends with a rewind that found nothing in flight
  (``Retries.rewound(complete=True)``); ``rewind-cut-off``: one that did not,
* ``cut``: a consistent cut passed with no failure pending,
* ``ack m``: ``m`` was committed and acked.
"""

from __future__ import annotations

from typing import Any

import pytest

from statestream._retry import FailureRate, Retries, RetryPolicy, VerdictKind

POLICY = RetryPolicy(initial_ms=100, multiplier=2, max_ms=10_000, max_attempts=3)

# (script, counts at the end, messages given up on), counts of 0 left out
RULE = [
    # A message failing in every attempt is given up on at its third.
    ("emit a, fail a, rewind, emit a, fail a, rewind, emit a, fail a", {}, ["a"]),
    # Replayed only because another message failed: never counted.
    (
        "emit a, emit b, fail b, rewind, emit a, emit b, fail b, rewind, emit a, emit b, fail b",
        {},
        ["b"],
    ),
    # Failing every other attempt, going through in between (the attempt then
    # undone by b's failure): the count never passes 1, so never given up.
    (
        "emit a, fail a, emit b, fail b, rewind,"
        " emit a, emit b, fail b, rewind,"
        " emit a, fail a, emit b, rewind,"
        " emit a, emit b, fail b, rewind,"
        " emit a, fail a, emit b, rewind",
        {"a": 1},
        [],
    ),
    # Both failing in one attempt: both count (not only the first to fail).
    ("emit a, emit b, fail a, fail b, rewind", {"a": 1, "b": 1}, []),
    (
        "emit a, emit b, fail b, fail a, rewind, emit a, emit b, fail a, fail b, rewind,"
        " emit a, emit b, fail b, fail a",
        {},
        ["b", "a"],
    ),
    # Several failures of one message in one attempt count once.
    ("emit a, fail a, fail a, fail a, rewind", {"a": 1}, []),
    # Cut off by the rewind (still in flight): neither failed nor went through.
    ("emit a, fail a, rewind, emit a, emit b, fail b, rewind-cut-off", {"a": 1, "b": 1}, []),
    (
        "emit a, fail a, rewind, emit a, fail b, rewind-cut-off, emit a, fail a, rewind,"
        " emit a, fail a",
        {"b": 1},
        ["a"],
    ),
    # Not emitted in the attempt (beyond the spouts' budget): keeps its count.
    ("emit a, fail a, rewind, emit b, fail b, rewind", {"a": 1, "b": 1}, []),
    # A cut after it went through forgets it, a later rewind does not bring it back.
    ("emit a, fail a, rewind, emit a, cut, emit b, fail b, rewind", {"b": 1}, []),
    # Emitted again and failing after the cut: counted from scratch.
    ("emit a, fail a, rewind, emit a, cut, emit a, fail a, rewind", {"a": 1}, []),
    # Committed and acked: forgotten.
    ("emit a, fail a, rewind, emit a, ack a, emit a, fail a, rewind", {"a": 1}, []),
    # Failing, going through, failing twice: given up only after three in a row.
    (
        "emit a, fail a, rewind, emit a, emit b, fail b, rewind, emit a, fail a, rewind,"
        " emit a, fail a, rewind",
        {"a": 2, "b": 1},
        [],
    ),
]


def play(script: str) -> tuple[Retries, list[str]]:
    r = Retries(POLICY)
    given_up: list[str] = []
    now = 0.0
    for step in (s.strip() for s in script.split(",")):
        now += 1.0
        event, _, m = step.partition(" ")
        if event == "emit":
            r.emitted_again(m)
        elif event == "fail":
            verdict = r.attempt_failed(m, now)
            if verdict.kind is VerdictKind.GIVE_UP:
                given_up.append(m)
        elif event == "rewind":
            r.rewound(complete=True)
        elif event == "rewind-cut-off":
            r.rewound(complete=False)
        elif event == "cut":
            r.passed_cut()
        elif event == "ack":
            r.succeeded(m)
        else:
            raise AssertionError(f"unknown event {step!r}")
    return r, given_up


@pytest.mark.parametrize(("script", "counts", "given_up"), RULE)
def test_the_counting_rule(script: str, counts: dict[str, int], given_up: list[str]) -> None:
    r, gave_up = play(script)
    assert gave_up == given_up
    assert {m: r.attempts(m) for m in "abc" if r.attempts(m)} == counts


def test_a_second_failure_in_one_attempt_is_ignored_and_names_the_count() -> None:
    r = Retries(POLICY)
    first = r.attempt_failed("a", 1.0)
    assert (first.kind, first.failures, first.at) == (VerdictKind.RETRY, 1, pytest.approx(1.1))
    again = r.attempt_failed("a", 1.5)
    assert (again.kind, again.failures, again.at) == (VerdictKind.IGNORED, 1, None)


def test_delays_grow_with_consecutive_failed_attempts_only() -> None:
    """The replay after a rewind waits the delay of the count: one that went through
    in between starts over at the initial delay."""
    r = Retries(POLICY)
    assert r.attempt_failed("a", 0.0).at == pytest.approx(0.1)
    r.rewound(complete=True)
    r.emitted_again("a")
    assert r.attempt_failed("a", 1.0).at == pytest.approx(1.2)  # second in a row: 200 ms
    r.rewound(complete=True)
    r.emitted_again("a")  # goes through this time; b fails
    r.attempt_failed("b", 2.0)
    r.rewound(complete=True)
    r.emitted_again("a")
    assert r.attempt_failed("a", 3.0).at == pytest.approx(3.1)  # starts over: 100 ms


def test_max_attempts_0_counts_forever_and_never_gives_up() -> None:
    r = Retries(RetryPolicy(max_attempts=0))
    for i in range(1, 50):
        r.emitted_again("a")
        verdict = r.attempt_failed("a", float(i))
        assert (verdict.kind, verdict.failures) == (VerdictKind.RETRY, i)
        r.rewound(complete=True)


# -- holding a failed message until its retry (issue 30) ----------------------------------

# (when it is emitted again, replaying) -> held
HOLD_TABLE = [
    (0.05, False, True),  # its delay (100 ms from 0.0) has not passed
    (0.05, True, True),
    (0.1, False, False),  # due: delivered, its next attempt
    (0.1, True, True),  # due, but the topology replays after a rewind
    (5.0, False, False),
]


@pytest.mark.parametrize(("at", "replaying", "held"), HOLD_TABLE)
def test_a_failed_message_is_held_until_its_retry_is_due(
    at: float, replaying: bool, held: bool
) -> None:
    r = Retries(POLICY)
    r.attempt_failed("a", 0.0)
    r.rewound(complete=True)
    assert r.hold("a", at, replaying) is held
    assert r.waiting == (1 if held else 0)
    assert r.hold("b", at, replaying) is False  # never failed: delivered


def test_a_held_message_is_handed_back_when_due_and_at_a_cut() -> None:
    r = Retries(POLICY)
    r.attempt_failed("a", 0.0)
    r.attempt_failed("b", 0.0)
    r.rewound(complete=True)
    assert r.hold("a", 0.01) and r.hold("b", 0.01)
    assert r.hold("a", 0.02)  # emitted again (handed back at a cut): held once
    assert r.due(0.05) == []
    assert r.due(0.1) == ["a", "b"]  # Spout.fail: the spout emits them again
    assert r.hold("a", 0.11) is False  # their attempt
    # A cut hands every held message back, so that the spout's position holds it.
    r.attempt_failed("c", 0.2)
    r.rewound(complete=True)
    assert r.hold("c", 0.21)
    assert r.clear_schedule() == ["c"]
    assert r.waiting == 0
    assert r.hold("c", 0.22)  # still not due: held again when emitted again


def test_a_rewind_forgets_what_was_held_the_new_spouts_emit_it_again() -> None:
    r = Retries(POLICY)
    r.attempt_failed("a", 0.0)
    r.rewound(complete=True)
    assert r.hold("a", 0.01)
    r.rewound(complete=True)
    assert r.waiting == 0
    assert r.attempts("a") == 1
    assert r.hold("a", 0.02)


def test_a_message_that_goes_through_is_no_longer_held() -> None:
    r = Retries(POLICY)
    r.attempt_failed("a", 0.0)
    r.rewound(complete=True)
    assert r.hold("a", 0.2) is False
    r.passed_cut()  # it went through: forgotten
    assert r.attempts("a") == 0
    assert r.hold("a", 0.21) is False


# -- the error-rate limit ----------------------------------------------------------------


def _judge(rate: FailureRate, now: float, values: list[Any], before: int, after: int) -> str | None:
    for v in values:
        rate.failed([v], now)
    return rate.judge(now, before, after)


def test_a_task_failing_every_tuple_trips_the_limit_at_ten_distinct_tuples() -> None:
    rate = FailureRate(max_rate=0.5, window=10.0)
    for i in range(9):
        assert _judge(rate, 0.1 * i, [i], i, i + 1) is None  # fewer than 10 distinct
    reason = _judge(rate, 1.0, [9], 9, 10)
    assert reason is not None
    assert reason.startswith("10 of the 10 tuples it executed in the last 10 s failed (100%")


def test_one_message_failing_again_and_again_is_one_message() -> None:
    rate = FailureRate(max_rate=0.5, window=10.0)
    for i in range(50):
        assert _judge(rate, 0.1 * i, ["poison"], i, i + 1) is None


# (failures per 100 tuples executed, max rate) -> tripped
RATE_TABLE = [
    (1, 0.5, False),
    (50, 0.5, False),
    (51, 0.5, True),
    (100, 1.0, False),
    (20, 0.1, True),
]


@pytest.mark.parametrize(("per_100", "max_rate", "tripped"), RATE_TABLE)
def test_the_rate_is_failures_over_tuples_executed(
    per_100: int, max_rate: float, tripped: bool
) -> None:
    rate = FailureRate(max_rate=max_rate, window=10.0)
    got = None
    for batch in range(5):
        values = [f"{batch}-{i}" for i in range(per_100)]
        got = _judge(rate, float(batch), values, batch * 100, (batch + 1) * 100)
    assert (got is not None) is tripped


def test_failures_and_tuples_older_than_the_window_drop_out() -> None:
    rate = FailureRate(max_rate=0.5, window=10.0)
    assert _judge(rate, 1.0, list(range(8)), 0, 50) is None
    # 12 failures in 30 tuples at 30.0, but judged against all 10,030 executed
    # since 1.0: the task's count has no sample in between.
    assert _judge(rate, 30.0, list(range(100, 112)), 10_000, 10_030) is None
    # At 41.0 the window starts at 31.0: the failures of 1.0 and 30.0 are out of
    # it, the tuples are counted from the sample at 30.0: 25 of 40 failed.
    assert _judge(rate, 41.0, list(range(200, 225)), 10_030, 10_040) is not None
