"""Batch completion and routing for the bolts of a transactional topology, as pure code.

**Completion** (Storm's CoordinatedBolt). A batch bolt task has the whole of
an attempt's batch when every upstream task has told it how many tuples it
sent it for that attempt, and it has received that many; a committer also
needs the attempt's commit tuple. Upstream tasks send the count (on the
direct stream ``$coord``) when they are done with the attempt: an emitter
right after emitting its part of the batch, a bolt after its own
``finish_batch``. Counts and data may arrive in any order; zero is a count
too, so an empty batch completes like any other. :class:`BatchTracker`
keeps this for one attempt at one task.

**Routing.** The counts must say how many tuples went to each task, which
the runtime's groupings do not report. So the builder declares every data
stream of a transactional topology as a direct stream and the executors
route with :class:`Router`: the groupings the user declared (shuffle,
fields, global, all, direct, custom), the same stable hash as the runtimes,
each tuple sent with ``emit_direct`` and counted per target task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import TupleError
from .._routing import custom_choose, stable_hash

__all__ = ["BatchTracker", "LogicalRoute", "Router"]


class BatchTracker:
    """Has one task got all of one attempt's batch?

    ``upstream`` is the number of upstream tasks that report a count;
    ``needs_commit`` is true for a committer.
    """

    __slots__ = ("committed", "expected", "needs_commit", "received", "reported", "upstream")

    def __init__(self, upstream: int, needs_commit: bool = False) -> None:
        if upstream < 1:
            raise ValueError(f"a batch bolt task has at least one upstream task, got {upstream}")
        self.upstream = upstream
        self.needs_commit = needs_commit
        self.reported: set[int] = set()
        self.expected = 0
        self.received = 0
        self.committed = False

    def data(self) -> None:
        """A data tuple of the attempt arrived."""
        self.received += 1

    def report(self, source_task: int, count: int) -> None:
        """Upstream task ``source_task`` sent this task ``count`` tuples of the attempt.

        A second report from the same task (it cannot happen on a working
        transport) is ignored rather than counted twice.
        """
        if source_task in self.reported:
            return
        self.reported.add(source_task)
        self.expected += count

    def commit(self) -> None:
        """The attempt's commit tuple arrived."""
        self.committed = True

    @property
    def complete(self) -> bool:
        """Every upstream task reported, every tuple reported arrived (and the commit, if needed)."""
        return (
            len(self.reported) == self.upstream
            and self.received == self.expected
            and (self.committed or not self.needs_commit)
        )

    def __repr__(self) -> str:
        commit = f", commit={self.committed}" if self.needs_commit else ""
        return (
            f"BatchTracker(reported={len(self.reported)}/{self.upstream}, "
            f"received={self.received}/{self.expected}{commit})"
        )


@dataclass(frozen=True)
class LogicalRoute:
    """One subscriber of one stream as the user declared it.

    ``kind`` is the grouping kind; ``key`` the indexes of the grouped fields
    (fields grouping); ``custom`` the custom grouping object.
    """

    target: str
    kind: str
    key: tuple[int, ...] = ()
    custom: Any = None


class Router:
    """Picks the target tasks of each emitted tuple as the user's groupings would.

    ``routes`` maps each output stream to its subscribers; ``tasks`` maps a
    component to its global task ids. ``start`` staggers the shuffle of
    several emitting tasks (the task index, as the local runtime does).
    """

    def __init__(
        self,
        component: str,
        routes: Mapping[str, Sequence[LogicalRoute]],
        tasks: Mapping[str, Sequence[int]],
        start: int = 0,
    ) -> None:
        self.component = component
        self._routes = {s: [(r, list(tasks[r.target])) for r in rs] for s, rs in routes.items()}
        self._rr: dict[tuple[str, str], int] = {}
        self._start = start
        self._direct: dict[str, frozenset[int]] = {
            s: frozenset(t for r, ts in rs if r.kind == "direct" for t in ts)
            for s, rs in self._routes.items()
        }

    def downstream_tasks(self) -> list[int]:
        """Every task subscribed to any stream of this component: where counts go."""
        return sorted({t for rs in self._routes.values() for _, ts in rs for t in ts})

    def targets(self, stream: str, values: Sequence[Any]) -> list[int]:
        """The global task ids a tuple on ``stream`` (not direct) goes to."""
        out: list[int] = []
        for r, ts in self._routes.get(stream, ()):
            kind = r.kind
            n = len(ts)
            if kind in ("shuffle", "none"):
                key = (stream, r.target)
                i = self._rr.get(key, self._start % n)
                self._rr[key] = i + 1 if i + 1 < n else 0
                out.append(ts[i])
            elif kind == "fields":
                if len(r.key) == 1:
                    h = stable_hash(values[r.key[0]])
                else:
                    h = stable_hash([values[i] for i in r.key])
                out.append(ts[h % n])
            elif kind == "global":
                out.append(ts[0])
            elif kind == "all":
                out.extend(ts)
            elif kind == "custom":
                out.extend(ts[i] for i in custom_choose(r.custom, values, n))
            # direct subscribers get only emit_direct tuples
        return out

    def check_direct(self, stream: str, task: int) -> None:
        """Raise TupleError unless ``task`` subscribes to ``stream`` with a direct grouping."""
        if task not in self._direct.get(stream, frozenset()):
            valid = sorted(self._direct.get(stream, ()))
            raise TupleError(
                f"component {self.component!r} emit_direct to task {task} on stream {stream!r}, "
                f"which no task subscribes to with a direct grouping (subscribed tasks: "
                f"{valid}); pick one from context.component_tasks(<bolt>)"
            )
