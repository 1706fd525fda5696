"""A RabbitMQ broker that restarted answers, while a durable queue's node is still
coming back, ``404 NOT_FOUND - home node ... is down or inaccessible``: the spout
rides that out as a lost connection (bounded by the reconnect setting) instead of
reporting a missing queue on every attempt (which counted run errors after a
broker restart, seen in bench/bench_connectors_kill.py --restart-lines)."""

from __future__ import annotations

import pytest
from pika.exceptions import ChannelClosedByBroker

from statestream.connectors.rabbitmq import _recovering


@pytest.mark.parametrize(
    ("code", "text", "recovering"),
    [
        (
            404,
            "NOT_FOUND - home node 'rabbit@h' of durable queue 'lines' in vhost '/' "
            "is down or inaccessible",
            True,
        ),
        (404, "NOT_FOUND - no queue 'lines' in vhost '/'", False),  # really missing
        (406, "PRECONDITION_FAILED - inequivalent arg 'x-queue-type'", False),
    ],
)
def test_a_queue_whose_node_is_coming_back_is_a_lost_connection(
    code: int, text: str, recovering: bool
) -> None:
    assert _recovering(ChannelClosedByBroker(code, text)) is recovering
