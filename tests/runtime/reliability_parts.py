"""The pieces the guaranteed-processing tests share: fake-clock slack, config, recording
spouts and bolts, and a stepped local runtime."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime_harness import Records, Runner, records

from statestream import (
    Bolt,
    FakeClock,
    OutputCollector,
    OutputFieldsDeclarer,
    Topology,
    TopologyContext,
    Tuple,
)
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    ListSpout,
)

TIMEOUT = 4  # topology.message.timeout.secs in these tests
# The runtime's idle sleep is 1 ms of fake time, and FakeClock adds floats:
# a deadline is seen up to this much after it passes.
SLACK = 0.01
# On two workers an idle round costs a frame exchange (~0.5 ms of real time), so
# the tests that wait seconds of fake time sleep 10 ms per idle round there.
WORKERS_IDLE_MS = 10
WORKERS_SLACK = 0.03


def slack(runner: Runner) -> float:
    return SLACK if runner.local else WORKERS_SLACK


def conf_of(runner: Runner, **config: Any) -> dict[str, Any]:
    """What ``runtime`` configures, for ``runner`` (a coarser idle sleep on workers)."""
    conf: dict[str, Any] = {
        "topology.message.timeout.secs": TIMEOUT,
        "statestream.retry.initial.ms": 0,
        "statestream.retry.max.attempts": 0,
    }
    if runner.workers:
        conf["topology.sleep.spout.wait.strategy.time.ms"] = WORKERS_IDLE_MS
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    return runner.config(conf)


def now_of(component: Any) -> float:
    return float(component.context.clock.monotonic())


class RecordingSpout(ListSpout):
    """A ListSpout that logs ("emit" | "ack" | "fail", index, clock time) to
    ``Records(prefix + "events")``, which every process appends to.
    ``start_at``: emits nothing before that time of its clock."""

    def __init__(self, items: Any, *, prefix: str = "", start_at: float = 0.0) -> None:
        super().__init__(items)
        self.log = prefix + "events"
        self.start_at = start_at

    def next_tuple(self) -> None:
        if now_of(self) < self.start_at:
            return
        if self._replay:
            i = self._replay[0]
        elif self._next < len(self.items):
            i = self._next
        else:
            return
        Records(self.log).append(("emit", i, now_of(self)))
        super().next_tuple()

    def ack(self, msg_id: Any) -> None:
        Records(self.log).append(("ack", msg_id, now_of(self)))
        super().ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        Records(self.log).append(("fail", msg_id, now_of(self)))
        super().fail(msg_id)


def events(kind: str, msg_id: int | None = None, prefix: str = "") -> list[Any]:
    return [
        (i, t) if msg_id is None else t
        for k, i, t in records(prefix + "events")
        if k == kind and (msg_id is None or i == msg_id)
    ]


class Forward(Bolt):
    """Emits its input anchored and acks it; ``victim`` is dropped (never acked) the first
    time any task sees it."""

    def __init__(self, victim: Any = None) -> None:
        self.victim = victim

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def execute(self, tuple: Tuple) -> None:
        if tuple[0] == self.victim and not records("dropped"):
            Records("dropped").append(tuple[0])  # never acked
            return
        self.collector.emit([tuple[0]], tuple)
        self.collector.ack(tuple)


class Hold(Bolt):
    """Holds every input; on each tick acks what it holds (from ``after`` seconds on),
    or only resets their timeouts (``reset``) before that."""

    def __init__(self, after: float = 0.0, reset: bool = False, victim: Any = None) -> None:
        self.after = after
        self.reset = reset
        self.victim = victim

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self.held: list[Tuple] = []
        self.victim_seen = False

    def execute(self, tuple: Tuple) -> None:
        if not tuple.is_tick:
            if self.victim is not None and tuple[0] != self.victim:
                Records("hold").append(tuple[0])
                self.collector.emit([tuple[0]], tuple)
                self.collector.ack(tuple)  # only the victim is held
            elif self.victim is not None and self.victim_seen:
                Records("hold").append(tuple[0])
                self.collector.emit([tuple[0]], tuple)
                self.collector.ack(tuple)  # a replay of the victim goes straight through
            else:
                self.victim_seen = True
                self.held.append(tuple)
            return
        if now_of(self) >= self.after:
            for held in self.held:
                Records("hold").append(held[0])
                Records("released").append((held[0], now_of(self)))
                self.collector.emit([held[0]], held)
                self.collector.ack(held)
            self.held = []
        elif self.reset:
            for held in self.held:
                self.collector.reset_timeout(held)
        self.collector.ack(tuple)


def runtime(topology: Topology, clock: FakeClock | None = None, **config: Any) -> LocalRuntime:
    # Storm's replay: at once and forever (statestream's default waits 100 ms,
    # x2 per failure, for at most 5 attempts; tests/runtime/test_poison_tuples.py).
    conf: dict[str, Any] = {
        "topology.message.timeout.secs": TIMEOUT,
        "statestream.retry.initial.ms": 0,
        "statestream.retry.max.attempts": 0,
    }
    conf.update({k.replace("_", "."): v for k, v in config.items()})
    return LocalRuntime(topology, conf, clock=clock or FakeClock())


def spout_task(rt: LocalRuntime, cid: str = "src") -> Any:
    return rt.tasks_of[cid][0]


# -- a bolt that never acks: timeout and replay ------------------------------------------------
