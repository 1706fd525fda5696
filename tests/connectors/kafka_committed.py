"""What a ``read_committed`` consumer of a topic gets, read from the log's own transaction markers.

Apache Kafka hides an aborted transaction's records from a ``read_committed``
consumer by sending, with each fetch, the list of aborted transactions in
that range (``AbortedTransactions``, from its transaction index). tansu
0.6.0 writes the COMMIT and ABORT markers into the log but sends no such
list, so librdkafka's ``read_committed`` consumer hands out aborted records
too (seen: a transaction aborted by ``abort_transaction``, and one aborted by
a new producer's fence). The tests therefore read the log itself: every
record batch from offset 0 by plain Fetch requests (v4, ``read_uncommitted``),
and a transactional producer's records count once the COMMIT marker of their
transaction follows, never after an ABORT, and not while the transaction is
open. That is the definition of ``read_committed``; nothing in the sink reads
topics this way (its guard is a transactional consumer-group offset, which
tansu keeps or drops as Kafka does).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["Record", "committed_records", "logged_records"]

_FETCH, _FETCH_VERSION = 1, 4
_TRANSACTIONAL, _CONTROL, _COMPRESSION = 0x10, 0x20, 0x07


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class _Batch:
    partition: int
    producer_id: int
    transactional: bool
    control: bool
    records: list[Record]
    commit: bool  # a control batch's marker: COMMIT (True) or ABORT


def committed_records(bootstrap: str, topic: str, partitions: int) -> list[Record]:
    """Every record of ``topic`` a ``read_committed`` consumer gets, per partition in
    log order (a transaction's records at its COMMIT marker)."""
    host, port = bootstrap.rsplit(":", 1)
    out: list[Record] = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for partition in range(partitions):
            pending: dict[int, list[Record]] = {}
            for batch in _batches(sock, topic, partition):
                if batch.control:
                    done = pending.pop(batch.producer_id, [])
                    if batch.commit:
                        out.extend(done)
                elif batch.transactional:
                    pending.setdefault(batch.producer_id, []).extend(batch.records)
                else:
                    out.extend(batch.records)
    return out


def logged_records(bootstrap: str, topic: str, partitions: int) -> int:
    """How many records the log of ``topic`` holds, committed, aborted or open (what
    tansu's read_committed consumers are handed; control markers aside)."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        return sum(
            len(batch.records)
            for partition in range(partitions)
            for batch in _batches(sock, topic, partition)
            if not batch.control
        )


def _batches(sock: socket.socket, topic: str, partition: int) -> Iterator[_Batch]:
    offset, end = 0, None
    while end is None or offset < end:
        error, end, data = _fetch(sock, topic, partition, offset)
        assert error == 0, f"fetch {topic}[{partition}]@{offset}: error code {error}"
        read = 0
        for batch, after in _parse(data, partition):
            read += 1
            offset = after
            yield batch
        if not read and offset < end:
            raise AssertionError(f"no whole batch at {topic}[{partition}]@{offset} below {end}")


def _fetch(sock: socket.socket, topic: str, partition: int, offset: int) -> tuple[int, int, bytes]:
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 100, 1, 8 << 20, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iiqi", 1, partition, offset, 8 << 20)
    client = b"kafka-committed"
    header = struct.pack(">hhih", _FETCH, _FETCH_VERSION, 7, len(client)) + client
    request = header + body
    sock.sendall(struct.pack(">i", len(request)) + request)
    (size,) = struct.unpack(">i", _exactly(sock, 4))
    reply = memoryview(_exactly(sock, size))
    at = 4 + 4  # correlation id, throttle time
    (topics,) = struct.unpack_from(">i", reply, at)
    assert topics == 1
    (length,) = struct.unpack_from(">h", reply, at + 4)
    at += 6 + length + 4  # topic name, partition count (1)
    _, error, high, _lso = struct.unpack_from(">ihqq", reply, at)
    at += 22
    (aborted,) = struct.unpack_from(">i", reply, at)
    at += 4 + max(aborted, 0) * 16
    (length,) = struct.unpack_from(">i", reply, at)
    return error, high, bytes(reply[at + 4 : at + 4 + max(length, 0)])


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return data


def _parse(data: bytes, partition: int) -> Iterator[tuple[_Batch, int]]:
    """The whole record batches (magic 2) of ``data``, each with the offset after it."""
    at = 0
    while at + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, at)
        if at + 12 + length > len(data):
            return  # a batch cut by the fetch size: fetched again from its offset
        (magic,) = struct.unpack_from(">b", data, at + 16)
        assert magic == 2, f"record batch magic {magic}"
        attributes, last_delta = struct.unpack_from(">hi", data, at + 21)
        producer_id, _, _, count = struct.unpack_from(">qhii", data, at + 43)
        assert attributes & _COMPRESSION == 0, "compressed batches are not read here"
        records, pos = [], at + 61
        for _ in range(count):
            record, pos = _record(data, pos, base, partition)
            records.append(record)
        control = bool(attributes & _CONTROL)
        # A control record's key: version (int16), type (int16): 0 ABORT, 1 COMMIT.
        commit = control and struct.unpack_from(">hh", records[0].key or b"\0\0\0\0")[1] == 1
        batch = _Batch(
            partition, producer_id, bool(attributes & _TRANSACTIONAL), control, records, commit
        )
        yield batch, base + last_delta + 1
        at += 12 + length


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at  # zigzag
        shift += 7


def _record(data: bytes, at: int, base: int, partition: int) -> tuple[Record, int]:
    _, at = _varint(data, at)  # length
    at += 1  # attributes
    _, at = _varint(data, at)  # timestamp delta
    delta, at = _varint(data, at)
    size, at = _varint(data, at)
    key = None if size < 0 else data[at : at + size]
    at += max(size, 0)
    size, at = _varint(data, at)
    value = None if size < 0 else data[at : at + size]
    at += max(size, 0)
    headers, at = _varint(data, at)
    for _ in range(headers):
        size, at = _varint(data, at)
        at += size
        size, at = _varint(data, at)
        at += max(size, 0)
    return Record(partition, base + delta, key, value), at
