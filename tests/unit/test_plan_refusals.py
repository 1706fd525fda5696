"""The refusals every runtime shares, decided once in :mod:`statestream.runtime.plan`.

Tables of (topology, config) -> the refusal, and of (provider sharing, runner,
workers, master) -> the provider refusal; :func:`make_runtime` raises the
first refusal before it builds a runtime.
"""

from __future__ import annotations

from typing import Any

import pytest

from statestream import (
    BatchBolt,
    Config,
    ConfigError,
    MemoryTransactionalSpout,
    Topology,
    TopologyBuilder,
    TransactionalTopologyBuilder,
    Tuple,
)
from statestream.runtime.contract import make_runtime
from statestream.runtime.plan import check_refusals, provider_refusal, refusals
from statestream.testing import ListSpout
from tests.word_bolts import Count


class _Sum(BatchBolt[Any]):
    def execute(self, tuple: Tuple) -> None:
        pass

    def finish_batch(self) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        pass


def _plain() -> Topology:
    b = TopologyBuilder("plain")
    b.set_spout("words", ListSpout(["a"], fields=["word"]))
    return b.build()


def _stateful() -> Topology:
    b = TopologyBuilder("counts")
    b.set_spout("words", ListSpout(["a"], fields=["word"]))
    b.set_bolt("count", Count()).fields_grouping("words", ["word"])
    return b.build()


def _transactional() -> Topology:
    b = TransactionalTopologyBuilder("tx", "spout", MemoryTransactionalSpout({0: [[1]]}, ["n"], 1))
    b.set_committer_bolt("sum", _Sum()).global_grouping("spout")
    return b.build()


def _sharing(scope: str) -> Any:
    return lambda spec: scope


SPARK_WORKERS = "the spark runner does not start worker processes itself"
PROCESS_ON_WORKERS = "which keeps state inside one process; with topology.workers: 2"
TRANSACTIONAL_ON_WORKERS = "transactional topologies run on one process here"
ACKERS = "has stateful bolts, which need acking"

# topology, config, the provider's sharing, the refusals (a fragment of each, in order)
REFUSALS = [
    (_plain, {}, "process", []),
    (_stateful, {}, "process", []),
    (_stateful, {"topology.acker.executors": 0}, "process", [ACKERS]),
    (_plain, {"topology.acker.executors": 0}, "process", []),
    (_plain, {"topology.workers": 2}, "process", []),
    (_stateful, {"topology.workers": 2}, "process", [PROCESS_ON_WORKERS]),
    (_stateful, {"topology.workers": 2}, "machine", []),
    (_stateful, {"topology.workers": 2}, "network", []),
    (
        _stateful,
        {"topology.workers": 2, "topology.acker.executors": 0},
        "process",
        [PROCESS_ON_WORKERS, ACKERS],
    ),
    (_transactional, {}, "process", []),
    (_transactional, {"topology.workers": 2}, "machine", [TRANSACTIONAL_ON_WORKERS]),
    (_plain, {"topology.runner": "spark"}, "process", []),
    (_plain, {"topology.runner": "spark", "topology.workers": 2}, "process", [SPARK_WORKERS]),
    # Spark has its at-most-once mode for ackers 0, and checks the provider at open.
    (_stateful, {"topology.runner": "spark", "topology.acker.executors": 0}, "process", []),
    (_transactional, {"topology.runner": "spark"}, "process", []),
]


@pytest.mark.parametrize(("topology", "config", "sharing", "expected"), REFUSALS)
def test_refusals(topology: Any, config: dict[str, Any], sharing: str, expected: list[str]) -> None:
    found = refusals(topology(), Config(config), sharing=_sharing(sharing))
    assert len(found) == len(expected), found
    for message, fragment in zip(found, expected, strict=True):
        assert fragment in message


def test_the_refusals_quote_the_topology_and_suggest_the_fix() -> None:
    conf = Config({"topology.acker.executors": 0})
    [message] = refusals(_stateful(), conf)
    assert message == (
        "topology 'counts' has stateful bolts, which need acking to know when a checkpoint "
        "has passed every bolt; set topology.acker.executors to 1 or more"
    )
    [message] = refusals(_transactional(), Config({"topology.workers": 2}))
    assert "(its coordinator is '$coordinator')" in message
    assert "topology.runner: spark" in message


# spec, sharing, runner, workers, master, a fragment of the refusal (None: accepted)
PROVIDERS = [
    ("memory", "process", "local", 1, "", None),
    ("memory", "process", "local", 2, "", "topology.workers: 2 every worker"),
    ("sqlite", "machine", "local", 2, "", None),
    ("redis", "network", "local", 3, "", None),
    ("memory", "process", "spark", 1, "local[2]", "inside one Python process"),
    ("memory", "process", "spark", 1, "spark://h:7077", "inside one Python process"),
    ("sqlite", "machine", "spark", 1, "local[2,2]", None),
    ("sqlite", "machine", "spark", 1, "local", None),
    ("sqlite", "machine", "spark", 1, "spark://h:7077", "a store on one machine"),
    ("sqlite", "machine", "spark", 1, "yarn", "a store on one machine"),
    ("redis", "network", "spark", 1, "spark://h:7077", None),
]


@pytest.mark.parametrize(("spec", "sharing", "runner", "workers", "master", "fragment"), PROVIDERS)
def test_provider_refusal(
    spec: str, sharing: str, runner: str, workers: int, master: str, fragment: str | None
) -> None:
    refusal = provider_refusal(spec, sharing, runner=runner, workers=workers, master=master)
    if fragment is None:
        assert refusal is None
    else:
        assert refusal is not None
        assert fragment in refusal
        assert repr(spec) in refusal


def test_the_provider_refusal_names_the_master_on_spark() -> None:
    refusal = provider_refusal("sqlite", "machine", runner="spark", master="yarn")
    assert refusal is not None and "spark.master 'yarn'" in refusal


def test_check_refusals_raises_the_first() -> None:
    check_refusals(_stateful(), Config({}))
    conf = Config({"topology.workers": 2, "topology.acker.executors": 0})
    with pytest.raises(ConfigError, match="keeps state inside one process"):
        check_refusals(_stateful(), conf)


def test_make_runtime_refuses_before_it_builds_a_runtime() -> None:
    with pytest.raises(ConfigError, match="need acking"):
        make_runtime(_stateful(), Config({"topology.acker.executors": 0}))
