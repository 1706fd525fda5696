"""What runs inside Spark tasks for a transactional topology.

The coordinator's tuples of a job (:func:`tx_source`) and one task of the
topology for one job (:func:`run_tx_task`): the component the builder made
(an emitter, or a batch bolt wrapped for count-based completion), fresh for
the job, ending with its report of which attempts it finished.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable, Iterator
from typing import Any

from ..._clock import SystemClock
from ..._transactional.components import (
    COORDINATOR,
)
from ..._tuple import Origin, Tuple
from ..metrics import TaskTiming
from .executor import Producer, shared_provider, shipped_plan
from .shared import ACK, SEQ_BITS, ReportedError, fresh_state, sort_key


def tx_source(
    token: str, payload: Any, parts: Iterable[list[tuple[str, list[Any]]]]
) -> Iterator[tuple[Any, Any, Any]]:
    """The coordinator's tuples of one job (batch tuples, or one commit tuple),
    routed as task 0 of ``$coordinator`` routes them on the local runtime."""
    shipped = shipped_plan(token, payload)
    producer = Producer(shipped, COORDINATOR, 0)
    for records in parts:
        for stream, values in records:
            producer.route(stream, values, None)
    yield from producer.out


def run_tx_task(
    token: str, payload: Any, cid: str, index: int, items: Iterable[tuple[int, Any]]
) -> Iterator[tuple[Any, Any, Any]]:
    """One task of a transactional topology for one job (a Spark partition).

    The task is the component the builder made (an emitter, or a batch bolt
    wrapped for count-based completion), fresh for the job; its input is
    sorted by (producer task, emit sequence), so each producer's count tuple
    follows its data, as on the local runtime. It ends with its report:
    which attempts it finished (:func:`statestream._transactional.driver.settle`
    reads them), counts and errors.
    """
    shipped = shipped_plan(token, payload)
    plan = shipped.plan
    records = sorted((rec for _, rec in items), key=sort_key)
    # Copied, not unpickled from a fresh pickle: user classes travel by value,
    # and pickling one again here would take its module's globals as they are
    # in this worker now (a connection a committer opened in an earlier job).
    task: Any = copy.deepcopy(plan.topology.components[cid].obj)
    producer = Producer(shipped, cid, index)
    errors: list[ReportedError] = []
    producer.errors = errors

    def open_state(namespace: str) -> Any:
        # A fresh object: another worker may have written the namespace since.
        return fresh_state(shared_provider(plan.config, plan.topology.name), namespace)

    context = plan.context(cid, index, state_opener=open_state, clock=SystemClock())
    task.prepare(plan.conf_for(cid), context, producer)
    origins: dict[tuple[int, str], Origin] = {}
    failed = 0
    # The sampled execute latency, counted down as BoltTask.execute_all counts it.
    key, timing, clock = (cid, index), TaskTiming(cid, index), time.perf_counter
    sample_in = shipped.countdown.get(key, shipped.first_sample)
    try:
        for key, stream, values, _roots in records:
            src_task = key >> SEQ_BITS
            origin = origins.get((src_task, stream))
            if origin is None:
                src, src_index = plan.owner[src_task]
                origin = origins[src_task, stream] = Origin(
                    src, src_task, src_index, stream, plan.output_fields[src][stream]
                )
            producer.failed_current = False
            # The task catches what the user's code raises and fails the
            # attempt; anything else is a fault of this Spark task.
            sample_in -= 1
            if sample_in:
                task.execute(Tuple(values, origin))
            else:
                sample_in = shipped.every
                start = clock()
                task.execute(Tuple(values, origin))
                timing.timed(1, clock() - start)
            failed += producer.failed_current
    finally:
        shipped.countdown[key] = sample_in
        task.cleanup()
    yield from producer.out
    report = (cid, index, dict(task.finished), len(records), producer.emitted, failed, errors)
    yield (ACK, 0, (*report, timing if timing.samples else None))


def tx_commit_input(
    targets: frozenset[str], attempt: Any, items: Iterable[tuple[str, int, Any]]
) -> Iterator[tuple[str, int, Any]]:
    """What the processing job sent the commit-phase bolts for ``attempt``."""
    for item in items:
        if item[0] in targets and item[2][2][0] == attempt:
            yield item
