"""Wall clock and peak RSS: statestream's documented word count against Bytewax 0.21.1 (issue 14).

    python bench/bench_wallclock.py [--rounds 6] [--sentences 200000] [--tree /tmp/wc_tree] [--sync]
    python bench/bench_wallclock.py --tree NEW --against OLD [--rounds 6]   (two versions)

Issue 14 asks for Storm's word count written as documented (examples/wordcount.py:
state.get/state.put per word, the count emitted anchored, the word acked; split
and count with 2 tasks each; acking on; the sqlite provider; a checkpoint every
second) to take at most half the wall clock of Bytewax 0.21.1's `stateful_map`
with recovery on (sqlite snapshots every second) on the same 2,000,000-word
corpus (bench/corpus.py), with a peak RSS of at most 100 MB.

Configurations, each run as its own process under `/usr/bin/time -f '%e %M'`
(a fresh parent per run, so the RSS is that process's alone):

- statestream EO: `python -m statestream run examples/wordcount.py --config
  config/local.yaml --until-idle --no-progress --set wordcount.input=CORPUS --set
  wordcount.output=OUT --set topology.state.checkpoint.interval.ms=1000 --set
  statestream.state.exactly.once=true`, in a fresh empty working directory (so the
  sqlite file `./statestream-data/state.db` of config/local.yaml starts empty).
- statestream ALO: the same with `statestream.state.exactly.once=false`.
- Bytewax: bench/bench_bytewax.py's dataflow (FileSource -> flat_map(str.split)
  -> key_on -> stateful_map running count -> a sink keeping the last count per
  word), 1 worker, `RecoveryConfig` on a directory initialised with `python -m
  bytewax.recovery DIR 1` (not timed), `epoch_interval` 1 s, in the venv that
  bench_bytewax.py creates (bench/results/venv-bytewax, `python3 -m venv` +
  `pip install bytewax==0.21.1`; created on first use).

The wall clock is the whole process, interpreter start-up and imports included,
for both systems; the table also gives each system's own inner time (statestream's
"idle after N s", Bytewax's time around `cli_main`) and the process's CPU time
(user + system), which other work on a shared machine disturbs less than wall clock.

statestream runs from a private copy of the work tree (`--tree`, PYTHONPATH set
to it) with STATESTREAM_CORE=compiled, so a stale in-tree build cannot fall back
to pure Python unnoticed. `--sync` makes that copy first (`git archive HEAD`,
then `setup.py build_ext --inplace`) and records the commit it was taken from; a
copy made by hand is used as it is, its commit read from TREE/.wallclock-commit.

Runs are interleaved, one round being statestream EO, Bytewax, statestream ALO,
Bytewax, so every statestream run has a Bytewax run next to it; besides the
ratio of medians the table gives the median of the per-pair ratios (each
statestream run against the Bytewax run right after it). Every run's final
counts are checked exactly against collections.Counter of the corpus, and a few
words' counts are printed from both systems.

`--against OLD` runs no Bytewax: it interleaves the statestream runs of two
built copies (rounds of old EO, new EO, old ALO, new ALO) and prints old/new
as medians and as the median of per-pair ratios, the way to see a code change
in wall clock on a noisy machine (a copy made with `git archive COMMIT | tar
-x -C DIR`, built with `setup.py build_ext --inplace`, its commit written to
DIR/.wallclock-commit).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

TIMEOUT_S = 1800
PROBE_WORDS = ["w0", "w1", "w9", "w99", "w999", "w19999"]


def sync_tree(tree: Path) -> None:
    """Put the committed HEAD of the repository in `tree` and build the compiled core there.

    HEAD, not the working tree: someone else's uncommitted edits in statestream/
    are not what the figures should be about, and a commit names what was measured.
    """
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    print(f"building the compiled core in {tree} ...", file=sys.stderr, flush=True)
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tree,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    (tree / ".wallclock-commit").write_text(commit + "\n")


def timed(
    cmd: list[str], cwd: str, env: dict[str, str] | None = None
) -> tuple[float, float, float, str, str]:
    """Run cmd under /usr/bin/time; return (wall s, CPU s, peak RSS MB, stdout, stderr)."""
    fd, tfile = tempfile.mkstemp(prefix="wallclock-time-")
    os.close(fd)
    try:
        proc = subprocess.run(
            ["/usr/bin/time", "-f", "%e %U %S %M", "-o", tfile, *cmd],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
        if proc.returncode != 0:
            tail = " / ".join(proc.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"exit {proc.returncode}: {tail}")
        wall, user, system, rss_kb = Path(tfile).read_text().split()[-4:]
        return (
            float(wall),
            float(user) + float(system),
            int(rss_kb) / 1024,
            proc.stdout,
            proc.stderr,
        )
    finally:
        os.unlink(tfile)


def wordcount_cmd(
    tree: Path,
    corpus: str,
    out: str | None,
    exactly_once: bool,
    config: str = "local.yaml",
    interval_ms: int | None = 1000,
) -> list[str]:
    """The documented word count of `tree` on `corpus` (`out`: where to write the counts)."""
    cmd = [
        sys.executable,
        "-m",
        "statestream",
        "run",
        str(tree / "examples" / "wordcount.py"),
        "--config",
        str(tree / "config" / config),
        "--until-idle",
        "--no-progress",
        "--set",
        f"wordcount.input={corpus}",
        "--set",
        f"statestream.state.exactly.once={'true' if exactly_once else 'false'}",
    ]
    if out is not None:
        cmd += ["--set", f"wordcount.output={out}"]
    if interval_ms is not None:
        cmd += ["--set", f"topology.state.checkpoint.interval.ms={interval_ms}"]
    return cmd


def run_statestream(tree: Path, corpus: str, exactly_once: bool) -> dict:
    workdir = tempfile.mkdtemp(prefix="wallclock-ss-")
    try:
        out = f"{workdir}/counts.jsonl"
        env = dict(os.environ, PYTHONPATH=str(tree), STATESTREAM_CORE="compiled")
        cmd = wordcount_cmd(tree, corpus, out, exactly_once)
        wall, cpu, rss, _, err = timed(cmd, workdir, env)
        if "compiled core (mypyc)" not in err:
            raise RuntimeError(f"not the compiled core: {err.splitlines()[:1]}")
        m = re.search(r"idle after ([0-9.]+) s", err)
        inner = float(m.group(1)) if m else float("nan")
        ck = re.search(r"^\$checkpointspout\s+([0-9,]+)", err, re.M)
        got: dict[str, int] = collections.Counter()
        with open(out) as f:
            for line in f:
                d = json.loads(line)
                got[d["word"]] += d["count"]
        return {
            "wall": wall,
            "cpu": cpu,
            "rss": rss,
            "inner": inner,
            "counts": dict(got),
            "checkpoint_tuples": int(ck.group(1).replace(",", "")) if ck else None,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_bytewax(py: Path, corpus: str) -> dict:
    workdir = tempfile.mkdtemp(prefix="wallclock-bw-")
    try:
        rdir = f"{workdir}/recovery"
        os.mkdir(rdir)
        subprocess.run(
            [str(py), "-m", "bytewax.recovery", rdir, "1"], check=True, capture_output=True
        )
        cmd = [
            str(py),
            str(HERE / "bench_bytewax.py"),
            "--worker",
            "--corpus",
            corpus,
            "--workdir",
            workdir,
            "--workers",
            "1",
            "--recovery-dir",
            rdir,
        ]
        wall, cpu, rss, out, _ = timed(cmd, workdir)
        stamp = json.loads(out.strip().splitlines()[-1])
        got: dict[str, int] = {}
        for f in sorted(Path(workdir).glob("counts-*.json")):
            got.update(json.loads(f.read_text()))
        snap = Path(rdir, "part-0.sqlite3").stat().st_size / 1e6
        return {
            "wall": wall,
            "cpu": cpu,
            "rss": rss,
            "inner": stamp["end"] - stamp["start"],
            "counts": got,
            "snapshot_mb": snap,
        }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def vocab_corpus(words: int, vocab: int, seed: int = 7) -> str:
    """A corpus of `words` words in lines of 10, drawn Zipf-like from `vocab` words."""
    import random

    path = HERE / "results" / f"corpus-vocab{vocab}-{words}-{seed}.txt"
    if not path.exists():
        rng = random.Random(seed)
        ws = rng.choices(
            [f"w{i}" for i in range(vocab)], [1.0 / (i + 1) ** 0.5 for i in range(vocab)], k=words
        )
        tmp = path.with_suffix(".tmp")
        tmp.write_text("".join(" ".join(ws[i : i + 10]) + "\n" for i in range(0, words, 10)))
        tmp.rename(path)
    return str(path)


def rss_scan(tree: Path) -> None:
    """Peak RSS of the exactly-once count against corpus size, vocabulary and queue size."""
    from corpus import corpus_path

    env = dict(os.environ, PYTHONPATH=str(tree), STATESTREAM_CORE="compiled")
    base = [
        sys.executable,
        "-c",
        "import statestream._cli, statestream.runtime.local, statestream.provider, sqlite3",
    ]
    _wall, _cpu, rss, _, _ = timed(base, "/tmp", env)
    print(f"| interpreter + statestream imports, no run | - | - | - | {rss:.0f} |")
    cases = [
        (f"bench corpus, {s * 10:,} words", str(corpus_path(s)), {})
        for s in (50_000, 100_000, 200_000, 400_000)
    ]
    cases += [
        (f"{v:,}-word vocabulary, 2,000,000 words", vocab_corpus(2_000_000, v), {})
        for v in (2_000, 200_000)
    ]
    cases += [
        (
            f"bench corpus, 2,000,000 words, receive buffer {b}",
            str(corpus_path(200_000)),
            {"topology.executor.receive.buffer.size": b},
        )
        for b in (128, 8192)
    ]
    for label, corpus, extra in cases:
        r = None
        workdir = tempfile.mkdtemp(prefix="wallclock-rss-")
        try:
            cmd = wordcount_cmd(tree, corpus, None, True, interval_ms=None) + [
                x for k, v in extra.items() for x in ("--set", f"{k}={v}")
            ]
            wall, _cpu, rss, _, _err = timed(cmd, workdir, env)
            db = Path(workdir, "statestream-data", "state.db").stat().st_size / 1e6
            with open(corpus) as f:
                distinct = len(set(f.read().split()))
            r = f"| {label} | {distinct:,} | {wall:.1f} | {db:.1f} | {rss:.0f} |"
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        print(r, flush=True)


def fmt(xs: list[float], f: str = "{:.2f}") -> tuple[str, str, str]:
    return f.format(statistics.median(xs)), f.format(min(xs)), f.format(max(xs))


def compare_trees(new: Path, old: Path, rounds: int, sentences: int) -> None:
    """Rounds of (old EO, new EO, old ALO, new ALO): the wall-clock ratio of two
    versions, each pair run back to back so that both see the same machine."""
    from corpus import corpus_path

    corpus = str(corpus_path(sentences))
    with open(corpus) as f:
        expected = dict(collections.Counter(f.read().split()))

    def commit_of(tree: Path) -> str:
        f = tree / ".wallclock-commit"
        return f.read_text().strip() if f.exists() else "unknown"

    walls: dict[tuple[str, bool], list[float]] = {}
    inners: dict[tuple[str, bool], list[float]] = {}
    for rnd in range(rounds):
        for eo in (True, False):
            for label, tree in (("old", old), ("new", new)):
                r = run_statestream(tree, corpus, eo)
                if r["counts"] != expected:
                    raise SystemExit(f"{label} tree {tree}: counts differ from the corpus")
                walls.setdefault((label, eo), []).append(r["wall"])
                inners.setdefault((label, eo), []).append(r["inner"])
                print(
                    f"  round {rnd + 1}: {label} {'EO' if eo else 'ALO'}: {r['wall']:.2f} s wall, "
                    f"{r['inner']:.2f} s inner",
                    file=sys.stderr,
                    flush=True,
                )
    print(
        f"command: python bench/bench_wallclock.py --tree {new} --against {old}"
        f" --rounds {rounds}; new {commit_of(new)}, old {commit_of(old)}; "
        f"{sentences:,} sentences; every run's counts exact"
    )
    print()
    print(
        "| mode | old wall s median | new wall s median | old / new, median of per-pair "
        "ratios (min-max) | old / new, medians of inner time |"
    )
    print("|---|---:|---:|---:|---:|")
    for eo in (True, False):
        o, n = walls[("old", eo)], walls[("new", eo)]
        per_pair = [a / b for a, b in zip(o, n, strict=True)]
        inner = statistics.median(inners[("old", eo)]) / statistics.median(inners[("new", eo)])
        print(
            f"| {'exactly-once' if eo else 'at-least-once'} | {statistics.median(o):.2f} | "
            f"{statistics.median(n):.2f} | {statistics.median(per_pair):.2f}x "
            f"({min(per_pair):.2f}-{max(per_pair):.2f}) | {inner:.2f}x |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument(
        "--rounds",
        type=int,
        default=6,
        help="rounds of (statestream EO, Bytewax, statestream ALO, Bytewax)",
    )
    ap.add_argument("--sentences", type=int, default=200_000)
    ap.add_argument("--tree", default="/tmp/wc_tree", help="private copy of the work tree")
    ap.add_argument(
        "--sync", action="store_true", help="copy the repository to --tree and build it first"
    )
    ap.add_argument(
        "--against",
        metavar="TREE",
        help="instead of Bytewax: interleave --tree's runs with those of another built copy "
        "(exactly-once and at-least-once), to compare two versions of statestream",
    )
    ap.add_argument(
        "--rss-scan",
        action="store_true",
        help="instead: peak RSS against corpus size, vocabulary and queue size",
    )
    args = ap.parse_args()

    cmd = (
        "python bench/bench_wallclock.py"
        + "".join(
            f" --{k} {v}"
            for k, v, d in (
                ("rounds", args.rounds, 6),
                ("sentences", args.sentences, 200_000),
                ("tree", args.tree, "/tmp/wc_tree"),
            )
            if v != d
        )
        + (" --sync" if args.sync else "")
    )
    tree = Path(args.tree).resolve()
    if args.sync:
        sync_tree(tree)
    if not (tree / "statestream").is_dir():
        raise SystemExit(f"{tree} holds no statestream copy: run with --sync")
    commit_file = tree / ".wallclock-commit"
    commit = commit_file.read_text().strip() if commit_file.exists() else "unknown (copied by hand)"
    if args.rss_scan:
        print(f"command: python bench/bench_wallclock.py --rss-scan; tree {tree}, commit {commit}")
        print("statestream, exactly-once, sqlite, checkpoint every 1 s (one run each)\n")
        print("| corpus | distinct words | wall s | state.db MB | peak RSS MB |")
        print("|---|---:|---:|---:|---:|")
        rss_scan(tree)
        return

    if args.against:
        compare_trees(tree, Path(args.against).resolve(), args.rounds, args.sentences)
        return

    from bench_bytewax import ensure_venv
    from corpus import corpus_path

    py = ensure_venv()
    corpus = str(corpus_path(args.sentences))
    with open(corpus) as f:
        expected = dict(collections.Counter(f.read().split()))
    words = sum(expected.values())

    names = ["statestream, exactly-once", "Bytewax 0.21.1", "statestream, at-least-once"]
    results: dict[str, list[dict]] = {n: [] for n in names}
    pairs: dict[str, list[float]] = {names[0]: [], names[2]: []}
    probes: dict[str, dict[str, int]] = {}
    exact: dict[str, list[bool]] = {n: [] for n in names}
    load_before = os.getloadavg()
    t_start = time.time()
    for rnd in range(args.rounds):
        for ss_name, eo in ((names[0], True), (names[2], False)):
            for name in (ss_name, names[1]):
                r = (
                    run_statestream(tree, corpus, eo)
                    if name != names[1]
                    else run_bytewax(py, corpus)
                )
                ok = r["counts"] == expected
                exact[name].append(ok)
                probes.setdefault(name, {w: r["counts"].get(w, 0) for w in PROBE_WORDS})
                r.pop("counts")
                results[name].append(r)
                extra = (
                    f", checkpoint tuples {r['checkpoint_tuples']}"
                    if "checkpoint_tuples" in r
                    else f", snapshot db {r['snapshot_mb']:.1f} MB"
                )
                print(
                    f"  round {rnd + 1}: {name}: {r['wall']:.2f} s wall, {r['cpu']:.2f} s CPU, {r['inner']:.2f} s inner, "
                    f"{r['rss']:.0f} MB RSS, exact={ok}{extra}",
                    file=sys.stderr,
                    flush=True,
                )
            pairs[ss_name].append(results[names[1]][-1]["wall"] / results[ss_name][-1]["wall"])

    print(f"command: {cmd}")
    print(f"tree: {tree}, copied from commit {commit}; STATESTREAM_CORE=compiled")
    print(
        f"corpus: {args.sentences:,} sentences, {words:,} words, {len(expected):,} distinct; "
        f"{args.rounds} rounds of (statestream EO, Bytewax, statestream ALO, Bytewax), "
        f"{time.time() - t_start:.0f} s in all; python {platform.python_version()}, "
        f"{os.cpu_count()} cores; 1-min load average {load_before[0]:.2f} before, "
        f"{os.getloadavg()[0]:.2f} after"
    )
    print()
    print(
        "| configuration | runs | wall s median | min | max | inner s median | CPU s median | "
        "peak RSS MB median | max | exact |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for n in names:
        rs = results[n]
        med, lo, hi = fmt([r["wall"] for r in rs])
        inner = statistics.median(r["inner"] for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        rss = [r["rss"] for r in rs]
        print(
            f"| {n} | {len(rs)} | {med} | {lo} | {hi} | {inner:.2f} | {cpu:.2f} | "
            f"{statistics.median(rss):.0f} | {max(rss):.0f} | {all(exact[n])} |"
        )
    print()
    bw = statistics.median(r["wall"] for r in results[names[1]])
    bw_in = statistics.median(r["inner"] for r in results[names[1]])
    bw_cpu = statistics.median(r["cpu"] for r in results[names[1]])
    print(
        "| statestream mode | Bytewax / statestream, medians of wall | median of per-pair ratios "
        "(min-max) | medians of inner time | medians of CPU time | goal |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for n in (names[0], names[2]):
        ss = statistics.median(r["wall"] for r in results[n])
        ss_in = statistics.median(r["inner"] for r in results[n])
        ss_cpu = statistics.median(r["cpu"] for r in results[n])
        pr = pairs[n]
        print(
            f"| {n.split(', ')[1]} | {bw / ss:.2f}x | {statistics.median(pr):.2f}x "
            f"({min(pr):.2f}-{max(pr):.2f}) | {bw_in / ss_in:.2f}x | {bw_cpu / ss_cpu:.2f}x | >= 2x |"
        )
    print()
    print(
        "final counts of a few words (first run of each; corpus = collections.Counter of the file):"
    )
    print("| word | corpus | " + " | ".join(names) + " |")
    print("|---|---:|" + "---:|" * len(names))
    for w in PROBE_WORDS:
        print(
            f"| {w} | {expected.get(w, 0):,} | "
            + " | ".join(f"{probes[n][w]:,}" for n in names)
            + " |"
        )


if __name__ == "__main__":
    main()
