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
