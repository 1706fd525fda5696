"""Loading topologies and running them on the configured runtime."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import cloudpickle

from ._clock import Clock
from ._config import Config, settings_of
from ._errors import TopologyError
from ._results import RunResult
from ._topology import Topology
from ._user_code import user_code
from .runtime.contract import Runtime, make_runtime
from .runtime.plan import as_config

__all__ = ["as_config", "live_view", "load_topology", "make_runtime", "run"]


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


def _module_found(name: str) -> bool:
    """Whether ``name`` is an importable module (its parent packages are imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):  # a parent package is missing; not a name ('.x')
        return False


def load_topology(target: str) -> Topology:
    """The topology named by ``target``: ``path/to/file.py[:attr]`` or
    ``package.module[:attr]`` (an installed module, such as
    ``statestream.examples.wordcount``).

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
        # A module's frames are named with their file, the module's own included.
        what, main = f"topology module {spec!r}", None
        with user_code(what):
            if not _module_found(spec):
                raise TopologyError(
                    f"{target!r} is neither a .py file nor an importable module; e.g. "
                    "examples/wordcount.py, statestream.examples.wordcount or "
                    "mypkg.flows:topology"
                )
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


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def live_view(
    runtime: Runtime, topology: Topology, conf: Config, say: Callable[[str], None] = _say
) -> AbstractContextManager[object]:
    """The live view of ``runtime``'s run where ``topology.ui`` asks for one (``--ui``,
    ``run(ui=...)``): bound, its URL said through ``say`` (stderr by default), to
    be entered around ``runtime.run``; a context that does nothing otherwise.

    Call it after ``runtime.open()``, so that a run refused at open binds no port.
    Raises ConfigError (naming the address) if the address cannot be bound.
    """
    address = settings_of(conf).topology_ui
    if address is None:
        return nullcontext()
    from ._ui.source import live_view as bind  # http.server only for a run that serves

    view = bind(runtime, topology, address)
    say(f"statestream: live view at {view.url}")
    return view


def run(
    topology: Topology,
    config: Mapping[str, Any] | None = None,
    *,
    until_idle: bool = False,
    duration: float | None = None,
    clock: Clock | None = None,
    ui: str | int | None = None,
) -> RunResult:
    """Run ``topology`` on the runtime ``topology.runner`` names; return its RunResult.

    ``ui`` (``PORT`` on 127.0.0.1 or ``HOST:PORT``; 0 picks a free port)
    serves the run's live view while it runs, as ``statestream run --ui``
    does, over ``topology.ui``; the URL is printed on stderr at start.
    """
    conf = as_config(config, (topology.name,))
    if ui is not None:
        conf = conf.with_overrides({"topology.ui": str(ui)})
    runtime = make_runtime(topology, conf, clock=clock)
    if settings_of(conf).topology_ui is None:
        return runtime.run(until_idle=until_idle, duration=duration)
    try:
        runtime.open()  # first, as the CLI does: a run refused at open serves nothing
        view = live_view(runtime, topology, conf)
    except BaseException:
        runtime.close()
        raise
    with view:
        return runtime.run(until_idle=until_idle, duration=duration)
