"""Stateful bolts: the checkpoint protocol as a bolt sees it.

Every test drives a real topology, on the local runtime on a
:class:`FakeClock` (checkpoint intervals and timeouts cost no sleeping), those
that take ``runner`` or ``local_runner`` on two worker processes too
(``topology.workers: 2``), and those that take ``runner`` on Spark; each checks
what the bolt's hooks saw (in :class:`~runtime_harness.Records`, which every
process appends to) and what the provider committed.
"""

from __future__ import annotations

import socket
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from runtime_harness import Items, Records, Runner, records

from statestream import (
    Bolt,
    KeyValueState,
    OutputCollector,
    OutputFieldsDeclarer,
    SerializationError,
    StatefulBolt,
    Topology,
    TopologyBuilder,
    TopologyContext,
    Tuple,
)
from statestream._checkpoint import Action, CheckpointState, Phase
from statestream._errors import ProviderUnavailableError
from statestream._exactly_once import CHECKPOINT_KEY as CHECKPOINT_STATE_KEY
from statestream._exactly_once import POSITIONS_KEY
from statestream._registry import open_provider, stored_topologies
from statestream._run import load_topology
from statestream._stateful import CHECKPOINT_SPOUT
from statestream.runtime.local import LocalRuntime
from statestream.testing import FakeClock, ListSpout

ROOT = Path(__file__).resolve().parents[2]
EVENTS = "stateful-events"


class RecordingCounter(StatefulBolt):
    """Counts its input values in its KeyValueState and records every call in ``sink(EVENTS)``.

    ``fail_prepare_once``: the first ``pre_prepare`` raises (the checkpoint fails).
    ``bad_value``: the first time this value arrives, ``put`` a Python set (unencodable).
    """

    def __init__(self, fail_prepare_once: bool = False, bad_value: str | None = None) -> None:
        self.fail_prepare_once = fail_prepare_once
        self.bad_value = bad_value
        self.events = Records(EVENTS)

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.task = context.task_index
        self.prepare_failed = False
        self.bad_tried = False
        self.events.append(("prepare", self.task))

    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        self.events.append(("init_state", self.task, dict(state.items())))

    def execute(self, tuple: Tuple) -> None:
        value = tuple.values[0]
        self.events.append(("execute", self.task, value))
        if value == self.bad_value and not self.bad_tried:
            self.bad_tried = True
            self.state.put(value, {1, 2})
        self.state.put(value, self.state.get(value, 0) + 1)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        self.events.append(("pre_prepare", self.task, txid))
        if self.fail_prepare_once and not self.prepare_failed:
            self.prepare_failed = True
            raise RuntimeError(f"prepare of txid {txid} fails once")

    def pre_commit(self, txid: int) -> None:
        self.events.append(("pre_commit", self.task, txid))

    def pre_rollback(self) -> None:
        self.events.append(("pre_rollback", self.task))


class Forward(Bolt):
    """Passes each value on, anchored."""

    def execute(self, tuple: Tuple) -> None:
        self.collector.emit([tuple.values[0]], tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])


class TellingSpout(ListSpout):
    """A ListSpout that appends ("ack" | "fail", msg_id) to ``Records(log)``."""

    def __init__(self, items: list[Any], log: str = "spout") -> None:
        super().__init__(items)
        self.log = log

    def ack(self, msg_id: Any) -> None:
        Records(self.log).append(("ack", msg_id))
        super().ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        Records(self.log).append(("fail", msg_id))
        super().fail(msg_id)


def told(kind: str, log: str = "spout") -> list[Any]:
    """The message ids the TellingSpout was told of (``kind``: "ack" or "fail")."""
    return [e[1] for e in records(log) if e[0] == kind]


def events(kind: str | None = None) -> list[tuple[Any, ...]]:
    evs = Records(EVENTS).read()
    return list(evs) if kind is None else [e for e in evs if e[0] == kind]


def hooks() -> list[tuple[Any, ...]]:
    """Every recorded call except execute (the checkpoint sequence)."""
    return [e for e in Records(EVENTS).read() if e[0] != "execute"]


def counter_topology(
    items: list[Any],
    bolt: StatefulBolt | None = None,
    *,
    rewind: bool = False,
    telling: str | None = None,
    **kw: Any,
) -> Topology:
    """``rewind``: a spout that can rewind (exactly-once state; Spark needs it).
    ``telling``: a :class:`TellingSpout` appending to ``Records(telling)``."""
    builder = TopologyBuilder("stateful")
    if telling is not None:
        builder.set_spout("spout", TellingSpout(items, telling))
    else:
        builder.set_spout("spout", (Items if rewind else ListSpout)(items))
    builder.set_bolt("count", bolt or RecordingCounter(**kw)).fields_grouping("spout", ["value"])
    return builder.build()


def memory_config(**extra: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "memory",
        "topology.state.provider.config": {"name": str(uuid.uuid4())},
        **extra,
    }


def sqlite_config(path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(path)},
        **extra,
    }


def committed(config: Mapping[str, Any], namespace: str = "count-0") -> dict[Any, Any]:
    """The committed entries of ``namespace`` of the one topology the store holds."""
    with open_provider(
        config["topology.state.provider"], config["topology.state.provider.config"]
    ) as provider:
        (topology,) = stored_topologies(provider.namespaces())
        return dict(provider.get_state(f"{topology}/{namespace}").items())


def spout_of(rt: LocalRuntime, component: str = "spout") -> ListSpout:
    return rt.tasks_of[component][0].spout  # type: ignore[attr-defined, no-any-return]


WORDS = ["a", "b", "a", "c", "b", "a", "d", "a"]

# On Spark (documented in docs/guides/spark.md): the driver keeps one
# instance per stateful task for the hooks around a job (prepared once per run:
# pre_rollback, pre_commit, init_state at recovery and before cleanup), and each
# batch runs on a fresh executing instance, prepared and given the committed
# state, which executes and calls pre_prepare.
SPARK_DRIVER_START = [("prepare", 0)]


def spark_batch(state: dict[str, Any]) -> list[tuple[Any, ...]]:
    """The hooks an executing instance sees before its pre_prepare on Spark."""
    return [("prepare", 0), ("init_state", 0, state)]


# -- 1. hook order and the state init_state sees --------------------------------------


def test_init_state_comes_after_prepare_before_execute_with_the_last_committed_state(
    local_runner: Runner, tmp_path: Path
) -> None:
    # Not on Spark: there prepare/init_state run once per batch attempt (documented
    # lifecycle), so this exact sequence is the local runtime's (on two workers too).
    config = local_runner.config(sqlite_config(tmp_path / "state.db"))
    result = local_runner.run(counter_topology(WORDS), config)
    assert result.reason == "idle" and result.errors == []
    first = events()
    kinds = [e[0] for e in first]
    assert kinds[0] == "prepare"
    assert kinds[1] == "init_state"
    assert first[1] == ("init_state", 0, {})
    assert kinds.index("execute") > kinds.index("init_state")
    assert [e[2] for e in events("execute")] == WORDS
    # A fresh start: INITSTATE(-1) (init_state), then PREPARE 0, COMMIT 0, PREPARE 1, ...
    seq = hooks()[1:]
    assert seq[0][0] == "init_state"
    cycles = seq[1:]
    assert cycles, "no checkpoint reached the bolt"
    assert len(cycles) % 2 == 0
    for i in range(0, len(cycles), 2):
        txid = i // 2
        assert cycles[i] == ("pre_prepare", 0, txid)
        assert cycles[i + 1] == ("pre_commit", 0, txid)
    first_counts = dict(Counter(WORDS))
    assert committed(config) == first_counts

    # A second run over the same file: init_state sees the first run's counts.
    Records(EVENTS).clear()
    more = ["a", "e"]
    assert local_runner.run(counter_topology(more), config).errors == []
    second = hooks()
    assert second[0] == ("prepare", 0)
    assert second[1] == ("init_state", 0, first_counts)
    last_txid = len(cycles) // 2 - 1
    # The checkpoint txids continue where the first run stopped.
    assert second[2] == ("pre_prepare", 0, last_txid + 1)
    assert committed(config) == dict(Counter(WORDS + more))


# -- 2. acks are held until the commit ---------------------------------------------


def test_acks_reach_the_spout_only_after_the_commit() -> None:
    # Local-only: steps the local loop by hand on a FakeClock.
    clock = FakeClock()
    items = [f"w{i % 3}" for i in range(10)]
    rt = LocalRuntime(counter_topology(items), memory_config(), clock=clock)
    rt.open()
    spout = spout_of(rt)
    for _ in range(20):  # no time passes: INITSTATE, then every item is executed
        rt.step()
    assert len(events("execute")) == len(items)
    assert spout.acked == []
    clock.advance(1.5)  # past topology.state.checkpoint.interval.ms
    saw_commit = False
    for _ in range(50):
        rt.step()
        if events("pre_commit"):
            saw_commit = True
        else:
            assert spout.acked == [], "an ack reached the spout before the commit"
        if sorted(spout.acked) == list(range(len(items))):
            break
    assert saw_commit
    assert sorted(spout.acked) == list(range(len(items)))
    assert spout.failed == []
    rt.close()


def test_acks_handed_to_the_protocol_still_ask_for_a_checkpoint_when_nothing_moves() -> None:
    # Acks of data a stateful task executed between a PREPARE and its COMMIT
    # reach its protocol with the COMMIT (StatefulBoltExecutor.handle_checkpoint),
    # not the task's own list. When nothing moves after that (a finite input's
    # last lines, spouts at max pending), they too must ask for the next
    # checkpoint at once: a 2-worker word count waited out the interval there.
    clock = FakeClock()
    rt = LocalRuntime(counter_topology(["a"]), memory_config(), clock=clock)
    rt.open()
    (count,) = (b for b in rt.bolts if b.component == "count")
    cp = rt.checkpoint_spout
    assert cp is not None
    assert not count.awaits_checkpoint() and not rt._waiting_for_commit()
    count.executor.protocol.hold([(12345, 678)])  # type: ignore[attr-defined]
    assert count.held == [] and not count.last_root
    assert count.awaits_checkpoint()
    assert rt._waiting_for_commit() and cp._early  # checkpoint at the next poll
    # covered by a PREPARE: they wait for that checkpoint, already under way
    count.executor.protocol.held.prepare(7)  # type: ignore[attr-defined]
    assert not count.awaits_checkpoint()
    rt.close()


def test_acks_held_for_the_commit_reach_a_spout_in_another_worker_after_it(
    local_runner: Runner,
) -> None:
    # The run-until-idle view of the test above. On two workers the spout is in
    # worker 0 and the counter in worker 1: the held acks cross after the commit.
    # The spout's acks go to the same Records as the bolt's hooks, in the order
    # they happened.
    items = [f"w{i % 3}" for i in range(10)]
    result = local_runner.run(counter_topology(items, telling=EVENTS), local_runner.config())
    assert result.reason == "idle" and result.errors == []
    seen = Records(EVENTS).read()
    executed_at = {}
    for at, e in enumerate(seen):
        if e[0] == "execute":
            executed_at.setdefault(len(executed_at), at)
    acks = [(at, e[1]) for at, e in enumerate(seen) if e[0] == "ack"]
    assert sorted(i for _, i in acks) == list(range(len(items)))
    commits = [at for at, e in enumerate(seen) if e[0] == "pre_commit"]
    for at, msg_id in acks:
        # A commit came between the tuple's execute and its ack.
        assert any(executed_at[msg_id] < c < at for c in commits), (msg_id, seen)
    assert [e for e in seen if e[0] == "fail"] == []


# -- 3. Storm's recovery sequences with a stored phase ---------------------------------


def _store_phase(config: Mapping[str, Any], stored: CheckpointState, bolt_prepared: int) -> None:
    """Leave the store as a crash of an exactly-once run would: the spout's phase
    (with the data spout's positions: the start of the list, which is new input),
    the bolt's state with ``y`` committed at ``bolt_prepared - 1`` and ``x``
    prepared at ``bolt_prepared``."""
    start = {"spout-0": {"next": 0, "replay": []}}
    with open_provider(
        config["topology.state.provider"],
        config["topology.state.provider.config"],
        scope="stateful",
    ) as provider:
        spout_state = provider.get_state(f"{CHECKPOINT_SPOUT}-0")
        spout_state.put(CHECKPOINT_STATE_KEY, stored.to_json())
        spout_state.put(POSITIONS_KEY, {str(stored.txid - 1): start, str(stored.txid): start})
        spout_state.commit()
        bolt_state = provider.get_state("count-0")
        bolt_state.put("y", 1)
        bolt_state.prepare_commit(bolt_prepared - 1)
        bolt_state.commit(bolt_prepared - 1)
        bolt_state.put("x", 5)
        bolt_state.prepare_commit(bolt_prepared)


def test_stored_preparing_recovers_with_rollback_initstate_then_prepare(runner: Runner) -> None:
    config = runner.config()
    _store_phase(config, CheckpointState(100, Phase.PREPARING), 100)
    result = runner.run(counter_topology(["a", "b"], rewind=True), config)
    assert result.errors == []
    # pre_rollback; the prepared x was rolled back, the committed y is there;
    # then txid 100 again.
    if runner.local or runner.workers:
        assert hooks()[:5] == [
            ("prepare", 0),
            ("pre_rollback", 0),
            ("init_state", 0, {"y": 1}),
            ("pre_prepare", 0, 100),
            ("pre_commit", 0, 100),
        ]
    else:
        assert hooks() == [
            *SPARK_DRIVER_START,
            ("pre_rollback", 0),
            ("init_state", 0, {"y": 1}),
            *spark_batch({"y": 1}),
            ("pre_prepare", 0, 100),
            ("pre_commit", 0, 100),
            ("init_state", 0, {"y": 1, "a": 1, "b": 1}),  # for cleanup
        ]
    assert committed(config) == {"y": 1, "a": 1, "b": 1}


def test_stored_committing_finishes_the_commit_first(runner: Runner) -> None:
    config = runner.config()
    _store_phase(config, CheckpointState(100, Phase.COMMITTING), 100)
    result = runner.run(counter_topology(["a"], rewind=True), config)
    assert result.errors == []
    # The decided commit was finished: x is committed and init_state sees it.
    if runner.local or runner.workers:
        assert hooks()[:4] == [
            ("prepare", 0),
            ("pre_commit", 0, 100),
            ("init_state", 0, {"y": 1, "x": 5}),
            ("pre_prepare", 0, 101),
        ]
    else:
        assert hooks() == [
            *SPARK_DRIVER_START,
            ("pre_commit", 0, 100),
            ("init_state", 0, {"y": 1, "x": 5}),
            *spark_batch({"y": 1, "x": 5}),
            ("pre_prepare", 0, 101),
            ("pre_commit", 0, 101),
            ("init_state", 0, {"y": 1, "x": 5, "a": 1}),  # for cleanup
        ]
    assert committed(config) == {"y": 1, "x": 5, "a": 1}


def test_bolts_added_or_re_added_while_the_topology_moved_on_join_it(runner: Runner) -> None:
    # A crash left COMMITTING(100). Since then the topology gained "late"
    # (no state at all) and got "old" back, whose state stopped at txid 3.
    # Neither prepared txid 100; both must join instead of failing every
    # checkpoint from now on.
    config = runner.config()
    _store_phase(config, CheckpointState(100, Phase.COMMITTING), 100)
    with open_provider(
        "sqlite", config["topology.state.provider.config"], scope="stateful"
    ) as provider:
        old = provider.get_state("old-0")
        old.put("a", 10)
        old.prepare_commit(3)
        old.commit(3)
    builder = TopologyBuilder("stateful")
    builder.set_spout("spout", Items(["a", "b"]))
    for name in ("count", "late", "old"):
        builder.set_bolt(name, RecordingCounter()).fields_grouping("spout", ["value"])
    result = runner.run(builder.build(), config)
    assert result.reason == "idle"
    assert result.errors == []
    assert committed(config) == {"y": 1, "x": 5, "a": 1, "b": 1}
    assert committed(config, "late-0") == {"a": 1, "b": 1}
    assert committed(config, "old-0") == {"a": 11, "b": 1}
    with open_provider(
        "sqlite", config["topology.state.provider.config"], scope="stateful"
    ) as provider:
        txids = {n: provider.get_state(f"{n}-0").committed_txid for n in ("count", "late", "old")}
    assert len(set(txids.values())) == 1 and txids["count"] > 100


# -- 4. a failed PREPARE ------------------------------------------------------------


def test_a_failed_prepare_rolls_back_fails_the_held_tuples_and_loses_nothing(
    local_runner: Runner,
) -> None:
    # Not on Spark: checks at-least-once held acks failing back to a ListSpout.
    items = [f"w{i % 4}" for i in range(40)]
    config = local_runner.config()
    topology = counter_topology(items, fail_prepare_once=True, telling="spout")
    result = local_runner.run(topology, config)
    seq = [e[:2] for e in hooks()]
    assert seq[:5] == [
        ("prepare", 0),
        ("init_state", 0),
        ("pre_prepare", 0),  # raises
        ("pre_rollback", 0),
        ("init_state", 0),
    ]
    assert hooks()[2] == ("pre_prepare", 0, 0)
    assert hooks()[4] == ("init_state", 0, {})  # nothing had been committed
    # The prepare was retried at the same txid and went through.
    assert hooks()[5] == ("pre_prepare", 0, 0)
    assert hooks()[6] == ("pre_commit", 0, 0)
    assert [e.component for e in result.errors] == ["count"]
    assert "fails once" in result.errors[0].error
    # Every tuple executed before the failed prepare had its ack held: all failed, all replayed.
    assert sorted(told("fail")) == list(range(len(items)))
    assert result.counters["timed_out"] == 0, "failed by a timeout, not by the rollback"
    assert sorted(told("ack")) == list(range(len(items)))
    assert len(events("execute")) == 2 * len(items)
    assert committed(config) == dict(Counter(items))


# -- 5. the barrier -------------------------------------------------------------


def test_a_checkpoint_is_acted_on_once_every_upstream_task_delivered_it() -> None:
    # Local-only: checkpoint barriers exist only in the local runtime.
    items = [f"w{i % 5}" for i in range(200)]
    builder = TopologyBuilder("barrier")
    builder.set_spout("spout", ListSpout(items))
    builder.set_bolt("forward", Forward(), 2).shuffle_grouping("spout")
    builder.set_bolt("count", RecordingCounter()).global_grouping("forward")
    config = memory_config(**{"topology.max.spout.pending": 16})
    clock = FakeClock()
    rt = LocalRuntime(builder.build(), config, clock=clock)
    rt.open()
    barrier = rt.tasks_of["count"][0].executor.barrier  # type: ignore[attr-defined]
    assert barrier is not None and len(barrier.upstream) == 2
    for _ in range(5000):
        busy = rt.step()
        clock.advance(0.05)
        if not busy and rt.idle():
            break
    assert rt.idle()
    rt.close()
    coordinator = rt.checkpoint_spout.coordinator  # type: ignore[union-attr]
    assert coordinator.state.phase is Phase.COMMITTED
    last = coordinator.state.txid
    assert last >= 3, "too few checkpoints to say anything"
    prepares = [e[2] for e in events("pre_prepare")]
    commits = [e[2] for e in events("pre_commit")]
    # Once per round, not once per upstream task.
    assert prepares == list(range(last + 1))
    assert commits == list(range(last + 1))
    assert len(events("init_state")) == 1
    assert list(rt.errors) == []
    assert committed(config) == dict(Counter(items))


def test_a_checkpoint_from_upstream_tasks_in_two_workers_is_acted_on_once(
    local_runner: Runner,
) -> None:
    # The run-until-idle view of the test above: on two workers the two forward
    # tasks (tasks 1 and 2) are in different workers, the counter in worker 1.
    items = [f"w{i % 5}" for i in range(200)]
    builder = TopologyBuilder("barrier")
    builder.set_spout("spout", ListSpout(items))
    builder.set_bolt("forward", Forward(), 2).shuffle_grouping("spout")
    builder.set_bolt("count", RecordingCounter()).global_grouping("forward")
    config = local_runner.config({"topology.max.spout.pending": 16})
    result = local_runner.run(builder.build(), config)
    assert result.reason == "idle" and result.errors == []
    prepares = [e[2] for e in events("pre_prepare")]
    commits = [e[2] for e in events("pre_commit")]
    assert len(commits) >= 3, "too few checkpoints to say anything"
    # Once per round, not once per upstream task.
    assert prepares == commits == list(range(len(commits)))
    assert len(events("init_state")) == 1
    assert committed(config) == dict(Counter(items))


# -- 6. the word count on sqlite with failures ----------------------------------------


def test_wordcount_on_sqlite_with_failures_counts_exactly(
    local_runner: Runner, tmp_path: Path
) -> None:
    # Not on Spark: checks per-line failures reaching the spout.
    out = tmp_path / "counts.jsonl"
    config = local_runner.config(
        sqlite_config(
            tmp_path / "state.db",
            **{"wordcount.output": str(out), "wordcount.fail_rate": 0.1},
        )
    )
    topology = load_topology(str(ROOT / "examples" / "wordcount.py"))
    result = local_runner.run(topology, config)
    assert result.reason == "idle"
    assert result.errors == []
    assert result.components["split"].failed > 0, "fail_rate=0.1 failed nothing"
    # Exactly-once: retried where it failed, so the spout never replays a line.
    assert result.components["sentences"].failed == 0
    expected = Counter((ROOT / "examples" / "corpus.txt").read_text(encoding="utf-8").split())
    got: Counter[str] = Counter()
    for line in out.read_bytes().splitlines():
        row = orjson.loads(line)
        assert row["word"] not in got
        got[row["word"]] = row["count"]
    assert got == expected
    state = {}
    for task in (0, 1):
        state.update(committed(config, f"count-{task}"))
    assert state == dict(expected)


# -- 7. a value the serializer cannot encode ----------------------------------------


def test_an_unencodable_value_is_a_serialization_error_that_stops_the_run(
    local_runner: Runner,
) -> None:
    # A bug no retry fixes (issue 30): the run stops at once with the error
    # whole, instead of retrying and dead-lettering message after message.
    # Every runtime, and the error-rate limit: tests/runtime/test_failing_bolts.py.
    items = ["a", "bad", "b", "a"]
    config = local_runner.config()
    with pytest.raises(SerializationError) as stopped:
        local_runner.run(counter_topology(items, bad_value="bad"), config)
    message = str(stopped.value)
    assert "'bad'" in message and "set" in message
    assert "bad" not in committed(config)


# -- 8. Redis lost mid-run --------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int, data_dir: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(data_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}")
        time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"redis-server did not answer on port {port}")


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[int, Path, list[subprocess.Popen[bytes]]]]:
    port = free_port()
    data_dir = tmp_path / "redis"
    data_dir.mkdir()
    procs = [start_redis(port, data_dir)]
    yield port, data_dir, procs
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.wait(5)


@pytest.mark.redis
def test_redis_lost_mid_run_waits_then_resumes_and_loses_nothing(
    own_redis: tuple[int, Path, list[subprocess.Popen[bytes]]],
) -> None:
    # Local-only: steps the local loop by hand while Redis is down.
    port, data_dir, procs = own_redis
    items = [f"w{i % 6}" for i in range(300)]
    config = {
        "topology.state.provider": "redis",
        "topology.state.provider.config": {
            "host": "127.0.0.1",
            "port": port,
            "retries": 1,
            "timeout": 300,
            "key_prefix": f"test-{uuid.uuid4().hex}:",
        },
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": 10,
        "topology.message.timeout.secs": 300,
    }
    clock = FakeClock()
    rt = LocalRuntime(counter_topology(items), config, clock=clock)
    rt.open()
    coordinator = rt.checkpoint_spout.coordinator  # type: ignore[union-attr]
    bolt_task = rt.tasks_of["count"][0]

    # Run until a few checkpoints committed and a PREPARE is on its way to the bolt.
    for _ in range(2000):
        rt.step()
        clock.advance(0.02)
        pending = coordinator.pending
        if coordinator.state.txid >= 3 and pending is not None and pending.action is Action.PREPARE:
            break
    else:
        pytest.fail(f"no 3 checkpoints committed: {coordinator!r}")
    assert list(rt.errors) == []
    before = committed(config)
    txid_before = coordinator.state.txid
    assert sum(before.values()) > 0
    executed_before = bolt_task.executed
    assert executed_before < len(items)

    procs[0].terminate()
    procs[0].wait(5)

    # Redis is gone: the prepare fails, the bolt rolls back, processing waits.
    rollbacks = len(events("pre_rollback"))
    for _ in range(15):
        rt.step()
        clock.advance(0.02)
    assert len(events("pre_rollback")) > rollbacks
    assert rt.errors, "the lost Redis was not reported"
    assert any("127.0.0.1" in e.error and str(port) in e.error for e in rt.errors)
    plateau = bolt_task.executed
    for _ in range(15):
        rt.step()
        clock.advance(0.02)
    assert bolt_task.executed == plateau, "tuples kept executing while Redis was down"
    assert coordinator.state.txid == txid_before  # nothing was committed while it was down

    procs.append(start_redis(port, data_dir))
    # What was committed before the outage survived it (append-only file).
    assert committed(config) == before

    for _ in range(5000):
        busy = rt.step()
        clock.advance(0.02)
        if not busy and rt.idle():
            break
    assert rt.idle()
    rt.close()
    final = committed(config)
    assert final == dict(Counter(items))
    assert all(final[k] >= v for k, v in before.items())
    assert coordinator.state.txid > txid_before


# -- 9. Redis unreachable at start ------------------------------------------------


def test_redis_unreachable_at_start_is_a_clear_error_after_bounded_retries(
    local_runner: Runner,
) -> None:
    # Not on Spark: provider errors at start; the Spark driver opens the same provider.
    port = free_port()
    config = {
        "topology.state.provider": "redis",
        "topology.state.provider.config": {
            "host": "127.0.0.1",
            "port": port,
            "retries": 2,
            "timeout": 200,
        },
    }
    rt = local_runner.runtime(counter_topology(["a"]), config)
    # The bound is in the config (2 retries of at most 200 ms), and the error says so.
    with pytest.raises(
        ProviderUnavailableError, match=rf"127\.0\.0\.1:{port}.*\(2 retries, timeout 0\.2s\)"
    ):
        rt.run(until_idle=True)
