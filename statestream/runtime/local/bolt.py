"""A bolt task of the local runtime: drains its inbox through ``execute``; its collector."""

from __future__ import annotations

import heapq
import sys
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Any, Final

from ..._components import Bolt, task_namespace
from ..._errors import FailedException, ReliabilityError, StatestreamError
from ..._executors import CheckpointTupleForwarder, StatefulBoltExecutor
from ..._kvprefetch import ReadAheadJudge, key_guess
from ..._kvstate import StoredKeyValueState
from ..._results import TaskMetrics
from ..._stateful import CHECKPOINT_STREAM
from ..._topology import ComponentSpec
from ..._tuple import Origin, Tuple
from .tasks import FIELDS1, SHUFFLE, Route, Task

if TYPE_CHECKING:
    from .host import TaskHost

# A Final name is a C static in the compiled core; ``deque`` itself would be looked up
# in the module's dict at every use (twice per line marked by _mark_queues).
_deque: Final = deque


#: Tuples of the inbox whose keys a drain reads ahead (statestream._kvprefetch).
READ_AHEAD = 8192


class BoltTask(Task):
    """Runs one bolt task: drains its inbox through ``execute``; its collector."""

    def __init__(self, rt: TaskHost, spec: ComponentSpec, task_index: int, task_id: int):
        super().__init__(rt, spec, task_index, task_id)
        self.inbox: deque[Tuple] = deque()
        # The bolt as built: the user's bolt inside the executors of its
        # protocols (statestream._executors); this task only calls execute.
        self.executor: Bolt = rt.topology.instantiate(spec.id)
        self.execute: Callable[[Tuple], None] = self.executor.execute
        self.pausable = isinstance(self.executor, CheckpointTupleForwarder)
        # A stateful task tells the bank the keys of each delta it prepares.
        self.stateful = isinstance(self.executor, StatefulBoltExecutor)
        self.execute_data: Callable[[Tuple], None] = (
            self.executor.data_entry() if self.pausable else self.execute
        )
        # A bolt with a batch entry (a sink's execute_batch) takes a whole drain
        # in one call and this task acks its tuples (in compiled code): a row
        # costs a few hundred instructions instead of a Python execute and ack.
        self.execute_batch: Callable[[list[Tuple]], None] | None = (
            self.executor.batch_entry() if self.pausable else None
        )
        self.last_root = 0  # the tree of the latest ack, whose XOR is in last_val
        self.last_val = 0
        self.holding = False  # hold_acks(): acks stay in `held` for take_acks()
        self.held: list[tuple[int, int]] = []  # (root, XOR) pairs kept while holding
        # Checkpoint tuples take a priority lane: they must get through while
        # data waits (before INITSTATE, or while a full queue holds it).
        self.control: deque[Tuple] = deque()
        # Exactly-once: a tuple this bolt fails in its execute is executed again
        # here, its state writes undone (the state's journal), its emits taken
        # back and its delay waited out in `parked`, instead of failing its tree
        # and rewinding everything since the cut (_retries_here says when).
        # 0: not decided yet, 1: retried here, 2: not (failures fail the tree).
        self.here = 0 if rt.exactly_once and rt.acking is not None else 2
        self.current: Tuple | None = None  # the tuple being executed (here == 1)
        self.emitted_before = 0  # self.emitted when `current` started
        self.journal: StoredKeyValueState | None = None
        self.marks: list[Any] = []  # where emit_queues stood when `current` started
        self.tries: dict[int, int] = {}  # id(tuple) -> its failures, while it is retried
        self.parked: list[tuple[float, int, int, Tuple]] = []  # (due, seq, failures, tuple)
        self.parked_seq = 0
        self.dead_lettered = 0
        # A stateful task reads the keys of its inbox from the store in one call
        # before a drain executes them (statestream._kvprefetch): the guess of a
        # tuple's key, None without one; the judge turns it off when it misses.
        self.key_of: Callable[[Tuple], Any] | None = None
        if self.stateful:
            inputs = [
                (sub.source, sub.stream, sub.grouping.kind, sub.grouping.fields)
                for sub in spec.inputs
                if sub.stream != CHECKPOINT_STREAM
            ]
            bolt = getattr(self.executor, "bolt", None)
            self.key_of = key_guess(getattr(bolt, "state_key", None), inputs)
        self.judge = ReadAheadJudge()
        self.ahead = False  # whether the drain under way read ahead
        self.ahead_fetched = 0

    def metrics(self) -> TaskMetrics:
        m = super().metrics()
        m.retrying = len(self.parked)
        m.dead_lettered = self.dead_lettered
        return m

    # -- the collector the bolt sees -------------------------------------
    def emit(
        self,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        if type(anchors) is Tuple:
            self.emit_anchored(values, anchors, stream)
            return
        entry = self.default_stream if stream == "default" else self.streams.get(stream)
        if entry is None or len(values) != entry.arity or entry.direct:
            entry = self._stream_entry(stream, values, False)  # raises the right error
        self._emit(entry.origin, entry.routes, values, anchors, None)

    def emit_anchored(self, values: Sequence[Any], anchor: Tuple, stream: str = "default") -> None:
        """``emit`` anchored to one input: the hot path of every splitting or mapping bolt.

        The common case (a declared stream, acking on, an input in one tree,
        shuffle or one-field routes) is inlined here; anything else, errors
        included, takes the general path through :meth:`_emit`.
        """
        entry = self.default_stream if stream == "default" else self.streams.get(stream)
        root = anchor.root
        if (
            entry is None
            # Narrowed, a list's length is read in place in the compiled core (what
            # emits almost always pass); any other sequence's through a call.
            or (len(values) if isinstance(values, list) else len(values)) != entry.arity  # noqa: RUF034
            or entry.direct
            or not root
            or anchor.done
            or not self.tracking
        ):
            if entry is None or len(values) != entry.arity or entry.direct:
                entry = self._stream_entry(stream, values, False)  # raises the right error
            self._emit(entry.origin, entry.routes, values, anchor, None)
            return
        self.emitted += 1
        routes = entry.routes
        if not routes:
            return  # a stream nobody subscribes to (a last bolt's): no tuple, no edge
        origin = entry.origin
        rt = self.rt
        created = 0
        # Subscribers grouped by the same field over as many tasks (a count feeding
        # two sinks by word) share one target index: it is hashed once.
        by_field = -1
        by_n = 0
        by_index = 0
        for r in routes:
            kind = r.kind
            if kind == FIELDS1:
                if r.field == by_field and r.n == by_n:
                    i = by_index
                else:
                    i = by_index = r.value_index(values)
                    by_field, by_n = r.field, r.n
            elif kind == SHUFFLE:
                i = r.rr
                r.rr = i + 1 if i + 1 < r.n else 0
            else:
                for i in r.choose(values, None):
                    edge = rt.next_edge()
                    created ^= edge
                    r.puts[i](Tuple(values, origin, None, r.task_ids[i], root, edge))
                continue
            if r.remote:
                remote = r.remotes[i]
                if remote is not None:
                    created ^= remote.add_drawn(values, origin, root)
                    continue
            edge = rt.next_edge()
            created ^= edge
            r.puts[i](Tuple(values, origin, None, r.task_ids[i], root, edge))
        anchor.ack_val ^= created

    def emit_direct(
        self,
        task: int,
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None = None,
        stream: str = "default",
    ) -> None:
        entry = self._stream_entry(stream, values, True)
        origin, routes = entry.origin, entry.routes
        self._check_direct(routes, task)
        self._emit(origin, routes, values, anchors, task)

    def _emit(
        self,
        origin: Origin,
        routes: list[Route],
        values: Sequence[Any],
        anchors: Tuple | Sequence[Tuple] | None,
        direct: int | None,
    ) -> None:
        self.emitted += 1
        if anchors is None or self.rt.acking is None:
            self.deliver_untracked(origin, routes, values, direct)
            return
        if isinstance(anchors, Tuple):
            anchors = (anchors,)
        tracked = False
        for a in anchors:
            if a.done:
                self._anchor_done(a)
            tracked = tracked or bool(a.root or a.anchors)
        if not tracked:
            self.deliver_untracked(origin, routes, values, direct)
            return
        self.deliver_anchored(origin, routes, values, direct, anchors)

    def _anchor_done(self, a: Tuple) -> None:
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} anchored an emit to {a!r}, "
            "which it already acked or failed; emit before acking the input"
        )

    def _foreign(self, tup: Tuple, what: str) -> None:
        owner = self.rt.task_names.get(tup.owner, f"task {tup.owner}")
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} tried to {what} {tup!r}, which was "
            f"delivered to {owner}; only the task that received a tuple may ack or fail it"
        )

    def ack(self, tup: Tuple) -> None:
        if tup.done or (tup.owner != self.task_id and tup.owner >= 0):
            self._misuse(tup, "ack")
        tup.done = True
        self.acked += 1
        # Consecutive inputs often share a tree (the words of one line): their
        # acks are XOR-combined into one message (XOR is associative and
        # commutative, so the acker sees the same sums), sent when an input
        # of another tree comes (_fold_ack) or the drain ends.
        root = tup.root
        if root:
            if root == self.last_root:
                self.last_val ^= tup.edge ^ tup.ack_val
            else:
                if self.last_root:
                    self._fold_ack()
                self.last_root = root
                self.last_val = tup.edge ^ tup.ack_val
        elif tup.anchors:
            self._fold_ack()
            v = tup.ack_val
            for root, edge in tup.anchors.items():
                self._send_ack(root, edge ^ v)

    def _misuse(self, tup: Tuple, what: str) -> None:
        """Raise the ReliabilityError for acking/failing a tuple twice or another task's."""
        if tup.owner != self.task_id and tup.owner >= 0:
            self._foreign(tup, what)
        raise ReliabilityError(
            f"bolt {self.component!r} task {self.task_index} acked or failed {tup!r} twice; "
            "ack or fail each input exactly once"
        )

    def _fold_ack(self) -> None:
        """Send the current tree's combined ack (see ack), or keep it while holding."""
        root = self.last_root
        if root:
            self.last_root = 0
            self._send_ack(root, self.last_val)

    def _send_ack(self, root: int, xor_val: int) -> None:
        if self.holding:
            self.held.append((root, xor_val))  # the executor takes them at its next checkpoint
            return
        acking = self.rt.acking
        if acking is not None:
            acking.ack(root, xor_val)

    def flush_acks(self) -> None:
        self._fold_ack()

    def awaits_checkpoint(self) -> bool:
        """True if this task holds acks that no checkpoint covers yet: in
        ``held``, or already handed to its executor's protocol, where
        StatefulBoltExecutor puts them when it handles a checkpoint tuple (acks
        of data executed between a PREPARE and its COMMIT stay there,
        uncovered, after the COMMIT). Checked when nothing moves, to ask for a
        checkpoint then (LocalRuntime._waiting_for_commit, the workers'
        statuses) rather than wait out the interval. Acks a PREPARE covered
        wait for that checkpoint, under way."""
        if not self.holding:
            return False
        if self.held or self.last_root:
            return True
        protocol = getattr(self.executor, "protocol", None)
        return protocol is not None and bool(protocol.held.current)

    # -- the acker transport the executors use (statestream._executors.ExecutorCollector)
    def hold_acks(self) -> None:
        self.holding = True

    def take_acks(self) -> list[tuple[int, int]]:
        self._fold_ack()
        taken, self.held = self.held, []
        return taken

    def send_acks(self, acks: Iterable[tuple[int, int]]) -> None:
        acking = self.rt.acking
        if acking is not None:
            for root, xor_val in acks:
                acking.ack(root, xor_val)

    def fail_roots(self, roots: Iterable[int]) -> None:
        acking = self.rt.acking
        if acking is not None:
            causes = self.rt.fail_causes
            for root in roots:
                causes.setdefault(root, (self.component, None, "rolled back with its checkpoint"))
                acking.fail(root)

    def fail(self, tup: Tuple) -> None:
        if tup.done or (tup.owner != self.task_id and tup.owner >= 0):
            self._misuse(tup, "fail")
        if tup is self.current:
            self._retry_here(tup)
            return
        tup.done = True
        self.failed += 1
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            self._fold_ack()  # this task's acks before its fail
            # Called from an except clause (a bolt that raised, FailedException),
            # the exception being handled is why: the dead-letter record says so.
            cause = (self.component, sys.exc_info()[1], "failed by collector.fail()")
            self.rt.note_failure(anchors, cause)
            self.rt.failure_rate(self).failed(tup.values, self.rt.clock.monotonic())
            for root in anchors:
                acking.fail(root)

    def _retry_here(self, tup: Tuple) -> None:
        """Exactly-once: ``tup`` failed in the ``execute`` under way: undo its state
        writes and take back its emits, then execute it again after its delay (the
        retry policy's), or after its last attempt write it to the dead-letter file
        and settle it (acked: its effects are undone, its tree goes on without it)."""
        tup.done = True
        self.failed += 1
        journal = self.journal
        if journal is not None:
            journal.journal_undo()
        if self.emitted != self.emitted_before:
            self._take_back_emits(tup)
        rt = self.rt
        now = rt.clock.monotonic()
        rt.failure_rate(self).failed(tup.values, now)
        failures = self.tries.pop(id(tup), 0) + 1
        policy = rt.retry_policy
        if policy.gives_up(failures):
            exc = sys.exc_info()[1]
            rt.write_bolt_dead_letter(self, tup, exc, failures)
            self.dead_lettered += 1
            tup.done = False
            self.ack(tup)
            return
        self.parked_seq += 1
        heapq.heappush(self.parked, (now + policy.delay(failures), self.parked_seq, failures, tup))
        rt.parking.add(self)

    def _take_back_emits(self, tup: Tuple) -> None:
        """Take back what the failed attempt of ``tup`` emitted: each queue it can
        reach back to where it stood before (single-threaded: nothing else was
        appended since), and the edges it anchored to ``tup`` forgotten."""
        marks = self.marks
        for q, mark in zip(self.emit_queues, marks, strict=True):
            if type(q) is deque:
                while len(q) > mark:
                    q.pop()
            else:
                q.restore(mark)
        tup.ack_val = 0
        self.emitted = self.emitted_before

    def _mark_queues(self) -> list[Any]:
        return [len(q) if type(q) is _deque else q.mark() for q in self.emit_queues]

    def release_parked(self, now: float) -> float:
        """Put the parked tuples whose delay has passed back in front of the inbox;
        the next due time (inf when none is parked)."""
        parked = self.parked
        due: list[Tuple] = []
        while parked and parked[0][0] <= now:
            _, _, failures, tup = heapq.heappop(parked)
            tup.done = False
            self.tries[id(tup)] = failures
            due.append(tup)
        if due:
            self.inbox.extendleft(reversed(due))
        return parked[0][0] if parked else float("inf")

    def reset_timeout(self, tup: Tuple) -> None:
        anchors = tup.trees()
        acking = self.rt.acking
        if anchors and acking is not None:
            rt = self.rt
            for root in anchors:
                acking.reset_timeout(root)
                rt.touch_root(root)
            if rt.link is not None:  # the spout task may be in another worker
                rt.link.touch(list(anchors))

    def report_error(self, error: BaseException) -> None:
        self.report(error)

    # -- scheduling ---------------------------------------------------------
    def drain(self) -> bool:
        """Execute checkpoint tuples, then queued data until the inbox is empty or a
        downstream queue is full. True if anything was processed."""
        did = False
        if self.control:
            self._drain_control()
            did = True
        if self.inbox and not (self.pausable and self.executor.paused):  # type: ignore[attr-defined]
            before = self.executed
            failed = self.failed
            state: StoredKeyValueState | None = None
            if self.key_of is not None:
                state = self._read_ahead()
                reads = 0 if state is None else state.store_reads
            sample = self.sample_in - 1
            if sample:
                self.sample_in = sample
                if self.here != 2 and self._retries_here():
                    self._drain_here()
                else:
                    self._drain()
            else:
                self.sample_in = self.sample_every
                self._timed_drain(before)
            if state is not None:
                self._judge_read_ahead(state.store_reads - reads)
            if self.failed != failed:
                self.rt.judge_failures(self, before)
            # A bolt blocked by a full downstream queue did nothing: saying so
            # lets the loop sleep (and a fake clock advance) instead of spinning.
            did = did or self.executed != before
        if self.last_root:
            self._fold_ack()
        return did

    def _read_ahead(self) -> StoredKeyValueState | None:
        """Before a drain: read the keys the inbox's tuples will read from the store
        in one call, if the judge wants it (statestream._kvprefetch); the state
        (None if it is not a shipped provider's, or not opened yet)."""
        state = getattr(self.executor, "state", None)
        key_of = self.key_of
        if type(state) is not StoredKeyValueState or key_of is None:
            return None
        self.ahead = False
        if not self.judge.wants():
            return state
        try:
            # Lazily: a state read whole takes none of the inbox's keys.
            self.ahead_fetched = state.prefetch(map(key_of, islice(self.inbox, READ_AHEAD)))
        except StatestreamError:  # the store's: the tuples' own reads meet it where they can
            return state
        except Exception:  # a guess that cannot read a tuple: no read-ahead
            self.key_of = None
            return None
        self.ahead = True
        return state

    def _judge_read_ahead(self, missed: int) -> None:
        """After the drain: what it read ahead and then missed, to the judge, which
        turns read-ahead off for good when the guess is wrong."""
        judge = self.judge
        judge.drained(self.ahead, self.ahead_fetched if self.ahead else 0, missed)
        if not judge.on:
            self.key_of = None

    def _timed_drain(self, before: int) -> None:
        """A sampled drain: its time and tuples go to the task's timing record, and
        whether it ended on a full downstream queue (backpressure)."""
        clock = self.rt.clock
        start = clock.monotonic()
        if self.here != 2 and self._retries_here():
            self._drain_here()
        else:
            self._drain()
        timing = self.timing
        timing.timed(self.executed - before, clock.monotonic() - start)
        timing.drains += 1
        if self.inbox:
            timing.blocked += 1

    def _drain_control(self) -> None:
        control = self.control
        execute = self.execute
        # Checkpoint tuples are the protocol's traffic, not the user's data: what
        # handling them emits, acks or fails is taken back out of the task's
        # counts here, where they are handled (they are rare), so the data paths
        # stay as they are. Only checkpoints run in here: a paused task's data
        # waits in its inbox, never in the executor's buffer.
        emitted, acked, failed = self.emitted, self.acked, self.failed
        while control:
            tup = control.popleft()
            try:
                execute(tup)
            except Exception as exc:
                self.report(exc, tup)
                if not tup.done:
                    self.fail(tup)
        self.emitted, self.acked, self.failed = emitted, acked, failed
        if self.stateful:
            self._note_prepared()

    def _note_prepared(self) -> None:
        """After checkpoint tuples: while a delta is prepared, the bank is told how many
        keys it holds and their bytes (keys_changed and state_size per checkpoint;
        the last count for a txid wins)."""
        state = self.executor.state  # type: ignore[attr-defined]
        if isinstance(state, StoredKeyValueState):
            txid = state.prepared_txid
            if txid is not None:
                namespace = task_namespace(self.component, self.task_index)
                self.rt.bank.keys_changed(
                    txid, namespace, state.prepared_keys, state.prepared_bytes
                )

    def _drain(self) -> None:
        inbox = self.inbox
        # The inbox holds data only (checkpoints take the control lane) and
        # drain() calls this only while the executor is not paused.
        execute = self.execute_data
        pop = inbox.popleft  # bound once: deque is not a compiled type
        outs = self.out_queues
        cap = self.rt.capacity
        n = 0
        tup: Tuple | None = None
        if not outs and self.execute_batch is not None and self._drain_batch():
            return
        try:
            if not outs:
                while inbox:
                    tup = pop()
                    n += 1
                    execute(tup)
            elif len(outs) == 1:
                q = outs[0]
                while inbox and len(q) < cap:
                    tup = pop()
                    n += 1
                    execute(tup)
            else:
                while inbox and not self.blocked():
                    tup = pop()
                    n += 1
                    execute(tup)
        except FailedException:
            self.executed += n
            if tup is not None and not tup.done:
                self.fail(tup)
            return
        except Exception as exc:
            self.executed += n
            self.report(exc, tup)
            if tup is not None and not tup.done and self.rt.acking is not None:
                self.fail(tup)
            return
        self.executed += n

    def _retries_here(self) -> bool:
        """Whether a tuple this bolt fails is retried here (decided at the first drain,
        when a stateful task's state is open): yes unless the state cannot
        journal its writes (a provider's own State class: failures then fail
        the tree, which rewinds)."""
        if self.here == 0:
            self.here = 1
            if self.stateful:
                state = self.executor.state  # type: ignore[attr-defined]
                if isinstance(state, StoredKeyValueState):
                    state.start_journal()
                    self.journal = state
                else:
                    self.here = 2
        return self.here == 1

    def _drain_here(self) -> None:
        """As :meth:`_drain`, with each tuple's state writes journaled and a failed one
        retried here (:meth:`_retry_here`); a sink's batch entry is tried first."""
        outs = self.out_queues
        if not outs and self.execute_batch is not None and self._drain_batch():
            return
        inbox = self.inbox
        pop = inbox.popleft  # bound once: deque is not a compiled type
        execute = self.execute_data
        journal = self.journal
        tries = self.tries
        marking = bool(self.emit_queues)
        cap = self.rt.capacity
        n = 0
        while inbox:
            if outs and (len(outs[0]) >= cap if len(outs) == 1 else self.blocked()):
                break
            tup = pop()
            n += 1
            self.current = tup
            self.emitted_before = self.emitted
            if marking:
                self.marks = self._mark_queues()
            if journal is not None:
                journal.journal_begin()
            try:
                execute(tup)
            except FailedException:
                if not tup.done:
                    self.fail(tup)
                if self.rt.fatal is not None:
                    break
            except Exception as exc:
                self.report(exc, tup)
                if not tup.done:
                    self.fail(tup)
                if self.rt.fatal is not None:
                    break
            if tries and tup.done:
                tries.pop(id(tup), None)
        self.current = None
        self.executed += n

    def _drain_batch(self) -> bool:
        """The inbox through the bolt's batch entry, each tuple acked after it; False if
        the entry raised (having taken nothing, as its contract says): the caller then
        executes the same tuples one at a time, so the tuple at fault is the one
        failed and reported, as without a batch entry."""
        execute_batch = self.execute_batch
        assert execute_batch is not None
        batch = list(self.inbox)
        try:
            execute_batch(batch)
        except Exception:
            return False
        self.inbox.clear()
        for tup in batch:
            self.ack(tup)  # a native call when compiled (a bound method would not be)
        self.executed += len(batch)
        return True
