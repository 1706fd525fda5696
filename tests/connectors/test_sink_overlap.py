"""The target write of checkpoint t overlapping the processing of t+1 (the local runtime).

Through :class:`~statestream._stateful.StatefulTaskProtocol`, as the local
runtime drives a stateful task, a sink's COMMIT hands the target write to
the task's writer thread and returns: the stored phase can be
``COMMITTED(t)`` before the rows of ``t`` are in the target. These tests
hold that write (a gate in front of ``write``/``write_json``, or a lock the
test holds in PostgreSQL) and check what the overlap must keep: the next
PREPARE waits for it; a crash with the write not done (in process, or a
real SIGKILL) leaves the stage committed and the restarted task writes it,
once; a write that fails in the thread is tried again, or, refused or past
the reconnect bound, stops the run at the next call, nothing lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sink_cases import FIELDS, PG_DSN, PostgresAppend, SinkCase, case_fixture, open_task, store

from statestream import KeyValueState, SinkError
from statestream._checkpoint import Action
from statestream._stateful import StatefulTaskProtocol
from statestream.connectors.sink import TwoPhaseSink
from statestream.testing import make_tuple

pytestmark = pytest.mark.redis

HERE = Path(__file__).resolve().parent
A = [["a", 1], ["b", 1], ["a", 2]]
B = [["c", 1], ["a", 3]]


@pytest.fixture(
    params=["postgres", "redis", "file", pytest.param("kafka", marks=pytest.mark.kafka)]
)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SinkCase]:
    with buried():
        yield from case_fixture(request, tmp_path)


#: The instances a test crashed: cleaned up (their write's outcome ignored) at its end.
GRAVEYARD: list[TwoPhaseSink] = []


@contextlib.contextmanager
def buried() -> Iterator[None]:
    try:
        yield
    finally:
        while GRAVEYARD:
            with contextlib.suppress(SinkError, Died):
                GRAVEYARD.pop().cleanup()


class Died(BaseException):
    """The write's process died mid-write (a BaseException: no retry catches it)."""


class Gate:
    """Holds a sink's target writes (``write_json``: every stage is JSON) at the door
    until :meth:`open`; ``fail`` makes the next ``failures`` writes raise it instead
    (once through the door)."""

    def __init__(self, sink: TwoPhaseSink) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.fail: BaseException | None = None
        self.failures = 0
        self.calls = 0
        # An instance attribute: the sink's own call (self.write_json(...)) finds it first.
        sink.write_json = self._gated(sink.write_json)  # type: ignore[method-assign]

    def _gated(self, write: Callable[[Any, int], bool]) -> Callable[[Any, int], bool]:
        def gated(rows: Any, txid: int) -> bool:
            self.entered.set()
            assert self.go.wait(30), "the test never opened the gate"
            self.calls += 1
            if self.fail is not None and self.failures > 0:
                self.failures -= 1
                raise self.fail
            return write(rows, txid)

        return gated

    def open(self) -> None:
        self.go.set()


def task(
    case: SinkCase, tmp_path: Path, conf: dict[str, Any] | None = None
) -> tuple[TwoPhaseSink, KeyValueState, StatefulTaskProtocol]:
    """A sink task as the local runtime runs it: its protocol made before ``prepare``."""
    sink, state = open_task(case, store(tmp_path))
    protocol = StatefulTaskProtocol(sink)
    if conf is not None:  # prepared again with this conf (the reconnect bound, say)
        sink.prepare(conf, sink.context, sink.collector)
    return sink, state, protocol


def feed(sink: TwoPhaseSink, rows: list[list[Any]]) -> None:
    for row in rows:
        sink.execute(make_tuple(row, FIELDS))


def act(protocol: StatefulTaskProtocol, state: KeyValueState, action: Action, txid: int) -> None:
    protocol.act(state, action, txid)


def abandon(case: SinkCase, sink: TwoPhaseSink) -> None:
    """A crashed task's instance: no cleanup until the test ends (a crash gives none)."""
    case.opened.remove(sink)
    GRAVEYARD.append(sink)


def test_the_local_protocol_overlaps_and_direct_calls_do_not(
    case: SinkCase, tmp_path: Path
) -> None:
    # Spark's driver calls apply_action on instances that never prepare: no overlap there.
    from statestream._stateful import apply_action

    direct, state = open_task(case, store(tmp_path / "direct"))
    gate = Gate(direct)
    apply_action(direct, state, Action.INITSTATE, -1, False)
    feed(direct, A)
    apply_action(direct, state, Action.PREPARE, 0, True)
    threading.Timer(0.2, gate.open).start()
    apply_action(direct, state, Action.COMMIT, 0, True)  # waits for the gate: synchronous
    assert case.rows() == sorted(A)


def committed_0_write_held(
    case: SinkCase, tmp_path: Path
) -> tuple[TwoPhaseSink, KeyValueState, StatefulTaskProtocol, Gate]:
    """A task through COMMIT(0) of A, which returned (the stored phase would be
    COMMITTED(0)) with the write of 0 held at the gate."""
    sink, state, protocol = task(case, tmp_path)
    gate = Gate(sink)
    act(protocol, state, Action.INITSTATE, -1)
    feed(sink, A)
    act(protocol, state, Action.PREPARE, 0)
    act(protocol, state, Action.COMMIT, 0)
    assert gate.entered.wait(10)
    assert case.rows() == []
    return sink, state, protocol, gate


def test_a_commit_returns_before_the_write_and_the_next_prepare_waits_for_it(
    case: SinkCase, tmp_path: Path
) -> None:
    sink, state, protocol, gate = committed_0_write_held(case, tmp_path)
    feed(sink, B)  # the next checkpoint's tuples go on meanwhile
    threading.Timer(0.2, gate.open).start()
    act(protocol, state, Action.PREPARE, 1)  # must wait for the write of 0
    assert case.rows() == sorted(A)
    act(protocol, state, Action.COMMIT, 1)
    act(protocol, state, Action.PREPARE, 2)  # nothing received: no write
    act(protocol, state, Action.COMMIT, 2)
    sink.cleanup()  # waits for what is in flight
    case.opened.remove(sink)
    assert case.rows() == sorted(A + B)
    assert gate.calls == 2


def restart_after_committed_0(case: SinkCase, tmp_path: Path) -> None:
    """The restart of a task that crashed at ``COMMITTED(0)`` with A staged: recovery
    sends INITSTATE only, which writes the committed stage unless the guard holds
    0 (at once: the rows are there when it returns); then B goes through txid 1."""
    sink, state, protocol = task(case, tmp_path)
    act(protocol, state, Action.INITSTATE, 0)
    assert case.rows() == sorted(A)
    feed(sink, B)
    act(protocol, state, Action.PREPARE, 1)
    act(protocol, state, Action.COMMIT, 1)
    sink.cleanup()
    case.opened.remove(sink)
    assert case.rows() == sorted(A + B)


@pytest.mark.parametrize("write_done", [False, True], ids=["write-lost", "write-done"])
def test_a_crash_after_committed_writes_the_stage_once_at_recovery(
    case: SinkCase, tmp_path: Path, write_done: bool
) -> None:
    sink, _, _, gate = committed_0_write_held(case, tmp_path)
    # The crash: the instance is dropped (no cleanup); its write either dies with
    # it or gets through. The restarted task must not write beside it: its
    # prepare waits for that write (the gate opens only now).
    abandon(case, sink)
    if not write_done:
        gate.fail, gate.failures = Died(), 1
    gate.open()
    restart_after_committed_0(case, tmp_path)
    # And once more, crashed after the write of 1 was done: nothing twice.
    _, state3, protocol3 = task(case, tmp_path)
    act(protocol3, state3, Action.INITSTATE, 1)
    assert case.rows() == sorted(A + B)


def test_a_write_that_fails_in_the_thread_is_tried_again(case: SinkCase, tmp_path: Path) -> None:
    sink, state, protocol = task(case, tmp_path)
    gate = Gate(sink)
    gate.fail, gate.failures = ConnectionResetError("the server closed the connection"), 2
    gate.open()
    act(protocol, state, Action.INITSTATE, -1)
    feed(sink, A)
    act(protocol, state, Action.PREPARE, 0)
    act(protocol, state, Action.COMMIT, 0)
    feed(sink, B)
    act(protocol, state, Action.PREPARE, 1)  # the write of 0 got through on its third try
    assert case.rows() == sorted(A)
    assert gate.calls == 3
    act(protocol, state, Action.COMMIT, 1)
    sink.cleanup()
    case.opened.remove(sink)
    assert case.rows() == sorted(A + B)


def test_a_write_lost_past_the_bound_stops_at_the_next_call_and_the_next_run_writes_it(
    case: SinkCase, tmp_path: Path
) -> None:
    sink, state, protocol = task(case, tmp_path, {"statestream.connectors.reconnect.secs": 5})
    gate = Gate(sink)
    gate.fail, gate.failures = ConnectionRefusedError("connection refused"), 10**6
    gate.open()
    act(protocol, state, Action.INITSTATE, -1)
    feed(sink, A)
    act(protocol, state, Action.PREPARE, 0)
    act(protocol, state, Action.COMMIT, 0)  # the stored phase: COMMITTED(0)
    feed(sink, B)
    with pytest.raises(SinkError) as err:
        act(protocol, state, Action.PREPARE, 1)
    assert "could not reconnect within 5 s" in str(err.value)
    assert "task 0" in str(err.value)
    assert case.rows() == []
    abandon(case, sink)
    # The next run, the target back: its recovery writes the committed stage.
    _, state2, protocol2 = task(case, tmp_path)
    act(protocol2, state2, Action.INITSTATE, 0)
    assert case.rows() == sorted(A)


def test_a_refused_row_stops_at_the_next_call(tmp_path: Path) -> None:
    case = PostgresAppend(tmp_path)
    case.opened, case.topology = [], "topo-overlap-" + case.table
    try:
        sink, state, protocol = task(case, tmp_path)
        act(protocol, state, Action.INITSTATE, -1)
        feed(sink, [["a", 1], ["b", None]])  # n is NOT NULL
        act(protocol, state, Action.PREPARE, 0)
        act(protocol, state, Action.COMMIT, 0)  # the refusal happens in the thread
        with pytest.raises(SinkError) as err:
            act(protocol, state, Action.PREPARE, 1)
        assert "refused row ['b', None]" in str(err.value)
        assert case.rows() == []
        abandon(case, sink)
    finally:
        with buried():
            for s in case.opened:
                s.cleanup()
            case.close()


# -- a real SIGKILL with the write of t held in PostgreSQL -------------------------------
CHILD = """
import sys, time
from sink_cases import FIELDS, PG_DSN, SinkCase, open_task, store
from statestream._checkpoint import Action
from statestream._stateful import StatefulTaskProtocol
from statestream.connectors.postgres import PostgresSink
from statestream.testing import make_tuple
from pathlib import Path

table, topology, folder = sys.argv[1:4]


class Case(SinkCase):
    def make(self):
        return PostgresSink(table, FIELDS, dsn=PG_DSN, guard_table=table + "_guard")


case = Case()
case.opened, case.topology = [], topology
sink, state = open_task(case, store(Path(folder)))
protocol = StatefulTaskProtocol(sink)
protocol.act(state, Action.INITSTATE, -1)
for row in [["a", 1], ["b", 1], ["a", 2]]:
    sink.execute(make_tuple(row, FIELDS))
protocol.act(state, Action.PREPARE, 0)
protocol.act(state, Action.COMMIT, 0)
print("committed", flush=True)
time.sleep(300)
"""


def until(probe: Callable[[], Any]) -> Any:
    """``probe()``'s first true value, asked every 50 ms for at most 30 s."""
    for _ in range(600):
        found = probe()
        if found:
            return found
        time.sleep(0.05)
    pytest.fail(f"never true: {probe}")


def test_a_sigkill_with_the_write_held_in_postgres(tmp_path: Path) -> None:
    import psycopg

    case = PostgresAppend(tmp_path)
    case.opened, case.topology = [], "topo-kill-" + case.table
    blocker = psycopg.connect(PG_DSN)  # not autocommit: holds its transaction open
    try:
        # The child's guard table (its own), as the sink creates it; then this test's
        # lock on it, on which the child's write (guard first) waits. (Its guard's
        # row is named by the state's lineage, unknown here: the table is locked.)
        guard = case.table + "_guard"
        case.conn.execute(
            f"CREATE TABLE IF NOT EXISTS {guard} (topology text NOT NULL, "
            "sink text NOT NULL, task integer NOT NULL, txid bigint NOT NULL, "
            "PRIMARY KEY (topology, sink, task))"
        )
        blocker.execute(f"LOCK TABLE {guard} IN EXCLUSIVE MODE")
        path = [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, case.table, case.topology, str(tmp_path)],
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE.parent.parent,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
        )
        try:
            assert child.stdout is not None
            line = child.stdout.readline()
            assert line.strip() == "committed", line
            # COMMIT(0) returned: the state committed 0 and the write waits on our row.
            blocked = until(
                lambda: case.conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))",
                    (blocker.info.backend_pid,),
                ).fetchone()
            )
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            child.stdout.close()  # type: ignore[union-attr]
        blocker.rollback()
        # Unblocked, the killed client's backend finds its socket gone and aborts its
        # transaction (the client never sent the rows nor COMMIT): nothing of 0.
        until(
            lambda: (
                not case.conn.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (blocked[0],)
                ).fetchone()
            )
        )
        assert case.rows() == []
        restart_after_committed_0(case, tmp_path)
    finally:
        blocker.close()
        for s in case.opened:
            s.cleanup()
        case.conn.execute(f"DROP TABLE IF EXISTS {case.table}_guard")
        case.close()
