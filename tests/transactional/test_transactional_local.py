"""Transactional topologies on the local runtime: completion, commit order, failures, restarts.

Bolts record into ``statestream.testing.sink`` lists (components are copied
per task, and a batch bolt per batch). Time is a FakeClock.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from statestream import (
    BasicBolt,
    BasicOutputCollector,
    BatchBolt,
    Bolt,
    Committer,
    FailedException,
    FilePartitionedTransactionalSpout,
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    OutputFieldsDeclarer,
    RuntimeFailure,
    StatefulBolt,
    Topology,
    TopologyContext,
    TopologyError,
    TransactionalBolt,
    TransactionalTopologyBuilder,
    TransactionAttempt,
    Tuple,
)
from statestream._retry import RetryPolicy
from statestream.runtime.local import LocalRuntime
from statestream.testing import FakeClock, SimulatedCrash, sink

# Failures to inject, by (bolt, txid): how many attempts still fail. Process-wide,
# since a batch bolt is a fresh copy per batch.
FAIL: dict[tuple[str, int], int] = {}


@pytest.fixture(autouse=True)
def _clear_failures() -> Any:
    FAIL.clear()
    yield
    FAIL.clear()


def run(topology: Topology, clock: FakeClock | None = None, **config: Any) -> Any:
    conf = {"topology.max.spout.pending": 1, **{k.replace("_", "."): v for k, v in config.items()}}
    rt = LocalRuntime(topology, conf, clock=clock or FakeClock())
    return rt.run(until_idle=True)


def data(n: int, partitions: int = 3) -> dict[int, list[list[Any]]]:
    out: dict[int, list[list[Any]]] = {p: [] for p in range(partitions)}
    for i in range(n):
        out[i % partitions].append([i])
    return out


class Record(BatchBolt[Any]):
    """Collects the batch; at the end records ``(txid, attempt, task, values)`` in ``sink(name)``
    and emits one ``(id, n)`` per task of ``to`` (direct) or on the default stream."""

    def __init__(self, name: str, emit: bool = True) -> None:
        self.name = name
        self.emit = emit

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        self.values: list[Any] = []
        left = FAIL.get((self.name, id.transaction_id), 0)
        if left:
            FAIL[(self.name, id.transaction_id)] = left - 1
            self.fail_now = True
        else:
            self.fail_now = False

    def execute(self, tuple: Tuple) -> None:
        if self.fail_now:
            raise FailedException(f"{self.name} fails {self.id}")
        self.values.append(tuple.values[1])

    def finish_batch(self) -> None:
        if self.fail_now:
            raise FailedException(f"{self.name} fails {self.id} at the end")
        sink(self.name).append(
            (
                self.id.transaction_id,
                self.id.attempt_id,
                self.context.task_index,
                sorted(self.values),
            )
        )
        if self.emit:
            self.collector.emit([self.id, len(self.values)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "n"])


class RecordCommits(Record, Committer):
    pass


def txids(name: str) -> list[int]:
    return [t for t, *_ in sink(name)]


def committed_values(name: str) -> dict[int, list[Any]]:
    """txid -> the values a (single-task) committer finished it with (the last attempt)."""
    out: dict[int, list[Any]] = {}
    for txid, _, _, values in sink(name):
        out[txid] = values
    return out


def global_count(spout: Any, parallelism: int = 3, partial: int = 4) -> Topology:
    b = TransactionalTopologyBuilder("gc", "spout", spout, parallelism)
    b.set_bolt("partial", Record("partial"), partial).shuffle_grouping("spout")
    b.set_committer_bolt("sum", Record("sum", emit=False)).global_grouping("partial")
    return b.build()


# -- the built topology ------------------------------------------------------------------


def test_build_gives_an_ordinary_topology_of_ordinary_components() -> None:
    topo = global_count(MemoryTransactionalSpout(data(9), ["n"], 2))
    assert list(topo.components) == ["$coordinator", "spout", "partial", "sum"]
    coord = topo.components["$coordinator"]
    assert coord.is_spout and coord.parallelism == 1
    assert set(coord.outputs) == {"$batch", "$commit"}
    spout = topo.components["spout"]
    assert [(s.source, s.stream, s.grouping.kind) for s in spout.inputs] == [
        ("$coordinator", "$batch", "all")
    ]
    assert spout.outputs["default"][1] is True and spout.parallelism == 3
    total = topo.components["sum"]
    assert [(s.source, s.stream, s.grouping.kind) for s in total.inputs] == [
        ("partial", "default", "direct"),
        ("partial", "$coord", "direct"),
        ("$coordinator", "$commit", "all"),
    ]
    assert not topo.has_stateful_bolts


def test_the_global_count_is_exact_and_the_run_ends_when_all_committed() -> None:
    result = run(global_count(MemoryTransactionalSpout(data(1000), ["n"], 50)))
    assert result.reason == "idle" and not result.errors
    # 1000 tuples over 3 partitions of 334/333/333, 50 per partition per batch: 7 batches.
    assert txids("sum") == list(range(1, 8))
    assert sum(sum(v) for v in committed_values("sum").values()) == 1000
    # Every partial-count task finished every batch, whatever it got of it.
    assert collections.Counter(t for t, *_ in sink("partial")) == {t: 4 for t in range(1, 8)}
    assert sorted(v for *_, vs in sink("partial") for v in vs) == list(range(1000))


def test_completion_with_several_upstream_tasks_direct_emits_and_empty_batches() -> None:
    # Partition 2 is empty and partition 1 ends early: some emitter tasks send
    # nothing for some batches; with 5 batches in flight the last ones are empty.
    spout = MemoryTransactionalSpout(
        {0: [[i] for i in range(10)], 1: [[100], [101]], 2: []}, ["n"], 4
    )

    class Fan(BatchBolt[Any]):
        """Sends each tuple to the collector task ``n % 3`` with emit_direct."""

        def execute(self, tuple: Tuple) -> None:
            tasks = self.context.component_tasks("collect")
            self.collector.emit_direct(tasks[tuple.values[1] % 3], [self.id, tuple.values[1]], "d")

        def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
            declarer.declare_stream("d", ["id", "n"], direct=True)

    b = TransactionalTopologyBuilder("direct", "spout", spout, 3)
    b.set_bolt("fan", Fan(), 2).shuffle_grouping("spout")
    b.set_bolt("collect", Record("collect"), 3).direct_grouping("fan", "d")
    b.set_committer_bolt("sum", Record("sum", emit=False)).global_grouping("collect")
    result = run(b.build(), topology_max_spout_pending=5)
    assert not result.errors
    done = sink("collect")
    batches = sorted({t for t, *_ in done})
    assert len(batches) >= 3
    # Every collector task finished every batch, also those it got nothing of.
    assert collections.Counter(t for t, *_ in done) == {t: 3 for t in batches}
    assert all(v % 3 == task for _, _, task, vs in done for v in vs)
    assert sorted(v for *_, vs in done for v in vs) == [*range(10), 100, 101]
    per_batch = {t: sum(len(vs) for tt, _, _, vs in done if tt == t) for t in batches}
    assert per_batch[1] == 6 and per_batch[3] == 2 and 0 in per_batch.values()  # an empty batch
    assert txids("sum") == batches


def test_committers_run_in_txid_order_when_later_batches_finish_first() -> None:
    topo = global_count(MemoryTransactionalSpout(data(300), ["n"], 10), parallelism=1)
    rt = LocalRuntime(topo, {"topology.max.spout.pending": 5}, clock=FakeClock())
    rt.open()
    emitter = rt.tasks_of["spout"][0]
    partials = rt.tasks_of["partial"]
    while len(emitter.inbox) < 5:  # type: ignore[attr-defined]
        rt.step()
    while emitter.inbox:  # type: ignore[attr-defined]
        emitter.drain()  # type: ignore[attr-defined]
    # The five batches reach the partial counts in reverse (as they would from
    # a slow link to some tasks): batch 5 first, and its count before its data.
    for task in partials:
        task.inbox.reverse()  # type: ignore[attr-defined]
    result = rt.run(until_idle=True)
    assert not result.errors
    processed = []
    for t in txids("partial"):
        if t not in processed:
            processed.append(t)
    assert processed[:5] == [5, 4, 3, 2, 1]
    # In txid order; batches started while the last data was being emitted are empty.
    commits = txids("sum")
    assert commits == list(range(1, len(commits) + 1))
    assert all(committed_values("sum")[t] for t in range(1, 11))
    assert sum(sum(v) for v in committed_values("sum").values()) == 300


@pytest.mark.parametrize("where", ["partial", "sum"])
def test_a_failed_transaction_fails_every_later_one_and_the_same_batches_are_emitted(
    where: str,
) -> None:
    FAIL[(where, 3)] = 1  # the first attempt of txid 3 fails (processing or commit phase)
    b = TransactionalTopologyBuilder(
        "gc", "spout", MemoryTransactionalSpout(data(300), ["n"], 10), 3
    )
    b.set_bolt("partial", Record("partial"), 4).shuffle_grouping("spout")
    b.set_bolt("seen", Record("seen", emit=False)).global_grouping("spout")  # whole batches
    b.set_committer_bolt("sum", Record("sum", emit=False)).global_grouping("partial")
    result = run(b.build(), topology_max_spout_pending=5)
    assert not result.errors  # FailedException is a signal, not an error
    assert txids("sum") == list(range(1, 11))
    attempts: dict[int, list[list[Any]]] = collections.defaultdict(list)
    for txid, _, _, values in sink("seen"):
        attempts[txid].append(values)
    replayed = {t for t, a in attempts.items() if len(a) > 1}
    # 3 and the transactions in flight after it were emitted again, as the same batches.
    assert 3 in replayed and replayed <= {3, 4, 5, 6, 7}
    for t in replayed:
        assert all(c == attempts[t][0] for c in attempts[t]), t
    assert sum(sum(v) for v in committed_values("sum").values()) == 300


class GrowingTake(OpaquePartitionedTransactionalSpout):
    """Opaque: a first attempt takes 4 per partition, any later one 3 (a replay differs)."""

    def __init__(self, rows: list[int]) -> None:
        self.rows = rows

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["tx", "n"])

    class Coord(OpaquePartitionedTransactionalSpout.Coordinator):
        def __init__(self, rows: list[int]) -> None:
            self.rows = rows

        def number_of_partitions(self) -> int:
            return 1

        def partition_exhausted(self, partition: int, last: Any) -> bool:
            return last is not None and last["end"] >= len(self.rows)

    class Emit(OpaquePartitionedTransactionalSpout.Emitter):
        def __init__(self, rows: list[int]) -> None:
            self.rows = rows
            self.seen: set[int] = set()

        def emit_partition_batch(
            self, attempt: TransactionAttempt, collector: Any, partition: int, last: Any
        ) -> Any:
            start = last["end"] if last else 0
            take = 3 if attempt.transaction_id in self.seen else 4
            self.seen.add(attempt.transaction_id)
            end = min(start + take, len(self.rows))
            for n in self.rows[start:end]:
                collector.emit([attempt, n])
            sink("opaque-emits").append((attempt.transaction_id, start, end))
            return {"start": start, "end": end}

    def get_coordinator(self, conf: Any, context: Any) -> Any:
        return self.Coord(self.rows)

    def get_emitter(self, conf: Any, context: Any) -> Any:
        return self.Emit(self.rows)


def test_an_opaque_replay_starts_where_the_previous_batch_ended() -> None:
    FAIL[("partial", 2)] = 1
    topo = global_count(GrowingTake(list(range(20))), parallelism=1, partial=2)
    result = run(topo, topology_max_spout_pending=5)
    assert not result.errors
    emits = sink("opaque-emits")
    # 1..5 first take 4 each (0-20); 2 fails, so 2..5 are emitted again from
    # the end of batch 1 with 3 each: 4-7, 7-10, 10-13, 13-16, and so on.
    assert emits[:5] == [(1, 0, 4), (2, 4, 8), (3, 8, 12), (4, 12, 16), (5, 16, 20)]
    assert emits[5:9] == [(2, 4, 7), (3, 7, 10), (4, 10, 13), (5, 13, 16)]
    # Each value is in exactly one committed batch.
    committed = committed_values("sum")
    assert list(committed) == list(range(1, len(committed) + 1))
    assert sum(sum(v) for v in committed.values()) == 20


def test_a_timed_out_transaction_is_emitted_again() -> None:
    clock = FakeClock()
    topo = global_count(MemoryTransactionalSpout(data(60), ["n"], 5), parallelism=1, partial=1)
    rt = LocalRuntime(
        topo, {"topology.max.spout.pending": 3, "topology.message.timeout.secs": 5}, clock=clock
    )
    rt.open()
    emitter, partial = rt.tasks_of["spout"][0], rt.tasks_of["partial"][0]
    while not emitter.inbox:  # type: ignore[attr-defined]
        rt.step()
    emitter.drain()  # type: ignore[attr-defined]
    lost = partial.inbox.popleft()  # type: ignore[attr-defined]  # the transport loses a tuple of txid 1
    assert lost.values[0].transaction_id == 1
    result = rt.run(until_idle=True)
    assert not result.errors
    assert clock.now >= 5  # it took a timeout
    assert txids("sum") == list(range(1, 5))
    assert sum(sum(v) for v in committed_values("sum").values()) == 60
    assert any(a > 1 for t, a, *_ in sink("sum") if t == 1)


class CrashAt(BatchBolt[Any], Committer):
    """A committer that records into ``sink("store")`` as an outside store would
    (``{txid: ...}`` by the transactional rule) and crashes the process once at ``txid``."""

    crash_at = 0

    def execute(self, tuple: Tuple) -> None:
        self.total = getattr(self, "total", 0) + tuple.values[1]

    def finish_batch(self) -> None:
        store = sink("store")
        txid = self.id.transaction_id
        if not store or store[-1][0] != txid:
            store.append((txid, getattr(self, "total", 0)))
        if txid == CrashAt.crash_at:
            CrashAt.crash_at = 0
            raise SimulatedCrash(f"crash in the commit of {txid}")


def test_a_crash_and_a_restart_skip_and_repeat_no_committed_transaction(tmp_path: Path) -> None:
    b = TransactionalTopologyBuilder(
        "restart", "spout", MemoryTransactionalSpout(data(600), ["n"], 20), 3
    )
    b.set_bolt("partial", Record("partial"), 2).shuffle_grouping("spout")
    b.set_committer_bolt("store", CrashAt()).global_grouping("partial")
    topo = b.build()
    conf = {
        "topology.max.spout.pending": 4,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    CrashAt.crash_at = 4
    with pytest.raises(SimulatedCrash):
        LocalRuntime(topo, conf, clock=FakeClock()).run(until_idle=True)
    # The commit of 4 reached the store, the coordinator never heard of it.
    assert [t for t, _ in sink("store")] == [1, 2, 3, 4]
    result = LocalRuntime(topo, conf, clock=FakeClock()).run(until_idle=True)
    assert not result.errors
    store = sink("store")
    assert [t for t, _ in store] == list(range(1, 11))  # 4 finished again, kept once
    assert sum(n for _, n in store) == 600
    # A third run finds nothing left to do.
    result = LocalRuntime(topo, conf, clock=FakeClock()).run(until_idle=True)
    assert result.reason == "idle" and [t for t, _ in sink("store")] == list(range(1, 11))


class Words(BasicBolt):
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        for word in tuple.values[1].split():
            collector.emit([tuple.values[0], word])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "word"])


def test_a_directory_of_files_is_read_in_byte_ranges_and_replayed_exactly(tmp_path: Path) -> None:
    lines = {f"part-{i}.txt": [f"f{i} l{j} x" for j in range(25 + 10 * i)] for i in range(3)}
    for name, text in lines.items():
        (tmp_path / name).write_text("".join(t + "\n" for t in text))
    spout = FilePartitionedTransactionalSpout(tmp_path, take_per_batch=7)
    FAIL[("words", 2)] = 1
    b = TransactionalTopologyBuilder("files", "spout", spout, 2)
    b.set_bolt("split", Words(), 2).shuffle_grouping("spout")
    b.set_bolt("words", Record("words"), 2).fields_grouping("split", "word")
    b.set_committer_bolt("sum", Record("sum", emit=False)).global_grouping("words")
    result = run(b.build(), topology_max_spout_pending=3)
    assert not result.errors
    words = collections.Counter(w for t in lines.values() for line in t for w in line.split())
    got: collections.Counter[str] = collections.Counter()
    last: dict[int, int] = {}
    for txid, attempt, *_ in sink("words"):
        last[txid] = max(last.get(txid, 0), attempt)
    for txid, attempt, _, values in sink("words"):
        if attempt == last[txid]:
            got.update(values)
    assert got == words
    assert txids("sum") == list(range(1, 8))  # 45 lines at 7 a batch


def test_a_basic_bolt_between_committers_runs_in_the_commit_phase() -> None:
    class Twice(BasicBolt):
        def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
            collector.emit([tuple.values[0], tuple.values[1]])
            collector.emit([tuple.values[0], tuple.values[1]])

        def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
            declarer.declare(["id", "n"])

    b = TransactionalTopologyBuilder(
        "chain", "spout", MemoryTransactionalSpout(data(40), ["n"], 5), 2
    )
    b.set_committer_bolt("first", Record("first")).global_grouping("spout")
    b.set_bolt("twice", Twice(), 2).shuffle_grouping("first")
    b.set_bolt("second", RecordCommits("second", emit=False), 2).shuffle_grouping("twice")
    result = run(b.build(), topology_max_spout_pending=4)
    assert not result.errors
    assert txids("first") == list(range(1, 5))
    # "second" finishes t only after "first" committed it, in order.
    assert sorted(set(txids("second"))) == list(range(1, 5))
    order = [t for t, *_ in sink("second")]
    assert order == sorted(order)
    assert sum(sum(v) for _, _, _, v in sink("second")) == 2 * sum(
        len(v) for _, _, _, v in sink("first")
    )


def test_emitting_without_the_attempt_first_is_an_error_that_fails_the_batch() -> None:
    class Bad(BatchBolt[Any]):
        def execute(self, tuple: Tuple) -> None:
            pass

        def finish_batch(self) -> None:
            self.collector.emit(["not an attempt", 1])

        def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
            declarer.declare(["id", "n"])

    b = TransactionalTopologyBuilder("bad", "spout", MemoryTransactionalSpout(data(3), ["n"], 5), 1)
    b.set_bolt("bad", Bad()).shuffle_grouping("spout")
    b.set_committer_bolt("sum", Record("sum")).global_grouping("bad")
    with LocalRuntime(b.build(), {}, clock=FakeClock()) as rt:
        rt.open()
        for _ in range(20):
            rt.step()
        # The batch fails and is emitted again (and fails again): nothing commits.
        assert rt.errors and "first value of every tuple" in rt.errors[0].error
        assert rt.tasks_of["$coordinator"][0].spout.protocol.committed == 0  # type: ignore[attr-defined]
    assert sink("sum") == []


def test_the_builder_refuses_what_cannot_be_run() -> None:
    spout = MemoryTransactionalSpout(data(3), ["n"], 1)

    class State(StatefulBolt):
        def init_state(self, state: Any) -> None:
            pass

    class Plain(Bolt):
        pass

    b = TransactionalTopologyBuilder("t", "spout", spout)
    with pytest.raises(TopologyError, match="StatefulBolt"):
        b.set_bolt("s", State())
    with pytest.raises(TopologyError, match="must be a BatchBolt"):
        b.set_bolt("p", Plain())  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="not a BatchBolt"):
        b.set_committer_bolt("w", Words())  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match="must be a TransactionalSpout"):
        TransactionalTopologyBuilder("t", "spout", object())
    b.set_bolt("x", Record("x")).shuffle_grouping("spuot")
    with pytest.raises(TopologyError, match=r"unknown component 'spuot'.*did you mean 'spout'"):
        b.build()


def test_acking_off_is_refused() -> None:
    topo = global_count(MemoryTransactionalSpout(data(3), ["n"], 1))
    with pytest.raises(Exception, match="acker"):
        LocalRuntime(topo, {"topology.acker.executors": 0}, clock=FakeClock()).run(until_idle=True)


def test_opaque_memory_spout_counts_exactly() -> None:
    result = run(
        global_count(OpaqueMemoryTransactionalSpout(data(500), ["n"], 30)),
        topology_max_spout_pending=3,
    )
    assert not result.errors
    assert sum(sum(v) for v in committed_values("sum").values()) == 500


def test_a_transactional_bolt_gets_the_attempt_as_its_id() -> None:
    class Ids(TransactionalBolt):
        def execute(self, tuple: Tuple) -> None:
            assert tuple.values[0] == self.id

        def finish_batch(self) -> None:
            sink("ids").append(self.id)

    b = TransactionalTopologyBuilder("ids", "spout", MemoryTransactionalSpout(data(6), ["n"], 1), 1)
    b.set_bolt("ids", Ids()).shuffle_grouping("spout")
    run(b.build())
    assert [a.transaction_id for a in sink("ids")] == [1, 2]  # 2 rows per partition
    assert all(isinstance(a, TransactionAttempt) for a in sink("ids"))


# -- poison batches: the retry policy, then a run that stops ------------------------------

POISON = 4  # data(9, 1) in batches of 3: txid 1 = [0, 1, 2], 2 = [3, 4, 5], 3 = [6, 7, 8]
# How many more times the poison value raises (None: always). Process-wide, see FAIL.
POISON_LEFT: list[int | None] = [None]


class Poison(BatchBolt[Any]):
    """Raises on the poison value; records ``(txid, attempt, clock time)`` of every
    attempt it is prepared for in ``sink("tries")``; emits its batch's sum."""

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any, id: Any
    ) -> None:
        super().prepare(conf, context, collector, id)
        self.values: list[Any] = []
        sink("tries").append((id.transaction_id, id.attempt_id, context.clock.monotonic()))

    def execute(self, tuple: Tuple) -> None:
        value = tuple.values[1]
        left = POISON_LEFT[0]
        if value == POISON and (left is None or left > 0):
            if left is not None:
                POISON_LEFT[0] = left - 1
            raise ValueError(f"poison value {value}")
        self.values.append(value)

    def finish_batch(self) -> None:
        self.collector.emit([self.id, sum(self.values)])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["id", "n"])


@pytest.fixture
def poison() -> Any:
    POISON_LEFT[0] = None
    yield POISON_LEFT
    POISON_LEFT[0] = None


def poisoned(
    extra: Mapping[str, Any] | None = None, **config: Any
) -> tuple[LocalRuntime, FakeClock]:
    b = TransactionalTopologyBuilder(
        "poisoned", "spout", MemoryTransactionalSpout(data(9, 1), ["n"], 3)
    )
    b.set_bolt("check", Poison()).global_grouping("spout")
    b.set_committer_bolt("sum", Record("sum", emit=False)).global_grouping("check")
    clock = FakeClock()
    conf = {"topology.max.spout.pending": 2, **{k.replace("_", "."): v for k, v in config.items()}}
    conf.update(extra or {})
    return LocalRuntime(b.build(), conf, clock=clock), clock


def tries(txid: int) -> list[float]:
    """The clock times at which ``txid``'s attempts reached the bolt."""
    return [at for t, _, at in sink("tries") if t == txid]


def gaps(times: list[float]) -> list[float]:
    return [round(b - a, 6) for a, b in itertools.pairwise(times)]


def follow(gaps: list[float], delays: list[float]) -> bool:
    """Each gap is its delay, give or take the idle sleeps of the runtime's loop
    (``topology.sleep.spout.wait.strategy.time.ms``, the fake clock's steps)."""
    return len(gaps) == len(delays) and all(
        d <= g <= d + 0.005 for g, d in zip(gaps, delays, strict=True)
    )


def test_a_poisoned_transaction_is_retried_with_backoff_then_the_run_stops(poison: Any) -> None:
    rt, _ = poisoned(statestream_retry_max_attempts=4)
    with pytest.raises(RuntimeFailure) as info:
        rt.run(until_idle=True)
    message = str(info.value)
    for part in (
        "'poisoned'",
        "transaction 2 failed 4 times in a row",
        "ValueError: poison value 4",
        "'check'",
        "cannot skip a tuple",
        "fix the bolt and run again",
        "resumes after transaction 1",
    ):
        assert part in message, (part, message)
    # Four attempts, each after the policy's delay: 100, 200, 400 ms.
    assert len(tries(2)) == 4
    assert follow(gaps(tries(2)), [0.1, 0.2, 0.4])
    # Committed: exactly the transactions before the poisoned one.
    assert txids("sum") == [1] and committed_values("sum") == {1: [3]}


def test_with_one_attempt_the_run_stops_at_the_first_failure_after_the_earlier_commits(
    poison: Any, tmp_path: Path
) -> None:
    # max.attempts 1: the runtime gives up on the batch tuple itself (and notes it
    # in the dead-letter file); the coordinator hears it as the last failure.
    rt, _ = poisoned(
        {"statestream.deadletter.path": str(tmp_path / "dead.jsonl")},
        statestream_retry_max_attempts=1,
    )
    with pytest.raises(RuntimeFailure, match="transaction 2 failed 1 time in a row"):
        rt.run(until_idle=True)
    assert len(tries(2)) == 1
    assert txids("sum") == [1]


def test_the_delays_grow_to_the_cap_with_the_policy_s_keys(poison: Any) -> None:
    rt, _ = poisoned(
        statestream_retry_max_attempts=7,
        statestream_retry_initial_ms=50,
        statestream_retry_multiplier=3,
        statestream_retry_max_ms=1000,
    )
    with pytest.raises(RuntimeFailure, match="failed 7 times in a row"):
        rt.run(until_idle=True)
    policy = RetryPolicy(50, 3, 1000, 7)
    assert follow(gaps(tries(2)), [policy.delay(n) for n in range(1, 7)])
    assert [policy.delay(n) for n in (5, 6)] == [1.0, 1.0]  # capped at max.ms


def test_max_attempts_zero_retries_forever_with_bounded_delays(poison: Any) -> None:
    rt, clock = poisoned(statestream_retry_max_attempts=0)
    result = rt.run(duration=600)  # fake seconds
    assert result.reason == "duration"
    times = tries(2)
    assert len(times) > 50  # still retrying: 10 s apart once at the cap
    policy = RetryPolicy(max_attempts=0)
    assert follow(gaps(times), [policy.delay(n) for n in range(1, len(times))])
    assert max(gaps(times)) <= 10.005
    assert clock.monotonic() - times[-1] <= 10.0 + 1.0
    assert txids("sum") == [1]


def test_a_transaction_that_fails_once_then_succeeds_commits_exactly_once(poison: Any) -> None:
    poison[0] = 1
    rt, _ = poisoned()
    result = rt.run(until_idle=True)
    assert result.reason == "idle"
    assert follow(gaps(tries(2)), [0.1])  # one retry, after the first delay
    assert txids("sum") == [1, 2, 3]
    assert committed_values("sum") == {1: [3], 2: [12], 3: [21]}


def test_the_next_run_resumes_from_the_last_committed_transaction(
    poison: Any, tmp_path: Path
) -> None:
    state = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    rt, _ = poisoned(state, statestream_retry_max_attempts=2)
    with pytest.raises(RuntimeFailure, match="transaction 2 failed 2 times"):
        rt.run(until_idle=True)
    poison[0] = 0  # the bolt was fixed
    sink("sum").clear()
    rt, _ = poisoned(state)
    assert rt.run(until_idle=True).reason == "idle"
    assert txids("sum") == [2, 3]
