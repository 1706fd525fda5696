"""The local runtime: one process, one scheduler thread, N tasks per component."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from ..._components import task_namespace
from ..._config import settings_of
from ..._errors import SimulatedCrash, StateLockedError
from ..._exactly_once import CheckpointRecord, Standstill, StandstillStep, cut_positions
from ..._results import RunResult, TaskMetrics, WorkerInfo
from ..._resume import SpoutRef, acked_positions, restore_spouts
from ..._stateful import CHECKPOINT_SPOUT
from ..._tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Origin, Tuple
from ..._windowed import END_OF_INPUT_STREAM, WindowedBoltExecutor
from ..metrics import MetricsSnapshot, SourceProgress, progress_of
from .acking import TIMEOUT_BUCKETS
from .base import RuntimeBase
from .bolt import BoltTask
from .spout import SPOUT_BATCH, SpoutTask
from .support import TickSender, naming, restore_gc, tune_gc

log = logging.getLogger("statestream")

# Seconds between two looks at a claim of the store that can lapse (a lease):
# well within a lease's life, and a timer, so nothing per tuple.
_CLAIM_CHECK_S: Final = 1.0


class LocalRuntime(RuntimeBase):
    """Run a topology in this process.

    >>> rt = LocalRuntime(topology, config)
    >>> result = rt.run(until_idle=True)

    ``config`` is a :class:`statestream.Config` or a plain mapping of keys
    (merged over the defaults). ``clock`` is where time comes from; pass a
    :class:`statestream.testing.FakeClock` to make timeouts instant in tests.
    """

    def open(self) -> None:
        """Call ``open``/``prepare`` on every task (``run`` does it for you)."""
        if self._started:
            return
        had_claim = self.store.claimed
        if self.topology.has_stateful_bolts and self.link is None:
            # The claim of the store, first: refused, it leaves the runtime
            # unopened (close() has nothing to do).
            self.store.open(rescale=False)
        self._started = True
        try:
            self._open_tasks()
        except BaseException:
            if not had_claim:  # a failed rewind keeps it: the run's close() lets it go
                self.store.release_claim()
            raise

    def _open_tasks(self) -> None:
        if self.topology.has_stateful_bolts and self.link is None:
            # Before any task reads its state: a bolt whose parallelism
            # changed since the last run gets its keys re-partitioned. (With
            # several workers their supervisor does it, once, before they start.)
            self.store.rescale()
        for spout in self.spouts:
            with naming(spout, "open()"):
                spout.spout.open(self.conf_for(spout.spec), self._context(spout), spout)
        if self.plan.checkpointed:
            self._seek_data_spouts()
        self._load_deadletters()
        for bolt in self.bolts:
            with naming(bolt, "prepare()"):
                bolt.executor.prepare(self.conf_for(bolt.spec), self._context(bolt), bolt)
        self._setup_timers()

    def _seek_data_spouts(self) -> None:
        """Seek every data spout to where the restored checkpoint says (statestream._resume):
        exactly-once, the positions of its cut; at-least-once, its acked positions,
        which the checkpoint spout stores with each PREPARE from then on."""
        cp = self.checkpoint_spout
        if cp is not None:
            record = cp.record
        else:
            # The checkpoint spout runs in another worker: the stored record
            # gives the same restore point (it is where recovery ends).
            record = CheckpointRecord.load(self.open_state(task_namespace(CHECKPOINT_SPOUT, 0)))
        refs = self.spout_refs()
        plan = restore_spouts(record, self.exactly_once, refs)
        if self.rewinds == 0:  # at start; a rewind says so itself
            if plan.warning and (self.link is None or self.link.index == 0):  # once
                log.warning("%s", plan.warning)
            for line in plan.lines:
                log.warning("%s", line)
        if cp is not None and not self.exactly_once:
            cp.acked_positions = lambda: self.heard_acked_positions(refs)

    def heard_acked_positions(self, refs: list[SpoutRef]) -> dict[str, Any]:
        """At-least-once: the data spouts' acked positions once they heard every ack
        that reached them. The checkpoint spout stores COMMITTED(t) when the acker
        completes COMMIT(t), in the step where the acks that commit released may
        still wait in a data spout's completions: delivered first, they count."""
        for s in self.data_spouts:
            if s.completions:
                s.drain_completions()
        return acked_positions(refs)

    def store_acked_positions(self) -> None:
        """At-least-once, at the clean end of a run: the checkpoint spout stores where
        the data spouts were acked, so that a rerun does not read it again."""
        cp = self.checkpoint_spout
        if cp is None or cp.acked_positions is None:
            return
        try:
            cp.store_acked()
        except Exception as exc:  # nothing is lost: the rerun reads from the last prepare's
            log.warning(
                "could not store where the spouts were acked (%s); the next run reads "
                "again from the positions of the last checkpoint",
                exc,
            )

    def spout_refs(self) -> list[SpoutRef]:
        """This process's data spout tasks, as statestream._resume sees them."""
        return [
            SpoutRef(s.namespace, s.component, s.task_index, s.spec.parallelism, s.spout)
            for s in self.data_spouts
        ]

    def rewind(self) -> None:
        """Exactly-once: go back to the last committed checkpoint within the run.

        As Flink restarts from its last checkpoint: the spouts are closed
        (their sources are released), the bolts are dropped as a crash would
        drop them (``cleanup`` is for the end of a run), the provider is
        closed without committing anything, and new tasks open and recover
        from the store as at a start; the spouts seek to the positions of
        the restored checkpoint, so nothing is counted twice.
        """
        assert self.standstill is not None
        self.rewinds += 1
        # Finish the attempt first: what is queued runs (no spout is polled,
        # so no tuple and no checkpoint tuple is emitted), so that every
        # message emitted in it has failed (an attempt of its own) or gone
        # through (its count forgotten; see statestream._retry). Acks
        # delivered to a data spout belong to committed trees (a fed-back
        # dead letter among them is done). Not the checkpoint spout's: an ack
        # of the PREPARE in flight would store COMMITTING and commit a cut
        # this failure undoes.
        self.finish_queued(self.data_spouts)
        complete = not any(b.inbox or b.control or b.parked for b in self.bolts)  # none paused
        # What was emitted and not acked is replayed: the sources seek back,
        # and the dead letters fed back go out again (statestream._messages).
        self.fail_causes.clear()
        for book in self._books.values():
            book.rewound(complete, reopen=True)
        self._release_spouts()
        for tasks in self.tasks_of.values():
            for t in tasks:
                m = t.metrics()
                past = self._past.setdefault(
                    (t.component, t.task_index), TaskMetrics(t.component, t.task_index)
                )
                m.queued = m.retrying = 0
                past.add(m)
        for key, value in self._live_counters().items():
            if key in ("timed_out", "acker_expired", "late_acks", "late_tuples"):
                self._past_counters[key] = self._past_counters.get(key, 0) + value
        self._timers = []
        self._states = {}
        self.ending.reset()  # the windows come back as committed: they end again
        self.store.disconnect()  # the claim stays: open() below checks it was not lost
        self.standstill.on_rewind()
        self._build()
        self._started = False
        self.open()
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))
        if self.link is None or self.link.index == 0:  # every worker rewinds: one line
            log.warning(
                "exactly-once state: a tuple or checkpoint failed; went back to the last "
                "committed checkpoint (rewind %d)",
                self.rewinds,
            )

    def _setup_timers(self) -> None:
        now = self.clock.monotonic()
        settings = settings_of(self.config)
        if self.acking is not None and settings.topology_enable_message_timeouts:
            period = settings.topology_message_timeout_secs / (TIMEOUT_BUCKETS - 1)
            self._timers.append([now + period, period, self._rotate_timeouts])
        by_freq: dict[float, list[BoltTask]] = {}
        for bolt in self.bolts:
            freq = settings_of(self.conf_for(bolt.spec)).topology_tick_tuple_freq_secs
            if freq:
                by_freq.setdefault(freq, []).append(bolt)
        for freq, bolts in by_freq.items():
            origin = Origin(SYSTEM_COMPONENT, -1, 0, TICK_STREAM, Fields("freq"))
            self._timers.append([now + freq, freq, TickSender(bolts, origin, freq)])
        if self.store.can_lapse:
            self._timers.append([now + _CLAIM_CHECK_S, _CLAIM_CHECK_S, self._check_claim])
        # So that step() fires timers when a caller drives the loop itself.
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))

    def _check_claim(self) -> None:
        """Stop the run once its claim of the store is lost (a lease taken over, or
        lapsed while the store could not be reached): another run may be writing
        this topology's state, and two would undo each other's checkpoints.
        :meth:`run` raises :attr:`fatal`; what was committed stays."""
        if self.fatal is None and self.store.lost is not None:
            try:
                self.store.check()
            except StateLockedError as exc:
                self.fatal = exc
                self._stop = True

    def _rotate_timeouts(self) -> None:
        assert self.acking is not None
        self.acking.tick()
        for spout in self.spouts:
            spout.pending.rotate()

    def begin_run(self) -> float:
        """The run starts now (on the runtime's clock, returned): timers count from it."""
        start = self._start_time = self.clock.monotonic()
        self.bank.begin(start)
        self._next_due = min((t[0] for t in self._timers), default=float("inf"))
        return start

    def fire_due_timers(self, now: float) -> None:
        """Fire the timers due at ``now`` (what :meth:`step` does between bolts and spouts),
        and give bolts back the failed tuples whose retry delay has passed."""
        if self.parking:
            self.release_parked(now)
        if now >= self._next_due:
            self._next_due = self._fire_timers(now)

    @property
    def stopping(self) -> bool:
        """True once the run was asked to stop (:meth:`stop`, or a fatal error)."""
        return self._stop

    def _fire_timers(self, now: float) -> float:
        due = float("inf")
        for timer in self._timers:
            if now >= timer[0]:
                timer[2]()
                # Skip missed periods instead of firing a burst after a stall.
                timer[0] = max(timer[0] + timer[1], now)
            due = min(due, timer[0])
        return due

    def _release_spouts(self) -> None:
        self.source_progress()  # the bank keeps where they got to: closed, they cannot say
        for spout in self.spouts:
            try:
                spout.spout.close()
            except Exception as exc:
                spout.report(exc, "close()")

    def _abandon(self) -> None:
        """Die as a process would, as far as one process can: bolts are dropped
        without ``cleanup`` and nothing is committed; the spouts are closed only
        to release their sources (an open file, say) and the store's connection
        is dropped, which the operating system would do for a dead process."""
        self._closed = True
        self._release_spouts()
        self.store.close()  # as a dead process's lock goes with it

    def close(self) -> None:
        """Call ``close``/``cleanup`` on every task; idempotent."""
        if self._closed or not self._started:
            return
        self._closed = True
        try:
            self._release_spouts()
            for bolt in self.bolts:
                try:
                    bolt.executor.cleanup()
                except Exception as exc:
                    bolt.report(exc, "cleanup()")
        finally:
            self.store.close()

    def __enter__(self) -> LocalRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the loop ----------------------------------------------------------------
    def step(self) -> bool:
        """One round: drain every bolt, fire due timers, poll every spout. True if anything moved."""
        busy = False
        for bolt in self.bolts:
            if (bolt.inbox or bolt.control) and bolt.drain():
                busy = True
        self.fire_due_timers(self.clock.monotonic())
        if self._checkpoint_task is not None:
            self.observe_checkpoint()
        standstill = self.standstill
        if standstill is None:
            for spout in self.spouts:
                if spout.poll():
                    busy = True
            return busy
        if standstill.rewind:
            self.rewind()
            return True
        return self._step_spouts(standstill) or busy

    def observe_checkpoint(self) -> None:
        """Once per scheduler step: if the checkpoint record moved (each phase is
        stored before it goes out, and a step moves it at most once), the bank
        notes the phase and when. Nothing where the checkpoint spout runs elsewhere."""
        cp = self.checkpoint_spout
        if cp is None or cp.record is self._seen_record:
            return
        record = self._seen_record = cp.record
        if self._seen_any:
            cs = record.state
            self.bank.checkpoint_phase(cs.txid, cs.phase.value, self.clock.monotonic())
        self._seen_any = True  # the record as loaded at start is no event

    def _step_spouts(self, standstill: Standstill) -> bool:
        """Exactly-once: poll the spouts as the standstill decides."""
        cp = self.checkpoint_spout
        assert cp is not None
        queued = any(b.inbox or b.control or b.parked for b in self.bolts)
        decision = standstill.step(
            cp.prepare_due(), queued, cp.committed_txid, cp.coordinator.pending is not None
        )
        if decision is StandstillStep.CUT:
            # A failure of a tuple before the cut undoes it: hear of them first.
            for s in self.data_spouts:
                if s.completions:
                    s.drain_completions()
            if standstill.rewind or standstill.failed:
                standstill.rewind = True
                return True
            standstill.on_cut()
            for s in self.data_spouts:
                s.retries.passed_cut()
                s.release_held()
            # Nothing is queued: the positions mark exactly what the states hold.
            positions = cut_positions(self.data_spouts)
            cp.request_early()
            cp.start_prepare(positions)
        busy = False
        offered = 0
        for spout in self.spouts:
            if decision is StandstillStep.DRAIN and not spout.system:
                if spout.completions:
                    spout.drain_completions()
                    busy = True
                continue
            if spout.system:
                busy = spout.poll() or busy
                continue
            emitted = spout.emitted + spout.held
            if spout.poll(standstill.allowance(SPOUT_BATCH)):
                busy = True
            offered += spout.emitted + spout.held - emitted
        standstill.emitted += offered
        if decision is StandstillStep.POLL and not (offered or queued) and standstill.ends_early():
            cp.request_early()
        return busy

    def in_flight(self) -> int:
        """Tuples queued or tracked but not yet complete."""
        n = sum(len(b.inbox) + len(b.parked) for b in self.bolts)
        n += sum(len(s.pending) + len(s.completions) for s in self.spouts)
        return n

    def end_of_input(self, committed: int) -> bool:
        """The input is at its end (``until_idle``): send the end-of-input tuple to
        this process's tasks of the next windowed bolt (:class:`EndOfInput` says
        which; ``committed`` is the last committed txid), so that its open windows
        fire; False once every one had it."""
        cid = self.ending.next(committed)
        if cid is None:
            return False
        origin = Origin(SYSTEM_COMPONENT, -1, 0, END_OF_INPUT_STREAM, Fields())
        for task in self.tasks_of.get(cid, ()):
            if isinstance(task, BoltTask):
                task.inbox.append(Tuple([], origin))
        return True

    def ends_committed(self) -> bool:
        """Whether what the windows fired at the end of input is committed (asking for
        the checkpoint that commits it if not)."""
        cp = self.checkpoint_spout
        if cp is None or self.ending.committed(cp.committed_txid):
            return True
        if not cp.coordinator.pending:
            cp.request_early()
        return False

    def idle(self) -> bool:
        """Every spout is exhausted and nothing is in flight; or, at-least-once, the
        only tuples in flight are held by windows in memory (:meth:`windows_hold_the_rest`)."""
        if any(b.inbox or b.parked for b in self.bolts):
            return False
        return all(s.idle() for s in self.data_spouts) or self.windows_hold_the_rest()

    def windows_hold_the_rest(self) -> bool:
        """At-least-once, a windowed bolt keeps its windows in memory and acks a tuple
        once no window holds it (statestream._windowed): the spouts' tuples stay
        pending, so they are never exhausted while a window is open. Before the
        end of input has gone to every windowed bolt, a step in which no spout
        emitted (the caller's ``not busy``) though each had room to, while windows
        hold tuples, is the end of the input."""
        if self.exactly_once or not self.ending.todo:
            return False
        held = False
        for b in self.bolts:
            w = getattr(b.executor, "bolt", None)
            if isinstance(w, WindowedBoltExecutor) and w.in_memory and len(w.core):
                held = True
        return held and all(s.quiet() for s in self.data_spouts)

    def run(self, until_idle: bool = False, duration: float | None = None) -> RunResult:
        """Run until stopped, until ``duration`` seconds pass, or (``until_idle``) until
        every spout is exhausted and nothing is in flight. Closes the tasks at the end."""
        try:
            self.open()
        except BaseException:
            # A run refused at its start (a changed parallelism, a crash in the
            # rescale) leaves no connection to its store open (unclosed, a
            # ResourceWarning from Python 3.13 on). The claim went already.
            self.store.close()
            raise
        clock = self.clock
        start = self.begin_run()
        deadline = start + duration if duration is not None else None
        reason = "stopped"
        gc_before = tune_gc()
        try:
            while not self._stop:
                busy = self.step()
                if self.after_step is not None:
                    self.after_step()
                if deadline is not None and clock.monotonic() >= deadline:
                    reason = "duration"
                    break
                if until_idle and (not busy or self.checkpoints_nonstop) and self.idle():
                    cp = self.checkpoint_spout
                    if self.end_of_input(-1 if cp is None else cp.committed_txid):
                        continue  # the windows it fires run before the run ends
                    if self.ends_committed():
                        reason = "idle"
                        break
                if not busy:
                    if until_idle:
                        self.explain_wait()
                    # A failed tuple waiting out its retry delay holds the cut
                    # back: the clock must move for it.
                    if self._waiting_for_commit() and not self.parked():
                        continue
                    clock.sleep(self.idle_sleep)
            if self.fatal is not None:
                raise self.fatal
            self.finish_queued()
            self.store_acked_positions()
        except SimulatedCrash:
            self._abandon()
            raise
        finally:
            self.bank.end(clock.monotonic())
            restore_gc(gc_before)
            self.close()
            self.error_log.log_repeats()
        fatal = self.fatal_error()
        if fatal is not None:
            # Set by close(): a sink's cleanup() that could not write the run's last
            # checkpoint. The same outcome as a refusal mid-run: the run fails.
            raise fatal
        return RunResult(
            self.metrics(), list(self.errors), clock.monotonic() - start, reason, self.counters()
        )

    def fatal_error(self) -> BaseException | None:
        """The error that ends the run, if any. (A method: read after ``close()``, which
        may set it, where the compiled code would take ``fatal`` for still None.)"""
        return self.fatal

    def explain_wait(self) -> None:
        """``until_idle``: once no data has moved for a message timeout, say why the
        run is not done (then again every timeout), instead of waiting in silence."""
        now = self.clock.monotonic()
        if now < self._wait_check_at:
            return
        self._wait_check_at = now + 1.0
        moved = tuple((s.emitted, s.acked, s.failed, s.retries.waiting) for s in self.data_spouts)
        if moved != self._wait_moved:
            self._wait_moved, self._quiet_since = moved, now
            return
        timeout = settings_of(self.config).topology_message_timeout_secs
        if now - self._quiet_since < timeout or now - self._wait_said_at < timeout:
            return
        self._wait_said_at = now
        log.warning(
            "%s: --until-idle has seen no progress for %.0f s and is not done: %s",
            self.topology.name,
            now - self._quiet_since,
            "; ".join(self.waiting_for()) or "nothing known holds it (a bug: please report)",
        )

    def waiting_for(self) -> list[str]:
        """Why the run is not idle: the spouts not exhausted, the tuple trees and
        retries they wait for, the bolts holding input."""
        reasons = []
        for s in self.data_spouts:
            name = f"spout {s.component!r}" + (
                f" task {s.task_index}" if s.spec.parallelism > 1 else ""
            )
            try:
                exhausted = s.spout.exhausted()
            except Exception:  # reported where it is called for idleness
                exhausted = False
            if not exhausted:
                reasons.append(
                    f"{name} has not reported exhausted() (emitted {s.emitted:,}, "
                    f"acked {s.acked:,}); a finite spout must return True once it is done"
                )
            if len(s.pending):
                reasons.append(f"{name} waits for {len(s.pending):,} tuple trees to complete")
            failing = s.retries.failures
            if failing:
                worst = sorted(failing.items(), key=lambda kv: -kv[1])[:5]
                ids = ", ".join(f"{k!r} ({n} failures)" for k, n in worst)
                reasons.append(f"{name} has messages failing again and again: {ids}")
        for b in self.bolts:
            if b.inbox:
                reasons.append(
                    f"bolt {b.component!r} task {b.task_index} has {len(b.inbox):,} tuples queued"
                )
            if b.parked:
                reasons.append(
                    f"bolt {b.component!r} task {b.task_index} retries {len(b.parked):,} failed "
                    "tuples after their delay"
                )
            if b.held:
                trees = len({root for root, _ in b.held})
                reasons.append(
                    f"bolt {b.component!r} task {b.task_index} holds acks of {trees:,} "
                    "tuple trees until its next commit"
                )
        return reasons

    def _waiting_for_commit(self) -> bool:
        """If nothing moves but stateful tasks hold acks, ask for a checkpoint now.

        Without this a finite input would wait up to a whole checkpoint
        interval at its end, and a trickle of tuples would wait that long for
        its acks. True if a checkpoint was requested.
        """
        cp = self.checkpoint_spout
        if cp is None or cp.coordinator.pending:
            return False
        if not any(t.awaits_checkpoint() for t in self.bolts):
            return False
        cp.request_early()
        return True

    def finish_queued(self, spouts: Sequence[SpoutTask] | None = None) -> None:
        """Process what is already queued (no new spout tuples) so that a stop
        does not strand work mid-topology; completions reach their spouts (or
        only ``spouts``)."""
        busy = True
        while busy:
            busy = False
            for bolt in self.bolts:
                if (bolt.inbox or bolt.control) and bolt.drain():
                    busy = True
        for spout in self.spouts if spouts is None else spouts:
            if spout.completions:
                spout.drain_completions()

    # -- observation -----------------------------------------------------------
    def counters(self) -> dict[str, int]:
        c = self._live_counters()
        for key, value in self._past_counters.items():
            c[key] = c.get(key, 0) + value
        c["dead_lettered"] = sum(m.dead_lettered for m in self.task_metrics())
        if self.exactly_once:
            c["rewinds"] = self.rewinds
        return c

    def _live_counters(self) -> dict[str, int]:
        """The counters of the tasks built last (a rewind builds new ones)."""
        c = {
            "untracked_acks": self.untracked_acks,
            "timed_out": sum(s.timed_out for s in self.spouts),
            "pending": sum(len(s.pending) for s in self.spouts),
            "retrying": sum(s.retries.waiting for s in self.data_spouts),
            "skipped_dead_letters": self.skipped_settled,
        }
        # Windowed bolts (statestream._windowed) count the late tuples they took.
        windowed = [
            w
            for w in (getattr(b.executor, "bolt", None) for b in self.bolts)
            if isinstance(w, WindowedBoltExecutor)
        ]
        if windowed:
            c["late_tuples"] = sum(w.late_tuples for w in windowed)
        if self.acking is not None:
            c["acker_pending"] = self.acking.pending()
            c["acker_expired"] = self.acking.timeouts
            c["late_acks"] = sum(getattr(led, "late_acks", 0) for led in self.acking.ledgers)
        return c

    def worker_rows(self) -> list[WorkerInfo]:
        """No worker processes: one process runs every task (the Runtime contract)."""
        return []

    def metrics_snapshot(self) -> MetricsSnapshot:
        """The bank's view of the run now (the Runtime contract)."""
        return self.bank.snapshot(
            self.clock.monotonic(),
            self.task_metrics(),
            self.counters(),
            sources=self.source_progress(),
        )

    def source_progress(self) -> list[SourceProgress]:
        """How far each data spout task of this process has read, where it can tell."""
        return self.bank.sources(
            progress_of(s.component, s.task_index, s.spout) for s in list(self.data_spouts)
        )

    def metrics(self) -> dict[str, TaskMetrics]:
        """Per-component totals (a consistent-enough snapshot; safe to call from another thread)."""
        out: dict[str, TaskMetrics] = {}
        for m in self.task_metrics():
            out.setdefault(m.component, TaskMetrics(m.component, -1)).add(m)
        return out

    def task_metrics(self) -> list[TaskMetrics]:
        out = []
        for tasks in list(self.tasks_of.values()):
            for t in tasks:
                m = t.metrics()
                past = self._past.get((t.component, t.task_index))
                if past is not None:
                    m.add(past)
                out.append(m)
        return out

    _next_due = float("inf")
    _seen_record: object = None  # the checkpoint record the bank saw last
    _seen_any = False
