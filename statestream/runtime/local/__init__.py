"""The embedded runtime: one process, one scheduler thread, N tasks per component.

Why one thread: Python's GIL lets only one thread run bytecode at a time, so
threads per task would add lock and hand-off costs without adding
parallelism. Instead a cooperative scheduler moves tuples between per-task
deques and calls each task in turn, bolts before spouts, sources before their
subscribers. Backpressure falls out of the schedule: a spout is polled only
while the queues it feeds are below ``topology.executor.receive.buffer.size``,
and a bolt stops draining while a queue it feeds is full, so a slow bolt slows
the spout and memory stays flat. ``next_tuple`` and ``execute`` must
therefore not block (Storm asks the same of ``nextTuple``).

The runtime is a transport and a scheduler only. Acking lives in
:mod:`statestream._acker` (the ledger) and is reached through
:class:`Acking`; this module only delivers the messages.
"""

from __future__ import annotations

from ..._results import ErrorReport, RunResult, TaskMetrics
from .acking import FLAT, RemoteInbox, next_edge_of, pack_ids, unpack_ids
from .runtime import LocalRuntime

__all__ = [
    "FLAT",
    "ErrorReport",
    "LocalRuntime",
    "RemoteInbox",
    "RunResult",
    "TaskMetrics",
    "next_edge_of",
    "pack_ids",
    "unpack_ids",
]
