"""The metrics bank: what every runtime collects of a run, and the snapshot its readers get.

One bank per process. The runtimes feed it (the local runtime and each worker
per task, the supervisor by merging its workers' exports, Spark's driver per
batch) and readers take a :class:`MetricsSnapshot` through
``Runtime.metrics_snapshot()``: the terminal table (statestream._progress),
``/metrics`` (:func:`statestream.runtime.metrics_export.prometheus_text`) and
``/api/v1/topology`` (:func:`statestream.runtime.metrics_export.api_json`).

The snapshot schema (every time in seconds; ``at`` and ``*_at`` on the
runtime's clock, ``statestream._clock``, which is monotonic: compare them
with ``snapshot.at``, never with the wall clock)::

    MetricsSnapshot
      topology: str              the topology's name
      runtime: str               "local" | "workers" | "spark"
      at: float                  when the snapshot was taken
      elapsed: float             seconds since the run began (0 before)
      components: {id: TaskStats}   per component totals, task_index -1
      tasks: [TaskStats]            per task, in component order
      checkpoints: [CheckpointInfo] the recent ones, oldest first (at most 50)
      checkpoint_histogram: Histogram   durations of every committed checkpoint
      workers: [WorkerStats]        one per worker process ([] with none)
      sources: [SourceProgress]     data spout tasks that report progress
      counters: {name: int}         the runtime's counters (rewinds, replays,
                                    batches, worker_restarts, timed_out, ...)
      errors: int                   errors of user code so far
      last_error: str               the last one on one line ("" for none)
      last_error_at: float
      spark: [SparkBatchStats]      Spark: the last batches' jobs and stages
      spark_totals: SparkTotals     Spark: jobs, stages and tasks over the run

    TaskStats  (counts as statestream.TaskMetrics, plus)
      kind: "spout" | "bolt";  parallelism: int
      execute_latency: float | None   mean seconds per executed tuple, sampled
                                      (None before the first sample)
      complete_latency: float | None  spouts: mean seconds from emit to the
                                      tree's ack, sampled
      samples / complete_samples: int the tuples timed (sampled)
      capacity: float                 busy share of the last window, 0..1
                                      (Storm's: executed x latency / window)
      backpressure: float             the share of its sampled drains that
                                      ended on a full downstream queue, 0..1
      worker: int | None              the worker process running it

Latencies are sampled as Storm samples them (``topology.stats.sample.rate``,
default 0.05): a task times one in ``round(1 / rate)`` of its drains (a bolt)
or emits (a spout), so the per-tuple cost is a countdown, never a clock read;
rate 0 times none (the countdown stays: collection off costs it alone).
On Spark the executors count down over the tuples of a bolt task (one timed
in ``round(1 / rate)``) and send their :class:`TaskTiming` with the task's
acknowledgement; the driver times the sampled emits of its spouts to the
commit of their batch (their complete latency), and reads each batch's jobs
and stages from Spark's status tracker (:class:`SparkBatchStats`).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final, Literal, Protocol, runtime_checkable

from .._results import TaskMetrics, WorkerInfo

if TYPE_CHECKING:
    from .._topology import Topology

__all__ = [
    "CHECKPOINT_BUCKETS",
    "NEVER",
    "CheckpointInfo",
    "Histogram",
    "MetricsBank",
    "MetricsSnapshot",
    "ReportsProgress",
    "SourceProgress",
    "SparkBatchStats",
    "SparkStageStats",
    "SparkTotals",
    "TaskStats",
    "TaskTiming",
    "WorkerStats",
    "capacity",
    "kinds_of",
    "progress_of",
    "sample_every",
    "sampling",
]

#: The upper bounds (seconds) of the checkpoint-duration histogram's buckets.
CHECKPOINT_BUCKETS: Final = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)
#: How many recent checkpoints a snapshot lists.
RECENT_CHECKPOINTS: Final = 50
#: Seconds of history capacity is measured over (Storm's UI shows 10 minutes;
#: a live view wants to see a change within seconds).
CAPACITY_WINDOW: Final = 10.0


#: ``sample_every`` at rate 0: a countdown from here never reaches 0 in a run.
NEVER: Final = 2**60


def sample_every(rate: float) -> int:
    """One in how many events is timed at sample rate ``rate`` (0 <= rate <= 1;
    0 times none: :data:`NEVER`)."""
    return max(1, round(1.0 / rate)) if rate > 0 else NEVER


def sampling(rate: float) -> tuple[int, int]:
    """A task's countdown at sample rate ``rate``: ``(every, first)``, one event in
    ``every`` timed, the countdown starting at ``first``: 1 times a task's first
    event, so that a short run shows a latency too; with sampling off (rate 0),
    never. Every runtime's tasks count down from these (the local tasks, the
    Spark executors' bolt tasks, the Spark driver's spouts)."""
    every = sample_every(rate)
    return every, 1 if rate > 0 else every


def capacity(executed: int, latency: float | None, window: float) -> float:
    """Storm's capacity: the share of ``window`` seconds a task was busy executing
    ``executed`` tuples at ``latency`` seconds each; 0 without a latency or window,
    at most 1."""
    if latency is None or window <= 0 or executed <= 0:
        return 0.0
    return min(1.0, executed * latency / window)


@runtime_checkable
class ReportsProgress(Protocol):
    """A spout that can say how far it has read (optional; FileSpout has it).

    ``progress()`` returns ``(done, total)``: a file spout the bytes read and the
    file's size, a broker spout the entries consumed and the stream's end
    (``total - done`` is its lag); ``total`` None when unknown; or None when
    the spout cannot tell (yet). Called from the run's thread, at most a few
    times a second: it must be cheap and never block.
    """

    def progress(self) -> tuple[int, int | None] | None: ...


@dataclass
class TaskTiming:
    """The sampled timings of one task: what a task adds when a sample is due.

    Kept by the bank per ``(component, task_index)`` so that it outlives a
    rewind's new tasks; picklable (a worker sends its timings to the supervisor).
    """

    component: str
    task_index: int
    samples: int = 0  # tuples executed in timed drains
    busy: float = 0.0  # seconds those drains took
    max_drain: float = 0.0
    complete_samples: int = 0  # trees timed from emit to ack (spouts)
    complete: float = 0.0  # seconds summed over them
    drains: int = 0  # timed drains
    blocked: int = 0  # of which ended on a full downstream queue

    def add(self, other: TaskTiming) -> None:
        self.samples += other.samples
        self.busy += other.busy
        self.max_drain = max(self.max_drain, other.max_drain)
        self.complete_samples += other.complete_samples
        self.complete += other.complete
        self.drains += other.drains
        self.blocked += other.blocked

    def timed(self, executed: int, seconds: float) -> None:
        """A sampled drain executed ``executed`` tuples in ``seconds``."""
        if executed > 0:
            self.samples += executed
            self.busy += seconds
            if seconds > self.max_drain:
                self.max_drain = seconds

    @property
    def execute_latency(self) -> float | None:
        return self.busy / self.samples if self.samples else None

    @property
    def complete_latency(self) -> float | None:
        return self.complete / self.complete_samples if self.complete_samples else None


@dataclass
class TaskStats(TaskMetrics):
    """One task's (or, ``task_index`` -1, one component's) numbers in a snapshot:
    its counts (:class:`~statestream.TaskMetrics`) and what the bank adds."""

    kind: Literal["spout", "bolt"] = "bolt"
    parallelism: int = 1
    execute_latency: float | None = None
    complete_latency: float | None = None
    samples: int = 0
    complete_samples: int = 0
    busy: float = 0.0  # seconds of the sampled drains (the latency's sum)
    complete_sum: float = 0.0  # seconds of the sampled trees (the latency's sum)
    capacity: float = 0.0
    drains: int = 0  # sampled drains, of which ``blocked`` ended on a full queue
    blocked: int = 0
    backpressure: float = 0.0
    worker: int | None = None


@dataclass
class CheckpointInfo:
    """One checkpoint (transaction) as the bank saw it.

    ``phase``: ``"preparing"``, ``"committing"``, ``"committed"`` or
    ``"failed"`` (rolled back, or replaced by a new PREPARE of the same txid).
    ``duration``: from PREPARE to COMMITTED; ``commit_latency``: from the
    decision to commit (every bolt prepared) to COMMITTED; both None until
    known.

    ``keys_changed``: per stateful task namespace (``count-0``), the keys in
    its prepared delta of this txid, which its commit writes; filled by the
    local runtime and the workers for states over the shipped providers
    (``StoredKeyValueState.prepared_keys``), as each task prepares, so a
    task not prepared yet is missing. ``state_size``: likewise, the bytes it
    sent the store (Flink's checkpointed data size; ``prepared_bytes``).
    """

    txid: int
    phase: str
    started_at: float
    ended_at: float | None = None
    duration: float | None = None
    commit_latency: float | None = None
    keys_changed: dict[str, int] = field(default_factory=dict)
    state_size: dict[str, int] = field(default_factory=dict)
    committing_at: float | None = None


@dataclass
class Histogram:
    """A cumulative histogram: ``counts[i]`` observations <= ``CHECKPOINT_BUCKETS[i]``
    (the last, +Inf, is ``count``)."""

    counts: list[int] = field(default_factory=lambda: [0] * len(CHECKPOINT_BUCKETS))
    count: int = 0
    sum: float = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(CHECKPOINT_BUCKETS):
            if value <= bound:
                self.counts[i] += 1
        self.count += 1
        self.sum += value

    def add(self, other: Histogram) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.count += other.count
        self.sum += other.sum


@dataclass
class WorkerStats:
    """One worker process: its index, pid, the task names it runs, restarts and rate."""

    index: int
    pid: int
    tasks: list[str]
    restarts: int
    executed: int
    rate: float


@dataclass
class SourceProgress:
    """How far one data spout task has read: ``done`` of ``total`` (None: unknown).

    ``unit`` is ``"bytes"`` for a file, ``"entries"`` for a broker stream;
    ``lag`` is ``total - done`` when the total is known.
    """

    component: str
    task_index: int
    done: int
    total: int | None
    unit: str = "bytes"

    @property
    def lag(self) -> int | None:
        return None if self.total is None else max(0, self.total - self.done)

    @property
    def fraction(self) -> float | None:
        if self.total is None or self.total <= 0:
            return None
        return min(1.0, self.done / self.total)


#: How many recent Spark batches a snapshot lists.
RECENT_SPARK_BATCHES: Final = 20


@dataclass
class SparkStageStats:
    """One stage of a batch's Spark job, as Spark's status tracker says it
    (``SparkContext.statusTracker().getStageInfo``): its tasks, how many are
    running, done and failed (failed attempts: a retried task counts each)."""

    stage_id: int
    name: str
    attempt: int
    tasks: int
    active: int
    completed: int
    failed: int


@dataclass
class SparkBatchStats:
    """One batch's Spark jobs (one job a batch, as a rule; a transaction's phases, a
    fed batch's reads may add some): their ids, the worst status (``SUCCEEDED``,
    ``RUNNING``, ``FAILED``, ``UNKNOWN`` when Spark no longer says), their stages,
    and the wall time the driver waited on them (``duration``, seconds: the
    status tracker gives no times). ``started_at`` is on the runtime's clock."""

    txid: int
    jobs: list[int]
    status: str
    started_at: float
    duration: float | None
    stages: list[SparkStageStats] = field(default_factory=list)

    @property
    def final(self) -> bool:
        """Whether Spark is done with every job and stage (nothing will change)."""
        return self.status in ("SUCCEEDED", "FAILED") and not any(s.active for s in self.stages)


@dataclass
class SparkTotals:
    """Spark's work over the run: batches seen, their jobs and stages, the stages'
    tasks done and failed, and the seconds the driver waited on jobs."""

    batches: int = 0
    jobs: int = 0
    stages: int = 0
    tasks_completed: int = 0
    tasks_failed: int = 0
    job_seconds: float = 0.0

    def add(self, b: SparkBatchStats, sign: int = 1) -> None:
        """Count batch ``b`` in (``sign`` -1: out, when a later read replaces it)."""
        self.batches += sign
        self.jobs += sign * len(b.jobs)
        self.stages += sign * len(b.stages)
        self.tasks_completed += sign * sum(s.completed for s in b.stages)
        self.tasks_failed += sign * sum(s.failed for s in b.stages)
        self.job_seconds += sign * (b.duration or 0.0)


@dataclass
class MetricsSnapshot:
    """The whole run's numbers at one moment (see the module docstring)."""

    topology: str
    runtime: str
    at: float
    elapsed: float
    components: dict[str, TaskStats]
    tasks: list[TaskStats]
    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    checkpoint_histogram: Histogram = field(default_factory=Histogram)
    workers: list[WorkerStats] = field(default_factory=list)
    sources: list[SourceProgress] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    last_error: str = ""
    last_error_at: float = 0.0
    spark: list[SparkBatchStats] = field(default_factory=list)
    spark_totals: SparkTotals | None = None

    @property
    def last_checkpoint(self) -> CheckpointInfo | None:
        """The last committed checkpoint, if any."""
        for cp in reversed(self.checkpoints):
            if cp.phase == "committed":
                return cp
        return None


@dataclass
class BankExport:
    """What a worker's bank sends its supervisor (picklable): timings, checkpoints, and
    the keys its tasks changed per txid (any worker's tasks prepare; one of them
    runs the checkpoint spout, whose worker alone sees the phases)."""

    timings: list[TaskTiming]
    checkpoints: list[CheckpointInfo]
    histogram: Histogram
    keys: dict[int, dict[str, int]] = field(default_factory=dict)
    sizes: dict[int, dict[str, int]] = field(default_factory=dict)


class MetricsBank:
    """The numbers one process keeps of a run beyond its tasks' counts.

    ``kinds`` maps each component to ``("spout"|"bolt", parallelism)``.
    Thread-safety: the run's thread writes, readers call :meth:`snapshot` from
    another thread; every field is replaced or incremented whole, so a reader
    sees a consistent-enough value (as ``Runtime.metrics``).
    """

    def __init__(
        self,
        topology: str,
        runtime: str,
        kinds: Mapping[str, tuple[Literal["spout", "bolt"], int]],
        sample_rate: float = 0.05,
        window: float = CAPACITY_WINDOW,
    ) -> None:
        self.topology = topology
        self.runtime = runtime
        self.kinds = dict(kinds)
        #: One event in ``every`` is timed; a task's countdown starts at
        #: ``first_sample`` (:func:`sampling`).
        self.every, self.first_sample = sampling(sample_rate)
        self.window = window
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._timings: dict[tuple[str, int], TaskTiming] = {}
        self._past: dict[tuple[str, int], TaskTiming] = {}  # of replaced workers
        self._workers: dict[int, BankExport] = {}  # the supervisor's: latest per worker
        self._checkpoints: deque[CheckpointInfo] = deque(maxlen=RECENT_CHECKPOINTS)
        # txid -> task namespace -> keys in its prepared delta (keys_changed), kept
        # apart from the checkpoints: a worker's tasks prepare where no phase is seen.
        self._keys: dict[int, dict[str, int]] = {}
        self._sizes: dict[int, dict[str, int]] = {}  # the same, of prepared bytes (state_size)
        self._sources: dict[tuple[str, int], SourceProgress] = {}
        self.histogram = Histogram()
        # (component, task) -> [(at, executed)]: the history capacity looks back over.
        self._history: dict[tuple[str, int], deque[tuple[float, int]]] = {}
        # Spark's driver: the last batches' jobs and stages, and the run's totals.
        self._spark: deque[SparkBatchStats] = deque(maxlen=RECENT_SPARK_BATCHES)
        self._spark_totals: SparkTotals | None = None

    # -- feeding ------------------------------------------------------------------
    def begin(self, now: float) -> None:
        """The run begins at ``now`` (elapsed counts from the first call)."""
        if self.started_at is None:
            self.started_at = now

    def end(self, now: float) -> None:
        """The run ended at ``now``: elapsed stops there."""
        self.ended_at = now

    def timing(self, component: str, task_index: int) -> TaskTiming:
        """The timing record of one task (the same object for the run)."""
        key = (component, task_index)
        t = self._timings.get(key)
        if t is None:
            t = self._timings[key] = TaskTiming(component, task_index)
        return t

    def checkpoint_phase(self, txid: int, phase: str, now: float) -> None:
        """The checkpoint store says ``phase`` (``PREPARING``, ``COMMITTING``,
        ``COMMITTED``) for ``txid`` at ``now``; or ``"ROLLBACK"`` for a failed one."""
        last = self._checkpoints[-1] if self._checkpoints else None
        phase = phase.upper()
        if phase == "PREPARING":
            if last is not None and last.phase in ("preparing", "committing"):
                last.phase, last.ended_at = "failed", now  # replaced: it never committed
            self._checkpoints.append(CheckpointInfo(txid, "preparing", now))
            return
        if last is None or last.txid != txid:
            if phase != "COMMITTED":
                return
            # A commit finished from a stored phase (a recovery): no start seen.
            last = CheckpointInfo(txid, "committing", now)
            self._checkpoints.append(last)
        if phase == "COMMITTING":
            last.phase, last.committing_at = "committing", now
        elif phase == "COMMITTED" and last.phase != "committed":
            last.phase, last.ended_at = "committed", now
            last.duration = now - last.started_at
            if last.committing_at is not None:
                last.commit_latency = now - last.committing_at
            self.histogram.observe(last.duration)
        elif phase == "ROLLBACK" and last.phase != "committed":
            last.phase, last.ended_at = "failed", now

    def checkpoint_done(
        self,
        txid: int,
        started_at: float,
        prepared_at: float,
        committed_at: float,
        ok: bool = True,
        keys_changed: Mapping[str, int] | None = None,
        state_size: Mapping[str, int] | None = None,
    ) -> None:
        """A whole checkpoint at once (Spark's driver, per batch): begun at
        ``started_at``, every task prepared at ``prepared_at``, committed (or,
        ``ok`` False, rolled back) at ``committed_at``."""
        self.checkpoint_phase(txid, "PREPARING", started_at)
        last = self._checkpoints[-1]
        if keys_changed:
            last.keys_changed = dict(keys_changed)
        if state_size:
            last.state_size = dict(state_size)
        if not ok:
            self.checkpoint_phase(txid, "ROLLBACK", committed_at)
            return
        self.checkpoint_phase(txid, "COMMITTING", prepared_at)
        self.checkpoint_phase(txid, "COMMITTED", committed_at)

    def keys_changed(self, txid: int, namespace: str, count: int, size: int | None = None) -> None:
        """Task ``namespace`` prepared ``count`` changed keys, ``size`` bytes, as ``txid``
        (at each PREPARE of a stateful task; a txid prepared again replaces them)."""
        for per_txid, value in ((self._keys, count), (self._sizes, size)):
            if value is not None:
                per_txid.setdefault(txid, {})[namespace] = value
                if len(per_txid) > 2 * RECENT_CHECKPOINTS:
                    del per_txid[min(per_txid)]

    def spark_batch(self, stats: SparkBatchStats) -> None:
        """Spark's driver: what the status tracker says of one batch's jobs. A batch
        read again (its figures were not final yet: the tracker is fed
        asynchronously) replaces its earlier figures, in the list and the totals."""
        totals = self._spark_totals
        if totals is None:
            totals = self._spark_totals = SparkTotals()
        for i, old in enumerate(self._spark):
            if old.txid == stats.txid and old.started_at == stats.started_at:
                totals.add(old, -1)
                self._spark[i] = stats
                break
        else:
            self._spark.append(stats)
        totals.add(stats)

    def sources(self, found: Iterable[SourceProgress | None]) -> list[SourceProgress]:
        """The spouts' progress as ``found`` now, each task's last known one where it
        says nothing now (a spout closed at the end of the run)."""
        for p in found:
            if p is not None:
                self._sources[p.component, p.task_index] = p
        return list(self._sources.values())

    # -- workers ------------------------------------------------------------------
    def export(self) -> BankExport:
        """What a worker sends its supervisor with each progress report."""
        return BankExport(
            [replace(t) for t in self._timings.values()],
            [
                replace(c, keys_changed=dict(c.keys_changed), state_size=dict(c.state_size))
                for c in self._checkpoints
            ],
            replace(self.histogram, counts=list(self.histogram.counts)),
            {txid: dict(per_task) for txid, per_task in self._keys.items()},
            {txid: dict(per_task) for txid, per_task in self._sizes.items()},
        )

    def absorb(self, worker: int, export: BankExport) -> None:
        """The supervisor: worker ``worker``'s latest export replaces its previous one."""
        self._workers[worker] = export

    def retire_workers(self) -> None:
        """The supervisor restarts its workers: their timings and checkpoints so far
        are kept (the run's numbers cover every generation)."""
        for export in self._workers.values():
            for t in export.timings:
                key = (t.component, t.task_index)
                past = self._past.get(key)
                if past is None:
                    self._past[key] = replace(t)
                else:
                    past.add(t)
            self.histogram.add(export.histogram)
            self._checkpoints.extend(export.checkpoints)
            for mine, theirs in ((self._keys, export.keys), (self._sizes, export.sizes)):
                for txid, per_task in theirs.items():
                    mine.setdefault(txid, {}).update(per_task)
        self._workers.clear()

    def _merged_timings(self) -> dict[tuple[str, int], TaskTiming]:
        out = {k: replace(t) for k, t in self._past.items()}
        sources: Iterable[TaskTiming] = list(self._timings.values())
        for export in list(self._workers.values()):
            sources = [*sources, *export.timings]
        for t in sources:
            key = (t.component, t.task_index)
            if key in out:
                out[key].add(t)
            else:
                out[key] = replace(t)
        return out

    def _merged_checkpoints(self) -> tuple[list[CheckpointInfo], Histogram]:
        hist = replace(self.histogram, counts=list(self.histogram.counts))
        recent = list(self._checkpoints)
        keys = [(self._keys, self._sizes)]
        for export in list(self._workers.values()):
            hist.add(export.histogram)
            recent.extend(export.checkpoints)  # one worker runs the checkpoint spout
            keys.append((export.keys, export.sizes))
        recent.sort(key=lambda c: c.started_at)  # stable: a txid tried again stays after
        out = []
        for cp in recent[-RECENT_CHECKPOINTS:]:
            changed, size = dict(cp.keys_changed), dict(cp.state_size)
            for more_keys, more_sizes in keys:
                changed.update(more_keys.get(cp.txid, ()))
                size.update(more_sizes.get(cp.txid, ()))
            out.append(replace(cp, keys_changed=changed, state_size=size))
        return out, hist

    # -- reading -------------------------------------------------------------------
    def _capacity(
        self, key: tuple[str, int], now: float, executed: int, latency: float | None
    ) -> float:
        """Capacity over the last window: keeps ``(now, executed)`` and looks back to
        the oldest reading within the window (at least one reading back)."""
        hist = self._history.get(key)
        if hist is None:
            hist = self._history[key] = deque()
        if not hist or now > hist[-1][0]:
            hist.append((now, executed))
        while len(hist) > 2 and now - hist[1][0] >= self.window:
            hist.popleft()
        t0, n0 = hist[0]
        return capacity(executed - n0, latency, now - t0)

    def snapshot(
        self,
        now: float,
        metrics: Sequence[TaskMetrics],
        counters: Mapping[str, int] | None = None,
        workers: Sequence[WorkerInfo] = (),
        task_names: Mapping[int, str] | None = None,
        sources: Sequence[SourceProgress] = (),
        task_worker: Mapping[tuple[str, int], int] | None = None,
    ) -> MetricsSnapshot:
        """The run's numbers at ``now``, from its tasks' counts ``metrics`` (one per
        task, as ``task_metrics()`` gives them; a component total, task_index -1,
        stands for its tasks where the runtime counts no finer, as on Spark)."""
        timings = self._merged_timings()
        tasks: list[TaskStats] = []
        components: dict[str, TaskStats] = {}
        by_task: dict[tuple[str, int], TaskMetrics] = {}
        for m in metrics:
            key = (m.component, m.task_index)
            if key in by_task:
                by_task[key].add(m)
            else:
                c = TaskMetrics(m.component, m.task_index)
                c.add(m)
                by_task[key] = c
        for key in sorted(
            by_task,
            key=lambda k: (
                list(self.kinds).index(k[0]) if k[0] in self.kinds else len(self.kinds),
                k[1],
            ),
        ):
            m = by_task[key]
            kind, parallelism = self.kinds.get(m.component, ("bolt", 1))
            t = timings.get(key) or TaskTiming(*key)
            s = _stats(m, kind, parallelism, t)
            s.capacity = self._capacity(key, now, m.executed, s.execute_latency)
            s.worker = None if task_worker is None else task_worker.get(key)
            tasks.append(s)
            total = components.get(m.component)
            if total is None:
                total = components[m.component] = TaskStats(
                    m.component, -1, kind=kind, parallelism=parallelism
                )
            _add(total, s)
        for total in components.values():
            total.execute_latency = total.busy / total.samples if total.samples else None
            total.complete_latency = (
                total.complete_sum / total.complete_samples if total.complete_samples else None
            )
        for cid, (kind, parallelism) in self.kinds.items():
            if cid not in components:
                components[cid] = TaskStats(cid, -1, kind=kind, parallelism=parallelism)
        components = {
            cid: components[cid]
            for cid in sorted(
                components,
                key=lambda c: list(self.kinds).index(c) if c in self.kinds else len(self.kinds),
            )
        }
        checkpoints, hist = self._merged_checkpoints()
        names = task_names or {}
        errors = sum(s.errors for s in components.values())
        last = max(
            components.values(),
            key=lambda s: s.last_error_at if s.last_error else -math.inf,
            default=None,
        )
        start = self.started_at
        end = self.ended_at if self.ended_at is not None else now
        return MetricsSnapshot(
            topology=self.topology,
            runtime=self.runtime,
            at=now,
            elapsed=0.0 if start is None else max(0.0, end - start),
            components=components,
            tasks=tasks,
            checkpoints=checkpoints,
            checkpoint_histogram=hist,
            workers=[
                WorkerStats(
                    w.index,
                    w.pid,
                    [names.get(t, str(t)) for t in w.tasks],
                    w.restarts,
                    w.executed,
                    w.rate,
                )
                for w in workers
            ],
            sources=list(sources),
            counters=dict(counters or {}),
            errors=errors,
            last_error=last.last_error if last is not None else "",
            last_error_at=last.last_error_at if last is not None else 0.0,
            spark=[
                replace(b, jobs=list(b.jobs), stages=[replace(s) for s in b.stages])
                for b in list(self._spark)
            ],
            spark_totals=None if self._spark_totals is None else replace(self._spark_totals),
        )


def _stats(
    m: TaskMetrics, kind: Literal["spout", "bolt"], parallelism: int, t: TaskTiming
) -> TaskStats:
    s = TaskStats(m.component, m.task_index, kind=kind, parallelism=parallelism)
    s.add(m)
    s.execute_latency = t.execute_latency
    s.complete_latency = t.complete_latency
    s.samples, s.complete_samples = t.samples, t.complete_samples
    s.busy, s.complete_sum = t.busy, t.complete
    s.drains, s.blocked = t.drains, t.blocked
    s.backpressure = t.blocked / t.drains if t.drains else 0.0
    return s


def _add(total: TaskStats, s: TaskStats) -> None:
    """Add task ``s`` into its component's ``total`` (capacity: the busiest task's)."""
    total.add(s)  # the counts and the last error
    total.samples += s.samples
    total.complete_samples += s.complete_samples
    total.busy += s.busy
    total.complete_sum += s.complete_sum
    total.drains += s.drains
    total.blocked += s.blocked
    total.backpressure = total.blocked / total.drains if total.drains else 0.0
    total.capacity = max(total.capacity, s.capacity)


def kinds_of(topology: Topology) -> dict[str, tuple[Literal["spout", "bolt"], int]]:
    """Each component of ``topology`` (the runtime's own, ``$...``, included):
    spout or bolt, and its parallelism, in declaration order."""
    return {
        cid: ("spout" if spec.is_spout else "bolt", spec.parallelism)
        for cid, spec in topology.components.items()
    }


def progress_of(component: str, task_index: int, spout: object) -> SourceProgress | None:
    """What a spout says of its progress (:class:`ReportsProgress`), or None.

    A spout that raises is taken as saying nothing: a reader must not break
    the run (its ``next_tuple`` will report the error where it matters).
    """
    if not isinstance(spout, ReportsProgress):
        return None
    try:
        got = spout.progress()
    except Exception:
        return None
    if got is None:
        return None
    done, total = got
    unit = getattr(spout, "progress_unit", "bytes")
    return SourceProgress(
        component, task_index, int(done), None if total is None else int(total), str(unit)
    )
