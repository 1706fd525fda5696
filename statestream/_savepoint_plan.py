"""What a savepoint holds, and where each part of it goes on import: pure decisions.

A savepoint (``statestream state export``, :mod:`statestream._savepoint`)
holds every namespace one topology keeps in its store. On import they go
into a topology that may have changed since: a component renamed
(``--rename old=new``), a stateful bolt added (it starts empty), one removed
(refused unless ``--drop``), a parallelism changed (the state is
re-partitioned by :mod:`statestream._rescale`, as at any start). This module
decides, from the savepoint's components and the target's, which
component's state goes where, and refuses what cannot be honoured with one
line naming the component and the fix. It also renames the namespaces and
the records that name components: the spouts' positions in the checkpoint
record, the parallelism in ``$layout``, a transactional spout's partitions.

Pure: no I/O; table-tested in ``tests/unit/test_savepoint_plan.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from ._errors import ConfigError
from ._text import count

__all__ = [
    "BOLT",
    "SPOUT",
    "STATE",
    "STATEFUL",
    "ImportPlan",
    "Part",
    "exported_parts",
    "parse_renames",
    "plan_import",
    "task_of",
    "transactional_parts",
]

#: Kinds of a component, as the savepoint and the target topology know them.
STATEFUL: Final = "stateful bolt"  # named in $layout: its state re-partitions
SPOUT: Final = "spout"  # its tasks' positions are in the checkpoint record
STATE: Final = "component"  # a namespace of its own, kind unknown (a resuming FileSpout)
BOLT: Final = "bolt"  # a bolt of the target without state

_TRANSACTIONAL: Final = "$transactional-"


@dataclass(frozen=True)
class Part:
    """A component as the savepoint holds it (or as the target topology has it)."""

    kind: str
    tasks: int


def task_of(namespace: str) -> tuple[str, int] | None:
    """``(component, task)`` of a task's namespace ``<component>-<task>``; None for
    the runtime's own (``$``-prefixed) and any other."""
    if namespace.startswith("$"):
        return None
    component, _, task = namespace.rpartition("-")
    if not component or not task.isdigit():
        return None
    return component, int(task)


def transactional_parts(namespaces: Iterable[str], topology: str) -> list[str]:
    """The transactional spouts whose partitions ``namespaces`` hold
    (``$transactional-<topology>-<spout>``)."""
    prefix = f"{_TRANSACTIONAL}{topology}-"
    return sorted(ns[len(prefix) :] for ns in namespaces if ns.startswith(prefix))


def exported_parts(
    namespaces: Iterable[str],
    parallelism: Mapping[str, int],
    positions: Iterable[str],
) -> dict[str, Part]:
    """The components a store holds state of: ``parallelism`` is ``$layout``'s record of
    the stateful bolts, ``positions`` the task namespaces the checkpoint record
    holds spout positions of; any other task namespace is a component of
    unknown kind (a spout's own position, a bolt of a store older than
    ``$layout``)."""
    tasks: dict[str, int] = {}
    for ns in namespaces:
        found = task_of(ns)
        if found is not None:
            tasks[found[0]] = max(tasks.get(found[0], 0), found[1] + 1)
    spouts: dict[str, int] = {}
    for ns in positions:
        found = task_of(ns)
        if found is not None:
            spouts[found[0]] = max(spouts.get(found[0], 0), found[1] + 1)
    parts = {cid: Part(STATE, n) for cid, n in tasks.items()}
    parts.update({cid: Part(SPOUT, n) for cid, n in spouts.items()})
    parts.update({cid: Part(STATEFUL, int(n)) for cid, n in parallelism.items()})
    return dict(sorted(parts.items()))


def parse_renames(items: Iterable[str]) -> dict[str, str]:
    """``{old: new}`` of ``--rename OLD=NEW`` options; ConfigError for one that is not
    ``OLD=NEW`` or renames a component twice."""
    renames: dict[str, str] = {}
    for item in items:
        old, sep, new = (part.strip() for part in item.partition("="))
        if not (sep and old and new) or old in renames:
            raise ConfigError(f"--rename {item!r}: give OLD=NEW, once per component")
        renames[old] = new
    return renames


def _listing(names: Iterable[str]) -> str:
    return ", ".join(map(repr, sorted(names))) or "none"


@dataclass(frozen=True)
class ImportPlan:
    """Where the savepoint's state goes: ``renamed`` maps every exported component to
    its component in the target (itself when unchanged), or None when its state
    is left out (``--drop``). ``topology`` is the target topology's name,
    ``source`` the savepoint's."""

    source: str
    topology: str
    renamed: Mapping[str, str | None]
    added: tuple[str, ...] = ()
    rescaled: tuple[tuple[str, int, int], ...] = ()
    notes: tuple[str, ...] = field(default=())

    def component(self, cid: str) -> str | None:
        """The target component of exported component ``cid`` (None: dropped)."""
        return self.renamed.get(cid, cid)

    def namespace(self, ns: str) -> str | None:
        """Where exported namespace ``ns`` goes in the target's scope; None: left out."""
        found = task_of(ns)
        if found is not None:
            cid = self.component(found[0])
            return None if cid is None else f"{cid}-{found[1]}"
        old = f"{_TRANSACTIONAL}{self.source}"
        if ns == old:
            return f"{_TRANSACTIONAL}{self.topology}"
        if ns.startswith(old + "-"):
            spout = self.component(ns[len(old) + 1 :])
            return None if spout is None else f"{_TRANSACTIONAL}{self.topology}-{spout}"
        return ns

    def by_namespace(self, where: Mapping[str, Any]) -> dict[str, Any]:
        """``{namespace: x}`` (spout positions) with each namespace renamed; dropped
        ones left out."""
        return _renamed(where, self.namespace)

    def by_component(self, where: Mapping[str, Any]) -> dict[str, Any]:
        """``{component: x}`` (``$layout``'s parallelism) with each component renamed."""
        return _renamed(where, self.component)


def _renamed(where: Mapping[str, Any], rename: Callable[[str], str | None]) -> dict[str, Any]:
    pairs = ((rename(name), value) for name, value in where.items())
    return {new: value for new, value in pairs if new is not None}


def _check_renames(renames: Mapping[str, str], parts: Mapping[str, Part]) -> None:
    for old, new in renames.items():
        if old not in parts:
            raise ConfigError(
                f"--rename {old}={new}: the savepoint holds no state of a component {old!r}; "
                f"it has {_listing(parts)}"
            )
    targets: dict[str, str] = {}
    for cid in parts:
        new = renames.get(cid, cid)
        if new in targets:
            a, b = sorted((targets[new], cid))
            raise ConfigError(
                f"components {a!r} and {b!r} of the savepoint would both become {new!r}; "
                f"rename one of them elsewhere (--rename {b}=OTHER)"
            )
        targets[new] = cid


def _mismatch(cid: str, new: str, part: Part, have: Part, topology: str) -> str | None:
    """Why ``part`` (exported ``cid``) cannot go to ``new`` (``have`` in the target)."""
    name = repr(new) if new == cid else f"{new!r} (renamed from {cid!r})"
    if part.kind == STATEFUL and have.kind != STATEFUL:
        return (
            f"component {name} is a stateful bolt in the savepoint and a {have.kind} in "
            f"topology {topology!r}: its state has nowhere to go; --rename {cid}=BOLT to "
            "a stateful bolt, or leave its state out with --drop"
        )
    if part.kind == SPOUT and have.kind != SPOUT:
        return (
            f"component {name} is a spout in the savepoint and a {have.kind} in topology "
            f"{topology!r}: its positions have nowhere to go; --rename {cid}=SPOUT to a spout, "
            "or leave its positions out with --drop (its input is then read from the start)"
        )
    return None


def plan_import(
    source: str,
    parts: Mapping[str, Part],
    target: Mapping[str, Part] | None,
    *,
    topology: str | None = None,
    renames: Mapping[str, str] | None = None,
    drop: bool = False,
) -> ImportPlan:
    """Where the state of ``parts`` (savepoint of topology ``source``) goes in topology
    ``topology`` whose components are ``target`` (None: not known, so the savepoint
    is imported as it is, with ``renames`` only).

    Refused with ConfigError, one line each: a rename of a component the
    savepoint has no state of, or into one the target does not have; two
    components renamed into one; state of a component the target lacks, or
    has as another kind (a stateful bolt's state into a plain bolt), unless
    ``drop`` leaves it out; a spout whose parallelism changed (its positions
    are per task). A stateful bolt whose parallelism changed is re-partitioned
    (``rescaled``); one the savepoint has no state of starts empty (``added``).
    """
    renames = dict(renames or {})
    name = topology or source
    _check_renames(renames, parts)
    if target is None:
        if drop:
            raise ConfigError(
                "--drop needs the topology to import into (--topology FILE.py or "
                "module:attribute), to know which components it no longer has"
            )
        return ImportPlan(source, name, renames)
    renamed: dict[str, str | None] = {}
    rescaled: list[tuple[str, int, int]] = []
    notes: list[str] = []
    for cid, part in parts.items():
        new = renames.get(cid, cid)
        if new not in target:
            if cid in renames:
                raise ConfigError(
                    f"--rename {cid}={new}: topology {name!r} has no component {new!r}; "
                    f"it has {_listing(target)}"
                )
            if not drop:
                raise ConfigError(
                    f"the savepoint holds state of {part.kind} {cid!r} ({count(part.tasks, 'task')}), "
                    f"which topology "
                    f"{name!r} does not have: give its new name with --rename {cid}=NEW, or "
                    "leave its state out with --drop"
                )
            renamed[cid] = None
            notes.append(f"left out: the state of {part.kind} {cid!r} (--drop)")
            continue
        have = target[new]
        why = _mismatch(cid, new, part, have, name)
        if why is not None:
            if not drop:
                raise ConfigError(why)
            renamed[cid] = None
            notes.append(f"left out: the state of {part.kind} {cid!r}, a {have.kind} now (--drop)")
            continue
        renamed[cid] = new
        if new != cid:
            notes.append(f"renamed: {cid!r} -> {new!r}")
        if part.tasks != have.tasks and part.kind == SPOUT:
            raise ConfigError(
                f"spout {new!r} has {count(have.tasks, 'task')} in topology {name!r} and had "
                f"{part.tasks} in the savepoint: a spout's positions are per task, so import "
                f"with its parallelism at {part.tasks} (and change it later if the spout can)"
            )
        if part.tasks != have.tasks and part.kind == STATEFUL:
            rescaled.append((new, part.tasks, have.tasks))
    taken = {v for v in renamed.values() if v is not None}
    added = tuple(cid for cid, have in target.items() if have.kind == STATEFUL and cid not in taken)
    notes += [f"starts empty: stateful bolt {cid!r} (no state in the savepoint)" for cid in added]
    return ImportPlan(source, name, renamed, added, tuple(rescaled), tuple(notes))
