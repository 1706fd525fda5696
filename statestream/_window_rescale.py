"""Time windows moved with their keys when a windowed bolt's parallelism changes.

A windowed bolt's task holds the windows of every key it is sent (one
:class:`~statestream._windowing.WindowCore` a task, stored by
:mod:`statestream._window_store`). At a start with another parallelism,
:func:`rescale_windows` takes the stored windows of the old tasks and deals
their tuples to the new tasks by key, as the fields grouping now sends them:

* the old tasks must be at the same window boundary (the next window to fire,
  ``next_end``, is one ``E`` for every task that has one, and no task's
  watermark, nor a tuple of a task without one, is before ``E - slide``): every
  window that ends before ``E`` fired
  on every task, none from ``E`` on did, and a tuple replayed after the start
  falls in windows that have not fired. Otherwise the move is refused, naming
  the fix (start once more with the old parallelism, or at the end of input);
* a new task's watermark is the least of the old ones (a replayed tuple any old
  task would take is taken), its buffer the tuples of the windows from ``E`` on,
  its last window the one ending at ``E - slide`` (for ``get_expired``), and its
  tuples are numbered again in ``(ts, old task, old seq)`` order;
* each input channel's latest timestamp is the least the old tasks saw.

Only event-time windows whose length and slide are durations move: a count
window counts per task, as Storm's, and an aggregating or session window keeps
accumulators of several keys together; those keep refusing a change.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._errors import ConfigError
from ._tuple import Origin
from ._window_store import chunk_len, delete_stored, read_stored, stored_texts, write_stored
from ._windowing import Duration, Event, WindowSpec

__all__ = ["StoredWindows", "move_windows", "rescale_windows"]

#: One task's stored windows: the core's state, the channels' latest timestamps
#: (``[component, task, stream, ts]``) and the tuples held.
StoredWindows = tuple[dict[str, Any], list[list[Any]], list[Event]]


def rescale_windows(
    component: str,
    spec: WindowSpec,
    olds: Sequence[StoredWindows],
    owner_of: Callable[[Any], int],
    n: int,
) -> list[StoredWindows]:
    """The stored windows of ``n`` new tasks from those of the old tasks (see the
    module's docstring); ``owner_of(payload)`` is the new task of a tuple."""
    if not (
        spec.event_time and isinstance(spec.length, Duration) and isinstance(spec.sliding, Duration)
    ):
        raise ConfigError(
            f"windowed bolt {component!r} changed parallelism: only event-time windows of "
            "durations move with their keys (a count window counts per task, as Storm's); "
            "keep its previous parallelism, or clear its state (statestream state clear)"
        )
    length, slide = spec.length.ms, spec.sliding.ms
    ends = {s["next_end"] for s, _, _ in olds if s["next_end"] is not None}
    end = max(ends) if ends else None
    marks = [s["watermark"] for s, _, _ in olds if s["watermark"] is not None]
    watermark = min(marks) if marks else None
    # Every tuple held must fall in windows from E on (a task without a watermark
    # yet holds only tuples it has not released).
    floor = end - slide if end is not None else watermark
    behind = len(ends) > 1 or (floor is not None and any(m < floor for m in marks))
    behind = behind or any(
        floor is not None and e.ts < floor
        for s, _, evs in olds
        if s["watermark"] is None
        for e in evs
    )
    if behind:
        raise ConfigError(
            f"windowed bolt {component!r} changed parallelism, but its tasks' windows are "
            f"not at one boundary (next windows end at {sorted(ends)}, watermarks "
            f"{sorted(marks)}): a window would fire twice or never. Start it once more with "
            "its previous parallelism (a checkpoint later its tasks agree), or rescale after "
            "the end of input"
        )
    everything = sorted(
        ((e.ts, task, e.seq, e.payload) for task, (_, _, evs) in enumerate(olds) for e in evs),
        key=lambda r: r[:3],
    )
    dealt: list[list[Event]] = [[] for _ in range(n)]
    for ts, _, _, payload in everything:
        mine = dealt[owner_of(payload)]
        mine.append(Event(ts, len(mine), payload))
    latest: dict[tuple[Any, ...], int] = {}
    for _, channels, _ in olds:
        for c, t, s, ts in channels:
            latest[(c, t, s)] = min(ts, latest.get((c, t, s), ts))
    channels = [[c, t, s, ts] for (c, t, s), ts in latest.items()]
    return [_new_task(evs, watermark, end, length, slide, channels) for evs in dealt]


def _new_task(
    events: list[Event],
    watermark: int | None,
    end: int | None,
    length: int,
    slide: int,
    channels: list[list[Any]],
) -> StoredWindows:
    released = [e for e in events if watermark is not None and e.ts < watermark]
    buffer = [e for e in released if end is not None and e.ts >= end - length]
    prev = (
        [] if end is None else [e for e in released if end - slide - length <= e.ts < end - slide]
    )
    state = {
        "v": 2,
        "seq": len(events),
        "watermark": watermark,
        "late": 0,
        "last_ts": released[-1].ts if released else None,
        "since_fire": 0,
        "next_end": end if buffer else None,
        "buffer_from": [buffer[0].ts, buffer[0].seq] if buffer else None,
        "prev": [[prev[0].ts, prev[0].seq], len(prev)] if prev else None,
    }
    return state, channels, events


def move_windows(
    component: str,
    spec: WindowSpec,
    sources: Sequence[Any],
    targets: Sequence[Any],
    staging: Any,
    owner_of: Callable[[Any], int],
    origin: Callable[[str, int, int, str], Origin],
) -> int:
    """Move the windows stored in the old tasks' states (``sources``) to the new
    tasks' (``targets``); return how many tuples they hold.

    Crash-safe with statestream._rescale's journal: the new windows are first
    committed in ``staging`` (the topology's ``$layout``), and a start that
    finds them there again (the move was cut short) writes those, not the
    sources it may have half rewritten. Each write is committed without a txid,
    as the rest of a rescale's moves."""
    key = f"windows:{component}"
    staged = staging.get(key)
    if staged is None:
        olds = [w for w in (read_stored(s, origin) for s in sources) if w is not None]
        if not olds:
            return 0
        news = rescale_windows(component, spec, olds, owner_of, len(targets))
        staged = [stored_texts(*w) for w in news]
        staging.put(key, staged)
        staging.commit()
    if len(staged) != len(targets):
        raise ConfigError(
            f"windowed bolt {component!r}: a move of its windows to {len(staged)} tasks was "
            f"cut short, and it now has {len(targets)}: start it with {len(staged)} tasks once"
        )
    for s in sources:  # before the puts: a source may be a target's namespace too
        delete_stored(s)
        s.commit()
    held = 0
    for t, texts in zip(targets, staged, strict=True):
        write_stored(t, texts)
        t.commit()
        held += chunk_len(texts[1])
    staging.delete(key)
    staging.commit()
    return held
