"""Windows larger than memory: the oldest tuples of a window live in the store only.

Storm's ``PersistentWindowedBoltExecutor`` keeps a window's events in the
state in partitions and at most ``maxEventsInMemory`` of them in memory,
reading the others back when a window is evaluated. Ours are already in the
store (:mod:`statestream._window_store` writes each tuple once, in a chunk),
so :class:`SpillingWindowCore` (a :class:`~statestream._windowing.WindowCore`
with a ``limit``) keeps in memory only the newest tuples of its buffer:

* when the tuples it holds in memory (the buffer and the last window fired)
  pass ``limit``, it *spills*: it has the tuples taken since the last
  checkpoint written as a chunk (``spill.flush``), so that every tuple it
  holds is in the store, and lets go of its oldest buffered tuples down to
  half the limit, keeping only their bounds (the *head*: the stored tuples
  from ``head_lo`` to ``head_hi``) and of the last window's (``prev_lo`` to
  ``prev_hi``);
* a window to fire is then a :class:`Span`: the head, read back from the
  store chunk by chunk each time it is iterated (``spill.read``), and the
  buffered tuples in memory; ``get_new()`` and ``get_expired()`` are spans
  of the same kind;
* eviction moves the head's lower bound (a timestamp, or a number of tuples
  to skip, resolved by one read when it is needed) without reading, unless
  the whole head goes;
* a restore reads the stored tuples in order, chunk by chunk, keeping the
  last ``limit / 2`` in memory (:meth:`SpillingWindowCore.rebuild`);
* a tumbling window's tuples (in no window after it) are let go of as soon
  as it has fired, kept by their bounds as the last window's: the next
  window's ``get_expired()`` reads them back. Held a window longer, they were
  a window's worth more memory, freed cold.

What is stored does not change: a window's shape (``TimeOrder.state()``)
names its buffer and its last window by their first tuple as before, so a
checkpoint of a core that spills restores into one that does not, and back.
The tuples the watermark has not released yet (those within the lag) stay
in memory; session windows keep theirs in memory, and aggregating windows
hold none.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ._windowing import Event, Fire, WindowCore, WindowSpec, least, order_key

__all__ = ["DEFAULT_MAX_EVENTS_IN_MEMORY", "Span", "SpillingWindowCore", "pinned", "spill_keep"]

#: Storm's default ``maxEventsInMemory``.
DEFAULT_MAX_EVENTS_IN_MEMORY = 1_000_000

Key = tuple[int, int]
#: Reads the stored tuples whose ``(ts, seq)`` is within ``lo`` and ``hi`` (None:
#: no bound), in that order.
Reader = Callable[[Key | None, Key | None], Iterator[Event]]

#: Before every tuple's key: seq is never negative, so ``(ts, -1)`` is a bound
#: below every tuple stamped ``ts``.
_BEFORE = (-(1 << 62), -1)


def spill_keep(limit: int) -> int:
    """The tuples a spill keeps in memory: half the limit (so that the next spill
    is half a limit of tuples away, and a chunk is not written per tuple), one at least."""
    return max(1, limit // 2)


def must_spill(in_memory: int, limit: int) -> bool:
    """Whether a core holding ``in_memory`` tuples in memory spills (limit 0: never)."""
    return 0 < limit < in_memory


class Span:
    """Released tuples in ``(ts, seq)`` order: those stored from ``lo`` to ``hi``
    (``lo`` None: none), read back from the store chunk by chunk each time the
    span is iterated, then ``mem``, in memory. Valid while the window executes:
    a checkpoint after it may delete what it reads."""

    __slots__ = ("hi", "lo", "mem", "read")

    def __init__(self, read: Reader, lo: Key | None, hi: Key, mem: list[Event]) -> None:
        self.read = read
        self.lo = lo if lo is not None and lo <= hi else None
        self.hi = hi
        self.mem = mem

    def __iter__(self) -> Iterator[Event]:
        if self.lo is not None:
            yield from self.read(self.lo, self.hi)
        yield from self.mem

    def __len__(self) -> int:
        n = len(self.mem)
        if self.lo is not None:
            for _ in self.read(self.lo, self.hi):
                n += 1
        return n

    def __bool__(self) -> bool:
        # A span of a buffer holds at least its tuple in memory; one of expired
        # tuples may read none back, which this does not read to tell.
        return bool(self.mem) or self.lo is not None

    def first_ts(self) -> int:
        return self.lo[0] if self.lo is not None else self.mem[0].ts

    def last_key(self) -> Key:
        return order_key(self.mem[-1]) if self.mem else self.hi


def pinned(fires: Iterable[Fire]) -> Key | None:
    """The least stored key that windows due and not fired yet read back."""
    los = [s.lo for f in fires for s in (f.events, f.new, f.expired) if isinstance(s, Span)]
    return least(*los)


def _first_key(events: Any) -> Key:
    if isinstance(events, Span):
        return events.lo if events.lo is not None else order_key(events.mem[0])
    return order_key(events[0])


class SpillingWindowCore(WindowCore):
    """A :class:`WindowCore` that keeps at most ``limit`` released tuples in memory
    (see the module's docstring). ``spill`` (set once the task has its state)
    writes the tuples taken since the last checkpoint (``flush(core)``) and reads
    stored ones back (``read(lo, hi)``); until then the core does not spill."""

    def __init__(self, spec: WindowSpec, limit: int) -> None:
        super().__init__(spec)
        self.limit = limit
        self.spill: Any = None
        # The head: stored tuples from head_lo (a tuple's key, or a bound below
        # the first) to head_hi, before the buffer's; head_skip of them evicted
        # already (head_lo not moved yet); head_n (WindowCore's) of them held,
        # -1 when a duration length evicted by time (it never counts them).
        self.head_lo: Key | None = None
        self.head_hi: Key = _BEFORE
        self.head_skip = 0
        # The stored part of the last window fired (before self.prev, in memory).
        self.prev_lo: Key | None = None
        self.prev_hi: Key = _BEFORE
        # Tumbling: no tuple is in two windows, so the one fired last is kept for
        # the next one's get_expired() only, which few window functions call.
        self._tumbling = bool(spec.length == spec.sliding)

    # -- spilling ---------------------------------------------------------------------
    def _release(self, event: Event, fires: list[Fire]) -> None:
        super()._release(event, fires)
        # Counted twice when in both (the last window's tuples mostly are), then once.
        if (
            must_spill(len(self.buffer) + len(self.prev), self.limit)
            and self.spill is not None
            and must_spill(self._in_memory(), self.limit)
        ):
            self._spill()

    def _fits(self, n: int) -> bool:
        # Released at once, the buffer and the last window (which fires take from
        # it) stay under the limit whatever fires among them: no spill was due.
        return self.spill is None or not must_spill(
            len(self.prev) + 2 * (len(self.buffer) + n), self.limit
        )

    def _in_memory(self) -> int:
        """Tuples held in memory: the buffer, and those of the last window before it."""
        buffer, prev = self.buffer, self.prev
        if not buffer:
            return len(prev)
        first = order_key(buffer[0])
        return len(buffer) + sum(1 for e in prev if order_key(e) < first)

    def _spill(self) -> None:
        self.spill.flush(self)  # every tuple held is in the store now
        buffer = self.buffer
        k = len(buffer) - spill_keep(self.limit)
        if k > 0:
            if self.head_lo is None:
                self.head_lo, self.head_n, self.head_skip = order_key(buffer[0]), 0, 0
            e = buffer[0]
            for _ in range(k):
                e = buffer.popleft()
            self.head_hi = order_key(e)
            if self.head_n >= 0:
                self.head_n += k
        if self.prev:
            if self.prev_lo is None:
                self.prev_lo = order_key(self.prev[0])
            self.prev_hi = order_key(self.prev[-1])
            self.prev = []

    def _headless(self) -> bool:
        return self.head_lo is None

    def _drop_head(self) -> None:
        self.head_lo, self.head_hi, self.head_n, self.head_skip = None, _BEFORE, 0, 0

    def _nth_key(self, lo: Key, k: int) -> Key:
        """The key of the ``k``-th (from 0) stored tuple of the head from ``lo`` on."""
        for i, e in enumerate(self.spill.read(lo, self.head_hi)):
            if i == k:
                return order_key(e)
        raise AssertionError(f"the window's store holds fewer than {k + 1} tuples from {lo}")

    def _resolve_head(self) -> None:
        """Move ``head_lo`` past the tuples evicted by count (one read)."""
        if self.head_lo is not None and self.head_skip:
            self.head_lo = self._nth_key(self.head_lo, self.head_skip)
            self.head_skip = 0

    def _whole(self) -> Any:
        """The whole buffer: a list, or a :class:`Span` with a head."""
        if self.head_lo is None:
            return list(self.buffer)
        self._resolve_head()
        return Span(self.spill.read, self.head_lo, self.head_hi, list(self.buffer))

    # -- the window a fire takes -------------------------------------------------------
    # With a head, a fire first evicts what no window from this one on holds (as it
    # would after), so that the window is the whole buffer: its bounds, not a filter.
    def _since(self, start: int) -> Any:
        if self.head_lo is None:
            return super()._since(start)
        self._evict_below(start)
        return self._whole()

    def _last(self, n: int) -> Any:
        if self.head_lo is None:
            return super()._last(n)
        total = self.head_n + len(self.buffer)
        if total > self._len_n:
            self._evict_to(total - self._len_n)
            total = self._len_n
        if self._headless():  # a method: the compiled core would take None for a tuple
            return super()._last(n)
        self._resolve_head()
        skip = total - n  # a last, partial window (the end of input) is shorter
        if skip <= 0:
            return self._whole()
        if skip >= self.head_n:
            return list(self.buffer)[skip - self.head_n :]
        assert self.head_lo is not None
        lo = self._nth_key(self.head_lo, skip)
        return Span(self.spill.read, lo, self.head_hi, list(self.buffer))

    def _first_ts(self, events: Any, default: int) -> int:
        if isinstance(events, Span):
            return events.first_ts()
        return super()._first_ts(events, default)

    def _fired_already(self, events: Any) -> bool:
        last = events.last_key() if isinstance(events, Span) else order_key(events[-1])
        prev = self._prev_last()
        return prev is not None and last == prev

    def _prev_last(self) -> Key | None:
        if self.prev:
            return order_key(self.prev[-1])
        return self.prev_hi if self.prev_lo is not None else None

    def _fire(self, start: int, end: int, events: Any, fires: list[Fire]) -> None:
        self._fire_window(start, end, events, fires)
        if self._tumbling and self.prev and self.spill is not None:
            # Its tuples go once in the store (those taken since the last checkpoint
            # are written now): let go of when the window function is through with
            # them (still warm), not a window later; get_expired() reads them back.
            if self.fresh:
                self.spill.flush(self)
            prev = self.prev
            if self.prev_lo is None:
                self.prev_lo = order_key(prev[0])
            self.prev_hi, self.prev = order_key(prev[-1]), []

    def _fire_window(self, start: int, end: int, events: Any, fires: list[Fire]) -> None:
        if self.prev_lo is None and not isinstance(events, Span):
            super()._fire(start, end, events, fires)
            return
        # Windows are runs of the released tuples in (ts, seq) order, each from
        # a later tuple than the last: new ones are after the last window's last
        # tuple, expired ones its tuples before this window's first.
        read = self.spill.read
        first, prev_last = _first_key(events), self._prev_last()
        new: Any = events
        if prev_last is not None and prev_last >= first:
            if isinstance(events, Span):
                lo = (prev_last[0], prev_last[1] + 1)
                mem = [e for e in events.mem if order_key(e) > prev_last]
                new = Span(read, lo, events.hi, mem) if events.lo is not None else mem
            else:
                new = [e for e in events if order_key(e) > prev_last]
        gone = [e for e in self.prev if order_key(e) < first]
        expired: Any = gone
        if self.prev_lo is not None and self.prev_lo < first:
            expired = Span(read, self.prev_lo, min(self.prev_hi, (first[0], first[1] - 1)), gone)
        fires.append(Fire(start, end, events, new=new, expired=expired))
        if isinstance(events, Span) and events.lo is not None:
            self.prev_lo, self.prev_hi, self.prev = events.lo, events.hi, events.mem
        else:
            self.prev_lo = None
            self.prev = events.mem if isinstance(events, Span) else events

    # -- eviction -----------------------------------------------------------------------
    def _evict_below(self, ts: int) -> None:
        if self.head_lo is not None:
            if self.head_hi[0] >= ts:
                # Every tuple in memory is at head_hi's time or later: the head's
                # bound moves, read when a window needs it.
                if self.head_lo < (ts, -1):
                    self.head_lo, self.head_n = (ts, -1), -1
                return
            self._drop_head()
        super()._evict_below(ts)

    def _evict_to(self, n: int) -> None:
        if self.head_lo is not None:
            if n < self.head_n:
                self.head_skip += n
                self.head_n -= n
                return
            n -= self.head_n
            self._drop_head()
        super()._evict_to(n)

    # -- the checkpoint -----------------------------------------------------------------
    def _shape(self) -> dict[str, Any]:
        shape = super()._shape()
        if self.head_lo is not None:
            self._resolve_head()
            shape["buffer_from"] = self.head_lo
        if self.prev_lo is not None:
            # Its first tuple's key or a bound below it, and its last one's: a core
            # that does not spill restores it as well (WindowCore._rebuild).
            shape["prev"] = [self.prev_lo, -1]
            shape["prev_to"] = self._prev_last()
        return shape

    def keep(self) -> tuple[int, int] | None:
        return least(super().keep(), self.head_lo, self.prev_lo)

    def held(self) -> list[Event]:
        spilled: list[Event] = []
        if self.head_lo is not None:
            spilled += list(self._whole())[: -len(self.buffer) or None]
        if self.prev_lo is not None:
            spilled += list(self.spill.read(self.prev_lo, self.prev_hi))
        by_seq = {e.seq: e for e in spilled}
        by_seq.update((e.seq, e) for e in super().held())
        return sorted(by_seq.values(), key=order_key)

    def rebuild(self, state: dict[str, Any], events: Iterable[Event]) -> None:
        """As :meth:`TimeOrder.rebuild`; with ``spill`` set, reading the stored tuples
        from the store in order instead of ``events``, and spilling as it goes."""
        if self.spill is None:
            super().rebuild(state, events)
            return
        super().rebuild(state, ())  # the numbers (checked), no tuple yet
        self._drop_head()
        self.prev_lo, self.prev_hi = None, _BEFORE
        read = self.spill.read
        upper: Key | None = None
        if self.event_time:
            mark = self.watermark
            # Not released yet (the watermark on): in memory, in order.
            self.set_pending(list(read(None if mark is None else (mark, -1), None)))
            if mark is None:
                return
            upper = (mark, -2)
        start = state["buffer_from"]
        if start is not None:
            self._load_buffer(read(tuple(start), upper))
        if state["prev"] is not None:
            first, n = state["prev"]
            to = state.get("prev_to")
            if to is None:  # stored by a core that did not spill: n tuples from first
                last: Key = tuple(first)
                for i, e in enumerate(read(tuple(first), upper)):
                    last = order_key(e)
                    if i + 1 == n:
                        break
                to = last
            self.prev_lo, self.prev_hi = tuple(first), tuple(to)

    def _load_buffer(self, events: Iterator[Event]) -> None:
        """The buffer from ``events`` (in order): the last tuples in memory, the
        others spilled."""
        keep = spill_keep(self.limit) if self.limit else 0
        tail: deque[Event] = deque(maxlen=keep or None)
        n, lo, hi = 0, None, _BEFORE
        for e in events:
            if keep and len(tail) == keep:
                hi = order_key(tail[0])  # out of memory: the head's last
            if lo is None:
                lo = order_key(e)
            tail.append(e)
            n += 1
        self.buffer = deque(tail)
        if n > len(tail):
            self.head_lo, self.head_hi, self.head_n = lo, hi, n - len(tail)

    def __len__(self) -> int:
        """Tuples held in memory, and those spilled when their number is known."""
        return len(self.buffer) + len(self.pending) + len(self.strays) + max(self.head_n, 0)
