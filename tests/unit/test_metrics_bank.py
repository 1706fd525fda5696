"""The metrics bank's pure parts (statestream.runtime.metrics), table-tested: sampling,
capacity and its window, checkpoint phases, the supervisor's merge of worker banks."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from statestream import FakeClock
from statestream._results import TaskMetrics
from statestream.runtime.metrics import (
    CHECKPOINT_BUCKETS,
    NEVER,
    RECENT_SPARK_BATCHES,
    Histogram,
    MetricsBank,
    SparkBatchStats,
    SparkStageStats,
    SparkTotals,
    TaskTiming,
    capacity,
    sample_every,
    sampling,
)

KINDS = {"src": ("spout", 1), "work": ("bolt", 2)}


@pytest.mark.parametrize(
    ("rate", "every"), [(1.0, 1), (0.5, 2), (0.05, 20), (0.03, 33), (0.001, 1000), (0.9, 1)]
)
def test_sample_every(rate: float, every: int) -> None:
    assert sample_every(rate) == every


@pytest.mark.parametrize(("rate", "timed"), [(0, False), (0.05, True), (1, True)])
def test_sample_rate_zero_times_nothing(tmp_path: Path, rate: float, timed: bool) -> None:
    """topology.stats.sample.rate 0 is collection off: no task's countdown reaches 0,
    not even the first, so no latency is timed; the counts stay."""
    from word_bolts import word_count

    from statestream.runtime.local import LocalRuntime

    assert (sample_every(0), MetricsBank("t", "local", KINDS, 0).first_sample) == (  # type: ignore[arg-type]
        NEVER,
        NEVER,
    )
    corpus = tmp_path / "in.txt"
    corpus.write_text("".join(f"a b c{i}\n" for i in range(50)))
    rt = LocalRuntime(word_count("rate", corpus), {"topology.stats.sample.rate": rate}, FakeClock())
    result = rt.run(until_idle=True)
    snap = rt.metrics_snapshot()
    assert result.components["count"].executed == snap.components["count"].executed == 150
    for cid in ("lines", "split", "count"):
        s = snap.components[cid]
        assert (s.samples + s.complete_samples > 0) is timed, cid
    assert (snap.components["count"].execute_latency is not None) is timed
    assert (snap.components["lines"].complete_latency is not None) is timed


@pytest.mark.parametrize(
    ("executed", "latency", "window", "expected"),
    [
        (100, 0.001, 1.0, 0.1),
        (1000, 0.001, 1.0, 1.0),
        (5000, 0.001, 1.0, 1.0),  # at most 1
        (0, 0.001, 1.0, 0.0),
        (100, None, 1.0, 0.0),  # no sample yet
        (100, 0.001, 0.0, 0.0),  # no window yet
        (50, 0.002, 10.0, 0.01),
    ],
)
def test_capacity(executed: int, latency: float | None, window: float, expected: float) -> None:
    assert capacity(executed, latency, window) == pytest.approx(expected)


def test_timing_means_over_samples() -> None:
    t = TaskTiming("work", 0)
    assert t.execute_latency is None and t.complete_latency is None
    t.timed(10, 0.02)
    t.timed(0, 5.0)  # a drain that executed nothing is no sample
    t.timed(30, 0.02)
    assert (t.samples, t.execute_latency, t.max_drain) == (40, pytest.approx(0.001), 0.02)


def _bank(clock: FakeClock, rate: float = 0.05, window: float = 10.0) -> MetricsBank:
    bank = MetricsBank("topo", "local", KINDS, rate, window=window)  # type: ignore[arg-type]
    bank.begin(clock.monotonic())
    return bank


def _counts(executed: int, emitted: int = 0, task: int = 0) -> list[TaskMetrics]:
    return [
        TaskMetrics("src", 0, emitted=emitted, acked=emitted),
        TaskMetrics("work", task, executed=executed),
    ]


def test_capacity_over_the_window() -> None:
    """Capacity is Storm's: tuples executed within the last window times the sampled
    latency, over the window's seconds; older readings fall out of the window."""
    clock = FakeClock(100.0)
    bank = _bank(clock, window=10.0)
    bank.timing("work", 0).timed(100, 0.1)  # 1 ms per tuple
    table = [
        # (advance, executed so far, capacity of work[0])
        (0.0, 0, 0.0),
        (1.0, 500, 0.5),  # 500 tuples x 1 ms in 1 s
        (1.0, 1500, 0.75),  # 1500 in 2 s
        (8.0, 1500, 0.15),  # idle since: 1500 x 1 ms in 10 s
        (5.0, 1500, 0.0),  # the window has passed the last work
    ]
    for advance, executed, expected in table:
        clock.advance(advance)
        snap = bank.snapshot(clock.monotonic(), _counts(executed))
        stats = next(s for s in snap.tasks if s.component == "work")
        assert stats.capacity == pytest.approx(expected), (advance, executed)
        assert snap.components["work"].capacity == pytest.approx(expected)


def test_snapshot_totals_and_latencies() -> None:
    clock = FakeClock()
    bank = _bank(clock)
    bank.timing("work", 0).timed(10, 0.01)
    bank.timing("work", 1).timed(30, 0.01)
    src = bank.timing("src", 0)
    src.complete_samples, src.complete = 4, 0.2
    clock.advance(3.0)
    metrics = [
        *_counts(100, emitted=7),
        TaskMetrics("work", 1, executed=50, errors=1, last_error="E: x", last_error_at=2.0),
    ]
    snap = bank.snapshot(clock.monotonic(), metrics, {"rewinds": 2})
    assert list(snap.components) == ["src", "work"]  # the topology's order
    work = snap.components["work"]
    assert (work.task_index, work.kind, work.parallelism, work.executed) == (-1, "bolt", 2, 150)
    # The component's latency weighs its tasks' samples: 0.02 s over 40 tuples.
    assert work.execute_latency == pytest.approx(0.0005)
    assert snap.components["src"].complete_latency == pytest.approx(0.05)
    assert (snap.errors, snap.last_error, snap.elapsed) == (1, "E: x", 3.0)
    assert snap.counters == {"rewinds": 2}
    bank.end(clock.monotonic())
    clock.advance(10.0)
    assert bank.snapshot(clock.monotonic(), metrics).elapsed == 3.0  # stops at the end


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        # (txid, phase, at) events -> (txid, phase, duration, commit latency) per checkpoint
        (
            [(1, "PREPARING", 0.0), (1, "COMMITTING", 0.3), (1, "COMMITTED", 0.5)],
            [(1, "committed", 0.5, 0.2)],
        ),
        (
            [
                (1, "PREPARING", 0.0),
                (2, "PREPARING", 1.0),
                (2, "COMMITTING", 1.1),
                (2, "COMMITTED", 1.4),
            ],
            [(1, "failed", None, None), (2, "committed", 0.4, pytest.approx(0.3))],
        ),
        (
            [(1, "PREPARING", 0.0), (1, "ROLLBACK", 0.2), (1, "PREPARING", 0.5)],
            [(1, "failed", None, None), (1, "preparing", None, None)],
        ),
        # A commit finished from a stored phase (recovery): no start seen.
        ([(4, "COMMITTED", 2.0)], [(4, "committed", 0.0, None)]),
        ([(4, "COMMITTING", 2.0)], []),
    ],
)
def test_checkpoint_phases(
    events: list[tuple[int, str, float]], expected: list[tuple[int, str, object, object]]
) -> None:
    bank = _bank(FakeClock())
    for txid, phase, at in events:
        bank.checkpoint_phase(txid, phase, at)
    snap = bank.snapshot(10.0, [])
    got = [(c.txid, c.phase, c.duration, c.commit_latency) for c in snap.checkpoints]
    assert got == [(t, p, None if d is None else pytest.approx(d), c) for t, p, d, c in expected]
    committed = [c for c in snap.checkpoints if c.phase == "committed"]
    assert snap.checkpoint_histogram.count == len(committed)


def test_histogram_buckets_are_cumulative() -> None:
    h = Histogram()
    for v in (0.004, 0.02, 0.02, 3.0, 100.0):
        h.observe(v)
    bounds = dict(zip(CHECKPOINT_BUCKETS, h.counts, strict=True))
    assert (bounds[0.005], bounds[0.025], bounds[5.0], bounds[60.0], h.count) == (1, 3, 4, 4, 5)
    assert h.sum == pytest.approx(103.044)


def test_supervisor_merges_worker_banks_across_restarts() -> None:
    """Each worker's export replaces its previous one; a restart keeps what the
    replaced workers timed, so the run's latencies and checkpoints cover it all."""
    w0, w1 = _bank(FakeClock()), _bank(FakeClock())
    w0.timing("work", 0).timed(10, 0.1)
    w1.timing("work", 1).timed(10, 0.3)
    w0.checkpoint_done(0, 1.0, 1.5, 2.0)
    sup = _bank(FakeClock())
    sup.absorb(0, pickle.loads(pickle.dumps(w0.export())))  # it crosses a pipe
    sup.absorb(1, w1.export())
    w0.timing("work", 0).timed(10, 0.1)
    sup.absorb(0, w0.export())  # a later report replaces the earlier one
    both = [*_counts(0), TaskMetrics("work", 1)]
    snap = sup.snapshot(5.0, both)
    assert snap.components["work"].samples == 30
    assert snap.components["work"].execute_latency == pytest.approx(0.5 / 30)
    assert [(c.txid, c.phase) for c in snap.checkpoints] == [(0, "committed")]
    sup.retire_workers()  # the workers restart: new ones start from nothing
    fresh = _bank(FakeClock())
    fresh.timing("work", 0).timed(5, 0.05)
    fresh.checkpoint_done(1, 6.0, 6.2, 6.5)
    sup.absorb(0, fresh.export())
    snap = sup.snapshot(7.0, both)
    assert snap.components["work"].samples == 35
    assert [(c.txid, c.phase) for c in snap.checkpoints] == [(0, "committed"), (1, "committed")]
    assert snap.checkpoint_histogram.count == 2


def test_keys_changed_per_task_merged_across_workers_and_restarts() -> None:
    """Any worker's stateful tasks say their prepared keys per txid; the worker that
    runs the checkpoint spout alone sees the phases: the supervisor's snapshot puts
    every task's count on its checkpoint, and keeps them over a restart. A txid
    prepared again replaces a task's count; a txid with no checkpoint seen shows nowhere."""
    spout_worker, other = _bank(FakeClock()), _bank(FakeClock())
    spout_worker.checkpoint_phase(0, "PREPARING", 1.0)
    spout_worker.keys_changed(0, "work-0", 7)
    other.keys_changed(0, "work-1", 3)
    other.keys_changed(0, "work-1", 4)  # prepared again (a retried PREPARE)
    spout_worker.checkpoint_phase(0, "COMMITTED", 1.5)
    other.keys_changed(9, "work-1", 1)  # no checkpoint 9 anywhere
    sup = _bank(FakeClock())
    sup.absorb(0, pickle.loads(pickle.dumps(spout_worker.export())))
    sup.absorb(1, pickle.loads(pickle.dumps(other.export())))
    snap = sup.snapshot(2.0, [])
    assert [(c.txid, c.keys_changed) for c in snap.checkpoints] == [(0, {"work-0": 7, "work-1": 4})]
    assert snap.checkpoints[0].state_size == {}  # no local provider says it cheaply
    sup.retire_workers()
    fresh = _bank(FakeClock())
    fresh.checkpoint_phase(1, "PREPARING", 3.0)
    fresh.keys_changed(1, "work-0", 2)
    sup.absorb(0, fresh.export())
    snap = sup.snapshot(4.0, [])
    assert [(c.txid, c.keys_changed) for c in snap.checkpoints] == [
        (0, {"work-0": 7, "work-1": 4}),
        (1, {"work-0": 2}),
    ]
    # The snapshot's checkpoints are copies: a reader changing one changes no bank.
    snap.checkpoints[1].keys_changed["work-0"] = 99
    assert sup.snapshot(4.0, []).checkpoints[1].keys_changed == {"work-0": 2}


def test_keys_changed_keeps_a_bounded_history() -> None:
    bank = _bank(FakeClock())
    for txid in range(500):
        bank.keys_changed(txid, "work-0", txid)
    assert len(bank.export().keys) <= 2 * 50 + 1 and 499 in bank.export().keys


@pytest.mark.parametrize(
    ("rate", "expected"), [(0, (NEVER, NEVER)), (0.05, (20, 1)), (1.0, (1, 1))]
)
def test_sampling_is_every_runtimes_countdown(rate: float, expected: tuple[int, int]) -> None:
    """One in ``every`` timed, the first at once (none at rate 0): the bank's, and
    so the local tasks', the Spark executors' and the Spark driver's spouts'."""
    assert sampling(rate) == expected
    bank = MetricsBank("t", "local", KINDS, rate)
    assert (bank.every, bank.first_sample) == expected


def _stage(stage_id: int, done: int, tasks: int = 2, active: int = 0, failed: int = 0) -> Any:
    return SparkStageStats(stage_id, f"stage {stage_id}", 0, tasks, active, done, failed)


def test_spark_batches_are_listed_and_totalled_and_a_read_again_replaces_its_first() -> None:
    bank = MetricsBank("t", "spark", KINDS)
    assert bank.snapshot(0.0, []).spark_totals is None  # no Spark: no figures at all
    running = SparkBatchStats(0, [0], "RUNNING", 1.0, 0.5, [_stage(0, 1, active=1)])
    assert not running.final
    bank.spark_batch(running)
    bank.spark_batch(SparkBatchStats(1, [1, 2], "FAILED", 2.0, 0.25, [_stage(1, 1, failed=3)]))
    # Batch 0 read again once Spark was done with it: it replaces the first read.
    done = SparkBatchStats(0, [0], "SUCCEEDED", 1.0, 0.5, [_stage(0, 2)])
    assert done.final
    bank.spark_batch(done)
    snap = bank.snapshot(3.0, [])
    assert [(b.txid, b.status) for b in snap.spark] == [(0, "SUCCEEDED"), (1, "FAILED")]
    assert snap.spark_totals == SparkTotals(
        batches=2, jobs=3, stages=2, tasks_completed=3, tasks_failed=3, job_seconds=0.75
    )
    snap.spark[0].stages[0].completed = 99  # a copy: the bank's is unchanged
    assert bank.snapshot(3.0, []).spark[0].stages[0].completed == 2
    for txid in range(2, 2 + RECENT_SPARK_BATCHES):
        bank.spark_batch(SparkBatchStats(txid, [txid + 1], "SUCCEEDED", float(txid), 0.0))
    snap = bank.snapshot(30.0, [])
    assert len(snap.spark) == RECENT_SPARK_BATCHES and snap.spark[0].txid == 2
    assert snap.spark_totals is not None and snap.spark_totals.batches == 2 + RECENT_SPARK_BATCHES


class _Tracker:
    """Spark's status tracker (its method names) as the fake context below fills it."""

    def __init__(self, sc: _Context) -> None:
        self.sc = sc

    def getJobIdsForGroup(self, group: str) -> list[int]:
        return [j for j, (g, _, _) in self.sc.jobs.items() if g == group]

    def getJobInfo(self, job: int) -> Any:
        from types import SimpleNamespace

        _, status, stages = self.sc.jobs[job]
        return SimpleNamespace(status=status, stageIds=[s[0] for s in stages])

    def getStageInfo(self, stage: int) -> Any:
        from pyspark.status import SparkStageInfo

        for _, _, stages in self.sc.jobs.values():
            for s in stages:
                if s[0] == stage:
                    return SparkStageInfo(s[0], 0, "collect", *s[1:])
        return None


class _Context:
    """A SparkContext with what JobWatch uses: local properties and a status tracker."""

    def __init__(self) -> None:
        self.props: dict[str, str | None] = {}
        self.jobs: dict[int, tuple[str | None, str, list[tuple[int, int, int, int, int]]]] = {}

    def getLocalProperty(self, key: str) -> str | None:
        return self.props.get(key)

    def setLocalProperty(self, key: str, value: str | None) -> None:
        self.props[key] = value

    def setJobGroup(self, group: str, description: str) -> None:
        self.props["spark.jobGroup.id"] = group
        self.props["spark.job.description"] = description

    def statusTracker(self) -> _Tracker:
        return _Tracker(self)

    def run_job(self, status: str, *stages: tuple[int, int, int, int, int]) -> int:
        job = len(self.jobs)
        self.jobs[job] = (self.props.get("spark.jobGroup.id"), status, list(stages))
        return job


def test_job_watch_names_each_batch_and_reads_its_jobs_until_spark_is_done() -> None:
    pytest.importorskip("pyspark")
    from statestream.runtime.spark.stages import JobWatch

    bank, sc = MetricsBank("t", "spark", KINDS), _Context()
    watch = JobWatch(bank, FakeClock())
    with watch.batch(sc, 7):
        assert sc.props["spark.job.description"] == "statestream batch 7"
        # (stage, tasks, active, completed, failed): still running as the job returns
        sc.run_job("RUNNING", (0, 2, 1, 1, 0))
    assert sc.props["spark.jobGroup.id"] is None  # the caller's (no) group again
    (first,) = bank.snapshot(0.0, []).spark
    assert (first.txid, first.jobs, first.status, first.final) == (7, [0], "RUNNING", False)
    sc.jobs[0] = (sc.jobs[0][0], "SUCCEEDED", [(0, 2, 0, 2, 0)])  # Spark caught up
    # A streaming query's group in force (a fed batch): kept, and only its new jobs count.
    sc.props["spark.jobGroup.id"] = "query"
    sc.run_job("SUCCEEDED", (1, 1, 0, 1, 0))
    with watch.batch(sc, 8):
        sc.run_job("SUCCEEDED", (2, 3, 0, 2, 1))
    assert sc.props["spark.jobGroup.id"] == "query"
    with watch.batch(sc, 9):
        sc.run_job("SUCCEEDED", (3, 1, 0, 1, 0))
    snap = bank.snapshot(0.0, [])
    assert [(b.txid, b.jobs, b.status) for b in snap.spark] == [
        (7, [0], "SUCCEEDED"),
        (8, [1, 2], "SUCCEEDED"),
        (9, [3], "SUCCEEDED"),
    ]
    assert snap.spark_totals is not None
    assert (snap.spark_totals.tasks_completed, snap.spark_totals.tasks_failed) == (6, 1)


def test_job_watch_never_breaks_the_run() -> None:
    pytest.importorskip("pyspark")
    from statestream.runtime.spark.stages import JobWatch

    class Broken(_Context):
        def statusTracker(self) -> _Tracker:
            raise RuntimeError("py4j gone")

    bank = MetricsBank("t", "spark", KINDS)
    with JobWatch(bank, FakeClock()).batch(Broken(), 1):
        pass
    (b,) = bank.snapshot(0.0, []).spark
    assert (b.txid, b.jobs, b.status) == (1, [], "UNKNOWN")
