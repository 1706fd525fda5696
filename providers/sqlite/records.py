"""The log records of the sqlite provider: a prepare's delta as one blob (see the package doc)."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable, Mapping
from typing import Any, Final

import orjson

from statestream.provider import (
    Delta,
    encode_json,
)

# The delta of a prepare goes into the log as one record (see the module
# doc): a little-endian header of the row count, the key lengths and the
# value lengths (_TOMBSTONE for a deleted key), then the keys and the values
# back to back. Built and read with array and join, no interpreted step per
# row unless the delta deletes keys.
_DELTA_MAGIC: Final = b"SSd1"
_PLAIN_MAGIC: Final = b"SSj1"  # a JSON document of plain entries, then an SSd1 record
_TOMBSTONE: Final = 0xFFFFFFFF
_U32: Final = "I" if array("I").itemsize == 4 else "L"
_SWAP: Final = sys.byteorder != "little"
#: encode_json's copy into an exact-size bytes object, as a C callable.
_EXACT: Final = b"%b".__mod__


def _u32s(values: Iterable[int]) -> bytes:
    packed = array(_U32, values)
    if _SWAP:
        packed.byteswap()
    return packed.tobytes()


def encode_delta(delta: Delta) -> bytes:
    """One log record holding ``delta`` (keys and values as given, None for a deletion)."""
    if not delta:
        return _DELTA_MAGIC + (0).to_bytes(4, "little")
    keys, values = zip(*delta, strict=True)
    try:
        value_lengths = _u32s(map(len, values))  # a None raises TypeError
        stored: Iterable[bytes] = values
    except TypeError:
        value_lengths = _u32s(_TOMBSTONE if v is None else len(v) for v in values)
        stored = [v for v in values if v is not None]
    return b"".join(
        (
            _DELTA_MAGIC,
            len(keys).to_bytes(4, "little"),
            _u32s(map(len, keys)),
            value_lengths,
            b"".join(keys),
            b"".join(stored),
        )
    )


def encode_plain_delta(plain: Mapping[str, Any], delta: Delta) -> bytes:
    """One log record holding ``delta`` and the entries of ``plain``
    (see ``StateBackend.write_prepared_plain``): the JSON document of
    ``plain``, then the record of ``delta``."""
    document = orjson.dumps(plain)
    size = len(document).to_bytes(4, "little")
    return b"".join((_PLAIN_MAGIC, size, document, encode_delta(delta)))


def decode_delta(record: bytes) -> tuple[list[bytes], list[bytes | None]]:
    """The keys and values of a log record (None for a deletion).

    Raises ValueError if ``record`` is not one that ``encode_delta`` or
    ``encode_plain_delta`` made.
    """
    plain, keys, values = _split_record(record)
    if plain:
        # As the state would have encoded them.
        keys.extend(map(encode_json, plain))
        values.extend(map(encode_json, plain.values()))
    return keys, values


def merge_records(records: Iterable[bytes]) -> dict[bytes, bytes | None]:
    """The entries of log records applied in order: encoded key -> encoded value
    (None: deleted). Raises ValueError as decode_delta does.

    The JSON documents of plain entries are merged as they are and only
    the union is encoded, once: a key put at every checkpoint is encoded
    once per fold, not once per record.
    """
    plain_union: dict[str, Any] = {}
    rows: dict[bytes, bytes | None] = {}
    for record in records:
        plain, keys, values = _split_record(bytes(record))
        if plain:
            if rows:  # an older row of the same key must not outlive this record
                for name in plain:
                    rows.pop(encode_json(name), None)
            plain_union.update(plain)
        if not plain_union:  # in C: no interpreted step a row
            rows.update(zip(keys, values, strict=True))
            continue
        for key, value in zip(keys, values, strict=True):
            if key[:1] == b'"':  # a str key: it may be a plain one
                plain_union.pop(orjson.loads(key), None)
            rows[key] = value
    # encode_json's right-sized copy (b"%b" % ...) of orjson's output, in C loops:
    # two interpreted calls an entry cost ~1 s of the 781k-word count (issue 49).
    rows.update(
        zip(
            map(_EXACT, map(orjson.dumps, plain_union)),
            map(_EXACT, map(orjson.dumps, plain_union.values())),
            strict=True,
        )
    )
    return rows


def _split_record(record: bytes) -> tuple[dict[str, Any] | None, list[bytes], list[bytes | None]]:
    """A record's JSON document of plain entries (None if it has none), and its rows."""
    if record[:4] == _PLAIN_MAGIC and len(record) >= 8:
        size = int.from_bytes(record[4:8], "little")
        try:
            plain = orjson.loads(record[8 : 8 + size])
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"its JSON document cannot be read ({exc})") from None
        if not isinstance(plain, dict):
            raise ValueError("its JSON document is not an object")
        keys, values = _decode_rows(record[8 + size :])
        return plain, keys, values
    keys, values = _decode_rows(record)
    return None, keys, values


def _decode_rows(record: bytes) -> tuple[list[bytes], list[bytes | None]]:
    if record[:4] != _DELTA_MAGIC or len(record) < 8:
        raise ValueError("not a statestream delta record")
    n = int.from_bytes(record[4:8], "little")
    lengths = array(_U32)
    head = 8 + 8 * n
    if len(record) < head:
        raise ValueError(f"a delta record of {n} rows is cut short")
    lengths.frombytes(record[8:head])
    if _SWAP:
        lengths.byteswap()
    key_lengths, value_lengths = lengths[:n], lengths[n:]
    pos = head
    keys: list[bytes] = []
    for length in key_lengths:
        keys.append(record[pos : pos + length])
        pos += length
    values: list[bytes | None] = []
    for length in value_lengths:
        if length == _TOMBSTONE:
            values.append(None)
        else:
            values.append(record[pos : pos + length])
            pos += length
    if pos != len(record):
        raise ValueError(f"a delta record of {n} rows has {len(record) - pos} bytes too many")
    return keys, values
