"""A spout sought back to an earlier position on the same instance, with messages
read ahead into its buffer (issue 44, item 6): the Spark driver does this to
read a failed batch again. Nothing read ahead from the old position may leak
out after the seek, and every message from the sought position arrives once,
in order. Run on every broker source of ``test_sources.py`` (the RabbitMQ
stream queue is the one that cancels and resubscribes its consumer).
"""

from __future__ import annotations

from typing import Any

import pytest
from test_sources import Recorder, Source, opened, pump, source  # noqa: F401

LINES = [f"m{i}" for i in range(5000)]


def after_seek(spout: Any, where: Any, count: int) -> list[str]:
    """Seek ``spout`` to ``where``, then the ``count`` lines it emits (acking each)."""
    spout.seek(where)
    recorder = Recorder()
    spout.collector = recorder  # what the runtime's collector would see from now on
    pump(spout, recorder, count)
    return recorder.lines()


@pytest.mark.parametrize("ahead", [30, 250])
def test_a_seek_back_drops_what_was_read_ahead_and_replays_each_message_once(
    source: Source,  # noqa: F811
    ahead: int,
) -> None:
    source.produce(LINES)
    spout = source.spout()
    recorder = opened(spout, None)
    pump(spout, recorder, 20)
    where = spout.position()  # type: ignore[attr-defined]
    pump(spout, recorder, 20 + ahead)  # and more read into the buffer meanwhile
    assert recorder.lines() == LINES[: 20 + ahead]
    got = after_seek(spout, where, len(LINES) - 20)
    # pump stops at count: one more call must find nothing left over.
    extra = Recorder()
    spout.collector = extra
    for _ in range(20):
        spout.next_tuple()
    spout.close()
    assert got == LINES[20:]
    assert extra.lines() == []
