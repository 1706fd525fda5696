"""What the live view shows of a run: the one adapter between the runtime and the server.

:func:`renderer` returns the function the server's publisher calls about once
a second; it is the only place that reads the runtime, through the
:class:`~statestream.runtime.contract.Runtime` contract.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson

from .graph import graph_dict, topology_graph
from .server import LiveView, Renderer, parse_address

if TYPE_CHECKING:
    from .._topology import Topology
    from ..runtime.contract import Runtime

__all__ = ["live_view", "renderer"]

_COUNTS = ("emitted", "executed", "acked", "failed", "errors", "queued", "retrying", "dead_lettered")


def _api(runtime: Runtime, topology: Topology, graph: dict[str, object], started: float) -> dict[str, Any]:
    components = [
        {"id": cid, **{k: getattr(m, k) for k in _COUNTS}, "last_error": m.last_error}
        for cid, m in runtime.metrics().items()
    ]
    workers = [
        {"index": w.index, "pid": w.pid, "tasks": w.tasks, "executed": w.executed,
         "rate": w.rate, "restarts": w.restarts}
        for w in runtime.worker_rows()
    ]
    return {
        "topology": topology.name,
        "elapsed": time.monotonic() - started,
        "graph": graph,
        "components": components,
        "counters": runtime.counters(),
        "workers": workers,
        "checkpoints": [],
        "progress": [],
    }


def _prometheus(api: dict[str, Any]) -> bytes:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    name = api["topology"]

    class Collector:
        def collect(self) -> Any:
            for key in ("emitted", "executed", "acked", "failed"):
                fam = CounterMetricFamily(
                    f"statestream_tuples_{key}", f"Tuples {key} per component.",
                    labels=["topology", "component"],
                )
                for c in api["components"]:
                    fam.add_metric([name, c["id"]], c[key])
                yield fam
            queued = GaugeMetricFamily(
                "statestream_queued_tuples", "Tuples waiting in a component's queues.",
                labels=["topology", "component"],
            )
            for c in api["components"]:
                queued.add_metric([name, c["id"]], c["queued"])
            yield queued

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return generate_latest(registry)


def renderer(runtime: Runtime, topology: Topology) -> Renderer:
    """The bodies of ``/api/v1/topology`` and ``/metrics`` for ``runtime``'s run, on each call."""
    graph = graph_dict(topology_graph(topology))
    started = time.monotonic()

    def render() -> tuple[bytes, bytes]:
        api = _api(runtime, topology, graph, started)
        return orjson.dumps(api), _prometheus(api)

    return render


def live_view(runtime: Runtime, topology: Topology, address: str | int) -> LiveView:
    """The live view of ``runtime``'s run at ``address`` (``topology.ui``: ``PORT`` on
    loopback or ``HOST:PORT``), bound and ready to enter."""
    return LiveView(parse_address(address, "topology.ui"), renderer(runtime, topology))
