"""The word count from an installed release wheel against the editable checkout, in
instructions per word (issue 48): a user who installs the wheel must run the same
compiled core as a developer's checkout.

    python bench/bench_wheel.py [--wheel PATH] [--sentences 5000,10000] [--work DIR]

``--wheel`` defaults to this interpreter's manylinux wheel in ``dist/``, which
``tools/build_release.py`` builds (the wheel a package index would serve). It
is installed into a fresh venv (no system site-packages: the editable install
stays out; the dependencies from the index). The checkout is this tree, run by
this interpreter through ``PYTHONPATH``, with its compiled core built in place
(``python3 setup.py build_ext --inplace``; refused if it is not, or stale).

Each side runs ``bench_instructions.py``'s plain word count (memory provider,
acking on) under callgrind at each ``--sentences`` size (10 words a sentence);
the marginal instructions per word between the two sizes leave out each run's
one-off costs (imports inside the measured part: pip byte-compiled the
wheel's modules, the checkout's may not be). The table is printed with the
command and which package and core each side measured; results in
bench/RESULTS-core.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_instructions import _MEASURED, callgrind_count  # noqa: E402
from corpus import corpus_path  # noqa: E402

PROBE = "import statestream._core as c; print(c.compiled(), c.describe())"


@contextmanager
def environment(**changes: str | None) -> Iterator[None]:
    """os.environ with ``changes`` (None: unset) for what callgrind_count runs."""
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for key, value in changes.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def default_wheel() -> Path:
    tag = sysconfig.get_config_var("SOABI").split("-")[1]  # cpython-311-x86_64... -> 311
    found = sorted((ROOT / "dist").glob(f"statestream-*-cp{tag}-cp{tag}-*manylinux*.whl"))
    if not found:
        raise SystemExit(
            f"no manylinux wheel for cp{tag} in dist/: run python3 tools/build_release.py "
            "first, or give --wheel PATH"
        )
    return found[-1]


def wheel_venv(wheel: Path, work: Path) -> Path:
    """A fresh venv with ``wheel`` installed; its python (a real interpreter, not a shim)."""
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--clear", venv], check=True)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STATESTREAM_CORE")}
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
        check=True,
        env=env,
    )
    return python


def checkout_path(work: Path) -> str:
    """PYTHONPATH for the checkout: the tree, and its providers as ``statestream_providers``
    (which an editable install elsewhere would otherwise provide)."""
    link = work / "path" / "statestream_providers"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(ROOT / "providers")
    return f"{ROOT}{os.pathsep}{link.parent}"


def compiled(python: str, pythonpath: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "STATESTREAM_CORE")}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [python, "-c", PROBE], capture_output=True, text=True, check=True, env=env, cwd="/"
    ).stdout.strip()
    if not out.startswith("True"):
        raise SystemExit(f"{python} (PYTHONPATH={pythonpath}) runs {out.split(' ', 1)[1]}")
    return out.split(" ", 1)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel", type=Path)
    ap.add_argument("--sentences", default="5000,10000", help="two sizes, comma-separated")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "bench-wheel")
    args = ap.parse_args()
    small, large = (int(n) for n in args.sentences.split(","))
    wheel = (args.wheel or default_wheel()).resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    sides = {
        f"the wheel ({wheel.name}), in a fresh venv": (str(wheel_venv(wheel, args.work)), None),
        "the checkout, compiled in place, through PYTHONPATH": (
            sys.executable,
            checkout_path(args.work),
        ),
    }
    for python, pythonpath in sides.values():
        compiled(python, pythonpath)
    script = str(HERE / "bench_instructions.py")
    for n in (small, large):
        corpus_path(n)  # written outside the measured runs
    counts: dict[str, list[int]] = {}
    for label, (python, pythonpath) in sides.items():
        with environment(PYTHONPATH=pythonpath, STATESTREAM_CORE=None):
            counts[label] = [
                callgrind_count(script, "--one", "--sentences", str(n), python=python)
                for n in (small, large)
            ]
    print(f"command: python bench/bench_wheel.py --sentences {small},{large}"
          + (f" --wheel {args.wheel}" if args.wheel else ""))  # fmt: skip
    for measured in _MEASURED:
        print(f"measured: {measured}")
    print()
    words = (small * 10, large * 10)
    print(
        f"| statestream measured | {words[0]:,} words: per word | {words[1]:,} words: per word "
        "| marginal per word | ratio |"
    )
    print("|---|---:|---:|---:|---:|")
    marginal = {k: (c[1] - c[0]) / (words[1] - words[0]) for k, c in counts.items()}
    base = marginal[list(sides)[1]]
    for label, (first, second) in counts.items():
        print(
            f"| {label} | {first / words[0]:,.0f} | {second / words[1]:,.0f} "
            f"| {marginal[label]:,.0f} | {marginal[label] / base:.4f} |"
        )


if __name__ == "__main__":
    main()
