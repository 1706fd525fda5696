"""The tests' tansu broker answers as Kafka does for what the connectors use:
a topic with partitions, a produce to one partition, an ``assign`` at an offset."""

from __future__ import annotations

import pytest

from tests.kafka_broker import KafkaBroker, unique_topic

pytestmark = pytest.mark.kafka


def test_produce_then_read_by_assign(kafka_broker: KafkaBroker) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = unique_topic()
    kafka_broker.create_topic(topic, 2)
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap})
    producer.produce(topic, value=b"x", partition=1)
    assert producer.flush(10) == 0
    consumer = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": "unused"})
    try:
        consumer.assign([TopicPartition(topic, 1, 0)])
        message = None
        for _ in range(40):
            message = consumer.poll(0.25)
            if message is not None:
                break
    finally:
        consumer.close()
    assert message is not None and message.error() is None
    assert (message.partition(), message.offset(), message.value()) == (1, 0, b"x")


def test_tansu_withholds_a_committed_transactions_offsets_while_another_is_open(
    kafka_broker: KafkaBroker,
) -> None:
    """Where tansu 0.6.0 differs from Kafka, and why the sink kill tests run one sink task.

    Kafka's EndTxn commits a transaction's consumer-group offsets with its markers. tansu
    0.6.0 writes the markers but keeps the offsets back while any other producer's
    transaction on the same partitions is still open (dynostore's ``txn_end``: the
    "overlapping transactions" must all be prepared), and a re-initialised producer of
    the committed id does not release them: only the open one's end does. A KafkaSink
    task reads its guard from such an offset, so two sink tasks on the same partitions,
    killed while one of them had a transaction open, let the other read a guard one
    checkpoint old and write that checkpoint again. This test fails once tansu behaves
    as Kafka: then the sink kill tests can go back to several sink tasks.
    """
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = unique_topic()
    kafka_broker.create_topic(topic, 1)

    def producer(tid: str) -> Producer:
        made = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": tid})
        made.init_transactions(10)
        return made

    def committed() -> int:
        reader = Consumer({
            "bootstrap.servers": kafka_broker.bootstrap, "group.id": f"{topic}-g",
            "enable.auto.commit": False, "isolation.level": "read_committed",
        })  # fmt: skip
        try:
            return int(reader.committed([TopicPartition(topic, 0)], 10)[0].offset)
        finally:
            reader.close()

    group = Consumer({"bootstrap.servers": kafka_broker.bootstrap, "group.id": f"{topic}-g"})
    a, b = producer(f"{topic}-a"), producer(f"{topic}-b")
    b.begin_transaction()
    b.produce(topic, b"from b")
    assert b.flush(10) == 0
    a.begin_transaction()
    a.produce(topic, b"from a")
    assert a.flush(10) == 0
    a.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 5)], group.consumer_group_metadata(), 10
    )
    a.commit_transaction(10)
    group.close()
    held_back = committed()
    producer(f"{topic}-a")  # a's next producer, as a restarted sink task opens it
    still_held = committed()
    producer(f"{topic}-b")  # fences b, aborting its open transaction
    assert (held_back, still_held, committed()) == (-1001, -1001, 5)
