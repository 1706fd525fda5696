"""Storm's ``CheckpointSpoutTest`` (storm-client, org.apache.storm.spout), ported.

Storm opens its checkpoint spout with a plain conf map: empty, or holding
only ``topology.state.checkpoint.interval.ms: 0`` (testCommit), which Storm
reads as "the next checkpoint as soon as the last one committed". The same
here: a plain dict, no defaults merged in, on a fresh in-memory store. The
message id is ``(action, txid)`` here where Storm's is the txid alone, and
time is a fake clock (Storm's tests sleep 10 ms between calls).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from statestream._checkpoint import CheckpointState, Phase
from statestream._exactly_once import CheckpointRecord
from statestream._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM, CheckpointSpout
from statestream.testing import FakeClock, mock_context


class Collector:
    def __init__(self) -> None:
        self.emitted: list[tuple[int, str]] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        assert stream == CHECKPOINT_STREAM
        txid, action = values
        assert msg_id == (action, txid)
        self.emitted.append((txid, action))

    def report_error(self, error: BaseException) -> None:
        raise error


class Spout:
    """A checkpoint spout opened with ``conf`` (as given) on a store holding ``stored``."""

    def __init__(self, conf: Mapping[str, Any], stored: CheckpointState | None = None) -> None:
        self.clock = FakeClock(50.0)
        context = mock_context(CHECKPOINT_SPOUT, clock=self.clock)
        if stored is not None:
            CheckpointRecord(stored).save(context.state())
        self.collector = Collector()
        self.spout = CheckpointSpout()
        self.spout.open(conf, context, self.collector)  # type: ignore[arg-type]

    def next_tuple(self) -> None:
        self.spout.next_tuple()
        self.clock.advance(0.010)  # Storm's Utils.sleep(10) between the calls

    def last(self) -> tuple[int, str]:
        return self.collector.emitted[-1]

    def answer(self, *answers: tuple[str, str, int]) -> None:
        """For each ``(ack|fail, action, txid)``: next_tuple, then that answer; then
        next_tuple once more, as Storm's tests alternate them."""
        for verb, action, txid in answers:
            self.next_tuple()
            getattr(self.spout, verb)((action, txid))
        self.next_tuple()


@pytest.mark.parametrize("conf", [{}, {"topology.state.checkpoint.interval.ms": 0}])
def test_init_state(conf: Mapping[str, Any]) -> None:
    s = Spout(conf)
    s.next_tuple()
    assert s.collector.emitted == [(-1, "INITSTATE")]
    s.spout.ack(("INITSTATE", -1))
    assert s.collector.emitted == [(-1, "INITSTATE")]  # nothing more until asked


def test_prepare() -> None:
    # Storm prepares at once after the recovery (its last checkpoint time
    # starts at 0); here the interval counts from the recovery's end.
    s = Spout({})
    s.next_tuple()
    s.spout.ack(("INITSTATE", -1))
    s.clock.advance(1.0)  # the default interval
    s.next_tuple()
    assert len(s.collector.emitted) == 2
    assert s.last() == (0, "PREPARE")


def test_prepare_with_fail() -> None:
    s = Spout({"topology.state.checkpoint.interval.ms": 0}, CheckpointState(-1, Phase.COMMITTED))
    s.answer(
        ("ack", "INITSTATE", -1),
        ("ack", "PREPARE", 0),
        ("ack", "COMMIT", 0),
        ("fail", "PREPARE", 1),  # the failed prepare is rolled back
        ("fail", "ROLLBACK", 1),  # and the rollback sent again
        ("ack", "ROLLBACK", 1),
        ("ack", "INITSTATE", 0),
    )
    assert s.collector.emitted == [
        (-1, "INITSTATE"),
        (0, "PREPARE"),
        (0, "COMMIT"),
        (1, "PREPARE"),
        (1, "ROLLBACK"),
        (1, "ROLLBACK"),
        (0, "INITSTATE"),
        (1, "PREPARE"),
    ]


def test_commit_with_interval_0_in_a_plain_conf() -> None:
    # Storm's testCommit: the conf holds only the interval, 0.
    s = Spout({"topology.state.checkpoint.interval.ms": 0})
    s.answer(("ack", "INITSTATE", -1), ("ack", "PREPARE", 0), ("fail", "COMMIT", 0))
    assert len(s.collector.emitted) == 4
    assert s.last() == (0, "COMMIT")  # a failed commit is sent again


@pytest.mark.parametrize(
    ("stored", "first"),
    [
        (CheckpointState(100, Phase.PREPARING), (100, "ROLLBACK")),
        (CheckpointState(100, Phase.COMMITTING), (100, "COMMIT")),
    ],
    ids=["rollback", "commit"],
)
def test_recovery(stored: CheckpointState, first: tuple[int, str]) -> None:
    s = Spout({}, stored)
    s.next_tuple()
    assert s.collector.emitted == [first]


def test_recovery_rollback_ack() -> None:
    s = Spout({"topology.state.checkpoint.interval.ms": 0}, CheckpointState(100, Phase.PREPARING))
    s.answer(("ack", "ROLLBACK", 100), ("ack", "INITSTATE", 99))
    assert s.collector.emitted == [(100, "ROLLBACK"), (99, "INITSTATE"), (100, "PREPARE")]
