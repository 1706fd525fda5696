"""The Spark job of one batch: a read stage and one stage per bolt.

The job of batch ``t`` (:meth:`BatchJobs.run`) is a read stage and one
stage per bolt (``partitionBy`` the bolt's task count, one partition = one
bolt task). The driver collects no tuples: each task puts its
acknowledgement in front of the tuples it sends to task 0 of its first
downstream bolt, which forwards it; the last bolts' tasks output
acknowledgements only, and the driver collects those. An output that several
bolts read is cached for the batch, so no task runs twice.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from ..._errors import RuntimeFailure
from ..._partitioned import Range, range_size, split_range
from ..plan import RuntimePlan
from .executor import read_partition, read_ranges, run_bolt
from .shared import Ack, addressed_to, identity, only_acks
from .spouts import Batch
from .stages import JobWatch

#: What a batch runner runs: ``job(txid, batch)``, the tasks' acknowledgements.
Job = Callable[[int, Batch], list[Ack]]


class BatchJobs:
    """Builds and runs the Spark job of a batch, for the plan's spouts and bolts.

    ``watch`` puts each job's figures from Spark's status tracker into the
    metrics bank; ``tokens()`` is, at each job, which executor state objects
    are current (:attr:`DriverCheckpoints.tokens`).
    """

    def __init__(
        self, plan: RuntimePlan, watch: JobWatch, tokens: Callable[[], Mapping[str, str]]
    ) -> None:
        self._topology = plan.topology
        self._spouts = plan.data_spouts
        self._bolts = [b for b in plan.bolts if not b.id.startswith("$")]
        self._watch = watch
        self._tokens = tokens

    def for_run(self, sc: Any, token: str, payload: Any) -> Job:
        """The jobs of one run: on ``sc``, with the run's ``token`` and broadcast."""
        return partial(self.run, sc, token, payload)

    def _read_stage(self, sc: Any, token: str, payload: Any, items: list[Any], batch: Batch) -> Any:
        """The records of the batch: those the driver read, and the ranges of its
        partitioned sources read on the executors (each cut into pieces so that
        every core reads a share; one Spark task per piece)."""
        stages = []
        if items or not batch.ranges:
            stages.append(
                sc.parallelize(items, max(1, len(items))).mapPartitions(
                    partial(read_partition, token, payload)
                )
            )
        if batch.ranges:
            total = sum(range_size(r) for _, _, r in batch.ranges) or 1
            cores = max(1, int(sc.defaultParallelism))
            pieces: list[tuple[str, int, int, Range]] = []
            k: dict[tuple[str, int], int] = {}
            for cid, index, r in batch.ranges:
                for piece in split_range(r, max(1, round(cores * range_size(r) / total))):
                    k[cid, index] = k.get((cid, index), 0) + 1
                    pieces.append((cid, index, k[cid, index], piece))
            stages.append(
                sc.parallelize(pieces, len(pieces)).mapPartitions(
                    partial(read_ranges, token, payload)
                )
            )
        return stages[0] if len(stages) == 1 else sc.union(stages)

    def run(self, sc: Any, token: str, payload: Any, txid: int, batch: Batch) -> list[Ack]:
        """Run batch ``txid``: every bolt task executes its tuples and prepares ``txid``."""
        source = batch.source
        items = [
            (cid, index, records) for (cid, index), records in batch.records.items() if records
        ]
        persisted = []
        outs: dict[str, Any] = {}
        leaves: dict[int, Any] = {}
        topology = self._topology
        consumers = {
            cid: {d for d in topology.downstream(cid) if not d.startswith("$")}
            for cid in topology.components
        }

        def keep(cids: list[str], rdd: Any) -> None:
            # An output read by several bolts is cached, else each would run
            # its tasks again; one read by none goes to the driver (acks only).
            if len(set().union(*(consumers[c] for c in cids))) > 1:
                rdd.persist()
                persisted.append(rdd)
            if any(not consumers[c] for c in cids):
                leaves[id(rdd)] = rdd

        tokens = dict(self._tokens())
        try:
            if source is None:
                source = self._read_stage(sc, token, payload, items, batch)
            keep([spec.id for spec in self._spouts], source)
            for spec in self._spouts:
                outs[spec.id] = source
            for bolt in self._bolts:
                parents = list(
                    {
                        id(outs[up]): outs[up] for up in topology.upstream(bolt.id) if up in outs
                    }.values()
                )
                inputs = parents[0] if len(parents) == 1 else sc.union(parents)
                out = (
                    inputs.mapPartitions(partial(addressed_to, bolt.id))
                    .partitionBy(bolt.parallelism, identity)
                    .mapPartitionsWithIndex(
                        partial(
                            run_bolt,
                            token,
                            payload,
                            bolt.id,
                            txid,
                            tokens,
                            end_of_input=batch.end_of_input,
                        )
                    )
                )
                keep([bolt.id], out)
                outs[bolt.id] = out
            ends = list(leaves.values())
            with self._watch.batch(sc, txid):  # its jobs' figures into the bank
                acks: list[Ack] = (
                    (ends[0] if len(ends) == 1 else sc.union(ends))
                    .mapPartitions(only_acks)
                    .collect()
                )
        finally:
            for rdd in persisted:
                rdd.unpersist()
        seen = {(cid, index) for cid, index, *_ in acks}
        for bolt in self._bolts:
            for i in range(bolt.parallelism):
                if (bolt.id, i) not in seen:
                    raise RuntimeFailure(
                        f"bolt {bolt.id!r} task {i} did not acknowledge batch {txid}"
                    )
        return acks
