"""``/metrics`` and ``/api/v1/topology`` agree with the run's RunResult, on every runtime.

The body of ``/metrics`` (statestream.runtime.metrics_export.prometheus_text
over the runtime's ``metrics_snapshot()``) is parsed back with
prometheus_client's own parser: the per-task counters, summed per component,
are the RunResult's counts; the checkpoints, the input progress and the
latencies are there. With ``topology.stats.sample.rate`` 1.0 every tuple is
timed, so each latency's sample count is a count of the RunResult too (on
Spark the executors time their bolt tasks' tuples and the driver its spouts'
trees, up to their batch's commit).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from runtime_harness import Runner
from word_bolts import word_count

from statestream.runtime.metrics_export import api_json, prometheus_text

LINES = 120
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))


def _families(text: bytes) -> dict[str, list[tuple[dict[str, str], float, str]]]:
    out: dict[str, list[tuple[dict[str, str], float, str]]] = defaultdict(list)
    for fam in text_string_to_metric_families(text.decode()):
        for sample in fam.samples:
            out[fam.name].append((sample.labels, sample.value, sample.name))
    return out


def test_metrics_agree_with_the_run_result(runner: Runner, tmp_path: Path) -> None:
    corpus = tmp_path / "in.txt"
    corpus.write_text("".join(f"a b c{i}\n" for i in range(LINES)))
    topology = word_count("metrics", corpus)
    conf = {"topology.state.checkpoint.interval.ms": 10, "topology.stats.sample.rate": 1.0}
    rt = runner.runtime(topology, conf, batch_size=40)
    result = rt.run(until_idle=True)
    snap = rt.metrics_snapshot()
    fams = _families(prometheus_text(snap))

    for key in ("emitted", "executed", "acked", "failed"):
        per_component: dict[str, float] = defaultdict(float)
        for labels, value, name in fams[f"statestream_tuples_{key}"]:
            assert name == f"statestream_tuples_{key}_total"
            assert labels["topology"] == topology.name
            per_component[labels["component"]] += value
        expected = {cid: getattr(m, key) for cid, m in result.components.items()}
        assert {cid: per_component[cid] for cid in expected} == expected, key
    assert {s.component for s in snap.tasks} >= {"lines", "split", "count"}
    assert snap.elapsed > 0 or runner.name != "spark"

    # Checkpoints: the histogram counts the committed ones the snapshot lists.
    hist = {
        name: value
        for labels, value, name in fams["statestream_checkpoint_duration_seconds"]
        if labels.get("le") in (None, "+Inf")
    }
    committed = [c for c in snap.checkpoints if c.phase == "committed"]
    assert committed and hist["statestream_checkpoint_duration_seconds_count"] >= len(committed)
    assert fams["statestream_checkpoint_last_txid"][0][1] == committed[-1].txid

    # The file spout read its whole file.
    size = corpus.stat().st_size
    progress = [(p.component, p.done, p.total) for p in snap.sources]
    assert progress == [("lines", size, size)]
    assert [v for _, v, _ in fams["statestream_source_lag"]] == [0]

    # Every tuple timed (rate 1.0): a bolt's samples are its executed tuples, a spout's
    # its acked trees, per component summed over the tasks' summaries.
    for family, kind, key in (("execute", "bolt", "executed"), ("complete", "spout", "acked")):
        counts: dict[str, float] = defaultdict(float)
        sums: dict[str, float] = defaultdict(float)
        for labels, value, name in fams[f"statestream_{family}_latency_seconds"]:
            (counts if name.endswith("_count") else sums)[labels["component"]] += value
        expected = {
            cid: getattr(m, key)
            for cid, m in result.components.items()
            if snap.components[cid].kind == kind
        }
        assert dict(counts) == expected, family
        if runner.name == "spark":  # the real clock: each mean above 0 and under the run
            assert all(0 < sums[cid] / expected[cid] < 120 for cid in expected), dict(sums)
    assert snap.components["count"].execute_latency is not None
    if runner.name == "spark":
        # Spark's jobs, from its status tracker: one a batch, their stages and tasks.
        batches = rt.counters()["batches"]
        assert len(snap.spark) == batches and all(b.status == "SUCCEEDED" for b in snap.spark)
        assert all(s.completed == s.tasks and s.failed == 0 for b in snap.spark for s in b.stages)
        totals = {name: value for name, rows in fams.items() for _, value, _ in rows}
        assert totals["statestream_spark_jobs"] == batches
        assert (
            totals["statestream_spark_tasks_completed"]
            == sum(s.completed for b in snap.spark for s in b.stages)
            > 0
        )
    # Every word's key is in some committed checkpoint's delta of its count task, on
    # every runtime (Spark's executors send theirs with their acks).
    if len(snap.checkpoints) < 50:  # (the snapshot keeps the last 50)
        assert sum(sum(c.keys_changed.values()) for c in committed) >= LINES + 2
    last = committed[-1]
    assert set(last.keys_changed) <= {"count-0", "count-1"} and last.keys_changed
    exported = {
        f"{labels['component']}-{labels['task']}": value
        for labels, value, _ in fams["statestream_checkpoint_keys_changed"]
    }
    assert exported == last.keys_changed
    # And the bytes each task's prepare sent the store (issue 34: state_size).
    assert set(last.state_size) == set(last.keys_changed)
    assert all(size >= 2 * last.keys_changed[ns] for ns, size in last.state_size.items())
    if runner.workers:
        assert [w.index for w in snap.workers] == [0, 1]
        assert all(s.worker in (0, 1) for s in snap.tasks)

    body = orjson.loads(api_json(snap, topology))
    nodes = {n["id"] for n in body["graph"]["nodes"]}
    assert nodes == {"lines", "split", "count"}
    api_components = body["metrics"]["components"]
    for cid, m in result.components.items():
        assert api_components[cid]["executed"] == m.executed
        assert api_components[cid]["emitted"] == m.emitted
    assert body["metrics"]["sources"][0]["fraction"] == 1.0
    if runner.name == "spark":
        assert [b["txid"] for b in body["metrics"]["spark"]] == [b.txid for b in snap.spark]
        assert body["metrics"]["spark_totals"]["jobs"] == len(snap.spark)


@pytest.mark.spark
def test_a_transactional_run_on_spark_times_its_tasks_and_lists_its_jobs(
    spark_session: Any, tmp_path: Path
) -> None:
    """A transactional topology on Spark (a job per processing phase, one per commit):
    every bolt task's executed tuples timed at rate 1.0, every job listed."""
    import transactional_global_count as global_count

    from statestream.runtime.spark import SparkRuntime

    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(tmp_path / "state.db")},
        "global-count.database": str(tmp_path / "count.db"),
        "global-count.tuples": 300,
        "global-count.take": 100,
        "topology.stats.sample.rate": 1.0,
    }
    rt = SparkRuntime(global_count.topology(), conf, spark=spark_session)
    result = rt.run(until_idle=True)
    assert result.reason == "idle" and not result.errors
    snap = rt.metrics_snapshot()
    bolts = [s for s in snap.tasks if s.kind == "bolt" and s.executed]
    assert bolts and all(s.samples == s.executed for s in bolts), bolts
    assert all(s.execute_latency is not None and s.execute_latency > 0 for s in bolts)
    # A processing job and a commit job per committed transaction (at least).
    assert len(snap.spark) >= 2 * result.counters["batches"] > 0
    assert all(b.status == "SUCCEEDED" and b.final for b in snap.spark)
    assert snap.elapsed > 0
