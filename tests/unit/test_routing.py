"""The stable hash behind fields grouping: stable across processes, even, strict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from statestream import TupleError, stable_hash
from statestream._routing import Grouping, RouteChoice, custom_choose, task_for_key

KEYS = [f"key-{i}" for i in range(1000)]

# Pinned: these values must never change, or state keyed by task (and every
# deployed topology's routing) would move. Update only with a migration plan.
PINNED = [
    ("word", 16415117739589131349),
    (b"word", 16415117739589131349),
    ("", 3244421341483603138),
    ("ünïcode", 12946727013839246983),
    (0, 1838281907459330133),
    (1, 7335560060985733464),
    (-1, 13557426653709967903),
    (1.5, 4395630882975600878),
    (None, 13224177006683112673),
    (True, 4664556114322093609),
    (["a", 1], 17403372543017502504),
    ({"b": 1, "a": 2}, 9692768300222170116),
]


@pytest.mark.parametrize(("value", "expected"), PINNED, ids=[repr(v) for v, _ in PINNED])
def test_stable_hash_values_are_pinned(value: Any, expected: int) -> None:
    assert stable_hash(value) == expected


def test_stable_hash_is_the_same_in_another_process_with_another_hash_seed() -> None:
    script = (
        "import json, sys\n"
        "from statestream._routing import task_for_key\n"
        "keys = json.load(sys.stdin)\n"
        "print(json.dumps({str(n): [task_for_key(k, n) for k in keys] for n in (2, 3, 5, 8)}))\n"
    )
    here = {str(n): [task_for_key(k, n) for k in KEYS] for n in (2, 3, 5, 8)}
    for seed in ("1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(KEYS),
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=60,
        )
        assert json.loads(out.stdout) == here
    # And Python's own hash() really does differ between those processes,
    # so the comparison above would have caught a salted hash.
    salted = [
        subprocess.run(
            [sys.executable, "-c", "print(hash('key-1'))"],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
            timeout=60,
        ).stdout
        for seed in ("1", "12345")
    ]
    assert salted[0] != salted[1]


def chi_square(counts: Counter[int], n: int, total: int) -> float:
    expected = total / n
    return sum((counts.get(i, 0) - expected) ** 2 / expected for i in range(n))


@pytest.mark.parametrize("n", range(2, 9))
@pytest.mark.parametrize(
    "keys",
    [
        [f"user-{i}" for i in range(10_000)],
        list(range(10_000)),
        [f"{i:04d}" for i in range(10_000)],  # short keys differing in one char
        [[i % 100, f"k{i // 100}"] for i in range(10_000)],  # multi-field keys
    ],
    ids=["prefixed", "ints", "short", "lists"],
)
def test_keys_spread_evenly_over_tasks(keys: list[Any], n: int) -> None:
    counts = Counter(task_for_key(k, n) for k in keys)
    assert set(counts) == set(range(n))
    # The 99.9th percentile of chi-square with 7 degrees of freedom is 24.3;
    # a biased hash (CRC32 on short keys, say) lands in the hundreds.
    assert chi_square(counts, n, len(keys)) < 25
    assert max(counts.values()) < 1.1 * len(keys) / n


def test_equal_keys_hash_equal_whatever_their_container_or_key_order() -> None:
    assert stable_hash(["a", 1]) == stable_hash(("a", 1))
    assert stable_hash({"a": 1, "b": [2]}) == stable_hash({"b": [2], "a": 1})
    assert stable_hash("x") == stable_hash(b"x")
    # A big int hashes its JSON text (not a truncated or salted form of it).
    assert stable_hash(10**18) == xxhash.xxh3_64_intdigest(b"1000000000000000000")
    assert stable_hash(10**18) != stable_hash(10**18 + 1)
    assert stable_hash(1) != stable_hash(1.0) and stable_hash(1) != stable_hash(True)
    assert stable_hash(["a", 1]) != stable_hash(["a", "1"])


@given(st.text(), st.integers(min_value=1, max_value=64))
def test_any_text_key_routes_like_its_utf8_bytes(key: str, n: int) -> None:
    # The runtime's fast path hashes str keys by their UTF-8 bytes: it must agree.
    assert stable_hash(key) == stable_hash(key.encode()) == xxhash.xxh3_64_intdigest(key.encode())
    assert 0 <= task_for_key(key, n) < n


def test_task_for_key_is_the_hash_modulo_the_task_count() -> None:
    for key in ("a", 17, ["x", 2]):
        for n in range(1, 9):
            assert task_for_key(key, n) == stable_hash(key) % n
            assert 0 <= task_for_key(key, n) < n


@pytest.mark.parametrize(
    "value",
    [object(), {1, 2}, 1 + 2j, 2**70, ["ok", object()], bytearray(b"x")],
    ids=["object", "set", "complex", "int>64bit", "nested", "bytearray"],
)
def test_unroutable_values_raise_tuple_error_naming_the_value(value: Any) -> None:
    with pytest.raises(TupleError, match=r"cannot route on .* fields grouping keys must be"):
        stable_hash(value)


def test_a_string_that_is_not_utf8_is_unroutable() -> None:
    with pytest.raises(
        TupleError, match=r"cannot route on '\\ud800' \(str\): it is not valid UTF-8"
    ):
        stable_hash("\ud800")
    with pytest.raises(TupleError, match="cannot route on"):
        stable_hash(["\ud800"])


class Pick:
    def __init__(self, tasks: list[Any]) -> None:
        self.tasks = tasks

    def choose_tasks(self, values: Any, n_tasks: int) -> list[Any]:
        return self.tasks


def test_custom_choose_checks_the_chosen_tasks() -> None:
    assert custom_choose(Pick([0, 2]), ["v"], 3) == [0, 2]
    assert custom_choose(Pick([]), ["v"], 3) == []
    for bad in (3, -1, "0", 1.0):
        with pytest.raises(TupleError, match=r"custom grouping Pick chose task .*from 0\.\.2"):
            custom_choose(Pick([bad]), ["v"], 3)


def test_grouping_describe() -> None:
    assert Grouping("fields", ("a", "b")).describe() == "fields['a', 'b']"
    assert Grouping("shuffle").describe() == "shuffle"


class _EveryOther:
    def choose_tasks(self, values: Any, n_tasks: int) -> list[int]:
        return list(range(0, n_tasks, 2))


# (kind, key, custom, task ids, start, [(values, direct)...], expected choices): the
# route choice of every runtime, one row per grouping kind and case.
ROUTE_TABLE: list[tuple[str, Any, Any, tuple[int, ...], int, list[Any], list[list[int]]]] = [
    ("shuffle", None, None, (7, 8, 9), 0, [(["a"], None)] * 4, [[0], [1], [2], [0]]),
    ("shuffle", None, None, (7, 8, 9), 2, [(["a"], None)] * 3, [[2], [0], [1]]),
    ("shuffle", None, None, (7, 8, 9), 4, [(["a"], None)] * 2, [[1], [2]]),
    ("none", None, None, (7, 8), 1, [(["a"], None)] * 3, [[1], [0], [1]]),
    (
        "fields",
        0,
        None,
        (3, 4, 5, 6, 7),
        3,
        [([k, 1], None) for k in ("apple", "pear", 17)],
        [[task_for_key(k, 5)] for k in ("apple", "pear", 17)],
    ),
    (
        "fields",
        (1, 0),
        None,
        (3, 4, 5),
        0,
        [(["x", "y"], None), (["y", "x"], None)],
        [[task_for_key(["y", "x"], 3)], [task_for_key(["x", "y"], 3)]],
    ),
    ("global", None, None, (7, 8, 9), 2, [(["a"], None), (["b"], None)], [[0], [0]]),
    ("all", None, None, (7, 8, 9), 1, [(["a"], None)], [[0, 1, 2]]),
    ("direct", None, None, (7, 8, 9), 0, [(["a"], 9), (["a"], 7), (["a"], 4)], [[2], [0], []]),
    ("custom", None, _EveryOther(), (7, 8, 9, 10, 11), 0, [(["a"], None)], [[0, 2, 4]]),
]


@pytest.mark.parametrize(
    ("kind", "key", "custom", "task_ids", "start", "tuples", "expected"),
    ROUTE_TABLE,
    ids=[f"{row[0]}-{i}" for i, row in enumerate(ROUTE_TABLE)],
)
def test_route_choice_table(
    kind: str,
    key: Any,
    custom: Any,
    task_ids: tuple[int, ...],
    start: int,
    tuples: list[Any],
    expected: list[list[int]],
) -> None:
    route = RouteChoice("bolt", kind, key, custom, task_ids, start)
    assert [route.choose(values, direct) for values, direct in tuples] == expected
    assert route.target == "bolt"
    assert route.index_of_task == {tid: i for i, tid in enumerate(task_ids)}


def test_route_choice_fields_agrees_with_the_stable_hash_of_the_value_for_many_keys() -> None:
    # One field routes on the value itself (not a one-element list), as the
    # local runtime's one-field fast path does: the same task on every runtime.
    route = RouteChoice("bolt", "fields", 0, None, tuple(range(10, 17)))
    assert [route.choose([k], None) for k in KEYS] == [
        [xxhash.xxh3_64_intdigest(k.encode()) % 7] for k in KEYS
    ]


def test_route_choice_custom_grouping_out_of_range_is_a_tuple_error() -> None:
    class Wrong:
        def choose_tasks(self, values: Any, n_tasks: int) -> list[int]:
            return [n_tasks]

    with pytest.raises(TupleError, match="chose task 2"):
        RouteChoice("bolt", "custom", None, Wrong(), (5, 6)).choose(["a"], None)
