"""Windows larger than memory (statestream._window_spill): a core that keeps at most
``limit`` released tuples in memory fires exactly the windows of one that keeps
them all (tuples, new and expired ones), through checkpoints and restores, against
the memory provider's real transactional state; and the spill decision, table-tested."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from statestream._tuple import Fields, Origin, Tuple
from statestream._window_spill import Span, SpillingWindowCore, must_spill, spill_keep
from statestream._window_store import ChunkSpill, WindowStore
from statestream._windowing import Count, Duration, Fire, Watermarks, WindowCore
from statestream._windowing import WindowSpec as Spec
from statestream_providers.memory import MemoryStateProvider

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


@pytest.mark.parametrize(
    ("in_memory", "limit", "spills"),
    [
        (10, 0, False),  # no limit: never
        (10, 10, False),  # at the limit: not yet
        (11, 10, True),
        (2, 1, True),
        (1, 1, False),
        (10**7, 10**6, True),
    ],
)
def test_a_core_spills_once_it_holds_more_than_its_limit(
    in_memory: int, limit: int, spills: bool
) -> None:
    assert must_spill(in_memory, limit) is spills


@pytest.mark.parametrize(("limit", "kept"), [(1, 1), (2, 1), (3, 1), (50, 25), (10**6, 500_000)])
def test_a_spill_keeps_half_the_limit_in_memory(limit: int, kept: int) -> None:
    assert spill_keep(limit) == kept


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
        # As a recovery: what was written since the last commit (chunks of spills) goes.
        self.state.rollback()
        self.store.load(self.state, self.core, Watermarks(0), origin)


def new_state() -> Any:
    return MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("w-0")


def run_spilling(spec: Spec, limit: int, evs: list[tuple[int, Tuple]], cut: int) -> list[Any]:
    """Fires of a spilling core up to ``cut``, then of one restored from the last
    checkpoint before it (which takes the tuples from there on again)."""
    state = new_state()
    task = Task(spec, limit, state)
    out: list[Any] = []
    committed = (0, 0)  # (tuples, fires) at the last commit
    for txid, at in enumerate(range(0, cut, 7)):
        out += feed(task.core, evs[at : at + 7], task.check)
        if at + 7 <= cut:
            task.checkpoint(txid)
            committed = (at + 7, len(out))
    again = Task(spec, limit, state)
    again.load()
    again.check()
    rest = feed(again.core, evs[committed[0] :], again.check) + seen(again.core.finish())
    assert task.spilled or again.spilled or limit > 4  # every window holds 5 or more
    return out[: committed[1]] + rest


@pytest.mark.parametrize("limit", [1, 4, 13, 1000])
@pytest.mark.parametrize("kind", SPECS)
def test_a_spilling_core_fires_as_one_that_keeps_every_tuple_in_memory(
    kind: str, limit: int
) -> None:
    evs = events()
    plain = WindowCore(SPECS[kind])
    whole = feed(plain, evs, lambda: None) + seen(plain.finish())
    assert whole
    for cut in (3, 100, 239):
        assert run_spilling(SPECS[kind], limit, evs, cut) == whole, f"restored at {cut}"


def test_a_spilled_window_is_read_back_chunk_by_chunk() -> None:
    """A window of 200 tuples with 10 in memory: a span that reads the store each time."""
    state = new_state()
    task = Task(Spec(Count(200), Count(200)), 10, state)
    fires: list[Fire] = []
    for i in range(200):
        fires += task.core.add(i, Tuple([i], ORIGIN)) or []
        if i % 50 == 49:
            task.checkpoint(i)
    (fire,) = fires
    assert isinstance(fire.events, Span) and len(fire.events.mem) <= 10
    assert [e.payload.values[0] for e in fire.events] == list(range(200))
    assert len(fire.events) == 200
    assert len(task.store.chunks) > 2  # written between checkpoints, as it spilled
