"""Commands of many fields packed as the Redis protocol's bytes, and sent as one write.

A checkpoint of a large state writes tens of thousands of fields and a drain's
read-ahead reads thousands: redis-py packs each argument in interpreted
Python (a type test and a copy an argument, then its own list of the
command's parts), which cost the 781,312-word count more CPU than the
server's work. Here a command's arguments are framed in C loops (``map`` of
``bytes.__mod__``) and every command of a call leaves in one ``sendall`` of
one of the client's pooled connections, under the client's own retry policy
(every command sent this way is idempotent, as the package doc requires).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, starmap
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from redis import Redis

#: One bulk string of the protocol: ``$<length>\r\n<bytes>\r\n``.
_BULK: Final = b"$%d\r\n%b\r\n"


def bulk(args: Sequence[bytes]) -> bytes:
    """``args`` as the protocol's bulk strings, joined (no count before them)."""
    return b"".join(map(_BULK.__mod__, zip(map(len, args), args, strict=True)))


def command(name: bytes, key: bytes, fields: Sequence[bytes]) -> bytes:
    """The command ``name key *fields`` as the protocol's bytes."""
    return b"*%d\r\n%b" % (len(fields) + 2, bulk((name, key))) + bulk(fields)


def interleave(keys: Sequence[bytes], values: Sequence[bytes]) -> list[bytes]:
    """``[k0, v0, k1, v1, ...]`` by two slice assignments (no Python a pair)."""
    fields: list[bytes] = [b""] * (2 * len(keys))
    fields[0::2] = keys
    fields[1::2] = values
    return fields


def chunked(name: bytes, key: bytes, fields: Sequence[bytes], size: int) -> Iterable[bytes]:
    """``name key`` over ``fields`` cut into commands of ``size`` fields (``size`` even
    for field-value pairs): a command's arguments stay bounded on the server."""
    return starmap(
        command,
        ((name, key, fields[start : start + size]) for start in range(0, len(fields), size)),
    )


def transaction(commands: Iterable[bytes]) -> tuple[bytes, int]:
    """``MULTI``, ``commands``, ``EXEC`` as one payload, and the replies it draws."""
    body = list(commands)
    return b"".join(chain((b"*1\r\n$5\r\nMULTI\r\n",), body, (b"*1\r\n$4\r\nEXEC\r\n",))), len(
        body
    ) + 2


def send(client: Redis, payload: bytes, replies: int) -> list[Any]:
    """Send ``payload`` (``replies`` commands) on one of ``client``'s connections and
    return their replies, retried on a lost connection as the client retries its
    own commands. The first error reply raises redis-py's ResponseError once
    every reply is read (the connection stays in step); in an ``EXEC``'s reply (a
    transaction's) an error is an element: see :func:`exec_replies`."""
    pool = client.connection_pool
    conn = pool.get_connection()
    from redis.exceptions import ResponseError  # redis-py is imported once a client exists

    def attempt() -> list[Any]:
        conn.send_packed_command([payload])  # a list of parts: bytes would be iterated
        got: list[Any] = []
        failed: Exception | None = None
        for _ in range(replies):
            try:
                got.append(conn.read_response())
            except ResponseError as exc:
                failed = failed or exc
        if failed is not None:
            raise failed
        return got

    try:
        return conn.retry.call_with_retry(attempt, lambda _error: conn.disconnect())  # type: ignore[no-any-return]
    finally:
        pool.release(conn)


def exec_replies(replies: list[Any]) -> list[Any]:
    """The replies of a transaction's commands (its ``EXEC``'s), the first error
    among them raised (Redis runs the others: a transaction is not rolled back)."""
    executed = replies[-1]
    for reply in executed:
        if isinstance(reply, Exception):
            raise reply
    return executed  # type: ignore[no-any-return]
