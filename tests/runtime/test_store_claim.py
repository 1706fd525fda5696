"""One run per topology and store.

* A run claims its topology's scope of the store before it reads or writes
  any state, and holds it until it ends, however it ends: a second run of
  the topology is refused with StateLockedError; other topologies on the
  store are not held up (local, two workers, Spark; sqlite's file lock and
  a real Redis's lease).
* The safety net for stores that cannot be claimed: a namespace refusing a
  checkpoint's PREPARE again after the run recovered stops the run, where it
  would loop forever (local, two workers; Spark bounds its retries already).

Holders in other processes come from ``tests/claims.py``.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from claims import Store, claims_elsewhere, holding, redis_store
from runtime_harness import Runner
from word_bolts import Count, Split, word_count

from statestream import (
    PrepareRefused,
    RuntimeFailure,
    SourceError,
    StateLockedError,
    SystemClock,
    TopologyBuilder,
)
from statestream._registry import open_provider
from statestream.runtime.local import LocalRuntime
from statestream.testing import (
    CRASH,
    FakeClock,
    ListSpout,
    RewindableListSpout,
    SimulatedCrash,
    committed_state,
)
from statestream.testing import random_text as write_text
from statestream_providers.redis import claim_key


def _corpus(tmp_path: Path) -> tuple[Path, collections.Counter[str]]:
    text = tmp_path / "text.txt"
    return text, collections.Counter(write_text(text, 200, vocabulary=30, seed=5))


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The store the runs claim: a sqlite file in tmp_path, or keys of this test's own
    on the real Redis server."""
    if request.param == "sqlite":
        yield Store.sqlite(tmp_path / "state.db")
        return
    with redis_store() as store:
        yield store


def test_a_run_of_a_topology_another_run_holds_is_refused(
    runner: Runner, tmp_path: Path, store: Store
) -> None:
    text, expected = _corpus(tmp_path)
    topology = word_count("wordcount", text)
    config = {**store.run_config(), "topology.state.claim.wait.secs": 0.2}
    with holding(store, "wordcount") as holder:
        with pytest.raises(StateLockedError) as info:
            runner.run(topology, config)
        held = f"topology 'wordcount' holds {store.where('wordcount')} (pid {holder.pids[0]}"
        assert held in str(info.value)
        assert store.untouched(), "the refused run touched the store"
        # Another topology on the same store is not held up.
        other = word_count("clicks", text)
        assert runner.run(other, config).errors == []
    assert runner.run(topology, config).errors == []
    assert committed_state(topology, runner.config(config), "count") == dict(expected)
    assert committed_state(other, runner.config(config), "count") == dict(expected)
    assert claims_elsewhere(store, "wordcount"), "the run kept its claim after it ended"


def test_a_run_holds_its_claim_while_it_runs(tmp_path: Path, store: Store) -> None:
    text, _ = _corpus(tmp_path)
    rt = LocalRuntime(word_count("wordcount", text), store.run_config(), clock=FakeClock())
    seen: list[tuple[bool, bool]] = []

    def look() -> None:
        if not seen:
            seen.append((claims_elsewhere(store, "wordcount"), claims_elsewhere(store, "clicks")))

    rt.after_step = look
    assert rt.run(until_idle=True).errors == []
    assert seen == [(False, True)]
    assert claims_elsewhere(store, "wordcount")


class _LosingTheLease(RewindableListSpout):
    """Lines at about a thousand a second, for 10 s, far longer than the test waits; at the
    50th it deletes the run's claim key from Redis, as an operator (or a take-over
    from a machine that judged the holder dead) would."""

    def __init__(self, store: Store, scope: str) -> None:
        super().__init__(["a b"] * 10_000, fields=("line",))
        self.config = dict(store.config)
        self.key = claim_key(scope, self.config["key_prefix"])
        self.deleted = False

    def next_tuple(self) -> None:
        super().next_tuple()
        time.sleep(0.001)
        if self._next >= 50 and not self.deleted:
            self.deleted = True
            with redis.Redis(host=self.config["host"], port=self.config["port"]) as client:
                assert client.delete(self.key) == 1, "the run held no claim key"


@pytest.mark.redis
def test_a_run_whose_lease_is_lost_stops(runner: Runner) -> None:
    # Renewed every 100 ms: the loss is seen at the next renewal, and the
    # runtime looks at it every second (local: a timer; workers: the
    # supervisor's loop; Spark: before each batch's PREPARE).
    with redis_store(claim_ttl_ms=300) as store:
        b = TopologyBuilder("wordcount")
        b.set_spout("lines", _LosingTheLease(store, "wordcount"))
        b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
        b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
        topology = b.build()
        config = {**store.run_config(), "topology.state.checkpoint.interval.ms": 100}
        with pytest.raises(StateLockedError) as info:
            # A real clock: the local runtime's timers are what look at the claim.
            runner.run(topology, config, clock=SystemClock(), batch_size=20)
        message = str(info.value)
        assert "this run of topology 'wordcount' lost its claim of the store" in message
        assert "its key is gone" in message, message
        # What was committed stays, whole: both words of every counted line.
        counts = committed_state(topology, runner.config(config), "count")
        assert counts.get("a", 0) == counts.get("b", 0)
        assert counts.get("a", 0) < 10_000, "the run went on to the end of its input"
        assert claims_elsewhere(store, "wordcount"), "the stopped run kept a claim"


class _Raising(ListSpout):
    """A ListSpout that raises ``error`` at its second item."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(["a b", "c d", "e f"])
        self.error = error

    def next_tuple(self) -> None:
        if self._next == 1:
            raise self.error
        super().next_tuple()


def _ending(how: str) -> Callable[[], Any]:
    if how == "crash":
        return lambda: ListSpout(["a b", CRASH, "c d"])
    if how == "interrupt":
        return lambda: _Raising(KeyboardInterrupt())
    return lambda: _Raising(SourceError("the input cannot be read on"))


@pytest.mark.parametrize(
    ("how", "raised"),
    [("crash", SimulatedCrash), ("interrupt", KeyboardInterrupt), ("error", SourceError)],
)
def test_a_run_lets_go_however_it_ends(store: Store, how: str, raised: type) -> None:
    b = TopologyBuilder("wordcount")
    b.set_spout("lines", _ending(how)())
    b.set_bolt("split", Split()).shuffle_grouping("lines")
    b.set_bolt("count", Count()).fields_grouping("split", ["word"])
    rt = LocalRuntime(b.build(), store.run_config(), clock=FakeClock())
    with pytest.raises(raised):
        rt.run(until_idle=True)
    assert claims_elsewhere(store, "wordcount")


def _move_ahead(config: dict[str, Any], namespace: str, txid: int) -> None:
    """Commit ``txid`` in ``namespace`` of topology 'wordcount', as another run would."""
    with open_provider(
        config["topology.state.provider"],
        config["topology.state.provider.config"],
        scope="wordcount",
    ) as provider:
        state = provider.get_state(namespace)
        state.put("the", 1000)
        state.prepare_commit(txid)
        state.commit(txid)


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_prepare_refused_again_stops_the_run(
    local_runner: Runner, tmp_path: Path, exactly_once: bool
) -> None:
    # A store whose committed txid another writer moved ahead of the
    # checkpoint record: every PREPARE of count-0 is refused. A provider that
    # claims keeps such writers out; this is the net for those that cannot.
    text, _ = _corpus(tmp_path)
    config = local_runner.config(
        {
            "statestream.state.exactly.once": exactly_once,
            "topology.state.checkpoint.interval.ms": 10,
        }
    )
    _move_ahead(config, "count-0", 100)
    with pytest.raises(RuntimeFailure) as info:
        local_runner.run(word_count("wordcount", text), config)
    message = str(info.value)
    assert "state 'wordcount/count-0' refused a checkpoint's PREPARE again" in message
    assert "txid 100 is committed already" in message
    assert "another run of topology 'wordcount' writing the same store" in message
    if local_runner.local:
        rt = local_runner.last
        assert rt.rewinds == (1 if exactly_once else 0), "the run went on after the second refusal"
        assert isinstance(info.value.__cause__, PrepareRefused)
    assert claims_elsewhere(tmp_path / "state.db", "wordcount")
