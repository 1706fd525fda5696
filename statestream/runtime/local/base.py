"""The local runtime's tasks: their construction and wiring, state, the replay of
dead letters and what reaches across tasks (:class:`RuntimeBase`, which extends
the tasks' own view of their run, :class:`~.host.TaskHost`). :class:`~statestream.runtime.local.runtime.LocalRuntime` adds
the lifecycle and the scheduler loop."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from mypy_extensions import i64

from ..._clock import Clock, SystemClock
from ..._components import TopologyContext, task_namespace
from ..._config import settings_of
from ..._deadletter import DeadLetter, Replay, fits_stream
from ..._errors import ConfigError, PrepareRefused
from ..._exactly_once import run_mode
from ..._results import TaskMetrics
from ..._retry import retry_cannot_fix
from ..._routing import task_for_key
from ..._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM, CheckpointSpout, RefusedPrepares
from ..._topology import ComponentSpec, Topology
from ..._tuple import Origin, Tuple
from ..._windowed import EndOfInput, WindowedBoltExecutor
from ..plan import RuntimePlan, acking_refusal, as_config
from ..session import StoreSession
from .acking import FLAT, Acking, next_edge_of, unpack_ids
from .bolt import BoltTask
from .host import TaskHost
from .spout import SpoutTask
from .tasks import FIELDS1, FIELDSN, KIND, SHUFFLE, Route, Stream, Task

log = logging.getLogger("statestream")


def local_run_mode(topology: Topology, config: Mapping[str, Any], plan: RuntimePlan) -> bool:
    """What a local run (one process, or the workers' supervisor) refuses of its
    topology and config, and whether it keeps exactly-once state (logging the
    note :func:`~statestream._exactly_once.run_mode` has for the user, if any)."""
    settings = settings_of(config)
    refusal = acking_refusal(topology, settings.topology_acker_executors)
    if refusal:
        raise ConfigError(refusal)
    mode = run_mode(
        # The configured runner's entry: "local", or a third party's runner that runs
        # these tasks with capabilities of its own.
        settings.topology_runner,
        settings.statestream_state_exactly_once,
        plan.checkpointed,
        {spec.id: spec.obj for spec in plan.data_spouts},
        settings.topology_acker_executors,
    )
    if mode.note:
        log.warning("%s", mode.note)
    return mode.exactly_once


class RuntimeBase(TaskHost):
    """The local runtime's tasks, built and wired, and the calls of theirs that reach
    other tasks (see :class:`LocalRuntime`; a task sees only :class:`TaskHost`)."""

    #: The file the run's dead letters go to (the Runtime contract).
    deadletter_path: Path

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any] | None = None,
        clock: Clock | None = None,
        *,
        owned: Iterable[int] | None = None,
        link: Any = None,
    ) -> None:
        conf = as_config(config, topology_prefixes=(topology.name,))
        plan = RuntimePlan(topology, conf)
        # Exactly-once state (statestream._exactly_once): a standstill before
        # each PREPARE gives the cut, the spouts' positions are stored with it,
        # and any failure within the run goes back to the last commit.
        exactly_once = local_run_mode(topology, conf, plan)
        super().__init__(
            topology, conf, plan, clock or SystemClock(), log, exactly_once=exactly_once, link=link
        )
        #: Called after every step of run(): where a test looks at the queues.
        self.after_step: Callable[[], None] | None = None
        settings = settings_of(self.config)
        self.idle_sleep = settings.topology_sleep_spout_wait_strategy_time_ms / 1000.0
        # Several workers (statestream.runtime.workers): this process runs the
        # tasks in ``owned`` (the others are reached through ``link``).
        self.owned: frozenset[int] | None = None if owned is None else frozenset(owned)
        self.rewinds = 0
        self._started = False
        self._closed = False
        self._start_time = 0.0
        self._timers: list[list[Any]] = []  # [next_due, period, callback]
        # The run's store: provider, claim, outage guard, rescale (runtime.session).
        # Only the process that owns the run claims: a worker runs with a link,
        # under a supervisor that holds the claim (and rescaled) for it.
        self.store = StoreSession(topology, self.config, self.clock, owner=link is None)
        # PREPAREs the states refused (outlive a rewind), and the error that
        # stops the run once one namespace refuses again (_note_refusal).
        self.refused_prepares = RefusedPrepares()
        self._states: dict[str, Any] = {}
        # Counts of the tasks a rewind replaced, so metrics cover the whole run.
        self._past: dict[tuple[str, int], TaskMetrics] = {}
        self._past_counters: dict[str, int] = {}
        self._deadletters_loaded = False
        # The end of a bounded input for the windowed bolts (LocalRuntime.end_of_input).
        self.ending = EndOfInput(
            [
                cid
                for cid in self.plan.component_tasks
                if isinstance(topology.components[cid].user_obj, WindowedBoltExecutor)
            ]
        )
        # How many tuples of one message each bolt task gave up on (their ids).
        self._bolt_dead_seen: dict[tuple[int, str, str], int] = {}
        # --until-idle diagnosis (explain_wait): what moved, since when, last said
        self._wait_check_at = 0.0
        self._wait_moved: tuple[Any, ...] = ()
        self._quiet_since = 0.0
        self._wait_said_at = float("-inf")
        #: topology.state.checkpoint.interval.ms 0 with at-least-once state: a
        #: checkpoint starts as soon as the last one committed, so checkpoint tuples
        #: always move and a quiet step never comes; until_idle asks idle() anyway.
        self.checkpoints_nonstop = (
            settings.topology_state_checkpoint_interval_ms == 0 and self.standstill is None
        )
        # A one-field grouping's target of a str value depends only on the number of
        # target tasks: every route with that number shares one memo, so a word is
        # hashed once in the process, not once per emitting task (Route.value_index).
        self._memos: dict[int, dict[str, int]] = {}
        self._build()

    def _build(self) -> None:
        """Make every task and its routes (at start, and again after a rewind)."""
        self.acking = Acking(self, self.n_ackers) if self.n_ackers > 0 else None
        self.spouts: list[SpoutTask] = []
        self.bolts: list[BoltTask] = []
        self.spout_by_task = {}
        self.tasks_of: dict[str, list[Task]] = {}
        self._checkpoint_task: SpoutTask | None = None
        plan = self.plan
        owned = self.owned
        self.task_by_id: dict[int, Task] = {}
        self.bolt_by_id: dict[int, BoltTask] = {}
        self.parking = set()
        for cid, tids in plan.component_tasks.items():
            spec = self.topology.components[cid]
            for i, tid in enumerate(tids):
                if owned is not None and tid not in owned:
                    continue
                task: Task
                if spec.is_spout:
                    task = SpoutTask(self, spec, i, tid)
                    if task.system:
                        self._checkpoint_task = task
                    self.spouts.append(task)
                    self.spout_by_task[tid] = task
                else:
                    bolt = BoltTask(self, spec, i, tid)
                    self.bolts.append(bolt)
                    self.bolt_by_id[tid] = bolt
                    task = bolt
                self.tasks_of.setdefault(cid, []).append(task)
                self.task_by_id[tid] = task
        self.component_tasks = plan.component_tasks
        self.task_names = plan.task_names
        self.data_spouts = [s for s in self.spouts if not s.system]
        for cid, tasks in self.tasks_of.items():
            spec = self.topology.components[cid]
            for task in tasks:
                self._wire(task, spec)

    @property
    def checkpoint_spout(self) -> CheckpointSpout | None:
        task = self._checkpoint_task
        return None if task is None else task.spout  # type: ignore[return-value]

    # -- wiring ---------------------------------------------------------------
    def _wire(self, task: Task, spec: ComponentSpec) -> None:
        outs: list[deque[Any]] = []
        emits: list[Any] = []
        for stream, (_, direct) in spec.outputs.items():
            routes: list[Route] = []
            control = stream == CHECKPOINT_STREAM
            for rs in self.plan.routes(spec.id, stream):
                target = self.topology.components[rs.target]
                queue = "control" if control else "inbox"
                if rs.kind == "fields":
                    kind = FIELDS1 if isinstance(rs.key, int) else FIELDSN
                else:
                    kind = KIND[rs.kind]
                task_ids = list(rs.task_ids)
                if kind == SHUFFLE and not control and self.link is not None:
                    task_ids = self.link.shuffle_targets(
                        self.plan.component_tasks[spec.id], task_ids
                    )
                # The checkpoint spout's own hop takes as many rounds within a
                # worker as across (see workers._DelayedControl).
                delay = control and spec.id == CHECKPOINT_SPOUT and self.link is not None
                inboxes = [self._queue(tid, queue, delay) for tid in task_ids]
                route = Route(target, kind, inboxes)
                route.key = rs.key
                if isinstance(rs.key, int):
                    route.field = rs.key
                    route.memo = self._memos.setdefault(route.n, {})
                if kind == SHUFFLE:
                    # Start each emitter at a different task so that several
                    # emitters spread evenly from the first tuple on.
                    route.rr = task.task_index % route.n
                route.custom = rs.custom
                route.task_ids = task_ids
                route.index_of_task = {tid: i for i, tid in enumerate(route.task_ids)}
                routes.append(route)
                if not control:
                    emits.extend(q for q in inboxes if all(q is not o for o in emits))
                if self._reaches(target.id, spec.id):
                    # A queue on a cycle back to this task is exempt from
                    # backpressure: blocking on it would deadlock the cycle
                    # (a full queue whose consumer waits, through the cycle,
                    # for this task).
                    continue
                if not control:  # checkpoints are never held back by backpressure
                    outs.extend(q for q in inboxes if all(q is not o for o in outs))
            origin = Origin(
                spec.id,
                task.task_id,
                task.task_index,
                stream,
                self.plan.output_fields[spec.id][stream],
            )
            # Arity -1 until the first emit: that one takes the checked path.
            task.streams[stream] = Stream(origin, -1, routes, direct)
            if stream == "default":
                task.default_stream = task.streams[stream]
        task.out_queues = outs
        task.emit_queues = emits

    def deliver_remote(
        self, groups: list[Any], completions: list[Any], origins: dict[Any, Origin]
    ) -> None:
        """Put the tuples (the groups :class:`RemoteInbox` makes) and spout
        completions another worker sent into this worker's queues. A tracked
        tuple belongs to the task it is delivered to, as on one process."""
        bolts = self.bolt_by_id
        for target, lane, src, stream, group, wire_edges, wire_roots, anchors in groups:
            origin = origins[(src, stream)]
            bolt = bolts[target]
            q = bolt.control if lane & 1 else bolt.inbox
            values: list[Any] = group
            if anchors is not None:  # a group of its own, never FLAT (RemoteInbox.append)
                q.append(Tuple(values[0], origin, anchors, target))
                continue
            # drawn edges (RemoteInbox.add_drawn): drawn again from their state
            drawn = type(wire_edges) is int
            state: i64 = wire_edges if drawn else 0
            edges: list[int] = [] if drawn else unpack_ids(wire_edges)
            roots: list[int] = unpack_ids(wire_roots)
            flat = bool(lane & FLAT)
            # built first and handed over in one extend: deque is not a compiled
            # type, so each append would be a method call
            batch: list[Tuple] = []
            runs = len(roots)
            for k in range(0, runs, 2):
                root = roots[k]
                owner = target if root else -1
                end = roots[k + 3] if k + 2 < runs else len(values)
                for i in range(roots[k + 1], end):
                    # a one-field value in a 1-tuple: one allocation, a list takes two
                    v: Any = (values[i],) if flat else values[i]
                    if drawn:
                        state = next_edge_of(state)
                        edge = int(state)
                    else:
                        edge = edges[i]
                    batch.append(Tuple(v, origin, None, owner, root, edge))
            q.extend(batch)
        spouts = self.spout_by_task
        for spout_task, root, ok in completions:
            spouts[spout_task].completions.append((root, ok))

    def _queue(self, task_id: int, lane: str, delay: bool = False) -> Any:
        """The ``inbox`` or ``control`` queue of a task: its own (``delay``: the
        link's delayed control lane to it), or, for a task of another worker, the
        link's queue that sends to it."""
        task = self.task_by_id.get(task_id)
        if task is not None:
            if delay and isinstance(task, BoltTask):
                return self.link.local_control(task_id, task.control)
            return getattr(task, lane)
        return self.link.queue(task_id, lane == "control")

    def _reaches(self, source: str, target: str) -> bool:
        """True if tuples from ``source`` can flow (through any path) to ``target``."""
        seen = {source}
        todo = [source]
        while todo:
            for nxt in self.topology.downstream(todo.pop()):
                if nxt == target:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    def _context(self, task: Task) -> TopologyContext:
        return self.plan.context(
            task.component,
            task.task_index,
            state_opener=self.open_state,
            clock=self.clock,
            exactly_once=self.exactly_once,
        )

    # -- state ---------------------------------------------------------------------
    def open_state(self, namespace: str) -> Any:
        """The provider's state for ``namespace``. The store opens on first use: the
        run's owner claims the topology's scope of it first, before anything reads
        or writes it (held until :meth:`close`; StateLockedError if another run
        holds it)."""
        state = self._states.get(namespace)
        if state is None:
            state = self._states[namespace] = self.store.open(rescale=False).get_state(namespace)
        return state

    @property
    def provider(self) -> Any:
        """The topology's scoped provider while the store is open, else None."""
        return self.store.provider

    # -- poison tuples: retries and the dead-letter file ---------------------------
    def _load_deadletters(self) -> None:
        """Read the dead-letter file once per run: the messages of this topology
        marked for replay are fed back.

        The file's other messages are not skipped when a spout emits them
        again: message ids repeat across runs (a file spout's line numbers, a
        new input, a fresh store), and skipping a message because an unrelated
        run gave up on an identical one would lose it silently. A message given
        up on just before a crash is therefore retried after the restart, and
        not written twice (:meth:`DeadLetterFile.append`)."""
        if self._deadletters_loaded:
            return
        self._deadletters_loaded = True
        spouts = {s.namespace for s in self.data_spouts}
        first = self._first_data_spout()
        bolts = (
            {
                task_namespace(cid, i)
                for cid, tids in self.plan.component_tasks.items()
                if not self.topology.components[cid].is_spout
                for i in range(len(tids))
            }
            if first is not None
            else set()
        )
        for r in self.deadletters.marked_for_replay(self.topology.name, spouts | bolts):
            if r.at is None:
                self.book_for(r.spout, r.task).feed(r)
            elif first is not None:
                # A bolt's input, sent to that bolt alone from the first data
                # spout's task 0 (in one process of a topology.workers run),
                # tracked as any fed-back dead letter.
                first.book.feed(r)

    def _first_data_spout(self) -> SpoutTask | None:
        """Task 0 of the first data spout, if it runs in this process."""
        for cid, tids in self.plan.component_tasks.items():
            spec = self.topology.components[cid]
            if spec.is_spout and cid != CHECKPOINT_SPOUT:
                return self.spout_by_task.get(tids[0])
        return None

    def executed_before(self, task: BoltTask) -> int:
        past = self._past.get((task.component, task.task_index))
        return past.executed if past is not None else 0

    def release_parked(self, now: float) -> None:
        """Tuples whose retry delay has passed go back to their bolt tasks' inboxes."""
        for bolt in list(self.parking):
            if bolt.release_parked(now) == float("inf"):
                self.parking.discard(bolt)

    def parked(self) -> bool:
        """Whether a bolt task holds a failed tuple waiting for its retry."""
        return any(b.parked for b in self.parking)

    def write_bolt_dead_letter(
        self, task: BoltTask, tup: Tuple, exc: BaseException | None, attempts: int
    ) -> None:
        """``task`` gave up on its input ``tup`` (exactly-once, retried in place):
        write the tuple itself, durably, so that a replay delivers it to the same
        bolt and nothing else of its tree runs twice (``DeadLetter.at``).

        The record's id is its spout message's id (when that spout task runs in
        this process) with the tuple's place among the tuples of that message
        this task gave up on, so that the tuple failing again after a crash
        (its message replayed from the last commit) is not written twice."""
        root = tup.root or next(iter(tup.trees()), 0)
        error = None if exc is not None else "failed by collector.fail()"
        message: Any = None
        for spout in self.data_spouts:
            entry = spout.pending.get(root) if root else None
            if entry is not None:
                message = entry[0]
                break
        if type(message) is Replay:
            # A bolt's dead letter fed back, failing again: dead again, not a
            # second record; its tree completes without it (replay_acked).
            self._dead_again.add(message)
            self.deadletters.replay_given_up(message.record, task.component, exc, error, attempts)
            return
        origin = tup.origin
        if message is None:
            msg_id: Any = f"{origin.component}-{origin.task_index}:{tup.edge or root}"
        else:
            seen = self._bolt_dead_seen
            place = (task.task_id, repr(message), repr(tup.values))
            n = seen[place] = seen.get(place, -1) + 1
            msg_id = [message, n] if n else message
        record = DeadLetter.of(
            self.topology.name,
            task.component,
            task.task_index,
            msg_id,
            tup.values,
            task.component,
            exc,
            attempts,
            error,
            stream=origin.stream,
            at=task.component,
            source=origin.component,
        )
        self.deadletters.give_up(record)

    def emit_replays(self, task: SpoutTask, limit: int) -> bool:
        """Emit up to ``limit`` dead letters fed back for ``task``; True if any went out."""
        book = task.book
        replays = book.replays
        n = 0
        while replays and n < limit:
            if task.max_pending is not None and len(task.pending) >= task.max_pending:
                break
            if task.out_queues and task.blocked():
                break
            rid = replays.popleft()
            record = rid.record
            if record.at is not None:
                n += self._replay_at_bolt(task, rid)
                continue
            entry = task.streams.get(record.stream)
            if entry is None:
                fits_stream(record, None, False)  # says why in the log
                continue
            if not fits_stream(record, len(entry.origin.fields), entry.direct):
                continue
            n += 1
            task.emitted += 1
            origin, routes = entry.origin, entry.routes
            if self.acking is None:
                task.deliver_untracked(origin, routes, record.values, None)
                self.replay_acked(rid)
                continue
            book.replay_emitted(rid)
            root = self.draw_root()
            task.pending.put_new(root, (rid, record.values, origin))  # a fresh root
            self.acking.init(
                root, task.task_id, task.deliver_spout(origin, routes, record.values, None, root)
            )
        return n > 0

    def _replay_at_bolt(self, task: SpoutTask, rid: Replay) -> int:
        """Send a bolt's dead letter (``DeadLetter.at``) to that bolt's task alone, as
        the root of a new tree of ``task`` (its ack marks the record replayed); 1 if
        it went out."""
        record = rid.record
        found = self._bolt_input_of(record)
        if found is None:
            log.warning(
                "dead letter %r of bolt %s is not replayed: the bolt, its input from %r "
                "(stream %r) or its task is not in this topology now",
                record.msg_id,
                record.namespace,
                record.source,
                record.stream,
            )
            return 0
        target, origin = found
        queue = self._queue(target, "inbox")
        task.emitted += 1
        if self.acking is None:
            root = edge = 0
        else:
            task.book.replay_emitted(rid)
            root, edge = self.draw_root(), self.next_edge()
            task.pending.put_new(root, (rid, record.values, origin))
            self.acking.init(root, task.task_id, edge)
        if isinstance(queue, deque):
            owner = target if root else -1
            queue.append(Tuple(record.values, origin, None, owner, root, edge))
        else:  # a task of another worker
            queue.add(record.values, origin, root, edge)
        if self.acking is None:
            self.replay_acked(rid)
        return 1

    def _bolt_input_of(self, record: DeadLetter) -> tuple[int, Origin] | None:
        """Where bolt ``record.at``'s input goes now: the global id of the task (a
        fields grouping hashes the key again, since the parallelism may have
        changed) and an origin of the source's stream, if both still exist."""
        spec = self.topology.components.get(record.at or "")
        source = self.topology.components.get(record.source or "")
        if spec is None or spec.is_spout or source is None:
            return None
        sub = next(
            (s for s in spec.inputs if s.source == source.id and s.stream == record.stream),
            None,
        )
        tids = self.plan.component_tasks.get(spec.id, [])
        if sub is None or not tids or record.stream not in source.outputs:
            return None
        fields = source.outputs[record.stream][0]
        if len(fields) != len(record.values):
            return None
        if sub.grouping.kind == "fields":
            key = [record.values[fields.index_of(f)] for f in sub.grouping.fields]
            index = task_for_key(key[0] if len(key) == 1 else key, len(tids))
        else:
            index = record.task % len(tids)
        src_tid = self.plan.component_tasks[source.id][0]
        return tids[index], Origin(source.id, src_tid, 0, record.stream, fields)

    # -- errors -------------------------------------------------------------------
    def report_error(self, task: Task, exc: BaseException, tup: Any) -> None:
        """TaskHost's report, and a state's refused PREPARE counted (a second one
        for a namespace stops the run)."""
        super().report_error(task, exc, tup)
        if isinstance(exc, PrepareRefused) and not retry_cannot_fix(exc):
            self._note_refusal(task, exc)

    def _note_refusal(self, task: Task, exc: PrepareRefused) -> None:
        """A state refused a PREPARE: the second time for one namespace, the run
        stops (:class:`RefusedPrepares`); :meth:`run` raises :attr:`fatal`."""
        from ..._registry import SCOPE_SEPARATOR

        namespace = self.topology.name + SCOPE_SEPARATOR + task.namespace
        if not self.refused_prepares.refused(namespace) or self.fatal is not None:
            return
        provider = self.provider
        store = (
            repr(getattr(provider, "provider", provider))
            if provider is not None
            else f"topology.state.provider: {settings_of(self.config).topology_state_provider}"
        )
        self.fatal = RefusedPrepares.fatal(namespace, self.topology.name, store, exc)
        self._stop = True
