"""KafkaSink's own behaviour, against a real Kafka-protocol broker (tansu 0.6.0).

What the conformance suite (test_sinks.py and friends, where Kafka is one
more sink) does not cover: how a tuple becomes a record (``key=``,
``value=``), the fence (a producer a crashed process left in a transaction
is aborted by the task's next producer, and can commit nothing after), and
the errors at start, in process and through ``statestream run`` (exit codes).
Topics are read as a ``read_committed`` consumer gets them
(kafka_committed: tansu sends no aborted-transaction list).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka_committed import Record, committed_records
from sink_cases import FIELDS, SinkCase, open_task, opened, store

from statestream import ConfigError, SinkError, Tuple
from statestream._checkpoint import Action
from statestream._stateful import apply_action
from statestream.connectors import KafkaSink
from statestream.connectors._broker import TargetUnreachable
from statestream.connectors.sink import TwoPhaseSink
from statestream.testing import make_tuple
from tests.kafka_broker import unique_topic
from tests.redis_server import free_port

pytestmark = pytest.mark.kafka

ROWS = [["a", 1], ["b", 1], ["a", 2], ["c", 1]]


class Topic(SinkCase):
    """A topic of two partitions; ``make`` builds a KafkaSink with ``options``."""

    name = "kafka"

    def __init__(self, broker: Any, **options: Any) -> None:
        self.broker = broker
        self.topic = unique_topic("ks")
        broker.create_topic(self.topic, 2)
        self.options = options
        self.sink_class: type[KafkaSink] = KafkaSink

    def make(self) -> TwoPhaseSink:
        return self.sink_class(self.topic, bootstrap=self.broker.bootstrap, **self.options)

    def records(self) -> list[Record]:
        return committed_records(self.broker.bootstrap, self.topic, 2)


def topic(broker: Any, **options: Any) -> Iterator[Topic]:
    """A :class:`Topic` for the loop's body, its sinks cleaned up after."""
    case = Topic(broker, **options)
    for _ in opened(case):
        yield case


def write_once(case: SinkCase, tmp_path: Path, rows: list[list[Any]]) -> TwoPhaseSink:
    sink, state = open_task(case, store(tmp_path))
    apply_action(sink, state, Action.INITSTATE, -1, False)
    for row in rows:
        sink.execute(make_tuple(row, FIELDS))
    apply_action(sink, state, Action.PREPARE, 0, True)
    apply_action(sink, state, Action.COMMIT, 0, True)
    return sink


def _raw(tup: Tuple) -> bytes:
    return bytes([0, 255]) + str(tup.values[1]).encode()


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        # The default: no key, the value a JSON object of the input's fields.
        ({}, [(None, {"word": w, "n": n}) for w, n in ROWS]),
        # A field as the key (its text as UTF-8), the value as by default.
        ({"key": "word"}, [(w.encode(), {"word": w, "n": n}) for w, n in ROWS]),
        # A field that is not text (as JSON) as the value; bytes from a callable, as they are.
        (
            {"key": lambda t: t.values[0].encode() + b"\xff", "value": "n"},
            [(w.encode() + b"\xff", n) for w, n in ROWS],
        ),
        # A callable for each, returning text and bytes (a NUL and a 0xFF kept).
        (
            {"key": lambda t: f"k-{t.values[0]}", "value": _raw},
            [(f"k-{w}".encode(), b"\x00\xff" + str(n).encode()) for w, n in ROWS],
        ),
        # fields= names the JSON object's keys.
        ({"fields": ["w", "count"]}, [(None, {"w": w, "count": n}) for w, n in ROWS]),
    ],
    ids=["default", "key-field", "value-field-key-bytes", "callables", "fields"],
)
def test_a_tuple_becomes_the_record_its_key_and_value_say(
    options: dict[str, Any], expected: list[Any], kafka_broker: Any, tmp_path: Path
) -> None:
    for case in topic(kafka_broker, **options):
        write_once(case, tmp_path, ROWS)
        got = []
        for r in case.records():
            value = r.value if isinstance(expected[0][1], bytes) else orjson.loads(r.value or b"")
            got.append((r.key, value))
        assert sorted(map(repr, got)) == sorted(map(repr, expected))
        if "key" in options:
            # One key, one partition, the records in the order of their tuples.
            by_key: dict[Any, list[Any]] = {}
            for r in sorted(case.records(), key=lambda r: r.offset):
                by_key.setdefault(r.key, []).append(r.partition)
            assert all(len(set(parts)) == 1 for parts in by_key.values())
            a = [r for r in case.records() if r.key == expected[0][0]]
            assert [r.offset for r in a] == sorted(r.offset for r in a)


def test_a_key_that_cannot_be_made_fails_its_own_tuple(kafka_broker: Any, tmp_path: Path) -> None:
    def key(t: Tuple) -> str:
        if t.values[0] == "bad":
            raise ValueError("no bad words")
        return str(t.values[0])

    for case in topic(kafka_broker, key=key):
        sink, state = open_task(case, store(tmp_path))
        apply_action(sink, state, Action.INITSTATE, -1, False)
        sink.execute(make_tuple(["a", 1], FIELDS))
        with pytest.raises(ValueError, match="no bad words"):
            sink.execute(make_tuple(["bad", 2], FIELDS))  # the runtime fails this tuple
        sink.execute(make_tuple(["c", 3], FIELDS))
        apply_action(sink, state, Action.PREPARE, 0, True)
        apply_action(sink, state, Action.COMMIT, 0, True)
        assert sorted(r.key for r in case.records()) == [b"a", b"c"]


def test_a_dead_process_transaction_is_aborted_by_the_next_producer_and_fenced(
    kafka_broker: Any, tmp_path: Path
) -> None:
    from confluent_kafka import KafkaError, KafkaException, Producer

    for case in topic(kafka_broker):
        sink, state = open_task(case, store(tmp_path))
        apply_action(sink, state, Action.INITSTATE, -1, False)
        for row in ROWS:
            sink.execute(make_tuple(row, FIELDS))
        apply_action(sink, state, Action.PREPARE, 0, True)
        state.commit(0)  # the state committed, then the process died in its write:
        # its producer (the task's transactional.id) holds a transaction with records.
        zombie = Producer(
            {"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": sink.transactional_id}  # type: ignore[attr-defined]
        )
        zombie.init_transactions(10)
        zombie.begin_transaction()
        for _ in ROWS:
            zombie.produce(case.topic, b'{"word": "zombie"}')
        zombie.flush(10)
        assert case.records() == []
        assert _all_records(kafka_broker.bootstrap, case.topic) == len(ROWS)  # open, in the log
        # The restart: a new task; recovery re-sends COMMIT(0).
        sink, state = open_task(case, store(tmp_path))
        apply_action(sink, state, Action.COMMIT, 0, True)
        words = sorted(orjson.loads(r.value or b"")["word"] for r in case.records())
        assert words == sorted(w for w, _ in ROWS)  # once, and none of the zombie's
        assert _all_records(kafka_broker.bootstrap, case.topic) == 2 * len(ROWS)
        # The zombie wakes up: it can commit nothing.
        with pytest.raises(KafkaException) as caught:
            zombie.produce(case.topic, b'{"word": "late"}')
            zombie.commit_transaction(10)
        assert caught.value.args[0].code() in (KafkaError.PRODUCER_FENCED, KafkaError._FENCED)
        assert len(case.records()) == len(ROWS)
        zombie.purge()


def _all_records(bootstrap: str, topic: str) -> int:
    """How many records the topic's log holds, aborted or not (control markers aside)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "count",
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
    seen, ended = 0, set()
    try:
        while len(ended) < 2:
            message = consumer.poll(10)
            assert message is not None, "the topic was not read to its end"
            if message.error():
                ended.add(message.partition())
            else:
                seen += 1
    finally:
        consumer.close()
    return seen


def test_a_missing_topic_is_a_config_error_naming_the_fix(
    kafka_broker: Any, tmp_path: Path
) -> None:
    case = Topic(kafka_broker)
    case.topic = "no-such-topic-" + case.topic
    for opened_case in opened(case):
        with pytest.raises(ConfigError) as caught:
            open_task(opened_case, store(tmp_path))
    message = str(caught.value)
    assert f"the topic {case.topic!r} does not exist on {kafka_broker.bootstrap}" in message
    assert "create it first (kafka-topics.sh --create" in message


def test_an_unreachable_broker_is_one_line_naming_it(kafka_broker: Any, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    case = Topic(kafka_broker, timeout=1.0)
    case.broker = type("Nowhere", (), {"bootstrap": f"127.0.0.1:{port}"})()
    for opened_case in opened(case):
        with pytest.raises(TargetUnreachable) as caught:
            open_task(opened_case, store(tmp_path))
    message = str(caught.value)
    assert message.startswith(f"KafkaSink 'out' task 0 cannot reach 127.0.0.1:{port}: ")
    assert message.endswith("; start the server or fix the URL")
    assert "\n" not in message


def test_a_record_too_large_stops_the_run_naming_it(kafka_broker: Any, tmp_path: Path) -> None:
    for case in topic(kafka_broker, value=lambda t: "x" * 5000, config={"message.max.bytes": 2000}):
        sink, state = open_task(case, store(tmp_path))
        apply_action(sink, state, Action.INITSTATE, -1, False)
        sink.execute(make_tuple(["a", 1], FIELDS))
        apply_action(sink, state, Action.PREPARE, 0, True)
        with pytest.raises(SinkError, match=r"a record is larger than 'ks-\w+' takes"):
            apply_action(sink, state, Action.COMMIT, 0, True)  # refused: not retried
        assert case.records() == []


def test_bad_arguments_are_refused_when_the_sink_is_made() -> None:
    with pytest.raises(ConfigError, match="give a field name or a callable"):
        KafkaSink("t", key=3)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="give the topic"):
        KafkaSink("")
    with pytest.raises(ConfigError, match="timeout=0"):
        KafkaSink("t", timeout=0)


def test_a_key_field_the_input_lacks_is_named(kafka_broker: Any, tmp_path: Path) -> None:
    for case in topic(kafka_broker, key="wrod"):
        with pytest.raises(ConfigError, match=r"no field 'wrod' in the input's fields \['word'"):
            open_task(case, store(tmp_path))


# -- statestream run: the exit codes ------------------------------------------------------

TOPOLOGY = """
from statestream import FileSpout, TopologyBuilder
from statestream.connectors import KafkaSink

def topology():
    b = TopologyBuilder("to-kafka")
    b.set_spout("lines", FileSpout({path!r}))
    b.set_bolt("out", KafkaSink({topic!r}, bootstrap={bootstrap!r}, timeout=1.0)).shuffle_grouping(
        "lines"
    )
    return b.build()
"""


def run_cli(tmp_path: Path, topic: str, bootstrap: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "in.txt").write_text("one\ntwo\n")
    flow = tmp_path / "flow.py"
    flow.write_text(
        TOPOLOGY.format(path=str(tmp_path / "in.txt"), topic=topic, bootstrap=bootstrap)
    )
    return subprocess.run(
        [sys.executable, "-m", "statestream", "run", str(flow), "--until-idle", "--no-progress",
         "--set", "topology.state.provider=sqlite",
         "--set", f"topology.state.provider.config={{path: {tmp_path / 'state.db'}}}"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_run_exits_2_on_a_missing_topic_and_1_on_a_broker_away(
    kafka_broker: Any, tmp_path: Path
) -> None:
    missing = run_cli(tmp_path, "nowhere-" + unique_topic(), kafka_broker.bootstrap)
    assert missing.returncode == 2, missing.stderr
    assert "does not exist on" in missing.stderr and "Traceback" not in missing.stderr
    away = run_cli(tmp_path, unique_topic(), f"127.0.0.1:{free_port()}")
    assert away.returncode == 1, away.stderr
    lines = [line for line in away.stderr.splitlines() if "cannot reach" in line]
    assert len(lines) == 1 and "Traceback" not in away.stderr, away.stderr
    written = unique_topic()
    kafka_broker.create_topic(written, 1)
    (tmp_path / "ok").mkdir()
    ok = run_cli(tmp_path / "ok", written, kafka_broker.bootstrap)
    assert ok.returncode == 0, ok.stderr
    values = [
        orjson.loads(r.value or b"") for r in committed_records(kafka_broker.bootstrap, written, 1)
    ]
    assert sorted(v["line"] for v in values) == ["one", "two"]
