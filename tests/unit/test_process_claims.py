"""ProcessClaims: the bookkeeping of the holds a process has on its stores' scopes
(re-entrant claims, the last release ends the hold, forked children share it)."""

from __future__ import annotations

import os

from statestream.provider import ProcessClaims


class Lock:
    """A hold (:class:`~statestream.provider.Hold`: anything with ``end()``) that counts
    its ends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.ended = 0
        self.lost: str | None = None

    def end(self) -> None:
        self.ended += 1


def test_the_last_release_of_the_process_ends_the_hold() -> None:
    claims: ProcessClaims[Lock] = ProcessClaims()
    lock = Lock("a")
    assert claims.join("a") is None
    first = claims.add("a", lock)
    second = claims.join("a")
    assert second is not None and second.hold is lock
    first.release()
    first.release()  # idempotent: the second claim still holds
    assert lock.ended == 0 and claims.holds() == [lock]
    second.release()
    assert lock.ended == 1 and claims.holds() == []
    assert claims.join("a") is None, "an ended hold is never joined"
    assert first.hold is None and repr(first) == "<claim (released)>"


def test_a_hold_is_joined_under_another_ident_by_a_match() -> None:
    claims: ProcessClaims[Lock] = ProcessClaims()
    lock = Lock("a")
    claims.add("a", lock)
    assert claims.join("b") is None
    joined = claims.join("b", lambda hold: hold.name == "a")
    assert joined is not None and joined.hold is lock


def test_a_forgotten_hold_is_not_joined_but_its_claims_still_end_it() -> None:
    claims: ProcessClaims[Lock] = ProcessClaims()
    lock = Lock("a")
    handle = claims.add("a", lock)
    assert handle.lost is None
    lock.lost = "taken over"
    claims.forget(lock)
    assert handle.lost == "taken over"
    assert claims.join("a") is None
    handle.release()
    assert lock.ended == 1


def test_a_forked_child_neither_ends_its_parents_hold_nor_joins_it() -> None:
    claims: ProcessClaims[Lock] = ProcessClaims()
    lock = Lock("a")
    handle = claims.add("a", lock)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, and never return into pytest
        try:
            handle.release()
            report = f"{lock.ended} {claims.join('a') is None}"
        except BaseException as exc:
            report = repr(exc)
        os.write(write, report.encode())
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 200).decode() == "0 True"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert claims.join("a") is not None, "the parent still holds it"
    assert lock.ended == 0
