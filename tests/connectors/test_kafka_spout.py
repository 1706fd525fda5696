"""What KafkaSpout does beyond the source conformance suite (test_sources.py):
its partitions over tasks (and a changed parallelism), partitions added while it
runs, what a record becomes, an undecodable record, the consumer group written
for lag tools, and the decisions (owner, merge_positions) as tables.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from test_sources import Recorder, pump

from statestream import (
    ConfigError,
    FakeClock,
    SourceError,
    TopologyBuilder,
    export_state,
    import_state,
    run,
)
from statestream._resume import SpoutRef, stored_position
from statestream.connectors import KafkaSpout
from statestream.connectors._kafka_positions import (
    Standing,
    added_partitions,
    nested_position,
    read_position,
)
from statestream.connectors.kafka import merge_positions, owner, share
from statestream.testing import committed_state, mock_context
from tests.kafka_broker import KafkaBroker, unique_topic

# -- the decisions, as tables -------------------------------------------------------


@pytest.mark.parametrize(
    ("topic_index", "partition", "tasks", "task"),
    [
        (0, 0, 1, 0),
        (0, 0, 2, 0),
        (0, 1, 2, 1),
        (1, 0, 2, 1),
        (1, 1, 2, 0),
        (0, 5, 3, 2),
        (2, 0, 3, 2),
    ],
)
def test_owner_spreads_partitions_and_topics(
    topic_index: int, partition: int, tasks: int, task: int
) -> None:
    assert owner(topic_index, partition, tasks) == task


@pytest.mark.parametrize("tasks", [1, 2, 3])
def test_a_partition_added_leaves_every_other_where_it_was(tasks: int) -> None:
    before = {"a": 2, "b": 3}
    after = {"a": 4, "b": 3}  # two partitions added to topic a
    for task in range(tasks):
        old, new = share(["a", "b"], before, task, tasks), share(["a", "b"], after, task, tasks)
        assert set(old) <= set(new)
        assert all(p in ("a/2", "a/3") for p in set(new) - set(old))
    every = [p for task in range(tasks) for p in share(["a", "b"], after, task, tasks)]
    assert sorted(every) == ["a/0", "a/1", "a/2", "a/3", "b/0", "b/1", "b/2"]


def test_merge_takes_each_partitions_furthest_offset_with_its_replays() -> None:
    old_task_0 = {"offsets": {"t": {"0": 10, "2": 7}}, "replay": [["t", 0, 4], ["t", 2, 3]]}
    old_task_1 = {"offsets": {"t": {"1": 5}}, "replay": [["t", 1, 1]], "tasks": 2}
    stale = {"offsets": {"t": {"2": 2}}, "replay": [["t", 2, 1]]}  # an older task's, superseded
    merged = merge_positions([old_task_0, old_task_1, stale], 3)
    assert merged == {
        "offsets": {"t": {"0": 10, "1": 5, "2": 7}},
        "replay": [["t", 0, 4], ["t", 2, 3], ["t", 1, 1]],
        "tasks": 3,
    }
    assert merge_positions([], 1) == {"offsets": {}, "replay": [], "tasks": 1}


# What earlier versions stored (flat, for the PartitionedSource contract): still read.
FLAT = {"partitions": {"t/0": 10, "t/2": 7, "u/1": 3}, "replay": [["t/0", 4]], "tasks": 2}
NESTED = {"offsets": {"t": {"0": 10, "2": 7}, "u": {"1": 3}}, "replay": [["t", 0, 4]], "tasks": 2}


@pytest.mark.parametrize("stored", [FLAT, NESTED], ids=["flat", "nested"])
def test_either_shape_reads_as_the_same_standing(stored: dict[str, Any]) -> None:
    assert read_position(stored) == Standing({"t/0": 10, "t/2": 7, "u/1": 3}, [("t/0", 4)], 2)
    # Stored again, any shape comes back nested by topic.
    assert nested_position({"t/0": 10, "t/2": 7, "u/1": 3}, [("t/0", 4)], 2) == NESTED
    assert merge_positions([stored], 2) == NESTED


def test_merge_takes_a_mix_of_shapes_after_an_upgrade() -> None:
    flat_task = {"partitions": {"t/0": 10, "t/1": 2}, "replay": [["t/1", 1]], "tasks": 2}
    nested_task = {"offsets": {"t": {"1": 8}}, "replay": [], "tasks": 2}
    assert merge_positions([flat_task, nested_task], 1) == {
        "offsets": {"t": {"0": 10, "1": 8}},
        "replay": [],
        "tasks": 1,
    }


@pytest.mark.parametrize(
    ("listed", "mine", "task", "tasks", "counts", "new"),
    [
        ({"a": 2, "b": 1}, ["a/0", "a/1", "b/0"], 0, 1, {"a": 2, "b": 1}, []),  # none added
        ({"a": 4, "b": 1}, ["a/0", "a/1", "b/0"], 0, 1, {"a": 4, "b": 1}, ["a/2", "a/3"]),
        # two tasks (task 0 had a/0; task 1 a/1 and b/0): a/2 goes to task 0, a/3 to 1
        ({"a": 4, "b": 1}, ["a/0"], 0, 2, {"a": 4, "b": 1}, ["a/2"]),
        ({"a": 4, "b": 1}, ["a/1", "b/0"], 1, 2, {"a": 4, "b": 1}, ["a/3"]),
        # a topic not listed now (a broker restarted), or listed with fewer: kept
        ({"a": None, "b": 3}, ["a/0", "a/1", "b/0"], 0, 1, {"a": 2, "b": 3}, ["b/1", "b/2"]),
        ({"a": 1, "b": 1}, ["a/0", "a/1", "b/0"], 0, 1, {"a": 2, "b": 1}, []),
    ],
)
def test_a_look_at_the_topics_finds_the_partitions_added(
    listed: dict[str, int | None],
    mine: list[str],
    task: int,
    tasks: int,
    counts: dict[str, int],
    new: list[str],
) -> None:
    known = {"a": 2, "b": 1}
    assert added_partitions(["a", "b"], known, listed, mine, task, tasks) == (counts, new)


class _Merging:
    def merge_positions(self, positions: list[Any]) -> Any:
        return positions


@pytest.mark.parametrize(
    ("spout", "expected"),
    [
        (object(), {"p": 1}),  # its own namespace's
        (_Merging(), [{"p": 1}, {"p": 2}]),  # every task of its component's, none else
    ],
    ids=["own", "merged"],
)
def test_stored_position_gives_a_merging_spout_its_components_positions(
    spout: object, expected: Any
) -> None:
    stored = {"lines-0": {"p": 1}, "lines-1": {"p": 2}, "other-0": {"p": 3}, "lines-x-0": {}}
    assert stored_position(stored, SpoutRef("lines-0", "lines", 0, 3, spout)) == expected
    assert stored_position(None, SpoutRef("lines-0", "lines", 0, 3, spout)) is None


# -- against the broker -------------------------------------------------------------

pytestmark_kafka = pytest.mark.kafka


def produce(broker: KafkaBroker, topic: str, records: list[tuple[int, bytes]], **kw: Any) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for partition, value in records:
        producer.produce(topic, value, partition=partition, **kw)
    assert producer.flush(30) == 0


def opened(spout: KafkaSpout, clock: FakeClock, task: int = 0, tasks: int = 1) -> Recorder:
    recorder = Recorder()
    context = mock_context("lines", task_index=task, parallelism=tasks, clock=clock)
    spout.open({}, context, recorder)  # type: ignore[arg-type]
    spout.seek(None)
    return recorder


@pytestmark_kafka
def test_json_values_and_metadata_fields(kafka_broker: KafkaBroker) -> None:
    topic = unique_topic()
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker, topic, [(1, json.dumps({"user": "u1", "n": 3}).encode())], key=b"k1")
    spout = KafkaSpout(
        topic,
        kafka_broker.bootstrap,
        ["user", "n"],
        format="json",
        metadata=["key", "partition", "offset", "timestamp", "topic"],
    )
    recorder = opened(spout, FakeClock())
    pump(spout, recorder, 1)
    spout.close()
    (values, msg_id), *_ = recorder.emitted
    user, n, key, partition, offset, timestamp, got_topic = values
    assert (user, n, key, partition, offset, got_topic) == ("u1", 3, "k1", 1, 0, topic)
    assert msg_id == (f"{topic}/1", 0)
    # The producer's timestamp, in ms (event time for with_timestamp_field).
    assert isinstance(timestamp, int) and abs(timestamp - time.time() * 1000) < 600_000


@pytestmark_kafka
def test_a_record_that_cannot_be_decoded_names_topic_partition_and_offset(
    kafka_broker: KafkaBroker,
) -> None:
    topic = unique_topic()
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker, topic, [(0, b'{"user": "a"}'), (0, b"not json")])
    spout = KafkaSpout(topic, kafka_broker.bootstrap, ["user"], format="json")
    recorder = opened(spout, FakeClock())
    with pytest.raises(SourceError) as caught:
        pump(spout, recorder, 2)
    spout.close()
    message = str(caught.value)
    assert f"offset 1 of partition 0 of topic {topic!r}" in message
    assert "\n" not in message


def test_bad_arguments_are_one_line_each() -> None:
    with pytest.raises(ConfigError, match="one field"):
        KafkaSpout("t", fields=["a", "b"])
    with pytest.raises(ConfigError, match="format 'xml'"):
        KafkaSpout("t", format="xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="metadata"):
        KafkaSpout("t", metadata=["line"])


@pytestmark_kafka
def test_partitions_added_while_it_runs_are_read(kafka_broker: KafkaBroker) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions

    topic = unique_topic()
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker, topic, [(0, b"a")])
    spout = KafkaSpout(topic, kafka_broker.bootstrap)
    clock = FakeClock()
    recorder = opened(spout, clock)
    pump(spout, recorder, 1)
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap})
    try:
        for future in admin.create_partitions([NewPartitions(topic, 3)]).values():
            future.result(timeout=10)
    except KafkaException as exc:
        spout.close()
        # The broker's lack, not the spout's (and a topic deleted and made again with
        # more partitions crashes librdkafka 2.16's metadata cache on tansu). What the
        # spout decides on a new count is table-tested above (added_partitions).
        if "CreatePartitions" not in str(exc):
            raise
        pytest.skip("tansu 0.6.0 has no CreatePartitions; added_partitions is table-tested")
    produce(kafka_broker, topic, [(1, b"b"), (2, b"c"), (0, b"d")])
    clock.advance(11)  # partitions are looked for every 10 s
    pump(spout, recorder, 4, live=True)
    assert sorted(spout.position()["offsets"][topic]) == ["0", "1", "2"]
    spout.close()
    assert sorted(recorder.lines()) == ["a", "b", "c", "d"]


LINES = [f"w{i % 7} w{i % 11} common" for i in range(1200)]


def _topology(topic: str, bootstrap: str, tasks: int, group: str | None = None) -> Any:
    from word_bolts import Count, Split

    b = TopologyBuilder(f"kafka-{topic}")
    b.set_spout("lines", KafkaSpout(topic, bootstrap, group=group), tasks)
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


@pytestmark_kafka
def test_a_changed_parallelism_keeps_every_partitions_position(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    topic = unique_topic()
    kafka_broker.create_topic(topic, 5)
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
    }
    sent = 0
    for tasks in (2, 3, 1):  # each run reads what came since, with another parallelism
        part = LINES[sent : sent + 400]
        produce(kafka_broker, topic, [(i % 5, line.encode()) for i, line in enumerate(part)])
        sent += len(part)
        topology = _topology(topic, kafka_broker.bootstrap, tasks)
        run(topology, conf, until_idle=True)
        expected = Counter(w for line in LINES[:sent] for w in line.split())
        assert committed_state(topology, conf, "count") == expected, f"{tasks} task(s)"


def _run_on(runner: str, topology: Any, conf: dict[str, Any], request: Any) -> None:
    """``topology`` run to the end of its input on ``runner`` (the tests' SparkSession)."""
    if runner == "local":
        run(topology, conf, until_idle=True)
        return
    from statestream.runtime.spark import SparkRuntime

    spark = request.getfixturevalue("spark_session")
    result = SparkRuntime(topology, conf, spark=spark).run(until_idle=True)
    assert not result.errors, result.errors


@pytestmark_kafka
@pytest.mark.parametrize("runner", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_the_group_gets_the_committed_offsets_and_is_never_read(
    kafka_broker: KafkaBroker, tmp_path: Path, runner: str, request: pytest.FixtureRequest
) -> None:
    """On Spark the driver reads no records (the executors read the ranges), so it is
    its commit that hands the spout the committed offsets (``committed``)."""
    from confluent_kafka import Consumer, TopicPartition

    topic = unique_topic()
    group = unique_topic("group")
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker, topic, [(i % 2, line.encode()) for i, line in enumerate(LINES)])
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        # Several batches on Spark: each commit moves the group on.
        "statestream.spark.batch.size": 500,
    }
    topology = _topology(topic, kafka_broker.bootstrap, 1, group=group)
    _run_on(runner, topology, conf, request)
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": group})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in (0, 1)], timeout=10)
    finally:
        consumer.close()
    assert [tp.offset for tp in committed] == [600, 600]
    # Never read back: a new store, without positions, reads the topic from its start
    # (a new file: Spark's executors may still hold the first one open).
    fresh = {**conf, "topology.state.provider.config": {"path": str(tmp_path / "fresh.db")}}
    _run_on(runner, topology, fresh, request)
    expected = Counter(w for line in LINES for w in line.split())
    assert committed_state(topology, fresh, "count") == expected


@pytestmark_kafka
def test_a_checkpoint_stored_flat_by_an_earlier_version_resumes_exactly(
    kafka_broker: KafkaBroker, tmp_path: Path
) -> None:
    """Earlier versions stored ``{"partitions": {"topic/p": offset}, "replay": [["topic/p",
    offset]], "tasks": N}``: a savepoint rewritten so (the positions a run of them left)
    and imported into a new store goes on from those offsets, reading nothing twice."""
    topic = unique_topic()
    kafka_broker.create_topic(topic, 3)
    first, rest = LINES[:500], LINES[500:]
    produce(kafka_broker, topic, [(i % 3, line.encode()) for i, line in enumerate(first)])
    topology = _topology(topic, kafka_broker.bootstrap, 2)
    ran = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "ran.db")},
    }
    run(topology, ran, until_idle=True)
    savepoint = tmp_path / "savepoint.jsonl"
    export_state(savepoint, topology, ran)
    flattened = 0
    lines = []
    for raw in savepoint.read_text().splitlines():
        item = json.loads(raw)
        if item.get("k") in ("positions", "acked"):
            for by_task in item["v"].values():
                for ns, where in by_task.items():
                    if ns.startswith("lines-"):
                        by_task[ns] = _flat(where)
                        flattened += 1
        lines.append(json.dumps(item))
    assert flattened >= 2, "the savepoint holds no KafkaSpout position to rewrite"
    savepoint.write_text("\n".join(lines) + "\n")
    resumed = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "resumed.db")},
    }
    import_state(savepoint, topology, resumed)
    produce(kafka_broker, topic, [(i % 3, line.encode()) for i, line in enumerate(rest)])
    run(topology, resumed, until_idle=True)
    expected = Counter(w for line in LINES for w in line.split())
    assert committed_state(topology, resumed, "count") == expected


def _flat(where: dict[str, Any]) -> dict[str, Any]:
    """A position of the nested shape written as earlier versions wrote it."""
    return {
        "partitions": {
            f"{t}/{p}": o for t, parts in where["offsets"].items() for p, o in parts.items()
        },
        "replay": [[f"{t}/{p}", o] for t, p, o in where["replay"]],
        "tasks": where["tasks"],
    }


@pytestmark_kafka
@pytest.mark.parametrize(
    ("where", "code", "says"),
    [
        ("unreachable", 1, "KafkaSpout 'lines' cannot reach 127.0.0.1:1: "),
        ("missing", 2, "the topic 'missing-topic' does not exist on "),
    ],
)
def test_the_cli_says_a_start_fault_in_one_line_with_its_exit_code(
    kafka_broker: KafkaBroker, where: str, code: int, says: str
) -> None:
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    bootstrap = "127.0.0.1:1" if where == "unreachable" else kafka_broker.bootstrap
    env = {**os.environ, "LINES_URL": f"kafka://{bootstrap}/missing-topic"}
    example = str(root / "examples/stream_to_postgres.py")
    argv = [sys.executable, "-m", "statestream", "run", example, "--until-idle", "--no-progress"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if not line.startswith("%")]  # librdkafka's
    assert done.returncode == code, done.stderr
    assert len(lines) == 1 and says in lines[0], lines
