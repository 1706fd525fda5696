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

from statestream import Config, ConfigError, TopologyBuilder
from statestream._results import RunResult, TaskMetrics, WorkerInfo
from statestream.runtime import contract
from statestream.runtime.contract import Runtime, make_runtime, register_runner, runners
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


def test_the_built_in_runners_are_registered() -> None:
    assert runners()[:2] == ("local", "spark")


def test_a_registered_runner_makes_the_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[tuple[Any, Config, Any]] = []
    sentinel: Any = object()

    def factory(topology: Any, config: Config, clock: Any) -> Runtime:
        made.append((topology, config, clock))
        return sentinel  # type: ignore[no-any-return]

    monkeypatch.setitem(contract._RUNNERS, "local", factory)
    topo, conf, clock = _topology(), Config({}), object()
    assert make_runtime(topo, conf, clock=clock) is sentinel  # type: ignore[arg-type]
    assert made == [(topo, conf, clock)]


def test_a_runner_registered_later_replaces_the_earlier(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contract, "_RUNNERS", dict(contract._RUNNERS))
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


def test_a_registered_runner_passes_the_config_validation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ConfigError, match="registered: 'local', 'spark'"):
        Config({"topology.runner": "flink"})
    monkeypatch.setattr(contract, "_RUNNERS", dict(contract._RUNNERS))
    register_runner("flink", lambda t, c, k: None)  # type: ignore[arg-type,return-value]
    assert Config({"topology.runner": "flink"}).settings.topology_runner == "flink"
