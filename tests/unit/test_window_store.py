"""A windowed bolt's windows in its task's state (statestream._window_store): each
checkpoint writes the tuples taken since the last one and deletes those no window
holds, and a core rebuilt from the committed state fires as the one that went on.
Against the memory provider's real transactional state."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from statestream._tuple import Fields, Origin, Tuple
from statestream._window_kinds import Aggregate, AggregateCore, SessionCore
from statestream._window_store import (
    WINDOW_KEY,
    WindowStore,
    chunk_len,
    decode_chunk,
    encode_chunk,
    is_window_key,
)
from statestream._windowing import Count, Duration, Event, Fire, TimeOrder, Watermarks, WindowCore
from statestream._windowing import WindowSpec as Spec
from statestream_providers.memory import MemoryStateProvider

ORIGIN = Origin("src", 3, 0, "default", Fields("n"))


def origin(component: str, task: int, index: int, stream: str) -> Origin:
    assert (component, task, index, stream) == ("src", 3, 0, "default")
    return ORIGIN


def new_state() -> Any:
    return MemoryStateProvider.from_config({"name": uuid.uuid4().hex}).get_state("w-0")


SUM = Aggregate(lambda: 0, lambda acc, t: acc + t.values[0], lambda a, b: a + b, lambda a: a)


def same(t: Tuple) -> Tuple:
    return t


CORES = {
    "sliding event time": lambda: WindowCore(Spec(Duration(30), Duration(10), event_time=True)),
    "tumbling event time": lambda: WindowCore(Spec(Duration(20), Duration(20), event_time=True)),
    "count": lambda: WindowCore(Spec(Count(4), Count(2))),
    "count length, duration slide": lambda: WindowCore(Spec(Count(3), Duration(10))),
    "duration length, count slide": lambda: WindowCore(
        Spec(Duration(20), Count(3), event_time=True)
    ),
    "sessions": lambda: SessionCore(Duration(10), True, lambda t: t.values[0] % 3),
    "aggregate": lambda: AggregateCore(
        Spec(Duration(20), Duration(10), event_time=True), SUM, same
    ),
}


def events(n: int = 90) -> list[tuple[int, Tuple]]:
    rnd = random.Random(11)
    return [(i * 4 + rnd.randrange(6), Tuple([i], ORIGIN)) for i in range(n)]


def seen(fires: list[Fire]) -> list[Any]:
    def values(evs: list[Any]) -> list[Any]:
        return [e.payload.values[0] for e in evs]

    return [
        (f.start, f.end, f.value, values(f.events), values(f.new), values(f.expired)) for f in fires
    ]


def feed(core: TimeOrder, part: list[tuple[int, Tuple]]) -> list[Fire]:
    out: list[Fire] = []
    for ts, t in part:
        out += core.add(ts, t) or []
        out += core.advance(ts - 6)
    return out


def checkpoint(store: WindowStore, state: Any, core: TimeOrder, txid: int) -> None:
    store.save(state, core, Watermarks(0))
    state.prepare_commit(txid)
    state.commit(txid)


@pytest.mark.parametrize("kind", CORES)
def test_a_core_rebuilt_from_any_checkpoint_fires_as_the_one_that_went_on(kind: str) -> None:
    evs = events()
    straight = CORES[kind]()
    whole = seen(feed(straight, evs) + straight.finish())
    assert whole
    for cut in (5, 23, 40, 61, 89):
        state, store, first = new_state(), WindowStore("w"), CORES[kind]()
        head: list[Fire] = []
        for txid, at in enumerate(range(0, cut, 7)):  # a checkpoint every 7 tuples
            head += feed(first, evs[at : min(at + 7, cut)])
            checkpoint(store, state, first, txid)
        again = CORES[kind]()
        assert WindowStore("w").load(state, again, Watermarks(0), origin)
        tail = feed(again, evs[cut:]) + again.finish()
        assert seen(head + tail) == whole, f"restored at {cut}"


def test_a_checkpoint_writes_the_tuples_taken_since_the_last_and_deletes_the_fired() -> None:
    core = CORES["tumbling event time"]()
    state, store = new_state(), WindowStore("w")
    stored_seqs: list[int] = []
    for txid in range(10):
        feed(core, events(200)[txid * 20 : txid * 20 + 20])
        before = set(store.chunks)
        checkpoint(store, state, core, txid)
        (new,) = set(store.chunks) - before  # one chunk a checkpoint: the new tuples
        chunk = decode_chunk(state.get(f"{WINDOW_KEY}/{new}"), origin)
        stored_seqs += [e.seq for e in chunk]
        # Those of the 20 taken since the last checkpoint that the core still holds
        # (the others fired and went already), each with its values.
        held_now = {e.seq for e in core.held()}
        taken = range(txid * 20, txid * 20 + 20)
        assert [e.seq for e in chunk] == [s for s in taken if s in held_now]
        assert [e.payload.values[0] for e in chunk] == [e.seq for e in chunk]
    assert len(stored_seqs) == len(set(stored_seqs)) > 100  # each tuple written once
    # What the state keeps is what the core holds, give or take the disorder:
    # the chunks of fired windows are deleted.
    live = [k for k in state if is_window_key(k) and k != WINDOW_KEY]
    assert len(live) == len(store.chunks) <= 3
    kept = [e.seq for k in live for e in decode_chunk(state.get(k), origin)]
    held = {e.seq for e in core.held()}
    assert held <= set(kept) and len(kept) < len(held) + 40


def test_a_tuple_json_cannot_store_fails_the_checkpoint_naming_the_fix() -> None:
    from statestream._errors import SerializationError

    core = CORES["count"]()
    core.add(1, Tuple([object()], ORIGIN))
    with pytest.raises(SerializationError, match="emit JSON values"):
        WindowStore("w").save(new_state(), core, Watermarks(0))


def test_a_chunk_reads_back_its_tuples_whatever_their_origins_and_seqs() -> None:
    # Columns with runs: seqs with gaps (tuples gone before the checkpoint), origins
    # that alternate and come back, a value that is itself a list.
    others = {
        ("src", 3, 0, "default"): ORIGIN,
        ("src", 4, 1, "default"): Origin("src", 4, 1, "default", Fields("n")),
        ("up", 9, 0, "side"): Origin("up", 9, 0, "side", Fields("n")),
    }
    order = [ORIGIN, *others.values(), ORIGIN]
    seqs = [5, 6, 7, 9, 10, 20, 21, 22, 23, 30]
    # As a window holds them: values and origin until read, a Tuple once read.
    held = [Event(100 + s % 4, s, [s, [s, "x"]], order[k % len(order)]) for k, s in enumerate(seqs)]
    for e in held[::3]:
        e.item()
    text = encode_chunk(held)
    assert chunk_len(text) == len(held)
    back = decode_chunk(text, lambda c, t, i, s: others[(c, t, i, s)])
    assert [(e.ts, e.seq, e.item().values, e.item().origin) for e in back] == [
        (e.ts, e.seq, e.item().values, e.item().origin) for e in held
    ]
    assert encode_chunk([]) and decode_chunk(encode_chunk([]), origin) == []


def test_an_event_makes_its_tuple_when_first_read_and_gives_the_same_one_after() -> None:
    values = [1, [2, "x"]]
    e = Event(7, 0, values, ORIGIN)
    t = e.item()
    assert isinstance(t, Tuple) and t.values is values and t.origin is ORIGIN and t["n"] == 1
    assert e.item() is t and e.payload is t and e.origin is None
    # A window's tuples are the same objects in get() and get_new() (identity, as Storm's).
    plain = Event(7, 1, "payload")
    assert plain.item() == "payload" and plain.payload == "payload"


def test_a_chunk_stored_as_rows_by_an_earlier_statestream_reads_back() -> None:
    rows = '{"o":[["src",3,0,"default"]],"e":[[7,0,0,[1]],[9,1,0,[2]]]}'
    back = decode_chunk(rows, origin)
    assert [(e.ts, e.seq, e.payload.values) for e in back] == [(7, 0, [1]), (9, 1, [2])]
    assert chunk_len(rows) == 2
