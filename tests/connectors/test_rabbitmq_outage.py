"""RabbitMQ lost mid-run, without a second node: the broker closes the spout's
connections while a real run goes on, and the spout rides it out.

RabbitMQSpout -> split -> count, each line one word of its own (``l<i>``), so
a line's count is how often it was counted. While the run goes on, the test
closes the spout's connections from the server side (``rabbitmqctl
close_connection`` on the connections whose client-provided
``connection_name`` is one of this topology's tasks: never another
connection of the shared server), twice, at points set by lines executed.
The spout reconnects within ``statestream.connectors.reconnect.secs``:

* a stream queue (rewindable by offset, exactly-once): every line counted
  exactly once;
* a classic queue (acked on the broker only once the covering checkpoint
  committed, at-least-once): every line counted at least once; what a cut
  redelivered after its checkpoint committed is counted twice, and how many
  is reported (``duplicates`` in the test's properties and output).

The run reports no error and never rewinds. The clock is a fake one moving
at each reading (StepClock), so the checkpoints fall at the same points
however loaded the machine.
"""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sink_outage import CUTTERS, Cutter
from test_sources import RabbitClassicSource, RabbitSource
from word_bolts import Count, Split

from statestream import BasicOutputCollector, Topology, TopologyBuilder, Tuple, run
from statestream.connectors import RabbitMQSpout
from statestream.testing import StepClock, committed_state, mock_context

pytestmark = pytest.mark.redis  # needs the real servers (RabbitMQ here)

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
LINES = [f"l{i}" for i in range(1000)]


# The node closes the connections whose client-provided connection_name starts
# with PREFIX and answers how many: one rabbitmqctl call (each starts a VM, ~1 s)
# instead of list_connections then close_connection per connection.
_CLOSE = """
Prefix = <<"PREFIX">>,
Mine = [P || P <- rabbit_networking:connections(),
    case catch rabbit_networking:connection_info(P, [client_properties]) of
        [{client_properties, Props}] ->
            case lists:keyfind(<<"connection_name">>, 1, Props) of
                {_, longstr, Name} ->
                    binary:longest_common_prefix([Name, Prefix]) =:= byte_size(Prefix);
                _ -> false
            end;
        _ -> false
    end],
[rabbit_networking:close_connection(P, "statestream test: connection cut") || P <- Mine],
length(Mine).
"""


def close_connections(topology: str) -> int:
    """Close, from the broker, the connections named as the topology's tasks (the
    spout's ``connection_name``); how many."""
    assert re.fullmatch(r"[a-z0-9-]+", topology)  # spliced into the Erlang text
    closed = subprocess.run(
        ["rabbitmqctl", "eval", _CLOSE.replace("PREFIX", f"statestream/{topology}/")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return int(closed.stdout.strip())


class CuttingSplit(Split):
    """Split, telling the topology's :class:`Cutter` of each line executed."""

    def __init__(self, topology: str) -> None:
        self.topology = topology

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:
        super().execute(tuple, collector)
        CUTTERS[self.topology].tick()


def lines_counted(name: str, queue: str, kind: str) -> Topology:
    b = TopologyBuilder(name)
    # Small reads, so that a cut meets the spout mid-queue, not behind its buffer.
    b.set_spout("lines", RabbitMQSpout(queue, URL, kind=kind, count=50))  # type: ignore[arg-type]
    b.set_bolt("split", CuttingSplit(name)).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    return b.build()


@pytest.fixture(params=["stream", "classic"])
def queue(request: pytest.FixtureRequest) -> Iterator[RabbitSource]:
    made = RabbitSource() if request.param == "stream" else RabbitClassicSource()
    made.produce(LINES)
    if request.param == "stream":
        made.settle(len(LINES))
    yield made
    made.drop()


def test_the_spout_rides_out_its_connections_closed_by_the_broker(
    queue: RabbitSource, tmp_path: Path, record_property: Callable[[str, Any], None]
) -> None:
    name = f"rmqout-{uuid.uuid4().hex[:8]}"
    CUTTERS[name] = cutter = Cutter(lambda: close_connections(name), times=2, first=200, every=300)
    topology = lines_counted(name, queue.name, queue.queue_kind)
    config = {
        "topology.state.checkpoint.interval.ms": 50,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "statestream.connectors.reconnect.secs": 30.0,
    }
    try:
        result = run(topology, config, until_idle=True, clock=StepClock(0.01))
    finally:
        del CUTTERS[name]
    assert len(cutter.cuts) == 2, f"the run ended after {cutter.ticks} lines, {cutter.cuts} cut"
    assert result.reason == "idle"
    assert result.errors == []
    assert result.counters.get("rewinds", 0) == 0
    counted = Counter(committed_state(topology, config, "count"))
    assert set(counted) == set(LINES)  # every line counted at least once
    duplicates = sum(n - 1 for n in counted.values())
    record_property("duplicates", duplicates)
    print(f"{queue.queue_kind} queue: {len(LINES)} lines, {duplicates} counted twice or more")
    if queue.queue_kind == "stream":
        assert duplicates == 0  # exactly-once: the offset is in the checkpoint


class Held:
    """A spout's collector that keeps what was emitted, unacked."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, Any]] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append((values[0], msg_id))


@pytest.fixture
def classic() -> Iterator[RabbitSource]:
    made = RabbitClassicSource()
    yield made
    made.drop()


@pytest.fixture
def stream() -> Iterator[RabbitSource]:
    made = RabbitSource()
    yield made
    made.drop()


def test_an_ack_from_before_the_cut_never_acks_a_delivery_after_it(classic: RabbitSource) -> None:
    """The runtime acks a message long after it was emitted (once the checkpoint
    covering it committed): an ack of a delivery of the cut connection must not
    ack on the broker the delivery that has its tag on the new connection (tags
    start again at 1), which no checkpoint covers yet: at-least-once would lose it.
    And acks waiting to be sent when the connection is cut are dropped (the broker
    redelivers those messages), not raised as the run's error: pika learns of the
    cut only at the first frame it sends, here one of those acks."""
    source = classic
    name = f"rmqout-{uuid.uuid4().hex[:8]}"
    spout = RabbitMQSpout(source.name, URL, kind="classic", count=10)
    out = Held()
    try:
        source.produce(LINES[:100])
        conf = {"statestream.connectors.reconnect.secs": 30.0}
        spout.open(conf, mock_context("lines", topology=name, clock=StepClock(0.01)), out)  # type: ignore[arg-type]
        while len(out.emitted) < 10:
            spout.next_tuple()
        before = out.emitted[:10]
        for _, msg_id in before[:5]:  # acked, to be sent to the broker at the next call
            spout.ack(msg_id)
        assert close_connections(name) == 1
        while len(out.emitted) < 20:
            spout.next_tuple()
        for _, msg_id in before[5:]:  # their checkpoint committed: the runtime acks them now
            spout.ack(msg_id)
        spout.next_tuple()  # the acks go to the broker
    finally:
        spout.close()  # what it holds unacked goes back to the queue
    # None of the 10 emitted before the cut was acked on the broker, and no
    # delivery after the cut was: the queue holds all 100 again.
    assert ready(source, 100) == 100


def ready(source: RabbitSource, expected: int) -> int:
    """The queue's ready messages once they are ``expected`` (what a closed
    connection held comes back asynchronously), or after 10 s, what they are."""
    deadline = time.monotonic() + 10
    while True:
        count = int(source.channel.queue_declare(source.name, passive=True).method.message_count)
        if count == expected or time.monotonic() > deadline:
            return count
        source.connection.sleep(0.1)


def test_a_stream_queue_lost_at_its_credit_ack_reconnects_exactly(stream: RabbitSource) -> None:
    """After each read the stream spout acks the last delivery (it grants the
    consumer credit); a connection lost just then is a lost connection, ridden
    out, not the run's error (seen once in bench_connectors_kill.py's RabbitMQ
    restart: ``StreamLostError`` from ``basic_ack``). Injected at that ack."""
    import pika.exceptions

    source = stream
    name = f"rmqout-{uuid.uuid4().hex[:8]}"
    spout = RabbitMQSpout(source.name, URL, count=10)
    out = Held()
    try:
        source.produce(LINES[:100])
        source.settle(100)
        conf = {"statestream.connectors.reconnect.secs": 30.0}
        spout.open(conf, mock_context("lines", topology=name, clock=StepClock(0.01)), out)  # type: ignore[arg-type]
        spout.seek(None)  # type: ignore[attr-defined]
        while len(out.emitted) < 10:
            spout.next_tuple()
        lost = spout._channel  # type: ignore[attr-defined]

        def reset(*args: Any, **kwargs: Any) -> None:
            raise pika.exceptions.StreamLostError("Stream connection lost: injected")

        lost.basic_ack = reset
        while len(out.emitted) < 100:
            spout.next_tuple()
        assert spout._channel is not lost  # type: ignore[attr-defined]
    finally:
        spout.close()
    assert [line for line, _ in out.emitted] == LINES[:100]  # in order, none twice
