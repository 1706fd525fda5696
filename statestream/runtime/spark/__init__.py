"""The Spark runtime: the same topology, one transaction per Spark job.

Imported only when ``topology.runner`` is ``spark`` (PySpark is an optional
dependency: ``pip install 'statestream[spark]'``). What a user needs to know
(what runs on the driver and what on executors, the hooks, poison tuples)
is in docs/guides/spark.md; the implementer's half is in the modules:

* the driver (one process): :mod:`.driver` (:class:`SparkRuntime`, the run
  loop, a coordinator holding the parts below as fields), :mod:`.sessions`
  (the SparkSession, what ships to executors), :mod:`.checkpoints` (store,
  checkpoint record, recovery), :mod:`.spouts` (data spouts read into
  batches), :mod:`.batches` (one batch's transaction, the retry policy),
  :mod:`.jobs` (a batch's Spark job), :mod:`.feed` (:class:`DataFrameSpout`,
  Spark as a source), :mod:`.transactional` (transactional topologies),
  :mod:`.tally` (the counters, errors and metrics the parts share);
* the executors (Spark's Python workers): :mod:`.executor` (bolt tasks and
  read stages), :mod:`.executor_tx` (transactional tasks);
* both: :mod:`.shared` (the records a job moves, picklable helpers),
  :mod:`.config` (keys, defaults, the checks before a run).

Task ids, namespaces, per-component configs, routes and contexts come from a
:class:`~statestream.runtime.plan.RuntimePlan`, as on the local runtime, and
routing is the local runtime's (:class:`~statestream._routing.RouteChoice`).
A bolt task sorts its input by (producer task, emit sequence) before executing
it, so its input order, and therefore what it emits and where, is the same on
every attempt and every replay; the tuples from one producer task arrive in
the order they were emitted, as in Storm.
"""

from __future__ import annotations

from .config import (
    BATCH_ATTEMPTS_KEY,
    BATCH_SIZE_KEY,
    CHECKPOINT_NAMESPACE,
    MAX_TUPLE_FAILURES,
    SPARK_DEFAULTS,
    check_provider,
    check_spark_conf,
    ship_user_modules,
)
from .driver import SparkRuntime
from .feed import DataFrameSpout, spark_checkpoint_batches
from .shared import fresh_state

#: The SparkSession defaults (the old private name, kept for the benchmarks and tests).
_SPARK_DEFAULTS = SPARK_DEFAULTS

__all__ = [
    "BATCH_ATTEMPTS_KEY",
    "BATCH_SIZE_KEY",
    "CHECKPOINT_NAMESPACE",
    "MAX_TUPLE_FAILURES",
    "SPARK_DEFAULTS",
    "DataFrameSpout",
    "SparkRuntime",
    "check_provider",
    "check_spark_conf",
    "fresh_state",
    "ship_user_modules",
    "spark_checkpoint_batches",
]
