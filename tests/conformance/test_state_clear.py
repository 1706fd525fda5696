"""Clearing a topology deletes everything it stored, on every provider, whatever its
keys are called (``statestream state clear``: ``clear_topology`` over the provider's
``stored_namespaces`` and ``drop_namespaces``).

The words counted are the names the framework and the providers use for their
own records: keys, namespaces, key suffixes, table names. A user's key may be
any of them and must live and die like any other key: a run, a clear, a rerun
counts every word exactly once. A stateful bolt that stores nothing (txids and
no entries) is cleared too, or the rerun's first checkpoint would be refused.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from word_bolts import Count, Split

from statestream import KeyValueState, StateError, StatefulBolt, TopologyBuilder, Tuple, run
from statestream._exactly_once import ACKED_KEY, CHECKPOINT_KEY, POSITIONS_KEY
from statestream._registry import SCOPE_SEPARATOR, clear_topology, stored_topologies
from statestream._rescale import JOURNAL_KEY, LAYOUT_NAMESPACE, PARALLELISM_KEY
from statestream._stateful import CHECKPOINT_SPOUT
from statestream._topology import Topology
from statestream._transactional.components import CoordinatorStore
from statestream.testing import committed_state
from statestream_providers.redis import claim_key, key_names

if TYPE_CHECKING:
    # 'conftest' names a module in several test folders: importing it at run
    # time takes whichever folder's pytest loaded first.
    from conftest import ProviderFactory

# Every name statestream or a provider keeps a record under, as a user's word.
INTERNAL_NAMES = sorted(
    {
        CHECKPOINT_KEY,
        POSITIONS_KEY,
        ACKED_KEY,
        "position",  # FileSpout's position, in its own namespace
        PARALLELISM_KEY,
        JOURNAL_KEY,
        CoordinatorStore.KEY,
        f"{CHECKPOINT_SPOUT}-0",
        LAYOUT_NAMESPACE,
        f"clearing{SCOPE_SEPARATOR}count-0",
        *key_names("count-0"),
        "$prepare",
        "$txid",
        "$claim",
        claim_key("clearing"),
        "commit",  # the fields of redis's txid hash
        "prepare",
        "statestream_entries",
        "statestream_log",
        "statestream_txids",
        "{",
        "}",
    }
)


class Quiet(StatefulBolt):
    """A stateful bolt that never stores a key: only txids of it are kept."""

    def init_state(self, state: KeyValueState) -> None:
        self.state = state

    def execute(self, tuple: Tuple) -> None:
        self.collector.ack(tuple)


def _topology(name: str, corpus: Path) -> Topology:
    from statestream import FileSpout

    b = TopologyBuilder(name)
    b.set_spout("lines", FileSpout(corpus))
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    b.set_bolt("quiet", Quiet()).fields_grouping("split", ["word"])
    return b.build()


def _config(factory: ProviderFactory) -> dict[str, Any]:
    return {
        "topology.state.provider": factory.spec,
        "topology.state.provider.config": dict(factory.config),
        # A checkpoint every few lines: txids well past 0 when the run ends.
        "topology.state.checkpoint.interval.ms": 1,
    }


def test_clear_deletes_every_key_whatever_its_name_and_the_rerun_counts_exactly(
    provider_factory: ProviderFactory, tmp_path: Path
) -> None:
    lines = [" ".join(INTERNAL_NAMES[i:] + INTERNAL_NAMES[:i]) for i in range(len(INTERNAL_NAMES))]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines * 5) + "\n")
    expected = dict(Counter(" ".join(lines * 5).split()))
    topology, other = _topology("clearing", corpus), _topology("kept", corpus)
    config = _config(provider_factory)

    run(topology, config, until_idle=True)
    run(other, config, until_idle=True)
    assert committed_state(topology, config, "count") == expected
    provider = provider_factory()
    stored = stored_topologies(provider.stored_namespaces())  # type: ignore[attr-defined]
    assert "quiet-0" in stored["clearing"], "a bolt that stores nothing keeps its txids"

    dropped = clear_topology(provider, "clearing")

    assert "clearing/quiet-0" in dropped and "clearing/$checkpointspout-0" in dropped
    left = stored_topologies(provider_factory().stored_namespaces())  # type: ignore[attr-defined]
    assert "clearing" not in left
    assert "clearing" not in stored_topologies(provider_factory().namespaces())
    assert left["kept"] == stored["kept"], "another topology of the store is untouched"
    assert committed_state(topology, config, "count") == {}

    run(topology, config, until_idle=True)
    assert committed_state(topology, config, "count") == expected
    assert committed_state(other, config, "count") == expected


def test_a_provider_that_cannot_delete_state_wholly_says_so(sdk_example: Any) -> None:
    from statestream._state import BackendStateProvider

    base = sdk_example.DictStateProvider

    class Older(base):  # type: ignore[misc, valid-type]
        """The SDK example as written before the optional deletion existed."""

        stored_namespaces = BackendStateProvider.stored_namespaces
        _drop = BackendStateProvider._drop

    provider = Older(store="older")
    state = provider.get_state("clearing/count-0")
    state.put("checkpoint", 1)
    state.commit()
    message = (
        "the dict state provider cannot delete state wholly (it has no stored_namespaces() "
        "and drop_namespaces(); see statestream.provider); delete its store instead, or "
        "run the topology under another name"
    )
    with pytest.raises(StateError) as info:
        clear_topology(provider, "clearing")
    assert str(info.value) == message
    with pytest.raises(StateError, match="cannot delete state wholly"):
        provider.drop_namespaces(["clearing/count-0"])
    assert dict(provider.get_state("clearing/count-0").items()) == {"checkpoint": 1}

    class ProtocolOnly:
        name = "bare"

    with pytest.raises(StateError, match="the bare state provider cannot delete"):
        clear_topology(ProtocolOnly(), "clearing")
    base.stores.pop("older", None)
