"""A mistake in the user's topology file (a syntax error, a failed import,
``topology()`` raising) is a usage error: exit 2 and one line naming the user's
file and line, the whole traceback only with ``--verbose``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_process import statestream as _statestream

CASES = {
    "syntax": (
        "x = 1\ndef topology()\n    pass\n",
        "statestream: error: topology file 's.py', line 2: SyntaxError: expected ':'",
    ),
    "import": (
        "import os\nimport no_such_module_here\n",
        "statestream: error: topology file 's.py', line 2: ModuleNotFoundError: "
        "No module named 'no_such_module_here'",
    ),
    "raises": (
        "def topology():\n    raise ValueError('no input named')\n",
        "statestream: error: topology file 's.py', line 2: ValueError: no input named",
    ),
    "raises deeper": (
        "from helper import build\n\ndef topology():\n    return build()\n",
        "statestream: error: topology file 's.py', line 4, from helper.py, line 2: "
        "KeyError: 'input'",
    ),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["run", "topology"])
def test_a_broken_topology_file_is_one_line_and_exit_2(
    tmp_path: Path, case: str, command: str
) -> None:
    source, expected = CASES[case]
    (tmp_path / "s.py").write_text(source)
    (tmp_path / "helper.py").write_text("def build():\n    return {}['input']\n")
    args = (
        ["run", "s.py", "--until-idle", "--no-progress"]
        if command == "run"
        else ["topology", "s.py"]
    )
    done = _statestream(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [expected], done.stderr


def test_verbose_shows_the_whole_traceback(tmp_path: Path) -> None:
    (tmp_path / "s.py").write_text(CASES["raises"][0])
    done = _statestream("run", "s.py", "--until-idle", "--no-progress", "--verbose", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert "raise ValueError('no input named')" in done.stderr
    assert done.stderr.splitlines()[-1] == CASES["raises"][1]


def test_a_module_topology_that_raises_names_its_file(tmp_path: Path) -> None:
    (tmp_path / "flows.py").write_text(CASES["raises"][0])
    done = _statestream("topology", "flows:topology", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "statestream: error: topology module 'flows', flows.py, line 2: ValueError: no input named"
    ]
