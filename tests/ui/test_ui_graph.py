"""The topology graph (statestream/_ui/graph.py): one pure function turns a Topology
into nodes and edges; `statestream topology --format dot|mermaid` prints it and
the live view's page draws it. Table-tested: each topology shape and what it gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from statestream import BasicBolt, StatefulBolt, TopologyBuilder
from statestream._topology import Topology
from statestream._ui.graph import Edge, Node, graph_dict, to_dot, to_mermaid, topology_graph
from statestream.testing import ListSpout


class Echo(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:
        collector.emit([tuple[0]])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(["word"])
        declarer.declare_stream("errors", ["word"])


class Keep(StatefulBolt):
    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:
        self.collector.ack(tuple)


def _line() -> Topology:
    b = TopologyBuilder("line")
    b.set_spout("in", ListSpout([1]))
    b.set_bolt("a", Echo(), 2).shuffle_grouping("in")
    return b.build()


def _diamond() -> Topology:
    # in -> a -> c and in -> c: c sits one column right of a (the longest path).
    b = TopologyBuilder("diamond")
    b.set_spout("in", ListSpout([1], ["word"]))
    b.set_bolt("a", Echo()).fields_grouping("in", ["word"])
    b.set_bolt("c", Echo(), 3).global_grouping("a").all_grouping("in")
    return b.build()


def _stateful_streams() -> Topology:
    # A stateful topology: the checkpoint spout and its streams stay out of the graph.
    b = TopologyBuilder("st")
    b.set_spout("in", ListSpout([1]))
    b.set_bolt("e", Echo()).shuffle_grouping("in")
    b.set_bolt("k", Keep(), 2).fields_grouping("e", ["word"]).shuffle_grouping("e", "errors")
    return b.build()


CASES: dict[str, tuple[Callable[[], Topology], list[Node], list[Edge]]] = {
    "line": (
        _line,
        [Node("in", "spout", "ListSpout", 1, 0), Node("a", "bolt", "Echo", 2, 1)],
        [Edge("in", "a", "default", "shuffle")],
    ),
    "diamond": (
        _diamond,
        [
            Node("in", "spout", "ListSpout", 1, 0),
            Node("a", "bolt", "Echo", 1, 1),
            Node("c", "bolt", "Echo", 3, 2),
        ],
        [
            Edge("in", "a", "default", "fields['word']"),
            Edge("a", "c", "default", "global"),
            Edge("in", "c", "default", "all"),
        ],
    ),
    "stateful, two streams": (
        _stateful_streams,
        [
            Node("in", "spout", "ListSpout", 1, 0),
            Node("e", "bolt", "Echo", 1, 1),
            Node("k", "stateful bolt", "Keep", 2, 2),
        ],
        [
            Edge("in", "e", "default", "shuffle"),
            Edge("e", "k", "default", "fields['word']"),
            Edge("e", "k", "errors", "shuffle"),
        ],
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_topology_graph_gives_the_users_components_and_subscriptions_in_layers(case: str) -> None:
    build, nodes, edges = CASES[case]
    graph = topology_graph(build())
    assert list(graph.nodes) == nodes
    assert list(graph.edges) == edges


def test_the_stateful_topology_has_system_components_the_graph_leaves_out() -> None:
    topology = _stateful_streams()
    assert any(cid.startswith("$") for cid in topology.components)  # so the case means something
    assert all(not n.id.startswith("$") for n in topology_graph(topology).nodes)


def test_dot_draws_every_node_and_edge_left_to_right() -> None:
    dot = to_dot(topology_graph(_stateful_streams()))
    assert dot.startswith('digraph "st" {\n  rankdir=LR;\n')
    assert '  "in" [shape=ellipse, label="in\\nListSpout x1"];' in dot
    assert '  "k" [shape=box, peripheries=2, label="k\\nKeep x2"];' in dot
    assert '  "e" -> "k" [label="fields[\'word\']"];' in dot
    assert '  "e" -> "k" [label="errors: shuffle"];' in dot
    assert dot.endswith("}\n")


def test_mermaid_draws_every_node_and_edge_with_safe_ids() -> None:
    text = to_mermaid(topology_graph(_stateful_streams()))
    assert text.splitlines() == [
        "flowchart LR",
        '  n0(["in<br/>ListSpout x1"])',
        '  n1["e<br/>Echo x1"]',
        '  n2[["k<br/>Keep x2"]]',
        '  n0 -->|"shuffle"| n1',
        "  n1 -->|\"fields['word']\"| n2",
        '  n1 -->|"errors: shuffle"| n2',
    ]


def test_a_quote_in_an_id_cannot_break_out_of_the_dot_or_mermaid_label() -> None:
    b = TopologyBuilder("q")
    b.set_spout('say"hi', ListSpout([1]))
    graph = topology_graph(b.build())
    assert '"say\\"hi" [shape=ellipse, label="say\\"hi\\nListSpout x1"];' in to_dot(graph)
    assert 'n0(["say#quot;hi<br/>ListSpout x1"])' in to_mermaid(graph)


def test_graph_dict_is_what_the_page_reads() -> None:
    data = graph_dict(topology_graph(_line()))
    assert data == {
        "name": "line",
        "nodes": [
            {"id": "in", "kind": "spout", "cls": "ListSpout", "parallelism": 1, "layer": 0},
            {"id": "a", "kind": "bolt", "cls": "Echo", "parallelism": 2, "layer": 1},
        ],
        "edges": [{"source": "in", "target": "a", "stream": "default", "grouping": "shuffle"}],
    }
