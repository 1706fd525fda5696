"""AckerLedger: XOR tracking of tuple trees, timeouts, late acks, id helpers."""

from __future__ import annotations

import random
from functools import reduce
from operator import xor

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestream._acker import (
    AckerLedger,
    LedgerEntry,
    Outcome,
    acker_task_for,
    new_id,
)
from statestream._errors import ReliabilityError

R = 0xDEAD_BEEF_0000_0001  # a root id
S = 7  # its spout task
# Edge ids with distinct bits, so that no subset of them XORs to 0 by accident.
A, B, C = 0b001, 0b010, 0b100

Step = tuple[object, ...]


def apply(ledger: AckerLedger, step: Step) -> object:
    """Run one scripted message against ``ledger`` and return what it returned."""
    op, *args = step
    if op == "init":
        return ledger.init(*args)  # type: ignore[arg-type]
    if op == "ack":
        return ledger.ack(*args)  # type: ignore[arg-type]
    if op == "fail":
        return ledger.fail(*args)  # type: ignore[arg-type]
    if op == "reset":
        ledger.reset_timeout(*args)  # type: ignore[arg-type]
        return None
    if op == "tick":
        return ledger.tick()
    raise AssertionError(f"unknown step {step!r}")


# -- the walkthrough ---------------------------------------------------------


def test_acking_walkthrough_with_two_ackers() -> None:
    """Two spout tuples, one bolt tuple anchored to both, two ackers, 4-bit ids."""
    stid1, stid2, tid1 = 0b1010, 0b1011, 0b1100
    sid1, sid2 = 1, 2
    ackers = [AckerLedger(), AckerLedger()]  # "Acker1" and "Acker2"
    assert acker_task_for(stid1, 2) == 0
    assert acker_task_for(stid2, 2) == 1
    acker1, acker2 = ackers[acker_task_for(stid1, 2)], ackers[acker_task_for(stid2, 2)]

    # The spouts emit: the ack value starts as the spout tuple's own id.
    assert acker1.init(stid1, sid1, stid1) is None
    assert acker2.init(stid2, sid2, stid2) is None
    assert acker1.ack_value(stid1) == 0b1010
    assert acker2.ack_value(stid2) == 0b1011

    # Bolt1 emits tid1 anchored to both spout tuples.
    assert acker1.ack(stid1, tid1) is None
    assert acker2.ack(stid2, tid1) is None
    assert acker1.ack_value(stid1) == 0b0110
    assert acker2.ack_value(stid2) == 0b0111

    # Bolt1 acks both inputs.
    assert acker1.ack(stid1, stid1) is None
    assert acker2.ack(stid2, stid2) is None
    assert acker1.ack_value(stid1) == 0b1100
    assert acker2.ack_value(stid2) == 0b1100

    # Bolt2 acks tid1, which carries both roots: both trees complete.
    assert acker1.ack(stid1, tid1) == Outcome("ack", stid1, sid1)
    assert acker2.ack(stid2, tid1) == Outcome("ack", stid2, sid2)
    assert acker1.ack_value(stid1) is None
    assert acker2.ack_value(stid2) is None
    assert len(acker1) == len(acker2) == 0


def test_walkthrough_bolt_messages_combined_and_reordered() -> None:
    """The same trees as real acks (input ^ anchored), delivered before the inits."""
    stid1, stid2, tid1 = 0b1010, 0b1011, 0b1100
    acker1, acker2 = AckerLedger(), AckerLedger()
    # Bolt2's ack of tid1 overtakes everything, then Bolt1's acks of its inputs.
    assert acker1.ack(stid1, tid1) is None
    assert acker2.ack(stid2, tid1) is None
    assert acker1.ack(stid1, stid1 ^ tid1) is None
    assert acker2.ack(stid2, stid2 ^ tid1) is None
    assert acker1.ack_value(stid1) == 0b1010  # 1100 ^ 0110
    assert acker2.ack_value(stid2) == 0b1011  # 1100 ^ 0111
    assert acker1.entry(stid1) == LedgerEntry(0b1010, None, False)
    # The inits arrive last and complete both trees.
    assert acker1.init(stid1, 1, stid1) == Outcome("ack", stid1, 1)
    assert acker2.init(stid2, 2, stid2) == Outcome("ack", stid2, 2)


# -- every (entry state, message) pair -----------------------------------------

# The entry states a root can be in before a message, as the messages that
# put it there.
ABSENT: list[Step] = []
UNKNOWN: list[Step] = [("ack", R, A)]  # an ack overtook the init
UNKNOWN_ZERO: list[Step] = [("ack", R, A), ("ack", R, A)]  # value 0, but no init yet
UNKNOWN_FAILED: list[Step] = [("fail", R)]  # a fail overtook the init
UNKNOWN_FAILED_ZERO: list[Step] = [("fail", R), ("ack", R, A), ("ack", R, A)]
KNOWN: list[Step] = [("init", R, S, A ^ B)]

ACK = Outcome("ack", R, S)
FAIL = Outcome("fail", R, S)

# (setup, message, returned, entry afterwards)
MESSAGE_TABLE: list[tuple[str, list[Step], Step, Outcome | None, LedgerEntry | None]] = [
    ("absent/init", ABSENT, ("init", R, S, A), None, LedgerEntry(A, S, False)),
    ("absent/init-zero", ABSENT, ("init", R, S, 0), ACK, None),
    ("absent/ack", ABSENT, ("ack", R, A), None, LedgerEntry(A, None, False)),
    ("absent/ack-zero", ABSENT, ("ack", R, 0), None, LedgerEntry(0, None, False)),
    ("absent/fail", ABSENT, ("fail", R), None, LedgerEntry(0, None, True)),
    ("absent/reset", ABSENT, ("reset", R), None, None),
    ("unknown/init-completing", UNKNOWN, ("init", R, S, A), ACK, None),
    ("unknown/init-partial", UNKNOWN, ("init", R, S, B), None, LedgerEntry(A ^ B, S, False)),
    ("unknown/ack-to-zero", UNKNOWN, ("ack", R, A), None, LedgerEntry(0, None, False)),
    ("unknown/ack", UNKNOWN, ("ack", R, B), None, LedgerEntry(A ^ B, None, False)),
    ("unknown/fail", UNKNOWN, ("fail", R), None, LedgerEntry(A, None, True)),
    ("unknown/reset", UNKNOWN, ("reset", R), None, LedgerEntry(A, None, False)),
    ("unknown-zero/init-zero", UNKNOWN_ZERO, ("init", R, S, 0), ACK, None),
    ("unknown-zero/init", UNKNOWN_ZERO, ("init", R, S, C), None, LedgerEntry(C, S, False)),
    ("unknown-failed/init", UNKNOWN_FAILED, ("init", R, S, A), FAIL, None),
    ("unknown-failed/ack", UNKNOWN_FAILED, ("ack", R, A), None, LedgerEntry(A, None, True)),
    ("unknown-failed/fail", UNKNOWN_FAILED, ("fail", R), None, LedgerEntry(0, None, True)),
    ("unknown-failed/reset", UNKNOWN_FAILED, ("reset", R), None, LedgerEntry(0, None, True)),
    # Failed and XORed to 0 at the init: the failure wins.
    ("unknown-failed-zero/init-zero", UNKNOWN_FAILED_ZERO, ("init", R, S, 0), FAIL, None),
    ("known/init-same-spout", KNOWN, ("init", R, S, C), None, LedgerEntry(A ^ B ^ C, S, False)),
    ("known/init-completing", KNOWN, ("init", R, S, A ^ B), ACK, None),
    ("known/ack", KNOWN, ("ack", R, A), None, LedgerEntry(B, S, False)),
    ("known/ack-adds-edges", KNOWN, ("ack", R, A ^ C), None, LedgerEntry(B ^ C, S, False)),
    ("known/ack-completing", KNOWN, ("ack", R, A ^ B), ACK, None),
    ("known/fail", KNOWN, ("fail", R), FAIL, None),
    ("known/reset", KNOWN, ("reset", R), None, LedgerEntry(A ^ B, S, False)),
]


@pytest.mark.parametrize(
    ("setup", "message", "returned", "after"),
    [row[1:] for row in MESSAGE_TABLE],
    ids=[row[0] for row in MESSAGE_TABLE],
)
def test_message_table(
    setup: list[Step], message: Step, returned: Outcome | None, after: LedgerEntry | None
) -> None:
    ledger = AckerLedger()
    for step in setup:
        assert apply(ledger, step) is None
    assert apply(ledger, message) == returned
    assert ledger.entry(R) == after
    assert len(ledger) == (0 if after is None else 1)
    assert (R in ledger) is (after is not None)
    assert ledger.ack_value(R) == (None if after is None else after.ack_val)


def test_init_by_a_second_spout_task_is_rejected_and_changes_nothing() -> None:
    ledger = AckerLedger()
    ledger.init(R, S, A ^ B)
    ledger.tick()  # the entry now sits in an older bucket
    with pytest.raises(ReliabilityError, match=r"spout task 7 and now by spout task 8"):
        ledger.init(R, 8, C)
    assert ledger.entry(R) == LedgerEntry(A ^ B, S, False)
    ledger.tick()
    assert ledger.tick() == [Outcome("timeout", R, S)]  # still in its old bucket


@pytest.mark.parametrize(
    "message",
    [
        ("init", R, S, 1 << 64),
        ("init", R, S, -1),
        ("init", R, -1, A),
        ("ack", R, 1 << 64),
        ("ack", R, -5),
    ],
)
def test_out_of_range_values_are_rejected(message: Step) -> None:
    ledger = AckerLedger()
    with pytest.raises(ReliabilityError, match=r"must be in \[0, 2\*\*64\)"):
        apply(ledger, message)
    assert len(ledger) == 0


def test_largest_values_round_trip() -> None:
    ledger = AckerLedger()
    top = (1 << 64) - 1
    big_task = 1 << 40  # beyond the 3-digit int; still correct, just larger
    assert ledger.init(R, big_task, top) is None
    assert ledger.entry(R) == LedgerEntry(top, big_task, False)
    assert ledger.ack(R, top) == Outcome("ack", R, big_task)


# -- time ------------------------------------------------------------------

T: Step = ("tick",)
TIMEOUT = [Outcome("timeout", R, S)]

# (name, script of (step, expected return), expected late_acks at the end)
TIMEOUT_TABLE: list[tuple[str, list[tuple[Step, object]], int]] = [
    (
        "init expires on the 3rd tick",
        [(("init", R, S, A), None), (T, []), (T, []), (T, TIMEOUT)],
        0,
    ),
    (
        "partial acks do not extend the timeout",
        [(("init", R, S, A ^ B), None), (T, []), (("ack", R, A), None), (T, []), (T, TIMEOUT)],
        0,
    ),
    (
        "reset_timeout restarts it",
        [
            *[(("init", R, S, A), None), (T, []), (T, []), (("reset", R), None)],
            *[(T, []), (T, []), (T, TIMEOUT)],
        ],
        0,
    ),
    (
        "reset_timeout of an entry in a middle bucket moves it to the newest",
        [
            *[(("init", R, S, A), None), (T, []), (("reset", R), None)],
            *[(T, []), (T, []), (T, TIMEOUT)],
        ],
        0,
    ),
    (
        "a fail before the init waits a full timeout for it",
        [(("fail", R), None), (T, []), (T, []), (("init", R, S, A), Outcome("fail", R, S))],
        0,
    ),
    (
        "reset_timeout of the newest entry keeps it",
        [(("init", R, S, A), None), (("reset", R), None), (T, []), (T, []), (T, TIMEOUT)],
        0,
    ),
    (
        "an init after an early ack restarts it",
        [
            *[(("ack", R, A), None), (T, []), (T, []), (("init", R, S, A ^ B), None)],
            *[(T, []), (T, []), (T, TIMEOUT)],
        ],
        0,
    ),
    ("an ack with no init expires silently", [(("ack", R, A), None), (T, []), (T, []), (T, [])], 1),
    ("a fail with no init expires silently", [(("fail", R), None), (T, []), (T, []), (T, [])], 1),
    (
        "a fail does not extend an early ack",
        [(("ack", R, A), None), (T, []), (T, []), (("fail", R), None), (T, [])],
        1,
    ),
    (
        "a late ack after completion is an orphan",
        [
            *[(("init", R, S, A), None), (("ack", R, A), Outcome("ack", R, S))],
            *[(("ack", R, B), None), (T, []), (T, []), (T, [])],
        ],
        1,
    ),
    ("reset of an unknown root creates nothing", [(("reset", R), None), (T, []), (T, [])], 0),
    (
        "a timed-out root is gone: later acks are orphans",
        [
            *[(("init", R, S, A), None), (T, []), (T, []), (T, TIMEOUT)],
            *[(("ack", R, A), None), (T, []), (T, []), (T, [])],
        ],
        1,
    ),
]


@pytest.mark.parametrize(
    ("script", "late_acks"),
    [row[1:] for row in TIMEOUT_TABLE],
    ids=[row[0] for row in TIMEOUT_TABLE],
)
def test_timeout_table(script: list[tuple[Step, object]], late_acks: int) -> None:
    ledger = AckerLedger()
    for i, (step, expected) in enumerate(script):
        assert apply(ledger, step) == expected, f"step {i}: {step}"
    assert ledger.late_acks == late_acks
    assert len(ledger) == 0


@pytest.mark.parametrize("buckets", [2, 3, 6])
def test_timeout_buckets_sets_the_expiry(buckets: int) -> None:
    ledger = AckerLedger(timeout_buckets=buckets)
    ledger.init(R, S, A)
    for _ in range(buckets - 1):
        assert ledger.tick() == []
    assert ledger.tick() == TIMEOUT


@pytest.mark.parametrize("buckets", [0, 1])
def test_fewer_than_two_timeout_buckets_is_rejected(buckets: int) -> None:
    with pytest.raises(ValueError, match="num_buckets >= 2"):
        AckerLedger(timeout_buckets=buckets)


def test_late_acks_counts_every_expired_orphan() -> None:
    ledger = AckerLedger(timeout_buckets=2)
    ledger.ack(1, A)
    ledger.fail(2)
    ledger.ack(3, B)
    ledger.tick()
    assert ledger.tick() == []
    assert ledger.late_acks == 3
    ledger.ack(4, A)
    ledger.tick()
    ledger.tick()
    assert ledger.late_acks == 4


def test_tick_reports_every_expired_root_in_write_order() -> None:
    ledger = AckerLedger(timeout_buckets=2)
    ledger.init(30, 3, A)
    ledger.ack(99, B)  # orphan
    ledger.init(10, 1, A)
    ledger.init(20, 2, B)
    ledger.ack(20, B)  # completes 20
    ledger.tick()
    ledger.init(40, 4, C)
    assert ledger.tick() == [Outcome("timeout", 30, 3), Outcome("timeout", 10, 1)]
    assert ledger.late_acks == 1
    assert len(ledger) == 1
    assert ledger.tick() == [Outcome("timeout", 40, 4)]


def test_clear_forgets_everything_but_keeps_counters() -> None:
    ledger = AckerLedger()
    ledger.ack(1, A)
    ledger.tick()
    ledger.tick()
    ledger.tick()
    assert ledger.late_acks == 1
    ledger.init(R, S, A)
    ledger.init(R + 1, S, B)
    ledger.clear()
    assert len(ledger) == 0
    assert ledger.entry(R) is None
    assert ledger.late_acks == 1
    # An ack in flight for a lost root is now an orphan, not a completion.
    assert ledger.ack(R, A) is None
    assert ledger.entry(R) == LedgerEntry(A, None, False)
    assert repr(ledger) == "AckerLedger(pending=1, late_acks=1)"


def test_interleaved_trees_in_one_ledger() -> None:
    ledger = AckerLedger()
    assert ledger.init(1, 0, A) is None
    assert ledger.init(2, 5, A ^ B) is None
    assert ledger.ack(2, A) is None
    assert ledger.ack(1, A ^ C) is None
    assert ledger.ack(2, B) == Outcome("ack", 2, 5)
    assert ledger.fail(1) == Outcome("fail", 1, 0)
    assert len(ledger) == 0


# -- ids and routing -------------------------------------------------------


@pytest.mark.parametrize(
    ("root", "n", "task"),
    [(0b1010, 2, 0), (0b1011, 2, 1), (17, 1, 0), (17, 5, 2), ((1 << 64) - 1, 3, 0), (9, 10, 9)],
)
def test_acker_task_for(root: int, n: int, task: int) -> None:
    assert acker_task_for(root, n) == task


@pytest.mark.parametrize("n", [0, -1])
def test_acker_task_for_needs_an_acker(n: int) -> None:
    with pytest.raises(
        ValueError,
        match=rf"n_ackers >= 1, got {n}; with topology\.acker\.executors: 0 tuples are "
        "not tracked at all$",
    ):
        acker_task_for(5, n)


class _ZerosFirst(random.Random):
    """A generator whose first two draws are 0; records how many bits each asked for."""

    def __init__(self) -> None:
        super().__init__(0)
        self.draws: list[int] = []

    def getrandbits(self, k: int) -> int:
        self.draws.append(k)
        return 0 if len(self.draws) <= 2 else 42


def test_new_id_retries_on_zero() -> None:
    rng = _ZerosFirst()
    assert new_id(rng) == 42
    assert rng.draws == [64, 64, 64]


def test_new_id_is_one_64_bit_draw_of_the_generator() -> None:
    assert new_id(random.Random(99)) == random.Random(99).getrandbits(64)


def test_new_id_is_a_nonzero_64_bit_value() -> None:
    rng = random.Random(1234)
    ids = [new_id(rng) for _ in range(2000)]
    assert all(0 < i < 1 << 64 for i in ids)
    assert len(set(ids)) == len(ids)
    assert max(ids).bit_length() > 60  # uses the full width
    assert ids[:2] == [new_id(r) for r in [random.Random(1234)] for _ in range(2)]
    assert 0 < new_id() < 1 << 64  # the module's shared generator


# -- any order of messages ---------------------------------------------------


@st.composite
def trees(draw: st.DrawFn) -> tuple[int, int, list[Step]]:
    """A random tuple tree as the acker messages it produces: (root, spout task, messages).

    Tuple ``i``'s parent is the spout (-1) or an earlier tuple. Edge ids have
    distinct highest bits, hence are linearly independent over XOR: the
    ack value of any proper, non-empty subset of the messages is non-zero,
    and the test checks the protocol rather than the odds of a collision.
    """
    n = draw(st.integers(1, 40))
    parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
    top_bits = draw(st.permutations(range(64)))[:n]
    edges = [
        (1 << bit) | (draw(st.integers(0, (1 << 64) - 1)) & ((1 << bit) - 1)) for bit in top_bits
    ]
    root = draw(st.integers(1, (1 << 64) - 1))
    spout = draw(st.integers(0, 1000))

    def children(parent: int) -> int:
        return reduce(xor, (e for e, p in zip(edges, parents, strict=True) if p == parent), 0)

    messages: list[Step] = [("init", root, spout, children(-1))]
    messages += [("ack", root, edges[i] ^ children(i)) for i in range(n)]
    return root, spout, messages


@given(tree=trees(), data=st.data())
def test_any_order_completes_exactly_once_at_the_last_message(
    tree: tuple[int, int, list[Step]], data: st.DataObject
) -> None:
    root, spout, messages = tree
    order = data.draw(st.permutations(messages))
    ledger = AckerLedger()
    results = [apply(ledger, step) for step in order]
    assert results[:-1] == [None] * (len(order) - 1)
    assert results[-1] == Outcome("ack", root, spout)
    assert len(ledger) == 0
    for _ in range(3):
        assert ledger.tick() == []
    assert ledger.late_acks == 0


@given(tree=trees(), data=st.data())
def test_one_failed_tuple_fails_the_tree_exactly_once(
    tree: tuple[int, int, list[Step]], data: st.DataObject
) -> None:
    root, spout, messages = tree
    victim = data.draw(st.integers(1, len(messages) - 1))  # a bolt tuple, not the init
    messages = [*messages[:victim], ("fail", root), *messages[victim + 1 :]]
    order = data.draw(st.permutations(messages))
    ledger = AckerLedger()
    results = [apply(ledger, step) for step in order]

    # The failure is reported once both the fail and the init have arrived.
    at = max(order.index(("fail", root)), next(i for i, m in enumerate(order) if m[0] == "init"))
    expected: list[object] = [None] * len(order)
    expected[at] = Outcome("fail", root, spout)
    assert results == expected
    # Whatever arrived afterwards is one orphan entry, dropped silently.
    orphans = 1 if at < len(order) - 1 else 0
    assert len(ledger) == orphans
    assert [ledger.tick() for _ in range(3)] == [[], [], []]
    assert ledger.late_acks == orphans
