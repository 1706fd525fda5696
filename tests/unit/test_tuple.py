"""Fields, Values and Tuple: access by index and name, provenance, errors."""

from __future__ import annotations

import pickle

import pytest

from statestream import DEFAULT_STREAM, Fields, Tuple, Values
from statestream._tuple import TICK_STREAM, Origin


def make(values: list[object], *names: str, stream: str = DEFAULT_STREAM) -> Tuple:
    return Tuple(values, Origin("split", 7, 1, stream, Fields(*names)))


# -- Fields -------------------------------------------------------------------


def test_fields_from_names_or_iterables_are_equal() -> None:
    assert Fields("a", "b") == Fields(["a", "b"]) == Fields("a", ["b"])
    assert Fields("a", "b") == ["a", "b"] == Fields("a", "b")
    assert Fields("a", "b") == ("a", "b")
    assert Fields("a", "b") != Fields("b", "a")
    assert hash(Fields("a", "b")) == hash(Fields(["a", "b"]))
    assert list(Fields("x", "y")) == ["x", "y"]
    assert len(Fields("x", "y")) == 2
    assert Fields("x", "y")[1] == "y"
    assert "x" in Fields("x") and "z" not in Fields("x")
    assert repr(Fields("a", "b")) == "Fields('a', 'b')"


def test_fields_index_of_and_select() -> None:
    f = Fields("word", "count", "lang")
    assert [f.index_of(n) for n in ("word", "count", "lang")] == [0, 1, 2]
    assert f.select(["lang", "word"], ["hi", 3, "en"]) == ["en", "hi"]


def test_fields_unknown_name_lists_the_fields() -> None:
    with pytest.raises(KeyError, match=r"no field 'wrod'; fields are \['word', 'count'\]"):
        Fields("word", "count").index_of("wrod")


def test_fields_duplicates_are_rejected_by_name() -> None:
    with pytest.raises(ValueError, match=r"duplicate field names \['a'\]"):
        Fields("a", "b", "a")


@pytest.mark.parametrize("bad", ["", 3, None])
def test_fields_names_must_be_non_empty_strings(bad: object) -> None:
    with pytest.raises(TypeError, match="field names must be non-empty strings"):
        Fields(["ok", bad])  # type: ignore[list-item]


def test_fields_pickle() -> None:
    f = Fields("a", "b")
    assert pickle.loads(pickle.dumps(f)) == f


def test_values_is_a_list_of_its_arguments() -> None:
    v = Values("a", 1, None)
    assert v == ["a", 1, None]
    assert isinstance(v, list)
    assert Values() == []


# -- Tuple ----------------------------------------------------------------------


def test_tuple_access_by_index_and_name() -> None:
    t = make(["hello", 3], "word", "count")
    assert t[0] == "hello" and t[1] == 3
    assert t[-1] == 3
    assert t["word"] == "hello" and t["count"] == 3
    assert t.values == ["hello", 3]
    assert list(t) == ["hello", 3]
    assert len(t) == 2
    assert t.select(["count", "word"]) == [3, "hello"]
    assert t.as_dict() == {"word": "hello", "count": 3}
    assert t.fields == Fields("word", "count")


def test_tuple_get_with_default() -> None:
    t = make(["hello", None], "word", "count")
    assert t.get("word") == "hello"
    assert t.get("count", 5) is None  # a present field's None is returned, not the default
    assert t.get("missing") is None
    assert t.get("missing", 42) == 42


def test_tuple_unknown_name_and_index_raise() -> None:
    t = make(["hello"], "word")
    with pytest.raises(KeyError, match="no field 'wrod'"):
        t["wrod"]
    with pytest.raises(IndexError):
        t[1]


def test_tuple_knows_where_it_came_from() -> None:
    t = make(["x"], "word", stream="words")
    assert t.source_component == "split"
    assert t.source_stream == "words"
    assert t.source_task == 7
    assert t.source_task_index == 1
    assert not t.is_tick
    assert repr(t) == "Tuple(split[1]:words ['x'])"


def test_tick_tuples_are_recognised_by_their_stream() -> None:
    assert make([1.0], "freq", stream=TICK_STREAM).is_tick


def test_tuple_reliability_slots_start_clear() -> None:
    t = make(["x"], "word")
    assert t.anchors is None and t.root == 0
    assert t.trees() == {}
    assert t.ack_val == 0
    assert t.done is False


@pytest.mark.parametrize(
    ("anchors", "root", "edge", "trees"),
    [
        ({5: 9, 6: 1}, 0, 0, {5: 9, 6: 1}),  # several trees: the dict
        (None, 5, 9, {5: 9}),  # one tree: two int slots
        (None, 5, 0, {5: 0}),  # an edge that cancelled (two anchors in one tree)
    ],
)
def test_tuple_pickles_with_values_origin_and_trees(
    anchors: dict[int, int] | None, root: int, edge: int, trees: dict[int, int]
) -> None:
    t = Tuple(("a", 1), Origin("s", 0, 0, "default", Fields("w", "n")), anchors, -1, root, edge)
    assert t.trees() == trees
    t.done = True
    copy = pickle.loads(pickle.dumps(t))
    assert copy.values == ["a", 1]
    assert copy["n"] == 1
    assert copy.trees() == trees
    assert (copy.root, copy.edge, copy.anchors) == (root, edge, anchors)
    assert (copy.source_component, copy.source_stream) == ("s", "default")
    # Delivery state does not travel: the copy is a fresh, un-acked tuple.
    assert copy.done is False and copy.ack_val == 0
