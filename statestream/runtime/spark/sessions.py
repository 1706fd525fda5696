"""The driver's Spark session and what travels to the executors with each run.

:class:`SparkSessions` finds or builds the SparkSession a run uses (and
stops the one it built); :class:`ShippedModules` makes the user's modules
travel by value and lets them go after the run; :func:`broadcast_plan` is
the broadcast every task of a run unpickles once per worker.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import cloudpickle

from ..._clock import Clock, SystemClock
from ..._config import Config, settings_of
from ..._errors import ConfigError
from ..._runners import SparkSettings
from ..._topology import Topology
from ..plan import RuntimePlan
from .config import SPARK_DEFAULTS, ship_user_modules, spark_conf, task_tries
from .executor import Shipped
from .status import STATUS, session_started, session_starting


class SparkSessions:
    """The SparkSession of a run: the one given, else the active one, else one
    built from the config's ``spark.*`` keys (that one is stopped by :meth:`release`;
    building it is said on :data:`.status.STATUS`, timed on ``clock``)."""

    def __init__(
        self, app_name: str, config: Config, spark: Any = None, *, clock: Clock | None = None
    ) -> None:
        self._app_name = app_name
        self._config = config
        self._spark = spark
        self._own = False
        self._clock = clock or SystemClock()

    @property
    def master(self) -> str:
        """The session's master, or the configured ``spark.master`` before there is one."""
        if self._spark is not None:
            return str(self._spark.sparkContext.master)
        return settings_of(self._config, SparkSettings).spark_master

    def adopt(self, spark: Any) -> None:
        """Use ``spark`` (a streaming DataFrame's session), not stopped by this runtime."""
        self._spark = spark

    def session(self) -> Any:
        if self._spark is not None:
            return self._spark
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        try:
            from pyspark.sql import SparkSession
        except ImportError as exc:
            raise ConfigError(
                "the spark runtime needs PySpark: pip install 'statestream[spark]'"
            ) from exc
        active = SparkSession.getActiveSession()
        if active is not None:
            self._spark = active
            return active
        builder = SparkSession.builder.appName(self._app_name)
        for key, value in {**SPARK_DEFAULTS, **spark_conf(self._config)}.items():
            builder = builder.config(
                key, str(value).lower() if isinstance(value, bool) else str(value)
            )
        master = settings_of(self._config, SparkSettings).spark_master
        STATUS.info(session_starting(master))
        began = self._clock.monotonic()
        self._spark = builder.getOrCreate()
        sc = self._spark.sparkContext
        sc.setLogLevel("ERROR")
        took = self._clock.monotonic() - began
        STATUS.info(session_started(str(sc.master), int(sc.defaultParallelism), took))
        self._own = True
        return self._spark

    def release(self) -> None:
        """The end of a run: stop the session if this runtime built it."""
        if self._own and self._spark is not None:
            self._own = False
            spark, self._spark = self._spark, None
            spark.stop()


class ShippedModules:
    """The user's modules a topology needs, shipped by value (``ship_user_modules``),
    with their sources for the executors (see :func:`.executor._loads`)."""

    def __init__(self, topology: Topology) -> None:
        already = set(cloudpickle.list_registry_pickle_by_value())
        shipped = ship_user_modules(topology)
        #: Modules this runtime made travel by value, to be let go after the run.
        self._by_value = [name for name in shipped if name not in already]
        self.sources: dict[str, tuple[str, str]] = {}
        for name in shipped:
            path = getattr(sys.modules.get(name), "__file__", None)
            if path and path.endswith(".py") and os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    self.sources[name] = (path, f.read())

    def release(self) -> None:
        """Stop shipping this runtime's modules by value (idempotent).

        Shipping by value is process-wide in cloudpickle: left on, it would
        make every later copy of these classes in this process (a local
        runtime's per-task copies, say) copy their module's globals too.
        """
        for name in self._by_value:
            module = sys.modules.get(name)
            if module is not None:
                cloudpickle.unregister_pickle_by_value(module)
        self._by_value = []


def broadcast_plan(
    sc: Any, plan: RuntimePlan, sources: dict[str, tuple[str, str]], exactly_once: bool
) -> Any:
    """The broadcast executors unpickle once per worker: the plan, and the
    sources of the user modules it travels with (see :func:`.executor._loads`)."""
    data = cloudpickle.dumps(Shipped(plan, exactly_once, task_tries(sc)))
    return sc.broadcast((sources, data))
