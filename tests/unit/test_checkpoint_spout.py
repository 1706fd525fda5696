"""``$checkpointspout`` (``statestream._stateful.CheckpointSpout``) driven by hand.

No runtime: a recording collector, a memory-provider state behind a wrapper
that can be told to fail its commits, and a fake clock.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import pytest

from statestream import OutputFieldsDeclarer, ProviderUnavailableError, TopologyContext
from statestream._checkpoint import CheckpointState, Phase
from statestream._exactly_once import CheckpointRecord
from statestream._stateful import CHECKPOINT_FIELDS, CHECKPOINT_SPOUT, CHECKPOINT_STREAM
from statestream._stateful import CheckpointSpout as Spout
from statestream.testing import FakeClock
from statestream_providers.memory import MemoryStateProvider

NAMESPACE = f"{CHECKPOINT_SPOUT}-0"
INTERVAL_MS = 1000


class Collector:
    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any, str]] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Any, msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append((list(values), msg_id, stream))

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)

    def take(self) -> list[tuple[str, int]]:
        """The checkpoints emitted since the last call, as ``(action, txid)``."""
        out = []
        for values, msg_id, stream in self.emitted:
            assert stream == CHECKPOINT_STREAM
            txid, action = values
            assert msg_id == (action, txid)  # the message id is what ack/fail get back
            out.append((action, txid))
        self.emitted.clear()
        return out


class FlakyState:
    """A state whose ``commit`` raises ``error`` while ``failing`` (the store went away)."""

    def __init__(self, state: Any) -> None:
        self.state = state
        self.failing = False
        self.error: Exception = ProviderUnavailableError("the store cannot be reached")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.state, name)

    def commit(self, txid: int | None = None) -> None:
        if self.failing:
            self.state.rollback()  # the pending writes never reached the store
            raise self.error
        self.state.commit(txid)


class Setup:
    def __init__(self, exactly_once: bool = False, store: str | None = None) -> None:
        self.store = store or uuid.uuid4().hex
        self.state = FlakyState(
            MemoryStateProvider.from_config({"name": self.store}).get_state(NAMESPACE)
        )
        self.clock = FakeClock(100.0)
        self.collector = Collector()
        context = TopologyContext(
            "topo",
            CHECKPOINT_SPOUT,
            0,
            0,
            {CHECKPOINT_SPOUT: [0]},
            {CHECKPOINT_SPOUT: {CHECKPOINT_STREAM: CHECKPOINT_FIELDS}},
            state_opener=lambda namespace: self.state,
            clock=self.clock,
            exactly_once=exactly_once,
        )
        self.spout = Spout()
        self.conf: Mapping[str, Any] = {"topology.state.checkpoint.interval.ms": INTERVAL_MS}
        self.context = context
        self.spout.open(self.conf, context, self.collector)

    def poll(self) -> list[tuple[str, int]]:
        self.spout.next_tuple()
        return self.collector.take()

    def ack(self, action: str, txid: int) -> None:
        self.spout.ack((action, txid))

    def stored(self) -> CheckpointRecord:
        fresh = MemoryStateProvider.from_config({"name": self.store}).get_state(NAMESPACE)
        return CheckpointRecord.load(fresh)

    def start(self) -> None:
        """From a fresh store: INITSTATE(-1), acked."""
        assert self.poll() == [("INITSTATE", -1)]
        self.ack("INITSTATE", -1)


def test_a_fresh_start_recovers_then_prepares_after_the_interval_and_commits() -> None:
    s = Setup()
    s.start()
    assert s.poll() == []
    s.clock.advance(INTERVAL_MS / 1000 - 0.001)
    assert s.poll() == []
    s.clock.advance(0.001)
    assert s.poll() == [("PREPARE", 0)]
    assert s.stored().state == CheckpointState(0, Phase.PREPARING)  # stored before the emit
    assert s.stored().positions == {}  # not exactly-once: no positions
    assert s.spout.committed_txid == -1
    s.ack("PREPARE", 0)
    assert s.stored().state == CheckpointState(0, Phase.COMMITTING)
    assert s.spout.committed_txid == -1
    assert s.poll() == [("COMMIT", 0)]
    s.ack("COMMIT", 0)
    assert s.stored().state == CheckpointState(0, Phase.COMMITTED)
    assert s.spout.committed_txid == 0
    assert s.collector.errors == []


@pytest.mark.parametrize(
    "error",
    [
        ProviderUnavailableError("the store cannot be reached"),
        # A third-party provider's untranslated error must not stop checkpoints either.
        OSError("disk full"),
        RuntimeError("a bug in a provider"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_phase_that_cannot_be_saved_on_a_prepare_ack_fails_the_round_and_recovers(
    error: Exception,
) -> None:
    s = Setup()
    s.start()
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]
    s.state.failing = True
    s.state.error = error
    s.ack("PREPARE", 0)  # COMMITTING(0) cannot be stored
    assert s.collector.errors == [error]
    assert s.stored().state == CheckpointState(0, Phase.PREPARING)
    assert s.spout.coordinator.recovering
    # The next poll starts the recovery at once: ROLLBACK of the round.
    assert s.poll() == [("ROLLBACK", 0)]
    # Still failing: the ROLLBACK's ack cannot be stored either, it is re-sent.
    s.ack("ROLLBACK", 0)
    assert len(s.collector.errors) == 2
    assert s.poll() == [("ROLLBACK", 0)]
    s.state.failing = False
    s.ack("ROLLBACK", 0)
    assert s.stored().state == CheckpointState(-1, Phase.COMMITTED)
    assert s.poll() == [("INITSTATE", -1)]
    s.ack("INITSTATE", -1)
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]  # checkpointing goes on
    assert len(s.collector.errors) == 2


def test_a_failed_checkpoint_is_recovered_from_the_stored_phase() -> None:
    s = Setup()
    s.start()
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]
    s.spout.fail(("PREPARE", 0))
    assert s.poll() == [("ROLLBACK", 0)]
    s.ack("ROLLBACK", 0)
    assert s.poll() == [("INITSTATE", -1)]
    assert s.collector.errors == []


def test_the_interval_counts_from_the_ack_time_on_the_spout_clock() -> None:
    s = Setup()
    s.start()
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]
    s.ack("PREPARE", 0)
    assert s.poll() == [("COMMIT", 0)]
    s.clock.advance(0.5)
    s.ack("COMMIT", 0)  # the cycle completes now: the next interval starts here
    s.clock.advance(INTERVAL_MS / 1000 - 0.0005)  # milliseconds are seconds * 1000
    assert s.poll() == []
    s.clock.advance(0.0005)
    assert s.poll() == [("PREPARE", 1)]


def test_request_early_prepares_at_the_next_poll_once() -> None:
    s = Setup()
    s.start()
    s.spout.request_early()
    assert s.poll() == [("PREPARE", 0)]
    s.ack("PREPARE", 0)
    assert s.poll() == [("COMMIT", 0)]
    s.ack("COMMIT", 0)
    s.clock.advance(0.001)
    assert s.poll() == []  # early was used up: the interval applies again


def test_a_restart_recovers_from_the_stored_phase() -> None:
    s = Setup()
    s.start()
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]
    s.ack("PREPARE", 0)
    restarted = Setup(store=s.store)  # COMMITTING(0) is stored: finish the commit
    assert restarted.poll() == [("COMMIT", 0)]
    restarted.ack("COMMIT", 0)
    assert restarted.poll() == [("INITSTATE", 0)]
    assert restarted.spout.committed_txid == 0


def test_exactly_once_the_spout_never_prepares_by_itself() -> None:
    s = Setup(exactly_once=True)
    s.start()
    s.clock.advance(10 * INTERVAL_MS / 1000)
    assert s.spout.prepare_due()
    assert s.poll() == []  # the runtime takes the cut first
    s.spout.start_prepare({"nums-0": 17})
    assert s.collector.take() == [("PREPARE", 0)]
    record = s.stored()
    assert record.state == CheckpointState(0, Phase.PREPARING)
    assert record.positions == {0: {"nums-0": 17}}
    s.ack("PREPARE", 0)
    assert s.poll() == [("COMMIT", 0)]  # a COMMIT needs no cut
    s.ack("COMMIT", 0)
    assert not s.spout.prepare_due()
    assert s.stored().positions == {0: {"nums-0": 17}}
    assert s.spout.restore_point() == (0, {"nums-0": 17})


def test_exactly_once_positions_of_t_minus_1_survive_preparing_t() -> None:
    s = Setup(exactly_once=True)
    s.start()
    for txid, where in [(0, 5), (1, 9)]:
        s.spout.request_early()
        assert s.spout.prepare_due()
        s.spout.start_prepare({"nums-0": where})
        assert s.collector.take() == [("PREPARE", txid)]
        s.ack("PREPARE", txid)
        assert s.poll() == [("COMMIT", txid)]
        s.ack("COMMIT", txid)
    s.spout.request_early()
    s.spout.start_prepare({"nums-0": 14})
    assert s.collector.take() == [("PREPARE", 2)]
    assert s.stored().positions == {1: {"nums-0": 9}, 2: {"nums-0": 14}}
    # A crash now: the restart rolls back 2 and restores 1 with its positions.
    restarted = Setup(exactly_once=True, store=s.store)
    assert restarted.spout.restore_point() == (1, {"nums-0": 9})
    assert restarted.poll() == [("ROLLBACK", 2)]


def test_start_prepare_when_nothing_is_due_emits_nothing_and_stores_no_positions() -> None:
    s = Setup(exactly_once=True)
    s.start()
    s.spout.start_prepare({"nums-0": 3})  # the interval has not passed
    assert s.collector.take() == []
    assert s.stored().positions == {}
    assert s.spout.exhausted()


@pytest.mark.parametrize("msg_id", [("COMMIT", 0), ("PREPARE", 7)])
def test_stale_acks_and_fails_change_nothing(msg_id: tuple[str, int]) -> None:
    s = Setup()
    s.start()
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]
    s.spout.ack(msg_id)
    s.spout.fail(msg_id)
    assert s.spout.coordinator.stale_replies == 2
    assert s.stored().state == CheckpointState(0, Phase.PREPARING)
    assert s.poll() == []


def test_the_spout_declares_the_checkpoint_stream_and_keeps_its_context() -> None:
    s = Setup()
    declarer = OutputFieldsDeclarer()
    s.spout.declare_output_fields(declarer)
    assert declarer.streams == {CHECKPOINT_STREAM: (CHECKPOINT_FIELDS, False)}
    assert (s.spout.conf, s.spout.context) == (s.conf, s.context)


def test_exactly_once_an_early_request_still_waits_for_the_cut() -> None:
    # request_early must not let next_tuple start a PREPARE without positions.
    s = Setup(exactly_once=True)
    s.start()
    s.spout.request_early()
    assert s.poll() == []
    assert s.stored().state == CheckpointState(-1, Phase.COMMITTED)
    assert s.spout.prepare_due()
    s.spout.start_prepare({"nums-0": 4})
    assert s.collector.take() == [("PREPARE", 0)]
    assert s.stored().positions == {0: {"nums-0": 4}}


def test_positions_given_to_a_start_prepare_that_did_not_prepare_are_not_kept() -> None:
    s = Setup()
    s.start()
    s.spout.start_prepare({"nums-0": 3})  # not due: nothing emitted
    s.clock.advance(INTERVAL_MS / 1000)
    assert s.poll() == [("PREPARE", 0)]
    assert s.stored().positions == {}
