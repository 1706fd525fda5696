"""Loading topologies and running them on the configured runtime."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from ._clock import Clock
from ._errors import TopologyError
from ._results import RunResult
from ._topology import Topology
from ._user_code import user_code
from .runtime.contract import make_runtime
from .runtime.plan import as_config

__all__ = ["as_config", "load_topology", "make_runtime", "run"]


def _import_path(path: Path) -> Any:
    name = path.stem
    module_name = f"statestream_user_{name}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TopologyError(f"cannot import {str(path)!r}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # The file's directory goes on sys.path so that it can import its siblings.
    sys.path.insert(0, str(path.parent.resolve()))
    with user_code(f"topology file {str(path)!r}", path):
        spec.loader.exec_module(module)
    # Executors (Spark) cannot import a module loaded from a path, so its
    # classes travel by value.
    cloudpickle.register_pickle_by_value(module)
    return module


def load_topology(target: str) -> Topology:
    """The topology named by ``target``: ``path/to/file.py[:attr]`` or ``package.module:attr``.

    ``attr`` (default ``topology``) is a :class:`Topology` or a function of no
    arguments returning one.
    """
    spec, _, attr = target.partition(":")
    if spec.endswith(".py") or "/" in spec:
        path = Path(spec)
        if not path.is_file():
            raise TopologyError(f"topology file {spec!r} does not exist")
        module = _import_path(path)
        what, main = f"topology file {spec!r}", path
    else:
        if not attr:
            raise TopologyError(
                f"{target!r} is neither a .py file nor 'module:attribute'; "
                "e.g. examples/wordcount.py or mypkg.flows:topology"
            )
        # A module's frames are named with their file, the module's own included.
        what, main = f"topology module {spec!r}", None
        with user_code(what):
            module = importlib.import_module(spec)
    attr = attr or "topology"
    obj = getattr(module, attr, None)
    if obj is None:
        found = [k for k, v in vars(module).items() if isinstance(v, Topology)]
        hint = f"; it has the topologies {found}" if found else ""
        raise TopologyError(f"{target!r} has no attribute {attr!r}{hint}")
    if callable(obj) and not isinstance(obj, Topology):
        with user_code(what, main):
            obj = obj()
    if not isinstance(obj, Topology):
        raise TopologyError(
            f"{target!r} gave a {type(obj).__name__}, not a Topology; return "
            "TopologyBuilder(...).build()"
        )
    return obj


def run(
    topology: Topology,
    config: Mapping[str, Any] | None = None,
    *,
    until_idle: bool = False,
    duration: float | None = None,
    clock: Clock | None = None,
) -> RunResult:
    """Run ``topology`` on the runtime ``topology.runner`` names; return its RunResult."""
    conf = as_config(config, (topology.name,))
    return make_runtime(topology, conf, clock=clock).run(until_idle=until_idle, duration=duration)

