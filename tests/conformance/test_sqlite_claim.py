"""The sqlite provider's claim: one run per topology and file (``SQLiteStateProvider.claim``).

Holders in other processes come from ``tests/claims.py``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest
from claims import claims_elsewhere, holding, with_pid_gone

from statestream._errors import StateLockedError
from statestream._registry import claim_scope, open_provider
from statestream_providers.memory import MemoryStateProvider
from statestream_providers.sqlite import SQLiteStateProvider


def provider(db: Path) -> SQLiteStateProvider:
    return SQLiteStateProvider(db)


def claim_now(db: Path, scope: str = "wordcount") -> None:
    """Claim ``scope`` of ``db`` here without waiting, and let it go (StateLockedError if held)."""
    claim = provider(db).claim(scope, 0)
    assert claim is not None
    claim.release()


def test_a_claim_held_by_another_process_is_refused_after_the_wait(tmp_path: Path) -> None:
    db = tmp_path / "data" / "state.db"
    with holding(db, "wordcount") as holder:
        start = time.monotonic()
        with pytest.raises(StateLockedError) as info:
            provider(db).claim("wordcount", 0.3)
        waited = time.monotonic() - start
    assert 0.3 <= waited < 3
    message = str(info.value)
    assert "another `statestream run` of topology 'wordcount'" in message
    assert f"holds {db} (pid {holder.pids[0]})" in message
    assert "within 0.3 s" in message
    assert "another topology name or store" in message
    assert not db.exists(), "a claim never creates the database"


def test_wait_zero_gives_up_at_once(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with holding(db, "wordcount"):
        start = time.monotonic()
        with pytest.raises(StateLockedError):
            claim_now(db)
        assert time.monotonic() - start < 0.2


def test_a_claim_waits_for_a_holder_that_lets_go(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with holding(db, "wordcount") as holder:
        timer = threading.Timer(0.3, holder.release)
        timer.start()
        try:
            start = time.monotonic()
            claim = provider(db).claim("wordcount", 10)
            assert 0.25 <= time.monotonic() - start < 5
        finally:
            timer.join()
        assert claim is not None
        claim.release()


def test_another_scope_of_the_same_file_is_free(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with holding(db, "wordcount"):
        claim_now(db, "clicks")
        claim_now(tmp_path / "other.db")  # and another file's same scope


def test_after_release_a_claim_succeeds(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with holding(db, "wordcount") as holder:
        holder.release()
        claim_now(db)


def test_a_killed_holder_lets_go(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with holding(db, "wordcount") as holder:
        with pytest.raises(StateLockedError):
            claim_now(db)
        holder.kill()
        claim_now(db)


def test_forked_children_share_the_claim_until_the_last_is_gone(tmp_path: Path) -> None:
    # A supervisor's workers inherit its claim (flock: the open file
    # description's); SIGKILLed, the supervisor leaves it to them.
    db = tmp_path / "state.db"
    with holding(db, "wordcount", mode="fork") as holder:
        parent, child = holder.pids
        with_pid_gone(parent)
        with pytest.raises(StateLockedError, match=f"pid {parent}"):
            claim_now(db)
        with_pid_gone(child)
        claim_now(db)


def test_the_same_process_claims_again_and_holds_until_every_claim_is_released(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.db"
    first = provider(db).claim("wordcount", 0)
    second = provider(db).claim("wordcount", 0)  # re-entrant: another runtime of this process
    assert first is not None and second is not None
    first.release()
    first.release()  # idempotent: does not let go of the second claim
    assert not claims_elsewhere(db, "wordcount")
    second.release()
    assert claims_elsewhere(db, "wordcount")


def test_the_lock_file_is_beside_the_database_and_stays(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    claim = provider(db).claim("two words/and a slash", 0)
    assert claim is not None
    lock = tmp_path / "state.db.two%20words%2Fand%20a%20slash.lock"
    assert lock.read_text() == f"{os.getpid()}\n"
    claim.release()
    assert lock.exists(), "removing it would race with the next claimer"
    long_claim = provider(db).claim("x" * 300, 0)
    assert long_claim is not None
    long_claim.release()
    assert all(len(p.name) < 255 for p in tmp_path.iterdir())


def test_an_in_memory_database_needs_no_claim() -> None:
    assert SQLiteStateProvider(":memory:").claim("wordcount", 0) is None


def test_claim_scope_unwraps_the_topology_scope_and_skips_providers_that_cannot(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.db"
    scoped = open_provider("sqlite", {"path": str(db)}, scope="wordcount")
    claim = claim_scope(scoped, "wordcount", 0)
    assert claim is not None
    assert not claims_elsewhere(db, "wordcount")
    claim.release()
    assert claims_elsewhere(db, "wordcount")
    assert claim_scope(MemoryStateProvider(), "wordcount", 0) is None
    assert claim_scope(object(), "wordcount", 0) is None  # the StateProvider protocol alone
