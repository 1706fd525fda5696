"""Builds the compiled per-tuple core (see statestream/_core.py).

Everything else about the package is in pyproject.toml. The modules listed
in ``statestream._core.COMPILED_MODULES`` are compiled with mypyc into C
extensions; if that cannot be done (no C compiler, a mypyc failure) the
install goes on without them and statestream runs its pure-Python core,
saying so in one line at start. ``_build_info.json`` records the digests of
the sources the extensions were built from, so that a checkout edited after
the build runs its sources rather than stale machine code.

The extensions and their record go where the package is installed from: the
build tree (``build_lib``, which a wheel packs) for ``python -m build`` and
``pip install`` of a sdist or a folder, the source tree as well for
``pip install -e .`` (and ``setup.py build_ext --inplace``), whose package
is the source tree.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any, Final

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _core_module() -> Any:
    # Loaded by path: importing the package would need its dependencies,
    # which the build environment does not have.
    spec = importlib.util.spec_from_file_location("_core", HERE / "statestream" / "_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Read as the pure-Python core would be: whatever the environment asks
    # for, nothing is built yet.
    saved = os.environ.get("STATESTREAM_CORE")
    os.environ["STATESTREAM_CORE"] = "python"
    try:
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del os.environ["STATESTREAM_CORE"]
        else:
            os.environ["STATESTREAM_CORE"] = saved
    return module


CORE = _core_module()
BUILD_INFO_NAME: Final[str] = CORE.BUILD_INFO


def _warn(message: str) -> None:
    print(f"statestream: {message}; the pure-Python core will run", file=sys.stderr)


def _clear(package: Path) -> None:
    """Drop the extensions and the build record under ``package`` (a statestream
    package folder), so that a module no longer compiled, or a failed build,
    leaves no machine code to load."""
    (package / BUILD_INFO_NAME).unlink(missing_ok=True)
    for old in package.rglob("*.so"):
        if _loadable(old.name):
            old.unlink()


def _loadable(name: str) -> bool:
    """Whether this interpreter would load the extension file ``name``: another
    Python version's build (``x.cpython-312-...so`` seen from 3.11) stays, so that
    the checkout can hold one compiled core per version (.ci/run's passes)."""
    return any(
        name.endswith(suffix) and "." not in name[: -len(suffix)]
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
    )


class OptionalBuildExt(build_ext):
    """build_ext that records what it built, where the package is installed from,
    and never fails the install."""

    def _targets(self) -> list[Path]:
        """The package folders that get the extensions: the build tree's, and the
        source tree's too when the package is the source tree (editable)."""
        targets = [Path(self.build_lib).resolve() / "statestream"]
        if self.inplace:  # setuptools sets it for an editable install too (editable_mode)
            targets.append(HERE / "statestream")
        return targets

    def run(self) -> None:
        targets = self._targets()
        for package in targets:
            _clear(package)
        try:
            super().run()
        except Exception as exc:  # a missing compiler surfaces here
            for package in targets:  # what did build would be a partial core
                _clear(package)
            _warn(f"the compiled core could not be built ({_first_line(exc)})")
            return
        # The digests of the sources the extensions were built from: build_py
        # copies them unchanged, so they are the installed .py files' too.
        record = _record("compiled")
        for package in targets:
            if package.is_dir():
                (package / BUILD_INFO_NAME).write_text(record)


def _record(core: str) -> str:
    return json.dumps({"core": core, "sources": CORE.source_digests()}, indent=1) + "\n"


class PurePy(build_py):
    """build_py that marks a build without the compiled core (STATESTREAM_BUILD_CORE=0,
    the py3-none-any wheel), so that the installed package says it is the
    pure-Python wheel rather than a failed build."""

    def run(self) -> None:
        super().run()
        if not BUILD_CORE and not self.editable_mode:
            (Path(self.build_lib) / "statestream" / BUILD_INFO_NAME).write_text(_record("python"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# The commands that only read the package's metadata. pip runs setup.py three
# times for one install (build requirements, metadata, then the build), and
# mypycify type-checks and translates the core at every run of setup.py (6 s
# on an idle machine, far more under load): only a run that builds needs it.
_METADATA_ONLY: Final = frozenset({"egg_info", "dist_info", "sdist"})


def _metadata_only(argv: list[str]) -> bool:
    # The first command decides: setuptools' build backend runs one command
    # per call (its options, such as dist_info's --output-dir DIR, follow it).
    command = next((a for a in argv[1:] if not a.startswith("-")), None)
    return command in _METADATA_ONLY


# STATESTREAM_BUILD_CORE=0 builds without the compiled core: with no extension
# modules, the wheel is pure Python, tagged py3-none-any (tools/build_release.py).
BUILD_CORE: Final = os.environ.get("STATESTREAM_BUILD_CORE", "1") != "0"


def ext_modules() -> list[Any]:
    if not BUILD_CORE:
        return []
    if _metadata_only(sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        _warn(f"mypyc is not installed ({exc})")
        return []
    paths = [str(CORE.source_path(m).relative_to(HERE)) for m in CORE.COMPILED_MODULES]
    try:
        return list(
            mypycify(
                # See MYPYC_FLAGS: on a first install no dependency is there yet.
                [*CORE.MYPYC_FLAGS, *paths],
                opt_level="3",
                group_name="statestream._core_native",
            )
        )
    except BaseException as exc:  # mypyc reports type errors with SystemExit
        _warn(f"mypyc failed ({exc!r})")
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt, "build_py": PurePy})
