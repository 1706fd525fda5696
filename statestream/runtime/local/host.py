"""What a task of the local runtime sees of its run: :class:`TaskHost`.

A task (``tasks``, ``spout``, ``bolt``) is given a ``TaskHost``, never the
runtime: the clock, the acker's routing, the metrics bank, tuple ids, the
message books and the dead-letter file, and the few calls a task makes back
(an error, a dead letter, a failed tree's cause). Everything else of the run
(building and wiring the tasks, the store, rewinds, the loop) is
:class:`~statestream.runtime.local.base.RuntimeBase`'s, which extends this
class (one level) and overrides the calls that reach other tasks.

A ``TaskHost`` alone is a complete host for tasks that need nothing of other
tasks: a unit test builds one on the fake clock and runs a spout or bolt task
on it (tests/unit/test_task_host.py). It is a native class in the compiled
core, so a task's reads of it stay struct reads, as they were of the runtime.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from ..._clock import Clock
from ..._components import task_namespace
from ..._config import settings_of
from ..._deadletter import DeadLetterFile, Replay, configured_path
from ..._exactly_once import Standstill
from ..._messages import MessageBook
from ..._results import ErrorReport
from ..._retry import FailureRate, RetryPolicy, retry_cannot_fix, too_many_failures
from ..._topology import ComponentSpec, Topology
from ..errorlog import ErrorLog
from ..metrics import MetricsBank, kinds_of
from ..plan import RuntimePlan
from .acking import EDGE_BITS, EDGE_MASK, I64_MAX, ROOT_BIT, Acking

if TYPE_CHECKING:
    import logging

    from ..._tuple import Tuple
    from .bolt import BoltTask
    from .spout import SpoutTask
    from .tasks import Task

_getrandbits: Final = random.getrandbits


class TaskHost:
    """The run as its tasks see it (see the module's docstring)."""

    def __init__(
        self,
        topology: Topology,
        config: Mapping[str, Any],
        plan: RuntimePlan,
        clock: Clock,
        log: logging.Logger,
        *,
        exactly_once: bool,
        link: Any = None,
    ) -> None:
        self.topology = topology
        self.config = config
        self.plan = plan
        self.clock = clock
        settings = settings_of(config)
        self.capacity = settings.topology_executor_receive_buffer_size
        self.n_ackers = settings.topology_acker_executors
        # Several workers (statestream.runtime.workers): the tasks of other
        # workers are reached through ``link``.
        self.link: Any = link
        self.task_names = plan.task_names
        #: The acker's routing; set by whoever builds the tasks (None: acking off).
        self.acking: Acking | None = None
        #: The spout tasks of this process by task id (the acker's outcomes go to them).
        self.spout_by_task: dict[int, SpoutTask] = {}
        # Where tuple ids come from (a test may set its own new_root; None
        # means next_root, or _local_root in a worker): an edge has 62 bits, so that
        # XORs of edges stay small ints, which the compiled core handles
        # unboxed (2**-62 per ack is still no chance of a false completion).
        self.new_root: Callable[[], int] | None = None
        self._local_ackers: list[int] = []  # see use_local_roots
        self.randbits: Callable[[int], int] = _getrandbits
        self._edge_state: i64 = _getrandbits(EDGE_BITS) or 1  # see next_edge
        # Exactly-once state (statestream._exactly_once): a standstill before
        # each PREPARE gives the cut, and a failed tuple is retried in place.
        self.exactly_once = exactly_once
        self.standstill: Standstill | None = Standstill() if exactly_once else None
        # The run's metrics bank (runtime.metrics): the tasks time their samples
        # into it; it outlives a rewind's new tasks.
        self.bank = MetricsBank(
            topology.name, "local", kinds_of(topology), settings.topology_stats_sample_rate
        )
        self.errors: deque[ErrorReport] = deque(maxlen=1000)
        # Reports the errors of user code into self.errors (run() logs the counts).
        self.error_log = ErrorLog(log, self.errors)
        #: The error that ends the run (raised by run()), and the loop's stop flag.
        self.fatal: BaseException | None = None
        self._stop = False
        self.untracked_acks = 0
        self.skipped_settled = 0
        # Poison tuples (statestream._messages): per spout task namespace, its
        # message book (failed messages, the messages the dead-letter file
        # settles, dead letters fed back by `statestream deadletter replay`),
        # which outlives a rewind. fail_causes: root -> (component, exception,
        # text) of the failure the acker is about to report.
        self.retry_policy = RetryPolicy.from_config(config)
        self.deadletter_path = configured_path(config)
        self.deadletters = DeadLetterFile(self.deadletter_path)
        self._books: dict[str, MessageBook] = {}
        self._failure_rates: dict[tuple[str, int], FailureRate] = {}  # per bolt task
        self.fail_causes: dict[int, Any] = {}
        # Fed-back bolt dead letters that their bolt gave up on again (still dead).
        self._dead_again: set[Replay] = set()
        # Bolt tasks with tuples waiting out a retry's delay (BoltTask.parked).
        self.parking: set[BoltTask] = set()

    # -- ids ----------------------------------------------------------------------
    def next_edge(self) -> int:
        """A random, nonzero edge id of EDGE_BITS bits.

        An xorshift generator seeded from ``randbits``: a few machine
        instructions per edge in the compiled core instead of a call. Its
        steps are bijections of the 62-bit state that keep only the low 62
        bits of each shift (what wraps in a compiled i64 and what the mask
        keeps in Python agree), so the same code gives the same ids on both
        cores, and a nonzero state never reaches 0. A test that sets its own
        ``randbits`` gets its ids one by one, in its order.
        """
        if self.randbits is not _getrandbits:
            return self.randbits(EDGE_BITS) or 1
        # next_edge_of's steps, inlined: the compiled core does not inline a
        # call, and the call cost about 13 instructions a word in the word count
        x: i64 = self._edge_state
        x ^= (x << 13) & EDGE_MASK
        x ^= x >> 7
        x ^= (x << 17) & EDGE_MASK
        self._edge_state = x
        return int(x)

    def draw_root(self) -> int:
        """The root id of a new tree: from ``new_root`` if a test set one, else
        from :meth:`next_root` (a direct call), with a residue of this
        worker's ackers if the workers runtime set them (:meth:`use_local_roots`)."""
        new_root = self.new_root
        if new_root is not None:
            return new_root()
        if self._local_ackers:
            return self._local_root()
        return self.next_root()

    def use_local_roots(self, ackers: list[int]) -> None:
        """Give new trees a root whose acker task (``root % n_ackers``) is one of
        ``ackers``, this worker's: a tree's init and outcome then stay in the
        spout's own worker, and only the acks of other workers' bolts cross."""
        self._local_ackers = ackers

    def _local_root(self) -> int:
        # next_root's id with its residue modulo n replaced by one of this
        # worker's ackers (chosen by the next digits), in i64: a root is below 2**63
        x: i64 = self.next_edge()
        r: i64 = x | ROOT_BIT
        n: i64 = self.n_ackers
        ackers = self._local_ackers
        k: i64 = len(ackers)
        base: i64 = r - r % n
        m: i64 = ackers[(r // n) % k]
        if base > I64_MAX - m:  # keep it below 2**63, with the same residue
            base -= n
        return int(base + m)

    def next_root(self) -> int:
        """A new root id: 62 bits of next_edge's generator with bit 62 set.

        Roots and edges come from one generator, so they never repeat within
        its period (2**62 - 1) and the bit keeps roots apart from edges. A
        few machine instructions where ``random.getrandbits(64)`` cost a call.
        """
        x: i64 = self.next_edge()
        return int(x | ROOT_BIT)

    # -- configuration -------------------------------------------------------------
    def conf_for(self, spec: ComponentSpec) -> Mapping[str, Any]:
        """The topology config with the component's own keys on top."""
        return self.plan.conf_for(spec.id)

    # -- poison tuples: retries and the dead-letter file ---------------------------
    def book_for(self, spout: str, task_index: int) -> MessageBook:
        """The message book of the spout task ``spout[task_index]`` (kept across rewinds)."""
        namespace = task_namespace(spout, task_index)
        book = self._books.get(namespace)
        if book is None:
            book = self._books[namespace] = MessageBook(
                self.topology.name, spout, task_index, self.retry_policy
            )
        return book

    def failure_rate(self, task: BoltTask) -> FailureRate:
        """The error-rate limit of a bolt task (kept across rewinds)."""
        key = (task.component, task.task_index)
        rate = self._failure_rates.get(key)
        if rate is None:
            rate = self._failure_rates[key] = FailureRate.from_config(self.config)
        return rate

    def executed_before(self, task: BoltTask) -> int:
        """What ``task``'s component task executed in tasks a rewind replaced
        (none here: :class:`RuntimeBase` keeps them)."""
        return 0

    def judge_failures(self, task: BoltTask, executed_before: int) -> None:
        """After a batch in which ``task`` failed tuples: stop the run if the
        error-rate limit tripped (statestream._retry.FailureRate)."""
        base = self.executed_before(task)
        reason = self.failure_rate(task).judge(
            self.clock.monotonic(), base + executed_before, base + task.executed
        )
        if reason is None or self.fatal is not None:
            return
        self.fatal = too_many_failures(task.component, task.task_index, reason, self.errors)
        self._stop = True

    def note_failure(self, roots: Iterable[int], cause: Any) -> None:
        """A bolt failed these trees: remember why, for a dead-letter record."""
        causes = self.fail_causes
        if len(causes) > 65536:
            # Causes whose tree had failed before (its spout heard it already)
            # are never collected; forget the oldest.
            for key in list(causes)[:32768]:
                del causes[key]
        for root in roots:
            causes[root] = cause

    def write_bolt_dead_letter(
        self, task: BoltTask, tup: Tuple, exc: BaseException | None, attempts: int
    ) -> None:
        """``task`` gave up on its input ``tup``: write the tuple itself (the runtime,
        which sees the spout tasks, names its message; see RuntimeBase)."""
        raise NotImplementedError("a bolt dead letter needs the run's spout tasks")

    def replay_acked(self, rid: Replay) -> None:
        """A fed-back dead letter went through: mark it replayed in the file."""
        record = rid.record
        book = self.book_for(record.spout, record.task)
        if rid in self._dead_again:  # its bolt gave up on it again (still dead)
            self._dead_again.discard(rid)
            book.replay_done(rid)
            return
        book.replay_done(rid)
        self.deadletters.replayed([record])

    def emit_replays(self, task: SpoutTask, limit: int) -> bool:
        """Emit up to ``limit`` dead letters fed back for ``task``; True if any went
        out (none here: the runtime, which knows the bolts, replays them)."""
        return False

    def touch_root(self, root: int) -> None:
        """Restart the spout-side timeout of the tree ``root`` (reset_timeout); the
        runtime looks in its spout tasks."""
        for spout in self.spout_by_task.values():
            if root in spout.pending:
                spout.pending.put(root, spout.pending.get(root))

    # -- errors -------------------------------------------------------------------
    def report_error(self, task: Task, exc: BaseException, tup: Any) -> None:
        """Report a user's exception (statestream.runtime.errorlog): kept for the
        result, logged once then counted; an error no retry fixes stops the run."""
        if retry_cannot_fix(exc):
            # The store stayed away past its bound (statestream._outage), an
            # emit that cannot be pickled (statestream._picklable), a value the
            # store cannot encode: not this task's failure to retry, but the
            # run's end, said in one line.
            self.error_log.record(task.component, task.task_index, exc, tup)
            if self.fatal is None:
                self.fatal = exc
            self._stop = True
            return
        self.error_log.report(task.component, task.task_index, exc, tup)

    def stop(self) -> None:
        """Ask the run loop to stop after the current step (safe from a signal handler)."""
        self._stop = True
