"""The Spark driver's parts, each built alone (statestream.runtime.spark).

``SparkRuntime`` is a coordinator holding its parts as fields; each part is
built here with what it needs and nothing of the runtime: the memory
provider (one store per test), the fake clock, and no SparkSession, which
none of these parts needs (a batch's Spark job, :class:`BatchJobs`, is the
one part that does: tests/spark runs it). The scenarios are the ones each
part exists for: the session part recovers a stored ``PREPARING`` record,
the spout reader seeks back to the committed positions after a rollback,
the batch runner rolls a failed job back and runs it again within its
attempts, the transactional driver gives a failing transaction up after its
attempts.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest
from word_bolts import Count

from statestream import (
    BatchBolt,
    ConfigError,
    MemoryTransactionalSpout,
    OutputFieldsDeclarer,
    RuntimeFailure,
    Topology,
    TopologyBuilder,
    TransactionalTopologyBuilder,
    Tuple,
)
from statestream._checkpoint import Phase
from statestream._clock import FakeClock
from statestream._components import StatefulBolt
from statestream._deadletter import DeadLetterFile
from statestream._retry import RetryPolicy
from statestream._state import KeyValueState
from statestream._transactional.driver import layout
from statestream.runtime.contract import make_runtime
from statestream.runtime.metrics import MetricsBank
from statestream.runtime.plan import RuntimePlan, as_config
from statestream.runtime.session import StoreSession
from statestream.runtime.spark import DataFrameSpout, SparkRuntime
from statestream.runtime.spark.batches import BatchRunner
from statestream.runtime.spark.checkpoints import DriverCheckpoints
from statestream.runtime.spark.feed import Feed
from statestream.runtime.spark.sessions import SparkSessions
from statestream.runtime.spark.shared import SEQ_BITS, Ack, fresh_state
from statestream.runtime.spark.spouts import Batch, SpoutReader
from statestream.runtime.spark.stages import JobWatch
from statestream.runtime.spark.tally import RunControl, RunTally
from statestream.runtime.spark.transactional import TransactionalDriver, job_size
from statestream.testing import RewindableListSpout, spout_record

WORDS = ["a", "b", "c", "d", "e", "f"]

#: What the driver's instances of :class:`Hooked` were called with, in order.
HOOKS: list[tuple[str, int]] = []


class Hooked(StatefulBolt):
    """A stateful bolt whose hooks (run on the driver's instance) are logged in HOOKS."""

    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        HOOKS.append(("init_state", -1))

    def pre_commit(self, txid: int) -> None:
        HOOKS.append(("pre_commit", txid))

    def pre_rollback(self) -> None:
        HOOKS.append(("pre_rollback", -1))

    def execute(self, tuple: Tuple) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


class Parts:
    """The parts of one driver, as SparkRuntime wires them, on a store of their own."""

    def __init__(
        self, topology: Topology, store_name: str, *, batch_size: int = 2, **conf: Any
    ) -> None:
        self.name = store_name  # of the store, and of the spout's record (spout_record)
        self.clock = FakeClock()
        self.faults: list[tuple[str, int]] = []
        self.config = as_config(
            {
                "topology.state.provider": "memory",
                "topology.state.provider.config": {"name": store_name},
                **conf,
            },
            (topology.name,),
        )
        self.plan = RuntimePlan(topology, self.config)
        bank = MetricsBank(topology.name, "spark", {}, 0.0)
        self.tally = RunTally(bank, [("words", 0)])
        self.control = RunControl(self.clock)
        self.checkpoints = DriverCheckpoints(
            self.plan,
            StoreSession(topology, self.config, self.clock),
            self.clock,
            self.tally,
            exactly_once=True,
            fault=lambda point, txid: self.faults.append((point, txid)),
        )
        self.deadletters = DeadLetterFile(Path(f"/nonexistent/{store_name}.jsonl"))
        self.reader = SpoutReader(
            self.plan,
            batch_size=batch_size,
            at_most_once=False,
            context=self.checkpoints.context,
            retry_policy=RetryPolicy.from_config(self.config),
            tally=self.tally,
            clock=self.clock,
            deadletters=self.deadletters,
        )

    def runner(self, attempts: int) -> BatchRunner:
        return BatchRunner(
            self.plan,
            self.checkpoints,
            self.reader.books,
            self.tally,
            self.control,
            self.deadletters,
            attempts=attempts,
            at_most_once=False,
            fault=lambda point, txid: self.faults.append((point, txid)),
        )

    def start(self) -> None:
        self.checkpoints.start(positions_needed=True)
        self.reader.open()
        self.reader.seek(self.checkpoints.record, start=True)

    def read_again(self, batch: Batch) -> Batch:
        return self.reader.read_again(batch, self.checkpoints.record)


def _words(name: str, bolt: Any = None) -> Topology:
    b = TopologyBuilder(f"parts-{uuid.uuid4().hex[:8]}")
    b.set_spout("words", RewindableListSpout(WORDS, fields=("word",), name=name))
    b.set_bolt("count", bolt or Count()).fields_grouping("words", ["word"])
    return b.build()


def _values(batch: Batch) -> list[str]:
    return [values[0] for records in batch.records.values() for _, values, _ in records]


@pytest.fixture
def parts() -> Iterator[Parts]:
    name = uuid.uuid4().hex
    made = Parts(_words(name), name)
    yield made
    made.reader.close()
    made.checkpoints.close()


# -- RunTally and RunControl -----------------------------------------------------------
def test_the_tally_counts_reports_and_sums_per_component() -> None:
    tally = RunTally(MetricsBank("t", "spark", {}, 0.0), [("a", 0), ("a", 1)])
    tally.count("batches")
    tally.count("skipped", 2)
    tally.task("a", 1).executed += 3
    tally.report("a", 0, ValueError("bad"), "next_tuple()")
    assert tally.counters == {"batches": 1, "replays": 0, "recovered": 0, "skipped": 2}
    assert [(e.component, e.task_index) for e in tally.errors] == [("a", 0)]
    total = tally.metrics({})["a"]
    assert (total.executed, total.errors) == (3, 1)
    assert tally.task("a", -1).component == "a"  # made on first use


def test_the_control_waits_on_its_clock_and_a_stop_or_deadline_cuts_the_wait() -> None:
    clock = FakeClock(10.0)
    control = RunControl(clock)
    assert control.start(None) == 10.0 and not control.over()
    assert control.wait_until(12.5) and clock.now == pytest.approx(12.5)
    control.start(1.0)
    assert not control.wait_until(20.0)  # the duration ends first
    assert control.over() and 13.5 <= clock.now < 13.6 + 1e-9  # in steps of 0.1 s
    control.stop()
    control.start(None)
    assert not control.wait_until(100.0) and clock.now < 100.0


# -- DriverCheckpoints -------------------------------------------------------------------
def test_the_session_part_recovers_a_stored_preparing_record() -> None:
    name = uuid.uuid4().hex
    topology = _words(name, Hooked())
    first = Parts(topology, name)
    first.checkpoints.start(positions_needed=True)
    assert first.faults == [("recovered", -1)] and first.tally.counters["recovered"] == 0
    provider = first.checkpoints.open_provider()
    state = fresh_state(provider, "count-0")
    state.put("a", 1)
    state.prepare_commit(0)
    txid = first.checkpoints.prepare({"words-0": {"next": 2, "replay": []}})
    assert (txid, first.checkpoints.driver.state.phase) == (0, Phase.PREPARING)
    first.checkpoints.close()  # the driver dies with PREPARING(0) stored

    HOOKS.clear()
    second = Parts(topology, name)
    second.checkpoints.start(positions_needed=True)
    try:
        assert second.tally.counters["recovered"] == 1
        assert second.faults == [("recovered", -1)]
        assert second.checkpoints.driver.state.phase is Phase.COMMITTED
        assert second.checkpoints.record.restore_point() == (-1, None)
        assert ("pre_rollback", -1) in HOOKS and HOOKS[-1] == ("init_state", -1)
        kept = fresh_state(second.checkpoints.open_provider(), "count-0")
        assert kept.get("a") is None  # the prepare was rolled back
        assert second.checkpoints.tokens == {}
    finally:
        second.checkpoints.close()


def test_the_session_part_commits_with_the_hooks_and_keeps_the_tokens() -> None:
    name = uuid.uuid4().hex
    parts = Parts(_words(name, Hooked()), name)
    parts.checkpoints.start(positions_needed=True)
    try:
        state = fresh_state(parts.checkpoints.open_provider(), "count-0")
        state.put("a", 1)
        state.prepare_commit(0)
        HOOKS.clear()
        txid = parts.checkpoints.prepare({"words-0": {"next": 2, "replay": []}})
        parts.checkpoints.commit(txid, {"count-0": "token"})
        assert HOOKS == [("pre_commit", 0)]
        assert parts.checkpoints.tokens == {"count-0": "token"}
        assert fresh_state(parts.checkpoints.open_provider(), "count-0").get("a") == 1
        parts.checkpoints.abort(parts.checkpoints.prepare(None))
        assert parts.checkpoints.tokens == {}  # a rollback: no executor state is current
        assert parts.checkpoints.driver.state.txid == 0
    finally:
        parts.checkpoints.close()


# -- SpoutReader -------------------------------------------------------------------------
def test_the_spout_reader_seeks_back_to_the_committed_positions_after_a_rollback(
    parts: Parts,
) -> None:
    parts.start()
    first = parts.reader.read()
    assert _values(first) == ["a", "b"]
    assert first.positions == {"words-0": {"next": 2, "replay": []}}
    parts.checkpoints.commit(parts.checkpoints.prepare(first.positions), {})
    second = parts.reader.read()
    assert _values(second) == ["c", "d"]
    parts.checkpoints.abort(parts.checkpoints.prepare(second.positions))
    again = parts.read_again(second)
    assert _values(again) == ["c", "d"]  # not "e", "f": sought back to the commit's end
    assert again.positions == second.positions
    assert not parts.reader.idle()


def test_the_spout_reader_gives_an_at_most_once_batch_back_unread() -> None:
    name = uuid.uuid4().hex
    parts = Parts(_words(name), name)
    reader = SpoutReader(
        parts.plan,
        batch_size=4,
        at_most_once=True,
        context=parts.checkpoints.context,
        retry_policy=RetryPolicy.from_config(parts.config),
        tally=parts.tally,
        clock=parts.clock,
        deadletters=parts.deadletters,
    )
    try:
        reader.open()
        batch = reader.read()
        assert batch.positions is None and _values(batch) == ["a", "b", "c", "d"]
        assert reader.read_again(batch, parts.checkpoints.load()) is batch
    finally:
        reader.close()
        parts.checkpoints.close()
    assert reader.tasks == []


# -- BatchRunner -------------------------------------------------------------------------
def test_the_batch_runner_rolls_a_failed_job_back_and_runs_it_again(parts: Parts) -> None:
    parts.start()
    runs: list[tuple[int, list[str]]] = []

    def job(txid: int, batch: Batch) -> list[Ack]:
        runs.append((txid, _values(batch)))
        if len(runs) < 3:
            raise OSError("an executor was lost")
        return []

    parts.runner(attempts=3).run(parts.reader.read(), parts.read_again, job)
    assert runs == [(0, ["a", "b"])] * 3  # read again from the same positions each time
    assert parts.tally.counters["replays"] == 2 and parts.tally.counters["batches"] == 1
    assert [e.component for e in parts.tally.errors] == ["$batch", "$batch"]
    assert parts.checkpoints.driver.state.phase is Phase.COMMITTED
    assert parts.checkpoints.driver.state.txid == 0
    assert parts.faults[-2:] == [("prepared", 0), ("committed", 0)]
    assert sorted(spout_record(parts.name).acked) == [0, 1]


def test_the_batch_runner_gives_up_after_its_attempts(parts: Parts) -> None:
    parts.start()

    def job(txid: int, batch: Batch) -> list[Ack]:
        raise OSError("an executor was lost")

    with pytest.raises(RuntimeFailure, match="batch 0 failed 2 times"):
        parts.runner(attempts=2).run(parts.reader.read(), parts.read_again, job)
    assert parts.tally.counters["batches"] == 0
    assert parts.checkpoints.driver.state.txid == -1  # rolled back: nothing committed


def test_the_batch_runner_retries_a_failed_message_after_the_policy_delay() -> None:
    name = uuid.uuid4().hex
    parts = Parts(_words(name), name, **{"statestream.retry.initial.ms": 5000})
    parts.start()
    task = parts.plan.component_tasks["words"][0]
    runs: list[float] = []

    def job(txid: int, batch: Batch) -> list[Ack]:
        runs.append(parts.clock.monotonic())
        if len(runs) > 1:
            return []
        # Task 0 of count gave up on the tuple of record 1 ("b"): one failed attempt.
        lost = [((task << SEQ_BITS | 1) + 1, "count", "ValueError", "poison")]
        return [("count", 0, 2, 0, 1, None, [], lost, None, None, [])]

    try:
        parts.runner(attempts=3).run(parts.reader.read(), parts.read_again, job)
        assert runs == [0.0, pytest.approx(5.0)]  # waited the retry delay on the fake clock
        assert parts.tally.counters["replays"] == 1 and parts.tally.counters["batches"] == 1
        assert parts.tally.task("words", 0).failed == 1
    finally:
        parts.reader.close()
        parts.checkpoints.close()


# -- Feed --------------------------------------------------------------------------------
class FakeFrame:
    columns: ClassVar[list[str]] = ["word"]


def _feed(topology: Topology) -> Feed:
    name = uuid.uuid4().hex
    parts = Parts(topology, name)
    return Feed(
        parts.plan,
        SparkSessions("app", parts.config),
        parts.checkpoints,
        parts.runner(attempts=1),
        None,  # type: ignore[arg-type]  # refused before any job
        parts.tally,
        parts.control,
        lambda sc: None,
    )


def test_the_feed_refuses_what_it_cannot_run() -> None:
    b = TopologyBuilder("fed")
    b.set_spout("rows", DataFrameSpout(["word", "n"]))
    b.set_bolt("count", Count()).fields_grouping("rows", ["word"])
    feed = _feed(b.build())
    with pytest.raises(ConfigError, match="no column 'n'"):
        feed.run(FakeFrame(), checkpoint="unused")
    with pytest.raises(ConfigError, match="is transactional"):
        feed.run(FakeFrame(), checkpoint="unused", transactional=True)
    with pytest.raises(ConfigError, match=r"only spout is a DataFrameSpout \(found: 'words'"):
        _feed(_words("fed")).run(FakeFrame(), checkpoint="unused")


# -- SparkSessions -----------------------------------------------------------------------
class FakeSession:
    def __init__(self, master: str) -> None:
        self.sparkContext = type("Context", (), {"master": master})()
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def test_the_sessions_part_says_the_master_and_never_stops_a_session_it_did_not_build() -> None:
    sessions = SparkSessions("app", as_config({"spark.master": "local[3]"}, ()))
    assert sessions.master == "local[3]"
    given = FakeSession("spark://host:7077")
    sessions.adopt(given)
    assert sessions.master == "spark://host:7077" and sessions.session() is given
    sessions.release()
    assert not given.stopped and sessions.session() is given


# -- TransactionalDriver -----------------------------------------------------------------
class Counted(BatchBolt[Any]):
    def execute(self, tuple: Tuple) -> None:
        pass

    def finish_batch(self) -> None:
        pass

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id"])


class FailingRdd:
    """Every transformation is itself; collecting fails, as a lost Spark job does."""

    def __getattr__(self, name: str) -> Any:
        if name == "collect":
            raise OSError("the job failed")
        return lambda *args, **kwargs: self


class QuietWatch(JobWatch):
    @contextmanager
    def batch(self, sc: Any, txid: int) -> Iterator[None]:
        yield


def test_the_transactional_driver_gives_a_failing_transaction_up_after_its_attempts() -> None:
    builder = TransactionalTopologyBuilder(
        f"tx-{uuid.uuid4().hex[:8]}",
        "spout",
        MemoryTransactionalSpout({0: [["a"], ["b"]]}, ["word"], 1),
        1,
    )
    builder.set_bolt("count", Counted()).shuffle_grouping("spout")
    topology = builder.build()
    tx = layout(topology)
    assert tx is not None
    parts = Parts(topology, uuid.uuid4().hex)
    driver = TransactionalDriver(
        tx,
        parts.plan,
        StoreSession(topology, parts.config, parts.clock),
        parts.tally,
        parts.control,
        QuietWatch(parts.tally.bank, parts.clock),
        attempts=2,
        batch_size=1000,
        fault=lambda point, txid: parts.faults.append((point, txid)),
    )
    with pytest.raises(RuntimeFailure, match="transaction 1 failed 2 times"):
        driver.run(FailingRdd(), "token", None, until_idle=True)
    assert parts.tally.counters["replays"] == 2 and parts.tally.counters["batches"] == 0
    assert parts.faults == [("recovered", 0)]
    assert [e.component for e in parts.tally.errors] == ["$batch", "$batch"]


@pytest.mark.parametrize(
    ("pending", "last", "carried", "batch_size", "emitters", "size"),
    [
        (10_000, 0, 0, 50_000, 3, 1),  # the first job: one transaction, whatever the bound
        (1, 0, 0, 50_000, 3, 1),
        (10_000, 1, 3_000, 50_000, 3, 2),  # then twice the last
        (10_000, 8, 3_000, 50_000, 3, 16),
        (10_000, 40, 3_000, 50_000, 3, 50),  # 50 x 3,000 fit 50,000 a task on 3 tasks
        (10_000, 40, 0, 50_000, 3, 80),  # the size of a transaction not known yet
        (4, 8, 10, 50_000, 3, 4),  # never past topology.max.spout.pending
        (10_000, 8, 90_000, 50_000, 1, 1),  # one too big for a job still runs, alone
        (10_000, 8, 0, 1, 1, 16),  # empty transactions carry nothing: only the doubling
    ],
)
def test_a_transactional_job_takes_one_transaction_then_twice_the_last_within_the_bounds(
    pending: int, last: int, carried: int, batch_size: int, emitters: int, size: int
) -> None:
    assert job_size(pending, last, carried, batch_size, emitters) == size


# -- the registry ------------------------------------------------------------------------
def test_the_spark_runner_from_the_registry_runs_on_the_clock_it_is_given() -> None:
    clock = FakeClock(42.0)
    topology = _words(uuid.uuid4().hex)
    rt = make_runtime(topology, as_config({"topology.runner": "spark"}, ()), clock=clock)
    assert isinstance(rt, SparkRuntime) and rt.clock is clock
    clock.advance(8.0)
    assert rt.metrics_snapshot().at == 50.0  # the snapshot is taken on that clock
