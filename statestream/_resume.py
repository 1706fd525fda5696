"""Where each data spout resumes at start, decided once for every runtime.

A stateful topology stores its data spouts' positions with each checkpoint
(:class:`~statestream._exactly_once.CheckpointRecord`): with exactly-once
state the positions of the cut, with at-least-once state each spout's
``acked_position()``, the position below which every message was acked (as
Storm's Kafka spout commits its offset). At start every runtime asks
:func:`plan_resume` which spouts to ``seek`` and where, and logs the line it
gives for each spout task, so that a user sees where the input resumes
(``sentences: resuming input.txt after line 200,000``) or that a spout
cannot resume and reads its source again.

Pure: no I/O; the record is loaded by the caller.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._exactly_once import CheckpointRecord, can_resume, check_position
from ._partitioned import PARTITIONS_KEY

__all__ = [
    "ResumePlan",
    "SpoutRef",
    "acked_positions",
    "describe_position",
    "plan_resume",
    "restore_spouts",
    "stored_position",
]

_FRESH = "reading from the start (no position stored yet)"


@dataclass(frozen=True)
class SpoutRef:
    """A data spout task as the planner sees it."""

    namespace: str
    component: str
    task_index: int
    tasks: int
    spout: object


@dataclass
class ResumePlan:
    """What :func:`plan_resume` decided."""

    seeks: dict[str, Any] = field(default_factory=dict)
    """Namespace -> the position to ``seek`` (None: the beginning); a spout
    task missing here is not sought (it starts where its ``open`` starts)."""
    lines: list[str] = field(default_factory=list)
    """One line per spout task: where it resumes."""
    warning: str | None = None
    """A line to log as a warning (a checkpoint that cannot be restored exactly)."""


def plan_resume(
    record: CheckpointRecord, exactly_once: bool, spouts: Sequence[SpoutRef]
) -> ResumePlan:
    """Which spouts ``seek`` where at start, restoring ``record``.

    Exactly-once: every spout seeks to the position of the restored
    checkpoint (None when nothing was committed). A checkpoint stored
    at-least-once has only acked positions: they are used, with a warning.
    At-least-once: a spout with ``acked_position()`` seeks to the one stored
    with the restored checkpoint (or to the exact position, if an
    exactly-once run stored it: as safe); with nothing stored it is not
    sought; a spout that cannot resume is never sought.
    """
    plan = ResumePlan()
    if exactly_once:
        txid, positions = record.restore_point()
        if txid >= 0 and positions is None:
            positions = record.acked.get(txid)
            if positions is None:
                plan.warning = (
                    "exactly-once state: the stored checkpoint has no spout positions (it was "
                    "taken without exactly-once); the spouts resume as they would without it, "
                    "and exactly-once holds from the next checkpoint on"
                )
                plan.lines = [
                    _line(s, "no stored position; starts where its open() starts") for s in spouts
                ]
                return plan
            plan.warning = (
                f"exactly-once state: checkpoint {txid} was taken at-least-once; the spouts "
                "resume where their messages were acked (what came after may be counted "
                "twice), and exactly-once holds from the next checkpoint on"
            )
        for s in spouts:
            where = stored_position(positions, s)
            plan.seeks[s.namespace] = where
            plan.lines.append(_line(s, _resuming(where)))
        return plan
    _, positions, _ = record.resume_point()
    for s in spouts:
        where = stored_position(positions, s)
        if not can_resume(s.spout):
            kind = type(s.spout).__name__
            # A spout may say how it resumes without a position (the optional
            # ``resumes`` attribute: a classic queue's broker redelivers what was
            # not acked), which is truer than the general "reads again".
            how = getattr(s.spout, "resumes", "") or (
                "starts where its open() starts and reads again what it read before"
            )
            plan.lines.append(
                _line(
                    s,
                    f"{kind} cannot resume (no acked_position() and seek()): it {how} "
                    "(at-least-once)",
                )
            )
        elif where is None:
            plan.lines.append(_line(s, _FRESH))
        else:
            plan.seeks[s.namespace] = where
            plan.lines.append(_line(s, _resuming(where)))
    return plan


def stored_position(positions: Mapping[str, Any] | None, s: SpoutRef) -> Any:
    """Where spout task ``s`` resumes, out of the stored ``positions`` (namespace ->
    position): its own namespace's; or, for a spout with ``merge_positions`` (its
    partitions may move between tasks: a changed parallelism keeps every
    partition's place), what it makes of every stored task of its component."""
    if positions is None:
        return None
    merge = getattr(s.spout, "merge_positions", None)
    if not callable(merge):
        return positions.get(s.namespace)
    mine = [
        where
        for namespace, where in sorted(positions.items())
        if namespace.rpartition("-")[0] == s.component and where is not None
    ]
    return merge(mine) if mine else None


def restore_spouts(
    record: CheckpointRecord, exactly_once: bool, spouts: Sequence[SpoutRef], *, seek: bool = True
) -> ResumePlan:
    """:func:`plan_resume`, then ``seek`` every spout task the plan names: the one
    place every runtime seeks its data spouts at a start or a rewind (``seek``
    False: plan only, for spouts that cannot rewind and run at-most-once).
    The caller logs the plan's lines."""
    plan = plan_resume(record, exactly_once, spouts)
    if seek:
        for s in spouts:
            if s.namespace in plan.seeks:
                s.spout.seek(plan.seeks[s.namespace])  # type: ignore[attr-defined]
    return plan


def acked_positions(spouts: Iterable[SpoutRef]) -> dict[str, Any]:
    """Each resumable spout's ``acked_position()`` (JSON-checked), by namespace."""
    return {
        s.namespace: check_position(s.component, s.spout.acked_position())  # type: ignore[attr-defined]
        for s in spouts
        if can_resume(s.spout)
    }


def describe_position(where: Any) -> str:
    """A position in words: a ``path`` and a ``line`` (lines done) or a byte
    ``offset`` when it has them (as FileSpout's and the spout guide's do), else
    its JSON, cut short."""
    if isinstance(where, Mapping):
        path = where.get("path")
        name = f"{os.path.basename(str(path))} " if path else ""
        line, offset = where.get("line"), where.get("offset")
        if isinstance(line, int):
            text = f"{name}after line {line:,}" if line else f"{name}from the start"
        elif isinstance(offset, int):
            text = f"{name}at byte offset {offset:,}" if offset else f"{name}from the start"
        else:
            text = ""
        by_topic = _by_topic(where)
        parts = where.get(PARTITIONS_KEY) or where.get("queues") or by_topic
        if by_topic == {} and not where.get(PARTITIONS_KEY):
            text = "each partition from its start"  # no record read yet
        if not text and isinstance(parts, Mapping) and parts:
            # A broker's streams or queues, or a folder's files: each one's place.
            unit = "byte " if path else "offset " if by_topic else ""
            items = list(parts.items()) if by_topic else sorted(parts.items())
            text = ", ".join(
                f"{k} at {unit}{v:,}" if isinstance(v, int) else f"{k} after {v}"
                for k, v in items[:3]
            )
            if len(items) > 3:
                text += f" and {len(items) - 3:,} more"
            if path:
                text = f"in {os.path.basename(str(path).rstrip('/'))}/: {text}"
        if text:
            again = where.get("replay") or where.get("retry")
            if isinstance(again, list) and again:
                text += f", {len(again):,} failed message(s) first"
            return text
    raw = orjson.dumps(where).decode()
    return f"at {raw if len(raw) <= 80 else raw[:77] + '...'}"


def _by_topic(where: Mapping[str, Any]) -> dict[str, Any] | None:
    """A position's offsets nested by topic (KafkaSpout's ``{"offsets": {topic:
    {partition: offset}}}``), flat: ``{"topic partition P": offset}``."""
    nested = where.get("offsets")
    if not isinstance(nested, Mapping) or not all(isinstance(v, Mapping) for v in nested.values()):
        return None
    places = [(t, int(p), o) for t, parts in nested.items() for p, o in parts.items()]
    return {f"{t} partition {p}": o for t, p, o in sorted(places)}


def _resuming(where: Any) -> str:
    if where is None:
        return _FRESH
    return f"resuming {describe_position(where)}"


def _line(s: SpoutRef, what: str) -> str:
    who = s.component if s.tasks == 1 else f"{s.component} task {s.task_index}"
    return f"{who}: {what}"
