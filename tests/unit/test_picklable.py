"""statestream._picklable: which emitted values every runtime refuses, and the error."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from statestream._errors import RuntimeFailure, SourceError, UnpicklableTupleError
from statestream._picklable import check_first, run_ending, unpicklable


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["word", 1, 2.5, b"raw", None, True],
        [[1, 2], {"a": (1, 2)}, {3, 4}, frozenset({5})],
        [RuntimeFailure("picklable objects too")],
    ],
)
def test_plain_values_pass(values: list[Any]) -> None:
    assert unpicklable("split", 0, "default", values) is None
    check_first("split", 0, "default", values)


@pytest.mark.parametrize(
    ("values", "kind"),
    [
        (["ok", threading.Lock()], "a lock"),
        ([(x for x in ()), threading.Lock()], "a generator"),  # the first bad one is named
        ([lambda: 1], "a function"),  # cloudpickle could; pickle, which workers use, cannot
        ([{"nested": threading.Lock()}], "a dict"),
    ],
)
def test_the_first_unpicklable_value_is_named(values: list[Any], kind: str) -> None:
    error = unpicklable("split", 1, "words", values, " to count[0] in another worker")
    assert isinstance(error, UnpicklableTupleError)
    text = str(error)
    assert text.startswith(
        f"component 'split' task 1 emitted on stream 'words' to count[0] in another worker "
        f"{kind} that cannot be pickled ("
    )
    assert text.endswith(
        "emit plain data (str, int, float, bytes, lists, dicts) or picklable objects"
    )
    with pytest.raises(UnpicklableTupleError, match=f"emitted on stream 'words' {kind} "):
        check_first("split", 1, "words", values)


@pytest.mark.parametrize(
    ("error_type", "expected"),
    [
        ("UnpicklableTupleError", UnpicklableTupleError),
        ("SourceError", SourceError),
        ("RuntimeFailure", RuntimeFailure),
        ("TupleError", None),  # a tuple's failure, retried
        ("ValueError", None),  # a user's error
        ("FailedException", None),
        ("annotations", None),  # a name in the module that is no class
        ("NoSuchError", None),
    ],
)
def test_run_ending_rebuilds_only_runtime_failures(error_type: str, expected: type | None) -> None:
    got = run_ending(error_type, "the message, whole")
    if expected is None:
        assert got is None
    else:
        assert type(got) is expected and str(got) == "the message, whole"
