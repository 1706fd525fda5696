"""Transactional topologies on the spark runtime: exact, commits in order, failures replayed.

The driver plays the coordinator; each batch's processing phase is a Spark
job and each commit another. Bolts run in Spark's Python workers, so what
they record goes to files (one JSON line per append, O_APPEND) under a
directory the config names, and faults are injected by marker files that
the first task to see them removes (once across every process).
"""

from __future__ import annotations

import collections
import json
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import redis
from claims import redis_store

from statestream import (
    BatchBolt,
    Committer,
    ConfigError,
    FailedException,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    OutputFieldsDeclarer,
    PartitionedTransactionalSpout,
    RuntimeFailure,
    StateLockedError,
    Topology,
    TopologyContext,
    TransactionalBolt,
    TransactionalTopologyBuilder,
    Tuple,
)
from statestream._registry import open_provider
from statestream._transactional.components import CoordinatorStore, coordinator_namespace
from statestream.runtime.local import LocalRuntime
from statestream.runtime.spark import SparkRuntime
from statestream.testing import SimulatedCrash
from statestream_providers.redis import claim_key

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import transactional_global_count as global_count
import transactional_words as words_example

pytestmark = pytest.mark.spark

NAME = "sparktx"
PARTITIONS = 3


# --------------------------------------------------------------------------- a test topology


def rows(n: int) -> dict[int, list[list[int]]]:
    out: dict[int, list[list[int]]] = {p: [] for p in range(PARTITIONS)}
    for i in range(n):
        out[i % PARTITIONS].append([i])
    return out


def batch_of(n: int, take: int, txid: int) -> list[int]:
    """The values transaction ``txid`` holds when every batch takes ``take`` per partition."""
    return sorted(v for part in rows(n).values() for (v,) in part[(txid - 1) * take : txid * take])


def _log(conf: Mapping[str, Any], name: str, entry: Any) -> None:
    with open(Path(conf[f"{NAME}.dir"]) / f"{name}.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


def _take_fault(conf: Mapping[str, Any], what: str, txid: int) -> bool:
    """True once per marker file ``<what>-<txid>`` or ``<what>-<txid>.<n>`` (removing
    one is atomic across processes)."""
    directory = Path(conf[f"{NAME}.dir"])
    for marker in sorted(directory.glob(f"{what}-{txid}*")):
        if marker.name == f"{what}-{txid}" or marker.name.startswith(f"{what}-{txid}."):
            try:
                os.remove(marker)
            except FileNotFoundError:
                continue  # another process took it
            return True
    return False


def read_log(directory: Path, name: str) -> list[Any]:
    path = directory / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


class Partial(BatchBolt[Any]):
    """Sums its share of the batch; logs ``[txid, attempt, task, values]`` at the end."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        self.values: list[int] = []

    def execute(self, tuple: Tuple) -> None:
        if _take_fault(self.conf, "fail-partial", self.id.transaction_id):
            raise FailedException(f"partial fails {self.id}")
        self.values.append(tuple.values[1])

    def finish_batch(self) -> None:
        txid, aid = self.id.transaction_id, self.id.attempt_id
        _log(self.conf, "partial", [txid, aid, self.context.task_index, sorted(self.values)])
        self.collector.emit([self.id, sum(self.values), len(self.values)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "sum", "n"])


class Commit(TransactionalBolt, Committer):
    """Adds the partial sums; in the commit phase logs ``[txid, attempt, sum, n]``."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        self.sum = self.n = 0

    def execute(self, tuple: Tuple) -> None:
        self.sum += tuple.values[1]
        self.n += tuple.values[2]

    def finish_batch(self) -> None:
        txid = self.id.transaction_id
        if _take_fault(self.conf, "fail-commit", txid):
            raise FailedException(f"commit fails {self.id}")
        if _take_fault(self.conf, "crash-commit", txid):
            raise SimulatedCrash(f"the process dies committing {self.id}")
        _log(self.conf, "commits", [txid, self.id.attempt_id, self.sum, self.n])


def topology(n: int, take: int, opaque: bool = False, spout: Any = None) -> Topology:
    kind = OpaqueMemoryTransactionalSpout if opaque else MemoryTransactionalSpout
    spout = spout or kind(rows(n), ["v"], take)
    builder = TransactionalTopologyBuilder(NAME, "spout", spout, PARTITIONS)
    builder.set_bolt("partial", Partial(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("commit", Commit()).global_grouping("partial")
    return builder.build()


@pytest.fixture
def conf(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        f"{NAME}.dir": str(tmp_path),
    }


def spark_run(spark: Any, topo: Topology, conf: Mapping[str, Any], **more: Any) -> Any:
    return SparkRuntime(topo, {**conf, **more}, spark=spark).run(until_idle=True)


def stored_committed(conf: Mapping[str, Any], name: str) -> int:
    with open_provider(
        conf["topology.state.provider"], conf["topology.state.provider.config"], scope=name
    ) as provider:
        stored = CoordinatorStore(provider.get_state(coordinator_namespace(name))).load()
    assert stored is not None and not stored.active
    return stored.committed


def assert_commits_exact(directory: Path, n: int, take: int) -> None:
    """Every transaction committed once, in txid order, with exactly its batch (an
    empty one may follow, started with others as the data ran out)."""
    commits = read_log(directory, "commits")
    batches = -(-n // (take * PARTITIONS))
    txids = [c[0] for c in commits]
    assert txids == list(range(1, len(commits) + 1)) and len(commits) >= batches
    for txid, _, total, count in commits:
        expected = batch_of(n, take, txid)
        assert (total, count) == (sum(expected), len(expected)), txid


# --------------------------------------------------------------------------- the examples


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_global_count_example_is_exact_on_spark(
    spark_session: Any, tmp_path: Path, opaque: bool
) -> None:
    # What the driver says of its first jobs (the CLI prints these lines), heard on
    # the logger itself (`statestream run` in this process may stop its propagation).
    said: list[str] = []
    heard = logging.Handler(logging.INFO)
    heard.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    status = logging.getLogger("statestream.status")
    level = status.level
    status.setLevel(logging.INFO)
    status.addHandler(heard)
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "global-count.database": str(tmp_path / "count.db"),
        "global-count.tuples": 6000,
        "global-count.take": 500,
        "global-count.opaque": opaque,
        "topology.max.spout.pending": 2,
    }
    try:
        result = spark_run(spark_session, global_count.topology(), conf)
    finally:
        status.removeHandler(heard)
        status.setLevel(level)
    assert result.reason == "idle" and not result.errors
    # 6,000 words, 1,500 a batch, in jobs of 1, 2 and 2 transactions: the last job
    # was opened before its emitters found the end, so transaction 5 is empty.
    assert result.counters["batches"] == 5
    assert said[0].startswith("first transactions: 1 batch (txid 1) processed as one "), said
    assert said[0].endswith(" at most 2 (topology.max.spout.pending)"), said
    assert said[1].startswith("first transaction committed in "), said
    assert " s (txid 1); " in said[1] and len(said) == 2, said
    conn = sqlite3.connect(tmp_path / "count.db")
    try:
        assert conn.execute("SELECT count, txid FROM counts").fetchall() == [(6000, 5)]
    finally:
        conn.close()
    assert stored_committed(conf, "global-count") == 5
    # A second run has nothing left to do.
    again = spark_run(spark_session, global_count.topology(), conf)
    assert again.counters["batches"] == 0


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_words_example_is_exact_on_spark(spark_session: Any, tmp_path: Path, opaque: bool) -> None:
    tuples = 3000
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "words.database": str(tmp_path / "words.db"),
        "words.tuples": tuples,
        "words.take": 500,
        "words.opaque": opaque,
    }
    result = spark_run(spark_session, words_example.topology(), conf)
    assert result.reason == "idle" and not result.errors
    truth = collections.Counter(w for part in words_example.words(tuples).values() for (w,) in part)
    conn = sqlite3.connect(tmp_path / "words.db")
    try:
        assert dict(conn.execute("SELECT key, count FROM words").fetchall()) == dict(truth)
        buckets = collections.Counter(n // words_example.BUCKET_SIZE for n in truth.values())
        stored = {b: n for b, n in conn.execute("SELECT key, count FROM buckets") if n}
        assert stored == dict(buckets)
    finally:
        conn.close()


# --------------------------------------------------------------------------- failures and order


@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_failed_batch_is_emitted_again_with_the_same_result(
    spark_session: Any, conf: dict[str, Any], tmp_path: Path, opaque: bool
) -> None:
    (tmp_path / "fail-partial-2").touch()
    result = spark_run(spark_session, topology(300, 50, opaque), conf)
    assert not (tmp_path / "fail-partial-2").exists()
    assert result.counters["replays"] == 1 and not result.errors
    assert_commits_exact(tmp_path, 300, 50)
    # Transaction 2 was processed twice, by two attempts; both saw the batch of txid 2.
    partial = [p for p in read_log(tmp_path, "partial") if p[0] == 2]
    attempts = sorted({aid for _, aid, _, _ in partial})
    assert len(attempts) == 2
    first = sorted(v for _, aid, _, vs in partial if aid == attempts[0] for v in vs)
    again = sorted(v for _, aid, _, vs in partial if aid == attempts[1] for v in vs)
    assert again == batch_of(300, 50, 2)
    assert set(first) <= set(again)  # the task that failed logged nothing
    commits = {c[0]: c[1] for c in read_log(tmp_path, "commits")}
    assert commits[2] == attempts[1]


def test_commits_go_in_txid_order_under_pipelining_and_a_failed_commit(
    spark_session: Any, conf: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "fail-commit-5").touch()
    result = spark_run(spark_session, topology(900, 50, False), conf, **{
        "topology.max.spout.pending": 4
    })  # fmt: skip
    assert not (tmp_path / "fail-commit-5").exists()
    assert result.counters["replays"] == 1
    # 6 transactions of data. Jobs of 1, 2 and 4 transactions (job_size): 4-7 are
    # processed together, 5's commit fails (6 and 7 go back with it), 5-7 are
    # processed again and committed; 7, opened before the emitters found the end, is
    # empty.
    assert_commits_exact(tmp_path, 900, 50)
    processed = [(txid, aid) for txid, aid, _, _ in read_log(tmp_path, "partial")]
    assert {t for t, _ in processed} == set(range(1, 8))
    assert len({aid for t, aid in processed if t in (5, 6, 7)}) == 6  # two attempts each
    assert len({aid for t, aid in processed if t == 4}) == 1
    assert stored_committed(conf, NAME) == 7


class FewOpens(MemoryTransactionalSpout):
    """Refuses to be asked for more than ``most`` new transactions in a run: its
    coordinator part (on the driver) is asked ``is_ready`` before each one opens."""

    def __init__(self, n: int, take: int, most: int) -> None:
        super().__init__(rows(n), ["v"], take)
        self.most = most

    def get_coordinator(self, conf: Mapping[str, Any], context: TopologyContext) -> Any:
        return FewOpensCoordinator(super().get_coordinator(conf, context), self.most)


class FewOpensCoordinator(PartitionedTransactionalSpout.Coordinator):
    def __init__(self, inner: Any, most: int) -> None:
        self.inner = inner
        self.most = most
        self.asked = 0

    def number_of_partitions(self) -> int:
        return int(self.inner.number_of_partitions())

    def partition_exhausted(self, partition: int, last_metadata: Any) -> bool:
        return bool(self.inner.partition_exhausted(partition, last_metadata))

    def is_ready(self) -> bool:
        self.asked += 1
        if self.asked > self.most:
            raise AssertionError(f"the driver went on opening transactions ({self.asked})")
        return bool(self.inner.is_ready())


def test_a_large_max_spout_pending_commits_the_first_transaction_after_one_batch(
    spark_session: Any, conf: dict[str, Any], tmp_path: Path
) -> None:
    """``config/local.yaml``'s 10,000 (a bound on tuples in flight for ordinary
    topologies) opened 10,000 transactions before the first Spark job, and the run
    counted nothing for minutes: the first job takes one transaction, each next job
    up to twice the last, so the first commit comes after one batch."""
    points: list[tuple[str, int]] = []

    def hook(point: str, txid: int) -> None:
        points.append((point, txid))
        if point == "prepared" and ("committed", 1) not in points and txid > 1:
            raise AssertionError(f"transaction {txid} was processed before the first commit")

    pending = {**conf, "topology.max.spout.pending": 10_000}
    topo = topology(900, 50, spout=FewOpens(900, 50, 50))
    rt = SparkRuntime(topo, pending, spark=spark_session)
    rt.fault_hook = hook
    result = rt.run(until_idle=True)
    assert result.reason == "idle" and not result.errors
    assert points[:3] == [("recovered", 0), ("prepared", 1), ("committed", 1)]
    # 6 transactions of data in jobs of 1, 2 and 4: at most one job's worth is empty.
    prepared = [txid for point, txid in points if point == "prepared"]
    assert prepared == list(range(1, 8)), points
    assert_commits_exact(tmp_path, 900, 50)
    assert stored_committed(conf, NAME) == 7


def test_a_failing_transaction_stops_the_run_and_the_next_run_finishes_it(
    spark_session: Any, conf: dict[str, Any], tmp_path: Path
) -> None:
    for i in range(3):  # statestream.spark.batch.attempts is 3
        (tmp_path / f"fail-commit-2.{i}").touch()
    with pytest.raises(RuntimeFailure, match="transaction 2 failed 3 times"):
        spark_run(spark_session, topology(300, 50), conf)
    assert [c[0] for c in read_log(tmp_path, "commits")] == [1]
    result = spark_run(spark_session, topology(300, 50), conf)
    assert result.counters["recovered"] == 1
    assert_commits_exact(tmp_path, 300, 50)


# --------------------------------------------------------------------------- across runtimes


def test_a_store_the_local_runtime_crashed_on_is_finished_exactly_by_spark(
    spark_session: Any, conf: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "crash-commit-3").touch()
    local = {**conf, "topology.max.spout.pending": 3}
    with pytest.raises(SimulatedCrash):
        LocalRuntime(topology(600, 50), local).run(until_idle=True)
    assert [c[0] for c in read_log(tmp_path, "commits")] == [1, 2]
    result = spark_run(spark_session, topology(600, 50), conf)
    assert result.counters["recovered"] == 1  # 3 and what followed it were active
    assert_commits_exact(tmp_path, 600, 50)
    assert stored_committed(conf, NAME) == len(read_log(tmp_path, "commits"))


def test_a_store_spark_crashed_on_is_finished_exactly_by_the_local_runtime(
    spark_session: Any, conf: dict[str, Any], tmp_path: Path
) -> None:
    class Crash(Exception):
        pass

    def crash(point: str, txid: int) -> None:
        if point == "prepared" and txid == 3:
            raise Crash

    rt = SparkRuntime(topology(600, 50, opaque=True), conf, spark=spark_session)
    rt.fault_hook = crash
    with pytest.raises(Crash):
        rt.run(until_idle=True)
    assert [c[0] for c in read_log(tmp_path, "commits")] == [1, 2]
    LocalRuntime(topology(600, 50, opaque=True), conf).run(until_idle=True)
    assert_commits_exact(tmp_path, 600, 50)


def test_a_transactional_topology_cannot_be_fed_by_a_dataframe(
    spark_session: Any, conf: dict[str, Any]
) -> None:
    rt = SparkRuntime(topology(30, 10), conf, spark=spark_session)
    with pytest.raises(ConfigError, match="is transactional"):
        rt.feed(spark_session.range(3), checkpoint="unused")


@pytest.mark.redis
def test_a_transactional_run_whose_lease_is_lost_stops(spark_session: Any, tmp_path: Path) -> None:
    # The driver looks at the run's claim before each poll of the protocol:
    # once the lease is lost (here its key deleted after transaction 2's
    # PREPARE), no transaction starts or commits, and the run stops. Nothing
    # committed is lost: a new run finishes every transaction exactly once.
    with redis_store(claim_ttl_ms=300) as store:
        conf = {**store.run_config(), f"{NAME}.dir": str(tmp_path)}
        key = claim_key(NAME, store.config["key_prefix"])

        def lose(point: str, txid: int) -> None:
            if point == "prepared" and txid == 2:
                with redis.Redis(host=store.config["host"], port=store.config["port"]) as client:
                    assert client.delete(key) == 1, "the run held no claim key"
                time.sleep(0.3)  # the lease is renewed every 100 ms: it is seen lost by now

        rt = SparkRuntime(topology(600, 10), conf, spark=spark_session)
        rt.fault_hook = lose
        with pytest.raises(StateLockedError, match="lost its claim of the store"):
            rt.run(until_idle=True)
        # 20 transactions of 30 rows: the run stopped near the second.
        assert len(read_log(tmp_path, "commits")) <= 3
        LocalRuntime(topology(600, 10), conf).run(until_idle=True)
        assert_commits_exact(tmp_path, 600, 10)
