"""Windows as a pure model: which tuples each window holds and when it fires.

No runtime, no clock and no store here: :class:`WindowCore` is given each
tuple with its timestamp and the watermark, and answers with the windows to
fire (:class:`Fire`); :class:`Watermarks` turns the timestamps seen per input
stream into the watermark. The windowed bolt's executor
(:mod:`statestream._windowed`) feeds them from the runtime and keeps them in
the bolt's checkpointed state (:mod:`statestream._window_store`: each tuple
once, and ``TimeOrder.state()``, which of the stored tuples the core holds),
so a window's tuples, its trigger state and the watermark come back with the
last commit.

One model covers Storm's four combinations (length and sliding each a
:class:`Count` or a :class:`Duration`) in event time and in processing time:

* Tuples are *released* into the window buffer in timestamp order: in event
  time once the watermark passes them (a tuple older than the watermark is
  late), in processing time at once, stamped with the runtime's clock.
* A :class:`Duration` slide fires at each multiple of the slide since the
  epoch that the watermark (event time) or the clock (processing time)
  reaches; the window is ``[end - length, end)`` for a duration length, the
  last ``n`` tuples before ``end`` for a count length. Windows are aligned,
  start inclusive and end exclusive, as Flink's; an empty window is skipped,
  and so is a count-length window with no tuple new since the last one.
* A :class:`Count` slide fires at every ``n``-th released tuple; the window is
  the last ``length`` tuples (count), or those within ``length`` of that
  tuple's timestamp (duration).
* :meth:`WindowCore.finish` (the end of a finite input) releases everything
  and fires every window still open, a count window with fewer than its
  slide's tuples included, so that a bounded run ends with all its windows.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from typing import Any, Final

from mypy_extensions import mypyc_attr

from ._errors import ConfigError
from ._tuple import Origin, Tuple
from ._window_marks import Watermarks
from ._window_spec import Count, Duration, WindowSpec, in_memory_refusal

__all__ = [
    "NO_FIRES",
    "Count",
    "Duration",
    "Event",
    "Fire",
    "TimeOrder",
    "Watermarks",
    "WindowCore",
    "WindowSpec",
    "in_memory_refusal",
    "items",
]


@mypyc_attr(acyclic=True)
class Event:
    """A tuple in a window: its timestamp (ms), its arrival number and what it carries.

    A plain class, not a NamedTuple: one is made for every tuple a window takes,
    and a NamedTuple's constructor runs as interpreted Python even in the
    compiled core. Compiled, it is not tracked by the cycle collector (as
    :class:`~statestream._tuple.Tuple`; a window holds every event it has
    not let go of, which each collection of the old generation walked): a
    payload must not refer back to the event carrying it.

    With an ``origin`` the payload is a tuple's values: :meth:`item` makes the
    Tuple when first read (a window holds its tuples unread until they fire,
    and a Tuple each was a third of what it held, read cold)."""

    __slots__ = ("origin", "payload", "seq", "ts")

    def __init__(self, ts: int, seq: int, payload: Any, origin: Origin | None = None) -> None:
        self.ts = ts
        self.seq = seq
        self.payload = payload
        self.origin = origin

    def item(self) -> Any:
        """What the window gives for this event: its payload, the Tuple made once."""
        origin = self.origin
        if origin is None:
            return self.payload
        tup = Tuple(self.payload, origin)
        self.payload, self.origin = tup, None
        return tup

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Event)
            and other.ts == self.ts
            and other.seq == self.seq
            and other.payload == self.payload
            and other.origin is self.origin
        )

    def __repr__(self) -> str:
        return f"Event({self.ts}, {self.seq}, {self.payload!r}, {self.origin!r})"


class Fire:
    """One window to fire: ``[start, end)`` in ms, its tuples (timestamp order), and
    an aggregating window's result instead of tuples.

    :attr:`new` (the tuples not in the window fired before this one) and
    :attr:`expired` (those of that window not in this one) are worked out when
    read, from ``prev``, that window's tuples: most window functions read
    neither. Every window of a :class:`WindowCore` is a run of its tuples in
    their release order, ``(ts, seq)``, so each is a prefix or suffix found by
    bisection. Without ``prev`` every tuple is new and none expired. A core
    that spilled (statestream._window_spill) gives all three as
    :class:`~statestream._window_spill.Span` (iterable, read back from the store
    chunk by chunk) and passes ``new`` and ``expired`` itself."""

    __slots__ = ("_expired", "_new", "end", "events", "prev", "start", "value")

    def __init__(
        self,
        start: int,
        end: int,
        events: Any,  # list[Event] | Span
        prev: list[Event] | None = None,
        value: Any = None,
        new: Any = None,
        expired: Any = None,
    ) -> None:
        self.start = start
        self.end = end
        self.events = events
        self.prev = prev
        self.value = value
        self._new = new
        self._expired = expired

    @property
    def new(self) -> Any:
        if self._new is not None:
            return self._new
        prev, events = self.prev, self.events
        if not prev or not events:
            return events
        last = prev[-1]
        return events[bisect.bisect_right(events, (last.ts, last.seq), key=order_key) :]

    @property
    def expired(self) -> Any:
        if self._expired is not None:
            return self._expired
        prev, events = self.prev, self.events
        if not prev:
            return []
        if not events:
            return prev
        first = events[0]
        return prev[: bisect.bisect_left(prev, (first.ts, first.seq), key=order_key)]


#: What a take or a move that fires nothing returns: one list, never appended to
#: (a new empty list per tuple taken was an allocation and a free a tuple).
NO_FIRES: Final[list[Fire]] = []


class TimeOrder:
    """What every kind of window shares: tuples released in timestamp order (event
    time: once the watermark passes them, pending until then; processing
    time: at once), late ones refused, the end of input. A subclass says what a
    released tuple does (``_release``), what the watermark or clock reaching a
    time fires (``_reach``) and what the end of input fires (``_close``)."""

    def __init__(self, event_time: bool) -> None:
        self.event_time = event_time
        # Event time: the tuples not yet released, in two lists in arrival order (so by
        # seq): ``pending``, a run in timestamp order (each at or after the one before,
        # as most tuples come), and ``strays``, those that came stamped before the
        # run's last (a disorder within the lag). A watermark's move takes a prefix of
        # the run (a bisection) and scans the strays: the run's tuples it leaves
        # pending are not read (a scan of them all made the watermark move rarely).
        self.pending: list[Event] = []
        self.strays: list[Event] = []
        self._first: Event | None = None  # the least (ts, seq) pending: keep() reads it
        self.seq = 0
        self.watermark: int | None = None  # event time: tuples older are late
        self.late = 0
        self.last_ts: int | None = None  # the latest released timestamp
        self.fresh: list[Event] = []  # taken since the last take_fresh(): to store
        # In memory (in_memory()): nothing is stored, and the tuples no window to
        # come holds are listed here instead (take_gone), to be acked.
        self.stored = True
        self.gone: list[Event] = []

    def add(self, ts: int, payload: Any, origin: Origin | None = None) -> list[Fire] | None:
        """Take a tuple stamped ``ts`` (``payload``, or its values and ``origin``:
        see :class:`Event`); None if it is late (older than the watermark).

        In processing time the tuple is released at once (``ts`` is the clock
        now): the windows it closes or fills fire, and are returned.
        """
        if self.event_time:
            if self.watermark is not None and ts < self.watermark:
                self.late += 1
                return None
            event = Event(ts, self.seq, payload, origin)
            pending = self.pending
            if pending and ts < pending[-1].ts:
                self.strays.append(event)
            else:
                pending.append(event)
            first = self._first
            if first is None or ts < first.ts:  # an equal ts came before: its seq is less
                self._first = event
            if self.stored:
                self.fresh.append(event)
            self.seq += 1
            return NO_FIRES
        if self.last_ts is not None and ts < self.last_ts:
            # The clock went back: stamped with the last time instead, so that the
            # tuples stay in (ts, seq) order, as the stored state describes them.
            ts = self.last_ts
        event = Event(ts, self.seq, payload, origin)
        if self.stored:
            self.fresh.append(event)
        self.seq += 1
        fires: list[Fire] = []
        self._take(event, fires)
        return fires

    def advance(self, watermark: int) -> list[Fire]:
        """Move the watermark (event time) or the clock (processing time) to
        ``watermark``: release what it passed and fire the windows it closed."""
        fires: list[Fire] = []
        if self.event_time:
            if self.watermark is not None and watermark <= self.watermark:
                return fires
            self.watermark = watermark
            self._release_before(watermark, fires)
        self._reach(watermark, fires)
        return fires

    def _release_before(self, watermark: int | None, fires: list[Fire]) -> None:
        """Release the pending tuples older than ``watermark`` (None: all), in
        ``(ts, seq)`` order: a prefix of the run, and the strays older than it,
        sorted by ts, stably, and merged in (a sort of all of them paid a call of
        its key and a comparison of two-digit ints per tuple)."""
        pending, strays = self.pending, self.strays
        if not pending and not strays:
            return
        kept: list[Event] = []
        if watermark is None:
            run, self.pending = pending, []
        else:
            cut = bisect.bisect_left(pending, watermark, key=_ts)
            run, self.pending = pending[:cut], pending[cut:]
            if strays:
                gone: list[Event] = []
                for e in strays:
                    if e.ts >= watermark:
                        kept.append(e)
                    else:
                        gone.append(e)
                strays = gone
        self.strays = kept
        # The least left pending: the run's first, or a stray before it.
        low = self.pending[0] if self.pending else None
        for e in kept:
            if low is None or _before(e, low):
                low = e
        self._first = low
        if strays:
            strays.sort(key=_ts)
            merged: list[Event] = []
            i, n = 0, len(strays)
            for e in run:
                while i < n and _before(strays[i], e):
                    merged.append(strays[i])
                    i += 1
                merged.append(e)
            merged.extend(strays[i:])
            run = merged
        if run:
            self._take_run(run, fires)

    def _take_run(self, events: list[Event], fires: list[Fire]) -> None:
        """Release ``events`` (not empty, in ``(ts, seq)`` order), one by one."""
        for e in events:
            self._take(e, fires)

    def finish(self) -> list[Fire]:
        """The end of the input: release everything, fire every window still open."""
        fires: list[Fire] = []
        self._release_before(None, fires)
        self._close(fires)
        if self.event_time and self.last_ts is not None:
            self.watermark = max(self.watermark or 0, self.last_ts + 1)
        if not self.stored:
            self._let_go()
        return fires

    def in_memory(self) -> None:
        """Keep the windows in memory only (Storm's at-least-once windows): no
        tuple is kept for the store, and :meth:`take_gone` gives those that no
        window to come holds."""
        self.stored = False
        self.fresh = []

    def take_gone(self) -> list[Event]:
        """In memory: the tuples let go of since the last call (no window to come
        holds them; after :meth:`finish`, every one held)."""
        gone, self.gone = self.gone, []
        return gone

    def _let_go(self) -> None:
        """The end of input: every tuple held is let go of (kept for a window still)."""
        self.gone.extend(self.held())

    def _take(self, event: Event, fires: list[Fire]) -> None:
        self.last_ts = event.ts
        self._release(event, fires)

    def _release(self, event: Event, fires: list[Fire]) -> None:
        raise NotImplementedError

    def _reach(self, upto: int, fires: list[Fire]) -> None:
        raise NotImplementedError

    def _close(self, fires: list[Fire]) -> None:
        raise NotImplementedError

    # -- the checkpoint ---------------------------------------------------------------
    # A core is stored in two parts (statestream._window_store): its tuples, each
    # written once, in the checkpoint after it was taken (take_fresh), and state(),
    # which says without a tuple in it which of the stored ones it holds. So a
    # checkpoint writes what changed since the last one, not the whole window.
    def take_fresh(self) -> list[Event]:
        """The tuples taken (not late) since the last call, in arrival order."""
        fresh, self.fresh = self.fresh, []
        return fresh

    def state(self) -> dict[str, Any]:
        """The core without its tuples, in JSON's types (:meth:`rebuild` takes it back)."""
        return {
            "v": 2,
            "seq": self.seq,
            "watermark": self.watermark,
            "late": self.late,
            "last_ts": self.last_ts,
            **self._shape(),
        }

    def keep(self) -> tuple[int, int] | None:
        """The least ``(ts, seq)`` of a tuple held (None if none is): every stored tuple
        before it may be deleted. Tuples come in after it (the watermark or the clock
        is past every one released), so the bound only moves forward."""
        raise NotImplementedError

    def held(self) -> list[Event]:
        """Every tuple held, in ``(ts, seq)`` order."""
        raise NotImplementedError

    def first_pending(self) -> tuple[int, int] | None:
        """The least ``(ts, seq)`` of the pending tuples, None if there is none."""
        # Kept up by add() and the releases: a scan of every pending tuple at each
        # checkpoint touched them all (at 100,000s of tuples a second, cold ones).
        first = self._first
        if first is None or not (self.pending or self.strays):
            return None
        return (first.ts, first.seq)

    def pending_now(self) -> list[Event]:
        """The pending tuples (not released yet), the run's then the strays."""
        return self.pending + self.strays

    def set_pending(self, ordered: list[Event]) -> None:
        """Hold ``ordered`` (in ``(ts, seq)`` order) pending, and no others."""
        self.pending, self.strays = ordered, []
        self._first = ordered[0] if ordered else None

    def rebuild(self, state: dict[str, Any], events: Iterable[Event]) -> None:
        """Become the core whose :meth:`state` is ``state``, given its stored tuples
        (``events``: those it holds, and any others, in any order)."""
        if state.get("v") != 2:
            raise ConfigError(
                f"a window's stored state has version {state.get('v')!r}, not 2 (it was "
                "stored by an older statestream): clear the topology's state "
                "(statestream state clear) and start its windows afresh"
            )
        self.seq = int(state["seq"])
        self.watermark = state["watermark"]
        self.late = int(state["late"])
        self.last_ts = state["last_ts"]
        self.fresh = []
        ordered = sorted(events, key=order_key)
        mark = self.watermark
        if not self.event_time:
            released, waiting = ordered, []
        elif mark is None:
            released, waiting = [], ordered
        else:
            # Released iff older than the watermark: add() refuses those as late.
            cut = bisect.bisect_left(ordered, mark, key=_ts)
            # By (ts, seq): in seq order for equal ts, as add() keeps it.
            released, waiting = ordered[:cut], ordered[cut:]
        self.set_pending(waiting)
        self._rebuild(state, released)

    def snapshot(self) -> dict[str, Any]:
        """:meth:`state` with every tuple held, as ``[ts, seq, payload]``: one JSON value."""
        return {**self.state(), "events": [[e.ts, e.seq, e.item()] for e in self.held()]}

    def restore(self, snap: dict[str, Any]) -> None:
        """Become the core :meth:`snapshot` described."""
        self.rebuild(snap, (Event(*e) for e in snap["events"]))

    def _shape(self) -> dict[str, Any]:
        raise NotImplementedError

    def _rebuild(self, state: dict[str, Any], released: list[Event]) -> None:
        raise NotImplementedError

    def __len__(self) -> int:
        """Tuples held."""
        return len(self.pending) + len(self.strays)


def items(events: Iterable[Event]) -> list[Any]:
    """What a window gives for ``events`` (:meth:`Event.item`), in compiled code."""
    return [e.item() for e in events]


def order_key(e: Event) -> tuple[int, int]:
    """A tuple's place in time: released tuples go in this order."""
    return (e.ts, e.seq)


def _ts(e: Event) -> int:
    return e.ts


def _before(a: Event, b: Event) -> bool:
    """Whether ``a`` is released before ``b``: ``(ts, seq)`` order, without tuples."""
    return a.ts < b.ts or (a.ts == b.ts and a.seq < b.seq)


def least(*keys: tuple[int, int] | None) -> tuple[int, int] | None:
    """The least of the ``(ts, seq)`` keys that are not None."""
    present = [k for k in keys if k is not None]
    return min(present) if present else None


class WindowCore(TimeOrder):
    """The tuples of one task's windows, and when they fire (see the module's docstring)."""

    def __init__(self, spec: WindowSpec) -> None:
        super().__init__(spec.event_time)
        self.spec = spec
        self._slide_ms = spec.sliding.ms if isinstance(spec.sliding, Duration) else 0
        self._slide_n = spec.sliding.n if isinstance(spec.sliding, Count) else 0
        self._len_ms = spec.length.ms if isinstance(spec.length, Duration) else 0
        self._len_n = spec.length.n if isinstance(spec.length, Count) else 0
        self.buffer: deque[Event] = deque()  # released, in timestamp order
        self.since_fire = 0  # tuples released since the last count-slide fire
        self.next_end: int | None = None  # the next duration-slide boundary
        self.prev: list[Event] = []  # the last fired window's tuples
        # Released tuples spilled to the store (statestream._window_spill): none here.
        self.head_n = 0

    def _reach(self, upto: int, fires: list[Fire]) -> None:
        self._fire_boundaries(upto, fires)

    def _take_run(self, events: list[Event], fires: list[Fire]) -> None:
        # A duration length and slide: the tuples up to the next boundary join the
        # buffer in one extend, the boundaries fired before the first past it; as
        # _release per tuple, without a call and a check of the kind per tuple.
        slide = self._slide_ms
        if not (slide and self._len_ms and self._fits(len(events))):
            super()._take_run(events, fires)
            return
        buffer = self.buffer
        i, n = 0, len(events)
        while i < n:
            # The first past the boundary fires it and opens its own window.
            self._release(events[i], fires)
            end = self.next_end
            assert end is not None  # a duration slide's release sets it
            j = i + 1
            while j < n and events[j].ts < end:
                j += 1
            buffer.extend(events[i + 1 : j])
            i = j
        self.last_ts = events[-1].ts

    def _fits(self, n: int) -> bool:
        """Whether ``n`` more tuples may be released at once (no spill due among them)."""
        return True

    def _close(self, fires: list[Fire]) -> None:
        if self._slide_n:
            if self.since_fire:
                # The window the next slide would have fired, of the tuples there
                # are: a tumbling count window's last, partial one holds only its own.
                missing = self._slide_n - self.since_fire
                self._fire_count(self.buffer[-1].ts, fires, max(1, self._len_n - missing))
        else:
            while self.buffer and self.next_end is not None:
                self._fire_boundaries(self.next_end, fires)

    # -- firing ---------------------------------------------------------------------
    def _release(self, event: Event, fires: list[Fire]) -> None:
        if self._slide_ms:
            self._fire_boundaries(event.ts, fires)
            if self.next_end is None:  # the first window to hold this tuple
                self.next_end = event.ts - event.ts % self._slide_ms + self._slide_ms
        self.buffer.append(event)
        if self._slide_n:
            self.since_fire += 1
            if self.since_fire >= self._slide_n:
                self._fire_count(event.ts, fires)
        elif self._len_n and len(self.buffer) + self.head_n > self._len_n:
            # A count length: only the last n tuples can be in a window to come.
            self._evict_to(len(self.buffer) + self.head_n - self._len_n)

    def _fire_boundaries(self, upto: int, fires: list[Fire]) -> None:
        """Fire each duration-slide boundary ``end <= upto`` whose window has tuples.

        Every buffered tuple is older than :attr:`next_end` (a release fires the
        boundaries up to its tuple first), so a boundary's window holds the
        buffer's tuples from its start on; once none is left, the boundaries
        wait for the next tuple instead of stepping through empty windows."""
        slide = self._slide_ms
        buffer = self.buffer
        while slide and self.next_end is not None and self.next_end <= upto:
            end = self.next_end
            if self._len_ms:
                start = end - self._len_ms
                events = self._since(start)
            else:
                events = self._last(self._len_n)
                start = self._first_ts(events, end)
                if not events or self._fired_already(events):
                    # The last n tuples, fired already: not again at every boundary
                    # (forever, in processing time); the next tuple starts anew.
                    self.next_end = None
                    return
            if events:
                self._fire(start, end, events, fires)
            self._evict_before(end + slide)
            self.next_end = end + slide if buffer else None

    def _fire_count(self, ref: int, fires: list[Fire], last: int = 0) -> None:
        self.since_fire = 0
        buffer = self.buffer
        if self._len_n:
            events = self._last(last or self._len_n)
            start = self._first_ts(events, ref)
        else:
            start = ref - self._len_ms + 1
            events = self._since(start)
        self._fire(start, ref + 1, events, fires)
        if self._len_ms:
            self._evict_below(start)
        elif len(buffer) + self.head_n > self._len_n:
            self._evict_to(len(buffer) + self.head_n - self._len_n)

    # The window a fire takes from the buffer: overridden by a core that spills
    # (statestream._window_spill), whose buffer is partly in the store.
    def _since(self, start: int) -> Any:
        """The buffered tuples from ``start`` on."""
        buffer = self.buffer
        if not buffer or buffer[0].ts >= start:  # in ts order: all of them
            return list(buffer)
        return [e for e in buffer if e.ts >= start]

    def _last(self, n: int) -> Any:
        """The last ``n`` buffered tuples."""
        return list(self.buffer)[-n:]

    def _first_ts(self, events: Any, default: int) -> int:
        return int(events[0].ts) if events else default

    def _fired_already(self, events: Any) -> bool:
        """Whether the last fired window ends with the same tuple as ``events``."""
        return bool(self.prev) and events[-1].seq == self.prev[-1].seq

    def _fire(self, start: int, end: int, events: Any, fires: list[Fire]) -> None:
        # The new and expired tuples are worked out if read (Fire.new, .expired).
        fires.append(Fire(start, end, events, self.prev))
        self.prev = events

    # -- eviction -------------------------------------------------------------------
    def _evict_before(self, next_end: int) -> None:
        """After a duration-slide fire: drop what no window ending at ``next_end`` or
        later holds."""
        if self._len_ms:
            self._evict_below(next_end - self._len_ms)
        elif len(self.buffer) + self.head_n > self._len_n:
            self._evict_to(len(self.buffer) + self.head_n - self._len_n)

    def _evict_below(self, ts: int) -> None:
        buffer = self.buffer
        if buffer and buffer[-1].ts < ts:  # in ts order: all of them
            if not self.stored:
                self.gone.extend(buffer)
            buffer.clear()
            return
        while buffer and buffer[0].ts < ts:
            e = buffer.popleft()
            if not self.stored:
                self.gone.append(e)

    def _evict_to(self, n: int) -> None:
        buffer = self.buffer
        for _ in range(n):
            e = buffer.popleft()
            if not self.stored:
                self.gone.append(e)

    def _let_go(self) -> None:
        # Those of the last window that are buffered still; the rest went already.
        self.gone.extend(self.buffer)

    # -- the checkpoint ---------------------------------------------------------------
    # What is held is three runs of the tuples in (ts, seq) order, each told by
    # where it starts: the pending ones (the watermark on), the buffer (a suffix
    # of those released) and the last window fired (a run of those released).
    def _shape(self) -> dict[str, Any]:
        prev = self.prev
        return {
            "since_fire": self.since_fire,
            "next_end": self.next_end,
            "buffer_from": order_key(self.buffer[0]) if self.buffer else None,
            "prev": [order_key(prev[0]), len(prev)] if prev else None,
        }

    def keep(self) -> tuple[int, int] | None:
        return least(
            order_key(self.buffer[0]) if self.buffer else None,
            order_key(self.prev[0]) if self.prev else None,
            self.first_pending(),
        )

    def held(self) -> list[Event]:
        by_seq = {e.seq: e for e in self.prev}
        by_seq.update((e.seq, e) for e in self.buffer)
        by_seq.update((e.seq, e) for e in self.pending_now())
        return sorted(by_seq.values(), key=order_key)

    def _rebuild(self, state: dict[str, Any], released: list[Event]) -> None:
        self.since_fire = int(state["since_fire"])
        self.next_end = state["next_end"]
        start = state["buffer_from"]
        at = (
            len(released)
            if start is None
            else bisect.bisect_left(released, tuple(start), key=order_key)
        )
        self.buffer = deque(released[at:])
        self.prev = []
        if state["prev"] is not None:
            first, n = state["prev"]
            at = bisect.bisect_left(released, tuple(first), key=order_key)
            if n < 0:  # stored by a core that spills: up to its last tuple, prev_to
                n = bisect.bisect_right(released, tuple(state["prev_to"]), key=order_key) - at
            self.prev = released[at : at + n]

    def __len__(self) -> int:
        """Tuples held (buffered and pending)."""
        return len(self.buffer) + len(self.pending) + len(self.strays)
