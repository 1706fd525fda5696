"""Read-ahead's decisions (statestream._kvprefetch): which key a tuple will read, and
when a guess is judged wrong."""

from __future__ import annotations

from typing import Any

import pytest

from statestream import Fields
from statestream._kvprefetch import (
    JUDGE_WINDOW,
    MOST_QUIET,
    WAKE_MISSES,
    ReadAheadJudge,
    key_guess,
)
from statestream._tuple import Origin, Tuple


def _tuple(component: str, stream: str, fields: list[str], values: list[Any]) -> Tuple:
    return Tuple(values, Origin(component, 1, 0, stream, Fields(fields)), None, 0, 0, 0)


WORD = ("split", "default", "fields", ("word",))


@pytest.mark.parametrize(
    ("state_key", "inputs", "tuples", "keys"),
    [
        # the default: the field every input is fields-grouped on
        (None, [WORD], [("split", "default", ["n", "word"], [1, "a"])], ["a"]),
        # each input by its own field, where the names differ
        (
            None,
            [WORD, ("other", "s", "fields", ("name",))],
            [
                ("split", "default", ["word"], ["a"]),
                ("other", "s", ["name", "x"], ["b", 0]),
            ],
            ["a", "b"],
        ),
        # the bolt names the field, whatever the grouping
        ("id", [("split", "default", "shuffle", ())], [("split", "default", ["id"], [7])], [7]),
        # a function of the tuple
        (lambda t: ("k", t[0]), [WORD], [("split", "default", ["word"], ["a"])], [("k", "a")]),
    ],
)
def test_the_guessed_key(
    state_key: Any, inputs: list[Any], tuples: list[Any], keys: list[Any]
) -> None:
    guess = key_guess(state_key, inputs)
    assert guess is not None
    assert [guess(_tuple(*t)) for t in tuples] == keys


@pytest.mark.parametrize(
    ("state_key", "inputs"),
    [
        (False, [WORD]),  # the bolt says no
        (None, [("split", "default", "shuffle", ())]),  # any key may be read
        (None, [WORD, ("other", "default", "global", ())]),  # one input is not by a field
        (None, [("split", "default", "fields", ("a", "b"))]),  # the key of two fields is not one
        (None, []),  # no data input
    ],
)
def test_no_guess(state_key: Any, inputs: list[Any]) -> None:
    assert key_guess(state_key, inputs) is None


W = JUDGE_WINDOW


@pytest.mark.parametrize(
    ("drains", "on"),
    [
        ([], True),
        ([(W, 0)], True),  # right: every read a hit
        ([(W, W)], False),  # wrong: the drain missed as much again
        ([(W, W // 2)], True),  # half: not beyond the share
        ([(W, W // 2 + 1)], False),
        ([(W // 2, W // 2 - 1)], True),  # not judged before a window of reads and misses
        ([(W // 2, W // 2 - 1), (0, 1)], False),
        ([(0, W)], False),  # nothing read ahead (new keys, say) while the tuples miss
        # windows are judged apart: a good one forgives nothing later
        ([(W, 0), (W, W)], False),
        ([(W, W * 2 // 3), (W, 0)], False),  # off for good
    ],
)
def test_a_wrong_guess_is_turned_off(drains: list[tuple[int, int]], on: bool) -> None:
    judge = ReadAheadJudge()
    for fetched, missed in drains:
        if not judge.wants():
            break  # off: no drain reads ahead any more
        judge.drained(True, fetched, missed)
    assert judge.on is on
    assert judge.wants() is on


# Each drain: what it would read ahead and what it then misses if it reads ahead,
# and what it misses if it does not; the drains that read ahead.
Q = (0, 0, 0)  # a quiet drain: nothing to read either way
MISSY = (20, 0, 20)  # keys to read: hits if read ahead, else misses


@pytest.mark.parametrize(
    ("drains", "ahead"),
    [
        ([MISSY] * 3, [True] * 3),
        # quiet drains skip 1, then 2, then 4 drains
        ([Q] * 8, [True, False, True, False, False, True, False, False]),
        # a skipped drain that misses wakes read-ahead at once
        ([Q, MISSY, MISSY, Q], [True, False, True, True]),
        # a skipped drain that misses a little does not
        ([Q, Q, Q, (20, 0, WAKE_MISSES - 1), Q, Q], [True, False, True, False, False, True]),
        # the back-off stops at MOST_QUIET drains
        ([Q] * 400, None),
    ],
)
def test_quiet_drains_skip_read_ahead(
    drains: list[tuple[int, int, int]], ahead: list[bool] | None
) -> None:
    judge = ReadAheadJudge()
    seen = []
    for fetched, missed_ahead, missed in drains:
        wants = judge.wants()
        seen.append(wants)
        if wants:
            judge.drained(True, fetched, missed_ahead)
        else:
            judge.drained(False, 0, missed)
    if ahead is not None:
        assert seen == ahead
    else:
        gaps, last = [], 0
        for i, wants in enumerate(seen):
            if wants:
                gaps.append(i - last)
                last = i
        assert max(gaps) == MOST_QUIET + 1
    assert judge.on
