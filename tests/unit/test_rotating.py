"""RotatingMap: bucketed expiry driven by explicit rotations."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statestream._rotating import RotatingMap


@pytest.mark.parametrize("num_buckets", [0, 1, -3])
def test_rejects_fewer_than_two_buckets(num_buckets: int) -> None:
    with pytest.raises(ValueError) as info:
        RotatingMap(num_buckets)
    assert str(info.value) == (
        f"RotatingMap needs num_buckets >= 2, got {num_buckets}; "
        "with n buckets an entry lives between (n-1) and n tick periods"
    )


def test_default_has_three_buckets() -> None:
    assert RotatingMap().num_buckets == 3


@pytest.mark.parametrize("num_buckets", [2, 3, 5])
def test_entry_expires_on_the_nth_rotation_after_its_put(num_buckets: int) -> None:
    expired: list[tuple[str, int]] = []
    m: RotatingMap[str, int] = RotatingMap(num_buckets, lambda k, v: expired.append((k, v)))
    m.put("a", 1)
    for _ in range(num_buckets - 1):
        assert m.rotate() == []
        assert m.get("a") == 1
    assert m.rotate() == [("a", 1)]
    assert expired == [("a", 1)]
    assert "a" not in m
    assert len(m) == 0


@pytest.mark.parametrize("num_buckets", [2, 3, 4])
def test_put_restarts_the_expiry(num_buckets: int) -> None:
    m: RotatingMap[str, int] = RotatingMap(num_buckets)
    m.put("a", 1)
    for _ in range(num_buckets - 1):
        m.rotate()
    m.put("a", 2)  # now in the newest bucket again, with the new value
    for _ in range(num_buckets - 1):
        assert m.rotate() == []
    assert m.rotate() == [("a", 2)]


def test_put_moves_the_key_instead_of_duplicating_it() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("a", 1)
    m.rotate()
    m.put("a", 2)
    assert len(m) == 1
    assert list(m.items()) == [("a", 2)]
    m.rotate()
    m.rotate()
    assert m.rotate() == [("a", 2)]  # the old copy did not expire separately


def test_put_new_stores_in_the_newest_bucket_without_searching() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put_new("a", 1)
    m.rotate()
    m.put_new("b", 2)
    assert list(m.items()) == [("b", 2), ("a", 1)]
    assert m.rotate() == []
    assert m.rotate() == [("a", 1)]  # "a" expires on its own schedule, "b" one tick later
    assert m.rotate() == [("b", 2)]


# (operations before the lookup, key looked up, expected get, expected contains)
LOOKUPS = [
    ([], "x", None, False),
    ([("put", "x", 1)], "x", 1, True),
    ([("put", "x", 1), ("rotate",)], "x", 1, True),
    ([("put", "x", 1), ("rotate",), ("rotate",)], "x", 1, True),
    ([("put", "x", 1), ("rotate",), ("rotate",), ("rotate",)], "x", None, False),
    ([("put", "x", 1), ("pop", "x")], "x", None, False),
    ([("put", "x", 1), ("rotate",), ("pop", "x")], "x", None, False),
    ([("put", "x", 1), ("put", "x", 2)], "x", 2, True),
    ([("put", "x", 1), ("rotate",), ("put", "x", 2)], "x", 2, True),
    ([("put", "x", 1), ("clear",)], "x", None, False),
    ([("put", "y", 1)], "x", None, False),
]


@pytest.mark.parametrize(("ops", "key", "value", "present"), LOOKUPS)
def test_lookup_table(
    ops: list[tuple[object, ...]], key: str, value: int | None, present: bool
) -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    for op in ops:
        if op[0] == "put":
            m.put(op[1], op[2])  # type: ignore[arg-type]
        elif op[0] == "pop":
            m.pop(op[1])  # type: ignore[arg-type]
        elif op[0] == "rotate":
            m.rotate()
        else:
            m.clear()
    assert m.get(key) == value
    assert (key in m) is present


def test_get_and_pop_defaults() -> None:
    m: RotatingMap[str, int] = RotatingMap(2)
    assert m.get("a", 7) == 7
    assert m.pop("a", 8) == 8
    assert m.pop("a") is None


def test_none_is_a_storable_value() -> None:
    m: RotatingMap[str, None] = RotatingMap(2)
    m.put("a", None)
    assert "a" in m
    assert m.get("a", None) is None
    assert len(m) == 1
    assert m.rotate() == []
    assert m.rotate() == [("a", None)]


def test_pop_from_an_older_bucket_returns_the_value() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("a", 1)
    m.rotate()
    m.rotate()
    assert m.pop("a") == 1
    assert len(m) == 0
    assert m.rotate() == []


def test_rotate_returns_pairs_in_write_order_and_calls_back_for_each() -> None:
    calls: list[tuple[str, int]] = []
    m: RotatingMap[str, int] = RotatingMap(2, lambda k, v: calls.append((k, v)))
    m.put("b", 2)
    m.put("a", 1)
    m.put("c", 3)
    m.rotate()
    m.put("d", 4)  # newer cohort: survives the next rotation
    assert m.rotate() == [("b", 2), ("a", 1), ("c", 3)]
    assert calls == [("b", 2), ("a", 1), ("c", 3)]
    assert list(m) == ["d"]


def test_callback_sees_an_already_rotated_map() -> None:
    seen: list[int] = []
    holder: list[RotatingMap[str, int]] = []
    m: RotatingMap[str, int] = RotatingMap(2, lambda k, v: seen.append(len(holder[0])))
    holder.append(m)
    m.put("a", 1)
    m.put("b", 2)
    m.rotate()
    m.rotate()
    assert seen == [0, 0]


def test_len_iter_items_span_all_buckets_newest_first() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("old", 1)
    m.rotate()
    m.put("mid", 2)
    m.rotate()
    m.put("new", 3)
    assert len(m) == 3
    assert list(m) == ["new", "mid", "old"]
    assert list(m.items()) == [("new", 3), ("mid", 2), ("old", 1)]
    assert repr(m) == "RotatingMap(bucket sizes newest->oldest: [1, 1, 1])"


def test_clear_does_not_call_back() -> None:
    calls: list[str] = []
    m: RotatingMap[str, int] = RotatingMap(2, lambda k, v: calls.append(k))
    m.put("a", 1)
    m.clear()
    assert len(m) == 0
    m.rotate()
    m.rotate()
    assert calls == []


def test_pickles_without_a_callback() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    copy = pickle.loads(pickle.dumps(m))
    assert list(copy.items()) == [("b", 2), ("a", 1)]
    assert copy.rotate() == []
    assert copy.rotate() == [("a", 1)]


# A reference model: key -> (value, rotations left before it expires).
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5), st.integers()),
        st.tuples(st.just("pop"), st.integers(0, 5), st.just(0)),
        st.tuples(st.just("rotate"), st.just(0), st.just(0)),
    ),
    max_size=60,
)


@given(num_buckets=st.integers(2, 5), ops=_OPS)
def test_matches_a_reference_model(num_buckets: int, ops: list[tuple[str, int, int]]) -> None:
    m: RotatingMap[int, int] = RotatingMap(num_buckets)
    model: dict[int, tuple[int, int]] = {}
    for op, key, value in ops:
        if op == "put":
            m.put(key, value)
            model[key] = (value, num_buckets)
        elif op == "pop":
            expected = model.pop(key, None)
            assert m.pop(key) == (None if expected is None else expected[0])
        else:
            expired = sorted(m.rotate())
            assert expired == sorted((k, v) for k, (v, left) in model.items() if left == 1)
            model = {k: (v, left - 1) for k, (v, left) in model.items() if left > 1}
        assert len(m) == len(model)
        assert dict(m.items()) == {k: v for k, (v, _) in model.items()}
