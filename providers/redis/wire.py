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

from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, Final, TypeVar

import orjson

if TYPE_CHECKING:
    from redis import Redis

T = TypeVar("T")

#: One bulk string of the protocol, ``$<length>\r\n<bytes>\r\n``.
_BULK: Final = b"$%d\r\n%b\r\n"
#: ``$<length>`` for every length below 4 KiB: an argument's header by a list
#: index, not a format (a bytes format costs ~900 instructions an argument).
_HEADS: Final = [b"$%d" % n for n in range(4096)]


def interleave(first: Sequence[bytes], second: Sequence[bytes]) -> list[bytes]:
    """``[a0, b0, a1, b1, ...]`` by two slice assignments (no Python a pair)."""
    both: list[bytes] = [b""] * (2 * len(first))
    both[0::2] = first
    both[1::2] = second
    return both


def framed(args: Sequence[bytes]) -> bytes:
    """``args`` as the protocol's bulk strings, joined: each header from a table, all
    of it one ``join`` (a format each only if an argument is of 4 KiB or more)."""
    if not args:
        return b""
    try:
        heads = list(map(_HEADS.__getitem__, map(len, args)))
    except IndexError:
        return b"".join(map(_BULK.__mod__, zip(map(len, args), args, strict=True)))
    return b"\r\n".join(interleave(heads, args)) + b"\r\n"


def _json_split(items: list[Any]) -> list[bytes] | None:
    """The JSON texts of the scalars ``items``, from one ``orjson.dumps`` of the list
    cut at its commas: exact when no text holds a comma (a scalar's can only
    inside a string), which the count of the parts tells; None otherwise."""
    if not items:
        return []
    parts = orjson.dumps(items)[1:-1].split(b",")
    return parts if len(parts) == len(items) else None


def json_texts(items: list[Any]) -> list[bytes]:
    """``orjson.dumps`` of each of the scalars ``items``, in one call for all where
    none holds a comma. Each is a bytes object of its own size: orjson's own
    output keeps the buffer it encoded in (kilobytes; 800 MB for 200,000
    kept, measured)."""
    parts = _json_split(items)
    return parts if parts is not None else list(map(b"%b".__mod__, map(orjson.dumps, items)))


def commands(name: bytes, key: bytes, args: Sequence[bytes], size: int) -> list[bytes]:
    """``name key`` over ``args`` in commands of at most ``size`` of them (even for
    field-value pairs): a command's arguments stay bounded on the server."""
    head = framed((name, key))
    return [
        b"*%d\r\n%b%b" % (len(chunk) + 2, head, framed(chunk))
        for chunk in (args[start : start + size] for start in range(0, len(args), size))
    ]


def command(name: bytes, key: bytes, args: Sequence[bytes]) -> bytes:
    """The command ``name key *args`` as the protocol's bytes."""
    return b"*%d\r\n%b" % (len(args) + 2, framed((name, key, *args)))


def transaction(commands: Iterable[bytes]) -> tuple[bytes, int]:
    """``MULTI``, ``commands``, ``EXEC`` as one payload, and the replies it draws."""
    body = list(commands)
    return b"".join(chain((b"*1\r\n$5\r\nMULTI\r\n",), body, (b"*1\r\n$4\r\nEXEC\r\n",))), len(
        body
    ) + 2


def session(client: Redis, steps: Callable[[Any], T]) -> T:
    """``steps(connection)`` on one of ``client``'s connections, retried on a lost
    connection as the client retries its own commands (each attempt starts
    over on a new connection). If it fails otherwise, the connection is closed
    rather than pooled: replies it had not read go with it."""
    pool = client.connection_pool
    # Any: redis-py leaves the connection's methods untyped.
    conn: Any = pool.get_connection()
    try:
        return conn.retry.call_with_retry(  # type: ignore[no-any-return]
            lambda: steps(conn), lambda _error: conn.disconnect()
        )
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


def exchange(conn: Any, payload: bytes, replies: int) -> list[Any]:
    """Send ``payload`` (``replies`` commands) on ``conn`` and return their replies.
    The first error reply raises redis-py's ResponseError once every reply is
    read (the connection stays in step); in an ``EXEC``'s reply (a
    transaction's) an error is an element: see :func:`exec_replies`."""
    from redis.exceptions import ResponseError  # redis-py is imported once a client exists

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


def send(client: Redis, payload: bytes, replies: int) -> list[Any]:
    """:func:`exchange` on one of ``client``'s connections (see :func:`session`)."""
    return session(client, lambda conn: exchange(conn, payload, replies))


def exec_replies(replies: list[Any]) -> list[Any]:
    """The replies of a transaction's commands (its ``EXEC``'s), the first error
    among them raised (Redis runs the others: a transaction is not rolled back)."""
    executed = replies[-1]
    for reply in executed:
        if isinstance(reply, Exception):
            raise reply
    return executed  # type: ignore[no-any-return]
