"""The store-outage policy (statestream._outage): retry with backoff within the bound,
then stop with one line; table-tested with time as an input, and the guard on a FakeClock."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from statestream import FakeClock
from statestream._errors import (
    ProviderUnavailableError,
    SerializationError,
    StateCorruptError,
    StoreOutageError,
    StoreUnwritableError,
)
from statestream._outage import (
    OutageGuard,
    RetryAt,
    Stop,
    StoreOutage,
    guard_store,
    is_outage,
)
from statestream._registry import open_provider

DOWN = ProviderUnavailableError("cannot reach redis at h:1 to commit txid 3")
FULL = StoreUnwritableError("sqlite state database '/d/state.db' cannot be written: disk full")

# (failure times since the first, the verdict at each: a retry time, or "stop")
# bound 10 s; waits 0.1, 0.2, 0.4, ... at most 2 s, the last one cut at the bound.
SCHEDULES = [
    ([0.0], [0.1]),
    ([0.0, 0.1, 0.3, 0.7], [0.1, 0.3, 0.7, 1.5]),
    ([0.0, 0.1, 0.3, 0.7, 1.5, 3.1, 5.1], [0.1, 0.3, 0.7, 1.5, 3.1, 5.1, 7.1]),  # 2 s at most
    ([0.0, 9.9], [0.1, 10.0]),  # the last wait ends at the bound, not past it
    ([0.0, 10.0], [0.1, "stop"]),  # at the bound: stop
    ([0.0, 42.0, 42.5], [0.1, "stop", "stop"]),  # and every failure after it
    ([5.0], [5.1]),  # a slow first attempt: the outage starts when it failed
]


@pytest.mark.parametrize(("times", "verdicts"), SCHEDULES)
def test_retry_times_then_stop(times: list[float], verdicts: list[float | str]) -> None:
    policy = StoreOutage("redis at h:1", 10.0)
    start = 100.0
    for t, expected in zip(times, verdicts, strict=True):
        verdict = policy.failed(start + t, DOWN)
        if expected == "stop":
            assert isinstance(verdict, Stop)
        else:
            assert verdict == RetryAt(pytest.approx(start + float(expected)))


def test_a_success_ends_the_outage_and_the_next_one_has_the_whole_bound() -> None:
    policy = StoreOutage("redis at h:1", 10.0)
    assert policy.failed(0.0, DOWN) == RetryAt(0.1)
    assert policy.failed(9.9, DOWN) == RetryAt(10.0)
    assert policy.ok() == 0.0  # when the outage began
    assert policy.ok() is None  # no outage under way
    assert policy.failed(50.0, DOWN) == RetryAt(50.1)  # a fresh bound, a fresh backoff
    assert policy.failed(59.9, DOWN) == RetryAt(60.0)
    assert isinstance(policy.failed(60.0, DOWN), Stop)


# What ends an outage (issue 44, item 5): (the failure, the success, whether it ends it).
# A full disk still answers reads: a read that succeeds must not end its outage, or
# the bound starts again and the run stops after several bounds.
ENDS = [
    (DOWN, "read", True),
    (DOWN, "write", True),
    (FULL, "read", False),
    (FULL, "write", True),
]


@pytest.mark.parametrize(("error", "success", "ends"), ENDS)
def test_what_ends_an_outage(error: Exception, success: str, ends: bool) -> None:
    policy = StoreOutage("sqlite '/d/state.db'", 10.0)
    assert policy.failed(0.0, error) == RetryAt(0.1)
    assert policy.ok(write=success == "write") == (0.0 if ends else None)
    verdict = policy.failed(10.0, error)
    # Not ended: the bound runs from the first failure, so the run stops at 10 s.
    assert isinstance(verdict, Stop) is not ends


def test_a_full_disk_stops_the_guard_within_its_bound_whatever_reads_succeed() -> None:
    # A commit that cannot be written, while another thread's reads (a claim's
    # renewal) succeed during its waits: they do not restart the bound (they did:
    # the run stopped after 2.5-3x the bound, or never here).
    class ReadWhileWaiting(FakeClock):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            assert self.now < 30.0, "the bound was started again"
            guard.call(lambda: "read", write=False)

    clock = ReadWhileWaiting()
    guard = OutageGuard(StoreOutage("sqlite '/d/state.db'", 3.0), clock)

    def write() -> None:
        raise FULL

    with pytest.raises(StoreOutageError):
        guard.call(write)
    assert clock.now == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("error", "verb"), [(DOWN, "could not be reached"), (FULL, "could not be written")]
)
def test_the_stop_line_names_the_store_the_bound_and_the_cause(error: Exception, verb: str) -> None:
    policy = StoreOutage("sqlite '/d/state.db'", 3.0)
    policy.failed(1.0, error)
    stop = policy.failed(4.5, error)
    assert isinstance(stop, Stop)
    line = stop.message
    assert "\n" not in line
    assert line.startswith(f"the state store (sqlite '/d/state.db') {verb} for 3.5 s")
    assert "statestream.state.outage.secs: 3" in line
    assert str(error) in line
    assert line.endswith("run it again once the store is back")


def test_the_cause_is_one_line() -> None:
    policy = StoreOutage("x", 0.0)
    stop = policy.failed(0.0, ProviderUnavailableError("first\n  second"))
    assert isinstance(stop, Stop) and "first second" in stop.message


@pytest.mark.parametrize(
    ("error", "outage"),
    [
        (DOWN, True),
        (FULL, True),
        (SerializationError("a set"), False),  # a retry cannot fix it
        (StateCorruptError("bad"), False),
        (OSError("other"), False),
    ],
)
def test_what_counts_as_an_outage(error: BaseException, outage: bool) -> None:
    assert is_outage(error) is outage


class Flaky:
    """An operation that fails ``n`` times with ``error``, then returns ``"done"``."""

    def __init__(self, n: int, error: Exception = DOWN) -> None:
        self.n = n
        self.error = error
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.n:
            raise self.error
        return "done"


def test_the_guard_waits_on_its_clock_and_repeats_the_operation() -> None:
    clock = FakeClock()
    guard = OutageGuard(StoreOutage("redis at h:1", 10.0), clock)
    op = Flaky(4)
    assert guard.call(op) == "done"
    assert op.calls == 5
    assert clock.now == pytest.approx(0.1 + 0.2 + 0.4 + 0.8)
    assert guard.policy.since is None  # the outage is over


def test_the_guard_stops_at_the_bound_with_the_cause_attached() -> None:
    clock = FakeClock()
    guard = OutageGuard(StoreOutage("redis at h:1", 3.0), clock)
    with pytest.raises(StoreOutageError, match=r"^the state store \(redis at h:1\)") as info:
        guard.call(Flaky(1000))
    assert info.value.__cause__ is DOWN
    assert clock.now == pytest.approx(3.0)
    with pytest.raises(StoreOutageError):  # still away: at once, no new bound
        guard.call(Flaky(1000))
    assert clock.now == pytest.approx(3.0)


def test_the_guard_lets_other_errors_through_at_once() -> None:
    clock = FakeClock()
    guard = OutageGuard(StoreOutage("x", 10.0), clock)
    op = Flaky(1, SerializationError("a set"))
    with pytest.raises(SerializationError):
        guard.call(op)
    assert op.calls == 1 and clock.now == 0


def test_a_scan_starts_again_only_before_its_first_item() -> None:
    clock = FakeClock()
    guard = OutageGuard(StoreOutage("x", 10.0), clock)
    starts = 0

    def scan() -> Iterator[int]:
        nonlocal starts
        starts += 1
        if starts <= 2:
            raise DOWN
        yield from (1, 2, 3)

    assert list(guard.scan(scan)) == [1, 2, 3] and starts == 3

    def broken_halfway() -> Iterator[int]:
        yield 1
        raise DOWN

    it = guard.scan(broken_halfway)
    assert next(it) == 1
    with pytest.raises(ProviderUnavailableError):  # restarting would yield 1 twice
        next(it)


def test_a_guarded_provider_rides_out_a_store_that_cannot_be_written(tmp_path: Path) -> None:
    """The provider boundary: sqlite's "database or disk is full" is a StoreUnwritableError,
    and a guarded provider's state retries it, then stops with the one line."""
    provider = open_provider("sqlite", {"path": str(tmp_path / "s.db")}, scope="t")
    clock = FakeClock()
    guard_store(provider, {"statestream.state.outage.secs": 2.0}, clock)
    state = provider.get_state("count-0")
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    db = provider.provider.database  # type: ignore[attr-defined]
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorcode = 13  # type: ignore[attr-defined]
    real = db.connection

    def no_space() -> sqlite3.Connection:
        raise full

    db.connection = no_space
    state.put("b", 2)
    with pytest.raises(StoreOutageError, match=r"could not be written for 2\.0 s.*disk is full"):
        state.prepare_commit(1)
    assert clock.now == pytest.approx(2.0)
    db.connection = real
    state.prepare_commit(1)  # the same txid again, now that there is space
    state.commit(1)
    provider.close()
    with open_provider("sqlite", {"path": str(tmp_path / "s.db")}, scope="t") as again:
        assert dict(again.get_state("count-0").items()) == {"a": 1, "b": 2}


def test_an_outage_raised_in_another_process_is_found_in_its_traceback_text() -> None:
    from statestream._retry import cannot_fix_in

    """A Spark job that failed on a StoreOutageError in an executor is not retried."""
    here = StoreOutageError("the state store (x) could not be reached for 2.0 s")
    wrapped = RuntimeError("job failed")
    wrapped.__cause__ = here
    assert cannot_fix_in(wrapped) is here
    remote = RuntimeError(
        "An exception was thrown from the Python worker:\nTraceback ...\n"
        "statestream._errors.StoreOutageError: the state store (x) could not be written\n"
    )
    found = cannot_fix_in(remote)
    assert isinstance(found, StoreOutageError)
    assert str(found) == "the state store (x) could not be written"
    assert cannot_fix_in(RuntimeError("a bolt raised ValueError")) is None
