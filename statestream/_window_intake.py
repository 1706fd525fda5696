"""A windowed bolt's per-tuple path: a tuple into its window, and time moved on.

:class:`WindowIntake` is what :class:`~statestream._windowed.WindowedBoltExecutor`
runs for each tuple: the timestamp (event time: its field or the extractor;
processing time: the clock), the watermark's channel, the window core's
``add``, and the watermark moved once per watermark interval.
:class:`WindowEntry` is what the runtime calls for each data tuple: the take
and the ack of a tuple that fires nothing, the executor's own ``execute``
for everything else. Both are in the compiled core (statestream._core), as
the rest of the window model; the executor keeps the rest (the user's
window function, late tuples, retries, the checkpoint).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final

from ._clock import SystemClock
from ._errors import TupleError, caused_by
from ._tuple import TICK_STREAM, Origin, Tuple
from ._windowing import NO_FIRES, Fire, TimeOrder, Watermarks

__all__ = ["END_OF_INPUT_STREAM", "MOVE_EVERY", "WindowEntry", "WindowIntake"]

#: The stream of the tuple a runtime sends a windowed bolt at the end of a finite
#: input (``--until-idle``, every spout exhausted): every open window fires.
END_OF_INPUT_STREAM: Final = "__end_of_input"
# A static of this module, not a lookup in _tuple's globals per tuple.
_TICK: Final = TICK_STREAM
#: Event time: the tuples a task takes before the watermark moves, whatever its
#: interval (see the module's docstring). A few thousand keep a task's pending
#: tuples to a few MB, and a move's scan of the strays the lag keeps pending
#: (those stamped before a tuple taken earlier: at least as many as left
#: pending last time, so each is scanned twice at most) is paid over as many taken.
MOVE_EVERY: Final = 4096


class WindowIntake:
    """Tuples into ``core``, the watermark out of ``marks`` (see the module's docstring).

    ``field`` or ``extractor`` gives an event-time tuple's timestamp (neither:
    processing time, the ``clock``'s ``time()``); the watermark moves at most
    once every ``watermark_ms`` of the clock's ``monotonic()``, and at once on
    a tick. ``copy``: the window holds a tuple of its own (the values and origin),
    else the tuple delivered."""

    def __init__(
        self,
        component: str,
        core: TimeOrder,
        marks: Watermarks,
        clock: Any,
        watermark_ms: int,
        field: str | None,
        extractor: Callable[[Tuple], int] | None,
        copy: bool = True,
    ) -> None:
        self.component = component
        self.core = core
        self.marks = marks
        self.now: Callable[[], float] = getattr(clock, "time", clock.monotonic)
        self.monotonic: Callable[[], float] = clock.monotonic
        if type(clock) is SystemClock:
            # The same readings without an interpreted call per tuple.
            self.now, self.monotonic = time.time, time.monotonic
        # A float, not Any (the clock's type): native arithmetic per tuple.
        self.marked_at: float = clock.monotonic()
        self.watermark_ms = watermark_ms
        # Tuples taken since the watermark last moved, and how many move it now.
        self.since_move = 0
        self.move_at = MOVE_EVERY
        self.field = field
        self.extractor = extractor
        self.copy = copy
        #: The timestamp of the last tuple :meth:`take` found late.
        self.late_ts = 0
        # What take() needs of the origin of the tuple before, kept while the
        # tuples come from it (a fields grouping from one task: every tuple):
        # the watermark's channel and the timestamp field's index (-1: none, or
        # an extractor; timestamp() then says why).
        self._origin: Origin | None = None
        self._channel: tuple[Any, ...] = ()  # a Python tuple: no boxing per call
        self._index = -1

    def take(self, tup: Tuple) -> list[Fire] | None:
        """Take ``tup`` into the window: the windows to fire now, or None if it is
        late (older than the watermark; its timestamp is :attr:`late_ts`)."""
        core = self.core
        origin = tup.origin
        # The window holds a tuple of its own (copy): the values and the origin, not
        # the reliability slots of the one delivered, made into a Tuple when read
        # (Event.item); or that one, to ack it later. The values list itself, not
        # a copy: the runtime shares it between the tasks it delivers it to (and
        # the spout keeps it until the checkpoint commits), so a copy was one more
        # object per tuple held, for no reader.
        held: Any = tup.values if self.copy else tup
        kept = origin if self.copy else None
        if not core.event_time:
            return core.add(int(self.now() * 1000), held, kept)
        if origin is not self._origin:
            self._from(origin)
        ts: Any = tup.values[self._index] if self._index >= 0 else self.timestamp(tup)
        if isinstance(ts, bool) or not isinstance(ts, int):
            ts = self.timestamp(tup)  # raises, naming the value
        # Per input channel (upstream task and stream), as Flink's: tuples of one
        # task come in its order, those of two tasks interleave as their queues go.
        self.marks.track(self._channel, ts)
        if core.add(ts, held, kept) is None:
            self.late_ts = ts
            return None
        self.since_move += 1
        return self.on_clock(False)

    def on_clock(self, tick: bool) -> list[Fire]:
        """Time moved: the clock (processing time), or the watermark once per
        watermark interval or :attr:`move_at` tuples taken (event time). A tick
        moves it at once: ticks come at that interval, and on Spark once a batch
        (whose bolt instances do not outlive it)."""
        core = self.core
        if not core.event_time:
            return core.advance(int(self.now() * 1000))
        now = self.monotonic()
        if (
            not tick
            and self.since_move < self.move_at
            and (now - self.marked_at) * 1000 < self.watermark_ms
        ):
            return NO_FIRES
        self.marked_at = now
        self.since_move = 0
        mark = self.marks.next()
        if mark is None:
            return NO_FIRES
        fires = core.advance(mark)
        # The next move scans the strays the lag keeps pending: paid by as many taken.
        self.move_at = max(MOVE_EVERY, len(core.strays))
        return fires

    def _from(self, origin: Origin) -> None:
        """Tuples come from ``origin`` now: its channel and timestamp field's index."""
        self._origin = origin
        self._channel = (origin.component, origin.task, origin.stream)
        field = self.field
        ok = self.extractor is None and field is not None and field in origin.fields
        self._index = origin.fields.index_of(field) if ok and field is not None else -1

    def timestamp(self, tup: Tuple) -> int:
        """An event-time tuple's timestamp; TupleError naming the fix if it has none."""
        ts: Any
        try:
            if self.extractor is not None:
                ts = self.extractor(tup)
            else:
                assert self.field is not None
                ts = tup[self.field]
        except (KeyError, IndexError, TupleError) as exc:
            raise caused_by(
                TupleError(
                    f"windowed bolt {self.component!r}: the tuple from "
                    f"{tup.origin.component!r} has no timestamp field {self.field!r} "
                    f"({exc}); declare it, or use with_timestamp_extractor"
                ),
                exc,
            ) from exc
        if isinstance(ts, bool) or not isinstance(ts, int):
            raise TupleError(
                f"windowed bolt {self.component!r}: a timestamp is an int of "
                f"milliseconds since the epoch, got {ts!r} from {tup.origin.component!r}"
            )
        return ts


class WindowEntry:
    """A windowed bolt's entry for data tuples (the runtime's ``data_entry``).

    Most tuples fire nothing: such a tuple is taken into the window and acked
    here, in compiled code. Every other case goes to ``slow`` (the executor's
    ``execute``) or, once taken, to ``taken(tuple, fires)`` (fires: the
    windows due, None if the tuple was late): tick and end-of-input tuples,
    windows left unfired or a tuple being retried (``unfired`` and
    ``retrying`` are the executor's own list and dict, so their emptiness
    says so), and windows in memory (no :attr:`intake` set: every tuple goes
    to ``slow``)."""

    def __init__(
        self,
        slow: Callable[[Tuple], None],
        taken: Callable[[Tuple, list[Fire] | None], None],
        unfired: list[Fire],
        retrying: dict[int, Tuple],
    ) -> None:
        self.slow = slow
        self.taken = taken
        self.unfired = unfired
        self.retrying = retrying
        self.intake: WindowIntake | None = None
        self.ack: Callable[[Tuple], None] | None = None

    def execute(self, tup: Tuple) -> None:
        intake, ack = self.intake, self.ack
        stream = tup.origin.stream
        if (
            intake is None
            or ack is None
            or self.unfired
            or self.retrying
            or stream in (_TICK, END_OF_INPUT_STREAM)
        ):
            self.slow(tup)
            return
        fires = intake.take(tup)
        if fires is not None and not fires:
            ack(tup)
        else:
            self.taken(tup, fires)
