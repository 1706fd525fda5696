"""Choosing the compiled or the pure-Python core (statestream._core), in fresh processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

import statestream
from statestream import _core
from statestream._tuple import Fields

PACKAGE = Path(statestream.__file__).resolve().parent

PROBE = """
import json, statestream, statestream._core as c
import importlib
files = {m: importlib.import_module(m).__file__ for m in c.COMPILED_MODULES}
print(json.dumps({"compiled": c.compiled(), "describe": c.describe(), "files": files}))
"""


def _probe(
    core: str | None, path: Path | None = None, code: str = PROBE
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter with ``STATESTREAM_CORE=core`` (unset: None),
    importing statestream from ``path`` (default: this checkout)."""
    env = {k: v for k, v in os.environ.items() if k != _core.ENV_VAR}
    if core is not None:
        env[_core.ENV_VAR] = core
    if path is not None:
        env["PYTHONPATH"] = str(path)
    # cwd: "-c" puts the working directory first on sys.path.
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=path or PACKAGE.parent,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_statestream_core_python_runs_every_core_module_from_its_source() -> None:
    proc = _probe("python")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["compiled"] is False
    assert out["describe"] == "pure-Python core, because STATESTREAM_CORE=python"
    assert sorted(out["files"]) == sorted(_core.COMPILED_MODULES)
    assert all(f.endswith(".py") for f in out["files"].values())


def test_the_default_runs_the_compiled_core_exactly_when_a_current_build_exists() -> None:
    proc = _probe(None)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    built = (PACKAGE / _core.BUILD_INFO).exists()
    current = (
        built
        and json.loads((PACKAGE / _core.BUILD_INFO).read_text())["sources"]
        == _core.source_digests()
    )
    assert out["compiled"] is current
    suffix = ".py" if not current else ".so"
    assert all(f.endswith(suffix) for f in out["files"].values()), out["files"]


def test_an_unknown_choice_is_refused_naming_the_choices() -> None:
    proc = _probe("fast")
    assert proc.returncode != 0
    assert "STATESTREAM_CORE='fast' is not a choice: use 'python'" in proc.stderr


def test_a_source_edited_after_the_build_runs_as_source(tmp_path: Path) -> None:
    copy = tmp_path / "statestream"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    local = copy / "runtime" / "local" / "runtime.py"
    local.write_text(local.read_text() + "\n# edited after the build\n")
    proc = _probe(None, tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["compiled"] is False
    assert all(f.startswith(str(copy)) and f.endswith(".py") for f in out["files"].values()), out
    built = (PACKAGE / _core.BUILD_INFO).exists()
    reason = "the sources changed since it was built" if built else "is not built"
    assert reason in out["describe"]
    # Asking for the compiled core then is an error that says why.
    forced = _probe("compiled", tmp_path)
    assert forced.returncode != 0
    assert "STATESTREAM_CORE=compiled, but" in forced.stderr


def test_fields_is_a_sequence_and_a_list_is_not_fields() -> None:
    # The compiled Fields once shared Sequence's ABC registry, so any list passed
    # as Fields and declared outputs kept raw lists.
    assert isinstance(Fields("a"), Sequence)
    assert not isinstance(["a"], Fields)
    assert not isinstance(("a",), Fields)


@pytest.mark.parametrize("module", _core.COMPILED_MODULES)
def test_every_core_module_has_its_source(module: str) -> None:
    assert _core.source_path(module).is_file()


def test_the_mypyc_build_type_checks_with_no_dependency_installed(tmp_path: Path) -> None:
    # A first `pip install -e .` builds before any dependency is installed. In
    # session 7 strict mypy then rejected code that mentions orjson or PyYAML
    # (typed Any when missing), mypycify failed, and the install quietly fell
    # back to the pure-Python core. Here mypy looks for packages in an empty
    # venv, as that build does, with the build's flags.
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    root = Path(_core.__file__).resolve().parent.parent
    paths = [str(_core.source_path(m).relative_to(root)) for m in _core.COMPILED_MODULES]
    checked = subprocess.run(
        [
            sys.executable, "-m", "mypy",
            "--python-executable", str(bare / "bin" / "python"),
            "--cache-dir", str(tmp_path / "cache"),
            *_core.MYPYC_FLAGS, *paths,
        ],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr


EDGES = """
import json, statestream
from statestream.runtime.local import LocalRuntime, next_edge_of
from statestream.testing import ListSpout
b = statestream.TopologyBuilder("t")
b.set_spout("s", ListSpout([1]))
rt = LocalRuntime(b.build(), {})
rt._edge_state = (1 << 61) + 12345
edges = [rt.next_edge() for _ in range(50_000)]
# a remote queue's generator (next_edge_of) takes the same steps
drawn, x = [], (1 << 61) + 12345
for _ in range(50_000):
    x = next_edge_of(x)
    drawn.append(x)
assert drawn == edges
print(json.dumps(edges))
"""


def test_edge_ids_are_the_same_on_both_cores_nonzero_62_bit_and_distinct() -> None:
    runs = {}
    for core in ("python", None):
        proc = _probe(core, code=EDGES)
        assert proc.returncode == 0, proc.stderr
        runs[core] = json.loads(proc.stdout)
    assert runs["python"] == runs[None]
    edges = runs[None]
    assert all(0 < e < 1 << 62 for e in edges)
    assert len(set(edges)) == len(edges)
    assert max(edges).bit_length() == 62
