"""Windows beyond Storm's: session windows and aggregating windows (pure, as
:mod:`statestream._windowing`, whose :class:`~statestream._windowing.TimeOrder`
releases their tuples in timestamp order).

* :class:`SessionCore`: a session is a run of tuples (per key, when a key is
  given) with less than ``gap`` between one and the next; it is ``[first
  timestamp, last timestamp + gap)`` and fires once the watermark (or the
  clock) reaches its end. Tuples come in timestamp order, so sessions only
  grow at their end: a tuple within ``gap`` of the last session of its key
  joins it, any other starts a new one.
* :class:`AggregateCore`: Flink's ``AggregateFunction`` over aligned duration
  windows. No tuple is kept: each adds its value to the accumulator of its
  *pane* (one slide long), and a window's result merges the ``length /
  slide`` panes it spans, so a tuple costs one ``add`` however many windows
  overlap it, and a sliding hour holds one accumulator per slide. Sessions
  with an aggregate keep one accumulator per session.

Accumulators and keys go into the checkpoint: they must be JSON values (a
number, a string, a list, a dict with string keys).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._errors import ConfigError
from ._windowing import Duration, Event, Fire, TimeOrder, WindowSpec, least, order_key

__all__ = ["Aggregate", "AggregateCore", "SessionCore", "hashable"]


@dataclass(frozen=True)
class Aggregate:
    """Flink's AggregateFunction as four functions: ``init() -> acc``, ``add(acc,
    value) -> acc``, ``merge(acc, acc) -> acc``, ``result(acc) -> result``."""

    init: Callable[[], Any]
    add: Callable[[Any, Any], Any]
    merge: Callable[[Any, Any], Any]
    result: Callable[[Any], Any]

    def __reduce__(self) -> tuple[Any, ...]:
        # Compiled (mypyc), the class pickles only by what this says.
        return (Aggregate, (self.init, self.add, self.merge, self.result))


class SessionCore(TimeOrder):
    """Session windows (see the module's docstring). ``key_of(payload)`` gives a
    tuple's session key (None: one session stream per task); with ``aggregate``
    each session keeps an accumulator of ``value_of(payload)`` (None: of the payload)
    instead of its tuples."""

    def __init__(
        self,
        gap: Duration,
        event_time: bool,
        key_of: Callable[[Any], Any],
        aggregate: Aggregate | None = None,
        value_of: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__(event_time)
        self.gap = gap.ms
        self.key_of = key_of
        self.aggregate = aggregate
        self.value_of = value_of
        # key -> [start, end, events or None, accumulator or None]
        self.open: dict[Any, list[Any]] = {}
        self.folded: dict[Any, list[Event]] = {}  # in memory, with an aggregate: key -> tuples

    def _release(self, event: Event, fires: list[Fire]) -> None:
        key = self.key_of(event.item())
        session = self.open.get(key)
        if session is not None and event.ts >= session[1]:
            self._fire(key, fires)  # complete: every tuple to come is later
            session = None
        agg = self.aggregate
        if session is None:
            session = self.open[key] = [
                event.ts,
                event.ts + self.gap,
                None if agg else [],
                agg.init() if agg else None,
            ]
        else:
            session[1] = max(session[1], event.ts + self.gap)
        if agg is not None:
            item = event.item()
            value = item if self.value_of is None else self.value_of(item)
            session[3] = agg.add(session[3], value)
            if not self.stored:  # in memory: its tuples let go of when it fires
                self.folded.setdefault(key, []).append(event)
        else:
            session[2].append(event)

    def _reach(self, upto: int, fires: list[Fire]) -> None:
        for key in sorted((k for k, s in self.open.items() if s[1] <= upto), key=self._end):
            self._fire(key, fires)

    def _close(self, fires: list[Fire]) -> None:
        for key in sorted(self.open, key=self._end):
            self._fire(key, fires)

    def _end(self, key: Any) -> tuple[int, int]:
        start, end = self.open[key][0], self.open[key][1]
        return end, start

    def _fire(self, key: Any, fires: list[Fire]) -> None:
        start, end, events, acc = self.open.pop(key)
        if self.aggregate is not None:
            fires.append(Fire(start, end, [], None, self.aggregate.result(acc)))
        else:
            fires.append(Fire(start, end, events))
        if not self.stored:
            self.gone.extend(events if events is not None else self.folded.pop(key, []))

    # The tuples of a session are named by their seq (a session's are not a run
    # of those released: sessions of other keys interleave).
    def _shape(self) -> dict[str, Any]:
        return {
            "sessions": [
                [key, s[0], s[1], None if s[2] is None else [e.seq for e in s[2]], s[3]]
                for key, s in self.open.items()
            ]
        }

    def keep(self) -> tuple[int, int] | None:
        firsts = [order_key(s[2][0]) for s in self.open.values() if s[2]]
        return least(self.first_pending(), *firsts)

    def held(self) -> list[Event]:
        events = [e for s in self.open.values() for e in s[2] or ()]
        return sorted(events + self.pending_now(), key=order_key)

    def _rebuild(self, state: dict[str, Any], released: list[Event]) -> None:
        by_seq = {e.seq: e for e in released}
        self.open = {
            hashable(key): [start, end, None if seqs is None else [by_seq[q] for q in seqs], acc]
            for key, start, end, seqs, acc in state["sessions"]
        }

    def __len__(self) -> int:
        return (
            len(self.pending) + len(self.strays) + sum(len(s[2] or ()) for s in self.open.values())
        )


class AggregateCore(TimeOrder):
    """Aligned duration windows that keep an accumulator per pane, not tuples: of
    ``value_of(payload)`` of each tuple (None: of the payload, without a call)."""

    def __init__(
        self,
        spec: WindowSpec,
        aggregate: Aggregate,
        value_of: Callable[[Any], Any] | None = None,
    ) -> None:
        super().__init__(spec.event_time)
        length, slide = spec.length, spec.sliding
        if not isinstance(length, Duration) or not isinstance(slide, Duration):
            raise ConfigError(
                "with_aggregate needs a window of durations (with_window(Duration, Duration) "
                "or with_tumbling_window(Duration)): a count window keeps its tuples"
            )
        if length.ms % slide.ms:
            raise ConfigError(
                f"with_aggregate needs a window length that is a multiple of its slide: "
                f"{length!r} and {slide!r}"
            )
        self.length = length.ms
        self.slide = slide.ms
        self.aggregate = aggregate
        self.value_of = value_of
        self.panes: dict[int, Any] = {}  # pane start -> accumulator
        self.folded: dict[int, list[Event]] = {}  # in memory: pane start -> its tuples
        self.next_end: int | None = None

    def _release(self, event: Event, fires: list[Fire]) -> None:
        ts = event.ts
        self._reach(ts, fires)
        pane = ts - ts % self.slide
        agg = self.aggregate
        acc = self.panes.get(pane)
        item = event.item()
        value = item if self.value_of is None else self.value_of(item)
        self.panes[pane] = agg.add(agg.init() if acc is None else acc, value)
        if not self.stored:  # in memory: its tuples let go of with the pane
            self.folded.setdefault(pane, []).append(event)
        if self.next_end is None:
            self.next_end = pane + self.slide

    def _reach(self, upto: int, fires: list[Fire]) -> None:
        agg = self.aggregate
        while self.next_end is not None and self.next_end <= upto:
            end = self.next_end
            start = end - self.length
            accs = [self.panes[p] for p in range(start, end, self.slide) if p in self.panes]
            if accs:
                acc = accs[0]
                for other in accs[1:]:
                    acc = agg.merge(acc, other)
                fires.append(Fire(start, end, [], None, agg.result(acc)))
            for p in [p for p in self.panes if p < end + self.slide - self.length]:
                del self.panes[p]  # in no window to come
                if not self.stored:
                    self.gone.extend(self.folded.pop(p, ()))
            self.next_end = end + self.slide if self.panes else None

    def _close(self, fires: list[Fire]) -> None:
        while self.panes and self.next_end is not None:
            self._reach(self.next_end, fires)

    def _shape(self) -> dict[str, Any]:
        return {
            "next_end": self.next_end,
            "panes": [[p, acc] for p, acc in sorted(self.panes.items())],
        }

    def keep(self) -> tuple[int, int] | None:
        return self.first_pending()

    def held(self) -> list[Event]:
        return sorted(self.pending_now(), key=order_key)

    def _rebuild(self, state: dict[str, Any], released: list[Event]) -> None:
        self.next_end = state["next_end"]
        self.panes = {int(p): acc for p, acc in state["panes"]}

    def __len__(self) -> int:
        return len(self.pending) + len(self.strays)


def hashable(key: Any) -> Any:
    """A key as JSON gave it back, hashable again (a list was a tuple)."""
    return tuple(hashable(k) for k in key) if isinstance(key, list) else key
