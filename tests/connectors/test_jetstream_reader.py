"""JetStream's per-stream reader (``_StreamReader``) against a real nats-server.

The case a loaded machine makes now and then, made here on purpose: a fetch
that gave up before the server's messages reached it. Those messages count
as delivered (no acks: the consumer's pending count leaves them out), and
no fetch of ours hands them over. The test plays the abandoned fetch with a
pull request whose reply goes to an inbox nobody reads.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from statestream.connectors.jetstream import _StreamReader

URL = "nats://127.0.0.1:4222"


@pytest.fixture
def stream() -> Iterator[str]:
    name = f"sst_{uuid.uuid4().hex[:10]}"
    yield name

    async def drop() -> None:
        import nats

        nc = await nats.connect(URL)
        try:
            await nc.jetstream().delete_stream(name)
        except Exception:
            pass
        finally:
            await nc.close()

    asyncio.run(drop())


async def _produce(nc: Any, stream: str, items: list[tuple[str, str]]) -> None:
    js = nc.jetstream()
    await js.add_stream(name=stream, subjects=[f"{stream}.a", f"{stream}.b"])
    for subject, line in items:
        await js.publish(f"{stream}.{subject}", line.encode())


async def _abandoned_fetch(nc: Any, stream: str, reading: _StreamReader, batch: int) -> None:
    """A pull request for ``batch`` messages delivered to an inbox whose messages nobody
    hands over: what the server does for a fetch that gave up before they came (the
    inbox has a subscriber, as the client's own has: the server skips one without)."""
    consumer = (await reading._sub.consumer_info()).name

    async def dropped(_msg: Any) -> None:
        return

    inbox = nc.new_inbox()
    abandoned = await nc.subscribe(inbox, cb=dropped)
    try:
        await nc.publish(
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}",
            json.dumps({"batch": batch, "expires": 500_000_000}).encode(),
            reply=inbox,
        )
        await nc.flush()
        for _ in range(100):  # until the server has delivered them
            if (await reading._sub.consumer_info()).num_pending == 0:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the server did not deliver to the abandoned fetch")
    finally:
        await abandoned.unsubscribe()


def test_entries_delivered_to_a_fetch_that_gave_up_are_read_again(stream: str) -> None:
    async def scenario() -> list[int]:
        import nats

        nc = await nats.connect(URL)
        try:
            await _produce(nc, stream, [("a", f"l{i}") for i in range(10)])
            reading = _StreamReader(nc, stream, None, 1, count=4, timeout_s=0.2)
            await reading.subscribe()
            seen = [n for n, _ in await reading.fetch()]  # 1..4
            await _abandoned_fetch(nc, stream, reading, batch=6)  # 5..10 lost to it
            assert await reading.fetch() == []
            assert not await reading.at_end(), "the consumer's count alone says the end"
            while len(seen) < 10:
                batch = await reading.fetch()
                seen += [n for n, _ in batch]
                if not batch:
                    assert not await reading.at_end()
            assert await reading.fetch() == []
            assert await reading.at_end()
            await reading.close()
            return seen
        finally:
            await nc.close()

    assert asyncio.run(scenario()) == list(range(1, 11))


def test_other_subjects_after_the_last_of_ours_end_the_stream_after_one_new_consumer(
    stream: str,
) -> None:
    """With a subject filter the stream's last sequence may be another subject's: one
    new consumer finds nothing more, and the second look says the end (no loop)."""

    async def scenario() -> tuple[list[bytes], bool, bool]:
        import nats

        nc = await nats.connect(URL)
        try:
            await _produce(nc, stream, [("a", "x"), ("a", "y"), ("b", "z1"), ("b", "z2")])
            reading = _StreamReader(nc, stream, f"{stream}.a", 1, count=10, timeout_s=0.2)
            await reading.subscribe()
            got = [data for _, data in await reading.fetch()]
            assert await reading.fetch() == []
            first = await reading.at_end()  # stream's last (4) >= seq (3): a new consumer
            assert await reading.fetch() == []
            second = await reading.at_end()
            await reading.close()
            return got, first, second
        finally:
            await nc.close()

    assert asyncio.run(scenario()) == ([b"x", b"y"], False, True)
