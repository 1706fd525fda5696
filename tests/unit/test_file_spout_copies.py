"""A FileSpout copies (pickle, as Topology.instantiate and Spark's shipping do) with
every setting and what a subclass added, on both cores: compiled, its fields are
not in an instance dict, so its ``__getstate__`` names them."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from typing import Any

import cloudpickle

from statestream import FileSpout
from statestream._clock import SystemClock


class GatedLines(FileSpout):
    """A user's subclass with a setting of its own."""

    def __init__(self, path: Path, gate: str) -> None:
        super().__init__(path, strip=False, encoding="latin-1", errors="replace", batch_bytes=99)
        self.gate = gate


class _Ctx:
    parallelism = 1
    task_index = 0
    component_id = "lines"
    clock = SystemClock()


class _Collector:
    def __init__(self) -> None:
        self.emitted: list[tuple[list[Any], Any]] = []

    def emit(self, values: list[Any], msg_id: Any = None, stream: str = "default") -> None:
        self.emitted.append((values, msg_id))


def _read_all(spout: FileSpout) -> list[tuple[list[Any], Any]]:
    collector = _Collector()
    spout.open({}, _Ctx(), collector)  # type: ignore[arg-type]
    try:
        while not spout.exhausted():
            spout.next_tuple()
            for _, msg_id in collector.emitted[-1:]:
                spout.ack(msg_id)
    finally:
        spout.close()
    return collector.emitted


def test_a_copy_keeps_the_settings_and_the_subclass_attributes(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_bytes(b"caf\xe9\r\nb\n")
    spout = GatedLines(path, gate="open")
    for copy in (pickle.loads(pickle.dumps(spout)), cloudpickle.loads(cloudpickle.dumps(spout))):
        assert type(copy) is GatedLines
        assert (copy.path, copy.strip, copy.encoding, copy.errors, copy.batch_limit) == (
            str(path),
            False,
            "latin-1",
            "replace",
            99,
        )
        assert copy.gate == "open"
        assert _read_all(copy) == [([0, "café\n"], 0), ([1, "b\n"], 1)]


def test_an_opened_spout_copies_its_read_state_without_its_file(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("a\nb\nc\n")
    spout = FileSpout(path_key="input", default_path=path)
    spout.open({}, _Ctx(), _Collector())  # type: ignore[arg-type]
    try:
        spout.next_tuple()
        spout.next_tuple()
        spout.fail(0)
        state = spout.__getstate__()
    finally:
        spout.close()
    copy = FileSpout()
    copy.__setstate__(state)
    assert (copy.path_key, copy.default_path, copy._path) == ("input", str(path), str(path))
    assert (copy._next_line, copy._offset, copy._in_flight) == (2, 4, {0: "a", 1: "b"})
    assert list(copy._replay) == [0]
    assert copy._file is None and copy.progress() is None


def test_every_field_of_the_spout_is_copied_or_made_again_by_open() -> None:
    # A field added to FileSpout but not to _PICKLED would be lost by every copy
    # on the compiled core only: read the fields its methods set from the source.
    from statestream import _spouts
    from statestream._core import source_path

    tree = ast.parse(source_path("statestream._spouts").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FileSpout"]
    targets = [
        t
        for node in ast.walk(cls)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
    ]
    flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
    fields = {
        t.attr
        for t in flat
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"
    }
    reopened = {"_file", "_position", "_folder"}  # set to None in a copy; open() makes them
    assert fields - reopened == set(_spouts._PICKLED)
