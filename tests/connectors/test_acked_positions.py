"""Every resumable source's ``acked_position()`` at an at-least-once restart (issue 44,
item 6): with two messages of one stream in flight, the EARLIER one not acked
and the later one acked, a restart sought to the acked position must read the
earlier one again (it resumes at or before it), whatever happened to it: still
in flight, failed and waiting to be emitted again, emitted again, or carried
over a restart in a position's replay list.

Runs on FileSpout over a file and over a folder, and on the broker spouts
against their real servers (Redis stream, JetStream stream, RabbitMQ stream
queue), the sources of ``test_sources.py``'s conformance suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_sources import SOURCE_PARAMS, Recorder, Source, make_source, opened

from statestream import FileSpout, Spout

LINES = [f"l{i}" for i in range(8)]


class FileSource(Source):
    """A text file read by a FileSpout (a line is one message; one stream)."""

    kind = "file"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__()
        self.path = tmp_path / f"{self.name}.txt"

    def produce(self, lines: list[str]) -> None:
        with self.path.open("a") as f:
            f.writelines(f"{line}\n" for line in lines)

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        return FileSpout(self.path)

    def drop(self) -> None:
        return


class FolderSource(FileSource):
    """A folder read by a FileSpout (its one file is the stream)."""

    kind = "folder"

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        self.folder = tmp_path / self.name
        self.folder.mkdir()
        self.path = self.folder / "part-000.txt"

    def spout(self, name: str | list[str] | None = None, url: str | None = None) -> Spout:
        return FileSpout(self.folder)


@pytest.fixture(params=["file", "folder", *SOURCE_PARAMS])
def source(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Source]:
    made: Source
    if request.param == "file":
        made = FileSource(tmp_path)
    elif request.param == "folder":
        made = FolderSource(tmp_path)
    else:
        made = make_source(request, request.param)
    yield made
    made.drop()


def text(values: list[Any]) -> str:
    """The line a tuple carries (a file spout emits ``[offset, line]``)."""
    return str(values[-1])


def emit(spout: Spout, recorder: Recorder, count: int) -> list[Any]:
    """next_tuple until ``count`` more tuples came (30 s at most); their message ids."""
    want = len(recorder.emitted) + count
    for _ in range(100_000):
        if len(recorder.emitted) >= want:
            break
        spout.next_tuple()
    assert len(recorder.emitted) == want, f"{len(recorder.emitted)} of {want} emitted"
    return [msg_id for _, msg_id in recorder.emitted[want - count :]]


def ids_by_line(recorder: Recorder) -> dict[str, Any]:
    return {text(values): msg_id for values, msg_id in recorder.emitted}


def resumed(source: Source, where: Any) -> list[str]:
    """What a restart sought to ``where`` reads, to the end of the stream."""
    spout = source.spout()
    recorder = opened(spout, where)
    for _ in range(100_000):
        before = len(recorder.emitted)
        spout.next_tuple()
        if len(recorder.emitted) > before:
            spout.ack(recorder.emitted[-1][1])
        elif recorder.emitted and text(recorder.emitted[-1][0]) == LINES[-1]:
            break
    spout.close()
    return [text(values) for values, _ in recorder.emitted]


def assert_resumes_at_or_before(source: Source, where: Any, unacked: str) -> None:
    again = resumed(source, where)
    assert unacked in again, f"a restart at {where} does not read {unacked} again: {again}"
    assert again[-1] == LINES[-1]


@pytest.mark.parametrize("earlier", ["in-flight", "failed", "failed-and-emitted-again"])
def test_a_restart_reads_the_earlier_unacked_message_again(source: Source, earlier: str) -> None:
    source.produce(LINES)
    spout = source.spout()
    recorder = opened(spout, None)
    emit(spout, recorder, 6)
    ids = ids_by_line(recorder)
    for line in ("l0", "l1", "l3", "l4", "l5"):  # the later l3..l5 acked, l2 not
        spout.ack(ids[line])
    if earlier != "in-flight":
        spout.fail(ids["l2"])
    if earlier == "failed-and-emitted-again":
        emit(spout, recorder, 1)
        assert text(recorder.emitted[-1][0]) == "l2"
    where = spout.acked_position()  # type: ignore[attr-defined]
    spout.close()
    assert_resumes_at_or_before(source, where, "l2")


@pytest.mark.parametrize("acked", [("l4", "l6"), ("l6",)], ids=["l4-acked", "l4-not-acked"])
def test_a_restart_from_a_position_with_replays_reads_each_unacked_one_again(
    source: Source, acked: tuple[str, ...]
) -> None:
    # An exactly-once position (a store an exactly-once run wrote, continued
    # with exactly.once false) carries its failed messages in the order they
    # failed, here l4 then l1, not in stream order: a run continuing from it
    # at-least-once must still resume at or before the earliest unacked, l1.
    source.produce(LINES)
    first = source.spout()
    recorder = opened(first, None)
    emit(first, recorder, 6)
    ids = ids_by_line(recorder)
    first.fail(ids["l4"])
    first.fail(ids["l1"])
    for line in ("l0", "l2", "l3", "l5"):
        first.ack(ids[line])
    where = first.position()  # type: ignore[attr-defined]
    first.close()

    second = source.spout()
    recorder = opened(second, where)
    emit(second, recorder, 3)  # the two replays, then l6
    ids = ids_by_line(recorder)
    assert set(ids) == {"l1", "l4", "l6"}
    for line in acked:  # never l1
        second.ack(ids[line])
    acked = second.acked_position()  # type: ignore[attr-defined]
    second.close()
    assert_resumes_at_or_before(source, acked, "l1")
