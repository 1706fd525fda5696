"""The watermark of a windowed bolt's task (Storm's, per input channel as Flink's).

Apart from :mod:`statestream._windowing`'s window model, which imports it:
the watermark is what the intake (statestream._window_intake) moves and the
store (statestream._window_store) keeps, the window core only what it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

__all__ = ["NEVER", "Watermarks"]

#: Before any timestamp: a stream that has sent nothing holds the watermark back.
NEVER: Final = -(1 << 62)


class Watermarks:
    """Storm's watermark: the least, over the input streams seen, of the latest
    timestamp of each, minus the lag; it only moves forward. The executor's
    streams are input channels (upstream task and stream, as Flink's): the
    tuples of two upstream tasks interleave as their queues go, so a stream of
    several tasks is not in any order the lag could bound."""

    def __init__(self, lag_ms: int, streams: Iterable[Any] = ()) -> None:
        self.lag_ms = lag_ms
        self._latest: dict[Any, int] = dict.fromkeys(streams, NEVER)
        self.current: int | None = None
        # The channel tracked last and its latest timestamp, written into _latest
        # when read (tuples come from one channel for long runs: no dict write,
        # nor hash of the channel, per tuple).
        self._hot: Any = None
        self._hot_ts = NEVER

    @property
    def latest(self) -> dict[Any, int]:
        """Each stream's latest timestamp (streams that sent nothing yet: none)."""
        if self._hot is not None:
            self._latest[self._hot] = self._hot_ts
        return self._latest

    @latest.setter
    def latest(self, latest: dict[Any, int]) -> None:
        self._latest, self._hot = latest, None

    def track(self, stream: Any, ts: int) -> None:
        """A tuple stamped ``ts`` came from ``stream``."""
        if stream is not self._hot:
            latest = self.latest  # the hot channel's written
            self._hot, self._hot_ts = stream, latest.get(stream, NEVER)
        if ts > self._hot_ts:
            self._hot_ts = ts

    def next(self) -> int | None:
        """The watermark now, if it moved forward (None if not, or no stream sent yet)."""
        latest = self.latest
        if not latest:
            return None
        least = min(latest.values())
        if least == NEVER:
            return None
        mark = least - self.lag_ms
        if self.current is not None and mark <= self.current:
            return None
        self.current = mark
        return mark
