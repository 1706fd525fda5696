"""FileSpout over a folder: a partitioned source read by a spout task or by range.

The two reads (``next_tuple`` on the local runtime, ``read`` by range on
Spark's executors) must give the same ``[offset, line]`` values, and a
position taken by one must be continued by the other.
"""

from __future__ import annotations

import collections
import random
from pathlib import Path
from typing import Any

import pytest

from statestream import FileSpout, PartitionedSource, run
from statestream._errors import ConfigError
from statestream._partitioned import PARTITIONS_KEY, is_partitioned, plan_ranges, split_range
from statestream.testing import FakeClock
from tests.word_bolts import Count, Split


class Collect:
    def __init__(self) -> None:
        self.items: list[tuple[list[Any], Any]] = []

    def emit(self, values: list[Any], msg_id: Any = None, stream: str = "default") -> None:
        self.items.append((list(values), msg_id))


class Context:
    component_id = "lines"

    def __init__(self, index: int = 0, tasks: int = 1) -> None:
        self.task_index, self.parallelism = index, tasks
        self.clock = FakeClock()


def folder(tmp_path: Path, files: int = 5, lines: int = 40) -> Path:
    rng = random.Random(7)
    root = tmp_path / "in"
    root.mkdir()
    for f in range(files):
        text = "".join(
            " ".join(f"w{rng.randrange(30)}" for _ in range(rng.randrange(0, 5))) + "\n"
            for _ in range(lines + f)
        )
        (root / f"part-{f:02d}.txt").write_text(text)
    (root / ".hidden").write_text("not read\n")
    return root


_OPENED: list[FileSpout] = []


@pytest.fixture(autouse=True)
def _close_spouts() -> Any:
    yield
    while _OPENED:
        _OPENED.pop().close()


def opened(path: Path, index: int = 0, tasks: int = 1) -> tuple[FileSpout, Collect]:
    spout, out = FileSpout(path), Collect()
    spout.open({}, Context(index, tasks), out)  # type: ignore[arg-type]
    _OPENED.append(spout)
    return spout, out


def drain(spout: FileSpout, out: Collect, n: int | None = None) -> list[list[Any]]:
    before = len(out.items)
    while n is None or len(out.items) - before < n:
        size = len(out.items)
        spout.next_tuple()
        if len(out.items) == size:
            break
    return [values for values, _ in out.items[before:]]


def test_a_folder_is_partitioned_and_a_file_is_not(tmp_path: Path) -> None:
    root = folder(tmp_path)
    spout, _ = opened(root)
    assert is_partitioned(spout) and isinstance(spout, PartitionedSource)
    assert list(spout.partitions()) == [f"part-{f:02d}.txt" for f in range(5)]
    single, _ = opened(root / "part-00.txt")
    assert not is_partitioned(single)
    with pytest.raises(ConfigError, match="only a folder"):
        single.partitions()


@pytest.mark.parametrize("tasks", [1, 3])
def test_next_tuple_and_ranges_read_the_same_lines(tmp_path: Path, tasks: int) -> None:
    """Each task's lines, read by next_tuple, equal its files read by ranges of any
    cut (the planner's cap and split), and the tasks together read every file."""
    root = folder(tmp_path)
    seen: list[str] = []
    for index in range(tasks):
        spout, out = opened(root, index, tasks)
        by_task = drain(spout, out)
        assert spout.exhausted() is False  # read, not acked
        for _, msg_id in out.items:
            spout.ack(msg_id)
        assert spout.exhausted()
        reader, _ = opened(root, index, tasks)
        ends = {p: reader.end_position(p) for p in reader.partitions()}
        by_range: list[list[Any]] = []
        starts: dict[str, Any] = {}
        while True:
            ranges = plan_ranges(starts, ends, reader.partitions(), limit=97)
            if not ranges:
                break
            for r in ranges:
                for piece in split_range(r, 3):
                    by_range.extend(reader.read(piece.partition, piece.start, piece.end))
                starts[r.partition] = r.end
        assert by_range == by_task
        seen.extend(reader.partitions())
    assert sorted(seen) == [f"part-{f:02d}.txt" for f in range(5)]


def test_position_is_continued_by_a_fresh_spout(tmp_path: Path) -> None:
    root = folder(tmp_path)
    whole = drain(*opened(root))
    spout, out = opened(root)
    first = drain(spout, out, 57)
    spout.fail(out.items[3][1])  # a failed line waits in the position with its text
    where = spout.position()
    assert set(where[PARTITIONS_KEY]) == set(spout.partitions())
    fresh, again = opened(root)
    fresh.seek(where)
    rest = drain(fresh, again)
    assert rest[0] == first[3]
    assert first + rest[1:] == whole


def test_acked_position_holds_back_to_the_first_unacked_line(tmp_path: Path) -> None:
    root = folder(tmp_path)
    spout, out = opened(root)
    drain(spout, out, 10)
    for _, msg_id in out.items[:4] + out.items[5:]:
        spout.ack(msg_id)
    acked = spout.acked_position()[PARTITIONS_KEY]
    assert acked["part-00.txt"] == out.items[4][0][0]
    fresh, again = opened(root)
    fresh.seek(spout.acked_position())
    assert drain(fresh, again, 1)[0] == out.items[4][0]


def test_a_position_of_another_input_is_refused(tmp_path: Path) -> None:
    root = folder(tmp_path)
    spout, _ = opened(root)
    with pytest.raises(ConfigError, match="folder"):
        spout.seek({"path": str(tmp_path / "other"), PARTITIONS_KEY: {}})
    with pytest.raises(ConfigError, match="resume=True"):
        FileSpout(root, resume=True).open({}, Context(), Collect())  # type: ignore[arg-type]


def test_a_folder_word_count_on_the_local_runtime_is_exact(tmp_path: Path) -> None:
    from statestream import TopologyBuilder

    root = folder(tmp_path)
    b = TopologyBuilder("folder-wc")
    b.set_spout("lines", FileSpout(root), 2)
    b.set_bolt("split", Split(), 2).shuffle_grouping("lines")
    b.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
    db = tmp_path / "state.db"
    conf = {
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": {"path": str(db)},
        "statestream.state.exactly.once": True,
        "topology.state.checkpoint.interval.ms": 50,
    }
    result = run(b.build(), conf, until_idle=True)
    assert not result.errors
    from statestream._registry import open_provider

    expected = collections.Counter(
        w for f in sorted(root.glob("part-*")) for w in f.read_text().split()
    )
    got: dict[str, int] = {}
    with open_provider("sqlite", {"path": str(db)}, scope="folder-wc") as provider:
        for i in range(2):
            got.update(dict(provider.get_state(f"count-{i}").items()))
    assert got == expected
