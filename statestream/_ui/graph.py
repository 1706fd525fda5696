"""A topology as a graph: nodes and edges, and the same graph as DOT or Mermaid text.

:func:`topology_graph` is the one place that turns a :class:`Topology` into
what is drawn: ``statestream topology FILE --format dot|mermaid`` prints it
and the live view's page (``statestream run --ui``) draws it from the
``graph`` of ``/api/v1/topology``. It is pure (no I/O) and table-tested.

The system's own components and streams (``$checkpointspout``, ``$checkpoint``,
``__ack``...) are left out: they wire every bolt to the checkpoint spout and
would hide the user's topology; the page's checkpoint strip shows them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .._topology import RESERVED_PREFIXES, Topology
from .._tuple import DEFAULT_STREAM

__all__ = ["Edge", "Graph", "Node", "graph_dict", "to_dot", "to_mermaid", "topology_graph"]


@dataclass(frozen=True)
class Node:
    """One component: ``kind`` is ``spout``, ``bolt`` or ``stateful bolt``; ``layer`` its
    column in a left-to-right drawing (0 for spouts; one more than its furthest source)."""

    id: str
    kind: str
    cls: str
    parallelism: int
    layer: int


@dataclass(frozen=True)
class Edge:
    """One subscription: ``target`` reads ``stream`` of ``source`` routed by ``grouping``
    (as :meth:`Grouping.describe` says it: ``shuffle``, ``fields['word']``...)."""

    source: str
    target: str
    stream: str
    grouping: str


@dataclass(frozen=True)
class Graph:
    """A topology's components (in declaration order) and its subscriptions."""

    name: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]


def _system(name: str) -> bool:
    return name.startswith(RESERVED_PREFIXES)


def _layers(ids: list[str], edges: list[Edge]) -> dict[str, int]:
    """Longest path from a node without inputs, so every edge goes rightwards; on a cycle
    (a bolt feeding back upstream) the back edge is ignored by bounding the passes."""
    layer = dict.fromkeys(ids, 0)
    for _ in range(len(ids)):
        moved = False
        for e in edges:
            if e.source != e.target and layer[e.target] < layer[e.source] + 1 <= len(ids):
                layer[e.target] = layer[e.source] + 1
                moved = True
        if not moved:
            break
    return layer


def topology_graph(topology: Topology) -> Graph:
    """The user's components and subscriptions of ``topology``, laid out in layers."""
    specs = [s for s in topology.components.values() if not _system(s.id)]
    ids = [s.id for s in specs]
    edges = [
        Edge(sub.source, spec.id, sub.stream, sub.grouping.describe())
        for spec in specs
        for sub in spec.inputs
        if not _system(sub.source) and not _system(sub.stream)
    ]
    layer = _layers(ids, edges)
    nodes = tuple(
        Node(
            id=s.id,
            kind="spout" if s.is_spout else ("stateful bolt" if s.is_stateful else "bolt"),
            cls=type(s.user_obj).__name__,
            parallelism=s.parallelism,
            layer=layer[s.id],
        )
        for s in specs
    )
    return Graph(topology.name, nodes, tuple(edges))


def graph_dict(graph: Graph) -> dict[str, object]:
    """The graph as JSON-ready data: ``{"name", "nodes": [...], "edges": [...]}``."""
    return {
        "name": graph.name,
        "nodes": [asdict(n) for n in graph.nodes],
        "edges": [asdict(e) for e in graph.edges],
    }


def _edge_label(e: Edge) -> str:
    return e.grouping if e.stream == DEFAULT_STREAM else f"{e.stream}: {e.grouping}"


def to_dot(graph: Graph) -> str:
    """Graphviz DOT, left to right: spouts as ellipses, bolts as boxes (stateful: double)."""
    q = json.dumps  # a JSON string is a valid DOT quoted string
    lines = [f"digraph {q(graph.name)} {{", "  rankdir=LR;"]
    for n in graph.nodes:
        shape = "ellipse" if n.kind == "spout" else "box"
        extra = ", peripheries=2" if n.kind == "stateful bolt" else ""
        label = f"{n.id}\\n{n.cls} x{n.parallelism}"
        lines.append(f'  {q(n.id)} [shape={shape}{extra}, label="{_dot_escape(label)}"];')
    for e in graph.edges:
        lines.append(f"  {q(e.source)} -> {q(e.target)} [label={q(_edge_label(e))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _dot_escape(text: str) -> str:
    # Keeps the \n line breaks of a DOT label; escapes the quotes of a user's id.
    return text.replace('"', '\\"')


def to_mermaid(graph: Graph) -> str:
    """A Mermaid flowchart, left to right: spouts as stadiums, bolts as boxes (stateful:
    subroutine boxes). Ids become ``n0``, ``n1``... since Mermaid ids allow few characters."""
    key = {n.id: f"n{i}" for i, n in enumerate(graph.nodes)}

    def text(s: str) -> str:
        return '"' + s.replace('"', "#quot;") + '"'

    lines = ["flowchart LR"]
    for n in graph.nodes:
        label = text(f"{n.id}<br/>{n.cls} x{n.parallelism}")
        if n.kind == "spout":
            shape = f"([{label}])"
        elif n.kind == "stateful bolt":
            shape = f"[[{label}]]"
        else:
            shape = f"[{label}]"
        lines.append(f"  {key[n.id]}{shape}")
    for e in graph.edges:
        lines.append(f"  {key[e.source]} -->|{text(_edge_label(e))}| {key[e.target]}")
    return "\n".join(lines) + "\n"
