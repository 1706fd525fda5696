"""Encoded keys and values are stored byte for byte, whatever the bytes.

A backend sees encoded bytes only. Whatever it binds or converts them to on
the way into its store (the sqlite provider binds bytearrays, many rows to a
statement), a reopened provider must read back the same bytes, as ``bytes``,
through ``load`` and ``scan``, after a prepare and commit and after a direct
commit, with tombstones among the rows.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlite_files import sqlite_file

from statestream._state import CommitOutcome, StateProvider
from statestream_providers.sqlite import SQLiteStateProvider

ODD_KEYS = [
    b"\x00",  # looks empty to anything that stops at NUL
    b"\x00\x00",
    b"a\x00b",
    bytes(range(256)),
    bytes(range(255, -1, -1)),
    b"\xff" * 3,
    b'"k"',
]
# More rows than one multi-row statement holds, and not a multiple of it.
MANY_KEYS = [f'"w{i:04d}"'.encode() for i in range(600)]
# Never b"": no serializer encodes a value to nothing, and redis marks its
# tombstones so (the sqlite-only test below stores one).
ODD_VALUES = [bytes(range(256)), b"\x00", b"\xff\xfe", b"null", b"x" * 3000]


def _backend(provider: StateProvider, namespace: str) -> Any:
    backend = getattr(provider.get_state(namespace), "_backend", None)
    if backend is None:
        pytest.skip(f"{provider!r} keeps no StateBackend to write encoded bytes through")
    return backend


def _check(backend: Any, expected: dict[bytes, bytes]) -> None:
    for key, value in expected.items():
        loaded = backend.load(key)
        assert type(loaded) is bytes and loaded == value, key
    assert backend.load(b"\x00\x00\x00") is None
    scanned = list(backend.scan())
    assert all(type(k) is bytes and type(v) is bytes for k, v in scanned)
    assert dict(scanned) == expected and len(scanned) == len(expected)


def test_every_byte_round_trips_through_prepare_commit_and_reopen(provider_factory: Any) -> None:
    expected: dict[bytes, bytes] = {}
    keys = ODD_KEYS + MANY_KEYS
    delta: list[tuple[bytes, bytes | None]] = [
        (key, ODD_VALUES[i % len(ODD_VALUES)]) for i, key in enumerate(keys)
    ]
    delta.append((b"never-stored", None))  # a tombstone among the rows
    backend = _backend(provider_factory(), "bytes-0")
    backend.write_prepared(0, delta)
    assert backend.apply_prepared(0) is CommitOutcome.APPLIED
    expected = {key: value for key, value in delta if value is not None}

    backend = _backend(provider_factory(), "bytes-0")  # reopened
    _check(backend, expected)

    # A second prepare over the same keys: updates and deletions.
    delta = [(key, None if i % 3 == 0 else bytes([i % 256]) * 2) for i, key in enumerate(keys)]
    backend.write_prepared(1, delta[:300])
    backend.write_prepared(1, delta[300:])  # merged into the prepared delta
    assert backend.apply_prepared(1) is CommitOutcome.APPLIED
    expected = {key: value for key, value in delta if value is not None}
    _check(_backend(provider_factory(), "bytes-0"), expected)


def test_every_byte_round_trips_through_a_direct_commit_and_reopen(provider_factory: Any) -> None:
    keys = ODD_KEYS + MANY_KEYS
    backend = _backend(provider_factory(), "bytes-1")
    backend.commit_direct([(key, ODD_VALUES[i % len(ODD_VALUES)]) for i, key in enumerate(keys)])
    delta = [(key, None if i % 2 else bytes(range(1 + i % 255))) for i, key in enumerate(keys)]
    backend.commit_direct(delta)
    expected = {key: value for key, value in delta if value is not None}
    _check(_backend(provider_factory(), "bytes-1"), expected)


def test_sqlite_stores_blobs_and_registers_no_adapter(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    adapters = dict(sqlite3.adapters)
    with SQLiteStateProvider(path, synchronous="normal") as provider:
        backend = _backend(provider, "bytes-2")
        backend.write_prepared(0, [(key, bytes(range(256))) for key in ODD_KEYS])
        backend.apply_prepared(0)
        backend.commit_direct([(b"\x00", b""), (b"a\x00b", None)])
        provider.compact()  # the committed log records into statestream_entries
    assert sqlite3.adapters == adapters, "no adapter registered for the whole process"
    with sqlite_file(path) as conn:
        rows = conn.execute(
            "SELECT key, value, typeof(key), typeof(value) FROM statestream_entries"
            " WHERE namespace = 'bytes-2' ORDER BY key"
        ).fetchall()
    expected = sorted(
        [(key, bytes(range(256))) for key in ODD_KEYS if key not in (b"\x00", b"a\x00b")]
        + [(b"\x00", b"")]
    )
    assert [(key, value) for key, value, _, _ in rows] == expected
    assert {(kind_k, kind_v) for _, _, kind_k, kind_v in rows} == {("blob", "blob")}
