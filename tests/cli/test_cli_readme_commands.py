"""The commands of the README and of the docs' getting-started and guide pages, run as
a new user runs them in a fresh checkout, leave no
untracked file in it (what they write goes to the ignored ``statestream-data/``),
and the transactional examples say where their result went."""

from __future__ import annotations

import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from docs_pages import guide_pages, statestream_commands

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    """Each ``python3 -m statestream`` command of the README's and the guides' sh blocks."""
    # Once each: the README repeats the getting-started page's set-up command.
    return list(dict.fromkeys(statestream_commands([ROOT / "README.md", *guide_pages()])))


def _checkout(tmp_path: Path) -> Path:
    """A fresh checkout of the tracked files as they are now, committed."""
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, check=True, capture_output=True
    ).stdout.split(b"\0")
    work = tmp_path / "checkout"
    for name in filter(None, files):
        source = ROOT / os.fsdecode(name)
        if source.is_file():
            target = work / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
    git = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "checkout"]):
        subprocess.run([*git, *args], cwd=work, check=True, capture_output=True)
    return work


def _run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    args = shlex.split(command.replace("$PWD", str(cwd)))
    assert args[:3] == ["python3", "-m", "statestream"], command
    # -P: statestream as installed (its compiled core), not the copy's sources.
    return subprocess.run(
        [sys.executable, "-P", "-m", "statestream", *args[3:]],
        cwd=cwd,
        input="y\n",  # state clear asks first
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@pytest.mark.slow
def test_the_readme_commands_leave_no_untracked_file(tmp_path: Path) -> None:
    # The Spark runs are left to the Spark tests (a JVM each; one needs a cluster).
    commands = [c for c in _readme_commands() if "--runner spark" not in c]
    assert any("transactional_words.py" in c for c in commands), commands
    work = _checkout(tmp_path)
    for command in commands:
        done = _run(command, work)
        assert done.returncode == 0, (command, done.stderr)
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=work, check=True, capture_output=True, text=True
    ).stdout
    assert status == "", f"the documented commands left files in the checkout:\n{status}"


@pytest.mark.parametrize(
    ("example", "said", "table"),
    [
        ("transactional_global_count", "global-count: the count goes to", "counts"),
        ("transactional_words", "words: the counts go to", "words"),
    ],
)
def test_a_transactional_example_says_where_its_result_went(
    tmp_path: Path, example: str, said: str, table: str
) -> None:
    done = _run(f"python3 -m statestream run {ROOT}/examples/{example}.py --until-idle", tmp_path)
    assert done.returncode == 0, done.stderr
    database = tmp_path / "statestream-data" / f"{example}.db"
    lines = [line for line in done.stderr.splitlines() if line.startswith(said)]
    assert len(lines) == 1 and lines[0].startswith(f"{said} {database} (sqlite table"), done.stderr
    with sqlite3.connect(database) as conn:
        assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] > 0
