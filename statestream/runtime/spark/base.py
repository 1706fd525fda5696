"""The driver's session, store and checkpoint record: what every part of the driver uses.

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
run (:meth:`DriverBase._open_driver_bolts`): the hooks that follow a job
(``pre_commit``, ``pre_rollback``, ``init_state`` at a recovery) run on it. (The
alternative, keeping executing instances in the Python worker next to the
executor's state cache and calling the hooks in a small commit job, costs one
more Spark job per batch and still needs a fallback instance when the task
lands on another worker.) The user's side of this is in docs/guides/spark.md.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle

from ..._checkpoint import Action, Emission
from ..._checkpoint_driver import CheckpointDriver
from ..._clock import Clock
from ..._components import (
    StatefulBolt,
    TopologyContext,
    task_namespace,
)
from ..._config import Config, settings_of
from ..._deadletter import DeadLetterFile
from ..._errors import ConfigError, RuntimeFailure
from ..._exactly_once import CheckpointRecord
from ..._messages import MessageBook
from ..._results import ErrorReport, RunResult, TaskMetrics
from ..._retry import (
    FailureRate,
    RetryPolicy,
)
from ..._stateful import apply_action
from ..._topology import ComponentSpec, Topology
from ..._transactional.driver import TransactionalLayout
from ..errorlog import ErrorLog
from ..plan import RuntimePlan
from ..session import StoreSession
from .config import CHECKPOINT_NAMESPACE, SPARK_DEFAULTS, task_tries
from .executor import Shipped
from .shared import fresh_state, state_opener, user_bolt

if TYPE_CHECKING:
    from ..metrics import MetricsBank
    from .spouts import SpoutTask
    from .stages import JobWatch
    from .transactional import TxJob

log = logging.getLogger("statestream")


class NullCollector:
    def emit(self, *args: Any, **kwargs: Any) -> None:
        pass

    emit_direct = emit
    ack = emit
    fail = emit
    reset_timeout = emit
    report_error = emit


class DriverBase:
    """What the parts of :class:`~statestream.runtime.spark.SparkRuntime` share.

    The attributes are set by ``SparkRuntime.__init__``; the methods here
    open the session and the store, and run the checkpoint record's recovery.
    """

    fault_hook: Callable[[str, int], None] | None
    topology: Topology
    config: Config
    plan: RuntimePlan
    clock: Clock
    _spark: Any
    _own_session: bool
    batch_size: int
    attempts: int
    _stop: bool
    _deadline: float | None
    errors: list[ErrorReport]
    error_log: ErrorLog
    _counters: dict[str, int]
    _store: StoreSession
    _tokens: dict[str, str]
    component_tasks: dict[str, list[int]]
    spouts: list[ComponentSpec]
    bolts: list[ComponentSpec]
    namespaces: list[str]
    _sources: dict[str, tuple[str, str]]
    _by_value: list[str]
    fed: list[str]
    transactional: TransactionalLayout | None
    at_most_once: bool
    exactly_once: bool
    _metrics: dict[tuple[str, int], TaskMetrics]
    bank: MetricsBank
    _watch: JobWatch
    _checkpoints: CheckpointDriver | None
    _spout_tasks: list[SpoutTask]
    _driver_bolts: dict[str, StatefulBolt]
    _tx_jobs: list[TxJob]
    _tx_failures: dict[int, int]
    retry_policy: RetryPolicy
    _books: dict[str, MessageBook]
    _failure_rates: dict[tuple[str, int], tuple[FailureRate, int]]
    deadletter_path: Path
    deadletters: DeadLetterFile

    if TYPE_CHECKING:

        def metrics(self) -> dict[str, TaskMetrics]: ...

    def _payload(self, sc: Any, exactly_once: bool) -> Any:
        """The broadcast executors unpickle once per worker: the plan, and the
        sources of the user modules it travels with (see :func:`.executor._loads`)."""
        data = cloudpickle.dumps(Shipped(self.plan, exactly_once, task_tries(sc)))
        return sc.broadcast((self._sources, data))

    # -- session and provider ---------------------------------------------------
    @property
    def master(self) -> str:
        if self._spark is not None:
            return str(self._spark.sparkContext.master)
        return settings_of(self.config).spark_master

    def _session(self) -> Any:
        if self._spark is not None:
            return self._spark
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise ConfigError(
                "the spark runtime needs PySpark: pip install 'statestream[spark]'"
            ) from exc
        active = SparkSession.getActiveSession()
        if active is not None:
            self._spark = active
            return active
        builder = SparkSession.builder.appName(f"statestream-{self.topology.name}")
        for key, value in {**SPARK_DEFAULTS, **self.config.spark_conf}.items():
            builder = builder.config(
                key, str(value).lower() if isinstance(value, bool) else str(value)
            )
        self._spark = builder.getOrCreate()
        self._spark.sparkContext.setLogLevel("ERROR")
        self._own_session = True
        return self._spark

    @property
    def provider(self) -> Any:
        """The topology's scoped provider while the store is open, else None."""
        return self._store.provider

    def _open_provider(self) -> Any:
        """The topology's scoped provider (the store opens, claimed, on first use)."""
        return self._store.open(rescale=False)

    def _claim_store(self) -> None:
        """Claim this topology's scope of the store for the run, on the driver, before
        the checkpoint record is read (``BackendStateProvider.claim``; executors
        never claim). Held until :meth:`_close_provider`. Raises
        StateLockedError if another run holds it (or this run's was lost)."""
        self._store.open(rescale=False)
        self._store.check()

    def _close_provider(self) -> None:
        """The end of a run: close the store and let the claim go."""
        self._store.close()

    def _context(self, cid: str, index: int) -> TopologyContext:
        return self.plan.context(
            cid,
            index,
            state_opener=state_opener(self._open_provider()),
            clock=self.clock,  # the driver's tasks (spouts, hooks) read the runtime's clock
            exactly_once=self.exactly_once,
        )

    # -- the checkpoint record and the coordinator ----------------------------------
    def _load(self) -> CheckpointRecord:
        return CheckpointRecord.load(fresh_state(self._open_provider(), CHECKPOINT_NAMESPACE))

    @property
    def checkpoints(self) -> CheckpointDriver:
        """The checkpoint coordinator over its stored record (from the run's start on)."""
        if self._checkpoints is None:
            raise RuntimeFailure("the spark runtime has not started its checkpoints")
        return self._checkpoints

    @staticmethod
    def _now_ms() -> float:
        return time.monotonic() * 1000.0

    def _start_checkpoints(self, *, positions_needed: bool) -> None:
        """Load the record, check it can be continued, and recover from it.

        Every start is a recovery: the coordinator rolls back a
        prepare that may not have finished, finishes a decided commit, and
        ends with ``INITSTATE``.
        """
        self._claim_store()
        # Before any job: a bolt whose parallelism changed since the last
        # run gets its keys re-partitioned (statestream._rescale).
        self._store.rescale()
        record = self._load()
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
        self._checkpoints = CheckpointDriver(
            lambda: self._open_provider().get_state(CHECKPOINT_NAMESPACE),
            settings_of(self.config).topology_state_checkpoint_interval_ms,
            self._now_ms,
            record,
        )
        self._open_driver_bolts()
        if self._recover():
            self._counters["recovered"] += 1
        if self.fault_hook is not None:
            self.fault_hook("recovered", self.checkpoints.state.txid)

    def _recover(self) -> bool:
        """Run the recovery to its end on every stateful namespace; True if it rolled
        back or committed."""
        return self.checkpoints.recover(self._recovery_act)

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
            self._tokens = {}  # no executor's state object is current any more
        provider = self._open_provider()
        for namespace in self.namespaces:
            state = fresh_state(provider, namespace)
            apply_action(
                self._driver_bolts[namespace], state, action, txid, action is not Action.INITSTATE
            )

    def _open_driver_bolts(self) -> None:
        """One instance per stateful task, on the driver, for its pre_commit/pre_rollback."""
        if self._driver_bolts:
            return
        for spec in self.bolts:
            if not spec.is_stateful:
                continue
            for i in range(spec.parallelism):
                bolt: StatefulBolt = user_bolt(self.topology, spec.id)
                bolt.prepare(
                    self.plan.conf_for(spec.id), self._context(spec.id, i), NullCollector()
                )
                self._driver_bolts[task_namespace(spec.id, i)] = bolt

    def _task(self, cid: str, index: int) -> TaskMetrics:
        """The counts of task ``index`` of ``cid`` over the committed batches (index -1:
        the component's, for what no task of it did, a coordinator's error say)."""
        m = self._metrics.get((cid, index))
        if m is None:
            m = self._metrics[cid, index] = TaskMetrics(cid, index)
        return m

    def _report(self, cid: str, index: int, exc: BaseException, what: Any) -> None:
        """Record an error of a component on the driver (a spout's, say)."""
        self._task(cid, index).errors += 1
        self.error_log.record(cid, index, exc, what)

    def _release(self, spark: Any) -> None:
        """The end of every run: stop a session this runtime started, close the store."""
        try:
            if self._own_session:
                spark.stop()
                self._spark = None
        finally:
            self._close_provider()

    def _result(self, start_time: float, reason: str) -> RunResult:
        self.bank.end(self.clock.monotonic())
        return RunResult(
            self.metrics(), list(self.errors), time.monotonic() - start_time, reason, self._counters
        )
