"""What a run returns, the same on every runtime."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["ErrorReport", "RunResult", "TaskMetrics", "WorkerInfo"]


@dataclass
class ErrorReport:
    """An exception raised by user code (or a batch), as the runtime recorded it."""

    component: str
    task_index: int
    tuple: str
    error: str
    traceback: str


@dataclass
class TaskMetrics:
    """Counts of one task, or of a whole component (``task_index`` -1).

    ``failed`` counts every failure a spout heard of (or a bolt made), a
    message retried four times counting four; ``retrying`` is a spout's
    messages waiting for their retry (``statestream.retry.*``), or a bolt's
    failed tuples waiting to be executed again where they failed
    (exactly-once), and ``dead_lettered`` those it gave up on (in the
    dead-letter file).
    ``last_error`` is the last error a task reported, on one line
    (``Type: message``), and ``last_error_at`` when (the runtime's clock).
    """

    component: str
    task_index: int
    emitted: int = 0
    executed: int = 0
    acked: int = 0
    failed: int = 0
    errors: int = 0
    queued: int = 0
    retrying: int = 0
    dead_lettered: int = 0
    last_error: str = ""
    last_error_at: float = 0.0

    def add(self, other: TaskMetrics) -> None:
        """Add ``other``'s counts into this one (``queued`` and ``retrying`` too); the
        later ``last_error`` of the two wins."""
        self.emitted += other.emitted
        self.executed += other.executed
        self.acked += other.acked
        self.failed += other.failed
        self.errors += other.errors
        self.queued += other.queued
        self.retrying += other.retrying
        self.dead_lettered += other.dead_lettered
        if other.last_error and (not self.last_error or other.last_error_at >= self.last_error_at):
            self.last_error = other.last_error
            self.last_error_at = other.last_error_at


@dataclass
class RunResult:
    """What a run did: per-component totals, errors, and why it stopped.

    ``reason`` is ``"idle"`` (``until_idle`` and everything done),
    ``"duration"``, ``"stopped"`` (``stop()`` or Ctrl-C) or ``"fed"`` (Spark's
    ``feed``). ``counters`` holds runtime counters (timeouts, rewinds, batches).
    """

    components: dict[str, TaskMetrics]
    errors: list[ErrorReport]
    elapsed: float
    reason: str
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def dead_lettered(self) -> int:
        """Messages (and, exactly-once, bolts' own tuples) the run gave up on and wrote
        to the dead-letter file: ``statestream run`` exits 3 when there are any."""
        return sum(m.dead_lettered for m in self.components.values())


@dataclass
class WorkerInfo:
    """What the supervisor knows of one worker process (the live progress shows it).

    ``index`` is the worker's number (0-based), ``pid`` its current process
    (0 before it starts), ``tasks`` the global task ids it runs, ``restarts``
    how often the supervisor restarted it; ``executed`` and ``rate`` (tuples
    per second) its latest progress, ``metrics`` and ``counters`` its latest
    report. ``_at`` is the supervisor's clock at that report.
    """

    index: int
    pid: int = 0
    tasks: list[int] = field(default_factory=list)
    restarts: int = 0
    executed: int = 0
    rate: float = 0.0
    metrics: list[TaskMetrics] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    _at: float = 0.0
