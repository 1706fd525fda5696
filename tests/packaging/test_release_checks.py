"""The checks ``tools/build_release.py`` runs on every artefact before twine's
(issue 48, item 2), on the file lists of wheels and sdists: a compiled wheel
missing one extension, tagged ``linux_x86_64`` or without its license is
refused, as is a pure wheel carrying an extension or a sdist carrying a build
of the checkout. The real artefacts are built by the tool itself and by
``test_wheel.py`` (slow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from statestream import _core
from statestream._core import COMPILED_MODULES

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> Any:
    spec = importlib.util.spec_from_file_location(
        "build_release", ROOT / "tools" / "build_release.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TOOL = _tool()
DIST_INFO = "statestream-0.1.0.dist-info"
BASE = [
    f"{DIST_INFO}/licenses/LICENSE",
    f"{DIST_INFO}/METADATA",
    "statestream/_build_info.json",
    "statestream/examples/corpus.txt",
    "statestream/__init__.py",
]
EXTENSIONS = [
    m.replace(".", "/") + ".cpython-312-x86_64-linux-gnu.so" for m in COMPILED_MODULES
] + ["statestream/_core_native__mypyc.cpython-312-x86_64-linux-gnu.so"]
MANYLINUX = ["cp312-cp312-manylinux_2_17_x86_64", "cp312-cp312-manylinux2014_x86_64"]


def _without(names: list[str], dropped: str) -> list[str]:
    return [n for n in names if n != dropped]


WHEELS = {
    "compiled, complete": (BASE + EXTENSIONS, MANYLINUX, []),
    "pure, complete": (BASE, ["py3-none-any"], []),
    "compiled, tagged for this machine only": (
        BASE + EXTENSIONS,
        ["cp312-cp312-linux_x86_64"],
        ["tag cp312-cp312-linux_x86_64 is not manylinux (a package index refuses it)"],
    ),
    "compiled, one extension missing": (
        _without(BASE + EXTENSIONS, EXTENSIONS[3]),
        MANYLINUX,
        [f"no extension for {COMPILED_MODULES[3]} (the compiled core is incomplete)"],
    ),
    "compiled, no build record": (
        _without(BASE, "statestream/_build_info.json") + EXTENSIONS,
        MANYLINUX,
        ["no statestream/_build_info.json"],
    ),
    "pure, without its license and corpus": (
        BASE[2:3] + BASE[4:],
        ["py3-none-any"],
        ["no LICENSE in its .dist-info/licenses", "no statestream/examples/corpus.txt"],
    ),
    "pure, with an extension": (
        BASE + EXTENSIONS[:1],
        ["py3-none-any"],
        [f"a pure wheel with extensions: {EXTENSIONS[0]}"],
    ),
    "no tag": (BASE, [], ["no Tag in its WHEEL metadata"]),
}


@pytest.mark.parametrize("case", WHEELS)
def test_wheel_problems(case: str) -> None:
    names, tags, expected = WHEELS[case]
    assert TOOL.wheel_problems(names, tags, COMPILED_MODULES) == expected


SDIST = ["LICENSE", "README.md", "setup.py", "pyproject.toml", "statestream/examples/corpus.txt"]
SDISTS = {
    "complete": (SDIST, []),
    "no license": (SDIST[1:], ["no LICENSE"]),
    "a build of the checkout inside": (
        [
            *SDIST,
            "statestream/_tuple.cpython-311-x86_64-linux-gnu.so",
            "statestream/_build_info.json",
        ],
        [
            "built files in the sources: statestream/_build_info.json, "
            "statestream/_tuple.cpython-311-x86_64-linux-gnu.so"
        ],
    ),
}


@pytest.mark.parametrize("case", SDISTS)
def test_sdist_problems(case: str) -> None:
    names, expected = SDISTS[case]
    assert TOOL.sdist_problems(names) == expected


def test_wheel_tags_reads_every_tag_of_the_wheel_metadata() -> None:
    metadata = (
        "Wheel-Version: 1.0\nGenerator: auditwheel 6.8.2\nRoot-Is-Purelib: false\n"
        "Tag: cp312-cp312-manylinux_2_17_x86_64\nTag: cp312-cp312-manylinux2014_x86_64\n"
    )
    assert TOOL.wheel_tags(metadata) == MANYLINUX


WHY_NOT_BUILT = {
    "a checkout": (True, None, "the compiled core is not built (pip install -e . builds it"),
    "the pure-Python wheel": (
        False,
        {"core": "python", "sources": {}},
        "this install is the pure-Python wheel (py3-none-any",
    ),
    "a failed build": (False, None, "the compiled core is not built in this install (it was"),
    "a record of a compiled build without its extensions": (
        False,
        {"core": "compiled", "sources": {}},
        "the compiled core is not built in this install (it was",
    ),
}


@pytest.mark.parametrize("case", WHY_NOT_BUILT)
def test_why_the_core_is_not_built_tells_the_pure_wheel_from_a_failed_build(case: str) -> None:
    # What the start-up line says: the pure wheel is a choice, not a failure to fix.
    checkout, record, said = WHY_NOT_BUILT[case]
    assert _core._why_not_built(checkout, record).startswith(said)
