"""What Spark says of each batch's jobs: their stages, tasks done and failed.

The driver runs a batch's job inside :meth:`JobWatch.batch`, which gives the
job a job group of its own (``statestream-<run>-<n>``, described as
``statestream batch <txid>`` in Spark's UI) unless one is in force already (a
streaming query's, when Spark feeds the topology: then the jobs of that group
not seen before are the batch's). Afterwards it reads the group's jobs and
their stages from ``SparkContext.statusTracker()`` into the metrics bank
(:class:`~statestream.runtime.metrics.SparkBatchStats`).

The status tracker is fed asynchronously by Spark's listener bus, so a batch's
figures may still be moving when its job returns: a batch read before Spark
was done with it is read again at the next batch (and at the end of the run)
until it is final. Reading never breaks the run: Spark may have forgotten a
job (``spark.ui.retainedJobs``), and any error of the tracker is logged once
and leaves the batch's figures as they were.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..._clock import Clock
from ..metrics import MetricsBank, SparkBatchStats, SparkStageStats

log = logging.getLogger("statestream")

#: Spark's local properties that name a job group (restored after each batch).
_GROUP_KEYS = ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel")
#: How many times a batch's figures are read before they are left as they are.
_MAX_READS = 4
#: Job statuses from the worst to the best: a batch shows its worst job's.
_STATUS_ORDER = ("FAILED", "UNKNOWN", "RUNNING", "SUCCEEDED")


class JobWatch:
    """Names each batch's Spark jobs and reads their figures into ``bank``."""

    def __init__(self, bank: MetricsBank, clock: Clock) -> None:
        self.bank = bank
        self.clock = clock
        self.run = uuid.uuid4().hex[:12]
        self.count = 0
        # Batches whose figures were not final when read: (group, since, stats, reads).
        self.pending: list[tuple[str, int, SparkBatchStats, int]] = []
        # Per job group in force before us: the highest job id already counted.
        self.seen: dict[str, int] = {}
        self.failed = False  # the tracker raised once: said once, then quiet

    @contextmanager
    def batch(self, sc: Any, txid: int) -> Iterator[None]:
        """Run one batch's job(s) inside; their figures go to the bank after it,
        whether the job succeeded or not."""
        self.refresh(sc)
        saved = {key: sc.getLocalProperty(key) for key in _GROUP_KEYS}
        group = saved["spark.jobGroup.id"]
        ours = group is None
        if ours:
            self.count += 1
            group = f"statestream-{self.run}-{self.count}"
            sc.setJobGroup(group, f"statestream batch {txid}")
        since = self.seen.get(group, -1)
        started = self.clock.monotonic()
        wall = time.monotonic()
        try:
            yield
        finally:
            duration = time.monotonic() - wall
            if ours:
                for key, value in saved.items():
                    sc.setLocalProperty(key, value)
            stats = SparkBatchStats(txid, [], "UNKNOWN", started, duration)
            self._read(sc, group, since, stats)
            if not ours and stats.jobs:
                self.seen[group] = max(stats.jobs)
            self.bank.spark_batch(stats)
            if not stats.final:
                self.pending.append((group, since, stats, 1))

    def refresh(self, sc: Any) -> None:
        """Read again the batches whose figures were still moving (a few times at
        most: a job Spark no longer knows stays ``UNKNOWN``)."""
        pending, self.pending = self.pending, []
        for group, since, old, reads in pending:
            stats = SparkBatchStats(old.txid, [], "UNKNOWN", old.started_at, old.duration)
            self._read(sc, group, since, stats)
            self.bank.spark_batch(stats)
            if not stats.final and reads < _MAX_READS:
                self.pending.append((group, since, stats, reads + 1))

    def _read(self, sc: Any, group: str, since: int, stats: SparkBatchStats) -> None:
        try:
            tracker = sc.statusTracker()
            jobs = sorted(j for j in tracker.getJobIdsForGroup(group) if j > since)
            statuses = []
            for job_id in jobs:
                job = tracker.getJobInfo(job_id)
                statuses.append("UNKNOWN" if job is None else str(job.status))
                for stage_id in [] if job is None else sorted(job.stageIds):
                    info = tracker.getStageInfo(stage_id)
                    if info is None:
                        continue
                    stats.stages.append(
                        SparkStageStats(
                            int(info.stageId),
                            str(info.name),
                            int(info.currentAttemptId),
                            int(info.numTasks),
                            int(info.numActiveTasks),
                            int(info.numCompletedTasks),
                            int(info.numFailedTasks),
                        )
                    )
            stats.jobs = jobs
            if statuses:
                stats.status = min(statuses, key=_rank)
        except Exception as exc:  # a reader must not break the run
            if not self.failed:
                self.failed = True
                log.warning("spark runtime: cannot read the jobs' status (%r)", exc)


def _rank(status: str) -> int:
    return _STATUS_ORDER.index(status) if status in _STATUS_ORDER else 1
