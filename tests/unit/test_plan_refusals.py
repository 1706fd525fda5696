"""The refusals every runtime shares, decided once in :mod:`statestream.runtime.plan`.

Tables of (topology, config) -> the refusal, and of (provider sharing, runner,
workers, master) -> the provider refusal; :func:`make_runtime` raises the
first refusal before it builds a runtime. What is refused follows the
runner's capabilities, not its name: runners registered here with other
capabilities get other refusals.
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
    _runners,
)
from statestream._runners import Capabilities, Runner, register_runner, runner
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


LOCAL, SPARK = runner("local"), runner("spark")

# spec, sharing, runner, workers, master, a fragment of the refusal (None: accepted)
PROVIDERS: list[tuple[str, str, Runner, int, str, str | None]] = [
    ("memory", "process", LOCAL, 1, "", None),
    ("memory", "process", LOCAL, 2, "", "topology.workers: 2 every worker"),
    ("sqlite", "machine", LOCAL, 2, "", None),
    ("redis", "network", LOCAL, 3, "", None),
    ("memory", "process", SPARK, 1, "local[2]", "inside one Python process"),
    ("memory", "process", SPARK, 1, "spark://h:7077", "inside one Python process"),
    ("sqlite", "machine", SPARK, 1, "local[2,2]", None),
    ("sqlite", "machine", SPARK, 1, "local", None),
    ("sqlite", "machine", SPARK, 1, "spark://h:7077", "a store on one machine"),
    ("sqlite", "machine", SPARK, 1, "yarn", "a store on one machine"),
    ("redis", "network", SPARK, 1, "spark://h:7077", None),
    # a runner that declares no store refusal takes any provider
    ("memory", "process", Runner("any", "nowhere:make", Capabilities()), 3, "", None),
]


@pytest.mark.parametrize(("spec", "sharing", "runner", "workers", "master", "fragment"), PROVIDERS)
def test_provider_refusal(
    spec: str, sharing: str, runner: Runner, workers: int, master: str, fragment: str | None
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


def test_the_provider_refusal_looks_a_runner_name_up() -> None:
    assert provider_refusal("memory", "process", runner="spark") == provider_refusal(
        "memory", "process", runner=SPARK
    )


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry of runners as it is, restored after the test."""
    monkeypatch.setattr(_runners, "_RUNNERS", dict(_runners._RUNNERS))


def _own_refusal(topology: Topology, settings: Any) -> str | None:
    return f"no {topology.name!r} here" if topology.has_stateful_bolts else None


# capabilities of a runner named "other", topology, config, the refusals (fragments, in order)
CAPABILITIES = [
    # one process, per-tuple acks (the defaults): workers refused with the default advice
    (Capabilities(), _plain, {"topology.workers": 2}, ["remove topology.workers"]),
    (Capabilities(), _stateful, {"topology.acker.executors": 0}, [ACKERS]),
    # no per-tuple acking: a stateful topology without ackers is its business
    (Capabilities(acks_per_tuple=False), _stateful, {"topology.acker.executors": 0}, []),
    # worker processes without a store refusal: any provider, transactional refused
    (Capabilities(worker_processes=True), _stateful, {"topology.workers": 2}, []),
    (
        Capabilities(worker_processes=True),
        _transactional,
        {"topology.workers": 2},
        [TRANSACTIONAL_ON_WORKERS],
    ),
    (
        Capabilities(worker_processes=True, transactional_on_workers=True),
        _transactional,
        {"topology.workers": 2},
        [],
    ),
    # its own refusals come after the shared ones
    (
        Capabilities(refusals=(_own_refusal,)),
        _stateful,
        {"topology.acker.executors": 0},
        [ACKERS, "no 'counts' here"],
    ),
    (Capabilities(refusals=(_own_refusal,)), _plain, {}, []),
]


@pytest.mark.parametrize(("capabilities", "topology", "config", "expected"), CAPABILITIES)
def test_the_refusals_follow_the_capabilities(
    registry: None,
    capabilities: Capabilities,
    topology: Any,
    config: dict[str, Any],
    expected: list[str],
) -> None:
    register_runner("other", "nowhere:make", capabilities)
    found = refusals(topology(), Config({**config, "topology.runner": "other"}))
    assert len(found) == len(expected), found
    for message, fragment in zip(found, expected, strict=True):
        assert fragment in message
    if "topology.workers" in config and not capabilities.worker_processes:
        assert found[0].startswith("topology.workers is 2, but the other runner does not")


def test_a_runner_registered_as_local_with_other_capabilities_is_refused_as_they_say(
    registry: None,
) -> None:
    register_runner("local", "nowhere:make", Capabilities(acks_per_tuple=False))
    assert refusals(_stateful(), Config({"topology.acker.executors": 0})) == []
    [message] = refusals(_plain(), Config({"topology.workers": 2}))
    assert "the local runner does not start worker processes" in message
