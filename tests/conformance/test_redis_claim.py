"""The redis provider's claim: one run per topology and store, with a lease
(``RedisStateProvider.claim``), on the real server. The contract every
claiming provider honours is tested in ``test_claims.py``; this is what is
the lease's own: the key and its value, renewal, dead holders, a lost lease.

Holders in other processes come from ``tests/claims.py``; each test has a
key prefix of its own (``redis_store``), deleted afterwards.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from claims import Store, claims_elsewhere, holding, redis_store, with_pid_gone

from statestream._clock import FakeClock
from statestream._errors import ConfigError, ProviderUnavailableError, StateLockedError
from statestream._registry import RunClaim, open_provider
from statestream_providers.redis import RedisStateProvider, claim_key

pytestmark = pytest.mark.redis

SHORT_TTL_MS = 300  # renewed every 100 ms


@pytest.fixture
def store() -> Iterator[Store]:
    with redis_store() as store:
        yield store


@pytest.fixture
def short_store() -> Iterator[Store]:
    """A store whose claims lapse 300 ms after their last renewal."""
    with redis_store(claim_ttl_ms=SHORT_TTL_MS) as store:
        yield store


def provider(store: Store) -> RedisStateProvider:
    return RedisStateProvider.from_config(store.config)


def claim_now(
    store: Store, scope: str = "wordcount", wait: float = 0, clock: FakeClock | None = None
) -> None:
    """Claim ``scope`` here, waiting up to ``wait`` s of ``clock`` (a fake one that moves
    only when the claim sleeps on it), and let it go (StateLockedError if held)."""
    p = provider(store)
    p.clock = clock or FakeClock()
    p.claim(scope, wait).release()


def client(store: Store) -> redis.Redis:
    return redis.Redis(host=store.config["host"], port=store.config["port"])


def key(store: Store, scope: str = "wordcount") -> str:
    return claim_key(scope, store.config["key_prefix"])


def value(store: Store, scope: str = "wordcount") -> bytes | None:
    c = client(store)
    try:
        return c.get(key(store, scope))  # type: ignore[no-any-return]
    finally:
        c.close()


def hold_as(store: Store, holder: dict[str, Any], ttl_ms: int = 10_000) -> None:
    """Put a claim in the store as the process ``holder`` describes would."""
    this = {
        "token": "f" * 32,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "start": None,
        "boot": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "pidns": os.readlink("/proc/self/ns/pid"),
    }
    c = client(store)
    try:
        c.set(key(store), orjson.dumps({**this, **holder}), px=ttl_ms)
    finally:
        c.close()


def start_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_bytes()
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def test_the_claim_is_a_key_naming_its_holder_deleted_on_release(store: Store) -> None:
    with holding(store, "wordcount") as holder:
        held = value(store)
        assert held is not None
        fields = orjson.loads(held)
        assert fields["host"] == socket.gethostname()
        assert fields["pid"] == holder.pids[0]
        assert fields["start"] == start_of(holder.pids[0])
        assert len(fields["token"]) == 32
        c = client(store)
        try:
            assert 0 < c.pttl(key(store)) <= 10_000
        finally:
            c.close()
        holder.release()
        assert value(store) is None


def test_a_killed_holder_on_this_machine_is_taken_over_without_waiting(store: Store) -> None:
    with holding(store, "wordcount") as holder:
        holder.kill()
        assert value(store) is not None, "the lease of a killed holder is still there"
        clock = FakeClock()
        claim_now(store, wait=5, clock=clock)  # no wait: the holder's pid is gone
        assert clock.now == 0, "the claim slept: it waited for a dead holder"


def test_a_pid_that_is_another_process_now_is_taken_over(store: Store) -> None:
    # The holder's pid was reused: alive, with another start time.
    parent = os.getppid()
    hold_as(store, {"pid": parent, "start": start_of(parent) + 1})
    claim_now(store)
    hold_as(store, {"pid": parent, "start": start_of(parent)})  # that very process: alive
    with pytest.raises(StateLockedError, match=f"pid {parent} on"):
        claim_now(store)


def test_a_holder_on_another_machine_is_waited_for_until_its_lease_expires(
    store: Store,
) -> None:
    hold_as(store, {"host": "elsewhere.example", "pid": 4242}, ttl_ms=60_000)
    with pytest.raises(StateLockedError) as info:
        provider(store).claim("wordcount", 0.1)
    message = str(info.value)
    assert f"holds {store.where('wordcount')} (pid 4242 on elsewhere.example)" in message
    assert "if that process is gone, its lease expires within 59." in message
    # Its pid says nothing here, even when no process of this machine has it.
    hold_as(store, {"host": "elsewhere.example", "pid": 4242}, ttl_ms=300)
    with pytest.raises(StateLockedError):
        claim_now(store)
    claim = provider(store).claim("wordcount", 5)  # granted once the lease expired
    claim.release()


def test_a_key_without_expiry_is_named_with_the_fix(store: Store) -> None:
    c = client(store)
    try:
        c.set(key(store), b"not a claim")
    finally:
        c.close()
    with pytest.raises(StateLockedError) as info:
        claim_now(store)
    assert f"delete it (redis-cli DEL {key(store)!r})" in str(info.value)


def test_the_same_store_named_otherwise_is_the_same_claim(store: Store) -> None:
    first = provider(store).claim("wordcount", 0)
    url = f"redis://localhost:{store.config['port']}/0"
    aliased = RedisStateProvider.from_config({"url": url, "key_prefix": store.config["key_prefix"]})
    second = aliased.claim("wordcount", 0)  # 127.0.0.1 and localhost: the same lease
    first.release()
    assert not claims_elsewhere(store, "wordcount")
    second.release()
    assert claims_elsewhere(store, "wordcount")


def test_the_lease_is_renewed_past_its_ttl_and_outlives_the_provider(
    short_store: Store,
) -> None:
    p = provider(short_store)
    claim = p.claim("wordcount", 0)
    held = value(short_store)
    p.close()  # a run closes and reopens its store: the claim is the run's
    time.sleep(SHORT_TTL_MS * 4 / 1000)
    assert value(short_store) == held
    assert not claims_elsewhere(short_store, "wordcount")
    assert claim.lost is None
    claim.release()
    assert value(short_store) is None


def test_a_forked_child_neither_releases_nor_renews_the_lease(short_store: Store) -> None:
    # The child releases the claim it inherited and exits before "held".
    with holding(short_store, "wordcount", mode="fork-release"):
        time.sleep(SHORT_TTL_MS * 3 / 1000)
        assert not claims_elsewhere(short_store, "wordcount")


def test_the_lease_is_the_claimers_alone(store: Store) -> None:
    # Unlike sqlite's file lock, a forked child does not keep the claim
    # once its parent is gone (the workers runtime kills them together).
    with holding(store, "wordcount", mode="fork") as holder:
        parent, child = holder.pids
        with_pid_gone(parent)
        claim_now(store)
        with_pid_gone(child)


@pytest.mark.parametrize("how", ["taken", "deleted"])
def test_a_lost_lease_is_reported(
    short_store: Store, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    run_claim = RunClaim()
    run_claim.take(
        open_provider("redis", short_store.config, scope="wordcount"),
        "wordcount",
        {"topology.state.claim.wait.secs": 0},
    )
    assert run_claim.lost is None
    if how == "taken":
        hold_as(short_store, {"host": "elsewhere.example", "pid": 4242})
    else:
        client(short_store).delete(key(short_store))
    deadline = time.monotonic() + 5
    while run_claim.lost is None and time.monotonic() < deadline:
        time.sleep(0.02)
    lost = run_claim.lost
    assert lost is not None
    assert f"the claim of topology 'wordcount' ({short_store.where('wordcount')}) was lost" in lost
    if how == "taken":
        assert "another process holds it now (pid 4242 on elsewhere.example)" in lost
    else:
        assert "its key is gone" in lost
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert [r.name for r in errors] == ["statestream.redis"]
    assert lost in errors[0].getMessage() and "it stops" in errors[0].getMessage()
    with pytest.raises(StateLockedError, match="lost its claim of the store"):
        run_claim.check()
    with pytest.raises(StateLockedError, match="lost its claim of the store"):
        run_claim.take(None, "wordcount", {})  # a store reopened within the run
    run_claim.release()
    if how == "taken":
        assert value(short_store) is not None, "the release deleted another's claim"


def _unreachable(handle: Any, seconds: float) -> None:
    """Make renewals of ``handle``'s lease fail as an unreachable server would, for ``seconds``."""
    lease = handle.hold
    renew = lease._renew
    until = time.monotonic() + seconds

    def failing(**kwargs: Any) -> Any:
        if time.monotonic() < until:
            raise redis.exceptions.ConnectionError("Connection refused (injected)")
        return renew(**kwargs)

    lease._renew = failing


def test_renewal_rides_out_a_server_it_cannot_reach_within_the_ttl(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with redis_store(claim_ttl_ms=1000) as store:
        claim = provider(store).claim("wordcount", 0)
        _unreachable(claim, 0.5)
        time.sleep(1.5)
        assert claim.lost is None
        assert not claims_elsewhere(store, "wordcount")
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any("cannot renew the claim of topology 'wordcount'" in m for m in warnings)
        claim.release()


def test_a_lease_that_expired_while_the_server_was_away_is_taken_again(
    short_store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30: a Redis stalled longer than the lease's ttl does not stop the run
    (its store operations ride the outage out): the expired lease is taken again
    when the server answers, as no other run took it."""
    claim = provider(short_store).claim("wordcount", 0)
    held = value(short_store)
    _unreachable(claim, 1.0)  # past the 0.3 s ttl: the key expires on the server
    deadline = time.monotonic() + 5
    while value(short_store) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert value(short_store) is None  # expired, unrenewed
    while value(short_store) != held and time.monotonic() < deadline:
        time.sleep(0.02)
    assert value(short_store) == held
    assert claim.lost is None
    messages = [r.getMessage() for r in caplog.records]
    assert any("it is taken again when the server answers" in m for m in messages)
    assert any("took the claim of topology 'wordcount'" in m for m in messages)
    claim.release()
    assert value(short_store) is None


def test_a_lease_another_run_took_while_the_server_was_away_is_lost(short_store: Store) -> None:
    claim = provider(short_store).claim("wordcount", 0)
    _unreachable(claim, 1.0)
    c = client(short_store)
    try:
        deadline = time.monotonic() + 5
        while value(short_store) is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        c.set(key(short_store), b"another run", px=10_000)  # it claimed meanwhile
        while claim.lost is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert claim.lost is not None
        assert "another process holds it now" in claim.lost
        assert value(short_store) == b"another run"
    finally:
        claim.release()
        c.delete(key(short_store))
        c.close()


def test_an_unreachable_server_at_claim_time_is_named() -> None:
    p = RedisStateProvider(host="127.0.0.1", port=1, timeout_ms=200, retries=0)
    with pytest.raises(ProviderUnavailableError) as info:
        p.claim("wordcount", 5)
    message = str(info.value)
    assert "cannot reach redis at 127.0.0.1:1 to claim topology 'wordcount'" in message
    assert "check that the server is running" in message


def test_claim_ttl_ms_is_checked() -> None:
    with pytest.raises(ConfigError, match="'claim_ttl_ms' must be >= 100"):
        RedisStateProvider.from_config({"claim_ttl_ms": 50})
    with pytest.raises(ConfigError, match="'claim_ttl_ms' must be a int, not str 'soon'"):
        RedisStateProvider.from_config({"claim_ttl_ms": "soon"})
    assert RedisStateProvider.from_config({"claim_ttl_ms": "2500"}).claim_ttl_ms == 2500
    assert RedisStateProvider.from_config({}).claim_ttl_ms == 10_000


def test_a_take_over_refuses_a_lease_that_changed_hands(store: Store) -> None:
    # Two claimers that found the same dead holder: the second one's
    # take-over sees the first one's lease and leaves it.
    from statestream_providers.redis import _TAKE_OVER_LUA

    c = client(store)
    try:
        c.set(key(store), b"first", px=10_000)
        assert c.eval(_TAKE_OVER_LUA, 1, key(store), b"dead", b"second", 10_000) == 0
        assert c.get(key(store)) == b"first"
        assert c.eval(_TAKE_OVER_LUA, 1, key(store), b"first", b"second", 10_000) == 1
        assert c.get(key(store)) == b"second"
    finally:
        c.close()


def test_a_claim_is_not_a_namespace(store: Store) -> None:
    p = provider(store)
    claim = p.claim("wordcount", 0)
    state = open_provider("redis", store.config, scope="wordcount").get_state("count-0")
    state.put("the", 1)
    state.commit()
    assert p.namespaces() == ["wordcount/count-0"]
    claim.release()
