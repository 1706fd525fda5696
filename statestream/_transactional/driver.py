"""What a runtime needs to play the coordinator itself, with no transport in it.

The local runtime runs a transactional topology as the ordinary components
the builder made: the ``$coordinator`` spout drives the protocol and hears
from the acker when a batch was processed or committed. A runtime that runs
a batch as a whole (Spark: one job per phase) has no acker; its driver
plays the coordinator instead, driving the same pure
:class:`~statestream._transactional.coordinator.TransactionCoordinator`,
and learns the outcome of a phase from what every task of that phase
reports. This module gives such a runtime:

* :func:`layout`: the transactional shape of a built topology (None for an
  ordinary one): the spout, the emitter, the components of each phase;
* :class:`CoordinatorStore`: the coordinator's state in the state provider,
  in the one stored format the ``$coordinator`` spout uses too, so a store
  one runtime left behind (killed or not) is continued by the other;
* :func:`settle`: which attempts every task of a phase finished.

A driver's round, in the coordinator's words: ``poll`` gives batch
emissions (their metadata stored first); one job runs the emitters and the
processing-phase bolts for them; ``settle`` over the tasks' reports gives
``on_ack`` or ``on_fail`` per batch, in txid order; ``poll`` then gives the
commit of the next txid; a job runs the commit-phase bolts (committers
first) for it; ``settle`` gives ``on_ack`` (the commit is recorded) or
``on_fail``. Commits go one txid at a time, so strictly in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .._topology import Topology
from .api import TransactionalSpout
from .components import (
    BATCH_STREAM,
    COORDINATOR,
    BatchBoltExecutor,
    CoordinatorStore,
    EmitterExecutor,
    TransactionalCoordinatorSpout,
)
from .coordinator import TransactionAttempt

__all__ = ["CoordinatorStore", "TransactionalLayout", "layout", "settle"]


@dataclass(frozen=True)
class TransactionalLayout:
    """The parts of a transactional topology as a driver schedules them.

    ``processing`` lists the emitter and every processing-phase bolt,
    ``commit`` every commit-phase bolt (committers and what is downstream
    of one), each in topological order; ``committers`` are those that get
    the commit tuple.
    """

    spout: TransactionalSpout
    emitter: str
    processing: tuple[str, ...]
    commit: tuple[str, ...]
    committers: tuple[str, ...]

    @property
    def coordinator(self) -> str:
        return COORDINATOR


def layout(topology: Topology) -> TransactionalLayout | None:
    """The transactional shape of ``topology``, or None if the builder did not make it."""
    spec = topology.components.get(COORDINATOR)
    if spec is None or not isinstance(spec.obj, TransactionalCoordinatorSpout):
        return None
    emitter = ""
    processing: list[str] = []
    commit: list[str] = []
    committers: list[str] = []
    for cid in topology.topological_order():
        obj = topology.components[cid].obj
        if isinstance(obj, EmitterExecutor):
            emitter = cid
            processing.append(cid)
        elif isinstance(obj, BatchBoltExecutor):
            (commit if obj.commit_phase else processing).append(cid)
            if obj.committer:
                committers.append(cid)
    subscribed = [s.source for s in topology.components[emitter].inputs] if emitter else []
    if subscribed != [COORDINATOR] or topology.components[emitter].inputs[0].stream != BATCH_STREAM:
        return None
    return TransactionalLayout(
        spec.obj.spout, emitter, tuple(processing), tuple(commit), tuple(committers)
    )


#: One task's report of a phase: ``{txid: attempt id}`` of the attempts it finished.
Finished = Mapping[int, int]


def settle(
    attempts: Iterable[TransactionAttempt],
    tasks: Sequence[tuple[str, int]],
    reports: Mapping[tuple[str, int], Finished],
) -> dict[int, bool]:
    """``{txid: True}`` for each attempt that every task of ``tasks`` finished.

    An attempt is done with a phase when each task of the phase finished it
    (an emitter: emitted its part and sent its counts; a batch bolt: ran
    ``finish_batch`` and sent its counts). A task that failed the attempt,
    never got all of it (an upstream task failed it), or sent no report at
    all (its Spark task was lost) did not: the attempt failed.
    """
    out: dict[int, bool] = {}
    for attempt in attempts:
        txid, aid = attempt.transaction_id, attempt.attempt_id
        out[txid] = all(reports.get(task, {}).get(txid) == aid for task in tasks)
    return out
