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
failure came first: each caused the rewind as much as the other. An attempt
with a failure runs on to where its cut would have been, so that one rewind
finds every message failing in it.

After the rewind the others are replayed untouched while each failed message
waits for its retry: the spout emits it again as it replays, and it is *held*
(:meth:`Retries.hold`: not delivered) until its delay has passed; then
:meth:`Retries.due` hands it back to the spout (``Spout.fail``), which emits
it again, and that emission is its next attempt. A cut taken while it is held
first hands it back too (:meth:`Retries.clear_schedule`), so that the spout's
position holds it (see ``statestream.Rewindable``). So a poison message costs
a rewind per attempt, shared with every other message failing at that time,
and never a wait of the whole topology.

Pure: no threads, no I/O; time is an input (the runtime's clock). Table-tested
in ``tests/unit/test_retry_policy.py`` and, the counting rule,
``tests/unit/test_retry_attempts.py``.
"""

from __future__ import annotations

import heapq
import re
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from ._backoff import delay
from ._config import settings_of
from ._errors import (
    RuntimeFailure,
    SerializationError,
    SinkError,
    StoreOutageError,
    UnpicklableTupleError,
)
from ._results import ErrorReport

__all__ = [
    "FailureRate",
    "Retries",
    "RetryPolicy",
    "Verdict",
    "VerdictKind",
    "cannot_fix_in",
    "msg_key",
    "retry_cannot_fix",
    "too_many_failures",
]


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
        settings = settings_of(conf)
        return cls(
            float(settings.statestream_retry_initial_ms),
            settings.statestream_retry_multiplier,
            float(settings.statestream_retry_max_ms),
            settings.statestream_retry_max_attempts,
        )

    def delay(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure before the next attempt."""
        return delay(failures, self.initial_ms, self.multiplier, self.max_ms) / 1000.0

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
        self._due_at: dict[Hashable, float] = {}  # key -> when its retry may be emitted

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
            key = msg_id_key_fast(msg_id)
            self.failures.pop(key, None)
            self._due_at.pop(key, None)

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
        verdict = self.failed(msg_id, now, schedule=False)
        if verdict.at is not None:
            self._due_at[key] = verdict.at
        else:
            self._due_at.pop(key, None)
        return verdict

    def hold(self, msg_id: Any, now: float, replaying: bool = False) -> bool:
        """Exactly-once, at emit: True if ``msg_id`` failed and its retry is not
        due yet, or is due but the topology replays after a rewind (a retry
        failing again would undo the replay with it). It is then not
        delivered: it waits on the schedule, and :meth:`due` hands it back
        once its delay has passed (the runtime asks after the replay). False:
        deliver it (an attempt; see :meth:`emitted_again`)."""
        key = msg_id_key_fast(msg_id)
        at = self._due_at.get(key)
        if at is None or (at <= now and not replaying):
            self._due_at.pop(key, None)
            self.emitted_again(msg_id)
            return False
        if key not in self._waiting:
            self._waiting[key] = msg_id
            self._seq += 1
            heapq.heappush(self.heap, (at, self._seq, key))
        return True

    def passed_cut(self) -> None:
        """Exactly-once: a consistent cut was taken with no failure pending, so every
        message emitted again since the last one went through: its failures are
        forgotten. Attempts count *consecutive* failures, as acks make them
        in at-least-once: a message replayed only because another one failed
        must not run out of attempts however often it is replayed."""
        for key in self._again:
            self.failures.pop(key, None)
            self._due_at.pop(key, None)
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
                self._due_at.pop(key, None)
        self._again.clear()
        self._failed_now.clear()
        # The spouts are opened anew and emit their held messages again.
        self.clear_schedule()

    def forget(self, msg_id: Any) -> None:
        """Drop everything known about ``msg_id`` (its failures and its wait)."""
        key = msg_key(msg_id)
        self.failures.pop(key, None)
        self._due_at.pop(key, None)
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


_CANNOT_FIX: Final = (SerializationError, StoreOutageError, UnpicklableTupleError, SinkError)
# The last line of an executor's traceback, as a Spark job's error carries it.
_REMOTE_CANNOT_FIX: Final = re.compile(
    r"(" + "|".join(t.__name__ for t in _CANNOT_FIX) + r"): (.+)"
)


def cannot_fix_in(error: BaseException) -> BaseException | None:
    """The error behind ``error`` that no retry can fix (:func:`retry_cannot_fix`),
    if one is: itself, its cause, or one raised in another process whose
    traceback ``error`` carries as text (a Spark executor's, in the job's
    PythonException), rebuilt with its message. Retrying such a job would fail
    the same way: the run stops instead."""
    seen: BaseException | None = error
    while seen is not None:
        if retry_cannot_fix(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    found = _REMOTE_CANNOT_FIX.findall(str(error))
    if not found:
        return None
    name, message = found[-1]
    kind = next(t for t in _CANNOT_FIX if t.__name__ == name)
    return kind(message.strip())


def retry_cannot_fix(exc: BaseException) -> bool:
    """Whether ``exc``, raised while processing a message, is no poison message
    but something no retry can fix: a value the state's serializer cannot
    encode (``state.put`` of a datetime fails the same way for every message),
    an emit that cannot be pickled, a store that stayed away past its bound.
    The run stops at once, with the error whole, instead of dead-lettering the
    input one message after another."""
    return isinstance(exc, _CANNOT_FIX)


#: The fewest distinct tuples failing in the window before :class:`FailureRate`
#: judges the rate: one early poison message is 100% of a small window, and a
#: message retried again and again is one message.
MIN_FAILED_TUPLES = 10


@dataclass
class FailureRate:
    """The error-rate limit of one bolt task (as Flink's failure-rate restart
    strategy): when more than ``max_rate`` of the tuples it executed in the
    last ``window`` seconds failed (``statestream.errors.max.rate`` and
    ``statestream.errors.window.secs``), the run stops instead of
    dead-lettering the whole input: a bolt that fails every tuple is a bug.

    Counted where tuples fail, at the bolt, so that failures and executions
    are counted at the same point (a spout hears of failures late, and with
    exactly-once state hears of successes only at a commit). The runtime
    calls :meth:`failed` for each tuple the task fails, and :meth:`judge` after
    each batch in which it failed any, with the task's executed count before
    and after the batch. The rate is judged once the failed tuples in the
    window are :data:`MIN_FAILED_TUPLES` distinct values or more (a value
    retried counts once). ``max_rate`` 1 never stops. Pure; time is an input.
    """

    max_rate: float
    window: float
    _failures: deque[tuple[float, Hashable]] = field(default_factory=deque)
    _keys: dict[Hashable, int] = field(default_factory=dict)  # value -> failures in window
    _batches: deque[tuple[float, int]] = field(default_factory=deque)  # (time, executed before)

    @classmethod
    def from_config(cls, conf: Mapping[str, Any]) -> FailureRate:
        settings = settings_of(conf)
        return cls(settings.statestream_errors_max_rate, settings.statestream_errors_window_secs)

    def failed(self, values: Any, now: float) -> None:
        """A tuple of these values failed at ``now``."""
        key = msg_key(tuple(values) if isinstance(values, list) else values)
        self._failures.append((now, key))
        self._keys[key] = self._keys.get(key, 0) + 1

    def judge(self, now: float, executed_before: int, executed_after: int) -> str | None:
        """After a batch with failures: None, or why the run stops (the rate, for a
        message that names the task)."""
        failures, keys, batches = self._failures, self._keys, self._batches
        start = now - self.window
        while failures and failures[0][0] <= start:
            _, old = failures.popleft()
            left = keys[old] - 1
            if left:
                keys[old] = left
            else:
                del keys[old]
        if not batches:
            # The task's first failure: what it executed before counts as in
            # the window (executed counts are the task's since the run began).
            batches.append((start, 0))
        batches.append((now, executed_before))
        # The base: the last count at or before the window's start.
        while len(batches) > 1 and batches[1][0] <= start:
            batches.popleft()
        if self.max_rate >= 1 or len(keys) < MIN_FAILED_TUPLES:
            return None
        processed = max(executed_after - batches[0][1], len(failures))
        if len(failures) <= self.max_rate * processed:
            return None
        return (
            f"{len(failures):,} of the {processed:,} tuples it executed in the last "
            f"{self.window:g} s failed ({len(failures) / processed:.0%}, more than "
            f"statestream.errors.max.rate, {self.max_rate:.0%})"
        )


def too_many_failures(
    component: str, task_index: int, reason: str, errors: Iterable[ErrorReport]
) -> RuntimeFailure:
    """The error that stops a run whose task ``component[task_index]`` tripped its
    :class:`FailureRate` (``reason``), naming the component's first error."""
    first = next((e for e in errors if e.component == component), None)
    cause = f"; the first error: {first.error}" if first is not None else ""
    return RuntimeFailure(
        f"{component}[{task_index}]: {reason}: the run stops{cause}; fix the cause, or "
        "raise statestream.errors.max.rate (1 turns the limit off)"
    )
