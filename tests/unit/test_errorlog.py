"""The error log (statestream.runtime.errorlog): one formatter, logged once then counted."""

from __future__ import annotations

import logging
from collections import deque

import pytest

from statestream._results import ErrorReport
from statestream.runtime.errorlog import (
    TRACEBACK_LIMIT,
    ErrorLog,
    error_parts,
    error_report,
    is_power_of_ten,
    signature,
)

LOGGER = "statestream.test_errorlog"


def raised(exc: BaseException) -> BaseException:
    try:
        raise exc
    except BaseException as caught:
        return caught


def raise_here() -> BaseException:
    try:
        raise ValueError("here")
    except ValueError as exc:
        return exc


def raise_there() -> BaseException:
    try:
        raise ValueError("here")  # the same error, raised at another line
    except ValueError as exc:
        return exc


@pytest.mark.parametrize(
    ("n", "logged"),
    [(1, True), (2, False), (9, False), (10, True), (11, False), (100, True), (110, False),
     (1000, True), (1001, False), (20, False)],
)  # fmt: skip
def test_the_repeats_logged_are_the_powers_of_ten(n: int, logged: bool) -> None:
    assert is_power_of_ten(n) is logged


def test_a_report_cuts_the_value_and_the_message_and_keeps_the_traceback() -> None:
    exc = raised(ValueError("x" * 1000))
    what, error, tb = error_parts(exc, "v" * 500)
    assert what == "v" * 200 + "... (500 characters)"
    assert error.startswith("ValueError('xxx") and "characters cut" in error
    assert error.endswith("xxx')")
    assert tb.startswith("Traceback (most recent call last):")
    assert tb.endswith("ValueError: " + "x" * 1000 + "\n")


def test_short_texts_are_kept_as_they_are() -> None:
    exc = raised(ValueError("seven is unlucky"))
    report = error_report("count", 2, exc, "Tuple(src[0]:default [7])")
    assert report.component == "count" and report.task_index == 2
    assert report.tuple == "Tuple(src[0]:default [7])"
    assert report.error == "ValueError('seven is unlucky')"
    assert "seven is unlucky" in report.traceback


def test_a_limit_keeps_the_end_of_the_traceback() -> None:
    exc = raised(ValueError("y" * (TRACEBACK_LIMIT + 10)))
    _, _, tb = error_parts(exc, "t", TRACEBACK_LIMIT)
    assert len(tb) == TRACEBACK_LIMIT
    assert tb.endswith("y\n")


def test_the_signature_is_the_task_the_type_and_the_place() -> None:
    here, here_again, there = raise_here(), raise_here(), raise_there()
    assert signature("a", 0, here) == signature("a", 0, here_again)
    assert signature("a", 0, here) != signature("a", 0, there)
    assert signature("a", 0, here) != signature("a", 1, here)
    assert signature("a", 0, here) != signature("b", 0, here)
    assert signature("a", 0, ValueError("never raised"))[3] == ()


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_an_error_is_logged_with_its_traceback_once_then_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reports: deque[ErrorReport] = deque(maxlen=5)
    errors = ErrorLog(logging.getLogger(LOGGER), reports)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        for _ in range(12):
            errors.report("count", 1, raise_here(), ("a",))
        errors.log_repeats()
        errors.log_repeats()  # the counts were forgotten: nothing more
    first, tenth, total = messages(caplog)
    assert first.startswith("count[1] raised ValueError('here') while processing ('a',)\n")
    assert "Traceback (most recent call last):" in first
    assert tenth == "count[1] raised ValueError again: 10 times so far (traceback above)"
    assert total == "count[1] raised ValueError 12 times in all (traceback above)"
    assert len(reports) == 5  # the container's bound holds


def test_a_count_just_logged_is_not_logged_again_at_the_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    errors = ErrorLog(logging.getLogger(LOGGER), [])
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        for _ in range(10):
            errors.report("count", 0, raise_here(), None)
        errors.report("split", 0, raise_here(), None)  # another task: its own first time
        errors.log_repeats()
    assert [m.split("\n")[0] for m in messages(caplog)] == [
        "count[0] raised ValueError('here') while processing None",
        "count[0] raised ValueError again: 10 times so far (traceback above)",
        "split[0] raised ValueError('here') while processing None",
    ]


def test_record_keeps_the_report_and_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    reports: list[ErrorReport] = []
    errors = ErrorLog(logging.getLogger(LOGGER), reports)
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        report = errors.record("src", -1, raise_here(), "next_tuple()")
        errors.log_repeats()
    assert reports == [report]
    assert report.tuple == "'next_tuple()'"  # what raised, in its repr
    assert messages(caplog) == []
