"""Windows larger than memory (statestream._window_spill): a core that keeps at most
``limit`` released tuples in memory fires exactly the windows of one that keeps
them all (tuples, new and expired ones), through checkpoints and restores, against
the memory provider's real transactional state; and the spill decision, table-tested.
(tests/conformance/test_window_spill_providers.py: the same on every provider.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from window_spill import ORIGIN, SPECS, Task, events, plain_fires, run_spilling, seen

from statestream._tuple import Tuple
from statestream._window_spill import Span, must_spill, spill_keep
from statestream._windowing import Count, Fire
from statestream._windowing import WindowSpec as Spec
from statestream_providers.memory import MemoryStateProvider


def new_state() -> Any:
    return MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("w-0")


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


@pytest.mark.parametrize("limit", [1, 4, 13, 1000])
@pytest.mark.parametrize("kind", SPECS)
def test_a_spilling_core_fires_as_one_that_keeps_every_tuple_in_memory(
    kind: str, limit: int
) -> None:
    evs = events()
    whole = plain_fires(SPECS[kind], evs)
    assert whole
    for cut in (3, 100, 239):
        got = run_spilling(SPECS[kind], limit, evs, cut, new_state())
        assert got == whole, f"restored at {cut}"


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


@pytest.mark.parametrize("kind", [k for k in SPECS if k.startswith("tumbling")])
def test_a_tumbling_window_lets_go_of_its_tuples_once_fired_and_reads_expired_ones_back(
    kind: str,
) -> None:
    """No tuple of a tumbling window is in the next one: the core holds a fired
    window's tuples by their bounds only (the store has them, those taken since the
    last checkpoint written at the fire), well under its limit, and the next
    window's expired tuples are read back from the store, equal to its tuples."""
    task = Task(SPECS[kind], 1000, new_state())
    core, last, fired = task.core, None, 0
    for i, (ts, t) in enumerate(events()):
        fires = (core.add(ts, t) or []) + core.advance(ts - 6)
        for _start, _end, now, new, gone in seen(fires):
            assert new == now  # tumbling: every tuple of a window is new in it
            assert gone == (last or [])
            last, fired = now, fired + 1
        if fires:
            assert core.prev == [] and core.prev_lo is not None and core.head_lo is None
        if i % 7 == 6:
            task.checkpoint(i // 7)
    assert fired > 10


def test_a_restored_core_knows_its_least_pending_tuple() -> None:
    """The least pending tuple bounds what the store keeps (keep()): a core restored
    with tuples the watermark has not passed reports it, as the core it restores."""
    state = new_state()
    task = Task(SPECS["tumbling event time"], 1000, state)
    for ts, t in events()[:50]:
        task.core.add(ts, t)
        task.core.advance(ts - 6)
    task.checkpoint(0)
    want = task.core.first_pending()
    assert want == min((e.ts, e.seq) for e in task.core.pending_now())
    again = Task(SPECS["tumbling event time"], 1000, state)
    again.load()
    assert again.core.first_pending() == want and again.core.keep() == task.core.keep()
