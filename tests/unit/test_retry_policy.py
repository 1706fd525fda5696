"""The retry policy (statestream._retry): delays, giving up, the schedule; table-tested."""

from __future__ import annotations

import pytest

from statestream._retry import Retries, RetryPolicy, Verdict, VerdictKind, msg_key

RETRY, GIVE_UP, IGNORED = VerdictKind.RETRY, VerdictKind.GIVE_UP, VerdictKind.IGNORED

DEFAULT = RetryPolicy()  # 100 ms, x2, at most 10 s, 5 attempts

# (policy, failures so far, the delay after that failure in seconds)
DELAYS = [
    (DEFAULT, 1, 0.1),
    (DEFAULT, 2, 0.2),
    (DEFAULT, 3, 0.4),
    (DEFAULT, 4, 0.8),
    (DEFAULT, 7, 6.4),
    (DEFAULT, 8, 10.0),  # 12.8 s capped at max.ms
    (DEFAULT, 5000, 10.0),  # 2 ** 4999 overflows a float: the cap holds
    (RetryPolicy(0, 2, 10_000, 5), 3, 0.0),  # initial 0: at once, as Storm
    (RetryPolicy(250, 1, 10_000, 5), 9, 0.25),  # multiplier 1: constant
    (RetryPolicy(100, 3, 1_000, 5), 3, 0.9),
    (RetryPolicy(100, 3, 1_000, 5), 4, 1.0),
    (RetryPolicy(100, 2, 50, 5), 1, 0.05),  # max below initial: max wins
]


@pytest.mark.parametrize(("policy", "failures", "delay"), DELAYS)
def test_delay_after_each_failure(policy: RetryPolicy, failures: int, delay: float) -> None:
    assert policy.delay(failures) == pytest.approx(delay)


def test_delay_is_asked_after_a_failure_only() -> None:
    with pytest.raises(ValueError, match="failures >= 1"):
        DEFAULT.delay(0)


# (max attempts, failures so far, gives up?)
GIVES_UP = [
    (5, 1, False),
    (5, 4, False),
    (5, 5, True),  # five attempts in all: one emission, four retries
    (1, 1, True),  # never retried
    (0, 1, False),  # 0: never give up (Storm)
    (0, 10**6, False),
]


@pytest.mark.parametrize(("attempts", "failures", "gives_up"), GIVES_UP)
def test_gives_up_after_max_attempts(attempts: int, failures: int, gives_up: bool) -> None:
    assert RetryPolicy(max_attempts=attempts).gives_up(failures) is gives_up


def test_from_config_reads_the_four_keys() -> None:
    from statestream._config import load_config

    conf = load_config(
        env={},
        sets=[
            "statestream.retry.initial.ms=5",
            "statestream.retry.multiplier=1.5",
            "statestream.retry.max.ms=60",
            "statestream.retry.max.attempts=0",
        ],
    )
    assert RetryPolicy.from_config(conf) == RetryPolicy(5.0, 1.5, 60.0, 0)
    assert RetryPolicy.from_config(load_config(env={})) == DEFAULT


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("statestream.retry.multiplier", "0.5"),
        ("statestream.retry.max.attempts", "-1"),
        ("statestream.retry.initial.ms", "1.5"),
    ],
)
def test_bad_retry_settings_are_refused_naming_the_key(key: str, value: str) -> None:
    from statestream._config import load_config
    from statestream._errors import ConfigError

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(env={}, sets=[f"{key}={value}"])


# -- Retries: one spout task's failed messages --------------------------------------


def test_a_message_failing_forever_is_scheduled_with_growing_delays_then_given_up() -> None:
    r = Retries(DEFAULT)
    now = 100.0
    verdicts = []
    for _ in range(5):
        v = r.failed("m", now)
        verdicts.append(v)
        if v.kind is RETRY:
            assert v.at is not None
            assert r.due(v.at - 1e-9) == []  # not a moment early
            assert r.waiting == 1
            now = v.at
            assert r.due(now) == ["m"]
            assert r.waiting == 0
    assert verdicts == [
        Verdict(RETRY, 1, pytest.approx(100.1)),
        Verdict(RETRY, 2, pytest.approx(100.3)),
        Verdict(RETRY, 3, pytest.approx(100.7)),
        Verdict(RETRY, 4, pytest.approx(101.5)),
        Verdict(GIVE_UP, 5),
    ]
    assert r.failures == {}  # given up: forgotten


def test_max_attempts_0_never_gives_up() -> None:
    r = Retries(RetryPolicy(max_attempts=0))
    now = 0.0
    for n in range(1, 1001):
        v = r.failed(7, now)
        assert v.kind is RETRY and v.failures == n
        assert v.at is not None
        now = v.at
        assert r.due(now) == [7]
    assert now == pytest.approx(0.1 + 0.2 + 0.4 + 0.8 + 1.6 + 3.2 + 6.4 + 10.0 * 993)


def test_an_ack_forgets_the_failures_so_a_later_failure_starts_over() -> None:
    r = Retries(DEFAULT)
    r.failed("a", 0.0)
    assert r.due(1.0) == ["a"]
    r.failed("a", 1.0)
    assert r.attempts("a") == 2
    assert r.due(2.0) == ["a"]
    r.succeeded("a")
    assert r.attempts("a") == 0
    assert r.failed("a", 5.0) == Verdict(RETRY, 1, pytest.approx(5.1))


def test_other_messages_are_scheduled_independently_in_due_order() -> None:
    r = Retries(DEFAULT)
    r.failed("x", 0.0)  # due 0.1
    assert r.due(0.1) == ["x"]
    r.failed("x", 0.1)  # second failure: due 0.3
    r.failed("y", 0.15)  # first failure: due 0.25
    r.failed("z", 0.15)  # due 0.25, after y (ties keep failure order)
    assert r.next_due == pytest.approx(0.25)
    assert r.due(0.25) == ["y", "z"]
    assert r.due(0.29) == []
    assert r.due(0.31) == ["x"]
    assert r.next_due is None


def test_a_second_report_while_waiting_is_ignored() -> None:
    r = Retries(DEFAULT)
    r.failed("m", 0.0)
    assert r.failed("m", 0.05) == Verdict(IGNORED, 1)
    assert r.due(0.1) == ["m"]


def test_without_schedule_failures_are_only_counted() -> None:
    """Exactly-once: the runtime rewinds instead of handing the message back."""
    r = Retries(RetryPolicy(max_attempts=3))
    assert r.failed("m", 0.0, schedule=False) == Verdict(RETRY, 1, pytest.approx(0.1))
    assert r.waiting == 0 and r.due(100.0) == []
    assert r.failed("m", 1.0, schedule=False) == Verdict(RETRY, 2, pytest.approx(1.2))
    assert r.failed("m", 2.0, schedule=False) == Verdict(GIVE_UP, 3)


def test_forget_drops_a_waiting_message() -> None:
    r = Retries(DEFAULT)
    r.failed("m", 0.0)
    r.forget("m")
    assert r.waiting == 0 and r.due(1.0) == [] and r.attempts("m") == 0


def test_unhashable_message_ids_are_keyed_by_repr() -> None:
    r = Retries(DEFAULT)
    r.failed(["a", 1], 0.0)
    assert r.attempts(["a", 1]) == 1
    assert r.due(0.1) == [["a", 1]]
    assert msg_key(["a", 1]) == ("$repr", "['a', 1]")
    assert msg_key(("a", 1)) == ("a", 1)
