"""Read-ahead's decisions (statestream._kvprefetch): which key a tuple will read, and
when a guess is judged wrong."""

from __future__ import annotations

from typing import Any

import pytest

from statestream import Fields
from statestream._kvprefetch import JUDGE_WINDOW, ReadAheadJudge, key_guess
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


@pytest.mark.parametrize(
    ("drains", "on"),
    [
        ([], True),
        ([(JUDGE_WINDOW, 0)], True),  # right: every read a hit
        ([(JUDGE_WINDOW, JUDGE_WINDOW)], False),  # wrong: the drain missed as much again
        ([(JUDGE_WINDOW, JUDGE_WINDOW // 2)], True),  # half: not beyond the share
        ([(JUDGE_WINDOW, JUDGE_WINDOW // 2 + 1)], False),
        ([(JUDGE_WINDOW - 1, JUDGE_WINDOW)], True),  # not judged before a window
        ([(JUDGE_WINDOW - 1, JUDGE_WINDOW), (1, 0)], False),
        # windows are judged apart: a good one forgives nothing later
        ([(JUDGE_WINDOW, 0), (JUDGE_WINDOW, JUDGE_WINDOW)], False),
        ([(JUDGE_WINDOW, JUDGE_WINDOW * 2 // 3), (JUDGE_WINDOW, 0)], False),  # off for good
    ],
)
def test_the_judge(drains: list[tuple[int, int]], on: bool) -> None:
    judge = ReadAheadJudge()
    for fetched, missed in drains:
        judge.drained(fetched, missed)
    assert judge.on is on
