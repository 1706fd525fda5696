"""The data spouts on the driver: each task opened once, read batch by batch.

Spouts follow the one rewind contract (:class:`~statestream.Rewindable`):
the driver opens each data spout task once, seeks it, and reads every batch
from it; the records travel to the executors inside the job. A batch holds,
per spout task, what it emitted and the message id of each record, to ack
once the batch commits.

Dead letters fed back (``statestream deadletter replay``, status ``replay``)
go into the first batches of the next run, ahead of what their spout task
reads, as the local runtime emits them: the spout never hears of them, they
are counted and retried as any message of a batch (read again with it after a
rollback), marked ``replayed`` in the file once their batch committed, and
``dead`` again (the record rewritten, not a second one) once they had their
last attempt.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ..._clock import Clock
from ..._components import Spout, TopologyContext, task_namespace
from ..._deadletter import REPLAY, DeadLetterFile, fits_stream
from ..._errors import RuntimeFailure
from ..._exactly_once import CheckpointRecord, cut_positions
from ..._messages import MessageBook
from ..._partitioned import Range, is_partitioned, placed_at, places_of, plan_ranges
from ..._picklable import check_first
from ..._resume import SpoutRef, restore_spouts
from ..._retry import RetryPolicy
from ..._stateful import CHECKPOINT_STREAM
from ..._text import count
from ..._tuple import Fields, check_emit
from ..errorlog import error_report
from ..metrics import NEVER, MetricsBank, progress_of
from ..plan import RuntimePlan
from .shared import SEQ_BITS
from .tally import RunTally

log = logging.getLogger("statestream")


class PollCollector:
    """What a spout task emits on the driver while a batch is read."""

    def __init__(
        self,
        cid: str,
        index: int,
        outputs: Mapping[str, tuple[Fields, bool]],
        report: Callable[[BaseException, Any], None],
        book: MessageBook,
        sample: tuple[int, int] = (NEVER, NEVER),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cid = cid
        self.index = index
        self.outputs = outputs
        self.report = report
        self.items: list[tuple[str, list[Any], int | None]] = []
        self.msg_ids: list[Any] = []
        """The message id of each item (None: untracked)."""
        self.checked: set[str] = set()
        """The streams whose first tuple pickled (statestream._picklable)."""
        self.book = book
        """The task's message book: the messages given up on in this run are not
        read into a batch (their ids wait in ``book.settles`` for ``dead_lettered``)."""
        self.every, self.sample_in = sample
        self.clock = clock
        self.timed: list[float] = []
        """When each sampled message of the batch was emitted (its complete latency
        ends when its batch commits): one tracked emit in ``every``, counted down
        as on the local runtime (runtime.metrics.sampling)."""

    def emit(self, values: Sequence[Any], msg_id: Any = None, stream: str = "default") -> None:
        # Checked here, as the local runtime checks it in the spout's emit: the
        # error belongs to next_tuple(), not to the job that would route it.
        check_emit(self.cid, self.index, stream, values, self.outputs, False)
        self._add(stream, values, None, msg_id)

    def emit_direct(
        self, task: int, values: Sequence[Any], msg_id: Any = None, stream: str = "default"
    ) -> None:
        check_emit(self.cid, self.index, stream, values, self.outputs, True)
        self._add(stream, values, task, msg_id)

    def _add(self, stream: str, values: Sequence[Any], direct: int | None, msg_id: Any) -> None:
        if stream not in self.checked:
            check_first(self.cid, self.index, stream, values)
            self.checked.add(stream)
        book = self.book
        if msg_id is not None and book.settled and book.skips(msg_id, values):
            return
        self.items.append((stream, list(values), direct))
        self.msg_ids.append(msg_id)
        if msg_id is not None:
            sample = self.sample_in - 1
            if sample:
                self.sample_in = sample
            else:
                self.sample_in = self.every
                self.timed.append(self.clock())

    def report_error(self, error: BaseException) -> None:
        self.report(error, None)


@dataclass
class SpoutTask:
    """One data spout task, opened once on the driver for the run."""

    cid: str
    index: int
    namespace: str
    spout: Spout
    collector: PollCollector
    partitioned: bool = False
    """A partitioned source (statestream.PartitionedSource): the executors read its
    ranges; the driver only plans them."""

    @property
    def book(self) -> MessageBook:
        return self.collector.book

    @property
    def component(self) -> str:
        return self.cid


def idle(task: SpoutTask) -> bool:
    """Whether ``task`` has nothing left to give a batch. A partitioned task the
    driver never reads, so it cannot catch up itself: it is idle once a plan found
    every partition at its end (the caller's batch was empty) and its position
    holds no failed record waiting to be emitted again (``replay``)."""
    if task.spout.exhausted():
        return True
    return task.partitioned and not replay_pending(task.spout)


def replay_pending(spout: Spout) -> bool:
    """Whether ``spout``'s position lists failed records waiting to be emitted again
    (``replay``, as FileSpout and the broker spouts store them)."""
    where = spout.position()  # type: ignore[attr-defined]
    return isinstance(where, Mapping) and bool(where.get("replay"))


@dataclass
class Batch:
    """One batch as the driver holds it until it commits."""

    records: dict[tuple[str, int], list[tuple[str, list[Any], int | None]]] = field(
        default_factory=dict
    )
    """Per spout task, what it emitted: ``(stream, values, direct task)``."""
    positions: dict[str, Any] | None = None
    """Where each spout task stands after the batch (stored with ``PREPARING(t)``)."""
    msg_ids: list[tuple[SpoutTask, list[Any]]] = field(default_factory=list)
    """Per spout task, the message id of each of its records (None: untracked), to
    ack once the batch commits."""
    source: Any = None
    """A Spark-fed batch: the RDD of its read stage (no records, no positions)."""
    ranges: list[tuple[str, int, Range]] = field(default_factory=list)
    """Per partitioned spout task ``(cid, index)``, the ranges its executors read."""
    timed: list[tuple[str, int, list[float]]] = field(default_factory=list)
    """Per spout task, when its sampled messages were emitted (PollCollector.timed)."""
    end_of_input: bool = False
    """The batch after the last, of a bounded run: the windowed bolts' tasks get the
    end-of-input tuple after their input (statestream._windowed)."""

    def completed(self, bank: MetricsBank, now: float) -> None:
        """The batch committed at ``now``: each sampled message's tree is complete
        (its spout's complete latency, from its emit to the commit)."""
        for cid, index, times in self.timed:
            if times:
                timing = bank.timing(cid, index)
                timing.complete_samples += len(times)
                timing.complete += sum(now - at for at in times)

    @property
    def size(self) -> int:
        return sum(len(records) for records in self.records.values()) + len(self.ranges)

    def message(
        self, plan: RuntimePlan, root: int
    ) -> tuple[SpoutTask, tuple[str, list[Any], int | None], Any] | None:
        """The spout task, record and message id a root of the batch names (its read
        stage gave record ``i`` of task ``t`` the key ``t << 40 | i``, the root
        ``key + 1``); None for a root that names none (0, a fed batch)."""
        if root <= 0:
            return None
        key = root - 1
        owner = plan.owner.get(key >> SEQ_BITS)
        seq = key & ((1 << SEQ_BITS) - 1)
        for task, ids in self.msg_ids:
            if (task.cid, task.index) == owner and seq < len(ids):
                return task, self.records[owner][seq], ids[seq]
        return None


class SpoutReader:
    """The driver's data spout tasks: open, seek, read a batch, settle, close.

    Built from the plan and what reading needs: ``batch_size`` (tuples per
    spout task and batch), ``at_most_once`` (the spouts cannot rewind: none is
    sought, a batch run again keeps its records), ``context`` (a driver task's
    context), the retry policy of the tasks' message books, the run's tally
    (a spout's errors, ``skipped_dead_letters``) and clock, and the dead-letter
    file (the letters marked for replay). Call order: :meth:`open`,
    :meth:`seek` (``start=True``), then :meth:`read` / :meth:`read_again` per
    batch, then :meth:`close`; a closed reader may be opened again (the
    message books are kept across runs).
    """

    def __init__(
        self,
        plan: RuntimePlan,
        *,
        batch_size: int,
        at_most_once: bool,
        context: Callable[[str, int], TopologyContext],
        retry_policy: RetryPolicy,
        tally: RunTally,
        clock: Clock,
        deadletters: DeadLetterFile,
    ) -> None:
        self._plan = plan
        self._topology = plan.topology
        self._spouts = plan.data_spouts
        self._batch_size = batch_size
        self._at_most_once = at_most_once
        self._context = context
        self._retry_policy = retry_policy
        self._tally = tally
        self._clock = clock
        self._deadletters = deadletters
        self.books: dict[str, MessageBook] = {}
        """Per spout task namespace, its message book, kept for the runtime's life
        (in memory only: failed messages, settled ones, dead letters fed back by
        ``statestream deadletter replay``)."""
        self.tasks: list[SpoutTask] = []
        """The open spout tasks (none before :meth:`open` and after :meth:`close`)."""

    def open(self) -> None:
        """Open each data spout task once, and feed the dead letters marked for replay."""
        bank = self._tally.bank
        for spec in self._spouts:
            for i in range(spec.parallelism):
                spout: Spout = self._topology.instantiate(spec.id)
                outputs = {s: o for s, o in spec.outputs.items() if s != CHECKPOINT_STREAM}
                namespace = task_namespace(spec.id, i)
                book = self.books.setdefault(
                    namespace, MessageBook(self._topology.name, spec.id, i, self._retry_policy)
                )
                collector = PollCollector(
                    spec.id,
                    i,
                    outputs,
                    partial(self._tally.report, spec.id, i),
                    book,
                    (bank.every, bank.first_sample),
                    self._clock.monotonic,
                )
                spout.open(self._plan.conf_for(spec.id), self._context(spec.id, i), collector)
                self.tasks.append(
                    SpoutTask(spec.id, i, namespace, spout, collector, is_partitioned(spout))
                )
        self._load_replays()

    def idle(self) -> bool:
        """Whether no spout task has anything left to give a batch."""
        return all(map(idle, self.tasks))

    def _load_replays(self) -> None:
        """The dead letters of this topology marked for replay, fed back as on the local
        runtime: each goes into a batch of its spout task (the spout never hears of
        it), is tracked as any message, and is marked ``replayed`` once its batch
        committed, or ``dead`` again once it failed to its last attempt."""
        name = self._topology.name
        outputs = {
            task_namespace(spec.id, i): spec.outputs
            for spec in self._spouts
            for i in range(spec.parallelism)
        }
        for record in self._deadletters.marked_for_replay(name, outputs):
            declared = outputs[record.namespace].get(record.stream)
            fields = None if declared is None else len(declared[0])
            if fits_stream(record, fields, declared is not None and declared[1]):
                self.books[record.namespace].feed(record)
        at_bolts = [
            r
            for r in self._deadletters.records()
            if r.topology == name and r.at is not None and r.status == REPLAY
        ]
        if at_bolts:
            # A bolt's own dead letter goes to that bolt alone (DeadLetter.at): the
            # local runtime does that; a Spark job starts from its spouts.
            log.warning(
                "%s of bolts marked for replay wait: the Spark runtime replays a spout's "
                "messages only; run the topology once on the local runtime (statestream "
                "run without --runner spark) to replay them exactly",
                count(len(at_bolts), "dead letter"),
            )

    def seek(self, record: CheckpointRecord, *, start: bool = False) -> None:
        """Rewind every data spout to the positions of the checkpoint ``record``
        restores (from the beginning on a fresh store); at ``start`` say where
        each resumes."""
        refs = [
            SpoutRef(t.namespace, t.cid, t.index, len(self._plan.component_tasks[t.cid]), t.spout)
            for t in self.tasks
        ]
        # At-most-once: a spout cannot rewind, none is sought (the plan is only said).
        exact = not self._at_most_once
        plan = restore_spouts(record, exact, refs, seek=exact)
        if start:
            for line in ([plan.warning] if plan.warning else []) + plan.lines:
                log.warning("%s", line)

    def read(self) -> Batch:
        """Fill a batch: ``next_tuple`` on each spout task until it has emitted
        ``batch_size`` tuples or emits nothing more; then its ``position()``."""
        batch = Batch()
        for task in self.tasks:
            self._read_task(task, batch)
        if not self._at_most_once:
            batch.positions = cut_positions(self.tasks)
        return batch

    def _read_task(self, task: SpoutTask, batch: Batch) -> None:
        """Task ``task``'s share of ``batch``: the dead letters fed back first, then
        what its spout emits (a partitioned task: the ranges its executors read)."""
        size = self._batch_size
        collector = task.collector
        collector.items = []
        collector.msg_ids = []
        collector.timed = []
        next_tuple = task.spout.next_tuple
        items = collector.items
        book = task.book
        replays = book.replays
        while replays and len(items) < size:
            rid = replays.popleft()  # dead letters fed back first, then the spout's
            items.append((rid.record.stream, list(rid.record.values), None))
            collector.msg_ids.append(rid)
        skipped = 0
        if task.partitioned:
            # Records a restored position holds for replay (they failed before the
            # cut, on any runtime) the spout emits itself, through the driver,
            # before the ranges are planned: a range never holds them again.
            while len(items) < size and replay_pending(task.spout):
                before = len(items)
                next_tuple()
                if len(items) == before:
                    break
            batch.ranges.extend(self._plan_ranges(task))
            skipped = size  # the executors read it: next_tuple is not called
        while len(items) < size and skipped < size:
            before = len(items)
            try:
                next_tuple()
            except RuntimeFailure:
                raise  # the run's end, as on local
            except Exception as exc:  # reported; the spout keeps going (as on local)
                self._tally.report(task.cid, task.index, exc, "next_tuple()")
                break
            if book.settles:
                skipped += len(book.settles)
                self._settle(task)  # it emitted a dead letter: skipped, told
            elif len(items) == before:
                break
        batch.records[task.cid, task.index] = items
        batch.msg_ids.append((task, collector.msg_ids))
        batch.timed.append((task.cid, task.index, collector.timed))
        retries = book.retries
        if retries.failures:
            for msg_id in collector.msg_ids:
                if msg_id is not None:
                    retries.emitted_again(msg_id)

    def _plan_ranges(self, task: SpoutTask) -> list[tuple[str, int, Range]]:
        """The ranges of a partitioned spout task's next batch, from where it stands to
        each partition's end (capped at its ``batch_limit``); the task is sought to
        their ends, so its ``position()`` is where the batch ends."""
        spout: Any = task.spout
        where = spout.position()
        starts = places_of(spout, where)
        order = list(spout.partitions())
        ends = {p: spout.end_position(p) for p in order}
        ranges = plan_ranges(starts, ends, order, getattr(spout, "batch_limit", None))
        if ranges:
            spout.seek(placed_at(spout, where, {r.partition: r.end for r in ranges}))
        return [(task.cid, task.index, r) for r in ranges]

    def _settle(self, task: SpoutTask) -> None:
        """Tell ``task``'s spout that the dead letters it just emitted again are settled."""
        settles = task.book.take_settles()
        self._tally.count("skipped_dead_letters", len(settles))
        for msg_id in settles:
            try:
                task.spout.dead_lettered(msg_id)
            except Exception as exc:
                self._tally.report(task.cid, task.index, exc, f"dead_lettered({msg_id!r})")

    def read_again(self, batch: Batch, record: CheckpointRecord) -> Batch:
        """The batch after a rollback: read again from the positions ``record``
        restores, with the dead letters fed back it held (but those given up on
        again). At-most-once, the same batch (the spouts cannot rewind)."""
        if self._at_most_once:
            return batch
        # The dead letters fed back in it still to replay go back in front of
        # their task's queue, in their order.
        for task, msg_ids in batch.msg_ids:
            task.book.requeue(msg_ids)
        self.seek(record)
        return self.read()

    def close(self) -> None:
        """Close every spout task (an error is reported, the others still close)."""
        tasks, self.tasks = self.tasks, []
        # The bank keeps each spout's last progress: a closed spout cannot say.
        self._tally.bank.sources(progress_of(t.cid, t.index, t.spout) for t in tasks)
        for task in tasks:
            try:
                task.spout.close()
            except Exception as exc:
                self._tally.errors.append(error_report(task.cid, task.index, exc, "close()"))
