"""The Spark runtime's settings and the checks made before a run starts.

The config keys of the runtime, the SparkSession defaults it builds a session
with, the refusals of a provider or of Spark settings that executors could
not share safely, and what makes the user's modules travel to executors.
Used by the driver only; nothing here runs inside a Spark task.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import cloudpickle

from ..._components import (
    task_namespace,
)
from ..._config import Config, settings_of
from ..._errors import ConfigError
from ..._stateful import CHECKPOINT_SPOUT
from ..._topology import Topology
from ..plan import provider_refusal
from .shared import unwrap

#: Config key: the most items one spout task contributes to one batch (defaults.yaml: 50,000).
BATCH_SIZE_KEY = "statestream.spark.batch.size"
#: Config key: how many times a failed batch is rolled back and run again (defaults.yaml: 3).
BATCH_ATTEMPTS_KEY = "statestream.spark.batch.attempts"
#: A tuple failed this many times in one task attempt fails the task.
MAX_TUPLE_FAILURES = 3

#: Where the driver keeps the checkpoint record (as the local checkpoint spout does).
CHECKPOINT_NAMESPACE = task_namespace(CHECKPOINT_SPOUT, 0)

SPARK_DEFAULTS: Mapping[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
}


# --------------------------------------------------------------------------- config checks


def check_provider(conf: Mapping[str, Any], master: str) -> None:
    """Refuse a provider that the executors of ``master`` cannot share (ConfigError).

    The provider declares how far it can be shared (``sharing``: ``process``,
    ``machine`` or ``network``; see :func:`statestream._registry.provider_sharing`);
    what the spark runner refuses of it is decided in the plan
    (:func:`~statestream.runtime.plan.provider_refusal`).
    """
    from ..._registry import provider_sharing

    spec = settings_of(conf).topology_state_provider
    refusal = provider_refusal(spec, provider_sharing(spec), runner="spark", master=master)
    if refusal:
        raise ConfigError(refusal)


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def _user_objects(obj: Any, depth: int = 4) -> Iterator[Any]:
    """``obj``, and the objects statestream's own components hold (the user's
    batch bolt inside the executor a transactional builder made, the user's
    spout inside the coordinator, custom groupings in routes)."""
    yield obj
    if depth == 0 or type(obj).__module__.partition(".")[0] != "statestream":
        return
    values: Iterable[Any]
    if isinstance(obj, dict):
        values = obj.values()
    elif isinstance(obj, (list, tuple)):
        values = obj
    else:
        values = getattr(obj, "__dict__", {}).values()
    for value in values:
        if value is not None and not isinstance(value, (str, bytes, int, float, bool)):
            yield from _user_objects(value, depth - 1)


def ship_user_modules(topology: Topology) -> list[str]:
    """Make the modules that define the topology's classes travel by value.

    Executors import what a pickle names; a module the driver imported from
    a path of its own (a script, a test directory, ``examples/``) is not
    importable there. Modules of installed distributions (under a
    site-packages directory) and statestream's own are left alone.
    """
    shipped = []
    objs: list[Any] = []
    for spec in topology.components.values():
        objs.extend(_user_objects(unwrap(spec.obj)))
        objs.extend(sub.grouping.custom for sub in spec.inputs if sub.grouping.custom is not None)
    for obj in objs:
        for cls in type(obj).__mro__:
            name = cls.__module__
            module = sys.modules.get(name)
            root = name.partition(".")[0]
            if module is None or root in ("builtins", "statestream", "statestream_providers"):
                continue
            path = getattr(module, "__file__", None) or ""
            if name == "__main__" or "site-packages" in path or "dist-packages" in path:
                continue
            if path.startswith(_STDLIB):
                continue  # typing (Generic), abc and friends: every Python has them
            if name not in shipped:
                cloudpickle.register_pickle_by_value(module)
                shipped.append(name)
    return shipped


def spark_conf(config: Config) -> dict[str, Any]:
    """Every ``spark.*`` key of ``config`` (``spark.master`` included) with its value, for
    the session's builder: the spark runner's pass-through root
    (:attr:`~statestream._runners.Capabilities.pass_through`)."""
    return config.topology_keys("spark")


def check_spark_conf(conf: Mapping[str, Any]) -> None:
    """Refuse Spark settings that break the one-writer-per-namespace rule."""
    speculation = conf.get("spark.speculation")
    if speculation is True or str(speculation).lower() == "true":
        raise ConfigError(
            "spark.speculation is true: a speculative copy of a bolt task would prepare "
            "the same state namespace as the original at the same time; set it to false"
        )


def task_tries(sc: Any) -> int:
    """How many times Spark runs a failing task before it fails the job: ``F`` of a
    ``local[N,F]`` master, 1 for ``local``/``local[N]``, else ``spark.task.maxFailures``."""
    master = str(sc.master)
    if master.startswith("local["):
        _, _, tries = master[len("local[") : -1].partition(",")
        return int(tries) if tries.strip().isdigit() else 1
    if master == "local":
        return 1
    return int(sc.getConf().get("spark.task.maxFailures", "4"))
