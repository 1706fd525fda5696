"""The partitioned-source planner and the line range reader (statestream._partitioned)."""

from __future__ import annotations

import io
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from statestream._partitioned import (
    Range,
    placed_at,
    places_of,
    plan_ranges,
    read_lines,
    split_range,
)
from statestream.connectors.kafka import KafkaSpout

ORDER = ["a", "b", "c"]


@pytest.mark.parametrize(
    ("starts", "ends", "limit", "expected"),
    [
        # Nothing stored: every partition from 0 to its end.
        ({}, {"a": 5, "b": 0, "c": 3}, None, [Range("a", 0, 5), Range("c", 0, 3)]),
        # Stored positions: from there; a partition at its end is left out.
        ({"a": 5, "b": 2}, {"a": 5, "b": 9, "c": 3}, None, [Range("b", 2, 9), Range("c", 0, 3)]),
        # A cap: the first partitions first, the last range cut.
        ({}, {"a": 5, "b": 4, "c": 3}, 7, [Range("a", 0, 5), Range("b", 0, 2)]),
        ({"a": 4}, {"a": 5, "b": 4, "c": 3}, 1, [Range("a", 4, 5)]),
        ({"a": 5}, {"a": 5, "b": 4, "c": 3}, 4, [Range("b", 0, 4)]),
        # Everything read: no range.
        ({"a": 5, "b": 4, "c": 3}, {"a": 5, "b": 4, "c": 3}, 10, []),
        # Opaque positions (stream ids) are taken whole, and cost no cap.
        (
            {"a": "1-0"},
            {"a": "9-0", "b": "3-0", "c": 2},
            1,
            [Range("a", "1-0", "9-0"), Range("b", None, "3-0"), Range("c", 0, 1)],
        ),
        ({"a": "9-0"}, {"a": "9-0", "b": None, "c": 0}, None, []),
    ],
)
def test_plan_ranges(
    starts: dict[str, Any], ends: dict[str, Any], limit: int | None, expected: list[Range]
) -> None:
    assert plan_ranges(starts, ends, ORDER, limit) == expected


def test_the_partitions_places_are_under_partitions_or_where_the_spout_says() -> None:
    flat = {"path": "/in/", "partitions": {"a": 5, "b": 0}, "replay": []}
    assert places_of(object(), flat) == {"a": 5, "b": 0}
    assert placed_at(object(), flat, {"b": 9}) == {**flat, "partitions": {"a": 5, "b": 9}}
    # KafkaSpout nests its offsets by topic; the driver plans by partition name.
    spout = KafkaSpout(["t", "u"])
    nested = {"offsets": {"t": {"0": 5}, "u": {"1": 2}}, "replay": [["t", 0, 1]], "tasks": 2}
    assert places_of(spout, nested) == {"t/0": 5, "u/1": 2}
    assert placed_at(spout, nested, {"t/1": 7, "u/1": 4}) == {
        "offsets": {"t": {"0": 5, "1": 7}, "u": {"1": 4}},
        "replay": [["t", 0, 1]],
        "tasks": 2,
    }


def test_plan_refuses_an_end_before_its_start() -> None:
    with pytest.raises(ValueError, match="'a' ends at 3, before 5"):
        plan_ranges({"a": 5}, {"a": 3}, ["a"])


@pytest.mark.parametrize(
    ("r", "pieces", "expected"),
    [
        (Range("a", 0, 10), 1, [(0, 10)]),
        (Range("a", 0, 10), 2, [(0, 5), (5, 10)]),
        (Range("a", 4, 11), 3, [(4, 6), (6, 8), (8, 11)]),
        (Range("a", 0, 2), 5, [(0, 1), (1, 2)]),
        (Range("a", "1-0", "5-0"), 4, [("1-0", "5-0")]),
    ],
)
def test_split_range(r: Range, pieces: int, expected: list[tuple[Any, Any]]) -> None:
    assert [(p.start, p.end) for p in split_range(r, pieces)] == expected
    assert all(p.partition == r.partition for p in split_range(r, pieces))


def lines_of(data: bytes, cuts: list[int]) -> list[tuple[int, bytes]]:
    f = io.BytesIO(data)
    bounds = [0, *cuts, len(data)]
    out: list[tuple[int, bytes]] = []
    for a, b in pairwise(bounds):
        out.extend(read_lines(f, a, b))
    return out


def all_lines(data: bytes) -> list[tuple[int, bytes]]:
    out, pos = [], 0
    for raw in io.BytesIO(data):
        out.append((pos, raw))
        pos += len(raw)
    return out


@pytest.mark.parametrize(
    ("data", "cuts"),
    [
        (b"ab\ncd\nef\n", [3]),  # a cut at a line's first byte
        (b"ab\ncd\nef\n", [2]),  # a cut at a newline
        (b"ab\ncd\nef\n", [1, 4, 8]),  # cuts inside lines
        (b"ab\ncd\nef", [7]),  # no newline at the end
        (b"\n\n\n", [1, 2]),  # empty lines
        (b"abcdef\n", [1, 2, 3]),  # several cuts in one line: one range reads it
        (b"", []),
    ],
)
def test_every_line_once(data: bytes, cuts: list[int]) -> None:
    assert lines_of(data, cuts) == all_lines(data)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([b"a", b"b", b"\n", b"\r", b"\xc3\xa9"]), max_size=60).map(b"".join),
    st.lists(st.integers(min_value=0, max_value=70), max_size=8),
)
def test_every_line_once_for_any_cuts(data: bytes, cuts: list[int]) -> None:
    assert lines_of(data, sorted({c for c in cuts if c <= len(data)})) == all_lines(data)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from([b"xy", b"z", b"\n"]), max_size=40).map(b"".join),
    st.integers(min_value=1, max_value=9),
)
def test_split_ranges_read_every_line_once(data: bytes, pieces: int) -> None:
    f = io.BytesIO(data)
    got = [
        line
        for r in split_range(Range("f", 0, len(data)), pieces)
        for line in read_lines(f, r.start, r.end)
    ]
    assert got == all_lines(data)
