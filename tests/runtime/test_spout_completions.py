"""A commit releases a whole checkpoint interval's acks at once: a spout task takes
their completions a bounded number per poll, so that no scheduler step (and, on
several workers, no peer waiting for this worker's round) stalls on all of them."""

from __future__ import annotations

from statestream import TopologyBuilder
from statestream.runtime.local import LocalRuntime
from statestream.runtime.local.spout import _COMPLETIONS_PER_POLL
from statestream.testing import ListSpout


def test_a_spout_takes_a_bounded_number_of_completions_per_poll() -> None:
    b = TopologyBuilder("completions")
    b.set_spout("src", ListSpout([]))
    rt = LocalRuntime(b.build(), {})
    rt.open()
    try:
        (spout,) = rt.data_spouts
        n = 2 * _COMPLETIONS_PER_POLL + 100
        spout.completions.extend((root, True) for root in range(1, n + 1))
        left = []
        while spout.completions:
            assert spout.poll(0), "a poll with completions left is busy"
            left.append(len(spout.completions))
        assert left == [n - _COMPLETIONS_PER_POLL, n - 2 * _COMPLETIONS_PER_POLL, 0]
        assert not spout.poll(0)
    finally:
        rt.close()
