"""What the driver and the executors both know: the records a job moves, and
small picklable helpers.

A job's stages pass ``(target component, task index, record)`` triples;
a data record is ``(key, stream, values, roots)`` with ``key = producer
task id << SEQ_BITS | emit sequence`` (so a bolt task sorts its input into
the same order on every attempt), an acknowledgement travels as
``(ACK, 0, ack)`` (see :class:`~statestream.runtime.spark.executor.Producer`).
Functions here are shipped to executors by reference (``functools.partial``
of them): they stay importable at module level under the same name on both
sides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..._config import settings_of
from ..._topology import Topology
from ..metrics import TaskTiming
from ..plan import RuntimePlan

try:
    from ..._executors import unwrap as unwrap
except ImportError:  # pragma: no cover - before build() wrapped bolts in executors

    def unwrap(obj: Any) -> Any:
        return obj


#: An error a task reported for one tuple: (the tuple's repr, the error's repr, traceback).
ReportedError = tuple[str, str, str]
#: A tuple a task gave up on in this job, for one of its spout messages: (root, the
#: component that failed it, the error's type, its message). Root 0: a tuple no
#: spout message tracks (an unanchored emit).
Lost = tuple[int, str, str, str]
#: A tuple a task dead-lettered itself (exactly-once: it failed
#: ``statestream.retry.max.attempts`` times in the task, its effects undone): (an
#: id stable across attempts of the batch, source component, stream, values,
#: the error's type, its message, attempts). The driver writes it before the commit.
DeadTuple = tuple[str, str, str, list[Any], str, str, int]
#: A task's acknowledgement: (component, task, executed, emitted, failed, prepare token,
#: errors, lost, its sampled timing or None (a read stage's, or a bolt task that timed
#: no tuple), the keys its prepare changed and their bytes, or None (a task without a
#: stored state), the tuples it dead-lettered).
Ack = tuple[
    str,
    int,
    int,
    int,
    int,
    str | None,
    list[ReportedError],
    list[Lost],
    TaskTiming | None,
    tuple[int, int] | None,
    list[DeadTuple],
]
ACK = "$ack"  # first element of an acknowledgement record (no component id can be it)
SEQ_BITS = 40  # sort key: producer task id << 40 | emit sequence


def user_bolt(topology: Topology, cid: str) -> Any:
    """A fresh copy of the user's bolt ``cid`` for one task.

    ``build()`` wraps bolts in the executors of the local runtime's per-tuple
    protocols (barriers, held acks); a batch is the unit of the checkpoint
    protocol here, and this runtime runs it itself on the bare bolt.
    """
    return unwrap(topology.instantiate(cid))


def identity(key: int) -> int:
    return key


def addressed_to(cid: str, items: Iterable[tuple[str, int, Any]]) -> Iterator[tuple[int, Any]]:
    """``(task index, record)`` of the items addressed to component ``cid``."""
    for target, index, rec in items:
        if target == cid:
            yield index, rec


def only_acks(items: Iterable[tuple[str, int, Any]]) -> Iterator[Any]:
    for target, _, ack in items:
        if target == ACK:
            yield ack


def provider_key(conf: Mapping[str, Any]) -> str:
    import orjson

    settings = settings_of(conf)
    return orjson.dumps(
        [settings.topology_state_provider, settings.topology_state_provider_config],
        option=orjson.OPT_SORT_KEYS,
    ).decode()


def store_key(plan: RuntimePlan) -> str:
    """One topology's state in one store: two topologies on one store never share it."""
    return f"{plan.topology.name}\0{provider_key(plan.config)}"


def fresh_state(provider: Any, namespace: str) -> Any:
    """A state of ``namespace`` that reads its txids from the store again.

    A provider hands out one cached state object per namespace, which assumes
    that object is the namespace's only writer. On Spark a namespace is
    prepared on an executor and committed by the driver, so each side drops
    the cached object (``forget_state``, which a provider that caches nothing
    may lack) and takes a new one before acting.
    """
    forget = getattr(provider, "forget_state", None)
    if forget is not None:
        forget(namespace)
    return provider.get_state(namespace)


class ReadThrough:
    """A namespace the executors write and the driver only reads: every call
    reads the store afresh (a cached state object would keep what it read
    first). The driver's transactional spout coordinator reads the
    partitions' metadata, which the emitters store, through it."""

    def __init__(self, provider: Any, namespace: str) -> None:
        self._provider = provider
        self._namespace = namespace

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(fresh_state(self._provider, self._namespace), name)

    def __iter__(self) -> Iterator[Any]:
        return iter(fresh_state(self._provider, self._namespace))

    def __contains__(self, key: object) -> bool:
        return key in fresh_state(self._provider, self._namespace)


def state_opener(provider: Any) -> Callable[[str], Any] | None:
    if provider is None:
        return None

    def opener(namespace: str) -> Any:
        return fresh_state(provider, namespace)

    return opener


def sort_key(rec: tuple[Any, ...]) -> int:
    return int(rec[0])


def root_cause(exc: BaseException) -> str:
    """The last line of a (possibly remote) traceback: what actually went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    causes = [line for line in lines if "Error:" in line or "Exception:" in line]
    return (causes[-1] if causes else lines[-1] if lines else repr(exc))[:500]
