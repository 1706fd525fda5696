"""A core that spills (statestream._window_spill) against one that keeps every tuple
in memory: the helpers its unit and provider tests share."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from statestream._tuple import Fields, Origin, Tuple
from statestream._window_spill import SpillingWindowCore
from statestream._window_store import ChunkSpill, WindowStore
from statestream._windowing import Count, Duration, Fire, Watermarks, WindowCore
from statestream._windowing import WindowSpec as Spec

ORIGIN = Origin("src", 3, 0, "default", Fields("n"))

SPECS = {
    "sliding event time": Spec(Duration(30), Duration(10), event_time=True),
    "tumbling event time": Spec(Duration(20), Duration(20), event_time=True),
    "tumbling processing time": Spec(Duration(20), Duration(20)),
    "count": Spec(Count(9), Count(2)),
    "tumbling count": Spec(Count(12), Count(12)),
    "count length, duration slide": Spec(Count(11), Duration(10)),
    "duration length, count slide": Spec(Duration(40), Count(3), event_time=True),
}


def origin(component: str, task: int, index: int, stream: str) -> Origin:
    return ORIGIN


def events(n: int = 240, seed: int = 11) -> list[tuple[int, Tuple]]:
    rnd = random.Random(seed)
    return [(i * 2 + rnd.randrange(6), Tuple([i], ORIGIN)) for i in range(n)]


def seen(fires: list[Fire]) -> list[Any]:
    def values(evs: Any) -> list[Any]:
        return [e.payload.values[0] for e in evs]

    return [(f.start, f.end, values(f.events), values(f.new), values(f.expired)) for f in fires]


def feed(core: WindowCore, part: list[tuple[int, Tuple]], check: Callable[[], None]) -> list[Any]:
    out: list[Any] = []
    for ts, t in part:
        fires = (core.add(ts, t) or []) + core.advance(ts - 6)
        out += seen(fires)  # read back now: a span is valid while its window executes
        check()
    return out


class Task:
    """A spilling core over a state of the memory provider, checkpointed every 7 tuples."""

    def __init__(self, spec: Spec, limit: int, state: Any) -> None:
        self.state, self.store, self.limit = state, WindowStore("w"), limit
        self.core = SpillingWindowCore(spec, limit)
        self.core.spill = ChunkSpill(self.store, state, origin)
        self.spilled = False

    def check(self) -> None:
        core = self.core
        self.spilled |= core.head_lo is not None or core.prev_lo is not None
        # In memory: at most the limit of released tuples (the last window's too).
        assert core._in_memory() <= self.limit

    def checkpoint(self, txid: int) -> None:
        self.store.save(self.state, self.core, Watermarks(0))
        self.state.prepare_commit(txid)
        self.state.commit(txid)

    def load(self) -> None:
        self.store.load(self.state, self.core, Watermarks(0), origin)


def run_spilling(
    spec: Spec,
    limit: int,
    evs: list[tuple[int, Tuple]],
    cut: int,
    state: Any,
    reopen: Callable[[], Any] | None = None,
) -> list[Any]:
    """Fires of a spilling core over ``state`` up to ``cut``, then of one restored
    from the last checkpoint before it (which takes the tuples from there on
    again): from ``reopen()``, the state as a new process opens it, or from
    ``state`` rolled back."""
    task = Task(spec, limit, state)
    out: list[Any] = []
    committed = (0, 0)  # (tuples, fires) at the last commit
    for txid, at in enumerate(range(0, cut, 7)):
        out += feed(task.core, evs[at : at + 7], task.check)
        if at + 7 <= cut:
            task.checkpoint(txid)
            committed = (at + 7, len(out))
    if reopen is None:
        state.rollback()  # as a recovery: what was written since the last commit goes
    again = Task(spec, limit, state if reopen is None else reopen())
    again.load()
    again.check()
    rest = feed(again.core, evs[committed[0] :], again.check) + seen(again.core.finish())
    assert task.spilled or again.spilled or limit > 4  # every window holds 5 or more
    return out[: committed[1]] + rest


def plain_fires(spec: Spec, evs: list[tuple[int, Tuple]]) -> list[Any]:
    """The windows of a core that keeps every tuple in memory."""
    plain = WindowCore(spec)
    return feed(plain, evs, lambda: None) + seen(plain.finish())
