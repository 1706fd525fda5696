"""A windowed bolt's windows in its task's state, written incrementally.

A checkpoint writes what changed since the last one, not the whole window
(Storm's ``PersistentWindowedBoltExecutor`` and Flink's window state keep a
window's tuples in the state store the same way):

* the tuples the window core took since the last checkpoint, once, as one
  *chunk* under a key of its own (``$window/<n>``), columns of JSON: the
  distinct origins, the timestamps, the values, and the seqs and origins
  as runs (:func:`encode_chunk`);
* the chunks whose tuples the core holds none of any more (every one is
  before :meth:`~statestream._windowing.TimeOrder.keep`) deleted;
* the core without its tuples (:meth:`~statestream._windowing.TimeOrder.state`,
  a few numbers: which of the stored tuples it holds), the watermark's
  channels and the list of live chunks (with each one's least and greatest
  ``(ts, seq)``), under ``$window``.

A restore reads ``$window``, then its chunks, and rebuilds the core from them.
A core that spills (:mod:`statestream._window_spill`) has a chunk written
between checkpoints too (:meth:`WindowStore.write_fresh`: its tuples are then
all in the store), and reads stored tuples back in order, chunk by chunk
(:meth:`WindowStore.read`), when a window fires and when it is restored.
The keys, their values and every write go through the task's state, so they
are prepared and committed (or rolled back) with the rest of it.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from ._errors import SerializationError, caused_by
from ._tuple import Origin, Tuple
from ._windowing import Event, TimeOrder, Watermarks, least, order_key

__all__ = ["WINDOW_KEY", "ChunkSpill", "WindowStore", "is_window_key"]

#: The key of the window's own state in the task's state (hidden from the user's);
#: its chunks are under ``WINDOW_KEY + "/" + n``.
WINDOW_KEY = "$window"
_CHUNK = WINDOW_KEY + "/"


def is_window_key(key: Any) -> bool:
    """Whether ``key`` is one of the window's own state keys."""
    return isinstance(key, str) and (key == WINDOW_KEY or key.startswith(_CHUNK))


def encode_chunk(events: list[Event]) -> str:
    """Tuples held (each event's payload a :class:`Tuple`, or its values with its
    origin) as one JSON text, by columns:
    ``o`` the distinct origins, ``t`` the timestamps, ``v`` the values, and ``s``
    the seqs and ``i`` the origins' indexes as runs ``[first, n]`` (a chunk's
    seqs mostly count up by one and its tuples mostly share an origin). A
    column is one JSON array of scalars or of the values themselves: no list
    made per tuple, and half the JSON a row per tuple took."""
    return _chunk(events, _FIRST)[0]


def _chunk(events: list[Event], keep: tuple[int, int]) -> tuple[str, int, int, int, int]:
    """:func:`encode_chunk` of the ``events`` from ``keep`` (a ``(ts, seq)``) on, and
    the least and greatest ``(ts, seq)`` among them (``low_ts, low_seq, top_ts,
    top_seq``; ``top_seq`` -1 if there is none): one pass over the tuples of a
    checkpoint, not one to filter, one to encode and one for the bounds."""
    keep_ts, keep_seq = keep
    origins: dict[int, int] = {}
    described: list[list[Any]] = []
    stamps: list[int] = []
    values: list[Any] = []
    seq_runs: list[list[int]] = []
    origin_runs: list[list[int]] = []
    last: Origin | None = None
    i = -1  # the origin index of the tuple before
    first_seq, next_seq, n_seq, n_origin = 0, 0, 0, 0
    low_ts, low_seq, top_ts, top_seq = 0, -1, 0, -1
    for e in events:
        ts = e.ts
        seq = e.seq
        if ts < keep_ts or (ts == keep_ts and seq < keep_seq):
            continue  # taken and let go of since: not stored
        if top_seq < 0:
            low_ts, low_seq, top_ts, top_seq = ts, seq, ts, seq
        elif ts > top_ts or (ts == top_ts and seq > top_seq):
            top_ts, top_seq = ts, seq
        elif ts < low_ts or (ts == low_ts and seq < low_seq):
            low_ts, low_seq = ts, seq
        # A tuple's values and origin (Event.item: a Tuple only once read).
        o = e.origin
        if o is None:
            t: Tuple = e.payload
            o, vals = t.origin, t.values
        else:
            vals = e.payload
        if o is not last:
            last = o
            known = origins.get(id(o))
            if known is None:
                known = origins[id(o)] = len(described)
                described.append([o.component, o.task, o.task_index, o.stream])
            if known != i:
                if n_origin:
                    origin_runs.append([i, n_origin])
                i, n_origin = known, 0
        n_origin += 1
        if seq != next_seq or not n_seq:
            if n_seq:
                seq_runs.append([first_seq, n_seq])
            first_seq, n_seq = seq, 0
        n_seq += 1
        next_seq = seq + 1
        stamps.append(ts)
        values.append(vals)
    if n_seq:
        seq_runs.append([first_seq, n_seq])
        origin_runs.append([i, n_origin])
    chunk = {"o": described, "t": stamps, "s": seq_runs, "i": origin_runs, "v": values}
    return orjson.dumps(chunk).decode(), low_ts, low_seq, top_ts, top_seq


def decode_chunk(text: str, origin: Callable[[str, int, int, str], Origin]) -> list[Event]:
    """The tuples :func:`encode_chunk` wrote, each rebuilt with ``origin(component,
    task, task_index, stream)`` (or a row per tuple, ``e``, as statestream wrote
    chunks before)."""
    chunk = orjson.loads(text)
    origins = [origin(c, t, i, s) for c, t, i, s in chunk["o"]]
    if "e" in chunk:
        return [Event(ts, seq, Tuple(values, origins[o])) for ts, seq, o, values in chunk["e"]]
    seqs = [first + k for first, n in chunk["s"] for k in range(n)]
    of = [origins[o] for o, n in chunk["i"] for _ in range(n)]
    stamps, values = chunk["t"], chunk["v"]
    return [Event(stamps[k], seqs[k], Tuple(values[k], of[k])) for k in range(len(stamps))]


def chunk_len(text: str) -> int:
    """How many tuples a chunk holds."""
    chunk = orjson.loads(text)
    return len(chunk["e"] if "e" in chunk else chunk["t"])


class WindowStore:
    """Which chunks of one task's windows are in its state, and the writes of a
    checkpoint (see the module's docstring)."""

    def __init__(self, component: str) -> None:
        self.component = component
        self.chunks: dict[int, tuple[int, int]] = {}  # chunk -> its greatest (ts, seq)
        self.lows: dict[int, tuple[int, int]] = {}  # chunk -> its least (ts, seq)
        self.next_chunk = 0

    def save(
        self,
        state: Any,
        core: TimeOrder,
        marks: Watermarks,
        pinned: tuple[int, int] | None = None,
    ) -> None:
        """Put what changed since the last save into ``state`` (before a PREPARE).
        ``pinned``: the least stored tuple that windows not fired yet read back."""
        keep = least(core.keep(), pinned)
        self.write_fresh(state, core, keep)
        for n in [n for n, top in self.chunks.items() if keep is None or top < keep]:
            state.delete(_CHUNK + str(n))
            del self.chunks[n]
            self.lows.pop(n, None)
        meta = {
            "core": core.state(),
            "marks": [[c, t, s, ts] for (c, t, s), ts in marks.latest.items()],
            "chunks": [[n, ts, seq] for n, (ts, seq) in self.chunks.items()],
            "lows": [[n, ts, seq] for n, (ts, seq) in self.lows.items()],
            "next": self.next_chunk,
        }
        state.put(WINDOW_KEY, orjson.dumps(meta).decode())

    def write_fresh(self, state: Any, core: TimeOrder, keep: tuple[int, int] | None) -> None:
        """Put the tuples ``core`` took since the last call and holds still (from
        ``keep`` on) into ``state``, as one chunk."""
        # Only what is still held: a tuple taken and gone since the last save is not stored.
        taken = core.take_fresh()
        if keep is None or not taken:
            return
        try:
            text, low_ts, low_seq, top_ts, top_seq = _chunk(taken, keep)
        except TypeError as exc:
            raise caused_by(
                SerializationError(
                    f"windowed bolt {self.component!r}: a tuple held in its window cannot "
                    f"be stored as JSON ({exc}); emit JSON values (numbers, strings, lists, "
                    "dicts with string keys) to a windowed bolt"
                ),
                exc,
            ) from exc
        if top_seq < 0:
            return  # every one taken is gone already
        n = self.next_chunk
        self.next_chunk += 1
        state.put(_CHUNK + str(n), text)
        self.chunks[n], self.lows[n] = (top_ts, top_seq), (low_ts, low_seq)

    def read(
        self,
        state: Any,
        lo: tuple[int, int] | None,
        hi: tuple[int, int] | None,
        origin: Callable[[str, int, int, str], Origin],
    ) -> Iterator[Event]:
        """The stored tuples from ``lo`` to ``hi`` (``(ts, seq)``, None: no bound), in
        that order. A chunk is read once the merge reaches its least tuple, and let
        go of once it is through: chunks overlap only by the disorder within the
        lag, so a few at a time are in memory."""
        chunks = sorted(
            (self.lows.get(n, _FIRST), n)
            for n, top in self.chunks.items()
            if (lo is None or top >= lo) and (hi is None or self.lows.get(n, _FIRST) <= hi)
        )
        opened: list[list[Event]] = []
        at: list[int] = []
        heap: list[tuple[tuple[int, int], int]] = []  # (next key, opened chunk)
        i = 0
        while True:
            while i < len(chunks) and (not heap or chunks[i][0] <= heap[0][0]):
                events = sorted(
                    (
                        e
                        for e in decode_chunk(state.get(_CHUNK + str(chunks[i][1])), origin)
                        if (lo is None or order_key(e) >= lo) and (hi is None or order_key(e) <= hi)
                    ),
                    key=order_key,
                )
                i += 1
                if events:
                    heapq.heappush(heap, (order_key(events[0]), len(opened)))
                    opened.append(events)
                    at.append(0)
            if not heap:
                return
            k = heap[0][1]
            events, j = opened[k], at[k] + 1
            yield events[j - 1]
            at[k] = j
            if j < len(events):
                heapq.heapreplace(heap, (order_key(events[j]), k))
            else:
                heapq.heappop(heap)
                opened[k] = []

    def load(
        self,
        state: Any,
        core: TimeOrder,
        marks: Watermarks,
        origin: Callable[[str, int, int, str], Origin],
    ) -> bool:
        """Rebuild ``core`` and ``marks`` from ``state``; False if it holds no windows."""
        text = state.get(WINDOW_KEY)
        self.chunks, self.lows, self.next_chunk = {}, {}, 0
        if text is None:
            return False
        meta = orjson.loads(text)
        if "chunks" not in meta:  # an older statestream's: the core names the fix
            core.rebuild(meta["core"], [])
        self.chunks = {n: (ts, seq) for n, ts, seq in meta["chunks"]}
        # Stored before chunks had their least tuple: read from the first (any order).
        self.lows = {n: (ts, seq) for n, ts, seq in meta.get("lows", ())}
        self.next_chunk = int(meta["next"])
        core.rebuild(meta["core"], self._events(state, origin))
        marks.latest = {(c, t, s): ts for c, t, s, ts in meta["marks"]}
        marks.current = core.watermark
        return True

    def _events(
        self, state: Any, origin: Callable[[str, int, int, str], Origin]
    ) -> Iterable[Event]:
        for n in self.chunks:
            yield from decode_chunk(state.get(_CHUNK + str(n)), origin)


class ChunkSpill:
    """What a core that spills (statestream._window_spill) asks of the store: the
    tuples it took written now (:meth:`flush`), stored ones read back (:meth:`read`)."""

    __slots__ = ("origin", "state", "store")

    def __init__(
        self, store: WindowStore, state: Any, origin: Callable[[str, int, int, str], Origin]
    ) -> None:
        self.store = store
        self.state = state
        self.origin = origin

    def flush(self, core: TimeOrder) -> None:
        self.store.write_fresh(self.state, core, core.keep())

    def read(self, lo: tuple[int, int] | None, hi: tuple[int, int] | None) -> Iterator[Event]:
        return self.store.read(self.state, lo, hi, self.origin)


#: Below every tuple's (ts, seq): a chunk stored without its least one is read first.
_FIRST = (-(1 << 62), -1)


def read_stored(
    state: Any, origin: Callable[[str, int, int, str], Origin]
) -> tuple[dict[str, Any], list[list[Any]], list[Event]] | None:
    """A task's stored windows as they are (its core's state, the channels' latest
    timestamps and every stored tuple), None if it has none."""
    text = state.get(WINDOW_KEY)
    if text is None:
        return None
    meta = orjson.loads(text)
    events = [
        e for n, _, _ in meta["chunks"] for e in decode_chunk(state.get(_CHUNK + str(n)), origin)
    ]
    return meta["core"], meta["marks"], events


def stored_texts(core: dict[str, Any], marks: list[list[Any]], events: list[Event]) -> list[str]:
    """What :func:`write_stored` puts: the ``$window`` text and one chunk's."""
    top = max(((e.ts, e.seq) for e in events), default=(0, 0))
    meta = {"core": core, "marks": marks, "chunks": [[0, *top]] if events else [], "next": 1}
    return [orjson.dumps(meta).decode(), encode_chunk(events)]


def write_stored(state: Any, texts: list[str]) -> None:
    """Put a task's windows (:func:`stored_texts`) into ``state``, which holds none."""
    state.put(WINDOW_KEY, texts[0])
    state.put(_CHUNK + "0", texts[1])


def delete_stored(state: Any) -> None:
    """Delete every window key of ``state``."""
    for key in [k for k in state if is_window_key(k)]:
        state.delete(key)
