"""The driver's store and checkpoint record: claim, recovery, and the stateful hooks.

The driver drives the same :class:`~statestream._checkpoint_driver.CheckpointDriver`
as the local runtime's checkpoint spout (its synchronous side) and so stores the
same :class:`~statestream._exactly_once.CheckpointRecord` (phase, and for
``PREPARING(t)`` the data spouts' positions at the end of batch ``t``), so a
store one runtime left behind, killed or not, is finished exactly by the
other. Only the transport differs: a batch is the unit of replay, so there
are no per-tuple acks, no barriers and no ``$checkpoint`` tuples (the system
components the builder adds are ignored; the driver plays the checkpoint
spout).

For each stateful task the driver keeps one instance of the bolt for the
run (:meth:`DriverCheckpoints.start`): the hooks that follow a job
(``pre_commit``, ``pre_rollback``, ``init_state`` at a recovery) run on it. (The
alternative, keeping executing instances in the Python worker next to the
executor's state cache and calling the hooks in a small commit job, costs one
more Spark job per batch and still needs a fallback instance when the task
lands on another worker.) The user's side of this is in docs/guides/spark.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..._checkpoint import Action, Emission
from ..._checkpoint_driver import CheckpointDriver
from ..._clock import Clock
from ..._components import BasicBolt, Bolt, StatefulBolt, TopologyContext, task_namespace
from ..._config import settings_of
from ..._errors import ConfigError, RuntimeFailure
from ..._exactly_once import CheckpointRecord
from ..._stateful import apply_action
from ..errorlog import error_report
from ..plan import RuntimePlan
from ..session import StoreSession
from .config import CHECKPOINT_NAMESPACE
from .shared import fresh_state, state_opener, user_bolt
from .tally import NullCollector, RunTally

log = logging.getLogger("statestream")

#: The test hook of :attr:`SparkRuntime.fault_hook`: ``hook(point, txid)``.
FaultHook = Callable[[str, int], None]


class DriverCheckpoints:
    """The store of a run (claimed on the driver), its checkpoint record, the
    recovery from it, and the driver's instance of each stateful task.

    ``store`` is the topology's :class:`~statestream.runtime.session.StoreSession`;
    ``fault`` is called as ``fault("recovered", txid)`` once a start has
    recovered. Call order: :meth:`start` (claims and recovers), then any of
    :meth:`prepare` / :meth:`commit` / :meth:`abort`, then :meth:`close`.
    """

    def __init__(
        self,
        plan: RuntimePlan,
        store: StoreSession,
        clock: Clock,
        tally: RunTally,
        *,
        exactly_once: bool,
        fault: FaultHook,
    ) -> None:
        self._plan = plan
        self._store = store
        self._clock = clock
        self._tally = tally
        self._exactly_once = exactly_once
        self._fault = fault
        self._bolts = [b for b in plan.bolts if not b.id.startswith("$")]
        self._namespaces = plan.stateful_namespaces
        self._driver: CheckpointDriver | None = None
        self._instances: dict[str, StatefulBolt] = {}
        self.tokens: dict[str, str] = {}
        """Per stateful namespace, the token of the executor state object whose
        prepare last committed (executors may keep using it); empty after a
        rollback or a recovery, when no such object is current."""

    # -- the store ----------------------------------------------------------------
    @property
    def provider(self) -> Any:
        """The topology's scoped provider while the store is open, else None."""
        return self._store.provider

    def open_provider(self) -> Any:
        """The topology's scoped provider (the store opens, claimed, on first use)."""
        return self._store.open(rescale=False)

    def claim(self) -> None:
        """Claim this topology's scope of the store for the run, on the driver, before
        the checkpoint record is read (``BackendStateProvider.claim``; executors
        never claim). Held until :meth:`close`. Raises StateLockedError if another
        run holds it (or this run's was lost)."""
        self._store.open(rescale=False)
        self._store.check()

    def check_claim(self) -> None:
        """Raise StateLockedError if the run's claim on the store was lost."""
        self._store.check()

    def close(self) -> None:
        """The end of a run: close the store and let the claim go (idempotent)."""
        self._store.close()

    def context(self, cid: str, index: int) -> TopologyContext:
        """The context of task ``index`` of ``cid`` run on the driver (a spout, a hook)."""
        return self._plan.context(
            cid,
            index,
            state_opener=state_opener(self.open_provider()),
            clock=self._clock,  # the driver's tasks read the runtime's clock
            exactly_once=self._exactly_once,
        )

    # -- the record and the coordinator -------------------------------------------
    def load(self) -> CheckpointRecord:
        """The stored checkpoint record (the store opens on first use)."""
        return CheckpointRecord.load(fresh_state(self.open_provider(), CHECKPOINT_NAMESPACE))

    @property
    def driver(self) -> CheckpointDriver:
        """The checkpoint coordinator over its stored record (from :meth:`start` on)."""
        if self._driver is None:
            raise RuntimeFailure("the spark runtime has not started its checkpoints")
        return self._driver

    @property
    def record(self) -> CheckpointRecord:
        """The record the last recovery restored (positions to seek spouts to)."""
        return self.driver.record

    def _now_ms(self) -> float:
        return self._clock.monotonic() * 1000.0

    def start(self, *, positions_needed: bool) -> None:
        """Claim the store, load the record, check it can be continued, and recover.

        Every start is a recovery: the coordinator rolls back a prepare that
        may not have finished, finishes a decided commit, and ends with
        ``INITSTATE``. ``positions_needed``: refuse a record whose restore
        point has no spout positions (the spouts would be read from their
        beginning and counted into the state again).
        """
        self.claim()
        # Before any job: a bolt whose parallelism changed since the last
        # run gets its keys re-partitioned (statestream._rescale).
        self._store.rescale()
        record = self.load()
        txid, positions = record.restore_point()
        # Acked positions (a local at-least-once run's) are resumed from, with a
        # warning (statestream._resume): nothing is lost, a little counted twice.
        if positions_needed and txid >= 0 and positions is None and txid not in record.acked:
            raise ConfigError(
                f"the state store holds checkpoint {record.state} (a recovery restores txid "
                f"{txid}) but no spout positions for it: it was written without exactly-once "
                "state (the local runtime with statestream.state.exactly.once: false, or a fed "
                "or at-most-once spark run), so the spouts would be read from their beginning "
                "and counted into the state again. Finish it with the runtime and settings that "
                "wrote it, or give this run a fresh store (another sqlite path or redis key_prefix)"
            )
        self._driver = CheckpointDriver(
            lambda: self.open_provider().get_state(CHECKPOINT_NAMESPACE),
            settings_of(self._plan.config).topology_state_checkpoint_interval_ms,
            self._now_ms,
            record,
        )
        self._open_instances()
        if self.recover():
            self._tally.count("recovered")
        self._fault("recovered", self.driver.state.txid)

    def recover(self) -> bool:
        """Run the recovery to its end on every stateful namespace; True if it rolled
        back or committed."""
        return self.driver.recover(self._recovery_act)

    def prepare(self, positions: Mapping[str, Any] | None) -> int:
        """Store ``PREPARING(t)`` with the batch's end ``positions``; ``t``."""
        return self.driver.prepare(positions)

    def commit(self, txid: int, tokens: dict[str, str]) -> None:
        """Every task prepared ``txid``: ``COMMITTING(txid)`` stored, every namespace
        commits (``pre_commit`` first), ``COMMITTED(txid)`` stored. ``tokens``: the
        executors' state objects that prepared it, current from now on."""
        self.driver.commit(txid, self._act)
        self.tokens = tokens

    def abort(self, txid: int) -> None:
        """ROLLBACK(``txid``) (pre_rollback first), then the recovery's INITSTATE, on
        every namespace."""
        self.driver.abort(txid)
        self.recover()

    def _recovery_act(self, emission: Emission) -> None:
        if emission.action is not Action.INITSTATE:
            log.warning(
                "spark runtime: recovery %s(%d) on every stateful task",
                emission.action.value,
                emission.txid,
            )
        self._act(emission)

    def _act(self, emission: Emission) -> None:
        """Carry out ``ROLLBACK``/``COMMIT``/``INITSTATE`` on every stateful namespace.

        The hook runs first, on the driver's instance of the task
        (``pre_rollback()``, ``pre_commit(t)``; ``init_state`` for
        ``INITSTATE``), then the state acts through a state object that reads
        its txids from the store (the executors prepared it).
        """
        action, txid = emission
        if action is Action.PREPARE:
            raise RuntimeFailure("PREPARE is carried out by the job's tasks, not by the driver")
        if action is not Action.COMMIT:
            self.tokens = {}  # no executor's state object is current any more
        provider = self.open_provider()
        for namespace in self._namespaces:
            state = fresh_state(provider, namespace)
            apply_action(
                self._instances[namespace], state, action, txid, action is not Action.INITSTATE
            )

    def _open_instances(self) -> None:
        """One instance per stateful task, on the driver, for its pre_commit/pre_rollback."""
        if self._instances:
            return
        for spec in self._bolts:
            if not spec.is_stateful:
                continue
            for i in range(spec.parallelism):
                bolt: StatefulBolt = user_bolt(self._plan.topology, spec.id)
                bolt.prepare(
                    self._plan.conf_for(spec.id), self.context(spec.id, i), NullCollector()
                )
                self._instances[task_namespace(spec.id, i)] = bolt

    def cleanup(self) -> None:
        """``cleanup`` once per bolt task, on the driver, with the committed state.

        A stateful task's driver instance (the one its hooks ran on) is given
        the committed state again first; other bolts get a fresh instance.
        """
        provider = self.open_provider() if self._namespaces else None
        for spec in self._bolts:
            for i in range(spec.parallelism):
                try:
                    namespace = task_namespace(spec.id, i)
                    bolt: Bolt | BasicBolt | None = self._instances.get(namespace)
                    if bolt is None:
                        bolt = user_bolt(self._plan.topology, spec.id)
                        context = self.context(spec.id, i)
                        if isinstance(bolt, BasicBolt):
                            bolt.prepare(self._plan.conf_for(spec.id), context)
                        else:
                            bolt.prepare(self._plan.conf_for(spec.id), context, NullCollector())
                    if isinstance(bolt, StatefulBolt):
                        bolt.init_state(fresh_state(provider, namespace))
                    bolt.cleanup()
                except Exception as exc:
                    self._tally.errors.append(error_report(spec.id, i, exc, "cleanup()"))
