"""The checkpoint protocol on a state: prepare_commit / commit / rollback and txids.

The scripted sequences follow the behaviour Storm's own state tests pin
down (rollback of an uncommitted prepare loses it, of a committed txid
keeps it, deletes hide older layers); the expectations are written out here.
"""

from __future__ import annotations

from typing import Any

import pytest

from statestream._errors import ProtocolViolation, ProviderUnavailableError, StateError
from statestream._state import KeyValueState, StateProvider

KEYS = ("a", "b", "c", "d")


def values(state: KeyValueState) -> list[Any]:
    return [state.get(key) for key in KEYS]


def test_rollback_of_an_uncommitted_prepare_loses_everything(
    provider: StateProvider, namespace: str
) -> None:
    state = provider.get_state(namespace)
    state.put("a", "1")
    state.put("b", "2")
    state.prepare_commit(1)
    state.put("c", "3")
    assert values(state) == ["1", "2", "3", None]
    state.rollback()
    assert values(state) == [None, None, None, None]
    assert state.committed_txid == -1
    assert list(state.items()) == []


def test_rollback_after_commit_keeps_the_committed_txid(
    provider: StateProvider, namespace: str
) -> None:
    state = provider.get_state(namespace)
    state.put("a", "1")
    state.put("b", "2")
    state.prepare_commit(1)
    state.commit(1)
    state.put("c", "3")
    assert values(state) == ["1", "2", "3", None]
    state.rollback()
    assert values(state) == ["1", "2", None, None]
    assert state.committed_txid == 1


def test_storm_sequence_with_deletes(provider_factory: Any, namespace: str) -> None:
    state = provider_factory().get_state(namespace)
    state.put("a", "1")
    state.put("b", "2")
    state.prepare_commit(1)
    state.commit(1)
    state.put("c", "3")
    assert state.delete("b") == "2"
    assert state.delete("c") == "3"
    assert values(state) == ["1", None, None, None]
    state.prepare_commit(2)
    assert values(state) == ["1", None, None, None]
    state.commit(2)
    assert values(state) == ["1", None, None, None]
    state.put("b", "2")
    state.prepare_commit(3)
    state.put("c", "3")
    assert values(state) == ["1", "2", "3", None]
    state.rollback()
    assert values(state) == ["1", None, None, None]
    reopened = provider_factory().get_state(namespace)
    assert values(reopened) == ["1", None, None, None]
    assert reopened.committed_txid == 2


def test_tombstones_hide_prepared_and_committed_values(
    provider_factory: Any, namespace: str
) -> None:
    state = provider_factory().get_state(namespace)
    state.put("a", "committed")
    state.put("b", "committed")
    state.prepare_commit(0)
    state.commit(0)
    state.put("b", "prepared")
    state.put("c", "prepared")
    state.prepare_commit(1)
    assert state.delete("a") == "committed"  # hides a committed value
    assert state.delete("c") == "prepared"  # hides a prepared value
    assert values(state) == [None, "prepared", None, None]
    state.prepare_commit(1)  # the tombstones join the prepared delta
    assert values(state) == [None, "prepared", None, None]
    assert provider_factory().get_state(namespace).get("a") == "committed"  # not yet
    state.commit(1)
    assert dict(state.items()) == {"b": "prepared"}
    reopened = provider_factory().get_state(namespace)
    assert dict(reopened.items()) == {"b": "prepared"}
    assert values(reopened) == [None, "prepared", None, None]


def test_put_after_delete_resurrects(provider: StateProvider, namespace: str) -> None:
    state = provider.get_state(namespace)
    state.put("a", 1)
    state.commit()
    state.delete("a")
    state.prepare_commit(0)
    state.put("a", 2)
    assert state.get("a") == 2
    state.prepare_commit(0)
    state.commit(0)
    assert state.get("a") == 2


def test_commit_of_the_same_txid_twice_is_harmless(provider_factory: Any, namespace: str) -> None:
    state = provider_factory().get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("b", 2)  # pending: a repeated commit must not touch it
    state.commit(0)
    state.commit(0)
    assert state.committed_txid == 0
    assert dict(state.items()) == {"a": 1, "b": 2}
    # A restarted task may be sent the same commit again (recovery).
    reopened = provider_factory().get_state(namespace)
    reopened.commit(0)
    assert dict(reopened.items()) == {"a": 1}
    assert reopened.committed_txid == 0


def test_a_late_duplicate_commit_keeps_the_next_prepared_delta(
    provider_factory: Any, namespace: str
) -> None:
    state = provider_factory().get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("b", 2)
    state.prepare_commit(1)
    provider_factory().get_state(namespace).commit(0)  # stale, from elsewhere
    state.commit(1)
    assert dict(provider_factory().get_state(namespace).items()) == {"a": 1, "b": 2}


def test_preparing_the_next_txid_before_committing_is_rejected(
    provider: StateProvider, namespace: str
) -> None:
    state = provider.get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(4)
    state.put("b", 2)
    with pytest.raises(ProtocolViolation, match="txid 4 is prepared") as info:
        state.prepare_commit(5)
    assert namespace in str(info.value)
    assert isinstance(info.value, StateError)
    # Nothing changed: the pending change is still pending and txid 4 commits.
    state.prepare_commit(4)
    state.commit(4)
    assert dict(state.items()) == {"a": 1, "b": 2}


@pytest.mark.parametrize("txid", [0, 1, -1])
def test_preparing_a_committed_txid_is_rejected(
    provider: StateProvider, namespace: str, txid: int
) -> None:
    state = provider.get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("b", 2)
    with pytest.raises(ProtocolViolation, match="next one to prepare is 2"):
        state.prepare_commit(txid)
    state.prepare_commit(2)


def test_a_state_that_missed_txids_joins_at_a_later_one(
    provider: StateProvider, namespace: str
) -> None:
    # A bolt removed from a topology and added back later finds its state
    # at an old txid while the checkpoint spout has moved on.
    state = provider.get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("b", 2)
    state.prepare_commit(7)
    with pytest.raises(ProtocolViolation, match="txid 7 is prepared"):
        state.prepare_commit(8)
    state.commit(7)
    assert state.committed_txid == 7
    assert dict(provider.get_state(namespace).items()) == {"a": 1, "b": 2}


def test_a_fresh_state_may_join_at_any_txid(provider: StateProvider, namespace: str) -> None:
    # A stateful bolt added to a running topology meets the checkpoint
    # spout's current txid, not 0.
    state = provider.get_state(namespace)
    with pytest.raises(ProtocolViolation):
        state.prepare_commit(-1)
    state.prepare_commit(41)
    state.commit(41)
    assert state.committed_txid == 41


@pytest.mark.parametrize("txid", [True, 1.0, "1", None])
def test_txids_must_be_ints(provider: StateProvider, namespace: str, txid: Any) -> None:
    with pytest.raises(ProtocolViolation, match="int txid"):
        provider.get_state(namespace).prepare_commit(txid)


def test_re_preparing_the_same_txid_merges(provider_factory: Any, namespace: str) -> None:
    state = provider_factory().get_state(namespace)
    state.put("a", 1)
    state.put("b", 1)
    state.prepare_commit(0)
    state.put("b", 2)  # overwrites the prepared b
    state.put("c", 2)
    state.prepare_commit(0)
    state.prepare_commit(0)  # nothing new: idempotent
    state.commit(0)
    assert dict(provider_factory().get_state(namespace).items()) == {"a": 1, "b": 2, "c": 2}


def test_re_preparing_a_key_as_another_kind_of_value_keeps_the_later(
    provider_factory: Any, namespace: str
) -> None:
    # A str key with a JSON scalar value may wait unencoded until the prepare (a
    # deferred put); a list value is encoded at put. Each prepare of the same txid
    # must win over the last for every key, whichever kind each was.
    state = provider_factory().get_state(namespace)
    state.put("deferred-then-encoded", 1)
    state.put("encoded-then-deferred", [1])
    state.put("kept", "x")
    state.prepare_commit(0)
    state.put("deferred-then-encoded", [2])
    state.put("encoded-then-deferred", 2)
    state.prepare_commit(0)
    expected = {"deferred-then-encoded": [2], "encoded-then-deferred": 2, "kept": "x"}
    assert dict(state.items()) == expected  # the prepared delta over an empty store
    assert state.prepared_keys == 3
    state.rollback()
    assert dict(state.items()) == {}
    assert state.get("kept") is None
    for key, value in expected.items():
        state.put(key, value)
    state.prepare_commit(0)
    state.commit(0)
    assert dict(provider_factory().get_state(namespace).items()) == expected


def test_commit_of_an_unprepared_txid_is_rejected(provider: StateProvider, namespace: str) -> None:
    state = provider.get_state(namespace)
    state.put("a", 1)
    with pytest.raises(ProtocolViolation, match="nothing is prepared"):
        state.commit(0)
    state.prepare_commit(0)
    with pytest.raises(ProtocolViolation, match="txid 0 is prepared"):
        state.commit(1)
    state.commit(0)
    assert state.get("a") == 1


def test_direct_commit_without_prepare(provider_factory: Any, namespace: str) -> None:
    state = provider_factory().get_state(namespace)
    state.put("phase", "COMMITTED")
    state.put("txid", 7)
    state.commit()
    assert state.committed_txid == -1  # a direct commit records no txid
    state.put("phase", "PREPARING")
    state.delete("txid")
    state.commit(None)
    state.put("phase", "never-committed")
    reopened = provider_factory().get_state(namespace)
    assert dict(reopened.items()) == {"phase": "PREPARING"}
    assert reopened.committed_txid == -1


def test_direct_commit_keeps_the_committed_txid(provider: StateProvider, namespace: str) -> None:
    state = provider.get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(3)
    state.commit(3)
    state.put("b", 2)
    state.commit()
    assert state.committed_txid == 3
    state.prepare_commit(4)  # still the next txid
    state.commit(4)


def test_direct_commit_while_prepared_is_rejected(provider: StateProvider, namespace: str) -> None:
    state = provider.get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(0)
    state.put("a", 2)
    with pytest.raises(ProtocolViolation, match="without a txid"):
        state.commit()
    state.commit(0)
    state.commit()
    assert state.get("a") == 2


def test_empty_prepare_and_commit_advance_the_txid(provider_factory: Any, namespace: str) -> None:
    state = provider_factory().get_state(namespace)
    for txid in range(3):
        state.prepare_commit(txid)
        state.commit(txid)
    assert provider_factory().get_state(namespace).committed_txid == 2


def test_rollback_with_nothing_to_roll_back(provider: StateProvider, namespace: str) -> None:
    state = provider.get_state(namespace)
    state.rollback()
    state.put("a", 1)
    state.commit()
    state.rollback()
    assert state.get("a") == 1


def test_namespaces_are_isolated(provider_factory: Any, namespace: str) -> None:
    provider = provider_factory()
    first = provider.get_state(namespace)
    second = provider.get_state(namespace + "b")
    first.put("k", "first")
    second.put("k", "second")
    first.prepare_commit(0)
    first.commit(0)
    second.prepare_commit(7)
    assert first.get("k") == "first" and second.get("k") == "second"
    second.rollback()
    assert first.get("k") == "first" and second.get("k") is None
    reopened = provider_factory()
    assert reopened.get_state(namespace).get("k") == "first"
    assert reopened.get_state(namespace + "b").get("k") is None
    assert reopened.get_state(namespace + "b").committed_txid == -1


def test_namespaces_lists_those_with_committed_entries(
    provider_factory: Any, namespace: str
) -> None:
    provider = provider_factory()
    names = [namespace, "$checkpointspout-" + namespace, namespace + "-prepared-only"]
    provider.get_state(names[0]).put("k", 1)
    provider.get_state(names[0]).prepare_commit(0)
    provider.get_state(names[0]).commit(0)
    provider.get_state(names[1]).put("phase", "COMMITTED")
    provider.get_state(names[1]).commit()
    provider.get_state(names[2]).put("k", 1)
    provider.get_state(names[2]).prepare_commit(0)
    listed = provider_factory().namespaces()
    assert listed == sorted(listed)
    assert names[0] in listed and names[1] in listed
    assert names[2] not in listed
    emptied = provider.get_state(names[0])
    emptied.delete("k")
    emptied.prepare_commit(1)
    emptied.commit(1)
    assert names[0] not in provider_factory().namespaces()


def test_provider_lifecycle(provider_factory: Any, namespace: str) -> None:
    provider = provider_factory()
    assert isinstance(provider, StateProvider)
    with provider as entered:
        assert entered is provider
        state = entered.get_state(namespace)
        state.put("a", 1)
        state.commit()
    provider.close()  # idempotent
    with pytest.raises(StateError, match="closed"):
        provider.get_state(namespace)
    with pytest.raises(StateError, match="closed"):
        state.get("other")  # needs the store
    assert provider_factory().get_state(namespace).get("a") == 1


def test_rollback_discards_a_prepare_whose_reply_was_lost(
    provider: StateProvider, namespace: str
) -> None:
    # The store took the prepared delta but the connection dropped before the
    # reply: this object never learnt of it. The checkpoint fails and rolls
    # back; the replayed prepare of the same txid must not carry "lost" along.
    state = provider.get_state(namespace)
    backend = state._backend  # type: ignore[attr-defined]

    class StoredThenLost:
        def __getattr__(self, name: str) -> Any:
            return getattr(backend, name)

        def write_prepared(self, txid: int, delta: Any) -> None:
            backend.write_prepared(txid, delta)
            raise ProviderUnavailableError("connection lost before the reply")

    if hasattr(backend, "write_prepared_plain"):  # the optional form, lost the same way

        def write_prepared_plain(self: Any, txid: int, plain: Any, delta: Any) -> None:
            backend.write_prepared_plain(txid, plain, delta)
            raise ProviderUnavailableError("connection lost before the reply")

        StoredThenLost.write_prepared_plain = write_prepared_plain  # type: ignore[attr-defined]

    state.put("lost", 1)
    state._backend = StoredThenLost()  # type: ignore[attr-defined]
    with pytest.raises(ProviderUnavailableError):
        state.prepare_commit(0)
    state._backend = backend  # type: ignore[attr-defined]
    state.rollback()
    state.put("kept", 2)
    state.prepare_commit(0)
    state.commit(0)
    assert dict(provider.get_state(namespace).items()) == {"kept": 2}


def _backend_of(state: KeyValueState) -> Any:
    """The StateBackend under a shipped provider's state (a third party's may have none)."""
    backend = getattr(state, "_backend", None)
    if backend is None:
        pytest.skip("the provider's state is not a StoredKeyValueState over a backend")
    return backend


def test_commit_whose_reply_was_lost_succeeds_when_retried(
    provider_factory: Any, namespace: str
) -> None:
    # The store applied commit(0) but the connection dropped before the reply:
    # the checkpoint spout re-sends COMMIT(0), and the retry must succeed (the
    # store answers "already committed") rather than refuse or re-apply.
    state = provider_factory().get_state(namespace)
    backend = _backend_of(state)

    class AppliedThenLost:
        def __getattr__(self, name: str) -> Any:
            return getattr(backend, name)

        def apply_prepared(self, txid: int) -> Any:
            backend.apply_prepared(txid)
            raise ProviderUnavailableError("connection lost before the reply")

    state.put("a", 1)
    state.put("gone", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 2)
    state.delete("gone")
    state.prepare_commit(1)
    state._backend = AppliedThenLost()  # type: ignore[attr-defined]
    with pytest.raises(ProviderUnavailableError):
        state.commit(1)
    # This object has not heard of the commit; the store has applied it.
    assert (state.committed_txid, state.prepared_txid) == (0, 1)
    assert provider_factory().get_state(namespace).committed_txid == 1
    state._backend = backend  # type: ignore[attr-defined]
    state.commit(1)
    assert (state.committed_txid, state.prepared_txid) == (1, None)
    assert dict(state.items()) == {"a": 2}
    # The next round goes through as usual.
    state.put("b", 3)
    state.prepare_commit(2)
    state.commit(2)
    reopened = provider_factory().get_state(namespace)
    assert reopened.committed_txid == 2
    assert dict(reopened.items()) == {"a": 2, "b": 3}


def test_commit_of_a_delta_the_store_lost_raises_and_commits_nothing(
    provider_factory: Any, namespace: str
) -> None:
    # The prepared delta vanished from the store (Redis restarted without
    # persistence, another writer rolled it back): commit(t) must raise, and
    # nothing may be marked committed, here or in the store.
    state = provider_factory().get_state(namespace)
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 2)
    state.prepare_commit(1)
    provider_factory().get_state(namespace).rollback()  # another writer drops the delta
    with pytest.raises(ProtocolViolation, match="holds no prepared delta"):
        state.commit(1)
    assert state.committed_txid == 0
    reopened = provider_factory().get_state(namespace)
    assert (reopened.committed_txid, reopened.prepared_txid) == (0, None)
    assert reopened.get("a") == 1
    # Recovery rolls back and prepares txid 1 again.
    state.rollback()
    assert state.get("a") == 1
    state.put("a", 3)
    state.prepare_commit(1)
    state.commit(1)
    assert provider_factory().get_state(namespace).get("a") == 3


def test_commit_keeps_no_record_of_the_prepared_keys(
    provider: StateProvider, namespace: str
) -> None:
    # What a state remembers of a prepared delta (to forget it on rollback) is
    # dropped by the commit: otherwise it grows with every key ever written.
    state = provider.get_state(namespace)
    if getattr(state, "_prepared", None) is None:
        pytest.skip("the provider's state is not a StoredKeyValueState")
    for txid in range(3):
        for n in range(50):
            state.put(f"k{txid}-{n}", n)
        state.prepare_commit(txid)
        assert len(state._prepared) == 50  # type: ignore[attr-defined]
        state.commit(txid)
        assert len(state._prepared) == 0  # type: ignore[attr-defined]
    assert sum(1 for _ in state.items()) == 150
