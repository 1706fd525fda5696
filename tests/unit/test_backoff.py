"""The one retry-with-backoff object (statestream._backoff), on the fake clock."""

from __future__ import annotations

import pytest

from statestream._backoff import Backoff, call_retrying, delay
from statestream._clock import FakeClock


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.6), (6, 2.0), (7, 2.0), (10_000, 2.0)],
)
def test_the_delay_doubles_from_the_first_and_holds_at_the_cap(
    failures: int, expected: float
) -> None:
    assert delay(failures, 0.1, 2.0, 2.0) == pytest.approx(expected)


def test_a_delay_is_asked_after_a_failure() -> None:
    with pytest.raises(ValueError, match="failures >= 1"):
        delay(0, 0.1, 2.0, 2.0)


# (time of the failure, the answer: when to try next, or None to give up), one streak
# of a Backoff bounded at 5 s from its first failure at t=10.
BOUNDED = [
    (10.0, 10.1),
    (10.1, 10.3),
    (10.3, 10.7),
    (10.7, 11.5),
    (11.5, 13.1),
    (13.1, 15.0),  # 2.0 s, the cap, but never past the bound's end (10 + 5)
    (15.0, None),  # at the bound: give up
    (15.5, None),  # and every failure after it, until a success
]


def test_a_streak_waits_longer_each_time_and_gives_up_at_its_bound() -> None:
    backoff = Backoff(5.0)
    for now, expected in BOUNDED:
        at = backoff.failed(now)
        assert at == (None if expected is None else pytest.approx(expected)), now
    assert backoff.failures == len(BOUNDED)
    assert backoff.since == 10.0


def test_a_success_ends_the_streak_and_the_next_failure_begins_a_fresh_one() -> None:
    backoff = Backoff(5.0)
    backoff.failed(0.0)
    backoff.failed(4.0)
    assert backoff.ok() == 0.0  # when the streak began
    assert backoff.ok() is None  # none under way
    assert not backoff.down
    assert backoff.failed(100.0) == pytest.approx(100.1)  # a fresh bound, a fresh wait
    assert backoff.failures == 1
    assert backoff.failed(104.9) == pytest.approx(105.0)
    assert backoff.failed(105.0) is None


def test_unbounded_never_gives_up() -> None:
    backoff = Backoff(None, first_s=0.05)
    answers = [backoff.failed(float(t)) for t in range(0, 100_000, 1000)]
    assert answers[0] == pytest.approx(0.05)
    assert all(at is not None for at in answers)
    assert answers[-1] == pytest.approx(99_000 + 2.0)


def test_due_says_whether_the_next_attempts_time_has_come() -> None:
    backoff = Backoff(5.0)
    assert backoff.due(0.0)  # never failed
    at = backoff.failed(1.0)
    assert at == pytest.approx(1.1)
    assert not backoff.due(1.05)
    assert backoff.due(1.1)
    backoff.ok()
    assert backoff.due(1.0)


def test_call_retrying_waits_on_the_clock_until_the_operation_succeeds() -> None:
    clock = FakeClock(0.0)
    backoff = Backoff(10.0)
    tries: list[float] = []

    def operation() -> str:
        tries.append(clock.monotonic())
        if len(tries) < 4:
            raise ConnectionError("down")
        return "done"

    def failed(_exc: Exception) -> float:
        at = backoff.failed(clock.monotonic())
        assert at is not None
        return at

    assert call_retrying(operation, clock, failed) == "done"
    assert tries == pytest.approx([0.0, 0.1, 0.3, 0.7])


def test_call_retrying_stops_where_its_caller_raises() -> None:
    clock = FakeClock(0.0)
    backoff = Backoff(1.0)
    calls = 0

    def operation() -> None:
        nonlocal calls
        calls += 1
        raise ConnectionError("down")

    def failed(exc: Exception) -> float:
        at = backoff.failed(clock.monotonic())
        if at is None:
            raise TimeoutError("gave up") from exc
        return at

    with pytest.raises(TimeoutError, match="gave up") as caught:
        call_retrying(operation, clock, failed)
    assert isinstance(caught.value.__cause__, ConnectionError)
    # Tries at 0, 0.1, 0.3, 0.7, 1.0 (the last wait cut at the bound), the last one past it.
    assert calls == 5
    assert clock.monotonic() == pytest.approx(1.0)


def test_call_retrying_raises_an_error_no_retry_fixes_at_once() -> None:
    clock = FakeClock(0.0)

    def operation() -> None:
        raise ValueError("refused")

    def failed(exc: Exception) -> float:
        raise exc

    with pytest.raises(ValueError, match="refused"):
        call_retrying(operation, clock, failed)
    assert clock.monotonic() == 0.0
