"""Several worker processes for one topology, under a supervisor (``topology.workers``).

Storm runs a topology in worker processes and its supervisor restarts a
worker that dies. Here ``statestream run`` (or :func:`statestream.run`) with
``topology.workers: N`` becomes that supervisor (:class:`WorkerSupervisor`):

* **Tasks.** Task ``t`` (the plan's global task ids, in topological order)
  runs in worker ``t % N``, acker task ``a`` in worker ``a % N``: Storm's
  round-robin scheduler, so a component with parallelism >= N spans every
  worker. Each worker is a :class:`~statestream.runtime.local.LocalRuntime`
  that builds only its own tasks; a task of another worker is a
  :class:`~statestream.runtime.local.RemoteInbox` in its routes, which
  gathers the tuples for that worker in columns. Tasks of one worker hand
  tuples over in memory, as with one process.
* **Rounds.** The workers advance in rounds: in round r each runs up to
  four scheduler steps (drain its bolts, fire its timers, poll its spouts),
  sends every other worker one frame (the tuples, acker messages and spout
  completions for it, and its status), then reads and delivers every
  peer's frame of round r-1. A worker is thus at most one round ahead of
  another, FIFO order holds per pair of tasks, and decisions that must be
  the same everywhere are taken from the statuses of round r-2, which every
  worker has. Frames are ``marshal`` (a fast codec for
  str/int/float/bytes/list/tuple/dict); a frame with a value marshal cannot
  carry goes as a pickle (only ever between our own processes).
* **The same protocols.** Acks go to the worker of their acker task, the
  acker's outcome to the worker of the spout task; checkpoint tuples travel
  like data, except that the checkpoint spout's reach the bolts of its own
  worker in the round they reach the others' (:class:`_DelayedControl`), so
  every worker commits in the same round. Exactly-once state keeps its
  standstill: every worker runs a
  replica of :class:`~statestream._exactly_once.Standstill` fed with the
  same statuses, so all of them decide POLL / DRAIN / CUT alike; the cut is
  taken when no worker has had anything queued or in flight for two rounds,
  with every worker's spout positions in the statuses, and the data spouts
  wait two more rounds so that the PREPARE reaches the first bolts of every
  worker before new data does. A failure anywhere rewinds every worker in
  the same round; frames sent before a rewind are dropped.
* **Garbage.** Workers collect in the same round too (:func:`_collect`), so
  that one worker's pause does not hold the others up in turn.
* **Backpressure.** Each status carries the inbox length of every bolt task
  of its worker; a queue to a task of another worker counts as full when
  that length plus what was sent to it since, less
  ``topology.transfer.buffer.size`` (the tuples allowed in flight), is at
  the capacity, so a slow bolt in one worker holds back the spout in
  another, and a task's queue holds at most the two sizes together.
* **Failures.** A worker that dies (killed, or exiting without finishing) is
  noticed by the supervisor within a second: it stops the other workers and
  starts all of them again, which recovers from the last committed
  checkpoint exactly as a restart of ``statestream run`` does (exactly-once:
  the spouts seek to the stored positions; at-least-once: what was not
  acked is replayed). A worker dying 5 times within a minute stops the run
  with a :class:`~statestream.RuntimeFailure` naming the cause. Every worker
  asks the kernel to kill it when the supervisor dies, so a killed
  supervisor leaves no worker behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import gc
import logging
import marshal
import multiprocessing
import os
import pickle
import random
import select
import selectors
import signal
import time
import traceback
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._clock import Clock
from .._config import Config
from .._errors import ConfigError, RuntimeFailure, SerializationError, StatestreamError
from .._exactly_once import StandstillStep, can_resume
from .._picklable import unpicklable
from .._registry import RunClaim
from .._results import ErrorReport, RunResult, TaskMetrics
from .._resume import SpoutRef, acked_positions
from .._topology import Topology
from .._tuple import Origin
from .local.acking import FLAT, pack_ids, unpack_ids
from .local.support import GC_YOUNG, restore_gc, tune_gc
from .plan import RuntimePlan, as_config

__all__ = ["WorkerSupervisor", "worker_of_task"]

log = logging.getLogger("statestream.workers")

#: Deaths of workers within ``_DEATH_WINDOW`` seconds that stop the run.
MAX_DEATHS = 5
_DEATH_WINDOW = 60.0
_REPORT_EVERY = 0.5  # seconds between a worker's progress reports
_SPOUT_BATCH = 64
# Pipe reads of 64 KiB: a 1 MiB read buffer costs an mmap, mremap and munmap per read.
_READ_SIZE = 1 << 16
_STEPS_PER_ROUND = 4
_PIPE_SIZE = 1 << 20  # Linux's default /proc/sys/fs/pipe-max-size
# The collector's own young-generation threshold in a worker, in GC_YOUNGs:
# a backstop for rounds too long for the collections in step (_collect).
_GC_BACKSTOP = 4
# Rounds a worker may run ahead of a peer (it reads the peer's frame of round
# r-_LAG in round r). A deeper lag would let a worker go on through a peer's
# longer round, but lag 4 ran no faster than lag 1 on the word count (and the
# hops it lengthens are every cross-worker ack's), see bench/RESULTS-workers.md.
_LAG = 1
# marshal's format 2: from 3 on every object goes through a table of shared
# references, which costs more than the rest of the encoding of a frame's
# words, ids and statuses. Without it an object met twice in a frame arrives
# as two equal copies; a structure that contains itself makes marshal raise,
# and the frame goes as a pickle.
_MARSHAL_VERSION = 2
_PR_SET_PDEATHSIG = 1


def _pipe() -> tuple[int, int]:
    """A pipe for the mesh, its buffer raised to _PIPE_SIZE where the kernel allows:
    with the default 64 KiB a commit's frame (every ack a bolt held, 800 KB on
    the word count) crosses in a dozen write/read turns, each a wake-up of the
    peer, while both workers wait for it."""
    r, w = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # Linux only; capped by pipe-max-size
        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)
    return r, w


def _collect() -> None:
    """Collect garbage as the collector would at this point on its own: the
    oldest generation whose count is over its threshold, else the young one.

    Workers collect in step: the young generation fills as tuple trees wait
    for their commit, and a collection walks it (4-9 ms at GC_YOUNG). Left
    to itself each worker's collector ran at its own moment and held the
    others up at the next exchange, so the pauses added up (bench_workers.py:
    8 collections, 36 ms, per worker and run). A worker whose young
    generation is due says so in its status and every worker collects in the
    round that reads it, so the pauses overlap (and skips the statuses sent
    before it).
    """
    counts, thresholds = gc.get_count(), gc.get_threshold()
    gen = 2 if counts[2] > thresholds[2] else 1 if counts[1] > thresholds[1] else 0
    gc.collect(gen)


def worker_of_task(task_id: int, workers: int) -> int:
    """The worker a task runs in: round-robin over task ids, as Storm's default scheduler."""
    return task_id % workers


class WorkerLost(Exception):
    """A peer's pipe closed: that worker died (the supervisor restarts the set)."""


# -- the link: what a worker's LocalRuntime sends to the others -----------------------


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
    ``control`` deque at the end of round r+_LAG, when one sent to another
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
        # what was appended in rounds r-_LAG to r (the current round last)
        self.rounds: deque[list[Any]] = deque([[] for _ in range(_LAG + 1)])

    def append(self, tup: Any) -> None:
        self.rounds[-1].append(tup)

    def sent(self) -> bool:
        return bool(self.rounds[-1])

    def next_round(self) -> None:
        """The end of a round: release what was appended _LAG rounds ago."""
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
        self.slack = int(plan.config["topology.transfer.buffer.size"])
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
        from .local import RemoteInbox

        q = self.queues.get((task_id, control))
        if q is None:
            w = worker_of_task(task_id, self.workers)
            # what the last status of the task's worker (round r-_LAG-1) does
            # not show: rounds r-2*_LAG-1 to r, as _decide reasons
            q = self.queues[(task_id, control)] = RemoteInbox(
                self.out[w].tuples,
                task_id,
                control,
                self.slack,
                2 * _LAG + 2,
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


# -- the mesh of pipes ------------------------------------------------------------


class Mesh:
    """One pipe per ordered pair of workers; a round sends a frame to every peer and
    reads one from every peer, interleaving writes and reads so that two workers
    writing big frames to each other cannot block."""

    def __init__(self, index: int, writers: dict[int, int], readers: dict[int, int]) -> None:
        self.index = index
        self.writers = writers
        self.readers = readers
        for fd in (*writers.values(), *readers.values()):
            os.set_blocking(fd, False)
        self.sel = selectors.DefaultSelector()
        self.bytes_out = 0
        self.rbuf: dict[int, bytearray] = {p: bytearray() for p in readers}
        self.wbuf: dict[int, bytearray] = {p: bytearray() for p in writers}

    def exchange(self, frames: Mapping[int, bytes], need: bool) -> dict[int, bytes | bytearray]:
        """Queue ``frames`` (one per peer) and write what the pipes take; if
        ``need``, wait for the next frame of every peer (writing meanwhile, so
        that two workers never wait on each other's full pipes). Bytes a pipe
        does not take now go out during the next exchange, in order.

        Non-blocking reads and writes first, and ``select`` only when a peer's
        frame is not there yet: a round's exchange is a few system calls
        rather than a selector's registrations (Python code) each time.
        """
        for p, f in frames.items():
            buf = self.wbuf[p]
            buf += len(f).to_bytes(8, "little")
            buf += f
        done: dict[int, bytes | bytearray] = {}
        waiting: list[int] = []
        if need:
            for p in self.readers:
                frame = self._take(p)
                if frame is None:
                    waiting.append(p)
                else:
                    done[p] = frame
        while True:
            for p, buf in self.wbuf.items():
                if buf:
                    self._write(p, buf)
            for p in list(waiting):
                frame = self._read(p)
                if frame is not None:
                    done[p] = frame
                    waiting.remove(p)
            if not waiting:
                return done
            select.select(
                [self.readers[p] for p in waiting],
                [fd for p, fd in self.writers.items() if self.wbuf[p]],
                [],
            )

    def _write(self, p: int, buf: bytearray) -> None:
        try:
            n = os.write(self.writers[p], buf)
        except BlockingIOError:
            return
        except BrokenPipeError as exc:
            raise WorkerLost(f"worker {p} is gone") from exc
        self.bytes_out += n
        del buf[:n]

    def _read(self, p: int) -> bytes | bytearray | None:
        """Peer ``p``'s next frame if it is all there (reading what the pipe holds)."""
        while True:
            try:
                chunk = os.read(self.readers[p], _READ_SIZE)
            except BlockingIOError:
                return None
            if not chunk:
                raise WorkerLost(f"worker {p} is gone")
            self.rbuf[p] += chunk
            frame = self._take(p)
            if frame is not None:
                return frame

    def close(self, timeout: float = 10.0) -> None:
        """Leave the mesh in step with the peers: a peer may be a round behind and
        still writing its last frame, or reading one of ours. Write out what is
        buffered (reading and dropping what comes), close the write ends, then
        read until every peer has closed its own."""
        end = time.monotonic() + timeout
        sel = self.sel
        open_readers = dict(self.readers)
        for p, fd in self.writers.items():
            if self.wbuf[p]:
                sel.register(fd, selectors.EVENT_WRITE, ("w", p))
        for p, fd in open_readers.items():
            sel.register(fd, selectors.EVENT_READ, ("r", p))
        closed_writers = False
        try:
            while open_readers and time.monotonic() < end:
                if not closed_writers and not any(self.wbuf.values()):
                    for fd in self.writers.values():
                        os.close(fd)
                    closed_writers = True
                for key, _ in sel.select(max(0.0, end - time.monotonic())):
                    kind, p = key.data
                    try:
                        if kind == "w":
                            n = os.write(key.fd, self.wbuf[p])
                            del self.wbuf[p][:n]
                            if not self.wbuf[p]:
                                sel.unregister(key.fd)
                        elif not os.read(key.fd, _READ_SIZE):
                            sel.unregister(key.fd)
                            del open_readers[p]
                    except BlockingIOError:
                        continue
                    except OSError:  # a peer died meanwhile: nothing more to say to it
                        sel.unregister(key.fd)
                        self.wbuf[p].clear()
                        if kind == "r":
                            del open_readers[p]
        finally:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fd)

    def _take(self, p: int) -> bytes | bytearray | None:
        """The next whole frame from peer ``p``, if it is all buffered."""
        buf = self.rbuf[p]
        if len(buf) < 8:
            return None
        n = int.from_bytes(buf[:8], "little")
        if len(buf) < 8 + n:
            return None
        if len(buf) == 8 + n:  # the usual case: the buffer is the frame, uncopied
            self.rbuf[p] = bytearray()
            del buf[:8]  # O(1): a bytearray's start moves
            return buf
        with memoryview(buf) as view:
            frame = bytes(view[8 : 8 + n])
        del buf[: 8 + n]
        return frame


# -- one worker -----------------------------------------------------------------------


@dataclass
class _Status:
    """What a worker tells every peer at the end of a round (a plain tuple on the wire)."""

    busy: bool = False
    queued: bool = False
    sent: bool = False
    idle: bool = False
    emitted: int = 0
    rewind: bool = False
    failed: bool = False  # exactly-once: a data tuple failed here since the cut
    stop: bool = False
    holding: bool = False
    lengths: dict[int, int] = field(default_factory=dict)
    # the checkpoint spout's worker only
    prepare_due: bool = False
    committed: int = -1
    in_checkpoint: bool = False
    # exactly-once: this worker's data spout positions, when it stands still
    positions: dict[str, Any] | None = None
    epoch: int = 0  # rewinds so far: what was sent before a rewind is dropped
    deadline: bool = False  # the stop is --duration's
    gc: bool = False  # this worker's young generation is due for a collection
    # at-least-once: this worker's data spouts' acked positions (statestream._resume)
    acked: dict[str, Any] | None = None

    def wire(self) -> tuple[Any, ...]:
        return (
            self.busy,
            self.queued,
            self.sent,
            self.idle,
            self.emitted,
            self.rewind,
            self.failed,
            self.stop,
            self.holding,
            self.lengths,
            self.prepare_due,
            self.committed,
            self.in_checkpoint,
            self.positions,
            self.epoch,
            self.deadline,
            self.gc,
            self.acked,
        )

    @classmethod
    def of(cls, t: Sequence[Any]) -> _Status:
        return cls(*t)


class Worker:
    """Runs this worker's tasks in rounds with its peers (see the module docstring)."""

    def __init__(
        self,
        topology: Topology,
        config: Config,
        index: int,
        workers: int,
        mesh: Mesh,
        report: Any,
        clock: Clock | None = None,
    ) -> None:
        from .local import LocalRuntime

        self.index = index
        self.workers = workers
        plan = RuntimePlan(topology, config)
        self.link = Link(index, workers, plan)
        owned = [
            t
            for tids in plan.component_tasks.values()
            for t in tids
            if worker_of_task(t, workers) == index
        ]
        self.rt = LocalRuntime(topology, config, clock, owned=owned, link=self.link)
        self.link.rt = self.rt
        self._local_roots()
        self.mesh = mesh
        self.report = report
        self.peers = [p for p in range(workers) if p != index]
        self.rounds = 0
        # Where a worker's time goes beyond its tasks (the progress reports carry it).
        self.encode_time = 0.0
        self.wait_time = 0.0
        self.deliver_time = 0.0
        self.stop_requested = False
        self._reported_at = 0.0
        # at-least-once: this worker's resumable data spouts, and the acked
        # positions its peers sent (see _share_acked_positions)
        self._resumable: list[SpoutRef] = []
        self._peer_acked: dict[str, Any] = {}

    def _local_roots(self) -> None:
        """Give new tuple trees a root id whose acker task lives in this worker
        (LocalRuntime.use_local_roots); the rest of the id stays random."""
        rt = self.rt
        mine = [i for i in range(rt.n_ackers) if i % self.workers == self.index]
        if mine and rt.acking is not None:
            rt.use_local_roots(mine)

    # -- one round ---------------------------------------------------------------
    def _status(self, busy: bool, emitted: int, draining: bool) -> _Status:
        rt = self.rt
        st = _Status()
        st.busy = busy
        queued = False
        for b in rt.bolts:
            n = len(b.inbox)
            st.lengths[b.task_id] = n
            if n or b.control:
                queued = True
        for s in rt.spouts:
            if s.completions:
                queued = True
        st.queued = queued
        st.sent = self.link.sent_any()
        st.idle = rt.idle()
        st.emitted = emitted
        ss = rt.standstill
        st.rewind = ss is not None and ss.rewind
        st.failed = ss is not None and ss.failed
        st.stop = self.stop_requested or rt._stop
        st.deadline = self._deadline
        st.epoch = self.epoch
        st.gc = gc.get_count()[0] >= GC_YOUNG
        st.holding = any(t.awaits_checkpoint() for t in rt.bolts)
        cp = rt.checkpoint_spout
        if cp is not None:
            st.prepare_due = cp.prepare_due() if ss is not None else False
            st.committed = cp.committed_txid
            st.in_checkpoint = cp.coordinator.pending is not None
        if self._resumable:
            st.acked = acked_positions(self._resumable)
        if draining and not queued and not st.sent and ss is not None:
            from .._exactly_once import check_position

            for s in rt.data_spouts:
                s.release_held()  # into the position (see SpoutTask.release_held)
            st.positions = {
                s.namespace: check_position(s.component, s.spout.position())  # type: ignore[attr-defined]
                for s in rt.data_spouts
            }
        return st

    def _poll_spouts(self, decision: StandstillStep | None) -> tuple[bool, int]:
        rt = self.rt
        busy = False
        emitted = 0
        ss = rt.standstill
        for spout in rt.spouts:
            if spout.system:
                busy = spout.poll() or busy
                continue
            if decision is not None and decision is not StandstillStep.POLL:
                if spout.completions:
                    spout.drain_completions()
                    busy = True
                continue
            before = spout.emitted + spout.held
            limit = _SPOUT_BATCH if ss is None else ss.allowance(_SPOUT_BATCH)
            if spout.poll(limit):
                busy = True
            emitted += spout.emitted + spout.held - before
        return busy, emitted

    def _decide(self, statuses: list[_Status], quiet_before: bool) -> StandstillStep | str:
        """The standstill replica's decision for round r, from the statuses of round
        q = r-_LAG-1 (the last every worker has; see run). ``quiet_before``:
        nothing was sent in rounds q-_LAG to q-1 either."""
        ss = self.rt.standstill
        assert ss is not None
        if any(s.rewind for s in statuses):
            return "rewind"
        ss.emitted += sum(s.emitted for s in statuses)
        if self._hold:
            # After a cut the data spouts wait until the PREPARE has reached the
            # first bolts of every worker (sent, then delivered _LAG rounds later).
            self._hold -= 1
            return StandstillStep.DRAIN
        cp = statuses[self._cp_worker]
        # Nothing anywhere: nothing queued or sent in q, nothing sent in the
        # _LAG rounds before (delivered after q's statuses), and no spout
        # polled in q or since (so the positions in q's statuses still hold).
        still = all(d is not StandstillStep.POLL for d in self._decided)
        queued = not (quiet_before and still) or any(s.queued or s.sent for s in statuses)
        # Every replica dooms the attempt in the same round: from the statuses,
        # not from its own worker's news (ss.failed), which the others lack.
        doomed = any(s.failed for s in statuses)
        return ss.step(cp.prepare_due, queued, cp.committed, cp.in_checkpoint, doomed)

    def run(self, until_idle: bool, duration: float | None) -> RunResult:
        """Run rounds until every worker agrees to stop.

        Round r: decide from the statuses of round q = r-_LAG-1, step, send
        frame r, then read every peer's frame r-_LAG and deliver it. A worker
        thus runs at most _LAG rounds ahead of a peer, and waits only when a
        peer is further behind; a tuple sent in round r is executed in round
        r+_LAG+1. Decisions that must be the same everywhere (stop, idle, the
        standstill, a rewind) use only what every worker knows: the statuses of
        round q and the decisions before.
        """
        rt = self.rt
        rt.open()
        self._share_acked_positions()
        clock = rt.clock
        start = rt._start_time = clock.monotonic()
        deadline = start + duration if duration is not None else None
        rt._next_due = min((t[0] for t in rt._timers), default=float("inf"))
        plan = rt.plan
        cp_tasks = plan.component_tasks.get("$checkpointspout", [])
        self._cp_worker = worker_of_task(cp_tasks[0], self.workers) if cp_tasks else 0
        eo = rt.standstill is not None
        held = StandstillStep.DRAIN if eo else None
        # the decisions of rounds q to r-1 (see _decide)
        self._decided: deque[Any] = deque([held] * (_LAG + 1), maxlen=_LAG + 1)
        old: list[_Status] | None = None  # statuses of round q = r-_LAG-1
        # for each round q-_LAG to q-1: was anything sent (unknown: yes)
        sent_before: deque[bool] = deque([True] * _LAG, maxlen=_LAG)
        mine_before: deque[_Status] = deque()  # this worker's statuses of rounds r-_LAG to r-1
        reason = "stopped"
        gc_before = tune_gc()
        # Collections in step (see _collect); the collector's own only as a backstop.
        gc.set_threshold(GC_YOUNG * _GC_BACKSTOP, *gc.get_threshold()[1:])
        try:
            while True:
                decision: StandstillStep | str | None = held
                if old is not None:
                    fresh = all(s.epoch == self.epoch for s in old)
                    if any(s.stop for s in old):
                        reason = "duration" if any(s.deadline for s in old) else "stopped"
                        break
                    moved = any(sent_before) or any(s.busy or s.sent for s in old)
                    if until_idle and fresh and not moved and all(s.idle for s in old):
                        reason = "idle"
                        break
                    if eo and fresh:
                        decision = self._decide(old, not any(sent_before))
                        if decision == "rewind":
                            rt._rewind()
                            self.link.clear()
                            self.epoch += 1
                            decision = StandstillStep.DRAIN
                    self.link.remote_lengths({k: v for s in old for k, v in s.lengths.items()})
                    if self._gc_wait:
                        self._gc_wait -= 1
                    elif any(s.gc for s in old):
                        _collect()
                        # the statuses of the rounds before this one say "due" still
                        self._gc_wait = _LAG
                    if fresh and not moved:
                        self._quiet(old, until_idle)
                busy = False
                emitted = 0
                # Several scheduler steps per round while there is work: fewer
                # frames and wake-ups for the same tuples. One step when the
                # standstill decides, so that a cut is taken once.
                steps = (
                    _STEPS_PER_ROUND if decision is None or decision is StandstillStep.POLL else 1
                )
                for _ in range(steps):
                    moved = False
                    for bolt in rt.bolts:
                        if (bolt.inbox or bolt.control) and bolt.drain():
                            moved = True
                    now = clock.monotonic()
                    if now >= rt._next_due:
                        rt._next_due = rt._fire_timers(now)
                    if decision is StandstillStep.CUT:
                        assert old is not None
                        self._cut(old)
                        decision = StandstillStep.DRAIN
                    s_busy, n = self._poll_spouts(decision)  # type: ignore[arg-type]
                    emitted += n
                    if not (moved or s_busy):
                        break
                    busy = True
                if rt.fatal is not None:
                    raise rt.fatal  # the supervisor stops every worker
                if rt.after_step is not None:
                    rt.after_step()
                if deadline is not None and clock.monotonic() >= deadline:
                    self.stop_requested = self._deadline = True
                self._decided.append(decision)
                draining = decision is not None and decision is not StandstillStep.POLL
                mine = self._status(busy, emitted, draining)
                need = len(mine_before) == _LAG
                peers = self._exchange(mine, need=need)
                if need:
                    sent_before.append(old is None or any(s.sent for s in old))
                    peers[self.index] = mine_before.popleft()
                    old = peers
                mine_before.append(mine)
                self._maybe_report()
            self.mesh.close()
            rt._finish_queued()
            rt.store_acked_positions()
        finally:
            restore_gc(gc_before)
            rt.close()
        return RunResult(
            rt.metrics(), list(rt.errors), clock.monotonic() - start, reason, rt.counters()
        )

    _cp_worker = 0
    _hold = 0
    _gc_wait = 0
    _deadline = False
    epoch = 0

    def _share_acked_positions(self) -> None:
        """At-least-once: each worker sends its data spouts' acked positions in every
        status, and the checkpoint spout's worker stores the newest it has heard of
        with each PREPARE (an older one is still safe: acked positions only grow)."""
        rt = self.rt
        if rt.standstill is not None or not rt.plan.checkpointed:
            return
        self._resumable = [r for r in rt.spout_refs() if can_resume(r.spout)]
        cp = rt.checkpoint_spout
        if cp is not None:
            mine = self._resumable
            cp.acked_positions = lambda: {**self._peer_acked, **acked_positions(mine)}

    def _cut(self, statuses: list[_Status]) -> None:
        """Exactly-once: every worker stands still; the checkpoint spout's worker
        starts the PREPARE with every worker's positions. The data spouts wait
        one more round, until the PREPARE has reached the bolts of every worker."""
        rt = self.rt
        assert rt.standstill is not None
        rt.standstill.on_cut()
        for s in rt.data_spouts:
            s.retries.passed_cut()
        self._hold = _LAG + 1
        cp = rt.checkpoint_spout
        if cp is None:
            return
        positions: dict[str, Any] = {}
        for st in statuses:
            if st.positions is not None:
                positions.update(st.positions)
        cp.request_early()
        cp.start_prepare(positions)

    def _quiet(self, statuses: list[_Status], until_idle: bool) -> None:
        """No worker moved last round: ask for a checkpoint if acks wait for one, or sleep."""
        rt = self.rt
        cp = rt.checkpoint_spout
        ss = rt.standstill
        ends_early = ss is not None and (ss.replaying or any(s.failed for s in statuses))
        if ends_early or any(s.holding for s in statuses):
            if cp is not None and not cp.coordinator.pending:
                cp.request_early()
            return
        if until_idle and rt.data_spouts:
            # Only a worker with data spouts can tell whether data moved.
            rt._explain_wait()
        rt.clock.sleep(rt.idle_sleep)

    def _exchange(self, mine: _Status, need: bool) -> list[_Status]:
        """Send this round's frame; if ``need``, read every peer's frame of the round
        before and deliver it (dropped if it was sent before a rewind)."""
        wire = mine.wire()
        t0 = time.perf_counter()
        frames = {p: self.link.encode(p, wire) for p in self.peers}
        self.link.next_round()
        t1 = time.perf_counter()
        got = self.mesh.exchange(frames, need)
        t2 = time.perf_counter()
        self.encode_time += t1 - t0
        self.wait_time += t2 - t1
        statuses: list[_Status] = [mine] * self.workers
        for p in self.peers if need else ():
            status, rest = self.link.decode(got[p])
            st = statuses[p] = _Status.of(status)
            if st.acked:
                self._peer_acked.update(st.acked)
            if st.epoch == self.epoch:
                self.link.deliver(rest)
        self.link.release()
        self.deliver_time += time.perf_counter() - t2
        self.rounds += 1
        return statuses

    def _maybe_report(self) -> None:
        now = time.monotonic()
        if now - self._reported_at < _REPORT_EVERY:
            return
        self._reported_at = now
        self.send_report("progress", self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        rt = self.rt
        return {
            "pid": os.getpid(),
            "tasks": sorted(rt.task_by_id),
            "metrics": rt.task_metrics(),
            "counters": rt.counters(),
            "rounds": self.rounds,
            "encode_s": self.encode_time,
            "wait_s": self.wait_time,
            "deliver_s": self.deliver_time,
            "bytes_out": self.mesh.bytes_out,
        }

    def send_report(self, kind: str, payload: Any) -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            self.report.send((kind, self.index, payload))


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux), and
    exit now if the parent is already gone."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


def _worker_main(
    topology: Topology,
    config: Config,
    index: int,
    workers: int,
    writers: dict[int, int],
    readers: dict[int, int],
    keep: set[int],
    report: Any,
    parent: int,
    until_idle: bool,
    duration: float | None,
    clock: Clock | None,
) -> None:
    _die_with_parent(parent)
    # Ctrl-C reaches the whole process group: the supervisor decides for all.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The other workers' pipe ends, inherited through fork: closed, so that a
    # peer's death reads as the end of its pipe here.
    for fd in list(_PIPES):
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)
    worker: Worker | None = None
    try:
        worker = Worker(
            topology, config, index, workers, Mesh(index, writers, readers), report, clock
        )
        w = worker
        signal.signal(signal.SIGTERM, lambda *_: setattr(w, "stop_requested", True))
        result = worker.run(until_idle, duration)
        snap = worker.snapshot()
        worker.send_report("progress", snap)
        log.info(
            "worker %d: %d rounds; %.2f s encoding, %.2f s exchanging, %.2f s delivering, "
            "%d bytes sent",
            index,
            snap["rounds"],
            snap["encode_s"],
            snap["wait_s"],
            snap["deliver_s"],
            snap["bytes_out"],
        )
        report.send(("done", index, _portable_result(result)))
    except WorkerLost as exc:
        log.info("worker %d: %s", index, exc)
        os._exit(_EXIT_PEER_LOST)
    except BaseException as exc:
        text = "".join(traceback.format_exception(exc))
        try:
            pickle.dumps(exc)
            err: Any = exc
        except Exception:
            err = None
        with contextlib.suppress(Exception):
            report.send(("fatal", index, (err, f"{type(exc).__name__}: {exc}", text)))
        os._exit(_EXIT_FATAL)
    os._exit(0)


_EXIT_PEER_LOST = 75
_EXIT_FATAL = 70
_PIPES: list[int] = []  # every mesh fd of the current generation (closed in each child)


def _portable_result(result: RunResult) -> RunResult:
    errors = [
        ErrorReport(e.component, e.task_index, e.tuple, e.error, e.traceback) for e in result.errors
    ]
    return RunResult(result.components, errors, result.elapsed, result.reason, result.counters)


# -- the supervisor --------------------------------------------------------------------


@dataclass
class WorkerInfo:
    """What the supervisor knows of one worker (the live progress shows it)."""

    index: int
    pid: int = 0
    tasks: list[int] = field(default_factory=list)
    restarts: int = 0
    executed: int = 0
    rate: float = 0.0
    metrics: list[TaskMetrics] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    _at: float = 0.0


class WorkerSupervisor:
    """Runs a topology on ``topology.workers`` processes and restarts them when one dies.

    The same interface as :class:`~statestream.runtime.local.LocalRuntime` for
    the CLI: ``run``, ``stop``, ``open``, ``metrics``, ``deadletter_path``.
    """

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.topology = topology
        conf = as_config(config, topology_prefixes=(topology.name,))
        self.workers = int(conf["topology.workers"])
        if self.workers < 2:
            raise ValueError("WorkerSupervisor needs topology.workers >= 2")
        if (
            conf["topology.acker.executors"] == 1
            and conf.source_of("topology.acker.executors") == "defaults"
        ):
            # As Storm's default: one acker per worker, so that a tree's ledger
            # can live where its spout task does (see Worker.__init__).
            conf = conf.with_overrides(
                {"topology.acker.executors": self.workers}, source="topology.workers"
            )
        self.config = conf
        if topology.has_stateful_bolts:
            self._check_provider()
        self._check_not_transactional()
        self.clock = clock
        self.plan = RuntimePlan(topology, self.config)
        from .local import LocalRuntime

        # Validates the topology and config as a one-process run would (and
        # gives the dead-letter path), without opening anything.
        probe = LocalRuntime(topology, self.config, clock, owned=[], link=_NoLink())
        self.deadletter_path = probe.deadletter_path
        self.task_names = probe.task_names
        self.component_tasks = probe.component_tasks
        self.exactly_once = probe.exactly_once
        self.info = [WorkerInfo(i) for i in range(self.workers)]
        self.deaths: deque[float] = deque()
        self.restarts = 0
        self._stop = False
        self._procs: list[Any] = []
        self._past: list[TaskMetrics] = []
        self._past_counters: dict[str, int] = {}
        self._opened = False
        self._claim = RunClaim()  # the run's hold on its scope of the store (open)

    def _check_not_transactional(self) -> None:
        from .._transactional.components import TransactionalCoordinatorSpout

        for cid, spec in self.topology.components.items():
            if isinstance(spec.obj, TransactionalCoordinatorSpout):
                raise ConfigError(
                    f"topology {self.topology.name!r} is transactional (its coordinator is "
                    f"{cid!r}); transactional topologies run on one process here: set "
                    "topology.workers: 1, or run them on several with topology.runner: spark"
                )

    def _check_provider(self) -> None:
        from .._registry import provider_sharing

        spec = self.config["topology.state.provider"]
        if provider_sharing(spec) == "process":
            raise ConfigError(
                f"topology.state.provider is {spec!r}, which keeps state inside one process; "
                f"with topology.workers: {self.workers} every worker is a process of its own, "
                "so their checkpoints and the spouts' stored positions could not meet, and a "
                "restarted worker would find nothing. Use a store the workers share: "
                "topology.state.provider: sqlite (or redis), or topology.workers: 1"
            )

    def open(self) -> None:
        """Claim the topology's scope of the store for the run, then re-partition stored
        state for changed parallelism, once, before any worker starts.

        The claim (``BackendStateProvider.claim``) is held until :meth:`run`
        ends; the workers, forked from this process, share it and never
        claim themselves. Raises StateLockedError if another run holds it.
        """
        if self._opened:
            return
        if not self.topology.has_stateful_bolts:
            self._opened = True
            return
        from .._registry import open_provider
        from .._rescale import LAYOUT_NAMESPACE, rescale_state

        provider = open_provider(
            self.config["topology.state.provider"],
            self.config["topology.state.provider.config"],
            scope=self.topology.name,
        )
        try:
            self._claim.take(provider, self.topology.name, self.config)
            try:
                provider.get_state(LAYOUT_NAMESPACE)
                rescale_state(provider, self.topology)
            except BaseException:
                self._claim.release()
                raise
            self._opened = True
        finally:
            provider.close()

    def stop(self) -> None:
        """Ask every worker to stop after its current round (safe from a signal handler)."""
        self._stop = True
        for p in self._procs:
            with contextlib.suppress(Exception):
                os.kill(p.pid, signal.SIGTERM)

    # -- observation -------------------------------------------------------------
    def task_metrics(self) -> list[TaskMetrics]:
        out = [TaskMetrics(m.component, m.task_index) for m in self._past]
        for m, p in zip(out, self._past, strict=True):
            m.add(p)
        for w in self.info:
            for m in w.metrics:
                c = TaskMetrics(m.component, m.task_index)
                c.add(m)
                out.append(c)
        return out

    def metrics(self) -> dict[str, TaskMetrics]:
        out: dict[str, TaskMetrics] = {}
        for m in self.task_metrics():
            out.setdefault(m.component, TaskMetrics(m.component, -1)).add(m)
        return out

    def worker_rows(self) -> list[WorkerInfo]:
        return list(self.info)

    # -- running -------------------------------------------------------------------
    def _start(self, until_idle: bool, duration: float | None) -> list[Any]:
        n = self.workers
        ctx = multiprocessing.get_context("fork")
        pipes: dict[tuple[int, int], tuple[int, int]] = {}
        for a in range(n):
            for b in range(n):
                if a != b:
                    pipes[(a, b)] = _pipe()
        _PIPES[:] = [fd for pair in pipes.values() for fd in pair]
        procs = []
        conns = []
        for i in range(n):
            writers = {b: pipes[(i, b)][1] for b in range(n) if b != i}
            readers = {a: pipes[(a, i)][0] for a in range(n) if a != i}
            keep = set(writers.values()) | set(readers.values())
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_worker_main,
                args=(
                    self.topology,
                    self.config,
                    i,
                    n,
                    writers,
                    readers,
                    keep,
                    send,
                    os.getpid(),
                    until_idle,
                    duration,
                    self.clock,
                ),
                name=f"statestream-worker-{i}",
                daemon=False,
            )
            p.start()
            send.close()
            procs.append(p)
            conns.append(recv)
            self.info[i].pid = p.pid or 0
        for fd in _PIPES:
            os.close(fd)
        _PIPES.clear()
        self._procs = procs
        return conns

    def _kill_all(self) -> None:
        for p in self._procs:
            with contextlib.suppress(Exception):
                p.kill()
        for p in self._procs:
            p.join(5)
        self._procs = []

    def _bank(self) -> None:
        """Keep the counts of the workers being replaced (metrics cover the whole run)."""
        for w in self.info:
            for m in w.metrics:
                m.queued = m.retrying = 0
                self._past.append(m)
            for k, v in w.counters.items():
                if k in ("timed_out", "acker_expired", "late_acks", "rewinds"):
                    self._past_counters[k] = self._past_counters.get(k, 0) + v
            w.metrics = []
            w.counters = {}

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run the workers until they finish (as ``LocalRuntime.run``), restarting them
        when one dies; returns the merged RunResult."""
        try:
            return self._run(until_idle, duration)
        finally:
            # An exception here (Ctrl-C twice, a fatal worker) leaves no worker behind.
            try:
                self._kill_all()
            finally:
                # The workers are gone (joined), so nothing shares the claim now.
                self._claim.release()

    def _run(self, until_idle: bool, duration: float | None) -> RunResult:
        from multiprocessing.connection import wait

        self.open()
        start = time.monotonic()
        deadline = start + duration if duration is not None else None
        results: dict[int, RunResult] = {}
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            conns = self._start(until_idle, left)
            results.clear()
            failure: str | None = None
            fatal: Any = None
            by_sentinel = {p.sentinel: (i, p) for i, p in enumerate(self._procs)}
            live_conns = {c: i for i, c in enumerate(conns)}
            exited: set[int] = set()
            while len(results) < self.workers and failure is None and fatal is None:
                ready = wait(list(live_conns) + list(by_sentinel), timeout=1.0)
                if self._claim.lost is not None:
                    # Another run may write this topology's state now: stop at
                    # once, as a crash would; what was committed stays.
                    self._kill_all()
                    self._claim.check()
                for r in ready:
                    if r in live_conns:
                        i = live_conns[r]
                        try:
                            kind, _, payload = conns[i].recv()
                        except (EOFError, OSError):
                            del live_conns[r]
                            continue
                        if kind == "progress":
                            self._progress(i, payload)
                        elif kind == "done":
                            results[i] = payload
                        elif kind == "fatal":
                            fatal = (i, payload)
                    else:
                        i, p = by_sentinel.pop(r)
                        exited.add(i)
                # A worker gone without its result: drain what it sent, then decide.
                for i in list(exited):
                    if i in results:
                        continue
                    conn = conns[i]
                    while conn in live_conns and conn.poll():
                        try:
                            kind, _, payload = conn.recv()
                        except (EOFError, OSError):
                            break
                        if kind == "done":
                            results[i] = payload
                        elif kind == "fatal":
                            fatal = (i, payload)
                        elif kind == "progress":
                            self._progress(i, payload)
                    if i in results or fatal is not None:
                        continue
                    # The sentinel closes a moment before the exit status is there.
                    self._procs[i].join(1.0)
                    code = self._procs[i].exitcode
                    if code == _EXIT_PEER_LOST:
                        continue  # a peer's death; that one is the cause
                    failure = self._describe_exit(i, code)
                if (
                    failure is None
                    and fatal is None
                    and len(exited) == self.workers
                    and len(results) < self.workers
                ):
                    failure = "the workers lost each other"
            for c in conns:
                c.close()
            if fatal is not None:
                self._kill_all()
                i, (err, line, text) = fatal
                if isinstance(err, StatestreamError):
                    # Our own errors say what to do in their one line, which the
                    # caller prints: the worker's traceback is for --verbose only.
                    log.debug("worker %d failed:\n%s", i, text)
                    raise err
                log.error("worker %d failed:\n%s", i, text)
                if isinstance(err, BaseException):
                    raise err
                raise RuntimeFailure(f"{self.topology.name}: worker {i} failed: {line}")
            if failure is None:
                for p in self._procs:
                    p.join(10)
                self._procs = []
                break
            self._kill_all()
            now = time.monotonic()
            self.deaths.append(now)
            while self.deaths and now - self.deaths[0] > _DEATH_WINDOW:
                self.deaths.popleft()
            if len(self.deaths) >= MAX_DEATHS:
                raise RuntimeFailure(
                    f"{self.topology.name}: workers died {len(self.deaths)} times within "
                    f"{_DEATH_WINDOW:.0f} s; the last: {failure}. The run stops: look at the "
                    "log above for why they died"
                )
            self.restarts += 1
            self._bank()
            log.warning(
                "%s: %s; restarting the workers from the last committed checkpoint (restart %d)",
                self.topology.name,
                failure,
                self.restarts,
            )
            for w in self.info:
                w.restarts = self.restarts
            if self._stop or (deadline is not None and time.monotonic() >= deadline):
                return self._merge({}, time.monotonic() - start, "stopped")
        reason = next((r.reason for r in results.values()), "stopped")
        return self._merge(results, time.monotonic() - start, reason)

    def _describe_exit(self, i: int, code: int | None) -> str:
        pid = self.info[i].pid
        if code is not None and code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"worker {i} (pid {pid}) was killed by {name}"
        return f"worker {i} (pid {pid}) exited with code {code} before the run was done"

    def _progress(self, i: int, payload: Mapping[str, Any]) -> None:
        w = self.info[i]
        now = time.monotonic()
        executed = sum(m.executed for m in payload["metrics"])
        if w._at and now > w._at:
            w.rate = max(0.0, (executed - w.executed) / (now - w._at))
        w._at = now
        w.executed = executed
        w.pid = payload["pid"]
        w.tasks = payload["tasks"]
        w.metrics = payload["metrics"]
        w.counters = payload["counters"]

    def _merge(self, results: Mapping[int, RunResult], elapsed: float, reason: str) -> RunResult:
        components: dict[str, TaskMetrics] = {}
        for m in self.task_metrics():
            components.setdefault(m.component, TaskMetrics(m.component, -1)).add(m)
        errors: list[ErrorReport] = []
        counters: dict[str, int] = dict(self._past_counters)
        for i in sorted(results):
            r = results[i]
            errors.extend(r.errors)
            for k, v in r.counters.items():
                if k == "rewinds":
                    counters[k] = max(counters.get(k, 0), v)  # every worker rewinds together
                else:
                    counters[k] = counters.get(k, 0) + v
        counters["worker_restarts"] = self.restarts
        return RunResult(components, errors, elapsed, reason, counters)


class _NoLink:
    """The link of the supervisor's probe runtime: it owns no task and no acker."""

    def owns_acker(self, i: int) -> bool:
        return False

    workers = 1

    def shuffle_targets(self, sources: Sequence[int], targets: Sequence[int]) -> list[int]:
        return list(targets)

    def queue(self, task_id: int, control: bool) -> deque[Any]:
        return deque()

    def ack_lists(self) -> list[list[Any]]:
        return [[]]

    def ack_pair_lists(self) -> list[list[int]]:
        return [[]]

    def completion_lists(self) -> list[list[Any]]:
        return [[]]
