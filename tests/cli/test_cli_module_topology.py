"""A topology named by its module (issue 48, the quick start from the package):
``statestream run statestream.examples.wordcount`` runs the word count that ships
in the package, with its corpus as package data, from any folder; a module
without ``:attribute`` gives its ``topology``, as a file does. The checkout's
``examples/wordcount.py`` is the same file, and runs as before."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest
from cli_process import statestream

import statestream.examples.wordcount as packaged

CHECKOUT = Path(__file__).resolve().parents[2]


def _counts(path: Path) -> Counter[str]:
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    return Counter({row["word"]: row["count"] for row in rows})


def test_the_packaged_word_count_runs_from_an_empty_folder_on_its_packaged_corpus(
    tmp_path: Path,
) -> None:
    done = statestream(
        "run", "statestream.examples.wordcount", "--until-idle", "--no-progress",
        "--set", "wordcount.output=counts.jsonl",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    corpus = packaged.CORPUS
    assert corpus.parent == Path(packaged.__file__).parent  # package data, not the checkout's
    assert _counts(tmp_path / "counts.jsonl") == Counter(corpus.read_text("utf-8").split())
    assert "running 'wordcount'" in done.stderr


def test_the_checkout_example_is_the_packaged_module() -> None:
    # One file, two ways to name it: no copy to drift.
    assert (CHECKOUT / "examples" / "wordcount.py").resolve() == Path(packaged.__file__).resolve()
    assert (CHECKOUT / "examples" / "corpus.txt").resolve() == packaged.CORPUS.resolve()


def test_a_users_module_without_attribute_gives_its_topology(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(
        "from statestream.examples.wordcount import topology as wordcount\n\n"
        "def topology():\n    return wordcount()\n"
    )
    done = statestream("topology", "flows", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "sentences" in done.stdout and "count" in done.stdout


@pytest.mark.parametrize("target", ["statestream.examples.nope", "nope.flows", "wordcount"])
def test_an_unknown_module_is_one_line_and_exit_2(tmp_path: Path, target: str) -> None:
    done = statestream("run", target, "--until-idle", "--no-progress", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"statestream: error: {target!r} is neither a .py file nor an importable module; e.g. "
        "examples/wordcount.py, statestream.examples.wordcount or mypkg.flows:topology"
    ]


def test_run_help_names_the_packaged_word_count() -> None:
    done = statestream("run", "--help")
    assert done.returncode == 0, done.stderr
    assert "statestream run statestream.examples.wordcount" in " ".join(done.stdout.split())
