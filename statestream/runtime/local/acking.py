"""The runtime's side of the acker, the ids of tuple trees, and the inbox of a
task in another worker (:class:`RemoteInbox`): how acks, edges and roots move.

The ledger itself is :mod:`statestream._acker`; this module only routes its messages.
"""

from __future__ import annotations

import random
from array import array
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from mypy_extensions import i64

from ..._acker import AckerLedger, Outcome, acker_task_for
from ..._tuple import Origin, Tuple

if TYPE_CHECKING:
    from .host import TaskHost


_getrandbits: Final = random.getrandbits
EDGE_BITS: Final = 62
EDGE_MASK: Final = (1 << EDGE_BITS) - 1
ROOT_BIT: Final = 1 << EDGE_BITS  # set in every root id (see next_root)
I64_MAX: Final = (1 << 63) - 1
#: In a RemoteInbox group's lane: the group's values are a one-field stream's, unwrapped.
FLAT: Final = 2


# Spout pending / acker ledgers expire an entry between (B-1) and B rotation
# periods after it was last touched; with the period at timeout/(B-1) a tree
# fails between 1x and 1.5x topology.message.timeout.secs.
TIMEOUT_BUCKETS: Final = 3


# Unsigned 64-bit words for ids: "L" where a C long has 64 bits (LP64: Linux,
# macOS), since CPython 3.11 converts an int of more than one digit to an
# unsigned long with a loop over its digits but to an unsigned long long
# through _PyLong_AsByteArray, at twice the cost.
_ID_CODE: Final = "L" if array("L").itemsize == 8 else "Q"


def pack_ids(ids: list[int]) -> Any:
    """Ids as unsigned 64-bit words in this machine's byte order (marshal would
    write each int 15 bits at a time); as they are if one does not fit."""
    try:
        return array(_ID_CODE, ids).tobytes()
    except OverflowError:
        return ids


def next_edge_of(x: i64) -> i64:
    """The state after ``x`` of the edge generator (LocalRuntime.next_edge), which
    is also the edge drawn: xorshift steps that keep 62 bits, nonzero from nonzero."""
    x ^= (x << 13) & EDGE_MASK
    x ^= x >> 7
    x ^= (x << 17) & EDGE_MASK
    return x


def unpack_ids(ids: Any) -> list[int]:
    """The ids :func:`pack_ids` packed."""
    if type(ids) is not bytes:
        return ids  # type: ignore[no-any-return]
    words = array(_ID_CODE)
    words.frombytes(ids)
    return words.tolist()


class RemoteInbox:
    """The inbox (or control lane) of a task in another worker, as a route sees it
    (``topology.workers``, :mod:`statestream.runtime.workers`).

    ``append`` adds the tuple to the frame for that worker, in columns: a
    group per run of tuples from one (source task, stream), ``(target, lane,
    source task, stream, values, edges, roots, anchors)``, where ``edges``
    holds each tuple's edge and ``roots`` their roots as runs, a root and
    the index of the first tuple with it (the words of one line share it),
    so that a frame holds a few lists rather than a record per tuple (the
    link sends both as 64-bit words). A group of tuples whose edges this
    queue drew (``add_drawn``, what spouts and anchored emits use) holds in
    place of ``edges`` one int, the state of the queue's generator before
    the first of them. Groups keep the order of appends to this queue. A
    multi-anchored tuple is a group of its own.
    On a one-field stream ``values`` holds the values themselves, not a
    list of one per tuple, and ``lane`` has bit ``FLAT`` set: a list per
    tuple cost more to encode and decode than the rest of the tuple.
    ``len``, what backpressure compares with the capacity, is the task's
    inbox length in the last status of its worker plus what was sent to it
    in the ``flying`` rounds that status cannot show, beyond ``slack``
    (``topology.transfer.buffer.size``): counting every tuple in flight
    against the receive buffer would hold each round to a fraction of it.
    """

    def __init__(
        self,
        out: list[Any],
        task_id: int,
        control: bool,
        slack: int = 0,
        flying: int = 3,
        seed: int = 1,
    ) -> None:
        self.out = out
        self.task_id = task_id
        self.lane = 1 if control else 0
        self.slack = slack
        self.remote_len = 0
        self.sent = 0  # this round
        # what was sent in each of the flying - 1 rounds before, and their sum
        self.before: deque[int] = deque([0] * (flying - 1))
        self.sent_before = 0
        self.origin: Origin | None = None  # of the group being filled
        self.flat = False  # the group's stream has one field
        self.values: list[Any] = []
        self.edges: list[int] = []
        self.roots: list[int] = []  # root, first index, root, first index, ...
        self.root = -1  # of the last run
        # The edges this queue draws itself (add_drawn): a group of them
        # crosses as the generator's state before its first one.
        self.edge_state: i64 = seed & EDGE_MASK or 1
        self.drawn = False  # the group being filled holds drawn edges

    def next_round(self) -> None:
        """The frame went out: the next append starts a new group."""
        before = self.before
        if before:
            self.sent_before += self.sent - before.popleft()
            before.append(self.sent)
        self.sent = 0
        self.origin = None

    def clear(self) -> None:
        self.sent = self.sent_before = 0
        for i in range(len(self.before)):
            self.before[i] = 0
        self.origin = None

    def append(self, tup: Tuple) -> None:
        if tup.anchors is not None:
            values: Any = tup.values
            o = tup.origin
            self.sent += 1
            self.out.append(
                (self.task_id, self.lane, o.task, o.stream, [list(values)], [], [], tup.anchors)
            )
            self.origin = None
            return
        self.add(tup.values, tup.origin, tup.root, tup.edge)

    def add(self, values: Sequence[Any], o: Origin, root: int, edge: int) -> None:
        """Append a tuple in one tree (or none) by its parts."""
        if o is not self.origin or self.drawn:
            self._group(o, False)
        self.edges.append(edge)
        self._put(values, root)

    def add_drawn(self, values: Sequence[Any], o: Origin, root: int) -> int:
        """Append a tuple of the tree ``root`` with an edge drawn here, and return
        the edge: a group of drawn edges crosses as one int, the generator's
        state before them, from which the receiver draws the same edges
        (LocalRuntime.deliver_remote), where a list of edges cost a boxed int
        per tuple on each side and a conversion each way."""
        if o is not self.origin or not self.drawn:
            self._group(o, True)
        x = next_edge_of(self.edge_state)
        self.edge_state = x
        self._put(values, root)
        return int(x)

    def _group(self, o: Origin, drawn: bool) -> None:
        """Start a group: tuples of ``o`` with edges drawn here, or given."""
        self.origin = o
        self.drawn = drawn
        self.flat = len(o.fields) == 1
        self.values = []
        self.edges = []
        self.roots = []
        self.root = -1
        self.out.append(
            (
                self.task_id,
                self.lane | FLAT if self.flat else self.lane,
                o.task,
                o.stream,
                self.values,
                int(self.edge_state) if drawn else self.edges,
                self.roots,
                None,
            )
        )

    def _put(self, values: Sequence[Any], root: int) -> None:
        self.sent += 1
        if root != self.root:
            self.root = root
            self.roots.append(root)
            self.roots.append(len(self.values))
        # emit checked the arity: a one-field stream's values have one item
        if not self.flat:
            self.values.append(values if type(values) is list else list(values))
        elif isinstance(values, list):
            self.values.append(values[0])  # compiled: a direct read of the list's item
        else:
            self.values.append(values[0])  # any other sequence: the generic lookup

    def mark(self) -> tuple[Any, ...]:
        """Where this queue stands, for :meth:`restore` (a bolt retrying a tuple in
        place takes back what its failed attempt sent; nothing goes out between)."""
        return (
            len(self.out),
            self.origin,
            self.drawn,
            self.flat,
            self.values,
            len(self.values),
            self.edges,
            len(self.edges),
            self.roots,
            len(self.roots),
            self.root,
            self.edge_state,
            self.sent,
        )

    def restore(self, mark: tuple[Any, ...]) -> None:
        """Take back every tuple appended since :meth:`mark` gave ``mark``."""
        n_out, origin, drawn, flat, values, n_values, edges, n_edges, roots, n_roots = mark[:10]
        del self.out[n_out:]
        del values[n_values:]
        del edges[n_edges:]
        del roots[n_roots:]
        self.origin, self.drawn, self.flat = origin, drawn, flat
        self.values, self.edges, self.roots = values, edges, roots
        self.root, self.edge_state, self.sent = mark[10], mark[11], mark[12]

    def __len__(self) -> int:
        flying = self.sent + self.sent_before - self.slack
        return self.remote_len + flying if flying > 0 else self.remote_len

    def __bool__(self) -> bool:
        return False  # never drained in this worker


class Acking:
    """The runtime's side of the acker: routes messages to ledgers, outcomes to spouts."""

    def __init__(self, rt: TaskHost, n_ackers: int) -> None:
        self.rt = rt
        self.ledgers = [AckerLedger(TIMEOUT_BUCKETS) for _ in range(n_ackers)]
        self.n = n_ackers
        self.timeouts = 0
        # With several workers (statestream.runtime.workers) an acker task
        # lives in one of them: the others put their messages for it in the
        # frame to its worker, and its outcomes go to the spout's worker.
        link = rt.link
        self.link: Any = link
        self.workers = 1 if link is None else int(link.workers)
        self.remote = [link is not None and not link.owns_acker(i) for i in range(n_ackers)]
        self.any_remote = any(self.remote)
        self.out_acks: list[list[Any]] = [] if link is None else link.ack_lists()
        self.out_pairs: list[list[int]] = [] if link is None else link.ack_pair_lists()
        self.out_completions: list[list[Any]] = [] if link is None else link.completion_lists()
        # One acker, in this process (the default): every root goes to it,
        # without the modulo of a 64-bit root and the routing per message.
        self.only: AckerLedger | None = (
            self.ledgers[0] if n_ackers == 1 and not self.any_remote else None
        )

    def _route(self, outcome: Outcome | None) -> None:
        if outcome is None:
            return
        spout = self.rt.spout_by_task.get(outcome.spout_task)
        ok = outcome.kind == "ack"
        if spout is not None:
            spout.complete((outcome.root, ok))
        elif self.link is not None:
            self.out_completions[outcome.spout_task % self.workers].append(
                (outcome.spout_task, outcome.root, ok)
            )
            if not ok:
                self.link.forward_cause(outcome.spout_task % self.workers, outcome.root)

    def _send(self, i: int, op: int, root: int, a: int, b: int) -> None:
        """An init (op 0), fail (2) or timeout reset (3) for acker ``i`` of another
        worker; acks, the bulk, go as words (``ack``, ``receive_acks``)."""
        self.out_acks[i % self.workers].append((i, op, root, a, b))

    def init(self, root: int, spout_task: int, ack_val: int) -> None:
        only = self.only
        if only is not None:
            self._route(only.init(root, spout_task, ack_val))
            return
        i = acker_task_for(root, self.n)
        if self.any_remote and self.remote[i]:
            self._send(i, 0, root, spout_task, ack_val)
            return
        self._route(self.ledgers[i].init(root, spout_task, ack_val))

    def ack(self, root: int, xor_val: int) -> None:
        only = self.only
        if only is not None:
            outcome = only.ack(root, xor_val)
        else:
            i = acker_task_for(root, self.n)
            if self.any_remote and self.remote[i]:
                pairs = self.out_pairs[i % self.workers]
                pairs.append(root)
                pairs.append(xor_val)
                return
            outcome = self.ledgers[i].ack(root, xor_val)
        if outcome is not None:
            self._route(outcome)

    def fail(self, root: int) -> None:
        i = acker_task_for(root, self.n)
        if self.any_remote and self.remote[i]:
            self._send(i, 2, root, 0, 0)
            # The spout's worker writes why in a dead-letter record.
            self.link.forward_cause(i % self.workers, root)
            return
        self._route(self.ledgers[i].fail(root))

    def reset_timeout(self, root: int) -> None:
        i = acker_task_for(root, self.n)
        if self.any_remote and self.remote[i]:
            self._send(i, 3, root, 0, 0)
            return
        self.ledgers[i].reset_timeout(root)

    def receive(self, messages: list[Any]) -> None:
        """Messages for this worker's ackers from another worker (see ``_send``)."""
        ledgers = self.ledgers
        for i, op, root, a, b in messages:
            if op == 0:
                self._route(ledgers[i].init(root, a, b))
            elif op == 2:
                self._route(ledgers[i].fail(root))
            else:
                ledgers[i].reset_timeout(root)

    def receive_acks(self, pairs: list[int]) -> None:
        """Acks for this worker's ackers from another worker: root and XOR in turn."""
        ledgers = self.ledgers
        n = self.n
        for k in range(0, len(pairs), 2):
            root = pairs[k]
            outcome = ledgers[acker_task_for(root, n)].ack(root, pairs[k + 1])
            if outcome is not None:
                self._route(outcome)

    def tick(self) -> None:
        # Expired ledger entries are dropped; the spout's own pending map
        # fails the message (it must, since a lost ledger cannot time out).
        for ledger in self.ledgers:
            self.timeouts += len(ledger.tick())

    def pending(self) -> int:
        return sum(len(ledger) for ledger in self.ledgers)
