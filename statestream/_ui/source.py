"""What the live view shows of a run: the one adapter between the runtime and the server.

:func:`renderer` returns the function the server's publisher calls about once
a second; it is the only place that reads the runtime, through the
:class:`~statestream.runtime.contract.Runtime` contract: one
``metrics_snapshot()``, rendered as ``/api/v1/topology`` and ``/metrics`` by
:mod:`statestream.runtime.metrics_export`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..runtime.metrics_export import api_json, prometheus_text
from .server import LiveView, Renderer, parse_address

if TYPE_CHECKING:
    from .._topology import Topology
    from ..runtime.contract import Runtime

__all__ = ["live_view", "renderer"]


def renderer(runtime: Runtime, topology: Topology) -> Renderer:
    """The bodies of ``/api/v1/topology`` and ``/metrics`` for ``runtime``'s run, on each call."""

    def render() -> tuple[bytes, bytes]:
        snapshot = runtime.metrics_snapshot()
        return api_json(snapshot, topology), prometheus_text(snapshot)

    return render


def live_view(runtime: Runtime, topology: Topology, address: str | int) -> LiveView:
    """The live view of ``runtime``'s run at ``address`` (``topology.ui``: ``PORT`` on
    loopback or ``HOST:PORT``), bound and ready to enter."""
    return LiveView(parse_address(address, "topology.ui"), renderer(runtime, topology))
