"""A worker's link to its peers: what its LocalRuntime sends the other workers,
in frames (tuples in columns, acker messages, spout completions, a status).
"""

from __future__ import annotations

import logging
import marshal
import pickle
import random
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from ..._config import settings_of
from ..._errors import SerializationError, StatestreamError
from ..._picklable import unpicklable
from ..._tuple import Origin
from ..local.acking import FLAT, RemoteInbox, pack_ids, unpack_ids
from ..plan import RuntimePlan

log = logging.getLogger("statestream.workers")

# Rounds a worker may run ahead of a peer (it reads the peer's frame of round
# r-LAG in round r). A deeper lag would let a worker go on through a peer's
# longer round, but lag 4 ran no faster than lag 1 on the word count (and the
# hops it lengthens are every cross-worker ack's), see bench/RESULTS-workers.md.
LAG = 1
# marshal's format 2: from 3 on every object goes through a table of shared
# references, which costs more than the rest of the encoding of a frame's
# words, ids and statuses. Without it an object met twice in a frame arrives
# as two equal copies; a structure that contains itself makes marshal raise,
# and the frame goes as a pickle.
_MARSHAL_VERSION = 2


def worker_of_task(task_id: int, workers: int) -> int:
    """The worker a task runs in: round-robin over task ids, as Storm's default scheduler."""
    return task_id % workers


class _Outbox:
    """What one worker sends one peer in the next frame."""

    __slots__ = ("acks", "causes", "completions", "pairs", "touches", "tuples")

    def __init__(self) -> None:
        self.tuples: list[Any] = []
        self.acks: list[Any] = []  # acker messages other than acks (init, fail, reset)
        # acks, the bulk of acker messages (a commit releases every held one):
        # root and XOR in turn, sent as 64-bit words (pack_ids)
        self.pairs: list[int] = []
        self.completions: list[Any] = []
        self.touches: list[int] = []  # roots whose spout timeout a bolt reset
        self.causes: dict[int, Any] = {}

    def __bool__(self) -> bool:
        return bool(self.tuples or self.acks or self.pairs or self.completions or self.touches)

    def clear(self) -> None:
        self.tuples.clear()
        self.acks.clear()
        self.pairs.clear()
        self.completions.clear()
        self.touches.clear()
        self.causes.clear()


# A one-field group whose values are all strs crosses as one str, joined by _SEP
# (lane bit _JOINED), unless a value holds _SEP: marshal writes a str at a
# time (an encoded copy, its type and length), which cost 3.5x the join, and
# reads one back at 1.3x a split (bench_workers.py's words frame).
_JOINED = 4
_SEP = "\x00"


def _wire_group(
    target: int, lane: int, src: int, stream: str, values: Any, edges: Any, roots: Any, anchors: Any
) -> tuple[Any, ...]:
    """A RemoteInbox group as it crosses: ids as 64-bit words, strs joined (_JOINED)."""
    if lane & FLAT:
        try:
            joined = _SEP.join(values)
        except TypeError:  # not all strs
            joined = None
        if joined is not None and joined.count(_SEP) == len(values) - 1:
            lane, values = lane | _JOINED, joined
    # edges drawn by the RemoteInbox: their generator's state, an int
    wire_edges = edges if type(edges) is int else pack_ids(edges)
    return (target, lane, src, stream, values, wire_edges, pack_ids(roots), anchors)


def _portable_cause(cause: Any) -> Any:
    """A fail cause ``(component, exception, text)`` that pickles (the exception's
    text stands in for an exception that does not)."""
    if cause is None:
        return None
    component, exc, text = cause
    if exc is not None:
        try:
            pickle.dumps(exc)
        except Exception:
            text = f"{type(exc).__name__}: {exc}"
            exc = None
    return (component, exc, text)


class _DelayedControl:
    """The control lane of a task of this worker, as the checkpoint spout's routes
    see it: a checkpoint tuple appended in round r reaches the task's
    ``control`` deque at the end of round r+LAG, when one sent to another
    worker in round r is delivered there.

    The checkpoint spout's first hop then takes the same rounds to every
    worker, so the bolts after it (and, with a component on every worker, the
    stateful bolts after those) prepare and commit in the same round: each
    worker's long commit round overlaps the others' instead of holding them
    up in turn (bench_workers.py measured 30-80 ms waits per commit, one
    worker after the other). Only that hop: the checkpoint spout emits no
    data that could overtake its checkpoint tuples here, and the hold after a
    cut (Worker._cut) already waits for the slower, remote, delivery. A
    delayed hop between two bolts would let the first bolt's later data,
    handed over at once, overtake the barrier.
    """

    __slots__ = ("control", "rounds")

    def __init__(self, control: deque[Any]) -> None:
        self.control = control
        # what was appended in rounds r-LAG to r (the current round last)
        self.rounds: deque[list[Any]] = deque([[] for _ in range(LAG + 1)])

    def append(self, tup: Any) -> None:
        self.rounds[-1].append(tup)

    def sent(self) -> bool:
        return bool(self.rounds[-1])

    def next_round(self) -> None:
        """The end of a round: release what was appended LAG rounds ago."""
        rounds = self.rounds
        due = rounds.popleft()
        if due:
            self.control.extend(due)
            due.clear()
        rounds.append(due)

    def clear(self) -> None:
        for r in self.rounds:
            r.clear()


class Link:
    """A worker's end of the mesh: outboxes per peer and the task/acker placement."""

    def __init__(self, index: int, workers: int, plan: RuntimePlan) -> None:
        self.index = index
        self.workers = workers
        self.out = [_Outbox() for _ in range(workers)]
        self.queues: dict[tuple[int, bool], Any] = {}
        self.rt: Any = None
        self.delayed: dict[int, _DelayedControl] = {}  # by task id
        self.slack = settings_of(plan.config).topology_transfer_buffer_size
        self.origins: dict[tuple[int, str], Origin] = {}
        for cid, tids in plan.component_tasks.items():
            for i, tid in enumerate(tids):
                for stream, fields in plan.output_fields[cid].items():
                    self.origins[(tid, stream)] = Origin(cid, tid, i, stream, fields)

    # -- the LocalRuntime's side ----------------------------------------------
    def owns_acker(self, i: int) -> bool:
        return i % self.workers == self.index

    def shuffle_targets(self, sources: Sequence[int], targets: Sequence[int]) -> list[int]:
        """The tasks a shuffle grouping from a task of this worker spreads over.

        When every worker holds as many tasks of the emitting component as
        every other, and as many of the target component, each worker's
        emitters shuffle over the targets in their own worker: no tuple
        crosses a pipe and every target still gets an equal share (Storm's
        load-aware shuffle prefers a worker's own tasks the same way while
        their load is low). Otherwise over all the targets, as with one
        process.
        """

        def per_worker(tasks: Sequence[int]) -> set[int]:
            counts = [0] * self.workers
            for t in tasks:
                counts[worker_of_task(t, self.workers)] += 1
            return set(counts)

        # One count per worker, so never 0: every worker holds some of each.
        if len(per_worker(sources)) == 1 and len(per_worker(targets)) == 1:
            return [t for t in targets if worker_of_task(t, self.workers) == self.index]
        return list(targets)

    def queue(self, task_id: int, control: bool) -> Any:
        q = self.queues.get((task_id, control))
        if q is None:
            w = worker_of_task(task_id, self.workers)
            # what the last status of the task's worker (round r-LAG-1) does
            # not show: rounds r-2*LAG-1 to r, as Lockstep.decide reasons
            q = self.queues[(task_id, control)] = RemoteInbox(
                self.out[w].tuples,
                task_id,
                control,
                self.slack,
                2 * LAG + 2,
                seed=random.getrandbits(62),
            )
        return q

    def local_control(self, task_id: int, control: deque[Any]) -> _DelayedControl:
        """The control lane of this worker's task ``task_id``, for its routes
        (see :class:`_DelayedControl`); a rewind's new task gets a new one."""
        q = self.delayed.get(task_id)
        if q is None or q.control is not control:
            q = self.delayed[task_id] = _DelayedControl(control)
        return q

    def ack_lists(self) -> list[list[Any]]:
        return [box.acks for box in self.out]

    def ack_pair_lists(self) -> list[list[int]]:
        return [box.pairs for box in self.out]

    def completion_lists(self) -> list[list[Any]]:
        return [box.completions for box in self.out]

    def touch(self, roots: list[int]) -> None:
        """A bolt reset the timeout of these trees: the spout tasks of the other
        workers restart their own timeouts of them too."""
        for p, box in enumerate(self.out):
            if p != self.index:
                box.touches.extend(roots)

    def forward_cause(self, worker: int, root: int) -> None:
        """A failed tree's cause goes where the failure goes (for its dead-letter record)."""
        cause = self.rt.fail_causes.pop(root, None)
        if cause is not None:
            self.out[worker].causes[root] = cause

    # -- frames -----------------------------------------------------------------
    def sent_any(self) -> bool:
        return any(self.out) or any(q.sent() for q in self.delayed.values())

    def encode(self, peer: int, status: Any) -> bytes:
        box = self.out[peer]
        causes = {r: _portable_cause(c) for r, c in box.causes.items()}
        tuples = [_wire_group(*g) for g in box.tuples]
        body = (status, tuples, box.acks, pack_ids(box.pairs), box.completions, box.touches)
        try:
            m = marshal.dumps(body, _MARSHAL_VERSION)
            data = (
                b"M" + len(m).to_bytes(8, "little") + m + (pickle.dumps(causes) if causes else b"")
            )
        except ValueError:  # a value marshal cannot carry: the whole frame as a pickle
            try:
                data = b"P" + pickle.dumps((body, causes), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:
                raise self._unpicklable(box.tuples, exc) from exc
        box.clear()
        return data

    def next_round(self) -> None:
        for q in self.queues.values():
            q.next_round()

    def release(self) -> None:
        """The end of a round: local checkpoint tuples due now reach their tasks."""
        for q in self.delayed.values():
            q.next_round()

    def _unpicklable(self, records: list[Any], exc: Exception) -> StatestreamError:
        """The error naming the tuple whose values cannot go to another worker (a
        later tuple than the first of its stream, which every runtime checks)."""
        for target, lane, src, stream, group, *_ in records:
            tuples = ([v] for v in group) if lane & FLAT else group
            for values in tuples:
                origin = self.origins[(src, stream)]
                where = f" to {self.rt.task_names.get(target, target)} in another worker"
                error = unpicklable(origin.component, origin.task_index, stream, values, where)
                if error is not None:
                    return error
        return SerializationError(f"a frame to another worker cannot be pickled: {exc}")

    def decode(
        self, data: bytes | bytearray
    ) -> tuple[Any, tuple[Any, Any, Any, Any, Any, dict[int, Any]]]:
        """``(status, rest)``: a peer's status, and what :meth:`deliver` takes."""
        if data[:1] == b"M":
            n = int.from_bytes(data[1:9], "little")
            body = marshal.loads(memoryview(data)[9 : 9 + n])
            causes = pickle.loads(data[9 + n :]) if len(data) > 9 + n else {}
        else:
            body, causes = pickle.loads(data[1:])
        status, wire, acks, pairs, completions, touches = body
        tuples = [
            (g[0], g[1] & ~_JOINED, g[2], g[3], g[4].split(_SEP), *g[5:]) if g[1] & _JOINED else g
            for g in wire
        ]
        return status, (tuples, acks, pairs, completions, touches, causes)

    def deliver(self, rest: tuple[Any, Any, Any, Any, Any, dict[int, Any]]) -> None:
        """Put what a peer sent into this worker's queues, ledgers and spouts."""
        tuples, acks, pairs, completions, touches, causes = rest
        rt = self.rt
        for root in touches:
            rt.touch_root(root)
        if causes:
            rt.fail_causes.update(causes)
        rt.deliver_remote(tuples, completions, self.origins)
        if acks:
            rt.acking.receive(acks)
        if pairs:
            rt.acking.receive_acks(unpack_ids(pairs))

    def remote_lengths(self, lengths: Mapping[int, int]) -> None:
        for tid, n in lengths.items():
            q = self.queues.get((tid, False))
            if q is not None:
                q.remote_len = n

    def clear(self) -> None:
        for box in self.out:
            box.clear()
        for q in self.queues.values():
            q.clear()
        for d in self.delayed.values():
            d.clear()
