"""The redis provider's own packing of commands (statestream_providers/redis/wire.py).

What the server reads must be what redis-py would have sent: each argument one
bulk string, commands cut at the chunk size, and each JSON text the one
``orjson.dumps`` gives, whichever way it was made.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from statestream_providers.redis import wire

hiredis = pytest.importorskip("hiredis")


def _parse(payload: bytes) -> list[Any]:
    """The commands in ``payload``, read back by hiredis's protocol reader."""
    reader = hiredis.Reader()
    reader.feed(payload)
    found = []
    while (command := reader.gets()) is not False:
        found.append(command)
    return found


@pytest.mark.parametrize(
    "items",
    [
        [],
        ["w1", "a b", 'q"u', "tab\t", "x\\y"],  # one dump, cut
        ["a,b", "c"],  # a comma in a text: one dump each
        [0, -(2**61), True, False, None, 1.5, "s"],
        [",", 1],
    ],
)
def test_json_texts_are_each_items_own_dump(items: list[Any]) -> None:
    texts = wire.json_texts(items)
    assert texts == [orjson.dumps(item) for item in items]
    assert all(type(text) is bytes for text in texts)


@pytest.mark.parametrize("big", [b"x" * 300, b"y" * 5000])  # 4 KiB and over: a format each
def test_commands_cut_the_arguments_at_the_chunk_size(big: bytes) -> None:
    keys = [b"k%d" % i for i in range(7)]
    values = [b"", b"v,1", b"\r\n", big, b"4", b"5", b"6"]
    pairs = wire.interleave(keys, values)
    assert pairs == [part for pair in zip(keys, values, strict=True) for part in pair]
    payload = b"".join(wire.commands(b"HSET", b"{ns}", pairs, 6))
    assert _parse(payload) == [
        [b"HSET", b"{ns}", *pairs[0:6]],
        [b"HSET", b"{ns}", *pairs[6:12]],
        [b"HSET", b"{ns}", *pairs[12:14]],
    ]
    reads = wire.commands(b"HMGET", b"{ns}", keys, 10)
    assert _parse(b"".join(reads)) == [[b"HMGET", b"{ns}", *keys]]
    assert wire.commands(b"HDEL", b"{ns}", [], 10) == []


def test_a_transaction_wraps_its_commands_and_counts_their_replies() -> None:
    payload, replies = wire.transaction([wire.command(b"HSET", b"t", [b"prepare", b"7"])])
    assert _parse(payload) == [[b"MULTI"], [b"HSET", b"t", b"prepare", b"7"], [b"EXEC"]]
    assert replies == 3
