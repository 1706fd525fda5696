"""examples/pageviews.py with its windows limited to 50 tuples in memory (a minute
holds about 600 a task): a topology module for ``statestream run`` in
test_pageviews_spilled_kill.py."""

from __future__ import annotations

import sys
from pathlib import Path

from statestream import BaseWindowedBolt, Topology

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import pageviews

MAX_EVENTS_IN_MEMORY = 50


def topology() -> Topology:
    topo = pageviews.topology()
    bolt = topo.components["minutes"].user_obj
    bolt = getattr(bolt, "bolt", bolt)  # inside its WindowedBoltExecutor
    assert isinstance(bolt, BaseWindowedBolt)
    bolt.with_max_events_in_memory(MAX_EVENTS_IN_MEMORY)
    return topo
