"""A run's store session: the one place a runtime opens its topology's store.

Every runtime keeps its state the same way, so it is written here once:

1. the provider ``topology.state.provider`` names, built from
   ``topology.state.provider.config`` and scoped to the topology's name
   (:class:`~statestream._registry.ScopedProvider`: two topologies on one
   store never meet);
2. the outage guard (:func:`~statestream._outage.guard_store`): the states'
   store operations ride out ``statestream.state.outage.secs`` of outage;
3. the claim of the topology's scope of the store
   (:class:`~statestream._registry.RunClaim`), taken by the process that
   owns the run, before anything reads or writes a state, and held until
   the run ends: a second run of the topology on the store is refused with
   :class:`~statestream._errors.StateLockedError`;
4. the re-partition of stored state whose parallelism changed since the last
   run (:func:`~statestream._rescale.rescale_state`), by the owner, before
   any task reads its state, when the topology has stateful bolts.

Who owns the run: a one-process :class:`~statestream.runtime.local.LocalRuntime`,
the workers' :class:`~statestream.runtime.workers.WorkerSupervisor` (its
workers, forked from it, share its claim and open sessions with
``owner=False``) and the Spark driver (executors never claim).

Lifecycle::

    session = StoreSession(topology, config, clock)
    provider = session.open()   # scoped, guarded, claimed, rescaled
    ...
    session.check()             # now and then: StateLockedError if the claim lapsed
    session.close()             # the provider closed, the claim let go (idempotent)

:meth:`disconnect` closes the provider and keeps the claim (a rewind, or a
supervisor about to fork its workers); the next :meth:`open` opens the store
again under the same claim, after checking that it was not lost.

Which refusals apply to the provider (one a runner's processes cannot share)
is decided in :mod:`statestream.runtime.plan`, before a session opens.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._clock import Clock, SystemClock
from .._config import settings_of
from .._outage import guard_store
from .._registry import RunClaim, open_provider
from .._rescale import check_import, rescale_state
from .._state import size_cache
from .._topology import Topology

__all__ = ["StoreSession", "open_store"]


def open_store(config: Mapping[str, Any], scope: str, clock: Clock) -> Any:
    """The provider of ``config``'s store scoped to topology ``scope``, with the outage
    guard (waiting on ``clock``) and the state cache's size: how every process
    that reaches a run's store opens it (a session; a Spark executor, which
    neither claims nor rescales). Nothing connects yet."""
    settings = settings_of(config)
    provider = open_provider(
        settings.topology_state_provider, settings.topology_state_provider_config, scope=scope
    )
    guard_store(provider, config, clock)
    size_cache(provider, settings.topology_state_cache_mb)
    return provider


class StoreSession:
    """One run's hold on its topology's store (see the module docstring).

    ``owner``: this process owns the run, so it claims the topology's scope
    and re-partitions state; a worker of a supervisor (which did both for
    it) passes False. ``clock`` is what the outage guard waits on.
    Nothing connects before :meth:`open`; providers connect on first use.
    """

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any],
        clock: Clock | None = None,
        *,
        owner: bool = True,
    ) -> None:
        self.topology = topology
        self.config = config
        self.clock: Clock = clock or SystemClock()
        self.owner = owner
        #: The scoped provider while the session is open, else None.
        self.provider: Any = None
        self._claim = RunClaim()
        self._rescaled = False  # since the provider was opened

    # -- opening -------------------------------------------------------------------
    def open(self, *, rescale: bool = True) -> Any:
        """The topology's scoped provider, opened on the first call (and again after
        :meth:`disconnect`), with the outage guard installed and, for the
        owner, the claim held; with ``rescale``, state whose parallelism
        changed re-partitioned (:meth:`rescale`). Idempotent: a later call
        returns the same provider and does nothing more.

        Raises StateLockedError if another run holds the claim (or this
        run's claim was lost since); a failed open lets go what it took (the
        provider it opened is closed, the claim it took released).
        """
        had_claim, opened = self._claim.asked, self.provider is None
        if opened:
            provider = open_store(self.config, self.topology.name, self.clock)
            if self.owner:
                try:
                    self._claim.take(provider, self.topology.name, self.config)
                except BaseException:
                    provider.close()
                    raise
            self.provider = provider
            self._rescaled = False
        if rescale and not self._rescaled:
            try:
                self.rescale()
            except BaseException:
                if opened:
                    self.disconnect()
                if not had_claim:
                    self._claim.release()
                raise
        return self.provider

    def rescale(self) -> None:
        """Re-partition the state of every stateful bolt whose parallelism changed
        since the last run (:func:`~statestream._rescale.rescale_state`), once per
        opening of the store; nothing for a session that does not own the run
        or a topology without stateful bolts. Opens the store first if needed.
        The owner first refuses a store whose import did not finish
        (:func:`~statestream._rescale.check_import`)."""
        provider = self.open(rescale=False)
        if not self._rescaled and self.owner:
            # A store an import left half-written is no checkpoint to start from.
            check_import(provider, self.topology.name)
            if self.topology.has_stateful_bolts:
                rescale_state(provider, self.topology)
        self._rescaled = True

    # -- the claim -------------------------------------------------------------------
    @property
    def claimed(self) -> bool:
        """This run has asked for its claim (and not let it go since)."""
        return self._claim.asked

    @property
    def lost(self) -> str | None:
        """Why the claim this run holds was lost while it ran, or None while it holds
        (only a lease can be lost: :attr:`~statestream._registry.RunClaim.lost`)."""
        return self._claim.lost

    @property
    def can_lapse(self) -> bool:
        """The claim can be lost while the run goes on (a lease): the runtime then
        calls :meth:`check` now and then, on a timer, never per tuple."""
        return self._claim.can_lapse

    def check(self) -> None:
        """Raise StateLockedError if the claim this run holds was lost (:attr:`lost`):
        another run may be writing the topology's state, so this one stops."""
        self._claim.check()

    def release_claim(self) -> None:
        """Let the claim go and keep the provider (a run whose first start failed:
        another run may claim at once, while this one's cleanup still reads its
        states until :meth:`close`). Idempotent."""
        self._claim.release()

    # -- closing ---------------------------------------------------------------------
    def disconnect(self) -> None:
        """Close the provider and keep the claim: a rewind opens the store again
        within the run, a supervisor's forked workers open their own. Idempotent."""
        provider, self.provider = self.provider, None
        self._rescaled = False
        if provider is not None:
            provider.close()

    def close(self) -> None:
        """The end of the run: close the provider and let the claim go. Idempotent."""
        try:
            self.disconnect()
        finally:
            self._claim.release()

    def __enter__(self) -> StoreSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "open" if self.provider is not None else "closed"
        return f"StoreSession({self.topology.name!r}, {state}, claimed={self.claimed})"
