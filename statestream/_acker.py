"""The acker's ledger: XOR bookkeeping of pending tuple trees.

A tracked spout tuple is the *root* of a tree. Every edge of the tree (a
tuple sent from one task to another, for this root) has a random non-zero
64-bit id. The acker keeps, per root, a single 64-bit *ack value*:

* the spout's init message XORs in the ids of the edges it sent;
* each bolt's ack of an input XORs in ``input edge ^ edges anchored to it``,
  which removes the input edge and adds the new ones.

Every edge id therefore enters the value exactly twice (once when created,
once when acked), so the value is 0 exactly when the whole tree has been
processed, whatever the order of the messages, since XOR is commutative
and associative. (A false zero needs random ids to cancel by chance:
probability about 2**-64 per message.)

Message flow through one :class:`AckerLedger` (one per acker task; route a
root to task :func:`acker_task_for`)::

    init(root, spout_task, ack_val) --+
    ack(root, xor_val)   -------------+--> entry[root] --value 0, spout known--> Outcome("ack")
    fail(root)           -------------+          |      --failed, spout known--> Outcome("fail")
    reset_timeout(root)  --> restart expiry      |
    tick()               --> rotate buckets -----+--expired, spout known-------> Outcome("timeout")
                                                    --expired, spout unknown----> late_acks += 1

An :class:`Outcome` goes to ``spout_task``, which calls its spout's
``ack``/``fail`` for the message id behind ``root``.

Memory: an entry is one small mutable object in a dict (see :class:`_Entry`):
an ack changes it in place, with no dict store and no new int, which is what
an ack costs most. ``bench/bench_acker_memory.py`` measures the bytes per tree.

Pure: no threads, no I/O, no clock. Time passes only through :meth:`tick`.
Not thread-safe: the acker task that owns a ledger is its only caller.
"""

from __future__ import annotations

import random
from typing import Final, Literal, NamedTuple, final

from mypy_extensions import i64, mypyc_attr

from statestream._errors import ReliabilityError
from statestream._rotating import RotatingMap

__all__ = [
    "AckerLedger",
    "LedgerEntry",
    "Outcome",
    "OutcomeKind",
    "acker_task_for",
    "new_id",
]

OutcomeKind = Literal["ack", "fail", "timeout"]
"""What an :class:`Outcome` reports: plain strings, compared with ``==``.

* ``"ack"``: the tree completed; call the spout's ``ack(msg_id)``.
* ``"fail"``: a bolt failed a tuple of the tree; call ``fail(msg_id)``.
* ``"timeout"``: the tree did not complete in time; call ``fail(msg_id)``.
"""


@mypyc_attr(acyclic=True)  # a str and two ints: see _Entry
class Outcome:
    """A decision about one root, addressed to the spout task that emitted it.

    Each root yields at most one outcome, after which it is no longer in
    the ledger. (A plain class, not a NamedTuple: one is made per completed
    tree, and the compiled core builds a plain class far faster.)
    """

    __slots__ = ("kind", "root", "spout_task")

    def __init__(self, kind: OutcomeKind, root: int, spout_task: int) -> None:
        self.kind: OutcomeKind = kind
        self.root = root
        self.spout_task = spout_task

    def _fields(self) -> tuple[str, int, int]:
        return (self.kind, self.root, self.spout_task)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Outcome) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"Outcome({self.kind!r}, {self.root}, {self.spout_task})"


class LedgerEntry(NamedTuple):
    """A read-only copy of one ledger entry, for inspection and tests.

    ``spout_task`` is ``None`` while the init message has not arrived.
    """

    ack_val: int
    spout_task: int | None
    failed: bool


# acyclic: it holds only ints, so the compiled core need not track it for the
# cycle collector (cheaper to make and free, and no GC pass counts it).
@final
@mypyc_attr(acyclic=True)
class _Entry:
    """One pending tree, changed in place by every message about it.

    ``val`` is the XOR ack value. ``task`` is the spout task + 1 once the
    init has arrived; before it, 0, or -1 if a fail came first (a known
    spout's fail is reported at once, never stored). Two fields, not three:
    40 bytes requested, 48 allocated, as for the 3-digit int of the packed
    entry this replaced (bench/bench_acker_memory.py).
    """

    __slots__ = ("task", "val")

    def __init__(self, val: int, task: int) -> None:
        self.val = val
        self.task = task


_getrandbits: Final = random.getrandbits


def new_id(rng: random.Random | None = None) -> int:
    """Return a random tuple/edge id in ``[1, 2**64)``.

    Zero is excluded because an ack value of 0 means "complete". ``rng``
    defaults to the :mod:`random` module's shared generator, which CPython
    reseeds in a forked child, so forked workers do not repeat each
    other's ids. Ids need to be unpredictable to chance, not to an attacker.
    """
    bits = _getrandbits if rng is None else rng.getrandbits
    value = bits(64)
    while not value:  # 1 in 2**64; the loop keeps the contract exact
        value = bits(64)
    return value


def acker_task_for(root: int, n_ackers: int) -> int:
    """Return the acker task (``0 <= task < n_ackers``) that tracks ``root``.

    Every message about one root must go to the same acker: spouts and
    bolts all route with this function. ``n_ackers`` is
    ``topology.acker.executors`` and must be at least 1 (with 0 there is no
    acker to route to: spouts ack right after emitting).
    """
    if n_ackers < 1:
        raise ValueError(
            f"acker_task_for needs n_ackers >= 1, got {n_ackers!r}; with "
            "topology.acker.executors: 0 tuples are not tracked at all"
        )
    # In machine integers: a root the runtime draws is below 2**63 but above
    # the compiled core's small ints, where % on the int object is a long
    # division (some 230 instructions a call).
    n: i64 = n_ackers
    try:
        r: i64 = root
    except (OverflowError, ValueError):  # from 2**63 on (a test's root); compiled: ValueError
        return root % n_ackers
    return int(r % n)


class AckerLedger:
    """Pending tuple trees of one acker task, with their XOR ack values.

    Contract of the message methods (all O(1) for a given bucket count):

    * :meth:`init`, :meth:`ack` and :meth:`fail` may arrive in any order.
      The tree completes when the init has arrived and the ack value is
      0; it fails when a fail message and the init have both arrived. The
      first of the two conditions to hold produces the root's only
      :class:`Outcome` and removes the root. If a root is both failed and
      XORed to 0, ``"fail"`` wins: a replay is never wrong under
      at-least-once, a wrong ack loses data.
    * Expiry counts from the message that created the entry, and is
      restarted only by :meth:`init` and :meth:`reset_timeout`. Acks do not
      extend it, so a busy tree still times out as
      ``topology.message.timeout.secs`` promises.
    * **Late acks.** A message for a root that is not in the ledger creates
      an entry with an unknown spout task, because it may be an ack that
      overtook its init. The ledger cannot tell it apart from a late ack for
      a root that already completed, failed, timed out or was lost with
      :meth:`clear`. Such an entry produces no outcome unless an init
      arrives; when it expires, :meth:`tick` drops it silently and counts it
      in :attr:`late_acks`. A timeout outcome always names a known spout.

    Counters survive :meth:`clear`; they are statistics, not state.
    """

    __slots__ = ("_buckets", "_pending", "late_acks")

    def __init__(self, timeout_buckets: int = 3) -> None:
        """``timeout_buckets`` is the number of ticks after which an entry expires.

        With a tick period ``T`` an entry expires between
        ``(timeout_buckets - 1) * T`` and ``timeout_buckets * T`` after it was
        created (or last reset). Must be at least 2.
        """
        self._pending: RotatingMap[int, _Entry] = RotatingMap(timeout_buckets)
        # The hot paths walk the buckets directly (newest first) instead of
        # going through RotatingMap methods: an ack must update the value in
        # whichever bucket holds it, without moving it, in one lookup. The
        # RotatingMap mutates this list in place, so the reference stays valid.
        self._buckets = self._pending.buckets
        self.late_acks: int = 0
        """Entries created by ack/fail messages that expired with no init (see class doc)."""

    # -- messages ----------------------------------------------------------

    def init(self, root: int, spout_task: int, ack_val: int) -> Outcome | None:
        """A spout emitted tracked tuple ``root``; ``ack_val`` is the XOR of the edges it sent.

        Returns the root's outcome if this message completes or fails it
        (acks or a fail may have arrived first), else ``None``. Restarts the
        root's expiry. Raises :class:`ReliabilityError` if ``ack_val`` is not
        a 64-bit value, ``spout_task`` is negative, or another spout task
        already initialised the same root.
        """
        if ack_val >> 64 or spout_task < 0:  # one shift also rejects negatives
            raise ReliabilityError(
                f"acker init for root {root}: ack_val must be in [0, 2**64) and "
                f"spout_task >= 0, got ack_val={ack_val!r}, spout_task={spout_task!r}"
            )
        buckets = self._buckets
        for bucket in buckets:
            # get, then del when found (rare): the compiled core calls
            # dict.pop(key, default) as a method, a get directly.
            entry = bucket.get(root)
            if entry is not None:
                del bucket[root]
                break
        else:
            # The common case: the init comes first.
            if ack_val:
                buckets[0][root] = _Entry(ack_val, spout_task + 1)
                return None
            # A tracked tuple sent to nobody is complete at once.
            return Outcome("ack", root, spout_task)
        return self._init_existing(root, spout_task, ack_val, entry, bucket)

    def _init_existing(
        self, root: int, spout_task: int, ack_val: int, entry: _Entry, bucket: dict[int, _Entry]
    ) -> Outcome | None:
        # Rare path, kept out of init() so the common path stays short.
        known = entry.task
        if known > 0 and known - 1 != spout_task:
            bucket[root] = entry  # leave the ledger as it was
            raise ReliabilityError(
                f"root {root} was initialised by spout task {known - 1} and now by "
                f"spout task {spout_task}; root ids must be unique per tracked tuple"
            )
        if known < 0:  # a fail came first
            return Outcome("fail", root, spout_task)
        entry.val ^= ack_val
        if not entry.val:
            return Outcome("ack", root, spout_task)
        entry.task = spout_task + 1
        self._buckets[0][root] = entry  # the init restarts the timeout
        return None

    def ack(self, root: int, xor_val: int) -> Outcome | None:
        """A bolt acked a tuple of tree ``root``; ``xor_val`` = input edge ^ edges anchored to it.

        Returns ``Outcome("ack")`` if the tree is now complete, else
        ``None``. Does not restart the expiry. An ack for an unknown root is
        kept (see the class docstring on late acks). Raises
        :class:`ReliabilityError` if ``xor_val`` is not a 64-bit value.
        """
        if xor_val >> 64:
            raise ReliabilityError(
                f"acker ack for root {root}: xor_val must be in [0, 2**64), got {xor_val!r}"
            )
        for bucket in self._buckets:
            entry = bucket.get(root)
            if entry is not None:
                val = entry.val ^ xor_val
                entry.val = val
                task = entry.task
                if val or task <= 0:
                    return None  # incomplete, or init not seen yet
                # Value 0 and spout known. A known spout with the failed flag
                # is never stored (fail() reports it at once), so this is an ack.
                del bucket[root]
                return Outcome("ack", root, task - 1)
        self._buckets[0][root] = _Entry(xor_val, 0)
        return None

    def fail(self, root: int) -> Outcome | None:
        """A bolt failed a tuple of tree ``root``.

        Returns ``Outcome("fail")`` at once if the spout task is known;
        otherwise marks the entry (creating it if needed) so that the init
        reports the failure. Does not restart the expiry of an existing entry.
        """
        buckets = self._buckets
        for bucket in buckets:
            entry = bucket.get(root)
            if entry is not None:
                if entry.task > 0:
                    del bucket[root]
                    return Outcome("fail", root, entry.task - 1)
                entry.task = -1  # reported when the init comes
                return None
        buckets[0][root] = _Entry(0, -1)
        return None

    def reset_timeout(self, root: int) -> None:
        """Restart the expiry of ``root`` (a bolt asked for more time). No-op if unknown.

        An unknown root is not created: there is nothing to time out yet.
        """
        buckets = self._buckets
        if root in buckets[0]:
            return
        for bucket in buckets:
            entry = bucket.get(root)
            if entry is not None:
                del bucket[root]
                buckets[0][root] = entry
                return

    def tick(self) -> list[Outcome]:
        """Advance time by one tick: expire the oldest bucket.

        Returns a ``"timeout"`` outcome for each expired root whose spout
        task is known, in the order the entries were written. Expired roots
        without a known spout are dropped and counted in :attr:`late_acks`.
        """
        outcomes: list[Outcome] = []
        for root, entry in self._pending.rotate():
            if entry.task > 0:
                outcomes.append(Outcome("timeout", root, entry.task - 1))
            else:
                self.late_acks += 1
        return outcomes

    # -- inspection and lifecycle ----------------------------------------

    def __len__(self) -> int:
        """Number of pending roots, including those whose init has not arrived."""
        return len(self._pending)

    def __contains__(self, root: object) -> bool:
        return root in self._pending

    def entry(self, root: int) -> LedgerEntry | None:
        """Return a copy of the entry for ``root``, or ``None`` if it is not pending."""
        entry = self._pending.get(root)
        if entry is None:
            return None
        task = entry.task
        return LedgerEntry(
            ack_val=entry.val, spout_task=task - 1 if task > 0 else None, failed=task < 0
        )

    def ack_value(self, root: int) -> int | None:
        """Return the current 64-bit ack value of ``root``, or ``None`` if not pending."""
        entry = self._pending.get(root)
        return None if entry is None else entry.val

    def clear(self) -> None:
        """Forget every pending root, as when the acker task dies.

        No outcome is produced: the spouts' own timeouts replay those trees,
        and acks still in flight for them become late acks.
        """
        self._pending.clear()

    def __repr__(self) -> str:
        return f"AckerLedger(pending={len(self)}, late_acks={self.late_acks})"
