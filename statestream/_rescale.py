"""Rescale: keep every key's state when a stateful bolt's parallelism changes.

A stateful bolt's state lives in one namespace per task (``count-0``,
``count-1``...), and a fields grouping decides which task sees which key.
When the parallelism changes between runs (2 -> 3 tasks), each key must move
to the task the grouping now sends it to, or the new owner starts from zero
while the old value sits, unread, in the old task's namespace.

At every start, before any task opens, :func:`rescale_state` compares each
stateful bolt's parallelism with the one recorded in the topology's
``$layout`` namespace (or, in a store written before that record existed,
with the task namespaces found) and re-partitions the state of every bolt
whose parallelism changed:

1. Settle what the last run left in flight, as recovery would: a delta
   prepared for a txid the checkpoint record counts as committed is
   committed, any other is rolled back. The state is then the state of the
   checkpoint a recovery restores, on every task, even after a crash in the
   middle of a commit.
2. Move every key whose owner changed (:func:`owner`: the grouping's
   ``task_for_key``, or the bolt's own ``rescale_task`` hook) to its new
   task's namespace: put there and committed first, then deleted from the
   old one and committed. A crash in between leaves the key in both, with
   one value, and a journal in ``$layout`` says a re-partition was under
   way, so the next start re-partitions again (to whatever parallelism it
   has) and every copy lands with the key's owner. Keys that stay put are
   only read. A bolt whose state is kept per task rather than per key (a
   windowed bolt's windows) moves it itself first, through its
   ``rescale_tasks`` hook, and ``rescale_owns(key)`` names the keys it moved.

Entries move with ``commit()`` without a txid, which keeps each namespace's
txids: the checkpoint protocol continues at the next txid, and a namespace
new to the layout joins it as a bolt added to a running topology does.
The cost is a read of every entry of the rescaled bolt, and a write and a
delete of each one that moves (``bench/bench_rescale.py`` measures it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from ._components import task_namespace
from ._errors import ConfigError, StateError
from ._exactly_once import CheckpointRecord
from ._routing import task_for_key
from ._stateful import CHECKPOINT_SPOUT, CHECKPOINT_STREAM
from ._topology import ComponentSpec, Topology

__all__ = [
    "IMPORTING_KEY",
    "JOURNAL_KEY",
    "LAYOUT_NAMESPACE",
    "PARALLELISM_KEY",
    "RescaleReport",
    "check_import",
    "check_partitioned",
    "owner",
    "rescale_state",
    "settle",
]

log = logging.getLogger("statestream")

LAYOUT_NAMESPACE = "$layout"
"""The topology's record of its stateful bolts' parallelism (and a rescale in progress)."""

PARALLELISM_KEY = "parallelism"
"""``$layout``'s ``{stateful bolt: parallelism}``."""
JOURNAL_KEY = "rescaling"
"""``$layout``'s list of the bolts whose re-partition has not finished."""
IMPORTING_KEY = "importing"
"""``$layout``'s mark of an import under way (``statestream._savepoint``): written
first, deleted once the checkpoint record is in, so a store an import left
half-written is refused at start (:func:`check_import`)."""
_CHUNK = 20_000  # entries per direct commit: bounds the memory a move holds


@dataclass(frozen=True)
class RescaleReport:
    """One bolt's state moved from ``old`` tasks to ``new`` tasks."""

    component: str
    old: int
    new: int
    moved: int
    kept: int


def owner(spec: ComponentSpec, key: Any, n_tasks: int) -> int:
    """The task of ``spec`` (with ``n_tasks`` tasks) that owns state key ``key``.

    The bolt's ``rescale_task(key, n_tasks)`` decides if it has one; otherwise
    the fields grouping does: a key is the grouping field's value (one field)
    or the list of the fields' values (several), as a ``state.put(word, ...)``
    under ``fields_grouping(..., ["word"])`` is.
    """
    hook = getattr(spec.user_obj, "rescale_task", None)
    if hook is not None:
        task = hook(key, n_tasks)
        if type(task) is not int or not 0 <= task < n_tasks:
            raise ConfigError(
                f"bolt {spec.id!r}: rescale_task({key!r}, {n_tasks}) returned {task!r}; "
                f"it must return a task index 0..{n_tasks - 1}"
            )
        return task
    return task_for_key(key, n_tasks)


def check_partitioned(spec: ComponentSpec) -> None:
    """A bolt's state can be re-partitioned only if its keys follow its grouping."""
    if hasattr(spec.user_obj, "rescale_task"):
        return
    data = [s for s in spec.inputs if s.stream != CHECKPOINT_STREAM]
    if data and all(s.grouping.kind == "fields" for s in data):
        return
    kinds = sorted({s.grouping.describe() for s in data})
    raise ConfigError(
        f"stateful bolt {spec.id!r} changed parallelism, but its input is not only fields "
        f"grouped ({', '.join(kinds)}), so no rule says which task owns each stored key. "
        "Keep its previous parallelism, define rescale_task(key, n_tasks) on the bolt, or "
        "clear its state (statestream state clear)"
    )


def check_import(provider: Any, topology: str) -> None:
    """Raise StateError if an import into ``topology``'s (scoped) ``provider`` did not
    finish: its state is part of a savepoint, its checkpoint record maybe missing.
    The owner of every run asks at start (``runtime.session``)."""
    importing = provider.get_state(LAYOUT_NAMESPACE).get(IMPORTING_KEY)
    if importing is not None:
        where = importing.get("file", "?") if isinstance(importing, dict) else "?"
        raise StateError(
            f"the state of topology {topology!r} in this store is an import of {where} that "
            f"did not finish; import it again with `statestream state import {where} --force` "
            f"(it starts over), or delete it: `statestream state clear --topology {topology}`"
        )


def _check_same_topology(topology: Topology, recorded: dict[str, int]) -> None:
    """Refuse a store that holds another topology under this name.

    Components come and go between runs (a bolt added or renamed keeps the
    rest of the state), but when none of the stateful bolts the store
    recorded is a stateful bolt of this topology, nothing of it would be
    read: it is another topology that happens to share the name.
    """
    stateful = {cid for cid, s in topology.components.items() if s.is_stateful}
    if not recorded or not stateful or stateful & set(recorded):
        return
    raise ConfigError(
        f"the state store holds a topology named {topology.name!r} with the stateful bolts "
        f"{sorted(recorded)}, and this one has {sorted(stateful)}: none in common, so it is "
        "another topology under the same name. Give this one another name "
        "(TopologyBuilder(name)), or delete the stored one with "
        f"`statestream state clear --topology {topology.name}`"
    )


def _stored_tasks(namespaces: list[str], component: str) -> list[int]:
    tasks = []
    for ns in namespaces:
        name, _, task = ns.rpartition("-")
        if name == component and task.isdigit():
            tasks.append(int(task))
    return sorted(tasks)


def settle(provider: Any, namespaces: list[str]) -> None:
    """Finish or undo what was prepared, as a recovery would (step 1)."""
    record = CheckpointRecord.load(provider.get_state(task_namespace(CHECKPOINT_SPOUT, 0)))
    restored, _ = record.restore_point()
    for ns in namespaces:
        kv = provider.get_state(ns)
        prepared = kv.prepared_txid
        if prepared is not None and prepared <= restored:
            kv.commit(prepared)
        elif prepared is not None:
            kv.rollback()


def rescale_state(provider: Any, topology: Topology) -> list[RescaleReport]:
    """Re-partition the state of every stateful bolt whose parallelism changed.

    ``provider`` is the topology's (scoped) provider. Returns what moved;
    records the current parallelism either way. Idempotent, crash-safe.
    """
    layout_kv = provider.get_state(LAYOUT_NAMESPACE)
    recorded: dict[str, int] = dict(layout_kv.get(PARALLELISM_KEY) or {})
    unfinished: list[str] = list(layout_kv.get(JOURNAL_KEY) or [])
    _check_same_topology(topology, recorded)
    namespaces = provider.namespaces()
    reports = []
    for cid, spec in topology.components.items():
        if not spec.is_stateful:
            continue
        n = spec.parallelism
        stored = _stored_tasks(namespaces, cid)
        old = recorded.get(cid, max(stored, default=n - 1) + 1)
        if cid not in unfinished:
            if old == n and all(t < n for t in stored):
                continue
            check_partitioned(spec)
            layout_kv.put(JOURNAL_KEY, [*unfinished, cid])
            layout_kv.commit()
        reports.append(_repartition(provider, topology, spec, stored, old))
    current = {cid: s.parallelism for cid, s in topology.components.items() if s.is_stateful}
    if current != recorded or unfinished or reports:
        layout_kv.put(PARALLELISM_KEY, current)
        layout_kv.delete(JOURNAL_KEY)
        layout_kv.commit()
    return reports


def _repartition(
    provider: Any, topo: Topology, spec: ComponentSpec, stored: list[int], old: int
) -> RescaleReport:
    cid, n, topology = spec.id, spec.parallelism, topo.name
    # A task whose state was only ever prepared is not among the namespaces
    # with committed entries, yet its delta may belong to the restored
    # checkpoint: every task of the old and the new layout is settled.
    stored = sorted(set(stored) | set(range(old)))
    settle(provider, [task_namespace(cid, t) for t in sorted(set(stored) | set(range(n)))])
    targets = [provider.get_state(task_namespace(cid, t)) for t in range(n)]
    moved = owned = 0
    # State kept per task rather than per key (a windowed bolt's windows) is moved
    # by the bolt itself first, the rest by key below.
    whole = getattr(spec.user_obj, "rescale_tasks", None)
    own = getattr(spec.user_obj, "rescale_owns", None)  # the keys it moved itself
    if whole is not None:
        sources = [provider.get_state(task_namespace(cid, t)) for t in stored]
        staging = provider.get_state(LAYOUT_NAMESPACE)
        moved += whole(spec, _fields_of(topo), sources, targets, staging)
    pending = set(stored)  # tasks not scanned yet; keys moved into them are not "kept"
    arrived = 0  # keys moved into a task not scanned yet, which its scan counts as owned
    for task in stored:
        pending.discard(task)
        source = provider.get_state(task_namespace(cid, task))
        # items() reads the store a page at a time (each page its own short
        # read, so the moves may commit in between) and never whole: memory
        # holds one chunk of moves, whatever the state's size.
        chunk: list[tuple[Any, Any, int]] = []
        for key, value in source.items():
            if own is not None and own(key):
                continue
            new = owner(spec, key, n)
            if new == task:
                owned += 1
                continue
            chunk.append((key, value, new))
            if len(chunk) >= _CHUNK:
                arrived += _move(chunk, source, targets, pending)
                moved += len(chunk)
                chunk = []
        if chunk:
            arrived += _move(chunk, source, targets, pending)
            moved += len(chunk)
    kept = owned - arrived
    log.warning(
        "%s: bolt %r went from %d to %d tasks; its state was re-partitioned "
        "(%d keys moved, %d stayed)",
        topology,
        cid,
        old,
        n,
        moved,
        kept,
    )
    return RescaleReport(cid, old, n, moved, kept)


def _fields_of(topo: Topology) -> Any:
    def fields_of(component: str, stream: str) -> Any:
        return topo.components[component].output_fields(stream)

    return fields_of


def _move(
    chunk: list[tuple[Any, Any, int]], source: Any, targets: list[Any], pending: set[int]
) -> int:
    """Put ``chunk``'s keys in their new tasks, then delete them from ``source``;
    return how many went to a task not scanned yet."""
    touched = set()
    ahead = 0
    for key, value, new in chunk:
        targets[new].put(key, value)
        touched.add(new)
        ahead += new in pending
    for t in sorted(touched):
        targets[t].commit()
    # Only once the new owners hold them: a crash before this leaves
    # two equal copies, which the next start's re-partition merges.
    for key, _, _ in chunk:
        source.delete(key)
    source.commit()
    return ahead
