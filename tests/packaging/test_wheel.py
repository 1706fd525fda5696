"""The package as a user installs it (issue 48): built with ``python -m build``,
installed into a fresh venv, run from an empty folder.

A wheel must carry the compiled core and its build record, so that the
installed package runs it (before, the record stayed in the source tree and
every wheel ran pure Python); a sdist installed where no C compiler works
must install all the same and run the pure-Python core, saying so in one
line; the pure-Python wheel (``STATESTREAM_BUILD_CORE=0``) is tagged
``py3-none-any`` and says what it is. Every one carries the license and runs
the quick start from the package, ``statestream run
statestream.examples.wordcount``, from an empty folder. They build with mypyc
in pip's isolated build environment and install the dependencies from the
package index: minutes, hence ``slow``. ``tools/build_release.py`` builds the
release itself (manylinux wheels, twine check).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

ROOT = Path(__file__).resolve().parents[2]
WORDCOUNT = ROOT / "examples" / "wordcount.py"
PACKAGED_CORPUS = ROOT / "statestream" / "examples" / "corpus.txt"
CORPUS = "the cat sat\nthe dog sat\nthe end\n"
COUNTS = {"the": 3, "cat": 1, "sat": 2, "dog": 1, "end": 1}

PROBE = """
import importlib, json, statestream, statestream._core as c
files = {m: importlib.import_module(m).__file__ for m in c.COMPILED_MODULES}
print(json.dumps({"compiled": c.compiled(), "describe": c.describe(),
                  "package": statestream.__file__, "files": files}))
"""


def _env(**extra: str) -> dict[str, str]:
    """This environment without what would import the checkout instead of the install
    (the suite's PYTHONPATH) or pick the core."""
    drop = {"PYTHONPATH", "STATESTREAM_CORE", "VIRTUAL_ENV", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return {**env, **extra}


def _run(
    args: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env or _env(), capture_output=True, text=True
    )
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _venv(path: Path, *packages: str | Path, env: dict[str, str] | None = None) -> Path:
    """A plain venv (no system site-packages: the editable install stays out) with
    ``packages`` installed from the index; its python."""
    _run([sys.executable, "-m", "venv", path], path.parent)
    python = path / "bin" / "python"
    if packages:
        _run([python, "-m", "pip", "install", "-q", *packages], path.parent, env)
    return python


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the package is built from, copied from this checkout without its
    compiled core (an editable build leaves one beside the sources) and away from
    its build folders, which another build may be using."""
    dest = tmp_path_factory.mktemp("source") / "statestream"
    dest.mkdir()
    ignore = shutil.ignore_patterns(
        "*.so", "_build_info.json", "__pycache__", "*.egg-info", "*.pyc"
    )
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dest / name)
    for name in ("statestream", "providers"):
        shutil.copytree(ROOT / name, dest / name, ignore=ignore, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def builder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv with ``build`` (the package builder, from the index)."""
    return _venv(tmp_path_factory.mktemp("builder") / "venv", "build>=1.2")


def _count_words(statestream: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """The word count of the quick start, run by the installed ``statestream`` from
    ``folder`` (empty but for the topology and its corpus)."""
    shutil.copy2(WORDCOUNT, folder / "wordcount.py")
    (folder / "corpus.txt").write_text(CORPUS)
    proc = _run(
        [
            statestream, "run", "wordcount.py", "--until-idle",
            "--set", "wordcount.input=corpus.txt",
            "--set", "wordcount.output=counts.jsonl",
        ],
        folder,
    )  # fmt: skip
    rows = [json.loads(line) for line in (folder / "counts.jsonl").read_text().splitlines()]
    assert {row["word"]: row["count"] for row in rows} == COUNTS
    return proc


def _count_packaged_words(statestream: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """The quick start from the package: the word count and its corpus as installed."""
    proc = _run(
        [statestream, "run", "statestream.examples.wordcount", "--until-idle",
         "--set", "wordcount.output=packaged.jsonl"],
        folder,
    )  # fmt: skip
    rows = [json.loads(line) for line in (folder / "packaged.jsonl").read_text().splitlines()]
    expected = Counter(PACKAGED_CORPUS.read_text("utf-8").split())
    assert Counter({row["word"]: row["count"] for row in rows}) == expected
    return proc


def _licensed_wheel(wheel: Path) -> list[str]:
    """The wheel's file names, once its metadata says Apache-2.0 and it carries LICENSE."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        text = zf.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text.splitlines(), text[:800]
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert "statestream/examples/corpus.txt" in names
    return names


def _probe(python: Path, folder: Path) -> dict[str, object]:
    out: dict[str, object] = json.loads(_run([python, "-c", PROBE], folder).stdout)
    return out


def test_a_wheel_installed_in_a_fresh_venv_runs_the_compiled_core(
    source: Path, builder: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    _run([builder, "-m", "build", "--wheel", "--outdir", dist, source], tmp_path)
    (wheel,) = dist.glob("statestream-*.whl")
    _licensed_wheel(wheel)
    python = _venv(tmp_path / "venv", wheel)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _probe(python, empty)
    site = tmp_path / "venv" / "lib"
    assert str(out["package"]).startswith(str(site)), out  # the install, not the checkout
    assert out["compiled"] is True, out["describe"]
    assert out["describe"] == "compiled core (mypyc)"
    files = out["files"]
    assert isinstance(files, dict) and all(f.endswith(".so") for f in files.values()), files
    proc = _count_words(tmp_path / "venv" / "bin" / "statestream", empty)
    assert "with the compiled core (mypyc)" in proc.stderr, proc.stderr
    (empty / "wordcount.py").unlink()
    (empty / "corpus.txt").unlink()
    proc = _count_packaged_words(tmp_path / "venv" / "bin" / "statestream", empty)
    assert "with the compiled core (mypyc)" in proc.stderr, proc.stderr


def test_the_pure_python_wheel_is_py3_none_any_and_says_what_it_is(
    source: Path, builder: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    build_env = _env(STATESTREAM_BUILD_CORE="0")
    _run([builder, "-m", "build", "--wheel", "--outdir", dist, source], tmp_path, build_env)
    (wheel,) = dist.glob("statestream-*.whl")
    assert wheel.name == "statestream-0.1.0-py3-none-any.whl"
    names = _licensed_wheel(wheel)
    assert not [n for n in names if n.endswith(".so")], names
    python = _venv(tmp_path / "venv", wheel)
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _probe(python, empty)
    assert out["compiled"] is False
    describe = str(out["describe"])
    assert describe.startswith("pure-Python core, because this install is the pure-Python "
                               "wheel (py3-none-any"), describe  # fmt: skip
    proc = _count_packaged_words(tmp_path / "venv" / "bin" / "statestream", empty)
    said = [line for line in proc.stderr.splitlines() if "core" in line]
    assert len(said) == 1 and describe in said[0], proc.stderr


def test_a_sdist_installed_without_a_compiler_runs_the_pure_core_saying_so_once(
    source: Path, builder: Path, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    _run([builder, "-m", "build", "--sdist", "--outdir", dist, source], tmp_path)
    (sdist,) = dist.glob("statestream-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = {m.name.partition("/")[2] for m in tar.getmembers()}
    assert {"LICENSE", "statestream/examples/corpus.txt"} <= members
    # mypyc translates the core to C, then the compiler fails on the first file.
    python = _venv(tmp_path / "venv", sdist, env=_env(CC="/bin/false"))
    empty = tmp_path / "empty"
    empty.mkdir()
    out = _probe(python, empty)
    assert str(out["package"]).startswith(str(tmp_path / "venv" / "lib")), out
    assert out["compiled"] is False
    package = Path(str(out["package"])).parent
    assert not list(package.rglob("*.so")), "a failed build leaves no part of the core"
    describe = str(out["describe"])
    assert describe.startswith("pure-Python core, because the compiled core is not built in "
                               "this install"), describe  # fmt: skip
    assert "pip install -e" not in describe  # a checkout's fix, not this user's
    proc = _count_words(tmp_path / "venv" / "bin" / "statestream", empty)
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "core" in line]
    assert len(said) == 1 and describe in said[0], proc.stderr
