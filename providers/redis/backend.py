"""The :class:`~statestream.provider.StateBackend` of one namespace: three hashes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, cast

from statestream.provider import (
    CommitOutcome,
    Delta,
)

if TYPE_CHECKING:
    from .provider import RedisStateProvider


_CHUNK: Final = 10_000  # fields per HSET/HDEL command in a pipeline

_OUTCOMES: Final = {
    0: CommitOutcome.APPLIED,
    1: CommitOutcome.ALREADY_COMMITTED,
    2: CommitOutcome.NOT_PREPARED,
}


def key_names(namespace: str, key_prefix: str = "") -> tuple[str, str, str]:
    """The Redis keys of ``namespace``: (committed, prepared delta, txids)."""
    base = f"{key_prefix}{{{namespace}}}"
    return base, f"{base}$prepare", f"{base}$txid"


class _RedisBackend:
    """:class:`~statestream.provider.StateBackend` of one namespace: three hashes."""

    __slots__ = ("_data", "_namespace", "_prepare", "_provider", "_txid")

    def __init__(self, provider: RedisStateProvider, namespace: str) -> None:
        self._provider = provider
        self._namespace = namespace
        data, prepare, txid = key_names(namespace, provider.key_prefix)
        self._data = data.encode()
        self._prepare = prepare.encode()
        self._txid = txid.encode()

    def load(self, key: bytes) -> bytes | None:
        client, _ = self._provider._client()
        with self._provider._errors(f"read state {self._namespace!r}"):
            value = client.hget(self._data, key)
        return cast("bytes | None", value)

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        # HSCAN may return a field twice (when the hash is resized between
        # calls): remember what was yielded so each key comes once.
        seen: set[bytes] = set()
        cursor = 0
        while True:
            client, _ = self._provider._client()
            with self._provider._errors(f"scan state {self._namespace!r}"):
                cursor, page = client.hscan(self._data, cursor, count=1000)
            for key, value in cast("dict[bytes, bytes]", page).items():
                if key not in seen:
                    seen.add(key)
                    yield key, value
            if cursor == 0:
                return

    def load_txids(self) -> tuple[int, int | None]:
        client, _ = self._provider._client()
        with self._provider._errors(f"read the txids of state {self._namespace!r}"):
            committed, prepared = client.hmget(self._txid, ["commit", "prepare"])
        return (
            -1 if committed is None else int(committed),
            None if prepared is None else int(prepared),
        )

    def write_prepared(self, txid: int, delta: Delta) -> None:
        client, _ = self._provider._client()
        with self._provider._errors(f"prepare txid {txid} of state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            for start in range(0, len(delta), _CHUNK):
                chunk = delta[start : start + _CHUNK]
                pipe.hset(self._prepare, mapping={k: b"" if v is None else v for k, v in chunk})
            pipe.hset(self._txid, "prepare", txid)
            pipe.execute()

    def apply_prepared(self, txid: int) -> CommitOutcome:
        _, script = self._provider._client()
        with self._provider._errors(f"commit txid {txid} of state {self._namespace!r}"):
            status = script(keys=[self._data, self._prepare, self._txid], args=[txid])
        return _OUTCOMES[int(status)]

    def commit_direct(self, delta: Delta) -> None:
        client, _ = self._provider._client()
        with self._provider._errors(f"commit state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            values = [(k, v) for k, v in delta if v is not None]
            tombstones = [k for k, v in delta if v is None]
            for start in range(0, len(values), _CHUNK):
                pipe.hset(self._data, mapping=dict(values[start : start + _CHUNK]))
            for start in range(0, len(tombstones), _CHUNK):
                pipe.hdel(self._data, *tombstones[start : start + _CHUNK])
            pipe.execute()

    def discard_prepared(self) -> None:
        client, _ = self._provider._client()
        with self._provider._errors(f"roll back state {self._namespace!r}"):
            pipe = client.pipeline(transaction=True)
            pipe.delete(self._prepare)
            pipe.hdel(self._txid, "prepare")
            pipe.execute()
