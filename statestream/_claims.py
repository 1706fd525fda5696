"""What a process holds of its stores' scopes, for providers that claim them.

A provider's ``claim(scope, wait)`` (see
:meth:`~statestream._state.BackendStateProvider.claim`) takes a *hold* on
the store, once per process and scope: sqlite a file lock, redis a lease.
The rest of the contract is the same for every such provider and lives
here, in :class:`ProcessClaims`:

* re-entrant: a claim of a scope this process holds already is granted by
  joining the hold (:meth:`ProcessClaims.join`), and each claim is released
  on its own; the last release in the process lets the hold go
  (:meth:`Hold.end`);
* forked children share the hold through the claims they inherited, whose
  ``release()`` does nothing in them (the hold is their parent's to end),
  and a claim a child makes itself is decided as another process's would
  be: a child starts with no holds of its own;
* a scope another process holds is waited for on the provider's clock
  (:class:`ClaimWait`), so that a test advances a fake clock instead of
  sleeping.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Hashable
from typing import Final, Generic, Protocol, TypeVar

from statestream._clock import Clock

__all__ = ["CLAIM_POLL_S", "ClaimHandle", "ClaimWait", "Hold", "ProcessClaims"]

CLAIM_POLL_S: Final = 0.05
"""How often a claim tries again while another process holds the scope."""


class ClaimWait:
    """The wait of one claim for a scope another process holds: up to ``wait``
    seconds of ``clock`` (the provider's ``clock``), trying every CLAIM_POLL_S.

    Start it before the first try; after each failed try, :meth:`over` says
    whether to give up, else :meth:`pause` waits until the next try.
    """

    def __init__(self, clock: Clock, wait: float) -> None:
        self.clock = clock
        self.deadline = clock.monotonic() + wait

    def over(self) -> bool:
        """The wait is spent: refuse the claim."""
        return self.clock.monotonic() >= self.deadline

    def pause(self) -> None:
        """Wait until the next try (never past the deadline)."""
        self.clock.sleep(min(CLAIM_POLL_S, self.deadline - self.clock.monotonic()))


class Hold(Protocol):
    """A process's hold on one scope of a store (a file lock, a lease)."""

    def end(self) -> None:
        """Let go of the store. Called once, in the process that took the hold, by the
        release of its last claim; it should not raise (runs release their claim on the
        way out of a failure)."""
        ...


H = TypeVar("H", bound=Hold)


class _Entry(Generic[H]):
    __slots__ = ("claims", "hold", "pid")

    def __init__(self, hold: H) -> None:
        self.hold = hold
        self.claims = 1  # claims of this process not yet released
        self.pid = os.getpid()  # the process that took the hold: the only one to end it


class ClaimHandle(Generic[H]):
    """One claim of a scope (a :class:`~statestream._state.ScopeClaim`), as
    :meth:`ProcessClaims.add` and :meth:`ProcessClaims.join` hand them out."""

    __slots__ = ("_entry", "_released")

    def __init__(self, released: Callable[[_Entry[H]], bool], entry: _Entry[H]) -> None:
        # What the registry gives a handle: a way to count one claim of its
        # entry released (True: it was the last), never the registry itself.
        self._released = released
        self._entry: _Entry[H] | None = entry

    @property
    def hold(self) -> H | None:
        """The hold this claim shares; None once released."""
        return None if self._entry is None else self._entry.hold

    @property
    def lost(self) -> str | None:
        """Why the hold was lost while this claim had it (a hold that can be lost, a
        lease, says so in its ``lost``), or None."""
        lost = getattr(self.hold, "lost", None)
        return None if lost is None else str(lost)

    @property
    def can_lapse(self) -> bool:
        """The hold can be lost while this claim has it: it says so in a ``lost`` of
        its own (a lease); a file lock cannot."""
        return hasattr(self.hold, "lost")

    def release(self) -> None:
        """Let this claim go (idempotent); the hold goes with the last claim of the process."""
        entry, self._entry = self._entry, None
        if entry is None or entry.pid != os.getpid():
            # A forked child (a worker) shares its parent's hold through this
            # claim; letting it go here would end the parent's.
            return
        if self._released(entry):
            entry.hold.end()

    def __repr__(self) -> str:
        return f"<claim of {self.hold!r}>" if self._entry else "<claim (released)>"


class ProcessClaims(Generic[H]):
    """The holds this process has on scopes of a provider's stores, each under an
    ``ident`` the provider chooses (one per store and scope: a lock file's path,
    a server and key), with the claims made of each (see the module doc).

    A provider keeps one at module level. Thread-safe.
    """

    def __init__(self) -> None:
        self._entries: dict[Hashable, _Entry[H]] = {}
        self._lock = threading.Lock()
        os.register_at_fork(after_in_child=self._forget_after_fork)

    def join(
        self, ident: Hashable, match: Callable[[H], bool] | None = None
    ) -> ClaimHandle[H] | None:
        """Another claim of this process's hold on ``ident`` (or, if there is none, of
        the first hold ``match`` accepts), or None if it holds nothing there."""
        with self._lock:
            entry = self._entries.get(ident)
            if entry is None and match is not None:
                entry = next((e for e in self._entries.values() if match(e.hold)), None)
            if entry is None:
                return None
            entry.claims += 1
            return ClaimHandle(self._release, entry)

    def add(self, ident: Hashable, hold: H) -> ClaimHandle[H]:
        """Record ``hold``, just taken by this process, on ``ident``; its first claim."""
        entry = _Entry(hold)
        with self._lock:
            self._entries[ident] = entry
        return ClaimHandle(self._release, entry)

    def holds(self) -> list[H]:
        """The holds of this process, now."""
        with self._lock:
            return [entry.hold for entry in self._entries.values()]

    def forget(self, hold: H) -> None:
        """Join ``hold`` no more (a lost lease): the next claim of its scope here is
        decided afresh. Its claims still release it."""
        with self._lock:
            for ident, entry in list(self._entries.items()):
                if entry.hold is hold:
                    del self._entries[ident]

    def _release(self, entry: _Entry[H]) -> bool:
        """Count one claim of ``entry`` released; True if it was the last one."""
        with self._lock:
            entry.claims -= 1
            if entry.claims:
                return False
            for ident, held in list(self._entries.items()):
                if held is entry:
                    del self._entries[ident]
            return True

    def _forget_after_fork(self) -> None:
        # The child's claims of its parent's holds are the handles it
        # inherited (their release does nothing there); a claim it makes
        # itself must be decided as another process's would be. The lock may
        # have been held by a thread that does not exist in the child.
        self._lock = threading.Lock()
        self._entries.clear()
