"""The sqlite provider's claim: one run per topology and file (``SQLiteStateProvider.claim``),
a ``flock`` on a lock file beside the database. The contract every claiming provider
honours is tested in ``test_claims.py``; this is what is sqlite's own.

Holders in other processes come from ``tests/claims.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from claims import holding, with_pid_gone

from statestream._errors import StateLockedError
from statestream_providers.sqlite import SQLiteStateProvider


def provider(db: Path) -> SQLiteStateProvider:
    return SQLiteStateProvider(db)


def claim_now(db: Path, scope: str = "wordcount") -> None:
    """Claim ``scope`` of ``db`` here without waiting, and let it go (StateLockedError if held)."""
    claim = provider(db).claim(scope, 0)
    assert claim is not None
    claim.release()


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
