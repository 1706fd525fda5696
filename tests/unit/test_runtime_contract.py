"""Each built-in runtime class satisfies the :class:`Runtime` protocol, and the registry of
runners hands out the runtime the config names.

The protocol check is structural and starts nothing: each protocol method is
a method of the class with the protocol's parameters (names, kinds,
defaults), and ``deadletter_path`` is declared a :class:`~pathlib.Path`.
"""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

import pytest

from statestream import Config, ConfigError, TopologyBuilder, _runners
from statestream._clock import FakeClock
from statestream._results import RunResult, TaskMetrics, WorkerInfo
from statestream.runtime import builtin
from statestream.runtime.contract import (
    Capabilities,
    Runtime,
    make_runtime,
    register_runner,
    runners,
)
from statestream.testing import ListSpout

_METHODS = ("open", "run", "stop", "close", "metrics", "counters", "worker_rows")

_RUNTIMES = [
    pytest.param("statestream.runtime.local:LocalRuntime", id="local"),
    pytest.param("statestream.runtime.workers:WorkerSupervisor", id="workers"),
    pytest.param("statestream.runtime.spark:SparkRuntime", id="spark"),
]


def _class(path: str) -> type:
    module, _, name = path.partition(":")
    cls: type = getattr(importlib.import_module(module), name)
    return cls


def _parameters(function: Any) -> list[tuple[str, Any, Any]]:
    # Without self: a method compiled by mypyc makes it positional-only.
    params = list(inspect.signature(function).parameters.values())[1:]
    return [(p.name, p.kind, p.default) for p in params]


def _annotations(cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        found.update(inspect.get_annotations(klass) or _compiled_annotations(klass))
    return found


def _compiled_annotations(klass: type) -> dict[str, Any]:
    """A class compiled by mypyc keeps no annotations: read them from its source."""
    import ast

    from statestream import _core

    if klass.__module__ not in _core.COMPILED_MODULES:
        return {}
    tree = ast.parse(_core.source_path(klass.__module__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == klass.__name__:
            return {
                stmt.target.id: ast.unparse(stmt.annotation)
                for stmt in node.body
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
            }
    return {}


def _missing(cls: type) -> list[str]:
    """What of the protocol ``cls`` lacks or has in another shape."""
    problems = []
    for name in _METHODS:
        method = inspect.getattr_static(cls, name, None)
        if method is None or not callable(getattr(cls, name)):
            problems.append(f"{name}() is not a method")
            continue
        want = _parameters(getattr(Runtime, name))
        try:
            have = _parameters(getattr(cls, name))
        except ValueError:  # a compiled method without a signature: presence only
            continue
        if have != want:
            problems.append(f"{name}{inspect.signature(getattr(cls, name))} is not {name}{want}")
    annotation = _annotations(cls).get("deadletter_path")
    if annotation not in (Path, "Path"):
        problems.append(f"deadletter_path is declared {annotation!r}, not Path")
    return problems


def test_the_protocol_is_what_the_cli_calls() -> None:
    assert _annotations(Runtime)["deadletter_path"] in (Path, "Path")
    for name in _METHODS:
        assert (getattr(Runtime, name).__doc__ or "").strip(), f"{name} has no lifecycle docstring"


@pytest.mark.parametrize("path", _RUNTIMES)
def test_each_runtime_class_satisfies_the_protocol(path: str) -> None:
    assert _missing(_class(path)) == []


def test_a_class_lacking_a_method_is_found_out() -> None:
    class Partial:
        deadletter_path: Path

        def open(self) -> None: ...
        def run(self, until_idle: bool = False) -> RunResult: ...  # no duration
        def stop(self) -> None: ...
        def close(self) -> None: ...
        def metrics(self) -> dict[str, TaskMetrics]: ...
        def worker_rows(self) -> list[WorkerInfo]: ...

    problems = _missing(Partial)
    assert len(problems) == 2
    assert problems[0].startswith("run(")
    assert problems[1] == "counters() is not a method"


def _topology() -> Any:
    builder = TopologyBuilder("contract")
    builder.set_spout("words", ListSpout(["a", "b"], fields=["word"]))
    return builder.build()


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry of runners as it is, restored after the test."""
    monkeypatch.setattr(_runners, "_RUNNERS", dict(_runners._RUNNERS))


def test_the_built_in_runners_are_registered() -> None:
    assert runners()[:2] == ("local", "spark")
    assert _runners.runner("local").capabilities == _runners.LOCAL
    assert _runners.runner("spark").capabilities == _runners.SPARK


def test_a_third_party_runner_gets_the_capabilities_of_one_process(registry: None) -> None:
    entry = register_runner("flink", "flink_runner:make")
    assert entry.capabilities == Capabilities()
    assert entry.capabilities.replay == "tuple" and entry.capabilities.acks_per_tuple
    assert not entry.capabilities.worker_processes
    assert entry.capabilities.store_refusal is None


def test_a_batch_replay_that_cannot_rewind_is_no_capability() -> None:
    with pytest.raises(ValueError, match="rewinds within a run"):
        Capabilities(replay="batch", rewinds_within_run=False)


def test_an_unregistered_runner_is_a_config_error_naming_the_registered() -> None:
    with pytest.raises(ConfigError, match=r"'flink'.*registered: 'local', 'spark'"):
        _runners.runner("flink")


def test_a_factory_named_by_dotted_path_is_imported_at_the_first_run(registry: None) -> None:
    register_runner("local", "statestream.runtime.builtin:local")
    assert make_runtime(_topology(), Config({})).worker_rows() == []


def test_the_spark_factory_passes_the_clock_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import statestream.runtime.spark as spark

    made: list[Any] = []
    monkeypatch.setattr(spark, "SparkRuntime", lambda t, c, clock: made.append(clock))
    clock = FakeClock()
    builtin.spark(_topology(), Config({"topology.runner": "spark"}), clock)
    assert made == [clock]


def test_a_registered_runner_makes_the_runtime(registry: None) -> None:
    made: list[tuple[Any, Config, Any]] = []
    sentinel: Any = object()

    def factory(topology: Any, config: Config, clock: Any) -> Runtime:
        made.append((topology, config, clock))
        return sentinel  # type: ignore[no-any-return]

    register_runner("local", factory, _runners.LOCAL)
    topo, conf, clock = _topology(), Config({}), object()
    assert make_runtime(topo, conf, clock=clock) is sentinel  # type: ignore[arg-type]
    assert made == [(topo, conf, clock)]


def test_a_runner_registered_later_replaces_the_earlier(registry: None) -> None:
    first: Any = object()
    second: Any = object()
    register_runner("local", lambda t, c, k: first)
    register_runner("local", lambda t, c, k: second)
    assert make_runtime(_topology(), Config({})) is second


def test_spark_with_workers_is_refused_before_spark_is_imported() -> None:
    with pytest.raises(ConfigError, match=r"spark\.executor\.instances"):
        make_runtime(_topology(), Config({"topology.runner": "spark", "topology.workers": 2}))


def test_the_local_runner_picks_one_process_or_the_supervisor() -> None:
    from statestream.runtime.workers import WorkerSupervisor

    one = make_runtime(_topology(), Config({}))
    assert not isinstance(one, WorkerSupervisor)
    assert isinstance(one.deadletter_path, Path)
    assert one.worker_rows() == []
    several = make_runtime(_topology(), Config({"topology.workers": 2}))
    assert isinstance(several, WorkerSupervisor)


def test_a_registered_runner_passes_the_config_validation(registry: None) -> None:
    with pytest.raises(ConfigError, match="registered: 'local', 'spark'"):
        Config({"topology.runner": "flink"})
    register_runner("flink", lambda t, c, k: None)  # type: ignore[arg-type,return-value]
    assert Config({"topology.runner": "flink"}).settings.topology_runner == "flink"
