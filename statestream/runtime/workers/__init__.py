"""Several worker processes for one topology, under a supervisor (``topology.workers``).

Storm runs a topology in worker processes and its supervisor restarts a
worker that dies. Here ``statestream run`` (or :func:`statestream.run`) with
``topology.workers: N`` becomes that supervisor (:class:`WorkerSupervisor`):

* **Tasks.** Task ``t`` (the plan's global task ids, in topological order)
  runs in worker ``t % N``, acker task ``a`` in worker ``a % N``: Storm's
  round-robin scheduler, so a component with parallelism >= N spans every
  worker. Each worker is a :class:`~statestream.runtime.local.LocalRuntime`
  that builds only its own tasks; a task of another worker is a
  :class:`~statestream.runtime.local.RemoteInbox` in its routes, which
  gathers the tuples for that worker in columns. Tasks of one worker hand
  tuples over in memory, as with one process.
* **Rounds.** The workers advance in rounds: in round r each runs up to
  four scheduler steps (drain its bolts, fire its timers, poll its spouts),
  sends every other worker one frame (the tuples, acker messages and spout
  completions for it, and its status), then reads and delivers every
  peer's frame of round r-1. A worker is thus at most one round ahead of
  another, FIFO order holds per pair of tasks, and decisions that must be
  the same everywhere are taken from the statuses of round r-2, which every
  worker has. Frames are ``marshal`` (a fast codec for
  str/int/float/bytes/list/tuple/dict); a frame with a value marshal cannot
  carry goes as a pickle (only ever between our own processes).
* **The same protocols.** Acks go to the worker of their acker task, the
  acker's outcome to the worker of the spout task; checkpoint tuples travel
  like data, except that the checkpoint spout's reach the bolts of its own
  worker in the round they reach the others' (:class:`_DelayedControl`), so
  every worker commits in the same round. Exactly-once state keeps its
  standstill: every worker runs a
  replica of :class:`~statestream._exactly_once.Standstill` fed with the
  same statuses, so all of them decide POLL / DRAIN / CUT alike; the cut is
  taken when no worker has had anything queued or in flight for two rounds,
  with every worker's spout positions in the statuses, and the data spouts
  wait two more rounds so that the PREPARE reaches the first bolts of every
  worker before new data does. A failure anywhere rewinds every worker in
  the same round; frames sent before a rewind are dropped.
* **Garbage.** Workers collect in the same round too (:func:`_collect`), so
  that one worker's pause does not hold the others up in turn.
* **Backpressure.** Each status carries the inbox length of every bolt task
  of its worker; a queue to a task of another worker counts as full when
  that length plus what was sent to it since, less
  ``topology.transfer.buffer.size`` (the tuples allowed in flight), is at
  the capacity, so a slow bolt in one worker holds back the spout in
  another, and a task's queue holds at most the two sizes together.
* **Failures.** A worker that dies (killed, or exiting without finishing) is
  noticed by the supervisor within a second: it stops the other workers and
  starts all of them again, which recovers from the last committed
  checkpoint exactly as a restart of ``statestream run`` does (exactly-once:
  the spouts seek to the stored positions; at-least-once: what was not
  acked is replayed). A worker dying 5 times within a minute stops the run
  with a :class:`~statestream.RuntimeFailure` naming the cause. Every worker
  asks the kernel to kill it when the supervisor dies, so a killed
  supervisor leaves no worker behind.
"""

from __future__ import annotations

from .link import Link, worker_of_task
from .mesh import Mesh
from .supervisor import WorkerSupervisor

__all__ = ["Link", "Mesh", "WorkerSupervisor", "worker_of_task"]
