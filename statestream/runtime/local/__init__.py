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
:class:`~.acking.Acking`; this package only delivers the messages.

The modules, from the tuple up (each compiled with mypyc as one group, so
that calls and attribute reads between them stay native; see
:mod:`statestream._core`):

* ``acking``: tuple-tree ids, the acker's routing (``Acking``), and the inbox
  of a task in another worker (``RemoteInbox``);
* ``tasks``: what every task shares: streams, routes, the delivery fast paths;
* ``spout`` / ``bolt``: a spout task, a bolt task (each its own collector);
* ``support``: the loop's helpers (errors named by task, the collector, ticks);
* ``host``: what a task sees of its run (``TaskHost``): the clock, the acker's
  routing, tuple ids, the message books and dead-letter file, the error log;
* ``base``: the tasks built and wired (``RuntimeBase``, a ``TaskHost``), state,
  dead letters replayed, what reaches across tasks;
* ``runtime``: :class:`LocalRuntime`: lifecycle, rewind, the loop, observation.
"""

from __future__ import annotations

# Every compiled module through the import system, each after those it
# imports: mypyc gives a module of its group that another compiled module
# imports first a __file__ (and spec) under the group library's folder, where
# no file is.
# isort: off
from . import acking, tasks, spout, bolt, support, host, base, runtime  # noqa: F401
# isort: on

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
