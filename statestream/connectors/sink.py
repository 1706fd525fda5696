"""Two-phase sinks: a bolt that writes its target exactly once, with the checkpoint.

As Flink's ``TwoPhaseCommitSinkFunction``, a :class:`TwoPhaseSink` takes
part in the checkpoint instead of writing per tuple::

    execute(tuple)     the row is buffered in memory and the tuple acked (the
                       stateful executor holds the ack until the checkpoint
                       covering it commits); the local runtime hands a sink
                       task every tuple waiting for it at once instead
                       (execute_batch, the runtime acking each)
    PREPARE(t)         pre_prepare: the buffer (for a target keeping the last row
                       of each key, keep_last_by: that row of each key only)
                       becomes the stage of t, encoded
                       once by orjson (one JSON text: the state stores a string
                       and need not walk every row) and put in the task's own
                       state namespace, so the state provider makes it durable
                       atomically with the checkpoint
    COMMIT(t)          post_commit, after the state committed t: the stage is
                       written to the target in ONE target transaction with the
                       guard (topology, sink, task) -> t; a stage whose txid the
                       guard already holds is not written again
    ROLLBACK           pre_rollback: the buffer and the uncommitted stage are
                       dropped (the state's rollback drops the stage's put)

Why it is exact: a crash after the state committed ``t`` but before the
target write leaves the stored phase ``COMMITTING(t)``, and every recovery
re-sends ``COMMIT(t)`` from it (DESIGN.md section 4) before anything else:
``post_commit`` finds the stage of ``t`` in the committed state and the
guard below ``t``, and writes it. A COMMIT re-sent after the write finds the
guard at ``t`` and writes nothing. Exactly once end to end needs
exactly-once state (the default whenever every spout can rewind); with
at-least-once state a tuple replayed by a failure elsewhere in its tree is
written again.

The write of ``t`` overlapping the processing of ``t+1`` (the local runtime,
one process or ``topology.workers``): the runtime's stateful task protocol
calls :meth:`TwoPhaseSink.overlap_commits`, and from then on ``post_commit(t)``
hands the write to the sink task's writer thread (the target's client waits
on the server without the GIL) and returns, so the COMMIT is acked and the
stored phase becomes ``COMMITTED(t)`` while the write runs. What keeps it
exact:

* the stage of ``t`` stays in the committed state until its write is done:
  ``pre_prepare(t+1)``, the only call that replaces it, first waits for the
  write of ``t`` (as do ``post_commit``, ``init_state`` and ``cleanup``);
* a recovery from ``COMMITTED(t)`` no longer implies the write of ``t`` was
  done, so ``init_state`` writes the committed stage synchronously, before
  any tuple, as the COMMIT re-sent from ``COMMITTING(t)`` does: a stage the
  guard holds is not written again, so this costs one guarded no-op
  transaction of the target when it was;
* a task instance that a rewind dropped (it gets no ``cleanup``) may still
  be writing: the instance replacing it waits for that write in
  ``prepare``, before it opens the target, so two writers of one guard
  never run at once in a process (a dead process's write died with it).

A write that fails in the thread fails as it would have in ``post_commit``
(a target that went away is waited for with backoff, in the thread, until
``statestream.connectors.reconnect.secs``), and is raised by the next call
(``pre_prepare``, ``post_commit``, ``init_state`` or ``cleanup``): a
:class:`~statestream.SinkError` stops the run there. Nothing staged is lost:
the stage stays in the committed state, and the next run's ``init_state``
writes it.

Where the target write runs: on the local runtime (one process or
``topology.workers``) on the sink task's writer thread, after the COMMIT of
its checkpoint. On Spark the executors buffer and stage (``pre_prepare``
runs in the job, the stage is prepared with the namespace there), and the
driver, once it has committed every namespace, calls ``post_commit`` on its
own instance of each sink task, which reads the stage from the store and
writes it synchronously (the driver's instance never sees ``pre_prepare``, so
nothing would wait for an overlapped write there): the target is written
from the driver, one transaction per sink task per batch.

To write your own target, subclass and implement three methods (a worked
example is in docs/guides/connectors.md, "Writing your own sink")::

    class SqliteSink(TwoPhaseSink):
        def __init__(self, path):
            super().__init__()
            self.path = path

        def open_target(self):
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.execute("CREATE TABLE IF NOT EXISTS guard (k TEXT PRIMARY KEY, txid INT)")

        def write(self, rows, txid):
            key = "/".join(map(str, self.guard_key))
            self.db.execute("BEGIN IMMEDIATE")
            try:
                seen = self.db.execute("SELECT txid FROM guard WHERE k = ?", (key,)).fetchone()
                if seen is not None and seen[0] >= txid:
                    self.db.execute("ROLLBACK")
                    return False  # written before: a re-sent COMMIT
                self.db.executemany("INSERT INTO out VALUES (?, ?)", rows)
                self.db.execute("INSERT OR REPLACE INTO guard VALUES (?, ?)", (key, txid))
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            return True

        def close_target(self):
            self.db.close()

Lifecycle: ``check_target`` once at ``prepare`` (by default
``open_target`` then ``close_target``: a server that does not answer, a
missing table, a column mismatch stop the run at start, as a
:class:`~statestream.SinkError`); the writing connection is opened by
``open_target`` at the first commit that has rows and kept until
``cleanup``. When the writes overlap, ``open_target``, ``write`` and
``close_target`` all run on the sink task's one writer thread (so a client
bound to the thread that opened it, as sqlite3's, works unchanged), never
two at once. ``write`` is called only with rows and must be all or nothing
together with the guard. The sink's state
namespace is the sink's own (do not use it from a subclass).
"""

from __future__ import annotations

import logging
import operator
import threading
import uuid
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import orjson

from .._components import OutputCollector, StatefulBolt, TopologyContext
from .._errors import SinkError, TopologyError
from .._state import KeyValueState
from .._tuple import Tuple
from ._broker import Reconnect, TargetUnreachable
from ._overlap import OverlappedWrites

__all__ = ["LINEAGE_KEY", "STAGE_KEY", "TwoPhaseSink", "input_fields", "last_of_each"]

#: The key of the stage in the sink task's state: ``{"txid": t, "json": "[[...], ...]"}``,
#: the rows as one JSON text (a stage of an older version, ``"rows": [...]``, is read too).
log = logging.getLogger("statestream")

STAGE_KEY = "$sink.stage"
#: The lineage of the sink task's state (a random id, born with its first
#: checkpoint, gone with `statestream state clear` or on a new store), which its
#: guards name (TwoPhaseSink.guard_key).
LINEAGE_KEY = "$sink.lineage"
_VALUES = operator.attrgetter("values")

# The instance of each sink task of this process that prepared last, by guard key.
_LIVE: dict[tuple[str, str, int], TwoPhaseSink] = {}
_LIVE_LOCK = threading.Lock()


def _release_dropped(sink: TwoPhaseSink) -> None:
    """Clean up the instance ``sink`` replaces, if a rewind dropped one: a rewind
    drops a task's instance without ``cleanup`` (as a crash would), its target's
    connection still open until the garbage collector finds it, so connections
    would pile up on the server over rewinds. Its write in flight ends first."""
    key = sink.task_key
    with _LIVE_LOCK:
        dropped, _LIVE[key] = _LIVE.get(key), sink
    if dropped is not None and dropped is not sink:
        # Its write's outcome is the dropped instance's (recovery writes what it
        # did not): waited for, never raised here.
        dropped.writes.abandon()
        try:
            dropped.cleanup()  # closes its connection (on its writer thread, if any)
        except Exception:  # a connection already broken: dropping it is all we want
            return


def _lost(error: Exception) -> bool:
    """Whether a failed target write may be tried again: anything but the target's
    refusal (a :class:`~statestream.SinkError` other than a server that does not
    answer), which no retry fixes."""
    return not isinstance(error, SinkError) or isinstance(error, TargetUnreachable)


def last_of_each(rows: list[Any], key: Callable[[Any], Hashable]) -> list[Any]:
    """The last row of each key, in the order of each key's first row (one dict pass in
    C). Rows whose key cannot be hashed (a JSON list as a key) are kept as they are:
    the target then picks the last one itself, as it must anyway."""
    try:
        return list(dict(zip(map(key, rows), rows, strict=True)).values())
    except TypeError:
        return rows


def input_fields(context: TopologyContext, what: str) -> list[str]:
    """The field names of the tuples a sink receives: those its inputs declare.

    All of its inputs must declare the same fields; ``what`` names the sink
    in the error."""
    seen = {
        tuple(context.output_fields(src, stream))
        for src, stream in context.sources()
        if not stream.startswith("$")
    }
    if len(seen) != 1:
        raise TopologyError(
            f"{what}: its inputs declare different fields {sorted(seen)}; give the sink's "
            "fields explicitly or subscribe it to inputs with the same fields"
        )
    return list(seen.pop())


class TwoPhaseSink(StatefulBolt):
    """A bolt that writes what it receives to a target, exactly once, at each checkpoint.

    Subclasses implement :meth:`open_target`, :meth:`write` and
    :meth:`close_target` (and may override :meth:`check_target` and
    :meth:`row`); see the module's docstring for the protocol and an example.
    """

    #: What the sink is called in messages (the class name by default).
    kind: str = ""
    #: The target's address, for messages (its password is hidden in them).
    url: str = ""
    #: For a target that keeps only the last row of each key (an upsert, a hash): the
    #: key of a row. A checkpoint's rows are then staged as the last row of each key
    #: (placed where the key first came), so what is encoded, stored and written
    #: follows the keys changed, not the tuples received (a word count's totals: a
    #: row a word instead of a row an update). None: every row is kept. Set it on the
    #: instance (``self.keep_last_by = operator.itemgetter(0)`` in ``__init__``): a
    #: function set on the class would be bound as a method.
    keep_last_by: Callable[[Any], Hashable] | None = None

    def __init__(self) -> None:
        self._buffer: list[list[Any]] = []
        # The txid and rows of the stage put at the last pre_prepare.
        self._staged: tuple[int, list[list[Any]]] | None = None
        self._written = -1  # the highest txid this instance wrote or found written
        self._open = False
        #: The lineage of this task's state (None until init_state or a commit reads it).
        self.lineage: str | None = None
        # The local runtime's overlap (overlap_commits): the writes run on the
        # writer thread of `writes`, one in flight at most.
        self._overlap = False
        #: The overlapped target writes (used only once overlap_commits was called).
        self.writes = OverlappedWrites()

    # -- what a subclass implements -------------------------------------------------
    def open_target(self) -> None:
        """Connect to the target and check it (table, columns); raise
        :class:`~statestream.SinkError` with one line naming what is wrong."""

    def write(self, rows: list[list[Any]], txid: int) -> bool:
        """In ONE transaction of the target: unless the guard of :attr:`guard_key`
        already holds ``txid`` or above, write ``rows`` and set the guard to
        ``txid``. Returns whether it wrote. Raising leaves the target as it was."""
        raise NotImplementedError(f"{type(self).__name__} must implement write(rows, txid)")

    def close_target(self) -> None:
        """Release the connection; called at most once after each :meth:`open_target`."""

    def check_target(self) -> None:
        """Called at ``prepare``: the target is there and fits (by default, open
        and close it)."""
        self.open_target()
        self.close_target()

    def row(self, tup: Tuple) -> list[Any]:
        """The row a tuple becomes (its values by default); it must be JSON-serializable
        by orjson (it is staged in the state store as JSON)."""
        return list(tup.values)

    def write_json(self, rows_json: str, txid: int) -> bool:
        """:meth:`write` of the rows given as their JSON text (a JSON array of rows),
        as the stage holds them. By default decoded and passed to :meth:`write`; a
        target that takes JSON itself may override it and skip the decoding."""
        return self.write(orjson.loads(rows_json), txid)

    def overlap_commits(self) -> None:
        """Let ``post_commit`` hand the target write to the task's writer thread and
        return (module docstring). Called by the local runtime's stateful task
        protocol before ``prepare``; a runtime that calls ``post_commit`` on an
        instance that never prepares (Spark's driver) does not call it."""
        self._overlap = True

    # -- identity ---------------------------------------------------------------------
    @property
    def task_key(self) -> tuple[str, str, int]:
        """``(topology, sink, task)``: this task, whatever the lineage."""
        c = self.context
        return (c.topology_name, c.component_id, c.task_index)

    @property
    def guard_key(self) -> tuple[str, str, int]:
        """``(topology, sink@lineage, task)``: whose guard :meth:`write` checks and sets.

        The sink's part names the :attr:`lineage` of the state the guard
        belongs to, so that a guard written before ``statestream state clear``
        (or by a run on another store) is never taken for this state's: its
        txids count from 0 again. (A state staged before lineages existed keeps
        the plain ``sink`` of its guards: :attr:`lineage` is ``""`` then.)"""
        c = self.context
        sink = f"{c.component_id}@{self.lineage}" if self.lineage else c.component_id
        return (c.topology_name, sink, c.task_index)

    def earlier_guards(self) -> list[tuple[str, int]]:
        """The guards of this task of other lineages in the target, ``(lineage, txid)``
        (``""``: a guard written before lineages existed); said at start when this
        task begins a lineage. By default none are looked for: a sink whose target
        can list them overrides it."""
        return []

    @property
    def what(self) -> str:
        """The sink and task, for messages: ``PostgresSink 'out' task 0``."""
        return f"{self.kind or type(self).__name__} {self.context.component_id!r} task {self.context.task_index}"

    # -- the bolt ---------------------------------------------------------------------
    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        super().prepare(conf, context, collector)
        self._buffer = []
        self._staged = None
        self._written = -1
        self._open = False
        self.lineage = None
        self._reconnect = Reconnect.from_conf(self.what, self.url, conf, context.clock, SinkError)
        _release_dropped(self)
        self.writes.start(self.task_key, f"statestream-sink-{context.task_id}")
        self.check_target()

    def init_state(self, state: KeyValueState) -> None:
        self._buffer = []
        self._staged = None
        self._state = state
        self._lineage_of(state, begin=True)
        if self._overlap:
            # Recovery from COMMITTED(t): the write of t may not have been done
            # (it overlapped t+1), so the committed stage is written now, before
            # any tuple; the guard makes it a no-op if it was. Without the overlap
            # the target is not touched here (on Spark init_state runs on the
            # executors for every batch): the COMMIT that recovery re-sends from
            # COMMITTING(t) writes it (module docstring).
            self._settle()
            self._write_committed(state, wait=True)

    def execute(self, tuple: Tuple) -> None:
        self._buffer.append(self.row(tuple))
        self.collector.ack(tuple)

    def batch_entry(self) -> Callable[[list[Tuple]], None] | None:
        """What the local runtime may call instead of :meth:`execute` with many tuples
        at once: :meth:`execute_batch`, unless a subclass overrides :meth:`execute`
        and not :meth:`execute_batch` (its own ``execute`` must see every tuple)."""
        cls = type(self)
        if (
            cls.execute is not TwoPhaseSink.execute
            and cls.execute_batch is TwoPhaseSink.execute_batch
        ):
            return None
        return self.execute_batch

    def execute_batch(self, tuples: list[Tuple]) -> None:
        """The batch entry the local runtime calls instead of :meth:`execute` with all
        the tuples waiting for this task: their rows are buffered, all or none (a
        :meth:`row` that raises leaves the buffer as it was, and the runtime then
        executes the same tuples one at a time), and the runtime acks each tuple
        when this returns (as :meth:`execute` acks it)."""
        if type(self).row is TwoPhaseSink.row:
            # The values themselves (emitted values are not changed after the emit):
            # taken in C, ~100 instructions a row against ~700 for a comprehension.
            self._buffer += map(_VALUES, tuples)
        else:
            self._buffer += [self.row(t) for t in tuples]

    def pre_prepare(self, txid: int) -> None:
        # The write of the last commit is done before its stage may be replaced.
        self._settle()
        rows = self._buffer
        staged = self._staged
        if staged is not None and staged[0] == txid:
            rows = staged[1] + rows  # txid prepared again: its first stage stays in it
        self._buffer = []
        if not rows:
            return  # nothing to write for txid: the committed stage is an older one
        if self.keep_last_by is not None:
            rows = last_of_each(rows, self.keep_last_by)
        try:
            encoded = orjson.dumps(rows).decode()
        except TypeError as exc:  # orjson.JSONEncodeError
            raise SinkError(
                f"{self.what}: a row cannot be staged as JSON ({exc}); make row() return "
                "JSON values"
            ) from exc
        self._state.put(STAGE_KEY, {"txid": txid, "json": encoded})
        self._staged = (txid, rows)

    def pre_rollback(self) -> None:
        self._buffer = []
        self._staged = None

    def post_commit(self, txid: int, state: KeyValueState) -> None:
        self._staged = None
        self._settle()
        self._write_committed(state, wait=not self._overlap)

    def cleanup(self) -> None:
        with _LIVE_LOCK:  # (by identity: an instance never prepared has no key)
            for key in [k for k, live in _LIVE.items() if live is self]:
                del _LIVE[key]
        try:
            self._settle()  # the write in flight ends before the run does
        finally:
            self.writes.close(self._close)

    # -- the target write ---------------------------------------------------------------
    def _lineage_of(self, state: KeyValueState, begin: bool = False) -> None:
        """Set :attr:`lineage` from the state; ``begin`` (``init_state``): a state
        without one begins a lineage (put now, committed with the next checkpoint,
        before any guard names it), and says what the target holds of earlier ones."""
        lineage = state.get(LINEAGE_KEY)
        if lineage is None:
            if state.get(STAGE_KEY) is not None:
                lineage = ""  # staged before lineages existed: its guards are plain
            elif begin:
                lineage = uuid.uuid4().hex
                state.put(LINEAGE_KEY, lineage)
                self.lineage = lineage
                self._say_earlier()
                return
        self.lineage = lineage

    def _say_earlier(self) -> None:
        """One line if the target holds rows of earlier lineages of this task."""
        try:
            earlier = self.earlier_guards()
        except Exception as exc:  # only a message: the writes will meet the real error
            log.debug("%s: could not list earlier guards: %s", self.what, exc)
            return
        if earlier:
            newest = max(txid for _, txid in earlier)
            log.warning(
                "%s: the target holds rows of %s of this topology's state (its guard "
                "reached txid %d; after `statestream state clear` or on another store): "
                "they are kept, and this state writes every checkpoint from its first",
                self.what,
                "an earlier lineage" if len(earlier) == 1 else f"{len(earlier)} earlier lineages",
                newest,
            )

    def _write_committed(self, state: KeyValueState, wait: bool) -> None:
        """Write the committed stage unless this instance wrote it: now, or (not
        ``wait``) on the writer thread, for the next call to wait for."""
        # The lineage of the state written from, read each time: Spark's driver acts
        # on a fresh state object per action, and its instance's init_state saw one
        # that commits nothing (the executors' tasks give the state its lineage).
        self._lineage_of(state)
        stage = state.get(STAGE_KEY)
        if stage is None or stage["txid"] <= self._written:
            return
        if not self._overlap:
            self._write_stage(stage)
            return
        self.writes.submit(lambda: self._write_stage(stage))
        if wait:
            self._settle()

    def _settle(self) -> None:
        """Wait for the write in flight, if any; raise what it raised."""
        self.writes.settle()

    def _write_stage(self, stage: Mapping[str, Any]) -> None:
        """The stage to the target in one transaction with the guard (on the writer
        thread when overlapping; nothing else touches the target meanwhile)."""
        staged_txid: int = stage["txid"]

        def write() -> None:
            try:
                if not self._open:
                    self.open_target()
                    self._open = True
                if "json" in stage:
                    self.write_json(stage["json"], staged_txid)
                else:
                    self.write(stage["rows"], staged_txid)
            except Exception:
                self._close()  # the next attempt opens a new connection
                raise

        # A target that went away (most likely what any error but a refusal is) is
        # waited for where the COMMIT stands, as the state store is: the write is
        # tried again with backoff until statestream.connectors.reconnect.secs,
        # then the run stops with a SinkError naming the sink and the target.
        self._reconnect.call(write, _lost)
        self._written = staged_txid

    def _close(self) -> None:
        if self._open:
            self._open = False
            self.close_target()

    def declare_output_fields(self, declarer: Any) -> None:
        """A sink emits nothing."""
