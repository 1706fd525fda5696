"""A spout task of the local runtime: polls ``next_tuple``, tracks its message ids."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from ..._components import Spout
from ..._config import settings_of
from ..._deadletter import Replay, Settled
from ..._errors import RuntimeFailure
from ..._messages import Cause, MessageBook
from ..._results import TaskMetrics
from ..._retry import Retries, msg_id_key_fast
from ..._rotating import RotatingMap
from ..._stateful import CHECKPOINT_SPOUT
from ..._topology import ComponentSpec
from ..._tuple import Origin
from .acking import TIMEOUT_BUCKETS
from .tasks import Route, Task

if TYPE_CHECKING:
    from .host import TaskHost


SPOUT_BATCH: Final = 64
#: The bound on a spout task's tuples in flight when topology.max.spout.pending is
#: null: as fast as unbounded, with the memory of an exactly-once run bounded
#: (bench/RESULTS-state.md: 52 MB for the word count, 124 MB at 781k words).
DEFAULT_MAX_PENDING: Final = 10_000
_COMPLETIONS_PER_POLL: Final = 1024
_MISSING: Final = object()
# Sampled trees whose emit time is kept at most (a tree that times out never
# takes its entry out; past this, the entries start over).
_MAX_TIMED: Final = 4096


class SpoutTask(Task):
    """Runs one spout task: polls ``next_tuple``, tracks its message ids.

    A failed or timed-out message goes through the retry policy
    (:mod:`statestream._retry`): handed back with ``Spout.fail`` once its
    delay has passed, or, after its last attempt, written to the dead-letter
    file and settled with ``Spout.dead_lettered``. With exactly-once state a
    failure rewinds the topology instead (:meth:`LocalRuntime.rewind`), and
    counts as an attempt of the message that caused it.
    """

    def __init__(self, rt: TaskHost, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.spout: Spout = rt.topology.instantiate(spec.id)
        self.system = spec.id == CHECKPOINT_SPOUT  # the checkpoint spout: not a data source
        self.completions: deque[tuple[int, bool]] = deque()
        # Its bound append (the acker's outcomes arrive through it): deque is
        # not a compiled type, so calling ``completions.append`` would look
        # the method up by name.
        self.complete: Callable[[tuple[int, bool]], None] = self.completions.append
        # root -> (msg_id, values, origin): what a dead-letter record names.
        self.pending: RotatingMap[int, Any] = RotatingMap(TIMEOUT_BUCKETS, self._expired)
        pending = settings_of(rt.conf_for(spec)).topology_max_spout_pending
        self.max_pending: int | None = DEFAULT_MAX_PENDING if pending is None else pending
        self.timed_out = 0
        self.dead_lettered = 0
        # Emits not delivered: held for a retry (exactly-once) or settled. The
        # standstill counts them, so that a replay is cut where its attempt was.
        self.held = 0
        # Kept by the runtime per task namespace, so that it outlives a rewind
        # (statestream._messages); its containers read directly, as cheap tests.
        self.book: MessageBook = rt.book_for(spec.id, task_index)
        self.retries: Retries = self.book.retries
        self.failures = self.book.failures  # the same dict: a cheap test at emit
        self.settled: Settled = self.book.settled
        self.settles: deque[Any] = self.book.settles  # to tell dead_lettered() at the next poll
        self.replays: deque[Replay] = self.book.replays
        # root -> when it was emitted, for the sampled trees (complete latency).
        self.emitted_at: dict[int, float] = {}

    def metrics(self) -> TaskMetrics:
        m = super().metrics()
        if not self.system:
            # Exactly-once hands nothing back: what waits is each failed message
            # until the topology has replayed it through a commit.
            retries = self.retries
            m.retrying = len(retries.failures) if self.rt.exactly_once else retries.waiting
        m.dead_lettered = self.dead_lettered
        return m

    # -- the collector the spout sees ------------------------------------
    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> None:
        entry = self.default_stream if stream == "default" else self.streams.get(stream)
        if entry is None or len(values) != entry.arity or entry.direct:
            entry = self._stream_entry(stream, values, False)  # raises the right error
        self._emit(entry.origin, entry.routes, values, msg_id, None)

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default"
    ) -> None:
        entry = self._stream_entry(stream, values, True)
        origin, routes = entry.origin, entry.routes
        self._check_direct(routes, task)
        self._emit(origin, routes, values, msg_id, task)

    def report_error(self, error: BaseException) -> None:
        self.report(error)

    def _emit(
        self,
        origin: Origin,
        routes: list[Route],
        values: Sequence[Any],
        msg_id: Any,
        direct: int | None,
    ) -> None:
        acking = self.rt.acking
        if msg_id is None:
            self.emitted += 1
            self.deliver_untracked(origin, routes, values, direct)
        elif acking is None:
            # At-most-once: nothing is tracked, the spout hears "ack" at once.
            self.emitted += 1
            self.deliver_untracked(origin, routes, values, direct)
            self.completions.append((msg_id, True))
            self.rt.untracked_acks += 1
        else:
            if self.settled and self._settled_already(msg_id, values):
                return
            standstill = self.rt.standstill
            if (
                self.failures
                and standstill is not None
                and self.retries.hold(msg_id, self.rt.clock.monotonic(), standstill.replaying)
            ):
                # Failed before, its retry not due: replayed without it (see
                # statestream._retry); the schedule hands it back to the spout.
                self.held += 1
                return
            self.emitted += 1
            root = self.rt.draw_root()
            self.pending.put_new(root, (msg_id, values, origin))  # a fresh root
            sample = self.sample_in - 1
            if sample:
                self.sample_in = sample
            else:
                self._time_tree(root)
            acking.init(
                root, self.task_id, self.deliver_spout(origin, routes, values, direct, root)
            )

    def _time_tree(self, root: int) -> None:
        """A sampled emit: its tree's complete latency is taken when it is acked."""
        self.sample_in = self.sample_every
        timed = self.emitted_at
        if len(timed) >= _MAX_TIMED:  # trees that timed out leave theirs behind
            timed.clear()
        timed[root] = self.rt.clock.monotonic()

    def _settled_already(self, msg_id: Any, values: Sequence[Any]) -> bool:
        """True if the dead-letter file holds this very message: it is not delivered,
        and the spout is told it is settled at the next poll."""
        if not self.book.skips(msg_id, values):
            return False
        self.rt.skipped_settled += 1
        self.held += 1  # emitted, not delivered: the standstill counts it still
        return True

    # -- failures -------------------------------------------------------------
    def _expired(self, root: int, entry: Any) -> None:
        self.timed_out += 1
        timeout = settings_of(self.rt.config).topology_message_timeout_secs
        self.rt.fail_causes.pop(root, None)
        self._failed(
            entry, ("(timeout)", None, f"tuple tree not completed within {timeout} s (timed out)")
        )

    def _failed(self, entry: Any, cause: Any) -> None:
        """A message's tree failed or timed out. ``entry`` is its pending entry
        (message id, values, origin), ``cause`` who failed it, the exception,
        and a text for when there is none."""
        msg_id = entry[0]
        self.failed += 1
        rt = self.rt
        standstill = rt.standstill
        if self.system:
            if standstill is not None:
                standstill.fail()
            else:
                self._call_fail(msg_id)
            return
        _, values, origin = entry
        component, exc, text = cause
        # Exactly-once: no Storm-style replay, the topology goes back to its
        # last committed checkpoint instead, and every message failing before
        # that rewind counts an attempt; a message given up on is replayed
        # without it (settled, see _settled_already).
        outcome = self.book.failed(
            msg_id,
            values,
            origin.stream if origin is not None else "default",
            Cause(component, exc, text),
            rt.clock.monotonic(),
            rewinds=standstill is not None,
        )
        if outcome.gives_up and self.book.carry_out(outcome, rt.deadletters):
            self.dead_lettered += 1
        if standstill is not None:
            standstill.tuple_failed()
        elif outcome.tell_spout:
            self._call_dead_lettered(msg_id)

    def release_held(self) -> None:
        """Exactly-once, at a cut: hand every message held for its retry back to the
        spout (``fail``), so that the position it gives holds them (see
        statestream.Rewindable); it emits them again after the cut."""
        for msg_id in self.book.release_held():
            self._call_fail(msg_id)

    def _call_fail(self, msg_id: Any) -> None:
        try:
            self.spout.fail(msg_id)
        except Exception as exc:
            self.report(exc, f"fail({msg_id!r})")

    def _call_dead_lettered(self, msg_id: Any) -> None:
        try:
            self.spout.dead_lettered(msg_id)
        except Exception as exc:
            self.report(exc, f"dead_lettered({msg_id!r})")

    # -- scheduling ---------------------------------------------------------
    def drain_completions(self, most: int = 0) -> None:
        """Deliver the completions (acks and fails) of this spout's tuples: all of
        them, or the ``most`` oldest."""
        completions = self.completions
        if not completions:
            return
        spout = self.spout
        untracked = self.rt.acking is None
        failures = self.retries.failures
        replaying = bool(self.book.replaying)
        left = len(completions) - most if 0 < most < len(completions) else 0
        pop = completions.popleft  # bound once: deque is not a compiled type
        ack = spout.ack  # bound once: looked up by name, it cost a lookup per line
        timed = self.emitted_at
        while len(completions) > left:
            key, ok = pop()
            if timed and key in timed:
                self._tree_done(key, ok)
            msg_id: Any
            entry: Any = (key, (), None)
            if untracked:
                msg_id = key
            else:
                entry = self.pending.pop(key, _MISSING)
                if entry is _MISSING:
                    continue  # already timed out and failed
                msg_id = entry[0]
            if ok:
                if replaying and type(msg_id) is Replay:
                    self.rt.replay_acked(msg_id)
                    continue
                self.acked += 1
                if failures:
                    failures.pop(msg_id_key_fast(msg_id), None)
                try:
                    ack(msg_id)
                except Exception as exc:
                    self.report(exc, f"ack({msg_id!r})")
            else:
                cause = self.rt.fail_causes.pop(key, None) or ("(unknown)", None, None)
                self._failed(entry, cause)

    def _tree_done(self, root: int, ok: bool) -> None:
        """A sampled tree completed: an acked one adds its complete latency."""
        emitted = self.emitted_at.pop(root)
        if ok:
            timing = self.timing
            timing.complete_samples += 1
            timing.complete += self.rt.clock.monotonic() - emitted

    def _due(self) -> bool:
        """Deliver what the retry policy and the dead-letter file decided: retries
        whose delay has passed (``fail``), settled messages (``dead_lettered``)."""
        busy = False
        retries = self.retries
        standstill = self.rt.standstill
        if retries.heap and (standstill is None or not standstill.replaying):
            due = self.book.due(self.rt.clock.monotonic())
            for msg_id in due.fail:
                self._call_fail(msg_id)
            busy = bool(due.fail) or due.requeued > 0
        settles = self.settles
        while settles:
            self._call_dead_lettered(settles.popleft())
            busy = True
        return busy

    def poll(self, limit: int = SPOUT_BATCH) -> bool:
        """Deliver completions and due retries, then call ``next_tuple`` (at most
        ``limit`` times) while there is room."""
        busy = bool(self.completions)
        if busy:
            # A commit releases the acks of a whole checkpoint interval at
            # once: spread their completions over the next polls, so that no
            # step (and, with topology.workers, no peer waiting for this
            # worker's frame) stalls on tens of thousands of them.
            self.drain_completions(_COMPLETIONS_PER_POLL)
        if self.settles or self.retries.heap:
            busy = self._due() or busy
        max_pending = self.max_pending
        if self.replays:
            busy = self.rt.emit_replays(self, limit) or busy
        next_tuple = self.spout.next_tuple
        start = self.emitted
        for _ in range(limit):
            if max_pending is not None and len(self.pending) >= max_pending:
                break
            if self.out_queues and self.blocked():
                break
            before = self.emitted
            try:
                next_tuple()
            except RuntimeFailure:
                raise
            except Exception as exc:
                self.report(exc, "next_tuple()")
                break
            if self.emitted == before and not self.settles:
                break
        return busy or self.emitted != start

    def quiet(self) -> bool:
        """Nothing to do but wait for the acks of what is pending, and room to emit
        more (below topology.max.spout.pending): a step it emitted nothing in was
        at the end of its input, whatever ``exhausted()`` says of the pending."""
        return (
            not self.completions
            and not self.retries.waiting
            and not self.settles
            and not self.replays
            and (self.max_pending is None or len(self.pending) < self.max_pending)
        )

    def idle(self) -> bool:
        return (
            not self.completions
            and not len(self.pending)
            and not self.retries.waiting
            and not self.settles
            and not self.replays
            and self.spout.exhausted()
        )
