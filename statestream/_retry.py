"""The retry policy of reliable spouts: backoff between attempts, then give up.

Storm replays a failed spout tuple at once and forever, so one record that
makes a bolt raise spins the topology. Here the runtime keeps, per spout
task, how often each message id failed (:class:`Retries`) and hands it back
to the spout (``Spout.fail``) only once the policy's delay has passed, while
other tuples keep flowing; after the last attempt it gives up, and the
runtime writes the message to the dead-letter file and tells the spout it is
settled (``Spout.dead_lettered``)::

    emitted ── fails ──> failures += 1 ── failures < max.attempts ──> wait delay(failures),
       ^                        |                                       then Spout.fail
       |                        └── failures == max.attempts ──> GIVE_UP (dead letter)
       └──────────────────────────────────────────────── re-emitted by the spout

Attempts count every processing of the message, the first included:
``max.attempts: 5`` means one emission and four retries; ``0`` never gives up
(Storm's behaviour). The delay after the n-th failure is
``initial * multiplier ** (n - 1)``, capped at ``max``.

The counting rule: a message's count is its *consecutive* failed attempts,
so only a message that itself fails ``max.attempts`` times in a row is given
up on. In at-least-once mode an attempt is one emission: it ends with a fail
(count one more) or an ack (forget the count). With exactly-once state a
failure rolls the whole topology back, and an attempt is everything that
runs between two rewinds (on Spark: one job of a batch)::

    in the attempt, message m ...                    m's count
    ------------------------------------------------ ----------------------------------
    failed (one of its tuples or more)               +1, once per attempt
    went through: processed without a failure,       forgotten: it is replayed only
      then a cut, or a rewind that found nothing       because another message failed
      left in flight
    was cut off by the rewind (still in flight)      unchanged

Every message that failed in an attempt counts, not only the one whose
failure came first: each caused the rewind as much as the other.

Pure: no threads, no I/O; time is an input (the runtime's clock). Table-tested
in ``tests/unit/test_retry_policy.py`` and, the counting rule,
``tests/unit/test_retry_attempts.py``.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["Retries", "RetryPolicy", "Verdict", "VerdictKind", "msg_key"]


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait after each failure of a message, and when to give up.

    ``initial_ms`` (``statestream.retry.initial.ms``) is the wait after the
    first failure, multiplied by ``multiplier`` after each further one and
    capped at ``max_ms``; ``max_attempts`` is how many times a message is
    processed in all before it is given up (``0``: never).
    """

    initial_ms: float = 100.0
    multiplier: float = 2.0
    max_ms: float = 10_000.0
    max_attempts: int = 5

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> RetryPolicy:
        """The policy of the ``statestream.retry.*`` keys in ``conf``."""
        return cls(
            float(conf["statestream.retry.initial.ms"]),
            float(conf["statestream.retry.multiplier"]),
            float(conf["statestream.retry.max.ms"]),
            int(conf["statestream.retry.max.attempts"]),
        )

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure before the next attempt."""
        if failures < 1:
            raise ValueError(f"delay() is asked after a failure (failures >= 1), got {failures}")
        try:
            ms = self.initial_ms * self.multiplier ** (failures - 1)
        except OverflowError:  # a message retried forever: the cap holds long before
            ms = self.max_ms
        return min(ms, self.max_ms) / 1000.0

    def gives_up(self, failures: int) -> bool:
        """True once a message that failed ``failures`` times has had its last attempt."""
        return self.max_attempts > 0 and failures >= self.max_attempts


class VerdictKind(Enum):
    RETRY = "retry"
    """Hand the message back to the spout at :attr:`Verdict.at`."""
    GIVE_UP = "give_up"
    """That was the last attempt: dead-letter the message, tell the spout it is settled."""
    IGNORED = "ignored"
    """The message already waits for its retry (a second report of one failure)."""


@dataclass(frozen=True)
class Verdict:
    """What to do with a message that just failed: its kind, how many times it has
    failed so far, and when to retry it (clock seconds; None unless RETRY)."""

    kind: VerdictKind
    failures: int
    at: float | None = None


def msg_key(msg_id: Any) -> Hashable:
    """A hashable key for ``msg_id``: itself when hashable, else its repr.

    Message ids are whatever the spout chose; lists and dicts are allowed
    (Storm allows any object) but cannot key a dict.
    """
    try:
        hash(msg_id)
    except TypeError:
        return ("$repr", repr(msg_id))
    return msg_id  # type: ignore[no-any-return]


class Retries:
    """One spout task's failed messages: how often each failed, and the retry schedule.

    Call :meth:`failed` when a message's tree failed or timed out, :meth:`succeeded`
    when it was acked, :meth:`due` each scheduling round to get the messages
    whose delay has passed (hand each back with ``Spout.fail``), and
    :meth:`forget` when it was settled otherwise (dead-lettered). A message
    that succeeded or was given up is forgotten, so the memory held is bounded
    by the messages currently failing.

    With exactly-once state (the topology rewinds instead of handing messages
    back), per attempt: :meth:`emitted_again` for each message emitted,
    :meth:`attempt_failed` for each that failed, then :meth:`rewound` (the
    attempt ended with a rewind) or :meth:`passed_cut` (a cut or a commit
    passed with no failure pending); see the counting rule above.
    """

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.failures: dict[Hashable, int] = {}  # key -> failures so far (messages in retry only)
        # (due, seq, key), seq breaks ties; non-empty while a retry may fall due
        self.heap: list[tuple[float, int, Hashable]] = []
        self._waiting: dict[Hashable, Any] = {}  # key -> msg_id, while it waits for its retry
        self._seq = 0
        # Exactly-once, the attempt under way (see the module's counting rule):
        # messages with failures emitted again in it and not failed (yet), and
        # messages failed in it (counted once).
        self._again: set[Hashable] = set()
        self._failed_now: set[Hashable] = set()

    def failed(self, msg_id: Any, now: float, *, schedule: bool = True) -> Verdict:
        """``msg_id`` failed at ``now``: count it and say what to do.

        With ``schedule`` (at-least-once) a RETRY puts the message on the
        schedule that :meth:`due` reads; without it (exactly-once, where the
        runtime rewinds instead of handing the message back) the failure is
        only counted.
        """
        key = msg_key(msg_id)
        if key in self._waiting:
            return Verdict(VerdictKind.IGNORED, self.failures[key])
        n = self.failures.get(key, 0) + 1
        if self.policy.gives_up(n):
            self.failures.pop(key, None)
            return Verdict(VerdictKind.GIVE_UP, n)
        self.failures[key] = n
        at = now + self.policy.delay(n)
        if schedule:
            self._waiting[key] = msg_id
            self._seq += 1
            heapq.heappush(self.heap, (at, self._seq, key))
        return Verdict(VerdictKind.RETRY, n, at)

    def due(self, now: float) -> list[Any]:
        """The messages whose delay has passed by ``now``, in the order they fell due;
        they no longer count as waiting."""
        heap = self.heap
        out = []
        while heap and heap[0][0] <= now:
            _, _, key = heapq.heappop(heap)
            msg_id = self._waiting.pop(key, _GONE)
            if msg_id is not _GONE:
                out.append(msg_id)
        return out

    @property
    def next_due(self) -> float | None:
        """When the next waiting message falls due (None: none waits)."""
        return self.heap[0][0] if self.heap else None

    def succeeded(self, msg_id: Any) -> None:
        """``msg_id`` was acked: forget its failures."""
        if self.failures:
            self.failures.pop(msg_id_key_fast(msg_id), None)

    def emitted_again(self, msg_id: Any) -> None:
        """Exactly-once: a message that failed before was emitted again in the
        attempt under way (a rewind replays it). See :meth:`passed_cut` and
        :meth:`rewound`."""
        key = msg_id_key_fast(msg_id)
        if key in self.failures and key not in self._failed_now:
            self._again.add(key)

    def attempt_failed(self, msg_id: Any, now: float) -> Verdict:
        """Exactly-once: ``msg_id`` failed in the attempt under way (the topology
        goes back to its last checkpoint). Counted once per attempt, however
        many of its tuples fail (a second report is IGNORED); the verdict is
        :meth:`failed`'s without a schedule (RETRY: the replay waits until
        ``at``; GIVE_UP: dead-letter it, the replay goes without it)."""
        key = msg_key(msg_id)
        if key in self._failed_now:
            return Verdict(VerdictKind.IGNORED, self.failures.get(key, 0))
        self._failed_now.add(key)
        self._again.discard(key)
        return self.failed(msg_id, now, schedule=False)

    def passed_cut(self) -> None:
        """Exactly-once: a consistent cut was taken with no failure pending, so every
        message emitted again since the last one went through: its failures are
        forgotten. Attempts count *consecutive* failures, as acks make them
        in at-least-once: a message replayed only because another one failed
        must not run out of attempts however often it is replayed."""
        for key in self._again:
            self.failures.pop(key, None)
        self._again.clear()
        self._failed_now.clear()

    def rewound(self, *, complete: bool = False) -> None:
        """Exactly-once: the attempt under way ended with a rewind (the topology went
        back; what was emitted since is undone, and is replayed).

        ``complete``: every message emitted in the attempt had been processed
        when it ended (nothing was left in flight), so each one that did not
        fail went through, and its failures are forgotten: it is replayed
        only because another message failed. Without it, what did not fail
        may have been cut off, and keeps its count.
        """
        if complete:
            for key in self._again:
                self.failures.pop(key, None)
        self._again.clear()
        self._failed_now.clear()

    def forget(self, msg_id: Any) -> None:
        """Drop everything known about ``msg_id`` (its failures and its wait)."""
        key = msg_key(msg_id)
        self.failures.pop(key, None)
        self._waiting.pop(key, None)  # its heap entry is skipped by due()

    def attempts(self, msg_id: Any) -> int:
        """How many times ``msg_id`` failed and was not yet acked nor given up."""
        return self.failures.get(msg_key(msg_id), 0)

    @property
    def waiting(self) -> int:
        """How many messages wait for their retry."""
        return len(self._waiting)

    def clear_schedule(self) -> list[Any]:
        """Forget the schedule (the failures stay counted); returns the messages that waited."""
        waiting = list(self._waiting.values())
        self._waiting.clear()
        self.heap.clear()
        return waiting


def msg_id_key_fast(msg_id: Any) -> Hashable:
    """:func:`msg_key`, with the common int and str ids returned without a hash check."""
    t = type(msg_id)
    if t is int or t is str:
        return msg_id  # type: ignore[no-any-return]
    return msg_key(msg_id)


_GONE = object()
