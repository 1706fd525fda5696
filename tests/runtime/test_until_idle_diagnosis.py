"""`--until-idle` never waits in silence: once nothing has moved for a message timeout,
the run says which spout is not exhausted, which trees and retries it waits for."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from statestream import Bolt, OutputFieldsDeclarer, Spout, TopologyBuilder, Tuple
from statestream.runtime.local import LocalRuntime
from statestream.runtime.plan import as_config
from statestream.testing import FakeClock, ListSpout, SinkBolt


class Forever(Spout):
    """Emits three items, then nothing, and never says it is done."""

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        super().open(conf, context, collector)
        self.n = 0

    def next_tuple(self) -> None:
        if self.n < 3:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(["value"])


class Drops(Bolt):
    """Never acks: every tree times out."""

    def execute(self, tuple: Tuple) -> None:
        pass


def _run(topology: Any, **conf: Any) -> tuple[LocalRuntime, Any]:
    config = as_config({"topology.message.timeout.secs": 30, **conf}, (topology.name,))
    rt = LocalRuntime(topology, config, clock=FakeClock())
    return rt, rt.run(until_idle=True, duration=200)


def test_a_spout_that_never_says_it_is_done_is_named(caplog: pytest.LogCaptureFixture) -> None:
    b = TopologyBuilder("forever")
    b.set_spout("feed", Forever())
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("feed")
    with caplog.at_level(logging.WARNING, logger="statestream"):
        _, result = _run(b.build())
    assert result.reason == "duration"
    said = [r.getMessage() for r in caplog.records if "--until-idle" in r.getMessage()]
    assert said, "the run waited 200 s in silence"
    assert "forever: --until-idle has seen no progress for 3" in said[0]
    assert "spout 'feed' has not reported exhausted() (emitted 3, acked 3)" in said[0]
    # Once per timeout, not at every loop.
    assert 4 <= len(said) <= 7


def test_trees_that_never_complete_and_messages_failing_are_named(
    caplog: pytest.LogCaptureFixture,
) -> None:
    b = TopologyBuilder("stuck")
    b.set_spout("items", ListSpout(["a", "b"]))
    b.set_bolt("drops", Drops()).shuffle_grouping("items")
    with caplog.at_level(logging.WARNING, logger="statestream"):
        _, result = _run(
            b.build(), **{"statestream.retry.max.attempts": 0, "statestream.retry.max.ms": 5000}
        )
    assert result.reason == "duration"
    said = " | ".join(r.getMessage() for r in caplog.records if "--until-idle" in r.getMessage())
    assert "spout 'items' has messages failing again and again: " in said
    assert "failures)" in said


def test_a_run_that_ends_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    b = TopologyBuilder("done")
    b.set_spout("items", ListSpout(["a", "b"]))
    b.set_bolt("out", SinkBolt("out")).shuffle_grouping("items")
    with caplog.at_level(logging.WARNING, logger="statestream"):
        _, result = _run(b.build())
    assert result.reason == "idle"
    assert not [r for r in caplog.records if "--until-idle" in r.getMessage()]
