"""Cutting text: values are cut at their end, messages keep their end (the fix)."""

from __future__ import annotations

import pytest

from statestream._text import MESSAGE_LIMIT, count, cut_message, cut_value, error_line, one_line

FIX = "put value.isoformat() and parse it after get"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("short", 10, "short"),
        ("x" * 10, 10, "x" * 10),
        ("x" * 11, 10, "x" * 10 + "... (11 characters)"),
        ("y" * 2000, 5, "yyyyy... (2,000 characters)"),
    ],
)
def test_cut_value_keeps_the_head_and_says_the_length(text: str, limit: int, expected: str) -> None:
    assert cut_value(text, limit) == expected


@pytest.mark.parametrize(
    "text",
    [
        f"cannot store a value of type 'datetime' as JSON: {FIX}. " + "Store JSON types " * 8,
        "state 'dt/put-0': cannot put key " + repr("k" * 5000) + f": {FIX}",
        "ValueError: " + "line\n" * 400 + FIX,
    ],
)
def test_a_message_keeps_its_end_and_fits_the_limit(text: str) -> None:
    got = cut_message(text)
    assert len(got) <= MESSAGE_LIMIT + 40
    assert "\n" not in got
    assert got.endswith(one_line(text)[-100:])
    assert FIX in got or len(text) <= MESSAGE_LIMIT


def test_a_message_within_the_limit_is_whole_on_one_line() -> None:
    text = "cannot reach redis at h:1 to claim topology 'w':\n  refused; check that the server runs"
    assert cut_message(text) == one_line(text)
    assert cut_message("a" * MESSAGE_LIMIT) == "a" * MESSAGE_LIMIT


def test_a_cut_message_says_how_much_went() -> None:
    got = cut_message("a" * 100 + "b" * 1000 + "c" * 100, limit=300)
    assert got == "a" * 100 + " ... (900 characters cut) ... " + "b" * 100 + "c" * 100


def test_error_line_names_the_type() -> None:
    assert error_line(KeyError("k")) == "KeyError: 'k'"
    long = error_line(ValueError("v" * 3000 + " then do this"))
    assert long.startswith("ValueError: vvv") and long.endswith("v then do this")


@pytest.mark.parametrize(
    ("n", "noun", "plural", "expected"),
    [
        (0, "task", None, "0 tasks"),
        (1, "task", None, "1 task"),
        (2, "task", None, "2 tasks"),
        (1200, "error", None, "1,200 errors"),
        (1, "dead letter", None, "1 dead letter"),
        (3, "index", "indices", "3 indices"),
    ],
)
def test_count_says_one_in_the_singular(
    n: int, noun: str, plural: str | None, expected: str
) -> None:
    assert count(n, noun, plural) == expected
