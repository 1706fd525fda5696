"""One worker process: its tasks run in rounds with its peers (see the package docstring)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import pickle
import signal
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._checkpoint import Phase
from ..._clock import Clock
from ..._config import Config
from ..._exactly_once import (
    Lockstep,
    StandstillStep,
    can_resume,
    cut_positions,
    quiet_wants_checkpoint,
)
from ..._results import ErrorReport, RunResult
from ..._resume import SpoutRef, acked_positions
from ..._topology import Topology
from ..errorlog import traceback_text
from ..local import LocalRuntime
from ..local.support import GC_YOUNG, restore_gc, tune_gc
from ..plan import RuntimePlan
from .link import LAG, Link, worker_of_task
from .mesh import PIPES, Mesh, WorkerLost

log = logging.getLogger("statestream.workers")

_REPORT_EVERY = 0.5  # seconds between a worker's progress reports
_SPOUT_BATCH = 64
_STEPS_PER_ROUND = 4
# The collector's own young-generation threshold in a worker, in GC_YOUNGs:
# a backstop for rounds too long for the collections in step (_collect).
_GC_BACKSTOP = 4
_PR_SET_PDEATHSIG = 1


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
        # The last COMMITTED(t) seen, and the round to store the acked positions
        # again at (-1: done): see _refresh_acked
        self._refresh_txid = -1
        self._refresh_round = -1

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
            if n or b.control or b.parked:
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
        st.stop = self.stop_requested or rt.stopping
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
            for s in rt.data_spouts:
                s.release_held()  # into the position (see SpoutTask.release_held)
            st.positions = cut_positions(rt.data_spouts)
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

    def run(self, until_idle: bool, duration: float | None) -> RunResult:
        """Run rounds until every worker agrees to stop.

        Round r: decide from the statuses of round q = r-LAG-1, step, send
        frame r, then read every peer's frame r-LAG and deliver it. A worker
        thus runs at most LAG rounds ahead of a peer, and waits only when a
        peer is further behind; a tuple sent in round r is executed in round
        r+LAG+1. Decisions that must be the same everywhere (stop, idle, the
        standstill, a rewind) use only what every worker knows: the statuses of
        round q and the decisions before.
        """
        rt = self.rt
        rt.open()
        self._share_acked_positions()
        clock = rt.clock
        start = rt.begin_run()
        deadline = start + duration if duration is not None else None
        cp_tasks = rt.plan.component_tasks.get("$checkpointspout", [])
        cp_worker = worker_of_task(cp_tasks[0], self.workers) if cp_tasks else 0
        ss = rt.standstill
        held = StandstillStep.DRAIN if ss is not None else None
        # Exactly-once: this worker's replica of the workers' standstill, fed
        # with the same statuses as every other (statestream._exactly_once).
        self.lockstep = (
            None
            if ss is None
            else Lockstep(
                ss,
                lag=LAG,
                checkpoint_worker=cp_worker,
                decided=deque([StandstillStep.DRAIN] * (LAG + 1)),
            )
        )
        old: list[_Status] | None = None  # statuses of round q = r-LAG-1
        # for each round q-LAG to q-1: was anything sent (unknown: yes)
        sent_before: deque[bool] = deque([True] * LAG, maxlen=LAG)
        mine_before: deque[_Status] = deque()  # this worker's statuses of rounds r-LAG to r-1
        reason = "stopped"
        gc_before = tune_gc()
        # Collections in step (see _collect); the collector's own only as a backstop.
        gc.set_threshold(GC_YOUNG * _GC_BACKSTOP, *gc.get_threshold()[1:])
        try:
            while True:
                decision = held
                if old is not None:
                    stop, decision = self._agree(old, sent_before, until_idle)
                    if stop is not None:
                        reason = stop
                        break
                busy, emitted, decision = self._steps(decision, old)
                if rt.fatal is not None:
                    raise rt.fatal  # the supervisor stops every worker
                if rt.after_step is not None:
                    rt.after_step()
                if deadline is not None and clock.monotonic() >= deadline:
                    self.stop_requested = self._deadline = True
                if self.lockstep is not None and decision is not None:
                    self.lockstep.record(decision)
                draining = decision is not None and decision is not StandstillStep.POLL
                mine = self._status(busy, emitted, draining)
                need = len(mine_before) == LAG
                peers = self._exchange(mine, need=need)
                if need:
                    sent_before.append(old is None or any(s.sent for s in old))
                    peers[self.index] = mine_before.popleft()
                    old = peers
                mine_before.append(mine)
                if self._refresh_acked_here:
                    self._refresh_acked()
                self._maybe_report()
            self.mesh.close()
            rt.finish_queued()
            rt.store_acked_positions()
        finally:
            restore_gc(gc_before)
            rt.close()
        fatal = rt.fatal_error()
        if fatal is not None:
            raise fatal  # close(): a sink could not write the last checkpoint
        return RunResult(
            rt.metrics(), list(rt.errors), clock.monotonic() - start, reason, rt.counters()
        )

    def _agree(
        self, old: list[_Status], sent_before: deque[bool], until_idle: bool
    ) -> tuple[str | None, StandstillStep | None]:
        """What every worker decides alike from the statuses of round q: why the run
        stops (None: it goes on), and what the data spouts do this round."""
        rt = self.rt
        decision = None if self.lockstep is None else StandstillStep.DRAIN
        fresh = all(s.epoch == self.epoch for s in old)
        if any(s.stop for s in old):
            return "duration" if any(s.deadline for s in old) else "stopped", decision
        moved = any(sent_before) or any(s.busy or s.sent for s in old)
        quiet = not moved or rt.checkpoints_nonstop  # (see LocalRuntime.checkpoints_nonstop)
        if until_idle and fresh and quiet and all(s.idle for s in old):
            # The end of a bounded input: the windows fire first (every worker
            # sends the end-of-input tuple to its tasks in the same round), and
            # a checkpoint after that commits what they emitted.
            committed = max(s.committed for s in old)
            if rt.end_of_input(committed):
                return None, decision
            if rt.ending.committed(committed):
                return "idle", decision
            cp = rt.checkpoint_spout
            if cp is not None and not cp.coordinator.pending:
                cp.request_early()
        if self.lockstep is not None and fresh:
            decided = self.lockstep.decide(old, not any(sent_before))
            if isinstance(decided, StandstillStep):
                decision = decided
            else:  # REWIND: every worker goes back in this round
                rt.rewind()
                self.link.clear()
                self.epoch += 1
        self.link.remote_lengths({k: v for s in old for k, v in s.lengths.items()})
        if self._gc_wait:
            self._gc_wait -= 1
        elif any(s.gc for s in old):
            _collect()
            # the statuses of the rounds before this one say "due" still
            self._gc_wait = LAG
        if fresh and not moved:
            self._quiet(old, until_idle)
        return None, decision

    def _steps(
        self, decision: StandstillStep | None, old: list[_Status] | None
    ) -> tuple[bool, int, StandstillStep | None]:
        """This round's scheduler steps: whether anything moved, how many spout tuples
        were emitted, and the decision as it stands after them (a cut is taken once)."""
        rt = self.rt
        busy = False
        emitted = 0
        # Several scheduler steps per round while there is work: fewer
        # frames and wake-ups for the same tuples. One step when the
        # standstill decides, so that a cut is taken once.
        steps = _STEPS_PER_ROUND if decision is None or decision is StandstillStep.POLL else 1
        for _ in range(steps):
            moved = False
            for bolt in rt.bolts:
                if (bolt.inbox or bolt.control) and bolt.drain():
                    moved = True
            rt.fire_due_timers(rt.clock.monotonic())
            rt.observe_checkpoint()
            if decision is StandstillStep.CUT:
                assert old is not None
                self._cut(old)
                decision = StandstillStep.DRAIN
            s_busy, n = self._poll_spouts(decision)
            emitted += n
            if not (moved or s_busy):
                break
            busy = True
        return busy, emitted, decision

    lockstep: Lockstep | None = None
    _refresh_acked_here = False  # at-least-once, on the checkpoint spout's worker
    _gc_wait = 0
    _deadline = False
    epoch = 0

    def _share_acked_positions(self) -> None:
        """At-least-once: each worker sends its data spouts' acked positions in every
        status, and the checkpoint spout's worker stores the newest it has heard of
        with each record it stores (an older one is still safe: acked positions only grow)."""
        rt = self.rt
        if rt.standstill is not None or not rt.plan.checkpointed:
            return
        self._resumable = [r for r in rt.spout_refs() if can_resume(r.spout)]
        cp = rt.checkpoint_spout
        if cp is not None:
            mine = self._resumable
            cp.acked_positions = lambda: {**self._peer_acked, **rt.heard_acked_positions(mine)}
            self._refresh_acked_here = True

    def _refresh_acked(self) -> None:
        """At-least-once, on the checkpoint spout's worker: store the acked positions
        once more a while after each COMMITTED(t). The acks the commit of t
        released reach a spout in another worker, and its report of them this
        worker, rounds later: a data tuple sent in round r is executed in round
        r+LAG+1, so the acks released up to the commit's round r0 are heard by
        round r0+LAG+2 and reported here by round r0+2*LAG+3. Stored then with
        the txid a recovery restores (t, or t+1 if its commit is under way:
        safe at any moment, see CheckpointRecord.with_acked); one write per
        checkpoint at most, none if nothing changed."""
        cp = self.rt.checkpoint_spout
        assert cp is not None
        cs = cp.record.state
        if cs.phase is Phase.COMMITTED and cs.txid > self._refresh_txid:
            self._refresh_txid = cs.txid
            self._refresh_round = self.rounds + 2 * LAG + 3
        elif 0 <= self._refresh_round <= self.rounds:
            self._refresh_round = -1  # once per commit
            self.rt.store_acked_positions()

    def _cut(self, statuses: list[_Status]) -> None:
        """Exactly-once: every worker stands still; the checkpoint spout's worker
        starts the PREPARE with every worker's positions. The data spouts wait
        until the PREPARE has reached the bolts of every worker (Lockstep.hold)."""
        rt = self.rt
        assert self.lockstep is not None
        positions = self.lockstep.cut(statuses)
        for s in rt.data_spouts:
            s.retries.passed_cut()
        cp = rt.checkpoint_spout
        if cp is None:
            return
        cp.request_early()
        cp.start_prepare(positions)

    def _quiet(self, statuses: list[_Status], until_idle: bool) -> None:
        """No worker moved last round: ask for a checkpoint if acks wait for one, or sleep."""
        rt = self.rt
        if quiet_wants_checkpoint(rt.standstill, statuses):
            cp = rt.checkpoint_spout
            if cp is not None and not cp.coordinator.pending:
                cp.request_early()
            return
        if until_idle and rt.data_spouts:
            # Only a worker with data spouts can tell whether data moved.
            rt.explain_wait()
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
            "bank": rt.bank.export(),
            "sources": rt.source_progress(),
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


def worker_main(
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
    for fd in list(PIPES):
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
        os._exit(EXIT_PEER_LOST)
    except BaseException as exc:
        text = traceback_text(exc)
        try:
            pickle.dumps(exc)
            err: Any = exc
        except Exception:
            err = None
        with contextlib.suppress(Exception):
            report.send(("fatal", index, (err, f"{type(exc).__name__}: {exc}", text)))
        os._exit(EXIT_FATAL)
    os._exit(0)


EXIT_PEER_LOST = 75
EXIT_FATAL = 70


def _portable_result(result: RunResult) -> RunResult:
    errors = [
        ErrorReport(e.component, e.task_index, e.tuple, e.error, e.traceback) for e in result.errors
    ]
    return RunResult(result.components, errors, result.elapsed, result.reason, result.counters)
