"""A store outage, ridden out or ended: one policy for every provider and runtime.

A state store that cannot be reached (:class:`ProviderUnavailableError`: a
Redis restarted, stalled, a network blip) or cannot be written
(:class:`StoreUnwritableError`: a full disk, an I/O error) is retried with
backoff for ``statestream.state.outage.secs``; a store back within that
bound is used as if nothing happened, and one still away after it stops the
run with :class:`StoreOutageError`, one line naming the store and the cause.

Why here, at the :class:`~statestream._state.StateBackend` boundary, and by
waiting: every operation of a backend is atomic and can be repeated after a
failure (the provider SDK's contract), so repeating the one that failed is
exact; the checkpoint in progress is simply retried, with nothing rolled
back and nothing rewound (a rewind would only meet the same outage again,
as a storm of rewinds). The task that needs the store waits where it
stands, and the run pauses with it, tuples in flight included: nothing can
commit meanwhile anyway. Since the checkpoint spout's record, every stateful
task's prepare and commit, and a Spark executor's prepare all go through a
backend, one wrapper (:class:`GuardedBackend`), installed by
:func:`guard_store` where each runtime opens its provider, covers every
provider and every runtime.

* :class:`StoreOutage` is the policy, pure: fed ``(now, error)`` on each
  failed operation and :meth:`~StoreOutage.ok` on a success, it answers
  :class:`RetryAt` or :class:`Stop`. Time is an input.
* :class:`OutageGuard` runs an operation under the policy, waiting on a
  clock (the runtime's; a ``FakeClock`` in tests).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar

from ._backoff import FIRST_S, MOST_S, MULTIPLIER, Backoff, call_retrying
from ._config import settings_of
from ._errors import ProviderUnavailableError, StoreOutageError, StoreUnwritableError

if TYPE_CHECKING:
    from ._clock import Clock
    from ._kvstate import CommitOutcome
    from ._state import Delta, ScanPage, StateBackend

__all__ = [
    "OUTAGE_KEY",
    "GuardedBackend",
    "OutageGuard",
    "RetryAt",
    "Stop",
    "StoreOutage",
    "describe_store",
    "guard_store",
    "is_outage",
]

log = logging.getLogger("statestream")

OUTAGE_KEY: Final = "statestream.state.outage.secs"

T = TypeVar("T")
_END: Any = object()  # a scan's end, told from its items


def is_outage(error: BaseException) -> bool:
    """Whether ``error`` says the store is away for now (retried) rather than that an
    operation is wrong (raised at once)."""
    return isinstance(error, (ProviderUnavailableError, StoreUnwritableError))


@dataclass(frozen=True)
class RetryAt:
    """Retry the operation at ``at`` (the clock's seconds)."""

    at: float


@dataclass(frozen=True)
class Stop:
    """Give up: the run stops with ``message`` (one line)."""

    message: str


class StoreOutage:
    """When to retry a store that failed, and when to give up. Pure.

    An outage starts at the first failure after a success (or ever) and
    ends at the next success (:meth:`ok`) of an operation that shows the
    store is back: any operation for a store that could not be reached, a
    write for one that could not be written (a full disk still answers
    reads, which must not start the bound again). Within it, each failure answers
    :class:`RetryAt` (waits of ``first_s``, doubling, at most ``most_s``,
    the last one ending at the bound: a :class:`~statestream._backoff.Backoff`);
    the first failure at or past ``bound_s`` after the outage began answers
    :class:`Stop`, and so does every failure after it until a success.
    """

    def __init__(
        self,
        store: str,
        bound_s: float,
        *,
        first_s: float = FIRST_S,
        multiplier: float = MULTIPLIER,
        most_s: float = MOST_S,
    ) -> None:
        self.store = store
        self.bound_s = bound_s
        self.backoff = Backoff(bound_s, first_s=first_s, multiplier=multiplier, most_s=most_s)
        self.unwritable = False
        """Whether a write failed in the outage under way (only a write ends it then)."""

    @property
    def since(self) -> float | None:
        """When the outage under way began (None: the store works)."""
        return self.backoff.since

    @property
    def failures(self) -> int:
        return self.backoff.failures

    def failed(self, now: float, error: BaseException) -> RetryAt | Stop:
        """An operation failed at ``now`` with ``error`` (an outage: :func:`is_outage`)."""
        if self.since is None:
            self.unwritable = False
        if isinstance(error, StoreUnwritableError):
            self.unwritable = True
        at = self.backoff.failed(now)
        return Stop(self.message(now, error)) if at is None else RetryAt(at)

    def ok(self, write: bool = True) -> float | None:
        """An operation succeeded (``write``: one that writes); returns when the outage
        it ends began, if it ends one (a read does not end an unwritable store's)."""
        if self.since is None or (self.unwritable and not write):
            return None
        return self.backoff.ok()

    def message(self, now: float, error: BaseException) -> str:
        """The line that stops the run: the store, how long, the cause, what to do."""
        cause = " ".join(str(error).split()) or type(error).__name__
        what = "written" if isinstance(error, StoreUnwritableError) else "reached"
        began = now if self.since is None else self.since
        return (
            f"the state store ({self.store}) could not be {what} for {now - began:.1f} s "
            f"({self.failures} attempts; {OUTAGE_KEY}: {self.bound_s:g}): {cause}. The run "
            "stops and keeps what it committed: run it again once the store is back"
        )


class OutageGuard:
    """Runs store operations under a :class:`StoreOutage`, waiting on ``clock``.

    One per provider (an outage is the store's, whichever namespace meets
    it). Logs one warning when an outage begins and one line when it ends.
    """

    def __init__(self, policy: StoreOutage, clock: Clock) -> None:
        self.policy = policy
        self.clock = clock

    def call(self, operation: Callable[[], T], *, write: bool = True) -> T:
        """``operation()`` (``write``: it writes), repeated while the store is away;
        raises StoreOutageError once the policy stops (the last error attached as
        its cause)."""
        result = call_retrying(operation, self.clock, self._failed)
        self._ok(write)
        return result

    def scan(self, scan: Callable[[], Iterator[T]]) -> Iterator[T]:
        """Iterate ``scan()``, starting it again while it fails before its first item.

        A failure after the first item is raised as it is: a scan restarted
        halfway would yield those items twice.
        """

        def start() -> tuple[Iterator[T], list[T]]:
            it = scan()
            return it, [first] if (first := next(it, _END)) is not _END else []

        it, first = call_retrying(start, self.clock, self._failed)
        self._ok(write=False)
        yield from first
        if first:
            yield from it

    def _failed(self, exc: Exception) -> float:
        """When to retry after ``exc``; raise it if it is no outage, StoreOutageError
        once the policy stops."""
        if not is_outage(exc):
            raise exc
        first = self.policy.since is None
        verdict = self.policy.failed(self.clock.monotonic(), exc)
        if isinstance(verdict, Stop):
            raise StoreOutageError(verdict.message) from exc
        if first:
            log.warning(
                "the state store (%s) is unavailable: %s; retrying for up to %g s (%s)",
                self.policy.store,
                " ".join(str(exc).split()),
                self.policy.bound_s,
                OUTAGE_KEY,
            )
        return verdict.at

    def _ok(self, write: bool) -> None:
        if self.policy.since is not None:
            since = self.policy.ok(write)
            if since is None:
                return  # a read: a store that cannot be written may still answer it
            log.warning(
                "the state store (%s) is back after %.1f s; the run goes on",
                self.policy.store,
                self.clock.monotonic() - since,
            )


#: The optional StateBackend methods, passed through under the guard where the
#: backend has them (None where not: the state then does without), and whether
#: each writes.
_OPTIONAL: Final = (
    ("scan_page", False),
    ("write_prepared_plain", True),
    ("key_count", False),
    ("get_many", False),
)


class GuardedBackend:
    """A :class:`~statestream._state.StateBackend` whose operations ride out an outage.

    Each primitive is atomic and may be repeated after a failure (the
    provider SDK's contract), so repeating it under the guard is exact.
    """

    scan_page: ScanPage | None
    write_prepared_plain: Callable[..., int | None] | None
    key_count: Callable[[], int] | None
    get_many: Callable[[Sequence[bytes]], list[bytes | None]] | None

    def __init__(self, backend: StateBackend, guard: OutageGuard) -> None:
        self.backend = backend
        self.guard = guard
        # Each optional method only where the backend has it: a paged scan
        # (items() falls back to scan()), the plain prepare (without it every
        # deferred put is encoded one by one: issue 34), an O(1) key count,
        # the batched read (without it the state loads a key at a time).
        for name, write in _OPTIONAL:
            inner = getattr(backend, name, None)
            setattr(self, name, None if inner is None else _guarded(guard, inner, write))

    def load(self, key: bytes) -> bytes | None:
        return self.guard.call(lambda: self.backend.load(key), write=False)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return self.guard.scan(self.backend.scan)

    def load_txids(self) -> tuple[int, int | None]:
        return self.guard.call(self.backend.load_txids, write=False)

    def write_prepared(self, txid: int, delta: Delta) -> None:
        self.guard.call(lambda: self.backend.write_prepared(txid, delta))

    def apply_prepared(self, txid: int) -> CommitOutcome:
        return self.guard.call(lambda: self.backend.apply_prepared(txid))

    def commit_direct(self, delta: Delta) -> None:
        self.guard.call(lambda: self.backend.commit_direct(delta))

    def discard_prepared(self) -> None:
        self.guard.call(self.backend.discard_prepared)


def _guarded(guard: OutageGuard, method: Callable[..., T], write: bool) -> Callable[..., T]:
    return lambda *args: guard.call(lambda: method(*args), write=write)


def describe_store(provider: Any) -> str:
    """The store as a person names it: ``redis at host:port``, ``sqlite '/path'``."""
    inner = getattr(provider, "provider", provider)  # a ScopedProvider's store
    name = getattr(inner, "name", type(inner).__name__)
    address = getattr(inner, "address", None)
    if address is not None:
        return f"{name} at {address}"
    path = getattr(inner, "path", None)
    if path is not None:
        return f"{name} {str(path)!r}"
    return repr(inner)


def guard_store(provider: Any, config: Mapping[str, Any], clock: Clock) -> None:
    """Make ``provider``'s states ride out an outage for ``statestream.state.outage.secs``
    on ``clock``. Every runtime calls it where it opens its provider. A provider
    not built on :class:`~statestream._state.BackendStateProvider` is left as is
    (its errors reach the runtime as before)."""
    inner = getattr(provider, "provider", provider)
    if hasattr(inner, "outage"):
        policy = StoreOutage(
            describe_store(inner), settings_of(config).statestream_state_outage_secs
        )
        inner.outage = OutageGuard(policy, clock)
