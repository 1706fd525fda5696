"""StoreSession (statestream.runtime.session): the one place every runtime opens its
topology's store. On real sqlite and memory providers and a fake clock: the provider
is scoped and guarded, the owner holds the claim and has re-partitioned state whose
parallelism changed; a worker's session does neither; disconnect keeps the claim,
close lets it go; every step idempotent, a failed open leaves nothing taken.

Also the providers' public ``forget_state`` (what Spark's ``fresh_state`` uses in
place of reaching into a provider's private cache)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from claims import Store, claims_elsewhere, holding
from word_bolts import Count

from statestream import ConfigError, StateLockedError, Topology, TopologyBuilder
from statestream._clock import FakeClock
from statestream._registry import ScopedProvider, open_provider
from statestream._rescale import LAYOUT_NAMESPACE
from statestream._routing import task_for_key
from statestream._state import BackendStateProvider, ScopeClaim
from statestream.runtime.plan import as_config
from statestream.runtime.session import StoreSession
from statestream.runtime.spark.shared import fresh_state
from statestream.testing import ListSpout
from statestream_providers.memory import MemoryStateProvider

WORDS = [f"w{i}" for i in range(40)]


def _topology(tasks: int, name: str = "wc", *, grouping: str = "fields") -> Topology:
    b = TopologyBuilder(name)
    b.set_spout("words", ListSpout(WORDS, fields=("word",)))
    bolt = b.set_bolt("count", Count(), tasks)
    if grouping == "fields":
        bolt.fields_grouping("words", ["word"])
    else:
        bolt.shuffle_grouping("words")
    return b.build()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state.db"


def _config(db: Path, **extra: Any) -> Any:
    return as_config(
        {
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(db)},
            **extra,
        },
        ("wc",),
    )


@pytest.fixture
def session(db: Path) -> Iterator[StoreSession]:
    s = StoreSession(_topology(2), _config(db), FakeClock())
    yield s
    s.close()


def _store_counts(db: Path, counts: dict[str, int]) -> None:
    """What a run with one ``count`` task would have left: its committed entries."""
    with open_provider("sqlite", {"path": str(db)}, scope="wc") as provider:
        kv = provider.get_state("count-0")
        for word, n in counts.items():
            kv.put(word, n)
        kv.commit()


def _inner(provider: Any) -> Any:
    assert isinstance(provider, ScopedProvider)
    return provider.provider


# -- open ------------------------------------------------------------------------------
def test_open_gives_the_topologys_scoped_provider_with_the_outage_guard(
    session: StoreSession, db: Path
) -> None:
    clock = session.clock
    provider = session.open()
    assert isinstance(provider, ScopedProvider) and provider.scope == "wc"
    assert session.provider is provider
    guard = _inner(provider).outage
    assert guard is not None and guard.clock is clock, "the guard waits on the run's clock"
    assert session.open() is provider, "open is idempotent"
    assert session.open(rescale=False) is provider


def test_the_owner_claims_and_close_lets_go(session: StoreSession, db: Path) -> None:
    assert not session.claimed
    assert claims_elsewhere(db, "wc")
    session.open()
    assert session.claimed
    assert not claims_elsewhere(db, "wc"), "another process is refused the scope"
    assert claims_elsewhere(db, "other"), "other topologies on the store stay free"
    provider = session.provider
    session.close()
    assert session.provider is None and not session.claimed
    assert _inner(provider).closed
    assert claims_elsewhere(db, "wc")
    session.close()  # idempotent


def test_a_scope_held_by_another_process_is_refused_and_nothing_stays_open(db: Path) -> None:
    session = StoreSession(
        _topology(2), _config(db, **{"topology.state.claim.wait.secs": 0}), FakeClock()
    )
    with holding(Store.sqlite(db), "wc"):
        with pytest.raises(StateLockedError):
            session.open()
        assert session.provider is None and not session.claimed
    session.open()  # the holder is gone: granted
    assert session.claimed
    session.close()


def test_a_workers_session_neither_claims_nor_rescales(db: Path) -> None:
    _store_counts(db, {"w1": 1})
    session = StoreSession(_topology(2), _config(db), FakeClock(), owner=False)
    provider = session.open()
    assert not session.claimed and claims_elsewhere(db, "wc")
    assert dict(provider.get_state(LAYOUT_NAMESPACE).items()) == {}, "nothing re-partitioned"
    assert dict(provider.get_state("count-0").items()) == {"w1": 1}
    session.close()


# -- rescale ---------------------------------------------------------------------------
def test_open_re_partitions_state_whose_parallelism_changed(
    session: StoreSession, db: Path
) -> None:
    counts = {w: i + 1 for i, w in enumerate(WORDS)}
    _store_counts(db, counts)
    provider = session.open()
    found: dict[str, int] = {}
    for task in range(2):
        for word, n in provider.get_state(f"count-{task}").items():
            assert task_for_key(word, 2) == task, f"{word!r} is not in its owner task"
            found[word] = n
    assert found == counts
    assert provider.get_state(LAYOUT_NAMESPACE).get("parallelism") == {"count": 2}


def test_open_without_rescale_then_rescale_once_per_opening(
    session: StoreSession, db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import statestream.runtime.session as module

    calls: list[Any] = []
    real = module.rescale_state
    monkeypatch.setattr(module, "rescale_state", lambda p, t: calls.append(p) or real(p, t))
    _store_counts(db, {w: 1 for w in WORDS})
    provider = session.open(rescale=False)
    assert calls == []
    assert dict(provider.get_state("count-0").items()) == {w: 1 for w in WORDS}
    session.rescale()
    assert calls == [provider]
    assert all(task_for_key(w, 2) == 0 for w in provider.get_state("count-0"))
    session.rescale()
    session.open()
    assert calls == [provider], "once per opening of the store"
    session.disconnect()
    reopened = session.open()
    assert calls == [provider, reopened], "a reopen (a rewind) rescales again"


def test_a_refused_rescale_lets_go_of_what_open_took(db: Path) -> None:
    _store_counts(db, {"w1": 1})
    session = StoreSession(_topology(2, grouping="shuffle"), _config(db), FakeClock())
    with pytest.raises(ConfigError, match="changed parallelism"):
        session.open()
    assert session.provider is None and not session.claimed
    assert claims_elsewhere(db, "wc")
    session.close()


def test_a_topology_without_stateful_bolts_is_not_rescaled(db: Path) -> None:
    b = TopologyBuilder("wc")
    b.set_spout("words", ListSpout(WORDS, fields=("word",)))
    session = StoreSession(b.build(), _config(db), FakeClock())
    provider = session.open()
    assert session.claimed
    assert dict(provider.get_state(LAYOUT_NAMESPACE).items()) == {}
    session.close()


# -- disconnect, release, and a rewind's reopen ---------------------------------------------
def test_disconnect_keeps_the_claim_and_the_next_open_reopens_under_it(
    session: StoreSession, db: Path
) -> None:
    first = session.open()
    session.disconnect()
    assert session.provider is None and _inner(first).closed
    assert session.claimed and not claims_elsewhere(db, "wc"), "the claim is still held"
    session.disconnect()  # idempotent
    second = session.open()
    assert second is not first and not _inner(second).closed
    assert session.claimed


def test_release_claim_keeps_the_provider(session: StoreSession, db: Path) -> None:
    provider = session.open()
    session.release_claim()
    assert not session.claimed and claims_elsewhere(db, "wc")
    assert session.provider is provider and not _inner(provider).closed
    session.close()
    assert _inner(provider).closed


def test_the_session_is_a_context_manager(db: Path) -> None:
    with StoreSession(_topology(2), _config(db), FakeClock()) as session:
        provider = session.open()
    assert _inner(provider).closed and not session.claimed


# -- the lapse check ---------------------------------------------------------------------
class _Lease:
    """A claim that can be lost (as redis's lease): ``lost`` says why once it is."""

    can_lapse = True

    def __init__(self) -> None:
        self.lost: str | None = None
        self.released = 0

    def release(self) -> None:
        self.released += 1


class _LeasingMemory(MemoryStateProvider):
    """The memory provider, with a lease for a claim (the test sets it lost)."""

    lease: _Lease | None = None

    def claim(self, scope: str, wait: float) -> ScopeClaim | None:
        type(self).lease = _Lease()
        return type(self).lease


def _leasing_session() -> StoreSession:
    spec = f"{_LeasingMemory.__module__}:{_LeasingMemory.__qualname__}"
    config = as_config({"topology.state.provider": spec}, ("wc",))
    return StoreSession(_topology(1), config, FakeClock())


def test_check_raises_once_a_lease_is_lost() -> None:
    session = _leasing_session()
    session.open()
    lease = _LeasingMemory.lease
    assert lease is not None
    assert session.can_lapse and session.lost is None
    session.check()  # holds: nothing
    lease.lost = "taken over by pid 42"
    assert session.lost == "taken over by pid 42"
    with pytest.raises(StateLockedError, match="lost its claim of the store: taken over"):
        session.check()
    session.disconnect()
    with pytest.raises(StateLockedError, match="lost its claim"):
        session.open()  # a rewind's reopen finds the claim lost
    session.close()
    assert lease.released == 1


def test_memory_cannot_claim_so_nothing_lapses() -> None:
    config = as_config({"topology.state.provider": "memory"}, ("wc",))
    session = StoreSession(_topology(1), config, FakeClock())
    provider = session.open()
    assert isinstance(_inner(provider), MemoryStateProvider)
    assert session.claimed and session.lost is None and not session.can_lapse
    session.check()
    session.close()


def test_a_file_lock_cannot_lapse(session: StoreSession) -> None:
    session.open()
    assert not session.can_lapse and session.lost is None


# -- forget_state ------------------------------------------------------------------------
def test_forget_state_drops_the_cached_state_only(db: Path) -> None:
    with open_provider("sqlite", {"path": str(db)}) as provider:
        assert isinstance(provider, BackendStateProvider)
        kv = provider.get_state("n")
        kv.put("k", 1)
        kv.prepare_commit(0)
        kv.commit(0)
        assert provider.get_state("n") is kv
        provider.forget_state("n")
        again = provider.get_state("n")
        assert again is not kv
        assert again.get("k") == 1 and again.committed_txid == 0, "the store is unchanged"
        provider.forget_state("never-opened")  # nothing cached: nothing to do


def test_a_scoped_provider_forgets_its_own_namespace(db: Path) -> None:
    with open_provider("sqlite", {"path": str(db)}, scope="wc") as scoped:
        inner = _inner(scoped)
        kv, other = scoped.get_state("n"), inner.get_state("n")  # wc/n and n
        scoped.forget_state("n")
        assert scoped.get_state("n") is not kv
        assert inner.get_state("n") is other, "the unscoped namespace n is not wc/n"


def test_fresh_state_reads_what_another_writer_committed(db: Path) -> None:
    """Spark's driver and executors: one prepares a namespace, the other commits it."""
    with (
        open_provider("sqlite", {"path": str(db)}, scope="wc") as driver,
        open_provider("sqlite", {"path": str(db)}, scope="wc") as executor,
    ):
        cached = driver.get_state("count-0")
        assert cached.committed_txid == -1
        kv = fresh_state(executor, "count-0")
        kv.put("w", 1)
        kv.prepare_commit(0)
        kv.commit(0)
        assert fresh_state(driver, "count-0").committed_txid == 0
        assert fresh_state(driver, "count-0").get("w") == 1


class _Uncached:
    """A provider written to the StateProvider protocol alone: no cache to forget."""

    name = "uncached"
    sharing = "process"

    def __init__(self) -> None:
        self.asked: list[str] = []

    def get_state(self, namespace: str) -> Any:
        self.asked.append(namespace)
        return namespace


def test_fresh_state_of_a_provider_without_forget_state() -> None:
    bare = _Uncached()
    assert fresh_state(bare, "n") == "n"
    scoped = ScopedProvider(bare, "wc")  # type: ignore[arg-type]
    assert fresh_state(scoped, "n") == "wc/n"
    assert bare.asked == ["n", "wc/n"]
