"""The savepoint's pure decisions (``statestream._savepoint_plan``): what a store holds,
where each component's state goes on import, and every refusal, one line each."""

from __future__ import annotations

from typing import Any

import pytest

from statestream import ConfigError
from statestream._savepoint_plan import (
    BOLT,
    SPOUT,
    STATE,
    STATEFUL,
    Part,
    exported_parts,
    parse_renames,
    plan_import,
    task_of,
    transactional_parts,
)

# The savepoint of a word count: a spout with positions, a stateful bolt on 2 tasks.
PARTS = {"lines": Part(SPOUT, 1), "count": Part(STATEFUL, 2)}
SAME = {"lines": Part(SPOUT, 1), "split": Part(BOLT, 2), "count": Part(STATEFUL, 2)}


def test_task_namespaces_are_told_from_the_runtimes_own() -> None:
    assert task_of("count-0") == ("count", 0)
    assert task_of("my-bolt-12") == ("my-bolt", 12)
    assert task_of("$checkpointspout-0") is None
    assert task_of("$layout") is None
    assert task_of("count") is None
    assert task_of("count-x") is None


def test_the_parts_of_a_store_come_from_layout_positions_and_namespaces() -> None:
    namespaces = ["$checkpointspout-0", "$layout", "count-0", "count-1", "old-0", "old-3"]
    parts = exported_parts(namespaces, {"count": 2, "gone": 1}, ["lines-0", "lines-1"])
    assert parts == {
        "count": Part(STATEFUL, 2),
        "gone": Part(STATEFUL, 1),  # in $layout with no entries (it stored nothing)
        "lines": Part(SPOUT, 2),
        "old": Part(STATE, 4),  # kind unknown: a namespace of its own only
    }
    assert transactional_parts(["$transactional-t", "$transactional-t-sp", "x-0"], "t") == ["sp"]


def _plan(target: Any = SAME, **kw: Any) -> Any:
    return plan_import("wc", PARTS, target, **kw)


def test_an_unchanged_topology_takes_everything_as_it_is() -> None:
    plan = _plan()
    assert plan.renamed == {"lines": "lines", "count": "count"}
    assert plan.added == () and plan.rescaled == () and plan.notes == ()
    assert [plan.namespace(ns) for ns in ("count-1", "lines-0", "$layout")] == [
        "count-1",
        "lines-0",
        "$layout",
    ]


def test_renamed_added_and_rescaled_components() -> None:
    target = {
        "lines": Part(SPOUT, 1),
        "total": Part(STATEFUL, 3),
        "extra": Part(STATEFUL, 1),
    }
    plan = _plan(target, renames={"count": "total"})
    assert plan.component("count") == "total"
    assert plan.namespace("count-1") == "total-1"
    assert plan.added == ("extra",)
    assert plan.rescaled == (("total", 2, 3),)
    assert plan.notes == (
        "renamed: 'count' -> 'total'",
        "starts empty: stateful bolt 'extra' (no state in the savepoint)",
    )
    assert plan.by_component({"count": 2}) == {"total": 2}
    assert plan.by_namespace({"lines-0": {"line": 4}}) == {"lines-0": {"line": 4}}


def test_drop_leaves_out_what_the_topology_no_longer_has() -> None:
    plan = _plan({"lines": Part(SPOUT, 1)}, drop=True)
    assert plan.component("count") is None
    assert plan.namespace("count-0") is None
    assert plan.by_component({"count": 2}) == {}
    assert plan.notes == ("left out: the state of stateful bolt 'count' (--drop)",)
    # A spout dropped: its positions go (it reads from the start).
    plan = _plan({"count": Part(STATEFUL, 2)}, drop=True)
    assert plan.by_namespace({"lines-0": 1}) == {}


def test_without_the_target_topology_the_savepoint_goes_in_as_it_is() -> None:
    plan = _plan(None, renames={"count": "total"}, topology="other")
    assert plan.topology == "other" and plan.source == "wc"
    assert plan.namespace("count-0") == "total-0"
    assert plan.namespace("lines-0") == "lines-0"


def test_a_transactional_topologys_records_follow_its_name_and_spouts() -> None:
    plan = plan_import("t", {"sp": Part(STATE, 1)}, None, topology="u", renames={"sp": "source"})
    assert plan.namespace("$transactional-t") == "$transactional-u"
    assert plan.namespace("$transactional-t-sp") == "$transactional-u-source"
    assert plan.namespace("$transactional-tx") == "$transactional-tx"  # another topology's


REFUSALS = [
    pytest.param(
        {"lines": Part(SPOUT, 1)},
        {},
        "the savepoint holds state of stateful bolt 'count' (2 tasks), which topology 'wc' "
        "does not have: give its new name with --rename count=NEW, or leave its state out "
        "with --drop",
        id="removed-bolt",
    ),
    pytest.param(
        SAME,
        {"renames": {"cnt": "count"}},
        "--rename cnt=count: the savepoint holds no state of a component 'cnt'; it has "
        "'count', 'lines'",
        id="rename-unknown-source",
    ),
    pytest.param(
        SAME,
        {"renames": {"count": "tally"}},
        "--rename count=tally: topology 'wc' has no component 'tally'; it has 'count', "
        "'lines', 'split'",
        id="rename-unknown-target",
    ),
    pytest.param(
        SAME,
        {"renames": {"lines": "count"}},
        "components 'count' and 'lines' of the savepoint would both become 'count'; rename "
        "one of them elsewhere (--rename lines=OTHER)",
        id="rename-collision",
    ),
    pytest.param(
        {"lines": Part(SPOUT, 1), "count": Part(BOLT, 2)},
        {},
        "component 'count' is a stateful bolt in the savepoint and a bolt in topology 'wc': "
        "its state has nowhere to go; --rename count=BOLT to a stateful bolt, or leave its "
        "state out with --drop",
        id="stateful-into-plain-bolt",
    ),
    pytest.param(
        {"src": Part(SPOUT, 1), "lines": Part(BOLT, 1), "count": Part(STATEFUL, 2)},
        {},
        "component 'lines' is a spout in the savepoint and a bolt in topology 'wc': its "
        "positions have nowhere to go; --rename lines=SPOUT to a spout, or leave its "
        "positions out with --drop (its input is then read from the start)",
        id="spout-into-bolt",
    ),
    pytest.param(
        {"lines": Part(SPOUT, 2), "count": Part(STATEFUL, 2)},
        {},
        "spout 'lines' has 2 tasks in topology 'wc' and had 1 in the savepoint: a spout's "
        "positions are per task, so import with its parallelism at 1 (and change it later "
        "if the spout can)",
        id="spout-parallelism",
    ),
    pytest.param(
        None,
        {"drop": True},
        "--drop needs the topology to import into (--topology FILE.py or module:attribute), "
        "to know which components it no longer has",
        id="drop-without-topology",
    ),
]


@pytest.mark.parametrize(("target", "kw", "message"), REFUSALS)
def test_each_refusal_is_one_line_naming_the_fix(target: Any, kw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _plan(target, **kw)
    assert str(caught.value) == message
    assert "\n" not in message


def test_a_spout_parallelism_change_is_refused_even_with_drop() -> None:
    # Dropping a spout's positions would read its input again into kept counts.
    with pytest.raises(ConfigError, match="positions are per task"):
        _plan({"lines": Part(SPOUT, 2), "count": Part(STATEFUL, 2)}, drop=True)


def test_a_kind_mismatch_with_drop_leaves_the_state_out() -> None:
    plan = _plan({"lines": Part(SPOUT, 1), "count": Part(BOLT, 2)}, drop=True)
    assert plan.component("count") is None
    assert plan.notes == ("left out: the state of stateful bolt 'count', a bolt now (--drop)",)


@pytest.mark.parametrize(
    ("items", "expected"),
    [
        ((), {}),
        (("a=b",), {"a": "b"}),
        ((" a = b ", "c=d"), {"a": "b", "c": "d"}),
    ],
)
def test_renames_parse(items: tuple[str, ...], expected: dict[str, str]) -> None:
    assert parse_renames(items) == expected


@pytest.mark.parametrize("items", [("a",), ("a=",), ("=b",), ("a=b", "a=c")])
def test_a_bad_rename_is_refused(items: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError, match="give OLD=NEW, once per component"):
        parse_renames(items)
