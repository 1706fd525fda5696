"""One run per topology and store: the claim every provider that claims honours
(``BackendStateProvider.claim``), on sqlite (a file lock) and on a real Redis
(a lease). What is particular to each is in ``test_sqlite_claim.py`` and
``test_redis_claim.py``.

Holders in other processes come from ``tests/claims.py``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from claims import Store, claims_elsewhere, holding, redis_store

from statestream._claims import CLAIM_POLL_S
from statestream._clock import FakeClock
from statestream._errors import StateLockedError
from statestream._registry import claim_scope, open_provider
from statestream._state import ScopeClaim
from statestream_providers.memory import MemoryStateProvider


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def new_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], Store]]:
    """Makes stores of one kind, each new (a sqlite file, a Redis key prefix)."""
    numbers = itertools.count()
    with ExitStack() as stack:

        def make() -> Store:
            if request.param == "sqlite":
                return Store.sqlite(tmp_path / f"data{next(numbers)}" / "state.db")
            return stack.enter_context(redis_store())

        yield make


@pytest.fixture
def store(new_store: Callable[[], Store]) -> Store:
    return new_store()


def claim(
    store: Store, scope: str = "wordcount", wait: float = 0, clock: FakeClock | None = None
) -> ScopeClaim:
    """A claim of ``scope`` on ``store`` by this process (StateLockedError if held),
    waiting on ``clock`` (a fake one that moves only when the claim sleeps on it)."""
    provider = open_provider(store.spec, store.config)
    provider.clock = clock or FakeClock()  # type: ignore[attr-defined]
    granted = claim_scope(provider, scope, wait)
    assert granted is not None
    return granted


class ReleasingClock(FakeClock):
    """A fake clock on which ``release`` happens (in the holder's process) once the
    waiting claim has slept ``after`` seconds on it."""

    def __init__(self, after: float, release: Callable[[], None]) -> None:
        super().__init__()
        self.after = after
        self.release: Callable[[], None] | None = release

    def sleep(self, seconds: float) -> None:
        super().sleep(seconds)
        if self.release is not None and self.now >= self.after:
            release, self.release = self.release, None
            release()


def test_a_claim_held_by_another_process_is_refused_after_the_wait(store: Store) -> None:
    clock = FakeClock()
    with holding(store, "wordcount") as holder, pytest.raises(StateLockedError) as info:
        claim(store, wait=0.3, clock=clock)
    # It tried until the wait was spent, every CLAIM_POLL_S of the clock, not beyond.
    assert clock.now == pytest.approx(0.3)
    message = str(info.value)
    assert "another `statestream run` or `state clear` of topology 'wordcount'" in message
    assert f"holds {store.where('wordcount')} {store.held_by(holder.pids[0])}" in message
    assert "did not let go within 0.3 s" in message
    assert message.endswith("or run this one under another topology name or store")
    assert store.untouched(), "a claim never creates the store's state"


def test_wait_zero_gives_up_at_once(store: Store) -> None:
    clock = FakeClock()
    with holding(store, "wordcount"), pytest.raises(StateLockedError):
        claim(store, clock=clock)
    assert clock.now == 0, "a claim with no wait never sleeps"


def test_a_claim_waits_for_a_holder_that_lets_go(store: Store) -> None:
    with holding(store, "wordcount") as holder:
        clock = ReleasingClock(0.3, holder.release)
        granted = claim(store, wait=10, clock=clock)
        # Granted at the first try after the holder let go, long before the wait's end.
        assert clock.release is None
        assert 0.3 <= clock.now < 0.3 + CLAIM_POLL_S
        granted.release()


def test_another_scope_of_the_store_and_another_store_are_free(
    new_store: Callable[[], Store],
) -> None:
    store = new_store()
    with holding(store, "wordcount"):
        claim(store, "clicks").release()
        claim(new_store()).release()


def test_after_release_a_claim_succeeds(store: Store) -> None:
    with holding(store, "wordcount") as holder:
        holder.release()
        claim(store).release()


def test_a_killed_holder_lets_go(store: Store) -> None:
    with holding(store, "wordcount") as holder:
        with pytest.raises(StateLockedError):
            claim(store)
        holder.kill()
        claim(store).release()


def test_the_same_process_claims_again_and_holds_until_every_claim_is_released(
    store: Store,
) -> None:
    first = claim(store)
    second = claim(store)  # re-entrant: another runtime of this process
    first.release()
    first.release()  # idempotent: does not let go of the second claim
    assert not claims_elsewhere(store, "wordcount")
    second.release()
    assert claims_elsewhere(store, "wordcount")


def test_claim_scope_unwraps_the_topology_scope(store: Store) -> None:
    scoped = open_provider(store.spec, store.config, scope="wordcount")
    granted = claim_scope(scoped, "wordcount", 0)
    assert granted is not None
    assert not claims_elsewhere(store, "wordcount")
    granted.release()
    assert claims_elsewhere(store, "wordcount")


def test_claim_scope_skips_providers_that_cannot_claim() -> None:
    assert claim_scope(MemoryStateProvider(), "wordcount", 0) is None
    assert claim_scope(object(), "wordcount", 0) is None  # the StateProvider protocol alone
