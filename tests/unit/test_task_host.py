"""A local runtime's task built alone, on a bare :class:`TaskHost` (no runtime, no
store, the fake clock): the task's narrow view of its run is all it needs."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

import pytest

from statestream import Bolt, Config, TopologyBuilder
from statestream._clock import FakeClock
from statestream._errors import StoreOutageError
from statestream._tuple import Origin, Tuple
from statestream.runtime.local.bolt import BoltTask
from statestream.runtime.local.host import TaskHost
from statestream.runtime.local.spout import SpoutTask
from statestream.runtime.local.tasks import SHUFFLE, Route, Stream
from statestream.runtime.plan import RuntimePlan
from statestream.testing import ListSpout


class Upper(Bolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.seen: list[str] = []

    def execute(self, tuple: Any) -> None:
        word = tuple[0]
        if word == "boom":
            raise ValueError("no boom")
        if word == "outage":
            raise StoreOutageError("the store stayed away")
        self.seen.append(word)
        self.collector.emit([word.upper()], anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["word"])


def _host(words: list[str], config: dict[str, Any] | None = None) -> tuple[TaskHost, RuntimePlan]:
    b = TopologyBuilder("alone")
    b.set_spout("src", ListSpout(words, fields=["word"]))
    b.set_bolt("upper", Upper()).shuffle_grouping("src")
    topology = b.build()
    conf = Config({"topology.acker.executors": 0, **(config or {})})
    plan = RuntimePlan(topology, conf)
    host = TaskHost(
        topology, conf, plan, FakeClock(), logging.getLogger("test"), exactly_once=False
    )
    return host, plan


def _wire(task: Any, plan: RuntimePlan, component: str, out: deque[Any]) -> None:
    """The task's default stream into one plain queue (what RuntimeBase._wire does)."""
    spec = plan.topology.components[component]
    route = Route(plan.topology.components["upper"], SHUFFLE, [out])
    origin = Origin(component, task.task_id, 0, "default", plan.output_fields[component]["default"])
    task.streams["default"] = task.default_stream = Stream(origin, -1, [route], False)
    assert spec.id == component


def _bolt(host: TaskHost, plan: RuntimePlan, out: deque[Any]) -> BoltTask:
    spec = plan.topology.components["upper"]
    task = BoltTask(host, spec, 0, plan.component_tasks["upper"][0])
    _wire(task, plan, "upper", out)
    task.executor.prepare(host.conf_for(spec), plan.context("upper", 0), task)
    return task


def _tuple(plan: RuntimePlan, word: str) -> Tuple:
    src = plan.component_tasks["src"][0]
    return Tuple([word], Origin("src", src, 0, "default", plan.output_fields["src"]["default"]))


def test_a_bolt_task_runs_on_a_bare_host() -> None:
    host, plan = _host([])
    out: deque[Any] = deque()
    task = _bolt(host, plan, out)
    task.inbox.extend(_tuple(plan, w) for w in ["a", "b", "c"])
    assert task.drain()
    assert [t.values for t in out] == [["A"], ["B"], ["C"]]
    assert (task.executed, task.emitted, host.errors) == (3, 3, deque())


def test_a_bolt_tasks_error_is_reported_to_its_host_and_the_run_goes_on() -> None:
    host, plan = _host([])
    out: deque[Any] = deque()
    task = _bolt(host, plan, out)
    task.inbox.extend(_tuple(plan, w) for w in ["a", "boom", "c"])
    while task.inbox:
        task.drain()
    assert [t.values for t in out] == [["A"], ["C"]]
    (report,) = host.errors
    assert report.component == "upper" and "no boom" in report.error
    assert host.fatal is None


def test_an_error_no_retry_fixes_stops_the_host() -> None:
    host, plan = _host([])
    task = _bolt(host, plan, deque())
    task.inbox.extend(_tuple(plan, w) for w in ["a", "outage", "c"])
    task.drain()
    assert isinstance(host.fatal, StoreOutageError)
    assert host._stop


def test_a_spout_task_emits_on_a_bare_host_and_hears_acks_at_once_without_ackers() -> None:
    host, plan = _host(["x", "y"])
    out: deque[Any] = deque()
    spec = plan.topology.components["src"]
    task = SpoutTask(host, spec, 0, plan.component_tasks["src"][0])
    _wire(task, plan, "src", out)
    task.spout.open(host.conf_for(spec), plan.context("src", 0), task)
    while task.poll():
        task.drain_completions()
    assert [t.values for t in out] == [["x"], ["y"]]
    assert host.untracked_acks == 2


def test_tuple_ids_come_from_the_hosts_generator_and_a_test_can_set_them() -> None:
    host, _ = _host([])
    edges = {host.next_edge() for _ in range(1000)}
    assert len(edges) == 1000 and 0 not in edges
    roots = iter([7, 9])
    host.new_root = lambda: next(roots)
    assert (host.draw_root(), host.draw_root()) == (7, 9)


def test_a_bare_host_refuses_a_bolt_dead_letter_it_cannot_name() -> None:
    host, plan = _host([])
    task = _bolt(host, plan, deque())
    with pytest.raises(NotImplementedError, match="spout tasks"):
        host.write_bolt_dead_letter(task, _tuple(plan, "a"), None, 3)
