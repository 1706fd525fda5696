"""Retry with backoff within a bound: one object for every wait on something away.

A store that cannot be reached (``statestream._outage``), a broker or a
sink's target lost mid-run (``statestream.connectors._broker.Reconnect``), a
JetStream fetch loop whose server went away: each tries again after a wait
that grows, and gives up once the thing has been away for its bound. The
waits and the bound are :class:`Backoff`'s; what the failure means (the
error to raise, the line to log) stays with its user.

* :func:`delay` is the formula, shared with the spouts' retry policy
  (:class:`statestream._retry.RetryPolicy`): after the n-th failure in a row,
  ``first * multiplier ** (n - 1)``, capped at ``most``.
* :class:`Backoff` is the policy, pure: told each failure with the time it
  happened (:meth:`Backoff.failed`), it answers when to try next, or that
  the bound is past; a success (:meth:`Backoff.ok`) ends the streak, and the
  next failure begins a fresh one. Time is an input. Table-tested in
  ``tests/unit/test_backoff.py``.
* :func:`call_retrying` is the blocking loop, written once: repeat an
  operation, waiting on a clock between attempts (the runtime's; a
  ``FakeClock`` in tests), until it succeeds or its caller stops it.

A leaf: it imports nothing of statestream but the clock's type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:
    from ._clock import Clock

__all__ = ["Backoff", "call_retrying", "delay"]

T = TypeVar("T")

FIRST_S: Final = 0.1  # the first wait: a blip is over before a person notices
MULTIPLIER: Final = 2.0
MOST_S: Final = 2.0  # a server back is used within this, however long it was away


def delay(failures: int, first: float, multiplier: float, most: float) -> float:
    """The wait after the ``failures``-th failure in a row (1 or more):
    ``first * multiplier ** (failures - 1)``, at most ``most`` (in ``first``'s unit)."""
    if failures < 1:
        raise ValueError(f"a delay is asked after a failure (failures >= 1), got {failures}")
    try:
        wait = first * multiplier ** (failures - 1)
    except OverflowError:  # a thing retried for ever: the cap holds long before
        return most
    return min(wait, most)


class Backoff:
    """When to try again something that failed, and when to give up. Pure.

    A streak of failures begins at the first failure after a success (or
    ever) and ends at the next :meth:`ok`. Within it, the n-th failure at
    ``now`` answers ``now + delay(n)`` (:func:`delay`), never later than the
    bound's end (``since + bound_s``); the first failure at or past that end
    answers None (give up), and so does every failure after it until a
    success. ``bound_s`` None: never give up.
    """

    def __init__(
        self,
        bound_s: float | None = None,
        *,
        first_s: float = FIRST_S,
        multiplier: float = MULTIPLIER,
        most_s: float = MOST_S,
    ) -> None:
        self.bound_s = bound_s
        self.first_s = first_s
        self.multiplier = multiplier
        self.most_s = most_s
        self.since: float | None = None
        """When the streak under way began (None: the last attempt succeeded)."""
        self.failures = 0
        """The failures of the streak under way (kept after it ends, for messages)."""
        self.next_try = 0.0
        """When the next attempt is due (the last answer of :meth:`failed`)."""

    @property
    def down(self) -> bool:
        """Whether a streak of failures is under way."""
        return self.since is not None

    def failed(self, now: float) -> float | None:
        """An attempt failed at ``now``: when to try next (the clock's seconds), or
        None once the bound is past."""
        if self.since is None:
            self.since, self.failures = now, 0
        self.failures += 1
        at = now + delay(self.failures, self.first_s, self.multiplier, self.most_s)
        if self.bound_s is not None:
            end = self.since + self.bound_s
            if now >= end:
                return None
            at = min(at, end)
        self.next_try = at
        return at

    def ok(self) -> float | None:
        """An attempt succeeded: the streak, if one was under way, ends; returns when
        it began (None: there was none)."""
        since, self.since = self.since, None
        return since

    def due(self, now: float) -> bool:
        """Whether to try at ``now``: always, unless a streak is under way and its next
        attempt's time has not come."""
        return self.since is None or now >= self.next_try


def call_retrying(
    operation: Callable[[], T], clock: Clock, failed: Callable[[Exception], float]
) -> T:
    """``operation()``, tried again while it fails, waiting on ``clock``.

    ``failed(error)`` is told each failure and answers when to try next (the
    clock's seconds: most often a :class:`Backoff`'s answer), or raises, which
    ends the loop: the error itself for one no retry fixes, the caller's own
    once its bound is past. A success is the caller's to record (its
    ``Backoff.ok()``) after this returns.
    """
    while True:
        try:
            return operation()
        except Exception as exc:
            at = failed(exc)
            clock.sleep(max(0.0, at - clock.monotonic()))
