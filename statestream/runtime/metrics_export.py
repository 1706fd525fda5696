"""The metrics bank's snapshot as the outside world reads it: Prometheus text and JSON.

:func:`prometheus_text` renders a :class:`~statestream.runtime.metrics.MetricsSnapshot`
in the Prometheus text exposition format through ``prometheus_client`` (a
custom collector over the snapshot, registered in a registry of its own: a
library keeps no global registry state). :func:`api_json` is the body of
``/api/v1/topology``: the same numbers and the topology's graph.

Names follow the Prometheus naming guide: base units (seconds, ratios 0..1),
``_total`` counters, what varies in labels (``topology``, ``component``,
``task``; ``task`` is the task index, ``-1`` where the runtime counts only
per component). Latencies are sampled
(``topology.stats.sample.rate``) and exported as summaries: ``_count`` the
tuples timed, ``_sum`` their seconds. On Spark, what the batches' jobs did
(``statestream_spark_jobs_total``, ``_stages_total``,
``_tasks_completed_total``, ``_tasks_failed_total``, ``_job_seconds_total``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

from .metrics import CHECKPOINT_BUCKETS, MetricsSnapshot, TaskStats

if TYPE_CHECKING:
    from .._topology import Topology

__all__ = ["SnapshotCollector", "api_json", "prometheus_text"]

_TASK = ["topology", "component", "task"]

# (metric name without the prefix and _total, TaskStats field, help)
_TASK_COUNTERS = (
    ("tuples_emitted", "emitted", "Tuples emitted by a task."),
    ("tuples_executed", "executed", "Tuples a bolt task executed."),
    ("tuples_acked", "acked", "Tuples acked (a spout: its tuple trees completed)."),
    ("tuples_failed", "failed", "Tuples failed (a spout: every failure it heard of)."),
    ("errors", "errors", "Errors raised by user code in a task."),
    (
        "dead_letters",
        "dead_lettered",
        "Messages a spout task, or tuples a bolt task, gave up on (the dead-letter file).",
    ),
)
_TASK_GAUGES = (
    ("queue_length", "queued", "Tuples waiting in a task's input queue."),
    ("tuples_retrying", "retrying", "A spout task's messages waiting for their retry."),
    ("capacity_ratio", "capacity", "Busy share of the last window (executed x latency / window)."),
    (
        "backpressure_ratio",
        "backpressure",
        "Share of a task's sampled drains that ended on a full downstream queue.",
    ),
)
# Runtime counters exported as run-wide counters: (counter key, metric name, help).
_RUN_COUNTERS = (
    ("rewinds", "rewinds", "Rewinds to the last committed checkpoint within the run."),
    ("replays", "replays", "Batches rolled back and run again (Spark)."),
    ("batches", "batches", "Batches committed (Spark)."),
    ("worker_restarts", "worker_restarts", "Restarts of the worker processes."),
    ("timed_out", "tuples_timed_out", "Tuple trees that timed out."),
    (
        "late_tuples",
        "late_tuples",
        "Tuples windowed bolts took as late (older than the watermark).",
    ),
)


class SnapshotCollector:
    """A ``prometheus_client`` collector over the snapshots ``source`` gives (one
    call per scrape)."""

    def __init__(self, source: Callable[[], MetricsSnapshot]) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        yield from _families(self.source())


def _families(snap: MetricsSnapshot) -> Iterator[Metric]:
    top = snap.topology
    tasks = snap.tasks

    def labels(s: TaskStats) -> list[str]:
        return [top, s.component, str(s.task_index)]

    for name, attr, doc in _TASK_COUNTERS:
        fam = CounterMetricFamily(f"statestream_{name}", doc, labels=_TASK)
        for s in tasks:
            fam.add_metric(labels(s), getattr(s, attr))
        yield fam
    for name, attr, doc in _TASK_GAUGES:
        gauge = GaugeMetricFamily(f"statestream_{name}", doc, labels=_TASK)
        for s in tasks:
            gauge.add_metric(labels(s), getattr(s, attr))
        yield gauge
    execute = SummaryMetricFamily(
        "statestream_execute_latency_seconds",
        "Sampled time a bolt task takes per tuple (Storm's execute latency).",
        labels=_TASK,
    )
    complete = SummaryMetricFamily(
        "statestream_complete_latency_seconds",
        "Sampled time from a spout's emit to its tuple tree's ack.",
        labels=_TASK,
    )
    for s in tasks:
        if s.kind == "bolt":
            execute.add_metric(labels(s), s.samples, s.busy)
        else:
            complete.add_metric(labels(s), s.complete_samples, s.complete_sum)
    yield execute
    yield complete
    yield from _run_families(snap)


def _run_families(snap: MetricsSnapshot) -> Iterator[Metric]:
    top = snap.topology
    run = ["topology"]
    for key, name, doc in _RUN_COUNTERS:
        if key in snap.counters:
            fam = CounterMetricFamily(f"statestream_{name}", doc, labels=run)
            fam.add_metric([top], snap.counters[key])
            yield fam
    elapsed = GaugeMetricFamily(
        "statestream_elapsed_seconds", "Seconds since the run began.", labels=run
    )
    elapsed.add_metric([top], snap.elapsed)
    yield elapsed
    hist = snap.checkpoint_histogram
    buckets = [(str(b), c) for b, c in zip(CHECKPOINT_BUCKETS, hist.counts, strict=True)]
    duration = HistogramMetricFamily(
        "statestream_checkpoint_duration_seconds",
        "Time from a checkpoint's PREPARE to its commit.",
        labels=run,
    )
    duration.add_metric([top], [*buckets, ("+Inf", hist.count)], hist.sum)
    yield duration
    last = snap.last_checkpoint
    if last is not None:
        txid = GaugeMetricFamily(
            "statestream_checkpoint_last_txid", "The last committed checkpoint.", labels=run
        )
        txid.add_metric([top], last.txid)
        yield txid
        age = GaugeMetricFamily(
            "statestream_checkpoint_age_seconds",
            "Seconds since the last checkpoint committed.",
            labels=run,
        )
        age.add_metric([top], max(0.0, snap.at - (last.ended_at or snap.at)))
        yield age
        yield from _per_namespace(
            snap,
            last.keys_changed,
            "statestream_checkpoint_keys_changed",
            "Keys a stateful task changed in the last committed checkpoint.",
        )
    yield from _worker_families(snap)
    yield from _source_families(snap)
    yield from _spark_families(snap)


def _per_namespace(
    snap: MetricsSnapshot, values: dict[str, int], name: str, doc: str
) -> Iterator[Metric]:
    """A gauge per stateful task, from ``values`` keyed by task namespace (``count-0``)."""
    if not values:
        return
    gauge = GaugeMetricFamily(name, doc, labels=_TASK)
    for namespace, value in sorted(values.items()):
        component, _, index = namespace.rpartition("-")  # statestream._components.task_namespace
        gauge.add_metric([snap.topology, component, index], value)
    yield gauge


def _worker_families(snap: MetricsSnapshot) -> Iterator[Metric]:
    if not snap.workers:
        return
    top = snap.topology
    labels = ["topology", "worker"]
    restarts = CounterMetricFamily(
        "statestream_worker_restarts_by_worker", "Restarts of one worker process.", labels=labels
    )
    rate = GaugeMetricFamily(
        "statestream_worker_tuples_per_second",
        "Tuples a worker's tasks executed per second.",
        labels=labels,
    )
    pid = GaugeMetricFamily(
        "statestream_worker_pid", "A worker's current process id.", labels=labels
    )
    for w in snap.workers:
        restarts.add_metric([top, str(w.index)], w.restarts)
        rate.add_metric([top, str(w.index)], w.rate)
        pid.add_metric([top, str(w.index)], w.pid)
    yield restarts
    yield rate
    yield pid


def _source_families(snap: MetricsSnapshot) -> Iterator[Metric]:
    if not snap.sources:
        return
    top = snap.topology
    labels = ["topology", "component", "task", "unit"]
    done = GaugeMetricFamily(
        "statestream_source_read",
        "How far a data spout has read (bytes or entries).",
        labels=labels,
    )
    size = GaugeMetricFamily(
        "statestream_source_size", "The size of a spout's input (bytes or entries).", labels=labels
    )
    lag = GaugeMetricFamily(
        "statestream_source_lag",
        "What a spout has still to read (bytes or entries).",
        labels=labels,
    )
    for p in snap.sources:
        key = [top, p.component, str(p.task_index), p.unit]
        done.add_metric(key, p.done)
        if p.total is not None:
            size.add_metric(key, p.total)
            lag.add_metric(key, p.lag or 0)
    yield done
    yield size
    yield lag


# Spark's work over the run (runtime.metrics.SparkTotals): (field, metric name, help).
_SPARK_COUNTERS = (
    ("jobs", "spark_jobs", "Spark jobs the run's batches ran."),
    ("stages", "spark_stages", "Stages of those jobs."),
    ("tasks_completed", "spark_tasks_completed", "Spark tasks of those stages that completed."),
    ("tasks_failed", "spark_tasks_failed", "Spark task attempts of those stages that failed."),
    ("job_seconds", "spark_job_seconds", "Seconds the driver waited on the batches' jobs."),
)


def _spark_families(snap: MetricsSnapshot) -> Iterator[Metric]:
    totals = snap.spark_totals
    if totals is None:
        return
    for attr, name, doc in _SPARK_COUNTERS:
        fam = CounterMetricFamily(f"statestream_{name}", doc, labels=["topology"])
        fam.add_metric([snap.topology], getattr(totals, attr))
        yield fam


def prometheus_text(snapshot: MetricsSnapshot) -> bytes:
    """``snapshot`` in the Prometheus text exposition format (the body of ``/metrics``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snapshot))
    return generate_latest(registry)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(obj).items()}
    return obj


def api_json(snapshot: MetricsSnapshot, topology: Topology) -> bytes:
    """The body of ``/api/v1/topology``: ``{"graph": ..., "metrics": ...}``.

    ``graph`` is the topology's graph (``statestream._ui.graph.graph_dict``:
    nodes with kind and parallelism, edges with stream and grouping);
    ``metrics`` the snapshot, field for field (see
    :mod:`statestream.runtime.metrics`), with each source's ``lag`` and
    ``fraction`` and the run's ``last_checkpoint`` added.
    """
    from .._ui.graph import graph_dict, topology_graph

    metrics = _plain(snapshot)
    for p, row in zip(snapshot.sources, metrics["sources"], strict=True):
        row["lag"], row["fraction"] = p.lag, p.fraction
    last = snapshot.last_checkpoint
    metrics["last_checkpoint"] = None if last is None else _plain(last)
    body = {"graph": graph_dict(topology_graph(topology)), "metrics": metrics}
    return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
